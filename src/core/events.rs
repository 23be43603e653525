//! Run events (M22). The core produces [`Event`]s; the runtime wraps each in an [`EventEnvelope`] with a
//! gapless `seq` and the schema version.

use super::checkpoint::{FinishReason, RunStatus};
use super::error::ErrorInfo;
use super::fingerprint::AgentDrift;
use super::transcript::{ResultKind, ToolCall, Usage};
use super::wait::{ResolvedBy, WaitKind};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Version of the event schema.
pub const EVENT_SCHEMA_VERSION: u32 = 1;

/// One event of a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum Event {
    /// The run started or resumed.
    #[serde(rename = "run.start")]
    RunStart {
        /// Whether a stored run was resumed (or continued).
        resumed: bool,
        /// Step count at start.
        step: u32,
    },
    /// A model turn was recorded.
    #[serde(rename = "step")]
    Step {
        /// Step number (1-based within the run).
        step: u32,
        /// The model's text.
        text: String,
        /// Tool calls asked for.
        #[serde(rename = "toolCalls")]
        tool_calls: Vec<ToolCall>,
        /// Usage of this turn.
        usage: Usage,
        /// The model that answered, when it was a fallback (not the agent's own model).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "ts", ts(optional))]
        model: Option<String>,
    },
    /// A model call's retries ran out with a retryable failure: the next model of the agent's fallback chain gets
    /// the same request (seen live; the turn it answers records it as its `model`).
    #[serde(rename = "provider.fallback")]
    ProviderFallback {
        /// The step the call is for.
        step: u32,
        /// The model that failed.
        from: String,
        /// The model that gets the request now.
        to: String,
        /// The failure's code (`STEADFAST_PROVIDER_UNAVAILABLE`, …).
        code: crate::core::error::ErrorCode,
    },
    /// A tool call started.
    #[serde(rename = "tool.start")]
    ToolStart {
        /// Call id.
        #[serde(rename = "toolCallId")]
        tool_call_id: String,
        /// Tool name.
        name: String,
        /// Arguments.
        args: Value,
    },
    /// A tool result was recorded.
    #[serde(rename = "tool.done")]
    ToolDone {
        /// Call id.
        #[serde(rename = "toolCallId")]
        tool_call_id: String,
        /// Tool name.
        name: String,
        /// Whether it failed.
        #[serde(rename = "isError")]
        is_error: bool,
        /// How the result came to be.
        kind: ResultKind,
        /// The hook that replaced the tool's output, if one did.
        #[serde(rename = "replacedBy", default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "ts", ts(optional))]
        replaced_by: Option<String>,
    },
    /// Pending calls of an interrupted turn are being resumed.
    #[serde(rename = "tool.resume")]
    ToolResume {
        /// The calls without a result.
        #[serde(rename = "toolCallIds")]
        tool_call_ids: Vec<String>,
    },
    /// The run paused on an approval.
    #[serde(rename = "approval.requested")]
    ApprovalRequested {
        /// Approval id.
        #[serde(rename = "approvalId")]
        approval_id: String,
        /// The gated call.
        #[serde(rename = "toolCall")]
        tool_call: ToolCall,
    },
    /// A tool call parked the run on a wait (a question, an event, a timer: [`crate::core::wait`]).
    #[serde(rename = "wait.start")]
    WaitStart {
        /// The wait's id (its record's).
        #[serde(rename = "waitId")]
        wait_id: String,
        /// What it waits for.
        kind: WaitKind,
        /// The call.
        #[serde(rename = "toolCallId")]
        tool_call_id: String,
        /// A question's text.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "ts", ts(optional))]
        question: Option<String>,
        /// An event's deadline or a timer's time (ms since the epoch).
        #[serde(rename = "dueAt", default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "ts", ts(type = "number", optional))]
        due_at: Option<u64>,
    },
    /// A wait was resolved; its call's result is recorded (a `tool.done` follows).
    #[serde(rename = "wait.done")]
    WaitDone {
        /// The wait's id.
        #[serde(rename = "waitId")]
        wait_id: String,
        /// The call.
        #[serde(rename = "toolCallId")]
        tool_call_id: String,
        /// How it was resolved.
        by: ResolvedBy,
    },
    /// A message queued for the run ([`crate::core::steer`]) was applied: it goes after the current turn's
    /// results; the calls it stopped before they started are named (each has a `not-run` result).
    #[serde(rename = "message.applied")]
    MessageApplied {
        /// The queued message's id.
        #[serde(rename = "messageId")]
        message_id: String,
        /// The calls it stopped.
        #[serde(rename = "stoppedToolCallIds", default, skip_serializing_if = "Vec::is_empty")]
        stopped_tool_call_ids: Vec<String>,
    },
    /// The conversation was handed to another agent of the run's team (its `transfer_to_<to>` call): the next
    /// model turn is that agent's.
    #[serde(rename = "handoff")]
    Handoff {
        /// The `transfer_to_<to>` call.
        #[serde(rename = "toolCallId")]
        tool_call_id: String,
        /// The agent that has the conversation now.
        to: String,
    },
    /// The resuming agent differs from the checkpoint's.
    #[serde(rename = "agent.drift")]
    AgentDrift(AgentDrift),
    /// A self-healing action (hint, denial, stop).
    #[serde(rename = "heal.action")]
    HealAction {
        /// Tool name.
        tool: String,
        /// Call id.
        #[serde(rename = "toolCallId")]
        tool_call_id: String,
        /// `hint`, `deny` or `stop`.
        action: String,
        /// Why.
        reason: String,
        /// How many times so far.
        count: u32,
    },
    /// More of the model's text while the provider streams its answer. Not recorded: the `step` event and the
    /// journal carry the completed turn only (a crash mid-stream asks the model again). A retried model call
    /// streams again from the start under a higher `attempt`.
    #[serde(rename = "text.delta")]
    TextDelta {
        /// The step the answer will be.
        step: u32,
        /// The model call's attempt (1-based): deltas of an earlier attempt are void.
        attempt: u32,
        /// The increment.
        text: String,
    },
    /// More of the model's reasoning (thinking) while the provider streams it; like `text.delta`.
    #[serde(rename = "reasoning.delta")]
    ReasoningDelta {
        /// The step the answer will be.
        step: u32,
        /// The model call's attempt (1-based).
        attempt: u32,
        /// The increment.
        text: String,
    },
    /// The run ended, paused or was aborted.
    #[serde(rename = "run.done")]
    RunDone {
        /// Status after this attempt.
        status: RunStatus,
        /// Why it ended.
        #[serde(rename = "finishReason", skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "ts", ts(optional))]
        finish_reason: Option<FinishReason>,
        /// Steps taken by the run.
        steps: u32,
        /// The run's storage usage as its journal records it (see `Checkpoint::storage`); left out when none
        /// was counted (a store that does not count: the memory store).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "ts", ts(optional))]
        storage: Option<crate::core::cost::StorageUsage>,
    },
    /// A watcher asked for events the journal no longer holds (it keeps a run's newest states, see
    /// [`crate::store::JournalOptions::history_limit`]): the entries after `after` up to `until` cannot be
    /// replayed; the events from `until` on follow. The run's state (`GET /runs/{id}`) has what they recorded.
    #[serde(rename = "replay.gap")]
    ReplayGap {
        /// The position the watcher had seen through.
        #[cfg_attr(feature = "ts", ts(type = "number"))]
        after: u64,
        /// The oldest position the journal still holds (its events are not replayed either).
        #[cfg_attr(feature = "ts", ts(type = "number"))]
        until: u64,
    },
    /// The attempt failed.
    #[serde(rename = "error")]
    Error {
        /// The error.
        error: ErrorInfo,
    },
}

/// A self-healing action as the run records it (its `heal.action` event, with the step and time): kept in the
/// checkpoint's hook state under [`HEAL_LOG_KEY`], the newest [`HEAL_LOG_MAX`], so the actions outlive the
/// execution that took them (`RunView.healActions`, the console's timeline).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase")]
pub struct HealRecord {
    /// Tool name.
    pub tool: String,
    /// Call id.
    pub tool_call_id: String,
    /// `hint`, `deny` or `stop`.
    pub action: String,
    /// Why.
    pub reason: String,
    /// How many times so far.
    pub count: u32,
    /// The step (model turns so far) when it was taken.
    pub step: u32,
    /// When (ms since the epoch).
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    pub at: u64,
}

/// Where the heal log is kept in a checkpoint's hook state (`ext`), written by the runtime.
pub const HEAL_LOG_KEY: &str = "healLog";

/// How many heal records a run keeps (the newest).
pub const HEAL_LOG_MAX: usize = 50;

impl HealRecord {
    /// The record of a `heal.action` event taken at `step` and `at`; `None` for any other event.
    pub fn of(event: &Event, step: u32, at: u64) -> Option<HealRecord> {
        match event {
            Event::HealAction { tool, tool_call_id, action, reason, count } => Some(HealRecord {
                tool: tool.clone(),
                tool_call_id: tool_call_id.clone(),
                action: action.clone(),
                reason: reason.clone(),
                count: *count,
                step,
                at,
            }),
            _ => None,
        }
    }

    /// The heal log of a checkpoint's hook state (empty when there is none, or it cannot be read: an entry of
    /// it is not a record).
    pub fn log(ext: Option<&Value>) -> Vec<HealRecord> {
        let Some(Value::Array(items)) = ext.and_then(|e| e.get(HEAL_LOG_KEY)) else {
            return Vec::new();
        };
        let mut log = Vec::with_capacity(items.len());
        for item in items {
            match HealRecord::read(item) {
                Some(r) => log.push(r),
                None => return Vec::new(),
            }
        }
        log
    }

    /// A record from a JSON value, read by hand as the derive read it (the Worker's size: serde's reader over JSON
    /// values for this one use): an object with every field (others ignored), or an array of the fields in their
    /// declared order; the texts strings, `count` and `step` whole numbers that fit in 32 bits, `at` in 64.
    fn read(v: &Value) -> Option<HealRecord> {
        const FIELDS: [&str; 7] = ["tool", "toolCallId", "action", "reason", "count", "step", "at"];
        let mut f: [&Value; 7] = [&Value::Null; 7];
        match v {
            Value::Object(m) => {
                for (slot, name) in f.iter_mut().zip(FIELDS) {
                    *slot = m.get(name)?;
                }
            }
            Value::Array(a) if a.len() == FIELDS.len() => {
                for (slot, item) in f.iter_mut().zip(a) {
                    *slot = item;
                }
            }
            _ => return None,
        }
        let text = |i: usize| f[i].as_str().map(str::to_string);
        let small = |i: usize| f[i].as_u64().and_then(|n| u32::try_from(n).ok());
        Some(HealRecord {
            tool: text(0)?,
            tool_call_id: text(1)?,
            action: text(2)?,
            reason: text(3)?,
            count: small(4)?,
            step: small(5)?,
            at: f[6].as_u64()?,
        })
    }
}

/// An increment of a model turn while the provider streams it (see [`Event::TextDelta`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamDelta {
    /// More of the turn's text.
    Text(String),
    /// More of the model's reasoning (thinking), where the provider streams it.
    Reasoning(String),
}

impl StreamDelta {
    /// The event that carries this increment of step `step`'s model call, attempt `attempt`.
    pub fn event(self, step: u32, attempt: u32) -> Event {
        match self {
            StreamDelta::Text(text) => Event::TextDelta { step, attempt, text },
            StreamDelta::Reasoning(text) => Event::ReasoningDelta { step, attempt, text },
        }
    }
}

/// Where an event of a sub-agent's child run comes from (the envelope's `subagent`): the sub-agent, how deep
/// its child run is below the top lead (1 for the lead's own sub-agents), the run that called it and, when that
/// run's call is what executes the child here, the call. A child's events keep their own `runId` and `seq`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase")]
pub struct SubagentTag {
    /// The sub-agent (its tool name in the calling run).
    pub name: String,
    /// Sub-agent levels below the top run.
    pub depth: u32,
    /// The run that called the sub-agent.
    pub parent: String,
    /// The parent's tool call that executes the child (absent when the child executes on its own: an approval
    /// of the child resolved, the recovery sweep).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub tool_call_id: Option<String>,
}

/// An event as delivered: `{v, seq, runId, at, type, ...}`, and `subagent` on a child run's events.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase")]
pub struct EventEnvelope {
    /// Schema version.
    pub v: u32,
    /// Gapless sequence number within one event stream (an execution's, or one watcher's), from 0. Where a
    /// stream resumes is the journal position, not the `seq` (see [`crate::core::replay::Cursor`]).
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    pub seq: u64,
    /// Run id.
    pub run_id: String,
    /// Time (ms since the epoch).
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    pub at: u64,
    /// The sub-agent whose child run this event is of (events of a child run reach its lead's event sinks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub subagent: Option<SubagentTag>,
    /// The event.
    #[serde(flatten)]
    pub event: Event,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_json_shape() {
        let env = EventEnvelope {
            v: EVENT_SCHEMA_VERSION,
            seq: 3,
            run_id: "r".into(),
            at: 5,
            subagent: None,
            event: Event::RunDone {
                status: RunStatus::Finished,
                finish_reason: Some(FinishReason::Stop),
                steps: 2,
                storage: None,
            },
        };
        let v = serde_json::to_value(&env).unwrap();
        assert_eq!(v["type"], "run.done");
        assert_eq!(v["seq"], 3);
        assert_eq!(v["v"], 1);
        assert_eq!(v["status"], "finished");
        assert_eq!(v["finishReason"], "stop");
        let back: EventEnvelope = serde_json::from_value(v).unwrap();
        assert_eq!(back, env);
    }

    /// The heal log's reader reads what the derive read from a JSON value (all the records, or none).
    #[test]
    fn the_heal_log_reader_reads_what_the_derive_read() {
        let good = r#"{"tool":"t","toolCallId":"c","action":"hint","reason":"r","count":2,"step":3,"at":4}"#;
        let values = [
            good,
            r#"["t","c","deny","r",1,2,3]"#,
            r#"["t","c","deny","r",1,2]"#,
            r#"["t","c","deny","r",1,2,3,4]"#,
            r#"{"tool":"t","toolCallId":"c","action":"hint","reason":"r","count":2,"step":3,"at":4,"zz":[1]}"#,
            r#"{"tool":"t","toolCallId":"c","action":"hint","reason":"r","count":2,"step":3}"#,
            r#"{"tool":5,"toolCallId":"c","action":"hint","reason":"r","count":2,"step":3,"at":4}"#,
            r#"{"tool":"t","toolCallId":"c","action":"hint","reason":"r","count":4294967296,"step":3,"at":4}"#,
            r#"{"tool":"t","toolCallId":"c","action":"hint","reason":"r","count":4294967295,"step":0,"at":4}"#,
            r#"{"tool":"t","toolCallId":"c","action":"hint","reason":"r","count":-1,"step":3,"at":4}"#,
            r#"{"tool":"t","toolCallId":"c","action":"hint","reason":"r","count":1.0,"step":3,"at":4}"#,
            r#"{"tool":"t","toolCallId":"c","action":"hint","reason":"r","count":1,"step":3,"at":18446744073709551615}"#,
            r#"{"tool":"t","toolCallId":"c","action":"hint","reason":"r","count":1,"step":3,"at":null}"#,
            r#"{"tool":"t","toolCallId":null,"action":"hint","reason":"r","count":1,"step":3,"at":1}"#,
            r#"["t","c","deny","r",1,"2",3]"#,
            r#"[]"#,
            r#"{}"#,
            "null",
            "7",
            r#""t""#,
        ];
        let mut logs: Vec<String> = vec!["null".into(), "[]".into(), "{}".into(), r#""x""#.into(), "5".into()];
        for a in values {
            logs.push(format!("[{a}]"));
            for b in values {
                logs.push(format!("[{a},{b}]"));
            }
        }
        let mut read = 0;
        for log in &logs {
            let v: Value = serde_json::from_str(log).unwrap();
            let derived: Vec<HealRecord> = serde_json::from_value(v.clone()).unwrap_or_default();
            read += derived.len();
            let ext = serde_json::json!({ HEAL_LOG_KEY: v });
            assert_eq!(HealRecord::log(Some(&ext)), derived, "{log}");
        }
        assert!(read > 40, "{read}");
        assert_eq!(HealRecord::log(None), Vec::new());
        assert_eq!(HealRecord::log(Some(&serde_json::json!([good]))), Vec::new());
        assert_eq!(HealRecord::log(Some(&serde_json::json!({"other": 1}))), Vec::new());
    }
}
