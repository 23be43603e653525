//! The built-in tools that wait ([`crate::core::wait`]), opted into per agent with
//! [`AgentOptions::wait_tools`](super::AgentOptions::wait_tools): `ask_question` (a person's answer becomes the
//! result), `sleep_for` and `sleep_until` (the run parks and is woken at the time).

use super::tools::FnTool;
use super::traits::{Tool, ToolError, ToolOutput};
use crate::core::wait::WaitRequest;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::rc::Rc;

/// Longest sleep a model may ask for (ms): a year.
pub const MAX_SLEEP_MS: u64 = 366 * 24 * 3_600_000;

/// A tool's JSON Schema from its text (parsed once, when the agent is built: smaller code than `json!`).
fn schema(text: &str) -> Value {
    // Ignored (no else): the texts are this file's own, valid JSON (a test builds every tool).
    serde_json::from_str(text).unwrap_or_default()
}

/// A built-in waiting tool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "snake_case")]
pub enum WaitTool {
    /// `ask_question {question, choices?}`: ask a person; the answer is the result.
    AskQuestion,
    /// `sleep_for {seconds}`: wake after that long.
    SleepFor,
    /// `sleep_until {at}`: wake at an RFC 3339 time or ms since the epoch.
    SleepUntil,
}

impl WaitTool {
    /// The tool's name.
    pub fn name(self) -> &'static str {
        match self {
            WaitTool::AskQuestion => "ask_question",
            WaitTool::SleepFor => "sleep_for",
            WaitTool::SleepUntil => "sleep_until",
        }
    }

    /// The tool.
    pub fn tool(self) -> Rc<dyn Tool> {
        Rc::new(match self {
            WaitTool::AskQuestion => FnTool::new(
                self.name(),
                "Ask a person and wait for the answer (the result); `choices` limits the answers.",
                schema(
                    r#"{"type":"object","properties":{"question":{"type":"string","minLength":1},"choices":{"type":"array","items":{"type":"string","minLength":1}}},"required":["question"],"additionalProperties":false}"#,
                ),
                |args: Value, _ctx| async move {
                    let question = args["question"].as_str().unwrap_or_default().to_string();
                    let choices = match args.get("choices") {
                        Some(Value::Array(a)) => a.iter().filter_map(|c| c.as_str().map(str::to_string)).collect(),
                        _ => Vec::new(),
                    };
                    Ok(ToolOutput::wait(WaitRequest::Question { question, choices }))
                },
            ),
            WaitTool::SleepFor => FnTool::new(
                self.name(),
                "Pause the run for some seconds.",
                schema(
                    r#"{"type":"object","properties":{"seconds":{"type":"number","minimum":0}},"required":["seconds"],"additionalProperties":false}"#,
                ),
                |args: Value, ctx| async move {
                    let seconds = args["seconds"].as_f64().unwrap_or(0.0);
                    let ms = (seconds * 1_000.0).round();
                    if !ms.is_finite() || ms < 0.0 || ms > MAX_SLEEP_MS as f64 {
                        return Err(ToolError::typed(
                            "RangeError",
                            format!("seconds must be 0 to {}", MAX_SLEEP_MS / 1_000),
                        ));
                    }
                    Ok(ToolOutput::wait(WaitRequest::Timer { at: ctx.now.saturating_add(ms as u64) }))
                },
            ),
            WaitTool::SleepUntil => FnTool::new(
                self.name(),
                "Pause the run until a time (RFC 3339 or ms since the epoch).",
                schema(
                    r#"{"type":"object","properties":{"at":{"type":["string","number"]}},"required":["at"],"additionalProperties":false}"#,
                ),
                |args: Value, ctx| async move {
                    let at = match &args["at"] {
                        Value::Number(n) => n.as_u64(),
                        Value::String(s) => crate::core::wait::parse_rfc3339_ms(s),
                        _ => None,
                    };
                    let Some(at) = at else {
                        return Err(ToolError::typed(
                            "RangeError",
                            "at must be an RFC 3339 time or ms since the epoch",
                        ));
                    };
                    if at > ctx.now.saturating_add(MAX_SLEEP_MS) {
                        return Err(ToolError::typed("RangeError", "at is more than a year away"));
                    }
                    Ok(ToolOutput::wait(WaitRequest::Timer { at }))
                },
            ),
        })
    }
}
