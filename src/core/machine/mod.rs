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

mod notify;
mod start;
mod step;
mod types;

pub use types::{
    DriftPolicy, Effect, Gate, MachineConfig, ModelResponse, Outcome, Start, ToolOutcome, MAX_ERROR_RESULT_CHARS,
};

use crate::core::approval::Decision;
use crate::core::checkpoint::{Checkpoint, Header};
use crate::core::fingerprint::Fingerprint;
use crate::core::transcript::ToolCall;
use serde_json::Value;
use std::collections::{HashMap, HashSet, VecDeque};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Wait {
    Commit,
    Model,
    Gate,
    Approvals,
    Reconcile,
}

/// The run state machine.
#[derive(Debug)]
pub struct RunMachine {
    cfg: MachineConfig,
    cp: Checkpoint,
    now: u64,
    effects: VecDeque<Effect>,
    waiting: Option<Wait>,
    done: bool,
    dirty: bool,
    snapshot_next: bool,
    committed_len: usize,
    committed_head: Header,
    committed_business: Option<Value>,
    committed_fp: Option<Fingerprint>,
    committed_ext: Option<Value>,
    gated: HashMap<String, Gate>,
    need_gate: Vec<ToolCall>,
    need_reconcile: Vec<ToolCall>,
    reconciled: HashSet<String>,
    running: HashSet<String>,
    approved: HashMap<String, String>,
    launched: HashSet<String>,
    decisions: Option<Vec<Decision>>,
    pausing: Vec<String>,
    finishing: Option<Outcome>,
}

impl RunMachine {
    /// Sets the clock reading used for timestamps of the next effects.
    pub fn set_now(&mut self, now: u64) {
        self.now = now;
    }

    /// The next effect to perform, if any.
    pub fn poll_effect(&mut self) -> Option<Effect> {
        self.effects.pop_front()
    }

    /// Whether the execution is over (a `Finish` was handed out).
    pub fn is_done(&self) -> bool {
        self.done && self.effects.is_empty()
    }

    /// Ids of the tool calls started and not settled.
    pub fn running(&self) -> impl Iterator<Item = &String> {
        self.running.iter()
    }

    /// Whether the machine waits for the result of this started call.
    pub fn is_running(&self, tool_call_id: &str) -> bool {
        self.running.contains(tool_call_id)
    }

    /// The current state (what the last or next commit holds).
    pub fn checkpoint(&self) -> &Checkpoint {
        &self.cp
    }

    /// Replaces the extension state (progress-guard counters); committed with the next boundary.
    pub fn set_ext(&mut self, ext: Option<Value>) {
        if self.cp.ext != ext {
            self.cp.ext = ext;
            self.dirty = true;
        }
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
