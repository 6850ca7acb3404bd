/**
 * The Arm Selection subroutines of common/subroutines/, driven one activation at a time:
 * `select()` (arms to play now), then `observe(arms, rewards)`, which returns the arms eliminated
 * locally (the agent turns them into votes). Each rule is a line-by-line port of the Python one,
 * ties included (the lowest arm index wins where Python's max/min keys say so).
 */
import type { Draws } from "./draws.js";
/** common.subroutines.LocalParams (sigma null: rewards in [0, 1]; pulls: CDE's T as the
 * experiment published it, null or absent: the sub-Gaussian T from the other parameters). */
export interface LocalParams {
    epsilon: number;
    confidence: number;
    sigma: number | null;
    every_arm: boolean;
    phi: number;
    dp_epsilon: number;
    pulls?: number | null;
}
export declare const DEFAULT_PARAMS: LocalParams;
/** The same checks as LocalParams.__post_init__: bad parameters throw, nothing runs. */
export declare function checkParams(params: LocalParams): LocalParams;
/** A JSON-able snapshot; the same keys as the Python `to_state` (the draws are not part of it). */
export type SubroutineState = Record<string, unknown> & {
    name: string;
};
export declare abstract class ArmSelection {
    readonly nArms: number;
    readonly params: LocalParams;
    draws: Draws;
    abstract readonly name: string;
    active: number[];
    initialArms: number;
    counts: number[];
    sums: number[];
    constructor(nArms: number, params: LocalParams, draws: Draws);
    abstract select(): number[];
    abstract observe(arms: number[], rewards: number[]): number[];
    /** Drop arms that left the global set; the caller restarts instead if none would remain. */
    discard(arms: Iterable<number>): number[];
    protected afterDiscard(): number[];
    /** Fresh statistics on `arms`. */
    restart(arms: Iterable<number>): void;
    protected abstract onRestart(): void;
    get done(): boolean;
    means(): number[];
    protected record(arms: number[], rewards: number[]): void;
    protected eliminate(arms: Iterable<number>): number[];
    protected keepOnly(arm: number): number[];
    /** max over the local set by (mean, -arm): the lowest index among equal means. */
    protected empiricalBest(): number;
    toState(): SubroutineState;
    protected extraState(): Record<string, unknown>;
    /** Reads back `toState`'s fields (the subclass's own through `loadExtra`). */
    load(state: SubroutineState): this;
    protected loadExtra(_state: SubroutineState): void;
}
/** Successive Elimination; SER3 reshuffles the round-robin order every round. */
export declare class SuccessiveElimination extends ArmSelection {
    readonly name: string;
    checkedRound: number;
    order: number[];
    /** SER3's rule: a fresh random round-robin order every round (a getter: read in restart). */
    protected get shuffle(): boolean;
    protected onRestart(): void;
    private newOrder;
    select(): number[];
    observe(arms: number[], rewards: number[]): number[];
    radius(rounds: number): number;
    protected check(rounds: number): number[];
    protected extraState(): Record<string, unknown>;
    protected loadExtra(state: SubroutineState): void;
}
/** SE with the round-robin order drawn again every round (Allesiardo et al. 2017). */
export declare class SER3 extends SuccessiveElimination {
    readonly name: string;
    protected get shuffle(): boolean;
}
/** SER3 plus, at each step, a reset with probability phi (DSER4: the reset resets the experiment);
 * the agent draws it (`wantsReset`) because it also needs the global set. */
export declare class SER4 extends SuccessiveElimination {
    readonly name: string;
    protected get shuffle(): boolean;
    wantsReset(): boolean;
}
/** SER3 with Howard et al.'s stitched radius (log log r in place of log r^2). */
export declare class StitchedSuccessiveElimination extends SuccessiveElimination {
    readonly name: string;
    protected get shuffle(): boolean;
    radius(rounds: number): number;
}
/** SER3 with Chernoff-KL intervals (rewards in [0, 1]): eliminate a when U_a <= max_b L_b; eps-stop
 * when max_{a != h} U_a - L_h < eps, h the empirical best. */
export declare class KLSuccessiveElimination extends SuccessiveElimination {
    readonly name: string;
    protected get shuffle(): boolean;
    protected onRestart(): void;
    protected check(rounds: number): number[];
}
/** LUCB1's shape: one sample of every arm, then a decision whenever the queue is empty. */
export declare abstract class LUCBShape extends ArmSelection {
    queue: number[];
    protected onRestart(): void;
    select(): number[];
    observe(arms: number[], rewards: number[]): number[];
    protected afterDiscard(): number[];
    private decide;
    abstract interval(arm: number, time: number): [number, number];
    /** LUCB1: h the empirical best, l the other arm of highest U; stop when U_l - L_h < eps. */
    protected rule(bounds: Map<number, [number, number]>): number[];
    protected extraState(): Record<string, unknown>;
    protected loadExtra(state: SubroutineState): void;
}
/** LUCB1's rule on Howard et al.'s stitched anytime radius (no t in the radius). */
export declare class StitchedLUCB extends LUCBShape {
    readonly name = "stitched-lucb";
    interval(arm: number, _time: number): [number, number];
}
/** LUCB1 (Kalyanakrishnan et al. 2012) on its Hoeffding radius, t the samples since the restart. */
export declare class LUCB extends LUCBShape {
    readonly name: string;
    interval(arm: number, time: number): [number, number];
}
/** KL-LUCB (Kaufmann and Kalyanakrishnan 2013): LUCB1's rule on Chernoff-KL intervals. */
export declare class KLLUCB extends LUCBShape {
    readonly name = "kl-lucb";
    protected onRestart(): void;
    interval(arm: number, time: number): [number, number];
}
/** DP successive elimination in epochs (Sajed and Sheffet 2019), DP-MASE's subroutine. */
export declare class DPSuccessiveElimination extends ArmSelection {
    readonly name = "dp-se";
    epoch: number;
    epochArms: number;
    epochRounds: number;
    protected onRestart(): void;
    private startEpoch;
    select(): number[];
    observe(arms: number[], rewards: number[]): number[];
    protected afterDiscard(): number[];
    noiseScale(): number;
    private endEpochIfComplete;
    protected extraState(): Record<string, unknown>;
    protected loadExtra(state: SubroutineState): void;
}
/** CDE's local run: T pulls per arm in turn, then the empirical best (ties drawn at random). */
export declare class FixedBudget extends ArmSelection {
    readonly name = "fixed-budget";
    next: number;
    /** T: the experiment's (params.pulls), else the sub-Gaussian one from the run's parameters. */
    get budget(): number;
    protected onRestart(): void;
    select(): number[];
    observe(arms: number[], rewards: number[]): number[];
    protected extraState(): Record<string, unknown>;
    protected loadExtra(state: SubroutineState): void;
}
type SubroutineClass = new (nArms: number, params: LocalParams, draws: Draws) => ArmSelection;
/** The subroutines this SDK runs, by the names the coordinator's experiments use. */
export declare const SUBROUTINES: Record<string, SubroutineClass>;
export declare function subroutineClass(name: string): SubroutineClass;
export {};
