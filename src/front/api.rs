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
//! agent, and learns nothing about either.
//!
//! **Paths.** Every segment counts: an empty id segment (`/runs//resume`, `/runs/`, `/approvals/`,
//! `/compare//b`) is `STEADFAST_SESSION_ID_INVALID`, never skipped.
//!
//! Routes (all but `/health` need `Authorization: Bearer <token>`):
//!
//! | method | path | does |
//! |---|---|---|
//! | GET | `/health` | liveness |
//! | POST | `/runs/{id}` | [`SendRequest`] `{input, businessState?}`: start or continue a run → RunResult (SSE with `Accept: text/event-stream`) |
//! | POST | `/runs/{id}/resume` | finish an unfinished run |
//! | GET | `/runs/{id}` | the run's state: a [`RunView`] |
//! | DELETE | `/runs/{id}` | delete the run |
//! | GET | `/runs?status=…` | unfinished runs, each with `next`: the sweep's plan for it ([`crate::runtime::NextAttempt`]) |
//! | GET | `/runs/{id}/history?limit=` | past states, newest first |
//! | POST | `/runs/{id}/fork` | `{fromStep, patch?, newId?}` |
//! | GET | `/compare/{a}/{b}` | compare two runs |
//! | GET | `/approvals` | pending approvals |
//! | POST | `/approvals/{id}` | `{approved, note?}` resolve |
//! | GET | `/sweep` | the recovery sweep's stored state: outage breaker, provider failures, listing cursor |
//! | POST | `/deliveries/{deliveryId}` | [`SendRequest`]: run a delivered job once → [`crate::runtime::Delivery`] |
//! | POST | `/sessions/{id}` | [`SendRequest`]: the session's next turn (run `<id>.turn-<n>`) → RunResult (SSE as for runs) |
//! | GET | `/sessions/{id}?limit=` | `{sessionId, turns}`: the turns, newest first ([`crate::runtime::SessionTurn`]) |
//! | POST | `/sessions/{id}/resume` | finish an interrupted newest turn |
//! | POST | `/sessions/{id}/fork` | `{fromStep, newId?}`: a new session from a turn → 201 [`crate::runtime::SessionFork`] |
//! | POST | `/sessions/{id}/discard-pending` | drop an unfinished newest turn → `{sessionId, discarded}` |
//! | DELETE | `/sessions/{id}` | delete every turn → `{sessionId, deletedTurns}` |
//! | GET | `/schedules` | `{schedules}`: each configured schedule's [`crate::runtime::ScheduleStatus`] |
//! | GET | `/demo/counts` | the demo tools' effect counters; `204` (no body) when the demo tools are off |
//! | POST | `/__conformance` | the store conformance suite on the real KV binding: only in builds with the cargo
//! feature `conformance` (tests), and only with the token |
//!
//! **Strict mode** (`"store": "durable-object"`): a request about one run is served by that run's object
//! ([`forward_target`] decides, after the token): `/runs/{id}` and below; `POST /deliveries/{id}` (the object
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

use crate::core::checkpoint::RunStatus;
use crate::core::error::{Error, ErrorCode, Result};
use crate::core::events::EventEnvelope;
use crate::core::fork::ForkPatch;
use crate::core::ids::{validate_run_id, validate_session_id};
use crate::core::replay::Cursor;
use crate::core::schedule::CompiledSchedule;
use crate::core::sweep::{SweepOptions, SweepState};
use crate::front::config::StoreMode;
use crate::front::contract::{body_from_json, RunView, SendRequest};
use crate::runtime::traits::{EventSink, LocalFuture};
use crate::runtime::{
    delivery_run_id, Agent, ForkOptions, Input, Resolve, SendOptions, SessionForkOptions, WatchOptions, WatchSink,
    WatchStart, Watched, Watchers,
};
use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{json, Value};
use std::cell::RefCell;
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

/// How long a live SSE answer stays silent before a heartbeat comment (`: heartbeat`) is sent, so proxies and
/// clients do not close an idle connection (a model thinking, a slow tool). A constant: 15 s, under the common
/// 30–60 s idle timeouts of proxies.
pub const SSE_HEARTBEAT_MS: u64 = 15_000;

/// What a live body is made of: its SSE frames, the timer for heartbeats, and the task producing the frames
/// when it is not already running elsewhere (a run executing in this request, KV mode).
pub struct LiveParts {
    frames: FrameReader,
    timer: Rc<dyn crate::time::Sleep>,
    task: Option<LocalFuture<'static, ()>>,
}

impl LiveParts {
    /// The body's chunks as the shell sends them (each frame as it comes, a `: heartbeat` comment after
    /// [`SSE_HEARTBEAT_MS`] without one; the body ends with the frames), and the task to run to its end on its
    /// own (the Worker: `waitUntil`), so the run does not depend on the client reading.
    pub fn into_stream(self) -> (futures::stream::LocalBoxStream<'static, String>, Option<LocalFuture<'static, ()>>) {
        let (frames, timer) = (self.frames, self.timer);
        let chunks = futures::stream::unfold((frames, timer), |(mut frames, timer)| async move {
            let next = {
                let tick = timer.sleep(SSE_HEARTBEAT_MS);
                futures::pin_mut!(tick);
                match futures::future::select(futures::StreamExt::next(&mut frames), tick).await {
                    futures::future::Either::Left((frame, _)) => Some(frame),
                    futures::future::Either::Right(_) => None,
                }
            };
            match next {
                Some(Some(frame)) => Some((frame, (frames, timer))),
                Some(None) => None,
                None => Some((": heartbeat\n\n".to_string(), (frames, timer))),
            }
        });
        (Box::pin(chunks), self.task)
    }
}

/// A streamed body, taken once by the shell ([`LiveBody::take`]). Clones share it.
#[derive(Clone)]
pub struct LiveBody(Rc<RefCell<Option<LiveParts>>>);

impl LiveBody {
    fn new(parts: LiveParts) -> LiveBody {
        LiveBody(Rc::new(RefCell::new(Some(parts))))
    }

    /// The chunks and the task; `None` once taken.
    pub fn take(&self) -> Option<LiveParts> {
        self.0.borrow_mut().take()
    }
}

impl std::fmt::Debug for LiveBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LiveBody")
    }
}

impl PartialEq for LiveBody {
    fn eq(&self, other: &LiveBody) -> bool {
        Rc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for LiveBody {}

impl ApiResponse {
    fn json(status: u16, v: &Value) -> ApiResponse {
        ApiResponse {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            // Ignored: a `Value` always serialises (its map keys are strings).
            body: serde_json::to_string(v).unwrap_or_default(),
            live: None,
        }
    }

    /// `v` as the JSON body of a `status` response; a value that cannot be written as JSON (a bug) is a coded
    /// error, never a `null` body.
    fn with<T: serde::Serialize>(status: u16, v: &T) -> ApiResponse {
        ApiResponse::of(status, serde_json::to_value(v))
    }

    /// [`ApiResponse::with`] past its one generic step (one copy of this code, whatever `T`).
    fn of(status: u16, v: serde_json::Result<Value>) -> ApiResponse {
        match v {
            Ok(v) => ApiResponse::json(status, &v),
            Err(e) => ApiResponse::error(&Error::internal(format!("the response cannot be written as JSON: {e}"))),
        }
    }

    fn ok<T: serde::Serialize>(v: &T) -> ApiResponse {
        ApiResponse::with(200, v)
    }

    /// The coded JSON error response for `e`; a retryable error with a retry hint also says it in `Retry-After`
    /// (whole seconds, rounded up).
    pub fn error(e: &Error) -> ApiResponse {
        let mut r = ApiResponse::json(status_of(e), &json!({ "error": e }));
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct SessionForkBody {
    from_step: u32,
    #[serde(default)]
    new_id: Option<String>,
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
    body_from_json(text).map(Some)
}

/// The path's segments, every one kept: `/runs/a/resume` → `["runs", "a", "resume"]`, `/runs//resume` →
/// `["runs", "", "resume"]`, `/runs/` → `["runs", ""]`, `/` → `[]`. One leading slash is dropped.
fn segments(path: &str) -> Vec<&str> {
    match path.strip_prefix('/').unwrap_or(path) {
        "" => Vec::new(),
        p => p.split('/').collect(),
    }
}

/// An id segment of the path must not be empty: `STEADFAST_SESSION_ID_INVALID`, never a skipped segment.
fn non_empty_segment(kind: &str, id: &str) -> Result<()> {
    if id.is_empty() {
        return Err(Error::new(
            ErrorCode::SessionIdInvalid,
            format!("the {kind} id in the path is empty (a segment between two '/' is missing)"),
        ));
    }
    Ok(())
}

/// A run id segment: not empty, and a valid run id.
fn run_id_segment(id: &str) -> Result<()> {
    non_empty_segment("run", id)?;
    validate_run_id(id)
}

/// An approval id segment: not empty, at most 100 letters, digits, `_` or `-`.
fn approval_id_segment(id: &str) -> Result<()> {
    non_empty_segment("approval", id)?;
    if id.len() > 100 || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
        return Err(bad("invalid approval id"));
    }
    Ok(())
}

/// A delivery id segment: not empty, at most 180 bytes.
fn delivery_id_segment(id: &str) -> Result<()> {
    non_empty_segment("delivery", id)?;
    if id.len() > 180 {
        return Err(bad("invalid delivery id"));
    }
    Ok(())
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
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Answer with this at once (`/health`: no token, no body, no configuration).
    Respond(ApiResponse),
    /// Authorized: read the body, build the agent, serve the route.
    Serve,
    /// Authorized: run the store conformance suite (only when the shell serves that route).
    Conformance,
}

/// Decides what a request may do from its head: `/health` is answered at once (no token needed); every other
/// route needs the bearer token ([`authorize`]); then a declared `Content-Length` over [`MAX_BODY_BYTES`] is
/// `STEADFAST_PAYLOAD_TOO_LARGE` (413) and an unreadable one `STEADFAST_INVALID_INPUT`, before a byte of the
/// body is read ([`serve`] then reads and drops such a body, up to [`MAX_DRAINED_BYTES`], before it answers).
/// `POST /__conformance` is [`Admission::Conformance`] only when `conformance_route` (a build with
/// the `conformance` feature); otherwise it is an ordinary unknown route.
pub fn admit(req: &ApiRequest, token: Option<&str>, conformance_route: bool) -> Result<Admission> {
    let parts = segments(&req.path);
    let m = req.method.to_ascii_uppercase();
    if parts == ["health"] {
        return match m.as_str() {
            "GET" | "HEAD" => Ok(Admission::Respond(ApiResponse::ok(
                &json!({"ok": true, "service": "steadfast", "version": env!("CARGO_PKG_VERSION")}),
            ))),
            _ => Err(Error::new(ErrorCode::MethodNotAllowed, "use GET /health")),
        };
    }
    authorize(req, token)?;
    if let Some(len) = req.header("content-length") {
        let len: u64 = len.trim().parse().map_err(|_| bad(format!("Content-Length {len:?} is not a number")))?;
        if len > MAX_BODY_BYTES as u64 {
            return Err(payload_too_large());
        }
    }
    if conformance_route && parts == ["__conformance"] {
        return match m.as_str() {
            "POST" => Ok(Admission::Conformance),
            _ => Err(Error::new(ErrorCode::MethodNotAllowed, "use POST /__conformance")),
        };
    }
    Ok(Admission::Serve)
}

/// The header in which the Worker names, to a run's object, the run of a request whose path does not name it
/// (`POST /approvals/{id}`). Set only by the Worker when it forwards (it replaces whatever the client sent);
/// the objects are reachable only through the Worker.
pub const RUN_HEADER: &str = "x-steadfast-run";

/// A strict-mode request on its way to a run's object ([`forward_target`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Forward {
    /// The run whose object serves the request.
    pub run: String,
    /// Whether the path does not name the run (an approval's resolution): the shell sends the request with
    /// [`RUN_HEADER`] set to `run`, as [`object_run`] expects it.
    pub name_run: bool,
    /// A session's send whose newest turn is in progress: the shell first sends `POST <this path>` (the
    /// session's resume: no body, the request's authorization, [`RUN_HEADER`] set to `run`) to `run`'s object,
    /// so that turn finishes in its own object, waits for its answer (not the client's), and asks
    /// [`forward_target`] again, which then names the new turn's object. At most one such hop: a second answer
    /// that asks for one again (the turn still unfinished: paused, or executing elsewhere) is forwarded as it is
    /// (that object's session send answers why).
    pub finish_first: Option<String>,
}

/// What a [`Lookup`] found: the run, and for a session whether it is the session's newest turn, in progress.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    /// The run.
    pub run: String,
    /// A session's newest turn, in progress ([`crate::runtime::NextExecution::in_progress`]).
    pub in_progress: bool,
}

impl Found {
    /// A run found by an index (no session turn).
    pub fn run(run: String) -> Found {
        Found { run, in_progress: false }
    }
}

impl From<crate::runtime::NextExecution> for Found {
    fn from(n: crate::runtime::NextExecution) -> Found {
        Found { run: n.run_id, in_progress: n.in_progress }
    }
}

/// What a request is about, for strict mode: a run its head names, an approval whose run the index knows, or
/// a session whose next execution's run its turns name.
enum About<'a> {
    Run(String),
    Approval(&'a str),
    /// A session; whether the request is its send (not its resume).
    Session(&'a str, bool),
}

/// What [`forward_target`] asks the platform to look up before it can name a request's run: an approval's run
/// (the approval index), or the run a session's send or resume executes first
/// ([`crate::runtime::Session::next_execution`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup<'a> {
    /// The run of this approval.
    Approval(&'a str),
    /// The run this session's next send or resume executes first.
    Session(&'a str),
}

/// The run (or approval) a request is about, when its run's object serves it in strict mode: every route under
/// `/runs/{id}` with a valid run id; `POST /deliveries/{id}` (its run: [`delivery_run_id`]) and
/// `POST /approvals/{id}` with a valid id. Anything else is served where it arrived (and refused there).
fn about(head: &ApiRequest) -> Option<About<'_>> {
    let post = head.method.eq_ignore_ascii_case("POST");
    match segments(&head.path).as_slice() {
        ["runs", id, ..] if run_id_segment(id).is_ok() => Some(About::Run(id.to_string())),
        ["deliveries", id] if post && delivery_id_segment(id).is_ok() => Some(About::Run(delivery_run_id(id))),
        ["approvals", id] if post && approval_id_segment(id).is_ok() => Some(About::Approval(id)),
        ["sessions", id] if post && validate_session_id(id).is_ok() => Some(About::Session(id, true)),
        ["sessions", id, "resume"] if post && validate_session_id(id).is_ok() => Some(About::Session(id, false)),
        _ => None,
    }
}

/// In strict mode, where this request is served: by the object of the run it is about, once it is admitted
/// (the token is checked here first, so an unauthenticated request wakes no object and neither `mode` nor the
/// index is read): `/runs/{id}` and below, `POST /deliveries/{id}`, `POST /approvals/{id}` when `lookup` (the
/// approval index) names a valid run, and `POST /sessions/{id}` and `/sessions/{id}/resume` to the object of the
/// run `lookup` says the session executes first (its unfinished newest turn, else its next one; a send to a
/// session whose newest turn is in progress finishes that turn in its object first: [`Forward::finish_first`]).
/// `None`: the request is served where it arrived (listings, compare, health, every refusal; an approval the
/// index does not know, or cannot be read for, whose resolution there answers `STEADFAST_APPROVAL_NOT_FOUND` or
/// the index's error as in KV mode), and always in KV mode.
pub async fn forward_target(
    head: &ApiRequest,
    token: Option<&str>,
    mode: impl FnOnce() -> Result<StoreMode>,
    lookup: impl AsyncFnOnce(Lookup<'_>) -> Result<Option<Found>>,
) -> Option<Forward> {
    if !matches!(admit(head, token, false), Ok(Admission::Serve)) {
        return None;
    }
    let about = about(head)?;
    if mode().ok() != Some(StoreMode::DurableObject) {
        return None;
    }
    let (asked, send) = match about {
        About::Run(run) => return Some(Forward { run, name_run: false, finish_first: None }),
        About::Approval(id) => (Lookup::Approval(id), None),
        About::Session(id, send) => (Lookup::Session(id), Some(id).filter(|_| send)),
    };
    match lookup(asked).await {
        Ok(Some(found)) if validate_run_id(&found.run).is_ok() => {
            let finish_first = send.filter(|_| found.in_progress).map(|id| format!("/sessions/{id}/resume"));
            Some(Forward { run: found.run, name_run: true, finish_first })
        }
        _ => None,
    }
}

/// How long a client waits before sending again a request that could not reach its run's object
/// ([`forward_failed`]).
pub const FORWARD_RETRY_AFTER_MS: u64 = 1_000;

/// The answer to a strict-mode request the Worker could not forward to its run's object, or whose object failed
/// before answering (`why`: the platform's words: the object was reset by a deploy or an eviction, is
/// overloaded, the call broke in transit): `STEADFAST_STORE_UNAVAILABLE` (503, retryable, `Retry-After: 1`),
/// naming the run. Whether the request took effect in the object is unknown: `GET /runs/{id}` tells, and a
/// send or a resume sent again continues the run from its journal.
pub fn forward_failed(to: &Forward, why: &str) -> ApiResponse {
    let e = Error::new(
        ErrorCode::StoreUnavailable,
        format!("run '{}': its run object did not answer ({why}); it may or may not have taken the request", to.run),
    )
    .with_run(&to.run)
    .with_retry_after_ms(Some(FORWARD_RETRY_AFTER_MS));
    ApiResponse::error(&e)
}

/// Inside a run's object: the run a forwarded request is about, as [`forward_target`] sent it (the path, or
/// for an approval [`RUN_HEADER`]). `None`: not a request the Worker forwards (the object refuses it).
pub fn object_run(head: &ApiRequest) -> Option<String> {
    match about(head)? {
        About::Run(run) => Some(run),
        About::Approval(_) | About::Session(..) => {
            head.header(RUN_HEADER).filter(|r| validate_run_id(r).is_ok()).map(str::to_string)
        }
    }
}

/// Whether the request asks to be answered before its run ends (`Prefer: respond-async`, RFC 7240).
fn prefers_async(req: &ApiRequest) -> bool {
    req.header("prefer").is_some_and(|p| p.to_ascii_lowercase().contains("respond-async"))
}

/// How many bytes of SSE frames may wait for a client that reads slower than its run produces them. A frame
/// that would pass it (while others wait) cuts the client off: the frames already waiting are still sent, then
/// [`SSE_CUT_OFF`], and the stream ends; the run goes on without it (a watch stops). The client comes back with
/// `GET /runs/{id}/events` and the last `id:` it read as `Last-Event-ID` (an `EventSource` does so by itself) and
/// gets the rest of what the journal recorded. A frame that finds none waiting is always queued, whatever its size.
/// (A watch sends the journal's entries at the client's pace, one entry once the previous one was read, so only
/// the live events of a run executing meanwhile can pile up.)
pub const SSE_BACKLOG_BYTES: usize = 1024 * 1024;

/// The comment that ends a stream whose client fell [`SSE_BACKLOG_BYTES`] behind.
pub const SSE_CUT_OFF: &str = ": cut off: this client fell 1 MiB of events behind; resume with GET /runs/{id}/events \
                               and the last id as Last-Event-ID\n\n";

/// The SSE frames of one execution on their way from its events to a live body: queued by the run, read by the
/// body; closed when the run ends, no longer filled once the reader is gone (the client left) or has fallen
/// [`SSE_BACKLOG_BYTES`] behind (cut off).
#[derive(Default)]
struct FrameQueue {
    frames: std::collections::VecDeque<String>,
    /// The bytes of `frames`.
    bytes: usize,
    closed: bool,
    gone: bool,
    /// The reader fell too far behind: nothing more is queued, and the stream ends after [`SSE_CUT_OFF`].
    cut: bool,
    reader: Option<std::task::Waker>,
    /// A writer waiting for the reader to take every frame ([`FrameSender::drained`]).
    writer: Option<std::task::Waker>,
}

impl FrameQueue {
    /// The waiting writer, to wake once the queue is empty or will take nothing more.
    fn writer_to_wake(&mut self) -> Option<std::task::Waker> {
        if self.frames.is_empty() || self.gone || self.cut {
            self.writer.take()
        } else {
            None
        }
    }
}

/// The run's end of a [`FrameQueue`].
struct FrameSender(Rc<RefCell<FrameQueue>>);

/// The body's end of a [`FrameQueue`]: the frames in order, ending when the run has ended and all are read.
pub struct FrameReader(Rc<RefCell<FrameQueue>>);

fn frame_queue() -> (FrameSender, FrameReader) {
    let q = Rc::new(RefCell::new(FrameQueue::default()));
    (FrameSender(q.clone()), FrameReader(q))
}

impl FrameSender {
    fn update(&self, f: impl FnOnce(&mut FrameQueue)) {
        let (reader, writer) = {
            let mut q = self.0.borrow_mut();
            f(&mut q);
            (q.reader.take(), q.writer_to_wake())
        };
        for w in [reader, writer].into_iter().flatten() {
            w.wake();
        }
    }

    /// Resolves once the reader has taken every frame (`true`), or will take none (`false`: gone or cut off).
    fn drained(&self) -> impl std::future::Future<Output = bool> + '_ {
        futures::future::poll_fn(move |cx| {
            let mut q = self.0.borrow_mut();
            if q.gone || q.cut {
                std::task::Poll::Ready(false)
            } else if q.frames.is_empty() {
                std::task::Poll::Ready(true)
            } else {
                q.writer = Some(cx.waker().clone());
                std::task::Poll::Pending
            }
        })
    }

    fn send(&self, frame: String) {
        self.update(|q| {
            if q.gone || q.cut {
                return;
            }
            if !q.frames.is_empty() && q.bytes.saturating_add(frame.len()) > SSE_BACKLOG_BYTES {
                // Too far behind: cut off after what waits (its last `id:` is where the client resumes).
                q.cut = true;
                q.closed = true;
                q.frames.push_back(SSE_CUT_OFF.to_string());
                return;
            }
            q.bytes += frame.len();
            q.frames.push_back(frame);
        });
    }

    fn close(&self) {
        self.update(|q| q.closed = true);
    }

    /// Whether the reader takes no more frames: gone (the client left) or cut off (too far behind).
    fn gone(&self) -> bool {
        let q = self.0.borrow();
        q.gone || q.cut
    }
}

impl futures::Stream for FrameReader {
    type Item = String;

    fn poll_next(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Option<String>> {
        let mut q = self.0.borrow_mut();
        match q.frames.pop_front() {
            Some(frame) => {
                // The cut-off notice was never counted.
                q.bytes = q.bytes.saturating_sub(frame.len());
                let writer = q.writer_to_wake();
                drop(q);
                if let Some(w) = writer {
                    w.wake();
                }
                std::task::Poll::Ready(Some(frame))
            }
            None if q.closed => std::task::Poll::Ready(None),
            None => {
                q.reader = Some(cx.waker().clone());
                std::task::Poll::Pending
            }
        }
    }
}

impl Drop for FrameReader {
    fn drop(&mut self) {
        let mut q = self.0.borrow_mut();
        q.gone = true;
        q.frames.clear();
        q.bytes = 0;
        let writer = q.writer.take();
        drop(q);
        if let Some(w) = writer {
            w.wake();
        }
    }
}

/// One execution as its request sees it: the run's events (sent on as SSE frames for an SSE answer, until the
/// run ends), whether it started (its first event: the run it executes), and its answer once it ended; the
/// request waiting for either is woken.
#[derive(Default)]
struct StartSink {
    frames: Option<FrameSender>,
    /// The journal position the run's events are durable through (the last `id:` sent).
    position: std::cell::Cell<u64>,
    started: RefCell<Option<String>>,
    answer: RefCell<Option<ApiResponse>>,
    waiting: RefCell<Option<std::task::Waker>>,
}

impl StartSink {
    fn wake(&self) {
        if let Some(w) = self.waiting.borrow_mut().take() {
            w.wake();
        }
    }
}

impl EventSink for StartSink {
    fn emit(&self, event: &EventEnvelope) {
        if self.started.borrow().is_none() {
            *self.started.borrow_mut() = Some(event.run_id.clone());
            self.wake();
        }
        if let Some(frames) = &self.frames {
            // A reader gone (the client left) takes nothing more; the run goes on without it.
            frames.send(sse_frame(event));
            if let crate::core::events::Event::RunDone { status, .. } = event.event {
                if status != RunStatus::InProgress {
                    frames.send(sse_id(Cursor { position: self.position.get(), ended: true }));
                }
            }
        }
    }

    fn durable(&self, _run_id: &str, position: u64) {
        if let Some(frames) = &self.frames {
            if position != self.position.get() {
                frames.send(sse_id(Cursor { position, ended: false }));
            }
        }
        self.position.set(position);
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
/// the head (health, token, declared size), then read the body (`GET`/`HEAD`: none) capped at
/// [`MAX_BODY_BYTES`] while reading, then build the API ([`Host::api`]: configuration and agent) and route.
/// `head` is the request without its body. An authorized body that declares a length over the cap but within
/// [`MAX_DRAINED_BYTES`] is read and dropped before its `413` (as one found over the cap while reading); every
/// other refusal from the head is answered without reading a byte. Never panics; every failure is a coded JSON
/// error.
pub async fn serve(mut head: ApiRequest, token: Option<String>, host: &mut dyn Host) -> ApiResponse {
    let admitted = admit(&head, token.as_deref(), host.conformance_route());
    let m = head.method.to_ascii_uppercase();
    let bodiless = m == "GET" || m == "HEAD";
    // `admit` checks the declared length only once the token matched.
    let declared_over = matches!(&admitted, Err(e) if e.code == ErrorCode::PayloadTooLarge);
    let declared = head.header("content-length").and_then(|l| l.trim().parse::<u64>().ok());
    if declared_over && !bodiless && declared.is_some_and(|n| n <= MAX_DRAINED_BYTES as u64) {
        drain_body(host, 0).await;
    } else if !matches!(admitted, Ok(Admission::Serve)) || bodiless {
        host.discard_body();
    }
    let result = async {
        match admitted? {
            Admission::Respond(r) => Ok(r),
            Admission::Conformance => {
                let report = host.conformance().await?;
                Ok(ApiResponse {
                    status: 200,
                    headers: vec![("content-type".into(), "text/plain".into())],
                    body: report,
                    live: None,
                })
            }
            Admission::Serve => {
                head.body = if m == "GET" || m == "HEAD" { Vec::new() } else { read_body(host).await? };
                let api = host.api(token.clone()).await?;
                Ok(api.handle(head).await)
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

    /// Handles one request whose body has been read: [`admit`] (health, auth, size), then the route. Never
    /// panics; every failure is a coded JSON error. (The Worker goes through [`serve`], which admits the
    /// request before reading its body; this checks again.)
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
            Ok(Admission::Serve) | Ok(Admission::Conformance) => match self.route(&req).await {
                Ok(r) => r,
                Err(e) => ApiResponse::error(&e),
            },
            Err(e) => ApiResponse::error(&e),
        }
    }

    /// Routes an admitted request.
    async fn route(&self, req: &ApiRequest) -> Result<ApiResponse> {
        let parts = segments(&req.path);
        let m = req.method.to_ascii_uppercase();
        let not_allowed =
            || Err(Error::new(ErrorCode::MethodNotAllowed, format!("{m} is not allowed on {}", req.path)));
        match parts.as_slice() {
            ["runs"] => match m.as_str() {
                "GET" => self.list_runs(req).await,
                _ => not_allowed(),
            },
            ["runs", id] => {
                run_id_segment(id)?;
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
                run_id_segment(id)?;
                if m != "POST" {
                    return not_allowed();
                }
                parse_body::<Value>(&req.body, true)?;
                let (sink, opts) = self.start_sink(SendOptions::default());
                let agent = self.agent.clone();
                let run_id = id.to_string();
                let run = async move {
                    match agent.resume(&run_id, opts).await {
                        Ok(Some(r)) => ApiResponse::ok(&r),
                        Ok(None) => {
                            ApiResponse::ok(&json!({"runId": run_id, "resumed": false, "reason": "nothing to resume"}))
                        }
                        Err(e) => ApiResponse::error(&e),
                    }
                };
                Ok(self.execute(req, sink, Box::pin(run), None).await)
            }
            ["runs", id, "events"] => {
                run_id_segment(id)?;
                if m != "GET" {
                    return not_allowed();
                }
                self.watch(req, id).await
            }
            ["runs", id, "history"] => {
                run_id_segment(id)?;
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
                run_id_segment(id)?;
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
                Ok(ApiResponse::with(201, &fork))
            }
            ["compare", a, b] => {
                run_id_segment(a)?;
                run_id_segment(b)?;
                if m != "GET" {
                    return not_allowed();
                }
                Ok(ApiResponse::ok(&self.agent.compare(a, b).await?))
            }
            // Without the demo tools: `204`, no counters (a client such as the console asks without an error).
            ["demo", "counts"] => match (m.as_str(), &self.demo) {
                ("GET", Some(counts)) => Ok(ApiResponse::ok(&counts().await?)),
                ("GET", None) => Ok(ApiResponse { status: 204, headers: Vec::new(), body: String::new(), live: None }),
                _ => not_allowed(),
            },
            ["sweep"] => match m.as_str() {
                "GET" => self.sweep_state().await,
                _ => not_allowed(),
            },
            ["approvals"] => match m.as_str() {
                "GET" => Ok(ApiResponse::ok(&self.agent.approvals().list().await?)),
                _ => not_allowed(),
            },
            ["approvals", id] => {
                approval_id_segment(id)?;
                if m != "POST" {
                    return not_allowed();
                }
                let body: ResolveBody = parse_body(&req.body, false)?.ok_or_else(|| bad("empty body"))?;
                let decision = Resolve { id: id.to_string(), approved: body.approved, note: body.note };
                let (sink, opts) = self.start_sink(SendOptions::default());
                let agent = self.agent.clone();
                let run = async move {
                    let resolved = agent.approvals().resolve_with(decision, opts).await;
                    resolved.map_or_else(|e| ApiResponse::error(&e), |r| ApiResponse::ok(&r))
                };
                Ok(self.execute(req, sink, Box::pin(run), None).await)
            }
            ["deliveries", id] => {
                delivery_id_segment(id)?;
                if m != "POST" {
                    return not_allowed();
                }
                let body: SendRequest = parse_body(&req.body, false)?.ok_or_else(|| bad("empty body"))?;
                let (input, business_state) = body.into_parts()?;
                let (sink, opts) = self.start_sink(SendOptions { business_state, ..SendOptions::default() });
                let agent = self.agent.clone();
                let delivery_id = id.to_string();
                let run = async move {
                    let ran = agent.run_once(&delivery_id, input, opts).await;
                    ran.map_or_else(|e| ApiResponse::error(&e), |d| ApiResponse::ok(&d))
                };
                Ok(self.execute(req, sink, Box::pin(run), None).await)
            }
            ["sessions", id] => {
                let session = self.agent.session(id)?;
                match m.as_str() {
                    "POST" => self.session_send(req, id).await,
                    "GET" => {
                        let limit = match req.query("limit") {
                            None => 50,
                            Some(l) => l.parse::<usize>().map_err(|_| bad("`limit` must be a number"))?,
                        };
                        let turns = session.history(limit).await?;
                        if turns.is_empty() {
                            return Err(Error::new(
                                ErrorCode::CheckpointNotFound,
                                format!("session '{id}' has no turn"),
                            ));
                        }
                        Ok(ApiResponse::ok(&json!({"sessionId": id, "turns": turns})))
                    }
                    "DELETE" => {
                        let n = session.delete().await?;
                        Ok(ApiResponse::ok(&json!({"sessionId": id, "deletedTurns": n})))
                    }
                    _ => not_allowed(),
                }
            }
            ["sessions", id, action] => {
                let session = self.agent.session(id)?;
                if m != "POST" {
                    return if matches!(*action, "resume" | "fork" | "discard-pending") {
                        not_allowed()
                    } else {
                        Err(Error::new(ErrorCode::RouteNotFound, format!("no route {m} {}", req.path)))
                    };
                }
                match *action {
                    "resume" => {
                        parse_body::<Value>(&req.body, true)?;
                        let (sink, opts) = self.start_sink(SendOptions::default());
                        let agent = self.agent.clone();
                        let session_id = id.to_string();
                        let run = async move {
                            let resumed = match agent.session(&session_id) {
                                Ok(s) => s.resume(opts).await,
                                Err(e) => Err(e),
                            };
                            match resumed {
                                Ok(Some(r)) => ApiResponse::ok(&r),
                                Ok(None) => ApiResponse::ok(
                                    &json!({"sessionId": session_id, "resumed": false, "reason": "nothing to resume"}),
                                ),
                                Err(e) => ApiResponse::error(&e),
                            }
                        };
                        Ok(self.execute(req, sink, Box::pin(run), None).await)
                    }
                    "fork" => {
                        let body: SessionForkBody = parse_body(&req.body, false)?.ok_or_else(|| bad("empty body"))?;
                        let fork =
                            session.fork(SessionForkOptions { from_step: body.from_step, new_id: body.new_id }).await?;
                        Ok(ApiResponse::with(201, &fork))
                    }
                    "discard-pending" => {
                        parse_body::<Value>(&req.body, true)?;
                        let discarded = session.discard_pending().await?;
                        Ok(ApiResponse::ok(&json!({"sessionId": id, "discarded": discarded})))
                    }
                    _ => Err(Error::new(ErrorCode::RouteNotFound, format!("no route {m} {}", req.path))),
                }
            }
            ["schedules"] => match m.as_str() {
                "GET" => {
                    let mut out = Vec::with_capacity(self.schedules.len());
                    for s in &self.schedules {
                        out.push(self.agent.schedule_status(s).await?);
                    }
                    Ok(ApiResponse::ok(&json!({ "schedules": out })))
                }
                _ => not_allowed(),
            },
            _ => Err(Error::new(ErrorCode::RouteNotFound, format!("no route {m} {}", req.path))),
        }
    }

    /// The execution's [`StartSink`] (no SSE frames) and `opts` with it as the events' sink when a spawner
    /// executes the run (its first event is its start); without one, no sink is needed.
    fn start_sink(&self, opts: SendOptions) -> (Rc<StartSink>, SendOptions) {
        let sink = Rc::new(StartSink::default());
        let events: Option<Rc<dyn EventSink>> = self.spawner.is_some().then(|| sink.clone() as _);
        (sink, SendOptions { events, ..opts })
    }

    /// `POST /sessions/{id}`: the session's next turn, answered like a send (SSE with
    /// `Accept: text/event-stream`).
    async fn session_send(&self, req: &ApiRequest, id: &str) -> Result<ApiResponse> {
        let (input, start, opts, frames) = self.send_parts(req)?;
        let agent = self.agent.clone();
        let session_id = id.to_string();
        let run = async move {
            let res = match agent.session(&session_id) {
                Ok(s) => s.send(input, opts).await,
                Err(e) => Err(e),
            };
            res.map_or_else(|e| ApiResponse::error(&e), |r| ApiResponse::ok(&r))
        };
        // In strict mode, in the object of the turn it executes first (a task of the object's, as a run's send).
        Ok(self.execute(req, start, Box::pin(run), frames).await)
    }

    /// What a send (of a run or a session) needs from its request: the input, the execution's [`StartSink`]
    /// (with SSE frames for `Accept: text/event-stream`), the options (business state; the sink as the events'
    /// sink for an SSE answer or a spawned execution) and the frames' reader.
    #[allow(clippy::type_complexity)]
    fn send_parts(&self, req: &ApiRequest) -> Result<(Input, Rc<StartSink>, SendOptions, Option<FrameReader>)> {
        // An empty body is an empty request (one that does not parse was refused by `?`).
        let body: SendRequest = parse_body(&req.body, true)?.unwrap_or_default();
        let (input, business_state) = body.into_parts()?;
        let sse = req.header("accept").is_some_and(|a| a.contains("text/event-stream"));
        let (sender, frames) = sse.then(frame_queue).unzip();
        let start = Rc::new(StartSink { frames: sender, ..StartSink::default() });
        let events: Option<Rc<dyn EventSink>> = (sse || self.spawner.is_some()).then(|| start.clone() as _);
        Ok((input, start, SendOptions { business_state, events, ..SendOptions::default() }, frames))
    }

    async fn send(&self, req: &ApiRequest, id: &str) -> Result<ApiResponse> {
        let (input, start, opts, frames) = self.send_parts(req)?;
        let agent = self.agent.clone();
        let run_id = id.to_string();
        let run = async move {
            agent.send(&run_id, input, opts).await.map_or_else(|e| ApiResponse::error(&e), |r| ApiResponse::ok(&r))
        };
        Ok(self.execute(req, start, Box::pin(run), frames).await)
    }

    /// Executes a run (`run` answers when it ends): here, in this request, without a spawner; with one, as a
    /// task of its own that this request waits for, or (`Prefer: respond-async`) only until the run has
    /// started: then `202 Accepted` with the run id. With `frames` (an SSE answer) the answer is the run's
    /// events as they happen, from its first one: a live body whose task (without a spawner) is the rest of the
    /// run, for the shell to run to its end whether the client stays or not. A refusal before the start is
    /// the run's answer either way.
    async fn execute(
        &self,
        req: &ApiRequest,
        start: Rc<StartSink>,
        run: LocalFuture<'static, ApiResponse>,
        frames: Option<FrameReader>,
    ) -> ApiResponse {
        let Some(spawn) = &self.spawner else {
            return self.execute_here(start, run, frames).await;
        };
        let run = closing_frames(&start, run);
        let task = start.clone();
        spawn(Box::pin(async move {
            let answer = run.await;
            // The request that waited for it may have gone; the run has ended either way.
            *task.answer.borrow_mut() = Some(answer);
            task.wake();
        }));
        let respond_async = prefers_async(req);
        let answer_from_start = respond_async || frames.is_some();
        let started = futures::future::poll_fn(|cx| {
            if answer_from_start && start.started.borrow().is_some() {
                return std::task::Poll::Ready(None);
            }
            match start.answer.borrow_mut().take() {
                Some(answer) => std::task::Poll::Ready(Some(answer)),
                None => {
                    *start.waiting.borrow_mut() = Some(cx.waker().clone());
                    std::task::Poll::Pending
                }
            }
        });
        match (started.await, frames) {
            (Some(answer), _) => answer,
            (None, Some(frames)) if !respond_async => self.live(frames, None),
            (None, _) => {
                // Started: its first event named the run it executes (a send's, or an approval's or a
                // delivery's run).
                let id = start.started.borrow().clone().unwrap_or_default();
                let mut r = ApiResponse::json(202, &json!({"runId": id, "status": "accepted"}));
                r.headers.push(("location".into(), format!("/runs/{id}")));
                r.headers.push(("preference-applied".into(), "respond-async".into()));
                r
            }
        }
    }

    /// Executes a run in this request (no spawner): `run` answers when it ends. With `frames` (an SSE answer)
    /// the answer is the run's events as they happen, from its first one: a live body whose task is the rest
    /// of the run, for the shell to run to its end whether the client stays or not. A refusal before the start
    /// is the run's answer either way.
    async fn execute_here(
        &self,
        start: Rc<StartSink>,
        run: LocalFuture<'static, ApiResponse>,
        frames: Option<FrameReader>,
    ) -> ApiResponse {
        let mut run = closing_frames(&start, run);
        let Some(frames) = frames else {
            return run.await;
        };
        // Executed here until its first event (or its end, a refusal: the plain answer), then handed over.
        let ended = futures::future::poll_fn(|cx| match run.as_mut().poll(cx) {
            std::task::Poll::Ready(answer) => std::task::Poll::Ready(Some(answer)),
            std::task::Poll::Pending if start.started.borrow().is_some() => std::task::Poll::Ready(None),
            std::task::Poll::Pending => std::task::Poll::Pending,
        })
        .await;
        match ended {
            Some(answer) if !start.started.borrow().is_some() => answer,
            // Ended with events: they are all in the frames already.
            Some(_) => self.live(frames, None),
            None => self.live(frames, Some(Box::pin(async move { drop(run.await) }))),
        }
    }

    /// A live SSE answer: `frames` as they come; `task` (if any) is the rest of the run.
    fn live(&self, frames: FrameReader, task: Option<LocalFuture<'static, ()>>) -> ApiResponse {
        ApiResponse {
            status: 200,
            headers: vec![
                ("content-type".into(), "text/event-stream".into()),
                ("cache-control".into(), "no-cache".into()),
            ],
            body: String::new(),
            live: Some(LiveBody::new(LiveParts { frames, timer: self.agent.deps.sleep.clone(), task })),
        }
    }

    /// `GET /runs/{id}/events`: the run's recorded events after the `Last-Event-ID` header's cursor (or the
    /// `after` query parameter; neither: from the start), then the new ones as they are recorded, as SSE, until
    /// the run finishes or pauses ([`Agent::watch`]). `204` when the cursor already says the run ended at its
    /// newest position (an SSE client stops reconnecting).
    async fn watch(&self, req: &ApiRequest, id: &str) -> Result<ApiResponse> {
        let from = match req.header("last-event-id").filter(|v| !v.trim().is_empty()).or(req.query("after")) {
            Some(c) => Cursor::parse(c)?,
            None => Cursor::default(),
        };
        match self.agent.watch_start(id, from).await? {
            WatchStart::NotFound => {
                return Err(
                    Error::new(ErrorCode::CheckpointNotFound, format!("run '{id}' has no checkpoint")).with_run(id)
                )
            }
            WatchStart::UpToDate => {
                return Ok(ApiResponse { status: 204, headers: Vec::new(), body: String::new(), live: None })
            }
            WatchStart::Stream => {}
        }
        let (sender, frames) = frame_queue();
        let agent = self.agent.clone();
        let hub = self.watchers.clone();
        let run_id = id.to_string();
        let opts = self.watch;
        let task = async move {
            let seq = std::cell::Cell::new(0u64);
            let push = |w: Watched| {
                if sender.gone() {
                    return false;
                }
                match w {
                    Watched::Event(event, at) => {
                        let at = at.unwrap_or_else(|| agent.deps.now());
                        let e = EventEnvelope {
                            v: crate::core::events::EVENT_SCHEMA_VERSION,
                            seq: seq.replace(seq.get() + 1),
                            run_id: run_id.clone(),
                            at,
                            event,
                        };
                        sender.send(sse_frame(&e));
                    }
                    Watched::Through(c) => sender.send(sse_id(c)),
                    // About to wait: not for a client that left.
                    Watched::Waiting => {}
                }
                true
            };
            // The journal's entries at the client's pace; live events as they come (a client that falls
            // SSE_BACKLOG_BYTES behind them is cut off).
            let sink = PacedFrames { push: &push, frames: &sender };
            if let Err(e) = agent.watch(&run_id, from, hub.as_ref(), opts, &sink).await {
                push(Watched::Event(crate::core::events::Event::Error { error: e.info() }, None));
            }
            sender.close();
        };
        Ok(self.live(frames, Some(Box::pin(task))))
    }

    async fn get_run(&self, id: &str) -> Result<ApiResponse> {
        let cp = self.agent.load(id).await?.ok_or_else(|| {
            Error::new(ErrorCode::CheckpointNotFound, format!("run '{id}' has no checkpoint")).with_run(id)
        })?;
        Ok(ApiResponse::ok(&RunView::from(cp)))
    }

    /// What the recovery sweep keeps between ticks, as `GET /sweep` shows it: its stored state as the sweep
    /// wrote it (`providerFailures` in a row, the open breaker's `outage` record or `null`, the last run examined
    /// as `cursor`, `lastOutageEnd`; the listing position `page` and the remembered `probe` run when set) plus
    /// `breaker`: `open` or `closed`. No stored state is the sweep's initial one. `lastTickAt` is when a tick last
    /// wrote the state: every tick that changes something, an idle one at most every ten minutes. A stored state the sweep could not read is
    /// `STEADFAST_CHECKPOINT_CORRUPT` (the next tick replaces it).
    async fn sweep_state(&self) -> Result<ApiResponse> {
        // Read the way the sweep reads it (the same parser), then shown as stored.
        let text = match self.agent.store().get_state("sweep").await? {
            Some(s) => s,
            // Ignored: a SweepState (numbers, strings, options) always serialises.
            None => serde_json::to_string(&SweepState::default()).unwrap_or_default(),
        };
        let unreadable = || {
            Error::new(
                ErrorCode::CheckpointCorrupt,
                "the stored sweep state cannot be read; the next sweep tick replaces it",
            )
        };
        let state: SweepState = serde_json::from_str(&text).map_err(|_| unreadable())?;
        let Ok(Value::Object(mut shown)) = serde_json::from_str::<Value>(&text) else {
            return Err(unreadable());
        };
        let breaker = if state.outage.is_some() { "open" } else { "closed" };
        shown.insert("breaker".into(), Value::from(breaker));
        Ok(ApiResponse::json(200, &Value::Object(shown)))
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
        let next = self.agent.next_attempts(&runs, &self.recovery).await?;
        let mut shown = Vec::with_capacity(runs.len());
        for (run, next) in runs.iter().zip(next) {
            // Ignored (both): a PendingRun and a NextAttempt (strings, numbers, options) always serialise.
            let mut v = serde_json::to_value(run).unwrap_or_default();
            v["next"] = serde_json::to_value(next).unwrap_or_default();
            shown.push(v);
        }
        Ok(ApiResponse::ok(&json!({ "runs": shown })))
    }
}

/// A watch's frames as its [`WatchSink`]: each item pushed as it comes, the next journal entry once the client has
/// read what it was sent.
struct PacedFrames<'a, F: Fn(Watched) -> bool> {
    push: &'a F,
    frames: &'a FrameSender,
}

impl<F: Fn(Watched) -> bool> WatchSink for PacedFrames<'_, F> {
    fn push(&self, item: Watched) -> bool {
        (self.push)(item)
    }

    fn drained(&self) -> LocalFuture<'_, bool> {
        Box::pin(self.frames.drained())
    }
}

/// `run`, closing the SSE frames (if any) when it ends: a live body ends with its run.
fn closing_frames(start: &Rc<StartSink>, run: LocalFuture<'static, ApiResponse>) -> LocalFuture<'static, ApiResponse> {
    let ender = start.clone();
    Box::pin(async move {
        let answer = run.await;
        if let Some(frames) = &ender.frames {
            frames.close();
        }
        answer
    })
}

/// One event as a server-sent event block: `event:` (its type) and `data:` (the envelope as JSON). Events
/// carry no `id:`; the journal positions do ([`sse_id`]).
pub fn sse_frame(e: &EventEnvelope) -> String {
    // Ignored (both): an EventEnvelope (strings, numbers, JSON values) always serialises.
    let data = serde_json::to_string(e).unwrap_or_default();
    let kind = serde_json::to_value(e).ok().and_then(|v| v["type"].as_str().map(String::from)).unwrap_or_default();
    format!("event: {kind}\ndata: {data}\n\n")
}

/// A block with only an `id:`: the stream has now sent every recorded event through this journal position
/// (`12`), and with `.done` the run's end there (`12.done`). An SSE client keeps it as its last event id without
/// dispatching an event, and sends it back as `Last-Event-ID` to `GET /runs/{id}/events` to go on from there.
pub fn sse_id(cursor: Cursor) -> String {
    format!("id: {cursor}\n\n")
}

/// Server-sent events: one [`sse_frame`] per event.
pub fn sse_body(events: &[EventEnvelope]) -> String {
    events.iter().map(sse_frame).collect()
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
        assert_eq!(ApiResponse::with(201, &json!({"a": 1})).body, r#"{"a":1}"#);
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
    fn path_segments_keep_empty_ones() {
        assert_eq!(segments("/runs/a/resume"), ["runs", "a", "resume"]);
        assert_eq!(segments("/runs//resume"), ["runs", "", "resume"]);
        assert_eq!(segments("/runs/"), ["runs", ""]);
        assert_eq!(segments("/compare//b"), ["compare", "", "b"]);
        assert_eq!(segments("/approvals/"), ["approvals", ""]);
        assert_eq!(segments("//runs"), ["", "runs"]);
        assert_eq!(segments("/"), Vec::<&str>::new());
        assert_eq!(segments(""), Vec::<&str>::new());
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
            Ok(Admission::Serve)
        );
        // The conformance route exists only when the shell serves it.
        assert_eq!(admit(&head("POST", "/__conformance", &auth), Some("t0k"), true), Ok(Admission::Conformance));
        assert_eq!(admit(&head("POST", "/__conformance", &auth), Some("t0k"), false), Ok(Admission::Serve));
        assert_eq!(
            admit(&head("GET", "/__conformance", &auth), Some("t0k"), true).unwrap_err().code,
            ErrorCode::MethodNotAllowed
        );
    }

    /// A request the Worker could not forward to its run's object (the object reset, overloaded) is a coded,
    /// retryable JSON answer naming the run, with `Retry-After` (it used to be the platform's plain-text 500).
    #[test]
    fn a_failed_forward_is_a_coded_retryable_503_with_retry_after() {
        let to = Forward { run: "order-7".into(), name_run: false, finish_first: None };
        let r = forward_failed(&to, "Error: Durable Object reset because its code was updated.");
        assert_eq!(r.status, 503);
        assert!(r.headers.contains(&("content-type".into(), "application/json".into())), "{:?}", r.headers);
        assert!(r.headers.contains(&("retry-after".into(), "1".into())), "{:?}", r.headers);
        let body: Value = serde_json::from_str(&r.body).unwrap();
        let e = &body["error"];
        assert_eq!((e["code"].as_str(), e["retryable"].as_bool()), (Some("STEADFAST_STORE_UNAVAILABLE"), Some(true)));
        assert_eq!((e["runId"].as_str(), e["retryAfterMs"].as_u64()), (Some("order-7"), Some(FORWARD_RETRY_AFTER_MS)));
        assert!(e["message"].as_str().unwrap().contains("reset because its code was updated"), "{e}");
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
