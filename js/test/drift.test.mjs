// Agent drift: a run interrupted by a propagated tool error is resumed by an agent whose tool's inputSchema
// changed. `onAgentDrift: "warn"` finishes the run and reports an `agent.drift` event naming the tool;
// `onAgentDrift: "error"` refuses with STEADFAST_AGENT_DRIFT and leaves the stored run as it was.
import test from "node:test";
import assert from "node:assert/strict";
import { createAgent, defineTool, memoryStore, mockModel, PropagatedToolError, SteadfastError } from "steadfast";

const SCRIPT = [{ toolCalls: [{ name: "ship", args: { order: 3 } }] }, "Shipped order 3."];
const SCHEMA_V1 = { type: "object", properties: { order: { type: "number" } }, required: ["order"] };
const SCHEMA_V2 = {
  type: "object",
  properties: { order: { type: "number" }, express: { type: "boolean" } },
  required: ["order"],
};

function shipTool(inputSchema, counts, { failOnce = false } = {}) {
  let failed = !failOnce;
  return defineTool({
    name: "ship",
    description: "Ship an order",
    inputSchema,
    execute: async ({ order }) => {
      counts.calls += 1;
      if (!failed) {
        failed = true;
        throw new PropagatedToolError("the warehouse API is down");
      }
      counts.shipped += 1;
      return { shipped: order };
    },
  });
}

/** A run on `store` rejected by the tool's propagated error (resumable), as session `id`. */
async function interruptedRun(store, id) {
  const counts = { calls: 0, shipped: 0 };
  const agent = createAgent({
    model: mockModel(SCRIPT, { mode: "by-turn" }),
    tools: [shipTool(SCHEMA_V1, counts, { failOnce: true })],
    store,
  });
  await assert.rejects(agent.send("Ship order 3", { sessionId: id }), (e) => {
    assert.ok(e instanceof SteadfastError);
    assert.equal(e.code, "STEADFAST_TOOL_PROPAGATED");
    return true;
  });
  assert.equal(counts.calls, 1);
  assert.equal(counts.shipped, 0);
  const cp = await agent.load(id);
  assert.equal(cp.status, "in-progress");
  return cp;
}

test('onAgentDrift "warn": the resume finishes and an agent.drift event names the changed tool', async () => {
  const store = memoryStore();
  await interruptedRun(store, "drift-warn");

  const counts = { calls: 0, shipped: 0 };
  const model = mockModel(SCRIPT, { mode: "by-turn" });
  const changed = createAgent({ model, tools: [shipTool(SCHEMA_V2, counts)], store, onAgentDrift: "warn" });
  const seen = [];
  const warned = [];
  const warn = console.warn;
  console.warn = (...args) => warned.push(args.join(" "));
  let r;
  try {
    r = await changed.resume("drift-warn", { events: true, onEvent: (e) => seen.push(e) });
  } finally {
    console.warn = warn;
  }
  assert.equal(warned.length, 1, `one console.warn: ${warned}`);
  assert.match(warned[0], /run 'drift-warn' was resumed by a changed agent \(tools changed: ship\)/);
  assert.equal(r.status, "finished");
  assert.equal(r.text, "Shipped order 3.");
  assert.equal(counts.shipped, 1, "the interrupted call runs once on resume");

  const drift = seen.filter((e) => e.type === "agent.drift");
  assert.equal(drift.length, 1, "one agent.drift event through onEvent");
  assert.equal(drift[0].runId, "drift-warn");
  assert.deepEqual(drift[0].toolsChanged, ["ship"]);
  assert.deepEqual(drift[0].toolsAdded, []);
  assert.deepEqual(drift[0].toolsRemoved, []);
  assert.equal(drift[0].instructions, false);
  assert.deepEqual(
    r.events.filter((e) => e.type === "agent.drift"),
    drift,
    "the same event in result.events",
  );
});

test('onAgentDrift "warn" writes the console.warn for a recovery sweep\'s resume too; "ignore" writes none', async () => {
  for (const policy of ["warn", "ignore"]) {
    const store = memoryStore();
    await interruptedRun(store, `drift-${policy}`);
    const counts = { calls: 0, shipped: 0 };
    const changed = createAgent({
      model: mockModel(SCRIPT, { mode: "by-turn", id: "mock-2" }),
      tools: [shipTool(SCHEMA_V1, counts)],
      store,
      onAgentDrift: policy,
    });
    const warned = [];
    const warn = console.warn;
    console.warn = (...args) => warned.push(args.join(" "));
    try {
      // The run failed once: its backoff (intervalMs) has passed at intervalMs 0.
      const report = await changed.sweep({ intervalMs: 0 });
      assert.deepEqual(report.recovered, [`drift-${policy}`]);
    } finally {
      console.warn = warn;
    }
    if (policy === "warn") {
      assert.equal(warned.length, 1, `${warned}`);
      assert.match(warned[0], /model mock → mock-2/);
    } else {
      assert.deepEqual(warned, []);
    }
    assert.equal(counts.shipped, 1);
  }
});

test('onAgentDrift "error": the resume throws STEADFAST_AGENT_DRIFT and the stored run is unchanged', async () => {
  const store = memoryStore();
  const before = await interruptedRun(store, "drift-error");
  const historyBefore = await createAgent({ model: mockModel([]), store }).history("drift-error");

  const counts = { calls: 0, shipped: 0 };
  const model = mockModel(SCRIPT, { mode: "by-turn" });
  const changed = createAgent({ model, tools: [shipTool(SCHEMA_V2, counts)], store, onAgentDrift: "error" });
  const seen = [];
  const warned = [];
  const warn = console.warn;
  console.warn = (...args) => warned.push(args.join(" "));
  await assert.rejects(changed.resume("drift-error", { onEvent: (e) => seen.push(e) }).finally(() => (console.warn = warn)), (e) => {
    assert.ok(e instanceof SteadfastError);
    assert.equal(e.code, "STEADFAST_AGENT_DRIFT");
    assert.equal(e.retryable, false);
    assert.equal(e.runId, "drift-error");
    assert.deepEqual(e.details.toolsChanged, ["ship"]);
    return true;
  });
  assert.equal(counts.calls, 0, "the tool did not run");
  assert.equal(model.calls.length, 0, "the model was not called");
  assert.equal(seen.filter((e) => e.type === "agent.drift").length, 0);
  assert.deepEqual(await changed.load("drift-error"), before, "the stored run is unchanged");
  assert.deepEqual(await changed.history("drift-error"), historyBefore, "no state was written");
  assert.deepEqual(warned, [], "a refused resume writes no warning");
});
