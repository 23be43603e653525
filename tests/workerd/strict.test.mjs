// Strict mode end to end (`"store": "durable-object"`): the built Worker (build/index.js) under workerd through
// programmatic Miniflare, with its run objects (SQLite-backed `RunObject`, as wrangler.toml declares them) and
// real local KV (the listing index). The Worker forwards a run's requests to the run's object, which executes
// the run; a slow webhook tool on a local HTTP server (127.0.0.1) counts its executions per Idempotency-Key.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { Miniflare } from "miniflare";
import { apiCaller, callKey } from "./support/api.mjs";
import { builtWorker } from "./support/built.mjs";
import { sseReader } from "./support/sse.mjs";

const TOKEN = "test-token-strict-0123";
const BASE = "http://localhost";
const instances = [];
after(async () => {
  for (const mf of instances) await mf.dispose();
});

const script = builtWorker();

// Two Workers ("replicas": separate isolates) over one KV namespace and one set of run objects (hosted by the
// first), as two Worker instances in two locations would share them.
// `persist`: KV and the objects' SQLite storage kept in that directory (a later Miniflare over it sees them).
function replicas(config, n = 2, persist) {
  assert.ok(fs.existsSync("build/index.js"), "build/index.js is missing: run ./scripts/build-worker");
  const bindings = { STEADFAST_TOKEN: TOKEN, STEADFAST_CONFIG: JSON.stringify({ store: "durable-object", ...config }) };
  const mf = new Miniflare({
    ...(persist ? { kvPersist: path.join(persist, "kv"), durableObjectsPersist: path.join(persist, "do") } : {}),
    workers: Array.from({ length: n }, (_, i) => ({
      ...script,
      name: `replica-${i}`,
      kvNamespaces: { RUNS: "runs-shared" },
      durableObjects: { RUN_OBJECTS: { className: "RunObject", useSQLite: true, scriptName: "replica-0" } },
      bindings,
    })),
    unsafeTriggerHandlers: true,
    cf: false,
  });
  instances.push(mf);
  return Array.from({ length: n }, (_, i) => ({
    mf,
    dispatchFetch: async (url, init) => (await mf.getWorker(`replica-${i}`)).fetch(url, init),
  }));
}

const call = apiCaller(TOKEN, BASE);

// A webhook tool that answers after `delayMs`, counting executions per Idempotency-Key.
function startServer() {
  const state = { calls: [], delayMs: 1500 };
  const server = http.createServer((req, res) => {
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", () => {
      state.calls.push({ path: req.url, key: req.headers["idempotency-key"], at: Date.now() });
      setTimeout(() => {
        res.writeHead(200, { "content-type": "application/json" });
        res.end(JSON.stringify({ ok: true }));
      }, state.delayMs);
    });
  });
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve({ server, state, port: server.address().port })));
}

const srv = await startServer();
after(() => srv.server.close());

const slowTool = { name: "lookup", description: "Looks something up slowly", url: `http://127.0.0.1:${srv.port}/tools/slow`,
  inputSchema: { type: "object", properties: { q: { type: "string" } } } };
const oneSlowCall = { tools: [slowTool], allowedHosts: ["127.0.0.1"],
  model: { provider: "mock", script: [{ toolCalls: [{ name: "lookup", args: { q: "x" } }] }, { text: "looked up" }] } };

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function waitFor(check, ms = 10000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v || Date.now() > end) return v;
    await sleep(50);
  }
}

test("strict mode: a run lives in its object: start, inspect, list, history, approval by another request, 202 with Prefer: respond-async", { timeout: 60000 }, async () => {
  const [a, b] = replicas({ recovery: { intervalMs: 1 } });
  const done = await call(a, "POST", "/runs/order-1", { input: "charge and ship order 7" });
  // The demo's ship tool dies once per run (a propagating error): the run stays resumable, then resumes.
  assert.equal(done.status, 502, done.text);
  const resumed = await call(b, "POST", "/runs/order-1/resume");
  assert.equal(resumed.json.status, "finished", resumed.text);
  const view = await call(b, "GET", "/runs/order-1");
  assert.equal(view.json.status, "finished", view.text);
  // Its storage: the rows its object wrote (its own object executes it: no request to count), priced at $1 per
  // million rows, and the index's KV operations.
  const storage = view.json.usage.storage;
  assert.ok(storage.rowsWritten >= 4 && storage.writes >= 1, view.text);
  assert.equal(Math.round(storage.costUsd * 1e9), storage.reads * 500 + (storage.writes + storage.deletes + storage.lists) * 5000 + storage.requests * 150 + storage.rowsWritten * 1000, view.text);
  const history = await call(a, "GET", "/runs/order-1/history?limit=3");
  assert.equal(history.json.length, 3, history.text);

  const paused = await call(a, "POST", "/runs/refund-1", { input: "please refund order 7" });
  assert.equal(paused.json.status, "awaiting-approval", paused.text);
  const listed = await call(b, "GET", "/runs");
  assert.deepEqual(listed.json.runs.map((r) => r.runId), ["refund-1"], listed.text);
  const approvals = await call(b, "GET", "/approvals");
  assert.equal(approvals.json.length, 1, approvals.text);
  const approved = await call(b, "POST", `/approvals/${approvals.json[0].id}`, { approved: true });
  assert.equal(approved.json.status, "finished", approved.text);
  assert.deepEqual((await call(a, "GET", "/runs")).json.runs, []);

  // Answered at once: 202 with the run id; the run goes on in its object and finishes.
  const accepted = await call(a, "POST", "/runs/async-1", { input: "please refund order 8" }, { prefer: "respond-async" });
  assert.equal(accepted.status, 202, accepted.text);
  assert.deepEqual(accepted.json, { runId: "async-1", status: "accepted" });
  assert.equal(accepted.headers.get("location"), "/runs/async-1");
  const later = await waitFor(async () => {
    const r = await call(b, "GET", "/runs/async-1");
    return r.json.status === "awaiting-approval" && r;
  });
  assert.ok(later, "the accepted run reached its approval");
  // A refusal before the run starts is the usual coded error, not a 202.
  const refused = await call(a, "POST", "/runs/async-1", { input: "more" }, { prefer: "respond-async" });
  assert.deepEqual([refused.status, refused.json.error?.code], [409, "STEADFAST_SESSION_AWAITING_APPROVAL"], refused.text);
  // A bad store value in the configuration is a coded error.
  const [bad] = replicas({ store: "dynamo" }, 1);
  const r = await call(bad, "POST", "/runs/x", { input: "x" });
  assert.deepEqual([r.status, r.json.error?.code], [500, "STEADFAST_CONFIG_INVALID"], r.text);
  assert.match(r.json.error.message, /store/);
});

// An event as the journal records it (what a stream adds, or the journal does not keep, left out).
const asRecorded = ({ seq, at, v, replacedBy, ...rest }) => JSON.stringify(rest);
const isRecorded = (e) => ["step", "tool.done", "approval.requested", "error"].includes(e.type) || (e.type === "run.done" && e.status !== "in-progress");

test("strict mode: live events from the run's object to several watchers: one joining mid-run with Last-Event-ID gets the missed events once, then the live ones (tool.start), and the end", { timeout: 60000 }, async () => {
  const twoSlowCalls = { ...oneSlowCall, model: { provider: "mock", script: [
    { toolCalls: [{ name: "lookup", args: { q: "a" } }] }, { toolCalls: [{ name: "lookup", args: { q: "b" } }] }, { text: "looked up twice" }] } };
  const [a, b] = replicas(twoSlowCalls);
  const before = srv.state.calls.length;
  const started = await a.dispatchFetch(`${BASE}/runs/watched`, { method: "POST",
    headers: { authorization: `Bearer ${TOKEN}`, accept: "text/event-stream", "content-type": "application/json" },
    body: JSON.stringify({ input: "go" }) });
  assert.equal(started.status, 200);
  const first = sseReader(started.body);
  let e;
  while ((e = await first.next()) && e.type !== "tool.start");
  assert.ok(e, "the first call started");
  const cursor = first.lastId;
  assert.match(cursor, /^[0-9]+$/, "a journal position");
  // The second watcher joins through the other Worker while the first call runs, from the first's cursor.
  const joined = await b.dispatchFetch(`${BASE}/runs/watched/events`, {
    headers: { authorization: `Bearer ${TOKEN}`, accept: "text/event-stream", "last-event-id": cursor } });
  assert.equal(joined.status, 200);
  assert.match(joined.headers.get("content-type"), /text\/event-stream/);
  const second = sseReader(joined.body);
  const [firstRest, secondAll] = await Promise.all([
    (async () => { const out = []; while ((e = await first.next())) out.push(e); return out; })(),
    (async () => { const out = []; let x; while ((x = await second.next())) out.push(x); return out; })(),
  ]);
  // Recorded events: exactly those the first stream had after the cursor, in order; nothing twice.
  assert.deepEqual(secondAll.filter(isRecorded).map(asRecorded), firstRest.filter(isRecorded).map(asRecorded));
  assert.deepEqual(secondAll.map((x) => x.seq), secondAll.map((_, i) => i), "gapless seq");
  // Live from the object: the second call's start, before its result.
  const startAt = secondAll.findIndex((x) => x.type === "tool.start" && x.args?.q === "b");
  const doneAt = secondAll.findIndex((x) => x.type === "tool.done" && x.toolCallId === secondAll[startAt]?.toolCallId);
  assert.ok(startAt >= 0 && startAt < doneAt, JSON.stringify(secondAll.map((x) => x.type)));
  assert.equal(secondAll.at(-1).type, "run.done");
  assert.match(second.lastId, /^[0-9]+\.done$/);
  assert.equal(second.lastId, first.lastId, "both streams end at the same cursor");
  // Coming back with that cursor: nothing more (204: an EventSource stops reconnecting).
  const again = await b.dispatchFetch(`${BASE}/runs/watched/events`, { headers: { authorization: `Bearer ${TOKEN}`, "last-event-id": second.lastId } });
  assert.equal(again.status, 204);
  assert.equal(srv.state.calls.length - before, 2, "each call ran once");
});

test("strict mode: a session's send executes in the object of the turn it starts: 202 with Prefer: respond-async before its slow tool ends, the turn finishes with no cron tick, the next send goes to the next turn's object", { timeout: 60000 }, async () => {
  // The mock model reads the session's whole conversation: a script for two turns.
  const turn = [{ toolCalls: [{ name: "lookup", args: { q: "x" } }] }, { text: "looked up" }];
  const [a, b] = replicas({ ...oneSlowCall, model: { provider: "mock", script: [...turn, ...turn] } });
  const before = srv.state.calls.length;
  for (const n of [1, 2]) {
    const started = Date.now();
    const accepted = await call(a, "POST", "/sessions/chat-1", { input: `turn ${n}` }, { prefer: "respond-async" });
    assert.equal(accepted.status, 202, accepted.text);
    assert.deepEqual(accepted.json, { runId: `chat-1.turn-${n}`, status: "accepted" });
    assert.ok(Date.now() - started < srv.state.delayMs, "answered before the tool could finish");
    const done = await waitFor(async () => {
      const r = await call(b, "GET", "/sessions/chat-1");
      return r.status === 200 && r.json.turns.length === n && r.json.turns[0].status === "finished" && r;
    });
    assert.ok(done, `turn ${n} finished in its object, without its client and without a cron tick`);
  }
  assert.equal(srv.state.calls.length - before, 2, "one tool call per turn, each once");
  // Resuming a session with nothing unfinished: answered by the next turn's object, which runs nothing.
  const resumed = await call(b, "POST", "/sessions/chat-1/resume");
  assert.deepEqual([resumed.status, resumed.json.resumed], [200, false], resumed.text);
  assert.deepEqual((await call(a, "GET", "/runs")).json.runs, [], "nothing left unfinished");
});

// Watches `runId` through `replica` from its start to its end: the lookup of `q` is seen starting (a live-only
// event, told only by the object executing the run) before its result, and the stream ends with run.done.
async function watchSeesLiveStart(replica, runId, q) {
  const watched = await replica.dispatchFetch(`${BASE}/runs/${runId}/events`, {
    headers: { authorization: `Bearer ${TOKEN}`, accept: "text/event-stream" } });
  assert.equal(watched.status, 200);
  const events = [];
  const reader = sseReader(watched.body);
  let e;
  while ((e = await reader.next())) events.push(e);
  const startAt = events.findIndex((x) => x.type === "tool.start" && x.args?.q === q);
  const doneAt = events.findIndex((x) => x.type === "tool.done" && x.toolCallId === events[startAt]?.toolCallId);
  assert.ok(startAt >= 0 && startAt < doneAt, JSON.stringify(events.map((x) => x.type)));
  assert.equal(events.at(-1).type, "run.done");
}

test("strict mode: a send to a session whose turn was interrupted finishes that turn in its own object, then starts the new turn in the new turn's object (live tool.start to a watcher there)", { timeout: 60000 }, async () => {
  // Turn 1 ships (the demo's ship dies once per run); turn 2 looks up twice, slowly.
  const script = [
    { toolCalls: [{ name: "ship", args: { order: 7 } }] }, { text: "shipped" },
    { toolCalls: [{ name: "lookup", args: { q: "a" } }] }, { toolCalls: [{ name: "lookup", args: { q: "b" } }] }, { text: "looked up twice" },
  ];
  const [a, b] = replicas({ ...oneSlowCall, model: { provider: "mock", script } });
  const before = srv.state.calls.length;
  const first = await call(a, "POST", "/sessions/chat-9", { input: "ship order 7" });
  assert.equal(first.status, 502, first.text);
  assert.equal((await call(b, "GET", "/runs/chat-9.turn-1")).json.status, "in-progress");
  const accepted = await call(a, "POST", "/sessions/chat-9", { input: "now look up a and b" }, { prefer: "respond-async" });
  assert.equal(accepted.status, 202, accepted.text);
  assert.deepEqual(accepted.json, { runId: "chat-9.turn-2", status: "accepted" });
  const turn1 = await call(b, "GET", "/runs/chat-9.turn-1");
  assert.deepEqual([turn1.json.status, turn1.json.messages.at(-1).content], ["finished", "shipped"], "turn 1 finished before turn 2 started");
  // Only the object executing turn 2 has its live events: a watcher of turn 2 (served by turn 2's object) sees
  // the second lookup start before it ends.
  await watchSeesLiveStart(b, "chat-9.turn-2", "b");
  assert.equal((await call(b, "GET", "/runs/chat-9.turn-2")).json.messages.at(-1).content, "looked up twice");
  assert.equal((await call(a, "GET", "/demo/counts")).json.shipments, 1, "shipped once");
  assert.equal(srv.state.calls.length - before, 2, "each lookup once");
  assert.deepEqual((await call(a, "GET", "/runs")).json.runs, [], "nothing left unfinished");
});

test("strict mode: a schedule's due fire runs in the object of its run (live tool.start to a watcher there), once per fire time", { timeout: 60000 }, async () => {
  const script = [{ toolCalls: [{ name: "lookup", args: { q: "a" } }] }, { toolCalls: [{ name: "lookup", args: { q: "b" } }] }, { text: "looked up twice" }];
  const schedules = [{ id: "every-minute", cron: "* * * * *", input: "look up a and b" }];
  const [a, b] = replicas({ ...oneSlowCall, model: { provider: "mock", script }, schedules });
  const tick = async () => (await a.mf.getWorker("replica-0")).scheduled({ cron: "* * * * *" });
  // The first tick notes the schedule (a fire time before it existed is not due); then say it exists since long ago.
  assert.equal((await tick()).outcome, "ok");
  const kv = await a.mf.getKVNamespace("RUNS", "replica-0");
  const key = (await kv.list()).keys.map((k) => k.name).find((k) => k.endsWith("state/schedule/every-minute"));
  assert.ok(key, "the schedule's first-seen time is in the index");
  await kv.put(key, "0");
  const before = srv.state.calls.length;
  const ticked = tick();
  // The fire's run appears in the listing once its object started it; its watcher is served by that object.
  const listed = await waitFor(async () => (await call(b, "GET", "/runs")).json.runs?.find((r) => r.kind === "schedule"));
  assert.ok(listed, "the fire's run is listed while it runs");
  assert.match(listed.runId, /^every-minute\.\d+\.fire$/);
  await watchSeesLiveStart(b, listed.runId, "b");
  assert.equal((await ticked).outcome, "ok");
  const run = await call(b, "GET", `/runs/${listed.runId}`);
  assert.deepEqual([run.json.status, run.json.messages.at(-1).content], ["finished", "looked up twice"]);
  assert.equal(srv.state.calls.length - before, 2, "each lookup of the fire once");
  // Another tick finds the fire's run and runs nothing again (unless a new minute began: then its own fire, once).
  const again = await tick();
  assert.equal(again.outcome, "ok");
  const latest = (await call(b, "GET", "/schedules")).json.schedules[0];
  const fires = latest.lastRun?.runId === listed.runId ? 1 : 2;
  await waitFor(async () => srv.state.calls.length - before === 2 * fires);
  assert.equal(srv.state.calls.length - before, 2 * fires, "two lookups per fire, each once");
});

test("strict mode: two Worker instances send to one run at once: one runs it, the other gets STEADFAST_SESSION_BUSY, the tool runs once", { timeout: 60000 }, async () => {
  const [a, b] = replicas(oneSlowCall);
  for (let round = 0; round < 3; round++) {
    const id = `race-${round}`;
    const before = srv.state.calls.length;
    const [r1, r2] = await Promise.all([call(a, "POST", `/runs/${id}`, { input: "go" }), call(b, "POST", `/runs/${id}`, { input: "go" })]);
    assert.deepEqual([r1.status, r2.status].sort(), [200, 409], `${r1.text} / ${r2.text}`);
    const [ran, busy] = r1.status === 200 ? [r1, r2] : [r2, r1];
    assert.equal(busy.json.error.code, "STEADFAST_SESSION_BUSY", busy.text);
    assert.equal(ran.json.status, "finished", ran.text);
    const calls = srv.state.calls.slice(before);
    assert.equal(calls.length, 1, "the tool ran once");
    const view = await call(a, "GET", `/runs/${id}`);
    const callId = view.json.messages.find((m) => m.toolCalls)?.toolCalls[0].id;
    const h = await call(a, "GET", `/runs/${id}/history?limit=1`);
    assert.equal(calls[0].key, await callKey(h.json[0].checkpoint.keyScope, callId), "with the call's idempotency key");
    assert.equal(view.json.messages.filter((m) => m.role === "tool").length, 1, "one result");
  }
});

// Starts a POST on a fresh connection to the Worker's socket and returns a function that destroys that
// connection (the client going away: no response read, the socket closed).
async function postThenDisconnect(mf, path, body, headers = {}) {
  const url = new URL(path, await mf.ready);
  const req = http.request(url, { method: "POST", agent: false,
    headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json", ...headers } });
  let answered = false;
  req.on("response", () => (answered = true));
  req.on("error", () => {});
  req.end(JSON.stringify(body));
  return () => {
    req.destroy();
    return answered;
  };
}

test("strict mode: a client that disconnects mid-tool does not stop the run: it finishes in its object, no cron tick, the tool ran once", { timeout: 60000 }, async () => {
  const [a, b] = replicas(oneSlowCall);
  for (const [i, headers] of [[0, {}], [1, { accept: "text/event-stream" }]]) {
    const id = `gone-${i}`;
    const before = srv.state.calls.length;
    const disconnect = await postThenDisconnect(a.mf, `/runs/${id}`, { input: "go" }, headers);
    // The tool has started (its request reached the server, which answers 1.5 s later): the client goes.
    assert.ok(await waitFor(() => srv.state.calls.length > before), "the tool started");
    // A JSON answer comes when the run ends; an SSE answer is live: it started with the run's first event, and
    // the client leaves mid-stream.
    assert.equal(disconnect(), i === 1, i === 1 ? "the SSE answer came before the tool ended" : "the client left before any answer");
    const view = await waitFor(async () => {
      const r = await call(b, "GET", `/runs/${id}`);
      return r.json.status === "finished" && r;
    });
    assert.ok(view, "the run finished without its client and without a cron tick");
    assert.equal(view.json.messages.filter((m) => m.role === "tool").length, 1, "one result");
    assert.equal(srv.state.calls.length - before, 1, "the tool ran once");
    assert.deepEqual((await call(b, "GET", "/runs")).json.runs, [], "and the run left the listing");
  }
  // Locally workerd lets a disconnected request's work go on (a Worker's too); what it does cut is work a
  // Worker left running after its response (no waitUntil). A 202 is such a response: the run, a task of its
  // object, still runs its slow tool after it and finishes.
  const before = srv.state.calls.length;
  const started = Date.now();
  const accepted = await call(a, "POST", "/runs/gone-2", { input: "go" }, { prefer: "respond-async" });
  assert.equal(accepted.status, 202, accepted.text);
  assert.ok(Date.now() - started < srv.state.delayMs, "answered before the tool could finish");
  const view = await waitFor(async () => {
    const r = await call(b, "GET", "/runs/gone-2");
    return r.json.status === "finished" && r;
  });
  assert.ok(view, "the run finished after its 202, without a cron tick");
  assert.equal(srv.state.calls.length - before, 1, "the tool ran once");
});

test("strict mode: a run whose execution failed is finished by its object's alarm (the sweep's backoff), no cron tick, each effect once", { timeout: 60000 }, async () => {
  // Short leases so the alarm (set when an execution starts, for when its lease could be taken over) comes soon.
  const [a] = replicas({ lease: { ttlMs: 2500, renewEveryMs: 800, graceMs: 100 }, settleMs: 100, recovery: { intervalMs: 1 } }, 1);
  const started = Date.now();
  // The demo's ship tool dies once per run (a propagating error): the attempt fails, the run stays resumable.
  const first = await call(a, "POST", "/runs/alarm-1", { input: "charge and ship order 7" });
  assert.equal(first.status, 502, first.text);
  const failed = await call(a, "GET", "/runs/alarm-1");
  assert.deepEqual([failed.json.status, failed.json.attempts], ["in-progress", 1], failed.text);
  const view = await waitFor(async () => {
    const r = await call(a, "GET", "/runs/alarm-1");
    return r.json.status === "finished" && r;
  }, 20000);
  assert.ok(view, "the alarm finished the run");
  assert.ok(Date.now() - started >= 2500, "not before the failed execution's lease could be taken over");
  const counts = await call(a, "GET", "/demo/counts");
  assert.equal(counts.json.charges, 1, counts.text);
  assert.equal(counts.json.shipments, 1, counts.text);
  // The alarm fires again only while there is something to do: the finished run sets none.
  await sleep(3000);
  assert.equal((await call(a, "GET", "/demo/counts")).json.shipments, 1);
});

test("strict mode: an approval resolved days later (a new workerd over the persisted state) resumes its run inside the run's object: 202, the client gone, no cron tick, the tool once", { timeout: 90000 }, async () => {
  // Simulated "days later": the first Miniflare (its workerd) pauses the runs on their approvals and is disposed;
  // a new one starts over the same persisted KV and object storage, with nothing run in between (no cron tick,
  // no alarm: a paused run sets none). The clock is not moved: the runs wait on a person, not on time.
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "steadfast-strict-approval-"));
  after(() => fs.rmSync(dir, { recursive: true, force: true }));
  const gated = { ...oneSlowCall, tools: [{ ...slowTool, needsApproval: true }] };
  const [first] = replicas(gated, 1, dir);
  const ids = {};
  for (const run of ["later-1", "later-2", "later-3"]) {
    const paused = await call(first, "POST", `/runs/${run}`, { input: "go" });
    assert.equal(paused.json.status, "awaiting-approval", paused.text);
    ids[run] = paused.json.approvalId;
  }
  await first.mf.dispose();
  instances.splice(instances.indexOf(first.mf), 1);
  const before = srv.state.calls.length;

  const [a, b] = replicas(gated, 2, dir);
  // Unknown approval: the index does not know it; served by the Worker: 404 as in KV mode. Nothing runs.
  const unknown = await call(a, "POST", "/approvals/apr_nope", { approved: true }, { prefer: "respond-async" });
  assert.deepEqual([unknown.status, unknown.json.error?.code], [404, "STEADFAST_APPROVAL_NOT_FOUND"], unknown.text);
  // Orphaned: its run deleted; resolved in the run's object: 410, the approval withdrawn. Nothing runs.
  assert.equal((await call(b, "DELETE", "/runs/later-3")).status, 200);
  const orphan = await call(a, "POST", `/approvals/${ids["later-3"]}`, { approved: true }, { prefer: "respond-async" });
  assert.deepEqual([orphan.status, orphan.json.error?.code], [410, "STEADFAST_APPROVAL_ORPHANED"], orphan.text);
  assert.equal(srv.state.calls.length, before, "no tool ran for a refused approval");

  // 1) Prefer: respond-async: answered 202 naming the run as soon as it resumed, before its slow tool could end.
  // The Worker alone has no spawner and would ignore the preference (answering 200 when the run ends): a 202
  // means the run object executes the resolution as its own task. The client is gone after that answer.
  const started = Date.now();
  const accepted = await call(a, "POST", `/approvals/${ids["later-1"]}`, { approved: true }, { prefer: "respond-async" });
  assert.equal(accepted.status, 202, accepted.text);
  assert.deepEqual(accepted.json, { runId: "later-1", status: "accepted" });
  assert.equal(accepted.headers.get("location"), "/runs/later-1");
  assert.ok(Date.now() - started < srv.state.delayMs, "answered before the tool could finish");
  // 2) The client aborts mid-tool (its connection closed before any answer).
  const mid = srv.state.calls.length;
  const disconnect = await postThenDisconnect(b.mf, `/approvals/${ids["later-2"]}`, { approved: true });
  assert.ok(await waitFor(() => srv.state.calls.length > mid), "the approved tool started");
  assert.equal(disconnect(), false, "the client left before any answer");

  for (const run of ["later-1", "later-2"]) {
    const view = await waitFor(async () => {
      const r = await call(b, "GET", `/runs/${run}`);
      return r.json.status === "finished" && r;
    });
    assert.ok(view, `${run} finished without its client and without a cron tick`);
    const results = view.json.messages.filter((m) => m.role === "tool");
    assert.equal(results.length, 1, "one result");
    // An approved call's idempotency key is its approval's id.
    const keyed = srv.state.calls.slice(before).filter((c) => c.key === ids[run]);
    assert.equal(keyed.length, 1, `${run}: the tool ran once: ${JSON.stringify(srv.state.calls.slice(before))}`);
  }
  assert.equal(srv.state.calls.length - before, 2, "two tools, one per run");
  assert.deepEqual((await call(a, "GET", "/approvals")).json, [], "both approvals consumed");
  // A decided approval answered again: not found (withdrawn once its run moved on).
  const again = await call(a, "POST", `/approvals/${ids["later-1"]}`, { approved: true });
  assert.deepEqual([again.status, again.json.error?.code], [404, "STEADFAST_APPROVAL_NOT_FOUND"], again.text);
});

test("strict mode: a delivery executes in its run's object: 202 with Prefer: respond-async before its slow tool ends, finished with no cron tick, a redelivery acknowledged, the tool once", { timeout: 60000 }, async () => {
  const [a, b] = replicas(oneSlowCall);
  const before = srv.state.calls.length;
  const started = Date.now();
  // The Worker alone has no spawner and would answer 200 when the run ends: a 202 means the object runs it.
  const accepted = await call(a, "POST", "/deliveries/evt-1", { input: "go" }, { prefer: "respond-async" });
  assert.equal(accepted.status, 202, accepted.text);
  assert.deepEqual(accepted.json, { runId: "dlv-evt-1", status: "accepted" });
  assert.ok(Date.now() - started < srv.state.delayMs, "answered before the tool could finish");
  const view = await waitFor(async () => {
    const r = await call(b, "GET", "/runs/dlv-evt-1");
    return r.json.status === "finished" && r;
  });
  assert.ok(view, "the delivery's run finished without a cron tick");
  const again = await call(b, "POST", "/deliveries/evt-1", { input: "go" }, { prefer: "respond-async" });
  assert.deepEqual([again.status, again.json.outcome, again.json.runId], [200, "acknowledged", "dlv-evt-1"], again.text);
  assert.equal(srv.state.calls.length - before, 1, "the tool ran once");
});

test("strict mode: a request whose run object fails before answering (reset, overloaded) is a coded, retryable 503 with Retry-After, not a plain-text 500", { timeout: 60000 }, async () => {
  assert.ok(fs.existsSync("build/index.js"), "build/index.js is missing: run ./scripts/build-worker");
  // The run objects are hosted by a Worker whose objects throw as an overloaded (or reset) object does.
  const broken = `export class RunObject {
    async fetch() { throw new Error("Durable Object is overloaded. Requests queued for too long. (test)"); }
  }
  export default { fetch: () => new Response("objects only") };`;
  const objects = { RUN_OBJECTS: { className: "RunObject", useSQLite: true, scriptName: "objects" } };
  const mf = new Miniflare({
    workers: [
      { ...script, name: "worker", kvNamespaces: ["RUNS"], durableObjects: objects,
        bindings: { STEADFAST_TOKEN: TOKEN, STEADFAST_CONFIG: JSON.stringify({ store: "durable-object" }) } },
      { name: "objects", modules: true, script: broken, compatibilityDate: script.compatibilityDate, durableObjects: objects },
    ],
    cf: false,
  });
  instances.push(mf);
  const worker = { dispatchFetch: async (url, init) => (await mf.getWorker("worker")).fetch(url, init) };
  for (const [method, p, body] of [["POST", "/runs/r-1", { input: "hi" }], ["GET", "/runs/r-1", undefined], ["POST", "/runs/r-1/resume", undefined]]) {
    const r = await call(worker, method, p, body);
    assert.equal(r.status, 503, `${method} ${p}: ${r.text}`);
    assert.equal(r.headers.get("content-type"), "application/json", `${method} ${p}`);
    assert.equal(r.headers.get("retry-after"), "1", `${method} ${p}`);
    assert.equal(r.json.error?.code, "STEADFAST_STORE_UNAVAILABLE", r.text);
    assert.equal(r.json.error.retryable, true, r.text);
    assert.equal(r.json.error.runId, "r-1", r.text);
    assert.match(r.json.error.message, /overloaded/, r.text);
  }
});

test("strict mode: a sub-agent's child run executes in its own object: a watcher there hears its live tool.start, and the lead's caller and the lead's watcher get the child's events tagged as they happen", { timeout: 60000 }, async () => {
  const child = { toolCalls: (q) => ({ toolCalls: [{ name: "lookup", args: { q } }] }) };
  const [a, b] = replicas({
    allowedHosts: ["127.0.0.1"],
    model: { provider: "mock", script: [{ toolCalls: [{ name: "research", args: { task: "look up a and b" } }] }, { text: "the team is done" }] },
    demoTools: false,
    subagents: [{ name: "research", description: "Looks things up", tools: [slowTool],
      model: { provider: "mock", script: [child.toolCalls("a"), child.toolCalls("b"), { text: "looked up twice" }] } }],
  });
  const before = srv.state.calls.length;
  const started = await a.dispatchFetch(`${BASE}/runs/team-1`, { method: "POST",
    headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json", accept: "text/event-stream" },
    body: JSON.stringify({ input: "research a and b" }) });
  assert.equal(started.status, 200);
  const lead = sseReader(started.body);
  const seen = [];
  let e;
  while ((e = await lead.next()) && !e.subagent) seen.push(e);
  assert.ok(e, "the child's first event reached the lead's caller");
  const childId = e.runId;
  assert.match(childId, /^team-1\.sub-research-/);
  seen.push(e);
  // The lead's watcher, in the lead's object, while the child runs in its own.
  const leadWatch = (async () => {
    const watched = await b.dispatchFetch(`${BASE}/runs/team-1/events`, {
      headers: { authorization: `Bearer ${TOKEN}`, accept: "text/event-stream" } });
    const out = [];
    const r = sseReader(watched.body);
    let x;
    while ((x = await r.next())) out.push(x);
    return out;
  })();
  // Only the object executing the child has its live events: a watcher of the child sees lookup b start.
  await watchSeesLiveStart(b, childId, "b");
  while ((e = await lead.next())) seen.push(e);
  const tag = { name: "research", depth: 1, parent: "team-1" };
  const fromChild = seen.filter((x) => x.runId === childId);
  const starts = fromChild.filter((x) => x.type === "tool.start").map((x) => x.args.q);
  assert.deepEqual(starts, ["a", "b"], JSON.stringify(seen.map((x) => [x.runId, x.type])));
  assert.ok(fromChild.every((x) => x.subagent?.name === tag.name && x.subagent.depth === 1 && x.subagent.parent === tag.parent && x.subagent.toolCallId), JSON.stringify(fromChild));
  const result = seen.findIndex((x) => x.runId === "team-1" && x.type === "tool.done" && x.name === "research");
  assert.ok(result > seen.findLastIndex((x) => x.runId === childId), "the child's events come before its call's result");
  const watchedChild = (await leadWatch).filter((x) => x.runId === childId);
  assert.ok(watchedChild.some((x) => x.type === "tool.start" && x.args?.q === "b" && x.subagent?.parent === "team-1"), JSON.stringify(watchedChild));
  const done = await call(b, "GET", "/runs/team-1");
  assert.deepEqual([done.json.status, done.json.messages.find((m) => m.role === "tool")?.content], ["finished", "looked up twice"], done.text);
  assert.equal(srv.state.calls.length - before, 2, "each lookup once");
});
