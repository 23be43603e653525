// first_delta_ms: the time from sending `POST /runs/{id}` (Accept: text/event-stream) to reading the first
// `text.delta` event, through the built Worker (build/) under workerd (Miniflare), KV mode, with a local
// streaming provider on 127.0.0.1 that sends its first token at once (the rest once that delta was read).
// Warm Worker; RUNS sequential runs (default 20), each a new run. Prints `first_delta_ms=<median>` and the
// spread.
//
// Then what the Worker's SSE answer adds per event, on a run whose model streams TOKENS text deltas (default
// 1000, all at once after 100 ms, from a second local provider; a second Worker in the same process):
// - sse_overhead_bytes_per_event: the SSE body's bytes less the events' JSON payloads (the `data:` lines'
//   JSON), over the number of events: the framing as src/front/api.rs writes it (`event:`, `data: `, blank line,
//   and the id-only blocks of the journal positions reached). Deterministic for a given run.
// - sse_ms_per_event / json_ms_per_event: the median time of the run answered as SSE (to the end of its body),
//   and of the same run answered as JSON (no listener: no events are emitted, the provider's stream is read
//   whole), each over the SSE run's event count; their ratio, and the difference per event (what emitting,
//   framing and sending an event costs). RUNS runs of each, alternating, after one of each to warm up. The
//   lease's settle window is set to 50 ms and the provider answers after 100 ms: the settle read-back
//   overlaps the model call, so with the default 1 s window (or an instant provider) both answers would wait
//   on it and the per-event work would hide inside that wait.
// `--markdown FILE` also writes a section for BENCHMARKS.md. Measured, not asserted.
import fs from "node:fs";
import http from "node:http";
import { Miniflare } from "miniflare";
import { startStreamingProvider, sseReader, workerOptions } from "../../tests/workerd/support/sse.mjs";

const TOKEN = "bench-token-0123456789";
const BASE = "http://localhost";
const RUNS = Number(process.env.RUNS ?? 20);
const TOKENS = Number(process.env.TOKENS ?? 1000);
// The token provider answers after this long: longer than the settle window below (50 ms), so the lease
// read-back is done before the model's answer arrives and both answers time the same work after it.
const PROVIDER_DELAY_MS = 100;
const md = process.argv.includes("--markdown") ? process.argv[process.argv.indexOf("--markdown") + 1] : null;

if (!fs.existsSync("build/index.js")) throw new Error("build/index.js is missing: run ./scripts/build-worker");
const auth = { authorization: `Bearer ${TOKEN}` };
const post = (mf, id, accept) =>
  mf.dispatchFetch(`${BASE}/runs/${id}`, {
    method: "POST",
    headers: { ...auth, accept, "content-type": "application/json" },
    body: JSON.stringify({ input: "Say hello" }),
  });
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

// The Worker on `provider` (its configuration patched with `config`), warmed (loaded, its configuration
// parsed); `fn(mf)` measures; both disposed after.
async function withWorker(provider, fn, config = {}) {
  const options = workerOptions(TOKEN, provider.port);
  options.bindings.STEADFAST_CONFIG = JSON.stringify({ ...JSON.parse(options.bindings.STEADFAST_CONFIG), ...config });
  const mf = new Miniflare(options);
  try {
    await (await mf.dispatchFetch(`${BASE}/health`)).text();
    await (await mf.dispatchFetch(`${BASE}/runs`, { headers: auth })).text();
    return await fn(mf);
  } finally {
    await mf.dispose();
    provider.server.close();
  }
}

async function firstDelta(mf, provider) {
  const times = [];
  for (let i = 0; i < RUNS + 1; i++) {
    const started = performance.now();
    const res = await post(mf, `bench-${i}`, "text/event-stream");
    const sse = sseReader(res.body);
    let e;
    let first = null;
    while ((e = await sse.next())) {
      if (e.type === "text.delta" && first === null) {
        first = performance.now() - started;
        provider.state.release();
      }
    }
    if (first === null) throw new Error(`run bench-${i}: no text.delta`);
    if (i > 0) times.push(first); // the first run warms the provider path
  }
  times.sort((a, b) => a - b);
  const q = (p) => times[Math.min(times.length - 1, Math.floor(p * times.length))];
  return `first_delta_ms=${q(0.5).toFixed(1)} (p10 ${q(0.1).toFixed(1)}, p90 ${q(0.9).toFixed(1)}, ${times.length} runs, warm Worker, KV mode, local provider)`;
}

// A chat-completions server streaming `n` tokens (`t0 `, `t1 `, …) at once after `delayMs`, then `stop` and
// [DONE].
function startTokenProvider(n, delayMs) {
  const chunk = (delta, finish = null) => ({ id: "c2", object: "chat.completion.chunk", created: 1, model: "gpt-test", choices: [{ index: 0, delta, finish_reason: finish }] });
  const data = (c) => `data: ${JSON.stringify(c)}\n\n`;
  let body = data(chunk({ role: "assistant", content: "t0 " }));
  for (let i = 1; i < n; i++) body += data(chunk({ content: `t${i} ` }));
  body += data(chunk({}, "stop")) + "data: [DONE]\n\n";
  const server = http.createServer((req, res) => {
    req.resume();
    req.on("end", () =>
      setTimeout(() => {
        res.writeHead(200, { "content-type": "text/event-stream" });
        res.end(body);
      }, delayMs),
    );
  });
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve({ server, port: server.address().port })));
}

const expectedText = Array.from({ length: TOKENS }, (_, i) => `t${i} `).join("");

// One run answered as SSE, read to its end: its time, body bytes, JSON payload bytes and event count. Checks
// the run streamed every token and finished.
async function sseRun(mf, id) {
  const started = performance.now();
  const res = await post(mf, id, "text/event-stream");
  const parts = [];
  for await (const c of res.body) parts.push(c);
  const ms = performance.now() - started;
  const body = Buffer.concat(parts);
  let payload = 0;
  const events = [];
  for (const block of body.toString("utf8").split("\n\n")) {
    const line = block.split("\n").find((l) => l.startsWith("data: "));
    if (line === undefined) continue; // a heartbeat comment or an id-only block (a journal position): overhead, no event
    payload += Buffer.byteLength(line.slice(6));
    events.push(JSON.parse(line.slice(6)));
  }
  const text = events.filter((e) => e.type === "text.delta").map((e) => e.text).join("");
  if (res.status !== 200 || text !== expectedText || events.at(-1)?.type !== "run.done") {
    throw new Error(`run ${id}: status ${res.status}, ${events.length} events, last ${events.at(-1)?.type}, text ${text.length} chars`);
  }
  return { ms, bytes: body.length, payload, events: events.length };
}

// The same run answered as JSON: its time. Checks the run finished with the whole text.
async function jsonRun(mf, id) {
  const started = performance.now();
  const res = await post(mf, id, "application/json");
  const result = await res.json();
  const ms = performance.now() - started;
  if (res.status !== 200 || result.text !== expectedText) throw new Error(`run ${id}: status ${res.status}, ${result.status}`);
  return ms;
}

async function sseOverhead(mf) {
  const sse = [];
  const json = [];
  for (let i = 0; i < RUNS + 1; i++) {
    const s = await sseRun(mf, `sse-${i}`);
    const j = await jsonRun(mf, `json-${i}`);
    if (i > 0) {
      sse.push(s);
      json.push(j);
    }
  }
  const { bytes, payload, events } = sse[0];
  if (sse.some((s) => s.bytes - s.payload !== bytes - payload || s.events !== events)) throw new Error("the framing differed between runs");
  const sseMs = median(sse.map((s) => s.ms));
  const jsonMs = median(json);
  return [
    `sse_overhead_bytes_per_event=${((bytes - payload) / events).toFixed(1)} (${bytes} SSE body bytes - ${payload} JSON payload bytes over ${events} events: ${TOKENS} text.delta, run.start, step, run.done)`,
    `sse_ms_per_event=${(sseMs / events).toFixed(4)} json_ms_per_event=${(jsonMs / events).toFixed(4)} ratio=${(sseMs / jsonMs).toFixed(2)} sse_added_ms_per_event=${((sseMs - jsonMs) / events).toFixed(4)} (median run ${sseMs.toFixed(1)} ms as SSE, ${jsonMs.toFixed(1)} ms as JSON, over the SSE run's ${events} events; ${sse.length} runs each, alternating, warm Worker, KV mode, local provider)`,
  ];
}

const log = [];
const held = await startStreamingProvider(log);
const first = await withWorker(held, (mf) => firstDelta(mf, held));
console.log(first);
const many = await startTokenProvider(TOKENS, PROVIDER_DELAY_MS);
// settleMs 50 (1 and 5 ms are too short for Miniflare's KV: the lease is refused, 409): the default 1 s window
// would make every run ~1 s of waiting. One process, no racing acquirer: any window is safe
// (JournalOptions::settle_ms).
const overhead = await withWorker(many, sseOverhead, { settleMs: 50 });
overhead.forEach((l) => console.log(l));
if (md) {
  fs.writeFileSync(
    md,
    `Time from the request to the first \`text.delta\` event read through the Worker (workerd via Miniflare, KV mode), a local streaming provider sending its first token at once (benches/workerd/first-delta.mjs). Goal: < 30 ms locally (not asserted).\n\n- ${first}\n\n` +
      `What the Worker's SSE answer adds per event, on a run whose model streams ${TOKENS} tokens at once after ${PROVIDER_DELAY_MS} ms (a second local provider): bytes of the SSE body less the events' JSON payloads, per event (deterministic: the \`event:\` and \`data: \` lines, the blank line, and the id-only blocks of the journal positions, as src/front/api.rs frames them); and the median time of that run answered as SSE (read to its end) beside the same run answered as JSON (no events emitted), each over the SSE run's event count, their ratio and the difference per event (the lease's settle window 50 ms, shorter than the provider's delay, so neither answer waits on it). Measured, not asserted.\n\n` +
      overhead.map((l) => `- ${l}\n`).join(""),
  );
}
