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
//! **Waits** ([`crate::core::wait`]): `execute` may resolve a wait marker instead of a result — what
//! `ctx.waitForEvent`, `ctx.askQuestion`, `ctx.sleepUntil` and `ctx.sleepFor` build in js/src/waits.ts: any
//! object with the property `Symbol.for("steadfast.wait")` holding `{kind: "question", question, choices?}`,
//! `{kind: "event", deadline?}` or `{kind: "timer", at}` / `{kind: "timer", afterMs}` (times in ms since the
//! epoch; `afterMs` counts from `ctx.now`). It becomes [`ToolOutput::wait`] ([`wait_request`]); a marker that
//! says no wait is an `InvalidWait` error result the model reads, worded as the core's refusal of a wait it
//! cannot record. A symbol cannot be written in JSON, so no result a tool computed is taken for a marker.
//!
//! **Caution:** tools that run again on resume must be idempotent: use `ctx.idempotencyKey`.

use super::args::known_keys;
use super::errors::encode;
use crate::core::error::{Error, ErrorCode, Result};
use crate::core::wait::WaitRequest;
use crate::core::wire::json_text;
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

/// The property of a wait marker (`Symbol.for(WAIT_KEY)`; see the module docs).
const WAIT_KEY: &str = "steadfast.wait";

/// A field of a wait marker as JS gave it (read by [`field_of`]; judged by [`wait_request`]).
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Field {
    Absent,
    Number(f64),
    Text(String),
    Texts(Vec<String>),
    /// Anything else: what it is (`typeof`, `null`, `array`).
    Other(String),
}

impl Field {
    fn kind(&self) -> String {
        match self {
            Field::Absent => "undefined".into(),
            Field::Number(n) => format!("{n}"),
            Field::Text(_) => "a string".into(),
            Field::Texts(_) => "an array".into(),
            Field::Other(k) => k.clone(),
        }
    }
}

/// A field of a JS object as a [`Field`].
fn field_of(obj: &JsValue, key: &str) -> Field {
    let v = prop(obj, key);
    if absent(&v) {
        return Field::Absent;
    }
    if let Some(n) = v.as_f64() {
        return Field::Number(n);
    }
    if let Some(s) = v.as_string() {
        return Field::Text(s);
    }
    if Array::is_array(&v) {
        let items: Vec<Option<String>> = Array::from(&v).iter().map(|x| x.as_string()).collect();
        return match items.into_iter().collect::<Option<Vec<String>>>() {
            Some(texts) => Field::Texts(texts),
            None => Field::Other("an array with a value that is not a string".into()),
        };
    }
    Field::Other(super::args::js_kind(&v))
}

/// A time of a wait marker (`what`: its name): a finite number of ms since the epoch, at least 0 (a fraction is
/// dropped).
fn time_of(f: Field, what: &str) -> std::result::Result<u64, String> {
    match f {
        Field::Number(n) if n.is_finite() && n >= 0.0 => Ok(n.floor() as u64),
        other => Err(format!(
            "{what} must be a time in ms since the epoch (a number >= 0 or a valid Date), not {}",
            other.kind()
        )),
    }
}

/// The wait a marker asks for (`field` reads its fields; `now`: the call's `ctx.now`, which `afterMs` counts
/// from), or why it asks for none. What a wait may be (a question's text and choices) is the core's check when
/// the call's outcome is recorded ([`WaitRequest::check`]); this is the translation only.
pub(super) fn wait_request(field: impl Fn(&str) -> Field, now: u64) -> std::result::Result<WaitRequest, String> {
    match field("kind") {
        Field::Text(k) if k == "question" => {
            let question = match field("question") {
                Field::Text(q) => q,
                other => return Err(format!("a question must be a string, not {}", other.kind())),
            };
            let choices = match field("choices") {
                Field::Absent => Vec::new(),
                Field::Texts(c) => c,
                other => return Err(format!("choices must be an array of strings, not {}", other.kind())),
            };
            Ok(WaitRequest::Question { question, choices })
        }
        Field::Text(k) if k == "event" => match field("deadline") {
            Field::Absent => Ok(WaitRequest::Event { deadline: None }),
            d => Ok(WaitRequest::Event { deadline: Some(time_of(d, "deadline")?) }),
        },
        Field::Text(k) if k == "timer" => match (field("at"), field("afterMs")) {
            (at, Field::Absent) => Ok(WaitRequest::Timer { at: time_of(at, "at")? }),
            (Field::Absent, Field::Number(ms)) if ms.is_finite() && ms >= 0.0 => {
                Ok(WaitRequest::Timer { at: now.saturating_add(ms.floor() as u64) })
            }
            (Field::Absent, other) => Err(format!("ms must be a number >= 0, not {}", other.kind())),
            _ => Err("a timer takes `at` or `afterMs`, not both".into()),
        },
        other => Err(format!(
            "unknown kind of wait {} (question, event or timer)",
            match other {
                Field::Text(k) => json_text(&serde_json::Value::String(k)),
                o => o.kind(),
            }
        )),
    }
}

/// The wait marker a tool resolved (see the module docs), if `v` is one.
fn wait_marker(v: &JsValue) -> Option<JsValue> {
    if !v.is_object() {
        return None;
    }
    let key: JsValue = js_sys::Symbol::for_(WAIT_KEY).into();
    // Ignored (as `undefined`): only a throwing getter or proxy fails here, and that is no marker.
    js_sys::Reflect::get(v, &key).ok().filter(|m| !absent(m))
}

/// What a tool's resolved value becomes. `call`: the tool's name and the call's `ctx.now`, where a wait may be
/// answered (`execute`); `None` where it may not (`reconcile` answers a result).
pub(super) fn tool_output(v: &JsValue, call: Option<(&str, u64)>) -> std::result::Result<ToolOutput, ToolError> {
    if absent(v) {
        return Ok(ToolOutput::text(""));
    }
    if let Some(marker) = wait_marker(v) {
        return match call {
            Some((name, now)) => wait_request(|k| field_of(&marker, k), now).map(ToolOutput::wait).map_err(|why| {
                ToolError::typed("InvalidWait", format!("'{name}' asked for a wait that cannot be recorded: {why}"))
            }),
            None => Err(ToolError::typed(
                "InvalidWait",
                "reconcile answered a wait: it answers the call's result, or null when the effect did not happen",
            )),
        };
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
                f.call1(&self.obj, &JsValue::from_str(&json_text(args))).map_or(true, |v| v.is_truthy())
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
        let js_args = Array::of1(&JsValue::from_str(&json_text(args)));
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
        let ctx = json_text(&serde_json::json!({ "idempotencyKey": key }));
        let js_args = Array::of2(&JsValue::from_str(&json_text(args)), &JsValue::from_str(&ctx));
        match call_async(f, &self.obj, &js_args).await {
            Ok(v) if absent(&v) => Ok(None),
            Ok(v) => tool_output(&v, None).map(Some),
            Err(e) => {
                let kind = prop(&e, "name").as_string().filter(|n| !n.is_empty()).unwrap_or_else(|| "Error".into());
                Err(ToolError::typed(kind, js_message(&e)))
            }
        }
    }

    async fn execute(&self, args: Value, ctx: ToolContext) -> std::result::Result<ToolOutput, ToolError> {
        let ctx_json = encode(&ToolCallContext::from(&ctx)).map_err(|e| ToolError::typed("TypeError", e.message))?;
        let js_args = Array::of2(&JsValue::from_str(&json_text(&args)), &JsValue::from_str(&ctx_json));
        match call_async(&self.execute, &self.obj, &js_args).await {
            Ok(v) => tool_output(&v, Some((&self.name, ctx.now))),
            Err(e) => Err(tool_error(&e, &ctx.run_id)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// [`wait_request`] over a marker given as JSON (numbers, strings, arrays of strings).
    fn request(marker: serde_json::Value, now: u64) -> std::result::Result<WaitRequest, String> {
        wait_request(
            |k| match marker.get(k) {
                None => Field::Absent,
                Some(serde_json::Value::Number(n)) => Field::Number(n.as_f64().unwrap()),
                Some(serde_json::Value::String(s)) => Field::Text(s.clone()),
                Some(serde_json::Value::Array(a)) if a.iter().all(|x| x.is_string()) => {
                    Field::Texts(a.iter().map(|x| x.as_str().unwrap().to_string()).collect())
                }
                Some(other) => Field::Other(other.to_string()),
            },
            now,
        )
    }

    #[test]
    fn a_wait_marker_becomes_the_wait_it_names() {
        assert_eq!(
            request(json!({"kind": "question", "question": "Ship?", "choices": ["yes", "no"]}), 0),
            Ok(WaitRequest::Question { question: "Ship?".into(), choices: vec!["yes".into(), "no".into()] })
        );
        assert_eq!(
            request(json!({"kind": "question", "question": "Why?"}), 0),
            Ok(WaitRequest::Question { question: "Why?".into(), choices: vec![] })
        );
        assert_eq!(request(json!({"kind": "event"}), 5), Ok(WaitRequest::Event { deadline: None }));
        assert_eq!(
            request(json!({"kind": "event", "deadline": 9_000.7}), 5),
            Ok(WaitRequest::Event { deadline: Some(9_000) })
        );
        assert_eq!(request(json!({"kind": "timer", "at": 1_000}), 5), Ok(WaitRequest::Timer { at: 1_000 }));
        assert_eq!(request(json!({"kind": "timer", "afterMs": 90_000}), 1_000), Ok(WaitRequest::Timer { at: 91_000 }));
        assert_eq!(request(json!({"kind": "timer", "afterMs": 0}), 1_000), Ok(WaitRequest::Timer { at: 1_000 }));
    }

    #[test]
    fn a_marker_that_names_no_wait_says_why() {
        let nan = |key: &'static str, kind: &'static str| {
            wait_request(
                move |k| match k {
                    "kind" => Field::Text(kind.into()),
                    k if k == key => Field::Number(f64::NAN),
                    _ => Field::Absent,
                },
                0,
            )
        };
        assert_eq!(
            nan("deadline", "event").unwrap_err(),
            "deadline must be a time in ms since the epoch (a number >= 0 or a valid Date), not NaN"
        );
        assert!(nan("at", "timer").unwrap_err().starts_with("at must be a time"));
        assert_eq!(nan("afterMs", "timer").unwrap_err(), "ms must be a number >= 0, not NaN");
        for (marker, why) in [
            (json!({"kind": "nap"}), "unknown kind of wait \"nap\" (question, event or timer)"),
            (json!({}), "unknown kind of wait undefined (question, event or timer)"),
            (json!({"kind": "question"}), "a question must be a string, not undefined"),
            (
                json!({"kind": "question", "question": "q", "choices": "yes"}),
                "choices must be an array of strings, not a string",
            ),
            (
                json!({"kind": "question", "question": "q", "choices": [1]}),
                "choices must be an array of strings, not [1]",
            ),
            (
                json!({"kind": "event", "deadline": -1}),
                "deadline must be a time in ms since the epoch (a number >= 0 or a valid Date), not -1",
            ),
            (
                json!({"kind": "event", "deadline": "tomorrow"}),
                "deadline must be a time in ms since the epoch (a number >= 0 or a valid Date), not a string",
            ),
            (
                json!({"kind": "timer"}),
                "at must be a time in ms since the epoch (a number >= 0 or a valid Date), not undefined",
            ),
            (json!({"kind": "timer", "afterMs": -5}), "ms must be a number >= 0, not -5"),
            (json!({"kind": "timer", "at": 5, "afterMs": 5}), "a timer takes `at` or `afterMs`, not both"),
        ] {
            assert_eq!(request(marker.clone(), 0).unwrap_err(), why, "{marker}");
        }
    }
}
