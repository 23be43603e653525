// Stores: in-memory, a journal over a Workers KV namespace, or strict mode's store inside a Durable Object (all
// held by the wasm core).
import { newDurableObjectStore, newKvStore, newMemoryStore } from "./low_level.js";
import { knownKeys } from "./options.js";
import { SteadfastError, sync } from "./errors.js";
import type { JournalOptions } from "./generated/JournalOptions.js";
import type { Clock } from "./clock.js";

export const HANDLE = Symbol("steadfast.store");

/** The wasm core's store, opaque to the published types (they do not depend on the wasm-bindgen declarations). */
export interface StoreHandle {
  readonly __steadfastStore: never;
}

/** A run store handle; agents created with the same handle share its runs and approvals. */
export interface Store {
  readonly kind: "memory" | "kv" | "durable-object";
  readonly [HANDLE]: StoreHandle;
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

/** A new in-memory store (strongly consistent; lives as long as the handle). Share it between agents. */
export function memoryStore(): Store {
  return { kind: "memory", [HANDLE]: sync(() => newMemoryStore()) as unknown as StoreHandle };
}

/** A durable store over a Workers KV namespace binding (`kvStore(env.RUNS)`). */
export function kvStore(namespace: KVNamespaceLike, options: KvStoreOptions = {}): Store {
  const { clock, ...journal } = options;
  return { kind: "kv", [HANDLE]: sync(() => newKvStore(namespace, JSON.stringify(journal), clock)) as unknown as StoreHandle };
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
  return {
    kind: "durable-object",
    [HANDLE]: sync(() => newDurableObjectStore(storage, prefix, clock)) as unknown as StoreHandle,
  };
}

/** The low-level store of an agent's `store` option. */
export function storeHandle(store: Store | "memory" | KVNamespaceLike | undefined): StoreHandle {
  if (store === undefined) {
    throw new SteadfastError("STEADFAST_CONFIG_INVALID", "an agent needs a store: memoryStore() or kvStore(env.BINDING)");
  }
  if (store === "memory") return memoryStore()[HANDLE];
  if (typeof store === "object" && HANDLE in store) return (store as Store)[HANDLE];
  return kvStore(store as KVNamespaceLike)[HANDLE];
}
