//! The JSON HTTP API (M19), independent of the platform: the Worker shell hands [`serve`] the request's head
//! and a [`Host`] (its body stream and a way to build the agent), and turns the [`ApiResponse`] back. Every
//! decision (routing, auth, limits, the order of checks, error mapping) is made here, so it is tested
//! natively.
//!
//! **Order of a request** ([`serve`]): the head alone decides first ([`admit`]: `/health`, then the bearer
//! token, then a declared `Content-Length` over [`MAX_BODY_BYTES`]); only an authorized request has its body
//! read (capped while reading: past the cap nothing is kept, and the rest is read and dropped up to
//! [`MAX_DRAINED_BYTES`] before the `413`) and only then is the configuration read and the agent built. An
//! unauthenticated caller therefore never makes the Worker parse a body, read its configuration or build an
//! agent, and learns nothing about either. The one exception is `POST /events/{token}`, whose capability is the
//! wait's token in its path: it is checked against the wait's record (so the agent is built), and every token
//! that opens nothing gets the same `404`.
//!
//! **Routes.** A request's method and path are parsed once into a [`Route`] ([`route`]: `404`, `405` and the id
//! checks are decided there, from one table), used for the token ([`admit`]: only `/health` is open), for
//! strict mode's forwarding ([`forward`]) and for dispatch (`Api::dispatch`, one arm per route calling its
//! resource's handler). Every segment counts: an empty id segment (`/runs//resume`, `/runs/`, `/approvals/`,
//! `/compare//b`) is `STEADFAST_SESSION_ID_INVALID`, never skipped. A route refusal (`404`, `405`, an invalid
//! id) is answered where every route is served: after the token, the body and the agent (only a wrong method on
//! `/health` or `/__conformance` is answered from the head).
//!
//! **Modules.** This file: the request and response, the order of a request ([`serve`], [`admit`]: token, body
//! limits), the [`Host`] the shell implements, and [`Api`] with its dispatch. [`route`]: the routes.
//! One handler module per resource: `runs` (`/runs…`, `/compare`), `sessions`, `approvals`, `deliveries`, `events`,
//! `service` (`/health`, `/sweep`, `/schedules`, `/demo/counts`). `execute`: running a run for a request (here,
//! spawned, SSE, `202`). [`sse`]: SSE frames and live bodies. [`forward`]: strict mode's forwarding. Every JSON
//! answer is a type of [`crate::front::contract`] (or a runtime result), never built by hand.
//!
//! Routes (all but `/health` and `POST /events/{token}` need `Authorization: Bearer <token>`):
//!
//! | method | path | does |
//! |---|---|---|
//! | GET | `/health` | liveness |
//! | POST | `/runs/{id}` | [`SendRequest`](crate::front::contract::SendRequest) `{input, businessState?, queue?, interrupt?}`: start or continue a run → RunResult (SSE with `Accept: text/event-stream`); with `queue` (or `Prefer: queue`) while another execution holds the run: `202` and the message waits for its next step boundary |
//! | POST | `/runs/{id}/resume` | finish an unfinished run → RunResult, or [`NothingToResume`](crate::front::contract::NothingToResume) |
//! | GET | `/runs/{id}` | the run's state: a [`RunView`](crate::front::contract::RunView) |
//! | DELETE | `/runs/{id}` | delete the run |
//! | GET | `/runs?status=…` | unfinished runs, each with `next`: the sweep's plan for it ([`crate::runtime::NextAttempt`]) |
//! | GET | `/runs/{id}/history?limit=` | past states, newest first |
//! | POST | `/runs/{id}/fork` | `{fromStep, patch?, newId?}` |
//! | GET | `/compare/{a}/{b}` | compare two runs |
//! | GET | `/approvals` | pending approvals |
//! | POST | `/approvals/{id}` | `{approved, note?}` resolve; `{answer, note?}` answers a question (`approved: false`: declines it) |
//! | POST | `/events/{token}` | no bearer token (the wait's token is the capability): the body (any JSON value) is delivered to the event wait → [`crate::runtime::EventDelivery`]; a malformed, guessed or spent token, or one whose run is gone: `STEADFAST_WAIT_NOT_FOUND` (404) alike |
//! | GET | `/sweep` | the recovery sweep's stored state: outage breaker, provider failures, listing cursor |
//! | POST | `/deliveries/{deliveryId}` | [`SendRequest`](crate::front::contract::SendRequest): run a delivered job once → [`crate::runtime::Delivery`] |
//! | POST | `/sessions/{id}` | [`SendRequest`](crate::front::contract::SendRequest): the session's next turn (run `<id>.turn-<n>`) → RunResult (SSE as for runs) |
//! | GET | `/sessions/{id}?limit=` | `{sessionId, turns}`: the turns, newest first ([`crate::runtime::SessionTurn`]) |
//! | POST | `/sessions/{id}/resume` | finish an interrupted newest turn → RunResult, or [`NothingToResume`](crate::front::contract::NothingToResume) |
//! | POST | `/sessions/{id}/fork` | `{fromStep, newId?}`: a new session from a turn → 201 [`crate::runtime::SessionFork`] |
//! | POST | `/sessions/{id}/discard-pending` | drop an unfinished newest turn → `{sessionId, discarded}` |
//! | DELETE | `/sessions/{id}` | delete every turn → `{sessionId, deletedTurns}` |
//! | GET | `/schedules` | `{schedules}`: each configured schedule's [`crate::runtime::ScheduleStatus`] |
//! | GET | `/demo/counts` | the demo tools' effect counters; `204` (no body) when the demo tools are off |
//! | POST | `/__conformance` | the store conformance suite on the real KV binding: only in builds with the cargo
//! feature `conformance` (tests), and only with the token |
//!
//! **Strict mode** (`"store": "durable-object"`): a request about one run is served by that run's object
//! ([`forward_target`] decides from the [`Route`], after the token): `/runs/{id}` and below; `POST /deliveries/{id}` (the object
//! of its run, [`crate::runtime::delivery_run_id`]); `POST /approvals/{id}` (the object of the run the approval
//! index names; the shell names that run to the object in the [`RUN_HEADER`] header, [`object_run`] reads it);
//! `POST /sessions/{id}` and `/sessions/{id}/resume` (the object of the turn the session executes first, named
//! the same way; a send whose newest turn is in progress has that turn finished in its own object first,
//! [`Forward::finish_first`]). A schedule's due fire is not a request: the cron tick sends it to the object of
//! its run ([`crate::runtime::Agent::due_fire`], [`crate::runtime::Agent::run_fire`]).
//! The object serves it with an [`Api`] that has a [`Spawner`], so `send`, `resume`, a delivery and an
//! approval's resolution execute the run as a task of their own, to its end whatever the client does.
//! `Prefer: respond-async` then answers `202 Accepted` with the run id as soon as the run has started (its
//! first event); a refusal before that (busy, awaiting approval, unknown or orphaned approval, bad input) is
//! the usual coded error, and so is an answer that needs no execution (an approval that leaves others of its
//! pause pending, a delivery already done). Without a spawner (KV mode) the preference is ignored (RFC 7240
//! allows it): the request drives the run and answers when it ends.

mod approvals;
mod child;
mod deliveries;
mod events;
mod execute;
pub mod forward;
pub mod route;
mod runs;
mod service;
mod sessions;
pub mod sse;

pub use child::{child_call_body, child_refusal, parse_child_call, read_child_answer};
pub use forward::{
    forward_failed, forward_target, object_run, Forward, Found, Lookup, FORWARD_RETRY_AFTER_MS, RUN_HEADER,
};
pub use route::{Route, RouteError};
pub use sse::{
    sse_body, sse_frame, sse_id, FrameReader, LiveBody, LiveParts, SSE_BACKLOG_BYTES, SSE_CUT_OFF, SSE_HEARTBEAT_MS,
};

use crate::core::error::{Error, ErrorCode, Result};
use crate::core::schedule::CompiledSchedule;
use crate::core::sweep::SweepOptions;
use crate::front::contract::{body_from_json, ErrorReply};
use crate::runtime::traits::LocalFuture;
use crate::runtime::{Agent, WatchOptions, Watchers};
use async_trait::async_trait;
use serde::Deserialize;
use serde_json::Value;
use std::rc::Rc;

/// Largest request body accepted.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// How much of a body over [`MAX_BODY_BYTES`] is still read (and dropped, not kept) before the `413` is sent:
/// a body that ends within it is read to its end, so the client, and any proxy between it and the Worker, gets
/// the answer after a complete request. (A partly read chunked body whose rest is cancelled breaks the exchange
/// for a proxy in front: wrangler dev's answered `503 Your worker restarted mid-request` instead of the `413`.)
/// Past it the rest is not read: a client that sends more (an endless body) gets the `413` as its connection
/// allows.
pub const MAX_DRAINED_BYTES: usize = 16 * 1024 * 1024;

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

    /// The options of an execution this request starts: in the trace of the request's W3C `traceparent`, when
    /// it sends a valid one (an invalid one is ignored, as the W3C spec says).
    fn send_options(&self) -> crate::runtime::SendOptions {
        let traceparent = self.header("traceparent").and_then(crate::core::trace::SpanContext::parse_traceparent);
        crate::runtime::SendOptions { traceparent, ..Default::default() }
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
    /// A body sent while it is produced (an SSE answer whose run is still executing): the shell sends its
    /// chunks as they come, after `body`, and keeps its task running to its end whether or not the client stays.
    pub live: Option<LiveBody>,
}

impl ApiResponse {
    fn json(status: u16, body: String) -> ApiResponse {
        ApiResponse { status, headers: vec![("content-type".into(), "application/json".into())], body, live: None }
    }

    /// `v` as the JSON body of a `status` response; a value that cannot be written as JSON (a bug) is a coded
    /// error, never a `null` body. Written straight to text (not through a `Value`: one serializer per response
    /// type instead of two, and no copy).
    fn with<T: serde::Serialize>(status: u16, v: &T) -> ApiResponse {
        ApiResponse::of(status, serde_json::to_string(v))
    }

    /// [`ApiResponse::with`] past its one generic step (one copy of this code, whatever `T`).
    fn of(status: u16, v: serde_json::Result<String>) -> ApiResponse {
        match v {
            Ok(body) => ApiResponse::json(status, body),
            Err(e) => ApiResponse::error(&Error::internal(format!("the response cannot be written as JSON: {e}"))),
        }
    }

    fn ok<T: serde::Serialize>(v: &T) -> ApiResponse {
        ApiResponse::with(200, v)
    }

    /// A send's result: `202 Accepted` when its message was queued for the execution that holds the run and
    /// nothing ran here (`queued.applied: false`), else `200`.
    fn sent(r: &crate::runtime::RunResult) -> ApiResponse {
        ApiResponse::with(if r.queued.as_ref().is_some_and(|q| !q.applied) { 202 } else { 200 }, r)
    }

    /// `204 No Content`: no body, no headers.
    fn no_content() -> ApiResponse {
        ApiResponse { status: 204, headers: Vec::new(), body: String::new(), live: None }
    }

    /// The coded JSON error response for `e` (an [`ErrorReply`]); a retryable error with a retry hint also says
    /// it in `Retry-After` (whole seconds, rounded up).
    pub fn error(e: &Error) -> ApiResponse {
        // Ignored: an Error (strings, numbers, a JSON value) always serialises.
        let body = serde_json::to_string(&ErrorReply { error: e.clone() }).unwrap_or_default();
        let mut r = ApiResponse::json(status_of(e), body);
        if let (true, Some(ms)) = (e.retryable, e.retry_after_ms) {
            r.headers.push(("retry-after".into(), ms.div_ceil(1000).to_string()));
        }
        r
    }

    /// This response with a live body read to its end (its task run alongside) into `body`: for callers that
    /// want the whole answer at once (tests, a client that does not stream).
    pub async fn collected(mut self) -> ApiResponse {
        let Some(parts) = self.live.take().and_then(|l| l.take()) else {
            return self;
        };
        let task = async move {
            if let Some(t) = parts.task {
                t.await
            }
        };
        // The frames alone: no heartbeat while collecting (nothing is idle on the wire).
        let read = futures::StreamExt::collect::<Vec<String>>(parts.frames);
        let ((), chunks) = futures::future::join(task, read).await;
        self.body.push_str(&chunks.concat());
        self
    }
}

/// The HTTP status of an error.
pub fn status_of(e: &Error) -> u16 {
    e.code.http_status()
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

/// Runs a future to its end as a task of its own, independent of the request that started it (a Durable
/// Object's event loop).
pub type Spawner = Rc<dyn Fn(LocalFuture<'static, ()>)>;

/// The API over one agent.
pub struct Api {
    agent: Agent,
    token: Option<String>,
    demo: Option<DemoCounts>,
    spawner: Option<Spawner>,
    schedules: Vec<CompiledSchedule>,
    recovery: SweepOptions,
    watchers: Option<Watchers>,
    watch: WatchOptions,
}

fn bad(msg: impl Into<String>) -> Error {
    Error::invalid_input(msg)
}

/// The request's JSON body as `T`; an empty (or blank) body is `None` when `allow_empty`, else refused.
fn parse_body<T: for<'de> Deserialize<'de>>(body: &[u8], allow_empty: bool) -> Result<Option<T>> {
    if body.iter().all(|b| b.is_ascii_whitespace()) {
        return if allow_empty { Ok(None) } else { Err(bad("the request needs a JSON body")) };
    }
    let text = std::str::from_utf8(body).map_err(|_| bad("the body is not UTF-8"))?;
    body_from_json(text).map(Some)
}

/// The request's JSON body as `T`, which it must have.
fn required_body<T: for<'de> Deserialize<'de>>(req: &ApiRequest) -> Result<T> {
    parse_body(&req.body, false)?.ok_or_else(|| bad("empty body"))
}

/// The `limit` query parameter (default 50).
fn limit(req: &ApiRequest) -> Result<usize> {
    match req.query("limit") {
        None => Ok(50),
        Some(l) => l.parse::<usize>().map_err(|_| bad("`limit` must be a number")),
    }
}

/// The credentials of an `Authorization: Bearer <token>` header. The scheme is case-insensitive (RFC 9110
/// §11.1: `Bearer`, `bearer`, `BEARER`), separated from the token by one or more spaces; the token is returned
/// as sent, without the surrounding spaces. `None` for any other scheme or a missing token.
pub fn bearer_token(header: &str) -> Option<&str> {
    let (scheme, rest) = header.trim_start_matches(' ').split_once(' ')?;
    let token = rest.trim_matches(' ');
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Checks the request's bearer token against `token` (constant time). Fails closed: no token configured →
/// `STEADFAST_AUTH_NOT_CONFIGURED` (503, saying how to set one); a missing, malformed or wrong token →
/// `STEADFAST_UNAUTHORIZED` (401).
pub fn authorize(req: &ApiRequest, token: Option<&str>) -> Result<()> {
    let Some(token) = token.filter(|t| !t.is_empty()) else {
        return Err(Error::new(
            ErrorCode::AuthNotConfigured,
            "no API token is configured: set one with `npx wrangler secret put STEADFAST_TOKEN` (locally: \
             STEADFAST_TOKEN=... in .dev.vars)",
        ));
    };
    let given = req.header("authorization").and_then(bearer_token).unwrap_or("");
    if !constant_time_eq(given.as_bytes(), token.as_bytes()) {
        return Err(Error::new(
            ErrorCode::Unauthorized,
            "missing or wrong bearer token (Authorization: Bearer <token>)",
        ));
    }
    Ok(())
}

fn payload_too_large() -> Error {
    Error::new(ErrorCode::PayloadTooLarge, format!("the body is over {MAX_BODY_BYTES} bytes"))
}

/// What a request may do, decided from its head alone (method, path, headers), before its body is read, the
/// configuration parsed or the agent built.
#[derive(Clone, Debug, PartialEq)]
pub enum Admission {
    /// Answer with this at once (`/health`: no token, no body, no configuration).
    Respond(ApiResponse),
    /// Authorized: read the body, build the agent, serve the route (or answer why there is none).
    Serve(std::result::Result<Route, RouteError>),
    /// Authorized: run the store conformance suite (only when the shell serves that route).
    Conformance,
}

/// Decides what a request may do from its head, its [`Route`] parsed once: `/health` is answered at once (no
/// token needed); `POST /events/{token}` needs none either (the wait's token is the capability, checked by the
/// runtime); every other route needs the bearer token ([`authorize`]); then a declared `Content-Length`
/// over [`MAX_BODY_BYTES`] is `STEADFAST_PAYLOAD_TOO_LARGE` (413) and an unreadable one
/// `STEADFAST_INVALID_INPUT`, before a byte of the body is read ([`serve`] then reads and drops such a body, up
/// to [`MAX_DRAINED_BYTES`], before it answers). `POST /__conformance` is [`Admission::Conformance`] only when
/// `conformance_route` (a build with the `conformance` feature); otherwise it is an ordinary unknown route.
pub fn admit(req: &ApiRequest, token: Option<&str>, conformance_route: bool) -> Result<Admission> {
    let route = Route::parse(&req.method, &req.path, conformance_route);
    match &route {
        Ok(Route::Health) => return Ok(Admission::Respond(service::health(""))),
        Err(refused) if refused.public() => return Err(refused.to_error(&req.method, &req.path)),
        // The wait's token in the path is the capability: no bearer token (whatever `Authorization` says).
        Ok(Route::DeliverEvent(_)) => {}
        _ => authorize(req, token)?,
    }
    if let Some(len) = req.header("content-length") {
        let len: u64 = len.trim().parse().map_err(|_| bad(format!("Content-Length {len:?} is not a number")))?;
        if len > MAX_BODY_BYTES as u64 {
            return Err(payload_too_large());
        }
    }
    match route {
        Ok(Route::Conformance) => Ok(Admission::Conformance),
        Err(refused @ RouteError::MethodNotAllowed { shape: route::Shape::Conformance, .. }) => {
            Err(refused.to_error(&req.method, &req.path))
        }
        route => Ok(Admission::Serve(route)),
    }
}

/// What [`serve`] needs from the platform shell: the request body as a stream of chunks, a way to build the API
/// (read the configuration, build the agent) and, in test builds, the store conformance suite. The shell
/// translates; [`serve`] decides when each is called.
#[async_trait(?Send)]
pub trait Host {
    /// The next chunk of the request body, `None` at its end. Called only for an admitted request.
    async fn body_chunk(&mut self) -> Result<Option<Vec<u8>>>;

    /// Tells the platform that the body will not be read (the request was answered from its head, or has no
    /// body to read): the shell cancels the body stream without reading it, so the client gets the answer
    /// instead of a reset upload. Default: nothing to do.
    fn discard_body(&mut self) {}

    /// Reads the configuration and builds the API over the agent, with `token` as its bearer token. Called
    /// only for an admitted request whose body was read within the limit.
    async fn api(&mut self, token: Option<String>) -> Result<Api>;

    /// The circuit breakers of this process (an isolate's), as `GET /health` shows them: a JSON array
    /// ([`crate::runtime::Breakers::json`]). Default: none.
    fn breakers(&self) -> String {
        String::new()
    }

    /// Whether this build serves `POST /__conformance` (the cargo feature `conformance`; never in a release).
    fn conformance_route(&self) -> bool {
        false
    }

    /// Runs the store conformance suite over the real KV binding (called only when [`Host::conformance_route`]
    /// and the token matched).
    async fn conformance(&mut self) -> Result<String> {
        Err(Error::new(ErrorCode::RouteNotFound, "no route /__conformance in this build"))
    }
}

/// Reads the body from `host`, refusing it once it passes [`MAX_BODY_BYTES`]: nothing more is kept, and the
/// rest is read (dropped) to its end or up to [`MAX_DRAINED_BYTES`] in all before the refusal is answered.
async fn read_body(host: &mut dyn Host) -> Result<Vec<u8>> {
    let mut body = Vec::new();
    while let Some(chunk) = host.body_chunk().await? {
        if body.len() + chunk.len() > MAX_BODY_BYTES {
            let read = body.len() + chunk.len();
            drop(body);
            drain_body(host, read).await;
            return Err(payload_too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Reads what is left of the body and drops it, to its end or until [`MAX_DRAINED_BYTES`] were read in all
/// (`read`: the bytes read already).
async fn drain_body(host: &mut dyn Host, mut read: usize) {
    while read < MAX_DRAINED_BYTES {
        match host.body_chunk().await {
            Ok(Some(c)) => read += c.len(),
            // Ended, or broke off: the refusal is the answer either way.
            Ok(None) | Err(_) => break,
        }
    }
}

/// Serves one request in the order that keeps unauthenticated callers away from everything else: [`admit`]
/// the head (route, health, token, declared size), then read the body (`GET`/`HEAD`: none) capped at
/// [`MAX_BODY_BYTES`] while reading, then build the API ([`Host::api`]: configuration and agent) and serve the
/// route. `head` is the request without its body. An authorized body that declares a length over the cap but
/// within [`MAX_DRAINED_BYTES`] is read and dropped before its `413` (as one found over the cap while reading);
/// every other refusal from the head is answered without reading a byte. Never panics; every failure is a coded
/// JSON error.
pub async fn serve(mut head: ApiRequest, token: Option<String>, host: &mut dyn Host) -> ApiResponse {
    let admitted = admit(&head, token.as_deref(), host.conformance_route());
    let m = head.method.to_ascii_uppercase();
    let bodiless = m == "GET" || m == "HEAD";
    // `admit` checks the declared length only once the token matched.
    let declared_over = matches!(&admitted, Err(e) if e.code == ErrorCode::PayloadTooLarge);
    let declared = head.header("content-length").and_then(|l| l.trim().parse::<u64>().ok());
    if declared_over && !bodiless && declared.is_some_and(|n| n <= MAX_DRAINED_BYTES as u64) {
        drain_body(host, 0).await;
    } else if !matches!(admitted, Ok(Admission::Serve(_))) || bodiless {
        host.discard_body();
    }
    let result = async {
        match admitted? {
            // `/health`, with the breakers of this process when it has any.
            Admission::Respond(r) => match host.breakers() {
                breakers if breakers.len() <= 2 => Ok(r),
                breakers => Ok(service::health(&breakers)),
            },
            Admission::Conformance => {
                let report = host.conformance().await?;
                Ok(ApiResponse {
                    status: 200,
                    headers: vec![("content-type".into(), "text/plain".into())],
                    body: report,
                    live: None,
                })
            }
            Admission::Serve(route) => {
                head.body = if bodiless { Vec::new() } else { read_body(host).await? };
                let api = host.api(token.clone()).await?;
                Ok(api.serve_route(route, &head).await)
            }
        }
    }
    .await;
    result.unwrap_or_else(|e| ApiResponse::error(&e))
}

impl Api {
    /// An API over `agent`; `token` is the bearer token (`None` refuses every route but `/health`).
    pub fn new(agent: Agent, token: Option<String>) -> Api {
        Api {
            agent,
            token: token.filter(|t| !t.is_empty()),
            demo: None,
            spawner: None,
            schedules: Vec::new(),
            recovery: SweepOptions::default(),
            watchers: None,
            watch: WatchOptions::default(),
        }
    }

    /// The hub of watchers the agent's executions report to (strict mode: the run object's), so that
    /// `GET /runs/{id}/events` hears of each entry at once and passes on the unrecorded events live, reading the
    /// run again only every [`WatchOptions::HUB_POLL_MS`] should it miss something; without one, a watch reads
    /// the run every [`WatchOptions::poll_ms`].
    pub fn with_watchers(mut self, hub: Watchers) -> Api {
        self.watchers = Some(hub);
        self.watch.poll_ms = WatchOptions::HUB_POLL_MS;
        self
    }

    /// How `GET /runs/{id}/events` waits (poll interval, longest watch).
    pub fn with_watch_options(mut self, opts: WatchOptions) -> Api {
        self.watch = opts;
        self
    }

    /// Executes `send`, `resume`, an approval's resolution and a delivery as tasks of their own through
    /// `spawner` (strict mode: inside the run's object), so a run goes on to its end when the request goes,
    /// and `Prefer: respond-async` is honoured.
    pub fn with_spawner(mut self, spawner: Spawner) -> Api {
        self.spawner = Some(spawner);
        self
    }

    /// The recovery sweep's options (`GET /runs` shows each run's next attempt under them).
    pub fn with_recovery(mut self, recovery: SweepOptions) -> Api {
        self.recovery = recovery;
        self
    }

    /// The configured schedules (`GET /schedules` shows them).
    pub fn with_schedules(mut self, schedules: Vec<CompiledSchedule>) -> Api {
        self.schedules = schedules;
        self
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

    /// Handles one request whose body has been read: [`admit`] (route, health, auth, size), then the route.
    /// Never panics; every failure is a coded JSON error. (The Worker goes through [`serve`], which admits the
    /// request before reading its body.)
    pub async fn handle(&self, req: ApiRequest) -> ApiResponse {
        let admitted = admit(&req, self.token.as_deref(), false).and_then(|a| {
            if req.body.len() > MAX_BODY_BYTES {
                Err(payload_too_large())
            } else {
                Ok(a)
            }
        });
        match admitted {
            Ok(Admission::Respond(r)) => r,
            Ok(Admission::Serve(route)) => self.serve_route(route, &req).await,
            // Not served by `handle` (it admits without the conformance route).
            Ok(Admission::Conformance) => self.serve_route(Err(RouteError::NotFound { run: None }), &req).await,
            Err(e) => ApiResponse::error(&e),
        }
    }

    /// Serves an admitted request's route, or answers why it has none.
    async fn serve_route(&self, route: std::result::Result<Route, RouteError>, req: &ApiRequest) -> ApiResponse {
        let served = match route {
            Ok(route) => self.dispatch(route, req).await,
            Err(refused) => Err(refused.to_error(&req.method, &req.path)),
        };
        served.unwrap_or_else(|e| ApiResponse::error(&e))
    }

    /// Calls the route's handler (in the module of its resource).
    async fn dispatch(&self, route: Route, req: &ApiRequest) -> Result<ApiResponse> {
        match route {
            Route::Health => Ok(service::health("")),
            // Served by `serve` (a shell that has it) before dispatch; here no route.
            Route::Conformance => Err(RouteError::NotFound { run: None }.to_error(&req.method, &req.path)),
            Route::ListRuns => self.list_runs(req).await,
            Route::Send(id) => self.send(req, &id).await,
            Route::GetRun(id) => self.get_run(&id).await,
            Route::DeleteRun(id) => self.delete_run(&id).await,
            Route::Resume(id) => self.resume(req, &id).await,
            Route::Events(id) => self.watch(req, &id).await,
            Route::History(id) => self.history(req, &id).await,
            Route::Fork(id) => self.fork(req, &id).await,
            Route::Compare(a, b) => self.compare(&a, &b).await,
            Route::ListApprovals => self.list_approvals().await,
            Route::Resolve(id) => self.resolve(req, &id).await,
            Route::Deliver(id) => self.deliver(req, &id).await,
            Route::DeliverEvent(token) => self.deliver_event(req, &token).await,
            Route::SessionSend(id) => self.session_send(req, &id).await,
            Route::SessionHistory(id) => self.session_history(req, &id).await,
            Route::SessionDelete(id) => self.session_delete(&id).await,
            Route::SessionResume(id) => self.session_resume(req, &id).await,
            Route::SessionFork(id) => self.session_fork(req, &id).await,
            Route::SessionDiscardPending(id) => self.session_discard_pending(req, &id).await,
            Route::Schedules => self.schedules().await,
            Route::Sweep => self.sweep_state().await,
            Route::Metrics => Ok(ApiResponse {
                status: 200,
                headers: vec![("content-type".into(), "text/plain; version=0.0.4; charset=utf-8".into())],
                body: self.agent.metrics().prometheus(),
                live: None,
            }),
            Route::DemoCounts => self.demo_counts().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_response_that_cannot_be_written_as_json_is_a_coded_500_not_a_null_body() {
        // Map keys that are not strings cannot be JSON object keys.
        let unwritable: std::collections::BTreeMap<(u8, u8), u8> = [((1, 2), 3)].into();
        for r in [ApiResponse::ok(&unwritable), ApiResponse::with(201, &unwritable)] {
            assert_eq!(r.status, 500);
            let body: Value = serde_json::from_str(&r.body).unwrap();
            assert_eq!(body["error"]["code"], "STEADFAST_INTERNAL", "{}", r.body);
        }
        assert_eq!(ApiResponse::with(201, &serde_json::json!({"a": 1})).body, r#"{"a":1}"#);
    }

    #[test]
    fn constant_time_comparison() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
        assert!(!constant_time_eq(b"", b"x"));
        assert!(constant_time_eq(b"", b""));
    }

    fn head(method: &str, path: &str, headers: &[(&str, &str)]) -> ApiRequest {
        ApiRequest {
            method: method.into(),
            path: path.into(),
            headers: headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            ..ApiRequest::default()
        }
    }

    #[test]
    fn bearer_scheme_is_case_insensitive_and_the_token_exact() {
        // Every upper/lower-case spelling of "bearer" (64 of them), with one or more spaces.
        for mask in 0u32..64 {
            let scheme: String = "bearer"
                .chars()
                .enumerate()
                .map(|(i, c)| if mask & (1 << i) != 0 { c.to_ascii_uppercase() } else { c })
                .collect();
            for sep in [" ", "  "] {
                let header = format!("{scheme}{sep}tok-EN_1");
                assert_eq!(bearer_token(&header), Some("tok-EN_1"), "{header:?}");
                let req = head("GET", "/runs", &[("Authorization", &header)]);
                assert!(authorize(&req, Some("tok-EN_1")).is_ok(), "{header:?}");
                assert_eq!(authorize(&req, Some("tok-en_1")).unwrap_err().code, ErrorCode::Unauthorized);
            }
        }
        for header in ["Basic tok", "Bearertok", "Bearer", "Bearer ", "tok", "Token tok", "Bearer\ttok"] {
            assert_eq!(bearer_token(header), None, "{header:?}");
        }
    }

    #[test]
    fn admission_is_decided_by_the_head_in_order() {
        let auth = [("authorization", "Bearer t0k")];
        // Health: no token needed, none configured.
        assert!(
            matches!(admit(&head("GET", "/health", &[]), None, false), Ok(Admission::Respond(r)) if r.status == 200)
        );
        assert_eq!(admit(&head("POST", "/health", &[]), None, false).unwrap_err().code, ErrorCode::MethodNotAllowed);
        // Fail closed: no token configured, whatever the request says.
        for path in ["/runs", "/runs/a", "/nope", "/__conformance"] {
            let e = admit(&head("POST", path, &auth), None, true).unwrap_err();
            assert_eq!(e.code, ErrorCode::AuthNotConfigured, "{path}");
            assert_eq!(status_of(&e), 503);
        }
        // The token comes before the declared size and before the route.
        let big = (MAX_BODY_BYTES + 1).to_string();
        let e = admit(&head("POST", "/runs/a", &[("content-length", &big)]), Some("t0k"), false).unwrap_err();
        assert_eq!(e.code, ErrorCode::Unauthorized);
        let e = admit(&head("POST", "/__conformance", &[]), Some("t0k"), true).unwrap_err();
        assert_eq!(e.code, ErrorCode::Unauthorized);
        // Authorized: the declared size is checked before reading.
        let e = admit(&head("POST", "/runs/a", &[auth[0], ("content-length", &big)]), Some("t0k"), false).unwrap_err();
        assert_eq!((e.code, status_of(&e)), (ErrorCode::PayloadTooLarge, 413));
        let e = admit(&head("POST", "/runs/a", &[auth[0], ("content-length", "ten")]), Some("t0k"), false).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidInput);
        let max = MAX_BODY_BYTES.to_string();
        assert_eq!(
            admit(&head("POST", "/runs/a", &[auth[0], ("content-length", &max)]), Some("t0k"), false),
            Ok(Admission::Serve(Ok(Route::Send("a".into()))))
        );
        // The conformance route exists only when the shell serves it.
        assert_eq!(admit(&head("POST", "/__conformance", &auth), Some("t0k"), true), Ok(Admission::Conformance));
        assert_eq!(
            admit(&head("POST", "/__conformance", &auth), Some("t0k"), false),
            Ok(Admission::Serve(Err(RouteError::NotFound { run: None })))
        );
        assert_eq!(
            admit(&head("GET", "/__conformance", &auth), Some("t0k"), true).unwrap_err().code,
            ErrorCode::MethodNotAllowed
        );
    }

    #[test]
    fn retry_after_is_sent_for_retryable_errors_with_a_hint_only() {
        let retry_after =
            |e: Error| ApiResponse::error(&e).headers.into_iter().find(|(k, _)| k == "retry-after").map(|(_, v)| v);
        let limited = |ms| Error::new(ErrorCode::ProviderRateLimited, "").with_retry_after_ms(ms);
        assert_eq!(retry_after(limited(Some(1))), Some("1".into()), "rounded up to a second");
        assert_eq!(retry_after(limited(Some(2_000))), Some("2".into()));
        assert_eq!(retry_after(limited(Some(2_001))), Some("3".into()));
        assert_eq!(retry_after(limited(Some(0))), Some("0".into()));
        assert_eq!(retry_after(limited(None)), None);
        let refused = Error::new(ErrorCode::ProviderBadRequest, "").with_retry_after_ms(Some(5_000));
        assert_eq!(retry_after(refused), None, "not retryable: no invitation to retry");
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
