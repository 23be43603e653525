//! The Worker's own implementations of platform traits: `fetch` and the Workers AI binding (Workers KV, the
//! clock, timers and randomness are shared with the npm package's bindings: [`crate::front::wasm_shared`]).
//! Translation only: no decisions.

use crate::core::error::{Error, ErrorCode, Result};
use crate::core::wire::json_text;
use crate::front::wasm_shared::JsSleep;
use crate::http::{CappedBody, HttpClient, HttpRequest, HttpResponse};
use crate::providers::workers_ai::{binding_error, AiBinding};
use crate::runtime::Sleep;
use async_trait::async_trait;
use futures::StreamExt;
use js_sys::{Function, Promise, Reflect, JSON};
use serde_json::Value;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use worker::web_sys::ReadableStream;
use worker::{AbortController, ByteStream, Fetch, Headers, Method, Request};

/// Timeout when a request gives none (`timeout_ms: 0`).
const DEFAULT_TIMEOUT_MS: u64 = 60_000;

/// [`HttpClient`] over the Workers `fetch`, one attempt, keeping the [`crate::http`] contract: one timer for
/// the whole exchange (headers and body), the body read as a stream into a [`CappedBody`] that stops at the
/// request's cap, and the fetch aborted when either ends it.
pub struct FetchClient;

#[async_trait(?Send)]
impl HttpClient for FetchClient {
    async fn send(&self, req: HttpRequest) -> Result<HttpResponse> {
        exchange(req, None).await
    }

    /// A 2xx body handed to `on_chunk` chunk by chunk as `fetch` reads it (within the same one timer); any other
    /// answer read whole, capped.
    async fn send_streaming(
        &self,
        req: HttpRequest,
        on_chunk: &mut dyn for<'c> FnMut(&'c [u8]) -> bool,
    ) -> Result<HttpResponse> {
        exchange(req, Some(on_chunk)).await
    }
}

/// workers-rs's `Request::new_with_init(url, &init)`, for the `RequestInit` fields we set (method, headers, body,
/// redirect), with the same error. Built on `web_sys::RequestInit` directly: workers-rs's conversion of its
/// `RequestInit` also handles the `cf` properties (image resizing options and their serialisers), which we
/// never set but which stayed in the Worker's wasm (~6 KB gzip). The answer is `Request::from` the
/// `web_sys::Request` (it differs only in workers-rs's private "immutable" flag, which guards `headers_mut` and
/// `path_mut`: none of our requests is changed after it is built).
pub(crate) fn new_request(
    url: &str,
    method: Method,
    headers: Option<&Headers>,
    body: Option<&JsValue>,
    manual_redirect: bool,
) -> worker::Result<Request> {
    use worker::web_sys;
    let init = web_sys::RequestInit::new();
    if let Some(headers) = headers.filter(|h| !h.is_empty()) {
        init.set_headers(headers.as_ref());
    }
    init.set_method(method.as_ref());
    init.set_redirect(if manual_redirect {
        web_sys::RequestRedirect::Manual
    } else {
        web_sys::RequestRedirect::Follow
    });
    if let Some(body) = body {
        init.set_body(body);
    }
    web_sys::Request::new_with_str_and_init(url, &init).map(Request::from).map_err(|e| {
        worker::Error::JsError(e.as_string().unwrap_or_else(|| "invalid URL or options for Request".to_string()))
    })
}

/// One attempt: a 2xx body goes to `on_chunk` while it is read when there is one, every other body into a
/// [`CappedBody`].
async fn exchange(
    req: HttpRequest,
    mut on_chunk: Option<&mut dyn for<'c> FnMut(&'c [u8]) -> bool>,
) -> Result<HttpResponse> {
    let net = |what: &str, e: worker::Error| Error::new(ErrorCode::ProviderNetwork, format!("{what}: {e}"));
    let headers = Headers::new();
    for (k, v) in &req.headers {
        headers.set(k, v).map_err(|e| net("bad header", e))?;
    }
    let body = req.body.as_deref().map(JsValue::from_str);
    // Redirects are not followed: a redirect could leave an allow-listed host (a 3xx is an answer).
    let method = Method::from(req.method.clone());
    let request =
        new_request(&req.url, method, Some(&headers), body.as_ref(), true).map_err(|e| net("bad request", e))?;
    let controller = AbortController::default();
    let signal = controller.signal();
    let exchange = async {
        let mut resp = Fetch::Request(request).send_with_signal(&signal).await.map_err(|e| net("fetch failed", e))?;
        let status = resp.status_code();
        let headers = resp.headers().entries().map(|(k, v)| (k.to_ascii_lowercase(), v)).collect();
        let mut body = CappedBody::new(req.max_response_bytes);
        let mut feed = on_chunk.as_mut().filter(|_| (200..300).contains(&status));
        // A streamed body keeps to the cap too: counted, cut at it, marked truncated.
        let (mut fed, mut cut) = (0usize, false);
        // Ignored (no else): a response without a body (204, HEAD) has no stream; that is the only failure.
        if let Ok(mut stream) = resp.stream() {
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|e| net("reading the body failed", e))?;
                let more = match feed.as_mut() {
                    Some(feed) => {
                        let max = req.max_response_bytes;
                        let room = if max == 0 { chunk.len() } else { chunk.len().min(max.saturating_sub(fed)) };
                        fed += room;
                        cut = room < chunk.len();
                        feed(&chunk[..room]) && !cut
                    }
                    None => body.push(&chunk),
                };
                if !more {
                    break;
                }
            }
        }
        let (body, truncated) = body.finish();
        let truncated = truncated || cut;
        Ok(HttpResponse { status, headers, body, truncated })
    };
    let limit_ms = if req.timeout_ms == 0 { DEFAULT_TIMEOUT_MS } else { req.timeout_ms };
    let timeout = JsSleep.sleep(limit_ms);
    futures::pin_mut!(exchange);
    futures::pin_mut!(timeout);
    let result = match futures::future::select(exchange, timeout).await {
        futures::future::Either::Left((r, _)) => r,
        futures::future::Either::Right(_) => {
            Err(Error::new(ErrorCode::ProviderTimeout, format!("no complete answer within {limit_ms} ms")))
        }
    };
    // Ends whatever is still open: a body cut at the cap or by `on_chunk`, or an exchange past the timeout (after
    // a complete answer it does nothing).
    controller.abort();
    result
}

/// The Workers AI binding. Its JS `run(model, input)` is called directly, the input handed over as a plain JS
/// object (`JSON.parse` of the JSON text): workers-rs's `Ai::run` converts with serde-wasm-bindgen's defaults,
/// which turn JSON objects into JS `Map`s the binding does not read as its input.
pub struct WorkersAi(pub worker::Ai);

impl WorkersAi {
    /// `AI.run(model, input)`, awaited: its output, or the binding's error as [`binding_error`] classifies it.
    async fn call(&self, model: &str, input: &Value) -> Result<JsValue> {
        let fail = |e: JsValue| binding_error(&worker::Error::from(e).to_string());
        let ai: &JsValue = self.0.as_ref();
        let run: Function = Reflect::get(ai, &JsValue::from_str("run")).and_then(|f| f.dyn_into()).map_err(fail)?;
        let input = JSON::parse(&json_text(&input)).map_err(fail)?;
        let answer = run.call2(ai, &JsValue::from_str(model), &input).map_err(fail)?;
        JsFuture::from(Promise::resolve(&answer)).await.map_err(fail)
    }
}

#[async_trait(?Send)]
impl AiBinding for WorkersAi {
    /// The output read back as JSON (`JSON.stringify`; `undefined` is `null`).
    async fn run(&self, model: &str, input: Value, timeout_ms: u64) -> Result<Value> {
        let output = within(timeout_ms, self.call(model, &input)).await?;
        let text = JSON::stringify(&output).ok().and_then(|t| t.as_string()).unwrap_or_else(|| "null".into());
        serde_json::from_str(&text).map_err(|e| binding_error(&format!("its output is not JSON: {e}")))
    }

    /// The `ReadableStream` the binding answers a `stream: true` input with, read chunk by chunk.
    async fn run_streaming(
        &self,
        model: &str,
        input: Value,
        timeout_ms: u64,
        on_chunk: &mut dyn for<'c> FnMut(&'c [u8]) -> bool,
    ) -> Result<()> {
        within(timeout_ms, self.stream(model, input, on_chunk)).await
    }
}

/// `work`, or `STEADFAST_PROVIDER_TIMEOUT` once `timeout_ms` (0: [`DEFAULT_TIMEOUT_MS`]) passed without its end
/// (`work` is dropped: a stream it reads is cancelled).
async fn within<T>(timeout_ms: u64, work: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    let limit_ms = if timeout_ms == 0 { DEFAULT_TIMEOUT_MS } else { timeout_ms };
    let timeout = JsSleep.sleep(limit_ms);
    futures::pin_mut!(work);
    futures::pin_mut!(timeout);
    match futures::future::select(work, timeout).await {
        futures::future::Either::Left((r, _)) => r,
        futures::future::Either::Right(_) => {
            Err(Error::new(ErrorCode::ProviderTimeout, format!("Workers AI did not answer within {limit_ms} ms")))
        }
    }
}

impl WorkersAi {
    /// A streamed call read to its end (or until `on_chunk` has had enough).
    async fn stream(
        &self,
        model: &str,
        input: Value,
        on_chunk: &mut dyn for<'c> FnMut(&'c [u8]) -> bool,
    ) -> Result<()> {
        let output = self.call(model, &input).await?;
        let Ok(stream) = output.dyn_into::<ReadableStream>() else {
            return Err(Error::new(
                ErrorCode::ProviderInvalidResponse,
                "Workers AI answered a streamed call with something that is not a stream",
            ));
        };
        // Dropping it (on_chunk had enough, or an error) cancels the stream (wasm-streams cancels on drop).
        let mut stream = ByteStream::from(stream);
        while let Some(chunk) = stream.next().await {
            let chunk = chunk
                .map_err(|e| Error::new(ErrorCode::ProviderNetwork, format!("Workers AI's stream failed: {e}")))?;
            if !on_chunk(&chunk) {
                break;
            }
        }
        Ok(())
    }
}

/// The recovery queue: a Cloudflare Queue's producer binding (`RECOVERY_QUEUE`), `sendBatch` of string bodies.
pub(crate) struct JsQueue(pub(crate) JsValue);

#[async_trait(?Send)]
impl crate::runtime::RecoveryQueue for JsQueue {
    async fn send_batch(&self, bodies: Vec<String>) -> Result<()> {
        use crate::front::wasm_shared::{call_async, prop, set};
        let messages = js_sys::Array::new();
        for body in bodies {
            let m = js_sys::Object::new();
            set(&m, "body", &JsValue::from_str(&body));
            messages.push(&m);
        }
        let fail = |e: JsValue| {
            let why = crate::front::wasm_shared::js_message(&e);
            Error::new(ErrorCode::StoreUnavailable, format!("the recovery queue refused a batch: {why}"))
        };
        let send: Function = prop(&self.0, "sendBatch").dyn_into().map_err(fail)?;
        call_async(&send, &self.0, &js_sys::Array::of1(&messages)).await.map(drop).map_err(fail)
    }
}

/// Acknowledges (`ack`) or lets the queue deliver again (`retry`) one message of a batch.
pub(crate) fn settle_message(message: &JsValue, ack: bool) {
    let f = crate::front::wasm_shared::prop(message, if ack { "ack" } else { "retry" });
    if let Ok(f) = f.dyn_into::<Function>() {
        // Ignored: a message the runtime will not take a verdict on is delivered again (at least once).
        let _ = f.call0(message);
    }
}
