//! Firing schedules (M23): [`Agent::fire_schedules`] runs each schedule's due fire once, however many
//! replicas or overlapping cron invocations tick at the same time.
//!
//! # The claim
//! A fire's run id is derived from the schedule and the fire time (`<schedule>.<time in s>.fire`) and the run
//! is created only if it does not exist: the existence check is repeated under the run's lease, which admits
//! one execution at a time, so of two ticks that find the same fire one runs it and the other reports it
//! `claimed` (its lease was held) or `already-fired` (the run existed). The fire's input is the run's first
//! journal entry, written before the model is called: a tick that crashes after it leaves an unfinished run
//! that the recovery sweep finishes like any other, and no later tick runs that fire again. On Workers KV the
//! claim is as strong as the run lease there (best effort across locations); in strict mode it is exact.
//!
//! # When a schedule starts
//! The store keeps each schedule's first-seen time (state document `schedule/<id>`): fire times before it are
//! not due (see [`crate::core::schedule`]).

use crate::core::checkpoint::RunStatus;
use crate::core::error::{Error, ErrorCode, ErrorInfo, Result};
use crate::core::ids::fire_run_id;
use crate::core::machine::Start;
use crate::core::schedule::{CompiledSchedule, Due};
use crate::runtime::{AbortSignal, Agent, SendOptions};
use serde::{Deserialize, Serialize};

/// What a tick did with one schedule.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(tag = "outcome", rename_all = "kebab-case", rename_all_fields = "camelCase")]
pub enum ScheduleOutcome {
    /// This tick ran the fire (the run's status after it: finished, or paused on an approval).
    Fired {
        /// Schedule id.
        schedule_id: String,
        /// The fire's run id.
        run_id: String,
        /// Fire time (ms since the epoch).
        #[cfg_attr(feature = "ts", ts(type = "number"))]
        fire_at: u64,
        /// The run's status after this tick.
        status: RunStatus,
    },
    /// The fire's run existed already: an earlier tick (or another replica) claimed it.
    AlreadyFired {
        /// Schedule id.
        schedule_id: String,
        /// The fire's run id.
        run_id: String,
        /// Fire time.
        #[cfg_attr(feature = "ts", ts(type = "number"))]
        fire_at: u64,
    },
    /// Another execution held the fire's run lease: another replica is running it now.
    Claimed {
        /// Schedule id.
        schedule_id: String,
        /// The fire's run id.
        run_id: String,
        /// Fire time.
        #[cfg_attr(feature = "ts", ts(type = "number"))]
        fire_at: u64,
    },
    /// The fire was missed and the schedule skips missed fires: nothing ran.
    Skipped {
        /// Schedule id.
        schedule_id: String,
        /// Fire time.
        #[cfg_attr(feature = "ts", ts(type = "number"))]
        fire_at: u64,
    },
    /// Nothing is due.
    Idle {
        /// Schedule id.
        schedule_id: String,
        /// The next fire time, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "ts", ts(optional, type = "number"))]
        next_fire_at: Option<u64>,
    },
    /// The fire (or the schedule's bookkeeping) failed; a fire whose run exists is finished by the recovery
    /// sweep, one that does not is tried again by the next tick.
    Failed {
        /// Schedule id.
        schedule_id: String,
        /// The fire's run id (when a fire was due).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "ts", ts(optional))]
        run_id: Option<String>,
        /// The error.
        error: ErrorInfo,
    },
}

/// A schedule's due fire ([`Agent::due_fire`]): the run it creates and its time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DueFire {
    /// The fire's run id (`<schedule>.<time in s>.fire`).
    pub run_id: String,
    /// Fire time (ms since the epoch).
    pub fire_at: u64,
}

/// A due fire sent to be run elsewhere (strict mode: to the object of its run): the schedule's id and the fire.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FireCall {
    /// Schedule id.
    pub schedule: String,
    /// The fire.
    pub fire: DueFire,
}

/// A schedule as `GET /schedules` shows it: its definition, when the store first saw it, its latest fire time
/// and that fire's run (if one was made), and its next fire time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase")]
pub struct ScheduleStatus {
    /// The schedule.
    pub schedule: crate::core::schedule::Schedule,
    /// When the store first saw it (`null`: no tick has yet).
    #[cfg_attr(feature = "ts", ts(type = "number | null"))]
    pub since: Option<u64>,
    /// The latest fire time at or before now, if any.
    #[cfg_attr(feature = "ts", ts(type = "number | null"))]
    pub last_fire_at: Option<u64>,
    /// That fire's run: its id and status, when it was made.
    pub last_run: Option<crate::store::RunRef>,
    /// The next fire time, if any.
    #[cfg_attr(feature = "ts", ts(type = "number | null"))]
    pub next_fire_at: Option<u64>,
}

impl Agent {
    /// What [`ScheduleStatus`] says of `schedule` now (reads only: its first-seen time and its latest fire's
    /// run).
    pub async fn schedule_status(&self, schedule: &CompiledSchedule) -> Result<ScheduleStatus> {
        let now = self.deps.now();
        let since = self
            .store()
            .get_state(&format!("schedule/{}", schedule.spec.id))
            .await?
            .and_then(|t| t.trim().parse::<u64>().ok());
        let last_fire_at = schedule.previous_fire(now);
        let last_run = match last_fire_at {
            Some(t) => {
                let run_id = fire_run_id(&schedule.spec.id, t / 1000);
                self.store().load(&run_id).await?.map(|cp| crate::store::RunRef { run_id, status: cp.status })
            }
            None => None,
        };
        Ok(ScheduleStatus {
            schedule: schedule.spec.clone(),
            since,
            last_fire_at,
            last_run,
            next_fire_at: schedule.next_fire(now),
        })
    }

    /// Fires every due schedule once (see the module docs), one after another, and says what happened to
    /// each. One schedule's failure does not stop the others.
    pub async fn fire_schedules(&self, schedules: &[CompiledSchedule], opts: &SendOptions) -> Vec<ScheduleOutcome> {
        let mut out = Vec::with_capacity(schedules.len());
        for s in schedules {
            out.push(self.fire_schedule(s, opts).await);
        }
        out
    }

    /// Fires `schedules` every `interval_ms` until `stop` is aborted (for long-lived hosts; on Workers call
    /// [`Agent::fire_schedules`] once per cron invocation instead). The first tick is at once; each tick is one
    /// [`Agent::fire_schedules`] with `opts` and `stop` as its abort signal (so aborting `stop` also aborts a
    /// fire in flight: its run stays unfinished and the recovery sweep finishes it), then its outcomes go to
    /// `on_tick`, then the loop sleeps on the agent's clock. Returns the number of ticks.
    pub async fn run_schedules(
        &self,
        schedules: &[CompiledSchedule],
        interval_ms: u64,
        opts: &SendOptions,
        on_tick: &dyn Fn(&[ScheduleOutcome]),
        stop: &AbortSignal,
    ) -> u64 {
        let opts = SendOptions { abort: Some(stop.clone()), ..opts.clone() };
        let mut ticks = 0;
        while !stop.is_aborted() {
            let outcomes = self.fire_schedules(schedules, &opts).await;
            ticks += 1;
            on_tick(&outcomes);
            if stop.is_aborted() {
                break;
            }
            self.deps.nap(interval_ms, stop).await;
        }
        ticks
    }

    /// Fires one schedule's due fire, if any (see the module docs).
    pub async fn fire_schedule(&self, schedule: &CompiledSchedule, opts: &SendOptions) -> ScheduleOutcome {
        match self.due_fire(schedule).await {
            Ok(due) => self.run_fire(schedule, due.fire_at, opts).await,
            Err(outcome) => outcome,
        }
    }

    /// [`Agent::fire_schedules`], each due fire run by `run_due` instead of here (strict mode: in the object of
    /// the fire's run, which calls [`Agent::run_fire`]); every other outcome goes through `other`. One after
    /// another; one schedule's failure does not stop the others.
    pub async fn fire_schedules_with<T>(
        &self,
        schedules: &[CompiledSchedule],
        run_due: impl AsyncFn(&CompiledSchedule, DueFire) -> T,
        other: impl Fn(ScheduleOutcome) -> T,
    ) -> Vec<T> {
        let mut out = Vec::with_capacity(schedules.len());
        for s in schedules {
            out.push(match self.due_fire(s).await {
                Ok(due) => run_due(s, due).await,
                Err(outcome) => other(outcome),
            });
        }
        out
    }

    /// What a tick finds for `schedule` before it runs anything: its due fire, whose run does not exist yet, or
    /// the outcome that ends the tick for it (idle, skipped, already fired, failed). Notes the schedule's
    /// first-seen time on the first tick.
    pub async fn due_fire(&self, schedule: &CompiledSchedule) -> std::result::Result<DueFire, ScheduleOutcome> {
        let schedule_id = schedule.spec.id.clone();
        let now = self.deps.now();
        let since = match self.schedule_since(&schedule_id, now).await {
            Ok(since) => since,
            Err(e) => return Err(ScheduleOutcome::Failed { schedule_id, run_id: None, error: e.info() }),
        };
        let fire_at = match schedule.due(now, since) {
            Due::Nothing => return Err(ScheduleOutcome::Idle { next_fire_at: schedule.next_fire(now), schedule_id }),
            Due::Skip(fire_at) => return Err(ScheduleOutcome::Skipped { schedule_id, fire_at }),
            Due::Fire(t) => t,
        };
        let run_id = fire_run_id(&schedule_id, fire_at / 1000);
        match self.store().load(&run_id).await {
            Ok(Some(_)) => Err(ScheduleOutcome::AlreadyFired { schedule_id, run_id, fire_at }),
            Ok(None) => Ok(DueFire { run_id, fire_at }),
            Err(e) => Err(ScheduleOutcome::Failed { schedule_id, run_id: Some(run_id), error: e.info() }),
        }
    }

    /// Runs `schedule`'s fire at `fire_at`: its run (`<schedule>.<time in s>.fire`) is created only if it does
    /// not exist, under the run's lease (see the module docs). `fire_at` must be one of the schedule's fire times
    /// and not in the future: anything else fails with `STEADFAST_INVALID_INPUT` and runs nothing.
    pub async fn run_fire(&self, schedule: &CompiledSchedule, fire_at: u64, opts: &SendOptions) -> ScheduleOutcome {
        let schedule_id = schedule.spec.id.clone();
        let run_id = fire_run_id(&schedule_id, fire_at / 1000);
        if schedule.previous_fire(fire_at) != Some(fire_at) || fire_at > self.deps.now() {
            let error = Error::invalid_input(format!(
                "{fire_at} is not a past fire time of schedule '{schedule_id}' ({:?})",
                schedule.spec.cron
            ));
            return ScheduleOutcome::Failed { schedule_id, run_id: Some(run_id), error: error.info() };
        }
        let start = Start::Turn { prior: None, input: schedule.spec.input.messages() };
        match self.execute(&run_id, start, opts).await {
            Ok(Some(result)) => ScheduleOutcome::Fired { schedule_id, run_id, fire_at, status: result.status },
            Ok(None) => ScheduleOutcome::AlreadyFired { schedule_id, run_id, fire_at },
            Err(e) if e.code == ErrorCode::SessionBusy => {
                // Held by another execution, or created by it between our read and our lease.
                match self.store().load(&run_id).await {
                    Ok(Some(cp)) if cp.status == RunStatus::Finished => {
                        ScheduleOutcome::AlreadyFired { schedule_id, run_id, fire_at }
                    }
                    _ => ScheduleOutcome::Claimed { schedule_id, run_id, fire_at },
                }
            }
            Err(e) => ScheduleOutcome::Failed { schedule_id, run_id: Some(run_id), error: e.info() },
        }
    }

    /// When the store first saw schedule `id` (written now when it had not).
    async fn schedule_since(&self, id: &str, now: u64) -> Result<u64> {
        let name = format!("schedule/{id}");
        let store = self.store();
        if let Some(text) = store.get_state(&name).await? {
            if let Ok(since) = text.trim().parse::<u64>() {
                return Ok(since);
            }
        }
        store.put_state(&name, &now.to_string()).await?;
        Ok(now)
    }
}
