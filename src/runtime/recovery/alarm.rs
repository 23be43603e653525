//! A run's own recovery step (strict mode: the alarm of the run's Durable Object), under the sweep's rules
//! ([`crate::core::sweep::plan`]: backoff, quarantine cap, not-retryable and waiting-for-a-person runs left
//! alone; while the outage breaker is open, the sweep's probe goes first): the alarm resumes a run the sweep would resume now and says when to look
//! again. Alarms are at-least-once and may fire while the run executes: a resume that finds the run's lease
//! held is turned away (`STEADFAST_SESSION_BUSY`, before any tool or model call) and looks again once a dead
//! holder's lease could be taken over, so a repeated or early alarm changes nothing. Quarantine and diagnosis
//! forks stay with the cron sweep (it tells `onQuarantined` once), which still lists every strict-mode run.

use super::fanout::RecoveryMessage;
use super::sweep::{candidate, exec_opts, SweepListener};
use crate::core::checkpoint::RunStatus;
use crate::core::error::{ErrorCode, ErrorInfo, Result};
use crate::core::sweep::{plan, Plan, SweepOptions, SweepState};
use crate::runtime::waits::DueLook;
use crate::runtime::{Agent, SendOptions};
use crate::store::PendingRun;

impl Agent {
    /// When a lease written now could be taken over if its holder died: its expiry plus the grace period.
    pub fn takeover_at(&self) -> u64 {
        let lease = &self.deps.options.lease;
        self.deps.now().saturating_add(lease.ttl_ms).saturating_add(lease.grace_ms)
    }

    /// One recovery step for `run_id` (its alarm fired): resumes it if the sweep would resume it now, then
    /// answers when its alarm should fire next (`None`: no alarm: the run is finished, gone, waiting for a
    /// person, not retryable, quarantined, at the attempt cap or waiting on the outage breaker, which the
    /// sweep handles). A run's failed
    /// resume is recorded on the run (attempts, last error) as anywhere else, so the next alarm waits its
    /// backoff.
    pub async fn wake(&self, run_id: &str, opts: &SweepOptions) -> Result<Option<u64>> {
        self.wake_with(run_id, opts, &SendOptions::default()).await
    }

    /// [`Agent::wake`] with the options of the executions it starts (a recovery queue's consumer passes its
    /// listener's stop signal, and in tests its crash budget).
    pub(super) async fn wake_with(&self, run_id: &str, opts: &SweepOptions, send: &SendOptions) -> Result<Option<u64>> {
        let state: SweepState = match self.store().get_state("sweep").await? {
            // An unreadable sweep state is the sweep's to repair; the alarm plans with a closed breaker.
            Some(s) => serde_json::from_str(&s).unwrap_or_default(),
            None => SweepState::default(),
        };
        let mut resumed = false;
        loop {
            let Some(cp) = self.load(run_id).await? else { return Ok(None) };
            if cp.status == RunStatus::Finished {
                return Ok(None);
            }
            let run = PendingRun::of(&cp);
            let now = self.deps.now();
            return match plan(opts, &state, now, &candidate(&run)) {
                // Resumed once already (it failed with no backoff to wait): the next look is one interval on.
                Plan::Resume | Plan::Probe if resumed => Ok(Some(now.saturating_add(opts.interval_ms.max(1)))),
                Plan::Resume | Plan::Probe => {
                    resumed = true;
                    match self.resume_run(run_id, send.clone()).await {
                        Err(e) if e.code == ErrorCode::SessionBusy => Ok(Some(self.takeover_at())),
                        // Finished, paused or failed (recorded on the run): plan again from what is stored.
                        _ => continue,
                    }
                }
                Plan::Backoff { until } => Ok(Some(until)),
                // Paused: its waits that resolve by themselves (an event's deadline, a timer) are this alarm's.
                Plan::AwaitingPerson => match self.wake_waits(run_id, &cp.approval_ids, send).await {
                    Ok(DueLook::Resolved) if !resumed => {
                        resumed = true;
                        continue;
                    }
                    Ok(DueLook::Resolved) => Ok(Some(now)),
                    Ok(DueLook::Next(at)) => Ok(at),
                    Err(e) if e.code == ErrorCode::SessionBusy => Ok(Some(self.takeover_at())),
                    Err(e) => Err(e),
                },
                // While the outage breaker is open the sweep paces the provider: its probe, then its resumes.
                Plan::Outage | Plan::Quarantine | Plan::Heal | Plan::NotRetryable | Plan::Quarantined => Ok(None),
            };
        }
    }
}

/// What a consumer did with one recovery message.
#[derive(Clone, Debug, PartialEq)]
pub struct Consumed {
    /// The run the message named (empty for a message that could not be read).
    pub run_id: String,
    /// When the run should be looked at again, as [`Agent::wake`] answers (`None`: finished, gone, waiting for a
    /// person, quarantined or not retryable, at the attempt cap, or waiting on the outage breaker — the sweep's
    /// to decide): a consumer needs none of it (a later tick sends the run again when it is due).
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
                let next = self.wake_with(&m.run_id, opts, &exec_opts(listener)).await?;
                (m.run_id, next, None)
            }
            Err(e) => (String::new(), None, Some(e.info())),
        };
        Ok(Consumed { run_id, next, error })
    }
}
