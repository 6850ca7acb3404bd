/**
 * What an agent knows of the global state (agent/library.py's GlobalView): the remaining arms,
 * their version, the epoch and its start, the status; and the sure signs that the coordinator
 * lost writes (its (epoch, version) going back, an arm's vote count going down within an epoch,
 * an epoch begun again), after which the agent checks its own votes (GET /v1/agents/me).
 *
 * `agentSpec` reads the experiment's public `params` as common/algorithms.py's AlgorithmConfig
 * does: which local subroutine, its confidence (CE's eta_xi, DP-MASE's beta), CE's vote drop,
 * CDE's report privacy.
 */
import type { AgentSpec } from "./agent.js";
import type { CoordinatorClient } from "./http.js";
export type Status = "exploring" | "identified" | "tied";
/** eta_xi = 1 - (1 - eta) / (1 - xi)^(K - 1) (common/params.py corrupted_local_confidence). */
export declare function corruptedLocalConfidence(eta: number, xi: number, nArms: number): number;
/** The local side an experiment's public `params` (and `sigma`, and CDE's `pulls_per_arm`) ask
 * of each agent. */
export declare function agentSpec(params: Record<string, any>, nArms: number, sigma: number | null, pullsPerArm?: number | null): AgentSpec;
export declare class GlobalView {
    readonly experiment: string;
    readonly arms: string[];
    readonly params: Record<string, any>;
    readonly sigma: number | null;
    readonly createdAt: number;
    /** "bounded" or "bernoulli" (every reward 0 or 1: the agent refuses any other). */
    readonly rewards: string;
    /** CDE: the T the experiment published, which its agents play; null: none published. */
    readonly pullsPerArm: number | null;
    remaining: Set<number>;
    version: number;
    epoch: number;
    epochStartedAt: number | null;
    status: Status;
    votes: number[];
    snapshotSeq: number;
    regressedAt: number;
    losses: number;
    lostAt: number;
    counts: Map<number, number>;
    /** A read showed another `created_at`: deleted and created again; this agent is not in it. */
    replaced: boolean;
    constructor(experiment: string, arms: string[], params: Record<string, any>, sigma: number | null, createdAt: number, 
    /** "bounded" or "bernoulli" (every reward 0 or 1: the agent refuses any other). */
    rewards?: string, 
    /** CDE: the T the experiment published, which its agents play; null: none published. */
    pullsPerArm?: number | null);
    static fetch(client: CoordinatorClient, experiment: string): Promise<GlobalView>;
    /** The view of a document read (GET /v1/experiments/{id}) after sequence number `seq`. */
    static of(experiment: string, state: Record<string, any>, seq: number): GlobalView;
    get spec(): AgentSpec;
    get bernoulli(): boolean;
    get globalReset(): boolean;
    get identified(): boolean;
    /** Take a state read (GET of the experiment); true if the global set changed. */
    update(state: Record<string, any>, seq?: number): boolean;
    observeCount(arm: number, epoch: number, votes: number): void;
    noteLoss(): void;
    stale(version: number, epoch: number): boolean;
    refresh(client: CoordinatorClient): Promise<boolean>;
    /** A state the follower got (another connection: not ordered with the agent's own requests).
     * Older than the view's last read: dropped; behind its (epoch, version): read again (the
     * read tells a loss from a late event); newer: taken as it is. Returns "refresh" when the
     * caller must read the state again, else whether the global set changed. */
    follow(state: Record<string, any>, seq: number): boolean | "refresh";
}
