//! The process's half of strict mode's store: [`ObjectClient`] (how a request reaches a run's object;
//! [`LocalObjects`], [`OwnObject`]) and [`ObjectStore`], the [`RunStore`] that sends per-run operations to the
//! objects and keeps the cross-run index in a [`KvBackend`] (see the parent module).

use super::core::{MemoryObjectStorage, ObjectStorage, RunObjectCore};
use super::{encode, ObjectCall, ObjectReply, ObjectRequest, MAX_LISTED_OBJECTS};
use crate::core::approval::ApprovalRecord;
use crate::core::checkpoint::{Checkpoint, EntryBody, JournalEntry, RunStatus};
use crate::core::error::{Error, ErrorCode, Result};
use crate::core::wire::json_text;
use crate::store::index::{IndexMeta, IndexOp, IndexView};
use crate::store::keys::Keys;
use crate::store::kv::{check_value, KvBackend, Metered, PutOptions, MAX_LIST_LIMIT};
use crate::store::{
    sort_approvals, DueWait, HistoryEntry, Lease, LeaseOptions, PendingPage, PendingRun, QueuedMessage, RunStore,
    StoreCounters,
};
use crate::time::{Clock, Sleep};
use async_trait::async_trait;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::cell::{Cell, RefCell};
use std::collections::{BTreeSet, HashMap};
use std::rc::Rc;

/// Most index entries without a summary (written by an older version) a listing page summarises by asking
/// their objects.
pub(super) const MAX_UNSUMMARISED_LOADS: usize = 50;

/// Age past which the index entry of a run its object says is finished or gone is dropped by a check (see
/// `ObjectStore::summaries`).
pub(super) const STALE_ENTRY_MS: u64 = 60_000;

/// Most recent index entries one full listing ([`RunStore::pending`]) verifies with their objects.
pub(super) const MAX_VERIFIED_ENTRIES: usize = 100;

/// Tries of an index write that must land (a release's repair, a delete's removal).
pub(super) const INDEX_WRITE_TRIES: u32 = 3;

/// Reaches run objects: sends one call (JSON, an [`ObjectCall`]) to the object named by `run_id` and returns
/// its reply (JSON, an [`ObjectReply`]). Transport only: a failure to reach the object is
/// `STEADFAST_STORE_UNAVAILABLE` (retryable).
#[async_trait(?Send)]
pub trait ObjectClient {
    /// One call to the object of `run_id`.
    async fn call(&self, run_id: &str, call: String) -> Result<String>;
}

#[async_trait(?Send)]
impl<C: ObjectClient + ?Sized> ObjectClient for Box<C> {
    async fn call(&self, run_id: &str, call: String) -> Result<String> {
        (**self).call(run_id, call).await
    }
}

/// Objects in this process, one [`RunObjectCore`] over a [`MemoryObjectStorage`] per run, reached through
/// the same JSON calls as the Worker's Durable Objects. Clones share the objects.
#[derive(Clone, Default)]
pub struct LocalObjects {
    objects: Rc<RefCell<HashMap<String, Rc<RunObjectCore<MemoryObjectStorage>>>>>,
}

impl LocalObjects {
    /// The object of a run (created empty on first use).
    pub fn object(&self, run_id: &str) -> Rc<RunObjectCore<MemoryObjectStorage>> {
        self.objects
            .borrow_mut()
            .entry(run_id.to_string())
            .or_insert_with(|| Rc::new(RunObjectCore::new(MemoryObjectStorage::default())))
            .clone()
    }
}

#[async_trait(?Send)]
impl ObjectClient for LocalObjects {
    async fn call(&self, run_id: &str, call: String) -> Result<String> {
        // A request to another object, as a Durable Object bills it.
        crate::store::meter::record(|u| u.requests += 1);
        Ok(self.object(run_id).handle_json(&call))
    }
}

/// The client a run's own object uses while it executes the run: calls about its run go straight to its own
/// [`RunObjectCore`] (no request, same JSON and logic), calls about any other run (a fork's new run, a
/// compared one) go through `others`.
pub struct OwnObject<S: ObjectStorage, C: ObjectClient> {
    run_id: String,
    core: Rc<RunObjectCore<S>>,
    others: C,
}

impl<S: ObjectStorage, C: ObjectClient> OwnObject<S, C> {
    /// The client of the object of `run_id`, whose logic is `core`.
    pub fn new(run_id: impl Into<String>, core: Rc<RunObjectCore<S>>, others: C) -> OwnObject<S, C> {
        OwnObject { run_id: run_id.into(), core, others }
    }
}

#[async_trait(?Send)]
impl<S: ObjectStorage, C: ObjectClient> ObjectClient for OwnObject<S, C> {
    async fn call(&self, run_id: &str, call: String) -> Result<String> {
        if run_id == self.run_id {
            Ok(self.core.handle_json(&call))
        } else {
            self.others.call(run_id, call).await
        }
    }
}

/// The [`RunStore`] over run objects and a KV index. See the module docs.
pub struct ObjectStore<C: ObjectClient, K: KvBackend> {
    client: C,
    /// The index, its operations metered per run.
    index: Metered<K>,
    prefix: String,
    clock: Rc<dyn Clock>,
    sleep: Rc<dyn Sleep>,
    /// Per run this process executes (holds the lease of): what it knows of the run's index entry.
    indexed: RefCell<HashMap<String, IndexView>>,
    /// Approval ids whose index entry this process wrote or read (the value is unused: one map type with
    /// `indexed` keeps one copy of its code in the Worker).
    approvals: RefCell<HashMap<String, u64>>,
    counters: Cell<StoreCounters>,
    /// KV writes of the index (a part of `counters.writes`).
    index_writes: Cell<u64>,
}

impl<C: ObjectClient, K: KvBackend> ObjectStore<C, K> {
    /// A store reaching objects through `client`, with its index in `index` under `prefix`; `sleep` waits out
    /// KV's one write a second per key when an index write must be repaired.
    pub fn new(
        client: C,
        index: K,
        prefix: impl Into<String>,
        clock: Rc<dyn Clock>,
        sleep: Rc<dyn Sleep>,
    ) -> ObjectStore<C, K> {
        ObjectStore {
            client,
            index: Metered(index),
            prefix: prefix.into(),
            clock,
            sleep,
            indexed: RefCell::default(),
            approvals: RefCell::default(),
            counters: Cell::default(),
            index_writes: Cell::new(0),
        }
    }

    /// The client reaching the objects.
    pub fn client(&self) -> &C {
        &self.client
    }

    /// KV writes of the index so far.
    pub fn index_writes(&self) -> u64 {
        self.index_writes.get()
    }

    fn count(&self, f: impl FnOnce(&mut StoreCounters)) {
        let mut c = self.counters.get();
        f(&mut c);
        self.counters.set(c);
    }

    fn run_key(&self, run_id: &str) -> String {
        format!("{}idx/run/{run_id}", self.prefix)
    }

    fn approval_key(&self, id: &str) -> String {
        format!("{}idx/approval/{id}", self.prefix)
    }

    /// One call to a run's object; the answer's value decoded as `T`.
    async fn call<T: DeserializeOwned>(&self, run_id: &str, request: ObjectRequest) -> Result<T> {
        let (json, _) = self.call_counted(run_id, request).await?;
        serde_json::from_str(&json).map_err(|e| {
            Error::new(ErrorCode::StoreUnavailable, format!("run '{run_id}': the run object's answer is not one: {e}"))
        })
    }

    /// One call whose answer has no value (`null`).
    async fn call_unit(&self, run_id: &str, request: ObjectRequest) -> Result<()> {
        self.call_counted(run_id, request).await.map(|_| ())
    }

    /// One call: the answer's value (JSON) and the rows it wrote.
    async fn call_counted(&self, run_id: &str, request: ObjectRequest) -> Result<(String, u64)> {
        let body = encode(&ObjectCall { run_id: run_id.to_string(), request })?;
        let raw = self.client.call(run_id, body).await?;
        let reply =
            ObjectReply::parse(&raw).map_err(|e| Error::new(e.code, format!("run '{run_id}': {}", e.message)))?;
        self.count(|c| {
            c.reads += 1;
            c.writes += reply.rows_written;
        });
        crate::store::meter::record(|u| u.rows_written += reply.rows_written);
        Ok((reply.value?.to_string(), reply.rows_written))
    }

    /// The run's journal as its object answers it (`Load` or `History`).
    async fn entries(&self, run_id: &str, request: ObjectRequest) -> Result<Vec<JournalEntry>> {
        self.call(run_id, request).await
    }

    /// The run's state, folded from its journal (newest snapshot on).
    async fn fold(&self, run_id: &str) -> Result<Option<Checkpoint>> {
        Checkpoint::fold(run_id, self.entries(run_id, ObjectRequest::Load).await?.iter())
    }

    async fn kv_put(&self, key: &str, value: &str, opts: PutOptions) -> Result<()> {
        self.index.put(key, value, opts).await?;
        self.index_writes.set(self.index_writes.get() + 1);
        self.count(|c| {
            c.writes += 1;
            c.bytes_written += value.len() as u64;
        });
        Ok(())
    }

    async fn kv_delete(&self, key: &str) -> Result<()> {
        self.index.delete(key).await?;
        self.index_writes.set(self.index_writes.get() + 1);
        self.count(|c| c.writes += 1);
        Ok(())
    }

    /// Drops a run's index entry its object disowns (finished or gone).
    async fn drop_stale(&self, run_id: &str) {
        // Ignored: a stale entry that stays is dropped again by the next check; it never hides a run.
        let _ = self.kv_delete(&self.run_key(run_id)).await;
    }

    /// Writes (`Put`) or removes (`Delete`) a run's index entry once, and records the outcome in its view.
    /// Never fails: the index is secondary (the objects are the truth), so a write KV refuses (a 429: the key
    /// was written within the second) or loses is remembered as dirty and repaired at the run's next boundary
    /// or at release.
    async fn write_index(&self, run_id: &str, op: IndexOp) {
        let res = self.index_op(run_id, &op).await;
        let now = self.clock.now_ms();
        if let Some(view) = self.indexed.borrow_mut().get_mut(run_id) {
            view.wrote(res.is_ok(), now);
        }
    }

    async fn index_op(&self, run_id: &str, op: &IndexOp) -> Result<()> {
        match op {
            IndexOp::Put(meta) => {
                // Ignored: an IndexMeta (numbers, strings) always serialises. Through its text (the text writer's
                // instance of IndexMeta, not a JSON value writer's).
                let meta =
                    serde_json::to_string(meta).ok().and_then(|t| serde_json::from_str(&t).ok()).unwrap_or_default();
                self.kv_put(&self.run_key(run_id), "", PutOptions { metadata: Some(meta), ..Default::default() }).await
            }
            IndexOp::Delete => self.kv_delete(&self.run_key(run_id)).await,
        }
    }

    /// An index write off the hot path that must land (a release's repair, a delete): retried past KV's one
    /// write a second per key (1 s, then 2 s), at most [`INDEX_WRITE_TRIES`] times.
    async fn index_op_retrying(&self, run_id: &str, op: &IndexOp, written_at: Option<u64>) -> Result<()> {
        if let Some(at) = written_at {
            let wait = (at + 1_000).saturating_sub(self.clock.now_ms());
            if wait > 0 {
                self.sleep.sleep(wait).await;
            }
        }
        let mut tries = 0;
        loop {
            tries += 1;
            match self.index_op(run_id, op).await {
                Err(e) if e.retryable && tries < INDEX_WRITE_TRIES => self.sleep.sleep(1_000 << (tries - 1)).await,
                other => return other,
            }
        }
    }

    /// The listing entry of each of `runs` (run id, and the save time its index entry says) as its object
    /// answers (one request each), `None` for a run that is finished or gone. The index entry of such a run is
    /// dropped once the state it describes is [`STALE_ENTRY_MS`] old: a younger one may be an execution's entry
    /// written just before its first commit, which the object has not seen yet.
    async fn summaries(&self, runs: &[(String, u64)]) -> Result<Vec<Option<PendingRun>>> {
        let mut out = Vec::with_capacity(runs.len());
        for (id, listed_at) in runs {
            let state = self.fold(id).await;
            let s = match &state {
                Ok(Some(cp)) if cp.status != RunStatus::Finished => Some(PendingRun::of(cp)),
                Ok(_) => None,
                // Not reaching the object is this listing's failure; anything else is the run's.
                Err(e) if e.code == ErrorCode::StoreUnavailable => return Err(e.clone()),
                Err(e) => Some(PendingRun::corrupt(id, e)),
            };
            // Stale for sure when the object holds a later state than the one the entry describes.
            let later = matches!(&state, Ok(Some(cp)) if cp.saved_at > *listed_at);
            if s.is_none() && (later || self.clock.now_ms().saturating_sub(*listed_at) >= STALE_ENTRY_MS) {
                self.drop_stale(id).await;
                // KV has no conditional delete: an execution that took the run's lease after the read above may
                // have listed it (before its first commit) before the delete landed. Ask again: a run that is
                // unfinished now is listed again.
                if let Ok(Some(cp)) = self.fold(id).await {
                    if cp.status != RunStatus::Finished {
                        // Ignored: the run's next boundary lists it as well.
                        let _ = self.index_op(id, &IndexOp::Put(IndexMeta::of(&cp))).await;
                    }
                }
            }
            out.push(s);
        }
        Ok(out)
    }

    /// One page of the run index: each run with the summary its entry carries (`None`: an entry without one,
    /// written before entries carried it).
    async fn index_page(
        &self,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<(String, Option<IndexMeta>)>, Option<String>)> {
        let prefix = format!("{}idx/run/", self.prefix);
        let page = self.index.list(&prefix, cursor, limit.clamp(1, MAX_LIST_LIMIT)).await?;
        self.count(|c| c.reads += 1);
        let runs = page
            .keys
            .into_iter()
            .filter_map(|k| {
                let id = k.name.strip_prefix(&prefix)?.to_string();
                // From its text, as in the journal store's listing.
                Some((id, k.metadata.and_then(|m| serde_json::from_str::<IndexMeta>(&json_text(&m)).ok())))
            })
            .collect();
        Ok((runs, page.cursor))
    }

    /// The run an approval belongs to, from the index.
    pub async fn approval_run(&self, id: &str) -> Result<Option<String>> {
        self.count(|c| c.reads += 1);
        self.index.get(&self.approval_key(id)).await
    }
}

#[async_trait(?Send)]
impl<C: ObjectClient, K: KvBackend> RunStore for ObjectStore<C, K> {
    async fn load(&self, run_id: &str) -> Result<Option<Checkpoint>> {
        let res = self.fold(run_id).await;
        if let Err(e) = &res {
            if e.code == ErrorCode::CheckpointCorrupt {
                // Listed as corrupt from now on (the listing reads the index only). Ignored: the read fails with
                // its own error either way, and the next read marks it again.
                let _ = self.index_op(run_id, &IndexOp::Put(IndexMeta::corrupt(e))).await;
            }
        }
        res
    }

    async fn acquire_lease(&self, run_id: &str, owner: &str, now_ms: u64, opts: &LeaseOptions) -> Result<Lease> {
        self.call(run_id, ObjectRequest::Acquire { owner: owner.to_string(), now_ms, opts: *opts }).await
    }

    async fn renew_lease(&self, lease: &Lease, now_ms: u64, opts: &LeaseOptions) -> Result<Lease> {
        self.call(&lease.run_id, ObjectRequest::Renew { lease: lease.clone(), now_ms, opts: *opts }).await
    }

    async fn release_lease(&self, lease: &Lease) -> Result<()> {
        let released = self.call_unit(&lease.run_id, ObjectRequest::Release { lease: lease.clone() }).await;
        // The execution ends here. An unfinished run's entry it could not write is written now (retried past
        // KV's one write a second): the run is listed as it is. A finished run's entry it could not remove yet
        // (written less than a second ago) is left: listings drop it, as the object says the run is finished
        // (see `summaries`); waiting here would delay every run that finishes within a second. The next
        // execution (this process or another) starts from no view and writes the entry at its first boundary.
        let view = self.indexed.borrow_mut().remove(&lease.run_id);
        if let Some(view) = view {
            let recent = view.written_at.is_some_and(|t| self.clock.now_ms().saturating_sub(t) < 1_000);
            match view.repair() {
                Some(op @ IndexOp::Put(_)) => {
                    // Ignored: the index is secondary; an entry left wrong is what a later boundary or the sweep's
                    // check corrects (see the module docs).
                    let _ = self.index_op_retrying(&lease.run_id, &op, view.written_at).await;
                }
                Some(IndexOp::Delete) if !recent => {
                    // Ignored: as above; a finished run's entry left behind is dropped by the listings.
                    let _ = self.index_op(&lease.run_id, &IndexOp::Delete).await;
                }
                _ => {}
            }
        }
        released
    }

    async fn commit(&self, lease: &Lease, entry: &JournalEntry, state: &Checkpoint) -> Result<()> {
        let run_id = &lease.run_id;
        let json = entry.encode().map_err(|e| e.with_run(run_id))?;
        let finished = state.status == RunStatus::Finished;
        let meta = IndexMeta::of(state);
        // Listed before the object holds anything a listing should show (a refused commit leaves an entry for
        // a run that exists; a later check judges it): one KV write per run and execution, not per boundary.
        let first = !self.indexed.borrow().contains_key(run_id);
        if first {
            let mut view = IndexView::default();
            let op = view.plan(finished, meta.clone(), self.clock.now_ms());
            self.indexed.borrow_mut().insert(run_id.clone(), view);
            if let Some(op) = op {
                self.write_index(run_id, op).await;
            }
        }
        let snapshot = matches!(entry.body, EntryBody::Snapshot { .. });
        let bytes = json.len() as u64;
        let request = ObjectRequest::Commit { lease: lease.clone(), seq: entry.seq, snapshot, entry: json };
        let (_, rows) = self.call_counted(run_id, request).await?;
        self.count(|c| {
            c.commits += 1;
            c.commit_writes += rows;
            c.commit_bytes += bytes;
            c.bytes_written += bytes;
        });
        crate::store::meter::record(|u| u.bytes_written += bytes);
        // The entry is written: the commit has succeeded whatever happens to the index (see `write_index`).
        let op = self.indexed.borrow_mut().get_mut(run_id).and_then(|v| v.plan(finished, meta, self.clock.now_ms()));
        if let Some(op) = op {
            self.write_index(run_id, op).await;
        }
        Ok(())
    }

    /// The index entry first, then the run: an execution that takes the run's lease after the object deleted
    /// it lists the run it creates after this removal, so its entry is never the one removed; one that held
    /// the lease before is deleted with the run (its next commit is refused).
    async fn delete(&self, run_id: &str) -> Result<()> {
        let written_at = self.indexed.borrow_mut().remove(run_id).and_then(|v| v.written_at);
        self.index_op_retrying(run_id, &IndexOp::Delete, written_at).await?;
        self.call_unit(run_id, ObjectRequest::Delete).await
    }

    async fn history(&self, run_id: &str, limit: usize) -> Result<Vec<HistoryEntry>> {
        HistoryEntry::newest(run_id, self.entries(run_id, ObjectRequest::History).await?.iter(), limit)
    }

    /// The index's view of every unfinished run: list pages only (one KV operation per 1,000 runs), no
    /// request to any run's object. An entry is as fresh as its run's last boundary that changed its summary;
    /// a run that finished or was deleted while its entry could not be removed stays listed until a check
    /// ([`RunStore::check_pending`], the sweep's) drops it.
    async fn pending(&self) -> Result<Vec<PendingRun>> {
        let mut out = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let page = self.pending_page(cursor.as_deref(), MAX_LIST_LIMIT).await?;
            out.extend(page.runs);
            match page.cursor {
                Some(c) => cursor = Some(c),
                None => break,
            }
        }
        // The entries of the last minute may belong to runs that finished within a second of their entry being
        // written (its removal would have been a second write within the second): their objects say, for at
        // most MAX_VERIFIED_ENTRIES of them.
        let now = self.clock.now_ms();
        let recent: Vec<usize> = (0..out.len())
            .filter(|&i| now.saturating_sub(out[i].saved_at) < STALE_ENTRY_MS)
            .take(MAX_VERIFIED_ENTRIES)
            .collect();
        let listed: Vec<(String, u64)> = recent.iter().map(|&i| (out[i].run_id.clone(), out[i].saved_at)).collect();
        let fresh = self.summaries(&listed).await?;
        let mut gone = vec![false; out.len()];
        for (&i, f) in recent.iter().zip(fresh) {
            match f {
                Some(run) => out[i] = run,
                None => gone[i] = true,
            }
        }
        let mut keep = gone.into_iter().map(|g| !g);
        out.retain(|_| keep.next().unwrap_or(true));
        Ok(out)
    }

    /// One `list` of the index: each run's summary from its entry. An entry without one (written by an older
    /// version) is summarised by its object, at most 50 per page; any further such
    /// entries are listed as in progress with nothing known (the sweep checks a run before acting on it).
    async fn pending_page(&self, cursor: Option<&str>, limit: usize) -> Result<PendingPage> {
        let (listed, cursor) = self.index_page(cursor, limit).await?;
        let mut runs = Vec::with_capacity(listed.len());
        let mut loads = 0;
        for (id, meta) in listed {
            match meta {
                Some(meta) if meta.s == RunStatus::Finished => {}
                Some(meta) => runs.push(meta.pending(&id)),
                None if loads < MAX_UNSUMMARISED_LOADS => {
                    loads += 1;
                    runs.extend(self.summaries(&[(id, 0)]).await?.into_iter().flatten());
                }
                None => runs.push(IndexMeta::unknown().pending(&id)),
            }
        }
        Ok(PendingPage { runs, cursor })
    }

    /// Asks each run's object (one request per run: callers bound `runs`).
    async fn check_pending(&self, runs: &[PendingRun]) -> Result<Vec<bool>> {
        let listed: Vec<(String, u64)> = runs.iter().map(|r| (r.run_id.clone(), r.saved_at)).collect();
        Ok(self.summaries(&listed).await?.into_iter().map(|s| s.is_some()).collect())
    }

    async fn put_approval(&self, record: &ApprovalRecord) -> Result<()> {
        let json = encode(record)?;
        check_value(&json)?;
        let id = &record.id;
        // The index entry first: a record is never unreachable (an entry without a record reads as none).
        if !self.approvals.borrow().contains_key(id) {
            if self.approval_run(id).await?.as_deref() != Some(record.run_id.as_str()) {
                let meta = serde_json::json!({ "run": record.run_id });
                self.kv_put(
                    &self.approval_key(id),
                    &record.run_id,
                    PutOptions { metadata: Some(meta), ..Default::default() },
                )
                .await?;
            }
            self.approvals.borrow_mut().insert(id.clone(), 0);
        }
        self.call_unit(&record.run_id, ObjectRequest::PutApproval { id: id.clone(), record: json }).await
    }

    async fn get_approval(&self, id: &str) -> Result<Option<ApprovalRecord>> {
        match self.approval_run(id).await? {
            None => Ok(None),
            Some(run_id) => self.call(&run_id, ObjectRequest::GetApproval { id: id.to_string() }).await,
        }
    }

    /// One request per run that holds approval records (not per record), at most [`MAX_LISTED_OBJECTS`]
    /// runs: a Worker may make only so many subrequests per invocation. More is refused with
    /// `STEADFAST_STORE_FAILED` (not retryable) before any object is asked.
    async fn list_approvals(&self) -> Result<Vec<ApprovalRecord>> {
        let prefix = format!("{}idx/approval/", self.prefix);
        let mut runs = BTreeSet::new();
        let mut ids = BTreeSet::new();
        let mut cursor: Option<String> = None;
        loop {
            let page = self.index.list(&prefix, cursor.as_deref(), MAX_LIST_LIMIT).await?;
            self.count(|c| c.reads += 1);
            for k in &page.keys {
                let run = k.metadata.as_ref().and_then(|m| m.get("run")).and_then(Value::as_str);
                if let (Some(run), Some(id)) = (run, k.name.strip_prefix(&prefix)) {
                    runs.insert(run.to_string());
                    ids.insert(id.to_string());
                }
            }
            match page.cursor {
                Some(c) => cursor = Some(c),
                None => break,
            }
        }
        if runs.len() > MAX_LISTED_OBJECTS {
            return Err(Error::new(
                ErrorCode::StoreFailed,
                format!(
                    "{} runs hold approval records: more than the {MAX_LISTED_OBJECTS} run objects one listing asks \
                     (a Worker's subrequests are limited); resolve or discard some",
                    runs.len()
                ),
            ));
        }
        let mut out = Vec::new();
        for run in runs {
            let records: Vec<ApprovalRecord> = self.call(&run, ObjectRequest::ListApprovals).await?;
            out.extend(records.into_iter().filter(|r| ids.contains(&r.id)));
        }
        sort_approvals(&mut out);
        Ok(out)
    }

    async fn delete_approval(&self, id: &str) -> Result<()> {
        if let Some(run_id) = self.approval_run(id).await? {
            self.call_unit(&run_id, ObjectRequest::DeleteApproval { id: id.to_string() }).await?;
        }
        self.kv_delete(&self.approval_key(id)).await?;
        self.approvals.borrow_mut().remove(id);
        Ok(())
    }

    /// In the KV index, as the journal store keeps it ([`crate::store::keys::Keys::due`]).
    async fn put_due(&self, due: &DueWait) -> Result<()> {
        self.kv_put(&Keys::new(self.prefix.clone()).due(due), "", PutOptions::default()).await
    }

    async fn list_due(&self, until: u64, limit: usize) -> Result<Vec<DueWait>> {
        let keys = Keys::new(self.prefix.clone());
        let prefix = keys.due_prefix();
        let mut out = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let page = self.index.list(&prefix, cursor.as_deref(), MAX_LIST_LIMIT).await?;
            self.count(|c| c.reads += 1);
            match (keys.take_due(&page.keys, until, limit, &mut out), page.cursor) {
                (false, Some(c)) => cursor = Some(c),
                _ => return Ok(out),
            }
        }
    }

    async fn delete_due(&self, due: &DueWait) -> Result<()> {
        self.kv_delete(&Keys::new(self.prefix.clone()).due(due)).await
    }

    async fn get_state(&self, name: &str) -> Result<Option<String>> {
        self.count(|c| c.reads += 1);
        self.index.get(&format!("{}state/{name}", self.prefix)).await
    }

    async fn put_state(&self, name: &str, value: &str) -> Result<()> {
        check_value(value)?;
        self.kv_put(&format!("{}state/{name}", self.prefix), value, PutOptions::default()).await
    }

    async fn put_queued(&self, msg: &QueuedMessage) -> Result<()> {
        let request = ObjectRequest::PutQueued { key: msg.order_key(), message: encode(msg)? };
        self.call_unit(&msg.run_id, request).await
    }

    async fn list_queued(&self, run_id: &str) -> Result<Vec<QueuedMessage>> {
        self.call(run_id, ObjectRequest::ListQueued).await
    }

    async fn delete_queued(&self, msg: &QueuedMessage) -> Result<()> {
        self.call_unit(&msg.run_id, ObjectRequest::DeleteQueued { key: msg.order_key() }).await
    }

    fn counters(&self) -> StoreCounters {
        self.counters.get()
    }

    fn reads_current(&self) -> bool {
        // Each run's object answers for it alone, in order.
        true
    }
}
