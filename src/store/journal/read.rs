//! Reading a run's journal: entries (whole or split) in sized bulk gets, the takeover probe, gaps judged
//! against KV's listing, the entries this process has seen, and folding them into a checkpoint or history.

use super::lease::LeaseRecord;
use super::{corrupt, parse_marker, JournalStore, Progress, MAX_PARTS, SPLIT_MARK};
use crate::core::checkpoint::{Checkpoint, EntryBody, JournalEntry};
use crate::core::error::{Error, ErrorCode, Result};
use crate::store::index::IndexMeta;
use crate::store::keys::Keys;
use crate::store::kv::{is_bulk_too_large, KvBackend, MAX_BULK_GET, MAX_BULK_GET_BYTES, MAX_VALUE_BYTES};
use crate::store::HistoryEntry;
use serde::{Deserialize, Serialize};
use std::cell::Cell;
use std::collections::HashMap;

/// The header of an entry split over several values (stored as `{"split": …}` at the entry's key).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(super) struct SplitHeader {
    /// The entry's seq.
    pub(super) seq: u64,
    /// The entry's bytes (the parts joined).
    pub(super) bytes: u64,
    /// Each part's bytes, in order.
    pub(super) parts: Vec<u64>,
}

#[derive(Serialize, Deserialize)]
pub(super) struct SplitValue {
    pub(super) split: SplitHeader,
}

impl SplitHeader {
    /// The header of entry `seq` as stored: it parses, names its seq, and its parts (1 to [`MAX_PARTS`], each a
    /// KV value) add up to its bytes.
    pub(super) fn parse(raw: &str, seq: u64) -> std::result::Result<SplitHeader, String> {
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
pub(super) struct ReadWidth {
    pub(super) largest: Cell<usize>,
}

impl ReadWidth {
    /// Entries that should exist to ask for in one bulk get.
    pub(super) fn keys(&self) -> usize {
        (MAX_BULK_GET_BYTES / self.largest.get().max(1)).clamp(1, MAX_BULK_GET)
    }

    pub(super) fn saw<'a>(&self, values: impl IntoIterator<Item = &'a Option<String>>) {
        let n = values.into_iter().flatten().map(String::len).max().unwrap_or(0);
        self.largest.set(self.largest.get().max(n));
    }
}

/// How far past a missing journal entry a reader looks for a later one (one bulk get's worth).
pub(super) const GAP_PROBE: u64 = MAX_BULK_GET as u64;
/// Most list pages read to decide whether a key is listed (a page may be empty but not the last).
pub(super) const GAP_LIST_PAGES: usize = 4;
/// Most times a read starts over because the journal changed under it (grew, or a release pruned it).
pub(super) const READ_RESTARTS: usize = 4;
/// Journal entries this process has read, for one run at a time (raw, by key), so that the reads of one
/// execution — the read before its lease, the takeover probe, the fold under the lease — fetch each entry
/// once. An entry's key names its segment (epoch and owner) and seq and is written once, so a key read once
/// keeps its value: serving it again is what reading it again would show, never a state that was not
/// written. Only entries that parsed (with their own seq) are kept; end markers and the index are always read,
/// and the lease is read again except by the one acquisition that follows a recent read of it (see
/// [`SeenEntries::lease`]). Kept from a read without the lease until the next read under it, the release or a
/// delete; reading another run replaces it (at most one run's entries are held).
#[derive(Default)]
pub(super) struct SeenEntries {
    pub(super) run_id: String,
    pub(super) raw: HashMap<String, String>,
    /// The lease as the last read without the lease saw it, with the time that read started: the next
    /// acquisition of this run decides on it (its settle window counts from that start) instead of reading the
    /// lease again, if it is recent (see [`JournalStore::fresh_lease_read`]). Taken by that acquisition.
    pub(super) lease: Option<(Option<LeaseRecord>, u64)>,
}

impl SeenEntries {
    /// Makes `run_id` the run whose reads are kept, dropping another run's.
    pub(super) fn switch_to(&mut self, run_id: &str) {
        if self.run_id != run_id {
            self.run_id = run_id.to_string();
            self.raw.clear();
            self.lease = None;
        }
    }
}

impl<K: KvBackend> JournalStore<K> {
    /// `keys`' values (at most [`MAX_BULK_GET`] keys) in one bulk get when KV allows it. A bulk get KV refuses as
    /// too large (its values total over 25 MB: HTTP 413, one operation spent) is read again as two halves, and so
    /// on; a single key it refuses (a value over 25 MB alone: KV stores values up to 25 MiB) is read with `get`.
    /// So every stored value is readable; callers that read many large values size their batches
    /// ([`ReadWidth`]) so that this rarely happens.
    pub(super) async fn get_many_sized(&self, keys: &[String]) -> Result<Vec<Option<String>>> {
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
    pub(super) async fn get_entries(
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
    pub(super) fn remember_entry(&self, run_id: &str, key: &str, raw: &str) {
        let mut seen = self.seen.borrow_mut();
        seen.switch_to(run_id);
        seen.raw.entry(key.to_string()).or_insert_with(|| raw.to_string());
    }

    /// Drops what is kept for `run_id` (see [`SeenEntries`]).
    pub(super) fn forget_entries(&self, run_id: &str) {
        let mut seen = self.seen.borrow_mut();
        if seen.run_id == run_id {
            seen.raw = HashMap::new();
            seen.lease = None;
        }
    }

    /// The newest snapshot seq at or before `at` (1 when none is known).
    pub(super) fn snapshot_at_or_before(rec: &LeaseRecord, at: u64) -> u64 {
        rec.progress.snaps.iter().copied().filter(|s| *s <= at).max().unwrap_or(1).max(1)
    }

    /// Where a fold that must reach the state at `at` starts: the newest snapshot at or before `at` that no
    /// release pruned, else the oldest one kept (older states are gone), else entry 1 (a run's first entry is a
    /// snapshot).
    pub(super) fn fold_start(p: &Progress, at: u64) -> u64 {
        let floor = p.pruned.max(1);
        let kept = || p.snaps.iter().copied().filter(move |s| *s >= floor);
        kept().filter(|s| *s <= at).max().or_else(|| kept().min()).unwrap_or(1)
    }

    /// Whether KV lists `key` (`None`: the listing did not say within [`GAP_LIST_PAGES`] pages).
    pub(super) async fn listed(&self, key: &str) -> Result<Option<bool>> {
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
    pub(super) async fn judge_gap(
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
    pub(super) async fn join_entry(&self, run_id: &str, seq: u64, key: &str, raw: String) -> Result<(String, usize)> {
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
    pub(super) async fn read_entries(
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
    pub(super) async fn probe_segment(
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

    pub(super) async fn probe_segment_inner(
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

    pub(super) async fn load_inner(&self, run_id: &str) -> Result<Option<Checkpoint>> {
        let Some((mut rec, own)) = self.view(run_id).await? else { return Ok(None) };
        let entries = self.read_entries(run_id, &mut rec, own, &|p| Self::fold_start(p, p.head.max(1))).await;
        if own {
            // The read under the lease ends what the entries were kept for.
            self.forget_entries(run_id);
        }
        Checkpoint::fold(run_id, entries?.iter().map(|(e, _)| e))
    }

    pub(super) async fn history_inner(&self, run_id: &str, limit: usize) -> Result<Vec<HistoryEntry>> {
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
