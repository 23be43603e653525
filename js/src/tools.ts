// Tools: what a JS tool is, its input schema (zod v3/v4, any Standard Schema validator, or JSON Schema), and how
// the core calls it (arguments and context as JSON).
import { SteadfastError, sync } from "./errors.js";
import { toolKeys } from "./low_level.js";
import { isStandardSchema, issuesText, jsonSchemaConverter, type StandardSchemaV1 } from "./standard_schema.js";
import type { Json, ToolContext } from "./types.js";
import { toolContext } from "./waits.js";
import { isZod3, zod3ToJsonSchema, Zod3Unsupported } from "./zod3.js";

export type { StandardSchemaV1 } from "./standard_schema.js";

/** A tool definition (see `defineTool`). */
export interface Tool<A = any> {
  name: string;
  description: string;
  /**
   * The arguments' schema: a zod schema (v4, or v3 from `zod/v3` or zod@3), any other Standard Schema
   * validator (valibot, arktype, …), or a plain JSON Schema object. A validator checks each call's arguments
   * after the JSON Schema and before hooks, approval and the call (a failure is the `validation` result the
   * model reads, `invalid arguments for '<name>': /path: message`; the tool does not run), and `execute` gets
   * its output (defaults and transforms applied). The JSON Schema the model reads (and the fingerprint hashes)
   * is zod 4's own (`~standard.jsonSchema`, draft 2020-12), the package's conversion of a zod v3 schema, or
   * `inputSchema`: a validator without a JSON Schema (valibot) needs `inputSchema`, and so does a zod v3 type
   * JSON Schema cannot express (a date, a lazy or a map; refused with `STEADFAST_CONFIG_INVALID` naming it).
   */
  input?: StandardSchemaV1<any, A> | Json;
  /**
   * JSON Schema of the arguments the model reads, checked before the call runs (default: `input`'s, else
   * `{type: "object"}`, any object). Beside a validator `input`, it replaces the converted schema.
   */
  inputSchema?: Json;
  /**
   * Whether a call needs a person's approval first (asked after validation). The function gets the validator's
   * output when the validator answers synchronously (zod without async refinements, valibot), else the
   * arguments as the model wrote them.
   */
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
   * To wait instead of answering, return one of `ctx`'s wait helpers: `ctx.waitForEvent({ deadline })` (an event
   * delivered with `ctx.waitToken`), `ctx.askQuestion(question, choices)`, `ctx.sleepUntil(at)`, `ctx.sleepFor(ms)`
   * (see `ToolWait`).
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

/**
 * Defines a tool: refuses an unknown key (`STEADFAST_CONFIG_INVALID` naming it: a typo must not turn a feature
 * off), checks its input schema (`STEADFAST_CONFIG_INVALID` naming the tool when `input` is neither a
 * validator nor a JSON Schema, or gives no JSON Schema the model could read), and types `execute`'s arguments
 * from it (`StandardSchemaV1.InferOutput`: `z.infer` for zod).
 */
export function defineTool<A = any>(tool: Tool<A>): Tool<A> {
  if (tool !== null && typeof tool === "object") {
    sync(() => toolKeys(tool));
    inputOf(tool);
  }
  return tool;
}

/** A tool's arguments as the package takes them: the JSON Schema the model reads, and the validator, if any. */
interface ToolInputs {
  schema: Json | undefined;
  check?: (value: unknown) => StandardSchemaV1.Result<unknown> | Promise<StandardSchemaV1.Result<unknown>>;
}

/** Each tool's inputs, worked out once (by `defineTool` or `createAgent`). */
const inputs = new WeakMap<object, ToolInputs>();

/** A zod v3 schema before 3.24 (no `~standard`): its own `safeParseAsync`. */
type OldZod3 = { safeParseAsync(v: unknown): Promise<{ success: boolean; data?: unknown; error?: { issues: StandardSchemaV1.Issue[] } }> };

/** The tool's JSON Schema and validator (see `Tool.input`); throws `STEADFAST_CONFIG_INVALID` naming the tool. */
function inputOf(t: Tool): ToolInputs {
  const known = inputs.get(t);
  if (known) return known;
  const cfg = (m: string) => new SteadfastError("STEADFAST_CONFIG_INVALID", `tool '${String(t.name)}': ${m}`);
  const { input, inputSchema } = t as { input?: unknown; inputSchema?: Json };
  let out: ToolInputs;
  if (input === undefined) {
    out = { schema: inputSchema };
  } else if (isStandardSchema(input) || isZod3(input)) {
    const std = isStandardSchema(input) ? input["~standard"] : undefined;
    const check: ToolInputs["check"] = std
      ? (v) => std.validate(v)
      : async (v) => {
          const r = await (input as unknown as OldZod3).safeParseAsync(v);
          return r.success ? { value: r.data } : { issues: r.error?.issues ?? [{ message: "invalid" }] };
        };
    out = { schema: inputSchema ?? converted(input, cfg), check };
  } else if ((typeof input === "object" && input !== null && !Array.isArray(input)) || typeof input === "boolean") {
    if (inputSchema !== undefined) throw cfg("give its JSON Schema once: as `input` or as `inputSchema`, not both");
    out = { schema: input as Json };
  } else {
    throw cfg(
      `input must be a zod schema, a Standard Schema validator or a JSON Schema object, not ${input === null ? "null" : Array.isArray(input) ? "an array" : typeof input}`,
    );
  }
  inputs.set(t, out);
  return out;
}

/** The JSON Schema of what a validator accepts: zod 4's own, our conversion of zod v3's, else a refusal. */
function converted(input: object, cfg: (m: string) => SteadfastError): Json {
  let schema: Record<string, unknown>;
  const conv = isStandardSchema(input) ? jsonSchemaConverter(input) : undefined;
  if (conv) {
    try {
      schema = conv.input({ target: "draft-2020-12" });
    } catch (e) {
      throw cfg(
        `its input schema has no JSON Schema (${(e as Error)?.message ?? String(e)}): pass \`inputSchema\`, the JSON Schema the model reads, beside it`,
      );
    }
  } else if (isZod3(input)) {
    try {
      schema = zod3ToJsonSchema(input);
    } catch (e) {
      if (!(e instanceof Zod3Unsupported)) throw e;
      throw cfg(
        `its zod input schema has a ${e.what} at ${e.at || "(root)"}, which JSON Schema cannot express: pass \`inputSchema\`, the JSON Schema the model reads, beside it`,
      );
    }
  } else {
    const vendor = String((input as StandardSchemaV1)["~standard"].vendor);
    throw cfg(
      `its input schema (${vendor}) validates but gives no JSON Schema: pass \`inputSchema\`, the JSON Schema the model reads, beside it`,
    );
  }
  // The dialect is the package's (draft 2020-12); some providers refuse the `$schema` annotation.
  const { $schema: _dialect, ...rest } = schema;
  return rest as Json;
}

/** The validator's output for `args` (`issues`: why they are invalid). */
async function checked(i: ToolInputs, args: unknown): Promise<{ value: unknown } | { issues: string }> {
  if (!i.check) return { value: args };
  const r = await i.check(args);
  return r.issues ? { issues: issuesText(r.issues) } : { value: r.value };
}

/** The arguments `needsApproval` gets: the validator's output when it answers at once, else the arguments. */
function checkedNow(i: ToolInputs, args: unknown): unknown {
  if (!i.check) return args;
  const r = i.check(args);
  return r && typeof (r as Promise<unknown>).then !== "function" && !(r as StandardSchemaV1.Result<unknown>).issues
    ? (r as StandardSchemaV1.SuccessResult<unknown>).value
    : args;
}

/** The low-level tool object the core calls: JSON in, the tool's value out. */
export function lowLevelTool(t: Tool): object {
  // Not an object: handed on as it is, for the core to refuse.
  if (t === null || typeof t !== "object") return t as unknown as object;
  const i = inputOf(t);
  const needs = t.needsApproval;
  // Other keys (a misspelt one) are handed on, for the core to refuse (STEADFAST_CONFIG_INVALID naming it).
  return {
    ...t,
    name: t.name,
    description: t.description,
    inputSchema: i.schema,
    needsApproval:
      typeof needs === "function" ? (argsJson: string) => Boolean(needs(checkedNow(i, JSON.parse(argsJson)))) : Boolean(needs),
    // Called by the core's gate after the JSON Schema: a reason string makes the call a `validation` result.
    checkArgs: i.check
      ? async (argsJson: string) => {
          const r = await checked(i, JSON.parse(argsJson));
          return "issues" in r ? r.issues : null;
        }
      : undefined,
    // Not a function: handed on as it is, for the core to refuse (STEADFAST_CONFIG_INVALID).
    execute:
      typeof t.execute === "function"
        ? async (argsJson: string, ctxJson: string) => {
            // The gate checked these arguments; a hook's rewrite may not pass (an error result the model reads).
            const r = await checked(i, JSON.parse(argsJson));
            if ("issues" in r) {
              const e = new Error(`invalid arguments for '${t.name}': ${r.issues}`);
              e.name = "ValidationError";
              throw e;
            }
            return t.execute(r.value, toolContext(ctxJson));
          }
        : t.execute,
    sideEffecting: t.sideEffecting,
    reconcile:
      typeof t.reconcile === "function"
        ? async (argsJson: string, ctxJson: string) => {
            const r = await checked(i, JSON.parse(argsJson));
            return t.reconcile?.("value" in r ? r.value : JSON.parse(argsJson), JSON.parse(ctxJson) as { idempotencyKey: string });
          }
        : t.reconcile,
  };
}
