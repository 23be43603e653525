//! The driver: performs a [`RunMachine`]'s effects against the agent's model, tools and store.
//!
//! It is the one place that awaits. It renews the lease while it waits, runs up to `tool_concurrency` tool
//! calls at once (they keep running while a commit is written), retries model calls (the only retry layer,
//! M15), watches the abort signal, numbers events, and can "crash" after any effect for tests.

use super::agent::{Agent, SendOptions};
use super::traits::{AbortSignal, LocalFuture, ModelRequest, ToolContext, ToolError};
use crate::core::error::{Error, ErrorCode, Result};
use crate::core::events::{Event, EventEnvelope, EVENT_SCHEMA_VERSION};
use crate::core::machine::{Effect, ModelResponse, Outcome, RunMachine, ToolOutcome};
use crate::core::retry::NextRetry;
use crate::core::transcript::ToolCall;
use crate::store::Lease;
use futures::stream::{FuturesUnordered, StreamExt};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::pin;
use std::task::Poll;

/// What one execution did (reported on every [`super::agent::RunResult`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunStats {
    /// Effects performed.
    pub effects: usize,
    /// Journal entries written.
    pub commits: usize,
    /// Model calls made (retries included).
    pub model_calls: usize,
    /// Tool executions started.
    pub tool_runs: usize,
    /// Lease renewals.
    pub lease_renewals: usize,
    /// Store read operations of this execution (lease, load and commits; backends that count).
    pub store_reads: u64,
    /// Store write operations of this execution.
    pub store_writes: u64,
    /// Bytes the store wrote for this execution.
    pub store_bytes: u64,
}

type InFlight = FuturesUnordered<LocalFuture<'static, (String, ToolOutcome)>>;

enum Race<T> {
    Done(T),
    Aborted,
    Tick,
}

pub(crate) struct Driver<'a> {
    agent: &'a Agent,
    pub(crate) lease: Lease,
    opts: &'a SendOptions,
    abort: AbortSignal,
    seq: u64,
    pub(crate) stats: RunStats,
    last_renew: u64,
}

impl<'a> Driver<'a> {
    pub(crate) fn new(agent: &'a Agent, lease: Lease, opts: &'a SendOptions) -> Driver<'a> {
        let now = agent.inner.clock.now_ms();
        Driver {
            agent,
            lease,
            opts,
            abort: opts.abort.clone().unwrap_or_default(),
            seq: 0,
            stats: RunStats::default(),
            last_renew: now,
        }
    }

    fn now(&self) -> u64 {
        self.agent.inner.clock.now_ms()
    }

    /// Drives the machine to its `Finish`. `Err` means the execution stopped without a verdict: a crash
    /// (tests), a lost lease (BUSY) or a store failure.
    pub(crate) async fn drive(&mut self, mut m: RunMachine) -> Result<(RunMachine, Outcome)> {
        let mut in_flight: InFlight = FuturesUnordered::new();
        let mut queue: VecDeque<(ToolCall, Option<String>)> = VecDeque::new();
        let mut settled: VecDeque<(String, ToolOutcome)> = VecDeque::new();
        let mut abort_seen = false;
        loop {
            self.maybe_renew().await?;
            if !abort_seen && self.abort.is_aborted() {
                abort_seen = true;
                in_flight.clear();
                queue.clear();
                settled.clear();
                m.notify_abort();
            }
            m.set_now(self.now());
            if let Some(effect) = m.poll_effect() {
                match effect {
                    Effect::Emit(event) => {
                        self.emit(event);
                        self.after_effect(&mut in_flight).await?;
                    }
                    Effect::Commit(entry) => {
                        let store = self.agent.inner.store.clone();
                        let lease = self.lease.clone();
                        let commit = store.commit(&lease, &entry, m.checkpoint());
                        race_with_tools(commit, &mut in_flight, &mut settled).await?;
                        self.stats.commits += 1;
                        self.after_effect(&mut in_flight).await?;
                        m.notify_committed();
                    }
                    Effect::CallModel { step } => {
                        let answer = self.call_model(&m, step).await;
                        self.after_effect(&mut in_flight).await?;
                        match answer {
                            Ok(Some(resp)) => m.notify_model_response(resp),
                            Ok(None) => {
                                abort_seen = true;
                                m.notify_abort();
                            }
                            Err(e) if e.code == ErrorCode::SessionBusy => return Err(e),
                            Err(e) => m.notify_model_failed(e),
                        }
                    }
                    Effect::Gate { calls } => {
                        let decisions = calls.iter().map(|c| (c.id.clone(), self.agent.gate(c))).collect();
                        self.after_effect(&mut in_flight).await?;
                        m.notify_gated(decisions);
                    }
                    Effect::RunTool { call, approval_id } => {
                        queue.push_back((call, approval_id));
                        self.fill(&mut queue, &mut in_flight);
                        self.after_effect(&mut in_flight).await?;
                    }
                    Effect::Pause { approvals } => {
                        for a in &approvals {
                            self.agent.inner.store.put_approval(a).await?;
                        }
                        self.after_effect(&mut in_flight).await?;
                        m.notify_approvals_recorded();
                    }
                    Effect::Finish(outcome) => return Ok((m, outcome)),
                }
                continue;
            }
            if let Some((id, outcome)) = settled.pop_front() {
                m.notify_tool_settled(&id, outcome);
                self.fill(&mut queue, &mut in_flight);
                continue;
            }
            if in_flight.is_empty() {
                if queue.is_empty() {
                    return Err(Error::internal("the run stalled: no effect to perform and no tool in flight"));
                }
                self.fill(&mut queue, &mut in_flight);
                continue;
            }
            if let Some(done) = self.wait_renewing(in_flight.next()).await? {
                if let Some(s) = done {
                    settled.push_back(s);
                }
            }
        }
    }

    fn emit(&mut self, event: Event) {
        let env = EventEnvelope { v: EVENT_SCHEMA_VERSION, seq: self.seq, run_id: self.lease.run_id.clone(), at: self.now(), event };
        self.seq += 1;
        if let Some(sink) = &self.opts.events {
            sink.emit(&env);
        }
    }

    async fn after_effect(&mut self, in_flight: &mut InFlight) -> Result<()> {
        self.stats.effects += 1;
        if let Some(stall) = &self.opts.stall {
            if stall.after_effects == self.stats.effects {
                (stall.wait)().await;
            }
        }
        if let Some(crash) = self.opts.crash {
            if crash.after_effects == self.stats.effects {
                if crash.finish_in_flight {
                    while in_flight.next().await.is_some() {}
                }
                in_flight.clear();
                return Err(Error::new(ErrorCode::Crashed, format!("simulated crash after effect {}", self.stats.effects)));
            }
        }
        Ok(())
    }

    async fn maybe_renew(&mut self) -> Result<()> {
        let now = self.now();
        if now < self.last_renew.saturating_add(self.agent.inner.options.lease.renew_every_ms) {
            return Ok(());
        }
        match self.agent.inner.store.renew_lease(&self.lease, now, &self.agent.inner.options.lease).await {
            Ok(lease) => {
                self.lease = lease;
                self.last_renew = now;
                self.stats.lease_renewals += 1;
                Ok(())
            }
            Err(e) if e.code == ErrorCode::SessionBusy => Err(e),
            // A transient store failure: try again at the next check; commits stay fenced regardless.
            Err(_) => Ok(()),
        }
    }

    /// Awaits `fut`, renewing the lease on schedule; `None` when the run was aborted first.
    async fn wait_renewing<F: Future>(&mut self, fut: F) -> Result<Option<F::Output>> {
        let mut fut = pin!(fut);
        loop {
            let due = self.last_renew.saturating_add(self.agent.inner.options.lease.renew_every_ms);
            let wait = due.saturating_sub(self.now()).max(1);
            let sleep = self.agent.inner.sleep.clone();
            let mut tick = pin!(sleep.sleep(wait));
            let abort = self.abort.clone();
            let race = futures::future::poll_fn(|cx| {
                if let Poll::Ready(v) = fut.as_mut().poll(cx) {
                    return Poll::Ready(Race::Done(v));
                }
                if abort.poll_aborted(cx).is_ready() {
                    return Poll::Ready(Race::Aborted);
                }
                if tick.as_mut().poll(cx).is_ready() {
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

    /// One model turn through the retry layer. `Ok(None)` when aborted.
    async fn call_model(&mut self, m: &RunMachine, step: u32) -> Result<Option<ModelResponse>> {
        let agent: &'a Agent = self.agent;
        let policy = agent.inner.options.retry;
        let started = self.now();
        let mut attempt = 0;
        loop {
            attempt += 1;
            self.stats.model_calls += 1;
            let request = ModelRequest {
                run_id: &self.lease.run_id.clone(),
                messages: &m.checkpoint().messages,
                tools: &agent.inner.specs,
                step,
            };
            let model = agent.inner.model.clone();
            let answer = self.wait_renewing(model.generate(request)).await?;
            let err = match answer {
                None => return Ok(None),
                Some(Ok(resp)) => return Ok(Some(resp)),
                Some(Err(e)) => e,
            };
            let elapsed = self.now().saturating_sub(started);
            match policy.next_retry(attempt, elapsed, &err, agent.inner.rng.unit()) {
                NextRetry::GiveUp => return Err(err),
                NextRetry::After(ms) => {
                    let sleep = agent.inner.sleep.clone();
                    if self.wait_renewing(sleep.sleep(ms)).await?.is_none() {
                        return Ok(None);
                    }
                }
            }
        }
    }

    fn fill(&mut self, queue: &mut VecDeque<(ToolCall, Option<String>)>, in_flight: &mut InFlight) {
        let limit = self.agent.inner.options.tool_concurrency.max(1);
        while in_flight.len() < limit {
            let Some((call, approval_id)) = queue.pop_front() else { break };
            self.stats.tool_runs += 1;
            in_flight.push(self.start_tool(call, approval_id));
        }
    }

    fn start_tool(&self, call: ToolCall, approval_id: Option<String>) -> LocalFuture<'static, (String, ToolOutcome)> {
        let tool = self.agent.inner.tools.iter().find(|t| t.tool.name() == call.name).map(|t| t.tool.clone());
        let ctx = ToolContext {
            run_id: self.lease.run_id.clone(),
            tool_call_id: call.id.clone(),
            approval_id,
            abort: self.abort.clone(),
        };
        Box::pin(async move {
            let outcome = match tool {
                None => ToolOutcome::Failed { message: format!("Error: unknown tool '{}'", call.name) },
                Some(tool) => match tool.execute(call.args, ctx).await {
                    Ok(out) => ToolOutcome::Ok { content: out.content, business_state: out.business_state },
                    Err(ToolError::Failed { kind, message }) => ToolOutcome::Failed { message: ToolError::model_text(&kind, &message) },
                    Err(ToolError::Propagate(e)) => ToolOutcome::Propagate(e),
                },
            };
            (call.id, outcome)
        })
    }
}

/// Awaits `fut` while polling the tools in flight, buffering the ones that settle.
async fn race_with_tools<F: Future<Output = Result<()>>>(
    fut: F,
    in_flight: &mut InFlight,
    settled: &mut VecDeque<(String, ToolOutcome)>,
) -> Result<()> {
    let mut fut = pin!(fut);
    futures::future::poll_fn(|cx| {
        if let Poll::Ready(r) = fut.as_mut().poll(cx) {
            return Poll::Ready(r);
        }
        while let Poll::Ready(Some(s)) = in_flight.poll_next_unpin(cx) {
            settled.push_back(s);
        }
        Poll::Pending
    })
    .await
}
