//! What both wasm shells need, once (compiled with the cargo feature `worker` or `js`): the JS helpers, the
//! platform's clock (`Date.now()`), timer (`setTimeout`, cleared when the sleep is dropped) and randomness,
//! and [`WorkersKv`], the [`KvBackend`] over a Workers KV namespace object with its error mapping. The Worker
//! shell (`src/front/worker/`) and the npm package's bindings (`src/front/bindings/`) both use these; translation only, no
//! decisions.

use crate::core::error::{Error, ErrorCode, Result};
use crate::core::wire::json_text;
use crate::runtime::{Clock, Sleep, SplitMix64};
use crate::store::kv::{check_bulk, check_key, check_put, kv_error, KvBackend, ListKey, ListPage, PutOptions};
use async_trait::async_trait;
use js_sys::{Array, Function, Object, Promise, Reflect, JSON};
use serde_json::Value;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;

// ---------------------------------------------------------------------------------------------------------
// JS helpers.

/// `obj[key]` (`undefined` when `obj` is not an object or a function).
pub(crate) fn prop(obj: &JsValue, key: &str) -> JsValue {
    if !obj.is_object() && !obj.is_function() {
        return JsValue::UNDEFINED;
    }
    // Ignored: only a throwing getter or proxy fails here; callers treat `undefined` as missing and say so.
    Reflect::get(obj, &JsValue::from_str(key)).unwrap_or(JsValue::UNDEFINED)
}

/// `obj[key] = value`.
pub(crate) fn set(obj: &JsValue, key: &str, value: &JsValue) {
    // Deliberately ignored: setting a property fails only on a frozen object or a throwing proxy setter, and
    // every object this crate sets properties on is one it created.
    let _ = Reflect::set(obj, &JsValue::from_str(key), value);
}

/// `undefined` or `null`.
pub(crate) fn absent(v: &JsValue) -> bool {
    v.is_undefined() || v.is_null()
}

/// The message of a thrown JS value.
pub(crate) fn js_message(e: &JsValue) -> String {
    if let Some(s) = e.as_string() {
        return s;
    }
    if let Some(s) = prop(e, "message").as_string() {
        return s;
    }
    // Ignored: this already describes a failure; a value JSON cannot write gets a generic message.
    JSON::stringify(e).ok().and_then(|s| s.as_string()).unwrap_or_else(|| "unknown JS error".into())
}

/// A JS value as JSON (`undefined` is `null`).
pub(crate) fn to_value(v: &JsValue, what: &str) -> Result<Value> {
    if v.is_undefined() {
        return Ok(Value::Null);
    }
    let text = JSON::stringify(v)
        .ok()
        .and_then(|s| s.as_string())
        .ok_or_else(|| Error::invalid_input(format!("{what} cannot be serialised as JSON")))?;
    serde_json::from_str(&text).map_err(|e| Error::invalid_input(format!("{what} is not valid JSON: {e}")))
}

/// A JSON value as a JS value.
pub(crate) fn from_value(v: &Value) -> JsValue {
    // Ignored: JSON that serde_json wrote always parses.
    JSON::parse(&json_text(v)).unwrap_or(JsValue::NULL)
}

/// Awaits a value that may or may not be a promise.
pub(crate) async fn settle(v: JsValue) -> std::result::Result<JsValue, JsValue> {
    JsFuture::from(Promise::resolve(&v)).await
}

/// Calls `f` with `this` and awaits the result; a synchronous throw counts as a rejection.
pub(crate) async fn call_async(f: &Function, this: &JsValue, args: &Array) -> std::result::Result<JsValue, JsValue> {
    settle(f.apply(this, args)?).await
}

/// `obj[name]` as a function (`STEADFAST_CONFIG_INVALID` naming `what` when it is not one).
pub(crate) fn method(obj: &JsValue, name: &str, what: &str) -> Result<Function> {
    prop(obj, name)
        .dyn_into::<Function>()
        .map_err(|_| Error::new(ErrorCode::ConfigInvalid, format!("{what} has no function `{name}`")))
}

// ---------------------------------------------------------------------------------------------------------
// Platform: clock, timer, randomness.

/// `Date.now()`.
pub struct JsClock;

impl Clock for JsClock {
    fn now_ms(&self) -> u64 {
        js_sys::Date::now() as u64
    }
}

/// A `setTimeout` timer; dropping the sleep (a race it lost) clears the timer, so a finished run leaves no
/// timer behind to keep a JS event loop alive. A sleep costs one `setTimeout` (and one `clearTimeout` when
/// dropped early): the functions are looked up once, one callback (made once) wakes the sleep by its slot, and
/// no promise or closure is made per sleep.
pub struct JsSleep;

/// The sleeps waiting on a `setTimeout`, by slot (the timer's extra argument).
#[derive(Default)]
struct Timers {
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// `(global, setTimeout, clearTimeout, the callback)`, once looked up; `None` inside: no `setTimeout`.
    host: Option<Option<(JsValue, Function, Function, Function)>>,
}

enum Slot {
    Free,
    Waiting(Option<std::task::Waker>),
    Fired,
}

thread_local! {
    static TIMERS: std::cell::RefCell<Timers> = std::cell::RefCell::new(Timers::default());
}

impl Timers {
    /// The host's timer functions and the callback (looked up and made on first use).
    fn host(&mut self) -> Option<(JsValue, Function, Function, Function)> {
        self.host
            .get_or_insert_with(|| {
                let global = js_sys::global();
                let set = prop(&global, "setTimeout").dyn_into::<Function>().ok()?;
                let clear = prop(&global, "clearTimeout").dyn_into::<Function>().ok()?;
                let fired = Closure::<dyn FnMut(u32)>::new(|slot: u32| {
                    let waker = TIMERS.with(|t| {
                        let mut t = t.borrow_mut();
                        match t.slots.get_mut(slot as usize) {
                            Some(s @ Slot::Waiting(_)) => match std::mem::replace(s, Slot::Fired) {
                                Slot::Waiting(w) => w,
                                _ => None,
                            },
                            _ => None,
                        }
                    });
                    if let Some(w) = waker {
                        w.wake();
                    }
                });
                // The callback lives as long as the module (one for every sleep).
                let callback = fired.into_js_value().unchecked_into::<Function>();
                Some((global.into(), set, clear, callback))
            })
            .clone()
    }

    fn take_slot(&mut self, waker: std::task::Waker) -> u32 {
        match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = Slot::Waiting(Some(waker));
                i
            }
            None => {
                self.slots.push(Slot::Waiting(Some(waker)));
                (self.slots.len() - 1) as u32
            }
        }
    }

    fn release(&mut self, slot: u32) {
        self.slots[slot as usize] = Slot::Free;
        self.free.push(slot);
    }
}

/// One `setTimeout` of `ms`, armed on first poll.
struct Timer {
    ms: u64,
    /// `(slot, timer id)` once armed.
    armed: Option<(u32, JsValue)>,
    done: bool,
}

impl std::future::Future for Timer {
    type Output = ();

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        use std::task::Poll;
        if self.done {
            return Poll::Ready(());
        }
        let (ms, armed) = (self.ms, self.armed.as_ref().map(|(slot, _)| *slot));
        let (ready, newly) = TIMERS.with(|t| {
            let mut t = t.borrow_mut();
            let Some(slot) = armed else {
                // Ignored (`else { return (true, None) }`): every JS host this crate runs in (Workers, Node) has
                // `setTimeout`.
                let Some((global, set, _, callback)) = t.host() else { return (true, None) };
                let slot = t.take_slot(cx.waker().clone());
                let args = Array::of3(&callback, &JsValue::from_f64(ms as f64), &JsValue::from(slot));
                // Ignored: `setTimeout` with a function and a number does not throw.
                let id = set.apply(&global, &args).unwrap_or(JsValue::UNDEFINED);
                return (false, Some((slot, id)));
            };
            if let Slot::Waiting(w) = &mut t.slots[slot as usize] {
                if !w.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    *w = Some(cx.waker().clone());
                }
                return (false, None);
            }
            t.release(slot);
            (true, None)
        });
        if newly.is_some() {
            self.armed = newly;
        }
        if ready {
            self.armed = None;
            self.done = true;
            return Poll::Ready(());
        }
        Poll::Pending
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        let Some((slot, id)) = self.armed.take() else { return };
        TIMERS.with(|t| {
            let mut t = t.borrow_mut();
            if matches!(t.slots.get(slot as usize), Some(Slot::Waiting(_))) {
                if let Some((global, _, clear, _)) = t.host() {
                    // Deliberately ignored: clearTimeout does not throw for an id it does not know.
                    let _ = clear.call1(&global, &id);
                }
            }
            t.release(slot);
        });
    }
}

#[async_trait(?Send)]
impl Sleep for JsSleep {
    async fn sleep(&self, ms: u64) {
        Timer { ms, armed: None, done: false }.await
    }
}

/// A [`SplitMix64`] seeded from `Math.random()` and the clock (ids and jitter, not secrets). Build it inside a
/// handler: Workers forbid randomness at module scope.
pub fn js_rng() -> SplitMix64 {
    SplitMix64::new((js_sys::Math::random() * (u64::MAX as f64)) as u64 ^ (js_sys::Date::now() as u64).rotate_left(17))
}

// ---------------------------------------------------------------------------------------------------------
// Workers KV.

/// The [`KvBackend`] over a Workers `KVNamespace` object (a Worker's binding, or one a JS caller hands the npm
/// package): `get`, bulk `get(keys[])` (a `Map`, one KV operation for up to 100 keys), `put` (with metadata
/// and TTL), `delete`, `list`. A failure's message is classified by [`kv_error`] (a bulk get over 25 MB: the
/// binding's 413, which the journal store reads in smaller bulk gets).
#[derive(Clone)]
pub struct WorkersKv {
    ns: JsValue,
}

impl WorkersKv {
    /// The backend over `namespace`, which must have the functions `get`, `put`, `delete` and `list`
    /// (`STEADFAST_CONFIG_INVALID` naming the missing one).
    pub fn new(namespace: JsValue) -> Result<WorkersKv> {
        for m in ["get", "put", "delete", "list"] {
            method(&namespace, m, "the KV namespace")?;
        }
        Ok(WorkersKv { ns: namespace })
    }

    async fn call(&self, name: &str, args: &Array) -> Result<JsValue> {
        let f =
            method(&self.ns, name, "the KV namespace").map_err(|e| Error::new(ErrorCode::StoreFailed, e.message))?;
        call_async(&f, &self.ns, args).await.map_err(|e| kv_error(&js_message(&e)))
    }
}

#[async_trait(?Send)]
impl KvBackend for WorkersKv {
    async fn get(&self, key: &str) -> Result<Option<String>> {
        check_key(key)?;
        Ok(self.call("get", &Array::of1(&JsValue::from_str(key))).await?.as_string())
    }

    async fn get_many(&self, keys: &[String]) -> Result<Vec<Option<String>>> {
        check_bulk(keys)?;
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let list: Array = keys.iter().map(|k| JsValue::from_str(k)).collect();
        let found = self.call("get", &Array::of1(&list)).await?;
        let map = found.dyn_into::<js_sys::Map>().map_err(|_| {
            Error::new(
                ErrorCode::StoreFailed,
                "the KV namespace's get(keys[]) did not return a Map (bulk get unsupported)",
            )
        })?;
        Ok(keys.iter().map(|k| map.get(&JsValue::from_str(k)).as_string()).collect())
    }

    async fn put(&self, key: &str, value: &str, opts: PutOptions) -> Result<()> {
        check_put(key, value, &opts)?;
        let o = Object::new();
        if let Some(m) = &opts.metadata {
            set(&o, "metadata", &from_value(m));
        }
        if let Some(ttl) = opts.expiration_ttl_s {
            set(&o, "expirationTtl", &JsValue::from_f64(ttl as f64));
        }
        self.call("put", &Array::of3(&JsValue::from_str(key), &JsValue::from_str(value), &o)).await.map(|_| ())
    }

    async fn delete(&self, key: &str) -> Result<()> {
        check_key(key)?;
        self.call("delete", &Array::of1(&JsValue::from_str(key))).await.map(|_| ())
    }

    async fn list(&self, prefix: &str, cursor: Option<&str>, limit: usize) -> Result<ListPage> {
        let o = Object::new();
        set(&o, "prefix", &JsValue::from_str(prefix));
        set(&o, "limit", &JsValue::from_f64(limit.clamp(1, 1_000) as f64));
        if let Some(c) = cursor {
            set(&o, "cursor", &JsValue::from_str(c));
        }
        let page = self.call("list", &Array::of1(&o)).await?;
        let keys = prop(&page, "keys");
        if !Array::is_array(&keys) {
            return Err(Error::new(ErrorCode::StoreUnavailable, "the KV namespace's list() answered without `keys`"));
        }
        let mut out = Vec::new();
        for k in Array::from(&keys).iter() {
            let name = prop(&k, "name")
                .as_string()
                .ok_or_else(|| Error::new(ErrorCode::StoreUnavailable, "a listed KV key has no name"))?;
            let meta = prop(&k, "metadata");
            // Ignored: unreadable metadata reads as none, which the journal store lists as a corrupt index entry.
            let metadata = if absent(&meta) { None } else { to_value(&meta, "KV metadata").ok() };
            out.push(ListKey { name, metadata });
        }
        let complete = prop(&page, "list_complete").as_bool().unwrap_or(true);
        let cursor = if complete { None } else { prop(&page, "cursor").as_string().filter(|c| !c.is_empty()) };
        Ok(ListPage { keys: out, cursor })
    }
}
