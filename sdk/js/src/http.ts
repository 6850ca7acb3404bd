/**
 * The coordinator's HTTP API for one device (clients/coordinator.py's CoordinatorClient, in
 * fetch): JSON over HTTP, the token in `Authorization`, never a cookie.
 *
 * Every request the SDK sends is safe to send again, so an outage is waited out: a network
 * error, a timeout or a 5xx is retried with a capped, randomized back-off (a million devices cut
 * at once must not come back at once), moving to the next coordinator URL on a network error,
 * 502, 503 or 504; a 429 waits its `Retry-After`. A 4xx other than 429 is the request's own fault
 * and is thrown as a CoordinatorError (its `status` and the coordinator's `detail`).
 */

export class CoordinatorError extends Error {
  constructor(
    readonly status: number,
    readonly detail: string,
  ) {
    super(`${status}: ${detail}`);
    this.name = "CoordinatorError";
  }
}

/** The client was closed while a request waited: nothing more will be sent. */
export class ClientClosed extends Error {
  constructor() {
    super("the dexp client is closed");
    this.name = "ClientClosed";
  }
}

const FAILOVER = new Set([502, 503, 504]);

export interface ClientOptions {
  /** Per request, ms (default 10 000). */
  timeoutMs?: number;
  /** The cap of the retry back-off, ms (default 30 000). */
  retryMaxMs?: number;
}

export interface Reply {
  status: number;
  /** The JSON body (null for a 304 or an empty body). */
  body: any;
  etag: string | null;
}

/** "https://a, https://b" -> ["https://a", "https://b"], trailing slashes dropped. */
export function coordinatorUrls(value: string): string[] {
  const urls = value
    .split(",")
    .map((u) => u.trim().replace(/\/+$/, ""))
    .filter((u) => u.length > 0);
  if (urls.length === 0) throw new TypeError("coordinator: no URL given");
  for (const url of urls) {
    if (!/^https?:\/\/[^/]+/.test(url)) throw new TypeError(`coordinator: ${url} is not an http(s) URL`);
  }
  return urls;
}

/** ms to wait, in [0.5, 1.5) of `ms`. */
export function jittered(ms: number): number {
  return ms * (0.5 + Math.random());
}

export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done(): void {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done);
  });
}

export class CoordinatorClient {
  readonly urls: string[];
  /** The URL in use: a random one at first, so that devices spread over the coordinators. */
  current: number;
  readonly timeoutMs: number;
  readonly retryMaxMs: number;
  private readonly stop = new AbortController();
  /** Requests sent again (failures and 429 waits), for the curious. */
  retries = 0;
  /** The last failure a retry waited out (a network error, a 5xx). */
  lastProblem = "";

  constructor(coordinator: string, options: ClientOptions = {}) {
    this.urls = coordinatorUrls(coordinator);
    this.current = Math.floor(Math.random() * this.urls.length);
    this.timeoutMs = options.timeoutMs ?? 10_000;
    this.retryMaxMs = options.retryMaxMs ?? 30_000;
  }

  get url(): string {
    return this.urls[this.current];
  }

  get closed(): boolean {
    return this.stop.signal.aborted;
  }

  /** Aborts what is in flight and every wait; later requests throw ClientClosed. */
  close(): void {
    this.stop.abort();
  }

  /** One request, retried until the coordinator answers below 400 (a 304 too), or refuses. */
  async send(
    method: string,
    path: string,
    options: { token?: string; body?: unknown; headers?: Record<string, string>; waitRateLimit?: boolean } = {},
  ): Promise<Reply> {
    const headers: Record<string, string> = { Accept: "application/json", ...(options.headers ?? {}) };
    if (options.token) headers.Authorization = `Bearer ${options.token}`;
    if (options.body !== undefined) headers["Content-Type"] = "application/json";
    const body = options.body === undefined ? undefined : JSON.stringify(options.body);
    let delay = 50;
    let round = 0; // coordinators tried since the last wait
    for (;;) {
      if (this.closed) throw new ClientClosed();
      let problem: string;
      let failover = true;
      const timeout = new AbortController();
      const timer = setTimeout(() => timeout.abort(), this.timeoutMs);
      const abort = (): void => timeout.abort();
      this.stop.signal.addEventListener("abort", abort);
      try {
        // keepalive: a vote sent as the page closes (a pagehide handler) outlives the page
        const keepalive = method !== "GET";
        const response = await fetch(this.url + path, { method, headers, body, keepalive, signal: timeout.signal });
        const text = await response.text();
        if (response.status < 400) {
          return {
            status: response.status,
            body: text ? JSON.parse(text) : null,
            etag: response.headers.get("ETag"),
          };
        }
        const detail = detailOf(text);
        if (response.status < 500 && response.status !== 429) {
          throw new CoordinatorError(response.status, detail);
        }
        problem = `${response.status}: ${detail}`;
        if (response.status === 429) {
          const wait = retryAfterMs(response.headers.get("Retry-After"));
          if (options.waitRateLimit === false) throw new RateLimited(detail, wait);
          // not a failure: come back no sooner than the coordinator asks, on the same URL
          this.retries += 1;
          await sleep(Math.max(delay, wait), this.stop.signal);
          delay = Math.min(delay * 2, this.retryMaxMs);
          continue;
        }
        failover = FAILOVER.has(response.status);
      } catch (err) {
        if (err instanceof CoordinatorError) throw err;
        if (this.closed) throw new ClientClosed();
        problem = String(err);
      } finally {
        clearTimeout(timer);
        this.stop.signal.removeEventListener("abort", abort);
      }
      this.retries += 1;
      if (failover && this.urls.length > 1) {
        this.current = (this.current + 1) % this.urls.length;
        round += 1;
        if (round < this.urls.length) continue; // another coordinator, at once
      }
      round = 0;
      this.lastProblem = problem;
      await sleep(jittered(delay), this.stop.signal);
      delay = Math.min(delay * 2, this.retryMaxMs);
    }
  }

  async json(method: string, path: string, token?: string, body?: unknown): Promise<any> {
    return (await this.send(method, path, { token, body })).body;
  }

  enroll(ticket: string, experiment: string): Promise<any> {
    return this.json("POST", "/v1/agents", ticket, { experiment });
  }

  experiment(experiment: string): Promise<any> {
    return this.json("GET", `/v1/experiments/${experiment}`);
  }

  /** The experiment's document, or null if it did not change since `etag` (a 304). */
  async experimentIfChanged(experiment: string, etag: string | null): Promise<Reply> {
    const headers: Record<string, string> = etag ? { "If-None-Match": etag } : {};
    return this.send("GET", `/v1/experiments/${experiment}`, { headers });
  }

  me(token: string): Promise<any> {
    return this.json("GET", "/v1/agents/me", token);
  }

  vote(experiment: string, token: string, arm: number, epoch: number, startedAt: number | null): Promise<any> {
    const body: Record<string, number> = { arm, epoch };
    if (startedAt !== null) body.epoch_started_at = startedAt;
    return this.json("POST", `/v1/experiments/${experiment}/votes`, token, body);
  }

  report(experiment: string, token: string, arm: number): Promise<any> {
    return this.json("POST", `/v1/experiments/${experiment}/report`, token, { arm });
  }

  /** LDP: report number `seq` (1..B), the arm played and its privatized bit. A retry is a
   * duplicate (nothing changes). */
  privateReport(experiment: string, token: string, arm: number, bit: number, seq: number): Promise<any> {
    return this.json("POST", `/v1/experiments/${experiment}/reports`, token, { arm, bit, seq });
  }

  settled(experiment: string, token: string, epoch: number): Promise<any> {
    return this.json("POST", `/v1/experiments/${experiment}/settled`, token, { epoch });
  }

  /** DSER4's reset; null if the coordinator rate-limits resets (429): not waited for. */
  async reset(experiment: string, token: string, epoch: number): Promise<any | null> {
    try {
      const reply = await this.send("POST", `/v1/experiments/${experiment}/reset`, {
        token,
        body: { epoch },
        waitRateLimit: false,
      });
      return reply.body;
    } catch (err) {
      if (err instanceof RateLimited) return null;
      throw err;
    }
  }
}

/** A 429 on a request that must not wait for its Retry-After (a DSER4 reset). */
export class RateLimited extends CoordinatorError {
  constructor(
    detail: string,
    readonly retryAfterMs: number,
  ) {
    super(429, detail);
    this.name = "RateLimited";
  }
}

export function retryAfterMs(value: string | null): number {
  const seconds = Number(value);
  return value !== null && Number.isFinite(seconds) && seconds >= 0 ? seconds * 1000 : 0;
}

function detailOf(text: string): string {
  try {
    const body = JSON.parse(text);
    if (body && typeof body === "object" && "detail" in body) {
      return typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail);
    }
  } catch {
    // not JSON: the text itself
  }
  return text.slice(0, 200);
}
