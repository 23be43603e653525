// Shared by the workerd tests: an HTTP API caller bound to a bearer token. `call(target, method, path, body,
// headers, signal)` dispatches to a Miniflare instance (or anything with dispatchFetch) and returns the status,
// the body parsed as JSON when it is JSON (else the text), the raw text and the headers.
export function apiCaller(token, base = "http://localhost") {
  return async function call(target, method, p, body, headers = {}, signal) {
    const init = { method, headers: { authorization: `Bearer ${token}`, ...headers }, signal };
    if (body !== undefined) init.body = typeof body === "string" ? body : JSON.stringify(body);
    const res = await target.dispatchFetch(base + p, init);
    const text = await res.text();
    let json;
    try {
      json = JSON.parse(text);
    } catch {
      json = text;
    }
    return { status: res.status, json, text, headers: res.headers };
  };
}

/// The call key steadfast sends a call as its idempotency key (src/core/idempotency.rs `call_key`): the first 32
/// hex digits of SHA-256 over "steadfast call key\n", the scope's length, ':', the scope and the call id. The
/// scope is the run's `keyScope` (its checkpoint, e.g. from `GET /runs/{id}/history?limit=1`).
export async function callKey(scope, callId) {
  const { createHash } = await import("node:crypto");
  const bytes = `steadfast call key\n${Buffer.byteLength(scope)}:${scope}${callId}`;
  return createHash("sha256").update(bytes, "utf8").digest("hex").slice(0, 32);
}
