//! The npm package's low-level API (feature `js`): [`JsAgent`] and [`JsStore`], exported with wasm-bindgen.
//!
//! Translation only, no decisions: JS models, tools and KV namespaces become [`Model`], [`Tool`] and
//! [`KvBackend`] implementations; the agent's methods return promises of JSON strings (values cross the
//! boundary as JSON text, which the platform notes measured at GB/s); errors are JS `Error`s carrying the
//! crate error's fields (`code`, `retryable`, `runId`, `approvalId`, `status`, `retryAfterMs`, `details`).
//!
//! # JS shapes
//! * model: `{id: string, generate(frameJson: string): Promise<string | null>, release?(runId: string)}`. A
//!   frame is a [`crate::runtime::ModelFrame`] (`{runId, step, reset?, base, messages, tools?}`, decided by a [`ModelFeed`]):
//!   the holder (the facade) keeps each run's messages and the tools, starts a run over on `reset`, appends
//!   otherwise, and asks its model `{runId, messages, tools, step}` with the whole transcript; it resolves
//!   `null` when it cannot apply the frame (no messages of the run, or not `base` of them; no tools), and the
//!   full transcript is sent again. `release(runId)` is called when the execution that sent the run ends (the
//!   holder drops the run's messages). The answer is a ModelResponse `{text, toolCalls: [{id?, name, args}],
//!   usage: {inputTokens, outputTokens}}` (a missing call id is generated). A rejection whose value has a
//!   numeric `.status` maps through [`provider_http_error`] (`.retryAfterMs` is honoured); one with a
//!   `STEADFAST_*` `.code` keeps that code; anything else is `STEADFAST_PROVIDER_NETWORK` (retryable).
//! * tool: `{name, description, inputSchema, needsApproval?: boolean | (argsJson) => boolean,
//!   execute(argsJson, ctxJson): Promise<any>, sideEffecting?: boolean, reconcile?(argsJson, ctxJson)}` (see
//!   `JsTool::reconcile`). `ctxJson` is a [`ToolCallContext`] (`{runId, toolCallId,
//!   approvalId, idempotencyKey}`). A string result is the text the model reads; any other value is serialised as JSON. A
//!   thrown error is an error result `"<the error's .name>: <its message>"` the model reads (`"Error: …"` for a
//!   value without a name), unless it has `.propagate === true`: then the run is rejected with
//!   `STEADFAST_TOOL_PROPAGATED` (its message; `.retryable`, default `true`), and stays resumable.
//! * clock (agent option `clock`, and `JsStore.kv`'s third argument): `{now(): number, sleep(ms): Promise<void>,
//!   cancel?(sleep)}`, read instead of `Date.now()`/`setTimeout` (see `JsObjClock`).
//! * recovery listener (`recover`): see `JsListener`.
//! * hook: `{type: "progressGuard", hintAfter?, denyAfter?, maxDenials?}` (a [`ProgressGuard`]) or
//!   `{type: "outputCheck", name, check(callJson, output): string | null | undefined}` (an [`OutputCheck`]; `check`
//!   is called synchronously with the call's JSON `{id, name, args}` and the tool's text: a string is the failure
//!   reason, `null`/`undefined` passes, a throw is the reason `"check threw: <message>"`).
//! * KV namespace: a Workers `KVNamespace` (`get`, `put`, `delete`, `list`). Bulk reads use `get(keys[])`,
//!   which resolves to a `Map` (one KV operation for up to 100 keys).
//!
//! **Caution:** tools that run again on resume must be idempotent: use `ctx.idempotencyKey`.

use crate::core::classify::provider_http_error;
use crate::core::error::{Error, ErrorCode, Result};
use crate::core::events::{EventEnvelope, StreamDelta};
use crate::core::machine::ModelResponse;
use crate::core::schedule::{compile_all, CompiledSchedule, Schedule};
use crate::core::sweep::SweepOptions;
use crate::core::trajectory::compare_json;
use crate::core::transcript::{Message, ToolCall};
use crate::front::contract::{NothingToResume, SendRequest, ToolCallContext};
use crate::front::durable_sql::{Sql, SqlIndex, SqlRuns};
use crate::front::wasm_shared::{
    absent, call_async, from_value, js_message, js_rng, method, prop, set, settle, to_value, JsClock, JsSleep,
    WorkersKv,
};
use crate::runtime::{
    AbortSignal, Agent, AgentBuilder, AgentOptions, Clock, EventSink, ForkOptions, Hook, HookContext, Input, Model,
    ModelFeed, ModelRequest, NoListener, OutputCheck, ProgressGuard, ProgressGuardOptions, Resolve, RunResult,
    ScheduleOutcome, SendOptions, SessionForkOptions, Sleep, SweepListener, Tool, ToolContext, ToolError, ToolOutput,
    ToolResultDraft, VecSink, Verdict,
};
use crate::store::object::ObjectStore;
use crate::store::{JournalOptions, JournalStore, MemoryStore, PendingRun, RunStore};
use async_trait::async_trait;
use js_sys::{Array, Function, Promise};
use serde::Serialize;
use serde_json::Value;
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::rc::Rc;
use wasm_bindgen::closure::Closure;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::future_to_promise;

// ---------------------------------------------------------------------------------------------------------
// Small helpers (the JS ones are in crate::front::wasm_shared).

fn encode<T: Serialize>(v: &T) -> Result<String> {
    serde_json::to_string(v).map_err(|e| Error::internal(format!("cannot encode: {e}")))
}

/// Parses an optional JSON argument (`None`, empty or `null` give the default).
fn decode_opt<T: serde::de::DeserializeOwned + Default>(json: Option<String>, what: &str) -> Result<T> {
    match json.as_deref().map(str::trim) {
        None | Some("") | Some("null") | Some("undefined") => Ok(T::default()),
        Some(s) => serde_json::from_str(s).map_err(|e| Error::invalid_input(format!("invalid {what}: {e}"))),
    }
}

/// The JS `Error` thrown for a crate error: `message`, and the fields `code`, `retryable`, `runId`,
/// `approvalId`, `status`, `retryAfterMs`, `details`.
fn js_error(e: &Error) -> JsValue {
    let err: JsValue = js_sys::Error::new(&e.message).into();
    set(&err, "name", &JsValue::from_str("SteadfastError"));
    set(&err, "code", &JsValue::from_str(e.code.as_str()));
    set(&err, "retryable", &JsValue::from_bool(e.retryable));
    if let Some(r) = &e.run_id {
        set(&err, "runId", &JsValue::from_str(r));
    }
    if let Some(a) = &e.approval_id {
        set(&err, "approvalId", &JsValue::from_str(a));
    }
    if let Some(s) = e.status {
        set(&err, "status", &JsValue::from_f64(f64::from(s)));
    }
    if let Some(ms) = e.retry_after_ms {
        set(&err, "retryAfterMs", &JsValue::from_f64(ms as f64));
    }
    if let Some(d) = &e.details {
        set(&err, "details", &from_value(d));
    }
    err
}

/// Runs a future to a promise of its JSON result (or a rejection with [`js_error`]).
fn promise<T: Serialize>(fut: impl Future<Output = Result<T>> + 'static) -> Promise {
    future_to_promise(async move {
        match fut.await.and_then(|v| encode(&v)) {
            Ok(s) => Ok(JsValue::from_str(&s)),
            Err(e) => Err(js_error(&e)),
        }
    })
}

// ---------------------------------------------------------------------------------------------------------
// Model.

struct JsModel {
    id: String,
    obj: JsValue,
    generate: Function,
    /// `release(runId)`, when the JS model has it.
    release: Option<Function>,
    /// What the JS side holds of each run.
    feed: RefCell<ModelFeed>,
}

impl JsModel {
    /// Sends the frame the feed decides on (with `on_delta`, the JS function a streaming model calls with
    /// `(kind, text)`); `None` when the holder could not apply it.
    async fn send_frame(&self, request: &ModelRequest<'_>, on_delta: &JsValue) -> Result<Option<JsValue>> {
        let body = encode(&self.feed.borrow_mut().frame(request))?;
        let args = Array::of2(&JsValue::from_str(&body), on_delta);
        let out = call_async(&self.generate, &self.obj, &args).await.map_err(|e| model_error(&e))?;
        Ok((!out.is_null()).then_some(out))
    }

    /// One answer: the frame, once more with the whole transcript when the holder lost it, parsed.
    async fn answer(&self, request: ModelRequest<'_>, on_delta: &JsValue) -> Result<ModelResponse> {
        let out = match self.send_frame(&request, on_delta).await? {
            Some(out) => out,
            None => {
                self.feed.borrow_mut().lost(request.run_id);
                self.send_frame(&request, on_delta).await?.ok_or_else(|| {
                    Error::new(ErrorCode::ProviderInvalidResponse, "the JS model could not apply a full transcript")
                })?
            }
        };
        let text = match out.as_string() {
            Some(s) => s,
            None => to_value(&out, "the model's answer")
                .map_err(|e| Error::new(ErrorCode::ProviderInvalidResponse, e.message))?
                .to_string(),
        };
        parse_response(&text)
    }
}

/// Increments a JS model handed over and not yet passed on, and the task to wake when one arrives.
#[derive(Default)]
struct DeltaQueue {
    deltas: Vec<StreamDelta>,
    waker: Option<std::task::Waker>,
}

/// The crate error for a rejected `generate`.
fn model_error(e: &JsValue) -> Error {
    let message = js_message(e);
    let retry_after = prop(e, "retryAfterMs").as_f64().filter(|m| m.is_finite() && *m >= 0.0).map(|m| m as u64);
    if let Some(status) = prop(e, "status").as_f64().filter(|s| (100.0..=599.0).contains(s)) {
        let err = provider_http_error(status as u16, None, &message);
        return if retry_after.is_some() { err.with_retry_after_ms(retry_after) } else { err };
    }
    if let Some(code) = prop(e, "code").as_string().and_then(|c| ErrorCode::parse(&c)) {
        let mut err = Error::new(code, message).with_retry_after_ms(retry_after);
        if let Some(r) = prop(e, "retryable").as_bool() {
            err.retryable = r;
        }
        return err;
    }
    Error::new(ErrorCode::ProviderNetwork, format!("the model call failed: {message}")).with_retry_after_ms(retry_after)
}

/// Parses a ModelResponse, giving tool calls without an id an empty one (the machine generates it).
fn parse_response(text: &str) -> Result<ModelResponse> {
    let bad = |e: String| {
        Error::new(ErrorCode::ProviderInvalidResponse, format!("the model's answer is not a ModelResponse: {e}"))
    };
    let mut v: Value = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
    if let Some(calls) = v.get_mut("toolCalls").and_then(Value::as_array_mut) {
        for c in calls.iter_mut() {
            if let Some(obj) = c.as_object_mut() {
                if !obj.get("id").is_some_and(Value::is_string) {
                    obj.insert("id".into(), Value::String(String::new()));
                }
            }
        }
    }
    serde_json::from_value(v).map_err(|e| bad(e.to_string()))
}

#[async_trait(?Send)]
impl Model for JsModel {
    fn id(&self) -> &str {
        &self.id
    }

    async fn generate(&self, request: ModelRequest<'_>) -> Result<ModelResponse> {
        self.answer(request, &JsValue::UNDEFINED).await
    }

    async fn generate_streaming(
        &self,
        request: ModelRequest<'_>,
        on_delta: &dyn Fn(StreamDelta),
    ) -> Result<ModelResponse> {
        // The JS model calls `onDelta(kind, text)` whenever it likes; the increments wait in the queue until
        // this task runs, and are passed on in order before the answer.
        let queue: Rc<RefCell<DeltaQueue>> = Rc::default();
        let into = queue.clone();
        let callback = Closure::<dyn FnMut(String, String)>::new(move |kind: String, text: String| {
            let mut q = into.borrow_mut();
            q.deltas.push(if kind == "reasoning" { StreamDelta::Reasoning(text) } else { StreamDelta::Text(text) });
            if let Some(w) = q.waker.take() {
                w.wake();
            }
        });
        let answer = self.answer(request, callback.as_ref());
        futures::pin_mut!(answer);
        futures::future::poll_fn(|cx| {
            let ready = answer.as_mut().poll(cx);
            let deltas = std::mem::take(&mut queue.borrow_mut().deltas);
            deltas.into_iter().for_each(on_delta);
            if ready.is_pending() {
                queue.borrow_mut().waker = Some(cx.waker().clone());
            }
            ready
        })
        .await
    }

    fn execution_ended(&self, run_id: &str, execution: &str) {
        if self.feed.borrow_mut().end(run_id, execution) {
            if let Some(release) = &self.release {
                // Ignored: a release that throws only leaves the run's messages held until the next reset.
                let _ = release.call1(&self.obj, &JsValue::from_str(run_id));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// Hooks.

/// What a JS output check's return value (or throw) means: a string fails with that reason, `null`/`undefined`
/// passes.
fn check_verdict(out: std::result::Result<JsValue, JsValue>) -> std::result::Result<(), String> {
    match out {
        Err(e) => Err(format!("check threw: {}", js_message(&e))),
        Ok(v) if absent(&v) => Ok(()),
        Ok(v) => match v.as_string() {
            Some(reason) => Err(reason),
            None => Err("check returned a value that is not a string (return a reason string, or null)".into()),
        },
    }
}

/// Adds the hook described by a JS descriptor (see the module docs) to the builder.
fn add_hook(b: AgentBuilder, desc: &JsValue, index: usize) -> Result<AgentBuilder> {
    let cfg = |m: String| Error::new(ErrorCode::ConfigInvalid, m);
    let kind = prop(desc, "type").as_string().ok_or_else(|| {
        cfg(format!(
            "hooks[{index}] is not a hook: use progressGuard(...), outputCheck(name, fn) or defineHook({{...}})"
        ))
    })?;
    match kind.as_str() {
        "progressGuard" => {
            let mut fields = serde_json::Map::new();
            for key in ["hintAfter", "denyAfter", "maxDenials"] {
                let v = prop(desc, key);
                if !absent(&v) {
                    fields.insert(key.into(), to_value(&v, key).map_err(|e| cfg(e.message))?);
                }
            }
            let opts: ProgressGuardOptions = serde_json::from_value(Value::Object(fields))
                .map_err(|e| cfg(format!("hooks[{index}]: invalid progressGuard options: {e}")))?;
            Ok(b.hook(ProgressGuard::new(opts)))
        }
        "outputCheck" => {
            let name = prop(desc, "name")
                .as_string()
                .filter(|n| !n.is_empty())
                .ok_or_else(|| cfg(format!("hooks[{index}]: outputCheck needs a non-empty string name")))?;
            let check = method(desc, "check", &format!("hooks[{index}] (outputCheck '{name}')"))?;
            Ok(b.hook(OutputCheck::new(name, move |call, output| {
                // Ignored: a tool call (strings and JSON values) always serialises.
                let call_json = serde_json::to_string(call).unwrap_or_else(|_| "null".into());
                check_verdict(check.call2(&JsValue::NULL, &JsValue::from_str(&call_json), &JsValue::from_str(output)))
            })))
        }
        "custom" => Ok(b.hook(JsHook::from_js(desc, index)?)),
        other => Err(cfg(format!("hooks[{index}]: unknown hook type '{other}'"))),
    }
}

/// A custom JS hook: `{type: "custom", name, beforeTool?, afterTool?, beforeModel?, afterModel?}`. Each function
/// is called with JSON (`beforeTool(callJson, ctxJson)`, `afterTool(callJson, resultJson, ctxJson)`,
/// `beforeModel(messagesJson, ctxJson)`, `afterModel(responseJson, ctxJson)`; `ctxJson` is `{runId, step,
/// resumedAfterApproval, state}`) and may answer (or resolve to) a [`HookAnswer`] JSON string or nothing. The
/// hook's durable state is the checkpoint's hook state under `hook:<name>`. A throw or rejection fails the run
/// attempt with `STEADFAST_HOOK_FAILED` (resumable), as any hook error does.
struct JsHook {
    name: String,
    key: String,
    obj: JsValue,
    before_tool: Option<Function>,
    after_tool: Option<Function>,
    before_model: Option<Function>,
    after_model: Option<Function>,
}

/// What a custom hook's function answered (every field optional).
#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct HookAnswer {
    /// The hook's new durable state (with `stateChanged`; `null` is a value).
    #[serde(default)]
    state: Value,
    #[serde(default)]
    state_changed: bool,
    /// `beforeTool`: the arguments the tool runs with instead.
    #[serde(default)]
    args: Option<Value>,
    /// `beforeTool`: deny the call with this reason.
    #[serde(default)]
    deny: Option<String>,
    /// `afterTool`: the text the model reads instead.
    #[serde(default)]
    content: Option<String>,
    /// `afterTool`: whether that text reports a failure.
    #[serde(default)]
    is_error: Option<bool>,
    /// `afterModel`: the response used instead (a ModelResponse, read as leniently as a model's).
    #[serde(default)]
    response: Option<Value>,
}

impl JsHook {
    fn from_js(desc: &JsValue, index: usize) -> Result<JsHook> {
        let cfg = |m: String| Error::new(ErrorCode::ConfigInvalid, m);
        let name = prop(desc, "name")
            .as_string()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| cfg(format!("hooks[{index}]: a custom hook needs a non-empty string name")))?;
        let f = |key: &str| -> Result<Option<Function>> {
            let v = prop(desc, key);
            if absent(&v) {
                return Ok(None);
            }
            v.dyn_into::<Function>().map(Some).map_err(|_| cfg(format!("hook '{name}': {key} must be a function")))
        };
        let hook = JsHook {
            key: format!("hook:{name}"),
            obj: desc.clone(),
            before_tool: f("beforeTool")?,
            after_tool: f("afterTool")?,
            before_model: f("beforeModel")?,
            after_model: f("afterModel")?,
            name,
        };
        if hook.before_tool.is_none()
            && hook.after_tool.is_none()
            && hook.before_model.is_none()
            && hook.after_model.is_none()
        {
            return Err(cfg(format!(
                "hook '{}' has none of beforeTool, afterTool, beforeModel, afterModel",
                hook.name
            )));
        }
        Ok(hook)
    }

    /// Calls `f` with `args` and the context JSON; applies the answer's state and returns the answer.
    async fn ask(&self, f: &Function, what: &str, args: &[String], ctx: &mut HookContext<'_>) -> Result<HookAnswer> {
        let context = serde_json::json!({
            "runId": ctx.run_id,
            "step": ctx.step,
            "resumedAfterApproval": ctx.resumed_after_approval,
            "state": ctx.peek(&self.key).cloned().unwrap_or(Value::Null),
        });
        let js_args: Array = args.iter().map(|a| JsValue::from_str(a)).collect();
        js_args.push(&JsValue::from_str(&context.to_string()));
        let failed = |m: String| Error::new(ErrorCode::HookFailed, format!("hook '{}' {what} {m}", self.name));
        let out = call_async(f, &self.obj, &js_args).await.map_err(|e| failed(format!("threw: {}", js_message(&e))))?;
        if absent(&out) {
            return Ok(HookAnswer::default());
        }
        let text = out.as_string().ok_or_else(|| failed("answered something that is not a hook answer".into()))?;
        let answer: HookAnswer =
            serde_json::from_str(&text).map_err(|e| failed(format!("answered an invalid hook answer: {e}")))?;
        if answer.state_changed {
            *ctx.state(&self.key) = answer.state.clone();
        }
        Ok(answer)
    }
}

#[async_trait(?Send)]
impl Hook for JsHook {
    fn name(&self) -> &str {
        &self.name
    }

    async fn before_tool(&self, ctx: &mut HookContext<'_>, call: &mut ToolCall) -> Result<Verdict> {
        let Some(f) = &self.before_tool else { return Ok(Verdict::Continue) };
        let answer = self.ask(f, "beforeTool", &[encode(&*call)?], ctx).await?;
        if let Some(reason) = answer.deny {
            return Ok(Verdict::Deny(reason));
        }
        if let Some(args) = answer.args {
            call.args = args;
        }
        Ok(Verdict::Continue)
    }

    async fn after_tool(&self, ctx: &mut HookContext<'_>, call: &ToolCall, result: &mut ToolResultDraft) -> Result<()> {
        let Some(f) = &self.after_tool else { return Ok(()) };
        let draft = serde_json::json!({"content": result.content, "isError": result.is_error});
        let answer = self.ask(f, "afterTool", &[encode(call)?, draft.to_string()], ctx).await?;
        if let Some(content) = answer.content {
            result.content = content;
        }
        if let Some(is_error) = answer.is_error {
            result.is_error = is_error;
        }
        Ok(())
    }

    async fn before_model(&self, ctx: &mut HookContext<'_>, messages: &[Message]) -> Result<()> {
        let Some(f) = &self.before_model else { return Ok(()) };
        self.ask(f, "beforeModel", &[encode(&messages)?], ctx).await.map(|_| ())
    }

    async fn after_model(&self, ctx: &mut HookContext<'_>, response: &mut ModelResponse) -> Result<()> {
        let Some(f) = &self.after_model else { return Ok(()) };
        let answer = self.ask(f, "afterModel", &[encode(&*response)?], ctx).await?;
        if let Some(replacement) = answer.response {
            *response = parse_response(&replacement.to_string())?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------------------
// Tools.

enum ApprovalRule {
    Never,
    Always,
    Ask(Function),
}

struct JsTool {
    name: String,
    description: String,
    schema: Value,
    approval: ApprovalRule,
    obj: JsValue,
    execute: Function,
    /// `sideEffecting: true`, or a `reconcile` function: the call's intent is recorded before it runs.
    side_effecting: bool,
    /// `reconcile(argsJson, ctxJson)`: after a call whose outcome was not recorded, did its effect happen?
    reconcile: Option<Function>,
}

impl JsTool {
    fn from_js(obj: JsValue, index: usize) -> Result<JsTool> {
        let cfg = |m: String| Error::new(ErrorCode::ConfigInvalid, m);
        let name = prop(&obj, "name").as_string().ok_or_else(|| cfg(format!("tools[{index}] has no string `name`")))?;
        let what = format!("tool '{name}'");
        let execute = method(&obj, "execute", &what)?;
        // An `Option`: a tool without a description has an empty one.
        let description = prop(&obj, "description").as_string().unwrap_or_default();
        let schema_js = prop(&obj, "inputSchema");
        let schema = if absent(&schema_js) {
            serde_json::json!({"type": "object"})
        } else {
            to_value(&schema_js, &format!("{what}'s inputSchema")).map_err(|e| cfg(e.message))?
        };
        let rule = prop(&obj, "needsApproval");
        let approval = if let Ok(f) = rule.clone().dyn_into::<Function>() {
            ApprovalRule::Ask(f)
        } else if rule.as_bool() == Some(true) {
            ApprovalRule::Always
        } else if absent(&rule) || rule.as_bool() == Some(false) {
            ApprovalRule::Never
        } else {
            return Err(cfg(format!("{what}: needsApproval must be a boolean or a function")));
        };
        let reconcile = match prop(&obj, "reconcile") {
            v if absent(&v) => None,
            v => Some(v.dyn_into::<Function>().map_err(|_| cfg(format!("{what}: reconcile must be a function")))?),
        };
        let side_effecting = match prop(&obj, "sideEffecting") {
            v if absent(&v) => reconcile.is_some(),
            v => {
                v.as_bool().ok_or_else(|| cfg(format!("{what}: sideEffecting must be a boolean")))?
                    || reconcile.is_some()
            }
        };
        Ok(JsTool { name, description, schema, approval, obj, execute, side_effecting, reconcile })
    }
}

/// What a tool's resolved value becomes.
fn tool_output(v: &JsValue) -> std::result::Result<ToolOutput, ToolError> {
    if absent(v) {
        return Ok(ToolOutput::text(""));
    }
    if let Some(s) = v.as_string() {
        return Ok(ToolOutput::text(s));
    }
    to_value(v, "the tool's result").map(ToolOutput::json).map_err(|e| ToolError::typed("TypeError", e.message))
}

/// What a tool's rejection becomes.
fn tool_error(e: &JsValue, run_id: &str) -> ToolError {
    let message = js_message(e);
    if prop(e, "propagate").as_bool() == Some(true) {
        let mut err = Error::new(ErrorCode::ToolPropagated, message).with_run(run_id);
        if let Some(r) = prop(e, "retryable").as_bool() {
            err.retryable = r;
        }
        return ToolError::Propagate(err);
    }
    let kind = prop(e, "name").as_string().filter(|n| !n.is_empty()).unwrap_or_else(|| "Error".into());
    ToolError::typed(kind, message)
}

#[async_trait(?Send)]
impl Tool for JsTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn input_schema(&self) -> &Value {
        &self.schema
    }

    fn needs_approval(&self, args: &Value) -> bool {
        match &self.approval {
            ApprovalRule::Never => false,
            ApprovalRule::Always => true,
            // A predicate that throws asks a person (the safe side).
            ApprovalRule::Ask(f) => {
                f.call1(&self.obj, &JsValue::from_str(&args.to_string())).map_or(true, |v| v.is_truthy())
            }
        }
    }

    fn side_effecting(&self) -> bool {
        self.side_effecting
    }

    /// Calls the JS `reconcile(argsJson, ctxJson)` (`ctxJson`: `{idempotencyKey}`, the key `execute` got as
    /// `ctx.idempotencyKey`): `null`/`undefined` means "no effect found, run it again"; any other value is the
    /// call's output, recorded without running it. A throw fails the resume (`STEADFAST_TOOL_PROPAGATED`,
    /// resumable).
    async fn reconcile(&self, args: &Value, key: &str) -> std::result::Result<Option<ToolOutput>, ToolError> {
        let Some(f) = &self.reconcile else { return Ok(None) };
        let ctx = serde_json::json!({ "idempotencyKey": key }).to_string();
        let js_args = Array::of2(&JsValue::from_str(&args.to_string()), &JsValue::from_str(&ctx));
        match call_async(f, &self.obj, &js_args).await {
            Ok(v) if absent(&v) => Ok(None),
            Ok(v) => tool_output(&v).map(Some),
            Err(e) => {
                let kind = prop(&e, "name").as_string().filter(|n| !n.is_empty()).unwrap_or_else(|| "Error".into());
                Err(ToolError::typed(kind, js_message(&e)))
            }
        }
    }

    async fn execute(&self, args: Value, ctx: ToolContext) -> std::result::Result<ToolOutput, ToolError> {
        let ctx_json = encode(&ToolCallContext::from(&ctx)).map_err(|e| ToolError::typed("TypeError", e.message))?;
        let js_args = Array::of2(&JsValue::from_str(&args.to_string()), &JsValue::from_str(&ctx_json));
        match call_async(&self.execute, &self.obj, &js_args).await {
            Ok(v) => tool_output(&v),
            Err(e) => Err(tool_error(&e, &ctx.run_id)),
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// Time from JS, recovery callbacks, warnings.

/// A JS clock `{now(): number, sleep(ms): Promise<void>, cancel?(sleep)}` (the package's `testClock()`, or the
/// caller's own) as the runtime's [`Clock`] and [`Sleep`]. A `now` that throws or answers something that is not
/// a finite, non-negative number later keeps the last good reading; a `sleep` that throws or rejects falls back
/// to the platform timer (never a sleep that returns at once, which would spin a waiting loop). A sleep the
/// runtime gives up on (a race it lost) is handed back to `cancel` with the promise `sleep` returned, so a
/// test clock does not move time for a timer nobody waits on.
#[derive(Clone)]
struct JsObjClock {
    obj: JsValue,
    now: Function,
    sleep: Function,
    cancel: Option<Function>,
    last: Rc<Cell<u64>>,
}

impl JsObjClock {
    /// Reads `{now, sleep, cancel?}` (`what` names the option); `now` must answer a reading at once.
    fn from_js(obj: JsValue, what: &str) -> Result<JsObjClock> {
        let now = method(&obj, "now", what)?;
        let sleep = method(&obj, "sleep", what)?;
        // Ignored (`.ok()`): a clock without `cancel` lets abandoned sleeps run out.
        let cancel = prop(&obj, "cancel").dyn_into::<Function>().ok();
        let first = now.call0(&obj).ok().and_then(|v| reading(&v)).ok_or_else(|| {
            Error::new(
                ErrorCode::ConfigInvalid,
                format!("{what}: now() must return milliseconds (a finite number >= 0)"),
            )
        })?;
        Ok(JsObjClock { obj, now, sleep, cancel, last: Rc::new(Cell::new(first)) })
    }
}

/// Hands a sleep that was not waited out back to the clock's `cancel` when dropped.
struct CancelOnDrop<'a> {
    clock: &'a JsObjClock,
    token: Option<JsValue>,
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        if let (Some(token), Some(cancel)) = (self.token.take(), &self.clock.cancel) {
            // Ignored: a cancel that throws only leaves the sleep to run out.
            let _ = cancel.call1(&self.clock.obj, &token);
        }
    }
}

/// A clock reading: a finite, non-negative number of milliseconds.
fn reading(v: &JsValue) -> Option<u64> {
    v.as_f64().filter(|n| n.is_finite() && *n >= 0.0).map(|n| n as u64)
}

impl Clock for JsObjClock {
    fn now_ms(&self) -> u64 {
        if let Some(now) = self.now.call0(&self.obj).ok().and_then(|v| reading(&v)) {
            self.last.set(now);
        }
        self.last.get()
    }
}

#[async_trait(?Send)]
impl Sleep for JsObjClock {
    async fn sleep(&self, ms: u64) {
        let Ok(pending) = self.sleep.call1(&self.obj, &JsValue::from_f64(ms as f64)) else {
            return JsSleep.sleep(ms).await;
        };
        let mut guard = CancelOnDrop { clock: self, token: Some(pending.clone()) };
        let waited = settle(pending).await;
        guard.token = None;
        if waited.is_err() {
            JsSleep.sleep(ms).await;
        }
    }
}

/// The clock of an optional JS `clock` option: the given one, else the platform's.
fn clock_of(js: &JsValue, what: &str) -> Result<(Rc<dyn Clock>, Rc<dyn Sleep>)> {
    if absent(js) {
        return Ok((Rc::new(JsClock), Rc::new(JsSleep)));
    }
    let c = JsObjClock::from_js(js.clone(), what)?;
    Ok((Rc::new(c.clone()), Rc::new(c)))
}

/// `console.warn(line)`, looked up at each call (so a host or a test that replaces it sees the line).
fn console_warn(line: &str) {
    let console = prop(&js_sys::global(), "console");
    if let Ok(warn) = prop(&console, "warn").dyn_into::<Function>() {
        // Ignored: a warning that cannot be written must not fail the run that caused it.
        let _ = warn.call1(&console, &JsValue::from_str(line));
    }
}

/// The recovery sweep's callbacks as a JS object, each optional: `onRecovered(runId, resultJson)`,
/// `onQuarantined(pendingRunJson)`, `onOutage(active)`, `onError(error, runId | undefined)` (`error` as
/// [`js_error`] makes it). A callback that throws is an error the sweep passes to `onError` and counts
/// (`STEADFAST_HOOK_FAILED`, "<callback> threw: <message>"); it never stops the loop.
struct JsListener(JsValue);

impl JsListener {
    fn call(&self, name: &str, args: &[JsValue]) -> Result<()> {
        let Ok(f) = prop(&self.0, name).dyn_into::<Function>() else { return Ok(()) };
        let args: Array = args.iter().collect();
        f.apply(&self.0, &args)
            .map(|_| ())
            .map_err(|e| Error::new(ErrorCode::HookFailed, format!("{name} threw: {}", js_message(&e))))
    }
}

impl SweepListener for JsListener {
    fn on_recovered(&self, run_id: &str, result: &RunResult) -> Result<()> {
        self.call("onRecovered", &[JsValue::from_str(run_id), JsValue::from_str(&encode(result)?)])
    }
    fn on_quarantined(&self, run: &PendingRun) -> Result<()> {
        self.call("onQuarantined", &[JsValue::from_str(&encode(run)?)])
    }
    fn on_outage(&self, active: bool) -> Result<()> {
        self.call("onOutage", &[JsValue::from_bool(active)])
    }
    fn on_error(&self, error: &Error, run_id: Option<&str>) -> Result<()> {
        let run = run_id.map_or(JsValue::UNDEFINED, JsValue::from_str);
        self.call("onError", &[js_error(error), run])
    }
}

/// Compares two runs, each a checkpoint or a transcript (JSON), without a store (synchronous): the Comparison
/// JSON. Throws `STEADFAST_INVALID_INPUT` for anything else.
#[wasm_bindgen(js_name = compareTrajectories)]
pub fn compare_trajectories(a_json: &str, b_json: &str) -> std::result::Result<String, JsValue> {
    let parse = |s: &str, which: &str| {
        serde_json::from_str::<Value>(s)
            .map_err(|e| Error::invalid_input(format!("compareTrajectories: run {which} is not JSON: {e}")))
    };
    parse(a_json, "a")
        .and_then(|a| Ok((a, parse(b_json, "b")?)))
        .and_then(|(a, b)| compare_json(&a, &b))
        .and_then(|c| encode(&c))
        .map_err(|e| js_error(&e))
}

// ---------------------------------------------------------------------------------------------------------
// Exports.

/// A run store that several [`JsAgent`]s can share: in memory, or a journal over a Workers KV namespace.
#[wasm_bindgen]
pub struct JsStore {
    store: Rc<dyn RunStore>,
}

#[wasm_bindgen]
impl JsStore {
    /// A new in-memory store (strongly consistent; lives as long as this object).
    pub fn memory() -> JsStore {
        JsStore { store: Rc::new(MemoryStore::new()) }
    }

    /// A journal store over a Workers `KVNamespace` (`get`, `put`, `delete`, `list`; bulk `get(keys[])`).
    /// `options_json` is `JournalOptions` as JSON (`{prefix, historyLimit, settleMs, …}`), optional.
    /// `clock` (optional) is a JS clock `{now, sleep}` the store reads instead of the platform's (lease settle
    /// windows, retry spacing, save times).
    pub fn kv(
        namespace: JsValue,
        options_json: Option<String>,
        clock: Option<JsValue>,
    ) -> std::result::Result<JsStore, JsValue> {
        let opts: JournalOptions = decode_opt(options_json, "KV store options").map_err(|e| js_error(&e))?;
        opts.validate().map_err(|e| js_error(&e))?;
        let (clock, sleep) =
            clock_of(&clock.unwrap_or(JsValue::UNDEFINED), "the KV store's clock").map_err(|e| js_error(&e))?;
        let kv = WorkersKv::new(namespace).map_err(|e| js_error(&e))?;
        let store = JournalStore::new(kv, clock, sleep, opts);
        Ok(JsStore { store: Rc::new(store) })
    }

    /// Strict mode's store inside an application's own SQLite-backed Durable Object: the runs' journals, leases
    /// and approvals, and their index, in tables of `storage` (the object's `ctx.storage`), with strict fencing
    /// (a stale owner's commit is refused) and no settle window. `prefix` (optional) keeps several stores apart
    /// in one object. `clock` as for [`JsStore::kv`].
    #[wasm_bindgen(js_name = durableObject)]
    pub fn durable_object(storage: JsValue, prefix: JsValue, clock: JsValue) -> std::result::Result<JsStore, JsValue> {
        let sql = Sql::new(storage);
        sql.check().map_err(|e| js_error(&e))?;
        let prefix = match prefix.as_string() {
            Some(p) => p,
            None if absent(&prefix) => String::new(),
            None => {
                let e = Error::new(ErrorCode::ConfigInvalid, "the Durable Object store's prefix must be a string");
                return Err(js_error(&e));
            }
        };
        let (clock, sleep) = clock_of(&clock, "the store's clock").map_err(|e| js_error(&e))?;
        let runs = SqlRuns::new(sql.clone(), prefix.clone());
        Ok(JsStore { store: Rc::new(ObjectStore::new(runs, SqlIndex::new(sql), prefix, clock, sleep)) })
    }

    /// `"memory"` for a new in-memory store, or a `KVNamespace` for a journal store with default options.
    #[wasm_bindgen(js_name = fromSpec)]
    pub fn from_spec(spec: JsValue) -> std::result::Result<JsStore, JsValue> {
        match spec.as_string().as_deref() {
            Some("memory") => Ok(JsStore::memory()),
            Some(other) => Err(js_error(&Error::new(
                ErrorCode::ConfigInvalid,
                format!("store {other:?} is unknown: use \"memory\" or a KV namespace"),
            ))),
            None => JsStore::kv(spec, None, None),
        }
    }
}

/// A durable agent over a JS model, JS tools and a [`JsStore`]. Every method returns a promise of a JSON
/// string and rejects with a JS `Error` carrying `code`, `retryable`, `runId`, `approvalId`.
/// Schedules whose definitions were checked (`compile_all`), for [`JsAgent::fire_schedules`] and
/// [`JsAgent::run_schedules`].
#[wasm_bindgen]
pub struct JsSchedules {
    compiled: Vec<CompiledSchedule>,
}

#[wasm_bindgen]
impl JsSchedules {
    /// Checks `schedules_json`, a JSON array of `{id, cron, input, missed?, graceMs?}`: throws
    /// `STEADFAST_SESSION_ID_INVALID` for a bad id and `STEADFAST_CONFIG_INVALID` for anything else wrong (not
    /// an array, an unknown field, a bad cron expression, an input without a user message, two schedules with
    /// one id).
    #[wasm_bindgen(constructor)]
    pub fn new(schedules_json: &str) -> std::result::Result<JsSchedules, JsValue> {
        let specs: Vec<Schedule> = serde_json::from_str(schedules_json).map_err(|e| {
            js_error(&Error::new(
                ErrorCode::ConfigInvalid,
                format!("schedules must be an array of {{id, cron, input, missed?, graceMs?}}: {e}"),
            ))
        })?;
        compile_all(specs).map(|compiled| JsSchedules { compiled }).map_err(|e| js_error(&e))
    }
}

/// A session handle's id, checked (`STEADFAST_SESSION_ID_INVALID`).
fn session_of<'a>(agent: &'a Agent, id: &str) -> Result<crate::runtime::Session<'a>> {
    agent.session(id)
}

/// A string a caller chose (an id, a note), as JS handed it. wasm-bindgen's own `String` argument reads any JS
/// value as a string's bytes (a number or an object traps, or worse), so such arguments arrive as `JsValue` and
/// are checked here: `STEADFAST_INVALID_INPUT` naming the argument when it is not a string.
fn text_arg(v: &JsValue, what: &str) -> Result<String> {
    v.as_string().ok_or_else(|| Error::invalid_input(format!("{what} must be a string, not {}", js_kind(v))))
}

/// What a JS value is, for an error message: its `typeof`, or `null`.
fn js_kind(v: &JsValue) -> String {
    if v.is_null() {
        "null".into()
    } else {
        v.js_typeof().as_string().unwrap_or_default()
    }
}

/// [`text_arg`] for an optional one (`undefined` or `null`: none).
fn opt_text_arg(v: &JsValue, what: &str) -> Result<Option<String>> {
    if absent(v) {
        Ok(None)
    } else {
        text_arg(v, what).map(Some)
    }
}

/// A number a caller chose, as JS handed it (`None`: not a number; wasm-bindgen's own `f64` argument would
/// throw an uncoded `TypeError` for a symbol or a BigInt).
fn number_arg(v: &JsValue) -> std::result::Result<f64, String> {
    v.as_f64().ok_or_else(|| js_kind(v))
}

/// A history limit from JS: absent is every turn; otherwise a whole number >= 0.
fn limit_of(limit: &JsValue) -> Result<usize> {
    if absent(limit) {
        return Ok(usize::MAX);
    }
    match number_arg(limit) {
        Ok(n) if n.is_finite() && n >= 0.0 && n.fract() == 0.0 => Ok(n as usize),
        Ok(n) => Err(Error::invalid_input(format!("limit must be a whole number >= 0, not {n}"))),
        Err(kind) => Err(Error::invalid_input(format!("limit must be a whole number >= 0, not {kind}"))),
    }
}

#[wasm_bindgen]
pub struct JsAgent {
    agent: Agent,
}

/// What the npm package asks of a run-starting call besides its input: `{events?}`.
#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CallOptions {
    /// Return the run's events in the result (`events`).
    #[serde(default)]
    events: bool,
}

impl CallOptions {
    /// The runtime options: the event sinks are a buffer (when `events`) and the JS callback `on_event`.
    fn send_options(&self, on_event: Option<Function>) -> (SendOptions, Option<VecSink>) {
        let sink = self.events.then(VecSink::new);
        let mut sinks: Vec<Rc<dyn EventSink>> = Vec::new();
        if let Some(s) = &sink {
            sinks.push(Rc::new(s.clone()));
        }
        if let Some(f) = on_event {
            sinks.push(Rc::new(JsEvents(f)));
        }
        let events: Option<Rc<dyn EventSink>> = match sinks.len() {
            0 => None,
            1 => sinks.pop(),
            _ => Some(Rc::new(FanOut(sinks))),
        };
        (SendOptions { events, ..SendOptions::default() }, sink)
    }
}

/// Calls a JS function with each event's JSON, as it happens (a throwing callback is ignored).
struct JsEvents(Function);

impl EventSink for JsEvents {
    fn emit(&self, event: &EventEnvelope) {
        // Ignored (no else): an event always serialises.
        if let Ok(json) = serde_json::to_string(event) {
            // Ignored: an event callback that throws must not stop the run (documented on `onEvent`).
            let _ = self.0.call1(&JsValue::NULL, &JsValue::from_str(&json));
        }
    }
}

/// Several sinks.
struct FanOut(Vec<Rc<dyn EventSink>>);

impl EventSink for FanOut {
    fn emit(&self, event: &EventEnvelope) {
        for s in &self.0 {
            s.emit(event);
        }
    }

    fn durable(&self, run_id: &str, position: u64) {
        for s in &self.0 {
            s.durable(run_id, position);
        }
    }
}

/// A JS `AbortSignal` linked to the run's [`AbortSignal`]; dropping it removes the listener.
struct AbortLink {
    js: JsValue,
    listener: Closure<dyn FnMut()>,
}

impl Drop for AbortLink {
    fn drop(&mut self) {
        // Ignored (no else, and the call's result): `link_abort` checked the signal has the listener methods; a
        // listener left behind only calls `abort` on a finished run, which does nothing.
        if let Ok(remove) = prop(&self.js, "removeEventListener").dyn_into::<Function>() {
            let _ = remove.call2(&self.js, &JsValue::from_str("abort"), self.listener.as_ref().unchecked_ref());
        }
    }
}

/// The run's cancellation handle for an optional JS `AbortSignal` (aborted already, or on its `abort` event).
fn link_abort(signal: Option<JsValue>) -> Result<(Option<AbortSignal>, Option<AbortLink>)> {
    let Some(js) = signal.filter(|s| !absent(s)) else {
        return Ok((None, None));
    };
    let abort = AbortSignal::new();
    if prop(&js, "aborted").as_bool() == Some(true) {
        abort.abort();
        return Ok((Some(abort), None));
    }
    let add = method(&js, "addEventListener", "the abort signal").map_err(|e| Error::invalid_input(e.message))?;
    let handle = abort.clone();
    let listener = Closure::<dyn FnMut()>::new(move || handle.abort());
    add.call2(&js, &JsValue::from_str("abort"), listener.as_ref().unchecked_ref())
        .map_err(|e| Error::invalid_input(format!("cannot listen to the abort signal: {}", js_message(&e))))?;
    Ok((Some(abort), Some(AbortLink { js, listener })))
}

/// What every run-starting call (`send`, `resume`, `runOnce`) needs: its options decoded, the event sink and the
/// abort link (keep the link alive for the whole call).
struct Prepared {
    opts: SendOptions,
    sink: Option<VecSink>,
    _link: Option<AbortLink>,
}

fn prepare(
    options_json: Option<String>,
    on_event: Option<Function>,
    signal: Option<JsValue>,
    what: &str,
) -> Result<Prepared> {
    let (abort, link) = link_abort(signal)?;
    let opts: CallOptions = decode_opt(options_json, what)?;
    let (mut send_opts, sink) = opts.send_options(on_event);
    send_opts.abort = abort;
    Ok(Prepared { opts: send_opts, sink, _link: link })
}

/// A send document ([`SendRequest`]: `{input, businessState?}`): the runtime input, with the business state
/// put into `opts`.
fn request_of(request_json: &str, opts: &mut SendOptions) -> Result<Input> {
    let (input, business_state) = SendRequest::from_json(request_json)?.into_parts()?;
    opts.business_state = business_state;
    Ok(input)
}

/// A result as JSON, with `events` added when they were asked for.
fn with_events<T: Serialize>(result: &T, sink: Option<VecSink>) -> Result<Value> {
    let mut v = serde_json::to_value(result).map_err(|e| Error::internal(format!("cannot encode: {e}")))?;
    if let (Some(sink), Some(obj)) = (sink, v.as_object_mut()) {
        let events = serde_json::to_value(sink.events()).map_err(|e| Error::internal(format!("cannot encode: {e}")))?;
        obj.insert("events".into(), events);
    }
    Ok(v)
}

#[wasm_bindgen]
impl JsAgent {
    /// Builds an agent from `{model, tools?, hooks?, instructions?, maxSteps?, toolConcurrency?, onAgentDrift?,
    /// loopWindow?, retry?, lease?, clock?}` over `store` (`clock`: a JS clock `{now, sleep}` read instead of the
    /// platform's). Warnings (a drift under `onAgentDrift: "warn"`) go to `console.warn`. Throws
    /// `STEADFAST_CONFIG_INVALID` for a bad configuration.
    #[wasm_bindgen(constructor)]
    pub fn new(options: JsValue, store: &JsStore) -> std::result::Result<JsAgent, JsValue> {
        JsAgent::build(&options, store.store.clone()).map(|agent| JsAgent { agent }).map_err(|e| js_error(&e))
    }

    fn build(options: &JsValue, store: Rc<dyn RunStore>) -> Result<Agent> {
        let cfg = |m: String| Error::new(ErrorCode::ConfigInvalid, m);
        if !options.is_object() {
            return Err(cfg("agent options must be an object".into()));
        }
        let model_js = prop(options, "model");
        let id = prop(&model_js, "id").as_string().ok_or_else(|| cfg("model needs a string `id`".into()))?;
        let generate = method(&model_js, "generate", "the model")?;
        // Ignored (`.ok()`): a model without a `release` function keeps no per-run state to drop.
        let release = prop(&model_js, "release").dyn_into::<Function>().ok();
        let model = JsModel { id, obj: model_js, generate, release, feed: RefCell::new(ModelFeed::new()) };

        let mut limits = serde_json::Map::new();
        for key in ["maxSteps", "toolConcurrency", "onAgentDrift", "loopWindow", "maxToolResultBytes", "retry", "lease"]
        {
            let v = prop(options, key);
            if !absent(&v) {
                limits.insert(key.into(), to_value(&v, key).map_err(|e| cfg(e.message))?);
            }
        }
        let agent_options: AgentOptions =
            serde_json::from_value(Value::Object(limits)).map_err(|e| cfg(format!("invalid agent options: {e}")))?;

        let instructions = prop(options, "instructions");
        let instructions = if absent(&instructions) {
            String::new()
        } else {
            instructions.as_string().ok_or_else(|| cfg("instructions must be a string".into()))?
        };

        let (clock, sleep) = clock_of(&prop(options, "clock"), "the agent's clock")?;
        let mut b = Agent::builder(model)
            .store_rc(store)
            .clock(clock)
            .sleep(sleep)
            .warn(Rc::new(console_warn))
            .rng(Rc::new(js_rng()))
            .options(agent_options)
            .instructions(instructions);
        let tools = prop(options, "tools");
        if !absent(&tools) {
            if !Array::is_array(&tools) {
                return Err(cfg("tools must be an array".into()));
            }
            for (i, t) in Array::from(&tools).iter().enumerate() {
                b = b.tool(JsTool::from_js(t, i)?);
            }
        }
        let hooks = prop(options, "hooks");
        if !absent(&hooks) {
            if !Array::is_array(&hooks) {
                return Err(cfg("hooks must be an array".into()));
            }
            for (i, h) in Array::from(&hooks).iter().enumerate() {
                b = add_hook(b, &h, i)?;
            }
        }
        b.build()
    }

    /// The agent's fingerprint (JSON).
    pub fn fingerprint(&self) -> std::result::Result<String, JsValue> {
        encode(self.agent.fingerprint()).map_err(|e| js_error(&e))
    }

    /// Sends on run `run_id`: `request_json` is the send document ([`SendRequest`]: `{input, businessState?}`,
    /// as the HTTP API takes it); `options_json`: `{events?}`; `on_event` is called with each event's JSON as it
    /// happens; `signal` (a JS `AbortSignal`) aborts the run (it resolves `in-progress` with finish reason
    /// `aborted`, resumable). Resolves to the RunResult JSON.
    pub fn send(
        &self,
        run_id: JsValue,
        request_json: String,
        options_json: Option<String>,
        on_event: Option<Function>,
        signal: Option<JsValue>,
    ) -> Promise {
        let agent = self.agent.clone();
        promise(async move {
            let run_id = text_arg(&run_id, "sessionId")?;
            let mut p = prepare(options_json, on_event, signal, "send options")?;
            let input = request_of(&request_json, &mut p.opts)?;
            let result = agent.send(&run_id, input, p.opts).await?;
            with_events(&result, p.sink)
        })
    }

    /// Finishes an unfinished run (`options_json`, `on_event` and `signal` as for `send`). Resolves to the
    /// RunResult JSON, or [`NothingToResume`] (`{runId, resumed: false, reason}`, as `POST /runs/{id}/resume`
    /// answers) when there was nothing to do.
    pub fn resume(
        &self,
        run_id: JsValue,
        options_json: Option<String>,
        on_event: Option<Function>,
        signal: Option<JsValue>,
    ) -> Promise {
        let agent = self.agent.clone();
        promise(async move {
            let run_id = text_arg(&run_id, "the session id")?;
            let p = prepare(options_json, on_event, signal, "resume options")?;
            match agent.resume(&run_id, p.opts).await? {
                Some(result) => with_events(&result, p.sink),
                None => with_events(&NothingToResume::run(run_id), None),
            }
        })
    }

    /// Runs a delivered job once (`Agent::run_once`): the run id is derived from `delivery_id`; a finished run
    /// is acknowledged (no model call), a run waiting on a person is left, an unfinished one is resumed, and
    /// only a new delivery is sent (`request_json`, `options_json`, `on_event` and `signal` as for `send`).
    /// Resolves to the [`crate::runtime::Delivery`] JSON, the shape `POST /deliveries/{id}` answers with: `{outcome:
    /// "acknowledged" | "ran", runId, result}` or `{outcome: "awaiting-approval", runId, approvalId}` (plus
    /// `events` when asked for).
    #[wasm_bindgen(js_name = runOnce)]
    pub fn run_once(
        &self,
        delivery_id: JsValue,
        request_json: String,
        options_json: Option<String>,
        on_event: Option<Function>,
        signal: Option<JsValue>,
    ) -> Promise {
        let agent = self.agent.clone();
        promise(async move {
            let delivery_id = text_arg(&delivery_id, "deliveryId")?;
            let mut p = prepare(options_json, on_event, signal, "runOnce options")?;
            let input = request_of(&request_json, &mut p.opts)?;
            let delivery = agent.run_once(&delivery_id, input, p.opts).await?;
            with_events(&delivery, p.sink)
        })
    }

    /// Pending approval records (JSON array).
    #[wasm_bindgen(js_name = approvalsList)]
    pub fn approvals_list(&self) -> Promise {
        let agent = self.agent.clone();
        promise(async move { agent.approvals().list().await })
    }

    /// Resolves an approval; resolves to the RunResult JSON (the run resumes when it was the last one).
    /// `on_event` is called with each event's JSON as it happens.
    #[wasm_bindgen(js_name = approvalsResolve)]
    pub fn approvals_resolve(
        &self,
        id: JsValue,
        approved: JsValue,
        note: JsValue,
        on_event: Option<Function>,
    ) -> Promise {
        let agent = self.agent.clone();
        promise(async move {
            let id = text_arg(&id, "the approval id")?;
            let approved = approved.as_bool().ok_or_else(|| Error::invalid_input("approved must be true or false"))?;
            let note = opt_text_arg(&note, "note")?;
            let (opts, _) = CallOptions::default().send_options(on_event);
            agent.approvals().resolve_with(Resolve { id, approved, note }, opts).await
        })
    }

    /// Every unfinished run (JSON array of PendingRun).
    pub fn pending(&self) -> Promise {
        let agent = self.agent.clone();
        promise(async move { agent.pending().await })
    }

    /// Forks a run (`options_json`: `{fromStep, patch?, newId?}`); resolves to the ForkResult JSON.
    pub fn fork(&self, run_id: JsValue, options_json: String) -> Promise {
        let agent = self.agent.clone();
        promise(async move {
            let run_id = text_arg(&run_id, "the run id")?;
            let opts: ForkOptions = serde_json::from_str(&options_json)
                .map_err(|e| Error::invalid_input(format!("invalid fork options: {e}")))?;
            agent.fork(&run_id, opts).await
        })
    }

    /// Compares two stored runs; resolves to the Comparison JSON.
    pub fn compare(&self, a: JsValue, b: JsValue) -> Promise {
        let agent = self.agent.clone();
        promise(
            async move { agent.compare(&text_arg(&a, "the first run id")?, &text_arg(&b, "the second run id")?).await },
        )
    }

    /// One recovery sweep tick (`options_json`: SweepOptions, optional); resolves to the SweepReport JSON.
    pub fn sweep(&self, options_json: Option<String>) -> Promise {
        let agent = self.agent.clone();
        promise(async move {
            let opts: SweepOptions = decode_opt(options_json, "sweep options")?;
            agent.sweep(&opts, &NoListener).await
        })
    }

    /// Runs sweep ticks every `every_ms` (default: the options' `intervalMs`) until `signal` aborts
    /// ([`Agent::recover`]), reporting to `listener` (see [`JsListener`]); resolves to the number of ticks.
    pub fn recover(
        &self,
        options_json: Option<String>,
        every_ms: JsValue,
        listener: JsValue,
        signal: Option<JsValue>,
    ) -> Promise {
        let agent = self.agent.clone();
        promise(async move {
            let opts: SweepOptions = decode_opt(options_json, "recover options")?;
            let every = match number_arg(&every_ms) {
                _ if absent(&every_ms) => opts.interval_ms,
                Ok(ms) if ms.is_finite() && ms >= 0.0 => ms as u64,
                Ok(ms) => return Err(Error::invalid_input(format!("everyMs must be a number >= 0, not {ms}"))),
                Err(kind) => return Err(Error::invalid_input(format!("everyMs must be a number >= 0, not {kind}"))),
            };
            let (stop, _link) = link_abort(signal)?;
            let stop = stop.unwrap_or_default();
            Ok(agent.recover(&opts, every, &JsListener(listener), &stop).await)
        })
    }

    /// Deletes a run; resolves to `null`.
    pub fn delete(&self, run_id: JsValue) -> Promise {
        let agent = self.agent.clone();
        promise(async move { agent.delete(&text_arg(&run_id, "the run id")?).await })
    }

    /// The run's checkpoint JSON, or `null`.
    pub fn load(&self, run_id: JsValue) -> Promise {
        let agent = self.agent.clone();
        promise(async move { agent.load(&text_arg(&run_id, "the run id")?).await })
    }

    /// Past states of a run, newest first (JSON array).
    pub fn history(&self, run_id: JsValue, limit: JsValue) -> Promise {
        let agent = self.agent.clone();
        promise(async move { agent.history(&text_arg(&run_id, "the run id")?, limit_of(&limit)?).await })
    }

    /// Checks a session id (`Agent::session`): throws `STEADFAST_SESSION_ID_INVALID` for a bad one.
    #[wasm_bindgen(js_name = sessionCheck)]
    pub fn session_check(&self, id: &str) -> std::result::Result<(), JsValue> {
        session_of(&self.agent, id).map(|_| ()).map_err(|e| js_error(&e))
    }

    /// Sends the next turn of session `id` (`Session::send`; the other arguments as for `send`). Resolves to
    /// the RunResult JSON.
    #[wasm_bindgen(js_name = sessionSend)]
    pub fn session_send(
        &self,
        id: String,
        request_json: String,
        options_json: Option<String>,
        on_event: Option<Function>,
        signal: Option<JsValue>,
    ) -> Promise {
        let agent = self.agent.clone();
        promise(async move {
            let session = session_of(&agent, &id)?;
            let mut p = prepare(options_json, on_event, signal, "session send options")?;
            let input = request_of(&request_json, &mut p.opts)?;
            let result = session.send(input, p.opts).await?;
            with_events(&result, p.sink)
        })
    }

    /// Finishes session `id`'s interrupted newest turn (`Session::resume`; the arguments as for `resume`).
    /// Resolves to the RunResult JSON, or [`NothingToResume`] (`{sessionId, resumed: false, reason}`, as
    /// `POST /sessions/{id}/resume` answers) when there was nothing to do.
    #[wasm_bindgen(js_name = sessionResume)]
    pub fn session_resume(
        &self,
        id: String,
        options_json: Option<String>,
        on_event: Option<Function>,
        signal: Option<JsValue>,
    ) -> Promise {
        let agent = self.agent.clone();
        promise(async move {
            let session = session_of(&agent, &id)?;
            let p = prepare(options_json, on_event, signal, "session resume options")?;
            match session.resume(p.opts).await? {
                Some(result) => with_events(&result, p.sink),
                None => with_events(&NothingToResume::session(id), None),
            }
        })
    }

    /// Session `id`'s turns, newest first (`Session::history`; `limit` absent: every turn). Resolves to the
    /// SessionTurn JSON array.
    #[wasm_bindgen(js_name = sessionHistory)]
    pub fn session_history(&self, id: String, limit: JsValue) -> Promise {
        let agent = self.agent.clone();
        promise(async move {
            let limit = limit_of(&limit)?;
            session_of(&agent, &id)?.history(limit).await
        })
    }

    /// Forks session `id` (`Session::fork`; `options_json`: `{fromStep, newId?}`). Resolves to the SessionFork
    /// JSON.
    #[wasm_bindgen(js_name = sessionFork)]
    pub fn session_fork(&self, id: String, options_json: String) -> Promise {
        let agent = self.agent.clone();
        promise(async move {
            let opts: SessionForkOptions = serde_json::from_str(&options_json)
                .map_err(|e| Error::invalid_input(format!("invalid session fork options: {e}")))?;
            session_of(&agent, &id)?.fork(opts).await
        })
    }

    /// Drops session `id`'s unfinished newest turn (`Session::discard_pending`). Resolves to the dropped run id
    /// JSON, or `null`.
    #[wasm_bindgen(js_name = sessionDiscardPending)]
    pub fn session_discard_pending(&self, id: String) -> Promise {
        let agent = self.agent.clone();
        promise(async move { session_of(&agent, &id)?.discard_pending().await })
    }

    /// Deletes every turn of session `id` (`Session::delete`). Resolves to the number of turns deleted.
    #[wasm_bindgen(js_name = sessionDelete)]
    pub fn session_delete(&self, id: String) -> Promise {
        let agent = self.agent.clone();
        promise(async move { session_of(&agent, &id)?.delete().await })
    }

    /// Fires every due schedule once (`Agent::fire_schedules`; `options_json`, `on_event` and `signal` as for
    /// `send`). Resolves to the ScheduleOutcome JSON array.
    #[wasm_bindgen(js_name = fireSchedules)]
    pub fn fire_schedules(
        &self,
        schedules: &JsSchedules,
        options_json: Option<String>,
        on_event: Option<Function>,
        signal: Option<JsValue>,
    ) -> Promise {
        let agent = self.agent.clone();
        let compiled = schedules.compiled.clone();
        promise(async move {
            let p = prepare(options_json, on_event, signal, "fireSchedule options")?;
            Ok(agent.fire_schedules(&compiled, &p.opts).await)
        })
    }

    /// Fires the schedules every `every_ms` until `signal` aborts (`Agent::run_schedules`; the first tick at
    /// once, the ticks on the agent's clock; throws `STEADFAST_INVALID_INPUT` at once for an `every_ms` that is
    /// not a number >= 1); `on_tick` is called with each tick's ScheduleOutcome JSON array
    /// (a throwing `on_tick` is ignored: the facade catches). `on_event` as for `send`. Resolves to the number
    /// of ticks.
    #[wasm_bindgen(js_name = runSchedules)]
    pub fn run_schedules(
        &self,
        schedules: &JsSchedules,
        every_ms: JsValue,
        on_tick: Function,
        on_event: Option<Function>,
        signal: Option<JsValue>,
    ) -> std::result::Result<Promise, JsValue> {
        let every_ms = match number_arg(&every_ms) {
            Ok(ms) if ms.is_finite() && ms >= 1.0 => ms,
            Ok(ms) => {
                return Err(js_error(&Error::invalid_input(format!("intervalMs must be a number >= 1, not {ms}"))))
            }
            Err(kind) => {
                return Err(js_error(&Error::invalid_input(format!("intervalMs must be a number >= 1, not {kind}"))))
            }
        };
        let agent = self.agent.clone();
        let compiled = schedules.compiled.clone();
        Ok(promise(async move {
            let (stop, _link) = link_abort(signal)?;
            let stop = stop.unwrap_or_default();
            let (opts, _) = CallOptions::default().send_options(on_event);
            let tick = |outcomes: &[ScheduleOutcome]| {
                // Ignored (no else): outcomes (strings, numbers, error infos) always serialise.
                if let Ok(json) = serde_json::to_string(outcomes) {
                    // Ignored: the facade's `on_tick` catches what the user's callbacks throw.
                    let _ = on_tick.call1(&JsValue::NULL, &JsValue::from_str(&json));
                }
            };
            Ok(agent.run_schedules(&compiled, every_ms as u64, &opts, &tick, &stop).await)
        }))
    }
}
