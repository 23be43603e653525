//! Per-step cost of a run on the journal store, asserted: KV writes and bytes are deterministic (no clock in
//! them but the simulated one), so a change that makes them worse fails here. The workload is the peers
//! benchmark's: one user message, N model turns of two tool calls each whose tools complete together (~450-byte
//! answers), then a final text answer; JournalStore over a one-location SimKv.

mod common;

use common::*;
use serde_json::json;
use std::rc::Rc;
use steadfast::core::checkpoint::RunStatus;
use steadfast::core::transcript::validate_transcript;
use steadfast::runtime::{
    AgentOptions, FnTool, ManualClock, ManualSleep, MockModel, MockTurn, RunStats, SendOptions, Tool, ToolOutput,
};
use steadfast::store::kv::{KvBackend, ListPage, PutOptions};
use steadfast::store::sim::{SimKv, SimOptions};
use steadfast::store::{JournalOptions, JournalStore, RunStore};

/// Two tools answering at once (no await inside): the calls of a turn settle together.
fn tools_completing_together() -> Vec<Rc<dyn Tool>> {
    let text = "r".repeat(440);
    let mk = |name: &'static str| -> Rc<dyn Tool> {
        let text = text.clone();
        Rc::new(FnTool::new(name, name, json!({"type": "object"}), move |args, _ctx| {
            let out = format!("{name} {} {text}", args["i"]);
            async move { Ok(ToolOutput::text(out)) }
        }))
    };
    vec![mk("lookup"), mk("quote")]
}

fn script(steps: usize) -> Vec<MockTurn> {
    let mut s: Vec<MockTurn> = (0..steps)
        .map(|i| MockTurn::tools([("lookup", json!({"q": "item", "i": i})), ("quote", json!({"sku": i}))]))
        .collect();
    s.push(MockTurn::text("All items looked up and quoted."));
    s
}

/// Runs `steps` two-tool steps; returns the run's stats and the final transcript's JSON bytes.
fn run(steps: usize) -> (RunStats, u64) {
    let clock = ManualClock::new(1_700_000_000_000);
    let kv = SimKv::new(
        Rc::new(clock.clone()),
        SimOptions { locations: 1, propagation_ms: 60_000, ..SimOptions::default() },
    );
    let store = Rc::new(JournalStore::new(
        kv.clone(),
        Rc::new(clock.clone()),
        Rc::new(ManualSleep::new(clock.clone())),
        JournalOptions::default(),
    ));
    let env = Env::with_store(store.clone(), clock.clone());
    let options = AgentOptions { max_steps: steps as u32 + 1, ..AgentOptions::default() };
    let agent =
        env.agent_with(MockModel::new(script(steps)), tools_completing_together(), options, "Look up and quote.");
    let done = block_on(agent.send("cost", "Look up and quote every item.", SendOptions::default())).unwrap();
    assert_eq!(done.status, RunStatus::Finished);
    assert!(validate_transcript(&done.messages).is_ok());
    // The run's own figures are the store's and the KV's: nothing is left uncounted.
    let c = store.counters();
    assert_eq!((done.stats.store_writes, done.stats.store_bytes), (c.writes, c.bytes_written));
    let k = kv.counts();
    assert_eq!(k.puts + k.deletes, c.writes, "{k:?}");
    let transcript = serde_json::to_string(&done.messages).unwrap().len() as u64;
    (done.stats, transcript)
}

/// A two-tool step writes 2 journal entries (the model turn, then both results in one group commit); a run adds
/// 6 fixed writes: the lease, the start snapshot, the final entry, the end marker, and the pending index (listed
/// at the start, removed at the finish). So writes = 2 × steps + 6, all-in: 2.6 per step at 10 steps, 2.06 at 100,
/// 2.012 at 500 (3.60 / 3.06 / 3.41 before group commit; the 500-step run also deleted 200 pruned entries).
#[test]
fn a_two_tool_step_writes_two_entries_and_a_run_six_fixed_writes() {
    for steps in [10, 100, 500] {
        let (stats, _) = run(steps);
        assert_eq!(stats.commits, 2 * steps + 2, "{steps} steps: entries (start + 2 a step + final)");
        assert_eq!(stats.store_writes, 2 * steps as u64 + 6, "{steps} steps: KV writes, all-in");
        assert_eq!(stats.lease_renewals, 0, "{steps} steps");
    }
}

/// Bytes written over the final transcript's JSON bytes, all-in (lease, entries, index, end marker): at most
/// 1.18 at 10 steps, 1.12 at 100 and 500 (1.33 / 1.27 / 1.61 before: one entry per result, a ~70-byte envelope
/// on each, and a snapshot of a third of the transcript at 500 steps). The short envelope, the group commit and
/// no snapshot before 2,000 entries keep it there. (1.17 at 10 steps until the conversation's usage was kept: its
/// 46 bytes in the start snapshot; entries carry only the usage before the run, and only when it changes. 1.175 at
/// 10 steps until a run's storage usage was recorded: ~25 bytes on an execution's last entry and every 16th.)
#[test]
fn bytes_written_stay_within_18_percent_of_the_transcript() {
    for (steps, most) in [(10, 1.18), (100, 1.12), (500, 1.12)] {
        let (stats, transcript) = run(steps);
        let ratio = stats.store_bytes as f64 / transcript as f64;
        println!("{steps} steps: {} bytes written, transcript {transcript} bytes, ratio {ratio:.4}", stats.store_bytes);
        assert!(ratio <= most, "{steps} steps: bytes written / transcript = {ratio:.4} > {most}");
    }
}

/// A KV whose writes take `ms` of (simulated) time.
#[derive(Clone)]
struct SlowWrites {
    inner: SimKv,
    clock: ManualClock,
    ms: u64,
}

#[async_trait::async_trait(?Send)]
impl KvBackend for SlowWrites {
    async fn get(&self, key: &str) -> steadfast::Result<Option<String>> {
        self.inner.get(key).await
    }
    async fn get_many(&self, keys: &[String]) -> steadfast::Result<Vec<Option<String>>> {
        self.inner.get_many(keys).await
    }
    async fn put(&self, key: &str, value: &str, opts: PutOptions) -> steadfast::Result<()> {
        self.clock.advance(self.ms);
        self.inner.put(key, value, opts).await
    }
    async fn delete(&self, key: &str) -> steadfast::Result<()> {
        self.inner.delete(key).await
    }
    async fn list(&self, prefix: &str, cursor: Option<&str>, limit: usize) -> steadfast::Result<ListPage> {
        self.inner.list(prefix, cursor, limit).await
    }
}

/// A journal store over a one-location SimKv whose writes take `commit_ms` of simulated time.
fn slow_commits_env(commit_ms: u64) -> Env {
    let clock = ManualClock::new(1_700_000_000_000);
    let sim = SimKv::new(
        Rc::new(clock.clone()),
        SimOptions { locations: 1, propagation_ms: 60_000, ..SimOptions::default() },
    );
    let kv = SlowWrites { inner: sim, clock: clock.clone(), ms: commit_ms };
    let store = Rc::new(JournalStore::new(
        kv,
        Rc::new(clock.clone()),
        Rc::new(ManualSleep::new(clock.clone())),
        JournalOptions::default(),
    ));
    Env::with_store(store, clock)
}

/// Group commit across a gap: `quote` settles after `lookup`, either one poll later or only once the clock has
/// moved (on the simulated clock nothing moves it but the window's own timer: the call settles after the window
/// closed). The driver waits for the other calls of the turn up to one commit's time, and at least 10 ms
/// (commits that take no time, a Durable Object's, get that much): within it both results go into one entry
/// (2 entries a step); after it `lookup`'s result is committed alone (3 entries a step).
#[test]
fn results_settling_within_the_group_window_share_one_entry() {
    for (commit_ms, after_window, entries_per_step) in [(20, false, 2), (0, false, 2), (20, true, 3), (0, true, 3)] {
        let steps = 10;
        let env = slow_commits_env(commit_ms);
        let mut tools = tools_completing_together();
        let clock = env.clock.clone();
        tools[1] = Rc::new(FnTool::new("quote", "quote", json!({"type": "object"}), move |args, _ctx| {
            let clock = clock.clone();
            async move {
                let started = steadfast::runtime::Clock::now_ms(&clock);
                yield_now().await;
                while after_window && steadfast::runtime::Clock::now_ms(&clock) == started {
                    yield_now().await;
                }
                Ok(ToolOutput::text(format!("quote {}", args["sku"])))
            }
        }));
        let options = AgentOptions { max_steps: steps as u32 + 1, ..AgentOptions::default() };
        let agent = env.agent_with(MockModel::new(script(steps)), tools, options, "Look up and quote.");
        let done = block_on(agent.send("gap", "Look up and quote every item.", SendOptions::default())).unwrap();
        let case = format!("commits taking {commit_ms} ms, quote settling after the window: {after_window}");
        assert_eq!(done.status, RunStatus::Finished, "{case}");
        assert!(validate_transcript(&done.messages).is_ok(), "{case}");
        assert_eq!(done.stats.commits, entries_per_step * steps + 2, "{case}");
    }
}

/// A call that aborts its own run is recorded as cancelled, never as executed, even when it settles in the same
/// group as other calls of its turn (it used to be recorded with its tool's answer once results were grouped).
/// Both orders of the two calls, with commits that take time (a window) and that take none.
#[test]
fn a_call_that_aborts_its_run_is_cancelled_even_when_it_settles_with_other_calls() {
    use steadfast::core::checkpoint::FinishReason;
    use steadfast::core::transcript::{Message, ResultKind};
    for (commit_ms, halt_first) in [(0, false), (0, true), (20, false), (20, true)] {
        let env = slow_commits_env(commit_ms);
        let halts = Rc::new(std::cell::Cell::new(0));
        let h = halts.clone();
        let mut tools = tools_completing_together();
        tools[1] = Rc::new(FnTool::new("quote", "aborts its run", json!({"type": "object"}), move |_args, ctx| {
            h.set(h.get() + 1);
            let abort = ctx.abort.clone();
            async move {
                abort.abort();
                Ok(ToolOutput::text("halted"))
            }
        }));
        let mut calls = vec![("lookup", json!({"i": 0})), ("quote", json!({"sku": 0}))];
        if halt_first {
            calls.reverse();
        }
        let script = vec![MockTurn::tools(calls), MockTurn::text("unreachable")];
        let agent = env.agent_with(MockModel::new(script), tools, AgentOptions::default(), "Look up and quote.");
        let done = block_on(agent.send("halt", "Look up and quote.", SendOptions::default())).unwrap();
        let case = format!("commits taking {commit_ms} ms, aborting call first: {halt_first}");
        assert_eq!(done.finish_reason, Some(FinishReason::Aborted), "{case}");
        assert!(validate_transcript(&done.messages).is_ok(), "{case}");
        assert_eq!(halts.get(), 1, "{case}: the aborting call ran once");
        let results: Vec<_> = done
            .messages
            .iter()
            .filter_map(|m| match m {
                Message::Tool(r) => Some(r.clone()),
                _ => None,
            })
            .collect();
        let quote = results.iter().find(|r| r.name == "quote").expect("the aborting call has a result");
        assert_eq!(quote.kind, ResultKind::Cancelled, "{case}: {quote:?}");
        assert_ne!(quote.content, "halted", "{case}");
    }
}

/// Strict mode (run objects; a commit there takes no time, so the group window is its 10 ms minimum): a two-tool
/// step whose calls settle a poll apart writes 2 rows, the model turn and both results (it wrote 3 when the
/// window was one commit's time, empty there); a run adds 3 fixed writes (its lease row, the index entry written
/// and removed): 2.5 a step at 10 steps, 2.05 at 100 (3.5 / 3.05 before).
#[test]
fn a_two_tool_step_in_strict_mode_writes_two_rows() {
    use steadfast::store::object::{LocalObjects, ObjectStore};
    use steadfast::store::MemoryKv;
    for steps in [10, 100] {
        let clock = ManualClock::new(1_700_000_000_000);
        let store = Rc::new(ObjectStore::new(
            LocalObjects::default(),
            MemoryKv::new(),
            "",
            Rc::new(clock.clone()),
            Rc::new(ManualSleep::new(clock.clone())),
        ));
        let env = Env::with_store(store.clone(), clock.clone());
        let mut tools = tools_completing_together();
        tools[1] = Rc::new(FnTool::new("quote", "quote", json!({"type": "object"}), move |args, _ctx| async move {
            yield_now().await;
            Ok(ToolOutput::text(format!("quote {}", args["sku"])))
        }));
        let options = AgentOptions { max_steps: steps as u32 + 1, ..AgentOptions::default() };
        let agent = env.agent_with(MockModel::new(script(steps)), tools, options, "Look up and quote.");
        let done = block_on(agent.send("strict", "Look up and quote every item.", SendOptions::default())).unwrap();
        assert_eq!(done.status, RunStatus::Finished);
        assert_eq!(done.stats.commits, 2 * steps + 2, "{steps} steps: rows (start + 2 a step + final)");
        assert_eq!(done.stats.store_writes, 2 * steps as u64 + 5, "{steps} steps: writes, all-in");
        assert_eq!(store.counters().writes, done.stats.store_writes, "{steps} steps: nothing uncounted");
    }
}
