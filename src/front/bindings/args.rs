//! The arguments JS hands the exports, checked: strings, numbers and limits as JS gave them
//! (wasm-bindgen's own `String` and `f64` arguments would trap or throw uncoded errors on a wrong value), each
//! refusal a `STEADFAST_INVALID_INPUT` naming the argument. The number rules are pure functions over what the
//! value turned out to be, tested natively.

use crate::core::error::{Error, Result};
use crate::front::wasm_shared::absent;
use wasm_bindgen::prelude::*;

/// A string a caller chose (an id, a note), as JS handed it. wasm-bindgen's own `String` argument reads any JS
/// value as a string's bytes (a number or an object traps, or worse), so such arguments arrive as `JsValue` and
/// are checked here: `STEADFAST_INVALID_INPUT` naming the argument when it is not a string.
pub(super) fn text_arg(v: &JsValue, what: &str) -> Result<String> {
    v.as_string().ok_or_else(|| Error::invalid_input(format!("{what} must be a string, not {}", js_kind(v))))
}

/// What a JS value is, for an error message: its `typeof`, or `null`.
pub(super) fn js_kind(v: &JsValue) -> String {
    if v.is_null() {
        "null".into()
    } else {
        v.js_typeof().as_string().unwrap_or_default()
    }
}

/// [`text_arg`] for an optional one (`undefined` or `null`: none).
pub(super) fn opt_text_arg(v: &JsValue, what: &str) -> Result<Option<String>> {
    if absent(v) {
        Ok(None)
    } else {
        text_arg(v, what).map(Some)
    }
}

/// A number a caller chose, as JS handed it (`None`: not a number; wasm-bindgen's own `f64` argument would
/// throw an uncoded `TypeError` for a symbol or a BigInt).
pub(super) fn number_arg(v: &JsValue) -> std::result::Result<f64, String> {
    v.as_f64().ok_or_else(|| js_kind(v))
}

/// A history limit from JS: absent is every turn; otherwise a whole number >= 0.
pub(super) fn limit_of(limit: &JsValue) -> Result<usize> {
    if absent(limit) {
        return Ok(usize::MAX);
    }
    whole_number(number_arg(limit), "limit")
}

/// A whole number >= 0 from what [`number_arg`] read (`what` names the argument in the refusal).
pub(super) fn whole_number(n: std::result::Result<f64, String>, what: &str) -> Result<usize> {
    match n {
        Ok(n) if n.is_finite() && n >= 0.0 && n.fract() == 0.0 => Ok(n as usize),
        Ok(n) => Err(Error::invalid_input(format!("{what} must be a whole number >= 0, not {n}"))),
        Err(kind) => Err(Error::invalid_input(format!("{what} must be a whole number >= 0, not {kind}"))),
    }
}

/// A finite number of milliseconds >= `min` from what [`number_arg`] read (`what` names the argument in the
/// refusal). A fraction is kept (the caller rounds down).
pub(super) fn millis(n: std::result::Result<f64, String>, min: u32, what: &str) -> Result<f64> {
    match n {
        Ok(ms) if ms.is_finite() && ms >= f64::from(min) => Ok(ms),
        Ok(ms) => Err(Error::invalid_input(format!("{what} must be a number >= {min}, not {ms}"))),
        Err(kind) => Err(Error::invalid_input(format!("{what} must be a number >= {min}, not {kind}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::error::ErrorCode;

    #[test]
    fn a_limit_is_a_whole_number_at_least_zero_and_anything_else_a_coded_error_naming_it() {
        for (n, want) in [(0.0, 0usize), (1.0, 1), (50.0, 50), (1e9, 1_000_000_000)] {
            assert_eq!(whole_number(Ok(n), "limit").unwrap(), want);
        }
        for (n, shown) in [
            (Ok(-1.0), "-1"),
            (Ok(1.5), "1.5"),
            (Ok(f64::NAN), "NaN"),
            (Ok(f64::INFINITY), "inf"),
            (Err("string".to_string()), "string"),
            (Err("null".to_string()), "null"),
        ] {
            let e = whole_number(n, "limit").unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidInput);
            assert_eq!(e.message, format!("limit must be a whole number >= 0, not {shown}"));
        }
    }

    #[test]
    fn milliseconds_are_finite_numbers_at_least_the_minimum_and_anything_else_a_coded_error_naming_them() {
        assert_eq!(millis(Ok(0.0), 0, "everyMs").unwrap(), 0.0);
        assert_eq!(millis(Ok(1.0), 1, "intervalMs").unwrap(), 1.0);
        assert_eq!(millis(Ok(2.5), 1, "intervalMs").unwrap(), 2.5);
        for (n, min, what, shown) in [
            (Ok(0.5), 1, "intervalMs", "0.5"),
            (Ok(-1.0), 0, "everyMs", "-1"),
            (Ok(f64::NAN), 1, "intervalMs", "NaN"),
            (Ok(f64::INFINITY), 0, "everyMs", "inf"),
            (Err("bigint".to_string()), 1, "intervalMs", "bigint"),
        ] {
            let e = millis(n, min, what).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidInput);
            assert_eq!(e.message, format!("{what} must be a number >= {min}, not {shown}"));
        }
    }
}
