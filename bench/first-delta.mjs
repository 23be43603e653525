// first_delta_ms: the time from sending `POST /runs/{id}` (Accept: text/event-stream) to reading the first
// `text.delta` event, through the built Worker (build/) under workerd (Miniflare), KV mode, with a local
// streaming provider on 127.0.0.1 that sends its first token at once (the rest once that delta was read).
// Warm Worker; RUNS sequential runs (default 20), each a new run. Prints `first_delta_ms=<median>` and the
// spread; `--markdown FILE` also writes a section for BENCHMARKS.md. Measured, not asserted.
import fs from "node:fs";
import { Miniflare } from "miniflare";
import { startStreamingProvider, sseReader, workerOptions } from "../test/support/sse.mjs";

const TOKEN = "bench-token-0123456789";
const BASE = "http://localhost";
const RUNS = Number(process.env.RUNS ?? 20);
const md = process.argv.includes("--markdown") ? process.argv[process.argv.indexOf("--markdown") + 1] : null;

if (!fs.existsSync("build/index.js")) throw new Error("build/index.js is missing: run ./scripts/build-worker");
const log = [];
const provider = await startStreamingProvider(log);
const mf = new Miniflare(workerOptions(TOKEN, provider.port));
const auth = { authorization: `Bearer ${TOKEN}` };
try {
  await (await mf.dispatchFetch(`${BASE}/health`)).text();
  await (await mf.dispatchFetch(`${BASE}/runs`, { headers: auth })).text();
  const times = [];
  for (let i = 0; i < RUNS + 1; i++) {
    const started = performance.now();
    const res = await mf.dispatchFetch(`${BASE}/runs/bench-${i}`, {
      method: "POST",
      headers: { ...auth, accept: "text/event-stream", "content-type": "application/json" },
      body: JSON.stringify({ input: "Say hello" }),
    });
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
  const line = `first_delta_ms=${q(0.5).toFixed(1)} (p10 ${q(0.1).toFixed(1)}, p90 ${q(0.9).toFixed(1)}, ${times.length} runs, warm Worker, KV mode, local provider)`;
  console.log(line);
  if (md) {
    fs.writeFileSync(md, `Time from the request to the first \`text.delta\` event read through the Worker (workerd via Miniflare, KV mode), a local streaming provider sending its first token at once (bench/first-delta.mjs). Goal: < 30 ms locally (not asserted).\n\n- ${line}\n`);
  }
} finally {
  await mf.dispose();
  provider.server.close();
}
