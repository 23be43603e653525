//! [`WorkersAiModel`]: Cloudflare Workers AI through the `AI` binding ([`AiBinding`], implemented by the
//! Worker shell). The input is OpenAI-style (`messages`, `tools`); the output is either Workers AI's own shape
//! (`{response, tool_calls: [{name, arguments}], usage}`) or an OpenAI-style `choices` shape.

use super::{
    invalid_response, merge_extra, openai_messages, openai_tools, openai_usage, parse_openai_value, tool_call,
};
use crate::core::error::{Error, ErrorCode, Result};
use crate::core::machine::ModelResponse;
use crate::core::transcript::Message;
use crate::runtime::traits::{Model, ModelRequest, ToolSpec};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::rc::Rc;

/// The Workers AI binding: `env.AI.run(model, input)`. One attempt per call, no retries. Implementations map
/// their failures to provider codes (`STEADFAST_PROVIDER_UNAVAILABLE`, `…_RATE_LIMITED`, `…_NETWORK`, …);
/// [`WorkersAiModel`] passes them through unchanged.
#[async_trait(?Send)]
pub trait AiBinding {
    /// Runs `model` on `input` and returns its output.
    async fn run(&self, model: &str, input: Value) -> Result<Value>;
}

#[async_trait(?Send)]
impl<B: AiBinding + ?Sized> AiBinding for Rc<B> {
    async fn run(&self, model: &str, input: Value) -> Result<Value> {
        (**self).run(model, input).await
    }
}

/// Settings of a [`WorkersAiModel`] (JSON: camelCase; every field optional).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WorkersAiOptions {
    /// Model id (also [`Model::id`]). Default `@cf/meta/llama-3.3-70b-instruct-fp8-fast`.
    pub model: String,
    /// `max_tokens` (omitted when unset).
    pub max_tokens: Option<u32>,
    /// Sampling temperature (omitted when unset).
    pub temperature: Option<f64>,
    /// More input fields (e.g. `top_p`, `seed`); they cannot replace `messages` or `tools`.
    pub extra: Map<String, Value>,
}

impl Default for WorkersAiOptions {
    fn default() -> WorkersAiOptions {
        WorkersAiOptions {
            model: "@cf/meta/llama-3.3-70b-instruct-fp8-fast".into(),
            max_tokens: None,
            temperature: None,
            extra: Map::new(),
        }
    }
}

/// The error for a failed call of the Workers AI binding, from the binding's error text: "429" or "capacity"
/// is a rate limit, anything else the service failing (both retryable; never an auth error: the binding has no
/// key).
pub fn binding_error(text: &str) -> Error {
    let code = if text.contains("429") || text.to_ascii_lowercase().contains("capacity") {
        ErrorCode::ProviderRateLimited
    } else {
        ErrorCode::ProviderUnavailable
    };
    Error::new(code, format!("Workers AI failed: {text}"))
}

/// Builds the binding input: `{messages: [...OpenAI-style...], tools: [...OpenAI-style...]}` (tools omitted
/// when empty) plus the optional parameters.
pub fn build_input(options: &WorkersAiOptions, messages: &[Message], tools: &[ToolSpec]) -> Value {
    let mut input = Map::new();
    // Ignored (the fallback): borrowed strings and JSON values always convert.
    input.insert("messages".into(), serde_json::to_value(openai_messages(messages, false)).unwrap_or_default());
    if !tools.is_empty() {
        input.insert("tools".into(), Value::Array(openai_tools(tools)));
    }
    if let Some(m) = options.max_tokens {
        input.insert("max_tokens".into(), json!(m));
    }
    if let Some(t) = options.temperature {
        input.insert("temperature".into(), json!(t));
    }
    merge_extra(&mut input, &options.extra, &["messages", "tools"]);
    Value::Object(input)
}

/// Reads the binding's output: `{response, tool_calls: [{name, arguments}], usage}` (arguments an object or
/// a JSON string; invalid JSON kept as `{"_raw": …}`; ids `call_<step>_<i>` when absent; a non-string
/// `response` is serialised), an OpenAI-style `choices` shape, either wrapped in the REST API's
/// `{result: …}`, or a bare string. Anything else is `STEADFAST_PROVIDER_INVALID_RESPONSE`.
pub fn parse_response(output: &Value, step: u32) -> Result<ModelResponse> {
    let bad = |why: &str| invalid_response("Workers AI", why, &output.to_string(), "");
    let v = match output {
        Value::String(s) => return Ok(ModelResponse { text: s.clone(), ..ModelResponse::default() }),
        Value::Object(o) if !is_answer(o) => match o.get("result") {
            Some(inner @ Value::Object(r)) if is_answer(r) => inner,
            _ => return Err(bad("no response, tool_calls or choices")),
        },
        Value::Object(_) => output,
        _ => return Err(bad("not an object")),
    };
    if v.get("choices").is_some() {
        return parse_openai_value(v, step).map_err(|why| bad(&why));
    }
    let text = match v.get("response") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    };
    let tool_calls = match v.get("tool_calls") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(calls)) => calls
            .iter()
            .enumerate()
            .map(|(i, c)| tool_call(c, step, i))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|why| bad(&why))?,
        Some(_) => return Err(bad("tool_calls is not an array")),
    };
    let usage = v.get("usage").map(openai_usage).unwrap_or_default();
    let stop_reason = v.get("finish_reason").and_then(Value::as_str).map(str::to_string);
    Ok(ModelResponse { text, tool_calls, usage, stop_reason })
}

fn is_answer(o: &Map<String, Value>) -> bool {
    o.contains_key("response") || o.contains_key("tool_calls") || o.contains_key("choices")
}

/// A Workers AI model over an [`AiBinding`]. One binding call per `generate`, no retries.
pub struct WorkersAiModel<B: AiBinding> {
    binding: B,
    options: WorkersAiOptions,
}

impl<B: AiBinding> WorkersAiModel<B> {
    /// A model running on `binding` (no key: the binding carries the account).
    pub fn new(binding: B, options: WorkersAiOptions) -> WorkersAiModel<B> {
        WorkersAiModel { binding, options }
    }

    /// The settings.
    pub fn options(&self) -> &WorkersAiOptions {
        &self.options
    }
}

#[async_trait(?Send)]
impl<B: AiBinding> Model for WorkersAiModel<B> {
    fn id(&self) -> &str {
        &self.options.model
    }

    async fn generate(&self, request: ModelRequest<'_>) -> Result<ModelResponse> {
        let input = build_input(&self.options, request.messages, request.tools);
        let output = self.binding.run(&self.options.model, input).await.map_err(|e| e.with_run(request.run_id))?;
        parse_response(&output, request.step).map_err(|e| e.with_run(request.run_id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::error::{Error, ErrorCode};
    use crate::core::transcript::{ResultKind, ToolCall, ToolResult, Usage};
    use futures::executor::block_on;
    use std::cell::RefCell;
    use std::collections::VecDeque;

    #[derive(Default)]
    struct FakeAi {
        replies: RefCell<VecDeque<Result<Value>>>,
        calls: RefCell<Vec<(String, Value)>>,
    }

    impl FakeAi {
        fn new(replies: Vec<Result<Value>>) -> Rc<FakeAi> {
            Rc::new(FakeAi { replies: RefCell::new(replies.into()), calls: Default::default() })
        }
    }

    #[async_trait(?Send)]
    impl AiBinding for FakeAi {
        async fn run(&self, model: &str, input: Value) -> Result<Value> {
            self.calls.borrow_mut().push((model.to_string(), input));
            self.replies.borrow_mut().pop_front().unwrap_or_else(|| Err(Error::internal("fake ai: no reply left")))
        }
    }

    fn transcript() -> Vec<Message> {
        vec![
            Message::system("You are terse."),
            Message::user("Weather in Paris and Rome?"),
            Message::assistant(
                "",
                vec![
                    ToolCall {
                        id: "call_1_0".into(),
                        name: "weather".into(),
                        args: json!({"city": "Paris"}),
                        invalid: None,
                    },
                    ToolCall {
                        id: "call_1_1".into(),
                        name: "weather".into(),
                        args: json!({"city": "Rome"}),
                        invalid: None,
                    },
                ],
            ),
            Message::Tool(ToolResult {
                tool_call_id: "call_1_0".into(),
                name: "weather".into(),
                content: "18C".into(),
                is_error: false,
                kind: ResultKind::Execution,
            }),
            Message::Tool(ToolResult {
                tool_call_id: "call_1_1".into(),
                name: "weather".into(),
                content: "Error: upstream down".into(),
                is_error: true,
                kind: ResultKind::Execution,
            }),
        ]
    }

    fn tools() -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "weather".into(),
            description: "Current weather".into(),
            input_schema: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        }]
    }

    fn run(ai: &Rc<FakeAi>, options: WorkersAiOptions) -> Result<ModelResponse> {
        let (messages, tools) = (transcript(), tools());
        let m = WorkersAiModel::new(ai.clone(), options);
        block_on(m.generate(ModelRequest { run_id: "r1", messages: &messages, tools: &tools, step: 2, execution: "e" }))
    }

    #[test]
    fn full_round_trip() {
        let ai = FakeAi::new(vec![Ok(json!({
            "response": null,
            "tool_calls": [
                {"name": "weather", "arguments": {"city": "Oslo"}},
                {"name": "weather", "arguments": "{\"city\":\"Rome\"}"}
            ],
            "usage": {"prompt_tokens": 80, "completion_tokens": 20, "total_tokens": 100}
        }))]);
        let opts = WorkersAiOptions { max_tokens: Some(512), ..WorkersAiOptions::default() };
        let got = run(&ai, opts).unwrap();
        let calls = ai.calls.borrow();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].0, "@cf/meta/llama-3.3-70b-instruct-fp8-fast");
        assert_eq!(
            calls[0].1,
            json!({
                "max_tokens": 512,
                "messages": [
                    {"role": "system", "content": "You are terse."},
                    {"role": "user", "content": "Weather in Paris and Rome?"},
                    {"role": "assistant", "content": "", "tool_calls": [
                        {"id": "call_1_0", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}},
                        {"id": "call_1_1", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Rome\"}"}}
                    ]},
                    {"role": "tool", "tool_call_id": "call_1_0", "content": "18C"},
                    {"role": "tool", "tool_call_id": "call_1_1", "content": "Error: upstream down"}
                ],
                "tools": [{"type": "function", "function": {
                    "name": "weather",
                    "description": "Current weather",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}
                }}]
            })
        );
        assert_eq!(
            got,
            ModelResponse {
                text: String::new(),
                tool_calls: vec![
                    ToolCall {
                        id: "call_2_0".into(),
                        name: "weather".into(),
                        args: json!({"city": "Oslo"}),
                        invalid: None
                    },
                    ToolCall {
                        id: "call_2_1".into(),
                        name: "weather".into(),
                        args: json!({"city": "Rome"}),
                        invalid: None
                    },
                ],
                usage: Usage { input_tokens: 80, output_tokens: 20 },
                stop_reason: None,
            }
        );
    }

    #[test]
    fn text_answer_without_usage() {
        let r = parse_response(&json!({"response": "Sunny."}), 1).unwrap();
        assert_eq!(r.text, "Sunny.");
        assert!(r.tool_calls.is_empty());
        assert_eq!(r.usage, Usage::default());
        let r = parse_response(&json!({"response": {"answer": 42}}), 1).unwrap();
        assert_eq!(r.text, "{\"answer\":42}");
        let r = parse_response(&json!({"result": {"response": "wrapped"}, "success": true}), 1).unwrap();
        assert_eq!(r.text, "wrapped");
    }

    #[test]
    fn openai_style_choices() {
        let out = json!({
            "choices": [{"message": {"content": "ok", "tool_calls": [
                {"id": "chatcmpl-tool-1", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Nice\"}"}}
            ]}, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 9, "completion_tokens": 4}
        });
        let r = parse_response(&out, 5).unwrap();
        assert_eq!(r.text, "ok");
        assert_eq!(
            r.tool_calls,
            vec![ToolCall {
                id: "chatcmpl-tool-1".into(),
                name: "weather".into(),
                args: json!({"city": "Nice"}),
                invalid: None
            }]
        );
        assert_eq!(r.usage, Usage { input_tokens: 9, output_tokens: 4 });
        assert_eq!(r.stop_reason.as_deref(), Some("tool_calls"));
    }

    #[test]
    fn invalid_arguments_are_kept_raw() {
        let r = parse_response(&json!({"tool_calls": [{"name": "weather", "arguments": "{city: Paris"}]}), 3).unwrap();
        assert_eq!(r.tool_calls[0].args, json!({"_raw": "{city: Paris"}));
        assert_eq!(r.tool_calls[0].id, "call_3_0");
    }

    #[test]
    fn garbage_output_is_invalid_response() {
        for out in
            [json!(42), json!({"foo": 1}), json!({"tool_calls": "x"}), json!({"tool_calls": [{"arguments": {}}]})]
        {
            let ai = FakeAi::new(vec![Ok(out.clone())]);
            let e = run(&ai, WorkersAiOptions::default()).expect_err("should fail");
            assert_eq!(e.code, ErrorCode::ProviderInvalidResponse, "{out}");
            assert!(e.retryable);
            assert_eq!(e.run_id.as_deref(), Some("r1"));
            assert_eq!(ai.calls.borrow().len(), 1);
        }
    }

    #[test]
    fn binding_errors_pass_through_once() {
        let ai = FakeAi::new(vec![
            Err(Error::new(ErrorCode::ProviderRateLimited, "3040: capacity exceeded").with_retry_after_ms(Some(2000))),
            Ok(json!({"response": "never reached by the first call"})),
        ]);
        let e = run(&ai, WorkersAiOptions::default()).expect_err("should fail");
        assert_eq!(e.code, ErrorCode::ProviderRateLimited);
        assert!(e.retryable);
        assert_eq!(e.retry_after_ms, Some(2000));
        assert_eq!(ai.calls.borrow().len(), 1, "no retry inside the provider");
    }

    #[test]
    fn options_and_id() {
        let o: WorkersAiOptions =
            serde_json::from_value(json!({"model": "@cf/qwen/qwen2.5-coder-32b-instruct", "temperature": 0.1}))
                .unwrap();
        assert_eq!(o.temperature, Some(0.1));
        let m = WorkersAiModel::new(FakeAi::new(vec![]), o);
        assert_eq!(m.id(), "@cf/qwen/qwen2.5-coder-32b-instruct");
        assert_eq!(
            build_input(m.options(), &[Message::user("x")], &[]),
            json!({"temperature": 0.1, "messages": [{"role": "user", "content": "x"}]})
        );
    }

    #[test]
    fn binding_errors_are_rate_limits_or_outages_never_terminal() {
        assert_eq!(binding_error("AiError: 429 Too Many Requests").code, ErrorCode::ProviderRateLimited);
        assert_eq!(binding_error("AiError: Capacity temporarily exceeded").code, ErrorCode::ProviderRateLimited);
        let other = binding_error("AiError: 5007: internal");
        assert_eq!(other.code, ErrorCode::ProviderUnavailable);
        assert!(other.retryable && other.message.starts_with("Workers AI failed"));
    }
}
