//! [`WorkersAiModel`]: Cloudflare Workers AI through the `AI` binding ([`AiBinding`], implemented by the
//! Worker shell). The input is OpenAI-style (`messages`, `tools`); the output is either Workers AI's own shape
//! (`{response, tool_calls: [{name, arguments}], usage}`) or an OpenAI-style `choices` shape. With
//! [`WorkersAiOptions::stream`] the binding is asked for `stream: true` and its server-sent events are read as
//! they arrive ([`WorkersAiStream`]).

use super::stream::{StreamDelta, StreamParser, WorkersAiStream};
use super::{
    invalid_response, merge_extra, openai_messages, openai_tools, openai_usage, parse_openai_value, tool_call,
};
use crate::core::error::{Error, ErrorCode, Result};
use crate::core::machine::ModelResponse;
use crate::core::transcript::{Message, Usage};
use crate::core::wire::json_text;
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
    /// Runs `model` on `input` and returns its output; after `timeout_ms` (0: the implementation's default)
    /// without one, `STEADFAST_PROVIDER_TIMEOUT`.
    async fn run(&self, model: &str, input: Value, timeout_ms: u64) -> Result<Value>;

    /// Runs `model` on `input` (which asks for `stream: true`) and hands the bytes of the server-sent events it
    /// answers with to `on_chunk` as they arrive, in chunks of any size; reading stops (and the stream is
    /// cancelled) when `on_chunk` returns `false`. `Ok` once the stream has ended or been stopped. Errors: the
    /// call failing (as [`AiBinding::run`]'s), a stream that fails mid-way (`STEADFAST_PROVIDER_NETWORK`), an
    /// answer that is not a stream (`STEADFAST_PROVIDER_INVALID_RESPONSE`), a call and stream not ended within
    /// `timeout_ms` (0: the implementation's default; `STEADFAST_PROVIDER_TIMEOUT`, the stream cancelled).
    async fn run_streaming(
        &self,
        model: &str,
        input: Value,
        timeout_ms: u64,
        on_chunk: &mut dyn for<'c> FnMut(&'c [u8]) -> bool,
    ) -> Result<()>;
}

#[async_trait(?Send)]
impl<B: AiBinding + ?Sized> AiBinding for Rc<B> {
    async fn run(&self, model: &str, input: Value, timeout_ms: u64) -> Result<Value> {
        (**self).run(model, input, timeout_ms).await
    }

    async fn run_streaming(
        &self,
        model: &str,
        input: Value,
        timeout_ms: u64,
        on_chunk: &mut dyn for<'c> FnMut(&'c [u8]) -> bool,
    ) -> Result<()> {
        (**self).run_streaming(model, input, timeout_ms, on_chunk).await
    }
}

/// Settings of a [`WorkersAiModel`] (JSON: camelCase; every field optional).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WorkersAiOptions {
    /// Model id (also [`Model::id`]). No default: a call without one fails with `STEADFAST_CONFIG_INVALID`.
    pub model: String,
    /// `max_tokens` (omitted when unset).
    pub max_tokens: Option<u32>,
    /// Sampling temperature (omitted when unset).
    pub temperature: Option<f64>,
    /// More input fields (e.g. `top_p`, `seed`); they cannot replace `messages`, `tools` or `stream`.
    pub extra: Map<String, Value>,
    /// Ask for a streamed answer (`stream: true`): while someone listens to the run's events its text arrives
    /// as `text.delta` events; the recorded turn is the same.
    pub stream: bool,
    /// How long one call (a streamed one to the end of its stream) may take, in ms (0: the binding's default,
    /// 60 s in the Worker); past it, `STEADFAST_PROVIDER_TIMEOUT` (retryable).
    pub timeout_ms: u64,
}

impl Default for WorkersAiOptions {
    fn default() -> WorkersAiOptions {
        WorkersAiOptions {
            model: String::new(),
            max_tokens: None,
            temperature: None,
            extra: Map::new(),
            stream: false,
            timeout_ms: 0,
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
/// when empty) plus the optional parameters, and `stream: true` when streaming.
pub fn build_input(options: &WorkersAiOptions, messages: &[Message], tools: &[ToolSpec]) -> Value {
    let mut input = Map::new();
    // Through their text: the text writer's instance of the OpenAI-style messages (the OpenAI provider writes
    // them), not a JSON value writer's (~1 KB gzip of the Worker; the messages are flat, a call's arguments a
    // string). Ignored (the fallback): borrowed strings always serialise, and their text reads back.
    let text = serde_json::to_string(&openai_messages(messages, false)).unwrap_or_default();
    input.insert("messages".into(), serde_json::from_str(&text).unwrap_or_default());
    if !tools.is_empty() {
        input.insert("tools".into(), Value::Array(openai_tools(tools)));
    }
    if let Some(m) = options.max_tokens {
        input.insert("max_tokens".into(), json!(m));
    }
    if let Some(t) = options.temperature {
        input.insert("temperature".into(), json!(t));
    }
    if options.stream {
        input.insert("stream".into(), json!(true));
    }
    merge_extra(&mut input, &options.extra, &["messages", "tools", "stream"]);
    Value::Object(input)
}

/// Reads the binding's output: `{response, tool_calls: [{name, arguments}], usage}` (arguments an object or
/// a JSON string; unusable ones marked [`crate::core::transcript::ToolCall::invalid`]; ids `call_<step>_<i>` when absent; a non-string
/// `response` is serialised), an OpenAI-style `choices` shape, either wrapped in the REST API's
/// `{result: …}`, or a bare string. Anything else is `STEADFAST_PROVIDER_INVALID_RESPONSE`.
pub fn parse_response(output: &Value, step: u32) -> Result<ModelResponse> {
    let bad = |why: &str| invalid_response("Workers AI", why, &json_text(output), "");
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
        Some(other) => json_text(other),
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
    let usage = v.get("usage").map_or(Usage::tokens(0, 0), openai_usage);
    let stop_reason = v.get("finish_reason").and_then(Value::as_str).map(str::to_string);
    Ok(ModelResponse { text, tool_calls, usage, stop_reason, reasoning: Vec::new() })
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

    fn provider_name(&self) -> Option<&str> {
        Some("cloudflare.workers_ai")
    }

    fn dependency(&self) -> String {
        "workers-ai".into()
    }

    async fn generate(&self, request: ModelRequest<'_>) -> Result<ModelResponse> {
        self.generate_streaming(request, &|_| {}).await
    }

    async fn generate_streaming(
        &self,
        request: ModelRequest<'_>,
        on_delta: &dyn Fn(StreamDelta),
    ) -> Result<ModelResponse> {
        let run_id = request.run_id;
        super::require_model("Workers AI", &self.options.model).map_err(|e| e.with_run(run_id))?;
        let input = build_input(&self.options, request.messages, request.tools);
        if self.options.stream {
            let mut parser = WorkersAiStream::new(request.step);
            let call = Call { model: &self.options.model, input, timeout_ms: self.options.timeout_ms };
            return stream_call(&self.binding, call, &mut parser, on_delta).await.map_err(|e| e.with_run(run_id));
        }
        let output = self
            .binding
            .run(&self.options.model, input, self.options.timeout_ms)
            .await
            .map_err(|e| e.with_run(run_id))?;
        parse_response(&output, request.step).map_err(|e| e.with_run(run_id))
    }
}

/// One streamed binding call: the event bytes go to `parser` as they arrive, each increment to `on_delta`; the
/// completed turn once the stream has ended. The binding's error (the call or the stream failing) comes first,
/// then the parser's (an error event, an unreadable event: reading stops at it), then a stream that ended
/// without a complete turn (`STEADFAST_PROVIDER_NETWORK`); all retryable.
/// One call of the binding: which model, on what, within how long.
struct Call<'m> {
    model: &'m str,
    input: Value,
    timeout_ms: u64,
}

async fn stream_call(
    binding: &dyn AiBinding,
    call: Call<'_>,
    parser: &mut dyn StreamParser,
    on_delta: &dyn Fn(StreamDelta),
) -> Result<ModelResponse> {
    let mut feed = super::stream::Feed::new(parser, on_delta);
    binding.run_streaming(call.model, call.input, call.timeout_ms, &mut |chunk: &[u8]| feed.chunk(chunk)).await?;
    feed.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::error::{Error, ErrorCode};
    use crate::core::transcript::{ResultKind, ToolCall, ToolResult, Usage};
    use futures::executor::block_on;

    /// Options naming a model (the providers have no default model).
    fn opts() -> WorkersAiOptions {
        WorkersAiOptions { model: "@cf/meta/llama-3.3-70b-instruct-fp8-fast".into(), ..WorkersAiOptions::default() }
    }
    use std::cell::RefCell;
    use std::collections::VecDeque;

    /// One scripted answer of the fake binding: a whole output (for `run`), or a stream (for `run_streaming`):
    /// its chunks, then how it ends (`Err`: the stream failing after the chunks).
    enum Reply {
        Whole(Result<Value>),
        Stream(Vec<Vec<u8>>, Result<()>),
    }

    /// A scripted fake binding: records every call (model, input) and how many stream chunks it handed out.
    #[derive(Default)]
    struct FakeAi {
        replies: RefCell<VecDeque<Reply>>,
        calls: RefCell<Vec<(String, Value)>>,
        /// Chunks handed to `on_chunk` so far (over all calls).
        fed: std::cell::Cell<usize>,
        /// The timeout of each call.
        timeouts: RefCell<Vec<u64>>,
    }

    impl FakeAi {
        fn new(replies: Vec<Result<Value>>) -> Rc<FakeAi> {
            FakeAi::scripted(replies.into_iter().map(Reply::Whole).collect())
        }

        fn scripted(replies: Vec<Reply>) -> Rc<FakeAi> {
            Rc::new(FakeAi { replies: RefCell::new(replies.into()), ..FakeAi::default() })
        }

        /// A fake whose one answer streams `chunks`, then ends as `end`.
        fn streaming(chunks: &[&[u8]], end: Result<()>) -> Rc<FakeAi> {
            FakeAi::scripted(vec![Reply::Stream(chunks.iter().map(|c| c.to_vec()).collect(), end)])
        }

        fn next(&self, model: &str, input: Value, timeout_ms: u64) -> Option<Reply> {
            self.timeouts.borrow_mut().push(timeout_ms);
            self.calls.borrow_mut().push((model.to_string(), input));
            self.replies.borrow_mut().pop_front()
        }
    }

    #[async_trait(?Send)]
    impl AiBinding for FakeAi {
        async fn run(&self, model: &str, input: Value, timeout_ms: u64) -> Result<Value> {
            match self.next(model, input, timeout_ms) {
                Some(Reply::Whole(r)) => r,
                Some(Reply::Stream(..)) => Err(Error::internal("fake ai: a stream asked for without streaming")),
                None => Err(Error::internal("fake ai: no reply left")),
            }
        }

        async fn run_streaming(
            &self,
            model: &str,
            input: Value,
            timeout_ms: u64,
            on_chunk: &mut dyn for<'c> FnMut(&'c [u8]) -> bool,
        ) -> Result<()> {
            match self.next(model, input, timeout_ms) {
                Some(Reply::Stream(chunks, end)) => {
                    for c in &chunks {
                        self.fed.set(self.fed.get() + 1);
                        if !on_chunk(c) {
                            return Ok(());
                        }
                    }
                    end
                }
                Some(Reply::Whole(Err(e))) => Err(e),
                Some(Reply::Whole(Ok(_))) => Err(Error::internal("fake ai: a whole answer asked for as a stream")),
                None => Err(Error::internal("fake ai: no reply left")),
            }
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
                usage: None,
            }),
            Message::Tool(ToolResult {
                tool_call_id: "call_1_1".into(),
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
            input_schema: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        }]
    }

    fn run(ai: &Rc<FakeAi>, options: WorkersAiOptions) -> Result<ModelResponse> {
        let (messages, tools) = (transcript(), tools());
        let m = WorkersAiModel::new(ai.clone(), options);
        block_on(m.generate(ModelRequest::new("r1", &messages, &tools, 2, "e")))
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
        let opts = WorkersAiOptions { max_tokens: Some(512), ..opts() };
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
                usage: Usage::tokens(80, 20),
                stop_reason: None,
                reasoning: vec![],
            }
        );
    }

    #[test]
    fn text_answer_without_usage() {
        let r = parse_response(&json!({"response": "Sunny."}), 1).unwrap();
        assert_eq!(r.text, "Sunny.");
        assert!(r.tool_calls.is_empty());
        assert_eq!(r.usage, Usage::tokens(0, 0));
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
        assert_eq!(r.usage, Usage::tokens(9, 4));
        assert_eq!(r.stop_reason.as_deref(), Some("tool_calls"));
    }

    #[test]
    fn invalid_arguments_mark_the_call_invalid() {
        let r = parse_response(&json!({"tool_calls": [{"name": "weather", "arguments": "{city: Paris"}]}), 3).unwrap();
        assert_eq!(r.tool_calls[0].args, json!("{city: Paris"), "kept as the model wrote them");
        assert!(r.tool_calls[0].invalid.as_deref().unwrap_or("").starts_with("the arguments were not valid JSON"));
        assert_eq!(r.tool_calls[0].id, "call_3_0");
    }

    #[test]
    fn garbage_output_is_invalid_response() {
        for out in
            [json!(42), json!({"foo": 1}), json!({"tool_calls": "x"}), json!({"tool_calls": [{"arguments": {}}]})]
        {
            let ai = FakeAi::new(vec![Ok(out.clone())]);
            let e = run(&ai, opts()).expect_err("should fail");
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
        let e = run(&ai, opts()).expect_err("should fail");
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
    /// The recorded Workers AI stream (`stream: true`) and the same answer not streamed.
    const SSE: &str = include_str!("fixtures/workers_ai.sse");
    const WHOLE: &str = include_str!("fixtures/workers_ai.json");

    fn stream_opts() -> WorkersAiOptions {
        WorkersAiOptions { stream: true, ..opts() }
    }

    /// A streamed `generate_streaming` (step 2, run `r1`): the answer, and each text delta with the number of
    /// chunks the binding had handed out when the delta arrived.
    fn run_streamed(ai: &Rc<FakeAi>) -> (Result<ModelResponse>, Vec<(usize, String)>) {
        let (messages, tools) = (transcript(), tools());
        let m = WorkersAiModel::new(ai.clone(), stream_opts());
        let seen = RefCell::new(Vec::new());
        let on_delta = |d: StreamDelta| match d {
            StreamDelta::Text(t) => seen.borrow_mut().push((ai.fed.get(), t)),
            StreamDelta::Reasoning(r) => panic!("Workers AI streams no reasoning: {r}"),
        };
        let request = ModelRequest::new("r1", &messages, &tools, 2, "e");
        let turn = block_on(m.generate_streaming(request, &on_delta));
        (turn, seen.into_inner())
    }

    fn texts(deltas: &[(usize, String)]) -> Vec<&str> {
        deltas.iter().map(|(_, t)| t.as_str()).collect()
    }

    /// `bytes` split every way the tests use: in two at every byte, byte by byte, and 200 seeded random
    /// chunkings of 1 to 30 pieces (some empty).
    fn chunkings(bytes: &[u8]) -> Vec<(String, Vec<&[u8]>)> {
        use crate::rng::{Rng, SplitMix64};
        let mut out: Vec<(String, Vec<&[u8]>)> =
            (0..=bytes.len()).map(|k| (format!("split at byte {k}"), vec![&bytes[..k], &bytes[k..]])).collect();
        out.push(("byte by byte".into(), bytes.chunks(1).collect()));
        for seed in 0..200 {
            let rng = SplitMix64::new(seed);
            let mut cuts: Vec<usize> =
                (0..1 + rng.next_u64() % 30).map(|_| (rng.next_u64() % (bytes.len() as u64 + 1)) as usize).collect();
            cuts.sort_unstable();
            let mut chunks = Vec::new();
            let mut at = 0;
            for c in cuts {
                chunks.push(&bytes[at..c]);
                at = c;
            }
            chunks.push(&bytes[at..]);
            out.push((format!("random chunking seed {seed}"), chunks));
        }
        out
    }

    /// Streamed, the answer is the non-streamed turn however the binding's bytes are chunked; the input asks
    /// for `stream: true`; each text delta is handed out in the very chunk that completes its event (not when
    /// the stream ends), and the deltas add up to the turn's text.
    #[test]
    fn a_streamed_answer_hands_out_each_delta_as_its_event_arrives_and_is_the_non_streamed_turn() {
        let expected = parse_response(&serde_json::from_str(WHOLE).unwrap(), 2).unwrap();
        assert_eq!((expected.text.as_str(), expected.tool_calls.len()), ("Sunny in Zürich.", 1));
        assert_eq!(expected.usage, Usage::tokens(80, 20));
        // Where each of the three text events ends (its closing blank line included).
        let ends: Vec<usize> = SSE.match_indices("\n\n").map(|(i, _)| i + 2).take(3).collect();
        for (how, chunks) in chunkings(SSE.as_bytes()) {
            let ai = FakeAi::streaming(&chunks, Ok(()));
            let (turn, deltas) = run_streamed(&ai);
            assert_eq!(turn.unwrap_or_else(|e| panic!("{how}: {e}")), expected, "{how}");
            assert_eq!(texts(&deltas), ["Sunny", " in Zü", "rich."], "{how}");
            let mut fed = 0;
            let read: Vec<usize> = chunks
                .iter()
                .map(|c| {
                    fed += c.len();
                    fed
                })
                .collect();
            for ((at, text), end) in deltas.iter().zip(&ends) {
                let completing = 1 + read.iter().position(|r| r >= end).unwrap_or(usize::MAX - 1);
                assert_eq!(
                    *at, completing,
                    "{how}: {text:?} arrived after chunk {at}, its event ends in chunk {completing}"
                );
            }
            let calls = ai.calls.borrow();
            assert_eq!(calls.len(), 1, "{how}");
            assert_eq!(calls[0].1["stream"], json!(true), "{how}");
        }
    }

    /// Without a listener (`generate`) a streamed answer is read through the same parser; `extra` cannot turn
    /// streaming off; without `stream` the binding is never asked for a stream.
    #[test]
    fn generate_reads_a_streamed_answer_whole_and_extra_cannot_turn_streaming_off() {
        let ai = FakeAi::streaming(&[SSE.as_bytes()], Ok(()));
        let mut options = stream_opts();
        options.extra.insert("stream".into(), json!(false));
        let got = run(&ai, options).unwrap();
        assert_eq!(got, parse_response(&serde_json::from_str(WHOLE).unwrap(), 2).unwrap());
        assert_eq!(ai.calls.borrow()[0].1["stream"], json!(true));
        let ai = FakeAi::new(vec![Ok(json!({"response": "whole"}))]);
        assert_eq!(run(&ai, opts()).unwrap().text, "whole");
        assert_eq!(ai.calls.borrow()[0].1.get("stream"), None);
    }

    /// `timeoutMs` reaches the binding with each call, streamed or not (0, the binding's default, when unset);
    /// it is not an input field.
    #[test]
    fn the_timeout_goes_to_the_binding_with_every_call() {
        let timed: WorkersAiOptions = serde_json::from_value(json!({"model": "m", "timeoutMs": 1500})).unwrap();
        let ai = FakeAi::new(vec![Ok(json!({"response": "whole"}))]);
        run(&ai, timed.clone()).unwrap();
        assert_eq!(ai.calls.borrow()[0].1.get("timeoutMs"), None);
        let ai2 = FakeAi::streaming(&[SSE.as_bytes()], Ok(()));
        run(&ai2, WorkersAiOptions { stream: true, ..timed }).unwrap();
        let ai3 = FakeAi::new(vec![Ok(json!({"response": "whole"}))]);
        run(&ai3, opts()).unwrap();
        let seen: Vec<u64> = [&ai, &ai2, &ai3].iter().flat_map(|a| a.timeouts.borrow().clone()).collect();
        assert_eq!(seen, vec![1500, 1500, 0]);
    }

    /// Every way a stream can go wrong is a retryable provider failure with a code and the run id, never a
    /// partial turn: cut short anywhere (`STEADFAST_PROVIDER_NETWORK`), failing mid-way (the binding's error,
    /// after the deltas read so far), an error event (rate limit or outage; nothing after it is read), an
    /// unreadable event, the call itself failing.
    #[test]
    fn a_stream_that_fails_or_ends_without_a_complete_turn_is_a_retryable_coded_failure() {
        let check = |e: &Error, code: ErrorCode, what: &str| {
            assert_eq!(e.code, code, "{what}: {e}");
            assert!(e.retryable, "{what}");
            assert_eq!(e.run_id.as_deref(), Some("r1"), "{what}");
        };
        let bytes = SSE.as_bytes();
        for k in 0..bytes.len() {
            let ai = FakeAi::streaming(&[&bytes[..k]], Ok(()));
            let (turn, _) = run_streamed(&ai);
            check(&turn.expect_err("cut short"), ErrorCode::ProviderNetwork, &format!("cut at byte {k}"));
        }
        let mid = SSE.find("data: {\"response\":\"rich").unwrap();
        let reset = Error::new(ErrorCode::ProviderNetwork, "Workers AI's stream failed: connection reset");
        let ai = FakeAi::streaming(&[&bytes[..mid]], Err(reset));
        let (turn, deltas) = run_streamed(&ai);
        let e = turn.expect_err("failed mid-way");
        check(&e, ErrorCode::ProviderNetwork, "failed mid-way");
        assert!(e.message.contains("connection reset"), "{}", e.message);
        assert_eq!(texts(&deltas), ["Sunny", " in Zü"], "the deltas read before the failure were handed out");

        let outage = b"data: {\"error\": {\"type\": \"server_error\", \"message\": \"5007: internal\"}}\n\n";
        let rate =
            b"data: {\"error\": {\"code\": \"rate_limit\", \"message\": \"3040: Capacity temporarily exceeded\"}}\n\n";
        for (event, code) in
            [(&outage[..], ErrorCode::ProviderUnavailable), (&rate[..], ErrorCode::ProviderRateLimited)]
        {
            let ai = FakeAi::streaming(&[&bytes[..mid], event, &bytes[mid..]], Ok(()));
            let (turn, deltas) = run_streamed(&ai);
            check(&turn.expect_err("error event"), code, "error event");
            assert_eq!(texts(&deltas), ["Sunny", " in Zü"]);
            assert_eq!(ai.fed.get(), 2, "reading stops at the error event");
        }
        let ai = FakeAi::streaming(&[b"data: {\"response\": \"Hi\"}\n\ndata: <html>oops\n\ndata: [DONE]\n\n"], Ok(()));
        check(&run_streamed(&ai).0.expect_err("unreadable"), ErrorCode::ProviderInvalidResponse, "unreadable event");

        let ai = FakeAi::scripted(vec![
            Reply::Whole(Err(binding_error("AiError: 3040: Capacity temporarily exceeded"))),
            Reply::Stream(vec![bytes.to_vec()], Ok(())),
        ]);
        let (turn, deltas) = run_streamed(&ai);
        check(&turn.expect_err("call failed"), ErrorCode::ProviderRateLimited, "the call failing");
        assert!(deltas.is_empty());
        assert_eq!(ai.calls.borrow().len(), 1, "no retry inside the provider");
    }
}
