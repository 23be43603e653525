// Strict mode's recovery gate (issue 33), end to end in workerd: the built Worker with its run objects
// (`"store": "durable-object"`) and `recovery.ceiling` 3. 24 runs fail while the model provider (an
// OpenAI-compatible server on 127.0.0.1) answers 503; it comes back; no request and no cron tick follow: each run
// object's alarm (set for when its lease could be taken over) resumes its run after taking a slot of the gate
// object (`gate:<model>` on the RUN_OBJECTS binding), and a run turned away comes back at its turn. Checked: every
// run finishes, each charge (a webhook tool, counted per Idempotency-Key) happens once per key, and the provider
// never sees more than 3 calls at once although every alarm falls due within about a second.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { Miniflare } from "miniflare";
import { apiCaller } from "./support/api.mjs";
import { builtWorker } from "./support/built.mjs";
import { startProvider } from "./support/provider.mjs";

const TOKEN = "gate-test-token-0123456789";
const RUNS = 24;
const CEILING = 3;
const call = apiCaller(TOKEN);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const srv = await startProvider(50);
const logs = [];
const config = {
  store: "durable-object",
  model: { provider: "openai", model: "gpt-test", baseUrl: `http://127.0.0.1:${srv.port}/v1` },
  tools: [{ name: "charge", description: "Charges the order", inputSchema: { type: "object" }, url: `http://127.0.0.1:${srv.port}/tools/charge` }],
  allowedHosts: ["127.0.0.1"],
  // A provider failure fails the run at once (no retries inside the request); the backoff is 1 ms; at most 3
  // resumes on the provider at once.
  retry: { maxAttempts: 1 },
  recovery: { intervalMs: 1, ceiling: CEILING },
  // A short lease, so each run's alarm (set for when its lease could be taken over) fires within seconds.
  settleMs: 150,
  lease: { ttlMs: 2000, renewEveryMs: 500, graceMs: 500 },
};
const mf = new Miniflare({
  ...builtWorker("build"),
  kvNamespaces: ["RUNS"],
  durableObjects: { RUN_OBJECTS: { className: "RunObject", useSQLite: true } },
  bindings: { STEADFAST_TOKEN: TOKEN, STEADFAST_CONFIG: JSON.stringify(config), OPENAI_API_KEY: "sk-test" },
  cf: false,
  handleRuntimeStdio(stdout, stderr) {
    for (const s of [stdout, stderr]) s.on("data", (d) => logs.push(...d.toString().split("\n").filter(Boolean)));
  },
});

after(async () => {
  await mf.dispose();
  srv.server.close();
});

test(`strict mode: ${RUNS} runs' alarms recover them through the gate, never more than ${CEILING} on the provider at once`, { timeout: 120000 }, async () => {
  // The outage: every run fails on its first model call (502, STEADFAST_PROVIDER_UNAVAILABLE), all at once.
  const ids = Array.from({ length: RUNS }, (_, i) => `gated-${String(i).padStart(2, "0")}`);
  const answers = await Promise.all(ids.map((id) => call(mf, "POST", `/runs/${id}`, { input: "charge it" })));
  for (const a of answers) assert.equal(a.json.error?.code, "STEADFAST_PROVIDER_UNAVAILABLE", a.text);
  assert.equal(srv.state.charges.size, 0);
  // The provider is back. Nothing else happens: the objects' alarms fall due (about 2.5 s after each failure).
  srv.state.down = false;
  srv.state.peak = 0;
  const started = Date.now();
  const pendingRuns = async () => (await call(mf, "GET", "/runs?status=in-progress")).json.runs;
  let left = ids;
  while (Date.now() - started < 90000) {
    await sleep(500);
    left = await pendingRuns();
    if (left.length === 0) break;
  }
  if (left.length > 0) console.log(`left: ${JSON.stringify(left)}\n${logs.slice(-20).join("\n")}`);
  assert.equal(left.length, 0, "every run finished by its alarm");
  for (const id of ids) {
    const run = await call(mf, "GET", `/runs/${id}`);
    assert.equal(run.json.status, "finished", run.text);
  }
  assert.equal(srv.state.charges.size, RUNS, "one charge key per run");
  assert.ok([...srv.state.charges.values()].every((n) => n === 1), "each key charged once");
  assert.ok(srv.state.peak <= CEILING, `the provider saw ${srv.state.peak} calls at once (ceiling ${CEILING})`);
  // The gate object always answered (a gate that cannot be reached lets the resume go ahead, logged).
  assert.ok(!logs.some((l) => l.includes("recovery gate answered") || l.includes("gate:gpt-test")), logs.join("\n"));
  console.log(`recovered ${RUNS} runs by their alarms in ${((Date.now() - started) / 1000).toFixed(1)} s, provider peak ${srv.state.peak} of ${CEILING}`);
});
