#!/usr/bin/env node
// Warm per-request overhead of steadfast's Worker (build/) in workerd: what a request costs before any run work.
// After 50 untimed requests of each kind, the median (and p90) over --n requests of:
//   health      GET /health (no token, no configuration: the floor of a request)
//   get-small   GET /runs/<unknown> with a small configuration (token, configuration, agent, one KV read → 404)
//   get-large   the same with a large configuration (a 500-turn mock script, ~60 KB of JSON)
//   run-small   POST /runs/<new id>: a whole 1-step, 2-tool run (settleMs 200: the lease read-back waits 200 ms of it)
// With --builds a,b (Worker build folders, default the repository's build/) the builds are timed interleaved, for a
// before/after comparison.
// Usage: node warm.mjs [--n 300] [--builds DIR[,DIR…]]
import fs from "node:fs";
import http from "node:http";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import { Miniflare } from "miniflare";
import { FINAL_TEXT, INSTRUCTIONS, PROMPT, TOOL_RESULT, TOOLS, stepCalls } from "./workload.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const argOf = (name, dflt) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : dflt;
};
const N = Number(argOf("n", "300"));
const builds = argOf("builds", path.resolve(here, "..", "..", "build")).split(",").map((b) => path.resolve(b));
const TOKEN = "bench-token-0123456789";

const srv = http.createServer((req, res) => {
  req.resume();
  req.on("end", () => res.end(TOOL_RESULT));
});
await new Promise((r) => srv.listen(0, "127.0.0.1", r));
const toolBase = `http://127.0.0.1:${srv.address().port}`;

const config = (steps) => ({
  model: { provider: "mock", script: [...Array.from({ length: steps }, (_, k) => ({ toolCalls: stepCalls(k) })), { text: FINAL_TEXT }] },
  instructions: INSTRUCTIONS,
  limits: { maxSteps: steps + 1 },
  tools: TOOLS.map((t) => ({ ...t, url: `${toolBase}/tools/${t.name}` })),
  allowedHosts: ["127.0.0.1"],
  settleMs: 200,
});
const worker = (build, name, cfg) => ({
  name,
  modules: true,
  scriptPath: path.join(build, "index.js"),
  modulesRoot: build,
  modulesRules: [
    { type: "ESModule", include: ["**/*.js", "**/*.mjs"] },
    { type: "CompiledWasm", include: ["**/*.wasm"] },
  ],
  compatibilityDate: "2026-04-01",
  kvNamespaces: { RUNS: `runs-${name}` },
  bindings: { STEADFAST_TOKEN: TOKEN, STEADFAST_CONFIG: JSON.stringify(cfg) },
});
const auth = { authorization: `Bearer ${TOKEN}` };
let seq = 0;
const contenders = [];
for (const build of builds) {
  if (!fs.existsSync(path.join(build, "index.js"))) throw new Error(`${build}/index.js is missing: run ./scripts/build-worker`);
  const mf = new Miniflare({ workers: [worker(build, "small", config(1)), worker(build, "large", config(500))], cf: false });
  const small = await mf.getWorker("small");
  const large = await mf.getWorker("large");
  const kinds = {
    health: async () => (await small.fetch("http://localhost/health")).status === 200,
    "get-small": async () => (await small.fetch("http://localhost/runs/none", { headers: auth })).status === 404,
    "get-large": async () => (await large.fetch("http://localhost/runs/none", { headers: auth })).status === 404,
    "run-small": async () => {
      const res = await small.fetch(`http://localhost/runs/w${seq++}`, {
        method: "POST",
        headers: { ...auth, "content-type": "application/json" },
        body: JSON.stringify({ input: PROMPT }),
      });
      const r = await res.json();
      if (res.status !== 200 || r.text !== FINAL_TEXT) console.error(res.status, JSON.stringify(r).slice(0, 300));
      return res.status === 200 && r.text === FINAL_TEXT;
    },
  };
  contenders.push({ build, mf, kinds, ms: Object.fromEntries(Object.keys(kinds).map((k) => [k, []])) });
}
const q = (xs, p) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(p * xs.length))];
try {
  const kindNames = Object.keys(contenders[0].kinds);
  for (const c of contenders) for (const k of kindNames) for (let j = 0; j < 50; j++) if (!(await c.kinds[k]())) throw new Error(`${k}: unexpected answer`);
  // Interleaved: every iteration times every kind on every build, the builds' order alternating.
  for (let it = 0; it < N; it++) {
    for (const k of kindNames) {
      const order = it % 2 ? [...contenders].reverse() : contenders;
      for (const c of order) {
        const t0 = performance.now();
        if (!(await c.kinds[k]())) throw new Error(`${k}: unexpected answer`);
        c.ms[k].push(performance.now() - t0);
      }
    }
  }
  console.log(`${N} interleaved warm requests of each kind per build (after 50 untimed); ms, median (p90)`);
  console.log(`| request | ${builds.map((b) => path.basename(b)).join(" | ")} |`);
  console.log(`|---|${builds.map(() => "---:").join("|")}|`);
  for (const k of kindNames)
    console.log(`| ${k} | ${contenders.map((c) => `${q(c.ms[k], 0.5).toFixed(3)} (${q(c.ms[k], 0.9).toFixed(3)})`).join(" | ")} |`);
} finally {
  for (const c of contenders) await c.mf.dispose();
  srv.close();
}
