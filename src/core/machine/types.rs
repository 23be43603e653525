//! The machine's public types: its configuration, how it starts, the effects it hands out and the answers the
//! runtime gives back.

use crate::core::approval::{ApprovalRecord, Decision};
use crate::core::checkpoint::{FinishReason, JournalEntry, RunStatus};
use crate::core::error::Error;
use crate::core::events::Event;
use crate::core::fingerprint::Fingerprint;
use crate::core::transcript::{Message, ToolCall, Usage};
use crate::core::wait::WaitRequest;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeSet;

/// Longest tool-result text kept for an error (characters).
pub const MAX_ERROR_RESULT_CHARS: usize = 4_000;

/// What `onAgentDrift` does when the resuming agent differs from the checkpoint's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "lowercase")]
pub enum DriftPolicy {
    /// Emit an `agent.drift` event and continue.
    #[default]
    Warn,
    /// Fail with `STEADFAST_AGENT_DRIFT`; nothing is touched.
    Error,
    /// Do nothing.
    Ignore,
}

crate::core::wire::unit_enum_de!(DriftPolicy {
    "warn" => Warn,
    "error" => Error,
    "ignore" => Ignore,
});

/// The agent-level settings the machine needs.
#[derive(Clone, Debug)]
pub struct MachineConfig {
    /// Run id.
    pub run_id: String,
    /// Step budget per run.
    pub max_steps: u32,
    /// Token and time budgets of the run and its conversation ([`crate::core::budget`]).
    pub budget: crate::core::budget::Budget,
    /// The cap a run this execution creates records (a sub-agent's child: what its lead had left). Ignored for a
    /// stored run, which keeps its own.
    pub budget_cap: Option<crate::core::budget::BudgetCap>,
    /// Drift policy.
    pub on_agent_drift: DriftPolicy,
    /// The current agent's fingerprint.
    pub fingerprint: Fingerprint,
    /// Names of the tools the agent has.
    pub tool_names: BTreeSet<String>,
    /// Instructions (system prompt) for new runs.
    pub instructions: String,
    /// Stop after this many identical failing tool turns in a row (0 = off).
    pub loop_window: u32,
    /// Business state a new run starts with.
    pub business_state: Option<Value>,
    /// Longest tool result kept (bytes); longer ones are cut with a marker (see [`crate::core::limits`]).
    pub max_tool_result_bytes: usize,
    /// The idempotency-key scope a run this execution creates gets
    /// ([`crate::core::idempotency::new_scope`]: the run id and a random nonce, drawn by the runtime). Ignored
    /// for a stored run, which keeps its own; a new run without one keys its calls by its id alone.
    pub key_scope: Option<String>,
    /// Read the run's message queue ([`crate::core::steer`]) at step boundaries, at most once per this many ms
    /// (and always before the run finishes); `None`: never (a queued message then waits for the sweep).
    pub steer_poll_ms: Option<u64>,
    /// The run's handoff team (no members: no handoffs).
    pub team: Team,
    /// The execution's trace context when it is traced ([`crate::core::trace`]): kept in the run's hook state
    /// under [`crate::core::trace::TRACE_KEY`] from the execution's first entry on (the next execution links to
    /// it); the one it replaces is [`super::RunMachine::previous_trace`].
    pub trace: Option<crate::core::trace::SpanContext>,
}

/// The agents a run's conversation may be handed to ([handoffs](super#handoffs)): the run's own agent (the
/// lead, `lead` by name) and its members. Each sees a `transfer_to_<name>` tool for every other one.
#[derive(Clone, Debug, Default)]
pub struct Team {
    /// The run's own agent's name in the team (`transfer_to_<lead>` hands the conversation back to it).
    pub lead: String,
    /// The other agents.
    pub members: Vec<TeamMember>,
    /// Handoffs a run may take (`maxHandoffs`); one more is a `STEADFAST_HANDOFF_LIMIT` error result.
    pub max_handoffs: u32,
}

/// An agent of a run's handoff team besides the run's own: what the machine checks and records of it.
#[derive(Clone, Debug)]
pub struct TeamMember {
    /// Its name (`transfer_to_<name>`).
    pub name: String,
    /// Its fingerprint (the checkpoint's while the conversation is with it).
    pub fingerprint: Fingerprint,
    /// Names of its tools (its `transfer_to_` tools included).
    pub tool_names: BTreeSet<String>,
    /// Its instructions: a system message added to the transcript when the conversation is handed to it.
    pub instructions: String,
}

/// How a machine is started.
#[derive(Clone, Debug)]
pub enum Start {
    /// `send(input)`: start, resume or continue the run.
    Send(Vec<Message>),
    /// `resume()`: finish an unfinished run without new input.
    Resume,
    /// A session's turn: a new run whose conversation so far is `prior`'s (the session's previous turn,
    /// finished; `None` for the first turn), continued with `input` as a finished run is. Its first commit is
    /// a snapshot, so the new run is whole from its first entry on; refused when the run exists already
    /// (`STEADFAST_SESSION_EXISTS`).
    Turn {
        /// The previous turn's final state.
        prior: Option<Box<crate::core::checkpoint::Checkpoint>>,
        /// The new turn's input.
        input: Vec<Message>,
    },
    /// The last approval of a pause was resolved: these are the decisions for every approval of the pause.
    Approvals(Vec<Decision>),
    /// Mark the stored run quarantined (the recovery sweep gave up on it): one commit, nothing runs.
    Quarantine,
    /// Record a failed attempt on the stored run (`lastError`, `attempts + 1`) when the attempt's own commit was
    /// refused for good (`STEADFAST_STORE_FAILED`): one commit, nothing runs.
    Failed(Error),
    /// Apply the run's queued messages ([`crate::core::steer`]): an unfinished run is resumed (it reads its queue
    /// at its boundaries); a finished run reads its queue first and continues with what it finds as with a send,
    /// or ends at once, unchanged, when nothing is queued. Refused while the run waits on an approval (the
    /// resumption after it reads the queue) and when the agent does not read queues.
    Drain,
}

/// The runtime's verdict on a tool call before it runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Gate {
    /// Run it.
    Run,
    /// Run it, recording the intent first (a side-effecting tool: effect ledger, M26).
    RunWithIntent,
    /// Pause the run on an approval with this (fresh, random) id.
    NeedsApproval {
        /// Approval id.
        approval_id: String,
    },
    /// The arguments are invalid: the model gets this message as a `validation` result.
    Invalid {
        /// Why.
        message: String,
    },
    /// The agent has no such tool: the model gets a `validation` result naming the tools it has.
    UnknownTool,
    /// A hook denied the call: the model gets a `denied` result.
    Denied {
        /// Why.
        reason: String,
    },
}

/// How a tool call ended.
#[derive(Clone, Debug, PartialEq)]
pub enum ToolOutcome {
    /// It returned.
    Ok {
        /// Text for the model.
        content: String,
        /// Replaces the run's business state when set.
        business_state: Option<Value>,
        /// What a sub-agent's child run spent for the call (added to this run's usage with the result).
        usage: Option<Usage>,
    },
    /// It threw: the model reads the message as an `is_error` result.
    Failed {
        /// `"<Type>: <message>"`, no stack.
        message: String,
    },
    /// It threw a propagating error: the run attempt is rejected.
    Propagate(Error),
    /// A hook denied it before it ran: the model gets a `denied` result.
    Denied {
        /// Why.
        reason: String,
    },
    /// It answered "pending": the call waits for a person's answer, an event or a time ([`crate::core::wait`]);
    /// the run pauses once nothing else runs, and the wait's resolution becomes the call's result.
    Wait(WaitRequest),
    /// A hook replaced what the tool produced.
    Replaced {
        /// Text for the model.
        content: String,
        /// Whether it reports a failure.
        is_error: bool,
        /// The hook that replaced it.
        by: String,
        /// What a sub-agent's child run spent for the call (still counted: it was spent).
        usage: Option<Usage>,
    },
}

/// A model's answer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelResponse {
    /// Text.
    #[serde(default)]
    pub text: String,
    /// Tool calls.
    #[serde(default)]
    pub tool_calls: Vec<ToolCall>,
    /// Usage of this call.
    #[serde(default)]
    pub usage: Usage,
    /// The provider's stop reason as it sent it (`stop`, `end_turn`, `tool_calls`, …). For a turn without tool
    /// calls, the ones [`FinishReason::from_stop_reason`] knows (`length` / `max_tokens`, `refusal`,
    /// `content_filter`) become the run's finish reason instead of `stop`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// Reasoning blocks as the provider sent them (Anthropic thinking), kept in the transcript and sent back
    /// unchanged.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasoning: Vec<Value>,
}

/// A tool call with its call key ([`crate::core::idempotency`]).
#[derive(Clone, Debug, PartialEq)]
pub struct KeyedCall {
    /// The call.
    pub call: ToolCall,
    /// Its call key.
    pub key: String,
}

/// How an execution ended.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// Status of the run after it.
    pub status: RunStatus,
    /// Why it ended or paused.
    pub finish_reason: Option<FinishReason>,
    /// Explanation for budget stops.
    pub note: Option<String>,
    /// The error, for a rejected attempt.
    pub error: Option<Error>,
}

/// What the runtime must do next.
#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    /// Deliver an event.
    Emit(Event),
    /// Ask the model for the next turn (transcript: [`RunMachine::checkpoint`](super::RunMachine::checkpoint)); answer with
    /// [`RunMachine::notify_model_response`](super::RunMachine::notify_model_response) or [`RunMachine::notify_model_failed`](super::RunMachine::notify_model_failed).
    CallModel {
        /// The step this call will be.
        step: u32,
    },
    /// Decide each call (validation, approval predicate, hooks); answer with [`RunMachine::notify_gated`](super::RunMachine::notify_gated).
    Gate {
        /// Calls to decide, in call order.
        calls: Vec<ToolCall>,
    },
    /// Side-effecting calls whose intent was recorded but whose outcome was not: ask each tool's `reconcile`
    /// whether the effect happened (under the call's key); answer with
    /// [`RunMachine::notify_reconciled`](super::RunMachine::notify_reconciled).
    Reconcile {
        /// The calls with their call keys, in call order.
        calls: Vec<KeyedCall>,
    },
    /// Start a tool call; answer (any time later) with [`RunMachine::notify_tool_settled`](super::RunMachine::notify_tool_settled).
    RunTool {
        /// The call.
        call: ToolCall,
        /// The approval id for an approved call (its idempotency key).
        approval_id: Option<String>,
        /// The call key ([`crate::core::idempotency`]): the idempotency key of a call that was not approved.
        key: String,
        /// The token of the event wait this call may answer with ([`crate::core::wait::token`]).
        wait_token: String,
    },
    /// Append this entry to the run's journal (full state: [`RunMachine::checkpoint`](super::RunMachine::checkpoint)); answer with
    /// [`RunMachine::notify_committed`](super::RunMachine::notify_committed).
    Commit(JournalEntry),
    /// Write these approval records; answer with [`RunMachine::notify_approvals_recorded`](super::RunMachine::notify_approvals_recorded). Always before the
    /// `awaiting-approval` commit.
    Pause {
        /// One record per gated call.
        approvals: Vec<ApprovalRecord>,
    },
    /// Read the run's message queue ([`crate::core::steer`]); answer with
    /// [`RunMachine::notify_queue`](super::RunMachine::notify_queue) (the entries listed, in queue order).
    ReadQueue,
    /// The execution is over.
    Finish(Outcome),
}
