// The model interface: what a JS model provider implements (one attempt per call; the core retries).
import type { Json, ModelRequest, Usage } from "./types.js";

/**
 * A model's answer. A tool call without an id gets one. Written in TS: the core reads it more leniently than its
 * own `ModelResponse` (every field optional, ids generated).
 */
export interface ModelResponse {
  text?: string;
  toolCalls?: Array<{ id?: string; name: string; args?: Json }>;
  usage?: Partial<Usage>;
  stopReason?: string;
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
   */
  generate(request: ModelRequest): Promise<ModelResponse>;
}
