// Failures: a tool that throws gives the model an error result; provider errors shaped like HTTP answers are
// retried (429, 5xx) or not (401) by the runtime's one retry layer.
import test from "node:test";
import assert from "node:assert/strict";
import { createAgent, defineTool, memoryStore, mockModel, SteadfastError, testClock } from "steadfast";

test("a tool that rejects becomes an error result the model reads", async () => {
  const lookup = defineTool({
    name: "lookup",
    description: "Find an order",
    inputSchema: { type: "object", properties: { id: { type: "string" } }, required: ["id"] },
    execute: async ({ id }) => {
      throw new Error(`order ${id} not found`);
    },
  });
  const model = mockModel([{ toolCalls: [{ name: "lookup", args: { id: "x9" } }] }, "Sorry, no such order."]);
  const agent = createAgent({ model, tools: [lookup], store: memoryStore() });
  const r = await agent.send("Where is order x9?", { sessionId: "lookup-1" });
  assert.equal(r.status, "finished");
  assert.equal(r.text, "Sorry, no such order.");
  const seen = model.calls[1].messages.at(-1);
  assert.equal(seen.role, "tool");
  assert.equal(seen.isError, true);
  assert.equal(seen.content, "Error: order x9 not found");
  assert.equal(seen.kind, "execution");
});

test("the thrown-tool-error text is '<the error's name>: <its message>', as the docs say", async () => {
  const thrown = [new TypeError("bad id"), "plain string", Object.assign(new Error("custom"), { name: "LookupError" })];
  const expected = ["TypeError: bad id", "Error: plain string", "LookupError: custom"];
  for (const [i, value] of thrown.entries()) {
    const tool = defineTool({
      name: "lookup",
      description: "Find an order",
      execute: async () => {
        throw value;
      },
    });
    const model = mockModel([{ toolCalls: [{ name: "lookup" }] }, "ok"]);
    const agent = createAgent({ model, tools: [tool], store: memoryStore() });
    await agent.send("go", { sessionId: `text-${i}` });
    const seen = model.calls[1].messages.at(-1);
    assert.equal(seen.isError, true);
    assert.equal(seen.content, expected[i]);
  }
});

test("arguments that fail the input schema are a validation result; the tool does not run", async () => {
  let ran = 0;
  const lookup = defineTool({
    name: "lookup",
    description: "Find an order",
    inputSchema: { type: "object", properties: { id: { type: "string" } }, required: ["id"] },
    execute: async () => {
      ran += 1;
      return "found";
    },
  });
  const model = mockModel([{ toolCalls: [{ name: "lookup", args: { nope: 1 } }] }, "ok"]);
  const agent = createAgent({ model, tools: [lookup], store: memoryStore() });
  const r = await agent.send("go", { sessionId: "lookup-2" });
  assert.equal(ran, 0);
  assert.equal(r.messages.find((m) => m.role === "tool").kind, "validation");
});

test("a 429 from the model is retried by the runtime (Retry-After honoured, on a test clock: no real waiting)", async () => {
  const clock = testClock({ start: 1_000_000 });
  const script = mockModel([{ error: { status: 429, retryAfterMs: 45_000 } }, "ok after a retry"]);
  const calledAt = [];
  const model = { id: script.id, calls: script.calls, generate: (req) => (calledAt.push(clock.now()), script.generate(req)) };
  const agent = createAgent({ model, store: memoryStore(), clock });
  const started = Date.now();
  const r = await agent.send("hello", { sessionId: "retry-1", events: true });
  assert.equal(r.text, "ok after a retry");
  assert.equal(model.calls.length, 2);
  assert.equal(r.stats.modelCalls, 2);
  assert.ok(calledAt[1] - calledAt[0] >= 45_000, `waited at least Retry-After in virtual time: ${calledAt}`);
  assert.ok(Date.now() - started < 5_000, "and not in real time");
  assert.ok(clock.sleeps.some((ms) => ms >= 45_000), `the runtime asked for the Retry-After sleep: ${clock.sleeps}`);
  assert.equal(r.events.at(-1).type, "run.done");
  assert.deepEqual(r.events.map((e) => e.seq), r.events.map((_, i) => i + 1).map((n) => r.events[0].seq + n - 1));
});

test("a 401 is terminal: not retried, not retryable", async () => {
  const model = mockModel([{ error: { status: 401, message: "bad key" } }, "never"]);
  const agent = createAgent({ model, store: memoryStore() });
  await assert.rejects(agent.send("hello", { sessionId: "auth-1" }), (e) => {
    assert.ok(e instanceof SteadfastError);
    assert.equal(e.code, "STEADFAST_PROVIDER_AUTH");
    assert.equal(e.retryable, false);
    assert.equal(e.status, 401);
    return true;
  });
  assert.equal(model.calls.length, 1);
});

test("a custom model whose call rejects with a plain Error is a retried network error", async () => {
  let n = 0;
  const model = {
    id: "flaky",
    async generate(req) {
      n += 1;
      if (n === 1) throw new TypeError("fetch failed");
      return { text: `step ${req.step} ok`, toolCalls: [] };
    },
  };
  const agent = createAgent({ model, store: memoryStore(), clock: testClock() });
  const r = await agent.send("hi", { sessionId: "net-1" });
  assert.equal(r.text, "step 1 ok");
  assert.equal(n, 2);
});

test("the retry option is the runtime's retry policy: a model that keeps failing is asked maxAttempts times", async () => {
  for (const [retry, asked] of [[undefined, 4], [{ maxAttempts: 1 }, 1], [{ maxAttempts: 3, baseMs: 10 }, 3]]) {
    let calls = 0;
    const model = {
      id: "down",
      async generate() {
        calls += 1;
        throw Object.assign(new Error("unavailable"), { status: 503 });
      },
    };
    const agent = createAgent({ model, store: memoryStore(), clock: testClock(), ...(retry ? { retry } : {}) });
    await assert.rejects(agent.send("hi", { sessionId: "down-1" }), (e) => e.code === "STEADFAST_PROVIDER_UNAVAILABLE");
    assert.equal(calls, asked, JSON.stringify(retry));
  }
  assert.throws(
    () => createAgent({ model: mockModel(["x"]), store: memoryStore(), retry: { maxAttempts: "many" } }),
    (e) => e.code === "STEADFAST_CONFIG_INVALID" && /invalid agent options/.test(e.message),
  );
});

test("a backoff with a manual test clock waits until the clock is advanced past it", async () => {
  const clock = testClock({ start: 0, auto: false });
  const model = mockModel([{ error: { status: 503, retryAfterMs: 30_000 } }, "back"]);
  const agent = createAgent({ model, store: memoryStore(), clock });
  let settled = false;
  const sending = agent.send("hello", { sessionId: "manual-1" }).then((r) => ((settled = true), r));
  await clock.advance(29_000);
  assert.equal(settled, false, "not before Retry-After");
  assert.equal(model.calls.length, 1);
  await clock.advance(1_000);
  const r = await sending;
  assert.equal(r.text, "back");
  assert.equal(model.calls.length, 2);
  assert.equal(clock.waiting, 0, "no timer left behind (lost races are cancelled)");
});

test("a clock option without now/sleep, or whose now() is not a time, is a config error", () => {
  for (const clock of [{}, { now: () => 1 }, { now: () => "soon", sleep: async () => {} }, { now: () => -1, sleep: async () => {} }]) {
    assert.throws(() => createAgent({ model: mockModel([]), store: memoryStore(), clock }), { code: "STEADFAST_CONFIG_INVALID" });
  }
});

test("bad input and bad configuration are SteadfastErrors", async () => {
  const agent = createAgent({ model: mockModel(["x"]), store: memoryStore() });
  await assert.rejects(agent.send("hi", { sessionId: "bad id with spaces" }), { code: "STEADFAST_SESSION_ID_INVALID" });
  assert.throws(
    () => createAgent({ model: mockModel([]), store: memoryStore(), tools: [{ name: "a b", description: "", inputSchema: {}, execute() {} }] }),
    (e) => e instanceof SteadfastError && e.code === "STEADFAST_CONFIG_INVALID",
  );
  assert.throws(() => createAgent({ model: mockModel([]), store: memoryStore(), maxSteps: 0 }), { code: "STEADFAST_CONFIG_INVALID" });
});

test("a PropagatedToolError with an HTTP status leaves retryable to the core: 5xx, 408 and 429 retryable, another 4xx not, whatever the error says", async () => {
  const { PropagatedToolError } = await import("steadfast");
  for (const [status, given, want] of [
    [503, false, true],
    [429, undefined, true],
    [408, false, true],
    [401, true, false],
    [403, undefined, false],
    [400, true, false],
    [undefined, false, false],
    [undefined, undefined, true],
  ]) {
    const tool = {
      name: "call",
      description: "Calls a server",
      execute: () => {
        throw new PropagatedToolError(`server said ${status}`, { ...(given === undefined ? {} : { retryable: given }), ...(status === undefined ? {} : { status }) });
      },
    };
    const agent = createAgent({ model: mockModel([{ toolCalls: [{ name: "call", args: {} }] }, "done"]), tools: [tool], store: memoryStore() });
    await assert.rejects(agent.send("go", { sessionId: "s" }), (e) => {
      assert.equal(e.code, "STEADFAST_TOOL_PROPAGATED");
      assert.equal(e.retryable, want, `status ${status}, retryable given ${given}`);
      return true;
    });
  }
});
