//! The journal store on Workers-KV semantics: the conformance suite on every backend and fault wrapper,
//! corruption, dropped writes, zero 429s on the hot path, and the operation budget against the seed's layout.

mod common;

use common::seed_layout::{transcript_bytes, SeedLayoutStore};
use common::*;
use serde_json::json;
use std::rc::Rc;
use steadfast::core::checkpoint::RunStatus;
use steadfast::core::transcript::validate_transcript;
use steadfast::runtime::{
    AgentOptions, Clock, FnTool, ManualClock, ManualSleep, MockModel, MockTurn, SendOptions, Tool, ToolOutput,
};
use steadfast::store::conformance::{self, Capabilities};
use steadfast::store::faulty::{FaultOptions, FaultyKv};
use steadfast::store::kv::KvBackend;
use steadfast::store::sim::{SimKv, SimOptions};
use steadfast::store::{JournalOptions, JournalStore, MemoryKv, RunStore};
use steadfast::ErrorCode;

fn journal<K: KvBackend>(kv: K, clock: &ManualClock) -> JournalStore<K> {
    JournalStore::new(kv, Rc::new(clock.clone()), Rc::new(ManualSleep::new(clock.clone())), JournalOptions::default())
}

fn sim(clock: &ManualClock, locations: usize, propagation_ms: u64) -> SimKv {
    SimKv::new(Rc::new(clock.clone()), SimOptions { locations, propagation_ms, ..SimOptions::default() })
}

fn retryable_faults(seed: u64) -> FaultOptions {
    FaultOptions { rate_limit: 0.05, transient: 0.05, drop_write: 0.0, ack_lost: 0.05, corrupt_read: 0.0, seed }
}

/// Two handles ("processes") on the same data; for SimKv each in its own location.
fn pair<K: KvBackend>(a: K, b: K, clock: &ManualClock) -> (JournalStore<K>, JournalStore<K>) {
    (journal(a, clock), journal(b, clock))
}

#[test]
fn conformance_on_memory_kv() {
    let caps = Capabilities { strict_fencing: false };
    block_on(conformance::run_all(
        &|c| {
            let kv = MemoryKv::new();
            pair(kv.clone(), kv, c)
        },
        &caps,
    ));
}

#[test]
fn conformance_on_sim_kv_one_location() {
    let caps = Capabilities { strict_fencing: false };
    block_on(conformance::run_all(
        &|c| {
            let kv = sim(c, 1, 60_000);
            pair(kv.clone(), kv, c)
        },
        &caps,
    ));
}

#[test]
fn conformance_on_sim_kv_two_locations() {
    // Two processes in two locations; propagation (900 ms) shorter than the suite's pauses (≥ 1 s): the
    // honest flags for KV (no strict fencing) hold.
    let caps = Capabilities { strict_fencing: false };
    block_on(conformance::run_all(
        &|c| {
            let kv = sim(c, 2, 900);
            pair(kv.at(0), kv.at(1), c)
        },
        &caps,
    ));
}

#[test]
fn conformance_with_retryable_faults_on_every_backend() {
    let caps = Capabilities { strict_fencing: false };
    block_on(conformance::run_all(
        &|c| {
            let kv = MemoryKv::new();
            pair(FaultyKv::new(kv.clone(), retryable_faults(1)), FaultyKv::new(kv, retryable_faults(11)), c)
        },
        &caps,
    ));
    block_on(conformance::run_all(
        &|c| {
            let kv = sim(c, 1, 60_000);
            pair(FaultyKv::new(kv.clone(), retryable_faults(2)), FaultyKv::new(kv, retryable_faults(12)), c)
        },
        &caps,
    ));
    block_on(conformance::run_all(
        &|c| {
            let kv = sim(c, 2, 900);
            pair(FaultyKv::new(kv.at(0), retryable_faults(3)), FaultyKv::new(kv.at(1), retryable_faults(13)), c)
        },
        &caps,
    ));
    // The faults were real.
    let clock = ManualClock::new(0);
    let store = journal(FaultyKv::new(MemoryKv::new(), retryable_faults(1)), &clock);
    block_on(conformance::many_commits_stay_foldable(&store, &clock, 60));
    let injected = store.kv().injected();
    assert!(injected.rate_limited + injected.transient + injected.acks_lost > 0, "{injected:?}");
}

/// A journal entry that cannot be decoded: load fails with CHECKPOINT_CORRUPT, pending() lists the run as
/// corrupt (not retryable), delete discards it, nothing else is lost.
#[test]
fn corrupt_entries_are_reported_listed_and_discardable() {
    let env_clock = ManualClock::new(1_700_000_000_000);
    let kv = MemoryKv::new();
    let store: Rc<dyn RunStore> = Rc::new(journal(kv.clone(), &env_clock));
    let env = Env::with_store(store.clone(), env_clock);
    let counters = Counters::default();
    let agent = env.agent(
        MockModel::new(vec![MockTurn::tools([("a", json!({}))]), MockTurn::error(400)]),
        vec![counting_tool("a", &counters)],
    );
    block_on(agent.send("bad", "go", SendOptions::default())).unwrap_err();
    let other = env.agent(MockModel::new(vec![MockTurn::error(400)]), vec![]);
    block_on(other.send("good", "go", SendOptions::default())).unwrap_err();
    let entry = kv.keys().into_iter().find(|k| k.starts_with("run/bad/j/") && k.ends_with("0000000002")).unwrap();
    kv.set_raw(&entry, "{\"seq\": 2, \"at\": ");
    let err = block_on(agent.load("bad")).unwrap_err();
    assert_eq!(err.code, ErrorCode::CheckpointCorrupt);
    assert!(!err.retryable);
    let mut pending = block_on(agent.pending()).unwrap();
    pending.sort_by(|a, b| a.run_id.cmp(&b.run_id));
    assert_eq!(pending.len(), 2);
    assert_eq!(pending[0].run_id, "bad");
    assert_eq!(pending[0].last_error.as_ref().unwrap().code, ErrorCode::CheckpointCorrupt);
    assert!(!pending[0].last_error.as_ref().unwrap().retryable);
    assert_eq!(pending[1].last_error.as_ref().unwrap().code, ErrorCode::ProviderBadRequest, "the other run is intact");
    block_on(agent.delete("bad")).unwrap();
    assert!(kv.keys().iter().all(|k| !k.contains("/bad/") && !k.ends_with("/bad")), "{:?}", kv.keys());
    assert_eq!(block_on(agent.pending()).unwrap().len(), 1);
    assert!(block_on(agent.load("good")).unwrap().is_some());
}

/// A lost write (acknowledged, never stored) never makes a load return a state that was not committed:
/// the next load folds the entries before the gap, or reports the gap.
#[test]
fn dropped_writes_never_produce_a_wrong_state() {
    let clock = ManualClock::new(1_700_000_000_000);
    let kv = FaultyKv::new(MemoryKv::new(), FaultOptions::default());
    let store = Rc::new(journal(kv, &clock));
    let env = Env::with_store(store.clone(), clock.clone());
    let counters = Counters::default();
    let script =
        || vec![MockTurn::tools([("a", json!({}))]), MockTurn::tools([("a", json!({}))]), MockTurn::text("done")];
    let agent = env.agent(MockModel::by_turn(script()), vec![counting_tool("a", &counters)]);
    // Drop every write after the run started.
    let crash = SendOptions {
        crash: Some(steadfast::runtime::CrashPoint { after_effects: 2, finish_in_flight: false }),
        ..Default::default()
    };
    block_on(agent.send("r", "go", crash)).unwrap_err();
    let before = block_on(agent.load("r")).unwrap().unwrap();
    store.kv().set_options(FaultOptions { drop_write: 1.0, ..FaultOptions::default() });
    env.past_leases();
    let agent2 = env.agent(MockModel::by_turn(script()), vec![counting_tool("a", &counters)]);
    let _ = block_on(agent2.resume("r", SendOptions::default()));
    store.kv().set_options(FaultOptions::default());
    match block_on(agent2.load("r")) {
        Ok(Some(cp)) => assert_eq!(cp.messages, before.messages, "only what was really stored"),
        Ok(None) => panic!("the run vanished"),
        Err(e) => assert!(matches!(e.code, ErrorCode::CheckpointCorrupt | ErrorCode::StoreUnavailable), "{e}"),
    }
}

fn fast_tools(counters: &Counters) -> Vec<Rc<dyn Tool>> {
    let payload = "x".repeat(480);
    let mk = |name: &'static str| -> Rc<dyn Tool> {
        let c = counters.clone();
        let payload = payload.clone();
        Rc::new(FnTool::new(name, name, json!({"type": "object"}), move |args, ctx| {
            let c = c.clone();
            let payload = payload.clone();
            async move {
                c.hit(&format!("call:{}", ctx.tool_call_id));
                Ok(ToolOutput::text(format!("{name} {} {payload}", args["i"])))
            }
        }))
    };
    vec![mk("search"), mk("read")]
}

fn long_script(steps: usize) -> Vec<MockTurn> {
    let mut s: Vec<MockTurn> = (0..steps - 1)
        .map(|i| {
            MockTurn::tools([("search", json!({"i": i})), ("read", json!({"i": i}))])
                .with_text(format!("step {i}: {}", "t".repeat(180)))
        })
        .collect();
    s.push(MockTurn::text("finished"));
    s
}

/// Tools that answer in 1 ms: the hot path never writes one key twice within a second, so SimKv sees no 429.
#[test]
fn fast_tools_see_zero_rate_limited_writes() {
    let clock = ManualClock::new(1_700_000_000_000);
    let kv = sim(&clock, 1, 60_000);
    let store: Rc<dyn RunStore> = Rc::new(journal(kv.clone(), &clock));
    let env = Env::with_store(store, clock.clone());
    let counters = Counters::default();
    let options = AgentOptions { max_steps: 30, ..AgentOptions::default() };
    let agent = env.agent_with(MockModel::new(long_script(30)), fast_tools(&counters), options, "");
    // Every tool takes 1 ms of simulated time.
    let done = block_on(agent.send("fast", "go", SendOptions::default())).unwrap();
    assert_eq!(done.status, RunStatus::Finished);
    let counts = kv.counts();
    assert_eq!(counts.rate_limited, 0, "{counts:?}");
    assert!(clock.now_ms() - 1_700_000_000_000 < 5_000, "no backoff slept");
}

/// The operation budget of a 100-step run with 2 tool calls per step: ours against the seed's layout.
#[test]
fn operation_budget_of_a_100_step_run() {
    let steps = 100;
    let options = AgentOptions { max_steps: steps as u32 + 1, ..AgentOptions::default() };

    let clock = ManualClock::new(1_700_000_000_000);
    let kv = sim(&clock, 1, 60_000);
    let store = Rc::new(journal(kv.clone(), &clock));
    let env = Env::with_store(store.clone(), clock.clone());
    let counters = Counters::default();
    let agent =
        env.agent_with(MockModel::new(long_script(steps)), fast_tools(&counters), options.clone(), "Be thorough.");
    let done = block_on(agent.send("budget", "research it", SendOptions::default())).unwrap();
    assert_eq!(done.status, RunStatus::Finished);
    assert!(validate_transcript(&done.messages).is_ok());
    let c = store.counters();
    // The run reports its own KV operations (M25): every write the store made for it.
    assert_eq!(done.stats.store_writes, c.writes);
    assert_eq!(done.stats.store_bytes, c.bytes_written);
    let kvc = kv.counts();
    let transcript = transcript_bytes(&done.messages);
    let boundaries = c.commits;
    let hot_writes = c.commit_writes as f64 / boundaries as f64;
    let ratio = kvc.bytes_written as f64 / transcript as f64;
    let reads_per_boundary = kvc.reads() as f64 / boundaries as f64;

    let bclock = ManualClock::new(1_700_000_000_000);
    let bkv = sim(&bclock, 1, 60_000);
    let base = Rc::new(SeedLayoutStore::new(bkv.clone(), Rc::new(ManualSleep::new(bclock.clone()))));
    let benv = Env::with_store(base.clone(), bclock.clone());
    let bagent =
        benv.agent_with(MockModel::new(long_script(steps)), fast_tools(&Counters::default()), options, "Be thorough.");
    let bdone = block_on(bagent.send("budget", "research it", SendOptions::default())).unwrap();
    assert_eq!(bdone.messages, done.messages, "same run on both layouts");
    let bkvc = bkv.counts();
    let b_boundaries = base.commits.get();
    let b_writes = (base.writes.get() - base.rate_limited.get()) as f64 / b_boundaries as f64;
    let b_ratio = bkvc.bytes_written as f64 / transcript as f64;
    let b_reads = bkvc.reads() as f64 / b_boundaries as f64;

    println!(
        "operation budget, {steps}-step run, 2 tool calls/step, transcript {transcript} bytes, {boundaries} boundaries"
    );
    println!("| layout | KV writes/boundary (hot path) | KV writes/boundary (all) | KV reads/boundary (all) | bytes written | bytes/transcript | 429s | simulated time |");
    println!(
        "| journal (ours) | {hot_writes:.2} | {:.3} | {reads_per_boundary:.3} | {} | {ratio:.2} | {} | {} ms |",
        kvc.writes() as f64 / boundaries as f64,
        kvc.bytes_written,
        kvc.rate_limited,
        clock.now_ms() - 1_700_000_000_000
    );
    println!(
        "| seed rewrite | {b_writes:.2} | {:.3} | {b_reads:.3} | {} | {b_ratio:.2} | {} | {} ms |",
        bkvc.writes() as f64 / b_boundaries as f64,
        bkvc.bytes_written,
        bkvc.rate_limited,
        bclock.now_ms() - 1_700_000_000_000
    );
    // Deterministic counts: asserted.
    assert!(hot_writes <= 1.0, "writes per boundary {hot_writes}");
    assert!(ratio <= 2.0, "bytes ratio {ratio}");
    assert_eq!(kvc.rate_limited, 0);
    assert!(b_ratio > 10.0 * ratio, "the seed layout rewrites O(n²) bytes: {b_ratio}");
    assert!(bkvc.rate_limited > 0, "the seed layout hits the 1 write/s limit");
    // Every boundary after the first is a single entry write; total writes include the lease, index and marker.
    assert!(kvc.writes() <= boundaries + 6, "{kvc:?}");
}
