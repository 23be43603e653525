//! Transcript types: messages, tool calls, tool results, usage.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One tool call asked for by the model.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
pub struct ToolCall {
    /// Call id, unique within the run (the idempotency key handed to the tool).
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Arguments (JSON).
    #[serde(default)]
    pub args: Value,
    /// Why the arguments cannot be used, when the runtime found them unusable (nested deeper than the checkpoint
    /// accepts, …): the call is answered with a `validation` result and never runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub invalid: Option<String>,
}

/// How a tool result came to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "kebab-case")]
pub enum ResultKind {
    /// The tool ran (successfully or not).
    Execution,
    /// The arguments failed validation, or the tool is unknown; the tool did not run.
    Validation,
    /// A hook or guard denied the call; the tool did not run.
    Denied,
    /// A reviewer rejected the call; the tool did not run.
    Rejected,
    /// The call was never run (e.g. a legacy snapshot without the remaining calls).
    NotRun,
    /// The run was aborted before the call finished.
    Cancelled,
    /// The process died while the (approved) call ran; it may or may not have taken effect.
    Interrupted,
}

/// A tool result as recorded in the transcript.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase")]
pub struct ToolResult {
    /// The call this answers.
    pub tool_call_id: String,
    /// The tool's name (providers need it).
    pub name: String,
    /// Text the model reads.
    pub content: String,
    /// Whether the result reports a failure.
    #[serde(default)]
    pub is_error: bool,
    /// How the result came to be.
    pub kind: ResultKind,
    /// What a sub-agent spent for this call (its child run's usage), counted in this run's usage when the result
    /// was recorded. Absent for every other tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub usage: Option<Usage>,
}

/// A transcript message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum Message {
    /// System prompt.
    System {
        /// Text.
        content: String,
    },
    /// User turn.
    User {
        /// Text.
        content: String,
    },
    /// Model turn, possibly asking for tools.
    Assistant {
        /// Text.
        #[serde(default)]
        content: String,
        /// Tool calls, in the order the model gave them.
        #[serde(default, rename = "toolCalls", skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
        /// Reasoning blocks the model produced before its text and calls, exactly as the provider sent them
        /// (Anthropic `{"type": "thinking", thinking, signature}` and `{"type": "redacted_thinking", data}`):
        /// sent back unchanged to that provider, which checks the signature and refuses a tool-use turn whose
        /// thinking was dropped or changed. Absent in transcripts written before they were kept.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        reasoning: Vec<Value>,
        /// The tokens this turn used, as its provider reported them (absent when it reported none, in
        /// transcripts written before they were kept, and in turns not made by a model call).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "ts", ts(optional))]
        usage: Option<Usage>,
    },
    /// A tool result.
    Tool(ToolResult),
}

impl Message {
    /// A user message.
    pub fn user(text: impl Into<String>) -> Message {
        Message::User { content: text.into() }
    }

    /// A system message.
    pub fn system(text: impl Into<String>) -> Message {
        Message::System { content: text.into() }
    }

    /// An assistant message.
    pub fn assistant(text: impl Into<String>, tool_calls: Vec<ToolCall>) -> Message {
        Message::Assistant { content: text.into(), tool_calls, reasoning: Vec::new(), usage: None }
    }

    /// Whether this is a system message.
    pub fn is_system(&self) -> bool {
        matches!(self, Message::System { .. })
    }

    /// Whether `other` is the same message, its recorded usage aside (a client re-sending a transcript may not
    /// echo the usage a model turn recorded).
    pub fn same_as(&self, other: &Message) -> bool {
        match (self, other) {
            (
                Message::Assistant { content, tool_calls, reasoning, .. },
                Message::Assistant { content: c, tool_calls: t, reasoning: r, .. },
            ) => content == c && tool_calls == t && reasoning == r,
            _ => self == other,
        }
    }

    /// The tool calls of an assistant message (empty otherwise).
    pub fn tool_calls(&self) -> &[ToolCall] {
        match self {
            Message::Assistant { tool_calls, .. } => tool_calls,
            _ => &[],
        }
    }
}

/// Token usage totals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    /// Prompt tokens.
    #[serde(default)]
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    pub input_tokens: u64,
    /// Completion tokens.
    #[serde(default)]
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    pub output_tokens: u64,
}

impl Usage {
    /// Adds another usage.
    pub fn add(&mut self, other: Usage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
    }

    /// Raises each count to at least `other`'s.
    pub fn at_least(&mut self, other: Usage) {
        self.input_tokens = self.input_tokens.max(other.input_tokens);
        self.output_tokens = self.output_tokens.max(other.output_tokens);
    }

    /// Sum of both.
    pub fn total(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }
}

/// Checks that a transcript is valid for every provider: each assistant turn with tool calls is followed
/// directly by exactly one result per call, in call order, before any other message; no result without a
/// call; call ids are unique. Returns a description of the first violation.
pub fn validate_transcript(messages: &[Message]) -> Result<(), String> {
    let mut seen_ids = std::collections::HashSet::new();
    let mut i = 0;
    while i < messages.len() {
        match &messages[i] {
            Message::Assistant { tool_calls, .. } if !tool_calls.is_empty() => {
                for (k, call) in tool_calls.iter().enumerate() {
                    if !seen_ids.insert(call.id.as_str()) {
                        return Err(format!("duplicate tool call id {:?} at message {i}", call.id));
                    }
                    match messages.get(i + 1 + k) {
                        Some(Message::Tool(r)) if r.tool_call_id == call.id => {}
                        // The last turn may still be waiting for results (an unfinished run).
                        None => return Ok(()),
                        other => {
                            return Err(format!(
                                "call {:?} at message {i} is not answered in order (found {:?})",
                                call.id,
                                other.map(role_of)
                            ))
                        }
                    }
                }
                i += 1 + tool_calls.len();
            }
            Message::Tool(r) => return Err(format!("result for {:?} at message {i} has no call", r.tool_call_id)),
            _ => i += 1,
        }
    }
    Ok(())
}

fn role_of(m: &Message) -> &'static str {
    match m {
        Message::System { .. } => "system",
        Message::User { .. } => "user",
        Message::Assistant { .. } => "assistant",
        Message::Tool(_) => "tool",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(id: &str) -> ToolCall {
        ToolCall { id: id.into(), name: "t".into(), args: json!({}), invalid: None }
    }
    fn res(id: &str) -> Message {
        Message::Tool(ToolResult {
            tool_call_id: id.into(),
            name: "t".into(),
            content: "ok".into(),
            is_error: false,
            kind: ResultKind::Execution,
            usage: None,
        })
    }

    #[test]
    fn message_json_shape() {
        let m = Message::assistant("hi", vec![call("c1")]);
        let v = serde_json::to_value(&m).unwrap();
        assert_eq!(v, json!({"role":"assistant","content":"hi","toolCalls":[{"id":"c1","name":"t","args":{}}]}));
        let r = serde_json::to_value(res("c1")).unwrap();
        assert_eq!(r["role"], "tool");
        assert_eq!(r["toolCallId"], "c1");
        assert_eq!(r["kind"], "execution");
        let back: Message = serde_json::from_value(v).unwrap();
        assert_eq!(back, m);
    }

    #[test]
    fn transcript_validation() {
        let ok = vec![Message::user("q"), Message::assistant("", vec![call("a"), call("b")]), res("a"), res("b")];
        assert!(validate_transcript(&ok).is_ok());
        let pending = vec![Message::user("q"), Message::assistant("", vec![call("a"), call("b")]), res("a")];
        assert!(validate_transcript(&pending).is_ok());
        let swapped = vec![Message::assistant("", vec![call("a"), call("b")]), res("b"), res("a")];
        assert!(validate_transcript(&swapped).is_err());
        let interleaved = vec![Message::assistant("", vec![call("a")]), Message::user("x"), res("a")];
        assert!(validate_transcript(&interleaved).is_err());
        let orphan = vec![Message::user("x"), res("a")];
        assert!(validate_transcript(&orphan).is_err());
        let dup =
            vec![Message::assistant("", vec![call("a")]), res("a"), Message::assistant("", vec![call("a")]), res("a")];
        assert!(validate_transcript(&dup).is_err());
    }
}
