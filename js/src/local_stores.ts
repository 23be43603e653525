// Stores for one machine, as the documents name them: `fileStore(dir)` (a directory of files, under Node) and
// `LocalStorageCheckpointStore(storage)` (a Web Storage such as `localStorage`). Both are the journal store
// (the one KV mode uses) over a synchronous key-value backend: write-once journal entries, leases confirmed by a
// read-back after a settle window. The backend is strongly consistent and fast, so the window is short (200 ms).
import { SteadfastError } from "./errors.js";
import { knownKeys } from "./options.js";
import { kvStore, HANDLE, type Checkpoints, type KVNamespaceLike, type Store, type StoreHandle } from "./stores.js";
import type { Clock } from "./clock.js";
import type { Checkpoint, HistoryEntry, PendingRun } from "./types.js";

/** A synchronous key-value backend: the keys it holds, and each key's value (a string). */
export interface SyncBackend {
  get(key: string): string | null;
  set(key: string, value: string): void;
  delete(key: string): void;
  /** Every key it holds, in any order. */
  keys(): string[];
  /**
   * Optional, instead of `keys`: up to `limit` keys that start with `prefix` and sort after `after`, in the
   * backend's own order (the cursor is the last key of a page), and whether more follow.
   */
  range?(prefix: string, after: string, limit: number): { keys: string[]; more: boolean };
}

/**
 * The settle window of a local journal store: its backend answers in well under a millisecond, not in KV's
 * seconds, but a busy machine can stall a process for tens of milliseconds between a lease's read and its
 * write (which must fit in the window, else the acquisition is refused as busy, retryably).
 */
const LOCAL_SETTLE_MS = 200;

/** A page of `list` (KV's default and maximum page is 1,000 keys). */
const PAGE = 1000;

/** A Workers-KV-shaped namespace over a synchronous backend (values stored as `{v, m}`: the value and its metadata). */
export function kvOverBackend(backend: SyncBackend): KVNamespaceLike {
  const read = (key: string): { v: string; m?: unknown } | null => {
    const raw = backend.get(key);
    if (raw === null) return null;
    try {
      const parsed = JSON.parse(raw) as { v?: unknown; m?: unknown };
      if (typeof parsed?.v === "string") return parsed as { v: string; m?: unknown };
    } catch {
      // Falls through: a value this adapter did not write.
    }
    throw new SteadfastError("STEADFAST_CHECKPOINT_CORRUPT", `the stored value of key ${JSON.stringify(key)} is not a store record`);
  };
  const get = (async (key: string | string[]) => {
    if (Array.isArray(key)) return new Map(key.map((k) => [k, read(k)?.v ?? null]));
    return read(key)?.v ?? null;
  }) as KVNamespaceLike["get"];
  return {
    get,
    async put(key, value, options) {
      backend.set(key, JSON.stringify(options?.metadata === undefined ? { v: value } : { v: value, m: options.metadata }));
    },
    async delete(key) {
      backend.delete(key);
    },
    async list(options) {
      const prefix = options?.prefix ?? "";
      const limit = Math.min(options?.limit ?? PAGE, PAGE);
      const after = options?.cursor ?? "";
      let page: string[];
      let complete: boolean;
      if (backend.range) {
        const r = backend.range(prefix, after, limit);
        page = r.keys;
        complete = !r.more;
      } else {
        const names = backend
          .keys()
          .filter((k) => k.startsWith(prefix) && k > after)
          .sort();
        page = names.slice(0, limit);
        complete = page.length === names.length;
      }
      return {
        keys: page.map((name) => {
          const m = read(name)?.m;
          return m === undefined ? { name } : { name, metadata: m };
        }),
        list_complete: complete,
        ...(complete ? {} : { cursor: page[page.length - 1] }),
      };
    },
  };
}

/** Options of the local stores. */
export interface LocalStoreOptions {
  /** Past states kept per run for history and fork (default 50). */
  historyLimit?: number;
  /** Keys start with this (default none). */
  prefix?: string;
  /**
   * The lease settle window in ms (default 200): a lease is confirmed by a read-back this long after it was
   * written, which is what keeps two processes from running one run at once. In one process only, any value
   * is safe if the process is not stalled longer than it between a read and a write.
   */
  settleMs?: number;
  /** The clock the store reads instead of the platform's; see `testClock`. */
  clock?: Clock;
}

/** A journal store over a synchronous backend (the local stores; `kind` names which). */
export function localStore(
  backend: SyncBackend,
  options: LocalStoreOptions,
  what: "fileStore" | "SqliteStore" | "LocalStorageCheckpointStore",
  kind: Store["kind"],
): Store {
  knownKeys(options, `${what} options`);
  const given = (options ?? {}) as LocalStoreOptions;
  const { historyLimit, prefix, settleMs, clock } = given;
  const store = kvStore(kvOverBackend(backend), {
    ...(historyLimit === undefined ? {} : { historyLimit }),
    ...(prefix === undefined ? {} : { prefix }),
    settleMs: settleMs ?? LOCAL_SETTLE_MS,
    ...(clock === undefined ? {} : { clock }),
  });
  return { ...store, kind };
}

/** The part of `node:fs` the file store uses (handed over by the Node entry point). */
export interface FileSystem {
  mkdirSync(path: string, options: { recursive: true }): unknown;
  readFileSync(path: string, encoding: "utf8"): string;
  writeFileSync(path: string, data: string): void;
  renameSync(from: string, to: string): void;
  rmSync(path: string, options: { force: true }): void;
  readdirSync(path: string): string[];
}

let fileSystem: FileSystem | undefined;

/** Called by the Node entry point: the file system `fileStore` writes to. */
export function useFileSystem(fs: FileSystem): void {
  fileSystem = fs;
}

/** A key as a file name: percent-encoded (keys hold `/`), with `~` for `.` at the start (no hidden files). */
const fileName = (key: string) => encodeURIComponent(key).replace(/^\./, "%2E").replace(/\*/g, "%2A");
const keyOf = (name: string) => decodeURIComponent(name);

/**
 * A durable store in a directory (Node): one file per journal key, each written whole to a temporary file and
 * renamed into place, so a crash never leaves half a value. Runs, leases, approvals and history survive the
 * process; another process on the same directory shares them (leases confirmed by read-back after 200 ms, so
 * two processes resuming one run at once are told `STEADFAST_SESSION_BUSY`, as on KV at one location).
 * Outside Node (no `node:fs`) it throws `STEADFAST_CONFIG_INVALID`.
 */
export function fileStore(dir: string, options: LocalStoreOptions = {}): Store {
  const fs = fileSystem;
  if (fs === undefined) {
    throw new SteadfastError("STEADFAST_CONFIG_INVALID", "fileStore needs a file system: it works under Node (use kvStore on Workers)");
  }
  if (typeof dir !== "string" || dir === "") {
    throw new SteadfastError("STEADFAST_CONFIG_INVALID", "fileStore(dir) needs a directory path (a non-empty string)");
  }
  fs.mkdirSync(dir, { recursive: true });
  const path = (key: string) => `${dir}/${fileName(key)}`;
  let tmp = 0;
  const backend: SyncBackend = {
    get(key) {
      try {
        return fs.readFileSync(path(key), "utf8");
      } catch (e) {
        if ((e as { code?: string })?.code === "ENOENT") return null;
        throw e;
      }
    },
    set(key, value) {
      const t = `${dir}/.tmp-${process_id()}-${++tmp}`;
      fs.writeFileSync(t, value);
      fs.renameSync(t, path(key));
    },
    delete(key) {
      fs.rmSync(path(key), { force: true });
    },
    keys() {
      return fs
        .readdirSync(dir)
        .filter((n) => !n.startsWith(".tmp-"))
        .map(keyOf);
    },
  };
  return localStore(backend, options, "fileStore", "file");
}

/** A distinguishing part of temporary file names (the process id where there is one). */
function process_id(): string {
  const p = (globalThis as { process?: { pid?: number } }).process;
  return String(p?.pid ?? 0);
}

/** The part of a Web Storage (`localStorage`, `sessionStorage`) the store uses. */
export interface StorageLike {
  getItem(key: string): string | null;
  setItem(key: string, value: string): void;
  removeItem(key: string): void;
  key(index: number): string | null;
  readonly length: number;
}

/**
 * A store in a Web Storage (`new LocalStorageCheckpointStore(localStorage)`), as the documents' executor takes
 * it (`checkpointStore`): the store's `checkpoints` (load, history, pending, delete), usable as `createAgent`'s
 * `store` too. Its keys start with `prefix` (default `"steadfast:"`).
 */
export class LocalStorageCheckpointStore implements Checkpoints {
  readonly [HANDLE]: StoreHandle;
  readonly store: Store;

  constructor(storage: StorageLike, options: LocalStoreOptions = {}) {
    if (storage === null || typeof storage !== "object" || typeof storage.getItem !== "function") {
      throw new SteadfastError("STEADFAST_CONFIG_INVALID", "LocalStorageCheckpointStore(storage) needs a Web Storage (getItem, setItem, removeItem, key, length)");
    }
    const backend: SyncBackend = {
      get: (key) => storage.getItem(key),
      set: (key, value) => storage.setItem(key, value),
      delete: (key) => storage.removeItem(key),
      keys: () => {
        const out: string[] = [];
        for (let i = 0; i < storage.length; i++) {
          const k = storage.key(i);
          if (k !== null) out.push(k);
        }
        return out;
      },
    };
    const opts = (options ?? {}) as LocalStoreOptions;
    this.store = localStore(backend, { ...opts, prefix: opts.prefix ?? "steadfast:" }, "LocalStorageCheckpointStore", "local-storage");
    this[HANDLE] = this.store[HANDLE];
  }

  load(sessionId: string): Promise<Checkpoint | null> {
    return this.store.checkpoints.load(sessionId);
  }

  history(sessionId: string, options?: { limit?: number }): Promise<HistoryEntry[]> {
    return this.store.checkpoints.history(sessionId, options);
  }

  pending(): Promise<PendingRun[]> {
    return this.store.checkpoints.pending();
  }

  delete(sessionId: string, options?: { keepHistory?: boolean }): Promise<void> {
    return this.store.checkpoints.delete(sessionId, options);
  }
}
