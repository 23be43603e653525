//! The one backoff: capped geometric delays, with full jitter where the caller wants it, as pure data.
//!
//! Every wait between two tries in the crate is a [`Backoff`]:
//!
//! | caller | backoff | jitter |
//! | --- | --- | --- |
//! | model calls ([`super::retry::RetryPolicy`]) | `base_ms · 2^attempt`, capped at `cap_ms` | full, from the runtime's injected `Rng` |
//! | the sweep's per-run backoff ([`super::sweep::backoff_ms`]) | `interval · 2^(attempts-1)`, capped at `max_backoff_ms` | none: a run's next try is a function of what the store lists |
//! | the outage breaker's probe interval ([`super::sweep::note_attempt`]) | `interval · 2^probes`, capped at `max_backoff_ms` | none |
//! | the journal store's reads, writes and lease writes off the hot path | 200 ms / 1 s doubling, or a fixed 1 s after a 429 | none |
//!
//! The sweep and the store stay deterministic on purpose: the sweep recomputes every delay from counts stored
//! with the run (nothing lives in memory between cron ticks, and tests measure 30 s, 60 s, 120 s …), and the
//! store's retries are spaced by KV's one-write-per-second rule, not by a crowd of clients to spread out.
//!
//! A backoff is a value: [`Backoff::window`] and [`Backoff::delay`] give the `n`-th window and delay (callers
//! that count their tries, as the store and the sweep do, ask for the one they need), and [`Backoff::delays`]
//! iterates them (`take(n)` bounds the tries). Randomness comes in as a uniform unit in [0, 1) drawn by the caller from an
//! injected source, so the core stays free of I/O and a test fixes every delay.

/// How each delay is drawn from its window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Jitter {
    /// The delay is the whole window.
    None,
    /// The delay is uniform in `[0, window)` ("full jitter"): `floor(unit · window)`.
    Full,
}

/// Capped geometric delays: the `n`-th (0-based) window is `min(cap_ms, base_ms · factor^n)`. See the module
/// docs for where each is used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// The first window (ms).
    pub base_ms: u64,
    /// The largest window (ms).
    pub cap_ms: u64,
    /// Growth per try (2 doubles; 1 keeps every delay at `base_ms`).
    pub factor: u32,
    /// How a delay is drawn from its window.
    pub jitter: Jitter,
}

/// Past this many growth steps a window stops growing (with `factor` 2 and a 1 ms base: 35 years).
const MAX_STEPS: u32 = 40;

impl Backoff {
    /// Doubling from `base_ms`, capped at `cap_ms`, without jitter.
    pub const fn exponential(base_ms: u64, cap_ms: u64) -> Backoff {
        Backoff { base_ms, cap_ms, factor: 2, jitter: Jitter::None }
    }

    /// The same delay every time.
    pub const fn constant(ms: u64) -> Backoff {
        Backoff { base_ms: ms, cap_ms: ms, factor: 1, jitter: Jitter::None }
    }

    /// This backoff with full jitter.
    pub const fn full_jitter(self) -> Backoff {
        Backoff { jitter: Jitter::Full, ..self }
    }

    /// The `n`-th window (0-based): `min(cap_ms, base_ms · factor^n)`, saturating.
    #[inline(never)]
    pub fn window(&self, n: u32) -> u64 {
        let mut w = self.base_ms.min(self.cap_ms);
        for _ in 0..n.min(MAX_STEPS) {
            w = w.saturating_mul(self.factor as u64).min(self.cap_ms);
        }
        w
    }

    /// The `n`-th delay (0-based). `unit` (uniform in [0, 1), from an injected source) is used only under
    /// [`Jitter::Full`].
    pub fn delay(&self, n: u32, unit: f64) -> u64 {
        let window = self.window(n);
        match self.jitter {
            Jitter::None => window,
            Jitter::Full => (unit.clamp(0.0, 1.0) * window as f64).floor() as u64,
        }
    }

    /// The delays in order, without end (bound them with `take`). Under [`Jitter::Full`] each delay is drawn
    /// with a unit from `unit`; without jitter `unit` is never called.
    pub fn delays<U: FnMut() -> f64>(self, unit: U) -> Delays<U> {
        Delays { backoff: self, n: 0, unit }
    }
}

/// The iterator of [`Backoff::delays`].
#[derive(Clone, Debug)]
pub struct Delays<U> {
    backoff: Backoff,
    n: u32,
    unit: U,
}

impl<U: FnMut() -> f64> Iterator for Delays<U> {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        let unit = match self.backoff.jitter {
            Jitter::None => 1.0,
            Jitter::Full => (self.unit)(),
        };
        let d = self.backoff.delay(self.n, unit);
        self.n = self.n.saturating_add(1);
        Some(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn exponential_doubles_then_caps() {
        let b = Backoff::exponential(30_000, 900_000);
        let d: Vec<u64> = b.delays(|| 0.0).take(7).collect();
        assert_eq!(d, vec![30_000, 60_000, 120_000, 240_000, 480_000, 900_000, 900_000]);
    }

    #[test]
    fn constant_never_grows() {
        let d: Vec<u64> = Backoff::constant(1_000).delays(|| 0.0).take(4).collect();
        assert_eq!(d, vec![1_000; 4]);
        assert_eq!(Backoff::constant(200).window(u32::MAX), 200);
    }

    #[test]
    fn full_jitter_draws_from_the_unit_and_stays_in_the_window() {
        let b = Backoff::exponential(500, 20_000).full_jitter();
        assert_eq!(b.delay(1, 0.0), 0);
        assert_eq!(b.delay(1, 0.5), 500);
        assert_eq!(b.delay(3, 0.999_999), 3_999);
        assert_eq!(b.delay(1, 7.0), 1_000, "a unit out of range is clamped");
        let mut units = [0.25, 0.5, 0.75].into_iter();
        let d: Vec<u64> = b.delays(|| units.next().unwrap()).take(3).collect();
        assert_eq!(d, vec![125, 500, 1_500]);
    }

    #[test]
    fn no_jitter_never_draws_a_unit() {
        let d: Vec<u64> = Backoff::exponential(200, u64::MAX).delays(|| panic!("drew a unit")).take(3).collect();
        assert_eq!(d, vec![200, 400, 800]);
    }

    #[test]
    fn huge_counts_saturate_instead_of_overflowing() {
        let b = Backoff::exponential(u64::MAX / 2, u64::MAX);
        assert_eq!(b.window(5), u64::MAX);
        assert_eq!(Backoff::exponential(1, u64::MAX).window(1_000), 1 << 40, "growth stops after 40 steps");
        assert_eq!(Backoff { factor: 0, ..Backoff::exponential(7, 100) }.window(0), 7);
    }

    proptest! {
        /// Over generated backoffs: windows never shrink, never pass the cap, and a jittered delay lies in
        /// [0, window].
        #[test]
        fn windows_grow_monotonically_up_to_the_cap(
            base in 0u64..1_000_000, cap in 0u64..100_000_000, factor in 1u32..5, n in 0u32..80, unit in 0.0f64..1.0,
        ) {
            let b = Backoff { base_ms: base, cap_ms: cap, factor, jitter: Jitter::None };
            prop_assert!(b.window(n) <= cap);
            prop_assert!(b.window(n) <= b.window(n + 1));
            let j = b.full_jitter();
            prop_assert!(j.delay(n, unit) <= b.window(n));
        }

        /// Over generated backoffs, every window is exactly `min(cap, base · factor^n)` (computed wide), for
        /// growth up to 40 steps.
        #[test]
        fn a_window_is_the_capped_power(base in 0u64..u64::MAX, cap in 0u64..u64::MAX, factor in 0u32..5, n in 0u32..=40) {
            let b = Backoff { base_ms: base, cap_ms: cap, factor, jitter: Jitter::None };
            let exact = (base as u128).saturating_mul((factor as u128).saturating_pow(n)).min(cap as u128);
            prop_assert_eq!(b.window(n) as u128, exact);
        }
    }
}
