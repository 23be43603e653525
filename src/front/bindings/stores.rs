//! The stores an agent runs on (mirrors `js/src/stores.ts`): in memory, a journal over a Workers
//! `KVNamespace` (`get`, `put`, `delete`, `list`; bulk reads use `get(keys[])`, which resolves to a `Map`: one
//! KV operation for up to 100 keys), or strict mode's store in a Durable Object's SQLite storage.

use super::args::{limit_of, number_arg, text_arg, whole_number};
use super::clock::clock_of;
use super::errors::{decode_known, js_error, promise};
use crate::core::error::{Error, ErrorCode};
use crate::front::durable_sql::{Sql, SqlIndex, SqlRuns};
use crate::front::wasm_shared::{absent, WorkersKv};
use crate::runtime::{DeleteOptions, Runs};
use crate::store::object::ObjectStore;
use crate::store::{JournalOptions, JournalStore, MemoryStore, RunStore};
use js_sys::Promise;
use std::rc::Rc;
use wasm_bindgen::prelude::*;

/// A run store that several [`JsAgent`]s can share: in memory, or a journal over a Workers KV namespace.
#[wasm_bindgen]
pub struct JsStore {
    pub(super) store: Rc<dyn RunStore>,
}

impl JsStore {
    fn runs(&self) -> Runs {
        Runs::new(self.store.clone())
    }
}

#[wasm_bindgen]
impl JsStore {
    /// A new in-memory store (strongly consistent; lives as long as this object) keeping `history_limit` past
    /// states per run (absent: 50).
    pub fn memory(history_limit: JsValue) -> std::result::Result<JsStore, JsValue> {
        let limit = if absent(&history_limit) {
            50
        } else {
            whole_number(number_arg(&history_limit), "memoryStore's historyLimit").map_err(|e| js_error(&e))?
        };
        Ok(JsStore { store: Rc::new(MemoryStore::with_history_limit(limit)) })
    }

    /// The run's checkpoint JSON, or `null` (the documents' `store.checkpoints.load`).
    pub fn load(&self, run_id: JsValue) -> Promise {
        let runs = self.runs();
        promise(async move { runs.load(&text_arg(&run_id, "the run id")?).await })
    }

    /// Past states of a run, newest first (JSON array; `limit` absent: all kept).
    pub fn history(&self, run_id: JsValue, limit: JsValue) -> Promise {
        let runs = self.runs();
        promise(async move { runs.history(&text_arg(&run_id, "the run id")?, limit_of(&limit)?).await })
    }

    /// Every unfinished run (JSON array of PendingRun).
    pub fn pending(&self) -> Promise {
        let runs = self.runs();
        promise(async move { runs.pending().await })
    }

    /// Deletes a run (checkpoint, history, lease); resolves to `null`. `options_json`: [`DeleteOptions`]
    /// (`{keepHistory?}`; an unknown key is refused, and so is `keepHistory: true`).
    pub fn delete(&self, run_id: JsValue, options_json: Option<String>) -> Promise {
        let runs = self.runs();
        promise(async move {
            let run_id = text_arg(&run_id, "the run id")?;
            let opts: DeleteOptions = decode_known(options_json, "checkpoints.delete options")?;
            runs.delete_with(&run_id, opts).await
        })
    }

    /// A journal store over a Workers `KVNamespace` (`get`, `put`, `delete`, `list`; bulk `get(keys[])`).
    /// `options_json` is `JournalOptions` as JSON (`{prefix, historyLimit, settleMs, …}`), optional.
    /// `clock` (optional) is a JS clock `{now, sleep}` the store reads instead of the platform's (lease settle
    /// windows, retry spacing, save times).
    pub fn kv(
        namespace: JsValue,
        options_json: Option<String>,
        clock: Option<JsValue>,
    ) -> std::result::Result<JsStore, JsValue> {
        let opts: JournalOptions = decode_known(options_json, "KV store options").map_err(|e| js_error(&e))?;
        opts.validate().map_err(|e| js_error(&e))?;
        let (clock, sleep) =
            clock_of(&clock.unwrap_or(JsValue::UNDEFINED), "the KV store's clock").map_err(|e| js_error(&e))?;
        let kv = WorkersKv::new(namespace).map_err(|e| js_error(&e))?;
        let store = JournalStore::new(kv, clock, sleep, opts);
        Ok(JsStore { store: Rc::new(store) })
    }

    /// Strict mode's store inside an application's own SQLite-backed Durable Object: the runs' journals, leases
    /// and approvals, and their index, in tables of `storage` (the object's `ctx.storage`), with strict fencing
    /// (a stale owner's commit is refused) and no settle window. `prefix` (optional) keeps several stores apart
    /// in one object. `clock` as for [`JsStore::kv`].
    #[wasm_bindgen(js_name = durableObject)]
    pub fn durable_object(storage: JsValue, prefix: JsValue, clock: JsValue) -> std::result::Result<JsStore, JsValue> {
        let sql = Sql::new(storage);
        sql.check().map_err(|e| js_error(&e))?;
        let prefix = match prefix.as_string() {
            Some(p) => p,
            None if absent(&prefix) => String::new(),
            None => {
                let e = Error::new(ErrorCode::ConfigInvalid, "the Durable Object store's prefix must be a string");
                return Err(js_error(&e));
            }
        };
        let (clock, sleep) = clock_of(&clock, "the store's clock").map_err(|e| js_error(&e))?;
        let runs = SqlRuns::new(sql.clone(), prefix.clone());
        Ok(JsStore { store: Rc::new(ObjectStore::new(runs, SqlIndex::new(sql), prefix, clock, sleep)) })
    }

    /// `"memory"` for a new in-memory store, or a `KVNamespace` for a journal store with default options.
    #[wasm_bindgen(js_name = fromSpec)]
    pub fn from_spec(spec: JsValue) -> std::result::Result<JsStore, JsValue> {
        match spec.as_string().as_deref() {
            Some("memory") => JsStore::memory(JsValue::UNDEFINED),
            Some(other) => Err(js_error(&Error::new(
                ErrorCode::ConfigInvalid,
                format!("store {other:?} is unknown: use \"memory\" or a KV namespace"),
            ))),
            None => JsStore::kv(spec, None, None),
        }
    }
}
