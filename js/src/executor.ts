// `steadfast/executor`: the documents' executor API — `AgentExecutor.execute`, `AgentExecutor.fork` and
// `resumeAfterApproval` — for code that owns the wiring (provider, tool registry, stores) call by call. Each is
// `createAgent` over the given parts and one call of it, so the behaviour is the agent's: `execute` is
// `agent.send`, `fork` is `agent.fork`, `resumeAfterApproval` is `agent.approvals.resolve`.
import { createAgent, type Agent, type AgentOptions, type Decision } from "./agent.js";
import { SteadfastError } from "./errors.js";
import { knownKeys } from "./options.js";
import type { Hook } from "./hooks.js";
import type { Model } from "./model.js";
import { HANDLE, type Checkpoints, type Store } from "./stores.js";
import type { Tool } from "./tools.js";
import type { AbortSignalLike, ForkOptions, ForkResult, Input, RunEvent, RunResult } from "./types.js";

/** What an agent is, apart from its model and store: instructions, tools, hooks and the agent options. */
export type AgentDefinition = Omit<AgentOptions, "model" | "provider" | "store" | "clock"> & {
  /** A name for the agent (not part of its fingerprint). */
  name?: string;
};

/** The tools an executor call may run (`new ToolRegistry([...])`, or a plain array). */
export class ToolRegistry {
  readonly #tools: Tool[] = [];

  constructor(tools: Tool[] = []) {
    for (const t of tools) this.register(t);
  }

  /** Adds a tool (a second tool of one name is refused with `STEADFAST_CONFIG_INVALID`). */
  register(tool: Tool): this {
    if (this.#tools.some((t) => t.name === tool?.name)) {
      throw new SteadfastError("STEADFAST_CONFIG_INVALID", `the tool registry already has a tool named ${JSON.stringify(tool?.name)}`);
    }
    this.#tools.push(tool);
    return this;
  }

  /** The registered tools, in registration order. */
  list(): Tool[] {
    return this.#tools.slice();
  }
}

/** A store the executor takes: a store, or its `checkpoints` (`memoryStore().checkpoints`, `LocalStorageCheckpointStore`). */
export type CheckpointStore = Store | Checkpoints;

/** Options of `AgentExecutor.execute`. */
export interface ExecuteOptions {
  agent: AgentDefinition;
  input: Input;
  provider: Model;
  /** The tools (added to `agent.tools`). */
  toolRegistry?: ToolRegistry | Tool[];
  /** The run's id: a new run, an unfinished one (resumed; `input: []` only resumes) or a finished one (continued). */
  sessionId: string;
  /** Where the run is checkpointed (without one, a private in-memory store: nothing survives the process). */
  checkpointStore?: CheckpointStore;
  /** Approvals live with their run: when given, the same store as `checkpointStore`. */
  approvalStore?: CheckpointStore;
  /** Called with each event as it happens. */
  onEvent?: (event: RunEvent) => void;
  /** Aborts the run (it stays resumable). */
  signal?: AbortSignalLike;
}

/** Options of `AgentExecutor.fork`: `agent.fork`'s, with the run's id and store. */
export interface ExecutorForkOptions {
  sessionId: string;
  fromStep: number;
  checkpointStore: CheckpointStore;
  patch?: ForkOptions["patch"];
  /** The new run's id (default `<sessionId>.fork-<n>`, the first free n). */
  newSessionId?: string;
}

const handleOf = (store: CheckpointStore | undefined) =>
  store !== null && typeof store === "object" && HANDLE in store ? store[HANDLE] : undefined;

/** The one store of a call: `checkpointStore`, which `approvalStore` must be if given. */
function storeOf(checkpointStore: CheckpointStore | undefined, approvalStore: CheckpointStore | undefined): CheckpointStore | "memory" {
  if (checkpointStore !== undefined && handleOf(checkpointStore) === undefined) {
    throw new SteadfastError("STEADFAST_CONFIG_INVALID", "checkpointStore must be a store or its checkpoints (memoryStore(), fileStore(dir), LocalStorageCheckpointStore, kvStore(ns))");
  }
  if (approvalStore !== undefined) {
    const a = handleOf(approvalStore);
    if (a === undefined) {
      throw new SteadfastError("STEADFAST_CONFIG_INVALID", "approvalStore must be a store or its checkpoints");
    }
    if (checkpointStore === undefined) return approvalStore;
    if (a !== handleOf(checkpointStore)) {
      throw new SteadfastError(
        "STEADFAST_CONFIG_INVALID",
        "approvalStore and checkpointStore must be one store: an approval lives with its run (pass the same store, or only checkpointStore)",
      );
    }
  }
  return checkpointStore ?? "memory";
}

const toolsOf = (registry: ToolRegistry | Tool[] | undefined): Tool[] =>
  registry === undefined ? [] : Array.isArray(registry) ? registry : registry instanceof ToolRegistry ? registry.list() : (registry as Tool[]);

function agentOf(definition: AgentDefinition | undefined, provider: Model, registry: ToolRegistry | Tool[] | undefined, store: CheckpointStore | "memory"): Agent {
  const { name: _name, tools = [], ...rest } = (definition ?? {}) as AgentDefinition;
  return createAgent({ ...rest, provider, tools: [...(Array.isArray(tools) ? tools : []), ...toolsOf(registry)], store });
}

/** The executor: one agent call per method, over explicitly given parts. */
export const AgentExecutor = {
  /** Runs `input` on run `sessionId` (`agent.send`); throws `SessionAwaitingApprovalError` while it waits. */
  execute(options: ExecuteOptions): Promise<RunResult> {
    knownKeys(options, "AgentExecutor.execute options");
    const o = (options ?? {}) as ExecuteOptions;
    const agent = agentOf(o.agent, o.provider, o.toolRegistry, storeOf(o.checkpointStore, o.approvalStore));
    return agent.send(o.input, { sessionId: o.sessionId, onEvent: o.onEvent, signal: o.signal });
  },

  /** A new run from a step of run `sessionId`'s history (`agent.fork`): `{sessionId, runId, step, checkpoint}`. */
  fork(options: ExecutorForkOptions): Promise<ForkResult> {
    knownKeys(options, "AgentExecutor.fork options");
    const o = (options ?? {}) as ExecutorForkOptions;
    // Forking runs no model: an agent without one would be refused, so a model that is never called.
    const idle: Model = {
      id: "fork",
      generate: () => Promise.reject(new SteadfastError("STEADFAST_INTERNAL", "a fork calls no model")),
    };
    const agent = agentOf({}, idle, undefined, storeOf(o.checkpointStore, undefined));
    return agent.fork(o.sessionId, { fromStep: o.fromStep, patch: o.patch, newId: o.newSessionId });
  },
};

/**
 * Decides an approval (or answers a question: `{id, answer}`) and, when it was the last of its pause, resumes the
 * run (`agent.approvals.resolve`):
 * `options.agent` is the agent definition (instructions, hooks, options; default none), `toolRegistry` its tools.
 */
export function resumeAfterApproval(
  decision: Decision,
  approvalStore: CheckpointStore,
  toolRegistry: ToolRegistry | Tool[] | undefined,
  provider: Model,
  options: { agent?: AgentDefinition; onEvent?: (event: RunEvent) => void; hooks?: Hook[] } = {},
  checkpointStore?: CheckpointStore,
): Promise<RunResult> {
  knownKeys(options, "resumeAfterApproval options");
  const o = options ?? {};
  const definition = { ...(o.agent ?? {}), ...(o.hooks ? { hooks: o.hooks } : {}) };
  const agent = agentOf(definition, provider, toolRegistry, storeOf(checkpointStore, approvalStore));
  return agent.approvals.resolve(decision, { onEvent: o.onEvent });
}
