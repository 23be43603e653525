// Hooks: descriptors the core's hooks are built from (a progress guard, output checks, custom JS hooks).
import type { ProgressGuardOptions as GeneratedProgressGuardOptions } from "./generated/ProgressGuardOptions.js";
import type { ModelResponse } from "./model.js";
import type { Json, Message, ToolCall } from "./types.js";

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

/** What a custom hook's functions get besides their arguments. */
export interface HookContext {
  readonly runId: string;
  readonly step: number;
  /** The call was approved by a person and this is its execution (`beforeTool` saw it at the gate already). */
  readonly resumedAfterApproval: boolean;
  /**
   * This hook's durable state: any JSON value, `null` at first. Assign it (or change it in place) to keep
   * something: it is stored in the checkpoint with the run's next durable boundary, so a crash or a resume
   * (in this process or another) does not reset it.
   */
  state: Json;
}

/** What `beforeTool` may answer: new arguments for the call, or a denial (the model gets a `denied` result). */
export type BeforeToolAnswer = { args: Json } | { deny: string };

/** What `afterTool` may answer: what the model reads instead (its `tool.done` event is marked `replacedBy` the hook). */
export type AfterToolAnswer = { content?: string; isError?: boolean };

/** A value or a promise of it. */
type Awaitable<T> = T | Promise<T>;

/** A custom hook (see `defineHook`). */
export interface CustomHook {
  readonly type: "custom";
  /** Its name: `replacedBy` on `tool.done` events of results it replaced, and the key of its durable state. */
  readonly name: string;
  /**
   * Before a tool call runs: after argument validation and before the approval gate, and again right before
   * an approved call runs (`ctx.resumedAfterApproval`). Answer `{args}` to run it with other arguments,
   * `{deny: reason}` to deny it, nothing to go on.
   */
  beforeTool?(call: ToolCall, ctx: HookContext): Awaitable<BeforeToolAnswer | void | undefined>;
  /** After a tool call ran (or failed): answer `{content?, isError?}` to replace what the model reads. */
  afterTool?(call: ToolCall, result: { content: string; isError: boolean }, ctx: HookContext): Awaitable<AfterToolAnswer | void | undefined>;
  /** Before each model call, with the whole transcript (it crosses from the core on every call: costly for long runs). */
  beforeModel?(messages: Message[], ctx: HookContext): Awaitable<void>;
  /** After the model answered: answer `{response}` to use another response. */
  afterModel?(response: ModelResponse, ctx: HookContext): Awaitable<{ response: ModelResponse } | void | undefined>;
}

/** A hook of `createAgent({hooks})`: runs around tool and model calls in the Rust core, in order. */
export type Hook = ProgressGuardHook | OutputCheckHook | CustomHook;

/**
 * Defines a custom hook: `beforeTool` (rewrite or deny a call), `afterTool` (replace a result), `beforeModel`,
 * `afterModel` (replace a response), each optional and possibly async, with durable state in `ctx.state`. A
 * function that throws (or rejects) fails the run attempt with `STEADFAST_HOOK_FAILED`; the run stays
 * resumable.
 */
export function defineHook(hook: Omit<CustomHook, "type">): CustomHook {
  return { ...hook, type: "custom" };
}

/** A custom hook function as the core calls it: JSON in, the answer (plus the state, if it changed) as JSON out. */
function lowLevelHookFn<A extends unknown[]>(
  f: ((...args: [...A, HookContext]) => unknown) | undefined,
  self: CustomHook,
): ((...json: string[]) => Promise<string | undefined>) | undefined {
  if (typeof f !== "function") return undefined;
  return async (...json: string[]) => {
    const ctx = JSON.parse(json[json.length - 1] as string) as HookContext;
    const before = JSON.stringify(ctx.state);
    const args = json.slice(0, -1).map((j) => JSON.parse(j)) as A;
    const answer = ((await f.call(self, ...args, ctx)) ?? {}) as object;
    const after = JSON.stringify(ctx.state ?? null);
    return JSON.stringify(after === before ? answer : { ...answer, state: ctx.state ?? null, stateChanged: true });
  };
}

/**
 * Stops a run that keeps calling a tool that fails the same way: a hint in the result, then the tool is denied,
 * then the run stops with `STEADFAST_RUN_NO_PROGRESS` (not retryable). Each action is a `heal.action` event.
 * Its counters are stored in the checkpoint (a resume does not reset them).
 */
export function progressGuard(options: ProgressGuardOptions = {}): ProgressGuardHook {
  // Other keys are handed on, for the core to refuse (STEADFAST_CONFIG_INVALID naming the key).
  const { hintAfter, denyAfter, maxDenials, ...other } = options ?? {};
  return {
    ...other,
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
  if (h && h.type === "custom") {
    // Other keys are handed on, for the core to refuse (STEADFAST_CONFIG_INVALID naming the key).
    return {
      ...h,
      type: "custom",
      name: h.name,
      beforeTool: lowLevelHookFn(h.beforeTool, h),
      afterTool: lowLevelHookFn(h.afterTool, h),
      beforeModel: lowLevelHookFn(h.beforeModel, h),
      afterModel: lowLevelHookFn(h.afterModel, h),
    };
  }
  if (h && h.type === "outputCheck" && typeof h.check === "function") {
    const check = h.check;
    return {
      ...h,
      type: "outputCheck",
      name: h.name,
      check: (callJson: string, output: string) => check(JSON.parse(callJson) as ToolCall, output),
    };
  }
  return h;
}
