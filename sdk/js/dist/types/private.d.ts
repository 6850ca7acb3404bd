/**
 * LDP on a device (docs/LDP.md; agent/private_device.py and agent/device.py's PrivateDeviceAgent,
 * for pages and Node): no learning here, one private report per activation.
 *
 *   const agent = await enroll({ coordinator, experiment, ticket, storageKey });  // reads the allocation
 *   const [arm] = agent.choose();          // drawn from the published allocation (crypto uniforms)
 *   await agent.observe([arm], [reward]);  // one bit leaves: privatize(reward), with the arm and seq
 *
 * What leaves the device: the arm, one bit (common/ldp.py's Mechanism.privatize: stochastic
 * rounding, then randomized response at dp_epsilon) and the report's number seq = 1..B
 * (B = reports_per_agent). Never the reward. The report is saved (storage's `private.pending`)
 * before it is sent: a reload after a lost reply sends that same report again (a duplicate
 * changes nothing), never a second privatization. Once B reports are sent, nothing more leaves;
 * `choose` still gives an arm from the allocation (the leader once identified).
 */
import type { EnrollOptions } from "./device.js";
import { type Draws } from "./draws.js";
import { type CoordinatorClient } from "./http.js";
import { type Exchange, type Transport } from "./protocol.js";
import type { AgentRecord } from "./record.js";
import type { StateStore } from "./storage.js";
import type { GlobalView } from "./view.js";
/** p = e^eps / (1 + e^eps), written as common/ldp.py's Mechanism.keep. */
export declare function keepProbability(dpEpsilon: number): number;
/** common/ldp.py's Mechanism.privatize: the report's bit for a reward in [0, 1] from two uniforms
 * in [0, 1): b = [uRound < reward], kept when uFlip < p, else flipped. eps-locally private. */
export declare function privatize(dpEpsilon: number, reward: number, uRound: number, uFlip: number): number;
/** common/ldp.py's unit_reward: clipped to [low, high], mapped to [0, 1]. */
export declare function unitReward(reward: number, low: number, high: number): number;
/** agent/private_device.py's report_reward: the reward the mechanism takes, or a RangeError. */
export declare function reportReward(reward: number, rewards: string, range: [number, number] | null): number;
/** agent/private_device.py's draw_arm: the allocation's inverse CDF at u (weights <= 0 never). */
export declare function drawArm(allocation: number[], u: number): number;
/** What leaves the device at an activation. */
export interface PrivateReport {
    arm: number;
    bit: number;
    seq: number;
}
/** One device's side of LDP, without I/O (agent/private_device.py's PrivateProtocol). */
export declare class PrivateProtocol {
    readonly experiment: string;
    readonly record: AgentRecord;
    readonly persist: () => void;
    readonly dpEpsilon: number;
    readonly budget: number;
    readonly nArms: number;
    readonly rewards: string;
    readonly rewardRange: [number, number] | null;
    allocation: number[];
    remaining: Set<number>;
    status: string;
    estimates: any[] | null;
    lift: any[] | null;
    /** A report was refused as decided: the coordinator counts no more. */
    closed: boolean;
    outcomes: Record<string, number>;
    constructor(experiment: string, record: AgentRecord, persist: () => void, document: Record<string, any>);
    /** Take what a read of the experiment document published. */
    update(document: Record<string, any>): void;
    get sent(): number;
    get reportsLeft(): number;
    get identified(): boolean;
    get decided(): boolean;
    get spent(): boolean;
    /** The identified arm, else one drawn from the allocation over the arms in play at u. */
    choose(u: number): number;
    /** The reward the mechanism takes; refuses a bad arm or reward (nothing recorded). */
    check(arm: number, reward: number): number;
    /** The report of this activation, on record and saved before it is sent; null when none is
     * to be sent (B sent, one pending, or the experiment decided). */
    decide(arm: number, reward: number, uRound: number, uFlip: number): PrivateReport | null;
    /** Send the pending report and record the answer (counted, duplicate, or a 409: dropped, its
     * number used); the outcome, null if none was pending. */
    deliver(): Exchange<string | null>;
}
/** A device in an LDP experiment, as `enroll` gives it (see the module's doc). */
export declare class PrivateAgent {
    readonly client: CoordinatorClient;
    readonly view: GlobalView;
    readonly record: AgentRecord;
    readonly store: StateStore;
    readonly draws: Draws;
    resumed: boolean;
    gone: boolean;
    closed: boolean;
    readonly protocol: PrivateProtocol;
    /** The transport of its reports (tests inject one that loses a reply). */
    transport: Transport;
    private etag;
    private queue;
    private change;
    private waiters;
    private readonly listeners;
    private unsubscribe;
    private releaseFollower;
    private constructor();
    /** Called by `enroll` for an LDP experiment (its document just read, the agent restored or
     * enrolled); a report pending from the last run is sent again. */
    static open(options: EnrollOptions, client: CoordinatorClient, view: GlobalView, record: AgentRecord, store: StateStore, resumed: boolean, document: Record<string, any>, etag: string | null, draws?: Draws): Promise<PrivateAgent>;
    /** One arm: the identified one, else drawn from the allocation as last read, with the
     * device's own uniform. Throws ExperimentGone if the experiment was deleted. */
    choose(): number[];
    /** The reward of the arm `choose` gave: privatized and reported while reports are left; the
     * arms reported now ([arm], or [] once spent or decided; a report an earlier call could not
     * deliver is sent first, in its place). A reward the experiment does not
     * take is refused (RangeError), nothing sent. Afterwards the allocation is read again (while
     * reports are left), so that the next `choose` draws from the current one. */
    observe(arms: number[], rewards: number[]): Promise<number[]>;
    /** Read the experiment document now (If-None-Match); true if it changed. */
    refresh(): Promise<boolean>;
    /** What the coordinator counted of this device's own reports (GET /v1/agents/me, its own
     * token): `reports_sent`, `reports_left`, and `waiting`, the experiment's counted messages not
     * yet in the public counts (published `publish_batch` at a time). */
    me(): Promise<Record<string, any>>;
    /** Resolves once every report decided so far is answered and saved. */
    flush(): Promise<void>;
    /** Resolves true at the next change the follower learns of, false after `timeoutMs`. */
    waitForChange(timeoutMs?: number): Promise<boolean>;
    /** Calls `listener(agent)` at each change the follower learns of; returns what stops it. */
    onChange(listener: (agent: PrivateAgent) => void): () => void;
    close(): Promise<void>;
    get experiment(): string;
    get agentId(): string;
    get arms(): string[];
    get remaining(): number[];
    /** exploring, identified, or deleted (as far as this device read). */
    get status(): string;
    get bestArm(): number | null;
    /** Nothing more to send: decided (or deleted), or every report sent. */
    get done(): boolean;
    /** Every report sent: choose still gives an arm, nothing more leaves. */
    get settled(): boolean;
    get reported(): boolean;
    /** Reports sent and answered (counted, or refused: each a release). */
    get sent(): number;
    /** Reports it may still send: B less those sent and the one pending. */
    get reportsLeft(): number;
    get allocation(): number[];
    /** Every arm's estimate (reports, mean, ci) as last read. */
    get estimates(): any[] | null;
    get lift(): any[] | null;
    private check;
    private run;
    private resendPending;
    private read;
    private follow;
    /** A change the follower saw: the deletion, or the document read again (its allocation,
     * estimates), then the listeners called. */
    private catchUp;
    private notify;
    /** Save the record (credentials, reports sent, the pending report). */
    private persist;
}
