//! The runtime's answers and signals: `notify_*`.
//!
//! An answer is accepted only in the state the effect it answers left the machine in; any other is refused with
//! `STEADFAST_INTERNAL` and changes nothing. Tolerated (each method says which case applies to it): once an abort
//! or a failure decided the outcome, late answers to the model call, gate, reconcile and tool calls handed out
//! before are accepted and ignored: the runtime may still deliver them (a tool settles after the abort, an effect
//! queued before the abort is performed). Commits and approval records stay awaited through an abort or a
//! failure, so they are never tolerated out of turn. The signals (`notify_abort`, `notify_failed`) are valid in
//! every state: the first verdict wins.

use super::calls::CallState;
use super::step::result;
use super::{cut_short, Gate, ModelResponse, Outcome, Phase, RunMachine, ToolOutcome, Wait, MAX_ERROR_RESULT_CHARS};
use crate::core::checkpoint::{FinishReason, RunStatus};
use crate::core::error::{cap_chars, Error, ErrorCode, Result};
use crate::core::events::Event;
use crate::core::limits::{cap_tool_result, json_depth, MAX_JSON_DEPTH};
use crate::core::transcript::{Message, ResultKind, ToolCall};
use serde_json::Value;
use std::collections::HashMap;

impl RunMachine {
    /// The last [`Effect::Commit`](super::Effect::Commit) was written.
    ///
    /// # Errors
    /// `STEADFAST_INTERNAL` when the machine does not wait for a commit; nothing changes. (A commit that records
    /// an abort or a failure is awaited like any other.)
    pub fn notify_committed(&mut self) -> Result<()> {
        if self.waiting != Some(Wait::Commit) {
            return Err(self.refuse("notify_committed"));
        }
        self.waiting = None;
        self.advance();
        Ok(())
    }

    /// The model answered the last [`Effect::CallModel`](super::Effect::CallModel).
    ///
    /// # Errors
    /// `STEADFAST_INTERNAL` when the machine does not wait for the model; nothing changes. Tolerated: after an
    /// abort or a failure, a late answer is accepted and ignored (a recorded model turn is never replaced).
    pub fn notify_model_response(&mut self, resp: ModelResponse) -> Result<()> {
        self.notify_model_answer(resp, None)
    }

    /// [`RunMachine::notify_model_response`] of an answer by `model`, a fallback of the agent's model (recorded
    /// with the turn), or by the agent's own (`None`).
    ///
    /// # Errors
    /// As [`RunMachine::notify_model_response`].
    pub fn notify_model_answer(&mut self, resp: ModelResponse, model: Option<String>) -> Result<()> {
        if !self.awaits(Wait::Model, "notify_model_response")? {
            return Ok(());
        }
        self.waiting = None;
        // A new turn: its boundaries may read the queue again.
        self.queue_reads.before_tools = false;
        self.queue_reads.before_model = false;
        self.cp.step_index += 1;
        self.cp.usage.add(resp.usage);
        self.cp.total_usage.add(resp.usage);
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
            model: model.clone(),
        });
        // A turn without calls ends the run: with the reason the provider's stop reason names, else `stop`.
        self.turn_finish = match calls.is_empty() {
            true => resp.stop_reason.as_deref().and_then(FinishReason::from_stop_reason),
            false => None,
        };
        self.cp.messages.push(Message::Assistant {
            content: resp.text,
            tool_calls: calls,
            reasoning: resp.reasoning,
            // A model that reports no usage records none (not zero tokens).
            usage: (resp.usage.total() > 0).then_some(resp.usage),
            model,
        });
        self.progress();
        self.enter_turn(None);
        self.advance();
        Ok(())
    }

    /// The model call failed for good (after the runtime's retries): the attempt is rejected.
    ///
    /// # Errors
    /// `STEADFAST_INTERNAL` when the machine does not wait for the model; nothing changes (the runtime turns it
    /// into a failed attempt all the same). Tolerated: after an abort or a failure, it is accepted and ignored.
    pub fn notify_model_failed(&mut self, err: Error) -> Result<()> {
        if !self.awaits(Wait::Model, "notify_model_failed")? {
            return Ok(());
        }
        self.waiting = None;
        self.fail(err);
        Ok(())
    }

    /// Gate verdicts for the calls of the last [`Effect::Gate`](super::Effect::Gate). A call left without a
    /// verdict gets a `validation` result.
    ///
    /// # Errors
    /// `STEADFAST_INTERNAL` when the machine does not wait for gate verdicts, or a verdict names a call it did
    /// not ask about; nothing changes. Tolerated: after an abort or a failure, verdicts are accepted and ignored.
    pub fn notify_gated(&mut self, decisions: Vec<(String, Gate)>) -> Result<()> {
        if !self.awaits(Wait::Gate, "notify_gated")? {
            return Ok(());
        }
        if let Some((id, _)) = decisions.iter().find(|(id, _)| self.calls.state(id) != Some(&CallState::AwaitingGate)) {
            return Err(self.refuse_call("notify_gated", id, &CallState::AwaitingGate));
        }
        self.waiting = None;
        let mut decisions: HashMap<String, Gate> = decisions.into_iter().collect();
        for call in self.calls.calls_in(&CallState::AwaitingGate) {
            let gate =
                decisions.remove(&call.id).unwrap_or(Gate::Invalid { message: "no gate decision was made".into() });
            self.apply_verdict(&call, gate);
        }
        self.advance();
        Ok(())
    }

    /// A call's gate verdict: it is cleared to run (with its intent recorded first for a side-effecting tool),
    /// waits for a reviewer, or is answered at once.
    fn apply_verdict(&mut self, call: &ToolCall, gate: Gate) {
        match gate {
            Gate::Run => {
                self.calls.set(&call.id, CallState::Ready { approval_id: None });
            }
            Gate::RunWithIntent => {
                if !self.cp.intents.contains(&call.id) {
                    self.cp.intents.push(call.id.clone());
                    self.progress();
                }
                self.calls.set(&call.id, CallState::Ready { approval_id: None });
            }
            Gate::NeedsApproval { approval_id } => {
                self.calls.set(&call.id, CallState::AwaitingApproval { approval_id });
            }
            Gate::Invalid { message } => self.record(result(
                call,
                cap_chars(&format!("invalid arguments for '{}': {message}", call.name), MAX_ERROR_RESULT_CHARS),
                true,
                ResultKind::Validation,
            )),
            Gate::UnknownTool => {
                let names: Vec<&str> = match self.active() {
                    Ok((_, tools)) => tools.iter().map(String::as_str).collect(),
                    Err(_) => Vec::new(),
                };
                let content = format!("unknown tool '{}'. Available tools: {}", call.name, names.join(", "));
                self.record(result(call, content, true, ResultKind::Validation));
            }
            Gate::Denied { reason } => self.record(result(call, format!("denied: {reason}"), true, ResultKind::Denied)),
        }
    }

    /// A tool call started by [`Effect::RunTool`](super::Effect::RunTool) settled. Results are recorded in call
    /// order: an early finisher is held (durably) until every earlier call of the turn has a result. A
    /// [`ToolOutcome::Propagate`] fails the attempt.
    ///
    /// # Errors
    /// `STEADFAST_INTERNAL` when the call is not running (never started, settled already, not a call of this
    /// turn); nothing changes. Tolerated: after an abort (its result is `cancelled` already) or a failure (what it
    /// returns is not recorded), a call that was running may still settle: accepted and ignored.
    pub fn notify_tool_settled(&mut self, tool_call_id: &str, outcome: ToolOutcome) -> Result<()> {
        self.settle_batch("notify_tool_settled", vec![(tool_call_id.to_string(), outcome)])
    }

    /// Several tool calls settled together (a group commit): each is recorded as by
    /// [`notify_tool_settled`](Self::notify_tool_settled), in the order given (results are still placed in call
    /// order), and the state is committed once for all of them: one journal entry instead of one per result.
    /// An empty batch changes nothing.
    ///
    /// # Errors
    /// `STEADFAST_INTERNAL` when a call of the batch is not running, or is named twice; nothing changes (no call
    /// of the batch is recorded). Tolerated: after an abort or a failure, the batch is accepted and ignored.
    pub fn notify_tools_settled(&mut self, results: Vec<(String, ToolOutcome)>) -> Result<()> {
        self.settle_batch("notify_tools_settled", results)
    }

    fn settle_batch(&mut self, notify: &str, results: Vec<(String, ToolOutcome)>) -> Result<()> {
        if self.cut_short() || results.is_empty() {
            return Ok(());
        }
        let mut calls = Vec::with_capacity(results.len());
        for (i, (id, _)) in results.iter().enumerate() {
            if results[..i].iter().any(|(e, _)| e == id) {
                let run_id = &self.cfg.run_id;
                let message = format!("{notify} refused on run '{run_id}': call '{id}' is named twice in one batch");
                return Err(Error::new(ErrorCode::Internal, message).with_run(run_id));
            }
            match self.calls.slot(id) {
                Some(slot) if slot.state == CallState::Running => calls.push(slot.call.clone()),
                _ => return Err(self.refuse_call(notify, id, &CallState::Running)),
            }
        }
        for (call, (_, outcome)) in calls.iter().zip(results) {
            if let Err(err) = self.settle(call, outcome) {
                self.fail(err);
                return Ok(());
            }
        }
        self.advance();
        Ok(())
    }

    pub(super) fn settle(&mut self, call: &ToolCall, outcome: ToolOutcome) -> Result<()> {
        match outcome {
            ToolOutcome::Ok { content, business_state, usage } => {
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
                self.record_spent(result(call, content, false, ResultKind::Execution), usage, None);
            }
            ToolOutcome::Failed { message } => {
                self.record(result(call, cap_chars(&message, MAX_ERROR_RESULT_CHARS), true, ResultKind::Execution));
            }
            ToolOutcome::Denied { reason } => {
                self.record(result(call, format!("denied: {reason}"), true, ResultKind::Denied));
            }
            ToolOutcome::Replaced { content, is_error, by, usage } => {
                let content = if is_error {
                    cap_chars(&content, MAX_ERROR_RESULT_CHARS)
                } else {
                    cap_tool_result(content, self.cfg.max_tool_result_bytes)
                };
                self.record_spent(result(call, content, is_error, ResultKind::Execution), usage, Some(by));
            }
            ToolOutcome::Wait(wait) => match wait.check() {
                Ok(()) => {
                    self.calls.set(&call.id, CallState::Parked { wait });
                }
                Err(why) => {
                    let message =
                        format!("InvalidWait: '{}' asked for a wait that cannot be recorded: {why}", call.name);
                    self.record(result(call, cap_chars(&message, MAX_ERROR_RESULT_CHARS), true, ResultKind::Execution));
                }
            },
            ToolOutcome::Propagate(err) => return Err(err),
        }
        Ok(())
    }

    /// Answers to the last [`Effect::Reconcile`](super::Effect::Reconcile): `Some(outcome)` when the effect
    /// happened (it becomes the recorded result), `None` when it did not, or no answer (the call runs again).
    ///
    /// # Errors
    /// `STEADFAST_INTERNAL` when the machine does not wait for reconcile answers, or an answer names a call it
    /// did not ask about; nothing changes. Tolerated: after an abort or a failure, answers are accepted and
    /// ignored.
    pub fn notify_reconciled(&mut self, answers: Vec<(String, Option<ToolOutcome>)>) -> Result<()> {
        if !self.awaits(Wait::Reconcile, "notify_reconciled")? {
            return Ok(());
        }
        if let Some((id, _)) =
            answers.iter().find(|(id, _)| self.calls.state(id) != Some(&CallState::AwaitingReconcile))
        {
            return Err(self.refuse_call("notify_reconciled", id, &CallState::AwaitingReconcile));
        }
        self.waiting = None;
        let mut answers: HashMap<String, Option<ToolOutcome>> = answers.into_iter().collect();
        for call in self.calls.calls_in(&CallState::AwaitingReconcile) {
            match answers.remove(&call.id).flatten() {
                Some(outcome) => {
                    if let Err(err) = self.settle(&call, outcome) {
                        self.fail(err);
                        return Ok(());
                    }
                }
                // Its intent is still recorded: it runs again as it is.
                None => {
                    self.calls.set(&call.id, CallState::Ready { approval_id: None });
                }
            }
        }
        self.advance();
        Ok(())
    }

    /// The approval records of the last [`Effect::Pause`](super::Effect::Pause) were written: the run pauses,
    /// unless an abort or a failure arrived while they were written (it wins; the pause is not taken).
    ///
    /// # Errors
    /// `STEADFAST_INTERNAL` when the machine does not wait for approval records (an abort or a failure does not
    /// end that wait); nothing changes.
    pub fn notify_approvals_recorded(&mut self) -> Result<()> {
        let Some(Wait::Approvals { batch }) = self.waiting.take_if(|w| matches!(w, Wait::Approvals { .. })) else {
            return Err(self.refuse("notify_approvals_recorded"));
        };
        if self.phase != Phase::Active {
            self.advance();
            return Ok(());
        }
        self.cp.status = RunStatus::AwaitingApproval;
        self.cp.approval_ids = batch;
        self.cp.finish_reason = None;
        self.progress();
        self.phase = Phase::Ending(Outcome {
            status: RunStatus::AwaitingApproval,
            finish_reason: Some(FinishReason::AwaitingApproval),
            note: None,
            error: None,
        });
        self.advance();
        Ok(())
    }

    /// The run was aborted: every call without a result gets a `cancelled` result, the state is committed
    /// (`in-progress`, resumable) and the execution finishes. A signal, valid in every state: once the outcome
    /// is decided (finished, paused, failed, aborted) it changes nothing.
    pub fn notify_abort(&mut self) {
        if self.phase != Phase::Active {
            return;
        }
        if matches!(self.waiting, Some(Wait::Model | Wait::Gate | Wait::Reconcile | Wait::Queue)) {
            self.waiting = None;
        }
        for call in self.calls.open_calls() {
            self.record(result(
                &call,
                "cancelled: the run was aborted before this call finished".into(),
                true,
                ResultKind::Cancelled,
            ));
        }
        self.dirty = true;
        self.phase = Phase::Ending(Outcome {
            status: RunStatus::InProgress,
            finish_reason: Some(FinishReason::Aborted),
            note: None,
            error: None,
        });
        self.advance();
    }

    /// The attempt failed (a hook threw, a store write failed before, the machine refused an answer, …): record
    /// `lastError`/`attempts` and finish with the error. The checkpoint stays resumable. A signal, valid in every
    /// state: once the outcome is decided it changes nothing.
    pub fn notify_failed(&mut self, err: Error) {
        self.fail(err);
    }

    /// Whether the machine takes an answer to `wait` now: `Ok(false)` for a late answer after an abort or a
    /// failure decided the outcome (ignored), `STEADFAST_INTERNAL` from `notify` when it waits for something else.
    pub(super) fn awaits(&self, wait: Wait, notify: &str) -> Result<bool> {
        if self.cut_short() {
            return Ok(false);
        }
        if self.waiting != Some(wait) {
            return Err(self.refuse(notify));
        }
        Ok(true)
    }

    /// An abort or a failure decided the outcome: answers to what was handed out before are ignored.
    fn cut_short(&self) -> bool {
        match &self.phase {
            Phase::Active => false,
            Phase::Ending(outcome) => cut_short(outcome),
            Phase::Done { cut_short } => *cut_short,
        }
    }

    /// What the machine waits for, for the refusal of an answer it does not wait for.
    fn awaited(&self) -> &'static str {
        match (&self.phase, &self.waiting) {
            (Phase::Done { .. }, _) => "is done",
            (_, Some(Wait::Commit)) => "waits for a commit",
            (_, Some(Wait::Model)) => "waits for the model",
            (_, Some(Wait::Gate)) => "waits for gate verdicts",
            (_, Some(Wait::Reconcile)) => "waits for reconcile answers",
            (_, Some(Wait::Approvals { .. })) => "waits for approval records",
            (_, Some(Wait::Queue)) => "waits for the message queue",
            (_, None) => "waits for running tools only",
        }
    }

    /// `STEADFAST_INTERNAL`: `notify` answers something the machine does not wait for.
    fn refuse(&self, notify: &str) -> Error {
        let run_id = &self.cfg.run_id;
        Error::new(ErrorCode::Internal, format!("{notify} refused on run '{run_id}': the machine {}", self.awaited()))
            .with_run(run_id)
    }

    /// `STEADFAST_INTERNAL`: `notify` names a call that is not in the `expected` state.
    fn refuse_call(&self, notify: &str, id: &str, expected: &CallState) -> Error {
        let run_id = &self.cfg.run_id;
        let is = self.calls.state(id).map_or("unknown to this turn", CallState::describe);
        let message = format!("{notify} refused on run '{run_id}': call '{id}' is {is}, not {}", expected.describe());
        Error::new(ErrorCode::Internal, message).with_run(run_id)
    }
}
