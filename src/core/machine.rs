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

use super::approval::{ApprovalRecord, ApprovalStatus, Decision};
use super::checkpoint::{Checkpoint, EntryBody, FinishReason, Header, JournalEntry, RunStatus};
use super::error::{cap_chars, Error, ErrorCode, Result};
use super::events::Event;
use super::fingerprint::{canonical_json, Fingerprint};
use super::limits::{cap_tool_result, check_depth, json_depth, MAX_JSON_DEPTH};
use super::transcript::{Message, ResultKind, ToolCall, ToolResult, Usage};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};

/// Longest tool-result text kept for an error (characters).
pub const MAX_ERROR_RESULT_CHARS: usize = 4_000;

/// What `onAgentDrift` does when the resuming agent differs from the checkpoint's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
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

/// The agent-level settings the machine needs.
#[derive(Clone, Debug)]
pub struct MachineConfig {
    /// Run id.
    pub run_id: String,
    /// Step budget per run.
    pub max_steps: u32,
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
    /// Longest tool result kept (bytes); longer ones are cut with a marker (see [`super::limits`]).
    pub max_tool_result_bytes: usize,
}

/// How a machine is started.
#[derive(Clone, Debug)]
pub enum Start {
    /// `send(input)`: start, resume or continue the run.
    Send(Vec<Message>),
    /// `resume()`: finish an unfinished run without new input.
    Resume,
    /// The last approval of a pause was resolved: these are the decisions for every approval of the pause.
    Approvals(Vec<Decision>),
    /// Mark the stored run quarantined (the recovery sweep gave up on it): one commit, nothing runs.
    Quarantine,
    /// Record a failed attempt on the stored run (`lastError`, `attempts + 1`) when the attempt's own commit was
    /// refused (e.g. an entry over the store's value limit): one commit, nothing runs.
    Failed(Error),
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
    /// A hook replaced what the tool produced.
    Replaced {
        /// Text for the model.
        content: String,
        /// Whether it reports a failure.
        is_error: bool,
        /// The hook that replaced it.
        by: String,
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
    /// Provider's stop reason, informational.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
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
    /// Ask the model for the next turn (transcript: [`RunMachine::checkpoint`]); answer with
    /// [`RunMachine::notify_model_response`] or [`RunMachine::notify_model_failed`].
    CallModel {
        /// The step this call will be.
        step: u32,
    },
    /// Decide each call (validation, approval predicate, hooks); answer with [`RunMachine::notify_gated`].
    Gate {
        /// Calls to decide, in call order.
        calls: Vec<ToolCall>,
    },
    /// Side-effecting calls whose intent was recorded but whose outcome was not: ask each tool's `reconcile`
    /// whether the effect happened; answer with [`RunMachine::notify_reconciled`].
    Reconcile {
        /// The calls, in call order.
        calls: Vec<ToolCall>,
    },
    /// Start a tool call; answer (any time later) with [`RunMachine::notify_tool_settled`].
    RunTool {
        /// The call.
        call: ToolCall,
        /// The approval id for an approved call (an idempotency key).
        approval_id: Option<String>,
    },
    /// Append this entry to the run's journal (full state: [`RunMachine::checkpoint`]); answer with
    /// [`RunMachine::notify_committed`].
    Commit(JournalEntry),
    /// Write these approval records; answer with [`RunMachine::notify_approvals_recorded`]. Always before the
    /// `awaiting-approval` commit.
    Pause {
        /// One record per gated call.
        approvals: Vec<ApprovalRecord>,
    },
    /// The execution is over.
    Finish(Outcome),
}

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

fn result(call: &ToolCall, content: String, is_error: bool, kind: ResultKind) -> ToolResult {
    ToolResult { tool_call_id: call.id.clone(), name: call.name.clone(), content, is_error, kind }
}

fn non_system(input: &[Message]) -> Vec<Message> {
    input.iter().filter(|m| !m.is_system()).cloned().collect()
}

impl RunMachine {
    /// Starts an execution over the stored checkpoint (if any). Fails before any effect for: an empty new
    /// run, a run awaiting approval (send/resume), drift under `error`, a pending call whose tool is gone,
    /// decisions that do not match the pause.
    pub fn start(cfg: MachineConfig, stored: Option<Checkpoint>, start: Start, now: u64) -> Result<RunMachine> {
        let run_id = cfg.run_id.clone();
        // Whatever enters the checkpoint from the caller must read back (JSON depth).
        if let Some(bs) = &cfg.business_state {
            check_depth("businessState", bs).map_err(|e| e.with_run(&run_id))?;
        }
        if let Start::Send(input) = &start {
            for call in input.iter().flat_map(|m| m.tool_calls()) {
                check_depth(&format!("the arguments of tool call '{}' in the input", call.id), &call.args)
                    .map_err(|e| e.with_run(&run_id))?;
            }
        }
        let mut m = RunMachine {
            cp: Checkpoint::new(&run_id),
            cfg,
            now,
            effects: VecDeque::new(),
            waiting: None,
            done: false,
            dirty: false,
            snapshot_next: false,
            committed_len: 0,
            committed_head: Header::default(),
            committed_business: None,
            committed_fp: None,
            committed_ext: None,
            gated: HashMap::new(),
            need_gate: Vec::new(),
            need_reconcile: Vec::new(),
            reconciled: HashSet::new(),
            running: HashSet::new(),
            approved: HashMap::new(),
            launched: HashSet::new(),
            decisions: None,
            pausing: Vec::new(),
            finishing: None,
        };
        let annotate = matches!(start, Start::Quarantine | Start::Failed(_));
        match stored {
            None => m.start_new(start)?,
            Some(cp) => m.start_stored(cp, start)?,
        }
        if !annotate {
            m.cp.fingerprint = Some(m.cfg.fingerprint.clone());
        }
        m.advance();
        Ok(m)
    }

    fn start_new(&mut self, start: Start) -> Result<()> {
        let input = match start {
            Start::Send(input) => input,
            Start::Resume => {
                return Err(Error::new(
                    ErrorCode::CheckpointNotFound,
                    format!("run '{}' has no checkpoint", self.cfg.run_id),
                )
                .with_run(&self.cfg.run_id))
            }
            Start::Approvals(_) => {
                return Err(Error::new(
                    ErrorCode::ApprovalOrphaned,
                    format!("run '{}' no longer exists", self.cfg.run_id),
                )
                .with_run(&self.cfg.run_id))
            }
            Start::Quarantine | Start::Failed(_) => {
                return Err(Error::new(
                    ErrorCode::CheckpointNotFound,
                    format!("run '{}' has no checkpoint", self.cfg.run_id),
                )
                .with_run(&self.cfg.run_id))
            }
        };
        if non_system(&input).is_empty() {
            return Err(Error::invalid_input("a new run needs at least one user message").with_run(&self.cfg.run_id));
        }
        if !self.cfg.instructions.is_empty() {
            self.cp.messages.push(Message::system(self.cfg.instructions.clone()));
        }
        self.cp.input_start = self.cp.messages.len();
        self.cp.input_len = input.len();
        self.cp.messages.extend(input);
        self.cp.business_state = self.cfg.business_state.clone();
        self.snapshot_next = true;
        self.dirty = true;
        self.emit(Event::RunStart { resumed: false, step: 0 });
        Ok(())
    }

    fn start_stored(&mut self, cp: Checkpoint, start: Start) -> Result<()> {
        let run_id = self.cfg.run_id.clone();
        if cp.run_id != run_id {
            return Err(Error::new(
                ErrorCode::CheckpointCorrupt,
                format!("checkpoint for '{}' was found under run id '{run_id}'", cp.run_id),
            )
            .with_run(&run_id));
        }
        self.committed_len = cp.messages.len();
        self.committed_head = cp.header();
        self.committed_business = cp.business_state.clone();
        self.committed_fp = cp.fingerprint.clone();
        self.committed_ext = cp.ext.clone();
        self.cp = cp;
        match start {
            Start::Quarantine => {
                self.cp.quarantined = true;
                self.dirty = true;
                self.finishing = Some(Outcome { status: self.cp.status, finish_reason: None, note: None, error: None });
                return Ok(());
            }
            Start::Failed(err) => {
                self.cp.last_error = Some(err.info());
                self.cp.attempts = self.cp.attempts.saturating_add(1);
                self.dirty = true;
                let status = self.cp.status;
                self.finishing = Some(Outcome { status, finish_reason: None, note: None, error: Some(err) });
                return Ok(());
            }
            start => self.start_stored_run(start),
        }
    }

    fn start_stored_run(&mut self, start: Start) -> Result<()> {
        let run_id = self.cfg.run_id.clone();
        match (self.cp.status, start) {
            (RunStatus::AwaitingApproval, Start::Approvals(decisions)) => {
                for id in &self.cp.approval_ids {
                    if !decisions.iter().any(|d| &d.approval_id == id) {
                        return Err(Error::new(
                            ErrorCode::ApprovalNotFound,
                            format!("approval '{id}' of run '{run_id}' has no decision yet"),
                        )
                        .with_run(&run_id)
                        .with_approval(id));
                    }
                }
                self.check_drift()?;
                let pending = self.pending_calls();
                for d in decisions.iter().filter(|d| d.approved) {
                    if let Some(call) = pending.iter().find(|c| c.id == d.tool_call_id) {
                        self.check_tool_exists(call)?;
                    }
                }
                self.decisions = Some(decisions);
                self.emit(Event::RunStart { resumed: true, step: self.cp.step_index });
            }
            (RunStatus::AwaitingApproval, _) => {
                let approval = self.cp.approval_ids.first().cloned().unwrap_or_default();
                return Err(Error::new(
                    ErrorCode::SessionAwaitingApproval,
                    format!("run '{run_id}' waits on approval '{approval}': resolve it before sending"),
                )
                .with_run(&run_id)
                .with_approval(approval));
            }
            (_, Start::Approvals(_)) => {
                return Err(Error::new(ErrorCode::ApprovalOrphaned, format!("run '{run_id}' is not awaiting approval"))
                    .with_run(&run_id))
            }
            (RunStatus::InProgress, start) => {
                self.check_drift()?;
                let pending = self.pending_calls();
                for call in &pending {
                    if !self.cp.started_tool_call_ids.contains(&call.id) {
                        self.check_tool_exists(call)?;
                    }
                }
                if let Start::Send(input) = start {
                    let input = non_system(&input);
                    let original: Vec<Message> = non_system(
                        self.cp
                            .messages
                            .get(self.cp.input_start..self.cp.input_start + self.cp.input_len)
                            .unwrap_or(&[]),
                    );
                    let is_retry = !original.is_empty() && input == original;
                    if !input.is_empty() && !is_retry {
                        self.cp.queued_input.extend(input);
                        self.dirty = true;
                    }
                }
                self.emit(Event::RunStart { resumed: true, step: self.cp.step_index });
                if !pending.is_empty() {
                    self.emit(Event::ToolResume { tool_call_ids: pending.iter().map(|c| c.id.clone()).collect() });
                }
            }
            (_, Start::Quarantine | Start::Failed(_)) => {}
            (RunStatus::Finished, Start::Resume) => {
                return Err(Error::new(
                    ErrorCode::CheckpointNotFound,
                    format!("run '{run_id}' is finished: nothing to resume"),
                )
                .with_run(&run_id))
            }
            (RunStatus::Finished, Start::Send(input)) => {
                let mut input = non_system(&input);
                let history = non_system(&self.cp.messages);
                if !history.is_empty() && input.len() >= history.len() && input[..history.len()] == history[..] {
                    input.drain(..history.len());
                }
                if input.is_empty() {
                    return Err(Error::invalid_input(format!(
                        "run '{run_id}' is finished: send a new message to continue the conversation"
                    ))
                    .with_run(&run_id));
                }
                self.cp.input_start = self.cp.messages.len();
                self.cp.input_len = input.len();
                self.cp.messages.extend(input);
                self.cp.step_index = 0;
                self.cp.usage = Usage::default();
                self.cp.status = RunStatus::InProgress;
                self.cp.finish_reason = None;
                self.cp.started_tool_call_ids.clear();
                self.progress();
                self.emit(Event::RunStart { resumed: true, step: 0 });
            }
        }
        Ok(())
    }

    fn check_drift(&mut self) -> Result<()> {
        let Some(saved) = self.cp.fingerprint.clone() else { return Ok(()) };
        let drift = self.cfg.fingerprint.drift_from(&saved);
        if drift.is_empty() {
            return Ok(());
        }
        match self.cfg.on_agent_drift {
            DriftPolicy::Ignore => Ok(()),
            DriftPolicy::Warn => {
                self.emit(Event::AgentDrift(drift));
                Ok(())
            }
            DriftPolicy::Error => Err(Error::new(
                ErrorCode::AgentDrift,
                format!("the agent changed since run '{}' was checkpointed: {}", self.cfg.run_id, drift.describe()),
            )
            .with_run(&self.cfg.run_id)
            .with_details(serde_json::to_value(&drift).unwrap_or(Value::Null))),
        }
    }

    fn check_tool_exists(&self, call: &ToolCall) -> Result<()> {
        if self.cfg.tool_names.contains(&call.name) {
            return Ok(());
        }
        Err(Error::new(
            ErrorCode::ResumeToolMissing,
            format!(
                "pending call '{}' of run '{}' needs tool '{}', which the agent no longer has",
                call.id, self.cfg.run_id, call.name
            ),
        )
        .with_run(&self.cfg.run_id))
    }

    // ----- inputs -----

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

    /// The last `Commit` was written.
    pub fn notify_committed(&mut self) {
        if self.waiting == Some(Wait::Commit) {
            self.waiting = None;
        }
        self.advance();
    }

    /// The model answered.
    pub fn notify_model_response(&mut self, resp: ModelResponse) {
        if self.waiting != Some(Wait::Model) || self.done {
            return;
        }
        self.waiting = None;
        self.cp.step_index += 1;
        self.cp.usage.add(resp.usage);
        let mut calls = self.sanitize_calls(resp.tool_calls);
        for c in &mut calls {
            let depth = json_depth(&c.args);
            if depth > MAX_JSON_DEPTH {
                // Stored as they are, they could not be read back: the call keeps an empty object and the reason.
                c.args = Value::Object(Default::default());
                c.invalid = Some(format!(
                    "the arguments were nested {depth} levels deep; at most {MAX_JSON_DEPTH} levels are accepted"
                ));
            }
        }
        self.emit(Event::Step {
            step: self.cp.step_index,
            text: resp.text.clone(),
            tool_calls: calls.clone(),
            usage: resp.usage,
        });
        self.cp.messages.push(Message::Assistant { content: resp.text, tool_calls: calls });
        self.gated.clear();
        self.approved.clear();
        self.launched.clear();
        self.progress();
        self.advance();
    }

    /// The model call failed for good (after the runtime's retries): the attempt is rejected.
    pub fn notify_model_failed(&mut self, err: Error) {
        if self.waiting == Some(Wait::Model) {
            self.waiting = None;
        }
        self.fail(err);
    }

    /// Gate decisions for the calls of the last `Gate` effect.
    pub fn notify_gated(&mut self, decisions: Vec<(String, Gate)>) {
        if self.waiting != Some(Wait::Gate) {
            return;
        }
        self.waiting = None;
        let asked = std::mem::take(&mut self.need_gate);
        let mut decisions: HashMap<String, Gate> = decisions.into_iter().collect();
        for call in asked {
            let gate =
                decisions.remove(&call.id).unwrap_or(Gate::Invalid { message: "no gate decision was made".into() });
            self.gated.insert(call.id, gate);
        }
        self.advance();
    }

    /// A tool call settled. Results are recorded in call order: an early finisher is held (durably) until
    /// every earlier call of the turn has a result.
    pub fn notify_tool_settled(&mut self, tool_call_id: &str, outcome: ToolOutcome) {
        if !self.running.remove(tool_call_id) || self.done {
            return;
        }
        let Some(call) = self.pending_calls().into_iter().find(|c| c.id == tool_call_id) else { return };
        if let Err(err) = self.settle(&call, outcome) {
            self.fail(err);
            return;
        }
        self.advance();
    }

    fn settle(&mut self, call: &ToolCall, outcome: ToolOutcome) -> Result<()> {
        match outcome {
            ToolOutcome::Ok { content, business_state } => {
                let content = cap_tool_result(content, self.cfg.max_tool_result_bytes);
                match business_state {
                    Some(bs) if json_depth(&bs) > MAX_JSON_DEPTH => {
                        let message = format!(
                            "InvalidBusinessState: '{}' returned a businessState nested deeper than {MAX_JSON_DEPTH} \
                             levels; it was not stored. The tool's output: {content}",
                            call.name
                        );
                        let message = cap_chars(&message, MAX_ERROR_RESULT_CHARS);
                        self.record(result(call, message, true, ResultKind::Execution));
                        return Ok(());
                    }
                    Some(bs) => self.cp.business_state = Some(bs),
                    None => {}
                }
                self.record(result(call, content, false, ResultKind::Execution));
            }
            ToolOutcome::Failed { message } => {
                self.record(result(call, cap_chars(&message, MAX_ERROR_RESULT_CHARS), true, ResultKind::Execution));
            }
            ToolOutcome::Denied { reason } => {
                self.record(result(call, format!("denied: {reason}"), true, ResultKind::Denied));
            }
            ToolOutcome::Replaced { content, is_error, by } => {
                let content = if is_error {
                    cap_chars(&content, MAX_ERROR_RESULT_CHARS)
                } else {
                    cap_tool_result(content, self.cfg.max_tool_result_bytes)
                };
                self.record_by(result(call, content, is_error, ResultKind::Execution), Some(by));
            }
            ToolOutcome::Propagate(err) => return Err(err),
        }
        Ok(())
    }

    /// Answers to the last `Reconcile`: `Some(outcome)` when the effect happened (it becomes the recorded
    /// result), `None` when it did not (the call runs again).
    pub fn notify_reconciled(&mut self, answers: Vec<(String, Option<ToolOutcome>)>) {
        if self.waiting != Some(Wait::Reconcile) {
            return;
        }
        self.waiting = None;
        let asked = std::mem::take(&mut self.need_reconcile);
        let mut answers: HashMap<String, Option<ToolOutcome>> = answers.into_iter().collect();
        for call in asked {
            self.reconciled.insert(call.id.clone());
            match answers.remove(&call.id).flatten() {
                Some(outcome) => {
                    if let Err(err) = self.settle(&call, outcome) {
                        self.fail(err);
                        return;
                    }
                }
                None => {
                    self.gated.insert(call.id.clone(), Gate::RunWithIntent);
                    self.launched.insert(call.id.clone());
                }
            }
        }
        self.advance();
    }

    /// The approval records of the last `Pause` were written.
    pub fn notify_approvals_recorded(&mut self) {
        if self.waiting != Some(Wait::Approvals) {
            return;
        }
        self.waiting = None;
        if self.finishing.is_some() {
            // An abort or failure arrived while the records were written: it wins; the pause is not taken.
            self.pausing.clear();
            self.advance();
            return;
        }
        self.cp.status = RunStatus::AwaitingApproval;
        self.cp.approval_ids = std::mem::take(&mut self.pausing);
        self.cp.finish_reason = None;
        self.progress();
        self.finishing = Some(Outcome {
            status: RunStatus::AwaitingApproval,
            finish_reason: Some(FinishReason::AwaitingApproval),
            note: None,
            error: None,
        });
        self.advance();
    }

    /// The run was aborted: every call without a result gets a `cancelled` result, the state is committed
    /// (`in-progress`, resumable) and the execution finishes.
    pub fn notify_abort(&mut self) {
        if self.done || self.finishing.is_some() {
            return;
        }
        if matches!(self.waiting, Some(Wait::Model) | Some(Wait::Gate) | Some(Wait::Reconcile)) {
            self.waiting = None;
            self.need_gate.clear();
            self.need_reconcile.clear();
        }
        self.pausing.clear();
        for call in self.pending_calls() {
            self.record(result(
                &call,
                "cancelled: the run was aborted before this call finished".into(),
                true,
                ResultKind::Cancelled,
            ));
        }
        self.running.clear();
        self.dirty = true;
        self.finishing = Some(Outcome {
            status: RunStatus::InProgress,
            finish_reason: Some(FinishReason::Aborted),
            note: None,
            error: None,
        });
        self.advance();
    }

    /// The attempt failed (a hook threw, a store write failed before, …): record `lastError`/`attempts` and
    /// finish with the error. The checkpoint stays resumable.
    pub fn notify_failed(&mut self, err: Error) {
        self.fail(err);
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

    // ----- internals -----

    fn emit(&mut self, e: Event) {
        self.effects.push_back(Effect::Emit(e));
    }

    /// Marks progress: the next commit clears `lastError` and `attempts`.
    fn progress(&mut self) {
        self.dirty = true;
        self.cp.last_error = None;
        self.cp.attempts = 0;
        self.cp.quarantined = false;
    }

    fn fail(&mut self, err: Error) {
        if self.done || self.finishing.is_some() {
            return;
        }
        self.running.clear();
        self.need_gate.clear();
        self.need_reconcile.clear();
        if matches!(self.waiting, Some(Wait::Gate) | Some(Wait::Reconcile)) {
            self.waiting = None;
        }
        self.cp.last_error = Some(err.info());
        self.cp.attempts = self.cp.attempts.saturating_add(1);
        self.dirty = true;
        self.emit(Event::Error { error: err.info() });
        self.finishing = Some(Outcome { status: self.cp.status, finish_reason: None, note: None, error: Some(err) });
        self.advance();
    }

    /// (index of the last assistant turn with unanswered calls, number of results placed after it)
    fn turn(&self) -> Option<(usize, usize)> {
        let msgs = &self.cp.messages;
        let mut i = msgs.len();
        let mut placed = 0;
        while i > 0 && matches!(msgs[i - 1], Message::Tool(_)) {
            placed += 1;
            i -= 1;
        }
        if i == 0 {
            return None;
        }
        let calls = msgs[i - 1].tool_calls();
        (placed < calls.len()).then_some((i - 1, placed))
    }

    fn record(&mut self, r: ToolResult) {
        self.record_by(r, None);
    }

    fn record_by(&mut self, r: ToolResult, replaced_by: Option<String>) {
        let pending = self.pending_calls();
        if !pending.iter().any(|c| c.id == r.tool_call_id) {
            return;
        }
        self.emit(Event::ToolDone {
            tool_call_id: r.tool_call_id.clone(),
            name: r.name.clone(),
            is_error: r.is_error,
            kind: r.kind,
            replaced_by,
        });
        // A recorded call needs neither its start mark nor its intent any more.
        self.cp.started_tool_call_ids.retain(|id| id != &r.tool_call_id);
        self.cp.intents.retain(|id| id != &r.tool_call_id);
        self.cp.held_results.push(r);
        while let Some((idx, placed)) = self.turn() {
            let next = &self.cp.messages[idx].tool_calls()[placed].id;
            let Some(pos) = self.cp.held_results.iter().position(|r| &r.tool_call_id == next) else { break };
            let r = self.cp.held_results.remove(pos);
            self.cp.messages.push(Message::Tool(r));
        }
        self.progress();
    }

    fn sanitize_calls(&self, calls: Vec<ToolCall>) -> Vec<ToolCall> {
        let stored: HashSet<&str> =
            self.cp.messages.iter().flat_map(|m| m.tool_calls().iter().map(|c| c.id.as_str())).collect();
        let mut fresh: HashSet<String> = HashSet::new();
        let step = self.cp.step_index;
        let mut out = Vec::with_capacity(calls.len());
        for (i, mut c) in calls.into_iter().enumerate() {
            let taken = |id: &str, fresh: &HashSet<String>| stored.contains(id) || fresh.contains(id);
            if c.id.is_empty() || taken(&c.id, &fresh) {
                let mut k = 0;
                let mut id = format!("call_{step}_{i}");
                while taken(&id, &fresh) {
                    k += 1;
                    id = format!("call_{step}_{i}_{k}");
                }
                c.id = id;
            }
            fresh.insert(c.id.clone());
            out.push(c);
        }
        out
    }

    fn finish(&mut self, reason: FinishReason, note: Option<String>) {
        self.cp.status = RunStatus::Finished;
        self.cp.finish_reason = Some(reason);
        self.progress();
        self.finishing = Some(Outcome { status: RunStatus::Finished, finish_reason: Some(reason), note, error: None });
    }

    fn advance(&mut self) {
        if self.done || self.waiting.is_some() {
            return;
        }
        if self.finishing.is_none() {
            self.transitions();
            if !self.need_reconcile.is_empty() {
                self.effects.push_back(Effect::Reconcile { calls: self.need_reconcile.clone() });
                self.waiting = Some(Wait::Reconcile);
                return;
            }
            if !self.need_gate.is_empty() {
                self.effects.push_back(Effect::Gate { calls: self.need_gate.clone() });
                self.waiting = Some(Wait::Gate);
                return;
            }
        }
        if self.dirty {
            self.commit();
            return;
        }
        if let Some(outcome) = self.finishing.take() {
            self.emit(Event::RunDone {
                status: outcome.status,
                finish_reason: outcome.finish_reason,
                steps: self.cp.step_index,
            });
            self.effects.push_back(Effect::Finish(outcome));
            self.done = true;
            return;
        }
        self.actions();
    }

    /// State changes that need no I/O: decisions, interrupted calls, gate verdicts, queued input, finishing.
    fn transitions(&mut self) {
        if let Some(decisions) = self.decisions.take() {
            for call in self.pending_calls() {
                let Some(d) = decisions.iter().find(|d| d.tool_call_id == call.id) else { continue };
                if d.approved {
                    self.approved.insert(call.id.clone(), d.approval_id.clone());
                } else {
                    let content = json!({
                        "error": "rejected",
                        "message": format!("A reviewer rejected this call to '{}'; it did not run.", call.name),
                        "note": d.note,
                    });
                    self.record(result(&call, content.to_string(), true, ResultKind::Rejected));
                }
            }
            self.cp.status = RunStatus::InProgress;
            self.cp.approval_ids.clear();
            self.progress();
        }
        for call in self.pending_calls() {
            if self.running.contains(&call.id) {
                continue;
            }
            if self.cp.started_tool_call_ids.contains(&call.id) && !self.launched.contains(&call.id) {
                let content = format!(
                    "interrupted: the process stopped while '{}' was running; it may or may not have taken effect. \
                     It was not run again.",
                    call.name
                );
                self.record(result(&call, content, true, ResultKind::Interrupted));
                continue;
            }
            if self.cp.intents.contains(&call.id) && !self.launched.contains(&call.id) {
                if !self.reconciled.contains(&call.id) && !self.need_reconcile.iter().any(|c| c.id == call.id) {
                    self.need_reconcile.push(call);
                }
                continue;
            }
            if let Some(why) = &call.invalid {
                let content =
                    cap_chars(&format!("invalid arguments for '{}': {why}", call.name), MAX_ERROR_RESULT_CHARS);
                self.record(result(&call, content, true, ResultKind::Validation));
                continue;
            }
            if self.approved.contains_key(&call.id) {
                if !self.cp.started_tool_call_ids.contains(&call.id) {
                    self.cp.started_tool_call_ids.push(call.id.clone());
                    self.launched.insert(call.id.clone());
                    self.progress();
                }
                continue;
            }
            match self.gated.get(&call.id).cloned() {
                Some(Gate::Invalid { message }) => self.record(result(
                    &call,
                    cap_chars(&format!("invalid arguments for '{}': {message}", call.name), MAX_ERROR_RESULT_CHARS),
                    true,
                    ResultKind::Validation,
                )),
                Some(Gate::UnknownTool) => {
                    let names: Vec<&str> = self.cfg.tool_names.iter().map(String::as_str).collect();
                    let content = format!("unknown tool '{}'. Available tools: {}", call.name, names.join(", "));
                    self.record(result(&call, content, true, ResultKind::Validation));
                }
                Some(Gate::Denied { reason }) => {
                    self.record(result(&call, format!("denied: {reason}"), true, ResultKind::Denied))
                }
                Some(Gate::RunWithIntent) => {
                    if !self.cp.intents.contains(&call.id) {
                        self.cp.intents.push(call.id.clone());
                        self.launched.insert(call.id.clone());
                        self.progress();
                    }
                }
                Some(Gate::Run) | Some(Gate::NeedsApproval { .. }) => {}
                // Asked for already (a reconcile round ran first): gate each call once.
                None if self.need_gate.iter().any(|c| c.id == call.id) => {}
                None => self.need_gate.push(call),
            }
        }
        if !self.need_gate.is_empty()
            || !self.need_reconcile.is_empty()
            || !self.pending_calls().is_empty()
            || self.cp.status != RunStatus::InProgress
        {
            return;
        }
        if !self.cp.queued_input.is_empty() {
            let input = std::mem::take(&mut self.cp.queued_input);
            self.cp.messages.extend(input);
            self.progress();
        }
        match self.cp.messages.last() {
            Some(Message::Assistant { tool_calls, .. }) if tool_calls.is_empty() => {
                self.finish(FinishReason::Stop, None)
            }
            _ if self.cp.step_index >= self.cfg.max_steps => {
                let note = format!(
                    "Stopped: the run used its {} steps (maxSteps) without a final answer. The transcript is kept; \
                     send a message to continue.",
                    self.cfg.max_steps
                );
                self.finish(FinishReason::MaxSteps, Some(note));
            }
            _ if self.loop_detected() => {
                let note = format!(
                    "Halting: the agent repeated the same failing tool calls {} times in a row. The transcript is kept \
                     for a person to read.",
                    self.cfg.loop_window
                );
                self.finish(FinishReason::LoopDetected, Some(note));
            }
            _ => {}
        }
    }

    /// Effects that need the committed state: run tools, pause, call the model.
    fn actions(&mut self) {
        let pending = self.pending_calls();
        if pending.is_empty() {
            self.effects.push_back(Effect::CallModel { step: self.cp.step_index + 1 });
            self.waiting = Some(Wait::Model);
            return;
        }
        let mut to_pause = Vec::new();
        for call in pending {
            if self.running.contains(&call.id) {
                continue;
            }
            if let Some(approval_id) = self.approved.get(&call.id).cloned() {
                if self.launched.contains(&call.id) {
                    self.launch(call, Some(approval_id));
                }
                continue;
            }
            match self.gated.get(&call.id) {
                Some(Gate::Run) => self.launch(call, None),
                Some(Gate::RunWithIntent) if self.launched.contains(&call.id) => self.launch(call, None),
                Some(Gate::NeedsApproval { approval_id }) => to_pause.push((call, approval_id.clone())),
                _ => {}
            }
        }
        if !self.running.is_empty() {
            return;
        }
        if to_pause.is_empty() {
            self.fail(Error::internal(format!("run '{}' has pending calls that nothing will settle", self.cfg.run_id)));
            return;
        }
        let batch: Vec<String> = to_pause.iter().map(|(_, id)| id.clone()).collect();
        let mut approvals = Vec::new();
        for (call, approval_id) in to_pause {
            self.emit(Event::ApprovalRequested { approval_id: approval_id.clone(), tool_call: call.clone() });
            approvals.push(ApprovalRecord {
                id: approval_id,
                run_id: self.cfg.run_id.clone(),
                tool_call: call,
                batch: batch.clone(),
                status: ApprovalStatus::Pending,
                note: None,
                step: self.cp.step_index,
                created_at: self.now,
                decided_at: None,
                fingerprint: Some(self.cfg.fingerprint.clone()),
            });
        }
        self.pausing = batch;
        self.effects.push_back(Effect::Pause { approvals });
        self.waiting = Some(Wait::Approvals);
    }

    fn launch(&mut self, call: ToolCall, approval_id: Option<String>) {
        self.running.insert(call.id.clone());
        self.emit(Event::ToolStart { tool_call_id: call.id.clone(), name: call.name.clone(), args: call.args.clone() });
        self.effects.push_back(Effect::RunTool { call, approval_id });
    }

    fn commit(&mut self) {
        self.cp.seq += 1;
        self.cp.saved_at = self.now;
        let body = if self.snapshot_next {
            EntryBody::Snapshot { state: Box::new(self.cp.clone()) }
        } else {
            EntryBody::Delta {
                from: self.committed_len,
                messages: self.cp.messages[self.committed_len..].to_vec(),
                head: self.cp.header().diff(&self.committed_head),
                business_state: (self.cp.business_state != self.committed_business)
                    .then(|| self.cp.business_state.clone()),
                fingerprint: if self.cp.fingerprint != self.committed_fp { self.cp.fingerprint.clone() } else { None },
                ext: (self.cp.ext != self.committed_ext).then(|| self.cp.ext.clone()),
            }
        };
        self.committed_head = self.cp.header();
        self.committed_len = self.cp.messages.len();
        self.committed_business = self.cp.business_state.clone();
        self.committed_fp = self.cp.fingerprint.clone();
        self.committed_ext = self.cp.ext.clone();
        self.snapshot_next = false;
        self.dirty = false;
        self.effects.push_back(Effect::Commit(JournalEntry { seq: self.cp.seq, at: self.now, body }));
        self.waiting = Some(Wait::Commit);
    }

    /// The last `loop_window` tool turns of this run each failed in full, identically. Scans backwards and
    /// stops after `loop_window` turns, so its cost does not grow with the transcript.
    fn loop_detected(&self) -> bool {
        let n = self.cfg.loop_window as usize;
        if n == 0 {
            return false;
        }
        let start = self.cp.input_start.min(self.cp.messages.len());
        let msgs = &self.cp.messages[start..];
        let mut first: Option<String> = None;
        let mut seen = 0;
        let mut end = msgs.len();
        while seen < n {
            // The turn before `end`: tool results back to their assistant message.
            let mut i = end;
            while i > 0 && matches!(msgs[i - 1], Message::Tool(_)) {
                i -= 1;
            }
            if i == 0 {
                return false;
            }
            let calls = msgs[i - 1].tool_calls();
            if calls.is_empty() || end - i != calls.len() {
                return false;
            }
            let mut sig = String::new();
            for (call, m) in calls.iter().zip(&msgs[i..end]) {
                let Message::Tool(r) = m else { return false };
                if !r.is_error {
                    return false;
                }
                sig.push_str(&call.name);
                sig.push('\u{1}');
                sig.push_str(&canonical_json(&call.args));
                sig.push('\u{1}');
                sig.push_str(&r.content);
                sig.push('\u{2}');
            }
            match &first {
                None => first = Some(sig),
                Some(f) if *f != sig => return false,
                Some(_) => {}
            }
            seen += 1;
            end = i - 1;
        }
        true
    }
}
