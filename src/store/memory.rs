//! `MemoryStore`: an in-process [`RunStore`] with atomic leases and strict fencing.
//!
//! A commit does work in the size of its entry, never in the size of the run: the entry is encoded once (the
//! one encoder, [`JournalEntry::encode`], so what a real backend refuses is refused here too) and kept parsed —
//! nothing is decoded again, and the last entry's `seq` is kept beside the journal. History stays bounded by
//! folding the oldest kept entry into the run's base state as each new one arrives (one entry's work, no
//! re-parsing or re-serialising of the whole state). A load folds the base and the kept entries once. Clones
//! share the same data: two `Agent`s over clones of one `MemoryStore` behave like two processes over one
//! database.
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
use crate::core::steer::QueuedMessage;
use async_trait::async_trait;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::rc::Rc;

/// A kept journal entry: parsed, or (only through [`MemoryStore::corrupt_last_entry`]) bytes that cannot be read.
enum Kept {
    Entry(JournalEntry),
    Unreadable(String),
}

impl Kept {
    fn entry(&self, run_id: &str) -> Result<&JournalEntry> {
        match self {
            Kept::Entry(e) => Ok(e),
            Kept::Unreadable(s) => Err(match serde_json::from_str::<JournalEntry>(s) {
                Err(e) => corrupt(run_id, "a journal entry", e),
                Ok(_) => corrupt(run_id, "a journal entry", "it was replaced"),
            }),
        }
    }
}

#[derive(Default)]
struct RunData {
    /// The run's state before the oldest kept entry (`None`: the entries start at entry 1).
    base: Option<Checkpoint>,
    /// The newest entries (at most `history_limit + 1`), oldest first.
    entries: VecDeque<Kept>,
    /// The `seq` of the newest entry (0: none).
    last_seq: u64,
}

impl RunData {
    /// The entries as a journal (a snapshot of the base first, when there is one): for history.
    fn journal(&self, run_id: &str) -> Result<Vec<JournalEntry>> {
        let mut out = Vec::with_capacity(self.entries.len() + 1);
        if let Some(base) = &self.base {
            let state = Box::new(base.clone());
            out.push(JournalEntry { seq: base.seq, at: base.saved_at, body: EntryBody::Snapshot { state } });
        }
        for k in &self.entries {
            out.push(k.entry(run_id)?.clone());
        }
        Ok(out)
    }

    /// The run's current state: the base with every kept entry applied.
    fn fold(&self, run_id: &str) -> Result<Option<Checkpoint>> {
        let mut cp = self.base.clone();
        for k in &self.entries {
            let e = k.entry(run_id)?;
            match &mut cp {
                Some(c) => c.apply(e)?,
                None => cp = Checkpoint::fold(run_id, std::iter::once(e))?,
            }
        }
        Ok(cp)
    }

    /// Folds the oldest kept entry into the base (its size of work: a snapshot entry is moved, a delta
    /// appended). `false` when it cannot be (an unreadable entry, or one that does not apply): the journal then
    /// only stays longer.
    fn absorb_oldest(&mut self, run_id: &str) -> bool {
        let Some(Kept::Entry(oldest)) = self.entries.front() else { return false };
        match (&mut self.base, &oldest.body) {
            (_, EntryBody::Snapshot { .. }) => {}
            (Some(base), EntryBody::Delta { .. }) => {
                if base.apply(oldest).is_err() {
                    return false;
                }
            }
            (None, EntryBody::Delta { .. }) => match Checkpoint::fold(run_id, std::iter::once(oldest)) {
                Ok(Some(cp)) => self.base = Some(cp),
                _ => return false,
            },
        }
        if let Some(Kept::Entry(JournalEntry { seq, at, body: EntryBody::Snapshot { state } })) =
            self.entries.pop_front()
        {
            // What `Checkpoint::apply` does with a snapshot, without copying it.
            let mut state = *state;
            if state.run_id.is_empty() {
                state.run_id = run_id.to_string();
            }
            state.seq = seq;
            state.saved_at = at;
            self.base = Some(state);
        }
        true
    }
}

#[derive(Default)]
struct Inner {
    runs: BTreeMap<String, RunData>,
    leases: BTreeMap<String, Lease>,
    approvals: BTreeMap<String, String>,
    /// The due index, earliest first.
    due: BTreeSet<DueWait>,
    /// Queued messages by (run id, queue order key).
    queue: BTreeMap<(String, String), QueuedMessage>,
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
        if let Some(last) = self.inner.borrow_mut().runs.get_mut(run_id).and_then(|r| r.entries.back_mut()) {
            *last = Kept::Unreadable("{not json".into());
        }
    }

    /// The current lease record of a run, if any.
    pub fn lease(&self, run_id: &str) -> Option<Lease> {
        self.inner.borrow().leases.get(run_id).cloned()
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
            Some(r) => r.fold(run_id),
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
        // Encoded only to be refused as a real backend refuses it (the text is not kept: nothing decodes it).
        entry.encode().map_err(|e| e.with_run(run_id))?;
        let keep = self.history_limit + 1;
        let run = inner.runs.entry(run_id.clone()).or_default();
        // Every entry continues the journal; entry 1 creates the run only if it has none (checked with the
        // write: nothing between them).
        if let Some(Kept::Unreadable(s)) = run.entries.back() {
            let e = serde_json::from_str::<JournalEntry>(s).err().map_or("it was replaced".into(), |e| e.to_string());
            return Err(corrupt(run_id, "the last entry", e));
        }
        super::check_next_seq(run_id, entry.seq, run.last_seq)?;
        run.entries.push_back(Kept::Entry(entry.clone()));
        run.last_seq = entry.seq;
        // Keep `limit` past states foldable: the oldest entry beyond them joins the base state.
        while run.entries.len() > keep && run.absorb_oldest(run_id) {}
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
        let entries = run.journal(run_id)?;
        // The first entry may be a snapshot of the base standing for older states: keep only `history_limit`
        // (and copy only the states returned).
        let keep = self.history_limit.max(1).min(limit);
        HistoryEntry::newest(run_id, entries.iter(), keep)
    }

    async fn pending(&self) -> Result<Vec<PendingRun>> {
        let inner = self.inner.borrow();
        let mut out = Vec::new();
        for (run_id, run) in &inner.runs {
            match run.fold(run_id) {
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
            match run.fold(run_id) {
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

    async fn put_queued(&self, msg: &QueuedMessage) -> Result<()> {
        self.inner.borrow_mut().queue.insert((msg.run_id.clone(), msg.order_key()), msg.clone());
        Ok(())
    }

    async fn list_queued(&self, run_id: &str) -> Result<Vec<QueuedMessage>> {
        let inner = self.inner.borrow();
        let from = (run_id.to_string(), String::new());
        Ok(inner.queue.range(from..).take_while(|((r, _), _)| r == run_id).map(|(_, q)| q.clone()).collect())
    }

    async fn delete_queued(&self, msg: &QueuedMessage) -> Result<()> {
        self.inner.borrow_mut().queue.remove(&(msg.run_id.clone(), msg.order_key()));
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

    fn reads_current(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::transcript::Message;
    use crate::rng::{Rng, SplitMix64};
    use crate::store::conformance;
    use crate::time::{Clock, ManualClock};

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
            let kept = store.inner.borrow().runs.get("many").map(|r| r.entries.len()).unwrap();
            assert!(kept <= 3 + 1, "journal kept {kept} entries");
        });
    }

    /// Seeded: after every commit of a journal of deltas with snapshots among them (what a fork or a migration
    /// writes), a store that folds old entries into its base (small history limits) loads the same state as
    /// the fold of every entry, and its history is the newest states of that fold. Repro: the seed in the
    /// failure message, `SEED=<n> cargo test --lib store::memory`.
    #[test]
    fn folding_old_entries_into_the_base_keeps_load_and_history_exact() {
        let seeds: Vec<u64> = match std::env::var("SEED") {
            Ok(s) => vec![s.parse().expect("SEED is a number")],
            Err(_) => (1..=24).collect(),
        };
        for seed in seeds {
            let rng = SplitMix64::new(seed);
            let next = |n: u64| (rng.unit() * n as f64) as u64;
            let limit = next(6) as usize;
            let commits = 5 + next(60);
            futures::executor::block_on(async {
                let store = MemoryStore::with_history_limit(limit);
                let clock = ManualClock::new(0);
                let o = LeaseOptions::default();
                let l = store.acquire_lease("r", "o", 0, &o).await.expect("lease");
                let (e1, mut cp) = conformance::snapshot_entry("r", "x", 0);
                store.commit(&l, &e1, &cp).await.expect("commit");
                let mut all = vec![e1];
                for i in 0..commits {
                    clock.advance(1);
                    let (mut e, next_cp) = conformance::delta_entry(
                        &cp,
                        Message::user(format!("m{i}")),
                        RunStatus::InProgress,
                        clock.now_ms(),
                    );
                    let mut next_cp = next_cp;
                    if next(5) == 0 {
                        // A snapshot standing for the whole state.
                        next_cp.saved_at = e.at;
                        e = JournalEntry {
                            seq: e.seq,
                            at: e.at,
                            body: EntryBody::Snapshot { state: Box::new(next_cp.clone()) },
                        };
                    }
                    store.commit(&l, &e, &next_cp).await.unwrap_or_else(|err| panic!("seed {seed}: commit: {err}"));
                    all.push(e);
                    cp = next_cp;
                    let folded = Checkpoint::fold("r", all.iter()).expect("fold").expect("a state");
                    let loaded = store.load("r").await.expect("load").expect("a state");
                    assert_eq!(loaded, folded, "seed {seed}, limit {limit}, commit {i}: load");
                    let want = HistoryEntry::newest("r", all.iter(), limit.max(1)).expect("history");
                    let got = store.history("r", usize::MAX).await.expect("history");
                    assert_eq!(got, want, "seed {seed}, limit {limit}, commit {i}: history");
                }
                let kept = store.inner.borrow().runs.get("r").map(|r| r.entries.len()).unwrap();
                assert!(kept <= limit + 1, "seed {seed}: {kept} entries kept with limit {limit}");
            });
        }
    }
}
