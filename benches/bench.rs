//! The benchmark: `./scripts/bench` (or `cargo bench --bench bench` once the Worker and the wasm kernel are
//! built). Prints markdown tables and writes them to BENCHMARKS.md with the machine, the date and the command,
//! then ends with one line per goal (P1–P5 and the bundle).
//!
//! * Store layouts: 10/100/500-step runs (2 tool calls a step, 10 ms tools, ~500-byte messages) on the journal
//!   store and on the seed's rewrite-everything layout, both over SimKv: KV operations per durable boundary,
//!   bytes, 429s and the simulated time. Deterministic (asserted by tests/bench_figures.rs).
//! * CPU per step of the run state machine + the store's serialise/fold (benches/kernel/step_kernel.rs),
//!   native and wasm under node, at 20, 200 and 1,000 messages: median of 15 runs. Printed, never asserted.
//! * One sweep tick over 1,000 pending runs: KV operations, runs examined, CPU.
//! * Bundle sizes: the Worker (build/, from ./scripts/build-worker) and the npm package's wasm (js/pkg/).
//!
//! Environment: `STEADFAST_BENCH_REQUIRE_WASM=1` fails the bench when the wasm figure cannot be measured (set
//! by ./scripts/bench); `STEADFAST_WASM_KERNEL_PKG` is the wasm-bindgen output of benches/wasm-kernel (default
//! benches/wasm-kernel/pkg); `STEADFAST_BENCH_COMMAND` is the command recorded in BENCHMARKS.md.

#[path = "../tests/common/seed_layout.rs"]
mod seed_layout;

#[path = "../tests/common/bench_runs.rs"]
mod bench_runs;

#[path = "kernel/step_kernel.rs"]
mod step_kernel;

use bench_runs::*;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::hint::black_box;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

/// Transcript sizes of the CPU table.
const CPU_SIZES: [usize; 3] = [20, 200, 1_000];
/// Timed repetitions per size (the median is reported).
const REPS: usize = 15;
/// Untimed repetitions before them.
const WARMUP: usize = 2;
/// Sweep ticks (each on a fresh store with 1,000 pending runs); the median CPU is reported.
const SWEEP_REPS: usize = 5;

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let require_wasm = std::env::var("STEADFAST_BENCH_REQUIRE_WASM").is_ok_and(|v| v == "1");
    let command = std::env::var("STEADFAST_BENCH_COMMAND").unwrap_or_else(|_| "cargo bench --bench bench".into());
    let mut md = String::new();

    // ----- store layouts -----
    let mut layouts: BTreeMap<(usize, bool), LayoutFigures> = BTreeMap::new();
    for steps in STEP_COUNTS {
        for layout in [Layout::Journal, Layout::Seed] {
            eprintln!("running {steps} steps on {}…", layout.name());
            let (f, _) = run_layout(layout, steps);
            layouts.insert((steps, layout == Layout::Seed), f);
        }
    }
    let f0 = &layouts[&(STEP_COUNTS[0], false)];
    let _ = writeln!(md, "## Store layouts: KV operations per durable boundary\n");
    let _ = writeln!(
        md,
        "Runs of 10, 100 and 500 steps with 2 tool calls a step (the mock model, tools that take {TOOL_MS} ms of \
         simulated time, ~500-byte messages: {:.0} bytes a message on average), on SimKv (one location, 1 write/s per \
         key). Journal (ours): hot path = journal-entry writes. Seed rewrite (baseline, tests/common/seed_layout.rs): \
         every boundary rewrites the whole checkpoint, a history copy and the history index; hot path = its writes \
         less the 429-refused ones; 429s are retried with backoff from 1 s. *Simulated time* is the run's time on \
         the simulated clock (tools, lease settling, backoff after 429s). Ratio rows: ours / baseline.\n",
        f0.transcript_bytes as f64 / f0.messages as f64
    );
    let _ = writeln!(
        md,
        "| steps | layout | boundaries | KV writes/boundary (hot path) | KV writes/boundary (all) | KV reads/boundary | \
         bytes written | final transcript bytes | bytes/transcript | 429s | simulated time |"
    );
    let _ = writeln!(md, "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for steps in STEP_COUNTS {
        let (o, b) = (&layouts[&(steps, false)], &layouts[&(steps, true)]);
        for f in [o, b] {
            let _ = writeln!(
                md,
                "| {steps} | {} | {} | {:.3} | {:.3} | {:.3} | {} | {} | {:.2} | {} | {} |",
                f.layout.name(),
                f.boundaries,
                f.hot_writes_per_boundary,
                f.writes_per_boundary,
                f.reads_per_boundary,
                f.bytes_written,
                f.transcript_bytes,
                f.bytes_ratio,
                f.rate_limited,
                ms(f.simulated_ms as f64)
            );
        }
        let _ = writeln!(
            md,
            "| {steps} | **ours / baseline** | | {} | {} | {} | {} | | {} | {} | {} |",
            ratio(o.hot_writes_per_boundary, b.hot_writes_per_boundary),
            ratio(o.writes_per_boundary, b.writes_per_boundary),
            ratio(o.reads_per_boundary, b.reads_per_boundary),
            ratio(o.bytes_written as f64, b.bytes_written as f64),
            ratio(o.bytes_ratio, b.bytes_ratio),
            ratio(o.rate_limited as f64, b.rate_limited as f64),
            ratio(o.simulated_ms as f64, b.simulated_ms as f64),
        );
    }
    let _ = writeln!(md);

    // ----- CPU per step -----
    eprintln!("timing the step kernel (native)…");
    // Warm-up: one 1,000-message run (as run.mjs does before timing the wasm kernel).
    black_box(step_kernel::prepare(1_000).0.entry_bytes);
    let native: Vec<(usize, usize, f64)> = CPU_SIZES.iter().map(|&n| native_us_per_step(n)).collect();
    eprintln!("timing the step kernel (wasm under node)…");
    let wasm = match wasm_us_per_step(root) {
        Ok(w) => Some(w),
        Err(e) if require_wasm => panic!("the wasm figure could not be measured: {e}"),
        Err(e) => {
            eprintln!("wasm figure not measured: {e}");
            None
        }
    };
    let node = Command::new("node")
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    let _ = writeln!(md, "## CPU per step: run state machine + store serialise/fold\n");
    let _ = writeln!(
        md,
        "benches/kernel/step_kernel.rs drives `RunMachine` directly (no runtime, no I/O) through the same kind of \
         step (the model's answer with 2 tool calls → gate → commit → 2 tool results, one commit each); every \
         commit serialises its `JournalEntry` to JSON and folds it into a mirror `Checkpoint` with \
         `Checkpoint::apply`. Timed: the last {} steps that bring the transcript to the size (fewer when the run is \
         shorter), median of {REPS} runs, after one untimed 1,000-message run and {WARMUP} untimed runs per size. Native: this bench (the release profile, \
         opt-level \"z\" + LTO, like the Worker). Wasm: benches/wasm-kernel (the same file, wasm32-unknown-unknown, \
         opt-level 3 + LTO) under node {}, timed with `performance.now()`. Not included: building the provider \
         request from the transcript. Timings are printed, never asserted.\n",
        step_kernel::TIMED_STEPS,
        node.as_deref().unwrap_or("(not found)")
    );
    let _ = writeln!(md, "| messages | timed steps | native µs/step | wasm (node) µs/step | wasm / native |");
    let _ = writeln!(md, "|---:|---:|---:|---:|---:|");
    for &(n, timed, us) in &native {
        let w = wasm.as_ref().and_then(|w| w.get(&n).copied());
        let _ = writeln!(
            md,
            "| {n} | {timed} | {us:.2} | {} | {} |",
            w.map_or("not measured".into(), |w| format!("{w:.2}")),
            w.map_or("–".into(), |w| format!("{:.2}", w / us))
        );
    }
    let _ = writeln!(md);

    // ----- sweep tick -----
    eprintln!("sweep ticks over {SWEEP_RUNS} pending runs…");
    let ticks: Vec<SweepFigures> = (0..SWEEP_REPS).map(|_| sweep_tick(SWEEP_RUNS)).collect();
    let tick = &ticks[0];
    for t in &ticks {
        assert_eq!((t.kv_operations, t.examined), (tick.kv_operations, tick.examined), "the tick is deterministic");
    }
    let mut cpu: Vec<f64> = ticks.iter().map(|t| t.cpu_ms).collect();
    let tick_cpu = step_kernel::median(&mut cpu);
    let _ = writeln!(md, "## Sweep tick over {SWEEP_RUNS} pending runs\n");
    let _ = writeln!(
        md,
        "{SWEEP_RUNS} runs failed on a provider 503 (journal store on SimKv); the provider recovered; one tick with \
         the default `SweepOptions` (at most 25 resumes, 800 store operations). KV operations as SimKv counts them \
         (gets, bulk gets, puts, deletes, lists); CPU: wall time of the simulated tick (no I/O waits), median of \
         {SWEEP_REPS} ticks.\n"
    );
    let _ =
        writeln!(md, "| pending runs | listed | runs examined | resumed | KV operations | store operations | CPU |");
    let _ = writeln!(md, "|---:|---:|---:|---:|---:|---:|---:|");
    let _ = writeln!(
        md,
        "| {SWEEP_RUNS} | {} | {} | {} | {} | {} | {:.1} ms |\n",
        tick.listed, tick.examined, tick.resumed, tick.kv_operations, tick.store_operations, tick_cpu
    );

    // ----- bundle sizes -----
    let bundle = worker_bundle(root);
    let npm = npm_wasm(root);
    let _ = writeln!(md, "## Bundle sizes\n");
    let _ = writeln!(md, "| artifact | raw bytes | gzip -9 bytes | budget |");
    let _ = writeln!(md, "|---|---:|---:|---|");
    match &bundle {
        Some(b) => {
            let _ = writeln!(md, "| Worker build/index_bg.wasm | {} | {} | |", b.wasm.raw, b.wasm.gzip);
            let _ = writeln!(md, "| Worker build/index.js | {} | {} | |", b.js.raw, b.js.gzip);
            let _ = writeln!(
                md,
                "| **Worker total** | {} | {} ({:.1} KiB) | ≤ 600 KiB gzip: {} |",
                b.raw(),
                b.gzip(),
                b.gzip() as f64 / 1024.0,
                if b.gzip() <= BUNDLE_BUDGET_GZIP { "met" } else { "**missed**" }
            );
        }
        None => {
            let _ = writeln!(md, "| Worker (build/) | not built | not built | run ./scripts/build-worker |");
        }
    }
    match &npm {
        Some((name, s)) => {
            let _ = writeln!(md, "| npm package {name} | {} | {} | |", s.raw, s.gzip);
        }
        None => {
            let _ = writeln!(md, "| npm package wasm (js/pkg/*.wasm) | not built | not built | |");
        }
    }
    let _ = writeln!(md);

    // ----- goals -----
    let (o100, b100) = (&layouts[&(100, false)], &layouts[&(100, true)]);
    let native_200 = native.iter().find(|x| x.0 == 200).map(|x| x.2).unwrap();
    let wasm_200 = wasm.as_ref().and_then(|w| w.get(&200).copied());
    let goals = [
        format!(
            "P1 writes_per_boundary={:.2} baseline={:.2}",
            o100.hot_writes_per_boundary, b100.hot_writes_per_boundary
        ),
        format!("P2 bytes_ratio={:.2} baseline={:.2}", o100.bytes_ratio, b100.bytes_ratio),
        format!("P3 rate_limited={} baseline={}", o100.rate_limited, b100.rate_limited),
        format!(
            "P4 wasm_us_per_step_200={} native_us_per_step_200={native_200:.2}",
            wasm_200.map_or("n/a".into(), |w| format!("{w:.2}"))
        ),
        format!("P5 sweep_ops_1000={}", tick.kv_operations),
        format!("bundle_gzip_bytes={}", bundle.map_or("n/a".into(), |b| b.gzip().to_string())),
    ];
    let verdicts = [
        verdict(o100.hot_writes_per_boundary <= 1.0),
        verdict(o100.bytes_ratio <= 2.0),
        verdict(o100.rate_limited == 0),
        wasm_200.map_or("not measured", |w| verdict(w <= 500.0)),
        verdict(tick.kv_operations < 1_000),
        bundle.map_or("not measured", |b| verdict(b.gzip() <= BUNDLE_BUDGET_GZIP)),
    ];
    let targets = [
        "≤ 1.0 KV writes per durable boundary on the hot path (100-step run)",
        "bytes written over a 100-step run ≤ 2× the final transcript",
        "zero 429s with 10 ms tools (100-step run)",
        "executor CPU per step ≤ 0.5 ms (500 µs) at 200 messages in wasm under node",
        "one sweep tick over 1,000 pending runs < 1,000 KV operations",
        "Worker bundle ≤ 600 KiB gzip (614400 bytes)",
    ];
    let _ = writeln!(md, "## Goals\n");
    let _ = writeln!(md, "| goal | target | result |");
    let _ = writeln!(md, "|---|---|---|");
    for ((g, t), v) in goals.iter().zip(targets).zip(verdicts) {
        let _ = writeln!(md, "| `{g}` | {t} | {v} |");
    }
    let _ = writeln!(md, "\n```");
    for g in &goals {
        let _ = writeln!(md, "{g}");
    }
    let _ = writeln!(md, "```");

    // ----- output -----
    let machine = format!(
        "{} ({} CPUs{})",
        sh("uname", &["-srm"]).unwrap_or_else(|| "unknown".into()),
        sh("nproc", &[]).unwrap_or_else(|| "?".into()),
        cpu_model().map_or(String::new(), |m| format!(", {m}"))
    );
    let date = sh("date", &["-u", "+%Y-%m-%d %H:%M UTC"]).unwrap_or_else(|| "unknown".into());
    let rustc = sh("rustc", &["--version"]).unwrap_or_else(|| "rustc (unknown)".into());
    let doc = format!(
        "# Benchmarks\n\nGenerated by `{command}` (benches/bench.rs); do not edit by hand.\n\n\
         - Machine: {machine}\n- Date: {date}\n- Toolchain: {rustc}, node {}\n\n\
         Deterministic figures (operation counts, bytes, 429s, simulated time, the bundle budget) are asserted by \
         tests/bench_figures.rs with the same setup; timings vary from machine to machine.\n\n{md}",
        node.as_deref().unwrap_or("(not found)")
    );
    print!("{doc}");
    let path = root.join("BENCHMARKS.md");
    std::fs::write(&path, &doc).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    println!("\nwrote {}\n", path.display());
    for g in &goals {
        println!("{g}");
    }
}

/// Native µs per step at `messages`: (messages, timed steps, median µs per step).
fn native_us_per_step(messages: usize) -> (usize, usize, f64) {
    let mut samples = Vec::with_capacity(REPS);
    let mut timed_steps = 0;
    for r in 0..WARMUP + REPS {
        let (mut k, timed) = step_kernel::prepare(messages);
        let t = Instant::now();
        let reached = step_kernel::run_steps(black_box(&mut k), timed);
        let us = t.elapsed().as_secs_f64() * 1e6 / timed as f64;
        assert!(reached >= messages, "the run reached {reached} messages, not {messages}");
        black_box(k.entry_bytes);
        timed_steps = timed;
        if r >= WARMUP {
            samples.push(us);
        }
    }
    (messages, timed_steps, step_kernel::median(&mut samples))
}

/// Wasm µs per step by transcript size, from `node benches/wasm-kernel/run.mjs`.
fn wasm_us_per_step(root: &Path) -> Result<BTreeMap<usize, f64>, String> {
    let pkg = std::env::var("STEADFAST_WASM_KERNEL_PKG")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| root.join("benches/wasm-kernel/pkg"));
    let out = Command::new("node")
        .arg(root.join("benches/wasm-kernel/run.mjs"))
        .arg(&pkg)
        .current_dir(root)
        .output()
        .map_err(|e| format!("cannot run node: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprint!("{stdout}");
    if !out.status.success() {
        return Err(format!(
            "node benches/wasm-kernel/run.mjs failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let line = stdout.lines().find_map(|l| l.strip_prefix("RESULT ")).ok_or("run.mjs printed no RESULT line")?;
    let v: BTreeMap<String, f64> = serde_json::from_str(line).map_err(|e| format!("bad RESULT line {line:?}: {e}"))?;
    let map: BTreeMap<usize, f64> = v.into_iter().filter_map(|(k, us)| Some((k.parse().ok()?, us))).collect();
    for n in CPU_SIZES {
        if !map.contains_key(&n) {
            return Err(format!("run.mjs measured no figure for {n} messages"));
        }
    }
    Ok(map)
}

fn sh(cmd: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(cmd).args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn cpu_model() -> Option<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix("model name").map(|r| r.trim_start_matches([' ', '\t', ':']).trim().to_string()))
}

fn ratio(ours: f64, baseline: f64) -> String {
    if baseline == 0.0 {
        return if ours == 0.0 { "–".into() } else { "∞".into() };
    }
    let r = ours / baseline;
    if r == 0.0 {
        "0".into()
    } else if r < 0.01 {
        format!("{r:.5}")
    } else {
        format!("{r:.3}")
    }
}

fn ms(v: f64) -> String {
    if v >= 10_000.0 {
        format!("{:.1} s", v / 1e3)
    } else {
        format!("{v:.0} ms")
    }
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "**missed**"
    }
}
