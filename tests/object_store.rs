//! Strict mode's store (`ObjectStore` over run objects, `src/store/object.rs`), natively: the objects in this
//! process (`LocalObjects`, the same JSON calls and store logic as the Worker's Durable Objects) and the index
//! in a `MemoryKv`. The conformance suite runs in the module's own tests; these check its guarantees over
//! generated cases and a whole agent run. A failing seed prints a one-line reproduction (`STEADFAST_SEED=<n>`).

mod common;

use common::seeds::for_seeds;
use futures::executor::block_on;
use serde_json::json;
use std::rc::Rc;
use steadfast::core::checkpoint::{EntryBody, JournalEntry};
use steadfast::runtime::{Clock, ManualClock, ManualSleep, Rng, SplitMix64};
use steadfast::store::conformance::{acquired, delta_entry, snapshot_entry};
use steadfast::store::object::{LocalObjects, ObjectStore, MAX_ROW_BYTES};
use steadfast::store::{LeaseOptions, MemoryKv, RunStore};
use steadfast::{Agent, ErrorCode, FnTool, Message, MockModel, MockTurn, RunStatus, SendOptions, ToolOutput};

type Store = ObjectStore<LocalObjects, MemoryKv>;

fn store(objects: &LocalObjects, kv: &MemoryKv, clock: &ManualClock) -> Store {
    ObjectStore::new(objects.clone(), kv.clone(), "", Rc::new(clock.clone()), Rc::new(ManualSleep::new(clock.clone())))
}

/// Generated: a run handed between two processes by takeovers, with commits of random sizes (now and then one
/// over a row, or a snapshot), and the previous owner trying to commit, renew and release after each
/// takeover. Every stale commit and renewal is refused with `STEADFAST_SESSION_BUSY` and writes no row; every
/// owner's commit writes exactly its entry's rows (one, or one per started 1 MB); both processes always load
/// exactly the last state the current owner committed.
#[test]
fn a_stale_owner_never_commits_and_each_boundary_writes_its_rows_generated() {
    for_seeds("a_stale_owner_never_commits_and_each_boundary_writes_its_rows_generated", 0..150, |seed| {
        let rng = SplitMix64::new(seed);
        let pick = |n: u64| rng.next_u64() % n;
        let clock = ManualClock::new(1_700_000_000_000);
        let (objects, kv) = (LocalObjects::default(), MemoryKv::new());
        let procs = [store(&objects, &kv, &clock), store(&objects, &kv, &clock)];
        let o = LeaseOptions::default();
        let mut holder = 0usize;
        let mut lease = block_on(acquired(&procs[0], "run", "p0-0", clock.now_ms(), &o, "first"));
        let (e, mut cp) = snapshot_entry("run", "start", clock.now_ms());
        block_on(procs[0].commit(&lease, &e, &cp)).expect("first commit");
        let (mut boundaries, mut rows, mut big) = (1u64, 1u64, 0u32);
        for step in 0..(5 + pick(30)) {
            clock.advance(1 + pick(2_000));
            match pick(10) {
                0..=5 => {
                    let size =
                        if pick(25) == 0 { MAX_ROW_BYTES + pick(600_000) as usize } else { pick(3_000) as usize };
                    let (mut e, mut next) =
                        delta_entry(&cp, Message::user("m".repeat(size)), RunStatus::InProgress, clock.now_ms());
                    if pick(6) == 0 {
                        next.seq = e.seq;
                        e = JournalEntry { body: EntryBody::Snapshot { state: Box::new(next.clone()) }, ..e };
                    }
                    let len = serde_json::to_string(&e).unwrap().len() as u64;
                    let before = procs[holder].counters();
                    block_on(procs[holder].commit(&lease, &e, &next)).expect("the owner commits");
                    let written = procs[holder].counters().since(&before).commit_writes;
                    let parts = len.div_ceil(MAX_ROW_BYTES as u64);
                    assert_eq!(written, parts, "step {step}: {len} bytes");
                    big += u32::from(parts > 1);
                    boundaries += 1;
                    rows += written;
                    cp = next;
                }
                6..=8 => {
                    // Takeover by the other process once the lease (and its grace) ran out.
                    let stale = lease.clone();
                    clock.set(lease.expires_at + o.grace_ms + pick(5_000));
                    holder = 1 - holder;
                    let owner = format!("p{holder}-{step}");
                    lease = block_on(acquired(&procs[holder], "run", &owner, clock.now_ms(), &o, "takeover"));
                    let old = &procs[1 - holder];
                    let (e, next) = delta_entry(&cp, Message::user("zombie"), RunStatus::Finished, clock.now_ms());
                    let before = old.counters();
                    let err = block_on(old.commit(&stale, &e, &next)).expect_err("a stale commit is refused");
                    assert_eq!(err.code, ErrorCode::SessionBusy, "{err}");
                    let err = block_on(old.renew_lease(&stale, clock.now_ms(), &o)).expect_err("no stale renewal");
                    assert_eq!(err.code, ErrorCode::SessionBusy, "{err}");
                    block_on(old.release_lease(&stale)).expect("a stale release is a no-op");
                    assert_eq!(old.counters().since(&before).writes, 0, "the stale owner wrote nothing");
                    let err = block_on(old.acquire_lease("run", "late", clock.now_ms(), &o)).expect_err("held");
                    assert_eq!(err.code, ErrorCode::SessionBusy);
                }
                _ => {
                    lease = block_on(procs[holder].renew_lease(&lease, clock.now_ms(), &o)).expect("renew");
                }
            }
            for p in &procs {
                assert_eq!(block_on(p.load("run")).unwrap().as_ref(), Some(&cp), "step {step}");
            }
        }
        let listed = block_on(procs[1 - holder].pending()).unwrap();
        assert_eq!(listed.iter().map(|r| r.run_id.as_str()).collect::<Vec<_>>(), vec!["run"]);
        assert!(rows >= boundaries && (big == 0 || rows > boundaries), "{rows} rows, {boundaries} boundaries");
    });
}

/// A whole agent run (model turns, tool calls, a finish) over run objects: each durable boundary writes one
/// row, the run is listed while unfinished and not after, and a second process loads the same transcript.
#[test]
fn an_agent_run_over_run_objects_writes_one_row_per_boundary() {
    for_seeds("an_agent_run_over_run_objects_writes_one_row_per_boundary", 0..40, |seed| {
        let rng = SplitMix64::new(seed);
        let clock = ManualClock::new(1_700_000_000_000);
        let (objects, kv) = (LocalObjects::default(), MemoryKv::new());
        let turns = 1 + rng.next_u64() % 5;
        let mut script: Vec<MockTurn> = (0..turns)
            .map(|t| {
                let calls = 1 + (rng.next_u64() % 3);
                MockTurn::tools((0..calls).map(|c| ("echo", json!({ "n": t * 10 + c }))))
            })
            .collect();
        script.push(MockTurn::text("done"));
        let echo = FnTool::new("echo", "echoes", json!({"type": "object"}), |args, _ctx| async move {
            Ok(ToolOutput::text(format!("echo {}", args["n"])))
        });
        let agent = Agent::builder(MockModel::by_turn(script))
            .tool(echo)
            .store(store(&objects, &kv, &clock))
            .clock(Rc::new(clock.clone()))
            .build()
            .unwrap();
        let done = block_on(agent.send("strict-run", "go", SendOptions::default())).expect("the run finishes");
        assert_eq!(done.status, RunStatus::Finished);
        let c = agent.store().counters();
        assert!(c.commits >= turns + 1, "{c:?}");
        assert_eq!(c.commit_writes, c.commits, "one row per boundary: {c:?}");
        let other = store(&objects, &kv, &clock);
        assert_eq!(block_on(other.load("strict-run")).unwrap().map(|cp| cp.messages), Some(done.messages));
        assert!(block_on(other.pending()).unwrap().is_empty());
    });
}

/// Generated damage to what run objects store (strict mode): one value of a run object holding a finished run,
/// a run awaiting approval or an interrupted one — its lease, its approval record, or one of its journal rows —
/// is replaced by a damaged one (`common::damage`: cut, emptied, not JSON, a field of another type, a number at
/// u64's edge). Then load, history, the approvals, a resume, a continuation and a send run in a second process.
/// Nothing panics; a failure is never `STEADFAST_INTERNAL`; a value that no longer parses never reads as a state
/// other than the one written; a run in another object reads the same; every damaged run can be deleted and
/// started again. A failing seed prints `STEADFAST_SEED=<n>`.
#[test]
fn damaged_object_values_get_coded_errors_never_a_panic_generated() {
    use steadfast::store::object::{JournalRow, ObjectStorage, Write};
    use steadfast::RunResult;
    for_seeds("damaged_object_values_get_coded_errors_never_a_panic_generated", 0..300, |seed| {
        let rng = SplitMix64::new(seed);
        let clock = ManualClock::new(1_700_000_000_000);
        let (objects, kv) = (LocalObjects::default(), MemoryKv::new());
        let agent = || {
            let model = MockModel::by_turn(vec![
                MockTurn::func(|req| {
                    let refund = req
                        .messages
                        .iter()
                        .any(|m| matches!(m, Message::User { content } if content.contains("refund")));
                    match refund {
                        true => MockTurn::tools([("refund", json!({"order": 7}))]),
                        false => MockTurn::tools([("charge", json!({"order": 7})), ("charge", json!({"order": 8}))]),
                    }
                }),
                MockTurn::text("Done."),
                MockTurn::text("Noted."),
                MockTurn::text("Noted again."),
            ]);
            let tool = |name: &str, approval: bool| {
                let t = FnTool::new(name, name, json!({"type": "object"}), |args, _ctx| async move {
                    Ok(ToolOutput::text(format!("done {}", args["order"])))
                });
                t.needs_approval(approval)
            };
            Agent::builder(model)
                .tool(tool("charge", false))
                .tool(tool("refund", true))
                .store(store(&objects, &kv, &clock))
                .clock(Rc::new(clock.clone()))
                .build()
                .unwrap()
        };
        let a = agent();
        block_on(a.send("fin", "charge order 7", SendOptions::default())).unwrap();
        block_on(a.send("other", "charge order 7", SendOptions::default())).unwrap();
        let wait: RunResult = block_on(a.send("wait", "refund order 7", SendOptions::default())).unwrap();
        let crash = SendOptions {
            crash: Some(steadfast::runtime::CrashPoint { after_effects: 3, finish_in_flight: false }),
            ..Default::default()
        };
        let _ = block_on(a.send("mid", "charge order 7", crash));
        clock.advance(61_000);
        let runs = ["fin", "wait", "mid"];
        let before: Vec<_> = runs.iter().map(|id| block_on(a.load(id)).unwrap()).collect();
        let other = block_on(a.load("other")).unwrap();
        // One value of one object: its meta (lease, approvals) or one journal row.
        let id = runs[(rng.next_u64() % 3) as usize];
        let storage = objects.object(id).storage().clone();
        let meta = storage.list("").unwrap();
        let rows = storage.rows_from(0).unwrap();
        let k = (rng.next_u64() % (meta.len() + rows.len()) as u64) as usize;
        let (what, broken) = if k < meta.len() {
            let (key, raw) = &meta[k];
            let (value, broken) = common::damage(raw, &rng);
            storage.write(vec![Write::Put(key.clone(), value.clone())]).unwrap();
            (format!("{id}: meta {key} = {value:?}"), broken)
        } else {
            let row = &rows[k - meta.len()];
            let (value, broken) = common::damage(&row.body, &rng);
            let mut again: Vec<Write> = vec![Write::DeleteRowsFrom(row.seq)];
            for r in rows.iter().filter(|r| r.seq >= row.seq) {
                let body = if r == row { value.clone() } else { r.body.clone() };
                again.push(Write::Insert(JournalRow { body, ..r.clone() }));
            }
            storage.write(again).unwrap();
            (format!("{id}: row {} = {value:?}", row.seq), broken)
        };
        let a = agent();
        let before: Vec<_> = runs.iter().copied().zip(before.iter().cloned()).collect();
        common::every_path_after_damage(&a, &before, broken, wait.approval_id.as_deref(), &what);
        assert_eq!(block_on(a.load("other")).unwrap(), other, "{what}: the run in another object changed");
        clock.advance(61_000);
        common::each_run_starts_again(agent, &runs, &what);
    });
}

/// Strict mode's index on the hostile KV simulator (one write a second per key, a faster one refused with 429):
/// running a run again within a second of its last execution — a continuation, a resume after a pause — is
/// never refused because of the index (it was: `STEADFAST_STORE_RATE_LIMITED` from the index write before the
/// first commit), and afterwards the index lists exactly the unfinished runs.
#[test]
fn running_a_run_again_within_a_second_is_never_refused_by_the_index() {
    use steadfast::store::sim::{SimKv, SimOptions};
    for gap_ms in [0, 1, 300, 999, 1_000, 1_700] {
        let clock = ManualClock::new(1_700_000_000_000);
        let objects = LocalObjects::default();
        let kv = SimKv::new(Rc::new(clock.clone()), SimOptions::default());
        let process = || {
            let store = ObjectStore::new(
                objects.clone(),
                kv.clone(),
                "",
                Rc::new(clock.clone()),
                Rc::new(ManualSleep::new(clock.clone())),
            );
            let pay = FnTool::new("pay", "pays", json!({"type": "object"}), |_args, _ctx| async move {
                Ok(ToolOutput::text("paid"))
            })
            .needs_approval(true);
            Agent::builder(MockModel::by_turn(vec![
                MockTurn::text("Hello."),
                MockTurn::tools([("pay", json!({}))]),
                MockTurn::text("Paid."),
            ]))
            .tool(pay)
            .store(store)
            .clock(Rc::new(clock.clone()))
            .sleep(Rc::new(ManualSleep::new(clock.clone())))
            .build()
            .unwrap()
        };
        let listed = |agent: &Agent| -> Vec<(String, RunStatus)> {
            block_on(agent.pending()).unwrap().into_iter().map(|r| (r.run_id, r.status)).collect()
        };
        let first = block_on(process().send("r", "hi", SendOptions::default())).expect("first execution");
        assert_eq!(first.status, RunStatus::Finished);
        clock.advance(gap_ms);
        let paused = block_on(process().send("r", "pay it", SendOptions::default()))
            .unwrap_or_else(|e| panic!("gap {gap_ms} ms: the continuation was refused: {e}"));
        assert_eq!(paused.status, RunStatus::AwaitingApproval, "gap {gap_ms} ms");
        assert_eq!(listed(&process()), vec![("r".to_string(), RunStatus::AwaitingApproval)], "gap {gap_ms} ms");
        clock.advance(gap_ms);
        let id = paused.approval_id.clone().unwrap();
        let done = block_on(process().approvals().resolve(steadfast::runtime::Resolve {
            id,
            approved: true,
            note: None,
            answer: None,
        }))
        .unwrap_or_else(|e| panic!("gap {gap_ms} ms: the approval's execution was refused: {e}"));
        assert_eq!(done.status, RunStatus::Finished, "gap {gap_ms} ms");
        assert_eq!(listed(&process()), vec![], "gap {gap_ms} ms: a finished run is not listed");
    }
}

/// Strict mode's sweep at any backlog: with 1,000, 10,000 and 100,000 unfinished runs (most waiting for a person
/// or backing off, some to resume), one tick's store operations stay within its budget and do not grow with
/// the backlog, and every tick examines runs and moves on (the listing reads each run's summary from the index;
/// only the runs a tick acts on are asked from their objects). It printed nothing examined and 850 object calls
/// a tick at 850 runs before.
#[test]
fn strict_sweep_ticks_cost_the_same_at_any_backlog_and_advance() {
    use steadfast::core::sweep::SweepOptions;
    use steadfast::runtime::NoListener;
    let backlogs: Vec<usize> = match std::env::var("STEADFAST_BACKLOGS") {
        Ok(s) => s.split(',').map(|n| n.trim().parse().expect("a number")).collect(),
        Err(_) => vec![1_000, 10_000, 100_000],
    };
    let mut worst = Vec::new();
    for &n in &backlogs {
        let clock = ManualClock::new(1_700_000_000_000);
        let (objects, kv) = (LocalObjects::default(), MemoryKv::new());
        let s = store(&objects, &kv, &clock);
        let o = LeaseOptions::default();
        for i in 0..n {
            let id = format!("run-{i:06}");
            let lease = block_on(acquired(&s, &id, "maker", clock.now_ms(), &o, "lease"));
            let (e, mut cp) = snapshot_entry(&id, "work", clock.now_ms());
            // Nine runs in ten wait for a person or back off; the tenth is resumable.
            match i % 10 {
                0 => {}
                1..=5 => {
                    cp.status = RunStatus::AwaitingApproval;
                    cp.approval_ids = vec![format!("apr-{i}")];
                }
                _ => {
                    cp.attempts = 2;
                    cp.last_error = Some(steadfast::core::error::ErrorInfo {
                        code: ErrorCode::ToolPropagated,
                        message: "failed".into(),
                        retryable: true,
                    });
                }
            }
            let e = JournalEntry { body: EntryBody::Snapshot { state: Box::new(cp.clone()) }, ..e };
            block_on(s.commit(&lease, &e, &cp)).unwrap();
            block_on(s.release_lease(&lease)).unwrap();
        }
        let agent = Agent::builder(MockModel::by_turn(vec![MockTurn::text("done")]))
            .store(store(&objects, &kv, &clock))
            .clock(Rc::new(clock.clone()))
            .sleep(Rc::new(ManualSleep::new(clock.clone())))
            .build()
            .unwrap();
        let opts = SweepOptions::default();
        let mut cursors = Vec::new();
        let mut most = 0;
        for tick in 0..3 {
            clock.advance(1_000);
            let report = block_on(agent.sweep(&opts, &NoListener)).unwrap();
            assert!(report.examined > 0, "{n} runs, tick {tick}: nothing examined: {report:?}");
            assert!(report.resumed > 0 || report.complete, "{n} runs, tick {tick}: {report:?}");
            let state = block_on(agent.store().get_state("sweep")).unwrap().unwrap_or_default();
            let state: steadfast::core::sweep::SweepState = serde_json::from_str(&state).unwrap_or_default();
            cursors.push((state.page, state.cursor));
            most = most.max(report.operations);
        }
        assert!(cursors.windows(2).all(|w| w[0] != w[1]), "{n} runs: every tick moves on: {cursors:?}");
        println!("strict sweep ops at {n} pending: {most}");
        worst.push((n, most));
    }
    // 248 measured at every backlog (the README quotes it): 25 resumes, the verification reads, a page.
    for (n, ops) in &worst {
        assert!(*ops <= 300, "{n} pending: {ops} operations in a tick");
    }
    // The cost does not grow with the backlog (the listing is a page of the index at any size).
    let (min, max) = (worst.iter().map(|w| w.1).min().unwrap(), worst.iter().map(|w| w.1).max().unwrap());
    assert!(max <= min + min / 2 + 10, "ticks cost {worst:?}");
}

/// Strict mode's listings ask a bounded number of run objects (a Worker's subrequests are limited): a full
/// listing of 1,200 unfinished runs asks none of them once their entries are a minute old, and at most 100 of
/// those written in the last minute; the approvals listing asks one object per run holding approvals and refuses
/// more than 500 runs with a coded error before asking any.
#[test]
fn strict_listings_ask_a_bounded_number_of_run_objects() {
    use steadfast::core::approval::ApprovalRecord;
    use steadfast::store::object::MAX_LISTED_OBJECTS;
    let clock = ManualClock::new(1_700_000_000_000);
    let (objects, kv) = (LocalObjects::default(), MemoryKv::new());
    let s = store(&objects, &kv, &clock);
    let o = LeaseOptions::default();
    let make = |from: usize, to: usize, paused: bool| {
        for i in from..to {
            let id = format!("run-{i:05}");
            let lease = block_on(acquired(&s, &id, "maker", clock.now_ms(), &o, "lease"));
            let (e, mut cp) = snapshot_entry(&id, "work", clock.now_ms());
            if paused {
                let apr = format!("apr-{i}");
                cp.status = RunStatus::AwaitingApproval;
                cp.approval_ids = vec![apr.clone()];
                let record: ApprovalRecord = serde_json::from_value(json!({
                    "id": apr, "runId": id, "toolCall": {"id": "c", "name": "pay", "args": {}},
                    "batch": [format!("apr-{i}")], "status": "pending", "step": 1, "createdAt": clock.now_ms()
                }))
                .expect("an approval record");
                block_on(s.put_approval(&record)).unwrap();
            }
            let e = JournalEntry { body: EntryBody::Snapshot { state: Box::new(cp.clone()) }, ..e };
            block_on(s.commit(&lease, &e, &cp)).unwrap();
            block_on(s.release_lease(&lease)).unwrap();
        }
    };
    make(0, 1_050, false);
    clock.advance(61_000);
    make(1_050, 1_200, false);
    let lister = store(&objects, &kv, &clock);
    let listed = block_on(lister.pending()).unwrap();
    assert_eq!(listed.len(), 1_200);
    let asked = lister.counters().reads;
    // Two list pages, and the objects of at most 100 of the 150 runs listed in the last minute.
    assert!(asked <= 2 + 100, "a full listing asked {asked}");
    clock.advance(61_000);
    let lister = store(&objects, &kv, &clock);
    assert_eq!(block_on(lister.pending()).unwrap().len(), 1_200);
    assert_eq!(lister.counters().reads, 2, "a minute on: list pages only");

    // Approvals: one object per run holding approvals, at most MAX_LISTED_OBJECTS.
    let (objects, kv) = (LocalObjects::default(), MemoryKv::new());
    let s2 = store(&objects, &kv, &clock);
    let mk = |n: usize| {
        for i in 0..n {
            let id = format!("p-{i:04}");
            let lease = block_on(acquired(&s2, &id, "maker", clock.now_ms(), &o, "lease"));
            let apr = format!("apr-{i}");
            let record: ApprovalRecord = serde_json::from_value(json!({
                "id": apr, "runId": id, "toolCall": {"id": "c", "name": "pay", "args": {}},
                "batch": [apr], "status": "pending", "step": 1, "createdAt": clock.now_ms()
            }))
            .expect("an approval record");
            block_on(s2.put_approval(&record)).unwrap();
            block_on(s2.release_lease(&lease)).unwrap();
        }
    };
    mk(MAX_LISTED_OBJECTS);
    let lister = store(&objects, &kv, &clock);
    assert_eq!(block_on(lister.list_approvals()).unwrap().len(), MAX_LISTED_OBJECTS);
    let (objects, kv) = (LocalObjects::default(), MemoryKv::new());
    let s3 = store(&objects, &kv, &clock);
    for i in 0..=MAX_LISTED_OBJECTS {
        let id = format!("p-{i:04}");
        let apr = format!("apr-{i}");
        let record: ApprovalRecord = serde_json::from_value(json!({
            "id": apr, "runId": id, "toolCall": {"id": "c", "name": "pay", "args": {}},
            "batch": [apr], "status": "pending", "step": 1, "createdAt": clock.now_ms()
        }))
        .expect("an approval record");
        block_on(s3.put_approval(&record)).unwrap();
    }
    let lister = store(&objects, &kv, &clock);
    let before = lister.counters().reads;
    let err = block_on(lister.list_approvals()).expect_err("more runs than one listing asks");
    assert_eq!((err.code, err.retryable), (ErrorCode::StoreFailed, false), "{err:?}");
    assert!(lister.counters().reads - before <= 2, "refused before asking any object");
}
