//! The pending index (`idx/pending/<id>`) as the journal store keeps it: what a boundary writes to it, its
//! repair after a failed write, marking a run corrupt, and the pending listing and check.

use super::lease::{LeaseRecord, Writer};
use super::{corrupt, encode, parse_record, JournalStore, Progress};
use crate::core::checkpoint::RunStatus;
use crate::core::error::{Error, ErrorCode, Result};
use crate::core::wire::json_text;
use crate::store::index::{IndexMeta, IndexOp};
use crate::store::kv::{KvBackend, PutOptions, MAX_BULK_GET, MAX_LIST_LIMIT};
use crate::store::{PendingPage, PendingRun, RunStore};

impl Writer {
    /// The index write a boundary with `meta` needs (and records it as what the index holds).
    pub(super) fn plan_index(&mut self, finished: bool, meta: IndexMeta, now: u64) -> Option<IndexOp> {
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
    pub(super) fn repair_index(&self) -> Option<IndexOp> {
        if !self.index_dirty {
            return None;
        }
        match &self.index {
            Some(meta) if !self.rec.progress.finished => Some(IndexOp::Put(meta.clone())),
            _ => Some(IndexOp::Delete),
        }
    }
}

/// Age (ms) past which the pending-index entry of a run without a lease (deleted) is dropped: far beyond any
/// propagation delay, so a missing lease is not this location's stale view of a new run.
pub(super) const ORPHAN_INDEX_MS: u64 = 3_600_000;

impl<K: KvBackend> JournalStore<K> {
    /// Lists the run as corrupt (so the sweep and operators see it), retrying a refused write like any write
    /// off the hot path; the read that found the corruption fails with its own error whatever happens here.
    pub(super) async fn mark_corrupt(&self, run_id: &str, err: &Error) {
        let meta = IndexMeta::corrupt(err);
        // Ignored: the read that found the corruption fails with its own error, and finds it (and marks it) again.
        let _ = self.put_index(run_id, &meta).await;
    }

    pub(super) async fn put_index(&self, run_id: &str, meta: &IndexMeta) -> Result<()> {
        let v = encode(meta)?;
        // Read back from the text just written (not a JSON value writer's instance of IndexMeta); ignored: it is JSON.
        let opts = PutOptions { metadata: serde_json::from_str(&v).ok(), expiration_ttl_s: None };
        self.put_retrying(&self.keys.pending(run_id), &v, opts).await
    }

    /// Writes the pending index after a durable boundary. A failure is not the boundary's: it marks the index
    /// dirty, and the writer repairs it at its next boundary or at release (the next acquirer compares what it
    /// finds with the run's state anyway). `retry`: retry a refused delete with backoff (at release).
    pub(super) async fn write_index(&self, run_id: &str, op: IndexOp, retry: bool) {
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

    pub(super) async fn pending_runs(&self) -> Result<Vec<PendingRun>> {
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
        crate::core::wire::sort_by(&mut out, |a, b| a.run_id.cmp(&b.run_id));
        Ok(out)
    }

    /// One `list` call of the pending index (a single KV operation at any backlog); entries unchecked.
    pub(super) async fn pending_runs_page(&self, cursor: Option<&str>, limit: usize) -> Result<PendingPage> {
        let prefix = self.keys.pending_prefix();
        let limit = limit.clamp(1, MAX_LIST_LIMIT);
        let page = self.read_retrying(|| self.kv.list(&prefix, cursor, limit)).await?;
        let mut runs = Vec::with_capacity(page.keys.len());
        for k in page.keys {
            let Some(run_id) = self.keys.run_of_pending(&k.name) else { continue };
            // Read from its text (`from_value` would add a second deserializer to the Worker's wasm).
            match k.metadata.and_then(|m| serde_json::from_str::<IndexMeta>(&json_text(&m)).ok()) {
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
    pub(super) async fn check_pending_runs(&self, runs: &[PendingRun]) -> Result<Vec<bool>> {
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
}
