// Compiled (noEmit) by scripts/test.sh and by the packaging test against the installed tarball: a consumer's
// view of the published types, under `skipLibCheck: false` with `lib: ["ES2022"]` and no ambient types (no DOM,
// no Node, no `esnext.disposable`): so it uses no global beyond ES2022.
import {
  compareTrajectories,
  defineHook,
  PropagatingToolError,
  type HookContext,
  testClock,
  type Checkpoint,
  type PendingRun,
  type RecoveryRun,
  type TestClock,
  createAgent,
  defineTool,
  durableObjectStore,
  kvStore,
  memoryStore,
  mockModel,
  outputCheck,
  progressGuard,
  SessionAwaitingApprovalError,
  SteadfastError,
  type Delivery,
  type ErrorCode,
  type ForkOptions,
  type HistoryEntry,
  type SweepReport,
  type Message,
  type ResultKind,
  type KVNamespaceLike,
  type DurableObjectStorageLike,
  type Store,
  type NothingToResume,
  type RunResult,
  type RunKind,
  type Schedule,
  type ScheduleOutcome,
  type Schedules,
  type Session,
  type SessionFork,
  type SessionTurn,
} from "steadfast";

declare const env: { RUNS: KVNamespaceLike };

const lookup = defineTool<{ id: string }>({
  name: "lookup",
  description: "Find an order",
  inputSchema: { type: "object", properties: { id: { type: "string" } }, required: ["id"] },
  needsApproval: (args) => args.id.startsWith("vip-"),
  execute: async ({ id }, ctx) => ({ id, key: ctx.idempotencyKey }),
});

// A Standard Schema validator (zod, valibot, … implement this shape; no validator is installed here): `execute`
// and `needsApproval` get its output type, and a wrong use of it is an error.
declare const orderSchema: {
  readonly "~standard": {
    readonly version: 1;
    readonly vendor: string;
    readonly validate: (value: unknown) => { value: { id: string; qty: number } } | { issues: { message: string }[] };
    readonly types?: { readonly input: unknown; readonly output: { id: string; qty: number } };
  };
};
const order = defineTool({
  name: "order",
  description: "Order something",
  input: orderSchema,
  inputSchema: { type: "object" },
  needsApproval: (args) => args.qty > 10,
  execute: ({ id, qty }) => `${id.toUpperCase()} x${qty.toFixed(0)}`,
});
defineTool({
  name: "order2",
  description: "",
  input: orderSchema,
  // @ts-expect-error qty is a number
  execute: ({ qty }) => qty.toUpperCase(),
});
// A misspelt key is an error too (and refused at run time with STEADFAST_CONFIG_INVALID).
// @ts-expect-error `inputSchem` is not a key of a tool
defineTool({ name: "typo", description: "", inputSchem: {}, execute: () => 1 });

// The generated types (js/src/generated/) resolve in the published package: a wrong literal is an error.
const kind: ResultKind = "not-run";
// @ts-expect-error not a ResultKind
const badKind: ResultKind = "skipped";
const code: ErrorCode = "STEADFAST_AGENT_DRIFT";
const toolMessage: Message = { role: "tool", toolCallId: "c1", name: "lookup", content: "ok", isError: false, kind };
void [badKind, code, toolMessage];

export async function example(): Promise<RunResult | NothingToResume> {
  const agent = createAgent({
    model: mockModel([{ toolCalls: [{ name: "lookup", args: { id: "1" } }] }, "done"]),
    tools: [lookup, order],
    hooks: [
      progressGuard({ maxDenials: 2 }),
      outputCheck("nonEmpty", (call, output) => (output === "" ? `${call.name} returned nothing` : null)),
    ],
    instructions: "Be brief.",
    store: Math.random() > 0.5 ? memoryStore() : kvStore(env.RUNS, { prefix: "agents/" }),
    onAgentDrift: "error",
    maxSteps: 5,
    toolConcurrency: 2,
    // Budgets: each limit optional, the session's too (one field of it is enough).
    maxTotalTokens: 20_000,
    maxDurationMs: 60_000,
    sessionBudget: { maxTotalTokens: 100_000 },
    onExceeded: "throw",
  });
  try {
    const r: RunResult = await agent.send("where is order 1?", { sessionId: "s-1", onEvent: (e) => e.seq });
    // Generated types: u64 fields are plain numbers, left-out fields are optional.
    const counts: number = r.usage.inputTokens + r.stats.storeReads + (r.events?.[0]?.seq ?? 0);
    const saved: number | undefined = (await agent.pending())[0]?.savedAt;
    const decided: number | undefined = (await agent.approvals.list())[0]?.decidedAt;
    void [counts, saved, decided];
    for await (const e of agent.stream("again", { sessionId: "s-1" })) void e.type;
    const [first] = await agent.approvals.list();
    if (first) await agent.approvals.resolve({ id: first.id, approved: true });
    const cmp = await agent.compareTrajectories("s-1", "s-2");
    void cmp.divergedAt;
    void (await agent.sweep({ maxRuns: 5 })).recovered;
    const d: Delivery = await agent.runOnce("msg-1", "process order 1");
    if (d.outcome === "awaiting-approval") void d.approvalId;
    else void d.result.status;
    // Every delivery outcome names its run; `events` comes on top of the generated shape.
    const runOf: string = d.runId;
    const eventCount: number = d.events?.length ?? 0;
    // @ts-expect-error not an outcome
    const badOutcome: Delivery["outcome"] = "skipped";
    // The generated trajectory, fork, history and sweep types.
    const stepsApart: number | undefined = cmp.drift.stepCount ? cmp.drift.stepCount.a - cmp.drift.stepCount.b : undefined;
    const fork: ForkOptions = { fromStep: 1, patch: { appendInput: "again", toolResult: { toolCallId: "c1", result: { ok: true } } } };
    const forked = await agent.fork("s-1", fork);
    const history: HistoryEntry[] = await agent.history(forked.runId, 5);
    const savedAt: number | undefined = history[0]?.savedAt;
    const report: SweepReport = await agent.sweep({ maxRuns: 1, pageSize: 10 });
    const hash: string = agent.fingerprint.hash;
    void [runOf, eventCount, badOutcome, stepsApart, savedAt, report.probe, hash];
    return r;
  } catch (e) {
    if (e instanceof SessionAwaitingApprovalError) void [e.sessionId, e.approvalId];
    else if (e instanceof SteadfastError && e.retryable) return agent.resume("s-1");
    throw e;
  }
}

// The documents' names and the test clock.
export async function recovery(signal: { readonly aborted: boolean; addEventListener(type: "abort", f: () => void): void }) {
  const clock: TestClock = testClock({ start: 0, auto: false });
  const agent = createAgent({ provider: mockModel(["done"]), store: memoryStore(), clock });
  const seen: string[] = [];
  const recovery = agent.recover({
    intervalMs: 1_000,
    onRecovered: (run: RecoveryRun, result) => {
      seen.push(`${run.sessionId}: ${result.text}`);
      void recovery.stop();
    },
    onQuarantined: (run: PendingRun) => seen.push(`${run.sessionId} after ${run.attempts}`),
    onError: (error, run) => seen.push(`${run?.sessionId} ${error.code}`),
    signal,
  });
  await clock.advance(1_000);
  await recovery.done;
  const pending: PendingRun[] = await agent.pending();
  const a: Checkpoint | null = await agent.load("a");
  const b = await agent.load("b");
  if (a && b) void compareTrajectories(a, b).divergedAt;
  void compareTrajectories(a?.messages ?? [], []).drift;
  const err: PropagatingToolError = new PropagatingToolError("down", { retryable: true });
  return [seen, pending, err.retryable, clock.now(), clock.sleeps.length] as const;
}

// A custom hook: answers are checked.
export const policy = defineHook({
  name: "policy",
  beforeTool: async (call, ctx: HookContext) => {
    ctx.state = { seen: call.name };
    return call.name === "rm" ? { deny: "no" } : { args: { ...(call.args as object), limit: 10 } };
  },
  afterTool: (_call, result) => (result.isError ? { content: "failed", isError: true } : undefined),
  afterModel: (response) => ({ response: { ...response, text: response.text ?? "" } }),
});
// @ts-expect-error deny must be a string
export const badPolicy = defineHook({ name: "bad", beforeTool: () => ({ deny: 3 }) });

// A side-effecting tool with reconcile.
export const charge = defineTool<{ amount: number }>({
  name: "charge",
  description: "Charge",
  sideEffecting: true,
  execute: async ({ amount }, ctx) => ({ amount, id: ctx.toolCallId, key: ctx.idempotencyKey }),
  reconcile: async ({ amount }, { idempotencyKey }) => (amount > 0 ? `found ${idempotencyKey}` : null),
});

// Sessions and schedules: the generated types resolve, outcomes narrow on `outcome`, kinds are literals.
export async function sessionsAndSchedules(): Promise<ScheduleOutcome[]> {
  const agent = createAgent({ provider: mockModel(["hi"]), store: memoryStore() });
  const session: Session = agent.session({ id: "chat-42" });
  const r: RunResult = await session.send("Book a table", { onEvent: (e) => e.seq, businessState: { guests: 2 } });
  const again: RunResult | NothingToResume = await session.resume({ events: true });
  // Nothing to resume narrows on `resumed` (a RunResult has no such field).
  const againStatus: string = "resumed" in again ? again.reason : again.status;
  const turns: SessionTurn[] = await session.history({ limit: 3 });
  const turn: number | undefined = turns[0]?.turn;
  const fork: SessionFork = await session.fork({ fromStep: 1, newId: "chat-43" });
  const dropped: string | null = await session.discardPending();
  const deleted: number = await session.delete();
  // @ts-expect-error a session send takes no sessionId
  void session.send("x", { sessionId: "other" });
  const kinds: Array<RunKind | undefined> = (await agent.pending()).map((p) => (p.ownerId === undefined ? undefined : p.kind));
  void [r.text, againStatus, turn, fork.checkpoint.runId, dropped, deleted, kinds, session.id];

  const schedules: Schedule[] = [
    { id: "hourly", cron: "0 * * * *", input: "Send the report" },
    { id: "nightly", cron: "0 2 * * *", input: [{ role: "user", content: "Nightly" }], missed: "skip", graceMs: 60_000 },
  ];
  // @ts-expect-error not a MissedFires policy
  const badMissed: Schedule = { id: "x", cron: "@daily", input: "x", missed: "sometimes" };
  const outcomes = await agent.fireSchedule(schedules, { onEvent: (e) => e.type });
  for (const o of outcomes) {
    if (o.outcome === "fired") void [o.runId, o.fireAt, o.status];
    else if (o.outcome === "failed") void [o.error.code, o.runId];
    else if (o.outcome === "idle") void o.nextFireAt;
  }
  const loop: Schedules = agent.startSchedules(schedules, {
    intervalMs: 60_000,
    onFire: (o) => void o.fireAt,
    onTick: (all) => void all.length,
    onError: (error, failed) => void [error.code, failed?.runId],
  });
  await loop.stop();
  await loop.done;
  void badMissed;
  return outcomes;
}

// Strict mode inside an application's own Durable Object: the storage is typed structurally (no
// @cloudflare/workers-types needed); the state object or its storage both do.
declare const ctx: { storage: DurableObjectStorageLike & { setAlarm(at: number): Promise<void> } };
export async function inADurableObject(): Promise<number> {
  const stores: Store[] = [durableObjectStore(ctx), durableObjectStore(ctx.storage, { prefix: "tenant-a/" })];
  // @ts-expect-error not a Durable Object's state or storage
  durableObjectStore({ get: () => null });
  const agent = createAgent({ provider: mockModel(["done"]), store: stores[0] });
  const report = await agent.sweep({ intervalMs: 1 });
  if (report.busy > 0) await ctx.storage.setAlarm(Date.now() + 1_000);
  return stores.filter((s) => s.kind === "durable-object").length;
}

// MCP servers as tools, from the `steadfast/mcp` entry point (its types need no MCP SDK installed).
import { mcpTools, type McpTools, type McpToolsOptions } from "steadfast/mcp";
export async function withMcpTools(): Promise<string[]> {
  const options: McpToolsOptions = { url: "https://mcp.example.com/mcp", headers: { Authorization: "Bearer t" }, prefix: "shop_" };
  const shop: McpTools = await mcpTools(options);
  const some = await mcpTools({ url: "https://mcp.example.com/mcp", tools: (name) => name !== "delete_all", timeoutMs: 10_000 });
  // @ts-expect-error header values are strings
  await mcpTools({ url: "https://mcp.example.com/mcp", headers: { retries: 3 } });
  const agent = createAgent({ model: mockModel(["done"]), tools: [...shop, ...some.map((t) => ({ ...t, needsApproval: true }))], store: memoryStore() });
  await shop.close();
  await some.close();
  return Object.keys(agent.fingerprint.tools);
}

// Durable waits: a tool answers "pending" with its ctx's helpers (typed, `execute` may return the marker), the
// built-in wait tools are an agent option, questions are answered through approvals, events delivered by token.
import type { EventDelivery, PendingWait, ToolWait, WaitKind, WaitTool } from "steadfast";
declare const webhooks: { register(url: string): Promise<void> };
const awaitPayment = defineTool<{ order: string }>({
  name: "await_payment",
  description: "Waits for the payment provider's webhook",
  inputSchema: { type: "object", properties: { order: { type: "string" } }, required: ["order"] },
  execute: async ({ order }, ctx) => {
    await webhooks.register(`https://shop.example.com/events/${ctx.waitToken}?order=${order}`);
    const wait: ToolWait = ctx.waitForEvent({ deadline: new Date(ctx.now + 86_400_000) });
    return wait;
  },
});
const confirm = defineTool<{ question: string }>({
  name: "confirm",
  description: "Asks a person",
  inputSchema: { type: "object" },
  execute: ({ question }, ctx) => (question ? ctx.askQuestion(question, ["yes", "no"]) : ctx.sleepFor(60_000)),
});
defineTool({
  name: "later",
  description: "Sleeps",
  execute: (_args, ctx) =>
    ctx.runId === "a" ? ctx.sleepUntil(ctx.now + 1_000) : ctx.runId === "b" ? ctx.waitForEvent() : ctx.sleepUntil(new Date()),
});
defineTool({
  name: "wrong",
  description: "",
  // @ts-expect-error a deadline is a number or a Date
  execute: (_args, ctx) => ctx.waitForEvent({ deadline: "tomorrow" }),
});
defineTool({
  name: "wrong2",
  description: "",
  // @ts-expect-error choices are strings
  execute: (_args, ctx) => ctx.askQuestion("Which?", [1, 2]),
});
// @ts-expect-error only the ctx's helpers make a wait
const fakeWait: ToolWait = { kind: "event" };
void fakeWait;
export async function waits(): Promise<EventDelivery> {
  const tools: WaitTool[] = ["ask_question", "sleep_for", "sleep_until"];
  const agent = createAgent({ model: mockModel(["done"]), tools: [awaitPayment, confirm], waitTools: tools, store: memoryStore() });
  // @ts-expect-error not a wait tool
  createAgent({ model: mockModel(["done"]), waitTools: ["nap"], store: memoryStore() });
  const run = await agent.send("charge order 7", { sessionId: "order-7" });
  const waiting: PendingWait[] = run.waits ?? [];
  const kinds: WaitKind[] = waiting.map((w) => w.kind);
  const question = (await agent.approvals.list()).find((r) => r.kind === "question");
  if (question) {
    const choices: string[] = question.choices ?? [];
    await agent.approvals.resolve({ id: question.id, answer: choices[0] ?? "yes", note: kinds.join() });
    await agent.approvals.resolve({ id: question.id, approved: false, note: "not mine" });
  }
  // @ts-expect-error an approval needs `approved` or an `answer`
  await agent.approvals.resolve({ id: "apr_1" });
  const due: number | undefined = waiting[0]?.dueAt;
  const delivered = await agent.events.deliver(waiting[0]?.token ?? "", { paid: true, due }, { onEvent: (e) => void e.type });
  const again: boolean = delivered.duplicate;
  const status: string = delivered.run.status;
  void [again, status, delivered.waitId];
  const woken: number = (await agent.sweep()).woken;
  void woken;
  return delivered;
}
