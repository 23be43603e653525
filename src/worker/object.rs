//! Strict mode's Durable Object: `RunObject`, one per run (addressed by `idFromName(run id)` on the
//! `RUN_OBJECTS` binding), SQLite-backed (`new_sqlite_classes` in wrangler.toml). Translation only: a call
//! arrives as JSON ([`crate::store::object::ObjectCall`]) and [`RunObjectCore`] decides; this file maps
//! [`ObjectStorage`] onto the object's SQL storage and [`ObjectClient`] onto a fetch to the stub.
//!
//! Tables: `journal(seq, part, snap, body)` keyed by `(seq, part)` and `meta(k, v)` keyed by `k`, both
//! `WITHOUT ROWID` (the key is the table: one row written per insert, no secondary index).

use crate::api::{Forward, RUN_HEADER};
use crate::core::error::{Error, ErrorCode, Result};
use crate::runtime::Watchers;
use crate::store::object::{JournalRow, ObjectClient, ObjectStorage, RunObjectCore, Write};
use async_trait::async_trait;
use std::cell::Cell;
use std::rc::Rc;
use wasm_bindgen::closure::Closure;
use wasm_bindgen::{JsCast, JsValue};
use worker::{
    durable_object, DurableObject, Env, Headers, Method, Request, RequestInit, Response, SqlStorage, SqlStorageValue,
    State,
};

/// The binding of the run objects (wrangler.toml `[[durable_objects.bindings]]`).
pub const BINDING: &str = "RUN_OBJECTS";

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS journal (seq INTEGER NOT NULL, part INTEGER NOT NULL, \
    snap INTEGER NOT NULL, body TEXT NOT NULL, PRIMARY KEY (seq, part)) WITHOUT ROWID; \
    CREATE TABLE IF NOT EXISTS meta (k TEXT NOT NULL PRIMARY KEY, v TEXT NOT NULL) WITHOUT ROWID";

fn sql_error(e: impl std::fmt::Display) -> Error {
    Error::new(ErrorCode::StoreFailed, format!("the run object's storage failed: {e}"))
}

/// [`ObjectStorage`] over a Durable Object's SQL storage.
pub struct SqlObjectStorage {
    sql: SqlStorage,
    /// The storage object (for `transactionSync`).
    raw: JsValue,
    ready: Cell<bool>,
    written: Rc<Cell<u64>>,
}

fn int(v: &SqlStorageValue) -> Result<u64> {
    match v {
        SqlStorageValue::Integer(i) => Ok(*i as u64),
        SqlStorageValue::Float(f) => Ok(*f as u64),
        SqlStorageValue::Null => Ok(0),
        _ => Err(sql_error("expected a number, got text or bytes")),
    }
}

fn text(v: SqlStorageValue) -> Result<String> {
    match v {
        SqlStorageValue::String(s) => Ok(s),
        _ => Err(sql_error("expected text, got a number, bytes or null")),
    }
}

/// Runs one statement and consumes it; the rows it wrote are added to `written`.
fn run(
    sql: &SqlStorage,
    written: &Cell<u64>,
    query: &str,
    binds: Vec<SqlStorageValue>,
) -> Result<Vec<Vec<SqlStorageValue>>> {
    let cursor = sql.exec(query, binds).map_err(sql_error)?;
    let rows = cursor.raw().collect::<worker::Result<Vec<_>>>().map_err(sql_error)?;
    written.set(written.get() + cursor.rows_written() as u64);
    Ok(rows)
}

fn apply(sql: &SqlStorage, written: &Cell<u64>, w: &Write) -> Result<()> {
    match w {
        Write::Insert(r) => run(
            sql,
            written,
            "INSERT INTO journal (seq, part, snap, body) VALUES (?, ?, ?, ?)",
            vec![(r.seq as i64).into(), (r.part as i64).into(), (r.snap as i64).into(), r.body.as_str().into()],
        ),
        Write::DeleteRowsFrom(from) => {
            run(sql, written, "DELETE FROM journal WHERE seq >= ?", vec![(*from as i64).into()])
        }
        Write::Put(k, v) => run(
            sql,
            written,
            "INSERT INTO meta (k, v) VALUES (?, ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v",
            vec![k.as_str().into(), v.as_str().into()],
        ),
        Write::Remove(k) => run(sql, written, "DELETE FROM meta WHERE k = ?", vec![k.as_str().into()]),
    }
    .map(|_| ())
}

impl SqlObjectStorage {
    /// The storage of the object with this state.
    pub fn new(state: &State) -> SqlObjectStorage {
        let storage = state.storage();
        SqlObjectStorage {
            sql: storage.sql(),
            raw: AsRef::<JsValue>::as_ref(storage.as_raw()).clone(),
            ready: Cell::new(false),
            written: Rc::new(Cell::new(0)),
        }
    }

    fn exec(&self, query: &str, binds: Vec<SqlStorageValue>) -> Result<Vec<Vec<SqlStorageValue>>> {
        if !self.ready.get() {
            run(&self.sql, &self.written, SCHEMA, vec![])?;
            self.ready.set(true);
        }
        run(&self.sql, &self.written, query, binds)
    }

    fn rows(&self, query: &str, binds: Vec<SqlStorageValue>) -> Result<Vec<JournalRow>> {
        self.exec(query, binds)?
            .into_iter()
            .map(|r| {
                let mut it = r.into_iter();
                let mut next = || it.next().ok_or_else(|| sql_error("a journal row has too few columns"));
                Ok(JournalRow {
                    seq: int(&next()?)?,
                    part: int(&next()?)? as u32,
                    snap: int(&next()?)? != 0,
                    body: text(next()?)?,
                })
            })
            .collect()
    }
}

impl ObjectStorage for SqlObjectStorage {
    fn rows_from(&self, from: u64) -> Result<Vec<JournalRow>> {
        self.rows(
            "SELECT seq, part, snap, body FROM journal WHERE seq >= ? ORDER BY seq, part",
            vec![(from as i64).into()],
        )
    }

    fn rows_from_last_snapshot(&self) -> Result<Vec<JournalRow>> {
        self.rows(
            "SELECT seq, part, snap, body FROM journal WHERE seq >= \
             (SELECT COALESCE(MAX(seq), 0) FROM journal WHERE snap = 1) ORDER BY seq, part",
            vec![],
        )
    }

    fn last_seq(&self) -> Result<u64> {
        let rows = self.exec("SELECT COALESCE(MAX(seq), 0) FROM journal", vec![])?;
        rows.first().and_then(|r| r.first()).map(int).unwrap_or(Ok(0))
    }

    fn get(&self, key: &str) -> Result<Option<String>> {
        let rows = self.exec("SELECT v FROM meta WHERE k = ?", vec![key.into()])?;
        rows.into_iter().next().and_then(|r| r.into_iter().next()).map(text).transpose()
    }

    fn list(&self, prefix: &str) -> Result<Vec<(String, String)>> {
        // `k >= prefix AND k < prefix + U+10FFFF`: the keys starting with `prefix`, in key order, on the key.
        let end = format!("{prefix}\u{10FFFF}");
        self.exec("SELECT k, v FROM meta WHERE k >= ? AND k < ? ORDER BY k", vec![prefix.into(), end.into()])?
            .into_iter()
            .map(|r| {
                let mut it = r.into_iter();
                let k = text(it.next().ok_or_else(|| sql_error("a meta row has no key"))?)?;
                let v = text(it.next().ok_or_else(|| sql_error("a meta row has no value"))?)?;
                Ok((k, v))
            })
            .collect()
    }

    fn write(&self, writes: Vec<Write>) -> Result<()> {
        if !self.ready.get() {
            self.exec("SELECT 1", vec![])?;
        }
        if writes.len() <= 1 {
            // One statement is atomic on its own.
            return writes.iter().try_for_each(|w| apply(&self.sql, &self.written, w));
        }
        // Several: `transactionSync` (rolls back when the callback throws; not wrapped by workers-rs).
        let failure: Rc<Cell<Option<Error>>> = Rc::new(Cell::new(None));
        let (sql, written, slot) = (self.sql.clone(), self.written.clone(), failure.clone());
        let body = Closure::once(move || -> std::result::Result<JsValue, JsValue> {
            match writes.iter().try_for_each(|w| apply(&sql, &written, w)) {
                Ok(()) => Ok(JsValue::UNDEFINED),
                Err(e) => {
                    let msg = JsValue::from_str(&e.message);
                    slot.set(Some(e));
                    Err(msg)
                }
            }
        });
        let tx = js_sys::Reflect::get(&self.raw, &"transactionSync".into())
            .ok()
            .and_then(|f| f.dyn_into::<js_sys::Function>().ok())
            .ok_or_else(|| sql_error("transactionSync is missing (the object is not SQLite-backed)"))?;
        match tx.call1(&self.raw, body.as_ref().unchecked_ref()) {
            Ok(_) => Ok(()),
            Err(e) => Err(failure.take().unwrap_or_else(|| sql_error(crate::wasm_shared::js_message(&e)))),
        }
    }

    fn rows_written(&self) -> u64 {
        self.written.get()
    }
}

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
}

impl DurableObject for RunObject {
    fn new(state: State, env: Env) -> Self {
        let core = Rc::new(RunObjectCore::new(SqlObjectStorage::new(&state)));
        RunObject { core, state: Rc::new(state), env, hub: Watchers::new() }
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
        let head = super::request_head(&req)?;
        match crate::api::object_run(&head) {
            Some(run_id) => {
                let (core, state, hub) = (self.core.clone(), self.state.clone(), self.hub.clone());
                super::serve_in_object(req, head, &self.env, run_id, core, state, hub).await
            }
            None => super::to_response(
                crate::api::ApiResponse::error(&Error::new(
                    ErrorCode::RouteNotFound,
                    format!("no route {path} on a run object"),
                )),
                super::spawn_local,
            ),
        }
    }
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
        let mut init = RequestInit::new();
        init.with_method(req.method()).with_headers(headers).with_body(req.inner().body().map(JsValue::from));
        stub.fetch_with_request(Request::new_with_init(req.url()?.as_str(), &init)?).await
    }

    fn stub(&self, run_id: &str) -> worker::Result<worker::Stub> {
        self.ns.id_from_name(&format!("{}{run_id}", self.prefix))?.get_stub()
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
        let unavailable =
            |e: worker::Error| Error::new(ErrorCode::StoreUnavailable, format!("run '{run_id}': the run object: {e}"));
        let stub = self.stub(run_id).map_err(unavailable)?;
        let mut init = RequestInit::new();
        init.with_method(Method::Post).with_body(Some(JsValue::from_str(&call)));
        let req = Request::new_with_init(&format!("https://run-object{STORE_PATH}"), &init).map_err(unavailable)?;
        let mut resp = stub.fetch_with_request(req).await.map_err(unavailable)?;
        resp.text().await.map_err(unavailable)
    }
}
