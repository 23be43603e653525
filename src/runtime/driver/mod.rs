//! The driver: performs a [`RunMachine`]'s effects against the model, tools and store it is given ([`Deps`]).
//!
//! It is the one place that awaits. It renews the lease while it waits, runs up to `tool_concurrency` tool
//! calls at once (they keep running while a commit is written; the calls that settle meanwhile, or within one
//! commit's time, at least 10 ms, of each other, are recorded together in one entry: a group commit), retries
//! model calls (the only retry layer, M15), watches the abort signal, numbers events, and can "crash" after any
//! effect for tests.
//!
//! [`Driver::drive`] is a short loop: it hands each effect to the method for its kind (`on_emit`, `on_commit`,
//! `on_call_model`, `on_gate`, `on_reconcile`, `on_run_tool`, `on_pause`; `Finish` ends it), hands the machine
//! the tool calls that settled (`hand_back_settled`, the group commit), starts queued calls, or waits for the
//! ones in flight. The calls it holds meanwhile (queued, in flight, settled, rewritten arguments) are in a
//! [`ToolPool`] (`pool`); whether a call is still waited for is the machine's truth (its `CallState`).

mod pool;

use super::deps::Deps;
use super::hooks::{HookContext, ToolResultDraft, Verdict};
#[cfg(feature = "testing")]
use super::options::CrashPoint;
use super::options::SendOptions;
use super::result::RunStats;
use super::traits::{AbortSignal, EventSink, ModelRequest, Tee, ToolContext, ToolError, ToolOutput};
use super::Counter;
use crate::core::approval::ApprovalRecord;
use crate::core::breaker::Permit;
use crate::core::checkpoint::FinishReason;
use crate::core::checkpoint::JournalEntry;
use crate::core::error::{Error, ErrorCode, Result};
use crate::core::events::{
    Event, EventEnvelope, HealRecord, StreamDelta, EVENT_SCHEMA_VERSION, HEAL_LOG_KEY, HEAL_LOG_MAX,
};
use crate::core::machine::{Effect, Gate, KeyedCall, ModelResponse, Outcome, RunMachine, ToolOutcome};
use crate::core::retry::ChainStep;
use crate::core::trace::{ExecutionInfo, Recorder};
use crate::core::transcript::{Message, ToolCall};
use crate::store::Lease;
use crate::store::{DueWait, QueuedMessage};
use pool::{Launch, ToolFuture, ToolPool};
use serde_json::{Map, Value};
use std::cell::Cell;
use std::future::Future;
use std::pin::pin;
use std::rc::Rc;
use std::task::Poll;

/// The longest a settled result waits for the other calls of its turn before it is committed (the group
/// commit's window is the last commit's duration, capped by this).
const GROUP_WINDOW_MAX_MS: u64 = 250;
/// The shortest group commit window: a store whose commits take no measurable time (a Durable Object's SQLite,
/// memory) would otherwise write one entry per settled result even when the calls of a turn settle a moment
/// apart. The trade: a settled result may wait this long for the others before it is recorded (a crash in
/// that moment runs it again, as it would during its commit); a turn's steps are not delayed by it.
const GROUP_WINDOW_MIN_MS: u64 = 10;

/// A traced execution hands its ended spans to the exporter once this many wait (and the rest at its end).
const EXPORT_EVERY_SPANS: usize = 64;

enum Race<T> {
    Done(T),
    Aborted,
    Tick,
}

pub(crate) struct Driver<'a> {
    deps: &'a Deps,
    /// The agent of the run's handoff team the conversation is with (`deps` without handoffs): the model the
    /// driver calls and the tools it gates and runs are this one's ([`Driver::follow`]).
    agent: &'a Deps,
    pub(crate) lease: Lease,
    /// The call's options (read after construction only by the test build's fault injection).
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    opts: &'a SendOptions,
    abort: AbortSignal,
    /// Where events go: the caller's sink and the agent's observer (either, both or none).
    sink: Option<Rc<dyn EventSink>>,
    /// The next event's `seq` (shared with the delta callback of a streaming model call).
    seq: Rc<Cell<u64>>,
    pub(crate) stats: RunStats,
    /// When the lease is renewed next (sooner after a failed renewal).
    next_renew_at: u64,
    /// Hook state (the checkpoint's `ext` object), and whether hooks changed it since the machine last saw it.
    ext: Map<String, Value>,
    ext_changed: bool,
    /// Whether the run's abort has been seen (and the machine told).
    abort_seen: bool,
    /// How long the last commit took (ms, by the clock): the group commit's window.
    last_commit_ms: u64,
    /// The records of the pause this execution took, if it paused (what the run waits on).
    pub(crate) paused: Vec<ApprovalRecord>,
    /// The queued messages handed to the machine (deleted once their ids are committed).
    handed: Vec<QueuedMessage>,
    /// What the run has left of its budget as calls start, shared by the turn's sub-agent calls without a result:
    /// the cap of the child runs its sub-agent calls create.
    child_cap: Option<crate::core::budget::BudgetCap>,
    /// The execution's spans so far, when it is traced (the agent traces and the machine has the execution's
    /// trace context: [`Deps::traced_config`]).
    trace: Option<Recorder>,
}

/// Which hook entry point to run.
enum HookPoint<'c> {
    BeforeTool(&'c mut ToolCall, bool),
    AfterTool(&'c ToolCall, &'c mut ToolResultDraft),
    BeforeModel(&'c [Message]),
    AfterModel(&'c mut ModelResponse),
}

impl<'a> Driver<'a> {
    pub(crate) fn new(deps: &'a Deps, lease: Lease, opts: &'a SendOptions) -> Driver<'a> {
        let now = deps.now();
        let sink = match (opts.events.clone(), deps.observer.clone()) {
            (Some(a), Some(b)) => Some(Rc::new(Tee(a, b)) as Rc<dyn EventSink>),
            (a, b) => a.or(b),
        }
        .map(|sink| super::traits::tagged(sink, &lease.run_id, opts.subagent_call.as_deref()));
        Driver {
            deps,
            agent: deps,
            lease,
            opts,
            abort: opts.abort.clone().unwrap_or_default(),
            sink,
            seq: Rc::new(Cell::new(0)),
            stats: RunStats::default(),
            next_renew_at: now.saturating_add(deps.options.lease.renew_every_ms),
            ext: Map::new(),
            ext_changed: false,
            abort_seen: false,
            last_commit_ms: 0,
            paused: Vec::new(),
            handed: Vec::new(),
            child_cap: None,
            trace: None,
        }
    }

    /// Starts the execution's trace when it is traced: its span follows from the previous execution's (the
    /// machine put this one's in the run's hook state for the next).
    fn start_trace(&mut self, m: &RunMachine) {
        let (Some(tracing), Some(context)) = (&self.deps.tracing, m.trace()) else { return };
        let info = ExecutionInfo {
            run_id: self.lease.run_id.clone(),
            agent: self.deps.label.clone(),
            model: self.deps.model.id().to_string(),
            epoch: self.lease.epoch,
            context: Some(context),
            parent: self.opts.traceparent,
            previous: m.previous_trace(),
        };
        self.trace = Some(Recorder::start(&info, tracing.opts, self.now()));
    }

    /// Hands the spans that ended to the exporter once there are a few (the rest go at the end).
    fn export_ended(&mut self) {
        if let (Some(r), Some(t)) = (&mut self.trace, &self.deps.tracing) {
            if r.ended_count() >= EXPORT_EVERY_SPANS {
                t.exporter.export(r.take_ended());
            }
        }
    }

    /// Ends the execution's trace (`machine`: what it drove to, when it got a verdict; `err`: why it did not)
    /// and hands every span left to the exporter.
    pub(crate) fn end_trace(&mut self, machine: Option<&RunMachine>, err: Option<&Error>) {
        let (Some(mut r), Some(t)) = (self.trace.take(), &self.deps.tracing) else { return };
        if let Some(m) = machine {
            r.run_usage(&m.checkpoint().usage);
        }
        let (spans, _) = r.finish(err, self.now());
        t.exporter.export(spans);
    }

    /// Runs every hook at one point, in order. Returns the deny reason of the first hook that denies (before
    /// a tool call), or the name of the last hook that changed the tool result (after one).
    async fn hooks(&mut self, m: &mut RunMachine, mut point: HookPoint<'_>) -> Result<Option<String>> {
        let deps: &'a Deps = self.deps;
        if deps.hooks.is_empty() {
            return Ok(None);
        }
        let mut events = Vec::new();
        let mut outcome = None;
        let mut failure = None;
        for hook in &deps.hooks {
            let mut ctx = HookContext {
                run_id: &self.lease.run_id,
                step: m.checkpoint().step_index,
                resumed_after_approval: matches!(point, HookPoint::BeforeTool(_, true)),
                state: &mut self.ext,
                events: &mut events,
                changed: &mut self.ext_changed,
            };
            let res = match &mut point {
                HookPoint::BeforeTool(call, _) => match hook.before_tool(&mut ctx, call).await {
                    Ok(Verdict::Deny(reason)) => {
                        outcome = Some(reason);
                        Ok(true)
                    }
                    Ok(Verdict::Continue) => Ok(false),
                    Err(e) => Err(e),
                },
                HookPoint::AfterTool(call, draft) => {
                    let before = (*draft).clone();
                    let r = hook.after_tool(&mut ctx, call, draft).await;
                    if **draft != before {
                        outcome = Some(hook.name().to_string());
                    }
                    r.map(|_| false)
                }
                HookPoint::BeforeModel(messages) => hook.before_model(&mut ctx, messages).await.map(|_| false),
                HookPoint::AfterModel(resp) => hook.after_model(&mut ctx, resp).await.map(|_| false),
            };
            match res {
                Ok(true) => break,
                Ok(false) => {}
                Err(e) => {
                    let e = if e.code == ErrorCode::Internal || e.code == ErrorCode::InvalidInput {
                        Error::new(ErrorCode::HookFailed, format!("hook '{}' failed: {}", hook.name(), e.message))
                    } else {
                        e
                    };
                    failure = Some(e);
                    break;
                }
            }
        }
        for e in events {
            if let Some(record) = HealRecord::of(&e, m.checkpoint().step_index, self.now()) {
                // Kept with the run (committed with the next boundary), the newest HEAL_LOG_MAX.
                let log = self.ext.entry(HEAL_LOG_KEY).or_insert_with(|| Value::Array(Vec::new()));
                if !log.is_array() {
                    *log = Value::Array(Vec::new());
                }
                // Through its text: the text writer's instance of HealRecord (a run's view writes it), not a JSON
                // value writer's; ignored (no record): a record (strings and numbers) always serialises.
                let v = serde_json::to_string(&record).ok().and_then(|t| serde_json::from_str::<Value>(&t).ok());
                if let (Value::Array(items), Some(v)) = (log, v) {
                    items.push(v);
                    let over = items.len().saturating_sub(HEAL_LOG_MAX);
                    items.drain(..over);
                }
                self.ext_changed = true;
            }
            self.emit(e);
        }
        if self.ext_changed {
            self.ext_changed = false;
            let ext = Value::Object(self.ext.clone());
            // Hook state is stored in the checkpoint: it must read back.
            match crate::core::limits::check_depth("hook state", &ext) {
                Ok(()) => m.set_ext(Some(ext)),
                Err(e) if failure.is_none() => {
                    failure =
                        Some(Error::new(ErrorCode::HookFailed, format!("a hook's state was refused: {}", e.message)))
                }
                Err(_) => {}
            }
        }
        match failure {
            Some(e) => Err(e),
            None => Ok(outcome),
        }
    }

    /// The gate of one call: unknown tool, invalid arguments (the JSON Schema, then the tool's own check), hooks (deny / rewrite), approval, intent.
    async fn gate(&mut self, m: &mut RunMachine, call: &ToolCall, pool: &mut ToolPool) -> Result<Gate> {
        let deps: &'a Deps = self.agent;
        let Some(t) = deps.tool(&call.name) else { return Ok(Gate::UnknownTool) };
        if let Err(errors) = t.schema.validate(&call.args) {
            return Ok(Gate::Invalid { message: errors.join("; ") });
        }
        if let Err(message) = t.tool.check_args(&call.args).await {
            return Ok(Gate::Invalid { message });
        }
        let mut rewritten = call.clone();
        if let Some(reason) = self.hooks(m, HookPoint::BeforeTool(&mut rewritten, false)).await? {
            return Ok(Gate::Denied { reason });
        }
        if rewritten.args != call.args {
            pool.rewrite_args(call.id.clone(), rewritten.args.clone());
        }
        if t.tool.needs_approval(&rewritten.args) {
            return Ok(Gate::NeedsApproval { approval_id: deps.new_id("apr") });
        }
        Ok(if t.tool.side_effecting() { Gate::RunWithIntent } else { Gate::Run })
    }

    fn now(&self) -> u64 {
        self.deps.now()
    }

    /// Follows the conversation to the agent of the team the machine's checkpoint names (a handoff moves it
    /// between a turn's last result and the next model call).
    fn follow(&mut self, m: &RunMachine) {
        let deps: &'a Deps = self.deps;
        self.agent = deps.member(m.checkpoint().agent.as_deref());
    }

    /// Drives the machine to its `Finish`: performs each effect it asks for (one method per kind), hands it the
    /// tool calls that settled (a group commit), starts queued calls, or waits for the ones in flight. `Err`
    /// means the execution stopped without a verdict: a crash (tests), a lost lease (BUSY) or a store failure.
    pub(crate) async fn drive(&mut self, mut m: RunMachine) -> Result<(RunMachine, Outcome)> {
        let mut pool = ToolPool::default();
        self.ext = match &m.checkpoint().ext {
            Some(Value::Object(map)) => map.clone(),
            _ => Map::new(),
        };
        self.start_trace(&m);
        self.durable(m.committed_through());
        loop {
            self.maybe_renew().await?;
            if !self.abort_seen && self.abort.is_aborted() {
                self.abort_seen = true;
                pool.cancel_all();
                m.notify_abort();
            }
            m.set_now(self.now());
            // The store operations made for the run since the last look go on its next journal entry.
            m.note_storage(crate::store::meter::take().priced(&self.deps.options.storage_prices));
            if let Some(effect) = m.poll_effect() {
                match effect {
                    Effect::Emit(event) => self.on_emit(event, &mut pool).await?,
                    Effect::Commit(entry) => self.on_commit(&mut m, entry, &mut pool).await?,
                    Effect::CallModel { step } => self.on_call_model(&mut m, step, &mut pool).await?,
                    Effect::Gate { calls } => self.on_gate(&mut m, &calls, &mut pool).await?,
                    Effect::Reconcile { calls } => self.on_reconcile(&mut m, &calls, &mut pool).await?,
                    Effect::RunTool { call, approval_id, key, wait_token } => {
                        self.on_run_tool(&mut m, Launch { call, approval_id, key, wait_token }, &mut pool).await?
                    }
                    Effect::Pause { approvals } => self.on_pause(&mut m, &approvals, &mut pool).await?,
                    Effect::ReadQueue => self.on_read_queue(&mut m, &mut pool).await?,
                    Effect::Finish(outcome) => {
                        // A result is reported only by a confirmed owner (a loser's journal is never read).
                        self.ensure_lease().await?;
                        // The queued messages this execution applied are committed now: their entries go.
                        let applied: Vec<QueuedMessage> = std::mem::take(&mut self.handed)
                            .into_iter()
                            .filter(|q| m.checkpoint().steered.contains(&q.id))
                            .collect();
                        self.forget_queued(&applied).await;
                        return Ok((m, outcome));
                    }
                }
            } else if pool.has_settled() {
                self.hand_back_settled(&mut m, &mut pool).await?;
            } else if pool.in_flight() == 0 {
                if pool.queue_is_empty() {
                    return Err(Error::internal("the run stalled: no effect to perform and no tool in flight"));
                }
                self.start_queued(&m, &mut pool).await?;
            } else {
                // Ignored: `false` (nothing in flight) cannot happen here; `None` (aborted) is seen at the
                // loop's head.
                let _ = self.wait_renewing(pool.next_settled()).await?;
            }
        }
    }

    /// [`Effect::Emit`]: the event goes to the sink.
    async fn on_emit(&mut self, event: Event, pool: &mut ToolPool) -> Result<()> {
        self.emit(event);
        self.after_effect(pool).await
    }

    /// [`Effect::Commit`]: the entry is appended to the journal while the tools in flight go on (the ones that
    /// settle meanwhile form the next batch); its duration is the next group commit's window.
    async fn on_commit(&mut self, m: &mut RunMachine, entry: JournalEntry, pool: &mut ToolPool) -> Result<()> {
        let store = self.deps.store.clone();
        let lease = self.lease.clone();
        let commit = store.commit(&lease, &entry, m.checkpoint());
        let started = self.now();
        pool.alongside(commit).await?;
        self.last_commit_ms = self.now().saturating_sub(started);
        self.stats.commits += 1;
        self.durable(entry.seq);
        self.after_effect(pool).await?;
        deliver(m, |m| m.notify_committed());
        Ok(())
    }

    /// [`Effect::CallModel`]: `before_model` hooks, the model call through the retry layer, `after_model` hooks.
    async fn on_call_model(&mut self, m: &mut RunMachine, step: u32, pool: &mut ToolPool) -> Result<()> {
        self.follow(m);
        // The hooks see the transcript while they may change the machine: a copy, made only when there are hooks
        // (it costs the whole transcript at every step).
        let before = if self.deps.hooks.is_empty() {
            Ok(None)
        } else {
            let messages = m.checkpoint().messages.clone();
            self.hooks(m, HookPoint::BeforeModel(&messages)).await
        };
        let mut answer = match before {
            Ok(_) => self.call_model(m, step).await,
            Err(e) => Err(e),
        };
        if let Ok(Some((resp, _))) = &mut answer {
            if let Err(e) = self.hooks(m, HookPoint::AfterModel(resp)).await {
                answer = Err(e);
            }
        }
        self.after_effect(pool).await?;
        match answer {
            Ok(Some((resp, by))) => deliver(m, |m| m.notify_model_answer(resp, by)),
            Ok(None) => {
                self.abort_seen = true;
                m.notify_abort();
            }
            Err(e) if e.code == ErrorCode::SessionBusy => return Err(e),
            Err(e) => deliver(m, |m| m.notify_model_failed(e)),
        }
        Ok(())
    }

    /// [`Effect::Gate`]: each call's gate, in call order; a hook that fails fails the attempt.
    async fn on_gate(&mut self, m: &mut RunMachine, calls: &[ToolCall], pool: &mut ToolPool) -> Result<()> {
        self.follow(m);
        let mut decisions = Vec::new();
        let mut failed = None;
        for c in calls {
            match self.gate(m, c, pool).await {
                Ok(g) => decisions.push((c.id.clone(), g)),
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        self.after_effect(pool).await?;
        match failed {
            Some(e) => m.notify_failed(e),
            None => deliver(m, |m| m.notify_gated(decisions)),
        }
        Ok(())
    }

    /// [`Effect::Reconcile`]: each side-effecting tool says whether an unrecorded effect happened.
    async fn on_reconcile(&mut self, m: &mut RunMachine, calls: &[KeyedCall], pool: &mut ToolPool) -> Result<()> {
        self.follow(m);
        let answers = self.reconcile(calls).await;
        self.after_effect(pool).await?;
        match answers {
            Ok(a) => deliver(m, |m| m.notify_reconciled(a)),
            Err(e) => m.notify_failed(e),
        }
        Ok(())
    }

    /// [`Effect::RunTool`]: the call is queued for a slot (with the arguments its gate's hooks rewrote), or, an
    /// approved call that `before_tool` hooks now deny, settles as denied without running.
    async fn on_run_tool(&mut self, m: &mut RunMachine, mut launch: Launch, pool: &mut ToolPool) -> Result<()> {
        let mut denied = None;
        if launch.approval_id.is_some() {
            // Hooks saw this call at the gate; they see it again right before it runs.
            match self.hooks(m, HookPoint::BeforeTool(&mut launch.call, true)).await {
                Ok(d) => denied = d,
                Err(e) => {
                    self.after_effect(pool).await?;
                    m.notify_failed(e);
                    return Ok(());
                }
            }
        } else if let Some(args) = pool.take_args(&launch.call.id) {
            launch.call.args = args;
        }
        match denied {
            Some(reason) => pool.settle(launch.call.id.clone(), ToolOutcome::Denied { reason }),
            None => pool.enqueue(launch),
        }
        self.start_queued(m, pool).await?;
        self.after_effect(pool).await
    }

    /// [`Effect::Pause`]: the approval records are written (shared records: only by a confirmed owner).
    async fn on_pause(&mut self, m: &mut RunMachine, approvals: &[ApprovalRecord], pool: &mut ToolPool) -> Result<()> {
        self.ensure_lease().await?;
        for a in approvals {
            // The due entry first: an entry whose record never landed is dropped when it comes due.
            if let Some(at) = a.due_at {
                let due = DueWait { at, wait_id: a.id.clone(), run_id: a.run_id.clone() };
                self.deps.store.put_due(&due).await?;
            }
            self.deps.store.put_approval(a).await?;
        }
        self.paused = approvals.to_vec();
        self.after_effect(pool).await?;
        deliver(m, |m| m.notify_approvals_recorded());
        Ok(())
    }

    /// [`Effect::ReadQueue`]: the run's queue is listed; the entries the run applied already (or that were queued
    /// for another run of its id) are deleted, the others handed to the machine. A listing that fails reads as
    /// empty: the next boundary reads again, and every queued message has a due entry the sweep acts on.
    async fn on_read_queue(&mut self, m: &mut RunMachine, pool: &mut ToolPool) -> Result<()> {
        // Deliberately ignored (`unwrap_or_default`): see above.
        let listed = self.deps.store.list_queued(&self.lease.run_id).await.unwrap_or_default();
        self.after_effect(pool).await?;
        let (spent, fresh): (Vec<QueuedMessage>, Vec<QueuedMessage>) =
            listed.into_iter().partition(|q| m.queue_entry_spent(q));
        self.forget_queued(&spent).await;
        self.handed.extend(fresh.iter().cloned());
        deliver(m, |m| m.notify_queue(fresh));
        Ok(())
    }

    /// Deletes queued messages and their due entries. Best effort: a message left behind is spent (its id is
    /// recorded), so whoever lists it next deletes it again.
    async fn forget_queued(&self, entries: &[QueuedMessage]) {
        for q in entries {
            // Deliberately ignored: see above.
            let _ = self.deps.store.delete_queued(q).await;
            let _ = self.deps.store.delete_due(&crate::runtime::steer::due_of(q)).await;
        }
    }

    /// Group commit: every call that has settled by now (while the last commit was written, or at the same time
    /// as this one, within the window: [`Self::gather`]) is handed to the machine in one batch, after its
    /// `after_tool` hooks, so one journal entry records them all. At most one commit is in flight: results
    /// settling during it form the next batch.
    async fn hand_back_settled(&mut self, m: &mut RunMachine, pool: &mut ToolPool) -> Result<()> {
        pool.collect_ready();
        self.gather(pool).await;
        if !self.abort_seen && self.abort.is_aborted() {
            // A call of the batch (or anything meanwhile) aborted the run: nothing of the batch is recorded as
            // executed; the loop's head sees the abort and cancels every unrecorded call.
            return Ok(());
        }
        let settled = pool.take_settled();
        let mut batch = Vec::with_capacity(settled.len());
        for (id, outcome) in settled {
            let outcome = match self.after_tool(m, &id, outcome).await {
                Ok(o) => o,
                Err(e) => ToolOutcome::Propagate(e),
            };
            batch.push((id, outcome));
        }
        deliver(m, |m| m.notify_tools_settled(batch));
        self.start_queued(m, pool).await
    }

    /// The group commit's window: a call settled while others of the turn still run. The step cannot go on
    /// before all of them are recorded, so waiting for them costs the step nothing as long as they settle
    /// within one commit's time: committing the first result alone would keep the next one waiting for that
    /// commit anyway. So this waits, up to as long as the last commit took (at least [`GROUP_WINDOW_MIN_MS`],
    /// at most [`GROUP_WINDOW_MAX_MS`]), for more calls to settle into the same entry.
    async fn gather(&mut self, pool: &mut ToolPool) {
        let window = self.last_commit_ms.clamp(GROUP_WINDOW_MIN_MS, GROUP_WINDOW_MAX_MS);
        if pool.in_flight() == 0 {
            return;
        }
        let deadline = self.now().saturating_add(window);
        let sleep = self.deps.sleep.clone();
        let mut timer = pin!(sleep.sleep(window));
        while pool.in_flight() > 0 && self.now() < deadline {
            let abort = &self.abort;
            let more = std::future::poll_fn(|cx| {
                if let Poll::Ready(more) = pool.poll_next_settled(cx) {
                    return Poll::Ready(more);
                }
                if timer.as_mut().poll(cx).is_ready() || abort.poll_aborted(cx).is_ready() {
                    return Poll::Ready(false);
                }
                Poll::Pending
            })
            .await;
            if !more {
                break;
            }
            pool.collect_ready();
        }
    }

    /// `after_tool` hooks on a settled call; a changed result becomes `Replaced`.
    async fn after_tool(&mut self, m: &mut RunMachine, id: &str, outcome: ToolOutcome) -> Result<ToolOutcome> {
        if self.deps.hooks.is_empty() {
            return Ok(outcome);
        }
        let Some(call) = m.pending_calls().into_iter().find(|c| c.id == id) else { return Ok(outcome) };
        let (mut draft, usage) = match &outcome {
            ToolOutcome::Ok { content, usage, .. } => {
                (ToolResultDraft { content: content.clone(), is_error: false }, *usage)
            }
            ToolOutcome::Failed { message } => (ToolResultDraft { content: message.clone(), is_error: true }, None),
            _ => return Ok(outcome),
        };
        match self.hooks(m, HookPoint::AfterTool(&call, &mut draft)).await? {
            Some(by) => Ok(ToolOutcome::Replaced { content: draft.content, is_error: draft.is_error, by, usage }),
            None => Ok(outcome),
        }
    }

    /// Asks each side-effecting tool whether an effect whose outcome was not recorded happened (by the call key
    /// it ran under).
    async fn reconcile(&mut self, calls: &[KeyedCall]) -> Result<Vec<(String, Option<ToolOutcome>)>> {
        let mut out = Vec::new();
        for KeyedCall { call, key } in calls {
            let Some(t) = self.agent.tool(&call.name) else {
                out.push((call.id.clone(), None));
                continue;
            };
            let tool = t.tool.clone();
            match tool.reconcile(&call.args, key).await {
                Ok(Some(o)) => {
                    // Found done: a duplicate the reconciliation prevented.
                    self.agent.count(Counter::Reconciliations, 1);
                    out.push((
                        call.id.clone(),
                        Some(ToolOutcome::Ok { content: o.content, business_state: o.business_state, usage: o.usage }),
                    ))
                }
                Ok(None) => out.push((call.id.clone(), None)),
                Err(ToolError::Propagate(e)) => return Err(e),
                Err(ToolError::Failed { kind, message }) => {
                    return Err(Error::new(
                        ErrorCode::ToolPropagated,
                        format!(
                            "reconciling '{}' ({}) failed: {}",
                            call.name,
                            call.id,
                            ToolError::model_text(&kind, &message)
                        ),
                    ))
                }
            }
        }
        Ok(out)
    }

    fn emit(&mut self, event: Event) {
        if let (Event::AgentDrift(drift), Some(warn)) = (&event, &self.deps.warn) {
            warn(&drift.warning(&self.lease.run_id));
        }
        // The counters read off the events: every step down the chain, and how a run ended.
        let counter = match &event {
            Event::ProviderFallback { .. } => Some(Counter::Fallbacks),
            Event::RunDone { finish_reason: Some(FinishReason::LoopDetected), .. } => Some(Counter::LoopStops),
            Event::RunDone { finish_reason: Some(FinishReason::BudgetExceeded), .. } => Some(Counter::BudgetStops),
            _ => None,
        };
        if let Some(counter) = counter {
            self.agent.count(counter, 1);
        }
        if let Some(r) = &mut self.trace {
            r.event(&event, self.deps.now());
            self.export_ended();
        }
        if let Some(sink) = &self.sink {
            emit_to(sink.as_ref(), &self.seq, &self.lease.run_id, self.now(), event);
        }
    }

    /// Tells the sink that the journal holds the run through `position`.
    fn durable(&self, position: u64) {
        if let Some(sink) = &self.sink {
            sink.durable(&self.lease.run_id, position);
        }
    }

    // Only the test build's fault injection needs the tools in flight.
    #[cfg_attr(not(feature = "testing"), allow(unused_variables))]
    async fn after_effect(&mut self, pool: &mut ToolPool) -> Result<()> {
        self.stats.effects += 1;
        #[cfg(feature = "testing")]
        self.injected_fault(pool).await?;
        Ok(())
    }

    /// Crash and stall injection (cargo feature `testing`): see [`SendOptions`]'s `crash`, `crash_budget` and
    /// `stall`.
    #[cfg(feature = "testing")]
    async fn injected_fault(&mut self, pool: &mut ToolPool) -> Result<()> {
        if let Some(stall) = &self.opts.stall {
            if stall.after_effects == self.stats.effects {
                (stall.wait)().await;
            }
        }
        let budget_hit = self.opts.crash_budget.as_ref().and_then(|b| {
            let left = b.left.get()?.saturating_sub(1);
            b.left.set((left > 0).then_some(left));
            (left == 0)
                .then_some(CrashPoint { after_effects: self.stats.effects, finish_in_flight: b.finish_in_flight })
        });
        if let Some(crash) = self.opts.crash.or(budget_hit) {
            if crash.after_effects == self.stats.effects {
                if crash.finish_in_flight {
                    pool.finish_in_flight().await;
                }
                pool.drop_in_flight();
                return Err(Error::new(
                    ErrorCode::Crashed,
                    format!("simulated crash after effect {}", self.stats.effects),
                ));
            }
        }
        Ok(())
    }

    async fn maybe_renew(&mut self) -> Result<()> {
        if self.now() < self.next_renew_at {
            return Ok(());
        }
        self.renew().await
    }

    /// Renews the lease now. A lost lease is `STEADFAST_SESSION_BUSY`; a renewal that fails otherwise is tried
    /// again a second later, until the lease would expire: then the execution stops (fail closed), since
    /// another process may take the run over from then on.
    async fn renew(&mut self) -> Result<()> {
        let now = self.now();
        let lease_opts = self.deps.options.lease;
        match self.deps.store.renew_lease(&self.lease, now, &lease_opts).await {
            Ok(lease) => {
                self.lease = lease;
                self.next_renew_at = self.now().saturating_add(lease_opts.renew_every_ms);
                self.stats.lease_renewals += 1;
                Ok(())
            }
            Err(e) if e.code == ErrorCode::SessionBusy => Err(e),
            Err(e) => {
                let retry_at = self.now().saturating_add(1_000);
                if retry_at.saturating_add(self.start_margin()) >= self.lease.expires_at {
                    return Err(Error::busy(
                        &self.lease.run_id,
                        &format!("its lease could not be renewed before it expired ({}: {})", e.code, e.message),
                    ));
                }
                self.next_renew_at = retry_at;
                Ok(())
            }
        }
    }

    /// How much lease time must be left to start a tool (a tool started later could outlive the lease).
    fn start_margin(&self) -> u64 {
        (self.deps.options.lease.ttl_ms / 4).min(1_000)
    }

    /// Before anything irreversible (a tool start, an approval record, a reported result): the lease is
    /// confirmed, and has at least the start margin left — else it is renewed first, and a renewal that fails
    /// stops the execution.
    async fn ensure_lease(&mut self) -> Result<()> {
        self.deps.store.confirm_lease(&self.lease).await?;
        if self.now().saturating_add(self.start_margin()) >= self.lease.expires_at {
            self.renew().await?;
            if self.now().saturating_add(self.start_margin()) >= self.lease.expires_at {
                return Err(Error::busy(&self.lease.run_id, "its lease could not be renewed in time to start a tool"));
            }
        }
        Ok(())
    }

    /// Awaits `fut`, renewing the lease on schedule; `None` when the run was aborted first. The renewal timer is
    /// made only once `fut` is pending (a future ready at once costs no timer), and stays for the whole wait.
    async fn wait_renewing<F: Future>(&mut self, fut: F) -> Result<Option<F::Output>> {
        let mut fut = pin!(fut);
        loop {
            let due = self.next_renew_at;
            let wait = due.saturating_sub(self.now()).max(1);
            let deps: &'a Deps = self.deps;
            let mut tick = None;
            let abort = self.abort.clone();
            let race = futures::future::poll_fn(|cx| {
                if let Poll::Ready(v) = fut.as_mut().poll(cx) {
                    return Poll::Ready(Race::Done(v));
                }
                if abort.poll_aborted(cx).is_ready() {
                    return Poll::Ready(Race::Aborted);
                }
                if tick.get_or_insert_with(|| deps.sleep.sleep(wait)).as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Race::Tick);
                }
                Poll::Pending
            })
            .await;
            match race {
                Race::Done(v) => return Ok(Some(v)),
                Race::Aborted => return Ok(None),
                Race::Tick => self.maybe_renew().await?,
            }
        }
    }

    /// One model turn through the retry layer, down the agent's fallback chain ([`RetryPolicy::next_in_chain`]):
    /// the answer, and the fallback model that gave it (`None`: the agent's own). `Ok(None)` when aborted.
    async fn call_model(&mut self, m: &RunMachine, step: u32) -> Result<Option<(ModelResponse, Option<String>)>> {
        let deps: &'a Deps = self.deps;
        let agent: &'a Deps = self.agent;
        let policy = deps.options.retry;
        let started = self.now();
        let chain = 1 + agent.fallbacks.len();
        let traceparent = match &mut self.trace {
            Some(r) => {
                r.model_call(step, agent.model.id(), agent.model.provider_name(), started);
                if r.wants_contents() {
                    // Ignored (empty): the transcript always serialises (it is journaled the same way).
                    r.model_input(serde_json::to_string(&m.checkpoint().messages).unwrap_or_default());
                }
                Some(r.current(None).traceparent())
            }
            None => None,
        };
        let (mut attempt, mut on_model, mut index) = (0, 0, 0);
        loop {
            attempt += 1;
            on_model += 1;
            let request = ModelRequest {
                run_id: &self.lease.run_id.clone(),
                messages: &m.checkpoint().messages,
                tools: &agent.specs,
                step,
                execution: &self.lease.owner.clone(),
                traceparent: traceparent.as_deref(),
            };
            let model = match index {
                0 => agent.model.clone(),
                i => agent.fallbacks[i - 1].clone(),
            };
            // The breaker of the model's provider: an open one refuses the call, which is not made: the next
            // model of the chain gets it at once, and with none left the call fails fast (retryable, after the
            // cool-down), without waiting out the cool-down here.
            let dependency = model.dependency();
            let permit = agent.options.breaker.map(|opts| agent.breakers.allow(&dependency, opts, self.now()));
            if let Some(Permit::Refuse { retry_after_ms }) = permit {
                agent.count(Counter::BreakerRefusals, 1);
                let code = ErrorCode::ProviderCircuitOpen;
                if let Some(next) = agent.fallbacks.get(index) {
                    let (from, to) = (model.id().to_string(), next.id().to_string());
                    self.emit(Event::ProviderFallback { step, from, to, code });
                    (index, on_model) = (index + 1, 0);
                    continue;
                }
                let why = format!(
                    "the circuit breaker of '{dependency}' (model '{}') is open: its recent calls failed",
                    model.id()
                );
                let err = Error::new(code, why).with_run(&self.lease.run_id);
                self.trace_model(|r, now| r.model_failed(Some(&err), now));
                return Err(err.with_retry_after_ms(Some(retry_after_ms)));
            }
            let probe = permit == Some(Permit::Probe);
            self.stats.model_calls += 1;
            agent.count(Counter::ModelCalls, 1);
            let answer = match self.sink.clone() {
                // Someone listens: the answer's increments become events as they arrive.
                Some(sink) => {
                    let (seq, run_id, clock) = (self.seq.clone(), self.lease.run_id.clone(), deps.clock.clone());
                    let on_delta = move |d: StreamDelta| {
                        emit_to(sink.as_ref(), &seq, &run_id, clock.now_ms(), d.event(step, attempt));
                    };
                    self.wait_renewing(model.generate_streaming(request, &on_delta)).await?
                }
                None => self.wait_renewing(model.generate(request)).await?,
            };
            // A failure the provider is to blame for counts, a refused request does not; an aborted call says
            // nothing (an aborted probe counts as failed: the breaker waits another cool-down for the next one).
            let failed = match &answer {
                Some(Err(e)) => Some(e.code.is_outage()),
                Some(Ok(_)) => Some(false),
                None => probe.then_some(true),
            };
            if let (Some(failed), Some(_)) = (failed, permit) {
                agent.breakers.record(&dependency, self.now(), failed, probe);
            }
            let err = match answer {
                None => {
                    self.trace_model(|r, now| r.model_failed(None, now));
                    return Ok(None);
                }
                Some(Ok(mut resp)) => {
                    // What the turn cost, by the price of the model that answered (none when it has no price).
                    resp.usage.cost = agent.options.prices.cost_nanos(model.id(), &resp.usage);
                    self.trace_model(|r, now| {
                        let answer =
                            (resp.text.as_str(), &resp.tool_calls[..], &resp.usage, resp.stop_reason.as_deref());
                        r.model_answer(answer, model.id(), now)
                    });
                    return Ok(Some((resp, (index > 0).then(|| model.id().to_string()))));
                }
                Some(Err(e)) => e,
            };
            let elapsed = self.now().saturating_sub(started);
            match policy.next_in_chain(attempt, on_model, index, chain, elapsed, &err, deps.rng.unit()) {
                ChainStep::GiveUp => {
                    self.trace_model(|r, now| r.model_failed(Some(&err), now));
                    return Err(err);
                }
                ChainStep::Next => {
                    let to = agent.fallbacks[index].id().to_string();
                    let event = Event::ProviderFallback { step, from: model.id().to_string(), to, code: err.code };
                    self.emit(event);
                    (index, on_model) = (index + 1, 0);
                }
                ChainStep::Retry(ms) => {
                    agent.count(Counter::Retries, 1);
                    self.trace_model(|r, now| r.model_retry(attempt, &err, now));
                    let sleep = deps.sleep.clone();
                    if self.wait_renewing(sleep.sleep(ms)).await?.is_none() {
                        return Ok(None);
                    }
                }
            }
        }
    }

    /// Tells the trace (when this execution is traced) about the model call.
    fn trace_model(&mut self, f: impl FnOnce(&mut Recorder, u64)) {
        let now = self.deps.now();
        if let Some(r) = &mut self.trace {
            f(r, now);
        }
    }

    /// Starts queued calls up to the concurrency limit, once the lease is confirmed and has time left. A call
    /// the machine no longer waits for (the attempt failed or was aborted meanwhile) is dropped, never started.
    async fn start_queued(&mut self, m: &RunMachine, pool: &mut ToolPool) -> Result<()> {
        let limit = self.deps.options.tool_concurrency;
        if !pool.can_start(limit, |id| m.is_running(id)) {
            return Ok(());
        }
        self.follow(m);
        self.ensure_lease().await?;
        // The turn's sub-agent calls without a result share what the run has left: together they spend no more.
        self.child_cap = m.child_cap().map(|cap| {
            let subagent = |c: &&ToolCall| self.agent.tool(&c.name).is_some_and(|t| t.subagent.is_some());
            cap.shared(m.pending_calls().iter().filter(subagent).count() as u64)
        });
        self.stats.tool_runs += pool.start(limit, |id| m.is_running(id), |l| self.start_tool(l));
        Ok(())
    }

    fn start_tool(&self, Launch { call, approval_id, key, wait_token }: Launch) -> ToolFuture {
        let registered = self.agent.tool(&call.name);
        // The call's span (its `tool.start` event came first), for the tool's outgoing calls and a child run.
        let span = self.trace.as_ref().map(|r| r.current(Some(&call.id)));
        let tool = registered.map(|t| t.tool.clone());
        let subagent = registered.and_then(|t| t.subagent.clone());
        let child_opts = SendOptions {
            abort: Some(self.abort.clone()),
            // The child's events reach this execution's caller (tagged with the sub-agent by the child's driver;
            // the observer, which the child shares, it reaches by itself).
            events: self.opts.events.clone(),
            subagent_call: Some(call.id.clone()),
            // The lead's remaining budget bounds the child (recorded when the child is created).
            budget_cap: self.child_cap,
            traceparent: span,
            // Tests: the process that dies is the lead's, with its children's executions in it (a crash point
            // counts the child's own effects; a budget counts everyone's).
            #[cfg(feature = "testing")]
            crash: self.opts.crash,
            #[cfg(feature = "testing")]
            crash_budget: self.opts.crash_budget.clone(),
            ..Default::default()
        };
        let ctx = ToolContext {
            run_id: self.lease.run_id.clone(),
            tool_call_id: call.id.clone(),
            call_key: key,
            approval_id,
            abort: self.abort.clone(),
            wait_token,
            now: self.now(),
            traceparent: span.map(|s| s.traceparent()),
        };
        // The breaker of the tool's host (a webhook's), when the agent has breakers.
        let breaker = match (&tool, &subagent, self.agent.options.breaker) {
            (Some(t), None, Some(opts)) => t.dependency().map(|d| {
                let a = self.agent;
                (a.breakers.clone(), (a.metrics.clone(), a.label.clone()), opts, d)
            }),
            _ => None,
        };
        let clock = self.deps.clock.clone();
        Box::pin(async move {
            let outcome = match tool {
                None => ToolOutcome::Failed { message: format!("Error: unknown tool '{}'", call.name) },
                Some(tool) => match match subagent {
                    Some(sub) => sub.run(call.args, ctx, child_opts).await,
                    None => match &breaker {
                        None => tool.execute(call.args, ctx).await,
                        Some((breakers, (metrics, label), opts, dependency)) => {
                            match breakers.allow(dependency, *opts, ctx.now) {
                                // Open: the call is not made; the model reads why (and may try again later).
                                Permit::Refuse { retry_after_ms } => Err({
                                    metrics.add(label, Counter::BreakerRefusals, 1);
                                    ToolError::typed(
                                        "CircuitOpenError",
                                        format!(
                                    "'{dependency}' was not called: its circuit breaker is open (its recent calls \
                                     failed); try again in {} s",
                                    retry_after_ms.div_ceil(1_000)
                                ),
                                    )
                                }),
                                permit => {
                                    let res = tool.execute(call.args, ctx).await;
                                    let failed = res.as_ref().err().is_some_and(|e| tool.dependency_down(e));
                                    breakers.record(dependency, clock.now_ms(), failed, permit == Permit::Probe);
                                    res
                                }
                            }
                        }
                    },
                } {
                    Ok(ToolOutput { wait: Some(wait), .. }) => ToolOutcome::Wait(wait),
                    Ok(out) => {
                        ToolOutcome::Ok { content: out.content, business_state: out.business_state, usage: out.usage }
                    }
                    Err(ToolError::Failed { kind, message }) => {
                        ToolOutcome::Failed { message: ToolError::model_text(&kind, &message) }
                    }
                    Err(ToolError::Propagate(e)) => ToolOutcome::Propagate(e),
                },
            };
            (call.id, outcome)
        })
    }
}

/// Hands the machine an answer. The machine refuses an answer it does not wait for (`STEADFAST_INTERNAL`, nothing
/// changed): that is a bug in this driver, so debug builds (every test, the generated crash checker among them)
/// stop on it, and a release build fails the attempt with that error (not retryable: the sweep leaves the run for
/// a person; it stays resumable).
fn deliver(m: &mut RunMachine, notify: impl FnOnce(&mut RunMachine) -> Result<()>) {
    if let Err(e) = notify(m) {
        debug_assert!(false, "the run state machine refused an answer: {e}");
        m.notify_failed(e);
    }
}

/// Delivers one event to `sink` with the next `seq`.
fn emit_to(sink: &dyn EventSink, seq: &Cell<u64>, run_id: &str, at: u64, event: Event) {
    let env = EventEnvelope {
        v: EVENT_SCHEMA_VERSION,
        seq: seq.get(),
        run_id: run_id.to_string(),
        at,
        subagent: None,
        event,
    };
    seq.set(seq.get() + 1);
    sink.emit(&env);
}
