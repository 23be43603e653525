//! [`McpTool`]: the tools of an MCP server (Model Context Protocol, Streamable HTTP transport) as the agent's
//! own durable tools (issue 28). The Worker's configuration names servers (`"mcp": [{"url", "headers"}]`); each
//! tool a server lists becomes a [`Tool`] with the server's name, description and input schema (which enter the
//! agent's fingerprint: a server whose tools changed is agent drift).
//!
//! * **The client.** JSON-RPC 2.0 over HTTP `POST` with `Accept: application/json, text/event-stream`:
//!   `initialize` (protocol [`PROTOCOL_VERSION`], the newest `@modelcontextprotocol/sdk` 1.32.2 speaks; a server
//!   may answer any of [`SUPPORTED_PROTOCOL_VERSIONS`]), then the `notifications/initialized` notification; every
//!   later message carries the `Mcp-Session-Id` the server gave (if any) and `MCP-Protocol-Version`. A reply is
//!   a JSON body or an event stream (`text/event-stream`), whose `message` event carrying our request's id is
//!   the reply (reading stops there; notifications before it are skipped). A session the server forgot (HTTP
//!   404 to a request naming it) is initialized again once, and the request sent again.
//! * **Sans-IO.** Building requests ([`http_request`], [`rpc_request`]), reading replies ([`ReplyReader`]) and
//!   mapping results ([`parse_tool_list`], [`call_output`], [`Failure`]) are pure and tested natively with
//!   canned bytes; [`McpConnection`] does the exchanges over the platform's [`HttpClient`].
//! * **Calls.** `tools/call` sends `params._meta.idempotencyKey` = [`ToolContext::idempotency_key`] (also as
//!   the `Idempotency-Key` header): the same call re-run on resume carries the same key. A result's
//!   `structuredContent` is the output as JSON, else its `content` (text parts joined by newlines; other parts
//!   summarised); `isError: true` is an `McpToolError` result the model reads, a JSON-RPC error an `McpError`
//!   result. A server that cannot be reached, times out, or answers 5xx, 429 or 408 fails the run attempt with
//!   `STEADFAST_TOOL_PROPAGATED` (retryable): the run stays resumable and the sweep retries it. A server that
//!   refuses the request otherwise (401, 403, 400, …) fails it with the same code, not retryable: the sweep
//!   leaves the run (retrying would meet the same refusal) until it is resumed once the cause is fixed — as the
//!   npm package's `mcpTools` does.
//! * **When tools are listed** ([`McpCache`]): once per isolate and server, again when the list is older than
//!   [`LIST_TTL_MS`] or the server's configuration (URL, headers with their secrets' values, timeout) changed.
//!   A request costs no subrequest for a fresh list and 3 (or 2 + pages) for a stale one, against the 1,000
//!   (Paid: 10,000) subrequests of an invocation; a list per request would add them to every API call and every
//!   sweep. A server that cannot be listed fails the request (`STEADFAST_TOOL_PROPAGATED` when it is down,
//!   `STEADFAST_CONFIG_INVALID` when its answer is unusable) before anything is recorded — unless this isolate
//!   listed it before and it is down (unreachable, 5xx, 429): then its last list is used (its calls fail
//!   retryably until it is back), so status reads and the sweep of other runs go on.
//! * **The URL's path and query are secret**, as for webhooks: messages show the origin only.

use crate::core::error::{cap_chars, Error, ErrorCode, Result};
use crate::core::ids::is_tool_name;
use crate::core::wire::json_text;
use crate::http::{HttpClient, HttpRequest, HttpResponse};
use crate::runtime::traits::{Tool, ToolContext, ToolError, ToolOutput};
use crate::tools::webhook::{check_header, Allowlist, ParsedUrl};
use async_trait::async_trait;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{json, Value};
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;

/// The protocol version asked for (`LATEST_PROTOCOL_VERSION` of `@modelcontextprotocol/sdk` 1.32.2).
pub const PROTOCOL_VERSION: &str = "2025-11-25";
/// The versions a server may answer `initialize` with (the Streamable HTTP transport's; older ones had none).
pub const SUPPORTED_PROTOCOL_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26"];
/// Default timeout of one exchange with a server (ms).
pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;
/// Longest reply read (bytes); a longer one is refused.
pub const MAX_REPLY_BYTES: usize = 2 * 1024 * 1024;
/// How long a listed set of tools is used before the server is listed again (ms).
pub const LIST_TTL_MS: u64 = 60_000;
/// Most `tools/list` pages read from one server.
pub const MAX_LIST_PAGES: usize = 20;
/// Characters of a refusal's body quoted in messages.
const EXCERPT_CHARS: usize = 300;

/// Headers the client sets itself; configured headers may not replace them.
const RESERVED_HEADERS: &[&str] = &["accept", "mcp-session-id", "mcp-protocol-version", "last-event-id"];

fn default_timeout_ms() -> u64 {
    DEFAULT_TIMEOUT_MS
}

fn config_err(message: impl Into<String>) -> Error {
    Error::new(ErrorCode::ConfigInvalid, message)
}

/// A configured header's value: a plain string, or `{"secret": "NAME", "prefix"?: "Bearer "}` — the value of
/// the Worker secret `NAME` (after `prefix`), read when the agent is built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeaderValue {
    /// Sent as written.
    Plain(String),
    /// A secret's value, after `prefix`.
    Secret {
        /// The NAME of the secret (letters, digits, `_`).
        secret: String,
        /// Text before the value (e.g. `Bearer `).
        prefix: String,
    },
}

impl Serialize for HeaderValue {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            HeaderValue::Plain(v) => s.serialize_str(v),
            HeaderValue::Secret { secret, prefix } if prefix.is_empty() => json!({"secret": secret}).serialize(s),
            HeaderValue::Secret { secret, prefix } => json!({"secret": secret, "prefix": prefix}).serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for HeaderValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let wrong = || {
            D::Error::custom(
                "a header value is a string or {\"secret\": \"NAME\"} (optionally with \"prefix\": \"Bearer \")",
            )
        };
        match Value::deserialize(d)? {
            Value::String(v) => Ok(HeaderValue::Plain(v)),
            Value::Object(o) => {
                if o.keys().any(|k| k != "secret" && k != "prefix") {
                    return Err(wrong());
                }
                let text = |k: &str| match o.get(k) {
                    None => Ok(None),
                    Some(Value::String(s)) => Ok(Some(s.clone())),
                    Some(_) => Err(wrong()),
                };
                let secret = text("secret")?.ok_or_else(wrong)?;
                Ok(HeaderValue::Secret { secret, prefix: text("prefix")?.unwrap_or_default() })
            }
            _ => Err(wrong()),
        }
    }
}

/// An MCP server as configured (the `mcp` entries of the Worker's configuration).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct McpServerConfig {
    /// The server's Streamable HTTP endpoint: `https://` or `http://`, on an allow-listed host.
    pub url: String,
    /// Extra headers sent with every message: plain strings or `{"secret": "NAME"}`.
    #[serde(default)]
    pub headers: BTreeMap<String, HeaderValue>,
    /// Give up on one exchange after this many milliseconds (default 30,000).
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
}

impl McpServerConfig {
    /// A server at `url` with no headers and the default timeout.
    pub fn new(url: impl Into<String>) -> McpServerConfig {
        McpServerConfig { url: url.into(), headers: BTreeMap::new(), timeout_ms: DEFAULT_TIMEOUT_MS }
    }

    /// Checks the URL against `allowlist`, the header names and plain values, and the secrets' names. The
    /// messages name the field (`url`, `headers.X`) without the URL's path or query.
    pub fn check(&self, allowlist: &Allowlist) -> std::result::Result<ParsedUrl, Vec<String>> {
        let mut errs = check_headers(&self.headers, RESERVED_HEADERS, "is set by the MCP client itself");
        let url = match ParsedUrl::parse(&self.url) {
            Ok(url) => url,
            Err(e) => {
                errs.push(e.message);
                return Err(errs);
            }
        };
        if let Err(e) = allowlist.check(&url.host) {
            errs.push(format!("url: {}", e.message));
        }
        if errs.is_empty() {
            Ok(url)
        } else {
            Err(errs)
        }
    }

    /// The headers to send, each secret replaced by its value (`secret(name)`). Fails naming the header and
    /// the secret (and how to provide it) when a secret is missing, or when its value cannot be a header value.
    pub fn resolve_headers(
        &self,
        secret: &dyn Fn(&str) -> Option<String>,
    ) -> std::result::Result<Vec<(String, String)>, String> {
        resolve_headers(&self.headers, secret)
    }
}

/// Checks configured headers: their names and plain values, the secrets' names, and that none is one of
/// `reserved` (lower-case names; `why` says who sets them). Each message names the header (`headers.X`).
pub fn check_headers(headers: &BTreeMap<String, HeaderValue>, reserved: &[&str], why: &str) -> Vec<String> {
    let mut errs = Vec::new();
    for (k, v) in headers {
        let lower = k.to_ascii_lowercase();
        let plain = match v {
            HeaderValue::Plain(p) => p.as_str(),
            HeaderValue::Secret { secret, prefix } => {
                if secret.is_empty() || !secret.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                    errs.push(format!(
                        "headers.{k}: secret {secret:?} must be the NAME of a secret (letters, digits, '_'), not its \
                         value"
                    ));
                }
                prefix.as_str()
            }
        };
        if reserved.contains(&lower.as_str()) {
            errs.push(format!("headers.{k}: {why} and cannot be configured"));
        } else if let Err(m) = check_header(k, plain) {
            errs.push(format!("headers.{k}: {m}"));
        }
    }
    errs
}

/// Configured headers to send, each secret replaced by its value (`secret(name)`). Fails naming the header and
/// the secret (and how to provide it) when a secret is missing, or when its value cannot be a header value.
pub fn resolve_headers(
    headers: &BTreeMap<String, HeaderValue>,
    secret: &dyn Fn(&str) -> Option<String>,
) -> std::result::Result<Vec<(String, String)>, String> {
    let mut out = Vec::with_capacity(headers.len());
    for (k, v) in headers {
        let value = match v {
            HeaderValue::Plain(p) => p.clone(),
            HeaderValue::Secret { secret: name, prefix } => {
                let value = secret(name).filter(|s| !s.is_empty()).ok_or_else(|| {
                    format!(
                        "headers.{k}: the secret {name} is missing: `npx wrangler secret put {name}` (locally: \
                         {name}=... in .dev.vars)"
                    )
                })?;
                if value.chars().any(|c| (c.is_control() && c != '\t') || c == '\u{7f}') {
                    return Err(format!(
                        "headers.{k}: the value of the secret {name} contains control characters (CR, LF, …)"
                    ));
                }
                format!("{prefix}{value}")
            }
        };
        out.push((k.clone(), value));
    }
    Ok(out)
}

/// Where a connection sends its messages: the checked URL, the resolved headers and the timeout.
#[derive(Clone, PartialEq, Eq)]
pub struct Target {
    /// The checked URL (its path and query are secret: messages show [`ParsedUrl::origin`]).
    pub url: ParsedUrl,
    /// Configured headers, secrets resolved.
    pub headers: Vec<(String, String)>,
    /// Timeout of one exchange (ms).
    pub timeout_ms: u64,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Neither the path nor the header values (secrets) are shown.
        let names: Vec<&str> = self.headers.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("Target").field("origin", &self.url.origin()).field("headers", &names).finish()
    }
}

/// What a client keeps of its session with a server.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionInfo {
    /// The `Mcp-Session-Id` the server gave (stateless servers give none).
    pub session_id: Option<String>,
    /// The protocol version agreed on.
    pub protocol_version: String,
}

/// A JSON-RPC request's body.
pub fn rpc_request(id: u64, method: &str, params: Value) -> String {
    json_text(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
}

/// A JSON-RPC notification's body.
pub fn rpc_notification(method: &str) -> String {
    json_text(&json!({"jsonrpc": "2.0", "method": method}))
}

/// `initialize`'s params: our protocol version, no client capabilities, our name and version.
pub fn initialize_params() -> Value {
    json!({
        "protocolVersion": PROTOCOL_VERSION,
        "capabilities": {},
        "clientInfo": {"name": "steadfast", "version": env!("CARGO_PKG_VERSION")},
    })
}

/// `tools/call`'s params: the tool, its arguments and the call's idempotency key as `_meta.idempotencyKey`.
pub fn call_params(name: &str, args: &Value, idempotency_key: &str) -> Value {
    json!({"name": name, "arguments": args, "_meta": {"idempotencyKey": idempotency_key}})
}

/// The HTTP request carrying one message to `target`, within `session` (after `initialize`).
pub fn http_request(target: &Target, session: Option<&SessionInfo>, body: String) -> HttpRequest {
    let mut headers = Vec::with_capacity(target.headers.len() + 4);
    headers.push(("content-type".to_string(), "application/json".to_string()));
    headers.push(("accept".to_string(), "application/json, text/event-stream".to_string()));
    if let Some(s) = session {
        if let Some(id) = &s.session_id {
            headers.push(("mcp-session-id".to_string(), id.clone()));
        }
        headers.push(("mcp-protocol-version".to_string(), s.protocol_version.clone()));
    }
    headers.extend(target.headers.iter().cloned());
    HttpRequest {
        method: "POST".into(),
        url: target.url.as_url(),
        headers,
        body: Some(body),
        timeout_ms: target.timeout_ms,
        max_response_bytes: MAX_REPLY_BYTES,
    }
}

/// Why an exchange with a server gave no result.
#[derive(Clone, Debug, PartialEq)]
pub enum Failure {
    /// Unreachable, timed out, 5xx, 429 or 408, or its event stream ended before the reply: try later.
    Unavailable {
        /// What happened (redacted to the origin).
        message: String,
        /// The server's `Retry-After`, in ms.
        retry_after_ms: Option<u64>,
    },
    /// HTTP 404 to a request naming a session: the server forgot it; initialize again.
    SessionExpired,
    /// Another HTTP status.
    Refused {
        /// The status.
        status: u16,
        /// An excerpt of the body.
        message: String,
    },
    /// A JSON-RPC error reply.
    Rpc {
        /// Its code.
        code: i64,
        /// Its message.
        message: String,
    },
    /// A reply we cannot read.
    Invalid(String),
}

impl Failure {
    /// One line for messages (`HTTP 503: …`, `JSON-RPC error -32602: …`).
    pub fn describe(&self) -> String {
        match self {
            Failure::Unavailable { message, .. } => message.clone(),
            Failure::SessionExpired => "the server no longer knows the session (HTTP 404)".into(),
            Failure::Refused { status, message } if message.is_empty() => format!("HTTP {status}"),
            Failure::Refused { status, message } => format!("HTTP {status}: {message}"),
            Failure::Rpc { code, message } => format!("JSON-RPC error {code}: {message}"),
            Failure::Invalid(m) => format!("unreadable reply: {m}"),
        }
    }
}

/// A reply: the request's `result` and the `Mcp-Session-Id` header that came with it.
#[derive(Clone, Debug, PartialEq)]
pub struct Reply {
    /// The JSON-RPC result.
    pub result: Value,
    /// The session id header, if any.
    pub session_id: Option<String>,
}

/// Reads the reply to request `id` from a response body fed chunk by chunk: a JSON body (one response or a
/// batch) or an event stream, in which case [`ReplyReader::push`] says stop as soon as the `message` event
/// answering `id` is complete.
#[derive(Debug)]
pub struct ReplyReader {
    id: Option<u64>,
    body: Vec<u8>,
    scanned: usize,
    found: Option<std::result::Result<Value, Failure>>,
}

impl ReplyReader {
    /// A reader for the reply to request `id` (`None`: a notification, which expects none).
    pub fn new(id: Option<u64>) -> ReplyReader {
        ReplyReader { id, body: Vec::new(), scanned: 0, found: None }
    }

    /// Adds a chunk of the body. Returns `false` once the reply was found in an event stream (stop reading).
    pub fn push(&mut self, chunk: &[u8]) -> bool {
        if self.found.is_some() {
            return false;
        }
        self.body.extend_from_slice(chunk);
        let first = self.body.iter().find(|b| !b.is_ascii_whitespace());
        if self.id.is_none() || matches!(first, None | Some(b'{') | Some(b'[')) {
            return true;
        }
        // An event stream: look at the events completed since the last chunk.
        let (events, end) = sse_events(&self.body, self.scanned);
        self.scanned = end;
        for (name, data) in events {
            if let Some(found) = self.match_event(&name, &data) {
                self.found = Some(found);
                return false;
            }
        }
        true
    }

    fn match_event(&self, name: &str, data: &str) -> Option<std::result::Result<Value, Failure>> {
        if name != "message" || data.is_empty() {
            return None;
        }
        let Ok(v) = serde_json::from_str::<Value>(data) else { return None };
        match_response(&v, self.id?)
    }

    /// The reply, from `response` (whose body for a 2xx answer was fed through [`ReplyReader::push`]).
    pub fn finish(self, response: &HttpResponse, sent_session: bool) -> std::result::Result<Reply, Failure> {
        let status = response.status;
        let session_id = response.header("mcp-session-id").map(str::to_string);
        if !(200..300).contains(&status) {
            return Err(status_failure(response, sent_session));
        }
        let Some(id) = self.id else { return Ok(Reply { result: Value::Null, session_id }) };
        if let Some(found) = self.found {
            return found.map(|result| Reply { result, session_id });
        }
        let cap = || Failure::Invalid(format!("the reply is longer than {MAX_REPLY_BYTES} bytes"));
        let content_type = response.header("content-type").unwrap_or("").to_ascii_lowercase();
        let body = String::from_utf8_lossy(&self.body);
        if content_type.starts_with("text/event-stream") {
            if response.truncated {
                return Err(cap());
            }
            // Every event, the last one included even without its closing blank line.
            let (mut events, end) = sse_events(&self.body, 0);
            events.extend(sse_last_event(&self.body, end));
            for (name, data) in &events {
                if let Some(found) = self.match_event(name, data) {
                    return found.map(|result| Reply { result, session_id });
                }
            }
            return Err(Failure::Unavailable {
                message: "the server's event stream ended before its reply".into(),
                retry_after_ms: None,
            });
        }
        if response.truncated {
            return Err(cap());
        }
        if !content_type.starts_with("application/json") {
            let shown = if content_type.is_empty() { "none" } else { content_type.as_str() };
            return Err(Failure::Invalid(format!(
                "HTTP {status} with content type {shown} (expected application/json or text/event-stream)"
            )));
        }
        let v: Value = serde_json::from_str(&body)
            .map_err(|e| Failure::Invalid(format!("the body is not JSON ({e}): {}", cap_chars(&body, 120))))?;
        let found = match &v {
            Value::Array(items) => items.iter().find_map(|item| match_response(item, id)),
            single => match_response(single, id),
        };
        found
            .unwrap_or_else(|| Err(Failure::Invalid(format!("no response to request {id} in the body"))))
            .map(|result| Reply { result, session_id })
    }
}

/// A non-2xx answer as a [`Failure`]: 404 to a request with a session is [`Failure::SessionExpired`]; 5xx,
/// 429 and 408 [`Failure::Unavailable`] (with `Retry-After` in seconds, as ms); the rest [`Failure::Refused`].
fn status_failure(response: &HttpResponse, sent_session: bool) -> Failure {
    let status = response.status;
    let excerpt = cap_chars(response.body.trim(), EXCERPT_CHARS);
    if status == 404 && sent_session {
        return Failure::SessionExpired;
    }
    if crate::core::classify::transient_http_status(status) {
        let retry_after_ms =
            response.header("retry-after").and_then(|v| v.trim().parse::<u64>().ok()).map(|s| s.saturating_mul(1_000));
        let message = if excerpt.is_empty() { format!("HTTP {status}") } else { format!("HTTP {status}: {excerpt}") };
        return Failure::Unavailable { message, retry_after_ms };
    }
    Failure::Refused { status, message: excerpt }
}

/// The result (or error) of the JSON-RPC response `v` when it answers request `id`; `None` for anything else
/// (another id, a notification, a request from the server).
fn match_response(v: &Value, id: u64) -> Option<std::result::Result<Value, Failure>> {
    let o = v.as_object()?;
    let same = match o.get("id")? {
        Value::Number(n) => n.as_u64() == Some(id),
        Value::String(s) => s == &id.to_string(),
        _ => false,
    };
    if !same || o.contains_key("method") {
        return None;
    }
    if let Some(e) = o.get("error") {
        let code = e.get("code").and_then(Value::as_i64).unwrap_or(0);
        let message = e.get("message").and_then(Value::as_str).unwrap_or("(no message)");
        return Some(Err(Failure::Rpc { code, message: cap_chars(message, 1_000) }));
    }
    Some(o.get("result").cloned().ok_or_else(|| Failure::Invalid(format!("response {id} has no result"))))
}

/// The events (`event` name, default `message`; `data` lines joined by newlines) completed in `body` from
/// byte `from`, and where the first incomplete one starts.
fn sse_events(body: &[u8], from: usize) -> (Vec<(String, String)>, usize) {
    let mut events = Vec::new();
    let (mut name, mut data, mut has_data) = (String::new(), String::new(), false);
    let mut pos = from;
    let mut done = from;
    while let Some(nl) = body.get(pos..).and_then(|rest| rest.iter().position(|b| *b == b'\n')) {
        let raw = &body[pos..pos + nl];
        pos += nl + 1;
        let line = String::from_utf8_lossy(raw.strip_suffix(b"\r").unwrap_or(raw));
        if line.is_empty() {
            if has_data {
                let n = if name.is_empty() { "message".to_string() } else { std::mem::take(&mut name) };
                events.push((n, std::mem::take(&mut data)));
            }
            (name, has_data) = (String::new(), false);
            data.clear();
            done = pos;
            continue;
        }
        if line.starts_with(':') {
            continue;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line.as_ref(), ""),
        };
        match field {
            "event" => name = value.to_string(),
            "data" => {
                if has_data {
                    data.push('\n');
                }
                data.push_str(value);
                has_data = true;
            }
            _ => {}
        }
    }
    (events, done)
}

/// The last event of a stream that ended without its blank line (from `from`), if it has data.
fn sse_last_event(body: &[u8], from: usize) -> Option<(String, String)> {
    let mut rest = body.get(from..)?.to_vec();
    rest.extend_from_slice(b"\n\n");
    sse_events(&rest, 0).0.into_iter().next()
}

/// A tool as a server lists it.
#[derive(Clone, Debug, PartialEq)]
pub struct McpToolSpec {
    /// Name.
    pub name: String,
    /// Description (empty when the server gives none).
    pub description: String,
    /// JSON Schema of the arguments.
    pub input_schema: Value,
}

/// A `tools/list` result: its tools and the next page's cursor. Fails naming what is wrong (a tool without a
/// name, a name the providers cannot take, a schema that is not an object).
pub fn parse_tool_list(result: &Value) -> std::result::Result<(Vec<McpToolSpec>, Option<String>), String> {
    let Some(tools) = result.get("tools").and_then(Value::as_array) else {
        return Err("the tools/list result has no \"tools\" array".into());
    };
    let mut out = Vec::with_capacity(tools.len());
    for (i, t) in tools.iter().enumerate() {
        let Some(name) = t.get("name").and_then(Value::as_str) else {
            return Err(format!("tools[{i}] has no name"));
        };
        if !is_tool_name(name) {
            return Err(format!(
                "tool {:?}: a tool name must be 1-64 characters of letters, digits, '_' or '-'",
                cap_chars(name, 80)
            ));
        }
        let input_schema = match t.get("inputSchema") {
            None => json!({"type": "object"}),
            Some(s) if s.is_object() => s.clone(),
            Some(_) => return Err(format!("tool '{name}': inputSchema is not a JSON object")),
        };
        let description = t.get("description").and_then(Value::as_str).unwrap_or("").to_string();
        out.push(McpToolSpec { name: name.to_string(), description, input_schema });
    }
    let cursor = result.get("nextCursor").and_then(Value::as_str).filter(|c| !c.is_empty()).map(str::to_string);
    Ok((out, cursor))
}

/// A `tools/call` result as the tool's output: `structuredContent` as JSON, else the `content` parts (text
/// as it is, other parts summarised, joined by newlines); `isError: true` is an `McpToolError` result the
/// model reads; anything else an `McpError` result.
pub fn call_output(result: &Value) -> std::result::Result<ToolOutput, ToolError> {
    let parts = result.get("content").and_then(Value::as_array);
    let structured = result.get("structuredContent").filter(|v| !v.is_null());
    if parts.is_none() && structured.is_none() {
        return Err(ToolError::typed(
            "McpError",
            format!("the server's reply is not a tool result: {}", cap_chars(&json_text(result), 200)),
        ));
    }
    let text = parts.map(|p| p.iter().map(content_text).collect::<Vec<_>>().join("\n")).unwrap_or_default();
    if result.get("isError").and_then(Value::as_bool) == Some(true) {
        let message = if text.is_empty() { "the tool reported an error".to_string() } else { text };
        return Err(ToolError::typed("McpToolError", message));
    }
    Ok(match structured {
        Some(v) => ToolOutput::json(v.clone()),
        None => ToolOutput::text(text),
    })
}

/// One content part as text.
fn content_text(part: &Value) -> String {
    let s = |k: &str| part.get(k).and_then(Value::as_str).unwrap_or("");
    match s("type") {
        "text" => s("text").to_string(),
        "image" | "audio" => format!("[{}: {}, {} bytes base64]", s("type"), s("mimeType"), s("data").len()),
        "resource_link" => format!("[resource: {}]", s("uri")),
        "resource" => {
            let r = part.get("resource").cloned().unwrap_or_default();
            match r.get("text").and_then(Value::as_str) {
                Some(t) => t.to_string(),
                None => format!("[resource: {}]", r.get("uri").and_then(Value::as_str).unwrap_or("")),
            }
        }
        other => format!("[{other} content]"),
    }
}

/// The error a call's [`Failure`] is: a JSON-RPC error or an unreadable reply is a result the model reads; a
/// server that is down (or forgot the session) fails the run attempt retryably, one that refuses the request
/// (401, 403, another 4xx) not retryably.
pub fn call_failure(origin: &str, failure: Failure) -> ToolError {
    match failure {
        Failure::Rpc { code, message } => ToolError::typed("McpError", format!("{message} (JSON-RPC error {code})")),
        Failure::Invalid(m) => ToolError::typed("McpError", format!("MCP server {origin}: unreadable reply: {m}")),
        Failure::Unavailable { retry_after_ms, .. } => ToolError::Propagate(
            Error::new(ErrorCode::ToolPropagated, format!("MCP server {origin}: {}", failure.describe()))
                .with_retry_after_ms(retry_after_ms),
        ),
        Failure::Refused { .. } => ToolError::Propagate(
            Error::new(ErrorCode::ToolPropagated, format!("MCP server {origin}: {}", failure.describe()))
                .with_retryable(false),
        ),
        other => ToolError::Propagate(Error::new(
            ErrorCode::ToolPropagated,
            format!("MCP server {origin}: {}", other.describe()),
        )),
    }
}

/// The error of a server that could not be listed: retryable `STEADFAST_TOOL_PROPAGATED` when it is down,
/// `STEADFAST_CONFIG_INVALID` otherwise. `field` names it (`mcp[0]`).
pub fn list_failure(field: &str, origin: &str, failure: &Failure) -> Error {
    let message = format!("{field} ({origin}): listing the server's tools failed: {}", failure.describe());
    match failure {
        Failure::Unavailable { retry_after_ms, .. } => {
            Error::new(ErrorCode::ToolPropagated, message).with_retry_after_ms(*retry_after_ms)
        }
        _ => config_err(message),
    }
}

/// A connection to one server: its target, its session (made on first use, made again when the server forgets
/// it) and the request ids. Cheap to share (`Rc`) between the server's tools.
pub struct McpConnection {
    http: Rc<dyn HttpClient>,
    target: Target,
    session: RefCell<Option<SessionInfo>>,
    next_id: Cell<u64>,
}

impl McpConnection {
    /// A connection to `target` over `http` (nothing is sent yet).
    pub fn new(http: Rc<dyn HttpClient>, target: Target) -> McpConnection {
        McpConnection { http, target, session: RefCell::new(None), next_id: Cell::new(1) }
    }

    /// The server's origin (what messages show).
    pub fn origin(&self) -> String {
        self.target.url.origin()
    }

    /// The session, if one was made.
    pub fn session(&self) -> Option<SessionInfo> {
        self.session.borrow().clone()
    }

    fn id(&self) -> u64 {
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        id
    }

    /// Sends one message (`id`: a request's, `None` for a notification) and reads its reply.
    async fn send(
        &self,
        session: Option<&SessionInfo>,
        body: String,
        id: Option<u64>,
        extra: &[(String, String)],
    ) -> std::result::Result<Reply, Failure> {
        let mut request = http_request(&self.target, session, body);
        request.headers.extend(extra.iter().cloned());
        let mut reader = ReplyReader::new(id);
        let sent_session = session.is_some_and(|s| s.session_id.is_some());
        match self.http.send_streaming(request, &mut |chunk| reader.push(chunk)).await {
            Ok(response) => reader.finish(&response, sent_session),
            Err(e) => Err(Failure::Unavailable { message: self.target.url.redact(&e.message), retry_after_ms: None }),
        }
    }

    /// `initialize`, then `notifications/initialized`: the new session, kept.
    async fn initialize(&self) -> std::result::Result<SessionInfo, Failure> {
        let id = self.id();
        let reply = self.send(None, rpc_request(id, "initialize", initialize_params()), Some(id), &[]).await?;
        let version = reply.result.get("protocolVersion").and_then(Value::as_str).unwrap_or("");
        if !SUPPORTED_PROTOCOL_VERSIONS.contains(&version) {
            return Err(Failure::Invalid(format!(
                "the server speaks protocol version {:?}; this client speaks {}",
                cap_chars(version, 40),
                SUPPORTED_PROTOCOL_VERSIONS.join(", ")
            )));
        }
        let session = SessionInfo { session_id: reply.session_id, protocol_version: version.to_string() };
        self.send(Some(&session), rpc_notification("notifications/initialized"), None, &[]).await?;
        *self.session.borrow_mut() = Some(session.clone());
        Ok(session)
    }

    /// Request `method` with `params` in the session (made first when there is none; made again, once, when
    /// the server forgot it), with `extra` headers.
    pub async fn request(
        &self,
        method: &str,
        params: Value,
        extra: &[(String, String)],
    ) -> std::result::Result<Value, Failure> {
        let mut fresh = false;
        loop {
            let current = self.session.borrow().clone();
            let session = match current {
                Some(s) => s,
                None => {
                    fresh = true;
                    self.initialize().await?
                }
            };
            let id = self.id();
            match self.send(Some(&session), rpc_request(id, method, params.clone()), Some(id), extra).await {
                Err(Failure::SessionExpired) if !fresh => {
                    *self.session.borrow_mut() = None;
                }
                other => return other.map(|r| r.result),
            }
        }
    }

    /// Every tool the server lists (following `nextCursor`, at most [`MAX_LIST_PAGES`] pages).
    pub async fn list_tools(&self) -> std::result::Result<Vec<McpToolSpec>, Failure> {
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_LIST_PAGES {
            let params = match &cursor {
                Some(c) => json!({"cursor": c}),
                None => json!({}),
            };
            let result = self.request("tools/list", params, &[]).await?;
            let (page, next) = parse_tool_list(&result).map_err(Failure::Invalid)?;
            tools.extend(page);
            match next {
                Some(next) => cursor = Some(next),
                None => return Ok(tools),
            }
        }
        Err(Failure::Invalid(format!("the tool list goes on past {MAX_LIST_PAGES} pages")))
    }

    /// `tools/call` of `name` with `args` under `ctx`'s idempotency key.
    pub async fn call_tool(&self, name: &str, args: &Value, ctx: &ToolContext) -> std::result::Result<Value, Failure> {
        let key = ctx.idempotency_key();
        let extra = [("idempotency-key".to_string(), key.to_string())];
        self.request("tools/call", call_params(name, args, key), &extra).await
    }
}

/// One tool of an MCP server.
pub struct McpTool {
    spec: McpToolSpec,
    connection: Rc<McpConnection>,
}

impl McpTool {
    /// The tool `spec` of the server behind `connection`.
    pub fn new(spec: McpToolSpec, connection: Rc<McpConnection>) -> McpTool {
        McpTool { spec, connection }
    }
}

#[async_trait(?Send)]
impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.spec.name
    }

    fn description(&self) -> &str {
        &self.spec.description
    }

    fn input_schema(&self) -> &Value {
        &self.spec.input_schema
    }

    async fn execute(&self, args: Value, ctx: ToolContext) -> std::result::Result<ToolOutput, ToolError> {
        match self.connection.call_tool(&self.spec.name, &args, &ctx).await {
            Ok(result) => call_output(&result),
            Err(f) => Err(call_failure(&self.connection.origin(), f)),
        }
    }

    /// The server's host: one circuit breaker per MCP server host, as per webhook host.
    fn dependency(&self) -> Option<String> {
        Some(self.connection.target.url.host.clone())
    }

    /// A failure that fails the run and may go away ([`call_failure`]: the server down, overloaded, unreachable,
    /// or its session lost again): not a refusal, and not the tool's own error result.
    fn dependency_down(&self, err: &ToolError) -> bool {
        matches!(err, ToolError::Propagate(e) if e.retryable())
    }
}

/// One listed server in the [`McpCache`].
struct Listed {
    key: String,
    connection: Rc<McpConnection>,
    tools: Vec<McpToolSpec>,
    listed_at: u64,
}

/// The servers' tool lists and sessions, kept for the life of a process (a Worker isolate): see the module
/// docs for when a server is listed again.
#[derive(Default)]
pub struct McpCache {
    entries: RefCell<Vec<Listed>>,
    listings: Cell<u64>,
}

impl McpCache {
    /// How many times a server was listed (successfully or not).
    pub fn listings(&self) -> u64 {
        self.listings.get()
    }

    /// The tools of `servers` at time `now_ms`, over `http`, secrets read with `secret`: checked against
    /// `allowlist`, listed or taken from the cache, each tool name unique among them and not in `taken` (the
    /// agent's other tools). Errors name the server's field (`mcp[1]`).
    pub async fn tools(
        &self,
        servers: &[McpServerConfig],
        allowlist: &Allowlist,
        secret: &dyn Fn(&str) -> Option<String>,
        http: Rc<dyn HttpClient>,
        now_ms: u64,
        taken: &[&str],
    ) -> Result<Vec<Rc<dyn Tool>>> {
        let mut kept: Vec<Listed> = Vec::new();
        let mut tools: Vec<Rc<dyn Tool>> = Vec::new();
        let mut names: BTreeMap<String, String> = BTreeMap::new();
        names.extend(taken.iter().map(|n| (n.to_string(), String::new())));
        for (i, server) in servers.iter().enumerate() {
            let field = format!("mcp[{i}]");
            let url = server
                .check(allowlist)
                .map_err(|e| config_err(e.iter().map(|m| format!("{field}.{m}")).collect::<Vec<_>>().join("; ")))?;
            let headers = server.resolve_headers(secret).map_err(|e| config_err(format!("{field}.{e}")))?;
            let key = format!("{}\n{:?}\n{}", url.as_url(), headers, server.timeout_ms);
            let cached = {
                let mut entries = self.entries.borrow_mut();
                entries.iter().position(|e| e.key == key).map(|at| entries.swap_remove(at))
            };
            let listed = match cached {
                Some(c) if now_ms.saturating_sub(c.listed_at) < LIST_TTL_MS => c,
                cached => {
                    let connection = match &cached {
                        Some(c) => c.connection.clone(),
                        None => Rc::new(McpConnection::new(
                            http.clone(),
                            Target { url: url.clone(), headers, timeout_ms: server.timeout_ms },
                        )),
                    };
                    self.listings.set(self.listings.get() + 1);
                    match (connection.list_tools().await, cached) {
                        (Ok(list), _) => Listed { key, connection, tools: list, listed_at: now_ms },
                        // Down: this isolate's last list of it stands (its calls fail retryably meanwhile).
                        (Err(Failure::Unavailable { .. }), Some(stale)) => stale,
                        (Err(f), _) => return Err(list_failure(&field, &url.origin(), &f)),
                    }
                }
            };
            for spec in &listed.tools {
                if let Some(other) = names.insert(spec.name.clone(), field.clone()) {
                    let by = if other.is_empty() { "another tool of the agent".to_string() } else { other };
                    return Err(config_err(format!(
                        "{field} ({}): its tool '{}' has the name of {by}",
                        url.origin(),
                        spec.name
                    )));
                }
                tools.push(Rc::new(McpTool::new(spec.clone(), listed.connection.clone())));
            }
            kept.push(listed);
        }
        *self.entries.borrow_mut() = kept;
        Ok(tools)
    }
}

/// The fields a server's configuration must pass ([`McpServerConfig::check`]), as messages naming `mcp[i]`.
pub fn check_servers(servers: &[McpServerConfig], allowlist: &Allowlist) -> Vec<String> {
    let mut errs = Vec::new();
    for (i, s) in servers.iter().enumerate() {
        if let Err(e) = s.check(allowlist) {
            errs.extend(e.into_iter().map(|m| format!("mcp[{i}].{m}")));
        }
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::fake::FakeHttp;
    use crate::runtime::traits::AbortSignal;
    use crate::runtime::{Rng, SplitMix64};
    use futures::executor::block_on;

    fn response(status: u16, headers: &[(&str, &str)], body: &str) -> HttpResponse {
        HttpResponse {
            status,
            headers: headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            body: body.to_string(),
            truncated: false,
        }
    }

    const JSON: (&str, &str) = ("content-type", "application/json");
    const SSE: (&str, &str) = ("content-type", "text/event-stream");

    /// Feeds `body` to a reader for `id` in the given chunk sizes, then finishes it with `response`'s status
    /// and headers (the body of a 2xx answer is what was fed, as the transports do). Also returns how many bytes
    /// were fed before the reader said stop.
    fn read(
        id: Option<u64>,
        r: &HttpResponse,
        chunks: &[usize],
        sent_session: bool,
    ) -> (Result<Reply, Failure>, usize) {
        let mut reader = ReplyReader::new(id);
        let bytes = r.body.as_bytes();
        let mut fed = 0;
        if (200..300).contains(&r.status) {
            let mut sizes = chunks.iter().copied().cycle();
            while fed < bytes.len() {
                let n = sizes.next().unwrap_or(bytes.len()).max(1);
                let end = (fed + n).min(bytes.len());
                let more = reader.push(&bytes[fed..end]);
                fed = end;
                if !more {
                    break;
                }
            }
        }
        let mut seen = r.clone();
        if (200..300).contains(&r.status) {
            seen.body.clear();
        }
        (reader.finish(&seen, sent_session), fed)
    }

    type Result<T, E = Failure> = std::result::Result<T, E>;

    fn ctx(call: &str) -> ToolContext {
        ToolContext {
            run_id: "run-1".into(),
            tool_call_id: call.into(),
            call_key: crate::core::idempotency::call_key("run-1:00", call),
            approval_id: None,
            abort: AbortSignal::new(),
            wait_token: String::new(),
            now: 0,
            traceparent: None,
        }
    }

    fn target(url: &str) -> Target {
        Target {
            url: ParsedUrl::parse(url).unwrap(),
            headers: vec![("authorization".into(), "Bearer t0k".into())],
            timeout_ms: 5_000,
        }
    }

    fn header<'a>(r: &'a HttpRequest, name: &str) -> Option<&'a str> {
        r.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    fn body(r: &HttpRequest) -> Value {
        serde_json::from_str(r.body.as_deref().unwrap_or("null")).unwrap()
    }

    /// Generated replies to request `id`: a result (random JSON) answered as a JSON body (alone or in a batch)
    /// or as an event stream (LF or CRLF lines, comments, a named `id:` per event, notifications and other ids
    /// before it, the data split over several `data:` lines, events after it), read in generated chunk sizes.
    /// The reader gives the result; on a stream it stops reading right after the reply's event. `STEADFAST_SEED`
    /// replays one case.
    #[test]
    fn a_reply_as_json_or_as_an_event_stream_gives_its_result_for_generated_replies_and_chunkings() {
        for seed in crate::seeds::seeds(0..800) {
            let rng = SplitMix64::new(seed);
            let pick = |n: u64| rng.next_u64() % n;
            let repro = crate::seeds::repro(seed, "tools::mcp::tests::a_reply_as_json_or_as_an_event_stream");
            let id = 1 + pick(1_000);
            let result =
                json!({"n": pick(100), "text": "é\u{2028}x".repeat(pick(4) as usize), "list": [1, {"a": null}]});
            let reply = json!({"jsonrpc": "2.0", "id": id, "result": result});
            let chunks: Vec<usize> = (0..1 + pick(4)).map(|_| 1 + pick(40) as usize).collect();
            let sse = pick(2) == 0;
            let (text, headers, reply_end) = if sse {
                let nl = if pick(2) == 0 { "\n" } else { "\r\n" };
                let mut s = String::new();
                for k in 0..pick(3) {
                    match pick(4) {
                        0 => s.push_str(&format!(": ping{nl}{nl}")),
                        1 => s.push_str(&format!(
                            "event: message{nl}id: e{k}{nl}data: {}{nl}{nl}",
                            json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"p": k}})
                        )),
                        2 => s.push_str(&format!(
                            "event: message{nl}data: {}{nl}{nl}",
                            json!({"jsonrpc": "2.0", "id": id + 1, "result": {"other": true}})
                        )),
                        _ => s.push_str(&format!("event: other{nl}data: {reply}{nl}{nl}")),
                    }
                }
                // The reply's JSON split over data lines at a comma (the lines are joined by newlines).
                let raw = reply.to_string();
                let data = match raw.find(',') {
                    Some(at) if pick(2) == 0 => format!("data: {}{nl}data:{}", &raw[..=at], &raw[at + 1..]),
                    _ => format!("data: {raw}"),
                };
                s.push_str(&format!("id: r{id}{nl}event: message{nl}{data}{nl}{nl}"));
                let end = s.len();
                if pick(2) == 0 {
                    s.push_str(&format!("event: message{nl}data: {{\"jsonrpc\": \"2.0\", \"method\": \"x\"}}{nl}{nl}"));
                }
                (s, vec![SSE], Some(end))
            } else if pick(2) == 0 {
                (format!(" {reply}\n"), vec![JSON], None)
            } else {
                let batch = json!([{"jsonrpc": "2.0", "method": "notifications/message"}, reply]);
                (batch.to_string(), vec![("Content-Type", "application/json; charset=utf-8")], None)
            };
            let r = response(200, &headers, &text);
            let (got, fed) = read(Some(id), &r, &chunks, true);
            assert_eq!(got.map(|r| r.result), Ok(result), "{text:?}; {repro}");
            match reply_end {
                // Stopped with the chunk that completed the reply's event.
                Some(end) => assert!(fed >= end && fed < end + chunks.iter().max().unwrap(), "{fed} vs {end}; {repro}"),
                None => assert_eq!(fed, text.len(), "{repro}"),
            }
        }
    }

    #[test]
    fn statuses_errors_and_unreadable_replies_are_the_failures_they_mean() {
        let all = [usize::MAX];
        let fail = |r: HttpResponse, sent_session: bool| read(Some(7), &r, &all, sent_session).0.unwrap_err();
        assert_eq!(fail(response(404, &[], "gone"), true), Failure::SessionExpired);
        assert_eq!(fail(response(404, &[], "gone"), false), Failure::Refused { status: 404, message: "gone".into() });
        assert_eq!(
            fail(response(503, &[("retry-after", "7")], "busy"), true),
            Failure::Unavailable { message: "HTTP 503: busy".into(), retry_after_ms: Some(7_000) }
        );
        for status in [429, 408, 500, 502] {
            assert!(matches!(fail(response(status, &[], ""), true), Failure::Unavailable { .. }), "{status}");
        }
        assert_eq!(fail(response(401, &[], ""), true), Failure::Refused { status: 401, message: String::new() });
        let error = r#"{"jsonrpc": "2.0", "id": 7, "error": {"code": -32602, "message": "Tool nope not found"}}"#;
        assert_eq!(
            fail(response(200, &[JSON], error), true),
            Failure::Rpc { code: -32602, message: "Tool nope not found".into() }
        );
        let sse_error = format!("event: message\ndata: {error}\n\n");
        assert!(matches!(fail(response(200, &[SSE], &sse_error), true), Failure::Rpc { code: -32602, .. }));
        // A stream that ends without the reply: the server went away mid-call (retry later).
        let other = "event: message\ndata: {\"jsonrpc\": \"2.0\", \"id\": 8, \"result\": {}}\n\n";
        assert!(matches!(fail(response(200, &[SSE], other), true), Failure::Unavailable { .. }));
        // The reply as the stream's last event without its blank line still counts.
        let last = "event: message\ndata: {\"jsonrpc\": \"2.0\", \"id\": 7, \"result\": {\"ok\": 1}}";
        assert_eq!(read(Some(7), &response(200, &[SSE], last), &all, true).0.unwrap().result, json!({"ok": 1}));
        for (headers, text, says) in [
            (vec![("content-type", "text/html")], "<html>", "content type text/html"),
            (vec![], "{}", "content type none"),
            (vec![JSON], "{not json", "not JSON"),
            (vec![JSON], r#"{"jsonrpc": "2.0", "id": 8, "result": {}}"#, "no response to request 7"),
            (vec![JSON], r#"{"jsonrpc": "2.0", "id": 7}"#, "has no result"),
        ] {
            match fail(response(200, &headers, text), true) {
                Failure::Invalid(m) => assert!(m.contains(says), "{m:?} should say {says:?}"),
                other => panic!("{text}: {other:?}"),
            }
        }
        let mut cut = response(200, &[JSON], r#"{"jsonrpc": "2.0", "id": 7, "res"#);
        cut.truncated = true;
        assert!(matches!(fail(cut, true), Failure::Invalid(m) if m.contains("longer than")));
        // A string id equal to ours is ours; a request from the server with our id is not.
        let ok = r#"{"jsonrpc": "2.0", "id": "7", "result": {"s": 1}}"#;
        assert_eq!(read(Some(7), &response(200, &[JSON], ok), &all, true).0.unwrap().result, json!({"s": 1}));
        let request = r#"{"jsonrpc": "2.0", "id": 7, "method": "sampling/createMessage", "params": {}}"#;
        assert!(matches!(fail(response(200, &[JSON], request), true), Failure::Invalid(_)));
        // A notification's 202 has no result to read.
        let (got, _) = read(None, &response(202, &[("mcp-session-id", "s")], ""), &all, true);
        assert_eq!(got.unwrap(), Reply { result: Value::Null, session_id: Some("s".into()) });
    }

    /// The reply to `initialize` (request 1 unless `id` says otherwise).
    fn init_reply(session: Option<&str>, version: &str) -> std::result::Result<HttpResponse, Error> {
        init_reply_to(1, session, version)
    }

    fn init_reply_to(id: u64, session: Option<&str>, version: &str) -> std::result::Result<HttpResponse, Error> {
        let mut headers = vec![SSE];
        if let Some(s) = session {
            headers.push(("mcp-session-id", s));
        }
        let result = json!({"protocolVersion": version, "capabilities": {"tools": {}}, "serverInfo": {"name": "t", "version": "1"}});
        Ok(response(
            200,
            &headers,
            &format!("event: message\ndata: {}\n\n", json!({"jsonrpc": "2.0", "id": id, "result": result})),
        ))
    }

    fn rpc_reply(id: u64, result: Value) -> std::result::Result<HttpResponse, Error> {
        Ok(response(200, &[JSON], &json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string()))
    }

    fn accepted() -> std::result::Result<HttpResponse, Error> {
        Ok(response(202, &[], ""))
    }

    fn tool(name: &str, schema: Value) -> Value {
        json!({"name": name, "description": format!("the {name} tool"), "inputSchema": schema})
    }

    /// The exchange: `initialize` (our version, no session headers), `notifications/initialized` and every later
    /// message with the session id and the agreed version, `tools/list` following `nextCursor`, `tools/call`
    /// with the call's idempotency key in `_meta` and as a header; a forgotten session (404) is made again once
    /// and the call sent again with the new id; the configured headers go with every message.
    #[test]
    fn a_session_is_made_carried_and_made_again_when_the_server_forgets_it() {
        let http = FakeHttp::new(vec![
            init_reply(Some("sess-1"), "2025-06-18"),
            accepted(),
            rpc_reply(2, json!({"tools": [tool("add", json!({"type": "object"}))], "nextCursor": "p2"})),
            rpc_reply(3, json!({"tools": [tool("echo", json!({"type": "object", "required": ["text"]}))]})),
            Ok(response(404, &[], "Session not found")),
            init_reply_to(5, Some("sess-2"), PROTOCOL_VERSION),
            accepted(),
            rpc_reply(6, json!({"content": [{"type": "text", "text": "3"}]})),
        ]);
        let conn = McpConnection::new(Rc::new(http.clone()), target("https://mcp.example.com/mcp?k=s3cret"));
        let tools = block_on(conn.list_tools()).unwrap();
        assert_eq!(tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["add", "echo"]);
        assert_eq!(tools[1].input_schema, json!({"type": "object", "required": ["text"]}));
        let c = ctx("call_1_0");
        let out = block_on(conn.call_tool("add", &json!({"a": 1, "b": 2}), &c)).unwrap();
        assert_eq!(call_output(&out).unwrap().content, "3");
        assert_eq!(conn.session().unwrap().session_id.as_deref(), Some("sess-2"));

        let requests = http.requests();
        let methods: Vec<Value> = requests.iter().map(|r| body(r)["method"].clone()).collect();
        assert_eq!(
            methods,
            [
                "initialize",
                "notifications/initialized",
                "tools/list",
                "tools/list",
                "tools/call",
                "initialize",
                "notifications/initialized",
                "tools/call"
            ]
        );
        for r in &requests {
            assert_eq!((r.method.as_str(), r.url.as_str()), ("POST", "https://mcp.example.com/mcp?k=s3cret"));
            assert_eq!(header(r, "accept"), Some("application/json, text/event-stream"));
            assert_eq!(header(r, "content-type"), Some("application/json"));
            assert_eq!(header(r, "authorization"), Some("Bearer t0k"));
            assert_eq!(r.timeout_ms, 5_000);
            assert_eq!(body(r)["jsonrpc"], "2.0");
        }
        let init = body(&requests[0]);
        assert_eq!(init["params"]["protocolVersion"], PROTOCOL_VERSION);
        assert_eq!(init["id"], 1);
        assert_eq!(
            (header(&requests[0], "mcp-session-id"), header(&requests[0], "mcp-protocol-version")),
            (None, None)
        );
        assert!(body(&requests[1]).get("id").is_none(), "a notification has no id");
        for r in &requests[1..5] {
            assert_eq!(header(r, "mcp-session-id"), Some("sess-1"));
            assert_eq!(header(r, "mcp-protocol-version"), Some("2025-06-18"));
        }
        assert_eq!(body(&requests[2])["params"], json!({}));
        assert_eq!(body(&requests[3])["params"], json!({"cursor": "p2"}));
        assert_eq!(header(&requests[5], "mcp-session-id"), None);
        for r in &requests[6..] {
            assert_eq!(header(r, "mcp-session-id"), Some("sess-2"));
            assert_eq!(header(r, "mcp-protocol-version"), Some(PROTOCOL_VERSION));
        }
        for r in [&requests[4], &requests[7]] {
            let b = body(r);
            assert_eq!(
                b["params"],
                json!({"name": "add", "arguments": {"a": 1, "b": 2}, "_meta": {"idempotencyKey": c.call_key}})
            );
            assert_eq!(header(r, "idempotency-key"), Some(c.call_key.as_str()));
        }
        let ids: Vec<Value> = requests.iter().map(|r| body(r)["id"].clone()).collect();
        assert_eq!(
            ids,
            [json!(1), Value::Null, json!(2), json!(3), json!(4), json!(5), Value::Null, json!(6)],
            "ids keep counting"
        );

        // A server that forgets the new session at once too: the failure stands (no loop).
        let http = FakeHttp::new(vec![init_reply(None, PROTOCOL_VERSION), accepted(), Ok(response(404, &[], ""))]);
        let conn = McpConnection::new(Rc::new(http.clone()), target("https://mcp.example.com/mcp"));
        assert_eq!(
            block_on(conn.list_tools()),
            Err(Failure::Refused { status: 404, message: String::new() }),
            "no session id was sent, so a 404 is a refusal"
        );
        assert_eq!(http.requests().len(), 3);
        // An approved call sends the approval id as its key.
        let http =
            FakeHttp::new(vec![init_reply(None, PROTOCOL_VERSION), accepted(), rpc_reply(2, json!({"content": []}))]);
        let conn = McpConnection::new(Rc::new(http.clone()), target("https://mcp.example.com/mcp"));
        let approved = ToolContext { approval_id: Some("apr_1".into()), ..ctx("c") };
        block_on(conn.call_tool("add", &json!({}), &approved)).unwrap();
        assert_eq!(body(&http.requests()[2])["params"]["_meta"]["idempotencyKey"], "apr_1");
    }

    #[test]
    fn a_server_of_another_protocol_version_or_an_unusable_list_is_refused() {
        let http = FakeHttp::new(vec![init_reply(None, "2024-11-05")]);
        let conn = McpConnection::new(Rc::new(http), target("https://mcp.example.com/mcp"));
        assert!(matches!(block_on(conn.list_tools()), Err(Failure::Invalid(m)) if m.contains("\"2024-11-05\"")));
        for (list, says) in [
            (json!({}), "no \"tools\" array"),
            (json!({"tools": [{"description": "x"}]}), "tools[0] has no name"),
            (json!({"tools": [tool("has space", json!({}))]}), "\"has space\""),
            (json!({"tools": [tool("a.b", json!({}))]}), "\"a.b\""),
            (json!({"tools": [tool("t", json!("object"))]}), "inputSchema is not a JSON object"),
        ] {
            assert!(parse_tool_list(&list).unwrap_err().contains(says), "{list}");
        }
        let (tools, next) = parse_tool_list(&json!({"tools": [{"name": "bare"}], "nextCursor": ""})).unwrap();
        assert_eq!(
            tools,
            [McpToolSpec { name: "bare".into(), description: String::new(), input_schema: json!({"type": "object"}) }]
        );
        assert_eq!(next, None, "an empty cursor ends the list");
        // A server whose list never ends is cut off.
        let mut replies = vec![init_reply(None, PROTOCOL_VERSION), accepted()];
        for page in 0..MAX_LIST_PAGES as u64 {
            replies.push(rpc_reply(2 + page, json!({"tools": [], "nextCursor": format!("p{page}")})));
        }
        let conn = McpConnection::new(Rc::new(FakeHttp::new(replies)), target("https://mcp.example.com/mcp"));
        assert!(matches!(block_on(conn.list_tools()), Err(Failure::Invalid(m)) if m.contains("20 pages")));
    }

    #[test]
    fn call_results_and_failures_map_to_outputs_error_results_and_retryable_failures() {
        let text = json!({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]});
        assert_eq!(call_output(&text), Ok(ToolOutput::text("a\nb")));
        let structured = json!({"content": [{"type": "text", "text": "{\"n\":3}"}], "structuredContent": {"n": 3}});
        assert_eq!(call_output(&structured), Ok(ToolOutput::text("{\"n\":3}")));
        assert_eq!(call_output(&json!({"structuredContent": {"list": [1]}})).unwrap().content, "{\"list\":[1]}");
        let parts = json!({"content": [
            {"type": "image", "mimeType": "image/png", "data": "aGk="},
            {"type": "resource_link", "uri": "file:///a", "name": "a"},
            {"type": "resource", "resource": {"uri": "file:///b", "text": "inside b"}},
            {"type": "resource", "resource": {"uri": "file:///c", "blob": "AA=="}},
        ]});
        assert_eq!(
            call_output(&parts).unwrap().content,
            "[image: image/png, 4 bytes base64]\n[resource: file:///a]\ninside b\n[resource: file:///c]"
        );
        assert_eq!(
            call_output(&json!({"content": [{"type": "text", "text": "no such order"}], "isError": true})),
            Err(ToolError::typed("McpToolError", "no such order"))
        );
        assert_eq!(
            call_output(&json!({"content": [], "isError": true})),
            Err(ToolError::typed("McpToolError", "the tool reported an error"))
        );
        assert!(matches!(call_output(&json!({"x": 1})), Err(ToolError::Failed { kind, .. }) if kind == "McpError"));

        let origin = "https://mcp.example.com";
        assert_eq!(
            call_failure(origin, Failure::Rpc { code: -32602, message: "bad args".into() }),
            ToolError::typed("McpError", "bad args (JSON-RPC error -32602)")
        );
        assert!(matches!(call_failure(origin, Failure::Invalid("x".into())), ToolError::Failed { .. }));
        for f in [
            Failure::Unavailable { message: "HTTP 503".into(), retry_after_ms: Some(2_000) },
            Failure::Unavailable { message: "connection refused".into(), retry_after_ms: None },
            Failure::SessionExpired,
        ] {
            match call_failure(origin, f.clone()) {
                ToolError::Propagate(e) => {
                    assert_eq!(e.code, ErrorCode::ToolPropagated, "{f:?}");
                    assert!(e.retryable(), "{f:?}");
                    assert!(e.message.starts_with("MCP server https://mcp.example.com: "), "{}", e.message);
                    let retry = if let Failure::Unavailable { retry_after_ms, .. } = f { retry_after_ms } else { None };
                    assert_eq!(e.retry_after_ms, retry);
                }
                other => panic!("{f:?}: {other:?}"),
            }
        }
        for status in [401, 403, 400] {
            match call_failure(origin, Failure::Refused { status, message: "no".into() }) {
                ToolError::Propagate(e) => {
                    assert_eq!(e.code, ErrorCode::ToolPropagated, "{status}");
                    assert!(!e.retryable(), "a refusal is not retried: {status}");
                    assert_eq!(e.message, format!("MCP server https://mcp.example.com: HTTP {status}: no"));
                }
                other => panic!("{status}: {other:?}"),
            }
        }
        // What counts toward the server's breaker: the retryable failures, not refusals or error results.
        let url = ParsedUrl::parse("https://mcp.example.com/mcp?key=secret").unwrap();
        let target = Target { url, headers: Vec::new(), timeout_ms: 1_000 };
        let tool = McpTool::new(
            McpToolSpec { name: "t".into(), description: String::new(), input_schema: json!({"type": "object"}) },
            Rc::new(McpConnection::new(Rc::new(FakeHttp::new(vec![])), target)),
        );
        assert_eq!(tool.dependency().as_deref(), Some("mcp.example.com"), "the host, never the path or query");
        let unavailable = Failure::Unavailable { message: "HTTP 503".into(), retry_after_ms: None };
        assert!(tool.dependency_down(&call_failure(origin, unavailable)));
        assert!(!tool.dependency_down(&call_failure(origin, Failure::Refused { status: 401, message: "no".into() })));
        assert!(!tool.dependency_down(&ToolError::typed("McpToolError", "no such order")));
        let down = Failure::Unavailable { message: "x".into(), retry_after_ms: Some(1) };
        let e = list_failure("mcp[2]", origin, &down);
        assert_eq!((e.code, e.retry_after_ms), (ErrorCode::ToolPropagated, Some(1)));
        assert!(e.message.starts_with("mcp[2] (https://mcp.example.com): listing the server's tools failed"));
        assert_eq!(
            list_failure("mcp[0]", origin, &Failure::Refused { status: 401, message: String::new() }).code,
            ErrorCode::ConfigInvalid
        );
    }

    /// A transport error that quotes the URL shows its origin only (the path and query may hold a token).
    #[test]
    fn a_transport_failure_shows_the_origin_not_the_path() {
        let http = FakeHttp::new(vec![Err(Error::new(
            ErrorCode::ProviderNetwork,
            "fetch failed for https://mcp.example.com/mcp/T0KEN123456?k=s3cr3tv",
        ))]);
        let conn = McpConnection::new(Rc::new(http), target("https://mcp.example.com/mcp/T0KEN123456?k=s3cr3tv"));
        let e = match call_failure(&conn.origin(), block_on(conn.list_tools()).unwrap_err()) {
            ToolError::Propagate(e) => e,
            other => panic!("{other:?}"),
        };
        assert!(!e.message.contains("T0KEN") && !e.message.contains("s3cr3t"), "{}", e.message);
        assert!(e.message.contains("https://mcp.example.com"), "{}", e.message);
        assert!(!format!("{:?}", target("https://mcp.example.com/mcp/T0KEN123456")).contains("T0KEN"));
        assert!(!format!("{:?}", target("https://mcp.example.com/")).contains("t0k"), "header values are not shown");
    }

    fn secrets(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
    }

    #[test]
    fn header_values_are_strings_or_secrets_resolved_by_name() {
        let cfg: McpServerConfig = serde_json::from_value(json!({
            "url": "https://mcp.example.com/mcp",
            "headers": {"Authorization": {"secret": "MCP_TOKEN", "prefix": "Bearer "}, "X-Key": {"secret": "K"}, "X-Team": "ops"}
        }))
        .unwrap();
        assert_eq!(cfg.timeout_ms, DEFAULT_TIMEOUT_MS);
        let resolved = cfg.resolve_headers(&secrets(&[("MCP_TOKEN", "tok-1"), ("K", "k-2")])).unwrap();
        assert_eq!(
            resolved,
            [
                ("Authorization".into(), "Bearer tok-1".into()),
                ("X-Key".into(), "k-2".into()),
                ("X-Team".into(), "ops".into())
            ]
        );
        // Written back as configured (a round trip keeps the secret's name, never its value).
        let back = serde_json::to_value(&cfg).unwrap();
        assert_eq!(back["headers"]["Authorization"], json!({"secret": "MCP_TOKEN", "prefix": "Bearer "}));
        assert_eq!(back["headers"]["X-Key"], json!({"secret": "K"}));
        for (missing, says) in [
            (
                secrets(&[("K", "k-2")]),
                "headers.Authorization: the secret MCP_TOKEN is missing: `npx wrangler secret put MCP_TOKEN`",
            ),
            (secrets(&[("MCP_TOKEN", ""), ("K", "k")]), "the secret MCP_TOKEN is missing"),
            (
                secrets(&[("MCP_TOKEN", "a\r\nInjected: 1"), ("K", "k")]),
                "the value of the secret MCP_TOKEN contains control characters",
            ),
        ] {
            let e = cfg.resolve_headers(&missing).unwrap_err();
            assert!(e.contains(says), "{e}");
            assert!(!e.contains("Injected"), "the value is never shown: {e}");
        }
        for bad in [
            json!({"url": "https://a.example", "headers": {"A": 7}}),
            json!({"url": "https://a.example", "headers": {"A": {"secret": 7}}}),
            json!({"url": "https://a.example", "headers": {"A": {"prefix": "Bearer "}}}),
            json!({"url": "https://a.example", "headers": {"A": {"secret": "S", "value": "x"}}}),
            json!({"url": "https://a.example", "header": {}}),
        ] {
            assert!(serde_json::from_value::<McpServerConfig>(bad.clone()).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_server_is_checked_against_the_allowlist_and_its_headers_and_secret_names() {
        let list = Allowlist::new(["mcp.example.com", "*.tools.example.org"]);
        assert!(McpServerConfig::new("https://mcp.example.com/mcp").check(&list).is_ok());
        assert!(McpServerConfig::new("http://a.tools.example.org:8080/mcp").check(&list).is_ok());
        let errs = |c: McpServerConfig, l: &Allowlist| c.check(l).unwrap_err().join("; ");
        let e = errs(McpServerConfig::new("https://evil.example.net/mcp/T0KEN99"), &list);
        assert!(e.starts_with("url: host 'evil.example.net' is not in allowedHosts"), "{e}");
        assert!(!e.contains("T0KEN"), "{e}");
        assert!(errs(McpServerConfig::new("https://mcp.example.com/"), &Allowlist::default())
            .contains("allowedHosts is empty"));
        assert!(errs(McpServerConfig::new("ftp://mcp.example.com/"), &list).starts_with("url must start with"));
        let mut c = McpServerConfig::new("https://mcp.example.com/mcp");
        c.headers.insert("Mcp-Session-Id".into(), HeaderValue::Plain("x".into()));
        c.headers.insert("X-A".into(), HeaderValue::Plain("v\nInjected: 1".into()));
        c.headers
            .insert("Authorization".into(), HeaderValue::Secret { secret: "Bearer abc".into(), prefix: String::new() });
        c.headers.insert("X-B".into(), HeaderValue::Secret { secret: "B".into(), prefix: "x\r".into() });
        c.headers.insert("Bad Name".into(), HeaderValue::Plain("v".into()));
        let e = errs(c, &list);
        for says in [
            "headers.Mcp-Session-Id: is set by the MCP client itself",
            "headers.X-A: the value contains control characters",
            "headers.Authorization: secret \"Bearer abc\" must be the NAME of a secret",
            "headers.X-B: the value contains control characters",
            "headers.Bad Name: is not a valid header name",
        ] {
            assert!(e.contains(says), "{e} should say {says:?}");
        }
        assert_eq!(
            check_servers(&[McpServerConfig::new("https://mcp.example.com/"), McpServerConfig::new("https://x.example.com/")], &list),
            ["mcp[1].url: host 'x.example.com' is not in allowedHosts (mcp.example.com, *.tools.example.org); add it or a \"*.domain\" entry"]
        );
    }

    fn listing(tools: Value) -> Vec<std::result::Result<HttpResponse, Error>> {
        vec![init_reply(Some("s"), PROTOCOL_VERSION), accepted(), rpc_reply(2, json!({"tools": tools}))]
    }

    fn names(tools: &[Rc<dyn Tool>]) -> Vec<String> {
        tools.iter().map(|t| t.name().to_string()).collect()
    }

    /// The cache lists a server once, again after [`LIST_TTL_MS`] (in the session it has) or when its headers'
    /// secret values change; a server that is down keeps this isolate's last list, and one never listed fails
    /// the build retryably; names that clash with the agent's other tools or another server's are refused.
    #[test]
    fn tool_lists_are_kept_for_their_ttl_and_a_down_server_keeps_its_last_list() {
        let h = FakeHttp::new(Vec::new());
        let client: Rc<dyn HttpClient> = Rc::new(h.clone());
        let sent = || h.requests().len();
        let list = Allowlist::new(["mcp.example.com"]);
        let mut server = McpServerConfig::new("https://mcp.example.com/mcp");
        server
            .headers
            .insert("Authorization".into(), HeaderValue::Secret { secret: "T".into(), prefix: "Bearer ".into() });
        let servers = [server];
        let token_a = secrets(&[("T", "a")]);
        let cache = McpCache::default();
        let tools_at = |now: u64, token: &dyn Fn(&str) -> Option<String>| {
            block_on(cache.tools(&servers, &list, token, client.clone(), now, &["charge"])).map(|t| names(&t))
        };

        for r in listing(json!([tool("add", json!({"type": "object"}))])) {
            h.push(r);
        }
        assert_eq!(tools_at(1_000, &token_a), Ok(vec!["add".to_string()]));
        assert_eq!((sent(), cache.listings()), (3, 1));
        assert_eq!(header(&h.requests()[2], "authorization"), Some("Bearer a"));

        // Within the TTL: nothing is sent.
        assert_eq!(tools_at(1_000 + LIST_TTL_MS - 1, &token_a), Ok(vec!["add".to_string()]));
        assert_eq!((sent(), cache.listings()), (3, 1));

        // Past it: listed again, in the session it has (one request), and the new list is the agent's.
        let at = 1_000 + LIST_TTL_MS;
        h.push(rpc_reply(3, json!({"tools": [tool("add", json!({"type": "object"})), tool("sub", json!({}))]})));
        assert_eq!(tools_at(at, &token_a), Ok(vec!["add".to_string(), "sub".to_string()]));
        assert_eq!((sent(), cache.listings()), (4, 2));
        assert_eq!(header(&h.requests()[3], "mcp-session-id"), Some("s"));

        // Past it again with the server down: the last list stands (asked again at every build meanwhile).
        let later = at + LIST_TTL_MS;
        h.push(Err(Error::new(ErrorCode::ProviderNetwork, "connection refused")));
        h.push(Ok(response(503, &[], "")));
        assert_eq!(tools_at(later, &token_a), Ok(vec!["add".to_string(), "sub".to_string()]));
        assert_eq!(tools_at(later + 1, &token_a), Ok(vec!["add".to_string(), "sub".to_string()]));
        assert_eq!((sent(), cache.listings()), (6, 4));

        // A changed secret value is another server: a new session and list, with the new header.
        for r in listing(json!([tool("mul", json!({}))])) {
            h.push(r);
        }
        assert_eq!(tools_at(later, &secrets(&[("T", "b")])), Ok(vec!["mul".to_string()]));
        assert_eq!(header(&h.requests()[6], "authorization"), Some("Bearer b"));
        assert_eq!(header(&h.requests()[6], "mcp-session-id"), None);
        let replies = |r: Vec<std::result::Result<HttpResponse, Error>>| {
            let h = FakeHttp::new(r);
            (h.clone(), Rc::new(h) as Rc<dyn HttpClient>)
        };

        // Never listed and down: the build fails retryably, naming the server.
        let fresh = McpCache::default();
        let (_, client) = replies(vec![Err(Error::new(ErrorCode::ProviderNetwork, "connection refused"))]);
        let e = block_on(fresh.tools(&servers, &list, &token_a, client, 0, &[])).err().unwrap();
        assert_eq!(e.code, ErrorCode::ToolPropagated, "{e}");
        assert!(
            e.message
                .starts_with("mcp[0] (https://mcp.example.com): listing the server's tools failed: connection refused"),
            "{e}"
        );
        // Refused (a wrong token): a configuration error.
        let (_, client) = replies(vec![Ok(response(401, &[], "unauthorized"))]);
        let e = block_on(fresh.tools(&servers, &list, &token_a, client, 0, &[])).err().unwrap();
        assert_eq!(e.code, ErrorCode::ConfigInvalid, "{e}");
        assert!(e.message.contains("HTTP 401: unauthorized"), "{e}");
        // A missing secret: a configuration error naming it, nothing sent.
        let (h, client) = replies(Vec::new());
        let e = block_on(fresh.tools(&servers, &list, &secrets(&[]), client, 0, &[])).err().unwrap();
        assert!(e.message.starts_with("mcp[0].headers.Authorization: the secret T is missing"), "{e}");
        assert!(h.requests().is_empty());

        // Name clashes: with the agent's other tools, and between servers.
        let (_, client) = replies(listing(json!([tool("charge", json!({}))])));
        let e = block_on(fresh.tools(&servers, &list, &token_a, client, 0, &["charge"])).err().unwrap();
        assert!(e.message.contains("its tool 'charge' has the name of another tool of the agent"), "{e}");
        let two = [servers[0].clone(), McpServerConfig::new("https://mcp.example.com/other")];
        let mut r = listing(json!([tool("x", json!({}))]));
        r.extend(listing(json!([tool("x", json!({}))])));
        let (_, client) = replies(r);
        let e =
            block_on(McpCache::default().tools(&two, &list, &token_a, client, 0, &[])).map(|t| names(&t)).unwrap_err();
        assert!(e.message.starts_with("mcp[1] (https://mcp.example.com): its tool 'x' has the name of mcp[0]"), "{e}");
    }

    /// A server's tools enter the agent's fingerprint (names and input schemas, as every tool's): an agent built
    /// from the same list has the same one, a changed schema or a new tool gives another (the drift a resume
    /// reports).
    #[test]
    fn a_changed_server_is_agent_drift() {
        use crate::runtime::{Agent, MockModel};
        let build = |listed: Value| {
            let servers = [McpServerConfig::new("https://mcp.example.com/mcp")];
            let http = Rc::new(FakeHttp::new(listing(listed)));
            let tools = block_on(McpCache::default().tools(
                &servers,
                &Allowlist::new(["mcp.example.com"]),
                &|_| None,
                http,
                0,
                &[],
            ))
            .unwrap();
            let mut b = Agent::builder(MockModel::by_turn(Vec::new())).store(crate::store::MemoryStore::new());
            for t in tools {
                b = b.tool_rc(t);
            }
            b.build().unwrap().fingerprint().clone()
        };
        let before = build(json!([tool("add", json!({"type": "object"}))]));
        assert_eq!(before, build(json!([tool("add", json!({"type": "object"}))])));
        assert_ne!(before, build(json!([tool("add", json!({"type": "object", "required": ["a"]}))])));
        assert_ne!(
            before,
            build(json!([tool("add", json!({"type": "object"})), tool("sub", json!({}))])),
            "a new tool"
        );
    }
}
