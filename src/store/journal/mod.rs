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

use super::index::{IndexMeta, IndexOp};
use super::keys::Keys;
use super::kv::{
    is_bulk_too_large, KvBackend, PutOptions, MAX_BULK_GET, MAX_BULK_GET_BYTES, MAX_LIST_LIMIT, MAX_VALUE_BYTES,
};
use super::object::split_parts;
use super::{sort_approvals, HistoryEntry, Lease, LeaseOptions, PendingPage, PendingRun, RunStore, StoreCounters};
use crate::core::approval::ApprovalRecord;
use crate::core::backoff::Backoff;
use crate::core::checkpoint::{Checkpoint, EntryBody, JournalEntry, RunStatus};
use crate::core::error::{Error, ErrorCode, Result};
use crate::time::{Clock, Sleep};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::rc::Rc;

/// Reads that fail transiently: 200, 400, 800 ms (`READ_RETRIES` retries).
const READ_BACKOFF: Backoff = Backoff::exponential(200, u64::MAX);
/// Retries of a read that fails transiently.
const READ_RETRIES: u32 = 3;
/// Writes off the hot path and lease renewals: 1 s, 2 s, 4 s … (`write_retries` retries; a renewal stops at its
/// lease's expiry).
const WRITE_BACKOFF: Backoff = Backoff::exponential(1_000, u64::MAX);
/// A lease write refused with 429 while acquiring: KV's one second per key, every time.
const LEASE_RATE_LIMITED: Backoff = Backoff::constant(1_000);
/// A lease write that failed transiently while acquiring: a short look again, every time.
const LEASE_TRANSIENT: Backoff = Backoff::constant(200);

/// How far back (by this process's clock) a lease record's own write may lie and still explain a 429 on the
/// lease key: KV's one second, plus clock skew between processes.
const LEASE_429_SKEW_MS: u64 = 3_000;

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

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Segment {
    tag: String,
    from: u64,
    to: u64,
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

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct LeaseRecord {
    owner: String,
    epoch: u64,
    expires_at: u64,
    #[serde(default)]
    chain: Vec<Segment>,
    #[serde(default)]
    from: u64,
    #[serde(default)]
    progress: Progress,
    /// When this record was written (the writer's clock): tells whether a 429 on the lease key is explained by
    /// this record's own write.
    #[serde(default)]
    written_at: u64,
    /// A deleted run's tombstone (it expires after [`TOMBSTONE_TTL_S`]): the run does not exist. Kept instead of
    /// deleting the key, so that an acquirer whose write gets a 429 sees what explains it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    deleted: bool,
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

/// The header of an entry split over several values (stored as `{"split": …}` at the entry's key).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct SplitHeader {
    /// The entry's seq.
    seq: u64,
    /// The entry's bytes (the parts joined).
    bytes: u64,
    /// Each part's bytes, in order.
    parts: Vec<u64>,
}

#[derive(Serialize, Deserialize)]
struct SplitValue {
    split: SplitHeader,
}

impl SplitHeader {
    /// The header of entry `seq` as stored: it parses, names its seq, and its parts (1 to [`MAX_PARTS`], each a
    /// KV value) add up to its bytes.
    fn parse(raw: &str, seq: u64) -> std::result::Result<SplitHeader, String> {
        let h = serde_json::from_str::<SplitValue>(raw).map_err(|e| e.to_string())?.split;
        if h.seq != seq {
            return Err(format!("its header says seq {}", h.seq));
        }
        if h.parts.is_empty() || h.parts.len() > MAX_PARTS {
            return Err(format!("its header names {} parts", h.parts.len()));
        }
        if h.parts.iter().any(|n| *n > MAX_VALUE_BYTES as u64) || h.parts.iter().sum::<u64>() != h.bytes {
            return Err(format!("its header's parts {:?} do not make its {} bytes", h.parts, h.bytes));
        }
        Ok(h)
    }
}

/// How many journal entries that should exist one read of a run's journal asks for in one bulk get: all of a
/// batch (up to [`MAX_BULK_GET`] keys) until the read has seen a large value, then as many as fit
/// [`MAX_BULK_GET_BYTES`] at the largest value seen so far. Keys that should hold nothing (past the head, past
/// a missing entry: the gap probe) are not counted, so probing past the end stays one bulk get. One per read,
/// so a large run never narrows the reads of a small one. A batch that is over 25 MB all the same (values
/// larger than any seen before) is read in halves ([`JournalStore::get_many_sized`]).
#[derive(Default)]
struct ReadWidth {
    largest: Cell<usize>,
}

impl ReadWidth {
    /// Entries that should exist to ask for in one bulk get.
    fn keys(&self) -> usize {
        (MAX_BULK_GET_BYTES / self.largest.get().max(1)).clamp(1, MAX_BULK_GET)
    }

    fn saw<'a>(&self, values: impl IntoIterator<Item = &'a Option<String>>) {
        let n = values.into_iter().flatten().map(String::len).max().unwrap_or(0);
        self.largest.set(self.largest.get().max(n));
    }
}

/// A lease record or an end marker as stored: it parses, and every seq and epoch it names is in range.
fn parse_record<T: serde::de::DeserializeOwned>(
    raw: &str,
    check: impl FnOnce(&T) -> std::result::Result<(), String>,
) -> std::result::Result<T, String> {
    let v: T = serde_json::from_str(raw).map_err(|e| e.to_string())?;
    check(&v)?;
    Ok(v)
}

impl LeaseRecord {
    fn check(&self) -> std::result::Result<(), String> {
        in_range("epoch", self.epoch)?;
        in_range("from", self.from)?;
        self.chain
            .iter()
            .try_for_each(|s| in_range("a segment's start", s.from).and(in_range("a segment's end", s.to)))?;
        self.progress.check()
    }

    fn parse(raw: &str) -> std::result::Result<LeaseRecord, String> {
        parse_record(raw, LeaseRecord::check)
    }

    fn tag(&self) -> String {
        Keys::tag(self.epoch, &self.owner)
    }

    fn tag_for(&self, seq: u64) -> Option<String> {
        if seq >= self.from {
            return Some(self.tag());
        }
        self.chain.iter().find(|s| s.from <= seq && seq <= s.to).map(|s| s.tag.clone())
    }
}

/// How far past a missing journal entry a reader looks for a later one (one bulk get's worth).
const GAP_PROBE: u64 = MAX_BULK_GET as u64;
/// Most list pages read to decide whether a key is listed (a page may be empty but not the last).
const GAP_LIST_PAGES: usize = 4;
/// Most times a read starts over because the journal changed under it (grew, or a release pruned it).
const READ_RESTARTS: usize = 4;
struct Writer {
    epoch: u64,
    owner: String,
    rec: LeaseRecord,
    /// What the pending index holds for the run, as far as this writer knows (what it last wrote).
    index: Option<IndexMeta>,
    /// When this writer last wrote the index (a key is not written twice within a second).
    index_at: Option<u64>,
    /// The last index write failed (or was deferred until the lease was confirmed): `index` is what it should
    /// hold; written at the next boundary, at confirmation or at release.
    index_dirty: bool,
    /// Earliest time of the read-back that confirms the lease (its write's acknowledgement + `settle_ms`).
    confirm_at: u64,
    /// The read-back saw this writer's record: it owns the lease.
    confirmed: bool,
}

impl Writer {
    /// The index write a boundary with `meta` needs (and records it as what the index holds).
    fn plan_index(&mut self, finished: bool, meta: IndexMeta, now: u64) -> Option<IndexOp> {
        let recent = self.index_at.is_some_and(|t| now.saturating_sub(t) < 1_000);
        if finished {
            // Deleting an index entry this writer wrote less than a second ago would be refused (429): leave
            // it; `pending()` sees from the segment's end marker that the run finished, and drops it.
            let had = self.index.take().is_some() || self.index_dirty;
            self.index_dirty = false;
            (had && !recent).then_some(IndexOp::Delete)
        } else if self.index.as_ref().is_none_or(|old| !old.same(&meta)) {
            self.index = Some(meta.clone());
            Some(IndexOp::Put(meta))
        } else if self.index_dirty && !recent {
            // Unchanged, but the last write failed: repair it (at most once a second).
            self.index.clone().map(IndexOp::Put)
        } else {
            None
        }
    }

    /// The repair of a failed index write, at release.
    fn repair_index(&self) -> Option<IndexOp> {
        if !self.index_dirty {
            return None;
        }
        match &self.index {
            Some(meta) if !self.rec.progress.finished => Some(IndexOp::Put(meta.clone())),
            _ => Some(IndexOp::Delete),
        }
    }
}

/// The journal store. See the module docs.
pub struct JournalStore<K: KvBackend> {
    kv: K,
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

/// Journal entries this process has read, for one run at a time (raw, by key), so that the reads of one
/// execution — the read before its lease, the takeover probe, the fold under the lease — fetch each entry
/// once. An entry's key names its segment (epoch and owner) and seq and is written once, so a key read once
/// keeps its value: serving it again is what reading it again would show, never a state that was not
/// written. Only entries that parsed (with their own seq) are kept; end markers and the index are always read,
/// and the lease is read again except by the one acquisition that follows a recent read of it (see
/// [`SeenEntries::lease`]). Kept from a read without the lease until the next read under it, the release or a
/// delete; reading another run replaces it (at most one run's entries are held).
#[derive(Default)]
struct SeenEntries {
    run_id: String,
    raw: HashMap<String, String>,
    /// The lease as the last read without the lease saw it, with the time that read started: the next
    /// acquisition of this run decides on it (its settle window counts from that start) instead of reading the
    /// lease again, if it is recent (see [`JournalStore::fresh_lease_read`]). Taken by that acquisition.
    lease: Option<(Option<LeaseRecord>, u64)>,
}

impl SeenEntries {
    /// Makes `run_id` the run whose reads are kept, dropping another run's.
    fn switch_to(&mut self, run_id: &str) {
        if self.run_id != run_id {
            self.run_id = run_id.to_string();
            self.raw.clear();
            self.lease = None;
        }
    }
}

/// Age (ms) past which the pending-index entry of a run without a lease (deleted) is dropped: far beyond any
/// propagation delay, so a missing lease is not this location's stale view of a new run.
const ORPHAN_INDEX_MS: u64 = 3_600_000;

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
            kv,
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
        &self.kv
    }

    /// The key builder.
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    fn count(&self, f: impl FnOnce(&mut StoreCounters)) {
        f(&mut self.counters.borrow_mut());
    }

    /// A read, retried (`READ_BACKOFF`, at most `READ_RETRIES` times) when the backend fails transiently.
    async fn read_retrying<T, F, Fut>(&self, mut op: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let mut retries = 0;
        loop {
            self.count(|c| c.reads += 1);
            match op().await {
                Err(e) if e.code == ErrorCode::StoreUnavailable && retries < READ_RETRIES => {
                    self.sleep.sleep(READ_BACKOFF.window(retries)).await;
                    retries += 1;
                }
                other => return other,
            }
        }
    }

    async fn get(&self, key: &str) -> Result<Option<String>> {
        self.read_retrying(|| self.kv.get(key)).await
    }

    /// `keys`' values (at most [`MAX_BULK_GET`] keys), in bulk gets sized to KV's limits
    /// ([`JournalStore::get_many_sized`]).
    async fn get_many(&self, keys: &[String]) -> Result<Vec<Option<String>>> {
        self.get_many_sized(keys).await
    }

    /// `keys`' values (at most [`MAX_BULK_GET`] keys) in one bulk get when KV allows it. A bulk get KV refuses as
    /// too large (its values total over 25 MB: HTTP 413, one operation spent) is read again as two halves, and so
    /// on; a single key it refuses (a value over 25 MB alone: KV stores values up to 25 MiB) is read with `get`.
    /// So every stored value is readable; callers that read many large values size their batches
    /// ([`ReadWidth`]) so that this rarely happens.
    async fn get_many_sized(&self, keys: &[String]) -> Result<Vec<Option<String>>> {
        let mut out = Vec::with_capacity(keys.len());
        // The ranges still to read, the next one on top.
        let mut todo = vec![0..keys.len()];
        while let Some(r) = todo.pop() {
            if r.is_empty() {
                continue;
            }
            match self.read_retrying(|| self.kv.get_many(&keys[r.clone()])).await {
                Ok(values) => out.extend(values),
                Err(e) if is_bulk_too_large(&e) && r.len() > 1 => {
                    let mid = r.start + r.len() / 2;
                    todo.push(mid..r.end);
                    todo.push(r.start..mid);
                }
                Err(e) if is_bulk_too_large(&e) => out.push(self.get(&keys[r.start]).await?),
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// `keys`' values: the first `fixed` (leases, markers, the index) read from KV, the journal entries after
    /// them from [`SeenEntries`] when this process has read them, else from KV: one bulk get for all that is
    /// read (halved while KV refuses it as too large), none when every value was seen. `width` learns the sizes.
    async fn get_entries(
        &self,
        run_id: &str,
        keys: &[String],
        fixed: usize,
        width: &ReadWidth,
    ) -> Result<Vec<Option<String>>> {
        let mut out: Vec<Option<String>> = vec![None; keys.len()];
        let mut fetch = Vec::new();
        {
            let seen = self.seen.borrow();
            let known = seen.run_id == run_id;
            for (i, k) in keys.iter().enumerate() {
                match seen.raw.get(k).filter(|_| known && i >= fixed) {
                    Some(raw) => out[i] = Some(raw.clone()),
                    None => fetch.push(i),
                }
            }
        }
        if !fetch.is_empty() {
            let wanted: Vec<String> = fetch.iter().map(|&i| keys[i].clone()).collect();
            let values = self.get_many_sized(&wanted).await?;
            width.saw(&values);
            for (i, v) in fetch.into_iter().zip(values) {
                out[i] = v;
            }
        }
        Ok(out)
    }

    /// Keeps a journal entry this process read (see [`SeenEntries`]).
    fn remember_entry(&self, run_id: &str, key: &str, raw: &str) {
        let mut seen = self.seen.borrow_mut();
        seen.switch_to(run_id);
        seen.raw.entry(key.to_string()).or_insert_with(|| raw.to_string());
    }

    /// Drops what is kept for `run_id` (see [`SeenEntries`]).
    fn forget_entries(&self, run_id: &str) {
        let mut seen = self.seen.borrow_mut();
        if seen.run_id == run_id {
            seen.raw = HashMap::new();
            seen.lease = None;
        }
    }

    async fn list(&self, prefix: &str, cursor: Option<&str>) -> Result<super::kv::ListPage> {
        self.read_retrying(|| self.kv.list(prefix, cursor, MAX_LIST_LIMIT)).await
    }

    /// A write off the hot path: retried (`WRITE_BACKOFF`, at most `write_retries` times) on 429 and
    /// transient failures.
    async fn write_retrying<F, Fut>(&self, mut op: F) -> Result<()>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<()>>,
    {
        let mut retries = 0;
        loop {
            self.count(|c| c.writes += 1);
            match op().await {
                Ok(()) => return Ok(()),
                Err(e) if e.retryable && retries < self.opts.write_retries => {
                    self.count(|c| c.write_retries += 1);
                    self.sleep.sleep(WRITE_BACKOFF.window(retries)).await;
                    retries += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn put_retrying(&self, key: &str, value: &str, opts: PutOptions) -> Result<()> {
        self.count(|c| c.bytes_written += value.len() as u64);
        self.write_retrying(|| self.kv.put(key, value, opts.clone())).await
    }

    async fn delete_retrying(&self, key: &str) -> Result<()> {
        self.write_retrying(|| self.kv.delete(key)).await
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

    async fn read_lease(&self, run_id: &str) -> Result<Option<LeaseRecord>> {
        match self.get(&self.keys.lease(run_id)).await? {
            None => Ok(None),
            Some(s) => LeaseRecord::parse(&s).map(Some).map_err(|e| corrupt(run_id, "the lease", e)),
        }
    }

    /// The newest snapshot seq at or before `at` (1 when none is known).
    fn snapshot_at_or_before(rec: &LeaseRecord, at: u64) -> u64 {
        rec.progress.snaps.iter().copied().filter(|s| *s <= at).max().unwrap_or(1).max(1)
    }

    /// Where a fold that must reach the state at `at` starts: the newest snapshot at or before `at` that no
    /// release pruned, else the oldest one kept (older states are gone), else entry 1 (a run's first entry is a
    /// snapshot).
    fn fold_start(p: &Progress, at: u64) -> u64 {
        let floor = p.pruned.max(1);
        let kept = || p.snaps.iter().copied().filter(move |s| *s >= floor);
        kept().filter(|s| *s <= at).max().or_else(|| kept().min()).unwrap_or(1)
    }

    /// Whether KV lists `key` (`None`: the listing did not say within [`GAP_LIST_PAGES`] pages).
    async fn listed(&self, key: &str) -> Result<Option<bool>> {
        let mut cursor: Option<String> = None;
        for _ in 0..GAP_LIST_PAGES {
            let page = self.list(key, cursor.as_deref()).await?;
            if page.keys.iter().any(|k| k.name == key) {
                return Ok(Some(true));
            }
            match page.cursor {
                Some(c) => cursor = Some(c),
                None => return Ok(Some(false)),
            }
        }
        Ok(None)
    }

    /// Judges a gap: journal entry `missing` is not there while a later record is (`later`: what it is, and its
    /// key — a later entry, or the end marker of a segment, written after every entry before it; `before`: an
    /// entry before the missing one that this reader has read). A write that was acknowledged and lost, or an
    /// entry deleted, is corruption (`STEADFAST_CHECKPOINT_CORRUPT`): folding past the gap, or ending the
    /// journal at it, would drop recorded steps and make a resume redo them. But a reader may also just not see
    /// the entry yet — a cached miss in another location, a write racing the read, a release pruning under it.
    /// KV's listing decides: it shows keys as of one moment, and the run's records are written in order, so the
    /// later record listed without the missing entry (and with the entry before it, which pruning deletes first)
    /// is a loss. Anything less certain is retryable (`STEADFAST_STORE_UNAVAILABLE`); the listing catches up
    /// within the propagation delay. Costs a few list operations, only when a gap is seen.
    async fn judge_gap(
        &self,
        run_id: &str,
        missing: (&str, &str),
        later: (&str, &str),
        before: Option<&str>,
    ) -> Result<Error> {
        let (m, what) = (missing.0, later.0);
        let checks = [Some((missing.1, false)), Some((later.1, true)), before.map(|b| (b, true))];
        for (key, want) in checks.into_iter().flatten() {
            if self.listed(key).await? != Some(want) {
                let msg = format!("run '{run_id}': {m} is not visible here yet while {what} is; retry");
                return Ok(Error::new(ErrorCode::StoreUnavailable, msg).with_run(run_id));
            }
        }
        let why =
            format!("it is missing while {what} exists (a lost or deleted write; resuming would redo recorded steps)");
        Ok(corrupt(run_id, m, why))
    }

    /// The value of journal entry `seq` read at `key`: `raw` itself, or — when `raw` is the header of an entry
    /// split over several values ([`MAX_PART_BYTES`]) — its parts, read in bulk gets packed by the sizes the
    /// header names, and joined; with how many parts there were (0: not split). A part missing while its header
    /// (written after every part) exists is judged like a gap ([`JournalStore::judge_gap`]): not visible here
    /// yet (retryable), or lost (corrupt).
    async fn join_entry(&self, run_id: &str, seq: u64, key: &str, raw: String) -> Result<(String, usize)> {
        if !raw.starts_with(SPLIT_MARK) {
            return Ok((raw, 0));
        }
        let what = format!("journal entry {seq}");
        let header = SplitHeader::parse(&raw, seq).map_err(|e| corrupt(run_id, &what, e))?;
        let sizes = &header.parts;
        let mut joined = String::new();
        let mut next = 0;
        while next < sizes.len() {
            // As many parts as one bulk get returns (at least one: each part fits a bulk get on its own).
            let (from, mut bytes) = (next, 0u64);
            while next < sizes.len()
                && next - from < MAX_BULK_GET
                && (next == from || bytes + sizes[next] <= MAX_BULK_GET_BYTES as u64)
            {
                bytes += sizes[next];
                next += 1;
            }
            let keys: Vec<String> = (from..next).map(|n| Keys::part(key, n)).collect();
            let values = self.get_many_sized(&keys).await?;
            for ((n, part), part_key) in (from..next).zip(values).zip(&keys) {
                let Some(part) = part else {
                    let missing = format!("part {n} of {what}");
                    return Err(self
                        .judge_gap(run_id, (&missing, part_key), (&format!("{what}'s header"), key), None)
                        .await?);
                };
                if part.len() as u64 != sizes[n] {
                    let why = format!("its part {n} is {} bytes where its header says {}", part.len(), sizes[n]);
                    return Err(corrupt(run_id, &what, why));
                }
                joined.push_str(&part);
            }
        }
        Ok((joined, sizes.len()))
    }

    /// Reads a run's journal from the fold start `start_of(progress)` to its end; returns the entries and
    /// their raw sizes.
    ///
    /// `own`: `rec` is this process's writer record, whose head is the end. Otherwise `rec` is the lease as
    /// read from KV, whose head is a hint (written at acquire and renewal): the current segment's end marker is
    /// read in the same bulk get as the first entries, and when the segment was released, the marker's progress
    /// — its final head, and what the release pruned — replaces the lease's (a finished run's release deletes
    /// old entries, possibly every one the lease's view would start from).
    ///
    /// A missing entry is never skipped, nor taken for the end while something follows it: past a missing
    /// entry the reader looks [`GAP_PROBE`] entries further (within the known head, when it is exact). A later
    /// entry there is a gap ([`JournalStore::judge_gap`]); a missing entry the head says exists, with nothing
    /// after it, is not visible here yet (retryable); past a head hint with nothing after it, the journal ends.
    async fn read_entries(
        &self,
        run_id: &str,
        rec: &mut LeaseRecord,
        own: bool,
        start_of: &dyn Fn(&Progress) -> u64,
    ) -> Result<Vec<(JournalEntry, u64)>> {
        let mut exact = own;
        let mut marker_read = own;
        let mut start = start_of(&rec.progress);
        let width = ReadWidth::default();
        for _ in 0..READ_RESTARTS {
            let mut out: Vec<(JournalEntry, u64)> = Vec::new();
            let mut seq = start;
            let mut miss: Option<u64> = None;
            let mut later: Option<u64> = None;
            let mut restart = false;
            loop {
                let head = rec.progress.head;
                let last = match (miss, exact) {
                    (Some(m), true) => head.min(m + GAP_PROBE),
                    (Some(m), false) => m + GAP_PROBE,
                    (None, true) => head,
                    (None, false) => u64::MAX,
                };
                let marker_key = (!marker_read).then(|| self.keys.end(run_id, &rec.tag()));
                let mut keys: Vec<String> = marker_key.iter().cloned().collect();
                let mut seqs = Vec::new();
                let mut next = seq;
                // Entries that should exist (up to the head, before any missing one), at most `width` of them.
                let (cap, mut expected) = (width.keys(), 0);
                while keys.len() < MAX_BULK_GET && next <= last {
                    let should_exist = miss.is_none() && next <= rec.progress.head;
                    if should_exist && expected == cap {
                        break;
                    }
                    let Some(tag) = rec.tag_for(next) else { break };
                    keys.push(self.keys.entry(run_id, &tag, next));
                    seqs.push(next);
                    expected += usize::from(should_exist);
                    next += 1;
                }
                if seqs.is_empty() {
                    break;
                }
                let fixed = usize::from(marker_key.is_some());
                let mut values = self.get_entries(run_id, &keys, fixed, &width).await?.into_iter();
                if marker_key.is_some() {
                    marker_read = true;
                    if let Some(raw) = values.next().flatten() {
                        rec.progress = parse_marker(run_id, &raw)?;
                        exact = true;
                        let from = start_of(&rec.progress);
                        if from != start {
                            start = from;
                            restart = true;
                            break;
                        }
                    }
                }
                for ((s, v), key) in seqs.iter().zip(values).zip(&keys[fixed..]) {
                    if exact && *s > rec.progress.head {
                        break;
                    }
                    match (v, miss) {
                        (Some(raw), None) => {
                            let (raw, _) = self.join_entry(run_id, *s, key, raw).await?;
                            let e: JournalEntry = serde_json::from_str(&raw)
                                .map_err(|e| corrupt(run_id, &format!("journal entry {s}"), e))?;
                            if e.seq != *s {
                                let why = format!("it says seq {}", e.seq);
                                return Err(corrupt(run_id, &format!("journal entry {s}"), why));
                            }
                            self.remember_entry(run_id, key, &raw);
                            out.push((e, raw.len() as u64));
                        }
                        (Some(_), Some(_)) => {
                            later = Some(*s);
                            break;
                        }
                        (None, None) => miss = Some(*s),
                        (None, Some(_)) => {}
                    }
                }
                if later.is_some() {
                    break;
                }
                seq = next;
            }
            if restart {
                continue;
            }
            let Some(m) = miss else { return Ok(out) };
            // Every seq this read reached lies in a segment of `rec`: the empty default is never used.
            let key_of = |s: u64| rec.tag_for(s).map(|tag| self.keys.entry(run_id, &tag, s)).unwrap_or_default();
            let (what, later_key) = match later {
                Some(t) => (format!("entry {t}"), key_of(t)),
                // The head says the entry exists. From a segment's end marker, written after every entry of the
                // chain, it is exact, and the marker is the later record.
                None if m <= rec.progress.head && exact && !own => {
                    (format!("the end marker (head {})", rec.progress.head), self.keys.end(run_id, &rec.tag()))
                }
                None if m <= rec.progress.head => {
                    return Err(Error::new(
                        ErrorCode::StoreUnavailable,
                        format!("run '{run_id}': journal entry {m} is not visible here yet; retry"),
                    )
                    .with_run(run_id));
                }
                None => return Ok(out),
            };
            // The journal may have grown under this read (a live writer wrote the missing entry, then the later
            // one, between two bulk gets): read it again. A release may have pruned under it: its marker says so.
            let mut again = vec![key_of(m)];
            if !own {
                again.push(self.keys.end(run_id, &rec.tag()));
            }
            let mut found = self.get_many(&again).await?.into_iter();
            if found.next().flatten().is_some() {
                continue;
            }
            if let Some(raw) = found.next().flatten() {
                let marker = parse_marker(run_id, &raw)?;
                if marker.pruned > m {
                    rec.progress = marker;
                    (exact, marker_read) = (true, true);
                    start = start_of(&rec.progress);
                    continue;
                }
            }
            let before = (m > start).then(|| key_of(m - 1));
            let missing = format!("journal entry {m}");
            return Err(self.judge_gap(run_id, (&missing, &key_of(m)), (&what, &later_key), before.as_deref()).await?);
        }
        Err(Error::new(
            ErrorCode::StoreUnavailable,
            format!("run '{run_id}': its journal changed under every read (written or pruned meanwhile); retry"),
        )
        .with_run(run_id))
    }

    /// The takeover probe of the previous lease `p`'s segment (for `acquire_lease`): its end marker and the
    /// pending index are read with its first entries past the head hint, in one bulk get. With a marker (the
    /// segment was released), the marker's progress is the segment's end. Without one (its owner died or is
    /// stale) the entries past the hint are read to the first missing one and [`GAP_PROBE`] further: a later
    /// entry there is a gap, never a place to cut the segment, which would drop recorded steps
    /// ([`JournalStore::judge_gap`]; a corrupt run is marked in the index). `live`: the previous lease still
    /// holds (busy unless the segment was released). Returns the progress, the cut (the last seq kept) and the
    /// index entry.
    async fn probe_segment(
        &self,
        run_id: &str,
        p: &LeaseRecord,
        live: bool,
    ) -> Result<(Progress, u64, Option<IndexMeta>)> {
        let probed = self.probe_segment_inner(run_id, p, live).await;
        if let Err(e) = &probed {
            if e.code == ErrorCode::CheckpointCorrupt {
                self.mark_corrupt(run_id, e).await;
            }
        }
        probed
    }

    async fn probe_segment_inner(
        &self,
        run_id: &str,
        p: &LeaseRecord,
        live: bool,
    ) -> Result<(Progress, u64, Option<IndexMeta>)> {
        let tag = p.tag();
        let mut progress = p.progress.clone();
        let mut cut = p.progress.head.max(p.from.saturating_sub(1));
        let mut index = None;
        let mut first = true;
        let mut miss: Option<u64> = None;
        let mut next = cut + 1;
        let width = ReadWidth::default();
        loop {
            let mut keys = Vec::new();
            if first {
                keys.push(self.keys.end(run_id, &tag));
                keys.push(self.keys.pending(run_id));
            }
            let mut seqs = Vec::new();
            while keys.len() < MAX_BULK_GET && miss.is_none_or(|m| next <= m + GAP_PROBE) {
                keys.push(self.keys.entry(run_id, &tag, next));
                seqs.push(next);
                next += 1;
            }
            let fixed = if first { 2 } else { 0 };
            let mut values = self.get_entries(run_id, &keys, fixed, &width).await?.into_iter();
            if first {
                let end = values.next().flatten();
                // Ignored: an unreadable index entry counts as none, so this owner's first commit rewrites it.
                index = values.next().flatten().and_then(|v| serde_json::from_str::<IndexMeta>(&v).ok());
                if let Some(end) = end {
                    let marker = parse_marker(run_id, &end)?;
                    let cut = marker.head.max(p.from.saturating_sub(1));
                    return Ok((marker, cut, index));
                }
                if live {
                    return Err(Error::busy(run_id, "another process holds its lease"));
                }
                first = false;
            }
            for ((s, v), key) in seqs.into_iter().zip(values).zip(&keys[fixed..]) {
                match (v, miss) {
                    (Some(raw), None) => {
                        let (raw, parts) = self.join_entry(run_id, s, key, raw).await?;
                        let e: JournalEntry = serde_json::from_str(&raw)
                            .map_err(|e| corrupt(run_id, &format!("journal entry {s}"), e))?;
                        if e.seq != s {
                            return Err(corrupt(
                                run_id,
                                &format!("journal entry {s}"),
                                format!("it says seq {}", e.seq),
                            ));
                        }
                        self.remember_entry(run_id, key, &raw);
                        if parts > 0 {
                            progress.split.push([s, parts as u64]);
                        }
                        cut = s;
                        progress.head = s;
                        if matches!(e.body, EntryBody::Snapshot { .. }) {
                            progress.snaps.push(s);
                            progress.snap_bytes = raw.len() as u64;
                            progress.bytes_since = 0;
                            progress.entries_since = 0;
                        } else {
                            progress.bytes_since += raw.len() as u64;
                            progress.entries_since += 1;
                        }
                    }
                    (Some(_), Some(m)) => {
                        let (missing, later) = (self.keys.entry(run_id, &tag, m), self.keys.entry(run_id, &tag, s));
                        let what = format!("journal entry {m}");
                        return Err(self
                            .judge_gap(run_id, (&what, &missing), (&format!("entry {s}"), &later), None)
                            .await?);
                    }
                    (None, None) => miss = Some(s),
                    (None, Some(_)) => {}
                }
            }
            if miss.is_some_and(|m| next > m + GAP_PROBE) {
                return Ok((progress, cut, index));
            }
        }
    }

    /// Lists the run as corrupt (so the sweep and operators see it), retrying a refused write like any write
    /// off the hot path; the read that found the corruption fails with its own error whatever happens here.
    async fn mark_corrupt(&self, run_id: &str, err: &Error) {
        let meta = IndexMeta::corrupt(err);
        // Ignored: the read that found the corruption fails with its own error, and finds it (and marks it) again.
        let _ = self.put_index(run_id, &meta).await;
    }

    async fn put_index(&self, run_id: &str, meta: &IndexMeta) -> Result<()> {
        let v = encode(meta)?;
        // Ignored: `encode` above serialised the same value.
        let opts = PutOptions { metadata: serde_json::to_value(meta).ok(), expiration_ttl_s: None };
        self.put_retrying(&self.keys.pending(run_id), &v, opts).await
    }

    /// Writes the pending index after a durable boundary. A failure is not the boundary's: it marks the index
    /// dirty, and the writer repairs it at its next boundary or at release (the next acquirer compares what it
    /// finds with the run's state anyway). `retry`: retry a refused delete with backoff (at release).
    async fn write_index(&self, run_id: &str, op: IndexOp, retry: bool) {
        let res = match &op {
            IndexOp::Put(meta) => self.put_index(run_id, meta).await,
            IndexOp::Delete if retry => self.delete_retrying(&self.keys.pending(run_id)).await,
            IndexOp::Delete => {
                self.count(|c| c.writes += 1);
                self.kv.delete(&self.keys.pending(run_id)).await
            }
        };
        let now = self.clock.now_ms();
        if let Some(w) = self.writers.borrow_mut().get_mut(run_id) {
            w.index_at = Some(now);
            w.index_dirty = res.is_err();
        }
    }

    /// One write of a lease record, stamped with the time it was sent; returns the write's outcome and the time
    /// it was answered (the acknowledgement, for the settle window).
    async fn put_lease(&self, run_id: &str, rec: &mut LeaseRecord) -> Result<(Result<()>, u64)> {
        rec.written_at = self.clock.now_ms();
        // This process's own write makes any lease read it kept stale.
        self.seen.borrow_mut().lease = None;
        let value = encode(rec)?;
        self.count(|c| {
            c.writes += 1;
            c.bytes_written += value.len() as u64
        });
        let written = self.kv.put(&self.keys.lease(run_id), &value, PutOptions::default()).await;
        Ok((written, self.clock.now_ms()))
    }

    /// Marks an acquisition's lease record as given up (best effort: one write to a write-once key).
    async fn void(&self, run_id: &str, tag: &str) {
        self.count(|c| c.writes += 1);
        // Ignored: without the mark, an owner whose record this acquisition overwrote cannot restore it and stops
        // (fails closed, `STEADFAST_SESSION_BUSY`); the caller already fails with its own error.
        let _ = self.kv.put(&self.keys.void(run_id, tag), "1", PutOptions::default()).await;
    }

    /// Whether the acquisition with `tag` gave its lease up.
    async fn is_void(&self, run_id: &str, tag: &str) -> Result<bool> {
        Ok(self.get(&self.keys.void(run_id, tag)).await?.is_some())
    }

    fn writer_rec(&self, run_id: &str) -> Option<LeaseRecord> {
        self.writers.borrow().get(run_id).map(|w| w.rec.clone())
    }

    /// The record a reader starts from: this process's writer record (`true`: exact), else the lease in KV.
    async fn view(&self, run_id: &str) -> Result<Option<(LeaseRecord, bool)>> {
        if let Some(r) = self.writer_rec(run_id) {
            return Ok(Some((r, true)));
        }
        let read_at = self.clock.now_ms();
        let rec = self.read_lease(run_id).await?;
        self.remember_lease(run_id, rec.clone(), read_at);
        Ok(rec.filter(|r| !r.deleted).map(|r| (r, false)))
    }

    /// Keeps a lease read made without the lease (see [`SeenEntries::lease`]).
    fn remember_lease(&self, run_id: &str, rec: Option<LeaseRecord>, read_at: u64) {
        let mut seen = self.seen.borrow_mut();
        seen.switch_to(run_id);
        seen.lease = Some((rec, read_at));
    }

    /// The lease read kept for `run_id` and the time it started, if that was less than a quarter of the settle
    /// window ago (an acquisition must have its write acknowledged within the window of the read it decided
    /// on, so an older read would only make it give up more often); taken either way.
    fn fresh_lease_read(&self, run_id: &str) -> Option<(Option<LeaseRecord>, u64)> {
        let mut seen = self.seen.borrow_mut();
        let kept = seen.lease.take().filter(|_| seen.run_id == run_id)?;
        (self.clock.now_ms().saturating_sub(kept.1) < self.opts.settle_ms / 4).then_some(kept)
    }

    async fn load_inner(&self, run_id: &str) -> Result<Option<Checkpoint>> {
        let Some((mut rec, own)) = self.view(run_id).await? else { return Ok(None) };
        let entries = self.read_entries(run_id, &mut rec, own, &|p| Self::fold_start(p, p.head.max(1))).await;
        if own {
            // The read under the lease ends what the entries were kept for.
            self.forget_entries(run_id);
        }
        Checkpoint::fold(run_id, entries?.iter().map(|(e, _)| e))
    }

    async fn history_inner(&self, run_id: &str, limit: usize) -> Result<Vec<HistoryEntry>> {
        let keep = limit.min(self.opts.history_limit);
        if keep == 0 {
            return Ok(Vec::new());
        }
        let Some((mut rec, own)) = self.view(run_id).await? else { return Ok(Vec::new()) };
        let from = |p: &Progress| p.head.saturating_add(1).saturating_sub(keep as u64).max(1);
        let entries = self.read_entries(run_id, &mut rec, own, &|p| Self::fold_start(p, from(p))).await?;
        HistoryEntry::newest(run_id, entries.iter().map(|(e, _)| e), keep)
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
        self.keys.check_run(run_id, owner)?;
        let window = self.opts.settle_ms;
        // `seen` is the record as read (a deleted run's tombstone included); `prev` the run's live record. A read
        // this process just made (the load before the lease) is decided on as it stands, from when it started.
        let (seen, mut read_at) = match self.fresh_lease_read(run_id) {
            Some(kept) => kept,
            None => {
                let read_at = self.clock.now_ms();
                match self.read_lease(run_id).await {
                    Ok(p) => (p, read_at),
                    Err(e) => {
                        self.mark_corrupt(run_id, &e).await;
                        return Err(e);
                    }
                }
            }
        };
        let prev = seen.clone().filter(|r| !r.deleted);
        // A run created over a tombstone starts past the deleted run's epochs (their keys may still be being
        // deleted, and must not be this run's).
        let first_epoch = seen.as_ref().filter(|r| r.deleted).map_or(1, |r| r.epoch.saturating_add(1));
        let mut rec = LeaseRecord {
            owner: owner.to_string(),
            epoch: first_epoch,
            expires_at: now_ms.saturating_add(opts.ttl_ms),
            chain: Vec::new(),
            from: 1,
            progress: Progress::default(),
            written_at: 0,
            deleted: false,
        };
        let mut index = None;
        if let Some(p) = &prev {
            let live = p.owner != owner && now_ms < p.expires_at.saturating_add(opts.grace_ms);
            // Probe the previous segment past its head hint, with its end marker and the index in the same read.
            let tag = p.tag();
            let (mut progress, cut, found) = self.probe_segment(run_id, p, live).await?;
            index = found;
            rec.epoch = p.epoch + 1;
            rec.chain = p.chain.clone();
            if cut >= p.from {
                rec.chain.push(Segment { tag, from: p.from, to: cut });
            }
            rec.chain.retain(|s| s.to >= progress.pruned);
            rec.from = cut + 1;
            progress.finished = false;
            rec.progress = progress;
        }
        // The read that decided "free" must be recent when the write goes out: after a long probe, read again.
        if prev.is_some() && self.clock.now_ms().saturating_sub(read_at) > window / 2 {
            read_at = self.clock.now_ms();
            if self.read_lease(run_id).await? != seen {
                return Err(Error::busy(run_id, "its lease changed while it was being read"));
            }
        }
        let too_slow = "writing its lease took longer than the settle window; try again";
        let mut attempt = 0;
        let acked = loop {
            if self.clock.now_ms().saturating_sub(read_at) >= window {
                return Err(Error::busy(run_id, "reading its lease took longer than the settle window; try again"));
            }
            let (written, done) = self.put_lease(run_id, &mut rec).await?;
            match written {
                Ok(()) if done.saturating_sub(read_at) < window => break done,
                Ok(()) => {
                    // Its write may land after another acquirer's read-back, so its read-back would prove nothing.
                    self.void(run_id, &rec.tag()).await;
                    return Err(Error::busy(run_id, too_slow));
                }
                Err(e) if e.retryable && attempt < self.opts.write_retries => {
                    // A 429 (someone wrote this lease within the second: another acquirer, or this process when
                    // an earlier attempt's acknowledgement was lost) or a transient failure: look before writing
                    // again.
                    attempt += 1;
                    self.count(|c| c.write_retries += 1);
                    let rate_limited = e.code == ErrorCode::StoreRateLimited;
                    let backoff = if rate_limited { LEASE_RATE_LIMITED } else { LEASE_TRANSIENT };
                    self.sleep.sleep(backoff.window(attempt - 1)).await;
                    let read_again = self.clock.now_ms();
                    // Across locations this read may show an old record while another acquirer's write is what
                    // the 429 was about: an old record explains a 429 only if it was itself written within the
                    // second (give or take clock skew).
                    let explains_429 = |cur: &Option<LeaseRecord>| {
                        cur.as_ref().is_some_and(|c| c.written_at.saturating_add(LEASE_429_SKEW_MS) >= done)
                    };
                    match self.read_lease(run_id).await? {
                        // An earlier attempt landed (its acknowledgement was lost) no later than it answered.
                        Some(cur) if cur == rec && done.saturating_sub(read_at) < window => break done,
                        Some(cur) if cur == rec => {
                            self.void(run_id, &rec.tag()).await;
                            return Err(Error::busy(run_id, too_slow));
                        }
                        // Still what it decided on, and that explains the failure: decide again on this read.
                        cur if cur == seen && (!rate_limited || explains_429(&cur)) => read_at = read_again,
                        _ => return Err(Error::busy(run_id, "another process wrote its lease at the same time")),
                    }
                }
                Err(e) => {
                    if e.retryable {
                        // The write may have landed: give the record up, so a confirmed owner may restore its own.
                        self.void(run_id, &rec.tag()).await;
                    }
                    return Err(e);
                }
            }
        };
        let lease = Lease {
            run_id: run_id.to_string(),
            owner: owner.to_string(),
            epoch: rec.epoch,
            expires_at: rec.expires_at,
        };
        let writer = Writer {
            epoch: rec.epoch,
            owner: owner.to_string(),
            rec,
            index,
            index_at: None,
            index_dirty: false,
            confirm_at: acked.saturating_add(window),
            confirmed: false,
        };
        self.writers.borrow_mut().insert(run_id.to_string(), writer);
        Ok(lease)
    }

    async fn confirm_lease(&self, lease: &Lease) -> Result<()> {
        let run_id = &lease.run_id;
        let confirm_at = match self.writers.borrow().get(run_id) {
            Some(w) if w.owner == lease.owner && w.epoch == lease.epoch => (!w.confirmed).then_some(w.confirm_at),
            _ => return Err(Error::busy(run_id, "this process no longer holds its lease")),
        };
        let Some(confirm_at) = confirm_at else { return Ok(()) };
        let now = self.clock.now_ms();
        if now < confirm_at {
            self.sleep.sleep(confirm_at - now).await;
        }
        match self.read_lease(run_id).await? {
            Some(back) if back.owner == lease.owner && back.epoch == lease.epoch => {}
            _ => {
                self.writers.borrow_mut().remove(run_id);
                return Err(Error::busy(run_id, "another process took its lease at the same time"));
            }
        }
        let deferred = {
            let mut writers = self.writers.borrow_mut();
            let Some(w) = writers.get_mut(run_id) else { return Err(Error::busy(run_id, "lease lost")) };
            w.confirmed = true;
            w.repair_index()
        };
        if let Some(op) = deferred {
            self.write_index(run_id, op, false).await;
        }
        Ok(())
    }

    async fn renew_lease(&self, lease: &Lease, _now_ms: u64, opts: &LeaseOptions) -> Result<Lease> {
        let run_id = &lease.run_id;
        // Only a confirmed owner renews (a renewal before the read-back could overwrite a racing acquirer's
        // confirmed record).
        self.confirm_lease(lease).await?;
        let Some(mut rec) = self.writer_of(lease) else {
            return Err(Error::busy(run_id, "this process does not hold its lease"));
        };
        let expires_at = rec.expires_at;
        let lost = |why: &str| {
            self.writers.borrow_mut().remove(run_id);
            Err(Error::busy(run_id, why))
        };
        let mut retries = 0;
        loop {
            let delay = WRITE_BACKOFF.window(retries);
            // Fail closed: past its expiry (by this process's clock) another process may have taken over.
            let started = self.clock.now_ms();
            if started >= expires_at {
                return lost("its lease expired before it could be renewed");
            }
            // Re-read before every write, retries included: never overwrite another owner's record.
            match self.read_lease(run_id).await? {
                Some(cur) if cur.owner == lease.owner && cur.epoch == lease.epoch => {}
                Some(cur) if cur.epoch == lease.epoch && self.is_void(run_id, &cur.tag()).await? => {
                    // An acquirer that raced this owner's acquisition wrote its record too late and gave it up:
                    // restore this owner's record.
                }
                _ => return lost("another process took over its lease"),
            }
            rec.expires_at = self.clock.now_ms().saturating_add(opts.ttl_ms);
            let (written, acked) = self.put_lease(run_id, &mut rec).await?;
            match written {
                // A renewal that landed after the old expiry may have overwritten a takeover: give it up.
                Ok(()) if acked >= expires_at => {
                    self.void(run_id, &rec.tag()).await;
                    return lost("renewing its lease took until after it expired");
                }
                Ok(()) => break,
                Err(e) if e.retryable && acked.saturating_add(delay) < expires_at => {
                    self.count(|c| c.write_retries += 1);
                    self.sleep.sleep(delay).await;
                    retries += 1;
                }
                Err(e) => return Err(e),
            }
        }
        if let Some(w) = self.writers.borrow_mut().get_mut(run_id) {
            w.rec.expires_at = rec.expires_at;
        }
        Ok(Lease { expires_at: rec.expires_at, ..lease.clone() })
    }

    async fn release_lease(&self, lease: &Lease) -> Result<()> {
        self.forget_entries(&lease.run_id);
        let Some(rec) = self.writer_of(lease) else { return Ok(()) };
        let run_id = &lease.run_id;
        let mut progress = rec.progress.clone();
        // A finished run keeps only what `history_limit` states need.
        let mut deletes = Vec::new();
        if progress.finished {
            let keep_from = progress.head.saturating_add(1).saturating_sub(self.opts.history_limit.max(1) as u64);
            let floor = Self::snapshot_at_or_before(&rec, keep_from.max(1));
            let mut seq = progress.pruned.max(1);
            let mut entries = 0;
            while seq < floor && entries < self.opts.prune_batch {
                if let Some(tag) = rec.tag_for(seq) {
                    let key = self.keys.entry(run_id, &tag, seq);
                    // The parts of a split entry go with it.
                    let parts = progress.split.iter().find(|[s, _]| *s == seq).map_or(0, |[_, n]| *n as usize);
                    deletes.push(key.clone());
                    deletes.extend((0..parts).map(|n| Keys::part(&key, n)));
                    entries += 1;
                }
                seq += 1;
            }
            if seq > progress.pruned {
                // Entries from `seq` on are kept, and so is every snapshot among them: a batch that stopped short
                // of `floor` leaves deltas whose only fold start is a snapshot at or after `seq`.
                progress.pruned = seq;
                progress.snaps.retain(|s| *s >= seq);
                progress.split.retain(|[s, _]| *s >= seq);
            }
        }
        let marker = encode(&progress)?;
        self.put_retrying(&self.keys.end(run_id, &rec.tag()), &marker, PutOptions::default()).await?;
        let repair = self.writers.borrow().get(run_id).filter(|w| w.confirmed).and_then(Writer::repair_index);
        if let Some(op) = repair {
            self.write_index(run_id, op, true).await;
        }
        self.writers.borrow_mut().remove(run_id);
        for key in deletes {
            self.count(|c| c.writes += 1);
            // Ignored: the end marker already says these entries are pruned; no reader reads them again, so a
            // failed delete leaves garbage, never a wrong state.
            let _ = self.kv.delete(&key).await;
        }
        Ok(())
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
        let mut listed = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let page = self.pending_page(cursor.as_deref(), MAX_LIST_LIMIT).await?;
            listed.extend(page.runs);
            match page.cursor {
                Some(c) => cursor = Some(c),
                None => break,
            }
        }
        let fresh = self.check_pending(&listed).await?;
        let mut out: Vec<PendingRun> = listed.into_iter().zip(fresh).filter_map(|(r, f)| f.then_some(r)).collect();
        out.sort_by(|a, b| a.run_id.cmp(&b.run_id));
        Ok(out)
    }

    /// One `list` call of the pending index (a single KV operation at any backlog); entries unchecked.
    async fn pending_page(&self, cursor: Option<&str>, limit: usize) -> Result<PendingPage> {
        let prefix = self.keys.pending_prefix();
        let limit = limit.clamp(1, MAX_LIST_LIMIT);
        let page = self.read_retrying(|| self.kv.list(&prefix, cursor, limit)).await?;
        let mut runs = Vec::with_capacity(page.keys.len());
        for k in page.keys {
            let Some(run_id) = self.keys.run_of_pending(&k.name) else { continue };
            match k.metadata.and_then(|m| serde_json::from_value::<IndexMeta>(m).ok()) {
                Some(meta) if meta.s == RunStatus::Finished => {}
                Some(meta) => runs.push(meta.pending(run_id)),
                None => {
                    runs.push(PendingRun::corrupt(run_id, &corrupt(run_id, "the pending index entry", "bad metadata")))
                }
            }
        }
        Ok(PendingPage { runs, cursor: page.cursor })
    }

    /// Two bulk reads per 100 runs: the lease (a deleted run has none) and the current segment's end marker
    /// (a finished run's owner wrote one). An index entry can outlive its run's end (its delete would have been
    /// a second write within a second, or the run was deleted): a finished run's entry is dropped here once it
    /// is a second old, a deleted run's once it is an hour old (before that, a missing lease may be this
    /// location's stale view). Runs listed as corrupt are not read.
    async fn check_pending(&self, runs: &[PendingRun]) -> Result<Vec<bool>> {
        let now = self.clock.now_ms();
        let mut out = vec![true; runs.len()];
        let listed_corrupt =
            |r: &PendingRun| r.last_error.as_ref().is_some_and(|e| e.code == ErrorCode::CheckpointCorrupt);
        let to_check: Vec<usize> = (0..runs.len()).filter(|&i| !listed_corrupt(&runs[i])).collect();
        for chunk in to_check.chunks(MAX_BULK_GET) {
            let lease_keys: Vec<String> = chunk.iter().map(|&i| self.keys.lease(&runs[i].run_id)).collect();
            let leases = self.get_many(&lease_keys).await?;
            // A deleted run's tombstone counts as no lease.
            let records: Vec<Option<Result<LeaseRecord, ()>>> = leases
                .iter()
                .map(|l| match l.as_ref().map(|l| LeaseRecord::parse(l).map_err(|_| ())) {
                    Some(Ok(rec)) if rec.deleted => None,
                    other => other,
                })
                .collect();
            let leases: Vec<Option<()>> = records.iter().map(|r| r.as_ref().map(|_| ())).collect();
            let tags: Vec<Option<String>> =
                records.iter().map(|r| r.as_ref().and_then(|r| r.as_ref().ok()).map(|l| l.tag())).collect();
            let marker_keys: Vec<String> = chunk
                .iter()
                .zip(&tags)
                .filter_map(|(&i, t)| t.as_ref().map(|t| self.keys.end(&runs[i].run_id, t)))
                .collect();
            let mut markers =
                if marker_keys.is_empty() { Vec::new() } else { self.get_many(&marker_keys).await? }.into_iter();
            let mut dropped: Vec<(usize, Option<String>)> = Vec::new();
            for ((&i, lease), tag) in chunk.iter().zip(&leases).zip(&tags) {
                let run = &runs[i];
                let age = now.saturating_sub(run.saved_at);
                let drop_after = match (lease, tag) {
                    (None, _) => Some(ORPHAN_INDEX_MS),
                    (Some(_), None) => None,
                    (Some(_), Some(_)) => markers
                        .next()
                        .flatten()
                        // Ignored: an unreadable marker counts as not finished, so the run is kept and its resume
                        // reads it and reports the corruption.
                        .and_then(|m| parse_record(&m, Progress::check).ok())
                        .is_some_and(|p| p.finished)
                        .then_some(1_000),
                };
                if let Some(after) = drop_after {
                    out[i] = false;
                    if age >= after {
                        self.count(|c| c.writes += 1);
                        // Ignored: the entry is reported stale either way; a failed delete is retried next listing.
                        let _ = self.kv.delete(&self.keys.pending(&run.run_id)).await;
                        dropped.push((i, tag.clone()));
                    }
                }
            }
            // KV has no conditional delete: an execution that took the run's lease after the reads above may have
            // listed the run (its first commit) before the delete landed. Read the leases again: a run with a
            // newer lease than the one judged is listed again (its summary unknown until its next boundary; a
            // sweep checks a run before acting on it).
            if !dropped.is_empty() {
                let keys: Vec<String> = dropped.iter().map(|(i, _)| self.keys.lease(&runs[*i].run_id)).collect();
                let now_leases = self.get_many(&keys).await?;
                for ((i, judged), raw) in dropped.iter().zip(now_leases) {
                    let live = raw.and_then(|l| LeaseRecord::parse(&l).ok()).filter(|r| !r.deleted);
                    if live.is_some_and(|r| Some(r.tag()) != *judged) {
                        let meta = IndexMeta { t: now, ..IndexMeta::unknown() };
                        // Ignored: the run's next boundary lists it as well.
                        let _ = self.put_index(&runs[*i].run_id, &meta).await;
                    }
                }
            }
        }
        Ok(out)
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
        let prefix = self.keys.approval_prefix();
        let mut names = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let page = self.list(&prefix, cursor.as_deref()).await?;
            names.extend(page.keys.into_iter().map(|k| k.name));
            match page.cursor {
                Some(c) => cursor = Some(c),
                None => break,
            }
        }
        let mut out = Vec::new();
        for chunk in names.chunks(MAX_BULK_GET) {
            for v in self.get_many(chunk).await?.into_iter().flatten() {
                // Ignored (no else): see `RunStore::list_approvals` on unreadable records.
                if let Ok(r) = serde_json::from_str::<ApprovalRecord>(&v) {
                    out.push(r);
                }
            }
        }
        sort_approvals(&mut out);
        Ok(out)
    }

    async fn delete_approval(&self, id: &str) -> Result<()> {
        self.delete_retrying(&self.keys.approval(id)).await
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

impl<K: KvBackend> JournalStore<K> {
    fn writer_of(&self, lease: &Lease) -> Option<LeaseRecord> {
        let writers = self.writers.borrow();
        let w = writers.get(&lease.run_id)?;
        (w.owner == lease.owner && w.epoch == lease.epoch).then(|| w.rec.clone())
    }
}
