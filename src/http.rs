//! A minimal HTTP client contract. Providers and webhook tools build requests and read responses with pure
//! code against it; the platform shells supply the transport (`worker::Fetch` in the Worker, the host's
//! `fetch` in the npm package, a scripted fake in tests). The client makes exactly one attempt: retries
//! belong to the runtime's model-call layer (M15).

use crate::core::error::Result;
use async_trait::async_trait;

/// An HTTP request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HttpRequest {
    /// Method (`GET`, `POST`, …).
    pub method: String,
    /// Absolute URL.
    pub url: String,
    /// Headers, in order.
    pub headers: Vec<(String, String)>,
    /// Body (UTF-8).
    pub body: Option<String>,
    /// Give up after this many milliseconds (0 = the platform's default).
    pub timeout_ms: u64,
}

/// An HTTP response.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HttpResponse {
    /// Status code.
    pub status: u16,
    /// Headers (names lower-case).
    pub headers: Vec<(String, String)>,
    /// Body (UTF-8, possibly truncated by the transport to its response cap).
    pub body: String,
}

impl HttpResponse {
    /// A header value by (case-insensitive) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// Sends one HTTP request. Transport failures are errors with code `STEADFAST_PROVIDER_NETWORK` or
/// `STEADFAST_PROVIDER_TIMEOUT` (callers re-label them for their domain); any HTTP status is a response.
#[async_trait(?Send)]
pub trait HttpClient {
    /// One attempt.
    async fn send(&self, request: HttpRequest) -> Result<HttpResponse>;
}
