// End-to-end tests of the built Worker (build/index.js) under workerd, through programmatic Miniflare:
// real local KV, the cron handler, two instances over one persisted KV directory, providers and webhook tools
// against a local HTTP server on 127.0.0.1.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import fs from "node:fs";
import { Miniflare } from "miniflare";
import { apiCaller, callKey } from "./support/api.mjs";
import { builtWorker } from "./support/built.mjs";
import { parseSse } from "./support/sse.mjs";

/** A usage without its storage part (the run's store operations, checked where they are the point). */
function tokensOf({ storage, ...tokens }) {
  return tokens;
}

const TOKEN = "test-token-0123456789";
const BASE = "http://localhost";
const instances = [];

// `build`: "build" (the release Worker) or "build-conformance" (the test-only Worker with the feature
// `conformance`, built by `./scripts/build-worker --conformance`).
function worker({ config, token = TOKEN, kvPersist, bindings = {}, build = "build" } = {}) {
  const b = { ...bindings };
  if (token) b.STEADFAST_TOKEN = token;
  if (config) b.STEADFAST_CONFIG = JSON.stringify(config);
  assert.ok(fs.existsSync(`${build}/index.js`), `${build}/index.js is missing: run ./scripts/build-worker${build === "build" ? "" : " --conformance"}`);
  const mf = new Miniflare({
    ...builtWorker(build),
    kvNamespaces: ["RUNS"],
    kvPersist,
    // Strict mode's run objects (SQLite-backed RunObject, as wrangler.toml declares them).
    durableObjects: { RUN_OBJECTS: { className: "RunObject", useSQLite: true } },
    bindings: b,
    unsafeTriggerHandlers: true,
    cf: false,
  });
  instances.push(mf);
  return mf;
}

after(async () => {
  for (const mf of instances) await mf.dispose();
});

// Two Workers (separate isolates: two "replicas") in one workerd, over one KV namespace.
function replicas(configs) {
  const shared = { ...builtWorker(), kvNamespaces: { RUNS: "runs-shared" } };
  const mf = new Miniflare({
    workers: configs.map((config, i) => ({
      ...shared,
      name: `replica-${i}`,
      bindings: { STEADFAST_TOKEN: TOKEN, STEADFAST_CONFIG: JSON.stringify(config) },
    })),
    unsafeTriggerHandlers: true,
    cf: false,
  });
  instances.push(mf);
  return configs.map((_, i) => ({
    dispatchFetch: async (url, init) => (await mf.getWorker(`replica-${i}`)).fetch(url, init),
  }));
}

const call = apiCaller(TOKEN, BASE);
const auth = () => ({ authorization: `Bearer ${TOKEN}` });

async function kvListing(mf) {
  const kv = await mf.getKVNamespace("RUNS");
  const out = [];
  let cursor;
  do {
    const page = await kv.list({ cursor });
    for (const k of page.keys) out.push([k.name, await kv.get(k.name)]);
    cursor = page.list_complete ? undefined : page.cursor;
  } while (cursor);
  return out;
}

async function cron(mf) {
  const w = await mf.getWorker();
  return w.scheduled({ cron: "* * * * *", scheduledTime: new Date() });
}

const fastRecovery = { intervalMs: 1 };

// ---------- a local HTTP server speaking OpenAI, Anthropic and webhook-tool wire formats ----------
function startServer() {
  const state = { openai: [], anthropic: [], requests: [], tool: [], toolMode: "ok", streams: {} };
  // Answers headers at once, then a body that never ends: `trickle` one byte every 50 ms, `flood` 64 KiB
  // chunks as fast as the reader takes them. Records bytes sent and when the client closed the connection.
  const endless = (name, res, chunk, everyMs) => {
    const s = (state.streams[name] = { bytes: 0, closedAt: null, startedAt: Date.now() });
    res.writeHead(200, { "content-type": "text/plain" });
    let timer = null;
    const pump = () => {
      if (s.closedAt) return;
      s.bytes += chunk.length;
      const more = res.write(chunk);
      if (everyMs) timer = setTimeout(pump, everyMs);
      else if (more) setImmediate(pump);
      else res.once("drain", pump);
    };
    res.on("close", () => {
      s.closedAt = Date.now();
      clearTimeout(timer);
    });
    pump();
  };
  const server = http.createServer((req, res) => {
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", () => {
      const entry = { path: req.url, headers: req.headers, body: body ? JSON.parse(body) : null };
      state.requests.push(entry);
      const reply = (status, obj, headers = {}) => {
        res.writeHead(status, { "content-type": "application/json", ...headers });
        res.end(JSON.stringify(obj));
      };
      if (req.url === "/v1/chat/completions" || req.url === "/v1/messages") {
        const queue = req.url === "/v1/messages" ? state.anthropic : state.openai;
        const next = queue.shift() ?? { status: 500, body: { error: "script ran out" } };
        if (typeof next.sse === "string") {
          res.writeHead(200, { "content-type": "text/event-stream" });
          return res.end(next.sse);
        }
        return reply(next.status ?? 200, next.body, next.headers ?? {});
      }
      if (req.url.startsWith("/tools/")) {
        state.tool.push(entry);
        if (req.url === "/tools/trickle") return endless("trickle", res, "x", 50);
        if (req.url === "/tools/flood") return endless("flood", res, "y".repeat(65536), 0);
        if (req.url.startsWith("/tools/secret/")) {
          res.writeHead(404, { "content-type": "text/plain" });
          return res.end(`Cannot POST ${req.url}`);
        }
        if (req.url === "/tools/slow") return setTimeout(() => reply(200, { ok: true }), 700);
        if (state.toolMode === "fail") return reply(503, { error: "tool backend down" });
        return reply(200, { found: entry.body });
      }
      reply(404, { error: "no such route" });
    });
  });
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve({ server, state, port: server.address().port })));
}

const srv = await startServer();
after(() => srv.server.close());
const lookupTool = (url = `http://127.0.0.1:${srv.port}/tools/lookup`) => ({
  name: "lookup",
  description: "Looks something up",
  inputSchema: { type: "object", properties: { q: { type: "string" } } },
  url,
});

// ---------- tests ----------
test("health, auth and fail-closed without a token", async () => {
  const mf = worker();
  const h = await mf.dispatchFetch(BASE + "/health");
  assert.equal(h.status, 200);
  assert.equal((await h.json()).ok, true);
  assert.equal((await call(mf, "GET", "/runs", undefined, { authorization: "Bearer wrong" })).status, 401);
  assert.equal((await call(mf, "GET", "/runs")).status, 200);
  for (const scheme of ["bearer", "BEARER", "bEaReR"]) {
    assert.equal((await call(mf, "GET", "/runs", undefined, { authorization: `${scheme} ${TOKEN}` })).status, 200, scheme);
  }
  assert.equal((await call(mf, "GET", "/runs", undefined, { authorization: `Bearer ${TOKEN.toUpperCase()}` })).status, 401);
  const open = worker({ token: null });
  const r = await call(open, "GET", "/runs");
  assert.equal(r.status, 503);
  assert.equal(r.json.error.code, "STEADFAST_AUTH_NOT_CONFIGURED");
  assert.match(r.json.error.message, /wrangler secret put STEADFAST_TOKEN/);
});

test("bad requests get coded 4xx and leave KV unchanged", async () => {
  const mf = worker({ config: { recovery: fastRecovery } });
  const seed = await call(mf, "POST", "/runs/keep", { input: "please refund order 7" });
  assert.equal(seed.status, 200, seed.text);
  const cases = [
    ["POST", "/runs/a", "{not json", 400, "STEADFAST_INVALID_INPUT"],
    ["POST", "/runs/a", { input: 5 }, 400, "STEADFAST_INVALID_INPUT"],
    ["POST", "/runs/a", { input: "x".repeat(1024 * 1024 + 10) }, 413, "STEADFAST_PAYLOAD_TOO_LARGE"],
    ["POST", "/runs/.bad", { input: "x" }, 400, "STEADFAST_SESSION_ID_INVALID"],
    ["POST", "/approvals/apr_unknown", { approved: true }, 404, "STEADFAST_APPROVAL_NOT_FOUND"],
    ["POST", "/runs/keep", { input: "more" }, 409, "STEADFAST_SESSION_AWAITING_APPROVAL"],
    ["GET", "/nope", undefined, 404, "STEADFAST_ROUTE_NOT_FOUND"],
    ["POST", "/runs//resume", { input: "x" }, 400, "STEADFAST_SESSION_ID_INVALID"],
    ["GET", "/runs/", undefined, 400, "STEADFAST_SESSION_ID_INVALID"],
    ["POST", "/runs/", { input: "x" }, 400, "STEADFAST_SESSION_ID_INVALID"],
    ["GET", "/runs//history", undefined, 400, "STEADFAST_SESSION_ID_INVALID"],
    ["POST", "/runs//fork", { fromStep: 1 }, 400, "STEADFAST_SESSION_ID_INVALID"],
    ["POST", "/approvals/", { approved: true }, 400, "STEADFAST_SESSION_ID_INVALID"],
    ["GET", "/compare//keep", undefined, 400, "STEADFAST_SESSION_ID_INVALID"],
    ["GET", "/compare/keep/", undefined, 400, "STEADFAST_SESSION_ID_INVALID"],
    ["POST", "/deliveries/", { input: "x" }, 400, "STEADFAST_SESSION_ID_INVALID"],
  ];
  for (const [method, p, body, status, code] of cases) {
    const before = await kvListing(mf);
    const r = await call(mf, method, p, body);
    assert.equal(r.status, status, `${method} ${p}: ${r.text.slice(0, 200)}`);
    assert.equal(r.json.error.code, code);
    assert.deepEqual(await kvListing(mf), before, `${method} ${p} changed KV`);
  }
  assert.equal((await call(mf, "GET", "/runs/resume")).status, 404, "POST /runs//resume started no run named resume");
});

test("the Worker answers in the shapes both shells share: the run view, deliveries naming their run, JSON-object bodies only", async () => {
  const mf = worker({ config: { recovery: fastRecovery } });
  const keys = (o) => Object.keys(o).sort();
  const refund = { input: "please refund order 7" };
  // A delivery: every outcome carries runId (the npm package's runOnce resolves the same shape).
  const ran = await call(mf, "POST", "/deliveries/evt-1", refund);
  assert.equal(ran.status, 200, ran.text);
  assert.deepEqual([ran.json.outcome, ran.json.runId, keys(ran.json)], ["ran", "dlv-evt-1", ["outcome", "result", "runId"]]);
  assert.equal(ran.json.result.status, "awaiting-approval");
  const waiting = await call(mf, "POST", "/deliveries/evt-1", refund);
  assert.deepEqual([waiting.json.outcome, waiting.json.runId, keys(waiting.json)], ["awaiting-approval", "dlv-evt-1", ["approvalId", "outcome", "runId"]]);
  // The run view: exactly these fields, absent values as null.
  const view = await call(mf, "GET", "/runs/dlv-evt-1");
  assert.equal(view.status, 200, view.text);
  assert.deepEqual(keys(view.json), [
    "approvalIds", "attempts", "businessState", "children", "delegatedInFlight", "fingerprint", "finishReason", "healActions",
    "lastError", "messages", "parentRunId", "quarantined", "runId", "savedAt", "status", "step", "usage",
  ]);
  assert.deepEqual([view.json.status, view.json.approvalIds, view.json.lastError, view.json.businessState], ["awaiting-approval", [waiting.json.approvalId], null, null]);
  assert.equal(view.json.delegatedInFlight, null, "no sub-agent children");
  // A body that is a JSON array is refused, not read as the struct's fields by position.
  const before = await kvListing(mf);
  for (const [p, body] of [["/runs/a", '["Charge order 7"]'], [`/approvals/${waiting.json.approvalId}`, "[true]"], ["/deliveries/evt-3", '["x"]']]) {
    const r = await call(mf, "POST", p, body);
    assert.deepEqual([r.status, r.json.error?.code], [400, "STEADFAST_INVALID_INPUT"], `${p} ${body}: ${r.text}`);
  }
  assert.deepEqual(await kvListing(mf), before, "refused bodies changed KV");
  const approved = await call(mf, "POST", `/approvals/${waiting.json.approvalId}`, { approved: true });
  assert.equal(approved.json.status, "finished", approved.text);
  const acked = await call(mf, "POST", "/deliveries/evt-1", refund);
  assert.deepEqual([acked.json.outcome, acked.json.runId, acked.json.result.text], ["acknowledged", "dlv-evt-1", "Refund issued."]);
});

// POSTs straight to the Worker's socket on a fresh connection (no shared pool: an upload the Worker resets
// cannot disturb later requests), with either a fixed `body` (sent with its Content-Length) or an endless
// chunked body written until the answer comes. With `expectContinue` the body waits for the server's
// "100 Continue" (workerd never sends one, so only an answer given without reading the body arrives).
// Resolves with the answer and the bytes written. A Worker that answers before reading a large upload may
// have the connection reset under it before the answer is parsed: that is retried (up to 5 times); the
// answer, when it comes, is what a test checks.
async function rawPost(mf, path, headers, body, { expectContinue = false } = {}) {
  const url = new URL(path, await mf.ready);
  const once = () => new Promise((resolve, reject) => {
    const h = { ...headers };
    if (body !== undefined) h["content-length"] = Buffer.byteLength(body);
    if (expectContinue) h.expect = "100-continue";
    const req = http.request(url, { method: "POST", headers: h, agent: false });
    let sent = 0;
    let answered = false;
    req.on("response", (res) => {
      answered = true;
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (c) => (text += c));
      res.on("end", () => {
        req.destroy();
        resolve({ status: res.statusCode, text, sent });
      });
    });
    req.on("error", (e) => answered || reject(e));
    if (expectContinue) {
      req.flushHeaders();
      req.on("continue", () => reject(new Error("workerd asked for the body (100 Continue)")));
      return;
    }
    if (body !== undefined) {
      sent = Buffer.byteLength(body);
      req.end(body);
      return;
    }
    const chunk = Buffer.alloc(65536, "z");
    const pump = () => {
      while (!answered && !req.destroyed) {
        sent += chunk.length;
        if (!req.write(chunk)) return req.once("drain", pump);
      }
    };
    pump();
  });
  let last;
  for (let i = 0; i < 5; i++) {
    try {
      return await once();
    } catch (e) {
      last = e;
    }
  }
  throw last;
}

test("an unauthenticated request never reaches the body or the configuration: 401 despite a broken STEADFAST_CONFIG and a bad body", { timeout: 60000 }, async () => {
  const broken = worker({ bindings: { STEADFAST_CONFIG: "{ this is not json" } });
  const requests = [["POST", "/runs/a", "{not json"], ["POST", "/runs/a", "\u0000\uffff"], ["POST", "/runs//resume", "{"],
    ["PUT", "/runs/a", "{"], ["GET", "/runs", undefined], ["POST", "/__conformance", undefined]];
  for (const authorization of [undefined, "Bearer wrong", `Basic ${TOKEN}`, TOKEN, `Bearer${TOKEN}`]) {
    const headers = authorization ? { authorization } : {};
    for (const [method, p, body] of requests) {
      const res = await broken.dispatchFetch(BASE + p, { method, body, headers });
      const text = await res.text();
      assert.equal(res.status, 401, `${authorization} ${method} ${p}: ${text.slice(0, 200)}`);
      assert.equal(JSON.parse(text).error.code, "STEADFAST_UNAUTHORIZED");
    }
    // A body announced with "Expect: 100-continue" and never sent: the answer comes without a byte of it
    // (reading the body before checking the token would wait for it for ever).
    const r = await rawPost(broken, "/runs/a", headers, undefined, { expectContinue: true });
    assert.equal(r.status, 401, r.text);
    assert.equal(r.sent, 0);
  }
  // With the token the request gets as far as the configuration, which really is broken.
  const r = await call(broken, "POST", "/runs/a", { input: "x" });
  assert.equal(r.json.error.code, "STEADFAST_CONFIG_INVALID", r.text);
  // No token configured: refused as such, still before the configuration.
  const open = worker({ token: null, bindings: { STEADFAST_CONFIG: "{ this is not json" } });
  const o = await call(open, "POST", "/runs/a", "{not json");
  assert.equal(o.status, 503);
  assert.equal(o.json.error.code, "STEADFAST_AUTH_NOT_CONFIGURED");
  // Health needs neither.
  assert.equal((await open.dispatchFetch(BASE + "/health")).status, 200);
});

test("a request body over 1 MiB is refused while it is read: declared or streamed without a length", { timeout: 60000 }, async () => {
  const mf = worker();
  const auth = { authorization: `Bearer ${TOKEN}` };
  const declared = await rawPost(mf, "/runs/big", auth, "x".repeat(1024 * 1024 + 1));
  assert.equal(declared.status, 413, declared.text);
  // An endless chunked body: the Worker answers 413 after reading just past the cap (reading it all first
  // would never answer); the client gets to send a bounded amount (the cap plus transport buffers).
  const r = await rawPost(mf, "/runs/big", auth);
  assert.equal(r.status, 413, r.text);
  assert.equal(JSON.parse(r.text).error.code, "STEADFAST_PAYLOAD_TOO_LARGE");
  assert.ok(r.sent < 64 * 1024 * 1024, `the client got to send ${r.sent} bytes`);
  assert.deepEqual(await kvListing(mf), []);
});

test("a run interrupted like a dying process is finished by the cron sweep, the charge counted once", async () => {
  const mf = worker({ config: { recovery: fastRecovery } });
  const first = await call(mf, "POST", "/runs/order-7", { input: "Charge and ship order 7" });
  assert.equal(first.status, 502, first.text);
  assert.equal(first.json.error.code, "STEADFAST_TOOL_PROPAGATED");
  const pending = await call(mf, "GET", "/runs?status=in-progress");
  assert.equal(pending.json.runs[0].runId, "order-7");
  assert.equal(pending.json.runs[0].lastError.code, "STEADFAST_TOOL_PROPAGATED");
  await new Promise((r) => setTimeout(r, 20));
  await cron(mf);
  const run = await call(mf, "GET", "/runs/order-7");
  assert.equal(run.json.status, "finished", run.text);
  const counts = await call(mf, "GET", "/demo/counts");
  assert.equal(counts.json.charges, 1, counts.text);
  assert.equal(counts.json.shipments, 1, counts.text);
});

test("two replicas over one KV namespace: approval resolved by the other; concurrent sends, one runs", async () => {
  const config = { recovery: fastRecovery, tools: [lookupTool(`http://127.0.0.1:${srv.port}/tools/slow`)], allowedHosts: ["127.0.0.1"],
    model: { provider: "mock", script: [{ toolCalls: [{ name: "lookup", args: { q: "x" } }] }, { text: "looked up" }] } };
  const [a, b, c, d] = replicas([{ recovery: fastRecovery }, { recovery: fastRecovery }, config, config]);
  const paused = await call(a, "POST", "/runs/refund-7", { input: "refund order 7" });
  assert.equal(paused.json.status, "awaiting-approval", paused.text);
  const list = await call(b, "GET", "/approvals");
  assert.equal(list.json.length, 1);
  const done = await call(b, "POST", `/approvals/${list.json[0].id}`, { approved: true, note: "ok" });
  assert.equal(done.json.status, "finished", done.text);

  const before = srv.state.tool.length;
  const [r1, r2] = await Promise.all([call(c, "POST", "/runs/race", { input: "go" }), call(d, "POST", "/runs/race", { input: "go" })]);
  assert.deepEqual([r1.status, r2.status].sort(), [200, 409], `${r1.text} / ${r2.text}`);
  assert.equal((r1.status === 409 ? r1 : r2).json.error.code, "STEADFAST_SESSION_BUSY");
  assert.equal(srv.state.tool.length - before, 1, "the tool ran once");
});

test("OpenAI provider: tool-call round trip, usage, 429 with Retry-After then success, 500 twice then success", async () => {
  const openai = (msg, usage = [10, 5]) => ({ body: { choices: [{ message: msg, finish_reason: msg.tool_calls ? "tool_calls" : "stop" }], usage: { prompt_tokens: usage[0], completion_tokens: usage[1] } } });
  srv.state.openai.push(
    { status: 429, headers: { "retry-after": "1" }, body: { error: "slow down" } },
    openai({ content: null, tool_calls: [{ id: "call_a", type: "function", function: { name: "lookup", arguments: "{\"q\":\"oslo\"}" } }] }, [12, 3]),
    { status: 500, body: { error: "boom" } },
    { status: 500, body: { error: "boom" } },
    openai({ content: "Oslo is sunny." }, [20, 4]),
  );
  const mf = worker({
    config: { model: { provider: "openai", model: "gpt-test", baseUrl: `http://127.0.0.1:${srv.port}/v1` }, tools: [lookupTool()], allowedHosts: ["127.0.0.1"] },
    bindings: { OPENAI_API_KEY: "sk-test" },
  });
  const t0 = Date.now();
  const r = await call(mf, "POST", "/runs/oa-1", { input: "Weather in Oslo?" });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.text, "Oslo is sunny.");
  assert.deepEqual(tokensOf(r.json.usage), { inputTokens: 32, outputTokens: 7 });
  assert.ok(r.json.usage.storage.writes > 0 && r.json.usage.storage.costUsd > 0, r.text);
  assert.ok(Date.now() - t0 >= 1000, "Retry-After was honoured");
  const chat = srv.state.requests.filter((q) => q.path === "/v1/chat/completions");
  assert.equal(chat.length, 5, "one request per attempt: 429, ok, 500, 500, ok");
  assert.equal(chat[0].headers.authorization, "Bearer sk-test");
  const last = chat[4].body.messages;
  assert.deepEqual(last.at(-2).tool_calls[0].function.name, "lookup");
  assert.equal(last.at(-1).role, "tool");
  assert.equal(last.at(-1).tool_call_id, "call_a");
});

test("OpenAI 401 is a terminal provider error, and Anthropic speaks its own format", async () => {
  srv.state.openai.push({ status: 401, body: { error: "bad key" } });
  const bad = worker({ config: { model: { provider: "openai", model: "gpt-test", baseUrl: `http://127.0.0.1:${srv.port}/v1` } }, bindings: { OPENAI_API_KEY: "sk-bad" } });
  const r = await call(bad, "POST", "/runs/oa-2", { input: "hi" });
  assert.equal(r.status, 502);
  assert.equal(r.json.error.code, "STEADFAST_PROVIDER_AUTH");
  assert.equal(r.json.error.retryable, false);
  assert.ok(!r.text.includes("sk-bad"), "the key never appears in an error");

  srv.state.anthropic.push(
    { body: { content: [{ type: "text", text: "Let me look." }, { type: "tool_use", id: "tu_1", name: "lookup", input: { q: "bergen" } }], usage: { input_tokens: 8, output_tokens: 6 }, stop_reason: "tool_use" } },
    { body: { content: [{ type: "text", text: "Bergen is rainy." }], usage: { input_tokens: 9, output_tokens: 2 }, stop_reason: "end_turn" } },
  );
  const an = worker({
    config: { model: { provider: "anthropic", model: "claude-test", baseUrl: `http://127.0.0.1:${srv.port}` }, tools: [lookupTool()], allowedHosts: ["127.0.0.1"] },
    bindings: { ANTHROPIC_API_KEY: "ak-test" },
  });
  const a = await call(an, "POST", "/runs/an-1", { input: "Weather in Bergen?" });
  assert.equal(a.status, 200, a.text);
  assert.equal(a.json.text, "Bergen is rainy.");
  assert.deepEqual(tokensOf(a.json.usage), { inputTokens: 17, outputTokens: 8 });
  const msgs = srv.state.requests.filter((q) => q.path === "/v1/messages");
  assert.equal(msgs[0].headers["x-api-key"], "ak-test");
  const second = msgs[1].body.messages;
  assert.equal(second.at(-1).role, "user");
  assert.equal(second.at(-1).content[0].type, "tool_result");
  assert.equal(second.at(-1).content[0].tool_use_id, "tu_1");
});

test("webhook tools: allowlist refusal, stable Idempotency-Key across a resume, non-2xx as an error result", async () => {
  const refused = worker({ config: { tools: [lookupTool("https://evil.example.com/x")], allowedHosts: ["127.0.0.1"] } });
  const r = await call(refused, "POST", "/runs/w-0", { input: "x" });
  assert.equal(r.json.error.code, "STEADFAST_CONFIG_INVALID", r.text);

  // ship dies (first time per run) while lookup runs in the same turn: lookup's result is lost, and the
  // resume calls it again with the same key.
  const config = { recovery: fastRecovery, tools: [lookupTool()], allowedHosts: ["127.0.0.1"],
    model: { provider: "mock", script: [{ toolCalls: [{ name: "ship", args: { order: 1 } }, { name: "lookup", args: { q: "stock" } }] }, { text: "done" }] } };
  const mf = worker({ config });
  const before = srv.state.tool.length;
  const first = await call(mf, "POST", "/runs/w-1", { input: "ship it" });
  assert.equal(first.status, 502, first.text);
  await new Promise((res) => setTimeout(res, 20));
  await cron(mf);
  const run = await call(mf, "GET", "/runs/w-1");
  assert.equal(run.json.status, "finished", run.text);
  const calls = srv.state.tool.slice(before);
  const keys = calls.map((c) => c.headers["idempotency-key"]);
  assert.ok(keys.length >= 1 && keys.every((k) => k && k === keys[0]), `keys ${keys}`);
  const callId = run.json.messages.find((m) => m.toolCalls)?.toolCalls.find((c) => c.name === "lookup").id;
  const h = await call(mf, "GET", "/runs/w-1/history?limit=1");
  assert.equal(keys[0], await callKey(h.json[0].checkpoint.keyScope, callId), "the key is the call's key");
  assert.notEqual(keys[0], callId, "not the bare call id (it repeats across runs)");

  srv.state.toolMode = "fail";
  const failing = worker({ config: { tools: [lookupTool()], allowedHosts: ["127.0.0.1"],
    model: { provider: "mock", script: [{ toolCalls: [{ name: "lookup", args: { q: "x" } }] }, { text: "the tool failed" }] } } });
  const f = await call(failing, "POST", "/runs/w-2", { input: "x" });
  srv.state.toolMode = "ok";
  assert.equal(f.status, 200, f.text);
  const result = f.json.messages.find((m) => m.role === "tool");
  assert.equal(result.isError, true);
  assert.match(result.content, /HTTP 503/);
});

const oneCall = (tool) => ({ tools: [tool], allowedHosts: ["127.0.0.1"],
  model: { provider: "mock", script: [{ toolCalls: [{ name: tool.name, args: { q: "x" } }] }, { text: "done" }] } });

async function waitFor(check, ms = 3000) {
  const end = Date.now() + ms;
  while (!check() && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
  return check();
}

test("webhook timeout covers the body: a server that trickles its body for ever gets a TimeoutError result within about the timeout", { timeout: 30000 }, async () => {
  const mf = worker({ config: oneCall({ ...lookupTool(`http://127.0.0.1:${srv.port}/tools/trickle`), timeoutMs: 800 }) });
  const t0 = Date.now();
  const r = await call(mf, "POST", "/runs/trickle-1", { input: "x" });
  const elapsed = Date.now() - t0;
  assert.equal(r.status, 200, r.text);
  const result = r.json.messages.find((m) => m.role === "tool");
  assert.equal(result.isError, true);
  assert.match(result.content, /^TimeoutError: POST http:\/\/127\.0\.0\.1:\d+ failed: no complete answer within 800 ms$/);
  const s = srv.state.streams.trickle;
  assert.ok(s.bytes > 1, "the server had answered headers and started the body");
  assert.ok(elapsed < 800 + 2500, `the run answered after ${elapsed} ms`);
  assert.ok(await waitFor(() => s.closedAt), "the Worker closed the connection");
  assert.ok(s.closedAt - s.startedAt < 800 + 1500, `closed ${s.closedAt - s.startedAt} ms after the headers`);
});

test("webhook response cap is enforced while reading: an endless body is cut at maxResponseBytes and the connection closed", { timeout: 30000 }, async () => {
  const mf = worker({ config: oneCall({ ...lookupTool(`http://127.0.0.1:${srv.port}/tools/flood`), timeoutMs: 20000, maxResponseBytes: 1000 }) });
  const t0 = Date.now();
  const r = await call(mf, "POST", "/runs/flood-1", { input: "x" });
  const elapsed = Date.now() - t0;
  assert.equal(r.status, 200, r.text);
  const result = r.json.messages.find((m) => m.role === "tool");
  assert.ok(!result.isError, result.content);
  assert.equal(result.content, "y".repeat(1000) + "… [truncated: the first 1000 bytes of a longer response]");
  assert.ok(elapsed < 5000, `answered after ${elapsed} ms (well before the 20 s timeout)`);
  const s = srv.state.streams.flood;
  assert.ok(await waitFor(() => s.closedAt), "the Worker closed the connection");
  assert.ok(s.bytes < 64 * 1024 * 1024, `the server got to send ${s.bytes} bytes`);
});

test("webhook URL secrets (path, query) never reach results, events, the transcript or errors: only the host", async () => {
  const secrets = ["T0KEN9f8e7d6c5b4a", "S1GNATURE42zz", "/tools/secret", "CL0SEDsecret77", "QUERYSECRET9", "/hooks/"];
  const tools = [
    { ...lookupTool(`http://127.0.0.1:${srv.port}/tools/secret/T0KEN9f8e7d6c5b4a?sig=S1GNATURE42zz`), name: "notify" },
    { ...lookupTool("http://127.0.0.1:1/hooks/CL0SEDsecret77?k=QUERYSECRET9"), name: "closed" },
  ];
  const config = { tools, allowedHosts: ["127.0.0.1"], model: { provider: "mock", script: [
    { toolCalls: [{ name: "notify", args: {} }, { name: "closed", args: {} }] }, { text: "both failed" }] } };
  const mf = worker({ config });
  const sse = await call(mf, "POST", "/runs/sec-1", { input: "x" }, { accept: "text/event-stream" });
  assert.equal(sse.status, 200, sse.text);
  const run = await call(mf, "GET", "/runs/sec-1");
  const results = run.json.messages.filter((m) => m.role === "tool");
  assert.equal(results.length, 2);
  assert.match(results[0].content, /^HttpError: HTTP 404: Cannot POST \[redacted\]/);
  assert.match(results[1].content, /^NetworkError: POST http:\/\/127\.0\.0\.1:1 failed: /);
  const history = await call(mf, "GET", "/runs/sec-1/history");
  // A configuration error that names a bad webhook URL shows no path either.
  const bad = worker({ config: { tools: [lookupTool(`http://127.0.0.1:99999/hooks/CL0SEDsecret77?k=QUERYSECRET9`)], allowedHosts: ["127.0.0.1"] } });
  const e = await call(bad, "POST", "/runs/sec-2", { input: "x" });
  assert.equal(e.json.error.code, "STEADFAST_CONFIG_INVALID", e.text);
  for (const [what, text] of [["events", sse.text], ["transcript", run.text], ["history", history.text], ["config error", e.text],
    ["KV", JSON.stringify(await kvListing(mf))]]) {
    for (const secret of secrets) assert.ok(!text.includes(secret), `${what} contains ${secret}`);
  }
});

test("OpenAI streamed (model.stream): the answer is read from its server-sent events, its text comes out as text.delta events", async () => {
  const chunk = (delta, finish = null) => ({ id: "c1", object: "chat.completion.chunk", created: 1, model: "gpt-test", choices: [{ index: 0, delta, finish_reason: finish }] });
  const usage = { id: "c1", object: "chat.completion.chunk", created: 1, model: "gpt-test", choices: [], usage: { prompt_tokens: 9, completion_tokens: 4 } };
  const body = [chunk({ role: "assistant", content: "Oslo is " }), chunk({ content: "sunny." }), chunk({}, "stop"), usage];
  srv.state.openai.push({ sse: ": keep-alive\n\n" + body.map((c) => `data: ${JSON.stringify(c)}\n\n`).join("") + "data: [DONE]\n\n" });
  const mf = worker({
    config: { model: { provider: "openai", model: "gpt-test", stream: true, maxTokens: 64, baseUrl: `http://127.0.0.1:${srv.port}/v1` } },
    bindings: { OPENAI_API_KEY: "sk-test" },
  });
  const r = await call(mf, "POST", "/runs/oa-stream", { input: "Weather in Oslo?" }, { accept: "text/event-stream" });
  assert.equal(r.status, 200, r.text);
  const events = parseSse(r.text).events;
  assert.deepEqual(events.filter((e) => e.type === "text.delta").map((e) => [e.step, e.attempt, e.text]), [[1, 1, "Oslo is "], [1, 1, "sunny."]]);
  assert.equal(events.find((e) => e.type === "step").text, "Oslo is sunny.");
  const sent = srv.state.requests.filter((q) => q.path === "/v1/chat/completions").at(-1).body;
  assert.deepEqual([sent.stream, sent.stream_options, sent.max_completion_tokens, sent.max_tokens], [true, { include_usage: true }, 64, undefined]);
  const view = await call(mf, "GET", "/runs/oa-stream");
  assert.deepEqual([view.json.status, tokensOf(view.json.usage)], ["finished", { inputTokens: 9, outputTokens: 4 }]);
});

test("SSE: events in order with gapless seq, ending with run.done", async () => {
  const mf = worker({ config: { recovery: fastRecovery } });
  const r = await call(mf, "POST", "/runs/sse-1", { input: "refund order 7" }, { accept: "text/event-stream" });
  assert.equal(r.status, 200);
  assert.match(r.headers.get("content-type"), /text\/event-stream/);
  const events = parseSse(r.text).events;
  events.forEach((e, i) => assert.equal(e.seq, i));
  assert.equal(events[0].type, "run.start");
  assert.equal(events.at(-1).type, "run.done");
  assert.ok(events.some((e) => e.type === "approval.requested"));
});

test("GET /runs/{id}/events replays the journal from any Last-Event-ID: the rest once, the end, then 204", async () => {
  const mf = worker({ config: { recovery: fastRecovery } });
  const r = await call(mf, "POST", "/runs/replay-1", { input: "refund order 7" }, { accept: "text/event-stream" });
  const live = parseSse(r.text);
  assert.match(live.ids.at(-1), /^[0-9]+\.done$/, "the paused run's stream ends with its cursor");
  const whole = await mf.dispatchFetch(`${BASE}/runs/replay-1/events`, { headers: auth() });
  assert.equal(whole.status, 200);
  const wholeText = await whole.text();
  const replayed = parseSse(wholeText);
  const kinds = (events) => events.filter((e) => ["step", "tool.done", "approval.requested", "run.done"].includes(e.type)).map((e) => `${e.type}:${e.toolCallId ?? e.step ?? e.status}`);
  assert.deepEqual(kinds(replayed.events), kinds(live.events));
  assert.equal(replayed.ids.at(-1), live.ids.at(-1));
  // From each cursor: what the whole replay has after that cursor's block, once.
  for (const id of replayed.ids.filter((x) => !x.endsWith(".done"))) {
    const rest = await mf.dispatchFetch(`${BASE}/runs/replay-1/events`, { headers: { ...auth(), "last-event-id": id } });
    assert.equal(rest.status, 200, id);
    const got = parseSse(await rest.text());
    const after = parseSse(wholeText.slice(wholeText.indexOf(`id: ${id}\n\n`) + `id: ${id}\n\n`.length));
    assert.deepEqual(kinds(got.events), kinds(after.events), id);
    assert.equal(got.ids.at(-1), live.ids.at(-1), id);
  }
  const done = await mf.dispatchFetch(`${BASE}/runs/replay-1/events`, { headers: { ...auth(), "last-event-id": live.ids.at(-1) } });
  assert.equal(done.status, 204);
  const bad = await mf.dispatchFetch(`${BASE}/runs/replay-1/events`, { headers: { ...auth(), "last-event-id": "nope" } });
  assert.equal(bad.status, 400);
  assert.equal((await bad.json()).error.code, "STEADFAST_INVALID_INPUT");
});

test("/__conformance does not exist in the release build", async () => {
  const mf = worker({ bindings: { STEADFAST_CONFORMANCE: "1" } });
  for (const method of ["POST", "GET"]) {
    const r = await call(mf, method, "/__conformance");
    assert.equal(r.status, 404, r.text);
    assert.equal(r.json.error.code, "STEADFAST_ROUTE_NOT_FOUND");
  }
  assert.deepEqual(await kvListing(mf), [], "nothing ran");
});

test("the release Worker carries no test doubles (crash injection is compiled out); the test-only build does", () => {
  // The crash-injection message is in the wasm only when the cargo feature `testing` is on: the
  // conformance build turns it on, the release build must not.
  const marker = Buffer.from("simulated crash after effect");
  const release = fs.readFileSync("build/index_bg.wasm");
  assert.equal(release.indexOf(marker), -1, "the release Worker contains the test build's crash injection");
  const testBuild = fs.readFileSync("build-conformance/index_bg.wasm");
  assert.notEqual(testBuild.indexOf(marker), -1, "the marker is not where the feature is on: the check would prove nothing");
});

test("the test build's /__conformance needs the token, then passes the store suite on the real local KV and Durable Object bindings", async () => {
  const mf = worker({ build: "build-conformance" });
  for (const headers of [{}, { authorization: "Bearer wrong" }, { authorization: `Basic ${TOKEN}` }]) {
    const res = await mf.dispatchFetch(BASE + "/__conformance", { method: "POST", headers });
    assert.equal(res.status, 401, await res.text());
  }
  assert.deepEqual(await kvListing(mf), [], "nothing ran without the token");
  const open = worker({ build: "build-conformance", token: null });
  assert.equal((await call(open, "POST", "/__conformance")).status, 503);
  const r = await call(mf, "POST", "/__conformance");
  assert.equal(r.status, 200, r.text);
  assert.match(r.text, /store conformance on WorkersKv: ok \(15 suites\)/);
  // The Durable Object store (strict mode) on the real local binding, strict fencing asserted, and one SQLite
  // row written per durable boundary (measured by SQLite's rows_written, asserted inside the Worker).
  assert.match(r.text, /store conformance on DurableObject: ok \(15 suites, strict fencing\)/);
  assert.match(r.text, /strict_writes_per_boundary=1\.00 \(40 rows for 40 boundaries\)/);
  // The runs kept inside one object, as the npm package's durableObjectStore keeps them (SqlRuns + SqlIndex
  // over the object's SQL storage, run inside a real local object), strict fencing asserted.
  assert.match(r.text, /store conformance on the runs of one Durable Object \(durableObjectStore\): ok \(15 suites, strict fencing\)/);
  console.log(r.text);
});

test("sessions over HTTP: each turn its own run, the conversation carried on, listed with kind session", async () => {
  const script = [{ toolCalls: [{ name: "charge", args: { order: 7 } }] }, { text: "Charged." }, { text: "Noted." }];
  const mf = worker({ config: { model: { provider: "mock", script } } });
  const one = await call(mf, "POST", "/sessions/chat-42", { input: "Charge order 7" });
  assert.equal(one.status, 200, one.text);
  assert.equal(one.json.runId, "chat-42.turn-1");
  assert.equal(one.json.text, "Charged.");
  const two = await call(mf, "POST", "/sessions/chat-42", { input: "Thanks" });
  assert.equal(two.json.runId, "chat-42.turn-2", two.text);
  assert.equal(two.json.text, "Noted.");
  assert.deepEqual(two.json.messages.filter((m) => m.role === "user").map((m) => m.content), ["Charge order 7", "Thanks"]);
  const listed = await call(mf, "GET", "/sessions/chat-42");
  assert.deepEqual(listed.json.turns.map((t) => [t.turn, t.text]), [[2, "Noted."], [1, "Charged."]]);
  assert.equal((await call(mf, "GET", "/runs/chat-42.turn-1")).json.status, "finished");
  const direct = await call(mf, "POST", "/runs/chat-42.turn-1", { input: "sneak in" });
  assert.equal(direct.json.error.code, "STEADFAST_SESSION_ID_INVALID", direct.text);
  assert.equal((await call(mf, "GET", "/demo/counts")).json.charges, 1);
});

test("a configured schedule fires from the cron trigger once per fire time, as a run named by the fire", async () => {
  const script = [{ toolCalls: [{ name: "charge", args: { order: 7 } }] }, { text: "Charged." }];
  const schedules = [{ id: "every-minute", cron: "* * * * *", input: "Charge order 7" }];
  const mf = worker({ config: { model: { provider: "mock", script }, schedules } });
  const before = await call(mf, "GET", "/schedules");
  assert.equal(before.status, 200, before.text);
  assert.equal(before.json.schedules[0].since, null);
  // The first tick only notes the schedule (a fire time before it existed is not due).
  await cron(mf);
  const seen = await call(mf, "GET", "/schedules");
  assert.equal(typeof seen.json.schedules[0].since, "number", seen.text);
  assert.equal((await call(mf, "GET", "/demo/counts")).json.charges ?? 0, 0);
  // Say it exists since long ago: the current minute's fire is due.
  const kv = await mf.getKVNamespace("RUNS");
  const key = (await kv.list()).keys.map((k) => k.name).find((k) => k.endsWith("state/schedule/every-minute"));
  assert.ok(key, "the schedule's first-seen time is stored");
  await kv.put(key, "0");
  await cron(mf);
  await cron(mf);
  await cron(mf);
  const after = (await call(mf, "GET", "/schedules")).json.schedules[0];
  assert.ok(after.lastRun, JSON.stringify(after));
  assert.equal(after.lastRun.runId, `every-minute.${after.lastFireAt / 1000}.fire`);
  assert.equal(after.lastRun.status, "finished");
  const run = await call(mf, "GET", `/runs/${after.lastRun.runId}`);
  assert.equal(run.json.status, "finished", run.text);
  // Three ticks, one fire per fire time: a minute boundary between them may add one more, never more.
  const fires = (await kv.list()).keys.map((k) => k.name).filter((k) => /every-minute\.\d+\.fire\//.test(k));
  const distinct = new Set(fires.map((k) => k.match(/every-minute\.(\d+)\.fire/)[1]));
  const charges = (await call(mf, "GET", "/demo/counts")).json.charges;
  assert.ok(distinct.size >= 1 && distinct.size <= 2, [...distinct].join());
  assert.equal(charges, distinct.size, `one charge per fire time: ${[...distinct].join()}`);
});

test("STEADFAST_CONFIG as a JSON variable (wrangler.toml [vars] STEADFAST_CONFIG = { ... }) is that configuration; a JSON value that is not one is STEADFAST_CONFIG_INVALID", { timeout: 60000 }, async () => {
  const config = { model: { provider: "mock", script: [{ text: "From the JSON variable." }] }, demoTools: false };
  const json = worker({ bindings: { STEADFAST_CONFIG: config } });
  for (const id of ["j1", "j2"]) {
    const r = await call(json, "POST", `/runs/${id}`, { input: "hi" });
    assert.deepEqual([r.status, r.json.text], [200, "From the JSON variable."], r.text);
  }
  const number = worker({ bindings: { STEADFAST_CONFIG: 42 } });
  const r = await call(number, "POST", "/runs/n", { input: "hi" });
  assert.equal(r.json.error?.code, "STEADFAST_CONFIG_INVALID", r.text);
});
