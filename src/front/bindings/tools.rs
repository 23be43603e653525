//! JS tools as the runtime's [`Tool`]s (mirrors `js/src/tools.ts`).
//!
//! The JS shape: `{name, description, inputSchema, needsApproval?: boolean | (argsJson) => boolean,
//! execute(argsJson, ctxJson): Promise<any>, sideEffecting?: boolean, reconcile?(argsJson, ctxJson),
//! checkArgs?(argsJson): Promise<string | null>}` (see `JsTool::reconcile`; `checkArgs` is the tool's own
//! validator, a zod or Standard Schema one: a string is why the arguments are invalid, and the call gets the
//! `validation` result a JSON Schema failure gets). `input` (the schema `checkArgs` and `inputSchema` were made
//! from, in js/src/tools.ts) may be there too; any other key is refused (`STEADFAST_CONFIG_INVALID`). `ctxJson` is a [`ToolCallContext`] (`{runId, toolCallId, approvalId,
//! idempotencyKey}`). A string result is the text the model reads; any other value is serialised as JSON. A
//! thrown error is an error result `"<the error's .name>: <its message>"` the model reads (`"Error: …"` for a
//! value without a name), unless it has `.propagate === true`: then the run is rejected with
//! `STEADFAST_TOOL_PROPAGATED` (its message; `.retryable`, default `true`), and stays resumable.
//!
//! **Caution:** tools that run again on resume must be idempotent: use `ctx.idempotencyKey`.

use super::args::known_keys;
use super::errors::encode;
use crate::core::error::{Error, ErrorCode, Result};
use crate::front::contract::ToolCallContext;
use crate::front::wasm_shared::{absent, call_async, js_message, method, prop, to_value};
use crate::runtime::{Tool, ToolContext, ToolError, ToolOutput};
use async_trait::async_trait;
use js_sys::{Array, Function};
use serde_json::Value;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

pub(super) enum ApprovalRule {
    Never,
    Always,
    Ask(Function),
}

/// The keys of a JS tool: what `defineTool` takes (named in a refusal); js/src/tools.ts adds `checkArgs`.
const TOOL_KEYS: [&str; 8] =
    ["name", "description", "input", "inputSchema", "execute", "needsApproval", "sideEffecting", "reconcile"];

/// `defineTool`'s check of a tool's keys (the one list, [`TOOL_KEYS`], `createAgent` checks again): throws
/// `STEADFAST_CONFIG_INVALID` naming an unknown key and the tool.
#[wasm_bindgen(js_name = checkToolKeys)]
pub fn check_tool_keys(obj: JsValue) -> std::result::Result<(), JsValue> {
    let name = prop(&obj, "name").as_string().unwrap_or_else(|| "?".into());
    known_keys(&obj, &TOOL_KEYS, &["checkArgs"], &format!("tool '{name}'")).map_err(|e| super::errors::js_error(&e))
}

pub(super) struct JsTool {
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
    /// `checkArgs(argsJson)`: the tool's own validator (a reason string when the arguments are invalid).
    check_args: Option<Function>,
}

impl JsTool {
    pub(super) fn from_js(obj: JsValue, index: usize) -> Result<JsTool> {
        let cfg = |m: String| Error::new(ErrorCode::ConfigInvalid, m);
        let name = prop(&obj, "name").as_string().ok_or_else(|| cfg(format!("tools[{index}] has no string `name`")))?;
        let what = format!("tool '{name}'");
        known_keys(&obj, &TOOL_KEYS, &["checkArgs"], &what)?;
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
        let check_args = match prop(&obj, "checkArgs") {
            v if absent(&v) => None,
            v => Some(v.dyn_into::<Function>().map_err(|_| cfg(format!("{what}: checkArgs must be a function")))?),
        };
        let side_effecting = match prop(&obj, "sideEffecting") {
            v if absent(&v) => reconcile.is_some(),
            v => {
                v.as_bool().ok_or_else(|| cfg(format!("{what}: sideEffecting must be a boolean")))?
                    || reconcile.is_some()
            }
        };
        Ok(JsTool { name, description, schema, approval, obj, execute, side_effecting, reconcile, check_args })
    }
}

/// What a tool's resolved value becomes.
pub(super) fn tool_output(v: &JsValue) -> std::result::Result<ToolOutput, ToolError> {
    if absent(v) {
        return Ok(ToolOutput::text(""));
    }
    if let Some(s) = v.as_string() {
        return Ok(ToolOutput::text(s));
    }
    to_value(v, "the tool's result").map(ToolOutput::json).map_err(|e| ToolError::typed("TypeError", e.message))
}

/// What a tool's rejection becomes.
pub(super) fn tool_error(e: &JsValue, run_id: &str) -> ToolError {
    let message = js_message(e);
    if prop(e, "propagate").as_bool() == Some(true) {
        let mut err = Error::new(ErrorCode::ToolPropagated, message).with_run(run_id);
        // With the HTTP status of the failure (`mcpTools`' refusals and outages), the core decides whether a
        // later attempt may succeed; else the error's own `retryable` (default true).
        match prop(e, "status").as_f64().filter(|s| s.fract() == 0.0 && (100.0..1000.0).contains(s)) {
            Some(status) => err.retryable = crate::core::classify::transient_http_status(status as u16),
            None => {
                if let Some(r) = prop(e, "retryable").as_bool() {
                    err.retryable = r;
                }
            }
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

    /// Calls the JS `checkArgs(argsJson)`: a string is why the arguments are invalid; `null`/`undefined` accepts
    /// them. A validator that throws (or resolves anything else) fails the check with what it threw: the call
    /// does not run on arguments nothing vouched for.
    async fn check_args(&self, args: &Value) -> std::result::Result<(), String> {
        let Some(f) = &self.check_args else { return Ok(()) };
        let js_args = Array::of1(&JsValue::from_str(&args.to_string()));
        match call_async(f, &self.obj, &js_args).await {
            Ok(v) if absent(&v) => Ok(()),
            Ok(v) => Err(v.as_string().unwrap_or_else(|| "the validator answered neither a reason nor null".into())),
            Err(e) => Err(format!("the validator threw: {}", js_message(&e))),
        }
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
