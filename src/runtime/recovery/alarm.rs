//! A run's own recovery step (strict mode: the alarm of the run's Durable Object; KV mode: a recovery queue's
//! consumer), under the sweep's rules ([`crate::core::sweep::plan`]: backoff, the attempt cap, not-retryable
//! and waiting-for-a-person runs left alone; while the outage breaker is open, the sweep's probe goes first):
//! the step resumes a run the sweep would resume now, quarantines a run at the attempt cap (telling
//! `onQuarantined` once, as the sweep does: whoever marks it tells) or gives it its diagnosis fork and drives
//! that fork (resumes it when due, recovers the original once it finished, quarantines both when it reaches
//! the cap too), and says when to look again. Alarms are at-least-once and may fire while the run executes: a
//! step that finds the run's lease held is turned away (`STEADFAST_SESSION_BUSY`, before any tool or model
//! call) and looks again once a dead holder's lease could be taken over, so a repeated or early alarm changes
//! nothing.

use super::fanout::RecoveryMessage;
use super::sweep::{candidate, exec_opts, SweepListener, SweepReport};
use crate::core::checkpoint::RunStatus;
use crate::core::error::Error;
use crate::core::error::{ErrorCode, ErrorInfo, Result};
use crate::core::gate::{Grant, RATE_LIMIT_PAUSE_MS};
use crate::core::sweep::{gate_cap, plan, Plan, SweepOptions, SweepState, HEAL_SUFFIX};
use crate::runtime::waits::DueLook;
use crate::runtime::Agent;
use crate::store::PendingRun;

/// At most this many actions (resumes, marks, forks) in one step; then it looks again an interval later.
const MAX_ACTIONS: u32 = 6;

impl Agent {
    /// When a lease written now could be taken over if its holder died: its expiry plus the grace period.
    pub fn takeover_at(&self) -> u64 {
        let lease = &self.deps.options.lease;
        self.deps.now().saturating_add(lease.ttl_ms).saturating_add(lease.grace_ms)
    }

    /// One recovery step for `run_id` (its alarm fired): resumes it if the sweep would resume it now, quarantines
    /// it or forks it for diagnosis at the attempt cap (and drives that fork), then answers when its alarm
    /// should fire next (`None`: no alarm: the run is finished, gone, waiting for a person, not retryable,
    /// quarantined or recovered by its fork; a run waiting on the outage breaker is looked at again once the
    /// sweep's next probe may have closed it, within an interval after it). A run's
    /// failed resume is recorded on the run (attempts, last error) as anywhere else, so the next alarm waits
    /// its backoff. `listener` hears of quarantines and recoveries (and errors) as from a sweep tick; its stop
    /// signal stops the executions the step starts.
    pub async fn wake(&self, run_id: &str, opts: &SweepOptions, listener: &dyn SweepListener) -> Result<Option<u64>> {
        let state: SweepState = match self.store().get_state("sweep").await? {
            // An unreadable sweep state is the sweep's to repair; the alarm plans with a closed breaker.
            Some(s) => serde_json::from_str(&s).unwrap_or_default(),
            None => SweepState::default(),
        };
        let send = exec_opts(listener);
        let mut report = SweepReport::default();
        // The run the step looks at: `run_id`, or its diagnosis fork while that is in progress.
        let mut id = run_id.to_string();
        let mut actions = 0;
        let mut resumed_here = false;
        loop {
            let now = self.deps.now();
            if actions >= MAX_ACTIONS {
                return Ok(Some(now.saturating_add(opts.interval_ms.max(1))));
            }
            let cp = match self.load(&id).await? {
                Some(cp) if cp.status != RunStatus::Finished => cp,
                // The fork finished (or went away): the original's plan says what is left (its recovery).
                _ if id != run_id => {
                    id = run_id.to_string();
                    resumed_here = false;
                    continue;
                }
                _ => return Ok(None),
            };
            let run = PendingRun::of(&cp);
            return match plan(opts, &state, now, &candidate(&run)) {
                // Resumed once already (it failed with no backoff to wait): the next look is one interval on.
                Plan::Resume | Plan::Probe if resumed_here => Ok(Some(now.saturating_add(opts.interval_ms.max(1)))),
                Plan::Resume | Plan::Probe => {
                    if let Some(at) = self.take_slot(&id, opts, &state, listener).await {
                        return Ok(Some(at));
                    }
                    resumed_here = true;
                    actions += 1;
                    let resumed = self.resume_run(&id, send.clone()).await;
                    self.give_slot(&id, opts, resumed.as_ref().err()).await;
                    match resumed {
                        Err(e) if e.code == ErrorCode::SessionBusy => Ok(Some(self.takeover_at())),
                        // Finished, paused or failed (recorded on the run): plan again from what is stored.
                        _ => continue,
                    }
                }
                Plan::Backoff { until } => Ok(Some(until)),
                // Paused: its waits that resolve by themselves (an event's deadline, a timer) are this alarm's.
                Plan::AwaitingPerson => match self.wake_waits(&id, &cp.approval_ids, &send).await {
                    Ok(DueLook::Resolved) if !resumed_here => {
                        resumed_here = true;
                        actions += 1;
                        continue;
                    }
                    Ok(DueLook::Resolved) => Ok(Some(now)),
                    Ok(DueLook::Next(at)) => Ok(at),
                    Err(e) if e.code == ErrorCode::SessionBusy => Ok(Some(self.takeover_at())),
                    Err(e) => Err(e),
                },
                Plan::Quarantine => {
                    actions += 1;
                    let busy = report.busy;
                    self.quarantine(&run, opts, &mut report, listener).await;
                    if let Some(original) = &run.heal_of {
                        // The diagnosis fork failed too: both are quarantined.
                        self.quarantine_by_id(original, opts, &mut report, listener).await;
                    }
                    match report.busy > busy {
                        true => Ok(Some(self.takeover_at())),
                        // Marked (by this step or another), or the mark failed: plan again from what is stored.
                        false => continue,
                    }
                }
                Plan::Heal => {
                    let heal_id = format!("{id}{HEAL_SUFFIX}");
                    match self.load(&heal_id).await? {
                        // Its fork is in progress: the fork is what this step drives now.
                        Some(h)
                            if h.heal_of.as_deref() == Some(id.as_str())
                                && h.status != RunStatus::Finished
                                && !h.quarantined =>
                        {
                            id = heal_id;
                            resumed_here = false;
                            continue;
                        }
                        _ => {
                            // The fork's first resume calls the provider: it takes a slot as a resume does.
                            if let Some(at) = self.take_slot(&id, opts, &state, listener).await {
                                return Ok(Some(at));
                            }
                            actions += 1;
                            let busy = report.busy;
                            // The breaker's state is the sweep's to keep: what the fork's resume tells it is not
                            // written from here.
                            self.heal(&run, opts, &mut state.clone(), &mut report, listener).await;
                            self.give_slot(&id, opts, None).await;
                            match report.busy > busy {
                                true => Ok(Some(self.takeover_at())),
                                false => continue,
                            }
                        }
                    }
                }
                // While the outage breaker is open the sweep's probe goes first: the alarm looks again once the
                // next probe may have closed the breaker, spread over an interval so a backlog's alarms do not
                // all come back at once.
                Plan::Outage => {
                    let probe = state.outage.as_ref().map_or(now, |o| o.next_probe_at).max(now);
                    let spread = self.deps.rng.next_u64() % opts.interval_ms.max(1);
                    Ok(Some(probe.saturating_add(opts.interval_ms).saturating_add(spread)))
                }
                Plan::NotRetryable | Plan::Quarantined => Ok(None),
            };
        }
    }
}

impl Agent {
    /// Takes a slot of the agent's recovery gate for `run_id` (when it has one and `opts` set a ceiling): `Some(at)`
    /// when the gate says to ask again at `at`. A gate that cannot be reached lets the resume go ahead (told to
    /// the listener): it protects the provider and never stops recovery.
    async fn take_slot(
        &self,
        run_id: &str,
        opts: &SweepOptions,
        state: &SweepState,
        listener: &dyn SweepListener,
    ) -> Option<u64> {
        let (gate, cap) = (self.deps.gate.as_ref()?, gate_cap(opts, state, self.deps.now())?);
        match gate.acquire(run_id, cap).await {
            Ok(Grant::Granted) => None,
            Ok(Grant::Later(at)) => Some(at.max(self.deps.now())),
            Err(e) => {
                // Ignored: the listener's own failure changes nothing here.
                let _ = listener.on_error(&e, Some(run_id));
                None
            }
        }
    }

    /// Gives `run_id`'s slot back (if the agent has a gate and `opts` a ceiling); a resume the provider answered
    /// 429 holds the gate back for its `Retry-After`.
    async fn give_slot(&self, run_id: &str, opts: &SweepOptions, failed: Option<&Error>) {
        let Some(gate) = self.deps.gate.as_ref().filter(|_| opts.ceiling.is_some()) else { return };
        let retry_after = failed
            .filter(|e| e.code == ErrorCode::ProviderRateLimited)
            .map(|e| e.retry_after_ms.unwrap_or(RATE_LIMIT_PAUSE_MS));
        // Ignored: a slot not given back is taken back after SLOT_MS.
        let _ = gate.release(run_id, retry_after).await;
    }
}

/// What a consumer did with one recovery message.
#[derive(Clone, Debug, PartialEq)]
pub struct Consumed {
    /// The run the message named (empty for a message that could not be read).
    pub run_id: String,
    /// When the run should be looked at again, as [`Agent::wake`] answers (`None`: finished, gone, waiting for a
    /// person, quarantined or not retryable): a consumer needs none of it (a later tick sends the run again when
    /// it is due).
    pub next: Option<u64>,
    /// Why the message could not be read (`STEADFAST_INVALID_INPUT`: acknowledge it, delivering it again would
    /// not help).
    pub error: Option<ErrorInfo>,
}

impl Agent {
    /// Resumes the run one recovery message names if the sweep's plan for it, read again now, still says to
    /// resume it — the run's own recovery step, as strict mode's alarm takes it ([`Agent::wake`]): a message may
    /// come late, twice, or after another consumer finished the run; a run in its backoff, paused, at the cap or
    /// waiting on the outage breaker is left alone (a paused run's waits that came due are taken up). Acknowledge
    /// the message on `Ok`, whatever it found; on `Err` (the run or the sweep state could not be read) let the
    /// queue deliver it again.
    pub async fn consume_recovery(
        &self,
        body: &str,
        opts: &SweepOptions,
        listener: &dyn SweepListener,
    ) -> Result<Consumed> {
        let (run_id, next, error) = match RecoveryMessage::parse(body) {
            Ok(m) => {
                let mut next = self.wake(&m.run_id, opts, listener).await?;
                if let (Some(original), None) = (&m.heal_of, next) {
                    // A diagnosis fork that finished (or was quarantined, or is gone): its original's step
                    // recovers it (or quarantines it with the fork) now rather than at the next tick.
                    next = self.wake(original, opts, listener).await?;
                }
                (m.run_id, next, None)
            }
            Err(e) => (String::new(), None, Some(e.info())),
        };
        Ok(Consumed { run_id, next, error })
    }
}
