//! The Cloudflare Worker (feature `worker`): `#[event(fetch)]` serves [`crate::front::api::Api`],
//! `#[event(scheduled)]` runs one recovery sweep per cron tick. This shell translates requests, bindings and
//! secrets into the platform-independent API and runtime; it makes no decisions of its own.
//!
//! Bindings: `RUNS` (Workers KV, required), `AI` (Workers AI, for `"provider": "workers-ai"`). Secrets:
//! `STEADFAST_TOKEN` (the API's bearer token), the provider key named by `model.apiKeySecret` and those the `mcp`
//! servers' headers name. The agent
//! comes from `STEADFAST_CONFIG` (a var) or the bundled `steadfast.config.json`.
//!
//! A request goes through [`crate::front::api::serve`], which decides the order: the token is checked from the
//! request's head before the body is read or the configuration parsed. With the cargo feature `conformance`
//! (test builds only, never a release) the shell also serves `POST /__conformance`, behind the same token.

mod object;
mod platform;

pub use object::StubClient;
pub use platform::{FetchClient, WorkersAi};

use crate::core::error::{Error, ErrorCode, Result};
use crate::front::api::{
    forward_failed, forward_target, serve, Api, ApiRequest, ApiResponse, Forward, Found, Host, Lookup,
};
use crate::front::config::{AgentConfig, ConfigCache, StoreMode};
use crate::front::wasm_shared::{js_message, js_rng, JsClock, JsSleep, WorkersKv};
use crate::providers::ModelPlatform;
use crate::runtime::traits::LocalFuture;
use crate::runtime::{Agent, RunResult, SweepListener, Watchers};
use crate::store::object::{ObjectClient, ObjectStore, OwnObject, RunObjectCore};
use crate::store::{JournalOptions, JournalStore, PendingRun, RunStore};
use crate::tools::demo::{demo_counts, demo_tools};
use crate::tools::mcp::McpCache;
use async_trait::async_trait;
use futures::StreamExt;
use std::rc::Rc;
use worker::{
    console_error, console_log, event, ByteStream, Context, Env, Headers, Request, Response, ScheduleContext,
    ScheduledEvent,
};

const BUNDLED_CONFIG: &str = include_str!("../../../steadfast.config.json");

thread_local! {
    /// The isolate's parsed configuration ([`ConfigCache`] decides when it is parsed again), keyed by the
    /// `STEADFAST_CONFIG` binding's JS value (`===`: equal strings, equal texts), so a warm request does not copy
    /// the text into wasm.
    static CONFIG: ConfigCache<wasm_bindgen::JsValue> = ConfigCache::default();
    /// The isolate's MCP servers: their tool lists and sessions ([`McpCache`] decides when a server is listed
    /// again), so a warm request costs no subrequest for them.
    static MCP: Rc<McpCache> = Rc::new(McpCache::default());
    /// The models' circuit breakers (`breaker` in the configuration), shared by every request of the isolate.
    /// And the agents' counters (`GET /metrics`), shared the same way (one thread-local for both: each costs code).
    static ISOLATE: (Rc<crate::runtime::Breakers>, Rc<crate::runtime::Metrics>) = Default::default();
    /// The isolate's spans waiting to be sent (`tracing` in the configuration): made by its first traced agent,
    /// sent by [`ship_traces`].
    static TRACES: std::cell::RefCell<Option<crate::runtime::OtlpBuffer>> = Default::default();
}

/// Sends the isolate's waiting spans to the configured OTLP endpoint (nothing when tracing is off or none wait).
/// Run after the reply (`waitUntil`, an object's task, the end of a cron tick): a run never waits for its traces,
/// and a failed export drops its spans (counted: `steadfast_trace_spans_dropped_total`) and is logged.
async fn ship_traces(env: Env) {
    // Ignored (`else { return }`): a configuration that does not parse has no tracing.
    let Ok(cfg) = config(&env) else { return };
    let (Some(t), Some(buf)) = (&cfg.tracing, TRACES.with(|b| b.borrow().clone())) else { return };
    let Some((body, n)) = buf.take_body() else { return };
    let sent = match t.request(body, &|name| secret(&env, name)) {
        Ok(req) => match crate::http::HttpClient::send(&FetchClient, req).await {
            Ok(r) if (200..300).contains(&r.status) => Ok(()),
            Ok(r) => Err(format!("HTTP {}", r.status)),
            Err(e) => Err(e.message),
        },
        Err(e) => Err(e.message),
    };
    if let Err(why) = sent {
        buf.count_dropped(n as u64);
        console_error!("steadfast: {n} spans were not exported: {why}");
    }
}

/// The configuration: `STEADFAST_CONFIG` (a non-blank string, or a JSON variable: its JSON text), else the
/// bundled one, through the isolate's [`ConfigCache`].
fn config(env: &Env) -> Result<Rc<AgentConfig>> {
    // Ignored (read as `undefined`): the only failure is an env that is not an object, so no variable, which
    // means the bundled config.
    let var = js_sys::Reflect::get(env, &"STEADFAST_CONFIG".into()).unwrap_or_default();
    CONFIG.with(|c| c.get_keyed(var, config_text))
}

/// The configuration's text from `STEADFAST_CONFIG`'s value: a string as it is (blank: the bundled one), unbound
/// the bundled one, and anything else — a JSON variable (wrangler.toml `[vars] STEADFAST_CONFIG = { … }`) — as
/// JSON, which the configuration's parser then accepts or refuses with `STEADFAST_CONFIG_INVALID`.
fn config_text(var: &wasm_bindgen::JsValue) -> String {
    match var.as_string() {
        Some(s) if s.trim().is_empty() => BUNDLED_CONFIG.into(),
        Some(s) => s,
        None if var.is_undefined() || var.is_null() => BUNDLED_CONFIG.into(),
        // Ignored (`unwrap_or_default`): a value JSON cannot write is empty text, refused by the parser.
        None => js_sys::JSON::stringify(var).ok().and_then(|s| s.as_string()).unwrap_or_default(),
    }
}

fn secret(env: &Env, name: &str) -> Option<String> {
    // Ignored (`.ok()`, twice): the only failure is a binding that does not exist, which means no value.
    env.secret(name)
        .map(|s| s.to_string())
        .ok()
        .or_else(|| env.var(name).map(|v| v.to_string()).ok())
        .filter(|s| !s.is_empty())
}

fn runs_kv(env: &Env) -> Result<WorkersKv> {
    let missing = |why: String| {
        Error::new(
            ErrorCode::ConfigInvalid,
            format!("the KV binding RUNS is missing (wrangler.toml [[kv_namespaces]]): {why}"),
        )
    };
    let ns = js_sys::Reflect::get(env, &"RUNS".into()).map_err(|e| missing(js_message(&e)))?;
    if ns.is_undefined() {
        return Err(missing("Binding `RUNS` is undefined.".into()));
    }
    WorkersKv::new(ns).map_err(|e| missing(e.message))
}

/// What the Worker supplies to build the configured model ([`AgentConfig::model`] decides which and how): `fetch`,
/// its secrets and vars, and the `AI` binding.
struct WorkerPlatform<'a>(&'a Env);

impl ModelPlatform for WorkerPlatform<'_> {
    type Http = FetchClient;
    type Ai = WorkersAi;

    fn http(&self) -> FetchClient {
        FetchClient
    }

    fn secret(&self, name: &str) -> Option<String> {
        secret(self.0, name)
    }

    fn workers_ai(&self) -> std::result::Result<WorkersAi, String> {
        self.0.ai("AI").map(WorkersAi).map_err(|e| e.to_string())
    }
}

/// Where a request finds the runs.
enum Runs {
    /// As configured (`store`): Workers KV, or the run objects through their stubs.
    Configured,
    /// Inside the object of this run (strict mode): its own storage for it, the stubs for any other run, the
    /// object's watchers (told of every execution's events) and the earliest due time of the waits its
    /// executions paused on.
    Object(
        String,
        Rc<RunObjectCore<crate::front::durable_sql::SqlObjectStorage>>,
        Rc<worker::State>,
        Watchers,
        DueWaits,
    ),
}

/// The earliest time a wait that resolves by itself (an event's deadline, a timer) comes due, as the `wait.start`
/// events of a run object's executions say: once the execution ended, the object's alarm is set for it (at the
/// latest), so [`Agent::wake`] resolves it then ([`object_task`]).
#[derive(Clone, Default)]
struct DueWaits(Rc<std::cell::Cell<Option<u64>>>);

/// A run object's executions' observer: its watchers, and the due times of the waits they pause on.
struct ObjectObserver(Watchers, DueWaits);

impl crate::runtime::traits::EventSink for ObjectObserver {
    fn emit(&self, event: &crate::core::events::EventEnvelope) {
        self.0.emit(event);
        if let crate::core::events::Event::WaitStart { due_at: Some(at), .. } = &event.event {
            let due = &self.1 .0;
            due.set(Some(due.get().map_or(*at, |d| d.min(*at))));
        }
    }

    fn durable(&self, run_id: &str, position: u64) {
        self.0.durable(run_id, position);
    }

    fn relay(&self, run_id: &str, json: &str) {
        self.0.relay(run_id, json);
    }
}

async fn build_agent(env: &Env, cfg: &AgentConfig, runs: &Runs) -> Result<Agent> {
    let kv = runs_kv(env)?;
    let clock = Rc::new(JsClock);
    let sleep = Rc::new(JsSleep);
    // One type of object client (boxed) keeps one copy of the object store's code in the Worker.
    let objects =
        |client: Box<dyn ObjectClient>| Rc::new(ObjectStore::new(client, kv.clone(), "", clock.clone(), sleep.clone()));
    let store: Rc<dyn RunStore> = match (runs, cfg.store) {
        (Runs::Object(run_id, core, ..), _) => {
            objects(Box::new(OwnObject::new(run_id.clone(), core.clone(), StubClient::new(env)?)))
        }
        (Runs::Configured, StoreMode::DurableObject) => objects(Box::new(StubClient::new(env)?)),
        (Runs::Configured, StoreMode::Kv) => Rc::new(JournalStore::new(
            kv.clone(),
            clock.clone(),
            sleep.clone(),
            JournalOptions { history_limit: cfg.history_limit, settle_ms: cfg.settle_ms, ..JournalOptions::default() },
        )),
    };
    let demo = || demo_tools(kv.clone());
    let mut b = cfg
        .agent_builder(&WorkerPlatform(env), Rc::new(FetchClient), &demo)?
        .store_rc(store)
        .clock(clock)
        .sleep(sleep)
        .rng(Rc::new(js_rng()))
        .breakers(ISOLATE.with(|i| i.0.clone()))
        .metrics(ISOLATE.with(|i| i.1.clone()));
    let mcp = MCP.with(Rc::clone);
    let now = crate::time::Clock::now_ms(&JsClock);
    for t in cfg.mcp_tools(&mcp, Rc::new(FetchClient), &|name| secret(env, name), now).await? {
        b = b.tool_rc(t);
    }
    if let Some(guard) = cfg.progress_guard {
        b = b.hook(crate::runtime::ProgressGuard::new(guard));
    }
    if let Runs::Object(_, _, _, hub, due) = runs {
        b = b.observer(Rc::new(ObjectObserver(hub.clone(), due.clone())));
    }
    if let Some(t) = &cfg.tracing {
        let buf = TRACES.with(|b| {
            b.borrow_mut()
                .get_or_insert_with(|| {
                    let buf = crate::runtime::OtlpBuffer::new(&t.service_name, t.max_buffered_spans);
                    buf.count_in(ISOLATE.with(|i| i.1.clone()), &cfg.name);
                    buf
                })
                .clone()
        });
        b = b.tracing(Rc::new(buf), crate::core::trace::TraceOptions { contents: t.contents });
    }
    if cfg.store == StoreMode::DurableObject {
        // Each child run executes in its own object.
        b = b.child_host(Rc::new(object::StubChildHost::new(env)?));
    }
    if cfg.store == StoreMode::DurableObject && cfg.recovery.ceiling.is_some() {
        b = b.recovery_gate(Rc::new(object::StubGate::new(env, cfg.model.model_id())?));
    }
    b.build()
}

/// The request's head (method, path, query, headers): everything but the body, which [`serve`] reads later
/// through [`WorkerHost`] once the request is admitted.
fn request_head(req: &Request) -> worker::Result<ApiRequest> {
    let url = req.inner().url();
    let (_, path, query) = crate::http::split_url(&url);
    let headers = req.headers().entries().collect();
    let (method, path, query) = (req.method().to_string(), path.to_string(), crate::http::query_pairs(query));
    Ok(ApiRequest { method, path, query, headers, body: Vec::new() })
}

/// The response to send: a live body's chunks are sent as they come, and its task (the rest of a run executing in
/// this request) handed to `detach`, which runs it to its end whether the client reads or not.
fn to_response(r: ApiResponse, detach: impl FnOnce(LocalFuture<'static, ()>)) -> worker::Result<Response> {
    let headers = Headers::new();
    for (k, v) in &r.headers {
        headers.set(k, v)?;
    }
    let response = match r.live.and_then(|l| l.take()) {
        Some(parts) => {
            let (chunks, task) = parts.into_stream();
            if let Some(task) = task {
                detach(task);
            }
            let head = futures::stream::once(futures::future::ready(r.body));
            Response::from_stream(head.chain(chunks).map(|c| Ok::<Vec<u8>, worker::Error>(c.into_bytes())))?
        }
        None => Response::ok(r.body)?,
    };
    Ok(response.with_status(r.status).with_headers(headers))
}

/// Runs a task as the request's `waitUntil`: to its end after the response, the client there or not (one instance
/// for every task).
fn wait_until(ctx: &Context, task: LocalFuture<'static, ()>) {
    ctx.wait_until(task)
}

/// Runs a task on the isolate's event loop (a Durable Object's tasks outlive the request).
fn spawn_local(task: LocalFuture<'static, ()>) {
    wasm_bindgen_futures::spawn_local(task)
}

/// One request's access to the platform, for [`serve`]: the body stream, the bindings and where the runs are.
struct WorkerHost<'a> {
    req: Request,
    body: Option<ByteStream>,
    env: &'a Env,
    runs: Runs,
}

#[async_trait(?Send)]
impl Host for WorkerHost<'_> {
    async fn body_chunk(&mut self) -> Result<Option<Vec<u8>>> {
        if self.body.is_none() {
            match self.req.stream() {
                Ok(s) => self.body = Some(s),
                // A body already taken (a bug in this shell) must not read as an empty one.
                Err(worker::Error::BodyUsed) => return Err(Error::internal("the request body was taken already")),
                // The only other failure: a request without a body.
                Err(_) => return Ok(None),
            }
        }
        match self.body.as_mut() {
            Some(s) => s
                .next()
                .await
                .transpose()
                .map_err(|e| Error::invalid_input(format!("reading the request body failed: {e}"))),
            None => Ok(None),
        }
    }

    fn breakers(&self) -> String {
        ISOLATE.with(|i| i.0.json())
    }

    fn discard_body(&mut self) {
        // Dropping the stream cancels it (wasm-streams' IntoStream cancels on drop): nothing is read. A request
        // without a body has no stream to cancel.
        if self.body.is_none() {
            drop(self.req.stream());
        }
    }

    async fn api(&mut self, token: Option<String>) -> Result<Api> {
        let env = self.env;
        let cfg = config(env)?;
        let agent = build_agent(env, &cfg, &self.runs).await?;
        let mut api =
            Api::new(agent, token).with_schedules(cfg.compiled_schedules()?).with_recovery(cfg.recovery.clone());
        if let Runs::Object(_, _, state, hub, due) = &self.runs {
            // Every execution of the run happens in its object and tells the hub.
            api = api.with_watchers(hub.clone());
            // Inside the run's object: runs execute as tasks of the object, not of the request, each with the
            // object's alarm set first for when its lease could be taken over (should the object die with it),
            // and after it for the earliest wait it paused on that resolves by itself.
            let (state, at, due) = (state.clone(), api.agent().takeover_at(), due.clone());
            let env = env.clone();
            api = api.with_spawner(Rc::new(move |task| object_task(state.clone(), at, due.clone(), env.clone(), task)));
        }
        // Ignored (no else): `build_agent` above failed already if the KV binding is missing.
        if let (true, Ok(kv)) = (cfg.demo_tools_enabled(), runs_kv(env)) {
            api = api.with_demo_counts(Rc::new(move || {
                let kv = kv.clone();
                // An object of the counts, built as is (not by a JSON value writer's instance for the map).
                Box::pin(async move {
                    demo_counts(&kv).await.map(|c| {
                        let mut o = serde_json::Map::new();
                        for (name, n) in c {
                            o.insert(name, n.into());
                        }
                        serde_json::Value::Object(o)
                    })
                })
            }));
        }
        Ok(api)
    }

    #[cfg(feature = "conformance")]
    fn conformance_route(&self) -> bool {
        true
    }

    #[cfg(feature = "conformance")]
    async fn conformance(&mut self) -> Result<String> {
        conformance(self.env).await
    }
}

/// Runs the store conformance suite on the journal store over this Worker's real KV binding (each suite
/// function under its own key prefix). Test plumbing, compiled only with the cargo feature `conformance` and
/// served only with the bearer token. A violated rule aborts the Worker (the suite asserts), so only a
/// completed run answers 200.
#[cfg(feature = "conformance")]
async fn conformance(env: &Env) -> Result<String> {
    use crate::runtime::{ManualClock, ManualSleep};
    use crate::store::conformance::{run_all, Capabilities};
    let kv = runs_kv(env)?;
    let n = std::cell::Cell::new(0u32);
    let started = js_sys::Date::now() as u64;
    let make = |clock: &ManualClock| {
        n.set(n.get() + 1);
        let prefix = format!("conformance/{started}/{}/", n.get());
        let store = || {
            JournalStore::new(
                kv.clone(),
                Rc::new(clock.clone()),
                Rc::new(ManualSleep::new(clock.clone())),
                JournalOptions { prefix: prefix.clone(), ..JournalOptions::default() },
            )
        };
        (store(), store())
    };
    run_all(&make, &Capabilities { strict_fencing: false }).await;
    let kv_suites = n.get();
    let strict = conformance_objects(env, &kv, started).await?;
    let runs = object::StubClient::new(env)?.conformance_runs(&format!("conformance/{started}/runs")).await?;
    Ok(format!("store conformance on WorkersKv: ok ({kv_suites} suites)\n{strict}\n{runs}"))
}

/// The same suite on the Durable Object store (strict fencing asserted) over the real `RUN_OBJECTS` binding,
/// each suite function's runs in their own objects; then the rows one boundary writes, measured by SQLite
/// (`rows_written`) and asserted: one per boundary.
#[cfg(feature = "conformance")]
async fn conformance_objects(env: &Env, kv: &WorkersKv, started: u64) -> Result<String> {
    use crate::core::checkpoint::RunStatus;
    use crate::core::transcript::Message;
    use crate::runtime::{ManualClock, ManualSleep};
    use crate::store::conformance::{acquired, delta_entry, run_all, snapshot_entry, Capabilities};
    use crate::store::object::ObjectStore;
    use crate::store::{LeaseOptions, RunStore};
    use crate::time::Clock;
    let n = std::cell::Cell::new(0u32);
    let make = |clock: &ManualClock| {
        n.set(n.get() + 1);
        let prefix = format!("conformance/{started}/do{}/", n.get());
        let store = || {
            // The binding is checked below, before the suite runs.
            let client = StubClient::new(env).map(|c| c.with_prefix(prefix.clone()));
            ObjectStore::new(
                client.expect("RUN_OBJECTS"),
                kv.clone(),
                prefix.clone(),
                Rc::new(clock.clone()),
                Rc::new(ManualSleep::new(clock.clone())),
            )
        };
        (store(), store())
    };
    StubClient::new(env)?;
    run_all(&make, &Capabilities { strict_fencing: true }).await;
    // Rows per boundary: a snapshot, then deltas of growing size (one past a row's 1 MB, split over two rows).
    let clock = ManualClock::new(1_700_000_000_000);
    let prefix = format!("conformance/{started}/rows/");
    let store = ObjectStore::new(
        StubClient::new(env)?.with_prefix(prefix.clone()),
        kv.clone(),
        prefix,
        Rc::new(clock.clone()),
        Rc::new(ManualSleep::new(clock.clone())),
    );
    let lease = acquired(&store, "rows", "o", clock.now_ms(), &LeaseOptions::default(), "lease").await;
    let (e, mut cp) = snapshot_entry("rows", "start", clock.now_ms());
    let before = store.counters();
    store.commit(&lease, &e, &cp).await?;
    let boundaries = 40u64;
    for i in 1..boundaries {
        let text = "x".repeat(50 * i as usize * i as usize);
        let (e, next) = delta_entry(&cp, Message::user(text), RunStatus::InProgress, clock.now_ms() + i);
        store.commit(&lease, &e, &next).await?;
        cp = next;
    }
    let c = store.counters().since(&before);
    assert_eq!(c.commits, boundaries);
    assert_eq!(c.commit_writes, boundaries, "one SQLite row written per boundary");
    let (e, big) = delta_entry(&cp, Message::user("y".repeat(1_500_000)), RunStatus::InProgress, clock.now_ms());
    let before = store.counters();
    store.commit(&lease, &e, &big).await?;
    assert_eq!(store.counters().since(&before).commit_writes, 2, "an entry over 1 MB: two rows");
    assert_eq!(store.load("rows").await?.as_ref(), Some(&big), "it loads whole");
    Ok(format!(
        "store conformance on DurableObject: ok ({} suites, strict fencing)\nstrict_writes_per_boundary={:.2} ({} rows for {} boundaries)",
        n.get(),
        c.commit_writes as f64 / c.commits as f64,
        c.commit_writes,
        c.commits
    ))
}

/// The HTTP entry: translates the request and hands it to [`serve`] (which checks the token before the body
/// is read or the agent built).
#[event(fetch)]
pub async fn fetch(req: Request, env: Env, ctx: Context) -> worker::Result<Response> {
    console_error_panic_hook::set_once();
    let head = request_head(&req)?;
    let token = secret(&env, "STEADFAST_TOKEN");
    // Strict mode: a run's requests go to its object, which serves them (and executes the run); an approval's
    // run is the one its index entry names, a session's the turn it executes first.
    if let Some(mut f) = route(&env, &head, token.as_deref()).await {
        let objects = match StubClient::new(&env) {
            Ok(objects) => objects,
            Err(e) => return to_response(ApiResponse::error(&e), spawn_local),
        };
        if let Some(path) = f.finish_first.take() {
            // A session's turn in progress finishes in its own object first; that answer is not the client's.
            if let Err(e) = objects.finish_first(&f, &path, &req).await {
                console_error!("steadfast: finishing run '{}' first: {e}", f.run);
            }
            if let Some(next) = route(&env, &head, token.as_deref()).await {
                f = next;
            }
        }
        return match objects.forward(&f, req).await {
            Ok(answer) => Ok(answer),
            // The object could not be reached or failed before answering: a coded, retryable answer.
            Err(e) => to_response(forward_failed(&f, &e.to_string()), spawn_local),
        };
    }
    let mut host = WorkerHost { req, body: None, env: &env, runs: Runs::Configured };
    let answer = serve(head, token, &mut host).await;
    // The spans of what ran in the request go after the reply; a live body's task sends its own once it ends.
    let ship = env.clone();
    let response =
        to_response(answer, |task| wait_until(&ctx, Box::pin(async move { (task.await, ship_traces(ship).await).1 })));
    wait_until(&ctx, Box::pin(ship_traces(env)));
    response
}

/// Strict mode: the object a request goes to ([`forward_target`]), with the platform's lookups.
async fn route(env: &Env, head: &ApiRequest, token: Option<&str>) -> Option<Forward> {
    forward_target(
        head,
        token,
        || config(env).map(|c| c.store),
        async |asked: Lookup<'_>| match asked {
            Lookup::Approval(id) => Ok(approval_index(env)?.approval_run(id).await?.map(Found::run)),
            Lookup::Session(id) => {
                let cfg = config(env)?;
                let agent = build_agent(env, &cfg, &Runs::Configured).await?;
                Ok(Some(agent.session(id)?.next_execution().await?.into()))
            }
        },
    )
    .await
}

/// The approval index (strict mode), to find an approval's run.
fn approval_index(env: &Env) -> Result<ObjectStore<Box<dyn ObjectClient>, WorkersKv>> {
    Ok(ObjectStore::new(Box::new(StubClient::new(env)?), runs_kv(env)?, "", Rc::new(JsClock), Rc::new(JsSleep)))
}

/// A request the Worker forwarded to a run's object: served there by [`serve`], the runs inside the object.
async fn serve_in_object(
    req: Request,
    head: ApiRequest,
    env: &Env,
    run_id: String,
    core: Rc<RunObjectCore<crate::front::durable_sql::SqlObjectStorage>>,
    state: Rc<worker::State>,
    hub: Watchers,
) -> worker::Result<Response> {
    let token = secret(env, "STEADFAST_TOKEN");
    let runs = Runs::Object(run_id, core, state, hub, DueWaits::default());
    let mut host = WorkerHost { req, body: None, env, runs };
    to_response(serve(head, token, &mut host).await, spawn_local)
}

/// A child run's execution its lead's call sent to the child's object (strict mode; `call`: a
/// [`crate::runtime::ChildExecution`] as [`crate::front::api::child_call_body`] writes it): served by the object's API ([`Api::serve_child`]), the execution a
/// task of the object, its lines streamed as it goes; a call that cannot be served is answered with its end line.
async fn child_in_object(
    req: Request,
    call: &str,
    env: &Env,
    core: Rc<RunObjectCore<crate::front::durable_sql::SqlObjectStorage>>,
    state: Rc<worker::State>,
    hub: Watchers,
) -> worker::Result<Response> {
    let served: Result<ApiResponse> = async {
        let call = crate::front::api::parse_child_call(call)?;
        let runs = Runs::Object(call.run_id.clone(), core, state, hub, DueWaits::default());
        let mut host = WorkerHost { req, body: None, env, runs };
        Ok(host.api(None).await?.serve_child(call))
    }
    .await;
    match served {
        Ok(answer) => to_response(answer, spawn_local),
        Err(e) => Response::ok(crate::front::api::child_refusal(&e)),
    }
}

/// Runs `task` as a task of a run's object, not of the request that started it, with the object's alarm set
/// first for `at` (when its lease could be taken over, should the object die with it), and once it ended for the
/// earliest wait its execution paused on that resolves by itself (`due`: an event's deadline, a timer) when that
/// comes before `at`, so the alarm ([`wake_object`], [`Agent::wake`]) resolves it on time (a later one is set by
/// the alarm at `at`, from what [`Agent::wake`] answers). A request that executes nothing new (a refused send)
/// still moves the alarm to its `at`: a wait due before then is resolved then, late by at most the lease's
/// takeover time.
fn object_task(
    state: Rc<worker::State>,
    at: u64,
    due: DueWaits,
    env: Env,
    task: impl std::future::Future<Output = ()> + 'static,
) {
    wasm_bindgen_futures::spawn_local(async move {
        object::set_alarm(&state, Some(at)).await;
        task.await;
        object::set_alarm(&state, due.0.take().filter(|d| *d < at)).await;
        ship_traces(env).await;
    })
}

/// A schedule's due fire the cron tick sent to its run's object (strict mode, a [`crate::runtime::FireCall`]'s
/// JSON): run there as a task of the object ([`Agent::run_fire`] decides), answered with its outcome's JSON
/// once it ends (a tick that goes away leaves it running).
async fn fire_in_object(
    env: &Env,
    call: &str,
    core: Rc<RunObjectCore<crate::front::durable_sql::SqlObjectStorage>>,
    state: Rc<worker::State>,
    hub: Watchers,
) -> String {
    use crate::runtime::{FireCall, ScheduleOutcome};
    let mut schedule_id = String::new();
    let outcome: Result<ScheduleOutcome> = async {
        let call: FireCall =
            serde_json::from_str(call).map_err(|e| Error::invalid_input(format!("not a schedule's fire: {e}")))?;
        schedule_id = call.schedule.clone();
        let cfg = config(env)?;
        let schedule = cfg.compiled_schedules()?.into_iter().find(|s| s.spec.id == call.schedule).ok_or_else(|| {
            Error::new(ErrorCode::ConfigInvalid, format!("schedule '{}' is not configured", call.schedule))
        })?;
        let due = DueWaits::default();
        let runs = Runs::Object(call.fire.run_id.clone(), core, state.clone(), hub, due.clone());
        let agent = build_agent(env, &cfg, &runs).await?;
        let (tx, rx) = futures::channel::oneshot::channel();
        let at = agent.takeover_at();
        object_task(state, at, due, env.clone(), async move {
            let outcome = agent.run_fire(&schedule, call.fire.fire_at, &crate::runtime::SendOptions::default()).await;
            // Ignored: the tick that asked has gone; the fire ran all the same.
            let _ = tx.send(outcome);
        });
        rx.await.map_err(|_| Error::internal("the fire's task ended without an outcome"))
    }
    .await;
    let outcome = outcome.unwrap_or_else(|e| ScheduleOutcome::Failed { schedule_id, run_id: None, error: e.info() });
    // Ignored: a ScheduleOutcome (strings, numbers) always serialises.
    serde_json::to_string(&outcome).unwrap_or_default()
}

/// A run object's alarm: the run's own recovery step ([`Agent::wake`] decides), then its next alarm. A failed
/// step is logged and looked at again once a lease could be taken over.
async fn wake_object(
    env: &Env,
    core: Rc<RunObjectCore<crate::front::durable_sql::SqlObjectStorage>>,
    state: Rc<worker::State>,
    hub: Watchers,
) {
    let mut fallback = None;
    let woken: Result<Option<u64>> = async {
        let Some(run_id) = core.run_id()? else { return Ok(None) };
        let cfg = config(env)?;
        let runs = Runs::Object(run_id.clone(), core, state.clone(), hub, DueWaits::default());
        let agent = build_agent(env, &cfg, &runs).await?;
        fallback = Some(agent.takeover_at());
        agent.wake(&run_id, &cfg.recovery, &ConsoleListener).await
    }
    .await;
    let next = woken.unwrap_or_else(|e| {
        console_error!("steadfast: a run object's alarm failed: {e}");
        fallback
    });
    object::set_alarm(&state, next).await;
    ship_traces(env.clone()).await;
}

/// Logs what the sweep does (cron output is the Worker's log).
struct ConsoleListener;

impl SweepListener for ConsoleListener {
    fn on_recovered(&self, run_id: &str, result: &RunResult) -> Result<()> {
        console_log!("steadfast: recovered run {run_id} ({:?})", result.status);
        Ok(())
    }
    fn on_quarantined(&self, run: &PendingRun) -> Result<()> {
        console_log!("steadfast: quarantined run {} after {} failed attempts", run.run_id, run.attempts);
        Ok(())
    }
    fn on_outage(&self, active: bool) -> Result<()> {
        console_log!("steadfast: provider outage {}", if active { "detected: sweep paused" } else { "over" });
        Ok(())
    }
    fn on_error(&self, error: &Error, run_id: Option<&str>) -> Result<()> {
        console_error!("steadfast: sweep error on {}: {error}", run_id.unwrap_or("(listing)"));
        Ok(())
    }
}

/// The cron entry: the configured schedules' due fires and one bounded recovery sweep, side by side (a long
/// fire does not hold the sweep back). workers-rs discards this function's result, so every error is caught
/// and logged here.
#[event(scheduled)]
pub async fn scheduled(event: ScheduledEvent, env: Env, _ctx: ScheduleContext) {
    console_error_panic_hook::set_once();
    let result = async {
        let cfg = config(&env)?;
        let agent = build_agent(&env, &cfg, &Runs::Configured).await?;
        let schedules = cfg.compiled_schedules()?;
        let send = crate::runtime::SendOptions::default();
        // Strict mode: each due fire runs in the object of its run (which answers its outcome as JSON).
        let objects = match cfg.store {
            StoreMode::DurableObject => Some(StubClient::new(&env)?),
            StoreMode::Kv => None,
        };
        // Ignored (`unwrap_or_default`): a ScheduleOutcome (strings, numbers) always serialises.
        let text = |o: crate::runtime::ScheduleOutcome| Ok(serde_json::to_string(&o).unwrap_or_default());
        let fires = agent.fire_schedules_with(
            &schedules,
            async |s, due| match &objects {
                Some(objects) => objects.fire(&s.spec.id, due).await,
                None => text(agent.run_fire(s, due.fire_at, &send).await),
            },
            text,
        );
        // KV mode with a `RECOVERY_QUEUE` binding: the tick sends the runs to resume to the queue (`queue` below
        // resumes them); strict mode's runs execute in their objects (alarms), never in a consumer.
        let queue = match cfg.store {
            StoreMode::Kv => recovery_queue(&env),
            StoreMode::DurableObject => None,
        };
        let sweep = async {
            match &queue {
                Some(q) => agent.sweep_fanning_out(&cfg.recovery, &ConsoleListener, q).await,
                None => agent.sweep(&cfg.recovery, &ConsoleListener).await,
            }
        };
        let (fires, sweep) = futures::join!(fires, sweep);
        Ok::<_, Error>((fires, sweep))
    }
    .await;
    match result {
        Ok((fires, sweep)) => {
            for fire in fires {
                match fire {
                    Ok(outcome) => console_log!("steadfast schedule: {outcome}"),
                    Err(e) => console_error!("steadfast schedule failed: {e}"),
                }
            }
            match sweep {
                Ok(r) => console_log!(
                    "steadfast sweep ({} at {}): {}",
                    event.cron(),
                    event.schedule(),
                    // Ignored: a SweepReport (numbers, strings, lists) always serialises.
                    serde_json::to_string(&r).unwrap_or_default()
                ),
                Err(e) => console_error!("steadfast sweep failed: {e}"),
            }
        }
        Err(e) => console_error!("steadfast cron tick failed: {e}"),
    }
    ship_traces(env).await;
}

/// The `RECOVERY_QUEUE` producer binding, if the Worker has one.
fn recovery_queue(env: &Env) -> Option<platform::JsQueue> {
    let q = crate::front::wasm_shared::prop(env, "RECOVERY_QUEUE");
    (!crate::front::wasm_shared::absent(&q)).then_some(platform::JsQueue(q))
}

/// The queue consumer (wrangler.toml `[[queues.consumers]]` of the recovery queue): resumes the run each message
/// names ([`Agent::consume_recovery`]: the run's own recovery step, as a run object's alarm takes it), one message
/// after another (a consumer invocation is one resume at a time,
/// so the queue's `max_concurrency` bounds the resumes at once). A message is acknowledged whatever it found,
/// and delivered again only when its run could not be read. Exported by hand (worker-build calls any `queue`
/// export) rather than through workers-rs's `queue` feature, whose batch types the Worker does not need.
#[wasm_bindgen::prelude::wasm_bindgen]
pub async fn queue(
    batch: wasm_bindgen::JsValue,
    env: wasm_bindgen::JsValue,
    _ctx: wasm_bindgen::JsValue,
) -> std::result::Result<wasm_bindgen::JsValue, wasm_bindgen::JsValue> {
    use crate::front::wasm_shared::prop;
    use wasm_bindgen::JsCast;
    console_error_panic_hook::set_once();
    let env: Env = env.unchecked_into();
    let messages = js_sys::Array::from(&prop(&batch, "messages"));
    let agent = async {
        let cfg = config(&env)?;
        let agent = build_agent(&env, &cfg, &Runs::Configured).await?;
        Ok::<_, Error>((cfg, agent))
    }
    .await;
    let (cfg, agent) = match agent {
        Ok(a) => a,
        Err(e) => {
            // Every message comes again (the queue's retries, then its dead-letter queue).
            console_error!("steadfast recovery consumer: {e}");
            messages.iter().for_each(|m| platform::settle_message(&m, false));
            return Ok(wasm_bindgen::JsValue::UNDEFINED);
        }
    };
    for m in messages.iter() {
        let body = prop(&m, "body");
        // A body that is not text is not ours: read as "" and answered `invalid`.
        let text = body.as_string().unwrap_or_default();
        match agent.consume_recovery(&text, &cfg.recovery, &ConsoleListener).await {
            Ok(done) => {
                if let Some(e) = &done.error {
                    console_error!("steadfast recovery: not a recovery message: {}", e.message);
                }
                platform::settle_message(&m, true);
            }
            Err(e) => {
                console_error!("steadfast recovery consumer: {e}");
                platform::settle_message(&m, false);
            }
        }
    }
    ship_traces(env).await;
    Ok(wasm_bindgen::JsValue::UNDEFINED)
}
