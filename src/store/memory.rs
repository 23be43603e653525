//! `MemoryStore`: an in-process [`RunStore`] with atomic leases and strict fencing.
//!
//! Entries are kept as JSON strings, so every commit and load goes through the same (de)serialisation as a
//! real backend. Clones share the same data: two `Agent`s over clones of one `MemoryStore` behave like two
//! processes over one database.
//!
//! Journal entries of any size are kept (the store contract's "Limits": what ran is recordable). It refuses what
//! every backend refuses, so a program that works on it works on KV: an approval record or a state document over
//! KV's value limit ([`MAX_VALUE_BYTES`], 25 MiB) fails with `STEADFAST_STORE_FAILED` (not retryable) and
//! writes nothing.

use super::kv::{check_value, MAX_VALUE_BYTES};
use super::{sort_approvals, DueWait, HistoryEntry, Lease, LeaseOptions, PendingPage, PendingRun, RunStore};
use crate::core::approval::ApprovalRecord;
use crate::core::checkpoint::{Checkpoint, EntryBody, JournalEntry, RunStatus};
use crate::core::error::{Error, ErrorCode, Result};
use async_trait::async_trait;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

#[derive(Default)]
struct RunData {
    /// Journal entries (JSON), oldest first; the first one is a snapshot once compacted.
    journal: Vec<String>,
}

#[derive(Default)]
struct Inner {
    runs: BTreeMap<String, RunData>,
    leases: BTreeMap<String, Lease>,
    approvals: BTreeMap<String, String>,
    /// The due index, earliest first.
    due: BTreeSet<DueWait>,
    state: BTreeMap<String, String>,
    commits: u64,
}

/// In-memory store. Cheap to clone; clones share state.
#[derive(Clone)]
pub struct MemoryStore {
    inner: Rc<RefCell<Inner>>,
    history_limit: usize,
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore::new()
    }
}

fn corrupt(run_id: &str, what: &str, e: impl std::fmt::Display) -> Error {
    Error::new(ErrorCode::CheckpointCorrupt, format!("run '{run_id}': {what} cannot be read: {e}")).with_run(run_id)
}

/// The error of a write over KV's value limit, naming what was written.
fn too_large(e: &Error, what: &str) -> Error {
    Error::new(
        e.code,
        format!("{what} cannot be stored: {} (the limit of Workers KV, {MAX_VALUE_BYTES} bytes)", e.message),
    )
}

impl MemoryStore {
    /// A new empty store keeping 50 history entries per run.
    pub fn new() -> MemoryStore {
        MemoryStore::with_history_limit(50)
    }

    /// A new empty store keeping `limit` history entries per run (0 keeps none beyond the current state).
    pub fn with_history_limit(limit: usize) -> MemoryStore {
        MemoryStore { inner: Rc::new(RefCell::new(Inner::default())), history_limit: limit }
    }

    /// Number of successful commits so far (all runs).
    pub fn commit_count(&self) -> u64 {
        self.inner.borrow().commits
    }

    /// Test helper: replaces the run's newest journal entry with bytes that cannot be decoded.
    pub fn corrupt_last_entry(&self, run_id: &str) {
        if let Some(last) = self.inner.borrow_mut().runs.get_mut(run_id).and_then(|r| r.journal.last_mut()) {
            *last = "{not json".into();
        }
    }

    /// The current lease record of a run, if any.
    pub fn lease(&self, run_id: &str) -> Option<Lease> {
        self.inner.borrow().leases.get(run_id).cloned()
    }

    fn entries(run_id: &str, journal: &[String]) -> Result<Vec<JournalEntry>> {
        journal
            .iter()
            .map(|s| serde_json::from_str::<JournalEntry>(s).map_err(|e| corrupt(run_id, "a journal entry", e)))
            .collect()
    }

    fn fold_all(run_id: &str, journal: &[String]) -> Result<Option<Checkpoint>> {
        let entries = Self::entries(run_id, journal)?;
        Checkpoint::fold(run_id, entries.iter())
    }

    fn check_lease(inner: &Inner, lease: &Lease) -> Result<()> {
        match inner.leases.get(&lease.run_id) {
            Some(cur) if cur.owner == lease.owner && cur.epoch == lease.epoch => Ok(()),
            Some(_) => Err(Error::busy(&lease.run_id, "another owner took over the lease")),
            None => Err(Error::busy(&lease.run_id, "the run's lease is gone (deleted)")),
        }
    }
}

#[async_trait(?Send)]
impl RunStore for MemoryStore {
    async fn load(&self, run_id: &str) -> Result<Option<Checkpoint>> {
        let inner = self.inner.borrow();
        match inner.runs.get(run_id) {
            None => Ok(None),
            Some(r) => Self::fold_all(run_id, &r.journal),
        }
    }

    async fn acquire_lease(&self, run_id: &str, owner: &str, now_ms: u64, opts: &LeaseOptions) -> Result<Lease> {
        let mut inner = self.inner.borrow_mut();
        let epoch = match inner.leases.get(run_id) {
            Some(cur) if cur.owner != owner && now_ms < cur.expires_at.saturating_add(opts.grace_ms) => {
                return Err(Error::busy(run_id, "another process holds its lease"));
            }
            Some(cur) => cur.epoch + 1,
            None => 1,
        };
        let lease =
            Lease { run_id: run_id.to_string(), owner: owner.to_string(), epoch, expires_at: now_ms + opts.ttl_ms };
        inner.leases.insert(run_id.to_string(), lease.clone());
        Ok(lease)
    }

    async fn renew_lease(&self, lease: &Lease, now_ms: u64, opts: &LeaseOptions) -> Result<Lease> {
        let mut inner = self.inner.borrow_mut();
        Self::check_lease(&inner, lease)?;
        let renewed = Lease { expires_at: now_ms + opts.ttl_ms, ..lease.clone() };
        inner.leases.insert(lease.run_id.clone(), renewed.clone());
        Ok(renewed)
    }

    async fn release_lease(&self, lease: &Lease) -> Result<()> {
        let mut inner = self.inner.borrow_mut();
        if Self::check_lease(&inner, lease).is_ok() {
            inner.leases.insert(lease.run_id.clone(), Lease { expires_at: 0, ..lease.clone() });
        }
        Ok(())
    }

    async fn commit(&self, lease: &Lease, entry: &JournalEntry, _state: &Checkpoint) -> Result<()> {
        let mut inner = self.inner.borrow_mut();
        Self::check_lease(&inner, lease)?;
        let run_id = &lease.run_id;
        let json = entry.encode().map_err(|e| e.with_run(run_id))?;
        let limit = self.history_limit;
        let run = inner.runs.entry(run_id.clone()).or_default();
        // Every entry continues the journal; entry 1 creates the run only if it has none (checked with the
        // write: nothing between them).
        let last_seq = match run.journal.last() {
            Some(s) => serde_json::from_str::<JournalEntry>(s)
                .map(|e| e.seq)
                .map_err(|e| corrupt(run_id, "the last entry", e))?,
            None => 0,
        };
        super::check_next_seq(run_id, entry.seq, last_seq)?;
        run.journal.push(json);
        // Compact: keep `limit` past states foldable, behind one snapshot.
        let keep = limit + 1;
        if run.journal.len() > keep * 2 + 2 {
            let cut = run.journal.len() - keep;
            let entries = Self::entries(run_id, &run.journal[..=cut])?;
            if let Some(mut at_cut) = Checkpoint::fold(run_id, entries.iter())? {
                at_cut.seq = entries.last().map(|e| e.seq).unwrap_or(at_cut.seq);
                let snap = JournalEntry {
                    seq: at_cut.seq,
                    at: at_cut.saved_at,
                    body: EntryBody::Snapshot { state: Box::new(at_cut) },
                };
                // A snapshot of accepted entries always encodes (see `MAX_ENTRY_DEPTH`); were it refused, the
                // journal would only stay uncompacted.
                if let Ok(snap) = snap.encode() {
                    run.journal.drain(..=cut);
                    run.journal.insert(0, snap);
                }
            }
        }
        inner.commits += 1;
        Ok(())
    }

    async fn delete(&self, run_id: &str) -> Result<()> {
        let mut inner = self.inner.borrow_mut();
        inner.runs.remove(run_id);
        inner.leases.remove(run_id);
        Ok(())
    }

    async fn history(&self, run_id: &str, limit: usize) -> Result<Vec<HistoryEntry>> {
        let inner = self.inner.borrow();
        let Some(run) = inner.runs.get(run_id) else { return Ok(Vec::new()) };
        let entries = Self::entries(run_id, &run.journal)?;
        // The first entry may be a compaction snapshot standing for older states: keep only `history_limit`
        // (and copy only the states returned).
        let keep = self.history_limit.max(1).min(limit);
        HistoryEntry::newest(run_id, entries.iter(), keep)
    }

    async fn pending(&self) -> Result<Vec<PendingRun>> {
        let inner = self.inner.borrow();
        let mut out = Vec::new();
        for (run_id, run) in &inner.runs {
            match Self::fold_all(run_id, &run.journal) {
                Ok(Some(cp)) if cp.status != RunStatus::Finished => out.push(PendingRun::of(&cp)),
                Ok(_) => {}
                Err(e) => out.push(PendingRun::corrupt(run_id, &e)),
            }
        }
        Ok(out)
    }

    async fn pending_page(&self, cursor: Option<&str>, limit: usize) -> Result<PendingPage> {
        use std::ops::Bound;
        let inner = self.inner.borrow();
        let from = match cursor {
            Some(c) => Bound::Excluded(c.to_string()),
            None => Bound::Unbounded,
        };
        let mut page = PendingPage::default();
        let mut iter = inner.runs.range((from, Bound::Unbounded)).peekable();
        while let Some((run_id, run)) = iter.next() {
            match Self::fold_all(run_id, &run.journal) {
                Ok(Some(cp)) if cp.status != RunStatus::Finished => page.runs.push(PendingRun::of(&cp)),
                Ok(_) => {}
                Err(e) => page.runs.push(PendingRun::corrupt(run_id, &e)),
            }
            if page.runs.len() >= limit.max(1) {
                page.cursor = iter.peek().is_some().then(|| run_id.clone());
                break;
            }
        }
        Ok(page)
    }

    async fn put_approval(&self, record: &ApprovalRecord) -> Result<()> {
        let json = serde_json::to_string(record).map_err(|e| Error::internal(e.to_string()))?;
        check_value(&json).map_err(|e| too_large(&e, &format!("approval '{}'", record.id)))?;
        self.inner.borrow_mut().approvals.insert(record.id.clone(), json);
        Ok(())
    }

    async fn get_approval(&self, id: &str) -> Result<Option<ApprovalRecord>> {
        let inner = self.inner.borrow();
        match inner.approvals.get(id) {
            None => Ok(None),
            Some(s) => serde_json::from_str(s)
                .map(Some)
                .map_err(|e| Error::new(ErrorCode::CheckpointCorrupt, format!("approval '{id}' cannot be read: {e}"))),
        }
    }

    async fn list_approvals(&self) -> Result<Vec<ApprovalRecord>> {
        let inner = self.inner.borrow();
        let mut out = Vec::new();
        for s in inner.approvals.values() {
            // Ignored (no else): see `RunStore::list_approvals` on unreadable records.
            if let Ok(r) = serde_json::from_str::<ApprovalRecord>(s) {
                out.push(r);
            }
        }
        sort_approvals(&mut out);
        Ok(out)
    }

    async fn delete_approval(&self, id: &str) -> Result<()> {
        self.inner.borrow_mut().approvals.remove(id);
        Ok(())
    }

    async fn put_due(&self, due: &DueWait) -> Result<()> {
        self.inner.borrow_mut().due.insert(due.clone());
        Ok(())
    }

    async fn list_due(&self, until: u64, limit: usize) -> Result<Vec<DueWait>> {
        let inner = self.inner.borrow();
        Ok(inner.due.iter().take_while(|d| d.at <= until).take(limit).cloned().collect())
    }

    async fn delete_due(&self, due: &DueWait) -> Result<()> {
        self.inner.borrow_mut().due.remove(due);
        Ok(())
    }

    async fn get_state(&self, name: &str) -> Result<Option<String>> {
        Ok(self.inner.borrow().state.get(name).cloned())
    }

    async fn put_state(&self, name: &str, value: &str) -> Result<()> {
        check_value(value).map_err(|e| too_large(&e, &format!("state document '{name}'")))?;
        self.inner.borrow_mut().state.insert(name.to_string(), value.to_string());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::conformance;
    use crate::time::ManualClock;

    #[test]
    fn memory_store_conforms() {
        futures::executor::block_on(async {
            let caps = conformance::Capabilities { strict_fencing: true };
            conformance::run_all(
                &|_| {
                    let s = MemoryStore::with_history_limit(5);
                    (s.clone(), s)
                },
                &caps,
            )
            .await;
        });
    }

    /// Entries and journals of any size are recorded and read; approval records and state documents over KV's
    /// value limit are refused.
    #[test]
    fn memory_store_records_entries_of_any_size_and_refuses_oversized_records() {
        futures::executor::block_on(async {
            let store = MemoryStore::new();
            let clock = ManualClock::new(1_700_000_000_000);
            conformance::large_entry_commits_and_loads_back(&store, &store.clone(), &clock).await;
            conformance::journal_over_a_bulk_read_loads_and_continues(&store, &store.clone(), &clock).await;
            conformance::records_over_the_value_limit_are_refused_and_write_nothing(&store).await;
        });
    }

    #[test]
    fn compaction_keeps_loads_and_history_bounded() {
        futures::executor::block_on(async {
            let store = MemoryStore::with_history_limit(3);
            conformance::many_commits_stay_foldable(&store, &crate::time::ManualClock::new(0), 40).await;
            let run = store.inner.borrow().runs.get("many").map(|r| r.journal.len()).unwrap();
            assert!(run <= 3 + 1 + (3 + 1) + 2, "journal kept {run} entries");
        });
    }
}
