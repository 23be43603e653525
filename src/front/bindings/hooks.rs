//! JS hooks as the runtime's [`Hook`]s (mirrors `js/src/hooks.ts`): a descriptor `{type: "progressGuard",
//! hintAfter?, denyAfter?, maxDenials?}` (a [`ProgressGuard`]), `{type: "outputCheck", name, check(callJson,
//! output): string | null | undefined}` (an [`OutputCheck`]; `check` is called synchronously with the call's
//! JSON `{id, name, args}` and the tool's text: a string is the failure reason, `null`/`undefined` passes, a
//! throw is the reason `"check threw: <message>"`), or `{type: "custom", …}` ([`JsHook`]).

use super::args::known_keys;
use super::errors::encode;
use super::model::parse_response;
use crate::core::error::{Error, ErrorCode, Result};
use crate::core::machine::ModelResponse;
use crate::core::transcript::{Message, ToolCall};
use crate::core::wire::json_text;
use crate::front::wasm_shared::{absent, call_async, js_message, method, prop, to_value};
use crate::runtime::{
    AgentBuilder, Hook, HookContext, OutputCheck, ProgressGuard, ProgressGuardOptions, ToolResultDraft, Verdict,
};
use async_trait::async_trait;
use js_sys::{Array, Function};
use serde_json::Value;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

/// What a JS output check's return value (or throw) means: a string fails with that reason, `null`/`undefined`
/// passes.
pub(super) fn check_verdict(out: std::result::Result<JsValue, JsValue>) -> std::result::Result<(), String> {
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
pub(super) fn add_hook(b: AgentBuilder, desc: &JsValue, index: usize) -> Result<AgentBuilder> {
    let cfg = |m: String| Error::new(ErrorCode::ConfigInvalid, m);
    let kind = prop(desc, "type").as_string().ok_or_else(|| {
        cfg(format!(
            "hooks[{index}] is not a hook: use progressGuard(...), outputCheck(name, fn) or defineHook({{...}})"
        ))
    })?;
    let keys: &[&str] = match kind.as_str() {
        "progressGuard" => &["type", "hintAfter", "denyAfter", "maxDenials"],
        "outputCheck" => &["type", "name", "check"],
        _ => &["type", "name", "beforeTool", "afterTool", "beforeModel", "afterModel"],
    };
    known_keys(desc, keys, &[], &format!("hooks[{index}] ({kind})"))?;
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
pub(super) struct JsHook {
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
pub(super) struct HookAnswer {
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
        js_args.push(&JsValue::from_str(&json_text(&context)));
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
        let answer = self.ask(f, "afterTool", &[encode(call)?, json_text(&draft)], ctx).await?;
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
            *response = parse_response(&json_text(&replacement))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hook_answer_reads_every_field_and_refuses_unknown_ones() {
        let a: HookAnswer = serde_json::from_str(
            r#"{"state": {"n": 1}, "stateChanged": true, "args": {"x": 2}, "deny": "no", "content": "c",
                "isError": true, "response": {"text": "t"}}"#,
        )
        .unwrap();
        assert_eq!(a.state, serde_json::json!({"n": 1}));
        assert!(a.state_changed);
        assert_eq!(a.args, Some(serde_json::json!({"x": 2})));
        assert_eq!((a.deny.as_deref(), a.content.as_deref(), a.is_error), (Some("no"), Some("c"), Some(true)));
        assert!(a.response.is_some());
        let empty: HookAnswer = serde_json::from_str("{}").unwrap();
        assert!(!empty.state_changed && empty.deny.is_none() && empty.args.is_none());
        for bad in [r#"{"denied": "x"}"#, r#"{"stateChanged": "yes"}"#, r#"{"deny": 5}"#, "\"deny\"", "7"] {
            assert!(serde_json::from_str::<HookAnswer>(bad).is_err(), "{bad}");
        }
    }
}
