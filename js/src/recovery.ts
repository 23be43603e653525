// Recovery: the sweep's options, and the `recover` loop of sweep ticks for long-lived hosts (the Rust runtime's
// `Agent::recover`: it ticks, sleeps on the agent's clock and calls the callbacks; this module translates them).
import { wrapError, type SteadfastError } from "./errors.js";
import { isThenable, startLoop, type Loop } from "./loop.js";
import type { SweepOptions as GeneratedSweepOptions } from "./generated/SweepOptions.js";
import { withSessionId, type AbortSignalLike, type PendingRun, type RunResult } from "./types.js";

/** One recovery sweep tick's settings (every field optional: the generated `SweepOptions` has defaults). */
export type SweepOptions = Partial<GeneratedSweepOptions>;

/**
 * The run a recovery callback is about: `runId`, and `sessionId`, the same id under the name `send` and the
 * documents use (what `resume` takes).
 */
export interface RecoveryRun {
  runId: string;
  sessionId: string;
}

/** `recover` options: the sweep's settings, the loop's period and its callbacks. */
export interface RecoverOptions extends SweepOptions {
  /** Time between ticks in ms (default: `intervalMs`, else 30 s), on the agent's clock. */
  everyMs?: number;
  /** A run the loop finished, with its result (for a diagnosis fork: the original's id). */
  onRecovered?: (run: RecoveryRun, result: RunResult) => void;
  /** A run reached the attempt cap (reported once); the sweep leaves it alone from then on. */
  onQuarantined?: (run: PendingRun) => void;
  /** The provider-outage breaker opened (`true`) or closed (`false`). */
  onOutage?: (active: boolean) => void;
  /**
   * A tick could not list the store (`run` undefined), a resume failed (`run` set), or a callback threw
   * (`STEADFAST_HOOK_FAILED`, "onRecovered threw: …"). The loop goes on either way; an `onError` that throws is
   * ignored (counted in the tick's `listenerErrors`).
   */
  onError?: (error: SteadfastError, run?: RecoveryRun) => void;
  /** Aborting it stops the loop, like `stop()` (the resume in flight is aborted too). */
  signal?: AbortSignalLike;
}

/** A running recovery loop. */
export interface Recovery extends Loop {
  /**
   * Stops the loop: the resume in flight (if any) is aborted, its checkpoint staying for the next start, and
   * nothing more starts; resolves once the loop settled.
   */
  stop(): Promise<void>;
  /** Resolves once the loop stopped (never rejects: a failure goes to `onError`). */
  done: Promise<void>;
}

/** The low-level loop: `JsAgent.recover(optionsJson, everyMs, listener, signal)`, resolving the tick count. */
export type LowRecover = (optionsJson: string, everyMs: number | null, listener: object, signal: AbortSignalLike) => Promise<string>;

const runRef = (runId: string): RecoveryRun => ({ runId, sessionId: runId });

/** The `recover` loop over the runtime's: callbacks get the documented arguments; `stop()` and `signal` end it. */
export function recoveryLoop(low: LowRecover, opts: RecoverOptions): Recovery {
  const { everyMs, onRecovered, onQuarantined, onOutage, onError, signal, ...sweepOptions } = opts;
  // An async callback's rejection is reported like a throw (it would otherwise be an unhandled rejection).
  const reportAsync = (value: unknown) => {
    if (isThenable(value)) {
      value.then(undefined, (e: unknown) => {
        try {
          onError?.(wrapError(e) as SteadfastError);
        } catch {
          // Ignored, as the runtime ignores an `onError` that throws.
        }
      });
    }
  };
  const listener = {
    onRecovered: onRecovered && ((runId: string, resultJson: string) =>
      reportAsync(onRecovered(runRef(runId), JSON.parse(resultJson) as RunResult))),
    onQuarantined: onQuarantined && ((runJson: string) =>
      reportAsync(onQuarantined(withSessionId(JSON.parse(runJson) as PendingRun)))),
    onOutage: onOutage && ((active: boolean) => reportAsync(onOutage(active))),
    onError: onError && ((error: unknown, runId?: string) =>
      reportAsync(onError(wrapError(error) as SteadfastError, runId === undefined ? undefined : runRef(runId)))),
  };
  // Async, so options that JSON cannot write (a BigInt) are reported to `onError` as the runtime refusals are.
  return startLoop(
    signal,
    async (stop) => low(JSON.stringify(sweepOptions), everyMs ?? null, listener, stop),
    (e) => {
      // Only options the runtime refuses end here (before any tick).
      try {
        onError?.(wrapError(e) as SteadfastError);
      } catch {
        // Ignored: there is no one left to tell.
      }
    },
  );
}
