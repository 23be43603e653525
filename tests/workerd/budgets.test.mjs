// Budgets end to end (issue 31, part 1), in KV mode and in strict mode (`"store": "durable-object"`): the built
// Worker (build/index.js) under workerd through programmatic Miniflare, configured with `limits.maxTotalTokens`
// and a mock script that keeps calling a demo tool. `POST /runs/{id}` answers a run that finished on its budget
// (`finishReason: "budget-exceeded"`, the note naming the limit, the crossing turn's call answered); a NEW workerd
// whose configuration raised the limit resumes it in place (`POST /runs/{id}/resume`) to its final answer; and a
// configuration with `onExceeded: "throw"` answers 409 STEADFAST_BUDGET_EXCEEDED with the limit in its details.
// Cost (part 2): with `prices` for the mock model, `GET /runs/{id}` reports `usage.costUsd` and `limits.maxCostUsd`
// stops the run on its dollars.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { apiCaller } from "./support/api.mjs";
import { persistedWorkers } from "./support/persisted.mjs";

const TOKEN = "test-token-budgets-012345";
const call = apiCaller(TOKEN, "http://localhost");
const persisted = persistedWorkers(TOKEN);

// Three tool turns (15 tokens each, the mock's usage), then the answer.
const lookup = { toolCalls: [{ name: "charge", args: { order: 7 } }] };
const config = (limits) => ({
  model: { provider: "mock", script: [lookup, lookup, lookup, { text: "all looked up" }] },
  demoTools: true,
  limits: { maxSteps: 10, ...limits },
});

for (const mode of ["kv", "strict"]) {
  test(`${mode}: a run stops on its token budget; a process with a raised limit resumes it in place`, { timeout: 90000 }, async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), `steadfast-budgets-${mode}-`));
    after(() => fs.rmSync(dir, { recursive: true, force: true }));
    const tight = persisted(mode, config({ maxTotalTokens: 30 }), dir);
    const stopped = await call(tight, "POST", "/runs/b-1", { input: "look it up" });
    assert.equal(stopped.status, 200, stopped.text);
    assert.deepEqual([stopped.json.status, stopped.json.finishReason, stopped.json.steps], ["finished", "budget-exceeded", 2], stopped.text);
    assert.match(stopped.json.note, /maxTotalTokens 30, used 30/);
    assert.equal(stopped.json.messages.at(-1).role, "tool", "the crossing turn's call has its result");
    const refused = await call(tight, "POST", "/runs/b-1/resume");
    assert.deepEqual([refused.status, refused.json.error?.code], [409, "STEADFAST_BUDGET_EXCEEDED"], refused.text);
    await tight.stop();

    const raised = persisted(mode, config({ maxTotalTokens: 1000 }), dir);
    const done = await call(raised, "POST", "/runs/b-1/resume");
    assert.equal(done.status, 200, done.text);
    assert.deepEqual([done.json.finishReason, done.json.text, done.json.steps], ["stop", "all looked up", 4], done.text);
    assert.equal(done.json.messages.filter((m) => m.role === "tool").length, 3, "each call ran once");
    await raised.stop();
  });

  test(`${mode}: a run reports its costUsd from the configured prices and stops on maxCostUsd`, { timeout: 90000 }, async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), `steadfast-costs-${mode}-`));
    after(() => fs.rmSync(dir, { recursive: true, force: true }));
    // $2 and $10 per million tokens: a mock turn (10 in, 5 out) costs $0.00007.
    const priced = (limits) => ({ ...config(limits), prices: { mock: { input: 2, output: 10 } } });
    const w = persisted(mode, priced({ maxCostUsd: 0.0001 }), dir);
    const r = await call(w, "POST", "/runs/c-1", { input: "look it up" });
    assert.equal(r.status, 200, r.text);
    assert.deepEqual([r.json.finishReason, r.json.steps, r.json.usage.costUsd], ["budget-exceeded", 2, 0.00014], r.text);
    assert.match(r.json.note, /maxCostUsd \$0\.0001, used \$0\.00014/);
    const run = await call(w, "GET", "/runs/c-1");
    assert.equal(run.json.usage.costUsd, 0.00014, run.text);
    // The built-in price of the offline mock model is 0.
    await w.stop();
    const free = persisted(mode, config({}), dir);
    const f = await call(free, "POST", "/runs/c-2", { input: "look it up" });
    assert.deepEqual([f.json.finishReason, f.json.usage.costUsd], ["stop", 0], f.text);
    await free.stop();
  });

  test(`${mode}: onExceeded "throw" answers 409 STEADFAST_BUDGET_EXCEEDED naming the limit`, { timeout: 90000 }, async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), `steadfast-budgets-throw-${mode}-`));
    after(() => fs.rmSync(dir, { recursive: true, force: true }));
    const w = persisted(mode, config({ maxOutputTokens: 10, onExceeded: "throw" }), dir);
    const r = await call(w, "POST", "/runs/b-2", { input: "look it up" });
    assert.equal(r.status, 409, r.text);
    assert.equal(r.json.error.code, "STEADFAST_BUDGET_EXCEEDED", r.text);
    assert.deepEqual(r.json.error.details, { limit: "maxOutputTokens", max: 10, used: 10 }, r.text);
    const run = await call(w, "GET", "/runs/b-2");
    assert.deepEqual([run.json.status, run.json.finishReason], ["finished", "budget-exceeded"], run.text);
    await w.stop();
  });
}
