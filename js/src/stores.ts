// Stores: in-memory, or a journal over a Workers KV namespace (both held by the wasm core).
import { newKvStore, newMemoryStore } from "./low_level.js";
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
  readonly kind: "memory" | "kv";
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

/** The low-level store of an agent's `store` option. */
export function storeHandle(store: Store | "memory" | KVNamespaceLike | undefined): StoreHandle {
  if (store === undefined) {
    throw new SteadfastError("STEADFAST_CONFIG_INVALID", "an agent needs a store: memoryStore() or kvStore(env.BINDING)");
  }
  if (store === "memory") return memoryStore()[HANDLE];
  if (typeof store === "object" && HANDLE in store) return (store as Store)[HANDLE];
  return kvStore(store as KVNamespaceLike)[HANDLE];
}
