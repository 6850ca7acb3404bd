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

interface CryptoLike {
  getRandomValues<T extends ArrayBufferView>(array: T): T;
}

function platformCrypto(): CryptoLike {
  const crypto = (globalThis as { crypto?: CryptoLike }).crypto;
  if (crypto === undefined || typeof crypto.getRandomValues !== "function") {
    throw new Error("@dexp/agent needs globalThis.crypto.getRandomValues (browsers, Node >= 19)");
  }
  return crypto;
}

/** Draws from crypto.getRandomValues: 53-bit uniforms, unbiased integers by rejection. */
export function cryptoDraws(): Draws {
  const crypto = platformCrypto();
  const words = new Uint32Array(2);
  const uniform = (): number => {
    crypto.getRandomValues(words);
    // 27 + 26 bits, as numpy's random_standard_uniform: k / 2^53 in [0, 1)
    return ((words[0] >>> 5) * 67108864 + (words[1] >>> 6)) / 9007199254740992;
  };
  const integer = (n: number): number => {
    if (!(Number.isInteger(n) && n >= 1 && n <= 0x100000000)) {
      throw new RangeError(`integer(n) needs an integer n in [1, 2^32], got ${n}`);
    }
    const limit = 0x100000000 - (0x100000000 % n);
    const word = new Uint32Array(1);
    for (;;) {
      crypto.getRandomValues(word);
      if (word[0] < limit) return word[0] % n;
    }
  };
  const draws: Draws = {
    random: uniform,
    randoms: (count) => Array.from({ length: count }, uniform),
    integer,
    permutation: (n) => {
      const out = Array.from({ length: n }, (_, i) => i);
      for (let i = n - 1; i > 0; i--) {
        const j = integer(i + 1);
        [out[i], out[j]] = [out[j], out[i]];
      }
      return out;
    },
    laplace: (scale, count) =>
      Array.from({ length: count }, () => {
        // inverse CDF on u in (-1/2, 1/2); u = -1/2 exactly is redrawn (log 0)
        let u = uniform() - 0.5;
        while (u === -0.5) u = uniform() - 0.5;
        return -scale * Math.sign(u) * Math.log(1 - 2 * Math.abs(u));
      }),
  };
  return draws;
}

/** One recorded draw, as tests/test_js_agreement.py's recorder writes it. */
export type Draw =
  | { kind: "random"; value: number }
  | { kind: "randoms"; n: number; values: number[] }
  | { kind: "integer"; n: number; value: number }
  | { kind: "permutation"; n: number; values: number[] }
  | { kind: "laplace"; scale: number; values: number[] };

/** Replays recorded draws in order; a call that does not match the next record throws (the two
 * sides drew differently: a disagreement in itself). */
export function replayDraws(records: Draw[]): Draws & { remaining(): number } {
  let next = 0;
  const take = <K extends Draw["kind"]>(kind: K, what: string): Extract<Draw, { kind: K }> => {
    const record = records[next];
    if (record === undefined || record.kind !== kind) {
      throw new Error(`draw ${next}: asked ${what}, recorded ${JSON.stringify(record ?? null)}`);
    }
    next += 1;
    return record as Extract<Draw, { kind: K }>;
  };
  const sized = (n: number, got: number, what: string): void => {
    if (n !== got) throw new Error(`draw ${next - 1}: asked ${what}, recorded size ${got}`);
  };
  return {
    random: () => take("random", "random()").value,
    randoms: (count) => {
      const r = take("randoms", `randoms(${count})`);
      sized(count, r.n, `randoms(${count})`);
      return r.values.slice();
    },
    integer: (n) => {
      const r = take("integer", `integer(${n})`);
      sized(n, r.n, `integer(${n})`);
      return r.value;
    },
    permutation: (n) => {
      const r = take("permutation", `permutation(${n})`);
      sized(n, r.n, `permutation(${n})`);
      return r.values.slice();
    },
    laplace: (scale, count) => {
      const r = take("laplace", `laplace(${scale}, ${count})`);
      sized(count, r.values.length, `laplace(${scale}, ${count})`);
      if (r.scale !== scale) throw new Error(`draw ${next - 1}: laplace scale ${scale} != ${r.scale}`);
      return r.values.slice();
    },
    remaining: () => records.length - next,
  };
}

/** Draws that are not random at all (identity permutation, zeros): what a constructor that is
 * about to be overwritten by a saved state draws from, as Python's `from_state` does with its
 * throwaway generator, so that restoring never consumes the real source. */
export function inertDraws(): Draws {
  return {
    random: () => 0,
    randoms: (count) => new Array<number>(count).fill(0),
    integer: () => 0,
    permutation: (n) => Array.from({ length: n }, (_, i) => i),
    laplace: (_scale, count) => new Array<number>(count).fill(0),
  };
}
