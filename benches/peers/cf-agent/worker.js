// The peer: a Worker on Cloudflare's Agents SDK (`AIChatAgent` from @cloudflare/ai-chat, a SQLite Durable
// Object) running the same scripted workload with the AI SDK's mock model (`MockLanguageModelV3`) and the same
// two tools, which fetch the same local tool server as steadfast's webhook tools. Bundled by run.mjs (esbuild).
//
// GET /bench?steps=N&id=ID runs one conversation turn of N two-tool steps in the agent named ID and answers
// what it did: storage statements that write, rows written, the stored transcript's bytes.
import { AIChatAgent } from "@cloudflare/ai-chat";
import { getAgentByName } from "agents";
import { convertToModelMessages, jsonSchema, simulateReadableStream, stepCountIs, streamText, tool } from "ai";
import { MockLanguageModelV3 } from "ai/test";
import { FINAL_TEXT, PROMPT, TOOLS, stepCalls } from "../workload.mjs";

const usage = {
  inputTokens: { total: 10, noCache: 10, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 5, text: 5, reasoning: undefined },
};

// Call k of a turn: the two tool calls of step k while k < steps, then the final text.
function scriptedModel(steps) {
  let k = 0;
  return new MockLanguageModelV3({
    doStream: async () => {
      const i = k++;
      const chunks = [{ type: "stream-start", warnings: [] }];
      if (i < steps) {
        stepCalls(i).forEach((c, j) =>
          chunks.push({ type: "tool-call", toolCallId: `call_${i}_${j}`, toolName: c.name, input: JSON.stringify(c.args) }),
        );
        chunks.push({ type: "finish", finishReason: { unified: "tool-calls", raw: "tool_calls" }, usage });
      } else {
        chunks.push({ type: "text-start", id: "t" }, { type: "text-delta", id: "t", delta: FINAL_TEXT }, { type: "text-end", id: "t" });
        chunks.push({ type: "finish", finishReason: { unified: "stop", raw: "stop" }, usage });
      }
      return { stream: simulateReadableStream({ chunks, initialDelayInMs: null, chunkDelayInMs: null }) };
    },
  });
}

export class BenchAgent extends AIChatAgent {
  constructor(ctx, env) {
    super(ctx, env);
    // Counts what this object writes: SQL statements that modify (and their rows), KV-API puts/deletes.
    this.counts = { writeStatements: 0, cursors: [], kvWrites: 0 };
    const sql = ctx.storage.sql;
    const exec = sql.exec.bind(sql);
    const counts = this.counts;
    sql.exec = (query, ...bindings) => {
      const cursor = exec(query, ...bindings);
      if (/^\s*(insert|update|delete|replace)\b/i.test(query)) {
        counts.writeStatements++;
        counts.cursors.push(cursor);
      }
      return cursor;
    };
    for (const m of ["put", "delete"]) {
      const f = ctx.storage[m].bind(ctx.storage);
      ctx.storage[m] = (...a) => {
        counts.kvWrites += typeof a[0] === "string" ? 1 : Array.isArray(a[0]) ? a[0].length : Object.keys(a[0]).length;
        return f(...a);
      };
    }
  }

  async onChatMessage(onFinish) {
    const steps = this.benchSteps ?? 0;
    const tools = {};
    for (const t of TOOLS) {
      tools[t.name] = tool({
        description: t.description,
        inputSchema: jsonSchema(t.inputSchema),
        execute: async (args) => {
          const res = await fetch(`${this.env.TOOL_BASE}/tools/${t.name}`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: JSON.stringify(args),
          });
          return await res.text();
        },
      });
    }
    const result = streamText({
      model: scriptedModel(steps),
      messages: await convertToModelMessages(this.messages),
      tools,
      stopWhen: stepCountIs(steps + 1),
      onFinish,
    });
    return result.toUIMessageStreamResponse();
  }

  async bench(steps) {
    this.benchSteps = steps;
    this.counts.writeStatements = 0;
    this.counts.cursors = [];
    this.counts.kvWrites = 0;
    const r = await this.saveMessages((messages) => [
      ...messages,
      { id: crypto.randomUUID(), role: "user", parts: [{ type: "text", text: PROMPT }] },
    ]);
    let rowsWritten = 0;
    for (const c of this.counts.cursors) rowsWritten += c.rowsWritten ?? 0;
    const last = this.messages[this.messages.length - 1];
    const toolParts = (last?.parts ?? []).filter((p) => typeof p.type === "string" && p.type.startsWith("tool-"));
    return {
      status: r.status,
      error: r.error ? String(r.error) : undefined,
      messages: this.messages.length,
      toolCalls: toolParts.length,
      text: (last?.parts ?? []).filter((p) => p.type === "text").map((p) => p.text).join(""),
      writeStatements: this.counts.writeStatements,
      rowsWritten,
      kvWrites: this.counts.kvWrites,
      transcriptBytes: new TextEncoder().encode(JSON.stringify(this.messages)).length,
      databaseBytes: this.ctx.storage.sql.databaseSize,
    };
  }
}

export default {
  async fetch(request, env) {
    const url = new URL(request.url);
    if (url.pathname === "/health") return new Response("ok");
    if (url.pathname !== "/bench") return new Response("not found", { status: 404 });
    const stub = await getAgentByName(env.BenchAgent, url.searchParams.get("id"));
    return Response.json(await stub.bench(Number(url.searchParams.get("steps"))));
  },
};
