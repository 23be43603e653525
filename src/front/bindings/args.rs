//! The arguments JS hands the exports, checked: strings, numbers and limits as JS gave them
//! (wasm-bindgen's own `String` and `f64` arguments would trap or throw uncoded errors on a wrong value), each
//! refusal a `STEADFAST_INVALID_INPUT` naming the argument. The number rules are pure functions over what the
//! value turned out to be, tested natively.

use crate::core::error::{Error, ErrorCode, Result};
use crate::core::wire::json_text;
use crate::front::wasm_shared::absent;
use serde_json::Value;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

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

/// The first of `keys` that is not one of `known`, as a `STEADFAST_CONFIG_INVALID` naming it, `what` the object
/// (`"tool 'refund'"`, `"the agent options"`) and the keys it takes: a misspelt option must not silently turn
/// a feature off. `internal` keys (the ones the package's own JS adds) are accepted and not named.
pub(super) fn unknown_key(
    keys: impl IntoIterator<Item = String>,
    known: &[&str],
    internal: &[&str],
    what: &str,
) -> Result<()> {
    match keys.into_iter().find(|k| !known.contains(&k.as_str()) && !internal.contains(&k.as_str())) {
        None => Ok(()),
        Some(k) => Err(Error::new(
            ErrorCode::ConfigInvalid,
            format!("{what}: unknown key {} (it takes {})", json_text(&Value::String(k)), known.join(", ")),
        )),
    }
}

/// [`unknown_key`] over a JS object's own enumerable string keys (not an object: nothing to check here).
pub(super) fn known_keys(obj: &JsValue, known: &[&str], internal: &[&str], what: &str) -> Result<()> {
    if !obj.is_object() {
        return Ok(());
    }
    let keys = js_sys::Object::keys(obj.unchecked_ref::<js_sys::Object>());
    unknown_key(keys.iter().filter_map(|k| k.as_string()), known, internal, what)
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn an_unknown_key_is_a_config_error_naming_it_the_object_and_the_known_keys() {
        let known = ["name", "execute"];
        let keys = |ks: &[&str]| ks.iter().map(|k| k.to_string()).collect::<Vec<_>>();
        assert!(unknown_key(keys(&[]), &known, &[], "tool 'a'").is_ok());
        assert!(unknown_key(keys(&["execute", "name", "checkArgs"]), &known, &["checkArgs"], "tool 'a'").is_ok());
        let e = unknown_key(keys(&["name", "exectue", "inptu"]), &known, &["checkArgs"], "tool 'a'").unwrap_err();
        assert_eq!(e.code, ErrorCode::ConfigInvalid);
        assert_eq!(e.message, "tool 'a': unknown key \"exectue\" (it takes name, execute)");
        // An odd key is quoted as JSON.
        let e = unknown_key(keys(&["a\"b"]), &known, &[], "x").unwrap_err();
        assert!(e.message.starts_with("x: unknown key \"a\\\"b\" "), "{}", e.message);
    }
}
