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
import { nextSeq } from "./follower.js";

export type Status = "exploring" | "identified" | "tied";

/** eta_xi = 1 - (1 - eta) / (1 - xi)^(K - 1) (common/params.py corrupted_local_confidence). */
export function corruptedLocalConfidence(eta: number, xi: number, nArms: number): number {
  if (xi === 0.0) return eta;
  const etaXi = 1.0 - (1.0 - eta) / (1.0 - xi) ** (nArms - 1);
  if (!(etaXi > 0.0)) throw new RangeError(`xi=${xi}: eta_xi = ${etaXi} <= 0 with eta=${eta}, K=${nArms}`);
  return etaXi;
}

/** The local side an experiment's public `params` (and `sigma`, and CDE's `pulls_per_arm`) ask
 * of each agent. */
export function agentSpec(
  params: Record<string, any>,
  nArms: number,
  sigma: number | null,
  pullsPerArm: number | null = null,
): AgentSpec {
  const algorithm = String(params.algorithm);
  const subroutine =
    algorithm === "cde" ? "fixed-budget" : algorithm === "dp-mase" ? "dp-se" : String(params.subroutine);
  const confidence: Record<string, () => number> = {
    de: () => params.eta,
    cde: () => params.eta,
    ce: () => corruptedLocalConfidence(params.eta, params.xi, nArms),
    "dp-mase": () => params.beta,
  };
  const local = confidence[algorithm];
  if (local === undefined) {
    throw new RangeError(`algorithm ${algorithm}: not an agent's (de, ce, dp-mase or cde)`);
  }
  return {
    n_arms: nArms,
    subroutine,
    params: {
      epsilon: params.epsilon,
      confidence: local(),
      sigma,
      every_arm: Boolean(params.every_arm),
      phi: params.phi ?? 0.0,
      dp_epsilon: params.dp_epsilon ?? 0.1,
      pulls: algorithm === "cde" ? pullsPerArm : null,
    },
    vote_drop: algorithm === "ce" ? params.xi : 0.0,
    report_privacy: algorithm === "cde" ? params.privacy : null,
  };
}

export class GlobalView {
  remaining = new Set<number>();
  version = -1;
  epoch = 0;
  epochStartedAt: number | null = null;
  status: Status = "exploring";
  votes: number[] = [];
  snapshotSeq = 0;
  regressedAt = -1;
  losses = 0;
  lostAt = -1;
  counts = new Map<number, number>();
  /** A read showed another `created_at`: deleted and created again; this agent is not in it. */
  replaced = false;

  constructor(
    readonly experiment: string,
    readonly arms: string[],
    readonly params: Record<string, any>,
    readonly sigma: number | null,
    readonly createdAt: number,
    /** "bounded" or "bernoulli" (every reward 0 or 1: the agent refuses any other). */
    readonly rewards: string = "bounded",
    /** CDE: the T the experiment published, which its agents play; null: none published. */
    readonly pullsPerArm: number | null = null,
  ) {}

  static async fetch(client: CoordinatorClient, experiment: string): Promise<GlobalView> {
    const seq = nextSeq();
    return GlobalView.of(experiment, await client.experiment(experiment), seq);
  }

  /** The view of a document read (GET /v1/experiments/{id}) after sequence number `seq`. */
  static of(experiment: string, state: Record<string, any>, seq: number): GlobalView {
    const view = new GlobalView(
      experiment,
      state.arms.map(String),
      state.params,
      state.sigma ?? null,
      Number(state.created_at ?? 0),
      String(state.rewards ?? "bounded"),
      state.pulls_per_arm === undefined || state.pulls_per_arm === null ? null : Number(state.pulls_per_arm),
    );
    view.update(state, seq);
    return view;
  }

  get spec(): AgentSpec {
    return agentSpec(this.params, this.arms.length, this.sigma, this.pullsPerArm);
  }

  get bernoulli(): boolean {
    return this.rewards === "bernoulli";
  }

  get globalReset(): boolean {
    return this.params.algorithm !== "cde" && this.params.subroutine === "ser4";
  }

  get identified(): boolean {
    return this.remaining.size === 1;
  }

  /** Take a state read (GET of the experiment); true if the global set changed. */
  update(state: Record<string, any>, seq?: number): boolean {
    const createdAt = Number(state.created_at ?? this.createdAt);
    if (this.createdAt && createdAt !== this.createdAt) {
      this.replaced = true;
      return false;
    }
    const epoch = Number(state.epoch);
    const version = Number(state.version);
    const remaining = new Set<number>(state.remaining_arms.map(Number));
    this.snapshotSeq = seq ?? nextSeq();
    this.votes = (state.votes ?? []).map(Number);
    if (epoch < this.epoch || (epoch === this.epoch && version < this.version)) {
      this.regressedAt = this.snapshotSeq;
      this.noteLoss();
    }
    const changed = epoch !== this.epoch || version !== this.version || !sameSet(remaining, this.remaining);
    if (epoch !== this.epoch) this.counts = new Map();
    const started = state.epoch_started_at === undefined || state.epoch_started_at === null ? null : Number(state.epoch_started_at);
    if (epoch === this.epoch && started !== null && this.epochStartedAt !== null && started !== this.epochStartedAt) {
      this.counts = new Map(); // the same number, another epoch: a failover lost the first one
      this.noteLoss();
    }
    if (started !== null || epoch !== this.epoch) this.epochStartedAt = started;
    this.epoch = epoch;
    this.version = version;
    this.remaining = remaining;
    this.status = remaining.size === 1 ? "identified" : ((state.status as Status) ?? "exploring");
    this.votes.forEach((count, arm) => this.observeCount(arm, epoch, count));
    return changed;
  }

  observeCount(arm: number, epoch: number, votes: number): void {
    if (epoch !== this.epoch) return;
    if (votes < (this.counts.get(arm) ?? 0)) this.noteLoss();
    this.counts.set(arm, votes);
  }

  noteLoss(): void {
    this.losses += 1;
    this.lostAt = nextSeq();
  }

  stale(version: number, epoch: number): boolean {
    return epoch !== this.epoch || version !== this.version;
  }

  async refresh(client: CoordinatorClient): Promise<boolean> {
    const seq = nextSeq();
    return this.update(await client.experiment(this.experiment), seq);
  }

  /** A state the follower got (another connection: not ordered with the agent's own requests).
   * Older than the view's last read: dropped; behind its (epoch, version): read again (the
   * read tells a loss from a late event); newer: taken as it is. Returns "refresh" when the
   * caller must read the state again, else whether the global set changed. */
  follow(state: Record<string, any>, seq: number): boolean | "refresh" {
    if (seq <= this.snapshotSeq) return false;
    const epoch = Number(state.epoch);
    const version = Number(state.version);
    if (epoch < this.epoch || (epoch === this.epoch && version < this.version)) return "refresh";
    const started = state.epoch_started_at;
    const same =
      sameSet(new Set<number>(state.remaining_arms.map(Number)), this.remaining) &&
      (started === undefined || started === null || Number(started) === this.epochStartedAt);
    if (epoch === this.epoch && version === this.version && same && !("created_at" in state)) return false;
    return this.update(state, seq);
  }
}

function sameSet(a: Set<number>, b: Set<number>): boolean {
  if (a.size !== b.size) return false;
  for (const x of a) if (!b.has(x)) return false;
  return true;
}
