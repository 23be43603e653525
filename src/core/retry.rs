//! The retry policy as pure data (M15): the crate's one [`Backoff`] (capped, doubling) with full jitter,
//! Retry-After honoured, bounded by an attempt cap and a deadline. The runtime's model-call layer is the only
//! caller.

use super::backoff::Backoff;
use super::error::Error;
use serde::{Deserialize, Serialize};

/// Retry settings for model calls.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct RetryPolicy {
    /// Total attempts, the first included (1 = no retry).
    pub max_attempts: u32,
    /// Base delay in ms: attempt n (1-based, failed) may wait up to `base_ms * 2^n`.
    pub base_ms: u64,
    /// Largest backoff window in ms (before Retry-After).
    pub cap_ms: u64,
    /// Give up when the next try would start later than this many ms after the first.
    pub deadline_ms: u64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy { max_attempts: 4, base_ms: 500, cap_ms: 20_000, deadline_ms: 60_000 }
    }
}

/// What to do after a failed attempt of a call with fallback models ([`RetryPolicy::next_in_chain`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChainStep {
    /// Wait this many ms, then try the same model again.
    Retry(u64),
    /// Give the request to the next model of the chain, at once.
    Next,
    /// Stop; the error is final for this run attempt.
    GiveUp,
}

/// What to do after a failed attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NextRetry {
    /// Wait this many ms, then try again.
    After(u64),
    /// Stop; the error is final for this run attempt.
    GiveUp,
}

impl RetryPolicy {
    /// Decides after failed attempt number `attempt` (1-based) of a call that started `elapsed_ms` ago.
    /// `unit` is a uniform random number in [0, 1) from an injected source (full jitter).
    pub fn next_retry(&self, attempt: u32, elapsed_ms: u64, err: &Error, unit: f64) -> NextRetry {
        if !err.retryable || attempt >= self.max_attempts {
            return NextRetry::GiveUp;
        }
        let jittered = self.backoff().delay(attempt, unit);
        let delay = jittered.max(err.retry_after_ms.unwrap_or(0));
        if elapsed_ms.saturating_add(delay) > self.deadline_ms {
            return NextRetry::GiveUp;
        }
        NextRetry::After(delay)
    }

    /// How many attempts model `index` of a chain of `models` (the agent's model, then its fallbacks) may make:
    /// the chain shares the policy's `max_attempts` — each model `max_attempts / models` of them (at least one),
    /// the agent's model the remainder too. With one model, all of them.
    pub fn share(&self, models: usize, index: usize) -> u32 {
        let n = models.max(1) as u32;
        let each = (self.max_attempts / n).max(1);
        match index {
            0 => each + self.max_attempts.saturating_sub(each * n),
            _ => each,
        }
    }

    /// Decides after failed attempt `attempt` (1-based, counted over the whole chain) of a call that started
    /// `elapsed_ms` ago, the `on_model`-th on model `index` of `models`: retry that model (as
    /// [`RetryPolicy::next_retry`] would, within its [`RetryPolicy::share`]); else, if the failure is retryable
    /// and a model follows, hand the request to it; else give up. The attempt cap and the deadline are the whole
    /// call's (one layer of retries, not one per model), and past either each model left gets one attempt.
    #[allow(clippy::too_many_arguments)]
    pub fn next_in_chain(
        &self,
        attempt: u32,
        on_model: u32,
        index: usize,
        models: usize,
        elapsed_ms: u64,
        err: &Error,
        unit: f64,
    ) -> ChainStep {
        match self.next_retry(attempt, elapsed_ms, err, unit) {
            NextRetry::After(ms) if on_model < self.share(models, index) => ChainStep::Retry(ms),
            _ if err.retryable && index + 1 < models => ChainStep::Next,
            _ => ChainStep::GiveUp,
        }
    }

    /// The backoff of model calls: doubling from `base_ms`, capped at `cap_ms`, full jitter. Failed attempt
    /// `attempt` (1-based) waits its `attempt`-th delay (so the first retry's window is `2 · base_ms`).
    pub fn backoff(&self) -> Backoff {
        Backoff::exponential(self.base_ms, self.cap_ms).full_jitter()
    }

    /// The upper bound of the jitter window after failed attempt `attempt`: `min(cap, base·2^attempt)`.
    pub fn backoff_window(&self, attempt: u32) -> u64 {
        self.backoff().window(attempt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::error::ErrorCode;

    fn transient() -> Error {
        Error::new(ErrorCode::ProviderUnavailable, "503")
    }

    #[test]
    fn windows_double_and_cap() {
        let p = RetryPolicy { max_attempts: 10, base_ms: 500, cap_ms: 20_000, deadline_ms: u64::MAX };
        let w: Vec<u64> = (1..=7).map(|a| p.backoff_window(a)).collect();
        assert_eq!(w, vec![1000, 2000, 4000, 8000, 16000, 20000, 20000]);
    }

    #[test]
    fn full_jitter_stays_in_window() {
        let p = RetryPolicy { max_attempts: 10, deadline_ms: u64::MAX, ..Default::default() };
        assert_eq!(p.next_retry(1, 0, &transient(), 0.0), NextRetry::After(0));
        assert_eq!(p.next_retry(1, 0, &transient(), 0.5), NextRetry::After(500));
        assert_eq!(p.next_retry(3, 0, &transient(), 0.999_999), NextRetry::After(3999));
    }

    #[test]
    fn retry_after_wins_when_larger() {
        let p = RetryPolicy::default();
        let e = transient().with_retry_after_ms(Some(7_000));
        assert_eq!(p.next_retry(1, 0, &e, 0.5), NextRetry::After(7_000));
        let small = transient().with_retry_after_ms(Some(10));
        assert_eq!(p.next_retry(1, 0, &small, 0.5), NextRetry::After(500));
    }

    #[test]
    fn caps_and_terminal_errors_give_up() {
        let p = RetryPolicy { max_attempts: 3, base_ms: 500, cap_ms: 20_000, deadline_ms: 5_000 };
        assert_eq!(p.next_retry(3, 0, &transient(), 0.1), NextRetry::GiveUp, "attempt cap");
        assert_eq!(p.next_retry(1, 4_900, &transient(), 0.5), NextRetry::GiveUp, "deadline");
        let auth = Error::new(ErrorCode::ProviderAuth, "401");
        assert_eq!(p.next_retry(1, 0, &auth, 0.1), NextRetry::GiveUp, "not retryable");
        let long_wait = transient().with_retry_after_ms(Some(60_000));
        assert_eq!(p.next_retry(1, 0, &long_wait, 0.1), NextRetry::GiveUp, "retry-after beyond deadline");
    }

    /// A chain spends one policy: its models' shares add up to `max_attempts` (or one each when there are more
    /// models than attempts), a chain of one model decides as `next_retry`, and only a retryable failure moves on.
    #[test]
    fn a_chain_shares_one_policy_between_its_models() {
        for max in 1..=9 {
            let p = RetryPolicy { max_attempts: max, deadline_ms: u64::MAX, ..Default::default() };
            for n in 1..=4usize {
                let total: u32 = (0..n).map(|i| p.share(n, i)).sum();
                assert_eq!(total, max.max(n as u32), "max {max}, {n} models");
                // Walk the chain on failures that never end: every model is tried, attempts never exceed the total.
                let (mut attempt, mut on_model, mut index, mut tried) = (0, 0, 0, vec![0u32; n]);
                loop {
                    attempt += 1;
                    on_model += 1;
                    tried[index] += 1;
                    match p.next_in_chain(attempt, on_model, index, n, 0, &transient(), 0.5) {
                        ChainStep::Retry(_) => {}
                        ChainStep::Next => (index, on_model) = (index + 1, 0),
                        ChainStep::GiveUp => break,
                    }
                }
                assert_eq!(index, n - 1, "max {max}, {n} models: the last model was reached");
                assert!(tried.iter().all(|&t| t >= 1), "{tried:?}");
                assert_eq!(attempt, max.max(n as u32), "max {max}, {n} models: {tried:?}");
            }
        }
        let p = RetryPolicy::default();
        for (attempt, elapsed) in [(1, 0), (3, 0), (1, 59_999)] {
            assert_eq!(
                p.next_in_chain(attempt, attempt, 0, 1, elapsed, &transient(), 0.5),
                match p.next_retry(attempt, elapsed, &transient(), 0.5) {
                    NextRetry::After(ms) => ChainStep::Retry(ms),
                    NextRetry::GiveUp => ChainStep::GiveUp,
                }
            );
        }
        let auth = Error::new(ErrorCode::ProviderAuth, "401");
        assert_eq!(p.next_in_chain(1, 1, 0, 3, 0, &auth, 0.5), ChainStep::GiveUp, "not retryable: no fallback");
        // Past the deadline the next model still gets its attempt.
        assert_eq!(p.next_in_chain(1, 1, 0, 2, 70_000, &transient(), 0.5), ChainStep::Next);
    }
}
