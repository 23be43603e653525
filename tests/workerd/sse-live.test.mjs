// The Worker's SSE answer is live (KV mode): each event is sent as it happens, a streamed provider's tokens
// reach the client while the provider is still writing, and a client that leaves does not stop the run.
// Against the built Worker (build/) under workerd, with a local streaming OpenAI-compatible server on 127.0.0.1
// whose later tokens wait for the test to release them. Prints `first_delta_ms=` (not asserted).
import { test, after } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import { Miniflare } from "miniflare";
import { apiCaller } from "./support/api.mjs";
import { startStreamingProvider as startProvider, sseReader, workerOptions } from "./support/sse.mjs";

const TOKEN = "test-token-0123456789";
const BASE = "http://localhost";
const call = apiCaller(TOKEN, BASE);
const instances = [];
after(async () => {
  for (const mf of instances) await mf.dispose();
});

function worker(port) {
  assert.ok(fs.existsSync("build/index.js"), "build/index.js is missing: run ./scripts/build-worker");
  const mf = new Miniflare(workerOptions(TOKEN, port));
  instances.push(mf);
  return mf;
}

const post = (mf, id) =>
  mf.dispatchFetch(`${BASE}/runs/${id}`, {
    method: "POST",
    headers: { authorization: `Bearer ${TOKEN}`, accept: "text/event-stream", "content-type": "application/json" },
    body: JSON.stringify({ input: "Say hello" }),
  });

test("SSE is live: the first text.delta reaches the client before the provider has sent its last token", async () => {
  const log = [];
  const p = await startProvider(log);
  after(() => p.server.close());
  const mf = worker(p.port);
  // Warm: the Worker loaded and its configuration parsed, so the figure below is the request's own.
  assert.equal((await mf.dispatchFetch(`${BASE}/health`)).status, 200);
  assert.equal((await call(mf, "GET", "/runs")).status, 200);
  const started = performance.now();
  const res = await post(mf, "live-1");
  assert.equal(res.status, 200);
  assert.match(res.headers.get("content-type"), /text\/event-stream/);
  const sse = sseReader(res.body);
  const events = [];
  let e;
  while ((e = await sse.next())) {
    events.push(e);
    if (e.type === "text.delta" && !log.includes("client: first text.delta")) {
      log.push("client: first text.delta");
      console.log(`first_delta_ms=${(performance.now() - started).toFixed(1)}`);
      p.state.release();
    }
  }
  assert.deepEqual(log, ["provider: first token", "client: first text.delta", "provider: last token"]);
  assert.deepEqual(events.filter((x) => x.type === "text.delta").map((x) => x.text), ["Hello", " world"]);
  events.forEach((x, i) => assert.equal(x.seq, i, "gapless seq"));
  assert.equal(events[0].type, "run.start");
  assert.equal(events.at(-1).type, "run.done");
  const view = await call(mf, "GET", "/runs/live-1");
  assert.equal(view.json.status, "finished", view.text);
  assert.equal(view.json.messages.at(-1).content, "Hello world");
});

test("SSE: a client that leaves after the first text.delta does not stop the run (it finishes in the Worker's waitUntil)", async () => {
  const log = [];
  const p = await startProvider(log);
  after(() => p.server.close());
  const mf = worker(p.port);
  const res = await post(mf, "leave-1");
  assert.equal(res.status, 200);
  const sse = sseReader(res.body);
  let e;
  while ((e = await sse.next()) && e.type !== "text.delta");
  assert.equal(e?.type, "text.delta");
  await sse.reader.cancel();
  p.state.release();
  let view;
  for (let i = 0; i < 100; i++) {
    view = await call(mf, "GET", "/runs/leave-1");
    if (view.json.status === "finished") break;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.equal(view.json.status, "finished", view.text);
  assert.equal(view.json.messages.at(-1).content, "Hello world");
  assert.ok(log.includes("provider: last token"));
});
