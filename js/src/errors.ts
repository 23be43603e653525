// Errors: the runtime's coded errors as JS classes, and the wrappers that turn a low-level rejection into them.

/** Every failure of the runtime: a stable `STEADFAST_*` code and whether the same call may succeed later. */
export class SteadfastError extends Error {
  readonly code: string;
  readonly retryable: boolean;
  readonly runId?: string;
  readonly approvalId?: string;
  readonly status?: number;
  readonly retryAfterMs?: number;
  readonly details?: unknown;

  constructor(
    code: string,
    message: string,
    fields: {
      retryable?: boolean;
      runId?: string;
      approvalId?: string;
      status?: number;
      retryAfterMs?: number;
      details?: unknown;
      cause?: unknown;
    } = {},
  ) {
    super(message, fields.cause === undefined ? undefined : { cause: fields.cause });
    this.name = "SteadfastError";
    this.code = code;
    this.retryable = fields.retryable ?? false;
    if (fields.runId !== undefined) this.runId = fields.runId;
    if (fields.approvalId !== undefined) this.approvalId = fields.approvalId;
    if (fields.status !== undefined) this.status = fields.status;
    if (fields.retryAfterMs !== undefined) this.retryAfterMs = fields.retryAfterMs;
    if (fields.details !== undefined) this.details = fields.details;
  }
}

/** The run waits on an approval: resolve `approvalId` before sending to `sessionId` again. */
export class SessionAwaitingApprovalError extends SteadfastError {
  readonly sessionId: string;
  declare readonly approvalId: string;

  constructor(message: string, sessionId: string, approvalId: string, cause?: unknown) {
    super("STEADFAST_SESSION_AWAITING_APPROVAL", message, { runId: sessionId, approvalId, cause });
    this.name = "SessionAwaitingApprovalError";
    this.sessionId = sessionId;
  }
}

/**
 * Throw this from a tool to reject the run instead of giving the model an error result: `send` rejects with a
 * `SteadfastError` whose code is `STEADFAST_TOOL_PROPAGATED` (`retryable` as given here, default `true`), the
 * message is this error's, and the run stays resumable (`resume`, the recovery sweep). With `status` (a server's
 * HTTP answer) the core decides `retryable` from it. Also exported as
 * `PropagatingToolError`, the name the documents use.
 */
export class PropagatedToolError extends Error {
  readonly propagate = true;
  readonly retryable: boolean;
  /**
   * The HTTP status of the failure, when a server answered with one: then the core decides whether the run may
   * be retried (5xx, 408, 429: yes; another 4xx: no), whatever `retryable` says.
   */
  readonly status?: number;

  constructor(message: string, options: { retryable?: boolean; status?: number; cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = "PropagatedToolError";
    this.retryable = options.retryable ?? true;
    if (options.status !== undefined) this.status = options.status;
  }
}

/** `PropagatedToolError` under the name the documents use. */
export const PropagatingToolError = PropagatedToolError;
/** `PropagatedToolError` under the name the documents use. */
export type PropagatingToolError = PropagatedToolError;

/** A low-level error with a `STEADFAST_*` code as the matching class (anything else unchanged). */
export function wrapError(e: unknown): unknown {
  if (e instanceof SteadfastError) return e;
  const err = e as { code?: unknown; message?: unknown } | null;
  if (!err || typeof err.code !== "string" || !err.code.startsWith("STEADFAST_")) return e;
  const f = e as { retryable?: boolean; runId?: string; approvalId?: string; status?: number; retryAfterMs?: number; details?: unknown };
  const message = String(err.message ?? err.code);
  if (err.code === "STEADFAST_SESSION_AWAITING_APPROVAL" && f.runId !== undefined && f.approvalId !== undefined) {
    return new SessionAwaitingApprovalError(message, f.runId, f.approvalId, e);
  }
  return new SteadfastError(err.code, message, { ...f, cause: e });
}

/** Awaits a low-level call's JSON answer, parsed; its rejection as a `SteadfastError`. */
export async function call<T>(p: () => Promise<string>): Promise<T> {
  let json: string;
  try {
    json = await p();
  } catch (e) {
    throw wrapError(e);
  }
  return JSON.parse(json) as T;
}

/** Runs a synchronous low-level call; its throw as a `SteadfastError`. */
export function sync<T>(f: () => T): T {
  try {
    return f();
  } catch (e) {
    throw wrapError(e);
  }
}
