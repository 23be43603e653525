//! The runtime: the only async driver. It owns leases, the model-call retry layer, tool concurrency,
//! abort and (later) the recovery sweep, generic over [`Model`], [`Tool`], [`crate::store::RunStore`],
//! [`Clock`], [`Sleep`] and [`Rng`].

pub mod agent;
mod driver;
pub mod heal;
pub mod hooks;
pub mod mock;
pub mod recovery;
pub mod tools;
pub mod traits;

pub use crate::rng::{Rng, SplitMix64};
pub use crate::time::{Clock, ManualClock, ManualSleep, Sleep};
pub use crate::time::{SimExecutor, SimSleep, SimSpawner, SimTask, SimTime};
pub use agent::{
    Agent, AgentBuilder, AgentOptions, Approvals, CrashBudget, CrashPoint, Input, Resolve, RunResult, SendOptions,
    StallPoint,
};
pub use driver::RunStats;
pub use heal::{OutputCheck, ProgressGuard, ProgressGuardOptions};
pub use hooks::{Hook, HookContext, ToolResultDraft, Verdict};
pub use mock::{MockCall, MockModel, MockTurn};
pub use recovery::{Delivery, ForkOptions, ForkResult, NoListener, SweepListener, SweepReport};
pub use tools::FnTool;
pub use traits::{
    AbortSignal, EventSink, Model, ModelRequest, Tool, ToolContext, ToolError, ToolOutput, ToolSpec, VecSink,
};
