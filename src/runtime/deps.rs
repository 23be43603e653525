//! [`Deps`]: everything an execution needs — model, tools, hooks, store, clock, timer, random source and
//! options — built once by [`super::AgentBuilder::build`] and passed by value (behind an `Rc`) to the driver,
//! the lease helper and the recovery operations. Nothing below the [`super::Agent`] reaches into it.

use super::hooks::Hook;
use super::options::{AgentOptions, SendOptions};
use super::traits::{Model, Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use crate::core::fingerprint::Fingerprint;
use crate::core::machine::MachineConfig;
use crate::core::schema::Schema;
use crate::rng::Rng;
use crate::store::RunStore;
use crate::time::{Clock, Sleep};
use serde_json::Value;
use std::rc::Rc;

/// A tool with its compiled argument schema.
pub(crate) struct RegisteredTool {
    pub(crate) tool: Rc<dyn Tool>,
    pub(crate) schema: Schema,
    /// The same tool when it is a sub-agent's: the driver runs it with the execution's options (abort, and in
    /// tests its crash budget), which the child's execution takes on.
    pub(crate) subagent: Option<Rc<dyn ChildCall>>,
}

/// A tool call the driver runs with its execution's options (a sub-agent's: its child run takes on the lead's
/// abort signal and, in tests, its crash points).
#[async_trait::async_trait(?Send)]
pub(crate) trait ChildCall {
    async fn run(&self, args: Value, ctx: ToolContext, opts: SendOptions) -> Result<ToolOutput, ToolError>;
}

/// What an agent's executions depend on (see the module docs).
pub(crate) struct Deps {
    pub(crate) model: Rc<dyn Model>,
    /// The models after `model` in its fallback chain ([`super::AgentBuilder::fallback`]).
    pub(crate) fallbacks: Vec<Rc<dyn Model>>,
    /// The models' breakers (used with `options.breaker`).
    pub(crate) breakers: Rc<super::Breakers>,
    /// The counters it adds to, and its name in them.
    pub(crate) metrics: Rc<super::Metrics>,
    pub(crate) label: String,
    pub(crate) tools: Vec<RegisteredTool>,
    /// The tools as the model sees them (same order as `tools`).
    pub(crate) specs: Vec<ToolSpec>,
    pub(crate) hooks: Vec<Rc<dyn Hook>>,
    pub(crate) instructions: String,
    pub(crate) fingerprint: Fingerprint,
    pub(crate) store: Rc<dyn RunStore>,
    pub(crate) clock: Rc<dyn Clock>,
    pub(crate) sleep: Rc<dyn Sleep>,
    pub(crate) rng: Rc<dyn Rng>,
    /// Where operator warnings go (see [`super::AgentBuilder::warn`]).
    pub(crate) warn: Option<super::traits::Warn>,
    /// Sees every execution's events besides the caller's sink (see [`super::AgentBuilder::observer`]).
    pub(crate) observer: Option<Rc<dyn super::traits::EventSink>>,
    /// Where its executions' spans go ([`super::AgentBuilder::tracing`]).
    pub(crate) tracing: Option<super::trace::Tracing>,
    pub(crate) options: AgentOptions,
    /// How many sub-agent levels below the top agent this one runs (0 for the agent its user built).
    pub(crate) level: usize,
    /// The sub-agents this agent declares, by name (their child runs execute with their agents).
    pub(crate) subagents: Vec<(String, Rc<Deps>)>,
    /// This agent's name in its handoff team (`lead` by default).
    pub(crate) team_name: String,
    /// The agents its runs may hand the conversation to, by name (see [`super::handoff`]).
    pub(crate) handoffs: Vec<(String, Rc<Deps>)>,
    /// How its lead's calls run this agent, when it is a sub-agent (attached by default).
    pub(crate) child_opts: super::options::SubagentOptions,
    /// Where its sub-agent calls execute their child runs, when not here ([`super::AgentBuilder::child_host`]).
    pub(crate) child_host: Option<Rc<dyn super::traits::ChildHost>>,
    /// The recovery gate its runs' own recovery steps take a slot of ([`super::AgentBuilder::recovery_gate`]).
    pub(crate) gate: Option<Rc<dyn super::RecoveryGate>>,
}

impl Deps {
    /// Waits `ms` (at least 1) on the agent's timer, or until `stop` is aborted, whichever comes first (the
    /// pause between two ticks of a loop).
    pub(crate) async fn nap(&self, ms: u64, stop: &super::traits::AbortSignal) {
        let sleep = self.sleep.clone();
        let nap = sleep.sleep(ms.max(1));
        futures::pin_mut!(nap);
        let aborted = stop.aborted();
        futures::pin_mut!(aborted);
        futures::future::select(nap, aborted).await;
    }

    /// The time now.
    /// Adds `n` to this agent's `counter`.
    pub(crate) fn count(&self, counter: super::Counter, n: u64) {
        self.metrics.add(&self.label, counter, n);
    }

    pub(crate) fn now(&self) -> u64 {
        self.clock.now_ms()
    }

    /// A fresh random id (`<prefix>_<24 hex digits>`).
    pub(crate) fn new_id(&self, prefix: &str) -> String {
        format!("{prefix}_{:016x}{:08x}", self.rng.next_u64(), self.rng.next_u64() as u32)
    }

    /// A fresh idempotency-key scope for the new run `run_id`: its id and 128 random bits from the agent's
    /// `Rng` (see [`crate::core::idempotency`]).
    pub(crate) fn new_key_scope(&self, run_id: &str) -> String {
        crate::core::idempotency::new_scope(run_id, (self.rng.next_u64(), self.rng.next_u64()))
    }

    /// The registered tool named `name`.
    pub(crate) fn tool(&self, name: &str) -> Option<&RegisteredTool> {
        self.tools.iter().find(|t| t.tool.name() == name)
    }

    /// What a front door answers with a result: with `onExceeded: "throw"`, a run this execution stopped on
    /// its budget fails the call with `STEADFAST_BUDGET_EXCEEDED` (the run is finished and kept all the same).
    pub(crate) fn verdict(&self, res: super::RunResult) -> crate::core::error::Result<super::RunResult> {
        match (&res.exceeded, self.options.on_exceeded) {
            (Some(x), crate::core::budget::OnExceeded::Throw) => Err(x.error(&res.run_id)),
            _ => Ok(res),
        }
    }

    /// [`Deps::machine_config`] of an execution under `lease`, with its trace context when the agent traces
    /// (the machine keeps it in the run for the next execution's link; the driver's spans use it).
    pub(crate) fn traced_config(&self, run_id: &str, opts: &SendOptions, lease: &crate::store::Lease) -> MachineConfig {
        let mut cfg = self.machine_config(run_id, opts);
        if self.tracing.is_some() {
            cfg.trace = Some(crate::core::trace::execution_context(opts.traceparent, &lease.owner));
        }
        cfg
    }

    /// The run state machine's configuration for run `run_id`.
    pub(crate) fn machine_config(&self, run_id: &str, opts: &SendOptions) -> MachineConfig {
        MachineConfig {
            run_id: run_id.to_string(),
            max_steps: self.options.max_steps,
            budget: self.options.budget(),
            budget_cap: opts.budget_cap,
            on_agent_drift: self.options.on_agent_drift,
            fingerprint: self.fingerprint.clone(),
            tool_names: {
                // Inserted, not collected (a collect sorts with a ~3 KB instance of the standard sort).
                let mut names = std::collections::BTreeSet::new();
                names.extend(self.tools.iter().map(|t| t.tool.name().to_string()));
                names
            },
            instructions: self.instructions.clone(),
            loop_window: self.options.loop_window,
            business_state: opts.business_state.clone(),
            max_tool_result_bytes: self.options.max_tool_result_bytes,
            key_scope: None,
            steer_poll_ms: self.options.steer_poll_ms,
            team: self.team(),
            trace: None,
        }
    }
}
