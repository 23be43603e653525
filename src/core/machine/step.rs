//! One step: state changes that need no I/O (transitions), then the effects that need the committed state
//! (actions), with the commit that comes between them.

use super::{Effect, Gate, Outcome, RunMachine, Wait, MAX_ERROR_RESULT_CHARS};
use crate::core::approval::{ApprovalRecord, ApprovalStatus};
use crate::core::checkpoint::{EntryBody, FinishReason, JournalEntry, RunStatus};
use crate::core::error::{cap_chars, Error};
use crate::core::events::Event;
use crate::core::fingerprint::canonical_json;
use crate::core::transcript::{Message, ResultKind, ToolCall, ToolResult};
use serde_json::json;
use std::collections::HashSet;

pub(super) fn result(call: &ToolCall, content: String, is_error: bool, kind: ResultKind) -> ToolResult {
    ToolResult { tool_call_id: call.id.clone(), name: call.name.clone(), content, is_error, kind }
}

impl RunMachine {
    // ----- internals -----

    pub(super) fn emit(&mut self, e: Event) {
        self.effects.push_back(Effect::Emit(e));
    }

    /// Marks progress: the next commit clears `lastError` and `attempts`.
    pub(super) fn progress(&mut self) {
        self.dirty = true;
        self.cp.last_error = None;
        self.cp.attempts = 0;
        self.cp.quarantined = false;
    }

    pub(super) fn fail(&mut self, err: Error) {
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
    pub(super) fn turn(&self) -> Option<(usize, usize)> {
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

    pub(super) fn record(&mut self, r: ToolResult) {
        self.record_by(r, None);
    }

    pub(super) fn record_by(&mut self, r: ToolResult, replaced_by: Option<String>) {
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

    pub(super) fn sanitize_calls(&self, calls: Vec<ToolCall>) -> Vec<ToolCall> {
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

    pub(super) fn finish(&mut self, reason: FinishReason, note: Option<String>) {
        self.cp.status = RunStatus::Finished;
        self.cp.finish_reason = Some(reason);
        self.progress();
        self.finishing = Some(Outcome { status: RunStatus::Finished, finish_reason: Some(reason), note, error: None });
    }

    pub(super) fn advance(&mut self) {
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
    pub(super) fn transitions(&mut self) {
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
    pub(super) fn actions(&mut self) {
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

    pub(super) fn launch(&mut self, call: ToolCall, approval_id: Option<String>) {
        self.running.insert(call.id.clone());
        self.emit(Event::ToolStart { tool_call_id: call.id.clone(), name: call.name.clone(), args: call.args.clone() });
        self.effects.push_back(Effect::RunTool { call, approval_id });
    }

    pub(super) fn commit(&mut self) {
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
    pub(super) fn loop_detected(&self) -> bool {
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
