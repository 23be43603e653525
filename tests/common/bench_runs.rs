//! Runs shared by the benchmark (`benches/bench.rs`) and the test of its deterministic figures
//! (`tests/bench_figures.rs`): the same setup in both, so the test asserts what the bench reports.
//!
//! Both include this file and the seed baseline with `#[path]`:
//! `#[path = ".../tests/common/seed_layout.rs"] mod seed_layout;` at the crate root, then this file.
#![allow(dead_code)]

use crate::seed_layout::{transcript_bytes, SeedLayoutStore};
use serde_json::json;
use std::cell::Cell;
use std::path::Path;
use std::rc::Rc;
use steadfast::core::checkpoint::RunStatus;
use steadfast::core::retry::RetryPolicy;
use steadfast::core::sweep::SweepOptions;
use steadfast::core::transcript::{validate_transcript, Message};
use steadfast::runtime::{
    Agent, AgentOptions, Clock, FnTool, ManualClock, ManualSleep, MockModel, MockTurn, NoListener, SendOptions, Sleep,
    SplitMix64, Tool, ToolOutput,
};
use steadfast::store::sim::{SimKv, SimOptions};
use steadfast::store::{JournalOptions, JournalStore, RunStore};

/// Simulated start time of every run.
pub const T0: u64 = 1_700_000_000_000;

/// Simulated duration of every tool call (ms).
pub const TOOL_MS: u64 = 10;

/// Run lengths of the layouts table.
pub const STEP_COUNTS: [usize; 3] = [10, 100, 500];

/// Pending runs of the sweep tick.
pub const SWEEP_RUNS: usize = 1_000;

/// Worker bundle budget (gzip of wasm + js).
pub const BUNDLE_BUDGET_GZIP: u64 = 600 * 1024;

/// Which store layout a run used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// The journal store (ours).
    Journal,
    /// The seed's rewrite-everything layout (baseline).
    Seed,
}

impl Layout {
    pub fn name(self) -> &'static str {
        match self {
            Layout::Journal => "journal (ours)",
            Layout::Seed => "seed rewrite (baseline)",
        }
    }
}

/// KV figures of one run on one layout (all counted on SimKv, except the hot path, counted by the store).
#[derive(Clone, Debug, PartialEq)]
pub struct LayoutFigures {
    pub layout: Layout,
    pub steps: usize,
    /// Durable boundaries (commits).
    pub boundaries: u64,
    /// Hot-path writes per boundary: ours, journal-entry writes; seed, its writes less the 429-refused ones.
    pub hot_writes_per_boundary: f64,
    /// Every KV write (put or delete that SimKv accepted) per boundary.
    pub writes_per_boundary: f64,
    /// Every KV read per boundary.
    pub reads_per_boundary: f64,
    /// Bytes of values written.
    pub bytes_written: u64,
    /// Bytes of the final transcript as JSON.
    pub transcript_bytes: u64,
    /// Messages of the final transcript.
    pub messages: usize,
    /// `bytes_written / transcript_bytes`.
    pub bytes_ratio: f64,
    /// Writes SimKv refused with 429.
    pub rate_limited: u64,
    /// Simulated time the run took (ms): tools, lease settling and 429 backoff.
    pub simulated_ms: u64,
}

/// Two tools answering `<name> <i> <480 bytes>` after [`TOOL_MS`] of simulated time on `clock`.
pub fn slow_tools(clock: &ManualClock) -> Vec<Rc<dyn Tool>> {
    let payload = "x".repeat(480);
    let mk = |name: &'static str| -> Rc<dyn Tool> {
        let sleep = ManualSleep::new(clock.clone());
        let payload = payload.clone();
        Rc::new(FnTool::new(name, name, json!({"type": "object"}), move |args, _ctx| {
            let sleep = sleep.clone();
            let payload = payload.clone();
            async move {
                sleep.sleep(TOOL_MS).await;
                Ok(ToolOutput::text(format!("{name} {} {payload}", args["i"])))
            }
        }))
    };
    vec![mk("search"), mk("read")]
}

/// `steps` model turns: two tool calls with a ~190-byte text each, then a final answer.
pub fn long_script(steps: usize) -> Vec<MockTurn> {
    let mut s: Vec<MockTurn> = (0..steps - 1)
        .map(|i| {
            MockTurn::tools([("search", json!({"i": i})), ("read", json!({"i": i}))])
                .with_text(format!("step {i}: {}", "t".repeat(180)))
        })
        .collect();
    s.push(MockTurn::text("finished"));
    s
}

fn agent(
    store: Rc<dyn RunStore>,
    clock: &ManualClock,
    model: MockModel,
    tools: Vec<Rc<dyn Tool>>,
    options: AgentOptions,
) -> Agent {
    let mut b = Agent::builder(model)
        .store_rc(store)
        .clock(Rc::new(clock.clone()))
        .sleep(Rc::new(ManualSleep::new(clock.clone())))
        .rng(Rc::new(SplitMix64::new(7)))
        .options(options)
        .instructions("Be thorough.");
    for t in tools {
        b = b.tool_rc(t);
    }
    b.build().expect("the agent builds")
}

fn sim(clock: &ManualClock) -> SimKv {
    SimKv::new(Rc::new(clock.clone()), SimOptions { locations: 1, propagation_ms: 60_000, ..SimOptions::default() })
}

fn journal(kv: SimKv, clock: &ManualClock) -> JournalStore<SimKv> {
    JournalStore::new(kv, Rc::new(clock.clone()), Rc::new(ManualSleep::new(clock.clone())), JournalOptions::default())
}

/// A `steps`-step run (2 tool calls a step, 10 ms tools) on `layout` over a one-location SimKv.
pub fn run_layout(layout: Layout, steps: usize) -> (LayoutFigures, Vec<Message>) {
    let options = AgentOptions { max_steps: steps as u32 + 1, ..AgentOptions::default() };
    let clock = ManualClock::new(T0);
    let kv = sim(&clock);
    let model = MockModel::new(long_script(steps));
    let (done, boundaries, hot_writes) = match layout {
        Layout::Journal => {
            let store = Rc::new(journal(kv.clone(), &clock));
            let a = agent(store.clone(), &clock, model, slow_tools(&clock), options);
            let done = block_on(a.send("bench", "research it", SendOptions::default())).expect("the run finishes");
            let c = store.counters();
            (done, c.commits, c.commit_writes)
        }
        Layout::Seed => {
            let store = Rc::new(SeedLayoutStore::new(kv.clone(), Rc::new(ManualSleep::new(clock.clone()))));
            let a = agent(store.clone(), &clock, model, slow_tools(&clock), options);
            let done = block_on(a.send("bench", "research it", SendOptions::default())).expect("the run finishes");
            (done, store.commits.get(), store.writes.get() - store.rate_limited.get())
        }
    };
    assert_eq!(done.status, RunStatus::Finished, "{layout:?} {steps}");
    assert!(validate_transcript(&done.messages).is_ok());
    let kvc = kv.counts();
    let transcript = transcript_bytes(&done.messages);
    let b = boundaries.max(1) as f64;
    let figures = LayoutFigures {
        layout,
        steps,
        boundaries,
        hot_writes_per_boundary: hot_writes as f64 / b,
        writes_per_boundary: kvc.writes() as f64 / b,
        reads_per_boundary: kvc.reads() as f64 / b,
        bytes_written: kvc.bytes_written,
        transcript_bytes: transcript,
        messages: done.messages.len(),
        bytes_ratio: kvc.bytes_written as f64 / transcript as f64,
        rate_limited: kvc.rate_limited,
        simulated_ms: clock.now_ms() - T0,
    };
    (figures, done.messages)
}

/// What one sweep tick over [`SWEEP_RUNS`] pending runs did.
#[derive(Clone, Debug, PartialEq)]
pub struct SweepFigures {
    pub listed: usize,
    pub examined: usize,
    pub resumed: usize,
    /// Store operations, as the tick reports them.
    pub store_operations: u64,
    /// KV operations SimKv counted during the tick (gets, bulk gets, puts, deletes, lists).
    pub kv_operations: u64,
    /// CPU time of the tick (wall time of the simulated tick; no I/O waits).
    pub cpu_ms: f64,
}

/// `runs` runs fail on a 503 (one model attempt each), the provider recovers, and one sweep tick runs.
pub fn sweep_tick(runs: usize) -> SweepFigures {
    let clock = ManualClock::new(T0);
    let kv = sim(&clock);
    let store = Rc::new(journal(kv.clone(), &clock));
    let down = Rc::new(Cell::new(true));
    let d = down.clone();
    let model =
        MockModel::by_turn(vec![MockTurn::func(
            move |_| if d.get() { MockTurn::error(503) } else { MockTurn::text("ok") },
        )]);
    let options =
        AgentOptions { retry: RetryPolicy { max_attempts: 1, ..RetryPolicy::default() }, ..AgentOptions::default() };
    let a = agent(store, &clock, model, vec![], options);
    for i in 0..runs {
        block_on(a.send(&format!("run-{i:04}"), "go", SendOptions::default())).unwrap_err();
    }
    down.set(false);
    clock.advance(60_000);
    let before = kv.counts();
    let t = std::time::Instant::now();
    let tick = block_on(a.sweep(&SweepOptions::default(), &NoListener)).expect("the tick runs");
    let cpu_ms = t.elapsed().as_secs_f64() * 1e3;
    let after = kv.counts();
    SweepFigures {
        listed: tick.listed,
        examined: tick.examined,
        resumed: tick.resumed,
        store_operations: tick.operations,
        kv_operations: after.operations() - before.operations(),
        cpu_ms,
    }
}

/// Size of one file, raw and `gzip -9`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileSize {
    pub raw: u64,
    pub gzip: u64,
}

/// `path`'s size raw and gzipped (`gzip -9 -c`, as scripts/test measures it); `None` when the file does not exist. Panics when gzip fails.
pub fn file_size(path: &Path) -> Option<FileSize> {
    let raw = std::fs::metadata(path).ok()?.len();
    let out = std::process::Command::new("gzip")
        .args(["-9", "-c"])
        .arg(path)
        .output()
        .unwrap_or_else(|e| panic!("cannot run gzip on {}: {e}", path.display()));
    assert!(out.status.success(), "gzip failed on {}: {}", path.display(), String::from_utf8_lossy(&out.stderr));
    Some(FileSize { raw, gzip: out.stdout.len() as u64 })
}

/// The Worker bundle built by `./scripts/build-worker`: `build/index_bg.wasm` and `build/index.js`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkerBundle {
    pub wasm: FileSize,
    pub js: FileSize,
}

impl WorkerBundle {
    pub fn raw(&self) -> u64 {
        self.wasm.raw + self.js.raw
    }
    /// Gzip of the wasm plus gzip of the js.
    pub fn gzip(&self) -> u64 {
        self.wasm.gzip + self.js.gzip
    }
}

/// The Worker bundle under `root`, if it was built.
pub fn worker_bundle(root: &Path) -> Option<WorkerBundle> {
    let wasm = file_size(&root.join("build/index_bg.wasm"))?;
    let js = file_size(&root.join("build/index.js"))?;
    Some(WorkerBundle { wasm, js })
}

/// The npm package's wasm (`js/pkg/*.wasm`), if it was built: (file name, size).
pub fn npm_wasm(root: &Path) -> Option<(String, FileSize)> {
    let dir = std::fs::read_dir(root.join("js/pkg")).ok()?;
    let mut wasm: Vec<_> =
        dir.filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "wasm")).collect();
    wasm.sort();
    let p = wasm.into_iter().next()?;
    let size = file_size(&p)?;
    Some((p.strip_prefix(root).unwrap_or(&p).display().to_string(), size))
}

pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    futures::executor::block_on(f)
}
