//! Model providers (M21): OpenAI-compatible chat completions ([`OpenAiModel`]), Anthropic messages
//! ([`AnthropicModel`]) and the Cloudflare Workers AI binding ([`WorkersAiModel`]). The scripted mock model
//! lives in [`crate::runtime::mock`].
//!
//! Every provider is split in two: pure functions that build the request and parse the answer (unit-tested
//! without I/O), and a thin [`crate::runtime::Model`] impl that sends exactly one request per `generate`
//! through a [`crate::http::HttpClient`] (or an [`AiBinding`]). Providers never retry: the runtime's
//! model-call layer is the only retry layer (M15). Failures are classified by
//! [`crate::core::classify::provider_http_error`] (non-2xx answers), passed through (transport errors, already
//! `STEADFAST_PROVIDER_NETWORK` / `STEADFAST_PROVIDER_TIMEOUT`) or reported as
//! `STEADFAST_PROVIDER_INVALID_RESPONSE` (a 2xx body that cannot be read). API keys never appear in an error.
//!
//! Which provider a configured agent uses, with which options, is decided by
//! [`crate::front::config::AgentConfig::model`] (platform independent, tested natively); a shell only answers the
//! [`ModelPlatform`] questions (its HTTP client, its secrets, its Workers AI binding).

pub mod anthropic;
pub mod openai;
pub mod stream;
pub mod workers_ai;

pub use anthropic::{AnthropicModel, AnthropicOptions};
pub use openai::{OpenAiModel, OpenAiOptions};
pub use workers_ai::{AiBinding, WorkersAiModel, WorkersAiOptions};

use crate::core::classify::provider_http_error;
use crate::core::error::{cap_chars, Error, ErrorCode, Result};
use crate::core::machine::ModelResponse;
use crate::core::transcript::{Message, ToolCall, Usage};
use crate::core::wire::json_text;
use crate::http::{HttpClient, HttpRequest, HttpResponse};
use crate::runtime::traits::ToolSpec;
use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;
use serde_json::{json, Map, Value};

/// What a platform supplies to build a configured model: nothing here decides anything (which provider, its
/// options, which secret holds the key, the errors when something is missing: see
/// [`crate::front::config::AgentConfig::model`]).
pub trait ModelPlatform {
    /// The HTTP client provider calls go through.
    type Http: HttpClient + 'static;
    /// The Workers AI binding.
    type Ai: AiBinding + 'static;
    /// An HTTP client (one attempt per request; the runtime retries).
    fn http(&self) -> Self::Http;
    /// The secret (or plain variable) named `name`; `None` when it is not set or empty.
    fn secret(&self, name: &str) -> Option<String>;
    /// The Workers AI binding, or why the platform has none.
    fn workers_ai(&self) -> std::result::Result<Self::Ai, String>;
}

/// Longest excerpt of a provider's body kept in an error (characters).
const EXCERPT_CHARS: usize = 200;

/// Replaces every occurrence of `secret` in `text` (nothing to do for an empty secret).
/// The host of a provider's `base_url` (its breaker's dependency: one per endpoint host), else `fallback`.
pub(crate) fn endpoint_host(base_url: &str, fallback: &str) -> String {
    // By bytes (every delimiter is ASCII): smaller code than the str pattern searchers.
    let rest = base_url.split_once("://").map_or(base_url, |(_, r)| r).as_bytes();
    let authority = &rest[..rest.iter().position(|b| matches!(b, b'/' | b'?' | b'#')).unwrap_or(rest.len())];
    let host = &authority[authority.iter().rposition(|b| *b == b'@').map_or(0, |i| i + 1)..];
    let host = &host[..host.iter().position(|b| *b == b':').unwrap_or(host.len())];
    match host.is_empty() {
        true => fallback.to_string(),
        false => String::from_utf8_lossy(host).to_ascii_lowercase(),
    }
}

pub(crate) fn redact(text: &str, secret: &str) -> String {
    if secret.is_empty() {
        text.to_string()
    } else {
        text.replace(secret, "[redacted]")
    }
}

/// A short, key-free excerpt of a body for an error message.
pub(crate) fn excerpt(body: &str, secret: &str) -> String {
    cap_chars(redact(body.trim(), secret).as_str(), EXCERPT_CHARS)
}

/// `STEADFAST_PROVIDER_INVALID_RESPONSE` (retryable) for an answer that cannot be read.
pub(crate) fn invalid_response(provider: &str, why: &str, body: &str, secret: &str) -> Error {
    let ex = excerpt(body, secret);
    Error::new(
        ErrorCode::ProviderInvalidResponse,
        format!("{provider} answered something unreadable ({why}){}{ex}", if ex.is_empty() { "" } else { ": " }),
    )
}

/// One model call over HTTP: sends `request` once and parses a 2xx body with `parse`; errors carry the run id,
/// the HTTP status of an unreadable body, and never the key.
pub(crate) async fn round_trip<H: HttpClient>(
    client: &H,
    request: HttpRequest,
    api_key: &str,
    run_id: &str,
    step: u32,
    parse: fn(&str, u32) -> Result<ModelResponse>,
) -> Result<ModelResponse> {
    let response = send_once(client, request, api_key).await.map_err(|e| e.with_run(run_id))?;
    parse(&response.body, step).map_err(|mut e| {
        e.message = redact(&e.message, api_key);
        e.with_status(response.status).with_run(run_id)
    })
}

/// One streamed model call over HTTP: sends `request` once and feeds a 2xx body to `parser` as it is read,
/// handing each increment to `on_delta`; the completed turn when the stream ends. Errors as
/// [`round_trip`]'s, plus the parser's (an error event mid-stream, a stream cut short: retryable).
pub(crate) async fn stream_round_trip(
    client: &dyn HttpClient,
    request: HttpRequest,
    api_key: &str,
    run_id: &str,
    parser: &mut dyn stream::StreamParser,
    on_delta: &dyn Fn(crate::core::events::StreamDelta),
) -> Result<ModelResponse> {
    let mut feed = stream::Feed::new(parser, on_delta);
    let sent = client.send_streaming(request, &mut |chunk: &[u8]| feed.chunk(chunk)).await;
    let scrub = |mut e: Error| {
        e.message = redact(&e.message, api_key);
        e.with_run(run_id)
    };
    let response = sent.map_err(scrub)?;
    if !(200..300).contains(&response.status) {
        let body = redact(&response.body, api_key);
        return Err(provider_http_error(response.status, response.header("retry-after"), &body).with_run(run_id));
    }
    feed.finish().map_err(|e| scrub(e.with_status(response.status)))
}

/// Sends `request` once. A non-2xx answer becomes the classified provider error; a transport error passes
/// through with its code (its message scrubbed of `secret`).
pub(crate) async fn send_once<H: HttpClient>(client: &H, request: HttpRequest, secret: &str) -> Result<HttpResponse> {
    let response = client.send(request).await.map_err(|mut e| {
        e.message = redact(&e.message, secret);
        e
    })?;
    if (200..300).contains(&response.status) {
        Ok(response)
    } else {
        Err(provider_http_error(response.status, response.header("retry-after"), &redact(&response.body, secret)))
    }
}

/// Joins a base URL and a path with exactly one slash between them.
pub(crate) fn join_url(base: &str, path: &str) -> String {
    format!("{}/{}", base.trim_end_matches('/'), path.trim_start_matches('/'))
}

/// Inserts the `extra` fields into `body` without replacing any of the `protected` fields.
pub(crate) fn merge_extra(body: &mut Map<String, Value>, extra: &Map<String, Value>, protected: &[&str]) {
    for (k, v) in extra {
        if !protected.contains(&k.as_str()) {
            body.insert(k.clone(), v.clone());
        }
    }
}

/// Longest excerpt of unusable tool-call arguments quoted back to the model (characters).
const ARGUMENTS_EXCERPT_CHARS: usize = 200;

/// Reads tool-call arguments given as a JSON string (an empty string is `{}`). Anything but a JSON object is
/// unusable: `Err` says why in words for the model, quoting the start of what it sent (arguments cut off
/// mid-JSON, typically because the answer reached the output token limit, are the usual case).
pub fn parse_arguments(s: &str) -> std::result::Result<Value, String> {
    if s.trim().is_empty() {
        return Ok(json!({}));
    }
    match serde_json::from_str::<Value>(s) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(other) => Err(not_an_object(&other)),
        Err(_) => Err(format!(
            "the arguments were not valid JSON (the answer may have been cut off at the output token limit): {}",
            cap_chars(s, ARGUMENTS_EXCERPT_CHARS)
        )),
    }
}

fn not_an_object(v: &Value) -> String {
    let kind = match v {
        Value::Array(_) => "an array",
        Value::String(_) => "a string",
        Value::Number(_) => "a number",
        Value::Bool(_) => "a boolean",
        _ => "null",
    };
    format!("the arguments must be a JSON object, not {kind}")
}

/// A tool call from a provider's parts: `args` given as a JSON string (see [`parse_arguments`]) or as a JSON
/// value; missing or null arguments are `{}`. Unusable arguments are kept as the model produced them (text that
/// is not a JSON object as that text, e.g. arguments cut off at the output token limit; any other value as it
/// is) with the reason in [`ToolCall::invalid`]: the call never runs, the model reads the reason as a
/// `validation` result, and its own turn goes back to it with the arguments it wrote (never a made-up `{}`).
pub(crate) fn new_call(id: String, name: &str, args: Option<&Value>) -> ToolCall {
    let (args, invalid) = match args {
        None | Some(Value::Null) => (json!({}), None),
        Some(Value::String(s)) => match parse_arguments(s) {
            Ok(v) => (v, None),
            Err(why) => (Value::String(s.clone()), Some(why)),
        },
        Some(v @ Value::Object(_)) => (v.clone(), None),
        Some(other) => (other.clone(), Some(not_an_object(other))),
    };
    ToolCall { id, name: name.to_string(), args, invalid }
}

/// `STEADFAST_CONFIG_INVALID` when no model id is set: the providers have no default model (a default goes
/// stale as providers retire models), so the configuration must name one.
pub(crate) fn require_model(provider: &str, model: &str) -> Result<()> {
    if model.trim().is_empty() {
        return Err(Error::new(
            ErrorCode::ConfigInvalid,
            format!("no {provider} model is set: name one in the options' `model` (there is no default)"),
        ));
    }
    Ok(())
}

/// A non-negative integer field (0 when absent or not a number).
pub(crate) fn u64_field(v: &Value, key: &str) -> u64 {
    match v.get(key) {
        Some(n) => {
            n.as_u64().or_else(|| n.as_f64().filter(|f| f.is_finite() && *f >= 0.0).map(|f| f as u64)).unwrap_or(0)
        }
        None => 0,
    }
}

/// The id for a tool call the provider gave none: `call_<step>_<i>`.
pub(crate) fn generated_call_id(step: u32, i: usize) -> String {
    format!("call_{step}_{i}")
}

/// One OpenAI-style chat message, borrowed from the transcript (serialised directly, no JSON tree).
#[derive(Debug, Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub(crate) enum OpenAiMessage<'a> {
    System {
        content: &'a str,
    },
    User {
        content: &'a str,
    },
    Assistant {
        content: Option<&'a str>,
        #[serde(skip_serializing_if = "<[_]>::is_empty")]
        tool_calls: Vec<OpenAiCall<'a>>,
    },
    Tool {
        tool_call_id: &'a str,
        content: &'a str,
    },
}

/// An OpenAI-style tool call (`{id, type: "function", function: {name, arguments}}`).
#[derive(Debug, Serialize)]
pub(crate) struct OpenAiCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: OpenAiFunction<'a>,
}

#[derive(Debug, Serialize)]
struct OpenAiFunction<'a> {
    name: &'a str,
    arguments: String,
}

/// The transcript as OpenAI-style chat messages (`system` / `user` / `assistant` with `tool_calls` / `tool`).
/// An assistant turn with tool calls and no text gets `content: null` when `null_empty_content`, else `""`.
pub(crate) fn openai_messages(messages: &[Message], null_empty_content: bool) -> Vec<OpenAiMessage<'_>> {
    messages
        .iter()
        .map(|m| match m {
            Message::System { content } => OpenAiMessage::System { content },
            Message::User { content } => OpenAiMessage::User { content },
            Message::Assistant { content, tool_calls, .. } => {
                let calls: Vec<OpenAiCall<'_>> = tool_calls
                    .iter()
                    .map(|c| OpenAiCall {
                        id: &c.id,
                        kind: "function",
                        function: OpenAiFunction { name: &c.name, arguments: arguments_string(&c.args) },
                    })
                    .collect();
                let null = content.is_empty() && null_empty_content && !calls.is_empty();
                OpenAiMessage::Assistant { content: (!null).then_some(content.as_str()), tool_calls: calls }
            }
            Message::Tool(r) => OpenAiMessage::Tool { tool_call_id: &r.tool_call_id, content: &r.content },
        })
        .collect()
}

/// A request body's text: the small fields (`fields`, a JSON object without `messages`), then `messages`
/// serialised from borrowed values, so the transcript is written once, straight into the body.
pub(crate) fn body_text<M: Serialize>(fields: &Map<String, Value>, messages: &M) -> String {
    struct Body<'b, M>(&'b Map<String, Value>, &'b M);
    impl<M: Serialize> Serialize for Body<'_, M> {
        fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
            let mut map = s.serialize_map(Some(self.0.len() + 1))?;
            for (k, v) in self.0.iter().filter(|(k, _)| k.as_str() != "messages") {
                map.serialize_entry(k, v)?;
            }
            map.serialize_entry("messages", self.1)?;
            map.end()
        }
    }
    // Ignored (the fallback): string keys, strings and JSON values always serialise.
    serde_json::to_string(&Body(fields, messages)).unwrap_or_else(|_| "{}".into())
}

/// Tool-call arguments as the JSON string OpenAI expects: unusable arguments kept as the text the model wrote
/// ([`new_call`]) go back as that text, and so does a `{"_raw": s}` placeholder, which transcripts written before
/// unusable arguments were marked [`ToolCall::invalid`] may hold.
fn arguments_string(args: &Value) -> String {
    if let Some(obj) = args.as_object() {
        if obj.len() == 1 {
            if let Some(Value::String(raw)) = obj.get("_raw") {
                return raw.clone();
            }
        }
    }
    match args {
        Value::Null => "{}".to_string(),
        Value::String(text) => text.clone(),
        other => json_text(other),
    }
}

/// Tools as OpenAI-style function declarations.
pub(crate) fn openai_tools(tools: &[ToolSpec]) -> Vec<Value> {
    tools
        .iter()
        .map(|t| {
            json!({
                "type": "function",
                "function": {"name": t.name, "description": t.description, "parameters": t.input_schema},
            })
        })
        .collect()
}

/// Reads an OpenAI-style chat completion (`choices[0].message`, `usage`). A `message.refusal` is the text, with
/// stop reason `refusal`. `Err` holds why it cannot be read.
pub(crate) fn parse_openai_value(v: &Value, step: u32) -> std::result::Result<ModelResponse, String> {
    let choice = v
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|c| c.first())
        .ok_or_else(|| "no choices[0]".to_string())?;
    let message = choice.get("message").filter(|m| m.is_object()).ok_or_else(|| "no choices[0].message".to_string())?;
    let mut text = content_text(message.get("content"))?;
    let tool_calls = match message.get("tool_calls") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(calls)) => {
            calls.iter().enumerate().map(|(i, c)| tool_call(c, step, i)).collect::<Result<_, _>>()?
        }
        Some(_) => return Err("tool_calls is not an array".into()),
    };
    let usage = v.get("usage").map_or(Usage::tokens(0, 0), openai_usage);
    let mut stop_reason = choice.get("finish_reason").and_then(Value::as_str).map(str::to_string);
    if let Some(refusal) = message.get("refusal").and_then(Value::as_str).filter(|r| !r.is_empty()) {
        with_refusal(&mut text, refusal);
        stop_reason = Some("refusal".into());
    }
    Ok(ModelResponse { text, tool_calls, usage, stop_reason, reasoning: Vec::new() })
}

/// Appends a refusal to a turn's text (on a line of its own when there is text already).
pub(crate) fn with_refusal(text: &mut String, refusal: &str) {
    if !text.is_empty() {
        text.push('\n');
    }
    text.push_str(refusal);
}

/// `usage.prompt_tokens` / `usage.completion_tokens`, with `prompt_tokens_details.cached_tokens` and
/// `completion_tokens_details.reasoning_tokens`.
pub(crate) fn openai_usage(u: &Value) -> Usage {
    let detail = |k: &str, f: &str| u.get(k).map_or(0, |d| u64_field(d, f));
    Usage {
        cached_input_tokens: detail("prompt_tokens_details", "cached_tokens"),
        reasoning_tokens: detail("completion_tokens_details", "reasoning_tokens"),
        ..Usage::tokens(u64_field(u, "prompt_tokens"), u64_field(u, "completion_tokens"))
    }
}

/// Message content: a string, null (→ ""), or an array of parts whose `text` fields are concatenated.
fn content_text(v: Option<&Value>) -> std::result::Result<String, String> {
    match v {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            Ok(parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect::<Vec<_>>().concat())
        }
        Some(_) => Err("message content is neither a string nor a list of parts".into()),
    }
}

/// One tool call, OpenAI-shaped (`{id, function: {name, arguments}}`) or flat (`{id?, name, arguments}`).
pub(crate) fn tool_call(c: &Value, step: u32, i: usize) -> std::result::Result<ToolCall, String> {
    let f = c.get("function").filter(|f| f.is_object()).unwrap_or(c);
    let name = f
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| format!("tool call #{i} has no name"))?;
    let id = c
        .get("id")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .unwrap_or_else(|| generated_call_id(step, i));
    Ok(new_call(id, name, f.get("arguments")))
}

/// A model turn assembled from Anthropic content blocks: by [`anthropic::parse_response`] from a whole message,
/// and by the stream parser ([`stream::AnthropicStream`]) block by block (so both give the same turn).
#[derive(Debug, Default)]
pub(crate) struct TurnBuilder {
    pub(crate) text: String,
    pub(crate) reasoning: Vec<Value>,
    pub(crate) tool_calls: Vec<crate::core::transcript::ToolCall>,
    pub(crate) usage: Usage,
    pub(crate) stop_reason: Option<String>,
}

impl TurnBuilder {
    /// Adds one complete content block. `Err` says why it cannot be read.
    pub(crate) fn block(&mut self, block: &Value, step: u32) -> std::result::Result<(), String> {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => self.text.push_str(block.get("text").and_then(Value::as_str).unwrap_or("")),
            Some("thinking" | "redacted_thinking") => {
                // Kept in the transcript as it came: it must read back from the journal.
                let depth = crate::core::limits::json_depth(block);
                if depth > crate::core::limits::MAX_JSON_DEPTH {
                    return Err(format!(
                        "a thinking block nested {depth} levels deep; at most {} levels are accepted",
                        crate::core::limits::MAX_JSON_DEPTH
                    ));
                }
                self.reasoning.push(block.clone())
            }
            Some("tool_use") => {
                let i = self.tool_calls.len();
                let name = block
                    .get("name")
                    .and_then(Value::as_str)
                    .filter(|n| !n.is_empty())
                    .ok_or_else(|| "a tool_use block without a name".to_string())?;
                let id = block
                    .get("id")
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .unwrap_or_else(|| generated_call_id(step, i));
                self.tool_calls.push(new_call(id, name, block.get("input")));
            }
            _ => {}
        }
        Ok(())
    }

    /// Sets the usage from an Anthropic `usage` object (fields it lacks keep their value: a stream reports
    /// input tokens at the start and output tokens at the end).
    pub(crate) fn usage(&mut self, u: Option<&Value>) {
        let Some(u) = u.filter(|u| u.is_object()) else { return };
        let has = |k: &str| u.get(k).is_some_and(|n| !n.is_null());
        if has("input_tokens") || has("cache_creation_input_tokens") || has("cache_read_input_tokens") {
            let (written, read) =
                (u64_field(u, "cache_creation_input_tokens"), u64_field(u, "cache_read_input_tokens"));
            self.usage.input_tokens = u64_field(u, "input_tokens").saturating_add(written).saturating_add(read);
            self.usage.cached_input_tokens = read;
            self.usage.cache_write_tokens = written;
        }
        if has("output_tokens") {
            self.usage.output_tokens = u64_field(u, "output_tokens");
        }
    }

    pub(crate) fn finish(self) -> ModelResponse {
        ModelResponse {
            text: self.text,
            tool_calls: self.tool_calls,
            // A provider reports tokens; what they cost is the runtime's (from its price table).
            usage: Usage { cost: None, ..self.usage },
            stop_reason: self.stop_reason,
            reasoning: self.reasoning,
        }
    }
}

#[cfg(test)]
pub(crate) mod fake {
    //! A scripted fake [`HttpClient`] that records every request.

    use crate::core::error::{Error, Result};
    use crate::http::{HttpClient, HttpRequest, HttpResponse};
    use async_trait::async_trait;
    use std::cell::RefCell;
    use std::collections::VecDeque;
    use std::rc::Rc;

    /// Answers with the scripted replies in order; records each request.
    #[derive(Clone, Default)]
    pub struct FakeHttp {
        replies: Rc<RefCell<VecDeque<Result<HttpResponse>>>>,
        requests: Rc<RefCell<Vec<HttpRequest>>>,
    }

    impl FakeHttp {
        /// A fake with these replies.
        pub fn new(replies: Vec<Result<HttpResponse>>) -> FakeHttp {
            FakeHttp { replies: Rc::new(RefCell::new(replies.into())), requests: Default::default() }
        }

        /// One reply with a status, headers and body.
        pub fn reply(status: u16, headers: &[(&str, &str)], body: &str) -> FakeHttp {
            FakeHttp::new(vec![Ok(HttpResponse {
                status,
                headers: headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
                body: body.to_string(),
                truncated: false,
            })])
        }

        /// Adds a reply after the ones left.
        pub fn push(&self, reply: Result<HttpResponse>) {
            self.replies.borrow_mut().push_back(reply);
        }

        /// Every request so far.
        pub fn requests(&self) -> Vec<HttpRequest> {
            self.requests.borrow().clone()
        }
    }

    #[async_trait(?Send)]
    impl HttpClient for FakeHttp {
        async fn send(&self, request: HttpRequest) -> Result<HttpResponse> {
            self.requests.borrow_mut().push(request);
            self.replies.borrow_mut().pop_front().unwrap_or_else(|| Err(Error::internal("fake http: no reply left")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::transcript::{ResultKind, ToolResult};

    #[test]
    fn a_providers_breaker_is_its_endpoints_host() {
        assert_eq!(endpoint_host("https://api.openai.com/v1", "m"), "api.openai.com");
        assert_eq!(endpoint_host("http://user@LOCALHOST:8080/x?y#z", "m"), "localhost");
        assert_eq!(endpoint_host("https://gw.example/openai?k=1", "m"), "gw.example");
        assert_eq!(endpoint_host("", "model-id"), "model-id", "no host: the model is its own dependency");
    }

    #[test]
    fn unusable_arguments_are_marked_invalid_with_the_reason_and_kept_as_produced() {
        assert_eq!(parse_arguments(r#"{"a":1}"#), Ok(json!({"a": 1})));
        assert_eq!(parse_arguments(" "), Ok(json!({})));
        let cut = parse_arguments("{\"city\": \"Par").unwrap_err();
        assert!(cut.starts_with("the arguments were not valid JSON"), "{cut}");
        assert!(cut.ends_with("{\"city\": \"Par"), "quotes what the model sent: {cut}");
        assert_eq!(parse_arguments("[1]").unwrap_err(), "the arguments must be a JSON object, not an array");
        let long = format!("{{\"a\": \"{}", "x".repeat(5_000));
        assert!(parse_arguments(&long).unwrap_err().chars().count() < 400, "the excerpt is capped");

        let ok = new_call("c".into(), "t", Some(&json!("{\"b\":2}")));
        assert_eq!((ok.args, ok.invalid), (json!({"b": 2}), None));
        assert_eq!(new_call("c".into(), "t", None).args, json!({}));
        assert_eq!(new_call("c".into(), "t", Some(&Value::Null)).args, json!({}));
        for bad in [json!("{\"a\":"), json!("[1]"), json!(7), json!(["x"])] {
            let c = new_call("c".into(), "t", Some(&bad));
            assert_eq!(c.args, bad, "the arguments as the model produced them, no placeholder, for {bad}");
            assert!(c.invalid.is_some(), "{bad}");
        }
    }

    #[test]
    fn unusable_arguments_go_back_to_openai_as_the_model_wrote_them() {
        let calls = vec![
            new_call("a".into(), "t", Some(&json!("{\"city\": \"Par"))),
            new_call("b".into(), "t", Some(&json!(["x"]))),
            new_call("c".into(), "t", Some(&json!("{\"city\": \"Rome\"}"))),
        ];
        let v = serde_json::to_value(openai_messages(&[Message::assistant("", calls)], true)).unwrap();
        let args: Vec<&str> =
            (0..3).map(|i| v[0]["tool_calls"][i]["function"]["arguments"].as_str().unwrap()).collect();
        assert_eq!(args, ["{\"city\": \"Par", "[\"x\"]", "{\"city\":\"Rome\"}"]);
    }

    #[test]
    fn raw_arguments_of_old_transcripts_go_back_as_they_came() {
        let m = vec![Message::assistant(
            "",
            vec![ToolCall { id: "c".into(), name: "t".into(), args: json!({"_raw": "{oops"}), invalid: None }],
        )];
        let v = serde_json::to_value(openai_messages(&m, true)).unwrap();
        assert_eq!(v[0]["tool_calls"][0]["function"]["arguments"], "{oops");
        assert_eq!(v[0]["content"], Value::Null);
        let r = Message::Tool(ToolResult {
            tool_call_id: "c".into(),
            name: "t".into(),
            content: "x".into(),
            is_error: true,
            kind: ResultKind::Validation,
            usage: None,
        });
        let v = serde_json::to_value(openai_messages(&[r], true)).unwrap();
        assert_eq!(v[0], json!({"role": "tool", "tool_call_id": "c", "content": "x"}));
    }

    #[test]
    fn redaction_and_urls() {
        assert_eq!(redact("key sk-1 here sk-1", "sk-1"), "key [redacted] here [redacted]");
        assert_eq!(redact("abc", ""), "abc");
        assert_eq!(join_url("https://x/v1/", "/chat/completions"), "https://x/v1/chat/completions");
    }
}

/// `http` with the call's W3C `traceparent` header when the agent traces (the provider's side of the trace).
pub(crate) fn traced(mut http: crate::http::HttpRequest, traceparent: Option<&str>) -> crate::http::HttpRequest {
    if let Some(tp) = traceparent {
        http.headers.push(("traceparent".into(), tp.into()));
    }
    http
}
