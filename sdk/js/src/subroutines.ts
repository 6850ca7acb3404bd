/**
 * The Arm Selection subroutines of common/subroutines/, driven one activation at a time:
 * `select()` (arms to play now), then `observe(arms, rewards)`, which returns the arms eliminated
 * locally (the agent turns them into votes). Each rule is a line-by-line port of the Python one,
 * ties included (the lowest arm index wins where Python's max/min keys say so).
 */
import type { Draws } from "./draws.js";
import {
  dpEliminationGap,
  dpEpochLength,
  eliminationLevel,
  eliminationRadius,
  klLower,
  klLucbLevel,
  klUpper,
  lucbRadius,
  samplesPerArm,
  stitchedRadius,
} from "./radius.js";

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

export const DEFAULT_PARAMS: LocalParams = {
  epsilon: 0.25,
  confidence: 0.9,
  sigma: null,
  every_arm: false,
  phi: 0.0,
  dp_epsilon: 0.1,
};

/** The same checks as LocalParams.__post_init__: bad parameters throw, nothing runs. */
export function checkParams(params: LocalParams): LocalParams {
  const fail = (name: string, value: unknown, why: string): never => {
    throw new RangeError(`${name}=${String(value)}: ${why}`);
  };
  if (!(params.epsilon > 0)) fail("epsilon", params.epsilon, "must be > 0");
  if (!(params.confidence > 0 && params.confidence < 1)) {
    fail("confidence", params.confidence, "must be in (0, 1)");
  }
  if (params.sigma !== null && !(params.sigma > 0)) fail("sigma", params.sigma, "must be > 0");
  if (!(params.phi >= 0 && params.phi < 1)) fail("phi", params.phi, "must be in [0, 1)");
  if (!(params.dp_epsilon > 0)) fail("dp_epsilon", params.dp_epsilon, "must be > 0");
  const pulls = params.pulls;
  if (pulls !== undefined && pulls !== null && !(Number.isInteger(pulls) && pulls >= 1)) {
    fail("pulls", pulls, "must be an integer >= 1");
  }
  return params;
}

/** Sorted distinct arm indices. */
function sortedSet(arms: Iterable<number>): number[] {
  return Array.from(new Set(arms)).sort((a, b) => a - b);
}

/** A JSON-able snapshot; the same keys as the Python `to_state` (the draws are not part of it). */
export type SubroutineState = Record<string, unknown> & { name: string };

export abstract class ArmSelection {
  abstract readonly name: string;
  active: number[] = [];
  initialArms = 0;
  counts: number[] = [];
  sums: number[] = [];

  constructor(
    readonly nArms: number,
    readonly params: LocalParams,
    public draws: Draws,
  ) {
    if (!(Number.isInteger(nArms) && nArms >= 2)) {
      throw new RangeError(`arms=${nArms}: need at least 2 arms`);
    }
    checkParams(params);
    // Python's order: construction restarts on every arm (SER3 draws its first order here), so
    // the fields a restart sets are `declare`d in the subclasses, never initialized after it
    this.restart(Array.from({ length: nArms }, (_, i) => i));
  }

  abstract select(): number[];
  abstract observe(arms: number[], rewards: number[]): number[];

  /** Drop arms that left the global set; the caller restarts instead if none would remain. */
  discard(arms: Iterable<number>): number[] {
    const gone = new Set(arms);
    this.active = this.active.filter((a) => !gone.has(a));
    return this.afterDiscard();
  }

  protected afterDiscard(): number[] {
    return [];
  }

  /** Fresh statistics on `arms`. */
  restart(arms: Iterable<number>): void {
    this.active = sortedSet(arms);
    if (this.active.length === 0) throw new RangeError("a local set needs at least one arm");
    this.initialArms = this.active.length;
    this.counts = new Array<number>(this.nArms).fill(0);
    this.sums = new Array<number>(this.nArms).fill(0.0);
    this.onRestart();
  }

  protected abstract onRestart(): void;

  get done(): boolean {
    return this.active.length <= 1;
  }

  means(): number[] {
    return this.counts.map((c, a) => (c > 0 ? this.sums[a] / Math.max(c, 1) : 0.0));
  }

  protected record(arms: number[], rewards: number[]): void {
    if (arms.length !== rewards.length) {
      throw new RangeError(`${arms.length} arms but ${rewards.length} rewards`);
    }
    arms.forEach((a, i) => {
      if (!(Number.isInteger(a) && a >= 0 && a < this.nArms)) {
        throw new RangeError(`arm ${a} is not in 0..${this.nArms - 1}`);
      }
      if (!Number.isFinite(rewards[i])) throw new RangeError(`reward ${rewards[i]} is not finite`);
    });
    arms.forEach((a, i) => {
      this.counts[a] += 1;
      this.sums[a] += rewards[i];
    });
  }

  protected eliminate(arms: Iterable<number>): number[] {
    const active = new Set(this.active);
    const out = sortedSet(arms).filter((a) => active.has(a));
    const gone = new Set(out);
    this.active = this.active.filter((a) => !gone.has(a));
    return out;
  }

  protected keepOnly(arm: number): number[] {
    return this.eliminate(this.active.filter((a) => a !== arm));
  }

  /** max over the local set by (mean, -arm): the lowest index among equal means. */
  protected empiricalBest(): number {
    const mu = this.means();
    let best = this.active[0];
    for (const a of this.active) if (mu[a] > mu[best]) best = a;
    return best;
  }

  toState(): SubroutineState {
    return {
      name: this.name,
      n_arms: this.nArms,
      params: { ...this.params },
      active: this.active.slice(),
      initial_arms: this.initialArms,
      counts: this.counts.slice(),
      sums: this.sums.slice(),
      ...this.extraState(),
    };
  }

  protected extraState(): Record<string, unknown> {
    return {};
  }

  /** Reads back `toState`'s fields (the subclass's own through `loadExtra`). */
  load(state: SubroutineState): this {
    this.active = (state.active as number[]).slice();
    this.initialArms = state.initial_arms as number;
    this.counts = (state.counts as number[]).slice();
    this.sums = (state.sums as number[]).slice();
    this.loadExtra(state);
    return this;
  }

  protected loadExtra(_state: SubroutineState): void {}
}

/** Successive Elimination; SER3 reshuffles the round-robin order every round. */
export class SuccessiveElimination extends ArmSelection {
  readonly name: string = "se";
  declare checkedRound: number;
  declare order: number[];

  /** SER3's rule: a fresh random round-robin order every round (a getter: read in restart). */
  protected get shuffle(): boolean {
    return false;
  }

  protected onRestart(): void {
    this.checkedRound = 0;
    this.newOrder();
  }

  private newOrder(): void {
    // a permutation as numpy's: order[a] is arm a's rank in this round
    this.order = this.shuffle
      ? this.draws.permutation(this.nArms)
      : Array.from({ length: this.nArms }, (_, i) => i);
  }

  select(): number[] {
    if (this.done) return [];
    if (this.params.every_arm) return this.active.slice();
    const least = Math.min(...this.active.map((a) => this.counts[a]));
    let pick = -1;
    for (const a of this.active) {
      if (this.counts[a] === least && (pick < 0 || this.order[a] < this.order[pick])) pick = a;
    }
    return [pick];
  }

  observe(arms: number[], rewards: number[]): number[] {
    this.record(arms, rewards);
    const counts = new Set(this.active.map((a) => this.counts[a]));
    if (counts.size !== 1) return [];
    const rounds = counts.values().next().value as number;
    if (rounds <= this.checkedRound) return [];
    this.checkedRound = rounds;
    const out = this.check(rounds);
    this.newOrder();
    return out;
  }

  radius(rounds: number): number {
    return eliminationRadius(rounds, this.initialArms, this.params.confidence, this.params.sigma);
  }

  protected check(rounds: number): number[] {
    const radius = this.radius(rounds);
    const mu = this.means();
    const best = Math.max(...this.active.map((a) => mu[a]));
    const out = this.eliminate(this.active.filter((a) => best - mu[a] >= 2.0 * radius));
    if (radius <= this.params.epsilon / 2.0 && this.active.length > 1) {
      out.push(...this.keepOnly(this.empiricalBest()));
    }
    return out.sort((a, b) => a - b);
  }

  protected extraState(): Record<string, unknown> {
    return { checked_round: this.checkedRound, order: this.order.slice() };
  }

  protected loadExtra(state: SubroutineState): void {
    this.checkedRound = state.checked_round as number;
    this.order = (state.order as number[]).slice();
  }
}

/** SE with the round-robin order drawn again every round (Allesiardo et al. 2017). */
export class SER3 extends SuccessiveElimination {
  readonly name: string = "ser3";

  protected get shuffle(): boolean {
    return true;
  }

}

/** SER3 plus, at each step, a reset with probability phi (DSER4: the reset resets the experiment);
 * the agent draws it (`wantsReset`) because it also needs the global set. */
export class SER4 extends SuccessiveElimination {
  readonly name: string = "ser4";

  protected get shuffle(): boolean {
    return true;
  }

  wantsReset(): boolean {
    return this.params.phi > 0 && this.draws.random() < this.params.phi;
  }
}

/** SER3 with Howard et al.'s stitched radius (log log r in place of log r^2). */
export class StitchedSuccessiveElimination extends SuccessiveElimination {
  readonly name: string = "stitched-se";

  protected get shuffle(): boolean {
    return true;
  }

  radius(rounds: number): number {
    return stitchedRadius(rounds, this.initialArms, this.params.confidence, this.params.sigma);
  }
}

/** SER3 with Chernoff-KL intervals (rewards in [0, 1]): eliminate a when U_a <= max_b L_b; eps-stop
 * when max_{a != h} U_a - L_h < eps, h the empirical best. */
export class KLSuccessiveElimination extends SuccessiveElimination {
  readonly name: string = "kl-se";

  protected get shuffle(): boolean {
    return true;
  }

  protected onRestart(): void {
    if (this.params.sigma !== null) throw new RangeError("kl-se's KL bounds need rewards in [0, 1]");
    super.onRestart();
  }

  protected check(rounds: number): number[] {
    const level = eliminationLevel(rounds, this.initialArms, this.params.confidence);
    const mu = this.means();
    const bounds = new Map(
      this.active.map((a) => [a, [klLower(mu[a], rounds, level), klUpper(mu[a], rounds, level)]] as const),
    );
    const topLower = Math.max(...Array.from(bounds.values(), ([low]) => low));
    const out = this.eliminate(this.active.filter((a) => bounds.get(a)![1] <= topLower));
    if (this.active.length > 1) {
      const best = this.empiricalBest();
      const challenger = Math.max(
        ...this.active.filter((a) => a !== best).map((a) => bounds.get(a)![1]),
      );
      if (challenger - bounds.get(best)![0] < this.params.epsilon) out.push(...this.keepOnly(best));
    }
    return out.sort((a, b) => a - b);
  }
}

/** LUCB1's shape: one sample of every arm, then a decision whenever the queue is empty. */
export abstract class LUCBShape extends ArmSelection {
  declare queue: number[];

  protected onRestart(): void {
    this.queue = [];
  }

  select(): number[] {
    if (this.done) return [];
    const unseen = this.active.filter((a) => this.counts[a] === 0);
    if (unseen.length > 0) return this.params.every_arm ? unseen : unseen.slice(0, 1);
    return this.params.every_arm ? this.queue.slice() : this.queue.slice(0, 1);
  }

  observe(arms: number[], rewards: number[]): number[] {
    this.record(arms, rewards);
    this.queue = this.queue.filter((a) => !arms.includes(a));
    return this.decide();
  }

  protected afterDiscard(): number[] {
    this.queue = this.queue.filter((a) => this.active.includes(a));
    return this.decide();
  }

  private decide(): number[] {
    if (this.done || this.queue.length > 0 || this.active.some((a) => this.counts[a] === 0)) {
      return [];
    }
    const time = Math.max(1, this.counts.reduce((s, c) => s + c, 0));
    const bounds = new Map(this.active.map((a) => [a, this.interval(a, time)] as const));
    return this.rule(bounds);
  }

  abstract interval(arm: number, time: number): [number, number];

  /** LUCB1: h the empirical best, l the other arm of highest U; stop when U_l - L_h < eps. */
  protected rule(bounds: Map<number, [number, number]>): number[] {
    const best = this.empiricalBest();
    let challenger = -1;
    for (const a of this.active) {
      if (a === best) continue;
      if (challenger < 0 || bounds.get(a)![1] > bounds.get(challenger)![1]) challenger = a;
    }
    if (bounds.get(challenger)![1] - bounds.get(best)![0] < this.params.epsilon) {
      return this.keepOnly(best);
    }
    this.queue = [best, challenger];
    return [];
  }

  protected extraState(): Record<string, unknown> {
    return { queue: this.queue.slice() };
  }

  protected loadExtra(state: SubroutineState): void {
    this.queue = (state.queue as number[]).slice();
  }
}

/** LUCB1's rule on Howard et al.'s stitched anytime radius (no t in the radius). */
export class StitchedLUCB extends LUCBShape {
  readonly name = "stitched-lucb";

  interval(arm: number, _time: number): [number, number] {
    const radius = stitchedRadius(
      this.counts[arm],
      this.initialArms,
      this.params.confidence,
      this.params.sigma,
    );
    const mean = this.means()[arm];
    return [mean - radius, mean + radius];
  }
}

/** LUCB1 (Kalyanakrishnan et al. 2012) on its Hoeffding radius, t the samples since the restart. */
export class LUCB extends LUCBShape {
  readonly name: string = "lucb";

  interval(arm: number, time: number): [number, number] {
    const radius = lucbRadius(
      this.counts[arm],
      time,
      this.initialArms,
      this.params.confidence,
      this.params.sigma,
    );
    const mean = this.means()[arm];
    return [mean - radius, mean + radius];
  }
}

/** KL-LUCB (Kaufmann and Kalyanakrishnan 2013): LUCB1's rule on Chernoff-KL intervals. */
export class KLLUCB extends LUCBShape {
  readonly name = "kl-lucb";

  protected onRestart(): void {
    if (this.params.sigma !== null) throw new RangeError("kl-lucb's KL bounds need rewards in [0, 1]");
    super.onRestart();
  }

  interval(arm: number, time: number): [number, number] {
    const level = klLucbLevel(time, this.initialArms, this.params.confidence);
    const mean = this.means()[arm];
    const pulls = this.counts[arm];
    return [klLower(mean, pulls, level), klUpper(mean, pulls, level)];
  }
}

/** DP successive elimination in epochs (Sajed and Sheffet 2019), DP-MASE's subroutine. */
export class DPSuccessiveElimination extends ArmSelection {
  readonly name = "dp-se";
  declare epoch: number;
  declare epochArms: number;
  declare epochRounds: number;

  protected onRestart(): void {
    if (this.params.sigma !== null) throw new RangeError("DP-MASE needs rewards in [0, 1]");
    this.epoch = 1;
    this.startEpoch();
  }

  private startEpoch(): void {
    this.epochArms = this.active.length;
    this.epochRounds = dpEpochLength(
      this.epoch,
      this.epochArms,
      this.params.confidence,
      this.params.dp_epsilon,
    );
    this.counts.fill(0);
    this.sums.fill(0.0);
  }

  select(): number[] {
    if (this.done) return [];
    if (this.params.every_arm) return this.active.slice();
    const least = Math.min(...this.active.map((a) => this.counts[a]));
    return [this.active.find((a) => this.counts[a] === least)!];
  }

  observe(arms: number[], rewards: number[]): number[] {
    this.record(arms, rewards);
    return this.endEpochIfComplete();
  }

  protected afterDiscard(): number[] {
    return this.endEpochIfComplete();
  }

  noiseScale(): number {
    return 1.0 / (this.params.dp_epsilon * this.epochRounds);
  }

  private endEpochIfComplete(): number[] {
    if (this.done || this.active.some((a) => this.counts[a] < this.epochRounds)) return [];
    const arms = this.active.slice();
    const noise = this.draws.laplace(this.noiseScale(), arms.length);
    const noisy = arms.map((a, i) => this.sums[a] / this.epochRounds + noise[i]);
    const gap = dpEliminationGap(
      this.epoch,
      this.epochRounds,
      this.epochArms,
      this.params.confidence,
      this.params.dp_epsilon,
    );
    const top = Math.max(...noisy);
    const out = this.eliminate(arms.filter((_, i) => top - noisy[i] > gap));
    this.epoch += 1;
    this.startEpoch();
    return out;
  }

  protected extraState(): Record<string, unknown> {
    return { epoch: this.epoch, epoch_arms: this.epochArms, epoch_rounds: this.epochRounds };
  }

  protected loadExtra(state: SubroutineState): void {
    this.epoch = state.epoch as number;
    this.epochArms = state.epoch_arms as number;
    this.epochRounds = state.epoch_rounds as number;
  }
}

/** CDE's local run: T pulls per arm in turn, then the empirical best (ties drawn at random). */
export class FixedBudget extends ArmSelection {
  readonly name = "fixed-budget";
  declare next: number;

  /** T: the experiment's (params.pulls), else the sub-Gaussian one from the run's parameters. */
  get budget(): number {
    const pulls = this.params.pulls;
    if (pulls !== undefined && pulls !== null) return pulls;
    return samplesPerArm(
      this.params.epsilon,
      this.params.confidence,
      this.initialArms,
      this.params.sigma,
    );
  }

  protected onRestart(): void {
    this.next = 0;
  }

  select(): number[] {
    if (this.done) return [];
    if (this.params.every_arm) return this.active.slice();
    return [this.active[this.next % this.active.length]];
  }

  observe(arms: number[], rewards: number[]): number[] {
    this.record(arms, rewards);
    this.next += this.params.every_arm ? 0 : arms.length;
    if (this.done || Math.min(...this.active.map((a) => this.counts[a])) < this.budget) return [];
    const mu = this.means();
    const top = Math.max(...this.active.map((a) => mu[a]));
    const best = this.active.filter((a) => mu[a] === top);
    return this.keepOnly(best.length > 1 ? best[this.draws.integer(best.length)] : best[0]);
  }

  protected extraState(): Record<string, unknown> {
    return { next: this.next };
  }

  protected loadExtra(state: SubroutineState): void {
    this.next = (state.next as number | undefined) ?? 0;
  }
}

type SubroutineClass = new (nArms: number, params: LocalParams, draws: Draws) => ArmSelection;

/** The subroutines this SDK runs, by the names the coordinator's experiments use. */
export const SUBROUTINES: Record<string, SubroutineClass> = {
  se: SuccessiveElimination,
  ser3: SER3,
  ser4: SER4,
  "stitched-se": StitchedSuccessiveElimination,
  "kl-se": KLSuccessiveElimination,
  lucb: LUCB,
  "kl-lucb": KLLUCB,
  "stitched-lucb": StitchedLUCB,
  "dp-se": DPSuccessiveElimination,
  "fixed-budget": FixedBudget,
};

export function subroutineClass(name: string): SubroutineClass {
  const cls = SUBROUTINES[name];
  if (cls === undefined) {
    throw new RangeError(
      `subroutine=${name}: this SDK runs ${Object.keys(SUBROUTINES).join(", ")}`,
    );
  }
  return cls;
}
