//! One step, run after every answer: state changes that need no I/O (transitions), the commit that makes them
//! durable, then the effects that need the committed state (actions).

use super::calls::{CallState, TurnCalls};
use super::{cut_short, Effect, KeyedCall, Outcome, Phase, RunMachine, Wait, MAX_ERROR_RESULT_CHARS, STORAGE_EVERY};
use crate::core::approval::{ApprovalRecord, ApprovalStatus, Decision};
use crate::core::checkpoint::{Checkpoint, EntryBody, FinishReason, Header, JournalEntry, RunStatus};
use crate::core::error::{cap_chars, Error};
use crate::core::events::Event;
use crate::core::fingerprint::{canonical_json, Fingerprint};
use crate::core::transcript::{Message, ResultKind, ToolCall, ToolResult, Usage};
use crate::core::wait::{WaitKind, WaitRequest};
use crate::core::wire::json_text;
use serde_json::{json, Value};
use std::collections::HashSet;

pub(super) fn result(call: &ToolCall, content: String, is_error: bool, kind: ResultKind) -> ToolResult {
    ToolResult { tool_call_id: call.id.clone(), name: call.name.clone(), content, is_error, kind, usage: None }
}

/// The tool call ids of a transcript that only grows: the first `indexed` messages' ids are in `ids`.
#[derive(Clone, Debug, Default)]
pub(super) struct CallIds {
    indexed: usize,
    ids: HashSet<String>,
}

impl CallIds {
    /// Indexes the messages added since the last call (all of them again if the transcript is shorter than
    /// what was indexed: it was replaced).
    fn catch_up(&mut self, messages: &[Message]) {
        if self.indexed > messages.len() {
            *self = CallIds::default();
        }
        for m in &messages[self.indexed..] {
            self.ids.extend(m.tool_calls().iter().map(|c| c.id.clone()));
        }
        self.indexed = messages.len();
    }
}

/// What the journal holds already: the next entry is the delta from it.
#[derive(Clone, Debug, Default)]
pub(super) struct Committed {
    len: usize,
    head: Header,
    business_state: Option<Value>,
    fingerprint: Option<Fingerprint>,
    ext: Option<Value>,
}

impl Committed {
    pub(super) fn of(cp: &Checkpoint) -> Committed {
        Committed {
            len: cp.messages.len(),
            head: cp.header(),
            business_state: cp.business_state.clone(),
            fingerprint: cp.fingerprint.clone(),
            ext: cp.ext.clone(),
        }
    }

    /// The storage usage the journal records (none when nothing was counted).
    pub(super) fn storage(&self) -> Option<crate::core::cost::StorageUsage> {
        (!self.head.storage.is_empty()).then_some(self.head.storage)
    }

    /// The entry body that brings the journal from `self` to `cp`.
    fn delta(&self, cp: &Checkpoint) -> EntryBody {
        EntryBody::Delta {
            from: self.len,
            messages: cp.messages[self.len..].to_vec(),
            head: cp.header().diff(&self.head),
            business_state: (cp.business_state != self.business_state).then(|| cp.business_state.clone()),
            fingerprint: if cp.fingerprint != self.fingerprint { cp.fingerprint.clone() } else { None },
            ext: (cp.ext != self.ext).then(|| cp.ext.clone()),
        }
    }
}

impl RunMachine {
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

    /// The attempt failed: record `lastError` and `attempts`, and end with the error. Calls that run are
    /// abandoned (what they return is not recorded); a wait for the model, a gate verdict or a reconcile answer
    /// ends. The first verdict wins: nothing happens once the outcome is decided.
    pub(super) fn fail(&mut self, err: Error) {
        if self.phase != Phase::Active {
            return;
        }
        self.calls.abandon_running();
        if matches!(self.waiting, Some(Wait::Model | Wait::Gate | Wait::Reconcile | Wait::Queue)) {
            self.waiting = None;
        }
        self.cp.last_error = Some(err.info());
        self.cp.attempts = self.cp.attempts.saturating_add(1);
        self.dirty = true;
        self.emit(Event::Error { error: err.info() });
        let status = self.cp.status;
        self.phase = Phase::Ending(Outcome { status, finish_reason: None, note: None, error: Some(err) });
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

    /// [`Self::record_by`] for a result that cost `usage` elsewhere (a sub-agent's child run): the run's usage
    /// and the conversation's grow by it in the same commit, and the result keeps it. Nothing is added for a call
    /// that is not open (its result was recorded already).
    pub(super) fn record_spent(&mut self, mut r: ToolResult, usage: Option<Usage>, by: Option<String>) {
        if let Some(u) = usage {
            if self.calls.slot(&r.tool_call_id).is_some_and(|s| s.state != CallState::Recorded) {
                self.cp.usage.add(u);
                self.cp.total_usage.add(u);
                r.usage = Some(u);
            }
        }
        self.record_by(r, by);
    }

    /// Records a call's result: placed after its turn when every earlier call has one, held (durably) until then.
    /// The call becomes `Recorded`; a call that is not open changes nothing.
    pub(super) fn record_by(&mut self, r: ToolResult, replaced_by: Option<String>) {
        if !self.calls.set(&r.tool_call_id, CallState::Recorded) {
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

    /// The calls with an id each, unique in the run: a missing or taken id, or one with a control character
    /// (a line break would split the lines a call's id is carried in: a child run's execution, SSE), is replaced
    /// by `call_<step>_<i>` (`_<k>` added while that is taken too). The run's ids are indexed as the transcript grows (only the
    /// messages added since the last call are read), not hashed again from the whole transcript at every step.
    pub(super) fn sanitize_calls(&mut self, calls: Vec<ToolCall>) -> Vec<ToolCall> {
        self.call_ids.catch_up(&self.cp.messages);
        let stored = &self.call_ids.ids;
        let mut fresh: HashSet<String> = HashSet::new();
        let step = self.cp.step_index;
        let mut out = Vec::with_capacity(calls.len());
        for (i, mut c) in calls.into_iter().enumerate() {
            let taken = |id: &str, fresh: &HashSet<String>| stored.contains(id) || fresh.contains(id);
            if c.id.is_empty() || c.id.chars().any(char::is_control) || taken(&c.id, &fresh) {
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
        let outcome = Outcome { status: RunStatus::Finished, finish_reason: Some(reason), note, error: None };
        self.phase = Phase::Ending(outcome);
    }

    /// Enters the current turn: every call without a result gets its state, from the decisions on a resolved
    /// pause (`decisions`) and from what an earlier execution left in the checkpoint. Rejections are recorded
    /// first, then each call is classified in call order: a start mark without a result is an interrupted call,
    /// an intent without an outcome is reconciled, invalid arguments are answered, an approved call gets its
    /// start mark, every other call is gated.
    pub(super) fn enter_turn(&mut self, decisions: Option<Vec<Decision>>) {
        let resolved = decisions.is_some();
        let pending = self.pending_calls();
        let decisions = decisions.unwrap_or_default();
        let decision = |id: &str| decisions.iter().find(|d| d.tool_call_id == id);
        self.calls = TurnCalls::default();
        for call in &pending {
            let approval_id =
                decision(&call.id).filter(|d| d.approved && d.result.is_none()).map(|d| d.approval_id.clone());
            self.calls.enter(call.clone(), approval_id);
        }
        if resolved {
            for call in &pending {
                let Some(d) = decision(&call.id) else { continue };
                if let Some(outcome) = &d.result {
                    // A resolved wait: its resolution is the call's result; the tool does not run again.
                    self.emit(Event::WaitDone {
                        wait_id: d.approval_id.clone(),
                        tool_call_id: call.id.clone(),
                        by: outcome.by,
                    });
                    let r = result(call, outcome.content.clone(), outcome.is_error, ResultKind::Execution);
                    self.record_spent(r, outcome.usage, None);
                } else if !d.approved {
                    let content = json!({
                        "error": "rejected",
                        "message": format!("A reviewer rejected this call to '{}'; it did not run.", call.name),
                        "note": d.note,
                    });
                    self.record(result(call, json_text(&content), true, ResultKind::Rejected));
                }
            }
            self.cp.status = RunStatus::InProgress;
            self.cp.approval_ids.clear();
            self.progress();
        }
        for i in 0..self.calls.len() {
            let CallState::Entered { approval_id } = &self.calls.at(i).state else { continue };
            let (call, approval_id) = (self.calls.at(i).call.clone(), approval_id.clone());
            if self.answer_handoff(&call) {
                continue;
            }
            if self.cp.started_tool_call_ids.contains(&call.id) {
                let content = format!(
                    "interrupted: the process stopped while '{}' was running; it may or may not have taken effect. \
                     It was not run again.",
                    call.name
                );
                self.record(result(&call, content, true, ResultKind::Interrupted));
            } else if self.cp.intents.contains(&call.id) {
                self.calls.set(&call.id, CallState::AwaitingReconcile);
            } else if let Some(why) = &call.invalid {
                let content =
                    cap_chars(&format!("invalid arguments for '{}': {why}", call.name), MAX_ERROR_RESULT_CHARS);
                self.record(result(&call, content, true, ResultKind::Validation));
            } else if let Some(approval_id) = approval_id {
                self.cp.started_tool_call_ids.push(call.id.clone());
                self.progress();
                self.calls.set(&call.id, CallState::Ready { approval_id: Some(approval_id) });
            } else {
                self.calls.set(&call.id, CallState::AwaitingGate);
            }
        }
    }

    pub(super) fn advance(&mut self) {
        if matches!(self.phase, Phase::Done { .. }) || self.waiting.is_some() {
            return;
        }
        if self.phase == Phase::Active {
            self.transitions();
            if self.finish_read_due() {
                // Before the final turn is committed: a message found continues the run in the same commit, and
                // a run that finishes writes one entry, as without steering. (The state's `steered` ids are
                // committed: only the model's turn is not.)
                self.read_queue();
                return;
            }
            let calls = self.calls.calls_in(&CallState::AwaitingReconcile);
            if !calls.is_empty() {
                let calls = calls.into_iter().map(|call| KeyedCall { key: self.key_of(&call), call }).collect();
                self.effects.push_back(Effect::Reconcile { calls });
                self.waiting = Some(Wait::Reconcile);
                return;
            }
            let calls = self.calls.calls_in(&CallState::AwaitingGate);
            if !calls.is_empty() {
                self.effects.push_back(Effect::Gate { calls });
                self.waiting = Some(Wait::Gate);
                return;
            }
        }
        if self.dirty {
            self.commit();
            return;
        }
        if let Phase::Ending(outcome) = &self.phase {
            let outcome = outcome.clone();
            self.emit(Event::RunDone {
                status: outcome.status,
                finish_reason: outcome.finish_reason,
                steps: self.cp.step_index,
                storage: self.committed.storage(),
            });
            self.phase = Phase::Done { cut_short: cut_short(&outcome) };
            self.effects.push_back(Effect::Finish(outcome));
            return;
        }
        self.actions();
    }

    /// State changes that need no I/O once every call of the turn has its result: queued input, finishing.
    pub(super) fn transitions(&mut self) {
        if self.calls.has_open() || self.cp.status != RunStatus::InProgress {
            return;
        }
        self.take_handoff();
        if !self.cp.queued_input.is_empty() {
            let input = std::mem::take(&mut self.cp.queued_input);
            self.cp.messages.extend(input);
            self.progress();
        }
        let over = self.budget().exceeded(&self.cp, self.active_ms());
        match self.cp.messages.last() {
            Some(Message::Assistant { tool_calls, .. }) if tool_calls.is_empty() => {
                if self.queue_read_due(QueuePoint::Finish) {
                    // `advance` reads the queue first: a message sent during the last model call continues the run.
                    return;
                }
                let reason = self.turn_finish.take().unwrap_or(FinishReason::Stop);
                let note = (reason == FinishReason::Length).then(|| {
                    "Stopped: the model's answer was cut off at its output token limit (maxTokens). The transcript \
                     is kept; send a message to continue, or raise the limit."
                        .to_string()
                });
                self.finish(reason, note)
            }
            _ if self.cp.step_index >= self.cfg.max_steps => {
                let note = format!(
                    "Stopped: the run used its {} steps (maxSteps) without a final answer. The transcript is kept; \
                     send a message to continue.",
                    self.cfg.max_steps
                );
                self.finish(FinishReason::MaxSteps, Some(note));
            }
            _ if over.is_some() => self.finish(FinishReason::BudgetExceeded, over.map(|x| x.note())),
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

    /// Effects that need the committed state: run the calls cleared to run, pause, call the model.
    pub(super) fn actions(&mut self) {
        if !self.calls.has_open() {
            // A finished run here is a drain: it reads its queue before anything else (a run that stopped on
            // `maxSteps` or its budget ends with tool results, not a final answer, and must not call the model).
            let drain = self.cp.status == RunStatus::Finished;
            let point = if drain || self.at_final_answer() { QueuePoint::Finish } else { QueuePoint::Model };
            if self.queue_read_due(point) {
                self.read_queue();
                return;
            }
            self.effects.push_back(Effect::CallModel { step: self.cp.step_index + 1 });
            self.waiting = Some(Wait::Model);
            return;
        }
        if self.queue_read_due(QueuePoint::Tools) && !self.calls.unstarted().is_empty() {
            self.read_queue();
            return;
        }
        let mut to_pause = Vec::new();
        for i in 0..self.calls.len() {
            let slot = self.calls.at(i);
            match &slot.state {
                CallState::Ready { approval_id } => self.launch(slot.call.clone(), approval_id.clone()),
                CallState::AwaitingApproval { approval_id } => {
                    to_pause.push((slot.call.clone(), approval_id.clone(), None))
                }
                CallState::Parked { wait } => {
                    let token = crate::core::wait::token(self.cp.own_key_scope(), &slot.call.id);
                    // A token always has a wait id (its shape is ours).
                    let id = crate::core::wait::wait_id(&token).unwrap_or_default();
                    to_pause.push((slot.call.clone(), id, Some((wait.clone(), token))));
                }
                _ => {}
            }
        }
        if self.calls.running().next().is_some() {
            return;
        }
        if to_pause.is_empty() {
            self.fail(Error::internal(format!("run '{}' has pending calls that nothing will settle", self.cfg.run_id)));
            return;
        }
        let batch: Vec<String> = to_pause.iter().map(|(_, id, _)| id.clone()).collect();
        let mut approvals = Vec::new();
        for (call, approval_id, wait) in to_pause {
            self.emit(Event::ApprovalRequested { approval_id: approval_id.clone(), tool_call: call.clone() });
            let mut record = ApprovalRecord {
                id: approval_id,
                run_id: self.cfg.run_id.clone(),
                tool_call: call,
                batch: batch.clone(),
                status: ApprovalStatus::Pending,
                note: None,
                step: self.cp.step_index,
                created_at: self.now,
                decided_at: None,
                fingerprint: self.active().ok().map(|(fp, _)| fp.clone()),
                ..Default::default()
            };
            if let Some((wait, token)) = wait {
                record.kind = wait.kind();
                record.due_at = wait.due_at();
                if let WaitRequest::Question { question, choices } = wait {
                    record.question = Some(question);
                    record.choices = choices;
                }
                if record.kind == WaitKind::Event {
                    record.token_hash = Some(crate::core::wait::token_hash(&token));
                }
                self.emit(Event::WaitStart {
                    wait_id: record.id.clone(),
                    kind: record.kind,
                    tool_call_id: record.tool_call.id.clone(),
                    question: record.question.clone(),
                    due_at: record.due_at,
                });
            }
            approvals.push(record);
        }
        self.effects.push_back(Effect::Pause { approvals });
        self.waiting = Some(Wait::Approvals { batch });
    }

    fn launch(&mut self, call: ToolCall, approval_id: Option<String>) {
        self.calls.set(&call.id, CallState::Running);
        self.emit(Event::ToolStart { tool_call_id: call.id.clone(), name: call.name.clone(), args: call.args.clone() });
        let key = self.key_of(&call);
        let wait_token = crate::core::wait::token(self.cp.own_key_scope(), &call.id);
        self.effects.push_back(Effect::RunTool { call, approval_id, key, wait_token });
    }

    fn commit(&mut self) {
        self.cp.seq += 1;
        self.cp.saved_at = self.now;
        self.cp.active_ms = self.active_ms();
        self.active_mark = self.active_mark.max(self.now);
        // The storage noted so far goes on the execution's last entry and on every `STORAGE_EVERY`th: a crash
        // loses at most the operations since the last of those, and the other entries stay as small as before.
        if matches!(self.phase, Phase::Ending(_)) || self.cp.seq % STORAGE_EVERY == 0 {
            self.cp.storage.add(std::mem::take(&mut self.storage_noted));
        }
        let body = if self.snapshot_next {
            EntryBody::Snapshot { state: Box::new(self.cp.clone()) }
        } else {
            self.committed.delta(&self.cp)
        };
        self.committed = Committed::of(&self.cp);
        self.snapshot_next = false;
        self.dirty = false;
        self.effects.push_back(Effect::Commit(JournalEntry { seq: self.cp.seq, at: self.now, body }));
        self.waiting = Some(Wait::Commit);
    }

    /// The current run's execution time through now: the checkpoint's and this execution's since its last commit.
    pub(super) fn active_ms(&self) -> u64 {
        self.cp.active_ms.saturating_add(self.now.saturating_sub(self.active_mark))
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

/// A boundary where the run's message queue may be read ([`crate::core::steer`]; answered in `steer`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum QueuePoint {
    /// Before the current turn's calls start.
    Tools,
    /// Before the next model call.
    Model,
    /// Before the run finishes (its last turn has no calls): read whatever the interval says.
    Finish,
}

impl RunMachine {
    /// Whether to read the queue now, at `point`.
    fn queue_read_due(&self, point: QueuePoint) -> bool {
        let Some(poll) = self.cfg.steer_poll_ms else { return false };
        let r = &self.queue_reads;
        let elapsed = r.last_at.is_none_or(|at| self.now.saturating_sub(at) >= poll);
        match point {
            QueuePoint::Tools => !r.before_tools && elapsed,
            QueuePoint::Model => !r.before_model && elapsed,
            QueuePoint::Finish => !r.before_model,
        }
    }

    /// Whether the unfinished run's last turn is a final answer that waits for the read before it finishes.
    fn finish_read_due(&self) -> bool {
        self.cp.status == RunStatus::InProgress
            && !self.calls.has_open()
            && self.at_final_answer()
            && self.queue_read_due(QueuePoint::Finish)
    }

    /// Whether the last turn is a final answer (no calls), which finishes the run.
    fn at_final_answer(&self) -> bool {
        matches!(self.cp.messages.last(), Some(Message::Assistant { tool_calls, .. }) if tool_calls.is_empty())
    }

    /// Asks for a read of the queue.
    fn read_queue(&mut self) {
        self.effects.push_back(super::Effect::ReadQueue);
        self.waiting = Some(Wait::Queue);
    }
}
