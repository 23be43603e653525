//! The small traits the runtime is generic over: [`Model`], [`Tool`], [`EventSink`], plus the cancellation
//! handle [`AbortSignal`] and the warning callback [`Warn`]. `Clock`, `Sleep` and `Rng` live in the crate's leaf
//! modules `time` and `rng` (the store uses them too); the runtime re-exports them.

use crate::core::error::{cap_chars, Error, Result};
use crate::core::events::{EventEnvelope, StreamDelta};
use crate::core::machine::ModelResponse;
use crate::core::transcript::Message;
use crate::core::wait::WaitRequest;
use crate::core::wire::json_text;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

/// A tool as the model sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase")]
pub struct ToolSpec {
    /// Name.
    pub name: String,
    /// Description.
    pub description: String,
    /// JSON Schema of the arguments.
    pub input_schema: Value,
}

/// What a model is asked (the npm package hands a JS model this, as JSON).
#[derive(Clone, Copy, Debug, Serialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase")]
pub struct ModelRequest<'a> {
    /// Run id.
    pub run_id: &'a str,
    /// The transcript so far.
    pub messages: &'a [Message],
    /// The tools it may call.
    pub tools: &'a [ToolSpec],
    /// The step this answer will be (1-based).
    pub step: u32,
    /// The execution asking: its lease owner id, unique per execution (`send`, `resume`, a resolved approval,
    /// a sweep's resume). Within one execution the transcript only grows; a model that keeps what it already
    /// sent of a run (the npm package's) keys it by this. Never serialised (a model is not told it).
    #[serde(skip)]
    #[cfg_attr(feature = "ts", ts(skip))]
    pub execution: &'a str,
    /// The W3C `traceparent` of the call's span when the agent traces ([`super::AgentBuilder::tracing`]): an
    /// HTTP provider sends it as the `traceparent` header. Never serialised.
    #[serde(skip)]
    #[cfg_attr(feature = "ts", ts(skip))]
    pub traceparent: Option<&'a str>,
}

impl<'a> ModelRequest<'a> {
    /// A request for step `step` of run `run_id` by execution `execution` (no `traceparent`).
    pub fn new(
        run_id: &'a str,
        messages: &'a [Message],
        tools: &'a [ToolSpec],
        step: u32,
        execution: &'a str,
    ) -> ModelRequest<'a> {
        ModelRequest { run_id, messages, tools, step, execution, traceparent: None }
    }
}

/// A model provider. Implementations make exactly one attempt per call: the runtime's retry layer is the
/// only one (M15), so providers must not retry themselves.
#[async_trait(?Send)]
pub trait Model {
    /// Model id (part of the agent fingerprint).
    fn id(&self) -> &str;
    /// The dependency its calls go to, for the circuit breaker per dependency (`AgentOptions::breaker`): models
    /// of one provider share one (the HTTP providers name their endpoint's host). Default: the model id.
    fn dependency(&self) -> String {
        self.id().to_string()
    }
    /// The provider's name as the OpenTelemetry GenAI conventions spell it (`gen_ai.provider.name`: `openai`,
    /// `anthropic`, …), on the model call's span when the agent traces. Default: none (left out).
    fn provider_name(&self) -> Option<&str> {
        None
    }
    /// One attempt at the next turn. Errors carry a code, `retryable` and `retry_after_ms`.
    async fn generate(&self, request: ModelRequest<'_>) -> Result<ModelResponse>;
    /// One attempt at the next turn, handing each increment (text, reasoning) to `on_delta` as it arrives; the
    /// runtime emits them as `text.delta` / `reasoning.delta` events and records only the completed turn this
    /// returns, the same turn [`Model::generate`] would. Called instead of `generate` when someone listens to
    /// the run's events. The default streams nothing: it is `generate`.
    async fn generate_streaming(
        &self,
        request: ModelRequest<'_>,
        _on_delta: &dyn Fn(StreamDelta),
    ) -> Result<ModelResponse> {
        self.generate(request).await
    }
    /// Execution `execution` of run `run_id` ended (however it ended): a model that keeps per-execution state
    /// drops it here. Called once per execution, after its last `generate`; the default does nothing.
    fn execution_ended(&self, _run_id: &str, _execution: &str) {}
}

/// What a tool receives besides its arguments.
#[derive(Clone, Debug)]
pub struct ToolContext {
    /// Run id.
    pub run_id: String,
    /// The call id the model gave (or the runtime made up): unique within the run, not across runs (providers
    /// that omit ids make every run's first call `call_1_0`). Key effects by [`ToolContext::idempotency_key`].
    pub tool_call_id: String,
    /// The call key: 32 hex digits, unique across runs, unchanged when the same call runs again on resume (a
    /// fork's copied calls keep their source's); see [`crate::core::idempotency`].
    pub call_key: String,
    /// For an approved call, the approval id.
    pub approval_id: Option<String>,
    /// Aborted when the run is aborted.
    pub abort: AbortSignal,
    /// The token of the event wait this call may answer with ([`ToolOutput::wait`] with
    /// [`WaitRequest::Event`]): hand it to whoever will deliver the event (`POST /events/{token}`,
    /// `agent.events().deliver(token, payload)`). The same for the same call on every resume; a capability:
    /// whoever holds it may deliver.
    pub wait_token: String,
    /// The agent's clock when the call started (ms since the epoch): a timer's base.
    pub now: u64,
    /// The W3C `traceparent` of the call's span when the agent traces ([`super::AgentBuilder::tracing`]): a
    /// webhook tool sends it as the `traceparent` header.
    pub traceparent: Option<String>,
}

impl ToolContext {
    /// The key to send as `Idempotency-Key`: the approval id for an approved call, else the call key.
    pub fn idempotency_key(&self) -> &str {
        self.approval_id.as_deref().unwrap_or(&self.call_key)
    }
}

/// What a tool returns.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ToolOutput {
    /// Text the model reads (JSON values are serialised).
    pub content: String,
    /// Replaces the run's business state when set.
    pub business_state: Option<Value>,
    /// "Pending": the call waits for a person's answer, an event or a time instead of answering now
    /// ([`crate::core::wait`]); its resolution becomes the call's result (`content` and `business_state` are
    /// not used). The run pauses once no other call runs, and holds no lease while it waits.
    pub wait: Option<WaitRequest>,
    /// What producing it spent in model tokens elsewhere (a sub-agent's child run): added to the run's usage
    /// with the result, and kept on it ([`crate::core::transcript::ToolResult::usage`]).
    pub usage: Option<crate::core::transcript::Usage>,
}

impl ToolOutput {
    /// A text result.
    pub fn text(s: impl Into<String>) -> ToolOutput {
        ToolOutput { content: s.into(), ..Default::default() }
    }

    /// "Pending" on `wait` (see [`ToolOutput::wait`]).
    pub fn wait(wait: WaitRequest) -> ToolOutput {
        ToolOutput { wait: Some(wait), ..Default::default() }
    }

    /// A JSON result (strings are kept as they are).
    pub fn json(v: Value) -> ToolOutput {
        let content = match v {
            Value::String(s) => s,
            other => json_text(&other),
        };
        ToolOutput { content, ..Default::default() }
    }

    /// Also replace the run's business state.
    pub fn with_business_state(mut self, v: Value) -> ToolOutput {
        self.business_state = Some(v);
        self
    }
}

/// A tool failure.
#[derive(Clone, Debug, PartialEq)]
pub enum ToolError {
    /// A recoverable failure: the model reads `"<kind>: <message>"` as an error result.
    Failed {
        /// Error type name (e.g. `FileNotFoundError`).
        kind: String,
        /// Message (capped, no stack).
        message: String,
    },
    /// Rejects the run attempt (the checkpoint stays resumable).
    Propagate(Error),
}

impl ToolError {
    /// A recoverable failure of type `Error`.
    pub fn failed(message: impl Into<String>) -> ToolError {
        ToolError::Failed { kind: "Error".into(), message: message.into() }
    }

    /// A recoverable failure with a type name.
    pub fn typed(kind: impl Into<String>, message: impl Into<String>) -> ToolError {
        ToolError::Failed { kind: kind.into(), message: message.into() }
    }

    /// A propagating failure with code `STEADFAST_TOOL_PROPAGATED` (retryable).
    pub fn propagate(message: impl Into<String>) -> ToolError {
        ToolError::Propagate(Error::new(crate::core::error::ErrorCode::ToolPropagated, message))
    }

    /// The text the model reads for a recoverable failure.
    pub fn model_text(kind: &str, message: &str) -> String {
        cap_chars(&format!("{kind}: {message}"), 2_000)
    }
}

/// A tool.
#[async_trait(?Send)]
pub trait Tool {
    /// Name (unique within an agent).
    fn name(&self) -> &str;
    /// Description for the model.
    fn description(&self) -> &str;
    /// JSON Schema of the arguments (validated before the call runs).
    fn input_schema(&self) -> &Value;
    /// Whether this call needs a person's approval first.
    fn needs_approval(&self, _args: &Value) -> bool {
        false
    }
    /// A check of the arguments of the tool's own, after the JSON Schema's ([`Tool::input_schema`]) in the
    /// call's gate, before hooks, approval and intent (the npm package's zod and Standard Schema validators):
    /// `Err(why)` answers the call with a `validation` result the model reads (`invalid arguments for
    /// '<name>': <why>`, the same as a schema failure) and the call never runs. The default accepts.
    async fn check_args(&self, _args: &Value) -> std::result::Result<(), String> {
        Ok(())
    }
    /// Runs the call.
    async fn execute(&self, args: Value, ctx: ToolContext) -> Result<ToolOutput, ToolError>;

    /// The dependency its calls go to (a webhook's host), for the circuit breaker per dependency
    /// (`AgentOptions::breaker`); `None` (the default): its calls go through no breaker.
    fn dependency(&self) -> Option<String> {
        None
    }

    /// Whether a failed call says its [`Tool::dependency`] is down (it counts toward the breaker): a timeout, a
    /// dropped connection, a 5xx or 429 answer. Default: none does.
    fn dependency_down(&self, _err: &ToolError) -> bool {
        false
    }

    /// Whether the tool has side effects worth a ledger (M26): its intent is recorded in a checkpoint before
    /// it runs, and a resume that finds the intent without an outcome calls [`Tool::reconcile`] first.
    fn side_effecting(&self) -> bool {
        false
    }

    /// For a call whose intent was recorded but whose outcome was not (the process died in between): did the
    /// effect happen? `Ok(Some(output))` records that output as the result (the call does not run again);
    /// `Ok(None)` runs it again. `key` is the call key ([`ToolContext::call_key`]), which was the call's
    /// [`ToolContext::idempotency_key`] when it ran (intents are recorded only for calls that were not approved):
    /// look the effect up by the key `execute` used. The default says "unknown: run again".
    async fn reconcile(&self, _args: &Value, _key: &str) -> Result<Option<ToolOutput>, ToolError> {
        Ok(None)
    }
}

/// Receives run events.
pub trait EventSink {
    /// One event.
    fn emit(&self, event: &EventEnvelope);

    /// The run's journal now holds it through `position`: every recorded event emitted so far is in an entry
    /// up to there (told once the execution has the run, and after each commit). Default: nothing to do.
    fn durable(&self, _run_id: &str, _position: u64) {}

    /// An event of child run `run_id` (or one below it) that executed elsewhere ([`ChildHost`]), as the JSON of its
    /// [`EventEnvelope`], tagged already: passed on as it came (the Worker reads no event back into its type,
    /// whose reader is tens of kilobytes of wasm). Default: dropped.
    fn relay(&self, _run_id: &str, _json: &str) {}
}

/// A child run's execution that a lead's sub-agent call asks of the [`ChildHost`] where the child lives:
/// start it on `task` (or resume it, `None`), tagging its events with the lead's call, bounded by `budget_cap`,
/// its execution's span under `traceparent`. Decided by the lead's sub-agent call; the host
/// only carries it ([`Agent::execute_child`] on the other side).
///
/// [`Agent::execute_child`]: super::Agent::execute_child
#[derive(Clone, Debug, PartialEq)]
pub struct ChildExecution {
    /// The child run (`<lead>.sub-<name>-<key>`).
    pub run_id: String,
    /// The lead's call that runs it.
    pub tool_call_id: String,
    /// The task of its first execution; `None`: resume it.
    pub task: Option<String>,
    /// What its lead had left (recorded when it is created).
    pub budget_cap: Option<crate::core::budget::BudgetCap>,
    /// The W3C `traceparent` of the lead's tool span, when the lead is traced.
    pub traceparent: Option<String>,
}

/// Where a lead's sub-agent calls execute their child runs when not in the lead's own process: strict mode's
/// Worker executes each child in its own Durable Object ([`super::AgentBuilder::child_host`]). Without one a child
/// executes where its lead's call runs.
#[async_trait(?Send)]
pub trait ChildHost {
    /// Executes `call` where the child lives and answers with the status the child's execution ended on (`None`:
    /// it executed nothing, as [`super::Agent::resume`] of a run it could not take). Its events, and its own
    /// children's, come to `relay` ([`EventSink::relay`]) as they happen. A host that cannot tell how the
    /// execution ended fails retryably: the lead's attempt is retried and reads the child.
    async fn execute(
        &self,
        call: &ChildExecution,
        relay: Option<Rc<dyn EventSink>>,
    ) -> crate::core::error::Result<Option<crate::core::checkpoint::RunStatus>>;
}

impl<F: Fn(&EventEnvelope)> EventSink for F {
    fn emit(&self, event: &EventEnvelope) {
        self(event)
    }
}

/// The event sink of an execution of run `run_id`: `sink` itself, or for a child run, `sink` with every event
/// tagged with its sub-agent ([`crate::core::events::SubagentTag`]; `call`: the parent's call executing it, when one is).
pub(crate) fn tagged(sink: Rc<dyn EventSink>, run_id: &str, call: Option<&str>) -> Rc<dyn EventSink> {
    match crate::core::ids::subagent_parent(run_id) {
        None => sink,
        Some((parent, name)) => {
            let depth = u32::try_from(crate::core::ids::subagent_path(run_id).len()).unwrap_or(u32::MAX);
            let tag = crate::core::events::SubagentTag {
                name: name.into(),
                depth,
                parent: parent.into(),
                tool_call_id: call.map(Into::into),
            };
            Rc::new(Tagged { tag, sink })
        }
    }
}

/// A child run's event sink: its lead's, with the sub-agent named on each event.
struct Tagged {
    tag: crate::core::events::SubagentTag,
    sink: Rc<dyn EventSink>,
}

impl EventSink for Tagged {
    fn emit(&self, event: &EventEnvelope) {
        let mut event = event.clone();
        event.subagent = Some(self.tag.clone());
        self.sink.emit(&event);
    }

    fn durable(&self, run_id: &str, position: u64) {
        self.sink.durable(run_id, position);
    }

    fn relay(&self, run_id: &str, json: &str) {
        // Tagged where it executed.
        self.sink.relay(run_id, json);
    }
}

/// Two sinks as one (the caller's and the agent's observer).
pub(crate) struct Tee(pub Rc<dyn EventSink>, pub Rc<dyn EventSink>);

impl EventSink for Tee {
    fn emit(&self, event: &EventEnvelope) {
        self.0.emit(event);
        self.1.emit(event);
    }

    fn durable(&self, run_id: &str, position: u64) {
        self.0.durable(run_id, position);
        self.1.durable(run_id, position);
    }

    fn relay(&self, run_id: &str, json: &str) {
        self.0.relay(run_id, json);
        self.1.relay(run_id, json);
    }
}

/// Where an agent writes operator warnings, one line each (see [`super::AgentBuilder::warn`]).
pub type Warn = Rc<dyn Fn(&str)>;

/// An [`EventSink`] that keeps every event (for tests and buffering).
#[derive(Clone, Default)]
pub struct VecSink(Rc<RefCell<Vec<EventEnvelope>>>);

impl VecSink {
    /// A new empty sink.
    pub fn new() -> VecSink {
        VecSink::default()
    }

    /// The events so far.
    pub fn events(&self) -> Vec<EventEnvelope> {
        self.0.borrow().clone()
    }
}

impl EventSink for VecSink {
    fn emit(&self, event: &EventEnvelope) {
        self.0.borrow_mut().push(event.clone());
    }
}

#[derive(Default, Debug)]
struct AbortState {
    aborted: Cell<bool>,
    wakers: RefCell<Vec<Waker>>,
}

/// A cancellation handle: clone it, give one clone to the run, call [`AbortSignal::abort`] on another.
#[derive(Clone, Default, Debug)]
pub struct AbortSignal(Rc<AbortState>);

impl AbortSignal {
    /// A new, not aborted signal.
    pub fn new() -> AbortSignal {
        AbortSignal::default()
    }

    /// Aborts: wakes everything waiting on it.
    pub fn abort(&self) {
        self.0.aborted.set(true);
        for w in self.0.wakers.borrow_mut().drain(..) {
            w.wake();
        }
    }

    /// Whether it was aborted.
    pub fn is_aborted(&self) -> bool {
        self.0.aborted.get()
    }

    /// Ready once aborted.
    pub fn poll_aborted(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.0.aborted.get() {
            return Poll::Ready(());
        }
        let mut wakers = self.0.wakers.borrow_mut();
        if !wakers.iter().any(|w| w.will_wake(cx.waker())) {
            wakers.push(cx.waker().clone());
        }
        Poll::Pending
    }

    /// A future that resolves once aborted.
    pub fn aborted(&self) -> impl Future<Output = ()> + '_ {
        futures::future::poll_fn(move |cx| self.poll_aborted(cx))
    }
}

/// A boxed local future.
pub type LocalFuture<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;
