/**
 * The device protocol without I/O (agent/protocol.py's DeviceProtocol, the same object): what an
 * agent sends the coordinator, given its replies. Each exchange (deliver the votes decided,
 * settle, reset, re-send after a restart, reconcile) is a generator that yields a Message and
 * receives the reply's JSON body, or has a CoordinatorError thrown in (a refusal; a 404, the
 * experiment gone, is never swallowed). `run` drives one through a transport the caller injects
 * (`clientTransport` for http.ts's CoordinatorClient), as GrowthBook's SDK takes its fetch;
 * tests/services/test_device_agreement.py drives both objects with recorded replies and compares every
 * message. The local agent's decisions are inputs; what the protocol asks of it (restart after a
 * lost epoch) is a callback.
 */
import { nextSeq } from "./follower.js";
import { type CoordinatorClient, CoordinatorError } from "./http.js";
import { type AgentRecord, IN_VOTER_SET } from "./record.js";
import type { GlobalView } from "./view.js";

/** One request to the coordinator; `kind` names the CoordinatorClient method that sends it. */
export interface Message {
  kind: "state" | "vote" | "report" | "private_report" | "settled" | "reset" | "me";
  experiment: string;
  method: string;
  path: string;
  body: Record<string, unknown> | null;
  token: string | null;
}

export type Exchange<R> = Generator<Message, R, any>;
export type Transport = (message: Message) => Promise<any>;

const ROUTES: Record<Message["kind"], [string, string]> = {
  state: ["GET", ""],
  vote: ["POST", "/votes"],
  report: ["POST", "/report"],
  private_report: ["POST", "/reports"], // LDP (private.ts)
  settled: ["POST", "/settled"],
  reset: ["POST", "/reset"],
  me: ["GET", "/v1/agents/me"],
};

/** Drive `exchange`: each message through `transport`, its reply (or its error) back in. */
export async function run<R>(exchange: Exchange<R>, transport: Transport): Promise<R> {
  let step = exchange.next();
  while (!step.done) {
    let reply: any;
    try {
      reply = await transport(step.value);
    } catch (err) {
      if (!(err instanceof CoordinatorError)) throw err;
      step = exchange.throw(err);
      continue;
    }
    step = exchange.next(reply);
  }
  return step.value;
}

/** The coordinator client as a transport: each message through the client's method of its kind
 * (its retries, failovers and 429 waits kept; a rate-limited reset answers null). */
export function clientTransport(client: CoordinatorClient): Transport {
  return (m) => {
    const body = (m.body ?? {}) as Record<string, any>;
    const token = String(m.token);
    switch (m.kind) {
      case "state":
        return client.experiment(m.experiment);
      case "me":
        return client.me(token);
      case "vote":
        return client.vote(m.experiment, token, body.arm, body.epoch, body.epoch_started_at ?? null);
      case "report":
        return client.report(m.experiment, token, body.arm);
      case "private_report":
        return client.privateReport(m.experiment, token, body.arm, body.bit, body.seq);
      case "settled":
        return client.settled(m.experiment, token, body.epoch);
      case "reset":
        return client.reset(m.experiment, token, body.epoch);
    }
  };
}

export interface ProtocolHooks {
  /** Save the record (and the local statistics). */
  persist: () => void;
  /** The votes of an epoch a failover lost were forgotten: the local agent restarts. */
  lostEpoch: () => void;
  /** U(0, 1), for the slow check's period (reconcileMs x U(0.5, 1.5)). */
  jitter: () => number;
}

/** The message of `kind` (see ROUTES) about `experiment` (agent/protocol.py's `message`). */
export function message(kind: Message["kind"], experiment: string, token: string | null, body: Record<string, unknown> | null = null): Message {
  const [method, tail] = ROUTES[kind];
  const path = kind === "me" ? tail : `/v1/experiments/${experiment}${tail}`;
  return { kind, experiment, method, path, body, token };
}

/** One agent's side of the protocol (agent/protocol.py DeviceProtocol). */
export class DeviceProtocol {
  votesSent = 0;
  votesResent = 0;
  reportsSent = 0;
  settledSent = 0;
  resetsLimited = 0;
  checks = 0;
  checkedSeq = 0;
  /** CE: the global set when the coordinator took the settled message, and its epoch. */
  settledWith: Set<number> | null = null;
  settledEpoch = -1;
  settleRefused = false;

  constructor(
    readonly view: GlobalView,
    readonly record: AgentRecord,
    readonly hooks: ProtocolHooks,
    readonly reconcileMs: number,
    public nextCheck: number,
  ) {}

  /** The message of `kind` (see ROUTES), with this agent's token but for a state read. */
  message(kind: Message["kind"], body: Record<string, unknown> | null = null): Message {
    return message(kind, this.view.experiment, kind === "state" ? null : this.record.token, body);
  }

  /** Read the global state again; true if the global set changed. */
  *refresh(): Exchange<boolean> {
    const seq = nextSeq();
    const state = yield this.message("state");
    return this.view.update(state, seq);
  }

  /** Votes of an epoch a failover lost, whose number the current epoch took again, forgotten;
   * the local agent restarts, as the reset that began the current epoch asks. */
  forgetLostEpoch(): boolean {
    if (!this.record.forgetLostEpoch(this.view.epoch, this.view.epochStartedAt)) return false;
    this.hooks.lostEpoch();
    this.hooks.persist();
    return true;
  }

  /** Votes decided: on record as pending (and saved) before they are sent. */
  decide(votes: number[]): void {
    const epoch = this.view.epoch;
    for (const arm of votes) {
      if (this.view.epochStartedAt !== null && !this.record.epochStarts.has(epoch)) {
        this.record.epochStarts.set(epoch, this.view.epochStartedAt);
      }
      this.record.pending.push([arm, epoch]);
    }
    if (votes.length > 0) this.hooks.persist();
  }

  /** Send the pending votes of the current epoch, in order; another epoch's are dropped. */
  *deliverDecided(): Exchange<number> {
    let sent = 0;
    if (this.record.pending.some(([, e]) => e !== this.view.epoch)) {
      this.record.pending = this.record.pending.filter(([, e]) => e === this.view.epoch);
      this.hooks.persist();
    }
    for (let next = this.record.pending[0]; next !== undefined; next = this.record.pending[0]) {
      yield* this.deliver(next[0], next[1]);
      this.votesSent += 1;
      sent += 1;
    }
    return sent;
  }

  /** Send one vote and record its acknowledgement. */
  *deliver(arm: number, epoch: number): Exchange<void> {
    const started = this.record.epochStarts.get(epoch);
    const body: Record<string, number> = { arm, epoch };
    if (started !== undefined) body.epoch_started_at = started;
    const reply = yield this.message("vote", body);
    const outcome = String(reply.outcome);
    const record = this.record;
    record.pending = record.pending.filter(([a, e]) => a !== arm || e !== epoch);
    // kept: this epoch's votes and the previous one's (a failover may bring it back), no more
    record.acknowledged = record.acknowledged.filter((v) => (v.arm !== arm || v.epoch !== epoch) && v.epoch >= epoch - 1);
    const votes = reply.votes === undefined || reply.votes === null ? null : Number(reply.votes);
    record.acknowledged.push({ arm, epoch, outcome, seq: nextSeq(), votes });
    this.hooks.persist();
    if (reply.votes !== undefined) this.view.observeCount(arm, Number(reply.epoch), Number(reply.votes));
    if (this.view.stale(Number(reply.version), Number(reply.epoch))) yield* this.refresh();
  }

  /** CDE: send the report on record (a second copy is a duplicate) and record the answer. */
  *deliverReport(): Exchange<void> {
    const reply = yield this.message("report", { arm: this.record.report });
    this.record.reportOutcome = String(reply.outcome);
    this.reportsSent += 1;
    this.hooks.persist();
  }

  /** DSER4: ask for a new epoch; true if it began (the caller reads the state and syncs).
   * Waiting for more agents, or refused (429, not waited for): false, a local reset only. */
  *reset(): Exchange<boolean> {
    let reply;
    try {
      reply = yield this.message("reset", { epoch: this.view.epoch });
    } catch (err) {
      if (!(err instanceof CoordinatorError) || err.status !== 429) throw err;
      reply = null;
    }
    if (reply === null || reply === undefined) {
      this.resetsLimited += 1; // the client's answer to a 429 (or the 429 itself, above)
      return false;
    }
    return !reply.pending;
  }

  /** CE only: tell the coordinator this agent settled (`done`), once per settle, again when it
   * forgot (an arm it is not counted against left, or a reset). */
  *settle(done: boolean, localEpoch: number): Exchange<void> {
    const view = this.view;
    if (view.params.algorithm !== "ce" || this.settleRefused) return;
    if (!done || localEpoch !== view.epoch) {
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
      reply = yield this.message("settled", { epoch: view.epoch });
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
    if (view.stale(Number(reply.version), Number(reply.epoch))) yield* this.refresh();
  }

  /** After a restart: the votes decided and not seen acknowledged, and CDE's unanswered report,
   * sent again (a second copy is a duplicate); pending votes of another epoch dropped. */
  *resendPending(): Exchange<number> {
    this.forgetLostEpoch();
    let sent = 0;
    if (this.record.report !== null && this.record.reportOutcome === null) yield* this.deliverReport();
    for (const [arm, epoch] of this.record.pending.slice()) {
      if (epoch === this.view.epoch) {
        yield* this.deliver(arm, epoch);
        sent += 1;
      } else {
        this.record.pending = this.record.pending.filter(([a, e]) => a !== arm || e !== epoch);
        this.hooks.persist();
      }
    }
    this.votesResent += sent;
    return sent;
  }

  /** Why to ask the coordinator for this agent's votes now (agent/protocol.py check_reason);
   * `now` null: the slow check is not considered. */
  checkReason(now: number | null): string | null {
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
    return now !== null && now >= this.nextCheck ? "period" : null;
  }

  /** Arms of acknowledged votes the coordinator lacks (agent/protocol.py missing_votes). */
  missingVotes(votedAgainst: Set<number>, beforeSeq: number): number[] {
    const view = this.view;
    return this.record.acknowledged
      .filter(
        (v) =>
          v.epoch === view.epoch &&
          v.seq < beforeSeq &&
          (IN_VOTER_SET.has(v.outcome) || view.remaining.has(v.arm)) &&
          !votedAgainst.has(v.arm),
      )
      .map((v) => v.arm);
  }

  /** If checkReason says so: GET /v1/agents/me, and the acknowledged votes it lacks sent again. */
  *reconcile(now: number): Exchange<number> {
    const reason = this.checkReason(now);
    if (reason === null) return 0;
    const view = this.view;
    const seq = nextSeq();
    this.checkedSeq = seq;
    this.nextCheck = now + this.reconcileMs * (0.5 + this.hooks.jitter());
    let me;
    try {
      me = yield this.message("me");
    } catch (err) {
      if (err instanceof CoordinatorError && err.status !== 404) return 0;
      throw err;
    }
    this.checks += 1;
    // another version, or an epoch of the same number begun at another time (a failover lost the
    // view's): the view is read again first, so a lost epoch's votes are forgotten, not re-sent
    const started = me.epoch_started_at ?? null;
    const sameStart = started === null || Number(started) === view.epochStartedAt;
    if (Number(me.epoch) !== view.epoch || Number(me.version) !== view.version || !sameStart) {
      yield* this.refresh();
      if (view.epoch !== Number(me.epoch)) return 0;
      if (started !== null && Number(started) !== view.epochStartedAt) return 0;
    }
    this.forgetLostEpoch();
    const votedAgainst = new Set<number>(me.voted_against.map(Number));
    for (const v of this.record.acknowledged) {
      if (v.epoch === view.epoch && votedAgainst.has(v.arm) && v.arm < view.votes.length && v.votes !== null) {
        v.votes = Math.min(v.votes, view.votes[v.arm]);
      }
    }
    const missing = this.missingVotes(votedAgainst, seq);
    if (missing.length > 0 && (reason === "count" || reason === "period")) {
      view.noteLoss();
      this.checkedSeq = view.lostAt;
    }
    for (const arm of missing) yield* this.deliver(arm, view.epoch);
    this.votesResent += missing.length;
    return missing.length;
  }
}
