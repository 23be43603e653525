// Custom hooks from JS (defineHook): rewrite or deny a tool call, replace a result or a model response, keep
// durable state in ctx.state (a crash or a resume by another agent object does not reset it), and a hook that
// throws fails the attempt with STEADFAST_HOOK_FAILED, leaving the run resumable.
import test from "node:test";
import assert from "node:assert/strict";
import { createAgent, defineHook, defineTool, memoryStore, mockModel, PropagatingToolError, SteadfastError } from "steadfast";

const recorded = (name, log, result = "ok") =>
  defineTool({
    name,
    description: name,
    execute: async (args) => {
      log.push([name, args]);
      return typeof result === "function" ? result(args) : result;
    },
  });

test("a custom hook rewrites arguments, denies a call, replaces a result and a model response", async () => {
  const log = [];
  const tools = [recorded("list", log, "a, b"), recorded("rm", log), recorded("secret", log, "hunter2")];
  const model = mockModel([
    { toolCalls: [{ name: "list", args: {} }, { name: "rm", args: { path: "/" } }, { name: "secret" }] },
    "damn, done",
  ]);
  const policy = defineHook({
    name: "policy",
    beforeTool: async (call) => {
      if (call.name === "list") return { args: { ...call.args, limit: 10 } };
      if (call.name === "rm") return { deny: "deleting is not allowed" };
      return undefined;
    },
    afterTool: (call, result) => (call.name === "secret" ? { content: "[redacted]" } : undefined),
    afterModel: (response) => (response.text ? { response: { ...response, text: response.text.replace("damn", "d***") } } : undefined),
  });
  const agent = createAgent({ model, tools, hooks: [policy], store: memoryStore() });
  const r = await agent.send("tidy up", { sessionId: "policy-1", events: true });
  assert.equal(r.status, "finished");
  assert.equal(r.text, "d***, done");
  assert.deepEqual(log, [["list", { limit: 10 }], ["secret", {}]], "rm never ran; list ran with the rewritten args");
  const results = Object.fromEntries(r.messages.filter((m) => m.role === "tool").map((m) => [m.name, m]));
  assert.equal(results.rm.kind, "denied");
  assert.match(results.rm.content, /deleting is not allowed/);
  assert.equal(results.secret.content, "[redacted]");
  const done = Object.fromEntries(r.events.filter((e) => e.type === "tool.done").map((e) => [e.name, e]));
  assert.equal(done.secret.replacedBy, "policy", "the replaced result's tool.done names the hook");
  assert.equal(done.list.replacedBy, undefined);
  assert.equal(results.list.content, "a, b");
});

test("a custom hook's ctx.state is durable: a resume by another agent object continues from the stored state", async () => {
  const store = memoryStore();
  let down = true;
  const seenBefore = [];
  const counter = () =>
    defineHook({
      name: "counter",
      beforeTool: async (call, ctx) => {
        seenBefore.push(ctx.state?.calls ?? 0);
        ctx.state = { calls: (ctx.state?.calls ?? 0) + 1, last: call.name };
      },
      beforeModel: (messages, ctx) => {
        if (ctx.state !== null) ctx.state.sawModel = messages.length; // a change in place counts too
      },
    });
  const list = defineTool({ name: "list", description: "List", execute: async () => "a, b" });
  const ship = defineTool({
    name: "ship",
    description: "Ship",
    execute: async () => {
      if (down) throw new PropagatingToolError("worker died");
      return "shipped";
    },
  });
  const script = () => mockModel([{ toolCalls: [{ name: "list" }] }, { toolCalls: [{ name: "ship" }] }, "done"], { mode: "by-turn" });
  const first = createAgent({ model: script(), tools: [list, ship], hooks: [counter()], store });
  await assert.rejects(first.send("go", { sessionId: "count-1" }), { code: "STEADFAST_TOOL_PROPAGATED" });
  down = false;
  const spied = [];
  const second = createAgent({
    model: script(),
    tools: [list, ship],
    hooks: [counter(), defineHook({ name: "spy", beforeTool: (_c, ctx) => void spied.push(ctx) })],
    store,
  });
  const r = await second.resume("count-1");
  assert.equal(r.status, "finished");
  // list (0 → 1) and ship (1 → 2) on the first agent; the resumed ship call, on a fresh hook object, starts from
  // the stored 2.
  assert.deepEqual(seenBefore, [0, 1, 2]);
  const cp = await second.load("count-1");
  assert.ok(JSON.stringify(cp).includes('"calls":3'), "the final state is stored");
  assert.equal(spied.length, 1);
  assert.equal(spied[0].runId, "count-1");
  assert.equal(spied[0].state, null, "each hook has its own state");
});

test("beforeTool sees an approved call again when it runs, with resumedAfterApproval", async () => {
  const flags = [];
  const pay = defineTool({ name: "pay", description: "Pay", needsApproval: true, execute: async () => "paid" });
  const agent = createAgent({
    model: mockModel([{ toolCalls: [{ name: "pay" }] }, "done"]),
    tools: [pay],
    hooks: [defineHook({ name: "watch", beforeTool: (_call, ctx) => void flags.push(ctx.resumedAfterApproval) })],
    store: memoryStore(),
  });
  const paused = await agent.send("pay", { sessionId: "pay-1" });
  assert.equal(paused.status, "awaiting-approval");
  const r = await agent.approvals.resolve({ id: paused.approvalId, approved: true });
  assert.equal(r.status, "finished");
  assert.deepEqual(flags, [false, true]);
});

test("a hook that throws or rejects fails the attempt with STEADFAST_HOOK_FAILED; the run stays resumable", async () => {
  for (const how of ["throw", "reject", "bad answer"]) {
    let explode = true;
    const hook = defineHook({
      name: "fragile",
      beforeTool: (call) => {
        if (!explode) return undefined;
        if (how === "throw") throw new Error("boom");
        if (how === "reject") return Promise.reject(new Error("boom"));
        return { unknownField: 1 };
      },
    });
    const log = [];
    const agent = createAgent({
      model: mockModel([{ toolCalls: [{ name: "t" }] }, "done"], { mode: "by-turn" }),
      tools: [recorded("t", log)],
      hooks: [hook],
      store: memoryStore(),
    });
    await assert.rejects(agent.send("go", { sessionId: "h-1" }), (e) => {
      assert.ok(e instanceof SteadfastError);
      assert.equal(e.code, "STEADFAST_HOOK_FAILED", how);
      assert.match(e.message, /hook 'fragile' beforeTool/);
      return true;
    });
    assert.deepEqual(log, [], "the tool did not run");
    const [pending] = await agent.pending();
    assert.equal(pending.attempts, 1);
    explode = false;
    assert.equal((await agent.resume("h-1")).status, "finished");
    assert.equal(log.length, 1);
  }
});

test("a custom hook without functions, or with a function that is not one, is a config error", () => {
  for (const hook of [defineHook({ name: "empty" }), defineHook({ name: "bad", beforeTool: 3 }), defineHook({ name: "", beforeTool() {} })]) {
    assert.throws(() => createAgent({ model: mockModel([]), hooks: [hook], store: memoryStore() }), { code: "STEADFAST_CONFIG_INVALID" });
  }
});
