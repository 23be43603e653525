// The Workers AI provider through the built Worker (build/) under workerd, KV mode: the `AI` binding replaced by
// a JS implementation (a Miniflare wrapped binding) whose `run(model, input)` asks this test what to answer, over
// a service binding, and answers it: with `stream: true` a ReadableStream of server-sent-event bytes, split at
// awkward points (inside `data:`, inside a multi-byte character), its later chunks held until the test releases
// them; else a whole JSON output.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import { Miniflare, Response } from "miniflare";
import { apiCaller } from "./support/api.mjs";
import { builtWorker } from "./support/built.mjs";
import { sseReader } from "./support/sse.mjs";

const TOKEN = "test-token-0123456789";
const BASE = "http://localhost";
const MODEL = "@cf/meta/llama-3.3-70b-instruct-fp8-fast";
const HOLD_MS = 4000;
const call = apiCaller(TOKEN, BASE);
const instances = [];
after(async () => {
  for (const mf of instances) await mf.dispose();
});

// The binding: each `run` posts {model, input} to CONTROL /run and gets its answer's plan back:
// {whole: output} or {chunks: [[bytes], …], holdAfter?: n, fail?: "message"}. A stream sends its first
// `holdAfter` chunks, waits until CONTROL /hold answers (once the test releases it), sends the rest, then closes
// (or errors with `fail`).
const FAKE_AI = `
// Named Ai: workers-rs accepts a binding as the AI binding by its constructor's name.
class Ai {
  constructor(env) {
    this.control = (path, body) => env.CONTROL.fetch("http://control" + path, { method: "POST", body: JSON.stringify(body ?? {}) });
  }
  async run(model, input) {
    const control = this.control;
    const plan = await (await control("/run", { model, input })).json();
    if (!input.stream) return plan.whole;
    const chunks = plan.chunks.map((c) => new Uint8Array(c));
    let i = 0;
    return new ReadableStream({
      async pull(controller) {
        if (i === plan.holdAfter) await (await control("/hold")).text();
        if (i < chunks.length) {
          controller.enqueue(chunks[i++]);
          if (i === chunks.length) await (await control("/sent")).text();
        } else if (plan.fail) {
          controller.error(new Error(plan.fail));
        } else {
          controller.close();
        }
      },
    });
  }
}
export default function (env) {
  return new Ai(env);
}`;

const encoder = new TextEncoder();
// An SSE body in Workers AI's shape: one event per text piece, a usage event, then [DONE] (unless `done` is false).
function sseBytes(pieces, done = true) {
  let body = pieces.map((p) => `data: ${JSON.stringify({ response: p, p: "abc" })}\n\n`).join("");
  body += `data: ${JSON.stringify({ response: "", usage: { prompt_tokens: 21, completion_tokens: pieces.length, total_tokens: 21 + pieces.length } })}\n\n`;
  if (done) body += "data: [DONE]\n\n";
  return encoder.encode(body);
}
// `bytes` cut at these offsets (ascending), as arrays of byte values.
function cut(bytes, offsets) {
  const ends = [...offsets, bytes.length];
  assert.deepEqual(ends, [...ends].sort((a, b) => a - b), "ascending cuts");
  return ends.map((end, i) => Array.from(bytes.slice(i ? ends[i - 1] : 0, end)));
}

// A Worker whose AI binding answers with `plans` in order; `log` records the binding's calls and what it sent,
// and what the test saw, in order. `release()` lets a held stream go on.
function worker(plans, { stream = true, timeoutMs } = {}) {
  assert.ok(fs.existsSync("build/index.js"), "build/index.js is missing: run ./scripts/build-worker");
  const state = { calls: [], log: [], release: null };
  const released = new Promise((r) => (state.release = r));
  const mf = new Miniflare({
    cf: false,
    workers: [
      {
        name: "steadfast",
        ...builtWorker(),
        kvNamespaces: ["RUNS"],
        durableObjects: { RUN_OBJECTS: { className: "RunObject", useSQLite: true } },
        bindings: {
          STEADFAST_TOKEN: TOKEN,
          STEADFAST_CONFIG: JSON.stringify({ model: { provider: "workers-ai", model: MODEL, stream, maxTokens: 64, ...(timeoutMs ? { timeoutMs } : {}) } }),
        },
        wrappedBindings: { AI: "fake-ai" },
      },
      {
        name: "fake-ai",
        modules: true,
        script: FAKE_AI,
        serviceBindings: {
          async CONTROL(req) {
            const path = new URL(req.url).pathname;
            const body = await req.json();
            if (path === "/run") {
              state.calls.push(body);
              state.log.push(`ai: call ${state.calls.length}`);
              const plan = plans[state.calls.length - 1];
              if (!plan) return Response.json({ whole: { response: "no plan left" } });
              return Response.json(plan);
            }
            // Held until released, or HOLD_MS: a Worker that buffers fails on the order, it does not hang.
            if (path === "/hold") await Promise.race([released, new Promise((r) => setTimeout(r, HOLD_MS).unref())]);
            if (path === "/sent") state.log.push("ai: last chunk sent");
            return new Response("ok");
          },
        },
      },
    ],
  });
  instances.push(mf);
  return { mf, state };
}

const post = (mf, id, accept = "text/event-stream") =>
  mf.dispatchFetch(`${BASE}/runs/${id}`, {
    method: "POST",
    headers: { authorization: `Bearer ${TOKEN}`, accept, "content-type": "application/json" },
    body: JSON.stringify({ input: "Say hello to Zürich" }),
  });

// Every event of an SSE answer; `onEvent` sees each as it arrives.
async function readAll(res, onEvent = () => {}) {
  assert.equal(res.status, 200);
  assert.match(res.headers.get("content-type"), /text\/event-stream/);
  const sse = sseReader(res.body);
  const events = [];
  let e;
  while ((e = await sse.next())) {
    events.push(e);
    onEvent(e);
  }
  return events;
}

const deltas = (events, attempt) => events.filter((e) => e.type === "text.delta" && (attempt === undefined || e.attempt === attempt));

test("Workers AI streaming: text.delta events arrive while the binding's stream is still open, add up to the final text, and the run finishes", async () => {
  const pieces = ["Hel", "lo, ", "Zü", "rich", "!"];
  const bytes = sseBytes(pieces);
  const text = new TextDecoder().decode(bytes);
  // Cuts: inside the first `data:`, inside the first event's JSON, inside the "ü" (a two-byte character), between
  // the `\n\n` of an event, and one byte before the end.
  const u = bytes.indexOf(0xc3);
  const second = text.indexOf('data: {"response":"lo');
  const chunks = cut(bytes, [3, 12, second - 1, u + 1, u + 30, bytes.length - 1]);
  // Held after the chunk that completes the first two events; the rest is sent once the client saw a delta.
  const { mf, state } = worker([{ chunks, holdAfter: 4 }]);
  const events = await readAll(await post(mf, "wai-1"), (e) => {
    if (e.type === "text.delta" && !state.log.includes("client: first text.delta")) {
      state.log.push("client: first text.delta");
      state.release();
    }
  });
  assert.deepEqual(state.log, ["ai: call 1", "client: first text.delta", "ai: last chunk sent"]);
  assert.deepEqual(deltas(events).map((e) => e.text), pieces, "one delta per event, the split character whole");
  assert.ok(deltas(events).every((e) => e.step === 1 && e.attempt === 1));
  events.forEach((e, i) => assert.equal(e.seq, i, "gapless seq"));
  assert.equal(events[0].type, "run.start");
  assert.equal(events.at(-1).type, "run.done");
  const [{ model, input }] = state.calls;
  assert.equal(model, MODEL);
  assert.equal(input.stream, true);
  assert.equal(input.max_tokens, 64);
  assert.ok(Array.isArray(input.messages), `the input is a plain object with a messages array: ${JSON.stringify(input)}`);
  assert.deepEqual(input.messages.at(-1), { role: "user", content: "Say hello to Zürich" });
  const view = await call(mf, "GET", "/runs/wai-1");
  assert.equal(view.json.status, "finished", view.text);
  assert.equal(view.json.messages.at(-1).content, pieces.join(""));
  assert.equal(deltas(events).map((e) => e.text).join(""), view.json.messages.at(-1).content);
});

test("Workers AI streaming: a stream that errors mid-way and one that ends without [DONE] are retried; the run finishes with the complete answer", async () => {
  const whole = sseBytes(["Good", "bye"]);
  const plans = [
    { chunks: cut(sseBytes(["Par", "tial"], false), [20]), fail: "network connection lost" },
    { chunks: cut(sseBytes(["Cut", " short"], false), [9]) },
    { chunks: cut(whole, [5, 40]) },
  ];
  const { mf, state } = worker(plans);
  state.release();
  const events = await readAll(await post(mf, "wai-2"));
  assert.equal(state.calls.length, 3, "one call per attempt, the runtime retrying");
  assert.deepEqual(deltas(events, 1).map((e) => e.text), ["Par", "tial"], "the failed attempt's deltas were live");
  assert.deepEqual(deltas(events, 2).map((e) => e.text), ["Cut", " short"]);
  assert.deepEqual(deltas(events, 3).map((e) => e.text), ["Good", "bye"]);
  assert.equal(events.at(-1).type, "run.done");
  const view = await call(mf, "GET", "/runs/wai-2");
  assert.equal(view.json.status, "finished", view.text);
  assert.equal(view.json.messages.at(-1).content, "Goodbye");
  assert.equal(view.json.messages.filter((m) => m.role === "assistant").length, 1, "only the completed turn is recorded");
});

test("Workers AI streaming: a stream that stalls is cut at model.timeoutMs (STEADFAST_PROVIDER_TIMEOUT, retried), not left hanging", async () => {
  const plans = [
    // Sends one event, then holds the rest (HOLD_MS, never released): the call must not wait for it.
    { chunks: cut(sseBytes(["Sta", "lled"]), [encoder.encode(`data: ${JSON.stringify({ response: "Sta", p: "abc" })}\n\n`).length]), holdAfter: 1 },
    { chunks: cut(sseBytes(["On", " time"]), [12]) },
  ];
  const { mf, state } = worker(plans, { timeoutMs: 400 });
  const started = Date.now();
  const events = await readAll(await post(mf, "wai-4"));
  const took = Date.now() - started;
  assert.ok(took < HOLD_MS, `cut after the timeout, not after the hold: ${took} ms`);
  assert.equal(state.calls.length, 2, "the timed-out call was retried once");
  assert.deepEqual(deltas(events, 1).map((e) => e.text), ["Sta"], "the stalled attempt's first delta was live");
  assert.deepEqual(deltas(events, 2).map((e) => e.text), ["On", " time"]);
  const view = await call(mf, "GET", "/runs/wai-4");
  assert.equal(view.json.status, "finished", view.text);
  assert.equal(view.json.messages.at(-1).content, "On time");
  // A binding whose every call stalls: the run fails with the timeout's code once the retries are spent.
  const stalled = Array.from({ length: 10 }, () => ({ chunks: cut(sseBytes(["x"]), [10]), holdAfter: 1 }));
  const { mf: mf2 } = worker(stalled, { timeoutMs: 200 });
  const failed = await call(mf2, "POST", "/runs/wai-5", { input: "hello" });
  assert.equal(failed.status, 502, failed.text);
  assert.equal(failed.json.error.code, "STEADFAST_PROVIDER_TIMEOUT", failed.text);
});

test("Workers AI without stream: the binding gets a plain JSON input without `stream` and its whole answer is the turn", async () => {
  const { mf, state } = worker([{ whole: { response: "Hello whole", usage: { prompt_tokens: 5, completion_tokens: 2 } } }], { stream: false });
  const events = await readAll(await post(mf, "wai-3"));
  assert.equal(deltas(events).length, 0, "nothing streamed");
  assert.equal(events.at(-1).type, "run.done");
  const [{ model, input }] = state.calls;
  assert.equal(model, MODEL);
  assert.equal(input.stream, undefined);
  assert.ok(Array.isArray(input.messages), `the input is a plain object with a messages array: ${JSON.stringify(input)}`);
  assert.deepEqual(input.messages.at(-1), { role: "user", content: "Say hello to Zürich" });
  const view = await call(mf, "GET", "/runs/wai-3");
  assert.equal(view.json.status, "finished", view.text);
  assert.equal(view.json.messages.at(-1).content, "Hello whole");
});
