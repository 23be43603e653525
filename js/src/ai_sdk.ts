// The AI SDK adapter: `aiSdkModel(model)` makes any Vercel AI SDK language model — a `LanguageModelV2` (ai@5,
// @ai-sdk/provider 2) or `LanguageModelV3` (ai@6, @ai-sdk/provider 3), from an `@ai-sdk/*` provider,
// `workers-ai-provider` or a user's own — a steadfast `Model`. It only translates: our transcript and tool specs
// into the SDK's prompt and function tools, its answer (or its stream parts) back into a `ModelResponse`, its
// errors into the shapes the core classifies (an HTTP status and Retry-After; see src/front/bindings/model.rs).
//
// Neither `ai` nor `@ai-sdk/provider` is imported, at runtime or in the published types: the part of the
// specification used here is declared structurally below (a real V2/V3 model fits it; test-support/types-ai
// checks that against the real types), so the package works without them.
import { SteadfastError } from "./errors.js";
import { ProviderHttpError } from "./mock_model.js";
import type { Model, ModelResponse, ModelStream } from "./model.js";
import type { AbortSignalLike, Json, Message, ModelRequest, ToolSpec, Usage } from "./types.js";

/** JSON as the specification writes it (`JSONValue` of @ai-sdk/provider 2 and 3). */
export type AiSdkJson = null | string | number | boolean | AiSdkJson[] | { [key: string]: AiSdkJson };

/** Provider-specific options of a prompt part (`SharedV2ProviderOptions`, `SharedV3ProviderOptions`). */
export type AiSdkProviderOptions = Record<string, Record<string, AiSdkJson>>;

/**
 * Provider-specific metadata of an answer's part (`SharedV2ProviderMetadata`, `SharedV3ProviderMetadata`): JSON
 * per provider (V3's may hold `undefined` fields, which recording drops).
 */
export type AiSdkProviderMetadata = Record<string, Record<string, unknown>>;

/** A part of an assistant message in the SDK's prompt, as this adapter writes it. */
export type AiSdkAssistantPart =
  | { type: "text"; text: string }
  | { type: "reasoning"; text: string; providerOptions?: AiSdkProviderOptions }
  | { type: "tool-call"; toolCallId: string; toolName: string; input: unknown; providerOptions?: AiSdkProviderOptions };

/** A tool result in the SDK's prompt (`output` is the same in V2 and V3 for text). */
export interface AiSdkToolResultPart {
  type: "tool-result";
  toolCallId: string;
  toolName: string;
  output: { type: "text" | "error-text"; value: string };
}

/** A message of the SDK's prompt (`LanguageModelV2Prompt` / `LanguageModelV3Prompt`), as this adapter writes it. */
export type AiSdkMessage =
  | { role: "system"; content: string }
  | { role: "user"; content: Array<{ type: "text"; text: string }> }
  | { role: "assistant"; content: AiSdkAssistantPart[] }
  | { role: "tool"; content: AiSdkToolResultPart[] };

/** A function tool (`LanguageModelV2FunctionTool` / `LanguageModelV3FunctionTool`: the same fields). */
export interface AiSdkFunctionTool {
  type: "function";
  name: string;
  description?: string;
  /** A JSON Schema (`JSONSchema7`). */
  inputSchema: { [key: string]: AiSdkJson };
}

/** Call settings handed to every call (a subset of `LanguageModelV2CallOptions` / `V3CallOptions`). */
export interface AiSdkCallSettings {
  maxOutputTokens?: number;
  temperature?: number;
  topP?: number;
  topK?: number;
  presencePenalty?: number;
  frequencyPenalty?: number;
  stopSequences?: string[];
  seed?: number;
  /** Additional HTTP headers (HTTP-based providers). */
  headers?: Record<string, string | undefined>;
  /** Provider-specific options, e.g. `{ anthropic: { thinking: { type: "enabled", budgetTokens: 1024 } } }`. */
  providerOptions?: AiSdkProviderOptions;
}

/**
 * What this adapter passes to `doGenerate` / `doStream` (a `LanguageModelV2CallOptions` and a
 * `LanguageModelV3CallOptions`: test-support/types-ai checks it against both).
 */
export interface AiSdkCallOptions extends AiSdkCallSettings {
  prompt: AiSdkMessage[];
  tools?: AiSdkFunctionTool[];
}

/** A content part of a `doGenerate` answer, or a stream part: the fields this adapter reads. */
export interface AiSdkPart {
  type: string;
  id?: string;
  text?: string;
  delta?: string;
  toolCallId?: string;
  toolName?: string;
  input?: unknown;
  providerExecuted?: boolean;
  providerMetadata?: AiSdkProviderMetadata;
  usage?: AiSdkUsage;
  finishReason?: AiSdkFinishReason;
  error?: unknown;
}

/** V2: a count; V3: `{ total, … }` (prompt tokens: `cacheRead`, `cacheWrite`; completion tokens: `reasoning`). */
export type AiSdkTokenCount =
  | number
  | undefined
  | {
      total?: number | undefined;
      cacheRead?: number | undefined;
      cacheWrite?: number | undefined;
      reasoning?: number | undefined;
    };

/**
 * `LanguageModelV2Usage` (`inputTokens: number`, `cachedInputTokens`, `reasoningTokens`) or
 * `LanguageModelV3Usage` (`inputTokens: { total, cacheRead, cacheWrite }`, `outputTokens: { total, reasoning }`).
 */
export interface AiSdkUsage {
  inputTokens?: AiSdkTokenCount;
  outputTokens?: AiSdkTokenCount;
  cachedInputTokens?: number | undefined;
  reasoningTokens?: number | undefined;
}

/** V2: `'stop' | 'length' | …`; V3: `{ unified, raw }`. */
export type AiSdkFinishReason = string | { unified?: string; raw?: string | undefined };

/** A `ReadableStream` as this adapter reads it (structural: the published types need no DOM library). */
export interface AiSdkReadableStream<T> {
  getReader(): {
    read(): PromiseLike<{ done: boolean; value?: T }>;
    cancel(reason?: unknown): PromiseLike<void>;
    releaseLock(): void;
  };
}

/**
 * The part of a `LanguageModelV2` / `LanguageModelV3` this adapter uses (any model of either specification
 * version fits). The options parameters are left open (`never`: every model's own options type fits); the
 * adapter passes an `AiSdkCallOptions`.
 */
export interface AiSdkLanguageModel {
  readonly specificationVersion: "v2" | "v3";
  readonly provider: string;
  readonly modelId: string;
  doGenerate(options: never): PromiseLike<{
    content: ReadonlyArray<AiSdkPart>;
    finishReason: AiSdkFinishReason;
    usage: AiSdkUsage;
  }>;
  doStream(options: never): PromiseLike<{ stream: AiSdkReadableStream<AiSdkPart> }>;
}

/** Options of `aiSdkModel`. */
export interface AiSdkModelOptions {
  /** The model id in the agent fingerprint (default `"<provider>:<modelId>"`, e.g. `"anthropic.messages:claude-…"`). */
  id?: string;
  /** Call settings handed to every call (max output tokens, temperature, provider options, …). */
  settings?: AiSdkCallSettings;
}

/**
 * A steadfast model over an AI SDK language model (`LanguageModelV2` of ai@5 or `LanguageModelV3` of ai@6):
 * `createAgent({ model: aiSdkModel(anthropic("claude-sonnet-4-5")), … })`.
 *
 * - The transcript becomes the SDK's prompt (tool results as `text` / `error-text` outputs) and the tools its
 *   function tools; text, tool calls (their JSON input parsed: input that is not a JSON object becomes an
 *   invalid call the model is told about, the tool does not run), reasoning, usage and the finish reason come
 *   back (`length` ends the run with `length`, `content-filter` with `content-filter`).
 * - Reasoning parts are kept as the run's reasoning blocks `{type: "reasoning", text, providerOptions}` (the
 *   part's provider metadata, e.g. Anthropic's signature) and sent back unchanged in the next turns' prompts; a
 *   tool call's provider metadata (e.g. Gemini's thought signature) is kept as a block `{type:
 *   "tool-call-options", toolCallId, providerOptions}` and sent back on that call.
 * - Streams (`doStream`) when someone listens to the run's events, handing text and reasoning increments on;
 *   calls `doGenerate` otherwise.
 * - An `APICallError` with a status is an HTTP failure (429/5xx retried, honouring `retry-after-ms` /
 *   `retry-after`; other 4xx terminal); one without a status, and any unknown error, a network error (retried).
 *
 * Refuses anything but a V2/V3 language model, and unknown option keys, with `STEADFAST_CONFIG_INVALID`.
 */
export function aiSdkModel(model: AiSdkLanguageModel, options: AiSdkModelOptions = {}): Model {
  const given = model as unknown;
  if (typeof given === "string") {
    throw config(
      `aiSdkModel(model) needs a language model object (e.g. anthropic("claude-…") or, for a model id string, ` +
        `gateway(${JSON.stringify(given)})), not the string ${JSON.stringify(given)}`,
    );
  }
  if (given === null || typeof given !== "object") {
    throw config(`aiSdkModel(model) needs an AI SDK language model (LanguageModelV2 or V3), not ${describe(given)}`);
  }
  const m = given as Record<string, unknown>;
  const version = m.specificationVersion;
  if (version !== "v2" && version !== "v3") {
    throw config(
      `aiSdkModel(model) supports AI SDK language models of specification v2 (ai@5) and v3 (ai@6); this one has ` +
        `specificationVersion ${JSON.stringify(version) ?? "undefined"}`,
    );
  }
  for (const method of ["doGenerate", "doStream"]) {
    if (typeof m[method] !== "function") {
      throw config(`aiSdkModel(model): the model has no ${method} function (not an AI SDK language model)`);
    }
  }
  const opts = checkOptions(options);
  let id = opts.id;
  if (id === undefined) {
    if (typeof m.modelId !== "string" || m.modelId === "") {
      throw config("aiSdkModel(model): the model has no modelId string; give one: aiSdkModel(model, { id })");
    }
    id = typeof m.provider === "string" && m.provider !== "" ? `${m.provider}:${m.modelId}` : m.modelId;
  }
  const settings = { ...opts.settings };
  return {
    id,
    async generate(request: ModelRequest, stream?: ModelStream, signal?: AbortSignalLike): Promise<ModelResponse> {
      const call: AiSdkCallOptions = { ...settings, prompt: toPrompt(request.messages) };
      const tools = toTools(request.tools);
      if (tools.length > 0) call.tools = tools;
      // The run stopped waiting (aborted): the provider's request is cancelled. Set beside the typed options:
      // the SDK types it as the DOM's `AbortSignal`, which the published types do not depend on.
      if (signal !== undefined) (call as { abortSignal?: AbortSignalLike }).abortSignal = signal;
      try {
        // `as never`: the model's own options type, which `AiSdkCallOptions` is (see AiSdkLanguageModel).
        return stream ? await streamed(await model.doStream(call as never), stream) : answer(await model.doGenerate(call as never));
      } catch (e) {
        throw failure(e);
      }
    },
  };
}

const OPTION_KEYS = ["id", "settings"];
const SETTING_KEYS = [
  "maxOutputTokens",
  "temperature",
  "topP",
  "topK",
  "presencePenalty",
  "frequencyPenalty",
  "stopSequences",
  "seed",
  "headers",
  "providerOptions",
];

function checkOptions(options: AiSdkModelOptions): AiSdkModelOptions {
  const given = options as unknown;
  if (given === undefined || given === null) return {};
  if (typeof given !== "object" || Array.isArray(given)) {
    throw config(`aiSdkModel(model, options): options must be an object, not ${describe(given)}`);
  }
  unknownKeys("aiSdkModel options", given as object, OPTION_KEYS);
  const { id, settings } = options;
  if (id !== undefined && (typeof id !== "string" || id === "")) {
    throw config(`aiSdkModel options: \`id\` must be a non-empty string, not ${describe(id)}`);
  }
  if (settings !== undefined) {
    if (settings === null || typeof settings !== "object" || Array.isArray(settings)) {
      throw config(`aiSdkModel options: \`settings\` must be an object, not ${describe(settings)}`);
    }
    unknownKeys("aiSdkModel settings", settings, SETTING_KEYS);
  }
  return options;
}

function unknownKeys(what: string, value: object, known: string[]): void {
  for (const key of Object.keys(value)) {
    if (!known.includes(key)) {
      throw config(`${what}: unknown key ${JSON.stringify(key)} (known: ${known.join(", ")})`);
    }
  }
}

function config(message: string): SteadfastError {
  return new SteadfastError("STEADFAST_CONFIG_INVALID", message);
}

function describe(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  return typeof value === "object" ? "an object" : `${typeof value} ${String(value)}`;
}

// ---- our transcript → the SDK's prompt

/** The block a tool call's provider metadata is kept in (among the assistant message's reasoning blocks). */
const CALL_OPTIONS = "tool-call-options";

/** The transcript as the SDK's prompt: consecutive tool results share one tool message. */
function toPrompt(messages: readonly Message[]): AiSdkMessage[] {
  const prompt: AiSdkMessage[] = [];
  for (const m of messages) {
    switch (m.role) {
      case "system":
        prompt.push({ role: "system", content: m.content });
        break;
      case "user":
        prompt.push({ role: "user", content: [{ type: "text", text: m.content }] });
        break;
      case "assistant": {
        const content: AiSdkAssistantPart[] = [];
        const callOptions = new Map<string, AiSdkProviderOptions>();
        for (const block of (m.reasoning ?? []) as unknown[]) {
          if (isReasoningPart(block)) content.push(block);
          else if (isCallOptions(block)) callOptions.set(block.toolCallId, block.providerOptions);
          // Any other block (another provider's, e.g. Anthropic's own `thinking`) means nothing to this model.
        }
        if (m.content !== "") content.push({ type: "text", text: m.content });
        for (const c of m.toolCalls ?? []) {
          const part: AiSdkAssistantPart = { type: "tool-call", toolCallId: c.id, toolName: c.name, input: c.args };
          const providerOptions = callOptions.get(c.id);
          if (providerOptions !== undefined) part.providerOptions = providerOptions;
          content.push(part);
        }
        if (content.length === 0) content.push({ type: "text", text: "" });
        prompt.push({ role: "assistant", content });
        break;
      }
      case "tool": {
        const part: AiSdkToolResultPart = {
          type: "tool-result",
          toolCallId: m.toolCallId,
          toolName: m.name,
          output: { type: m.isError ? "error-text" : "text", value: m.content },
        };
        const last = prompt[prompt.length - 1];
        if (last?.role === "tool") last.content.push(part);
        else prompt.push({ role: "tool", content: [part] });
        break;
      }
    }
  }
  return prompt;
}

function isReasoningPart(block: unknown): block is { type: "reasoning"; text: string; providerOptions?: AiSdkProviderOptions } {
  return (
    isObject(block) &&
    block.type === "reasoning" &&
    typeof block.text === "string" &&
    (block.providerOptions === undefined || isObject(block.providerOptions))
  );
}

function isCallOptions(block: unknown): block is { type: string; toolCallId: string; providerOptions: AiSdkProviderOptions } {
  return isObject(block) && block.type === CALL_OPTIONS && typeof block.toolCallId === "string" && isObject(block.providerOptions);
}

function isObject(v: unknown): v is { [key: string]: Json } {
  return v !== null && typeof v === "object" && !Array.isArray(v);
}

function toTools(tools: readonly ToolSpec[]): AiSdkFunctionTool[] {
  // A tool's schema is a JSON object (the core checks it when the agent is made).
  return tools.map((t) => ({
    type: "function",
    name: t.name,
    description: t.description,
    inputSchema: t.inputSchema as { [key: string]: AiSdkJson },
  }));
}

// ---- the SDK's answer → ours

/** Assembles an answer: text parts joined, reasoning blocks and tool calls in order. */
class Assembly {
  text = "";
  reasoning: Json[] = [];
  calls: Array<{ id: string; name: string; args: Json; invalid?: string }> = [];

  addReasoning(text: string, metadata: AiSdkProviderMetadata | undefined): void {
    const block: { [key: string]: Json } = { type: "reasoning", text };
    // JSON by the specification (an `undefined` field is dropped when the answer is recorded).
    if (metadata !== undefined && Object.keys(metadata).length > 0) block.providerOptions = metadata as Json;
    this.reasoning.push(block);
  }

  addCall(part: AiSdkPart): void {
    // A call the provider ran itself (a provider-defined tool) is not ours to run.
    if (part.providerExecuted) return;
    const id = typeof part.toolCallId === "string" ? part.toolCallId : "";
    const name = typeof part.toolName === "string" ? part.toolName : "";
    this.calls.push({ id, name, ...parseInput(part.input) });
    if (part.providerMetadata !== undefined && Object.keys(part.providerMetadata).length > 0 && id !== "") {
      this.reasoning.push({ type: CALL_OPTIONS, toolCallId: id, providerOptions: part.providerMetadata as Json });
    }
  }

  finish(finishReason: AiSdkFinishReason | undefined, usage: AiSdkUsage | undefined): ModelResponse {
    const response: ModelResponse = { text: this.text, toolCalls: this.calls };
    const counted = toUsage(usage);
    if (counted !== undefined) response.usage = counted;
    const stop = stopReason(finishReason);
    if (stop !== undefined) response.stopReason = stop;
    if (this.reasoning.length > 0) response.reasoning = this.reasoning;
    return response;
  }
}

function answer(result: { content: ReadonlyArray<AiSdkPart>; finishReason: AiSdkFinishReason; usage: AiSdkUsage }): ModelResponse {
  if (result === null || typeof result !== "object" || !Array.isArray(result.content)) {
    throw new SteadfastError("STEADFAST_PROVIDER_INVALID_RESPONSE", "the AI SDK model's doGenerate answered without a content array", {
      retryable: true,
    });
  }
  const out = new Assembly();
  for (const part of result.content) {
    if (part === null || typeof part !== "object") continue;
    if (part.type === "text" && typeof part.text === "string") out.text += part.text;
    else if (part.type === "reasoning" && typeof part.text === "string") out.addReasoning(part.text, part.providerMetadata);
    else if (part.type === "tool-call") out.addCall(part);
  }
  return out.finish(result.finishReason, result.usage);
}

/** Reads a `doStream` answer to its end, handing text and reasoning increments to `stream` as they come. */
async function streamed(result: { stream: AiSdkReadableStream<AiSdkPart> }, stream: ModelStream): Promise<ModelResponse> {
  if (typeof result?.stream?.getReader !== "function") {
    throw new SteadfastError("STEADFAST_PROVIDER_INVALID_RESPONSE", "the AI SDK model's doStream answered without a readable stream", {
      retryable: true,
    });
  }
  const reader = result.stream.getReader();
  const out = new Assembly();
  // Reasoning by stream id, in order of its start. Tool calls by id, in order of their first part: the closing
  // `tool-call` part, or else (a provider that sends none) the input streamed to its `tool-input-end`.
  const reasoning = new Map<string, { text: string; metadata?: AiSdkProviderMetadata }>();
  const calls = new Map<
    string,
    { name: string; input: string; metadata?: AiSdkProviderMetadata; ended: boolean; part?: AiSdkPart; skip?: boolean }
  >();
  let finish: AiSdkPart | undefined;
  try {
    for (;;) {
      const { done, value: part } = await reader.read();
      if (done) break;
      if (part === null || typeof part !== "object") continue;
      switch (part.type) {
        case "text-delta":
          if (typeof part.delta === "string" && part.delta !== "") {
            out.text += part.delta;
            stream.text(part.delta);
          }
          break;
        case "reasoning-start":
        case "reasoning-delta":
        case "reasoning-end": {
          const key = String(part.id ?? "");
          let r = reasoning.get(key);
          if (r === undefined) reasoning.set(key, (r = { text: "" }));
          if (typeof part.delta === "string" && part.delta !== "") {
            r.text += part.delta;
            stream.reasoning(part.delta);
          }
          r.metadata = mergeMetadata(r.metadata, part.providerMetadata);
          break;
        }
        case "tool-input-start":
          calls.set(String(part.id ?? ""), {
            name: String(part.toolName ?? ""),
            input: "",
            metadata: part.providerMetadata,
            ended: false,
            skip: part.providerExecuted === true,
          });
          break;
        case "tool-input-delta": {
          const t = calls.get(String(part.id ?? ""));
          if (t !== undefined && typeof part.delta === "string") t.input += part.delta;
          break;
        }
        case "tool-input-end": {
          const t = calls.get(String(part.id ?? ""));
          if (t !== undefined) {
            t.ended = true;
            t.metadata = mergeMetadata(t.metadata, part.providerMetadata);
          }
          break;
        }
        case "tool-call": {
          const key = String(part.toolCallId ?? "");
          const t = calls.get(key);
          if (t !== undefined) t.part = part;
          else calls.set(key, { name: "", input: "", ended: true, part });
          break;
        }
        case "finish":
          finish = part;
          break;
        case "error":
          throw part.error ?? new Error("the AI SDK model's stream reported an error");
      }
    }
  } catch (e) {
    // Ignored: the stream is abandoned; a failure to cancel it changes nothing for this call.
    void Promise.resolve(reader.cancel(e)).then(undefined, () => undefined);
    throw e;
  }
  if (finish === undefined) {
    throw new SteadfastError("STEADFAST_PROVIDER_INVALID_RESPONSE", "the AI SDK model's stream ended without a finish part", {
      retryable: true,
    });
  }
  for (const [toolCallId, t] of calls) {
    if (t.part !== undefined) out.addCall(t.part);
    else if (t.ended && !t.skip) {
      out.addCall({ type: "tool-call", toolCallId, toolName: t.name, input: t.input, providerMetadata: t.metadata });
    }
  }
  // Reasoning comes first in the answer (as providers order it), in the order its parts started.
  const blocks = out.reasoning;
  out.reasoning = [];
  for (const r of reasoning.values()) out.addReasoning(r.text, r.metadata);
  out.reasoning.push(...blocks);
  return out.finish(finish.finishReason, finish.usage);
}

/** Provider metadata of several parts of one block, merged per provider (later fields win). */
function mergeMetadata(
  into: AiSdkProviderMetadata | undefined,
  more: AiSdkProviderMetadata | undefined,
): AiSdkProviderMetadata | undefined {
  if (more === undefined || more === null || typeof more !== "object") return into;
  const merged: AiSdkProviderMetadata = { ...into };
  for (const [provider, fields] of Object.entries(more)) merged[provider] = { ...merged[provider], ...fields };
  return merged;
}

/**
 * A call's input: the JSON text the SDK gives (an object in a hand-made part is taken as it is). Text that is not
 * a JSON object is kept as written, with the reason the call cannot run (`invalid`): the core answers it with a
 * `validation` result the model reads, as for the built-in providers.
 */
function parseInput(input: unknown): { args: Json; invalid?: string } {
  if (input === undefined || input === null) return { args: {} };
  if (typeof input !== "string") {
    return isObject(input) ? { args: input } : { args: input as Json, invalid: "the arguments must be a JSON object" };
  }
  if (input.trim() === "") return { args: {} };
  let parsed: unknown;
  try {
    parsed = JSON.parse(input);
  } catch {
    const excerpt = input.length > 200 ? `${input.slice(0, 200)}…` : input;
    return {
      args: input,
      invalid: `the arguments were not valid JSON (the answer may have been cut off at the output token limit): ${excerpt}`,
    };
  }
  return isObject(parsed) ? { args: parsed } : { args: input, invalid: "the arguments must be a JSON object" };
}

function tokens(count: AiSdkTokenCount): number | undefined {
  const n = typeof count === "object" && count !== null ? count.total : count;
  return typeof n === "number" && Number.isFinite(n) && n >= 0 ? n : undefined;
}

function count(n: unknown): number | undefined {
  return typeof n === "number" && Number.isFinite(n) && n > 0 ? n : undefined;
}

/** A V3 count's part (`cacheRead`, …), when the count is an object. */
function part(c: AiSdkTokenCount, key: "cacheRead" | "cacheWrite" | "reasoning"): number | undefined {
  return typeof c === "object" && c !== null ? count(c[key]) : undefined;
}

/** The SDK's usage as the core counts it; what the tokens cost is the core's (from its price table). */
function toUsage(usage: AiSdkUsage | undefined): Partial<Usage> | undefined {
  if (usage === null || typeof usage !== "object") return undefined;
  const input = tokens(usage.inputTokens);
  const output = tokens(usage.outputTokens);
  if (input === undefined && output === undefined) return undefined;
  const counted: Partial<Usage> = {};
  if (input !== undefined) counted.inputTokens = input;
  if (output !== undefined) counted.outputTokens = output;
  const cached = part(usage.inputTokens, "cacheRead") ?? count(usage.cachedInputTokens);
  const written = part(usage.inputTokens, "cacheWrite");
  const reasoning = part(usage.outputTokens, "reasoning") ?? count(usage.reasoningTokens);
  if (cached !== undefined) counted.cachedInputTokens = cached;
  if (written !== undefined) counted.cacheWriteTokens = written;
  if (reasoning !== undefined) counted.reasoningTokens = reasoning;
  return counted;
}

/**
 * The SDK's finish reason in the core's stop-reason words (`length`, `content_filter`, `refusal` end a run with
 * that reason): V2 gives the word, V3 `{unified, raw}` (a raw `refusal`, Anthropic's, is kept as that).
 */
function stopReason(reason: AiSdkFinishReason | undefined): string | undefined {
  const unified = typeof reason === "string" ? reason : reason?.unified;
  if (typeof reason === "object" && reason?.raw === "refusal") return "refusal";
  switch (unified) {
    case "content-filter":
      return "content_filter";
    case "tool-calls":
      return "tool_calls";
    case undefined:
      return undefined;
    default:
      return String(unified);
  }
}

// ---- the SDK's errors → the failures the core classifies

/** AI SDK errors (by `name`) that are the caller's setup or prompt, not the provider's moment: terminal. */
const TERMINAL: Record<string, string> = {
  AI_LoadAPIKeyError: "STEADFAST_PROVIDER_AUTH",
  AI_LoadSettingError: "STEADFAST_CONFIG_INVALID",
  AI_InvalidPromptError: "STEADFAST_PROVIDER_BAD_REQUEST",
  AI_InvalidArgumentError: "STEADFAST_PROVIDER_BAD_REQUEST",
  AI_UnsupportedFunctionalityError: "STEADFAST_PROVIDER_BAD_REQUEST",
  AI_NoSuchModelError: "STEADFAST_CONFIG_INVALID",
};

/** AI SDK errors about the provider's reply (a garbled body): retried as an invalid response. */
const INVALID_REPLY = new Set([
  "AI_JSONParseError",
  "AI_TypeValidationError",
  "AI_EmptyResponseBodyError",
  "AI_InvalidResponseDataError",
  "AI_NoContentGeneratedError",
]);

/**
 * What a failed call rejects with: an `APICallError` with an HTTP status as a `ProviderHttpError` (the core maps
 * the status: 429/5xx transient, other 4xx terminal; Retry-After honoured); the SDK's setup and reply errors
 * with their codes; anything else (an `APICallError` without a status, a `fetch` failure) as it is, which the
 * core takes for a network error (retried).
 */
function failure(e: unknown): unknown {
  if (e instanceof SteadfastError || e === null || typeof e !== "object") return e;
  const err = e as { name?: unknown; message?: unknown; statusCode?: unknown; responseHeaders?: unknown };
  const message = typeof err.message === "string" ? err.message : String(e);
  const name = typeof err.name === "string" ? err.name : "";
  if (typeof err.statusCode === "number" && err.statusCode >= 100 && err.statusCode <= 599) {
    const mapped = new ProviderHttpError(err.statusCode, message, retryAfterMs(err.responseHeaders));
    Object.defineProperty(mapped, "cause", { value: e, enumerable: false, configurable: true, writable: true });
    return mapped;
  }
  const code = TERMINAL[name];
  if (code !== undefined) return new SteadfastError(code, `${name}: ${message}`, { retryable: false, cause: e });
  if (INVALID_REPLY.has(name)) {
    return new SteadfastError("STEADFAST_PROVIDER_INVALID_RESPONSE", `${name}: ${message}`, { retryable: true, cause: e });
  }
  return e;
}

/** The wait a rate-limited or unavailable provider asks for: `retry-after-ms`, else `retry-after` (seconds or a date). */
function retryAfterMs(headers: unknown): number | undefined {
  if (headers === null || typeof headers !== "object") return undefined;
  const header = (wanted: string): string | undefined => {
    for (const [k, v] of Object.entries(headers)) if (k.toLowerCase() === wanted && typeof v === "string") return v.trim();
    return undefined;
  };
  const ms = Number.parseFloat(header("retry-after-ms") ?? "");
  if (Number.isFinite(ms) && ms >= 0) return Math.round(ms);
  const after = header("retry-after");
  if (after === undefined || after === "") return undefined;
  const seconds = Number(after);
  if (Number.isFinite(seconds) && seconds >= 0) return Math.round(seconds * 1000);
  const at = Date.parse(after);
  return Number.isFinite(at) ? Math.max(0, at - Date.now()) : undefined;
}
