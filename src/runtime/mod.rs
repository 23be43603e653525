//! The runtime: the only async driver. It owns leases, the model-call retry layer, tool concurrency,
//! abort and the recovery sweep, generic over [`Model`], [`Tool`], [`crate::store::RunStore`],
//! [`Clock`], [`Sleep`] and [`Rng`]. Its public items are re-exported here (one path each); the modules
//! below are crate-private.
//!
//! Data flows one way through it:
//! * `agent` — the public API ([`Agent`]); [`AgentBuilder::build`] checks the configuration and builds the
//!   agent's dependencies once (`deps`: model, tools, hooks, store, clock, timer, random source, options);
//! * `lease` — the one helper that acquires a run's lease, loads the run, runs a body under it and releases
//!   it on every way out (except a simulated crash or a lost lease);
//! * `driver` — performs a run state machine's effects against those dependencies;
//! * `approvals` — resolving approvals ([`Approvals`]; planning in [`crate::core::approval`]);
//! * `recovery` — the sweep, quarantine, diagnosis forks, `fork`/`compare`, `run_once`;
//! * `options`, `result`, `traits`, `hooks`, `heal`, `tools`, `mock` — what callers pass in and get back
//!   ([`SendOptions`], [`RunResult`], [`Model`], [`Tool`], [`Hook`], [`ProgressGuard`], [`FnTool`],
//!   [`MockModel`], …).

pub(crate) mod agent;
pub(crate) mod approvals;
pub(crate) mod breakers;
mod deps;
mod driver;
pub(crate) mod feed;
pub(crate) mod handoff;
pub(crate) mod heal;
pub(crate) mod hooks;
mod lease;
pub(crate) mod metrics;
pub(crate) mod mock;
pub(crate) mod options;
pub(crate) mod recovery;
pub(crate) mod result;
pub(crate) mod schedules;
pub(crate) mod session;
pub(crate) mod steer;
pub(crate) mod subagent;
pub(crate) mod tools;
pub(crate) mod trace;
pub(crate) mod traits;
pub(crate) mod wait_tools;
pub(crate) mod waits;
pub(crate) mod watch;

pub use crate::core::approval::PendingWait;
pub use crate::rng::{Rng, SplitMix64};
#[cfg(feature = "testing")]
pub use crate::time::{yield_now, ManualClock, ManualSleep, SimExecutor, SimSleep, SimSpawner, SimTask, SimTime};
pub use crate::time::{Clock, Sleep};
#[cfg(not(target_arch = "wasm32"))]
pub use crate::time::{SystemClock, ThreadSleep};
pub use agent::{Agent, AgentBuilder, DeleteOptions, Input, Runs};
pub use approvals::{Approvals, Resolve};
pub use breakers::{BreakerView, Breakers};
pub use feed::{ModelFeed, ModelFrame};
pub use heal::{OutputCheck, ProgressGuard, ProgressGuardOptions};
pub use hooks::{Hook, HookContext, ToolResultDraft, Verdict};
pub use metrics::{Counter, MetricSample, Metrics};
pub use mock::{MockCall, MockError, MockModel, MockTurn, RecordedCall};
pub use options::{AgentOptions, SendOptions, SubagentOptions, DEFAULT_MAX_SUBAGENT_DEPTH};
#[cfg(feature = "testing")]
pub use options::{CrashBudget, CrashPoint, StallPoint};
#[cfg(feature = "testing")]
pub use recovery::SimQueue;
pub use recovery::{
    delivery_run_id, diagnosis_note, sweep_candidate, Consumed, Delivery, ForkOptions, ForkResult, LocalGate,
    NextAttempt, NoListener, RecoveryGate, RecoveryMessage, RecoveryQueue, SweepListener, SweepReport, MAX_QUEUE_BATCH,
};
pub use result::{QueuedSend, RunResult, RunStats};
pub use schedules::{DueFire, FireCall, ScheduleOutcome, ScheduleStatus};
pub use session::{NextExecution, Session, SessionFork, SessionForkOptions, SessionTurn, HINT_LAG as SESSION_HINT_LAG};
pub use subagent::ChildRun;
pub use tools::FnTool;
pub use trace::{OtlpBuffer, SpanExporter, VecExporter, DEFAULT_MAX_BUFFERED_SPANS};
pub use traits::{
    AbortSignal, ChildExecution, ChildHost, EventSink, LocalFuture, Model, ModelRequest, Tool, ToolContext, ToolError,
    ToolOutput, ToolSpec, VecSink, Warn,
};
pub use wait_tools::WaitTool;
pub use waits::{EventDelivery, Events, WakeReport};
pub use watch::{Replay, WatchOptions, WatchSink, WatchStart, Watched, Watchers};
