//! The npm package's low-level API (feature `js`): [`agent::JsAgent`], [`stores::JsStore`] and
//! [`schedules::JsSchedules`], exported with wasm-bindgen, one file per concern as in `js/src/`.
//!
//! Translation only, no decisions: JS models, tools, hooks, clocks and KV namespaces become the runtime's
//! [`crate::runtime::Model`], [`crate::runtime::Tool`], [`crate::runtime::Hook`], clock and store
//! implementations; the agent's methods return promises of JSON strings; errors are JS `Error`s carrying the
//! crate error's fields ([`errors`]).
//!
//! * [`agent`] — `JsAgent`: the options object (the runtime's [`crate::runtime::AgentOptions`] read whole,
//!   plus model, tools, hooks, instructions, clock), runs, approvals, fork, history.
//! * [`session`], [`schedules`], [`recovery`] — the agent's session, schedule and sweep methods;
//!   [`waits`] — deliveries to tools' event waits (`events.deliver`).
//! * [`calls`] — what every run-starting call takes besides its input (`{events?}`, event callback, abort
//!   signal, send document) and answers.
//! * [`model`], [`tools`] (with the wait markers a tool answers), [`hooks`], [`clock`] — the JS shapes the
//!   runtime calls back into.
//! * [`stores`] — `JsStore`: memory, KV journal, Durable Object. [`compare`] — `compareTrajectories`.
//! * [`errors`] — JSON text and coded JS errors; [`args`] — the checks of the arguments JS hands in.
//!
//! The pure translations (argument rules, option and answer parsing) are tested natively in each file
//! (`cargo test --lib --features js front::bindings`); the JS-facing parts by the npm package's tests.

mod agent;
mod args;
mod calls;
mod clock;
mod compare;
mod errors;
mod hooks;
mod model;
mod recovery;
mod schedules;
mod session;
mod stores;
mod tools;
mod waits;
