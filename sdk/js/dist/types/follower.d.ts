/**
 * Following an experiment's global set (agent/events.py, in fetch): Server-Sent Events, with
 * ETag polling as the fallback. One follower per coordinator and experiment in a page or a Node
 * process, whatever the number of agents in it (`shareFollower`): a browser opens at most six
 * connections to one origin, and a coordinator bounds the streams of one address, so 32 agents
 * in a page must not open 32 streams.
 *
 * The stream (`GET /v1/experiments/{id}/events`) sends the current state, then one `state` event
 * per change; `: heartbeat` comments while nothing changes; `event: deleted` when the experiment
 * is deleted. A stream that ends is opened again after the server's `retry:` hint with
 * `Last-Event-ID`; one silent for longer than `streamTimeoutMs` (three heartbeats) is taken as
 * cut. Failures in a row wait longer each time (doubled up to `retryMaxMs`, randomized) and move
 * to the next coordinator URL. While no stream is open (a failure, a 429 or 503 at the
 * coordinator's stream bounds, a coordinator without the route) the follower polls
 * `GET /v1/experiments/{id}` with `If-None-Match` every `pollMs`: an unchanged state costs a 304.
 *
 * It reads fetch's stream rather than using EventSource: the same code runs in Node, it can send
 * `Last-Event-ID` itself, and it sees the status of a refusal (429, 503) that EventSource hides.
 */
import { CoordinatorClient } from "./http.js";
/** Orders the follower's changes with an agent's own reads (agent/library.py's next_seq). */
export declare function nextSeq(): number;
/** What the follower learnt: a state (an event's data or a polled document), or the deletion. */
export interface Change {
    state: Record<string, any> | null;
    seq: number;
    via: "stream" | "poll";
}
export interface FollowOptions {
    pollMs?: number;
    streamTimeoutMs?: number;
    retryMaxMs?: number;
    timeoutMs?: number;
}
/** The event-stream format, one line at a time (WHATWG HTML, "Server-sent events"). */
export declare class SSEParser {
    lastId: string;
    retry: number | null;
    private type;
    private data;
    constructor(lastId?: string);
    feed(line: string): {
        type: string;
        data: string;
        id: string;
    } | null;
}
export declare class GlobalSetFollower {
    readonly experiment: string;
    readonly client: CoordinatorClient;
    readonly pollMs: number;
    readonly streamTimeoutMs: number;
    readonly retryMaxMs: number;
    private index;
    private readonly stop;
    private readonly listeners;
    private running;
    retryMs: number;
    lastEventId: string;
    etag: string | null;
    mode: "starting" | "stream" | "poll" | "stopped";
    streams: number;
    events: number;
    polls: number;
    notModified: number;
    refused: number;
    failures: number;
    /** The newest change, for a subscriber that comes later. */
    latest: Change | null;
    constructor(coordinator: string, experiment: string, options?: FollowOptions);
    subscribe(listener: (change: Change) => void): () => void;
    get subscribers(): number;
    get stopped(): boolean;
    close(): void;
    private keep;
    private run;
    private backoff;
    private nextUrl;
    /** One stream, read until it ends: the number of state events it brought. */
    private stream;
    private refusal;
    /** `event: deleted`: gone if a read says 404; else another experiment under the same id. */
    private confirmDeletion;
    /** Poll now, then every pollMs (randomized), until `ms` have passed. */
    private fallback;
    private poll;
}
/** The page's (or process's) one follower of `experiment` at `coordinator`, shared by its agents:
 * `release` it when done; the last release closes it. */
export declare function shareFollower(coordinator: string, experiment: string, options?: FollowOptions): {
    follower: GlobalSetFollower;
    release: () => void;
};
