// The keys of the options objects only JS reads (the core refuses unknown keys of the objects it reads itself:
// createAgent's, tools, hooks, sweep/recover, fork, KV store options). One table, one check: a key not in its
// object's row is refused with STEADFAST_CONFIG_INVALID naming it and the object, worded as the core's refusal
// (a misspelt option must not silently turn a feature off).
import { SteadfastError } from "./errors.js";

/** Every JS-only options object, by the name a refusal gives it, with the keys it takes. */
const KEYS = {
  "send options": ["sessionId", "businessState", "queue", "interrupt", "events", "onEvent", "signal"],
  "stream options": ["sessionId", "businessState", "queue", "interrupt", "signal"],
  "runOnce options": ["businessState", "events", "onEvent", "signal"],
  "resume options": ["events", "onEvent", "signal"],
  "session options": ["id"],
  "session send options": ["businessState", "queue", "interrupt", "events", "onEvent", "signal"],
  "session resume options": ["events", "onEvent", "signal"],
  "session history options": ["limit"],
  "approvals.resolve decision": ["id", "approved", "note", "answer"],
  "approvals.resolve options": ["onEvent"],
  "events.deliver options": ["onEvent"],
  "fireSchedule options": ["onEvent", "signal"],
  "startSchedules options": ["intervalMs", "onFire", "onTick", "onError", "onEvent", "signal"],
  "durableObjectStore options": ["prefix", "clock"],
  "memoryStore options": ["historyLimit"],
  "fileStore options": ["historyLimit", "prefix", "settleMs", "clock"],
  "SqliteStore options": ["historyLimit", "prefix", "settleMs", "clock"],
  "LocalStorageCheckpointStore options": ["historyLimit", "prefix", "settleMs", "clock"],
  "checkpoints.history options": ["limit"],
  "AgentExecutor.execute options": ["agent", "input", "provider", "toolRegistry", "sessionId", "checkpointStore", "approvalStore", "onEvent", "signal"],
  "AgentExecutor.fork options": ["sessionId", "fromStep", "checkpointStore", "patch", "newSessionId"],
  "resumeAfterApproval options": ["agent", "onEvent", "hooks"],
  "mockModel options": ["id", "mode"],
  "testClock options": ["start", "auto"],
} as const satisfies Record<string, readonly string[]>;

/** The name of a JS-only options object. */
export type OptionsKind = keyof typeof KEYS;

/**
 * Refuses an own key of `given` that `kind` does not take (`STEADFAST_CONFIG_INVALID`: `"<kind>: unknown key
 * "<key>" (it takes a, b)"`). Anything but a plain object is left to the caller's own checks.
 */
export function knownKeys(given: unknown, kind: OptionsKind): void {
  if (given === null || typeof given !== "object" || Array.isArray(given)) return;
  const known: readonly string[] = KEYS[kind];
  const bad = Object.keys(given).find((k) => !known.includes(k));
  if (bad !== undefined) {
    throw new SteadfastError("STEADFAST_CONFIG_INVALID", `${kind}: unknown key ${JSON.stringify(bad)} (it takes ${known.join(", ")})`);
  }
}

/** `knownKeys` as a rejected promise (for the methods that answer with one). */
export function knownKeysAsync(given: unknown, kind: OptionsKind): Promise<void> | undefined {
  try {
    knownKeys(given, kind);
    return undefined;
  } catch (e) {
    return Promise.reject(e);
  }
}
