//! Hooks: code that runs around tool and model calls, in registration order.
//!
//! * `before_tool` may rewrite the arguments the tool runs with, or deny the call (the model gets a `denied`
//!   result). It runs after argument validation and before the approval gate; for a call approved by a
//!   person it runs again right before the call executes, with [`HookContext::resumed_after_approval`] set, so a
//!   stateful hook can skip counting it twice.
//! * `after_tool` may replace what the tool produced (the result is then marked `replacedBy` the hook).
//! * `before_model` / `after_model` see the transcript and may rewrite the response.
//!
//! A hook that returns an error rejects the run attempt (the checkpoint stays resumable, `lastError` is
//! recorded with the error's code and `retryable` flag). Hooks keep state in [`HookContext::state`]: it is
//! stored in the checkpoint, so a crash or a resume does not reset it.

use crate::core::error::Result;
use crate::core::events::Event;
use crate::core::machine::ModelResponse;
use crate::core::transcript::{Message, ToolCall};
use async_trait::async_trait;
use serde_json::{Map, Value};

/// What `before_tool` decides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Go on.
    Continue,
    /// Do not run the call; the model gets `denied: <reason>`.
    Deny(String),
}

/// A tool's output as `after_tool` sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolResultDraft {
    /// Text for the model.
    pub content: String,
    /// Whether it reports a failure.
    pub is_error: bool,
}

/// What a hook sees and may change besides its arguments.
pub struct HookContext<'a> {
    /// Run id.
    pub run_id: &'a str,
    /// Current step.
    pub step: u32,
    /// The call was approved by a person and this is its execution (hooks already saw it at the gate).
    pub resumed_after_approval: bool,
    pub(crate) state: &'a mut Map<String, Value>,
    pub(crate) events: &'a mut Vec<Event>,
    pub(crate) changed: &'a mut bool,
}

impl HookContext<'_> {
    /// This hook's durable state (a JSON value under `key`, `null` at first). Changes are committed with the
    /// run's next durable boundary.
    pub fn state(&mut self, key: &str) -> &mut Value {
        *self.changed = true;
        self.state.entry(key.to_string()).or_insert(Value::Null)
    }

    /// Reads this hook's durable state without marking it changed.
    pub fn peek(&self, key: &str) -> Option<&Value> {
        self.state.get(key)
    }

    /// Emits an event (e.g. `heal.action`) on the run's stream.
    pub fn emit(&mut self, event: Event) {
        self.events.push(event);
    }
}

/// A hook. Every method has a default that does nothing.
#[async_trait(?Send)]
pub trait Hook {
    /// Name (used for `replacedBy`).
    fn name(&self) -> &str;

    /// Before a tool call runs.
    async fn before_tool(&self, _ctx: &mut HookContext<'_>, _call: &mut ToolCall) -> Result<Verdict> {
        Ok(Verdict::Continue)
    }

    /// After a tool call ran (successfully or not).
    async fn after_tool(
        &self,
        _ctx: &mut HookContext<'_>,
        _call: &ToolCall,
        _result: &mut ToolResultDraft,
    ) -> Result<()> {
        Ok(())
    }

    /// Before the model is called.
    async fn before_model(&self, _ctx: &mut HookContext<'_>, _messages: &[Message]) -> Result<()> {
        Ok(())
    }

    /// After the model answered.
    async fn after_model(&self, _ctx: &mut HookContext<'_>, _response: &mut ModelResponse) -> Result<()> {
        Ok(())
    }
}
