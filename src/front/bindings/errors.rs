//! The boundary's two conventions (mirrors `js/src/errors.ts`): values cross as JSON text (which the platform
//! notes measured at GB/s), and a crate error becomes a JS `Error` carrying its fields (`code`, `retryable`,
//! `runId`, `approvalId`, `status`, `retryAfterMs`, `details`), which the facade wraps as a `SteadfastError`.

use super::args::unknown_key;
use crate::core::error::{Error, Result};
use crate::front::wasm_shared::{from_value, set};
use js_sys::Promise;
use serde::Serialize;
use serde_json::Value;
use std::future::Future;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::future_to_promise;

pub(super) fn encode<T: Serialize>(v: &T) -> Result<String> {
    serde_json::to_string(v).map_err(|e| Error::internal(format!("cannot encode: {e}")))
}

/// Parses an optional JSON argument (`None`, empty or `null` give the default).
pub(super) fn decode_opt<T: serde::de::DeserializeOwned + Default>(json: Option<String>, what: &str) -> Result<T> {
    match json.as_deref().map(str::trim) {
        None | Some("") | Some("null") | Some("undefined") => Ok(T::default()),
        Some(s) => serde_json::from_str(s).map_err(|e| Error::invalid_input(format!("invalid {what}: {e}"))),
    }
}

/// [`decode_opt`] for an options object whose every key must be known: a key `T` does not have (at the top, or
/// in a nested object whose default has fields, as `retry` of the agent options) is refused with
/// `STEADFAST_CONFIG_INVALID` naming it and `what` before the value is read (a misspelt option must not
/// silently turn a feature off). The keys are those of `T`'s default as JSON.
pub(super) fn decode_known<T>(json: Option<String>, what: &str) -> Result<T>
where
    T: serde::de::DeserializeOwned + Serialize + Default,
{
    match json.as_deref().map(str::trim) {
        None | Some("") | Some("null") | Some("undefined") => Ok(T::default()),
        Some(s) => {
            let v: Value = serde_json::from_str(s).map_err(|e| Error::invalid_input(format!("invalid {what}: {e}")))?;
            known_fields::<T>(&v, what)?;
            serde_json::from_value(v).map_err(|e| Error::invalid_input(format!("invalid {what}: {e}")))
        }
    }
}

/// Refuses a key of `given` that `T`'s default as JSON does not have (see [`decode_known`]).
pub(super) fn known_fields<T: Serialize + Default>(given: &Value, what: &str) -> Result<()> {
    let default = serde_json::to_value(T::default()).map_err(|e| Error::internal(format!("cannot encode: {e}")))?;
    known_in(given, &default, what)
}

fn known_in(given: &Value, default: &Value, what: &str) -> Result<()> {
    let (Value::Object(given), Value::Object(fields)) = (given, default) else { return Ok(()) };
    if fields.is_empty() {
        // A default that writes no field (every one skipped when absent) names no keys: its type checks them.
        return Ok(());
    }
    let known: Vec<&str> = fields.keys().map(String::as_str).collect();
    unknown_key(given.keys().cloned(), &known, &[], what)?;
    for (key, v) in given {
        if let Some(d) = fields.get(key) {
            known_in(v, d, &format!("{what}: {key}"))?;
        }
    }
    Ok(())
}

/// The JS `Error` thrown for a crate error: `message`, and the fields `code`, `retryable`, `runId`,
/// `approvalId`, `status`, `retryAfterMs`, `details`.
pub(super) fn js_error(e: &Error) -> JsValue {
    let err: JsValue = js_sys::Error::new(&e.message).into();
    set(&err, "name", &JsValue::from_str("SteadfastError"));
    set(&err, "code", &JsValue::from_str(e.code.as_str()));
    set(&err, "retryable", &JsValue::from_bool(e.retryable));
    if let Some(r) = &e.run_id {
        set(&err, "runId", &JsValue::from_str(r));
    }
    if let Some(a) = &e.approval_id {
        set(&err, "approvalId", &JsValue::from_str(a));
    }
    if let Some(s) = e.status {
        set(&err, "status", &JsValue::from_f64(f64::from(s)));
    }
    if let Some(ms) = e.retry_after_ms {
        set(&err, "retryAfterMs", &JsValue::from_f64(ms as f64));
    }
    if let Some(d) = &e.details {
        set(&err, "details", &from_value(d));
    }
    err
}

/// Runs a future to a promise of its JSON result (or a rejection with [`js_error`]).
pub(super) fn promise<T: Serialize>(fut: impl Future<Output = Result<T>> + 'static) -> Promise {
    future_to_promise(async move {
        match fut.await.and_then(|v| encode(&v)) {
            Ok(s) => Ok(JsValue::from_str(&s)),
            Err(e) => Err(js_error(&e)),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::error::ErrorCode;
    use crate::core::sweep::SweepOptions;

    #[test]
    fn an_absent_optional_argument_is_the_default_and_a_bad_one_a_coded_error_naming_it() {
        for absent in [None, Some(""), Some("  "), Some("null"), Some("undefined"), Some(" null ")] {
            let got: SweepOptions = decode_opt(absent.map(String::from), "sweep options").unwrap();
            assert_eq!(got, SweepOptions::default(), "{absent:?}");
        }
        let got: SweepOptions = decode_opt(Some(r#"{"maxRuns": 3}"#.into()), "sweep options").unwrap();
        assert_eq!(got.max_runs, 3);
        for bad in ["{", r#"{"maxRuns": "x"}"#, r#"{"maxRuns": -1}"#, "7", r#""x""#] {
            let e = decode_opt::<SweepOptions>(Some(bad.into()), "sweep options").unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidInput, "{bad}");
            assert!(e.message.starts_with("invalid sweep options: "), "{bad}: {e}");
        }
    }

    #[test]
    fn an_options_object_with_a_key_its_type_does_not_have_is_a_config_error_naming_it() {
        let got: SweepOptions = decode_known(Some(r#"{"maxRuns": 3}"#.into()), "sweep options").unwrap();
        assert_eq!(got.max_runs, 3);
        assert_eq!(decode_known::<SweepOptions>(None, "sweep options").unwrap(), SweepOptions::default());
        let e =
            decode_known::<SweepOptions>(Some(r#"{"maxRuns": 3, "maxRun": 4}"#.into()), "sweep options").unwrap_err();
        assert_eq!(e.code, ErrorCode::ConfigInvalid);
        assert!(e.message.starts_with("sweep options: unknown key \"maxRun\" (it takes "), "{e}");
        assert!(e.message.contains("maxRuns"), "{e}");
        // A bad value of a known key is still the type's refusal.
        let e = decode_known::<SweepOptions>(Some(r#"{"maxRuns": "x"}"#.into()), "sweep options").unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidInput);
        // Nested objects are checked where the default has fields; one without (every field skipped) is not.
        let e = decode_known::<crate::runtime::AgentOptions>(Some(r#"{"retry": {"maxAttemps": 2}}"#.into()), "o")
            .unwrap_err();
        assert!(e.message.starts_with("o: retry: unknown key \"maxAttemps\""), "{e}");
        let fork: crate::runtime::ForkOptions =
            decode_known(Some(r#"{"fromStep": 1, "patch": {"appendInput": "x"}}"#.into()), "fork options").unwrap();
        assert_eq!(fork.patch.append_input.as_deref(), Some("x"));
        let e = decode_known::<crate::runtime::ForkOptions>(
            Some(r#"{"fromStep": 1, "patch": {"appendInputs": "x"}}"#.into()),
            "fork options",
        )
        .unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidInput, "the patch's own type refuses it: {e}");
        assert!(e.message.contains("appendInputs"), "{e}");
    }

    #[test]
    fn values_cross_as_their_json_text() {
        assert_eq!(encode(&serde_json::json!({"a": [1, "b"]})).unwrap(), r#"{"a":[1,"b"]}"#);
        assert_eq!(encode(&Option::<u8>::None).unwrap(), "null");
    }
}
