//! Strict mode's Durable Object: `RunObject`, one per run (addressed by `idFromName(run id)` on the
//! `RUN_OBJECTS` binding), SQLite-backed (`new_sqlite_classes` in wrangler.toml). Translation only: a call
//! arrives as JSON ([`crate::store::object::ObjectCall`]) and [`RunObjectCore`] decides; this file maps
//! [`ObjectStorage`] onto the object's SQL storage and [`ObjectClient`] onto a fetch to the stub.
//!
//! Tables: `journal(seq, part, snap, body)` keyed by `(seq, part)` and `meta(k, v)` keyed by `k`, both
//! `WITHOUT ROWID` (the key is the table: one row written per insert, no secondary index).

use super::platform::new_request;
use crate::core::error::{Error, ErrorCode, Result};
use crate::core::gate::{acquire_call, release_call, GateState, Grant};
use crate::front::api::{Forward, RUN_HEADER};
use crate::front::durable_sql::{Sql, SqlObjectStorage};
use crate::runtime::{ChildExecution, ChildHost, DueFire, EventSink, FireCall, RecoveryGate, Watchers};
use crate::store::object::{ObjectClient, RunObjectCore};
use async_trait::async_trait;
use std::rc::Rc;
use wasm_bindgen::JsValue;
use worker::{durable_object, DurableObject, Env, Headers, Method, Request, Response, State};

/// The binding of the run objects (wrangler.toml `[[durable_objects.bindings]]`).
pub const BINDING: &str = "RUN_OBJECTS";

/// The path of a schedule's due fire the cron tick sends to its run's object (a [`FireCall`]'s JSON); the
/// answer is the fire's [`ScheduleOutcome`]'s JSON.
const FIRE_PATH: &str = "/__fire";

/// The path of the recovery gate's calls ([`crate::core::gate`]) on the gate's object (strict mode with a
/// `recovery.ceiling`): an object of the `RUN_OBJECTS` binding named `gate:<model>`, which no run can be named (run
/// ids take no ':'). It keeps the gate in its memory: an object evicted (idle, or reset by a deploy) forgets the
/// slots held then, which its holders give back anyway, so the provider may see up to twice the ceiling once.
const GATE_PATH: &str = "/__gate";

/// The path of a child run's execution a lead's sub-agent call sends to the child's object (strict mode: a
/// [`ChildExecution`] as [`crate::front::api::child_call_body`] writes it; the answer is streamed as
/// [`crate::front::api::read_child_answer`] reads it).
const CHILD_PATH: &str = "/__child";

/// The path of the store calls ([`ObjectCall`]) on a run object; every other path is an API request the Worker
/// forwarded (strict mode).
const STORE_PATH: &str = "/__store";

/// The Durable Object of one run: answers the store calls of [`ObjectStore`](crate::store::object::ObjectStore)
/// and serves the API requests about its run (forwarded by the Worker), executing the run itself.
#[durable_object(alarm)]
pub struct RunObject {
    core: Rc<RunObjectCore<SqlObjectStorage>>,
    state: Rc<State>,
    env: Env,
    /// The watchers of the run (`GET /runs/{id}/events`), told by every execution in this object.
    hub: Watchers,
    /// The recovery gate, when this object is a gate's ([`GATE_PATH`]).
    gate: std::cell::RefCell<GateState>,
}

impl DurableObject for RunObject {
    fn new(state: State, env: Env) -> Self {
        let core = Rc::new(RunObjectCore::new(SqlObjectStorage::one_run(Sql::new(
            AsRef::<JsValue>::as_ref(state.storage().as_raw()).clone(),
        ))));
        RunObject { core, state: Rc::new(state), env, hub: Watchers::new(), gate: Default::default() }
    }

    async fn alarm(&self) -> worker::Result<Response> {
        super::wake_object(&self.env, self.core.clone(), self.state.clone(), self.hub.clone()).await;
        Response::empty()
    }

    async fn fetch(&self, mut req: Request) -> worker::Result<Response> {
        let path = req.path();
        if path == STORE_PATH {
            let call = req.text().await?;
            return Response::ok(self.core.handle_json(&call));
        }
        if path == GATE_PATH {
            let call = req.text().await?;
            return Response::ok(self.gate.borrow_mut().answer(&call, js_sys::Date::now() as u64));
        }
        if path == CHILD_PATH {
            let call = req.text().await?;
            let (core, state, hub) = (self.core.clone(), self.state.clone(), self.hub.clone());
            return super::child_in_object(req, &call, &self.env, core, state, hub).await;
        }
        if path == FIRE_PATH {
            let call = req.text().await?;
            let (core, state, hub) = (self.core.clone(), self.state.clone(), self.hub.clone());
            return Response::ok(super::fire_in_object(&self.env, &call, core, state, hub).await);
        }
        #[cfg(feature = "conformance")]
        if path == CONFORMANCE_RUNS_PATH {
            return Response::ok(conformance_runs(&self.state).await);
        }
        let head = super::request_head(&req)?;
        match crate::front::api::object_run(&head) {
            Some(run_id) => {
                let (core, state, hub) = (self.core.clone(), self.state.clone(), self.hub.clone());
                super::serve_in_object(req, head, &self.env, run_id, core, state, hub).await
            }
            None => super::to_response(
                crate::front::api::ApiResponse::error(&Error::new(
                    ErrorCode::RouteNotFound,
                    format!("no route {path} on a run object"),
                )),
                super::spawn_local,
            ),
        }
    }
}

/// (Test builds) The path on which an object runs the store conformance suite on runs kept in its own storage.
#[cfg(feature = "conformance")]
const CONFORMANCE_RUNS_PATH: &str = "/__conformance-runs";

/// (Test builds) The store conformance suite on the runs kept in one object, as the npm package's
/// `durableObjectStore` keeps them ([`SqlRuns`](crate::front::durable_sql::SqlRuns) and
/// [`SqlIndex`](crate::front::durable_sql::SqlIndex) over this object's SQL storage), strict fencing asserted; each
/// suite function's runs under their own prefix. A violated rule aborts (the suite asserts).
#[cfg(feature = "conformance")]
async fn conformance_runs(state: &State) -> String {
    use crate::front::durable_sql::{SqlIndex, SqlRuns};
    use crate::runtime::ManualClock;
    use crate::store::conformance::{run_all, Capabilities};
    use crate::store::object::ObjectStore;
    let sql = Sql::new(AsRef::<JsValue>::as_ref(state.storage().as_raw()).clone());
    let n = std::cell::Cell::new(0u32);
    let make = |clock: &ManualClock| {
        n.set(n.get() + 1);
        let prefix = format!("s{}/", n.get());
        let store = || {
            let runs = SqlRuns::new(sql.clone(), prefix.clone());
            ObjectStore::new(
                runs,
                SqlIndex::new(sql.clone()),
                prefix.clone(),
                Rc::new(clock.clone()),
                Rc::new(crate::runtime::ManualSleep::new(clock.clone())),
            )
        };
        (store(), store())
    };
    run_all(&make, &Capabilities { strict_fencing: true }).await;
    format!(
        "store conformance on the runs of one Durable Object (durableObjectStore): ok ({} suites, strict fencing)",
        n.get()
    )
}

/// Sets the object's alarm for `at` (ms since the epoch; `None`: leaves it as it is). A failure is logged:
/// the cron sweep still lists the run.
pub async fn set_alarm(state: &State, at: Option<u64>) {
    let Some(at) = at else { return };
    let offset = (at as i64).saturating_sub(js_sys::Date::now() as i64).max(0);
    if let Err(e) = state.storage().set_alarm(offset).await {
        worker::console_error!("steadfast: setting a run object's alarm failed: {e}");
    }
}

/// [`ObjectClient`] over the `RUN_OBJECTS` binding: one fetch to the stub of `idFromName(run id)`.
pub struct StubClient {
    ns: worker::ObjectNamespace,
    /// Prepended to a run id to name its object (empty in production; the conformance suite's runs get their
    /// own objects).
    prefix: String,
}

impl StubClient {
    /// The client of the binding, or `STEADFAST_CONFIG_INVALID` when it is missing.
    pub fn new(env: &Env) -> Result<StubClient> {
        env.durable_object(BINDING).map(|ns| StubClient { ns, prefix: String::new() }).map_err(|e| {
            Error::new(
                ErrorCode::ConfigInvalid,
                format!(
                    "the Durable Object binding {BINDING} is missing (wrangler.toml [[durable_objects.bindings]]): {e}"
                ),
            )
        })
    }
}

impl StubClient {
    /// Forwards a client's request to the object of the run it is about and answers with the object's response;
    /// when the path does not name the run, the request goes with [`RUN_HEADER`] naming it (replacing any the
    /// client sent).
    pub async fn forward(&self, to: &Forward, req: Request) -> worker::Result<Response> {
        let stub = self.stub(&to.run)?;
        if !to.name_run {
            return stub.fetch_with_request(req).await;
        }
        let headers = Headers::new();
        for (k, v) in req.headers().entries() {
            headers.set(&k, &v)?;
        }
        headers.set(RUN_HEADER, &to.run)?;
        let body = req.inner().body().map(JsValue::from);
        stub.fetch_with_request(new_request(&req.inner().url(), req.method(), Some(&headers), body.as_ref(), false)?)
            .await
    }

    /// Sends `POST <path>` (no body, the client's authorization, [`RUN_HEADER`] naming the run) to the object of
    /// `to.run` and waits for its whole answer ([`Forward::finish_first`]).
    pub async fn finish_first(&self, to: &Forward, path: &str, req: &Request) -> worker::Result<()> {
        let headers = Headers::new();
        if let Some(auth) = req.headers().get("authorization")? {
            headers.set("authorization", &auth)?;
        }
        headers.set(RUN_HEADER, &to.run)?;
        let url = req.inner().url();
        let url = format!("{}{path}", crate::http::split_url(&url).0);
        let req = new_request(&url, Method::Post, Some(&headers), None, false)?;
        let mut resp = self.stub(&to.run)?.fetch_with_request(req).await?;
        // Read to the end: the turn has finished (or failed) once its answer is complete.
        resp.text().await.map(|_| ())
    }

    /// Runs a schedule's due fire in the object of its run (strict mode); the object's answer (the fire's
    /// [`ScheduleOutcome`](crate::runtime::ScheduleOutcome) as JSON), or why it could not be sent (the next tick,
    /// or the sweep, takes the fire up).
    pub async fn fire(&self, schedule_id: &str, due: DueFire) -> std::result::Result<String, String> {
        let run_id = due.run_id.clone();
        let call = FireCall { schedule: schedule_id.to_string(), fire: due };
        async {
            // Ignored: a FireCall (strings, a number) always serialises.
            let body = serde_json::to_string(&call).unwrap_or_default();
            let body = JsValue::from_str(&body);
            let req = new_request(&format!("https://run-object{FIRE_PATH}"), Method::Post, None, Some(&body), false)?;
            self.stub(&run_id)?.fetch_with_request(req).await?.text().await
        }
        .await
        .map_err(|e| format!("schedule '{schedule_id}', run '{run_id}': its object: {e}"))
    }

    /// One call (`POST <path>` with `body`) to the object named `name`, answered with its text; an object that
    /// cannot be reached is `STEADFAST_STORE_UNAVAILABLE` (retryable).
    async fn post(&self, name: &str, path: &str, body: String) -> Result<String> {
        let unavailable = |e: worker::Error| Error::new(ErrorCode::StoreUnavailable, format!("object '{name}': {e}"));
        let stub = self.stub(name).map_err(unavailable)?;
        // One Durable Object request, as it is billed.
        crate::store::meter::record(|u| u.requests += 1);
        let body = JsValue::from_str(&body);
        let url = format!("https://run-object{path}");
        let req = new_request(&url, Method::Post, None, Some(&body), false).map_err(unavailable)?;
        let mut resp = stub.fetch_with_request(req).await.map_err(unavailable)?;
        resp.text().await.map_err(unavailable)
    }

    fn stub(&self, run_id: &str) -> worker::Result<worker::Stub> {
        self.ns.id_from_name(&format!("{}{run_id}", self.prefix))?.get_stub()
    }

    /// (Test builds) Runs the store conformance suite on runs kept inside the object named `name`.
    #[cfg(feature = "conformance")]
    pub async fn conformance_runs(&self, name: &str) -> Result<String> {
        let failed = |e: worker::Error| Error::new(ErrorCode::StoreUnavailable, format!("{name}: {e}"));
        let stub = self.ns.id_from_name(name).and_then(|id| id.get_stub()).map_err(failed)?;
        let req = new_request(&format!("https://run-object{CONFORMANCE_RUNS_PATH}"), Method::Post, None, None, false)
            .map_err(failed)?;
        stub.fetch_with_request(req).await.map_err(failed)?.text().await.map_err(failed)
    }

    /// Objects named `<prefix><run id>`.
    #[cfg(feature = "conformance")]
    pub fn with_prefix(self, prefix: impl Into<String>) -> StubClient {
        StubClient { prefix: prefix.into(), ..self }
    }
}

#[async_trait(?Send)]
impl ObjectClient for StubClient {
    async fn call(&self, run_id: &str, call: String) -> Result<String> {
        self.post(run_id, STORE_PATH, call).await
    }
}

/// Strict mode's child runs, each executed in its own object ([`CHILD_PATH`]): the lead's call waits for the
/// answer, relaying the child's events as they come.
pub struct StubChildHost(StubClient);

impl StubChildHost {
    /// The host over the `RUN_OBJECTS` binding, or `STEADFAST_CONFIG_INVALID` when it is missing.
    pub fn new(env: &Env) -> Result<StubChildHost> {
        StubClient::new(env).map(StubChildHost)
    }
}

#[async_trait(?Send)]
impl ChildHost for StubChildHost {
    async fn execute(
        &self,
        call: &ChildExecution,
        relay: Option<Rc<dyn EventSink>>,
    ) -> Result<Option<crate::core::checkpoint::RunStatus>> {
        let name = &call.run_id;
        let unavailable = |e: worker::Error| Error::new(ErrorCode::StoreUnavailable, format!("object '{name}': {e}"));
        let stub = self.0.stub(name).map_err(unavailable)?;
        // One Durable Object request, as it is billed.
        crate::store::meter::record(|u| u.requests += 1);
        let body = JsValue::from_str(&crate::front::api::child_call_body(call));
        let url = format!("https://run-object{CHILD_PATH}");
        let req = new_request(&url, Method::Post, None, Some(&body), false).map_err(unavailable)?;
        let mut resp = stub.fetch_with_request(req).await.map_err(unavailable)?;
        let chunks = resp.stream().map_err(unavailable)?;
        use futures::StreamExt;
        crate::front::api::read_child_answer(chunks.map(|c| c.map_err(unavailable)), relay).await
    }
}

/// Strict mode's recovery gate ([`GATE_PATH`]): the object `gate:<model>` of the `RUN_OBJECTS` binding.
pub struct StubGate {
    objects: StubClient,
    name: String,
}

impl StubGate {
    /// The gate of the provider's `model`, or `STEADFAST_CONFIG_INVALID` when the binding is missing.
    pub fn new(env: &Env, model: &str) -> Result<StubGate> {
        Ok(StubGate { objects: StubClient::new(env)?, name: format!("gate:{model}") })
    }
}

#[async_trait(?Send)]
impl RecoveryGate for StubGate {
    async fn acquire(&self, run_id: &str, cap: u32) -> Result<Grant> {
        let answer = self.objects.post(&self.name, GATE_PATH, acquire_call(run_id, cap)).await?;
        Grant::parse(&answer)
            .ok_or_else(|| Error::new(ErrorCode::StoreUnavailable, format!("the recovery gate answered {answer}")))
    }
    async fn release(&self, run_id: &str, retry_after_ms: Option<u64>) -> Result<()> {
        self.objects.post(&self.name, GATE_PATH, release_call(run_id, retry_after_ms)).await.map(|_| ())
    }
}
