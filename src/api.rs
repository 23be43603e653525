//! The JSON HTTP API (M19), independent of the platform: the Worker shell turns a `worker::Request` into an
//! [`ApiRequest`], calls [`Api::handle`], and turns the [`ApiResponse`] back. Every decision (routing, auth,
//! limits, error mapping) is made here, so it is tested natively.
//!
//! Routes (all but `/health` need `Authorization: Bearer <token>`):
//!
//! | method | path | does |
//! |---|---|---|
//! | GET | `/health` | liveness |
//! | POST | `/runs/{id}` | `{input, businessState?}` start or continue a run (SSE with `Accept: text/event-stream`) |
//! | POST | `/runs/{id}/resume` | finish an unfinished run |
//! | GET | `/runs/{id}` | checkpoint: status, transcript, approvals, lastError, attempts, fingerprint |
//! | DELETE | `/runs/{id}` | delete the run |
//! | GET | `/runs?status=…` | unfinished runs |
//! | GET | `/runs/{id}/history?limit=` | past states, newest first |
//! | POST | `/runs/{id}/fork` | `{fromStep, patch?, newId?}` |
//! | GET | `/compare/{a}/{b}` | compare two runs |
//! | GET | `/approvals` | pending approvals |
//! | POST | `/approvals/{id}` | `{approved, note?}` resolve |
//! | POST | `/deliveries/{deliveryId}` | `{input}` run a delivered job once |

use crate::core::checkpoint::RunStatus;
use crate::core::error::{Error, ErrorCode, Result};
use crate::core::events::EventEnvelope;
use crate::core::fork::ForkPatch;
use crate::core::ids::validate_run_id;
use crate::core::transcript::Message;
use crate::runtime::{Agent, ForkOptions, Input, Resolve, SendOptions, VecSink};
use serde::Deserialize;
use serde_json::{json, Value};
use std::rc::Rc;

/// Largest request body accepted.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// A request, as the shell hands it over.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApiRequest {
    /// Method.
    pub method: String,
    /// Path (no query).
    pub path: String,
    /// Query parameters (decoded).
    pub query: Vec<(String, String)>,
    /// Headers.
    pub headers: Vec<(String, String)>,
    /// Body bytes.
    pub body: Vec<u8>,
}

impl ApiRequest {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    fn query(&self, name: &str) -> Option<&str> {
        self.query.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

/// A response for the shell to send.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApiResponse {
    /// Status.
    pub status: u16,
    /// Headers.
    pub headers: Vec<(String, String)>,
    /// Body.
    pub body: String,
}

impl ApiResponse {
    fn json(status: u16, v: &Value) -> ApiResponse {
        ApiResponse {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            body: serde_json::to_string(v).unwrap_or_else(|_| "{}".into()),
        }
    }

    fn ok<T: serde::Serialize>(v: &T) -> ApiResponse {
        ApiResponse::json(200, &serde_json::to_value(v).unwrap_or(Value::Null))
    }

    /// The coded JSON error response for `e`.
    pub fn error(e: &Error) -> ApiResponse {
        ApiResponse::json(status_of(e), &json!({ "error": e }))
    }
}

/// The HTTP status of an error.
pub fn status_of(e: &Error) -> u16 {
    use ErrorCode::*;
    match e.code {
        SessionIdInvalid | InvalidInput => 400,
        Unauthorized => 401,
        ApprovalNotFound | CheckpointNotFound | RouteNotFound => 404,
        MethodNotAllowed => 405,
        SessionBusy
        | SessionAwaitingApproval
        | ApprovalAlreadyDecided
        | SessionExists
        | AgentDrift
        | ResumeToolMissing
        | CheckpointCorrupt
        | Aborted => 409,
        ApprovalOrphaned => 410,
        PayloadTooLarge => 413,
        RunNoProgress => 422,
        ProviderRateLimited
        | ProviderUnavailable
        | ProviderTimeout
        | ProviderNetwork
        | ProviderAuth
        | ProviderBadRequest
        | ProviderInvalidResponse
        | BudgetExhausted
        | ToolPropagated
        | ModelScriptExhausted => 502,
        AuthNotConfigured | StoreRateLimited | StoreUnavailable => 503,
        _ => 500,
    }
}

/// Compares two byte strings in time that depends only on their lengths.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = (a.len() ^ b.len()) as u8 | u8::from(a.len() != b.len());
    let n = a.len().max(b.len());
    for i in 0..n {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= x ^ y;
    }
    diff == 0
}

/// Reads the demo tools' effect counters (for `GET /demo/counts`).
pub type DemoCounts = Rc<dyn Fn() -> crate::runtime::traits::LocalFuture<'static, Result<Value>>>;

/// The API over one agent.
pub struct Api {
    agent: Agent,
    token: Option<String>,
    demo: Option<DemoCounts>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct SendBody {
    #[serde(default)]
    input: Option<Value>,
    #[serde(default)]
    business_state: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ResolveBody {
    approved: bool,
    #[serde(default)]
    note: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ForkBody {
    from_step: u32,
    #[serde(default)]
    patch: ForkPatch,
    #[serde(default)]
    new_id: Option<String>,
}

fn bad(msg: impl Into<String>) -> Error {
    Error::invalid_input(msg)
}

fn parse_body<T: for<'de> Deserialize<'de>>(body: &[u8], allow_empty: bool) -> Result<Option<T>> {
    if body.iter().all(|b| b.is_ascii_whitespace()) {
        return if allow_empty { Ok(None) } else { Err(bad("the request needs a JSON body")) };
    }
    let text = std::str::from_utf8(body).map_err(|_| bad("the body is not UTF-8"))?;
    serde_json::from_str(text).map(Some).map_err(|e| bad(format!("invalid JSON body: {e}")))
}

/// `input`: a string (one user message) or an array of `{role, content}` messages.
fn parse_input(v: Option<Value>) -> Result<Input> {
    match v {
        None | Some(Value::Null) => Ok(Input(Vec::new())),
        Some(Value::String(s)) if s.trim().is_empty() => Ok(Input(Vec::new())),
        Some(Value::String(s)) => Ok(Input(vec![Message::user(s)])),
        Some(Value::Array(items)) => {
            let mut out = Vec::new();
            for (i, item) in items.into_iter().enumerate() {
                let m: Message = serde_json::from_value(item)
                    .map_err(|e| bad(format!("input[{i}] is not a message ({{role, content}}): {e}")))?;
                if matches!(m, Message::Tool(_)) || !m.tool_calls().is_empty() {
                    return Err(bad(format!(
                        "input[{i}]: only system and user messages (or stored history) may be sent"
                    )));
                }
                out.push(m);
            }
            Ok(Input(out))
        }
        Some(_) => Err(bad("`input` must be a string or an array of messages")),
    }
}

impl Api {
    /// An API over `agent`; `token` is the bearer token (`None` refuses every route but `/health`).
    pub fn new(agent: Agent, token: Option<String>) -> Api {
        Api { agent, token: token.filter(|t| !t.is_empty()), demo: None }
    }

    /// Serves `GET /demo/counts` (the offline demo tools' effect counters) from `counts`.
    pub fn with_demo_counts(mut self, counts: DemoCounts) -> Api {
        self.demo = Some(counts);
        self
    }

    /// The agent.
    pub fn agent(&self) -> &Agent {
        &self.agent
    }

    /// Handles one request. Never panics; every failure is a coded JSON error.
    pub async fn handle(&self, req: ApiRequest) -> ApiResponse {
        match self.route(&req).await {
            Ok(r) => r,
            Err(e) => ApiResponse::error(&e),
        }
    }

    fn authorize(&self, req: &ApiRequest) -> Result<()> {
        let Some(token) = &self.token else {
            return Err(Error::new(
                ErrorCode::AuthNotConfigured,
                "no API token is configured: set one with `npx wrangler secret put STEADFAST_TOKEN` (locally: \
                 STEADFAST_TOKEN=... in .dev.vars)",
            ));
        };
        let given = req.header("authorization").and_then(|h| h.strip_prefix("Bearer ")).unwrap_or("");
        if !constant_time_eq(given.trim().as_bytes(), token.as_bytes()) {
            return Err(Error::new(
                ErrorCode::Unauthorized,
                "missing or wrong bearer token (Authorization: Bearer <token>)",
            ));
        }
        Ok(())
    }

    async fn route(&self, req: &ApiRequest) -> Result<ApiResponse> {
        let parts: Vec<&str> = req.path.trim_matches('/').split('/').filter(|p| !p.is_empty()).collect();
        let m = req.method.to_ascii_uppercase();
        if parts == ["health"] {
            return match m.as_str() {
                "GET" | "HEAD" => Ok(ApiResponse::ok(
                    &json!({"ok": true, "service": "steadfast", "version": env!("CARGO_PKG_VERSION")}),
                )),
                _ => Err(Error::new(ErrorCode::MethodNotAllowed, "use GET /health")),
            };
        }
        self.authorize(req)?;
        if req.body.len() > MAX_BODY_BYTES {
            return Err(Error::new(ErrorCode::PayloadTooLarge, format!("the body is over {MAX_BODY_BYTES} bytes")));
        }
        let not_allowed =
            || Err(Error::new(ErrorCode::MethodNotAllowed, format!("{m} is not allowed on {}", req.path)));
        match parts.as_slice() {
            ["runs"] => match m.as_str() {
                "GET" => self.list_runs(req).await,
                _ => not_allowed(),
            },
            ["runs", id] => {
                validate_run_id(id)?;
                match m.as_str() {
                    "POST" => self.send(req, id).await,
                    "GET" => self.get_run(id).await,
                    "DELETE" => {
                        self.agent.delete(id).await?;
                        Ok(ApiResponse::ok(&json!({"runId": id, "deleted": true})))
                    }
                    _ => not_allowed(),
                }
            }
            ["runs", id, "resume"] => {
                validate_run_id(id)?;
                if m != "POST" {
                    return not_allowed();
                }
                parse_body::<Value>(&req.body, true)?;
                match self.agent.resume(id, SendOptions::default()).await? {
                    Some(r) => Ok(ApiResponse::ok(&r)),
                    None => Ok(ApiResponse::ok(&json!({"runId": id, "resumed": false, "reason": "nothing to resume"}))),
                }
            }
            ["runs", id, "history"] => {
                validate_run_id(id)?;
                if m != "GET" {
                    return not_allowed();
                }
                let limit = match req.query("limit") {
                    None => 50,
                    Some(l) => l.parse::<usize>().map_err(|_| bad("`limit` must be a number"))?,
                };
                Ok(ApiResponse::ok(&self.agent.history(id, limit).await?))
            }
            ["runs", id, "fork"] => {
                validate_run_id(id)?;
                if m != "POST" {
                    return not_allowed();
                }
                let body: ForkBody = parse_body(&req.body, false)?.ok_or_else(|| bad("empty body"))?;
                if let Some(n) = &body.new_id {
                    validate_run_id(n)?;
                }
                let fork = self
                    .agent
                    .fork(id, ForkOptions { from_step: body.from_step, patch: body.patch, new_id: body.new_id })
                    .await?;
                Ok(ApiResponse::json(201, &serde_json::to_value(&fork).unwrap_or(Value::Null)))
            }
            ["compare", a, b] => {
                validate_run_id(a)?;
                validate_run_id(b)?;
                if m != "GET" {
                    return not_allowed();
                }
                Ok(ApiResponse::ok(&self.agent.compare(a, b).await?))
            }
            ["demo", "counts"] if self.demo.is_some() => match (m.as_str(), &self.demo) {
                ("GET", Some(counts)) => Ok(ApiResponse::ok(&counts().await?)),
                _ => not_allowed(),
            },
            ["approvals"] => match m.as_str() {
                "GET" => Ok(ApiResponse::ok(&self.agent.approvals().list().await?)),
                _ => not_allowed(),
            },
            ["approvals", id] => {
                if m != "POST" {
                    return not_allowed();
                }
                if id.is_empty()
                    || id.len() > 100
                    || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
                {
                    return Err(bad("invalid approval id"));
                }
                let body: ResolveBody = parse_body(&req.body, false)?.ok_or_else(|| bad("empty body"))?;
                let r = self
                    .agent
                    .approvals()
                    .resolve(Resolve { id: id.to_string(), approved: body.approved, note: body.note })
                    .await?;
                Ok(ApiResponse::ok(&r))
            }
            ["deliveries", id] => {
                if m != "POST" {
                    return not_allowed();
                }
                if id.is_empty() || id.len() > 180 {
                    return Err(bad("invalid delivery id"));
                }
                let body: SendBody = parse_body(&req.body, false)?.ok_or_else(|| bad("empty body"))?;
                let input = parse_input(body.input)?;
                let opts = SendOptions { business_state: body.business_state, ..SendOptions::default() };
                Ok(ApiResponse::ok(&self.agent.run_once(id, input, opts).await?))
            }
            _ => Err(Error::new(ErrorCode::RouteNotFound, format!("no route {m} {}", req.path))),
        }
    }

    async fn send(&self, req: &ApiRequest, id: &str) -> Result<ApiResponse> {
        let body: Option<SendBody> = parse_body(&req.body, true)?;
        let (input, business_state) = match body {
            Some(b) => (parse_input(b.input)?, b.business_state),
            None => (Input(Vec::new()), None),
        };
        let sse = req.header("accept").is_some_and(|a| a.contains("text/event-stream"));
        let sink = VecSink::new();
        let opts = SendOptions {
            business_state,
            events: if sse { Some(Rc::new(sink.clone())) } else { None },
            ..SendOptions::default()
        };
        let result = self.agent.send(id, input, opts).await;
        if !sse {
            return result.map(|r| ApiResponse::ok(&r));
        }
        // A refusal before anything ran is a plain error response; otherwise the events (ending in run.done
        // or error) are the stream.
        let events = sink.events();
        if events.is_empty() {
            return result.map(|r| ApiResponse::ok(&r));
        }
        Ok(ApiResponse {
            status: 200,
            headers: vec![
                ("content-type".into(), "text/event-stream".into()),
                ("cache-control".into(), "no-cache".into()),
            ],
            body: sse_body(&events),
        })
    }

    async fn get_run(&self, id: &str) -> Result<ApiResponse> {
        let cp = self.agent.load(id).await?.ok_or_else(|| {
            Error::new(ErrorCode::CheckpointNotFound, format!("run '{id}' has no checkpoint")).with_run(id)
        })?;
        Ok(ApiResponse::ok(&json!({
            "runId": cp.run_id,
            "status": cp.status,
            "finishReason": cp.finish_reason,
            "step": cp.step_index,
            "usage": cp.usage,
            "messages": cp.messages,
            "approvalIds": cp.approval_ids,
            "lastError": cp.last_error,
            "attempts": cp.attempts,
            "quarantined": cp.quarantined,
            "fingerprint": cp.fingerprint,
            "businessState": cp.business_state,
            "savedAt": cp.saved_at,
        })))
    }

    async fn list_runs(&self, req: &ApiRequest) -> Result<ApiResponse> {
        let status = match req.query("status") {
            None => None,
            Some("in-progress") => Some(RunStatus::InProgress),
            Some("awaiting-approval") => Some(RunStatus::AwaitingApproval),
            Some(other) => return Err(bad(format!("unknown status {other:?} (in-progress | awaiting-approval)"))),
        };
        let runs: Vec<_> =
            self.agent.pending().await?.into_iter().filter(|r| status.is_none_or(|s| r.status == s)).collect();
        Ok(ApiResponse::ok(&json!({ "runs": runs })))
    }
}

/// Server-sent events: one `event:`/`id:`/`data:` block per event.
pub fn sse_body(events: &[EventEnvelope]) -> String {
    let mut out = String::new();
    for e in events {
        let data = serde_json::to_string(e).unwrap_or_default();
        let kind = serde_json::to_value(e).ok().and_then(|v| v["type"].as_str().map(String::from)).unwrap_or_default();
        out.push_str(&format!("id: {}\nevent: {kind}\ndata: {data}\n\n", e.seq));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_time_comparison() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
        assert!(!constant_time_eq(b"", b"x"));
        assert!(constant_time_eq(b"", b""));
    }

    #[test]
    fn statuses_for_codes() {
        assert_eq!(status_of(&Error::new(ErrorCode::SessionIdInvalid, "")), 400);
        assert_eq!(status_of(&Error::new(ErrorCode::SessionBusy, "")), 409);
        assert_eq!(status_of(&Error::new(ErrorCode::SessionAwaitingApproval, "")), 409);
        assert_eq!(status_of(&Error::new(ErrorCode::PayloadTooLarge, "")), 413);
        assert_eq!(status_of(&Error::new(ErrorCode::Unauthorized, "")), 401);
    }
}
