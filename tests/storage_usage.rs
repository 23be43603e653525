//! Storage cost (issue 31, part 2): "storage cost too (KV/DO reads, writes, bytes × the platform's published
//! prices, configurable) as `usage.storage`, so an operator sees what a run cost all-in". A run's store operations
//! are counted per run however many runs share the store (the meter), recorded with its journal entries (so they
//! survive crashes and reloads), priced when recorded, and shown in its result, its state and its `run.done`.

mod common;

use common::*;
use futures::future::join;
use serde_json::json;
use std::rc::Rc;
use steadfast::core::cost::{StoragePrices, StorageUsage};
use steadfast::core::events::Event;
use steadfast::runtime::{AgentOptions, CrashPoint, FnTool, MockModel, MockTurn, SendOptions, Tool, ToolOutput};
use steadfast::store::sim::SimKv;

/// A model that asks for `lookup` `turns` times, then answers.
fn looping(turns: usize) -> MockModel {
    let mut script: Vec<MockTurn> = (0..turns).map(|i| MockTurn::tools([("lookup", json!({"n": i}))])).collect();
    script.push(MockTurn::text("done"));
    MockModel::new(script)
}

thread_local! {
    /// The runs whose `lookup` started, in order (to see that runs did interleave).
    static STARTS: std::cell::RefCell<Vec<String>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn lookup() -> Rc<dyn Tool> {
    Rc::new(FnTool::new("lookup", "looks something up", object_schema(), |_a, ctx| async move {
        STARTS.with(|s| s.borrow_mut().push(ctx.run_id.clone()));
        // Yields once (waking itself), so a run polled beside this one goes on meanwhile.
        let mut yielded = false;
        std::future::poll_fn(|cx| {
            if std::mem::replace(&mut yielded, true) {
                return std::task::Poll::Ready(());
            }
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        })
        .await;
        Ok(ToolOutput::text("42"))
    }))
}

fn agent(env: &Env, turns: usize, seed: u64, opts: AgentOptions) -> steadfast::runtime::Agent {
    builder(env, looping(turns), seed).tool_rc(lookup()).options(opts).build().unwrap()
}

/// The journal store over a simulated KV the test can count.
fn journal() -> (Env, SimKv) {
    let clock = steadfast::runtime::ManualClock::new(1_700_000_000_000);
    let kv = SimKv::new(Rc::new(clock.clone()), Default::default());
    (Env::journal_over(kv.clone(), clock), kv)
}

/// What the default prices make of `u`'s counts: KV reads $0.50, writes, deletes, lists $5 per million (500 and
/// 5,000 nano-dollars each); object requests $0.15, rows written $1 (150 and 1,000).
fn default_cost(u: &StorageUsage) -> u64 {
    u.reads * 500 + (u.writes + u.deletes + u.lists) * 5_000 + u.requests * 150 + u.rows_written * 1_000
}

fn stored(env: &Env, run: &str) -> StorageUsage {
    block_on(env.store.load(run)).unwrap().unwrap().storage
}

/// Two runs interleaved on one store each record exactly what the same run records alone on a store of its own:
/// no operation of one is counted for the other, on the journal store and on strict mode's run objects.
#[test]
fn interleaved_runs_each_record_their_own_operations_only() {
    for (name, make) in [("journal", Env::journal_sim as fn() -> Env), ("objects", Env::objects)] {
        let alone = |run: &str, turns: usize, seed: u64| {
            let env = make();
            let r = block_on(agent(&env, turns, seed, AgentOptions::default()).send(run, "go", SendOptions::default()))
                .unwrap();
            (r.usage.storage.unwrap(), stored(&env, run))
        };
        let (a_alone, b_alone) = (alone("a", 3, 1), alone("b", 1, 2));
        let env = make();
        let (a, b) = (agent(&env, 3, 1, AgentOptions::default()), agent(&env, 1, 2, AgentOptions::default()));
        STARTS.with(|s| s.borrow_mut().clear());
        let (ra, rb) =
            block_on(join(a.send("a", "go", SendOptions::default()), b.send("b", "go", SendOptions::default())));
        let (ra, rb) = (ra.unwrap(), rb.unwrap());
        let starts = STARTS.with(|s| s.borrow().clone());
        let b_at = starts.iter().position(|r| r == "b").unwrap();
        assert!(b_at > 0 && b_at < 3, "{name}: b's tool ran between a's (the runs interleaved): {starts:?}");
        assert_eq!((ra.usage.storage.unwrap(), stored(&env, "a")), a_alone, "{name}: run a");
        assert_eq!((rb.usage.storage.unwrap(), stored(&env, "b")), b_alone, "{name}: run b");
        assert_ne!(a_alone.0, b_alone.0, "{name}: the two runs differ (3 turns and 1), so a mix-up would show");
        assert_eq!(a_alone.0, a_alone.1, "{name}: the result shows what the journal records");
    }
}

/// On the journal store the recorded counts are the KV operations the run made, as KV bills them, up to its
/// last entry: what comes after it (that entry's own write, the queue's last read, the lease's release) is not,
/// the run records nothing after its last entry. The cost is the counts at the default prices.
#[test]
fn the_journal_store_records_the_kv_operations_of_each_execution() {
    let (env, kv) = journal();
    let a = agent(&env, 3, 1, AgentOptions::default());
    let r = block_on(a.send("r", "go", SendOptions::default())).unwrap();
    let u = r.usage.storage.unwrap();
    let c = kv.counts();
    assert_eq!(u.reads, c.gets + c.bulk_keys, "every read, a bulk one per key");
    // What ends the execution after its last entry is recorded by the next one: that entry's write, the
    // queue's last read (a list) and the lease's release (a write and a delete).
    let tail = (c.gets + c.bulk_keys - u.reads, c.puts - u.writes, c.deletes - u.deletes, c.lists - u.lists);
    assert_eq!(tail, (0, 2, 1, 1));
    assert!(u.bytes_written < c.bytes_written && u.bytes_written > 0);
    assert_eq!(u.cost, default_cost(&u));
    assert!(u.writes >= 5, "a lease and four entries at least: {u:?}");
    // The next execution (a follow-up message) adds its own operations up to its last entry: what it did less
    // its own rest (a write of its last entry at least; a queue read and a release at most).
    let b = builder(&env, MockModel::new(vec![MockTurn::text("again")]), 9).tool_rc(lookup()).build().unwrap();
    let u2 = block_on(b.send("r", "more", SendOptions::default())).unwrap().usage.storage.unwrap();
    let c2 = kv.counts();
    let (did, recorded) = (c2.puts - c.puts, u2.writes - u.writes);
    assert!(recorded > 0 && (1..=2).contains(&(did - recorded)), "{did} writes, {recorded} recorded");
    assert!(c2.gets + c2.bulk_keys - c.gets - c.bulk_keys - (u2.reads - u.reads) <= 1);
    assert!(c2.lists - c.lists - (u2.lists - u.lists) <= 1 && c2.deletes - c.deletes - (u2.deletes - u.deletes) <= 1);
}

/// Prices are configurable (`storagePrices`), each operation priced when it is recorded.
#[test]
fn configured_storage_prices_price_the_operations() {
    let (env, _kv) = journal();
    let prices =
        StoragePrices { read: 1_000_000, write: 2_000_000, delete: 0, list: 3_000_000, ..StoragePrices::default() };
    let a = agent(&env, 2, 1, AgentOptions { storage_prices: prices, ..AgentOptions::default() });
    let u = block_on(a.send("r", "go", SendOptions::default())).unwrap().usage.storage.unwrap();
    assert_eq!(u.cost, u.reads * 1_000 + u.writes * 2_000 + u.lists * 3_000);
    let free = StoragePrices { read: 0, write: 0, delete: 0, list: 0, request: 0, row_written: 0 };
    let (env, _kv) = journal();
    let a = agent(&env, 2, 1, AgentOptions { storage_prices: free, ..AgentOptions::default() });
    let u = block_on(a.send("r", "go", SendOptions::default())).unwrap().usage.storage.unwrap();
    assert_eq!(u.cost, 0);
    assert!(u.writes > 0);
}

/// Strict mode's run objects: each call to another object is a request, the rows it wrote are counted; the
/// index's KV operations are counted as KV ones.
#[test]
fn strict_mode_records_object_requests_and_rows_written() {
    let env = Env::objects();
    let u = block_on(agent(&env, 2, 1, AgentOptions::default()).send("r", "go", SendOptions::default()))
        .unwrap()
        .usage
        .storage
        .unwrap();
    assert!(u.requests >= 4 && u.rows_written >= 3, "{u:?}");
    assert!(u.writes >= 1, "the run's index entry: {u:?}");
    assert_eq!(u.cost, default_cost(&u));
}

/// The memory store counts nothing: no `storage` is shown, rather than a zero that looks measured.
#[test]
fn a_store_that_does_not_count_shows_no_storage() {
    let env = Env::new();
    let r = block_on(agent(&env, 1, 1, AgentOptions::default()).send("r", "go", SendOptions::default())).unwrap();
    assert_eq!(r.usage.storage, None);
    let (status, view) = get_run(&builder(&env, MockModel::new(vec![]), 2).build().unwrap(), "r");
    assert_eq!(status, 200);
    assert!(view["usage"].get("storage").is_none(), "{view}");
}

/// The counts survive a crash: what the crashed execution recorded before it died stays (its every 16th entry
/// records them), the execution that
/// finishes the run adds its own, and the run's state, its result and its `run.done` event agree.
#[test]
fn recorded_storage_survives_a_crash_and_shows_everywhere() {
    for crash_after in [6usize, 120, 200] {
        let (env, kv) = journal();
        let a = agent(&env, 60, 1, AgentOptions { max_steps: 100, ..AgentOptions::default() });
        let crash = SendOptions {
            crash: Some(CrashPoint { after_effects: crash_after, finish_in_flight: false }),
            ..SendOptions::default()
        };
        assert!(block_on(a.send("r", "go", crash)).is_err());
        // Recorded: what the crashed execution did up to its last 16th entry (none before its 16th).
        let before = stored(&env, "r");
        assert!(
            before.writes <= kv.counts().puts && before.cost == default_cost(&before),
            "after {crash_after}: {before:?}"
        );
        assert_eq!(before.is_empty(), crash_after == 6, "after {crash_after}: {before:?}");
        env.past_leases();
        let (opts, sink) = listening();
        let b = agent(&env, 60, 1, AgentOptions { max_steps: 100, ..AgentOptions::default() });
        let r = block_on(b.resume("r", opts)).unwrap().unwrap();
        let u = r.usage.storage.unwrap();
        assert!(u.writes > before.writes && u.reads > before.reads, "after {crash_after}: {before:?} then {u:?}");
        assert!(kv.counts().puts - u.writes >= 2, "after {crash_after}");
        assert_eq!(stored(&env, "r"), u, "after {crash_after}: the result is the state");
        let done = sink.events().into_iter().find_map(|e| match e.event {
            Event::RunDone { storage, .. } => Some(storage),
            _ => None,
        });
        assert_eq!(done, Some(Some(u)), "after {crash_after}: run.done carries it");
        let (_, view) = get_run(&b, "r");
        assert_eq!(view["usage"]["storage"]["writes"], json!(u.writes), "after {crash_after}: {view}");
        assert_eq!(view["usage"]["storage"]["costUsd"], json!(u.cost as f64 / 1e9));
    }
}
