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
import { ClientClosed, CoordinatorClient, CoordinatorError, jittered, retryAfterMs, sleep } from "./http.js";

const RETRY_MS = 2_000;
const STREAM_TIMEOUT_MS = 45_000;
const NO_STREAM_MS = 300_000;

let sequence = 0;
/** Orders the follower's changes with an agent's own reads (agent/library.py's next_seq). */
export function nextSeq(): number {
  sequence += 1;
  return sequence;
}

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
export class SSEParser {
  retry: number | null = null;
  private type = "";
  private data: string[] = [];

  constructor(public lastId = "") {}

  feed(line: string): { type: string; data: string; id: string } | null {
    if (line === "") {
      const data = this.data;
      const type = this.type || "message";
      this.data = [];
      this.type = "";
      return data.length ? { type, data: data.join("\n"), id: this.lastId } : null;
    }
    if (line.startsWith(":")) return null;
    const colon = line.indexOf(":");
    const name = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (name === "event") this.type = value;
    else if (name === "data") this.data.push(value);
    else if (name === "id" && !value.includes("\0")) this.lastId = value;
    else if (name === "retry" && /^[0-9]+$/.test(value)) this.retry = Number(value);
    return null;
  }
}

class Deleted extends Error {}
class NoStream extends Error {}
class Failed extends Error {}
class Silent extends Error {}
class Refused extends Error {
  constructor(
    readonly status: number,
    readonly retryAfterMs: number,
  ) {
    super(`${status}, Retry-After ${retryAfterMs} ms`);
  }
}

export class GlobalSetFollower {
  readonly client: CoordinatorClient;
  readonly pollMs: number;
  readonly streamTimeoutMs: number;
  readonly retryMaxMs: number;
  private index: number;
  private readonly stop = new AbortController();
  private readonly listeners = new Set<(change: Change) => void>();
  private running: Promise<void> | null = null;
  retryMs = RETRY_MS;
  lastEventId = "";
  etag: string | null = null;
  mode: "starting" | "stream" | "poll" | "stopped" = "starting";
  streams = 0;
  events = 0;
  polls = 0;
  notModified = 0;
  refused = 0;
  failures = 0;
  /** The newest change, for a subscriber that comes later. */
  latest: Change | null = null;

  constructor(
    coordinator: string,
    readonly experiment: string,
    options: FollowOptions = {},
  ) {
    this.pollMs = options.pollMs ?? 30_000;
    this.streamTimeoutMs = options.streamTimeoutMs ?? STREAM_TIMEOUT_MS;
    this.retryMaxMs = options.retryMaxMs ?? 60_000;
    this.client = new CoordinatorClient(coordinator, { timeoutMs: options.timeoutMs, retryMaxMs: this.retryMaxMs });
    this.index = this.client.current;
  }

  subscribe(listener: (change: Change) => void): () => void {
    this.listeners.add(listener);
    if (this.running === null) this.running = this.run();
    return () => {
      this.listeners.delete(listener);
    };
  }

  get subscribers(): number {
    return this.listeners.size;
  }

  get stopped(): boolean {
    return this.stop.signal.aborted;
  }

  close(): void {
    this.stop.abort();
    this.client.close();
    this.mode = "stopped";
  }

  private keep(change: Change): void {
    this.latest = change;
    for (const listener of Array.from(this.listeners)) {
      try {
        listener(change);
      } catch (err) {
        console.error("dexp: a change listener failed", err);
      }
    }
  }

  private async run(): Promise<void> {
    let failures = 0;
    try {
      while (!this.stopped) {
        let received: number;
        try {
          received = await this.stream();
        } catch (err) {
          if (err instanceof Deleted || this.stopped || err instanceof ClientClosed) throw err;
          if (err instanceof Refused) {
            this.refused += 1;
            this.nextUrl();
            await this.fallback(err.retryAfterMs);
          } else if (err instanceof NoStream) {
            await this.fallback(NO_STREAM_MS);
          } else {
            failures += 1;
            this.failures += 1;
            if (!(err instanceof Silent)) this.nextUrl();
            await this.fallback(this.backoff(failures));
          }
          continue;
        }
        // the server ended the stream (a restart, a proxy's limit): back after its retry hint
        failures = received ? 0 : failures + 1;
        await sleep(this.backoff(Math.max(failures, 1)), this.stop.signal);
      }
    } catch (err) {
      if (err instanceof Deleted) this.keep({ state: null, seq: nextSeq(), via: "stream" });
      else if (!this.stopped && !(err instanceof ClientClosed)) console.error("dexp: following stopped", err);
    } finally {
      this.mode = "stopped";
    }
  }

  private backoff(failures: number): number {
    const base = this.retryMs * 2 ** Math.min(failures - 1, 16);
    return jittered(Math.min(base, this.retryMaxMs));
  }

  private nextUrl(): void {
    this.index = (this.index + 1) % this.client.urls.length;
  }

  /** One stream, read until it ends: the number of state events it brought. */
  private async stream(): Promise<number> {
    const headers: Record<string, string> = { Accept: "text/event-stream" };
    if (this.lastEventId) headers["Last-Event-ID"] = this.lastEventId;
    const url = `${this.client.urls[this.index]}/v1/experiments/${this.experiment}/events`;
    const abort = new AbortController();
    const onStop = (): void => abort.abort();
    this.stop.signal.addEventListener("abort", onStop);
    let silent = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const arm = (): void => {
      clearTimeout(timer);
      timer = setTimeout(() => {
        silent = true;
        abort.abort();
      }, this.streamTimeoutMs);
    };
    let received = 0;
    try {
      arm();
      let response: Response;
      try {
        response = await fetch(url, { headers, signal: abort.signal, cache: "no-store" });
      } catch (err) {
        throw silent ? new Silent("no answer") : new Failed(String(err));
      }
      const kind = response.headers.get("Content-Type") ?? "";
      if (response.status !== 200 || !kind.startsWith("text/event-stream") || response.body === null) {
        await this.refusal(response);
      }
      this.mode = "stream";
      this.streams += 1;
      const parser = new SSEParser(this.lastEventId);
      const reader = (response.body as ReadableStream<Uint8Array>).getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        let chunk: ReadableStreamReadResult<Uint8Array>;
        try {
          chunk = await reader.read();
        } catch (err) {
          if (this.stopped) return received;
          throw silent ? new Silent("silent stream") : new Failed(String(err));
        }
        if (chunk.done) return received;
        arm();
        let text = buffer + decoder.decode(chunk.value, { stream: true });
        // a "\r" at the end may be half of a "\r\n": kept for the next chunk
        const held = text.endsWith("\r") ? "\r" : "";
        if (held) text = text.slice(0, -1);
        const lines = text.split(/\r\n|\r|\n/);
        buffer = (lines.pop() ?? "") + held;
        for (const line of lines) {
          const event = parser.feed(line);
          if (parser.retry !== null) this.retryMs = parser.retry;
          if (event === null) continue;
          if (event.type === "deleted") {
            await reader.cancel().catch(() => undefined);
            await this.confirmDeletion();
            return received;
          }
          if (event.type !== "state") continue;
          const state = JSON.parse(event.data);
          if (state === null || typeof state !== "object" || !("remaining_arms" in state)) {
            throw new Failed(`not a state: ${event.data.slice(0, 200)}`);
          }
          this.lastEventId = event.id;
          this.events += 1;
          received += 1;
          this.keep({ state, seq: nextSeq(), via: "stream" });
        }
      }
    } finally {
      clearTimeout(timer);
      this.stop.signal.removeEventListener("abort", onStop);
      abort.abort();
    }
  }

  private async refusal(response: Response): Promise<never> {
    await response.text().catch(() => "");
    const status = response.status;
    if (status === 429 || status === 503) {
      throw new Refused(status, Math.max(1000, retryAfterMs(response.headers.get("Retry-After")) || RETRY_MS));
    }
    if (status === 404) {
      await this.poll(); // the experiment deleted (Deleted), or a coordinator without the route
      throw new NoStream("404");
    }
    if (status >= 500) throw new Failed(String(status));
    throw new NoStream(`${status} ${response.headers.get("Content-Type") ?? ""}`);
  }

  /** `event: deleted`: gone if a read says 404; else another experiment under the same id. */
  private async confirmDeletion(): Promise<void> {
    const seq = nextSeq();
    let document: any;
    try {
      document = await this.client.experiment(this.experiment);
    } catch (err) {
      if (err instanceof CoordinatorError && err.status === 404) throw new Deleted();
      throw new Failed(`after deleted: ${err}`);
    }
    this.etag = null;
    this.keep({ state: document, seq, via: "poll" });
  }

  /** Poll now, then every pollMs (randomized), until `ms` have passed. */
  private async fallback(ms: number): Promise<void> {
    this.mode = "poll";
    const end = Date.now() + ms;
    while (!this.stopped) {
      await this.poll();
      const left = end - Date.now();
      if (left <= 0) return;
      await sleep(Math.min(jittered(this.pollMs), left), this.stop.signal);
    }
  }

  private async poll(): Promise<void> {
    const seq = nextSeq();
    let reply;
    try {
      reply = await this.client.experimentIfChanged(this.experiment, this.etag);
    } catch (err) {
      if (err instanceof CoordinatorError && err.status === 404) throw new Deleted();
      if (err instanceof ClientClosed) throw err;
      return;
    }
    this.polls += 1;
    if (reply.status === 304 || reply.body === null) {
      this.notModified += 1;
      return;
    }
    this.etag = reply.etag;
    this.keep({ state: reply.body, seq, via: "poll" });
  }
}

const shared = new Map<string, { follower: GlobalSetFollower; users: number }>();

/** The page's (or process's) one follower of `experiment` at `coordinator`, shared by its agents:
 * `release` it when done; the last release closes it. */
export function shareFollower(
  coordinator: string,
  experiment: string,
  options: FollowOptions = {},
): { follower: GlobalSetFollower; release: () => void } {
  const key = `${coordinator}\n${experiment}`;
  let entry = shared.get(key);
  if (entry === undefined || entry.follower.stopped) {
    entry = { follower: new GlobalSetFollower(coordinator, experiment, options), users: 0 };
    shared.set(key, entry);
  }
  const held = entry;
  held.users += 1;
  let released = false;
  return {
    follower: held.follower,
    release: () => {
      if (released) return;
      released = true;
      held.users -= 1;
      if (held.users === 0) {
        held.follower.close();
        if (shared.get(key) === held) shared.delete(key);
      }
    },
  };
}
