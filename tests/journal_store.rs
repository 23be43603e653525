//! The journal store on Workers-KV semantics: the conformance suite on every backend and fault wrapper,
//! corruption, dropped writes, zero 429s on the hot path, and the operation budget against the seed's layout.

mod common;

use common::seed_layout::{transcript_bytes, SeedLayoutStore};
use common::seeds::for_seeds;
use common::*;
use serde_json::json;
use std::cell::Cell;
use std::rc::Rc;
use steadfast::core::checkpoint::{Checkpoint, EntryBody, JournalEntry, RunStatus};
use steadfast::core::error::ErrorInfo;
use steadfast::core::retry::RetryPolicy;
use steadfast::core::sweep::SweepOptions;
use steadfast::core::transcript::{validate_transcript, Message};
use steadfast::runtime::{
    AgentOptions, Clock, CrashBudget, Delivery, FnTool, ManualClock, ManualSleep, MockModel, MockTurn, NoListener,
    SendOptions, Tool, ToolError, ToolOutput,
};
use steadfast::store::conformance::{self, Capabilities};
use steadfast::store::faulty::{FaultOptions, FaultyKv};
use steadfast::store::journal::MAX_PART_BYTES;
use steadfast::store::kv::{KvBackend, ListPage, PutOptions};
use steadfast::store::sim::{SimKv, SimOptions};
use steadfast::store::{JournalOptions, JournalStore, LeaseOptions, MemoryKv, RunStore};
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

/// Entries and journals of any size, on every KV backend (MemoryKv, SimKv in one location and across two, and
/// retryable faults): an entry of 30 MiB is stored as values of at most a part and reads back (a fork's first
/// snapshot of it too), a journal over one 25 MB bulk read loads, has history and continues; approval records
/// and state documents over 25 MiB are refused. Every KV value stays within KV's 25 MiB and every bulk read
/// within its 25 MB (the simulator refuses anything else).
#[test]
fn entries_and_journals_of_any_size_are_recorded_and_read_on_every_backend() {
    fn check<K: KvBackend>(a: &JournalStore<K>, b: &JournalStore<K>, clock: &ManualClock) {
        block_on(conformance::large_entry_commits_and_loads_back(a, b, clock));
        block_on(conformance::journal_over_a_bulk_read_loads_and_continues(a, b, clock));
        block_on(conformance::records_over_the_value_limit_are_refused_and_write_nothing(a));
    }
    let clock = ManualClock::new(1_700_000_000_000);
    let kv = MemoryKv::new();
    let (a, b) = pair(kv.clone(), kv.clone(), &clock);
    check(&a, &b, &clock);
    let largest = kv.keys().iter().map(|k| kv.raw(k).unwrap().len()).max().unwrap();
    assert!(largest <= MAX_PART_BYTES, "{largest}");
    assert!(kv.keys().iter().any(|k| k.ends_with("/0000000002/001")), "the 30 MiB entry was split: {:?}", kv.keys());
    let c = kv.counts();
    assert!(c.bulk_refused > 0, "some bulk reads were over 25 MB and read again in smaller ones: {c:?}");
    drop((a, b, kv));

    let clock = ManualClock::new(1_700_000_000_000);
    let kv = sim(&clock, 2, 900);
    let (a, b) = pair(kv.at(0), kv.at(1), &clock);
    check(&a, &b, &clock);
    drop((a, b, kv));

    let clock = ManualClock::new(1_700_000_000_000);
    let kv = MemoryKv::new();
    let (a, b) = pair(FaultyKv::new(kv.clone(), retryable_faults(5)), FaultyKv::new(kv, retryable_faults(15)), &clock);
    check(&a, &b, &clock);
    let injected = a.kv().injected();
    assert!(injected.rate_limited + injected.transient + injected.acks_lost > 0, "{injected:?}");
}

/// An entry split over several values is written once, whole or not at all as far as readers go: its parts
/// first, the header naming them last. Parts without a header (the writer stopped part way) are never read;
/// a part missing while its header exists (a lost write) is corrupt once KV's listing confirms it; a part that
/// is not the size its header says is corrupt; a takeover reads the split entry, and a finished run's release
/// prunes its parts with it.
#[test]
fn a_split_entry_is_read_whole_or_reported() {
    let clock = ManualClock::new(1_700_000_000_000);
    let kv = MemoryKv::new();
    let store = journal(kv.clone(), &clock);
    let lease_s = block_on(conformance::acquired(&store, "s", "o", clock.now_ms(), &LEASE, "acquire"));
    let (e1, cp1) = conformance::snapshot_entry("s", "x", clock.now_ms());
    block_on(store.commit(&lease_s, &e1, &cp1)).unwrap();
    let big = Message::user("é".repeat(MAX_PART_BYTES / 2 + 1_000));
    let (e2, cp2) = conformance::delta_entry(&cp1, big, RunStatus::InProgress, 2);
    block_on(store.commit(&lease_s, &e2, &cp2)).unwrap();
    drop(e2);
    let entry2 = kv.keys().into_iter().find(|k| k.ends_with("/0000000002")).unwrap();
    let header = kv.raw(&entry2).unwrap();
    assert!(header.starts_with("{\"split\":{\"seq\":2,") && header.len() < 200, "{header}");
    let parts: Vec<String> = kv.keys().into_iter().filter(|k| k.starts_with(&format!("{entry2}/"))).collect();
    assert_eq!(parts.len(), 2, "{parts:?}");
    assert!(parts.iter().all(|p| kv.raw(p).unwrap().len() <= MAX_PART_BYTES));
    let other = || journal(kv.clone(), &clock);
    assert!(block_on(other().load("s")).unwrap() == Some(cp2.clone()));

    // A part that is not the size its header says.
    let part0 = kv.raw(&parts[0]).unwrap();
    kv.set_raw(&parts[0], &part0[..part0.len() - 2]);
    let err = block_on(other().load("s")).unwrap_err();
    assert_eq!(err.code, ErrorCode::CheckpointCorrupt, "{err}");
    assert!(err.message.contains("part 0"), "{err}");
    kv.set_raw(&parts[0], &part0);
    drop(part0);
    // A part missing while its header exists: a lost write (the listing shows the header, not the part).
    let part1 = kv.raw(&parts[1]).unwrap();
    block_on(kv.delete(&parts[1])).unwrap();
    let err = block_on(other().load("s")).unwrap_err();
    assert_eq!(err.code, ErrorCode::CheckpointCorrupt, "{err}");
    assert!(err.message.contains("part 1 of journal entry 2"), "{err}");
    block_on(kv.put(&parts[1], &part1, PutOptions::default())).unwrap();
    drop(part1);
    assert!(block_on(other().load("s")).unwrap() == Some(cp2.clone()), "whole again");

    // Another run's writer writes entry 3's first part and stops (the process died part way): no header, so
    // readers see the run as it was before entry 3.
    let p_store = journal(kv.clone(), &clock);
    let lease_p = block_on(conformance::acquired(&p_store, "p", "o", clock.now_ms(), &LEASE, "acquire"));
    let (e1, cp1) = conformance::snapshot_entry("p", "x", clock.now_ms());
    block_on(p_store.commit(&lease_p, &e1, &cp1)).unwrap();
    let (e2, cp2p) = conformance::delta_entry(&cp1, Message::user("y"), RunStatus::InProgress, 2);
    block_on(p_store.commit(&lease_p, &e2, &cp2p)).unwrap();
    let entry3 = kv.keys().into_iter().find(|k| k.starts_with("run/p/j/") && k.ends_with("/0000000002")).unwrap();
    let entry3 = entry3.replace("/0000000002", "/0000000003");
    block_on(kv.put(&format!("{entry3}/000"), "{\"seq\":3,\"at\":3,\"body\":{\"t", PutOptions::default())).unwrap();
    assert!(block_on(other().load("p")).unwrap() == Some(cp2p), "parts without a header are not an entry");

    // A takeover reads the split entry; the finished run's release prunes entry 2 with its parts.
    let opts = JournalOptions { history_limit: 1, ..JournalOptions::default() };
    let next = JournalStore::new(kv.clone(), Rc::new(clock.clone()), Rc::new(ManualSleep::new(clock.clone())), opts);
    clock.set(lease_s.expires_at + LEASE.grace_ms);
    let l2 = block_on(conformance::acquired(&next, "s", "o2", clock.now_ms(), &LEASE, "take over"));
    assert!(block_on(next.load("s")).unwrap() == Some(cp2.clone()), "the takeover reads the split entry");
    let (e3, mut done) = conformance::delta_entry(&cp2, Message::assistant("done", vec![]), RunStatus::Finished, 9);
    drop(cp2);
    done.seq = e3.seq;
    let e3 = JournalEntry { body: EntryBody::Snapshot { state: Box::new(done.clone()) }, ..e3 };
    block_on(next.commit(&l2, &e3, &done)).unwrap();
    block_on(next.release_lease(&l2)).unwrap();
    assert!(kv.keys().iter().all(|k| !k.starts_with(&entry2)), "entry 2 and its parts pruned: {:?}", kv.keys());
    assert!(block_on(other().load("s")).unwrap() == Some(done));
}

/// An entry an earlier version stored whole, over one bulk read (25 MB) but within KV's 25 MiB value limit, is
/// read with a single `get` once KV refuses even a bulk get of it alone; the run loads exactly.
#[test]
fn an_entry_stored_whole_over_25_mb_is_read_with_a_single_get() {
    let clock = ManualClock::new(1_700_000_000_000);
    let kv = MemoryKv::new();
    let store = journal(kv.clone(), &clock);
    let lease = block_on(conformance::acquired(&store, "old", "o", clock.now_ms(), &LEASE, "acquire"));
    let (e1, cp1) = conformance::snapshot_entry("old", "x", clock.now_ms());
    block_on(store.commit(&lease, &e1, &cp1)).unwrap();
    let (e2, cp2) = conformance::delta_entry(&cp1, Message::user("o".repeat(25_500_000)), RunStatus::InProgress, 2);
    let raw = serde_json::to_string(&e2).unwrap();
    assert!(raw.len() > 25_000_000 && raw.len() <= 25 * 1024 * 1024);
    let key = kv.keys().into_iter().find(|k| k.ends_with("/0000000001")).unwrap().replace("/0000000001", "/0000000002");
    block_on(kv.put(&key, &raw, PutOptions::default())).unwrap();
    drop((e2, raw));
    let before = kv.counts();
    assert!(block_on(journal(kv.clone(), &clock).load("old")).unwrap() == Some(cp2), "loads exactly");
    let c = kv.counts();
    assert!(c.bulk_refused > before.bulk_refused, "{c:?}");
    assert_eq!(c.gets - before.gets, 2, "the lease, then the entry alone: {c:?}");
}

/// A periodic snapshot is an optimisation: when the state it would hold does not fit one value (it would take
/// several writes where the delta takes one), the entry is written as the delta it is, and the run loads (and
/// goes on) exactly.
#[test]
fn a_snapshot_over_the_value_limit_falls_back_to_the_delta() {
    let clock = ManualClock::new(1_700_000_000_000);
    let kv = MemoryKv::new();
    let opts = JournalOptions { snapshot_every: 1, snapshot_growth: 0, ..JournalOptions::default() };
    let store = JournalStore::new(kv.clone(), Rc::new(clock.clone()), Rc::new(ManualSleep::new(clock.clone())), opts);
    let lease = block_on(conformance::acquired(&store, "s", "o", clock.now_ms(), &LEASE, "acquire"));
    let (e1, cp1) = conformance::snapshot_entry("s", &"a".repeat(MAX_PART_BYTES - 3 * 1024 * 1024), clock.now_ms());
    block_on(store.commit(&lease, &e1, &cp1)).unwrap();
    let mut cp = cp1;
    for i in 0..2 {
        clock.advance(1_000);
        let (e, next) =
            conformance::delta_entry(&cp, Message::user("b".repeat(3 * 1024 * 1024)), RunStatus::InProgress, i);
        block_on(store.commit(&lease, &e, &next)).expect("a delta when the snapshot would not fit");
        cp = next;
    }
    let sizes: Vec<usize> = kv.keys().iter().filter(|k| k.contains("/j/")).map(|k| kv.raw(k).unwrap().len()).collect();
    assert_eq!(sizes.len(), 3);
    assert!(sizes.iter().all(|n| *n <= MAX_PART_BYTES), "{sizes:?}");
    assert!(sizes[1..].iter().all(|n| *n < 4 * 1024 * 1024), "snapshots due but over one value: deltas {sizes:?}");
    assert_eq!(block_on(store.load("s")).unwrap().unwrap(), cp);
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
    // Everything of the run is gone but its lease tombstone (it expires on its own).
    let left: Vec<String> = kv.keys().into_iter().filter(|k| k.contains("/bad/") || k.ends_with("/bad")).collect();
    assert_eq!(left, vec!["run/bad/lease".to_string()], "{:?}", kv.keys());
    assert!(kv.raw("run/bad/lease").unwrap().contains("\"deleted\":true"));
    assert!(block_on(agent.load("bad")).unwrap().is_none());
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

/// A KV whose writes to the pending index fail (transiently) while `fail_index` is set: a secondary write that
/// fails after the journal entry is durable.
#[derive(Clone)]
struct IndexFailingKv {
    inner: MemoryKv,
    fail_index: Rc<Cell<bool>>,
    refused: Rc<Cell<u32>>,
}

impl IndexFailingKv {
    fn new(inner: MemoryKv) -> IndexFailingKv {
        IndexFailingKv { inner, fail_index: Rc::new(Cell::new(false)), refused: Rc::new(Cell::new(0)) }
    }
    fn refuse(&self, key: &str) -> steadfast::Result<()> {
        if self.fail_index.get() && key.contains("idx/pending/") {
            self.refused.set(self.refused.get() + 1);
            return Err(steadfast::Error::new(
                ErrorCode::StoreUnavailable,
                "KV PUT failed: 503 (injected, index only)",
            ));
        }
        Ok(())
    }
}

#[async_trait::async_trait(?Send)]
impl KvBackend for IndexFailingKv {
    async fn get(&self, key: &str) -> steadfast::Result<Option<String>> {
        self.inner.get(key).await
    }
    async fn get_many(&self, keys: &[String]) -> steadfast::Result<Vec<Option<String>>> {
        self.inner.get_many(keys).await
    }
    async fn put(&self, key: &str, value: &str, opts: PutOptions) -> steadfast::Result<()> {
        self.refuse(key)?;
        self.inner.put(key, value, opts).await
    }
    async fn delete(&self, key: &str) -> steadfast::Result<()> {
        self.refuse(key)?;
        self.inner.delete(key).await
    }
    async fn list(&self, prefix: &str, cursor: Option<&str>, limit: usize) -> steadfast::Result<ListPage> {
        self.inner.list(prefix, cursor, limit).await
    }
}

/// The delta entry from `prev` to `next` (any change of header or messages), and `next` as committed.
fn step(prev: &Checkpoint, mut next: Checkpoint, at: u64) -> (JournalEntry, Checkpoint) {
    next.seq = prev.seq + 1;
    next.saved_at = at;
    let entry = JournalEntry {
        seq: next.seq,
        at,
        body: EntryBody::Delta {
            from: prev.messages.len(),
            messages: next.messages[prev.messages.len()..].to_vec(),
            head: next.header().diff(&prev.header()),
            business_state: None,
            fingerprint: None,
            ext: None,
        },
    };
    let mut folded = prev.clone();
    folded.apply(&entry).expect("the delta continues");
    assert_eq!(folded, next);
    (entry, next)
}

fn failed_attempt(prev: &Checkpoint, attempts: u32, message: &str) -> Checkpoint {
    let mut next = prev.clone();
    next.attempts = attempts;
    next.last_error =
        Some(ErrorInfo { code: ErrorCode::ProviderUnavailable, message: message.into(), retryable: true });
    next
}

const LEASE: LeaseOptions = LeaseOptions { ttl_ms: 30_000, renew_every_ms: 10_000, grace_ms: 30_000 };

/// A last error of wide characters (CJK: 3 bytes, emoji: 4) of any length up to 3,000 characters: every
/// commit succeeds and the pending index carries each attempt (KV's metadata limit counts bytes, not
/// characters; the index used to overflow it and the run was resumed for ever without counting).
#[test]
fn wide_last_errors_of_any_length_commit_and_reach_the_index() {
    fn check<K: KvBackend>(store: &JournalStore<K>, clock: &ManualClock, lengths: &[usize]) {
        let lease = block_on(conformance::acquired(store, "wide", "o", clock.now_ms(), &LEASE, "acquire"));
        let (e1, mut cp) = conformance::snapshot_entry("wide", "go", clock.now_ms());
        block_on(store.commit(&lease, &e1, &cp)).unwrap();
        for (i, len) in lengths.iter().enumerate() {
            clock.advance(1_000);
            let wide = if i % 2 == 0 { "😀" } else { "中" };
            let message = format!("{}{}", wide.repeat(*len), "\u{1}".repeat(i % 3));
            let attempts = i as u32 + 1;
            let (entry, next) = step(&cp, failed_attempt(&cp, attempts, &message), clock.now_ms());
            block_on(store.commit(&lease, &entry, &next)).unwrap_or_else(|e| panic!("length {len}: {e}"));
            cp = next;
            let listed = block_on(store.pending()).unwrap();
            assert_eq!(listed.len(), 1);
            assert_eq!(listed[0].attempts, attempts, "length {len}: the index carries the attempt");
            let err = listed[0].last_error.as_ref().unwrap();
            assert_eq!(err.code, ErrorCode::ProviderUnavailable);
            let head = err.message.trim_end_matches("… [truncated]");
            assert!(message.starts_with(head), "length {len}: a prefix of the message");
        }
        assert_eq!(block_on(store.load("wide")).unwrap().unwrap(), cp);
    }
    let every: Vec<usize> = (0..=3_000).collect();
    let clock = ManualClock::new(1_700_000_000_000);
    check(&journal(MemoryKv::new(), &clock), &clock, &every);
    let clock = ManualClock::new(1_700_000_000_000);
    let sparse: Vec<usize> = (0..=3_000).step_by(37).collect();
    check(&journal(sim(&clock, 1, 60_000), &clock), &clock, &sparse);
}

/// An index write that fails after the journal entry is durable: the commit is reported as done (the entry is
/// the record), the index is repaired at the next boundary, or at release, and every attempt reaches
/// `pending()`.
#[test]
fn a_failed_index_write_never_fails_a_durable_commit_and_is_repaired() {
    let clock = ManualClock::new(1_700_000_000_000);
    let kv = IndexFailingKv::new(MemoryKv::new());
    let store = journal(kv.clone(), &clock);
    let lease = block_on(conformance::acquired(&store, "r", "o", clock.now_ms(), &LEASE, "acquire"));
    let (e1, mut cp) = conformance::snapshot_entry("r", "go", clock.now_ms());
    kv.fail_index.set(true);
    block_on(store.commit(&lease, &e1, &cp)).expect("the entry is durable: committed");
    assert!(kv.refused.get() > 0, "the index write was refused");
    assert_eq!(block_on(store.load("r")).unwrap().unwrap(), cp);
    assert!(block_on(store.pending()).unwrap().is_empty(), "not indexed yet");
    // Failed attempts while the index keeps failing: each commit succeeds.
    for attempts in 1..=3 {
        clock.advance(1_000);
        let (e, next) = step(&cp, failed_attempt(&cp, attempts, "provider down"), clock.now_ms());
        block_on(store.commit(&lease, &e, &next)).expect("committed");
        cp = next;
    }
    // The index recovers: the next boundary repairs it, with the attempts so far.
    kv.fail_index.set(false);
    clock.advance(1_000);
    let (e, next) = step(&cp, failed_attempt(&cp, 4, "provider down"), clock.now_ms());
    block_on(store.commit(&lease, &e, &next)).unwrap();
    cp = next;
    let listed = block_on(store.pending()).unwrap();
    assert_eq!((listed.len(), listed[0].attempts), (1, 4));
    // Fails again for the last boundary, then release repairs it.
    kv.fail_index.set(true);
    clock.advance(1_000);
    let (e, next) = step(&cp, failed_attempt(&cp, 5, "provider down"), clock.now_ms());
    block_on(store.commit(&lease, &e, &next)).unwrap();
    cp = next;
    assert_eq!(block_on(store.pending()).unwrap()[0].attempts, 4, "stale while the index fails");
    kv.fail_index.set(false);
    block_on(store.release_lease(&lease)).unwrap();
    assert_eq!(block_on(store.pending()).unwrap()[0].attempts, 5, "repaired at release");
    // A finished run whose index delete fails is still dropped from the listing (and cleaned up).
    let lease = block_on(conformance::acquired(&store, "r", "o2", clock.now_ms(), &LEASE, "acquire"));
    clock.advance(2_000);
    kv.fail_index.set(true);
    let mut done = cp.clone();
    done.status = RunStatus::Finished;
    done.attempts = 0;
    done.last_error = None;
    let (e, done) = step(&cp, done, clock.now_ms());
    block_on(store.commit(&lease, &e, &done)).expect("finished, committed");
    block_on(store.release_lease(&lease)).unwrap();
    kv.fail_index.set(false);
    clock.advance(2_000);
    assert!(block_on(store.pending()).unwrap().is_empty());
    assert!(kv.inner.raw("idx/pending/r").is_none(), "the stale index entry was removed");
    assert_eq!(block_on(store.load("r")).unwrap().unwrap(), done);
}

/// The wedge, end to end: a tool dies with a long message of emoji (what a provider or a tool may well say);
/// every failed attempt is counted in the index, so the sweep backs off and quarantines the run after the
/// 10th, instead of resuming it every tick for ever.
#[test]
fn a_wide_error_message_still_counts_attempts_up_to_quarantine() {
    let clock = ManualClock::new(1_700_000_000_000);
    let store: Rc<dyn RunStore> = Rc::new(journal(sim(&clock, 1, 60_000), &clock));
    let env = Env::with_store(store, clock.clone());
    let calls = Rc::new(Cell::new(0u32));
    let agent = {
        let calls = calls.clone();
        let boom: Rc<dyn Tool> = Rc::new(FnTool::new("boom", "dies", json!({"type": "object"}), move |_a, _c| {
            calls.set(calls.get() + 1);
            async move { Err(ToolError::propagate(format!("ワーカー停止 {}", "😱".repeat(1_990)))) }
        }));
        let retry = RetryPolicy { max_attempts: 1, ..RetryPolicy::default() };
        env.agent_with(
            MockModel::by_turn(vec![MockTurn::tools([("boom", json!({}))]), MockTurn::text("done")]),
            vec![boom],
            AgentOptions { retry, ..AgentOptions::default() },
            "",
        )
    };
    block_on(agent.send("wide", "go", SendOptions::default())).unwrap_err();
    assert_eq!(block_on(agent.pending()).unwrap()[0].attempts, 1);
    let so = SweepOptions::default();
    for _ in 0..(90 * 12) {
        clock.advance(5_000);
        block_on(agent.sweep(&so, &NoListener)).unwrap();
    }
    assert_eq!(calls.get(), 10, "ten attempts, then quarantine (not one per tick)");
    let listed = block_on(agent.pending()).unwrap();
    assert!(listed[0].quarantined && listed[0].attempts == 10, "{listed:?}");
}

/// A model script of `steps - 1` tool turns and a final answer, then answers for follow-up messages.
fn tool_turns(steps: usize) -> Vec<MockTurn> {
    let mut s: Vec<MockTurn> =
        (0..steps - 1).map(|i| MockTurn::tools([("search", json!({"i": i}))]).with_text(format!("step {i}"))).collect();
    s.push(MockTurn::text("finished"));
    s.extend((0..4).map(|i| MockTurn::text(format!("follow-up {i}"))));
    s
}

/// Runs of 1,000+ steps (2,000+ journal entries) stay readable on every store, finished and unfinished: load,
/// `GET /runs/{id}`, history, continuing the conversation, and a `run_once` redelivery of the finished job,
/// which is acknowledged without a model call (a finished run's release prunes old entries; the loader used
/// to start from entries that were gone and found no run at all).
#[test]
fn long_runs_stay_readable_finished_and_unfinished_on_every_store() {
    const STEPS: usize = 1_050;
    let stores: Vec<(&str, Box<dyn Fn() -> Env>)> = vec![
        ("MemoryStore", Box::new(Env::new)),
        (
            "JournalStore/MemoryKv",
            Box::new(|| {
                let clock = ManualClock::new(1_700_000_000_000);
                Env::with_store(Rc::new(journal(MemoryKv::new(), &clock)), clock)
            }),
        ),
        (
            "JournalStore/SimKv",
            Box::new(|| {
                let clock = ManualClock::new(1_700_000_000_000);
                Env::with_store(Rc::new(journal(sim(&clock, 1, 60_000), &clock)), clock)
            }),
        ),
    ];
    let options = AgentOptions {
        max_steps: 5_000,
        retry: RetryPolicy { max_attempts: 1, ..RetryPolicy::default() },
        ..AgentOptions::default()
    };
    for (name, make) in stores {
        let env = make();
        let counters = Counters::default();
        // Finished, delivered once by a queue.
        let model = MockModel::by_turn(tool_turns(STEPS));
        let agent = env.agent_with(model.clone(), vec![counting_tool("search", &counters)], options.clone(), "");
        let delivered = match block_on(agent.run_once("job-1", "go", SendOptions::default())).unwrap() {
            Delivery::Ran { result, .. } => *result,
            other => panic!("{name}: {other:?}"),
        };
        assert_eq!((delivered.status, delivered.steps as usize), (RunStatus::Finished, STEPS), "{name}");
        let run_id = delivered.run_id.clone();
        let calls = model.call_count();
        assert_eq!(calls, STEPS, "{name}");
        let loaded = block_on(agent.load(&run_id)).unwrap().unwrap_or_else(|| panic!("{name}: the finished run loads"));
        assert_eq!(loaded.messages, delivered.messages, "{name}");
        let (status, body) = get_run(&agent, &run_id);
        assert_eq!((status, body["status"].as_str()), (200, Some("finished")), "{name}: GET /runs/{{id}}");
        let history = block_on(agent.history(&run_id, 10)).unwrap();
        assert_eq!(history.len(), 10, "{name}: history");
        assert_eq!(history[0].checkpoint, loaded, "{name}: newest first");
        assert!(history.windows(2).all(|w| w[0].seq == w[1].seq + 1), "{name}: consecutive states");
        // A redelivery of the finished job: acknowledged, no model call.
        match block_on(agent.run_once("job-1", "go", SendOptions::default())).unwrap() {
            Delivery::Acknowledged { result, .. } => assert_eq!(result.messages, delivered.messages, "{name}"),
            other => panic!("{name}: redelivery {other:?}"),
        }
        assert_eq!(model.call_count(), calls, "{name}: no model call on a redelivery");
        assert_eq!(counters.get("search") as usize, STEPS - 1, "{name}: every tool ran once");
        // Continue the conversation, twice (each release prunes another batch).
        for i in 0..2 {
            env.clock.advance(2_000);
            let more = block_on(agent.send(&run_id, format!("one more {i}"), SendOptions::default())).unwrap();
            assert_eq!(more.text, format!("follow-up {i}"), "{name}");
            let loaded = block_on(agent.load(&run_id)).unwrap().unwrap();
            assert_eq!(loaded.messages, more.messages, "{name}");
            assert_eq!(loaded.messages.len(), delivered.messages.len() + 2 * (i + 1), "{name}");
            assert_eq!(block_on(agent.history(&run_id, 3)).unwrap()[0].checkpoint, loaded, "{name}");
        }

        // Unfinished: the model fails after 1,000+ steps; the run is listed, readable, and resumes to the end.
        let down = Rc::new(Cell::new(true));
        let script = tool_turns(STEPS);
        let flaky = {
            let down = down.clone();
            MockModel::by_turn(
                script
                    .into_iter()
                    .enumerate()
                    .map(|(i, t)| {
                        if i + 1 < STEPS {
                            return t;
                        }
                        let down = down.clone();
                        MockTurn::func(
                            move |_| if down.get() { MockTurn::error(500) } else { MockTurn::text("finished") },
                        )
                    })
                    .collect(),
            )
        };
        let agent = env.agent_with(flaky, vec![counting_tool("search", &counters)], options.clone(), "");
        env.clock.advance(2_000);
        block_on(agent.send("long-unfinished", "go", SendOptions::default())).unwrap_err();
        let cp = block_on(agent.load("long-unfinished")).unwrap().unwrap();
        assert_eq!((cp.status, cp.step_index as usize), (RunStatus::InProgress, STEPS - 1), "{name}");
        assert_eq!(get_run(&agent, "long-unfinished").0, 200, "{name}");
        assert_eq!(block_on(agent.history("long-unfinished", 5)).unwrap()[0].checkpoint, cp, "{name}");
        let listed = block_on(agent.pending()).unwrap();
        assert_eq!(listed.iter().map(|p| p.run_id.as_str()).collect::<Vec<_>>(), vec!["long-unfinished"], "{name}");
        assert_eq!(listed[0].attempts, 1, "{name}");
        down.set(false);
        env.clock.advance(2_000);
        let done = block_on(agent.resume("long-unfinished", SendOptions::default())).unwrap().unwrap();
        assert_eq!(done.status, RunStatus::Finished, "{name}");
        assert_eq!(block_on(agent.load("long-unfinished")).unwrap().unwrap().messages, done.messages, "{name}");
        assert!(block_on(agent.pending()).unwrap().is_empty(), "{name}");
    }
}

/// Generated: runs of random length under random journal options (history kept, snapshot spacing, prune
/// batch), released finished or unfinished and continued by other owners several times. After every release,
/// another process loads exactly the last committed state, `history(k)` returns the last `k` states (as many
/// as the store keeps), and the next owner continues from it; finished runs really were pruned.
#[test]
fn pruned_runs_load_history_and_continue_exactly_generated() {
    let pruned_total = Cell::new(0usize);
    for_seeds("pruned_runs_load_history_and_continue_exactly_generated", 0..120, |seed| {
        let rng = steadfast::runtime::SplitMix64::new(seed);
        let pick = |n: u64| (steadfast::runtime::Rng::next_u64(&rng) % n) as usize;
        let clock = ManualClock::new(1_700_000_000_000);
        let opts = JournalOptions {
            history_limit: [0, 1, 2, 5, 50][pick(5)],
            snapshot_every: 1 + pick(40) as u64,
            snapshot_growth: pick(4) as u64,
            prune_batch: 1 + pick(60),
            ..JournalOptions::default()
        };
        let memory = MemoryKv::new();
        let simkv = sim(&clock, 1, 60_000);
        let stores: Vec<Box<dyn RunStore>> = (0..2)
            .map(|_| -> Box<dyn RunStore> {
                let (c, s) = (Rc::new(clock.clone()), Rc::new(ManualSleep::new(clock.clone())));
                if seed % 2 == 0 {
                    Box::new(JournalStore::new(memory.clone(), c, s, opts.clone()))
                } else {
                    Box::new(JournalStore::new(simkv.clone(), c, s, opts.clone()))
                }
            })
            .collect();
        let entry_keys = || {
            let keys = if seed % 2 == 0 { memory.keys() } else { simkv.keys() };
            keys.iter().filter(|k| k.contains("/j/")).count()
        };
        let mut states: std::collections::VecDeque<Checkpoint> = Default::default();
        let mut cp: Option<Checkpoint> = None;
        for cycle in 0..1 + pick(4) {
            clock.advance(2_000);
            let writer = &stores[pick(2)];
            let lease = block_on(writer.acquire_lease("p", &format!("o{cycle}"), clock.now_ms(), &LEASE))
                .unwrap_or_else(|e| panic!("seed {seed} cycle {cycle}: acquire: {e}"));
            let n = 1 + pick(150);
            let finish = pick(3) > 0;
            for i in 0..n {
                clock.advance(10);
                let status = if finish && i + 1 == n { RunStatus::Finished } else { RunStatus::InProgress };
                let (entry, next) = match &cp {
                    None => conformance::snapshot_entry("p", "start", clock.now_ms()),
                    Some(prev) => {
                        conformance::delta_entry(prev, Message::user(format!("{cycle}.{i}")), status, clock.now_ms())
                    }
                };
                block_on(writer.commit(&lease, &entry, &next)).unwrap_or_else(|e| panic!("seed {seed}: commit: {e}"));
                states.push_back(next.clone());
                if states.len() > 60 {
                    states.pop_front();
                }
                cp = Some(next);
                if pick(50) == 0 {
                    assert_eq!(block_on(writer.load("p")).unwrap().as_ref(), cp.as_ref(), "seed {seed}: own load");
                }
            }
            block_on(writer.release_lease(&lease)).unwrap();
            clock.advance(1_000);
            let before = entry_keys();
            let head = cp.as_ref().unwrap().seq as usize;
            if finish && before < head {
                pruned_total.set(pruned_total.get() + head - before);
            }
            for reader in &stores {
                let loaded = block_on(reader.load("p")).unwrap_or_else(|e| panic!("seed {seed} cycle {cycle}: {e}"));
                assert_eq!(loaded.as_ref(), cp.as_ref(), "seed {seed} cycle {cycle}: load after release");
                let k = 1 + pick(opts.history_limit as u64 + 3);
                let history = block_on(reader.history("p", k)).unwrap();
                let want = k.min(opts.history_limit).min(head);
                assert_eq!(history.len(), want, "seed {seed} cycle {cycle}: history({k}) of {head} states, {opts:?}");
                for (h, expected) in history.iter().zip(states.iter().rev()) {
                    assert_eq!(&h.checkpoint, expected, "seed {seed} cycle {cycle}: history state {}", h.seq);
                }
            }
        }
    });
    assert!(pruned_total.get() > 1_000, "releases pruned {} entries in all", pruned_total.get());
}

/// How a gap is read in the gap tests.
#[derive(Clone, Copy, Debug)]
enum GapReader {
    /// The writer itself, holding the lease (its head is exact).
    Own,
    /// Another process while the writer holds the lease (the lease's head is a hint).
    Other,
    /// Another process after the writer released (the end marker's head is exact).
    Released,
    /// Another process taking the lease over after the writer died (the acquire probe, then its load).
    Takeover,
}

const GAP_READERS: [GapReader; 4] = [GapReader::Own, GapReader::Other, GapReader::Released, GapReader::Takeover];

/// Writes entries `1..=n` of run `id` with `writer`, losing the writes of `lost` (acknowledged, not stored),
/// renewing the lease after entry `renew_at` (a head hint in the lease). Returns the lease and the states.
fn write_with_lost_entries<K: KvBackend>(
    writer: &JournalStore<FaultyKv<K>>,
    clock: &ManualClock,
    id: &str,
    n: u64,
    lost: std::ops::RangeInclusive<u64>,
    renew_at: Option<u64>,
) -> (steadfast::store::Lease, Vec<Checkpoint>) {
    let mut lease = block_on(conformance::acquired(writer, id, "writer", clock.now_ms(), &LEASE, "acquire"));
    let mut states: Vec<Checkpoint> = Vec::new();
    for seq in 1..=n {
        clock.advance(5);
        let (e, next) = match states.last() {
            None => conformance::snapshot_entry(id, "start", clock.now_ms()),
            Some(prev) => {
                conformance::delta_entry(prev, Message::user(format!("m{seq}")), RunStatus::InProgress, clock.now_ms())
            }
        };
        let drop = if lost.contains(&seq) { 1.0 } else { 0.0 };
        writer.kv().set_options(FaultOptions { drop_write: drop, ..FaultOptions::default() });
        block_on(writer.commit(&lease, &e, &next)).expect("acknowledged");
        writer.kv().set_options(FaultOptions::default());
        states.push(next);
        if renew_at == Some(seq) {
            lease = block_on(writer.renew_lease(&lease, clock.now_ms(), &LEASE)).unwrap();
        }
    }
    (lease, states)
}

/// Reads run `id` as `reader` says; the error of the read (load, history and, for a takeover, the acquire).
fn read_gap<K: KvBackend>(
    how: GapReader,
    writer: &JournalStore<FaultyKv<K>>,
    other: &JournalStore<FaultyKv<K>>,
    lease: &steadfast::store::Lease,
    clock: &ManualClock,
    id: &str,
) -> Vec<steadfast::Error> {
    match how {
        GapReader::Own => vec![block_on(writer.load(id)).unwrap_err(), block_on(writer.history(id, 5)).unwrap_err()],
        GapReader::Other => vec![block_on(other.load(id)).unwrap_err(), block_on(other.history(id, 5)).unwrap_err()],
        GapReader::Released => {
            block_on(writer.release_lease(lease)).unwrap();
            clock.advance(1_000);
            vec![block_on(other.load(id)).unwrap_err(), block_on(other.history(id, 50)).unwrap_err()]
        }
        GapReader::Takeover => {
            clock.set(lease.expires_at + LEASE.grace_ms + 1);
            // The probe reads past the lease's head hint; a gap before the hint is the new owner's load's to find.
            match block_on(other.acquire_lease(id, "taker", clock.now_ms(), &LEASE)) {
                Err(e) => vec![e],
                Ok(_) => vec![block_on(other.load(id)).unwrap_err(), block_on(other.history(id, 5)).unwrap_err()],
            }
        }
    }
}

/// A lost journal write (acknowledged, never stored) in the middle of a run: every reader — the writer, another
/// process, a reader after release, a takeover — reports `STEADFAST_CHECKPOINT_CORRUPT` naming the entry, and
/// the listing shows the run as corrupt; no reader folds past the gap or cuts the journal there (a resume
/// would redo the recorded steps after it on a new branch).
#[test]
fn a_lost_journal_write_is_reported_as_corrupt_by_every_reader() {
    for how in GAP_READERS {
        for backend in ["MemoryKv", "SimKv"] {
            let clock = ManualClock::new(1_700_000_000_000);
            let (memory, simkv) = (MemoryKv::new(), sim(&clock, 1, 60_000));
            let run =
                |f: &dyn Fn(&dyn Fn() -> Vec<steadfast::Error>, &dyn Fn() -> Vec<steadfast::store::PendingRun>)| {
                    if backend == "MemoryKv" {
                        let (w, o) = pair(
                            FaultyKv::new(memory.clone(), FaultOptions::default()),
                            FaultyKv::new(memory.clone(), FaultOptions::default()),
                            &clock,
                        );
                        let (lease, _) = write_with_lost_entries(&w, &clock, "g", 20, 7..=7, None);
                        f(&|| read_gap(how, &w, &o, &lease, &clock, "g"), &|| block_on(o.pending()).unwrap());
                    } else {
                        let (w, o) = pair(
                            FaultyKv::new(simkv.clone(), FaultOptions::default()),
                            FaultyKv::new(simkv.clone(), FaultOptions::default()),
                            &clock,
                        );
                        let (lease, _) = write_with_lost_entries(&w, &clock, "g", 20, 7..=7, None);
                        f(&|| read_gap(how, &w, &o, &lease, &clock, "g"), &|| block_on(o.pending()).unwrap());
                    }
                };
            run(&|read, pending| {
                for e in read() {
                    assert_eq!((e.code, e.retryable), (ErrorCode::CheckpointCorrupt, false), "{how:?} {backend}: {e}");
                    assert!(e.message.contains("journal entry 7") && e.message.contains("entry 8"), "{how:?}: {e}");
                }
                let listed = pending();
                assert_eq!(listed.len(), 1, "{how:?} {backend}");
                let err = listed[0].last_error.as_ref().unwrap_or_else(|| panic!("{how:?} {backend}: {listed:?}"));
                assert_eq!(err.code, ErrorCode::CheckpointCorrupt, "{how:?} {backend}: listed as corrupt");
            });
        }
    }
}

/// In another location the gap may only be KV's propagation (a cached miss, a listing that lags): until the
/// listing shows the later entry without the missing one, the read is retryable, then it is corrupt.
#[test]
fn a_gap_seen_from_another_location_is_retryable_until_the_listing_confirms_it() {
    let clock = ManualClock::new(1_700_000_000_000);
    let kv = sim(&clock, 2, 60_000);
    let (w, o) = pair(
        FaultyKv::new(kv.at(0), FaultOptions::default()),
        FaultyKv::new(kv.at(1), FaultOptions::default()),
        &clock,
    );
    write_with_lost_entries(&w, &clock, "g", 20, 7..=7, None);
    let early = block_on(o.load("g")).unwrap_err();
    assert_eq!((early.code, early.retryable), (ErrorCode::StoreUnavailable, true), "{early}");
    clock.advance(61_000);
    let late = block_on(o.load("g")).unwrap_err();
    assert_eq!((late.code, late.retryable), (ErrorCode::CheckpointCorrupt, false), "{late}");
}

/// A journal entry deleted from the middle of a finished run (the run is read after its release, and while
/// held): corrupt, never a shorter run.
#[test]
fn a_deleted_middle_entry_is_reported_as_corrupt() {
    for released in [false, true] {
        let clock = ManualClock::new(1_700_000_000_000);
        let kv = MemoryKv::new();
        let (w, o) = pair(kv.clone(), kv.clone(), &clock);
        let lease = block_on(conformance::acquired(&w, "d", "w", clock.now_ms(), &LEASE, "acquire"));
        let (e, mut cp) = conformance::snapshot_entry("d", "start", clock.now_ms());
        block_on(w.commit(&lease, &e, &cp)).unwrap();
        for i in 0..30 {
            let status = if i == 29 { RunStatus::Finished } else { RunStatus::InProgress };
            let (e, next) = conformance::delta_entry(&cp, Message::user(format!("m{i}")), status, clock.now_ms());
            block_on(w.commit(&lease, &e, &next)).unwrap();
            cp = next;
        }
        if released {
            block_on(w.release_lease(&lease)).unwrap();
        }
        let middle = kv.keys().into_iter().find(|k| k.ends_with("/0000000012")).unwrap();
        block_on(kv.delete(&middle)).unwrap();
        for store in [&w, &o] {
            let e = block_on(store.load("d")).unwrap_err();
            assert_eq!(e.code, ErrorCode::CheckpointCorrupt, "released {released}: {e}");
            assert_eq!(block_on(store.history("d", 30)).unwrap_err().code, ErrorCode::CheckpointCorrupt);
        }
    }
}

/// Generated: gaps of 1 to 99 lost writes anywhere in runs of up to 300 entries, with the lease's head hint
/// before, inside or after the gap, read by every kind of reader: always `STEADFAST_CHECKPOINT_CORRUPT`. A lost
/// tail (nothing written after it) is corrupt once an end marker says the entries exist; while only the
/// writer's own head or a lease's head hint says so, it is retryable; a reader whose view ends before it sees
/// the run as it was before it (nothing says more was written).
#[test]
fn gaps_anywhere_are_corrupt_for_every_reader_generated() {
    for_seeds("gaps_anywhere_are_corrupt_for_every_reader_generated", 0..160, |seed| {
        let rng = steadfast::runtime::SplitMix64::new(seed);
        let pick = |n: u64| steadfast::runtime::Rng::next_u64(&rng) % n;
        let clock = ManualClock::new(1_700_000_000_000);
        let kv = MemoryKv::new();
        let (w, o) = pair(
            FaultyKv::new(kv.clone(), FaultOptions::default()),
            FaultyKv::new(kv, FaultOptions::default()),
            &clock,
        );
        let n = 3 + pick(298);
        let tail = pick(5) == 0;
        let first = 2 + pick(n - 2);
        let len = if tail { n - first + 1 } else { 1 + pick(99.min(n - first)) };
        let lost = first..=first + len - 1;
        let renew_at = match pick(3) {
            0 => None,
            _ => Some(1 + pick(n)),
        };
        let how = GAP_READERS[pick(4) as usize];
        let (lease, states) = write_with_lost_entries(&w, &clock, "g", n, lost.clone(), renew_at);
        let ctx = format!("n {n}, lost {lost:?}, renewed after {renew_at:?}, {how:?}");
        if !tail {
            for e in read_gap(how, &w, &o, &lease, &clock, "g") {
                assert_eq!(e.code, ErrorCode::CheckpointCorrupt, "{ctx}: {e}");
            }
            return;
        }
        // A lost tail: corrupt once a later record says the entries exist (an end marker); retryable while only
        // a head hint does; the end of the journal for a reader whose view ends before it.
        let hint_covers = renew_at.is_some_and(|r| r >= first);
        let before_gap = &states[first as usize - 2];
        let loaded = match how {
            GapReader::Own => block_on(w.load("g")),
            GapReader::Other => block_on(o.load("g")),
            GapReader::Released => {
                block_on(w.release_lease(&lease)).unwrap();
                block_on(o.load("g"))
            }
            GapReader::Takeover => {
                clock.set(lease.expires_at + LEASE.grace_ms + 1);
                let taken = block_on(conformance::acquired(&o, "g", "taker", clock.now_ms(), &LEASE, "acquire"));
                block_on(o.release_lease(&taken)).unwrap();
                block_on(o.load("g"))
            }
        };
        let code = loaded.as_ref().err().map(|e| e.code);
        match how {
            GapReader::Own => assert_eq!(code, Some(ErrorCode::StoreUnavailable), "{ctx}"),
            GapReader::Other if hint_covers => assert_eq!(code, Some(ErrorCode::StoreUnavailable), "{ctx}"),
            GapReader::Released => assert_eq!(code, Some(ErrorCode::CheckpointCorrupt), "{ctx}"),
            GapReader::Takeover if hint_covers => assert_eq!(code, Some(ErrorCode::CheckpointCorrupt), "{ctx}"),
            _ => assert_eq!(loaded.unwrap().as_ref(), Some(before_gap), "{ctx}"),
        }
    });
}

/// A KV that runs `hook` just before its `at`-th bulk get (a write landing between two reads of a reader).
struct HookKv {
    inner: MemoryKv,
    bulk_gets: Cell<u32>,
    at: u32,
    hook: Box<dyn Fn()>,
}

#[async_trait::async_trait(?Send)]
impl KvBackend for HookKv {
    async fn get(&self, key: &str) -> steadfast::Result<Option<String>> {
        self.inner.get(key).await
    }
    async fn get_many(&self, keys: &[String]) -> steadfast::Result<Vec<Option<String>>> {
        self.bulk_gets.set(self.bulk_gets.get() + 1);
        if self.bulk_gets.get() == self.at {
            (self.hook)();
        }
        self.inner.get_many(keys).await
    }
    async fn put(&self, key: &str, value: &str, opts: PutOptions) -> steadfast::Result<()> {
        self.inner.put(key, value, opts).await
    }
    async fn delete(&self, key: &str) -> steadfast::Result<()> {
        self.inner.delete(key).await
    }
    async fn list(&self, prefix: &str, cursor: Option<&str>, limit: usize) -> steadfast::Result<ListPage> {
        self.inner.list(prefix, cursor, limit).await
    }
}

/// A reader of a run that a live writer extends between the reader's bulk gets (the missing entry and a later
/// one both appear meanwhile) reads the journal again and returns a state the writer committed — not a gap
/// error, not a state with a hole.
#[test]
fn a_reader_racing_a_live_writer_reads_a_committed_state_not_a_gap() {
    let clock = ManualClock::new(1_700_000_000_000);
    let kv = MemoryKv::new();
    let writer = journal(kv.clone(), &clock);
    let lease = block_on(conformance::acquired(&writer, "live", "w", clock.now_ms(), &LEASE, "acquire"));
    let mut states = Vec::new();
    let (e, cp) = conformance::snapshot_entry("live", "start", clock.now_ms());
    block_on(writer.commit(&lease, &e, &cp)).unwrap();
    states.push(cp);
    let mut later_entries = Vec::new();
    for seq in 2..=200u64 {
        let prev = states.last().unwrap();
        let (e, next) = conformance::delta_entry(prev, Message::user(format!("m{seq}")), RunStatus::InProgress, seq);
        if seq <= 150 {
            block_on(writer.commit(&lease, &e, &next)).unwrap();
        } else {
            later_entries.push((seq, serde_json::to_string(&e).unwrap()));
        }
        states.push(next);
    }
    let first = kv.keys().into_iter().find(|k| k.ends_with("/0000000001")).unwrap();
    let prefix = first.trim_end_matches("0000000001").to_string();
    // The reader's bulk gets: 1 (marker + entries 1-99), 2 (100-198: 151 missing), 3 (the probe further):
    // entries 151-200 land just before the third.
    let hook_kv = kv.clone();
    let reader = journal(
        HookKv {
            inner: kv.clone(),
            bulk_gets: Cell::new(0),
            at: 3,
            hook: Box::new(move || {
                for (seq, raw) in &later_entries {
                    hook_kv.set_raw(&format!("{prefix}{seq:010}"), raw);
                }
            }),
        },
        &clock,
    );
    let loaded = block_on(reader.load("live")).expect("a committed state").expect("exists");
    assert_eq!(loaded.seq, 200, "the journal as it is now");
    assert_eq!(loaded, states[199]);
    assert!(reader.kv().bulk_gets.get() >= 3, "the race happened");
}

/// A run of `steps` two-tool steps (tools `search` and `read`) whose `read` of step `fail_at` fails once with a
/// propagated error (the run stays resumable, its lease released); `None`: no failure.
fn failing_once_tools(counters: &Counters, fail_at: Option<usize>) -> Vec<Rc<dyn Tool>> {
    let mut tools = fast_tools(counters);
    let c = counters.clone();
    tools[1] = Rc::new(FnTool::new("read", "read", json!({"type": "object"}), move |args, ctx| {
        let c = c.clone();
        async move {
            let n = c.hit(&format!("call:{}", ctx.tool_call_id));
            if fail_at.is_some_and(|k| args["i"] == json!(k)) && n == 1 {
                return Err(ToolError::Propagate(steadfast::core::error::Error::new(
                    ErrorCode::ToolPropagated,
                    "the process died while reading",
                )));
            }
            Ok(ToolOutput::text(format!("read {} {}", args["i"], "x".repeat(480))))
        }
    }));
    tools
}

/// A KV that counts, per key, the reads that returned a value (gets and bulk gets).
#[derive(Clone)]
struct KeyReads {
    inner: SimKv,
    found: Rc<std::cell::RefCell<std::collections::BTreeMap<String, u32>>>,
}

impl KeyReads {
    fn saw(&self, key: &str, v: &Option<String>) {
        if v.is_some() {
            *self.found.borrow_mut().entry(key.to_string()).or_insert(0) += 1;
        }
    }
}

#[async_trait::async_trait(?Send)]
impl KvBackend for KeyReads {
    async fn get(&self, key: &str) -> steadfast::Result<Option<String>> {
        let v = self.inner.get(key).await?;
        self.saw(key, &v);
        Ok(v)
    }
    async fn get_many(&self, keys: &[String]) -> steadfast::Result<Vec<Option<String>>> {
        let vs = self.inner.get_many(keys).await?;
        for (k, v) in keys.iter().zip(&vs) {
            self.saw(k, v);
        }
        Ok(vs)
    }
    async fn put(&self, key: &str, value: &str, opts: PutOptions) -> steadfast::Result<()> {
        self.inner.put(key, value, opts).await
    }
    async fn delete(&self, key: &str) -> steadfast::Result<()> {
        self.inner.delete(key).await
    }
    async fn list(&self, prefix: &str, cursor: Option<&str>, limit: usize) -> steadfast::Result<ListPage> {
        *self.found.borrow_mut().entry(format!("list {prefix}")).or_insert(0) += 1;
        self.inner.list(prefix, cursor, limit).await
    }
}

/// The store reads of a resume (`RunStats::store_reads`, deterministic, so asserted) and what they fetch: the
/// resume reads the lease and the journal once to refuse what needs no lease, takes the lease (deciding on
/// that same lease read, then the takeover probe: the previous segment's end marker and the index, and the
/// entries past what was read), folds the run under the lease and reads the lease back after the settle
/// window (and lists its message queue, steering's reads). Every journal entry comes from KV once: the probe and the fold under the lease use what the first
/// read fetched (an entry's key is written once); the lease twice (the first read and the read-back). Cases: a run left by a propagated tool failure (its lease released, the end marker written)
/// and a run whose process crashed (its lease expired, no marker), with a short and a long journal.
#[test]
fn a_resume_fetches_each_journal_entry_once() {
    // (steps, the step whose `read` fails once, crash after this many effects, store reads of the resume)
    let cases = [(5, Some(2), None, 4), (60, Some(45), None, 4), (5, None, Some(7), 6), (60, None, Some(150), 6)];
    for (steps, fail_at, crash_after, reads) in cases {
        let ctx = format!("{steps} steps, fail at {fail_at:?}, crash after {crash_after:?}");
        let options = AgentOptions { max_steps: steps as u32 + 1, ..AgentOptions::default() };
        let clock = ManualClock::new(1_700_000_000_000);
        let kv = KeyReads { inner: sim(&clock, 1, 60_000), found: Default::default() };
        let counters = Counters::default();
        let process = || {
            let env = Env::with_store(Rc::new(journal(kv.clone(), &clock)), clock.clone());
            env.agent_with(
                MockModel::by_turn(long_script(steps)),
                failing_once_tools(&counters, fail_at),
                options.clone(),
                "",
            )
        };
        let opts =
            SendOptions { crash_budget: crash_after.map(|n| CrashBudget::new(n, false)), ..SendOptions::default() };
        let code = block_on(process().send("r", "go", opts)).err().map(|e| e.code);
        assert!(matches!(code, Some(ErrorCode::ToolPropagated | ErrorCode::Crashed)), "{ctx}: {code:?}");
        clock.advance(200_000);
        kv.found.borrow_mut().clear();
        let done = block_on(process().resume("r", SendOptions::default())).unwrap().unwrap();
        assert_eq!(done.status, RunStatus::Finished, "{ctx}");
        assert!(validate_transcript(&done.messages).is_ok(), "{ctx}");
        assert_eq!(done.messages.iter().filter(|m| matches!(m, Message::Assistant { .. })).count(), steps, "{ctx}");
        let found = kv.found.borrow();
        let entries: Vec<_> = found.iter().filter(|(k, _)| k.contains("/j/")).collect();
        assert!(!entries.is_empty(), "{ctx}: the resume read no journal entry");
        let twice: Vec<_> = entries.iter().filter(|(_, n)| **n > 1).collect();
        assert!(twice.is_empty(), "{ctx}: journal entries fetched more than once: {twice:?}");
        assert_eq!(found.get("run/r/lease"), Some(&2), "{ctx}: lease reads (before the lease, the read-back)");
        // Besides them, the run's message queue is listed twice: at the first boundary past `steer_poll_ms` (the
        // settle window moved the clock past it) and before the run finishes.
        assert_eq!(found.get("list queue/r/"), Some(&2), "{ctx}: queue reads");
        assert_eq!(done.stats.store_reads, reads + 2, "{ctx}: store reads of the resume");
    }
}

/// An acquisition decides on the lease read of the load just before it (one KV read saved per execution) only
/// while that read is younger than a quarter of the settle window: its write must be acknowledged within the
/// window of the read it decided on, so an older read is read again. Ages around the cut-off (S = 1,000 ms).
#[test]
fn an_acquisition_decides_on_the_load_before_it_only_while_that_read_is_recent() {
    let opts = LeaseOptions::default();
    for age in [0, 1, 120, 249, 250, 251, 400, 999, 5_000] {
        let clock = ManualClock::new(1_700_000_000_000);
        let kv = KeyReads { inner: sim(&clock, 1, 60_000), found: Default::default() };
        let first = journal(kv.clone(), &clock);
        let lease = block_on(first.acquire_lease("r", "a", clock.now_ms(), &opts)).unwrap();
        block_on(first.release_lease(&lease)).unwrap();
        clock.advance(5_000);
        let store = journal(kv.clone(), &clock);
        kv.found.borrow_mut().clear();
        block_on(store.load("r")).unwrap();
        clock.advance(age);
        let taken = block_on(store.acquire_lease("r", "b", clock.now_ms(), &opts)).unwrap();
        assert_eq!(taken.epoch, 2, "age {age}");
        let reads = kv.found.borrow().get("run/r/lease").copied();
        assert_eq!(reads, Some(if age < 250 { 1 } else { 2 }), "age {age}: lease reads");
        // What it decided on is what is stored: a second process taking over later sees this owner.
        clock.advance(5_000);
        block_on(store.confirm_lease(&taken)).unwrap();
    }
}

/// Generated damage to stored values: one value of a store holding a finished run, a run awaiting approval and
/// an interrupted run (its journal entries, lease, end marker, approval record, index entry) is replaced by a
/// damaged one (`damage`). Then every read and write path runs: load, history, pending, the approval list and
/// its resolution, a resume, a continuation, a sweep tick. Nothing panics; every failure is a coded error; a
/// value that no longer parses never reads as a state other than the one written; a fourth run stored beside
/// them reads the same throughout; and every damaged run can be deleted and started again under its id.
/// `STEADFAST_SEED=<n>` replays one case.
#[test]
fn damaged_stored_values_get_coded_errors_never_a_panic_and_touch_no_other_run_generated() {
    use steadfast::runtime::{NoListener, Rng, SplitMix64 as Rng64};
    let seeds: Vec<u64> = common::seeds::seeds(0..500);
    let (mut unparseable, mut typed) = (0, 0);
    for seed in seeds {
        let repro = common::seeds::repro(seed, "damaged_stored_values");
        let rng = Rng64::new(seed);
        let clock = ManualClock::new(1_700_000_000_000);
        let kv = MemoryKv::new();
        let store: Rc<dyn RunStore> = Rc::new(journal(kv.clone(), &clock));
        let env = Env::with_store(store.clone(), clock.clone());
        let counters = Counters::default();
        let script = || {
            MockModel::by_turn(vec![
                MockTurn::func(|req| {
                    match req
                        .messages
                        .iter()
                        .any(|m| matches!(m, Message::User { content } if content.contains("refund")))
                    {
                        true => MockTurn::tools([("refund", json!({"order": 7}))]),
                        false => MockTurn::tools([("charge", json!({"order": 7})), ("charge", json!({"order": 8}))]),
                    }
                }),
                MockTurn::text("Done."),
                MockTurn::text("Noted."),
                MockTurn::text("Noted again."),
            ])
        };
        let agent = || env.agent(script(), vec![counting_tool("charge", &counters), gated_tool("refund", &counters)]);
        let a = agent();
        block_on(a.send("fin", "charge order 7", SendOptions::default())).unwrap();
        block_on(a.send("other", "charge order 7", SendOptions::default())).unwrap();
        let wait = block_on(a.send("wait", "refund order 7", SendOptions::default())).unwrap();
        let crash = SendOptions {
            crash: Some(steadfast::runtime::CrashPoint { after_effects: 3, finish_in_flight: false }),
            ..Default::default()
        };
        let _ = block_on(a.send("mid", "charge order 7", crash));
        env.past_leases();
        let runs = ["fin", "wait", "mid"];
        let before: Vec<_> = runs.iter().map(|id| block_on(a.load(id)).unwrap()).collect();
        let other = block_on(a.load("other")).unwrap();
        let keys: Vec<String> = kv.keys().into_iter().filter(|k| !k.contains("other")).collect();
        let key = &keys[(rng.next_u64() % keys.len() as u64) as usize];
        let (value, broken) = damage(&kv.raw(key).unwrap_or_default(), &rng);
        if broken {
            unparseable += 1
        } else {
            typed += 1
        }
        kv.set_raw(key, &value);
        let case = format!("{repro}: {key} = {value:?}");
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let a = agent();
            let before: Vec<_> = runs.iter().copied().zip(before.iter().cloned()).collect();
            every_path_after_damage(&a, &before, broken, wait.approval_id.as_deref(), &case);
            if let Err(e) = block_on(a.pending()) {
                assert_ne!(e.code, ErrorCode::Internal, "{case}: pending: {e}");
            }
            env.past_leases();
            if let Err(e) = block_on(a.sweep(&SweepOptions::default(), &NoListener)) {
                assert_ne!(e.code, ErrorCode::Internal, "{case}: sweep: {e}");
            }
            assert_eq!(block_on(a.load("other")).unwrap(), other, "{case}: the run beside them changed");
            each_run_starts_again(agent, &runs, &case);
        }));
        if let Err(p) = outcome {
            let msg = p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()));
            panic!("{case}: {}", msg.unwrap_or_default());
        }
    }
    println!("damaged values: {unparseable} unparseable, {typed} of another type or at u64's edge");
}
