//! [`AnthropicModel`]: the Anthropic Messages API (`POST {base_url}/v1/messages`).
//!
//! Anthropic wants the system prompt apart and strictly alternating `user` / `assistant` turns, so the
//! transcript is reshaped: system messages become the top-level `system` (joined with blank lines), tool
//! results become `tool_result` blocks of a `user` turn, and consecutive turns of the same role are merged
//! into one (all results of a tool turn, plus any user text that follows, form one `user` message).

use super::stream::{AnthropicStream, StreamDelta};
use super::{body_text, invalid_response, join_url, merge_extra, TurnBuilder};
use crate::core::error::Result;
use crate::core::machine::ModelResponse;
use crate::core::transcript::Message;
use crate::http::{HttpClient, HttpRequest};
use crate::runtime::traits::{Model, ModelRequest, ToolSpec};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::borrow::Cow;

/// The `anthropic-version` header sent with every request.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// Settings of an [`AnthropicModel`] (JSON: camelCase; every field optional).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct AnthropicOptions {
    /// Base URL; the request goes to `{base_url}/v1/messages`. Default `https://api.anthropic.com`.
    pub base_url: String,
    /// Model id (also [`Model::id`]). No default: a call without one fails with `STEADFAST_CONFIG_INVALID`.
    pub model: String,
    /// `max_tokens` (required by the API). Default 1024.
    pub max_tokens: u32,
    /// Sampling temperature (omitted when unset).
    pub temperature: Option<f64>,
    /// More body fields (e.g. `tool_choice`, `metadata`); they cannot replace `model`, `messages`, `system`,
    /// `tools` or `max_tokens`.
    pub extra: Map<String, Value>,
    /// Per-request timeout in milliseconds (0 = the transport's default).
    pub timeout_ms: u64,
    /// Ask for a streamed answer (`stream: true`): while someone listens to the run's events its text and
    /// thinking arrive as `text.delta` / `reasoning.delta` events; the recorded turn is the same.
    pub stream: bool,
}

impl Default for AnthropicOptions {
    fn default() -> AnthropicOptions {
        AnthropicOptions {
            base_url: "https://api.anthropic.com".into(),
            model: String::new(),
            max_tokens: 1024,
            temperature: None,
            extra: Map::new(),
            timeout_ms: 0,
            stream: false,
        }
    }
}

/// One Anthropic message (`{role, content: [blocks]}`), borrowed from the transcript.
#[derive(Debug, Serialize)]
pub struct AnthropicTurn<'a> {
    /// `user` or `assistant`.
    pub role: &'static str,
    /// Its content blocks.
    pub content: Vec<AnthropicBlock<'a>>,
}

/// One Anthropic content block, borrowed from the transcript (serialised directly, no JSON tree).
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AnthropicBlock<'a> {
    /// `{"type": "text", text}`.
    Text {
        /// Text.
        text: &'a str,
    },
    /// `{"type": "tool_use", id, name, input}`.
    ToolUse {
        /// Call id.
        id: &'a str,
        /// Tool name.
        name: &'a str,
        /// Arguments (an object).
        input: Cow<'a, Value>,
    },
    /// `{"type": "tool_result", tool_use_id, content, is_error}`.
    ToolResult {
        /// The call it answers.
        tool_use_id: &'a str,
        /// Text.
        content: &'a str,
        /// Whether it reports a failure.
        is_error: bool,
    },
    /// A block as the provider sent it (`thinking`, `redacted_thinking`), sent back unchanged.
    #[serde(untagged)]
    Verbatim(&'a Value),
}

/// The transcript as Anthropic's `(system, messages)`: system texts joined with blank lines (`None` when
/// there are none); every other message as content blocks, consecutive same-role turns merged, empty turns
/// dropped. An assistant turn's reasoning blocks come first, unchanged (the API checks their signatures), then
/// its text, then its `tool_use` blocks.
pub fn to_anthropic_messages(messages: &[Message]) -> (Option<String>, Vec<AnthropicTurn<'_>>) {
    let mut system: Vec<&str> = Vec::new();
    let mut turns: Vec<AnthropicTurn<'_>> = Vec::new();
    for m in messages {
        let (role, blocks) = match m {
            Message::System { content } => {
                if !content.is_empty() {
                    system.push(content);
                }
                continue;
            }
            Message::User { content } => ("user", text_block(content)),
            Message::Assistant { content, tool_calls, reasoning, .. } => {
                let mut blocks: Vec<AnthropicBlock<'_>> = reasoning.iter().map(AnthropicBlock::Verbatim).collect();
                blocks.extend(text_block(content));
                blocks.extend(tool_calls.iter().map(|c| AnthropicBlock::ToolUse {
                    id: &c.id,
                    name: &c.name,
                    input: tool_input(&c.args),
                }));
                ("assistant", blocks)
            }
            Message::Tool(r) => (
                "user",
                vec![AnthropicBlock::ToolResult {
                    tool_use_id: &r.tool_call_id,
                    content: &r.content,
                    is_error: r.is_error,
                }],
            ),
        };
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some(last) if last.role == role => last.content.extend(blocks),
            _ => turns.push(AnthropicTurn { role, content: blocks }),
        }
    }
    let system = if system.is_empty() { None } else { Some(system.join("\n\n")) };
    (system, turns)
}

/// A text block, or nothing for empty text (the API refuses empty text blocks).
fn text_block(text: &str) -> Vec<AnthropicBlock<'_>> {
    if text.is_empty() {
        Vec::new()
    } else {
        vec![AnthropicBlock::Text { text }]
    }
}

/// `tool_use.input` must be an object: null becomes `{}`, and anything else (unusable arguments, which providers
/// keep as the model produced them and mark [`crate::core::transcript::ToolCall::invalid`]) is wrapped as
/// `{"_raw": v}`, so the model reads back what it wrote.
fn tool_input(args: &Value) -> Cow<'_, Value> {
    match args {
        Value::Object(_) => Cow::Borrowed(args),
        Value::Null => Cow::Owned(json!({})),
        other => Cow::Owned(json!({ "_raw": other })),
    }
}

/// Builds the Messages API request for a transcript and tool list.
pub fn build_request(
    options: &AnthropicOptions,
    api_key: &str,
    messages: &[Message],
    tools: &[ToolSpec],
) -> HttpRequest {
    let (system, turns) = to_anthropic_messages(messages);
    let mut body = Map::new();
    body.insert("model".into(), json!(options.model));
    body.insert("max_tokens".into(), json!(options.max_tokens));
    if let Some(system) = system {
        body.insert("system".into(), json!(system));
    }
    if !tools.is_empty() {
        let tools: Vec<Value> = tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.input_schema}))
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    if let Some(t) = options.temperature {
        body.insert("temperature".into(), json!(t));
    }
    if options.stream {
        body.insert("stream".into(), json!(true));
    }
    merge_extra(&mut body, &options.extra, &["model", "messages", "system", "tools", "max_tokens", "stream"]);
    HttpRequest {
        method: "POST".into(),
        url: join_url(&options.base_url, "v1/messages"),
        headers: vec![
            ("x-api-key".to_string(), api_key.to_string()),
            ("anthropic-version".to_string(), ANTHROPIC_VERSION.to_string()),
            ("content-type".to_string(), "application/json".to_string()),
        ],
        body: Some(body_text(&body, &turns)),
        timeout_ms: options.timeout_ms,
        max_response_bytes: 0,
    }
}

/// Reads a 2xx Messages API body: `text` blocks concatenated, `thinking` / `redacted_thinking` blocks kept as
/// they are (to be sent back unchanged), `tool_use` blocks as tool calls (`input` as the arguments; a
/// missing id becomes `call_<step>_<i>`), usage from `input_tokens` (plus cache reads and writes) and
/// `output_tokens`, `stop_reason` (`max_tokens`, `refusal`, … as sent). Other block kinds are skipped. Anything
/// else is `STEADFAST_PROVIDER_INVALID_RESPONSE`.
pub fn parse_response(body: &str, step: u32) -> Result<ModelResponse> {
    let bad = |why: &str| invalid_response("Anthropic", why, body, "");
    let v: Value = serde_json::from_str(body).map_err(|_| bad("not JSON"))?;
    if v.get("type").and_then(Value::as_str) == Some("error") {
        return Err(bad("an error object"));
    }
    let blocks = v.get("content").and_then(Value::as_array).ok_or_else(|| bad("no content array"))?;
    let mut turn = TurnBuilder::default();
    for block in blocks {
        turn.block(block, step).map_err(|why| bad(&why))?;
    }
    turn.usage(v.get("usage"));
    turn.stop_reason = v.get("stop_reason").and_then(Value::as_str).map(str::to_string);
    Ok(turn.finish())
}

/// An Anthropic model over an [`HttpClient`]. One HTTP request per `generate`, no retries.
pub struct AnthropicModel<H: HttpClient> {
    client: H,
    api_key: String,
    options: AnthropicOptions,
}

impl<H: HttpClient> AnthropicModel<H> {
    /// A model sending through `client` with this key (a secret: it only ever goes into the header).
    pub fn new(client: H, api_key: String, options: AnthropicOptions) -> AnthropicModel<H> {
        AnthropicModel { client, api_key, options }
    }

    /// The settings.
    pub fn options(&self) -> &AnthropicOptions {
        &self.options
    }
}

#[async_trait(?Send)]
impl<H: HttpClient> Model for AnthropicModel<H> {
    fn id(&self) -> &str {
        &self.options.model
    }

    fn provider_name(&self) -> Option<&str> {
        Some("anthropic")
    }

    fn dependency(&self) -> String {
        super::endpoint_host(&self.options.base_url, self.id())
    }

    async fn generate(&self, request: ModelRequest<'_>) -> Result<ModelResponse> {
        self.generate_streaming(request, &|_| {}).await
    }

    async fn generate_streaming(
        &self,
        request: ModelRequest<'_>,
        on_delta: &dyn Fn(StreamDelta),
    ) -> Result<ModelResponse> {
        super::require_model("Anthropic", &self.options.model).map_err(|e| e.with_run(request.run_id))?;
        let http = super::traced(
            build_request(&self.options, &self.api_key, request.messages, request.tools),
            request.traceparent,
        );
        let (client, key, run_id) = (&self.client, &self.api_key, request.run_id);
        if self.options.stream {
            let mut parser = AnthropicStream::new(request.step);
            super::stream_round_trip(client, http, key, run_id, &mut parser, on_delta).await
        } else {
            super::round_trip(client, http, key, run_id, request.step, parse_response).await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::classify::{classify, is_provider_outage, FailureClass};
    use crate::core::error::{Error, ErrorCode};
    use crate::core::transcript::{ResultKind, ToolCall, ToolResult, Usage};
    use crate::providers::fake::FakeHttp;
    use futures::executor::block_on;

    /// Options naming a model (the providers have no default model).
    fn opts() -> AnthropicOptions {
        AnthropicOptions { model: "claude-3-5-haiku-latest".into(), ..AnthropicOptions::default() }
    }

    const KEY: &str = "sk-ant-test-SECRET-456";

    fn result(id: &str, content: &str, is_error: bool) -> Message {
        Message::Tool(ToolResult {
            tool_call_id: id.into(),
            name: "weather".into(),
            content: content.into(),
            is_error,
            kind: ResultKind::Execution,
            usage: None,
        })
    }

    fn call(id: &str, city: &str) -> ToolCall {
        ToolCall { id: id.into(), name: "weather".into(), args: json!({ "city": city }), invalid: None }
    }

    fn transcript() -> Vec<Message> {
        vec![
            Message::system("You are terse."),
            Message::system("Use Celsius."),
            Message::user("Weather in Paris and Rome?"),
            Message::assistant("Checking.", vec![call("toolu_a", "Paris"), call("toolu_b", "Rome")]),
            result("toolu_a", "18C", false),
            result("toolu_b", "Error: upstream down", true),
        ]
    }

    fn tools() -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "weather".into(),
            description: "Current weather".into(),
            input_schema: json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        }]
    }

    fn run(fake: &FakeHttp) -> Result<ModelResponse> {
        let (messages, tools) = (transcript(), tools());
        let m = AnthropicModel::new(fake.clone(), KEY.to_string(), opts());
        block_on(m.generate(ModelRequest::new("r1", &messages, &tools, 2, "e")))
    }

    fn run_err(status: u16, headers: &[(&str, &str)], body: &str) -> Error {
        let fake = FakeHttp::reply(status, headers, body);
        let err = run(&fake).expect_err("should fail");
        assert_eq!(fake.requests().len(), 1, "exactly one attempt");
        assert!(!err.message.contains(KEY), "key leaked: {}", err.message);
        assert!(!format!("{err:?}").contains(KEY));
        err
    }

    #[test]
    fn full_round_trip() {
        let reply = json!({
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-3-5-haiku-latest",
            "content": [
                {"type": "text", "text": "Let me check "},
                {"type": "text", "text": "both."},
                {"type": "tool_use", "id": "toolu_x", "name": "weather", "input": {"city": "Oslo"}},
                {"type": "tool_use", "id": "toolu_y", "name": "weather", "input": {"city": "Rome"}}
            ],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 200, "output_tokens": 40}
        });
        let fake = FakeHttp::reply(200, &[], &reply.to_string());
        let opts = AnthropicOptions {
            temperature: Some(0.2),
            extra: json!({"tool_choice": {"type": "auto"}, "max_tokens": 5}).as_object().cloned().unwrap_or_default(),
            ..opts()
        };
        let (messages, tools) = (transcript(), tools());
        let m = AnthropicModel::new(fake.clone(), KEY.to_string(), opts);
        assert_eq!(m.id(), "claude-3-5-haiku-latest");
        let got = block_on(m.generate(ModelRequest::new("r1", &messages, &tools, 2, "e"))).unwrap();

        let reqs = fake.requests();
        assert_eq!(reqs.len(), 1);
        let req = &reqs[0];
        assert_eq!(req.method, "POST");
        assert_eq!(req.url, "https://api.anthropic.com/v1/messages");
        assert_eq!(
            req.headers,
            vec![
                ("x-api-key".to_string(), KEY.to_string()),
                ("anthropic-version".to_string(), "2023-06-01".to_string()),
                ("content-type".to_string(), "application/json".to_string()),
            ]
        );
        let body: Value = serde_json::from_str(req.body.as_deref().unwrap_or("")).unwrap();
        assert_eq!(
            body,
            json!({
                "model": "claude-3-5-haiku-latest",
                "max_tokens": 1024,
                "temperature": 0.2,
                "tool_choice": {"type": "auto"},
                "system": "You are terse.\n\nUse Celsius.",
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "Weather in Paris and Rome?"}]},
                    {"role": "assistant", "content": [
                        {"type": "text", "text": "Checking."},
                        {"type": "tool_use", "id": "toolu_a", "name": "weather", "input": {"city": "Paris"}},
                        {"type": "tool_use", "id": "toolu_b", "name": "weather", "input": {"city": "Rome"}}
                    ]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "toolu_a", "content": "18C", "is_error": false},
                        {"type": "tool_result", "tool_use_id": "toolu_b", "content": "Error: upstream down", "is_error": true}
                    ]}
                ],
                "tools": [{
                    "name": "weather",
                    "description": "Current weather",
                    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
                }]
            })
        );
        assert!(!req.body.as_deref().unwrap_or("").contains(KEY));
        assert_eq!(
            got,
            ModelResponse {
                text: "Let me check both.".into(),
                tool_calls: vec![call("toolu_x", "Oslo"), call("toolu_y", "Rome")],
                usage: Usage::tokens(200, 40),
                stop_reason: Some("tool_use".into()),
                reasoning: vec![],
            }
        );
    }

    #[test]
    fn consecutive_results_and_user_text_merge_into_one_user_turn() {
        let messages = vec![
            Message::user("go"),
            Message::assistant("", vec![call("t1", "A"), call("t2", "B"), call("t3", "C")]),
            result("t1", "1", false),
            result("t2", "2", true),
            result("t3", "3", false),
            Message::user("and now?"),
            Message::assistant("done", vec![]),
            Message::assistant("", vec![]),
            Message::user("thanks"),
        ];
        let (system, turns) = to_anthropic_messages(&messages);
        let turns: Vec<Value> = turns.iter().map(|t| serde_json::to_value(t).unwrap()).collect();
        assert_eq!(system, None);
        let roles: Vec<&str> = turns.iter().map(|t| t["role"].as_str().unwrap_or("")).collect();
        assert_eq!(roles, ["user", "assistant", "user", "assistant", "user"]);
        // No empty text block for the tool-only assistant turn.
        assert_eq!(turns[1]["content"].as_array().map(Vec::len), Some(3));
        assert_eq!(turns[1]["content"][0]["type"], "tool_use");
        assert_eq!(
            turns[2]["content"],
            json!([
                {"type": "tool_result", "tool_use_id": "t1", "content": "1", "is_error": false},
                {"type": "tool_result", "tool_use_id": "t2", "content": "2", "is_error": true},
                {"type": "tool_result", "tool_use_id": "t3", "content": "3", "is_error": false},
                {"type": "text", "text": "and now?"}
            ])
        );
    }

    #[test]
    fn non_object_arguments_of_old_transcripts_become_objects() {
        let messages = vec![
            Message::user("go"),
            Message::assistant(
                "",
                vec![
                    ToolCall { id: "a".into(), name: "t".into(), args: Value::Null, invalid: None },
                    ToolCall { id: "b".into(), name: "t".into(), args: json!([1, 2]), invalid: None },
                ],
            ),
        ];
        let (_, turns) = to_anthropic_messages(&messages);
        let turns: Vec<Value> = turns.iter().map(|t| serde_json::to_value(t).unwrap()).collect();
        assert_eq!(turns[1]["content"][0]["input"], json!({}));
        assert_eq!(turns[1]["content"][1]["input"], json!({"_raw": [1, 2]}));
    }

    #[test]
    fn parse_tolerates_odd_blocks_and_string_input() {
        let body = json!({
            "content": [
                {"type": "server_tool_use_in_the_future", "x": 1},
                {"type": "tool_use", "name": "weather", "input": "{\"city\": Par"},
                {"type": "tool_use", "id": "toolu_2", "name": "weather"}
            ],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 10, "cache_read_input_tokens": 5, "output_tokens": 3}
        });
        let r = parse_response(&body.to_string(), 4).unwrap();
        assert_eq!(r.text, "");
        assert_eq!(r.tool_calls[0].id, "call_4_0");
        assert_eq!(r.tool_calls[0].args, json!("{\"city\": Par"), "kept as the model wrote it");
        assert!(r.tool_calls[0].invalid.is_some());
        assert_eq!(r.tool_calls[1].args, json!({}));
        assert_eq!(r.tool_calls[1].invalid, None);
        assert_eq!(r.usage, Usage { cached_input_tokens: 5, ..Usage::tokens(15, 3) });
    }

    /// A thinking block is kept in the transcript as it came, so one nested deeper than the checkpoint's limit is
    /// an invalid answer (retried), never a turn that could not be read back; at the limit it is kept. Whole and
    /// streamed answers alike.
    #[test]
    fn a_thinking_block_nested_past_the_limit_is_an_invalid_response() {
        use crate::core::limits::MAX_JSON_DEPTH;
        use crate::providers::stream::{parse_stream, AnthropicStream};
        let block = |depth: usize| {
            // `{"type": "thinking", …}` is one level; the signature holds the rest.
            let mut v = json!("sig");
            for _ in 1..depth {
                v = json!([v]);
            }
            json!({"type": "thinking", "thinking": "hmm", "signature": v})
        };
        for depth in [MAX_JSON_DEPTH - 1, MAX_JSON_DEPTH, MAX_JSON_DEPTH + 1, 100] {
            let body = json!({"content": [block(depth), {"type": "text", "text": "hi"}], "stop_reason": "end_turn"});
            let events = format!(
                "event: message_start\ndata: {{\"type\":\"message_start\",\"message\":{{\"usage\":{{\"input_tokens\":1}}}}}}\n\n\
                 event: content_block_start\ndata: {}\n\n\
                 event: content_block_stop\ndata: {{\"type\":\"content_block_stop\",\"index\":0}}\n\n\
                 event: message_delta\ndata: {{\"type\":\"message_delta\",\"delta\":{{\"stop_reason\":\"end_turn\"}},\"usage\":{{\"output_tokens\":2}}}}\n\n\
                 event: message_stop\ndata: {{\"type\":\"message_stop\"}}\n\n",
                json!({"type": "content_block_start", "index": 0, "content_block": block(depth)})
            );
            let whole = parse_response(&body.to_string(), 1);
            let streamed = parse_stream(&mut AnthropicStream::new(1), &events);
            for (how, r) in [("whole", whole), ("streamed", streamed)] {
                if depth <= MAX_JSON_DEPTH {
                    assert_eq!(r.unwrap().reasoning, vec![block(depth)], "{how} {depth}");
                } else {
                    let e = r.unwrap_err();
                    assert_eq!(e.code, ErrorCode::ProviderInvalidResponse, "{how} {depth}");
                    assert!(e.message.contains(&format!("nested {depth} levels")), "{how}: {}", e.message);
                }
            }
        }
    }

    #[test]
    fn rate_limited_with_retry_after() {
        let e = run_err(429, &[("retry-after", "2")], "{\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\"}}");
        assert_eq!(e.code, ErrorCode::ProviderRateLimited);
        assert!(e.retryable);
        assert_eq!(e.retry_after_ms, Some(2000));
        assert_eq!(e.run_id.as_deref(), Some("r1"));
    }

    #[test]
    fn server_errors_and_overload_are_transient() {
        for status in [500, 529] {
            let e = run_err(status, &[], "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}");
            assert_eq!(e.code, ErrorCode::ProviderUnavailable, "{status}");
            assert!(e.retryable);
            assert_eq!(classify(&e), FailureClass::Transient);
            assert!(is_provider_outage(&e));
        }
    }

    #[test]
    fn auth_error_is_terminal_and_key_free() {
        let e = run_err(401, &[], &format!("invalid x-api-key {KEY}"));
        assert_eq!(e.code, ErrorCode::ProviderAuth);
        assert!(!e.retryable);
        assert!(!is_provider_outage(&e));
    }

    #[test]
    fn bad_request_is_not_retryable() {
        let e = run_err(400, &[], "{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\"}}");
        assert_eq!(e.code, ErrorCode::ProviderBadRequest);
        assert!(!e.retryable);
    }

    #[test]
    fn garbage_body_is_invalid_response() {
        for body in ["not json", "{}", "{\"type\":\"error\",\"error\":{}}", "{\"content\":[{\"type\":\"tool_use\"}]}"] {
            let e = run_err(200, &[], body);
            assert_eq!(e.code, ErrorCode::ProviderInvalidResponse, "{body}");
            assert!(e.retryable);
        }
    }

    #[test]
    fn transport_error_passes_through_once() {
        let fake = FakeHttp::new(vec![Err(Error::new(ErrorCode::ProviderNetwork, "connection reset"))]);
        let e = run(&fake).expect_err("should fail");
        assert_eq!(e.code, ErrorCode::ProviderNetwork);
        assert_eq!(fake.requests().len(), 1);
    }

    #[test]
    fn options_deserialize_camel_case() {
        let o: AnthropicOptions =
            serde_json::from_value(json!({"model": "claude-sonnet-4-0", "maxTokens": 4096, "baseUrl": "https://gw/"}))
                .unwrap();
        assert_eq!(o.max_tokens, 4096);
        assert_eq!(build_request(&o, "k", &[], &[]).url, "https://gw/v1/messages");
        assert_eq!(opts().max_tokens, 1024);
    }
}
