//! The recovery sweep from JS (mirrors `js/src/recovery.ts`): one tick (`sweep`), and the `recover` loop with
//! its listener.

use super::agent::JsAgent;
use super::args::{millis, number_arg};
use super::calls::link_abort;
use super::errors::{decode_known, encode, js_error, promise};
use crate::core::error::{Error, ErrorCode, Result};
use crate::core::sweep::SweepOptions;
use crate::front::wasm_shared::{absent, js_message, prop};
use crate::runtime::{NoListener, RunResult, SweepListener};
use crate::store::PendingRun;
use js_sys::{Array, Function, Promise};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

/// The recovery sweep's callbacks as a JS object, each optional: `onRecovered(runId, resultJson)`,
/// `onQuarantined(pendingRunJson)`, `onOutage(active)`, `onError(error, runId | undefined)` (`error` as
/// [`js_error`] makes it). A callback that throws is an error the sweep passes to `onError` and counts
/// (`STEADFAST_HOOK_FAILED`, "<callback> threw: <message>"); it never stops the loop.
pub(super) struct JsListener(JsValue);

impl JsListener {
    fn call(&self, name: &str, args: &[JsValue]) -> Result<()> {
        let Ok(f) = prop(&self.0, name).dyn_into::<Function>() else { return Ok(()) };
        let args: Array = args.iter().collect();
        f.apply(&self.0, &args)
            .map(|_| ())
            .map_err(|e| Error::new(ErrorCode::HookFailed, format!("{name} threw: {}", js_message(&e))))
    }
}

impl SweepListener for JsListener {
    fn on_recovered(&self, run_id: &str, result: &RunResult) -> Result<()> {
        self.call("onRecovered", &[JsValue::from_str(run_id), JsValue::from_str(&encode(result)?)])
    }
    fn on_quarantined(&self, run: &PendingRun) -> Result<()> {
        self.call("onQuarantined", &[JsValue::from_str(&encode(run)?)])
    }
    fn on_outage(&self, active: bool) -> Result<()> {
        self.call("onOutage", &[JsValue::from_bool(active)])
    }
    fn on_error(&self, error: &Error, run_id: Option<&str>) -> Result<()> {
        let run = run_id.map_or(JsValue::UNDEFINED, JsValue::from_str);
        self.call("onError", &[js_error(error), run])
    }
}

#[wasm_bindgen]
impl JsAgent {
    /// One recovery sweep tick (`options_json`: SweepOptions, optional); resolves to the SweepReport JSON.
    pub fn sweep(&self, options_json: Option<String>) -> Promise {
        let agent = self.agent.clone();
        promise(async move {
            let opts: SweepOptions = decode_known(options_json, "sweep options")?;
            agent.sweep(&opts, &NoListener).await
        })
    }

    /// Runs sweep ticks every `every_ms` (default: the options' `intervalMs`) until `signal` aborts
    /// ([`Agent::recover`]), reporting to `listener` (see [`JsListener`]); resolves to the number of ticks.
    pub fn recover(
        &self,
        options_json: Option<String>,
        every_ms: JsValue,
        listener: JsValue,
        signal: Option<JsValue>,
    ) -> Promise {
        let agent = self.agent.clone();
        promise(async move {
            let opts: SweepOptions = decode_known(options_json, "recover options")?;
            let every =
                if absent(&every_ms) { opts.interval_ms } else { millis(number_arg(&every_ms), 0, "everyMs")? as u64 };
            let (stop, _link) = link_abort(signal)?;
            let stop = stop.unwrap_or_default();
            Ok(agent.recover(&opts, every, &JsListener(listener), &stop).await)
        })
    }
}
