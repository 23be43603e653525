// Strict mode (each run in its own Durable Object) side by side with KV mode, through the built Worker (build/)
// under workerd (Miniflare), warm, in one process: the same 10-step scripted run (nine `charge` tool turns and
// an answer, mock model) sent as `POST /runs/{id}` to each mode in turn (interleaved, RUNS pairs, default 15).
// Prints, from each run's own result stats:
//   strict_writes_per_boundary  journal rows written per durable boundary in the run objects (goal <= 1.0)
//   strict_boundary_ms_p50 / kv_boundary_ms_p50   a run's wall time / its boundaries, median over runs
//   strict_all_in_writes_per_boundary / kv_all_in_writes_per_boundary   every store write (leases, index) too
//   first_event_ms              request to the first SSE event of a strict-mode run (goal < 50 ms)
// `--markdown FILE` also writes a section for BENCHMARKS.md. Measured, not asserted. KV mode pays its lease
// settle window (settleMs, 1 s by default) once per execution: that is most of its time here, by design (see
// the README's "On Workers KV").
import fs from "node:fs";
import { Miniflare } from "miniflare";
import { builtWorker } from "../../tests/workerd/support/built.mjs";
import { sseReader } from "../../tests/workerd/support/sse.mjs";

const TOKEN = "bench-token-0123456789";
const BASE = "http://localhost";
const RUNS = Number(process.env.RUNS ?? 15);
const md = process.argv.includes("--markdown") ? process.argv[process.argv.indexOf("--markdown") + 1] : null;
const script = [
  ...Array.from({ length: 9 }, (_, i) => ({ toolCalls: [{ name: "charge", args: { order: i + 1 } }] })),
  { text: "All charged." },
];

function worker(store) {
  return new Miniflare({
    ...builtWorker(),
    kvNamespaces: ["RUNS"],
    durableObjects: { RUN_OBJECTS: { className: "RunObject", useSQLite: true } },
    bindings: {
      STEADFAST_TOKEN: TOKEN,
      STEADFAST_CONFIG: JSON.stringify({ store, model: { provider: "mock", script }, limits: { maxSteps: 12 } }),
    },
    cf: false,
  });
}

const auth = { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" };
async function run(mf, id) {
  const started = performance.now();
  const res = await mf.dispatchFetch(`${BASE}/runs/${id}`, { method: "POST", headers: auth, body: JSON.stringify({ input: "Charge orders 1 to 9" }) });
  const body = await res.json();
  const ms = performance.now() - started;
  if (res.status !== 200 || body.status !== "finished") throw new Error(`${id}: ${res.status} ${JSON.stringify(body).slice(0, 300)}`);
  return { ms, stats: body.stats };
}

async function firstEvent(mf, id) {
  const started = performance.now();
  const res = await mf.dispatchFetch(`${BASE}/runs/${id}`, {
    method: "POST",
    headers: { ...auth, accept: "text/event-stream" },
    body: JSON.stringify({ input: "Charge orders 1 to 9" }),
  });
  const sse = sseReader(res.body);
  const first = await sse.next();
  const ms = performance.now() - started;
  if (!first) throw new Error(`${id}: no event`);
  while (await sse.next());
  return ms;
}

if (!fs.existsSync("build/index.js")) throw new Error("build/index.js is missing: run ./scripts/build-worker");
const modes = { strict: worker("durable-object"), kv: worker("kv") };
try {
  for (const [name, mf] of Object.entries(modes)) await run(mf, `warm-${name}`);
  const seen = { strict: [], kv: [] };
  for (let i = 0; i < RUNS; i++) {
    const order = i % 2 ? ["kv", "strict"] : ["strict", "kv"];
    for (const name of order) seen[name].push(await run(modes[name], `bench-${name}-${i}`));
  }
  const firsts = [];
  for (let i = 0; i < RUNS; i++) firsts.push(await firstEvent(modes.strict, `sse-${i}`));
  const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  const sum = (xs, f) => xs.reduce((a, x) => a + f(x), 0);
  const line = (name) => {
    const runs = seen[name];
    const commits = sum(runs, (r) => r.stats.commits);
    return {
      boundaryMs: median(runs.map((r) => r.ms / r.stats.commits)),
      rows: sum(runs, (r) => r.stats.storeCommitWrites) / commits,
      allIn: sum(runs, (r) => r.stats.storeWrites) / commits,
      boundaries: commits / runs.length,
    };
  };
  const s = line("strict");
  const k = line("kv");
  const lines = [
    `strict_writes_per_boundary=${s.rows.toFixed(2)} (kv: ${k.rows.toFixed(2)} journal keys per boundary)`,
    `strict_boundary_ms_p50=${s.boundaryMs.toFixed(2)} kv_boundary_ms_p50=${k.boundaryMs.toFixed(2)} (${s.boundaries.toFixed(0)} boundaries per run; KV includes its ${1000} ms settle window once per execution)`,
    `strict_all_in_writes_per_boundary=${s.allIn.toFixed(2)} kv_all_in_writes_per_boundary=${k.allIn.toFixed(2)}`,
    `first_event_ms=${median(firsts).toFixed(1)} (strict mode, SSE, median of ${firsts.length})`,
  ];
  for (const l of lines) console.log(l);
  if (md) {
    fs.writeFileSync(
      md,
      `The same 10-step scripted run (nine tool turns, mock model) through the Worker in workerd (Miniflare), strict mode and KV mode interleaved, ${RUNS} runs each, warm (benches/workerd/strict.mjs). Goals: strict_writes_per_boundary <= 1.0, first_event_ms < 50 (not asserted).\n\n${lines.map((l) => `- ${l}`).join("\n")}\n`,
    );
  }
} finally {
  for (const mf of Object.values(modes)) await mf.dispose();
}
