// Stores: in-memory, a journal over a Workers KV namespace, or strict mode's store inside a Durable Object (all
// held by the wasm core).
import { newDurableObjectStore, newKvStore, newMemoryStore, type JsStore } from "./low_level.js";
import { knownKeys } from "./options.js";
import { call, SteadfastError, sync } from "./errors.js";
import type { Checkpoint, HistoryEntry, PendingRun } from "./types.js";
import { withSessionId } from "./types.js";
import type { JournalOptions } from "./generated/JournalOptions.js";
import type { Clock } from "./clock.js";

export const HANDLE = Symbol("steadfast.store");

/** The wasm core's store, opaque to the published types (they do not depend on the wasm-bindgen declarations). */
export interface StoreHandle {
  readonly __steadfastStore: never;
}

/** A run store handle; agents created with the same handle share its runs and approvals. */
export interface Store {
  readonly kind: "memory" | "kv" | "durable-object" | "file" | "local-storage" | "sqlite";
  readonly [HANDLE]: StoreHandle;
  /** The store's runs, read and deleted without an agent (`store.checkpoints.load(id)`). */
  readonly checkpoints: Checkpoints;
}

/**
 * A store's runs as the documents' `store.checkpoints`: each run id's newest checkpoint (`status`:
 * `in-progress`, `awaiting-approval` or `finished`) and its past states. Nothing here executes a run.
 */
export interface Checkpoints {
  /** The store these are the runs of (so `createAgent({ store: checkpoints })` runs on it too). */
  readonly [HANDLE]: StoreHandle;
  /** The run's checkpoint, or `null` when the store has no run of that id. */
  load(sessionId: string): Promise<Checkpoint | null>;
  /**
   * Past states of the run, newest first: `{seq, step, savedAt, status, checkpoint}` (`savedAt` in ms since the
   * epoch); `limit` caps how many (default: all the store keeps, `historyLimit`). An unknown run gives `[]`.
   */
  history(sessionId: string, options?: { limit?: number }): Promise<HistoryEntry[]>;
  /** Every unfinished run (as `agent.pending()` lists them). */
  pending(): Promise<PendingRun[]>;
  /**
   * Deletes the run: its checkpoint, its history and its lease (a later send starts it over). The history is
   * the run's journal, so it cannot outlive the run: `{ keepHistory: true }` is refused with
   * `STEADFAST_CONFIG_INVALID` (fork the run first to keep a copy).
   */
  delete(sessionId: string, options?: { keepHistory?: boolean }): Promise<void>;
}

/**
 * The run's history through a store's `checkpoints` (`getCheckpointHistory(store.checkpoints, id, { limit })`):
 * `undefined` for a `checkpoints` object without `history`, as the documents have it.
 */
export async function getCheckpointHistory(
  checkpoints: Pick<Checkpoints, "history"> | Partial<Pick<Checkpoints, "history">> | undefined | null,
  sessionId: string,
  options?: { limit?: number },
): Promise<HistoryEntry[] | undefined> {
  knownKeys(options, "checkpoints.history options");
  if (typeof checkpoints?.history !== "function") return undefined;
  return checkpoints.history(sessionId, options);
}

/** The `checkpoints` of a store handle. */
function checkpointsOf(handle: StoreHandle): Checkpoints {
  const low = handle as unknown as JsStore;
  return {
    [HANDLE]: handle,
    load: (id) => call(() => low.load(id)),
    history: async (id, options) => {
      knownKeys(options, "checkpoints.history options");
      const limit = (options as { limit?: unknown } | undefined)?.limit;
      return call(() => low.history(id, limit));
    },
    pending: async () => (await call<PendingRun[]>(() => low.pending())).map(withSessionId),
    delete: async (id, options) => {
      // The options go to the core, which refuses an unknown key and `keepHistory: true`.
      await call(() => low.delete(id, options === undefined ? undefined : JSON.stringify(options)));
    },
  };
}

/** A store object over a handle. */
function storeOf(kind: Store["kind"], handle: StoreHandle): Store {
  return { kind, [HANDLE]: handle, checkpoints: checkpointsOf(handle) };
}

/** The part of a Workers `KVNamespace` the store uses. `get(keys[])` must resolve to a `Map` (bulk get). */
export interface KVNamespaceLike {
  get(key: string): Promise<string | null>;
  get(keys: string[]): Promise<Map<string, string | null>>;
  put(key: string, value: string, options?: { metadata?: unknown; expirationTtl?: number }): Promise<void>;
  delete(key: string): Promise<void>;
  list(options?: { prefix?: string; cursor?: string; limit?: number }): Promise<{
    keys: Array<{ name: string; metadata?: unknown }>;
    list_complete: boolean;
    cursor?: string;
  }>;
}

/**
 * Options of a KV store: the generated `JournalOptions`' `prefix` (default none), `historyLimit` (past states
 * kept per run for history and fork, default 50) and `settleMs` (the lease settle window, default 1000 ms), all
 * optional.
 */
export type KvStoreOptions = Partial<Pick<JournalOptions, "prefix" | "historyLimit" | "settleMs">> & {
  /** The clock the store reads instead of the platform's (lease settle windows, retry spacing); see `testClock`. */
  clock?: Clock;
};

/** Options of `memoryStore`. */
export interface MemoryStoreOptions {
  /** Past states kept per run for `history` and `fork` (default 50). */
  historyLimit?: number;
}

/** A new in-memory store (strongly consistent; lives as long as the handle). Share it between agents. */
export function memoryStore(options: MemoryStoreOptions = {}): Store {
  knownKeys(options, "memoryStore options");
  const historyLimit = (options ?? {}).historyLimit;
  return storeOf("memory", sync(() => newMemoryStore(historyLimit)) as unknown as StoreHandle);
}

/** A durable store over a Workers KV namespace binding (`kvStore(env.RUNS)`). */
export function kvStore(namespace: KVNamespaceLike, options: KvStoreOptions = {}): Store {
  const { clock, ...journal } = options;
  return storeOf("kv", sync(() => newKvStore(namespace, JSON.stringify(journal), clock)) as unknown as StoreHandle);
}

/**
 * The part of a SQLite-backed Durable Object's `ctx.storage` the store uses: `sql.exec` (synchronous
 * statements) and `transactionSync`.
 */
export interface DurableObjectStorageLike {
  readonly sql: { exec(query: string, ...bindings: unknown[]): unknown };
  transactionSync<T>(closure: () => T): T;
}

/** Options of a Durable Object store. */
export interface DurableObjectStoreOptions {
  /** Keeps this store's runs apart from another store's in the same object (default none). */
  prefix?: string;
  /** The clock the store reads instead of the platform's; see `testClock`. */
  clock?: Clock;
}

/**
 * Strict mode's store inside your own SQLite-backed Durable Object (`durableObjectStore(ctx)` or
 * `durableObjectStore(ctx.storage)`): the runs' journals (one row per durable boundary), leases, approvals and
 * their index live in tables of the object's storage (`steadfast_journal`, `steadfast_meta`, `steadfast_index`).
 * The object is single-threaded and its storage strongly consistent, so a lease excludes a second owner and a
 * stale owner's commit is refused (`STEADFAST_SESSION_BUSY`); there is no settle window. The class must be
 * declared with `new_sqlite_classes` in its wrangler migration. Runs live as long as the object's storage;
 * recover them from the object's `alarm()` with `agent.sweep()`.
 */
export function durableObjectStore(
  state: { readonly storage: DurableObjectStorageLike } | DurableObjectStorageLike,
  options: DurableObjectStoreOptions = {},
): Store {
  // Anything else reaches the core, which refuses it with STEADFAST_CONFIG_INVALID.
  const storage =
    typeof state === "object" && state !== null && "sql" in state
      ? state
      : (state as { storage?: DurableObjectStorageLike } | undefined)?.storage;
  // Checked by the core (a prefix that is not a string is STEADFAST_CONFIG_INVALID).
  knownKeys(options, "durableObjectStore options");
  const { prefix, clock } = (options ?? {}) as DurableObjectStoreOptions;
  return storeOf("durable-object", sync(() => newDurableObjectStore(storage, prefix, clock)) as unknown as StoreHandle);
}

/** The low-level store of an agent's `store` option. */
export function storeHandle(store: Store | Checkpoints | "memory" | KVNamespaceLike | undefined): StoreHandle {
  if (store === undefined) {
    throw new SteadfastError("STEADFAST_CONFIG_INVALID", "an agent needs a store: memoryStore() or kvStore(env.BINDING)");
  }
  if (store === "memory") return memoryStore()[HANDLE];
  if (typeof store === "object" && store !== null && HANDLE in store) return (store as Store | Checkpoints)[HANDLE];
  return kvStore(store as KVNamespaceLike)[HANDLE];
}
