// Sessions: `agent.session({ id })`, a multi-turn conversation whose every turn is its own checkpointed run
// `<id>.turn-<n>` (the Rust runtime's `Session`, src/runtime/session.rs; this module translates it).
import { knownKeys } from "./options.js";
import { call, SteadfastError } from "./errors.js";
import type { SessionFork } from "./generated/SessionFork.js";
import type { SessionForkOptions } from "./generated/SessionForkOptions.js";
import type { SessionTurn } from "./generated/SessionTurn.js";
import type { AbortSignalLike, Input, Json, NothingToResume, RunEvent, RunResult } from "./types.js";

export type { SessionFork, SessionForkOptions, SessionTurn };

/** Options of `session.send` (those of `agent.send` without `sessionId`). */
export interface SessionSendOptions {
  /** Business state the session's first turn starts with (later turns carry the previous turn's). */
  businessState?: Json;
  /** Steering: while the newest turn is unfinished, a message to it (see `SendOptions.queue`) instead of the next turn. */
  queue?: boolean;
  /** With `queue`: stop the turn's calls that have not started when the message is applied. */
  interrupt?: boolean;
  /** Return the turn's events in `result.events`. */
  events?: boolean;
  /** Called with each event as it happens (a throwing callback is ignored). */
  onEvent?: (event: RunEvent) => void;
  /** Aborts the turn: it resolves `in-progress` with finishReason `"aborted"`; `session.resume()` finishes it. */
  signal?: AbortSignalLike;
}

/** Options of `session.resume`. */
export type SessionResumeOptions = Omit<SessionSendOptions, "businessState">;

/**
 * A session (`agent.session({ id })`): each turn is its own checkpointed run `<id>.turn-<n>` (n from 1), which
 * starts from the previous turn's finished conversation. Cheap: it holds the agent and the id; every method
 * reads the store, so two handles (or two processes over one store) see the same session.
 */
export interface Session {
  /** The session id. */
  readonly id: string;
  /**
   * Sends the next turn: an interrupted newest turn is finished first (its pending calls, then the model), then
   * turn n+1 starts from the conversation so far with `input`. Throws `SessionAwaitingApprovalError`
   * (`STEADFAST_SESSION_AWAITING_APPROVAL`) while the newest turn waits on an approval, running nothing, and
   * `STEADFAST_SESSION_BUSY` while another execution runs the session (send again later).
   */
  send(input: Input, options?: SessionSendOptions): Promise<RunResult>;
  /**
   * Finishes an interrupted newest turn; `NothingToResume` (`{sessionId, resumed: false, reason: "nothing to
   * resume"}`, the answer of `POST /sessions/{id}/resume`) when there is none (no turn, or the newest is finished).
   */
  resume(options?: SessionResumeOptions): Promise<RunResult | NothingToResume>;
  /** The session's turns, newest first (`limit`: at most that many; default every turn, one store read each). */
  history(options?: { limit?: number }): Promise<SessionTurn[]>;
  /**
   * A new session whose conversation is this one's as of turn `fromStep` (its turn 1; default id
   * `<id>-fork-<n>`). Refuses an unknown turn (`STEADFAST_CHECKPOINT_NOT_FOUND`), a turn waiting on an approval
   * (`STEADFAST_SESSION_AWAITING_APPROVAL`) and a `newId` that has turns (`STEADFAST_SESSION_EXISTS`). This
   * session is unchanged.
   */
  fork(options: SessionForkOptions): Promise<SessionFork>;
  /**
   * Drops an unfinished newest turn (interrupted, failing, or waiting on an approval), so the session
   * continues from the turn before; resolves the dropped turn's run id, or `null`. A dropped turn's approval
   * stays listed until someone decides it: that fails with `STEADFAST_APPROVAL_ORPHANED`, runs nothing and
   * withdraws it.
   */
  discardPending(): Promise<string | null>;
  /** Deletes every turn; a later send starts the session over at turn 1. Resolves how many turns were deleted. */
  delete(): Promise<number>;
}

/** The low-level event callback of an `onEvent` option (`STEADFAST_INVALID_INPUT` when it is not a function). */
export function eventCallback(onEvent: ((e: RunEvent) => void) | undefined): ((json: string) => void) | null {
  if (onEvent === undefined || onEvent === null) return null;
  if (typeof onEvent !== "function") throw new SteadfastError("STEADFAST_INVALID_INPUT", "onEvent must be a function");
  return (json: string) => onEvent(JSON.parse(json) as RunEvent);
}

/** The low-level agent's session methods (src/front/bindings/mod.rs; structural, so the published types do not
 * reach into the wasm-bindgen declarations). */
export interface LowSessions {
  sessionSend(id: string, requestJson: string, optionsJson: string | null, onEvent: ((json: string) => void) | null, signal: unknown): Promise<string>;
  sessionResume(id: string, optionsJson: string | null, onEvent: ((json: string) => void) | null, signal: unknown): Promise<string>;
  sessionHistory(id: string, limit?: number | null): Promise<string>;
  sessionFork(id: string, optionsJson: string): Promise<string>;
  sessionDiscardPending(id: string): Promise<string>;
  sessionDelete(id: string): Promise<string>;
}

/** The send document the core reads (`{input, businessState?, queue?, interrupt?}`, the HTTP API's body of `POST /runs/{id}`). */
export function sendRequest(input: Input, opts: { businessState?: Json; queue?: boolean; interrupt?: boolean }): string {
  return JSON.stringify({ input, businessState: opts.businessState, queue: opts.queue, interrupt: opts.interrupt });
}

/** The session handle over the low-level agent (`id` checked already). */
export function sessionHandle(low: LowSessions, id: string): Session {
  return {
    id,
    // `?? {}`: a `null` options object reads as none.
    send: (input, given) => {
      const opts = given ?? {};
      return call(() => {
        knownKeys(opts, "session send options");
        return low.sessionSend(
          id,
          sendRequest(input, opts),
          JSON.stringify({ events: opts.events ?? false }),
          eventCallback(opts.onEvent),
          opts.signal ?? null,
        );
      });
    },
    resume: (given) => {
      const opts = given ?? {};
      return call(() => {
        knownKeys(opts, "session resume options");
        return low.sessionResume(id, JSON.stringify({ events: opts.events ?? false }), eventCallback(opts.onEvent), opts.signal ?? null);
      });
    },
    history: (opts) =>
      call(() => {
        knownKeys(opts, "session history options");
        return low.sessionHistory(id, opts?.limit);
      }),
    fork: (opts) => call(() => low.sessionFork(id, JSON.stringify(opts ?? null))),
    discardPending: () => call(() => low.sessionDiscardPending(id)),
    delete: () => call(() => low.sessionDelete(id)),
  };
}
