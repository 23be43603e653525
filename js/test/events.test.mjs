// Events: `onEvent` sees each event as it happens; `stream` yields them; a failed execution ends in `error`.
import test from "node:test";
import assert from "node:assert/strict";
import { createAgent, defineTool, memoryStore, mockModel, PropagatedToolError, SteadfastError } from "steadfast";

const echo = defineTool({
  name: "echo",
  description: "Echo",
  inputSchema: { type: "object" },
  execute: async (args) => args,
});

test("onEvent is called while the run runs, with gapless seq", async () => {
  const seenByTool = [];
  const events = [];
  const probe = defineTool({
    name: "probe",
    description: "Looks at the events so far",
    inputSchema: { type: "object" },
    execute: async () => {
      seenByTool.push(events.map((e) => e.type));
      return "ok";
    },
  });
  const agent = createAgent({
    model: mockModel([{ toolCalls: [{ name: "probe", args: {} }] }, "done"]),
    tools: [probe],
    store: memoryStore(),
  });
  const r = await agent.send("go", { sessionId: "ev-1", onEvent: (e) => events.push(e) });
  assert.equal(r.status, "finished");
  assert.ok(seenByTool[0].includes("run.start"), "events arrived before the run ended");
  assert.ok(seenByTool[0].includes("tool.start"));
  assert.equal(events[0].type, "run.start");
  assert.equal(events.at(-1).type, "run.done");
  events.forEach((e, i) => assert.equal(e.seq, events[0].seq + i));
  assert.ok(events.every((e) => e.runId === "ev-1" && typeof e.v === "number"));
});

test("stream yields the events of a run", async () => {
  const agent = createAgent({
    model: mockModel([{ toolCalls: [{ name: "echo", args: { a: 1 } }] }, "done"]),
    tools: [echo],
    store: memoryStore(),
  });
  const types = [];
  for await (const e of agent.stream("go", { sessionId: "ev-2" })) types.push(e.type);
  assert.equal(types[0], "run.start");
  assert.ok(types.includes("tool.done"));
  assert.equal(types.at(-1), "run.done");
});

test("stream of a failing execution yields its events, then throws", async () => {
  const boom = defineTool({
    name: "boom",
    description: "Dies",
    inputSchema: { type: "object" },
    execute: async () => {
      throw new PropagatedToolError("crashed");
    },
  });
  const agent = createAgent({
    model: mockModel([{ toolCalls: [{ name: "boom", args: {} }] }]),
    tools: [boom],
    store: memoryStore(),
  });
  const events = [];
  await assert.rejects(
    (async () => {
      for await (const e of agent.stream("go", { sessionId: "ev-3" })) events.push(e);
    })(),
    (e) => e instanceof SteadfastError && e.code === "STEADFAST_TOOL_PROPAGATED",
  );
  assert.equal(events[0].type, "run.start");
  const error = events.find((e) => e.type === "error");
  assert.equal(error.error.code, "STEADFAST_TOOL_PROPAGATED");
  assert.equal(events.at(-1).type, "run.done");
  assert.equal(events.at(-1).status, "in-progress", "the run stays resumable");
});

test("an AbortSignal aborts the run; tools in flight get cancelled results and the run stays resumable", async () => {
  const controller = new AbortController();
  let started = 0;
  const slow = defineTool({
    name: "slow",
    description: "Waits",
    inputSchema: { type: "object" },
    execute: async () => {
      started += 1;
      setTimeout(() => controller.abort(), 5);
      await new Promise((r) => setTimeout(r, 200));
      return "late";
    },
  });
  const agent = createAgent({
    model: mockModel([{ toolCalls: [{ name: "slow", args: {} }] }, "done"]),
    tools: [slow],
    store: memoryStore(),
  });
  const r = await agent.send("go", { sessionId: "ab-1", signal: controller.signal });
  assert.equal(r.status, "in-progress");
  assert.equal(r.finishReason, "aborted");
  assert.equal(started, 1);
  const cp = await agent.load("ab-1");
  const result = cp.messages.find((m) => m.role === "tool");
  assert.equal(result?.kind, "cancelled");
  const resumed = await agent.resume("ab-1");
  assert.equal(resumed.text, "done");
  assert.equal(started, 1, "the cancelled call is not run again; the model reads its result");
});

test("a streaming model's increments reach onEvent while it answers, and stream yields them before their step", async () => {
  const events = [];
  let seenWhileAnswering = null;
  const model = {
    id: "streamy",
    async generate(request, stream) {
      assert.ok(stream, "the run's events are listened to: the model may stream");
      stream.reasoning("Thinking…");
      stream.text("Hel");
      await new Promise((resolve) => setTimeout(resolve, 5));
      seenWhileAnswering = events.filter((e) => e.type.endsWith(".delta")).map((e) => e.text);
      stream.text("lo!");
      return { text: "Hello!" };
    },
  };
  const agent = createAgent({ model, store: memoryStore() });
  const r = await agent.send("hi", { sessionId: "ev-delta", onEvent: (e) => events.push(e) });
  assert.equal(r.text, "Hello!");
  assert.deepEqual(seenWhileAnswering, ["Thinking…", "Hel"], "increments were delivered before the answer");
  assert.deepEqual(
    events.filter((e) => e.type === "text.delta").map((e) => [e.step, e.attempt, e.text]),
    [[1, 1, "Hel"], [1, 1, "lo!"]],
  );
  events.forEach((e, i) => assert.equal(e.seq, events[0].seq + i));
  assert.deepEqual(r.messages.at(-1), { role: "assistant", content: "Hello!" }, "only the completed turn is recorded");

  const streamed = [];
  for await (const e of agent.stream("again", { sessionId: "ev-delta-2" })) streamed.push(e.type);
  assert.ok(streamed.indexOf("text.delta") < streamed.indexOf("step"), streamed.join(","));

  let given = "unset";
  const quiet = createAgent({
    model: { id: "quiet", async generate(_request, stream) { given = stream; return { text: "ok" }; } },
    store: memoryStore(),
  });
  await quiet.send("hi", { sessionId: "q-1" });
  assert.equal(given, undefined, "nobody listens: the model is not asked to stream");
});

test("a model call in flight gets an abort signal: aborted when the run is aborted, left alone when the call settles", async () => {
  const signals = [];
  const model = {
    id: "waits",
    generate(request, stream, signal) {
      signals.push(signal);
      if (request.messages.some((m) => m.role === "user" && m.content === "answer")) return Promise.resolve({ text: "ok" });
      // Answers only when aborted (as a fetch given the signal rejects).
      return new Promise((_, reject) => signal.addEventListener("abort", () => reject(new Error("request cancelled")), { once: true }));
    },
  };
  const agent = createAgent({ model, store: memoryStore() });
  const controller = new AbortController();
  setTimeout(() => controller.abort(), 20);
  const r = await agent.send("wait", { sessionId: "model-abort", signal: controller.signal });
  assert.equal(r.finishReason, "aborted");
  assert.equal(r.status, "in-progress", "the run stays resumable");
  assert.equal(signals.length, 1);
  assert.equal(signals[0].aborted, true, "the model's call was told to stop");

  const done = await agent.send("answer", { sessionId: "model-settles" });
  assert.equal(done.text, "ok");
  assert.equal(signals.length, 2);
  assert.equal(signals[1].aborted, false, "a settled call's signal is never aborted");
});
