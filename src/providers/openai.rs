//! [`OpenAiModel`]: OpenAI-compatible chat completions (`POST {base_url}/chat/completions`) — OpenAI itself
//! or any compatible server (OpenRouter, Groq, vLLM, Ollama, Cloudflare AI Gateway, …).

use super::stream::{OpenAiStream, StreamDelta};
use super::{body_text, invalid_response, join_url, merge_extra, openai_messages, openai_tools, parse_openai_value};
use crate::core::error::Result;
use crate::core::machine::ModelResponse;
use crate::core::transcript::Message;
use crate::http::{HttpClient, HttpRequest};
use crate::runtime::traits::{Model, ModelRequest, ToolSpec};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

/// Settings of an [`OpenAiModel`] (JSON: camelCase; every field optional).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct OpenAiOptions {
    /// Base URL; the request goes to `{base_url}/chat/completions`. Default `https://api.openai.com/v1`.
    pub base_url: String,
    /// Model id (also [`Model::id`]). No default: a call without one fails with `STEADFAST_CONFIG_INVALID`.
    pub model: String,
    /// Sampling temperature (omitted when unset).
    pub temperature: Option<f64>,
    /// The output token cap, sent as `max_completion_tokens` (omitted when unset).
    pub max_tokens: Option<u32>,
    /// Send the cap as the older `max_tokens` field instead, for OpenAI-compatible servers that only know that
    /// one (OpenAI's reasoning models refuse `max_tokens`).
    pub legacy_max_tokens: bool,
    /// More body fields (e.g. `tool_choice`, `reasoning_effort`); they cannot replace `model`, `messages` or
    /// `tools`.
    pub extra: Map<String, Value>,
    /// Per-request timeout in milliseconds (0 = the transport's default).
    pub timeout_ms: u64,
    /// Ask for a streamed answer (`stream: true`, `stream_options.include_usage`): while someone listens to
    /// the run's events its text arrives as `text.delta` events; the recorded turn is the same.
    pub stream: bool,
}

impl Default for OpenAiOptions {
    fn default() -> OpenAiOptions {
        OpenAiOptions {
            base_url: "https://api.openai.com/v1".into(),
            model: String::new(),
            temperature: None,
            max_tokens: None,
            legacy_max_tokens: false,
            extra: Map::new(),
            timeout_ms: 0,
            stream: false,
        }
    }
}

/// Builds the chat-completions request for a transcript and tool list. `Authorization: Bearer <api_key>` is
/// sent unless the key is empty (local servers).
pub fn build_request(options: &OpenAiOptions, api_key: &str, messages: &[Message], tools: &[ToolSpec]) -> HttpRequest {
    let mut body = Map::new();
    body.insert("model".into(), json!(options.model));
    if !tools.is_empty() {
        body.insert("tools".into(), Value::Array(openai_tools(tools)));
    }
    if let Some(t) = options.temperature {
        body.insert("temperature".into(), json!(t));
    }
    if let Some(m) = options.max_tokens {
        let field = if options.legacy_max_tokens { "max_tokens" } else { "max_completion_tokens" };
        body.insert(field.into(), json!(m));
    }
    if options.stream {
        body.insert("stream".into(), json!(true));
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }
    merge_extra(&mut body, &options.extra, &["model", "messages", "tools", "stream", "stream_options"]);
    let mut headers = vec![("content-type".to_string(), "application/json".to_string())];
    if !api_key.is_empty() {
        headers.push(("authorization".to_string(), format!("Bearer {api_key}")));
    }
    HttpRequest {
        method: "POST".into(),
        url: join_url(&options.base_url, "chat/completions"),
        headers,
        body: Some(body_text(&body, &openai_messages(messages, true))),
        timeout_ms: options.timeout_ms,
        max_response_bytes: 0,
    }
}

/// Reads a 2xx chat-completions body: `choices[0].message.content` (null → ""), `message.refusal` (the text,
/// stop reason `refusal`), `tool_calls` (arguments parsed from their JSON string; unusable ones marked
/// [`crate::core::transcript::ToolCall::invalid`]; missing ids become `call_<step>_<i>`), `usage.prompt_tokens` /
/// `completion_tokens`, `finish_reason`. Anything else is `STEADFAST_PROVIDER_INVALID_RESPONSE`.
pub fn parse_response(body: &str, step: u32) -> Result<ModelResponse> {
    let v: Value = serde_json::from_str(body).map_err(|_| invalid_response("OpenAI", "not JSON", body, ""))?;
    parse_openai_value(&v, step).map_err(|why| invalid_response("OpenAI", &why, body, ""))
}

/// An OpenAI-compatible chat model over an [`HttpClient`]. One HTTP request per `generate`, no retries.
pub struct OpenAiModel<H: HttpClient> {
    client: H,
    api_key: String,
    options: OpenAiOptions,
}

impl<H: HttpClient> OpenAiModel<H> {
    /// A model sending through `client` with this key (a secret: it only ever goes into the header).
    pub fn new(client: H, api_key: String, options: OpenAiOptions) -> OpenAiModel<H> {
        OpenAiModel { client, api_key, options }
    }

    /// The settings.
    pub fn options(&self) -> &OpenAiOptions {
        &self.options
    }
}

#[async_trait(?Send)]
impl<H: HttpClient> Model for OpenAiModel<H> {
    fn id(&self) -> &str {
        &self.options.model
    }

    fn provider_name(&self) -> Option<&str> {
        Some("openai")
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
        super::require_model("OpenAI", &self.options.model).map_err(|e| e.with_run(request.run_id))?;
        let http = super::traced(
            build_request(&self.options, &self.api_key, request.messages, request.tools),
            request.traceparent,
        );
        let (client, key, run_id) = (&self.client, &self.api_key, request.run_id);
        if self.options.stream {
            let mut parser = OpenAiStream::new(request.step);
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
    fn opts() -> OpenAiOptions {
        OpenAiOptions { model: "gpt-4o-mini".into(), ..OpenAiOptions::default() }
    }

    const KEY: &str = "sk-test-SECRET-123";

    fn transcript() -> Vec<Message> {
        vec![
            Message::system("You are terse."),
            Message::user("Weather in Paris and Rome?"),
            Message::assistant(
                "Checking.",
                vec![
                    ToolCall {
                        id: "call_a".into(),
                        name: "weather".into(),
                        args: json!({"city": "Paris"}),
                        invalid: None,
                    },
                    ToolCall {
                        id: "call_b".into(),
                        name: "weather".into(),
                        args: json!({"city": "Rome"}),
                        invalid: None,
                    },
                ],
            ),
            Message::Tool(ToolResult {
                tool_call_id: "call_a".into(),
                name: "weather".into(),
                content: "18C".into(),
                is_error: false,
                kind: ResultKind::Execution,
                usage: None,
            }),
            Message::Tool(ToolResult {
                tool_call_id: "call_b".into(),
                name: "weather".into(),
                content: "Error: upstream down".into(),
                is_error: true,
                kind: ResultKind::Execution,
                usage: None,
            }),
        ]
    }

    fn tools() -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "weather".into(),
            description: "Current weather".into(),
            input_schema: json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        }]
    }

    fn model(fake: &FakeHttp, options: OpenAiOptions) -> OpenAiModel<FakeHttp> {
        OpenAiModel::new(fake.clone(), KEY.to_string(), options)
    }

    fn run(fake: &FakeHttp) -> Result<ModelResponse> {
        let (messages, tools) = (transcript(), tools());
        let m = model(fake, opts());
        block_on(m.generate(ModelRequest::new("r1", &messages, &tools, 3, "e")))
    }

    fn run_err(status: u16, headers: &[(&str, &str)], body: &str) -> (Error, FakeHttp) {
        let fake = FakeHttp::reply(status, headers, body);
        let err = run(&fake).expect_err("should fail");
        assert_eq!(fake.requests().len(), 1, "exactly one attempt");
        assert!(!err.message.contains(KEY), "key leaked: {}", err.message);
        assert!(!format!("{err:?}").contains(KEY));
        (err, fake)
    }

    #[test]
    fn full_round_trip() {
        let reply = json!({
            "id": "chatcmpl-1",
            "choices": [{
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": null,
                    "tool_calls": [
                        {"id": "call_x", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Oslo\"}"}},
                        {"id": "call_y", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Rome\"}"}}
                    ]
                },
                "finish_reason": "tool_calls"
            }],
            "usage": {"prompt_tokens": 120, "completion_tokens": 33, "total_tokens": 153}
        });
        let fake = FakeHttp::reply(200, &[], &reply.to_string());
        let opts = OpenAiOptions {
            base_url: "https://gw.example/v1/".into(),
            temperature: Some(0.5),
            max_tokens: Some(256),
            extra: json!({"tool_choice": "auto", "model": "ignored"}).as_object().cloned().unwrap_or_default(),
            ..opts()
        };
        let (messages, tools) = (transcript(), tools());
        let m = model(&fake, opts);
        assert_eq!(m.id(), "gpt-4o-mini");
        let got = block_on(m.generate(ModelRequest::new("r1", &messages, &tools, 3, "e"))).unwrap();

        let reqs = fake.requests();
        assert_eq!(reqs.len(), 1);
        let req = &reqs[0];
        assert_eq!(req.method, "POST");
        assert_eq!(req.url, "https://gw.example/v1/chat/completions");
        assert_eq!(
            req.headers,
            vec![
                ("content-type".to_string(), "application/json".to_string()),
                ("authorization".to_string(), format!("Bearer {KEY}")),
            ]
        );
        let body: Value = serde_json::from_str(req.body.as_deref().unwrap_or("")).unwrap();
        assert_eq!(
            body,
            json!({
                "model": "gpt-4o-mini",
                "temperature": 0.5,
                "max_completion_tokens": 256,
                "tool_choice": "auto",
                "messages": [
                    {"role": "system", "content": "You are terse."},
                    {"role": "user", "content": "Weather in Paris and Rome?"},
                    {"role": "assistant", "content": "Checking.", "tool_calls": [
                        {"id": "call_a", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}},
                        {"id": "call_b", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Rome\"}"}}
                    ]},
                    {"role": "tool", "tool_call_id": "call_a", "content": "18C"},
                    {"role": "tool", "tool_call_id": "call_b", "content": "Error: upstream down"}
                ],
                "tools": [{"type": "function", "function": {
                    "name": "weather",
                    "description": "Current weather",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
                }}]
            })
        );
        assert_eq!(
            got,
            ModelResponse {
                text: String::new(),
                tool_calls: vec![
                    ToolCall {
                        id: "call_x".into(),
                        name: "weather".into(),
                        args: json!({"city": "Oslo"}),
                        invalid: None
                    },
                    ToolCall {
                        id: "call_y".into(),
                        name: "weather".into(),
                        args: json!({"city": "Rome"}),
                        invalid: None
                    },
                ],
                usage: Usage::tokens(120, 33),
                stop_reason: Some("tool_calls".into()),
                reasoning: vec![],
            }
        );
    }

    #[test]
    fn text_answer_and_omitted_tools() {
        let req = build_request(&opts(), "", &[Message::user("hi")], &[]);
        assert_eq!(req.url, "https://api.openai.com/v1/chat/completions");
        assert!(req.headers.iter().all(|(k, _)| k != "authorization"));
        let body: Value = serde_json::from_str(req.body.as_deref().unwrap_or("")).unwrap();
        assert_eq!(body, json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}));
        let r = parse_response(
            r#"{"choices":[{"message":{"role":"assistant","content":"Hello"},"finish_reason":"stop"}]}"#,
            1,
        )
        .unwrap();
        assert_eq!(r.text, "Hello");
        assert!(r.tool_calls.is_empty());
        assert_eq!(r.usage, Usage::tokens(0, 0));
        assert_eq!(r.stop_reason.as_deref(), Some("stop"));
    }

    #[test]
    fn arguments_cut_mid_json_mark_the_call_invalid_and_missing_ids_are_generated() {
        let body = json!({"choices": [{"message": {"content": "x", "tool_calls": [
            {"type": "function", "function": {"name": "weather", "arguments": "{\"city\": Par"}},
            {"id": "", "type": "function", "function": {"name": "weather", "arguments": {"city": "Rome"}}}
        ]}, "finish_reason": "tool_calls"}]});
        let r = parse_response(&body.to_string(), 7).unwrap();
        assert_eq!(r.tool_calls[0].id, "call_7_0");
        assert_eq!(r.tool_calls[0].args, json!("{\"city\": Par"), "kept as the model wrote them");
        let why = r.tool_calls[0].invalid.as_deref().unwrap_or("");
        assert!(why.starts_with("the arguments were not valid JSON") && why.ends_with("{\"city\": Par"), "{why}");
        assert_eq!(r.tool_calls[1].id, "call_7_1");
        assert_eq!(r.tool_calls[1].invalid, None);
        assert_eq!(r.tool_calls[1].args, json!({"city": "Rome"}));
    }

    #[test]
    fn streamed_calls_classify_http_errors_and_keep_the_key_out() {
        let fake = FakeHttp::reply(429, &[("retry-after", "3")], &format!("{{\"error\": \"slow down {KEY}\"}}"));
        let m = model(&fake, OpenAiOptions { stream: true, ..opts() });
        let (messages, tools) = (transcript(), tools());
        let request = ModelRequest::new("r1", &messages, &tools, 3, "e");
        let e = block_on(m.generate_streaming(request, &|_| {})).unwrap_err();
        assert_eq!(
            (e.code, e.retry_after_ms, e.run_id.as_deref()),
            (ErrorCode::ProviderRateLimited, Some(3000), Some("r1"))
        );
        assert!(!e.message.contains(KEY), "{}", e.message);
        let body: Value = serde_json::from_str(fake.requests()[0].body.as_deref().unwrap_or("")).unwrap();
        assert_eq!((&body["stream"], &body["stream_options"]["include_usage"]), (&json!(true), &json!(true)));
        // Without a listener (`generate`) a streamed answer is read whole through the same parser.
        let fake = FakeHttp::reply(200, &[], "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n");
        let m = model(&fake, OpenAiOptions { stream: true, ..opts() });
        let request = ModelRequest::new("r1", &messages, &tools, 3, "e");
        assert_eq!(block_on(m.generate(request)).unwrap().text, "Hi");
    }

    #[test]
    fn rate_limited_with_retry_after() {
        let (e, _) = run_err(429, &[("retry-after", "2")], "{\"error\":{\"message\":\"Rate limit\"}}");
        assert_eq!(e.code, ErrorCode::ProviderRateLimited);
        assert!(e.retryable);
        assert_eq!(e.retry_after_ms, Some(2000));
        assert_eq!(e.status, Some(429));
        assert_eq!(e.run_id.as_deref(), Some("r1"));
        assert!(is_provider_outage(&e));
    }

    #[test]
    fn server_error_is_transient() {
        let (e, _) = run_err(500, &[], "oops");
        assert_eq!(e.code, ErrorCode::ProviderUnavailable);
        assert!(e.retryable);
        assert_eq!(classify(&e), FailureClass::Transient);
    }

    #[test]
    fn auth_error_is_terminal_and_key_free() {
        let (e, fake) =
            run_err(401, &[], &format!("{{\"error\":{{\"message\":\"Incorrect API key provided: {KEY}\"}}}}"));
        assert_eq!(e.code, ErrorCode::ProviderAuth);
        assert!(!e.retryable);
        assert!(!is_provider_outage(&e));
        assert!(e.message.contains("[redacted]"));
        // The key did go out, in the header only.
        let req = &fake.requests()[0];
        assert!(req.headers.contains(&("authorization".to_string(), format!("Bearer {KEY}"))));
        assert!(!req.body.as_deref().unwrap_or("").contains(KEY));
    }

    #[test]
    fn bad_request_is_not_retryable() {
        let (e, _) = run_err(400, &[], "{\"error\":{\"message\":\"context too long\"}}");
        assert_eq!(e.code, ErrorCode::ProviderBadRequest);
        assert!(!e.retryable);
        assert_eq!(classify(&e), FailureClass::Terminal);
    }

    #[test]
    fn garbage_body_is_invalid_response() {
        for body in
            ["<html>bad gateway</html>", "{}", "{\"choices\":[]}", "{\"choices\":[{\"message\":{\"content\":5}}]}"]
        {
            let (e, _) = run_err(200, &[], body);
            assert_eq!(e.code, ErrorCode::ProviderInvalidResponse, "{body}");
            assert!(e.retryable);
            assert_eq!(e.status, Some(200));
        }
        let long = "x".repeat(5_000);
        let (e, _) = run_err(200, &[], &long);
        assert!(e.message.len() < 400, "excerpt is short");
    }

    #[test]
    fn transport_error_passes_through_once() {
        let fake = FakeHttp::new(vec![Err(Error::new(ErrorCode::ProviderTimeout, "timed out"))]);
        let e = run(&fake).expect_err("should fail");
        assert_eq!(e.code, ErrorCode::ProviderTimeout);
        assert!(e.retryable);
        assert_eq!(fake.requests().len(), 1);
    }

    #[test]
    fn options_deserialize_camel_case() {
        let o: OpenAiOptions =
            serde_json::from_value(json!({"baseUrl": "http://localhost:11434/v1", "model": "llama3", "maxTokens": 99}))
                .unwrap();
        assert_eq!(o.base_url, "http://localhost:11434/v1");
        assert_eq!(o.model, "llama3");
        assert_eq!(o.max_tokens, Some(99));
        assert_eq!(o.temperature, None);
    }
}
