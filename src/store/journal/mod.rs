//! `JournalStore`: the [`RunStore`] over any [`KvBackend`] (Workers KV in production), designed for KV's
//! rules: no compare-and-swap, one write per second per key, reads up to the propagation delay stale in other
//! locations (cached misses included), an eventually consistent `list`.
//!
//! # Layout (see [`super::keys`])
//! Each acquisition of a run's lease opens a **segment** with a unique tag (`<epoch>.<owner>`). Every durable
//! boundary writes one journal entry `run/<id>/j/<tag>/<seq>` — once, never rewritten. The lease record
//! (`run/<id>/lease`, written on acquire and renewal only) names the current segment and the **chain** of
//! closed segments, each with the seq range (`from..=to`) the next owner read when it took over (the *cut*).
//! A release writes the segment's end marker (`run/<id>/end/<tag>`, once). The pending index
//! (`idx/pending/<id>`) is written only when a run's status, attempts or last error change, not per boundary.
//!
//! # Contract on KV
//! * **Hot path: one write per boundary** (the entry; an entry over [`MAX_PART_BYTES`] takes one write per
//!   20 MiB part and one for its header, see *Sizes*), no read, no key written twice within a second.
//! * **Fencing by construction.** A stale writer keeps writing into its own segment, past the cut, where no
//!   reader looks: its late writes are never read. It stops with `STEADFAST_SESSION_BUSY` at its next renewal,
//!   or at its next commit once its lease has expired by its own clock (then the commit re-reads the lease).
//!   `strict_fencing` is **false**: between a takeover and the stale writer's next check, its commits succeed
//!   (and are ignored).
//! * **Leases: the settle window `S` (`settle_ms`).** KV has no compare-and-swap and the 429 is a rate limit,
//!   not a lock, so exclusion rests on time. An acquirer reads the lease, writes its own record, and gives up
//!   (`STEADFAST_SESSION_BUSY`) unless the write was acknowledged within `S` of the read's start; it is
//!   *confirmed* only when a read-back at least `S` after that acknowledgement returns its record
//!   ([`RunStore::confirm_lease`], done by the runtime before any tool runs, any approval is recorded or any
//!   result is reported; journal entries written before it land in its own segment, where no reader looks
//!   unless it wins, and the shared index waits for it). Why that excludes a second owner: a racing acquirer
//!   that read the lease before this record landed wrote within `S` of its read, so before this owner's
//!   read-back, which then sees it (last write wins) and refuses. An acquirer that gave up may still have its
//!   record land; it writes a *void* marker, and the confirmed owner restores its own record at its next
//!   renewal. Renewals re-read the lease before every write (retries included), never run past the lease's
//!   expiry (fail closed) and give up a write acknowledged after it.
//! * **What that rests on.** Reads in the writing location see the latest write (KV: "usually, not
//!   guaranteed"). Across locations a reader may see a stale lease, or a cached miss, for the propagation delay
//!   (60 s or more), so two owners can run at once there; their segments never collide and the final
//!   transcript stays valid, but a tool may run twice. A takeover reads every entry the previous owner wrote only
//!   if `grace_ms` ≥ the propagation delay: across locations use `ttl_ms` and `grace_ms` well above 60 s. For
//!   strict single-writer guarantees use a strongly consistent store.
//! * **Snapshots and history.** A new run starts with a snapshot entry; a later snapshot replaces a delta when
//!   `snapshot_every` entries and `snapshot_growth` × the last snapshot's bytes have accumulated since the last
//!   one, so bytes written stay O(n) and a load folds a bounded number of entries. A periodic snapshot that
//!   would not fit one value ([`MAX_PART_BYTES`]) is not written (the entry stays a delta: one write, not
//!   several). When a finished run releases its lease, entries older than
//!   needed for `history_limit` states are deleted (at most `prune_batch`); the end marker records what was
//!   pruned, and readers read it with the first entries (one bulk get), so pruning never makes a run
//!   unreadable.
//! * **Gaps are corruption, never the end.** Past a missing entry a reader looks one bulk get further; an
//!   entry there means a write was lost (acknowledged, not stored) or deleted. Once KV's listing confirms it
//!   (the later entry listed, the missing one not), the read fails with `STEADFAST_CHECKPOINT_CORRUPT` and the
//!   run is listed as corrupt; until then (another location's cached miss, a lagging list) it is retryable
//!   `STEADFAST_STORE_UNAVAILABLE`. Folding past a gap, or cutting the journal at it, would drop recorded
//!   steps and a resume would redo them. A lost *last* entry cannot be told from the end of the journal by a
//!   reader whose lease view ends before it.
//! * **Sizes: every entry is recordable.** An entry over [`MAX_PART_BYTES`] (20 MiB) is split over several
//!   write-once values: its parts `…/<seq>/<n>` (each at most 20 MiB) first, then a header at the entry's own
//!   key naming them (`{"split": {seq, bytes, parts}}`, a few dozen bytes). A reader that finds the header finds
//!   every part (a part missing while its header exists is judged like a gap); an entry whose writes stopped
//!   part way has no header, so it was never written as far as readers go (its parts are garbage, dropped with
//!   the run). A finished run's release prunes parts with their entry (the lease and the end marker list the
//!   split entries not yet pruned). Every journal value thus fits a KV value (25 MiB) and, alone, a bulk read.
//!   The index entry is capped in bytes of serialised JSON, so it always fits KV's 1,024 bytes of metadata.
//! * **Sizes: every run is readable.** A bulk get returns at most 25 MB; KV refuses a larger one whole (HTTP
//!   413, [`is_bulk_too_large`]). Reads ask for up to 100 keys at first and, once a read has seen a large value,
//!   for as many as fit 25 MB at the largest size seen; a refused bulk get is read again as two halves (a
//!   single value over 25 MB — KV stores up to 25 MiB — with `get`). A split entry's parts are read in bulk gets
//!   packed by the sizes its header names. So a load, history, the takeover probe, the pending check and the
//!   approval listing read a run of any size at about its bytes / 25 MB bulk gets, plus at most about
//!   log2(100) ≈ 7 refused ones each time a larger value than any before turns up (measured: a finished run's
//!   26 MB journal of 28 entries loads in 6 operations, the lease and 5 bulk gets, 2 of them refused; see
//!   `tests/sizes.rs`). Each bulk get, refused or not, is one of an invocation's 1,000 operations.
//! * **The index is secondary.** Once a boundary's entry is written the commit has succeeded; a failed index
//!   write marks the index dirty and is repaired at the next boundary or at release.
//! * **429s** off the hot path (lease writes racing, approvals, the index) are retried with backoff from 1 s,
//!   bounded, then fail with `STEADFAST_STORE_RATE_LIMITED` (retryable). On the hot path see *Retries*.
//!
//! # Retries: a deliberate second layer
//! The runtime's model-call retry (M15) is the only layer that retries *model calls*. This store keeps a
//! second, separate layer for *KV operations*, on purpose: KV refuses a second write to a key within a second
//! (429) and fails transiently now and then, and those refusals come from KV's rules, not from the run — a
//! caller could only wait and try the same operation again. Handling them here keeps them off the runtime (a
//! lease write racing its own lost acknowledgement, an approval, the index) and bounded:
//! * reads failing with `STEADFAST_STORE_UNAVAILABLE`: 3 retries, 200 / 400 / 800 ms (`READ_BACKOFF`);
//! * writes off the hot path (approvals, the index, end markers, deletes): `write_retries` retries, doubling
//!   from 1 s (`WRITE_BACKOFF`); lease renewals use the same delays, and stop at the lease's expiry;
//! * the hot path (a boundary's entry, its parts and header): the same delays, **bounded by the lease**: a retry
//!   is made only if it starts before the lease's expiry by this process's clock (the driver does not renew the
//!   lease while it waits for a commit, and past the expiry another process may take the run over and cut the
//!   journal before the entry); an entry acknowledged at or after the expiry is reported committed only if the
//!   lease, read back, is still this writer's (else `STEADFAST_SESSION_BUSY`). Then a failure goes back to the
//!   runtime, which ends the attempt (the run stays resumable). A 429 here can only follow this writer's own
//!   attempt whose acknowledgement was lost (the key is new and written once), and a transient failure usually
//!   passes within a second: retrying what the lease allows keeps a turn's results from being run again;
//! * lease writes while acquiring: 1 s after a 429, 200 ms after a transient failure, never growing
//!   (`LEASE_RATE_LIMITED`, `LEASE_TRANSIENT`): the acquirer reads the lease again before every write and
//!   must finish within its settle window.
//!
//! Every delay is a [`Backoff`] (the crate's one definition, in core), without jitter: KV's limit is one write
//! per second per key, not a crowd of clients to spread out, and fixed delays keep the store's timings
//! reproducible in tests.
//!
//! # Where it lives
//! This file holds the type, its options, the shared record shapes (`Progress`, the value limits) and the
//! [`RunStore`] impl: reads go to `read`, lease operations to `lease`, the pending listing to `index`; the
//! commit and the delete (the write path) are here. The submodules:
//! * `lease` — the lease record and the per-run writer state; acquire, confirm, renew, release (with pruning);
//! * `read` — reading the journal: sized bulk gets, split entries, the takeover probe, gaps, the entries seen;
//! * `index` — the pending index: what a boundary writes, repairs, the corrupt mark, the pending listing/check;
//! * `retry` — KV operations with this store's retry layer (see *Retries*).
//!
//! [`is_bulk_too_large`]: super::kv::is_bulk_too_large
//! [`Backoff`]: crate::core::backoff::Backoff

mod index;
mod lease;
mod read;
mod retry;

use super::index::{IndexMeta, IndexOp};
use super::keys::Keys;
use super::kv::{KvBackend, Metered, PutOptions, MAX_BULK_GET};
use super::object::split_parts;
use super::{
    sort_approvals, DueWait, HistoryEntry, Lease, LeaseOptions, PendingPage, PendingRun, QueuedMessage, RunStore,
    StoreCounters,
};
use crate::core::approval::ApprovalRecord;
use crate::core::checkpoint::{Checkpoint, EntryBody, JournalEntry, RunStatus};
use crate::core::error::{Error, ErrorCode, Result};
use crate::core::steer::sort_queue;
use crate::time::{Clock, Sleep};
use async_trait::async_trait;
use lease::{LeaseRecord, Writer};
use read::{SeenEntries, SplitHeader, SplitValue};
use retry::WRITE_BACKOFF;
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

/// Options of the journal store.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase", default)]
pub struct JournalOptions {
    /// Key prefix (default empty).
    pub prefix: String,
    /// Past states kept for history and fork (default 50; 0 keeps none).
    pub history_limit: usize,
    /// The settle window `S` (default 1,000 ms): a lease write must be acknowledged within `S` of the read it
    /// follows, and is confirmed by a read-back `S` after it (see the module docs). A trade: larger tolerates
    /// slower KV operations, smaller confirms sooner (the wait overlaps the first model call; a resume that
    /// starts with pending tool calls pays it). Within one process (no racing acquirer) any value is safe.
    pub settle_ms: u64,
    /// Entries between snapshots, at least (default 2,000). A trade: a snapshot rewrites the whole state (it
    /// replaces a delta, so it costs no extra write, but its bytes come on top of the transcript's, and the
    /// entries behind it become prunable: one delete each, a write on KV), while a load folds every entry since
    /// the last snapshot (2,000 entries are 20 bulk gets, 2 % of an invocation's 1,000 KV operations). With
    /// tool results grouped, a two-tool step writes 2 entries: runs up to ~1,000 steps write no snapshot but
    /// their first.
    pub snapshot_every: u64,
    /// Bytes since the last snapshot must reach this multiple of its size (default 3).
    pub snapshot_growth: u64,
    /// Retries of a rate-limited or failed write (default 4: 1 s, 2 s, 4 s, 8 s); on the hot path only those
    /// that start before the lease's expiry.
    pub write_retries: u32,
    /// Most entries deleted when a finished run releases its lease (default 200; a split entry's parts go with
    /// it).
    pub prune_batch: usize,
}

impl JournalOptions {
    /// Fails with `STEADFAST_CONFIG_INVALID` for options no store can work with (a settle window of 0 gives
    /// every lease up).
    pub fn validate(&self) -> Result<()> {
        if self.settle_ms == 0 {
            return Err(Error::new(ErrorCode::ConfigInvalid, "settleMs must be at least 1 (default 1000)"));
        }
        Ok(())
    }
}

impl Default for JournalOptions {
    fn default() -> Self {
        JournalOptions {
            prefix: String::new(),
            history_limit: 50,
            settle_ms: 1_000,
            snapshot_every: 2_000,
            snapshot_growth: 3,
            write_retries: 4,
            prune_batch: 200,
        }
    }
}

/// What the journal knows about its snapshots and size (kept in the lease and the end marker).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct Progress {
    head: u64,
    snaps: Vec<u64>,
    snap_bytes: u64,
    bytes_since: u64,
    entries_since: u64,
    pruned: u64,
    finished: bool,
    /// The entries split over several values that no release pruned yet: `[seq, parts]` (a release deletes
    /// their parts with them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    split: Vec<[u64; 2]>,
}

/// How far ahead a lease's expiry may lie before a delete treats the lease as damage (see `delete`).
const DAMAGED_LEASE_AHEAD_MS: u64 = 86_400_000;

/// How long a deleted run's lease tombstone lives.
const TOMBSTONE_TTL_S: u64 = 86_400;

/// The largest journal seq (an entry's key carries 10 digits) and lease epoch a stored record may name. A
/// stored number past it is damage, not a journal (the store's arithmetic on it would overflow): the record is
/// read as corrupt.
const MAX_SEQ: u64 = 9_999_999_999;

/// The epoch of the segment a run key names (`j/<tag>/<seq>`, `end/<tag>`, `void/<tag>`, after the run's
/// prefix); `None` for any other key.
fn segment_epoch(rest: &str) -> Option<u64> {
    let (kind, tail) = rest.split_once('/')?;
    if !matches!(kind, "j" | "end" | "void") {
        return None;
    }
    tail.split('.').next()?.parse().ok()
}

fn in_range(what: &str, v: u64) -> std::result::Result<(), String> {
    match v <= MAX_SEQ {
        true => Ok(()),
        false => Err(format!("{what} {v} is out of range")),
    }
}

impl Progress {
    /// Every seq and count it names is one a journal can have (its byte counts below 2^53).
    fn check(&self) -> std::result::Result<(), String> {
        in_range("head", self.head)?;
        in_range("pruned", self.pruned)?;
        in_range("entriesSince", self.entries_since)?;
        for (what, bytes) in [("snapBytes", self.snap_bytes), ("bytesSince", self.bytes_since)] {
            if bytes >= 1 << 53 {
                return Err(format!("{what} {bytes} is out of range"));
            }
        }
        self.snaps.iter().try_for_each(|s| in_range("a snapshot seq", *s))?;
        self.split.iter().try_for_each(|[s, parts]| {
            in_range("a split entry's seq", *s)?;
            match (1..=MAX_PARTS as u64).contains(parts) {
                true => Ok(()),
                false => Err(format!("a split entry's {parts} parts are out of range")),
            }
        })
    }
}

/// Most bytes of one KV value of a journal entry. An entry over it is split over several values, its
/// **parts** (`…/<seq>/<n>`, each at most this long), written first, and a small **header** at the entry's own
/// key, written last, naming them ([`SplitHeader`]). Every journal value then fits a KV value (25 MiB) and, on
/// its own, a bulk read (25 MB), so a reader can always read it in bulk. 20 MiB: the fewest values that do.
pub const MAX_PART_BYTES: usize = 20 * 1024 * 1024;

/// Most parts of one entry (a part's key carries three digits): ~19.5 GiB, far past any entry a process holds.
const MAX_PARTS: usize = 999;

/// How a header value starts (a journal entry's JSON starts with `{"seq":`).
const SPLIT_MARK: &str = "{\"split\":";

/// A lease record or an end marker as stored: it parses, and every seq and epoch it names is in range.
fn parse_record<T: serde::de::DeserializeOwned>(
    raw: &str,
    check: impl FnOnce(&T) -> std::result::Result<(), String>,
) -> std::result::Result<T, String> {
    let v: T = serde_json::from_str(raw).map_err(|e| e.to_string())?;
    check(&v)?;
    Ok(v)
}

/// The journal store. See the module docs.
pub struct JournalStore<K: KvBackend> {
    /// The backend, its operations metered per run.
    kv: Metered<K>,
    keys: Keys,
    clock: Rc<dyn Clock>,
    sleep: Rc<dyn Sleep>,
    opts: JournalOptions,
    writers: RefCell<HashMap<String, Writer>>,
    counters: RefCell<StoreCounters>,
    /// Deletes this process made (a delete's lease owner id is unique).
    deletes: std::cell::Cell<u64>,
    seen: RefCell<SeenEntries>,
}

fn corrupt(run_id: &str, what: &str, e: impl std::fmt::Display) -> Error {
    Error::new(ErrorCode::CheckpointCorrupt, format!("run '{run_id}': {what} cannot be read: {e}")).with_run(run_id)
}

fn parse_marker(run_id: &str, raw: &str) -> Result<Progress> {
    parse_record(raw, Progress::check).map_err(|e| corrupt(run_id, "an end marker", e))
}

fn encode<T: Serialize>(v: &T) -> Result<String> {
    serde_json::to_string(v).map_err(|e| Error::internal(format!("cannot encode: {e}")))
}

impl<K: KvBackend> JournalStore<K> {
    /// A journal store over `kv`. The clock judges lease expiry; the timer spaces retries.
    pub fn new(kv: K, clock: Rc<dyn Clock>, sleep: Rc<dyn Sleep>, opts: JournalOptions) -> JournalStore<K> {
        JournalStore {
            keys: Keys::new(opts.prefix.clone()),
            kv: Metered(kv),
            clock,
            sleep,
            opts,
            writers: RefCell::new(HashMap::new()),
            counters: RefCell::new(StoreCounters::default()),
            deletes: std::cell::Cell::new(0),
            seen: RefCell::new(SeenEntries::default()),
        }
    }

    /// The backend.
    pub fn kv(&self) -> &K {
        &self.kv.0
    }

    /// Every value under `prefix` that reads as a `T`, in key order: the names page by page, then the values
    /// in bulk gets of at most [`MAX_BULK_GET`] (none when nothing is listed). A value that does not read as a
    /// `T` is left out.
    async fn list_values<T: serde::de::DeserializeOwned>(&self, prefix: &str) -> Result<Vec<T>> {
        let mut names = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let page = self.list(prefix, cursor.as_deref()).await?;
            names.extend(page.keys.into_iter().map(|k| k.name));
            match page.cursor {
                Some(c) => cursor = Some(c),
                None => break,
            }
        }
        let mut out = Vec::new();
        for chunk in names.chunks(MAX_BULK_GET) {
            out.extend(self.get_many(chunk).await?.into_iter().flatten().filter_map(|v| serde_json::from_str(&v).ok()));
        }
        Ok(out)
    }

    /// The key builder.
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    fn count(&self, f: impl FnOnce(&mut StoreCounters)) {
        f(&mut self.counters.borrow_mut());
    }

    /// Writes journal entry `seq`'s value `raw` at `key` (the hot path): one write when it fits one value
    /// ([`MAX_PART_BYTES`]), else its parts and then the header naming them, at `key` — so a reader that finds
    /// the header finds every part, and an entry whose writes stopped part way has no header and was never
    /// written as far as readers go. Returns how many parts (0: one value). Each write is retried within the
    /// lease (`expires_at`), see [`JournalStore::put_entry_value`].
    async fn write_entry(&self, run_id: &str, key: &str, seq: u64, raw: &str, expires_at: u64) -> Result<usize> {
        if raw.len() <= MAX_PART_BYTES {
            self.put_entry_value(key, raw, expires_at).await?;
            return Ok(0);
        }
        let parts = split_parts(raw, MAX_PART_BYTES);
        if parts.len() > MAX_PARTS {
            let why = format!("{} bytes is more than {MAX_PARTS} parts of {MAX_PART_BYTES} bytes", raw.len());
            return Err(Error::new(ErrorCode::StoreFailed, format!("run '{run_id}': journal entry {seq}: {why}"))
                .with_run(run_id));
        }
        for (n, part) in parts.iter().enumerate() {
            self.put_entry_value(&Keys::part(key, n), part, expires_at).await?;
        }
        let header =
            SplitHeader { seq, bytes: raw.len() as u64, parts: parts.iter().map(|p| p.len() as u64).collect() };
        self.put_entry_value(key, &encode(&SplitValue { split: header })?, expires_at).await?;
        Ok(parts.len())
    }

    /// One write of the hot path (a journal entry, a part of one, or its header): a 429 or a transient failure
    /// is retried (`WRITE_BACKOFF`, at most `write_retries` times) only while the retry starts before the
    /// lease's expiry, `expires_at` (by this process's clock): the driver does not renew the lease during a
    /// commit, and past its expiry another process may take the run over, cutting the journal before this
    /// entry. Then the failure goes back to the runtime. The key is written once, so a retry after a lost
    /// acknowledgement writes the same bytes again.
    async fn put_entry_value(&self, key: &str, value: &str, expires_at: u64) -> Result<()> {
        self.count(|c| {
            c.commit_writes += 1;
            c.commit_bytes += value.len() as u64;
            c.bytes_written += value.len() as u64;
        });
        let mut retries = 0;
        loop {
            self.count(|c| c.writes += 1);
            match self.kv.put(key, value, PutOptions::default()).await {
                Ok(()) => return Ok(()),
                Err(e) if e.retryable && retries < self.opts.write_retries => {
                    let delay = WRITE_BACKOFF.window(retries);
                    if self.clock.now_ms().saturating_add(delay) >= expires_at {
                        return Err(e);
                    }
                    self.count(|c| c.write_retries += 1);
                    self.sleep.sleep(delay).await;
                    retries += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

#[async_trait(?Send)]
impl<K: KvBackend> RunStore for JournalStore<K> {
    async fn load(&self, run_id: &str) -> Result<Option<Checkpoint>> {
        match self.load_inner(run_id).await {
            Err(e) if e.code == ErrorCode::CheckpointCorrupt => {
                self.mark_corrupt(run_id, &e).await;
                Err(e)
            }
            other => other,
        }
    }

    async fn acquire_lease(&self, run_id: &str, owner: &str, now_ms: u64, opts: &LeaseOptions) -> Result<Lease> {
        self.acquire(run_id, owner, now_ms, opts).await
    }

    async fn confirm_lease(&self, lease: &Lease) -> Result<()> {
        self.confirm(lease).await
    }

    async fn renew_lease(&self, lease: &Lease, now_ms: u64, opts: &LeaseOptions) -> Result<Lease> {
        self.renew(lease, now_ms, opts).await
    }

    async fn release_lease(&self, lease: &Lease) -> Result<()> {
        self.release(lease).await
    }

    async fn commit(&self, lease: &Lease, entry: &JournalEntry, state: &Checkpoint) -> Result<()> {
        let run_id = &lease.run_id;
        let Some(rec) = self.writer_of(lease) else {
            return Err(Error::busy(run_id, "this process no longer holds its lease"));
        };
        if self.clock.now_ms() >= rec.expires_at {
            // Our lease may have been taken over: check before writing (off the hot path).
            match self.read_lease(run_id).await? {
                Some(cur) if cur.owner == lease.owner && cur.epoch == lease.epoch => {}
                _ => {
                    self.writers.borrow_mut().remove(run_id);
                    return Err(Error::busy(run_id, "its lease expired and another process took over"));
                }
            }
        }
        // Entry 1 creates the run only if the journal this lease's acquisition read is empty.
        super::check_next_seq(run_id, entry.seq, rec.progress.head)?;
        let p = &rec.progress;
        let is_snapshot = matches!(entry.body, EntryBody::Snapshot { .. });
        let due = !is_snapshot
            && p.entries_since + 1 >= self.opts.snapshot_every
            && p.bytes_since >= self.opts.snapshot_growth.saturating_mul(p.snap_bytes);
        // A periodic snapshot is an optimisation: one that would not fit one value (it would take several writes
        // where the delta takes one), or (were it possible) one the encoder refuses, is not written, the entry
        // stays a delta (and the next attempt waits another `snapshot_every` entries).
        let snapshot = if due {
            let state = Box::new(state.clone());
            JournalEntry { seq: entry.seq, at: entry.at, body: EntryBody::Snapshot { state } }
                .encode()
                .ok()
                .filter(|raw| raw.len() <= MAX_PART_BYTES)
        } else {
            None
        };
        let skipped_snapshot = due && snapshot.is_none();
        let want_snapshot = is_snapshot || snapshot.is_some();
        let raw = match snapshot {
            Some(raw) => raw,
            None => entry.encode().map_err(|e| e.with_run(run_id))?,
        };
        let key = self.keys.entry(run_id, &rec.tag(), entry.seq);
        self.count(|c| c.commits += 1);
        let parts = self.write_entry(run_id, &key, entry.seq, &raw, rec.expires_at).await?;
        if self.clock.now_ms() >= rec.expires_at {
            // Written after the lease expired (by this process's clock): reported as committed only while the
            // lease is still this writer's (past its expiry another process may have cut the journal before it).
            match self.read_lease(run_id).await? {
                Some(cur) if cur.owner == lease.owner && cur.epoch == lease.epoch => {}
                _ => {
                    self.writers.borrow_mut().remove(run_id);
                    return Err(Error::busy(
                        run_id,
                        "its lease expired while its entry was written, and was taken over",
                    ));
                }
            }
        }
        let finished = state.status == RunStatus::Finished;
        let now = self.clock.now_ms();
        let index_write = {
            let mut writers = self.writers.borrow_mut();
            let Some(w) = writers.get_mut(run_id) else { return Err(Error::busy(run_id, "lease lost during commit")) };
            let p = &mut w.rec.progress;
            p.head = entry.seq;
            if parts > 0 {
                p.split.push([entry.seq, parts as u64]);
            }
            if want_snapshot {
                p.snaps.push(entry.seq);
                p.snap_bytes = raw.len() as u64;
                p.bytes_since = 0;
                p.entries_since = 0;
            } else {
                p.bytes_since += raw.len() as u64;
                p.entries_since = if skipped_snapshot { 0 } else { p.entries_since + 1 };
            }
            p.finished = finished;
            let unlisted = w.index.is_none();
            let op = w.plan_index(finished, IndexMeta::of(state), now);
            match op {
                Some(op) if w.confirmed => Some(op),
                // A run nobody lists yet (a new run) is listed at once, so a crash before the confirmation
                // leaves it recoverable; changes and deletes of a shared entry wait for the confirmation.
                Some(IndexOp::Put(meta)) if unlisted => Some(IndexOp::Put(meta)),
                Some(_) => {
                    w.index_dirty = true;
                    None
                }
                None => None,
            }
        };
        // The entry is durable: the commit has succeeded whatever happens to the index, a secondary record.
        // Reporting a failed commit here would make the runtime redo a recorded step; a failed index write is
        // repaired later instead (`write_index`).
        if let Some(op) = index_write {
            self.write_index(run_id, op, false).await;
        }
        Ok(())
    }

    async fn delete(&self, run_id: &str) -> Result<()> {
        self.writers.borrow_mut().remove(run_id);
        self.forget_entries(run_id);
        let prefix = self.keys.run_prefix(run_id);
        let lease_key = self.keys.lease(run_id);
        // KV fences nothing atomically, so a delete first takes the run's lease as any acquirer does (refused with
        // `STEADFAST_SESSION_BUSY` while an execution holds it, confirmed past the settle window): no execution
        // then writes the lease record over the tombstone below (a renewal that read the record before it) or an
        // entry after the keys are listed. A lease that cannot be read does not stop a delete.
        let owner = format!("delete-{}-{}", self.clock.now_ms(), self.deletes.get());
        self.deletes.set(self.deletes.get() + 1);
        let held = match self.acquire_lease(run_id, &owner, self.clock.now_ms(), &LeaseOptions::default()).await {
            Ok(lease) => {
                self.confirm_lease(&lease).await?;
                Some(lease.epoch)
            }
            Err(e) if e.code == ErrorCode::CheckpointCorrupt => None,
            // A lease "held" for more than a day ahead was written by no live execution (leases last seconds to
            // minutes, renewed): it is damage, and does not stop a delete either.
            Err(e) if e.code == ErrorCode::SessionBusy => match self.read_lease(run_id).await {
                Ok(Some(cur)) if cur.expires_at > self.clock.now_ms().saturating_add(DAMAGED_LEASE_AHEAD_MS) => None,
                _ => return Err(e),
            },
            Err(e) => return Err(e),
        };
        self.writers.borrow_mut().remove(run_id);
        // The index entry before the run: a run created under this id once the tombstone is written lists itself
        // after this (its first commit), so its entry is never the one removed here. (An execution that took
        // the lease before the tombstone is deleted with the run: its next write is fenced.)
        self.delete_retrying(&self.keys.pending(run_id)).await?;
        // The tombstone next: from its write on, readers find no run (never a half-deleted journal), and a new
        // run under this id starts past its epoch. It names the newest epoch deleted (the delete's own lease):
        // the keys of that epoch and older are this run's; a run created afterwards writes newer ones.
        let epoch = match held {
            Some(epoch) => epoch,
            // The lease cannot be read: the run is deleted up to the newest epoch its keys name.
            None => {
                let mut newest = 0;
                let mut cursor: Option<String> = None;
                loop {
                    let page = self.list(&prefix, cursor.as_deref()).await?;
                    for k in &page.keys {
                        let rest = &k.name[prefix.len().min(k.name.len())..];
                        newest = newest.max(segment_epoch(rest).filter(|e| *e < MAX_SEQ).unwrap_or(0));
                    }
                    match page.cursor {
                        Some(c) => cursor = Some(c),
                        None => break newest,
                    }
                }
            }
        };
        let tombstone = LeaseRecord {
            owner: String::new(),
            epoch,
            expires_at: 0,
            chain: Vec::new(),
            from: 0,
            progress: Progress::default(),
            written_at: self.clock.now_ms(),
            deleted: true,
        };
        let ttl = PutOptions { metadata: None, expiration_ttl_s: Some(TOMBSTONE_TTL_S) };
        self.put_retrying(&lease_key, &encode(&tombstone)?, ttl).await?;
        let mut cursor: Option<String> = None;
        loop {
            let page = self.list(&prefix, cursor.as_deref()).await?;
            for k in &page.keys {
                let rest = &k.name[prefix.len().min(k.name.len())..];
                if k.name == lease_key || segment_epoch(rest).is_some_and(|e| e > epoch) {
                    continue;
                }
                self.delete_retrying(&k.name).await?;
            }
            match page.cursor {
                Some(c) => cursor = Some(c),
                None => return Ok(()),
            }
        }
    }

    async fn history(&self, run_id: &str, limit: usize) -> Result<Vec<HistoryEntry>> {
        match self.history_inner(run_id, limit).await {
            Err(e) if e.code == ErrorCode::CheckpointCorrupt => {
                self.mark_corrupt(run_id, &e).await;
                Err(e)
            }
            other => other,
        }
    }

    async fn pending(&self) -> Result<Vec<PendingRun>> {
        self.pending_runs().await
    }

    async fn pending_page(&self, cursor: Option<&str>, limit: usize) -> Result<PendingPage> {
        self.pending_runs_page(cursor, limit).await
    }

    async fn check_pending(&self, runs: &[PendingRun]) -> Result<Vec<bool>> {
        self.check_pending_runs(runs).await
    }

    async fn put_approval(&self, record: &ApprovalRecord) -> Result<()> {
        let v = encode(record)?;
        self.put_retrying(&self.keys.approval(&record.id), &v, PutOptions::default()).await
    }

    async fn get_approval(&self, id: &str) -> Result<Option<ApprovalRecord>> {
        match self.get(&self.keys.approval(id)).await? {
            None => Ok(None),
            Some(s) => serde_json::from_str(&s)
                .map(Some)
                .map_err(|e| Error::new(ErrorCode::CheckpointCorrupt, format!("approval '{id}' cannot be read: {e}"))),
        }
    }

    async fn list_approvals(&self) -> Result<Vec<ApprovalRecord>> {
        // Unreadable records are left out: see `RunStore::list_approvals`.
        let mut out: Vec<ApprovalRecord> = self.list_values(&self.keys.approval_prefix()).await?;
        sort_approvals(&mut out);
        Ok(out)
    }

    async fn delete_approval(&self, id: &str) -> Result<()> {
        self.delete_retrying(&self.keys.approval(id)).await
    }

    async fn put_due(&self, due: &DueWait) -> Result<()> {
        self.put_retrying(&self.keys.due(due), "", PutOptions::default()).await
    }

    /// Lists from the index's start (KV lists in byte order, which is time order here) and stops at the first
    /// entry not yet due: one list operation while fewer than a page of waits are due.
    async fn list_due(&self, until: u64, limit: usize) -> Result<Vec<DueWait>> {
        let prefix = self.keys.due_prefix();
        let mut out = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let page = self.list(&prefix, cursor.as_deref()).await?;
            match (self.keys.take_due(&page.keys, until, limit, &mut out), page.cursor) {
                (false, Some(c)) => cursor = Some(c),
                _ => return Ok(out),
            }
        }
    }

    async fn delete_due(&self, due: &DueWait) -> Result<()> {
        self.delete_retrying(&self.keys.due(due)).await
    }

    async fn put_queued(&self, msg: &QueuedMessage) -> Result<()> {
        self.put_retrying(&self.keys.queued(msg), &encode(msg)?, PutOptions::default()).await
    }

    /// One list operation when the queue is empty (the common case at a step boundary).
    async fn list_queued(&self, run_id: &str) -> Result<Vec<QueuedMessage>> {
        let mut out: Vec<QueuedMessage> = self.list_values(&self.keys.queue_prefix(run_id)).await?;
        sort_queue(&mut out);
        Ok(out)
    }

    async fn delete_queued(&self, msg: &QueuedMessage) -> Result<()> {
        self.delete_retrying(&self.keys.queued(msg)).await
    }

    async fn get_state(&self, name: &str) -> Result<Option<String>> {
        self.get(&self.keys.state(name)).await
    }

    async fn put_state(&self, name: &str, value: &str) -> Result<()> {
        self.put_retrying(&self.keys.state(name), value, PutOptions::default()).await
    }

    fn counters(&self) -> StoreCounters {
        *self.counters.borrow()
    }
}
