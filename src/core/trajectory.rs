//! Trajectory comparison (M9): two runs (checkpoints or plain transcripts) side by side, step by step.
//!
//! A *step* is one assistant turn: its text and its tool calls, each with the result that answered it.
//! [`compare_trajectories`] reports the first step that differs (`divergedAt`, tool call ids aside) and the
//! drift between the runs: tool-order, argument, step-count and finish-reason differences. Pure: no I/O.

use super::checkpoint::{Checkpoint, FinishReason};
use super::error::{Error, Result};
use super::transcript::Message;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::HashMap;

/// One tool call of a step, with the result that answered it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export, rename = "TrajectoryCall"))]
#[serde(rename_all = "camelCase")]
pub struct StepCall {
    /// Tool name.
    pub name: String,
    /// Arguments the model gave.
    #[serde(default)]
    pub args: Value,
    /// Content of the result message answering the call (`None` while the call has no result).
    #[serde(default)]
    pub result: Option<String>,
    /// Whether the result reports a failure (`false` without a result).
    #[serde(default)]
    pub is_error: bool,
}

/// One assistant turn of a run.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export, rename = "TrajectoryStep"))]
#[serde(rename_all = "camelCase")]
pub struct Step {
    /// 1-based step number (the n-th assistant message of the transcript).
    pub step: u32,
    /// The turn's text.
    pub text: String,
    /// The turn's tool calls, in the order the model gave them.
    #[serde(default)]
    pub tool_calls: Vec<StepCall>,
}

/// The tool-name sequences of one step differ.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase")]
pub struct ToolOrderDiff {
    /// 1-based step number.
    pub step: u32,
    /// Tool names of run `a` at that step, in call order.
    pub a: Vec<String>,
    /// Tool names of run `b` at that step, in call order.
    pub b: Vec<String>,
}

/// The same tool at the same position of the same step was called with different arguments.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase")]
pub struct ArgumentDiff {
    /// 1-based step number.
    pub step: u32,
    /// Tool name.
    pub tool: String,
    /// 0-based position of the call within the step.
    pub index: usize,
    /// Arguments in run `a`.
    pub a: Value,
    /// Arguments in run `b`.
    pub b: Value,
}

/// The runs took a different number of steps.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase")]
pub struct CountDiff {
    /// Steps of run `a`.
    pub a: usize,
    /// Steps of run `b`.
    pub b: usize,
}

/// The runs ended for different reasons.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase")]
pub struct FinishDiff {
    /// Finish reason of run `a`.
    pub a: Option<FinishReason>,
    /// Finish reason of run `b`.
    pub b: Option<FinishReason>,
}

/// The differences between two runs.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase")]
pub struct TrajectoryDrift {
    /// Steps (common to both runs) whose tool-name sequences differ.
    #[serde(default)]
    pub tool_order: Vec<ToolOrderDiff>,
    /// Calls of the same tool at the same position of a common step with different arguments.
    #[serde(default)]
    pub arguments: Vec<ArgumentDiff>,
    /// Set when the runs have a different number of steps.
    #[serde(default)]
    pub step_count: Option<CountDiff>,
    /// Set when the runs' finish reasons differ.
    #[serde(default)]
    pub finish_reason: Option<FinishDiff>,
}

impl TrajectoryDrift {
    /// Whether no difference was found.
    pub fn is_empty(&self) -> bool {
        self.tool_order.is_empty()
            && self.arguments.is_empty()
            && self.step_count.is_none()
            && self.finish_reason.is_none()
    }
}

/// The result of comparing two runs.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase")]
pub struct Comparison {
    /// Steps of run `a`.
    pub a: Vec<Step>,
    /// Steps of run `b`.
    pub b: Vec<Step>,
    /// 1-based number of the first step that differs (text, tool names, arguments or results; tool call ids
    /// aside). When all common steps are equal and one run has more steps, the first extra step. `None` when the
    /// trajectories are identical.
    #[serde(default)]
    pub diverged_at: Option<u32>,
    /// Tool-order, argument, step-count and finish-reason differences.
    #[serde(default)]
    pub drift: TrajectoryDrift,
}

/// Builds trajectories (step lists) from transcripts.
#[derive(Clone, Copy, Debug, Default)]
pub struct Trajectory;

impl Trajectory {
    /// The steps of a transcript: one per assistant message, numbered from 1. Each tool call carries the
    /// content of the first tool-result message answering its id after the turn (`None` when there is none).
    pub fn of(messages: &[Message]) -> Vec<Step> {
        // Positions of the result messages of each call id, in transcript order.
        let mut results: HashMap<&str, Vec<usize>> = HashMap::new();
        for (i, m) in messages.iter().enumerate() {
            if let Message::Tool(r) = m {
                results.entry(r.tool_call_id.as_str()).or_default().push(i);
            }
        }
        let mut steps = Vec::new();
        for (i, m) in messages.iter().enumerate() {
            let Message::Assistant { content, tool_calls, .. } = m else { continue };
            let calls = tool_calls
                .iter()
                .map(|call| {
                    let answer = results
                        .get(call.id.as_str())
                        .and_then(|positions| positions.iter().find(|&&p| p > i))
                        .and_then(|&p| match messages.get(p) {
                            Some(Message::Tool(r)) => Some(r),
                            _ => None,
                        });
                    StepCall {
                        name: call.name.clone(),
                        args: call.args.clone(),
                        result: answer.map(|r| r.content.clone()),
                        is_error: answer.is_some_and(|r| r.is_error),
                    }
                })
                .collect();
            steps.push(Step { step: step_number(steps.len()), text: content.clone(), tool_calls: calls });
        }
        steps
    }
}

/// The finish reason a plain transcript implies: `Some(Stop)` when its last message is an assistant message
/// without tool calls, `None` otherwise.
pub fn derived_finish_reason(messages: &[Message]) -> Option<FinishReason> {
    match messages.last() {
        Some(Message::Assistant { tool_calls, .. }) if tool_calls.is_empty() => Some(FinishReason::Stop),
        _ => None,
    }
}

/// Compares two transcripts step by step. The finish reason of each is derived with
/// [`derived_finish_reason`].
pub fn compare_trajectories(a: &[Message], b: &[Message]) -> Comparison {
    compare_steps(Trajectory::of(a), Trajectory::of(b), derived_finish_reason(a), derived_finish_reason(b))
}

/// Compares two checkpoints step by step (their whole transcripts), using each checkpoint's recorded
/// `finish_reason`.
pub fn compare_checkpoints(a: &Checkpoint, b: &Checkpoint) -> Comparison {
    compare_steps(Trajectory::of(&a.messages), Trajectory::of(&b.messages), a.finish_reason, b.finish_reason)
}

/// One run of a comparison read from JSON: a checkpoint (an object with `messages`, whose recorded
/// `finishReason` is used) or a plain transcript (an array of messages, whose finish reason is derived).
fn side_of_json(v: &Value, which: &str) -> Result<(Vec<Message>, Option<FinishReason>)> {
    let bad = |why: String| Error::invalid_input(format!("compareTrajectories: run {which} {why}"));
    match v {
        Value::Array(_) => {
            let messages: Vec<Message> =
                serde_json::from_value(v.clone()).map_err(|e| bad(format!("is not a transcript: {e}")))?;
            let finish = derived_finish_reason(&messages);
            Ok((messages, finish))
        }
        Value::Object(obj) => {
            let messages = obj.get("messages").ok_or_else(|| bad("is an object without `messages`".into()))?;
            let messages: Vec<Message> = serde_json::from_value(messages.clone())
                .map_err(|e| bad(format!("has `messages` that are not a transcript: {e}")))?;
            let finish = match obj.get("finishReason") {
                None | Some(Value::Null) => None,
                Some(f) => Some(
                    serde_json::from_value(f.clone()).map_err(|e| bad(format!("has an unknown finishReason: {e}")))?,
                ),
            };
            Ok((messages, finish))
        }
        _ => Err(bad("is neither a checkpoint nor a transcript (an array of messages)".into())),
    }
}

/// Compares two runs given as JSON, each a checkpoint or a transcript (see [`side_of_json`]); anything else is
/// `STEADFAST_INVALID_INPUT`.
pub fn compare_json(a: &Value, b: &Value) -> Result<Comparison> {
    let (ma, fa) = side_of_json(a, "a")?;
    let (mb, fb) = side_of_json(b, "b")?;
    Ok(compare_steps(Trajectory::of(&ma), Trajectory::of(&mb), fa, fb))
}

fn compare_steps(
    a: Vec<Step>,
    b: Vec<Step>,
    finish_a: Option<FinishReason>,
    finish_b: Option<FinishReason>,
) -> Comparison {
    let mut drift = TrajectoryDrift::default();
    let mut diverged_at = None;
    for (i, (sa, sb)) in a.iter().zip(b.iter()).enumerate() {
        let step = step_number(i);
        if diverged_at.is_none() && !same_step(sa, sb) {
            diverged_at = Some(step);
        }
        let names_a: Vec<String> = sa.tool_calls.iter().map(|c| c.name.clone()).collect();
        let names_b: Vec<String> = sb.tool_calls.iter().map(|c| c.name.clone()).collect();
        for (index, (ca, cb)) in sa.tool_calls.iter().zip(sb.tool_calls.iter()).enumerate() {
            if ca.name == cb.name && ca.args != cb.args {
                drift.arguments.push(ArgumentDiff {
                    step,
                    tool: ca.name.clone(),
                    index,
                    a: ca.args.clone(),
                    b: cb.args.clone(),
                });
            }
        }
        if names_a != names_b {
            drift.tool_order.push(ToolOrderDiff { step, a: names_a, b: names_b });
        }
    }
    let common = a.len().min(b.len());
    if a.len() != b.len() {
        if diverged_at.is_none() {
            diverged_at = Some(step_number(common));
        }
        drift.step_count = Some(CountDiff { a: a.len(), b: b.len() });
    }
    if finish_a != finish_b {
        drift.finish_reason = Some(FinishDiff { a: finish_a, b: finish_b });
    }
    Comparison { a, b, diverged_at, drift }
}

/// Steps compare on text and calls (name, args, result, error flag); the step number is positional and call
/// ids are not part of a [`StepCall`].
fn same_step(a: &Step, b: &Step) -> bool {
    a.text == b.text && a.tool_calls == b.tool_calls
}

/// 1-based step number of the step at 0-based `index`, saturating.
fn step_number(index: usize) -> u32 {
    u32::try_from(index).map_or(u32::MAX, |i| i.saturating_add(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::transcript::{ResultKind, ToolCall, ToolResult};
    use serde_json::json;

    fn call(id: &str, name: &str, args: Value) -> ToolCall {
        ToolCall { id: id.into(), name: name.into(), args, invalid: None }
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

    /// The seed's trip run: one weather call, then the plan.
    fn trip() -> Vec<Message> {
        vec![
            Message::user("Plan my trip"),
            Message::assistant("", vec![call("call_weather", "weather", json!({"city": "Oslo"}))]),
            result("call_weather", "weather", "sunny"),
            Message::assistant("Plan: picnic", vec![]),
        ]
    }

    #[test]
    fn steps_of_a_transcript() {
        let steps = Trajectory::of(&trip());
        assert_eq!(steps.len(), 2);
        assert_eq!(steps[0].step, 1);
        assert_eq!(steps[0].text, "");
        assert_eq!(
            steps[0].tool_calls,
            vec![StepCall {
                name: "weather".into(),
                args: json!({"city": "Oslo"}),
                result: Some("sunny".into()),
                is_error: false
            }]
        );
        assert_eq!(steps[1], Step { step: 2, text: "Plan: picnic".into(), tool_calls: vec![] });
        let v = serde_json::to_value(&steps[0]).unwrap();
        assert_eq!(v["toolCalls"][0]["isError"], false);
        assert_eq!(v["toolCalls"][0]["result"], "sunny");
        let back: Step = serde_json::from_value(v).unwrap();
        assert_eq!(back, steps[0]);
    }

    #[test]
    fn pending_call_has_no_result_and_results_before_the_turn_do_not_count() {
        let msgs = vec![
            Message::user("q"),
            Message::assistant("", vec![call("a", "t", json!({}))]),
            result("a", "t", "first"),
            Message::assistant("", vec![call("a", "t", json!({})), call("b", "t", json!({}))]),
        ];
        let steps = Trajectory::of(&msgs);
        assert_eq!(steps[0].tool_calls[0].result.as_deref(), Some("first"));
        assert_eq!(steps[1].tool_calls[0].result, None);
        assert_eq!(steps[1].tool_calls[1].result, None);
        assert_eq!(derived_finish_reason(&msgs), None);
    }

    #[test]
    fn identical_transcripts() {
        let c = compare_trajectories(&trip(), &trip());
        assert_eq!(c.diverged_at, None);
        assert!(c.drift.is_empty());
        assert_eq!(c.a, c.b);
        let empty = compare_trajectories(&[], &[]);
        assert_eq!(empty.diverged_at, None);
        assert!(empty.drift.is_empty());
    }

    #[test]
    fn seed_fork_with_appended_input_diverges_at_step_2() {
        let mut forked = trip();
        forked.truncate(3);
        forked.push(Message::user("It will rain, plan for that."));
        forked.push(Message::assistant("Plan: museum", vec![]));
        let c = compare_trajectories(&trip(), &forked);
        assert_eq!(c.diverged_at, Some(2));
        assert_eq!((c.a.len(), c.b.len()), (2, 2));
        assert_eq!(c.drift.step_count, None);
        assert!(c.drift.is_empty(), "{:?}", c.drift);
    }

    #[test]
    fn seed_fork_with_replaced_tool_result_diverges_at_step_1() {
        let mut forked = trip();
        forked[2] = result("call_weather", "weather", &json!({"forecast": "rain"}).to_string());
        forked[3] = Message::assistant("Plan: museum", vec![]);
        let c = compare_trajectories(&trip(), &forked);
        assert_eq!(c.diverged_at, Some(1));
        assert_eq!(c.b[0].tool_calls[0].result.as_deref(), Some(r#"{"forecast":"rain"}"#));
        assert!(c.drift.is_empty(), "{:?}", c.drift);
    }

    #[test]
    fn error_flag_of_a_result_is_a_difference() {
        let mut forked = trip();
        if let Message::Tool(r) = &mut forked[2] {
            r.is_error = true;
        }
        assert_eq!(compare_trajectories(&trip(), &forked).diverged_at, Some(1));
    }

    #[test]
    fn call_ids_alone_do_not_count() {
        let mut other = trip();
        other[1] = Message::assistant("", vec![call("call_0_0", "weather", json!({"city": "Oslo"}))]);
        other[2] = result("call_0_0", "weather", "sunny");
        let c = compare_trajectories(&trip(), &other);
        assert_eq!(c.diverged_at, None);
        assert!(c.drift.is_empty());
    }

    #[test]
    fn different_tool_order_is_reported() {
        let a = vec![
            Message::user("q"),
            Message::assistant("", vec![call("1", "weather", json!({})), call("2", "maps", json!({}))]),
            result("1", "weather", "x"),
            result("2", "maps", "y"),
        ];
        let b = vec![
            Message::user("q"),
            Message::assistant("", vec![call("1", "maps", json!({})), call("2", "weather", json!({}))]),
            result("1", "maps", "y"),
            result("2", "weather", "x"),
        ];
        let c = compare_trajectories(&a, &b);
        assert_eq!(c.diverged_at, Some(1));
        assert_eq!(
            c.drift.tool_order,
            vec![ToolOrderDiff {
                step: 1,
                a: vec!["weather".into(), "maps".into()],
                b: vec!["maps".into(), "weather".into()]
            }]
        );
        assert!(c.drift.arguments.is_empty());
        assert_eq!(c.drift.step_count, None);
        assert_eq!(c.drift.finish_reason, None);
    }

    #[test]
    fn different_arguments_are_reported() {
        let mut b = trip();
        b[1] = Message::assistant("", vec![call("call_weather", "weather", json!({"city": "Bergen"}))]);
        let c = compare_trajectories(&trip(), &b);
        assert_eq!(c.diverged_at, Some(1));
        assert_eq!(
            c.drift.arguments,
            vec![ArgumentDiff {
                step: 1,
                tool: "weather".into(),
                index: 0,
                a: json!({"city": "Oslo"}),
                b: json!({"city": "Bergen"})
            }]
        );
        assert!(c.drift.tool_order.is_empty());
    }

    #[test]
    fn extra_step_is_reported() {
        let mut b = trip();
        b.pop();
        b.push(Message::assistant("", vec![call("c2", "weather", json!({"city": "Bergen"}))]));
        b.push(result("c2", "weather", "cloudy"));
        b.push(Message::assistant("Plan: picnic", vec![]));
        let mut a = trip();
        a[3] = Message::assistant("", vec![call("c2", "weather", json!({"city": "Bergen"}))]);
        a.push(result("c2", "weather", "cloudy"));
        // a: weather(Oslo), weather(Bergen) [pending finish]; b: the same two plus the final answer.
        let c = compare_trajectories(&a, &b);
        assert_eq!(c.diverged_at, Some(3));
        assert_eq!(c.drift.step_count, Some(CountDiff { a: 2, b: 3 }));
        assert_eq!(c.drift.finish_reason, Some(FinishDiff { a: None, b: Some(FinishReason::Stop) }));
        assert!(c.drift.tool_order.is_empty());
        assert!(c.drift.arguments.is_empty());
        // Symmetric.
        let r = compare_trajectories(&b, &a);
        assert_eq!(r.diverged_at, Some(3));
        assert_eq!(r.drift.step_count, Some(CountDiff { a: 3, b: 2 }));
    }

    #[test]
    fn different_finish_reason_is_reported_for_checkpoints() {
        let mut a = Checkpoint::new("trip");
        a.messages = trip();
        a.finish_reason = Some(FinishReason::Stop);
        let mut b = a.clone();
        b.run_id = "trip.fork-1".into();
        let same = compare_checkpoints(&a, &b);
        assert_eq!(same.diverged_at, None);
        assert!(same.drift.is_empty());
        b.finish_reason = Some(FinishReason::MaxSteps);
        let c = compare_checkpoints(&a, &b);
        assert_eq!(c.diverged_at, None);
        assert_eq!(
            c.drift.finish_reason,
            Some(FinishDiff { a: Some(FinishReason::Stop), b: Some(FinishReason::MaxSteps) })
        );
        assert!(!c.drift.is_empty());
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(v["drift"]["finishReason"]["b"], "max-steps");
        assert_eq!(v["divergedAt"], Value::Null);
        let back: Comparison = serde_json::from_value(v).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn derived_finish_reason_of_transcripts() {
        let mut pending = trip();
        pending.truncate(2);
        let c = compare_trajectories(&trip(), &pending);
        assert_eq!(c.drift.finish_reason, Some(FinishDiff { a: Some(FinishReason::Stop), b: None }));
        assert_eq!(c.drift.step_count, Some(CountDiff { a: 2, b: 1 }));
        // Step 1 of `pending` has no result yet: it differs from the answered call.
        assert_eq!(c.diverged_at, Some(1));
    }

    #[test]
    fn compare_json_takes_checkpoints_or_transcripts_and_refuses_anything_else() {
        let mut cp = Checkpoint::new("trip");
        cp.messages = trip();
        cp.finish_reason = Some(FinishReason::MaxSteps);
        let cp_json = serde_json::to_value(&cp).unwrap();
        let mut pending = trip();
        pending.truncate(2);
        let transcript = serde_json::to_value(&pending).unwrap();
        // Each side as the typed comparison would see it: the checkpoint's recorded finish reason, the
        // transcript's derived one.
        let expected = compare_steps(
            Trajectory::of(&cp.messages),
            Trajectory::of(&pending),
            Some(FinishReason::MaxSteps),
            derived_finish_reason(&pending),
        );
        assert_eq!(compare_json(&cp_json, &transcript).unwrap(), expected);
        assert_eq!(compare_json(&cp_json, &cp_json).unwrap(), compare_checkpoints(&cp, &cp));
        let whole = serde_json::to_value(trip()).unwrap();
        assert_eq!(compare_json(&whole, &transcript).unwrap(), compare_trajectories(&trip(), &pending));
        for bad in [json!("trip"), json!(3), json!({"status": "finished"}), json!([{"role": "nobody"}])] {
            let e = compare_json(&bad, &whole).unwrap_err();
            assert_eq!(e.code, crate::core::error::ErrorCode::InvalidInput, "{bad}");
            assert!(e.message.contains("run a"), "{}", e.message);
            let e = compare_json(&whole, &bad).unwrap_err();
            assert!(e.message.contains("run b"), "{}", e.message);
        }
    }
}
