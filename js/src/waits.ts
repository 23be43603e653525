// Durable waits: what a tool's `ctx` gains to answer "pending" instead of a result (a question to a person, an
// event another system delivers, a time), and the types of `agent.events`. Each helper only builds a marker; the
// core decides what a wait is (src/front/bindings/tools.rs reads the marker, src/core/wait.rs checks it).
import type { EventDelivery } from "./generated/EventDelivery.js";
import type { ToolContext as GeneratedToolContext } from "./generated/ToolContext.js";
import type { RunEvent } from "./types.js";

/** The property a wait marker carries its request under (a symbol: no JSON result can be taken for a marker). */
const WAIT = Symbol.for("steadfast.wait");

/** What a wait is, as the marker tells the core (times in ms since the epoch; checked there). */
type WaitSpec =
  | { kind: "question"; question: unknown; choices?: unknown }
  | { kind: "event"; deadline?: unknown }
  | { kind: "timer"; at: unknown }
  | { kind: "timer"; afterMs: unknown };

/**
 * "Pending": what a tool returns to park its call on a wait instead of answering (`return ctx.askQuestion(…)`,
 * `ctx.waitForEvent(…)`, `ctx.sleepUntil(…)`, `ctx.sleepFor(…)`). The run pauses `awaiting-approval` once no
 * other call of its turn runs, holds no lease while it waits, and the wait's resolution becomes the call's result.
 * Only the helpers make one; a wait the core cannot record (a bad time, an empty question) is an `InvalidWait`
 * error result the model reads.
 */
export interface ToolWait {
  /** What the call waits for. */
  readonly kind: "question" | "event" | "timer";
  /** Only the helpers make one. */
  readonly [toolWaitBrand]: true;
}

declare const toolWaitBrand: unique symbol;

/** A time: ms since the epoch, or a `Date`. */
export type WaitTime = number | Date;

/** Options of `ctx.waitForEvent`. */
export interface WaitForEventOptions {
  /**
   * When to stop waiting: the call then gets a `timeout` error result (`{"error":"timeout",…}`) and the run goes
   * on, resolved by the recovery sweep (`agent.sweep()`). Without one, the wait lasts until a delivery.
   */
  deadline?: WaitTime;
}

/** What a tool's `ctx` offers to answer with a wait (see `ToolWait`). */
export interface WaitHelpers {
  /**
   * Waits for an event delivered with this call's `ctx.waitToken` (`agent.events.deliver(token, payload)`,
   * `POST /events/{token}`): the payload becomes the call's result (a string as it is, any other value as JSON).
   * Hand the token to whoever will deliver (a webhook's URL, a queue message) before returning this.
   */
  waitForEvent(options?: WaitForEventOptions): ToolWait;
  /**
   * Asks a person: the question is listed by `agent.approvals.list()` (`kind: "question"`) and answered with
   * `agent.approvals.resolve({ id, answer })`; the answer becomes the call's result. With `choices`, only one
   * of them is accepted. `approved: false` declines it (an error result with the note).
   */
  askQuestion(question: string, choices?: readonly string[]): ToolWait;
  /** Wakes the run at `at` (by the recovery sweep, `agent.sweep()`, once the time came; never before). */
  sleepUntil(at: WaitTime): ToolWait;
  /** Wakes the run `ms` milliseconds after the call started (`ctx.now`). */
  sleepFor(ms: number): ToolWait;
}

/**
 * What a tool's `execute(args, ctx)` gets as `ctx`: the call's ids and keys (`runId`, `toolCallId`,
 * `approvalId`, `idempotencyKey`), its wait token and start time (`waitToken`, `now`), and the helpers that
 * answer with a wait.
 */
export type ToolContext = GeneratedToolContext & WaitHelpers;

const time = (t: unknown): unknown => (t instanceof Date ? t.getTime() : t);

/** The marker of `spec`: its kind, and the spec under the symbol the core reads (not enumerable, not JSON). */
const marker = (spec: WaitSpec): ToolWait =>
  Object.defineProperty({ kind: spec.kind }, WAIT, { value: spec, enumerable: false }) as unknown as ToolWait;

/** The context a tool's `execute` gets: the core's JSON, with the wait helpers. */
export function toolContext(ctxJson: string): ToolContext {
  const ctx = JSON.parse(ctxJson) as GeneratedToolContext;
  const helpers: WaitHelpers = {
    waitForEvent: (options) => {
      const deadline = (options as WaitForEventOptions | undefined)?.deadline;
      return marker(deadline === undefined ? { kind: "event" } : { kind: "event", deadline: time(deadline) });
    },
    askQuestion: (question, choices) =>
      marker(choices === undefined ? { kind: "question", question } : { kind: "question", question, choices }),
    sleepUntil: (at) => marker({ kind: "timer", at: time(at) }),
    sleepFor: (ms) => marker({ kind: "timer", afterMs: ms }),
  };
  // Not enumerable: a tool that returns or logs its ctx as JSON sees the core's fields only.
  for (const [name, f] of Object.entries(helpers)) {
    Object.defineProperty(ctx, name, { value: f, enumerable: false });
  }
  return ctx as ToolContext;
}

/** Options of `agent.events.deliver`. */
export interface DeliverOptions {
  /** Called with each event of the resumed run as it happens. */
  onEvent?: (event: RunEvent) => void;
}

/**
 * What a delivery did (the generated `EventDelivery`): `waitId`, `duplicate` (the same payload had been
 * delivered already: nothing changed) and `run`, the run after it (resumed to its next pause or its end).
 */
export type { EventDelivery };

/** The events API of an agent (`agent.events`). */
export interface Events {
  /**
   * Delivers `payload` (any JSON value) to the event wait whose token is `token` (a tool's `ctx.waitToken`,
   * `result.waits[i].token`): it becomes the call's result and the run resumes once, here, whatever process
   * paused it. The same payload again is acknowledged (`duplicate: true`) and changes nothing; a token that
   * opens no wait (malformed, guessed, spent, its run deleted) is refused with `STEADFAST_WAIT_NOT_FOUND`, the
   * same answer in every case; another payload after the wait was resolved, `STEADFAST_WAIT_ALREADY_RESOLVED`;
   * a payload over 256 KiB of JSON, `STEADFAST_PAYLOAD_TOO_LARGE`; one nested over 64 levels (or not JSON),
   * `STEADFAST_INVALID_INPUT`.
   */
  deliver(token: string, payload: unknown, options?: DeliverOptions): Promise<EventDelivery>;
}
