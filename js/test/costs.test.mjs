// Cost through the npm package (issue 31, part 2): `createAgent({ prices, maxCostUsd, sessionBudget })`. A turn's
// cost is its tokens at the price of the model that answered (`prices`, dollars per million tokens, over the
// built-in table), reported as `usage.costUsd` per turn (its `step` event), per run and per conversation, left out
// when a price is unknown; cached and reasoning tokens from the AI SDK adapter are priced by their own entries;
// `maxCostUsd` stops a run as the other limits do, and needs a price.
import test from "node:test";
import assert from "node:assert/strict";
import { aiSdkModel, createAgent, memoryStore, SteadfastError } from "steadfast";

const usage = { inputTokens: 10, outputTokens: 5 };
// $2 and $10 per million tokens: a turn costs 10 × $0.000002 + 5 × $0.00001 = $0.00007.
const prices = { priced: { input: 2, output: 10 } };

function looping(id, toolTurns) {
  const model = {
    id,
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

test("costUsd is each turn's tokens at its model's price, summed for the run and the conversation", async () => {
  const agent = createAgent({ model: looping("priced", 2), tools: [lookup], store: memoryStore(), prices });
  const steps = [];
  const r = await agent.send("go", { sessionId: "c1", onEvent: (e) => e.type === "step" && steps.push(e.usage.costUsd) });
  assert.deepEqual(steps, [0.00007, 0.00007, 0.00007]);
  assert.equal(r.usage.costUsd, 0.00021);
  assert.equal(r.totalUsage.costUsd, 0.00021);
  const again = await agent.send("more", { sessionId: "c1" });
  assert.equal(again.usage.costUsd, 0.00007);
  assert.equal(again.totalUsage.costUsd, 0.00028);
  assert.equal((await agent.load("c1")).totalUsage.costUsd, 0.00028, "recorded");
});

test("a model without a price has no costUsd, and leaves the conversation's total without one", async () => {
  const store = memoryStore();
  const priced = createAgent({ model: looping("priced", 0), store, prices });
  assert.equal((await priced.send("go", { sessionId: "c2" })).usage.costUsd, 0.00007);
  const unpriced = createAgent({ model: looping("unpriced", 0), store, prices, onAgentDrift: "ignore" });
  const r = await unpriced.send("more", { sessionId: "c2" });
  assert.equal("costUsd" in r.usage, false);
  assert.equal("costUsd" in r.totalUsage, false);
  assert.equal(r.usage.inputTokens, 10, "tokens are counted all the same");
});

test("maxCostUsd stops a run before the call after it is reached; throw gives the dollars", async () => {
  const model = looping("priced", 10);
  const agent = createAgent({ model, tools: [lookup], store: memoryStore(), prices, maxSteps: 100, maxCostUsd: 0.0001 });
  const r = await agent.send("go", { sessionId: "c3" });
  assert.equal(r.finishReason, "budget-exceeded");
  assert.equal(model.calls, 2);
  assert.match(r.note, /maxCostUsd \$0\.0001, used \$0\.00014/);
  const throwing = createAgent({ model, tools: [lookup], store: memoryStore(), prices, maxSteps: 100, maxCostUsd: 0.0001, onExceeded: "throw" });
  await assert.rejects(throwing.send("go", { sessionId: "c4" }), (e) => {
    assert.equal(e.code, "STEADFAST_BUDGET_EXCEEDED");
    assert.deepEqual(e.details, { limit: "maxCostUsd", max: 0.0001, used: 0.00014 });
    return true;
  });
  const session = createAgent({ model: looping("priced", 0), store: memoryStore(), prices, sessionBudget: { maxCostUsd: 0.00015 } });
  const reasons = [];
  for (const m of ["one", "two", "three", "four"]) reasons.push((await session.send(m, { sessionId: "c5" })).finishReason);
  assert.deepEqual(reasons, ["stop", "stop", "stop", "budget-exceeded"]);
});

test("cached and reasoning tokens from the AI SDK are priced by their own entries", async () => {
  const sdk = {
    specificationVersion: "v3",
    provider: "test",
    modelId: "cachey",
    async doGenerate() {
      return {
        content: [{ type: "text", text: "ok" }],
        finishReason: { unified: "stop", raw: "stop" },
        usage: {
          inputTokens: { total: 1000, noCache: 200, cacheRead: 600, cacheWrite: 200 },
          outputTokens: { total: 100, text: 40, reasoning: 60 },
        },
      };
    },
    async doStream() {
      throw new Error("not streamed here");
    },
  };
  const table = { cachey: { input: 1, output: 10, cachedInput: 0.1, cacheWrite: 1.25, reasoning: 20 } };
  // The adapter's id is "test:cachey": priced by its model id.
  const agent = createAgent({ model: aiSdkModel(sdk), store: memoryStore(), prices: table });
  const r = await agent.send("go", { sessionId: "c6" });
  assert.deepEqual(
    { ...r.usage },
    { inputTokens: 1000, outputTokens: 100, cachedInputTokens: 600, cacheWriteTokens: 200, reasoningTokens: 60, costUsd: 0.00211 },
  );
  // 200 × $1 + 600 × $0.1 + 200 × $1.25 + 40 × $10 + 60 × $20, per million: $0.00211.
});

test("a cost limit without a price, and bad prices, are refused with STEADFAST_CONFIG_INVALID", () => {
  for (const bad of [
    { maxCostUsd: 1 },
    { sessionBudget: { maxCostUsd: 1 } },
    { prices, maxCostUsd: 0 },
    { prices, maxCostUsd: -1 },
    { prices: { priced: { input: -1, output: 1 } } },
    { prices: { priced: { input: 1 } } },
    { prices: { priced: { input: 1, output: 1, cached: 1 } } },
    { prices: { priced: { input: "1", output: 1 } } },
  ]) {
    assert.throws(
      () => createAgent({ model: looping(bad.prices ? "priced" : "unpriced", 1), store: memoryStore(), ...bad }),
      (e) => e instanceof SteadfastError && e.code === "STEADFAST_CONFIG_INVALID",
      JSON.stringify(bad),
    );
  }
  assert.ok(createAgent({ model: looping("priced", 1), store: memoryStore(), prices, maxCostUsd: 1 }));
  assert.ok(createAgent({ model: looping("gpt-4o-mini", 1), store: memoryStore(), maxCostUsd: 1 }), "a built-in price");
});
