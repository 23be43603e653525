//! The pure part of fork (M8): pick the history entry of a step, patch its checkpoint into a new run.
//!
//! `fork(id, { fromStep, patch, newId })` takes the newest kept history entry of `fromStep`
//! ([`pick_history_step`]), applies the patch ([`apply_patch`]) and saves the result as the in-progress
//! checkpoint of the new run (default id [`default_fork_id`]). The fork keeps the source's step count and usage,
//! so the rest of the `maxSteps` budget applies to it; recorded results are not re-run, calls without a result
//! run first on resume (and go through approval again), except those the source may have run already: an open
//! intent is reconciled first, a started approved call is recorded `interrupted` (see [`apply_patch`]).

use super::checkpoint::{Checkpoint, RunStatus};
use super::error::{Error, ErrorCode};
use super::limits::{check_depth, check_message_depth};
use super::transcript::{validate_transcript, Message, ResultKind, ToolResult};
use crate::core::wire::json_text;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Replaces (or records) one tool call's result.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolResultPatch {
    /// The call whose result is replaced.
    pub tool_call_id: String,
    /// The new result: a string is used as the content as is, any other JSON is serialized.
    #[serde(default)]
    pub result: Value,
}

/// What a fork changes in the source checkpoint. Applied in field order: `messages`, `business_state`,
/// `tool_result`, `append_input`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ForkPatch {
    /// Replaces the whole transcript (held results and queued input are dropped with it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub messages: Option<Vec<Message>>,
    /// Replaces the business state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub business_state: Option<Value>,
    /// Replaces one call's result in place, or records it when the call has no result yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_result: Option<ToolResultPatch>,
    /// Queues a user message, sent after any tool calls still pending.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub append_input: Option<String>,
}

/// Builds the fork's checkpoint from `source` (a history entry) and `patch`.
///
/// The fork starts as a copy of `source` renamed to `new_run_id`, in progress, with no approvals, finish reason,
/// last error, attempts, quarantine mark or journal position (`seq = 0`): its pending calls go through the gate
/// (hooks, approval) again. The transcript, step count, usage, input window, fingerprint, extension state and
/// `saved_at` are kept. So is what the source knew about its pending calls, because the source may have run
/// them: a call with a recorded intent and no result stays an open intent (the fork's resume asks the tool's
/// `reconcile` before running it again, as a resume of the source would), and an approved call marked started
/// stays marked (the fork's resume records it `interrupted`, never runs it a second time). The patch is then
/// applied in order: `messages`, `business_state`, `tool_result`, `append_input`; a `messages` patch drops every
/// intent and start mark (its calls are the fork's own), and a call the patch answers needs neither.
///
/// The calls the fork copies keep the source's idempotency keys (`copied_scopes`, see
/// [`crate::core::idempotency`]); the fork's own scope is given when it is written (`key_scope` is `None` here). A
/// `messages` patch makes every call the fork's own.
///
/// Fails with `STEADFAST_INVALID_INPUT` when the patched transcript is invalid or `tool_result` names a call
/// that is not in the transcript, and with `STEADFAST_CHECKPOINT_CORRUPT` when the source transcript itself
/// is invalid (and no `messages` patch replaced it).
pub fn apply_patch(source: &Checkpoint, new_run_id: &str, patch: &ForkPatch) -> Result<Checkpoint, Error> {
    let mut cp = source.clone();
    // The calls it copies keep the source's idempotency keys; the fork's own scope is set when it is written.
    cp.copied_scopes = source.scopes_for_fork();
    cp.key_scope = None;
    cp.run_id = new_run_id.to_string();
    cp.status = RunStatus::InProgress;
    cp.approval_ids.clear();
    cp.finish_reason = None;
    cp.last_error = None;
    cp.attempts = 0;
    cp.seq = 0;
    cp.quarantined = false;
    // Its storage usage is its own id's operations (the source's stay the source's).
    cp.storage = Default::default();

    if let Some(state) = &patch.business_state {
        check_depth("patch.businessState", state).map_err(|e| e.with_run(&source.run_id))?;
    }
    for m in patch.messages.iter().flatten() {
        check_message_depth("patch.messages", m).map_err(|e| e.with_run(&source.run_id))?;
    }
    if let Some(messages) = &patch.messages {
        validate_transcript(messages).map_err(|why| {
            Error::invalid_input(format!("fork of run '{}': the patched transcript is invalid: {why}", source.run_id))
                .with_run(&source.run_id)
        })?;
        cp.messages = messages.clone();
        cp.held_results.clear();
        cp.queued_input.clear();
        cp.intents.clear();
        cp.started_tool_call_ids.clear();
        cp.copied_scopes.clear();
    } else if let Err(why) = validate_transcript(&cp.messages) {
        return Err(Error::new(
            ErrorCode::CheckpointCorrupt,
            format!("fork of run '{}': the source transcript is invalid: {why}", source.run_id),
        )
        .with_run(&source.run_id));
    }

    if let Some(state) = &patch.business_state {
        cp.business_state = Some(state.clone());
    }

    if let Some(tr) = &patch.tool_result {
        replace_tool_result(&mut cp, &source.run_id, tr)?;
    }

    if let Some(text) = &patch.append_input {
        cp.queued_input.push(Message::user(text.clone()));
    }
    keep_marks_of_open_calls(&mut cp);

    validate_transcript(&cp.messages).map_err(|why| {
        Error::invalid_input(format!("fork of run '{}': the patched transcript is invalid: {why}", source.run_id))
            .with_run(&source.run_id)
    })?;
    Ok(cp)
}

/// The default id of the `n`-th fork of `source_id`: `<source_id>.fork-<n>`.
pub fn default_fork_id(source_id: &str, n: u32) -> String {
    format!("{source_id}.fork-{n}")
}

/// The journal position (`seq`) of the newest kept history entry of `from_step`.
///
/// `history` holds `(step, seq)` pairs of run `run_id`'s kept entries, in any order. Fails with
/// `STEADFAST_CHECKPOINT_NOT_FOUND` when no entry has that step; the message lists the kept steps (sorted,
/// deduplicated), which are also in the error's `details` as `{"keptSteps": [...]}`.
pub fn pick_history_step(history: &[(u32, u64)], from_step: u32, run_id: &str) -> Result<u64, Error> {
    if let Some(seq) = history.iter().filter(|(step, _)| *step == from_step).map(|(_, seq)| *seq).max() {
        return Ok(seq);
    }
    let mut kept: Vec<u32> = history.iter().map(|(step, _)| *step).collect();
    crate::core::wire::sort_by(&mut kept, u32::cmp);
    kept.dedup();
    let listed = if kept.is_empty() {
        "none".to_string()
    } else {
        kept.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
    };
    Err(Error::new(
        ErrorCode::CheckpointNotFound,
        format!("step {from_step} is not in the kept history of run '{run_id}' (kept steps: {listed})"),
    )
    .with_run(run_id)
    .with_details(serde_json::json!({ "keptSteps": kept })))
}

/// Replaces the result of `patch.tool_call_id` in place, or records it in `held_results` when the call has no
/// result yet (then places held results that can be placed, in call order, as a recorded result would be).
fn replace_tool_result(cp: &mut Checkpoint, source_id: &str, patch: &ToolResultPatch) -> Result<(), Error> {
    let content = match &patch.result {
        Value::String(s) => s.clone(),
        other => json_text(other),
    };
    let id = patch.tool_call_id.as_str();
    let Some((turn, name)) = cp
        .messages
        .iter()
        .enumerate()
        .find_map(|(i, m)| m.tool_calls().iter().find(|c| c.id == id).map(|c| (i, c.name.clone())))
    else {
        return Err(Error::invalid_input(format!(
            "fork of run '{source_id}': tool call {id:?} is not in the transcript"
        ))
        .with_run(source_id)
        .with_details(serde_json::json!({ "toolCallId": id })));
    };

    let answered = cp.messages.iter_mut().skip(turn.saturating_add(1)).find_map(|m| match m {
        Message::Tool(r) if r.tool_call_id == id => Some(r),
        _ => None,
    });
    if let Some(r) = answered {
        r.content = content;
        r.is_error = false;
        r.kind = ResultKind::Execution;
        return Ok(());
    }

    let result = ToolResult {
        tool_call_id: id.to_string(),
        name,
        content,
        is_error: false,
        kind: ResultKind::Execution,
        usage: None,
    };
    match cp.held_results.iter_mut().find(|r| r.tool_call_id == id) {
        Some(held) => *held = result,
        None => cp.held_results.push(result),
    }
    place_held_results(cp);
    Ok(())
}

/// Keeps the intents and start marks of the calls of the last turn that still have no result (placed or held),
/// and only those.
fn keep_marks_of_open_calls(cp: &mut Checkpoint) {
    let placed = cp.messages.iter().rev().take_while(|m| matches!(m, Message::Tool(_))).count();
    let turn = cp.messages.len().saturating_sub(placed);
    let open: Vec<&str> = match turn.checked_sub(1).and_then(|i| cp.messages.get(i)) {
        Some(last) => last
            .tool_calls()
            .iter()
            .skip(placed)
            .map(|c| c.id.as_str())
            .filter(|id| !cp.held_results.iter().any(|r| r.tool_call_id == *id))
            .collect(),
        None => Vec::new(),
    };
    let intents = cp.intents.iter().filter(|id| open.contains(&id.as_str())).cloned().collect();
    let started = cp.started_tool_call_ids.iter().filter(|id| open.contains(&id.as_str())).cloned().collect();
    (cp.intents, cp.started_tool_call_ids) = (intents, started);
}

/// Moves held results into the transcript while the next unanswered call of the last turn has one (the same
/// placement the run machine does when it records a result), so a fork never resumes with a result that is
/// held but no call left to run that would place it.
pub(crate) fn place_held_results(cp: &mut Checkpoint) {
    loop {
        let placed = cp.messages.iter().rev().take_while(|m| matches!(m, Message::Tool(_))).count();
        let turn = cp.messages.len().saturating_sub(placed);
        let Some(last) = turn.checked_sub(1).and_then(|i| cp.messages.get(i)) else { return };
        let Some(next) = last.tool_calls().get(placed) else { return };
        let Some(pos) = cp.held_results.iter().position(|r| r.tool_call_id == next.id) else { return };
        let r = cp.held_results.remove(pos);
        cp.messages.push(Message::Tool(r));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::checkpoint::FinishReason;
    use crate::core::transcript::{ToolCall, Usage};
    use serde_json::json;

    fn call(id: &str, name: &str) -> ToolCall {
        ToolCall { id: id.into(), name: name.into(), args: json!({"city": "Oslo"}), invalid: None }
    }

    fn result(id: &str, name: &str, content: &str) -> Message {
        Message::Tool(ToolResult {
            tool_call_id: id.into(),
            name: name.into(),
            content: content.into(),
            is_error: false,
            kind: ResultKind::Execution,
            usage: None,
        })
    }

    /// The seed's trip run as kept at step 1 (after the weather result).
    fn trip_step1() -> Checkpoint {
        let mut cp = Checkpoint::new("trip");
        cp.messages = vec![
            Message::user("Plan my trip"),
            Message::assistant("", vec![call("call_weather", "weather")]),
            result("call_weather", "weather", "sunny"),
        ];
        cp.input_start = 0;
        cp.input_len = 1;
        cp.step_index = 1;
        cp.usage = Usage::tokens(10, 5);
        cp.business_state = Some(json!({"n": 1}));
        cp.seq = 4;
        cp.saved_at = 1234;
        cp.attempts = 2;
        cp.last_error = Some(Error::internal("boom").info());
        cp.ext = Some(json!({"guard": 1}));
        cp
    }

    /// A run paused on approval of its second call (the first one answered).
    fn paused() -> Checkpoint {
        let mut cp = Checkpoint::new("pay");
        cp.messages = vec![
            Message::user("pay"),
            Message::assistant("", vec![call("c1", "lookup"), call("c2", "charge"), call("c3", "notify")]),
            result("c1", "lookup", "found"),
        ];
        cp.step_index = 1;
        cp.status = RunStatus::AwaitingApproval;
        cp.approval_ids = vec!["apr_1".into()];
        cp.started_tool_call_ids = vec!["c2".into()];
        cp.intents = vec!["c3".into()];
        cp.quarantined = true;
        cp.attempts = 10;
        cp.finish_reason = Some(FinishReason::AwaitingApproval);
        cp
    }

    #[test]
    fn empty_patch_resets_the_run_fields_and_keeps_the_rest() {
        let mut src = trip_step1();
        src.storage = crate::core::cost::StorageUsage { writes: 7, cost: 35_000, ..Default::default() };
        let fork = apply_patch(&src, "trip.fork-1", &ForkPatch::default()).unwrap();
        assert_eq!(fork.run_id, "trip.fork-1");
        assert_eq!(fork.status, RunStatus::InProgress);
        assert_eq!(fork.finish_reason, None);
        assert_eq!(fork.last_error, None);
        assert_eq!(fork.attempts, 0);
        assert_eq!(fork.seq, 0);
        assert_eq!(fork.saved_at, 1234);
        assert_eq!(fork.messages, src.messages);
        assert_eq!(fork.step_index, 1);
        assert_eq!(fork.usage, src.usage);
        assert!(fork.storage.is_empty(), "the source's store operations stay the source's");
        assert_eq!((fork.input_start, fork.input_len), (0, 1));
        assert_eq!(fork.business_state, src.business_state);
        assert_eq!(fork.ext, src.ext);
        // The source is untouched.
        assert_eq!(src.run_id, "trip");
    }

    #[test]
    fn fork_of_a_paused_run_goes_through_approval_again() {
        let fork = apply_patch(&paused(), "pay.fork-1", &ForkPatch::default()).unwrap();
        assert_eq!(fork.status, RunStatus::InProgress);
        assert!(fork.approval_ids.is_empty());
        assert!(!fork.quarantined);
        assert_eq!(fork.attempts, 0);
        assert_eq!(fork.finish_reason, None);
    }

    /// The source may have run a call it recorded an intent or a start mark for: the fork keeps both for the
    /// calls still without a result (its resume reconciles the intent and records the started call
    /// `interrupted`, as a resume of the source would), never hands such a call out as one that did not run.
    #[test]
    fn a_fork_keeps_the_intents_and_start_marks_of_calls_still_without_a_result() {
        let fork = apply_patch(&paused(), "pay.fork-1", &ForkPatch::default()).unwrap();
        assert_eq!(fork.started_tool_call_ids, vec!["c2".to_string()]);
        assert_eq!(fork.intents, vec!["c3".to_string()]);

        // A call the patch answers needs neither (a held result counts as an answer).
        let answer = |id: &str| ForkPatch {
            tool_result: Some(ToolResultPatch { tool_call_id: id.into(), result: json!("done") }),
            ..Default::default()
        };
        let fork = apply_patch(&paused(), "pay.fork-1", &answer("c2")).unwrap();
        assert!(fork.started_tool_call_ids.is_empty());
        assert_eq!(fork.intents, vec!["c3".to_string()]);
        let fork = apply_patch(&paused(), "pay.fork-1", &answer("c3")).unwrap();
        assert_eq!(fork.held_results.len(), 1);
        assert_eq!(fork.started_tool_call_ids, vec!["c2".to_string()]);
        assert!(fork.intents.is_empty());

        // A rewritten transcript's calls are the fork's own: no mark carries over, even for a call id it reuses.
        let mut messages = paused().messages;
        messages.truncate(2);
        let rewrite = ForkPatch { messages: Some(messages), ..Default::default() };
        let fork = apply_patch(&paused(), "pay.fork-1", &rewrite).unwrap();
        assert!(fork.started_tool_call_ids.is_empty() && fork.intents.is_empty());

        // Marks of calls that are not pending in the last turn (stale) are dropped.
        let mut src = paused();
        src.intents.push("c1".into());
        src.started_tool_call_ids.push("gone".into());
        let fork = apply_patch(&src, "pay.fork-1", &ForkPatch::default()).unwrap();
        assert_eq!((fork.started_tool_call_ids, fork.intents), (vec!["c2".to_string()], vec!["c3".to_string()]));
    }

    #[test]
    fn append_input_is_queued() {
        let patch = ForkPatch { append_input: Some("It will rain, plan for that.".into()), ..Default::default() };
        let fork = apply_patch(&trip_step1(), "trip.fork-1", &patch).unwrap();
        assert_eq!(fork.messages, trip_step1().messages);
        assert_eq!(fork.queued_input, vec![Message::user("It will rain, plan for that.")]);
    }

    #[test]
    fn tool_result_is_replaced_in_place() {
        let mut src = trip_step1();
        if let Some(Message::Tool(r)) = src.messages.get_mut(2) {
            r.is_error = true;
            r.kind = ResultKind::Interrupted;
        }
        let patch = ForkPatch {
            tool_result: Some(ToolResultPatch {
                tool_call_id: "call_weather".into(),
                result: json!({"forecast": "rain"}),
            }),
            ..Default::default()
        };
        let fork = apply_patch(&src, "trip.fork-1", &patch).unwrap();
        assert_eq!(fork.messages.len(), 3);
        assert_eq!(fork.messages[..2], src.messages[..2]);
        assert_eq!(fork.messages[2], result("call_weather", "weather", r#"{"forecast":"rain"}"#));
        // A string result is used as is.
        let patch = ForkPatch {
            tool_result: Some(ToolResultPatch { tool_call_id: "call_weather".into(), result: json!("rain") }),
            ..Default::default()
        };
        let fork = apply_patch(&src, "trip.fork-1", &patch).unwrap();
        assert_eq!(fork.messages[2], result("call_weather", "weather", "rain"));
    }

    #[test]
    fn tool_result_of_a_pending_call_is_recorded() {
        // c2 is the next call to answer: recorded and placed right away.
        let patch = ForkPatch {
            tool_result: Some(ToolResultPatch { tool_call_id: "c2".into(), result: json!("charged") }),
            ..Default::default()
        };
        let fork = apply_patch(&paused(), "pay.fork-1", &patch).unwrap();
        assert_eq!(fork.messages.len(), 4);
        assert_eq!(fork.messages[3], result("c2", "charge", "charged"));
        assert!(fork.held_results.is_empty());

        // c3 comes after the unanswered c2: held until c2 is answered.
        let patch = ForkPatch {
            tool_result: Some(ToolResultPatch { tool_call_id: "c3".into(), result: json!({"sent": true}) }),
            ..Default::default()
        };
        let fork = apply_patch(&paused(), "pay.fork-1", &patch).unwrap();
        assert_eq!(fork.messages.len(), 3);
        assert_eq!(
            fork.held_results,
            vec![ToolResult {
                tool_call_id: "c3".into(),
                name: "notify".into(),
                content: r#"{"sent":true}"#.into(),
                is_error: false,
                kind: ResultKind::Execution,
                usage: None,
            }]
        );

        // A result already held for the call is replaced, not duplicated.
        let mut src = paused();
        src.held_results = fork.held_results.clone();
        let patch = ForkPatch {
            tool_result: Some(ToolResultPatch { tool_call_id: "c3".into(), result: json!("again") }),
            ..Default::default()
        };
        let fork = apply_patch(&src, "pay.fork-1", &patch).unwrap();
        assert_eq!(fork.held_results.len(), 1);
        assert_eq!(fork.held_results[0].content, "again");
    }

    #[test]
    fn recording_the_next_result_places_the_held_ones_in_call_order() {
        let mut src = paused();
        src.held_results = vec![ToolResult {
            tool_call_id: "c3".into(),
            name: "notify".into(),
            content: "sent".into(),
            is_error: false,
            kind: ResultKind::Execution,
            usage: None,
        }];
        let patch = ForkPatch {
            tool_result: Some(ToolResultPatch { tool_call_id: "c2".into(), result: json!("charged") }),
            ..Default::default()
        };
        let fork = apply_patch(&src, "pay.fork-1", &patch).unwrap();
        assert_eq!(fork.messages[3], result("c2", "charge", "charged"));
        assert_eq!(fork.messages[4], result("c3", "notify", "sent"));
        assert!(fork.held_results.is_empty());
        assert!(validate_transcript(&fork.messages).is_ok());
    }

    #[test]
    fn business_state_is_replaced() {
        let patch = ForkPatch { business_state: Some(json!({"n": 2})), ..Default::default() };
        let fork = apply_patch(&trip_step1(), "trip.fork-1", &patch).unwrap();
        assert_eq!(fork.business_state, Some(json!({"n": 2})));
    }

    #[test]
    fn messages_replace_the_transcript_and_drop_held_and_queued() {
        let mut src = paused();
        src.held_results = vec![ToolResult {
            tool_call_id: "c3".into(),
            name: "notify".into(),
            content: "sent".into(),
            is_error: false,
            kind: ResultKind::Execution,
            usage: None,
        }];
        src.queued_input = vec![Message::user("later")];
        let new = vec![Message::user("pay less")];
        let patch = ForkPatch { messages: Some(new.clone()), ..Default::default() };
        let fork = apply_patch(&src, "pay.fork-1", &patch).unwrap();
        assert_eq!(fork.messages, new);
        assert!(fork.held_results.is_empty());
        assert!(fork.queued_input.is_empty());
        assert_eq!(fork.step_index, 1);
    }

    #[test]
    fn patch_applies_in_order() {
        // `messages` first: the tool result patch sees the new transcript, and `appendInput` is queued after
        // the old queue was dropped.
        let mut src = trip_step1();
        src.queued_input = vec![Message::user("old")];
        let patch = ForkPatch {
            messages: Some(vec![
                Message::user("Plan my trip"),
                Message::assistant("", vec![call("call_x", "weather")]),
                result("call_x", "weather", "sunny"),
            ]),
            business_state: Some(json!({"n": 9})),
            tool_result: Some(ToolResultPatch { tool_call_id: "call_x".into(), result: json!("rain") }),
            append_input: Some("It will rain, plan for that.".into()),
        };
        let fork = apply_patch(&src, "trip.fork-2", &patch).unwrap();
        assert_eq!(fork.messages[2], result("call_x", "weather", "rain"));
        assert_eq!(fork.queued_input, vec![Message::user("It will rain, plan for that.")]);
        assert_eq!(fork.business_state, Some(json!({"n": 9})));

        // The old call id is gone once `messages` replaced the transcript.
        let patch = ForkPatch {
            messages: patch.messages.clone(),
            tool_result: Some(ToolResultPatch { tool_call_id: "call_weather".into(), result: json!("rain") }),
            ..Default::default()
        };
        let err = apply_patch(&src, "trip.fork-2", &patch).unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidInput);
    }

    #[test]
    fn unknown_tool_call_is_refused() {
        let patch = ForkPatch {
            tool_result: Some(ToolResultPatch { tool_call_id: "call_nope".into(), result: json!("x") }),
            ..Default::default()
        };
        let err = apply_patch(&trip_step1(), "trip.fork-1", &patch).unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidInput);
        assert!(err.message.contains("call_nope"), "{}", err.message);
        assert_eq!(err.run_id.as_deref(), Some("trip"));
    }

    #[test]
    fn invalid_transcripts_are_refused() {
        let patch =
            ForkPatch { messages: Some(vec![Message::user("q"), result("orphan", "t", "x")]), ..Default::default() };
        let err = apply_patch(&trip_step1(), "trip.fork-1", &patch).unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidInput);
        assert!(err.message.contains("orphan"), "{}", err.message);

        let mut broken = trip_step1();
        broken.messages.swap(1, 2);
        let err = apply_patch(&broken, "trip.fork-1", &ForkPatch::default()).unwrap_err();
        assert_eq!(err.code, ErrorCode::CheckpointCorrupt);
    }

    #[test]
    fn patch_json_shape() {
        let v = json!({
            "messages": [{"role": "user", "content": "hi"}],
            "businessState": {"a": 1},
            "toolResult": {"toolCallId": "c1", "result": {"forecast": "rain"}},
            "appendInput": "more"
        });
        let p: ForkPatch = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(p.messages, Some(vec![Message::user("hi")]));
        assert_eq!(p.tool_result.as_ref().map(|t| t.tool_call_id.as_str()), Some("c1"));
        assert_eq!(p.append_input.as_deref(), Some("more"));
        assert_eq!(serde_json::to_value(&p).unwrap(), v);
        let empty: ForkPatch = serde_json::from_value(json!({})).unwrap();
        assert_eq!(empty, ForkPatch::default());
    }

    #[test]
    fn default_fork_ids() {
        assert_eq!(default_fork_id("trip", 1), "trip.fork-1");
        assert_eq!(default_fork_id("trip.fork-1", 3), "trip.fork-1.fork-3");
    }

    #[test]
    fn pick_history_step_takes_the_newest_entry_of_the_step() {
        let history = [(0, 1), (1, 2), (1, 3), (2, 4), (1, 1)];
        assert_eq!(pick_history_step(&history, 1, "trip").unwrap(), 3);
        assert_eq!(pick_history_step(&history, 0, "trip").unwrap(), 1);
        assert_eq!(pick_history_step(&history, 2, "trip").unwrap(), 4);
    }

    #[test]
    fn pick_history_step_lists_the_kept_steps() {
        let history = [(2, 5), (0, 1), (1, 3), (1, 2)];
        let err = pick_history_step(&history, 7, "trip").unwrap_err();
        assert_eq!(err.code, ErrorCode::CheckpointNotFound);
        assert_eq!(err.message, "step 7 is not in the kept history of run 'trip' (kept steps: 0, 1, 2)");
        assert_eq!(err.details, Some(json!({"keptSteps": [0, 1, 2]})));
        assert_eq!(err.run_id.as_deref(), Some("trip"));

        let err = pick_history_step(&[], 1, "ghost").unwrap_err();
        assert_eq!(err.code, ErrorCode::CheckpointNotFound);
        assert!(err.message.contains("kept steps: none"), "{}", err.message);
        assert_eq!(err.details, Some(json!({"keptSteps": []})));
    }
}
