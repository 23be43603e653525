// Schedules: `agent.fireSchedule(schedules)` for a Worker's `scheduled` handler and the `startSchedules` loop
// for long-lived hosts (the Rust runtime's `Agent::fire_schedules` and `Agent::run_schedules`, which checks
// the schedules, claims each fire time in the store and sleeps on the agent's clock; this module translates).
import { knownKeys } from "./options.js";
import { newSchedules } from "./low_level.js";
import { call, SteadfastError, sync, wrapError } from "./errors.js";
import { isThenable, startLoop, type Loop } from "./loop.js";
import type { MissedFires } from "./generated/MissedFires.js";
import type { Schedule } from "./generated/Schedule.js";
import type { ScheduleInput } from "./generated/ScheduleInput.js";
import type { ScheduleOutcome } from "./generated/ScheduleOutcome.js";
import type { AbortSignalLike, RunEvent } from "./types.js";

export type { MissedFires, Schedule, ScheduleInput, ScheduleOutcome };

/** Options of `fireSchedule`. */
export interface FireScheduleOptions {
  /** Called with each event of the fires' runs as it happens (a throwing callback is ignored). */
  onEvent?: (event: RunEvent) => void;
  /** Aborts the fire in flight (its run stays unfinished; the recovery sweep finishes it) and the ones after. */
  signal?: AbortSignalLike;
}

/** Options of `startSchedules`. */
export interface StartSchedulesOptions {
  /** Time between ticks in ms (default 60000), on the agent's clock (`createAgent({ clock })`). */
  intervalMs?: number;
  /** A fire this process ran (outcome `fired`: the run finished, or paused on an approval). */
  onFire?: (outcome: Extract<ScheduleOutcome, { outcome: "fired" }>) => void;
  /** Every outcome of a tick (one per schedule, `idle` ones included). */
  onTick?: (outcomes: ScheduleOutcome[]) => void;
  /**
   * A fire failed (outcome `failed`: its error, with `runId` when a fire was due), or a callback threw
   * (`STEADFAST_HOOK_FAILED`, "onFire threw: …"). The loop goes on either way; an `onError` that throws is
   * ignored.
   */
  onError?: (error: SteadfastError, outcome?: Extract<ScheduleOutcome, { outcome: "failed" }>) => void;
  /** Called with each event of the fires' runs as it happens. */
  onEvent?: (event: RunEvent) => void;
  /** Aborting it stops the loop, like `stop()`. */
  signal?: AbortSignalLike;
}

/** A running schedule loop. */
export interface Schedules extends Loop {
  /**
   * Stops the loop: a fire in flight is aborted (its run stays unfinished; the recovery sweep finishes it) and
   * nothing more starts; resolves once the loop settled.
   */
  stop(): Promise<void>;
  /** Resolves once the loop stopped (never rejects: a failure goes to `onError`). */
  done: Promise<void>;
}

/** Schedules the core checked (a `JsSchedules`, opaque here). */
interface CheckedSchedules {
  free(): void;
}

/** The low-level agent's schedule methods (src/front/bindings/mod.rs; structural, so the published types do not
 * reach into the wasm-bindgen declarations). */
export interface LowSchedules {
  fireSchedules(schedules: CheckedSchedules, optionsJson: string | null, onEvent: ((json: string) => void) | null, signal: unknown): Promise<string>;
  runSchedules(schedules: CheckedSchedules, everyMs: number, onTick: (json: string) => void, onEvent: ((json: string) => void) | null, signal: unknown): Promise<string>;
}

/** The JSON the core checks (`undefined` is not JSON: it reads as `null`, which is refused with a code). */
function schedulesJson(schedules: readonly Schedule[]): string {
  return JSON.stringify(schedules ?? null) ?? "null";
}

/** `fireSchedule`: checks the schedules (a rejection with the coded error of the first bad one), fires. */
export function fireSchedules(low: LowSchedules, schedules: readonly Schedule[], given?: FireScheduleOptions): Promise<ScheduleOutcome[]> {
  const opts = given ?? {};
  return call(() => {
    knownKeys(opts, "fireSchedule options");
    const checked = newSchedules(schedulesJson(schedules));
    try {
      return low.fireSchedules(
        checked,
        null,
        opts.onEvent ? (json: string) => opts.onEvent?.(JSON.parse(json) as RunEvent) : null,
        opts.signal ?? null,
      );
    } finally {
      checked.free();
    }
  });
}

/** `startSchedules`: checks the schedules and `intervalMs` at once (a throw), then runs the runtime's loop until stopped. */
export function scheduleLoop(low: LowSchedules, schedules: readonly Schedule[], given?: StartSchedulesOptions): Schedules {
  knownKeys(given, "startSchedules options");
  const { intervalMs = 60_000, onFire, onTick, onError, onEvent, signal } = given ?? {};
  const checked = sync(() => newSchedules(schedulesJson(schedules)));

  const tellError = (error: SteadfastError, outcome?: Extract<ScheduleOutcome, { outcome: "failed" }>) => {
    try {
      const r = onError?.(error, outcome) as unknown;
      if (isThenable(r)) r.then(undefined, () => {});
    } catch {
      // Ignored: there is no one left to tell.
    }
  };
  /** Calls a user callback; a throw (or an async rejection) goes to `onError` as `STEADFAST_HOOK_FAILED`. */
  const guarded = (name: string, f: () => unknown) => {
    const threw = (e: unknown) =>
      tellError(new SteadfastError("STEADFAST_HOOK_FAILED", `${name} threw: ${(e as Error)?.message ?? String(e)}`, { cause: e }));
    try {
      const r = f();
      if (isThenable(r)) r.then(undefined, threw);
    } catch (e) {
      threw(e);
    }
  };
  const tick = (json: string) => {
    const outcomes = JSON.parse(json) as ScheduleOutcome[];
    if (onTick) guarded("onTick", () => onTick(outcomes));
    for (const o of outcomes) {
      if (o.outcome === "fired" && onFire) guarded("onFire", () => onFire(o));
      if (o.outcome === "failed") {
        tellError(
          new SteadfastError(o.error.code, o.error.message, {
            retryable: o.error.retryable,
            ...(o.runId === undefined ? {} : { runId: o.runId }),
          }),
          o,
        );
      }
    }
  };
  try {
    return startLoop(
      signal,
      (stop) =>
        low.runSchedules(
          checked,
          intervalMs,
          tick,
          onEvent ? (json: string) => onEvent(JSON.parse(json) as RunEvent) : null,
          stop,
        ),
      // The loop itself does not fail (each tick's failures are outcomes); reported if it ever does.
      (e) => tellError(wrapError(e) as SteadfastError),
      () => checked.free(),
    );
  } catch (e) {
    // A bad `intervalMs`, refused before the loop starts.
    throw wrapError(e);
  }
}
