//! A JS model as the runtime's [`Model`] (mirrors `js/src/model.ts` and the facade's transcript holder in
//! `js/src/agent.ts`).
//!
//! The JS shape: `{id: string, generate(frameJson: string, onDelta?): Promise<string | null>, release?(runId:
//! string)}`. A frame is a [`crate::runtime::ModelFrame`] (`{runId, step, reset?, base, messages, tools?}`,
//! decided by a [`ModelFeed`]): the holder (the facade) keeps each run's messages and the tools, starts a run
//! over on `reset`, appends otherwise, and asks its model `{runId, messages, tools, step}` with the whole
//! transcript; it resolves `null` when it cannot apply the frame (no messages of the run, or not `base` of
//! them; no tools), and the full transcript is sent again. `release(runId)` is called when the execution that
//! sent the run ends (the holder drops the run's messages). The answer is a ModelResponse `{text, toolCalls:
//! [{id?, name, args}], usage: {inputTokens, outputTokens}}` (a missing call id is generated). A rejection
//! whose value has a numeric `.status` maps through [`provider_http_error`] (`.retryAfterMs` is honoured); one
//! with a `STEADFAST_*` `.code` keeps that code; anything else is `STEADFAST_PROVIDER_NETWORK` (retryable).

use crate::core::classify::provider_http_error;
use crate::core::error::{Error, ErrorCode, Result};
use crate::core::events::StreamDelta;
use crate::core::machine::ModelResponse;
use crate::core::wire::json_text;
use crate::front::wasm_shared::{call_async, js_message, method, prop, to_value};
use crate::runtime::{Model, ModelFeed, ModelRequest};
use async_trait::async_trait;
use futures::channel::mpsc;
use futures::StreamExt;
use js_sys::{Array, Function};
use serde_json::Value;
use std::cell::RefCell;
use std::future::Future;
use std::task::Poll;
use wasm_bindgen::closure::Closure;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

pub(super) struct JsModel {
    id: String,
    obj: JsValue,
    generate: Function,
    /// `release(runId)`, when the JS model has it.
    release: Option<Function>,
    /// What the JS side holds of each run.
    feed: RefCell<ModelFeed>,
    /// The frame's JSON is written here, the buffer kept from call to call.
    frame_buf: RefCell<Vec<u8>>,
    /// The host's `AbortController` (looked up once; `None` without one).
    abort_controller: Option<Function>,
}

impl JsModel {
    /// Reads the JS model (`STEADFAST_CONFIG_INVALID` without a string `id` or a `generate` function).
    pub(super) fn from_js(obj: JsValue) -> Result<JsModel> {
        let id = prop(&obj, "id")
            .as_string()
            .ok_or_else(|| Error::new(ErrorCode::ConfigInvalid, "model needs a string `id`"))?;
        let generate = method(&obj, "generate", "the model")?;
        // Ignored (`.ok()`): a model without a `release` function keeps no per-run state to drop.
        let release = prop(&obj, "release").dyn_into::<Function>().ok();
        let abort_controller = prop(&js_sys::global(), "AbortController").dyn_into::<Function>().ok();
        Ok(JsModel {
            id,
            obj,
            generate,
            release,
            feed: RefCell::new(ModelFeed::new()),
            frame_buf: RefCell::new(Vec::new()),
            abort_controller,
        })
    }

    /// Sends the frame the feed decides on (with `on_delta`, the JS function a streaming model calls with
    /// `(kind, text)`); `None` when the holder could not apply it.
    async fn send_frame(&self, request: &ModelRequest<'_>, on_delta: &JsValue) -> Result<Option<JsValue>> {
        let body = {
            let mut buf = self.frame_buf.borrow_mut();
            buf.clear();
            serde_json::to_writer(&mut *buf, &self.feed.borrow_mut().frame(request))
                .map_err(|e| Error::internal(format!("cannot encode: {e}")))?;
            // serde_json writes UTF-8 only.
            JsValue::from_str(std::str::from_utf8(&buf).map_err(|e| Error::internal(e.to_string()))?)
        };
        // The call's abort signal: aborted when the runtime stops waiting for this answer (the run was aborted,
        // or the call timed out), so the JS model can cancel its request instead of finishing it unheard.
        let abort = AbortOnDrop::new(self.abort_controller.as_ref());
        let args = Array::of3(&body, on_delta, &abort.signal());
        let out = call_async(&self.generate, &self.obj, &args).await.map_err(|e| model_error(&e));
        abort.disarm();
        let out = out?;
        Ok((!out.is_null()).then_some(out))
    }

    /// One answer: the frame, once more with the whole transcript when the holder lost it, parsed.
    async fn answer(&self, request: ModelRequest<'_>, on_delta: &JsValue) -> Result<ModelResponse> {
        let out = match self.send_frame(&request, on_delta).await? {
            Some(out) => out,
            None => {
                self.feed.borrow_mut().lost(request.run_id);
                self.send_frame(&request, on_delta).await?.ok_or_else(|| {
                    Error::new(ErrorCode::ProviderInvalidResponse, "the JS model could not apply a full transcript")
                })?
            }
        };
        let text = match out.as_string() {
            Some(s) => s,
            None => json_text(
                &to_value(&out, "the model's answer")
                    .map_err(|e| Error::new(ErrorCode::ProviderInvalidResponse, e.message))?,
            ),
        };
        parse_response(&text)
    }
}

/// A JS `AbortController` aborted when this guard is dropped before [`AbortOnDrop::disarm`]: the Rust future
/// awaiting a JS call was dropped, nobody will read the answer. Without an `AbortController` in the host the
/// signal is `undefined` and nothing is aborted.
struct AbortOnDrop {
    controller: Option<JsValue>,
}

impl AbortOnDrop {
    /// A new controller of `class` (the host's `AbortController`, when it has one).
    fn new(class: Option<&Function>) -> AbortOnDrop {
        let controller = class.and_then(|c| js_sys::Reflect::construct(c, &Array::new()).ok());
        AbortOnDrop { controller }
    }

    /// The controller's `signal` (`undefined` without one).
    fn signal(&self) -> JsValue {
        self.controller.as_ref().map_or(JsValue::UNDEFINED, |c| prop(c, "signal"))
    }

    /// The call settled: nothing to abort.
    fn disarm(mut self) {
        self.controller = None;
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(c) = self.controller.take() {
            if let Ok(abort) = prop(&c, "abort").dyn_into::<Function>() {
                // Ignored: an abort listener that throws must not fail the runtime that stopped waiting.
                let _ = abort.call0(&c);
            }
        }
    }
}

/// What a JS model's `onDelta(kind, text)` hands over: reasoning for `"reasoning"`, text otherwise.
pub(super) fn stream_delta(kind: &str, text: String) -> StreamDelta {
    if kind == "reasoning" {
        StreamDelta::Reasoning(text)
    } else {
        StreamDelta::Text(text)
    }
}

/// Awaits `answer`, passing each increment that arrives on `deltas` meanwhile to `on_delta` in order; the ones
/// that arrived by the time the answer is ready are passed on before it is returned.
pub(super) async fn pass_on_deltas<T>(
    answer: impl Future<Output = T>,
    mut deltas: mpsc::UnboundedReceiver<StreamDelta>,
    on_delta: &dyn Fn(StreamDelta),
) -> T {
    futures::pin_mut!(answer);
    futures::future::poll_fn(|cx| {
        let ready = answer.as_mut().poll(cx);
        // Polling the receiver until it is pending also registers this task to be woken by the next delta.
        while let Poll::Ready(Some(delta)) = deltas.poll_next_unpin(cx) {
            on_delta(delta);
        }
        ready
    })
    .await
}

/// The crate error for a rejected `generate`.
pub(super) fn model_error(e: &JsValue) -> Error {
    let message = js_message(e);
    let retry_after = prop(e, "retryAfterMs").as_f64().filter(|m| m.is_finite() && *m >= 0.0).map(|m| m as u64);
    if let Some(status) = prop(e, "status").as_f64().filter(|s| (100.0..=599.0).contains(s)) {
        let err = provider_http_error(status as u16, None, &message);
        return if retry_after.is_some() { err.with_retry_after_ms(retry_after) } else { err };
    }
    if let Some(code) = prop(e, "code").as_string().and_then(|c| ErrorCode::parse(&c)) {
        let mut err = Error::new(code, message).with_retry_after_ms(retry_after);
        if let Some(r) = prop(e, "retryable").as_bool() {
            err.retryable = r;
        }
        return err;
    }
    Error::new(ErrorCode::ProviderNetwork, format!("the model call failed: {message}")).with_retry_after_ms(retry_after)
}

/// Parses a ModelResponse, giving tool calls without an id an empty one (the machine generates it).
pub(super) fn parse_response(text: &str) -> Result<ModelResponse> {
    let bad = |e: String| {
        Error::new(ErrorCode::ProviderInvalidResponse, format!("the model's answer is not a ModelResponse: {e}"))
    };
    // The usual answer (every call with a string id) is read once, straight into the response; anything else
    // goes through a `Value`, where ids are given.
    if let Ok(resp) = serde_json::from_str::<ModelResponse>(text) {
        return Ok(resp);
    }
    let mut v: Value = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
    if let Some(calls) = v.get_mut("toolCalls").and_then(Value::as_array_mut) {
        for c in calls.iter_mut() {
            if let Some(obj) = c.as_object_mut() {
                if !obj.get("id").is_some_and(Value::is_string) {
                    obj.insert("id".into(), Value::String(String::new()));
                }
            }
        }
    }
    serde_json::from_value(v).map_err(|e| bad(e.to_string()))
}

#[async_trait(?Send)]
impl Model for JsModel {
    fn id(&self) -> &str {
        &self.id
    }

    /// An AI SDK model's provider (`openai` of `openai:gpt-4o`): one breaker per provider; else the id.
    fn dependency(&self) -> String {
        self.id.split_once(':').map_or(&*self.id, |(provider, _)| provider).to_string()
    }

    async fn generate(&self, request: ModelRequest<'_>) -> Result<ModelResponse> {
        self.answer(request, &JsValue::UNDEFINED).await
    }

    async fn generate_streaming(
        &self,
        request: ModelRequest<'_>,
        on_delta: &dyn Fn(StreamDelta),
    ) -> Result<ModelResponse> {
        // The JS model calls `onDelta(kind, text)` whenever it likes; the increments wait in the channel until
        // this task runs, and are passed on in order before the answer.
        let (into, deltas) = mpsc::unbounded();
        let callback = Closure::<dyn FnMut(String, String)>::new(move |kind: String, text: String| {
            // Ignored: the receiver lives as long as this closure's caller waits for the answer; a delta sent
            // after the answer has no one to read it.
            let _ = into.unbounded_send(stream_delta(&kind, text));
        });
        pass_on_deltas(self.answer(request, callback.as_ref()), deltas, on_delta).await
    }

    fn execution_ended(&self, run_id: &str, execution: &str) {
        if self.feed.borrow_mut().end(run_id, execution) {
            if let Some(release) = &self.release {
                // Ignored: a release that throws only leaves the run's messages held until the next reset.
                let _ = release.call1(&self.obj, &JsValue::from_str(run_id));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::executor::block_on;
    use std::cell::RefCell;

    #[test]
    fn an_answer_missing_call_ids_gets_empty_ones_and_anything_else_is_an_invalid_response() {
        let r = parse_response(
            r#"{"text": "t", "toolCalls": [{"name": "a", "args": {}}, {"id": "c2", "name": "b", "args": {"x": 1}}]}"#,
        )
        .unwrap();
        assert_eq!(r.text, "t");
        let ids: Vec<&str> = r.tool_calls.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["", "c2"]);
        assert_eq!(parse_response(r#"{"text": "only"}"#).unwrap().tool_calls.len(), 0);
        for bad in ["", "not json", "7", r#"{"toolCalls": 5}"#, r#"{"toolCalls": [{"args": {}}]}"#, r#"{"text": 5}"#] {
            let e = parse_response(bad).unwrap_err();
            assert_eq!(e.code, ErrorCode::ProviderInvalidResponse, "{bad}: {e}");
            assert!(e.message.starts_with("the model's answer is not a ModelResponse"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_delta_is_reasoning_only_when_the_model_says_so() {
        assert_eq!(stream_delta("reasoning", "r".into()), StreamDelta::Reasoning("r".into()));
        assert_eq!(stream_delta("text", "t".into()), StreamDelta::Text("t".into()));
        assert_eq!(stream_delta("", "x".into()), StreamDelta::Text("x".into()));
    }

    /// Over generated interleavings (deltas sent before the first poll, between polls, and in the poll that
    /// answers), every delta is passed on once, in order, before the answer is returned.
    /// `STEADFAST_SEED=<n>` replays one case.
    #[test]
    fn deltas_are_passed_on_in_order_before_the_answer_for_generated_interleavings() {
        use crate::runtime::{Rng, SplitMix64};
        let seeds: Vec<u64> = crate::seeds::seeds(0..200);
        for seed in seeds {
            let rng = SplitMix64::new(seed);
            let repro = crate::seeds::repro_in("--lib --features js", seed, "deltas_are_passed_on");
            // Per poll of the answer: how many deltas the "model" sends before it; the answer comes after the
            // last batch.
            let batches: Vec<usize> = (0..1 + rng.next_u64() % 6).map(|_| (rng.next_u64() % 4) as usize).collect();
            let (tx, rx) = mpsc::unbounded();
            let mut sent = 0usize;
            for _ in 0..(rng.next_u64() % 3) {
                tx.unbounded_send(StreamDelta::Text(sent.to_string())).unwrap();
                sent += 1;
            }
            let total = sent + batches.iter().sum::<usize>();
            let seen = RefCell::new(Vec::new());
            let polls = std::cell::Cell::new(0usize);
            let answer = futures::future::poll_fn(|cx| {
                let i = polls.get();
                polls.set(i + 1);
                for _ in 0..batches[i] {
                    tx.unbounded_send(StreamDelta::Text(sent.to_string())).unwrap();
                    sent += 1;
                }
                if i + 1 == batches.len() {
                    Poll::Ready(seen.borrow().len())
                } else {
                    cx.waker().wake_by_ref();
                    Poll::Pending
                }
            });
            let on_delta = |d: StreamDelta| seen.borrow_mut().push(d);
            let seen_by_the_answer = block_on(pass_on_deltas(answer, rx, &on_delta));
            let expected: Vec<StreamDelta> = (0..total).map(|i| StreamDelta::Text(i.to_string())).collect();
            assert_eq!(*seen.borrow(), expected, "{repro}");
            // Those sent before the answering poll were passed on while the answer was pending (none when the
            // first poll answers).
            let passed_while_pending = if batches.len() == 1 { 0 } else { total - batches[batches.len() - 1] };
            assert_eq!(seen_by_the_answer, passed_while_pending, "{repro}");
        }
    }
}
