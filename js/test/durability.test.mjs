// The seed's charge/ship example: `ship` dies (a propagating error) the first time; the run stays resumable,
// and finishing it never charges twice.
import test from "node:test";
import assert from "node:assert/strict";
import {
  createAgent,
  defineTool,
  kvStore,
  memoryStore,
  mockModel,
  PropagatedToolError,
  SteadfastError,
  testClock,
} from "steadfast";
import { FakeKv } from "../test-support/fake_kv.mjs";

function shop() {
  const counts = { charges: 0, shipments: 0, shipAttempts: 0 };
  const charge = defineTool({
    name: "charge",
    description: "Charge the card of an order",
    inputSchema: { type: "object", properties: { order: { type: "number" } }, required: ["order"] },
    execute: async ({ order }, ctx) => {
      counts.charges += 1;
      return { charged: order, key: ctx.idempotencyKey };
    },
  });
  const ship = defineTool({
    name: "ship",
    description: "Ship an order",
    inputSchema: { type: "object", properties: { order: { type: "number" } }, required: ["order"] },
    execute: async ({ order }) => {
      counts.shipAttempts += 1;
      if (counts.shipAttempts === 1) throw new PropagatedToolError("the worker process died while shipping");
      counts.shipments += 1;
      return `shipped order ${order}`;
    },
  });
  const model = mockModel([
    { toolCalls: [{ name: "charge", args: { order: 7 } }] },
    { toolCalls: [{ name: "ship", args: { order: 7 } }] },
    "Order 7 is charged and shipped.",
  ]);
  return { counts, tools: [charge, ship], model };
}

test("a propagating tool error rejects the run; resume finishes it and charges once", async () => {
  const { counts, tools, model } = shop();
  const agent = createAgent({ model, tools, store: memoryStore(), instructions: "You run a shop." });

  await assert.rejects(agent.send("Charge and ship order 7", { sessionId: "order-7" }), (e) => {
    assert.ok(e instanceof SteadfastError);
    assert.equal(e.code, "STEADFAST_TOOL_PROPAGATED");
    assert.equal(e.retryable, true);
    assert.equal(e.runId, "order-7");
    assert.match(e.message, /died while shipping/);
    return true;
  });
  assert.deepEqual([counts.charges, counts.shipments], [1, 0]);

  const pending = await agent.pending();
  assert.equal(pending.length, 1);
  assert.equal(pending[0].runId, "order-7");
  assert.equal(pending[0].status, "in-progress");
  assert.equal(pending[0].attempts, 1);
  assert.equal(pending[0].lastError.code, "STEADFAST_TOOL_PROPAGATED");

  const result = await agent.resume("order-7");
  assert.equal(result.status, "finished");
  assert.equal(result.text, "Order 7 is charged and shipped.");
  assert.deepEqual([counts.charges, counts.shipments], [1, 1], "the charge ran once");
  assert.equal(model.calls.length, 3, "the resume ran the pending ship call without asking the model again first");
  assert.deepEqual(await agent.pending(), []);
  assert.deepEqual(
    await agent.resume("order-7"),
    { runId: "order-7", resumed: false, reason: "nothing to resume" },
    "nothing left to resume: the shape POST /runs/{id}/resume answers",
  );
});

test("the recovery sweep finishes the interrupted run", async () => {
  const { counts, tools, model } = shop();
  const agent = createAgent({ model, tools, store: memoryStore() });
  await assert.rejects(agent.send("Charge and ship order 7", { sessionId: "order-7" }), { code: "STEADFAST_TOOL_PROPAGATED" });
  const report = await agent.sweep({ intervalMs: 0 });
  assert.deepEqual(report.recovered, ["order-7"]);
  assert.equal(report.resumed, 1);
  const cp = await agent.load("order-7");
  assert.equal(cp.status, "finished");
  assert.deepEqual([counts.charges, counts.shipments], [1, 1]);
});

test("on a KV namespace, a second agent object (another replica) resumes the run (settle windows on a test clock)", async () => {
  const kv = new FakeKv();
  const { counts, tools, model } = shop();
  // The default settle window (1 s per lease write) passes in virtual time: the store reads the test clock.
  const clock = testClock();
  const started = Date.now();
  const a = createAgent({ model, tools, store: kvStore(kv, { clock }), clock });
  await assert.rejects(a.send("Charge and ship order 7", { sessionId: "order-7" }), { code: "STEADFAST_TOOL_PROPAGATED" });
  assert.ok(kv.keys().some((k) => k.startsWith("run/order-7/j/")), "journal entries are in KV");

  const b = createAgent({ model, tools, store: kvStore(kv, { clock }), clock });
  assert.deepEqual((await b.pending()).map((p) => p.runId), ["order-7"]);
  const result = await b.resume("order-7");
  assert.equal(result.status, "finished");
  assert.deepEqual([counts.charges, counts.shipments], [1, 1]);
  assert.ok(kv.bulkGets > 0, "loads use bulk get(keys[])");
  assert.ok(clock.sleeps.includes(1_000), `the store slept its settle window on the test clock: ${clock.sleeps}`);
  assert.ok(Date.now() - started < 1_000, "in virtual time, not real time");
});

test("fork and compareTrajectories", async () => {
  const { tools, model } = shop();
  const agent = createAgent({ model, tools, store: memoryStore() });
  await assert.rejects(agent.send("Charge and ship order 7", { sessionId: "order-7" }));
  await agent.resume("order-7");
  const history = await agent.history("order-7");
  assert.ok(history.length >= 3);
  assert.equal(history[0].checkpoint.status, "finished", "newest first");
  const fork = await agent.fork("order-7", { fromStep: 1 });
  assert.equal(fork.runId, "order-7.fork-1");
  assert.equal(fork.step, 1);
  const cmp = await agent.compareTrajectories("order-7", fork.runId);
  assert.equal(cmp.a.length, 3);
  assert.equal(cmp.b.length, 1);
  assert.equal(cmp.divergedAt, 2);
  await agent.delete(fork.runId);
  assert.equal(await agent.load(fork.runId), null);
});
