/**
 * One dexp agent on a device, over HTTP alone (agent/device.py and agent/library.py, for pages
 * and Node). docs/DEVICES.md is its guide.
 *
 *   const agent = await enroll({ coordinator, experiment, ticket, storageKey });
 *   const arms = agent.choose();           // the arms to play now
 *   await agent.observe(arms, rewards);    // the rewards stay here; maybe a vote leaves
 *   agent.status;                          // "exploring" | "identified" | "tied" | "deleted"
 *   agent.close();
 *
 * What leaves the device: the ticket (once), votes (an arm index and an epoch), CE's "settled"
 * messages, DSER4's reset requests, CDE's one randomized report, reads of the public state and
 * its event stream, and GET /v1/agents/me (its own votes, to re-send what a failover lost).
 * Never a reward, a count, a mean, or which arm it plays.
 *
 * `choose` is synchronous: it applies what the follower learnt, syncs the local set with the
 * global one, and queues any vote that gives. `observe` sends: the agent's requests run one at a
 * time, in order (a queue), as the Python agent's do.
 */
import { type AgentState, LocalAgent } from "./agent.js";
import { cryptoDraws, type Draws } from "./draws.js";
import { subroutineClass } from "./subroutines.js";
import { type Change, type GlobalSetFollower, nextSeq, shareFollower } from "./follower.js";
import { CoordinatorClient, CoordinatorError } from "./http.js";
import { AgentRecord, IN_VOTER_SET } from "./record.js";
import { defaultStore, MemoryStore, type StateStore } from "./storage.js";
import { GlobalView, type Status } from "./view.js";

export class EnrollmentRefused extends Error {
  constructor(message: string) {
    super(message);
    this.name = "EnrollmentRefused";
  }
}

export class ExperimentGone extends Error {
  constructor(experiment: string) {
    super(`experiment ${experiment} was deleted`);
    this.name = "ExperimentGone";
  }
}

export interface EnrollOptions {
  /** The coordinator's URL, or several comma-separated (failover). */
  coordinator: string;
  experiment: string;
  /** A one-time ticket (`dexp tickets issue`): used once, a reload resumes from storage. */
  ticket?: string;
  /** localStorage key (browser), or the state file's name without `.json` (Node). */
  storageKey?: string;
  /** Node: the state file (default `<storageKey>.json`). */
  stateFile?: string;
  /** Browser: how long to wait for another tab holding the same key (default 10 000 ms). */
  lockWaitMs?: number;
  /** Where to keep the agent instead (MemoryStore: nowhere). */
  storage?: StateStore;
  /** Follow the global set by SSE and polls (default true). */
  follow?: boolean;
  /** Fallback poll period, ms (default 30 000). */
  pollMs?: number;
  /** Mean period of the check of its own votes, ms (default 300 000). */
  reconcileMs?: number;
  /** Per request, ms (default 10 000). */
  timeoutMs?: number;
  /** Cap of the retry back-off, ms (default 30 000). */
  retryMaxMs?: number;
  /** The local algorithm's randomness (default: crypto.getRandomValues). */
  draws?: Draws;
}

/** One agent on a device: build it with `enroll`. */
export class DeviceAgent {
  /** Restored from storage: no new enrollment. */
  resumed = false;
  /** The experiment was deleted (or deleted and created again). */
  gone = false;
  closed = false;
  votesSent = 0;
  votesResent = 0;
  reportsSent = 0;
  settledSent = 0;
  resetsLimited = 0;
  checks = 0;
  private queue: Promise<unknown> = Promise.resolve();
  private failure: unknown = null;
  private change: Change | null = null;
  private waiters: (() => void)[] = [];
  private unsubscribe: (() => void) | null = null;
  private releaseFollower: (() => void) | null = null;
  private checkedSeq = 0;
  private nextCheck: number;
  private settledWith: Set<number> | null = null;
  private settledEpoch = -1;
  private settleRefused = false;
  private onPageHide: (() => void) | null = null;

  private constructor(
    readonly client: CoordinatorClient,
    readonly view: GlobalView,
    readonly record: AgentRecord,
    readonly local: LocalAgent,
    readonly store: StateStore,
    readonly reconcileMs: number,
  ) {
    this.nextCheck = Date.now() + reconcileMs * (1 + Math.random());
  }

  /** See the module's doc and `enroll`. */
  static async start(options: EnrollOptions): Promise<DeviceAgent> {
    const client = new CoordinatorClient(options.coordinator, { timeoutMs: options.timeoutMs, retryMaxMs: options.retryMaxMs });
    const store = options.storage ?? (options.storageKey || options.stateFile ? defaultStore(options.storageKey ?? "dexp-agent", options.stateFile, options.lockWaitMs) : new MemoryStore());
    const draws = options.draws ?? cryptoDraws();
    let locked = false;
    try {
      await store.lock();
      locked = true;
      const view = await GlobalView.fetch(client, options.experiment);
      const spec = view.spec;
      subroutineClass(spec.subroutine); // one this SDK cannot run: refused before a ticket is used
      let saved = await store.load();
      if (saved !== null && saved.experiment !== view.experiment) {
        throw new EnrollmentRefused(
          `${store.where} holds an agent of experiment ${saved.experiment}, not ${view.experiment}: give each experiment its own storageKey`,
        );
      }
      if (saved !== null && saved.created_at !== view.createdAt) saved = null; // deleted and created again
      if (saved !== null) {
        try {
          await client.me(saved.token);
        } catch (err) {
          if (!(err instanceof CoordinatorError) || err.status !== 401) throw err;
          if (!options.ticket) {
            throw new EnrollmentRefused(
              `the coordinator no longer knows agent ${saved.agent_id} (401: its data was lost): enroll a new agent with a new ticket`,
            );
          }
          saved = null;
        }
      }
      let record: AgentRecord;
      if (saved !== null) {
        record = AgentRecord.fromSaved(saved);
      } else {
        record = new AgentRecord(...(await enrollWith(client, view, options.ticket, store.where)));
        store.save(record.toSaved(view.experiment, view.createdAt, undefined)); // before anything else
        await store.flush();
      }
      const local =
        saved?.local !== undefined ? LocalAgent.fromState(spec, saved.local as AgentState, draws) : new LocalAgent(spec, draws);
      if (saved?.local === undefined) local.epoch = view.epoch;
      for (const arm of record.decided(local.epoch)) local.voted.add(arm);
      const agent = new DeviceAgent(client, view, record, local, store, options.reconcileMs ?? 300_000);
      agent.resumed = saved !== null;
      if (options.follow ?? true) {
        const { follower, release } = shareFollower(options.coordinator, options.experiment, {
          pollMs: options.pollMs,
          timeoutMs: options.timeoutMs,
          retryMaxMs: Math.max(options.retryMaxMs ?? 30_000, 60_000),
        });
        agent.follow(follower, release);
      }
      const page = globalThis as { addEventListener?: (type: string, fn: () => void) => void };
      if (typeof page.addEventListener === "function") {
        agent.onPageHide = () => agent.persist();
        page.addEventListener("pagehide", agent.onPageHide);
      }
      if (agent.resumed) {
        await agent.resendPending();
        agent.nextCheck = 0; // its acknowledged votes checked at the first call
      }
      return agent;
    } catch (err) {
      client.close();
      if (locked) await store.release();
      throw err;
    }
  }

  private follow(follower: GlobalSetFollower, release: () => void): void {
    this.releaseFollower = release;
    if (follower.latest !== null) this.change = follower.latest;
    this.unsubscribe = follower.subscribe((change) => {
      this.change = change;
      const waiters = this.waiters;
      this.waiters = [];
      for (const wake of waiters) wake();
      if (this.listeners.size === 0) return;
      this.catchUp();
      for (const listener of Array.from(this.listeners)) {
        try {
          listener(this);
        } catch (err) {
          console.error("dexp: an onChange listener failed", err);
        }
      }
    });
  }

  private readonly listeners = new Set<(agent: DeviceAgent) => void>();

  /** Calls `listener(agent)` at each change of the global set the follower learns of (an arm
   * out, a reset, the identification, a tie, the deletion): read `status`, `remaining`... in it.
   * Returns the function that stops it. */
  onChange(listener: (agent: DeviceAgent) => void): () => void {
    this.listeners.add(listener);
    return () => {
      this.listeners.delete(listener);
    };
  }

  /** Resolves once every vote, report or message decided so far is answered and saved (a page
   * may await it before navigating away; `observe` already saved what it decided). */
  async flush(): Promise<void> {
    await this.queue;
    this.check();
    await this.store.flush();
  }

  // -- what the application calls -----------------------------------------------------------

  /** The arms to play now (indices into `arms`): usually one. Once identified, that arm; settled
   * (one arm left locally), that arm (its rewards teach nothing more); under CDE, none between
   * its report and the answer. Throws ExperimentGone if the experiment was deleted. */
  choose(): number[] {
    this.check();
    this.catchUp();
    if (this.gone) throw new ExperimentGone(this.view.experiment);
    this.syncLocal();
    this.reconcileSoon();
    if (this.view.identified) return Array.from(this.view.remaining);
    if (this.local.reports) return this.reported || this.local.done ? [] : this.local.select();
    return this.local.done ? this.local.localArms : this.local.select();
  }

  /** The rewards of the arms `choose` gave, in the same order: the arms it voted against
   * (usually none). The rewards stay on the device. */
  async observe(arms: number[], rewards: number[]): Promise<number[]> {
    if (!Array.isArray(arms) || !Array.isArray(rewards) || arms.length !== rewards.length) {
      throw new TypeError("observe(arms, rewards): two arrays of the same length (the arms choose() gave)");
    }
    for (const reward of rewards) {
      if (typeof reward !== "number" || !Number.isFinite(reward)) throw new TypeError(`observe: reward ${reward} is not a finite number`);
      if (this.view.bernoulli && reward !== 0 && reward !== 1) {
        throw new RangeError(
          `observe: reward ${reward} refused: this experiment's rewards are declared Bernoulli, every reward must be 0 or 1 (its budget is certified for those only); nothing was recorded`,
        );
      }
    }
    this.check();
    if (this.gone) throw new ExperimentGone(this.view.experiment);
    // Learnt and decided at once, and saved before anything is sent: a page closed right after
    // this call (observe from a pagehide handler) loses nothing, and its next visit sends it.
    let votes: number[] = [];
    if (!this.local.reports) {
      if (!this.local.done) votes = this.local.observe(arms, rewards); // settled: nothing to learn
      this.decide(votes);
    } else if (!this.reported && !this.local.done) {
      this.local.observe(arms, rewards);
      if (this.local.report !== null) this.record.report = this.local.report; // drawn once
    }
    this.persist();
    await this.run(async () => {
      if (this.local.reports) {
        if (this.reported && this.record.reportOutcome === null) await this.deliverReport();
      } else {
        await this.deliverDecided();
        if (this.local.wantsReset()) await this.reset();
        await this.settle();
      }
      await this.reconcile(Date.now());
    });
    this.catchUp();
    if (this.gone) throw new ExperimentGone(this.view.experiment);
    return votes;
  }

  /** Resolves true at the next change of the global set the follower learns of, false after
   * `timeoutMs`: what an agent with nothing to play (settled, or reported) does meanwhile. */
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

  /** Read the experiment's state now; true if the global set changed. */
  refresh(): Promise<boolean> {
    return this.run(() => this.view.refresh(this.client));
  }

  /** Stop following, save the local statistics, release the storage key. Votes decided and not
   * yet acknowledged are on record: the next start sends them. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.unsubscribe?.();
    this.releaseFollower?.();
    for (const wake of this.waiters.splice(0)) wake();
    const page = globalThis as { removeEventListener?: (type: string, fn: () => void) => void };
    if (this.onPageHide !== null) page.removeEventListener?.("pagehide", this.onPageHide);
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

  /** The arms' names, by index. */
  get arms(): string[] {
    return this.view.arms.slice();
  }

  /** The global set, as far as this agent knows. */
  get remaining(): number[] {
    this.catchUp();
    return Array.from(this.view.remaining).sort((a, b) => a - b);
  }

  get epoch(): number {
    this.catchUp();
    return this.view.epoch;
  }

  /** exploring, identified (one arm left), tied (several left, none can reach the threshold
   * with the agents enrolled), or deleted. */
  get status(): Status | "deleted" {
    this.catchUp();
    return this.gone ? "deleted" : this.view.status;
  }

  /** The identified arm's index (null until then). */
  get bestArm(): number | null {
    const remaining = this.remaining;
    return remaining.length === 1 ? remaining[0] : null;
  }

  /** The experiment ended (identified, tied or deleted). A tie reopens if agents enroll. */
  get done(): boolean {
    return this.status !== "exploring";
  }

  /** Its local set holds one arm (no vote until the global set changes), or under CDE its
   * report is drawn: `waitForChange` rather than play. */
  get settled(): boolean {
    return this.local.done || this.reported;
  }

  /** CDE: its one report is drawn (sent, or to be sent again at the next start). */
  get reported(): boolean {
    return this.record.report !== null;
  }

  // -- inside -------------------------------------------------------------------------------

  /** A request failure of the queued work (not a 404: that is `gone`) is thrown at the next call. */
  private check(): void {
    if (this.closed) throw new Error("this agent is closed");
    if (this.failure !== null) {
      const failure = this.failure;
      this.failure = null;
      throw failure;
    }
  }

  /** `work` after what is queued; a 404 marks the experiment gone. */
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

  /** Queued work whose failure is thrown at the next call (choose has no promise to reject). */
  private background(work: () => Promise<void>): void {
    this.run(work).catch((err) => {
      if (!this.closed) this.failure = err;
    });
  }

  private catchUp(): void {
    if (this.closed) return;
    const change = this.change;
    this.change = null;
    if (change !== null && !this.gone) {
      if (change.state === null) {
        this.gone = true;
      } else if (this.view.follow(change.state, change.seq) === "refresh") {
        this.background(async () => {
          await this.view.refresh(this.client);
        });
      }
    }
    if (this.view.replaced) this.gone = true;
  }

  private syncLocal(): void {
    this.forgetLostEpoch();
    const epoch = this.local.epoch;
    const votes = this.local.sync(this.view.remaining, this.view.epoch);
    if (this.local.epoch !== epoch) for (const arm of this.record.decided(this.local.epoch)) this.local.voted.add(arm);
    this.decide(votes);
    if (votes.length > 0 || (this.view.params.algorithm === "ce" && this.local.done)) {
      this.background(async () => {
        await this.deliverDecided();
        await this.settle();
      });
    }
  }

  /** Votes of an epoch a failover lost, whose number the current epoch took again, forgotten;
   * and the local statistics restart, as the reset that began the current epoch asks. */
  private forgetLostEpoch(): void {
    if (this.record.forgetLostEpoch(this.view.epoch, this.view.epochStartedAt)) {
      this.local.voted = new Set(this.record.decided(this.view.epoch));
      if (!this.local.reports) this.local.reset(this.view.remaining);
      this.persist();
    }
  }

  /** Save the record and the local statistics (the whole state: one small JSON document). */
  private persist(): void {
    this.store.save(this.record.toSaved(this.view.experiment, this.view.createdAt, this.local.toState()));
  }

  /** Votes decided: on record as pending (and saved) before they are sent. */
  private decide(votes: number[]): void {
    const epoch = this.view.epoch;
    for (const arm of votes) {
      if (this.view.epochStartedAt !== null && !this.record.epochStarts.has(epoch)) {
        this.record.epochStarts.set(epoch, this.view.epochStartedAt);
      }
      this.record.pending.push([arm, epoch]);
    }
    if (votes.length > 0) this.persist();
  }

  /** Send the pending votes (decided, not yet answered) of the current epoch, in order; another
   * epoch's are dropped (the coordinator would ignore them). */
  private async deliverDecided(): Promise<void> {
    if (this.record.pending.some(([, e]) => e !== this.view.epoch)) {
      this.record.pending = this.record.pending.filter(([, e]) => e === this.view.epoch);
      this.persist();
    }
    for (let next = this.record.pending[0]; next !== undefined; next = this.record.pending[0]) {
      await this.deliver(next[0], next[1]);
      this.votesSent += 1;
    }
  }

  private async deliver(arm: number, epoch: number): Promise<void> {
    const started = this.record.epochStarts.get(epoch) ?? null;
    const reply = await this.client.vote(this.view.experiment, this.record.token, arm, epoch, started);
    const outcome = String(reply.outcome);
    this.record.pending = this.record.pending.filter(([a, e]) => a !== arm || e !== epoch);
    this.record.acknowledged = this.record.acknowledged.filter((v) => (v.arm !== arm || v.epoch !== epoch) && v.epoch >= epoch - 1);
    this.record.acknowledged.push({ arm, epoch, outcome, seq: nextSeq(), votes: reply.votes ?? null });
    this.persist();
    if (reply.votes !== undefined) this.view.observeCount(arm, Number(reply.epoch), Number(reply.votes));
    if (this.view.stale(Number(reply.version), Number(reply.epoch))) await this.view.refresh(this.client);
  }

  private async deliverReport(): Promise<void> {
    const reply = await this.client.report(this.view.experiment, this.record.token, this.record.report as number);
    this.record.reportOutcome = String(reply.outcome);
    this.reportsSent += 1;
    this.persist();
  }

  /** DSER4: ask for a new epoch; refused (429) or waiting for more agents, reset locally only. */
  private async reset(): Promise<void> {
    if (this.view.globalReset) {
      const reply = await this.client.reset(this.view.experiment, this.record.token, this.view.epoch);
      if (reply !== null && !reply.pending) {
        await this.view.refresh(this.client);
        this.syncLocal();
        return;
      }
      if (reply === null) this.resetsLimited += 1;
    }
    this.local.reset(this.view.remaining);
  }

  /** CE only: tell the coordinator this agent settled, once per settle, again when it forgot. */
  private async settle(): Promise<void> {
    if (this.view.params.algorithm !== "ce" || this.settleRefused) return;
    const view = this.view;
    if (!this.local.done || this.local.epoch !== view.epoch) {
      this.settledWith = null;
      return;
    }
    if (view.remaining.size < 2) return;
    if (this.settledWith !== null) {
      const counted = new Set(
        this.record.acknowledged.filter((v) => v.epoch === view.epoch && IN_VOTER_SET.has(v.outcome)).map((v) => v.arm),
      );
      const gone = Array.from(this.settledWith).filter((a) => !view.remaining.has(a));
      if (this.settledEpoch === view.epoch && gone.every((a) => counted.has(a))) return;
      this.settledWith = null;
    }
    let reply;
    try {
      reply = await this.client.settled(view.experiment, this.record.token, view.epoch);
    } catch (err) {
      if (!(err instanceof CoordinatorError) || err.status === 404) throw err;
      this.settleRefused = true;
      return;
    }
    this.settledSent += 1;
    if (reply.outcome === "settled") {
      this.settledWith = new Set(reply.remaining_arms.map(Number));
      this.settledEpoch = Number(reply.epoch);
    }
    if (view.stale(Number(reply.version), Number(reply.epoch))) await view.refresh(this.client);
  }

  /** After a restart: the votes decided and not seen acknowledged, and CDE's unanswered report,
   * sent again (a second copy is a duplicate, harmless). Pending votes of another epoch dropped. */
  private resendPending(): Promise<void> {
    return this.run(async () => {
      this.forgetLostEpoch();
      if (this.reported && this.record.reportOutcome === null) await this.deliverReport();
      for (const [arm, epoch] of this.record.pending.slice()) {
        if (epoch === this.view.epoch) {
          await this.deliver(arm, epoch);
          this.votesResent += 1;
        } else {
          this.record.pending = this.record.pending.filter(([a, e]) => a !== arm || e !== epoch);
          this.persist();
        }
      }
    });
  }

  /** Why to ask the coordinator for this agent's votes now (agent/library.py check_reason). */
  private checkReason(now: number): string | null {
    const view = this.view;
    const acknowledged = this.record.acknowledged.filter((v) => v.epoch === view.epoch);
    if (acknowledged.length === 0) return null;
    if (view.lostAt > this.checkedSeq) return view.regressedAt > this.checkedSeq ? "regression" : "loss";
    for (const v of acknowledged) {
      if (
        v.votes !== null &&
        (IN_VOTER_SET.has(v.outcome) || v.outcome === "arm_out") &&
        v.seq < view.snapshotSeq &&
        view.remaining.has(v.arm) &&
        v.arm < view.votes.length &&
        view.votes[v.arm] < v.votes
      ) {
        return "count";
      }
    }
    return now >= this.nextCheck ? "period" : null;
  }

  /** The check of its own votes, queued if due (choose is where a settled agent still comes). */
  private reconcileSoon(): void {
    if (this.reconciling || this.checkReason(Date.now()) === null) return;
    this.reconciling = true;
    this.background(async () => {
      try {
        await this.reconcile(Date.now());
      } finally {
        this.reconciling = false;
      }
    });
  }

  private reconciling = false;

  /** If checkReason says so: GET /v1/agents/me, and the acknowledged votes it lacks sent again. */
  private async reconcile(now: number): Promise<void> {
    const reason = this.checkReason(now);
    if (reason === null) return;
    const view = this.view;
    const seq = nextSeq();
    this.checkedSeq = seq;
    this.nextCheck = now + this.reconcileMs * (0.5 + Math.random());
    let me;
    try {
      me = await this.client.me(this.record.token);
    } catch (err) {
      if (err instanceof CoordinatorError && err.status !== 404) return;
      throw err;
    }
    this.checks += 1;
    // another version, or an epoch of the same number begun at another time (a failover lost the
    // view's): the view is read again first, so a lost epoch's votes are forgotten, not re-sent
    const started = me.epoch_started_at ?? null;
    const sameStart = started === null || Number(started) === view.epochStartedAt;
    if (Number(me.epoch) !== view.epoch || Number(me.version) !== view.version || !sameStart) {
      await view.refresh(this.client);
      if (view.epoch !== Number(me.epoch)) return;
      if (started !== null && Number(started) !== view.epochStartedAt) return;
    }
    this.forgetLostEpoch();
    const votedAgainst = new Set<number>(me.voted_against.map(Number));
    for (const v of this.record.acknowledged) {
      if (v.epoch === view.epoch && votedAgainst.has(v.arm) && v.arm < view.votes.length && v.votes !== null) {
        v.votes = Math.min(v.votes, view.votes[v.arm]);
      }
    }
    const missing = this.record.acknowledged
      .filter(
        (v) =>
          v.epoch === view.epoch &&
          v.seq < seq &&
          (IN_VOTER_SET.has(v.outcome) || view.remaining.has(v.arm)) &&
          !votedAgainst.has(v.arm),
      )
      .map((v) => v.arm);
    if (missing.length > 0 && (reason === "count" || reason === "period")) {
      view.noteLoss();
      this.checkedSeq = view.lostAt;
    }
    for (const arm of missing) await this.deliver(arm, view.epoch);
    this.votesResent += missing.length;
  }
}

async function enrollWith(
  client: CoordinatorClient,
  view: GlobalView,
  ticket: string | undefined,
  where: string,
): Promise<[string, string]> {
  if (!ticket) {
    throw new EnrollmentRefused(
      `no agent of experiment ${view.experiment} is saved in ${where}: a ticket is needed to enroll one (\`dexp tickets issue ${view.experiment} --count 1\`)`,
    );
  }
  try {
    const reply = await client.enroll(ticket, view.experiment);
    return [String(reply.agent_id), String(reply.token)];
  } catch (err) {
    const why: Record<number, string> = {
      401: "the ticket is unknown, used, expired or another experiment's: ask for a new ticket",
      403: "the experiment has its maximum of agents: try later",
    };
    if (err instanceof CoordinatorError && why[err.status] !== undefined) {
      throw new EnrollmentRefused(`enrollment refused (${err.message}): ${why[err.status]}`);
    }
    throw err;
  }
}

/** The agent saved under `storageKey` if it is one of this experiment, else a new one enrolled
 * with `ticket` and saved there before anything else. See DeviceAgent. */
export function enroll(options: EnrollOptions): Promise<DeviceAgent> {
  return DeviceAgent.start(options);
}
