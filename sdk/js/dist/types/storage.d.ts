/**
 * Where a device keeps its agent between runs: `localStorage` in a browser, a JSON file in Node.
 * What is kept: the experiment and its creation time, the agent id and token (a bearer
 * credential: whoever copies it votes as this agent), its votes (acknowledged with their outcome,
 * pending: written before they are sent), CDE's report once drawn, LDP's reports (how many were
 * sent, and the pending one: arm, bit, number), and the local statistics
 * (counts and means of the arms it played; they stay on the device, as everything here). A reload
 * or a restart reads it back and is the same agent: no new enrollment, no vote decided twice.
 *
 * One agent, one holder: a second tab (Web Locks) or a second process (a lock file) on the same
 * key is refused while the first runs; it would be the same agent acting twice.
 */
/** What is saved: agent/state.py's state file, plus `local` (the local statistics). */
export interface SavedAgent {
    format: 1;
    experiment: string;
    created_at: number;
    agent_id: string;
    token: string;
    acknowledged: [number, number, string][];
    pending: [number, number][];
    epoch_starts: Record<string, number>;
    report?: [number, string | null];
    /** LDP: reports sent, and the pending one [arm, bit, seq] (agent/state.py's `private`). */
    private?: {
        sent: number;
        pending: [number, number, number] | null;
    };
    local?: unknown;
}
export interface StateStore {
    /** Where the state lives, for messages. */
    readonly where: string;
    /** Hold this key for this run (refused if another tab or process holds it). */
    lock(): Promise<void>;
    load(): Promise<SavedAgent | null>;
    /** Write the whole state (in order; a browser's write is done on return). */
    save(state: SavedAgent): void;
    /** Every save written. */
    flush(): Promise<void>;
    /** Let another run hold the key (after the last save is written). */
    release(): Promise<void>;
}
export declare class AgentLocked extends Error {
    constructor(where: string);
}
interface WebStorage {
    getItem(key: string): string | null;
    setItem(key: string, value: string): void;
}
export declare const LOCK_WAIT_MS = 10000;
/** localStorage under `key`; the key held with navigator.locks where the browser has them. */
export declare class BrowserStore implements StateStore {
    readonly key: string;
    private readonly storage;
    /** How long to wait for another tab to let the key go before AgentLocked. */
    readonly lockWaitMs: number;
    private unlock;
    constructor(key: string, storage: WebStorage, 
    /** How long to wait for another tab to let the key go before AgentLocked. */
    lockWaitMs?: number);
    get where(): string;
    lock(): Promise<void>;
    load(): Promise<SavedAgent | null>;
    save(state: SavedAgent): void;
    flush(): Promise<void>;
    release(): Promise<void>;
}
/** A JSON file (mode 0600), rewritten whole at each save (a temporary file renamed over it), and
 * `<file>.lock` held while the agent runs. Node only. */
export declare class FileStore implements StateStore {
    readonly path: string;
    private writing;
    private next;
    private locked;
    constructor(path: string);
    get where(): string;
    private static fs;
    lock(): Promise<void>;
    load(): Promise<SavedAgent | null>;
    save(state: SavedAgent): void;
    flush(): Promise<void>;
    release(): Promise<void>;
}
/** Nothing kept: the agent lives as long as the object (tests, or a device without storage). */
export declare class MemoryStore implements StateStore {
    private state;
    readonly where = "memory";
    lock(): Promise<void>;
    load(): Promise<SavedAgent | null>;
    save(state: SavedAgent): void;
    flush(): Promise<void>;
    release(): Promise<void>;
}
/** The store a page or a process gets for `storageKey`: localStorage where there is one, else a
 * file (`stateFile`, or `<storageKey>.json` in the working directory). */
export declare function defaultStore(storageKey: string, stateFile?: string, lockWaitMs?: number): StateStore;
export {};
