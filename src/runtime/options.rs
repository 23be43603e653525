//! Options: the agent's limits and policies ([`AgentOptions`], fixed when it is built) and the per-call
//! options of `send`, `resume` and `resolve` ([`SendOptions`], with the tests' crash and stall injection).

#[cfg(feature = "testing")]
use super::traits::LocalFuture;
use super::traits::{AbortSignal, EventSink};
use super::wait_tools::WaitTool;
use crate::core::budget::{Budget, OnExceeded, TokenLimits};
use crate::core::cost::PriceTable;
use crate::core::machine::DriftPolicy;
use crate::core::retry::RetryPolicy;
use crate::store::LeaseOptions;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::rc::Rc;

/// How deep sub-agents nest by default (the lead is depth 0; its sub-agents' child runs depth 1): see
/// [`super::AgentBuilder::max_subagent_depth`].
pub const DEFAULT_MAX_SUBAGENT_DEPTH: usize = 3;
/// How many handoffs a run may take by default ([`AgentOptions::max_handoffs`]).
pub const DEFAULT_MAX_HANDOFFS: u32 = 5;

/// The agent's limits and policies, defined once. The npm package's `createAgent` takes them as they are,
/// beside the parts only JS gives (model, tools, hooks, store, clock); the Worker configuration names them
/// alike: its `limits` section holds `maxSteps`, `toolConcurrency`, `loopWindow` and `maxToolResultBytes`, and
/// `onAgentDrift`, `retry` and `lease` are top-level fields. Every field has a default.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase", default)]
pub struct AgentOptions {
    /// Model turns per run (default 10; at least 1).
    pub max_steps: u32,
    /// Tool calls of one turn run at once (default 8).
    pub tool_concurrency: usize,
    /// What a changed agent does on resume (default `warn`).
    pub on_agent_drift: DriftPolicy,
    /// The model-call retry layer (the only one; default: 4 attempts, 500 ms base, 20 s cap, 60 s deadline).
    pub retry: RetryPolicy,
    /// Run leases (default: 30 s ttl, renewed every 10 s, 30 s grace).
    pub lease: LeaseOptions,
    /// Stop after this many identical failing tool turns in a row (default 4; 0 = off).
    pub loop_window: u32,
    /// Longest tool result kept, in bytes (default 262144 = 256 KiB, at least 1024); a longer one is cut and
    /// ends with a marker the model reads.
    pub max_tool_result_bytes: usize,
    /// Built-in tools that wait, added to the agent's own (default none): `ask_question` (a person's answer
    /// is the result), `sleep_for`, `sleep_until` (see [`crate::core::wait`]).
    pub wait_tools: Vec<WaitTool>,
    /// Read the run's message queue (messages sent with `queue: true`, [`crate::core::steer`]) at step
    /// boundaries, at most once per this many ms (and always before a run finishes). `None` turns steering off:
    /// no queue is read, and a send with `queue: true` is refused. Default 1,000 ms: on Workers KV a read is one
    /// `list` operation, so this bounds what steering costs a fast run.
    #[cfg_attr(feature = "ts", ts(type = "number | null"))]
    pub steer_poll_ms: Option<u64>,
    /// Handoffs a run may take (default 5): one more `transfer_to_<name>` call is a `STEADFAST_HANDOFF_LIMIT`
    /// error result and the conversation stays where it is. The lead's setting holds for its whole team.
    pub max_handoffs: u32,
    /// Prompt tokens a run may use (default: no limit); checked before each model call, so a run goes over by at
    /// most the call that crossed it. A run that reaches a limit finishes with finish reason `budget-exceeded`
    /// (see `onExceeded`) and is resumable once the limit is raised.
    #[cfg_attr(feature = "ts", ts(type = "number | null"))]
    pub max_input_tokens: Option<u64>,
    /// Completion tokens a run may use (default: no limit).
    #[cfg_attr(feature = "ts", ts(type = "number | null"))]
    pub max_output_tokens: Option<u64>,
    /// Prompt and completion tokens together a run may use (default: no limit).
    #[cfg_attr(feature = "ts", ts(type = "number | null"))]
    pub max_total_tokens: Option<u64>,
    /// Time a run may spend executing, in ms, summed across its executions (a resume does not start the clock
    /// again; time paused or crashed does not count). Default: no limit.
    #[cfg_attr(feature = "ts", ts(type = "number | null"))]
    pub max_duration_ms: Option<u64>,
    /// What a run's model calls may cost, in US dollars (default: no limit), from `prices`; every model the
    /// agent may call (its own, its handoff team's, its sub-agents') needs a price.
    #[serde(with = "crate::core::cost::usd_limit")]
    #[cfg_attr(feature = "ts", ts(type = "number | null"))]
    pub max_cost_usd: Option<u64>,
    /// Token and cost limits of a whole conversation: every run of an id (a finished run continued by a new
    /// message) and every turn of a session. Default: none.
    pub session_budget: TokenLimits,
    /// What an exhausted budget does (default `finish`): `finish` ends the run with finish reason
    /// `budget-exceeded`; `throw` ends it the same way and fails the call with `STEADFAST_BUDGET_EXCEEDED`.
    pub on_exceeded: OnExceeded,
    /// Prices per model id, in US dollars per million tokens (`input`, `output`, and optionally `cachedInput`,
    /// `cacheWrite`, `reasoning`): added to the built-in ones ([`crate::core::cost::DEFAULT_PRICES`]), replacing
    /// those of the same id. A turn of a model without a price has no cost (`costUsd` left out).
    #[cfg_attr(feature = "ts", ts(as = "std::collections::BTreeMap<String, crate::core::cost::Price>"))]
    pub prices: PriceTable,
    /// What a store operation costs, in US dollars per million operations (`{read?, write?, delete?, list?,
    /// request?, rowWritten?}`; default: Cloudflare's published Workers KV and Durable Object prices): a run's
    /// `usage.storage.costUsd`.
    #[cfg_attr(
        feature = "ts",
        ts(
            type = "{ read?: number, write?: number, delete?: number, list?: number, request?: number, rowWritten?: number }"
        )
    )]
    pub storage_prices: crate::core::cost::StoragePrices,
    /// A circuit breaker per dependency (default: none): `{windowMs, minCalls, failurePercent, coolDownMs}` (`{}`:
    /// 30 s, 5, 50 %, 30 s), one for each model provider and each webhook or MCP host. Once a dependency's recent calls
    /// failed enough (timeouts, dropped connections, 5xx, 429) its breaker opens: its calls are not made for the
    /// cool-down — a fallback model takes a model call, or it fails at once with `STEADFAST_PROVIDER_CIRCUIT_OPEN`
    /// (retryable); a webhook call is answered with a `CircuitOpenError` result — then one probe decides.
    #[cfg_attr(feature = "ts", ts(optional))]
    pub breaker: Option<crate::core::breaker::BreakerOptions>,
}

impl AgentOptions {
    /// The budget the run state machine checks.
    pub fn budget(&self) -> Budget {
        Budget {
            run: TokenLimits {
                max_input_tokens: self.max_input_tokens,
                max_output_tokens: self.max_output_tokens,
                max_total_tokens: self.max_total_tokens,
                max_cost_usd: self.max_cost_usd,
            },
            max_duration_ms: self.max_duration_ms,
            session: self.session_budget,
            cap: Default::default(),
        }
    }
}

impl Default for AgentOptions {
    fn default() -> Self {
        AgentOptions {
            max_steps: 10,
            tool_concurrency: 8,
            on_agent_drift: DriftPolicy::Warn,
            retry: RetryPolicy::default(),
            lease: LeaseOptions::default(),
            loop_window: 4,
            max_tool_result_bytes: crate::core::limits::DEFAULT_MAX_TOOL_RESULT_BYTES,
            wait_tools: Vec::new(),
            steer_poll_ms: Some(crate::core::steer::DEFAULT_STEER_POLL_MS),
            max_handoffs: DEFAULT_MAX_HANDOFFS,
            max_input_tokens: None,
            max_output_tokens: None,
            max_total_tokens: None,
            max_duration_ms: None,
            max_cost_usd: None,
            session_budget: TokenLimits::default(),
            on_exceeded: OnExceeded::Finish,
            prices: PriceTable::default(),
            storage_prices: Default::default(),
            breaker: None,
        }
    }
}

#[cfg(feature = "testing")]
/// Crash injection for tests: stop the execution right after effect number `after_effects` was performed,
/// as if the process died (the lease is not released).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CrashPoint {
    /// Effects performed before the crash.
    pub after_effects: usize,
    /// Let tools already in flight finish (their side effects happen, their results are lost).
    pub finish_in_flight: bool,
}

#[cfg(feature = "testing")]
/// Crash injection across several executions (tests): every effect of every execution given this budget counts
/// down `left`; the execution that performs the last one "crashes" right after it, as with [`CrashPoint`].
#[derive(Debug)]
pub struct CrashBudget {
    /// Effects still allowed; `None` once the crash happened (later executions run normally).
    pub left: std::cell::Cell<Option<usize>>,
    /// Let tools already in flight finish (their side effects happen, their results are lost).
    pub finish_in_flight: bool,
}

#[cfg(feature = "testing")]
impl CrashBudget {
    /// A budget of `effects` effects.
    pub fn new(effects: usize, finish_in_flight: bool) -> Rc<CrashBudget> {
        Rc::new(CrashBudget { left: std::cell::Cell::new(Some(effects)), finish_in_flight })
    }

    /// Whether the crash happened.
    pub fn crashed(&self) -> bool {
        self.left.get().is_none()
    }
}

#[cfg(feature = "testing")]
/// Stall injection for tests: after effect number `after_effects`, the execution awaits `wait()` before
/// anything else (a frozen process: its tools in flight are not polled, its lease is not renewed).
#[derive(Clone)]
pub struct StallPoint {
    /// Effects performed before the stall.
    pub after_effects: usize,
    /// The stall: resolves when the process "wakes up".
    pub wait: Rc<dyn Fn() -> LocalFuture<'static, ()>>,
}

/// Per-call options of `send`, `resume` and `resolve`.
#[derive(Clone, Default)]
pub struct SendOptions {
    /// Business state a new run starts with.
    pub business_state: Option<Value>,
    /// Cancellation handle.
    pub abort: Option<AbortSignal>,
    /// Event receiver.
    pub events: Option<Rc<dyn EventSink>>,
    /// Queue the input instead of waiting for the run ([`crate::core::steer`]): while another execution holds
    /// the run (or it waits on an approval), the message is recorded and applied at that execution's next step
    /// boundary (the result says `queued`, nothing ran here); otherwise this call applies it and runs, as a send.
    /// A run that does not exist yet is created as by a send.
    pub queue: bool,
    /// With `queue`: when the message is applied, stop the current turn's calls that have not started (each gets
    /// a `not-run` result naming the message).
    pub interrupt: bool,
    /// The parent's tool call that executes this child run, named on the child's events
    /// ([`crate::core::events::SubagentTag`]): set by the runtime for a sub-agent's call; leave it `None`.
    pub subagent_call: Option<String>,
    /// The budget cap of a run this call creates (a sub-agent's child: its part of what its lead has left,
    /// [`crate::core::budget`]): set by the runtime for a sub-agent's call; leave it `None`.
    pub budget_cap: Option<crate::core::budget::BudgetCap>,
    /// The caller's span (a W3C `traceparent` it sent, read with
    /// [`crate::core::trace::SpanContext::parse_traceparent`]): a traced execution's span becomes its child.
    /// Set by the runtime for a sub-agent's call (the lead's tool span).
    pub traceparent: Option<crate::core::trace::SpanContext>,
    /// Crash injection (tests): stop after this effect as if the process died.
    #[cfg(feature = "testing")]
    pub crash: Option<CrashPoint>,
    /// Crash injection across executions (tests).
    #[cfg(feature = "testing")]
    pub crash_budget: Option<Rc<CrashBudget>>,
    /// Stall injection (tests).
    #[cfg(feature = "testing")]
    pub stall: Option<StallPoint>,
}

/// How a lead's calls run a sub-agent ([`crate::runtime::AgentBuilder::subagent_with`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SubagentOptions {
    /// The call answers at once (`{"started": "<child run id>"}`) and the lead goes on; the child runs apart
    /// (the recovery sweep executes it) and its final text comes to the lead as a queued message, applied once
    /// — also to a lead that finished meanwhile, which continues with it. Needs the lead's steering on.
    pub detached: bool,
    /// A detached child runs on when its lead is deleted (default: it is deleted with it).
    pub abandon: bool,
}
