// Names the documents use: `PropagatingToolError`, `createAgent({ provider })`, `run.sessionId` on pending
// runs, and a standalone `compareTrajectories(a, b)` over two checkpoints or transcripts.
import test from "node:test";
import assert from "node:assert/strict";
import {
  compareTrajectories,
  createAgent,
  defineTool,
  memoryStore,
  mockModel,
  PropagatedToolError,
  PropagatingToolError,
  SteadfastError,
} from "steadfast";

function tripAgent(store) {
  const weather = defineTool({ name: "weather", description: "Forecast", execute: async () => ({ forecast: "sun" }) });
  // The plan depends on whether the user said it will rain.
  const model = {
    id: "trip-model",
    async generate({ messages }) {
      if (!messages.some((m) => m.role === "assistant")) return { toolCalls: [{ name: "weather", args: { city: "Oslo" } }] };
      return { text: messages.some((m) => m.role === "user" && m.content.includes("rain")) ? "Plan: museum." : "Plan: picnic." };
    },
  };
  return createAgent({ provider: model, tools: [weather], store });
}

test("PropagatingToolError is PropagatedToolError: it rejects the run with STEADFAST_TOOL_PROPAGATED, resumable", async () => {
  assert.equal(PropagatingToolError, PropagatedToolError);
  const e = new PropagatingToolError("process died", { retryable: false });
  assert.ok(e instanceof PropagatedToolError);
  let fail = true;
  const tool = defineTool({
    name: "ship",
    description: "Ship",
    execute: async () => {
      if (fail) throw new PropagatingToolError("process died");
      return "shipped";
    },
  });
  const agent = createAgent({ provider: mockModel([{ toolCalls: [{ name: "ship" }] }, "done"], { mode: "by-turn" }), tools: [tool], store: memoryStore() });
  await assert.rejects(agent.send("go", { sessionId: "p-1" }), (err) => {
    assert.equal(err.code, "STEADFAST_TOOL_PROPAGATED");
    assert.equal(err.message, "process died");
    assert.equal(err.retryable, true);
    return true;
  });
  const [run] = await agent.pending();
  assert.equal(run.sessionId, "p-1");
  assert.equal(run.runId, "p-1");
  fail = false;
  assert.equal((await agent.resume(run.sessionId)).text, "done");
});

test("an agent needs a model (or provider)", () => {
  assert.throws(() => createAgent({ store: memoryStore() }), (e) => e instanceof SteadfastError && e.code === "STEADFAST_CONFIG_INVALID");
});

test("compareTrajectories(a, b) over two checkpoints equals the agent method over their ids", async () => {
  const store = memoryStore();
  const agent = tripAgent(store);
  await agent.send("Plan my trip", { sessionId: "trip" });
  const fork = await agent.fork("trip", { fromStep: 1, patch: { appendInput: "It will rain, plan for that." } });
  await agent.resume(fork.runId);
  const original = await agent.load("trip");
  const replayed = await agent.load(fork.runId);
  const standalone = compareTrajectories(original, replayed);
  assert.deepEqual(standalone, await agent.compareTrajectories("trip", fork.runId));
  const { divergedAt, a, b, drift } = standalone;
  assert.equal(divergedAt, 2);
  assert.equal(a.length, 2);
  assert.equal(b.length, 2);
  assert.equal(typeof drift, "object");
  // Transcripts work too, and a run compared with itself has not diverged.
  assert.equal(compareTrajectories(original.messages, original.messages).divergedAt, null);
  assert.equal(compareTrajectories(original.messages, replayed.messages).divergedAt, 2);
  // A history entry's checkpoint is a checkpoint.
  const [newest] = await agent.history("trip");
  assert.deepEqual(compareTrajectories(newest.checkpoint, original), compareTrajectories(original, original));
});

test("compareTrajectories refuses what is neither a checkpoint nor a transcript", () => {
  for (const [a, b] of [["trip", []], [[], 3], [{ status: "finished" }, []], [[{ role: "nobody" }], []], [undefined, []]]) {
    assert.throws(() => compareTrajectories(a, b), (e) => e instanceof SteadfastError && e.code === "STEADFAST_INVALID_INPUT");
  }
});
