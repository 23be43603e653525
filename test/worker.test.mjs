// End-to-end tests of the built Worker (build/index.js) under workerd, through programmatic Miniflare:
// real local KV, the cron handler, two instances over one persisted KV directory, providers and webhook tools
// against a local HTTP server on 127.0.0.1.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import { Miniflare } from "miniflare";

const TOKEN = "test-token-0123456789";
const BASE = "http://localhost";
const instances = [];

function worker({ config, token = TOKEN, kvPersist, bindings = {} } = {}) {
  const b = { ...bindings };
  if (token) b.STEADFAST_TOKEN = token;
  if (config) b.STEADFAST_CONFIG = JSON.stringify(config);
  const mf = new Miniflare({
    modules: true,
    scriptPath: "build/index.js",
    modulesRoot: "build",
    modulesRules: [
      { type: "ESModule", include: ["**/*.js", "**/*.mjs"] },
      { type: "CompiledWasm", include: ["**/*.wasm"] },
    ],
    compatibilityDate: "2026-04-01",
    kvNamespaces: ["RUNS"],
    kvPersist,
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
  const shared = {
    modules: true,
    scriptPath: "build/index.js",
    modulesRoot: "build",
    modulesRules: [
      { type: "ESModule", include: ["**/*.js", "**/*.mjs"] },
      { type: "CompiledWasm", include: ["**/*.wasm"] },
    ],
    compatibilityDate: "2026-04-01",
    kvNamespaces: { RUNS: "runs-shared" },
  };
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

async function call(mf, method, p, body, headers = {}) {
  const init = { method, headers: { authorization: `Bearer ${TOKEN}`, ...headers } };
  if (body !== undefined) init.body = typeof body === "string" ? body : JSON.stringify(body);
  const res = await mf.dispatchFetch(BASE + p, init);
  const text = await res.text();
  let json;
  try {
    json = JSON.parse(text);
  } catch {
    json = text;
  }
  return { status: res.status, json, text, headers: res.headers };
}

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
  const state = { openai: [], anthropic: [], requests: [], tool: [], toolMode: "ok" };
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
        return reply(next.status ?? 200, next.body, next.headers ?? {});
      }
      if (req.url.startsWith("/tools/")) {
        state.tool.push(entry);
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
  ];
  for (const [method, p, body, status, code] of cases) {
    const before = await kvListing(mf);
    const r = await call(mf, method, p, body);
    assert.equal(r.status, status, `${method} ${p}: ${r.text.slice(0, 200)}`);
    assert.equal(r.json.error.code, code);
    assert.deepEqual(await kvListing(mf), before, `${method} ${p} changed KV`);
  }
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
  assert.deepEqual(r.json.usage, { inputTokens: 32, outputTokens: 7 });
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
  assert.deepEqual(a.json.usage, { inputTokens: 17, outputTokens: 8 });
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
  assert.equal(keys[0], callId, "the key is the tool call id");

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

test("SSE: events in order with gapless seq, ending with run.done", async () => {
  const mf = worker({ config: { recovery: fastRecovery } });
  const r = await call(mf, "POST", "/runs/sse-1", { input: "refund order 7" }, { accept: "text/event-stream" });
  assert.equal(r.status, 200);
  assert.match(r.headers.get("content-type"), /text\/event-stream/);
  const events = r.text.split("\n\n").filter((b) => b.trim()).map((b) => JSON.parse(b.split("\n").find((l) => l.startsWith("data: ")).slice(6)));
  events.forEach((e, i) => assert.equal(e.seq, i));
  assert.equal(events[0].type, "run.start");
  assert.equal(events.at(-1).type, "run.done");
  assert.ok(events.some((e) => e.type === "approval.requested"));
});

test("the store conformance suite passes on the real local KV binding (WorkersKv)", async () => {
  const mf = worker({ bindings: { STEADFAST_CONFORMANCE: "1" } });
  const res = await mf.dispatchFetch(BASE + "/__conformance", { method: "POST" });
  const text = await res.text();
  assert.equal(res.status, 200, text);
  assert.match(text, /store conformance on WorkersKv: ok \(11 suites\)/);
  const off = await worker().dispatchFetch(BASE + "/__conformance", { method: "POST", headers: { authorization: `Bearer ${TOKEN}` } });
  assert.equal(off.status, 404, "not served without the test var");
});
