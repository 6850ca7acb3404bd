/**
 * One agent's durable part (agent/state.py's AgentRecord): its credentials, the votes it decided
 * (pending until answered, then acknowledged with their outcome), the start of each of their
 * epochs, and CDE's report; with the local statistics, what storage.ts keeps between runs.
 */
import type { AgentState } from "./agent.js";
import type { SavedAgent } from "./storage.js";

/** Outcomes after which the agent is in the arm's voter set (agent/state.py IN_VOTER_SET). */
export const IN_VOTER_SET = new Set(["counted", "eliminated", "duplicate"]);

export interface Acknowledged {
  arm: number;
  epoch: number;
  outcome: string;
  seq: number; // in memory: when the acknowledgement arrived
  votes: number | null; // in memory: the arm's vote count the reply showed
}

/** The durable part: credentials and votes (agent/state.py AgentRecord). */
export class AgentRecord {
  acknowledged: Acknowledged[] = [];
  pending: [number, number][] = [];
  epochStarts = new Map<number, number>();
  report: number | null = null;
  reportOutcome: string | null = null;
  /** LDP (private.ts): reports sent and answered, and the one decided and not seen answered,
   * [arm, bit, seq]: saved before it is sent, so a reload sends that same report again. */
  privateSent = 0;
  privatePending: [number, number, number] | null = null;

  constructor(
    readonly agentId: string,
    readonly token: string,
  ) {}

  static fromSaved(saved: SavedAgent): AgentRecord {
    const record = new AgentRecord(String(saved.agent_id), String(saved.token));
    record.acknowledged = (saved.acknowledged ?? []).map(([arm, epoch, outcome]) => ({ arm, epoch, outcome, seq: 0, votes: null }));
    record.pending = (saved.pending ?? []).map(([arm, epoch]) => [arm, epoch]);
    for (const [epoch, start] of Object.entries(saved.epoch_starts ?? {})) record.epochStarts.set(Number(epoch), start);
    if (saved.report) [record.report, record.reportOutcome] = saved.report;
    if (saved.private) {
      record.privateSent = Number(saved.private.sent ?? 0);
      const pending = saved.private.pending;
      record.privatePending = pending ? [Number(pending[0]), Number(pending[1]), Number(pending[2])] : null;
    }
    return record;
  }

  toSaved(experiment: string, createdAt: number, local: AgentState | undefined): SavedAgent {
    const saved: SavedAgent = {
      format: 1,
      experiment,
      created_at: createdAt,
      agent_id: this.agentId,
      token: this.token,
      acknowledged: this.acknowledged.map((v) => [v.arm, v.epoch, v.outcome]),
      pending: this.pending.map(([arm, epoch]) => [arm, epoch]),
      epoch_starts: Object.fromEntries(Array.from(this.epochStarts, ([e, s]) => [String(e), s])),
    };
    if (this.report !== null) saved.report = [this.report, this.reportOutcome];
    if (this.privateSent > 0 || this.privatePending !== null) {
      saved.private = { sent: this.privateSent, pending: this.privatePending === null ? null : [...this.privatePending] };
    }
    if (local !== undefined) saved.local = local;
    return saved;
  }

  /** The votes of an epoch a failover lost (same number, another start) are forgotten. */
  forgetLostEpoch(epoch: number, started: number | null): boolean {
    if (started === null) return false;
    const known = this.epochStarts.get(epoch);
    for (const e of Array.from(this.epochStarts.keys())) if (e < epoch - 1 || e === epoch) this.epochStarts.delete(e);
    this.epochStarts.set(epoch, started);
    if (known === undefined || known === started) return false;
    this.acknowledged = this.acknowledged.filter((v) => v.epoch !== epoch);
    this.pending = this.pending.filter(([, e]) => e !== epoch);
    return true;
  }

  decided(epoch: number): number[] {
    return [...this.acknowledged.filter((v) => v.epoch === epoch).map((v) => v.arm), ...this.pending.filter(([, e]) => e === epoch).map(([a]) => a)];
  }
}
