/**
 * One agent's local side (common/agent.py's LocalAgent): sync with the global set, run the
 * subroutine, vote. Under CDE (`reportPrivacy` set) it does not vote: when its fixed-budget run
 * ends it draws its one randomized report, which the caller sends; once the experiment has
 * decided it stops. Rewards stay in this object: only votes (arm indices) and the report leave.
 */
import { type Draws, inertDraws } from "./draws.js";
import { type ArmSelection, type LocalParams, type SubroutineState, subroutineClass } from "./subroutines.js";

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
export function reportProbabilities(privacy: number, nArms: number): [number, number] {
  if (!(1.0 / nArms < privacy && privacy < 1.0)) {
    throw new RangeError(`privacy=${privacy}: must be in (1/K, 1) with ${nArms} arms`);
  }
  const odds = (privacy * (nArms - 1)) / (1.0 - privacy);
  const r = 1.0 / (odds + nArms - 1);
  return [odds * r, r];
}

/** CDE's report: `answer` with probability p, else a uniform draw among the K - 1 others. */
export function randomize(answer: number, nArms: number, privacy: number, draws: Draws): number {
  const [p] = reportProbabilities(privacy, nArms);
  if (draws.random() < p) return answer;
  const other = draws.integer(nArms - 1);
  return other + (other >= answer ? 1 : 0);
}

export interface AgentState {
  sub: SubroutineState;
  voted: number[];
  epoch: number;
  report: number | null;
  decided: boolean;
}

export class LocalAgent {
  sub: ArmSelection;
  /** Decided against, sent or dropped: never decided twice (per experiment epoch). */
  voted = new Set<number>();
  epoch = 0;
  /** CDE: the randomized report, once drawn. */
  report: number | null = null;
  /** CDE: the experiment accepted an arm; nothing more to do. */
  decided = false;

  constructor(
    readonly spec: AgentSpec,
    public draws: Draws,
  ) {
    const drop = spec.vote_drop ?? 0.0;
    if (!(drop >= 0 && drop < 1)) throw new RangeError(`vote_drop=${drop}: must be in [0, 1)`);
    if (this.reports) reportProbabilities(spec.report_privacy as number, spec.n_arms);
    this.sub = new (subroutineClass(spec.subroutine))(spec.n_arms, spec.params, draws);
  }

  get localArms(): number[] {
    return this.sub.active.slice();
  }

  get reports(): boolean {
    return this.spec.report_privacy !== undefined && this.spec.report_privacy !== null;
  }

  get done(): boolean {
    return this.decided || this.sub.done;
  }

  /** K_n := K_n & K; an empty intersection restarts on K with fresh statistics; a new epoch (DSER4
   * reset) restarts everything, votes included. Returns votes to send (rarely any). CDE: arms
   * leave only when one is accepted, and then the agent stops. */
  sync(remaining: Iterable<number>, epoch = 0): number[] {
    const global = new Set(remaining);
    if (this.reports) {
      if (global.size < this.spec.n_arms) this.decided = true;
      return [];
    }
    if (epoch !== this.epoch) {
      this.epoch = epoch;
      this.voted = new Set();
      this.sub.restart(global);
      return [];
    }
    const gone = this.sub.active.filter((a) => !global.has(a));
    if (gone.length === 0) return [];
    if (gone.length === this.sub.active.length) {
      this.sub.restart(global);
      return [];
    }
    return this.votes(this.sub.discard(gone));
  }

  /** SER4's coin, drawn once per activation (always false for other subroutines). */
  wantsReset(): boolean {
    const sub = this.sub as ArmSelection & { wantsReset?: () => boolean };
    return sub.wantsReset !== undefined ? sub.wantsReset() : false;
  }

  /** SER4's local reset: statistics forgotten, K_n := K. */
  reset(remaining: Iterable<number>): void {
    this.sub.restart(remaining);
  }

  select(): number[] {
    return this.sub.select();
  }

  observe(arms: number[], rewards: number[]): number[] {
    const eliminated = this.sub.observe(arms, rewards);
    if (!this.reports) return this.votes(eliminated);
    if (this.sub.done && this.report === null) {
      const answer = this.sub.active[0];
      this.report = randomize(answer, this.spec.n_arms, this.spec.report_privacy as number, this.draws);
    }
    return [];
  }

  private votes(eliminated: number[]): number[] {
    const fresh = eliminated.filter((a) => !this.voted.has(a));
    for (const a of fresh) this.voted.add(a);
    const drop = this.spec.vote_drop ?? 0.0;
    if (drop > 0.0) {
      const coins = this.draws.randoms(fresh.length);
      return fresh.filter((_, i) => coins[i] >= drop);
    }
    return fresh;
  }

  toState(): AgentState {
    return {
      sub: this.sub.toState(),
      voted: Array.from(this.voted).sort((a, b) => a - b),
      epoch: this.epoch,
      report: this.report,
      decided: this.decided,
    };
  }

  /** Rebuilt from `toState` (a reload): construction draws from a throwaway source, as in Python,
   * and the agent continues from `draws`. */
  static fromState(spec: AgentSpec, state: AgentState, draws: Draws): LocalAgent {
    const agent = new LocalAgent(spec, inertDraws());
    agent.draws = draws;
    agent.sub.draws = draws;
    agent.sub.load(state.sub);
    agent.voted = new Set(state.voted);
    agent.epoch = state.epoch;
    agent.report = state.report ?? null;
    agent.decided = state.decided ?? false;
    return agent;
  }
}
