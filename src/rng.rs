//! Randomness, injected: the [`Rng`] trait (approval ids, owner ids, jitter) and [`SplitMix64`], a small
//! seeded generator.
//!
//! A leaf module: nothing here imports the rest of the crate. The store (simulators, fault injection) and the
//! runtime both draw from an [`Rng`] they are given, so tests fix every random choice with a seed. Platform
//! sources (the Worker's `crypto.getRandomValues`) live in the shells.

use std::cell::Cell;

/// Random source (approval ids, owner ids, jitter).
pub trait Rng {
    /// 64 random bits.
    fn next_u64(&self) -> u64;
    /// Uniform in [0, 1).
    fn unit(&self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// SplitMix64: small, fast, good enough for ids and jitter (not for secrets).
#[derive(Debug)]
pub struct SplitMix64(Cell<u64>);

impl SplitMix64 {
    /// Seeded generator.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(Cell::new(seed))
    }
}

impl Rng for SplitMix64 {
    fn next_u64(&self) -> u64 {
        let mut z = self.0.get().wrapping_add(0x9E37_79B9_7F4A_7C15);
        self.0.set(z);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_is_deterministic_and_unit_in_range() {
        let a = SplitMix64::new(7);
        let b = SplitMix64::new(7);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
            let u = a.unit();
            assert!((0.0..1.0).contains(&u));
            b.next_u64();
        }
    }
}
