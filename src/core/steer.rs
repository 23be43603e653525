//! Messages to a running run (steering, issue 29 part 4): a send with `queue: true` to a run that is executing
//! (or paused on an approval) is recorded in the store's queue for that run and applied by the execution that
//! owns the run at its next step boundary, in the order it was queued; it never waits for the lease and never
//! runs anything itself.
//!
//! # Exactly once
//! A queued message has an id, and the run records the ids it applied (the checkpoint's `steered`), in the same
//! commit that adds the message to the transcript: a message whose id is recorded is never applied again, however
//! often it is listed (a queue entry survives its run's commit until it is deleted, and on Workers KV a deleted
//! key can be listed for a while in other locations). An entry is deleted only once its id is committed.
//!
//! # Where the queue is read
//! An execution reads its run's queue at step boundaries: before each model call, before a turn's calls start,
//! and before the run finishes (always, so a message sent during the last model call is not left behind). The
//! first two reads are skipped when the last read is less than the agent's `steer_poll_ms` old (one read per
//! boundary would cost a KV list per boundary; model calls usually take longer than the interval, so a steer still
//! reaches the next boundary). A message sent between the last read and the end of the execution, or to a run
//! that finished meanwhile, is taken up by the recovery sweep: each queued message has an entry in the due index
//! ([`DUE_AFTER_MS`] after it was queued), and a due message whose run is not executing starts an execution that
//! reads the queue (a finished run continues with it as with a send).
//!
//! # Stopping calls
//! A message queued with `interrupt` stops the calls of the current turn that have not started when it is applied
//! (cleared to run but not yet running, or about to pause for an approval): each gets a `not-run` result naming
//! the message, recorded in call order, so the model sees them before the message.
//!
//! # Which run
//! An entry carries a tag of the run's key scope (random, drawn when the run was created): an entry queued for a
//! run that was deleted is never applied to a new run created later under the same id; it is dropped.

use super::checkpoint::Checkpoint;
use super::error::{Error, ErrorCode, Result};
use super::fingerprint::sha256_hex;
use super::limits::check_message_depth;
use super::transcript::Message;
use super::wait::MAX_PAYLOAD_BYTES;
use crate::core::wire::json_text;
use serde::{Deserialize, Serialize};

/// Prefix of a queued message's id.
pub const MESSAGE_ID_PREFIX: &str = "msg_";

/// How long after it was queued a message comes due for the recovery sweep (its due-index entry): an execution
/// that holds the run applies it long before; the sweep takes up what no execution read.
pub const DUE_AFTER_MS: u64 = 60_000;

/// Default of the agent's `steer_poll_ms`: the shortest time between two reads of the queue at step boundaries.
pub const DEFAULT_STEER_POLL_MS: u64 = 1_000;

/// A message sent to a run with `queue: true`, kept in the store's queue for the run until the run applies it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueuedMessage {
    /// Its id (`msg_…`).
    pub id: String,
    /// The run it was sent to.
    pub run_id: String,
    /// When it was queued (ms since the epoch): the queue's order, then the id.
    pub at: u64,
    /// The run's tag ([`run_tag`]) when it was queued.
    pub tag: String,
    /// The input (user messages).
    pub messages: Vec<Message>,
    /// Stop the calls of the current turn that have not started.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interrupt: bool,
}

impl QueuedMessage {
    /// A message for the stored run `cp`, checked: user input only (system messages are dropped), at least one
    /// message, within the JSON depth and [`MAX_PAYLOAD_BYTES`] limits.
    pub fn new(cp: &Checkpoint, id: String, at: u64, messages: Vec<Message>, interrupt: bool) -> Result<QueuedMessage> {
        let run_id = cp.run_id.clone();
        let messages: Vec<Message> = messages.into_iter().filter(|m| !m.is_system()).collect();
        if messages.is_empty() {
            return Err(Error::invalid_input("a queued message needs at least one user message").with_run(&run_id));
        }
        for m in &messages {
            check_message_depth("the input", m).map_err(|e| e.with_run(&run_id))?;
        }
        let q = QueuedMessage { id, run_id, at, tag: run_tag(cp), messages, interrupt };
        let bytes = serde_json::to_string(&q).map(|s| s.len()).unwrap_or(usize::MAX);
        if bytes > MAX_PAYLOAD_BYTES {
            return Err(Error::new(
                ErrorCode::PayloadTooLarge,
                format!("a queued message is at most {MAX_PAYLOAD_BYTES} bytes of JSON; this one is {bytes}"),
            )
            .with_run(&q.run_id));
        }
        Ok(q)
    }

    /// Its place in the queue: `<at, 16 digits>.<id>` (byte order is queue order).
    pub fn order_key(&self) -> String {
        format!("{:016}.{}", self.at, self.id)
    }

    /// When the recovery sweep looks at it (its due-index entry).
    pub fn due_at(&self) -> u64 {
        self.at.saturating_add(DUE_AFTER_MS)
    }
}

/// Whether an id names a queued message (a due-index entry of a message, not of a wait).
pub fn is_message_id(id: &str) -> bool {
    id.starts_with(MESSAGE_ID_PREFIX)
}

/// A run's tag: 16 hex digits of SHA-256 over its key scope (a random nonce drawn when the run was created), so a
/// new run under a deleted run's id has another tag. The scope itself stays out of the queue (it derives the
/// run's wait tokens).
pub fn run_tag(cp: &Checkpoint) -> String {
    let mut tag = sha256_hex(format!("steadfast queue\n{}", cp.own_key_scope()).as_bytes());
    tag.truncate(16);
    tag
}

/// What a run does with a queued entry it lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Disposition {
    /// Apply it.
    Apply,
    /// Delete it: the run applied it already (its id is recorded), or it was queued for another run of the same
    /// id (a deleted one).
    Spent,
}

/// What the run `cp` does with the entry `q` (see [`Disposition`]).
pub fn disposition(cp: &Checkpoint, q: &QueuedMessage) -> Disposition {
    if q.run_id != cp.run_id || q.tag != run_tag(cp) || cp.steered.iter().any(|id| id == &q.id) {
        Disposition::Spent
    } else {
        Disposition::Apply
    }
}

/// Sorts entries into queue order.
pub fn sort_queue(entries: &mut [QueuedMessage]) {
    crate::core::wire::sort_by(entries, |a, b| a.at.cmp(&b.at).then_with(|| a.id.cmp(&b.id)));
}

/// The result of a call a queued message stopped before it started.
pub fn not_run_content(message_id: &str, tool: &str) -> String {
    json_text(&serde_json::json!({
        "error": "not-run",
        "message": format!(
            "Not run: message '{message_id}' sent to the run asked to stop the calls that had not started; '{tool}' \
             did not run."
        ),
        "steeredBy": message_id,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::idempotency::new_scope;

    fn run(id: &str, nonce: u64) -> Checkpoint {
        let mut cp = Checkpoint::new(id);
        cp.key_scope = Some(new_scope(id, (nonce, nonce)));
        cp
    }

    #[test]
    fn an_entry_is_applied_once_and_only_to_its_own_run() {
        let cp = run("r", 1);
        let q = QueuedMessage::new(&cp, "msg_a".into(), 5, vec![Message::user("hi")], false).unwrap();
        assert_eq!(disposition(&cp, &q), Disposition::Apply);
        let mut applied = cp.clone();
        applied.steered.push("msg_a".into());
        assert_eq!(disposition(&applied, &q), Disposition::Spent, "its id is recorded");
        assert_eq!(disposition(&run("r", 2), &q), Disposition::Spent, "a new run under the same id");
        assert_eq!(disposition(&run("other", 1), &q), Disposition::Spent, "another run");
    }

    #[test]
    fn input_is_checked() {
        let cp = run("r", 1);
        let sys = QueuedMessage::new(&cp, "msg_a".into(), 5, vec![Message::system("x")], false).unwrap_err();
        assert_eq!(sys.code, ErrorCode::InvalidInput);
        let big = Message::user("x".repeat(MAX_PAYLOAD_BYTES));
        let err = QueuedMessage::new(&cp, "msg_a".into(), 5, vec![big], false).unwrap_err();
        assert_eq!(err.code, ErrorCode::PayloadTooLarge);
    }

    #[test]
    fn queue_order_is_time_then_id_and_keys_sort_the_same() {
        let cp = run("r", 1);
        let mk = |id: &str, at| QueuedMessage::new(&cp, id.into(), at, vec![Message::user("m")], false).unwrap();
        let mut qs = vec![mk("msg_b", 20), mk("msg_c", 3), mk("msg_a", 20), mk("msg_d", 100_000)];
        sort_queue(&mut qs);
        let ids: Vec<&str> = qs.iter().map(|q| q.id.as_str()).collect();
        assert_eq!(ids, ["msg_c", "msg_a", "msg_b", "msg_d"]);
        let keys: Vec<String> = qs.iter().map(|q| q.order_key()).collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted);
    }
}
