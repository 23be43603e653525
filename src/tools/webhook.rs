//! [`WebhookTool`]: a configured tool that calls an HTTP endpoint on an allow-listed host (M18, M19).
//!
//! * **Allow-listing fails closed.** A webhook is built only when its URL is `https://` or `http://`, names a
//!   host, and that host is in the [`Allowlist`] (an exact host, or a `*.example.com` entry matching any
//!   subdomain of `example.com`). An empty allowlist refuses every host. The host is checked again before each
//!   call. URLs are parsed by hand ([`ParsedUrl`]) and anything ambiguous — credentials (`user@`), backslashes,
//!   whitespace or control characters, percent-encoded or non-ASCII host names — is refused rather than
//!   guessed at; the request goes to the URL as re-assembled from the checked parts.
//! * **Idempotency.** Each call sends `Idempotency-Key: <ctx.idempotency_key()>` (the approval id for an
//!   approved call, else the call key: unique across runs, unchanged when the same call re-runs on resume; see
//!   [`crate::core::idempotency`]), plus `X-Steadfast-Run-Id`, `X-Steadfast-Tool-Call-Id` and, for approved
//!   calls, `X-Steadfast-Approval-Id`.
//! * **Results.** The arguments are the JSON body (`GET` sends no body). The response body is capped at
//!   `maxResponseBytes` while it is read (the transport stops reading past the cap, see [`crate::http`]), and
//!   `timeoutMs` covers the whole response, headers and body. A 2xx answer is the tool's output (JSON kept as
//!   JSON, anything else as text; a cut body is text with a `[truncated: …]` marker); any other status is an
//!   `HttpError` result the model reads, a timeout a `TimeoutError` result and any other transport failure a
//!   `NetworkError` result — none fails the run. Redirects are not followed by this tool: the transport must
//!   not follow them either (a redirect could leave the allow-listed host), so a 3xx is an `HttpError` result.
//! * **The URL's path and query are secret** (webhook tokens and signatures live there): no message this tool
//!   builds — results, configuration errors, `Debug` — shows more than the origin (`scheme://host:port`).
//!   Text that comes from elsewhere (a transport's error, the excerpt of an error response) passes through
//!   [`ParsedUrl::redact`] first. A 2xx body is the tool's output and is kept as the endpoint sent it
//!   (redacting it would also cut legitimate URLs out of the data).

use crate::core::error::{cap_chars, Error, ErrorCode, Result};
use crate::core::schema::Schema;
use crate::core::wire::json_text;
use crate::http::{HttpClient, HttpRequest};
use crate::runtime::traits::{Tool, ToolContext, ToolError, ToolOutput};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::rc::Rc;

/// Default call timeout (ms).
pub const DEFAULT_TIMEOUT_MS: u64 = 10_000;
/// Default response cap (bytes).
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 64 * 1024;
/// Characters of the response body quoted in an `HttpError` result.
pub const ERROR_EXCERPT_CHARS: usize = 500;
/// Longest URL accepted (bytes).
pub const MAX_URL_BYTES: usize = 8_192;
/// The methods a webhook may use.
pub const METHODS: &[&str] = &["GET", "POST", "PUT", "PATCH", "DELETE"];

/// Headers the tool sets itself; static headers may not replace them.
const RESERVED_HEADERS: &[&str] =
    &["content-type", "content-length", "host", "idempotency-key", "transfer-encoding", "connection"];

fn default_method() -> String {
    "POST".into()
}
fn default_timeout_ms() -> u64 {
    DEFAULT_TIMEOUT_MS
}
fn default_max_response_bytes() -> usize {
    DEFAULT_MAX_RESPONSE_BYTES
}
fn default_input_schema() -> Value {
    json!({"type": "object"})
}

fn config_err(message: impl Into<String>) -> Error {
    Error::new(ErrorCode::ConfigInvalid, message)
}

/// How a webhook tool is configured (the `tools` entries of the agent configuration).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WebhookToolConfig {
    /// Tool name (1-64 letters, digits, `_` or `-`; unique within the agent).
    pub name: String,
    /// Description for the model.
    #[serde(default)]
    pub description: String,
    /// JSON Schema of the arguments (default `{"type": "object"}`).
    #[serde(default = "default_input_schema")]
    pub input_schema: Value,
    /// Endpoint: `https://` or `http://`, on an allow-listed host.
    pub url: String,
    /// HTTP method: `GET`, `POST`, `PUT`, `PATCH` or `DELETE` (default `POST`).
    #[serde(default = "default_method")]
    pub method: String,
    /// Every call needs a person's approval first.
    #[serde(default)]
    pub needs_approval: bool,
    /// The endpoint has side effects: its intent is recorded before each call (effect ledger, M26).
    #[serde(default)]
    pub side_effecting: bool,
    /// Give up after this many milliseconds (default 10,000; 0 = the platform's default).
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Longest response body kept, in bytes (default 64 KiB); longer bodies are truncated with a marker.
    #[serde(default = "default_max_response_bytes")]
    pub max_response_bytes: usize,
    /// Static extra headers sent with every call.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

impl WebhookToolConfig {
    /// A configuration with the defaults: `POST`, no approval, not side-effecting, 10 s, 64 KiB,
    /// `{"type": "object"}` arguments.
    pub fn new(name: impl Into<String>, url: impl Into<String>) -> WebhookToolConfig {
        WebhookToolConfig {
            name: name.into(),
            description: String::new(),
            input_schema: default_input_schema(),
            url: url.into(),
            method: default_method(),
            needs_approval: false,
            side_effecting: false,
            timeout_ms: DEFAULT_TIMEOUT_MS,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            headers: BTreeMap::new(),
        }
    }

    /// Checks the configuration against `allowlist` and returns the parsed URL. Fails with
    /// `STEADFAST_CONFIG_INVALID` for a bad name, method, URL, header or response cap, or a host that is not
    /// allow-listed.
    pub fn check(&self, allowlist: &Allowlist) -> Result<ParsedUrl> {
        let name = &self.name;
        if !crate::core::ids::is_tool_name(name) {
            return Err(config_err(format!(
                "webhook tool name {name:?} must be 1-64 characters of letters, digits, '_' or '-'"
            )));
        }
        let method = self.method.to_ascii_uppercase();
        if !METHODS.contains(&method.as_str()) {
            return Err(config_err(format!(
                "webhook tool '{name}': method {:?} is not one of {}",
                self.method,
                METHODS.join(", ")
            )));
        }
        if !self.input_schema.is_object() {
            return Err(config_err(format!("webhook tool '{name}': inputSchema must be a JSON object")));
        }
        if let Err(e) = Schema::compile(&self.input_schema) {
            return Err(config_err(format!("webhook tool '{name}': inputSchema is invalid: {e}")));
        }
        if self.max_response_bytes == 0 {
            return Err(config_err(format!("webhook tool '{name}': maxResponseBytes must be at least 1")));
        }
        for (k, v) in &self.headers {
            check_header(k, v).map_err(|m| config_err(format!("webhook tool '{name}': header {k:?}: {m}")))?;
        }
        let url =
            ParsedUrl::parse(&self.url).map_err(|e| config_err(format!("webhook tool '{name}': {}", e.message)))?;
        allowlist.check(&url.host).map_err(|e| config_err(format!("webhook tool '{name}': {}", e.message)))?;
        Ok(url)
    }
}

fn is_tchar(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c)
}

/// Checks a configured header: a token name the tool does not set itself, a value without control characters.
pub(crate) fn check_header(name: &str, value: &str) -> std::result::Result<(), String> {
    if name.is_empty() || !name.chars().all(is_tchar) {
        return Err("is not a valid header name".into());
    }
    let lower = name.to_ascii_lowercase();
    if RESERVED_HEADERS.contains(&lower.as_str()) || lower.starts_with("x-steadfast-") {
        return Err("is set by the tool itself and cannot be configured".into());
    }
    if value.chars().any(|c| (c.is_control() && c != '\t') || c == '\u{7f}') {
        return Err("the value contains control characters (CR, LF, NUL, …)".into());
    }
    Ok(())
}

/// An `http(s)` URL split into its checked parts. Only what an allow-listed call needs is accepted: no
/// credentials, no backslashes, no whitespace or control characters, an ASCII host name (or a bracketed IPv6
/// literal), an optional numeric port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedUrl {
    /// `https` or `http` (lower-case).
    pub scheme: String,
    /// Host name, lower-case, without a trailing dot (IPv6 literals keep their brackets).
    pub host: String,
    /// Explicit port.
    pub port: Option<u16>,
    /// Path and query (starts with `/`; the fragment is dropped).
    pub path: String,
}

impl ParsedUrl {
    /// Parses and checks a URL. Fails with `STEADFAST_CONFIG_INVALID` naming what is wrong.
    pub fn parse(url: &str) -> Result<ParsedUrl> {
        // The URL itself is never quoted: its path and query may hold a secret.
        let bad = |why: &str| config_err(format!("url {why}"));
        if url.is_empty() {
            return Err(config_err("url is empty"));
        }
        if url.len() > MAX_URL_BYTES {
            return Err(bad(&format!("is longer than {MAX_URL_BYTES} bytes")));
        }
        if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(bad("contains whitespace or control characters"));
        }
        if url.contains('\\') {
            return Err(bad("contains a backslash"));
        }
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(bad("must start with https:// or http://"));
        };
        let scheme = scheme.to_ascii_lowercase();
        if scheme != "https" && scheme != "http" {
            return Err(bad("must start with https:// or http://"));
        }
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(end);
        if authority.is_empty() {
            return Err(bad("has no host"));
        }
        if authority.contains('@') {
            return Err(bad("must not contain credentials (user@host)"));
        }
        let (host, port) = split_host_port(authority).map_err(|why| bad(&why))?;
        let tail = tail.split('#').next().unwrap_or("");
        let path = if tail.starts_with('/') { tail.to_string() } else { format!("/{tail}") };
        Ok(ParsedUrl { scheme, host, port, path })
    }

    /// The URL re-assembled from the checked parts (this is where requests go). Secret: never put it in a
    /// message; show [`ParsedUrl::origin`].
    pub fn as_url(&self) -> String {
        format!("{}{}", self.origin(), self.path)
    }

    /// `scheme://host[:port]`: the only part of the URL that messages show.
    pub fn origin(&self) -> String {
        match self.port {
            Some(p) => format!("{}://{}:{p}", self.scheme, self.host),
            None => format!("{}://{}", self.scheme, self.host),
        }
    }

    /// `text` with this URL's path and query removed: every URL in it (`scheme://…`) is cut to its origin,
    /// and this URL's path, query, path-with-query, and each path segment or query value that could be a
    /// token (8+ characters with a digit, or 16+ characters; query values from 4 characters) become
    /// `[redacted]`, wherever they appear.
    pub fn redact(&self, text: &str) -> String {
        let mut out = strip_url_paths(text);
        let (path, query) = match self.path.split_once('?') {
            Some((p, q)) => (p, q),
            None => (self.path.as_str(), ""),
        };
        let mut secrets: Vec<&str> = vec![self.path.as_str(), path, query];
        secrets.extend(path.split('/').filter(|seg| {
            let n = seg.chars().count();
            n >= 16 || (n >= 8 && seg.chars().any(|c| c.is_ascii_digit()))
        }));
        secrets
            .extend(query.split('&').filter_map(|pair| pair.split_once('=').map(|(_, v)| v)).filter(|v| v.len() >= 4));
        secrets.retain(|s| s.len() > 1);
        crate::core::wire::sort_by(&mut secrets, |a, b| b.len().cmp(&a.len()).then(a.cmp(b)));
        secrets.dedup();
        for secret in secrets {
            if out.contains(secret) {
                out = out.replace(secret, "[redacted]");
            }
        }
        out
    }
}

/// Cuts every `scheme://authority/path?query` in `text` down to `scheme://authority/…`.
fn strip_url_paths(text: &str) -> String {
    let ends_url = |c: char| c.is_whitespace() || "\"'<>`(){}[]|\\^".contains(c);
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let after = &rest[i + 3..];
        let authority_len = after.find(|c: char| ends_url(c) || "/?#".contains(c)).unwrap_or(after.len());
        let url_len = after.find(ends_url).unwrap_or(after.len());
        out.push_str(&rest[..i + 3 + authority_len]);
        if url_len > authority_len {
            out.push_str("/…");
        }
        rest = &after[url_len.max(authority_len)..];
    }
    out.push_str(rest);
    out
}

fn split_host_port(authority: &str) -> std::result::Result<(String, Option<u16>), String> {
    let (host, port) = if let Some(inner) = authority.strip_prefix('[') {
        let Some((literal, after)) = inner.split_once(']') else {
            return Err("has an unclosed IPv6 literal".into());
        };
        if literal.is_empty() || !literal.chars().all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.') {
            return Err("has an invalid IPv6 literal".into());
        }
        let port = match after {
            "" => None,
            p => match p.strip_prefix(':') {
                Some(p) => Some(p),
                None => return Err("has characters after the IPv6 literal".into()),
            },
        };
        (format!("[{}]", literal.to_ascii_lowercase()), port)
    } else {
        let (host, port) = match authority.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        };
        (normalize_host(host).ok_or_else(|| format!("has an invalid host name {host:?}"))?, port)
    };
    let port = match port {
        None => None,
        Some(p) => {
            let n = if !p.is_empty() && p.len() <= 5 && p.chars().all(|c| c.is_ascii_digit()) {
                p.parse::<u16>().ok().filter(|n| *n > 0)
            } else {
                None
            };
            Some(n.ok_or_else(|| format!("has an invalid port {p:?}"))?)
        }
    };
    Ok((host, port))
}

/// Lower-cases a host name, drops one trailing dot and checks its labels (1-63 of `a-z0-9-` each, 253 in
/// all). `None` when it is not a plain ASCII host name.
fn normalize_host(host: &str) -> Option<String> {
    let host = host.to_ascii_lowercase();
    let host = host.strip_suffix('.').unwrap_or(&host);
    if host.is_empty() || host.len() > 253 {
        return None;
    }
    let ok = host.split('.').all(|label| {
        !label.is_empty() && label.len() <= 63 && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    });
    ok.then(|| host.to_string())
}

/// The hosts webhook tools may call: exact host names, or `*.example.com` entries matching every subdomain
/// of `example.com` (not `example.com` itself). Matching ignores case and a trailing dot. An empty allowlist
/// refuses every host; entries that are not host names (a URL, a `host:port`, a bare `*`) match nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Allowlist {
    entries: Vec<String>,
}

impl Allowlist {
    /// An allowlist of these entries.
    pub fn new<I, S>(hosts: I) -> Allowlist
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Allowlist { entries: hosts.into_iter().map(|h| h.as_ref().trim().to_ascii_lowercase()).collect() }
    }

    /// The entries (trimmed, lower-case).
    pub fn entries(&self) -> &[String] {
        &self.entries
    }

    /// Whether it has no entries (and so refuses every host).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Checks one entry: a host name or `*.` followed by a host name with at least one dot.
    pub fn check_entry(entry: &str) -> std::result::Result<(), String> {
        let e = entry.trim();
        let hint = "must be a host name like \"api.example.com\" or \"*.example.com\" (no scheme, port or path)";
        if e.contains("://") || e.contains('/') || e.contains(':') || e.contains('@') {
            return Err(format!("{entry:?} {hint}"));
        }
        match e.strip_prefix("*.") {
            Some(suffix) => match normalize_host(suffix) {
                Some(s) if s.contains('.') => Ok(()),
                _ => Err(format!("{entry:?} {hint}; a wildcard needs a domain with a dot after \"*.\"")),
            },
            None => normalize_host(e).map(|_| ()).ok_or_else(|| format!("{entry:?} {hint}")),
        }
    }

    /// Whether `host` may be called.
    pub fn allows(&self, host: &str) -> bool {
        let host = host.trim().to_ascii_lowercase();
        let host = host.strip_suffix('.').unwrap_or(&host);
        if host.is_empty() {
            return false;
        }
        self.entries.iter().any(|entry| {
            let entry = entry.strip_suffix('.').unwrap_or(entry);
            match entry.strip_prefix("*.") {
                Some(suffix) if !suffix.is_empty() && !suffix.starts_with('.') => host
                    .strip_suffix(suffix)
                    .and_then(|head| head.strip_suffix('.'))
                    .is_some_and(|label| !label.is_empty()),
                Some(_) => false,
                None => !entry.is_empty() && !entry.starts_with('*') && entry == host,
            }
        })
    }

    /// [`Allowlist::allows`] as a result: `STEADFAST_CONFIG_INVALID` saying why the host is refused.
    pub fn check(&self, host: &str) -> Result<()> {
        if self.allows(host) {
            return Ok(());
        }
        if self.is_empty() {
            return Err(config_err(format!(
                "host '{host}' is not allowed: allowedHosts is empty, so every host is refused (list it in allowedHosts)"
            )));
        }
        Err(config_err(format!(
            "host '{host}' is not in allowedHosts ({}); add it or a \"*.domain\" entry",
            self.entries.join(", ")
        )))
    }
}

/// A tool that calls an HTTP endpoint on an allow-listed host. Generic over the transport; several tools
/// may share one client (`Rc<H>`, also `Rc<dyn HttpClient>`).
pub struct WebhookTool<H: HttpClient + ?Sized> {
    config: WebhookToolConfig,
    method: String,
    url: ParsedUrl,
    allowlist: Allowlist,
    http: Rc<H>,
}

impl<H: HttpClient + ?Sized> std::fmt::Debug for WebhookTool<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookTool")
            .field("name", &self.config.name)
            .field("method", &self.method)
            .field("origin", &self.url.origin())
            .finish()
    }
}

impl<H: HttpClient + ?Sized> WebhookTool<H> {
    /// Builds the tool. Fails with `STEADFAST_CONFIG_INVALID` as [`WebhookToolConfig::check`] does (bad URL,
    /// host not allow-listed, empty allowlist, bad method or header).
    pub fn new(config: WebhookToolConfig, allowlist: &Allowlist, http: Rc<H>) -> Result<WebhookTool<H>> {
        let url = config.check(allowlist)?;
        let method = config.method.to_ascii_uppercase();
        Ok(WebhookTool { config, method, url, allowlist: allowlist.clone(), http })
    }

    /// The configuration.
    pub fn config(&self) -> &WebhookToolConfig {
        &self.config
    }

    /// The checked URL.
    pub fn url(&self) -> &ParsedUrl {
        &self.url
    }

    /// The request one call sends (no I/O).
    pub fn request(&self, args: &Value, ctx: &ToolContext) -> HttpRequest {
        let mut headers = Vec::with_capacity(6 + self.config.headers.len());
        let body = if self.method == "GET" {
            None
        } else {
            headers.push(("content-type".to_string(), "application/json".to_string()));
            Some(json_text(args))
        };
        headers.push(("Idempotency-Key".into(), ctx.idempotency_key().to_string()));
        headers.push(("X-Steadfast-Run-Id".into(), ctx.run_id.clone()));
        headers.push(("X-Steadfast-Tool-Call-Id".into(), ctx.tool_call_id.clone()));
        if let Some(tp) = &ctx.traceparent {
            headers.push(("traceparent".into(), tp.clone()));
        }
        if let Some(a) = &ctx.approval_id {
            headers.push(("X-Steadfast-Approval-Id".into(), a.clone()));
        }
        headers.extend(self.config.headers.iter().map(|(k, v)| (k.clone(), v.clone())));
        HttpRequest {
            method: self.method.clone(),
            url: self.url.as_url(),
            headers,
            body,
            timeout_ms: self.config.timeout_ms,
            max_response_bytes: self.config.max_response_bytes,
        }
    }
}

/// Caps `s` at `max` bytes on a char boundary, marking the cut; `cut_by_transport` says the transport already
/// stopped reading at the cap (the full length is then unknown). Returns the text and whether it was cut.
fn cap_bytes(s: &str, max: usize, cut_by_transport: bool) -> (String, bool) {
    if s.len() <= max && !cut_by_transport {
        return (s.to_string(), false);
    }
    let mut idx = max.min(s.len());
    while idx > 0 && !s.is_char_boundary(idx) {
        idx -= 1;
    }
    if cut_by_transport {
        (format!("{}… [truncated: the first {idx} bytes of a longer response]", &s[..idx]), true)
    } else {
        (format!("{}… [truncated: {} of {} bytes]", &s[..idx], idx, s.len()), true)
    }
}

#[async_trait(?Send)]
impl<H: HttpClient + ?Sized> Tool for WebhookTool<H> {
    fn name(&self) -> &str {
        &self.config.name
    }

    fn description(&self) -> &str {
        &self.config.description
    }

    fn input_schema(&self) -> &Value {
        &self.config.input_schema
    }

    fn needs_approval(&self, _args: &Value) -> bool {
        self.config.needs_approval
    }

    fn side_effecting(&self) -> bool {
        self.config.side_effecting
    }

    fn dependency(&self) -> Option<String> {
        Some(self.url.host.clone())
    }

    /// A timeout, a failed connection, and a 5xx or 429 answer (the messages [`Tool::execute`] builds).
    fn dependency_down(&self, err: &ToolError) -> bool {
        match err {
            ToolError::Failed { kind, message } => match kind.as_str() {
                "TimeoutError" | "NetworkError" => true,
                "HttpError" => message.starts_with("HTTP 5") || message.starts_with("HTTP 429"),
                _ => false,
            },
            ToolError::Propagate(_) => false,
        }
    }

    async fn execute(&self, args: Value, ctx: ToolContext) -> std::result::Result<ToolOutput, ToolError> {
        // Checked at construction; checked again here so no call ever leaves for a host that is not listed.
        if let Err(e) = self.allowlist.check(&self.url.host) {
            return Err(ToolError::Propagate(
                Error::new(ErrorCode::ConfigInvalid, format!("webhook tool '{}': {}", self.config.name, e.message))
                    .with_run(&ctx.run_id),
            ));
        }
        let request = self.request(&args, &ctx);
        let response = match self.http.send(request).await {
            Ok(r) => r,
            Err(e) => {
                let kind = if e.code == ErrorCode::ProviderTimeout { "TimeoutError" } else { "NetworkError" };
                let message = format!("{} {} failed: {}", self.method, self.url.origin(), self.url.redact(&e.message));
                return Err(ToolError::typed(kind, message));
            }
        };
        let (body, truncated) = cap_bytes(&response.body, self.config.max_response_bytes, response.truncated);
        let status = response.status;
        if !(200..300).contains(&status) {
            // Redact a generous prefix, then cut: a secret cannot straddle the cut.
            let excerpt = cap_chars(&self.url.redact(&cap_chars(&body, 4 * ERROR_EXCERPT_CHARS)), ERROR_EXCERPT_CHARS);
            let message =
                if excerpt.is_empty() { format!("HTTP {status}") } else { format!("HTTP {status}: {excerpt}") };
            return Err(ToolError::typed("HttpError", message));
        }
        if body.trim().is_empty() {
            return Ok(ToolOutput::text(format!("HTTP {status} (empty body)")));
        }
        if !truncated {
            // Ignored (no else): a body that is not JSON is returned as text below.
            if let Ok(v) = serde_json::from_str::<Value>(&body) {
                return Ok(ToolOutput::json(v));
            }
        }
        Ok(ToolOutput::text(body))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::HttpResponse;
    use crate::runtime::traits::AbortSignal;
    use futures::executor::block_on;
    use std::cell::RefCell;
    use std::collections::VecDeque;

    #[derive(Default)]
    struct FakeHttp {
        responses: RefCell<VecDeque<Result<HttpResponse>>>,
        requests: RefCell<Vec<HttpRequest>>,
    }

    impl FakeHttp {
        fn with(responses: Vec<Result<HttpResponse>>) -> Rc<FakeHttp> {
            Rc::new(FakeHttp { responses: RefCell::new(responses.into()), requests: Default::default() })
        }
        fn ok(status: u16, body: &str) -> Result<HttpResponse> {
            Ok(HttpResponse { status, headers: vec![], body: body.into(), truncated: false })
        }
        fn requests(&self) -> Vec<HttpRequest> {
            self.requests.borrow().clone()
        }
    }

    #[async_trait(?Send)]
    impl HttpClient for FakeHttp {
        async fn send(&self, request: HttpRequest) -> Result<HttpResponse> {
            self.requests.borrow_mut().push(request);
            self.responses
                .borrow_mut()
                .pop_front()
                .unwrap_or_else(|| Err(Error::new(ErrorCode::ProviderNetwork, "no scripted response")))
        }
    }

    fn ctx(call: &str, approval: Option<&str>) -> ToolContext {
        ToolContext {
            run_id: "run-1".into(),
            tool_call_id: call.into(),
            call_key: crate::core::idempotency::call_key("run-1:00", call),
            approval_id: approval.map(String::from),
            abort: AbortSignal::new(),
            wait_token: String::new(),
            now: 0,
            traceparent: None,
        }
    }

    fn header<'a>(r: &'a HttpRequest, name: &str) -> Option<&'a str> {
        r.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    fn allow(hosts: &[&str]) -> Allowlist {
        Allowlist::new(hosts.iter().copied())
    }

    fn failed(r: std::result::Result<ToolOutput, ToolError>) -> (String, String) {
        match r {
            Err(ToolError::Failed { kind, message }) => (kind, message),
            other => panic!("expected a recoverable failure, got {other:?}"),
        }
    }

    #[test]
    fn post_sends_body_headers_and_the_call_key_as_idempotency_key() {
        let http = FakeHttp::with(vec![FakeHttp::ok(200, r#"{"ok": true, "id": 12}"#)]);
        let mut cfg = WebhookToolConfig::new("create_ticket", "https://api.example.com/v1/tickets?x=1#frag");
        cfg.headers.insert("X-Api-Version".into(), "2024-01".into());
        cfg.timeout_ms = 2_500;
        let tool = WebhookTool::new(cfg, &allow(&["api.example.com"]), http.clone()).unwrap();
        let out = block_on(tool.execute(json!({"title": "broken"}), ctx("call_0_0", None))).unwrap();
        assert_eq!(serde_json::from_str::<Value>(&out.content).unwrap(), json!({"ok": true, "id": 12}));
        let reqs = http.requests();
        assert_eq!(reqs.len(), 1);
        let r = &reqs[0];
        assert_eq!(r.method, "POST");
        assert_eq!(r.url, "https://api.example.com/v1/tickets?x=1");
        assert_eq!(r.timeout_ms, 2_500);
        assert_eq!(r.max_response_bytes, DEFAULT_MAX_RESPONSE_BYTES, "the transport caps while reading");
        assert_eq!(serde_json::from_str::<Value>(r.body.as_deref().unwrap()).unwrap(), json!({"title": "broken"}));
        assert_eq!(header(r, "content-type"), Some("application/json"));
        let key = crate::core::idempotency::call_key("run-1:00", "call_0_0");
        assert_eq!(header(r, "idempotency-key"), Some(key.as_str()));
        assert_eq!(header(r, "x-steadfast-run-id"), Some("run-1"));
        assert_eq!(header(r, "x-steadfast-tool-call-id"), Some("call_0_0"));
        assert_eq!(header(r, "x-steadfast-approval-id"), None);
        assert_eq!(header(r, "x-api-version"), Some("2024-01"));
    }

    #[test]
    fn approved_call_uses_the_approval_id_as_idempotency_key() {
        let http = FakeHttp::with(vec![FakeHttp::ok(201, "created")]);
        let mut cfg = WebhookToolConfig::new("refund", "https://pay.example.com/refunds");
        cfg.needs_approval = true;
        cfg.side_effecting = true;
        let tool = WebhookTool::new(cfg, &allow(&["pay.example.com"]), http.clone()).unwrap();
        assert!(tool.needs_approval(&json!({})));
        assert!(tool.side_effecting());
        let out = block_on(tool.execute(json!({"order": 7}), ctx("call_1_0", Some("apr_abc")))).unwrap();
        assert_eq!(out.content, "created");
        let r = &http.requests()[0];
        assert_eq!(header(r, "idempotency-key"), Some("apr_abc"));
        assert_eq!(header(r, "x-steadfast-tool-call-id"), Some("call_1_0"));
        assert_eq!(header(r, "x-steadfast-approval-id"), Some("apr_abc"));
    }

    #[test]
    fn get_sends_no_body() {
        let http = FakeHttp::with(vec![FakeHttp::ok(200, "[1,2]")]);
        let mut cfg = WebhookToolConfig::new("lookup", "https://api.example.com:8443/orders");
        cfg.method = "get".into();
        let tool = WebhookTool::new(cfg, &allow(&["api.example.com"]), http.clone()).unwrap();
        let out = block_on(tool.execute(json!({"order": 7}), ctx("c1", None))).unwrap();
        assert_eq!(out.content, "[1,2]");
        let r = &http.requests()[0];
        assert_eq!(r.method, "GET");
        assert_eq!(r.url, "https://api.example.com:8443/orders");
        assert_eq!(r.body, None);
        assert_eq!(header(r, "content-type"), None);
        assert_eq!(header(r, "idempotency-key"), Some(ctx("c1", None).call_key.as_str()));
    }

    #[test]
    fn host_not_in_allowlist_fails_construction() {
        let http = FakeHttp::with(vec![]);
        let cfg = WebhookToolConfig::new("t", "https://evil.example.net/x");
        let err = WebhookTool::new(cfg, &allow(&["api.example.com"]), http.clone()).unwrap_err();
        assert_eq!(err.code, ErrorCode::ConfigInvalid);
        assert!(err.message.contains("evil.example.net"), "{}", err.message);
        assert!(err.message.contains("not in allowedHosts"), "{}", err.message);
        assert!(http.requests().is_empty());
    }

    #[test]
    fn empty_allowlist_refuses_every_host() {
        let http = FakeHttp::with(vec![]);
        let err =
            WebhookTool::new(WebhookToolConfig::new("t", "https://api.example.com/"), &Allowlist::default(), http)
                .unwrap_err();
        assert_eq!(err.code, ErrorCode::ConfigInvalid);
        assert!(err.message.contains("allowedHosts is empty"), "{}", err.message);
        assert!(!Allowlist::default().allows("localhost"));
    }

    #[test]
    fn wildcard_allowlist_matches_subdomains_only() {
        let list = allow(&["*.example.com", "exact.org"]);
        assert!(list.allows("api.example.com"));
        assert!(list.allows("a.b.example.com"));
        assert!(list.allows("API.Example.COM."));
        assert!(!list.allows("example.com"));
        assert!(!list.allows("badexample.com"));
        assert!(!list.allows("example.com.evil.net"));
        assert!(list.allows("exact.org"));
        assert!(!list.allows("sub.exact.org"));
        assert!(!allow(&["*", "*.", ""]).allows("anything.com"));
        let http = FakeHttp::with(vec![FakeHttp::ok(200, "{}")]);
        let tool = WebhookTool::new(WebhookToolConfig::new("t", "https://hooks.example.com/x"), &list, http).unwrap();
        assert_eq!(tool.url().host, "hooks.example.com");
    }

    #[test]
    fn bad_urls_are_refused() {
        let list = allow(&["api.example.com"]);
        for url in [
            "ftp://api.example.com/x",
            "api.example.com/x",
            "https:api.example.com",
            "https:///x",
            "https://",
            "https://user:pw@api.example.com/",
            "https://api.example.com@evil.com/",
            "https://evil.com\\@api.example.com/",
            "https://api.example.com:99999/",
            "https://api.example.com:/",
            "https://api.example.com:80:80/",
            "https://api exa.com/",
            "https://api.example.com/\n",
            "https://ápi.example.com/",
            "https://api%2eexample.com/",
            "https://[zz::1]/",
            "",
        ] {
            let err = WebhookTool::new(WebhookToolConfig::new("t", url), &list, FakeHttp::with(vec![])).unwrap_err();
            assert_eq!(err.code, ErrorCode::ConfigInvalid, "{url:?}");
        }
        let p = ParsedUrl::parse("HTTP://API.Example.com.?q=1").unwrap();
        assert_eq!(
            (p.scheme.as_str(), p.host.as_str(), p.port, p.path.as_str()),
            ("http", "api.example.com", None, "/?q=1")
        );
        let p = ParsedUrl::parse("https://[::1]:8080/a").unwrap();
        assert_eq!((p.host.as_str(), p.port), ("[::1]", Some(8080)));
    }

    #[test]
    fn bad_method_header_and_name_are_refused() {
        let list = allow(&["api.example.com"]);
        let mut cfg = WebhookToolConfig::new("t", "https://api.example.com/");
        cfg.method = "TRACE".into();
        assert!(cfg.check(&list).unwrap_err().message.contains("method"));
        let mut cfg = WebhookToolConfig::new("t", "https://api.example.com/");
        cfg.headers.insert("X-A".into(), "v\r\nInjected: 1".into());
        assert!(cfg.check(&list).unwrap_err().message.contains("control"));
        let mut cfg = WebhookToolConfig::new("t", "https://api.example.com/");
        cfg.headers.insert("Idempotency-Key".into(), "fixed".into());
        assert!(cfg.check(&list).is_err());
        assert!(WebhookToolConfig::new("bad name", "https://api.example.com/").check(&list).is_err());
    }

    #[test]
    fn non_2xx_is_a_typed_http_error_the_model_reads() {
        let long = "e".repeat(2_000);
        let http = FakeHttp::with(vec![FakeHttp::ok(422, &long), FakeHttp::ok(503, "")]);
        let tool = WebhookTool::new(
            WebhookToolConfig::new("t", "https://api.example.com/"),
            &allow(&["api.example.com"]),
            http,
        )
        .unwrap();
        let (kind, message) = failed(block_on(tool.execute(json!({}), ctx("c1", None))));
        assert_eq!(kind, "HttpError");
        assert!(message.starts_with("HTTP 422: eeee"), "{message}");
        assert!(message.chars().count() < 600, "{}", message.len());
        assert!(
            !tool.dependency_down(&ToolError::typed(&kind, &message)),
            "a refused request says nothing of the host"
        );
        let (kind, message) = failed(block_on(tool.execute(json!({}), ctx("c2", None))));
        assert_eq!((kind.as_str(), message.as_str()), ("HttpError", "HTTP 503"));
        assert!(tool.dependency_down(&ToolError::typed(&kind, &message)), "a 503 counts toward the host's breaker");
        assert_eq!(tool.dependency().as_deref(), Some("api.example.com"));
    }

    #[test]
    fn transport_failure_is_a_network_or_timeout_error_result() {
        let http = FakeHttp::with(vec![
            Err(Error::new(ErrorCode::ProviderTimeout, "no complete answer within 10000 ms")),
            Err(Error::new(ErrorCode::ProviderNetwork, "connection refused")),
        ]);
        let tool = WebhookTool::new(
            WebhookToolConfig::new("t", "https://api.example.com/"),
            &allow(&["api.example.com"]),
            http,
        )
        .unwrap();
        let (kind, message) = failed(block_on(tool.execute(json!({}), ctx("c1", None))));
        assert_eq!(kind, "TimeoutError");
        assert_eq!(message, "POST https://api.example.com failed: no complete answer within 10000 ms");
        assert!(tool.dependency_down(&ToolError::typed(&kind, &message)));
        let (kind, message) = failed(block_on(tool.execute(json!({}), ctx("c2", None))));
        assert_eq!(kind, "NetworkError");
        assert!(message.contains("connection refused"), "{message}");
        assert!(tool.dependency_down(&ToolError::typed(&kind, &message)));
    }

    #[test]
    fn body_cut_by_the_transport_is_marked_and_kept_as_text() {
        let http = FakeHttp::with(vec![Ok(HttpResponse {
            status: 200,
            headers: vec![],
            body: "{\"a\": [1, 2".into(),
            truncated: true,
        })]);
        let mut cfg = WebhookToolConfig::new("t", "https://api.example.com/");
        cfg.max_response_bytes = 11;
        let tool = WebhookTool::new(cfg, &allow(&["api.example.com"]), http).unwrap();
        let out = block_on(tool.execute(json!({}), ctx("c1", None))).unwrap();
        assert_eq!(out.content, "{\"a\": [1, 2… [truncated: the first 11 bytes of a longer response]");
    }

    /// A random token-like string (letters and digits) from `rng`.
    fn token(rng: &crate::runtime::SplitMix64, len: usize) -> String {
        use crate::runtime::Rng;
        const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
        let mut t: String = (0..len).map(|_| ALPHABET[(rng.next_u64() % 62) as usize] as char).collect();
        t.replace_range(0..1, "7"); // at least one digit
        t
    }

    #[test]
    fn messages_never_show_the_url_path_or_query() {
        // Generated webhook URLs with secrets in the path and the query; transports and servers that echo the
        // URL, the path, the query or a single token in their error text; non-2xx bodies that quote them; bad
        // configurations naming them. No message contains a secret; each names the host.
        use crate::runtime::SplitMix64;
        let rng = SplitMix64::new(0x0bad_5eed);
        let mut checked = 0;
        for case in 0..300 {
            let (seg, sig) = (token(&rng, 8 + case % 30), token(&rng, 4 + case % 20));
            let path = format!("/hooks/T0{case}/{seg}");
            let query = if case % 3 == 0 { String::new() } else { format!("?sig={sig}&v=1") };
            let url = format!("https://hooks.example.com{path}{query}");
            let secrets: Vec<String> =
                if query.is_empty() { vec![seg.clone()] } else { vec![seg.clone(), sig.clone()] };
            let echoes = [
                format!("TypeError: fetch failed for {url}"),
                format!("Fetch API cannot load: \"{url}\"."),
                format!("connect ECONNREFUSED while requesting {path}{query}"),
                format!("token {seg} rejected"),
                format!("bad signature{}", if query.is_empty() { String::new() } else { format!(" {sig}") }),
            ];
            let mut replies: Vec<Result<HttpResponse>> =
                echoes.iter().map(|m| Err(Error::new(ErrorCode::ProviderNetwork, m.clone()))).collect();
            replies.push(FakeHttp::ok(404, &format!("Cannot POST {path}{query}")));
            replies.push(FakeHttp::ok(401, &format!("{{\"error\": \"invalid token\", \"url\": \"{url}\"}}")));
            replies.push(FakeHttp::ok(500, &format!("{} {seg}", "x".repeat(1_990))));
            let n = replies.len();
            let http = FakeHttp::with(replies);
            let tool =
                WebhookTool::new(WebhookToolConfig::new("t", &url), &allow(&["hooks.example.com"]), http).unwrap();
            let mut messages = vec![format!("{tool:?}")];
            for i in 0..n {
                let (_, m) = failed(block_on(tool.execute(json!({}), ctx(&format!("c{i}"), None))));
                assert!(m.contains("hooks.example.com") || m.starts_with("HTTP "), "case {case}: {m}");
                messages.push(m);
            }
            for bad in [
                url.replace("hooks.example.com", "hooks.example.com:99999"),
                url.replace("hooks.example.com", "evil.example.net"),
                url.replace("https://", "ftp://"),
                format!("{url} "),
            ] {
                let e = WebhookTool::new(
                    WebhookToolConfig::new("t", &bad),
                    &allow(&["hooks.example.com"]),
                    FakeHttp::with(vec![]),
                )
                .unwrap_err();
                messages.push(e.message);
            }
            for m in &messages {
                for secret in secrets.iter().chain([&path]) {
                    assert!(!m.contains(secret.as_str()), "case {case}: {secret:?} in {m:?}");
                }
                checked += 1;
            }
        }
        assert_eq!(checked, 300 * 13);
    }

    #[test]
    fn redact_cuts_urls_to_their_origin() {
        let u = ParsedUrl::parse("https://api.example.com:8443/v1/hooks/abc123def?key=s3cr3t").unwrap();
        assert_eq!(u.origin(), "https://api.example.com:8443");
        assert_eq!(
            u.redact("GET https://api.example.com:8443/v1/hooks/abc123def?key=s3cr3t failed (see http://other.net/x)"),
            "GET https://api.example.com:8443/… failed (see http://other.net/…)"
        );
        assert_eq!(u.redact("no route /v1/hooks/abc123def"), "no route [redacted]");
        assert_eq!(u.redact("key s3cr3t"), "key [redacted]");
        assert_eq!(u.redact("plain text, v1, hooks"), "plain text, v1, hooks", "short path words stay");
    }

    #[test]
    fn response_over_the_cap_is_truncated_on_a_char_boundary() {
        let body = "é".repeat(100); // 200 bytes
        let http = FakeHttp::with(vec![FakeHttp::ok(200, &body), FakeHttp::ok(200, "{\"a\":1}")]);
        let mut cfg = WebhookToolConfig::new("t", "https://api.example.com/");
        cfg.max_response_bytes = 51;
        let tool = WebhookTool::new(cfg, &allow(&["api.example.com"]), http).unwrap();
        let out = block_on(tool.execute(json!({}), ctx("c1", None))).unwrap();
        assert!(out.content.starts_with(&"é".repeat(25)), "{}", out.content);
        assert!(!out.content.starts_with(&"é".repeat(26)));
        assert!(out.content.contains("[truncated: 50 of 200 bytes]"), "{}", out.content);
        let out = block_on(tool.execute(json!({}), ctx("c2", None))).unwrap();
        assert_eq!(out.content, "{\"a\":1}");
    }

    #[test]
    fn config_deserializes_with_defaults_and_rejects_unknown_fields() {
        let cfg: WebhookToolConfig = serde_json::from_value(json!({
            "name": "notify", "url": "https://hooks.example.com/n", "needsApproval": true
        }))
        .unwrap();
        assert_eq!(cfg.method, "POST");
        assert_eq!(cfg.timeout_ms, 10_000);
        assert_eq!(cfg.max_response_bytes, 65_536);
        assert_eq!(cfg.input_schema, json!({"type": "object"}));
        assert!(cfg.needs_approval && !cfg.side_effecting);
        let err =
            serde_json::from_value::<WebhookToolConfig>(json!({"name": "n", "url": "https://a.b", "verb": "GET"}))
                .unwrap_err();
        assert!(err.to_string().contains("unknown field `verb`"), "{err}");
        assert!(Allowlist::check_entry("*.example.com").is_ok());
        assert!(Allowlist::check_entry("api.example.com").is_ok());
        for bad in ["https://api.example.com", "api.example.com:443", "*", "*.com", "", "a/b"] {
            assert!(Allowlist::check_entry(bad).is_err(), "{bad:?}");
        }
    }
}
