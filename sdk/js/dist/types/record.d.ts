/**
 * One agent's durable part (agent/state.py's AgentRecord): its credentials, the votes it decided
 * (pending until answered, then acknowledged with their outcome), the start of each of their
 * epochs, and CDE's report; with the local statistics, what storage.ts keeps between runs.
 */
import type { AgentState } from "./agent.js";
import type { SavedAgent } from "./storage.js";
/** Outcomes after which the agent is in the arm's voter set (agent/state.py IN_VOTER_SET). */
export declare const IN_VOTER_SET: Set<string>;
export interface Acknowledged {
    arm: number;
    epoch: number;
    outcome: string;
    seq: number;
    votes: number | null;
}
/** The durable part: credentials and votes (agent/state.py AgentRecord). */
export declare class AgentRecord {
    readonly agentId: string;
    readonly token: string;
    acknowledged: Acknowledged[];
    pending: [number, number][];
    epochStarts: Map<number, number>;
    report: number | null;
    reportOutcome: string | null;
    /** LDP (private.ts): reports sent and answered, and the one decided and not seen answered,
     * [arm, bit, seq]: saved before it is sent, so a reload sends that same report again. */
    privateSent: number;
    privatePending: [number, number, number] | null;
    constructor(agentId: string, token: string);
    static fromSaved(saved: SavedAgent): AgentRecord;
    toSaved(experiment: string, createdAt: number, local: AgentState | undefined): SavedAgent;
    /** The votes of an epoch a failover lost (same number, another start) are forgotten. */
    forgetLostEpoch(epoch: number, started: number | null): boolean;
    decided(epoch: number): number[];
}
