//! Strict mode's store: each run owned by its own object (a SQLite-backed Cloudflare Durable Object in
//! production), with **strict fencing**.
//!
//! # Layers
//! * [`ObjectStorage`]: one object's storage, row level (a journal table and a small key/value table),
//!   synchronous and transactional. The Worker implements it over the Durable Object's SQL storage
//!   (`src/front/worker/object.rs`, translation only); [`MemoryObjectStorage`] keeps the same rows in memory.
//! * [`RunObjectCore`]: what one run's object does with a request ([`ObjectRequest`]): fold the journal,
//!   take, renew and release the lease, commit an entry (fenced), keep the run's approval records. Every
//!   request is handled synchronously, with no `await` inside, so the object (single-threaded) handles one at
//!   a time: the lease check and the write it guards are atomic, and a request that writes several rows runs
//!   them in one storage transaction ([`ObjectStorage::write`]).
//! * [`ObjectStore`]: the [`RunStore`] a process uses. It sends each per-run operation to the run's object
//!   through an [`ObjectClient`] (the Worker: a fetch to the Durable Object stub addressed by `idFromName(run
//!   id)`; [`LocalObjects`]: objects in this process) and keeps the **cross-run index** in a [`KvBackend`]
//!   (Workers KV in the Worker).
//!
//! # Contract on Durable Objects
//! * **Strict fencing.** A commit is refused with `STEADFAST_SESSION_BUSY` unless the object's lease names
//!   the committer (owner and epoch), checked in the same synchronous step as the write: a stale owner's
//!   commit is refused, not ignored. Acquisition is atomic too, so [`RunStore::confirm_lease`] is the default
//!   no-op (no settle window).
//! * **One row per boundary.** A commit writes one journal row (`journal(seq, part, snap, body)`, `WITHOUT
//!   ROWID`, keyed by `(seq, part)`: no secondary index). An entry over [`MAX_ROW_BYTES`] (the object's row
//!   limit is 2 MB) is split over several rows of one transaction, whatever its size (eight 4 MiB tool results
//!   of one turn, a fork's first snapshot of a large run). A load folds from the newest snapshot entry (the
//!   machine writes one every so often), so its cost stays bounded. The object keeps its whole journal
//!   (history of any depth).
//! * **Approvals** live in their run's object (`meta` rows `approval/<id>`). A deleted run keeps them (the
//!   contract's orphans).
//! * **The index** (in the [`KvBackend`]): `<prefix>idx/run/<run id>` while a run is unfinished, its list
//!   metadata the run's listing summary (`IndexMeta`: status, step, attempts, last error,
//!   approvals, quarantine, diagnosis marker, save time), and `<prefix>idx/approval/<approval id>` (list
//!   metadata `{"run": <run id>}`) for every approval record, plus the runtime's state documents
//!   `<prefix>state/<name>`. The objects are the truth; the index says which objects exist and what they
//!   held when their entry was written.
//!   * **Writes.** An execution writes its run's entry *before* its first commit (so a crash leaves the run
//!     listed; one KV write per execution), again when a boundary changes the summary (at most once a second:
//!     KV's limit per key), and removes it after the commit that finishes the run. The index is secondary: a
//!     write KV refuses (a 429) or loses never fails a commit; it is repaired at a later boundary or at release
//!     (an unfinished run's entry then waits out the second; a finished run's entry written less than a second
//!     ago is left for the listings to drop). A delete removes the entry before the run, so a run created
//!     under the id afterwards keeps the entry it writes.
//!   * **Listings.** A sweep's page ([`RunStore::pending_page`]) is one `list` at any backlog: no run's object
//!     is asked. The sweep checks ([`RunStore::check_pending`], one request per run) only the runs it acts on,
//!     and verifies a few of those its listing says to leave alone (a listing can be stale). A full listing
//!     ([`RunStore::pending`]) also asks the objects of the entries written in the last minute (at most 100),
//!     which may describe runs that finished within a second of their entry. A check drops an entry whose
//!     object holds a later state, or says finished or gone a minute after the entry was written (a younger
//!     entry may be an execution's, written just before its first commit). A run whose read fails as corrupt is
//!     listed as corrupt from then on. The approvals listing asks one object per run that holds approval
//!     records, at most [`MAX_LISTED_OBJECTS`] (a Worker's subrequests are limited).

use super::index::{IndexMeta, IndexOp, IndexView};
use super::kv::{check_value, KvBackend, PutOptions, MAX_LIST_LIMIT};
use super::{sort_approvals, HistoryEntry, Lease, LeaseOptions, PendingPage, PendingRun, RunStore, StoreCounters};
use crate::core::approval::ApprovalRecord;
use crate::core::checkpoint::{Checkpoint, EntryBody, JournalEntry, RunStatus};
use crate::core::error::{Error, ErrorCode, Result};
use crate::time::{Clock, Sleep};
use async_trait::async_trait;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::rc::Rc;

/// Most bytes of an entry kept in one journal row (a Durable Object's SQLite row holds at most 2 MB).
pub const MAX_ROW_BYTES: usize = 1_000_000;

/// Most bytes of a `meta` value (a lease, an approval record): one row.
pub const MAX_META_BYTES: usize = 2_000_000;

/// Most run objects one approvals listing asks (one request each; a Worker's subrequests per invocation are
/// limited: 1,000 on older plans).
pub const MAX_LISTED_OBJECTS: usize = 500;

/// Most index entries without a summary (written by an older version) a listing page summarises by asking
/// their objects.
const MAX_UNSUMMARISED_LOADS: usize = 50;

/// Age past which the index entry of a run its object says is finished or gone is dropped by a check (see
/// `ObjectStore::summaries`).
const STALE_ENTRY_MS: u64 = 60_000;

/// Most recent index entries one full listing ([`RunStore::pending`]) verifies with their objects.
const MAX_VERIFIED_ENTRIES: usize = 100;

/// Tries of an index write that must land (a release's repair, a delete's removal).
const INDEX_WRITE_TRIES: u32 = 3;

/// One journal row: a whole entry, or one part of an entry over [`MAX_ROW_BYTES`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JournalRow {
    /// The entry's seq.
    pub seq: u64,
    /// Part number within the entry (0 for the first or only one).
    pub part: u32,
    /// Whether the entry is a snapshot.
    pub snap: bool,
    /// The entry's JSON (or this part of it).
    pub body: String,
}

/// One write of [`ObjectStorage::write`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Write {
    /// Inserts a journal row (refused when its `(seq, part)` exists).
    Insert(JournalRow),
    /// Deletes every journal row with `seq >= from`.
    DeleteRowsFrom(u64),
    /// Writes a `meta` value.
    Put(String, String),
    /// Deletes a `meta` value.
    Remove(String),
}

/// One object's storage: a journal table and a key/value table, strongly consistent and private to the
/// object. Synchronous (a Durable Object's SQL API is), so the object handles one request at a time.
pub trait ObjectStorage {
    /// Every journal row with `seq >= from`, ordered by seq then part.
    fn rows_from(&self, from: u64) -> Result<Vec<JournalRow>>;
    /// The rows from the newest snapshot entry on (all rows when there is none), ordered by seq then part.
    fn rows_from_last_snapshot(&self) -> Result<Vec<JournalRow>>;
    /// The highest seq in the journal (0 when empty).
    fn last_seq(&self) -> Result<u64>;
    /// A `meta` value.
    fn get(&self, key: &str) -> Result<Option<String>>;
    /// Every `meta` value whose key starts with `prefix`, in key order.
    fn list(&self, prefix: &str) -> Result<Vec<(String, String)>>;
    /// Applies `writes` in order as one transaction: all of them, or none when one fails.
    fn write(&self, writes: Vec<Write>) -> Result<()>;
    /// Rows written so far (as the storage bills them).
    fn rows_written(&self) -> u64;
}

/// [`ObjectStorage`] in memory (tests, and objects hosted in one process: [`LocalObjects`]). Counts one row
/// written per inserted, updated or deleted row.
#[derive(Clone, Default)]
pub struct MemoryObjectStorage {
    inner: Rc<RefCell<MemoryRows>>,
    written: Rc<Cell<u64>>,
}

#[derive(Clone, Default)]
struct MemoryRows {
    journal: BTreeMap<(u64, u32), (bool, String)>,
    meta: BTreeMap<String, String>,
}

impl MemoryObjectStorage {
    /// Test helper: replaces the newest journal row's body with bytes that cannot be decoded.
    pub fn corrupt_last_row(&self) {
        if let Some((_, row)) = self.inner.borrow_mut().journal.iter_mut().next_back() {
            row.1 = "{not json".into();
        }
    }
}

fn to_rows(rows: &BTreeMap<(u64, u32), (bool, String)>, from: u64) -> Vec<JournalRow> {
    rows.range((from, 0)..)
        .map(|(&(seq, part), (snap, body))| JournalRow { seq, part, snap: *snap, body: body.clone() })
        .collect()
}

impl ObjectStorage for MemoryObjectStorage {
    fn rows_from(&self, from: u64) -> Result<Vec<JournalRow>> {
        Ok(to_rows(&self.inner.borrow().journal, from))
    }

    fn rows_from_last_snapshot(&self) -> Result<Vec<JournalRow>> {
        let inner = self.inner.borrow();
        let from = inner.journal.iter().rev().find(|(_, (snap, _))| *snap).map(|((seq, _), _)| *seq).unwrap_or(0);
        Ok(to_rows(&inner.journal, from))
    }

    fn last_seq(&self) -> Result<u64> {
        Ok(self.inner.borrow().journal.keys().next_back().map(|k| k.0).unwrap_or(0))
    }

    fn get(&self, key: &str) -> Result<Option<String>> {
        Ok(self.inner.borrow().meta.get(key).cloned())
    }

    fn list(&self, prefix: &str) -> Result<Vec<(String, String)>> {
        let inner = self.inner.borrow();
        Ok(inner
            .meta
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect())
    }

    fn write(&self, writes: Vec<Write>) -> Result<()> {
        // Applied to a copy, kept only when every write succeeded.
        let mut next = self.inner.borrow().clone();
        let mut rows = 0;
        for w in writes {
            match w {
                Write::Insert(r) => {
                    if next.journal.contains_key(&(r.seq, r.part)) {
                        return Err(Error::new(
                            ErrorCode::StoreFailed,
                            format!("journal row {}.{} exists", r.seq, r.part),
                        ));
                    }
                    next.journal.insert((r.seq, r.part), (r.snap, r.body));
                    rows += 1;
                }
                Write::DeleteRowsFrom(from) => rows += next.journal.split_off(&(from, 0)).len() as u64,
                Write::Put(k, v) => {
                    next.meta.insert(k, v);
                    rows += 1;
                }
                Write::Remove(k) => rows += u64::from(next.meta.remove(&k).is_some()),
            }
        }
        *self.inner.borrow_mut() = next;
        self.written.set(self.written.get() + rows);
        Ok(())
    }

    fn rows_written(&self) -> u64 {
        self.written.get()
    }
}

/// A request to one run's object (the wire format between [`ObjectStore`] and the object: JSON).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", rename_all_fields = "camelCase")]
pub enum ObjectRequest {
    /// The journal from its newest snapshot on, checked (whole entries, in order, each at its seq): an array
    /// of entries, for the caller to fold.
    Load,
    /// Take the lease: `Lease`.
    Acquire {
        /// The acquirer.
        owner: String,
        /// The acquirer's clock.
        now_ms: u64,
        /// Lease timing.
        opts: LeaseOptions,
    },
    /// Extend the lease: `Lease`.
    Renew {
        /// The held lease.
        lease: Lease,
        /// The holder's clock.
        now_ms: u64,
        /// Lease timing.
        opts: LeaseOptions,
    },
    /// End the lease: `()`.
    Release {
        /// The held lease.
        lease: Lease,
    },
    /// Append one entry (its JSON) as the lease holder: `()`.
    Commit {
        /// The committer's lease (the fencing token).
        lease: Lease,
        /// The entry's seq.
        seq: u64,
        /// Whether the entry is a snapshot.
        snapshot: bool,
        /// The entry's JSON.
        entry: String,
    },
    /// Delete the journal and the lease (approval records stay): `()`.
    Delete,
    /// The whole journal, checked as for `Load`: an array of entries (the caller folds the past states).
    History,
    /// Write an approval record (its JSON): `()`.
    PutApproval {
        /// Approval id.
        id: String,
        /// The record's JSON.
        record: String,
    },
    /// Read an approval record: `Option<ApprovalRecord>`.
    GetApproval {
        /// Approval id.
        id: String,
    },
    /// Every readable approval record of the run: `Vec<ApprovalRecord>`.
    ListApprovals,
    /// Delete an approval record: `()`.
    DeleteApproval {
        /// Approval id.
        id: String,
    },
}

/// One call: the run (the object's name) and the request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectCall {
    /// Run id.
    pub run_id: String,
    /// What to do.
    pub request: ObjectRequest,
}

/// The object's answer, as text: `<rows written> ok <value JSON>` or `<rows written> err <error JSON>` (the
/// request's value as [`ObjectRequest`] names it, or its error, and the storage rows the request wrote). Plain
/// text around the JSON, so a caller decodes only the value it expects (no wrapper type per value).
#[derive(Clone, Debug, PartialEq)]
pub struct ObjectReply<'a> {
    /// The value's JSON, or the error.
    pub value: std::result::Result<&'a str, Error>,
    /// Storage rows the request wrote.
    pub rows_written: u64,
}

impl ObjectReply<'_> {
    /// Reads an answer; one that is not an answer is `STEADFAST_STORE_UNAVAILABLE` (what came back was not the
    /// object speaking).
    pub fn parse(raw: &str) -> Result<ObjectReply<'_>> {
        let bad = |why: &str| Error::new(ErrorCode::StoreUnavailable, format!("the run object's answer {why}"));
        let (rows, rest) = raw.split_once(' ').ok_or_else(|| bad("is not one"))?;
        let rows_written = rows.parse().map_err(|_| bad("has no row count"))?;
        let value = match rest.split_once(' ') {
            Some(("ok", json)) => Ok(json),
            Some(("err", json)) => Err(serde_json::from_str(json).map_err(|e| bad(&format!("has no error: {e}")))?),
            _ => return Err(bad("is neither a value nor an error")),
        };
        Ok(ObjectReply { value, rows_written })
    }
}

const LEASE: &str = "lease";
const NULL: &str = "null";
const APPROVAL: &str = "approval/";

fn corrupt(run_id: &str, what: &str, e: impl std::fmt::Display) -> Error {
    Error::new(ErrorCode::CheckpointCorrupt, format!("run '{run_id}': {what} cannot be read: {e}")).with_run(run_id)
}

fn encode<T: Serialize>(v: &T) -> Result<String> {
    serde_json::to_string(v).map_err(|e| Error::internal(format!("cannot encode: {e}")))
}

/// The error of a value over a limit, naming what was written.
fn too_large(what: &str, bytes: usize, limit: usize) -> Error {
    Error::new(ErrorCode::StoreFailed, format!("{what} cannot be stored: {bytes} bytes (the limit is {limit} bytes)"))
}

/// Splits `s` into parts of at most `max` bytes, at character boundaries.
pub(crate) fn split_parts(s: &str, max: usize) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = s;
    while rest.len() > max {
        let mut cut = max;
        while !rest.is_char_boundary(cut) {
            cut -= 1;
        }
        out.push(&rest[..cut]);
        rest = &rest[cut..];
    }
    out.push(rest);
    out
}

/// What one run's object does: the store logic over its [`ObjectStorage`]. See the module docs.
pub struct RunObjectCore<S: ObjectStorage> {
    storage: S,
}

impl<S: ObjectStorage> RunObjectCore<S> {
    /// The object over its storage.
    pub fn new(storage: S) -> RunObjectCore<S> {
        RunObjectCore { storage }
    }

    /// The object's storage.
    pub fn storage(&self) -> &S {
        &self.storage
    }

    /// The run this object holds (what the object's alarm recovers), as its lease names it: `None` before
    /// the run first executed, and after it was deleted.
    pub fn run_id(&self) -> Result<Option<String>> {
        Ok(self.lease("")?.map(|l| l.run_id))
    }

    /// Handles one call given as JSON and answers with an [`ObjectReply`]'s text. A call that cannot be decoded
    /// is answered with `STEADFAST_INVALID_INPUT`.
    pub fn handle_json(&self, call: &str) -> String {
        let before = self.storage.rows_written();
        let result = serde_json::from_str::<ObjectCall>(call)
            .map_err(|e| Error::invalid_input(format!("not a run object call: {e}")))
            .and_then(|c| self.handle(&c.run_id, c.request));
        let rows_written = self.storage.rows_written().saturating_sub(before);
        match result {
            Ok(v) => format!("{rows_written} ok {v}"),
            // Ignored (`unwrap_or_default`): an error (strings, a code, numbers) always serialises.
            Err(e) => format!("{rows_written} err {}", serde_json::to_string(&e).unwrap_or_default()),
        }
    }

    /// Handles one request for `run_id`; the value is the JSON of the request's answer.
    pub fn handle(&self, run_id: &str, request: ObjectRequest) -> Result<String> {
        match request {
            ObjectRequest::Load => self.entries_json(run_id, self.storage.rows_from_last_snapshot()?, true),
            ObjectRequest::Acquire { owner, now_ms, opts } => encode(&self.acquire(run_id, &owner, now_ms, &opts)?),
            ObjectRequest::Renew { lease, now_ms, opts } => {
                self.check_lease(run_id, &lease)?;
                let renewed = Lease { expires_at: now_ms.saturating_add(opts.ttl_ms), ..lease };
                self.storage.write(vec![Write::Put(LEASE.into(), encode(&renewed)?)])?;
                encode(&renewed)
            }
            ObjectRequest::Release { lease } => {
                if self.check_lease(run_id, &lease).is_ok() {
                    self.storage.write(vec![Write::Put(LEASE.into(), encode(&Lease { expires_at: 0, ..lease })?)])?;
                }
                Ok(NULL.into())
            }
            ObjectRequest::Commit { lease, seq, snapshot, entry } => {
                self.commit(run_id, &lease, seq, snapshot, &entry)?;
                Ok(NULL.into())
            }
            ObjectRequest::Delete => {
                self.storage.write(vec![Write::DeleteRowsFrom(0), Write::Remove(LEASE.into())])?;
                Ok(NULL.into())
            }
            ObjectRequest::History => self.entries_json(run_id, self.storage.rows_from(0)?, false),
            ObjectRequest::PutApproval { id, record } => {
                check_value(&record)?;
                if record.len() > MAX_META_BYTES {
                    return Err(too_large(&format!("approval '{id}'"), record.len(), MAX_META_BYTES));
                }
                self.storage.write(vec![Write::Put(format!("{APPROVAL}{id}"), record)])?;
                Ok(NULL.into())
            }
            ObjectRequest::GetApproval { id } => match self.storage.get(&format!("{APPROVAL}{id}"))? {
                None => Ok(NULL.into()),
                Some(s) => serde_json::from_str::<ApprovalRecord>(&s).map(|_| s).map_err(|e| {
                    Error::new(ErrorCode::CheckpointCorrupt, format!("approval '{id}' cannot be read: {e}"))
                }),
            },
            ObjectRequest::ListApprovals => {
                let mut out = Vec::new();
                for (_, s) in self.storage.list(APPROVAL)? {
                    // Ignored (no else): see `RunStore::list_approvals` on unreadable records.
                    if let Ok(r) = serde_json::from_str::<ApprovalRecord>(&s) {
                        out.push(r);
                    }
                }
                encode(&out)
            }
            ObjectRequest::DeleteApproval { id } => {
                self.storage.write(vec![Write::Remove(format!("{APPROVAL}{id}"))])?;
                Ok(NULL.into())
            }
        }
    }

    fn lease(&self, run_id: &str) -> Result<Option<Lease>> {
        match self.storage.get(LEASE)? {
            None => Ok(None),
            Some(s) => serde_json::from_str(&s).map(Some).map_err(|e| corrupt(run_id, "the lease", e)),
        }
    }

    fn check_lease(&self, run_id: &str, lease: &Lease) -> Result<()> {
        match self.lease(run_id)? {
            Some(cur) if cur.owner == lease.owner && cur.epoch == lease.epoch => Ok(()),
            Some(_) => Err(Error::busy(run_id, "another owner took over the lease")),
            None => Err(Error::busy(run_id, "the run's lease is gone (deleted)")),
        }
    }

    fn acquire(&self, run_id: &str, owner: &str, now_ms: u64, opts: &LeaseOptions) -> Result<Lease> {
        let epoch = match self.lease(run_id)? {
            Some(cur) if cur.owner != owner && now_ms < cur.expires_at.saturating_add(opts.grace_ms) => {
                return Err(Error::busy(run_id, "another process holds its lease"));
            }
            // A stored epoch at u64's edge is damage, not a count of takeovers.
            Some(cur) => {
                cur.epoch.checked_add(1).ok_or_else(|| corrupt(run_id, "the lease", "its epoch is out of range"))?
            }
            None => 1,
        };
        let lease = Lease {
            run_id: run_id.to_string(),
            owner: owner.to_string(),
            epoch,
            expires_at: now_ms.saturating_add(opts.ttl_ms),
        };
        self.storage.write(vec![Write::Put(LEASE.into(), encode(&lease)?)])?;
        Ok(lease)
    }

    /// The fenced append: the lease check and the write in one synchronous step.
    fn commit(&self, run_id: &str, lease: &Lease, seq: u64, snapshot: bool, entry: &str) -> Result<()> {
        self.check_lease(run_id, lease)?;
        // Entry 1 creates the run only if its object holds no journal; every other entry continues it. The
        // check and the write are one synchronous step: no other request runs between them.
        super::check_next_seq(run_id, seq, self.storage.last_seq()?)?;
        // The hot path is one insert of one row; an entry over a row is one transaction.
        let rows = split_parts(entry, MAX_ROW_BYTES)
            .into_iter()
            .enumerate()
            .map(|(i, body)| Write::Insert(JournalRow { seq, part: i as u32, snap: snapshot, body: body.to_string() }));
        self.storage.write(rows.collect())
    }

    /// Checks rows as entries (whole, each at its seq; from a snapshot or seq 1 when `from_snapshot`) and
    /// answers them as a JSON array of the entries as stored.
    fn entries_json(&self, run_id: &str, rows: Vec<JournalRow>, from_snapshot: bool) -> Result<String> {
        let mut out = String::from("[");
        let mut cur: Option<(u64, String)> = None;
        let mut first = true;
        let mut flush = |cur: Option<(u64, String)>, out: &mut String| -> Result<()> {
            if let Some((seq, body)) = cur {
                let e: JournalEntry =
                    serde_json::from_str(&body).map_err(|e| corrupt(run_id, &format!("journal entry {seq}"), e))?;
                if e.seq != seq {
                    return Err(corrupt(run_id, &format!("journal entry {seq}"), format!("it says seq {}", e.seq)));
                }
                if first && from_snapshot && !matches!(e.body, EntryBody::Snapshot { .. }) && seq != 1 {
                    // The newest snapshot's rows are gone while later ones exist (or the journal does not start
                    // at 1).
                    return Err(corrupt(run_id, "the journal", "it does not start with a snapshot"));
                }
                if !first {
                    out.push(',');
                }
                first = false;
                out.push_str(&body);
            }
            Ok(())
        };
        for r in rows {
            match &mut cur {
                Some((seq, body)) if *seq == r.seq => body.push_str(&r.body),
                _ => {
                    if r.part != 0 {
                        return Err(corrupt(run_id, &format!("journal entry {}", r.seq), "its first part is missing"));
                    }
                    flush(cur.take(), &mut out)?;
                    cur = Some((r.seq, r.body));
                }
            }
        }
        flush(cur, &mut out)?;
        out.push(']');
        Ok(out)
    }
}

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
    index: K,
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
            index,
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
                // Ignored: an IndexMeta (numbers, strings) always serialises.
                let meta = serde_json::to_value(meta).unwrap_or_default();
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
                Some((id, k.metadata.and_then(|m| serde_json::from_value::<IndexMeta>(m).ok())))
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

    async fn get_state(&self, name: &str) -> Result<Option<String>> {
        self.count(|c| c.reads += 1);
        self.index.get(&format!("{}state/{name}", self.prefix)).await
    }

    async fn put_state(&self, name: &str, value: &str) -> Result<()> {
        check_value(value)?;
        self.kv_put(&format!("{}state/{name}", self.prefix), value, PutOptions::default()).await
    }

    fn counters(&self) -> StoreCounters {
        self.counters.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::conformance;
    use crate::store::MemoryKv;
    use crate::time::ManualClock;

    fn store(objects: &LocalObjects, kv: &MemoryKv, clock: &ManualClock) -> ObjectStore<LocalObjects, MemoryKv> {
        ObjectStore::new(
            objects.clone(),
            kv.clone(),
            "",
            Rc::new(clock.clone()),
            Rc::new(crate::time::ManualSleep::new(clock.clone())),
        )
    }

    #[test]
    fn object_store_conforms_with_strict_fencing() {
        futures::executor::block_on(async {
            let caps = conformance::Capabilities { strict_fencing: true };
            conformance::run_all(
                &|clock| {
                    let (objects, kv) = (LocalObjects::default(), MemoryKv::new());
                    (store(&objects, &kv, clock), store(&objects, &kv, clock))
                },
                &caps,
            )
            .await;
        });
    }

    /// Entries and journals of any size are recorded and read (split over rows); approval records and state
    /// documents over KV's value limit are refused.
    #[test]
    fn object_store_records_entries_of_any_size_and_refuses_oversized_records() {
        futures::executor::block_on(async {
            let (objects, kv) = (LocalObjects::default(), MemoryKv::new());
            let clock = ManualClock::new(1_700_000_000_000);
            let (a, b) = (store(&objects, &kv, &clock), store(&objects, &kv, &clock));
            conformance::large_entry_commits_and_loads_back(&a, &b, &clock).await;
            conformance::journal_over_a_bulk_read_loads_and_continues(&a, &b, &clock).await;
            conformance::records_over_the_value_limit_are_refused_and_write_nothing(&a).await;
        });
    }

    #[test]
    fn a_call_that_cannot_be_decoded_is_refused_as_invalid_input_and_writes_nothing() {
        let core = RunObjectCore::new(MemoryObjectStorage::default());
        for bad in ["", "{", "{\"runId\":\"r\"}", "{\"runId\":\"r\",\"request\":{\"explode\":{}}}"] {
            let raw = core.handle_json(bad);
            let reply = ObjectReply::parse(&raw).unwrap();
            assert_eq!(reply.value.map_err(|e| e.code), Err(ErrorCode::InvalidInput), "{bad}");
            assert_eq!(reply.rows_written, 0);
        }
    }

    #[test]
    fn an_unreadable_journal_row_loads_as_corrupt_and_stays_listed() {
        futures::executor::block_on(async {
            let clock = ManualClock::new(1_000);
            let objects = LocalObjects::default();
            let s = store(&objects, &MemoryKv::new(), &clock);
            let lease = conformance::acquired(&s, "c", "o", clock.now_ms(), &LeaseOptions::default(), "lease").await;
            let (e1, cp1) = conformance::snapshot_entry("c", "x", clock.now_ms());
            s.commit(&lease, &e1, &cp1).await.unwrap();
            objects.object("c").storage().corrupt_last_row();
            assert_eq!(s.load("c").await.unwrap_err().code, ErrorCode::CheckpointCorrupt);
            let pending = s.pending().await.unwrap();
            assert_eq!(pending.len(), 1);
            assert_eq!(pending[0].last_error.as_ref().map(|e| e.code), Some(ErrorCode::CheckpointCorrupt));
        });
    }

    #[test]
    fn parts_split_at_character_boundaries_and_join_back() {
        for (s, max) in [("", 3), ("abc", 3), ("abcd", 3), ("ééé", 3), ("a€b€c", 4), ("€€€€", 3)] {
            let parts = split_parts(s, max);
            assert!(parts.iter().all(|p| p.len() <= max), "{s} {max}: {parts:?}");
            assert_eq!(parts.concat(), s);
        }
    }
}
