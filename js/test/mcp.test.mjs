// MCP servers as tools (`steadfast/mcp`): `mcpTools({ url, headers })` against a real MCP server built with the
// official SDK (test-support/mcp_server.mjs: McpServer + the Streamable HTTP transport on node:http, 127.0.0.1),
// run as a child process so a test can kill -9 it and start it again on the same port.
import test, { after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { createAgent, defineTool, memoryStore, mockModel, PropagatedToolError, SteadfastError } from "steadfast";
import { mcpTools } from "steadfast/mcp";
import { rng } from "../test-support/seeds.mjs";

const SERVER = fileURLToPath(new URL("../test-support/mcp_server.mjs", import.meta.url));
const running = new Set();
const dirs = [];
after(async () => {
  for (const s of running) await s.kill();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/** A directory for a server's record files (calls.jsonl, charges.jsonl), kept across its restarts. */
function recordDir() {
  const dir = mkdtempSync(join(tmpdir(), "steadfast-mcp-"));
  dirs.push(dir);
  return dir;
}

/** Starts the test server as a child process; resolves once it listens. */
async function startServer(options) {
  const child = spawn(process.execPath, [SERVER, JSON.stringify(options)], { stdio: ["ignore", "pipe", "inherit"] });
  const exited = new Promise((resolve) => child.once("exit", resolve));
  const port = await new Promise((resolve, reject) => {
    let out = "";
    child.stdout.on("data", (d) => {
      out += d;
      const m = /listening (\d+)/.exec(out);
      if (m) resolve(Number(m[1]));
    });
    child.once("exit", (code) => reject(new Error(`the MCP test server exited (${code}) before listening: ${out}`)));
  });
  const server = {
    port,
    url: `http://127.0.0.1:${port}/mcp`,
    exited,
    /** kill -9 (by its own pid), and wait until it is gone. */
    async kill() {
      if (child.exitCode === null && child.signalCode === null) process.kill(child.pid, "SIGKILL");
      await exited;
      running.delete(server);
    },
  };
  running.add(server);
  return server;
}

const records = (dir, file) =>
  existsSync(join(dir, file)) ? readFileSync(join(dir, file), "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l)) : [];

/** The tool messages of a model request, by tool name. */
function toolMessages(request) {
  return Object.fromEntries(request.messages.filter((m) => m.role === "tool").map((m) => [m.name, m]));
}

test("mcpTools lists the server's tools with their JSON Schemas, following the tools/list cursor", async () => {
  const dir = recordDir();
  const server = await startServer({ dir, pageSize: 2 });
  const tools = await mcpTools({ url: server.url });
  try {
    assert.deepEqual(
      tools.map((t) => t.name),
      ["add", "stock", "reserve", "whoami", "mixed", "broken", "charge"],
      "all 7 tools, from 4 pages",
    );
    const add = tools.find((t) => t.name === "add");
    assert.equal(add.description, "Add two numbers");
    assert.deepEqual(add.inputSchema.properties, { a: { type: "number" }, b: { type: "number" } });
    assert.deepEqual(add.inputSchema.required, ["a", "b"]);
    assert.equal(typeof tools.close, "function");
    assert.deepEqual(Object.keys(tools).length, 7, "close is not an enumerable element");

    // The schemas are the agent's: they enter its fingerprint.
    const agent = createAgent({ model: mockModel(["ok"]), tools, store: memoryStore() });
    const plain = createAgent({
      model: mockModel(["ok"]),
      tools: tools.map((t) => ({ ...t, inputSchema: { type: "object" } })),
      store: memoryStore(),
    });
    assert.notEqual(agent.fingerprint.tools.add, plain.fingerprint.tools.add);
    assert.notEqual(agent.fingerprint.hash, plain.fingerprint.hash);
  } finally {
    await tools.close();
    await server.kill();
  }
});

test("calls map to results the model reads: text, structuredContent as JSON, isError and JSON-RPC errors as error results, other parts as notes; arguments are checked against the server's schema first", async () => {
  const dir = recordDir();
  const server = await startServer({ dir });
  const tools = await mcpTools({ url: server.url });
  try {
    const model = mockModel([
      {
        toolCalls: [
          { name: "add", args: { a: 2, b: 3 } },
          { name: "stock", args: { sku: "A1" } },
          { name: "reserve", args: { sku: "A1" } },
          { name: "mixed" },
          { name: "broken" },
        ],
      },
      // A server's own JSON-RPC error in the codes the SDK uses for a lost connection or a timeout: still an answer.
      { toolCalls: [{ name: "broken", args: { code: -32001, message: "Request timed out" } }] },
      { toolCalls: [{ name: "broken", args: { code: -32000, message: "Connection closed" } }] },
      { toolCalls: [{ name: "add", args: { a: "two", b: 3 } }] },
      "done",
    ]);
    const agent = createAgent({ model, tools, store: memoryStore() });
    const r = await agent.send("go", { sessionId: "mcp-map" });
    assert.equal(r.status, "finished");
    assert.equal(r.text, "done");

    const seen = toolMessages(model.calls[1]);
    assert.deepEqual(
      { content: seen.add.content, isError: seen.add.isError, kind: seen.add.kind },
      { content: "5", isError: false, kind: "execution" },
    );
    assert.deepEqual(JSON.parse(seen.stock.content), { sku: "A1", available: 3 });
    assert.equal(seen.stock.isError, false);
    assert.deepEqual(
      { content: seen.reserve.content, isError: seen.reserve.isError, kind: seen.reserve.kind },
      { content: "McpToolError: A1 is out of stock", isError: true, kind: "execution" },
    );
    assert.equal(seen.mixed.content, "a chart:\n[image image/png, 16 bytes]\n[resource file:///reports/q3.pdf (q3.pdf)]\nembedded note");
    assert.equal(seen.broken.isError, true);
    assert.match(seen.broken.content, /^McpError: MCP error -32603: the broken tool's database is gone$/);

    const serverTimeout = model.calls[2].messages.at(-1);
    assert.deepEqual([serverTimeout.isError, serverTimeout.content], [true, "McpError: MCP error -32001: Request timed out"]);
    const serverClosed = model.calls[3].messages.at(-1);
    assert.deepEqual([serverClosed.isError, serverClosed.content], [true, "McpError: MCP error -32000: Connection closed"]);

    // The wrong argument never reached the server: the core checked it against the server's schema.
    const wrong = model.calls[4].messages.at(-1);
    assert.equal(wrong.kind, "validation");
    assert.equal(wrong.isError, true);
    const calls = records(dir, "calls.jsonl");
    assert.deepEqual(
      calls.map((c) => c.tool).sort(),
      ["add", "mixed", "reserve", "stock"],
      "one call each; `broken` fails before its tool, the invalid `add` is not sent",
    );
    assert.deepEqual(calls.find((c) => c.tool === "add").args, { a: 2, b: 3 });
  } finally {
    await tools.close();
    await server.kill();
  }
});

test("each call carries the call's idempotency key, run id and call id in _meta, and the configured headers", async () => {
  const dir = recordDir();
  const server = await startServer({ dir });
  const tools = await mcpTools({ url: server.url, headers: { Authorization: "Bearer s3cret" }, prefix: "shop_" });
  try {
    assert.deepEqual(tools.map((t) => t.name).slice(0, 2), ["shop_add", "shop_stock"]);
    const model = mockModel([{ toolCalls: [{ name: "shop_whoami" }, { name: "shop_add", args: { a: 1, b: 1 } }] }, "done"]);
    const agent = createAgent({ model, tools, store: memoryStore() });
    await agent.send("go", { sessionId: "mcp-meta" });
    assert.equal(toolMessages(model.calls[1]).shop_whoami.content, "authorization: Bearer s3cret");

    const calls = records(dir, "calls.jsonl");
    assert.equal(calls.length, 2);
    for (const c of calls) {
      assert.equal(c.authorization, "Bearer s3cret");
      assert.match(c.meta.idempotencyKey, /^[0-9a-f]{32}$/);
      assert.equal(c.meta["steadfast/runId"], "mcp-meta");
      assert.match(c.meta["steadfast/toolCallId"], /^call_0_[01]$/);
    }
    assert.notEqual(calls[0].meta.idempotencyKey, calls[1].meta.idempotencyKey);
  } finally {
    await tools.close();
    await server.kill();
  }
});

/** A local tool that kills the MCP server (kill -9) when called: the server goes down between two steps. */
const pullPlug = (server) =>
  defineTool({
    name: "pull_plug",
    description: "Stops the MCP server",
    execute: async () => {
      await server.kill();
      return "unplugged";
    },
  });

test("a server killed after a charge's effect and before its answer: the run rejects retryable and stays resumable; restarted, a fresh agent's resume re-sends the call with the same idempotency key — one charge, and the recorded turn is not asked again", { timeout: 120_000 }, async () => {
  const dir = recordDir();
  const server = await startServer({ dir, dieAtCharge: 1 });
  const script = [{ toolCalls: [{ name: "charge", args: { order: 7 } }] }, "Charged order 7."];
  const store = memoryStore();
  // A long timeout: the cut answer stream itself fails the call (Connection closed), not the timer.
  const first = await mcpTools({ url: server.url, timeoutMs: 600_000 });
  const model = mockModel(script, { mode: "by-turn" });
  const agent = createAgent({ model, tools: first, store });
  await assert.rejects(agent.send("Charge order 7", { sessionId: "order-7" }), (e) => {
    assert.ok(e instanceof SteadfastError);
    assert.equal(e.code, "STEADFAST_TOOL_PROPAGATED");
    assert.equal(e.retryable, true);
    // The answer stream cut (Connection closed: the connection was dropped at once, not left to time out), or,
    // when the server died before its answer's headers went out, the POST itself failed.
    assert.match(e.message, /the MCP server at http:\/\/127\.0\.0\.1:\d+\/mcp failed during the call of 'charge': (MCP error -32000: Connection closed|fetch failed)/);
    return true;
  });
  await server.exited;
  await first.close();
  assert.equal((await agent.load("order-7")).status, "in-progress");
  assert.deepEqual((await agent.pending()).map((r) => r.runId), ["order-7"]);
  assert.equal(records(dir, "charges.jsonl").length, 1, "the effect happened before the server died");

  const again = await startServer({ dir, port: server.port, dieAtCharge: 1 });
  const tools = await mcpTools({ url: again.url });
  try {
    const fresh = mockModel(script, { mode: "by-turn" });
    const resumed = createAgent({ model: fresh, tools, store });
    const r = await resumed.resume("order-7");
    assert.equal(r.status, "finished");
    assert.equal(r.text, "Charged order 7.");
    assert.equal(fresh.calls.length, 1, "only the turn after the call is asked; the recorded tool-call turn is not");
    const calls = records(dir, "calls.jsonl").filter((c) => c.tool === "charge");
    assert.equal(calls.length, 2, "the call was sent again on resume");
    assert.equal(calls[0].meta.idempotencyKey, calls[1].meta.idempotencyKey, "with the same idempotency key");
    assert.deepEqual(records(dir, "charges.jsonl").map((c) => c.order), [7], "one charge");
    assert.equal(toolMessagesOf(r, await resumed.load("order-7")).charge.content, "charged order 7 (ch_1)");
  } finally {
    await tools.close();
    await again.kill();
  }
});

/** The tool results of a stored run, by tool name (the last of each). */
function toolMessagesOf(_result, checkpoint) {
  return Object.fromEntries(checkpoint.messages.filter((m) => m.role === "tool").map((m) => [m.name, m]));
}

test("a server down mid-run: the run rejects retryable and stays resumable; restarted on the same port, the recovery sweep finishes it through the same mcpTools (a new connection), each charge once", async () => {
  const dir = recordDir();
  const server = await startServer({ dir });
  const tools = await mcpTools({ url: server.url });
  try {
    const model = mockModel(
      [
        { toolCalls: [{ name: "charge", args: { order: 1 } }] },
        { toolCalls: [{ name: "pull_plug" }] },
        { toolCalls: [{ name: "charge", args: { order: 2 } }] },
        "Both charged.",
      ],
      { mode: "by-turn" },
    );
    const agent = createAgent({ model, tools: [...tools, pullPlug(server)], store: memoryStore() });
    await assert.rejects(agent.send("Charge orders 1 and 2", { sessionId: "orders" }), (e) => {
      assert.equal(e.code, "STEADFAST_TOOL_PROPAGATED");
      assert.equal(e.retryable, true);
      assert.match(e.message, /the MCP server at http:\/\/127\.0\.0\.1:\d+\/mcp (cannot be reached|failed during the call of 'charge')/);
      return true;
    });
    assert.equal((await agent.load("orders")).status, "in-progress");

    // Still down: the sweep's attempt fails the same way and the run stays pending.
    const down = await agent.sweep({ intervalMs: 0 });
    assert.deepEqual(down.recovered, []);
    assert.deepEqual((await agent.pending()).map((r) => r.runId), ["orders"]);

    const again = await startServer({ dir, port: server.port });
    try {
      const report = await agent.sweep({ intervalMs: 0, maxBackoffMs: 0 });
      assert.deepEqual(report.recovered, ["orders"], JSON.stringify(report));
      const cp = await agent.load("orders");
      assert.equal(cp.status, "finished");
      assert.deepEqual(records(dir, "charges.jsonl").map((c) => c.order), [1, 2], "each charge once");
    } finally {
      await again.kill();
    }
  } finally {
    await tools.close();
  }
});

test("a server that restarted and forgot the session (no standalone stream to notice it by): the next call reconnects and is sent again at once, and the run finishes", async () => {
  const dir = recordDir();
  const server = await startServer({ dir, noGetStream: true });
  const tools = await mcpTools({ url: server.url });
  try {
    const model = mockModel(
      [
        { toolCalls: [{ name: "add", args: { a: 1, b: 2 } }] },
        { toolCalls: [{ name: "pull_plug" }] },
        { toolCalls: [{ name: "add", args: { a: 3, b: 4 } }] },
        "7",
      ],
      { mode: "by-turn" },
    );
    let again;
    const restart = defineTool({
      name: "pull_plug",
      description: "Restarts the MCP server",
      execute: async () => {
        await server.kill();
        again = await startServer({ dir, port: server.port, noGetStream: true });
        return "restarted";
      },
    });
    const agent = createAgent({ model, tools: [...tools, restart], store: memoryStore() });
    try {
      const r = await agent.send("add", { sessionId: "adds" });
      assert.equal(r.status, "finished");
      assert.equal(model.calls[3].messages.at(-1).content, "7");
      assert.deepEqual(records(dir, "calls.jsonl").map((c) => c.args), [{ a: 1, b: 2 }, { a: 3, b: 4 }]);
    } finally {
      await again?.kill();
    }
  } finally {
    await tools.close();
  }
});

test("a server whose tool schema changed is agent drift: resuming after it refuses with STEADFAST_AGENT_DRIFT under onAgentDrift 'error' (the run kept as it was) and finishes with an agent.drift event naming the tool under 'warn'", async () => {
  const dir = recordDir();
  const server = await startServer({ dir, version: 1 });
  const store = memoryStore();
  const script = [{ toolCalls: [{ name: "add", args: { a: 1, b: 2 } }] }, { toolCalls: [{ name: "ship" }] }, "Shipped."];
  let failed = false;
  const ship = defineTool({
    name: "ship",
    description: "Ship",
    execute: () => {
      if (failed) return "shipped";
      failed = true;
      throw new PropagatedToolError("the warehouse API is down");
    },
  });
  const v1 = await mcpTools({ url: server.url });
  const agent = createAgent({ model: mockModel(script, { mode: "by-turn" }), tools: [...v1, ship], store });
  await assert.rejects(agent.send("Add and ship", { sessionId: "drift" }), { code: "STEADFAST_TOOL_PROPAGATED" });
  await v1.close();
  await server.kill();

  const changed = await startServer({ dir, version: 2 });
  const v2 = await mcpTools({ url: changed.url });
  try {
    assert.ok(v2.find((t) => t.name === "add").inputSchema.properties.note, "the server's new schema");
    const before = await agent.load("drift");
    const strict = createAgent({ model: mockModel(script, { mode: "by-turn" }), tools: [...v2, ship], store, onAgentDrift: "error" });
    assert.notEqual(strict.fingerprint.tools.add, agent.fingerprint.tools.add);
    assert.equal(strict.fingerprint.tools.stock, agent.fingerprint.tools.stock);
    await assert.rejects(strict.resume("drift"), (e) => {
      assert.equal(e.code, "STEADFAST_AGENT_DRIFT");
      assert.match(e.message, /add/);
      return true;
    });
    assert.deepEqual(await strict.load("drift"), before, "the stored run is as it was");

    const lenient = createAgent({ model: mockModel(script, { mode: "by-turn" }), tools: [...v2, ship], store, onAgentDrift: "warn" });
    const events = [];
    const warn = console.warn;
    console.warn = () => undefined;
    let r;
    try {
      r = await lenient.resume("drift", { onEvent: (e) => events.push(e) });
    } finally {
      console.warn = warn;
    }
    assert.equal(r.status, "finished");
    assert.deepEqual(events.filter((e) => e.type === "agent.drift").map((e) => e.toolsChanged), [["add"]]);
  } finally {
    await v2.close();
    await changed.kill();
  }
});

test("the same server's tools unchanged are no drift: a second mcpTools of it gives the agent the same fingerprint", async () => {
  const server = await startServer({ dir: recordDir() });
  const a = await mcpTools({ url: server.url });
  const b = await mcpTools({ url: server.url, headers: { Authorization: "Bearer other" } });
  try {
    const fp = (tools) => createAgent({ model: mockModel(["ok"]), tools, store: memoryStore() }).fingerprint;
    assert.deepEqual(fp(a), fp(b));
  } finally {
    await a.close();
    await b.close();
    await server.kill();
  }
});

/** Asserts `p` rejects with STEADFAST_CONFIG_INVALID whose message matches `message`; returns the error. */
async function refused(p, message) {
  let error;
  await assert.rejects(p, (e) => {
    assert.ok(e instanceof SteadfastError, `a SteadfastError: ${e}`);
    assert.equal(e.code, "STEADFAST_CONFIG_INVALID");
    assert.match(e.message, message);
    error = e;
    return true;
  });
  return error;
}

test("wrong options are refused with STEADFAST_CONFIG_INVALID naming what is wrong, before any connection", async () => {
  const url = "http://127.0.0.1:9/mcp";
  await refused(mcpTools(), /needs an options object/);
  await refused(mcpTools(null), /needs an options object/);
  await refused(mcpTools(url), /needs an options object/);
  await refused(mcpTools({ url, header: { Authorization: "x" } }), /unknown option 'header' \(the options are url, headers, prefix, tools, timeoutMs\)/);
  await refused(mcpTools({ url, timeout: 5 }), /unknown option 'timeout'/);
  await refused(mcpTools({}), /url must be an http: or https: URL string, not undefined/);
  await refused(mcpTools({ url: 42 }), /url must be an http: or https: URL string, not number 42/);
  await refused(mcpTools({ url: "not a url" }), /url must be an http: or https: URL string, not "not a url"/);
  await refused(mcpTools({ url: "ftp://127.0.0.1/mcp" }), /url must be an http: or https: URL, not ftp: \(ftp:\/\/127\.0\.0\.1\/mcp\)/);
  await refused(mcpTools({ url: "ws://user:pw@127.0.0.1/mcp?token=t" }), /not ws: \(ws:\/\/127\.0\.0\.1\/mcp\)$/);
  await refused(mcpTools({ url, headers: "Authorization: x" }), /headers must be a plain object .* not "Authorization: x"/);
  await refused(mcpTools({ url, headers: [["Authorization", "x"]] }), /headers must be a plain object .* not an array/);
  await refused(mcpTools({ url, headers: null }), /headers must be a plain object .* not null/);
  await refused(mcpTools({ url, headers: new Map([["a", "b"]]) }), /headers must be a plain object .* not an object/);
  await refused(mcpTools({ url, headers: { "X-Retries": 3 } }), /header 'X-Retries' must be a string, not number 3/);
  await refused(mcpTools({ url, headers: { Authorization: undefined } }), /header 'Authorization' must be a string, not undefined/);
  await refused(mcpTools({ url, headers: { "bad name": "x" } }), /header 'bad name' is not a valid HTTP header/);
  await refused(mcpTools({ url, headers: { "X-A": "line\nbreak" } }), /header 'X-A' is not a valid HTTP header/);
  await refused(mcpTools({ url, prefix: 3 }), /prefix must be a string, not number 3/);
  await refused(mcpTools({ url, tools: "add" }), /tools must be an array of tool names or a function/);
  await refused(mcpTools({ url, tools: ["add", 1] }), /tools must be an array of tool names or a function/);
  for (const timeoutMs of [0, -1, Number.NaN, Infinity, "1000"]) {
    await refused(mcpTools({ url, timeoutMs }), /timeoutMs must be a positive number of milliseconds/);
  }
});

test("a server whose tools cannot be listed is refused: unreachable (retryable) or refusing us (not retryable), the url shown without credentials", async () => {
  // A port nothing listens on: a server that is started and closed again.
  const closed = createServer();
  await new Promise((resolve) => closed.listen(0, "127.0.0.1", resolve));
  const port = closed.address().port;
  await new Promise((resolve) => closed.close(resolve));
  const down = await refused(
    mcpTools({ url: `http://127.0.0.1:${port}/mcp?key=secret` }),
    new RegExp(`cannot list the tools of the MCP server at http://127\\.0\\.0\\.1:${port}/mcp: `),
  );
  assert.equal(down.retryable, true);
  assert.doesNotMatch(down.message, /secret/);

  // An HTTP server that is not an MCP server: 401, then a 500.
  const statuses = [];
  const http = createServer((req, res) => {
    const status = statuses.shift();
    res.writeHead(status, { "content-type": "text/plain" }).end(`status ${status}`);
  });
  await new Promise((resolve) => http.listen(0, "127.0.0.1", resolve));
  try {
    const url = `http://127.0.0.1:${http.address().port}/mcp`;
    statuses.push(401);
    const unauthorized = await refused(mcpTools({ url }), /cannot list the tools .* Streamable HTTP error: Error POSTing to endpoint: status 401/);
    assert.equal(unauthorized.retryable, false);
    statuses.push(503);
    const unavailable = await refused(mcpTools({ url }), /cannot list the tools .*status 503/);
    assert.equal(unavailable.retryable, true);
  } finally {
    await new Promise((resolve) => http.close(resolve));
  }
});

test("the tools filter: a list picks tools by the server's names (a name the server lacks is refused), a predicate filters", async () => {
  const server = await startServer({ dir: recordDir() });
  try {
    const picked = await mcpTools({ url: server.url, tools: ["charge", "add"], prefix: "s_" });
    assert.deepEqual(picked.map((t) => t.name), ["s_add", "s_charge"]);
    await picked.close();
    const filtered = await mcpTools({ url: server.url, tools: (name) => name.startsWith("s") });
    assert.deepEqual(filtered.map((t) => t.name), ["stock"]);
    await filtered.close();
    await refused(
      mcpTools({ url: server.url, tools: ["add", "refund", "ad"] }),
      /the MCP server at http:\/\/127\.0\.0\.1:\d+\/mcp has no tool 'refund', 'ad' \(it has 'add', 'stock', 'reserve', 'whoami', 'mixed', 'broken', 'charge'\)/,
    );
  } finally {
    await server.kill();
  }
});

test("tool names: a server tool named like another tool of the agent is refused by createAgent (STEADFAST_CONFIG_INVALID), and a prefix resolves it; a prefix that makes a name invalid is refused too", async () => {
  const server = await startServer({ dir: recordDir() });
  const a = await mcpTools({ url: server.url });
  const b = await mcpTools({ url: server.url, prefix: "b_" });
  const bad = await mcpTools({ url: server.url, prefix: "my shop." });
  try {
    const mine = defineTool({ name: "add", description: "my own add", execute: () => "0" });
    const agent = (tools) => createAgent({ model: mockModel(["ok"]), tools, store: memoryStore() });
    assert.throws(() => agent([mine, ...a]), { code: "STEADFAST_CONFIG_INVALID", message: /two tools are named 'add'/ });
    assert.throws(() => agent([...a, ...a]), { code: "STEADFAST_CONFIG_INVALID", message: /two tools are named 'add'/ });
    const both = Object.keys(agent([mine, ...a.filter((t) => t.name !== "add"), ...b]).fingerprint.tools);
    assert.equal(both.length, 14);
    assert.ok(both.includes("add") && both.includes("b_add"));
    assert.throws(() => agent(bad), { code: "STEADFAST_CONFIG_INVALID", message: /tool name "my shop\.add" must be 1-64 characters/ });
  } finally {
    await a.close();
    await b.close();
    await bad.close();
    await server.kill();
  }
});

test("a server that refuses a call over HTTP (403): the run rejects not retryable and the sweep leaves it for a person", async () => {
  const dir = recordDir();
  const server = await startServer({ dir, refuseCalls: 403 });
  const tools = await mcpTools({ url: server.url });
  try {
    const model = mockModel([{ toolCalls: [{ name: "charge", args: { order: 5 } }] }, "done"], { mode: "by-turn" });
    const agent = createAgent({ model, tools, store: memoryStore() });
    await assert.rejects(agent.send("Charge order 5", { sessionId: "forbidden" }), (e) => {
      assert.equal(e.code, "STEADFAST_TOOL_PROPAGATED");
      assert.equal(e.retryable, false);
      assert.match(e.message, /the MCP server at http:\/\/127\.0\.0\.1:\d+\/mcp refused the call of 'charge': Streamable HTTP error: Error POSTing to endpoint: forbidden/);
      return true;
    });
    const report = await agent.sweep({ intervalMs: 0 });
    assert.equal(report.resumed, 0, JSON.stringify(report));
    assert.deepEqual((await agent.pending()).map((r) => r.runId), ["forbidden"]);
    assert.deepEqual(records(dir, "charges.jsonl"), []);
  } finally {
    await tools.close();
    await server.kill();
  }
});


// Repro one case: STEADFAST_SEED=<seed> node --test --test-name-pattern="generated" test/mcp.test.mjs
test("generated: charges over turns of one or two parallel calls, the server killed after the k-th charge's effect; restarted, a fresh agent's resume finishes with each charge once, re-sent calls keep their keys, and only the turns after the interrupted one are asked", async () => {
  const only = process.env.STEADFAST_SEED;
  const seeds = only === undefined ? Array.from({ length: 6 }, (_, i) => i + 1) : [Number(only)];
  for (const seed of seeds) {
    const r = rng(seed);
    const pick = (n) => Math.floor(r() * n);
    const turns = [];
    let order = 0;
    for (let t = 1 + pick(3); t > 0; t--) turns.push(Array.from({ length: 1 + pick(2) }, () => ++order));
    const dieAt = 1 + pick(order);
    const script = [...turns.map((orders) => ({ toolCalls: orders.map((o) => ({ name: "charge", args: { order: o } })) })), "done"];
    const at = `seed ${seed}: turns ${JSON.stringify(turns)}, the server dies at charge ${dieAt}`;

    const dir = recordDir();
    const server = await startServer({ dir, dieAtCharge: dieAt });
    const store = memoryStore();
    const first = await mcpTools({ url: server.url });
    const agent = createAgent({ model: mockModel(script, { mode: "by-turn" }), tools: first, store });
    await assert.rejects(agent.send("charge", { sessionId: "gen" }), (e) => e.code === "STEADFAST_TOOL_PROPAGATED" && e.retryable === true, at);
    await first.close();
    await server.exited;
    // The turn whose call died: charges are made in order, one turn after another.
    const interrupted = turns.findIndex((orders) => orders.includes(records(dir, "charges.jsonl").at(-1).order));

    const again = await startServer({ dir, port: server.port });
    const tools = await mcpTools({ url: again.url });
    try {
      const fresh = mockModel(script, { mode: "by-turn" });
      const result = await createAgent({ model: fresh, tools, store }).resume("gen");
      assert.equal(result.status, "finished", at);
      assert.equal(fresh.calls.length, turns.length - interrupted, `${at}: only the turns after turn ${interrupted} are asked`);
      const charged = records(dir, "charges.jsonl").map((c) => c.order).sort((a, b) => a - b);
      assert.deepEqual(charged, turns.flat(), `${at}: each charge once`);
      const keys = new Map();
      for (const c of records(dir, "calls.jsonl")) {
        const seen = keys.get(c.args.order);
        if (seen !== undefined) assert.equal(c.meta.idempotencyKey, seen, `${at}: order ${c.args.order} re-sent with its key`);
        keys.set(c.args.order, c.meta.idempotencyKey);
      }
      assert.equal(new Set(keys.values()).size, order, `${at}: one key per charge`);
    } finally {
      await tools.close();
      await again.kill();
    }
  }
});

test("where code cannot be generated from strings (as on Cloudflare Workers), a server with an outputSchema is still listed and called (the SDK's ajv check of structured output is left out)", async () => {
  const server = await startServer({ dir: recordDir() });
  try {
    const script = `
      import { mcpTools } from "steadfast/mcp";
      const tools = await mcpTools({ url: ${JSON.stringify(server.url)} });
      const ctx = { runId: "r", toolCallId: "c", approvalId: null, idempotencyKey: "k" };
      const out = await tools.find((t) => t.name === "stock").execute({ sku: "B2" }, ctx);
      await tools.close();
      let evalWorks = true;
      try { eval("1"); } catch { evalWorks = false; }
      process.stdout.write(JSON.stringify({ out, evalWorks }));
    `;
    const child = spawn(process.execPath, ["--disallow-code-generation-from-strings", "--input-type=module", "-e", script], {
      cwd: fileURLToPath(new URL("..", import.meta.url)),
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    let err = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (err += d));
    const code = await new Promise((resolve) => child.once("exit", resolve));
    assert.equal(code, 0, err);
    assert.deepEqual(JSON.parse(out), { out: { sku: "B2", available: 3 }, evalWorks: false });
  } finally {
    await server.kill();
  }
});

test("the connection: one session shared by the tools; close() ends it (DELETE) and is idempotent; a call after close() opens a new session", async () => {
  const dir = recordDir();
  const server = await startServer({ dir });
  const tools = await mcpTools({ url: server.url });
  try {
    const ctx = (n) => ({ runId: "r", toolCallId: `c${n}`, approvalId: null, idempotencyKey: `k${n}` });
    const add = tools.find((t) => t.name === "add");
    assert.equal(await add.execute({ a: 1, b: 1 }, ctx(1)), "2");
    assert.deepEqual(await tools.find((t) => t.name === "stock").execute({ sku: "Z" }, ctx(2)), { sku: "Z", available: 3 });
    const sessions = () => records(dir, "sessions.jsonl");
    assert.equal(sessions().length, 1, "one session for the listing and both calls");
    const [{ opened }] = sessions();
    await tools.close();
    await tools.close();
    assert.deepEqual(sessions(), [{ opened }, { closed: opened }]);

    assert.equal(await add.execute({ a: 2, b: 2 }, ctx(3)), "4");
    assert.equal(sessions().length, 3);
    assert.notEqual(sessions()[2].opened, opened);
  } finally {
    await tools.close();
    await server.kill();
  }
});

test("a call that outlives timeoutMs fails retryable (the run stays resumable) while the server finishes it; the resume re-sends it with the same key and the effect stays single", async () => {
  const dir = recordDir();
  const server = await startServer({ dir, callDelayMs: 1_500 });
  const store = memoryStore();
  const script = [{ toolCalls: [{ name: "charge", args: { order: 9 } }] }, "Charged."];
  const hasty = await mcpTools({ url: server.url, timeoutMs: 300 });
  try {
    const agent = createAgent({ model: mockModel(script, { mode: "by-turn" }), tools: hasty, store });
    await assert.rejects(agent.send("Charge order 9", { sessionId: "slow" }), (e) => {
      assert.equal(e.code, "STEADFAST_TOOL_PROPAGATED");
      assert.equal(e.retryable, true);
      assert.match(e.message, /failed during the call of 'charge': MCP error -32001: Request timed out/);
      return true;
    });
    // The server finishes the call it was sent (its effect happens), after the client gave up on it.
    while (records(dir, "charges.jsonl").length === 0) await new Promise((resolve) => setTimeout(resolve, 20));
    const patient = await mcpTools({ url: server.url, timeoutMs: 30_000 });
    try {
      const r = await createAgent({ model: mockModel(script, { mode: "by-turn" }), tools: patient, store }).resume("slow");
      assert.equal(r.status, "finished");
    } finally {
      await patient.close();
    }
    const calls = records(dir, "calls.jsonl");
    assert.equal(calls.length, 2);
    assert.equal(calls[0].meta.idempotencyKey, calls[1].meta.idempotencyKey);
    assert.deepEqual(records(dir, "charges.jsonl").map((c) => c.order), [9]);
  } finally {
    await hasty.close();
    await server.kill();
  }
});

test("what a server lists that cannot be a steadfast tool is refused: a task-only tool by mcpTools (leave it out with `tools`), two tools of one name and a name with a dot by createAgent", async () => {
  const object = { type: "object", properties: {} };
  const server = await startServer({
    dir: recordDir(),
    extraTools: [
      { name: "export_all", description: "A long export", inputSchema: object, execution: { taskSupport: "required" } },
      { name: "add", inputSchema: object },
      { name: "files.read", inputSchema: object },
    ],
  });
  try {
    await refused(
      mcpTools({ url: server.url }),
      /the MCP server at http:\/\/127\.0\.0\.1:\d+\/mcp's tool 'export_all' runs only as an MCP task, which steadfast does not call: leave it out with the `tools` option/,
    );
    const listed = await mcpTools({ url: server.url, tools: (name) => name !== "export_all" });
    try {
      assert.deepEqual(listed.slice(-2).map((t) => [t.name, t.description]), [["add", ""], ["files.read", ""]]);
      const agent = (tools) => createAgent({ model: mockModel(["ok"]), tools, store: memoryStore() });
      assert.throws(() => agent(listed), { code: "STEADFAST_CONFIG_INVALID", message: /two tools are named 'add'/ });
      assert.throws(() => agent(listed.slice(0, -2).concat(listed.slice(-1))), {
        code: "STEADFAST_CONFIG_INVALID",
        message: /tool name "files\.read" must be 1-64 characters of letters, digits, '_' or '-'/,
      });
    } finally {
      await listed.close();
    }
  } finally {
    await server.kill();
  }
});

test("a run aborted while an MCP call is on the server resolves in-progress (aborted); the call gets a cancelled result the resumed model reads, and is not sent again (the server's effect stays single)", async () => {
  const dir = recordDir();
  const server = await startServer({ dir, callDelayMs: 1_500 });
  const tools = await mcpTools({ url: server.url });
  try {
    const script = [{ toolCalls: [{ name: "charge", args: { order: 4 } }] }, "Charged."];
    const store = memoryStore();
    const controller = new AbortController();
    const agent = createAgent({ model: mockModel(script, { mode: "by-turn" }), tools, store });
    const r = await agent.send("Charge order 4", {
      sessionId: "aborted",
      signal: controller.signal,
      // Aborted once the server has the call (and waits before running it).
      onEvent: (e) => {
        if (e.type !== "tool.start") return;
        void (async () => {
          while (records(dir, "received.jsonl").length === 0) await new Promise((resolve) => setTimeout(resolve, 10));
          controller.abort();
        })();
      },
    });
    assert.equal(r.status, "in-progress");
    assert.equal(r.finishReason, "aborted");
    while (records(dir, "charges.jsonl").length === 0) await new Promise((resolve) => setTimeout(resolve, 20));

    const fresh = mockModel(script, { mode: "by-turn" });
    const resumed = await createAgent({ model: fresh, tools, store }).resume("aborted");
    assert.equal(resumed.status, "finished");
    const read = fresh.calls[0].messages.at(-1);
    assert.deepEqual([read.name, read.kind, read.isError], ["charge", "cancelled", true]);
    assert.equal(records(dir, "calls.jsonl").length, 1, "not sent again");
    assert.deepEqual(records(dir, "charges.jsonl").map((c) => c.order), [4]);
  } finally {
    await tools.close();
    await server.kill();
  }
});
