//! One state per tool call of the current turn.
//!
//! The states and their transitions are drawn in the docs of [`crate::core::machine`]; [`CallState::allows`] is
//! the same drawing as code, and [`TurnCalls::set`] refuses any move it does not allow.

use crate::core::transcript::ToolCall;

/// Where one tool call of the current turn stands in this execution.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum CallState {
    /// Just entered, not classified yet (exists only while the turn is entered); `approval_id` when a reviewer
    /// approved it.
    Entered { approval_id: Option<String> },
    /// Waits for the runtime's gate verdict (`Effect::Gate`, answered by `notify_gated`).
    AwaitingGate,
    /// An earlier execution recorded its intent but not its outcome: waits for the tool's answer
    /// (`Effect::Reconcile`, answered by `notify_reconciled`).
    AwaitingReconcile,
    /// Cleared to run. The mark it needs (a start mark for an approved call, an intent for a side-effecting one)
    /// is already in the state; it runs once that state is committed.
    Ready { approval_id: Option<String> },
    /// Waits for a reviewer: part of the next pause.
    AwaitingApproval { approval_id: String },
    /// `Effect::RunTool` was handed out; waits for `notify_tool_settled`.
    Running,
    /// The tool answered "pending" ([`crate::core::wait`]): part of the next pause, with this wait.
    Parked { wait: crate::core::wait::WaitRequest },
    /// Its result is in the checkpoint (placed, or held until every earlier call has one).
    Recorded,
    /// It was running when the attempt failed: what it returns is not recorded. The next execution decides from
    /// the durable marks (a start mark: interrupted; an intent: reconcile; none: it runs again).
    Abandoned,
}

impl CallState {
    /// Whether `self` may become `next`: the transitions drawn in the module docs.
    fn allows(&self, next: &CallState) -> bool {
        use CallState::*;
        matches!(
            (self, next),
            (Entered { .. }, AwaitingGate | AwaitingReconcile | Ready { .. } | Recorded)
                | (AwaitingGate, Ready { approval_id: None } | AwaitingApproval { .. } | Recorded)
                | (AwaitingReconcile, Ready { approval_id: None } | Recorded)
                | (Ready { .. }, Running | Recorded)
                | (AwaitingApproval { .. }, Recorded)
                | (Running, Recorded | Abandoned | Parked { .. })
                | (Parked { .. }, Recorded)
        )
    }

    /// Whether the call still has no result.
    pub(super) fn is_open(&self) -> bool {
        !matches!(self, CallState::Recorded)
    }

    /// For error messages.
    pub(super) fn describe(&self) -> &'static str {
        match self {
            CallState::Entered { .. } => "just entered",
            CallState::AwaitingGate => "awaiting its gate verdict",
            CallState::AwaitingReconcile => "awaiting its reconcile answer",
            CallState::Ready { .. } => "ready but not started",
            CallState::AwaitingApproval { .. } => "awaiting approval",
            CallState::Running => "running",
            CallState::Parked { .. } => "parked on a wait",
            CallState::Recorded => "recorded",
            CallState::Abandoned => "abandoned",
        }
    }
}

/// A call of the current turn and its state.
#[derive(Clone, Debug)]
pub(super) struct Slot {
    pub(super) call: ToolCall,
    pub(super) state: CallState,
}

/// The calls of the current turn that had no result when the turn was entered, in call order, each with its one
/// state. (Calls an earlier execution answered are not here: they are in the transcript.)
#[derive(Clone, Debug, Default)]
pub(super) struct TurnCalls {
    slots: Vec<Slot>,
}

impl TurnCalls {
    /// Adds a call of the turn being entered, with the approval id a reviewer gave it (if any).
    pub(super) fn enter(&mut self, call: ToolCall, approval_id: Option<String>) {
        self.slots.push(Slot { call, state: CallState::Entered { approval_id } });
    }

    /// The number of slots.
    pub(super) fn len(&self) -> usize {
        self.slots.len()
    }

    /// Slot `i`, in call order.
    pub(super) fn at(&self, i: usize) -> &Slot {
        &self.slots[i]
    }

    /// Call `id` and its state, if it is a call of this turn that was open when the turn was entered.
    pub(super) fn slot(&self, id: &str) -> Option<&Slot> {
        self.slots.iter().find(|s| s.call.id == id)
    }

    /// The state of call `id`, if it is a call of this turn that was open when the turn was entered.
    pub(super) fn state(&self, id: &str) -> Option<&CallState> {
        self.slot(id).map(|s| &s.state)
    }

    /// Moves call `id` to `next`. Returns false, changing nothing, when `id` is not a slot of this turn or the
    /// move is not a transition of the diagram (a bug in the machine: debug builds stop on it).
    pub(super) fn set(&mut self, id: &str, next: CallState) -> bool {
        let Some(slot) = self.slots.iter_mut().find(|s| s.call.id == id) else {
            debug_assert!(false, "call '{id}' is not a call of the current turn");
            return false;
        };
        if !slot.state.allows(&next) {
            debug_assert!(false, "call '{id}' cannot go from {:?} to {next:?}", slot.state);
            return false;
        }
        slot.state = next;
        true
    }

    /// The calls in `state`, in call order.
    pub(super) fn calls_in(&self, state: &CallState) -> Vec<ToolCall> {
        let mut calls = Vec::new();
        for slot in &self.slots {
            if slot.state == *state {
                calls.push(slot.call.clone());
            }
        }
        calls
    }

    /// The calls without a result, in call order.
    pub(super) fn open_calls(&self) -> Vec<ToolCall> {
        let mut calls = Vec::new();
        for slot in &self.slots {
            if slot.state.is_open() {
                calls.push(slot.call.clone());
            }
        }
        calls
    }

    /// The calls that have not started, in call order: cleared to run but not handed out, or about to pause
    /// for a reviewer.
    pub(super) fn unstarted(&self) -> Vec<ToolCall> {
        let mut calls = Vec::new();
        for slot in &self.slots {
            if matches!(slot.state, CallState::Ready { .. } | CallState::AwaitingApproval { .. }) {
                calls.push(slot.call.clone());
            }
        }
        calls
    }

    /// Whether a call has no result yet.
    pub(super) fn has_open(&self) -> bool {
        self.slots.iter().any(|s| s.state.is_open())
    }

    /// The attempt failed: every running call is abandoned.
    pub(super) fn abandon_running(&mut self) {
        for slot in &mut self.slots {
            if slot.state == CallState::Running {
                slot.state = CallState::Abandoned;
            }
        }
    }

    /// Ids of the running calls.
    pub(super) fn running(&self) -> impl Iterator<Item = &String> {
        self.slots.iter().filter(|s| s.state == CallState::Running).map(|s| &s.call.id)
    }
}
