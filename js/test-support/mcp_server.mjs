// A real MCP server for js/test/mcp.test.mjs, built with the official SDK (`McpServer` + the Streamable HTTP
// transport, stateful: one session per client) on node:http, bound to 127.0.0.1. Run as a child process so a test
// can kill -9 it and start it again on the same port:
//
//   node test-support/mcp_server.mjs '{"dir": "/tmp/x", "port": 0, "version": 1, "pageSize": 2, "dieAtCharge": 1}'
//
// It prints `listening <port>` once it listens. Everything it sees is appended to files in `dir`, which outlive
// the process: `sessions.jsonl` (`{opened}`/`{closed}`: a session began, a client ended it with DELETE), `calls.jsonl`
// (one line per tools/call: tool, arguments, `_meta`, the Authorization header) and
// `charges.jsonl` (one line per charge effect, keyed by the idempotency key in `_meta`: a charge whose key is
// there already is answered from it without a new effect). `dieAtCharge: k`: the k-th charge effect (counted in
// charges.jsonl, so across restarts) kills the process after the effect is written and before it answers, once
// (a marker file). `version: 2` adds an optional `note` to `add`'s schema (a changed server). `pageSize`:
// tools/list answers in pages of that many tools. `noGetStream`: GET is answered 405 (no standalone stream).
// `refuseCalls: <status>`: every tools/call is answered with that HTTP status (e.g. 403: the token lost a right).
// `callDelayMs`: the first tools/call waits that long before it runs (a slow moment of the server), noted in
// `received.jsonl` as it arrives.
// `extraTools`: tool definitions listed after the real ones as they are (a server listing what it should not).
import { createServer } from "node:http";
import { randomUUID } from "node:crypto";
import { appendFileSync, existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import * as z from "zod";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { CallToolRequestSchema, ErrorCode, isInitializeRequest, ListToolsRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const options = JSON.parse(process.argv[2] ?? "{}");
const { dir, port = 0, version = 1, pageSize, dieAtCharge, noGetStream = false, refuseCalls, callDelayMs = 0, extraTools = [] } = options;
const calls = join(dir, "calls.jsonl");
const charges = join(dir, "charges.jsonl");
let delayed = false;
const lines = (file) => (existsSync(file) ? readFileSync(file, "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l)) : []);

/** A new McpServer with the test's tools (one per session). */
function mcpServer() {
  const server = new McpServer({ name: "steadfast-test-server", version: "1.0.0" });
  const seen = (tool) => (args, extra) => {
    appendFileSync(
      calls,
      JSON.stringify({ tool, args, meta: extra._meta ?? null, authorization: extra.requestInfo?.headers?.authorization ?? null }) + "\n",
    );
  };
  server.registerTool(
    "add",
    {
      description: "Add two numbers",
      inputSchema: version === 2 ? { a: z.number(), b: z.number(), note: z.string().optional() } : { a: z.number(), b: z.number() },
    },
    async (args, extra) => {
      seen("add")(args, extra);
      return { content: [{ type: "text", text: String(args.a + args.b) }] };
    },
  );
  server.registerTool(
    "stock",
    {
      description: "Stock of a product",
      inputSchema: { sku: z.string() },
      outputSchema: { sku: z.string(), available: z.number() },
    },
    async (args, extra) => {
      seen("stock")(args, extra);
      const structured = { sku: args.sku, available: 3 };
      return { content: [{ type: "text", text: JSON.stringify(structured) }], structuredContent: structured };
    },
  );
  server.registerTool("reserve", { description: "Reserve a product", inputSchema: { sku: z.string() } }, async (args, extra) => {
    seen("reserve")(args, extra);
    return { content: [{ type: "text", text: `${args.sku} is out of stock` }], isError: true };
  });
  server.registerTool("whoami", { description: "The caller's credentials" }, async (extra) => {
    seen("whoami")({}, extra);
    return { content: [{ type: "text", text: `authorization: ${extra.requestInfo?.headers?.authorization ?? "none"}` }] };
  });
  server.registerTool("mixed", { description: "Text, an image and a link" }, async (extra) => {
    seen("mixed")({}, extra);
    return {
      content: [
        { type: "text", text: "a chart:" },
        { type: "image", data: Buffer.from("not really a png").toString("base64"), mimeType: "image/png" },
        { type: "resource_link", uri: "file:///reports/q3.pdf", name: "q3.pdf" },
        { type: "resource", resource: { uri: "file:///notes.txt", mimeType: "text/plain", text: "embedded note" } },
      ],
    };
  });
  // Answers a JSON-RPC error: arguments `{code?, message?}` (default -32603 and a message), see below.
  server.registerTool("broken", { description: "Answers with a JSON-RPC error" }, async () => ({ content: [] }));
  server.registerTool(
    "charge",
    { description: "Charge an order (once per idempotency key)", inputSchema: { order: z.number() } },
    async (args, extra) => {
      seen("charge")(args, extra);
      const key = extra._meta?.idempotencyKey;
      const done = lines(charges).find((c) => c.key === key);
      if (done) return { content: [{ type: "text", text: `charged order ${done.order} (${done.id})` }] };
      const id = `ch_${lines(charges).length + 1}`;
      appendFileSync(charges, JSON.stringify({ key, order: args.order, id }) + "\n");
      const marker = join(dir, "died");
      if (lines(charges).length === dieAtCharge && !existsSync(marker)) {
        writeFileSync(marker, "");
        // Mostly after the answer stream's headers went out (the client then sees the stream cut), sometimes
        // before (the client's POST fails): both are a server that died mid-call.
        await new Promise((resolve) => setTimeout(resolve, 50));
        process.kill(process.pid, "SIGKILL");
        await new Promise(() => {});
      }
      return { content: [{ type: "text", text: `charged order ${args.order} (${id})` }] };
    },
  );
  // The SDK's McpServer answers a failing tool with an `isError` result; a JSON-RPC error answer needs its own
  // handler: `broken` answers one, every other call goes to McpServer's handler.
  const toolsCall = server.server._requestHandlers.get("tools/call");
  server.server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
    if (callDelayMs > 0 && !delayed) {
      delayed = true;
      appendFileSync(join(dir, "received.jsonl"), JSON.stringify({ tool: request.params.name }) + "\n");
      await new Promise((resolve) => setTimeout(resolve, callDelayMs));
    }
    // Thrown with a code, answered as the JSON-RPC error {code, message} (an McpError's message has a prefix).
    if (request.params.name === "broken") {
      const code = request.params.arguments?.code ?? ErrorCode.InternalError;
      throw Object.assign(new Error(request.params.arguments?.message ?? "the broken tool's database is gone"), { code });
    }
    return toolsCall(request, extra);
  });
  if (pageSize !== undefined || extraTools.length > 0) {
    const toolsList = server.server._requestHandlers.get("tools/list");
    server.server.setRequestHandler(ListToolsRequestSchema, async (request, extra) => {
      const tools = [...(await toolsList(request, extra)).tools, ...extraTools];
      if (pageSize === undefined) return { tools };
      const start = Number(request.params?.cursor ?? 0);
      const page = tools.slice(start, start + pageSize);
      return start + pageSize < tools.length ? { tools: page, nextCursor: String(start + pageSize) } : { tools: page };
    });
  }
  return server;
}

const sessions = new Map();
const http = createServer(async (req, res) => {
  const chunks = [];
  for await (const c of req) chunks.push(c);
  const body = chunks.length > 0 ? JSON.parse(Buffer.concat(chunks).toString("utf8")) : undefined;
  if (noGetStream && req.method === "GET") {
    res.writeHead(405).end();
    return;
  }
  if (refuseCalls !== undefined && body?.method === "tools/call") {
    res.writeHead(refuseCalls, { "content-type": "text/plain" }).end("forbidden");
    return;
  }
  const id = req.headers["mcp-session-id"];
  let transport = typeof id === "string" ? sessions.get(id) : undefined;
  if (transport === undefined) {
    if (id !== undefined || req.method !== "POST" || !isInitializeRequest(body)) {
      res.writeHead(id !== undefined ? 404 : 400, { "content-type": "application/json" });
      res.end(JSON.stringify({ jsonrpc: "2.0", error: { code: -32001, message: "Session not found" }, id: null }));
      return;
    }
    transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (sid) => {
        sessions.set(sid, transport);
        appendFileSync(join(dir, "sessions.jsonl"), JSON.stringify({ opened: sid }) + "\n");
      },
      onsessionclosed: (sid) => {
        sessions.delete(sid);
        appendFileSync(join(dir, "sessions.jsonl"), JSON.stringify({ closed: sid }) + "\n");
      },
    });
    await mcpServer().connect(transport);
  }
  await transport.handleRequest(req, res, body);
});
http.listen(port, "127.0.0.1", () => {
  process.stdout.write(`listening ${http.address().port}\n`);
});
