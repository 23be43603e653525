// Messages to a running run (steering, issue 29 part 4) through the npm package: `send(input, {queue: true})`
// while another execution holds the run records the message and resolves at once with `queued.applied: false`;
// the execution that holds the run applies it at its next step boundary, once, after the results of the turn;
// `interrupt` stops the calls that have not started (`not-run` results naming the message); with no execution
// holding the run the queued send runs it itself; sessions take it too; bad options are refused with codes.
import test from "node:test";
import assert from "node:assert/strict";
import { createAgent, memoryStore, SteadfastError } from "steadfast";

/** The user messages of a transcript. */
const userTexts = (run) => run.messages.filter((m) => m.role === "user").map((m) => m.content);

/** A model that calls `calls` first (once), then answers with the last user message it saw. */
function callsThenEcho(calls, beforeFirst) {
  let first = true;
  return {
    id: "echo",
    async generate(request) {
      if (first) {
        first = false;
        await beforeFirst?.();
        if (calls.length > 0) {
          return { toolCalls: calls.map((c, i) => ({ id: `call_${i}`, name: c, args: {} })), stopReason: "tool_calls" };
        }
      }
      return { text: `heard: ${userTexts(request).at(-1)}`, stopReason: "stop" };
    },
  };
}

test("a message sent while a tool runs is applied once, after the tool's result, by the execution that holds the run", async () => {
  const store = memoryStore();
  const replies = [];
  let other;
  const lookup = {
    name: "lookup",
    description: "looks something up",
    execute: async () => {
      replies.push(await other.send("use the EU warehouse", { sessionId: "r1", queue: true }));
      return "found 3";
    },
  };
  const make = () => createAgent({ model: callsThenEcho(["lookup"]), tools: [lookup], store, steerPollMs: 0 });
  const agent = make();
  other = make();
  const events = [];
  const done = await agent.send("ship order 9", { sessionId: "r1", onEvent: (e) => events.push(e) });
  assert.equal(replies.length, 1);
  assert.equal(replies[0].status, "in-progress", "the stored run, as it was: nothing ran in the sender");
  assert.equal(replies[0].queued.applied, false);
  assert.match(replies[0].queued.messageId, /^msg_/);
  assert.equal(done.status, "finished");
  assert.equal(done.text, "heard: use the EU warehouse");
  assert.deepEqual(userTexts(done), ["ship order 9", "use the EU warehouse"]);
  const roles = done.messages.map((m) => m.role);
  assert.ok(roles.indexOf("tool") < roles.lastIndexOf("user"), "the message follows the tool's result");
  const applied = events.filter((e) => e.type === "message.applied");
  assert.deepEqual(applied.map((e) => e.messageId), [replies[0].queued.messageId]);
});

test("an interrupting message stops the calls that have not started", async () => {
  const store = memoryStore();
  let other;
  let charged = 0;
  const charge = { name: "charge", description: "charges", execute: async () => { charged += 1; return "charged"; } };
  const agent = createAgent({
    model: callsThenEcho(["charge", "charge"], async () => {
      const r = await other.send("stop, the customer cancelled", { sessionId: "r2", queue: true, interrupt: true });
      assert.equal(r.queued.applied, false);
    }),
    tools: [charge],
    store,
    steerPollMs: 0,
  });
  other = createAgent({ model: callsThenEcho([]), tools: [charge], store, steerPollMs: 0 });
  const done = await agent.send("charge twice", { sessionId: "r2" });
  assert.equal(charged, 0, "neither call ran");
  const results = done.messages.filter((m) => m.role === "tool");
  assert.equal(results.length, 2);
  for (const r of results) {
    assert.equal(r.kind, "not-run");
    assert.equal(JSON.parse(r.content).steeredBy.startsWith("msg_"), true);
  }
  assert.equal(done.text, "heard: stop, the customer cancelled");
});

test("with no execution holding the run, a queued send runs it; sessions take queue too", async () => {
  const agent = createAgent({ model: callsThenEcho([]), store: memoryStore(), steerPollMs: 0 });
  await agent.send("hello", { sessionId: "r3" });
  const done = await agent.send("one more thing", { sessionId: "r3", queue: true });
  assert.equal(done.queued.applied, true);
  assert.equal(done.text, "heard: one more thing");
  const session = agent.session({ id: "chat" });
  await session.send("first");
  const next = await session.send("second", { queue: true });
  assert.equal(next.text, "heard: second", "a finished turn: the next turn, as a send");
});

test("queue is refused with codes: steering off, interrupt without queue, unknown options", async () => {
  const agent = createAgent({ model: callsThenEcho([]), store: memoryStore(), steerPollMs: null });
  await agent.send("hello", { sessionId: "r4" });
  const code = async (p, want) =>
    assert.rejects(p, (e) => {
      assert.ok(e instanceof SteadfastError, `${e}`);
      assert.equal(e.code, want, e.message);
      return true;
    });
  await code(agent.send("again", { sessionId: "r4", queue: true }), "STEADFAST_INVALID_INPUT");
  await code(agent.send("again", { sessionId: "r4", interrupt: true }), "STEADFAST_INVALID_INPUT");
  await code(agent.send("again", { sessionId: "r4", queu: true }), "STEADFAST_CONFIG_INVALID");
  assert.deepEqual(userTexts(await agent.load("r4")), ["hello"]);
});
