//! Time from JS (mirrors `js/src/clock.ts`): the agent option `clock` and `JsStore.kv`'s third argument,
//! `{now(): number, sleep(ms): Promise<void>, cancel?(sleep)}`, read instead of `Date.now()`/`setTimeout`.

use crate::core::error::{Error, ErrorCode, Result};
use crate::front::wasm_shared::{absent, method, prop, settle, JsClock, JsSleep};
use crate::runtime::{Clock, Sleep};
use async_trait::async_trait;
use js_sys::Function;
use std::cell::Cell;
use std::rc::Rc;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

/// A JS clock `{now(): number, sleep(ms): Promise<void>, cancel?(sleep)}` (the package's `testClock()`, or the
/// caller's own) as the runtime's [`Clock`] and [`Sleep`]. A `now` that throws or answers something that is not
/// a finite, non-negative number later keeps the last good reading; a `sleep` that throws or rejects falls back
/// to the platform timer (never a sleep that returns at once, which would spin a waiting loop). A sleep the
/// runtime gives up on (a race it lost) is handed back to `cancel` with the promise `sleep` returned, so a
/// test clock does not move time for a timer nobody waits on.
#[derive(Clone)]
pub(super) struct JsObjClock {
    obj: JsValue,
    now: Function,
    sleep: Function,
    cancel: Option<Function>,
    last: Rc<Cell<u64>>,
}

impl JsObjClock {
    /// Reads `{now, sleep, cancel?}` (`what` names the option); `now` must answer a reading at once.
    fn from_js(obj: JsValue, what: &str) -> Result<JsObjClock> {
        let now = method(&obj, "now", what)?;
        let sleep = method(&obj, "sleep", what)?;
        // Ignored (`.ok()`): a clock without `cancel` lets abandoned sleeps run out.
        let cancel = prop(&obj, "cancel").dyn_into::<Function>().ok();
        let first = now.call0(&obj).ok().and_then(|v| reading(&v)).ok_or_else(|| {
            Error::new(
                ErrorCode::ConfigInvalid,
                format!("{what}: now() must return milliseconds (a finite number >= 0)"),
            )
        })?;
        Ok(JsObjClock { obj, now, sleep, cancel, last: Rc::new(Cell::new(first)) })
    }
}

/// Hands a sleep that was not waited out back to the clock's `cancel` when dropped.
pub(super) struct CancelOnDrop<'a> {
    clock: &'a JsObjClock,
    token: Option<JsValue>,
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        if let (Some(token), Some(cancel)) = (self.token.take(), &self.clock.cancel) {
            // Ignored: a cancel that throws only leaves the sleep to run out.
            let _ = cancel.call1(&self.clock.obj, &token);
        }
    }
}

/// A clock reading: a finite, non-negative number of milliseconds.
pub(super) fn reading(v: &JsValue) -> Option<u64> {
    v.as_f64().filter(|n| n.is_finite() && *n >= 0.0).map(|n| n as u64)
}

impl Clock for JsObjClock {
    fn now_ms(&self) -> u64 {
        if let Some(now) = self.now.call0(&self.obj).ok().and_then(|v| reading(&v)) {
            self.last.set(now);
        }
        self.last.get()
    }
}

#[async_trait(?Send)]
impl Sleep for JsObjClock {
    async fn sleep(&self, ms: u64) {
        let Ok(pending) = self.sleep.call1(&self.obj, &JsValue::from_f64(ms as f64)) else {
            return JsSleep.sleep(ms).await;
        };
        let mut guard = CancelOnDrop { clock: self, token: Some(pending.clone()) };
        let waited = settle(pending).await;
        guard.token = None;
        if waited.is_err() {
            JsSleep.sleep(ms).await;
        }
    }
}

/// The clock of an optional JS `clock` option: the given one, else the platform's.
pub(super) fn clock_of(js: &JsValue, what: &str) -> Result<(Rc<dyn Clock>, Rc<dyn Sleep>)> {
    if absent(js) {
        return Ok((Rc::new(JsClock), Rc::new(JsSleep)));
    }
    let c = JsObjClock::from_js(js.clone(), what)?;
    Ok((Rc::new(c.clone()), Rc::new(c)))
}
