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
  private?: { sent: number; pending: [number, number, number] | null };
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

export class AgentLocked extends Error {
  constructor(where: string) {
    super(`${where} is held by another tab or process running the same agent: close it first`);
    this.name = "AgentLocked";
  }
}

interface WebStorage {
  getItem(key: string): string | null;
  setItem(key: string, value: string): void;
}

/** The part of Node's fs/promises this file uses (no @types/node: no dependency). */
interface NodeFs {
  readFile(path: string, encoding: "utf8"): Promise<string>;
  writeFile(path: string, data: string, options: { flag: string; mode: number }): Promise<void>;
  rm(path: string, options: { force: boolean }): Promise<void>;
  rename(from: string, to: string): Promise<void>;
  open(
    path: string,
    flags: string,
    mode: number,
  ): Promise<{ writeFile(data: string): Promise<void>; sync(): Promise<void>; close(): Promise<void> }>;
}

interface LockManager {
  request(name: string, options: { signal?: AbortSignal; ifAvailable?: boolean }, callback: (lock: unknown) => Promise<void>): Promise<void>;
}

export const LOCK_WAIT_MS = 10_000; // a reloading page's old document lets its lock go within this

/** localStorage under `key`; the key held with navigator.locks where the browser has them. */
export class BrowserStore implements StateStore {
  private unlock: (() => void) | null = null;

  constructor(
    readonly key: string,
    private readonly storage: WebStorage,
    /** How long to wait for another tab to let the key go before AgentLocked. */
    readonly lockWaitMs = LOCK_WAIT_MS,
  ) {}

  get where(): string {
    return `localStorage[${JSON.stringify(this.key)}]`;
  }

  async lock(): Promise<void> {
    const locks = (globalThis as { navigator?: { locks?: LockManager } }).navigator?.locks;
    if (locks === undefined) return;
    const signal = AbortSignal.timeout(this.lockWaitMs);
    await new Promise<void>((granted, refused) => {
      locks
        .request(`dexp:${this.key}`, { signal }, () => {
          granted();
          return new Promise<void>((resolve) => {
            this.unlock = resolve;
          });
        })
        .catch(() => refused(new AgentLocked(this.where)));
    });
  }

  async load(): Promise<SavedAgent | null> {
    const text = this.storage.getItem(this.key);
    return text === null ? null : (JSON.parse(text) as SavedAgent);
  }

  save(state: SavedAgent): void {
    this.storage.setItem(this.key, JSON.stringify(state));
  }

  async flush(): Promise<void> {}

  async release(): Promise<void> {
    this.unlock?.();
    this.unlock = null;
  }
}

/** A JSON file (mode 0600), rewritten whole at each save (a temporary file renamed over it), and
 * `<file>.lock` held while the agent runs. Node only. */
export class FileStore implements StateStore {
  private writing: Promise<void> = Promise.resolve();
  private next: SavedAgent | null = null;
  private locked = false;

  constructor(readonly path: string) {}

  get where(): string {
    return this.path;
  }

  private static fs(): Promise<NodeFs> {
    const name = "node:fs/promises"; // Node only: a page never reaches this import
    return import(name) as Promise<NodeFs>;
  }

  async lock(): Promise<void> {
    const fs = await FileStore.fs();
    const lockPath = `${this.path}.lock`;
    const pid = (globalThis as { process?: { pid: number; kill(pid: number, signal: 0): void } }).process;
    for (let attempt = 0; attempt < 2; attempt++) {
      try {
        await fs.writeFile(lockPath, String(pid?.pid ?? 0), { flag: "wx", mode: 0o600 });
        this.locked = true;
        return;
      } catch (err) {
        if ((err as { code?: string }).code !== "EEXIST") throw err;
        const holder = Number(await fs.readFile(lockPath, "utf8").catch(() => "0"));
        if (holder > 0 && alive(holder, pid)) throw new AgentLocked(this.path);
        await fs.rm(lockPath, { force: true }); // its process is gone: a stale lock
      }
    }
    throw new AgentLocked(this.path);
  }

  async load(): Promise<SavedAgent | null> {
    const fs = await FileStore.fs();
    try {
      return JSON.parse(await fs.readFile(this.path, "utf8")) as SavedAgent;
    } catch (err) {
      if ((err as { code?: string }).code === "ENOENT") return null;
      throw err;
    }
  }

  save(state: SavedAgent): void {
    const first = this.next === null;
    this.next = state;
    if (!first) return; // a write is queued: it takes the newest state
    this.writing = this.writing.then(async () => {
      const text = JSON.stringify(this.next);
      this.next = null;
      const fs = await FileStore.fs();
      const temporary = `${this.path}.tmp`;
      const file = await fs.open(temporary, "w", 0o600);
      try {
        await file.writeFile(text);
        await file.sync();
      } finally {
        await file.close();
      }
      await fs.rename(temporary, this.path);
    });
    this.writing.catch((err) => console.error(`dexp: could not write ${this.path}`, err));
  }

  async flush(): Promise<void> {
    await this.writing;
  }

  async release(): Promise<void> {
    if (!this.locked) return;
    this.locked = false;
    await this.flush().catch(() => undefined);
    await (await FileStore.fs()).rm(`${this.path}.lock`, { force: true });
  }
}

/** Nothing kept: the agent lives as long as the object (tests, or a device without storage). */
export class MemoryStore implements StateStore {
  private state: SavedAgent | null = null;
  readonly where = "memory";
  async lock(): Promise<void> {}
  async load(): Promise<SavedAgent | null> {
    return this.state;
  }
  save(state: SavedAgent): void {
    this.state = JSON.parse(JSON.stringify(state));
  }
  async flush(): Promise<void> {}
  async release(): Promise<void> {}
}

function alive(pid: number, process: { kill(pid: number, signal: 0): void } | undefined): boolean {
  try {
    process?.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as { code?: string }).code === "EPERM";
  }
}

/** The store a page or a process gets for `storageKey`: localStorage where there is one, else a
 * file (`stateFile`, or `<storageKey>.json` in the working directory). */
export function defaultStore(storageKey: string, stateFile?: string, lockWaitMs = LOCK_WAIT_MS): StateStore {
  const storage = (globalThis as { localStorage?: WebStorage }).localStorage;
  if (stateFile === undefined && storage !== undefined) return new BrowserStore(storageKey, storage, lockWaitMs);
  const isNode = typeof (globalThis as { process?: { versions?: { node?: string } } }).process?.versions?.node === "string";
  if (!isNode) throw new Error("no localStorage here, and not Node: pass `storage`");
  return new FileStore(stateFile ?? `${storageKey}.json`);
}
