//! The recovery sweep (M12, M13, M14): [`Agent::sweep`] for one cron tick, [`Agent::recover`] for a loop.
//! What to do with each listed run is decided in core ([`crate::core::sweep`]); this module lists, checks,
//! resumes and keeps the breaker and the listing cursor in the store.

use super::fanout::{RecoveryMessage, RecoveryQueue, MAX_QUEUE_BATCH};
use crate::core::checkpoint::{FinishReason, RunStatus};
use crate::core::classify::is_provider_outage;
use crate::core::error::{Error, ErrorCode, Result};
use crate::core::sweep::{
    best_waiting, enqueue_cap, note_attempt, note_fanned_failures, pick_probe, plan, probe_due, probe_rank,
    tick_writes, Attempt, Candidate, Plan, SweepOptions, SweepState, HEAL_SUFFIX, VERIFY_PER_TICK,
};
use crate::runtime::approvals::Settled;
use crate::runtime::traits::AbortSignal;
use crate::runtime::{Agent, RunResult, SendOptions};
use crate::store::kv::MAX_BULK_GET;
use crate::store::PendingRun;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;

/// Callbacks of the recovery sweep. Every method has a no-op default; an error returned by a callback is
/// passed to `on_error` and never stops the sweep; every callback that fails (`on_error` included) is counted
/// in [`SweepReport::listener_errors`].
pub trait SweepListener {
    /// A run was finished by the sweep (for a diagnosis fork: the original's id).
    fn on_recovered(&self, _run_id: &str, _result: &RunResult) -> Result<()> {
        Ok(())
    }
    /// A run reached the attempt cap and will not be resumed by the sweep again (called once per run).
    fn on_quarantined(&self, _run: &PendingRun) -> Result<()> {
        Ok(())
    }
    /// The provider-outage breaker opened (`true`) or closed (`false`).
    fn on_outage(&self, _active: bool) -> Result<()> {
        Ok(())
    }
    /// The sweep could not list the store (`run_id` `None`) or a resume failed.
    fn on_error(&self, _error: &Error, _run_id: Option<&str>) -> Result<()> {
        Ok(())
    }
    /// A signal that stops the sweep: once aborted, the resume in flight is aborted (its checkpoint stays, as for
    /// any aborted run) and the tick starts nothing more. [`Agent::recover`] passes its `stop`.
    fn stop(&self) -> Option<&AbortSignal> {
        None
    }
    /// Crash injection (tests): the executions this tick starts count their effects down this budget, and the
    /// one that performs its last "crashes" right after it.
    #[cfg(feature = "testing")]
    fn crash_budget(&self) -> Option<std::rc::Rc<crate::runtime::CrashBudget>> {
        None
    }
}

/// The options of the executions a tick starts: the listener's stop signal (and in tests its crash budget).
pub(super) fn exec_opts(listener: &dyn SweepListener) -> SendOptions {
    SendOptions {
        abort: listener.stop().cloned(),
        #[cfg(feature = "testing")]
        crash_budget: listener.crash_budget(),
        ..SendOptions::default()
    }
}

/// Whether the listener's stop signal was aborted.
fn stopped(listener: &dyn SweepListener) -> bool {
    listener.stop().is_some_and(AbortSignal::is_aborted)
}

/// [`Agent::recover`]'s listener: the caller's callbacks, and the loop's stop signal.
struct Stopping<'a> {
    inner: &'a dyn SweepListener,
    stop: &'a AbortSignal,
}

impl SweepListener for Stopping<'_> {
    fn on_recovered(&self, run_id: &str, result: &RunResult) -> Result<()> {
        self.inner.on_recovered(run_id, result)
    }
    fn on_quarantined(&self, run: &PendingRun) -> Result<()> {
        self.inner.on_quarantined(run)
    }
    fn on_outage(&self, active: bool) -> Result<()> {
        self.inner.on_outage(active)
    }
    fn on_error(&self, error: &Error, run_id: Option<&str>) -> Result<()> {
        self.inner.on_error(error, run_id)
    }
    fn stop(&self) -> Option<&AbortSignal> {
        Some(self.stop)
    }
}

/// A listener that ignores everything.
pub struct NoListener;
impl SweepListener for NoListener {}

/// What one sweep tick did.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase")]
pub struct SweepReport {
    /// Pending runs listed this tick (the pages it read, not the whole backlog).
    pub listed: usize,
    /// Runs examined this tick.
    pub examined: usize,
    /// Resumes started.
    pub resumed: usize,
    /// Runs finished (ids as reported to `on_recovered`).
    pub recovered: Vec<String>,
    /// Runs quarantined this tick.
    pub quarantined: Vec<String>,
    /// Runs turned away by a live lease (tried next tick).
    pub busy: usize,
    /// Runs waiting for their backoff.
    pub backing_off: usize,
    /// Resumes that failed.
    pub errors: usize,
    /// Whether the outage breaker is open after the tick.
    pub outage: bool,
    /// The run resumed as the outage probe this tick, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub probe: Option<String>,
    /// Listed runs found finished or deleted when checked (their stale index entries are dropped).
    #[serde(default)]
    pub stale: usize,
    /// Listener callbacks that returned an error (each but `on_error`'s own was passed to `on_error`).
    #[serde(default)]
    pub listener_errors: usize,
    /// Store operations this tick used.
    pub operations: u64,
    /// Whether the tick reached the end of the listing (else the next tick continues where it stopped).
    pub complete: bool,
    /// Tools' waits the tick resolved because their time came (an event's deadline, a timer), from the due
    /// index ([`Agent::wake_due`]).
    #[serde(default)]
    pub woken: usize,
    /// Runs sent to the recovery queue for consumers to resume ([`Agent::sweep_fanning_out`]).
    #[serde(default)]
    pub enqueued: usize,
    /// Batches sent to the recovery queue (each one operation of the tick, beside `operations`).
    #[serde(default)]
    pub queue_sends: u64,
}

impl SweepReport {
    /// Passes `error` to the listener; an `on_error` that fails is counted (there is no one left to tell).
    #[inline(never)]
    pub(super) fn error(&mut self, listener: &dyn SweepListener, error: &Error, run_id: Option<&str>) {
        if listener.on_error(error, run_id).is_err() {
            self.listener_errors += 1;
        }
    }

    /// What a listener callback answered: a failure is counted and passed to `on_error`.
    #[inline(never)]
    pub(super) fn heard(&mut self, listener: &dyn SweepListener, answer: Result<()>, run_id: Option<&str>) {
        if let Err(e) = answer {
            self.listener_errors += 1;
            self.error(listener, &e, run_id);
        }
    }
}

/// What the recovery sweep will do next with an unfinished run (as `GET /runs` shows it): the sweep's own plan
/// for it now, from its stored state and options.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase")]
pub struct NextAttempt {
    /// `next-tick` (resumed by the next tick), `backoff` (waiting until `at`), `outage` (waiting on the open
    /// breaker; its next probe is `at`), `quarantine` / `diagnosis-fork` (at the attempt cap: the next tick
    /// quarantines it or tries a diagnosis fork), `quarantined`, `awaiting-person`, `not-retryable`.
    pub plan: String,
    /// When, for `backoff` and `outage` (ms since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional, type = "number"))]
    pub at: Option<u64>,
}

impl Agent {
    /// The sweep's plan for each of `runs` now ([`NextAttempt`]), under `opts` and the sweep's stored state
    /// (one read). A stored state that cannot be read counts as the initial one (the next tick replaces it).
    pub async fn next_attempts(&self, runs: &[PendingRun], opts: &SweepOptions) -> Result<Vec<NextAttempt>> {
        let state: SweepState = match self.store().get_state("sweep").await? {
            Some(text) => serde_json::from_str(&text).unwrap_or_default(),
            None => SweepState::default(),
        };
        let now = self.deps.now();
        Ok(runs
            .iter()
            .map(|r| {
                let (plan, at) = match plan(opts, &state, now, &candidate(r)) {
                    Plan::Resume | Plan::Probe => ("next-tick", None),
                    Plan::Backoff { until } => ("backoff", Some(until)),
                    Plan::Outage => ("outage", state.outage.as_ref().map(|o| o.next_probe_at)),
                    Plan::Quarantine => ("quarantine", None),
                    Plan::Heal => ("diagnosis-fork", None),
                    Plan::Quarantined => ("quarantined", None),
                    Plan::AwaitingPerson => ("awaiting-person", None),
                    Plan::NotRetryable => ("not-retryable", None),
                };
                NextAttempt { plan: plan.into(), at }
            })
            .collect())
    }
}

/// What the sweep's plan ([`crate::core::sweep::plan`]) knows of a listed run.
pub fn candidate(run: &PendingRun) -> Candidate<'_> {
    Candidate {
        run_id: &run.run_id,
        status: run.status,
        attempts: run.attempts,
        last_error: run.last_error.as_ref().map(|e| e.code),
        retryable: run.last_error.as_ref().is_none_or(|e| e.retryable),
        quarantined: run.quarantined,
        outage_error: run.last_error.as_ref().is_some_and(|e| e.code.is_outage()),
        saved_at: run.saved_at,
        heal_of: run.heal_of.as_deref(),
    }
}

/// What one tick has done so far: whether its one probe is still free, and the runs it resumed (never two
/// resumes of one run in a tick).
struct Tick<'q> {
    probe_free: bool,
    done: HashSet<String>,
    /// Runs read this tick to verify their listing ([`VERIFY_PER_TICK`] at most).
    verified: usize,
    /// The recovery queue, when the tick fans out.
    fan: Option<Fan<'q>>,
}

/// A tick's fan-out: the messages not sent yet, how many it may still send, and the one run it resumes itself.
struct Fan<'q> {
    queue: &'q dyn RecoveryQueue,
    batch: Vec<RecoveryMessage>,
    /// Messages the tick may still send (its cap, less what it put in batches).
    room: usize,
    /// A send failed: the tick resumes the runs it lists after itself (within `max_runs`), as without a queue.
    failed: bool,
    /// The first due run of the tick, resumed by the tick itself after the sends (with its heal marker): its
    /// outcome tells the breaker about the provider, as the resumes of a tick without a queue do.
    canary: Option<(String, Option<String>)>,
}

impl Agent {
    /// One recovery sweep tick (M12, M13, M14): reads a bounded number of pages of the pending listing,
    /// continuing where the last tick stopped, and, within `max_runs` resumes and `op_budget` store
    /// operations, resumes each `in-progress` run whose backoff has passed, quarantines runs at the attempt cap
    /// (or gives them a diagnosis fork first), and leaves alone runs waiting for a person, runs whose last
    /// error is not retryable and runs held by a live lease. Only the runs it acts on are checked against the
    /// store (a listing can be stale). While the outage breaker is open, a due probe goes first to the run
    /// the breaker remembers, else to the best waiting run listed. State (breaker, listing cursor) lives in
    /// the store, so ticks may run in separate processes, overlap or repeat.
    pub async fn sweep(&self, opts: &SweepOptions, listener: &dyn SweepListener) -> Result<SweepReport> {
        self.sweep_with(opts, listener, None).await
    }

    /// One recovery sweep tick that fans out: as [`Agent::sweep`], except that the runs due for a resume are sent
    /// to `queue` (one [`RecoveryMessage`] each, in batches of [`MAX_QUEUE_BATCH`], at most
    /// [`enqueue_cap`] a tick) for consumers to resume with [`Agent::consume_recovery`]. The tick itself still
    /// lists, plans, quarantines, forks for diagnosis, takes up due waits, probes while the breaker is open, and
    /// resumes one due run (the first) so the breaker hears how the provider answers; failures the consumers
    /// meet are counted from the listing ([`note_fanned_failures`]). If a send fails, that batch's runs come round
    /// again with the listing and the tick resumes the runs it lists after itself (up to `max_runs`), as without
    /// a queue.
    pub async fn sweep_fanning_out(
        &self,
        opts: &SweepOptions,
        listener: &dyn SweepListener,
        queue: &dyn RecoveryQueue,
    ) -> Result<SweepReport> {
        self.sweep_with(opts, listener, Some(queue)).await
    }

    async fn sweep_with(
        &self,
        opts: &SweepOptions,
        listener: &dyn SweepListener,
        queue: Option<&dyn RecoveryQueue>,
    ) -> Result<SweepReport> {
        let store = self.store().clone();
        let before = store.counters();
        let used = || {
            let c = store.counters().since(&before);
            c.reads + c.writes
        };
        let mut report = SweepReport::default();
        // A sweep state that cannot be read is reported and replaced (written back at the end of this tick):
        // it holds only the breaker and the listing position, so the tick starts over with a closed breaker
        // from the first page, and nothing of any run is lost; failing every tick instead would stop recovery.
        let (mut state, repair) = match store.get_state("sweep").await {
            Ok(None) => (SweepState::default(), false),
            Ok(Some(s)) => match serde_json::from_str(&s) {
                Ok(state) => (state, false),
                Err(e) => {
                    let why = format!("sweep state unreadable, reset: {e}");
                    report.error(listener, &Error::new(ErrorCode::CheckpointCorrupt, why), None);
                    (SweepState::default(), true)
                }
            },
            Err(e) => {
                // The tick fails with this error itself (and its report, which would count a failing `on_error`, is dropped).
                report.error(listener, &e, None);
                return Err(e);
            }
        };
        let initial = state.clone();
        // The breakers other replicas found open are open here too (this isolate's, shared by its requests).
        let breakers = match self.deps.options.breaker {
            Some(opts) => self.adopt_breakers(opts, &mut report, listener).await,
            None => None,
        };
        let fan = queue.map(|queue| Fan {
            queue,
            batch: Vec::new(),
            room: enqueue_cap(opts, &state, self.deps.now()),
            failed: false,
            canary: None,
        });
        let mut tick = Tick { probe_free: true, done: HashSet::new(), verified: 0, fan };
        // A due probe goes to the run the breaker remembers, wherever the listing stands.
        if probe_due(&state, self.deps.now()) && !stopped(listener) {
            if let Some(id) = state.probe.clone() {
                self.probe_remembered(&id, opts, &mut state, &mut tick, &mut report, listener).await;
            }
        }
        // Waits whose time came first (one listing of the due index, at most `max_runs` of them): a timer is
        // a promise of a time, kept before the backlog is paged.
        if !stopped(listener) {
            let wake_opts = exec_opts(listener);
            // The same budget as the resumes below: about the operations one resume may take are kept in hand.
            let room = || used() + opts.op_budget / 10 < opts.op_budget;
            match self.wake_due_while(opts.max_runs, &wake_opts, &room).await {
                Ok(w) => {
                    report.woken = w.resolved.len();
                    report.busy += w.busy;
                    report.errors += w.failed.len();
                    for (run_id, e) in &w.failed {
                        report.error(listener, e, Some(run_id));
                    }
                }
                Err(e) => report.error(listener, &e, None),
            }
        }
        let last_tick = initial.last_tick_at;
        // The cap as the breaker stands after the remembered probe.
        if let Some(f) = tick.fan.as_mut() {
            f.room = enqueue_cap(opts, &state, self.deps.now());
        }
        let listed = self.sweep_pages(opts, &mut state, &mut tick, &mut report, listener, &used, last_tick).await;
        self.flush(&mut tick, &mut report, listener).await;
        if let Some((run_id, heal_of)) = tick.fan.as_mut().and_then(|f| f.canary.take()) {
            if !stopped(listener) {
                report.resumed += 1;
                self.sweep_resume(&run_id, heal_of.as_deref(), false, opts, &mut state, &mut report, listener).await;
            }
        }
        report.outage = state.outage.is_some();
        let now = self.deps.now();
        // And the ones open here are recorded for them (written when the set changed; not after a failed read).
        if let Some(stored) = breakers {
            let open = self.deps.breakers.open_text(now);
            if open != stored {
                if let Err(e) = store.put_state("breakers", &open).await {
                    report.error(listener, &e, None);
                }
            }
        }
        if repair || tick_writes(&initial, &state, now) {
            state.last_tick_at = Some(now);
            // Ignored (no else): a SweepState (numbers, strings, options) always serialises.
            if let Ok(s) = serde_json::to_string(&state) {
                if let Err(e) = store.put_state("sweep", &s).await {
                    report.error(listener, &e, None);
                }
            }
        }
        report.operations = used();
        listed.map(|_| report)
    }

    /// Resumes the run the breaker remembers as its probe, if it still waits on the breaker (else forgets it).
    async fn probe_remembered(
        &self,
        run_id: &str,
        opts: &SweepOptions,
        state: &mut SweepState,
        tick: &mut Tick<'_>,
        report: &mut SweepReport,
        listener: &dyn SweepListener,
    ) {
        let run = match self.store().load(run_id).await {
            Ok(Some(cp)) if cp.status != RunStatus::Finished => PendingRun::of(&cp),
            Ok(_) => {
                state.probe = None;
                return;
            }
            Err(e) => {
                report.error(listener, &e, Some(run_id));
                state.probe = None;
                return;
            }
        };
        if probe_rank(opts, state, self.deps.now(), &candidate(&run)).is_none() {
            state.probe = None;
            return;
        }
        tick.probe_free = false;
        tick.done.insert(run.run_id.clone());
        report.resumed += 1;
        report.probe = Some(run.run_id.clone());
        if self.sweep_resume(&run.run_id, run.heal_of.as_deref(), true, opts, state, report, listener).await {
            tick.probe_free = true;
            report.probe = None;
        }
    }

    /// Sends the tick's batch of recovery messages (if it fans out and has one). If the send fails, the batch's
    /// runs come round again with the listing, and the tick resumes the runs it lists after itself (within
    /// `max_runs`), as without a queue.
    async fn flush(&self, tick: &mut Tick<'_>, report: &mut SweepReport, listener: &dyn SweepListener) {
        let Some(fan) = tick.fan.as_mut() else { return };
        if fan.batch.is_empty() || fan.failed {
            return;
        }
        let batch: Vec<String> = fan.batch.drain(..).map(|m| m.to_json()).collect();
        let n = batch.len();
        report.queue_sends += 1;
        match fan.queue.send_batch(batch).await {
            Ok(()) => report.enqueued += n,
            Err(e) => {
                fan.failed = true;
                report.error(listener, &e, None);
            }
        }
    }

    /// The listing part of a tick: pages from `state.page`, skipping runs up to `state.cursor` on the first;
    /// leaves both where the next tick must start. Fails only when the store cannot list at all.
    #[allow(clippy::too_many_arguments)]
    async fn sweep_pages(
        &self,
        opts: &SweepOptions,
        state: &mut SweepState,
        tick: &mut Tick<'_>,
        report: &mut SweepReport,
        listener: &dyn SweepListener,
        used: &dyn Fn() -> u64,
        last_tick: Option<u64>,
    ) -> Result<()> {
        let store = self.store().clone();
        let full = |report: &SweepReport, tick: &Tick<'_>| match &tick.fan {
            // Resumes the tick makes itself (diagnosis forks) stay within `max_runs` too.
            Some(f) if !f.failed => {
                used() + report.queue_sends >= opts.op_budget || f.room == 0 || report.resumed >= opts.max_runs
            }
            _ => used() + report.queue_sends >= opts.op_budget || report.resumed >= opts.max_runs,
        };
        let max_pages = match &tick.fan {
            Some(_) => opts.max_pages.max(opts.max_enqueue / opts.page_size.max(1) + 1),
            None => opts.max_pages,
        };
        let mut pages = 0;
        loop {
            if pages >= max_pages.max(1) || full(report, tick) {
                return Ok(());
            }
            pages += 1;
            let page = match store.pending_page(state.page.as_deref(), opts.page_size).await {
                Ok(p) => p,
                Err(e) => {
                    report.error(listener, &e, None);
                    if state.page.is_some() {
                        // A cursor the store no longer takes (expired, or written by another version): start over.
                        state.page = None;
                        state.cursor = None;
                        continue;
                    }
                    return Err(e);
                }
            };
            report.listed += page.runs.len();
            let skip_to = state.cursor.clone();
            if stopped(listener) {
                return Ok(());
            }
            let runs: Vec<&PendingRun> =
                page.runs.iter().filter(|r| skip_to.as_deref().is_none_or(|c| r.run_id.as_str() > c)).collect();
            let cands: Vec<Candidate<'_>> = runs.iter().map(|r| candidate(r)).collect();
            let now = self.deps.now();
            if tick.fan.is_some() {
                // The consumers' resumes that failed on the provider since the tick before.
                let failed = cands
                    .iter()
                    .filter(|c| c.outage_error && last_tick.is_some_and(|t| c.saved_at > t) && !c.quarantined)
                    .count() as u32;
                if let Some(active) = note_fanned_failures(opts, state, now, failed) {
                    report.heard(listener, listener.on_outage(active), None);
                }
            }
            if state.probe.is_none() {
                if let Some(i) = best_waiting(opts, state, now, &cands) {
                    state.probe = Some(runs[i].run_id.clone());
                }
            }
            let mut chosen = if tick.probe_free { pick_probe(opts, state, now, &cands) } else { None };
            // Whether each run is still pending, checked (in bulk) only for the runs the tick acts on.
            let mut fresh: Vec<Option<bool>> = vec![None; runs.len()];
            for (i, run) in runs.iter().enumerate() {
                if full(report, tick) || stopped(listener) {
                    return Ok(());
                }
                report.examined += 1;
                state.cursor = Some(run.run_id.clone());
                if tick.done.contains(&run.run_id) {
                    continue;
                }
                let now = self.deps.now();
                if tick.probe_free && chosen.is_some_and(|c| c < i || tick.done.contains(&runs[c].run_id)) {
                    // The chosen probe had nothing to resume: the best waiting run among the rest.
                    chosen = pick_probe(opts, state, now, &cands[i..]).map(|c| c + i);
                }
                let mut p = plan(opts, state, now, &cands[i]);
                if p == Plan::Outage && tick.probe_free && chosen == Some(i) && probe_due(state, now) {
                    p = Plan::Probe;
                }
                if p.leaves_alone() && tick.verified < VERIFY_PER_TICK && state.verifying(now) {
                    let due = state.verified.as_deref().is_none_or(|v| run.run_id.as_str() > v);
                    if due {
                        tick.verified += 1;
                        state.verified = Some(run.run_id.clone());
                        state.verify_round_at = None;
                        self.verify(run, opts, state, tick, report, listener).await;
                        continue;
                    }
                }
                if !p.acts() {
                    if let Plan::Backoff { .. } = p {
                        report.backing_off += 1;
                    }
                    continue;
                }
                if fresh[i].is_none() {
                    // This run and the next ones the tick will likely act on, in one check.
                    let room = match &tick.fan {
                        Some(f) if !f.failed => f.room,
                        _ => opts.max_runs.saturating_sub(report.resumed),
                    };
                    let room = room.clamp(1, MAX_BULK_GET);
                    let batch: Vec<usize> = std::iter::once(i)
                        .chain((i + 1..runs.len()).filter(|&j| plan(opts, state, now, &cands[j]).acts()))
                        .take(room)
                        .collect();
                    let listed: Vec<PendingRun> = batch.iter().map(|&j| runs[j].clone()).collect();
                    match store.check_pending(&listed).await {
                        Ok(f) => batch.iter().zip(f).for_each(|(&j, ok)| fresh[j] = Some(ok)),
                        Err(e) => {
                            // Act anyway: a resume reads the run itself and finds nothing to do if it is gone.
                            report.error(listener, &e, None);
                            batch.iter().for_each(|&j| fresh[j] = Some(true));
                        }
                    }
                }
                if fresh[i] == Some(false) {
                    report.stale += 1;
                    continue;
                }
                self.act(run, p, opts, state, tick, report, listener).await;
            }
            state.cursor = None;
            match page.cursor {
                Some(c) => state.page = Some(c),
                None => {
                    state.page = None;
                    report.complete = true;
                    if tick.verified < VERIFY_PER_TICK && state.verifying(self.deps.now()) {
                        // Every run left alone after the last verified one was verified: the round ends; the next
                        // starts a day later.
                        state.verified = None;
                        state.verify_round_at = Some(self.deps.now());
                    }
                    return Ok(());
                }
            }
        }
    }

    /// Does what `p` says with `run`: a resume (or the outage probe), a quarantine, a diagnosis fork.
    #[allow(clippy::too_many_arguments)]
    async fn act(
        &self,
        run: &PendingRun,
        p: Plan,
        opts: &SweepOptions,
        state: &mut SweepState,
        tick: &mut Tick<'_>,
        report: &mut SweepReport,
        listener: &dyn SweepListener,
    ) {
        if p == Plan::Resume && tick.fan.as_ref().is_some_and(|f| !f.failed) {
            tick.done.insert(run.run_id.clone());
            let Some(fan) = tick.fan.as_mut() else { return };
            if fan.canary.is_none() && report.probe.is_none() {
                fan.canary = Some((run.run_id.clone(), run.heal_of.clone()));
                return;
            }
            let msg = RecoveryMessage { run_id: run.run_id.clone(), heal_of: run.heal_of.clone() };
            fan.batch.push(msg);
            fan.room = fan.room.saturating_sub(1);
            if fan.batch.len() >= MAX_QUEUE_BATCH {
                self.flush(tick, report, listener).await;
            }
            return;
        }
        match p {
            Plan::Resume | Plan::Probe => {
                let probe = p == Plan::Probe;
                if probe {
                    tick.probe_free = false;
                    report.probe = Some(run.run_id.clone());
                }
                tick.done.insert(run.run_id.clone());
                report.resumed += 1;
                let nothing =
                    self.sweep_resume(&run.run_id, run.heal_of.as_deref(), probe, opts, state, report, listener).await;
                if probe && nothing {
                    // It told nothing about the provider: the probe goes to the next waiting run.
                    tick.probe_free = true;
                    report.probe = None;
                }
            }
            Plan::Quarantine => {
                self.quarantine(run, opts, report, listener).await;
                if let Some(original) = &run.heal_of {
                    // The diagnosis fork failed too: both are quarantined.
                    self.quarantine_by_id(original, opts, report, listener).await;
                }
            }
            Plan::Heal => {
                if self.heal(run, opts, state, report, listener).await {
                    // The new fork ran: it is not resumed again this tick if a later page lists it.
                    tick.done.insert(format!("{}{HEAL_SUFFIX}", run.run_id));
                    report.resumed += 1;
                }
            }
            _ => {}
        }
    }

    /// A paused run whose every approval is decided waits on nobody: a resolution was interrupted (its process
    /// died between recording a decision and resuming the run) or two reviewers decided its last two approvals
    /// at once (each saw the other pending). The sweep finishes the resolution with the recorded decisions (a
    /// decision given again is accepted), as a reviewer's retry would.
    async fn finish_resolution(
        &self,
        cp: &crate::core::checkpoint::Checkpoint,
        tick: &mut Tick<'_>,
        report: &mut SweepReport,
        listener: &dyn SweepListener,
    ) {
        use crate::core::approval::ApprovalStatus;
        let mut last = None;
        for id in &cp.approval_ids {
            match self.store().get_approval(id).await {
                Ok(Some(r)) if r.status != ApprovalStatus::Pending => last = Some(r),
                // Someone's decision is still awaited (or the record is gone: its resolution reports that).
                Ok(_) => return,
                Err(e) => {
                    report.error(listener, &e, Some(&cp.run_id));
                    return;
                }
            }
        }
        let Some(rec) = last else { return };
        tick.done.insert(cp.run_id.clone());
        report.resumed += 1;
        let opts = exec_opts(listener);
        // The recorded decision (or a wait's recorded resolution) again, as a repeat of it is taken.
        match self.approvals().settle(rec, opts).await {
            Ok(Settled::Run(result)) if result.status == RunStatus::Finished => {
                self.recovered(&cp.run_id, None, &result, report, listener).await
            }
            Ok(_) => {}
            Err(e) if e.code == ErrorCode::SessionBusy => report.busy += 1,
            Err(e) => {
                report.errors += 1;
                report.error(listener, &e, Some(&cp.run_id));
            }
        }
    }

    /// Whether a run listed as paused is, by its records alone (one read each, not the run's journal): every
    /// record of its pause exists, is undecided, and is not due. A decision is written before the run moves
    /// past its pause, so such a run still waits. Anything else (a decision, a missing record, a wait come
    /// due, a listing that names no records) is read in full.
    async fn still_waiting(&self, listed: &PendingRun) -> bool {
        use crate::core::approval::ApprovalStatus;
        if listed.approval_ids.is_empty() || listed.approval_ids.len() >= crate::store::index::MAX_INDEX_APPROVALS {
            return false;
        }
        let now = self.deps.now();
        for id in &listed.approval_ids {
            match self.store().get_approval(id).await {
                Ok(Some(r))
                    if r.run_id == listed.run_id
                        && r.status == ApprovalStatus::Pending
                        && r.due_at.is_none_or(|at| at > now) => {}
                _ => return false,
            }
        }
        true
    }

    /// Reads a run the listing says to leave alone, and acts on what it really is: a listing can be stale (an
    /// index write that failed, its repair lost with the process that would have made it), and a run left
    /// alone on a stale listing would never be recovered. A run found finished or gone is checked through the
    /// store, which drops its stale entry.
    async fn verify(
        &self,
        listed: &PendingRun,
        opts: &SweepOptions,
        state: &mut SweepState,
        tick: &mut Tick<'_>,
        report: &mut SweepReport,
        listener: &dyn SweepListener,
    ) {
        let store = self.store().clone();
        if listed.status == RunStatus::AwaitingApproval && self.still_waiting(listed).await {
            return;
        }
        match store.load(&listed.run_id).await {
            Ok(Some(cp)) if cp.status == RunStatus::AwaitingApproval => {
                self.finish_resolution(&cp, tick, report, listener).await;
            }
            Ok(Some(cp)) if cp.status != RunStatus::Finished => {
                let run = PendingRun::of(&cp);
                let now = self.deps.now();
                let mut p = plan(opts, state, now, &candidate(&run));
                if p == Plan::Outage && tick.probe_free && probe_due(state, now) {
                    p = Plan::Probe;
                }
                if p.acts() && !tick.done.contains(&run.run_id) {
                    self.act(&run, p, opts, state, tick, report, listener).await;
                }
            }
            Ok(_) => {
                report.stale += 1;
                // Ignored: the answer is known (finished or gone); the call only lets the store drop the entry.
                let _ = store.check_pending(std::slice::from_ref(listed)).await;
            }
            // A run that cannot be read is listed as corrupt by the store and left for a person.
            Err(e) => report.error(listener, &e, Some(&listed.run_id)),
        }
    }

    /// Takes in the circuit breakers other replicas recorded open (state `breakers`, see
    /// [`crate::runtime::Breakers`]); returns the text as stored (empty when none; `None` when it could not be
    /// read).
    async fn adopt_breakers(
        &self,
        opts: crate::core::breaker::BreakerOptions,
        report: &mut SweepReport,
        listener: &dyn SweepListener,
    ) -> Option<String> {
        match self.store().get_state("breakers").await {
            Ok(text) => {
                let text = text.unwrap_or_default();
                self.deps.breakers.adopt_text(&text, opts, self.deps.now());
                Some(text)
            }
            Err(e) => {
                report.error(listener, &e, None);
                None
            }
        }
    }

    /// Runs sweep ticks every `interval_ms` until `stop` is aborted (for long-lived hosts; on Workers use one
    /// `sweep` per cron invocation). Aborting `stop` also aborts the resume in flight (its checkpoint stays for
    /// the next start) and the tick starts nothing more. Returns the number of ticks.
    pub async fn recover(
        &self,
        opts: &SweepOptions,
        interval_ms: u64,
        listener: &dyn SweepListener,
        stop: &AbortSignal,
    ) -> u64 {
        let mut ticks = 0;
        let listener = Stopping { inner: listener, stop };
        while !stop.is_aborted() {
            // Ignored: every error a tick fails with was passed to `listener.on_error` already; the loop goes on.
            let _ = self.sweep(opts, &listener).await;
            ticks += 1;
            self.deps.nap(interval_ms, stop).await;
        }
        ticks
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) async fn sweep_resume(
        &self,
        run_id: &str,
        heal_of: Option<&str>,
        probe: bool,
        opts: &SweepOptions,
        state: &mut SweepState,
        report: &mut SweepReport,
        listener: &dyn SweepListener,
    ) -> bool {
        let res = self.resume_run(run_id, exec_opts(listener)).await;
        let attempt = match &res {
            // Stopped by the sweep's own stop signal: no word on the provider.
            Ok(Some(r)) if r.finish_reason == Some(FinishReason::Aborted) => Attempt::Other,
            Ok(Some(_)) => Attempt::Succeeded,
            // Nothing to resume (it finished or went away meanwhile; a listing can lag a finish whose process
            // died): no word on the provider, and not a probe either (the tick gives the probe to another run).
            Ok(None) => {
                if state.probe.as_deref() == Some(run_id) {
                    state.probe = None;
                }
                return true;
            }
            Err(e) if e.code == ErrorCode::SessionBusy => {
                report.busy += 1;
                return false;
            }
            Err(e) if is_provider_outage(e) => Attempt::ProviderDown,
            Err(_) => Attempt::Other,
        };
        if let Some(active) = note_attempt(opts, state, self.deps.now(), run_id, attempt, probe) {
            report.heard(listener, listener.on_outage(active), None);
        }
        match res {
            Ok(Some(result)) if result.status == RunStatus::Finished => {
                // The listing says which run a diagnosis fork heals; the fork's own checkpoint confirms it before
                // anything is deleted.
                let original = match heal_of {
                    None => None,
                    Some(original) => match self.store().load(run_id).await {
                        Ok(Some(cp)) if cp.heal_of.as_deref() == Some(original) => Some(original),
                        Ok(_) => None,
                        Err(e) => {
                            // The original's next tick finds the finished fork and completes the recovery.
                            report.error(listener, &e, Some(run_id));
                            return false;
                        }
                    },
                };
                self.recovered(run_id, original, &result, report, listener).await
            }
            Ok(_) => {}
            Err(e) => {
                report.errors += 1;
                report.error(listener, &e, Some(run_id));
            }
        }
        false
    }

    /// Reports a finished run; for a diagnosis fork of `original` (confirmed by the fork's marker), deletes
    /// the original and reports its id.
    pub(super) async fn recovered(
        &self,
        run_id: &str,
        original: Option<&str>,
        result: &RunResult,
        report: &mut SweepReport,
        listener: &dyn SweepListener,
    ) {
        let reported = match original {
            Some(original) => {
                if let Err(e) = self.delete(original).await {
                    report.error(listener, &e, Some(original));
                }
                original
            }
            None => run_id,
        };
        report.recovered.push(reported.to_string());
        report.heard(listener, listener.on_recovered(reported, result), Some(reported));
    }
}
