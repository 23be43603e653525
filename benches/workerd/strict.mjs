// Strict mode (each run in its own Durable Object) side by side with KV mode, through the built Worker (build/)
// under workerd (Miniflare), warm, in one process: the same 10-step scripted run (nine `charge` tool turns and
// an answer, mock model) sent as `POST /runs/{id}` to each mode in turn (interleaved, RUNS pairs, default 15).
// Prints, from each run's own result stats:
//   strict_writes_per_boundary  journal rows written per durable boundary in the run objects (goal <= 1.0)
//   strict_boundary_ms_p50 / kv_boundary_ms_p50   a run's wall time / its boundaries, median over runs
//   strict_all_in_writes_per_boundary / kv_all_in_writes_per_boundary   every store write (leases, index) too
//   first_event_ms              request to the first SSE event of a strict-mode run (goal < 50 ms)
//   strict_workerd_cpu_ms_per_step_500   the CPU time (user + system, from /proc) of the workerd process that
//                               runs strict mode, over whole 500-step runs of the peers' workload (two webhook
//                               tools on a local tool server, ~450-byte results), per step (issue 34)
// `--markdown FILE` also writes a section for BENCHMARKS.md; `--build DIR` loads another build (default build/). Measured, not asserted. KV mode pays its lease
// settle window (settleMs, 1 s by default) once per execution: that is most of its time here, by design (see
// the README's "On Workers KV").
import fs from "node:fs";
import http from "node:http";
import { Miniflare } from "miniflare";
import { FINAL_TEXT, INSTRUCTIONS, PROMPT, TOOL_RESULT, TOOLS, stepCalls } from "../peers/workload.mjs";
import { builtWorker } from "../../tests/workerd/support/built.mjs";
import { sseReader } from "../../tests/workerd/support/sse.mjs";

const TOKEN = "bench-token-0123456789";
const BASE = "http://localhost";
const RUNS = Number(process.env.RUNS ?? 15);
const md = process.argv.includes("--markdown") ? process.argv[process.argv.indexOf("--markdown") + 1] : null;
const BUILD = process.argv.includes("--build") ? process.argv[process.argv.indexOf("--build") + 1] : "build";
const CPU_STEPS = Number(process.env.CPU_STEPS ?? 500);
const CPU_RUNS = Number(process.env.CPU_RUNS ?? 5);
const script = [
  ...Array.from({ length: 9 }, (_, i) => ({ toolCalls: [{ name: "charge", args: { order: i + 1 } }] })),
  { text: "All charged." },
];

function worker(store) {
  return new Miniflare({
    ...builtWorker(BUILD),
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

// ---------- workerd CPU per step in strict mode (500 steps) ----------

/** The workerd processes this node process started (Miniflare's children), by pid. */
function workerdPids() {
  const out = [];
  for (const d of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${d}/stat`, "utf8");
      const comm = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"));
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      if (ppid === process.pid && comm.startsWith("workerd")) out.push(Number(d));
    } catch {
      // A process that ended meanwhile.
    }
  }
  return out;
}

/** User + system CPU of `pid` and its threads, in ms (/proc/PID/stat, clock ticks of 10 ms). */
function cpuMs(pid) {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
  const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(f[11]) + Number(f[12])) * 10;
}

/** A warm strict-mode Worker of `build` in its own workerd, for 500-step runs: `run()` answers one run's workerd CPU (ms). */
async function cpuRunner(build, toolBase) {
  const script = [];
  for (let i = 0; i < CPU_STEPS; i++) script.push({ toolCalls: stepCalls(i) });
  script.push({ text: FINAL_TEXT });
  const before = new Set(workerdPids());
  const mf = new Miniflare({
    ...builtWorker(build),
    kvNamespaces: ["RUNS"],
    durableObjects: { RUN_OBJECTS: { className: "RunObject", useSQLite: true } },
    bindings: {
      STEADFAST_TOKEN: TOKEN,
      STEADFAST_CONFIG: JSON.stringify({
        store: process.env.CPU_STORE ?? "durable-object",
        model: { provider: "mock", script },
        instructions: INSTRUCTIONS,
        limits: { maxSteps: CPU_STEPS + 1 },
        tools: TOOLS.map((t) => ({ ...t, url: `${toolBase}/tools/${t.name}` })),
        allowedHosts: ["127.0.0.1"],
      }),
    },
    cf: false,
  });
  let n = 0;
  const once = async () => {
    const id = `cpu-${n++}`;
    const res = await mf.dispatchFetch(`${BASE}/runs/${id}`, { method: "POST", headers: auth, body: JSON.stringify({ input: PROMPT }) });
    const body = await res.json();
    if (res.status !== 200 || body.status !== "finished") throw new Error(`${id}: ${res.status} ${JSON.stringify(body).slice(0, 300)}`);
  };
  await once();
  const pids = workerdPids().filter((p) => !before.has(p));
  if (pids.length !== 1) throw new Error(`expected one new workerd process, found ${pids.length}`);
  return {
    run: async () => {
      const c0 = cpuMs(pids[0]);
      const t0 = performance.now();
      await once();
      if (process.env.CPU_WALL) console.log(`${build}: wall ${(performance.now() - t0).toFixed(0)} ms`);
      return cpuMs(pids[0]) - c0;
    },
    dispose: () => mf.dispose(),
  };
}

/** workerd CPU (ms) of CPU_RUNS whole strict-mode runs of each build in `builds`, interleaved. */
async function strictCpu(builds) {
  const srv = http.createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      res.writeHead(200, { "content-type": "text/plain" });
      res.end(TOOL_RESULT);
    });
  });
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  const toolBase = `http://127.0.0.1:${srv.address().port}`;
  const runners = [];
  try {
    for (const b of builds) runners.push(await cpuRunner(b, toolBase));
    const out = builds.map(() => []);
    for (let i = 0; i < CPU_RUNS; i++) {
      const order = i % 2 ? [...runners.keys()].reverse() : [...runners.keys()];
      for (const k of order) out[k].push(await runners[k].run());
    }
    return out;
  } finally {
    for (const r of runners) await r.dispose();
    srv.close();
  }
}

if (!fs.existsSync(`${BUILD}/index.js`)) throw new Error(`${BUILD}/index.js is missing: run ./scripts/build-worker`);
// `--cpu-only [--vs DIR]`: only the CPU figure; with --vs, of this build and DIR's, interleaved, and their
// paired ratio (this / DIR): a before/after comparison.
if (process.argv.includes("--cpu-only")) {
  const vs = process.argv.includes("--vs") ? process.argv[process.argv.indexOf("--vs") + 1] : null;
  const res = await strictCpu(vs ? [BUILD, vs] : [BUILD]);
  const med = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
  res.forEach((perRun, k) =>
    console.log(`${k ? vs : BUILD}: strict_workerd_cpu_ms_per_step_${CPU_STEPS}=${(med(perRun) / CPU_STEPS).toFixed(2)} (runs: ${perRun.map((x) => x.toFixed(0)).join(", ")} ms)`),
  );
  if (vs) console.log(`paired ratio ${BUILD} / ${vs}: ${med(res[0].map((x, i) => x / res[1][i])).toFixed(2)}`);
  process.exit(0);
}
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
  const [cpu] = await strictCpu([BUILD]);
  lines.push(
    `strict_workerd_cpu_ms_per_step_${CPU_STEPS}=${(median(cpu) / CPU_STEPS).toFixed(2)} (workerd's CPU, user + system, over a whole ${CPU_STEPS}-step strict-mode run of the peers' workload, median of ${cpu.length} warm runs: ${cpu.map((x) => x.toFixed(0)).join(", ")} ms)`,
  );
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
