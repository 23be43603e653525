//! Starting an execution: a new run, or a stored one (resume, continue, decisions on a pause, quarantine, a
//! failed attempt), with the checks that refuse before any effect.

use super::calls::TurnCalls;
use super::step::Committed;
use super::{DriftPolicy, MachineConfig, Outcome, Phase, RunMachine, Start};
use crate::core::approval::Decision;
use crate::core::checkpoint::{Checkpoint, FinishReason, RunStatus};
use crate::core::error::{Error, ErrorCode, Result};
use crate::core::events::Event;
use crate::core::limits::{check_depth, check_message_depth};
use crate::core::trace::{SpanContext, TRACE_KEY};
use crate::core::transcript::{Message, ToolCall, Usage};
use serde_json::Value;
use std::collections::VecDeque;

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
        if let Start::Send(input) | Start::Turn { input, .. } = &start {
            for m in input {
                check_message_depth("the input", m).map_err(|e| e.with_run(&run_id))?;
            }
        }
        if matches!(start, Start::Drain) && cfg.steer_poll_ms.is_none() {
            return Err(Error::invalid_input(format!(
                "run '{run_id}': this agent does not read queued messages (steering is off)"
            ))
            .with_run(&run_id));
        }
        let mut m = RunMachine {
            cp: Checkpoint::new(&run_id),
            cfg,
            now,
            active_mark: now,
            storage_noted: Default::default(),
            effects: VecDeque::new(),
            phase: Phase::Active,
            waiting: None,
            calls: TurnCalls::default(),
            committed: Committed::default(),
            dirty: false,
            snapshot_next: false,
            prev_trace: None,
            turn_finish: None,
            call_ids: Default::default(),
            queue_reads: Default::default(),
        };
        let annotate = matches!(start, Start::Quarantine | Start::Failed(_));
        let decisions = match stored {
            None => {
                m.start_new(start)?;
                None
            }
            Some(cp) => m.start_stored(cp, start)?,
        };
        if !annotate {
            m.cp.fingerprint = Some(m.active()?.0.clone());
        }
        // A traced execution's context goes into the hook state before the first entry is made (a new run's
        // first entry carries it), replacing the previous execution's, which its span links to.
        if let Some(ctx) = m.cfg.trace {
            let mut ext = match m.cp.ext.take() {
                Some(Value::Object(map)) => map,
                _ => serde_json::Map::new(),
            };
            m.prev_trace = ext.insert(TRACE_KEY.into(), ctx.to_json()).as_ref().and_then(SpanContext::from_json);
            m.cp.ext = Some(Value::Object(ext));
        }
        // The queue is read once the agent's interval has passed in this execution (a message sent before it
        // began was applied by its sender, or waits for a boundary or the finish read).
        m.queue_reads.last_at = Some(now);
        if m.phase == Phase::Active {
            m.enter_turn(decisions);
        }
        m.advance();
        Ok(m)
    }

    fn start_new(&mut self, start: Start) -> Result<()> {
        let input = match start {
            Start::Send(input) => input,
            Start::Turn { prior: Some(prior), input } => return self.start_turn(*prior, input),
            Start::Turn { prior: None, input } => input,
            Start::Resume | Start::Drain => {
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
        self.cp.key_scope = self.cfg.key_scope.clone();
        self.cp.budget_cap = self.cfg.budget_cap;
        self.snapshot_next = true;
        self.dirty = true;
        self.skip_first_queue_read();
        self.emit(Event::RunStart { resumed: false, step: 0 });
        Ok(())
    }

    /// A run this execution creates has no queued message yet (a message names a run that exists): its first
    /// model call reads no queue; its next boundaries do.
    fn skip_first_queue_read(&mut self) {
        self.queue_reads.before_model = true;
    }

    /// A session's next turn: `prior`'s conversation under this run's id, continued with `input`; the whole
    /// state is the new run's first entry (a snapshot).
    fn start_turn(&mut self, prior: Checkpoint, input: Vec<Message>) -> Result<()> {
        let run_id = self.cfg.run_id.clone();
        if prior.status != RunStatus::Finished {
            return Err(Error::new(
                ErrorCode::InvalidInput,
                format!("the turn before '{run_id}' is not finished: finish it (resume) or discard it first"),
            )
            .with_run(&run_id));
        }
        let mut cp = Checkpoint::new(&run_id);
        cp.messages = prior.messages;
        cp.business_state = prior.business_state;
        cp.total_usage = prior.total_usage;
        cp.total_usage.at_least(prior.usage);
        cp.ext = prior.ext;
        // The conversation stays with the agent it was handed to.
        cp.agent = prior.agent;
        cp.key_scope = self.cfg.key_scope.clone();
        cp.status = RunStatus::Finished;
        self.cp = cp;
        self.start_stored_run(Start::Send(input))?;
        self.snapshot_next = true;
        self.dirty = true;
        self.skip_first_queue_read();
        Ok(())
    }

    /// Loads the stored checkpoint and applies `start`; returns the decisions of a resolved pause.
    fn start_stored(&mut self, cp: Checkpoint, start: Start) -> Result<Option<Vec<Decision>>> {
        let run_id = self.cfg.run_id.clone();
        if cp.run_id != run_id {
            return Err(Error::new(
                ErrorCode::CheckpointCorrupt,
                format!("checkpoint for '{}' was found under run id '{run_id}'", cp.run_id),
            )
            .with_run(&run_id));
        }
        self.committed = Committed::of(&cp);
        self.cp = cp;
        // A run written before the conversation's usage was kept: its usage so far is the least it used (written
        // with the next commit).
        self.cp.total_usage.at_least(self.cp.usage);
        match start {
            Start::Quarantine => {
                self.cp.quarantined = true;
                self.dirty = true;
                let status = self.cp.status;
                self.phase = Phase::Ending(Outcome { status, finish_reason: None, note: None, error: None });
                Ok(None)
            }
            Start::Failed(err) => {
                self.cp.last_error = Some(err.info());
                self.cp.attempts = self.cp.attempts.saturating_add(1);
                self.dirty = true;
                let status = self.cp.status;
                self.phase = Phase::Ending(Outcome { status, finish_reason: None, note: None, error: Some(err) });
                Ok(None)
            }
            Start::Turn { .. } => Err(Error::new(
                ErrorCode::SessionExists,
                format!("run '{run_id}' exists already: a new turn cannot start there"),
            )
            .with_run(&run_id)),
            start => self.start_stored_run(start),
        }
    }

    fn start_stored_run(&mut self, start: Start) -> Result<Option<Vec<Decision>>> {
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
                self.emit(Event::RunStart { resumed: true, step: self.cp.step_index });
                return Ok(Some(decisions));
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
            (_, Start::Quarantine | Start::Failed(_) | Start::Turn { .. }) => {}
            (RunStatus::Finished, Start::Resume) if self.cp.finish_reason == Some(FinishReason::BudgetExceeded) => {
                // Resumable in place once the limit is raised: the same run goes on from where it stopped.
                if let Some(x) = self.budget().exceeded(&self.cp, self.cp.active_ms) {
                    return Err(x.error(&run_id));
                }
                self.check_drift()?;
                self.cp.status = RunStatus::InProgress;
                self.cp.finish_reason = None;
                self.progress();
                self.emit(Event::RunStart { resumed: true, step: self.cp.step_index });
            }
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
                let resent = input.len() >= history.len() && input.iter().zip(&history).all(|(a, b)| a.same_as(b));
                if !history.is_empty() && resent {
                    input.drain(..history.len());
                }
                if input.is_empty() {
                    return Err(Error::invalid_input(format!(
                        "run '{run_id}' is finished: send a new message to continue the conversation"
                    ))
                    .with_run(&run_id));
                }
                self.reopen(input);
            }
            // Reads the queue first (see `steer`).
            (RunStatus::Finished, Start::Drain) => {}
        }
        Ok(None)
    }

    /// A finished run continues as a conversation with `input` (non-empty user messages): a new run segment
    /// (steps and usage count from zero, the conversation's totals go on).
    pub(super) fn reopen(&mut self, input: Vec<Message>) {
        self.cp.input_start = self.cp.messages.len();
        self.cp.input_len = input.len();
        self.cp.messages.extend(input);
        self.cp.step_index = 0;
        self.cp.handoffs = 0;
        self.cp.usage = Usage::default();
        self.cp.active_ms = 0;
        self.cp.status = RunStatus::InProgress;
        self.cp.finish_reason = None;
        self.cp.started_tool_call_ids.clear();
        self.progress();
        self.emit(Event::RunStart { resumed: true, step: 0 });
    }

    fn check_drift(&mut self) -> Result<()> {
        let Some(saved) = self.cp.fingerprint.clone() else { return Ok(()) };
        let drift = self.active()?.0.drift_from(&saved);
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
            // Ignored: a drift (strings and numbers) always serialises. Through its text: the text writer's
            // instance of AgentDrift (its event writes it), not a JSON value writer's.
            .with_details(
                serde_json::to_string(&drift).ok().and_then(|t| serde_json::from_str(&t).ok()).unwrap_or(Value::Null),
            )),
        }
    }

    fn check_tool_exists(&self, call: &ToolCall) -> Result<()> {
        if self.active()?.1.contains(&call.name) {
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
}
