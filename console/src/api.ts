// The console's only way to the Worker: the documented HTTP API (README "HTTP API"), same origin, with the
// bearer token from sessionStorage in the Authorization header. The token never goes into a URL.

const TOKEN_KEY = "steadfast.token";

export const token = {
  get: (): string | null => sessionStorage.getItem(TOKEN_KEY),
  set: (t: string): void => sessionStorage.setItem(TOKEN_KEY, t),
  clear: (): void => sessionStorage.removeItem(TOKEN_KEY),
};

/** A refused request: the API's coded error (`STEADFAST_…`), or what went wrong reaching it. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/** A path segment (run and approval ids are plain, but nothing is put into a path unescaped). */
export const seg = encodeURIComponent;

export async function api<T>(method: string, path: string, body?: unknown, tok = token.get()): Promise<T> {
  const headers: Record<string, string> = { authorization: `Bearer ${tok ?? ""}` };
  if (body !== undefined) headers["content-type"] = "application/json";
  let res: Response;
  try {
    res = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store",
      credentials: "omit",
      redirect: "error",
    });
  } catch (e) {
    throw new ApiError(0, "CONSOLE_NETWORK", `${method} ${path} did not reach the Worker: ${String(e)}`);
  }
  // No content (`GET /demo/counts` without the demo tools): nothing to parse.
  if (res.status === 204) return null as T;
  const text = await res.text();
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw new ApiError(res.status, "CONSOLE_BAD_RESPONSE", `${method} ${path} answered ${res.status} without JSON`);
  }
  if (!res.ok) {
    const e = (parsed as { error?: { code?: string; message?: string } }).error;
    throw new ApiError(res.status, e?.code ?? `HTTP_${res.status}`, e?.message ?? `${method} ${path}: ${res.status}`);
  }
  return parsed as T;
}

/** One event of a watched run (`GET /runs/{id}/events`): its type and fields. */
export type WatchedEvent = { type: string; [k: string]: unknown };

/**
 * Watches a run: `GET /runs/{id}/events` from the journal position `after`, read as it streams (fetch, so the
 * token goes in the Authorization header, never in a URL). `onEvent` gets each event, `onPosition` each journal
 * cursor (`12`, `12.done`). Resolves when the stream ends (the run finished or paused, the watch's time ran out)
 * or `signal` aborts it; rejects with an {@link ApiError} when the watch is refused.
 */
export async function watch(
  path: string,
  after: string,
  signal: AbortSignal,
  onEvent: (e: WatchedEvent) => void,
  onPosition: (id: string) => void,
  tok = token.get(),
): Promise<void> {
  const res = await fetch(path, {
    headers: { authorization: `Bearer ${tok ?? ""}`, accept: "text/event-stream", "last-event-id": after },
    cache: "no-store",
    credentials: "omit",
    redirect: "error",
    signal,
  });
  if (res.status === 204) return;
  if (!res.ok || !res.body) {
    throw new ApiError(res.status, `HTTP_${res.status}`, `watching ${path}: ${res.status}`);
  }
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += value;
    let end: number;
    while ((end = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, end);
      buf = buf.slice(end + 2);
      if (block.startsWith(":")) continue;
      const lines = block.split("\n");
      const id = lines.find((l) => l.startsWith("id: "));
      const data = lines.find((l) => l.startsWith("data: "));
      if (data) onEvent(JSON.parse(data.slice(6)) as WatchedEvent);
      if (id) onPosition(id.slice(4));
    }
  }
}
