// A Worker (bundled by test/ai-sdk-workerd.test.mjs with esbuild, `workerd` condition) that runs agents over AI SDK
// mock models (ai@6's MockLanguageModelV3, ai@5's MockLanguageModelV2) through aiSdkModel, over a KV binding.
import { MockLanguageModelV3, convertArrayToReadableStream as streamV3 } from "ai/test";
import { MockLanguageModelV2, convertArrayToReadableStream as streamV2 } from "ai-v5/test";
import { aiSdkModel, createAgent, defineTool, kvStore, PropagatingToolError } from "../../dist/entrypoints/workerd.js";

const VERSIONS = {
  v3: {
    Mock: MockLanguageModelV3,
    stream: streamV3,
    usage: (i, o) => ({ inputTokens: { total: i, noCache: i, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: o, text: o, reasoning: 0 } }),
    finish: (f) => ({ unified: f, raw: f }),
  },
  v2: {
    Mock: MockLanguageModelV2,
    stream: streamV2,
    usage: (i, o) => ({ inputTokens: i, outputTokens: o, totalTokens: i + o }),
    finish: (f) => f,
  },
};

/** Streams by turn: a signed reasoning part and a `ship` call, then the final text. */
function model(v, counts) {
  const turns = [
    [
      { type: "reasoning-start", id: "r" },
      { type: "reasoning-delta", id: "r", delta: "Ship it." },
      { type: "reasoning-end", id: "r", providerMetadata: { anthropic: { signature: "sig" } } },
      { type: "tool-call", toolCallId: "c-ship", toolName: "ship", input: '{"order":"9"}' },
      { type: "finish", finishReason: v.finish("tool-calls"), usage: v.usage(20, 10) },
    ],
    [
      { type: "text-delta", id: "t", delta: "Shipped " },
      { type: "text-delta", id: "t", delta: "order 9." },
      { type: "finish", finishReason: v.finish("stop"), usage: v.usage(30, 5) },
    ],
  ];
  return new v.Mock({
    doStream: async ({ prompt }) => {
      const turn = prompt.filter((m) => m.role === "assistant").length;
      counts.modelCalls.push(turn + 1);
      counts.prompts.push(prompt);
      return { stream: v.stream(turns[turn]) };
    },
  });
}

export default {
  async fetch(request, env) {
    const v = VERSIONS[new URL(request.url).searchParams.get("v")];
    const id = `ship-${new URL(request.url).searchParams.get("v")}`;
    const counts = { modelCalls: [], prompts: [], ships: 0, reconciles: 0 };
    const shipped = new Map();
    const tools = () => [
      defineTool({
        name: "ship",
        description: "Ship an order",
        sideEffecting: true,
        execute: async ({ order }, ctx) => {
          counts.ships += 1;
          shipped.set(ctx.idempotencyKey, `shipped ${order}`);
          throw new PropagatingToolError("the isolate died after shipping");
        },
        reconcile: async (_a, ctx) => {
          counts.reconciles += 1;
          return shipped.get(ctx.idempotencyKey) ?? null;
        },
      }),
    ];
    const deltas = [];
    const onEvent = (e) => e.type.endsWith(".delta") && deltas.push([e.type, e.text]);
    let code = null;
    try {
      await createAgent({ model: aiSdkModel(model(v, counts)), tools: tools(), store: kvStore(env.RUNS) }).send("Ship order 9", { sessionId: id, onEvent });
    } catch (e) {
      code = e.code;
    }
    const r = await createAgent({ model: aiSdkModel(model(v, counts)), tools: tools(), store: kvStore(env.RUNS) }).resume(id, { onEvent });
    const assistant = counts.prompts.at(-1).find((m) => m.role === "assistant");
    return Response.json({
      code,
      status: r.status,
      text: r.text,
      usage: r.usage,
      modelCalls: counts.modelCalls,
      ships: counts.ships,
      reconciles: counts.reconciles,
      deltas,
      resentAssistant: assistant.content,
    });
  },
};
