//! The deterministic figures of the benchmark (`./scripts/bench`), asserted with the bench's own setup
//! (`tests/common/bench_runs.rs`): operation counts, bytes, 429s and the sweep tick's budget. Timings are the
//! bench's business and are never asserted here. The Worker bundle's size budget is checked by the test command
//! right after it builds the Worker (`scripts/test`), where a missing build fails it.

#[path = "common/seed_layout.rs"]
mod seed_layout;

#[path = "common/bench_runs.rs"]
mod bench_runs;

/// The recovery benchmark (P15), its scenarios run here on the same simulated time.
#[path = "../benches/recovery.rs"]
#[allow(dead_code)]
mod recovery_bench;

use bench_runs::*;

/// P1, P2, P3: a 100-step run (2 tool calls a step, 10 ms tools) on the journal store and on the seed layout.
#[test]
fn a_100_step_run_meets_the_write_byte_and_rate_limit_goals() {
    let (ours, messages) = run_layout(Layout::Journal, 100);
    let (seed, seed_messages) = run_layout(Layout::Seed, 100);
    println!("ours: {ours:?}");
    println!("seed: {seed:?}");
    assert_eq!(messages, seed_messages, "the same run on both layouts");
    assert_eq!(ours.messages, 2 + 3 * 99 + 1, "system, user, 99 tool steps, the answer");
    assert_eq!(ours.boundaries, seed.boundaries, "the same boundaries on both layouts");
    // P1: at most one write per durable boundary on the hot path.
    assert!(ours.hot_writes_per_boundary <= 1.0, "hot-path writes per boundary {}", ours.hot_writes_per_boundary);
    // Every boundary after the first is one entry write; the rest is the lease, the index and the marker.
    assert!(ours.writes_per_boundary <= 1.0 + 6.0 / ours.boundaries as f64, "{ours:?}");
    // P2: bytes written over the run at most twice the final transcript.
    assert!(ours.bytes_ratio <= 2.0, "bytes ratio {}", ours.bytes_ratio);
    // P3: zero 429s with 10 ms tools; the seed layout rewrites one key at every boundary and hits the limit.
    assert_eq!(ours.rate_limited, 0, "{ours:?}");
    assert!(seed.rate_limited > 0, "{seed:?}");
    assert!(seed.bytes_ratio > 10.0 * ours.bytes_ratio, "the seed layout rewrites O(n²) bytes: {seed:?}");
    // The simulated time: ours is the tools' time; the seed's is dominated by backoff after 429s.
    assert!(ours.simulated_ms < 100 * 2 * TOOL_MS + 5_000, "{ours:?}");
    assert!(seed.simulated_ms >= 1_000 * seed.rate_limited, "every 429 cost at least 1 s of backoff: {seed:?}");
}

/// The smallest run of the table holds the goals too.
#[test]
fn a_10_step_run_meets_the_goals() {
    let (ours, _) = run_layout(Layout::Journal, 10);
    assert!(ours.hot_writes_per_boundary <= 1.0, "{ours:?}");
    assert!(ours.bytes_ratio <= 2.0, "{ours:?}");
    assert_eq!(ours.rate_limited, 0, "{ours:?}");
}

/// P5: one sweep tick over 1,000 pending runs stays under 1,000 KV operations.
#[test]
fn a_sweep_tick_over_1000_pending_runs_uses_under_1000_kv_operations() {
    let s = sweep_tick(SWEEP_RUNS);
    println!("sweep: {s:?}");
    assert_eq!(s.listed, SWEEP_RUNS);
    assert!(s.examined > 0 && s.resumed > 0, "{s:?}");
    assert!(s.kv_operations < 1_000, "{s:?}");
    assert!(s.store_operations < 1_000, "{s:?}");
}

/// P15 (benches/recovery.rs, simulated time, deterministic): after a provider outage, 10,000 pending runs fanned
/// out through a recovery queue to 49 consumers finish within 3.5 simulated minutes (goal: 10), the provider
/// (50 calls at once, 500 ms each) never sees more than its ceiling and refuses nothing, and no tick takes more than
/// 170 operations; in strict mode every run's alarm due at once under a recovery gate of 49 slots finishes 10,000
/// runs within 7 minutes with the provider never above its ceiling; 1,000 runs through the inline sweep (25 resumes
/// a tick) take 39 to 41 minutes.
#[test]
fn recovery_fanned_out_through_a_queue_drains_10000_runs_in_minutes_within_the_providers_ceiling() {
    let f = recovery_bench::scenario(10_000, 50, recovery_bench::Mode::Kv);
    println!("fan-out: {:?} min, peak {}, 429s {}, max tick ops {}", f.minutes, f.peak, f.refused, f.max_tick_ops);
    assert_eq!(f.finished, 10_000);
    assert!(f.minutes.is_some_and(|m| m <= 3.5), "{:?}", f.minutes);
    assert!(f.peak <= 50 && f.refused == 0, "peak {} refused {}", f.peak, f.refused);
    assert!(f.max_tick_ops <= 170 && f.tick_errors == 0, "{} {}", f.max_tick_ops, f.tick_errors);
    // Strict mode: every run's alarm due at once, under a recovery gate of 49 slots (the cron's resume the 50th).
    let strict = recovery_bench::scenario(10_000, 50, recovery_bench::Mode::Strict);
    println!(
        "strict: {:?} min, peak {}, 429s {}, gate peak {}",
        strict.minutes, strict.peak, strict.refused, strict.gate_peak
    );
    assert_eq!(strict.finished, 10_000);
    assert!(strict.minutes.is_some_and(|m| m <= 7.0), "strict: {:?}", strict.minutes);
    assert!(
        strict.peak <= 50 && strict.refused == 0 && strict.gate_peak <= 49,
        "strict: peak {} refused {}",
        strict.peak,
        strict.refused
    );
    assert!(
        strict.max_tick_ops < 1_000 && strict.tick_errors == 0,
        "strict: {} {}",
        strict.max_tick_ops,
        strict.tick_errors
    );
    let inline = recovery_bench::scenario(1_000, 50, recovery_bench::Mode::Inline);
    assert_eq!(inline.finished, 1_000);
    assert!(inline.minutes.is_some_and(|m| (39.0..=41.0).contains(&m)), "the inline sweep: {:?}", inline.minutes);
}
