//! Strict mode's forwarding (`"store": "durable-object"`): which run's object serves a request, decided from its
//! parsed [`Route`] once it is admitted ([`forward_target`]), found again inside the object ([`object_run`]), and
//! the answer when the object cannot be reached ([`forward_failed`]).
//!
//! A request about one run is served by that run's object: `/runs/{id}` and below (every method: the object
//! answers a refusal too); `POST /deliveries/{id}` (the object of its run, [`delivery_run_id`]);
//! `POST /approvals/{id}` (the object of the run the approval index names; the shell names that run to the
//! object in the [`RUN_HEADER`] header); `POST /events/{token}` (the same, the index read under the token's
//! wait id, [`wait_id`]; a token that maps to nothing is answered where it arrived, no object asked); `POST /sessions/{id}` and `/sessions/{id}/resume` (the object of the turn
//! the session executes first, named the same way; a send whose newest turn is in progress has that turn
//! finished in its own object first, [`Forward::finish_first`]).

use super::route::{Route, RouteError};
use super::{admit, Admission, ApiRequest, ApiResponse};
use crate::core::error::{Error, ErrorCode, Result};
use crate::core::ids::validate_run_id;
use crate::core::wait::wait_id;
use crate::front::config::StoreMode;
use crate::runtime::delivery_run_id;

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

/// What a request is about, for strict mode: a run its path names, an approval whose run the index knows, or
/// a session whose next execution's run its turns name.
enum About {
    Run(String),
    Approval(String),
    /// An event wait's token: the run of its wait (the approval index, under the token's wait id).
    Event(String),
    /// A session; whether the request is its send (not its resume).
    Session(String, bool),
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

/// The run (or approval, or session) a parsed request is about, when its run's object serves it in strict mode:
/// every request whose path is `/runs/{id}` or below with a valid run id (a refusal too: [`RouteError::run`]);
/// a delivery, an approval's resolution, a session's send and resume. Anything else is served where it arrived.
fn about(route: &std::result::Result<Route, RouteError>) -> Option<About> {
    let route = match route {
        Ok(route) => route,
        Err(refused) => return refused.run().map(|run| About::Run(run.to_string())),
    };
    Some(match route {
        Route::Send(id)
        | Route::GetRun(id)
        | Route::DeleteRun(id)
        | Route::Resume(id)
        | Route::Events(id)
        | Route::History(id)
        | Route::Fork(id) => About::Run(id.clone()),
        Route::Deliver(id) => About::Run(delivery_run_id(id)),
        Route::Resolve(id) => About::Approval(id.clone()),
        Route::DeliverEvent(token) => About::Event(token.clone()),
        Route::SessionSend(id) => About::Session(id.clone(), true),
        Route::SessionResume(id) => About::Session(id.clone(), false),
        _ => return None,
    })
}

/// In strict mode, where this request is served: by the object of the run it is about, once it is admitted
/// (the token is checked here first, so an unauthenticated request wakes no object and neither `mode` nor the
/// index is read): `/runs/{id}` and below, `POST /deliveries/{id}`, `POST /approvals/{id}` when `lookup` (the
/// approval index) names a valid run, `POST /events/{token}` when the index names one under the token's wait
/// id, and `POST /sessions/{id}` and `/sessions/{id}/resume` to the object of the
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
    let Ok(Admission::Serve(route)) = admit(head, token, false) else {
        return None;
    };
    let about = about(&route)?;
    if mode().ok() != Some(StoreMode::DurableObject) {
        return None;
    }
    let (asked, send) = match &about {
        About::Run(run) => return Some(Forward { run: run.clone(), name_run: false, finish_first: None }),
        About::Approval(id) => (Lookup::Approval(id), None),
        // A token that names no wait is answered where it arrived (no object is asked).
        About::Event(token) => match wait_id(token) {
            Some(id) => return event_target(lookup(Lookup::Approval(&id)).await),
            None => return None,
        },
        About::Session(id, send) => (Lookup::Session(id), Some(id).filter(|_| *send)),
    };
    match lookup(asked).await {
        Ok(Some(found)) if validate_run_id(&found.run).is_ok() => {
            let finish_first = send.filter(|_| found.in_progress).map(|id| format!("/sessions/{id}/resume"));
            Some(Forward { run: found.run, name_run: true, finish_first })
        }
        _ => None,
    }
}

/// The object of an event's run, as the approval index found it under the token's wait id (`None`: served where
/// it arrived, which answers `STEADFAST_WAIT_NOT_FOUND` for a token that opens nothing).
fn event_target(found: Result<Option<Found>>) -> Option<Forward> {
    match found {
        Ok(Some(found)) if validate_run_id(&found.run).is_ok() => {
            Some(Forward { run: found.run, name_run: true, finish_first: None })
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
/// for an approval or a session [`RUN_HEADER`]). `None`: not a request the Worker forwards (the object refuses
/// it).
pub fn object_run(head: &ApiRequest) -> Option<String> {
    match about(&Route::parse(&head.method, &head.path, false))? {
        About::Run(run) => Some(run),
        About::Approval(_) | About::Event(_) | About::Session(..) => {
            head.header(RUN_HEADER).filter(|r| validate_run_id(r).is_ok()).map(str::to_string)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

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
}
