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
//! * **Hot path: one write per boundary** (the entry), no read, no key written twice within a second.
//! * **Fencing by construction.** A stale writer keeps writing into its own segment, past the cut, where no
//!   reader looks: its late writes are never read. It stops with `STEADFAST_SESSION_BUSY` at its next renewal,
//!   or at its next commit once its lease has expired by its own clock (then the commit re-reads the lease).
//!   `strict_fencing` is **false**: between a takeover and the stale writer's next check, its commits succeed
//!   (and are ignored).
//! * **Leases are best effort across locations.** Acquire reads the lease, writes a new one, waits `settle_ms`,
//!   reads it back. In one location this excludes a second owner; across locations a reader may see a stale
//!   lease for up to the propagation delay (60 s or more), so two owners can run at once. Their segments never
//!   collide and the final transcript stays valid, but a tool may run twice. A takeover reads every entry the
//!   previous owner wrote only if `grace_ms` ≥ the propagation delay: on production KV across locations use
//!   `ttl_ms` and `grace_ms` well above 60 s. For strict single-writer guarantees use a strongly consistent
//!   store.
//! * **Snapshots and history.** A new run starts with a snapshot entry; a later snapshot replaces a delta when
//!   `snapshot_every` entries and `snapshot_growth` × the last snapshot's bytes have accumulated since the last
//!   one, so bytes written stay O(n) and a load folds a bounded number of entries. When a finished run releases
//!   its lease, entries older than needed for `history_limit` states are deleted (at most `prune_batch`).
//! * **429s** off the hot path (lease writes racing, approvals, the index) are retried with backoff from 1 s,
//!   bounded, then fail with `STEADFAST_STORE_RATE_LIMITED` (retryable).

use super::keys::Keys;
use super::kv::{KvBackend, PutOptions, MAX_BULK_GET, MAX_LIST_LIMIT};
use super::{sort_approvals, HistoryEntry, Lease, LeaseOptions, PendingPage, PendingRun, RunStore, StoreCounters};
use crate::core::approval::ApprovalRecord;
use crate::core::checkpoint::{Checkpoint, EntryBody, JournalEntry, RunStatus};
use crate::core::error::{cap_chars, Error, ErrorCode, ErrorInfo, Result};
use crate::runtime::traits::{Clock, Sleep};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::rc::Rc;

/// Options of the journal store.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct JournalOptions {
    /// Key prefix (default empty).
    pub prefix: String,
    /// Past states kept for history and fork (default 50; 0 keeps none).
    pub history_limit: usize,
    /// Wait between writing a lease and reading it back (default 50 ms).
    pub settle_ms: u64,
    /// Entries between snapshots, at least (default 500).
    pub snapshot_every: u64,
    /// Bytes since the last snapshot must reach this multiple of its size (default 3).
    pub snapshot_growth: u64,
    /// Retries of a rate-limited or failed write off the hot path (default 4: 1 s, 2 s, 4 s, 8 s).
    pub write_retries: u32,
    /// Most entries deleted when a finished run releases its lease (default 200).
    pub prune_batch: usize,
}

impl Default for JournalOptions {
    fn default() -> Self {
        JournalOptions {
            prefix: String::new(),
            history_limit: 50,
            settle_ms: 50,
            snapshot_every: 500,
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
}

impl LeaseRecord {
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

/// The pending index entry (value and list metadata).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct IndexMeta {
    s: RunStatus,
    st: u32,
    a: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    e: Option<ErrorInfo>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    ap: Vec<String>,
    t: u64,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    q: bool,
    /// Diagnosis fork of (the checkpoint's `healOf` marker).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    h: Option<String>,
}

impl IndexMeta {
    fn of(cp: &Checkpoint) -> IndexMeta {
        IndexMeta {
            s: cp.status,
            st: cp.step_index,
            a: cp.attempts,
            e: cp.last_error.clone().map(|e| ErrorInfo { message: cap_chars(&e.message, 300), ..e }),
            ap: cp.approval_ids.iter().take(8).cloned().collect(),
            t: cp.saved_at,
            q: cp.quarantined,
            h: cp.heal_of.clone(),
        }
    }

    /// Same for the sweep's purposes (step and time aside).
    fn same(&self, other: &IndexMeta) -> bool {
        self.s == other.s
            && self.a == other.a
            && self.e == other.e
            && self.ap == other.ap
            && self.q == other.q
            && self.h == other.h
    }

    fn pending(&self, run_id: &str) -> PendingRun {
        PendingRun {
            run_id: run_id.to_string(),
            status: self.s,
            approval_id: self.ap.first().cloned(),
            approval_ids: self.ap.clone(),
            step: self.st,
            last_error: self.e.clone(),
            attempts: self.a,
            quarantined: self.q,
            saved_at: self.t,
            heal_of: self.h.clone(),
        }
    }
}

struct Writer {
    epoch: u64,
    owner: String,
    rec: LeaseRecord,
    index: Option<IndexMeta>,
    /// When this writer last wrote the index (a key is not written twice within a second).
    index_at: Option<u64>,
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
}

/// Age (ms) past which the pending-index entry of a run without a lease (deleted) is dropped: far beyond any
/// propagation delay, so a missing lease is not this location's stale view of a new run.
const ORPHAN_INDEX_MS: u64 = 3_600_000;

fn corrupt(run_id: &str, what: &str, e: impl std::fmt::Display) -> Error {
    Error::new(ErrorCode::CheckpointCorrupt, format!("run '{run_id}': {what} cannot be read: {e}")).with_run(run_id)
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

    /// A read, retried (from 200 ms, at most 3 times) when the backend fails transiently.
    async fn read_retrying<T, F, Fut>(&self, mut op: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let mut delay = 200;
        let mut attempt = 0;
        loop {
            self.count(|c| c.reads += 1);
            match op().await {
                Err(e) if e.code == ErrorCode::StoreUnavailable && attempt < 3 => {
                    attempt += 1;
                    self.sleep.sleep(delay).await;
                    delay *= 2;
                }
                other => return other,
            }
        }
    }

    async fn get(&self, key: &str) -> Result<Option<String>> {
        self.read_retrying(|| self.kv.get(key)).await
    }

    async fn get_many(&self, keys: &[String]) -> Result<Vec<Option<String>>> {
        self.read_retrying(|| self.kv.get_many(keys)).await
    }

    async fn list(&self, prefix: &str, cursor: Option<&str>) -> Result<super::kv::ListPage> {
        self.read_retrying(|| self.kv.list(prefix, cursor, MAX_LIST_LIMIT)).await
    }

    /// A write off the hot path: retried with backoff from 1 s on 429 and transient failures.
    async fn write_retrying<F, Fut>(&self, mut op: F) -> Result<()>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<()>>,
    {
        let mut delay = 1_000;
        let mut attempt = 0;
        loop {
            self.count(|c| c.writes += 1);
            match op().await {
                Ok(()) => return Ok(()),
                Err(e) if e.retryable && attempt < self.opts.write_retries => {
                    self.count(|c| c.write_retries += 1);
                    attempt += 1;
                    self.sleep.sleep(delay).await;
                    delay = delay.saturating_mul(2);
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

    async fn read_lease(&self, run_id: &str) -> Result<Option<LeaseRecord>> {
        match self.get(&self.keys.lease(run_id)).await? {
            None => Ok(None),
            Some(s) => serde_json::from_str(&s).map(Some).map_err(|e| corrupt(run_id, "the lease", e)),
        }
    }

    /// The newest snapshot seq at or before `at` (1 when none is known).
    fn snapshot_at_or_before(rec: &LeaseRecord, at: u64) -> u64 {
        rec.progress.snaps.iter().copied().filter(|s| *s <= at).max().unwrap_or(1).max(1)
    }

    /// Reads the entries `start..` of a run's chain. Entries up to the known head must exist (a miss there
    /// means this location does not see them yet: retryable); past it, reading stops at the first miss.
    /// Returns the entries and the raw sizes.
    async fn read_entries(&self, run_id: &str, rec: &LeaseRecord, start: u64) -> Result<Vec<(JournalEntry, u64)>> {
        let known_head = rec.progress.head;
        let mut out = Vec::new();
        let mut seq = start;
        loop {
            let mut keys = Vec::new();
            let mut seqs = Vec::new();
            while keys.len() < MAX_BULK_GET {
                let Some(tag) = rec.tag_for(seq + seqs.len() as u64) else { break };
                let s = seq + seqs.len() as u64;
                keys.push(self.keys.entry(run_id, &tag, s));
                seqs.push(s);
            }
            if keys.is_empty() {
                return Ok(out);
            }
            let values = self.get_many(&keys).await?;
            for (s, v) in seqs.iter().zip(values) {
                match v {
                    Some(raw) => {
                        let e: JournalEntry = serde_json::from_str(&raw)
                            .map_err(|e| corrupt(run_id, &format!("journal entry {s}"), e))?;
                        if e.seq != *s {
                            return Err(corrupt(
                                run_id,
                                &format!("journal entry {s}"),
                                format!("it says seq {}", e.seq),
                            ));
                        }
                        out.push((e, raw.len() as u64));
                    }
                    None if *s <= known_head => {
                        return Err(Error::new(
                            ErrorCode::StoreUnavailable,
                            format!("run '{run_id}': journal entry {s} is not visible here yet; retry"),
                        )
                        .with_run(run_id))
                    }
                    None => return Ok(out),
                }
            }
            seq += seqs.len() as u64;
        }
    }

    async fn mark_corrupt(&self, run_id: &str, err: &Error) {
        let meta = IndexMeta {
            s: RunStatus::InProgress,
            st: 0,
            a: 0,
            e: Some(err.info()),
            ap: vec![],
            t: 0,
            q: false,
            h: None,
        };
        if let Ok(v) = encode(&meta) {
            let opts = PutOptions { metadata: serde_json::to_value(&meta).ok(), expiration_ttl_s: None };
            self.count(|c| c.writes += 1);
            let _ = self.kv.put(&self.keys.pending(run_id), &v, opts).await;
        }
    }

    async fn put_index(&self, run_id: &str, meta: &IndexMeta) -> Result<()> {
        let v = encode(meta)?;
        let opts = PutOptions { metadata: serde_json::to_value(meta).ok(), expiration_ttl_s: None };
        self.put_retrying(&self.keys.pending(run_id), &v, opts).await
    }

    fn writer_rec(&self, run_id: &str) -> Option<LeaseRecord> {
        self.writers.borrow().get(run_id).map(|w| w.rec.clone())
    }

    async fn load_inner(&self, run_id: &str) -> Result<Option<Checkpoint>> {
        let rec = match self.writer_rec(run_id) {
            Some(r) => r,
            None => match self.read_lease(run_id).await? {
                Some(r) => r,
                None => return Ok(None),
            },
        };
        let start = Self::snapshot_at_or_before(&rec, rec.progress.head.max(1));
        let entries = self.read_entries(run_id, &rec, start).await?;
        Checkpoint::fold(run_id, entries.iter().map(|(e, _)| e))
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
        let prev = match self.read_lease(run_id).await {
            Ok(p) => p,
            Err(e) => {
                self.mark_corrupt(run_id, &e).await;
                return Err(e);
            }
        };
        let mut rec = LeaseRecord {
            owner: owner.to_string(),
            epoch: 1,
            expires_at: now_ms.saturating_add(opts.ttl_ms),
            chain: Vec::new(),
            from: 1,
            progress: Progress::default(),
        };
        let mut index = None;
        if let Some(p) = &prev {
            let live = p.owner != owner && now_ms < p.expires_at.saturating_add(opts.grace_ms);
            // Probe the previous segment past its head hint, with its end marker and the index in the same read.
            let tag = p.tag();
            let end_key = self.keys.end(run_id, &tag);
            let mut progress = p.progress.clone();
            let mut cut = p.progress.head.max(p.from.saturating_sub(1));
            let mut first = true;
            loop {
                let mut keys = Vec::new();
                if first {
                    keys.push(end_key.clone());
                    keys.push(self.keys.pending(run_id));
                }
                let base = cut + 1;
                while keys.len() < MAX_BULK_GET {
                    keys.push(self.keys.entry(run_id, &tag, base + keys.len() as u64 - if first { 2 } else { 0 }));
                }
                let values = self.get_many(&keys).await?;
                let mut values = values.into_iter();
                if first {
                    let end = values.next().flatten();
                    index = values.next().flatten().and_then(|v| serde_json::from_str::<IndexMeta>(&v).ok());
                    if let Some(end) = end {
                        let marker: Progress =
                            serde_json::from_str(&end).map_err(|e| corrupt(run_id, "an end marker", e))?;
                        progress = marker;
                        cut = progress.head.max(p.from.saturating_sub(1));
                        break;
                    }
                    if live {
                        return Err(Error::busy(run_id, "another process holds its lease"));
                    }
                    first = false;
                }
                let mut all = true;
                for v in values {
                    match v {
                        Some(raw) => {
                            let e: JournalEntry = serde_json::from_str(&raw)
                                .map_err(|e| corrupt(run_id, &format!("journal entry {}", cut + 1), e))?;
                            cut += 1;
                            progress.head = cut;
                            if matches!(e.body, EntryBody::Snapshot { .. }) {
                                progress.snaps.push(cut);
                                progress.snap_bytes = raw.len() as u64;
                                progress.bytes_since = 0;
                                progress.entries_since = 0;
                            } else {
                                progress.bytes_since += raw.len() as u64;
                                progress.entries_since += 1;
                            }
                        }
                        None => {
                            all = false;
                            break;
                        }
                    }
                }
                if !all {
                    break;
                }
            }
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
        let value = encode(&rec)?;
        let lease_key = self.keys.lease(run_id);
        let mut delay = 1_000;
        let mut attempt = 0;
        loop {
            self.count(|c| {
                c.writes += 1;
                c.bytes_written += value.len() as u64
            });
            match self.kv.put(&lease_key, &value, PutOptions::default()).await {
                Ok(()) => break,
                Err(e) if e.retryable && attempt < self.opts.write_retries => {
                    // Someone may have written the lease this second: wait, and give up if they hold it now.
                    self.count(|c| c.write_retries += 1);
                    attempt += 1;
                    self.sleep.sleep(delay).await;
                    delay *= 2;
                    if let Some(cur) = self.read_lease(run_id).await? {
                        let changed = prev.as_ref() != Some(&cur);
                        if changed && cur.owner != owner {
                            return Err(Error::busy(run_id, "another process took its lease first"));
                        }
                    }
                }
                Err(e) => return Err(e),
            }
        }
        self.sleep.sleep(self.opts.settle_ms).await;
        match self.read_lease(run_id).await? {
            Some(back) if back.owner == owner && back.epoch == rec.epoch => {}
            _ => return Err(Error::busy(run_id, "another process took its lease at the same time")),
        }
        let lease = Lease {
            run_id: run_id.to_string(),
            owner: owner.to_string(),
            epoch: rec.epoch,
            expires_at: rec.expires_at,
        };
        self.writers.borrow_mut().insert(
            run_id.to_string(),
            Writer { epoch: rec.epoch, owner: owner.to_string(), rec, index, index_at: None },
        );
        Ok(lease)
    }

    async fn renew_lease(&self, lease: &Lease, now_ms: u64, opts: &LeaseOptions) -> Result<Lease> {
        let Some(mut rec) = self.writer_of(lease) else {
            return Err(Error::busy(&lease.run_id, "this process does not hold its lease"));
        };
        match self.read_lease(&lease.run_id).await? {
            Some(cur) if cur.owner == lease.owner && cur.epoch == lease.epoch => {}
            _ => {
                self.writers.borrow_mut().remove(&lease.run_id);
                return Err(Error::busy(&lease.run_id, "another process took over its lease"));
            }
        }
        rec.expires_at = now_ms.saturating_add(opts.ttl_ms);
        let value = encode(&rec)?;
        self.put_retrying(&self.keys.lease(&lease.run_id), &value, PutOptions::default()).await?;
        if let Some(w) = self.writers.borrow_mut().get_mut(&lease.run_id) {
            w.rec.expires_at = rec.expires_at;
        }
        Ok(Lease { expires_at: rec.expires_at, ..lease.clone() })
    }

    async fn release_lease(&self, lease: &Lease) -> Result<()> {
        let Some(rec) = self.writer_of(lease) else { return Ok(()) };
        let run_id = &lease.run_id;
        let mut progress = rec.progress.clone();
        // A finished run keeps only what `history_limit` states need.
        let mut deletes = Vec::new();
        if progress.finished {
            let keep_from = progress.head.saturating_add(1).saturating_sub(self.opts.history_limit.max(1) as u64);
            let floor = Self::snapshot_at_or_before(&rec, keep_from.max(1));
            let mut seq = progress.pruned.max(1);
            while seq < floor && deletes.len() < self.opts.prune_batch {
                if let Some(tag) = rec.tag_for(seq) {
                    deletes.push(self.keys.entry(run_id, &tag, seq));
                }
                seq += 1;
            }
            if seq > progress.pruned {
                progress.pruned = seq;
                progress.snaps.retain(|s| *s >= floor);
            }
        }
        let marker = encode(&progress)?;
        self.put_retrying(&self.keys.end(run_id, &rec.tag()), &marker, PutOptions::default()).await?;
        self.writers.borrow_mut().remove(run_id);
        for key in deletes {
            self.count(|c| c.writes += 1);
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
        if entry.seq != rec.progress.head + 1 {
            return Err(Error::internal(format!(
                "run '{run_id}': entry {} does not follow entry {}",
                entry.seq, rec.progress.head
            )));
        }
        let p = &rec.progress;
        let is_snapshot = matches!(entry.body, EntryBody::Snapshot { .. });
        let want_snapshot = is_snapshot
            || (p.entries_since + 1 >= self.opts.snapshot_every
                && p.bytes_since >= self.opts.snapshot_growth.saturating_mul(p.snap_bytes));
        let raw = if want_snapshot && !is_snapshot {
            encode(&JournalEntry {
                seq: entry.seq,
                at: entry.at,
                body: EntryBody::Snapshot { state: Box::new(state.clone()) },
            })?
        } else {
            encode(entry)?
        };
        let key = self.keys.entry(run_id, &rec.tag(), entry.seq);
        self.count(|c| {
            c.commits += 1;
            c.commit_writes += 1;
            c.commit_bytes += raw.len() as u64
        });
        // Write-once key: a retry after a lost acknowledgement writes the same bytes again.
        self.put_retrying(&key, &raw, PutOptions::default()).await?;
        let finished = state.status == RunStatus::Finished;
        let now = self.clock.now_ms();
        let index_write = {
            let mut writers = self.writers.borrow_mut();
            let Some(w) = writers.get_mut(run_id) else { return Err(Error::busy(run_id, "lease lost during commit")) };
            let p = &mut w.rec.progress;
            p.head = entry.seq;
            if want_snapshot {
                p.snaps.push(entry.seq);
                p.snap_bytes = raw.len() as u64;
                p.bytes_since = 0;
                p.entries_since = 0;
            } else {
                p.bytes_since += raw.len() as u64;
                p.entries_since += 1;
            }
            p.finished = finished;
            let meta = IndexMeta::of(state);
            if finished {
                // Deleting an index entry this writer wrote less than a second ago would be refused (429): leave
                // it; `pending()` sees from the segment's end marker that the run finished, and drops it.
                let recent = w.index_at.is_some_and(|t| now.saturating_sub(t) < 1_000);
                w.index.take().and_then(|_| (!recent).then_some(None))
            } else if w.index.as_ref().is_none_or(|old| !old.same(&meta)) {
                w.index = Some(meta.clone());
                w.index_at = Some(now);
                Some(Some(meta))
            } else {
                None
            }
        };
        match index_write {
            Some(Some(meta)) => self.put_index(run_id, &meta).await?,
            Some(None) => {
                self.count(|c| c.writes += 1);
                let _ = self.kv.delete(&self.keys.pending(run_id)).await;
            }
            None => {}
        }
        Ok(())
    }

    async fn delete(&self, run_id: &str) -> Result<()> {
        self.writers.borrow_mut().remove(run_id);
        let prefix = self.keys.run_prefix(run_id);
        let lease_key = self.keys.lease(run_id);
        let mut cursor: Option<String> = None;
        loop {
            let page = self.list(&prefix, cursor.as_deref()).await?;
            for k in &page.keys {
                if k.name == lease_key {
                    continue;
                }
                self.delete_retrying(&k.name).await?;
            }
            match page.cursor {
                Some(c) => cursor = Some(c),
                None => break,
            }
        }
        // The lease last: without it no reader follows the (possibly half-deleted) chain.
        self.delete_retrying(&lease_key).await?;
        self.delete_retrying(&self.keys.pending(run_id)).await
    }

    async fn history(&self, run_id: &str, limit: usize) -> Result<Vec<HistoryEntry>> {
        let keep = limit.min(self.opts.history_limit);
        if keep == 0 {
            return Ok(Vec::new());
        }
        let Some(rec) = (match self.writer_rec(run_id) {
            Some(r) => Some(r),
            None => self.read_lease(run_id).await?,
        }) else {
            return Ok(Vec::new());
        };
        let from = rec.progress.head.saturating_add(1).saturating_sub(keep as u64).max(1);
        let start = Self::snapshot_at_or_before(&rec, from).max(rec.progress.pruned.min(from));
        let entries = self.read_entries(run_id, &rec, start).await?;
        let mut cp = Checkpoint::new(run_id);
        let mut out = Vec::new();
        for (e, _) in &entries {
            cp.apply(e)?;
            out.push(HistoryEntry::of(&cp));
        }
        out.reverse();
        out.truncate(keep);
        Ok(out)
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
            let tags: Vec<Option<String>> = leases
                .iter()
                .map(|l| l.as_ref().and_then(|l| serde_json::from_str::<LeaseRecord>(l).ok()).map(|l| l.tag()))
                .collect();
            let marker_keys: Vec<String> = chunk
                .iter()
                .zip(&tags)
                .filter_map(|(&i, t)| t.as_ref().map(|t| self.keys.end(&runs[i].run_id, t)))
                .collect();
            let mut markers =
                if marker_keys.is_empty() { Vec::new() } else { self.get_many(&marker_keys).await? }.into_iter();
            for ((&i, lease), tag) in chunk.iter().zip(&leases).zip(&tags) {
                let run = &runs[i];
                let age = now.saturating_sub(run.saved_at);
                let drop_after = match (lease, tag) {
                    (None, _) => Some(ORPHAN_INDEX_MS),
                    (Some(_), None) => None,
                    (Some(_), Some(_)) => markers
                        .next()
                        .flatten()
                        .and_then(|m| serde_json::from_str::<Progress>(&m).ok())
                        .is_some_and(|p| p.finished)
                        .then_some(1_000),
                };
                if let Some(after) = drop_after {
                    out[i] = false;
                    if age >= after {
                        self.count(|c| c.writes += 1);
                        let _ = self.kv.delete(&self.keys.pending(&run.run_id)).await;
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
