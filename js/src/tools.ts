// Tools: what a JS tool is, and how the core calls it (arguments and context as JSON).
import type { Json, ToolContext } from "./types.js";

/** A tool definition (see `defineTool`). */
export interface Tool<A = any> {
  name: string;
  description: string;
  /** JSON Schema of the arguments, validated before the call runs (default `{type: "object"}`: any object). */
  inputSchema?: Json;
  /** Whether a call needs a person's approval first. */
  needsApproval?: boolean | ((args: A) => boolean);
  /**
   * Runs the call. A string is the text the model reads; other values are serialised as JSON. A thrown error
   * becomes an error result the model reads, `"<the error's name>: <its message>"` (`"Error: order x9 not
   * found"`, `"TypeError: …"`; a thrown non-Error value reads `"Error: <value>"`), unless it is a
   * `PropagatedToolError` (`PropagatingToolError`), or any error with `propagate: true`: then `send` rejects
   * with `STEADFAST_TOOL_PROPAGATED` (the error's message; `retryable` as the error says, default `true`) and
   * the run stays resumable.
   * Caution: a call may run again on resume (after a crash): make it idempotent with `ctx.idempotencyKey` (unique
   * across runs, unchanged when the same call runs again; the approval id for an approved call).
   */
  execute(args: A, ctx: ToolContext): unknown | Promise<unknown>;
  /**
   * The call has an effect worth a ledger (a charge, an email): the runtime records its intent in the checkpoint
   * before it runs, so a resume that finds an intent without an outcome (the process died, or the tool threw a
   * `PropagatedToolError` after the effect) knows the effect may have happened and asks `reconcile` first.
   * Implied by `reconcile`.
   */
  sideEffecting?: boolean;
  /**
   * Did the effect of a call whose outcome was not recorded happen? Look it up by `ctx.idempotencyKey` (the
   * `idempotencyKey` `execute` got; record it with the effect): return the call's output (recorded as its
   * result, the call does not run again), or `null`/`undefined` for "not found" (the call runs again). A throw
   * fails the resume with `STEADFAST_TOOL_PROPAGATED` (the run stays resumable).
   */
  reconcile?(args: A, ctx: { idempotencyKey: string }): unknown | Promise<unknown>;
}

/** Defines a tool (identity, for typing). */
export function defineTool<A = any>(tool: Tool<A>): Tool<A> {
  return tool;
}

/** The low-level tool object the core calls: JSON in, the tool's value out. */
export function lowLevelTool(t: Tool): object {
  // Not an object: handed on as it is, for the core to refuse.
  if (t === null || typeof t !== "object") return t as unknown as object;
  const needs = t.needsApproval;
  return {
    name: t.name,
    description: t.description,
    inputSchema: t.inputSchema,
    needsApproval: typeof needs === "function" ? (argsJson: string) => Boolean(needs(JSON.parse(argsJson))) : Boolean(needs),
    // Not a function: handed on as it is, for the core to refuse (STEADFAST_CONFIG_INVALID).
    execute:
      typeof t.execute === "function"
        ? async (argsJson: string, ctxJson: string) => t.execute(JSON.parse(argsJson), JSON.parse(ctxJson) as ToolContext)
        : t.execute,
    sideEffecting: t.sideEffecting,
    reconcile:
      typeof t.reconcile === "function"
        ? async (argsJson: string, ctxJson: string) =>
            t.reconcile?.(JSON.parse(argsJson), JSON.parse(ctxJson) as { idempotencyKey: string })
        : t.reconcile,
  };
}
