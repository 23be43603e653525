// Part (b) of the peers benchmark, in node: steadfast's npm package (js/dist, memoryStore) vs LangGraph JS
// (`createReactAgent` with MemorySaver: the default messages channel, and the beta delta messages channel
// `MessagesDeltaValue`), on the scripted workload of workload.mjs. Tools are in-process async functions that
// answer the same text; the models are scripted (call k of a run: the two tool calls of step k while
// k < steps, then the final text). Each run gets a new agent and a new store/saver; only the run is timed.
import { performance } from "node:perf_hooks";
import { createReactAgent } from "@langchain/langgraph/prebuilt";
import { MemorySaver, MessagesDeltaValue, StateSchema } from "@langchain/langgraph";
import { BaseChatModel } from "@langchain/core/language_models/chat_models";
import { AIMessage } from "@langchain/core/messages";
import { tool as lcTool } from "@langchain/core/tools";
import { FINAL_TEXT, INSTRUCTIONS, PROMPT, TOOL_RESULT, TOOLS, stepCalls, scriptedModel } from "./workload.mjs";

// A scripted chat model for LangGraph (tool calls as LangChain `tool_calls`).
class ScriptedChatModel extends BaseChatModel {
  constructor(steps) {
    super({});
    this.steps = steps;
    this.k = 0;
  }
  _llmType() {
    return "scripted";
  }
  bindTools() {
    return this;
  }
  async _generate() {
    const i = this.k++;
    const usage_metadata = { input_tokens: 10, output_tokens: 5, total_tokens: 15 };
    const message =
      i < this.steps
        ? new AIMessage({
            content: "",
            tool_calls: stepCalls(i).map((c, j) => ({ id: `call_${i}_${j}`, name: c.name, args: c.args, type: "tool_call" })),
            usage_metadata,
          })
        : new AIMessage({ content: FINAL_TEXT, usage_metadata });
    return { generations: [{ message, text: typeof message.content === "string" ? message.content : "" }] };
  }
}

function langgraphTools() {
  return TOOLS.map((t) =>
    lcTool(async () => TOOL_RESULT, { name: t.name, description: t.description, schema: t.inputSchema }),
  );
}

/** One LangGraph run of `steps` steps; `delta` picks the delta messages channel. */
export async function langgraphRun(steps, delta) {
  const agent = createReactAgent({
    llm: new ScriptedChatModel(steps),
    tools: langgraphTools(),
    prompt: INSTRUCTIONS,
    checkpointSaver: new MemorySaver(),
    ...(delta ? { stateSchema: new StateSchema({ messages: MessagesDeltaValue }) } : {}),
  });
  const config = { configurable: { thread_id: "bench" }, recursionLimit: 2 * steps + 10 };
  const t0 = performance.now();
  const out = await agent.invoke({ messages: [{ role: "user", content: PROMPT }] }, config);
  const ms = performance.now() - t0;
  const last = out.messages[out.messages.length - 1];
  if (out.messages.length !== 3 * steps + 2 || last.content !== FINAL_TEXT)
    throw new Error(`langgraph${delta ? " delta" : ""}: ${out.messages.length} messages, last ${JSON.stringify(last.content)}`);
  return { ms };
}

let steadfast;
let internals;
/** Loads the built npm package (js/dist; js/scripts/build.sh builds it). */
export async function loadSteadfast(distEntry) {
  steadfast = await import(distEntry);
  const [agent, lowLevel, tools] = await Promise.all(
    ["../agent.js", "../low_level.js", "../tools.js"].map((f) => import(new URL(f, distEntry).href)),
  );
  internals = { transcriptHolder: agent.transcriptHolder, ...lowLevel, lowLevelTool: tools.lowLevelTool };
}

/**
 * One steadfast run of `steps` steps through the package's own model holder, with every string crossing the
 * wasm boundary to the model counted (untimed; P13). Returns the averages per model call: `crossing` (the
 * frames the core sends), `newMessages` (the JSON bytes of the messages that call adds to the transcript) and
 * `fullRequest` (the JSON bytes of the whole request the model sees: what crossed before frames).
 */
export async function steadfastCrossing(steps) {
  const { transcriptHolder, newAgent, newMemoryStore, lowLevelTool } = internals;
  let k = 0;
  let fullRequest = 0;
  let lastMessages = [];
  const model = {
    id: "scripted",
    async generate(request) {
      fullRequest += Buffer.byteLength(JSON.stringify(request));
      lastMessages = request.messages;
      const i = k++;
      const usage = { inputTokens: 10, outputTokens: 5 };
      return i < steps
        ? { toolCalls: stepCalls(i).map((c, j) => ({ id: `call_${i}_${j}`, ...c })), usage, stopReason: "tool_calls" }
        : { text: FINAL_TEXT, usage, stopReason: "stop" };
    },
  };
  const holder = transcriptHolder(model);
  let crossing = 0;
  const counted = {
    id: model.id,
    generate: (frameJson) => {
      crossing += Buffer.byteLength(frameJson);
      return holder.generate(frameJson);
    },
    release: (runId) => holder.release(runId),
  };
  const tools = TOOLS.map((t) => lowLevelTool({ ...t, execute: async () => TOOL_RESULT }));
  const agent = newAgent({ model: counted, tools, instructions: INSTRUCTIONS, maxSteps: steps + 1 }, newMemoryStore());
  const r = JSON.parse(await agent.send("bench", JSON.stringify({ input: PROMPT }), null, null, null));
  if (r.status !== "finished" || k !== steps + 1) throw new Error(`steadfast (crossing): status ${r.status}, ${k} model calls`);
  const calls = steps + 1;
  return {
    crossing: crossing / calls,
    newMessages: Buffer.byteLength(JSON.stringify(lastMessages)) / calls,
    fullRequest: fullRequest / calls,
  };
}

/** One steadfast run (npm package, memoryStore) of `steps` steps. */
export async function steadfastRun(steps, sessionId = "bench") {
  const { createAgent, defineTool, memoryStore } = steadfast;
  const model = scriptedModel(steps);
  const tools = TOOLS.map((t) => defineTool({ ...t, execute: async () => TOOL_RESULT }));
  const agent = createAgent({ model, tools, instructions: INSTRUCTIONS, store: memoryStore(), maxSteps: steps + 1 });
  const t0 = performance.now();
  const r = await agent.send(PROMPT, { sessionId });
  const ms = performance.now() - t0;
  if (r.status !== "finished" || r.text !== FINAL_TEXT)
    throw new Error(`steadfast (npm): status ${r.status}, text ${JSON.stringify(r.text)}, ${r.messages.length} messages`);
  return { ms, stats: r.stats, transcriptBytes: Buffer.byteLength(JSON.stringify(r.messages)), messages: r.messages.length };
}
