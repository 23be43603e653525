//! What every run-starting call (`send`, `resume`, `runOnce`, a session's turn, a schedule's fire) takes
//! besides its input: the call options `{events?}`, the event callback, the abort signal, and the send document;
//! and what it answers (the result with its `events` when asked for). Mirrors the option handling of
//! `js/src/agent.ts` and `js/src/session.ts`.

use super::errors::decode_opt;
use crate::core::error::{Error, Result};
use crate::core::events::EventEnvelope;
use crate::front::contract::SendRequest;
use crate::front::wasm_shared::{absent, js_message, method, prop};
use crate::runtime::{AbortSignal, EventSink, Input, SendOptions, VecSink};
use js_sys::Function;
use serde::Serialize;
use serde_json::Value;
use std::rc::Rc;
use wasm_bindgen::closure::Closure;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

/// What the npm package asks of a run-starting call besides its input: `{events?}`.
#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct CallOptions {
    /// Return the run's events in the result (`events`).
    #[serde(default)]
    events: bool,
}

impl CallOptions {
    /// The runtime options: the event sinks are a buffer (when `events`) and the JS callback `on_event`.
    pub(super) fn send_options(&self, on_event: Option<Function>) -> (SendOptions, Option<VecSink>) {
        let sink = self.events.then(VecSink::new);
        let mut sinks: Vec<Rc<dyn EventSink>> = Vec::new();
        if let Some(s) = &sink {
            sinks.push(Rc::new(s.clone()));
        }
        if let Some(f) = on_event {
            sinks.push(Rc::new(JsEvents(f)));
        }
        let events: Option<Rc<dyn EventSink>> = match sinks.len() {
            0 => None,
            1 => sinks.pop(),
            _ => Some(Rc::new(FanOut(sinks))),
        };
        (SendOptions { events, ..SendOptions::default() }, sink)
    }
}

/// Calls a JS function with each event's JSON, as it happens (a throwing callback is ignored).
pub(super) struct JsEvents(Function);

impl EventSink for JsEvents {
    fn emit(&self, event: &EventEnvelope) {
        // Ignored (no else): an event always serialises.
        if let Ok(json) = serde_json::to_string(event) {
            // Ignored: an event callback that throws must not stop the run (documented on `onEvent`).
            let _ = self.0.call1(&JsValue::NULL, &JsValue::from_str(&json));
        }
    }
}

/// Several sinks.
pub(super) struct FanOut(Vec<Rc<dyn EventSink>>);

impl EventSink for FanOut {
    fn emit(&self, event: &EventEnvelope) {
        for s in &self.0 {
            s.emit(event);
        }
    }

    fn durable(&self, run_id: &str, position: u64) {
        for s in &self.0 {
            s.durable(run_id, position);
        }
    }
}

/// A JS `AbortSignal` linked to the run's [`AbortSignal`]; dropping it removes the listener.
pub(super) struct AbortLink {
    js: JsValue,
    listener: Closure<dyn FnMut()>,
}

impl Drop for AbortLink {
    fn drop(&mut self) {
        // Ignored (no else, and the call's result): `link_abort` checked the signal has the listener methods; a
        // listener left behind only calls `abort` on a finished run, which does nothing.
        if let Ok(remove) = prop(&self.js, "removeEventListener").dyn_into::<Function>() {
            let _ = remove.call2(&self.js, &JsValue::from_str("abort"), self.listener.as_ref().unchecked_ref());
        }
    }
}

/// The run's cancellation handle for an optional JS `AbortSignal` (aborted already, or on its `abort` event).
pub(super) fn link_abort(signal: Option<JsValue>) -> Result<(Option<AbortSignal>, Option<AbortLink>)> {
    let Some(js) = signal.filter(|s| !absent(s)) else {
        return Ok((None, None));
    };
    let abort = AbortSignal::new();
    if prop(&js, "aborted").as_bool() == Some(true) {
        abort.abort();
        return Ok((Some(abort), None));
    }
    let add = method(&js, "addEventListener", "the abort signal").map_err(|e| Error::invalid_input(e.message))?;
    let handle = abort.clone();
    let listener = Closure::<dyn FnMut()>::new(move || handle.abort());
    add.call2(&js, &JsValue::from_str("abort"), listener.as_ref().unchecked_ref())
        .map_err(|e| Error::invalid_input(format!("cannot listen to the abort signal: {}", js_message(&e))))?;
    Ok((Some(abort), Some(AbortLink { js, listener })))
}

/// What every run-starting call (`send`, `resume`, `runOnce`) needs: its options decoded, the event sink and the
/// abort link (keep the link alive for the whole call).
pub(super) struct Prepared {
    pub(super) opts: SendOptions,
    pub(super) sink: Option<VecSink>,
    _link: Option<AbortLink>,
}

pub(super) fn prepare(
    options_json: Option<String>,
    on_event: Option<Function>,
    signal: Option<JsValue>,
    what: &str,
) -> Result<Prepared> {
    let (abort, link) = link_abort(signal)?;
    let opts: CallOptions = decode_opt(options_json, what)?;
    let (mut send_opts, sink) = opts.send_options(on_event);
    send_opts.abort = abort;
    Ok(Prepared { opts: send_opts, sink, _link: link })
}

/// A send document ([`SendRequest`]: `{input, businessState?, queue?, interrupt?}`): the runtime input, with the
/// rest put into `opts`.
pub(super) fn request_of(request_json: &str, opts: &mut SendOptions) -> Result<Input> {
    SendRequest::from_json(request_json)?.into_options(opts)
}

/// A result as JSON, with `events` added when they were asked for.
pub(super) fn with_events<T: Serialize>(result: &T, sink: Option<VecSink>) -> Result<Value> {
    let mut v = serde_json::to_value(result).map_err(|e| Error::internal(format!("cannot encode: {e}")))?;
    if let (Some(sink), Some(obj)) = (sink, v.as_object_mut()) {
        let events = serde_json::to_value(sink.events()).map_err(|e| Error::internal(format!("cannot encode: {e}")))?;
        obj.insert("events".into(), events);
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::error::ErrorCode;
    use serde_json::json;

    #[test]
    fn call_options_ask_for_events_or_not_and_refuse_anything_else() {
        let none: CallOptions = decode_opt(None, "send options").unwrap();
        assert!(!none.events);
        let on: CallOptions = decode_opt(Some(r#"{"events": true}"#.into()), "send options").unwrap();
        assert!(on.events);
        for bad in [r#"{"event": true}"#, r#"{"events": "yes"}"#, r#"{"events": true, "signal": {}}"#] {
            let Err(e) = decode_opt::<CallOptions>(Some(bad.into()), "resume options") else { panic!("{bad}") };
            assert_eq!(e.code, ErrorCode::InvalidInput, "{bad}");
            assert!(e.message.starts_with("invalid resume options: "), "{bad}: {e}");
        }
    }

    #[test]
    fn events_are_buffered_only_when_asked_for() {
        let (opts, sink) = CallOptions { events: true }.send_options(None);
        assert!(opts.events.is_some() && sink.is_some());
        let (opts, sink) = CallOptions { events: false }.send_options(None);
        assert!(opts.events.is_none() && sink.is_none());
    }

    #[test]
    fn a_send_document_gives_the_input_and_puts_the_business_state_into_the_options() {
        let mut opts = SendOptions::default();
        let input = request_of(r#"{"input": "hi", "businessState": {"order": 7}}"#, &mut opts).unwrap();
        assert_eq!(input.0.len(), 1);
        assert_eq!(opts.business_state, Some(json!({"order": 7})));
        let mut opts = SendOptions::default();
        request_of(r#"{"input": [{"role": "user", "content": "x"}]}"#, &mut opts).unwrap();
        assert_eq!(opts.business_state, None);
        // No `input` is no new input (a resume-like send).
        assert_eq!(request_of("{}", &mut SendOptions::default()).unwrap().0.len(), 0);
        for bad in ["", "not json", r#"["hi"]"#, r#"{"input": 5}"#, r#"{"input": [{"role": "tool", "content": "x"}]}"#]
        {
            let e = request_of(bad, &mut SendOptions::default()).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidInput, "{bad}: {e}");
        }
    }

    #[test]
    fn a_result_gains_its_events_only_when_they_were_asked_for() {
        let result = json!({"status": "completed"});
        assert_eq!(with_events(&result, None).unwrap(), result);
        let sink = VecSink::new();
        let v = with_events(&result, Some(sink)).unwrap();
        assert_eq!(v, json!({"status": "completed", "events": []}));
        // Not an object (`null` for nothing to resume): nothing is added.
        assert_eq!(with_events(&Value::Null, Some(VecSink::new())).unwrap(), Value::Null);
    }
}
