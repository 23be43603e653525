//! The runtime: the only async driver. It owns leases, the model-call retry layer, tool concurrency,
//! abort and the recovery sweep, generic over [`Model`], [`Tool`], [`crate::store::RunStore`],
//! [`Clock`], [`Sleep`] and [`Rng`].
//!
//! Data flows one way through it:
//! * [`agent`] — the public API; [`AgentBuilder::build`] checks the configuration and builds the agent's
//!   dependencies once (`deps`: model, tools, hooks, store, clock, timer, random source, options);
//! * `lease` — the one helper that acquires a run's lease, loads the run, runs a body under it and releases
//!   it on every way out (except a simulated crash or a lost lease);
//! * `driver` — performs a run state machine's effects against those dependencies;
//! * [`approvals`] — resolving approvals (planning in [`crate::core::approval`]);
//! * [`recovery`] — the sweep, quarantine, diagnosis forks, `fork`/`compare`, `run_once`;
//! * [`options`], [`result`], [`traits`], [`hooks`], [`heal`], [`tools`], [`mock`] — what callers pass in and
//!   get back.

pub mod agent;
pub mod approvals;
mod deps;
mod driver;
pub mod heal;
pub mod hooks;
mod lease;
pub mod mock;
pub mod options;
pub mod recovery;
pub mod result;
pub mod tools;
pub mod traits;

pub use crate::rng::{Rng, SplitMix64};
pub use crate::time::{Clock, ManualClock, ManualSleep, Sleep};
pub use crate::time::{SimExecutor, SimSleep, SimSpawner, SimTask, SimTime};
pub use agent::{Agent, AgentBuilder, Input};
pub use approvals::{Approvals, Resolve};
pub use heal::{OutputCheck, ProgressGuard, ProgressGuardOptions};
pub use hooks::{Hook, HookContext, ToolResultDraft, Verdict};
pub use mock::{MockCall, MockModel, MockTurn};
pub use options::{AgentOptions, CrashBudget, CrashPoint, SendOptions, StallPoint};
pub use recovery::{Delivery, ForkOptions, ForkResult, NoListener, SweepListener, SweepReport};
pub use result::{RunResult, RunStats};
pub use tools::FnTool;
pub use traits::{
    AbortSignal, EventSink, Model, ModelRequest, Tool, ToolContext, ToolError, ToolOutput, ToolSpec, VecSink,
};
