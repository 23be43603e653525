//! [`Agent`]: the public runtime API (`send`, `resume`, `approvals`, `delete`, `pending`, …). An agent is a
//! handle on its dependencies (model, tools, hooks, store, clock, timer, random source, options), built once by
//! [`AgentBuilder::build`]; each execution runs under the runtime's one lease helper and its driver.

use super::approvals::Approvals;
use super::deps::{Deps, RegisteredTool};
use super::hooks::Hook;
use super::traits::{EventSink, Model, Tool, ToolSpec, Warn};
use crate::core::approval::PendingWait;
use crate::core::checkpoint::{Checkpoint, RunStatus};
use crate::core::error::{Error, ErrorCode, Result};
use crate::core::fingerprint::Fingerprint;
use crate::core::ids::{check_reserved_suffix, validate_new_run_id, validate_run_id};
use crate::core::machine::{RunMachine, Start};
use crate::core::schema::Schema;
use crate::core::transcript::Message;
use crate::rng::{Rng, SplitMix64};
use crate::store::{HistoryEntry, PendingRun, RunStore};
use crate::time::{Clock, Sleep};
use std::collections::BTreeSet;
use std::rc::Rc;

use super::options::SubagentOptions;
use super::options::{AgentOptions, SendOptions};
use super::result::RunResult;

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

/// A durable agent: a model, tools, instructions and a store.
#[derive(Clone)]
pub struct Agent {
    pub(crate) deps: Rc<Deps>,
}

/// A sub-agent as its lead declares it (see [`AgentBuilder::subagent`]).
struct SubagentDecl {
    name: String,
    description: String,
    builder: AgentBuilder,
    opts: SubagentOptions,
}

/// Builds an [`Agent`].
pub struct AgentBuilder {
    hooks: Vec<Rc<dyn Hook>>,
    model: Rc<dyn Model>,
    /// Models that take a call the agent's model failed, in order ([`AgentBuilder::fallback`]).
    fallbacks: Vec<Rc<dyn Model>>,
    /// The models' breakers ([`AgentBuilder::breakers`]).
    breakers: Option<Rc<super::Breakers>>,
    /// Its counters ([`AgentBuilder::metrics`]).
    metrics: Option<Rc<super::Metrics>>,
    /// Its name in the counters: a sub-agent's or handoff agent's name in its lead's declaration (else `name`).
    label: Option<String>,
    tools: Vec<Rc<dyn Tool>>,
    instructions: String,
    store: Option<Rc<dyn RunStore>>,
    options: AgentOptions,
    clock: Option<Rc<dyn Clock>>,
    sleep: Option<Rc<dyn Sleep>>,
    rng: Option<Rc<dyn Rng>>,
    warn: Option<Warn>,
    observer: Option<Rc<dyn EventSink>>,
    /// Where its executions' spans go ([`AgentBuilder::tracing`]).
    tracing: Option<super::trace::Tracing>,
    subagents: Vec<SubagentDecl>,
    max_subagent_depth: usize,
    /// The agents its runs may hand the conversation to, and this agent's own name among them.
    handoffs: Vec<SubagentDecl>,
    name: String,
    /// How its lead's calls run it, when this agent is a sub-agent.
    child_opts: SubagentOptions,
    gate: Option<Rc<dyn super::RecoveryGate>>,
    child_host: Option<Rc<dyn super::ChildHost>>,
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

    /// Adds a fallback model: when a model call's retries run out with a retryable failure (the provider is down,
    /// overloaded, rate-limited past its retries), the next model of the chain — the agent's model, then its
    /// fallbacks in the order added — gets the same request (each provider formats it for its own API). The
    /// chain spends the one retry policy between its models, not a policy each: `maxAttempts` attempts and
    /// `deadlineMs` bound the whole call; the agent's model gets `maxAttempts / n` of them plus the remainder,
    /// every fallback `maxAttempts / n`, and each at least one (past the deadline, a fallback gets one attempt
    /// and no retry). A failure that is not retryable (a refused request, a bad key) ends the call as without
    /// fallbacks. The turn records which fallback answered (`model` on its assistant message and `step` event),
    /// a `provider.fallback` event is emitted at each step down the chain, the turn is priced by the model that
    /// answered, and the agent's fingerprint names the whole chain.
    pub fn fallback(self, model: impl Model + 'static) -> Self {
        self.fallback_rc(Rc::new(model))
    }

    /// [`AgentBuilder::fallback`] of a shared model.
    pub fn fallback_rc(mut self, model: Rc<dyn Model>) -> Self {
        self.fallbacks.push(model);
        self
    }

    /// The breakers its models' calls go through (with `AgentOptions::breaker`): shared with whoever holds the
    /// same [`super::Breakers`] (the Worker: every request of an isolate). Default: the agent's own, shared with
    /// its sub-agents and handoff team.
    pub fn breakers(mut self, breakers: Rc<super::Breakers>) -> Self {
        self.breakers = Some(breakers);
        self
    }

    /// The counters it adds to ([`super::Metrics`]: retries, fallbacks, loop and budget stops, …): shared with
    /// whoever holds the same one (the Worker: every request of an isolate). Default: the agent's own, shared
    /// with its sub-agents and handoff team.
    pub fn metrics(mut self, metrics: Rc<super::Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Declares a sub-agent: the model sees a tool `name` (`{task}`) whose call runs `agent` on the task as a
    /// child run of its own (`<run>.sub-<name>-<call key>`). The sub-agent shares this agent's store,
    /// clock, timer, random source, warnings and observer unless its builder sets its own. Its runs are
    /// drift-checked under this agent's `onAgentDrift` (each paused level when it resumes; the top agent's
    /// policy holds for the whole tree), whatever its own options say. Resolve its approvals, deliver its events
    /// and resume its runs through this agent: it owns the whole tree.
    pub fn subagent(self, name: impl Into<String>, description: impl Into<String>, agent: AgentBuilder) -> Self {
        self.subagent_with(name, description, agent, SubagentOptions::default())
    }

    /// [`AgentBuilder::subagent`] with options: a detached sub-agent's call answers at once and its child runs
    /// apart from the lead (see [`SubagentOptions`]).
    pub fn subagent_with(
        mut self,
        name: impl Into<String>,
        description: impl Into<String>,
        agent: AgentBuilder,
        opts: SubagentOptions,
    ) -> Self {
        let (name, description) = (name.into(), description.into());
        self.subagents.push(SubagentDecl { name, description, builder: agent, opts });
        self
    }

    /// How deep sub-agents may nest below this agent (default 3): a call that would start a child deeper answers
    /// with a `STEADFAST_SUBAGENT_DEPTH` error result. The top agent's setting holds for the whole tree.
    pub fn max_subagent_depth(mut self, depth: usize) -> Self {
        self.max_subagent_depth = depth;
        self
    }

    /// Declares an agent this agent's runs may hand the conversation to: every agent of the team (this one, as
    /// [`AgentBuilder::name`], and each declared here) sees a `transfer_to_<name>` tool for each other one
    /// (`description` says what `name` does). The first such call of a turn hands the conversation over once the
    /// turn's results are in: the run goes on in the same run id with `agent`'s model, tools and instructions (a
    /// system message). Limits, policies, hooks, store and clock stay this agent's; `agent` may declare tools and
    /// sub-agents, not handoffs of its own. At most `maxHandoffs` ([`AgentOptions::max_handoffs`]) per run.
    pub fn handoff(mut self, name: impl Into<String>, description: impl Into<String>, agent: AgentBuilder) -> Self {
        let opts = SubagentOptions::default();
        self.handoffs.push(SubagentDecl { name: name.into(), description: description.into(), builder: agent, opts });
        self
    }

    /// This agent's name in its handoff team (default `lead`): the others hand the conversation back to it with
    /// `transfer_to_<name>`.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// The recovery gate its runs' own recovery steps ([`Agent::wake`]: strict mode's alarms, a recovery queue's
    /// consumers) take a slot of before they resume a run, when the sweep options set a `ceiling`: at most that
    /// many resumes on the provider at once across everyone sharing the gate (ramped after an outage). The
    /// Worker's is an object per provider; [`super::LocalGate`] is one process's.
    pub fn recovery_gate(mut self, gate: Rc<dyn super::RecoveryGate>) -> Self {
        self.gate = Some(gate);
        self
    }

    /// Where its sub-agent calls (and its sub-agents', at every level) execute their child runs: strict mode's
    /// Worker gives each child run its own Durable Object. Without one (the default) a child executes in its
    /// lead's process. The call decides what to execute (start, resume or read the child) either way.
    pub fn child_host(mut self, host: Rc<dyn super::ChildHost>) -> Self {
        self.child_host = Some(host);
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

    /// Sets where the agent writes warnings meant for the operator (one line each): today a resume by a changed
    /// agent under `onAgentDrift: warn` (besides its `agent.drift` event). The npm package passes
    /// `console.warn`; without one, warnings are only events.
    pub fn warn(mut self, warn: Warn) -> Self {
        self.warn = Some(warn);
        self
    }

    /// Sets a sink that sees the events of every execution of this agent besides each call's own sink (and
    /// that is told each journal position as it is committed): a hub of watchers, such as a run object's
    /// ([`crate::runtime::Watchers`]).
    pub fn observer(mut self, sink: Rc<dyn EventSink>) -> Self {
        self.observer = Some(sink);
        self
    }

    /// Traces its executions: each one's spans (OpenTelemetry GenAI conventions, see [`crate::core::trace`])
    /// go to `exporter` as they end. Its sub-agents and handoff team trace to the same one unless their builders
    /// set their own.
    pub fn tracing(mut self, exporter: Rc<dyn super::SpanExporter>, opts: crate::core::trace::TraceOptions) -> Self {
        self.tracing = Some(super::trace::Tracing { exporter, opts });
        self
    }

    /// Checks the configuration and builds the agent. Fails with `STEADFAST_CONFIG_INVALID` for duplicate or
    /// empty tool names, schemas that do not compile, a missing store, or (on wasm) a missing clock/timer.
    pub fn build(self) -> Result<Agent> {
        let depth = self.max_subagent_depth;
        self.build_at(0, depth)
    }

    /// Builds the agent `level` sub-agent levels below the top, whose depth limit is `max_depth`.
    fn build_at(mut self, level: usize, max_depth: usize) -> Result<Agent> {
        let cfg = |m: String| Error::new(ErrorCode::ConfigInvalid, m);
        let store = self.store.clone().ok_or_else(|| cfg("an agent needs a store (e.g. MemoryStore::new())".into()))?;
        // One set of breakers for the agent, its sub-agents and its team (made here when none was given).
        self.breakers = Some(self.breakers.take().unwrap_or_default());
        self.metrics = Some(self.metrics.take().unwrap_or_default());
        let mut subagents = Vec::new();
        let mut child_calls: Vec<(String, Rc<dyn super::deps::ChildCall>)> = Vec::new();
        for decl in std::mem::take(&mut self.subagents) {
            let mut b = decl.builder;
            b.store = b.store.or_else(|| Some(store.clone()));
            b.clock = b.clock.or_else(|| self.clock.clone());
            b.sleep = b.sleep.or_else(|| self.sleep.clone());
            b.rng = b.rng.or_else(|| self.rng.clone());
            b.warn = b.warn.or_else(|| self.warn.clone());
            b.observer = b.observer.or_else(|| self.observer.clone());
            b.tracing = b.tracing.or_else(|| self.tracing.clone());
            b.child_host = b.child_host.or_else(|| self.child_host.clone());
            b.breakers = b.breakers.or_else(|| self.breakers.clone());
            b.metrics = b.metrics.or_else(|| self.metrics.clone());
            b.label = Some(decl.name.clone());
            b.options.on_agent_drift = self.options.on_agent_drift;
            if decl.opts.abandon && !decl.opts.detached {
                return Err(cfg(format!(
                    "sub-agent '{}': only a detached sub-agent's child may be abandoned",
                    decl.name
                )));
            }
            if decl.opts.detached && self.options.steer_poll_ms.is_none() {
                return Err(cfg(format!(
                    "sub-agent '{}' is detached: its result comes to the lead as a queued message, which needs \
                     steering on (steerPollMs)",
                    decl.name
                )));
            }
            b.child_opts = decl.opts;
            let child = b.build_at(level + 1, max_depth)?;
            let (child_model, child_prices) = (child.deps.model.id(), &child.deps.options.prices);
            if self.options.budget().limits_cost() && child_prices.get(child_model).is_none() {
                return Err(cfg(format!(
                    "sub-agent '{}': its model '{child_model}' has no price, and its lead limits cost (add it to prices)",
                    decl.name
                )));
            }
            if !Rc::ptr_eq(&child.deps.store, &store) {
                return Err(cfg(format!("sub-agent '{}' must use its lead's store", decl.name)));
            }
            let (tool, call) = child.as_subagent(decl.name.clone(), decl.description, max_depth);
            child_calls.push((decl.name.clone(), call));
            self.tools.push(tool);
            subagents.push((decl.name, child.deps.clone()));
        }
        let handoffs = self.build_team(&store, level, max_depth)?;
        let mut names = BTreeSet::new();
        let mut tools = Vec::new();
        let mut specs = Vec::new();
        // The wait tools asked for, each once (a list: a handful of kinds, and no BTreeSet instance for them).
        let mut wanted = Vec::new();
        let builtins = self
            .options
            .wait_tools
            .iter()
            .filter(|w| {
                let new = !wanted.contains(*w);
                if new {
                    wanted.push(**w);
                }
                new
            })
            .map(|w| w.tool());
        let all: Vec<Rc<dyn Tool>> = builtins.chain(self.tools).collect();
        for t in all {
            let name = t.name().to_string();
            if !crate::core::ids::is_tool_name(&name) {
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
            // A sub-agent's tool (names are unique: checked above).
            let subagent = child_calls.iter().find(|(n, _)| n == t.name()).map(|(_, c)| c.clone());
            tools.push(RegisteredTool { tool: t, schema, subagent });
        }
        if self.options.max_steps == 0 {
            return Err(cfg("maxSteps must be at least 1".into()));
        }
        if self.options.budget().has_zero() {
            return Err(cfg("budget limits must be at least 1 (left out: no limit)".into()));
        }
        for model in std::iter::once(&self.model).chain(&self.fallbacks) {
            if self.options.budget().limits_cost() && self.options.prices.get(model.id()).is_none() {
                return Err(cfg(format!(
                    "maxCostUsd needs a price for model '{}' (add it to prices): its turns would have no cost",
                    model.id()
                )));
            }
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
        // The chain is the model: a fallback added or removed is a changed agent.
        let chain: Vec<&str> = std::iter::once(&self.model).chain(&self.fallbacks).map(|m| m.id()).collect();
        let fingerprint = Fingerprint::compute(
            &chain.join(" | "),
            specs.iter().map(|s| (s.name.as_str(), &s.input_schema)),
            &self.instructions,
        );
        Ok(Agent {
            deps: Rc::new(Deps {
                hooks: self.hooks,
                model: self.model,
                fallbacks: self.fallbacks,
                breakers: self.breakers.unwrap_or_default(),
                metrics: self.metrics.unwrap_or_default(),
                label: self.label.unwrap_or_else(|| self.name.clone()),
                tools,
                specs,
                instructions: self.instructions,
                store,
                options: self.options,
                clock,
                sleep,
                rng,
                warn: self.warn,
                observer: self.observer,
                tracing: self.tracing,
                fingerprint,
                level,
                subagents,
                team_name: self.name,
                handoffs,
                child_opts: self.child_opts,
                gate: self.gate,
                child_host: self.child_host,
            }),
        })
    }
}

impl AgentBuilder {
    /// Builds the agents of this agent's handoff team (each with a `transfer_to_` tool for every other one, and
    /// this agent's store, clock, timer, random source, warnings, observer and options) and adds this agent's
    /// own `transfer_to_` tools.
    fn build_team(
        &mut self,
        store: &Rc<dyn RunStore>,
        level: usize,
        max_depth: usize,
    ) -> Result<Vec<(String, Rc<Deps>)>> {
        let cfg = |m: String| Error::new(ErrorCode::ConfigInvalid, m);
        let decls = std::mem::take(&mut self.handoffs);
        if decls.is_empty() {
            return Ok(Vec::new());
        }
        let mut team = vec![(self.name.clone(), format!("the agent the conversation started with ('{}')", self.name))];
        for d in &decls {
            if team.iter().any(|(n, _)| *n == d.name) {
                return Err(cfg(format!("two agents of the handoff team are named '{}'", d.name)));
            }
            team.push((d.name.clone(), d.description.clone()));
        }
        let mut members = Vec::new();
        let mut subagent_names: BTreeSet<String> = BTreeSet::new();
        subagent_names.extend(self.subagents.iter().map(|s| s.name.clone()));
        for decl in decls {
            let mut b = decl.builder;
            if !b.handoffs.is_empty() {
                return Err(cfg(format!(
                    "handoff agent '{}' declares handoffs of its own: declare every agent of the team on the lead",
                    decl.name
                )));
            }
            for s in &b.subagents {
                if !subagent_names.insert(s.name.clone()) {
                    return Err(cfg(format!("two agents of the handoff team declare a sub-agent '{}'", s.name)));
                }
            }
            b.store = Some(store.clone());
            b.clock = b.clock.or_else(|| self.clock.clone());
            b.sleep = b.sleep.or_else(|| self.sleep.clone());
            b.rng = b.rng.or_else(|| self.rng.clone());
            b.warn = b.warn.or_else(|| self.warn.clone());
            b.observer = b.observer.or_else(|| self.observer.clone());
            b.tracing = b.tracing.or_else(|| self.tracing.clone());
            b.child_host = b.child_host.or_else(|| self.child_host.clone());
            b.breakers = b.breakers.or_else(|| self.breakers.clone());
            b.metrics = b.metrics.or_else(|| self.metrics.clone());
            b.label = Some(decl.name.clone());
            b.options = self.options.clone();
            for (name, description) in team.iter().filter(|(n, _)| *n != decl.name) {
                b.tools.push(Rc::new(super::handoff::TransferTool::new(name, description)));
            }
            members.push((decl.name, b.build_at(level, max_depth)?.deps));
        }
        for (name, description) in &team[1..] {
            self.tools.push(Rc::new(super::handoff::TransferTool::new(name, description)));
        }
        Ok(members)
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
            fallbacks: Vec::new(),
            breakers: None,
            metrics: None,
            label: None,
            tools: Vec::new(),
            instructions: String::new(),
            store: None,
            options: AgentOptions::default(),
            clock: None,
            sleep: None,
            rng: None,
            warn: None,
            observer: None,
            tracing: None,
            subagents: Vec::new(),
            max_subagent_depth: super::options::DEFAULT_MAX_SUBAGENT_DEPTH,
            handoffs: Vec::new(),
            name: "lead".into(),
            child_opts: SubagentOptions::default(),
            gate: None,
            child_host: None,
        }
    }

    /// The agent's fingerprint.
    pub fn fingerprint(&self) -> &Fingerprint {
        &self.deps.fingerprint
    }

    /// The store.
    pub fn store(&self) -> &Rc<dyn RunStore> {
        &self.deps.store
    }

    /// Its counters (shared with its sub-agents and handoff team, and with whoever gave it the same
    /// [`super::Metrics`]): retries, fallbacks, breaker refusals, loop and budget stops, reconciliations and
    /// quarantines, per agent.
    pub fn metrics(&self) -> &Rc<super::Metrics> {
        &self.deps.metrics
    }

    /// Sends input on run `run_id`: starts it, resumes it (pending calls first, then the input), or continues
    /// a finished run as a conversation (M2). Refused with `STEADFAST_SESSION_AWAITING_APPROVAL` while it
    /// waits on an approval, and with `STEADFAST_SESSION_BUSY` while another execution holds its lease. A new
    /// run's id may not end with `.heal` (`STEADFAST_SESSION_ID_INVALID`: reserved for diagnosis forks).
    pub async fn send(&self, run_id: &str, input: impl Into<Input>, opts: SendOptions) -> Result<RunResult> {
        let input = input.into().0;
        validate_run_id(run_id)?;
        // A session's turns (and a schedule's fires) continue through the session (the schedule), never here.
        check_reserved_suffix(run_id)?;
        if opts.queue {
            return self.send_queued(run_id, input, opts).await;
        }
        if opts.interrupt {
            return Err(
                Error::invalid_input("interrupt applies to a queued message: send it with queue").with_run(run_id)
            );
        }
        let res = self.execute(run_id, Start::Send(input), &opts).await?;
        self.deps.verdict(res.ok_or_else(|| Error::internal("send produced no result"))?)
    }

    /// Finishes an unfinished run; `None` when there is nothing to resume (unknown or finished run). An id that
    /// names no run but a session (`pending()` lists a session's turns under their session id) finishes the
    /// session's interrupted newest turn, as `session(id).resume()` does.
    ///
    /// A run that finished on its budget (`budget-exceeded`) goes on from where it stopped once the limit is
    /// raised; under the same budget the resume fails with `STEADFAST_BUDGET_EXCEEDED`.
    pub async fn resume(&self, run_id: &str, opts: SendOptions) -> Result<Option<RunResult>> {
        self.resume_run(run_id, opts).await?.map(|r| self.deps.verdict(r)).transpose()
    }

    /// [`Agent::resume`] for the runtime's own resumptions (the sweep, alarms, deliveries): a budget stop is
    /// a result there, whatever `onExceeded` says (the run is finished; nothing failed).
    pub(crate) async fn resume_run(&self, run_id: &str, opts: SendOptions) -> Result<Option<RunResult>> {
        let resumed = self.execute(run_id, Start::Resume, &opts).await?;
        if resumed.is_none() && crate::core::ids::validate_session_id(run_id).is_ok() {
            // Nothing under that run id (or a finished run): a session of that id may have an unfinished turn.
            if self.deps.store.load(run_id).await?.is_none() {
                return self.session(run_id)?.resume(opts).await;
            }
        }
        Ok(resumed)
    }

    /// The approvals API.
    pub fn approvals(&self) -> Approvals<'_> {
        Approvals::new(&self.deps)
    }

    /// The store's runs, read and deleted without executing anything.
    pub fn runs(&self) -> Runs {
        Runs::new(self.deps.store.clone())
    }

    /// Deletes a run (its checkpoint, history and lease) and the child runs its sub-agent calls started, theirs
    /// too: a child run belongs to its lead (its id is derived from the lead's; nothing else reaches it). The lead
    /// goes first, so a delete cut short leaves children without their lead, never a lead without the children it
    /// would otherwise start over; such a child never runs again (an execution or a decision finds its lead gone
    /// and refuses) and is removed by deleting its own id. A later send starts the run over.
    pub async fn delete(&self, run_id: &str) -> Result<()> {
        validate_run_id(run_id)?;
        self.deps.delete_tree(run_id).await
    }

    /// The run's current checkpoint.
    pub async fn load(&self, run_id: &str) -> Result<Option<Checkpoint>> {
        self.runs().load(run_id).await
    }

    /// Every unfinished run (M11); a run awaiting approval lists what its tools wait on (`waits`).
    pub async fn pending(&self) -> Result<Vec<PendingRun>> {
        self.runs().pending().await
    }

    /// Past states of a run, newest first.
    pub async fn history(&self, run_id: &str, limit: usize) -> Result<Vec<HistoryEntry>> {
        self.runs().history(run_id, limit).await
    }

    pub(crate) async fn execute(&self, run_id: &str, start: Start, opts: &SendOptions) -> Result<Option<RunResult>> {
        Ok(self.execute_steered(run_id, start, opts).await?.map(|(res, _)| res))
    }

    /// [`Agent::execute`], with the ids of the queued messages the run has applied by its end (its `steered`).
    pub(crate) async fn execute_steered(
        &self,
        run_id: &str,
        start: Start,
        opts: &SendOptions,
    ) -> Result<Option<(RunResult, Vec<String>)>> {
        validate_run_id(run_id)?;
        // The reads before the lease are the run's too ([`crate::store::meter`]).
        crate::store::meter::scope(run_id, self.execute_metered(run_id, start, opts)).await
    }

    async fn execute_metered(
        &self,
        run_id: &str,
        start: Start,
        opts: &SendOptions,
    ) -> Result<Option<(RunResult, Vec<String>)>> {
        let deps = self.deps.for_run_or_err(run_id)?;
        let before = deps.store.counters();
        if self.deps.orphaned(run_id).await? {
            // A child run whose lead is not found: nothing of it runs.
            return match start {
                Start::Resume | Start::Drain => Ok(None),
                _ => Err(Deps::lead_gone(run_id)),
            };
        }
        // Refusals that need no lease (and so write nothing).
        let pre = deps.store.load(run_id).await?;
        match (&pre, &start) {
            (None, Start::Resume | Start::Drain) => return Ok(None),
            (Some(cp), Start::Resume) if !cp.resumable() => return Ok(None),
            // A send that creates a run: the id may not take a suffix only the runtime creates (`.heal`).
            (None, Start::Send(_)) => validate_new_run_id(run_id)?,
            (Some(_), Start::Turn { .. }) => return Err(turn_taken(run_id)),
            _ => {}
        }
        // A dry run of the start on what is stored: every refusal (awaiting approval, drift under `error`, a
        // missing tool, empty input) happens here, before the lease is written, so a refused request changes
        // nothing in the store.
        RunMachine::start(deps.machine_config(run_id, opts), pre, start.clone(), deps.now())?;
        let driven = deps
            .with_lease(run_id, true, async |lease, cp| {
                if matches!(start, Start::Resume) && cp.as_ref().is_none_or(|c| !c.resumable()) {
                    return Ok(None);
                }
                if matches!(start, Start::Drain) && cp.is_none() {
                    return Ok(None);
                }
                if let (None, Start::Send(_)) = (&cp, &start) {
                    // Deleted between the first read and the lease: this send creates the run.
                    validate_new_run_id(run_id)?;
                }
                if let (Some(_), Start::Turn { .. }) = (&cp, &start) {
                    // Another send created this turn between the first read and the lease.
                    return Err(turn_taken(run_id));
                }
                let mut cfg = deps.traced_config(run_id, opts, lease);
                if cp.is_none() {
                    // This execution creates the run: it gets its idempotency-key scope.
                    cfg.key_scope = Some(deps.new_key_scope(run_id));
                }
                let machine = RunMachine::start(cfg, cp, start, deps.now())?;
                deps.drive(lease, machine, opts).await.map(Some)
            })
            .await?;
        let Some(driven) = driven else { return Ok(None) };
        let steered = driven.machine.checkpoint().steered.clone();
        let report = driven.report(deps.store.counters().since(&before))?;
        self.deps.after_execution(run_id, opts).await?;
        Ok(Some((report, steered)))
    }
}

/// A new turn's run exists already: another send of the session created it meanwhile (retry: the session then
/// continues after it).
fn turn_taken(run_id: &str) -> Error {
    Error::new(
        ErrorCode::SessionBusy,
        format!("another send of this session started turn '{run_id}' meanwhile: send again to continue after it"),
    )
    .with_run(run_id)
}

/// Options of [`Runs::delete_with`] (the documents' `checkpoints.delete(id, { keepHistory })`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DeleteOptions {
    /// Keep the run's history after its checkpoint is gone: refused (see [`Runs::delete_with`]).
    pub keep_history: bool,
}

/// A store's runs as the documents' `store.checkpoints` shows them: load, history, the unfinished ones, delete —
/// with run ids checked as every operation checks them, and nothing executed. An agent's `load`, `history`,
/// `pending` and `delete` are these.
#[derive(Clone)]
pub struct Runs {
    store: Rc<dyn RunStore>,
}

impl Runs {
    /// The runs of `store`.
    pub fn new(store: Rc<dyn RunStore>) -> Runs {
        Runs { store }
    }

    /// Deletes a run (its checkpoint, history and lease). A later send starts it over.
    pub async fn delete(&self, run_id: &str) -> Result<()> {
        validate_run_id(run_id)?;
        self.store.delete(run_id).await
    }

    /// [`Runs::delete`] with the documents' options: `keepHistory: true` ("clear the checkpoint, keep its
    /// history") is refused with `STEADFAST_CONFIG_INVALID` and deletes nothing — a run's history is its
    /// write-once journal and goes with it (fork the run first to keep a copy).
    pub async fn delete_with(&self, run_id: &str, opts: DeleteOptions) -> Result<()> {
        validate_run_id(run_id)?;
        if opts.keep_history {
            return Err(Error::new(
                ErrorCode::ConfigInvalid,
                "delete with keepHistory: a run's history is its journal and goes with it; fork the run first to keep a copy",
            )
            .with_run(run_id));
        }
        self.store.delete(run_id).await
    }

    /// The run's current checkpoint.
    pub async fn load(&self, run_id: &str) -> Result<Option<Checkpoint>> {
        validate_run_id(run_id)?;
        self.store.load(run_id).await
    }

    /// Every unfinished run (M11); a run awaiting approval lists what its tools wait on (`waits`).
    pub async fn pending(&self) -> Result<Vec<PendingRun>> {
        let mut runs = self.store.pending().await?;
        // What a paused run's tools wait on: one read of each wait's record (tokens left out: a listing never
        // shows a capability). A record that cannot be read is left out here; `GET /approvals` reports it.
        for run in runs.iter_mut().filter(|r| r.status == RunStatus::AwaitingApproval) {
            for id in run.approval_ids.iter().filter(|id| id.starts_with(crate::core::wait::WAIT_ID_PREFIX)) {
                if let Ok(Some(rec)) = self.store.get_approval(id).await {
                    run.waits.extend(PendingWait::of(&rec, "").map(|w| PendingWait { token: None, ..w }));
                }
            }
        }
        Ok(runs)
    }

    /// Past states of a run, newest first.
    pub async fn history(&self, run_id: &str, limit: usize) -> Result<Vec<HistoryEntry>> {
        validate_run_id(run_id)?;
        self.store.history(run_id, limit).await
    }
}
