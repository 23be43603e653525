//! Strict mode's API, natively: which requests the Worker hands to a run's object ([`forward_target`], over
//! generated requests), and runs executed as tasks of their own ([`Api::with_spawner`], as inside a Durable
//! Object) over the object store (`ObjectStore` on `LocalObjects`: the objects' logic and strict fencing): a
//! request that goes away mid-run does not stop its run, `Prefer: respond-async` answers 202 once the run has
//! started, and concurrent sends to one run from several processes run it once (the others get
//! `STEADFAST_SESSION_BUSY`). Generated cases print a one-line reproduction (`STRICT_API_SEED=<n>`).

mod common;

use common::*;
use futures::executor::LocalPool;
use futures::task::LocalSpawnExt;
use serde_json::{json, Value};
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use steadfast::api::{forward_target, Api, ApiRequest, ApiResponse, Spawner};
use steadfast::config::StoreMode;
use steadfast::runtime::{FnTool, ManualClock, MockModel, MockTurn, Rng, Sleep, SplitMix64, Tool, ToolOutput};
use steadfast::store::object::{LocalObjects, ObjectStore};
use steadfast::store::MemoryKv;

const TOKEN: &str = "strict-token";

fn for_seeds(test: &str, seeds: std::ops::Range<u64>, case: impl Fn(u64)) {
    let seeds: Vec<u64> = match std::env::var("STRICT_API_SEED") {
        Ok(s) => vec![s.parse().expect("STRICT_API_SEED is a number")],
        Err(_) => seeds.collect(),
    };
    for seed in seeds {
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| case(seed))).is_err() {
            panic!("seed {seed} failed; reproduce: STRICT_API_SEED={seed} cargo test --test strict_api {test}");
        }
    }
}

fn head(method: &str, path: &str, headers: &[(&str, &str)]) -> ApiRequest {
    ApiRequest {
        method: method.into(),
        path: path.into(),
        headers: headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        ..ApiRequest::default()
    }
}

/// Generated: a request goes to a run's object exactly when it is admitted (the token configured and given,
/// a declared size within the limit), its path is `/runs/{valid id}` or below, and the store is
/// `durable-object`; the configuration (the mode) is read only for an admitted request about a run.
#[test]
fn only_an_admitted_request_about_one_run_goes_to_its_object_in_strict_mode_generated() {
    let paths: &[(&str, Option<&str>)] = &[
        ("/runs/a", Some("a")),
        ("/runs/order-7", Some("order-7")),
        ("/runs/order-7/resume", Some("order-7")),
        ("/runs/x.y/history", Some("x.y")),
        ("/runs/r_1/fork", Some("r_1")),
        ("/runs/r_1/anything/below", Some("r_1")),
        ("/runs", None),
        ("/runs/", None),
        ("/runs//resume", None),
        ("/runs/.bad", None),
        ("/runs/bad.", None),
        ("/runs/a.turn-3", Some("a.turn-3")),
        ("/approvals", None),
        ("/approvals/apr_1", None),
        ("/deliveries/d-1", None),
        ("/compare/a/b", None),
        ("/health", None),
        ("/demo/counts", None),
        ("/", None),
        ("/nope/a", None),
    ];
    for_seeds("only_an_admitted_request_about_one_run_goes_to_its_object_in_strict_mode_generated", 0..400, |seed| {
        let rng = SplitMix64::new(seed);
        let pick = |n: u64| rng.next_u64() % n;
        let (path, run) = paths[pick(paths.len() as u64) as usize];
        let method = ["GET", "POST", "DELETE", "PUT", "HEAD"][pick(5) as usize];
        let configured = [None, Some(TOKEN), Some("")][pick(3) as usize];
        let auth = [format!("Bearer {TOKEN}"), format!("bearer  {TOKEN}"), "Bearer wrong".into(), String::new()]
            [pick(4) as usize]
            .clone();
        let length = ["", "12", "2000000", "ten"][pick(4) as usize];
        let mode = [StoreMode::Kv, StoreMode::DurableObject][pick(2) as usize];
        let mode_fails = pick(5) == 0;
        let mut headers = Vec::new();
        if !auth.is_empty() {
            headers.push(("authorization", auth.as_str()));
        }
        if !length.is_empty() {
            headers.push(("content-length", length));
        }
        let req = head(method, path, &headers);
        let reads = Cell::new(0);
        let got = forward_target(&req, configured, || {
            reads.set(reads.get() + 1);
            if mode_fails {
                Err(steadfast::Error::new(steadfast::ErrorCode::ConfigInvalid, "bad config"))
            } else {
                Ok(mode)
            }
        });
        let admitted = path != "/health"
            && configured == Some(TOKEN)
            && auth.trim_start().to_ascii_lowercase().starts_with("bearer ")
            && auth.ends_with(TOKEN)
            && (length.is_empty() || length == "12");
        let expected = run.filter(|_| admitted && !mode_fails && mode == StoreMode::DurableObject);
        assert_eq!(
            got.as_deref(),
            expected,
            "{method} {path} token={configured:?} auth={auth:?} len={length:?} {mode:?}"
        );
        assert_eq!(reads.get(), u32::from(admitted && run.is_some()), "the configuration was read only when needed");
    });
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

/// A tool that counts its executions (per call id) and waits at `door` before answering.
fn slow_tool(counters: &Counters, door: &Door) -> Rc<dyn Tool> {
    let (c, door) = (counters.clone(), door.clone());
    Rc::new(FnTool::new("lookup", "looks up slowly", object_schema(), move |_args, ctx| {
        let (c, door) = (c.clone(), door.clone());
        async move {
            c.hit(&format!("call:{}", ctx.tool_call_id));
            c.hit("lookup");
            door.wait().await;
            Ok(ToolOutput::text("found"))
        }
    }))
}

/// Processes over one set of run objects (strict fencing) and one index, each an API whose runs are tasks of
/// `pool` (as in a Durable Object).
struct Strict {
    env: Env,
    pool: RefCell<LocalPool>,
    counters: Counters,
    door: Door,
    processes: Cell<u64>,
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
        let clock = ManualClock::new(1_700_000_000_000);
        let store = ObjectStore::new(LocalObjects::default(), MemoryKv::new(), "", Rc::new(clock.clone()));
        Strict {
            env: Env::with_store(Rc::new(store), clock),
            pool: RefCell::new(LocalPool::new()),
            counters: Counters::default(),
            door: Door::default(),
            processes: Cell::new(1),
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
            .tool_rc(slow_tool(&self.counters, &self.door))
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
        .map(|b| serde_json::from_str(b.lines().find_map(|l| l.strip_prefix("data: ")).unwrap()).unwrap())
        .collect();
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
