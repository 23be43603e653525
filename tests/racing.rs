//! Racing replicas on the hostile Workers-KV simulator, in simulated time.
//!
//! Two or three runtimes ("replicas", each an [`Agent`] over its own [`JournalStore`] on a [`SimKv`] handle,
//! in one location or two) run the same run as truly concurrent tasks on one [`SimExecutor`]: every KV
//! operation takes a seeded latency and takes effect inside it, model calls and tools take time, leases are
//! renewed on the shared clock. Per trial, seeded: the first replica may stall (longer than its lease or not)
//! or crash; the others may look at the run first (priming their location's cache), start at the same moment
//! or later, retry while it is busy, crash. Then the run is finished from whatever is stored.
//!
//! Ground truth, at the instant a tool execution starts (its first poll), from the simulator and the stores:
//! * an **overlapping execution** is a tool start by one replica while another replica holds a lease it
//!   believes valid: it got the lease from `acquire_lease`/`renew_lease`, its expiry (on the shared clock) is
//!   still ahead, and it has not released it, been told it lost it (`STEADFAST_SESSION_BUSY`) or crashed since;
//! * a **re-execution of a recorded call** is a tool start for a call whose result is already in the run's
//!   readable journal at the origin (the oracle's load of the lease record's chain at that instant);
//! * **double executions** `D` = tool starts that are either (each start counted once);
//! * a **lost boundary** is a trial whose final stored run (read at the origin) is not the finished
//!   transcript of the uninterrupted run.
//!
//! Calls that ran twice for another reason (a replica crashed or froze after a tool started and before its
//! result was recorded, and a later owner ran it again with the same idempotency key) are counted apart: no
//! lease protocol prevents them.
//!
//! Every configuration asserts ceilings on `D` and `L = 0`. Knobs: `STEADFAST_CASES=<n>` trials per configuration
//! (default 400; `STEADFAST_LARGE=1` ten times that); `STEADFAST_SEED=<seed>` replays one trial of each selected configuration with a log
//! and asserts what holds for every trial (no lost boundary; no double execution where the ceiling is none), e.g.
//! `STEADFAST_SEED=17 cargo test --test racing one_location_realistic -- --nocapture`.

mod common;

use async_trait::async_trait;
use futures::FutureExt;
use serde_json::json;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use steadfast::core::approval::ApprovalRecord;
use steadfast::core::checkpoint::{Checkpoint, JournalEntry, RunStatus};
use steadfast::core::machine::ModelResponse;
use steadfast::core::transcript::{validate_transcript, Message};
use steadfast::runtime::{
    Agent, AgentOptions, Clock, CrashPoint, FnTool, MockModel, MockTurn, Model, ModelRequest, Rng, SendOptions,
    SimExecutor, SimTime, Sleep, SplitMix64, StallPoint, Tool, ToolOutput,
};
use steadfast::store::kv::{KvBackend, ListPage, PutOptions};
use steadfast::store::sim::{SimKv, SimOptions, Visibility};
use steadfast::store::{
    HistoryEntry, JournalOptions, JournalStore, Lease, LeaseOptions, PendingRun, RunStore, StoreCounters,
};
use steadfast::{ErrorCode, Result};

const RUN: &str = "race";
const INPUT: &str = "Reconcile the ledger";
const T0: u64 = 1_700_000_000_000;

fn script() -> Vec<MockTurn> {
    vec![
        MockTurn::tools([("step", json!({"n": 1})), ("step", json!({"n": 2}))]),
        MockTurn::tools([("step", json!({"n": 3}))]),
        MockTurn::tools([("step", json!({"n": 4})), ("step", json!({"n": 5}))]),
        MockTurn::tools([("step", json!({"n": 6}))]),
        MockTurn::text("Ledger reconciled."),
    ]
}

// --- Configurations ------------------------------------------------------------------------------------------

#[derive(Clone, Copy)]
struct Config {
    name: &'static str,
    locations: usize,
    lease: LeaseOptions,
    sim: fn(u64) -> SimOptions,
    /// Whether the other replicas may read the run before it exists (priming, or a simultaneous start): in
    /// another location that caches a miss for the propagation delay.
    early_reads: bool,
    /// Test of the count itself: every replica but the first gets a KV of its own, so leases exclude nothing.
    split_brain: bool,
}

const DEFAULT_LEASE: LeaseOptions = LeaseOptions { ttl_ms: 30_000, renew_every_ms: 10_000, grace_ms: 30_000 };
const LONG_LEASE: LeaseOptions = LeaseOptions { ttl_ms: 120_000, renew_every_ms: 10_000, grace_ms: 90_000 };

/// Same-location read-your-writes fails for a quarter of the writes, by up to 2 s.
const VISIBILITY: Visibility = Visibility { per_mille: 250, max_delay_ms: 2_000 };

fn hostile(seed: u64) -> SimOptions {
    SimOptions::hostile(seed)
}
fn hostile_with_visibility_delay(seed: u64) -> SimOptions {
    SimOptions { visibility: VISIBILITY, ..SimOptions::hostile(seed) }
}
fn hostile_two_locations(seed: u64) -> SimOptions {
    SimOptions { locations: 2, ..SimOptions::hostile(seed) }
}
/// KV slower than the settle window (1 s) now and then: 10 % of operations take up to 3 s.
fn hostile_slow_tail(seed: u64) -> SimOptions {
    let latency = steadfast::store::sim::Latency { min_ms: 2, max_ms: 60, tail_per_mille: 100, tail_max_ms: 3_000 };
    SimOptions { latency, ..SimOptions::hostile(seed) }
}
fn hostile_without_429(seed: u64) -> SimOptions {
    SimOptions { rate_limit_per_mille: 0, ..SimOptions::hostile(seed) }
}

const ONE_LOCATION: Config = Config {
    name: "one location, realistic latency",
    locations: 1,
    lease: DEFAULT_LEASE,
    sim: hostile,
    early_reads: true,
    split_brain: false,
};
const ONE_LOCATION_VISIBILITY: Config = Config {
    name: "one location, visibility delay",
    locations: 1,
    lease: DEFAULT_LEASE,
    sim: hostile_with_visibility_delay,
    early_reads: true,
    split_brain: false,
};
const TWO_LOCATIONS: Config = Config {
    name: "two locations (60 s propagation), default lease 30 s + 30 s grace",
    locations: 2,
    lease: DEFAULT_LEASE,
    sim: hostile_two_locations,
    early_reads: true,
    split_brain: false,
};
const TWO_LOCATIONS_NO_EARLY_READ: Config = Config {
    name: "two locations (60 s propagation), default lease, no read before the run exists",
    locations: 2,
    lease: DEFAULT_LEASE,
    sim: hostile_two_locations,
    early_reads: false,
    split_brain: false,
};
const TWO_LOCATIONS_LONG_LEASE: Config = Config {
    name: "two locations (60 s propagation), lease 120 s + 90 s grace",
    locations: 2,
    lease: LONG_LEASE,
    sim: hostile_two_locations,
    early_reads: true,
    split_brain: false,
};
const ONE_LOCATION_SLOW_TAIL: Config = Config {
    name: "one location, 10 % of KV operations up to 3 s (beyond the settle window)",
    locations: 1,
    lease: DEFAULT_LEASE,
    sim: hostile_slow_tail,
    early_reads: true,
    split_brain: false,
};
const ONE_LOCATION_NO_429: Config = Config {
    name: "one location, the 429 off",
    locations: 1,
    lease: DEFAULT_LEASE,
    sim: hostile_without_429,
    early_reads: true,
    split_brain: false,
};

// --- Ground truth ---------------------------------------------------------------------------------------------

/// What one replica believes about its lease on the run.
#[derive(Default)]
struct Belief {
    lease: Option<Lease>,
}

#[derive(Default)]
struct Ledger {
    /// Per call id: (replica, time, flagged) of every tool start; flagged: overlapping or recorded already.
    starts: BTreeMap<String, Vec<(usize, u64, bool)>>,
    overlapping: u32,
    recorded: u32,
    log: Vec<String>,
    verbose: bool,
}

impl Ledger {
    fn note(&mut self, at: u64, line: String) {
        if self.verbose {
            self.log.push(format!("{:>9.3} s  {line}", (at - T0) as f64 / 1_000.0));
        }
    }
}

/// A [`RunStore`] wrapper that keeps its replica's [`Belief`] up to date (the test's window on the runtime).
struct Watched<S: RunStore> {
    inner: S,
    belief: Rc<RefCell<Belief>>,
    ledger: Rc<RefCell<Ledger>>,
    name: String,
    time: SimTime,
}

impl<S: RunStore> Watched<S> {
    fn lost_on_busy<T>(&self, r: &Result<T>) {
        if r.as_ref().is_err_and(|e| e.code == ErrorCode::SessionBusy) {
            self.belief.borrow_mut().lease = None;
        }
    }

    fn note(&self, line: String) {
        self.ledger.borrow_mut().note(self.time.now_ms(), format!("{} {line}", self.name));
    }
}

#[async_trait(?Send)]
impl<S: RunStore> RunStore for Watched<S> {
    async fn load(&self, run_id: &str) -> Result<Option<Checkpoint>> {
        self.inner.load(run_id).await
    }
    async fn acquire_lease(&self, run_id: &str, owner: &str, now_ms: u64, opts: &LeaseOptions) -> Result<Lease> {
        let r = self.inner.acquire_lease(run_id, owner, now_ms, opts).await;
        match &r {
            Ok(l) => {
                // Not a belief yet: the runtime starts nothing irreversible before `confirm_lease`.
                self.note(format!(
                    "acquired epoch {} as {} until +{} s (unconfirmed)",
                    l.epoch,
                    l.owner,
                    (l.expires_at - T0) / 1_000
                ));
            }
            Err(e) => self.note(format!("acquire failed: {}", e.code.as_str())),
        }
        r
    }
    async fn confirm_lease(&self, lease: &Lease) -> Result<()> {
        let r = self.inner.confirm_lease(lease).await;
        match &r {
            Ok(()) => {
                let mut b = self.belief.borrow_mut();
                if b.lease.as_ref().is_none_or(|l| l.owner != lease.owner) {
                    drop(b);
                    self.note(format!("confirmed epoch {} as {}", lease.epoch, lease.owner));
                    b = self.belief.borrow_mut();
                }
                b.lease = Some(match b.lease.take() {
                    Some(held) if held.owner == lease.owner => held,
                    _ => lease.clone(),
                });
            }
            Err(e) => self.note(format!("confirmation failed: {}", e.code.as_str())),
        }
        self.lost_on_busy(&r);
        r
    }
    async fn renew_lease(&self, lease: &Lease, now_ms: u64, opts: &LeaseOptions) -> Result<Lease> {
        let r = self.inner.renew_lease(lease, now_ms, opts).await;
        match &r {
            Ok(l) => self.belief.borrow_mut().lease = Some(l.clone()),
            Err(e) => self.note(format!("renewal failed: {}", e.code.as_str())),
        }
        self.lost_on_busy(&r);
        r
    }
    async fn release_lease(&self, lease: &Lease) -> Result<()> {
        self.belief.borrow_mut().lease = None;
        self.note("released".into());
        self.inner.release_lease(lease).await
    }
    async fn commit(&self, lease: &Lease, entry: &JournalEntry, state: &Checkpoint) -> Result<()> {
        let r = self.inner.commit(lease, entry, state).await;
        self.lost_on_busy(&r);
        if let Err(e) = &r {
            self.note(format!("commit {} failed: {}", entry.seq, e.code.as_str()));
        }
        r
    }
    async fn delete(&self, run_id: &str) -> Result<()> {
        self.inner.delete(run_id).await
    }
    async fn history(&self, run_id: &str, limit: usize) -> Result<Vec<HistoryEntry>> {
        self.inner.history(run_id, limit).await
    }
    async fn pending(&self) -> Result<Vec<PendingRun>> {
        self.inner.pending().await
    }
    async fn put_approval(&self, record: &ApprovalRecord) -> Result<()> {
        self.inner.put_approval(record).await
    }
    async fn get_approval(&self, id: &str) -> Result<Option<ApprovalRecord>> {
        self.inner.get_approval(id).await
    }
    async fn list_approvals(&self) -> Result<Vec<ApprovalRecord>> {
        self.inner.list_approvals().await
    }
    async fn delete_approval(&self, id: &str) -> Result<()> {
        self.inner.delete_approval(id).await
    }
    async fn put_due(&self, due: &steadfast::store::DueWait) -> Result<()> {
        self.inner.put_due(due).await
    }
    async fn list_due(&self, until: u64, limit: usize) -> Result<Vec<steadfast::store::DueWait>> {
        self.inner.list_due(until, limit).await
    }
    async fn delete_due(&self, due: &steadfast::store::DueWait) -> Result<()> {
        self.inner.delete_due(due).await
    }
    async fn put_queued(&self, msg: &steadfast::store::QueuedMessage) -> Result<()> {
        self.inner.put_queued(msg).await
    }
    async fn list_queued(&self, run_id: &str) -> Result<Vec<steadfast::store::QueuedMessage>> {
        self.inner.list_queued(run_id).await
    }
    async fn delete_queued(&self, msg: &steadfast::store::QueuedMessage) -> Result<()> {
        self.inner.delete_queued(msg).await
    }
    async fn get_state(&self, name: &str) -> Result<Option<String>> {
        self.inner.get_state(name).await
    }
    async fn put_state(&self, name: &str, value: &str) -> Result<()> {
        self.inner.put_state(name, value).await
    }
    fn counters(&self) -> StoreCounters {
        self.inner.counters()
    }
    fn reads_current(&self) -> bool {
        self.inner.reads_current()
    }
}

/// A replica's KV handle that logs its operations on the lease key (in replays).
struct Traced {
    kv: SimKv,
    ledger: Rc<RefCell<Ledger>>,
    name: String,
    time: SimTime,
    lease_key: String,
}

fn owner_of(value: Option<&str>) -> String {
    value
        .and_then(|v| serde_json::from_str::<serde_json::Value>(v).ok())
        .map(|v| format!("{} epoch {}", v["owner"].as_str().unwrap_or("?"), v["epoch"]))
        .unwrap_or_else(|| "nothing".into())
}

impl Traced {
    fn trace(&self, start: u64, line: String) {
        let mut l = self.ledger.borrow_mut();
        if l.verbose {
            let now = self.time.now_ms();
            l.note(now, format!("{} {line} (took {} ms)", self.name, now - start));
        }
    }
}

#[async_trait(?Send)]
impl KvBackend for Traced {
    async fn get(&self, key: &str) -> Result<Option<String>> {
        let start = self.time.now_ms();
        let r = self.kv.get(key).await;
        if key == self.lease_key {
            match &r {
                Ok(v) => self.trace(start, format!("read the lease: {}", owner_of(v.as_deref()))),
                Err(e) => self.trace(start, format!("lease read failed: {}", e.code.as_str())),
            }
        }
        r
    }
    async fn get_many(&self, keys: &[String]) -> Result<Vec<Option<String>>> {
        self.kv.get_many(keys).await
    }
    async fn put(&self, key: &str, value: &str, opts: PutOptions) -> Result<()> {
        let start = self.time.now_ms();
        let r = self.kv.put(key, value, opts).await;
        if key == self.lease_key {
            match &r {
                Ok(()) => self.trace(start, format!("wrote the lease: {}", owner_of(Some(value)))),
                Err(e) => self.trace(start, format!("lease write failed: {}", e.code.as_str())),
            }
        }
        r
    }
    async fn delete(&self, key: &str) -> Result<()> {
        self.kv.delete(key).await
    }
    async fn list(&self, prefix: &str, cursor: Option<&str>, limit: usize) -> Result<ListPage> {
        self.kv.list(prefix, cursor, limit).await
    }
}

/// The scripted model, taking 0.3–4 s per call.
struct SlowModel {
    inner: MockModel,
    time: SimTime,
    rng: SplitMix64,
}

#[async_trait(?Send)]
impl Model for SlowModel {
    fn id(&self) -> &str {
        self.inner.id()
    }
    async fn generate(&self, request: ModelRequest<'_>) -> Result<ModelResponse> {
        self.time.sleep(300 + self.rng.next_u64() % 3_700).await;
        self.inner.generate(request).await
    }
}

// --- One trial ------------------------------------------------------------------------------------------------

struct Replica {
    agent: Agent,
    kv: SimKv,
    belief: Rc<RefCell<Belief>>,
}

struct World {
    exec: SimExecutor,
    time: SimTime,
    kv: SimKv,
    lease: LeaseOptions,
    ledger: Rc<RefCell<Ledger>>,
    beliefs: Rc<RefCell<Vec<Rc<RefCell<Belief>>>>>,
}

fn oracle(kv: &SimKv, time: &SimTime) -> JournalStore<SimKv> {
    JournalStore::new(kv.origin(), Rc::new(time.clone()), Rc::new(time.clone()), JournalOptions::default())
}

fn has_result(cp: &Checkpoint, call_id: &str) -> bool {
    cp.messages.iter().any(|m| matches!(m, Message::Tool(r) if r.tool_call_id == call_id))
}

impl World {
    fn new(config: &Config, seed: u64, verbose: bool) -> World {
        let exec = SimExecutor::new(T0, seed);
        let time = exec.time();
        let opts = SimOptions { locations: config.locations, ..(config.sim)(seed) };
        let kv = SimKv::with_timer(Rc::new(time.clone()), Rc::new(time.clone()), opts);
        let ledger = Rc::new(RefCell::new(Ledger { verbose, ..Ledger::default() }));
        World { exec, time, kv, lease: config.lease, ledger, beliefs: Default::default() }
    }

    /// The counting tool of replica `me`: judges each start against the ground truth, then works 20 ms–3 s.
    fn step_tool(&self, me: usize, seed: u64) -> Rc<dyn Tool> {
        let (time, ledger, beliefs) = (self.time.clone(), self.ledger.clone(), self.beliefs.clone());
        let oracle = oracle(&self.kv, &self.time);
        let rng = Rc::new(SplitMix64::new(seed));
        Rc::new(FnTool::new("step", "one ledger step", json!({"type": "object"}), move |args, ctx| {
            let now = time.now_ms();
            let other_holder = beliefs.borrow().iter().enumerate().find_map(|(i, b)| {
                let b = b.borrow();
                let l = b.lease.as_ref()?;
                (i != me && l.expires_at > now).then(|| (i, l.owner.clone()))
            });
            let readable = oracle.load(RUN).now_or_never().expect("the oracle never waits");
            let recorded =
                readable.as_ref().is_ok_and(|cp| cp.as_ref().is_some_and(|cp| has_result(cp, &ctx.tool_call_id)));
            {
                let mut l = ledger.borrow_mut();
                let flagged = other_holder.is_some() || recorded;
                l.starts.entry(ctx.tool_call_id.clone()).or_default().push((me, now, flagged));
                l.overlapping += u32::from(other_holder.is_some());
                l.recorded += u32::from(recorded);
                let flag = match (&other_holder, recorded) {
                    (Some((i, o)), _) => format!("  <-- OVERLAP: replica {i} holds {o}"),
                    (None, true) => "  <-- RECORDED ALREADY".to_string(),
                    _ => String::new(),
                };
                l.note(now, format!("r{me} starts {} (step {}){flag}", ctx.tool_call_id, args["n"]));
            }
            let work = 20 + rng.next_u64() % 2_980;
            let time = time.clone();
            async move {
                time.sleep(work).await;
                Ok(ToolOutput::text(format!("step {} done", args["n"])))
            }
        }))
    }

    fn replica(&self, me: usize, location: usize, seed: u64, split_brain: bool) -> Replica {
        let kv = if split_brain && me > 0 {
            let opts = SimOptions { seed: seed ^ 0xb4a1, ..self.kv.options() };
            SimKv::with_timer(Rc::new(self.time.clone()), Rc::new(self.time.clone()), opts).at(location)
        } else {
            self.kv.at(location)
        };
        let belief = Rc::new(RefCell::new(Belief::default()));
        self.beliefs.borrow_mut().push(belief.clone());
        let clock: Rc<dyn Clock> = Rc::new(self.time.clone());
        let sleep: Rc<dyn Sleep> = Rc::new(self.time.clone());
        let traced = Traced {
            kv: kv.clone(),
            ledger: self.ledger.clone(),
            name: format!("r{me}@{location}"),
            time: self.time.clone(),
            lease_key: format!("run/{RUN}/lease"),
        };
        let store = Watched {
            inner: JournalStore::new(traced, clock.clone(), sleep.clone(), JournalOptions::default()),
            belief: belief.clone(),
            ledger: self.ledger.clone(),
            name: format!("r{me}@{location}"),
            time: self.time.clone(),
        };
        let model = SlowModel {
            inner: MockModel::by_turn(script()),
            time: self.time.clone(),
            rng: SplitMix64::new(seed ^ 0x5eed),
        };
        let agent = Agent::builder(model)
            .tool_rc(self.step_tool(me, seed ^ 0x7001))
            .store(store)
            .clock(clock)
            .sleep(sleep)
            .rng(Rc::new(SplitMix64::new(seed)))
            .options(AgentOptions { lease: self.lease, ..AgentOptions::default() })
            .build()
            .expect("agent builds");
        Replica { agent, kv, belief }
    }
}

#[derive(Default, Clone, Copy)]
struct Trial {
    overlapping: u32,
    recorded: u32,
    doubles: u32,
    /// Calls started more than once, for any reason.
    rerun_calls: u32,
    /// Tools were started by more than one replica.
    handover: bool,
    lost_boundary: bool,
    /// Lease writes given up (too slow to prove anything) and marked void.
    voided: u32,
}

fn reference_messages() -> Vec<Message> {
    let exec = SimExecutor::new(T0, 1);
    let time = exec.time();
    let kv = SimKv::with_timer(Rc::new(time.clone()), Rc::new(time.clone()), SimOptions::default());
    let store = JournalStore::new(kv, Rc::new(time.clone()), Rc::new(time.clone()), JournalOptions::default());
    let step = FnTool::new("step", "one ledger step", json!({"type": "object"}), |args, _ctx| async move {
        Ok(ToolOutput::text(format!("step {} done", args["n"])))
    });
    let agent = Agent::builder(MockModel::by_turn(script()))
        .tool(step)
        .store(store)
        .clock(Rc::new(time.clone()))
        .sleep(Rc::new(time))
        .build()
        .unwrap();
    let done = exec.block_on(async move { agent.send(RUN, INPUT, SendOptions::default()).await }).unwrap();
    assert_eq!(done.status, RunStatus::Finished);
    done.messages
}

fn trial(config: &Config, seed: u64, reference: &[Message], verbose: bool) -> (Trial, Vec<String>) {
    let world = World::new(config, seed, verbose);
    let rng = SplitMix64::new(seed ^ 0xace);
    let pick = |n: u64| rng.next_u64() % n;
    let n = if pick(4) == 0 { 3 } else { 2 };
    let replicas: Vec<Rc<Replica>> = (0..n)
        .map(|i| {
            let location = if i == 0 { 0 } else { (i as usize).min(config.locations - 1) };
            Rc::new(world.replica(i as usize, location, seed.wrapping_mul(31).wrapping_add(i), config.split_brain))
        })
        .collect();
    let time = world.time.clone();
    let log = |line: String| world.ledger.borrow_mut().note(time.now_ms(), line);

    // Replica 0 sends, and may stall (a frozen process: nothing of it runs) or crash.
    let a = replicas[0].clone();
    let mut opts = SendOptions::default();
    match pick(4) {
        0 | 1 => {
            let stall_ms = [3_000, 20_000, 45_000, 70_000, 150_000][pick(5) as usize];
            let after_effects = 1 + pick(30) as usize;
            log(format!("r0 will stall {} s after effect {after_effects}", stall_ms / 1_000));
            let t = time.clone();
            let wait = Rc::new(move || -> steadfast::runtime::LocalFuture<'static, ()> {
                let t = t.clone();
                Box::pin(async move { t.sleep(stall_ms).await })
            });
            opts.stall = Some(StallPoint { after_effects, wait });
        }
        2 => {
            let crash = CrashPoint { after_effects: 1 + pick(30) as usize, finish_in_flight: pick(2) == 0 };
            log(format!("r0 will crash after effect {}", crash.after_effects));
            opts.crash = Some(crash);
        }
        _ => {}
    }
    let (ledger0, t0) = (world.ledger.clone(), time.clone());
    world.exec.spawn(async move {
        let r = a.agent.send(RUN, INPUT, opts).await;
        if r.as_ref().is_err_and(|e| e.code == ErrorCode::Crashed) {
            a.belief.borrow_mut().lease = None;
            ledger0.borrow_mut().note(t0.now_ms(), "r0 crashed".into());
        }
    });

    // The others: maybe prime their cache, then start at the same moment or later; retry while busy.
    for (i, r) in replicas.iter().enumerate().skip(1) {
        let r = r.clone();
        let t = time.clone();
        let ledger = world.ledger.clone();
        let prime = (pick(2) == 0 && config.early_reads).then(|| pick(30_000));
        let simultaneous = pick(3) == 0 && config.early_reads;
        let start = match (simultaneous, pick(2)) {
            (true, _) => pick(300),
            (false, 0) if config.early_reads => pick(20_000),
            // The run exists (it is created in well under 5 s) and nobody here read it before.
            (false, 0) => 5_000 + pick(15_000),
            _ => 20_000 + pick(100_000),
        };
        let crash =
            (pick(3) == 0).then(|| CrashPoint { after_effects: 1 + pick(25) as usize, finish_in_flight: pick(2) == 0 });
        let retry_gaps: Vec<u64> = (0..8).map(|_| 5_000 + pick(35_000)).collect();
        world.exec.spawn(async move {
            let mut waited = 0;
            if let Some(p) = prime.filter(|p| *p < start) {
                t.sleep(p).await;
                r.kv.start_invocation();
                let _ = r.agent.load(RUN).await;
                waited = p;
            }
            t.sleep(start - waited).await;
            for (attempt, gap) in retry_gaps.iter().enumerate() {
                r.kv.start_invocation();
                let opts = SendOptions { crash: if attempt == 0 { crash } else { None }, ..SendOptions::default() };
                // A second client sends the same request at the same moment; later, recovery resumes.
                let result = if simultaneous && attempt == 0 {
                    r.agent.send(RUN, INPUT, opts).await.map(|_| ())
                } else {
                    r.agent.resume(RUN, opts).await.map(|_| ())
                };
                match result {
                    Ok(()) => return,
                    Err(e) if e.code == ErrorCode::Crashed => {
                        r.belief.borrow_mut().lease = None;
                        ledger.borrow_mut().note(t.now_ms(), format!("r{i} crashed"));
                        return;
                    }
                    Err(e) => {
                        ledger.borrow_mut().note(t.now_ms(), format!("r{i}'s attempt failed: {}", e.message));
                        t.sleep(*gap).await;
                    }
                }
            }
        });
    }
    world.exec.run();
    assert_eq!(world.exec.live_tasks(), 0, "every replica finished or gave up (seed {seed})");

    // Finish the run from whatever is stored, replica by replica, after every lease expired.
    let oracle = oracle(&world.kv, &time);
    for i in 0..12 {
        let cp = oracle.load(RUN).now_or_never().expect("the oracle never waits").ok().flatten();
        if cp.as_ref().is_some_and(|c| c.status == RunStatus::Finished) {
            break;
        }
        world.exec.advance(world.lease.ttl_ms + world.lease.grace_ms + 65_000);
        let r = replicas[i % replicas.len()].clone();
        r.kv.start_invocation();
        let res = world.exec.block_on(async move {
            match cp {
                None => r.agent.send(RUN, INPUT, SendOptions::default()).await.map(|_| ()),
                Some(_) => r.agent.resume(RUN, SendOptions::default()).await.map(|_| ()),
            }
        });
        if let Err(e) = res {
            log(format!("finishing attempt {i} failed: {}", e.message));
        }
    }
    let final_cp = oracle.load(RUN).now_or_never().expect("the oracle never waits").ok().flatten();
    let lost_boundary = match &final_cp {
        Some(cp) => {
            cp.status != RunStatus::Finished || validate_transcript(&cp.messages).is_err() || cp.messages != reference
        }
        None => true,
    };
    let l = world.ledger.borrow();
    let replicas_starting: std::collections::BTreeSet<usize> =
        l.starts.values().flatten().map(|(r, _, _)| *r).collect();
    // A call's executions beyond its first are double executions when any of them started in an overlap or
    // after the result was recorded; otherwise they are re-runs after a crash or freeze.
    let extra = |flagged: bool| {
        l.starts.values().filter(|s| s.iter().any(|x| x.2) == flagged).map(|s| s.len() as u32 - 1).sum::<u32>()
    };
    let t = Trial {
        overlapping: l.overlapping,
        recorded: l.recorded,
        doubles: extra(true),
        rerun_calls: extra(false),
        handover: replicas_starting.len() > 1,
        lost_boundary,
        voided: world.kv.keys().iter().filter(|k| k.contains("/void/")).count() as u32,
    };
    (t, l.log.clone())
}

// --- Running a configuration -----------------------------------------------------------------------------

#[derive(Default, Debug)]
struct Totals {
    trials: u64,
    doubles: u64,
    overlapping: u64,
    recorded: u64,
    trials_with_double: u64,
    rerun_calls: u64,
    handovers: u64,
    lost: u64,
    double_seeds: Vec<u64>,
    voided: u64,
}

fn seed_base(config: &Config) -> u64 {
    // Distinct seeds per configuration, stable across runs.
    config.name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3)) % 1_000_000
        * 1_000
}

/// A configuration's trials ([`Totals`]), or with `STEADFAST_SEED` one trial replayed with its log (`Replay`).
enum Ran {
    Totals(Totals),
    Replay(Trial),
}

fn run(config: &Config, test_name: &str, default_trials: u64) -> Ran {
    let reference = reference_messages();
    if let Some(seed) = common::seeds::only_seed() {
        let (t, log) = trial(config, seed, &reference, true);
        println!("--- {}: seed {seed}\n{}", config.name, log.join("\n"));
        println!(
            "overlapping executions: {}, re-executions of recorded calls: {}, double executions: {}, calls run more than once: {}, lost boundary: {}",
            t.overlapping, t.recorded, t.doubles, t.rerun_calls, t.lost_boundary
        );
        return Ran::Replay(t);
    }
    let n = common::seeds::cases(default_trials);
    let base = seed_base(config);
    let mut s = Totals { trials: n, ..Totals::default() };
    for seed in base..base + n {
        let (t, _) = trial(config, seed, &reference, false);
        s.doubles += u64::from(t.doubles);
        s.overlapping += u64::from(t.overlapping);
        s.recorded += u64::from(t.recorded);
        s.trials_with_double += u64::from(t.doubles > 0);
        s.rerun_calls += u64::from(t.rerun_calls);
        s.handovers += u64::from(t.handover);
        s.voided += u64::from(t.voided);
        s.lost += u64::from(t.lost_boundary);
        if t.doubles > 0 && s.double_seeds.len() < 5 {
            s.double_seeds.push(seed);
        }
    }
    println!(
        "{}: racing trials: {}, double executions: {}, lost boundaries: {} (overlapping: {}, recorded re-run: {}, trials with a double: {} = {:.1}%; calls run again after a crash or freeze: {}; trials where two replicas ran tools: {}; lease writes given up: {})",
        config.name,
        s.trials,
        s.doubles,
        s.lost,
        s.overlapping,
        s.recorded,
        s.trials_with_double,
        100.0 * s.trials_with_double as f64 / s.trials as f64,
        s.rerun_calls,
        s.handovers,
        s.voided
    );
    if let Some(seed) = s.double_seeds.first() {
        println!(
            "  seeds with a double execution: {:?}; replay: {}",
            s.double_seeds,
            common::seeds::repro(*seed, test_name)
        );
    }
    Ran::Totals(s)
}

/// The most a configuration may show: trials with a double execution, and double executions, both per
/// 1,000 trials. Set from the current protocol's measurements (1,500 trials each, rates in the comments),
/// with room for seed-to-seed variation; lost boundaries are never allowed.
struct Ceiling {
    trials_with_double_per_mille: u64,
    doubles_per_1000_trials: u64,
}

/// Checks what ran against the configuration's ceiling: over many trials, the rates; a replayed trial, what
/// holds for every trial (no lost boundary; no double execution where the ceiling is none).
fn check(ran: Ran, c: Ceiling) {
    let s = match ran {
        Ran::Totals(s) => s,
        Ran::Replay(t) => {
            assert!(!t.lost_boundary, "the replayed trial lost a boundary");
            if c.trials_with_double_per_mille == 0 {
                assert_eq!(t.doubles, 0, "the replayed trial ran a tool twice where the ceiling is none");
            }
            return;
        }
    };
    check_totals(&s, c);
}

fn check_totals(s: &Totals, c: Ceiling) {
    assert_eq!(s.lost, 0, "lost boundaries: {s:?}");
    assert!(
        s.trials_with_double * 1_000 <= c.trials_with_double_per_mille * s.trials,
        "trials with a double execution above the ceiling of {}‰: {s:?}",
        c.trials_with_double_per_mille
    );
    assert!(
        s.doubles * 1_000 <= c.doubles_per_1000_trials * s.trials,
        "double executions above the ceiling of {} per 1,000 trials: {s:?}",
        c.doubles_per_1000_trials
    );
    assert!(s.handovers * 20 >= s.trials, "the scenarios exercise handovers: {s:?}");
}

// One location: D = 0 in every configuration (3,000 trials each measured). Before the settle window (a lease write
// acknowledged within it of its read, confirmed by a read-back that long after it), 4.7‰ of trials had a double:
// two acquirers that both read "no lease" and both read their own record back, one of them having written late.
#[test]
fn one_location_realistic() {
    check(
        run(&ONE_LOCATION, "one_location_realistic", 400),
        Ceiling { trials_with_double_per_mille: 0, doubles_per_1000_trials: 0 },
    );
}

// 0 measured (3,000 trials), but not a guarantee: a write that stays invisible in its own location for longer than
// the settle window defeats the read-back (the KV docs call same-location read-your-writes "usual").
#[test]
fn one_location_visibility_delay() {
    check(
        run(&ONE_LOCATION_VISIBILITY, "one_location_visibility_delay", 400),
        Ceiling { trials_with_double_per_mille: 0, doubles_per_1000_trials: 0 },
    );
}

#[test]
fn one_location_without_429() {
    check(
        run(&ONE_LOCATION_NO_429, "one_location_without_429", 400),
        Ceiling { trials_with_double_per_mille: 0, doubles_per_1000_trials: 0 },
    );
}

#[test]
fn one_location_with_kv_operations_slower_than_the_settle_window() {
    let ran = run(&ONE_LOCATION_SLOW_TAIL, "one_location_with_kv_operations_slower_than_the_settle_window", 400);
    if let Ran::Totals(s) = &ran {
        assert!(s.voided > 0, "slow lease writes were given up and marked void: {s:?}");
    }
    check(ran, Ceiling { trials_with_double_per_mille: 0, doubles_per_1000_trials: 0 });
}

// Across locations leases are best effort. Measured (2,000 trials): 27‰ of trials, 125 doubles per 1,000 trials
// (before the settle window: 70‰, 309) — all from a replica whose location had cached the run as missing.
#[test]
fn two_locations_default_lease() {
    check(
        run(&TWO_LOCATIONS, "two_locations_default_lease", 400),
        Ceiling { trials_with_double_per_mille: 40, doubles_per_1000_trials: 200 },
    );
}

// Measured (2,000 trials): 0 (before the settle window: 15‰ of trials, 59 doubles per 1,000).
#[test]
fn two_locations_no_read_before_the_run_exists() {
    check(
        run(&TWO_LOCATIONS_NO_EARLY_READ, "two_locations_no_read_before_the_run_exists", 400),
        Ceiling { trials_with_double_per_mille: 0, doubles_per_1000_trials: 0 },
    );
}

// Measured (2,000 trials): 32‰ of trials, 128 doubles per 1,000 trials (before: 69‰, 287).
#[test]
fn two_locations_long_lease() {
    check(
        run(&TWO_LOCATIONS_LONG_LEASE, "two_locations_long_lease", 400),
        Ceiling { trials_with_double_per_mille: 45, doubles_per_1000_trials: 200 },
    );
}

/// The count itself: when leases exclude nothing (each replica but the first on a KV of its own), replicas that
/// start together run the run together, and the count sees it.
#[test]
fn the_count_sees_overlapping_owners_when_leases_exclude_nothing() {
    let config = Config { name: "harness check, leases that exclude nothing", split_brain: true, ..ONE_LOCATION };
    match run(&config, "the_count_sees_overlapping_owners_when_leases_exclude_nothing", 100) {
        Ran::Totals(s) => {
            assert_eq!(s.lost, 0, "lost boundaries: {s:?}");
            assert!(s.trials_with_double * 10 >= s.trials, "overlaps are counted: {s:?}");
        }
        Ran::Replay(t) => assert!(!t.lost_boundary, "the replayed trial lost a boundary"),
    }
}
