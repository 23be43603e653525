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

/// Parses a `Retry-After` value given in seconds ("2", "1.5": digits, a fraction allowed) into milliseconds,
/// rounded half up and capped at a day. Dates are left to shells. Read by hand, digit by digit: the standard
/// float parser was about 4 KB of the Worker's code for this one use.
pub fn parse_retry_after_seconds(v: &str) -> Option<u64> {
    const DAY_MS: u64 = 24 * 3600 * 1000;
    let (whole, frac) = v.trim().split_once('.').unwrap_or((v.trim(), ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.len() + frac.len() == 0 || !digits(whole) || !digits(frac) {
        return None;
    }
    // Saturating: past a day's worth the cap applies anyway.
    let secs = whole.bytes().fold(0u64, |n, b| n.saturating_mul(10).saturating_add(u64::from(b - b'0')));
    let f = frac.as_bytes();
    let digit = |i: usize| f.get(i).map_or(0, |b| u64::from(b - b'0'));
    let ms = secs.saturating_mul(1000) + digit(0) * 100 + digit(1) * 10 + digit(2) + u64::from(digit(3) >= 5);
    Some(ms.min(DAY_MS))
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
        for (text, ms) in
            [("2", Some(2000)), (" 0.0005 ", Some(1)), ("0.0004", Some(0)), (".25", Some(250)), ("7.", Some(7000))]
        {
            assert_eq!(parse_retry_after_seconds(text), ms, "{text:?}");
        }
        for bad in ["", ".", "1e3", "+2", "1.2.3", "inf", "NaN", "1,5", "١"] {
            assert_eq!(parse_retry_after_seconds(bad), None, "{bad:?}");
        }
        assert_eq!(parse_retry_after_seconds("99999999999999999999999"), Some(86_400_000), "capped, no overflow");
        assert_eq!(parse_retry_after_seconds("0000000000000000000000003"), Some(3000));
        // As the float parse it replaced, over generated values (whole seconds and up to 3 decimals: exact).
        for seed in crate::seeds::seeds(0..2_000) {
            use crate::rng::Rng;
            let rng = crate::rng::SplitMix64::new(seed);
            let (whole, frac) = (rng.next_u64() % 200_000, rng.next_u64() % 1_000);
            let text = format!("{whole}.{frac:03}");
            let float: f64 = text.parse().unwrap();
            let expected = ((float * 1000.0).round().min(86_400_000.0)) as u64;
            assert_eq!(
                parse_retry_after_seconds(&text),
                Some(expected),
                "{}",
                crate::seeds::repro(seed, "retry_after_is_parsed_in_seconds")
            );
        }
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
