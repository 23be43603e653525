// Wrong arguments from JavaScript: every value a caller hands the package where an id, a note, a flag or a number
// belongs is answered with a coded SteadfastError — never a wasm trap ("memory access out of bounds": wasm-bindgen
// read a number or an object as a string's bytes) or an uncoded TypeError — and the agent goes on working.
// Every method below is tried with every wrong value (the whole matrix).
import test from "node:test";
import assert from "node:assert/strict";
import { createAgent, durableObjectStore, memoryStore, mockModel, SteadfastError } from "steadfast";

const NOT_STRINGS = [5, 0, NaN, -1.5, {}, [], ["a"], null, undefined, true, () => "a", Symbol("s"), 10n, new String("boxed")];
const NOT_NUMBERS = ["50", "x", {}, [], null, true, () => 5, Symbol("n"), 10n, NaN, Infinity, -1, 1.5];
const NOT_BOOLEANS = ["yes", 1, 0, {}, null, undefined, Symbol("b"), 1n];
const NOT_NOTES = [5, {}, [], true, Symbol("note"), 2n];

// A SQLite storage's shape, enough for the store's checks (node has no Durable Objects).
const storage = {
  sql: { exec: () => ({ raw: () => [][Symbol.iterator](), rowsWritten: 0 }) },
  transactionSync: (f) => f(),
};

const agent = createAgent({ model: mockModel(["One.", "Two.", "Three."]), store: memoryStore() });
const drain = async (iterable) => {
  for await (const _ of iterable);
};

/** [label, the call with a wrong value, the codes it may answer with, the wrong values]. */
const cases = [
  ["send's sessionId", (v) => agent.send("hi", { sessionId: v }), ["STEADFAST_INVALID_INPUT"], NOT_STRINGS],
  ["stream's sessionId", (v) => drain(agent.stream("hi", { sessionId: v })), ["STEADFAST_INVALID_INPUT"], NOT_STRINGS],
  ["resume's id", (v) => agent.resume(v), ["STEADFAST_INVALID_INPUT"], NOT_STRINGS],
  ["runOnce's deliveryId", (v) => agent.runOnce(v, "hi"), ["STEADFAST_INVALID_INPUT"], NOT_STRINGS],
  ["load's id", (v) => agent.load(v), ["STEADFAST_INVALID_INPUT"], NOT_STRINGS],
  ["delete's id", (v) => agent.delete(v), ["STEADFAST_INVALID_INPUT"], NOT_STRINGS],
  ["history's id", (v) => agent.history(v), ["STEADFAST_INVALID_INPUT"], NOT_STRINGS],
  ["fork's id", (v) => agent.fork(v, { fromStep: 0 }), ["STEADFAST_INVALID_INPUT"], NOT_STRINGS],
  ["compareTrajectories' first id", (v) => agent.compareTrajectories(v, "a"), ["STEADFAST_INVALID_INPUT"], NOT_STRINGS],
  ["compareTrajectories' second id", (v) => agent.compareTrajectories("a", v), ["STEADFAST_INVALID_INPUT"], NOT_STRINGS],
  ["approvals.resolve's id", (v) => agent.approvals.resolve({ id: v, approved: true }), ["STEADFAST_INVALID_INPUT"], NOT_STRINGS],
  ["approvals.resolve's approved", (v) => agent.approvals.resolve({ id: "apr_x", approved: v }), ["STEADFAST_INVALID_INPUT"], NOT_BOOLEANS],
  ["approvals.resolve's note", (v) => agent.approvals.resolve({ id: "apr_x", approved: true, note: v }), ["STEADFAST_INVALID_INPUT"], NOT_NOTES],
  ["session's id", (v) => agent.session({ id: v }), ["STEADFAST_SESSION_ID_INVALID"], NOT_STRINGS],
  ["history's limit", (v) => agent.history("a", v), ["STEADFAST_INVALID_INPUT"], NOT_NUMBERS.filter((v) => v != null)],
  ["a session's history limit", (v) => agent.session({ id: "s" }).history({ limit: v }), ["STEADFAST_INVALID_INPUT"], NOT_NUMBERS.filter((v) => v != null)],
  ["durableObjectStore's prefix", (v) => durableObjectStore({ storage }, { prefix: v }), ["STEADFAST_CONFIG_INVALID"], NOT_NOTES],
];

const show = (v) => (typeof v === "symbol" ? v.toString() : typeof v === "bigint" ? `${v}n` : typeof v === "function" ? "a function" : JSON.stringify(v) ?? String(v));

test("every wrong id, flag, note, limit or prefix is a coded error, never a wasm trap, and the agent goes on", async () => {
  let tried = 0;
  for (const [label, call, codes, values] of cases) {
    for (const v of values) {
      const where = `${label} = ${show(v)}`;
      let error;
      try {
        await call(v);
      } catch (e) {
        error = e;
      }
      assert.ok(error instanceof SteadfastError, `${where}: ${error?.name}: ${error?.message ?? "no error"}`);
      assert.ok(codes.includes(error.code), `${where}: ${error.code}: ${error.message}`);
      tried++;
    }
  }
  assert.equal(tried, cases.reduce((n, c) => n + c[3].length, 0));
  // Nothing was recorded by a refused call, and the agent works as before.
  assert.deepEqual(await agent.pending(), []);
  const r = await agent.send("hi", { sessionId: "after" });
  assert.deepEqual([r.status, r.text], ["finished", "One."]);
  assert.equal((await agent.history("after")).length > 0, true);
});

test("createAgent and mockModel refuse what is not a model, a tool list, a tool or a hook list with STEADFAST_CONFIG_INVALID", () => {
  const model = mockModel(["hi"]);
  const store = memoryStore();
  const wrong = [
    ["tools: 5", () => createAgent({ model, store, tools: 5 })],
    ["tools: {}", () => createAgent({ model, store, tools: {} })],
    ["tools: [null]", () => createAgent({ model, store, tools: [null] })],
    ["tools: [5]", () => createAgent({ model, store, tools: [5] })],
    ["a tool without execute", () => createAgent({ model, store, tools: [{ name: "a", description: "d" }] })],
    ["a tool whose execute is a string", () => createAgent({ model, store, tools: [{ name: "a", description: "d", execute: "run" }] })],
    ["hooks: 5", () => createAgent({ model, store, hooks: 5 })],
    ["model: 5", () => createAgent({ model: 5, store })],
    ["a model without generate", () => createAgent({ model: { id: "m" }, store })],
    ["a model whose generate is an object", () => createAgent({ model: { id: "m", generate: {} }, store })],
    ["mockModel(5)", () => mockModel(5)],
    ["mockModel(null)", () => mockModel(null)],
  ];
  for (const [label, make] of wrong) {
    assert.throws(make, (e) => e instanceof SteadfastError && e.code === "STEADFAST_CONFIG_INVALID", label);
  }
});

test("a null options object reads as none, and an onEvent that is not a function is STEADFAST_INVALID_INPUT", async () => {
  const agent = createAgent({ model: mockModel(["a", "b", "c", "d"], { mode: "by-turn" }), store: memoryStore() });
  const session = agent.session({ id: "nulls" });
  assert.equal((await session.send("hi", null)).status, "finished");
  assert.deepEqual(await session.resume(null), { sessionId: "nulls", resumed: false, reason: "nothing to resume" });
  assert.equal((await session.history(null)).length, 1);
  assert.deepEqual(await agent.resume("nulls.turn-1", null), { runId: "nulls.turn-1", resumed: false, reason: "nothing to resume" });
  assert.equal((await agent.sweep(null)).examined, 0);
  assert.deepEqual(await agent.fireSchedule([], null), []);
  const loop = agent.startSchedules([], null);
  await loop.stop();
  const recovery = agent.recover(null);
  await recovery.stop();
  assert.equal((await agent.runOnce("d-1", "hi", null)).outcome, "ran");
  for (const onEvent of [5, "log", {}, true]) {
    for (const [label, call] of [
      ["send", () => agent.send("hi", { sessionId: `ev-${typeof onEvent}`, onEvent })],
      ["a session's send", () => session.send("again", { onEvent })],
      ["resume", () => agent.resume("x", { onEvent })],
      ["approvals.resolve", () => agent.approvals.resolve({ id: "apr_x", approved: true }, { onEvent })],
    ]) {
      await assert.rejects(call(), (e) => e instanceof SteadfastError && e.code === "STEADFAST_INVALID_INPUT", `${label}: ${onEvent}`);
    }
  }
  assert.deepEqual(await agent.pending(), [], "nothing was started by a refused call");
});

test("a model reply JSON cannot write (a cycle, a BigInt) is STEADFAST_PROVIDER_INVALID_RESPONSE, not retried", async () => {
  const cycle = { text: "x" };
  cycle.self = cycle;
  for (const reply of [cycle, { text: 10n }, { toolCalls: [{ name: "t", args: { n: 1n } }] }]) {
    let calls = 0;
    const model = { id: "m", generate: async () => (calls++, reply) };
    const agent = createAgent({ model, store: memoryStore() });
    await assert.rejects(
      agent.send("go", { sessionId: "bad-reply" }),
      (e) => e instanceof SteadfastError && e.code === "STEADFAST_PROVIDER_INVALID_RESPONSE" && e.retryable === false,
    );
    assert.equal(calls, 1, "a wrong answer is not asked for again");
  }
});
