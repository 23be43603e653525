//! The JSON contract of both shells, defined once: what the HTTP API ([`crate::front::api`], served by the Worker)
//! and the npm package (`src/front/bindings/` under `js/`) accept and return. Each shape below is the one both
//! speak; a shell only moves it across its boundary. The TypeScript declarations of these shapes (and of the
//! runtime's results they carry) are generated from the Rust definitions by ts-rs (cargo feature `ts`,
//! `js/scripts/gen-types.sh`), so the npm package's types cannot drift from what the core sends.
//!
//! * **A send** ([`SendRequest`]): `{"input": "text" | [messages], "businessState"?}` — the body of
//!   `POST /runs/{id}` and `POST /deliveries/{id}`, and the document the npm package's `agent.send(input,
//!   {sessionId, businessState})` and `agent.runOnce(deliveryId, input, {businessState})` hand the bindings.
//!   [`parse_input`] is the one reading of `input`.
//! * **An execution's result**: [`crate::runtime::RunResult`] (send, resume, approvals), the same JSON from
//!   both shells (the npm package adds `events` when asked for).
//! * **A delivered job's result**: [`crate::runtime::Delivery`], one shape for both shells:
//!   `{"outcome": "ran" | "acknowledged", "runId", "result"}` or `{"outcome": "awaiting-approval", "runId",
//!   "approvalId"}` (`runId` in every outcome; the npm package adds `events` when asked for).
//! * **A run as `GET /runs/{id}` shows it**: [`RunView`].
//! * **Nothing to resume**: [`NothingToResume`], `{"runId" | "sessionId", "resumed": false, "reason": "nothing to
//!   resume"}` — the answer of `POST /runs/{id}/resume` and `POST /sessions/{id}/resume`, and what the npm
//!   package's `agent.resume(id)` and `session.resume()` resolve to, when there is nothing to finish.
//! * **What a JS tool is told about its call**: [`ToolCallContext`].
//! * **The HTTP API's other answers** (the Worker only): [`ErrorReply`] (every refusal), [`Health`],
//!   [`Accepted`] (`Prefer: respond-async`), [`RunList`], [`RunDeleted`], [`SessionHistory`], [`SessionDeleted`],
//!   [`SessionDiscarded`], [`ScheduleList`], [`SweepView`]. Each route's answer is one of these or a runtime
//!   result; none is built by hand.

use crate::core::checkpoint::{Checkpoint, FinishReason, RunStatus};
use crate::core::error::{Error, ErrorInfo, Result};
use crate::core::events::HealRecord;
use crate::core::fingerprint::Fingerprint;
use crate::core::transcript::{Message, Usage};
use crate::core::wire::json_text;
use crate::runtime::{Input, NextAttempt, ScheduleStatus, SendOptions, SessionTurn, ToolContext};
use crate::store::PendingRun;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A send: the body of `POST /runs/{id}` and `POST /deliveries/{id}`, and what the npm package's `send` and
/// `runOnce` pass to the bindings. Unknown fields are refused (`STEADFAST_INVALID_INPUT`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SendRequest {
    /// Text (one user message) or an array of `{role, content}` messages; absent, `null` or blank text sends
    /// nothing (an unfinished run just resumes). See [`parse_input`].
    #[serde(default)]
    pub input: Option<Value>,
    /// Business state a new run starts with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub business_state: Option<Value>,
    /// Queue the input for the execution that holds the run instead of waiting for it (steering; see
    /// `SendOptions::queue`). HTTP also takes `Prefer: queue`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub queue: bool,
    /// With `queue`: stop the current turn's calls that have not started when the message is applied.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interrupt: bool,
}

impl SendRequest {
    /// Parses a send document (see [`body_from_json`]).
    pub fn from_json(text: &str) -> Result<SendRequest> {
        body_from_json(text)
    }

    /// The runtime input; the business state, `queue` and `interrupt` go into `opts`.
    pub fn into_options(self, opts: &mut SendOptions) -> Result<Input> {
        opts.business_state = self.business_state;
        opts.queue = self.queue;
        opts.interrupt = self.interrupt;
        parse_input(self.input)
    }
}

/// Reads a JSON request body into `T`. The body must be a JSON object: serde would also read a struct from a
/// JSON array (its fields by position, so `["text"]` would be a send and `[true]` an approval), which no
/// client means. `STEADFAST_INVALID_INPUT` naming the problem otherwise.
pub fn body_from_json<T: DeserializeOwned>(text: &str) -> Result<T> {
    if !text.trim_start().starts_with('{') {
        return Err(Error::invalid_input("the body must be a JSON object ({...})"));
    }
    serde_json::from_str(text).map_err(|e| Error::invalid_input(format!("invalid JSON body: {e}")))
}

/// Reads a send's `input`: a string is one user message (blank: none); an array holds messages, of which
/// only system and user messages, or stored history without tool calls, may be sent (a tool result or an
/// assistant turn with tool calls is refused, naming its index); absent or `null` is no input. Anything else
/// is `STEADFAST_INVALID_INPUT`.
pub fn parse_input(v: Option<Value>) -> Result<Input> {
    match v {
        None | Some(Value::Null) => Ok(Input(Vec::new())),
        Some(Value::String(s)) if s.trim().is_empty() => Ok(Input(Vec::new())),
        Some(Value::String(s)) => Ok(Input(vec![Message::user(s)])),
        Some(Value::Array(items)) => {
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.into_iter().enumerate() {
                // Read from its text: the reader of stored messages, not a second instance of it for values (the
                // Worker's size budget; an input array is small).
                let m: Message = serde_json::from_str(&json_text(&item)).map_err(|e| {
                    Error::invalid_input(format!("input[{i}] is not a message ({{role, content}}): {e}"))
                })?;
                if matches!(m, Message::Tool(_)) || !m.tool_calls().is_empty() {
                    return Err(Error::invalid_input(format!(
                        "input[{i}]: only system and user messages (or stored history) may be sent"
                    )));
                }
                out.push(m);
            }
            Ok(Input(out))
        }
        Some(_) => Err(Error::invalid_input("`input` must be a string or an array of messages")),
    }
}

/// A run as `GET /runs/{id}` shows it: its latest state, without the runtime's bookkeeping (journal
/// position, held results, queued input, intents, extension state).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase")]
pub struct RunView {
    /// Run id.
    pub run_id: String,
    /// `in-progress`, `awaiting-approval` or `finished`.
    pub status: RunStatus,
    /// Why it finished or paused (`null` while in progress).
    pub finish_reason: Option<FinishReason>,
    /// Model turns the current run took.
    pub step: u32,
    /// Token usage of the current run.
    pub usage: Usage,
    /// The whole transcript.
    pub messages: Vec<Message>,
    /// Pending approvals (empty unless `awaiting-approval`).
    pub approval_ids: Vec<String>,
    /// The last failed attempt (`null` once progress was saved after it).
    pub last_error: Option<ErrorInfo>,
    /// Failed attempts in a row.
    pub attempts: u32,
    /// Whether the recovery sweep gave up on it (still resumable by hand).
    pub quarantined: bool,
    /// The agent that wrote the state (`null` for states written before fingerprints).
    pub fingerprint: Option<Fingerprint>,
    /// Business state (`null` when none).
    pub business_state: Option<Value>,
    /// When the state was saved (ms since the epoch, by the writer's clock).
    pub saved_at: u64,
    /// What self-healing did in this run, oldest first (the newest 50).
    pub heal_actions: Vec<HealRecord>,
    /// The child runs of its sub-agent calls, in call order.
    #[serde(default)]
    pub children: Vec<crate::runtime::ChildRun>,
    /// For a sub-agent's child run: the run whose call started it (`null` otherwise).
    #[serde(default)]
    pub parent_run_id: Option<String>,
    /// What its children whose results it has not recorded yet have spent so far (read from their own
    /// checkpoints: not in `usage` until their results are recorded, with their whole spend); `null` when none.
    #[serde(default)]
    pub delegated_in_flight: Option<Usage>,
}

impl RunView {
    /// The view of `cp` with its child runs (`children`, from [`crate::runtime::Agent::children`]) and what the
    /// ones whose results `cp` has not recorded have spent.
    pub fn with_children(cp: Checkpoint, children: Vec<crate::runtime::ChildRun>) -> RunView {
        let recorded = |id: &str| cp.messages.iter().any(|m| matches!(m, Message::Tool(r) if r.tool_call_id == id));
        let mut in_flight: Option<Usage> = None;
        for c in children.iter().filter(|c| !recorded(&c.tool_call_id)) {
            if let Some(u) = c.usage {
                in_flight.get_or_insert_with(Usage::default).add(u);
            }
        }
        RunView { children, delegated_in_flight: in_flight, ..RunView::from(cp) }
    }
}

impl From<Checkpoint> for RunView {
    fn from(cp: Checkpoint) -> RunView {
        let parent_run_id = crate::core::ids::subagent_parent(&cp.run_id).map(|(p, _)| p.to_string());
        let usage = cp.usage_view();
        RunView {
            run_id: cp.run_id,
            status: cp.status,
            finish_reason: cp.finish_reason,
            step: cp.step_index,
            usage,
            messages: cp.messages,
            approval_ids: cp.approval_ids,
            last_error: cp.last_error,
            attempts: cp.attempts,
            quarantined: cp.quarantined,
            fingerprint: cp.fingerprint,
            business_state: cp.business_state,
            saved_at: cp.saved_at,
            heal_actions: HealRecord::log(cp.ext.as_ref()),
            children: Vec::new(),
            parent_run_id,
            delegated_in_flight: None,
        }
    }
}

/// What a JS tool's `execute(args, ctx)` receives as `ctx` (the npm package's `ToolContext`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export, rename = "ToolContext"))]
#[serde(rename_all = "camelCase")]
pub struct ToolCallContext {
    /// Run id.
    pub run_id: String,
    /// The call id the model gave: unique within the run, not across runs. Key effects by `idempotencyKey`.
    pub tool_call_id: String,
    /// For an approved call, the approval id.
    pub approval_id: Option<String>,
    /// The approval id for an approved call, else the call key (32 hex digits, unique across runs, unchanged
    /// when the same call runs again on resume): send it as `Idempotency-Key`, and look an effect up by it in
    /// `reconcile`.
    pub idempotency_key: String,
    /// The token of the event wait this call may answer with (`return ctx.waitForEvent()`): hand it to whoever
    /// will deliver the event (`agent.events.deliver(token, payload)`, `POST /events/{token}`). The same for the
    /// same call on every resume; a capability: whoever holds it may deliver.
    pub wait_token: String,
    /// The agent's clock when the call started (ms since the epoch): what `ctx.sleepFor(ms)` counts from.
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    pub now: u64,
    /// The W3C `traceparent` of the call's `execute_tool` span when the agent traces (`tracing`): send it on as
    /// the `traceparent` header of the calls the tool makes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub traceparent: Option<String>,
}

impl From<&ToolContext> for ToolCallContext {
    fn from(ctx: &ToolContext) -> ToolCallContext {
        ToolCallContext {
            run_id: ctx.run_id.clone(),
            tool_call_id: ctx.tool_call_id.clone(),
            approval_id: ctx.approval_id.clone(),
            idempotency_key: ctx.idempotency_key().to_string(),
            wait_token: ctx.wait_token.clone(),
            now: ctx.now,
            traceparent: ctx.traceparent.clone(),
        }
    }
}

/// Nothing to resume: what a resume answers (`POST /runs/{id}/resume`, `POST /sessions/{id}/resume`, the npm
/// package's `agent.resume(id)` and `session.resume()`) when the run, or the session's newest turn, has nothing
/// left to finish (finished, waiting on a person, or never started). The one shape both shells answer; a
/// resume that executed answers a [`crate::runtime::RunResult`] instead (which has no `resumed` field).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase")]
pub struct NothingToResume {
    /// The run asked about (a run's resume).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub run_id: Option<String>,
    /// The session asked about (a session's resume).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub session_id: Option<String>,
    /// Always `false`: nothing was resumed.
    #[cfg_attr(feature = "ts", ts(type = "false"))]
    pub resumed: bool,
    /// Always `"nothing to resume"`.
    pub reason: String,
}

impl NothingToResume {
    const REASON: &'static str = "nothing to resume";

    /// Nothing to resume in run `id`.
    pub fn run(id: impl Into<String>) -> NothingToResume {
        NothingToResume { run_id: Some(id.into()), session_id: None, resumed: false, reason: Self::REASON.into() }
    }

    /// Nothing to resume in session `id`.
    pub fn session(id: impl Into<String>) -> NothingToResume {
        NothingToResume { run_id: None, session_id: Some(id.into()), resumed: false, reason: Self::REASON.into() }
    }
}

/// Every refusal of the HTTP API: `{"error": {code, message, retryable, ...}}` with the error's HTTP status.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
pub struct ErrorReply {
    /// The coded error.
    pub error: Error,
}

/// `GET /health`: the service is up.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
pub struct Health {
    /// Always `true`.
    #[cfg_attr(feature = "ts", ts(type = "true"))]
    pub ok: bool,
    /// Always `"steadfast"`.
    pub service: String,
    /// The crate's version.
    pub version: String,
    /// The circuit breakers of the process that answered (a Worker isolate's: `breaker` in the configuration),
    /// by dependency (a provider's host, a webhook's or MCP server's host); left out while there are none.
    // Written by `Breakers::json`, not by this derive.
    #[serde(default, skip_serializing)]
    #[cfg_attr(feature = "ts", ts(as = "Option<Vec<crate::runtime::BreakerView>>", optional))]
    pub breakers: Vec<crate::runtime::BreakerView>,
}

impl Health {
    /// This build's health answer.
    pub fn now() -> Health {
        Health {
            ok: true,
            service: "steadfast".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            breakers: Vec::new(),
        }
    }
}

/// `202 Accepted` (`Prefer: respond-async`): the run has started and goes on in its object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase")]
pub struct Accepted {
    /// The run that started (a send's, an approval's or a delivery's run).
    pub run_id: String,
    /// Always `"accepted"`.
    #[cfg_attr(feature = "ts", ts(type = "\"accepted\""))]
    pub status: String,
}

impl Accepted {
    /// Run `run_id` was accepted.
    pub fn new(run_id: String) -> Accepted {
        Accepted { run_id, status: "accepted".into() }
    }
}

/// `GET /runs`: the unfinished runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
pub struct RunList {
    /// Each unfinished run with the sweep's plan for it.
    pub runs: Vec<ListedRun>,
}

/// One unfinished run as `GET /runs` lists it: the [`PendingRun`] and `next`, the sweep's plan for it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
pub struct ListedRun {
    /// The run as the store lists it.
    #[serde(flatten)]
    pub run: PendingRun,
    /// What the recovery sweep will do with it next.
    pub next: NextAttempt,
}

/// `DELETE /runs/{id}`: the run is deleted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase")]
pub struct RunDeleted {
    /// The run.
    pub run_id: String,
    /// Always `true`.
    #[cfg_attr(feature = "ts", ts(type = "true"))]
    pub deleted: bool,
}

/// `GET /sessions/{id}`: the session's turns, newest first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase")]
pub struct SessionHistory {
    /// The session.
    pub session_id: String,
    /// Its turns, newest first.
    pub turns: Vec<SessionTurn>,
}

/// `DELETE /sessions/{id}`: every turn is deleted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase")]
pub struct SessionDeleted {
    /// The session.
    pub session_id: String,
    /// How many turns were deleted.
    pub deleted_turns: u32,
}

/// `POST /sessions/{id}/discard-pending`: the unfinished newest turn dropped, if there was one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase")]
pub struct SessionDiscarded {
    /// The session.
    pub session_id: String,
    /// The run of the dropped turn (`null`: none was unfinished).
    pub discarded: Option<String>,
}

/// `GET /schedules`: each configured schedule's status.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
pub struct ScheduleList {
    /// In the configuration's order.
    pub schedules: Vec<ScheduleStatus>,
}

/// `GET /sweep`: the recovery sweep's stored state as the sweep wrote it, and whether its breaker is open.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
pub struct SweepView {
    /// The stored state's fields, as stored (a state stored by another version shows its own fields): the
    /// sweep's `SweepState`.
    #[serde(flatten)]
    pub state: serde_json::Map<String, Value>,
    /// `open` while a provider outage pauses the sweep, else `closed`.
    pub breaker: Breaker,
}

/// The recovery sweep's provider-outage breaker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "lowercase")]
pub enum Breaker {
    /// A provider outage: the sweep only probes.
    Open,
    /// The sweep resumes runs.
    Closed,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::error::ErrorCode;
    use crate::core::transcript::{ResultKind, ToolCall, ToolResult};
    use crate::runtime::{Rng, SplitMix64};
    use serde_json::json;

    /// Seeded cases per property; `STEADFAST_SEED=<n>` replays one.
    const CASES: u64 = 2_000;

    fn seeds() -> Vec<u64> {
        crate::seeds::seeds(0..CASES)
    }

    fn pick(rng: &SplitMix64, n: u64) -> u64 {
        rng.next_u64() % n
    }

    fn text(rng: &SplitMix64) -> String {
        ["", " ", "\n\t", "hi", "Charge order 7", "ünïcödé ✓", "{\"input\": 1}"][pick(rng, 7) as usize].to_string()
    }

    /// What an input item is, and what the contract says of it.
    enum Item {
        Sendable(Message),
        Refused(Value),
        NotAMessage(Value),
    }

    fn item(rng: &SplitMix64) -> Item {
        let call = |i: u64| ToolCall { id: format!("c{i}"), name: "t".into(), args: json!({"i": i}), invalid: None };
        match pick(rng, 8) {
            0 => Item::Sendable(Message::system(text(rng))),
            1 | 2 => Item::Sendable(Message::user(text(rng))),
            3 => Item::Sendable(Message::assistant(text(rng), vec![])),
            4 => {
                Item::Refused(serde_json::to_value(Message::assistant(text(rng), vec![call(rng.next_u64())])).unwrap())
            }
            5 => Item::Refused(
                serde_json::to_value(Message::Tool(ToolResult {
                    tool_call_id: "c1".into(),
                    name: "t".into(),
                    content: text(rng),
                    is_error: false,
                    kind: ResultKind::Execution,
                    usage: None,
                }))
                .unwrap(),
            ),
            6 => Item::NotAMessage(
                [json!(1), json!("user"), json!({"role": "robot", "content": "x"}), json!({})][pick(rng, 4) as usize]
                    .clone(),
            ),
            _ => Item::NotAMessage(json!({"role": "user"})),
        }
    }

    /// Every generated `input` is read the way the contract says: text is one user message (blank: none),
    /// arrays keep their sendable messages in order and are refused at the first item that is not a message
    /// or may not be sent (naming its index), absent and `null` are no input, anything else is refused. Every
    /// refusal is `STEADFAST_INVALID_INPUT`.
    #[test]
    fn input_is_read_the_same_way_for_every_generated_case() {
        for seed in seeds() {
            let rng = SplitMix64::new(seed);
            let repro = crate::seeds::repro(seed, "contract::tests::input_is_read");
            let (value, expected): (Option<Value>, std::result::Result<Vec<Message>, String>) = match pick(&rng, 6) {
                0 => (None, Ok(vec![])),
                1 => (Some(Value::Null), Ok(vec![])),
                2 => {
                    let t = text(&rng);
                    let want = if t.trim().is_empty() { vec![] } else { vec![Message::user(t.clone())] };
                    (Some(Value::String(t)), Ok(want))
                }
                3 => (
                    Some(
                        [json!(7), json!(true), json!({"role": "user", "content": "x"})][pick(&rng, 3) as usize]
                            .clone(),
                    ),
                    Err("must be a string or an array".into()),
                ),
                _ => {
                    let n = pick(&rng, 6);
                    let mut values = Vec::new();
                    let mut expected: std::result::Result<Vec<Message>, String> = Ok(vec![]);
                    for i in 0..n {
                        match item(&rng) {
                            Item::Sendable(m) => {
                                values.push(serde_json::to_value(&m).unwrap());
                                if let Ok(ms) = &mut expected {
                                    ms.push(m);
                                }
                            }
                            Item::Refused(v) => {
                                values.push(v);
                                if expected.is_ok() {
                                    expected = Err(format!("input[{i}]: only system and user messages"));
                                }
                            }
                            Item::NotAMessage(v) => {
                                values.push(v);
                                if expected.is_ok() {
                                    expected = Err(format!("input[{i}] is not a message"));
                                }
                            }
                        }
                    }
                    (Some(Value::Array(values)), expected)
                }
            };
            let shown = format!("{value:?}");
            match (parse_input(value.clone()), expected) {
                (Ok(Input(got)), Ok(want)) => assert_eq!(got, want, "{shown}; {repro}"),
                (Err(e), Err(want)) => {
                    assert_eq!(e.code, ErrorCode::InvalidInput, "{shown}; {repro}");
                    assert!(e.message.contains(&want), "{:?} should say {want:?}; {shown}; {repro}", e.message);
                }
                (got, want) => panic!("{shown}: got {got:?}, want {want:?}; {repro}"),
            }
            // The document form reads the same.
            let doc = match &value {
                Some(v) => json!({ "input": v }).to_string(),
                None => "{}".into(),
            };
            let via_doc = SendRequest::from_json(&doc).and_then(|r| r.into_options(&mut SendOptions::default()));
            assert_eq!(via_doc.map_err(|e| e.code), parse_input(value).map_err(|e| e.code), "{doc}; {repro}");
        }
    }

    #[test]
    fn a_send_document_refuses_unknown_fields_and_keeps_business_state_queue_and_interrupt() {
        let mut opts = SendOptions::default();
        let input = SendRequest::from_json(r#"{"input": "hi", "businessState": {"order": 7}}"#)
            .unwrap()
            .into_options(&mut opts)
            .unwrap();
        assert_eq!(
            (input.0, opts.business_state, opts.queue),
            (vec![Message::user("hi")], Some(json!({"order": 7})), false)
        );
        let mut opts = SendOptions::default();
        SendRequest::from_json(r#"{"input": "stop", "queue": true, "interrupt": true}"#)
            .unwrap()
            .into_options(&mut opts)
            .unwrap();
        assert_eq!((opts.queue, opts.interrupt), (true, true));
        for bad in [r#"{"inputs": "hi"}"#, r#"{"input": "hi", "sessionId": "a"}"#, "[]", "\"hi\"", "{"] {
            assert_eq!(SendRequest::from_json(bad).unwrap_err().code, ErrorCode::InvalidInput, "{bad}");
        }
    }

    /// The view `GET /runs/{id}` returned before it was a type, as the oracle for generated checkpoints.
    fn hand_built_view(cp: &Checkpoint) -> Value {
        json!({
            "runId": cp.run_id,
            "status": cp.status,
            "finishReason": cp.finish_reason,
            "step": cp.step_index,
            "usage": cp.usage_view(),
            "messages": cp.messages,
            "approvalIds": cp.approval_ids,
            "lastError": cp.last_error,
            "attempts": cp.attempts,
            "quarantined": cp.quarantined,
            "fingerprint": cp.fingerprint,
            "businessState": cp.business_state,
            "savedAt": cp.saved_at,
            // The heal log as the runtime keeps it in the hook state.
            "healActions": cp.ext.as_ref().and_then(|e| e.get("healLog")).cloned().unwrap_or(json!([])),
            // Listed by `GET /runs/{id}` from the store (none in the view of a checkpoint alone).
            "children": [],
            "parentRunId": cp.run_id.split_once(".sub-").map(|(parent, _)| parent),
            // Added up from the children (none here).
            "delegatedInFlight": null,
        })
    }

    fn checkpoint(rng: &SplitMix64) -> Checkpoint {
        let maybe = |p: u64| pick(rng, p) == 0;
        let status = [RunStatus::InProgress, RunStatus::AwaitingApproval, RunStatus::Finished][pick(rng, 3) as usize];
        let reasons = [
            FinishReason::Stop,
            FinishReason::MaxSteps,
            FinishReason::LoopDetected,
            FinishReason::AwaitingApproval,
            FinishReason::Aborted,
        ];
        Checkpoint {
            // A sub-agent's child run one time in three (its view names its parent).
            run_id: match pick(rng, 3) {
                0 => format!("run-{}.sub-research-{:012x}", rng.next_u64() % 1000, rng.next_u64() >> 16),
                _ => format!("run-{}", rng.next_u64() % 1000),
            },
            messages: (0..pick(rng, 4)).map(|i| Message::user(format!("m{i}"))).collect(),
            step_index: pick(rng, 20) as u32,
            usage: Usage::tokens(rng.next_u64() % 10_000, rng.next_u64() % 10_000),
            business_state: maybe(2).then(|| json!({"n": rng.next_u64() % 100})),
            status,
            approval_ids: (0..pick(rng, 3)).map(|i| format!("ap_{i}")).collect(),
            fingerprint: maybe(2).then(|| Fingerprint {
                model: "mock".into(),
                tools: [("t".to_string(), "abcd".to_string())].into(),
                instructions: "ef01".into(),
                hash: format!("{:016x}", rng.next_u64()),
            }),
            started_tool_call_ids: vec!["c9".into()],
            quarantined: maybe(3),
            last_error: maybe(2).then(|| ErrorInfo {
                code: ErrorCode::ProviderUnavailable,
                message: "503".into(),
                retryable: true,
            }),
            attempts: pick(rng, 12) as u32,
            finish_reason: maybe(2).then(|| reasons[pick(rng, 5) as usize]),
            ext: maybe(2).then(|| match maybe(2) {
                true => json!({"progressGuard": {}}),
                false => json!({"healLog": (0..pick(rng, 3)).map(|i| json!({
                    "tool": "t", "toolCallId": format!("c{i}"), "action": "hint", "reason": "failed twice",
                    "count": i + 1, "step": i + 2, "at": 1_700_000_000_000u64 + i,
                })).collect::<Vec<_>>()}),
            }),
            seq: rng.next_u64() % 1_000,
            saved_at: 1_700_000_000_000 + rng.next_u64() % 1_000_000,
            ..Checkpoint::default()
        }
    }

    /// The typed run view serialises exactly as the hand-built JSON it replaced (same keys, `null` for an
    /// absent optional field), over generated checkpoints, and reads back to itself.
    #[test]
    fn the_run_view_keeps_the_json_it_had_for_generated_checkpoints() {
        for seed in seeds() {
            let cp = checkpoint(&SplitMix64::new(seed));
            let repro = crate::seeds::repro(seed, "contract::tests::the_run_view");
            let view = RunView::from(cp.clone());
            let json = serde_json::to_value(&view).unwrap();
            assert_eq!(json, hand_built_view(&cp), "{repro}");
            assert_eq!(serde_json::from_value::<RunView>(json).unwrap(), view, "{repro}");
        }
    }

    /// The HTTP API's replies, typed, serialise exactly as the `json!` documents the API built by hand before
    /// (the oracle below), over generated values: listed runs (a pending run and its next attempt), sessions,
    /// deletions, `202`, health, errors, nothing to resume, and the sweep's view of its stored state.
    #[test]
    fn the_reply_types_keep_the_json_the_api_built_by_hand_for_generated_values() {
        use crate::core::sweep::{Outage, SweepState};
        fn v<T: Serialize>(x: &T) -> Value {
            serde_json::to_value(x).unwrap()
        }
        for seed in seeds() {
            let rng = SplitMix64::new(seed);
            let repro = crate::seeds::repro(seed, "contract::tests::the_reply_types");
            let cp = checkpoint(&rng);
            let id = cp.run_id.clone();
            // GET /runs: each pending run with `next` set into it.
            let runs: Vec<PendingRun> = (0..pick(&rng, 3)).map(|_| PendingRun::of(&checkpoint(&rng))).collect();
            let next: Vec<NextAttempt> = runs
                .iter()
                .map(|_| NextAttempt {
                    plan: ["next-tick", "backoff", "outage"][pick(&rng, 3) as usize].into(),
                    at: (pick(&rng, 2) == 0).then(|| rng.next_u64() % 1_000_000),
                })
                .collect();
            let mut shown = Vec::new();
            for (run, next) in runs.iter().zip(&next) {
                let mut r = serde_json::to_value(run).unwrap();
                r["next"] = serde_json::to_value(next).unwrap();
                shown.push(r);
            }
            let typed = RunList {
                runs: runs
                    .iter()
                    .zip(&next)
                    .map(|(run, next)| ListedRun { run: run.clone(), next: next.clone() })
                    .collect(),
            };
            assert_eq!(v(&typed), json!({ "runs": shown }), "{repro}");
            // Deletion, 202, nothing to resume (a run's and a session's), session replies.
            assert_eq!(v(&RunDeleted { run_id: id.clone(), deleted: true }), json!({"runId": id, "deleted": true}));
            assert_eq!(v(&Accepted::new(id.clone())), json!({"runId": id, "status": "accepted"}));
            assert_eq!(
                v(&NothingToResume::run(id.clone())),
                json!({"runId": id, "resumed": false, "reason": "nothing to resume"})
            );
            assert_eq!(
                v(&NothingToResume::session(id.clone())),
                json!({"sessionId": id, "resumed": false, "reason": "nothing to resume"})
            );
            let n = pick(&rng, 9) as u32;
            assert_eq!(
                v(&SessionDeleted { session_id: id.clone(), deleted_turns: n }),
                json!({"sessionId": id, "deletedTurns": n})
            );
            let discarded = (pick(&rng, 2) == 0).then(|| format!("{id}.turn-{n}"));
            assert_eq!(
                v(&SessionDiscarded { session_id: id.clone(), discarded: discarded.clone() }),
                json!({"sessionId": id, "discarded": discarded})
            );
            assert_eq!(
                v(&SessionHistory { session_id: id.clone(), turns: vec![] }),
                json!({"sessionId": id, "turns": []})
            );
            assert_eq!(v(&ScheduleList { schedules: vec![] }), json!({"schedules": []}));
            // An error, with its optional fields.
            let mut e = Error::new(ErrorCode::ALL[pick(&rng, ErrorCode::ALL.len() as u64) as usize], "why");
            if pick(&rng, 2) == 0 {
                e = e.with_run(&id).with_retry_after_ms(Some(rng.next_u64() % 10_000));
            }
            assert_eq!(v(&ErrorReply { error: e.clone() }), json!({ "error": e }), "{repro}");
            // The sweep's state as stored, with `breaker` set into it.
            let state = SweepState {
                provider_failures: pick(&rng, 5) as u32,
                outage: (pick(&rng, 2) == 0).then(|| Outage { since: 1, probes: 2, next_probe_at: 3 }),
                cursor: (pick(&rng, 2) == 0).then(|| id.clone()),
                page: (pick(&rng, 2) == 0).then(|| "p".into()),
                ..SweepState::default()
            };
            let Value::Object(stored) = serde_json::to_value(&state).unwrap() else { panic!() };
            let mut hand = stored.clone();
            let open = state.outage.is_some();
            hand.insert("breaker".into(), Value::from(if open { "open" } else { "closed" }));
            let breaker = if open { Breaker::Open } else { Breaker::Closed };
            assert_eq!(v(&SweepView { state: stored, breaker }), Value::Object(hand), "{repro}");
        }
        let version = env!("CARGO_PKG_VERSION");
        assert_eq!(v(&Health::now()), json!({"ok": true, "service": "steadfast", "version": version}));
    }

    #[test]
    fn a_tool_is_told_its_idempotency_key_wait_token_and_start_time() {
        let key = crate::core::idempotency::call_key("r:00", "call_1");
        let ctx = |approval: Option<&str>| ToolContext {
            run_id: "r".into(),
            tool_call_id: "call_1".into(),
            call_key: key.clone(),
            approval_id: approval.map(String::from),
            abort: crate::runtime::AbortSignal::new(),
            wait_token: "ab".repeat(32),
            now: 1_700_000_000_123,
            traceparent: None,
        };
        assert_eq!(
            serde_json::to_value(ToolCallContext::from(&ctx(None))).unwrap(),
            json!({"runId": "r", "toolCallId": "call_1", "approvalId": null, "idempotencyKey": key,
                   "waitToken": "ab".repeat(32), "now": 1_700_000_000_123u64})
        );
        assert_eq!(ToolCallContext::from(&ctx(Some("ap_1"))).idempotency_key, "ap_1");
    }
}
