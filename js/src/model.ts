// The model interface: what a JS model provider implements (one attempt per call; the core retries).
import type { AbortSignalLike, Json, ModelRequest, Usage } from "./types.js";

/**
 * A model's answer. A tool call without an id gets one. Written in TS: the core reads it more leniently than its
 * own `ModelResponse` (every field optional, ids generated).
 */
export interface ModelResponse {
  text?: string;
  toolCalls?: Array<{ id?: string; name: string; args?: Json }>;
  usage?: Partial<Usage>;
  /** The provider's stop reason: `length` / `max_tokens`, `refusal`, `content_filter` end the run with that reason. */
  stopReason?: string;
  /** Reasoning blocks as the provider sent them (e.g. Anthropic thinking), kept and sent back unchanged. */
  reasoning?: Json[];
}

/**
 * A model provider: one attempt per call (the runtime retries). Reject with an error carrying `status` (HTTP
 * status) and optionally `retryAfterMs` for provider failures: 429/5xx are retried, 401/403/400 are not. Any
 * other rejection is a network error (retried).
 */
export interface Model {
  /** Model id (part of the agent fingerprint). */
  id: string;
  /**
   * One attempt at the next turn. `request.messages` is the whole transcript, in an array of its own; the
   * messages in it are frozen (the package keeps each running run's transcript and shares them between requests).
   * `signal` is aborted when the runtime stops waiting for this answer (the run was aborted): cancel the
   * request (pass it to `fetch`); what the call resolves after that is not read.
   */
  generate(request: ModelRequest, stream?: ModelStream, signal?: AbortSignalLike): Promise<ModelResponse>;
}

/**
 * Given to `generate` when someone listens to the run's events (`agent.stream`, `onEvent`): a model that streams
 * hands each increment over as it arrives (before its promise resolves); they are emitted as `text.delta` /
 * `reasoning.delta` events. The answer it resolves is what is recorded; the increments are not.
 */
export interface ModelStream {
  /** More of the answer's text. */
  text(delta: string): void;
  /** More of the model's reasoning (thinking). */
  reasoning(delta: string): void;
}
