// The agent: `createAgent` and what it returns, over the wasm core (via low_level.ts).
import { newAgent, type JsAgent } from "./low_level.js";
import { call, SteadfastError, sync } from "./errors.js";
import { lowLevelHook, type Hook } from "./hooks.js";
import type { AgentOptions as GeneratedAgentOptions } from "./generated/AgentOptions.js";
import type { LeaseOptions } from "./generated/LeaseOptions.js";
import type { RetryPolicy } from "./generated/RetryPolicy.js";
import type { TokenLimits } from "./generated/TokenLimits.js";
import type { Model, ModelStream } from "./model.js";
import type { Clock } from "./clock.js";
import { recoveryLoop, type RecoverOptions, type Recovery, type SweepOptions } from "./recovery.js";
import { storeHandle, type Checkpoints, type KVNamespaceLike, type Store } from "./stores.js";
import { eventCallback, sendRequest, sessionHandle, type Session } from "./session.js";
import {
  fireSchedules,
  scheduleLoop,
  type FireScheduleOptions,
  type Schedule,
  type ScheduleOutcome,
  type Schedules,
  type StartSchedulesOptions,
} from "./schedules.js";
import { knownKeys } from "./options.js";
import { lowLevelTool, type Tool } from "./tools.js";
import { tracingParts, type TracingOptions } from "./tracing.js";
import type { Events } from "./waits.js";
import type {
  ApprovalRecord,
  Checkpoint,
  ChildRun,
  Comparison,
  Delivery,
  Fingerprint,
  ForkOptions,
  ForkResult,
  HistoryEntry,
  Input,
  Json,
  Message,
  MetricSample,
  ModelRequest,
  NothingToResume,
  PendingRun,
  RunEvent,
  RunResult,
  SweepReport,
  ToolSpec,
} from "./types.js";
import { forkWithSessionId, withSessionId, type AbortSignalLike } from "./types.js";

/**
 * What an agent is made of: the agent's options (the generated `AgentOptions`, the runtime's one definition:
 * limits, drift policy, retry, lease; each optional, its default in its comment there) and the parts only JS
 * gives (model, tools, hooks, instructions, store, clock).
 */
export type AgentOptions = AgentParts &
  Partial<Omit<GeneratedAgentOptions, "retry" | "lease" | "sessionBudget">> & {
    /** The model-call retry policy (the only retry layer). */
    retry?: Partial<RetryPolicy>;
    /** Run leases (ms). */
    lease?: Partial<LeaseOptions>;
    /** Token and cost limits of a whole conversation (every run of an id, every turn of a session); default none. */
    sessionBudget?: Partial<TokenLimits>;
  };

/** The parts of an agent only JS gives. */
export interface AgentParts {
  /** The model provider (one of `model` and `provider` is needed). */
  model?: Model;
  /** `model` under the name the documents use. */
  provider?: Model;
  /**
   * Fallback models, in order: when a model call's retries run out with a retryable failure, the next one gets
   * the same request. The chain shares the one retry policy (`maxAttempts` in all, the agent's model its share
   * first); the turn records the model that answered (`model` on its assistant message and `step` event), and a
   * `provider.fallback` event marks each step down.
   */
  fallbacks?: Model[];
  tools?: Tool[];
  /** Self-healing hooks (`progressGuard()`, `outputCheck(name, fn)`), run in order around tool calls. */
  hooks?: Hook[];
  /**
   * Traces: every execution's OpenTelemetry spans (GenAI conventions: `invoke_agent`, `chat`, `execute_tool`),
   * sent after the work that made them to an OTLP/HTTP endpoint (`{ exporter: { url, headers } }`) or an
   * OpenTelemetry JS `SpanExporter` (`{ exporter }`). Never delays or fails a run; see `agent.flushTraces()`.
   */
  tracing?: TracingOptions;
  /** System prompt of new runs. */
  instructions?: string;
  /**
   * `memoryStore()`, `kvStore(env.BINDING)`, `fileStore(dir)`, a store's `checkpoints` (`LocalStorageCheckpointStore`
   * too), `"memory"` (a new private store) or a KV namespace.
   */
  store: Store | Checkpoints | "memory" | KVNamespaceLike;
  /**
   * The clock and timer the runtime reads (model-call backoff, leases, the recovery sweep's backoff, quarantine
   * and outage breaker, the `recover` and `startSchedules` loops' ticks, the time `fireSchedule` fires for)
   * instead of the platform's: `testClock()` in tests.
   */
  clock?: Clock;
  /**
   * Sub-agents: the model sees a tool per sub-agent (`{task}`) whose call runs it on the task as a durable run of
   * its own (`<run>.sub-<name>-<key>`): resumed where it stopped after a crash, its final text the call's result and
   * its spend added to the lead's usage; its pauses pause the lead (resolve them through this agent). Each shares
   * this agent's store and clock.
   */
  subagents?: SubagentOptions[];
  /**
   * Handoffs: agents a run may hand its conversation to. Every agent of the team (this one, as `name`, and each
   * listed here) sees a `transfer_to_<name>` tool for each other one; the first such call of a turn moves the
   * conversation, in the same run, to that agent's model, tools and instructions (recorded, so a resumed run goes
   * on with the agent it was with). At most `maxHandoffs` (default 5) per run. Limits, policies, hooks, store and
   * clock stay this agent's.
   */
  handoffs?: HandoffOptions[];
  /** This agent's name in its handoff team (default `lead`): the others hand back to it with `transfer_to_<name>`. */
  name?: string;
}

/**
 * A sub-agent (`createAgent({ subagents })`): an agent of its own, named as its lead's tool. Its runs are
 * drift-checked under its lead's `onAgentDrift` (not an option of its own).
 */
export type SubagentOptions = Omit<AgentOptions, "store" | "clock" | "onAgentDrift"> & {
  /** The tool name its lead's model calls it by (letters, digits, `_`, `-`). */
  name: string;
  /** What it does, for the lead's model. */
  description: string;
  /**
   * Detached: the call answers at once (`{"started": "<child run id>", …}`) and the lead goes on; the recovery
   * sweep (`agent.sweep()`, a cron trigger, `recover`) runs the child, and its final text comes to the lead as a
   * queued message (`Sub-agent '<name>' finished (run …):` and the text), applied once — a lead that finished
   * meanwhile continues with it. Needs the lead's steering on (`steerPollMs`, on by default). Its spend stays its
   * own (`agent.children(id)`).
   */
  detached?: boolean;
  /** With `detached`: the child runs on when its lead is deleted (default: it is deleted with it). */
  abandon?: boolean;
};

/**
 * An agent of a handoff team (`createAgent({ handoffs })`): its model, tools, instructions and sub-agents; the run's
 * settings and hooks are its lead's, and the team is declared on the lead only.
 */
export type HandoffOptions = Pick<AgentParts, "model" | "provider" | "tools" | "instructions" | "subagents"> & {
  /** Its name in the team: the others hand the conversation to it with `transfer_to_<name>`. */
  name: string;
  /** What it does, for the other agents' models. */
  description: string;
};

/** Options of `send`. */
export interface SendOptions {
  /** The run (session) id. */
  sessionId: string;
  /** Business state a new run starts with. */
  businessState?: Json;
  /**
   * Steering: while another execution holds the run (or it waits on an approval), record the input as a message
   * for it instead of failing busy: that execution applies it at its next step boundary, once, in order. The
   * result is then the stored run with `queued: {messageId, applied: false}` (nothing ran here). When no
   * execution holds the run, this call applies it and runs, as a send (`applied: true`). Off (refused) when the
   * agent's `steerPollMs` is `null`.
   */
  queue?: boolean;
  /** With `queue`: when the message is applied, stop the current turn's calls that have not started (each gets a `not-run` result naming the message). */
  interrupt?: boolean;
  /** Return the run's events in `result.events`. */
  events?: boolean;
  /** Called with each event as it happens (a throwing callback is ignored). */
  onEvent?: (event: RunEvent) => void;
  /** Aborts the run: it resolves `in-progress` with finishReason `"aborted"` (resumable); calls in flight get `cancelled` results. */
  signal?: AbortSignalLike;
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
  signal?: AbortSignalLike;
}

/**
 * What `approvals.resolve` takes: an approval's decision (`approved`, `note`), or a question's `answer` (any
 * JSON value; `approved` defaults to `true` beside it, as `POST /approvals/{id}` reads it).
 */
export type Decision =
  | { id: string; approved: boolean; note?: string; answer?: Json }
  | { id: string; answer: Json; approved?: boolean; note?: string };

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
  /**
   * Finishes an unfinished run; `NothingToResume` (`{runId, resumed: false, reason: "nothing to resume"}`, the
   * answer of `POST /runs/{id}/resume`) when there is nothing to do. An id that names no run but a session
   * finishes that session's interrupted newest turn (as `session.resume()` does).
   */
  resume(sessionId: string, options?: ResumeOptions): Promise<RunResult | NothingToResume>;
  /**
   * Every unfinished run, with `sessionId` (the id `resume` takes: for a session's turn the session id, else
   * the run id) and `checkpointId` (the run id). `kind` says what the run is:
   * `"run"` (a `send`, a fork, a delivery), `"session"` (a session's turn `<id>.turn-<n>`; `ownerId` is the
   * session id, and `session.resume()` finishes it) or `"schedule"` (a schedule's fire; `ownerId` is the
   * schedule id).
   */
  pending(): Promise<PendingRun[]>;
  /**
   * The counters the seeds say to monitor, per agent (this one by its `name`, `lead` by default; its sub-agents
   * and handoff agents by theirs), counted in memory since the agent was made: model calls, retries, fallbacks,
   * breaker refusals, loop stops, budget stops, reconciliations (duplicates prevented) and quarantines — the
   * samples of `GET /metrics` (`steadfast_model_calls_total`, …).
   */
  metrics(): Promise<MetricSample[]>;
  /**
   * Resolves once the spans made so far have been sent (or dropped): hand it to a Worker's `ctx.waitUntil` so
   * they are sent after the reply. Resolves at once without `tracing`.
   */
  flushTraces(): Promise<void>;
  /**
   * The session `id` (1–128 characters of `A-Za-z0-9_-`; throws `STEADFAST_SESSION_ID_INVALID` at once
   * otherwise): a multi-turn conversation whose every turn is its own checkpointed run `<id>.turn-<n>`.
   */
  session(options: { id: string }): Session;
  /**
   * Fires every due schedule once (for a Worker's `scheduled` handler): a schedule's due fire is its latest
   * fire time at or before now (not before the store first saw the schedule); it is claimed in the store as
   * run `<id>.<fire time in s>.fire`, created only if absent, so replicas and overlapping invocations run each
   * fire once. Resolves one outcome per schedule, in order (`fired`, `already-fired`, `claimed`, `skipped`,
   * `idle` or `failed`: one schedule's failure does not stop the others). The schedules are checked on every
   * call: a bad one rejects with `STEADFAST_SESSION_ID_INVALID` (its id) or `STEADFAST_CONFIG_INVALID` (its
   * cron expression, input or fields; two with one id) before anything runs.
   */
  fireSchedule(schedules: Schedule[], options?: FireScheduleOptions): Promise<ScheduleOutcome[]>;
  /**
   * Runs `fireSchedule` every `intervalMs` (default 60 s; the first tick at once) until `stop()` or `signal`
   * (for long-lived hosts such as Node; on Workers call `fireSchedule` from the `scheduled` handler instead).
   * The schedules (and `intervalMs`) are checked once, here: a bad one throws synchronously
   * (`STEADFAST_SESSION_ID_INVALID`, `STEADFAST_CONFIG_INVALID`, `STEADFAST_INVALID_INPUT`). The loop ticks on the
   * agent's clock (`createAgent({ clock: testClock() })` in tests). A throwing callback is reported to `onError`
   * and never stops the loop, nor keeps `stop()` from stopping it.
   */
  startSchedules(schedules: Schedule[], options?: StartSchedulesOptions): Schedules;
  /** One recovery sweep tick (call it from a cron trigger). */
  sweep(options?: SweepOptions): Promise<SweepReport>;
  /**
   * Runs sweep ticks every `everyMs` (default `intervalMs`, else 30 s) until `stop()` or `signal` (for
   * long-lived hosts such as Node; on Workers call `sweep` from the `scheduled` handler instead):
   * `onRecovered(run, result)`, `onQuarantined(run)`, `onOutage(active)`, `onError(error, run?)`. A throwing
   * callback is reported to `onError` and never stops the loop, nor keeps `stop()` from stopping it.
   */
  recover(options?: RecoverOptions): Recovery;
  approvals: {
    /**
     * Pending records, oldest first: approvals, and tools' waits (`kind`: `"approval"`, `"question"` with its
     * `question` and `choices`, `"event"` with its `dueAt` deadline, `"timer"` with its `dueAt` time).
     */
    list(): Promise<ApprovalRecord[]>;
    /**
     * Decides an approval (`{id, approved, note?}`) or answers a question (`{id, answer, note?}`: `approved` is
     * `true` beside an answer; `approved: false` declines it); the run resumes when it was the last record of its
     * pause. An answer must be one of the question's `choices` when it offers any (`STEADFAST_INVALID_INPUT`);
     * an approval takes no answer, an event or a timer is not decided here (`STEADFAST_INVALID_INPUT`).
     */
    resolve(decision: Decision, options?: Omit<ResumeOptions, "events" | "signal">): Promise<RunResult>;
  };
  /** Deliveries to tools' event waits (see `Events.deliver`). */
  events: Events;
  /**
   * A new run from a step of another run's history: `{runId, sessionId, step, checkpoint}` (`sessionId` is the
   * new run's id, as `runId`); resume it to run it (`agent.resume(fork.sessionId)`).
   */
  fork(sessionId: string, options: ForkOptions): Promise<ForkResult>;
  /** Compares two stored runs by id (the standalone `compareTrajectories` takes checkpoints or transcripts). */
  compareTrajectories(a: string, b: string): Promise<Comparison>;
  /** Deletes a run, and the child runs its sub-agent calls started (at every depth); a later send starts over. */
  delete(sessionId: string): Promise<void>;
  /** The run's checkpoint, or `null`. */
  load(sessionId: string): Promise<Checkpoint | null>;
  /** Past states of a run, newest first. */
  history(sessionId: string, limit?: number): Promise<HistoryEntry[]>;
  /**
   * The child runs of a run's sub-agent calls, in call order: sub-agent, call, child run id, status and what it has
   * spent so far (`[]` for a run that does not exist).
   */
  children(sessionId: string): Promise<ChildRun[]>;
  /** The agent's fingerprint (model, tools, instructions). */
  readonly fingerprint: Fingerprint;
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

/** A model frame as the core sends it (src/runtime/feed.rs `ModelFrame`): the whole transcript or what is new. */
interface ModelFrame {
  runId: string;
  step: number;
  reset?: boolean;
  base: number;
  messages: Message[];
  tools?: ToolSpec[];
}

/** Freezes a message the model is handed (it is shared by every later request of the run). */
function freeze<T>(value: T): T {
  if (value !== null && typeof value === "object" && !Object.isFrozen(value)) {
    for (const v of Object.values(value)) freeze(v);
    Object.freeze(value);
  }
  return value;
}

/**
 * The low-level model over `model`: it holds each run's messages and applies the core's frames as told (a
 * reset starts the run over, anything else appends; see the holder's contract in src/runtime/feed.rs), then
 * asks `model` the whole request. It resolves `null` when it cannot apply a frame, and the core sends the
 * whole transcript again. Each request gets its own array; the messages are frozen (shared between requests).
 */
export function transcriptHolder(model: Model) {
  const runs = new Map<string, Message[]>();
  let tools: ToolSpec[] | undefined;
  // A model without a `generate` function is handed on without one, for the core to refuse.
  if (typeof model?.generate !== "function") return { id: model?.id, generate: model?.generate, release: () => undefined };
  return {
    id: model.id,
    generate: async (
      frameJson: string,
      onDelta?: (kind: string, text: string) => void,
      signal?: AbortSignalLike,
    ): Promise<string | null> => {
      const frame = JSON.parse(frameJson) as ModelFrame;
      if (frame.tools) tools = freeze(frame.tools);
      let held = runs.get(frame.runId);
      if (tools === undefined) return null;
      if (frame.reset) {
        held = [];
        runs.set(frame.runId, held);
      } else if (held === undefined || held.length !== frame.base) {
        return null;
      }
      for (const m of frame.messages) held.push(freeze(m));
      const request: ModelRequest = { runId: frame.runId, messages: held.slice(), tools, step: frame.step };
      const stream: ModelStream | undefined = onDelta
        ? { text: (delta) => onDelta("text", String(delta)), reasoning: (delta) => onDelta("reasoning", String(delta)) }
        : undefined;
      const answer = (await model.generate(request, stream, signal ?? undefined)) ?? null;
      try {
        return JSON.stringify(answer);
      } catch (e) {
        // A reply JSON cannot write (a cycle, a BigInt) is the model's wrong answer, not a failed call to retry.
        throw new SteadfastError(
          "STEADFAST_PROVIDER_INVALID_RESPONSE",
          `the model's answer cannot be serialised as JSON: ${(e as Error)?.message ?? String(e)}`,
        );
      }
    },
    release: (runId: string): void => {
      runs.delete(runId);
    },
  };
}

/** The documents' name for a model provider (`createAgent({ provider })`): the same interface as `Model`. */
export type LLMProvider = Model;

/** An agent's options object as the core takes it: its model, tools and hooks in their low-level form, and its
 * sub-agents' too (`at` names the object in errors). */
function lowLevelParts(options: Omit<AgentOptions, "store">, at: string): object {
  const { model: given, provider, fallbacks, tools = [], hooks = [], subagents, handoffs, ...rest } = options;
  const model = given ?? provider;
  if (model === undefined) {
    throw new SteadfastError("STEADFAST_CONFIG_INVALID", `${at}an agent needs a model: createAgent({ model }) (or \`provider\`)`);
  }
  return {
    ...rest,
    model: transcriptHolder(model),
    // Not arrays: handed on as they are, for the core to refuse (STEADFAST_CONFIG_INVALID).
    ...(fallbacks === undefined ? {} : { fallbacks: Array.isArray(fallbacks) ? fallbacks.map(transcriptHolder) : fallbacks }),
    tools: Array.isArray(tools) ? tools.map(lowLevelTool) : tools,
    hooks: Array.isArray(hooks) ? hooks.map(lowLevelHook) : hooks,
    ...(subagents === undefined
      ? {}
      : {
          subagents: Array.isArray(subagents)
            ? subagents.map((sub, i) =>
                typeof sub === "object" && sub !== null ? lowLevelParts(sub, `${at}subagents[${i}]: `) : sub,
              )
            : subagents,
        }),
    ...(handoffs === undefined
      ? {}
      : {
          handoffs: Array.isArray(handoffs)
            ? handoffs.map((member, i) =>
                typeof member === "object" && member !== null ? lowLevelParts(member, `${at}handoffs[${i}]: `) : member,
              )
            : handoffs,
        }),
  };
}

/** Creates a durable agent. */
export function createAgent(options: AgentOptions): Agent {
  const { store, tracing, ...parts } = options;
  const traced = sync(() => tracingParts(tracing));
  const lowOptions = { ...lowLevelParts(parts, ""), ...(traced ? { tracing: traced.low } : {}) };
  const low: JsAgent = sync(() => newAgent(lowOptions, storeHandle(store)));
  traced?.sender.attach(low);
  const fingerprint = JSON.parse(low.fingerprint()) as Fingerprint;
  // Arguments go to the core as they are (`opts ?? {}`: a missing options object is a missing session id there);
  // it answers a wrong one with a coded error.
  const send = (input: Input, given: SendOptions): Promise<RunResult> => {
    const opts = given ?? ({} as SendOptions);
    return call(() => {
      knownKeys(opts, "send options");
      return low.send(
        opts.sessionId,
        sendRequest(input, opts),
        JSON.stringify({ events: opts.events ?? false }),
        eventCallback(opts.onEvent),
        opts.signal ?? null,
      );
    });
  };
  return {
    fingerprint,
    send,
    stream: (input, opts) =>
      streamOf(async (onEvent) => {
        knownKeys(opts, "stream options");
        return send(input, { ...opts, onEvent });
      }),
    resume: (id, given) => {
      const opts = given ?? {};
      return call(() => {
        knownKeys(opts, "resume options");
        return low.resume(id, JSON.stringify({ events: opts.events ?? false }), eventCallback(opts.onEvent), opts.signal ?? null);
      });
    },
    runOnce: (deliveryId, input, given) => {
      const opts = given ?? {};
      return call(() => {
        knownKeys(opts, "runOnce options");
        return low.runOnce(
          deliveryId,
          sendRequest(input, opts),
          JSON.stringify({ events: opts.events ?? false }),
          eventCallback(opts.onEvent),
          opts.signal ?? null,
        );
      });
    },
    pending: async () => (await call<PendingRun[]>(() => low.pending())).map(withSessionId),
    metrics: () => call<MetricSample[]>(() => low.metrics()),
    flushTraces: () => traced?.sender.flush() ?? Promise.resolve(),
    session: (opts) => {
      knownKeys(opts, "session options");
      const id = (opts as { id?: unknown } | null | undefined)?.id;
      if (typeof id !== "string") {
        throw new SteadfastError("STEADFAST_SESSION_ID_INVALID", "agent.session({ id }) needs a string id");
      }
      sync(() => low.sessionCheck(id));
      return sessionHandle(low, id);
    },
    fireSchedule: (schedules, opts) => fireSchedules(low, schedules, opts),
    startSchedules: (schedules, opts) => scheduleLoop(low, schedules, opts),
    sweep: (opts) => call(() => low.sweep(JSON.stringify(opts ?? {}))),
    recover: (opts) =>
      recoveryLoop((o, every, listener, signal) => low.recover(o, every ?? undefined, listener, signal), opts ?? {}),
    approvals: {
      list: () => call(() => low.approvalsList()),
      resolve: (decision, opts) =>
        call(() => {
          knownKeys(decision, "approvals.resolve decision");
          knownKeys(opts, "approvals.resolve options");
          const d = decision as Partial<Decision> | undefined;
          return low.approvalsResolve(d?.id, d?.approved, d?.note, d?.answer, eventCallback(opts?.onEvent));
        }),
    },
    events: {
      deliver: (token, payload, opts) =>
        call(() => {
          knownKeys(opts, "events.deliver options");
          return low.eventsDeliver(token, payload, eventCallback(opts?.onEvent));
        }),
    },
    fork: async (id, opts) => forkWithSessionId(await call(() => low.fork(id, JSON.stringify(opts ?? null)))),
    compareTrajectories: (a, b) => call(() => low.compare(a, b)),
    delete: async (id) => {
      await call(() => low.delete(id));
    },
    load: (id) => call(() => low.load(id)),
    history: (id, limit = 50) => call(() => low.history(id, limit)),
    children: (id) => call(() => low.children(id)),
  };
}
