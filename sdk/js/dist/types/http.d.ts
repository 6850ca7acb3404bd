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
export declare class CoordinatorError extends Error {
    readonly status: number;
    readonly detail: string;
    constructor(status: number, detail: string);
}
/** The client was closed while a request waited: nothing more will be sent. */
export declare class ClientClosed extends Error {
    constructor();
}
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
export declare function coordinatorUrls(value: string): string[];
/** ms to wait, in [0.5, 1.5) of `ms`. */
export declare function jittered(ms: number): number;
export declare function sleep(ms: number, signal?: AbortSignal): Promise<void>;
export declare class CoordinatorClient {
    readonly urls: string[];
    /** The URL in use: a random one at first, so that devices spread over the coordinators. */
    current: number;
    readonly timeoutMs: number;
    readonly retryMaxMs: number;
    private readonly stop;
    /** Requests sent again (failures and 429 waits), for the curious. */
    retries: number;
    /** The last failure a retry waited out (a network error, a 5xx). */
    lastProblem: string;
    constructor(coordinator: string, options?: ClientOptions);
    get url(): string;
    get closed(): boolean;
    /** Aborts what is in flight and every wait; later requests throw ClientClosed. */
    close(): void;
    /** One request, retried until the coordinator answers below 400 (a 304 too), or refuses. */
    send(method: string, path: string, options?: {
        token?: string;
        body?: unknown;
        headers?: Record<string, string>;
        waitRateLimit?: boolean;
    }): Promise<Reply>;
    json(method: string, path: string, token?: string, body?: unknown): Promise<any>;
    enroll(ticket: string, experiment: string): Promise<any>;
    experiment(experiment: string): Promise<any>;
    /** The experiment's document, or null if it did not change since `etag` (a 304). */
    experimentIfChanged(experiment: string, etag: string | null): Promise<Reply>;
    me(token: string): Promise<any>;
    vote(experiment: string, token: string, arm: number, epoch: number, startedAt: number | null): Promise<any>;
    report(experiment: string, token: string, arm: number): Promise<any>;
    /** LDP: report number `seq` (1..B), the arm played and its privatized bit. A retry is a
     * duplicate (nothing changes). */
    privateReport(experiment: string, token: string, arm: number, bit: number, seq: number): Promise<any>;
    settled(experiment: string, token: string, epoch: number): Promise<any>;
    /** DSER4's reset; null if the coordinator rate-limits resets (429): not waited for. */
    reset(experiment: string, token: string, epoch: number): Promise<any | null>;
}
/** A 429 on a request that must not wait for its Retry-After (a DSER4 reset). */
export declare class RateLimited extends CoordinatorError {
    readonly retryAfterMs: number;
    constructor(detail: string, retryAfterMs: number);
}
export declare function retryAfterMs(value: string | null): number;
