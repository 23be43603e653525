// Self-healing hooks: descriptors the core's hooks are built from (a progress guard, output checks).
import type { ProgressGuardOptions as GeneratedProgressGuardOptions } from "./generated/ProgressGuardOptions.js";
import type { ToolCall } from "./types.js";

/** Options of `progressGuard` (every field optional: the generated `ProgressGuardOptions` has defaults). */
export type ProgressGuardOptions = Partial<GeneratedProgressGuardOptions>;

/** A progress guard hook (see `progressGuard`). */
export interface ProgressGuardHook extends ProgressGuardOptions {
  readonly type: "progressGuard";
}

/**
 * An output check: a tool output for which `check` returns a string becomes an error result the model reads
 * (`"output check failed: <reason>…"`); `null`/`undefined` passes. A throwing check fails with
 * `"check threw: <message>"`. Called synchronously.
 */
export type OutputCheckFn = (call: ToolCall, output: string) => string | null | undefined;

/** An output check hook (see `outputCheck`). */
export interface OutputCheckHook {
  readonly type: "outputCheck";
  readonly name: string;
  readonly check: OutputCheckFn;
}

/** A hook of `createAgent({hooks})`: runs around tool calls in the Rust core, in order. */
export type Hook = ProgressGuardHook | OutputCheckHook;

/**
 * Stops a run that keeps calling a tool that fails the same way: a hint in the result, then the tool is denied,
 * then the run stops with `STEADFAST_RUN_NO_PROGRESS` (not retryable). Each action is a `heal.action` event.
 * Its counters are stored in the checkpoint (a resume does not reset them).
 */
export function progressGuard(options: ProgressGuardOptions = {}): ProgressGuardHook {
  const { hintAfter, denyAfter, maxDenials } = options;
  return {
    type: "progressGuard",
    ...(hintAfter !== undefined && { hintAfter }),
    ...(denyAfter !== undefined && { denyAfter }),
    ...(maxDenials !== undefined && { maxDenials }),
  };
}

/** Checks what a tool produced (successful results only); `name` marks the results it replaces. */
export function outputCheck(name: string, check: OutputCheckFn): OutputCheckHook {
  return { type: "outputCheck", name, check };
}

/** The low-level hook object the core reads (an output check gets the call as JSON). */
export function lowLevelHook(h: Hook): object {
  if (h && h.type === "outputCheck" && typeof h.check === "function") {
    const check = h.check;
    return {
      type: "outputCheck",
      name: h.name,
      check: (callJson: string, output: string) => check(JSON.parse(callJson) as ToolCall, output),
    };
  }
  return h;
}
