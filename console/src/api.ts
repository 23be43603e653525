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
