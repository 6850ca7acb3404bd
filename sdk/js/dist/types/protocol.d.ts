import { type CoordinatorClient } from "./http.js";
import { type AgentRecord } from "./record.js";
import type { GlobalView } from "./view.js";
/** One request to the coordinator; `kind` names the CoordinatorClient method that sends it. */
export interface Message {
    kind: "state" | "vote" | "report" | "private_report" | "settled" | "reset" | "me";
    experiment: string;
    method: string;
    path: string;
    body: Record<string, unknown> | null;
    token: string | null;
}
export type Exchange<R> = Generator<Message, R, any>;
export type Transport = (message: Message) => Promise<any>;
/** Drive `exchange`: each message through `transport`, its reply (or its error) back in. */
export declare function run<R>(exchange: Exchange<R>, transport: Transport): Promise<R>;
/** The coordinator client as a transport: each message through the client's method of its kind
 * (its retries, failovers and 429 waits kept; a rate-limited reset answers null). */
export declare function clientTransport(client: CoordinatorClient): Transport;
export interface ProtocolHooks {
    /** Save the record (and the local statistics). */
    persist: () => void;
    /** The votes of an epoch a failover lost were forgotten: the local agent restarts. */
    lostEpoch: () => void;
    /** U(0, 1), for the slow check's period (reconcileMs x U(0.5, 1.5)). */
    jitter: () => number;
}
/** The message of `kind` (see ROUTES) about `experiment` (agent/protocol.py's `message`). */
export declare function message(kind: Message["kind"], experiment: string, token: string | null, body?: Record<string, unknown> | null): Message;
/** One agent's side of the protocol (agent/protocol.py DeviceProtocol). */
export declare class DeviceProtocol {
    readonly view: GlobalView;
    readonly record: AgentRecord;
    readonly hooks: ProtocolHooks;
    readonly reconcileMs: number;
    nextCheck: number;
    votesSent: number;
    votesResent: number;
    reportsSent: number;
    settledSent: number;
    resetsLimited: number;
    checks: number;
    checkedSeq: number;
    /** CE: the global set when the coordinator took the settled message, and its epoch. */
    settledWith: Set<number> | null;
    settledEpoch: number;
    settleRefused: boolean;
    constructor(view: GlobalView, record: AgentRecord, hooks: ProtocolHooks, reconcileMs: number, nextCheck: number);
    /** The message of `kind` (see ROUTES), with this agent's token but for a state read. */
    message(kind: Message["kind"], body?: Record<string, unknown> | null): Message;
    /** Read the global state again; true if the global set changed. */
    refresh(): Exchange<boolean>;
    /** Votes of an epoch a failover lost, whose number the current epoch took again, forgotten;
     * the local agent restarts, as the reset that began the current epoch asks. */
    forgetLostEpoch(): boolean;
    /** Votes decided: on record as pending (and saved) before they are sent. */
    decide(votes: number[]): void;
    /** Send the pending votes of the current epoch, in order; another epoch's are dropped. */
    deliverDecided(): Exchange<number>;
    /** Send one vote and record its acknowledgement. */
    deliver(arm: number, epoch: number): Exchange<void>;
    /** CDE: send the report on record (a second copy is a duplicate) and record the answer. */
    deliverReport(): Exchange<void>;
    /** DSER4: ask for a new epoch; true if it began (the caller reads the state and syncs).
     * Waiting for more agents, or refused (429, not waited for): false, a local reset only. */
    reset(): Exchange<boolean>;
    /** CE only: tell the coordinator this agent settled (`done`), once per settle, again when it
     * forgot (an arm it is not counted against left, or a reset). */
    settle(done: boolean, localEpoch: number): Exchange<void>;
    /** After a restart: the votes decided and not seen acknowledged, and CDE's unanswered report,
     * sent again (a second copy is a duplicate); pending votes of another epoch dropped. */
    resendPending(): Exchange<number>;
    /** Why to ask the coordinator for this agent's votes now (agent/protocol.py check_reason);
     * `now` null: the slow check is not considered. */
    checkReason(now: number | null): string | null;
    /** Arms of acknowledged votes the coordinator lacks (agent/protocol.py missing_votes). */
    missingVotes(votedAgainst: Set<number>, beforeSeq: number): number[];
    /** If checkReason says so: GET /v1/agents/me, and the acknowledged votes it lacks sent again. */
    reconcile(now: number): Exchange<number>;
}
