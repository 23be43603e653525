// Recovery fanned out through a queue (issue 33), end to end in workerd: the built Worker with a local Cloudflare
// Queue (Miniflare) bound as RECOVERY_QUEUE, consumed by the Worker's own `queue` handler. 200 runs fail while the
// model provider (an OpenAI-compatible server on 127.0.0.1) answers 503; it comes back; one cron tick sends the
// due runs to the queue and resumes only its canary; the consumer resumes the rest. Checked: every run finishes
// (a resume that failed is sent again by the next tick: at most two more, each printing what it found left),
// each charge (a webhook tool, counted per Idempotency-Key) happens once per key, the tick sent 199 runs (and
// resumed one) and the consumer finished them, and the provider never saw more calls at once than the consumers may make (Miniflare
// runs one consumer invocation at a time, one message after another: 1) plus the tick's canary.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { Miniflare } from "miniflare";
import { apiCaller } from "./support/api.mjs";
import { builtWorker } from "./support/built.mjs";
import { startProvider } from "./support/provider.mjs";

const TOKEN = "queue-test-token-0123456789";
const RUNS = 200;
const call = apiCaller(TOKEN);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const srv = await startProvider(20);
const logs = [];
const config = {
  model: { provider: "openai", model: "gpt-test", baseUrl: `http://127.0.0.1:${srv.port}/v1` },
  tools: [{ name: "charge", description: "Charges the order", inputSchema: { type: "object" }, url: `http://127.0.0.1:${srv.port}/tools/charge` }],
  allowedHosts: ["127.0.0.1"],
  // A provider failure fails the run at once (no retries inside the request); the sweep's backoff is 1 ms.
  retry: { maxAttempts: 1 },
  recovery: { intervalMs: 1 },
  // A short lease settle window (default 1 s): the consumer resumes one run after another. A short lease too, so a
  // resume turned away by a lease whose write outlasted the settle window (the test command's load) can be taken
  // over by the next tick within seconds.
  settleMs: 150,
  lease: { ttlMs: 2000, renewEveryMs: 500, graceMs: 500 },
};
const mf = new Miniflare({
  ...builtWorker("build"),
  kvNamespaces: ["RUNS"],
  durableObjects: { RUN_OBJECTS: { className: "RunObject", useSQLite: true } },
  queueProducers: { RECOVERY_QUEUE: "steadfast-recovery" },
  queueConsumers: { "steadfast-recovery": { maxBatchSize: 10, maxBatchTimeout: 1, maxRetries: 3 } },
  bindings: { STEADFAST_TOKEN: TOKEN, STEADFAST_CONFIG: JSON.stringify(config), OPENAI_API_KEY: "sk-test" },
  unsafeTriggerHandlers: true,
  cf: false,
  handleRuntimeStdio(stdout, stderr) {
    for (const s of [stdout, stderr]) s.on("data", (d) => logs.push(...d.toString().split("\n").filter(Boolean)));
  },
});

after(async () => {
  await mf.dispose();
  srv.server.close();
});

test(`a cron tick fans ${RUNS} interrupted runs out through the queue; the consumer finishes them, each charge once per key`, { timeout: 180000 }, async () => {
  // The outage: every run fails on its first model call (502, STEADFAST_PROVIDER_UNAVAILABLE), ten at a time.
  const ids = Array.from({ length: RUNS }, (_, i) => `order-${String(i).padStart(3, "0")}`);
  for (let i = 0; i < ids.length; i += 10) {
    const answers = await Promise.all(ids.slice(i, i + 10).map(async (id) => {
      // A client retries a busy answer (a lease write slower than the settle window), after the lease's time.
      for (let n = 0; ; n++) {
        const a = await call(mf, "POST", `/runs/${id}`, { input: "charge it" });
        if (a.json.error?.code !== "STEADFAST_SESSION_BUSY" || n === 5) return a;
        await sleep(3000);
      }
    }));
    for (const a of answers) assert.equal(a.json.error?.code, "STEADFAST_PROVIDER_UNAVAILABLE", a.text);
  }
  assert.equal(srv.state.charges.size, 0);
  // The provider is back; one cron tick.
  srv.state.down = false;
  srv.state.peak = 0;
  await sleep(20);
  const worker = await mf.getWorker();
  await worker.scheduled({ cron: "* * * * *", scheduledTime: new Date() });
  const tick = logs.map((l) => l.match(/steadfast sweep \(.*?\): (\{.*\})/)).find(Boolean);
  assert.ok(tick, `the tick's report: ${logs.slice(-5).join("\n")}`);
  const report = JSON.parse(tick[1]);
  assert.equal(report.enqueued, RUNS - 1, tick[1]);
  assert.equal(report.resumed, 1, "the canary");
  assert.equal(report.queueSends, 2, "199 messages in batches of 100");
  // The consumer drains the queue: until no run is pending, or none finished for 5 s. A resume that failed (a
  // busy lease, a store hiccup under the test command's load) is recorded on its run and the next tick sends it
  // again, as at any other time: up to two more ticks, each printing what it found left.
  const pendingRuns = async () => (await call(mf, "GET", "/runs?status=in-progress")).json.runs;
  let left = [];
  for (let t = 0; t < 3; t++) {
    if (t > 0) {
      const views = await Promise.all(left.map((r) => call(mf, "GET", `/runs/${r.runId}`)));
      console.log(`after tick ${t}: ${left.length} left: ${JSON.stringify(left)} ${views.map((v) => v.text.slice(0, 300)).join("\n")}`);
      await worker.scheduled({ cron: "* * * * *", scheduledTime: new Date() });
      console.log(`tick ${t + 1}: ${logs.filter((l) => l.includes("steadfast sweep (")).at(-1)}`);
    }
    let last = Date.now();
    let before = Infinity;
    do {
      await sleep(500);
      left = await pendingRuns();
      if (left.length < before) [before, last] = [left.length, Date.now()];
    } while (left.length > 0 && Date.now() - last < 5000);
    if (left.length === 0) break;
  }
  assert.equal(left.length, 0, "every run finished");
  for (const id of ids) {
    const run = await call(mf, "GET", `/runs/${id}`);
    assert.equal(run.json.status, "finished", run.text);
  }
  assert.equal(srv.state.charges.size, RUNS, "one charge key per run");
  assert.ok([...srv.state.charges.values()].every((n) => n === 1), "each key charged once");
  // No message was unreadable, and the consumer never failed to build its agent.
  assert.ok(!logs.some((l) => l.includes("not a recovery message") || l.includes("recovery consumer")), logs.join("\n"));
  assert.ok(srv.state.peak <= 2, `the provider saw ${srv.state.peak} calls at once (one consumer at a time, and the canary)`);
  console.log(`recovered ${RUNS} runs through the queue, provider peak ${srv.state.peak} calls at once`);
});
