/**
 * One dexp agent on a device, over HTTP alone (agent/device.py and agent/library.py, for pages
 * and Node). docs/DEVICES.md is its guide.
 *
 *   const agent = await enroll({ coordinator, experiment, ticket, storageKey });
 *   const arms = agent.choose();           // the arms to play now
 *   await agent.observe(arms, rewards);    // the rewards stay here; maybe a vote leaves
 *   agent.status;                          // "exploring" | "identified" | "tied" | "deleted"
 *   agent.close();
 *
 * What leaves the device: the ticket (once), votes (an arm index and an epoch), CE's "settled"
 * messages, DSER4's reset requests, CDE's one randomized report, reads of the public state and
 * its event stream, and GET /v1/agents/me (its own votes, to re-send what a failover lost).
 * Never a reward, a count, a mean, or which arm it plays.
 *
 * `choose` is synchronous: it applies what the follower learnt, syncs the local set with the
 * global one, and queues any vote that gives. `observe` sends: the agent's requests run one at a
 * time, in order (a queue), as the Python agent's do.
 */
import { LocalAgent } from "./agent.js";
import { type Draws } from "./draws.js";
import { CoordinatorClient } from "./http.js";
import { DeviceProtocol } from "./protocol.js";
import { AgentRecord } from "./record.js";
import { PrivateAgent } from "./private.js";
import { type SavedAgent, type StateStore } from "./storage.js";
import { GlobalView, type Status } from "./view.js";
export declare class EnrollmentRefused extends Error {
    constructor(message: string);
}
export declare class ExperimentGone extends Error {
    constructor(experiment: string);
}
export interface EnrollOptions {
    /** The coordinator's URL, or several comma-separated (failover). */
    coordinator: string;
    experiment: string;
    /** A one-time ticket (`dexp tickets issue`): used once, a reload resumes from storage. */
    ticket?: string;
    /** localStorage key (browser), or the state file's name without `.json` (Node). */
    storageKey?: string;
    /** Node: the state file (default `<storageKey>.json`). */
    stateFile?: string;
    /** Browser: how long to wait for another tab holding the same key (default 10 000 ms). */
    lockWaitMs?: number;
    /** Where to keep the agent instead (MemoryStore: nowhere). */
    storage?: StateStore;
    /** Follow the global set by SSE and polls (default true). */
    follow?: boolean;
    /** Fallback poll period, ms (default 30 000). */
    pollMs?: number;
    /** Mean period of the check of its own votes, ms (default 300 000). */
    reconcileMs?: number;
    /** Per request, ms (default 10 000). */
    timeoutMs?: number;
    /** Cap of the retry back-off, ms (default 30 000). */
    retryMaxMs?: number;
    /** The local algorithm's randomness (default: crypto.getRandomValues). */
    draws?: Draws;
}
/** One agent on a device: build it with `enroll`. */
export declare class DeviceAgent {
    readonly client: CoordinatorClient;
    readonly view: GlobalView;
    readonly record: AgentRecord;
    readonly local: LocalAgent;
    readonly store: StateStore;
    readonly reconcileMs: number;
    /** Restored from storage: no new enrollment. */
    resumed: boolean;
    /** The experiment was deleted (or deleted and created again). */
    gone: boolean;
    closed: boolean;
    /** Its side of the protocol (protocol.ts): what it sends, given the coordinator's replies. */
    readonly protocol: DeviceProtocol;
    private readonly transport;
    private queue;
    private failure;
    private change;
    private waiters;
    private unsubscribe;
    private releaseFollower;
    private onPageHide;
    private constructor();
    get votesSent(): number;
    get votesResent(): number;
    get reportsSent(): number;
    get settledSent(): number;
    get resetsLimited(): number;
    get checks(): number;
    /** See the module's doc and `enroll`. */
    static start(options: EnrollOptions): Promise<DeviceAgent | PrivateAgent>;
    private follow;
    private readonly listeners;
    /** Calls `listener(agent)` at each change of the global set the follower learns of (an arm
     * out, a reset, the identification, a tie, the deletion): read `status`, `remaining`... in it.
     * Returns the function that stops it. */
    onChange(listener: (agent: DeviceAgent) => void): () => void;
    /** Resolves once every vote, report or message decided so far is answered and saved (a page
     * may await it before navigating away; `observe` already saved what it decided). */
    flush(): Promise<void>;
    /** The arms to play now (indices into `arms`): usually one. Once identified, that arm; settled
     * (one arm left locally), that arm (its rewards teach nothing more); under CDE, none between
     * its report and the answer. Throws ExperimentGone if the experiment was deleted. */
    choose(): number[];
    /** The rewards of the arms `choose` gave, in the same order: the arms it voted against
     * (usually none). The rewards stay on the device. */
    observe(arms: number[], rewards: number[]): Promise<number[]>;
    /** Resolves true at the next change of the global set the follower learns of, false after
     * `timeoutMs`: what an agent with nothing to play (settled, or reported) does meanwhile. */
    waitForChange(timeoutMs?: number): Promise<boolean>;
    /** Read the experiment's state now; true if the global set changed. */
    refresh(): Promise<boolean>;
    /** What the coordinator counted of this agent's own messages (GET /v1/agents/me, its own
     * token): `votes` (this epoch's, each `counted` or `arm_out`), `reported` (CDE), `reports_sent`
     * and `reports_left` (LDP), and `waiting`, the experiment's counted messages not yet in the
     * public counts (published `publish_batch` at a time): those may not show this agent's
     * messages yet, this does. Queued after what the agent is sending (`flush` first). */
    me(): Promise<Record<string, any>>;
    /** Stop following, save the local statistics, release the storage key. Votes decided and not
     * yet acknowledged are on record: the next start sends them. */
    close(): Promise<void>;
    get experiment(): string;
    get agentId(): string;
    /** The arms' names, by index. */
    get arms(): string[];
    /** The global set, as far as this agent knows. */
    get remaining(): number[];
    get epoch(): number;
    /** exploring, identified (one arm left), tied (several left, none can reach the threshold
     * with the agents enrolled), or deleted. */
    get status(): Status | "deleted";
    /** The identified arm's index (null until then). */
    get bestArm(): number | null;
    /** The experiment ended (identified, tied or deleted). A tie reopens if agents enroll. */
    get done(): boolean;
    /** Its local set holds one arm (no vote until the global set changes), or under CDE its
     * report is drawn: `waitForChange` rather than play. */
    get settled(): boolean;
    /** CDE: its one report is drawn (sent, or to be sent again at the next start). */
    get reported(): boolean;
    /** A request failure of the queued work (not a 404: that is `gone`) is thrown at the next call. */
    private check;
    /** `work` after what is queued; a 404 marks the experiment gone. */
    private run;
    /** Queued work whose failure is thrown at the next call (choose has no promise to reject). */
    private background;
    private catchUp;
    private syncLocal;
    /** Votes of an epoch a failover lost forgotten (the protocol's), the local agent restarted. */
    private forgetLostEpoch;
    /** The current epoch began with a reset this agent did not see as one: restart as it asks. */
    private restartLocal;
    /** One exchange of the protocol through the coordinator client. */
    private exchange;
    /** Save the record and the local statistics (the whole state: one small JSON document). */
    private persist;
    /** Votes decided: on record as pending (and saved) before they are sent. */
    private decide;
    /** Send the pending votes of the current epoch, in order. */
    private deliverDecided;
    private deliverReport;
    /** DSER4: ask for a new epoch; refused (429) or waiting for more agents, reset locally only. */
    private reset;
    /** CE only: tell the coordinator this agent settled, once per settle, again when it forgot. */
    private settle;
    /** After a restart: the votes decided and not seen acknowledged, and CDE's unanswered report,
     * sent again (a second copy is a duplicate, harmless). Pending votes of another epoch dropped. */
    private resendPending;
    /** Why to ask the coordinator for this agent's votes now (protocol.ts checkReason). */
    private checkReason;
    /** The check of its own votes, queued if due (choose is where a settled agent still comes). */
    private reconcileSoon;
    private reconciling;
    /** If checkReason says so: GET /v1/agents/me, and the acknowledged votes it lacks sent again. */
    private reconcile;
}
/** The agent saved in `store` if it is one of this experiment the coordinator still knows, else
 * a new one enrolled with `ticket` and saved before anything else; `saved` null when new. */
export declare function restoreOrEnroll(client: CoordinatorClient, view: GlobalView, store: StateStore, ticket: string | undefined): Promise<{
    saved: SavedAgent | null;
    record: AgentRecord;
}>;
/** The agent saved under `storageKey` if it is one of this experiment, else a new one enrolled
 * with `ticket` and saved there before anything else. See DeviceAgent; in an LDP experiment
 * (`algorithm: "ldp"`) a PrivateAgent (private.ts): one arm drawn from the allocation, one
 * private report per activation. */
export declare function enroll(options: EnrollOptions): Promise<DeviceAgent | PrivateAgent>;
