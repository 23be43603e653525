#!/usr/bin/env node
// One profiled workload for the CPU profile recipe in BENCHMARKS.md: `--runs R` runs of `--steps N` steps (the
// scripted workload of benches/peers/workload.mjs) through the npm package (js/dist) with memoryStore() (or
// `--store kv`: kvStore over an in-memory namespace), after one untimed warm-up run; `--dist DIR` another build. Run it under
// `node --cpu-prof --cpu-prof-dir DIR`, then read the profile with `node benches/floor/profile-summary.mjs DIR/*.cpuprofile`.
import path from "node:path";
import { performance } from "node:perf_hooks";
import { fileURLToPath, pathToFileURL } from "node:url";
import { FINAL_TEXT, INSTRUCTIONS, PROMPT, TOOL_RESULT, TOOLS, stepCalls, scriptedModel } from "../peers/workload.mjs";
import { FakeKv } from "../../js/test-support/fake_kv.mjs";

const arg = (name, dflt) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : dflt;
};
const STEPS = Number(arg("steps", "500"));
const RUNS = Number(arg("runs", "5"));
const STORE = arg("store", "memory");
const here = path.dirname(fileURLToPath(import.meta.url));
// `--dist DIR`: another build of the package's dist/ (a before/after comparison); default js/dist.
const DIST = arg("dist", path.resolve(here, "..", "..", "js", "dist"));
const { createAgent, defineTool, memoryStore, kvStore } = await import(
  pathToFileURL(path.resolve(DIST, "entrypoints", "node.js")).href
);

async function run() {
  const model = scriptedModel(STEPS);
  const tools = TOOLS.map((t) => defineTool({ ...t, execute: async () => TOOL_RESULT }));
  const store = STORE === "kv" ? kvStore(new FakeKv(), { settleMs: 10 }) : memoryStore();
  const agent = createAgent({ model, tools, instructions: INSTRUCTIONS, store, maxSteps: STEPS + 1 });
  const r = await agent.send(PROMPT, { sessionId: "bench" });
  if (r.status !== "finished" || r.text !== FINAL_TEXT) throw new Error(`status ${r.status}`);
}

await run();
const t0 = performance.now();
for (let i = 0; i < RUNS; i++) await run();
const ms = (performance.now() - t0) / RUNS;
console.log(`${STEPS} steps on ${STORE}: ${ms.toFixed(1)} ms a run, ${((ms / STEPS) * 1000).toFixed(1)} µs a step`);
