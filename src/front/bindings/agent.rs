//! The agent (mirrors `js/src/agent.ts`): [`JsAgent`] built from the JS options object, and its run, approval
//! and inspection methods (sessions, schedules and recovery have their own files).

use super::args::{known_keys, limit_of, opt_text_arg, text_arg};
use super::calls::{prepare, request_of, with_events, CallOptions};
use super::clock::clock_of;
use super::errors::{decode_known, encode, js_error, known_fields, promise};
use super::hooks::add_hook;
use super::model::JsModel;
use super::stores::JsStore;
use super::tools::JsTool;
use crate::core::error::{Error, ErrorCode, Result};
use crate::front::contract::NothingToResume;
use crate::front::wasm_shared::{absent, js_rng, prop, to_value};
use crate::runtime::{Agent, AgentBuilder, AgentOptions, ForkOptions, Resolve};
use crate::store::RunStore;
use js_sys::{Array, Function, Promise};
use serde_json::Value;
use std::rc::Rc;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

/// A durable agent over a JS model, JS tools and a [`JsStore`]. Every method returns a promise of a JSON
/// string and rejects with a JS `Error` carrying `code`, `retryable`, `runId`, `approvalId`.
#[wasm_bindgen]
pub struct JsAgent {
    pub(super) agent: Agent,
    /// The spans waiting to be sent, when the agent traces (`tracing`; js/src/tracing.ts sends them).
    traces: Option<crate::runtime::OtlpBuffer>,
}

/// An agent's spans as the npm package traces them: kept in a bounded buffer, and `notify` called (js/src/tracing.ts
/// then takes them with `takeTraces` and sends them, after the current call's work).
struct JsTraces {
    buffer: crate::runtime::OtlpBuffer,
    notify: Function,
}

impl crate::runtime::SpanExporter for JsTraces {
    fn export(&self, spans: Vec<crate::core::trace::Span>) {
        self.buffer.export(spans);
        // Ignored: a notification that throws loses nothing (the spans wait for the next one).
        let _ = self.notify.call0(&JsValue::NULL);
    }
}

/// The `tracing` part js/src/tracing.ts hands on (`{notify, contents, serviceName, maxBufferedSpans}`, checked
/// there): the exporter and its options, and the buffer the agent's `takeTraces` reads.
fn tracing_of(v: &JsValue) -> Result<(Rc<JsTraces>, crate::core::trace::TraceOptions)> {
    let cfg = |m: &str| Error::new(ErrorCode::ConfigInvalid, format!("tracing: {m}"));
    let notify = prop(v, "notify").dyn_into::<Function>().map_err(|_| cfg("notify must be a function"))?;
    let service = prop(v, "serviceName").as_string().ok_or_else(|| cfg("serviceName must be a string"))?;
    let max = prop(v, "maxBufferedSpans").as_f64().filter(|n| *n >= 1.0 && n.fract() == 0.0);
    let max = max.ok_or_else(|| cfg("maxBufferedSpans must be a whole number of at least 1"))?;
    let contents = prop(v, "contents").as_bool().unwrap_or(false);
    let buffer = crate::runtime::OtlpBuffer::new(&service, max.min(1e9) as usize);
    Ok((Rc::new(JsTraces { buffer, notify }), crate::core::trace::TraceOptions { contents }))
}

/// `console.warn(line)`, looked up at each call (so a host or a test that replaces it sees the line).
pub(super) fn console_warn(line: &str) {
    let console = prop(&js_sys::global(), "console");
    if let Ok(warn) = prop(&console, "warn").dyn_into::<Function>() {
        // Ignored: a warning that cannot be written must not fail the run that caused it.
        let _ = warn.call1(&console, &JsValue::from_str(line));
    }
}

/// The parts of the options object only JS gives (beside the [`AgentOptions`] fields); js/src/agent.ts takes
/// `provider` and `store` out before it hands the object on.
const AGENT_PARTS: [&str; 12] = [
    "model",
    "provider",
    "fallbacks",
    "tools",
    "hooks",
    "store",
    "instructions",
    "clock",
    "subagents",
    "handoffs",
    "name",
    "tracing",
];

/// The parts of a sub-agent's object (`subagents[i]`) besides the [`AgentOptions`] fields: no store or clock of
/// its own (its lead's), a name and a description.
const SUBAGENT_PARTS: [&str; 11] = [
    "name",
    "description",
    "model",
    "fallbacks",
    "tools",
    "hooks",
    "instructions",
    "subagents",
    "handoffs",
    "detached",
    "abandon",
];

/// The parts of a handoff agent's object (`handoffs[i]`): no [`AgentOptions`] fields, store, clock or hooks (the
/// run's settings and hooks are its lead's, see [`AgentBuilder::handoff`]) and no handoffs of its own (the team is
/// declared on the lead). `hooks` is here to be refused with its reason, not as an unknown key.
const HANDOFF_PARTS: [&str; 7] = ["name", "description", "model", "tools", "hooks", "instructions", "subagents"];

/// [`AgentOptions`] as JSON: every field with its default (the names the options object may use, and the
/// nested objects' keys).
fn agent_option_defaults() -> Result<serde_json::Map<String, Value>> {
    match serde_json::to_value(AgentOptions::default()) {
        Ok(Value::Object(names)) => Ok(names),
        _ => Err(Error::internal("the agent options do not serialise as an object")),
    }
}

/// The agent options of the JS options object, read whole: each field of [`AgentOptions`] (by its JSON name)
/// that `get` finds, deserialized as one [`AgentOptions`] (`STEADFAST_CONFIG_INVALID` naming the bad field,
/// or a key a nested object such as `retry` does not have). The object's other properties (model, tools,
/// hooks, clock, instructions) are not options and are not read here; [`JsAgent::build`] refuses unknown ones.
pub(super) fn agent_options_of(get: impl Fn(&str) -> Result<Option<Value>>) -> Result<AgentOptions> {
    let cfg = |m: String| Error::new(ErrorCode::ConfigInvalid, m);
    let names = agent_option_defaults()?;
    let mut given = serde_json::Map::new();
    for key in names.keys() {
        if let Some(v) = get(key)? {
            given.insert(key.clone(), v);
        }
    }
    let given = Value::Object(given);
    known_fields::<AgentOptions>(&given, "invalid agent options")?;
    serde_json::from_value(given).map_err(|e| cfg(format!("invalid agent options: {e}")))
}

/// A decision as `approvals.resolve` takes it, with the rule `POST /approvals/{id}` has
/// (src/front/api/approvals.rs): `approved` is required, except beside an `answer` (a question answered is
/// approved); `STEADFAST_INVALID_INPUT` otherwise. Whether the record takes an answer is the runtime's
/// ([`crate::runtime::Approvals::resolve_with`]).
pub(super) fn decision_of(
    id: String,
    approved: Option<bool>,
    note: Option<String>,
    answer: Option<Value>,
) -> Result<Resolve> {
    Resolve::new(id, approved, note, answer)
}

/// An agent's model, options, instructions, tools, hooks, sub-agents, handoff team and team name from its options
/// object (the lead's, or `subagents[i]` / `handoffs[i]` of its lead at `at`, which names the object in errors).
fn builder_of(options: &JsValue, at: &str) -> Result<AgentBuilder> {
    let cfg = |m: String| Error::new(ErrorCode::ConfigInvalid, m);
    let model = JsModel::from_js(prop(options, "model"))?;
    let agent_options = agent_options_of(|key| {
        let v = prop(options, key);
        // `steerPollMs: null` turns steering off (its `null` is a value); any other option's `null` is absent.
        if v.is_null() && key == "steerPollMs" {
            return Ok(Some(Value::Null));
        }
        if absent(&v) {
            return Ok(None);
        }
        to_value(&v, key).map(Some).map_err(|e| cfg(format!("{at}{}", e.message)))
    })?;
    let instructions = prop(options, "instructions");
    let instructions = if absent(&instructions) {
        String::new()
    } else {
        instructions.as_string().ok_or_else(|| cfg(format!("{at}instructions must be a string")))?
    };
    let mut b = Agent::builder(model).options(agent_options).instructions(instructions);
    let fallbacks = prop(options, "fallbacks");
    if !absent(&fallbacks) {
        if !Array::is_array(&fallbacks) {
            return Err(cfg(format!("{at}fallbacks must be an array of models")));
        }
        for (i, m) in Array::from(&fallbacks).iter().enumerate() {
            let model = JsModel::from_js(m).map_err(|e| cfg(format!("{at}fallbacks[{i}]: {}", e.message)))?;
            b = b.fallback(model);
        }
    }
    let tools = prop(options, "tools");
    if !absent(&tools) {
        if !Array::is_array(&tools) {
            return Err(cfg(format!("{at}tools must be an array")));
        }
        for (i, t) in Array::from(&tools).iter().enumerate() {
            b = b.tool(JsTool::from_js(t, i)?);
        }
    }
    let hooks = prop(options, "hooks");
    if !absent(&hooks) {
        if !Array::is_array(&hooks) {
            return Err(cfg(format!("{at}hooks must be an array")));
        }
        for (i, h) in Array::from(&hooks).iter().enumerate() {
            b = add_hook(b, &h, i)?;
        }
    }
    let subagents = prop(options, "subagents");
    if !absent(&subagents) {
        if !Array::is_array(&subagents) {
            return Err(cfg(format!("{at}subagents must be an array")));
        }
        let names = agent_option_defaults()?;
        let known: Vec<&str> = SUBAGENT_PARTS.iter().copied().chain(names.keys().map(String::as_str)).collect();
        for (i, sub) in Array::from(&subagents).iter().enumerate() {
            let here = format!("{at}subagents[{i}].");
            if !sub.is_object() {
                return Err(cfg(format!("{at}subagents[{i}] must be an object")));
            }
            known_keys(&sub, &known, &[], &format!("{at}subagents[{i}]"))?;
            if !absent(&prop(&sub, "onAgentDrift")) {
                return Err(cfg(format!(
                    "{here}onAgentDrift: a sub-agent's runs are drift-checked under its lead's onAgentDrift; set it on the lead"
                )));
            }
            let text =
                |key: &str| prop(&sub, key).as_string().ok_or_else(|| cfg(format!("{here}{key} must be a string")));
            let (name, description) = (text("name")?, text("description")?);
            let flag = |key: &str| {
                let v = prop(&sub, key);
                match absent(&v) {
                    true => Ok(false),
                    false => v.as_bool().ok_or_else(|| cfg(format!("{here}{key} must be true or false"))),
                }
            };
            let opts = crate::runtime::SubagentOptions { detached: flag("detached")?, abandon: flag("abandon")? };
            b = b.subagent_with(name, description, builder_of(&sub, &here)?, opts);
        }
    }
    let handoffs = prop(options, "handoffs");
    if !absent(&handoffs) {
        if !Array::is_array(&handoffs) {
            return Err(cfg(format!("{at}handoffs must be an array")));
        }
        for (i, member) in Array::from(&handoffs).iter().enumerate() {
            let here = format!("{at}handoffs[{i}].");
            if !member.is_object() {
                return Err(cfg(format!("{at}handoffs[{i}] must be an object")));
            }
            known_keys(&member, &HANDOFF_PARTS, &[], &format!("{at}handoffs[{i}]"))?;
            let hooks = prop(&member, "hooks");
            if !absent(&hooks) && !(Array::is_array(&hooks) && Array::from(&hooks).length() == 0) {
                return Err(cfg(format!(
                    "{here}hooks: a handoff agent runs under its lead's hooks; give them to the lead"
                )));
            }
            let text =
                |key: &str| prop(&member, key).as_string().ok_or_else(|| cfg(format!("{here}{key} must be a string")));
            let (name, description) = (text("name")?, text("description")?);
            b = b.handoff(name, description, builder_of(&member, &here)?);
        }
    }
    let name = prop(options, "name");
    if !absent(&name) {
        b = b.name(name.as_string().ok_or_else(|| cfg(format!("{at}name must be a string")))?);
    }
    Ok(b)
}

#[wasm_bindgen]
impl JsAgent {
    /// Builds an agent from `{model, tools?, hooks?, instructions?, clock?}` and the [`AgentOptions`] fields
    /// (`maxSteps?`, `retry?`, `lease?`, …; see [`agent_options_of`]) over `store` (`clock`: a JS clock `{now,
    /// sleep}` read instead of the platform's). Warnings (a drift under `onAgentDrift: "warn"`) go to
    /// `console.warn`. Throws `STEADFAST_CONFIG_INVALID` for a bad configuration.
    #[wasm_bindgen(constructor)]
    pub fn new(options: JsValue, store: &JsStore) -> std::result::Result<JsAgent, JsValue> {
        JsAgent::build(&options, store.store.clone()).map_err(|e| js_error(&e))
    }

    fn build(options: &JsValue, store: Rc<dyn RunStore>) -> Result<JsAgent> {
        if !options.is_object() {
            return Err(Error::new(ErrorCode::ConfigInvalid, "agent options must be an object"));
        }
        let names = agent_option_defaults()?;
        let known: Vec<&str> = AGENT_PARTS.iter().copied().chain(names.keys().map(String::as_str)).collect();
        known_keys(options, &known, &[], "createAgent options")?;
        let (clock, sleep) = clock_of(&prop(options, "clock"), "the agent's clock")?;
        let mut b = builder_of(options, "")?;
        let tracing = prop(options, "tracing");
        let traces = match absent(&tracing) {
            true => None,
            false => {
                let (exporter, opts) = tracing_of(&tracing)?;
                b = b.tracing(exporter.clone(), opts);
                Some(exporter.buffer.clone())
            }
        };
        let agent =
            b.store_rc(store).clock(clock).sleep(sleep).warn(Rc::new(console_warn)).rng(Rc::new(js_rng())).build()?;
        if let Some(buffer) = &traces {
            let name = prop(options, "name").as_string().unwrap_or_else(|| "lead".into());
            buffer.count_in(agent.metrics().clone(), &name);
        }
        Ok(JsAgent { agent, traces })
    }

    /// The spans waiting to be sent, as `[otlpJsonBody, spanCount]` (taken: the buffer is emptied), or
    /// `undefined` when none wait.
    #[wasm_bindgen(js_name = takeTraces)]
    pub fn take_traces(&self) -> JsValue {
        match self.traces.as_ref().and_then(|b| b.take_body()) {
            Some((body, n)) => Array::of2(&JsValue::from_str(&body), &JsValue::from_f64(n as f64)).into(),
            None => JsValue::UNDEFINED,
        }
    }

    /// `n` spans taken with `takeTraces` could not be sent: counted as dropped (`agent.metrics()`).
    #[wasm_bindgen(js_name = tracesDropped)]
    pub fn traces_dropped(&self, n: f64) {
        if let Some(b) = &self.traces {
            b.count_dropped(n.clamp(0.0, 1e15) as u64);
        }
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

    /// Resolves an approval, or answers a question; resolves to the RunResult JSON (the run resumes when it was
    /// the last record of its pause). `answer` (any JSON value; `undefined`/`null`: none) is a question's answer;
    /// `approved` may be left out beside it ([`decision_of`]). `on_event` is called with each event's JSON as it
    /// happens.
    #[wasm_bindgen(js_name = approvalsResolve)]
    pub fn approvals_resolve(
        &self,
        id: JsValue,
        approved: JsValue,
        note: JsValue,
        answer: JsValue,
        on_event: Option<Function>,
    ) -> Promise {
        let agent = self.agent.clone();
        promise(async move {
            let id = text_arg(&id, "the approval id")?;
            let approved = if absent(&approved) {
                None
            } else {
                Some(approved.as_bool().ok_or_else(|| Error::invalid_input("approved must be true or false"))?)
            };
            let note = opt_text_arg(&note, "note")?;
            let answer = match to_value(&answer, "the answer")? {
                Value::Null => None,
                v => Some(v),
            };
            let decision = decision_of(id, approved, note, answer)?;
            let (opts, _) = CallOptions::default().send_options(on_event);
            agent.approvals().resolve_with(decision, opts).await
        })
    }

    /// The counters of the agent, its sub-agents and team (JSON array of MetricSample).
    pub fn metrics(&self) -> Promise {
        let agent = self.agent.clone();
        promise(async move { Ok(agent.metrics().samples()) })
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
            let opts: ForkOptions = decode_known(Some(options_json), "fork options")?;
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

    /// The child runs of a run's sub-agent calls, in call order, each with its status and spend so far (JSON
    /// array; `[]` for a run that does not exist).
    pub fn children(&self, run_id: JsValue) -> Promise {
        let agent = self.agent.clone();
        promise(async move { agent.children_of(&text_arg(&run_id, "the run id")?).await })
    }

    /// Past states of a run, newest first (JSON array).
    pub fn history(&self, run_id: JsValue, limit: JsValue) -> Promise {
        let agent = self.agent.clone();
        promise(async move { agent.history(&text_arg(&run_id, "the run id")?, limit_of(&limit)?).await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::machine::DriftPolicy;
    use crate::core::retry::RetryPolicy;
    use serde_json::json;

    fn options_of(given: Value) -> Result<AgentOptions> {
        agent_options_of(|key| Ok(given.get(key).cloned()))
    }

    #[test]
    fn the_agent_options_are_read_whole_by_their_json_names_with_defaults_for_the_rest() {
        assert_eq!(options_of(json!({})).unwrap(), AgentOptions::default());
        let o = options_of(json!({
            "maxSteps": 3, "toolConcurrency": 2, "onAgentDrift": "error", "loopWindow": 0,
            "maxToolResultBytes": 2048, "retry": {"maxAttempts": 2}, "lease": {"ttlMs": 90000}
        }))
        .unwrap();
        assert_eq!((o.max_steps, o.tool_concurrency, o.loop_window, o.max_tool_result_bytes), (3, 2, 0, 2048));
        assert_eq!(o.on_agent_drift, DriftPolicy::Error);
        assert_eq!(o.retry, RetryPolicy { max_attempts: 2, ..RetryPolicy::default() });
        assert_eq!(o.lease.ttl_ms, 90_000);
        assert_eq!(o.lease.renew_every_ms, AgentOptions::default().lease.renew_every_ms);
    }

    #[test]
    fn only_the_agent_options_names_are_asked_for_and_other_properties_are_not_options() {
        let asked = std::cell::RefCell::new(Vec::new());
        let o = agent_options_of(|key| {
            asked.borrow_mut().push(key.to_string());
            Ok(match key {
                "maxSteps" => Some(json!(7)),
                _ => None,
            })
        })
        .unwrap();
        assert_eq!(o.max_steps, 7);
        let mut asked = asked.into_inner();
        asked.sort();
        let Value::Object(names) = serde_json::to_value(AgentOptions::default()).unwrap() else { panic!() };
        let mut expected: Vec<String> = names.keys().cloned().collect();
        expected.sort();
        assert_eq!(asked, expected);
        for name in
            ["maxSteps", "toolConcurrency", "onAgentDrift", "retry", "lease", "loopWindow", "maxToolResultBytes"]
        {
            assert!(expected.iter().any(|k| k == name), "{name}");
        }
        // Unknown properties (a typo, the JS-only parts) are not read as options: the defaults stay (a typo at
        // the top level is refused by `JsAgent::build`, over the JS object's keys).
        assert_eq!(options_of(json!({"maxStep": 3, "model": {}, "tools": []})).unwrap(), AgentOptions::default());
    }

    #[test]
    fn an_unknown_key_in_a_nested_agent_option_is_a_config_error_naming_it_and_its_option() {
        for (given, msg) in [
            (
                json!({"retry": {"maxAttemps": 2}}),
                "invalid agent options: retry: unknown key \"maxAttemps\" (it takes baseMs, capMs, deadlineMs, maxAttempts)",
            ),
            (
                json!({"lease": {"ttlMs": 60000, "ttl": 5}}),
                "invalid agent options: lease: unknown key \"ttl\" (it takes graceMs, renewEveryMs, ttlMs)",
            ),
        ] {
            let e = options_of(given.clone()).unwrap_err();
            assert_eq!((e.code, e.message.as_str()), (ErrorCode::ConfigInvalid, msg), "{given}");
        }
        assert_eq!(options_of(json!({"retry": {"maxAttempts": 2}})).unwrap().retry.max_attempts, 2);
    }

    #[test]
    fn a_decision_needs_approved_except_beside_an_answer_as_the_http_route_does() {
        let d = |approved, answer| decision_of("ap".into(), approved, Some("n".into()), answer);
        assert!(d(Some(true), None).unwrap().approved);
        assert!(!d(Some(false), None).unwrap().approved);
        let answered = d(None, Some(json!("yes"))).unwrap();
        assert_eq!((answered.approved, answered.answer), (true, Some(json!("yes"))));
        let declined = d(Some(false), Some(json!("yes"))).unwrap();
        assert!(!declined.approved, "an explicit approved: false wins");
        assert_eq!(declined.note.as_deref(), Some("n"));
        let e = d(None, None).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (ErrorCode::InvalidInput, "approved must be true or false (or give a question's `answer`)")
        );
    }

    #[test]
    fn wait_tools_are_an_agent_option_and_an_unknown_one_is_a_config_error() {
        use crate::runtime::WaitTool;
        let o = options_of(json!({"waitTools": ["ask_question", "sleep_for", "sleep_until"]})).unwrap();
        assert_eq!(o.wait_tools, vec![WaitTool::AskQuestion, WaitTool::SleepFor, WaitTool::SleepUntil]);
        let e = options_of(json!({"waitTools": ["ask_question", "nap"]})).unwrap_err();
        assert_eq!(e.code, ErrorCode::ConfigInvalid);
        assert!(e.message.contains("unknown variant `nap`"), "{e}");
        assert_eq!(options_of(json!({"waitTools": "ask_question"})).unwrap_err().code, ErrorCode::ConfigInvalid);
    }

    #[test]
    fn a_bad_agent_option_is_a_config_error_naming_it() {
        for (given, needle) in [
            (json!({"maxSteps": "ten"}), "invalid type"),
            (json!({"onAgentDrift": "explode"}), "unknown variant `explode`"),
            (json!({"retry": {"maxAttempts": -1}}), "invalid value"),
            (json!({"lease": 5}), "invalid type"),
            (json!({"toolConcurrency": 1.5}), "invalid type"),
        ] {
            let e = options_of(given.clone()).unwrap_err();
            assert_eq!(e.code, ErrorCode::ConfigInvalid, "{given}");
            assert!(e.message.starts_with("invalid agent options: ") && e.message.contains(needle), "{given}: {e}");
        }
        let e = agent_options_of(|_| Err(Error::new(ErrorCode::ConfigInvalid, "lease: not JSON"))).unwrap_err();
        assert_eq!((e.code, e.message.as_str()), (ErrorCode::ConfigInvalid, "lease: not JSON"));
    }
}
