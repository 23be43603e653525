//! A SQLite-backed Durable Object's storage (`ctx.storage`) as strict mode's stores, for both wasm shells
//! (compiled with the cargo feature `worker` or `js`). Translation only: [`RunObjectCore`] decides, as in
//! every run object; this file maps its [`ObjectStorage`] onto SQL statements.
//!
//! * [`SqlObjectStorage`]: one run's journal and `meta` rows. The Worker's `RunObject` holds one run per
//!   object ([`SqlObjectStorage::one_run`]); the npm package's `durableObjectStore(ctx)` holds the runs of an
//!   application's own object, each under its run id ([`SqlRuns`]).
//! * [`SqlRuns`]: the [`ObjectClient`] reaching the runs kept in this object (a call is handled at once,
//!   synchronously: the object is single-threaded, so a lease check and the write it guards are atomic, as in
//!   a run object of the Worker's; a stale owner's commit is refused).
//! * [`SqlIndex`]: the cross-run index of [`ObjectStore`](crate::store::object::ObjectStore) as a
//!   [`KvBackend`] over a table of the same object (strongly consistent, unlike Workers KV).
//!
//! # In your own Durable Object (workers-rs, feature `durable-object`)
//! One object can keep the runs of a conversation, a user or a tenant: build the agent over
//! [`ObjectStore`](crate::store::object::ObjectStore)`::new(SqlRuns::new(sql.clone(), ""), SqlIndex::new(sql),
//! "", Rc::new(JsClock))` with `let sql = Sql::new(state.storage().as_raw().into())`, and [`JsClock`] /
//! [`JsSleep`] as the agent's clock and timer; recover interrupted runs from the object's `alarm` with
//! [`Agent::sweep`](crate::Agent::sweep). The object serves one request at a time between awaits, and each
//! store call is handled without one, so a lease check and the write it guards are atomic; a stale owner's
//! commit is refused with `STEADFAST_SESSION_BUSY`. The store conformance suite runs on exactly these types
//! inside a real object (the Worker's test build, `POST /__conformance`).
//!
//! Tables, all `WITHOUT ROWID` (the key is the table: one row written per insert, no secondary index):
//! * one run per object (the Worker): `journal(seq, part, snap, body)` keyed by `(seq, part)`, `meta(k, v)`;
//! * the runs of one object (npm): `steadfast_journal(run, seq, part, snap, body)` keyed by
//!   `(run, seq, part)`, `steadfast_meta(run, k, v)` keyed by `(run, k)`, and `steadfast_index(k, v, meta)`.

use crate::core::error::{Error, ErrorCode, Result};
use crate::core::wire::json_text;
use crate::front::wasm_shared::{js_message, method, prop};
pub use crate::front::wasm_shared::{JsClock, JsSleep};
use crate::store::kv::{check_bulk, check_bulk_bytes, check_key, check_put, KvBackend, ListKey, ListPage, PutOptions};
use crate::store::object::{JournalRow, ObjectClient, ObjectStorage, RunObjectCore, Write};
use async_trait::async_trait;
use js_sys::{Array, Function};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use wasm_bindgen::closure::Closure;
use wasm_bindgen::{JsCast, JsValue};

fn sql_error(e: impl std::fmt::Display) -> Error {
    Error::new(ErrorCode::StoreFailed, format!("the Durable Object's SQL storage failed: {e}"))
}

/// A value bound to a `?` of a statement.
#[derive(Clone, Copy)]
enum Bind<'a> {
    Int(u64),
    Text(&'a str),
}

impl Bind<'_> {
    fn js(&self) -> JsValue {
        match self {
            // Seqs, parts and limits stay far below 2^53.
            Bind::Int(i) => JsValue::from_f64(*i as f64),
            Bind::Text(s) => JsValue::from_str(s),
        }
    }
}

fn int(v: &JsValue) -> Result<u64> {
    match v.as_f64() {
        Some(f) if f >= 0.0 => Ok(f as u64),
        _ if v.is_null() => Ok(0),
        _ => Err(sql_error("expected a number, got text, bytes or a negative number")),
    }
}

fn text(v: &JsValue) -> Result<String> {
    v.as_string().ok_or_else(|| sql_error("expected text, got a number, bytes or null"))
}

/// A Durable Object's storage object: statements through `storage.sql.exec`, transactions through
/// `storage.transactionSync`. Clones share the count of rows written.
#[derive(Clone)]
pub struct Sql {
    storage: JsValue,
    /// `storage.sql` and its `exec`, looked up on first use.
    exec: Rc<RefCell<Option<(JsValue, Function)>>>,
    written: Rc<Cell<u64>>,
}

impl Sql {
    /// The SQL storage of `storage` (a Durable Object's `ctx.storage`). Its functions are looked up when first
    /// used; [`Sql::check`] looks now.
    pub fn new(storage: JsValue) -> Sql {
        Sql { storage, exec: Rc::default(), written: Rc::default() }
    }

    /// `STEADFAST_CONFIG_INVALID` unless the storage has `sql.exec` and `transactionSync` (a SQLite-backed
    /// object: `new_sqlite_classes` in its migration).
    pub fn check(&self) -> Result<()> {
        let sqlite = |e: Error| {
            Error::new(ErrorCode::ConfigInvalid, format!("{} (is the Durable Object SQLite-backed?)", e.message))
        };
        self.exec().map_err(sqlite)?;
        method(&self.storage, "transactionSync", "the Durable Object's storage").map_err(sqlite)?;
        Ok(())
    }

    /// `storage.sql` and its `exec` function.
    fn exec(&self) -> Result<(JsValue, Function)> {
        if let Some(found) = self.exec.borrow().as_ref() {
            return Ok(found.clone());
        }
        let sql = prop(&self.storage, "sql");
        let exec = method(&sql, "exec", "the Durable Object's storage.sql")?;
        *self.exec.borrow_mut() = Some((sql.clone(), exec.clone()));
        Ok((sql, exec))
    }

    /// Runs one statement; its rows, each an array of column values. The rows it wrote are counted.
    fn run(&self, query: &str, binds: &[Bind]) -> Result<Vec<Array>> {
        let (sql, exec) = self.exec().map_err(sql_error)?;
        let args = Array::new_with_length(binds.len() as u32 + 1);
        args.set(0, JsValue::from_str(query));
        for (i, b) in binds.iter().enumerate() {
            args.set(i as u32 + 1, b.js());
        }
        let cursor = exec.apply(&sql, &args).map_err(|e| sql_error(js_message(&e)))?;
        let raw = method(&cursor, "raw", "a SQL cursor")
            .map_err(sql_error)?
            .call0(&cursor)
            .map_err(|e| sql_error(js_message(&e)))?;
        // `Array.from` consumes the iterator; the cursor's `rowsWritten` is final after that.
        let rows: Vec<Array> = Array::from(&raw).iter().map(|r| r.unchecked_into::<Array>()).collect();
        let wrote = prop(&cursor, "rowsWritten").as_f64().unwrap_or(0.0) as u64;
        self.written.set(self.written.get() + wrote);
        Ok(rows)
    }

    /// Runs `body` in one storage transaction (`transactionSync`: rolled back when it fails).
    fn transaction(&self, body: impl FnOnce() -> Result<()> + 'static) -> Result<()> {
        let failure: Rc<Cell<Option<Error>>> = Rc::new(Cell::new(None));
        let slot = failure.clone();
        let body = Closure::once(move || -> std::result::Result<JsValue, JsValue> {
            body().map(|()| JsValue::UNDEFINED).map_err(|e| {
                let msg = JsValue::from_str(&e.message);
                slot.set(Some(e));
                msg
            })
        });
        let tx = method(&self.storage, "transactionSync", "the Durable Object's storage").map_err(sql_error)?;
        match tx.call1(&self.storage, body.as_ref().unchecked_ref()) {
            Ok(_) => Ok(()),
            Err(e) => Err(failure.take().unwrap_or_else(|| sql_error(js_message(&e)))),
        }
    }

    /// Rows written so far by the statements of this storage object (and its clones).
    pub fn rows_written(&self) -> u64 {
        self.written.get()
    }
}

/// The statements of one table layout (one run per object, or runs under a `run` column).
struct Queries {
    schema: String,
    rows_from: String,
    rows_from_last_snapshot: String,
    last_seq: String,
    get: String,
    list: String,
    insert: String,
    delete_from: String,
    put: String,
    remove: String,
}

impl Queries {
    fn new(scoped: bool) -> Queries {
        let (j, m) = if scoped { ("steadfast_journal", "steadfast_meta") } else { ("journal", "meta") };
        // `r`: the run condition before another one; `rc`/`rv`: the run column and its value in an insert.
        let (r, rc, rv, rcol) =
            if scoped { ("run = ? AND ", "run, ", "?, ", "run TEXT NOT NULL, ") } else { ("", "", "", "") };
        let only = if scoped { " WHERE run = ?" } else { "" };
        Queries {
            schema: format!(
                "CREATE TABLE IF NOT EXISTS {j} ({rcol}seq INTEGER NOT NULL, part INTEGER NOT NULL, \
                 snap INTEGER NOT NULL, body TEXT NOT NULL, PRIMARY KEY ({rc}seq, part)) WITHOUT ROWID; \
                 CREATE TABLE IF NOT EXISTS {m} ({rcol}k TEXT NOT NULL, v TEXT NOT NULL, PRIMARY KEY ({rc}k)) \
                 WITHOUT ROWID"
            ),
            rows_from: format!("SELECT seq, part, snap, body FROM {j} WHERE {r}seq >= ? ORDER BY seq, part"),
            rows_from_last_snapshot: format!(
                "SELECT seq, part, snap, body FROM {j} WHERE {r}seq >= \
                 (SELECT COALESCE(MAX(seq), 0) FROM {j} WHERE {r}snap = 1) ORDER BY seq, part"
            ),
            last_seq: format!("SELECT COALESCE(MAX(seq), 0) FROM {j}{only}"),
            get: format!("SELECT v FROM {m} WHERE {r}k = ?"),
            // `k >= prefix AND k < prefix + U+10FFFF`: the keys starting with `prefix`, in key order, on the key.
            list: format!("SELECT k, v FROM {m} WHERE {r}k >= ? AND k < ? ORDER BY k"),
            insert: format!("INSERT INTO {j} ({rc}seq, part, snap, body) VALUES ({rv}?, ?, ?, ?)"),
            delete_from: format!("DELETE FROM {j} WHERE {r}seq >= ?"),
            put: format!(
                "INSERT INTO {m} ({rc}k, v) VALUES ({rv}?, ?) ON CONFLICT ({rc}k) DO UPDATE SET v = excluded.v"
            ),
            remove: format!("DELETE FROM {m} WHERE {r}k = ?"),
        }
    }
}

/// The tables of one layout in one object: its statements, and whether they exist yet (made on first use).
struct Tables {
    sql: Sql,
    q: Queries,
    ready: Cell<bool>,
}

impl Tables {
    fn run(&self, query: &str, binds: &[Bind]) -> Result<Vec<Array>> {
        if !self.ready.get() {
            self.sql.run(&self.q.schema, &[])?;
            self.ready.set(true);
        }
        self.sql.run(query, binds)
    }
}

/// [`ObjectStorage`] over a Durable Object's SQL storage: one run's rows.
pub struct SqlObjectStorage {
    tables: Rc<Tables>,
    /// The run's key in the `run` column (`None`: the object holds one run, in tables without that column).
    run: Option<String>,
}

impl SqlObjectStorage {
    /// The storage of an object that holds one run (the Worker's `RunObject`).
    pub fn one_run(sql: Sql) -> SqlObjectStorage {
        SqlObjectStorage { tables: Rc::new(Tables { sql, q: Queries::new(false), ready: Cell::new(false) }), run: None }
    }

    /// `rest` after the run's key (when the tables have a `run` column).
    fn binds<'a>(&'a self, rest: &[Bind<'a>]) -> Vec<Bind<'a>> {
        let mut out = Vec::with_capacity(rest.len() + 1);
        if let Some(run) = &self.run {
            out.push(Bind::Text(run));
        }
        out.extend_from_slice(rest);
        out
    }

    fn rows(&self, query: &str, binds: &[Bind]) -> Result<Vec<JournalRow>> {
        self.tables
            .run(query, binds)?
            .into_iter()
            .map(|r| {
                Ok(JournalRow {
                    seq: int(&r.get(0))?,
                    part: int(&r.get(1))? as u32,
                    snap: int(&r.get(2))? != 0,
                    body: text(&r.get(3))?,
                })
            })
            .collect()
    }

    fn apply(&self, w: &Write) -> Result<()> {
        let q = &self.tables.q;
        match w {
            Write::Insert(r) => self.tables.run(
                &q.insert,
                &self.binds(&[
                    Bind::Int(r.seq),
                    Bind::Int(u64::from(r.part)),
                    Bind::Int(u64::from(r.snap)),
                    Bind::Text(&r.body),
                ]),
            ),
            Write::DeleteRowsFrom(from) => self.tables.run(&q.delete_from, &self.binds(&[Bind::Int(*from)])),
            Write::Put(k, v) => self.tables.run(&q.put, &self.binds(&[Bind::Text(k), Bind::Text(v)])),
            Write::Remove(k) => self.tables.run(&q.remove, &self.binds(&[Bind::Text(k)])),
        }
        .map(|_| ())
    }
}

impl ObjectStorage for SqlObjectStorage {
    fn rows_from(&self, from: u64) -> Result<Vec<JournalRow>> {
        self.rows(&self.tables.q.rows_from, &self.binds(&[Bind::Int(from)]))
    }

    fn rows_from_last_snapshot(&self) -> Result<Vec<JournalRow>> {
        // The run's key twice: the outer and the inner condition.
        let binds = match &self.run {
            Some(run) => vec![Bind::Text(run), Bind::Text(run)],
            None => Vec::new(),
        };
        self.rows(&self.tables.q.rows_from_last_snapshot, &binds)
    }

    fn last_seq(&self) -> Result<u64> {
        let rows = self.tables.run(&self.tables.q.last_seq, &self.binds(&[]))?;
        rows.first().map(|r| int(&r.get(0))).unwrap_or(Ok(0))
    }

    fn get(&self, key: &str) -> Result<Option<String>> {
        let rows = self.tables.run(&self.tables.q.get, &self.binds(&[Bind::Text(key)]))?;
        rows.first().map(|r| text(&r.get(0))).transpose()
    }

    fn list(&self, prefix: &str) -> Result<Vec<(String, String)>> {
        let end = format!("{prefix}\u{10FFFF}");
        self.tables
            .run(&self.tables.q.list, &self.binds(&[Bind::Text(prefix), Bind::Text(&end)]))?
            .into_iter()
            .map(|r| Ok((text(&r.get(0))?, text(&r.get(1))?)))
            .collect()
    }

    fn write(&self, writes: Vec<Write>) -> Result<()> {
        if !self.tables.ready.get() {
            // The tables first, outside the transaction.
            self.tables.run("SELECT 1", &[])?;
        }
        if writes.len() <= 1 {
            // One statement is atomic on its own.
            return writes.iter().try_for_each(|w| self.apply(w));
        }
        let me = SqlObjectStorage { tables: self.tables.clone(), run: self.run.clone() };
        self.tables.sql.transaction(move || writes.iter().try_for_each(|w| me.apply(w)))
    }

    fn rows_written(&self) -> u64 {
        self.tables.sql.rows_written()
    }
}

/// The runs kept in one Durable Object (the npm package's `durableObjectStore`), each a [`RunObjectCore`]
/// over its rows, reached through the same JSON calls as the Worker's run objects. A run's key is
/// `<prefix><run id>` (several stores can share one object under different prefixes).
pub struct SqlRuns {
    tables: Rc<Tables>,
    prefix: String,
    objects: RefCell<HashMap<String, Rc<RunObjectCore<SqlObjectStorage>>>>,
}

impl SqlRuns {
    /// The runs kept in `sql`'s object under `prefix`.
    pub fn new(sql: Sql, prefix: impl Into<String>) -> SqlRuns {
        let tables = Rc::new(Tables { sql, q: Queries::new(true), ready: Cell::new(false) });
        SqlRuns { tables, prefix: prefix.into(), objects: RefCell::default() }
    }

    fn object(&self, run_id: &str) -> Rc<RunObjectCore<SqlObjectStorage>> {
        self.objects
            .borrow_mut()
            .entry(run_id.to_string())
            .or_insert_with(|| {
                let run = Some(format!("{}{run_id}", self.prefix));
                Rc::new(RunObjectCore::new(SqlObjectStorage { tables: self.tables.clone(), run }))
            })
            .clone()
    }
}

#[async_trait(?Send)]
impl ObjectClient for SqlRuns {
    async fn call(&self, run_id: &str, call: String) -> Result<String> {
        Ok(self.object(run_id).handle_json(&call))
    }
}

const INDEX_SCHEMA: &str =
    "CREATE TABLE IF NOT EXISTS steadfast_index (k TEXT NOT NULL PRIMARY KEY, v TEXT NOT NULL, meta TEXT) WITHOUT ROWID";

/// The index of the runs kept in one Durable Object: a [`KvBackend`] over the table `steadfast_index`
/// (strongly consistent; KV's key and value limits kept; no expiry: a put with a TTL is refused).
pub struct SqlIndex {
    sql: Sql,
    ready: Cell<bool>,
}

impl SqlIndex {
    /// The index in `sql`'s object.
    pub fn new(sql: Sql) -> SqlIndex {
        SqlIndex { sql, ready: Cell::new(false) }
    }

    fn run(&self, query: &str, binds: &[Bind]) -> Result<Vec<Array>> {
        if !self.ready.get() {
            self.sql.run(INDEX_SCHEMA, &[])?;
            self.ready.set(true);
        }
        self.sql.run(query, binds)
    }
}

#[async_trait(?Send)]
impl KvBackend for SqlIndex {
    async fn get(&self, key: &str) -> Result<Option<String>> {
        check_key(key)?;
        let rows = self.run("SELECT v FROM steadfast_index WHERE k = ?", &[Bind::Text(key)])?;
        rows.first().map(|r| text(&r.get(0))).transpose()
    }

    async fn get_many(&self, keys: &[String]) -> Result<Vec<Option<String>>> {
        check_bulk(keys)?;
        let mut out = Vec::with_capacity(keys.len());
        for k in keys {
            out.push(self.get(k).await?);
        }
        // KV's bulk-read limit, kept like its other limits.
        check_bulk_bytes(&out)?;
        Ok(out)
    }

    async fn put(&self, key: &str, value: &str, opts: PutOptions) -> Result<()> {
        check_put(key, value, &opts)?;
        if opts.expiration_ttl_s.is_some() {
            return Err(Error::new(ErrorCode::StoreFailed, "the Durable Object index keeps no expiring keys"));
        }
        let meta = opts.metadata.as_ref().map(json_text);
        let meta = meta.as_deref().map_or(Bind::Text(""), Bind::Text);
        self.run(
            "INSERT INTO steadfast_index (k, v, meta) VALUES (?, ?, ?) \
             ON CONFLICT (k) DO UPDATE SET v = excluded.v, meta = excluded.meta",
            &[Bind::Text(key), Bind::Text(value), meta],
        )
        .map(|_| ())
    }

    async fn delete(&self, key: &str) -> Result<()> {
        check_key(key)?;
        self.run("DELETE FROM steadfast_index WHERE k = ?", &[Bind::Text(key)]).map(|_| ())
    }

    async fn list(&self, prefix: &str, cursor: Option<&str>, limit: usize) -> Result<ListPage> {
        let limit = limit.clamp(1, 1_000);
        let end = format!("{prefix}\u{10FFFF}");
        // The cursor is the last key of the previous page.
        let rows = self.run(
            "SELECT k, meta FROM steadfast_index WHERE k >= ? AND k < ? AND k > ? ORDER BY k LIMIT ?",
            &[Bind::Text(prefix), Bind::Text(&end), Bind::Text(cursor.unwrap_or("")), Bind::Int(limit as u64 + 1)],
        )?;
        let mut keys = Vec::with_capacity(rows.len().min(limit));
        for r in rows.iter().take(limit) {
            let meta = r.get(1).as_string().filter(|m| !m.is_empty());
            // Ignored: unreadable metadata reads as none, which the store lists as a corrupt index entry.
            let metadata = meta.and_then(|m| serde_json::from_str(&m).ok());
            keys.push(ListKey { name: text(&r.get(0))?, metadata });
        }
        let cursor = if rows.len() > limit { keys.last().map(|k| k.name.clone()) } else { None };
        Ok(ListPage { keys, cursor })
    }
}
