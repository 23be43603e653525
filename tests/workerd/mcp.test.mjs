// End-to-end tests of the Worker's MCP servers (`"mcp"` in its configuration) under workerd: the built Worker
// (build/index.js) against a real MCP server made with @modelcontextprotocol/sdk (`McpServer` + its Streamable
// HTTP transport, tests/workerd/support/mcp-server.mjs), run as a process of its own on 127.0.0.1 and stopped by
// its pid. The model is the Worker's scripted mock model.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import fs from "node:fs";
import { Miniflare } from "miniflare";
import { apiCaller, callKey } from "./support/api.mjs";
import { builtWorker } from "./support/built.mjs";

const TOKEN = "test-token-0123456789";
const BASE = "http://localhost";
const MCP_TOKEN = "mcp-s3cret-token-42";
const call = apiCaller(TOKEN, BASE);
const instances = [];
const servers = new Set();

/// Starts the MCP server process on `port` (0: any); resolves once it listens, with its port and pid.
function startMcp(port = 0, args = []) {
  const child = spawn(process.execPath, ["tests/workerd/support/mcp-server.mjs", String(port), ...args], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  servers.add(child);
  child.on("exit", () => servers.delete(child));
  return new Promise((resolve, reject) => {
    let out = "";
    child.stdout.on("data", (c) => {
      out += c;
      const line = out.split("\n")[0];
      if (out.includes("\n")) resolve({ port: JSON.parse(line).port, pid: child.pid, child });
    });
    child.on("exit", (code) => reject(new Error(`the MCP server exited (${code}) before listening`)));
  });
}

/// Stops a server started by `startMcp`, by its pid, and waits for it to be gone.
async function stopMcp(server) {
  const gone = new Promise((resolve) => server.child.once("exit", resolve));
  process.kill(server.pid);
  await gone;
}

async function seen(server) {
  return (await fetch(`http://127.0.0.1:${server.port}/seen`)).json();
}

after(async () => {
  for (const mf of instances) await mf.dispose();
  for (const child of servers) process.kill(child.pid);
});

function worker(config) {
  assert.ok(fs.existsSync("build/index.js"), "build/index.js is missing: run ./scripts/build-worker");
  const mf = new Miniflare({
    ...builtWorker(),
    kvNamespaces: ["RUNS"],
    // Strict mode's run objects (as wrangler.toml declares them), for `"store": "durable-object"`.
    durableObjects: { RUN_OBJECTS: { className: "RunObject", useSQLite: true } },
    bindings: { STEADFAST_TOKEN: TOKEN, MCP_TOKEN, STEADFAST_CONFIG: JSON.stringify(config) },
    unsafeTriggerHandlers: true,
    cf: false,
  });
  instances.push(mf);
  return mf;
}

async function cron(mf) {
  const w = await mf.getWorker();
  return w.scheduled({ cron: "* * * * *", scheduledTime: new Date() });
}

const mcpConfig = (port, script) => ({
  model: { provider: "mock", script },
  demoTools: false,
  recovery: { intervalMs: 1 },
  mcp: [{ url: `http://127.0.0.1:${port}/mcp`, headers: { Authorization: { secret: "MCP_TOKEN", prefix: "Bearer " }, "X-Team": "ops" } }],
  allowedHosts: ["127.0.0.1"],
});

async function keyOf(mf, runId, toolName) {
  const run = await call(mf, "GET", `/runs/${runId}`);
  const callId = run.json.messages.find((m) => m.toolCalls)?.toolCalls.find((c) => c.name === toolName).id;
  const h = await call(mf, "GET", `/runs/${runId}/history?limit=1`);
  return callKey(h.json[0].checkpoint.keyScope, callId);
}

for (const mode of ["event-stream", "json"]) {
  test(`a run calls an MCP server's tools (${mode} replies): the call's idempotency key in _meta, the secret header on every message, text, structured and error results in the transcript`, async () => {
    const server = await startMcp(0, mode === "json" ? ["--json"] : []);
    try {
      const script = [
        { toolCalls: [{ name: "add", args: { a: 2, b: 3 } }, { name: "stock", args: { item: "bolts" } }, { name: "refuse", args: { why: "closed" } }] },
        { text: "done" },
      ];
      const mf = worker(mcpConfig(server.port, script));
      const r = await call(mf, "POST", "/runs/m-1", { input: "use the tools" });
      assert.equal(r.status, 200, r.text);
      assert.equal(r.json.status, "finished", r.text);
      const results = Object.fromEntries(
        r.json.messages.filter((m) => m.role === "tool").map((m) => [r.json.messages.flatMap((x) => x.toolCalls ?? []).find((c) => c.id === m.toolCallId).name, m]),
      );
      assert.equal(results.add.content, "5");
      assert.notEqual(results.add.isError, true);
      assert.deepEqual(JSON.parse(results.stock.content), { item: "bolts", count: 5 });
      assert.equal(results.refuse.isError, true);
      assert.match(results.refuse.content, /^McpToolError: refused: closed/);

      const s = await seen(server);
      assert.deepEqual(s.calls.map((c) => c.name).sort(), ["add", "refuse", "stock"]);
      for (const c of s.calls) {
        assert.equal(c.meta.idempotencyKey, await keyOf(mf, "m-1", c.name), `${c.name}: the call's key in _meta`);
        assert.equal(c.authorization, `Bearer ${MCP_TOKEN}`);
      }
      assert.deepEqual(s.messages.slice(0, 3).map((m) => m.method), ["initialize", "notifications/initialized", "tools/list"]);
      assert.ok(s.messages.every((m) => m.authorization === `Bearer ${MCP_TOKEN}`), "the secret header on every message");
      assert.equal(s.messages[0].sessionId, null);
      const session = s.messages[1].sessionId;
      assert.ok(session, "the session id from initialize's reply");
      for (const m of s.messages.slice(1)) assert.deepEqual([m.sessionId, m.protocolVersion], [session, "2025-11-25"], m.method);
      assert.equal(s.messages.filter((m) => m.method === "tools/list").length, 1, "listed once for the isolate's requests");
      // The secret is not in the run.
      assert.ok(!r.text.includes(MCP_TOKEN));
    } finally {
      await stopMcp(server);
    }
  });
}

test("strict mode: the run's object lists the MCP server and calls its tool with the call's key", async () => {
  const server = await startMcp();
  try {
    const mf = worker({ ...mcpConfig(server.port, [{ toolCalls: [{ name: "add", args: { a: 20, b: 1 } }] }, { text: "done" }]), store: "durable-object" });
    const r = await call(mf, "POST", "/runs/m-do", { input: "add" });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.status, "finished", r.text);
    assert.equal(r.json.messages.find((m) => m.role === "tool").content, "21");
    const s = await seen(server);
    assert.deepEqual(s.calls.map((c) => [c.name, c.authorization]), [["add", `Bearer ${MCP_TOKEN}`]]);
    assert.equal(s.calls[0].meta.idempotencyKey, await keyOf(mf, "m-do", "add"));
  } finally {
    await stopMcp(server);
  }
});

test("a down MCP server fails the run attempt retryably: the run stays resumable and the sweep finishes it with the same key once the server is back (in a new session)", async () => {
  let server = await startMcp();
  const port = server.port;
  const mf = worker(mcpConfig(port, [{ toolCalls: [{ name: "add", args: { a: 40, b: 2 } }] }, { text: "the answer is 42" }]));
  // The isolate lists the server (and keeps its list), then the server goes down.
  assert.equal((await call(mf, "GET", "/runs")).status, 200);
  await stopMcp(server);

  const first = await call(mf, "POST", "/runs/m-2", { input: "add" });
  assert.equal(first.status, 502, first.text);
  assert.equal(first.json.error.code, "STEADFAST_TOOL_PROPAGATED", first.text);
  assert.equal(first.json.error.retryable, true, first.text);
  assert.match(first.json.error.message, /MCP server http:\/\/127\.0\.0\.1:\d+/);
  const waiting = await call(mf, "GET", "/runs/m-2");
  assert.equal(waiting.status, 200, waiting.text);
  assert.notEqual(waiting.json.status, "finished");
  assert.ok(waiting.json.messages.some((m) => m.toolCalls?.[0]?.name === "add"), "the model's turn is recorded");
  assert.ok(!waiting.json.messages.some((m) => m.role === "tool"), "no result recorded for the failed call");

  // Back on the same port, knowing none of the old sessions: the sweep resumes the run, the client makes a new
  // session, and the call runs with the same key.
  server = await startMcp(port);
  try {
    await new Promise((res) => setTimeout(res, 20));
    await cron(mf);
    const done = await call(mf, "GET", "/runs/m-2");
    assert.equal(done.json.status, "finished", done.text);
    assert.equal(done.json.messages.find((m) => m.role === "tool").content, "42");
    const s = await seen(server);
    assert.deepEqual(s.calls.map((c) => c.name), ["add"]);
    assert.equal(s.calls[0].meta.idempotencyKey, await keyOf(mf, "m-2", "add"));
    assert.deepEqual(s.messages.map((m) => m.method), ["tools/call", "initialize", "notifications/initialized", "tools/call"], "the old session was refused, a new one made");
  } finally {
    await stopMcp(server);
  }
});

test("MCP configuration errors: a host off the allowlist names mcp[0].url, a server never reached fails the request retryably and records nothing", async () => {
  const refused = worker({ ...mcpConfig(1, [{ text: "x" }]), allowedHosts: ["mcp.example.com"] });
  const r = await call(refused, "POST", "/runs/m-3", { input: "x" });
  assert.equal(r.json.error.code, "STEADFAST_CONFIG_INVALID", r.text);
  assert.match(r.json.error.message, /mcp\[0\]\.url: host '127\.0\.0\.1' is not in allowedHosts/);

  // A port nothing listens on (a server started and stopped).
  const gone = await startMcp();
  await stopMcp(gone);
  const down = worker(mcpConfig(gone.port, [{ toolCalls: [{ name: "add", args: { a: 1, b: 1 } }] }, { text: "x" }]));
  const d = await call(down, "POST", "/runs/m-4", { input: "x" });
  assert.equal(d.status, 502, d.text);
  assert.equal(d.json.error.code, "STEADFAST_TOOL_PROPAGATED", d.text);
  assert.match(d.json.error.message, /^mcp\[0\] \(http:\/\/127\.0\.0\.1:\d+\): listing the server's tools failed/);
  // Once it is up, nothing was recorded for that request.
  const back = await startMcp(gone.port);
  try {
    assert.equal((await call(down, "GET", "/runs/m-4")).status, 404);
  } finally {
    await stopMcp(back);
  }
});
