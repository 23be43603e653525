// Compiled (noEmit) by scripts/test.sh: `aiSdkModel` accepts the AI SDK's real language models — ai@6's
// `LanguageModelV3` and ai@5's `LanguageModelV2` (their own mock classes and the interface types themselves) —
// though the package declares only a structural subset of the specification and imports neither.
import { aiSdkModel, createAgent, memoryStore, type AiSdkCallOptions, type AiSdkLanguageModel, type Model } from "steadfast";
import { MockLanguageModelV3 } from "ai/test";
import { MockLanguageModelV2 } from "ai-v5/test";
import type { LanguageModel as LanguageModelAi6 } from "ai";
import type { LanguageModel as LanguageModelAi5 } from "ai-v5";
import type { LanguageModelV3, LanguageModelV3CallOptions } from "@ai-sdk/provider";

const v3: Model = aiSdkModel(new MockLanguageModelV3({ doGenerate: async () => { throw new Error("unused"); } }));
const v2: Model = aiSdkModel(new MockLanguageModelV2(), { id: "mock-v2", settings: { maxOutputTokens: 256, temperature: 0 } });
createAgent({ model: v3, store: memoryStore() });
createAgent({ model: v2, store: memoryStore() });

// Any model of either interface, as a provider package types it.
export function fromV3(model: LanguageModelV3): Model {
  return aiSdkModel(model);
}
// ai@5's `LanguageModel` is a model id string or a `LanguageModelV2`; ai@6's a string, a V3 or a V2 model.
export function fromV2(model: Exclude<LanguageModelAi5, string>): Model {
  return aiSdkModel(model);
}
export function fromAi6(model: Exclude<LanguageModelAi6, string>): Model {
  return aiSdkModel(model);
}
// Settings are typed: a wrong one does not compile.
// @ts-expect-error temperature is a number
aiSdkModel(new MockLanguageModelV3(), { settings: { temperature: "hot" } });
// @ts-expect-error an unknown option key does not compile (and is refused at run time)
aiSdkModel(new MockLanguageModelV3(), { model: "x" });
export type { AiSdkLanguageModel };

// What the adapter hands `doGenerate` / `doStream` is each version's call options (the published type leaves
// the parameter open so that any model fits; this is where the prompt it writes is checked against the spec).
type V2CallOptions = Parameters<Exclude<LanguageModelAi5, string>["doGenerate"]>[0];
export const asV3 = (o: AiSdkCallOptions): LanguageModelV3CallOptions => o;
export const asV2 = (o: AiSdkCallOptions): V2CallOptions => o;
