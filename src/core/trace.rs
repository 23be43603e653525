//! Traces of executions (M41-style observability): OpenTelemetry spans in the GenAI semantic conventions, made
//! from what an execution does, and their OTLP/HTTP JSON encoding. Sans-IO: the runtime tells a [`Recorder`]
//! what happens (with the time), takes the spans that ended, and hands them to an exporter.
//!
//! One trace per execution: an `invoke_agent {agent}` span, a `chat {model}` span per model turn (its retries
//! and fallbacks are events on it), an `execute_tool {tool}` span per tool call. The execution before it on the
//! same run (the trace context kept in the run's hook state under [`TRACE_KEY`]) is a span link, so a run that
//! crashed and resumed three times reads as four linked traces. A W3C `traceparent` the caller sent makes the
//! execution's span a child of the caller's. Message contents are left out unless asked for
//! ([`TraceOptions::contents`]), as the conventions advise.

use super::checkpoint::RunStatus;
use super::error::Error;
use super::events::Event;
use super::transcript::{ResultKind, ToolCall, Usage};
use std::fmt::Write;

/// The hook-state key under which a run keeps the trace context of its newest execution (`{"traceId",
/// "spanId"}`, hex): the next execution links to it.
pub const TRACE_KEY: &str = "trace";

/// The most spans one execution keeps before handing them on (see [`Recorder::take_ended`]); past it, spans are
/// dropped and counted.
pub const MAX_OPEN_SPANS: usize = 1_000;

/// What traces carry beyond the conventions' required attributes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TraceOptions {
    /// Put message contents on the spans (tool arguments and results, the model's text): off by default, as
    /// the GenAI conventions say (they may hold personal data).
    pub contents: bool,
}

/// A span's place: a trace id and a span id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SpanContext {
    /// 16 bytes, not all zero.
    pub trace_id: [u8; 16],
    /// 8 bytes, not all zero.
    pub span_id: [u8; 8],
}

impl SpanContext {
    /// The W3C `traceparent` header naming this span (sampled).
    pub fn traceparent(&self) -> String {
        format!("00-{}-{}-01", hex(&self.trace_id), hex(&self.span_id))
    }

    /// Reads a W3C `traceparent` header (version `00`, or a later version's first four fields); `None` for
    /// anything else, all-zero ids among them (the header is then ignored, as the W3C spec says).
    pub fn parse_traceparent(header: &str) -> Option<SpanContext> {
        let mut parts = header.trim().split('-');
        let (version, trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let later = version != "00";
        if version.len() != 2 || version == "ff" || flags.len() != 2 || (!later && parts.next().is_some()) {
            return None;
        }
        unhex::<1>(version)?;
        unhex::<1>(flags)?;
        let ctx = SpanContext { trace_id: unhex(trace)?, span_id: unhex(span)? };
        ctx.is_valid().then_some(ctx)
    }

    /// The context as kept in a run's hook state (hex ids).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({ "traceId": hex(&self.trace_id), "spanId": hex(&self.span_id) })
    }

    /// Reads [`SpanContext::to_json`]'s form; `None` for anything else.
    pub fn from_json(v: &serde_json::Value) -> Option<SpanContext> {
        let ctx =
            SpanContext { trace_id: unhex(v.get("traceId")?.as_str()?)?, span_id: unhex(v.get("spanId")?.as_str()?)? };
        ctx.is_valid().then_some(ctx)
    }

    fn is_valid(&self) -> bool {
        self.trace_id != [0; 16] && self.span_id != [0; 8]
    }
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        put(&mut s, format_args!("{b:02x}"));
    }
    s
}

fn unhex<const N: usize>(s: &str) -> Option<[u8; N]> {
    let mut out = [0; N];
    unhex_into(s, &mut out).map(|()| out)
}

/// Reads lowercase hex `s` into `out` (exactly twice its length in digits). One instance for every length.
#[inline(never)]
fn unhex_into(s: &str, out: &mut [u8]) -> Option<()> {
    let digits = s.as_bytes();
    if digits.len() != out.len() * 2 {
        return None;
    }
    for (i, pair) in digits.chunks(2).enumerate() {
        let val = |c: u8| match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        };
        out[i] = val(pair[0])? << 4 | val(pair[1])?;
    }
    Some(())
}

/// An attribute's value.
#[derive(Clone, Debug, PartialEq)]
pub enum AttrValue {
    /// A string.
    Str(String),
    /// An integer.
    Int(i64),
    /// A boolean.
    Bool(bool),
    /// A floating-point number.
    Double(f64),
    /// A list of strings.
    Strs(Vec<String>),
}

impl From<&str> for AttrValue {
    fn from(s: &str) -> Self {
        AttrValue::Str(s.to_string())
    }
}

impl From<String> for AttrValue {
    fn from(s: String) -> Self {
        AttrValue::Str(s)
    }
}

impl From<u64> for AttrValue {
    fn from(n: u64) -> Self {
        AttrValue::Int(i64::try_from(n).unwrap_or(i64::MAX))
    }
}

impl From<u32> for AttrValue {
    fn from(n: u32) -> Self {
        AttrValue::Int(n.into())
    }
}

impl From<bool> for AttrValue {
    fn from(b: bool) -> Self {
        AttrValue::Bool(b)
    }
}

/// Attributes, in the order they were set (a key set twice keeps its last value).
pub type Attrs = Vec<(&'static str, AttrValue)>;

fn set(attrs: &mut Attrs, key: &'static str, value: impl Into<AttrValue>) {
    put_attr(attrs, key, value.into());
}

/// [`set`]'s one instance.
#[inline(never)]
fn put_attr(attrs: &mut Attrs, key: &'static str, value: AttrValue) {
    match attrs.iter_mut().find(|(k, _)| *k == key) {
        Some(slot) => slot.1 = value,
        None => attrs.push((key, value)),
    }
}

/// A span's kind (OTLP's numbers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpanKind {
    /// Work inside the process (an agent's run, a tool).
    Internal = 1,
    /// A call to another service (a model provider).
    Client = 3,
}

/// How a span ended.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum SpanStatus {
    /// Nothing to say (it did its work).
    #[default]
    Unset,
    /// It failed: why.
    Error(String),
}

/// Something that happened during a span.
#[derive(Clone, Debug, PartialEq)]
pub struct SpanEvent {
    /// Its name (`steadfast.retry`, …).
    pub name: &'static str,
    /// When (ms since the epoch).
    pub at: u64,
    /// Its attributes.
    pub attrs: Attrs,
}

/// One span.
#[derive(Clone, Debug, PartialEq)]
pub struct Span {
    /// Its trace and id.
    pub context: SpanContext,
    /// The span it is part of (none: a trace's root).
    pub parent: Option<[u8; 8]>,
    /// `invoke_agent {agent}`, `chat {model}`, `execute_tool {tool}`.
    pub name: String,
    /// Its kind.
    pub kind: SpanKind,
    /// Start and end (ms since the epoch).
    pub start: u64,
    /// End; the start while the span is open.
    pub end: u64,
    /// Its attributes.
    pub attrs: Attrs,
    /// Its events.
    pub events: Vec<SpanEvent>,
    /// Spans it follows from (the execution before, on an execution's span).
    pub links: Vec<SpanContext>,
    /// How it ended.
    pub status: SpanStatus,
}

impl Span {
    /// The value of attribute `key`, if set.
    pub fn attr(&self, key: &str) -> Option<&AttrValue> {
        self.attrs.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }
}

/// What an execution is about, known when it starts.
#[derive(Clone, Debug, Default)]
pub struct ExecutionInfo {
    /// The run.
    pub run_id: String,
    /// The agent's name (its label).
    pub agent: String,
    /// The agent's model id.
    pub model: String,
    /// The lease epoch it holds.
    pub epoch: u64,
    /// The execution's own span ([`execution_context`]).
    pub context: Option<SpanContext>,
    /// The caller's span (a W3C `traceparent` it sent, or the lead's tool span for a sub-agent's run).
    pub parent: Option<SpanContext>,
    /// The run's previous execution (kept in its hook state under [`TRACE_KEY`]).
    pub previous: Option<SpanContext>,
}

/// The span of execution `execution` (its lease owner id, unique per execution): in the trace of `parent` when it
/// has one, else in a trace of its own; the ids are a hash of the execution's id.
pub fn execution_context(parent: Option<SpanContext>, execution: &str) -> SpanContext {
    let mut state = seed_of(execution);
    let trace_id = match parent {
        Some(p) => p.trace_id,
        None => {
            let (a, b) = (mix(&mut state), mix(&mut state));
            let mut id = [0; 16];
            id[..8].copy_from_slice(&a.to_be_bytes());
            id[8..].copy_from_slice(&b.to_be_bytes());
            id
        }
    };
    SpanContext { trace_id, span_id: span_id(&mut state) }
}

/// FNV-1a of `s`: the seed of an execution's ids.
fn seed_of(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// Builds one execution's spans from what the runtime tells it (see the module docs).
#[derive(Debug)]
pub struct Recorder {
    opts: TraceOptions,
    root: Span,
    /// The model turn in progress, if one is.
    chat: Option<Span>,
    /// Tool calls in progress, by call id.
    tools: Vec<(String, Span)>,
    ended: Vec<Span>,
    /// Spans dropped past [`MAX_OPEN_SPANS`].
    pub dropped: u64,
    next_id: u64,
    /// The step the next model turn is (for its span's attribute).
    step: u32,
}

impl Recorder {
    /// An execution starting at `now`.
    pub fn start(info: &ExecutionInfo, opts: TraceOptions, now: u64) -> Recorder {
        let context = info.context.unwrap_or_else(|| execution_context(info.parent, &info.run_id));
        // The other spans' ids follow from the execution's own.
        let next_id = u64::from_be_bytes(context.span_id) ^ seed_of(&info.run_id);
        let mut attrs = Attrs::new();
        set(&mut attrs, "gen_ai.operation.name", "invoke_agent");
        set(&mut attrs, "gen_ai.agent.name", info.agent.as_str());
        set(&mut attrs, "gen_ai.conversation.id", info.run_id.as_str());
        set(&mut attrs, "gen_ai.request.model", info.model.as_str());
        set(&mut attrs, "steadfast.run.id", info.run_id.as_str());
        set(&mut attrs, "steadfast.lease.epoch", info.epoch);
        let root = Span {
            context,
            parent: info.parent.map(|p| p.span_id),
            name: format!("invoke_agent {}", info.agent),
            kind: SpanKind::Internal,
            start: now,
            end: now,
            attrs,
            events: Vec::new(),
            links: info.previous.into_iter().collect(),
            status: SpanStatus::Unset,
        };
        Recorder { opts, root, chat: None, tools: Vec::new(), ended: Vec::new(), dropped: 0, next_id, step: 0 }
    }

    /// The execution's span (its trace context: what the run keeps for the next execution's link).
    pub fn context(&self) -> SpanContext {
        self.root.context
    }

    /// The span a call made now belongs to: the tool call `tool_call_id`'s when it is in progress, the model
    /// turn's when one is, else the execution's (what `traceparent` headers name).
    pub fn current(&self, tool_call_id: Option<&str>) -> SpanContext {
        if let Some(id) = tool_call_id {
            if let Some((_, span)) = self.tools.iter().find(|(t, _)| t == id) {
                return span.context;
            }
        }
        self.chat.as_ref().map_or(self.root.context, |c| c.context)
    }

    fn child(&mut self, name: String, kind: SpanKind, now: u64) -> Span {
        Span {
            context: SpanContext { trace_id: self.root.context.trace_id, span_id: span_id(&mut self.next_id) },
            parent: Some(self.root.context.span_id),
            name,
            kind,
            start: now,
            end: now,
            attrs: Attrs::new(),
            events: Vec::new(),
            links: Vec::new(),
            status: SpanStatus::Unset,
        }
    }

    /// A tool call's span, starting at `now`.
    fn tool_span(&mut self, tool_call_id: &str, name: &str, now: u64) -> Span {
        let mut span = self.child(format!("execute_tool {name}"), SpanKind::Internal, now);
        set(&mut span.attrs, "gen_ai.operation.name", "execute_tool");
        set(&mut span.attrs, "gen_ai.tool.name", name);
        set(&mut span.attrs, "gen_ai.tool.call.id", tool_call_id);
        set(&mut span.attrs, "steadfast.step", self.step);
        span
    }

    fn end(&mut self, mut span: Span, now: u64) {
        span.end = now.max(span.start);
        if self.ended.len() >= MAX_OPEN_SPANS {
            self.dropped += 1;
        } else {
            self.ended.push(span);
        }
    }

    /// A model call for step `step` starts (its first attempt) with `model` of provider `provider` (when the
    /// model names one).
    pub fn model_call(&mut self, step: u32, model: &str, provider: Option<&str>, now: u64) {
        if let Some(open) = self.chat.take() {
            self.end(open, now);
        }
        self.step = step;
        let mut span = self.child(format!("chat {model}"), SpanKind::Client, now);
        set(&mut span.attrs, "gen_ai.operation.name", "chat");
        if let Some(p) = provider {
            set(&mut span.attrs, "gen_ai.provider.name", p);
        }
        set(&mut span.attrs, "gen_ai.request.model", model);
        set(&mut span.attrs, "steadfast.step", step);
        self.chat = Some(span);
    }

    /// Attempt `attempt` of the model call failed with `error`; another attempt follows (a retry).
    pub fn model_retry(&mut self, attempt: u32, error: &Error, now: u64) {
        if let Some(chat) = &mut self.chat {
            let mut attrs = Attrs::new();
            set(&mut attrs, "steadfast.attempt", attempt);
            set(&mut attrs, "error.type", error.code.as_str());
            chat.events.push(SpanEvent { name: "steadfast.retry", at: now, attrs });
            set(&mut chat.attrs, "steadfast.attempts", attempt + 1);
        }
    }

    /// The model call answered (`model`: the model that did; `answer`: its text, tool calls, usage and stop
    /// reason).
    pub fn model_answer(&mut self, answer: (&str, &[ToolCall], &Usage, Option<&str>), model: &str, now: u64) {
        let Some(mut chat) = self.chat.take() else { return };
        let (text, tool_calls, usage, stop_reason) = answer;
        set(&mut chat.attrs, "gen_ai.response.model", model);
        usage_attrs(&mut chat.attrs, usage);
        let reason = match (stop_reason, tool_calls.is_empty()) {
            (Some(r), _) => r,
            (None, false) => "tool_calls",
            (None, true) => "stop",
        };
        set(&mut chat.attrs, "gen_ai.response.finish_reasons", AttrValue::Strs(vec![reason.into()]));
        if self.opts.contents {
            // Through the text writers the run's records use already (not a JSON value writer's instances).
            let mut out = String::from("[{\"role\":\"assistant\",\"content\":");
            str_json(&mut out, text);
            out.push_str(",\"tool_calls\":");
            out.push_str(&serde_json::to_string(tool_calls).unwrap_or_default());
            out.push_str("}]");
            set(&mut chat.attrs, "gen_ai.output.messages", out);
        }
        self.end(chat, now);
    }

    /// The model call failed for good (`None`: it was aborted).
    pub fn model_failed(&mut self, error: Option<&Error>, now: u64) {
        let Some(mut chat) = self.chat.take() else { return };
        if let Some(e) = error {
            set(&mut chat.attrs, "error.type", e.code.as_str());
            chat.status = SpanStatus::Error(e.message.clone());
        }
        self.end(chat, now);
    }

    /// The input messages of the model call in progress (only with [`TraceOptions::contents`]).
    pub fn wants_contents(&self) -> bool {
        self.opts.contents
    }

    /// Sets the model call's input messages (their JSON text), with [`TraceOptions::contents`].
    pub fn model_input(&mut self, messages_json: String) {
        if let (true, Some(chat)) = (self.opts.contents, &mut self.chat) {
            set(&mut chat.attrs, "gen_ai.input.messages", messages_json);
        }
    }

    /// An event of the run happened at `now` (see the module docs for what each becomes).
    pub fn event(&mut self, event: &Event, now: u64) {
        match event {
            Event::RunStart { resumed, step } => {
                set(&mut self.root.attrs, "steadfast.resumed", *resumed);
                set(&mut self.root.attrs, "steadfast.step.start", *step);
            }
            Event::ProviderFallback { from, to, code, .. } => {
                let mut attrs = Attrs::new();
                set(&mut attrs, "steadfast.fallback.from", from.as_str());
                set(&mut attrs, "steadfast.fallback.to", to.as_str());
                set(&mut attrs, "error.type", code.as_str());
                let span = self.chat.as_mut().unwrap_or(&mut self.root);
                span.events.push(SpanEvent { name: "steadfast.provider.fallback", at: now, attrs });
            }
            Event::ToolStart { tool_call_id, name, args } => {
                let mut span = self.tool_span(tool_call_id, name, now);
                if self.opts.contents {
                    set(&mut span.attrs, "gen_ai.tool.call.arguments", crate::core::wire::json_text(args));
                }
                self.tools.push((tool_call_id.clone(), span));
            }
            Event::ToolDone { tool_call_id, name, is_error, kind, replaced_by } => {
                let mut span = match self.tools.iter().position(|(id, _)| id == tool_call_id) {
                    Some(i) => self.tools.remove(i).1,
                    // A call that did not run (denied, invalid, cancelled): a span of no length.
                    None => self.tool_span(tool_call_id, name, now),
                };
                set(&mut span.attrs, "steadfast.tool.result_kind", result_kind(*kind));
                if let Some(hook) = replaced_by {
                    set(&mut span.attrs, "steadfast.tool.replaced_by_hook", hook.as_str());
                }
                if *is_error && span.status == SpanStatus::Unset {
                    let why = match kind {
                        ResultKind::Denied => "the call was denied",
                        ResultKind::Rejected => "the call was rejected",
                        ResultKind::Validation => "the call's arguments were refused",
                        ResultKind::Cancelled => "the call was cancelled",
                        ResultKind::Interrupted => "the call was interrupted",
                        _ => "the tool failed",
                    };
                    set(&mut span.attrs, "error.type", result_kind(*kind));
                    span.status = SpanStatus::Error(why.into());
                }
                self.end(span, now);
            }
            Event::HealAction { tool, tool_call_id, action, reason, count } => {
                let mut attrs = Attrs::new();
                set(&mut attrs, "gen_ai.tool.name", tool.as_str());
                set(&mut attrs, "steadfast.heal.action", action.as_str());
                set(&mut attrs, "steadfast.heal.reason", reason.as_str());
                set(&mut attrs, "steadfast.heal.count", *count);
                let ev = SpanEvent { name: "steadfast.heal", at: now, attrs };
                match self.tools.iter_mut().find(|(id, _)| id == tool_call_id) {
                    Some((_, span)) => {
                        if action == "deny" {
                            span.status = SpanStatus::Error(reason.clone());
                        }
                        span.events.push(ev);
                    }
                    None => self.root.events.push(ev),
                }
            }
            Event::ApprovalRequested { approval_id, tool_call } => {
                let mut attrs = Attrs::new();
                set(&mut attrs, "steadfast.approval.id", approval_id.as_str());
                set(&mut attrs, "gen_ai.tool.name", tool_call.name.as_str());
                set(&mut attrs, "gen_ai.tool.call.id", tool_call.id.as_str());
                self.root.events.push(SpanEvent { name: "steadfast.approval.requested", at: now, attrs });
            }
            Event::WaitStart { wait_id, kind, tool_call_id, .. } => {
                let mut attrs = Attrs::new();
                set(&mut attrs, "steadfast.wait.id", wait_id.as_str());
                set(&mut attrs, "steadfast.wait.kind", (*kind).as_str());
                set(&mut attrs, "gen_ai.tool.call.id", tool_call_id.as_str());
                self.root.events.push(SpanEvent { name: "steadfast.wait.start", at: now, attrs });
            }
            Event::Handoff { to, .. } => {
                let mut attrs = Attrs::new();
                set(&mut attrs, "steadfast.handoff.to", to.as_str());
                self.root.events.push(SpanEvent { name: "steadfast.handoff", at: now, attrs });
            }
            Event::RunDone { status, finish_reason, steps, .. } => {
                set(&mut self.root.attrs, "steadfast.run.status", status.as_str());
                set(&mut self.root.attrs, "steadfast.steps", *steps);
                if let Some(r) = finish_reason {
                    // Its wire text, without the quotes.
                    let text = serde_json::to_string(r).unwrap_or_default();
                    set(
                        &mut self.root.attrs,
                        "steadfast.finish_reason",
                        text.get(1..text.len().saturating_sub(1)).unwrap_or(""),
                    );
                }
                if *status == RunStatus::AwaitingApproval {
                    set(&mut self.root.attrs, "steadfast.awaiting_approval", true);
                }
            }
            Event::Error { error } => {
                set(&mut self.root.attrs, "error.type", error.code.as_str());
                self.root.status = SpanStatus::Error(error.message.clone());
            }
            _ => {}
        }
    }

    /// The run's usage and cost so far (on the execution's span).
    pub fn run_usage(&mut self, usage: &Usage) {
        usage_attrs(&mut self.root.attrs, usage);
    }

    /// How many ended spans wait to be taken.
    pub fn ended_count(&self) -> usize {
        self.ended.len()
    }

    /// The spans that ended so far (handed on: each is taken once).
    pub fn take_ended(&mut self) -> Vec<Span> {
        std::mem::take(&mut self.ended)
    }

    /// The execution ended at `now` (`error`: without a verdict — a crash, a lost lease, a store failure):
    /// every span still open ends, and every span not taken yet is returned.
    pub fn finish(mut self, error: Option<&Error>, now: u64) -> (Vec<Span>, u64) {
        let why = error.map(|e| (e.code.as_str(), e.message.clone()));
        let open: Vec<Span> = self.chat.take().into_iter().chain(self.tools.drain(..).map(|(_, s)| s)).collect();
        for mut span in open {
            if let Some((code, msg)) = &why {
                set(&mut span.attrs, "error.type", *code);
                span.status = SpanStatus::Error(msg.clone());
            }
            self.end(span, now);
        }
        let mut root = self.root.clone();
        if let Some((code, msg)) = why {
            set(&mut root.attrs, "error.type", code);
            root.status = SpanStatus::Error(msg);
        }
        // The execution's span is kept even past the cap: it is what the others hang from.
        root.end = now.max(root.start);
        self.ended.push(root);
        (self.ended, self.dropped)
    }
}

fn usage_attrs(attrs: &mut Attrs, usage: &Usage) {
    set(attrs, "gen_ai.usage.input_tokens", usage.input_tokens);
    set(attrs, "gen_ai.usage.output_tokens", usage.output_tokens);
    if let Some(nanos) = usage.cost {
        set(attrs, "steadfast.cost.usd", AttrValue::Double(nanos as f64 / 1e9));
    }
}

fn result_kind(kind: ResultKind) -> &'static str {
    match kind {
        ResultKind::Execution => "execution",
        ResultKind::Validation => "validation",
        ResultKind::Denied => "denied",
        ResultKind::Rejected => "rejected",
        ResultKind::NotRun => "not-run",
        ResultKind::Cancelled => "cancelled",
        ResultKind::Interrupted => "interrupted",
    }
}

/// splitmix64: the next id from `state`.
fn mix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn span_id(state: &mut u64) -> [u8; 8] {
    loop {
        let id = mix(state);
        if id != 0 {
            return id.to_be_bytes();
        }
    }
}

/// The resource a batch of spans comes from: `service.name` and more attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct Resource {
    /// Its attributes (`service.name` first).
    pub attrs: Attrs,
}

impl Resource {
    /// A resource named `service`.
    pub fn service(service: &str) -> Resource {
        let mut attrs = Attrs::new();
        set(&mut attrs, "service.name", service);
        set(&mut attrs, "telemetry.sdk.name", "steadfast");
        set(&mut attrs, "telemetry.sdk.language", "rust");
        set(&mut attrs, "telemetry.sdk.version", env!("CARGO_PKG_VERSION"));
        Resource { attrs }
    }
}

/// The OTLP/HTTP JSON body (an `ExportTraceServiceRequest`) of `spans` from `resource`: ids in hex, times and
/// integers as decimal strings, enums as numbers, as the OTLP spec's JSON encoding says.
pub fn otlp_json(resource: &Resource, spans: &[Span]) -> String {
    let mut out = String::with_capacity(256 + spans.len() * 512);
    out.push_str("{\"resourceSpans\":[{\"resource\":{\"attributes\":");
    attrs_json(&mut out, &resource.attrs);
    out.push_str("},\"scopeSpans\":[{\"scope\":{\"name\":\"steadfast\",\"version\":\"");
    out.push_str(env!("CARGO_PKG_VERSION"));
    out.push_str("\"},\"spans\":[");
    for (i, span) in spans.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        span_json(&mut out, span);
    }
    out.push_str("]}]}]}");
    out
}

fn span_json(out: &mut String, s: &Span) {
    put(out, format_args!("{{\"traceId\":\"{}\",\"spanId\":\"{}\"", hex(&s.context.trace_id), hex(&s.context.span_id)));
    if let Some(p) = &s.parent {
        put(out, format_args!(",\"parentSpanId\":\"{}\"", hex(p)));
    }
    out.push_str(",\"name\":");
    str_json(out, &s.name);
    put(
        out,
        format_args!(
            ",\"kind\":{},\"startTimeUnixNano\":\"{}\",\"endTimeUnixNano\":\"{}\",\"attributes\":",
            s.kind as u8,
            nanos(s.start),
            nanos(s.end)
        ),
    );
    attrs_json(out, &s.attrs);
    out.push_str(",\"events\":[");
    for (i, e) in s.events.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        put(out, format_args!("{{\"timeUnixNano\":\"{}\",\"name\":", nanos(e.at)));
        str_json(out, &e.name);
        out.push_str(",\"attributes\":");
        attrs_json(out, &e.attrs);
        out.push('}');
    }
    out.push_str("],\"links\":[");
    for (i, l) in s.links.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        put(out, format_args!("{{\"traceId\":\"{}\",\"spanId\":\"{}\"}}", hex(&l.trace_id), hex(&l.span_id)));
    }
    out.push_str("],\"status\":");
    match &s.status {
        SpanStatus::Unset => out.push_str("{}"),
        SpanStatus::Error(msg) => {
            out.push_str("{\"code\":2,\"message\":");
            str_json(out, msg);
            out.push('}');
        }
    }
    out.push('}');
}

fn attrs_json(out: &mut String, attrs: &Attrs) {
    out.push('[');
    for (i, (k, v)) in attrs.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str("{\"key\":");
        str_json(out, k);
        out.push_str(",\"value\":");
        value_json(out, v);
        out.push('}');
    }
    out.push(']');
}

fn value_json(out: &mut String, v: &AttrValue) {
    match v {
        AttrValue::Str(s) => {
            out.push_str("{\"stringValue\":");
            str_json(out, s);
            out.push('}');
        }
        AttrValue::Int(n) => {
            put(out, format_args!("{{\"intValue\":\"{n}\"}}"));
        }
        AttrValue::Bool(b) => {
            put(out, format_args!("{{\"boolValue\":{b}}}"));
        }
        AttrValue::Double(d) if d.is_finite() => {
            put(out, format_args!("{{\"doubleValue\":{d}}}"));
        }
        AttrValue::Double(_) => out.push_str("{\"doubleValue\":0}"),
        AttrValue::Strs(items) => {
            out.push_str("{\"arrayValue\":{\"values\":[");
            for (i, s) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str("{\"stringValue\":");
                str_json(out, s);
                out.push('}');
            }
            out.push_str("]}}");
        }
    }
}

/// Appends formatted text to `out`.
fn put(out: &mut String, args: std::fmt::Arguments<'_>) {
    // Ignored: writing to a String cannot fail.
    let _ = out.write_fmt(args);
}

fn str_json(out: &mut String, s: &str) {
    // A string always serialises.
    out.push_str(&serde_json::to_string(s).unwrap_or_default());
}

/// Nanoseconds since the epoch (a u64 holds them until the year 2554).
fn nanos(ms: u64) -> u64 {
    ms.saturating_mul(1_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::error::ErrorCode;
    use crate::core::transcript::ToolCall;

    fn info(parent: Option<SpanContext>, previous: Option<SpanContext>) -> ExecutionInfo {
        ExecutionInfo {
            run_id: "r1".into(),
            agent: "support".into(),
            model: "mock".into(),
            epoch: 3,
            context: Some(execution_context(parent, "owner-42")),
            parent,
            previous,
        }
    }

    #[test]
    fn traceparent_round_trips_and_refuses_what_the_w3c_spec_refuses() {
        let ctx = SpanContext { trace_id: [0xab; 16], span_id: [0x01; 8] };
        assert_eq!(SpanContext::parse_traceparent(&ctx.traceparent()), Some(ctx));
        let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert!(SpanContext::parse_traceparent(good).is_some());
        for bad in [
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "",
        ] {
            assert_eq!(SpanContext::parse_traceparent(bad), None, "{bad}");
        }
        // A later version may carry more fields.
        assert!(SpanContext::parse_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x").is_some());
    }

    #[test]
    fn an_execution_nests_chat_and_tool_spans_under_its_own_and_links_the_previous() {
        let prev = SpanContext { trace_id: [7; 16], span_id: [8; 8] };
        let mut r = Recorder::start(&info(None, Some(prev)), TraceOptions::default(), 1_000);
        r.event(&Event::RunStart { resumed: true, step: 2 }, 1_000);
        r.model_call(3, "mock", Some("openai"), 1_001);
        let err = Error::new(ErrorCode::ProviderUnavailable, "503");
        r.model_retry(1, &err, 1_002);
        let call =
            ToolCall { id: "c1".into(), name: "lookup".into(), args: serde_json::json!({"q": 1}), invalid: None };
        let usage = Usage { input_tokens: 10, output_tokens: 4, cost: Some(1_500), ..Default::default() };
        r.model_answer(("hi", &[call.clone()], &usage, None), "mock", 1_005);
        r.event(&Event::ToolStart { tool_call_id: "c1".into(), name: "lookup".into(), args: call.args.clone() }, 1_006);
        assert_eq!(r.current(Some("c1")), r.tools[0].1.context);
        let done = Event::ToolDone {
            tool_call_id: "c1".into(),
            name: "lookup".into(),
            is_error: false,
            kind: ResultKind::Execution,
            replaced_by: Some("guard".into()),
        };
        r.event(&done, 1_009);
        let denied = Event::ToolDone {
            tool_call_id: "c2".into(),
            name: "pay".into(),
            is_error: true,
            kind: ResultKind::Denied,
            replaced_by: None,
        };
        r.event(&denied, 1_010);
        let root_ctx = r.context();
        let (spans, dropped) = r.finish(None, 1_020);
        assert_eq!(dropped, 0);
        assert_eq!(spans.len(), 4);
        let root = spans.iter().find(|s| s.parent.is_none()).unwrap();
        assert_eq!(root.context, root_ctx);
        assert_eq!(root.name, "invoke_agent support");
        assert_eq!(root.links, vec![prev]);
        assert_eq!(root.attr("steadfast.resumed"), Some(&AttrValue::Bool(true)));
        assert_eq!((root.start, root.end), (1_000, 1_020));
        for s in spans.iter().filter(|s| s.parent.is_some()) {
            assert_eq!(s.parent, Some(root_ctx.span_id));
            assert_eq!(s.context.trace_id, root_ctx.trace_id);
            assert!(s.start >= root.start && s.end <= root.end);
        }
        let chat = spans.iter().find(|s| s.name == "chat mock").unwrap();
        assert_eq!((chat.start, chat.end, chat.kind), (1_001, 1_005, SpanKind::Client));
        assert_eq!(chat.events[0].name, "steadfast.retry");
        assert_eq!(chat.attr("gen_ai.usage.input_tokens"), Some(&AttrValue::Int(10)));
        assert_eq!(chat.attr("gen_ai.response.finish_reasons"), Some(&AttrValue::Strs(vec!["tool_calls".into()])));
        assert_eq!(chat.attr("steadfast.cost.usd"), Some(&AttrValue::Double(1.5e-6)));
        // Contents are off by default.
        assert!(chat.attr("gen_ai.output.messages").is_none());
        let tool = spans.iter().find(|s| s.name == "execute_tool lookup").unwrap();
        assert_eq!(tool.attr("steadfast.tool.replaced_by_hook"), Some(&AttrValue::Str("guard".into())));
        assert!(tool.attr("gen_ai.tool.call.arguments").is_none());
        let pay = spans.iter().find(|s| s.name == "execute_tool pay").unwrap();
        assert_eq!(pay.status, SpanStatus::Error("the call was denied".into()));
    }

    #[test]
    fn a_caller_span_makes_the_execution_its_child_and_a_crash_ends_open_spans_as_errors() {
        let caller = SpanContext { trace_id: [9; 16], span_id: [3; 8] };
        let mut r = Recorder::start(&info(Some(caller), None), TraceOptions { contents: true }, 5);
        r.model_call(1, "m", None, 6);
        r.model_input("[]".into());
        let crash = Error::new(ErrorCode::Crashed, "boom");
        let (spans, _) = r.finish(Some(&crash), 9);
        let root = spans.iter().find(|s| s.name.starts_with("invoke_agent")).unwrap();
        assert_eq!(root.context.trace_id, caller.trace_id);
        assert_eq!(root.parent, Some(caller.span_id));
        assert_eq!(root.status, SpanStatus::Error("boom".into()));
        let chat = spans.iter().find(|s| s.name == "chat m").unwrap();
        assert_eq!(chat.attr("gen_ai.input.messages"), Some(&AttrValue::Str("[]".into())));
        assert!(matches!(chat.status, SpanStatus::Error(_)));
    }

    #[test]
    fn otlp_json_follows_the_otlp_json_encoding() {
        let mut r = Recorder::start(&info(None, None), TraceOptions::default(), 2);
        r.event(&Event::RunStart { resumed: false, step: 0 }, 2);
        let (spans, _) = r.finish(None, 4);
        let body = otlp_json(&Resource::service("svc"), &spans);
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        let span = &v["resourceSpans"][0]["scopeSpans"][0]["spans"][0];
        assert_eq!(span["traceId"].as_str().unwrap().len(), 32);
        assert_eq!(span["spanId"].as_str().unwrap().len(), 16);
        assert_eq!(span["startTimeUnixNano"], "2000000");
        assert_eq!(span["kind"], 1);
        assert!(span.get("parentSpanId").is_none());
        let epoch = span["attributes"].as_array().unwrap().iter().find(|a| a["key"] == "steadfast.lease.epoch");
        assert_eq!(epoch.unwrap()["value"]["intValue"], "3");
        assert_eq!(v["resourceSpans"][0]["resource"]["attributes"][0]["value"]["stringValue"], "svc");
    }

    #[test]
    fn ids_differ_by_seed_and_spans_past_the_cap_are_counted_not_kept() {
        let a = Recorder::start(&info(None, None), TraceOptions::default(), 0).context();
        let other = ExecutionInfo { context: Some(execution_context(None, "owner-43")), ..info(None, None) };
        let b = Recorder::start(&other, TraceOptions::default(), 0).context();
        assert_ne!(a.trace_id, b.trace_id);
        assert_eq!(execution_context(None, "owner-43"), b);
        let mut r = Recorder::start(&info(None, None), TraceOptions::default(), 0);
        for i in 0..(MAX_OPEN_SPANS + 5) {
            r.model_call(i as u32, "m", None, 0);
            r.model_failed(None, 0);
        }
        let (spans, dropped) = r.finish(None, 1);
        assert_eq!((spans.len(), dropped), (MAX_OPEN_SPANS + 1, 5));
    }
}
