// Sessions (agent.session({ id })): every turn is its own checkpointed run `<id>.turn-<n>`, built from the
// previous turn's conversation; interrupted turns are finished by session.resume(); a paused turn refuses new
// input; fork, discardPending, delete; pending() names each run's kind.
import test from "node:test";
import assert from "node:assert/strict";
import {
  createAgent,
  defineTool,
  memoryStore,
  mockModel,
  PropagatingToolError,
  SessionAwaitingApprovalError,
  SteadfastError,
} from "steadfast";

const userTexts = (request) => request.messages.filter((m) => m.role === "user").map((m) => m.content);

test("a session of three turns: turn runs exist, history is newest first, each turn sees the conversation", async () => {
  const store = memoryStore();
  const model = mockModel(["Table for 2 booked.", "Changed to 3 people.", "See you at 8."]);
  const agent = createAgent({ model, store, instructions: "You book tables." });
  const session = agent.session({ id: "chat-42" });
  assert.equal(session.id, "chat-42");

  const r1 = await session.send("Book a table for 2 tonight");
  assert.equal(r1.runId, "chat-42.turn-1");
  assert.equal(r1.text, "Table for 2 booked.");
  const r2 = await session.send("Make it 3 people");
  assert.equal(r2.runId, "chat-42.turn-2");
  const r3 = await session.send([{ role: "user", content: "At 8?" }]);
  assert.equal(r3.runId, "chat-42.turn-3");
  assert.equal(r3.text, "See you at 8.");

  // Each turn's model call saw the whole conversation so far.
  assert.deepEqual(userTexts(model.calls[0]), ["Book a table for 2 tonight"]);
  assert.deepEqual(userTexts(model.calls[1]), ["Book a table for 2 tonight", "Make it 3 people"]);
  assert.deepEqual(userTexts(model.calls[2]), ["Book a table for 2 tonight", "Make it 3 people", "At 8?"]);
  assert.deepEqual(
    model.calls[2].messages.filter((m) => m.role === "assistant").map((m) => m.content),
    ["Table for 2 booked.", "Changed to 3 people."],
  );

  // Every turn is a stored run of its own.
  for (const n of [1, 2, 3]) {
    const cp = await agent.load(`chat-42.turn-${n}`);
    assert.equal(cp?.status, "finished", `turn ${n}`);
  }
  assert.equal(await agent.load("chat-42.turn-4"), null);

  const history = await session.history();
  assert.deepEqual(history.map((t) => [t.turn, t.runId, t.status, t.text]), [
    [3, "chat-42.turn-3", "finished", "See you at 8."],
    [2, "chat-42.turn-2", "finished", "Changed to 3 people."],
    [1, "chat-42.turn-1", "finished", "Table for 2 booked."],
  ]);
  assert.deepEqual(history[1].input.map((m) => m.content), ["Make it 3 people"], "a turn's own input");
  assert.deepEqual((await session.history({ limit: 2 })).map((t) => t.turn), [3, 2]);

  // Another handle (another process over the same store) continues the same session.
  const other = createAgent({ model: mockModel(["Noted."]), store });
  const r4 = await other.session({ id: "chat-42" }).send("Thanks");
  assert.equal(r4.runId, "chat-42.turn-4");
  assert.deepEqual(await session.resume(), { sessionId: "chat-42", resumed: false, reason: "nothing to resume" }, "nothing is pending");

  assert.equal(await session.delete(), 4);
  assert.deepEqual(await session.history(), []);
  assert.equal(await agent.load("chat-42.turn-1"), null);
});

test("an interrupted turn is listed as kind 'session' and finished by session.resume(), without redoing its steps", async () => {
  const counts = { charges: 0, shipAttempts: 0 };
  const tools = [
    defineTool({ name: "charge", description: "Charge", execute: async () => `charged ${++counts.charges}` }),
    defineTool({
      name: "ship",
      description: "Ship",
      execute: async () => {
        if (++counts.shipAttempts === 1) throw new PropagatingToolError("process died");
        return "shipped";
      },
    }),
  ];
  const model = mockModel([
    "Hello.",
    { toolCalls: [{ name: "charge" }] },
    { toolCalls: [{ name: "ship" }] },
    "Order charged and shipped.",
  ]);
  const agent = createAgent({ model, tools, store: memoryStore() });
  await agent.send("unrelated", { sessionId: "plain-run" }).catch(() => undefined); // a plain run, for the kinds
  const session = agent.session({ id: "order-7" });
  // "Hello." was taken by the plain run above; this session's first turn is interrupted at the ship call.
  await assert.rejects(session.send("Charge and ship order 7"), { code: "STEADFAST_TOOL_PROPAGATED", runId: "order-7.turn-1" });
  assert.equal(counts.charges, 1);

  const pending = await agent.pending();
  assert.equal(pending.length, 1);
  assert.equal(pending[0].runId, "order-7.turn-1");
  assert.equal(pending[0].kind, "session");
  assert.equal(pending[0].ownerId, "order-7");
  assert.equal(pending[0].status, "in-progress");
  // As the documents have it: `sessionId` is the session's id (what agent.resume() takes), `checkpointId` the turn.
  assert.deepEqual([pending[0].sessionId, pending[0].checkpointId], ["order-7", "order-7.turn-1"]);

  const first = await agent.resume(pending[0].sessionId);
  const finished = first.resumed === false ? await session.resume() : first;
  assert.deepEqual(await session.resume(), { sessionId: "order-7", resumed: false, reason: "nothing to resume" }, "agent.resume(sessionId) finished the session's turn");
  assert.equal(finished?.runId, "order-7.turn-1");
  assert.equal(finished?.text, "Order charged and shipped.");
  assert.deepEqual([counts.charges, counts.shipAttempts], [1, 2], "the charge did not run again");
  assert.deepEqual(await agent.pending(), []);
  assert.deepEqual(await session.resume(), { sessionId: "order-7", resumed: false, reason: "nothing to resume" });
});

test("pending() kinds: a plain run is 'run' without ownerId", async () => {
  const agent = createAgent({
    model: mockModel([{ toolCalls: [{ name: "boom" }] }]),
    tools: [defineTool({ name: "boom", description: "dies", execute: async () => { throw new PropagatingToolError("died"); } })],
    store: memoryStore(),
  });
  await assert.rejects(agent.send("go", { sessionId: "job-1" }), { code: "STEADFAST_TOOL_PROPAGATED" });
  const [run] = await agent.pending();
  assert.equal(run.kind, "run");
  assert.equal(run.ownerId, undefined);
  assert.equal(run.sessionId, "job-1");
});

function refundAgent(store = memoryStore()) {
  const counts = { refunds: 0 };
  const refund = defineTool({
    name: "refund",
    description: "Refund an order",
    needsApproval: true,
    execute: async () => `refunded ${++counts.refunds}`,
  });
  const model = mockModel(
    [{ toolCalls: [{ name: "refund", args: { order: 7 } }] }, "Refund issued.", "You are welcome."],
    { mode: "by-turn" },
  );
  return { agent: createAgent({ model, tools: [refund], store }), model, counts };
}

test("a turn paused on an approval refuses the next send; after the decision the session goes on", async () => {
  const { agent, model, counts } = refundAgent();
  const session = agent.session({ id: "refund-7" });
  const paused = await session.send("Refund order 7");
  assert.equal(paused.status, "awaiting-approval");
  assert.ok(paused.approvalId);
  const [listed] = await agent.pending();
  assert.deepEqual([listed.kind, listed.ownerId, listed.status], ["session", "refund-7", "awaiting-approval"]);

  const calls = model.calls.length;
  await assert.rejects(session.send("Are you done?"), (e) => {
    assert.ok(e instanceof SessionAwaitingApprovalError);
    assert.equal(e.code, "STEADFAST_SESSION_AWAITING_APPROVAL");
    assert.equal(e.approvalId, paused.approvalId);
    return true;
  });
  assert.equal(model.calls.length, calls, "the refused send called no model");
  assert.equal(counts.refunds, 0);

  const done = await agent.approvals.resolve({ id: paused.approvalId, approved: true });
  assert.equal(done.text, "Refund issued.");
  const next = await session.send("Thanks");
  assert.equal(next.runId, "refund-7.turn-2");
  assert.equal(counts.refunds, 1);
});

test("fork starts a new session from a turn; discardPending drops a paused turn and its approval", async () => {
  const { agent, counts } = refundAgent();
  const session = agent.session({ id: "s1" });
  const chat = createAgent({ model: mockModel(["one", "two"]), store: memoryStore() }).session({ id: "c" });
  await chat.send("first");
  await chat.send("second");
  const fork = await chat.fork({ fromStep: 1 });
  assert.equal(fork.sessionId, "c-fork-1");
  assert.equal(fork.step, 1);
  assert.equal(fork.checkpoint.runId, "c-fork-1.turn-1");
  assert.deepEqual(fork.checkpoint.messages.filter((m) => m.role === "user").map((m) => m.content), ["first"]);
  const named = await chat.fork({ fromStep: 2, newId: "c-alt" });
  assert.equal(named.sessionId, "c-alt");
  await assert.rejects(chat.fork({ fromStep: 2, newId: "c-alt" }), { code: "STEADFAST_SESSION_EXISTS" });
  await assert.rejects(chat.fork({ fromStep: 9 }), { code: "STEADFAST_CHECKPOINT_NOT_FOUND" });
  await assert.rejects(chat.fork({ fromStep: 1, newId: "bad id" }), { code: "STEADFAST_SESSION_ID_INVALID" });
  await assert.rejects(chat.fork({ fromStep: "x" }), { code: "STEADFAST_INVALID_INPUT" });
  assert.deepEqual((await chat.history()).map((t) => t.turn), [2, 1], "the source session is unchanged");

  const paused = await session.send("Refund order 7");
  assert.equal(paused.status, "awaiting-approval");
  await assert.rejects(session.fork({ fromStep: 1 }), { code: "STEADFAST_SESSION_AWAITING_APPROVAL" });
  assert.equal(await session.discardPending(), "s1.turn-1");
  assert.equal(await session.discardPending(), null);
  assert.deepEqual(await agent.pending(), []);
  // The dropped turn's approval is withdrawn with it: gone from the inbox at once, and deciding it runs nothing.
  assert.deepEqual(await agent.approvals.list(), []);
  await assert.rejects(agent.approvals.resolve({ id: paused.approvalId, approved: true }), { code: "STEADFAST_APPROVAL_NOT_FOUND" });
  assert.equal(counts.refunds, 0);
  assert.deepEqual(await session.history(), []);
});

test("bad session ids and options are refused with codes", async () => {
  const agent = createAgent({ model: mockModel(["ok"]), store: memoryStore() });
  for (const id of ["", "a.b", "has space", "x".repeat(129), "a/b"]) {
    assert.throws(() => agent.session({ id }), (e) => e instanceof SteadfastError && e.code === "STEADFAST_SESSION_ID_INVALID", id);
  }
  for (const bad of [undefined, null, {}, { id: 7 }]) {
    assert.throws(() => agent.session(bad), { code: "STEADFAST_SESSION_ID_INVALID" });
  }
  assert.equal(agent.session({ id: "x".repeat(128) }).id.length, 128);
  const s = agent.session({ id: "ok" });
  await assert.rejects(s.history({ limit: -1 }), { code: "STEADFAST_INVALID_INPUT" });
  await assert.rejects(s.history({ limit: 1.5 }), { code: "STEADFAST_INVALID_INPUT" });
  await assert.rejects(s.send(42), { code: "STEADFAST_INVALID_INPUT" });
});

test("session.send passes events and onEvent through", async () => {
  const agent = createAgent({ model: mockModel(["hi"]), store: memoryStore() });
  const seen = [];
  const r = await agent.session({ id: "ev" }).send("hello", { events: true, onEvent: (e) => seen.push(e.type) });
  assert.ok(r.events.length > 0);
  assert.deepEqual(seen, r.events.map((e) => e.type));
  assert.equal(r.events[0].runId, "ev.turn-1");
});
