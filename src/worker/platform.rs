//! The Worker's implementations of the runtime's platform traits: Workers KV, `fetch`, the clock, timers,
//! randomness and the Workers AI binding. Translation only: no decisions.

use crate::core::error::{Error, ErrorCode, Result};
use crate::http::{CappedBody, HttpClient, HttpRequest, HttpResponse};
use crate::providers::workers_ai::AiBinding;
use crate::runtime::{Clock, Sleep, SplitMix64};
use crate::store::kv::{check_bulk, check_key, check_put, kv_error_code, KvBackend, ListKey, ListPage, PutOptions};
use async_trait::async_trait;
use futures::StreamExt;
use serde_json::Value;
use std::time::Duration;
use worker::kv::{KvError, KvStore};
use worker::{AbortController, Delay, Fetch, Headers, Method, Request, RequestInit, RequestRedirect};

/// The [`KvBackend`] over a Workers KV namespace binding.
#[derive(Clone)]
pub struct WorkersKv(pub KvStore);

fn kv_error(e: KvError) -> Error {
    let text = e.to_string();
    match kv_error_code(&text) {
        ErrorCode::StoreRateLimited => {
            Error::new(ErrorCode::StoreRateLimited, format!("Workers KV refused the write (429): {text}"))
        }
        code => Error::new(code, format!("Workers KV failed: {text}")),
    }
}

#[async_trait(?Send)]
impl KvBackend for WorkersKv {
    async fn get(&self, key: &str) -> Result<Option<String>> {
        check_key(key)?;
        self.0.get(key).text().await.map_err(kv_error)
    }

    async fn get_many(&self, keys: &[String]) -> Result<Vec<Option<String>>> {
        check_bulk(keys)?;
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let mut found = self.0.get_bulk(keys).text().await.map_err(kv_error)?;
        Ok(keys.iter().map(|k| found.remove(k).flatten()).collect())
    }

    async fn put(&self, key: &str, value: &str, opts: PutOptions) -> Result<()> {
        check_put(key, value, &opts)?;
        let mut builder = self.0.put(key, value).map_err(kv_error)?;
        if let Some(m) = opts.metadata {
            builder = builder.metadata(m).map_err(kv_error)?;
        }
        if let Some(ttl) = opts.expiration_ttl_s {
            builder = builder.expiration_ttl(ttl);
        }
        builder.execute().await.map_err(kv_error)
    }

    async fn delete(&self, key: &str) -> Result<()> {
        check_key(key)?;
        self.0.delete(key).await.map_err(kv_error)
    }

    async fn list(&self, prefix: &str, cursor: Option<&str>, limit: usize) -> Result<ListPage> {
        let mut b = self.0.list().prefix(prefix.to_string()).limit(limit.clamp(1, 1_000) as u64);
        if let Some(c) = cursor {
            b = b.cursor(c.to_string());
        }
        let page = b.execute().await.map_err(kv_error)?;
        Ok(ListPage {
            keys: page.keys.into_iter().map(|k| ListKey { name: k.name, metadata: k.metadata }).collect(),
            cursor: if page.list_complete { None } else { page.cursor },
        })
    }
}

/// `Date.now()`.
pub struct WorkerClock;

impl Clock for WorkerClock {
    fn now_ms(&self) -> u64 {
        js_sys::Date::now() as u64
    }
}

/// `setTimeout`.
pub struct WorkerSleep;

#[async_trait(?Send)]
impl Sleep for WorkerSleep {
    async fn sleep(&self, ms: u64) {
        Delay::from(Duration::from_millis(ms)).await;
    }
}

/// A [`SplitMix64`] stream seeded from `Math.random()` and the clock (ids and jitter, not secrets). Build it
/// inside a handler: Workers forbid randomness at module scope.
pub fn worker_rng() -> SplitMix64 {
    SplitMix64::new((js_sys::Math::random() * (u64::MAX as f64)) as u64 ^ (js_sys::Date::now() as u64).rotate_left(17))
}

/// Timeout when a request gives none (`timeout_ms: 0`).
const DEFAULT_TIMEOUT_MS: u64 = 60_000;

/// [`HttpClient`] over the Workers `fetch`, one attempt, keeping the [`crate::http`] contract: one timer for
/// the whole exchange (headers and body), the body read as a stream into a [`CappedBody`] that stops at the
/// request's cap, and the fetch aborted when either ends it.
pub struct FetchClient;

#[async_trait(?Send)]
impl HttpClient for FetchClient {
    async fn send(&self, req: HttpRequest) -> Result<HttpResponse> {
        let net = |what: &str, e: worker::Error| Error::new(ErrorCode::ProviderNetwork, format!("{what}: {e}"));
        let headers = Headers::new();
        for (k, v) in &req.headers {
            headers.set(k, v).map_err(|e| net("bad header", e))?;
        }
        let mut init = RequestInit::new();
        // Redirects are not followed: a redirect could leave an allow-listed host (a 3xx is an answer).
        init.with_method(Method::from(req.method.clone())).with_headers(headers).with_redirect(RequestRedirect::Manual);
        if let Some(body) = &req.body {
            init.with_body(Some(wasm_bindgen::JsValue::from_str(body)));
        }
        let request = Request::new_with_init(&req.url, &init).map_err(|e| net("bad request", e))?;
        let controller = AbortController::default();
        let signal = controller.signal();
        let exchange = async {
            let mut resp =
                Fetch::Request(request).send_with_signal(&signal).await.map_err(|e| net("fetch failed", e))?;
            let status = resp.status_code();
            let headers = resp.headers().entries().map(|(k, v)| (k.to_ascii_lowercase(), v)).collect();
            let mut body = CappedBody::new(req.max_response_bytes);
            // A response without a body (204, HEAD) has no stream.
            if let Ok(mut stream) = resp.stream() {
                while let Some(chunk) = stream.next().await {
                    if !body.push(&chunk.map_err(|e| net("reading the body failed", e))?) {
                        break;
                    }
                }
            }
            let (body, truncated) = body.finish();
            Ok(HttpResponse { status, headers, body, truncated })
        };
        let limit_ms = if req.timeout_ms == 0 { DEFAULT_TIMEOUT_MS } else { req.timeout_ms };
        let timeout = Delay::from(Duration::from_millis(limit_ms));
        futures::pin_mut!(exchange);
        futures::pin_mut!(timeout);
        let result = match futures::future::select(exchange, timeout).await {
            futures::future::Either::Left((r, _)) => r,
            futures::future::Either::Right(_) => {
                Err(Error::new(ErrorCode::ProviderTimeout, format!("no complete answer within {limit_ms} ms")))
            }
        };
        // Ends whatever is still open: a body cut at the cap, or an exchange past the timeout (after a
        // complete answer it does nothing).
        controller.abort();
        result
    }
}

/// The Workers AI binding.
pub struct WorkersAi(pub worker::Ai);

#[async_trait(?Send)]
impl AiBinding for WorkersAi {
    async fn run(&self, model: &str, input: Value) -> Result<Value> {
        self.0.run::<Value, Value>(model, input).await.map_err(|e| {
            let text = e.to_string();
            let code = if text.contains("429") || text.to_ascii_lowercase().contains("capacity") {
                ErrorCode::ProviderRateLimited
            } else {
                ErrorCode::ProviderUnavailable
            };
            Error::new(code, format!("Workers AI failed: {text}"))
        })
    }
}
