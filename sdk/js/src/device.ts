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
import { clientTransport, DeviceProtocol, type Exchange, run, type Transport } from "./protocol.js";
import { AgentRecord } from "./record.js";
import { PrivateAgent } from "./private.js";
import { defaultStore, MemoryStore, type SavedAgent, type StateStore } from "./storage.js";
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
  /** Its side of the protocol (protocol.ts): what it sends, given the coordinator's replies. */
  readonly protocol: DeviceProtocol;
  private readonly transport: Transport;
  private queue: Promise<unknown> = Promise.resolve();
  private failure: unknown = null;
  private change: Change | null = null;
  private waiters: (() => void)[] = [];
  private unsubscribe: (() => void) | null = null;
  private releaseFollower: (() => void) | null = null;
  private onPageHide: (() => void) | null = null;

  private constructor(
    readonly client: CoordinatorClient,
    readonly view: GlobalView,
    readonly record: AgentRecord,
    readonly local: LocalAgent,
    readonly store: StateStore,
    readonly reconcileMs: number,
  ) {
    const hooks = { persist: () => this.persist(), lostEpoch: () => this.restartLocal(), jitter: Math.random };
    this.protocol = new DeviceProtocol(view, record, hooks, reconcileMs, Date.now() + reconcileMs * (1 + Math.random()));
    this.transport = clientTransport(client);
  }

  get votesSent(): number {
    return this.protocol.votesSent;
  }

  get votesResent(): number {
    return this.protocol.votesResent;
  }

  get reportsSent(): number {
    return this.protocol.reportsSent;
  }

  get settledSent(): number {
    return this.protocol.settledSent;
  }

  get resetsLimited(): number {
    return this.protocol.resetsLimited;
  }

  get checks(): number {
    return this.protocol.checks;
  }

  /** See the module's doc and `enroll`. */
  static async start(options: EnrollOptions): Promise<DeviceAgent | PrivateAgent> {
    const client = new CoordinatorClient(options.coordinator, { timeoutMs: options.timeoutMs, retryMaxMs: options.retryMaxMs });
    const store = options.storage ?? (options.storageKey || options.stateFile ? defaultStore(options.storageKey ?? "dexp-agent", options.stateFile, options.lockWaitMs) : new MemoryStore());
    const draws = options.draws ?? cryptoDraws();
    let locked = false;
    try {
      await store.lock();
      locked = true;
      const seq = nextSeq();
      const read = await client.experimentIfChanged(options.experiment, null);
      const view = GlobalView.of(options.experiment, read.body, seq);
      if (view.params.algorithm === "ldp") {
        const { saved, record } = await restoreOrEnroll(client, view, store, options.ticket);
        return await PrivateAgent.open(options, client, view, record, store, saved !== null, read.body, read.etag, draws);
      }
      const spec = view.spec;
      subroutineClass(spec.subroutine); // one this SDK cannot run: refused before a ticket is used
      const { saved, record } = await restoreOrEnroll(client, view, store, options.ticket);
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
        agent.protocol.nextCheck = 0; // its acknowledged votes checked at the first call
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

  /** What the coordinator counted of this agent's own messages (GET /v1/agents/me, its own
   * token): `votes` (this epoch's, each `counted` or `arm_out`), `reported` (CDE), `reports_sent`
   * and `reports_left` (LDP), and `waiting`, the experiment's counted messages not yet in the
   * public counts (published `publish_batch` at a time): those may not show this agent's
   * messages yet, this does. Queued after what the agent is sending (`flush` first). */
  me(): Promise<Record<string, any>> {
    return this.run(() => this.client.me(this.record.token));
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

  /** Votes of an epoch a failover lost forgotten (the protocol's), the local agent restarted. */
  private forgetLostEpoch(): void {
    this.protocol.forgetLostEpoch();
  }

  /** The current epoch began with a reset this agent did not see as one: restart as it asks. */
  private restartLocal(): void {
    this.local.voted = new Set(this.record.decided(this.view.epoch));
    if (!this.local.reports) this.local.reset(this.view.remaining);
  }

  /** One exchange of the protocol through the coordinator client. */
  private exchange<R>(exchange: Exchange<R>): Promise<R> {
    return run(exchange, this.transport);
  }

  /** Save the record and the local statistics (the whole state: one small JSON document). */
  private persist(): void {
    this.store.save(this.record.toSaved(this.view.experiment, this.view.createdAt, this.local.toState()));
  }

  /** Votes decided: on record as pending (and saved) before they are sent. */
  private decide(votes: number[]): void {
    this.protocol.decide(votes);
  }

  /** Send the pending votes of the current epoch, in order. */
  private async deliverDecided(): Promise<void> {
    await this.exchange(this.protocol.deliverDecided());
  }

  private async deliverReport(): Promise<void> {
    await this.exchange(this.protocol.deliverReport());
  }

  /** DSER4: ask for a new epoch; refused (429) or waiting for more agents, reset locally only. */
  private async reset(): Promise<void> {
    if (this.view.globalReset && (await this.exchange(this.protocol.reset()))) {
      await this.exchange(this.protocol.refresh());
      this.syncLocal();
      return;
    }
    this.local.reset(this.view.remaining);
  }

  /** CE only: tell the coordinator this agent settled, once per settle, again when it forgot. */
  private async settle(): Promise<void> {
    await this.exchange(this.protocol.settle(this.local.done, this.local.epoch));
  }

  /** After a restart: the votes decided and not seen acknowledged, and CDE's unanswered report,
   * sent again (a second copy is a duplicate, harmless). Pending votes of another epoch dropped. */
  private resendPending(): Promise<number> {
    return this.run(() => this.exchange(this.protocol.resendPending()));
  }

  /** Why to ask the coordinator for this agent's votes now (protocol.ts checkReason). */
  private checkReason(now: number): string | null {
    return this.protocol.checkReason(now);
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
    await this.exchange(this.protocol.reconcile(now));
  }
}

/** The agent saved in `store` if it is one of this experiment the coordinator still knows, else
 * a new one enrolled with `ticket` and saved before anything else; `saved` null when new. */
export async function restoreOrEnroll(
  client: CoordinatorClient,
  view: GlobalView,
  store: StateStore,
  ticket: string | undefined,
): Promise<{ saved: SavedAgent | null; record: AgentRecord }> {
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
      if (!ticket) {
        throw new EnrollmentRefused(
          `the coordinator no longer knows agent ${saved.agent_id} (401: its data was lost): enroll a new agent with a new ticket`,
        );
      }
      saved = null;
    }
  }
  if (saved !== null) return { saved, record: AgentRecord.fromSaved(saved) };
  const record = new AgentRecord(...(await enrollWith(client, view, ticket, store.where)));
  store.save(record.toSaved(view.experiment, view.createdAt, undefined)); // before anything else
  await store.flush();
  return { saved: null, record };
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
 * with `ticket` and saved there before anything else. See DeviceAgent; in an LDP experiment
 * (`algorithm: "ldp"`) a PrivateAgent (private.ts): one arm drawn from the allocation, one
 * private report per activation. */
export function enroll(options: EnrollOptions): Promise<DeviceAgent | PrivateAgent> {
  return DeviceAgent.start(options);
}
