#!/usr/bin/env node
// The peers benchmark (issue "Per-step cost"): the same N-step, two-tool scripted workload (workload.mjs)
//   (a) in workerd: steadfast's Worker (build/, from ./scripts/build-worker; KV mode, and strict mode beside it) vs a Worker on Cloudflare's Agents
//       SDK (cf-agent/worker.js: AIChatAgent on a SQLite Durable Object, the AI SDK's mock model), each in its
//       own workerd (Miniflare), both tools fetching one local tool server on 127.0.0.1;
//   (b) in node: steadfast's npm package (js/dist, from js/scripts/build.sh) vs LangGraph JS (node.mjs).
// Repetitions are interleaved (the order of the contenders alternates every repetition), after untimed warm-up
// runs; a run's time is the whole conversation turn as its caller sees it. Printed: medians per contender and
// size, the median of the paired ratios (steadfast / peer, paired by repetition), and the goal lines
// P9–P13 (see README.md), and P9-strict: P9's ratios for strict mode. With --markdown FILE the tables and lines are also written to FILE as Markdown.
//
// Usage: node run.mjs [--sizes 10,100,500] [--reps 7] [--only workerd|node] [--settle-ms MS] [--markdown FILE]
import fs from "node:fs";
import http from "node:http";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { fileURLToPath, pathToFileURL } from "node:url";
import { Miniflare } from "miniflare";
import { buildCfAgent } from "./build-cf.mjs";
import { langgraphRun, loadSteadfast, steadfastCrossing, steadfastRun } from "./node.mjs";
import { FINAL_TEXT, INSTRUCTIONS, PROMPT, TOOL_RESULT, TOOLS, stepCalls } from "./workload.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "..", "..");

function arg(name, dflt) {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : dflt;
}
const SIZES = arg("sizes", process.env.BENCH_PEERS_SIZES ?? "10,100,500").split(",").map(Number);
const REPS = Number(arg("reps", process.env.BENCH_PEERS_REPS ?? "7"));
const ONLY = arg("only", "");
const MARKDOWN = arg("markdown", "");
const TOKEN = "bench-token-0123456789";
// steadfast's KV lease settle window: the shipped default (`settleMs` unset) unless --settle-ms is given.
const SETTLE_MS = arg("settle-ms", process.env.BENCH_PEERS_SETTLE_MS ?? "");

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
const fmt = (x, d = 2) => (x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(d));
const out = [];
const say = (line = "") => {
  console.log(line);
  out.push(line);
};

// ---------- the tool server both Workers' tools call ----------
function startToolServer() {
  const srv = http.createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      res.writeHead(200, { "content-type": "text/plain" });
      res.end(TOOL_RESULT);
    });
  });
  return new Promise((resolve) => srv.listen(0, "127.0.0.1", () => resolve(srv)));
}

// ---------- (a) workerd ----------
function steadfastConfig(steps, toolBase, store = "kv") {
  const script = [];
  for (let i = 0; i < steps; i++) script.push({ toolCalls: stepCalls(i) });
  script.push({ text: FINAL_TEXT });
  return {
    model: { provider: "mock", script },
    instructions: INSTRUCTIONS,
    limits: { maxSteps: steps + 1 },
    tools: TOOLS.map((t) => ({ ...t, url: `${toolBase}/tools/${t.name}` })),
    allowedHosts: ["127.0.0.1"],
    store,
    ...(SETTLE_MS !== "" ? { settleMs: Number(SETTLE_MS) } : {}),
  };
}

const wasmRules = [
  { type: "ESModule", include: ["**/*.js", "**/*.mjs"] },
  { type: "CompiledWasm", include: ["**/*.wasm"] },
];

// `store`: "kv" (the default mode) or "durable-object" (strict mode: each run in its own SQLite Durable Object).
function ourWorkers(toolBase, store = "kv") {
  const build = path.join(root, "build");
  if (!fs.existsSync(path.join(build, "index.js"))) throw new Error(`${build}/index.js is missing: run ./scripts/build-worker`);
  return new Miniflare({
    workers: SIZES.map((n) => ({
      name: `steadfast-${n}`,
      modules: true,
      scriptPath: path.join(build, "index.js"),
      modulesRoot: build,
      modulesRules: wasmRules,
      compatibilityDate: "2026-04-01",
      kvNamespaces: { RUNS: `runs-${n}` },
      durableObjects: { RUN_OBJECTS: { className: "RunObject", useSQLite: true } },
      bindings: { STEADFAST_TOKEN: TOKEN, STEADFAST_CONFIG: JSON.stringify(steadfastConfig(n, toolBase, store)) },
    })),
    cf: false,
  });
}

async function cfWorker(toolBase) {
  const script = await buildCfAgent();
  return new Miniflare({
    modules: true,
    scriptPath: script,
    compatibilityDate: "2026-04-01",
    compatibilityFlags: ["nodejs_compat"],
    durableObjects: { BenchAgent: { className: "BenchAgent", useSQLite: true } },
    bindings: { TOOL_BASE: toolBase },
    cf: false,
  });
}

let seq = 0;
async function oursWorkerd(mf, n) {
  const worker = await mf.getWorker(`steadfast-${n}`);
  const id = `bench-${n}-${seq++}`;
  const t0 = performance.now();
  const res = await worker.fetch(`http://localhost/runs/${id}`, {
    method: "POST",
    headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
    body: JSON.stringify({ input: PROMPT }),
  });
  const text = await res.text();
  const ms = performance.now() - t0;
  const r = JSON.parse(text);
  if (res.status !== 200 || r.status !== "finished" || r.text !== FINAL_TEXT)
    throw new Error(`steadfast Worker, ${n} steps: ${res.status} ${text.slice(0, 300)}`);
  return {
    ms,
    writes: r.stats.storeWrites,
    reads: r.stats.storeReads,
    bytes: r.stats.storeBytes,
    transcriptBytes: Buffer.byteLength(JSON.stringify(r.messages)),
  };
}

async function cfWorkerd(mf, n) {
  const id = `bench-${n}-${seq++}`;
  const t0 = performance.now();
  const res = await mf.dispatchFetch(`http://localhost/bench?steps=${n}&id=${id}`);
  const text = await res.text();
  const ms = performance.now() - t0;
  const r = JSON.parse(text);
  if (res.status !== 200 || r.status !== "completed" || r.toolCalls !== 2 * n || r.text !== FINAL_TEXT)
    throw new Error(`Agents SDK Worker, ${n} steps: ${res.status} ${text.slice(0, 300)}`);
  return { ms, writes: r.writeStatements + r.kvWrites, rows: r.rowsWritten, transcriptBytes: r.transcriptBytes };
}

// Runs `contenders` ({name, run(n)}) interleaved; returns {name: {n: [result…]}}.
async function interleaved(label, contenders) {
  const results = Object.fromEntries(contenders.map((c) => [c.name, Object.fromEntries(SIZES.map((n) => [n, []]))]));
  for (const n of SIZES) for (const c of contenders) await c.run(n); // warm-up, untimed
  for (let rep = 0; rep < REPS; rep++) {
    for (const n of SIZES) {
      const order = rep % 2 ? [...contenders].reverse() : contenders;
      for (const c of order) results[c.name][n].push(await c.run(n));
    }
    process.stderr.write(`${label}: repetition ${rep + 1}/${REPS}\n`);
  }
  return results;
}

// Median of the per-repetition ratios a[i].ms / b[i].ms.
const pairedRatio = (a, b) => median(a.map((x, i) => x.ms / b[i].ms));

async function workerdPart() {
  const srv = await startToolServer();
  const toolBase = `http://127.0.0.1:${srv.address().port}`;
  const ours = ourWorkers(toolBase);
  const strict = ourWorkers(toolBase, "durable-object");
  const cf = await cfWorker(toolBase);
  try {
    const res = await interleaved("workerd", [
      { name: "steadfast", run: (n) => oursWorkerd(ours, n) },
      { name: "steadfast_strict", run: (n) => oursWorkerd(strict, n) },
      { name: "cf_agents", run: (n) => cfWorkerd(cf, n) },
    ]);
    say("## (a) workerd: steadfast Worker vs a Worker on the Agents SDK");
    say("");
    say(`${REPS} interleaved repetitions after 1 warm-up run per size; time = the whole run as the caller sees it (dispatchFetch).`);
    say(`steadfast: the release Worker (build/), Workers KV (Miniflare's local KV), the configured mock model, two webhook tools, settleMs ${SETTLE_MS === "" ? "unset (the default)" : SETTLE_MS};`);
    say("Agents SDK: agents 0.32.0 + @cloudflare/ai-chat 0.12.2 (AIChatAgent, SQLite Durable Object), ai 6.0.325's MockLanguageModelV3, two fetch tools.");
    say("Writes: steadfast = KV writes (RunStats.storeWrites, all-in: lease, journal, release); Agents SDK = SQL statements that modify (and KV-API puts/deletes).");
    say("");
    say("| steps | steadfast ms | Agents SDK ms | ratio (paired median) | steadfast writes/step | Agents SDK writes/step | steadfast KV reads | steadfast bytes written / transcript | Agents SDK transcript bytes |");
    say("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    const ratios = {};
    const perStep = {};
    for (const n of SIZES) {
      const a = res.steadfast[n];
      const b = res.cf_agents[n];
      ratios[n] = pairedRatio(a, b);
      const last = a[a.length - 1];
      perStep[n] = { writes: last.writes / n, stored: last.bytes / last.transcriptBytes };
      say(
        `| ${n} | ${fmt(median(a.map((x) => x.ms)))} | ${fmt(median(b.map((x) => x.ms)))} | ${ratios[n].toFixed(2)} | ` +
          `${(last.writes / n).toFixed(2)} | ${(b[b.length - 1].writes / n).toFixed(2)} | ${last.reads} | ` +
          `${(last.bytes / last.transcriptBytes).toFixed(2)} | ${b[b.length - 1].transcriptBytes} |`,
      );
    }
    say("");
    say("Strict mode (`\"store\": \"durable-object\"`: each run in its own SQLite Durable Object, no KV settle window), the same workload, interleaved with the two above; writes = the objects' rows and the KV index (RunStats.storeWrites, all-in):");
    say("");
    say("| steps | steadfast strict ms | Agents SDK ms | ratio (paired median) | steadfast strict writes/step |");
    say("|---:|---:|---:|---:|---:|");
    const strictRatios = {};
    for (const n of SIZES) {
      const a = res.steadfast_strict[n];
      const b = res.cf_agents[n];
      strictRatios[n] = pairedRatio(a, b);
      const last = a[a.length - 1];
      say(`| ${n} | ${fmt(median(a.map((x) => x.ms)))} | ${fmt(median(b.map((x) => x.ms)))} | ${strictRatios[n].toFixed(2)} | ${(last.writes / n).toFixed(2)} |`);
    }
    say("");
    return { ratios, strictRatios, perStep };
  } finally {
    await strict.dispose();
    await ours.dispose();
    await cf.dispose();
    srv.close();
  }
}

// ---------- (b) node ----------
async function nodePart() {
  const dist = path.join(root, "js", "dist", "entrypoints", "node.js");
  if (!fs.existsSync(dist)) throw new Error(`${dist} is missing: run js/scripts/build.sh`);
  await loadSteadfast(pathToFileURL(dist).href);
  const res = await interleaved("node", [
    { name: "steadfast", run: (n) => steadfastRun(n) },
    { name: "langgraph_delta", run: (n) => langgraphRun(n, true) },
    { name: "langgraph_memory", run: (n) => langgraphRun(n, false) },
  ]);
  say("## (b) node: steadfast npm package vs LangGraph JS");
  say("");
  say(`${REPS} interleaved repetitions after 1 warm-up run per size; time = \`agent.send\` / \`graph.invoke\`, a new agent and store per run.`);
  say("steadfast: js/dist with memoryStore(); LangGraph: @langchain/langgraph 1.7.3 createReactAgent + MemorySaver, with the default messages");
  say("channel (memory) and with the beta delta channel (`MessagesDeltaValue`, delta); a scripted BaseChatModel; in-process tools.");
  say("");
  say("| steps | steadfast ms | LangGraph delta ms | LangGraph memory ms | ratio vs delta (paired median) | ratio vs memory (paired median) |");
  say("|---:|---:|---:|---:|---:|---:|");
  const ratios = {};
  for (const n of SIZES) {
    const a = res.steadfast[n];
    ratios[n] = pairedRatio(a, res.langgraph_delta[n]);
    say(
      `| ${n} | ${fmt(median(a.map((x) => x.ms)))} | ${fmt(median(res.langgraph_delta[n].map((x) => x.ms)))} | ` +
        `${fmt(median(res.langgraph_memory[n].map((x) => x.ms)))} | ${ratios[n].toFixed(2)} | ` +
        `${pairedRatio(a, res.langgraph_memory[n]).toFixed(2)} |`,
    );
  }
  say("");
  // Bytes crossing the wasm boundary per model call, at the largest size run (untimed, deterministic).
  const n = Math.max(...SIZES);
  const crossing = await steadfastCrossing(n);
  say(
    `Crossing the wasm boundary at ${n} steps, per model call: ${crossing.crossing.toFixed(0)} bytes of frames ` +
      `(the new messages: ${crossing.newMessages.toFixed(0)} bytes; the whole request the model sees: ${crossing.fullRequest.toFixed(0)} bytes).`,
  );
  say("");
  return { ratios, crossing, n };
}

const lines = {};
if (ONLY !== "node") {
  const w = await workerdPart();
  lines.P9 = `P9 ${SIZES.map((n) => `vs_cf_agents_${n}=${w.ratios[n].toFixed(2)}`).join(" ")}`;
  lines.P9s = `P9-strict ${SIZES.map((n) => `strict_vs_cf_agents_${n}=${w.strictRatios[n].toFixed(2)}`).join(" ")}`;
  // Worst case over the sizes run (the goals: ≤ 2.0 writes per step, ≤ 1.2× the transcript).
  const worst = (k) => Math.max(...SIZES.map((n) => w.perStep[n][k]));
  lines.P11 = `P11 writes_per_step_2tools=${worst("writes").toFixed(2)}`;
  lines.P12 = `P12 stored_over_transcript=${worst("stored").toFixed(2)}`;
}
if (ONLY !== "workerd") {
  const nd = await nodePart();
  lines.P10 = `P10 ${SIZES.map((n) => `vs_langgraph_delta_${n}=${nd.ratios[n].toFixed(2)}`).join(" ")}`;
  lines.P13 =
    `P13 crossing_bytes_per_step_${nd.n}=${nd.crossing.crossing.toFixed(0)} ` +
    `(new_message_bytes_per_step=${nd.crossing.newMessages.toFixed(0)})`;
}
say("```");
for (const k of ["P9", "P9s", "P10", "P11", "P12", "P13"]) if (lines[k]) say(lines[k]);
say("```");
if (MARKDOWN) fs.writeFileSync(MARKDOWN, out.join("\n") + "\n");
