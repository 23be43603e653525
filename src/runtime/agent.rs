//! [`Agent`]: the public runtime API (`send`, `resume`, `approvals`, `delete`, `pending`, …).

use super::driver::{Driver, RunStats};
use super::hooks::Hook;
use super::traits::{AbortSignal, EventSink, Model, Tool, ToolSpec};
use crate::core::approval::{awaits, awaits_any, decide, plan_resolution, ApprovalRecord, ApprovalStatus, Resolution};
use crate::core::checkpoint::{Checkpoint, FinishReason, RunStatus};
use crate::core::error::{Error, ErrorCode, Result};
use crate::core::fingerprint::Fingerprint;
use crate::core::ids::{validate_new_run_id, validate_run_id};
use crate::core::machine::{DriftPolicy, MachineConfig, Outcome, RunMachine, Start};
use crate::core::retry::RetryPolicy;
use crate::core::schema::Schema;
use crate::core::transcript::{Message, Usage};
use crate::rng::{Rng, SplitMix64};
use crate::store::{HistoryEntry, Lease, LeaseOptions, PendingRun, RunStore, StoreCounters};
use crate::time::{Clock, Sleep};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeSet;
use std::rc::Rc;

/// Agent limits and policies.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct AgentOptions {
    /// Model turns per run (default 10).
    pub max_steps: u32,
    /// Tool calls of one turn run at once (default 8).
    pub tool_concurrency: usize,
    /// What a changed agent does on resume (default `warn`).
    pub on_agent_drift: DriftPolicy,
    /// The model-call retry layer (the only one).
    pub retry: RetryPolicy,
    /// Run leases.
    pub lease: LeaseOptions,
    /// Stop after this many identical failing tool turns in a row (default 4; 0 = off).
    pub loop_window: u32,
    /// Longest tool result kept, in bytes (default 256 KiB); a longer one is cut and ends with a marker the
    /// model reads.
    pub max_tool_result_bytes: usize,
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
        }
    }
}

/// Crash injection for tests: stop the execution right after effect number `after_effects` was performed,
/// as if the process died (the lease is not released).
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CrashPoint {
    /// Effects performed before the crash.
    pub after_effects: usize,
    /// Let tools already in flight finish (their side effects happen, their results are lost).
    pub finish_in_flight: bool,
}

/// Crash injection across several executions (tests): every effect of every execution given this budget counts
/// down `left`; the execution that performs the last one "crashes" right after it, as with [`CrashPoint`].
#[doc(hidden)]
#[derive(Debug)]
pub struct CrashBudget {
    /// Effects still allowed; `None` once the crash happened (later executions run normally).
    pub left: std::cell::Cell<Option<usize>>,
    /// Let tools already in flight finish (their side effects happen, their results are lost).
    pub finish_in_flight: bool,
}

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

/// Stall injection for tests: after effect number `after_effects`, the execution awaits `wait()` before
/// anything else (a frozen process: its tools in flight are not polled, its lease is not renewed).
#[doc(hidden)]
#[derive(Clone)]
pub struct StallPoint {
    /// Effects performed before the stall.
    pub after_effects: usize,
    /// The stall: resolves when the process "wakes up".
    pub wait: Rc<dyn Fn() -> super::traits::LocalFuture<'static, ()>>,
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
    #[doc(hidden)]
    pub crash: Option<CrashPoint>,
    #[doc(hidden)]
    pub crash_budget: Option<Rc<CrashBudget>>,
    #[doc(hidden)]
    pub stall: Option<StallPoint>,
}

/// Input for `send`: text, one message or several.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Input(pub Vec<Message>);

impl From<&str> for Input {
    fn from(s: &str) -> Input {
        Input(vec![Message::user(s)])
    }
}
impl From<String> for Input {
    fn from(s: String) -> Input {
        Input(vec![Message::user(s)])
    }
}
impl From<Message> for Input {
    fn from(m: Message) -> Input {
        Input(vec![m])
    }
}
impl From<Vec<Message>> for Input {
    fn from(v: Vec<Message>) -> Input {
        Input(v)
    }
}

/// How an execution ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase")]
pub struct RunResult {
    /// Run id.
    pub run_id: String,
    /// Status after this execution.
    pub status: RunStatus,
    /// Why it ended.
    pub finish_reason: Option<FinishReason>,
    /// The last assistant text.
    pub text: String,
    /// Explanation of a budget stop.
    pub note: Option<String>,
    /// The whole transcript.
    pub messages: Vec<Message>,
    /// Steps of the current run.
    pub steps: u32,
    /// Usage of the current run.
    pub usage: Usage,
    /// Pending approvals.
    pub approval_ids: Vec<String>,
    /// First pending approval.
    pub approval_id: Option<String>,
    /// Business state.
    pub business_state: Option<Value>,
    /// What this execution did.
    pub stats: RunStats,
}

impl RunResult {
    pub(crate) fn of(cp: &Checkpoint, outcome: &Outcome, stats: RunStats) -> RunResult {
        RunResult {
            run_id: cp.run_id.clone(),
            status: outcome.status,
            finish_reason: outcome.finish_reason,
            text: cp.last_text(),
            note: outcome.note.clone(),
            messages: cp.messages.clone(),
            steps: cp.step_index,
            usage: cp.usage,
            approval_ids: cp.approval_ids.clone(),
            approval_id: cp.approval_ids.first().cloned(),
            business_state: cp.business_state.clone(),
            stats,
        }
    }
}

/// A decision on an approval.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resolve {
    /// Approval id.
    pub id: String,
    /// Approve (run the call) or reject (the model gets the note).
    pub approved: bool,
    /// Reviewer's note.
    #[serde(default)]
    pub note: Option<String>,
}

pub(crate) struct RegisteredTool {
    pub(crate) tool: Rc<dyn Tool>,
    pub(crate) schema: Schema,
}

pub(crate) struct AgentInner {
    pub(crate) hooks: Vec<Rc<dyn Hook>>,
    pub(crate) model: Rc<dyn Model>,
    pub(crate) tools: Vec<RegisteredTool>,
    pub(crate) specs: Vec<ToolSpec>,
    pub(crate) instructions: String,
    pub(crate) store: Rc<dyn RunStore>,
    pub(crate) options: AgentOptions,
    pub(crate) clock: Rc<dyn Clock>,
    pub(crate) sleep: Rc<dyn Sleep>,
    pub(crate) rng: Rc<dyn Rng>,
    pub(crate) fingerprint: Fingerprint,
}

/// A durable agent: a model, tools, instructions and a store.
#[derive(Clone)]
pub struct Agent {
    pub(crate) inner: Rc<AgentInner>,
}

/// Builds an [`Agent`].
pub struct AgentBuilder {
    hooks: Vec<Rc<dyn Hook>>,
    model: Rc<dyn Model>,
    tools: Vec<Rc<dyn Tool>>,
    instructions: String,
    store: Option<Rc<dyn RunStore>>,
    options: AgentOptions,
    clock: Option<Rc<dyn Clock>>,
    sleep: Option<Rc<dyn Sleep>>,
    rng: Option<Rc<dyn Rng>>,
}

impl AgentBuilder {
    /// Adds a tool.
    pub fn tool(mut self, tool: impl Tool + 'static) -> Self {
        self.tools.push(Rc::new(tool));
        self
    }

    /// Adds a shared tool.
    pub fn tool_rc(mut self, tool: Rc<dyn Tool>) -> Self {
        self.tools.push(tool);
        self
    }

    /// Adds a hook (hooks run in the order they were added).
    pub fn hook(mut self, hook: impl Hook + 'static) -> Self {
        self.hooks.push(Rc::new(hook));
        self
    }

    /// Adds a shared hook.
    pub fn hook_rc(mut self, hook: Rc<dyn Hook>) -> Self {
        self.hooks.push(hook);
        self
    }

    /// Sets the instructions (system prompt of new runs).
    pub fn instructions(mut self, s: impl Into<String>) -> Self {
        self.instructions = s.into();
        self
    }

    /// Sets the store.
    pub fn store(mut self, store: impl RunStore + 'static) -> Self {
        self.store = Some(Rc::new(store));
        self
    }

    /// Sets a shared store.
    pub fn store_rc(mut self, store: Rc<dyn RunStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// Sets the options.
    pub fn options(mut self, options: AgentOptions) -> Self {
        self.options = options;
        self
    }

    /// Sets the clock.
    pub fn clock(mut self, clock: Rc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Sets the timer.
    pub fn sleep(mut self, sleep: Rc<dyn Sleep>) -> Self {
        self.sleep = Some(sleep);
        self
    }

    /// Sets the random source.
    pub fn rng(mut self, rng: Rc<dyn Rng>) -> Self {
        self.rng = Some(rng);
        self
    }

    /// Checks the configuration and builds the agent. Fails with `STEADFAST_CONFIG_INVALID` for duplicate or
    /// empty tool names, schemas that do not compile, a missing store, or (on wasm) a missing clock/timer.
    pub fn build(self) -> Result<Agent> {
        let cfg = |m: String| Error::new(ErrorCode::ConfigInvalid, m);
        let store = self.store.ok_or_else(|| cfg("an agent needs a store (e.g. MemoryStore::new())".into()))?;
        let mut names = BTreeSet::new();
        let mut tools = Vec::new();
        let mut specs = Vec::new();
        for t in self.tools {
            let name = t.name().to_string();
            if name.is_empty()
                || name.len() > 64
                || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                return Err(cfg(format!("tool name {name:?} must be 1-64 characters of letters, digits, '_' or '-'")));
            }
            if !names.insert(name.clone()) {
                return Err(cfg(format!("two tools are named '{name}'")));
            }
            let schema = Schema::compile(t.input_schema())
                .map_err(|e| cfg(format!("tool '{name}' has an invalid input schema: {e}")))?;
            specs.push(ToolSpec {
                name,
                description: t.description().to_string(),
                input_schema: t.input_schema().clone(),
            });
            tools.push(RegisteredTool { tool: t, schema });
        }
        if self.options.max_steps == 0 {
            return Err(cfg("maxSteps must be at least 1".into()));
        }
        let max_result = crate::core::limits::MAX_TOOL_RESULT_BYTES;
        if !(1_024..=max_result).contains(&self.options.max_tool_result_bytes) {
            return Err(cfg(format!("maxToolResultBytes must be between 1024 and {max_result}")));
        }
        let clock = match self.clock {
            Some(c) => c,
            None => default_clock().ok_or_else(|| cfg("no clock on this platform: pass one with .clock(..)".into()))?,
        };
        let sleep = match self.sleep {
            Some(s) => s,
            None => default_sleep().ok_or_else(|| cfg("no timer on this platform: pass one with .sleep(..)".into()))?,
        };
        let rng = self.rng.unwrap_or_else(|| {
            let seed = clock.now_ms() ^ (Rc::as_ptr(&store) as *const u8 as usize as u64).rotate_left(32);
            Rc::new(SplitMix64::new(seed))
        });
        let fingerprint = Fingerprint::compute(
            self.model.id(),
            specs.iter().map(|s| (s.name.as_str(), &s.input_schema)),
            &self.instructions,
        );
        Ok(Agent {
            inner: Rc::new(AgentInner {
                hooks: self.hooks,
                model: self.model,
                tools,
                specs,
                instructions: self.instructions,
                store,
                options: self.options,
                clock,
                sleep,
                rng,
                fingerprint,
            }),
        })
    }
}

#[cfg(not(target_arch = "wasm32"))]
fn default_clock() -> Option<Rc<dyn Clock>> {
    Some(Rc::new(crate::time::SystemClock))
}
#[cfg(target_arch = "wasm32")]
fn default_clock() -> Option<Rc<dyn Clock>> {
    None
}
#[cfg(not(target_arch = "wasm32"))]
fn default_sleep() -> Option<Rc<dyn Sleep>> {
    Some(Rc::new(crate::time::ThreadSleep))
}
#[cfg(target_arch = "wasm32")]
fn default_sleep() -> Option<Rc<dyn Sleep>> {
    None
}

impl Agent {
    /// Starts building an agent around a model.
    pub fn builder(model: impl Model + 'static) -> AgentBuilder {
        Agent::builder_rc(Rc::new(model))
    }

    /// Starts building an agent around a shared model.
    pub fn builder_rc(model: Rc<dyn Model>) -> AgentBuilder {
        AgentBuilder {
            hooks: Vec::new(),
            model,
            tools: Vec::new(),
            instructions: String::new(),
            store: None,
            options: AgentOptions::default(),
            clock: None,
            sleep: None,
            rng: None,
        }
    }

    /// The agent's fingerprint.
    pub fn fingerprint(&self) -> &Fingerprint {
        &self.inner.fingerprint
    }

    /// The store.
    pub fn store(&self) -> &Rc<dyn RunStore> {
        &self.inner.store
    }

    /// Sends input on run `run_id`: starts it, resumes it (pending calls first, then the input), or continues
    /// a finished run as a conversation (M2). Refused with `STEADFAST_SESSION_AWAITING_APPROVAL` while it
    /// waits on an approval, and with `STEADFAST_SESSION_BUSY` while another execution holds its lease. A new
    /// run's id may not end with `.heal` (`STEADFAST_SESSION_ID_INVALID`: reserved for diagnosis forks).
    pub async fn send(&self, run_id: &str, input: impl Into<Input>, opts: SendOptions) -> Result<RunResult> {
        let input = input.into().0;
        let res = self.execute(run_id, Start::Send(input), &opts).await?;
        res.ok_or_else(|| Error::internal("send produced no result"))
    }

    /// Finishes an unfinished run; `None` when there is nothing to resume (unknown or finished run).
    pub async fn resume(&self, run_id: &str, opts: SendOptions) -> Result<Option<RunResult>> {
        self.execute(run_id, Start::Resume, &opts).await
    }

    /// The approvals API.
    pub fn approvals(&self) -> Approvals<'_> {
        Approvals { agent: self }
    }

    /// Deletes a run (its checkpoint, history and lease). A later send starts it over.
    pub async fn delete(&self, run_id: &str) -> Result<()> {
        validate_run_id(run_id)?;
        self.inner.store.delete(run_id).await
    }

    /// The run's current checkpoint.
    pub async fn load(&self, run_id: &str) -> Result<Option<Checkpoint>> {
        validate_run_id(run_id)?;
        self.inner.store.load(run_id).await
    }

    /// Every unfinished run (M11).
    pub async fn pending(&self) -> Result<Vec<PendingRun>> {
        self.inner.store.pending().await
    }

    /// Past states of a run, newest first.
    pub async fn history(&self, run_id: &str, limit: usize) -> Result<Vec<HistoryEntry>> {
        validate_run_id(run_id)?;
        self.inner.store.history(run_id, limit).await
    }

    pub(crate) fn machine_config(&self, run_id: &str, opts: &SendOptions) -> MachineConfig {
        MachineConfig {
            run_id: run_id.to_string(),
            max_steps: self.inner.options.max_steps,
            on_agent_drift: self.inner.options.on_agent_drift,
            fingerprint: self.inner.fingerprint.clone(),
            tool_names: self.inner.tools.iter().map(|t| t.tool.name().to_string()).collect(),
            instructions: self.inner.instructions.clone(),
            loop_window: self.inner.options.loop_window,
            business_state: opts.business_state.clone(),
            max_tool_result_bytes: self.inner.options.max_tool_result_bytes,
        }
    }

    pub(crate) fn new_id(&self, prefix: &str) -> String {
        format!("{prefix}_{:016x}{:08x}", self.inner.rng.next_u64(), self.inner.rng.next_u64() as u32)
    }

    /// The registered tool named `name`.
    pub(crate) fn tool(&self, name: &str) -> Option<&RegisteredTool> {
        self.inner.tools.iter().find(|t| t.tool.name() == name)
    }

    pub(crate) async fn acquire(&self, run_id: &str) -> Result<Lease> {
        let owner = self.new_id("own");
        let now = self.inner.clock.now_ms();
        self.inner.store.acquire_lease(run_id, &owner, now, &self.inner.options.lease).await
    }

    /// Runs a started machine under a lease, releasing the lease unless the process "crashed".
    pub(crate) async fn run_leased(
        &self,
        lease: Lease,
        machine: RunMachine,
        opts: &SendOptions,
        before: StoreCounters,
    ) -> Result<RunResult> {
        let mut driver = Driver::new(self, lease, opts);
        let outcome = driver.drive(machine).await;
        match outcome {
            Err(e) if e.code == ErrorCode::Crashed => Err(e),
            Err(e) => {
                if e.code != ErrorCode::SessionBusy {
                    if !e.retryable {
                        // The store refused a write for good (e.g. an entry over its value limit), so nothing of
                        // it was written: record the failed attempt on what is stored, so that `attempts` grows
                        // and the sweep sees a run that cannot progress instead of resuming it for ever.
                        self.record_failure(&driver.lease, &e).await;
                    }
                    let _ = self.inner.store.release_lease(&driver.lease).await;
                }
                Err(e)
            }
            Ok((machine, outcome)) => {
                let _ = self.inner.store.release_lease(&driver.lease).await;
                let used = self.inner.store.counters().since(&before);
                let mut stats = driver.stats;
                stats.store_reads = used.reads;
                stats.store_writes = used.writes;
                stats.store_bytes = used.bytes_written;
                match outcome.error {
                    Some(e) => Err(e),
                    None => Ok(RunResult::of(machine.checkpoint(), &outcome, stats)),
                }
            }
        }
    }

    /// Records a failed attempt (`lastError`, `attempts + 1`) on the stored run under `lease`. Best effort: when
    /// this commit fails too, the original error is what the caller sees either way.
    async fn record_failure(&self, lease: &Lease, err: &Error) {
        let Ok(Some(cp)) = self.inner.store.load(&lease.run_id).await else { return };
        let opts = SendOptions::default();
        let cfg = self.machine_config(&lease.run_id, &opts);
        let Ok(machine) = RunMachine::start(cfg, Some(cp), Start::Failed(err.clone()), self.inner.clock.now_ms())
        else {
            return;
        };
        // The outcome carries `err` again; only whether the commit was written matters here, and either way the
        // caller reports the original error.
        let _ = Driver::new(self, lease.clone(), &opts).drive(machine).await;
    }

    async fn execute(&self, run_id: &str, start: Start, opts: &SendOptions) -> Result<Option<RunResult>> {
        validate_run_id(run_id)?;
        let before = self.inner.store.counters();
        // Refusals that need no lease (and so write nothing).
        let pre = self.inner.store.load(run_id).await?;
        match (&pre, &start) {
            (None, Start::Resume) => return Ok(None),
            (Some(cp), Start::Resume) if cp.status == RunStatus::Finished => return Ok(None),
            // A send that creates a run: the id may not take a suffix only the runtime creates (`.heal`).
            (None, Start::Send(_)) => validate_new_run_id(run_id)?,
            _ => {}
        }
        // A dry run of the start on what is stored: every refusal (awaiting approval, drift under `error`, a
        // missing tool, empty input) happens here, before the lease is written, so a refused request changes
        // nothing in the store.
        RunMachine::start(self.machine_config(run_id, opts), pre, start.clone(), self.inner.clock.now_ms())?;
        let lease = self.acquire(run_id).await?;
        let cp = match self.inner.store.load(run_id).await {
            Ok(cp) => cp,
            Err(e) => {
                let _ = self.inner.store.release_lease(&lease).await;
                return Err(e);
            }
        };
        if matches!(start, Start::Resume) && cp.as_ref().is_none_or(|c| c.status == RunStatus::Finished) {
            let _ = self.inner.store.release_lease(&lease).await;
            return Ok(None);
        }
        if let (None, Start::Send(_)) = (&cp, &start) {
            // Deleted between the first read and the lease: this send creates the run.
            if let Err(e) = validate_new_run_id(run_id) {
                let _ = self.inner.store.release_lease(&lease).await;
                return Err(e);
            }
        }
        let machine = match RunMachine::start(self.machine_config(run_id, opts), cp, start, self.inner.clock.now_ms()) {
            Ok(m) => m,
            Err(e) => {
                let _ = self.inner.store.release_lease(&lease).await;
                return Err(e);
            }
        };
        self.run_leased(lease, machine, opts, before).await.map(Some)
    }
}

/// The approvals API of an agent.
pub struct Approvals<'a> {
    agent: &'a Agent,
}

impl Approvals<'_> {
    /// Pending approval records, oldest first.
    pub async fn list(&self) -> Result<Vec<ApprovalRecord>> {
        let all = self.agent.inner.store.list_approvals().await?;
        Ok(all.into_iter().filter(|a| a.status == ApprovalStatus::Pending).collect())
    }

    /// Resolves an approval (see [`Approvals::resolve_with`]).
    pub async fn resolve(&self, decision: Resolve) -> Result<RunResult> {
        self.resolve_with(decision, SendOptions::default()).await
    }

    /// Records a decision. When it was the last pending approval of the pause, the run resumes: each paused
    /// call gets its result (the tool's, if approved — it runs at most once — or a rejection with the note),
    /// the turn's remaining calls run (and may pause again), then the model is called. A stale approval (its
    /// run deleted or replaced) fails with `STEADFAST_APPROVAL_ORPHANED` and is withdrawn.
    pub async fn resolve_with(&self, decision: Resolve, opts: SendOptions) -> Result<RunResult> {
        let inner = &self.agent.inner;
        let store = &inner.store;
        let before = store.counters();
        let Some(stored) = store.get_approval(&decision.id).await? else {
            return Err(Error::new(ErrorCode::ApprovalNotFound, format!("no approval '{}'", decision.id))
                .with_approval(&decision.id));
        };
        let mut rec = decide(&stored, decision.approved, decision.note.clone())?;
        let run_id = rec.run_id.clone();
        let orphaned = |cp: &Option<Checkpoint>| !awaits(cp.as_ref(), &decision.id);
        let pre = store.load(&run_id).await?;
        if orphaned(&pre) {
            store.delete_approval(&decision.id).await?;
            return Err(orphan_error(&run_id, &decision.id));
        }
        let pre = pre.unwrap_or_default();
        rec.decided_at = Some(inner.clock.now_ms());
        let mut siblings = Vec::new();
        for aid in pre.approval_ids.iter().filter(|a| **a != rec.id) {
            siblings.extend(store.get_approval(aid).await?);
        }
        let decisions = match plan_resolution(&pre.approval_ids, &rec, &siblings) {
            Resolution::Resume { decisions } => decisions,
            Resolution::Wait { still_pending } => {
                store.put_approval(&rec).await?;
                let outcome = Outcome {
                    status: RunStatus::AwaitingApproval,
                    finish_reason: Some(FinishReason::AwaitingApproval),
                    note: None,
                    error: None,
                };
                let mut res = RunResult::of(&pre, &outcome, RunStats::default());
                res.approval_ids = still_pending;
                res.approval_id = res.approval_ids.first().cloned();
                return Ok(res);
            }
        };
        let lease = self.agent.acquire(&run_id).await?;
        let cp = match store.load(&run_id).await {
            Ok(cp) if !orphaned(&cp) => cp,
            Ok(_) => {
                let _ = store.release_lease(&lease).await;
                store.delete_approval(&decision.id).await?;
                return Err(orphan_error(&run_id, &decision.id));
            }
            Err(e) => {
                let _ = store.release_lease(&lease).await;
                return Err(e);
            }
        };
        let batch = cp.as_ref().map(|c| c.approval_ids.clone()).unwrap_or_default();
        let machine = match RunMachine::start(
            self.agent.machine_config(&run_id, &opts),
            cp,
            Start::Approvals(decisions),
            inner.clock.now_ms(),
        ) {
            Ok(m) => m,
            Err(e) => {
                // Nothing decided is written: the approval stays pending for the right agent.
                let _ = store.release_lease(&lease).await;
                return Err(e);
            }
        };
        store.put_approval(&rec).await?;
        let res = self.agent.run_leased(lease, machine, &opts, before).await;
        // The pause's records are withdrawn once the run has moved past it; after a crash, a lost lease or a
        // failure before the decisions were committed, the run still waits on them and they stay.
        let consumed = match &res {
            Ok(_) => true,
            Err(e) if e.code == ErrorCode::Crashed => false,
            Err(_) => match store.load(&run_id).await {
                Ok(cp) => !awaits_any(cp.as_ref(), &batch),
                Err(_) => false,
            },
        };
        if consumed {
            for aid in batch {
                let _ = store.delete_approval(&aid).await;
            }
        }
        res
    }
}

fn orphan_error(run_id: &str, approval_id: &str) -> Error {
    Error::new(
        ErrorCode::ApprovalOrphaned,
        format!("approval '{approval_id}' belongs to run '{run_id}', which was deleted or replaced; it was withdrawn"),
    )
    .with_run(run_id)
    .with_approval(approval_id)
}
