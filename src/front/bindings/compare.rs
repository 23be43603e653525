//! `compareTrajectories` without a store (mirrors `js/src/compare.ts`).

use super::errors::{encode, js_error};
use crate::core::error::Error;
use crate::core::trajectory::compare_json;
use serde_json::Value;
use wasm_bindgen::prelude::*;

/// Compares two runs, each a checkpoint or a transcript (JSON), without a store (synchronous): the Comparison
/// JSON. Throws `STEADFAST_INVALID_INPUT` for anything else.
#[wasm_bindgen(js_name = compareTrajectories)]
pub fn compare_trajectories(a_json: &str, b_json: &str) -> std::result::Result<String, JsValue> {
    let parse = |s: &str, which: &str| {
        serde_json::from_str::<Value>(s)
            .map_err(|e| Error::invalid_input(format!("compareTrajectories: run {which} is not JSON: {e}")))
    };
    parse(a_json, "a")
        .and_then(|a| Ok((a, parse(b_json, "b")?)))
        .and_then(|(a, b)| compare_json(&a, &b))
        .and_then(|c| encode(&c))
        .map_err(|e| js_error(&e))
}
