// Circuit breakers through the npm package (issue 31, part 4): `createAgent({ breaker })`. A provider whose recent
// calls failed enough is not called for the cool-down: the next fallback takes the call, or it fails at once
// with STEADFAST_PROVIDER_CIRCUIT_OPEN (retryable); after the cool-down one probe decides. An AI SDK model's
// provider (`openai` of `openai:gpt-4o`) is its dependency: its models share one breaker.
import test from "node:test";
import assert from "node:assert/strict";
import { createAgent, memoryStore, ProviderHttpError, SteadfastError } from "steadfast";

const usage = { inputTokens: 10, outputTokens: 5 };

function model(id, state) {
  const m = {
    id,
    calls: 0,
    async generate() {
      m.calls += 1;
      if (state.down) throw new ProviderHttpError(503, "scripted 503");
      return { text: `from ${id}`, stopReason: "stop", usage };
    },
  };
  return m;
}

const retry = { maxAttempts: 2, baseMs: 1, capMs: 2 };
const breaker = { minCalls: 4, failurePercent: 50, coolDownMs: 60_000 };

test("an open breaker fails calls at once, without calling the provider", async () => {
  const state = { down: true };
  const primary = model("acme:big", state);
  const agent = createAgent({ model: primary, store: memoryStore(), retry, breaker });
  for (const id of ["b1", "b2"]) {
    await assert.rejects(agent.send("go", { sessionId: id }), (e) => e.code === "STEADFAST_PROVIDER_UNAVAILABLE");
  }
  assert.equal(primary.calls, 4, "two attempts each: 4 of 4 failed");
  state.down = false;
  const err = await agent.send("go", { sessionId: "b3" }).then(
    () => assert.fail("the breaker is open"),
    (e) => e,
  );
  assert.ok(err instanceof SteadfastError);
  assert.equal(err.code, "STEADFAST_PROVIDER_CIRCUIT_OPEN");
  assert.equal(err.retryable, true);
  assert.match(err.message, /'acme'/, "the dependency is the AI SDK provider");
  assert.equal(primary.calls, 4, "no call while open");
});

test("a model of the same provider shares its breaker; a fallback of another provider takes the calls", async () => {
  const state = { down: true };
  const big = model("acme:big", state);
  const small = model("acme:small", state);
  const other = model("other:m", { down: false });
  const agent = createAgent({ model: big, fallbacks: [small, other], store: memoryStore(), retry: { ...retry, maxAttempts: 3 }, breaker });
  // Each send: one attempt on big, one on small (both fail), then other answers. Two sends fail 4 calls of acme.
  for (const id of ["s1", "s2"]) {
    const r = await agent.send("go", { sessionId: id });
    assert.equal(r.text, "from other:m");
  }
  assert.equal(big.calls + small.calls, 4);
  const events = [];
  const r = await agent.send("go", { sessionId: "s3", onEvent: (e) => events.push(e) });
  assert.equal(r.text, "from other:m");
  assert.equal(big.calls + small.calls, 4, "acme is skipped while its breaker is open");
  const downs = events.filter((e) => e.type === "provider.fallback").map((e) => [e.from, e.to, e.code]);
  assert.deepEqual(downs, [
    ["acme:big", "acme:small", "STEADFAST_PROVIDER_CIRCUIT_OPEN"],
    ["acme:small", "other:m", "STEADFAST_PROVIDER_CIRCUIT_OPEN"],
  ]);
});

test("bad breaker options are refused with STEADFAST_CONFIG_INVALID", () => {
  for (const bad of [{ minCalls: "5" }, { coolDown: 1 }, 7]) {
    assert.throws(
      () => createAgent({ model: model("m", { down: false }), store: memoryStore(), breaker: bad }),
      (e) => e.code === "STEADFAST_CONFIG_INVALID",
      JSON.stringify(bad),
    );
  }
});

test("agent.metrics() counts retries, fallbacks and breaker refusals per agent", async () => {
  const state = { down: true };
  const big = model("acme:big", state);
  const other = model("other:m", { down: false });
  const agent = createAgent({ model: big, fallbacks: [other], store: memoryStore(), retry: { ...retry, maxAttempts: 3 }, breaker, name: "desk" });
  assert.deepEqual(await agent.metrics(), [], "nothing counted yet");
  // Two sends: two attempts on big (one retry), then other answers. The third: big's breaker is open.
  for (const id of ["m1", "m2", "m3"]) assert.equal((await agent.send("go", { sessionId: id })).text, "from other:m");
  const got = Object.fromEntries((await agent.metrics()).filter((s) => s.agent === "desk").map((s) => [s.name, s.value]));
  assert.deepEqual(got, {
    steadfast_model_calls_total: 7,
    steadfast_model_retries_total: 2,
    steadfast_fallbacks_total: 3,
    steadfast_breaker_refusals_total: 1,
    steadfast_loop_stops_total: 0,
    steadfast_budget_stops_total: 0,
    steadfast_reconciliations_total: 0,
    steadfast_quarantines_total: 0,
    steadfast_trace_spans_dropped_total: 0,
  });
});
