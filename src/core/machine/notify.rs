//! The runtime's answers and signals: `notify_*`.

use super::calls::CallState;
use super::step::result;
use super::{Gate, ModelResponse, Outcome, Phase, RunMachine, ToolOutcome, Wait, MAX_ERROR_RESULT_CHARS};
use crate::core::checkpoint::{FinishReason, RunStatus};
use crate::core::error::{cap_chars, Error, Result};
use crate::core::events::Event;
use crate::core::limits::{cap_tool_result, json_depth, MAX_JSON_DEPTH};
use crate::core::transcript::{Message, ResultKind, ToolCall};
use serde_json::Value;
use std::collections::HashMap;

impl RunMachine {
    /// The last `Commit` was written.
    pub fn notify_committed(&mut self) {
        if self.waiting == Some(Wait::Commit) {
            self.waiting = None;
        }
        self.advance();
    }

    /// The model answered.
    pub fn notify_model_response(&mut self, resp: ModelResponse) {
        if self.waiting != Some(Wait::Model) || matches!(self.phase, Phase::Done { .. }) {
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
        self.progress();
        self.enter_turn(None);
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
        let mut decisions: HashMap<String, Gate> = decisions.into_iter().collect();
        for call in self.calls.calls_where(|s| *s == CallState::AwaitingGate) {
            let gate =
                decisions.remove(&call.id).unwrap_or(Gate::Invalid { message: "no gate decision was made".into() });
            self.apply_verdict(&call, gate);
        }
        self.advance();
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
                let names: Vec<&str> = self.cfg.tool_names.iter().map(String::as_str).collect();
                let content = format!("unknown tool '{}'. Available tools: {}", call.name, names.join(", "));
                self.record(result(call, content, true, ResultKind::Validation));
            }
            Gate::Denied { reason } => self.record(result(call, format!("denied: {reason}"), true, ResultKind::Denied)),
        }
    }

    /// A tool call settled. Results are recorded in call order: an early finisher is held (durably) until
    /// every earlier call of the turn has a result.
    pub fn notify_tool_settled(&mut self, tool_call_id: &str, outcome: ToolOutcome) {
        if !self.is_running(tool_call_id) {
            return;
        }
        let Some(call) = self.pending_calls().into_iter().find(|c| c.id == tool_call_id) else { return };
        if let Err(err) = self.settle(&call, outcome) {
            self.fail(err);
            return;
        }
        self.advance();
    }

    pub(super) fn settle(&mut self, call: &ToolCall, outcome: ToolOutcome) -> Result<()> {
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
        let mut answers: HashMap<String, Option<ToolOutcome>> = answers.into_iter().collect();
        for call in self.calls.calls_where(|s| *s == CallState::AwaitingReconcile) {
            match answers.remove(&call.id).flatten() {
                Some(outcome) => {
                    if let Err(err) = self.settle(&call, outcome) {
                        self.fail(err);
                        return;
                    }
                }
                // Its intent is still recorded: it runs again as it is.
                None => {
                    self.calls.set(&call.id, CallState::Ready { approval_id: None });
                }
            }
        }
        self.advance();
    }

    /// The approval records of the last `Pause` were written.
    pub fn notify_approvals_recorded(&mut self) {
        let Some(Wait::Approvals { batch }) = self.waiting.take_if(|w| matches!(w, Wait::Approvals { .. })) else {
            return;
        };
        if self.phase != Phase::Active {
            // An abort or failure arrived while the records were written: it wins; the pause is not taken.
            self.advance();
            return;
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
    }

    /// The run was aborted: every call without a result gets a `cancelled` result, the state is committed
    /// (`in-progress`, resumable) and the execution finishes.
    pub fn notify_abort(&mut self) {
        if self.phase != Phase::Active {
            return;
        }
        if matches!(self.waiting, Some(Wait::Model | Wait::Gate | Wait::Reconcile)) {
            self.waiting = None;
        }
        for call in self.calls.calls_where(CallState::is_open) {
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

    /// The attempt failed (a hook threw, a store write failed before, …): record `lastError`/`attempts` and
    /// finish with the error. The checkpoint stays resumable.
    pub fn notify_failed(&mut self, err: Error) {
        self.fail(err);
    }
}
