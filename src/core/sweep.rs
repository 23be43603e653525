//! The recovery sweep's decisions (M12, M13, M14), as pure functions of what the store lists, the sweep
//! state kept in the store, and the time. Nothing lives in memory between ticks: on Workers each cron
//! invocation is a separate, short process, and ticks may overlap or repeat.

use super::checkpoint::RunStatus;
use super::error::ErrorCode;
use serde::{Deserialize, Serialize};

/// Sweep settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
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
    /// Where the last tick stopped (the next tick starts after this run id).
    pub cursor: Option<String>,
    /// When the last outage ended: provider failures saved before it do not count toward quarantine.
    pub last_outage_end: Option<u64>,
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
    /// The outage breaker is open and this is not the probe.
    Outage,
}

/// The suffix of diagnosis forks.
pub const HEAL_SUFFIX: &str = ".heal";

/// How long a run that failed `attempts` times in a row waits.
pub fn backoff_ms(opts: &SweepOptions, attempts: u32) -> u64 {
    if attempts == 0 {
        return 0;
    }
    let exp = 1u64.checked_shl(attempts.saturating_sub(1).min(40)).unwrap_or(u64::MAX);
    opts.interval_ms.saturating_mul(exp).min(opts.max_backoff_ms)
}

/// The decision for one run. `probe_free` is whether this tick may still send the outage probe.
pub fn plan(opts: &SweepOptions, state: &SweepState, now: u64, run: &Candidate<'_>, probe_free: bool) -> Plan {
    if run.status == RunStatus::AwaitingApproval {
        return Plan::AwaitingPerson;
    }
    if run.last_error.is_some() && !run.retryable {
        return Plan::NotRetryable;
    }
    if run.quarantined {
        return Plan::Quarantined;
    }
    // Provider failures while the breaker was open do not count toward quarantine.
    let forgiven = run.outage_error && state.last_outage_end.is_some_and(|end| run.saved_at <= end);
    if run.attempts >= opts.max_attempts && !forgiven {
        if state.outage.is_some() {
            return Plan::Outage;
        }
        if opts.retry_with_diagnosis && !run.run_id.ends_with(HEAL_SUFFIX) {
            return Plan::Heal;
        }
        return Plan::Quarantine;
    }
    let until = run.saved_at.saturating_add(backoff_ms(opts, run.attempts));
    if run.attempts > 0 && now < until {
        return Plan::Backoff { until };
    }
    match &state.outage {
        Some(o) if probe_free && now >= o.next_probe_at => Plan::Probe,
        Some(_) => Plan::Outage,
        None => Plan::Resume,
    }
}

/// The order of a tick: the runs after the cursor first, then from the start (each once).
pub fn order<'a, T>(runs: &'a [T], id: impl Fn(&T) -> &str, cursor: Option<&str>) -> Vec<&'a T> {
    let split = match cursor {
        Some(c) => runs.iter().position(|r| id(r) > c).unwrap_or(runs.len()),
        None => 0,
    };
    runs[split..].iter().chain(runs[..split].iter()).collect()
}

/// How a resume ended, for the breaker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// The model answered (the run progressed, finished or paused).
    Succeeded,
    /// A provider failure that counts toward an outage (429, 5xx, timeouts, network).
    ProviderDown,
    /// Anything else (a tool, a bad key, the store): the breaker does not count it.
    Other,
}

/// Updates the breaker after a resume; returns `Some(true)` when an outage starts, `Some(false)` when it ends.
pub fn note_attempt(
    opts: &SweepOptions,
    state: &mut SweepState,
    now: u64,
    attempt: Attempt,
    was_probe: bool,
) -> Option<bool> {
    match attempt {
        Attempt::Succeeded => {
            state.provider_failures = 0;
            let ended = state.outage.take().map(|_| false);
            if ended.is_some() {
                state.last_outage_end = Some(now);
            }
            ended
        }
        Attempt::ProviderDown => {
            state.provider_failures = state.provider_failures.saturating_add(1);
            match &mut state.outage {
                Some(o) => {
                    if was_probe {
                        o.probes = o.probes.saturating_add(1);
                        let wait = opts.interval_ms.saturating_mul(1u64 << o.probes.min(20)).min(opts.max_backoff_ms);
                        o.next_probe_at = now.saturating_add(wait);
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
        Attempt::Other => None,
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
        }
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
        assert_eq!(plan(&o, &s, 0, &run(0, 0), true), Plan::Resume);
        assert_eq!(plan(&o, &s, 29_999, &run(1, 0), true), Plan::Backoff { until: 30_000 });
        assert_eq!(plan(&o, &s, 30_000, &run(1, 0), true), Plan::Resume);
        assert_eq!(plan(&o, &s, 0, &run(10, 0), true), Plan::Quarantine);
        let heal = SweepOptions { retry_with_diagnosis: true, ..o.clone() };
        assert_eq!(plan(&heal, &s, 0, &run(10, 0), true), Plan::Heal);
        let healed = Candidate { run_id: "r.heal", ..run(10, 0) };
        assert_eq!(plan(&heal, &s, 0, &healed, true), Plan::Quarantine);
        let approval = Candidate { status: RunStatus::AwaitingApproval, ..run(0, 0) };
        assert_eq!(plan(&o, &s, 0, &approval, true), Plan::AwaitingPerson);
        let terminal = Candidate { retryable: false, ..run(1, 0) };
        assert_eq!(plan(&o, &s, 10_000_000, &terminal, true), Plan::NotRetryable);
        let q = Candidate { quarantined: true, ..run(10, 0) };
        assert_eq!(plan(&o, &s, 0, &q, true), Plan::Quarantined);
        let down = SweepState { outage: Some(Outage { since: 0, probes: 0, next_probe_at: 100 }), ..s.clone() };
        assert_eq!(plan(&o, &down, 50, &run(0, 0), true), Plan::Outage);
        assert_eq!(plan(&o, &down, 100, &run(0, 0), true), Plan::Probe);
        assert_eq!(plan(&o, &down, 100, &run(0, 0), false), Plan::Outage);
        assert_eq!(plan(&o, &down, 100, &run(10, 0), true), Plan::Outage, "no quarantine during an outage");
    }

    #[test]
    fn breaker_opens_after_three_and_closes_on_success() {
        let o = SweepOptions::default();
        let mut s = SweepState::default();
        assert_eq!(note_attempt(&o, &mut s, 0, Attempt::ProviderDown, false), None);
        assert_eq!(note_attempt(&o, &mut s, 0, Attempt::Other, false), None, "a bad key does not count");
        assert_eq!(note_attempt(&o, &mut s, 0, Attempt::ProviderDown, false), None);
        assert_eq!(note_attempt(&o, &mut s, 5, Attempt::ProviderDown, false), Some(true));
        assert_eq!(s.outage.as_ref().unwrap().next_probe_at, 30_005);
        assert_eq!(note_attempt(&o, &mut s, 30_005, Attempt::ProviderDown, true), None);
        assert_eq!(s.outage.as_ref().unwrap().next_probe_at, 30_005 + 60_000, "probes grow apart");
        assert_eq!(note_attempt(&o, &mut s, 90_005, Attempt::Succeeded, true), Some(false));
        assert_eq!(s, SweepState { last_outage_end: Some(90_005), ..SweepState::default() });
        // A run whose cap was reached by provider failures during the outage is resumed, not quarantined.
        let during = Candidate { saved_at: 60_000, ..run(10, 60_000) };
        assert_eq!(plan(&o, &s, 100_000_000, &during, true), Plan::Resume);
        let after = Candidate { saved_at: 95_000, ..run(10, 95_000) };
        assert_eq!(plan(&o, &s, 100_000_000, &after, true), Plan::Quarantine);
    }

    #[test]
    fn order_starts_after_the_cursor() {
        let ids = ["a", "b", "c", "d"];
        let o: Vec<&&str> = order(&ids, |s| s, Some("b"));
        assert_eq!(o, vec![&"c", &"d", &"a", &"b"]);
        assert_eq!(order(&ids, |s| s, None).len(), 4);
        assert_eq!(order(&ids, |s| s, Some("z")), vec![&"a", &"b", &"c", &"d"]);
    }
}
