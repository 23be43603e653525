// Deliveries: `runOnce` derives the run id from a delivery id, so a queue's redelivery of a finished job is
// acknowledged without a model call, and a job whose run waits on a person is left (not acknowledged).
import test from "node:test";
import assert from "node:assert/strict";
import { createAgent, defineTool, memoryStore, mockModel } from "steadfast";

test("a redelivered payload is acknowledged with zero extra model calls", async () => {
  const model = mockModel(["Order 7 shipped."]);
  const agent = createAgent({ model, store: memoryStore() });

  const first = await agent.runOnce("msg-7", "Ship order 7");
  assert.equal(first.outcome, "ran");
  assert.equal(first.runId, "dlv-msg-7");
  assert.equal(first.result.status, "finished");
  assert.equal(first.result.text, "Order 7 shipped.");
  assert.equal(model.calls.length, 1);

  const again = await agent.runOnce("msg-7", "Ship order 7");
  assert.equal(again.outcome, "acknowledged");
  assert.equal(again.runId, "dlv-msg-7");
  assert.equal(again.result.status, "finished");
  assert.equal(again.result.text, "Order 7 shipped.");
  assert.equal(model.calls.length, 1, "a redelivery makes no model call");
});

test("a redelivery seen by another agent over the same store is acknowledged too", async () => {
  const store = memoryStore();
  const model = mockModel(["done"]);
  const a = createAgent({ model, store });
  const b = createAgent({ model, store });
  assert.equal((await a.runOnce("job/42 (retry)", "Do job 42")).outcome, "ran");
  const d = await b.runOnce("job/42 (retry)", "Do job 42");
  assert.equal(d.outcome, "acknowledged");
  assert.match(d.runId, /^dlv-/);
  assert.equal(model.calls.length, 1);
  assert.ok(await b.load(d.runId), "the derived run id names the stored run");
});

test("a delivery whose run awaits approval is left, and runs once approved", async () => {
  let refunds = 0;
  const refund = defineTool({
    name: "refund",
    description: "Refund an order",
    inputSchema: { type: "object", properties: { order: { type: "number" } }, required: ["order"] },
    needsApproval: true,
    execute: async ({ order }) => {
      refunds += 1;
      return { refunded: order };
    },
  });
  const model = mockModel([{ toolCalls: [{ name: "refund", args: { order: 9 } }] }, "Refunded."]);
  const agent = createAgent({ model, tools: [refund], store: memoryStore() });

  const first = await agent.runOnce("msg-9", "Refund order 9");
  assert.equal(first.outcome, "ran");
  assert.equal(first.result.status, "awaiting-approval");
  const approvalId = first.result.approvalId;
  assert.match(approvalId, /^apr_/);
  assert.equal(model.calls.length, 1);

  const redelivered = await agent.runOnce("msg-9", "Refund order 9");
  assert.deepEqual(redelivered, { outcome: "awaiting-approval", runId: "dlv-msg-9", approvalId });
  assert.equal(model.calls.length, 1, "a delivery waiting on a person makes no model call");
  assert.equal(refunds, 0);

  const done = await agent.approvals.resolve({ id: approvalId, approved: true });
  assert.equal(done.status, "finished");
  assert.equal(refunds, 1);
  const last = await agent.runOnce("msg-9", "Refund order 9");
  assert.equal(last.outcome, "acknowledged");
  assert.equal(last.result.text, "Refunded.");
  assert.equal(model.calls.length, 2);
  assert.equal(refunds, 1);
});

test("runOnce passes events and onEvent through", async () => {
  const model = mockModel(["hi"]);
  const agent = createAgent({ model, store: memoryStore() });
  const seen = [];
  const d = await agent.runOnce("msg-ev", "hello", { events: true, onEvent: (e) => seen.push(e.type) });
  assert.equal(d.outcome, "ran");
  assert.ok(Array.isArray(d.events));
  assert.deepEqual(d.events.map((e) => e.type), seen);
  assert.equal(seen[0], "run.start");
});
