//! [`MockModel`]: a scripted model for tests and the offline demo.
//!
//! A script is a list of [`MockTurn`]s. In the default *sequential* mode call `n` gets turn `n`; in
//! [`MockModel::by_turn`] mode the turn is chosen by the number of assistant messages already in the
//! transcript, so a fresh mock in a "new process" continues a resumed run where it stopped. A turn is a text,
//! a reply with tool calls and usage, a scripted error (HTTP status, Retry-After) or a function of the
//! request. The mock records every call, can assert it was used up, and when the script runs out it fails
//! with `STEADFAST_MODEL_SCRIPT_EXHAUSTED` naming the call and the last message.

use super::traits::{Model, ModelRequest};
use crate::core::classify::provider_http_error;
use crate::core::error::{cap_chars, Error, ErrorCode, Result};
use crate::core::events::StreamDelta;
use crate::core::machine::ModelResponse;
use crate::core::transcript::{Message, ToolCall, Usage};
use crate::time::Sleep;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::cell::RefCell;
use std::rc::Rc;

/// A tool call in a script.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MockCall {
    /// Tool name.
    pub name: String,
    /// Arguments.
    #[serde(default)]
    pub args: Value,
}

/// A scripted error.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MockError {
    /// HTTP status to imitate (429, 500, 401, …).
    pub status: u16,
    /// Retry-After in ms.
    #[serde(default)]
    pub retry_after_ms: Option<u64>,
    /// Message.
    #[serde(default)]
    pub message: String,
}

/// One scripted answer.
#[derive(Clone)]
pub enum MockTurn {
    /// A final text answer.
    Text(String),
    /// A full reply.
    Reply {
        /// Text.
        text: String,
        /// Tool calls.
        tool_calls: Vec<MockCall>,
        /// Usage.
        usage: Usage,
        /// Simulated latency (ms), slept with the mock's [`Sleep`] if it has one.
        delay_ms: u64,
    },
    /// A failed call.
    Error(MockError),
    /// A function of the request.
    Func(Rc<dyn Fn(&ModelRequest<'_>) -> MockTurn>),
}

impl std::fmt::Debug for MockTurn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MockTurn::Text(t) => write!(f, "Text({t:?})"),
            MockTurn::Reply { text, tool_calls, .. } => write!(f, "Reply({text:?}, {tool_calls:?})"),
            MockTurn::Error(e) => write!(f, "Error({})", e.status),
            MockTurn::Func(_) => write!(f, "Func"),
        }
    }
}

impl MockTurn {
    /// A final text answer.
    pub fn text(s: impl Into<String>) -> MockTurn {
        MockTurn::Text(s.into())
    }

    /// A turn asking for tools (name, args), with default usage (10 in, 5 out).
    pub fn tools<I, S>(calls: I) -> MockTurn
    where
        I: IntoIterator<Item = (S, Value)>,
        S: Into<String>,
    {
        MockTurn::Reply {
            text: String::new(),
            tool_calls: calls.into_iter().map(|(n, a)| MockCall { name: n.into(), args: a }).collect(),
            usage: Usage::tokens(10, 5),
            delay_ms: 0,
        }
    }

    /// A scripted HTTP failure.
    pub fn error(status: u16) -> MockTurn {
        MockTurn::Error(MockError { status, retry_after_ms: None, message: format!("scripted HTTP {status}") })
    }

    /// A scripted HTTP failure with Retry-After.
    pub fn error_retry_after(status: u16, retry_after_ms: u64) -> MockTurn {
        MockTurn::Error(MockError {
            status,
            retry_after_ms: Some(retry_after_ms),
            message: format!("scripted HTTP {status}"),
        })
    }

    /// A function of the request.
    pub fn func(f: impl Fn(&ModelRequest<'_>) -> MockTurn + 'static) -> MockTurn {
        MockTurn::Func(Rc::new(f))
    }

    /// Sets the usage of a `Reply` (or turns a `Text` into a reply with this usage).
    pub fn with_usage(self, usage: Usage) -> MockTurn {
        match self {
            MockTurn::Reply { text, tool_calls, delay_ms, .. } => MockTurn::Reply { text, tool_calls, usage, delay_ms },
            MockTurn::Text(text) => MockTurn::Reply { text, tool_calls: vec![], usage, delay_ms: 0 },
            other => other,
        }
    }

    /// Sets the text of a `Reply`.
    pub fn with_text(self, t: impl Into<String>) -> MockTurn {
        match self {
            MockTurn::Reply { tool_calls, usage, delay_ms, .. } => {
                MockTurn::Reply { text: t.into(), tool_calls, usage, delay_ms }
            }
            other => other,
        }
    }
}

/// What the mock saw in one call.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordedCall {
    /// The step asked for.
    pub step: u32,
    /// Index of the turn answered (script position).
    pub turn: usize,
    /// Transcript length.
    pub message_count: usize,
    /// Last message of the transcript.
    pub last_message: Option<Message>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Sequential,
    ByTurn,
}

/// A scripted model.
#[derive(Clone)]
pub struct MockModel {
    id: String,
    script: Rc<Vec<MockTurn>>,
    mode: Mode,
    calls: Rc<RefCell<Vec<RecordedCall>>>,
    sleep: Option<Rc<dyn Sleep>>,
    streaming: bool,
}

impl MockModel {
    /// Call `n` gets `script[n]`.
    pub fn new(script: Vec<MockTurn>) -> MockModel {
        MockModel {
            id: "mock".into(),
            script: Rc::new(script),
            mode: Mode::Sequential,
            calls: Default::default(),
            sleep: None,
            streaming: false,
        }
    }

    /// A call gets `script[k]` where `k` is the number of assistant messages already in the transcript.
    pub fn by_turn(script: Vec<MockTurn>) -> MockModel {
        MockModel { mode: Mode::ByTurn, ..MockModel::new(script) }
    }

    /// Sets the model id (fingerprint).
    pub fn with_id(mut self, id: impl Into<String>) -> MockModel {
        self.id = id.into();
        self
    }

    /// Sleeps `delay_ms` of scripted replies on this timer.
    pub fn with_sleep(mut self, sleep: Rc<dyn Sleep>) -> MockModel {
        self.sleep = Some(sleep);
        self
    }

    /// Streams each answer's text word by word when someone listens to the run's events (`text.delta`).
    pub fn streaming(mut self) -> MockModel {
        self.streaming = true;
        self
    }

    /// Every call so far.
    pub fn calls(&self) -> Vec<RecordedCall> {
        self.calls.borrow().clone()
    }

    /// Number of calls so far.
    pub fn call_count(&self) -> usize {
        self.calls.borrow().len()
    }

    /// Panics unless every scripted turn was used (sequential mode) / the last turn was reached (by-turn).
    pub fn assert_used_up(&self) {
        let calls = self.calls.borrow();
        let max_turn = calls.iter().map(|c| c.turn + 1).max().unwrap_or(0);
        assert!(
            max_turn >= self.script.len(),
            "mock model: {} of {} scripted turns were used; next unused: {:?}",
            max_turn,
            self.script.len(),
            self.script.get(max_turn)
        );
    }

    fn resolve(turn: &MockTurn, req: &ModelRequest<'_>) -> MockTurn {
        match turn {
            MockTurn::Func(f) => Self::resolve(&f(req), req),
            other => other.clone(),
        }
    }
}

fn excerpt(m: Option<&Message>) -> String {
    match m {
        None => "(none)".into(),
        // Ignored: a message always serialises.
        Some(m) => cap_chars(&serde_json::to_string(m).unwrap_or_default(), 160),
    }
}

#[async_trait(?Send)]
impl Model for MockModel {
    fn id(&self) -> &str {
        &self.id
    }

    async fn generate_streaming(&self, req: ModelRequest<'_>, on_delta: &dyn Fn(StreamDelta)) -> Result<ModelResponse> {
        let answer = self.generate(req).await?;
        if self.streaming {
            for word in answer.text.split_inclusive(' ') {
                on_delta(StreamDelta::Text(word.to_string()));
            }
        }
        Ok(answer)
    }

    async fn generate(&self, req: ModelRequest<'_>) -> Result<ModelResponse> {
        let index = match self.mode {
            Mode::Sequential => self.calls.borrow().len(),
            Mode::ByTurn => req.messages.iter().filter(|m| matches!(m, Message::Assistant { .. })).count(),
        };
        let call_no = self.calls.borrow().len() + 1;
        self.calls.borrow_mut().push(RecordedCall {
            step: req.step,
            turn: index,
            message_count: req.messages.len(),
            last_message: req.messages.last().cloned(),
        });
        let Some(turn) = self.script.get(index) else {
            return Err(Error::new(
                ErrorCode::ModelScriptExhausted,
                format!(
                    "mock model script ran out: call #{call_no} (step {}) wants turn {} but the script has {}; last message: {}",
                    req.step,
                    index + 1,
                    self.script.len(),
                    excerpt(req.messages.last())
                ),
            )
            .with_run(req.run_id));
        };
        match Self::resolve(turn, &req) {
            MockTurn::Text(text) => Ok(ModelResponse {
                text,
                tool_calls: vec![],
                usage: Usage::tokens(10, 5),
                stop_reason: Some("stop".into()),
                reasoning: Vec::new(),
            }),
            MockTurn::Reply { text, tool_calls, usage, delay_ms } => {
                if delay_ms > 0 {
                    if let Some(s) = &self.sleep {
                        s.sleep(delay_ms).await;
                    }
                }
                let tool_calls: Vec<ToolCall> = tool_calls
                    .into_iter()
                    .enumerate()
                    .map(|(i, c)| ToolCall {
                        id: format!("call_{index}_{i}"),
                        name: c.name,
                        args: c.args,
                        invalid: None,
                    })
                    .collect();
                let stop = if tool_calls.is_empty() { "stop" } else { "tool_calls" };
                Ok(ModelResponse { text, tool_calls, usage, stop_reason: Some(stop.into()), reasoning: Vec::new() })
            }
            MockTurn::Error(e) => {
                // Seconds as decimal text, without float formatting (it would add ~5 KB gzip to the Worker).
                let retry_after = e.retry_after_ms.map(|ms| {
                    let frac = format!("{:03}", ms % 1000);
                    match frac.trim_end_matches('0') {
                        "" => (ms / 1000).to_string(),
                        f => format!("{}.{f}", ms / 1000),
                    }
                });
                Err(provider_http_error(e.status, retry_after.as_deref(), &e.message).with_run(req.run_id))
            }
            MockTurn::Func(_) => unreachable!("resolved above"),
        }
    }
}
