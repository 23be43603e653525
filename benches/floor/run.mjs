#!/usr/bin/env node
// The floor (issue 34): what a durable step costs beside the same loop with no durability at all.
//
// The scripted workload of benches/peers/workload.mjs (one user message, N model turns of two tool calls each,
// each tool answering the same ~450-byte text, then a final text), N = 100 and 500, run
//   - as a bare JS loop: call the model with the transcript, run the two tools, append the assistant message and
//     the two tool results, until the model answers text; no persistence, no events, no leases;
//   - through the npm package (js/dist, from js/scripts/build.sh) with memoryStore(), the same model and tools
//     (as `defineTool`s);
//   - through the npm package with kvStore() over an in-memory KV namespace (js/test-support/fake_kv.mjs, every
//     operation answered at once; settleMs 10 (--settle-ms): the window is a wait once per run, not work, and
//     a window shorter than a lease write is refused as busy);
// interleaved (the order alternates every repetition) after untimed warm-up runs; a run's time is the whole
// turn as its caller sees it. Then the Rust side natively: `cargo bench --bench floor` (benches/floor.rs: the
// same workload as a bare Rust loop over the same model and tools, and through `Agent` with a MemoryStore).
//
// Printed: a table of medians (ms per run, µs per step), the paired ratios (package / bare loop, median over
// repetitions) and the goal line `P14 floor_ratio_npm_100=… floor_ratio_npm_500=… floor_ratio_rust_500=…`.
// Measured, never asserted.
//
// Usage: node benches/floor/run.mjs [--sizes 100,500] [--reps 15] [--no-rust] [--markdown FILE]
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { fileURLToPath, pathToFileURL } from "node:url";
import { FINAL_TEXT, INSTRUCTIONS, PROMPT, TOOL_RESULT, TOOLS, stepCalls, scriptedModel } from "../peers/workload.mjs";
import { FakeKv } from "../../js/test-support/fake_kv.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "..", "..");

function arg(name, dflt) {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : dflt;
}
const SIZES = arg("sizes", "100,500").split(",").map(Number);
const REPS = Number(arg("reps", "15"));
const WARMUP = Number(arg("warmup", "3"));
const MARKDOWN = arg("markdown", "");
const SETTLE_MS = Number(arg("settle-ms", "10"));
const RUST = !process.argv.includes("--no-rust");

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
const out = [];
const say = (line = "") => {
  console.log(line);
  out.push(line);
};

const toolDefs = () => TOOLS.map((t) => ({ ...t, execute: async () => TOOL_RESULT }));

/**
 * The floor: the same turn as a bare loop. The model sees `{runId, messages, tools, step}` (the package's
 * request shape), the tools run concurrently, the messages are appended in the package's shape.
 *
 * With `append`, the least any durable loop does on top: each boundary's new messages encoded as JSON and
 * appended to an in-memory journal — the model's answer before its tools run (else a crash re-asks a charged
 * call) and the tools' results before the next model call (else a crash runs them again): two appends a step,
 * no store, no lease, no events.
 */
async function bareRun(steps, append = false) {
  const model = scriptedModel(steps);
  const tools = new Map(toolDefs().map((t) => [t.name, t]));
  const specs = TOOLS.map(({ name, description, inputSchema }) => ({ name, description, inputSchema }));
  const t0 = performance.now();
  const messages = [
    { role: "system", content: INSTRUCTIONS },
    { role: "user", content: PROMPT },
  ];
  const usage = { inputTokens: 0, outputTokens: 0 };
  let text = "";
  const journal = [];
  const record = (added) => journal.push(JSON.stringify({ seq: journal.length + 1, at: Date.now(), messages: added }));
  if (append) record(messages);
  for (let step = 0; ; step++) {
    const r = await model.generate({ runId: "bench", messages, tools: specs, step });
    usage.inputTokens += r.usage.inputTokens;
    usage.outputTokens += r.usage.outputTokens;
    const calls = r.toolCalls ?? [];
    const answer = calls.length ? { role: "assistant", content: r.text ?? "", toolCalls: calls } : { role: "assistant", content: r.text };
    messages.push(answer);
    if (append) record([answer]);
    if (!calls.length) {
      text = r.text;
      break;
    }
    const results = await Promise.all(calls.map((c) => tools.get(c.name).execute(c.args)));
    const added = calls.map((c, i) => ({ role: "tool", toolCallId: c.id, content: results[i] }));
    messages.push(...added);
    if (append) record(added);
  }
  const ms = performance.now() - t0;
  if (text !== FINAL_TEXT || messages.length !== 3 * steps + 3) throw new Error(`bare loop: ${messages.length} messages`);
  if (append && journal.length !== 2 * steps + 2) throw new Error(`bare loop with appends: ${journal.length} entries`);
  return { ms };
}

let steadfast;
/** One run through the npm package on `store` (`"memory"` or `"kv"`). */
async function packageRun(steps, store) {
  const { createAgent, defineTool, memoryStore, kvStore } = steadfast;
  const tools = toolDefs().map((t) => defineTool(t));
  const s = store === "memory" ? memoryStore() : kvStore(new FakeKv(), { settleMs: SETTLE_MS });
  const agent = createAgent({ model: scriptedModel(steps), tools, instructions: INSTRUCTIONS, store: s, maxSteps: steps + 1 });
  const t0 = performance.now();
  const r = await agent.send(PROMPT, { sessionId: "bench" });
  const ms = performance.now() - t0;
  if (r.status !== "finished" || r.text !== FINAL_TEXT)
    throw new Error(`steadfast (${store}): status ${r.status}, text ${JSON.stringify(r.text)}`);
  return { ms };
}

/** The Rust side: benches/floor.rs prints `floor_rust steps=N bare_us_per_step=… append_us_per_step=…
 * library_us_per_step=… ratio=… append_ratio=… library_over_append=…`. */
function rustFloor() {
  // opt-level 3, what a crate that depends on steadfast builds it with by default (this repository's release
  // profile is opt-level "z" for the wasm size budgets, which no dependent inherits), in its own target directory
  // so the other benchmarks' builds are not redone.
  const env = { ...process.env, CARGO_PROFILE_BENCH_OPT_LEVEL: "3", CARGO_TARGET_DIR: path.join(root, "target", "floor-o3") };
  const r = spawnSync("cargo", ["bench", "--bench", "floor"], { cwd: root, env, encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] });
  if (r.status !== 0) throw new Error(`cargo bench --bench floor failed (${r.status})`);
  const rows = {};
  for (const line of r.stdout.split("\n")) {
    if (!line.startsWith("floor_rust ")) continue;
    const row = Object.fromEntries(line.split(" ").slice(1).map((kv) => kv.split("=")).map(([k, v]) => [k, Number(v)]));
    rows[row.steps] = row;
  }
  return rows;
}

const dist = path.join(root, "js", "dist", "entrypoints", "node.js");
if (!fs.existsSync(dist)) throw new Error(`${dist} is missing: run js/scripts/build.sh`);
steadfast = await import(pathToFileURL(dist).href);

const contenders = [
  { name: "bare", run: (n) => bareRun(n) },
  { name: "append", run: (n) => bareRun(n, true) },
  { name: "memory", run: (n) => packageRun(n, "memory") },
  { name: "kv", run: (n) => packageRun(n, "kv") },
];
const res = Object.fromEntries(contenders.map((c) => [c.name, Object.fromEntries(SIZES.map((n) => [n, []]))]));
for (let w = 0; w < WARMUP; w++) for (const n of SIZES) for (const c of contenders) await c.run(n);
for (let rep = 0; rep < REPS; rep++) {
  for (const n of SIZES) {
    const order = rep % 2 ? [...contenders].reverse() : contenders;
    for (const c of order) res[c.name][n].push((await c.run(n)).ms);
  }
}
const paired = (a, b) => median(a.map((x, i) => x / b[i]));
const rust = RUST ? rustFloor() : {};

say(`Node ${process.version}; ${REPS} interleaved repetitions after ${WARMUP} warm-up runs per contender and size; a new agent and store per run.`);
say("Bare loop: the scripted model called with the transcript, the two tools run, the messages appended (no persistence).");
say("Bare + appends: the same loop and, at each boundary, its new messages encoded as JSON and appended to an in-memory journal (the model's answer before its tools run, the results before the next call: two appends a step) — the least any durable loop does.");
say(`npm memory / npm KV: js/dist's createAgent with memoryStore() / kvStore() over an in-memory KV namespace (settleMs ${SETTLE_MS}, waited once per run, included).`);
say("Rust: benches/floor.rs natively (the bench profile at opt-level 3, as a dependent crate builds it): the same workload as a bare loop over the same MockModel and tools, the same with the two appends a step (serde_json), and through `Agent` with a MemoryStore.");
say("");
say("| steps | bare µs/step | bare + appends µs/step | npm memory µs/step | npm KV µs/step | appends / bare | memory / bare | KV / bare | memory / (bare + appends) |");
say("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
const ratios = {};
for (const n of SIZES) {
  const [b, a, m, k] = ["bare", "append", "memory", "kv"].map((c) => median(res[c][n]));
  ratios[n] = {
    append: paired(res.append[n], res.bare[n]),
    memory: paired(res.memory[n], res.bare[n]),
    kv: paired(res.kv[n], res.bare[n]),
    overAppend: paired(res.memory[n], res.append[n]),
  };
  const us = (x) => ((x / n) * 1000).toFixed(1);
  const r = ratios[n];
  say(
    `| ${n} | ${us(b)} | ${us(a)} | ${us(m)} | ${us(k)} | ${r.append.toFixed(2)} | ${r.memory.toFixed(2)} | ${r.kv.toFixed(2)} | ${r.overAppend.toFixed(2)} |`,
  );
}
say("");
if (RUST) {
  say("| steps | Rust bare µs/step | Rust bare + appends µs/step | Rust library µs/step | appends / bare | library / bare | library / (bare + appends) |");
  say("|---:|---:|---:|---:|---:|---:|---:|");
  for (const [n, r] of Object.entries(rust))
    say(
      `| ${n} | ${r.bare_us_per_step.toFixed(2)} | ${r.append_us_per_step.toFixed(2)} | ${r.library_us_per_step.toFixed(2)} | ` +
        `${r.append_ratio.toFixed(2)} | ${r.ratio.toFixed(2)} | ${r.library_over_append.toFixed(2)} |`,
    );
  say("");
}
const fmtR = (n, k) => (ratios[n] ? ratios[n][k].toFixed(2) : "not-run");
const fmtRust = (k) => (rust[500] ? rust[500][k].toFixed(2) : "not-run");
say("```");
say(
  `P14 floor_ratio_npm_100=${fmtR(100, "memory")} floor_ratio_npm_500=${fmtR(500, "memory")} ` +
    `floor_ratio_rust_500=${fmtRust("ratio")} ` +
    `(kv: floor_ratio_kv_100=${fmtR(100, "kv")} floor_ratio_kv_500=${fmtR(500, "kv")}; ` +
    `appends alone: append_ratio_npm_500=${fmtR(500, "append")} append_ratio_rust_500=${fmtRust("append_ratio")}; ` +
    `over the appends: npm_over_append_500=${fmtR(500, "overAppend")} rust_over_append_500=${fmtRust("library_over_append")})`,
);
say("```");
if (MARKDOWN) fs.writeFileSync(MARKDOWN, out.join("\n") + "\n");
