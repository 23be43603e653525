// Self-healing hooks: progressGuard stops a run that keeps failing the same way (hint, deny, stop, each a
// heal.action event); outputCheck turns a tool output that fails a check into an error result the model reads.
import test from "node:test";
import assert from "node:assert/strict";
import { createAgent, defineTool, memoryStore, mockModel, outputCheck, progressGuard, SteadfastError } from "steadfast";

const failing = () =>
  defineTool({
    name: "lookup",
    description: "Find an order",
    inputSchema: { type: "object", properties: { id: { type: "string" } }, required: ["id"] },
    execute: async ({ id }) => {
      throw new Error(`order ${id} not found`);
    },
  });

test("progressGuard: the same failing call forever ends with STEADFAST_RUN_NO_PROGRESS after hint, deny, stop", async () => {
  const script = Array.from({ length: 50 }, () => ({ toolCalls: [{ name: "lookup", args: { id: "x9" } }] }));
  const model = mockModel(script, { mode: "by-turn" });
  const agent = createAgent({
    model,
    tools: [failing()],
    hooks: [progressGuard()],
    store: memoryStore(),
    loopWindow: 0, // only the guard stops this run
    maxSteps: 40,
  });
  const events = [];
  const err = await agent
    .send("Where is order x9?", { sessionId: "guard-1", onEvent: (e) => events.push(e) })
    .then(() => assert.fail("the run should not finish"), (e) => e);
  assert.ok(err instanceof SteadfastError, `got ${err}`);
  assert.equal(err.code, "STEADFAST_RUN_NO_PROGRESS");
  assert.equal(err.retryable, false);
  assert.equal(err.runId, "guard-1");

  const heal = events.filter((e) => e.type === "heal.action");
  const actions = heal.map((e) => e.action);
  assert.ok(actions.includes("hint"), `actions: ${actions}`);
  assert.ok(actions.includes("deny"), `actions: ${actions}`);
  assert.equal(actions.at(-1), "stop");
  assert.ok(actions.indexOf("hint") < actions.indexOf("deny"));
  for (const e of heal) {
    assert.equal(e.tool, "lookup");
    assert.equal(typeof e.reason, "string");
    assert.equal(typeof e.toolCallId, "string");
  }
  // defaults: hints after 2 failures, 3 denials, then the stop
  assert.equal(actions.filter((a) => a === "deny").length, 3);
  // the model saw the hint in a tool result
  const hinted = model.calls.some((c) =>
    c.messages.some((m) => m.role === "tool" && m.isError && m.content.includes("[steadfast]")),
  );
  assert.ok(hinted, "a hinted tool result reached the model");
});

test("progressGuard options are passed through (denyAfter 1, maxDenials 0: stop at the second call)", async () => {
  const script = Array.from({ length: 10 }, () => ({ toolCalls: [{ name: "lookup", args: { id: "x9" } }] }));
  const model = mockModel(script, { mode: "by-turn" });
  const agent = createAgent({
    model,
    tools: [failing()],
    hooks: [progressGuard({ hintAfter: 1, denyAfter: 1, maxDenials: 0 })],
    store: memoryStore(),
    loopWindow: 0,
  });
  const events = [];
  await assert.rejects(agent.send("go", { sessionId: "guard-2", onEvent: (e) => events.push(e) }), (e) => {
    assert.equal(e.code, "STEADFAST_RUN_NO_PROGRESS");
    return true;
  });
  assert.deepEqual(
    events.filter((e) => e.type === "heal.action").map((e) => e.action),
    ["hint", "stop"],
  );
  assert.equal(model.calls.length, 2);
});

test("progressGuard rejects invalid options as a config error", () => {
  assert.throws(
    () => createAgent({ model: mockModel([]), hooks: [progressGuard({ maxDenials: -1 })], store: memoryStore() }),
    (e) => e instanceof SteadfastError && e.code === "STEADFAST_CONFIG_INVALID",
  );
});

test("outputCheck: an empty tool output becomes an error result the model reads", async () => {
  const search = defineTool({
    name: "search",
    description: "Search",
    inputSchema: { type: "object" },
    execute: async () => "",
  });
  const seenCalls = [];
  const nonEmpty = outputCheck("nonEmpty", (call, output) => {
    seenCalls.push(call);
    return output.trim() === "" ? "the tool returned nothing" : null;
  });
  const model = mockModel([{ toolCalls: [{ name: "search", args: { q: "socks" } }] }, "Nothing found."]);
  const events = [];
  const agent = createAgent({ model, tools: [search], hooks: [nonEmpty], store: memoryStore() });
  const r = await agent.send("Find socks", { sessionId: "check-1", onEvent: (e) => events.push(e) });
  assert.equal(r.status, "finished");
  const seen = model.calls[1].messages.at(-1);
  assert.equal(seen.role, "tool");
  assert.equal(seen.isError, true);
  assert.ok(seen.content.startsWith("output check failed"), seen.content);
  assert.ok(seen.content.includes("the tool returned nothing"), seen.content);
  assert.equal(seenCalls.length, 1);
  assert.equal(seenCalls[0].name, "search");
  assert.deepEqual(seenCalls[0].args, { q: "socks" });
  const heal = events.filter((e) => e.type === "heal.action");
  assert.equal(heal.length, 1);
  assert.equal(heal[0].action, "check");
});

test("outputCheck: a passing check leaves the output alone; a throwing check is a failure reason", async () => {
  const echo = defineTool({
    name: "echo",
    description: "Echo",
    inputSchema: { type: "object" },
    execute: async (args) => String(args.text),
  });
  const model = mockModel(
    [{ toolCalls: [{ name: "echo", args: { text: "fine" } }] }, { toolCalls: [{ name: "echo", args: { text: "boom" } }] }, "done"],
  );
  const check = outputCheck("noBoom", (_call, output) => {
    if (output === "boom") throw new Error("exploded");
    return undefined;
  });
  const agent = createAgent({ model, tools: [echo], hooks: [check], store: memoryStore() });
  const r = await agent.send("go", { sessionId: "check-2" });
  assert.equal(r.status, "finished");
  const first = model.calls[1].messages.at(-1);
  assert.equal(first.isError, false);
  assert.equal(first.content, "fine");
  const second = model.calls[2].messages.at(-1);
  assert.equal(second.isError, true);
  assert.ok(second.content.startsWith("output check failed: check threw: exploded"), second.content);
});
