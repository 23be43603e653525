//! Watching a run: `GET /runs/{id}/events` and [`Agent::watch`] — recorded events replayed from the journal
//! from any `Last-Event-ID` (each once, none missing), journal positions as the SSE ids, `204` for a watcher
//! that saw the end, a gap reported when the journal no longer holds what was asked for, and the new events
//! of a run executing elsewhere: by reading it again (KV mode), or told by a hub of watchers at once with the
//! unrecorded events live (a run object in strict mode), to several watchers, one joining mid-run.

mod common;

use common::*;
use futures::executor::LocalPool;
use futures::task::LocalSpawnExt;
use serde_json::{json, Value};
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use steadfast::core::events::{Event, EventEnvelope};
use steadfast::core::replay::Cursor;
use steadfast::front::api::{Api, ApiRequest, ApiResponse};
use steadfast::runtime::{
    Agent, AgentOptions, FnTool, ManualClock, ManualSleep, MockModel, MockTurn, SendOptions, Sleep, SplitMix64, Tool,
    ToolOutput, WatchOptions, Watched, Watchers,
};
use steadfast::store::{MemoryStore, RunStore};

const TOKEN: &str = "watch-token";

fn req(method: &str, path: &str, body: &str, headers: &[(&str, &str)]) -> ApiRequest {
    let mut h = vec![("authorization".to_string(), format!("Bearer {TOKEN}"))];
    h.extend(headers.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    ApiRequest { method: method.into(), path: path.into(), query: vec![], headers: h, body: body.as_bytes().to_vec() }
}

fn call(api: &Api, r: ApiRequest) -> ApiResponse {
    block_on(async { api.handle(r).await.collected().await })
}

/// One SSE block: an event (its JSON) or an id-only block (a journal cursor).
#[derive(Clone, Debug, PartialEq)]
enum Block {
    Event(Value),
    Id(String),
}

fn blocks(text: &str) -> Vec<Block> {
    text.split("\n\n")
        .filter(|b| !b.trim().is_empty() && !b.starts_with(':'))
        .map(|b| match b.strip_prefix("id: ") {
            Some(id) => {
                assert!(!id.contains('\n'), "an id block holds only the id: {b:?}");
                Block::Id(id.to_string())
            }
            None => {
                assert!(!b.lines().any(|l| l.starts_with("id:")), "an event block carries no id: {b:?}");
                let data = b
                    .lines()
                    .find_map(|l| l.strip_prefix("data: "))
                    .unwrap_or_else(|| panic!("no data line: {b:?} in {text}"));
                Block::Event(serde_json::from_str(data).unwrap())
            }
        })
        .collect()
}

/// An event as the journal records it: without what a stream adds (`seq`, `at`) or the journal does not keep
/// (`replacedBy`).
fn recorded(v: &Value) -> Option<Value> {
    let t = v["type"].as_str().unwrap();
    let keep = matches!(t, "step" | "tool.done" | "approval.requested" | "error")
        || (t == "run.done" && v["status"] != "in-progress");
    keep.then(|| {
        let mut v = v.clone();
        let o = v.as_object_mut().unwrap();
        for k in ["seq", "at", "replacedBy", "v"] {
            o.remove(k);
        }
        v
    })
}

fn recorded_events(bs: &[Block]) -> Vec<Value> {
    bs.iter()
        .filter_map(|b| match b {
            Block::Event(v) => recorded(v),
            Block::Id(_) => None,
        })
        .collect()
}

fn fixture(store: Rc<dyn RunStore>) -> (Api, Counters) {
    let env = Env::with_store(store, ManualClock::new(1_700_000_000_000));
    let counters = Counters::default();
    let model = MockModel::by_turn(vec![
        MockTurn::tools([("lookup", json!({"order": 1})), ("lookup", json!({"order": 2}))]),
        MockTurn::tools([("refund", json!({"order": 1}))]),
        MockTurn::text("Refunded."),
    ]);
    let options = AgentOptions { tool_concurrency: 1, ..AgentOptions::default() };
    let tools = vec![counting_tool("lookup", &counters), gated_tool("refund", &counters)];
    (Api::new(env.agent_with(model, tools, options, ""), Some(TOKEN.into())), counters)
}

const SSE: (&str, &str) = ("accept", "text/event-stream");

/// A run that pauses on an approval (answered as SSE: its stream) and is approved (answered as JSON).
fn approved_run(api: &Api) -> Vec<Block> {
    let first = call(api, req("POST", "/runs/w", r#"{"input": "refund order 1"}"#, &[SSE]));
    assert_eq!(first.status, 200, "{}", first.body);
    let first = blocks(&first.body);
    let approval = first
        .iter()
        .find_map(|b| match b {
            Block::Event(v) if v["type"] == "approval.requested" => Some(v["approvalId"].as_str().unwrap().to_string()),
            _ => None,
        })
        .expect("the run asked for an approval");
    let second = call(api, req("POST", &format!("/approvals/{approval}"), r#"{"approved": true}"#, &[]));
    assert_eq!(second.status, 200, "{}", second.body);
    first
}

#[test]
fn a_watcher_replays_the_journal_from_every_cursor_each_recorded_event_once() {
    let (api, counters) = fixture(Rc::new(MemoryStore::new()));
    let first = approved_run(&api);
    // The execution's own stream ends with the cursor of the pause: `<position>.done`.
    let Some(Block::Id(paused)) = first.last() else { panic!("{first:?}") };
    let paused = Cursor::parse(paused).unwrap();
    assert!(paused.ended);

    let whole = call(&api, req("GET", "/runs/w/events", "", &[]));
    assert_eq!(whole.status, 200, "{}", whole.body);
    assert!(whole.headers.iter().any(|(k, v)| k == "content-type" && v == "text/event-stream"));
    let whole = blocks(&whole.body);
    // The journal says what the live stream said, in the same order, and then the rest of the run.
    let (live, replayed) = (recorded_events(&first), recorded_events(&whole));
    assert_eq!(replayed[..live.len()], live[..]);
    assert_eq!(replayed.len(), 9, "3 steps, 3 results, 1 approval, the pause and the end: {replayed:?}");
    assert!(matches!(whole.last(), Some(Block::Id(id)) if id.ends_with(".done")), "{whole:?}");
    // The stream's ids are the positions the live stream named, in order.
    let ids = |bs: &[Block]| -> Vec<String> {
        bs.iter()
            .filter_map(|b| match b {
                Block::Id(id) if !id.ends_with(".done") => Some(id.clone()),
                _ => None,
            })
            .collect()
    };
    let (live_ids, whole_ids) = (ids(&first), ids(&whole));
    assert_eq!(whole_ids[..live_ids.len() - 1], live_ids[1..], "the first live id is where the run started");
    // Every event of the watch is numbered without gaps.
    let seqs: Vec<u64> = whole
        .iter()
        .filter_map(|b| match b {
            Block::Event(v) => v["seq"].as_u64(),
            _ => None,
        })
        .collect();
    assert_eq!(seqs, (0..seqs.len() as u64).collect::<Vec<_>>());

    // From each cursor: exactly what the whole replay has after it.
    let cursors: Vec<(usize, String)> = whole
        .iter()
        .enumerate()
        .filter_map(|(i, b)| match b {
            Block::Id(id) => Some((i, id.clone())),
            _ => None,
        })
        .collect();
    assert!(cursors.len() >= 6, "one cursor per entry: {cursors:?}");
    for (i, cursor) in &cursors {
        let rest = call(&api, req("GET", "/runs/w/events", "", &[("last-event-id", cursor)]));
        if Some(&Block::Id(cursor.clone())) == whole.last() {
            assert_eq!((rest.status, rest.body.as_str()), (204, ""), "a watcher that saw the end gets nothing");
            continue;
        }
        assert_eq!(rest.status, 200, "{cursor}: {}", rest.body);
        let rest = blocks(&rest.body);
        assert_eq!(recorded_events(&rest), recorded_events(&whole[i + 1..]), "after {cursor}");
        // The same through the query parameter (a client that cannot set headers).
        let mut q = req("GET", "/runs/w/events", "", &[]);
        q.query.push(("after".into(), cursor.clone()));
        assert_eq!(recorded_events(&blocks(&call(&api, q).body)), recorded_events(&rest));
    }
    // The cursor the paused run's stream ended with: after the approval, the rest of the run.
    let after_pause =
        blocks(&call(&api, req("GET", "/runs/w/events", "", &[("last-event-id", &paused.to_string())])).body);
    let at = whole.iter().position(|b| *b == Block::Id(paused.position.to_string())).unwrap();
    assert_eq!(recorded_events(&after_pause), recorded_events(&whole[at + 1..]));
    assert!(recorded_events(&after_pause).iter().any(|v| v["type"] == "tool.done" && v["name"] == "refund"));
    // Watching ran nothing.
    assert_eq!((counters.get("lookup"), counters.get("refund")), (2, 1));
}

#[test]
fn bad_cursors_unknown_runs_and_other_methods_are_coded_errors() {
    let (api, _) = fixture(Rc::new(MemoryStore::new()));
    approved_run(&api);
    for bad in ["x", "-1", "3.5", "1.done.done", "４"] {
        let r = call(&api, req("GET", "/runs/w/events", "", &[("last-event-id", bad)]));
        assert_eq!(r.status, 400, "{bad}: {}", r.body);
        assert!(r.body.contains("STEADFAST_INVALID_INPUT"), "{}", r.body);
    }
    let r = call(&api, req("GET", "/runs/nope/events", "", &[]));
    assert_eq!(r.status, 404, "{}", r.body);
    assert!(r.body.contains("STEADFAST_CHECKPOINT_NOT_FOUND"), "{}", r.body);
    let r = call(&api, req("POST", "/runs/w/events", "{}", &[]));
    assert_eq!(r.status, 405, "{}", r.body);
    let mut anonymous = req("GET", "/runs/w/events", "", &[]);
    anonymous.headers.clear();
    assert_eq!(call(&api, anonymous).status, 401);
    // A cursor past the run's newest position: nothing replayed, the run's end (it is finished).
    let r = blocks(&call(&api, req("GET", "/runs/w/events", "", &[("last-event-id", "999")])).body);
    assert!(matches!(&r[..], [Block::Event(v), Block::Id(_)] if v["type"] == "run.done"), "{r:?}");
}

#[test]
fn a_cursor_older_than_the_kept_history_gets_a_gap_then_the_rest() {
    let (api, _) = fixture(Rc::new(MemoryStore::with_history_limit(3)));
    approved_run(&api);
    let whole = blocks(&call(&api, req("GET", "/runs/w/events", "", &[])).body);
    let Block::Event(first) = &whole[0] else { panic!("{whole:?}") };
    assert_eq!(first["type"], "replay.gap", "{whole:?}");
    let (after, until) = (first["after"].as_u64().unwrap(), first["until"].as_u64().unwrap());
    assert_eq!(after, 1);
    let Some(Block::Id(end)) = whole.last() else { panic!() };
    let newest = Cursor::parse(end).unwrap().position;
    assert_eq!(until, newest - 2, "three states kept: the base and two entries after it");
    let ids: Vec<&Block> = whole.iter().filter(|b| matches!(b, Block::Id(_))).collect();
    assert_eq!(ids.len(), 3, "two entries replayed, then the end: {whole:?}");
}

/// A sleep that never ends: a watcher that waits on it hears of news only from its hub.
struct NeverSleep;

#[async_trait::async_trait(?Send)]
impl Sleep for NeverSleep {
    async fn sleep(&self, _ms: u64) {
        futures::future::pending::<()>().await
    }
}

/// A timer that gives the executor a few turns and moves no clock (a watcher polling beside a run whose lease
/// the simulated clock must not expire).
struct YieldSleep;

#[async_trait::async_trait(?Send)]
impl Sleep for YieldSleep {
    async fn sleep(&self, _ms: u64) {
        for _ in 0..3 {
            yield_now().await;
        }
    }
}

/// A tool that takes `turns` turns of the executor (other tasks run meanwhile).
fn slow_tool(name: &str, turns: usize, counters: &Counters) -> Rc<dyn Tool> {
    let c = counters.clone();
    Rc::new(FnTool::new(name, name, object_schema(), move |_args, ctx| {
        let c = c.clone();
        async move {
            for _ in 0..turns {
                yield_now().await;
            }
            c.hit(&format!("call:{}", ctx.tool_call_id));
            Ok(ToolOutput::text("ok"))
        }
    }))
}

fn agent(
    store: Rc<dyn RunStore>,
    clock: &ManualClock,
    sleep: Rc<dyn Sleep>,
    hub: Option<&Watchers>,
    c: &Counters,
) -> Agent {
    let model = MockModel::by_turn(vec![
        MockTurn::tools([("slow", json!({"n": 1})), ("slow", json!({"n": 2}))]),
        MockTurn::tools([("slow", json!({"n": 3}))]),
        MockTurn::text("Done."),
    ]);
    let b = Agent::builder(model).rng(Rc::new(SplitMix64::new(7)));
    on(b.options(one_at_a_time()).tool_rc(slow_tool("slow", 40, c)), store, clock, sleep, hub)
}

/// One tool call at a time.
fn one_at_a_time() -> AgentOptions {
    AgentOptions { tool_concurrency: 1, ..AgentOptions::default() }
}

/// `b` over `store`, `clock` and `sleep`, its executions reported to `hub` (if any), built.
fn on(
    b: steadfast::runtime::AgentBuilder,
    store: Rc<dyn RunStore>,
    clock: &ManualClock,
    sleep: Rc<dyn Sleep>,
    hub: Option<&Watchers>,
) -> Agent {
    let mut b = b.store_rc(store).clock(Rc::new(clock.clone())).sleep(sleep);
    if let Some(hub) = hub {
        b = b.observer(Rc::new(hub.clone()));
    }
    b.build().unwrap()
}

type Seen = Rc<RefCell<Vec<Watched>>>;

fn watcher(seen: &Seen) -> impl Fn(Watched) -> bool {
    let seen = seen.clone();
    move |w| {
        seen.borrow_mut().push(w);
        true
    }
}

fn recorded_of(seen: &[Watched]) -> Vec<Event> {
    seen.iter()
        .filter_map(|w| match w {
            Watched::Event(e, _) if steadfast::core::replay::is_recorded(e) => Some(e.clone()),
            _ => None,
        })
        .collect()
}

fn last_cursor(seen: &[Watched]) -> Option<Cursor> {
    seen.iter().rev().find_map(|w| match w {
        Watched::Through(c) => Some(*c),
        _ => None,
    })
}

/// Waits (giving way) until run `id` exists.
async fn exists(agent: &Agent, id: &str) {
    while agent.load(id).await.unwrap().is_none() {
        yield_now().await;
    }
}

fn positions(seen: &[Watched]) -> Vec<u64> {
    seen.iter()
        .filter_map(|w| match w {
            Watched::Through(c) if !c.ended => Some(c.position),
            _ => None,
        })
        .collect()
}

fn unrecorded(seen: &[Watched]) -> Vec<Event> {
    seen.iter()
        .filter_map(|w| match w {
            Watched::Event(e, _) if !steadfast::core::replay::is_recorded(e) => Some(e.clone()),
            _ => None,
        })
        .collect()
}

/// Two "processes" over one store, without a hub: `runner` sends run `id` ("go") while `watching` watches it from
/// the start, reading it every 5 ms. What the watcher was sent, and whether the watch ended.
fn watched_beside(runner: &Agent, watching: &Agent, id: &'static str) -> (Vec<Watched>, bool) {
    let mut pool = LocalPool::new();
    let seen: Seen = Rc::default();
    let done = Rc::new(Cell::new(false));
    let (d, s, w, r) = (done.clone(), seen.clone(), watching.clone(), runner.clone());
    let opts = WatchOptions { poll_ms: 5, max_ms: 10_000_000 };
    pool.spawner()
        .spawn_local(async move {
            exists(&w, id).await;
            w.watch(id, Cursor::default(), None, opts, &watcher(&s)).await.unwrap();
            d.set(true);
        })
        .unwrap();
    pool.spawner().spawn_local(async move { drop(r.send(id, "go", SendOptions::default()).await.unwrap()) }).unwrap();
    pool.run_until_stalled();
    let seen = seen.borrow().clone();
    (seen, done.get())
}

#[test]
fn without_a_hub_a_watcher_reads_a_run_executing_elsewhere_until_it_ends() {
    let clock = ManualClock::new(1_700_000_000_000);
    let store: Rc<dyn RunStore> = Rc::new(MemoryStore::new());
    let c = Counters::default();
    let sleep: Rc<dyn Sleep> = Rc::new(ManualSleep::new(clock.clone()));
    // Two "processes" over one store: one executes, one watches.
    let runner = agent(store.clone(), &clock, sleep.clone(), None, &c);
    let watching = agent(store.clone(), &clock, sleep, None, &c);
    let (seen, done) = watched_beside(&runner, &watching, "k");
    assert!(done, "the watch ended with the run");
    let rec = recorded_of(&seen);
    assert_eq!(rec.iter().filter(|e| matches!(e, Event::Step { .. })).count(), 3, "{seen:?}");
    assert_eq!(rec.iter().filter(|e| matches!(e, Event::ToolDone { .. })).count(), 3, "{seen:?}");
    assert!(matches!(rec.last(), Some(Event::RunDone { steps: 3, .. })), "{rec:?}");
    assert!(last_cursor(&seen).unwrap().ended);
    assert!(unrecorded(&seen).is_empty(), "read again, not told: no unrecorded event reaches it");
    // Replayed events carry the time their entry was saved.
    let history = block_on(store.history("k", 100)).unwrap();
    let saved: std::collections::BTreeSet<u64> = history.iter().map(|h| h.saved_at).collect();
    assert!(seen.iter().all(|w| match w {
        Watched::Event(_, at) => at.is_some_and(|t| saved.contains(&t)),
        _ => true,
    }));
    let p = positions(&seen);
    assert!(p.len() >= 5 && p.windows(2).all(|w| w[0] < w[1]), "every position once, in order: {p:?}");
    for k in ["call:call_0_0", "call:call_0_1", "call:call_1_0"] {
        assert_eq!(c.get(k), 1, "{k}");
    }
}

#[test]
fn with_a_hub_watchers_hear_at_once_and_one_joining_mid_run_gets_the_missed_events_once() {
    let clock = ManualClock::new(1_700_000_000_000);
    let store: Rc<dyn RunStore> = Rc::new(MemoryStore::new());
    let c = Counters::default();
    let hub = Watchers::new();
    let runner = agent(store.clone(), &clock, Rc::new(ManualSleep::new(clock.clone())), Some(&hub), &c);
    // The watchers' timer never fires: only the hub can tell them anything.
    let watching = agent(store.clone(), &clock, Rc::new(NeverSleep), None, &c);
    let opts = WatchOptions { poll_ms: 1_000, max_ms: 10_000_000 };
    let mut pool = LocalPool::new();
    let (a_seen, b_seen): (Seen, Seen) = (Rc::default(), Rc::default());
    let ended = Rc::new(Cell::new(0));
    let b_from = Rc::new(Cell::new(None));
    {
        let (w, h, s, e) = (watching.clone(), hub.clone(), a_seen.clone(), ended.clone());
        pool.spawner()
            .spawn_local(async move {
                exists(&w, "h").await;
                w.watch("h", Cursor::default(), Some(&h), opts, &watcher(&s)).await.unwrap();
                e.set(e.get() + 1);
            })
            .unwrap();
    }
    {
        let (w, h, a, s, e, from) =
            (watching.clone(), hub.clone(), a_seen.clone(), b_seen.clone(), ended.clone(), b_from.clone());
        pool.spawner()
            .spawn_local(async move {
                // Joins once the first watcher has seen three entries, with its cursor (as `Last-Event-ID`).
                let cursor = loop {
                    match last_cursor(&a.borrow()) {
                        Some(c) if c.position >= 3 => break c,
                        _ => {}
                    }
                    yield_now().await;
                };
                from.set(Some(cursor));
                w.watch("h", cursor, Some(&h), opts, &watcher(&s)).await.unwrap();
                e.set(e.get() + 1);
            })
            .unwrap();
    }
    pool.spawner()
        .spawn_local(async move { drop(runner.send("h", "go", SendOptions::default()).await.unwrap()) })
        .unwrap();
    pool.run_until_stalled();
    assert_eq!(ended.get(), 2, "both watches ended with the run, told by the hub alone");
    assert!(hub.is_empty(), "a finished watch leaves the hub");
    let (a, b) = (a_seen.borrow(), b_seen.borrow());
    let from = b_from.get().unwrap();
    // The first watcher: the whole run, as the journal has it.
    let whole = block_on(watching.replay("h", 0)).unwrap().unwrap();
    let journal: Vec<Event> = whole.entries.into_iter().flat_map(|(_, _, e)| e).collect();
    assert_eq!(recorded_of(&a), journal);
    // The second: exactly what the first saw after the cursor it joined with — nothing twice, nothing missing.
    let cut = a.iter().position(|w| *w == Watched::Through(from)).unwrap();
    assert_eq!(recorded_of(&b), recorded_of(&a[cut + 1..]));
    assert!(!recorded_of(&b).is_empty());
    // Live, the unrecorded events: the first watcher heard every call start; the second the ones after it joined.
    let starts = |seen: &[Watched]| -> Vec<String> {
        unrecorded(seen)
            .into_iter()
            .filter_map(|e| match e {
                Event::ToolStart { tool_call_id, .. } => Some(tool_call_id),
                _ => None,
            })
            .collect()
    };
    let (a_starts, b_starts) = (starts(&a), starts(&b));
    assert!(b_starts.contains(&"call_1_0".to_string()), "the call started after it joined: {b_starts:?}");
    assert!(b_starts.iter().all(|s| a_starts.contains(s)), "{a_starts:?} {b_starts:?}");
    for k in ["call:call_0_0", "call:call_0_1", "call:call_1_0"] {
        assert_eq!(c.get(k), 1, "{k}: watching ran nothing again");
    }
}

#[test]
fn a_watcher_that_left_stops_the_watch_before_it_reads_the_run_again() {
    let clock = ManualClock::new(1_700_000_000_000);
    let store: Rc<dyn RunStore> = Rc::new(MemoryStore::new());
    let c = Counters::default();
    let runner = agent(store.clone(), &clock, Rc::new(ManualSleep::new(clock.clone())), None, &c);
    let watching = agent(store.clone(), &clock, Rc::new(ManualSleep::new(clock.clone())), None, &c);
    let mut pool = LocalPool::new();
    let (waits, ended_while_running) = (Rc::new(Cell::new(0)), Rc::new(Cell::new(false)));
    let (w, e) = (waits.clone(), ended_while_running.clone());
    let opts = WatchOptions { poll_ms: 5, max_ms: 10_000_000 };
    pool.spawner()
        .spawn_local(async move {
            exists(&watching, "gone").await;
            // The client goes as soon as the watch would wait for news.
            let push = |x: Watched| match x {
                Watched::Waiting => {
                    w.set(w.get() + 1);
                    false
                }
                _ => true,
            };
            watching.watch("gone", Cursor::default(), None, opts, &push).await.unwrap();
            let cp = watching.load("gone").await.unwrap().unwrap();
            e.set(cp.status == steadfast::core::checkpoint::RunStatus::InProgress);
        })
        .unwrap();
    pool.spawner()
        .spawn_local(async move { drop(runner.send("gone", "go", SendOptions::default()).await.unwrap()) })
        .unwrap();
    pool.run_until_stalled();
    assert_eq!(waits.get(), 1, "asked once, then it stopped");
    assert!(ended_while_running.get(), "the watch ended with its watcher, not with the run");
}

/// A tool that returns once `hub` has a subscriber (a watcher that joined).
fn gate(hub: &Watchers) -> Rc<dyn Tool> {
    let hub = hub.clone();
    Rc::new(FnTool::new("gate", "gate", object_schema(), move |_args, _ctx| {
        let hub = hub.clone();
        async move {
            while hub.is_empty() {
                yield_now().await;
            }
            Ok(ToolOutput::text("open"))
        }
    }))
}

/// A lead that waits for a watcher (`gate`), then delegates to sub-agent `plan`, whose agent calls the slow
/// tool twice, one call at a time.
fn team(
    store: Rc<dyn RunStore>,
    clock: &ManualClock,
    sleep: Rc<dyn Sleep>,
    hub: Option<&Watchers>,
    c: &Counters,
) -> Agent {
    let child = Agent::builder(MockModel::by_turn(vec![
        MockTurn::tools([("slow", json!({"n": 1})), ("slow", json!({"n": 2}))]),
        MockTurn::text("planned"),
    ]))
    .options(one_at_a_time())
    .tool_rc(slow_tool("slow", 40, c));
    let b = Agent::builder(MockModel::by_turn(vec![
        MockTurn::tools([("gate", json!({})), ("plan", json!({"task": "plan it"}))]),
        MockTurn::text("Done."),
    ]))
    .rng(Rc::new(SplitMix64::new(9)))
    .options(one_at_a_time())
    .tool_rc(gate(hub.unwrap_or(&Watchers::new())))
    .subagent("plan", "Plans", child);
    on(b, store, clock, sleep, hub)
}

#[test]
fn with_a_hub_a_leads_watcher_hears_its_childs_events_live_tagged_between_its_own() {
    let clock = ManualClock::new(1_700_000_000_000);
    let store: Rc<dyn RunStore> = Rc::new(MemoryStore::new());
    let c = Counters::default();
    let hub = Watchers::new();
    let runner = team(store.clone(), &clock, Rc::new(ManualSleep::new(clock.clone())), Some(&hub), &c);
    // The watcher's timer never fires: only the hub can tell it anything.
    let watching = team(store.clone(), &clock, Rc::new(NeverSleep), None, &c);
    let opts = WatchOptions { poll_ms: 1_000, max_ms: 10_000_000 };
    let mut pool = LocalPool::new();
    let seen: Seen = Rc::default();
    let ended = Rc::new(Cell::new(false));
    {
        let (w, h, s, e) = (watching.clone(), hub.clone(), seen.clone(), ended.clone());
        pool.spawner()
            .spawn_local(async move {
                exists(&w, "t").await;
                w.watch("t", Cursor::default(), Some(&h), opts, &watcher(&s)).await.unwrap();
                e.set(true);
            })
            .unwrap();
    }
    pool.spawner()
        .spawn_local(async move { drop(runner.send("t", "go", SendOptions::default()).await.unwrap()) })
        .unwrap();
    pool.run_until_stalled();
    assert!(ended.get(), "the watch ended with the lead");
    let seen = seen.borrow();
    let children: Vec<_> = seen
        .iter()
        .filter_map(|w| match w {
            Watched::Child(e) => Some(e.clone()),
            _ => None,
        })
        .collect();
    let child_id = children.first().map(|e| e.run_id.clone()).expect("the lead's watcher heard its child");
    assert!(children.iter().all(|e| e.run_id == child_id), "one child");
    let tag = children[0].subagent.clone().expect("tagged");
    assert_eq!((tag.name.as_str(), tag.depth, tag.parent.as_str()), ("plan", 1, "t"));
    // Everything the child's execution emitted, in its order: both calls' starts and ends, and its end.
    let seqs: Vec<u64> = children.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (0..children.len() as u64).collect::<Vec<_>>(), "{children:?}");
    let starts = children.iter().filter(|e| matches!(e.event, Event::ToolStart { .. })).count();
    assert_eq!(starts, 2, "{children:?}");
    assert!(matches!(children.last().unwrap().event, Event::RunDone { .. }));
    // Live, between the lead's own events: after the lead's turn that calls it, before the call's result.
    let at = |f: &dyn Fn(&Watched) -> bool| seen.iter().position(f).unwrap_or_else(|| panic!("{seen:?}"));
    let plan = |e: &Event| matches!(e, Event::ToolDone { name, .. } if name == "plan");
    let call_started = at(&|w| matches!(w, Watched::Event(Event::Step { tool_calls, .. }, _) if tool_calls.len() == 2));
    let first_child = at(&|w| matches!(w, Watched::Child(_)));
    let call_done = at(&|w| matches!(w, Watched::Event(e, _) if plan(e)));
    assert!(call_started < first_child && first_child < call_done, "{seen:?}");
    // The lead's own recorded events are the journal's, as for any watch.
    let whole = block_on(watching.replay("t", 0)).unwrap().unwrap();
    let journal: Vec<Event> = whole.entries.into_iter().flat_map(|(_, _, e)| e).collect();
    assert_eq!(recorded_of(&seen), journal);
    assert_eq!(c.get("call:call_0_0") + c.get("call:call_0_1"), 2, "the child's two calls ran once each");
}

/// A lead that delegates to sub-agent `plan`, whose agent delegates to `look` (which calls the slow tool) and
/// then calls the slow tool itself: three levels, each call one at a time.
fn three_levels(env: &Env, sleep: Rc<dyn Sleep>, c: &Counters) -> Agent {
    let look = Agent::builder(MockModel::by_turn(vec![
        MockTurn::tools([("slow", json!({"n": 1}))]),
        MockTurn::text("looked"),
    ]))
    .options(one_at_a_time())
    .tool_rc(slow_tool("slow", 40, c));
    let plan = Agent::builder(MockModel::by_turn(vec![
        MockTurn::tools([("look", json!({"task": "look it up"}))]),
        MockTurn::tools([("slow", json!({"n": 2}))]),
        MockTurn::text("planned"),
    ]))
    .options(one_at_a_time())
    .tool_rc(slow_tool("slow", 40, c))
    .subagent("look", "Looks", look);
    let b = Agent::builder(MockModel::by_turn(vec![
        MockTurn::tools([("slow", json!({"n": 0})), ("plan", json!({"task": "plan it"}))]),
        MockTurn::text("Done."),
    ]))
    .rng(Rc::new(SplitMix64::new(11)))
    .options(one_at_a_time())
    .tool_rc(slow_tool("slow", 40, c))
    .subagent("plan", "Plans", plan);
    on(b, env.store.clone(), &env.clock, sleep, None)
}

fn child_events(seen: &[Watched]) -> Vec<EventEnvelope> {
    seen.iter()
        .filter_map(|w| match w {
            Watched::Child(e) => Some(e.clone()),
            _ => None,
        })
        .collect()
}

/// KV mode's watch (no hub): the lead's watcher reads its child runs as it reads the lead, and sends each
/// child's recorded events tagged, between the call that started it and the call's result, on every store.
/// (The journal store over a KV without simulated latency: the simulator's sleeps, taken by the watcher's
/// many reads, would move the one simulated clock past the runner's leases.)
#[test]
fn without_a_hub_a_leads_watcher_reads_its_children_and_grandchildren_in_order() {
    let journal = || Env::journal_over(steadfast::store::MemoryKv::new(), ManualClock::new(1_700_000_000_000));
    let stores: [(&str, &dyn Fn() -> Env); 3] =
        [("memory", &Env::new), ("journal", &journal), ("objects", &Env::objects)];
    for (store_name, make) in stores {
        let env = make();
        let c = Counters::default();
        // No timer moves the clock: three levels' lease renewals would each move it as they fire.
        let runner = three_levels(&env, Rc::new(YieldSleep), &c);
        let watching = three_levels(&env, Rc::new(YieldSleep), &c);
        let (seen, done) = watched_beside(&runner, &watching, "t");
        assert!(done, "{store_name}: the watch ended with the lead");
        let opts = WatchOptions { poll_ms: 5, max_ms: 10_000_000 };
        let kids = child_events(&seen);
        let children = block_on(watching.children_of("t")).unwrap();
        assert_eq!(children.len(), 1, "{store_name}");
        let child = &children[0];
        let grandchildren = block_on(watching.children_of(&child.run_id)).unwrap();
        assert_eq!(grandchildren.len(), 1, "{store_name}");
        let grandchild = &grandchildren[0];
        // Each child's events are its journal's recorded events, each once, in order, seq from 0, tagged.
        for (run, name, depth, parent, call) in [
            (&child.run_id, "plan", 1, "t", &child.tool_call_id),
            (&grandchild.run_id, "look", 2, child.run_id.as_str(), &grandchild.tool_call_id),
        ] {
            let of: Vec<_> = kids.iter().filter(|e| &e.run_id == run).collect();
            let journal: Vec<Event> = block_on(watching.replay(run, 0))
                .unwrap()
                .unwrap()
                .entries
                .into_iter()
                .flat_map(|(_, _, e)| e)
                .collect();
            assert!(journal.iter().any(|e| matches!(e, Event::RunDone { .. })), "{store_name}: {journal:?}");
            assert_eq!(of.iter().map(|e| e.event.clone()).collect::<Vec<_>>(), journal, "{store_name} {run}");
            assert_eq!(of.iter().map(|e| e.seq).collect::<Vec<_>>(), (0..of.len() as u64).collect::<Vec<_>>());
            for e in &of {
                let tag = e.subagent.as_ref().expect("tagged");
                assert_eq!(
                    (tag.name.as_str(), tag.depth, tag.parent.as_str(), tag.tool_call_id.as_ref()),
                    (name, depth, parent, Some(call)),
                    "{store_name}"
                );
            }
        }
        assert_eq!(
            kids.len(),
            kids.iter().filter(|e| e.run_id == child.run_id || e.run_id == grandchild.run_id).count()
        );
        // Between the call and its result, at each level.
        let at = |f: &dyn Fn(&Watched) -> bool| seen.iter().position(f).unwrap_or_else(|| panic!("{seen:?}"));
        let last_at = |f: &dyn Fn(&Watched) -> bool| seen.iter().rposition(f).unwrap();
        fn of_run(run: &str) -> impl Fn(&Watched) -> bool + '_ {
            move |w| matches!(w, Watched::Child(e) if e.run_id == run)
        }
        let lead_calls =
            at(&|w| matches!(w, Watched::Event(Event::Step { tool_calls, .. }, _) if tool_calls.len() == 2));
        let lead_result = at(&|w| matches!(w, Watched::Event(Event::ToolDone { name, .. }, _) if name == "plan"));
        let (child_first, child_last) = (at(&of_run(&child.run_id)), last_at(&of_run(&child.run_id)));
        assert!(lead_calls < child_first && child_last < lead_result, "{store_name}: {seen:?}");
        let child_result = at(
            &|w| matches!(w, Watched::Child(e) if matches!(&e.event, Event::ToolDone { name, .. } if name == "look")),
        );
        let (grand_first, grand_last) = (at(&of_run(&grandchild.run_id)), last_at(&of_run(&grandchild.run_id)));
        assert!(child_first < grand_first && grand_last < child_result, "{store_name}: {seen:?}");
        // The lead's own recorded events are its journal's, as for any watch; every tool call ran once.
        let journal: Vec<Event> =
            block_on(watching.replay("t", 0)).unwrap().unwrap().entries.into_iter().flat_map(|(_, _, e)| e).collect();
        assert_eq!(recorded_of(&seen), journal, "{store_name}");
        assert_eq!(c.0.borrow().values().sum::<u32>(), 3, "{store_name}: {:?}", c.0.borrow());

        // A watcher coming back after the call was made hears the child no more (it was sent before, as far
        // as the cursor can say); one coming back from before the call hears it all again.
        let made = block_on(watching.replay("t", 0))
            .unwrap()
            .unwrap()
            .entries
            .iter()
            .find(|(_, _, es)| es.iter().any(|e| matches!(e, Event::Step { tool_calls, .. } if tool_calls.len() == 2)))
            .map(|(p, _, _)| *p)
            .unwrap();
        for (cursor, hears) in [(made, 0), (made - 1, kids.len())] {
            let again: Seen = Rc::default();
            block_on(watching.watch("t", Cursor { position: cursor, ended: false }, None, opts, &watcher(&again)))
                .unwrap();
            assert_eq!(child_events(&again.borrow()).len(), hears, "{store_name}: from {cursor}");
        }
    }
}

/// A child that cannot be read does not stop the watch of its lead (KV mode, no hub): a corrupt child journal is
/// sent as the child's `error` event and the lead's own events all come, to its end; a child whose kept history
/// no longer reaches its start gets a `replay.gap` event first, as the lead does.
#[test]
fn without_a_hub_an_unreadable_or_cut_child_is_reported_and_the_leads_watch_goes_on() {
    let opts = WatchOptions { poll_ms: 5, max_ms: 10_000_000 };
    for case in ["corrupt", "history of 2"] {
        let memory = match case {
            "corrupt" => MemoryStore::new(),
            _ => MemoryStore::with_history_limit(2),
        };
        let env = Env::with_store(Rc::new(memory.clone()), ManualClock::new(1_700_000_000_000));
        let c = Counters::default();
        let a = three_levels(&env, Rc::new(YieldSleep), &c);
        drop(block_on(a.send("t", "go", SendOptions::default())).unwrap());
        let child = block_on(a.children_of("t")).unwrap().remove(0);
        if case == "corrupt" {
            memory.corrupt_last_entry(&child.run_id);
        }
        let seen: Seen = Rc::default();
        block_on(a.watch("t", Cursor::default(), None, opts, &watcher(&seen))).unwrap();
        let seen = seen.borrow();
        let kids = child_events(&seen);
        let of_child: Vec<&Event> = kids.iter().filter(|e| e.run_id == child.run_id).map(|e| &e.event).collect();
        let lead = block_on(a.replay("t", 0)).unwrap().unwrap();
        let journal: Vec<Event> = lead.entries.into_iter().flat_map(|(_, _, e)| e).collect();
        assert_eq!(recorded_of(&seen), journal, "{case}: the lead's events, all of them");
        assert!(last_cursor(&seen).unwrap().ended, "{case}: to the lead's end");
        match case {
            "corrupt" => {
                assert!(
                    matches!(of_child.as_slice(), [Event::Error { error }] if error.code == steadfast::ErrorCode::CheckpointCorrupt),
                    "{of_child:?}"
                );
                // Nothing below a child that cannot be read.
                assert_eq!(kids.len(), 1, "{kids:?}");
            }
            _ => {
                assert!(matches!(of_child.first(), Some(Event::ReplayGap { after: 1, .. })), "{of_child:?}");
                assert!(matches!(of_child.last(), Some(Event::RunDone { .. })), "{of_child:?}");
                assert!(matches!(seen.first(), Some(Watched::Event(Event::ReplayGap { .. }, _))), "the lead's gap too");
            }
        }
    }
}
