// The ONLY file that imports the wasm-bindgen output (`wasm/steadfast.js`, built with `--target web`).
// Each runtime's entry point (src/entrypoints/*.ts) hands it the compiled module or the bytes; the typed
// facade (index.ts) only sees the functions below.
import { checkToolKeys, compareTrajectories, initSync, JsAgent, JsSchedules, JsStore } from "../wasm/steadfast.js";

export type { JsAgent, JsSchedules, JsStore };

let ready = false;

/** Instantiates the wasm core once (a `WebAssembly.Module` under workerd, the bytes under node). */
export function loadWasm(module: WebAssembly.Module | BufferSource): void {
  if (ready) return;
  initSync({ module });
  ready = true;
}

function check(): void {
  if (!ready) {
    throw new Error(
      "steadfast: the wasm core is not loaded; import the package through its entry point ('steadfast'), " +
        "which loads it for node and workerd",
    );
  }
}

/** A new in-memory store handle (`historyLimit`: past states kept per run, absent: 50). */
export function newMemoryStore(historyLimit?: unknown): JsStore {
  check();
  return JsStore.memory(historyLimit);
}

/** A journal store over a KV namespace (`optionsJson`: JournalOptions as JSON; `clock`: `{now, sleep}`). */
export function newKvStore(namespace: unknown, optionsJson?: string, clock?: unknown): JsStore {
  check();
  return JsStore.kv(namespace, optionsJson ?? null, clock ?? null);
}

/** Strict mode's store in a Durable Object's SQLite storage (`storage`: its `ctx.storage`). */
export function newDurableObjectStore(storage: unknown, prefix?: unknown, clock?: unknown): JsStore {
  check();
  return JsStore.durableObject(storage, prefix, clock);
}

/** Compares two runs given as JSON (checkpoints or transcripts); the Comparison JSON. */
export function compareRuns(aJson: string, bJson: string): string {
  check();
  return compareTrajectories(aJson, bJson);
}

/** A new agent over a store handle (`options`: the low-level options object; see src/front/bindings/mod.rs). */
export function newAgent(options: object, store: unknown): JsAgent {
  check();
  return new JsAgent(options, store as JsStore);
}

/** Checked schedules from their JSON array (throws the coded error of the first bad one). */
export function newSchedules(schedulesJson: string): JsSchedules {
  check();
  return new JsSchedules(schedulesJson);
}

/** Refuses a tool object's unknown key (STEADFAST_CONFIG_INVALID naming it), by the core's list; a no-op before
 * the core is loaded (createAgent checks again). */
export function toolKeys(tool: object): void {
  if (ready) checkToolKeys(tool);
}
