//! The API's routes as data: a request's method and path are parsed once into a [`Route`] ([`Route::parse`]),
//! and every refusal a route decides is decided here: an unknown path (`404`), a known path asked with a method
//! it does not answer (`405`, naming the methods it does: [`RouteError::MethodNotAllowed`]'s `allow`), an id
//! segment that is not valid (`400`). The rest of the API uses the parsed route: [`super::admit`] answers
//! `/health` and checks the token, [`super::forward`] decides which run's object serves it (strict mode), and
//! [`super::Api`] dispatches it to its handler.
//!
//! **How it reads a path.** First the path's shape ([`Shape`], from its segments, every one kept: an empty id
//! segment is `STEADFAST_SESSION_ID_INVALID`, never skipped) and its id segments, each checked for its kind (a
//! run id, an approval id, a delivery id, a session id, an event wait's token); then the method, in the table [`ROUTES`] (one row per
//! shape and method). A shape without a row for the method is `405`; a shape without any row (below a run or a
//! session, a path no route has) is `404`.
//!
//! **To add a route**: a [`Route`] variant (doc: method, path, what it does), its shape in [`Shape`] and in
//! `shape_of` (with its id checks), a row in [`ROUTES`], the arm in `Api::dispatch` calling its handler (in the
//! module of its resource), and its row in the tests' table below.

use crate::core::error::{Error, ErrorCode, Result};
use crate::core::ids::{validate_run_id, validate_session_id};

/// What a request asks for: its method and path, parsed ([`Route::parse`]), with its ids checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// `GET`/`HEAD /health`: liveness (no token).
    Health,
    /// `POST /__conformance`: the store conformance suite (builds with the feature `conformance` only).
    Conformance,
    /// `GET /runs?status=`: the unfinished runs, each with the sweep's next attempt.
    ListRuns,
    /// `POST /runs/{id}`: start or continue the run.
    Send(String),
    /// `GET /runs/{id}`: the run's state.
    GetRun(String),
    /// `DELETE /runs/{id}`: delete the run.
    DeleteRun(String),
    /// `POST /runs/{id}/resume`: finish the unfinished run.
    Resume(String),
    /// `GET /runs/{id}/events`: the run's events as SSE, recorded then live.
    Events(String),
    /// `GET /runs/{id}/history?limit=`: past states, newest first.
    History(String),
    /// `POST /runs/{id}/fork`: a new run from a step of this one.
    Fork(String),
    /// `GET /compare/{a}/{b}`: compare two runs.
    Compare(String, String),
    /// `GET /approvals`: pending approvals.
    ListApprovals,
    /// `POST /approvals/{id}`: resolve an approval.
    Resolve(String),
    /// `POST /deliveries/{id}`: run a delivered job once.
    Deliver(String),
    /// `POST /events/{token}`: deliver an event to the wait whose token it is (no bearer token: the wait's
    /// token is the capability).
    DeliverEvent(String),
    /// `POST /sessions/{id}`: the session's next turn.
    SessionSend(String),
    /// `GET /sessions/{id}?limit=`: the session's turns, newest first.
    SessionHistory(String),
    /// `DELETE /sessions/{id}`: delete every turn.
    SessionDelete(String),
    /// `POST /sessions/{id}/resume`: finish the interrupted newest turn.
    SessionResume(String),
    /// `POST /sessions/{id}/fork`: a new session from a turn.
    SessionFork(String),
    /// `POST /sessions/{id}/discard-pending`: drop an unfinished newest turn.
    SessionDiscardPending(String),
    /// `GET /schedules`: each configured schedule's status.
    Schedules,
    /// `GET /sweep`: the recovery sweep's stored state.
    Sweep,
    /// `GET /metrics`: the counters, in the Prometheus text format.
    Metrics,
    /// `GET /demo/counts`: the demo tools' effect counters.
    DemoCounts,
}

/// The shape of a path the API knows: its fixed segments, whatever its ids. A shape answers the methods its
/// rows in [`ROUTES`] name; one without rows is a path below a run or a session that no route has (`404`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// `/health`
    Health,
    /// `/__conformance` (only in builds that serve it)
    Conformance,
    /// `/runs`
    Runs,
    /// `/runs/{id}`
    Run,
    /// `/runs/{id}/resume`
    RunResume,
    /// `/runs/{id}/events`
    RunEvents,
    /// `/runs/{id}/history`
    RunHistory,
    /// `/runs/{id}/fork`
    RunFork,
    /// Any other path below `/runs/{id}` (a valid run id): no route, but the run's own (strict mode: its
    /// object answers the `404`).
    BelowRun,
    /// `/compare/{a}/{b}`
    Compare,
    /// `/demo/counts`
    DemoCounts,
    /// `/sweep`
    Sweep,
    /// `/metrics`
    Metrics,
    /// `/approvals`
    Approvals,
    /// `/approvals/{id}`
    Approval,
    /// `/deliveries/{id}`
    Delivery,
    /// `/events/{token}`
    Event,
    /// `/sessions/{id}`
    Session,
    /// `/sessions/{id}/resume`
    SessionResume,
    /// `/sessions/{id}/fork`
    SessionFork,
    /// `/sessions/{id}/discard-pending`
    SessionDiscardPending,
    /// Any other `/sessions/{id}/{action}` (a valid session id): no route.
    BelowSession,
    /// `/schedules`
    Schedules,
}

/// Builds a route from its path's ids (in path order).
type Build = fn(&[String]) -> Route;

/// Every route: its path shape, its method, and how it is built from the path's ids. The one place that says
/// which method a path answers (the `Allow` list of a `405` is read from here too).
pub const ROUTES: &[(Shape, &str, Build)] = &[
    (Shape::Health, "GET", |_| Route::Health),
    (Shape::Health, "HEAD", |_| Route::Health),
    (Shape::Conformance, "POST", |_| Route::Conformance),
    (Shape::Runs, "GET", |_| Route::ListRuns),
    (Shape::Run, "POST", |id| Route::Send(id[0].clone())),
    (Shape::Run, "GET", |id| Route::GetRun(id[0].clone())),
    (Shape::Run, "DELETE", |id| Route::DeleteRun(id[0].clone())),
    (Shape::RunResume, "POST", |id| Route::Resume(id[0].clone())),
    (Shape::RunEvents, "GET", |id| Route::Events(id[0].clone())),
    (Shape::RunHistory, "GET", |id| Route::History(id[0].clone())),
    (Shape::RunFork, "POST", |id| Route::Fork(id[0].clone())),
    (Shape::Compare, "GET", |id| Route::Compare(id[0].clone(), id[1].clone())),
    (Shape::DemoCounts, "GET", |_| Route::DemoCounts),
    (Shape::Sweep, "GET", |_| Route::Sweep),
    (Shape::Metrics, "GET", |_| Route::Metrics),
    (Shape::Approvals, "GET", |_| Route::ListApprovals),
    (Shape::Approval, "POST", |id| Route::Resolve(id[0].clone())),
    (Shape::Delivery, "POST", |id| Route::Deliver(id[0].clone())),
    (Shape::Event, "POST", |id| Route::DeliverEvent(id[0].clone())),
    (Shape::Session, "POST", |id| Route::SessionSend(id[0].clone())),
    (Shape::Session, "GET", |id| Route::SessionHistory(id[0].clone())),
    (Shape::Session, "DELETE", |id| Route::SessionDelete(id[0].clone())),
    (Shape::SessionResume, "POST", |id| Route::SessionResume(id[0].clone())),
    (Shape::SessionFork, "POST", |id| Route::SessionFork(id[0].clone())),
    (Shape::SessionDiscardPending, "POST", |id| Route::SessionDiscardPending(id[0].clone())),
    (Shape::Schedules, "GET", |_| Route::Schedules),
];

/// Why a request has no route.
#[derive(Clone, Debug, PartialEq)]
pub enum RouteError {
    /// No route has this path (`STEADFAST_ROUTE_NOT_FOUND`, 404). `run`: the path is below `/runs/{run}`.
    NotFound {
        /// The run the path is below, if any (strict mode: that run's object answers).
        run: Option<String>,
    },
    /// The path has routes, none for this method (`STEADFAST_METHOD_NOT_ALLOWED`, 405).
    MethodNotAllowed {
        /// The path's shape.
        shape: Shape,
        /// The methods the path answers, in [`ROUTES`]' order.
        allow: Vec<&'static str>,
        /// The run the path is about, if any (strict mode: that run's object answers).
        run: Option<String>,
    },
    /// An id segment of the path is not valid (empty: `STEADFAST_SESSION_ID_INVALID`; otherwise the id kind's
    /// own error).
    InvalidId(Error),
}

impl RouteError {
    /// The run whose path this refusal is about (a path below `/runs/{id}` with a valid id).
    pub fn run(&self) -> Option<&str> {
        match self {
            RouteError::NotFound { run } | RouteError::MethodNotAllowed { run, .. } => run.as_deref(),
            RouteError::InvalidId(_) => None,
        }
    }

    /// Whether the refusal is answered before the token is checked (a wrong method on `/health`).
    pub fn public(&self) -> bool {
        matches!(self, RouteError::MethodNotAllowed { shape: Shape::Health, .. })
    }

    /// The coded error answered for `method path`.
    pub fn to_error(&self, method: &str, path: &str) -> Error {
        let m = method.to_ascii_uppercase();
        match self {
            RouteError::NotFound { .. } => Error::new(ErrorCode::RouteNotFound, format!("no route {m} {path}")),
            RouteError::MethodNotAllowed { shape, .. } => Error::new(
                ErrorCode::MethodNotAllowed,
                match shape {
                    Shape::Health => "use GET /health".to_string(),
                    Shape::Conformance => "use POST /__conformance".to_string(),
                    _ => format!("{m} is not allowed on {path}"),
                },
            ),
            RouteError::InvalidId(e) => e.clone(),
        }
    }
}

impl Route {
    /// Parses `method path` (the method in any case): the route, or why there is none. `conformance`: whether
    /// the shell serves `POST /__conformance` (otherwise that path is unknown). The ids are checked before the
    /// method: an invalid id is refused whatever the method.
    pub fn parse(method: &str, path: &str, conformance: bool) -> std::result::Result<Route, RouteError> {
        let m = method.to_ascii_uppercase();
        let Some((shape, ids)) = shape_of(&segments(path), conformance).map_err(RouteError::InvalidId)? else {
            return Err(RouteError::NotFound { run: None });
        };
        let run = match shape {
            Shape::Run | Shape::RunResume | Shape::RunEvents | Shape::RunHistory | Shape::RunFork | Shape::BelowRun => {
                ids.first().cloned()
            }
            _ => None,
        };
        let rows = || ROUTES.iter().filter(move |(s, ..)| *s == shape);
        if let Some((_, _, build)) = rows().find(|(_, rm, _)| *rm == m) {
            return Ok(build(&ids));
        }
        let allow: Vec<&'static str> = rows().map(|(_, rm, _)| *rm).collect();
        if allow.is_empty() {
            return Err(RouteError::NotFound { run });
        }
        Err(RouteError::MethodNotAllowed { shape, allow, run })
    }
}

/// The path's segments, every one kept: `/runs/a/resume` → `["runs", "a", "resume"]`, `/runs//resume` →
/// `["runs", "", "resume"]`, `/runs/` → `["runs", ""]`, `/` → `[]`. One leading slash is dropped.
fn segments(path: &str) -> Vec<&str> {
    match path.strip_prefix('/').unwrap_or(path) {
        "" => Vec::new(),
        p => p.split('/').collect(),
    }
}

/// The shape of a path and its ids, each checked (`Err`: the first invalid one); `None`: no shape (`404`).
fn shape_of(parts: &[&str], conformance: bool) -> Result<Option<(Shape, Vec<String>)>> {
    let ids = |ids: &[&str]| ids.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let shape = match parts {
        ["health"] => (Shape::Health, vec![]),
        ["__conformance"] if conformance => (Shape::Conformance, vec![]),
        ["runs"] => (Shape::Runs, vec![]),
        ["runs", id, rest @ ..] => {
            let shape = match rest {
                [] => Shape::Run,
                ["resume"] => Shape::RunResume,
                ["events"] => Shape::RunEvents,
                ["history"] => Shape::RunHistory,
                ["fork"] => Shape::RunFork,
                // No route; the run's own when its id is valid, otherwise no one's (not checked).
                _ if run_id_segment(id).is_ok() => Shape::BelowRun,
                _ => return Ok(None),
            };
            run_id_segment(id)?;
            (shape, ids(&[id]))
        }
        ["compare", a, b] => {
            run_id_segment(a)?;
            run_id_segment(b)?;
            (Shape::Compare, ids(&[a, b]))
        }
        ["demo", "counts"] => (Shape::DemoCounts, vec![]),
        ["sweep"] => (Shape::Sweep, vec![]),
        ["metrics"] => (Shape::Metrics, vec![]),
        ["approvals"] => (Shape::Approvals, vec![]),
        ["approvals", id] => {
            approval_id_segment(id)?;
            (Shape::Approval, ids(&[id]))
        }
        ["deliveries", id] => {
            delivery_id_segment(id)?;
            (Shape::Delivery, ids(&[id]))
        }
        ["events", token] => {
            // Any other token is the runtime's to refuse (`STEADFAST_WAIT_NOT_FOUND`, the one answer for a
            // token that opens nothing, malformed ones included).
            non_empty_segment("event", token)?;
            (Shape::Event, ids(&[token]))
        }
        ["sessions", id, rest @ ..] if rest.len() <= 1 => {
            validate_session_id(id)?;
            let shape = match rest {
                [] => Shape::Session,
                ["resume"] => Shape::SessionResume,
                ["fork"] => Shape::SessionFork,
                ["discard-pending"] => Shape::SessionDiscardPending,
                _ => Shape::BelowSession,
            };
            (shape, ids(&[id]))
        }
        ["schedules"] => (Shape::Schedules, vec![]),
        _ => return Ok(None),
    };
    Ok(Some(shape))
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
        return Err(Error::invalid_input("invalid approval id"));
    }
    Ok(())
}

/// A delivery id segment: not empty, at most 180 bytes.
fn delivery_id_segment(id: &str) -> Result<()> {
    non_empty_segment("delivery", id)?;
    if id.len() > 180 {
        return Err(Error::invalid_input("invalid delivery id"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::{Rng, SplitMix64};

    /// The methods every case is asked with (the parser reads them in any case).
    const METHODS: &[&str] = &["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"];

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

    /// Every route by hand: each path with the methods it answers and the route each is; every other method on
    /// it is `405` naming exactly those methods (in this order), and a path with none is `404`.
    #[test]
    fn every_path_answers_its_methods_and_refuses_the_others() {
        let s = |v: &str| v.to_string();
        let table: Vec<(&str, Vec<(&str, Route)>, Option<&str>)> = vec![
            ("/health", vec![("GET", Route::Health), ("HEAD", Route::Health)], None),
            ("/runs", vec![("GET", Route::ListRuns)], None),
            (
                "/runs/a",
                vec![
                    ("POST", Route::Send(s("a"))),
                    ("GET", Route::GetRun(s("a"))),
                    ("DELETE", Route::DeleteRun(s("a"))),
                ],
                Some("a"),
            ),
            ("/runs/order-7/resume", vec![("POST", Route::Resume(s("order-7")))], Some("order-7")),
            ("/runs/x.y/events", vec![("GET", Route::Events(s("x.y")))], Some("x.y")),
            ("/runs/r_1/history", vec![("GET", Route::History(s("r_1")))], Some("r_1")),
            ("/runs/r_1/fork", vec![("POST", Route::Fork(s("r_1")))], Some("r_1")),
            ("/runs/r_1/anything", vec![], Some("r_1")),
            ("/runs/r_1/anything/below", vec![], Some("r_1")),
            ("/runs/r_1/", vec![], Some("r_1")),
            ("/compare/a/b", vec![("GET", Route::Compare(s("a"), s("b")))], None),
            ("/demo/counts", vec![("GET", Route::DemoCounts)], None),
            ("/sweep", vec![("GET", Route::Sweep)], None),
            ("/metrics", vec![("GET", Route::Metrics)], None),
            ("/approvals", vec![("GET", Route::ListApprovals)], None),
            ("/approvals/apr_1", vec![("POST", Route::Resolve(s("apr_1")))], None),
            ("/deliveries/d-1", vec![("POST", Route::Deliver(s("d-1")))], None),
            ("/events/0f3a", vec![("POST", Route::DeliverEvent(s("0f3a")))], None),
            ("/events/not a token", vec![("POST", Route::DeliverEvent(s("not a token")))], None),
            ("/events", vec![], None),
            ("/events/a/b", vec![], None),
            (
                "/sessions/s1",
                vec![
                    ("POST", Route::SessionSend(s("s1"))),
                    ("GET", Route::SessionHistory(s("s1"))),
                    ("DELETE", Route::SessionDelete(s("s1"))),
                ],
                None,
            ),
            ("/sessions/s1/resume", vec![("POST", Route::SessionResume(s("s1")))], None),
            ("/sessions/s1/fork", vec![("POST", Route::SessionFork(s("s1")))], None),
            ("/sessions/s1/discard-pending", vec![("POST", Route::SessionDiscardPending(s("s1")))], None),
            ("/sessions/s1/other", vec![], None),
            ("/sessions/s1/resume/x", vec![], None),
            ("/schedules", vec![("GET", Route::Schedules)], None),
            ("/", vec![], None),
            ("/nope", vec![], None),
            ("/runs/a/b/c/d", vec![], Some("a")),
            ("/__conformance", vec![], None),
            ("/health/", vec![], None),
            ("/sessions", vec![], None),
            ("/deliveries", vec![], None),
            ("/compare/a", vec![], None),
        ];
        for (path, answers, run) in &table {
            let allow: Vec<&str> = answers.iter().map(|(m, _)| *m).collect();
            for method in METHODS {
                for spelled in [method.to_string(), method.to_ascii_lowercase()] {
                    let got = Route::parse(&spelled, path, false);
                    let want = match answers.iter().find(|(m, _)| m == method) {
                        Some((_, route)) => Ok(route.clone()),
                        None if allow.is_empty() => Err(RouteError::NotFound { run: run.map(String::from) }),
                        None => match got.as_ref().err() {
                            Some(RouteError::MethodNotAllowed { shape, .. }) => Err(RouteError::MethodNotAllowed {
                                shape: *shape,
                                allow: allow.clone(),
                                run: run.map(String::from),
                            }),
                            _ => panic!("{spelled} {path}: want 405 {allow:?}, got {got:?}"),
                        },
                    };
                    assert_eq!(got, want, "{spelled} {path}");
                }
            }
        }
        // Every row of the table of routes is in this test's table.
        for (shape, method, _) in ROUTES {
            if *shape == Shape::Conformance {
                continue;
            }
            assert!(
                table.iter().any(|(path, answers, _)| answers.iter().any(|(m, _)| m == method)
                    && matches!(shape_of(&segments(path), false), Ok(Some((s, _))) if s == *shape)),
                "{shape:?} {method} is not in the table"
            );
        }
    }

    #[test]
    fn the_conformance_route_exists_only_when_served_and_health_and_conformance_say_how_to_call_them() {
        assert_eq!(Route::parse("POST", "/__conformance", true), Ok(Route::Conformance));
        assert_eq!(Route::parse("POST", "/__conformance", false), Err(RouteError::NotFound { run: None }));
        let e = Route::parse("GET", "/__conformance", true).unwrap_err();
        assert!(!e.public());
        assert_eq!(e.to_error("GET", "/__conformance").message, "use POST /__conformance");
        let e = Route::parse("POST", "/health", false).unwrap_err();
        assert!(e.public(), "a wrong method on /health is answered before the token");
        let e = e.to_error("POST", "/health");
        assert_eq!((e.code, e.message.as_str()), (ErrorCode::MethodNotAllowed, "use GET /health"));
        let e = Route::parse("put", "/runs/a", false).unwrap_err().to_error("put", "/runs/a");
        assert_eq!((e.code, e.message.as_str()), (ErrorCode::MethodNotAllowed, "PUT is not allowed on /runs/a"));
        let e = Route::parse("get", "/nope", false).unwrap_err().to_error("get", "/nope");
        assert_eq!((e.code, e.message.as_str()), (ErrorCode::RouteNotFound, "no route GET /nope"));
    }

    /// A path of each shape: `{}` an id, `*` any segment of the API.
    fn template(shape: Shape) -> &'static [&'static str] {
        match shape {
            Shape::Health => &["health"],
            Shape::Conformance => &["__conformance"],
            Shape::Runs => &["runs"],
            Shape::Run => &["runs", "{}"],
            Shape::RunResume => &["runs", "{}", "resume"],
            Shape::RunEvents => &["runs", "{}", "events"],
            Shape::RunHistory => &["runs", "{}", "history"],
            Shape::RunFork => &["runs", "{}", "fork"],
            Shape::BelowRun => &["runs", "{}", "*", "*"],
            Shape::Compare => &["compare", "{}", "{}"],
            Shape::DemoCounts => &["demo", "counts"],
            Shape::Sweep => &["sweep"],
            Shape::Metrics => &["metrics"],
            Shape::Approvals => &["approvals"],
            Shape::Approval => &["approvals", "{}"],
            Shape::Delivery => &["deliveries", "{}"],
            Shape::Event => &["events", "{}"],
            Shape::Session => &["sessions", "{}"],
            Shape::SessionResume => &["sessions", "{}", "resume"],
            Shape::SessionFork => &["sessions", "{}", "fork"],
            Shape::SessionDiscardPending => &["sessions", "{}", "discard-pending"],
            Shape::BelowSession => &["sessions", "{}", "*"],
            Shape::Schedules => &["schedules"],
        }
    }

    /// The routing as it was before routes were data: one match over the path whose arms check the ids, then
    /// the method, each by hand (`admit` for `/health`). The oracle the parser is compared with.
    fn oracle(method: &str, path: &str) -> std::result::Result<Route, Error> {
        let m = method.to_ascii_uppercase();
        let parts = segments(path);
        let not_allowed = || Err(Error::new(ErrorCode::MethodNotAllowed, format!("{m} is not allowed on {path}")));
        let not_found = || Err(Error::new(ErrorCode::RouteNotFound, format!("no route {m} {path}")));
        let s = |v: &str| v.to_string();
        match parts.as_slice() {
            ["health"] => match m.as_str() {
                "GET" | "HEAD" => Ok(Route::Health),
                _ => Err(Error::new(ErrorCode::MethodNotAllowed, "use GET /health")),
            },
            ["runs"] => match m.as_str() {
                "GET" => Ok(Route::ListRuns),
                _ => not_allowed(),
            },
            ["runs", id] => {
                run_id_segment(id)?;
                match m.as_str() {
                    "POST" => Ok(Route::Send(s(id))),
                    "GET" => Ok(Route::GetRun(s(id))),
                    "DELETE" => Ok(Route::DeleteRun(s(id))),
                    _ => not_allowed(),
                }
            }
            ["runs", id, action @ ("resume" | "events" | "history" | "fork")] => {
                run_id_segment(id)?;
                match (*action, m.as_str()) {
                    ("resume", "POST") => Ok(Route::Resume(s(id))),
                    ("events", "GET") => Ok(Route::Events(s(id))),
                    ("history", "GET") => Ok(Route::History(s(id))),
                    ("fork", "POST") => Ok(Route::Fork(s(id))),
                    _ => not_allowed(),
                }
            }
            ["compare", a, b] => {
                run_id_segment(a)?;
                run_id_segment(b)?;
                if m != "GET" {
                    return not_allowed();
                }
                Ok(Route::Compare(s(a), s(b)))
            }
            ["demo", "counts"] if m == "GET" => Ok(Route::DemoCounts),
            ["sweep"] if m == "GET" => Ok(Route::Sweep),
            ["metrics"] if m == "GET" => Ok(Route::Metrics),
            ["approvals"] if m == "GET" => Ok(Route::ListApprovals),
            ["schedules"] if m == "GET" => Ok(Route::Schedules),
            ["demo", "counts"] | ["sweep"] | ["metrics"] | ["approvals"] | ["schedules"] => not_allowed(),
            ["approvals", id] => {
                approval_id_segment(id)?;
                if m != "POST" {
                    return not_allowed();
                }
                Ok(Route::Resolve(s(id)))
            }
            ["deliveries", id] => {
                delivery_id_segment(id)?;
                if m != "POST" {
                    return not_allowed();
                }
                Ok(Route::Deliver(s(id)))
            }
            ["events", token] => {
                non_empty_segment("event", token)?;
                if m != "POST" {
                    return not_allowed();
                }
                Ok(Route::DeliverEvent(s(token)))
            }
            ["sessions", id] => {
                validate_session_id(id)?;
                match m.as_str() {
                    "POST" => Ok(Route::SessionSend(s(id))),
                    "GET" => Ok(Route::SessionHistory(s(id))),
                    "DELETE" => Ok(Route::SessionDelete(s(id))),
                    _ => not_allowed(),
                }
            }
            ["sessions", id, action] => {
                validate_session_id(id)?;
                if m != "POST" {
                    return if matches!(*action, "resume" | "fork" | "discard-pending") {
                        not_allowed()
                    } else {
                        not_found()
                    };
                }
                match *action {
                    "resume" => Ok(Route::SessionResume(s(id))),
                    "fork" => Ok(Route::SessionFork(s(id))),
                    "discard-pending" => Ok(Route::SessionDiscardPending(s(id))),
                    _ => not_found(),
                }
            }
            _ => not_found(),
        }
    }

    /// Seeded cases; `STEADFAST_SEED=<n>` replays one.
    fn seeds() -> Vec<u64> {
        crate::seeds::seeds(0..5_000)
    }

    /// Generated requests (methods in any case; paths built from the API's segments and ids valid and not:
    /// empty, dotted, too long, with spaces or other characters, of every kind) are routed as the hand-written
    /// routing did: the same route, or the same refusal (code and message); a `405` names the methods that do
    /// route, and the request's is not among them; the run a refusal is about is the path's valid run id below
    /// `/runs`.
    #[test]
    fn generated_requests_are_routed_as_the_hand_written_routing_did() {
        let fixed = [
            "runs",
            "sessions",
            "approvals",
            "deliveries",
            "compare",
            "demo",
            "counts",
            "sweep",
            "schedules",
            "health",
            "resume",
            "events",
            "history",
            "fork",
            "discard-pending",
            "__conformance",
            "other",
        ];
        let long_a = "a".repeat(101);
        let long_d = "d".repeat(181);
        let long_r = "r".repeat(300);
        let ids = [
            "",
            "a",
            "order-7",
            "x.y",
            ".bad",
            "bad.",
            "a b",
            "apr_1",
            "a.turn-3",
            "s1",
            "bad.id",
            "ü",
            "a/b",
            "A-Z_09",
            long_a.as_str(),
            long_d.as_str(),
            long_r.as_str(),
            "%20",
            "..",
        ];
        let methods = ["GET", "get", "Post", "POST", "PUT", "DELETE", "delete", "HEAD", "PATCH", "OPTIONS", ""];
        // Routes, 404s, 405s, invalid ids.
        let mut seen = [0u32; 4];
        // How often each route was the answer.
        let mut routed = std::collections::BTreeMap::<String, u32>::new();
        for seed in seeds() {
            let rng = SplitMix64::new(seed);
            let pick = |n: usize| (rng.next_u64() % n as u64) as usize;
            // Half the requests are a route of the table (its path with ids from the pool, its method in any
            // case or, a third of the time, any method); half are segments at random.
            let (method, segs): (String, Vec<&str>) = if pick(2) == 0 {
                let (shape, row_method, _) = ROUTES[pick(ROUTES.len())];
                let method = match pick(3) {
                    0 => methods[pick(methods.len())].to_string(),
                    1 => row_method.to_ascii_lowercase(),
                    _ => row_method.to_string(),
                };
                let segs = template(shape)
                    .iter()
                    .map(|s| match *s {
                        "{}" => ids[pick(ids.len())],
                        "*" => fixed[pick(fixed.len())],
                        s => s,
                    })
                    .collect();
                (method, segs)
            } else {
                let segs = (0..pick(5))
                    .map(|i| if i == 0 || pick(2) == 0 { fixed[pick(fixed.len())] } else { ids[pick(ids.len())] })
                    .collect();
                (methods[pick(methods.len())].to_string(), segs)
            };
            let method = method.as_str();
            let mut path = String::new();
            for seg in segs {
                path.push('/');
                path.push_str(seg);
            }
            if path.is_empty() || pick(10) == 0 {
                path.push('/');
            }
            let repro = format!("{method} {path}: {}", crate::seeds::repro(seed, "api::route::tests"));
            let got = Route::parse(method, &path, false);
            match &got {
                Ok(route) => {
                    seen[0] += 1;
                    *routed
                        .entry(format!("{route:?}").split('(').next().unwrap_or_default().to_string())
                        .or_default() += 1;
                }
                Err(RouteError::NotFound { .. }) => seen[1] += 1,
                Err(RouteError::MethodNotAllowed { .. }) => seen[2] += 1,
                Err(RouteError::InvalidId(_)) => seen[3] += 1,
            }
            let shown = got.clone().map_err(|e| e.to_error(method, &path));
            assert_eq!(shown, oracle(method, &path), "{repro}");
            if let Err(RouteError::MethodNotAllowed { allow, .. }) = &got {
                assert!(!allow.is_empty() && !allow.contains(&method.to_ascii_uppercase().as_str()), "{repro}");
                for m in allow {
                    assert!(Route::parse(m, &path, false).is_ok(), "{m} is allowed: {repro}");
                }
            }
            if let Err(e) = &got {
                let below_run = match segments(&path).as_slice() {
                    ["runs", id, ..] if run_id_segment(id).is_ok() => Some(id.to_string()),
                    _ => None,
                };
                assert_eq!(e.run().map(String::from), below_run, "{repro}");
            }
        }
        if seeds().len() > 1 {
            // Each outcome is generated often enough to be compared.
            assert!(seen.iter().all(|&n| n >= 200), "routes, 404, 405, invalid ids: {seen:?}");
            // Every route of the table but the conformance suite's (not served here), at least ten times.
            assert_eq!(routed.len(), ROUTES.len() - 2, "{routed:?}");
            assert!(routed.values().all(|&n| n >= 10), "{routed:?}");
        }
    }
}
