//! The one convention of every generated test (see tests/README.md):
//! * `STEADFAST_SEED=<n>` replays one case (the seed a failure printed), of every generated test selected;
//! * `STEADFAST_CASES=<n>` sets how many cases each selected generated test runs;
//! * `STEADFAST_LARGE=1` runs each at its large size, ten times its default (what a change to a guarantee
//!   should be checked with before it lands).
//!
//! A failing case names its one-line reproduction: `STEADFAST_SEED=<n> cargo test --test <file> <test>` (the
//! integration tests' `common::seeds::repro`) or `STEADFAST_SEED=<n> cargo test --lib <test>` ([`repro`]).
//! Test builds only (feature `testing`).

use std::ops::Range;

/// The number in the environment variable `name`, if it is set (a set value that is not a number is a mistake
/// worth stopping for, not a default).
pub fn env_u64(name: &str) -> Option<u64> {
    let raw = std::env::var(name).ok()?;
    Some(raw.trim().parse().unwrap_or_else(|_| panic!("{name}={raw:?} is not a number")))
}

/// `STEADFAST_SEED`, when one case is replayed.
pub fn only_seed() -> Option<u64> {
    env_u64("STEADFAST_SEED")
}

/// How many cases a generated test runs: `STEADFAST_CASES`, else its `default` (ten times that with
/// `STEADFAST_LARGE=1`). Zero is refused: a generated test of no cases checks nothing.
pub fn cases(default: u64) -> u64 {
    let large = std::env::var("STEADFAST_LARGE").is_ok_and(|v| v != "0" && !v.is_empty());
    let n = env_u64("STEADFAST_CASES").unwrap_or(if large { default * 10 } else { default });
    assert!(n >= 1, "STEADFAST_CASES=0 checks nothing");
    n
}

/// The seeds of a generated test whose default cases are `default`: the replayed one alone, or as many from
/// `default.start` as [`cases`] says.
pub fn seeds(default: Range<u64>) -> Vec<u64> {
    match only_seed() {
        Some(seed) => vec![seed],
        None => (default.start..default.start + cases(default.end - default.start)).collect(),
    }
}

/// The one-line reproduction of `seed` of `test`, a test of the library's own (`cargo test --lib`).
pub fn repro(seed: u64, test: &str) -> String {
    repro_in("--lib", seed, test)
}

/// The one-line reproduction of `seed` of `test` in the cargo test target `target` (`--lib`, `--test api`).
pub fn repro_in(target: &str, seed: u64, test: &str) -> String {
    let test = if test.is_empty() { String::new() } else { format!(" {test}") };
    format!("STEADFAST_SEED={seed} cargo test {target}{test} -- --nocapture")
}

/// Runs `case(seed)` for each of [`seeds`]`(default)` of the library test `test`, naming a failing seed with its
/// [`repro`].
pub fn for_seeds_in_lib(test: &str, default: Range<u64>, case: impl Fn(u64)) {
    for seed in seeds(default) {
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| case(seed))).is_err() {
            panic!("seed {seed} failed; reproduce: {}", repro(seed, test));
        }
    }
}
