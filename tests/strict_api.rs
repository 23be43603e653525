//! Strict mode's API, natively: which requests the Worker hands to a run's object ([`forward_target`], over
//! generated requests: runs, deliveries, and approvals through the approval index; [`object_run`] inside the
//! object), and runs executed as tasks of their own ([`Api::with_spawner`], as inside a Durable
//! Object) over the object store (`ObjectStore` on `LocalObjects`: the objects' logic and strict fencing): a
//! request that goes away mid-run does not stop its run, `Prefer: respond-async` answers 202 once the run has
//! started, and concurrent sends to one run from several processes run it once (the others get
//! `STEADFAST_SESSION_BUSY`); an approval resolved in a later request, by a new process (the object's), resumes
//! its run as the object's task (202 with `Prefer: respond-async`, the client gone, the tool run once), and
//! unknown or orphaned approvals keep their coded errors. Generated cases print a one-line reproduction (`STEADFAST_SEED=<n>`).

mod common;

use common::seeds::for_seeds;
use common::*;
use futures::executor::LocalPool;
use futures::task::LocalSpawnExt;
use serde_json::{json, Value};
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use steadfast::core::wait::wait_id;
use steadfast::front::api::{
    forward_target, object_run, Api, ApiRequest, ApiResponse, Forward, Found, Lookup, Spawner, RUN_HEADER,
};
use steadfast::front::config::StoreMode;
use steadfast::runtime::{FnTool, MockModel, MockTurn, Rng, Sleep, SplitMix64, Tool, ToolOutput};

const TOKEN: &str = "strict-token";

fn head(method: &str, path: &str, headers: &[(&str, &str)]) -> ApiRequest {
    ApiRequest {
        method: method.into(),
        path: path.into(),
        headers: headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        ..ApiRequest::default()
    }
}

/// Generated: a request goes to a run's object exactly when it is admitted (the token configured and given,
/// a declared size within the limit), it is about one run (`/runs/{valid id}` or below, `POST /deliveries/{id}`,
/// `POST /approvals/{id}` whose index entry names a valid run, `POST /events/{token}` whose wait id the index
/// names a run for (no API token needed; a malformed token looks nothing up), `POST /sessions/{valid id}` and its `resume`, to
/// the turn the session executes first) and the store is `durable-object`; the configuration (the mode) is read
/// only for an admitted request about a run, the lookup (approval index, session turns) only after that in
/// strict mode; an approval or session the lookup cannot name a run for (or cannot be read for) is served where
/// it arrived. Inside the object, [`object_run`] finds the same run again from what the Worker sent.
#[test]
fn only_an_admitted_request_about_one_run_goes_to_its_object_in_strict_mode_generated() {
    // An event wait's token whose wait the index knows (run `held-2`), and one it does not.
    let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
    let (known, guessed) = ("7".repeat(64), "8".repeat(64));
    let known_id = leak(wait_id(&known).unwrap());
    let guessed_id = leak(wait_id(&guessed).unwrap());
    let (known_path, guessed_path) = (leak(format!("/events/{known}")), leak(format!("/events/{guessed}")));
    // (path, the run by path, the approval by path, methods that forward)
    let paths: &[(&str, Option<&str>, Option<&str>, &[&str])] = &[
        (known_path, None, Some(known_id), &["POST"]),
        (guessed_path, None, Some(guessed_id), &["POST"]),
        // A malformed token: about a run (the mode is read) but no wait: nothing is looked up.
        ("/events/not-a-token", None, None, &["POST"]),
        ("/events/", None, None, &[]),
        ("/events", None, None, &[]),
        ("/runs/a", Some("a"), None, &["GET", "POST", "DELETE", "PUT", "HEAD"]),
        ("/runs/order-7", Some("order-7"), None, &["GET", "POST", "DELETE", "PUT", "HEAD"]),
        ("/runs/order-7/resume", Some("order-7"), None, &["GET", "POST", "DELETE", "PUT", "HEAD"]),
        ("/runs/x.y/history", Some("x.y"), None, &["GET", "POST", "DELETE", "PUT", "HEAD"]),
        ("/runs/r_1/fork", Some("r_1"), None, &["GET", "POST", "DELETE", "PUT", "HEAD"]),
        ("/runs/r_1/anything/below", Some("r_1"), None, &["GET", "POST", "DELETE", "PUT", "HEAD"]),
        ("/runs", None, None, &[]),
        ("/runs/", None, None, &[]),
        ("/runs//resume", None, None, &[]),
        ("/runs/.bad", None, None, &[]),
        ("/runs/bad.", None, None, &[]),
        ("/runs/a.turn-3", Some("a.turn-3"), None, &["GET", "POST", "DELETE", "PUT", "HEAD"]),
        ("/approvals", None, None, &[]),
        ("/approvals/apr_1", None, Some("apr_1"), &["POST"]),
        ("/approvals/apr_2", None, Some("apr_2"), &["POST"]),
        ("/approvals/", None, None, &[]),
        ("/approvals/a.b", None, None, &[]),
        ("/approvals/apr_1/x", None, None, &[]),
        ("/deliveries/d-1", Some("dlv-d-1"), None, &["POST"]),
        ("/sessions/s1", None, Some("session:s1"), &["POST"]),
        ("/sessions/s1/resume", None, Some("session:s1"), &["POST"]),
        ("/sessions/s1/fork", None, None, &[]),
        ("/sessions/s1/discard-pending", None, None, &[]),
        ("/sessions/bad.id", None, None, &[]),
        ("/sessions/", None, None, &[]),
        ("/deliveries/", None, None, &[]),
        ("/compare/a/b", None, None, &[]),
        ("/health", None, None, &[]),
        ("/demo/counts", None, None, &[]),
        ("/", None, None, &[]),
        ("/nope/a", None, None, &[]),
    ];
    // The lookups: apr_1 names run `held-1`, apr_2 a value that is no run id; any other approval is unknown;
    // session s1 executes its turn 4 next (in progress, or the next turn: the seed says).
    let index = |id: &str| match id {
        id if id == known_id => Some("held-2".to_string()),
        "apr_1" => Some("held-1".to_string()),
        "apr_2" => Some("not a run id".to_string()),
        "session:s1" => Some("s1.turn-4".to_string()),
        _ => None,
    };
    for_seeds("only_an_admitted_request_about_one_run_goes_to_its_object_in_strict_mode_generated", 0..600, |seed| {
        let rng = SplitMix64::new(seed);
        let pick = |n: u64| rng.next_u64() % n;
        let (path, run, approval, forwarding) = paths[pick(paths.len() as u64) as usize];
        let method = ["GET", "POST", "DELETE", "PUT", "HEAD", "post"][pick(6) as usize];
        let configured = [None, Some(TOKEN), Some("")][pick(3) as usize];
        let auth = [format!("Bearer {TOKEN}"), format!("bearer  {TOKEN}"), "Bearer wrong".into(), String::new()]
            [pick(4) as usize]
            .clone();
        let length = ["", "12", "2000000", "ten"][pick(4) as usize];
        let mode = [StoreMode::Kv, StoreMode::DurableObject][pick(2) as usize];
        let mode_fails = pick(5) == 0;
        let index_fails = pick(5) == 0;
        let in_progress = pick(2) == 0;
        let mut headers = Vec::new();
        if !auth.is_empty() {
            headers.push(("authorization", auth.as_str()));
        }
        if !length.is_empty() {
            headers.push(("content-length", length));
        }
        // A client's own run header changes nothing.
        if pick(3) == 0 {
            headers.push((RUN_HEADER, "spoofed"));
        }
        let req = head(method, path, &headers);
        let (reads, lookups) = (Cell::new(0), Cell::new(0));
        let got = block_on(forward_target(
            &req,
            configured,
            || {
                reads.set(reads.get() + 1);
                if mode_fails {
                    Err(steadfast::Error::new(steadfast::ErrorCode::ConfigInvalid, "bad config"))
                } else {
                    Ok(mode)
                }
            },
            async |asked: Lookup<'_>| {
                lookups.set(lookups.get() + 1);
                let key = match asked {
                    Lookup::Approval(id) => id.to_string(),
                    Lookup::Session(id) => format!("session:{id}"),
                };
                if index_fails {
                    Err(steadfast::Error::new(steadfast::ErrorCode::StoreUnavailable, "KV is down"))
                } else {
                    let session = key.starts_with("session:");
                    Ok(index(&key).map(|run| Found { run, in_progress: session && in_progress }))
                }
            },
        ));
        // An event's delivery needs no API token (its wait's token is the capability).
        let event =
            path.len() > "/events/".len() && path.starts_with("/events/") && method.eq_ignore_ascii_case("POST");
        let admitted = path != "/health"
            && (event
                || configured == Some(TOKEN)
                    && auth.trim_start().to_ascii_lowercase().starts_with("bearer ")
                    && auth.ends_with(TOKEN))
            && (length.is_empty() || length == "12");
        let about = forwarding.contains(&method.to_ascii_uppercase().as_str());
        let strict = admitted && about && !mode_fails && mode == StoreMode::DurableObject;
        let expected = match (run, approval) {
            (Some(run), _) => Some(Forward { run: run.into(), name_run: false, finish_first: None }),
            (None, Some(a)) => {
                index(a).filter(|r| !index_fails && (r == "held-1" || r == "held-2" || r == "s1.turn-4")).map(|run| {
                    // A session's send (not its resume) whose newest turn is in progress finishes that turn first.
                    let finish_first =
                        (path == "/sessions/s1" && in_progress).then(|| "/sessions/s1/resume".to_string());
                    Forward { run, name_run: true, finish_first }
                })
            }
            (None, None) => None,
        }
        .filter(|_| strict);
        let case = format!("{method} {path} token={configured:?} auth={auth:?} len={length:?} {mode:?}");
        assert_eq!(got, expected, "{case}");
        assert_eq!(reads.get(), u32::from(admitted && about), "the configuration was read only when needed: {case}");
        assert_eq!(lookups.get(), u32::from(strict && approval.is_some()), "the index read only when needed: {case}");
        // Inside the object: the run from the path, or from the header the Worker set (replacing the client's).
        if let Some(f) = &got {
            let mut sent = req.clone();
            if f.name_run {
                sent.headers.retain(|(k, _)| !k.eq_ignore_ascii_case(RUN_HEADER));
                sent.headers.push((RUN_HEADER.into(), f.run.clone()));
            }
            assert_eq!(object_run(&sent).as_deref(), Some(f.run.as_str()), "{case}");
        }
    });
}

/// Inside a run's object, an approval's request without a valid run header names no run (the object refuses
/// it: only the Worker forwards approvals, with the header).
#[test]
fn an_object_finds_an_approvals_run_only_in_the_header() {
    let mut r = head("POST", "/approvals/apr_1", &[]);
    assert_eq!(object_run(&r), None);
    r.headers.push((RUN_HEADER.into(), ".bad".into()));
    assert_eq!(object_run(&r), None);
    r.headers[0].1 = "held-1".into();
    assert_eq!(object_run(&r).as_deref(), Some("held-1"));
    assert_eq!(object_run(&head("GET", "/approvals/apr_1", &[(RUN_HEADER, "held-1")])), None);
    assert_eq!(object_run(&head("POST", "/runs/a", &[(RUN_HEADER, "held-1")])).as_deref(), Some("a"));
}

/// A door a tool waits at until the test opens it.
#[derive(Clone, Default)]
struct Door(Rc<(Cell<bool>, RefCell<Vec<Waker>>)>);

impl Door {
    fn open(&self) {
        self.0 .0.set(true);
        for w in self.0 .1.borrow_mut().drain(..) {
            w.wake();
        }
    }

    fn wait(&self) -> impl Future<Output = ()> {
        let door = self.clone();
        futures::future::poll_fn(move |cx| {
            if door.0 .0.get() {
                Poll::Ready(())
            } else {
                door.0 .1.borrow_mut().push(cx.waker().clone());
                Poll::Pending
            }
        })
    }
}

/// A tool that counts its executions (per call id) and waits at `door` before answering; `gated`: every call
/// needs approval first.
fn slow_tool(counters: &Counters, door: &Door, gated: bool) -> Rc<dyn Tool> {
    let (c, door) = (counters.clone(), door.clone());
    let tool = FnTool::new("lookup", "looks up slowly", object_schema(), move |_args, ctx| {
        let (c, door) = (c.clone(), door.clone());
        async move {
            c.hit(&format!("call:{}", ctx.tool_call_id));
            c.hit("lookup");
            door.wait().await;
            Ok(ToolOutput::text("found"))
        }
    });
    Rc::new(tool.needs_approval(gated))
}

/// Processes over one set of run objects (strict fencing) and one index, each an API whose runs are tasks of
/// `pool` (as in a Durable Object).
struct Strict {
    env: Env,
    pool: RefCell<LocalPool>,
    counters: Counters,
    door: Door,
    processes: Cell<u64>,
    /// The tool needs approval (for the processes made from now on).
    gated: Cell<bool>,
}

/// A timer that never fires.
struct Frozen;

#[async_trait::async_trait(?Send)]
impl Sleep for Frozen {
    async fn sleep(&self, _ms: u64) {
        futures::future::pending::<()>().await
    }
}

impl Strict {
    fn new() -> Strict {
        Strict {
            env: Env::objects(),
            pool: RefCell::new(LocalPool::new()),
            counters: Counters::default(),
            door: Door::default(),
            processes: Cell::new(1),
            gated: Cell::new(false),
        }
    }

    /// A new process's API; `spawned`: its runs are tasks of the pool.
    fn api(&self, spawned: bool) -> Rc<Api> {
        let model = MockModel::by_turn(vec![MockTurn::tools([("lookup", json!({}))]), MockTurn::text("done")]);
        // Timers never fire here (the lease's renewal waits for ever): the door alone decides when the tool
        // ends, and the tasks stall while it is shut.
        let agent = steadfast::Agent::builder(model)
            .store_rc(self.env.store.clone())
            .clock(Rc::new(self.env.clock.clone()))
            .sleep(Rc::new(Frozen))
            .rng(Rc::new(SplitMix64::new(self.processes.replace(self.processes.get() + 1))))
            .tool_rc(slow_tool(&self.counters, &self.door, self.gated.get()))
            .build()
            .expect("agent builds");
        let api = Api::new(agent, Some(TOKEN.into()));
        if !spawned {
            return Rc::new(api);
        }
        let spawner = self.pool.borrow().spawner();
        let spawn: Spawner = Rc::new(move |task| spawner.spawn_local(task).expect("the pool takes tasks"));
        Rc::new(api.with_spawner(spawn))
    }

    fn run_tasks(&self) {
        self.pool.borrow_mut().run_until_stalled();
    }

    fn status(&self, run_id: &str) -> Option<String> {
        let cp = block_on(self.env.store.load(run_id)).expect("loads");
        cp.map(|c| serde_json::to_value(c.status).unwrap().as_str().unwrap().to_string())
    }
}

fn send(run_id: &str, prefer_async: bool) -> ApiRequest {
    let mut r = head("POST", &format!("/runs/{run_id}"), &[("authorization", &format!("Bearer {TOKEN}"))]);
    if prefer_async {
        r.headers.push(("prefer".into(), "respond-async, wait=10".into()));
    }
    r.body = br#"{"input": "look it up"}"#.to_vec();
    r
}

type Pending = Pin<Box<dyn Future<Output = ApiResponse>>>;

fn request(api: &Rc<Api>, req: ApiRequest) -> Pending {
    let api = api.clone();
    Box::pin(async move { api.handle(req).await })
}

fn poll(f: &mut Pending) -> Option<ApiResponse> {
    match f.as_mut().poll(&mut Context::from_waker(futures::task::noop_waker_ref())) {
        Poll::Ready(r) => Some(r),
        Poll::Pending => None,
    }
}

fn code(r: &ApiResponse) -> String {
    let v: Value = serde_json::from_str(&r.body).unwrap_or_default();
    v["error"]["code"].as_str().unwrap_or("").to_string()
}

#[test]
fn a_request_that_goes_away_mid_tool_leaves_its_run_to_finish_as_a_task() {
    let s = Strict::new();
    let api = s.api(true);
    let mut req = request(&api, send("gone", false));
    assert!(poll(&mut req).is_none());
    s.run_tasks();
    assert_eq!(s.counters.get("lookup"), 1, "the tool started");
    assert!(poll(&mut req).is_none(), "the request waits for the run");
    drop(req); // The client went away.
    s.door.open();
    s.run_tasks();
    assert_eq!(s.status("gone").as_deref(), Some("finished"));
    assert_eq!(s.counters.get("lookup"), 1, "the tool ran once");
}

#[test]
fn respond_async_answers_202_once_the_run_has_started_and_the_run_goes_on() {
    let s = Strict::new();
    let api = s.api(true);
    let mut req = request(&api, send("async", true));
    assert!(poll(&mut req).is_none(), "nothing ran yet: no answer");
    s.run_tasks();
    let r = poll(&mut req).expect("answered once the run started");
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(serde_json::from_str::<Value>(&r.body).unwrap(), json!({"runId": "async", "status": "accepted"}));
    assert!(r.headers.contains(&("location".into(), "/runs/async".into())));
    assert_eq!(s.status("async").as_deref(), Some("in-progress"), "202 before the run ended");
    s.door.open();
    s.run_tasks();
    assert_eq!(s.status("async").as_deref(), Some("finished"));
    assert_eq!(s.counters.get("lookup"), 1);
    // A refusal before the run starts is the coded error, not a 202: bad input, and (below) a busy run.
    let mut bad = send("async", true);
    bad.body = br#"{"input": 5}"#.to_vec();
    let r = block_on(api.handle(bad));
    assert_eq!((r.status, code(&r).as_str()), (400, "STEADFAST_INVALID_INPUT"));
}

#[test]
fn sse_from_a_spawned_run_is_live_from_its_first_event_and_ends_with_the_run() {
    let s = Strict::new();
    let api = s.api(true);
    let mut r = send("live", false);
    r.headers.push(("accept".into(), "text/event-stream".into()));
    let mut req = request(&api, r);
    assert!(poll(&mut req).is_none(), "nothing ran yet: no answer");
    s.run_tasks();
    let resp = poll(&mut req).expect("answered once the run started, mid-tool");
    assert_eq!(resp.status, 200, "{}", resp.body);
    assert!(resp.headers.iter().any(|(k, v)| k == "content-type" && v == "text/event-stream"));
    let (mut chunks, task) = resp.live.expect("a live body").take().expect("taken once").into_stream();
    assert!(task.is_none(), "the run is a task of its own already: nothing for the shell to detach");
    let mut seen = String::new();
    while let Some(Some(chunk)) = futures::FutureExt::now_or_never(futures::StreamExt::next(&mut chunks)) {
        seen.push_str(&chunk);
    }
    assert!(seen.contains("event: tool.start\n") && !seen.contains("event: run.done\n"), "{seen}");
    s.door.open();
    s.run_tasks();
    seen.push_str(&block_on(futures::StreamExt::collect::<Vec<String>>(chunks)).concat());
    let events: Vec<Value> = seen
        .split("\n\n")
        .filter(|b| !b.trim().is_empty())
        // The id-only blocks are journal positions, not events.
        .filter_map(|b| b.lines().find_map(|l| l.strip_prefix("data: ")))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert!(seen.ends_with(".done\n\n"), "the stream ends with the cursor of the run's end: {seen}");
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["seq"], i as u64, "gapless seq: {seen}");
    }
    assert_eq!(events.last().unwrap()["type"], "run.done");
    assert_eq!(s.status("live").as_deref(), Some("finished"));
    assert_eq!(s.counters.get("lookup"), 1);
}

#[test]
fn without_a_spawner_the_request_drives_the_run_and_respond_async_is_ignored() {
    let s = Strict::new();
    s.door.open();
    let api = s.api(false);
    let r = block_on(api.handle(send("kv-like", true)));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(serde_json::from_str::<Value>(&r.body).unwrap()["status"], "finished");
}

/// Generated: 2–4 processes send to one run at once, their requests polled in a generated order (some
/// preferring 202, some going away), the runs executing as tasks: exactly one execution runs it (its answer
/// is the result or a 202), every other request is `STEADFAST_SESSION_BUSY` before any tool runs, the tool
/// runs once and the run finishes with one result.
#[test]
fn concurrent_sends_to_one_run_execute_it_once_the_others_are_busy_generated() {
    for_seeds("concurrent_sends_to_one_run_execute_it_once_the_others_are_busy_generated", 0..120, |seed| {
        let rng = SplitMix64::new(seed);
        let pick = |n: u64| rng.next_u64() % n;
        let s = Strict::new();
        let n = 2 + pick(3) as usize;
        let mut reqs: Vec<Option<Pending>> =
            (0..n).map(|_| Some(request(&s.api(true), send("race", pick(2) == 0)))).collect();
        let mut answers: Vec<Option<ApiResponse>> = vec![None; n];
        let mut gone = vec![false; n];
        // While the tool is held: every request is made (polled once: its run becomes a task) in a generated
        // order, with the tasks run at generated points; then some polled again, and some clients go away.
        let mut order: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            order.swap(i, pick(i as u64 + 1) as usize);
        }
        let polls: Vec<usize> = order.into_iter().chain((0..pick(8)).map(|_| pick(n as u64) as usize)).collect();
        for i in polls {
            if let Some(f) = reqs[i].as_mut() {
                if let Some(r) = poll(f) {
                    answers[i] = Some(r);
                    reqs[i] = None;
                } else if pick(5) == 0 {
                    reqs[i] = None; // This client goes away.
                    gone[i] = true;
                }
            }
            if pick(2) == 0 {
                s.run_tasks();
            }
        }
        s.run_tasks();
        s.door.open();
        for _ in 0..3 {
            s.run_tasks();
            for (i, f) in reqs.iter_mut().enumerate() {
                if let Some(r) = f.as_mut().and_then(poll) {
                    answers[i] = Some(r);
                    *f = None;
                }
            }
        }
        let ran: Vec<_> = answers.iter().flatten().filter(|r| r.status == 200 || r.status == 202).collect();
        let busy = answers.iter().flatten().filter(|r| code(r) == "STEADFAST_SESSION_BUSY").count();
        let answered = answers.iter().flatten().count();
        assert!(ran.len() <= 1, "one execution: {ran:?}");
        assert_eq!(ran.len() + busy, answered, "every other answer is busy: {answers:?}");
        assert_eq!(answered + gone.iter().filter(|g| **g).count(), n, "every request answered or gone");
        assert_eq!(s.counters.get("lookup"), 1, "the tool ran once");
        assert_eq!(s.status("race").as_deref(), Some("finished"));
        let cp = block_on(s.env.store.load("race")).unwrap().unwrap();
        let results =
            cp.messages.iter().filter(|m| matches!(m, steadfast::core::transcript::Message::Tool { .. })).count();
        assert_eq!(results, 1, "one result");
    });
}

fn resolve(approval: &str, prefer_async: bool) -> ApiRequest {
    let mut r = head("POST", &format!("/approvals/{approval}"), &[("authorization", &format!("Bearer {TOKEN}"))]);
    if prefer_async {
        r.headers.push(("prefer".into(), "respond-async".into()));
    }
    r.body = br#"{"approved": true, "note": "fine"}"#.to_vec();
    r
}

/// The answer to `req` from `api`, its tasks run meanwhile (bounded: a request still unanswered then fails).
fn answer(s: &Strict, api: &Rc<Api>, req: ApiRequest) -> ApiResponse {
    let mut f = request(api, req);
    for _ in 0..10 {
        if let Some(r) = poll(&mut f) {
            return r;
        }
        s.run_tasks();
    }
    panic!("no answer");
}

/// A run paused on its approval (by a process of its own, which then ends): the approval's id.
fn paused(s: &Strict, run_id: &str) -> String {
    s.gated.set(true);
    let r = answer(s, &s.api(true), send(run_id, false));
    let v: Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!((r.status, v["status"].as_str()), (200, Some("awaiting-approval")), "{v}");
    assert_eq!(s.counters.get("lookup"), 0, "nothing ran before the approval");
    v["approvalId"].as_str().expect("an approval id").to_string()
}

/// Days later (simulated: the shared clock moves on three days; a new process, as the run's object woken by
/// the forwarded request, serves it), the approval is resolved with `Prefer: respond-async`: 202 naming the
/// run once it resumed, the client goes, and the run finishes as the object's task; the tool ran once.
#[test]
fn an_approval_resolved_days_later_resumes_its_run_as_the_objects_task() {
    let s = Strict::new();
    let approval = paused(&s, "held");
    s.env.clock.advance(3 * 24 * 3_600_000);
    let object = s.api(true);
    let mut req = request(&object, resolve(&approval, true));
    assert!(poll(&mut req).is_none(), "nothing ran yet: no answer");
    s.run_tasks();
    assert_eq!(s.counters.get("lookup"), 1, "the approved call is running");
    let r = poll(&mut req).expect("answered once the run resumed");
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(serde_json::from_str::<Value>(&r.body).unwrap(), json!({"runId": "held", "status": "accepted"}));
    assert!(r.headers.contains(&("location".into(), "/runs/held".into())));
    drop(req); // The client is gone.
    assert_eq!(s.status("held").as_deref(), Some("in-progress"), "202 before the run ended");
    s.door.open();
    s.run_tasks();
    assert_eq!(s.status("held").as_deref(), Some("finished"));
    assert_eq!(s.counters.get("lookup"), 1, "the tool ran once");
    let approvals =
        block_on(object.handle(head("GET", "/approvals", &[("authorization", &format!("Bearer {TOKEN}"))])));
    assert_eq!(serde_json::from_str::<Value>(&approvals.body).unwrap(), json!([]), "the approval was consumed");
}

/// The same without the preference: the request waits for the run; the client aborts mid-tool and the run
/// still finishes as the object's task.
#[test]
fn an_approval_whose_client_goes_away_mid_tool_still_finishes_its_run() {
    let s = Strict::new();
    let approval = paused(&s, "left");
    let mut req = request(&s.api(true), resolve(&approval, false));
    assert!(poll(&mut req).is_none());
    s.run_tasks();
    assert_eq!(s.counters.get("lookup"), 1, "the tool started");
    assert!(poll(&mut req).is_none(), "the request waits for the run");
    drop(req);
    s.door.open();
    s.run_tasks();
    assert_eq!(s.status("left").as_deref(), Some("finished"));
    assert_eq!(s.counters.get("lookup"), 1, "the tool ran once");
}

/// Refusals keep their codes inside the object, with or without the preference: an unknown approval is 404
/// `STEADFAST_APPROVAL_NOT_FOUND`, a decided one answered again is refused, an approval whose run was deleted
/// is 410 `STEADFAST_APPROVAL_ORPHANED`; no tool runs.
#[test]
fn unknown_and_orphaned_approvals_keep_their_errors_in_the_object() {
    let s = Strict::new();
    s.door.open();
    for prefer in [false, true] {
        let r = answer(&s, &s.api(true), resolve("apr_nope", prefer));
        assert_eq!((r.status, code(&r).as_str()), (404, "STEADFAST_APPROVAL_NOT_FOUND"), "{}", r.body);
    }
    let approval = paused(&s, "gone");
    let del = head("DELETE", "/runs/gone", &[("authorization", &format!("Bearer {TOKEN}"))]);
    assert_eq!(block_on(s.api(true).handle(del)).status, 200);
    let object = s.api(true);
    let r = answer(&s, &object, resolve(&approval, true));
    assert_eq!((r.status, code(&r).as_str()), (410, "STEADFAST_APPROVAL_ORPHANED"), "{}", r.body);
    let r = answer(&s, &object, resolve(&approval, true));
    assert_eq!((r.status, code(&r).as_str()), (404, "STEADFAST_APPROVAL_NOT_FOUND"), "withdrawn: {}", r.body);
    assert_eq!(s.counters.get("lookup"), 0);
}

/// A delivery served by its run's object: 202 once its run started (naming the delivery's run), the run
/// finishes as the object's task with its tool once; a redelivery is acknowledged at once (200, nothing runs).
#[test]
fn a_delivery_runs_as_the_objects_task_and_a_redelivery_is_acknowledged() {
    let s = Strict::new();
    let auth = format!("Bearer {TOKEN}");
    let delivery = |prefer: bool| {
        let mut r = head("POST", "/deliveries/evt-9", &[("authorization", &auth)]);
        if prefer {
            r.headers.push(("prefer".into(), "respond-async".into()));
        }
        r.body = br#"{"input": "look it up"}"#.to_vec();
        r
    };
    let mut req = request(&s.api(true), delivery(true));
    assert!(poll(&mut req).is_none(), "nothing ran yet: no answer");
    s.run_tasks();
    let r = poll(&mut req).expect("answered once the run started");
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(serde_json::from_str::<Value>(&r.body).unwrap(), json!({"runId": "dlv-evt-9", "status": "accepted"}));
    drop(req);
    s.door.open();
    s.run_tasks();
    assert_eq!(s.status("dlv-evt-9").as_deref(), Some("finished"));
    let r = answer(&s, &s.api(true), delivery(true));
    let v: Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!((r.status, v["outcome"].as_str()), (200, Some("acknowledged")), "{v}");
    assert_eq!(s.counters.get("lookup"), 1, "the tool ran once");
}

/// An event wait in strict mode: a run paused on it by one process; days later a new process (the run's object,
/// which the Worker reached through the approval index) takes the delivery with the token alone and
/// `Prefer: respond-async`: 202 once the run resumed, the run finishes as the object's task with the payload as
/// the call's result; the token spent, a redelivery gets the same 404 as a guessed token.
#[test]
fn an_event_delivered_to_the_runs_object_resumes_it_as_the_objects_task() {
    use steadfast::core::transcript::Message;
    use steadfast::core::wait::WaitRequest;
    let env = Env::objects();
    let pool = RefCell::new(LocalPool::new());
    let process = |n: u64| {
        let turn = MockTurn::func(|req| match req.messages.last() {
            Some(Message::Tool(r)) => MockTurn::text(format!("got: {}", r.content)),
            _ => MockTurn::tools([("await_event", json!({}))]),
        });
        let tool = FnTool::new("await_event", "waits for a webhook", object_schema(), |_a, _ctx| async move {
            Ok(ToolOutput::wait(WaitRequest::Event { deadline: None }))
        });
        let agent = steadfast::Agent::builder(MockModel::by_turn(vec![turn; 4]))
            .store_rc(env.store.clone())
            .clock(Rc::new(env.clock.clone()))
            .sleep(Rc::new(Frozen))
            .rng(Rc::new(SplitMix64::new(n)))
            .tool_rc(Rc::new(tool))
            .build()
            .expect("agent builds");
        let spawner = pool.borrow().spawner();
        let spawn: Spawner = Rc::new(move |task| spawner.spawn_local(task).expect("the pool takes tasks"));
        Rc::new(Api::new(agent, Some(TOKEN.into())).with_spawner(spawn))
    };
    let run_all = |api: &Rc<Api>, req: ApiRequest| {
        let mut f = request(api, req);
        for _ in 0..10 {
            if let Some(r) = poll(&mut f) {
                return r;
            }
            pool.borrow_mut().run_until_stalled();
        }
        panic!("no answer");
    };
    let r = run_all(&process(1), send("hook", false));
    let v: Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(v["status"], "awaiting-approval", "{v}");
    let token = v["waits"][0]["token"].as_str().unwrap().to_string();
    let id = v["waits"][0]["id"].as_str().unwrap().to_string();
    assert_eq!(wait_id(&token).as_deref(), Some(id.as_str()), "the index is read under the token's wait id");

    env.clock.advance(3 * 24 * 3_600_000);
    let delivery = |token: &str| {
        let mut r = head("POST", &format!("/events/{token}"), &[("prefer", "respond-async"), (RUN_HEADER, "hook")]);
        r.body = br#"{"paid": true}"#.to_vec();
        r
    };
    let object = process(2);
    let mut req = request(&object, delivery(&token));
    assert!(poll(&mut req).is_none(), "nothing ran yet: no answer");
    pool.borrow_mut().run_until_stalled();
    let r = poll(&mut req).expect("answered once the run resumed");
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(serde_json::from_str::<Value>(&r.body).unwrap(), json!({"runId": "hook", "status": "accepted"}));
    drop(req);
    pool.borrow_mut().run_until_stalled();
    let cp = block_on(env.store.load("hook")).unwrap().unwrap();
    assert_eq!((format!("{:?}", cp.status), cp.last_text()), ("Finished".into(), r#"got: {"paid":true}"#.into()));

    let spent = run_all(&process(3), delivery(&token));
    let guessed = run_all(&process(3), delivery(&"0".repeat(64)));
    assert_eq!((spent.status, code(&spent).as_str()), (404, "STEADFAST_WAIT_NOT_FOUND"), "{}", spent.body);
    assert_eq!((spent.status, &spent.body), (guessed.status, &guessed.body), "spent and guessed: the same answer");
}
