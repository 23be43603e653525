// Fallback models end to end (issue 31, part 3), in KV mode and in strict mode: the built Worker under workerd
// with a configured model that answers 503 to every call (a mock script of errors) and `fallbacks: [a second
// mock]`. The run finishes on the fallback's answers; each turn records the model that answered (`model` on its
// assistant message, in `GET /runs/{id}` and on the `step` events), and the SSE stream shows a `provider.fallback`
// event for each step down, with the failure's code; `GET /metrics` counts the step downs (KV mode: the isolate
// that served the run). With `breaker`, an open breaker skips the primary at once.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { apiCaller } from "./support/api.mjs";
import { persistedWorkers } from "./support/persisted.mjs";
import { sseReader } from "./support/sse.mjs";

const TOKEN = "test-token-fallbacks-0123456";
const call = apiCaller(TOKEN, "http://localhost");
const persisted = persistedWorkers(TOKEN);

const down = { error: { status: 503 } };
const config = {
  model: { provider: "mock", model: "primary", script: [down, down, down] },
  fallbacks: [{ provider: "mock", model: "backup", script: [{ toolCalls: [{ name: "charge", args: { order: 7 } }] }, { text: "charged, by the backup" }] }],
  demoTools: true,
  retry: { baseMs: 1, capMs: 5 },
  prices: { backup: { input: 1, output: 1 } },
};

for (const mode of ["kv", "strict"]) {
  test(`${mode}: a model that fails every call falls back to the next one; the turns record it`, { timeout: 90000 }, async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), `steadfast-fallbacks-${mode}-`));
    after(() => fs.rmSync(dir, { recursive: true, force: true }));
    const w = persisted(mode, config, dir);
    const res = await w.dispatchFetch(`http://localhost/runs/fb-1`, {
      method: "POST",
      headers: { authorization: `Bearer ${TOKEN}`, accept: "text/event-stream", "content-type": "application/json" },
      body: JSON.stringify({ input: "charge order 7" }),
    });
    assert.equal(res.status, 200);
    const reader = sseReader(res.body);
    const events = [];
    let e;
    while ((e = await reader.next())) events.push(e);
    const stepDowns = events.filter((x) => x.type === "provider.fallback").map((x) => [x.step, x.from, x.to, x.code]);
    assert.deepEqual(stepDowns, [
      [1, "primary", "backup", "STEADFAST_PROVIDER_UNAVAILABLE"],
      [2, "primary", "backup", "STEADFAST_PROVIDER_UNAVAILABLE"],
    ], JSON.stringify(events.map((x) => x.type)));
    assert.deepEqual(events.filter((x) => x.type === "step").map((x) => x.model), ["backup", "backup"]);
    const run = await call(w, "GET", "/runs/fb-1");
    assert.deepEqual([run.json.status, run.json.finishReason, run.json.messages.at(-1).content], ["finished", "stop", "charged, by the backup"], run.text);
    assert.equal(run.json.fingerprint.model, "primary | backup", "the chain is the model");
    assert.deepEqual(run.json.messages.filter((m) => m.role === "assistant").map((m) => m.model), ["backup", "backup"]);
    assert.equal(run.json.usage.costUsd, 0.00003, "priced by the model that answered");
    if (mode === "kv") {
      // The isolate's counters: both turns stepped down to the backup after the primary's share of attempts.
      assert.equal((await w.dispatchFetch("http://localhost/metrics")).status, 401, "behind the token");
      const metrics = await w.dispatchFetch("http://localhost/metrics", { headers: { authorization: `Bearer ${TOKEN}` } });
      assert.equal(metrics.status, 200);
      assert.match(metrics.headers.get("content-type"), /^text\/plain; version=0\.0\.4/);
      const lines = (await metrics.text()).split("\n");
      for (const line of [
        "# TYPE steadfast_fallbacks_total counter",
        'steadfast_fallbacks_total{agent="lead"} 2',
        'steadfast_model_calls_total{agent="lead"} 6',
        'steadfast_model_retries_total{agent="lead"} 2',
      ]) assert.ok(lines.includes(line), `${line} in ${lines.join("\n")}`);
    }
    await w.stop();
  });
}

// With a breaker per dependency: the primary's two failed attempts of the first turn open its breaker, so the
// second turn skips it at once (a `provider.fallback` with STEADFAST_PROVIDER_CIRCUIT_OPEN, no call made), and
// `GET /health` shows the breaker open (KV mode: the request's own isolate ran the run).
const withBreaker = { ...config, breaker: { minCalls: 2, failurePercent: 100, coolDownMs: 600000 } };

for (const mode of ["kv", "strict"]) {
  test(`${mode}: an open breaker sends the next turn straight to the fallback; /health shows it`, { timeout: 90000 }, async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), `steadfast-breakers-${mode}-`));
    after(() => fs.rmSync(dir, { recursive: true, force: true }));
    const w = persisted(mode, withBreaker, dir);
    const before = await (await w.dispatchFetch("http://localhost/health")).json();
    assert.equal(before.breakers, undefined, "no breaker before any call");
    const res = await w.dispatchFetch(`http://localhost/runs/br-1`, {
      method: "POST",
      headers: { authorization: `Bearer ${TOKEN}`, accept: "text/event-stream", "content-type": "application/json" },
      body: JSON.stringify({ input: "charge order 7" }),
    });
    assert.equal(res.status, 200, res.status === 200 ? "" : await res.text());
    const reader = sseReader(res.body);
    const events = [];
    let e;
    while ((e = await reader.next())) events.push(e);
    const stepDowns = events.filter((x) => x.type === "provider.fallback").map((x) => [x.step, x.code]);
    assert.deepEqual(stepDowns, [
      [1, "STEADFAST_PROVIDER_UNAVAILABLE"],
      [2, "STEADFAST_PROVIDER_CIRCUIT_OPEN"],
    ]);
    const run = await call(w, "GET", "/runs/br-1");
    assert.equal(run.json.messages.at(-1).content, "charged, by the backup", run.text);
    if (mode === "kv") {
      const health = await (await w.dispatchFetch("http://localhost/health")).json();
      assert.equal(health.ok, true);
      const [b, backup, ...rest] = health.breakers ?? [];
      assert.deepEqual([b?.dependency, b?.state, backup?.dependency, backup?.state, rest.length], ["primary", "open", "backup", "closed", 0], JSON.stringify(health));
      assert.ok(b.until > Date.now() + 500000, "open for the cool-down");
    }
    await w.stop();
  });
}
