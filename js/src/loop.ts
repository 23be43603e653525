// The skeleton the package's two long-running loops share (`recover` in recovery.ts, `startSchedules` in
// schedules.ts): the runtime runs the loop until an abort signal fires; this module links the caller's `signal`
// and `stop()` to that signal, hands what the loop rejects with to the caller's reporter, and settles `done`.
import type { AbortSignalLike } from "./types.js";

/** A running loop. */
export interface Loop {
  /** Aborts the loop and resolves once it settled. */
  stop(): Promise<void>;
  /** Resolves once the loop stopped (never rejects: a failure goes to the reporter). */
  done: Promise<void>;
}

/**
 * Starts `run` with a signal that aborts on `stop()` or when `signal` aborts (at once when it already has).
 * A synchronous throw of `run` (an argument refused before the loop starts) is thrown from here, after
 * `cleanup`; a rejection is handed to `onFailure` (which must not throw). `cleanup` runs once, when the loop
 * settled, after the listener on `signal` was removed.
 */
export function startLoop(
  signal: AbortSignalLike | undefined,
  run: (stop: AbortSignalLike) => Promise<unknown>,
  onFailure: (error: unknown) => void,
  cleanup?: () => void,
): Loop {
  const controller = new AbortController();
  const halt = () => controller.abort();
  if (signal?.aborted) halt();
  else signal?.addEventListener("abort", halt, { once: true });
  const settle = () => {
    signal?.removeEventListener?.("abort", halt);
    cleanup?.();
  };
  let running: Promise<unknown>;
  try {
    running = run(controller.signal);
  } catch (e) {
    settle();
    throw e;
  }
  const done = (async () => {
    try {
      await running;
    } catch (e) {
      onFailure(e);
    } finally {
      settle();
    }
  })();
  return {
    stop: async () => {
      halt();
      await done;
    },
    done,
  };
}

/** Whether a callback's return value is a promise (whose rejection must be reported, not left unhandled). */
export function isThenable(value: unknown): value is Promise<unknown> {
  const p = value as { then?: unknown } | null | undefined;
  return !!p && typeof p.then === "function";
}
