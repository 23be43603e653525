// A real MCP server for the workerd tests, built with the official SDK (`McpServer` + the Streamable HTTP
// transport, @modelcontextprotocol/sdk 1.32.2, a root devDependency) on node:http at 127.0.0.1, one transport per
// session. Run as its own process so a test can stop it by its pid (a server that is down) and start it again on
// the same port (which then knows none of the old sessions).
//
//   node tests/workerd/support/mcp-server.mjs [port] [--json]
//
// Prints `{"port": N}` once listening. `--json` answers with JSON bodies instead of event streams. Tools: `add`
// (text), `stock` (structuredContent with an outputSchema), `refuse` (isError: true). `GET /seen` answers what it
// saw: every JSON-RPC message (method, authorization header, session id, protocol version header) and every tool
// call (name, arguments, `_meta`, authorization header).
import http from "node:http";
import { randomUUID } from "node:crypto";

import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { z } from "zod";

const port = Number(process.argv[2] ?? 0);
const enableJsonResponse = process.argv.includes("--json");
const seen = { messages: [], calls: [] };
const transports = new Map();

function newServer() {
  const mcp = new McpServer({ name: "steadfast-test", version: "1.0.0" });
  const record = (name, args, extra) =>
    seen.calls.push({ name, args, meta: extra._meta ?? null, authorization: extra.requestInfo?.headers?.authorization ?? null });
  mcp.registerTool(
    "add",
    { description: "Adds two numbers", inputSchema: { a: z.number(), b: z.number() } },
    async ({ a, b }, extra) => {
      record("add", { a, b }, extra);
      return { content: [{ type: "text", text: String(a + b) }] };
    },
  );
  mcp.registerTool(
    "stock",
    { description: "Stock of an item", inputSchema: { item: z.string() }, outputSchema: { item: z.string(), count: z.number() } },
    async ({ item }, extra) => {
      record("stock", { item }, extra);
      const out = { item, count: item.length };
      return { content: [{ type: "text", text: JSON.stringify(out) }], structuredContent: out };
    },
  );
  mcp.registerTool("refuse", { description: "Always refuses", inputSchema: { why: z.string() } }, async ({ why }, extra) => {
    record("refuse", { why }, extra);
    return { content: [{ type: "text", text: `refused: ${why}` }], isError: true };
  });
  return mcp;
}

const server = http.createServer(async (req, res) => {
  try {
    if (req.method === "GET" && req.url === "/seen") {
      res.writeHead(200, { "content-type": "application/json" });
      return res.end(JSON.stringify(seen));
    }
    let text = "";
    for await (const chunk of req) text += chunk;
    const body = text ? JSON.parse(text) : undefined;
    const sessionId = req.headers["mcp-session-id"];
    for (const m of [body].flat().filter(Boolean)) {
      seen.messages.push({
        method: m.method ?? null,
        authorization: req.headers.authorization ?? null,
        sessionId: sessionId ?? null,
        protocolVersion: req.headers["mcp-protocol-version"] ?? null,
      });
    }
    let transport = sessionId ? transports.get(sessionId) : undefined;
    if (!transport) {
      if (sessionId) {
        res.writeHead(404, { "content-type": "application/json" });
        return res.end(JSON.stringify({ jsonrpc: "2.0", error: { code: -32001, message: "Session not found" }, id: null }));
      }
      transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        enableJsonResponse,
        onsessioninitialized: (id) => transports.set(id, transport),
      });
      await newServer().connect(transport);
    }
    await transport.handleRequest(req, res, body);
  } catch (e) {
    if (!res.headersSent) res.writeHead(500, { "content-type": "text/plain" });
    res.end(String(e?.stack ?? e));
  }
});

server.listen(port, "127.0.0.1", () => {
  process.stdout.write(JSON.stringify({ port: server.address().port }) + "\n");
});
