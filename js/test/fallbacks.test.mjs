// Fallback models through the npm package (issue 31, part 3): `createAgent({ model, fallbacks: [backup] })`. When
// the agent's model fails with a retryable error past its share of the retry policy, the next model gets the same
// request; the turn records the model that answered, a `provider.fallback` event marks the step down, the turn is
// priced by the model that answered; a failure that is not retryable does not fall back; bad fallbacks are
// refused with STEADFAST_CONFIG_INVALID.
import test from "node:test";
import assert from "node:assert/strict";
import { createAgent, memoryStore, ProviderHttpError, SteadfastError } from "steadfast";

const usage = { inputTokens: 10, outputTokens: 5 };

function failing(id, status) {
  const model = {
    id,
    calls: 0,
    async generate() {
      model.calls += 1;
      throw new ProviderHttpError(status, `scripted ${status}`);
    },
  };
  return model;
}

function answering(id) {
  const model = {
    id,
    calls: 0,
    async generate(request) {
      model.calls += 1;
      const turns = request.messages.filter((m) => m.role === "assistant").length;
      if (turns === 0) return { toolCalls: [{ id: "c1", name: "lookup", args: {} }], stopReason: "tool_calls", usage };
      return { text: "from the backup", stopReason: "stop", usage };
    },
  };
  return model;
}

const lookup = { name: "lookup", description: "Looks up", execute: async () => "42" };
const retry = { baseMs: 1, capMs: 2 };

test("a model that fails every call falls back; the turns record the model that answered", async () => {
  const primary = failing("primary", 503);
  const backup = answering("backup");
  const agent = createAgent({
    model: primary,
    fallbacks: [backup],
    tools: [lookup],
    store: memoryStore(),
    retry,
    prices: { backup: { input: 1, output: 1 } },
  });
  const events = [];
  const r = await agent.send("go", { sessionId: "f1", onEvent: (e) => events.push(e) });
  assert.equal(r.text, "from the backup");
  assert.equal(primary.calls, 4, "two turns, its share (2 of 4 attempts) each");
  assert.equal(backup.calls, 2);
  assert.deepEqual(r.messages.filter((m) => m.role === "assistant").map((m) => m.model), ["backup", "backup"]);
  const stepDowns = events.filter((e) => e.type === "provider.fallback");
  assert.deepEqual(stepDowns.map((e) => [e.step, e.from, e.to, e.code]), [
    [1, "primary", "backup", "STEADFAST_PROVIDER_UNAVAILABLE"],
    [2, "primary", "backup", "STEADFAST_PROVIDER_UNAVAILABLE"],
  ]);
  assert.deepEqual(events.filter((e) => e.type === "step").map((e) => e.model), ["backup", "backup"]);
  assert.equal(r.usage.costUsd, 0.00003, "priced by the model that answered");
});

test("a failure that is not retryable does not fall back", async () => {
  const primary = failing("primary", 401);
  const backup = answering("backup");
  const agent = createAgent({ model: primary, fallbacks: [backup], store: memoryStore(), retry });
  await assert.rejects(agent.send("go", { sessionId: "f2" }), (e) => e.code === "STEADFAST_PROVIDER_AUTH");
  assert.deepEqual([primary.calls, backup.calls], [1, 0]);
});

test("the chain changes the agent's fingerprint; bad fallbacks are refused", () => {
  const plain = createAgent({ model: answering("primary"), store: memoryStore() });
  const chained = createAgent({ model: answering("primary"), fallbacks: [answering("backup")], store: memoryStore() });
  assert.notDeepEqual(plain.fingerprint, chained.fingerprint);
  for (const bad of [{ fallbacks: answering("b") }, { fallbacks: [{}] }, { fallbacks: [42] }]) {
    assert.throws(
      () => createAgent({ model: answering("primary"), store: memoryStore(), ...bad }),
      (e) => e instanceof SteadfastError && e.code === "STEADFAST_CONFIG_INVALID",
      JSON.stringify(bad),
    );
  }
});
