/**
 * Every random draw of the local side goes through `Draws`, so that a test can inject the exact
 * draws the Python agent (common/) took and compare votes step by step. A page or a Node process
 * uses `cryptoDraws()`: the CE drop coins, CDE's report and DP-MASE's noise protect the device's
 * rewards, so they come from the platform's cryptographic generator, not a seeded one.
 */
export interface Draws {
    /** One uniform draw in [0, 1) (numpy's `rng.random()`). */
    random(): number;
    /** `count` uniform draws in [0, 1) (numpy's `rng.random(count)`; drawn even when 0). */
    randoms(count: number): number[];
    /** A uniform integer in [0, n) (numpy's `rng.integers(n)`, and the index `rng.choice` picks). */
    integer(n: number): number;
    /** A uniformly random permutation of 0..n-1 (numpy's `rng.permutation(n)`). */
    permutation(n: number): number[];
    /** `count` Laplace(0, scale) draws (numpy's `rng.laplace(0, scale, count)`). */
    laplace(scale: number, count: number): number[];
}
/** Draws from crypto.getRandomValues: 53-bit uniforms, unbiased integers by rejection. */
export declare function cryptoDraws(): Draws;
/** One recorded draw, as tests/test_js_agreement.py's recorder writes it. */
export type Draw = {
    kind: "random";
    value: number;
} | {
    kind: "randoms";
    n: number;
    values: number[];
} | {
    kind: "integer";
    n: number;
    value: number;
} | {
    kind: "permutation";
    n: number;
    values: number[];
} | {
    kind: "laplace";
    scale: number;
    values: number[];
};
/** Replays recorded draws in order; a call that does not match the next record throws (the two
 * sides drew differently: a disagreement in itself). */
export declare function replayDraws(records: Draw[]): Draws & {
    remaining(): number;
};
/** Draws that are not random at all (identity permutation, zeros): what a constructor that is
 * about to be overwritten by a saved state draws from, as Python's `from_state` does with its
 * throwaway generator, so that restoring never consumes the real source. */
export declare function inertDraws(): Draws;
