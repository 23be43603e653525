//! The pending index entry both KV-indexed stores keep per unfinished run (the journal store's
//! `idx/pending/<id>`, strict mode's `idx/run/<id>`): a run's listing summary as KV list metadata, so one `list`
//! page gives a sweep up to 1,000 runs with everything it plans by, at no cost per run. [`IndexView`] is what
//! one writer knows of a run's entry and when it must write it again (KV takes one write a second per key).

use super::kv::MAX_METADATA_BYTES;
use super::PendingRun;
use crate::core::checkpoint::{Checkpoint, RunStatus};
use crate::core::error::ErrorInfo;
use serde::{Deserialize, Serialize};

/// Most approval ids an index entry names.
pub(crate) const MAX_INDEX_APPROVALS: usize = 8;
/// Most characters of an error message an index entry keeps (fewer when its bytes would not fit).
pub(crate) const MAX_INDEX_MESSAGE_CHARS: usize = 300;

/// The pending index entry (value and list metadata), always within KV's metadata limit ([`IndexMeta::fit`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct IndexMeta {
    pub(crate) s: RunStatus,
    pub(crate) st: u32,
    pub(crate) a: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) e: Option<ErrorInfo>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) ap: Vec<String>,
    pub(crate) t: u64,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) q: bool,
    /// Diagnosis fork of (the checkpoint's `healOf` marker).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) h: Option<String>,
}

impl IndexMeta {
    pub(crate) fn of(cp: &Checkpoint) -> IndexMeta {
        IndexMeta {
            s: cp.status,
            st: cp.step_index,
            a: cp.attempts,
            e: cp.last_error.clone(),
            ap: cp.approval_ids.iter().take(MAX_INDEX_APPROVALS).cloned().collect(),
            t: cp.saved_at,
            q: cp.quarantined,
            h: cp.heal_of.clone(),
        }
        .fit()
    }

    /// The summary of a run that cannot be read (listed in progress, with the read's error).
    pub(crate) fn corrupt(err: &crate::core::error::Error) -> IndexMeta {
        IndexMeta { e: Some(err.info()), ..IndexMeta::unknown() }.fit()
    }

    /// The summary of a run nothing is known of (listed as in progress, nothing failed).
    pub(crate) fn unknown() -> IndexMeta {
        IndexMeta { s: RunStatus::InProgress, st: 0, a: 0, e: None, ap: Vec::new(), t: 0, q: false, h: None }
    }

    /// Bytes of the serialised entry: what KV counts against its metadata limit.
    pub(crate) fn bytes(&self) -> usize {
        // Ignored: an IndexMeta (numbers, strings, a list of strings) always serialises.
        serde_json::to_string(self).map(|s| s.len()).unwrap_or(usize::MAX)
    }

    /// Shrinks the entry until its serialised JSON fits KV's metadata limit, which counts **bytes** (a character
    /// can take 4, an escaped control character 6): the error message is cut at a character boundary (at most
    /// [`MAX_INDEX_MESSAGE_CHARS`] characters, fewer when they are wide), as late as the bytes allow; when even
    /// an empty message does not fit, approval ids are dropped from the end. Status, step, attempts, the error's
    /// code and the time always fit, so a commit never writes an index entry KV would refuse.
    pub(crate) fn fit(mut self) -> IndexMeta {
        const MARK: &str = "… [truncated]";
        let full = self.e.as_ref().map(|e| e.message.clone()).unwrap_or_default();
        let set = |m: &mut IndexMeta, text: String| {
            if let Some(e) = m.e.as_mut() {
                e.message = text;
            }
        };
        loop {
            if full.chars().count() <= MAX_INDEX_MESSAGE_CHARS {
                set(&mut self, full.clone());
                if self.bytes() <= MAX_METADATA_BYTES {
                    return self;
                }
            }
            set(&mut self, MARK.to_string());
            let base = self.bytes();
            if base <= MAX_METADATA_BYTES {
                // Each kept character adds its escaped JSON width (serde_json escapes `"`, `\` and controls).
                let mut budget = MAX_METADATA_BYTES - base;
                let mut end = 0;
                for (i, c) in full.char_indices().take(MAX_INDEX_MESSAGE_CHARS) {
                    let w = match c {
                        '"' | '\\' | '\u{8}' | '\u{c}' | '\n' | '\r' | '\t' => 2,
                        c if (c as u32) < 0x20 => 6,
                        c => c.len_utf8(),
                    };
                    if w > budget {
                        break;
                    }
                    budget -= w;
                    end = i + c.len_utf8();
                }
                let mut head = full[..end].to_string();
                loop {
                    set(&mut self, format!("{head}{MARK}"));
                    if self.bytes() <= MAX_METADATA_BYTES || head.pop().is_none() {
                        return self;
                    }
                }
            }
            // Even an empty message does not fit: the approval ids are too long. Drop the last, try again.
            if self.ap.pop().is_none() {
                set(&mut self, String::new());
                return self;
            }
        }
    }

    /// Same for the sweep's purposes (step and time aside).
    pub(crate) fn same(&self, other: &IndexMeta) -> bool {
        self.s == other.s
            && self.a == other.a
            && self.e == other.e
            && self.ap == other.ap
            && self.q == other.q
            && self.h == other.h
    }

    pub(crate) fn pending(&self, run_id: &str) -> PendingRun {
        let (kind, owner_id) = crate::store::RunKind::of(run_id);
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
            kind,
            owner_id,
            waits: Vec::new(),
        }
    }
}

/// A write of the pending index.
pub(crate) enum IndexOp {
    Put(IndexMeta),
    Delete,
}

/// What one writer (an execution holding a run's lease) knows of the run's index entry.
#[derive(Clone, Debug, Default)]
pub(crate) struct IndexView {
    /// What the index holds for the run, as far as this writer knows (what it last wrote or read).
    pub(crate) held: Option<IndexMeta>,
    /// When this writer last wrote the entry (a key is not written twice within a second).
    pub(crate) written_at: Option<u64>,
    /// The last write failed (or was deferred): `held` is what the entry should hold (`None`: no entry);
    /// written at the next boundary or at release.
    pub(crate) dirty: bool,
}

impl IndexView {
    /// The index write a boundary with `meta` needs (and records it as what the index holds).
    pub(crate) fn plan(&mut self, finished: bool, meta: IndexMeta, now: u64) -> Option<IndexOp> {
        let recent = self.written_at.is_some_and(|t| now.saturating_sub(t) < 1_000);
        if finished {
            // Deleting an entry this writer wrote less than a second ago would be refused (429): leave it for
            // the repair at release (or the next listing, which finds the run finished).
            let had = self.held.take().is_some() || self.dirty;
            if had && recent {
                self.dirty = true;
                return None;
            }
            self.dirty = false;
            had.then_some(IndexOp::Delete)
        } else if self.held.as_ref().is_none_or(|old| !old.same(&meta)) {
            self.held = Some(meta.clone());
            if recent {
                self.dirty = true;
                return None;
            }
            Some(IndexOp::Put(meta))
        } else if self.dirty && !recent {
            // Unchanged, but the last write failed: repair it (at most once a second).
            self.held.clone().map(IndexOp::Put)
        } else {
            None
        }
    }

    /// The repair of a failed or deferred write, at release: what the entry should hold (a finished run's
    /// view holds nothing).
    pub(crate) fn repair(&self) -> Option<IndexOp> {
        if !self.dirty {
            return None;
        }
        match &self.held {
            Some(meta) => Some(IndexOp::Put(meta.clone())),
            None => Some(IndexOp::Delete),
        }
    }

    /// Records the outcome of a write made at `now`.
    pub(crate) fn wrote(&mut self, ok: bool, now: u64) {
        self.written_at = Some(now);
        self.dirty = !ok;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::error::ErrorCode;
    use crate::rng::{Rng, SplitMix64};

    fn meta(message: &str, ap: Vec<String>) -> IndexMeta {
        let e = ErrorInfo { code: ErrorCode::ProviderUnavailable, message: message.to_string(), retryable: true };
        IndexMeta {
            s: RunStatus::AwaitingApproval,
            st: 4_000_000_000,
            a: 4_000_000_000,
            e: Some(e),
            ap,
            t: u64::MAX,
            q: true,
            h: None,
        }
    }

    fn kept(m: &IndexMeta) -> &str {
        &m.e.as_ref().unwrap().message
    }

    /// Whatever the message (wide characters, escaped ones, any length), the index entry fits KV's 1,024 bytes
    /// of metadata, keeps everything but the tail of the message, and cuts the message at a character boundary
    /// as late as the bytes allow.
    #[test]
    fn index_metadata_fits_kv_bytes_for_messages_of_any_width_and_length() {
        let ids: Vec<String> = (0..MAX_INDEX_APPROVALS).map(|i| format!("apr_{i:016x}0123abcd")).collect();
        let rng = SplitMix64::new(7);
        let alphabet = ['a', 'é', '中', '😀', '\u{1}', '"', '\\', '\n', '𝄞'];
        let mut mixed = String::new();
        for _ in 0..3_000 {
            mixed.push(alphabet[(rng.next_u64() % alphabet.len() as u64) as usize]);
        }
        let mut checked = 0;
        // Every length up to 3,000 characters for the wide classes (CJK: 3 bytes, CJK extension B and emoji: 4,
        // mixed with escapes); up to 600 (twice the character cap) for the others.
        for (class, max) in [
            ("中", 3_000),
            ("𠜎", 3_000),
            ("😀", 3_000),
            ("mixed", 3_000),
            ("a", 600),
            ("é", 600),
            ("\u{1}", 600),
            ("\"", 600),
        ] {
            for len in 0..=max {
                let message: String =
                    if class == "mixed" { mixed.chars().take(len).collect() } else { class.repeat(len) };
                let fitted = meta(&message, ids.clone()).fit();
                let n = fitted.bytes();
                assert!(n <= MAX_METADATA_BYTES, "{class} × {len}: {n} bytes");
                assert_eq!(fitted.ap, ids, "{class} × {len}: approval ids kept");
                assert_eq!(
                    (fitted.s, fitted.st, fitted.a, fitted.t, fitted.q),
                    (RunStatus::AwaitingApproval, 4_000_000_000, 4_000_000_000, u64::MAX, true)
                );
                assert_eq!(fitted.e.as_ref().unwrap().code, ErrorCode::ProviderUnavailable);
                let m = kept(&fitted);
                if m != message {
                    let head = m.strip_suffix("… [truncated]").unwrap_or_else(|| panic!("{class} × {len}: no marker"));
                    assert!(message.starts_with(head), "{class} × {len}: a prefix of the message");
                    let k = head.chars().count();
                    assert!(k <= MAX_INDEX_MESSAGE_CHARS);
                    if k < MAX_INDEX_MESSAGE_CHARS && k + 1 < message.chars().count() {
                        // One character more would not fit: the cut is as late as the bytes allow.
                        let mut longer = fitted.clone();
                        let next: String = message.chars().take(k + 1).collect();
                        longer.e.as_mut().unwrap().message = format!("{next}… [truncated]");
                        assert!(longer.bytes() > MAX_METADATA_BYTES, "{class} × {len}: cut at {k} too early");
                    }
                } else {
                    assert!(message.chars().count() <= MAX_INDEX_MESSAGE_CHARS);
                }
                checked += 1;
            }
        }
        // ASCII keeps the historical 300 characters.
        assert_eq!(kept(&meta(&"a".repeat(1_000), ids.clone()).fit()), format!("{}… [truncated]", "a".repeat(300)));
        assert_eq!(checked, 4 * 3_001 + 4 * 601);
    }

    /// Approval ids too long to fit with the error are dropped from the end; the first ones and the code stay.
    #[test]
    fn index_metadata_drops_trailing_approval_ids_that_do_not_fit() {
        let ids: Vec<String> = (0..MAX_INDEX_APPROVALS).map(|i| format!("apr_{i}_{}", "界".repeat(60))).collect();
        let fitted = meta(&"😀".repeat(2_000), ids.clone()).fit();
        assert!(fitted.bytes() <= MAX_METADATA_BYTES);
        assert!(!fitted.ap.is_empty() && fitted.ap.len() < ids.len(), "{} ids", fitted.ap.len());
        assert_eq!(fitted.ap[..], ids[..fitted.ap.len()]);
        let huge = vec!["x".repeat(2_000)];
        let fitted = meta("boom", huge).fit();
        assert!(fitted.bytes() <= MAX_METADATA_BYTES && fitted.ap.is_empty());
        assert_eq!(kept(&fitted), "boom");
    }
}
