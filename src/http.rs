//! A minimal HTTP client contract. Providers and webhook tools build requests and read responses with pure
//! code against it; the platform shells supply the transport (`worker::Fetch` in the Worker, the host's
//! `fetch` in the npm package, a scripted fake in tests). The client makes exactly one attempt: retries
//! belong to the runtime's model-call layer (M15).
//!
//! # Contract (for every transport)
//! * **The timeout covers the whole exchange**: connecting, the status and headers, *and* the body. A server
//!   that answers its headers at once and then trickles the body for ever gets a
//!   `STEADFAST_PROVIDER_TIMEOUT` error after about `timeout_ms`, and the transport abandons the request.
//! * **The response cap is enforced while reading**: with `max_response_bytes > 0` the transport stops
//!   reading (and cancels the rest) as soon as the body passes the cap, returns the first
//!   `max_response_bytes` bytes and sets [`HttpResponse::truncated`]; it never buffers a whole oversized
//!   body. [`CappedBody`] is the collector transports use for this.
//! * Redirects are not followed (a 3xx is an answer).

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
    /// Give up after this many milliseconds, counting until the last byte of the body (0 = the platform's
    /// default).
    pub timeout_ms: u64,
    /// Read at most this many bytes of the response body (0 = no cap): see the module's contract.
    pub max_response_bytes: usize,
}

/// An HTTP response.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HttpResponse {
    /// Status code.
    pub status: u16,
    /// Headers (names lower-case).
    pub headers: Vec<(String, String)>,
    /// Body (UTF-8; invalid sequences replaced), at most the request's `max_response_bytes` bytes.
    pub body: String,
    /// The transport stopped reading at `max_response_bytes`: the real body was longer.
    pub truncated: bool,
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

    /// One attempt whose 2xx body is handed to `on_chunk` while it is read (a streamed model answer); reading
    /// stops when `on_chunk` returns `false`. The response returned has an empty body for a 2xx answer, and the
    /// whole (capped) body otherwise. The default, for transports that do not stream, reads the whole answer
    /// with [`HttpClient::send`] and hands a 2xx body over in one chunk.
    async fn send_streaming(
        &self,
        request: HttpRequest,
        on_chunk: &mut dyn for<'c> FnMut(&'c [u8]) -> bool,
    ) -> Result<HttpResponse> {
        let mut response = self.send(request).await?;
        if (200..300).contains(&response.status) {
            on_chunk(response.body.as_bytes());
            response.body.clear();
        }
        Ok(response)
    }
}

/// Collects a response body while it is read, up to a cap: a transport feeds it chunks and stops reading
/// as soon as [`CappedBody::push`] returns `false`. Platform independent, so the capping rule is tested
/// natively.
#[derive(Debug, Default)]
pub struct CappedBody {
    max: usize,
    bytes: Vec<u8>,
    truncated: bool,
}

impl CappedBody {
    /// A collector keeping at most `max` bytes (0 = no cap).
    pub fn new(max: usize) -> CappedBody {
        CappedBody { max, bytes: Vec::new(), truncated: false }
    }

    /// Adds a chunk. Returns `false` once the body has passed the cap: the transport must stop reading (the
    /// bytes past the cap are dropped and the body is marked truncated).
    pub fn push(&mut self, chunk: &[u8]) -> bool {
        if self.truncated {
            return false;
        }
        if self.max == 0 || self.bytes.len() + chunk.len() <= self.max {
            self.bytes.extend_from_slice(chunk);
            return true;
        }
        let room = self.max - self.bytes.len();
        self.bytes.extend_from_slice(&chunk[..room]);
        self.truncated = true;
        false
    }

    /// Bytes kept so far.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether nothing was kept.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The body as text and whether it was cut. A cut that split a UTF-8 sequence drops the partial
    /// character; other invalid bytes become U+FFFD.
    pub fn finish(self) -> (String, bool) {
        let mut bytes = self.bytes;
        if self.truncated {
            if let Err(e) = std::str::from_utf8(&bytes) {
                if e.error_len().is_none() {
                    bytes.truncate(e.valid_up_to());
                }
            }
        }
        let text = match String::from_utf8(bytes) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        };
        (text, self.truncated)
    }
}

/// An absolute URL as a platform hands it over (the Workers runtime's `Request.url`: parsed and normalised
/// already), cut into its origin (`scheme://authority`), path (`/` when empty) and query (without `?`; the
/// fragment dropped), without parsing it again. The Worker uses this instead of the `url` crate, whose IDNA
/// tables cost the bundle 70 KB gzip when it was dropped (611,217 → 540,668 bytes) for a string the runtime
/// has normalised.
pub fn split_url(url: &str) -> (&str, &str, &str) {
    let authority_at = url.find("://").map_or(0, |i| i + 3);
    let path_at = url[authority_at..].find(['/', '?', '#']).map_or(url.len(), |i| authority_at + i);
    let (origin, rest) = url.split_at(path_at);
    let rest = rest.split('#').next().unwrap_or_default();
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    (origin, if path.is_empty() { "/" } else { path }, query)
}

/// A query string's `application/x-www-form-urlencoded` pairs, decoded (`+` is a space, percent escapes are
/// bytes, invalid UTF-8 replaced), in order.
pub fn query_pairs(query: &str) -> Vec<(String, String)> {
    form_urlencoded::parse(query.as_bytes()).map(|(k, v)| (k.into_owned(), v.into_owned())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::{Rng, SplitMix64};

    #[test]
    fn capped_body_keeps_exactly_the_cap_and_stops_past_it() {
        // Generated bodies, caps and chunkings: the result is the body's first `cap` bytes (minus a split
        // character), `truncated` exactly when the body is longer, and no chunk is asked for after the
        // first `false`.
        let rng = SplitMix64::new(7);
        for case in 0..2_000 {
            let len = (rng.next_u64() % 300) as usize;
            let body: String = (0..len).map(|i| if (i + case) % 7 == 0 { 'é' } else { 'a' }).collect();
            let bytes = body.as_bytes();
            let cap = (rng.next_u64() % 320) as usize;
            let mut c = CappedBody::new(cap);
            let mut offset = 0;
            let mut stopped = false;
            while offset < bytes.len() {
                let n = 1 + (rng.next_u64() % 64) as usize;
                let end = (offset + n).min(bytes.len());
                let more = c.push(&bytes[offset..end]);
                offset = end;
                if !more {
                    stopped = true;
                    break;
                }
            }
            let over = cap != 0 && bytes.len() > cap;
            assert_eq!(stopped, over, "case {case}: len {} cap {cap}", bytes.len());
            assert!(c.len() <= if cap == 0 { bytes.len() } else { cap });
            let (text, truncated) = c.finish();
            assert_eq!(truncated, over, "case {case}");
            if over {
                assert!(body.starts_with(&text) && text.len() + 1 >= cap && text.len() <= cap, "case {case}");
            } else {
                assert_eq!(text, body, "case {case}");
            }
        }
    }

    #[test]
    fn capped_body_replaces_invalid_bytes() {
        let mut c = CappedBody::new(0);
        assert!(c.push(b"ok \xff done"));
        assert_eq!(c.finish(), ("ok \u{fffd} done".to_string(), false));
    }

    /// The Worker's URL split against the `url` crate it replaces, over generated URLs as the runtime hands them
    /// over (parsed and normalised, which the crate does here first): the same path and the same decoded query
    /// pairs, for hosts with ports and IPv6 literals, paths with escapes, dot segments and odd characters, and
    /// queries with `+`, escapes, empty and repeated pairs and a fragment after them. `STEADFAST_SEED=<n>`
    /// replays one case.
    #[test]
    fn split_url_and_query_pairs_agree_with_the_url_crate_on_generated_urls() {
        const HOSTS: &[&str] = &["example.com", "127.0.0.1:8787", "[::1]:80", "a.b.workers.dev", "EXAMPLE.com:443"];
        const PARTS: &[&str] =
            &["runs", "a b", "%2F", "..", ".", "ünï", "x%zz", "?", "#", "&", "=", "+", "", "a+b", "%20", ";", "@", ":"];
        let seeds = crate::seeds::seeds(0..3_000);
        for seed in seeds {
            let rng = SplitMix64::new(seed);
            let pick = |pool: &[&'static str]| pool[(rng.next_u64() % pool.len() as u64) as usize];
            let scheme = if rng.next_u64() % 2 == 0 { "https" } else { "http" };
            let mut raw = format!("{scheme}://{}", pick(HOSTS));
            for _ in 0..rng.next_u64() % 5 {
                raw.push('/');
                raw.push_str(pick(PARTS));
            }
            if rng.next_u64() % 3 > 0 {
                raw.push('?');
                for i in 0..rng.next_u64() % 4 {
                    if i > 0 {
                        raw.push('&');
                    }
                    raw.push_str(pick(PARTS));
                    if rng.next_u64() % 2 == 0 {
                        raw.push('=');
                        raw.push_str(pick(PARTS));
                    }
                }
            }
            if rng.next_u64() % 4 == 0 {
                raw.push('#');
                raw.push_str(pick(PARTS));
            }
            let repro = format!("{}: {raw:?}", crate::seeds::repro(seed, "split_url"));
            let Ok(parsed) = url::Url::parse(&raw) else { continue };
            let normalised = parsed.as_str();
            let (origin, path, query) = split_url(normalised);
            assert_eq!(origin, parsed.origin().ascii_serialization(), "{repro}");
            assert_eq!(path, parsed.path(), "{repro}");
            let expected: Vec<(String, String)> = parsed.query_pairs().map(|(k, v)| (k.into(), v.into())).collect();
            assert_eq!(query_pairs(query), expected, "{repro}");
        }
    }
}
