//! Sizes are part of the model: whatever ran is recordable, whatever is recorded is readable, on every store.
//! Realistic runs through `Agent` — tool results of the allowed sizes, turns of eight of them, journals past one
//! Workers KV bulk read (25 MB) — on the memory store, the journal store over the KV simulator (which refuses a
//! value over 25 MiB and a bulk read over 25 MB, as Workers KV does) and strict mode's object store.

mod common;

use common::seeds::for_seeds;
use common::*;
use serde_json::json;
use std::cell::Cell;
use std::rc::Rc;
use steadfast::core::retry::RetryPolicy;
use steadfast::core::transcript::validate_transcript;
use steadfast::runtime::{
    AgentOptions, Clock, FnTool, ManualClock, ManualSleep, MockModel, MockTurn, SendOptions, Tool,
};
use steadfast::runtime::{ToolOutput, VecSink};
use steadfast::store::journal::MAX_PART_BYTES;
use steadfast::store::kv::{KvBackend, ListPage, PutOptions, MAX_BULK_GET_BYTES, MAX_VALUE_BYTES};
use steadfast::store::sim::{SimKv, SimOptions, WORKERS_INVOCATION_LIMIT};
use steadfast::store::{JournalOptions, JournalStore, MemoryKv};
use steadfast::{ErrorCode, RunStatus};

const MIB: usize = 1024 * 1024;

/// The journal store over a one-location KV simulator with Workers' 1,000 operations per invocation.
fn journal_env() -> (Env, SimKv) {
    let clock = ManualClock::new(1_700_000_000_000);
    let opts = SimOptions { invocation_limit: Some(WORKERS_INVOCATION_LIMIT), ..SimOptions::default() };
    let kv = SimKv::new(Rc::new(clock.clone()), opts);
    (Env::with_store(Rc::new(journal_over(&kv, &clock)), clock), kv)
}

/// A journal store ("process") over `kv`'s data, in a new invocation of its own.
fn journal_over(kv: &SimKv, clock: &ManualClock) -> JournalStore<SimKv> {
    let sleep = Rc::new(ManualSleep::new(clock.clone()));
    JournalStore::new(kv.at(0), Rc::new(clock.clone()), sleep, JournalOptions::default())
}

/// Every store, with the KV simulator of the journal store.
fn every_store() -> Vec<(&'static str, Env, Option<SimKv>)> {
    let (journal, kv) = journal_env();
    vec![("memory", Env::new(), None), ("journal/SimKv", journal, Some(kv)), ("object", Env::objects(), None)]
}

/// Eight tools `t0`..`t7`, each answering `bytes` bytes at once (a turn's calls settle together: one group
/// commit records them all), counting their runs in `counters`.
fn eight_tools(bytes: usize, counters: &Counters) -> Vec<Rc<dyn Tool>> {
    (0..8)
        .map(|i| {
            let (c, name) = (counters.clone(), format!("t{i}"));
            Rc::new(FnTool::new(&name.clone(), "answers a lot", object_schema(), move |args, _ctx| {
                let n = c.hit(&name);
                let head = format!("{name} run {n} turn {}:", args["turn"]);
                let out = format!("{head}{}", "r".repeat(bytes - head.len()));
                async move { Ok(ToolOutput::text(out)) }
            })) as Rc<dyn Tool>
        })
        .collect()
}

/// A model turn calling all eight tools.
fn eight_calls(turn: usize) -> MockTurn {
    MockTurn::tools((0..8).map(|i| (format!("t{i}"), json!({ "turn": turn }))))
}

/// With the default limits (results of 256 KiB, eight calls a turn), thirteen turns of eight ~244 KiB results
/// make a journal of ~26 MB. The run finishes; then another process loads it, `GET /runs/{id}` answers, its
/// history reads, and the next send continues the conversation — each within one invocation's 1,000 KV
/// operations, every bulk read within KV's 25 MB. (The store read a run's entries in bulk gets of 100 keys, one
/// over 25 MB, which Workers KV refuses with 413: the finished run could never be read again.)
#[test]
fn a_run_whose_results_total_over_25_mb_finishes_and_stays_readable_on_kv() {
    const TURNS: usize = 13;
    let (env, kv) = journal_env();
    let counters = Counters::default();
    let mut script: Vec<MockTurn> = (0..TURNS).map(eight_calls).collect();
    script.push(MockTurn::text("all read"));
    let options = AgentOptions { max_steps: TURNS as u32 + 1, ..AgentOptions::default() };
    let agent = env.agent_with(MockModel::by_turn(script), eight_tools(250_000, &counters), options.clone(), "");
    let done = block_on(agent.send("wide", "read everything", SendOptions::default())).unwrap();
    assert_eq!(done.status, RunStatus::Finished);
    assert!(validate_transcript(&done.messages).is_ok());
    let journal: usize = kv.keys().iter().filter(|k| k.contains("/j/")).map(|k| kv.raw(k).unwrap().len()).sum();
    assert!(journal > 26_000_000, "the journal holds {journal} bytes");
    assert!(kv.keys().iter().all(|k| kv.raw(k).unwrap().len() <= MAX_PART_BYTES), "no value over a part");

    // Another process: load, GET /runs/{id}, history, each in an invocation of its own.
    let reader_kv = kv.at(0);
    let reader = env_over(&reader_kv, &env.clock).agent_with(MockModel::new(vec![]), vec![], options.clone(), "");
    kv.reset_counts();
    let loaded = block_on(reader.load("wide")).unwrap().expect("the finished run loads");
    assert_eq!(loaded.messages, done.messages);
    let c = kv.counts();
    println!("load of a {journal}-byte journal: {c:?}");
    // The lease, then the end marker and the 28 entries (~26 MB) with the keys past them: one bulk get of 100 keys,
    // refused (over 25 MB), its first half refused again, then three bulk gets within 25 MB each.
    assert!(c.bulk_gets - c.bulk_refused >= journal.div_ceil(MAX_BULK_GET_BYTES) as u64, "{c:?}");
    assert_eq!((c.gets, c.bulk_gets, c.bulk_refused, c.operations()), (1, 5, 2, 6), "the load: {c:?}");
    let (status, body) = get_run(&reader, "wide");
    assert_eq!((status, body["status"].as_str()), (200, Some("finished")), "GET /runs/{{id}}");
    let history = block_on(reader.history("wide", 3)).unwrap();
    assert_eq!(history.len(), 3);
    assert_eq!(history[0].checkpoint, loaded, "newest first");
    drop(history);
    println!("load, GET /runs/{{id}} and history: {} KV operations", reader_kv.invocation_operations());
    assert!(reader_kv.invocation_operations() <= 20, "{} operations", reader_kv.invocation_operations());

    // The next send continues the conversation, from a process that never read the run.
    env.clock.advance(2_000);
    let next_kv = kv.at(0);
    let next = env_over(&next_kv, &env.clock).agent_with(
        MockModel::new(vec![MockTurn::text("and one more")]),
        eight_tools(250_000, &counters),
        options,
        "",
    );
    let more = block_on(next.send("wide", "one more thing", SendOptions::default())).unwrap();
    assert_eq!((more.status, more.text.as_str()), (RunStatus::Finished, "and one more"));
    assert_eq!(more.messages.len(), done.messages.len() + 2);
    assert_eq!(block_on(next.load("wide")).unwrap().unwrap().messages, more.messages);
    println!("the next send: {} KV operations", next_kv.invocation_operations());
    assert!(next_kv.invocation_operations() <= 25, "{} operations", next_kv.invocation_operations());
    for i in 0..8 {
        assert_eq!(counters.get(&format!("t{i}")), TURNS as u32, "t{i} ran once a turn");
    }
}

/// An `Env` whose store is a new journal store ("process") over `kv`.
fn env_over(kv: &SimKv, clock: &ManualClock) -> Env {
    let sleep = Rc::new(ManualSleep::new(clock.clone()));
    let store = JournalStore::new(kv.clone(), Rc::new(clock.clone()), sleep, JournalOptions::default());
    Env::with_store(Rc::new(store), clock.clone())
}

/// With the largest allowed results (`maxToolResultBytes` 4 MiB) eight calls settling together make one entry of
/// ~32 MiB, over KV's 25 MiB value limit. It is recorded on every store: the model call after it fails, the run
/// stays resumable, and the resume finishes it without running any of the eight again; another process reads
/// every result back. (The entry used to be refused for good after all eight effects ran: the run failed,
/// none of their results kept, and a resume would run them all again.)
#[test]
fn a_turn_of_eight_4_mib_results_is_recorded_and_no_tool_runs_again() {
    for (name, env, kv) in every_store() {
        let counters = Counters::default();
        let down = Rc::new(Cell::new(true));
        let flaky = {
            let down = down.clone();
            MockTurn::func(move |_| if down.get() { MockTurn::error(500) } else { MockTurn::text("all read") })
        };
        let options = AgentOptions {
            max_tool_result_bytes: 4 * MIB,
            retry: RetryPolicy { max_attempts: 1, ..RetryPolicy::default() },
            ..AgentOptions::default()
        };
        let model = MockModel::by_turn(vec![eight_calls(0), flaky]);
        let agent = env.agent_with(model, eight_tools(4 * MIB - 512, &counters), options.clone(), "");
        let sink = VecSink::new();
        let opts = SendOptions { events: Some(Rc::new(sink.clone())), ..SendOptions::default() };
        let err = block_on(agent.send("heavy", "read all eight", opts)).unwrap_err();
        assert_eq!(err.code, ErrorCode::ProviderUnavailable, "{name}: the model call after the results: {err}");
        let stored = block_on(agent.load("heavy")).unwrap().expect("stored");
        assert_eq!(stored.status, RunStatus::InProgress, "{name}");
        let results: usize = stored.messages.iter().map(|m| serde_json::to_string(m).unwrap().len()).sum();
        assert!(results > MAX_VALUE_BYTES + 6 * MIB, "{name}: the recorded turn holds {results} bytes");
        for i in 0..8 {
            assert_eq!(counters.get(&format!("t{i}")), 1, "{name}: t{i} ran once");
        }
        if let Some(kv) = &kv {
            let largest = kv.keys().iter().map(|k| kv.raw(k).unwrap().len()).max().unwrap();
            assert!(largest <= MAX_PART_BYTES, "{name}: the largest KV value is {largest} bytes");
        }
        down.set(false);
        env.clock.advance(61_000);
        let done = block_on(agent.resume("heavy", SendOptions::default())).unwrap().expect("resumed");
        assert_eq!((done.status, done.text.as_str()), (RunStatus::Finished, "all read"), "{name}");
        for i in 0..8 {
            assert_eq!(counters.get(&format!("t{i}")), 1, "{name}: t{i} did not run again");
        }
        let again = env.agent_with(MockModel::new(vec![]), vec![], options, "");
        assert_eq!(block_on(again.load("heavy")).unwrap().unwrap().messages, done.messages, "{name}");
        assert!(validate_transcript(&done.messages).is_ok(), "{name}");
    }
}

/// A KV that fails the writes of journal entries (transiently, as a 503 would) after the first `allowed`, while
/// `failing` is set.
#[derive(Clone)]
struct FailingEntries {
    inner: MemoryKv,
    allowed: Rc<Cell<usize>>,
    failing: Rc<Cell<bool>>,
    attempts: Rc<Cell<usize>>,
}

#[async_trait::async_trait(?Send)]
impl KvBackend for FailingEntries {
    async fn get(&self, key: &str) -> steadfast::Result<Option<String>> {
        self.inner.get(key).await
    }
    async fn get_many(&self, keys: &[String]) -> steadfast::Result<Vec<Option<String>>> {
        self.inner.get_many(keys).await
    }
    async fn put(&self, key: &str, value: &str, opts: PutOptions) -> steadfast::Result<()> {
        if key.contains("/j/") {
            match self.allowed.get() {
                0 if self.failing.get() => {
                    self.attempts.set(self.attempts.get() + 1);
                    let e = steadfast::Error::new(ErrorCode::StoreUnavailable, "KV PUT failed: 503 (injected)");
                    return Err(e.with_status(503));
                }
                0 => {}
                n => self.allowed.set(n - 1),
            }
        }
        self.inner.put(key, value, opts).await
    }
    async fn delete(&self, key: &str) -> steadfast::Result<()> {
        self.inner.delete(key).await
    }
    async fn list(&self, prefix: &str, cursor: Option<&str>, limit: usize) -> steadfast::Result<ListPage> {
        self.inner.list(prefix, cursor, limit).await
    }
}

/// A commit whose write KV refuses transiently is retried only while the lease holds: the driver does not renew
/// the lease while it waits for a commit, and past the lease's expiry another process may take the run over
/// (cutting the journal before the entry). With a 5 s lease and every write of the run's second entry failing,
/// the commit gives up after the 1 s and 2 s retries, before the lease expires; the run stays resumable and the
/// resume finishes it. (The hot path was retried for up to 15 s — 1, 2, 4 and 8 s — past the lease, although
/// the store's docs said it was never retried.)
#[test]
fn a_failing_commit_is_retried_only_while_the_lease_holds() {
    let clock = ManualClock::new(1_700_000_000_000);
    let kv = FailingEntries {
        inner: MemoryKv::new(),
        allowed: Rc::new(Cell::new(1)),
        failing: Rc::new(Cell::new(true)),
        attempts: Rc::new(Cell::new(0)),
    };
    let sleep = Rc::new(ManualSleep::new(clock.clone()));
    let store = JournalStore::new(kv.clone(), Rc::new(clock.clone()), sleep, JournalOptions::default());
    let env = Env::with_store(Rc::new(store), clock.clone());
    let lease = steadfast::store::LeaseOptions { ttl_ms: 5_000, renew_every_ms: 2_000, grace_ms: 5_000 };
    let options = AgentOptions { lease, ..AgentOptions::default() };
    let counters = Counters::default();
    let script = vec![MockTurn::tools([("t", json!({}))]), MockTurn::text("done")];
    let agent = env.agent_with(MockModel::by_turn(script), vec![counting_tool("t", &counters)], options, "");
    let started = clock.now_ms();
    let err = block_on(agent.send("r", "go", SendOptions::default())).unwrap_err();
    assert_eq!((err.code, err.retryable), (ErrorCode::StoreUnavailable, true), "{err}");
    let spent = clock.now_ms() - started;
    assert!(spent < lease.ttl_ms, "the commit gave up after {spent} ms, past the lease");
    assert_eq!(kv.attempts.get(), 3, "the write and its retries 1 s and 2 s later");
    let stored = block_on(agent.load("r")).unwrap().expect("the first entry is stored");
    assert_eq!((stored.status, stored.seq), (RunStatus::InProgress, 1));
    kv.failing.set(false);
    clock.advance(11_000);
    let done = block_on(agent.resume("r", SendOptions::default())).unwrap().expect("resumed");
    assert_eq!((done.status, done.text.as_str()), (RunStatus::Finished, "done"));
    assert_eq!(counters.get("t"), 1);
}

/// Generated: journals of entries whose sizes sit around every threshold — a part (20 MiB, an entry over it is
/// split), a bulk read (25 MB), two parts — and far below, in characters of 1 to 4 bytes (a part is cut at a
/// character boundary), up to 45 MB a run, written by one process over the KV simulator, released finished or
/// not, or left by a process that died. Another process loads exactly the last state, its history's newest
/// state is that state, and a next owner continues the run and reads it back. No KV value is over 20 MiB and no
/// bulk read over 25 MB (the simulator refuses both).
#[test]
fn journals_of_generated_sizes_round_trip_on_kv_generated() {
    use steadfast::core::checkpoint::RunStatus as Status;
    use steadfast::runtime::{Rng, SplitMix64};
    use steadfast::store::conformance::{acquired, delta_entry, snapshot_entry};
    use steadfast::store::{LeaseOptions, RunStore};
    use steadfast::Message;
    for_seeds("journals_of_generated_sizes_round_trip_on_kv_generated", 0..6, |seed| {
        let rng = SplitMix64::new(seed);
        let pick = |n: u64| rng.next_u64() % n;
        let clock = ManualClock::new(1_700_000_000_000);
        let kv = SimKv::new(Rc::new(clock.clone()), SimOptions::default());
        let o = LeaseOptions::default();
        let writer = journal_over(&kv, &clock);
        let lease = block_on(acquired(&writer, "g", "w", clock.now_ms(), &o, "acquire"));
        let (e, mut cp) = snapshot_entry("g", "start", clock.now_ms());
        block_on(writer.commit(&lease, &e, &cp)).unwrap();
        let mut budget = 45_000_000;
        let mut sizes = Vec::new();
        while sizes.len() < 8 {
            let target = match pick(6) {
                0 | 1 => pick(3_000) as usize,
                2 => 1_000_000 + pick(3_000_000) as usize,
                3 => MAX_PART_BYTES - 400 + pick(800) as usize,
                4 => MAX_BULK_GET_BYTES - 400 + pick(800) as usize,
                _ => 2 * MAX_PART_BYTES - 400 + pick(800) as usize,
            };
            if target > budget {
                break;
            }
            budget -= target;
            let ch = ['a', 'é', '中', '😀'][pick(4) as usize];
            let text = ch.to_string().repeat(target / ch.len_utf8());
            sizes.push(text.len());
            clock.advance(pick(1_500));
            let (e, next) = delta_entry(&cp, Message::user(text), Status::InProgress, clock.now_ms());
            block_on(writer.commit(&lease, &e, &next)).unwrap_or_else(|err| panic!("{sizes:?}: {err}"));
            cp = next;
        }
        match pick(3) {
            0 => {
                let (e, next) = delta_entry(&cp, Message::assistant("done", vec![]), Status::Finished, 1);
                block_on(writer.commit(&lease, &e, &next)).unwrap();
                cp = next;
                block_on(writer.release_lease(&lease)).unwrap();
            }
            1 => block_on(writer.release_lease(&lease)).unwrap(),
            _ => {} // The writer died holding its lease.
        }
        drop(writer);
        println!("seed {seed}: entries of {sizes:?} bytes");
        clock.advance(2_000);
        let largest = kv.keys().iter().map(|k| kv.raw(k).unwrap().len()).max().unwrap();
        assert!(largest <= MAX_PART_BYTES, "{sizes:?}: a value of {largest} bytes");
        let reader = journal_over(&kv, &clock);
        assert!(block_on(reader.load("g")).unwrap() == Some(cp.clone()), "{sizes:?}: the load");
        let h = block_on(reader.history("g", 1)).unwrap();
        assert!(h.len() == 1 && h[0].checkpoint == cp, "{sizes:?}: the history");
        drop(h);
        // The next owner (after the dead one's lease expired) continues and reads the run back.
        clock.set(lease.expires_at + o.grace_ms);
        let next_owner = journal_over(&kv, &clock);
        let l2 = block_on(acquired(&next_owner, "g", "n", clock.now_ms(), &o, "take over"));
        assert!(block_on(next_owner.load("g")).unwrap() == Some(cp.clone()), "{sizes:?}: under the lease");
        let (e, last) = delta_entry(&cp, Message::user("and on"), Status::InProgress, clock.now_ms());
        drop(cp);
        block_on(next_owner.commit(&l2, &e, &last)).unwrap();
        block_on(next_owner.release_lease(&l2)).unwrap();
        clock.advance(1_000);
        assert!(block_on(journal_over(&kv, &clock).load("g")).unwrap() == Some(last), "{sizes:?}: continued");
    });
}

/// A KV whose writes of journal entries take `ms` of (simulated) time, during which, when `steal` is set,
/// another process takes the run's lease over (its record replaced by one naming another owner).
struct SlowEntries {
    inner: MemoryKv,
    clock: ManualClock,
    ms: u64,
    steal: Cell<bool>,
}

#[async_trait::async_trait(?Send)]
impl KvBackend for SlowEntries {
    async fn get(&self, key: &str) -> steadfast::Result<Option<String>> {
        self.inner.get(key).await
    }
    async fn get_many(&self, keys: &[String]) -> steadfast::Result<Vec<Option<String>>> {
        self.inner.get_many(keys).await
    }
    async fn put(&self, key: &str, value: &str, opts: PutOptions) -> steadfast::Result<()> {
        if let Some((run, _)) = key.split_once("/j/") {
            self.clock.advance(self.ms);
            let lease_key = format!("{run}/lease");
            if let (true, Some(raw)) = (self.steal.get(), self.inner.raw(&lease_key)) {
                let mut rec: serde_json::Value = serde_json::from_str(&raw).unwrap();
                rec["owner"] = json!("another");
                rec["epoch"] = json!(rec["epoch"].as_u64().unwrap() + 1);
                self.inner.set_raw(&lease_key, &rec.to_string());
            }
        }
        self.inner.put(key, value, opts).await
    }
    async fn delete(&self, key: &str) -> steadfast::Result<()> {
        self.inner.delete(key).await
    }
    async fn list(&self, prefix: &str, cursor: Option<&str>, limit: usize) -> steadfast::Result<ListPage> {
        self.inner.list(prefix, cursor, limit).await
    }
}

/// An entry acknowledged after the lease expired (a slow write: the lease is not renewed during a commit) is
/// reported committed only if the lease, read back, is still the writer's; if another process took the run over
/// meanwhile (its cut may lie before the entry, where no reader looks), the commit fails with
/// `STEADFAST_SESSION_BUSY`. (A late write used to be reported committed either way.)
#[test]
fn an_entry_written_past_the_lease_counts_only_while_the_lease_is_still_held() {
    use steadfast::store::conformance::{acquired, snapshot_entry};
    use steadfast::store::{LeaseOptions, RunStore};
    let clock = ManualClock::new(1_700_000_000_000);
    let kv = SlowEntries { inner: MemoryKv::new(), clock: clock.clone(), ms: 6_000, steal: Cell::new(false) };
    let sleep = Rc::new(ManualSleep::new(clock.clone()));
    let store = JournalStore::new(kv, Rc::new(clock.clone()), sleep, JournalOptions::default());
    let o = LeaseOptions { ttl_ms: 5_000, renew_every_ms: 2_000, grace_ms: 5_000 };
    let lease = block_on(acquired(&store, "kept", "w", clock.now_ms(), &o, "acquire"));
    let (e, cp) = snapshot_entry("kept", "x", clock.now_ms());
    block_on(store.commit(&lease, &e, &cp)).expect("written late, but the lease is still this writer's");
    assert!(clock.now_ms() >= lease.expires_at);
    assert!(block_on(store.load("kept")).unwrap() == Some(cp));
    store.kv().steal.set(true);
    let lease = block_on(acquired(&store, "taken", "w", clock.now_ms(), &o, "acquire"));
    let (e, cp) = snapshot_entry("taken", "x", clock.now_ms());
    let err = block_on(store.commit(&lease, &e, &cp)).expect_err("taken over while the entry was written");
    assert_eq!(err.code, ErrorCode::SessionBusy, "{err}");
    let err = block_on(store.commit(&lease, &e, &cp)).expect_err("and the writer knows it lost the lease");
    assert_eq!(err.code, ErrorCode::SessionBusy, "{err}");
}
