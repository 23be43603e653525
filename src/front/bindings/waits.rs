//! Deliveries to tools' event waits from JS (mirrors `js/src/waits.ts`): `agent.events.deliver(token, payload)`
//! is the runtime's [`crate::runtime::Events::deliver_with`]. The wait markers a tool answers with are read in
//! [`super::tools`].

use super::agent::JsAgent;
use super::args::text_arg;
use super::calls::CallOptions;
use super::errors::promise;
use crate::core::error::Error;
use crate::front::wasm_shared::to_value;
use js_sys::{Function, Promise};
use wasm_bindgen::prelude::*;

#[wasm_bindgen]
impl JsAgent {
    /// Delivers `payload` (any JSON value, `null` included; `undefined` is refused with
    /// `STEADFAST_INVALID_INPUT`) to the event wait whose token is `token`; resolves to the
    /// [`crate::runtime::EventDelivery`] JSON (`{waitId, duplicate, run}`). The run resumes once; the same
    /// payload again is acknowledged (`duplicate: true`); the refusals are the runtime's
    /// (`STEADFAST_WAIT_NOT_FOUND` alike for a malformed, guessed or spent token; `STEADFAST_WAIT_ALREADY_RESOLVED`,
    /// `STEADFAST_PAYLOAD_TOO_LARGE`, `STEADFAST_INVALID_INPUT`). `on_event` is called with each event's JSON.
    #[wasm_bindgen(js_name = eventsDeliver)]
    pub fn events_deliver(&self, token: JsValue, payload: JsValue, on_event: Option<Function>) -> Promise {
        let agent = self.agent.clone();
        promise(async move {
            let token = text_arg(&token, "the token")?;
            if payload.is_undefined() {
                return Err(Error::invalid_input("events.deliver needs a payload (any JSON value; null is one)"));
            }
            let payload = to_value(&payload, "the event's payload")?;
            let (opts, _) = CallOptions::default().send_options(on_event);
            agent.events().deliver_with(&token, payload, opts).await
        })
    }
}
