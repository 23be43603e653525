//! Sub-agents: a lead agent delegates a task to another agent through a tool call, and the sub-agent's work is
//! a durable run of its own, a *child run* (`<lead>.sub-<name>-<call key>`, [`subagent_run_id`]).
//!
//! * The lead's model sees one tool per sub-agent (`{task}`). The call starts the child run, or, when the lead
//!   resumes after a crash, resumes it where it stopped (the id is the same for the same call): a child is never
//!   started over and a recorded child step never runs again. The child's final text is the call's result,
//!   and what the child spent is added to the lead's usage with it (kept on the result: `ToolResult::usage`).
//! * A child paused on an approval (or any wait) pauses the lead: the call answers with an event wait, and the
//!   lead pauses once nothing else runs. Resolving the child's approval — through the lead's agent, which owns
//!   the whole tree ([`Deps::for_run`]) — resumes the child and, when it finishes, delivers its result to the
//!   lead's wait, which resumes the lead: one request. Whichever of the two ends last does the delivery: the
//!   child's execution when it finishes ([`Deps::after_execution`]: "deliver up"), or the lead's when it pauses
//!   on a child that finished meanwhile ("deliver down").
//! * A **detached** sub-agent ([`crate::runtime::SubagentOptions::detached`]) answers its call at once with the child's id
//!   (`{"started": …}`) and the lead goes on: its child is written as a new run that has not run yet, and the
//!   recovery sweep (the cron tick in both modes; the Rust library's `sweep`) executes it like any interrupted
//!   run. When it finishes, its final text comes to the lead as a queued message ([`crate::core::steer`]) whose
//!   id is derived from the child's: the lead applies it once, at its next boundary while it runs, after its
//!   pause, or — when it has finished — the sweep continues it with the message. The call writes an *outbox*
//!   entry (a due-index entry naming the child) before it creates the child, kept until the lead has applied
//!   the result: so a crash between the child's end and the message, or a message its lead's last queue read
//!   missed, loses nothing — the sweep takes the entry up and delivers again (the message's id makes a repeat
//!   a no-op) or looks later. On the lead's delete a detached child is deleted with it, or runs
//!   on when its sub-agent says `abandon` (its result then has no lead to go to).
//! * The depth of the tree is bounded (the lead's `AgentBuilder::max_subagent_depth`, default 3): a call
//!   that would go deeper answers with a `STEADFAST_SUBAGENT_DEPTH` error the model reads.

use super::agent::Agent;
use super::deps::{ChildCall, Deps};
use super::options::SendOptions;
use super::traits::{Tool, ToolContext, ToolError, ToolOutput};
use super::waits::Events;
use crate::core::checkpoint::{Checkpoint, RunStatus};
use crate::core::error::{Error, ErrorCode, Result};
use crate::core::ids::{subagent_parent, subagent_path, subagent_run_id};
use crate::core::machine::Start;
use crate::core::steer::{QueuedMessage, DUE_AFTER_MS, MESSAGE_ID_PREFIX};
use crate::core::transcript::Message;
use crate::core::wait::WaitRequest;
use crate::store::DueWait;
use async_trait::async_trait;
use futures::future::LocalBoxFuture;
use futures::FutureExt;
use serde_json::{json, Value};
use std::rc::Rc;

impl Agent {
    /// This agent as its lead's tool `name`: the tool the lead's model sees, and the same call as the driver runs
    /// it (with the lead's execution's options). `max_depth` is the lead's depth limit.
    pub(crate) fn as_subagent(
        &self,
        name: String,
        description: String,
        max_depth: usize,
    ) -> (Rc<dyn Tool>, Rc<dyn ChildCall>) {
        let tool = Rc::new(SubagentTool::new(name, description, self.clone(), max_depth));
        (tool.clone(), tool)
    }
}

/// When a detached child's outbox entry comes due after it was written (longer than Workers KV's minute of
/// cached reads, so the sweep does not take the child for missing when it reads it).
const OUTBOX_AFTER_MS: u64 = 2 * DUE_AFTER_MS;

/// How long after a detached child ended its outbox keeps looking for a lead that shows the call that started it.
const GIVE_UP_AFTER_MS: u64 = 24 * 60 * DUE_AFTER_MS;

/// Longest final text a detached child's message carries (characters; the rest is read from the child run).
const MAX_DELIVERED_CHARS: usize = 32_000;

/// The id of the message that brings detached child `child_id`'s result to its lead (the same for every
/// delivery of it: the lead applies one).
pub(crate) fn detached_message_id(child_id: &str) -> String {
    let hash = crate::core::fingerprint::sha256_hex(child_id.as_bytes());
    format!("{MESSAGE_ID_PREFIX}sub{}", &hash[..32])
}

/// The lead's tool for one sub-agent.
pub(crate) struct SubagentTool {
    name: String,
    description: String,
    schema: Value,
    child: Agent,
    max_depth: usize,
}

impl SubagentTool {
    /// A detached call: the child is written as a run that has not started (its outbox entry first), unless a
    /// run of the call did so before; the answer names it.
    async fn start_detached(
        &self,
        child_id: &str,
        task: &str,
        opts: &SendOptions,
    ) -> std::result::Result<ToolOutput, ToolError> {
        let deps = &self.child.deps;
        let started = ToolOutput::json(json!({"started": child_id, "subagent": self.name, "detached": true}));
        if deps.store.load(child_id).await.map_err(ToolError::Propagate)?.is_some() {
            return Ok(started);
        }
        let outbox =
            DueWait { at: deps.now() + OUTBOX_AFTER_MS, wait_id: Deps::DETACHED_DUE.into(), run_id: child_id.into() };
        deps.store.put_due(&outbox).await.map_err(ToolError::Propagate)?;
        // Bounded by what its lead had left (its spend does not come back into the lead's usage: it is bounded
        // here, once).
        let cfg = deps.machine_config(child_id, &SendOptions { budget_cap: opts.budget_cap, ..Default::default() });
        let start = Start::Send(vec![Message::user(task)]);
        let cp = crate::core::machine::RunMachine::start(cfg, None, start, deps.now()).map_err(child_failed)?;
        match self.child.write_new_run(child_id, cp.checkpoint().clone()).await {
            // Another execution of the same call wrote it first.
            Err(e) if e.code == ErrorCode::SessionExists => Ok(started),
            Err(e) => Err(ToolError::Propagate(e)),
            Ok(_) => Ok(started),
        }
    }
}

impl SubagentTool {
    /// Executes child run `child_id`: starts it on `task` (`None`: resumes it), here or where its agent's
    /// [`ChildHost`](super::ChildHost) executes children (its events come back to the lead's sinks as they
    /// happen); the status its execution ended on.
    async fn execute_child(&self, child_id: &str, task: Option<&str>, opts: &SendOptions) -> Result<Option<RunStatus>> {
        let Some(host) = self.child.deps.child_host.clone() else {
            let start = match task {
                Some(task) => Start::Turn { prior: None, input: vec![Message::user(task)] },
                None => Start::Resume,
            };
            return Ok(self.child.execute(child_id, start, opts).await?.map(|r| r.status));
        };
        let call = super::ChildExecution {
            run_id: child_id.into(),
            tool_call_id: opts.subagent_call.clone().unwrap_or_default(),
            task: task.map(Into::into),
            budget_cap: opts.budget_cap,
            traceparent: opts.traceparent.map(|s| s.traceparent()),
        };
        // Where the child's events would go here (they come tagged).
        let relay = match (opts.events.clone(), self.child.deps.observer.clone()) {
            (Some(a), Some(b)) => Some(Rc::new(super::traits::Tee(a, b)) as Rc<dyn super::EventSink>),
            (a, b) => a.or(b),
        };
        host.execute(&call, relay).await
    }

    pub(crate) fn new(name: String, description: String, child: Agent, max_depth: usize) -> SubagentTool {
        let schema = json!({
            "type": "object",
            "properties": {"task": {"type": "string", "description": "What the sub-agent should do."}},
            "required": ["task"],
        });
        SubagentTool { name, description, schema, child, max_depth }
    }
}

/// A child run's failure as the lead's call sees it: retryable ones reject the lead's attempt (it resumes the
/// child later), the others are an error result the lead's model reads.
fn child_failed(e: Error) -> ToolError {
    if e.retryable() {
        ToolError::Propagate(e)
    } else {
        ToolError::typed(e.code.as_str(), e.message)
    }
}

#[async_trait(?Send)]
impl Tool for SubagentTool {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        &self.description
    }
    fn input_schema(&self) -> &Value {
        &self.schema
    }

    async fn execute(&self, args: Value, ctx: ToolContext) -> std::result::Result<ToolOutput, ToolError> {
        let opts = SendOptions { abort: Some(ctx.abort.clone()), ..Default::default() };
        self.run(args, ctx, opts).await
    }
}

#[async_trait(?Send)]
impl ChildCall for SubagentTool {
    /// The call: starts or resumes the child run with `opts` (the lead's execution's abort signal), or reads
    /// its result.
    async fn run(
        &self,
        args: Value,
        ctx: ToolContext,
        opts: SendOptions,
    ) -> std::result::Result<ToolOutput, ToolError> {
        let task = args.get("task").and_then(Value::as_str).unwrap_or_default();
        let child_id = subagent_run_id(&ctx.run_id, &self.name, &ctx.call_key).map_err(child_failed)?;
        let depth = subagent_path(&child_id).len();
        if depth > self.max_depth {
            return Err(child_failed(Error::new(
                ErrorCode::SubagentDepth,
                format!(
                    "sub-agent '{}' would run at depth {depth}; this agent allows at most {}",
                    self.name, self.max_depth
                ),
            )));
        }
        if self.child.deps.child_opts.detached {
            return self.start_detached(&child_id, task, &opts).await;
        }
        let stored = self.child.deps.store.load(&child_id).await.map_err(ToolError::Propagate)?;
        let ran = match stored {
            // The call's first execution: the child starts (refused if another execution of the same call created
            // it meanwhile: busy, so the lead's attempt is retried and then finds it).
            None => self.execute_child(&child_id, Some(task), &opts).await,
            Some(cp) => match cp.status {
                RunStatus::Finished => return Ok(result_of(&cp)),
                RunStatus::AwaitingApproval => return Ok(ToolOutput::wait(WaitRequest::Event { deadline: None })),
                _ => self.execute_child(&child_id, None, &opts).await,
            },
        };
        let ran = match ran {
            Ok(r) => r,
            Err(e) if e.code == ErrorCode::SessionExists => {
                return Err(ToolError::Propagate(Error::new(ErrorCode::SessionBusy, e.message)))
            }
            Err(e) => return Err(child_failed(e)),
        };
        match ran {
            Some(RunStatus::Finished) | None => {
                let cp = self.child.deps.store.load(&child_id).await.map_err(ToolError::Propagate)?;
                match cp {
                    Some(cp) if cp.status == RunStatus::Finished => Ok(result_of(&cp)),
                    Some(cp) if cp.status == RunStatus::AwaitingApproval => {
                        Ok(ToolOutput::wait(WaitRequest::Event { deadline: None }))
                    }
                    _ => Err(ToolError::Propagate(Error::new(
                        ErrorCode::SessionBusy,
                        format!("child run '{child_id}' did not finish: the lead tries again"),
                    ))),
                }
            }
            Some(RunStatus::AwaitingApproval) => Ok(ToolOutput::wait(WaitRequest::Event { deadline: None })),
            Some(_) => Err(ToolError::Propagate(Error::new(
                ErrorCode::SessionBusy,
                format!("child run '{child_id}' did not finish: the lead tries again"),
            ))),
        }
    }
}

impl Agent {
    /// The other side of a [`ChildHost`](super::ChildHost): executes the child run `call` names, as its lead's
    /// call asked (strict mode: in the child's own Durable Object), its events to `events`; the status its
    /// execution ended on. A run that is no child run is refused (`STEADFAST_INVALID_INPUT`).
    pub async fn execute_child(
        &self,
        call: &super::ChildExecution,
        events: Option<Rc<dyn super::EventSink>>,
    ) -> Result<Option<RunStatus>> {
        if subagent_parent(&call.run_id).is_none() {
            return Err(Error::invalid_input(format!("run '{}' is not a sub-agent's child run", call.run_id)));
        }
        let opts = SendOptions {
            events,
            subagent_call: Some(call.tool_call_id.clone()).filter(|c| !c.is_empty()),
            budget_cap: call.budget_cap,
            traceparent: call.traceparent.as_deref().and_then(crate::core::trace::SpanContext::parse_traceparent),
            ..Default::default()
        };
        let start = match &call.task {
            Some(task) => Start::Turn { prior: None, input: vec![Message::user(task.as_str())] },
            None => Start::Resume,
        };
        Ok(self.execute(&call.run_id, start, &opts).await?.map(|r| r.status))
    }
}

/// What a finished child answers its lead's call with: its final text, and what it spent.
fn result_of(cp: &Checkpoint) -> ToolOutput {
    ToolOutput { usage: Some(cp.total_usage), ..ToolOutput::text(cp.answer()) }
}

impl Deps {
    /// The dependencies run `run_id` executes with: this agent's for its own runs, a sub-agent's for a child
    /// run (found by the sub-agent names in the id, from this agent's depth down). `None` for a child of a
    /// sub-agent this agent does not declare (any more), or a run above this agent's depth. A diagnosis fork
    /// (`<run>.heal`) executes with its source's agent.
    pub(crate) fn for_run(&self, run_id: &str) -> Option<&Deps> {
        let mut source = run_id;
        while let Some(s) = source.strip_suffix(crate::core::sweep::HEAL_SUFFIX) {
            source = s;
        }
        let path = subagent_path(source);
        let mut deps = self;
        for name in path.get(self.level..)? {
            deps = deps.subagent(name)?;
        }
        Some(deps)
    }

    /// [`Deps::for_run`], or the coded error for a child run whose sub-agent is gone.
    pub(crate) fn for_run_or_err(&self, run_id: &str) -> Result<&Deps> {
        self.for_run(run_id).ok_or_else(|| {
            Error::new(
                ErrorCode::AgentDrift,
                format!("run '{run_id}' is a child run of a sub-agent this agent does not declare"),
            )
            .with_run(run_id)
        })
    }

    /// After an execution of `run_id` ended: a finished child run's result goes to its parent's wait (when the
    /// parent is within this agent's reach and waits on it); a run paused while one of its sub-agents' children
    /// finished meanwhile gets that result. Each delivery resumes the run it goes to (and so on up the tree).
    pub(crate) fn after_execution<'a>(
        &'a self,
        run_id: &'a str,
        opts: &'a SendOptions,
    ) -> LocalBoxFuture<'a, Result<()>> {
        async move {
            if subagent_parent(run_id).is_none() && self.for_run(run_id).is_none_or(|d| !d.has_subagents()) {
                return Ok(());
            }
            let Some(cp) = self.store.load(run_id).await? else { return Ok(()) };
            match cp.status {
                RunStatus::Finished => self.deliver_up(&cp, opts).await,
                RunStatus::AwaitingApproval => self.deliver_down(&cp, opts).await,
                _ => Ok(()),
            }
        }
        .boxed_local()
    }

    /// Delivers finished child `child`'s result to its parent, when the parent waits on it.
    async fn deliver_up(&self, child: &Checkpoint, opts: &SendOptions) -> Result<()> {
        let Some((parent_id, name)) = subagent_parent(&child.run_id) else { return Ok(()) };
        if self.for_run(&child.run_id).is_some_and(|d| d.child_opts.detached) {
            return self.deliver_detached(child).await.map(|_| ());
        }
        if self.for_run(parent_id).is_none() {
            // Above this agent: the parent's own execution (the sub-agent's call) reads the child's result.
            return Ok(());
        }
        let Some(parent) = self.store.load(parent_id).await? else { return Ok(()) };
        if parent.status != RunStatus::AwaitingApproval {
            return Ok(());
        }
        let Some(token) = child_token(&parent, name, &child.run_id) else { return Ok(()) };
        self.deliver(&token, child, opts, Some(parent_id)).await
    }

    /// The sweep's take-up of a lead's wait on a child (a due entry [`Deps::deliver`] left when a delivery
    /// failed): the finished child's result is delivered now. `Ok(())` when done or when there is nothing to do
    /// (the record is no sub-agent's wait, its child has not finished, its lead moved on).
    pub(crate) async fn redeliver(
        &self,
        rec: &crate::core::approval::ApprovalRecord,
        opts: &SendOptions,
    ) -> Result<()> {
        let Some(parent) = self.store.load(&rec.run_id).await? else { return Ok(()) };
        let Some(deps) = self.for_run(&parent.run_id) else { return Ok(()) };
        let call = &rec.tool_call;
        if parent.status != RunStatus::AwaitingApproval || deps.subagent(&call.name).is_none() {
            return Ok(());
        }
        let Some(key) = parent.call_key(&call.id) else { return Ok(()) };
        let Ok(child_id) = subagent_run_id(&parent.run_id, &call.name, &key) else { return Ok(()) };
        match self.store.load(&child_id).await? {
            Some(child) if child.status == RunStatus::Finished => {
                let token = crate::core::wait::token(parent.own_key_scope(), &call.id);
                self.deliver(&token, &child, opts, None).await
            }
            _ => Ok(()),
        }
    }

    /// Delivers the results of `parent`'s children that finished while it paused on them.
    async fn deliver_down(&self, parent: &Checkpoint, opts: &SendOptions) -> Result<()> {
        let Some(deps) = self.for_run(&parent.run_id) else { return Ok(()) };
        let Some(last) = parent.messages.iter().rev().find(|m| !m.tool_calls().is_empty()) else { return Ok(()) };
        for call in last.tool_calls() {
            if deps.subagent(&call.name).is_none_or(|d| d.child_opts.detached) {
                continue;
            }
            let Some(key) = parent.call_key(&call.id) else { continue };
            let Ok(child_id) = subagent_run_id(&parent.run_id, &call.name, &key) else { continue };
            let Some(child) = self.store.load(&child_id).await? else { continue };
            if child.status == RunStatus::Finished {
                let token = crate::core::wait::token(parent.own_key_scope(), &call.id);
                self.deliver(&token, &child, opts, Some(&parent.run_id)).await?;
            }
        }
        Ok(())
    }

    /// One delivery of `child`'s result to the wait of `token`; a wait that is gone or resolved already (another
    /// delivery got there first) is no error. When it fails otherwise (the lead is busy, the store is down) and
    /// `lead` is given, a due entry for the wait is left first, so the sweep delivers it a minute later
    /// ([`Deps::redeliver`]): the child has finished, and nothing else would.
    async fn deliver(&self, token: &str, child: &Checkpoint, opts: &SendOptions, lead: Option<&str>) -> Result<()> {
        let mut outcome = crate::core::wait::delivered(&Value::String(child.answer()))?;
        outcome.usage = Some(child.total_usage);
        // The lead's events go where the child's went (the caller of the request that finished the child).
        let opts = SendOptions { abort: opts.abort.clone(), events: opts.events.clone(), ..Default::default() };
        match Events::new(self).deliver_outcome(token, outcome, opts).await {
            Ok(_) => Ok(()),
            Err(e) if matches!(e.code, ErrorCode::WaitNotFound | ErrorCode::WaitAlreadyResolved) => Ok(()),
            Err(e) => {
                if let (Some(run_id), Some(wait_id)) = (lead, crate::core::wait::wait_id(token)) {
                    let at = self.now() + crate::core::steer::DUE_AFTER_MS;
                    // Ignored: the delivery's own error is the one to report; without the entry, a later
                    // decision or delivery on the lead's pause still reads the child (deliver down).
                    let _ = self.store.put_due(&crate::store::DueWait { at, wait_id, run_id: run_id.into() }).await;
                }
                Err(e)
            }
        }
    }
}

impl Deps {
    /// The wait id of a detached child's outbox entry in the due index (its run id is the child's): written
    /// before the child is, taken up by the sweep ([`Deps::detached_due`]).
    pub(crate) const DETACHED_DUE: &'static str = "detached";

    /// Queues finished detached child `child`'s result for its lead (see the module docs). `Ok(true)` when there
    /// is nothing (more) to do: the lead applied it, or is gone. The message's due entry is due now: the sweep's
    /// next look continues a lead that finished (a running or paused one reads its queue itself).
    pub(crate) async fn deliver_detached(&self, child: &Checkpoint) -> Result<bool> {
        let Some((lead_id, name)) = subagent_parent(&child.run_id) else { return Ok(true) };
        let Some(lead) = self.store.load(lead_id).await? else { return Ok(true) };
        let id = detached_message_id(&child.run_id);
        if call_of(&lead, name, &child.run_id).is_none() {
            // A lead deleted and made again under the same id did not start this child: its result has no lead.
            // (On KV the lead read may also be an old one: the entry looks again, for a day after the child ended.)
            return Ok(self.now().saturating_sub(child.saved_at) > GIVE_UP_AFTER_MS);
        }
        if lead.steered.contains(&id) {
            return Ok(true);
        }
        let text = crate::core::error::cap_chars(&child.answer(), MAX_DELIVERED_CHARS);
        let text = format!("Sub-agent '{name}' finished (run {}):\n{text}", child.run_id);
        let msg = QueuedMessage::new(&lead, id, child.saved_at, vec![Message::user(text)], false)?;
        self.store.put_due(&DueWait { at: self.now(), wait_id: msg.id.clone(), run_id: lead_id.into() }).await?;
        self.store.put_queued(&msg).await?;
        Ok(false)
    }

    /// The sweep's take-up of a detached child's outbox entry: done with once the child is gone or its lead
    /// applied its result (or is gone); otherwise a finished child's result is queued (again, if its own
    /// execution did: the lead applies it once) and the entry moves on, further the longer the child has not
    /// moved (a minute to an hour). `Ok(())`: this entry can go.
    pub(crate) async fn detached_due(&self, entry: &DueWait) -> Result<()> {
        let Some(child) = self.store.load(&entry.run_id).await? else { return Ok(()) };
        if child.status == RunStatus::Finished && self.deliver_detached(&child).await? {
            return Ok(());
        }
        let now = self.now();
        let later = now.saturating_sub(child.saved_at).clamp(DUE_AFTER_MS, 60 * DUE_AFTER_MS);
        self.store.put_due(&DueWait { at: now + later, ..entry.clone() }).await
    }
}

/// What a child run's lead says of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LeadOf {
    /// Its call is the lead's, without a result or with the child's (or it was abandoned): it may run.
    Running,
    /// Its lead is not found, or is a run that never called it.
    Gone,
    /// Its lead's call is recorded cancelled: the lead went on without it.
    Cancelled,
}

/// Run `lead`'s call of sub-agent `name` whose child run is `child_id`.
fn call_of<'a>(lead: &'a Checkpoint, name: &str, child_id: &str) -> Option<&'a crate::core::transcript::ToolCall> {
    lead.messages.iter().flat_map(|m| m.tool_calls()).find(|c| {
        c.name == name
            && lead.call_key(&c.id).and_then(|k| subagent_run_id(&lead.run_id, name, &k).ok()).as_deref()
                == Some(child_id)
    })
}

/// The event token of `parent`'s call of sub-agent `name` whose child run is `child_id`.
fn child_token(parent: &Checkpoint, name: &str, child_id: &str) -> Option<String> {
    let last = parent.messages.iter().rev().find(|m| !m.tool_calls().is_empty())?;
    let call = last.tool_calls().iter().find(|c| {
        c.name == name
            && parent
                .call_key(&c.id)
                .and_then(|k| subagent_run_id(&parent.run_id, name, &k).ok())
                .is_some_and(|id| id == child_id)
    })?;
    Some(crate::core::wait::token(parent.own_key_scope(), &call.id))
}

/// A child run of a run, as `GET /runs/{id}` lists it.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase")]
pub struct ChildRun {
    /// The sub-agent.
    pub name: String,
    /// The lead's call that runs it.
    pub tool_call_id: String,
    /// The child run's id.
    pub run_id: String,
    /// Its status; `null` before the call started it.
    pub status: Option<RunStatus>,
    /// What it has spent so far (its model turns and its own children's; read from its checkpoint: a child is
    /// checkpointed like any run); `null` before the call started it.
    pub usage: Option<crate::core::transcript::Usage>,
}

impl Agent {
    /// The child runs of run `run_id`'s sub-agent calls ([`Agent::children`]); none for a run that does not exist.
    pub async fn children_of(&self, run_id: &str) -> Result<Vec<ChildRun>> {
        match self.load(run_id).await? {
            Some(cp) => self.children(&cp).await,
            None => Ok(Vec::new()),
        }
    }

    /// The child runs of run `cp`'s sub-agent calls, in call order (calls of a sub-agent its agent no longer
    /// declares included: their ids tell).
    pub async fn children(&self, cp: &Checkpoint) -> Result<Vec<ChildRun>> {
        self.deps.children(cp).await
    }
}

impl Deps {
    /// [`Agent::children`] (this agent is the top of the tree).
    async fn children(&self, cp: &Checkpoint) -> Result<Vec<ChildRun>> {
        let mut out = Vec::new();
        for (name, tool_call_id, run_id) in self.child_calls(cp) {
            let child = self.store.load(&run_id).await?;
            let (status, usage) = (child.as_ref().map(|c| c.status), child.map(|c| c.total_usage));
            out.push(ChildRun { name, tool_call_id, run_id, status, usage });
        }
        Ok(out)
    }

    /// Run `cp`'s sub-agent calls, in call order: each one's sub-agent, call id and child run id (whether or not
    /// the call started it). Reads nothing; nothing at all for an agent whose team declares no sub-agents (a KV
    /// watch asks at every read of the run).
    pub(crate) fn child_calls(&self, cp: &Checkpoint) -> Vec<(String, String, String)> {
        let Some(deps) = self.for_run(&cp.run_id).filter(|d| d.has_subagents()) else { return Vec::new() };
        let mut out = Vec::new();
        for call in cp.messages.iter().flat_map(|m| m.tool_calls()) {
            if deps.subagent(&call.name).is_none() {
                continue;
            }
            let Some(key) = cp.call_key(&call.id) else { continue };
            let Ok(run_id) = subagent_run_id(&cp.run_id, &call.name, &key) else { continue };
            out.push((call.name.clone(), call.id.clone(), run_id));
        }
        out
    }

    /// Deletes run `run_id` and the child runs its sub-agent calls started, theirs too (see [`Agent::delete`]):
    /// each run before its children.
    pub(crate) async fn delete_tree(&self, run_id: &str) -> Result<()> {
        let mut left = vec![run_id.to_string()];
        while let Some(id) = left.pop() {
            let children = match self.for_run(&id).is_some_and(|d| d.has_subagents()) {
                // No read for an agent without sub-agents.
                false => Vec::new(),
                true => match self.store.load(&id).await? {
                    Some(cp) => self.children(&cp).await?,
                    None => Vec::new(),
                },
            };
            self.store.delete(&id).await?;
            // An abandoned detached child runs on.
            let abandoned = |c: &ChildRun| self.for_run(&c.run_id).is_some_and(|d| d.child_opts.abandon);
            left.extend(children.into_iter().filter(|c| c.status.is_some() && !abandoned(c)).map(|c| c.run_id));
        }
        Ok(())
    }

    /// The refusal of a child run whose lead is not found ([`Deps::gone_with_lead`]).
    pub(crate) fn lead_gone(run_id: &str) -> Error {
        let lead = subagent_parent(run_id).map_or("", |(lead, _)| lead);
        Error::new(
            ErrorCode::CheckpointNotFound,
            format!(
                "run '{run_id}' is a child of run '{lead}', which is not found (deleted; on Workers KV possibly not \
                 visible here yet: try again in a minute); it is removed once that is proof (at once where reads \
                 are current, a day after its last change on Workers KV), or by deleting '{run_id}'"
            ),
        )
        .with_run(run_id)
    }

    /// Whether `run_id` is a child run whose lead is not found, or is a run made again under the lead's id that
    /// never called it (a delete cut short, or one that raced the lead's call, left it), or, attached, whose lead's
    /// call is recorded cancelled (the lead's execution was aborted before the call's result: the lead goes on
    /// without it; on Workers KV once that result is visible where it is read, within a minute): nothing of it
    /// may run. It is not deleted here ([`Deps::orphaned`] does, given proof).
    pub(crate) async fn gone_with_lead(&self, run_id: &str) -> Result<bool> {
        Ok(self.lead_of(run_id).await? != LeadOf::Running)
    }

    /// What child run `run_id`'s lead says of it ([`LeadOf`]).
    async fn lead_of(&self, run_id: &str) -> Result<LeadOf> {
        let Some((lead, name)) = subagent_parent(run_id) else { return Ok(LeadOf::Running) };
        if self.for_run(run_id).is_some_and(|d| d.child_opts.abandon) {
            // Abandoned by its lead's delete: it runs on.
            return Ok(LeadOf::Running);
        }
        let Some(lead) = self.store.load(lead).await? else { return Ok(LeadOf::Gone) };
        let Some(call) = call_of(&lead, name, run_id) else { return Ok(LeadOf::Gone) };
        // A detached child is its own from its call's start (an abort that beat the call's answer cancels nothing).
        let detached = self.for_run(run_id).is_some_and(|d| d.child_opts.detached);
        let cancelled = !detached
            && lead.messages.iter().any(|m| {
                matches!(m, Message::Tool(r) if r.tool_call_id == call.id
                && r.kind == crate::core::transcript::ResultKind::Cancelled)
            });
        Ok(if cancelled { LeadOf::Cancelled } else { LeadOf::Running })
    }

    /// [`Deps::gone_with_lead`], and an orphan found so is removed (with the runs below it, [`Deps::delete_tree`])
    /// when that is proof: its lead's call is recorded cancelled (a result is final), or, for a lead not found,
    /// the store's reads are current ([`RunStore::reads_current`]: the memory
    /// store, strict mode's objects), or it has not changed for a day (Workers KV serves a cached miss or value for
    /// a minute at most; a day is the margin a detached child's outbox gives its lead too). A delete cut short
    /// after the lead so leaves nothing behind once the sweep, an alarm or a decision comes to its children.
    ///
    /// [`RunStore::reads_current`]: crate::store::RunStore::reads_current
    pub(crate) async fn orphaned(&self, run_id: &str) -> Result<bool> {
        let proof = match self.lead_of(run_id).await? {
            LeadOf::Running => return Ok(false),
            // A recorded result is final, on every store.
            LeadOf::Cancelled => true,
            LeadOf::Gone => {
                self.store.reads_current()
                    || self
                        .store
                        .load(run_id)
                        .await?
                        .is_some_and(|cp| self.now().saturating_sub(cp.saved_at) > GIVE_UP_AFTER_MS)
            }
        };
        if proof {
            self.delete_tree(run_id).await?;
        }
        Ok(true)
    }
}
