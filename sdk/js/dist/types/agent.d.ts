/**
 * One agent's local side (common/agent.py's LocalAgent): sync with the global set, run the
 * subroutine, vote. Under CDE (`reportPrivacy` set) it does not vote: when its fixed-budget run
 * ends it draws its one randomized report, which the caller sends; once the experiment has
 * decided it stops. Rewards stay in this object: only votes (arm indices) and the report leave.
 */
import { type Draws } from "./draws.js";
import { type ArmSelection, type LocalParams, type SubroutineState } from "./subroutines.js";
/** common.agent.AgentSpec. */
export interface AgentSpec {
    n_arms: number;
    subroutine: string;
    params: LocalParams;
    /** CE's xi: a vote is dropped before sending with this probability. */
    vote_drop?: number;
    /**
     * CDE: P of its randomized report, the hit-rate bound under a uniform prior
     * (e^e0 = P (K - 1) / (1 - P)).
     */
    report_privacy?: number | null;
}
/** (p, r) of CDE's K-ary randomized response: p names the answer, r each other arm. */
export declare function reportProbabilities(privacy: number, nArms: number): [number, number];
/** CDE's report: `answer` with probability p, else a uniform draw among the K - 1 others. */
export declare function randomize(answer: number, nArms: number, privacy: number, draws: Draws): number;
export interface AgentState {
    sub: SubroutineState;
    voted: number[];
    epoch: number;
    report: number | null;
    decided: boolean;
}
export declare class LocalAgent {
    readonly spec: AgentSpec;
    draws: Draws;
    sub: ArmSelection;
    /** Decided against, sent or dropped: never decided twice (per experiment epoch). */
    voted: Set<number>;
    epoch: number;
    /** CDE: the randomized report, once drawn. */
    report: number | null;
    /** CDE: the experiment accepted an arm; nothing more to do. */
    decided: boolean;
    constructor(spec: AgentSpec, draws: Draws);
    get localArms(): number[];
    get reports(): boolean;
    get done(): boolean;
    /** K_n := K_n & K; an empty intersection restarts on K with fresh statistics; a new epoch (DSER4
     * reset) restarts everything, votes included. Returns votes to send (rarely any). CDE: arms
     * leave only when one is accepted, and then the agent stops. */
    sync(remaining: Iterable<number>, epoch?: number): number[];
    /** SER4's coin, drawn once per activation (always false for other subroutines). */
    wantsReset(): boolean;
    /** SER4's local reset: statistics forgotten, K_n := K. */
    reset(remaining: Iterable<number>): void;
    select(): number[];
    observe(arms: number[], rewards: number[]): number[];
    private votes;
    toState(): AgentState;
    /** Rebuilt from `toState` (a reload): construction draws from a throwaway source, as in Python,
     * and the agent continues from `draws`. */
    static fromState(spec: AgentSpec, state: AgentState, draws: Draws): LocalAgent;
}
