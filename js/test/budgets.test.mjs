// Budgets through the npm package (issue 31, part 1): `createAgent({ maxInputTokens, maxOutputTokens,
// maxTotalTokens, maxDurationMs, sessionBudget, onExceeded })`. A run that reaches a limit finishes with finish
// reason `budget-exceeded` before its next model call, its note naming the limit; `onExceeded: "throw"` rejects
// with STEADFAST_BUDGET_EXCEEDED (details: limit, max, used); the run resumes in place once the limit is raised
// (under the same one the resume is refused, nothing written); a session budget counts the conversation; bad
// budget options are refused with codes.
import test from "node:test";
import assert from "node:assert/strict";
import { createAgent, memoryStore, SteadfastError } from "steadfast";

const usage = { inputTokens: 10, outputTokens: 5 };

/** A model that asks for `lookup` until the run has `toolTurns` turns, then answers; `calls` counts. */
function looping(toolTurns) {
  const model = {
    id: "looping",
    calls: 0,
    async generate(request) {
      model.calls += 1;
      const turns = request.messages.filter((m) => m.role === "assistant").length;
      if (turns < toolTurns) return { toolCalls: [{ id: `c${turns}`, name: "lookup", args: {} }], stopReason: "tool_calls", usage };
      return { text: "done", stopReason: "stop", usage };
    },
  };
  return model;
}

const lookup = { name: "lookup", description: "Looks up", execute: async () => "42" };

test("a run stops at maxTotalTokens before its next model call, with a note naming the limit", async () => {
  const model = looping(10);
  const agent = createAgent({ model, tools: [lookup], store: memoryStore(), maxSteps: 100, maxTotalTokens: 40 });
  const r = await agent.send("go", { sessionId: "b1" });
  assert.equal(r.status, "finished");
  assert.equal(r.finishReason, "budget-exceeded");
  assert.equal(model.calls, 3, "the third turn crosses 40; no fourth call");
  assert.equal(r.usage.inputTokens + r.usage.outputTokens, 45);
  assert.match(r.note, /maxTotalTokens 40, used 45/);
  assert.equal(r.messages.at(-1).role, "tool", "the crossing turn's call has its result");
  assert.deepEqual(await agent.pending(), [], "nothing left for the sweep");
});

test("a raised limit resumes the run in place; the same limit refuses without calling the model", async () => {
  const store = memoryStore();
  const model = looping(4);
  const tight = createAgent({ model, tools: [lookup], store, maxSteps: 100, maxTotalTokens: 30 });
  const stopped = await tight.send("go", { sessionId: "b2" });
  assert.equal(stopped.finishReason, "budget-exceeded");
  await assert.rejects(tight.resume("b2"), (e) => e instanceof SteadfastError && e.code === "STEADFAST_BUDGET_EXCEEDED" && !e.retryable);
  assert.equal(model.calls, 2);
  const raised = createAgent({ model, tools: [lookup], store, maxSteps: 100, maxTotalTokens: 1000 });
  const done = await raised.resume("b2");
  assert.equal(done.finishReason, "stop");
  assert.equal(done.text, "done");
  assert.equal(done.steps, 5, "steps go on from the stop");
  assert.equal(model.calls, 5, "each turn called once");
});

test("onExceeded: 'throw' rejects with STEADFAST_BUDGET_EXCEEDED and its limit; the run is kept finished", async () => {
  const store = memoryStore();
  const agent = createAgent({ model: looping(10), tools: [lookup], store, maxSteps: 100, maxOutputTokens: 10, onExceeded: "throw" });
  await assert.rejects(agent.send("go", { sessionId: "b3" }), (e) => {
    assert.equal(e.code, "STEADFAST_BUDGET_EXCEEDED");
    assert.deepEqual(e.details, { limit: "maxOutputTokens", max: 10, used: 10 });
    return true;
  });
  const cp = await agent.load("b3");
  assert.equal(cp.status, "finished");
  assert.equal(cp.finishReason, "budget-exceeded");
});

test("sessionBudget counts every run of the conversation", async () => {
  const model = {
    id: "per-run",
    async generate(request) {
      return request.messages.at(-1).role === "user"
        ? { toolCalls: [{ id: `c${request.messages.length}`, name: "lookup", args: {} }], stopReason: "tool_calls", usage }
        : { text: "ok", stopReason: "stop", usage };
    },
  };
  const agent = createAgent({ model, tools: [lookup], store: memoryStore(), sessionBudget: { maxTotalTokens: 70 } });
  assert.equal((await agent.send("one", { sessionId: "b4" })).finishReason, "stop");
  assert.equal((await agent.send("two", { sessionId: "b4" })).finishReason, "stop");
  const third = await agent.send("three", { sessionId: "b4" });
  assert.equal(third.finishReason, "budget-exceeded");
  assert.match(third.note, /sessionBudget\.maxTotalTokens 70, used 75/);
});

test("bad budget options are refused with STEADFAST_CONFIG_INVALID", () => {
  for (const bad of [
    { maxTotalTokens: 0 },
    { maxDurationMs: -5 },
    { maxInputTokens: "many" },
    { onExceeded: "explode" },
    { sessionBudget: { maxTokens: 3 } },
    { sessionBudget: { maxTotalTokens: 0 } },
  ]) {
    assert.throws(
      () => createAgent({ model: looping(1), store: memoryStore(), ...bad }),
      (e) => e instanceof SteadfastError && e.code === "STEADFAST_CONFIG_INVALID",
      JSON.stringify(bad),
    );
  }
});

test("a sub-agent's child is bounded by what its lead had left (budgetCap), and the lead stops after it", async () => {
  const store = memoryStore();
  const lead = {
    id: "lead",
    calls: 0,
    async generate(request) {
      lead.calls += 1;
      return request.messages.some((m) => m.role === "assistant")
        ? { text: "reported", stopReason: "stop", usage }
        : { toolCalls: [{ id: "r1", name: "research", args: { task: "look it all up" } }], stopReason: "tool_calls", usage };
    },
  };
  const child = looping(10);
  const agent = createAgent({
    model: lead,
    store,
    maxTotalTokens: 60,
    subagents: [{ name: "research", description: "Researches", model: child, tools: [lookup], maxSteps: 100 }],
  });
  const r = await agent.send("go", { sessionId: "b5" });
  assert.equal(r.finishReason, "budget-exceeded");
  assert.equal(r.usage.inputTokens + r.usage.outputTokens, 60, "15 of its own, 45 of its child's");
  assert.equal(lead.calls, 1);
  assert.equal(child.calls, 3, "the child stopped on the 45 its lead had left");
  const [c] = await agent.children("b5");
  const cp = await agent.load(c.runId);
  assert.equal(cp.budgetCap.maxTotalTokens, 45);
  assert.equal(cp.finishReason, "budget-exceeded");
});
