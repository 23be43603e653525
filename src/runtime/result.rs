//! What an execution reports: [`RunResult`] (the run after it, and [`RunStats`], what it did).

use crate::core::approval::{ApprovalRecord, PendingWait};
use crate::core::budget::Exceeded;
use crate::core::checkpoint::{Checkpoint, FinishReason, RunStatus};
use crate::core::error::Result;
use crate::core::machine::{Outcome, RunMachine};
use crate::core::transcript::{Message, Usage};
use crate::store::StoreCounters;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How an execution ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase")]
pub struct RunResult {
    /// Run id.
    pub run_id: String,
    /// Status after this execution.
    pub status: RunStatus,
    /// Why it ended.
    pub finish_reason: Option<FinishReason>,
    /// The last assistant text.
    pub text: String,
    /// Explanation of a budget stop.
    pub note: Option<String>,
    /// The whole transcript.
    pub messages: Vec<Message>,
    /// Steps of the current run.
    pub steps: u32,
    /// Usage of the current run (this send and the resumes that finished it; a finished run continued as a
    /// conversation counts from zero).
    pub usage: Usage,
    /// Usage of the whole conversation: every run of this id, this one included.
    pub total_usage: Usage,
    /// Pending approvals.
    pub approval_ids: Vec<String>,
    /// First pending approval.
    pub approval_id: Option<String>,
    /// Business state.
    pub business_state: Option<Value>,
    /// What this execution did.
    pub stats: RunStats,
    /// The tools' waits the run paused on in this execution (questions, events, timers; approvals are in
    /// `approval_ids`), with each event wait's token: the execution that paused hands it to its caller.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "ts", ts(as = "Option<Vec<PendingWait>>", optional))]
    pub waits: Vec<PendingWait>,
    /// A send with `queue: true` ([`crate::core::steer`]): the message it queued, and whether the run applied it
    /// by the end of this call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub queued: Option<QueuedSend>,
    /// The budget this execution found exhausted (finish reason `budget-exceeded`): what an agent with
    /// `onExceeded: "throw"` fails with at its front doors.
    #[serde(skip)]
    #[cfg_attr(feature = "ts", ts(skip))]
    pub(crate) exceeded: Option<Exceeded>,
}

/// What a send with `queue: true` did with its message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase")]
pub struct QueuedSend {
    /// The queued message's id (as the `message.applied` event names it).
    pub message_id: String,
    /// Whether the run applied it during this call (no execution held the run, so this call ran it). `false`:
    /// it waits in the run's queue for the execution that holds the run (its next step boundary), for the
    /// resumption after the run's approval, or for the recovery sweep; nothing ran here.
    pub applied: bool,
}

impl RunResult {
    /// The result of a run as stored, when nothing runs (e.g. a finished run's result, as a redelivery of
    /// its job acknowledges it): the checkpoint's status, finish reason, text and messages, empty stats.
    pub fn stored(cp: &Checkpoint) -> RunResult {
        let outcome = Outcome { status: cp.status, finish_reason: cp.finish_reason, note: None, error: None };
        RunResult::of(cp, &outcome, RunStats::default())
    }

    pub(crate) fn of(cp: &Checkpoint, outcome: &Outcome, stats: RunStats) -> RunResult {
        RunResult {
            run_id: cp.run_id.clone(),
            status: outcome.status,
            finish_reason: outcome.finish_reason,
            text: cp.last_text(),
            note: outcome.note.clone(),
            messages: cp.messages.clone(),
            steps: cp.step_index,
            usage: cp.usage_view(),
            total_usage: cp.total_usage,
            approval_ids: cp.approval_ids.clone(),
            approval_id: cp.approval_ids.first().cloned(),
            business_state: cp.business_state.clone(),
            stats,
            waits: Vec::new(),
            queued: None,
            exceeded: None,
        }
    }
}

/// What one execution did (reported on every [`RunResult`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase")]
pub struct RunStats {
    /// Effects performed.
    pub effects: usize,
    /// Journal entries written.
    pub commits: usize,
    /// Model calls made (retries included).
    pub model_calls: usize,
    /// Tool executions started.
    pub tool_runs: usize,
    /// Lease renewals.
    pub lease_renewals: usize,
    /// Store read operations of this execution (lease, load and commits; backends that count).
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    pub store_reads: u64,
    /// Store write operations of this execution.
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    pub store_writes: u64,
    /// Bytes the store wrote for this execution.
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    pub store_bytes: u64,
    /// Of `store_writes`, the writes of journal entries (KV keys, or an object's rows): what the durable
    /// boundaries themselves cost, leases and indexes aside.
    #[serde(default)]
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    pub store_commit_writes: u64,
}

/// A machine driven to its verdict under a lease (see [`super::lease`]), before it is reported.
pub(crate) struct Driven {
    pub(crate) machine: RunMachine,
    pub(crate) outcome: Outcome,
    pub(crate) stats: RunStats,
    /// The records of the pause the execution took (none if it did not pause).
    pub(crate) paused: Vec<ApprovalRecord>,
}

impl Driven {
    /// The result of the execution, once its lease is released: `store` is what the store did since the
    /// execution started (the release included). A verdict with an error (the run attempt failed) is that error.
    pub(crate) fn report(self: Box<Self>, store: StoreCounters) -> Result<RunResult> {
        let mut stats = self.stats;
        stats.store_reads = store.reads;
        stats.store_writes = store.writes;
        stats.store_bytes = store.bytes_written;
        stats.store_commit_writes = store.commit_writes;
        match self.outcome.error {
            Some(e) => Err(e),
            None => {
                let exceeded = self.machine.exceeded();
                // The machine is done with: its transcript moves into the result (a run's whole transcript
                // copied once per execution was about a sixth of a 500-step run's time, natively).
                let mut cp = self.machine.into_checkpoint();
                let waits = self.paused.iter().filter_map(|r| PendingWait::of(r, cp.own_key_scope())).collect();
                let (text, messages) = (cp.last_text(), std::mem::take(&mut cp.messages));
                let mut res = RunResult::of(&cp, &self.outcome, stats);
                (res.text, res.messages, res.waits, res.exceeded) = (text, messages, waits, exceeded);
                Ok(res)
            }
        }
    }
}
