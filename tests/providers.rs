//! Provider fidelity (M30): real-shaped provider answers (shapes of the OpenAI and Anthropic API references)
//! driven through an agent, checking what the run records, what it reports, and what the next request sends.

mod common;

use async_trait::async_trait;
use common::*;
use serde_json::{json, Value};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use steadfast::core::checkpoint::FinishReason;
use steadfast::core::events::Event;
use steadfast::core::transcript::{Message, Usage};
use steadfast::http::{HttpClient, HttpRequest, HttpResponse};
use steadfast::providers::{AnthropicModel, AnthropicOptions, OpenAiModel, OpenAiOptions};
use steadfast::runtime::{SendOptions, VecSink};
use steadfast::store::MemoryKv;
use steadfast::ErrorCode;

/// Answers each request with the next recorded body (HTTP 200) and keeps every request body.
#[derive(Clone, Default)]
struct Recorded {
    replies: Rc<RefCell<VecDeque<(u16, String)>>>,
    bodies: Rc<RefCell<Vec<Value>>>,
}

impl Recorded {
    fn new(replies: &[&str]) -> Recorded {
        let r = Recorded::default();
        r.replies.borrow_mut().extend(replies.iter().map(|s| (200, s.to_string())));
        r
    }

    /// Then an answer with this status.
    fn then(self, status: u16, body: &str) -> Recorded {
        self.replies.borrow_mut().push_back((status, body.to_string()));
        self
    }

    fn bodies(&self) -> Vec<Value> {
        self.bodies.borrow().clone()
    }
}

#[async_trait(?Send)]
impl HttpClient for Recorded {
    async fn send(&self, request: HttpRequest) -> steadfast::Result<HttpResponse> {
        let body: Value = serde_json::from_str(request.body.as_deref().unwrap_or("null")).expect("a JSON body");
        self.bodies.borrow_mut().push(body);
        let (status, body) = self.replies.borrow_mut().pop_front().expect("a recorded reply left");
        Ok(HttpResponse { status, headers: vec![], body, truncated: false })
    }
}

fn anthropic(http: &Recorded) -> AnthropicModel<Recorded> {
    let options =
        AnthropicOptions { model: "claude-sonnet-4-5".into(), max_tokens: 2048, ..AnthropicOptions::default() };
    AnthropicModel::new(http.clone(), "sk-ant-test".into(), options)
}

fn openai(http: &Recorded) -> OpenAiModel<Recorded> {
    let options = OpenAiOptions { model: "gpt-4.1-mini".into(), max_tokens: Some(512), ..OpenAiOptions::default() };
    OpenAiModel::new(http.clone(), "sk-test".into(), options)
}

fn run_done_reason(sink: &VecSink) -> Option<FinishReason> {
    sink.events().iter().find_map(|e| match &e.event {
        Event::RunDone { finish_reason, .. } => *finish_reason,
        _ => None,
    })
}

/// An Anthropic answer with extended thinking and a tool call (Messages API reference, "Extended thinking with
/// tool use"): a thinking block with its signature, a redacted thinking block, text, then `tool_use`.
const ANTHROPIC_THINKING_TOOL_USE: &str = r#"{
  "id": "msg_01Aq9w938a90dw8q",
  "type": "message",
  "role": "assistant",
  "model": "claude-sonnet-4-5",
  "content": [
    {"type": "thinking", "thinking": "The user wants Paris weather. I'll call the weather tool.", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds5jaGVvbGQtRXhhbXBsZQ=="},
    {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"},
    {"type": "text", "text": "Let me check the weather in Paris."},
    {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "weather", "input": {"city": "Paris"}}
  ],
  "stop_reason": "tool_use",
  "stop_sequence": null,
  "usage": {"input_tokens": 472, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 159}
}"#;

const ANTHROPIC_END_TURN: &str = r#"{
  "id": "msg_01B", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
  "content": [{"type": "text", "text": "It is sunny in Paris."}],
  "stop_reason": "end_turn", "stop_sequence": null,
  "usage": {"input_tokens": 640, "output_tokens": 12}
}"#;

/// Thinking blocks are kept in the journal with their signature / data and sent back unchanged, first in the
/// assistant turn that precedes the tool results: in the same execution, and in a later one that reads the
/// transcript back from the journal.
#[test]
fn anthropic_thinking_blocks_go_back_unchanged_before_the_tool_results() {
    let env = Env::journal_sim();
    let counters = Counters::default();
    let http = Recorded::new(&[ANTHROPIC_THINKING_TOOL_USE, ANTHROPIC_END_TURN, ANTHROPIC_END_TURN]);
    let agent = env.agent(anthropic(&http), vec![counting_tool("weather", &counters)]);
    let r = block_on(agent.send("think", "Weather in Paris?", SendOptions::default())).unwrap();
    assert_eq!((r.finish_reason, r.text.as_str()), (Some(FinishReason::Stop), "It is sunny in Paris."));
    assert_eq!(counters.get("weather"), 1);

    let recorded: Value = serde_json::from_str(ANTHROPIC_THINKING_TOOL_USE).unwrap();
    let sent_back = |body: &Value| body["messages"][1].clone();
    let expected = json!({"role": "assistant", "content": recorded["content"]});
    assert_eq!(sent_back(&http.bodies()[1]), expected, "the turn before the tool results, block for block");
    assert_eq!(http.bodies()[1]["messages"][2]["content"][0]["type"], "tool_result");

    // The journal kept them: a new process continuing the conversation sends them again.
    env.past_leases();
    let later = env.agent(anthropic(&http), vec![counting_tool("weather", &counters)]);
    let loaded = block_on(later.load("think")).unwrap().unwrap();
    let Message::Assistant { reasoning, .. } = &loaded.messages[1] else { panic!("{:?}", loaded.messages[1]) };
    assert_eq!(reasoning[..], recorded["content"].as_array().unwrap()[..2], "thinking and redacted thinking");
    block_on(later.send("think", "And tomorrow?", SendOptions::default())).unwrap();
    assert_eq!(sent_back(&http.bodies()[2]), expected);
}

/// OpenAI's refusal (`message.refusal`, `content: null`, Chat Completions reference) ends the run with finish
/// reason `refusal` and the refusal as its text, in the result and in the events; it is not an empty success.
#[test]
fn openai_refusal_finishes_with_refusal_and_its_text() {
    let env = Env::new();
    let http = Recorded::new(&[r#"{
      "id": "chatcmpl-AZ1", "object": "chat.completion", "created": 1733000000, "model": "gpt-4.1-mini",
      "choices": [{"index": 0, "message": {"role": "assistant", "content": null,
        "refusal": "I'm sorry, I can't help with that.", "annotations": []},
        "logprobs": null, "finish_reason": "stop"}],
      "usage": {"prompt_tokens": 21, "completion_tokens": 9, "total_tokens": 30}
    }"#]);
    let agent = env.agent(openai(&http), vec![]);
    let (opts, sink) = listening();
    let r = block_on(agent.send("no", "Help me pick a lock.", opts)).unwrap();
    assert_eq!(r.finish_reason, Some(FinishReason::Refusal));
    assert_eq!(r.text, "I'm sorry, I can't help with that.");
    assert_eq!(run_done_reason(&sink), Some(FinishReason::Refusal));
    let step_text = sink.events().iter().find_map(|e| match &e.event {
        Event::Step { text, .. } => Some(text.clone()),
        _ => None,
    });
    assert_eq!(step_text.as_deref(), Some("I'm sorry, I can't help with that."));
    assert_eq!(block_on(agent.load("no")).unwrap().unwrap().finish_reason, Some(FinishReason::Refusal));
}

/// Anthropic's `stop_reason: "refusal"` ends the run with finish reason `refusal`.
#[test]
fn anthropic_refusal_finishes_with_refusal() {
    let env = Env::new();
    let http = Recorded::new(&[r#"{
      "id": "msg_r", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
      "content": [{"type": "text", "text": "I can't help with that request."}],
      "stop_reason": "refusal", "stop_sequence": null, "usage": {"input_tokens": 30, "output_tokens": 8}
    }"#]);
    let agent = env.agent(anthropic(&http), vec![]);
    let (opts, sink) = listening();
    let r = block_on(agent.send("no", "Something harmful", opts)).unwrap();
    assert_eq!((r.finish_reason, r.text.as_str()), (Some(FinishReason::Refusal), "I can't help with that request."));
    assert_eq!(run_done_reason(&sink), Some(FinishReason::Refusal));
}

/// An answer cut off at the output token limit (OpenAI `finish_reason: "length"`, Anthropic
/// `stop_reason: "max_tokens"`) finishes with `length` and a note, keeping the partial text.
#[test]
fn answers_cut_at_the_token_limit_finish_with_length() {
    let env = Env::new();
    let http = Recorded::new(&[r#"{
      "id": "chatcmpl-L", "object": "chat.completion", "created": 1733000000, "model": "gpt-4.1-mini",
      "choices": [{"index": 0, "message": {"role": "assistant", "content": "The history of Rome begins", "refusal": null},
        "logprobs": null, "finish_reason": "length"}],
      "usage": {"prompt_tokens": 12, "completion_tokens": 512, "total_tokens": 524}
    }"#]);
    let (opts, sink) = listening();
    let r = block_on(env.agent(openai(&http), vec![]).send("long", "Tell me everything about Rome.", opts)).unwrap();
    assert_eq!((r.finish_reason, r.text.as_str()), (Some(FinishReason::Length), "The history of Rome begins"));
    assert!(r.note.as_deref().unwrap_or("").contains("output token limit"), "{:?}", r.note);
    assert_eq!(run_done_reason(&sink), Some(FinishReason::Length));

    let http = Recorded::new(&[r#"{
      "id": "msg_m", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
      "content": [{"type": "text", "text": "Rome was founded"}],
      "stop_reason": "max_tokens", "stop_sequence": null, "usage": {"input_tokens": 12, "output_tokens": 2048}
    }"#]);
    let r = block_on(env.agent(anthropic(&http), vec![]).send("long2", "Rome?", SendOptions::default())).unwrap();
    assert_eq!(r.finish_reason, Some(FinishReason::Length));
}

/// OpenAI's `content_filter` finish reason is the run's finish reason.
#[test]
fn content_filter_finish_reason_is_mapped() {
    let env = Env::new();
    let http = Recorded::new(&[r#"{
      "id": "chatcmpl-F", "object": "chat.completion", "created": 1733000000, "model": "gpt-4.1-mini",
      "choices": [{"index": 0, "message": {"role": "assistant", "content": ""}, "finish_reason": "content_filter"}],
      "usage": {"prompt_tokens": 12, "completion_tokens": 0, "total_tokens": 12}
    }"#]);
    let r = block_on(env.agent(openai(&http), vec![]).send("f", "…", SendOptions::default())).unwrap();
    assert_eq!(r.finish_reason, Some(FinishReason::ContentFilter));
}

/// Tool arguments cut mid-JSON by the token limit: the call never runs, the model reads a validation result
/// saying the arguments were not valid JSON (quoting them), its own turn goes back with the arguments it wrote
/// (they used to go back as `{}`, as if it had called the tool without arguments), and no internal placeholder
/// reaches it.
#[test]
fn tool_arguments_cut_mid_json_get_a_validation_result_saying_so() {
    let env = Env::new();
    let counters = Counters::default();
    let http = Recorded::new(&[
        r#"{
      "id": "chatcmpl-T", "object": "chat.completion", "created": 1733000000, "model": "gpt-4.1-mini",
      "choices": [{"index": 0, "message": {"role": "assistant", "content": null, "refusal": null,
        "tool_calls": [{"id": "call_Zx81", "type": "function",
          "function": {"name": "weather", "arguments": "{\"city\": \"Par"}}]},
        "logprobs": null, "finish_reason": "length"}],
      "usage": {"prompt_tokens": 50, "completion_tokens": 512, "total_tokens": 562}
    }"#,
        r#"{"id": "chatcmpl-U", "object": "chat.completion", "created": 1733000001, "model": "gpt-4.1-mini",
      "choices": [{"index": 0, "message": {"role": "assistant", "content": "Sorry, which city?"}, "finish_reason": "stop"}],
      "usage": {"prompt_tokens": 90, "completion_tokens": 5, "total_tokens": 95}}"#,
    ]);
    let agent = env.agent(openai(&http), vec![counting_tool("weather", &counters)]);
    let r = block_on(agent.send("cut", "Weather in Paris?", SendOptions::default())).unwrap();
    assert_eq!(counters.get("weather"), 0, "a call with unusable arguments never runs");
    assert_eq!(r.finish_reason, Some(FinishReason::Stop));
    let second = &http.bodies()[1];
    let messages = second["messages"].as_array().unwrap();
    assert_eq!(messages[1]["tool_calls"][0]["function"]["arguments"], "{\"city\": \"Par");
    let result = messages[2]["content"].as_str().unwrap();
    assert!(
        result.starts_with("invalid arguments for 'weather': the arguments were not valid JSON")
            && result.ends_with("{\"city\": \"Par"),
        "{result}"
    );
    assert!(!second.to_string().contains("_raw"), "no internal placeholder reaches the model");
    assert_eq!(second["max_completion_tokens"], 512, "the cap goes as max_completion_tokens");
    assert_eq!(second.get("max_tokens"), None);
}

/// Wherever the token limit cuts a tool call's arguments (every prefix of them that is not a JSON object), the
/// next request sends the model's turn back with exactly the text it produced, and the call is answered with a
/// validation result; the stored run holds that text too. Non-streamed and streamed answers alike.
#[test]
fn tool_arguments_cut_anywhere_go_back_to_the_model_as_it_wrote_them() {
    let whole = r#"{"city": "Zürich", "days": [1, 2], "unit": "celsius"}"#;
    let mut cuts = 0;
    for (end, _) in whole.char_indices().chain([(whole.len(), ' ')]) {
        let cut = &whole[..end];
        if matches!(serde_json::from_str::<Value>(cut), Ok(Value::Object(_))) || cut.trim().is_empty() {
            continue;
        }
        for streamed in [false, true] {
            let case = format!("cut after {end} bytes, streamed {streamed}: {cut}");
            let args = Value::String(cut.to_string());
            let first = if streamed {
                let chunk = json!({"choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [{"index": 0,
                    "id": "call_C", "type": "function", "function": {"name": "weather", "arguments": args}}]}}]});
                let end = json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]});
                format!("data: {chunk}\n\ndata: {end}\n\ndata: [DONE]\n\n")
            } else {
                json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_C", "type": "function", "function": {"name": "weather", "arguments": args}}]},
                    "finish_reason": "length"}]})
                .to_string()
            };
            let env = Env::new();
            let counters = Counters::default();
            let then = if streamed { openai_text_sse("Which city?") } else { openai_text_json("Which city?") };
            let http = Recorded::new(&[first.as_str(), &then]);
            let options = OpenAiOptions { model: "gpt-4.1-mini".into(), stream: streamed, ..OpenAiOptions::default() };
            let model = OpenAiModel::new(http.clone(), "sk-test".into(), options);
            let agent = env.agent(model, vec![counting_tool("weather", &counters)]);
            let r = block_on(agent.send("cut", "Weather?", SendOptions::default()))
                .unwrap_or_else(|e| panic!("{case}: {e}"));
            assert_eq!(r.text, "Which city?", "{case}");
            assert_eq!(counters.get("weather"), 0, "{case}");
            let second = &http.bodies()[1];
            let call = &second["messages"][1]["tool_calls"][0];
            assert_eq!(call["function"]["arguments"], cut, "{case}: {second}");
            assert_eq!(second["messages"][2]["tool_call_id"], "call_C", "{case}");
            let stored = block_on(agent.load("cut")).unwrap().unwrap();
            let Message::Assistant { tool_calls, .. } = &stored.messages[1] else { panic!("{case}: {stored:?}") };
            assert_eq!(tool_calls[0].args, Value::String(cut.to_string()), "{case}");
            assert!(tool_calls[0].invalid.is_some(), "{case}");
            cuts += 1;
        }
    }
    assert!(cuts > 90, "{cuts} cuts");
}

/// The result says both this run's usage and the conversation's: a finished run continued as a conversation
/// counts its own usage from zero and adds to the total.
#[test]
fn usage_of_this_send_and_of_the_whole_conversation() {
    let env = Env::new();
    let reply = |p: u64, c: u64| {
        format!(
            r#"{{"choices": [{{"index": 0, "message": {{"role": "assistant", "content": "ok"}}, "finish_reason": "stop"}}],
            "usage": {{"prompt_tokens": {p}, "completion_tokens": {c}, "total_tokens": {}}}}}"#,
            p + c
        )
    };
    let (a, b) = (reply(100, 10), reply(250, 20));
    let http = Recorded::new(&[&a, &b]);
    let agent = env.agent(openai(&http), vec![]);
    let first = block_on(agent.send("u", "hi", SendOptions::default())).unwrap();
    // gpt-4.1-mini's built-in price: 400 nano-dollars a prompt token, 1,600 a completion token.
    let priced = |i: u64, o: u64| Usage { cost: Some(i * 400 + o * 1_600), ..Usage::tokens(i, o) };
    assert_eq!(first.usage, priced(100, 10));
    assert_eq!(first.total_usage, first.usage);
    let second = block_on(agent.send("u", "again", SendOptions::default())).unwrap();
    assert_eq!(second.usage, priced(250, 20));
    assert_eq!(second.total_usage, priced(350, 30));
}

/// A journal written before reasoning blocks and the conversation's usage were kept (entries without
/// `reasoning` / `totalUsage` / `ub`, and a call whose unreadable arguments were kept as `{"_raw": …}`) still loads,
/// resumes, and goes to the provider as before.
#[test]
fn journals_written_before_reasoning_and_total_usage_still_load_and_resume() {
    let clock = steadfast::runtime::ManualClock::new(1_700_000_000_000);
    let kv = MemoryKv::new();
    let env = Env::journal_over(kv.clone(), clock);
    let counters = Counters::default();
    // An unfinished run: a tool turn recorded with its result, then the model failed for good.
    let http = Recorded::new(&[
        r#"{"choices": [{"index": 0, "message": {"role": "assistant", "content": null, "tool_calls": [
          {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Oslo\"}"}}]},
          "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 40, "completion_tokens": 7}}"#,
    ])
    .then(400, r#"{"error": {"message": "context too long"}}"#);
    let agent = env.agent(openai(&http), vec![counting_tool("weather", &counters)]);
    assert!(block_on(agent.send("old", "Weather in Oslo?", SendOptions::default())).is_err());
    // Rewrite every journal entry as the previous version wrote it.
    let mut rewritten = 0;
    for key in kv.keys().into_iter().filter(|k| k.starts_with("run/old/j/")) {
        let Some(raw) = kv.raw(&key) else { continue };
        let Ok(mut v) = serde_json::from_str::<Value>(&raw) else { continue };
        fn strip(v: &mut Value) {
            match v {
                Value::Object(o) => {
                    o.remove("totalUsage");
                    o.remove("ub");
                    o.remove("reasoning");
                    // Written before costs: no `costUsd`, and a patch's usage two counts.
                    o.remove("costUsd");
                    if let Some(Value::Array(pair)) = o.get_mut("u") {
                        pair.truncate(2);
                    }
                    if let Some(args) = o.get_mut("args") {
                        if args == &json!({"city": "Oslo"}) {
                            *args = json!({"_raw": "{\"city\":\"Oslo\""});
                        }
                    }
                    o.values_mut().for_each(strip);
                }
                Value::Array(a) => a.iter_mut().for_each(strip),
                _ => {}
            }
        }
        let before = v.clone();
        strip(&mut v);
        if v != before {
            rewritten += 1;
            kv.set_raw(&key, &v.to_string());
        }
    }
    assert!(rewritten > 0, "the journal had entries to rewrite");
    env.past_leases();
    let http = Recorded::new(&[
        r#"{"choices": [{"index": 0, "message": {"role": "assistant", "content": "Cold."}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 60, "completion_tokens": 2}}"#,
    ]);
    let agent = env.agent(openai(&http), vec![counting_tool("weather", &counters)]);
    let loaded = block_on(agent.load("old")).unwrap().expect("the old journal loads");
    assert_eq!(loaded.total_usage, loaded.usage, "an old journal's conversation usage counts from its run's");
    assert_eq!(loaded.usage, Usage::tokens(40, 7));
    let r = block_on(agent.resume("old", SendOptions::default())).unwrap().expect("an unfinished run");
    assert_eq!((r.finish_reason, r.text.as_str()), (Some(FinishReason::Stop), "Cold."));
    assert_eq!(counters.get("weather"), 1, "the recorded result is not run again");
    // The old journal's turn has no cost: the run's has none either (never guessed).
    let tokens = Usage { storage: None, ..r.usage };
    assert_eq!(tokens, Usage::tokens(100, 9));
    assert_eq!(r.total_usage, tokens, "the conversation's usage counts at least the run's");
    let sent = &http.bodies()[0]["messages"];
    assert_eq!(sent[1]["tool_calls"][0]["function"]["arguments"], "{\"city\":\"Oslo\"", "as the old version sent it");
}

/// The providers have no default model: a model built without one refuses with `STEADFAST_CONFIG_INVALID`
/// before anything is sent.
#[test]
fn providers_without_a_model_refuse_before_sending() {
    let env = Env::new();
    let http = Recorded::new(&[]);
    let model = OpenAiModel::new(http.clone(), "k".into(), OpenAiOptions::default());
    let e = block_on(env.agent(model, vec![]).send("m", "hi", SendOptions::default())).unwrap_err();
    assert_eq!(e.code, ErrorCode::ConfigInvalid);
    assert!(e.message.contains("no OpenAI model is set"), "{}", e.message);
    let model = AnthropicModel::new(http.clone(), "k".into(), AnthropicOptions::default());
    let e = block_on(env.agent(model, vec![]).send("m2", "hi", SendOptions::default())).unwrap_err();
    assert_eq!(e.code, ErrorCode::ConfigInvalid);
    assert!(http.bodies().is_empty(), "nothing was sent");
}

/// Serves recorded streamed bodies in 5-byte chunks through `send_streaming`, logging each chunk next to the
/// events the run emits.
#[derive(Clone, Default)]
struct Chunked {
    inner: Recorded,
    log: Rc<RefCell<Vec<String>>>,
}

#[async_trait(?Send)]
impl HttpClient for Chunked {
    async fn send(&self, request: HttpRequest) -> steadfast::Result<HttpResponse> {
        self.inner.send(request).await
    }

    async fn send_streaming(
        &self,
        request: HttpRequest,
        on_chunk: &mut dyn for<'c> FnMut(&'c [u8]) -> bool,
    ) -> steadfast::Result<HttpResponse> {
        let mut response = self.inner.send(request).await?;
        if response.status == 200 {
            for chunk in response.body.as_bytes().chunks(5) {
                self.log.borrow_mut().push("chunk".into());
                if !on_chunk(chunk) {
                    break;
                }
            }
            self.log.borrow_mut().push("end of body".into());
            response.body.clear();
        }
        Ok(response)
    }
}

/// Logs event types into the client's log.
struct LogSink(Rc<RefCell<Vec<String>>>, VecSink);

impl steadfast::runtime::EventSink for LogSink {
    fn emit(&self, e: &steadfast::EventEnvelope) {
        self.1.emit(e);
        let kind = serde_json::to_value(e).unwrap()["type"].as_str().unwrap_or("").to_string();
        self.0.borrow_mut().push(kind);
    }
}

const OPENAI_TOOLS_SSE: &str = include_str!("../src/providers/fixtures/openai_tools.sse");
const OPENAI_TOOLS_JSON: &str = include_str!("../src/providers/fixtures/openai_tools.json");
const ANTHROPIC_THINKING_SSE: &str = include_str!("../src/providers/fixtures/anthropic_thinking_tools.sse");
const ANTHROPIC_THINKING_JSON: &str = include_str!("../src/providers/fixtures/anthropic_thinking_tools.json");

fn openai_text_sse(text: &str) -> String {
    let chunk = |delta: Value, finish: Value| {
        json!({"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4.1-mini",
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let usage = json!({"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4.1-mini",
                       "choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}});
    format!(
        "data: {}\n\ndata: {}\n\ndata: {}\n\ndata: [DONE]\n\n",
        chunk(json!({"role": "assistant", "content": text}), Value::Null),
        chunk(json!({}), json!("stop")),
        usage
    )
}

fn openai_text_json(text: &str) -> String {
    json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
           "usage": {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}})
    .to_string()
}

/// A provider asked to stream (`stream: true`): its text reaches the events as `text.delta` while the body is
/// still being read, the request asks for the usage chunk, and the run records exactly the turns the same
/// answers not streamed give.
#[test]
fn openai_streamed_answers_reach_the_events_while_read_and_record_the_same_turns() {
    let transcript = |stream: bool, replies: &[&str]| {
        let env = Env::new();
        let http = Chunked { inner: Recorded::new(replies), log: Default::default() };
        let options = OpenAiOptions { model: "gpt-4.1-mini".into(), stream, ..OpenAiOptions::default() };
        let model = OpenAiModel::new(http.clone(), "sk-test".into(), options);
        let agent = env.agent(model, vec![counting_tool("weather", &Counters::default())]);
        let sink = VecSink::new();
        let opts =
            SendOptions { events: Some(Rc::new(LogSink(http.log.clone(), sink.clone()))), ..SendOptions::default() };
        let r = block_on(agent.send("s", "Weather in Zürich and Rome?", opts)).unwrap();
        (r, sink, http)
    };
    let (streamed, sink, http) = transcript(true, &[OPENAI_TOOLS_SSE, &openai_text_sse("Sunny in both.")]);
    let (plain, _, _) = transcript(false, &[OPENAI_TOOLS_JSON, &openai_text_json("Sunny in both.")]);
    assert_eq!(streamed.messages, plain.messages);
    assert_eq!((streamed.usage, streamed.text.as_str()), (plain.usage, "Sunny in both."));
    let body = &http.inner.bodies()[0];
    assert_eq!((&body["stream"], &body["stream_options"]), (&json!(true), &json!({"include_usage": true})));
    let deltas: Vec<String> = sink
        .events()
        .iter()
        .filter_map(|e| match &e.event {
            Event::TextDelta { step: 1, text, .. } => Some(text.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(deltas, ["Checking Zü", "rich ☀️ and Rome."]);
    let log = http.log.borrow();
    let first_delta = log.iter().position(|l| l == "text.delta").unwrap();
    let end = log.iter().position(|l| l == "end of body").unwrap();
    assert!(first_delta < end, "the first delta went out while the body was read: {log:?}");
}

/// Anthropic streamed with thinking: `reasoning.delta` events while it thinks, and the recorded turn keeps the
/// thinking blocks exactly as the non-streamed answer has them, sent back unchanged.
#[test]
fn anthropic_streamed_thinking_is_recorded_as_the_non_streamed_blocks() {
    let env = Env::new();
    let end_turn = concat!(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m2\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"usage\":{\"input_tokens\":9,\"output_tokens\":1}}}\n\n",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Rainy.\"}}\n\n",
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
        "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":3}}\n\n",
        "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
    );
    let http = Chunked { inner: Recorded::new(&[ANTHROPIC_THINKING_SSE, end_turn]), log: Default::default() };
    let options = AnthropicOptions { model: "claude-sonnet-4-5".into(), stream: true, ..AnthropicOptions::default() };
    let agent = env.agent(
        AnthropicModel::new(http.clone(), "k".into(), options),
        vec![counting_tool("weather", &Counters::default())],
    );
    let (opts, sink) = listening();
    let r = block_on(agent.send("t", "Paris?", opts)).unwrap();
    assert_eq!(r.text, "Rainy.");
    let thinking: String = sink
        .events()
        .iter()
        .filter_map(|e| match &e.event {
            Event::ReasoningDelta { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(thinking, "The user wants Paris weather. I'll call the weather tool.");
    let recorded: Value = serde_json::from_str(ANTHROPIC_THINKING_JSON).unwrap();
    let Message::Assistant { reasoning, .. } = &r.messages[1] else { panic!("{:?}", r.messages[1]) };
    assert_eq!(reasoning[..], recorded["content"].as_array().unwrap()[..2]);
    let bodies = http.inner.bodies();
    assert_eq!(bodies[0]["stream"], true);
    assert_eq!(bodies[1]["messages"][1]["content"], recorded["content"], "sent back block for block");
}

/// An error event in the middle of a streamed answer is a retryable provider failure: the runtime asks again
/// and the retry streams under attempt 2.
#[test]
fn a_stream_failing_mid_way_is_retried_and_streams_again() {
    let env = Env::new();
    let cut = OPENAI_TOOLS_SSE.find("data: {").unwrap() + 1;
    let cut = cut + OPENAI_TOOLS_SSE[cut..].find("data: {").unwrap();
    let cut = cut + 1 + OPENAI_TOOLS_SSE[cut + 1..].find("data: {").unwrap();
    let failing = format!(
        "{}data: {{\"error\": {{\"message\": \"The server had an error\", \"type\": \"server_error\"}}}}\n\n",
        &OPENAI_TOOLS_SSE[..cut]
    );
    let ok = openai_text_sse("Fine.");
    let http = Chunked { inner: Recorded::new(&[&failing, &ok]), log: Default::default() };
    let options = OpenAiOptions { model: "gpt-4.1-mini".into(), stream: true, ..OpenAiOptions::default() };
    let agent = env.agent(OpenAiModel::new(http.clone(), "k".into(), options), vec![]);
    let (opts, sink) = listening();
    let r = block_on(agent.send("e", "hi", opts)).unwrap();
    assert_eq!(r.text, "Fine.");
    let deltas = text_deltas(&sink);
    assert_eq!(deltas, [(1, "Checking Zü".to_string()), (2, "Fine.".to_string())]);
    assert_eq!(r.stats.model_calls, 2);
}

/// Generated damage to provider replies: a real-shaped OpenAI or Anthropic answer asking for tools
/// (`src/providers/fixtures/`) is damaged (`common::damage`: cut, emptied, not JSON, a field of another type, a
/// number at u64's edge) and driven through an agent, the provider's final answer after it. The run finishes, or
/// fails with a coded error that is not `STEADFAST_INTERNAL`; a finished or failed run's stored transcript is one
/// the provider accepts (every call answered once, in order); nothing panics. `STEADFAST_SEED=<n>`
/// replays one case.
#[test]
fn damaged_provider_replies_end_in_a_valid_transcript_or_a_coded_error_generated() {
    use steadfast::core::transcript::validate_transcript;
    use steadfast::runtime::SplitMix64;
    const OPENAI_STOP: &str = r#"{"id": "chatcmpl-2", "object": "chat.completion", "choices": [{"index": 0,
        "message": {"role": "assistant", "content": "It is sunny."}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 90, "completion_tokens": 4}}"#;
    let seeds: Vec<u64> = common::seeds::seeds(0..400);
    let (mut finished, mut failed, mut taken) = (0, 0, 0);
    for seed in seeds {
        let rng = SplitMix64::new(seed);
        let use_openai = seed % 2 == 0;
        let (reply, stop) =
            if use_openai { (OPENAI_TOOLS_JSON, OPENAI_STOP) } else { (ANTHROPIC_THINKING_JSON, ANTHROPIC_END_TURN) };
        let (damaged, _) = common::damage(reply, &rng);
        let case = format!("{}: {damaged}", common::seeds::repro(seed, "damaged_provider_replies"));
        let env = Env::journal_sim();
        let counters = Counters::default();
        let http = Recorded::new(&[damaged.as_str()]);
        for _ in 0..12 {
            http.replies.borrow_mut().push_back((200, stop.to_string()));
        }
        let tools = vec![counting_tool("get_weather", &counters), counting_tool("weather", &counters)];
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let agent = match use_openai {
                true => env.agent(openai(&http), tools),
                false => env.agent(anthropic(&http), tools),
            };
            match block_on(agent.send("r", "Weather in Paris?", SendOptions::default())) {
                Ok(r) => {
                    finished += 1;
                    // Refused as an answer (retried: the next reply answered) or taken as the turn it still is.
                    if r.messages.iter().any(|m| matches!(m, Message::Tool(_))) {
                        taken += 1;
                    }
                    assert!(validate_transcript(&r.messages).is_ok(), "{case}: {:?}", r.messages);
                }
                Err(e) => {
                    failed += 1;
                    assert_ne!(e.code, ErrorCode::Internal, "{case}: {e}");
                }
            }
            if let Some(cp) = block_on(agent.load("r")).unwrap_or_else(|e| panic!("{case}: load: {e}")) {
                assert!(validate_transcript(&cp.messages).is_ok(), "{case}: stored {:?}", cp.messages);
            }
        }));
        if let Err(p) = outcome {
            let msg = p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()));
            panic!("{case}: {}", msg.unwrap_or_default());
        }
    }
    println!(
        "damaged replies: {finished} runs finished ({taken} with the damaged reply's tool calls), {failed} failed"
    );
    assert!(taken > 0 && finished > taken, "damaged replies both taken as turns and refused: {taken} of {finished}");
}
