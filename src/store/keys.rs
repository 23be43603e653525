//! Every KV key shape of the journal store, built here and nowhere else.
//!
//! ```text
//! <prefix>run/<id>/lease                     lease record: owner, epoch, expiry, segment chain (acquire/renew)
//! <prefix>run/<id>/j/<tag>/<seq:010>         one journal entry, written once by the segment's owner
//! <prefix>run/<id>/j/<tag>/<seq:010>/<n:03>  part n of an entry too large for one value (its entry key holds
//!                                            a header naming the parts, written after them)
//! <prefix>run/<id>/end/<tag>                 end marker of a segment: its owner released the lease (write-once)
//! <prefix>run/<id>/void/<tag>                that acquisition gave its lease up after writing it (write-once)
//! <prefix>idx/pending/<id>                   exists while the run is unfinished; value = list metadata
//! <prefix>approval/<approval id>             approval record
//! <prefix>idx/due/<at:016>/<wait id>/<run id> a tool's wait that resolves by itself at `at` (the due index;
//!                                            run and wait ids hold no `/`; byte order is time order)
//! <prefix>queue/<run id>/<at:016>.<msg id>    a message queued for the run (steering; byte order is queue order)
//! <prefix>state/<name>                       runtime state (the sweep's breaker and cursor)
//! ```
//! A segment tag is `<epoch:06>.<owner>`: unique per acquisition, so two owners never write the same key.

use super::kv::check_key;
use crate::core::error::Result;

/// Key builder for one prefix.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    /// Keys under `prefix` (e.g. `"steadfast/"`; may be empty).
    pub fn new(prefix: impl Into<String>) -> Keys {
        Keys { prefix: prefix.into() }
    }

    /// The segment tag of an acquisition.
    pub fn tag(epoch: u64, owner: &str) -> String {
        format!("{epoch:06}.{owner}")
    }

    /// `run/<id>/` (every key of a run starts with it).
    pub fn run_prefix(&self, run_id: &str) -> String {
        format!("{}run/{run_id}/", self.prefix)
    }

    /// The lease record.
    pub fn lease(&self, run_id: &str) -> String {
        format!("{}run/{run_id}/lease", self.prefix)
    }

    /// One journal entry.
    pub fn entry(&self, run_id: &str, tag: &str, seq: u64) -> String {
        format!("{}run/{run_id}/j/{tag}/{seq:010}", self.prefix)
    }

    /// Part `part` of the journal entry at `entry_key` (an entry split over several values).
    pub fn part(entry_key: &str, part: usize) -> String {
        format!("{entry_key}/{part:03}")
    }

    /// A segment's end marker.
    pub fn end(&self, run_id: &str, tag: &str) -> String {
        format!("{}run/{run_id}/end/{tag}", self.prefix)
    }

    /// A void marker: the acquisition with this tag gave its lease up after writing it (its record, if it
    /// landed, holds no owner).
    pub fn void(&self, run_id: &str, tag: &str) -> String {
        format!("{}run/{run_id}/void/{tag}", self.prefix)
    }

    /// Prefix of the pending index.
    pub fn pending_prefix(&self) -> String {
        format!("{}idx/pending/", self.prefix)
    }

    /// A run's pending-index key.
    pub fn pending(&self, run_id: &str) -> String {
        format!("{}idx/pending/{run_id}", self.prefix)
    }

    /// The run id of a pending-index key.
    pub fn run_of_pending<'a>(&self, key: &'a str) -> Option<&'a str> {
        key.strip_prefix(&self.prefix)?.strip_prefix("idx/pending/")
    }

    /// Prefix of the approval records.
    pub fn approval_prefix(&self) -> String {
        format!("{}approval/", self.prefix)
    }

    /// An approval record.
    pub fn approval(&self, id: &str) -> String {
        format!("{}approval/{id}", self.prefix)
    }

    /// Prefix of a run's message queue.
    pub fn queue_prefix(&self, run_id: &str) -> String {
        format!("{}queue/{run_id}/", self.prefix)
    }

    /// A queued message's key.
    pub fn queued(&self, msg: &crate::core::steer::QueuedMessage) -> String {
        format!("{}queue/{}/{}", self.prefix, msg.run_id, msg.order_key())
    }

    /// Prefix of the due index.
    pub fn due_prefix(&self) -> String {
        format!("{}idx/due/", self.prefix)
    }

    /// A wait's due-index key.
    pub fn due(&self, due: &crate::store::DueWait) -> String {
        format!("{}idx/due/{:016}/{}/{}", self.prefix, due.at, due.wait_id, due.run_id)
    }

    /// The entry a due-index key names (`None` for a key of another shape).
    pub fn due_of(&self, key: &str) -> Option<crate::store::DueWait> {
        let rest = key.strip_prefix(&self.prefix)?.strip_prefix("idx/due/")?;
        let mut parts = rest.splitn(3, '/');
        let at = parts.next()?.parse().ok()?;
        let (wait_id, run_id) = (parts.next()?, parts.next()?);
        (!wait_id.is_empty() && !run_id.is_empty()).then(|| crate::store::DueWait {
            at,
            wait_id: wait_id.to_string(),
            run_id: run_id.to_string(),
        })
    }

    /// Adds to `out` the entries of one listing page (in key order, which is time order) due by `until`, up to
    /// `limit` in all; `true` once the listing need not go on (an entry not yet due, or `limit` reached).
    pub fn take_due(
        &self,
        page: &[crate::store::kv::ListKey],
        until: u64,
        limit: usize,
        out: &mut Vec<crate::store::DueWait>,
    ) -> bool {
        for k in page {
            let Some(due) = self.due_of(&k.name) else { continue };
            if due.at > until || out.len() >= limit {
                return true;
            }
            out.push(due);
        }
        false
    }

    /// A small runtime document (`state/<name>`, e.g. the sweep's breaker and cursor).
    pub fn state(&self, name: &str) -> String {
        format!("{}state/{name}", self.prefix)
    }

    /// Checks that the longest key of a run fits the KV limit (512 bytes).
    pub fn check_run(&self, run_id: &str, owner: &str) -> Result<()> {
        let longest = Keys::part(&self.entry(run_id, &Keys::tag(999_999, owner), 9_999_999_999), 999);
        debug_assert!(longest.len() >= self.end(run_id, &Keys::tag(0, owner)).len());
        check_key(&longest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_shapes() {
        let k = Keys::new("sf/");
        assert_eq!(k.lease("r1"), "sf/run/r1/lease");
        assert_eq!(k.entry("r1", &Keys::tag(3, "own_a"), 42), "sf/run/r1/j/000003.own_a/0000000042");
        assert_eq!(k.end("r1", "000003.own_a"), "sf/run/r1/end/000003.own_a");
        assert_eq!(Keys::part(&k.entry("r1", "000003.own_a", 42), 7), "sf/run/r1/j/000003.own_a/0000000042/007");
        assert_eq!(k.pending("r1"), "sf/idx/pending/r1");
        assert_eq!(k.run_of_pending("sf/idx/pending/r1"), Some("r1"));
        assert_eq!(k.approval("apr_1"), "sf/approval/apr_1");
        assert!(k.lease("r1").starts_with(&k.run_prefix("r1")));
    }

    #[test]
    fn longest_run_keys_fit_512_bytes() {
        let k = Keys::new("steadfast/");
        let id = "a".repeat(200);
        assert!(k.check_run(&id, "own_0123456789abcdef01234567").is_ok());
        let long_prefix = Keys::new("p".repeat(300));
        assert!(long_prefix.check_run(&id, "own_0123456789abcdef01234567").is_err());
    }
}
