// What crosses the wasm boundary per model request: the core sends each run's new messages only (the facade
// holds the run's array, src/runtime/feed.rs decides), and the whole transcript again whenever it cannot prove
// the facade's array is the request's prefix (a new execution, a new agent object, a fork, a holder that lost
// its array). Every frame crossing from wasm to JS is counted here by wrapping the facade's own holder; the
// user's model must see exactly the request it saw before (the full transcript) at every step.
import test from "node:test";
import assert from "node:assert/strict";
import "steadfast"; // loads the wasm core
import { transcriptHolder } from "../dist/agent.js";
import { newAgent, newMemoryStore } from "../dist/low_level.js";
import { lowLevelTool } from "../dist/tools.js";

const INSTRUCTIONS = "You reconcile orders with the lookup and quote tools.";
const RESULT = "order status: open; warehouse: north-2; items: 3; customer tier: gold; total: 219.19; ".repeat(5);
const TOOLS = [
  { name: "lookup", description: "Looks an order up", inputSchema: { type: "object", properties: { order: { type: "integer" } } } },
  { name: "quote", description: "Quotes an order", inputSchema: { type: "object", properties: { order: { type: "integer" } } } },
];
const calls = (i) => [
  { id: `call_${i}_0`, name: "lookup", args: { order: 1000 + i } },
  { id: `call_${i}_1`, name: "quote", args: { order: 1000 + i } },
];

/** The transcript a scripted two-tool run has before step `k` (1-based), rebuilt by hand. */
function expected(prompt, k, tag = "") {
  const out = [
    { role: "system", content: INSTRUCTIONS },
    { role: "user", content: prompt },
  ];
  for (let i = 0; i < k - 1; i++) {
    out.push({ role: "assistant", content: "", toolCalls: calls(i), usage: { inputTokens: 1, outputTokens: 1 } });
    for (const c of calls(i))
      out.push({ role: "tool", toolCallId: c.id, name: c.name, content: `${c.name}${tag}: ${RESULT}`, isError: false, kind: "execution" });
  }
  return out;
}

/**
 * A scripted model (call k of a run: the two calls of step k until `steps`, then text) that checks every request
 * against `expected` as it comes: the new messages deeply, the older ones by identity with the previous request
 * of the run (they were checked then, and they are frozen).
 */
function checkingModel(steps, prompts, tag = () => "") {
  const seen = new Map(); // runId -> last request
  const model = {
    id: "scripted",
    requests: 0,
    async generate(request) {
      model.requests++;
      const { runId, step, messages, tools } = request;
      assert.deepEqual(Object.keys(request), ["runId", "messages", "tools", "step"]);
      assert.deepEqual(tools, TOOLS);
      const want = expected(prompts[runId], step, tag(runId));
      assert.equal(messages.length, want.length, `${runId} step ${step}: transcript length`);
      const prev = seen.get(runId);
      for (let i = 0; i < want.length; i++) {
        if (!(prev && prev.messages[i] === messages[i] && Object.isFrozen(messages[i])))
          assert.deepEqual(messages[i], want[i], `${runId} step ${step}: message ${i}`);
      }
      seen.set(runId, request);
      const i = step - 1;
      return i < steps
        ? { toolCalls: calls(i), usage: { inputTokens: 1, outputTokens: 1 } }
        : { text: "done", usage: { inputTokens: 1, outputTokens: 1 } };
    },
  };
  return model;
}

/** The facade's holder over `model`, with every frame crossing from wasm recorded (`frames`). */
function counted(model) {
  const low = { holder: transcriptHolder(model), frames: [] };
  low.model = {
    id: model.id,
    generate: async (frameJson) => {
      low.frames.push(frameJson);
      return low.holder.generate(frameJson);
    },
    release: (runId) => low.holder.release(runId),
  };
  return low;
}

/** The two tools; `fail(runId, order, name)` true makes that call a propagated error (the run is rejected, resumable). */
function tools({ tag = () => "", fail = () => false } = {}) {
  return TOOLS.map((t) =>
    lowLevelTool({
      ...t,
      execute: async ({ order }, ctx) => {
        await new Promise((r) => setImmediate(r)); // let other runs interleave
        if (fail(ctx.runId, order, t.name)) throw Object.assign(new Error("quote service down"), { propagate: true });
        return `${t.name}${tag(ctx.runId)}: ${RESULT}`;
      },
    }),
  );
}

const agentOver = (low, store, steps, toolOpts) =>
  newAgent({ model: low.model, tools: tools(toolOpts), instructions: INSTRUCTIONS, maxSteps: steps + 1 }, store);
const send = async (agent, runId, input) => JSON.parse(await agent.send(runId, JSON.stringify({ input }), null, null, null));
const frame = (json) => JSON.parse(json);
const bytes = (v) => Buffer.byteLength(typeof v === "string" ? v : JSON.stringify(v));

for (const steps of [10, 100, 500]) {
  test(`a ${steps}-step two-tool run sends each step's new messages only, and the model sees the whole transcript`, async () => {
    const prompt = `reconcile ${steps}`;
    const model = checkingModel(steps, { r: prompt });
    const low = counted(model);
    const r = await send(agentOver(low, newMemoryStore(), steps), "r", prompt);
    assert.equal(r.status, "finished");
    assert.deepEqual(r.messages, [...expected(prompt, steps + 1), { role: "assistant", content: "done", usage: { inputTokens: 1, outputTokens: 1 } }]);
    assert.equal(low.frames.length, steps + 1, "one frame per model call");
    assert.equal(model.requests, steps + 1);
    const first = frame(low.frames[0]);
    assert.equal(first.reset, true);
    assert.deepEqual(first.tools, TOOLS);
    let worst = 0;
    for (let k = 2; k <= steps + 1; k++) {
      const f = frame(low.frames[k - 1]);
      assert.ok(!f.reset && f.tools === undefined, `step ${k} is a delta without the tools`);
      const fresh = expected(prompt, k).slice(expected(prompt, k - 1).length);
      assert.equal(f.base, expected(prompt, k - 1).length);
      assert.deepEqual(f.messages, fresh);
      worst = Math.max(worst, bytes(low.frames[k - 1]) / bytes(fresh));
      // What a step sends besides its new messages does not grow with the run (runId, step, base).
      assert.ok(bytes(low.frames[k - 1]) - bytes(fresh) <= 64, `step ${k}: ${bytes(low.frames[k - 1])} bytes`);
    }
    assert.ok(worst <= 4, `crossing bytes per step over the new messages' bytes: ${worst.toFixed(2)} (goal ≤ 4)`);
    // Released when the execution ended: a delta for the run is refused now.
    assert.equal(await low.holder.generate(JSON.stringify({ runId: "r", step: 1, base: 2, messages: [] })), null);
  });
}

test("resume after a failed execution, on the same and on a new agent object: the first frame is the whole transcript", async () => {
  const steps = 6;
  const store = newMemoryStore();
  const prompts = { r: "p" };
  const first = counted(checkingModel(steps, prompts));
  // A propagated tool error at step 4 rejects the execution (resumable).
  let failing = true;
  const fail = (runId, order, name) => failing && order === 1003 && name === "quote" && !(failing = false);
  const b = agentOver(first, store, steps, { fail });
  await assert.rejects(b.send("r", JSON.stringify({ input: "p" }), null, null, null), (e) => e.code === "STEADFAST_TOOL_PROPAGATED");
  const before = first.frames.length;
  assert.equal(before, 4);
  // Resumed by a new agent object (a new facade holder, as after a crash): a reset, then deltas.
  const second = counted(checkingModel(steps, prompts));
  const c = agentOver(second, store, steps);
  const r = JSON.parse(await c.resume("r", null, null, null));
  assert.equal(r.status, "finished");
  assert.equal(frame(second.frames[0]).reset, true);
  assert.equal(frame(second.frames[0]).messages.length, expected("p", 5).length);
  assert.deepEqual(frame(second.frames[0]).tools, TOOLS);
  assert.ok(second.frames.slice(1).every((f) => !frame(f).reset));

  // The same agent object again (a new execution): the first frame is a reset, without the tools it already has.
  prompts.r2 = "p2";
  const again = await send(b, "r2", "p2");
  assert.equal(again.status, "finished");
  const r2 = first.frames.slice(before).map(frame);
  assert.equal(r2[0].reset, true);
  assert.equal(r2[0].tools, undefined, "the holder kept the tools");
  assert.ok(r2.slice(1).every((f) => !f.reset));
});

test("two runs interleaved on one agent keep their own transcripts", async () => {
  const steps = 20;
  const prompts = { a: "run a", b: "run b" };
  const model = checkingModel(steps, prompts, (runId) => `/${runId}`);
  const low = counted(model);
  const agent = agentOver(low, newMemoryStore(), steps, { tag: (runId) => `/${runId}` });
  const [ra, rb] = await Promise.all([send(agent, "a", "run a"), send(agent, "b", "run b")]);
  assert.equal(ra.status, "finished");
  assert.equal(rb.status, "finished");
  const frames = low.frames.map(frame);
  const order = frames.map((f) => f.runId).join("");
  assert.ok(/ab|ba/.test(order) && /(ab.*ba|ba.*ab)/.test(order), `the runs interleaved: ${order}`);
  assert.equal(frames.filter((f) => f.reset).length, 2, "one reset per run");
  assert.equal(model.requests, 2 * (steps + 1));
});

test("a fork is resumed from the whole forked transcript", async () => {
  const steps = 5;
  const prompts = { o: "orig" };
  const model = checkingModel(steps, prompts);
  const low = counted(model);
  const agent = agentOver(low, newMemoryStore(), steps);
  assert.equal((await send(agent, "o", "orig")).status, "finished");
  const fork = JSON.parse(await agent.fork("o", JSON.stringify({ fromStep: 3, newId: "o-fork" })));
  prompts["o-fork"] = "orig";
  const n = low.frames.length;
  const r = JSON.parse(await agent.resume("o-fork", null, null, null));
  assert.equal(r.status, "finished");
  const frames = low.frames.slice(n).map(frame);
  assert.equal(frames[0].runId, fork.runId);
  assert.equal(frames[0].reset, true);
  assert.ok(frames[0].messages.length >= 2);
  assert.ok(frames.slice(1).every((f) => !f.reset && f.runId === "o-fork"));
});

test("a holder that lost its array mid-run asks for the whole transcript again", async () => {
  const steps = 8;
  const model = checkingModel(steps, { r: "p" });
  const low = counted(model);
  let k = 0;
  const inner = low.model.generate;
  low.model.generate = async (json) => {
    if (++k === 4) low.holder = transcriptHolder(model); // a new facade holder: nothing held
    return inner(json);
  };
  const agent = agentOver(low, newMemoryStore(), steps);
  const r = await send(agent, "r", "p");
  assert.equal(r.status, "finished");
  const frames = low.frames.map(frame);
  assert.equal(model.requests, steps + 1, "the model is asked once per step");
  assert.equal(frames.length, steps + 2, "one frame more: the refused delta and its reset");
  assert.equal(frames[3].reset, undefined);
  assert.equal(frames[4].reset, true);
  assert.deepEqual(frames[4].tools, TOOLS, "the tools again too");
  assert.equal(frames[4].messages.length, expected("p", 4).length);
});
