//! The journal store's lease protocol: the lease record (segments, progress, tombstones), the per-run writer
//! state, and acquiring, confirming, renewing and releasing a lease (see the parent module's *Leases*).

use super::retry::{LEASE_RATE_LIMITED, LEASE_TRANSIENT, WRITE_BACKOFF};
use super::{corrupt, encode, in_range, parse_record, JournalStore, Progress};
use crate::core::error::{Error, ErrorCode, Result};
use crate::store::index::IndexMeta;
use crate::store::keys::Keys;
use crate::store::kv::{KvBackend, PutOptions};
use crate::store::{Lease, LeaseOptions, RunStore};
use serde::{Deserialize, Serialize};

/// How far back (by this process's clock) a lease record's own write may lie and still explain a 429 on the
/// lease key: KV's one second, plus clock skew between processes.
pub(super) const LEASE_429_SKEW_MS: u64 = 3_000;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(super) struct Segment {
    pub(super) tag: String,
    pub(super) from: u64,
    pub(super) to: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct LeaseRecord {
    pub(super) owner: String,
    pub(super) epoch: u64,
    pub(super) expires_at: u64,
    #[serde(default)]
    pub(super) chain: Vec<Segment>,
    #[serde(default)]
    pub(super) from: u64,
    #[serde(default)]
    pub(super) progress: Progress,
    /// When this record was written (the writer's clock): tells whether a 429 on the lease key is explained by
    /// this record's own write.
    #[serde(default)]
    pub(super) written_at: u64,
    /// A deleted run's tombstone (it expires after [`TOMBSTONE_TTL_S`]): the run does not exist. Kept instead of
    /// deleting the key, so that an acquirer whose write gets a 429 sees what explains it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(super) deleted: bool,
}

impl LeaseRecord {
    pub(super) fn check(&self) -> std::result::Result<(), String> {
        in_range("epoch", self.epoch)?;
        in_range("from", self.from)?;
        self.chain
            .iter()
            .try_for_each(|s| in_range("a segment's start", s.from).and(in_range("a segment's end", s.to)))?;
        self.progress.check()
    }

    pub(super) fn parse(raw: &str) -> std::result::Result<LeaseRecord, String> {
        parse_record(raw, LeaseRecord::check)
    }

    pub(super) fn tag(&self) -> String {
        Keys::tag(self.epoch, &self.owner)
    }

    pub(super) fn tag_for(&self, seq: u64) -> Option<String> {
        if seq >= self.from {
            return Some(self.tag());
        }
        self.chain.iter().find(|s| s.from <= seq && seq <= s.to).map(|s| s.tag.clone())
    }
}

pub(super) struct Writer {
    pub(super) epoch: u64,
    pub(super) owner: String,
    pub(super) rec: LeaseRecord,
    /// What the pending index holds for the run, as far as this writer knows (what it last wrote).
    pub(super) index: Option<IndexMeta>,
    /// When this writer last wrote the index (a key is not written twice within a second).
    pub(super) index_at: Option<u64>,
    /// The last index write failed (or was deferred until the lease was confirmed): `index` is what it should
    /// hold; written at the next boundary, at confirmation or at release.
    pub(super) index_dirty: bool,
    /// Earliest time of the read-back that confirms the lease (its write's acknowledgement + `settle_ms`).
    pub(super) confirm_at: u64,
    /// The read-back saw this writer's record: it owns the lease.
    pub(super) confirmed: bool,
}

impl<K: KvBackend> JournalStore<K> {
    pub(super) async fn read_lease(&self, run_id: &str) -> Result<Option<LeaseRecord>> {
        match self.get(&self.keys.lease(run_id)).await? {
            None => Ok(None),
            Some(s) => LeaseRecord::parse(&s).map(Some).map_err(|e| corrupt(run_id, "the lease", e)),
        }
    }

    /// One write of a lease record, stamped with the time it was sent; returns the write's outcome and the time
    /// it was answered (the acknowledgement, for the settle window).
    pub(super) async fn put_lease(&self, run_id: &str, rec: &mut LeaseRecord) -> Result<(Result<()>, u64)> {
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
    pub(super) async fn void(&self, run_id: &str, tag: &str) {
        self.count(|c| c.writes += 1);
        // Ignored: without the mark, an owner whose record this acquisition overwrote cannot restore it and stops
        // (fails closed, `STEADFAST_SESSION_BUSY`); the caller already fails with its own error.
        let _ = self.kv.put(&self.keys.void(run_id, tag), "1", PutOptions::default()).await;
    }

    /// Whether the acquisition with `tag` gave its lease up.
    pub(super) async fn is_void(&self, run_id: &str, tag: &str) -> Result<bool> {
        Ok(self.get(&self.keys.void(run_id, tag)).await?.is_some())
    }

    pub(super) fn writer_rec(&self, run_id: &str) -> Option<LeaseRecord> {
        self.writers.borrow().get(run_id).map(|w| w.rec.clone())
    }

    /// The record a reader starts from: this process's writer record (`true`: exact), else the lease in KV.
    pub(super) async fn view(&self, run_id: &str) -> Result<Option<(LeaseRecord, bool)>> {
        if let Some(r) = self.writer_rec(run_id) {
            return Ok(Some((r, true)));
        }
        let read_at = self.clock.now_ms();
        let rec = self.read_lease(run_id).await?;
        self.remember_lease(run_id, rec.clone(), read_at);
        Ok(rec.filter(|r| !r.deleted).map(|r| (r, false)))
    }

    /// Keeps a lease read made without the lease (see [`SeenEntries::lease`]).
    pub(super) fn remember_lease(&self, run_id: &str, rec: Option<LeaseRecord>, read_at: u64) {
        let mut seen = self.seen.borrow_mut();
        seen.switch_to(run_id);
        seen.lease = Some((rec, read_at));
    }

    /// The lease read kept for `run_id` and the time it started, if that was less than a quarter of the settle
    /// window ago (an acquisition must have its write acknowledged within the window of the read it decided
    /// on, so an older read would only make it give up more often); taken either way.
    pub(super) fn fresh_lease_read(&self, run_id: &str) -> Option<(Option<LeaseRecord>, u64)> {
        let mut seen = self.seen.borrow_mut();
        let kept = seen.lease.take().filter(|_| seen.run_id == run_id)?;
        (self.clock.now_ms().saturating_sub(kept.1) < self.opts.settle_ms / 4).then_some(kept)
    }

    pub(super) async fn acquire(&self, run_id: &str, owner: &str, now_ms: u64, opts: &LeaseOptions) -> Result<Lease> {
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

    pub(super) async fn confirm(&self, lease: &Lease) -> Result<()> {
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

    pub(super) async fn renew(&self, lease: &Lease, _now_ms: u64, opts: &LeaseOptions) -> Result<Lease> {
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

    pub(super) async fn release(&self, lease: &Lease) -> Result<()> {
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

    pub(super) fn writer_of(&self, lease: &Lease) -> Option<LeaseRecord> {
        let writers = self.writers.borrow();
        let w = writers.get(&lease.run_id)?;
        (w.owner == lease.owner && w.epoch == lease.epoch).then(|| w.rec.clone())
    }
}
