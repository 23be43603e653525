//! Failure classification (M15): every failure is transient, recoverable or terminal.
//!
//! Classification is data: it follows from the error code (and, for HTTP, from the status), never from
//! matching message strings.

use super::error::{Error, ErrorCode};
use serde::{Deserialize, Serialize};

/// The three buckets of the seeds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FailureClass {
    /// Not our fault, will probably pass: retry the same call (429, 5xx, timeouts, dropped connections).
    Transient,
    /// A real outcome the model can fix: give it back as a tool result (tool threw, bad arguments).
    Recoverable,
    /// Stop and checkpoint (bad API key, exhausted budget, bug, cancellation).
    Terminal,
}

/// The class of an error.
pub fn classify(err: &Error) -> FailureClass {
    use ErrorCode::*;
    match err.code {
        ProviderRateLimited
        | ProviderUnavailable
        | ProviderTimeout
        | ProviderNetwork
        | ProviderInvalidResponse
        | StoreRateLimited
        | StoreUnavailable
        | SessionBusy => FailureClass::Transient,
        ToolPropagated | HookFailed | Crashed if err.retryable => FailureClass::Transient,
        InvalidInput => FailureClass::Recoverable,
        _ if err.retryable => FailureClass::Transient,
        _ => FailureClass::Terminal,
    }
}

/// Whether an error counts toward a provider outage (M13): the codes table says ([`ErrorCode::is_outage`]).
pub fn is_provider_outage(err: &Error) -> bool {
    err.code.is_outage()
}

/// Builds the error for a provider's HTTP answer with a non-2xx `status`. `retry_after` is the raw
/// `Retry-After` header (seconds or an HTTP date is not parsed here: seconds only, fractional allowed);
/// `now_ms` is unused for the seconds form and kept for symmetry with date parsing in shells.
pub fn provider_http_error(status: u16, retry_after: Option<&str>, body_excerpt: &str) -> Error {
    let code = match status {
        429 => ErrorCode::ProviderRateLimited,
        401 | 403 => ErrorCode::ProviderAuth,
        402 => ErrorCode::BudgetExhausted,
        408 => ErrorCode::ProviderTimeout,
        409 | 425 => ErrorCode::ProviderUnavailable,
        400..=499 => ErrorCode::ProviderBadRequest,
        500..=599 => ErrorCode::ProviderUnavailable,
        _ => ErrorCode::ProviderInvalidResponse,
    };
    let body = super::error::cap_chars(body_excerpt.trim(), 300);
    Error::new(code, format!("provider answered HTTP {status}{}{body}", if body.is_empty() { "" } else { ": " }))
        .with_status(status)
        .with_retry_after_ms(retry_after.and_then(parse_retry_after_seconds))
}

/// Whether a server's non-2xx HTTP answer may go away on a later attempt (5xx, 408, 429: overloaded, slow, rate
/// limited). Any other 4xx is a refusal a retry meets again (credentials, the request itself). The one rule for
/// the tools that call HTTP servers (the Worker's MCP client, a JS tool's `PropagatedToolError` with a `status`).
pub fn transient_http_status(status: u16) -> bool {
    status >= 500 || status == 408 || status == 429
}

/// Parses a `Retry-After` value given in seconds ("2", "1.5") into milliseconds. Dates are left to shells.
pub fn parse_retry_after_seconds(v: &str) -> Option<u64> {
    let secs: f64 = v.trim().parse().ok()?;
    if !(secs.is_finite() && secs >= 0.0) {
        return None;
    }
    Some((secs * 1000.0).round().min(24.0 * 3600.0 * 1000.0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transient_http_statuses_are_5xx_408_and_429_only() {
        for status in [500, 502, 503, 599, 408, 429] {
            assert!(transient_http_status(status), "{status}");
        }
        for status in [400, 401, 403, 404, 409, 422, 499, 200, 301] {
            assert!(!transient_http_status(status), "{status}");
        }
    }

    #[test]
    fn http_statuses_map_to_classes() {
        let cases = [
            (429, FailureClass::Transient, true),
            (500, FailureClass::Transient, true),
            (502, FailureClass::Transient, true),
            (503, FailureClass::Transient, true),
            (529, FailureClass::Transient, true),
            (408, FailureClass::Transient, true),
            (401, FailureClass::Terminal, false),
            (403, FailureClass::Terminal, false),
            (400, FailureClass::Terminal, false),
            (402, FailureClass::Terminal, false),
        ];
        for (status, class, outage) in cases {
            let e = provider_http_error(status, None, "");
            assert_eq!(classify(&e), class, "status {status}");
            assert_eq!(is_provider_outage(&e), outage && status != 402, "status {status}");
            assert_eq!(e.status, Some(status));
        }
    }

    #[test]
    fn retry_after_is_parsed_in_seconds() {
        let e = provider_http_error(429, Some("2"), "slow down");
        assert_eq!(e.retry_after_ms, Some(2000));
        assert_eq!(parse_retry_after_seconds("1.5"), Some(1500));
        assert_eq!(parse_retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT"), None);
        assert_eq!(parse_retry_after_seconds("-1"), None);
    }

    #[test]
    fn auth_failures_are_not_outages() {
        let e = provider_http_error(401, None, "bad key");
        assert!(!is_provider_outage(&e));
        assert!(!e.retryable);
    }
}
