// steadfast: durable, self-healing LLM agent runs. The typed facade over the wasm core (via low_level.ts).
//
// Every data type the core sends or reads is generated from its Rust definition by ts-rs (src/generated/,
// scripts/gen-types.sh; cargo feature `ts`; the test command fails when they are stale) and re-exported here:
// the Rust 64-bit integers are `number` (the JSON the core sends has numbers) and fields the core leaves out
// when empty are optional. Option types whose every field has a default are the generated type made
// `Partial`. Written in TS: the facade's own shapes, which carry JS functions (agent options, tools, hooks,
// the model interface, callbacks), and two inputs that the core reads more leniently than its own types
// (`Input`, `ModelResponse`).
import { newAgent, newKvStore, newMemoryStore, type JsAgent, type JsStore } from "./low_level.js";
import type { ApprovalRecord } from "./generated/ApprovalRecord.js";
import type { ApprovalStatus } from "./generated/ApprovalStatus.js";
import type { Checkpoint } from "./generated/Checkpoint.js";
import type { Comparison } from "./generated/Comparison.js";
import type { Delivery as GeneratedDelivery } from "./generated/Delivery.js";
import type { Drift } from "./generated/Drift.js";
import type { ErrorCode } from "./generated/ErrorCode.js";
import type { ErrorInfo } from "./generated/ErrorInfo.js";
import type { Event } from "./generated/Event.js";
import type { EventEnvelope } from "./generated/EventEnvelope.js";
import type { Fingerprint } from "./generated/Fingerprint.js";
import type { FinishReason } from "./generated/FinishReason.js";
import type { ForkOptions } from "./generated/ForkOptions.js";
import type { ForkResult } from "./generated/ForkResult.js";
import type { HistoryEntry } from "./generated/HistoryEntry.js";
import type { JournalOptions } from "./generated/JournalOptions.js";
import type { LeaseOptions } from "./generated/LeaseOptions.js";
import type { Message } from "./generated/Message.js";
import type { ModelChange } from "./generated/ModelChange.js";
import type { ModelRequest } from "./generated/ModelRequest.js";
import type { PendingRun } from "./generated/PendingRun.js";
import type { ProgressGuardOptions as GeneratedProgressGuardOptions } from "./generated/ProgressGuardOptions.js";
import type { ResultKind } from "./generated/ResultKind.js";
import type { RetryPolicy } from "./generated/RetryPolicy.js";
import type { RunResult as GeneratedRunResult } from "./generated/RunResult.js";
import type { RunStats } from "./generated/RunStats.js";
import type { RunStatus } from "./generated/RunStatus.js";
import type { SweepOptions as GeneratedSweepOptions } from "./generated/SweepOptions.js";
import type { SweepReport } from "./generated/SweepReport.js";
import type { ToolCall } from "./generated/ToolCall.js";
import type { ToolContext } from "./generated/ToolContext.js";
import type { ToolResult } from "./generated/ToolResult.js";
import type { ToolSpec } from "./generated/ToolSpec.js";
import type { TrajectoryStep } from "./generated/TrajectoryStep.js";
import type { Usage } from "./generated/Usage.js";
import type { JsonValue } from "./generated/serde_json/JsonValue.js";

/** Generated from the Rust types (src/generated/). */
export type {
  ApprovalRecord,
  ApprovalStatus,
  Checkpoint,
  Comparison,
  Drift,
  ErrorCode,
  ErrorInfo,
  Event,
  EventEnvelope,
  Fingerprint,
  FinishReason,
  ForkOptions,
  ForkResult,
  HistoryEntry,
  Message,
  ModelChange,
  ModelRequest,
  PendingRun,
  ResultKind,
  RunStats,
  RunStatus,
  SweepReport,
  ToolCall,
  ToolContext,
  ToolResult,
  ToolSpec,
  TrajectoryStep,
  Usage,
};

// ------------------------------------------------------------------------------------------------------------
// Data types: the generated ones, completed.

/** Any JSON value (the generated `serde_json::Value`). */
export type Json = JsonValue;

/**
 * What `send` accepts: text (one user message) or system/user messages (the `input` of the send document,
 * read by the core's `parse_input`: stored history without tool calls may be re-sent too).
 */
export type Input = string | Array<{ role: "system" | "user"; content: string }>;

/**
 * A model's answer. A tool call without an id gets one. Written in TS: the core reads it more leniently than its
 * own `ModelResponse` (every field optional, ids generated).
 */
export interface ModelResponse {
  text?: string;
  toolCalls?: Array<{ id?: string; name: string; args?: Json }>;
  usage?: Partial<Usage>;
  stopReason?: string;
}

/**
 * A model provider: one attempt per call (the runtime retries). Reject with an error carrying `status` (HTTP
 * status) and optionally `retryAfterMs` for provider failures: 429/5xx are retried, 401/403/400 are not. Any
 * other rejection is a network error (retried).
 */
export interface Model {
  /** Model id (part of the agent fingerprint). */
  id: string;
  generate(request: ModelRequest): Promise<ModelResponse>;
}

/** A tool definition (see `defineTool`). */
export interface Tool<A = any> {
  name: string;
  description: string;
  /** JSON Schema of the arguments, validated before the call runs. */
  inputSchema: Json;
  /** Whether a call needs a person's approval first. */
  needsApproval?: boolean | ((args: A) => boolean);
  /**
   * Runs the call. A string is the text the model reads; other values are serialised as JSON. A thrown error
   * becomes an error result (`"<name>: <message>"`) the model reads, unless it is a `PropagatedToolError` (or
   * has `propagate: true`): then the run is rejected and stays resumable.
   * Caution: a call may run again on resume (after a crash): make it idempotent with `ctx.idempotencyKey`.
   */
  execute(args: A, ctx: ToolContext): unknown | Promise<unknown>;
}

/** How an execution ended (the generated `RunResult`, plus `events` when `events: true` was asked for). */
export type RunResult = GeneratedRunResult & {
  /** The run's events, when `events: true` was asked for. */
  events?: RunEvent[];
};

/** A run event (`{v, seq, runId, at, type, …}`): the generated `EventEnvelope`. */
export type RunEvent = EventEnvelope;

/** One recovery sweep tick's settings (every field optional: the generated `SweepOptions` has defaults). */
export type SweepOptions = Partial<GeneratedSweepOptions>;

/** `recover` options: the sweep's settings, the loop's period and its callbacks. */
export interface RecoverOptions extends SweepOptions {
  /** Time between ticks in ms (default: `intervalMs`, else 30 s). */
  everyMs?: number;
  /** A run the sweep finished (for a diagnosis fork: the original's id). */
  onRecovered?: (runId: string) => void;
  /** A run reached the attempt cap (reported once). */
  onQuarantined?: (runId: string) => void;
  /** The provider-outage breaker opened (`true`) or closed (`false`). */
  onOutage?: (active: boolean) => void;
  /** A tick failed, or a callback threw (the loop goes on). */
  onError?: (error: unknown) => void;
  /** Aborting it stops the loop. */
  signal?: AbortSignal;
}

/** A running recovery loop. */
export interface Recovery {
  /** Stops the loop; resolves once the tick in flight (if any) settled. */
  stop(): Promise<void>;
  /** Resolves once the loop stopped. */
  done: Promise<void>;
}

/**
 * What `runOnce` did with a delivery (the generated `Delivery`, the shape `POST /deliveries/{id}` answers with,
 * plus `events` when `events: true` was asked for). `runId` is the run derived from the delivery id (`dlv-<id>`,
 * or `dlv-` and a hash when the id is not a valid run id). `acknowledged`: the run was already finished,
 * nothing ran (acknowledge the delivery); `awaiting-approval`: the run waits on a person, nothing ran (leave the
 * delivery); `ran`: the run was started (a new delivery) or resumed (an unfinished one).
 */
export type Delivery = GeneratedDelivery & {
  /** The run's events, when `events: true` was asked for. */
  events?: RunEvent[];
};

// ------------------------------------------------------------------------------------------------------------
// Errors.

/** Every failure of the runtime: a stable `STEADFAST_*` code and whether the same call may succeed later. */
export class SteadfastError extends Error {
  readonly code: string;
  readonly retryable: boolean;
  readonly runId?: string;
  readonly approvalId?: string;
  readonly status?: number;
  readonly retryAfterMs?: number;
  readonly details?: unknown;

  constructor(
    code: string,
    message: string,
    fields: {
      retryable?: boolean;
      runId?: string;
      approvalId?: string;
      status?: number;
      retryAfterMs?: number;
      details?: unknown;
      cause?: unknown;
    } = {},
  ) {
    super(message, fields.cause === undefined ? undefined : { cause: fields.cause });
    this.name = "SteadfastError";
    this.code = code;
    this.retryable = fields.retryable ?? false;
    if (fields.runId !== undefined) this.runId = fields.runId;
    if (fields.approvalId !== undefined) this.approvalId = fields.approvalId;
    if (fields.status !== undefined) this.status = fields.status;
    if (fields.retryAfterMs !== undefined) this.retryAfterMs = fields.retryAfterMs;
    if (fields.details !== undefined) this.details = fields.details;
  }
}

/** The run waits on an approval: resolve `approvalId` before sending to `sessionId` again. */
export class SessionAwaitingApprovalError extends SteadfastError {
  readonly sessionId: string;
  declare readonly approvalId: string;

  constructor(message: string, sessionId: string, approvalId: string, cause?: unknown) {
    super("STEADFAST_SESSION_AWAITING_APPROVAL", message, { runId: sessionId, approvalId, cause });
    this.name = "SessionAwaitingApprovalError";
    this.sessionId = sessionId;
  }
}

/** Throw this from a tool to reject the run (it stays resumable) instead of giving the model an error result. */
export class PropagatedToolError extends Error {
  readonly propagate = true;
  readonly retryable: boolean;

  constructor(message: string, options: { retryable?: boolean; cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = "PropagatedToolError";
    this.retryable = options.retryable ?? true;
  }
}

function wrapError(e: unknown): unknown {
  if (e instanceof SteadfastError) return e;
  const err = e as { code?: unknown; message?: unknown } | null;
  if (!err || typeof err.code !== "string" || !err.code.startsWith("STEADFAST_")) return e;
  const f = e as { retryable?: boolean; runId?: string; approvalId?: string; status?: number; retryAfterMs?: number; details?: unknown };
  const message = String(err.message ?? err.code);
  if (err.code === "STEADFAST_SESSION_AWAITING_APPROVAL" && f.runId !== undefined && f.approvalId !== undefined) {
    return new SessionAwaitingApprovalError(message, f.runId, f.approvalId, e);
  }
  return new SteadfastError(err.code, message, { ...f, cause: e });
}

async function call<T>(p: () => Promise<string>): Promise<T> {
  let json: string;
  try {
    json = await p();
  } catch (e) {
    throw wrapError(e);
  }
  return JSON.parse(json) as T;
}

function sync<T>(f: () => T): T {
  try {
    return f();
  } catch (e) {
    throw wrapError(e);
  }
}

// ------------------------------------------------------------------------------------------------------------
// Stores.

const HANDLE = Symbol("steadfast.store");

/** A run store handle; agents created with the same handle share its runs and approvals. */
export interface Store {
  readonly kind: "memory" | "kv";
  readonly [HANDLE]: JsStore;
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
export type KvStoreOptions = Partial<Pick<JournalOptions, "prefix" | "historyLimit" | "settleMs">>;

/** A new in-memory store (strongly consistent; lives as long as the handle). Share it between agents. */
export function memoryStore(): Store {
  return { kind: "memory", [HANDLE]: sync(() => newMemoryStore()) };
}

/** A durable store over a Workers KV namespace binding (`kvStore(env.RUNS)`). */
export function kvStore(namespace: KVNamespaceLike, options: KvStoreOptions = {}): Store {
  return { kind: "kv", [HANDLE]: sync(() => newKvStore(namespace, JSON.stringify(options))) };
}

function storeHandle(store: Store | "memory" | KVNamespaceLike | undefined): JsStore {
  if (store === undefined) {
    throw new SteadfastError("STEADFAST_CONFIG_INVALID", "an agent needs a store: memoryStore() or kvStore(env.BINDING)");
  }
  if (store === "memory") return memoryStore()[HANDLE];
  if (typeof store === "object" && HANDLE in store) return (store as Store)[HANDLE];
  return kvStore(store as KVNamespaceLike)[HANDLE];
}

// ------------------------------------------------------------------------------------------------------------
// Tools and models.

/** Defines a tool (identity, for typing). */
export function defineTool<A = any>(tool: Tool<A>): Tool<A> {
  return tool;
}

/** A scripted turn of `mockModel`: final text, tool calls, or a provider error. */
export type MockTurn =
  | string
  | { text?: string; toolCalls: Array<{ name: string; args?: Json }>; usage?: Partial<Usage> }
  | { error: { status: number; retryAfterMs?: number; message?: string } };

/** A scripted model with a record of its calls. */
export interface MockModel extends Model {
  /** Every request so far. */
  readonly calls: ModelRequest[];
}

/** Options of `mockModel`. */
export interface MockModelOptions {
  /** Model id (default `"mock"`). */
  id?: string;
  /**
   * `"sequential"` (default): call n gets `script[n]`, shared by every agent using this model.
   * `"by-turn"`: a call gets `script[k]`, k = the assistant messages already in the transcript.
   */
  mode?: "sequential" | "by-turn";
}

/** An HTTP-shaped provider error, as `mockModel` throws it. */
export class ProviderHttpError extends Error {
  readonly status: number;
  readonly retryAfterMs?: number;

  constructor(status: number, message: string, retryAfterMs?: number) {
    super(message);
    this.name = "ProviderHttpError";
    this.status = status;
    if (retryAfterMs !== undefined) this.retryAfterMs = retryAfterMs;
  }
}

/** A model that answers from a script (offline tests and demos). */
export function mockModel(script: MockTurn[], options: MockModelOptions = {}): MockModel {
  const calls: ModelRequest[] = [];
  const mode = options.mode ?? "sequential";
  return {
    id: options.id ?? "mock",
    calls,
    async generate(request: ModelRequest): Promise<ModelResponse> {
      const index = mode === "sequential" ? calls.length : request.messages.filter((m) => m.role === "assistant").length;
      calls.push(request);
      const turn = script[index];
      if (turn === undefined) {
        throw new SteadfastError(
          "STEADFAST_MODEL_SCRIPT_EXHAUSTED",
          `mock model script ran out: call #${calls.length} (step ${request.step}) wants turn ${index + 1} but the script has ${script.length}`,
          { runId: request.runId },
        );
      }
      if (typeof turn === "string") return { text: turn, usage: { inputTokens: 10, outputTokens: 5 }, stopReason: "stop" };
      if ("error" in turn) {
        const { status, retryAfterMs, message } = turn.error;
        throw new ProviderHttpError(status, message ?? `mock provider error ${status}`, retryAfterMs);
      }
      return {
        text: turn.text ?? "",
        toolCalls: turn.toolCalls.map((c, i) => ({ id: `call_${index}_${i}`, name: c.name, args: c.args ?? {} })),
        usage: { inputTokens: 10, outputTokens: 5, ...turn.usage },
        stopReason: "tool_calls",
      };
    },
  };
}

// ------------------------------------------------------------------------------------------------------------
// The agent.

// ------------------------------------------------------------------------------------------------------------
// Self-healing hooks.

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

function lowLevelHook(h: Hook): object {
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

// ------------------------------------------------------------------------------------------------------------
// The agent (options).

/** What an agent is made of. */
export interface AgentOptions {
  model: Model;
  tools?: Tool[];
  /** Self-healing hooks (`progressGuard()`, `outputCheck(name, fn)`), run in order around tool calls. */
  hooks?: Hook[];
  /** System prompt of new runs. */
  instructions?: string;
  /** `memoryStore()`, `kvStore(env.BINDING)`, `"memory"` (a new private store) or a KV namespace. */
  store: Store | "memory" | KVNamespaceLike;
  /** What a changed agent does on resume (default `"warn"`). */
  onAgentDrift?: "warn" | "error" | "ignore";
  /** Model turns per run (default 10). */
  maxSteps?: number;
  /** Tool calls of one turn run at once (default 8). */
  toolConcurrency?: number;
  /** Stop after this many identical failing tool turns in a row (default 4; 0 = off). */
  loopWindow?: number;
  /** Longest tool result kept, in bytes (default 262144); a longer one is cut and ends with a marker. */
  maxToolResultBytes?: number;
  /** The model-call retry policy (the only retry layer). */
  retry?: Partial<RetryPolicy>;
  /** Run leases (ms). */
  lease?: Partial<LeaseOptions>;
}

/** Options of `send`. */
export interface SendOptions {
  /** The run (session) id. */
  sessionId: string;
  /** Business state a new run starts with. */
  businessState?: Json;
  /** Return the run's events in `result.events`. */
  events?: boolean;
  /** Called with each event as it happens (a throwing callback is ignored). */
  onEvent?: (event: RunEvent) => void;
  /** Aborts the run: it resolves `in-progress` with finishReason `"aborted"` (resumable); calls in flight get `cancelled` results. */
  signal?: AbortSignal;
}

/** Options of `runOnce`. */
export type RunOnceOptions = Omit<SendOptions, "sessionId">;

/** Options of `resume` and `approvals.resolve`. */
export interface ResumeOptions {
  /** Return the run's events in `result.events` (resume only). */
  events?: boolean;
  /** Called with each event as it happens. */
  onEvent?: (event: RunEvent) => void;
  /** Aborts the run (resume only). */
  signal?: AbortSignal;
}

/** A durable agent. */
export interface Agent {
  /** Starts, resumes or continues run `sessionId`. Throws `SessionAwaitingApprovalError` while it waits. */
  send(input: Input, options: SendOptions): Promise<RunResult>;
  /**
   * `send`, as the run's events (`run.start`, `step`, `tool.start`, `tool.done`, …, `run.done` or `error`),
   * yielded as they happen. A failed execution throws after its events; a refused one throws at once.
   */
  stream(input: Input, options: Omit<SendOptions, "events" | "onEvent">): AsyncIterable<RunEvent>;
  /**
   * Runs a delivered job (a queue message, a webhook) once: the run id is derived from `deliveryId`. A finished
   * run is acknowledged without a model call (a redelivery), a run waiting on a person is left, an unfinished
   * run is resumed, and only a new delivery sends `input`.
   */
  runOnce(deliveryId: string, input: Input, options?: RunOnceOptions): Promise<Delivery>;
  /** Finishes an unfinished run; `null` when there is nothing to do. */
  resume(sessionId: string, options?: ResumeOptions): Promise<RunResult | null>;
  /** Every unfinished run. */
  pending(): Promise<PendingRun[]>;
  /** One recovery sweep tick (call it from a cron trigger). */
  sweep(options?: SweepOptions): Promise<SweepReport>;
  /**
   * Runs sweep ticks every `everyMs` until stopped (for long-lived hosts such as Node; on Workers call `sweep`
   * from the `scheduled` handler instead). A throwing callback does not stop the loop.
   */
  recover(options?: RecoverOptions): Recovery;
  approvals: {
    /** Pending approvals, oldest first. */
    list(): Promise<ApprovalRecord[]>;
    /** Decides an approval; the run resumes when it was the last of its pause. */
    resolve(
      decision: { id: string; approved: boolean; note?: string },
      options?: Omit<ResumeOptions, "events" | "signal">,
    ): Promise<RunResult>;
  };
  /** A new run from a step of another run's history (resume it to run it). */
  fork(sessionId: string, options: ForkOptions): Promise<ForkResult>;
  /** Compares two stored runs. */
  compareTrajectories(a: string, b: string): Promise<Comparison>;
  /** Deletes a run; a later send starts over. */
  delete(sessionId: string): Promise<void>;
  /** The run's checkpoint, or `null`. */
  load(sessionId: string): Promise<Checkpoint | null>;
  /** Past states of a run, newest first. */
  history(sessionId: string, limit?: number): Promise<HistoryEntry[]>;
  /** The agent's fingerprint (model, tools, instructions). */
  readonly fingerprint: Fingerprint;
}

function lowLevelTool(t: Tool): object {
  const needs = t.needsApproval;
  return {
    name: t.name,
    description: t.description,
    inputSchema: t.inputSchema,
    needsApproval: typeof needs === "function" ? (argsJson: string) => Boolean(needs(JSON.parse(argsJson))) : Boolean(needs),
    execute: async (argsJson: string, ctxJson: string) => t.execute(JSON.parse(argsJson), JSON.parse(ctxJson) as ToolContext),
  };
}

/** The send document the core reads (`{input, businessState?}`, the HTTP API's body of `POST /runs/{id}`). */
function sendRequest(input: Input, businessState: Json | undefined): string {
  return JSON.stringify({ input, businessState });
}

function eventCallback(onEvent: ((e: RunEvent) => void) | undefined): ((json: string) => void) | null {
  return onEvent ? (json: string) => onEvent(JSON.parse(json) as RunEvent) : null;
}

/** The events of an execution as an async iterable: yielded as they arrive, then the execution's error. */
function streamOf(run: (onEvent: (e: RunEvent) => void) => Promise<unknown>): AsyncIterable<RunEvent> {
  return {
    [Symbol.asyncIterator]: async function* () {
      const queue: RunEvent[] = [];
      let wake: (() => void) | undefined;
      let settled = false;
      let failure: { error: unknown } | undefined;
      run((e) => {
        queue.push(e);
        wake?.();
      }).then(
        () => {
          settled = true;
          wake?.();
        },
        (error: unknown) => {
          settled = true;
          failure = { error };
          wake?.();
        },
      );
      for (;;) {
        while (queue.length > 0) yield queue.shift() as RunEvent;
        if (settled) break;
        await new Promise<void>((resolve) => (wake = resolve));
        wake = undefined;
      }
      if (failure) throw failure.error;
    },
  };
}

/** The `recover` loop: sweep ticks until stopped, reporting what each tick did through the callbacks. */
function recoveryLoop(sweep: (o: SweepOptions) => Promise<SweepReport>, opts: RecoverOptions): Recovery {
  const { everyMs, onRecovered, onQuarantined, onOutage, onError, signal, ...sweepOptions } = opts;
  const every = everyMs ?? sweepOptions.intervalMs ?? 30_000;
  let stopped = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  let wake: (() => void) | undefined;
  let outage = false;
  const report = (e: unknown) => {
    try {
      onError?.(e);
    } catch {
      // An error handler that throws is ignored: the loop goes on.
    }
  };
  const safely = <A extends unknown[]>(f: ((...a: A) => void) | undefined, ...args: A) => {
    try {
      f?.(...args);
    } catch (e) {
      report(e);
    }
  };
  const halt = () => {
    stopped = true;
    if (timer !== undefined) clearTimeout(timer);
    wake?.();
  };
  signal?.addEventListener("abort", halt, { once: true });
  const done = (async () => {
    while (!stopped && !signal?.aborted) {
      try {
        const r = await sweep(sweepOptions);
        for (const id of r.recovered) safely(onRecovered, id);
        for (const id of r.quarantined) safely(onQuarantined, id);
        if (r.outage !== outage) {
          outage = r.outage;
          safely(onOutage, outage);
        }
      } catch (e) {
        report(e);
      }
      if (stopped || signal?.aborted) break;
      await new Promise<void>((resolve) => {
        wake = resolve;
        timer = setTimeout(resolve, every);
      });
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

/** Creates a durable agent. */
export function createAgent(options: AgentOptions): Agent {
  const { model, tools = [], hooks = [], store, ...rest } = options;
  const lowModel = {
    id: model.id,
    generate: async (requestJson: string) => JSON.stringify(await model.generate(JSON.parse(requestJson) as ModelRequest)),
  };
  const low: JsAgent = sync(() =>
    newAgent({ ...rest, model: lowModel, tools: tools.map(lowLevelTool), hooks: hooks.map(lowLevelHook) }, storeHandle(store)),
  );
  const fingerprint = JSON.parse(low.fingerprint()) as Fingerprint;
  const send = (input: Input, opts: SendOptions): Promise<RunResult> =>
    call(() =>
      low.send(
        opts.sessionId,
        sendRequest(input, opts.businessState),
        JSON.stringify({ events: opts.events ?? false }),
        eventCallback(opts.onEvent),
        opts.signal ?? null,
      ),
    );
  return {
    fingerprint,
    send,
    stream: (input, opts) => streamOf((onEvent) => send(input, { ...opts, onEvent })),
    resume: (id, opts = {}) =>
      call(() =>
        low.resume(id, JSON.stringify({ events: opts.events ?? false }), eventCallback(opts.onEvent), opts.signal ?? null),
      ),
    runOnce: (deliveryId, input, opts = {}) =>
      call(() =>
        low.runOnce(
          deliveryId,
          sendRequest(input, opts.businessState),
          JSON.stringify({ events: opts.events ?? false }),
          eventCallback(opts.onEvent),
          opts.signal ?? null,
        ),
      ),
    pending: () => call(() => low.pending()),
    sweep: (opts = {}) => call(() => low.sweep(JSON.stringify(opts))),
    recover: (opts = {}) => recoveryLoop((o) => call(() => low.sweep(JSON.stringify(o))), opts),
    approvals: {
      list: () => call(() => low.approvalsList()),
      resolve: ({ id, approved, note }, opts = {}) =>
        call(() => low.approvalsResolve(id, approved, note ?? null, eventCallback(opts.onEvent))),
    },
    fork: (id, opts) => call(() => low.fork(id, JSON.stringify(opts))),
    compareTrajectories: (a, b) => call(() => low.compare(a, b)),
    delete: async (id) => {
      await call(() => low.delete(id));
    },
    load: (id) => call(() => low.load(id)),
    history: (id, limit = 50) => call(() => low.history(id, limit)),
  };
}
