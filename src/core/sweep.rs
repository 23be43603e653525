//! The recovery sweep's decisions (M12, M13, M14), as pure functions of what the store lists, the sweep
//! state kept in the store, and the time. Nothing lives in memory between ticks: on Workers each cron
//! invocation is a separate, short process, and ticks may overlap or repeat.

use super::backoff::Backoff;
use super::checkpoint::RunStatus;
use super::error::ErrorCode;
use serde::{Deserialize, Serialize};

/// Sweep settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct SweepOptions {
    /// Base interval (ms): a run that failed `n` times in a row waits `interval × 2^(n-1)` (default 30 s).
    pub interval_ms: u64,
    /// Largest backoff (default 15 min).
    pub max_backoff_ms: u64,
    /// Failures in a row before a run is quarantined (default 10).
    pub max_attempts: u32,
    /// Resumes per tick, at most (default 25).
    pub max_runs: usize,
    /// Store operations per tick, at most, checked between runs (default 800, under Workers' 1,000).
    pub op_budget: u64,
    /// Provider failures in a row (across runs) that open the outage breaker (default 3).
    pub outage_threshold: u32,
    /// Give a run at the attempt cap one more try as a `<id>.heal` fork with a diagnosis note (default off).
    pub retry_with_diagnosis: bool,
    /// Runs asked for per page of the pending listing (default 1,000, a Workers KV list page).
    pub page_size: usize,
    /// Pages listed per tick, at most (default 3): a tick never lists the whole backlog; the next tick
    /// continues where this one stopped. A tick that fans out through a queue lists up to
    /// `max_enqueue / page_size + 1` pages when that is more.
    pub max_pages: usize,
    /// With a recovery queue (fan-out): messages a tick sends at most (default 5,000), one per due run, in
    /// batches of 100. Right after an outage ends the cap ramps up from `max_runs` (×4 each further minute).
    pub max_enqueue: usize,
    /// Recovery resumes on the provider at once, at most, across isolates (strict mode's alarms, a recovery
    /// queue's consumers), when the agent has a recovery gate (default none: no limit). Right after an outage
    /// ends it ramps up from `max_runs` (×4 each further minute).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub ceiling: Option<u32>,
}

impl Default for SweepOptions {
    fn default() -> Self {
        SweepOptions {
            interval_ms: 30_000,
            max_backoff_ms: 15 * 60_000,
            max_attempts: 10,
            max_runs: 25,
            op_budget: 800,
            outage_threshold: 3,
            retry_with_diagnosis: false,
            page_size: 1_000,
            max_pages: 3,
            max_enqueue: 5_000,
            ceiling: None,
        }
    }
}

/// The provider-outage breaker.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Outage {
    /// When it opened.
    pub since: u64,
    /// Probes that failed since.
    pub probes: u32,
    /// Earliest time of the next probe.
    pub next_probe_at: u64,
}

/// What the sweep keeps in the store between ticks.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SweepState {
    /// Provider failures in a row, across runs.
    pub provider_failures: u32,
    /// The open breaker, if any.
    pub outage: Option<Outage>,
    /// The last run examined on the page `page` starts (the next tick skips runs up to it there).
    pub cursor: Option<String>,
    /// The store's (opaque) listing cursor of the page the next tick starts with (`None`: the beginning).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page: Option<String>,
    /// A run known to wait on the breaker (the last one a provider outage failed): the probe of a due tick,
    /// wherever the listing stands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe: Option<String>,
    /// When the last outage ended: provider failures saved before it do not count toward quarantine.
    pub last_outage_end: Option<u64>,
    /// When a tick last wrote this state: every tick that changes something, and otherwise at most every
    /// [`HEARTBEAT_MS`] (so an idle deployment shows its cron is alive at a few writes an hour, within Workers
    /// KV's free daily write allowance, instead of one write a minute).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_tick_at: Option<u64>,
    /// The last run the sweep read to verify that its listing still says the truth, among the runs the listing
    /// says to leave alone (waiting for a person, not retryable, quarantined): each tick verifies a few, after
    /// this one in the listing's order, so every such run is verified in turn (see [`VERIFY_PER_TICK`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verified: Option<String>,
    /// When the last round of verifications ended: the next starts [`VERIFY_ROUND_MS`] later, so a run left
    /// alone (a paused run waiting days) is read about once a day, whatever the number of such runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify_round_at: Option<u64>,
}

/// How long after a round of verifications ends the next one starts: a day.
pub const VERIFY_ROUND_MS: u64 = 24 * 3_600_000;

impl SweepState {
    /// Whether a round of verifications is under way (or may start) at `now`.
    pub fn verifying(&self, now: u64) -> bool {
        self.verify_round_at.is_none_or(|t| now >= t.saturating_add(VERIFY_ROUND_MS))
    }
}

/// Runs a tick reads to verify that their listing still says the truth, among those it would leave alone: a
/// listing can be stale (an index write lost with the process that made it), and a run left alone on a stale
/// listing would never be recovered.
pub const VERIFY_PER_TICK: usize = 10;

/// How often an idle sweep (one that changes nothing) still records its tick: ten minutes.
pub const HEARTBEAT_MS: u64 = 600_000;

/// Whether a tick at `now` writes the state it read (`initial`) and ends with (`state`): when it changed, or when
/// the last recorded tick is older than [`HEARTBEAT_MS`].
pub fn tick_writes(initial: &SweepState, state: &SweepState, now: u64) -> bool {
    let changed =
        SweepState { last_tick_at: None, ..state.clone() } != SweepState { last_tick_at: None, ..initial.clone() };
    changed || initial.last_tick_at.is_none_or(|t| now >= t.saturating_add(HEARTBEAT_MS))
}

/// What the sweep knows of a run (from the pending listing).
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate<'a> {
    /// Run id.
    pub run_id: &'a str,
    /// Status.
    pub status: RunStatus,
    /// Failed attempts in a row.
    pub attempts: u32,
    /// Code of the last failure.
    pub last_error: Option<ErrorCode>,
    /// Whether the last failure may pass.
    pub retryable: bool,
    /// Already quarantined.
    pub quarantined: bool,
    /// The last failure was a provider outage (429, 5xx, timeout, network).
    pub outage_error: bool,
    /// When the last attempt was saved.
    pub saved_at: u64,
    /// For a diagnosis fork: the run it tries to heal (its checkpoint's marker, never its name).
    pub heal_of: Option<&'a str>,
}

/// The decision for one run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Resume it.
    Resume,
    /// Resume it as the outage probe.
    Probe,
    /// It reached the attempt cap: quarantine it (once).
    Quarantine,
    /// It reached the attempt cap: try a `<id>.heal` fork first.
    Heal,
    /// Waiting for its backoff.
    Backoff {
        /// Earliest next attempt.
        until: u64,
    },
    /// Waiting for a person (approval or question).
    AwaitingPerson,
    /// Its last error is not retryable (or its checkpoint is corrupt).
    NotRetryable,
    /// Quarantined earlier.
    Quarantined,
    /// The outage breaker is open: the run waits on it (see [`probe_rank`]); it is not the probe.
    Outage,
}

impl Plan {
    /// Whether the sweep touches the run (reads it, resumes it, or writes to it).
    pub fn acts(&self) -> bool {
        matches!(self, Plan::Resume | Plan::Probe | Plan::Quarantine | Plan::Heal)
    }

    /// Whether the sweep leaves the run alone for good as long as its listing stays as it is (so a stale
    /// listing would leave it for ever): waiting for a person, not retryable, quarantined.
    pub fn leaves_alone(&self) -> bool {
        matches!(self, Plan::AwaitingPerson | Plan::NotRetryable | Plan::Quarantined)
    }
}

/// How many recovery messages a tick that fans out may send at `now`: `max_enqueue`, except in the minutes
/// right after an outage ended (or while the breaker is open: the tick's probe may close it), when a returning
/// provider sees a ramp: `max_runs` in the first minute, four times more each further minute, up to
/// `max_enqueue`.
pub fn enqueue_cap(opts: &SweepOptions, state: &SweepState, now: u64) -> usize {
    // While the breaker is open, a tick whose probe closes it sends as in the first minute after an outage.
    let end = match (&state.outage, state.last_outage_end) {
        (Some(_), _) => now,
        (None, Some(end)) => end,
        (None, None) => return opts.max_enqueue,
    };
    let minutes = (now.saturating_sub(end) / 60_000).min(16) as u32;
    opts.max_runs.max(1).saturating_mul(4usize.saturating_pow(minutes)).min(opts.max_enqueue)
}

/// How many recovery resumes a gate lets run on the provider at once at `now` (`None`: no ceiling is set): the
/// ceiling, ramped as [`enqueue_cap`] ramps the sends after an outage.
pub fn gate_cap(opts: &SweepOptions, state: &SweepState, now: u64) -> Option<u32> {
    let ramp = u32::try_from(enqueue_cap(&SweepOptions { max_enqueue: usize::MAX, ..opts.clone() }, state, now));
    opts.ceiling.map(|c| c.max(1).min(ramp.unwrap_or(u32::MAX)))
}

/// Whether runs that failed since the tick before (`failed`: listed runs whose last failure, saved after that
/// tick, was a provider outage) open the outage breaker: resumes fanned out through a queue do not report to the
/// sweep, so their failures are counted from the listing. Returns `Some(true)` when the breaker opens.
pub fn note_fanned_failures(opts: &SweepOptions, state: &mut SweepState, now: u64, failed: u32) -> Option<bool> {
    if state.outage.is_some() || failed == 0 {
        return None;
    }
    state.provider_failures = state.provider_failures.saturating_add(failed);
    (state.provider_failures >= opts.outage_threshold).then(|| {
        state.outage = Some(Outage { since: now, probes: 0, next_probe_at: now.saturating_add(opts.interval_ms) });
        true
    })
}

/// The suffix of diagnosis forks (reserved: users cannot create runs with it).
pub const HEAL_SUFFIX: &str = ".heal";

impl SweepOptions {
    /// The sweep's backoff: doubling from `interval_ms`, capped at `max_backoff_ms`, without jitter (every
    /// delay is recomputed from counts stored with the run, so ticks in separate processes agree).
    pub fn backoff(&self) -> Backoff {
        Backoff::exponential(self.interval_ms, self.max_backoff_ms)
    }
}

/// How long a run that failed `attempts` times in a row waits: nothing before its first failure, then the
/// sweep's backoff from its first delay (`interval × 2^(attempts-1)`).
pub fn backoff_ms(opts: &SweepOptions, attempts: u32) -> u64 {
    match attempts {
        0 => 0,
        n => opts.backoff().window(n - 1),
    }
}

/// The decision for one run, the outage probe aside: while the breaker is open every run that could run
/// (in progress, retryable, not quarantined) waits on it — it is not quarantined, healed or resumed, and its
/// own backoff does not matter (the breaker paces the provider) — and the tick picks the probe among them
/// ([`pick_probe`]).
pub fn plan(opts: &SweepOptions, state: &SweepState, now: u64, run: &Candidate<'_>) -> Plan {
    if run.status == RunStatus::AwaitingApproval {
        return Plan::AwaitingPerson;
    }
    if run.last_error.is_some() && !run.retryable {
        return Plan::NotRetryable;
    }
    if run.quarantined {
        return Plan::Quarantined;
    }
    // A run at the cap whose last failure was not the provider's (a tool) is not waiting on the provider: the
    // outage does not excuse it, and it is quarantined (or healed) as at any other time. Left waiting, it would
    // be the probe again and again, and, never reaching the model, never end the outage.
    let failing_elsewhere = run.last_error.is_some() && !run.outage_error;
    if state.outage.is_some() && !(failing_elsewhere && run.attempts >= opts.max_attempts) {
        return Plan::Outage;
    }
    // Provider failures while the breaker was open do not count toward quarantine, nor does a provider's 429
    // (it asked to slow down: the run waits its backoff).
    let forgiven = run.outage_error
        && (run.last_error == Some(ErrorCode::ProviderRateLimited)
            || state.last_outage_end.is_some_and(|end| run.saved_at <= end));
    if run.attempts >= opts.max_attempts && !forgiven {
        if opts.retry_with_diagnosis && run.heal_of.is_none() {
            return Plan::Heal;
        }
        return Plan::Quarantine;
    }
    let until = run.saved_at.saturating_add(backoff_ms(opts, run.attempts));
    if run.attempts > 0 && now < until {
        return Plan::Backoff { until };
    }
    Plan::Resume
}

/// Whether the breaker is open and its next probe is due.
pub fn probe_due(state: &SweepState, now: u64) -> bool {
    state.outage.as_ref().is_some_and(|o| now >= o.next_probe_at)
}

/// How good a probe a run waiting on the breaker makes (lower is better; `None`: it does not wait on it).
/// A run whose last failure was a provider outage (or that has not failed) calls the model first when
/// resumed; one whose last failure was something else (a tool) may fail again before reaching the model
/// (and at the attempt cap it does not wait: [`plan`]). Every waiting run ranks: while runs wait on the
/// breaker, it always has a probe.
pub fn probe_rank(opts: &SweepOptions, state: &SweepState, now: u64, run: &Candidate<'_>) -> Option<u8> {
    if plan(opts, state, now, run) != Plan::Outage {
        return None;
    }
    let model_first = run.last_error.is_none() || run.outage_error;
    Some(if model_first { 0 } else { 1 })
}

/// The probe of a tick among `runs`: when a probe is due, the best-ranked waiting run (the first of equals).
pub fn pick_probe(opts: &SweepOptions, state: &SweepState, now: u64, runs: &[Candidate<'_>]) -> Option<usize> {
    if !probe_due(state, now) {
        return None;
    }
    best_waiting(opts, state, now, runs)
}

/// The best-ranked run of `runs` waiting on the breaker (the first of equals), due or not.
pub fn best_waiting(opts: &SweepOptions, state: &SweepState, now: u64, runs: &[Candidate<'_>]) -> Option<usize> {
    runs.iter()
        .enumerate()
        .filter_map(|(i, r)| probe_rank(opts, state, now, r).map(|rank| (rank, i)))
        .min()
        .map(|(_, i)| i)
}

/// How a resume ended, for the breaker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// The model answered (the run progressed, finished or paused).
    Succeeded,
    /// A provider failure that counts toward an outage (429, 5xx, timeouts, network).
    ProviderDown,
    /// Anything else (a tool, a bad key, the store, nothing to resume): the breaker does not count it.
    Other,
}

/// The wait before the probe after `probes` failed ones: the sweep's backoff one step past the failed
/// probes (`interval × 2^probes`), growing for at most 20 failed probes.
fn probe_wait(opts: &SweepOptions, probes: u32) -> u64 {
    opts.backoff().window(probes.min(20))
}

/// Updates the breaker after a resume; returns `Some(true)` when an outage starts, `Some(false)` when it ends.
/// A probe that told nothing about the provider (`Other`) still spaces the next probe by the current wait,
/// so a run that fails before reaching the model is not tried every tick.
/// A run that failed with a provider outage is remembered as the next probe (`state.probe`), and forgotten
/// again when it fails for another reason.
pub fn note_attempt(
    opts: &SweepOptions,
    state: &mut SweepState,
    now: u64,
    run_id: &str,
    attempt: Attempt,
    was_probe: bool,
) -> Option<bool> {
    match attempt {
        Attempt::Succeeded => {
            state.provider_failures = 0;
            state.probe = None;
            let ended = state.outage.take().map(|_| false);
            if ended.is_some() {
                state.last_outage_end = Some(now);
            }
            ended
        }
        Attempt::ProviderDown => {
            state.provider_failures = state.provider_failures.saturating_add(1);
            state.probe = Some(run_id.to_string());
            match &mut state.outage {
                Some(o) => {
                    if was_probe {
                        o.probes = o.probes.saturating_add(1);
                        o.next_probe_at = now.saturating_add(probe_wait(opts, o.probes));
                    }
                    None
                }
                None if state.provider_failures >= opts.outage_threshold => {
                    state.outage =
                        Some(Outage { since: now, probes: 0, next_probe_at: now.saturating_add(opts.interval_ms) });
                    Some(true)
                }
                None => None,
            }
        }
        Attempt::Other => {
            if let (true, Some(o)) = (was_probe, &mut state.outage) {
                o.next_probe_at = now.saturating_add(probe_wait(opts, o.probes));
            }
            // A remembered probe that failed short of the provider (a tool, say) is forgotten: the next probe
            // goes to the best-ranked waiting run, which calls the model first, instead of the same run again.
            if state.probe.as_deref() == Some(run_id) {
                state.probe = None;
            }
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(attempts: u32, saved_at: u64) -> Candidate<'static> {
        Candidate {
            run_id: "r",
            status: RunStatus::InProgress,
            attempts,
            last_error: (attempts > 0).then_some(ErrorCode::ProviderUnavailable),
            retryable: true,
            quarantined: false,
            outage_error: attempts > 0,
            saved_at,
            heal_of: None,
        }
    }

    fn tool_failure(attempts: u32) -> Candidate<'static> {
        Candidate { last_error: Some(ErrorCode::ToolPropagated), outage_error: false, ..run(attempts, 0) }
    }

    fn down(next_probe_at: u64) -> SweepState {
        SweepState { outage: Some(Outage { since: 0, probes: 0, next_probe_at }), ..SweepState::default() }
    }

    #[test]
    fn backoff_doubles_and_caps_at_15_minutes() {
        let o = SweepOptions::default();
        let w: Vec<u64> = (0..8).map(|a| backoff_ms(&o, a)).collect();
        assert_eq!(w, vec![0, 30_000, 60_000, 120_000, 240_000, 480_000, 900_000, 900_000]);
    }

    #[test]
    fn plan_covers_every_case() {
        let o = SweepOptions::default();
        let s = SweepState::default();
        assert_eq!(plan(&o, &s, 0, &run(0, 0)), Plan::Resume);
        assert_eq!(plan(&o, &s, 29_999, &run(1, 0)), Plan::Backoff { until: 30_000 });
        assert_eq!(plan(&o, &s, 30_000, &run(1, 0)), Plan::Resume);
        assert_eq!(plan(&o, &s, 0, &run(10, 0)), Plan::Quarantine);
        let heal = SweepOptions { retry_with_diagnosis: true, ..o.clone() };
        assert_eq!(plan(&heal, &s, 0, &run(10, 0)), Plan::Heal);
        let approval = Candidate { status: RunStatus::AwaitingApproval, ..run(0, 0) };
        assert_eq!(plan(&o, &s, 0, &approval), Plan::AwaitingPerson);
        let terminal = Candidate { retryable: false, ..run(1, 0) };
        assert_eq!(plan(&o, &s, 10_000_000, &terminal), Plan::NotRetryable);
        let q = Candidate { quarantined: true, ..run(10, 0) };
        assert_eq!(plan(&o, &s, 0, &q), Plan::Quarantined);
        assert_eq!(plan(&o, &down(100), 50, &run(0, 0)), Plan::Outage);
        assert_eq!(plan(&o, &down(100), 100, &run(10, 0)), Plan::Outage, "no quarantine during an outage");
        assert_eq!(plan(&heal, &down(100), 100, &run(10, 0)), Plan::Outage, "no diagnosis fork during an outage");
        assert_eq!(plan(&o, &down(100), 100, &run(3, 99)), Plan::Outage, "the breaker paces, not the backoff");
        // A run failing elsewhere (a tool) is not waiting on the provider: at the cap it is quarantined or healed.
        assert_eq!(plan(&o, &down(100), 100, &tool_failure(9)), Plan::Outage);
        assert_eq!(plan(&o, &down(100), 100, &tool_failure(10)), Plan::Quarantine, "not excused by an outage");
        assert_eq!(plan(&heal, &down(100), 100, &tool_failure(10)), Plan::Heal);
        assert!(Plan::Resume.acts() && Plan::Probe.acts() && Plan::Quarantine.acts() && Plan::Heal.acts());
        assert!(!Plan::Outage.acts() && !Plan::Backoff { until: 1 }.acts() && !Plan::AwaitingPerson.acts());
    }

    #[test]
    fn a_run_named_heal_is_not_a_diagnosis_fork_the_marker_decides() {
        let heal = SweepOptions { retry_with_diagnosis: true, ..SweepOptions::default() };
        let s = SweepState::default();
        let named = Candidate { run_id: "x.heal", ..run(10, 0) };
        assert_eq!(plan(&heal, &s, 0, &named), Plan::Heal, "a user run named x.heal gets its own diagnosis fork");
        let marked = Candidate { run_id: "anything", heal_of: Some("x"), ..run(10, 0) };
        assert_eq!(plan(&heal, &s, 0, &marked), Plan::Quarantine, "a diagnosis fork is not forked again");
    }

    #[test]
    fn every_run_waiting_on_the_breaker_can_be_the_probe_best_first() {
        let o = SweepOptions { max_attempts: 3, ..SweepOptions::default() };
        let s = down(100);
        // Runs at the cap failed by the outage: the breaker still has probes, those that call the model first.
        let at_cap = [tool_failure(2), run(3, 0), run(5, 0)];
        assert_eq!(pick_probe(&o, &s, 100, &at_cap), Some(1));
        assert_eq!(pick_probe(&o, &s, 99, &at_cap), None, "not due yet");
        assert_eq!(best_waiting(&o, &s, 99, &at_cap), Some(1), "known before it is due");
        assert_eq!(probe_rank(&o, &s, 100, &tool_failure(1)), Some(1));
        assert_eq!(pick_probe(&o, &s, 100, &[tool_failure(2)]), Some(0), "even a run failing elsewhere, last");
        assert_eq!(probe_rank(&o, &s, 100, &tool_failure(3)), None, "at the cap it is quarantined, not waiting");
        // Runs that do not wait on the breaker are never probes.
        let not_waiting = [
            Candidate { quarantined: true, ..run(3, 0) },
            Candidate { retryable: false, ..run(1, 0) },
            Candidate { status: RunStatus::AwaitingApproval, ..run(0, 0) },
        ];
        assert_eq!(pick_probe(&o, &s, 100, &not_waiting), None);
        assert_eq!(pick_probe(&o, &SweepState::default(), 100, &at_cap), None, "no breaker, no probe");
    }

    #[test]
    fn breaker_opens_after_three_and_closes_on_success() {
        let o = SweepOptions::default();
        let mut s = SweepState::default();
        assert_eq!(note_attempt(&o, &mut s, 0, "a", Attempt::ProviderDown, false), None);
        assert_eq!(note_attempt(&o, &mut s, 0, "b", Attempt::Other, false), None, "a bad key does not count");
        assert_eq!(note_attempt(&o, &mut s, 0, "c", Attempt::ProviderDown, false), None);
        assert_eq!(note_attempt(&o, &mut s, 5, "d", Attempt::ProviderDown, false), Some(true));
        assert_eq!(s.outage.as_ref().unwrap().next_probe_at, 30_005);
        assert_eq!(s.probe.as_deref(), Some("d"), "the run the outage failed last is the next probe");
        assert_eq!(note_attempt(&o, &mut s, 30_005, "d", Attempt::ProviderDown, true), None);
        assert_eq!(s.outage.as_ref().unwrap().next_probe_at, 30_005 + 60_000, "probes grow apart");
        // A probe that told nothing about the provider spaces the next one by the same wait.
        assert_eq!(note_attempt(&o, &mut s, 90_005, "t", Attempt::Other, true), None);
        assert_eq!(s.outage.as_ref().unwrap().next_probe_at, 90_005 + 60_000);
        assert_eq!(s.outage.as_ref().unwrap().probes, 1);
        assert_eq!(s.probe.as_deref(), Some("d"), "another run's failure keeps the remembered probe");
        // The remembered probe failing short of the provider (a tool) is forgotten: the next probe is the best
        // waiting run, not the same one every time.
        assert_eq!(note_attempt(&o, &mut s, 150_005, "d", Attempt::Other, true), None);
        assert_eq!((s.probe.as_deref(), s.outage.as_ref().unwrap().next_probe_at), (None, 150_005 + 60_000));
        assert_eq!(note_attempt(&o, &mut s, 150_005, "d", Attempt::Succeeded, true), Some(false));
        assert_eq!(s, SweepState { last_outage_end: Some(150_005), ..SweepState::default() });
        // A run whose cap was reached by provider failures during the outage is resumed, not quarantined.
        let during = Candidate { saved_at: 60_000, ..run(10, 60_000) };
        assert_eq!(plan(&o, &s, 100_000_000, &during), Plan::Resume);
        let after = Candidate { saved_at: 155_000, ..run(10, 155_000) };
        assert_eq!(plan(&o, &s, 100_000_000, &after), Plan::Quarantine);
    }

    #[test]
    fn an_idle_tick_records_itself_at_most_every_heartbeat_and_a_changing_tick_always() {
        let t0 = 1_700_000_000_000;
        let fresh = SweepState::default();
        assert!(tick_writes(&fresh, &fresh, t0), "the first tick records itself");
        let seen = SweepState { last_tick_at: Some(t0), ..SweepState::default() };
        assert!(!tick_writes(&seen, &seen, t0 + 60_000), "an idle tick a minute later writes nothing");
        assert!(!tick_writes(&seen, &seen, t0 + HEARTBEAT_MS - 1));
        assert!(tick_writes(&seen, &seen, t0 + HEARTBEAT_MS), "the heartbeat is due");
        let moved = SweepState { cursor: Some("r".into()), ..seen.clone() };
        assert!(tick_writes(&seen, &moved, t0 + 1), "a change is written at once");
    }
}
