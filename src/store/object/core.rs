//! The object's half of strict mode's store: [`ObjectStorage`] (one object's rows; [`MemoryObjectStorage`] in
//! memory) and [`RunObjectCore`], which handles each [`ObjectRequest`] synchronously (see the parent module).

use super::{corrupt, encode, split_parts, ObjectCall, ObjectRequest, MAX_META_BYTES, MAX_ROW_BYTES};
use crate::core::approval::ApprovalRecord;
use crate::core::checkpoint::{EntryBody, JournalEntry};
use crate::core::error::{Error, ErrorCode, Result};
use crate::store::kv::check_value;
use crate::store::{Lease, LeaseOptions, QueuedMessage};
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;

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

/// [`ObjectStorage`] in memory (tests, and objects hosted in one process:
/// [`LocalObjects`](super::LocalObjects)). Counts one row written per inserted, updated or deleted row.
#[derive(Clone, Default)]
pub struct MemoryObjectStorage {
    inner: Rc<RefCell<MemoryRows>>,
    written: Rc<Cell<u64>>,
}

#[derive(Clone, Default)]
pub(super) struct MemoryRows {
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

pub(super) fn to_rows(rows: &BTreeMap<(u64, u32), (bool, String)>, from: u64) -> Vec<JournalRow> {
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

pub(super) const LEASE: &str = "lease";
pub(super) const NULL: &str = "null";
pub(super) const APPROVAL: &str = "approval/";
pub(super) const QUEUE: &str = "queue/";

/// The error of a value over a limit, naming what was written.
pub(super) fn too_large(what: &str, bytes: usize, limit: usize) -> Error {
    Error::new(ErrorCode::StoreFailed, format!("{what} cannot be stored: {bytes} bytes (the limit is {limit} bytes)"))
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

    /// Handles one call given as JSON and answers with an [`ObjectReply`](super::ObjectReply)'s text. A call that
    /// cannot be decoded is answered with `STEADFAST_INVALID_INPUT`.
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
            ObjectRequest::PutQueued { key, message } => {
                check_value(&message)?;
                if message.len() > MAX_META_BYTES {
                    return Err(too_large(&format!("queued message '{key}'"), message.len(), MAX_META_BYTES));
                }
                self.storage.write(vec![Write::Put(format!("{QUEUE}{key}"), message)])?;
                Ok(NULL.into())
            }
            // Rows list in key order, which is queue order.
            ObjectRequest::ListQueued => {
                let rows = self.storage.list(QUEUE)?;
                let out: Vec<QueuedMessage> = rows.iter().filter_map(|(_, s)| serde_json::from_str(s).ok()).collect();
                encode(&out)
            }
            ObjectRequest::DeleteQueued { key } => {
                self.storage.write(vec![Write::Remove(format!("{QUEUE}{key}"))])?;
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
        crate::store::check_next_seq(run_id, seq, self.storage.last_seq()?)?;
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
