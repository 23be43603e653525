//! The deterministic figures of the benchmark (`./scripts/bench`), asserted with the bench's own setup
//! (`tests/common/bench_runs.rs`): operation counts, bytes, 429s and the sweep tick's budget. Timings are the
//! bench's business and are never asserted here. The Worker bundle's size budget is checked by the test command
//! right after it builds the Worker (`scripts/test`), where a missing build fails it.

#[path = "common/seed_layout.rs"]
mod seed_layout;

#[path = "common/bench_runs.rs"]
mod bench_runs;

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
