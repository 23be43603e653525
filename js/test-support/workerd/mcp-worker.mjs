// A Worker that gives an agent an MCP server's tools (`steadfast/mcp`), bundled by js/test/mcp-workerd.test.mjs
// with esbuild as wrangler does (`workerd` condition) and run in workerd (Miniflare). `GET /?mcp=<url>`: a run
// that calls `add` and `stock` (a tool with an outputSchema) on the server; the tool results the model read.
import { createAgent, memoryStore, mockModel } from "steadfast";
import { mcpTools } from "steadfast/mcp";

export default {
  async fetch(request) {
    const url = new URL(request.url).searchParams.get("mcp");
    // Per request: a Worker cannot use one request's connections in another.
    const tools = await mcpTools({ url, headers: { Authorization: "Bearer from-a-worker" } });
    try {
      const model = mockModel([{ toolCalls: [{ name: "add", args: { a: 2, b: 5 } }, { name: "stock", args: { sku: "W" } }] }, "done"]);
      const agent = createAgent({ model, tools, store: memoryStore() });
      const r = await agent.send("go", { sessionId: "in-a-worker" });
      const seen = model.calls[1].messages.filter((m) => m.role === "tool").map((m) => m.content);
      return Response.json({ status: r.status, seen });
    } finally {
      await tools.close();
    }
  },
};
