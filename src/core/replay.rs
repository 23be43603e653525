//! Events from the journal (M22): what a run's recorded states say happened, for a watcher that joins late or
//! comes back with `Last-Event-ID`.
//!
//! A journal entry moves a run from one recorded state to the next. [`recorded_events`] names what that move
//! recorded, as the events a live execution sent for it: `step` (a model turn), `tool.done` (a result),
//! `handoff` (the conversation handed to another agent), `approval.requested` (a call paused on a reviewer),
//! `error` (a failed attempt) and `run.done` (the run finished or paused). The other events (`run.start`,
//! `tool.start`, `tool.resume`, `agent.drift`, `heal.action`, the deltas) leave nothing in the journal: they
//! reach only those watching while they happen.
//!
//! A watcher's place is a [`Cursor`]: the journal position it has seen through (the `id:` of the SSE stream),
//! and whether it also saw the run end there.

use super::checkpoint::{Checkpoint, FinishReason, RunStatus};
use super::error::{Error, ErrorCode, Result};
use super::events::Event;
use super::transcript::Message;
use std::collections::HashSet;

/// Where a watcher stands in a run's journal: every event of the entries up to `position` seen, and with
/// `ended` the run's end at that position too. Written `12` or `12.done` (the SSE `id:`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cursor {
    /// The journal position seen through (0: nothing).
    pub position: u64,
    /// Whether the run's `run.done` at `position` was seen.
    pub ended: bool,
}

impl Cursor {
    /// Reads a cursor (`12`, `12.done`); anything else is `STEADFAST_INVALID_INPUT`.
    pub fn parse(s: &str) -> Result<Cursor> {
        let s = s.trim();
        let (num, ended) = match s.strip_suffix(".done") {
            Some(n) => (n, true),
            None => (s, false),
        };
        match num.parse::<u64>() {
            Ok(position) if !num.is_empty() && num.bytes().all(|b| b.is_ascii_digit()) => {
                Ok(Cursor { position, ended })
            }
            _ => Err(Error::new(
                ErrorCode::InvalidInput,
                format!(
                    "Last-Event-ID '{}' is not an event id of this API (a journal position such as 12 or 12.done)",
                    crate::core::error::cap_chars(s, 40)
                ),
            )),
        }
    }
}

impl std::fmt::Display for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.ended {
            true => write!(f, "{}.done", self.position),
            false => write!(f, "{}", self.position),
        }
    }
}

/// Whether the journal records what `event` reports ([`recorded_events`] gives it back); the others are seen
/// only live.
pub fn is_recorded(event: &Event) -> bool {
    matches!(
        event,
        Event::Step { .. }
            | Event::ToolDone { .. }
            | Event::ApprovalRequested { .. }
            | Event::Error { .. }
            | Event::RunDone { .. }
            | Event::Handoff { .. }
    )
}

/// The events of the journal entry that took a run from `prev` to `next` (consecutive recorded states), in
/// this order: model turns, results (placed, then held), approvals asked for, a failed attempt, the run's end
/// or pause. A result's `replacedBy` is not recorded (always absent here).
pub fn recorded_events(prev: &Checkpoint, next: &Checkpoint) -> Vec<Event> {
    let mut out = Vec::new();
    let from = prev.messages.len().min(next.messages.len());
    let held_before: HashSet<&str> = prev.held_results.iter().map(|r| r.tool_call_id.as_str()).collect();
    let mut step = prev.step_index;
    let mut usage = Some(next.total_usage.since(prev.total_usage));
    let done = |r: &super::transcript::ToolResult| Event::ToolDone {
        tool_call_id: r.tool_call_id.clone(),
        name: r.name.clone(),
        is_error: r.is_error,
        kind: r.kind,
        replaced_by: None,
    };
    for m in &next.messages[from..] {
        match m {
            Message::Assistant { content, tool_calls, usage: turn, model, .. } => {
                step += 1;
                out.push(Event::Step {
                    step,
                    text: content.clone(),
                    tool_calls: tool_calls.clone(),
                    // As the turn recorded it; in an older transcript, the entry's (one model turn per entry).
                    usage: turn.or(usage.take()).unwrap_or_default(),
                    model: model.clone(),
                });
                usage = None;
            }
            Message::Tool(r) if !held_before.contains(r.tool_call_id.as_str()) => out.push(done(r)),
            _ => {}
        }
    }
    out.extend(next.held_results.iter().filter(|r| !held_before.contains(r.tool_call_id.as_str())).map(done));
    if let Some(to) = next.agent.as_ref().filter(|to| next.handoffs > 0 && prev.agent.as_ref() != Some(*to)) {
        // The turn's transfer result that handed the conversation over.
        let tool = format!("{}{to}", super::machine::HANDOFF_PREFIX);
        let turn = next.messages.iter().rposition(|m| matches!(m, Message::Assistant { .. })).unwrap_or(0);
        let call = next.messages[turn..].iter().find_map(|m| match m {
            Message::Tool(r) if !r.is_error && r.name == tool => Some(r.tool_call_id.clone()),
            _ => None,
        });
        out.push(Event::Handoff { tool_call_id: call.unwrap_or_default(), to: to.clone() });
    }
    if next.status == RunStatus::AwaitingApproval {
        let asked_before: HashSet<&str> = match prev.status {
            RunStatus::AwaitingApproval => prev.approval_ids.iter().map(String::as_str).collect(),
            _ => HashSet::new(),
        };
        // The paused calls are the last turn's calls without a result, in call order, as their approvals are.
        let answered: HashSet<&str> = next
            .messages
            .iter()
            .filter_map(|m| match m {
                Message::Tool(r) => Some(r.tool_call_id.as_str()),
                _ => None,
            })
            .chain(next.held_results.iter().map(|r| r.tool_call_id.as_str()))
            .collect();
        let open = next
            .messages
            .iter()
            .rev()
            .find(|m| matches!(m, Message::Assistant { .. }))
            .map(|m| m.tool_calls())
            .unwrap_or_default()
            .iter()
            .filter(|c| !answered.contains(c.id.as_str()));
        for (id, call) in next.approval_ids.iter().zip(open) {
            if !asked_before.contains(id.as_str()) {
                out.push(Event::ApprovalRequested { approval_id: id.clone(), tool_call: call.clone() });
            }
        }
    }
    if let Some(error) = &next.last_error {
        if next.attempts > prev.attempts || prev.last_error.as_ref() != Some(error) {
            out.push(Event::Error { error: error.clone() });
        }
    }
    if next.status != RunStatus::InProgress && (prev.status != next.status || prev.finish_reason != next.finish_reason)
    {
        out.push(end_of(next));
    }
    out
}

/// The `run.done` event of a finished or paused run's state (as its execution sent it).
pub fn end_of(cp: &Checkpoint) -> Event {
    let finish_reason = match (cp.status, cp.finish_reason) {
        (RunStatus::AwaitingApproval, None) => Some(FinishReason::AwaitingApproval),
        (_, reason) => reason,
    };
    let storage = (!cp.storage.is_empty()).then_some(cp.storage);
    Event::RunDone { status: cp.status, finish_reason, steps: cp.step_index, storage }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_read_and_write_positions_and_ends() {
        assert_eq!(Cursor::parse("12").unwrap(), Cursor { position: 12, ended: false });
        assert_eq!(Cursor::parse(" 7.done ").unwrap(), Cursor { position: 7, ended: true });
        assert_eq!(Cursor::parse("0").unwrap(), Cursor::default());
        for bad in ["", "x", "-1", "1.5", ".done", "+3", "1 2", "99999999999999999999999"] {
            let e = Cursor::parse(bad).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidInput, "{bad}");
        }
        for c in [Cursor { position: 3, ended: true }, Cursor { position: 40, ended: false }] {
            assert_eq!(Cursor::parse(&c.to_string()).unwrap(), c);
        }
    }

    #[test]
    fn a_state_recorded_twice_yields_no_event() {
        let mut cp = Checkpoint::new("r");
        cp.messages.push(Message::user("hi"));
        cp.messages.push(Message::assistant("hello", vec![]));
        cp.step_index = 1;
        cp.status = RunStatus::Finished;
        assert!(recorded_events(&cp, &cp).is_empty());
        let mut before = cp.clone();
        before.messages.pop();
        before.step_index = 0;
        before.status = RunStatus::InProgress;
        let events = recorded_events(&before, &cp);
        assert!(matches!(&events[0], Event::Step { step: 1, text, .. } if text == "hello"), "{events:?}");
        assert!(matches!(events[1], Event::RunDone { status: RunStatus::Finished, steps: 1, .. }), "{events:?}");
        assert_eq!(events.len(), 2);
    }
}
