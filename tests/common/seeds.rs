//! The one convention of every generated test (tests/README.md): `STEADFAST_SEED=<n>` replays one case,
//! `STEADFAST_CASES=<n>` sets how many, `STEADFAST_LARGE=1` runs each at ten times its default
//! ([`steadfast::seeds`]); a failing case names its one-line reproduction, [`repro`].

use std::ops::Range;

#[allow(unused_imports)]
pub use steadfast::seeds::{cases, env_u64, only_seed, seeds};

/// The one-line reproduction of `seed` of `test` in this test file.
pub fn repro(seed: u64, test: &str) -> String {
    steadfast::seeds::repro_in(&format!("--test {}", env!("CARGO_CRATE_NAME")), seed, test)
}

/// Runs `case(seed)` for each of [`seeds`]`(default)`, naming a failing seed with its [`repro`].
pub fn for_seeds(test: &str, default: Range<u64>, case: impl Fn(u64)) {
    for seed in seeds(default) {
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| case(seed))).is_err() {
            panic!("seed {seed} failed; reproduce: {}", repro(seed, test));
        }
    }
}
