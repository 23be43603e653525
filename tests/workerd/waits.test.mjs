// Durable waits end to end (issue 29), in KV mode and in strict mode (`"store": "durable-object"`): the built
// Worker (build/index.js) under workerd through programmatic Miniflare, with real local KV (and the run objects
// in strict mode), persisted to a directory so that a NEW workerd started later over it plays "another process,
// days later". A run paused on an event (the demo tool `wait_for_event`) is resumed by a delivery to
// `POST /events/{token}` made to that new process with no API token; a reused and a guessed token get the same
// refusal; a deadline fires with no request (KV: a cron tick; strict: the run object's alarm); a question
// (`waitTools: ["ask_question"]`) is answered through `POST /approvals/{id}` with `{answer}`.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { apiCaller } from "./support/api.mjs";
import { persistedWorkers } from "./support/persisted.mjs";

const TOKEN = "test-token-waits-0123";
const BASE = "http://localhost";

const call = apiCaller(TOKEN, BASE);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function waitFor(check, ms = 15000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v || Date.now() > end) return v;
    await sleep(100);
  }
}

// One Worker ("a process") in its own workerd over the state persisted in `dir` (support/persisted.mjs).
const worker = persistedWorkers(TOKEN);

function stateDir(name) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `steadfast-waits-${name}-`));
  after(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

// `POST /events/{token}` as a webhook sender makes it: no API token, the payload as the body.
async function deliver(target, token, body) {
  const res = await target.dispatchFetch(`${BASE}/events/${token}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
  const text = await res.text();
  let json;
  try {
    json = JSON.parse(text);
  } catch {
    json = text;
  }
  return { status: res.status, json, text };
}

const demo = {}; // the bundled demo: the mock model's script sends "webhook" messages to wait_for_event
const deadlineScript = {
  model: { provider: "mock", script: [{ toolCalls: [{ name: "wait_for_event", args: { deadlineSeconds: 2 } }] }, { text: "moved on" }] },
};
const questionScript = {
  waitTools: ["ask_question", "sleep_for", "sleep_until"],
  model: {
    provider: "mock",
    script: [{ toolCalls: [{ name: "ask_question", args: { question: "Ship to the old address?", choices: ["yes", "no"] } }] }, { text: "answered" }],
  },
};

for (const mode of ["kv", "strict"]) {
  test(`${mode}: an event delivered with curl's request to a NEW workerd over the persisted state resumes the run once; a reused and a guessed token get the same 404`, { timeout: 90000 }, async () => {
    const dir = stateDir(`event-${mode}`);
    const first = worker(mode, demo, dir);
    const paused = await call(first, "POST", "/runs/pay-1", { input: "wait for the payment webhook" });
    assert.equal(paused.json.status, "awaiting-approval", paused.text);
    const wait = paused.json.waits?.[0];
    assert.equal(wait?.kind, "event", paused.text);
    assert.match(wait.token, /^[0-9a-f]{64}$/);
    assert.ok(wait.dueAt > Date.now() + 23 * 3600_000, "a deadline a day on");
    const listed = await call(first, "GET", "/approvals");
    assert.deepEqual(listed.json.map((a) => [a.id, a.kind]), [[wait.id, "event"]], listed.text);
    assert.ok(!listed.text.includes(wait.token), "the listing never shows the token");
    const runs = await call(first, "GET", "/runs");
    const run = runs.json.runs.find((r) => r.runId === "pay-1");
    assert.deepEqual(run?.waits?.map((w) => [w.id, w.kind, w.dueAt]), [[wait.id, "event", wait.dueAt]], runs.text);
    assert.ok(!runs.text.includes(wait.token), "GET /runs never shows the token");
    await first.stop();

    // Another process, later: nothing ran in between.
    const second = worker(mode, demo, dir);
    const guessed = await deliver(second, "0".repeat(64), { paid: true });
    assert.deepEqual([guessed.status, guessed.json.error?.code], [404, "STEADFAST_WAIT_NOT_FOUND"], guessed.text);
    const malformed = await deliver(second, "not-a-token", { paid: true });
    assert.deepEqual([malformed.status, malformed.text], [guessed.status, guessed.text], "malformed: the same reply");
    const empty = await deliver(second, wait.token, "");
    assert.deepEqual([empty.status, empty.json.error?.code], [400, "STEADFAST_INVALID_INPUT"], empty.text);
    assert.equal((await call(second, "GET", "/runs/pay-1")).json.status, "awaiting-approval", "a refusal changes nothing");

    const delivered = await deliver(second, wait.token, { paid: true, amount: 12 });
    assert.equal(delivered.status, 200, delivered.text);
    assert.equal(delivered.json.waitId, wait.id);
    assert.equal(delivered.json.duplicate, false);
    assert.equal(delivered.json.run.status, "finished", delivered.text);
    assert.equal(delivered.json.run.text, 'Webhook: {"amount":12,"paid":true}');
    const view = await call(second, "GET", "/runs/pay-1");
    assert.equal(view.json.messages.filter((m) => m.role === "tool").length, 1, "one result");

    const reused = await deliver(second, wait.token, { paid: true, amount: 12 });
    assert.deepEqual([reused.status, reused.text], [guessed.status, guessed.text], "reused: the same reply as guessed");
    // A deleted run's token: the same reply again.
    const other = await call(second, "POST", "/runs/pay-2", { input: "another webhook" });
    const token2 = other.json.waits[0].token;
    assert.equal((await call(second, "DELETE", "/runs/pay-2")).status, 200);
    const gone = await deliver(second, token2, { paid: true });
    assert.deepEqual([gone.status, gone.text], [guessed.status, guessed.text], "its run deleted: the same reply");
  });

  test(`${mode}: an event's deadline fires with no request (${mode === "kv" ? "the cron tick" : "the run object's alarm"}) and resumes the run with a timeout result`, { timeout: 90000 }, async () => {
    const dir = stateDir(`deadline-${mode}`);
    const first = worker(mode, deadlineScript, dir);
    const paused = await call(first, "POST", "/runs/late-1", { input: "go" });
    assert.equal(paused.json.status, "awaiting-approval", paused.text);
    const { token, dueAt } = paused.json.waits[0];
    await first.stop();
    const second = worker(mode, deadlineScript, dir);
    await sleep(Math.max(0, dueAt - Date.now()) + 200);
    if (mode === "kv") {
      assert.equal((await call(second, "GET", "/runs/late-1")).json.status, "awaiting-approval", "KV mode: the tick resolves it");
      await second.tick();
    }
    const view = await waitFor(async () => {
      const r = await call(second, "GET", "/runs/late-1");
      return r.json.status === "finished" && r;
    });
    assert.ok(view, "the deadline resumed the run with no request");
    const result = view.json.messages.find((m) => m.role === "tool");
    assert.equal(result.isError, true, JSON.stringify(result));
    assert.match(result.content, /timeout/);
    assert.equal(view.json.messages.at(-1).content, "moved on");
    const late = await deliver(second, token, { paid: true });
    assert.deepEqual([late.status, late.json.error?.code], [404, "STEADFAST_WAIT_NOT_FOUND"], late.text);
  });

  test(`${mode}: a question is answered through POST /approvals/{id} with {answer} by another process`, { timeout: 90000 }, async () => {
    const dir = stateDir(`question-${mode}`);
    const first = worker(mode, questionScript, dir);
    const paused = await call(first, "POST", "/runs/ask-1", { input: "ship order 7" });
    assert.equal(paused.json.status, "awaiting-approval", paused.text);
    const wait = paused.json.waits[0];
    assert.deepEqual([wait.kind, wait.question, wait.choices, wait.token], ["question", "Ship to the old address?", ["yes", "no"], undefined]);
    await first.stop();
    const second = worker(mode, questionScript, dir);
    const listed = await call(second, "GET", "/approvals");
    assert.deepEqual(listed.json.map((a) => [a.kind, a.question, a.choices]), [["question", "Ship to the old address?", ["yes", "no"]]], listed.text);
    const wrong = await call(second, "POST", `/approvals/${wait.id}`, { answer: "maybe" });
    assert.deepEqual([wrong.status, wrong.json.error?.code], [400, "STEADFAST_INVALID_INPUT"], wrong.text);
    const done = await call(second, "POST", `/approvals/${wait.id}`, { answer: "no", note: "kept the new one" });
    assert.equal(done.json.status, "finished", done.text);
    const result = done.json.messages.find((m) => m.role === "tool");
    assert.deepEqual([result.content, result.isError ?? false], ["no", false], JSON.stringify(result));
    const again = await call(second, "POST", `/approvals/${wait.id}`, { answer: "no" });
    assert.deepEqual([again.status, again.json.error?.code], [404, "STEADFAST_APPROVAL_NOT_FOUND"], again.text);
  });
}

for (const mode of ["kv", "strict"]) {
  test(`${mode}: messages sent with queue to a run that waits are answered 202 and applied, in order, by the run's resumption`, { timeout: 90000 }, async () => {
    const dir = stateDir(`steer-${mode}`);
    // (Not the demo script: its second turn reads the webhook's result, and a message may come before it: in KV
    // mode the resumption's first boundary is past the poll interval, its settle window having passed.)
    const steerScript = {
      model: {
        provider: "mock",
        script: [{ toolCalls: [{ name: "wait_for_event", args: { deadlineSeconds: 86400 } }] }, { text: "noted" }, { text: "noted again" }],
      },
    };
    const w = worker(mode, steerScript, dir);
    const paused = await call(w, "POST", "/runs/steer-1", { input: "wait for the payment webhook" });
    assert.equal(paused.json.status, "awaiting-approval", paused.text);
    const first = await call(w, "POST", "/runs/steer-1", { input: "ship to the EU warehouse", queue: true });
    assert.equal(first.status, 202, first.text);
    assert.equal(first.json.queued.applied, false, first.text);
    assert.match(first.json.queued.messageId, /^msg_/);
    assert.equal(first.json.status, "awaiting-approval", "the stored run: nothing ran");
    const second = await call(w, "POST", "/runs/steer-1", { input: "and gift-wrap it" }, { prefer: "queue" });
    assert.equal(second.status, 202, second.text);
    const alone = await call(w, "POST", "/runs/steer-1", { input: "x", interrupt: true });
    assert.deepEqual([alone.status, alone.json.error?.code], [400, "STEADFAST_INVALID_INPUT"], alone.text);

    const delivered = await deliver(w, paused.json.waits[0].token, { paid: true });
    assert.equal(delivered.status, 200, delivered.text);
    const view = await waitFor(async () => {
      const r = await call(w, "GET", "/runs/steer-1");
      return r.json.status === "finished" && r;
    });
    assert.ok(view, "the run finished");
    const roles = view.json.messages.map((m) => m.role);
    const users = view.json.messages.filter((m) => m.role === "user").map((m) => m.content);
    assert.deepEqual(users, ["wait for the payment webhook", "ship to the EU warehouse", "and gift-wrap it"], view.text);
    assert.ok(roles.indexOf("tool") < roles.lastIndexOf("user"), "after the event's result");
  });
}
