//! # steadfast
//!
//! Durable, self-healing LLM agent runs. A run checkpoints at every durable boundary (after each model turn
//! that asks for tools, after each tool result, on abort, on pause, on finish) and resumes exactly: a recorded
//! result never runs again, a recorded model turn is never generated again, an approved call runs at most once.
//!
//! Layers (data flows one way):
//! * [`core`] — pure and synchronous: transcript types, the run state machine (events in, effects out),
//!   fingerprints, failure classification, the retry policy, id rules, tool-argument validation.
//! * [`runtime`] — the only async driver: performs the machine's effects against a [`runtime::Model`],
//!   [`runtime::Tool`]s and a [`store::RunStore`], holds the run's lease, retries model calls (the only retry
//!   layer), runs tools concurrently, handles abort.
//! * [`store`] — the [`store::RunStore`] contract, its conformance suite and backends.
//! * [`front`] — the outer layer: the HTTP API (platform independent), the Worker configuration, the JSON
//!   contract both shells speak, and the shells themselves — the Worker (feature `worker`) and the npm
//!   package's bindings (feature `js`) — which only translate; `front::durable_sql` (feature `durable-object`)
//!   is strict mode's store over a SQLite-backed Durable Object's storage, for a workers-rs user's own object too.
//! * [`providers`] and [`tools`] — the model providers and the built-in tools, over the [`http`] client port.
//! * `time` and `rng` — crate-private leaves both the store and the runtime import: [`runtime::Clock`],
//!   [`runtime::Sleep`], [`runtime::Rng`] (re-exported by the runtime) and, with the `testing` feature, their
//!   manual and simulated versions. The store never imports the runtime.
//!
//! ## Public surface
//! The crate root re-exports what most users need ([`Agent`], [`SendOptions`], [`RunResult`], [`Model`],
//! [`Tool`], [`MemoryStore`], [`JournalStore`], …); each public item has one home: the runtime's items at
//! [`runtime`], the store contract and backends at [`store`], the JSON vocabulary (checkpoints, transcript,
//! events, approvals, errors, fingerprints, forks, trajectories) under [`core`], which also exposes the pure
//! run state machine ([`core::machine`]) for drivers and model tests. Everything else is crate-private.
//!
//! Test doubles are behind the cargo feature `testing` (never in a release build): the KV simulator
//! (`store::sim`), fault injection (`store::faulty`; crash and stall points in [`SendOptions`]), the store
//! conformance suite (`store::conformance`), manual clocks and the simulated executor
//! (`runtime::ManualClock`, `runtime::SimExecutor`, …).
//!
//! ## `?Send`, decided once
//! Cloudflare Workers (and wasm in general) are single-threaded, and JS values are not `Send`. Every async
//! trait in this crate is declared with `#[async_trait(?Send)]` (so `dyn Tool`, `dyn Model` and
//! `dyn RunStore` work), shared state uses `Rc`/`RefCell`, and no future is required to be `Send`. Native
//! callers drive runs on a single-threaded executor (e.g. `futures::executor::block_on`, a tokio
//! `LocalSet`).
//!
//! ## Example
//! ```
//! use steadfast::{Agent, FnTool, MemoryStore, MockModel, MockTurn, SendOptions, ToolOutput};
//! use serde_json::json;
//!
//! let model = MockModel::new(vec![MockTurn::tools([("add", json!({"a": 2, "b": 3}))]), MockTurn::text("5")]);
//! let add = FnTool::new("add", "Adds two numbers", json!({"type": "object", "required": ["a", "b"]}), |args, _ctx| async move {
//!     Ok(ToolOutput::json(json!(args["a"].as_i64().unwrap_or(0) + args["b"].as_i64().unwrap_or(0))))
//! });
//! let agent = Agent::builder(model).tool(add).store(MemoryStore::new()).build().unwrap();
//! let result = futures::executor::block_on(agent.send("job-1", "2 + 3?", SendOptions::default())).unwrap();
//! assert_eq!(result.text, "5");
//! ```
#![warn(missing_docs)]

pub mod core;
pub mod front;
pub mod http;
pub mod providers;
mod rng;
pub mod runtime;
#[cfg(any(test, feature = "testing"))]
#[doc(hidden)]
pub mod seeds;
pub mod store;
mod time;
pub mod tools;

// What a Rust user reaches for first, at the crate root (every item also has its one home module).
pub use crate::core::checkpoint::{Checkpoint, RunStatus};
pub use crate::core::error::{Error, ErrorCode, Result};
pub use crate::core::events::{Event, EventEnvelope};
pub use crate::core::schedule::{CompiledSchedule, MissedFires, Schedule, ScheduleInput};
pub use crate::core::transcript::Message;
pub use crate::runtime::{
    Agent, AgentBuilder, AgentOptions, FnTool, Input, MockModel, MockTurn, Model, Resolve, RunResult, ScheduleOutcome,
    SendOptions, Session, SessionFork, SessionForkOptions, SessionTurn, Tool, ToolContext, ToolError, ToolOutput,
};
pub use crate::store::{JournalOptions, JournalStore, KvBackend, MemoryStore, RunKind, RunStore};
