//! The run state machine: sans-IO, events in, effects out.
//!
//! The runtime feeds it what happened (`notify_*`) and performs the [`Effect`]s it hands back, one at a time
//! and in order, except [`Effect::RunTool`], of which several may be in flight. Every state change reaches the
//! store through an [`Effect::Commit`] before any effect that depends on it (a tool never runs before the model
//! turn that asked for it is committed; a model is never called before the previous results are committed).
//! Because every I/O is an effect, a test can stop after any effect, rebuild from what was committed, and
//! compare with an uninterrupted run.
//!
//! ```text
//!  start ─► [Gate?] ─► Commit ─► RunTool… ─► (settle ─► Commit)… ─► [Pause ─► Commit ─► Finish]
//!                                                                  └► CallModel ─► response ─► …
//! ```
//!
//! # One state per tool call
//!
//! When a turn is entered (the model asked for tools, or an execution starts over a turn with calls that have
//! no result), each call without a result gets a slot holding exactly one `CallState`. Every fact the machine
//! keeps about a call in this execution lives in that one value: whether it waits for a gate verdict or for a
//! reconcile answer, whether it is cleared to run (and with which approval id), whether it runs, whether it has
//! its result. What an earlier execution left behind is read from the checkpoint once, when the turn is entered
//! (a start mark without a result: interrupted; an intent without an outcome: reconcile), so a mark this
//! execution writes is never mistaken for a leftover.
//!
//! ```text
//!  entered ──┬─ start mark left by an earlier execution ─────────────────────────────► Recorded (interrupted)
//!            ├─ intent left, outcome unknown ──► AwaitingReconcile ─┬─ it happened ──► Recorded
//!            │                                                      └─ it did not ───► Ready
//!            ├─ invalid arguments ───────────────────────────────────────────────────► Recorded (validation)
//!            ├─ rejected by a reviewer ──────────────────────────────────────────────► Recorded (rejected)
//!            ├─ approved by a reviewer (start mark written) ─────────────────────────► Ready (approval id)
//!            └─ otherwise ──► AwaitingGate ─┬─ Run ─────────────────────────────────► Ready
//!                                           ├─ RunWithIntent (intent written) ──────► Ready
//!                                           ├─ NeedsApproval ───────────────────────► AwaitingApproval ─► pause
//!                                           └─ Invalid / UnknownTool / Denied ──────► Recorded
//!  Ready ── state committed, RunTool handed out ──► Running ── settled ──► Recorded
//!  abort: every call without a result ──► Recorded (cancelled)      failure: Running ──► Abandoned
//! ```
//!
//! The gate and reconcile effects list the calls in `AwaitingGate` / `AwaitingReconcile`, so a call is asked
//! about once: only a call just entered can reach those states, and a move not drawn above is refused.
//!
//! # Answers and signals
//!
//! The machine is in one of three phases (active; ending: the outcome is decided and its commit is being
//! written; done: `Finish` was handed out) and waits for at most one answer at a time (to a [`Effect::Commit`],
//! [`Effect::CallModel`], [`Effect::Gate`], [`Effect::Reconcile`] or [`Effect::Pause`]); tool calls are the only
//! effects outstanding several at a time, and their states say which. An answer the machine does not wait for
//! (a commit nobody handed out, a verdict for a call not asked about, a result for a call that is not running)
//! is refused with `STEADFAST_INTERNAL` saying what the machine waits for, and changes nothing; the runtime
//! fails the attempt on it. The one tolerance: once an abort or a failure decided the outcome, late answers to
//! the model call, gate, reconcile and tool calls handed out before are accepted and ignored (each `notify_*`
//! says so). `notify_abort` and `notify_failed` are signals, valid in every state; the first verdict wins.
//!
//! # The module
//!
//! - `types`: what goes in and out ([`MachineConfig`], [`Start`], [`Effect`], [`Gate`], [`ToolOutcome`],
//!   [`ModelResponse`], [`Outcome`], [`DriftPolicy`]);
//! - `start`: [`RunMachine::start`], with the checks that refuse before any effect;
//! - `notify`: the runtime's answers and signals (`notify_*`);
//! - `step`: what happens after each answer: state changes that need no I/O, the commit, then the effects that
//!   need the committed state;
//! - `calls`: the one state of each tool call of the current turn;
//! - `steer`: reading the run's message queue at step boundaries and applying what it holds;
//! - `handoff`: answering `transfer_to_<name>` calls and handing the conversation to another agent.
//!
//! # Handoffs
//!
//! A run whose configuration has a [`Team`] hands its conversation from agent to agent. A turn's calls of
//! `transfer_to_<name>` tools are answered by the machine when the turn is entered, nothing runs: the first of
//! the turn hands off (`{"transferredTo": name}`), the others get `not-run` results; past `maxHandoffs` the
//! first gets a `STEADFAST_HANDOFF_LIMIT` error result instead. Once every call of the turn has its result, the
//! conversation moves to that agent in the same commit as the turn's last result: the checkpoint's `agent`
//! names it, its fingerprint becomes the checkpoint's (the drift checks of later executions compare with that
//! agent's current definition), its instructions are added as a system message and `handoffs` counts one more;
//! the next model call is its. A crash before that commit repeats the move, deterministically, on resume.

mod calls;
mod handoff;
mod notify;
mod start;
mod steer;
mod step;
mod types;

pub use handoff::HANDOFF_PREFIX;
pub use types::{
    DriftPolicy, Effect, Gate, KeyedCall, MachineConfig, ModelResponse, Outcome, Start, Team, TeamMember, ToolOutcome,
    MAX_ERROR_RESULT_CHARS,
};

use crate::core::checkpoint::{Checkpoint, FinishReason};
use crate::core::transcript::ToolCall;
use calls::TurnCalls;
use serde_json::Value;
use std::collections::VecDeque;
use step::Committed;

/// The one answer the machine waits for (none while tools run and nothing else is outstanding).
#[derive(Clone, Debug, PartialEq, Eq)]
enum Wait {
    /// `notify_committed`.
    Commit,
    /// `notify_model_response` or `notify_model_failed`.
    Model,
    /// `notify_gated`, for the calls in `AwaitingGate`.
    Gate,
    /// `notify_reconciled`, for the calls in `AwaitingReconcile`.
    Reconcile,
    /// `notify_approvals_recorded`; then the run pauses on this batch of approval ids.
    Approvals { batch: Vec<String> },
    /// `notify_queue`.
    Queue,
}

/// When the run's message queue was read ([`crate::core::steer`]): at most once per boundary of each kind within
/// a turn (reset when the model answers), and no more often than the agent's `steer_poll_ms` (except before the
/// run finishes).
#[derive(Clone, Copy, Debug, Default)]
struct QueueReads {
    /// Read before this turn's calls start.
    before_tools: bool,
    /// Read before the next model call (or before the run finishes).
    before_model: bool,
    /// The clock reading of the last read.
    last_at: Option<u64>,
}

/// Journal entries between the ones that record the store operations noted since (besides each execution's last
/// entry, which always does): see [`crate::core::checkpoint::Checkpoint::storage`].
pub const STORAGE_EVERY: u64 = 16;

/// Where the execution stands.
#[derive(Clone, Debug, PartialEq)]
enum Phase {
    /// Working: each step runs transitions and actions.
    Active,
    /// The outcome is decided; what is left is committing the state, then handing out `Finish`.
    Ending(Outcome),
    /// `Finish` was handed out. `cut_short` when an abort or a failure decided the outcome.
    Done { cut_short: bool },
}

/// Whether an abort or a failure decided this outcome (rather than the run finishing or pausing).
fn cut_short(outcome: &Outcome) -> bool {
    outcome.error.is_some() || outcome.finish_reason == Some(FinishReason::Aborted)
}

/// The run state machine.
#[derive(Debug)]
pub struct RunMachine {
    cfg: MachineConfig,
    /// The current state (what the last or next commit holds).
    cp: Checkpoint,
    now: u64,
    /// The clock reading the checkpoint's `active_ms` counts to (this execution's start, then its last commit).
    active_mark: u64,
    /// Store operations noted since the last commit ([`RunMachine::note_storage`]): the next entry adds them to
    /// the checkpoint's `storage` (until then the checkpoint shows what its journal records).
    storage_noted: crate::core::cost::StorageUsage,
    effects: VecDeque<Effect>,
    phase: Phase,
    waiting: Option<Wait>,
    /// The calls of the current turn, one state each.
    calls: TurnCalls,
    /// What the journal holds already.
    committed: Committed,
    /// `cp` moved past what the journal holds: the next step commits.
    dirty: bool,
    /// The next commit is a snapshot (the first entry of a new run).
    snapshot_next: bool,
    /// The trace context the run kept before this execution's ([`MachineConfig::trace`]).
    prev_trace: Option<crate::core::trace::SpanContext>,
    /// Why the last model turn, if it had no calls, ends the run when it is not a plain stop (length,
    /// refusal, content filter). Not kept: the turn and the finish it causes are committed together.
    turn_finish: Option<FinishReason>,
    /// The tool call ids of the transcript, indexed as it grows (see `sanitize_calls`).
    call_ids: step::CallIds,
    /// Reads of the message queue in this turn.
    queue_reads: QueueReads,
}

impl RunMachine {
    /// Sets the clock reading used for timestamps of the next effects.
    pub fn set_now(&mut self, now: u64) {
        self.now = now;
    }

    /// Adds store operations the driver metered for this run ([`crate::store::meter`], priced): the next journal
    /// entry records them.
    pub fn note_storage(&mut self, used: crate::core::cost::StorageUsage) {
        self.storage_noted.add(used);
    }

    /// The next effect to perform, if any.
    pub fn poll_effect(&mut self) -> Option<Effect> {
        self.effects.pop_front()
    }

    /// The budget the run stopped on, when it finished with `budget-exceeded` (a limit it has reached).
    pub fn exceeded(&self) -> Option<crate::core::budget::Exceeded> {
        (self.cp.finish_reason == Some(FinishReason::BudgetExceeded))
            .then(|| self.budget().exceeded(&self.cp, self.cp.active_ms))
            .flatten()
    }

    /// The budget in force: the agent's, with the run's recorded cap (a child run's, from its lead).
    fn budget(&self) -> crate::core::budget::Budget {
        self.cfg.budget.with_cap(self.cp.budget_cap)
    }

    /// What this run has left of its budget now, as the cap of a child run one of its calls starts
    /// ([`crate::core::budget::Budget::remaining`]); `None` when it has no limit.
    pub fn child_cap(&self) -> Option<crate::core::budget::BudgetCap> {
        self.budget().remaining(&self.cp, self.active_ms())
    }

    /// Whether the execution is over (a `Finish` was handed out).
    pub fn is_done(&self) -> bool {
        matches!(self.phase, Phase::Done { .. }) && self.effects.is_empty()
    }

    /// Ids of the tool calls started and not settled, in call order.
    pub fn running(&self) -> impl Iterator<Item = &String> {
        self.calls.running()
    }

    /// Whether the machine waits for the result of this started call.
    pub fn is_running(&self, tool_call_id: &str) -> bool {
        self.calls.state(tool_call_id) == Some(&calls::CallState::Running)
    }

    /// The current state (what the last or next commit holds).
    pub fn checkpoint(&self) -> &Checkpoint {
        &self.cp
    }

    /// The current state, the machine done with.
    pub fn into_checkpoint(self) -> Checkpoint {
        self.cp
    }

    /// The journal position the run is committed through, as far as this machine knows: its state's, less
    /// the entry it has asked to commit and not yet heard back about.
    pub fn committed_through(&self) -> u64 {
        match self.waiting {
            Some(Wait::Commit) => self.cp.seq.saturating_sub(1),
            _ => self.cp.seq,
        }
    }

    /// The trace context of the run's execution before this one, when this one is traced and the run kept one.
    pub fn previous_trace(&self) -> Option<crate::core::trace::SpanContext> {
        self.prev_trace
    }

    /// The execution's own trace context ([`MachineConfig::trace`]).
    pub fn trace(&self) -> Option<crate::core::trace::SpanContext> {
        self.cfg.trace
    }

    /// Replaces the extension state (progress-guard counters); committed with the next boundary.
    pub fn set_ext(&mut self, ext: Option<Value>) {
        if self.cp.ext != ext {
            self.cp.ext = ext;
            self.dirty = true;
        }
    }

    /// The call key of a call of the transcript ([`crate::core::idempotency`]). Every call the machine hands
    /// out is in its transcript; the fallback (the run's own scope) is never used.
    fn key_of(&self, call: &ToolCall) -> String {
        self.cp
            .call_key(&call.id)
            .unwrap_or_else(|| crate::core::idempotency::call_key(self.cp.own_key_scope(), &call.id))
    }

    /// Tool calls of the last turn that have no result yet, in call order.
    pub fn pending_calls(&self) -> Vec<ToolCall> {
        let Some((idx, placed)) = self.turn() else { return Vec::new() };
        self.cp.messages[idx]
            .tool_calls()
            .iter()
            .skip(placed)
            .filter(|c| !self.cp.held_results.iter().any(|r| r.tool_call_id == c.id))
            .cloned()
            .collect()
    }
}
