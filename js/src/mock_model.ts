// The scripted mock model (offline tests and demos), written in TS.
import { knownKeys } from "./options.js";
import { SteadfastError } from "./errors.js";
import type { Model, ModelResponse } from "./model.js";
import type { Json, ModelRequest, Usage } from "./types.js";

/** A scripted turn of `mockModel`: final text, tool calls, or a provider error. */
export type MockTurn =
  | string
  | { text?: string; toolCalls: Array<{ name: string; args?: Json }>; usage?: Partial<Usage> }
  | { error: { status: number; retryAfterMs?: number; message?: string } };

/** A scripted model with a record of its calls. */
export interface MockModel extends Model {
  /** Every request so far. */
  readonly calls: ModelRequest[];
}

/** Options of `mockModel`. */
export interface MockModelOptions {
  /** Model id (default `"mock"`). */
  id?: string;
  /**
   * `"sequential"` (default): call n gets `script[n]`, shared by every agent using this model.
   * `"by-turn"`: a call gets `script[k]`, k = the assistant messages already in the transcript.
   */
  mode?: "sequential" | "by-turn";
}

/** An HTTP-shaped provider error, as `mockModel` throws it. */
export class ProviderHttpError extends Error {
  readonly status: number;
  readonly retryAfterMs?: number;

  constructor(status: number, message: string, retryAfterMs?: number) {
    super(message);
    this.name = "ProviderHttpError";
    this.status = status;
    if (retryAfterMs !== undefined) this.retryAfterMs = retryAfterMs;
  }
}

/** A model that answers from a script (offline tests and demos). */
export function mockModel(script: MockTurn[], options: MockModelOptions = {}): MockModel {
  if (!Array.isArray(script)) {
    throw new SteadfastError("STEADFAST_CONFIG_INVALID", "mockModel(script) needs an array of turns");
  }
  knownKeys(options, "mockModel options");
  const calls: ModelRequest[] = [];
  const mode = (options ?? {}).mode ?? "sequential";
  return {
    id: (options ?? {}).id ?? "mock",
    calls,
    async generate(request: ModelRequest): Promise<ModelResponse> {
      const index = mode === "sequential" ? calls.length : request.messages.filter((m) => m.role === "assistant").length;
      calls.push(request);
      const turn = script[index];
      if (turn === undefined) {
        throw new SteadfastError(
          "STEADFAST_MODEL_SCRIPT_EXHAUSTED",
          `mock model script ran out: call #${calls.length} (step ${request.step}) wants turn ${index + 1} but the script has ${script.length}`,
          { runId: request.runId },
        );
      }
      if (typeof turn === "string") return { text: turn, usage: { inputTokens: 10, outputTokens: 5 }, stopReason: "stop" };
      if ("error" in turn) {
        const { status, retryAfterMs, message } = turn.error;
        throw new ProviderHttpError(status, message ?? `mock provider error ${status}`, retryAfterMs);
      }
      return {
        text: turn.text ?? "",
        toolCalls: turn.toolCalls.map((c, i) => ({ id: `call_${index}_${i}`, name: c.name, args: c.args ?? {} })),
        usage: { inputTokens: 10, outputTokens: 5, ...turn.usage },
        stopReason: "tool_calls",
      };
    },
  };
}
