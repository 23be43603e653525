// Approvals: a gated call pauses the run; sending meanwhile is refused with both ids; a second agent object over
// the same store (another replica) resolves it, and the call runs once.
import test from "node:test";
import assert from "node:assert/strict";
import { createAgent, defineTool, memoryStore, mockModel, SessionAwaitingApprovalError, SteadfastError } from "steadfast";

function refundAgentParts() {
  const counts = { refunds: 0 };
  const refund = defineTool({
    name: "refund",
    description: "Refund an order",
    inputSchema: { type: "object", properties: { order: { type: "number" } }, required: ["order"] },
    needsApproval: true,
    execute: async ({ order }, ctx) => {
      counts.refunds += 1;
      return { refunded: order, idempotencyKey: ctx.idempotencyKey, approvalId: ctx.approvalId };
    },
  });
  const model = mockModel([{ toolCalls: [{ name: "refund", args: { order: 7 } }] }, "Refund issued."]);
  return { counts, tools: [refund], model };
}

test("an approval pauses the run; a second agent over the same memoryStore resolves it", async () => {
  const store = memoryStore();
  const { counts, tools, model } = refundAgentParts();
  const a = createAgent({ model, tools, store });
  const paused = await a.send("Please refund order 7", { sessionId: "refund-7" });
  assert.equal(paused.status, "awaiting-approval");
  assert.match(paused.approvalId, /^apr_/);
  assert.equal(counts.refunds, 0);

  await assert.rejects(a.send("hurry up", { sessionId: "refund-7" }), (e) => {
    assert.ok(e instanceof SessionAwaitingApprovalError);
    assert.ok(e instanceof SteadfastError);
    assert.equal(e.code, "STEADFAST_SESSION_AWAITING_APPROVAL");
    assert.equal(e.retryable, false);
    assert.equal(e.sessionId, "refund-7");
    assert.equal(e.approvalId, paused.approvalId);
    return true;
  });

  const b = createAgent({ model, tools, store });
  const list = await b.approvals.list();
  assert.equal(list.length, 1);
  assert.equal(list[0].id, paused.approvalId);
  assert.equal(list[0].runId, "refund-7");
  assert.deepEqual(list[0].toolCall.args, { order: 7 });
  assert.deepEqual((await b.pending()).map((p) => [p.runId, p.status]), [["refund-7", "awaiting-approval"]]);

  const done = await b.approvals.resolve({ id: paused.approvalId, approved: true, note: "customer called" });
  assert.equal(done.status, "finished");
  assert.equal(done.text, "Refund issued.");
  assert.equal(counts.refunds, 1);
  const toolMsg = done.messages.find((m) => m.role === "tool");
  assert.equal(JSON.parse(toolMsg.content).idempotencyKey, paused.approvalId, "approved calls use the approval id as key");
  assert.deepEqual(await a.approvals.list(), []);

  await assert.rejects(b.approvals.resolve({ id: paused.approvalId, approved: true }), (e) => {
    assert.ok(e instanceof SteadfastError);
    assert.equal(e.code, "STEADFAST_APPROVAL_NOT_FOUND");
    assert.equal(e.approvalId, paused.approvalId);
    return true;
  });
  assert.equal(counts.refunds, 1, "the approved call ran once");
});

test("a rejected approval gives the model the note; the tool never runs", async () => {
  const { counts, tools, model } = refundAgentParts();
  const agent = createAgent({ model, tools, store: memoryStore() });
  const paused = await agent.send("Please refund order 7", { sessionId: "refund-8" });
  const done = await agent.approvals.resolve({ id: paused.approvalId, approved: false, note: "not eligible" });
  assert.equal(done.status, "finished");
  assert.equal(counts.refunds, 0);
  const toolMsg = done.messages.find((m) => m.role === "tool");
  assert.equal(toolMsg.kind, "rejected");
  assert.match(toolMsg.content, /not eligible/);
});

test("needsApproval as a function gates only some calls", async () => {
  let runs = 0;
  const pay = defineTool({
    name: "pay",
    description: "Pay an amount",
    inputSchema: { type: "object", properties: { amount: { type: "number" } }, required: ["amount"] },
    needsApproval: ({ amount }) => amount > 100,
    execute: async () => {
      runs += 1;
      return "paid";
    },
  });
  const model = mockModel([
    { toolCalls: [{ name: "pay", args: { amount: 5 } }] },
    { toolCalls: [{ name: "pay", args: { amount: 500 } }] },
    "done",
  ]);
  const agent = createAgent({ model, tools: [pay], store: memoryStore() });
  const r = await agent.send("pay twice", { sessionId: "pay-1" });
  assert.equal(r.status, "awaiting-approval");
  assert.equal(runs, 1, "the small payment ran without approval");
  const done = await agent.approvals.resolve({ id: r.approvalId, approved: true });
  assert.equal(done.text, "done");
  assert.equal(runs, 2);
});
