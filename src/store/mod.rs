//! The store contract ([`RunStore`]) and its backends.
//!
//! # Contract
//!
//! A `RunStore` keeps, per run id, an append-only **journal** of [`JournalEntry`]s (one per durable
//! boundary), a **lease**, and the run's **approval records**.
//!
//! * **Commit.** [`RunStore::commit`] appends one entry, written by the lease holder. `entry.seq` is the
//!   previous entry's `seq + 1` (the machine numbers them); `state` is the fold of the journal including the
//!   entry, handed over so a backend may write a snapshot instead of a delta. A commit by a holder whose lease
//!   was taken over fails with `STEADFAST_SESSION_BUSY` (*fencing*). Backends say in their docs whether fencing
//!   is enforced atomically (`strict_fencing`) or by construction/check with a window (Workers KV).
//! * **Creating a run.** The entry with `seq` 1 (a snapshot: a new run's whole first state — a send, a
//!   session's turn, a fork) *creates* the run: it is written only if the run has no journal, and refused with
//!   `STEADFAST_SESSION_EXISTS` (not retryable; nothing written, the existing run untouched) when it has one,
//!   whoever holds the lease. Backends check it atomically with the write where they can (memory, run
//!   objects); the journal store checks it against the journal its lease acquisition read (on Workers KV that
//!   read may be stale in another location, as leases are: best effort across locations). A run is never
//!   replaced: a deleted run's id may be created again.
//! * **Load.** [`RunStore::load`] folds the journal. An entry or lease that cannot be decoded fails with
//!   `STEADFAST_CHECKPOINT_CORRUPT` (not retryable); nothing else is lost. So does a journal with a gap (an
//!   entry missing while a later one exists: a lost or deleted write): a load never folds past a gap nor
//!   returns the journal cut at it.
//! * **Limits (sizes are part of the model).** Whatever ran is recordable: a journal entry of any size is
//!   committed (eight 4 MiB tool results settling together, a fork's or a session turn's first snapshot of a
//!   large run), each backend splitting it as its platform needs (Workers KV: values of at most 20 MiB under
//!   write-once keys, the header naming them written last; a Durable Object: rows of at most 1 MB in one
//!   transaction), so that a commit either records the whole entry or, as far as readers go, nothing of it.
//!   Whatever is recorded is readable: a load, history, listing or takeover reads a run whose journal totals
//!   any size, its reads sized to the platform's limits (a Workers KV bulk read returns at most 25 MB). Approval
//!   records and state documents are single values: over Workers KV's 25 MiB they are refused with
//!   `STEADFAST_STORE_FAILED` (not retryable), writing nothing.
//! * **Leases.** [`RunStore::acquire_lease`] fails with `STEADFAST_SESSION_BUSY` while another owner holds an
//!   unexpired lease (expiry plus `grace_ms`, for clock skew); otherwise it starts a new epoch.
//!   [`RunStore::renew_lease`] never takes a lease back from another owner. [`RunStore::release_lease`] ends it.
//! * **Approvals.** Records are written before the `awaiting-approval` entry (the machine orders it).
//! * **Due waits.** [`RunStore::put_due`] / [`RunStore::list_due`] / [`RunStore::delete_due`]: an index of what
//!   comes due at a time (a wait's deadline or timer, a queued message the sweep looks at), listed earliest
//!   first at a cost that does not grow with the number of runs.
//! * **Message queues.** [`RunStore::put_queued`] / [`RunStore::list_queued`] / [`RunStore::delete_queued`]:
//!   per run, the messages sent to it while it executes ([`crate::core::steer`]), listed in queue order. A
//!   listing may lag a put or a delete (Workers KV: up to a minute in another location); the run's recorded ids
//!   make a message apply once whatever a listing shows.
//! * **Listing.** [`RunStore::pending`] lists every run that is not finished, including corrupt ones (for
//!   the API; its cost grows with the backlog). The recovery sweep lists in bounded pages instead:
//!   [`RunStore::pending_page`] returns up to about `limit` runs after an opaque cursor, in run-id byte
//!   order, at a cost that does not grow with the backlog (one KV `list` on the journal store). A page may be
//!   short, even empty, before the end, and its entries may be stale (an index entry can outlive its run);
//!   [`RunStore::check_pending`] tells which of some listed runs are still unfinished, in bulk, and lets the
//!   backend drop the stale entries it finds. The sweep checks only the runs it will act on.
//! * **History.** [`RunStore::history`] returns up to `limit` past states, newest first; the backend keeps at
//!   least `history_limit` of them (its option); pruning never breaks a load.

#[cfg(feature = "testing")]
pub mod conformance;
#[cfg(feature = "testing")]
pub mod faulty;
pub(crate) mod index;
pub mod journal;
pub(crate) mod keys;
pub mod kv;
pub mod memory;
pub mod meter;
pub mod object;
#[cfg(feature = "testing")]
pub mod sim;

use crate::core::approval::ApprovalRecord;
use crate::core::checkpoint::{Checkpoint, JournalEntry, RunStatus};
use crate::core::error::{ErrorInfo, Result};
pub use crate::core::steer::QueuedMessage;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

pub use journal::{JournalOptions, JournalStore};
pub use kv::{KvBackend, MemoryKv};
pub use memory::MemoryStore;

/// A held lease: the owner id is the fencing token, the epoch orders owners.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Lease {
    /// Run id.
    pub run_id: String,
    /// Owner id (unique per execution).
    pub owner: String,
    /// Epoch: increases with every acquisition.
    pub epoch: u64,
    /// Expiry (ms since the epoch, by the holder's clock).
    pub expires_at: u64,
}

/// Lease timing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct LeaseOptions {
    /// Lease length (default 30 s). On Workers KV across locations use well above 60 s.
    pub ttl_ms: u64,
    /// Renew this often while running (default 10 s).
    pub renew_every_ms: u64,
    /// Extra wait past expiry before another owner may take over (clock skew; default 30 s).
    pub grace_ms: u64,
}

impl Default for LeaseOptions {
    fn default() -> Self {
        LeaseOptions { ttl_ms: 30_000, renew_every_ms: 10_000, grace_ms: 30_000 }
    }
}

/// A run that is not finished, as [`RunStore::pending`] lists it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase")]
pub struct PendingRun {
    /// Run id.
    pub run_id: String,
    /// `in-progress` or `awaiting-approval`.
    pub status: RunStatus,
    /// First pending approval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub approval_id: Option<String>,
    /// All pending approvals.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approval_ids: Vec<String>,
    /// Steps taken.
    pub step: u32,
    /// Last failed attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub last_error: Option<ErrorInfo>,
    /// Failed attempts in a row.
    #[serde(default)]
    pub attempts: u32,
    /// Quarantined by the recovery sweep.
    #[serde(default)]
    pub quarantined: bool,
    /// Last save time.
    #[serde(default)]
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    pub saved_at: u64,
    /// For a diagnosis fork of the recovery sweep: the run it tries to heal (from its checkpoint's marker).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub heal_of: Option<String>,
    /// What the run is: `run` (a send), `session` (a session's turn) or `schedule` (a schedule's fire), from
    /// its id.
    #[serde(default)]
    pub kind: RunKind,
    /// The session (kind `session`) or schedule (kind `schedule`) the run belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub owner_id: Option<String>,
    /// What a run awaiting approval waits on besides approvals: its tools' questions, events (with their
    /// deadlines) and timers, without their tokens. Filled in by the runtime's listing (`Agent::pending`); a
    /// store's own listing leaves it empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "ts", ts(as = "Option<Vec<crate::core::approval::PendingWait>>", optional))]
    pub waits: Vec<crate::core::approval::PendingWait>,
}

/// A run named with its status.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase")]
pub struct RunRef {
    /// Run id.
    pub run_id: String,
    /// Its status.
    pub status: RunStatus,
}

/// What a run is, from its id (see [`PendingRun::kind`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "kebab-case")]
pub enum RunKind {
    /// A run of `send` (or a fork, a delivery, a diagnosis fork).
    #[default]
    Run,
    /// A session's turn (`<session>.turn-<n>`).
    Session,
    /// A schedule's fire (`<schedule>.<time>.fire`).
    Schedule,
}

impl RunKind {
    /// The kind of run `run_id` and the session or schedule it belongs to.
    pub fn of(run_id: &str) -> (RunKind, Option<String>) {
        if let Some((session, _)) = crate::core::ids::session_turn(run_id) {
            return (RunKind::Session, Some(session.to_string()));
        }
        if let Some((schedule, _)) = crate::core::ids::schedule_fire(run_id) {
            return (RunKind::Schedule, Some(schedule.to_string()));
        }
        (RunKind::Run, None)
    }
}

impl PendingRun {
    /// The listing entry of a checkpoint.
    pub fn of(cp: &Checkpoint) -> PendingRun {
        let (kind, owner_id) = RunKind::of(&cp.run_id);
        PendingRun {
            run_id: cp.run_id.clone(),
            status: cp.status,
            approval_id: cp.approval_ids.first().cloned(),
            approval_ids: cp.approval_ids.clone(),
            step: cp.step_index,
            last_error: cp.last_error.clone(),
            attempts: cp.attempts,
            quarantined: cp.quarantined,
            saved_at: cp.saved_at,
            heal_of: cp.heal_of.clone(),
            kind,
            owner_id,
            waits: Vec::new(),
        }
    }

    /// The listing entry of a run whose checkpoint cannot be read.
    pub fn corrupt(run_id: &str, err: &crate::core::error::Error) -> PendingRun {
        let (kind, owner_id) = RunKind::of(run_id);
        PendingRun {
            run_id: run_id.to_string(),
            status: RunStatus::InProgress,
            approval_id: None,
            approval_ids: Vec::new(),
            step: 0,
            last_error: Some(err.info()),
            attempts: 0,
            quarantined: false,
            saved_at: 0,
            heal_of: None,
            kind,
            owner_id,
            waits: Vec::new(),
        }
    }
}

/// One page of the pending listing ([`RunStore::pending_page`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PendingPage {
    /// Runs as the listing has them, in run-id byte order (possibly stale: see [`RunStore::check_pending`]).
    pub runs: Vec<PendingRun>,
    /// Where the next page starts (opaque, store-specific); `None` after the last page.
    pub cursor: Option<String>,
}

/// One past state of a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase")]
pub struct HistoryEntry {
    /// Journal position.
    pub seq: u64,
    /// `stepIndex` of the state.
    pub step: u32,
    /// Save time.
    pub saved_at: u64,
    /// Status of the state.
    pub status: RunStatus,
    /// The state.
    pub checkpoint: Checkpoint,
}

impl HistoryEntry {
    /// The history entry of a state.
    pub fn of(cp: &Checkpoint) -> HistoryEntry {
        HistoryEntry {
            seq: cp.seq,
            step: cp.step_index,
            saved_at: cp.saved_at,
            status: cp.status,
            checkpoint: cp.clone(),
        }
    }

    /// The newest `keep` states of a journal (its entries folded in order, the first one a snapshot or entry 1),
    /// newest first; only those states are copied.
    pub fn newest<'a>(
        run_id: &str,
        entries: impl ExactSizeIterator<Item = &'a JournalEntry>,
        keep: usize,
    ) -> Result<Vec<HistoryEntry>> {
        let skip = entries.len().saturating_sub(keep);
        let mut cp = Checkpoint::new(run_id);
        let mut out = Vec::new();
        for (i, e) in entries.enumerate() {
            cp.apply(e)?;
            if i >= skip {
                out.push(HistoryEntry::of(&cp));
            }
        }
        out.reverse();
        Ok(out)
    }
}

/// Operations a store performed (counted by the store itself, for per-boundary budgets).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoreCounters {
    /// Read operations (a bulk get is one).
    pub reads: u64,
    /// Write operations (puts and deletes, retries included).
    pub writes: u64,
    /// Bytes of values written.
    pub bytes_written: u64,
    /// Writes retried after a 429 or a transient failure.
    pub write_retries: u64,
    /// Journal entries committed.
    pub commits: u64,
    /// Writes of journal entries (the hot path).
    pub commit_writes: u64,
    /// Bytes of journal entries written.
    pub commit_bytes: u64,
}

impl StoreCounters {
    /// The difference `self - earlier`.
    pub fn since(&self, earlier: &StoreCounters) -> StoreCounters {
        StoreCounters {
            reads: self.reads - earlier.reads,
            writes: self.writes - earlier.writes,
            bytes_written: self.bytes_written - earlier.bytes_written,
            write_retries: self.write_retries - earlier.write_retries,
            commits: self.commits - earlier.commits,
            commit_writes: self.commit_writes - earlier.commit_writes,
            commit_bytes: self.commit_bytes - earlier.commit_bytes,
        }
    }
}

/// Whether journal entry `seq` may follow a journal whose last entry is `last` (0: the run has none), as the
/// contract says (`# Contract`, "Creating a run"): entry 1 creates the run and is refused with
/// `STEADFAST_SESSION_EXISTS` when it exists; any other entry continues the journal (anything else is a bug
/// upstream: `STEADFAST_INTERNAL`, never written).
pub(crate) fn check_next_seq(run_id: &str, seq: u64, last: u64) -> Result<()> {
    if seq == 1 && last >= 1 {
        return Err(crate::core::error::Error::new(
            crate::core::error::ErrorCode::SessionExists,
            format!("run '{run_id}' exists already: a new run's first entry is not written over it (a run is never replaced)"),
        )
        .with_run(run_id));
    }
    if seq != last.saturating_add(1) {
        return Err(crate::core::error::Error::internal(format!(
            "run '{run_id}': entry {seq} does not follow entry {last}"
        )));
    }
    Ok(())
}

/// A wait's entry in the due index ([`RunStore::put_due`]): a tool's wait that resolves by itself at `at` (an
/// event's deadline, a timer). The recovery sweep lists the entries that came due, earliest first, without
/// listing every run. Its KV key shape is [`keys::Keys::due`].
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DueWait {
    /// When it comes due (ms since the epoch).
    pub at: u64,
    /// The wait's id (its approval record's).
    pub wait_id: String,
    /// Its run.
    pub run_id: String,
}

/// Orders approval records oldest first, and within one pause in call order.
pub fn sort_approvals(records: &mut [ApprovalRecord]) {
    crate::core::wire::sort_by(records, |a, b| {
        let pos = |r: &ApprovalRecord| r.batch.iter().position(|id| id == &r.id).unwrap_or(usize::MAX);
        a.created_at.cmp(&b.created_at).then(a.run_id.cmp(&b.run_id)).then(pos(a).cmp(&pos(b))).then(a.id.cmp(&b.id))
    });
}

/// The store contract. See the module docs (`# Contract`).
#[async_trait(?Send)]
pub trait RunStore {
    /// Folds the run's journal; `None` when the run does not exist.
    async fn load(&self, run_id: &str) -> Result<Option<Checkpoint>>;
    /// Takes the run's lease for `owner`, or fails with `STEADFAST_SESSION_BUSY`.
    async fn acquire_lease(&self, run_id: &str, owner: &str, now_ms: u64, opts: &LeaseOptions) -> Result<Lease>;
    /// Confirms a lease from `acquire_lease` before anything irreversible is done under it: a tool runs, an
    /// approval is recorded, a result is reported. Backends whose acquisition is atomic confirm at once (the
    /// default); on Workers KV this waits out the settle window and reads the lease back. Fails with
    /// `STEADFAST_SESSION_BUSY` when another owner won the lease. Idempotent.
    async fn confirm_lease(&self, _lease: &Lease) -> Result<()> {
        Ok(())
    }
    /// Extends a held lease; fails with `STEADFAST_SESSION_BUSY` when it was taken over.
    async fn renew_lease(&self, lease: &Lease, now_ms: u64, opts: &LeaseOptions) -> Result<Lease>;
    /// Ends a held lease (no-op when it was taken over).
    async fn release_lease(&self, lease: &Lease) -> Result<()>;
    /// Appends a journal entry as the lease holder (fenced).
    async fn commit(&self, lease: &Lease, entry: &JournalEntry, state: &Checkpoint) -> Result<()>;
    /// Deletes the run (journal and lease). Its approval records become orphans. An execution holding the run's
    /// lease meanwhile is fenced where the backend fences atomically (its next write is refused); on Workers KV,
    /// which cannot, the delete takes the lease first and is refused with `STEADFAST_SESSION_BUSY` while an
    /// execution holds it.
    async fn delete(&self, run_id: &str) -> Result<()>;
    /// Up to `limit` past states, newest first.
    async fn history(&self, run_id: &str, limit: usize) -> Result<Vec<HistoryEntry>>;
    /// Every unfinished run.
    async fn pending(&self) -> Result<Vec<PendingRun>>;
    /// One page of the pending listing: up to about `limit` runs after `cursor` (a page's `cursor`; `None`
    /// starts at the beginning), in run-id byte order. Backends with an index override it so a page costs
    /// the same at any backlog; this default filters [`RunStore::pending`] (whole-listing cost).
    async fn pending_page(&self, cursor: Option<&str>, limit: usize) -> Result<PendingPage> {
        let mut all = self.pending().await?;
        crate::core::wire::sort_by(&mut all, |a, b| a.run_id.cmp(&b.run_id));
        let after: Vec<PendingRun> = all.into_iter().filter(|r| cursor.is_none_or(|c| r.run_id.as_str() > c)).collect();
        let more = after.len() > limit.max(1);
        let runs: Vec<PendingRun> = after.into_iter().take(limit.max(1)).collect();
        let cursor = if more { runs.last().map(|r| r.run_id.clone()) } else { None };
        Ok(PendingPage { runs, cursor })
    }
    /// For each of `runs` (as a page listed them), whether it is still unfinished. A run that cannot be read
    /// counts as unfinished (the caller sees its error when it acts). Backends may drop stale index entries
    /// they find here. This default loads each run.
    async fn check_pending(&self, runs: &[PendingRun]) -> Result<Vec<bool>> {
        let mut out = Vec::with_capacity(runs.len());
        for r in runs {
            out.push(match self.load(&r.run_id).await {
                Ok(Some(cp)) => cp.status != RunStatus::Finished,
                Ok(None) => false,
                Err(_) => true,
            });
        }
        Ok(out)
    }
    /// Writes an approval record.
    async fn put_approval(&self, record: &ApprovalRecord) -> Result<()>;
    /// Reads an approval record.
    async fn get_approval(&self, id: &str) -> Result<Option<ApprovalRecord>>;
    /// Every approval record that can be read. An unreadable one is left out (one bad record must not hide the
    /// others): [`RunStore::get_approval`] reports it as `STEADFAST_CHECKPOINT_CORRUPT`, and its run stays
    /// listed by [`RunStore::pending`] as awaiting approval.
    async fn list_approvals(&self) -> Result<Vec<ApprovalRecord>>;
    /// Deletes an approval record.
    async fn delete_approval(&self, id: &str) -> Result<()>;
    /// Adds a wait to the due index (written before the pause that waits on it; writing it again is harmless).
    async fn put_due(&self, due: &DueWait) -> Result<()>;
    /// Up to `limit` entries of the due index with `at <= until`, earliest first (ties in wait-id order). One
    /// listing of the index, whatever the number of runs.
    async fn list_due(&self, until: u64, limit: usize) -> Result<Vec<DueWait>>;
    /// Removes a wait from the due index (nothing to do when it is not there).
    async fn delete_due(&self, due: &DueWait) -> Result<()>;
    /// Adds a message to its run's queue ([`crate::core::steer`]; written once: writing it again is harmless).
    async fn put_queued(&self, msg: &QueuedMessage) -> Result<()>;
    /// The run's queued messages, in queue order (time, then id). An unreadable entry is left out.
    async fn list_queued(&self, run_id: &str) -> Result<Vec<QueuedMessage>>;
    /// Removes a message from its run's queue (nothing to do when it is not there).
    async fn delete_queued(&self, msg: &QueuedMessage) -> Result<()>;
    /// Reads a small named document kept by the runtime (the recovery sweep's state).
    async fn get_state(&self, name: &str) -> Result<Option<String>>;
    /// Writes a small named document (last write wins).
    async fn put_state(&self, name: &str, value: &str) -> Result<()>;
    /// Operations performed so far (backends that do not count return zeros).
    fn counters(&self) -> StoreCounters {
        StoreCounters::default()
    }

    /// Whether a read sees every write that returned before it, so a run not found is gone: the memory store
    /// and strict mode's objects. Not Workers KV (a location may serve a cached miss, or an older value, for up to
    /// a minute). Default: no.
    fn reads_current(&self) -> bool {
        false
    }
}
