//! Schedules from JS (mirrors `js/src/schedules.ts`): checked once ([`JsSchedules`]), fired once
//! (`fireSchedules`) or in the runtime's loop (`runSchedules`).

use super::agent::JsAgent;
use super::args::{millis, number_arg};
use super::calls::{link_abort, prepare, CallOptions};
use super::errors::{js_error, promise};
use crate::core::error::{Error, ErrorCode};
use crate::core::schedule::{compile_all, CompiledSchedule, Schedule};
use crate::runtime::ScheduleOutcome;
use js_sys::{Function, Promise};
use wasm_bindgen::prelude::*;

/// Schedules whose definitions were checked (`compile_all`), for [`JsAgent::fire_schedules`] and
/// [`JsAgent::run_schedules`].
#[wasm_bindgen]
pub struct JsSchedules {
    pub(super) compiled: Vec<CompiledSchedule>,
}

#[wasm_bindgen]
impl JsSchedules {
    /// Checks `schedules_json`, a JSON array of `{id, cron, input, missed?, graceMs?}`: throws
    /// `STEADFAST_SESSION_ID_INVALID` for a bad id and `STEADFAST_CONFIG_INVALID` for anything else wrong (not
    /// an array, an unknown field, a bad cron expression, an input without a user message, two schedules with
    /// one id).
    #[wasm_bindgen(constructor)]
    pub fn new(schedules_json: &str) -> std::result::Result<JsSchedules, JsValue> {
        let specs: Vec<Schedule> = serde_json::from_str(schedules_json).map_err(|e| {
            js_error(&Error::new(
                ErrorCode::ConfigInvalid,
                format!("schedules must be an array of {{id, cron, input, missed?, graceMs?}}: {e}"),
            ))
        })?;
        compile_all(specs).map(|compiled| JsSchedules { compiled }).map_err(|e| js_error(&e))
    }
}

#[wasm_bindgen]
impl JsAgent {
    /// Fires every due schedule once (`Agent::fire_schedules`; `options_json`, `on_event` and `signal` as for
    /// `send`). Resolves to the ScheduleOutcome JSON array.
    #[wasm_bindgen(js_name = fireSchedules)]
    pub fn fire_schedules(
        &self,
        schedules: &JsSchedules,
        options_json: Option<String>,
        on_event: Option<Function>,
        signal: Option<JsValue>,
    ) -> Promise {
        let agent = self.agent.clone();
        let compiled = schedules.compiled.clone();
        promise(async move {
            let p = prepare(options_json, on_event, signal, "fireSchedule options")?;
            Ok(agent.fire_schedules(&compiled, &p.opts).await)
        })
    }

    /// Fires the schedules every `every_ms` until `signal` aborts (`Agent::run_schedules`; the first tick at
    /// once, the ticks on the agent's clock; throws `STEADFAST_INVALID_INPUT` at once for an `every_ms` that is
    /// not a number >= 1); `on_tick` is called with each tick's ScheduleOutcome JSON array
    /// (a throwing `on_tick` is ignored: the facade catches). `on_event` as for `send`. Resolves to the number
    /// of ticks.
    #[wasm_bindgen(js_name = runSchedules)]
    pub fn run_schedules(
        &self,
        schedules: &JsSchedules,
        every_ms: JsValue,
        on_tick: Function,
        on_event: Option<Function>,
        signal: Option<JsValue>,
    ) -> std::result::Result<Promise, JsValue> {
        let every_ms = millis(number_arg(&every_ms), 1, "intervalMs").map_err(|e| js_error(&e))?;
        let agent = self.agent.clone();
        let compiled = schedules.compiled.clone();
        Ok(promise(async move {
            let (stop, _link) = link_abort(signal)?;
            let stop = stop.unwrap_or_default();
            let (opts, _) = CallOptions::default().send_options(on_event);
            let tick = |outcomes: &[ScheduleOutcome]| {
                // Ignored (no else): outcomes (strings, numbers, error infos) always serialise.
                if let Ok(json) = serde_json::to_string(outcomes) {
                    // Ignored: the facade's `on_tick` catches what the user's callbacks throw.
                    let _ = on_tick.call1(&JsValue::NULL, &JsValue::from_str(&json));
                }
            };
            Ok(agent.run_schedules(&compiled, every_ms as u64, &opts, &tick, &stop).await)
        }))
    }
}
