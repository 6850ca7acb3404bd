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
import { ExperimentGone } from "./device.js";
import { cryptoDraws, type Draws } from "./draws.js";
import { type Change, type GlobalSetFollower, nextSeq, shareFollower } from "./follower.js";
import { type CoordinatorClient, CoordinatorError } from "./http.js";
import { clientTransport, type Exchange, message, run, type Transport } from "./protocol.js";
import type { AgentRecord } from "./record.js";
import type { StateStore } from "./storage.js";
import type { GlobalView } from "./view.js";

const MAX_DP_EPSILON = 10.0; // common/ldp.py

/** p = e^eps / (1 + e^eps), written as common/ldp.py's Mechanism.keep. */
export function keepProbability(dpEpsilon: number): number {
  if (!(typeof dpEpsilon === "number" && dpEpsilon > 0 && dpEpsilon <= MAX_DP_EPSILON)) {
    throw new RangeError(`dp_epsilon=${dpEpsilon}: must be in (0, ${MAX_DP_EPSILON}]`);
  }
  return 1.0 / (1.0 + Math.exp(-dpEpsilon));
}

/** common/ldp.py's Mechanism.privatize: the report's bit for a reward in [0, 1] from two uniforms
 * in [0, 1): b = [uRound < reward], kept when uFlip < p, else flipped. eps-locally private. */
export function privatize(dpEpsilon: number, reward: number, uRound: number, uFlip: number): number {
  const keep = keepProbability(dpEpsilon);
  if (!(reward >= 0.0 && reward <= 1.0)) throw new RangeError(`reward=${reward}: must be in [0, 1]`);
  const bit = uRound < reward ? 1 : 0;
  return uFlip < keep ? bit : 1 - bit;
}

/** common/ldp.py's unit_reward: clipped to [low, high], mapped to [0, 1]. */
export function unitReward(reward: number, low: number, high: number): number {
  return (Math.min(Math.max(reward, low), high) - low) / (high - low);
}

/** agent/private_device.py's report_reward: the reward the mechanism takes, or a RangeError. */
export function reportReward(reward: number, rewards: string, range: [number, number] | null): number {
  if (typeof reward !== "number" || Number.isNaN(reward)) throw new RangeError(`reward ${reward} is not a number`);
  if (range !== null) return unitReward(reward, range[0], range[1]);
  if (rewards === "bernoulli" && reward !== 0 && reward !== 1) {
    throw new RangeError(`reward ${reward} refused: this experiment's rewards are Bernoulli, 0 or 1; nothing was sent`);
  }
  if (!(reward >= 0 && reward <= 1)) {
    throw new RangeError(`reward ${reward} refused: must be in [0, 1] (the experiment declares no range); nothing was sent`);
  }
  return reward;
}

/** agent/private_device.py's draw_arm: the allocation's inverse CDF at u (weights <= 0 never). */
export function drawArm(allocation: number[], u: number): number {
  let total = 0.0;
  for (const w of allocation) if (w > 0.0) total += w;
  if (!(total > 0.0)) throw new RangeError("the allocation needs a positive weight");
  const target = u * total;
  let acc = 0.0;
  let last = -1;
  for (let arm = 0; arm < allocation.length; arm++) {
    const w = allocation[arm];
    if (w > 0.0) {
      acc += w;
      last = arm;
      if (target < acc) return arm;
    }
  }
  return last;
}

/** What leaves the device at an activation. */
export interface PrivateReport {
  arm: number;
  bit: number;
  seq: number;
}

/** One device's side of LDP, without I/O (agent/private_device.py's PrivateProtocol). */
export class PrivateProtocol {
  readonly dpEpsilon: number;
  readonly budget: number;
  readonly nArms: number;
  readonly rewards: string;
  readonly rewardRange: [number, number] | null;
  allocation: number[] = [];
  remaining = new Set<number>();
  status = "exploring";
  estimates: any[] | null = null;
  lift: any[] | null = null;
  /** A report was refused as decided: the coordinator counts no more. */
  closed = false;
  outcomes: Record<string, number> = {};

  constructor(
    readonly experiment: string,
    readonly record: AgentRecord,
    readonly persist: () => void,
    document: Record<string, any>,
  ) {
    this.dpEpsilon = Number(document.dp_epsilon);
    keepProbability(this.dpEpsilon);
    this.budget = Number(document.reports_per_agent);
    this.nArms = document.arms.length;
    this.rewards = String(document.rewards ?? "bounded");
    const range = document.reward_range;
    this.rewardRange = range === undefined || range === null ? null : [Number(range[0]), Number(range[1])];
    this.update(document);
  }

  /** Take what a read of the experiment document published. */
  update(document: Record<string, any>): void {
    this.allocation = (document.allocation ?? []).map(Number);
    this.remaining = new Set<number>(document.remaining_arms.map(Number));
    this.status = this.remaining.size === 1 ? "identified" : String(document.status);
    this.estimates = document.estimates ?? null;
    this.lift = document.lift ?? null;
  }

  get sent(): number {
    return this.record.privateSent;
  }

  get reportsLeft(): number {
    return Math.max(this.budget - this.sent - (this.record.privatePending === null ? 0 : 1), 0);
  }

  get identified(): boolean {
    return this.remaining.size === 1;
  }

  get decided(): boolean {
    return this.identified || this.closed || this.status !== "exploring";
  }

  get spent(): boolean {
    return this.sent >= this.budget && this.record.privatePending === null;
  }

  /** The identified arm, else one drawn from the allocation over the arms in play at u. */
  choose(u: number): number {
    if (this.identified) return Array.from(this.remaining)[0];
    let weights = this.allocation.map((w, arm) => (this.remaining.has(arm) ? w : 0.0));
    if (!weights.some((w) => w > 0.0)) weights = Array.from({ length: this.nArms }, (_, arm) => (this.remaining.has(arm) ? 1.0 : 0.0));
    return drawArm(weights, u);
  }

  /** The reward the mechanism takes; refuses a bad arm or reward (nothing recorded). */
  check(arm: number, reward: number): number {
    if (!Number.isInteger(arm) || arm < 0 || arm >= this.nArms) throw new RangeError(`arm ${arm}: must be in [0, ${this.nArms - 1}]`);
    return reportReward(reward, this.rewards, this.rewardRange);
  }

  /** The report of this activation, on record and saved before it is sent; null when none is
   * to be sent (B sent, one pending, or the experiment decided). */
  decide(arm: number, reward: number, uRound: number, uFlip: number): PrivateReport | null {
    const unit = this.check(arm, reward);
    if (this.record.privatePending !== null || this.sent >= this.budget || this.decided) return null;
    const report = { arm, bit: privatize(this.dpEpsilon, unit, uRound, uFlip), seq: this.sent + 1 };
    this.record.privatePending = [report.arm, report.bit, report.seq];
    this.persist();
    return report;
  }

  /** Send the pending report and record the answer (counted, duplicate, or a 409: dropped, its
   * number used); the outcome, null if none was pending. */
  *deliver(): Exchange<string | null> {
    const pending = this.record.privatePending;
    if (pending === null) return null;
    const [arm, bit, seq] = pending;
    let outcome: string;
    try {
      const reply = yield message("private_report", this.experiment, this.record.token, { arm, bit, seq });
      outcome = String(reply.outcome);
      this.record.privateSent = Math.max(this.sent, Number(reply.sent));
    } catch (err) {
      if (!(err instanceof CoordinatorError) || err.status !== 409) throw err;
      outcome = "refused";
      if (err.detail.includes("decided")) this.closed = true;
    }
    // its number is used whatever the answer: the device never releases more than B bits
    this.record.privateSent = Math.max(this.sent, seq);
    this.record.privatePending = null;
    this.persist();
    this.outcomes[outcome] = (this.outcomes[outcome] ?? 0) + 1;
    return outcome;
  }
}

/** A device in an LDP experiment, as `enroll` gives it (see the module's doc). */
export class PrivateAgent {
  resumed = false;
  gone = false;
  closed = false;
  readonly protocol: PrivateProtocol;
  /** The transport of its reports (tests inject one that loses a reply). */
  transport: Transport;
  private etag: string | null;
  private queue: Promise<unknown> = Promise.resolve();
  private change: Change | null = null;
  private waiters: (() => void)[] = [];
  private readonly listeners = new Set<(agent: PrivateAgent) => void>();
  private unsubscribe: (() => void) | null = null;
  private releaseFollower: (() => void) | null = null;

  private constructor(
    readonly client: CoordinatorClient,
    readonly view: GlobalView,
    readonly record: AgentRecord,
    readonly store: StateStore,
    document: Record<string, any>,
    etag: string | null,
    readonly draws: Draws,
  ) {
    this.etag = etag;
    this.protocol = new PrivateProtocol(view.experiment, record, () => this.persist(), document);
    this.transport = clientTransport(client);
  }

  /** Called by `enroll` for an LDP experiment (its document just read, the agent restored or
   * enrolled); a report pending from the last run is sent again. */
  static async open(
    options: EnrollOptions,
    client: CoordinatorClient,
    view: GlobalView,
    record: AgentRecord,
    store: StateStore,
    resumed: boolean,
    document: Record<string, any>,
    etag: string | null,
    draws: Draws = cryptoDraws(),
  ): Promise<PrivateAgent> {
    const agent = new PrivateAgent(client, view, record, store, document, etag, draws);
    agent.resumed = resumed;
    if (options.follow ?? true) {
      const { follower, release } = shareFollower(options.coordinator, options.experiment, {
        pollMs: options.pollMs,
        timeoutMs: options.timeoutMs,
        retryMaxMs: Math.max(options.retryMaxMs ?? 30_000, 60_000),
      });
      agent.follow(follower, release);
    }
    if (resumed) await agent.resendPending();
    return agent;
  }

  // -- what the application calls -----------------------------------------------------------

  /** One arm: the identified one, else drawn from the allocation as last read, with the
   * device's own uniform. Throws ExperimentGone if the experiment was deleted. */
  choose(): number[] {
    this.check();
    this.catchUp();
    if (this.gone) throw new ExperimentGone(this.view.experiment);
    return [this.protocol.choose(this.draws.random())];
  }

  /** The reward of the arm `choose` gave: privatized and reported while reports are left; the
   * arms reported now ([arm], or [] once spent or decided; a report an earlier call could not
   * deliver is sent first, in its place). A reward the experiment does not
   * take is refused (RangeError), nothing sent. Afterwards the allocation is read again (while
   * reports are left), so that the next `choose` draws from the current one. */
  async observe(arms: number[], rewards: number[]): Promise<number[]> {
    if (!Array.isArray(arms) || !Array.isArray(rewards) || arms.length !== 1 || rewards.length !== 1) {
      throw new TypeError("observe(arms, rewards): the one arm choose() gave, and its reward");
    }
    this.check();
    const [arm] = arms;
    const [reward] = rewards;
    this.protocol.check(arm, reward);
    if (this.gone) throw new ExperimentGone(this.view.experiment);
    this.protocol.decide(arm, reward, this.draws.random(), this.draws.random());
    const pending = this.record.privatePending;
    if (pending === null) return [];
    // a report still pending (its reply lost by an earlier call) goes again, unchanged, instead
    const outcome = await this.run(() => run(this.protocol.deliver(), this.transport));
    if (!this.protocol.spent && !this.protocol.decided) await this.refresh();
    if (this.gone) throw new ExperimentGone(this.view.experiment);
    return outcome === "counted" || outcome === "duplicate" ? [pending[0]] : [];
  }

  /** Read the experiment document now (If-None-Match); true if it changed. */
  refresh(): Promise<boolean> {
    return this.run(() => this.read());
  }

  /** What the coordinator counted of this device's own reports (GET /v1/agents/me, its own
   * token): `reports_sent`, `reports_left`, and `waiting`, the experiment's counted messages not
   * yet in the public counts (published `publish_batch` at a time). */
  me(): Promise<Record<string, any>> {
    return this.run(() => this.client.me(this.record.token));
  }

  /** Resolves once every report decided so far is answered and saved. */
  async flush(): Promise<void> {
    await this.queue;
    await this.store.flush();
  }

  /** Resolves true at the next change the follower learns of, false after `timeoutMs`. */
  waitForChange(timeoutMs = 30_000): Promise<boolean> {
    if (this.change !== null) return Promise.resolve(true);
    return new Promise((resolve) => {
      const wake = (): void => {
        clearTimeout(timer);
        resolve(true);
      };
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((w) => w !== wake);
        resolve(false);
      }, timeoutMs);
      this.waiters.push(wake);
    });
  }

  /** Calls `listener(agent)` at each change the follower learns of; returns what stops it. */
  onChange(listener: (agent: PrivateAgent) => void): () => void {
    this.listeners.add(listener);
    return () => {
      this.listeners.delete(listener);
    };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.unsubscribe?.();
    this.releaseFollower?.();
    for (const wake of this.waiters.splice(0)) wake();
    this.client.close();
    await this.queue.catch(() => undefined);
    this.persist();
    await this.store.flush().catch(() => undefined);
    await this.store.release();
  }

  // -- what the application may read --------------------------------------------------------

  get experiment(): string {
    return this.view.experiment;
  }

  get agentId(): string {
    return this.record.agentId;
  }

  get arms(): string[] {
    return this.view.arms.slice();
  }

  get remaining(): number[] {
    this.catchUp();
    return Array.from(this.protocol.remaining).sort((a, b) => a - b);
  }

  /** exploring, identified, or deleted (as far as this device read). */
  get status(): string {
    this.catchUp();
    return this.gone ? "deleted" : this.protocol.status;
  }

  get bestArm(): number | null {
    const remaining = this.remaining;
    return remaining.length === 1 ? remaining[0] : null;
  }

  /** Nothing more to send: decided (or deleted), or every report sent. */
  get done(): boolean {
    this.catchUp();
    return this.gone || this.protocol.decided || this.protocol.spent;
  }

  /** Every report sent: choose still gives an arm, nothing more leaves. */
  get settled(): boolean {
    return this.protocol.spent;
  }

  get reported(): boolean {
    return this.protocol.sent > 0 || this.record.privatePending !== null;
  }

  /** Reports sent and answered (counted, or refused: each a release). */
  get sent(): number {
    return this.protocol.sent;
  }

  /** Reports it may still send: B less those sent and the one pending. */
  get reportsLeft(): number {
    return this.protocol.reportsLeft;
  }

  get allocation(): number[] {
    return this.protocol.allocation.slice();
  }

  /** Every arm's estimate (reports, mean, ci) as last read. */
  get estimates(): any[] | null {
    this.catchUp();
    return this.protocol.estimates;
  }

  get lift(): any[] | null {
    return this.protocol.lift;
  }

  // -- inside -------------------------------------------------------------------------------

  private check(): void {
    if (this.closed) throw new Error("this agent is closed");
  }

  private run<T>(work: () => Promise<T>): Promise<T> {
    const next = this.queue.then(work).catch((err) => {
      if (err instanceof CoordinatorError && err.status === 404) {
        this.gone = true;
        return undefined as T;
      }
      throw err;
    });
    this.queue = next.catch(() => undefined);
    return next;
  }

  private resendPending(): Promise<string | null> {
    return this.run(() => run(this.protocol.deliver(), this.transport));
  }

  private async read(): Promise<boolean> {
    const seq = nextSeq();
    const reply = await this.client.experimentIfChanged(this.view.experiment, this.etag);
    if (reply.status === 304 || reply.body === null) return false;
    this.etag = reply.etag;
    this.view.update(reply.body, seq);
    if (this.view.replaced) {
      this.gone = true;
      return false;
    }
    this.protocol.update(reply.body);
    return true;
  }

  private follow(follower: GlobalSetFollower, release: () => void): void {
    this.releaseFollower = release;
    if (follower.latest !== null) this.change = follower.latest;
    this.unsubscribe = follower.subscribe((change) => {
      this.change = change;
      for (const wake of this.waiters.splice(0)) wake();
      this.catchUp();
    });
  }

  /** A change the follower saw: the deletion, or the document read again (its allocation,
   * estimates), then the listeners called. */
  private catchUp(): void {
    if (this.closed) return;
    const change = this.change;
    this.change = null;
    if (change === null || this.gone) return;
    if (change.state === null) {
      this.gone = true;
      this.notify();
      return;
    }
    this.run(() => this.read())
      .then(() => this.notify())
      .catch(() => undefined);
  }

  private notify(): void {
    for (const listener of Array.from(this.listeners)) {
      try {
        listener(this);
      } catch (err) {
        console.error("dexp: an onChange listener failed", err);
      }
    }
  }

  /** Save the record (credentials, reports sent, the pending report). */
  private persist(): void {
    this.store.save(this.record.toSaved(this.view.experiment, this.view.createdAt, undefined));
  }
}
