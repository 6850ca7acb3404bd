/** @dexp/agent: the local side of dexp's agents (votes, never rewards; LDP's private reports), for
 * browsers and Node. */
export { cryptoDraws, inertDraws, replayDraws } from "./draws.js";
export type { Draw, Draws } from "./draws.js";
export { LocalAgent, randomize, reportProbabilities } from "./agent.js";
export type { AgentSpec, AgentState } from "./agent.js";
export { ArmSelection, DEFAULT_PARAMS, DPSuccessiveElimination, FixedBudget, KLLUCB, KLSuccessiveElimination, LUCB, SuccessiveElimination, SER3, SER4, StitchedSuccessiveElimination, StitchedLUCB, SUBROUTINES, checkParams, subroutineClass, } from "./subroutines.js";
export type { LocalParams, SubroutineState } from "./subroutines.js";
export { dpEliminationGap, dpEpochLength, eliminationLevel, eliminationRadius, klBernoulli, klLower, klLucbLevel, klUpper, lucbRadius, samplesPerArm, stitchedRadius, } from "./radius.js";
export { VERSION } from "./version.js";
export { DeviceAgent, EnrollmentRefused, ExperimentGone, enroll, restoreOrEnroll } from "./device.js";
export { PrivateAgent, PrivateProtocol, drawArm, keepProbability, privatize, reportReward, unitReward } from "./private.js";
export type { PrivateReport } from "./private.js";
export type { EnrollOptions } from "./device.js";
export { ClientClosed, CoordinatorClient, CoordinatorError, RateLimited, coordinatorUrls } from "./http.js";
export { GlobalSetFollower, SSEParser, shareFollower } from "./follower.js";
export type { Change, FollowOptions } from "./follower.js";
export { AgentLocked, BrowserStore, FileStore, MemoryStore, defaultStore } from "./storage.js";
export type { SavedAgent, StateStore } from "./storage.js";
export { GlobalView, agentSpec, corruptedLocalConfidence } from "./view.js";
export type { Status } from "./view.js";
export { AgentRecord } from "./record.js";
export { DeviceProtocol, clientTransport, message, run } from "./protocol.js";
export type { Exchange, Message, ProtocolHooks, Transport } from "./protocol.js";
