//! Diagnosis forks (`retryWithDiagnosis`): a run at the attempt cap is retried by the sweep as `<id>.heal`, which
//! carries a note of what failed; a fork that finishes deletes the original and reports it recovered, one that
//! fails quarantines both; a user run named `x.heal` (created before the suffix was reserved) never touches run
//! `x`, and new runs may not take the suffix; over generated crashes, dying charges and failing reconciles, a
//! diagnosis fork never charges an order twice.
//! With a fake clock, the scripted model and (where it matters) the journal store on SimKv.

mod common;

use common::healing::{one_try, opts, Recorder};
use common::*;
use serde_json::json;
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;
use steadfast::core::checkpoint::{EntryBody, JournalEntry, RunStatus};
use steadfast::core::sweep::SweepOptions;
use steadfast::core::transcript::{Message, ResultKind};
use steadfast::runtime::{
    Agent, Clock, CrashPoint, FnTool, ForkOptions, MockModel, MockTurn, Resolve, SendOptions, Tool, ToolError,
    ToolOutput,
};
use steadfast::store::LeaseOptions;
use steadfast::ErrorCode;

/// Asks for a tool that dies, unless the transcript carries the diagnosis note (and `heals`).
fn heal_model(heals: bool) -> MockModel {
    MockModel::new(
        (0..40)
            .map(|_| {
                MockTurn::func(move |req| {
                    let noted = req
                        .messages
                        .iter()
                        .any(|m| matches!(m, Message::User { content } if content.contains("[steadfast recovery]")));
                    if noted && heals {
                        MockTurn::text("healed")
                    } else {
                        MockTurn::tools([("boom", json!({}))])
                    }
                })
            })
            .collect(),
    )
}

fn dying() -> Rc<dyn Tool> {
    Rc::new(FnTool::new("boom", "dies", json!({"type": "object"}), |_a, _c| async {
        Err::<ToolOutput, _>(ToolError::propagate("worker died"))
    }))
}

#[test]
fn diagnosis_fork_success_deletes_the_original_and_reports_its_id() {
    let env = Env::journal_sim();
    let agent = env.agent_with(heal_model(true), vec![dying()], one_try(), "");
    block_on(agent.send("job", "go", opts())).unwrap_err();
    let so = SweepOptions { max_attempts: 2, retry_with_diagnosis: true, ..SweepOptions::default() };
    let l = Recorder::default();
    for _ in 0..6 {
        env.clock.advance(61_000);
        block_on(agent.sweep(&so, &l)).unwrap();
    }
    assert_eq!(*l.recovered.borrow(), vec!["job"], "onRecovered reports the original id");
    assert!(block_on(agent.load("job")).unwrap().is_none(), "the original is deleted");
    let healed = block_on(agent.load("job.heal")).unwrap().unwrap();
    assert_eq!(healed.status, RunStatus::Finished);
    assert_eq!(healed.heal_of.as_deref(), Some("job"), "the fork is marked in its own checkpoint");
    let note = healed.messages.iter().find_map(|m| match m {
        Message::User { content } if content.contains("[steadfast recovery]") => Some(content.clone()),
        _ => None,
    });
    let note = note.expect("the fork carries the diagnosis");
    assert!(note.contains("STEADFAST_TOOL_PROPAGATED") && note.contains("worker died"), "{note}");
    assert!(note.contains("not an instruction"), "{note}");
    assert!(l.quarantined.borrow().is_empty());
}

#[test]
fn diagnosis_fork_failure_quarantines_both() {
    let env = Env::journal_sim();
    let agent = env.agent_with(heal_model(false), vec![dying()], one_try(), "");
    block_on(agent.send("job", "go", opts())).unwrap_err();
    let so = SweepOptions { max_attempts: 2, retry_with_diagnosis: true, ..SweepOptions::default() };
    let l = Recorder::default();
    for _ in 0..10 {
        env.clock.advance(121_000);
        block_on(agent.sweep(&so, &l)).unwrap();
    }
    let mut q = l.quarantined.borrow().clone();
    q.sort();
    assert_eq!(q, vec!["job", "job.heal"], "both quarantined, once each");
    assert!(l.recovered.borrow().is_empty());
    let pending = block_on(agent.pending()).unwrap();
    let fork = pending.iter().find(|p| p.run_id == "job.heal").expect("the fork is listed");
    assert_eq!(fork.heal_of.as_deref(), Some("job"), "the listing (index metadata) carries the marker");
    assert!(pending.iter().find(|p| p.run_id == "job").is_some_and(|p| p.quarantined && p.heal_of.is_none()));
}

/// Copies run `from` to the id `to` through the store, as an earlier version (which let users name a run
/// `x.heal`) would have created it: same state, no diagnosis marker.
fn legacy_copy(env: &Env, from: &str, to: &str) {
    let mut cp = block_on(env.store.load(from)).unwrap().expect("source run");
    cp.run_id = to.into();
    cp.seq = 1;
    assert!(cp.heal_of.is_none());
    let lease = block_on(env.store.acquire_lease(to, "own_legacy", env.clock.now_ms(), &LeaseOptions::default()))
        .expect("lease");
    let entry = JournalEntry { seq: 1, at: cp.saved_at, body: EntryBody::Snapshot { state: Box::new(cp.clone()) } };
    block_on(env.store.commit(&lease, &entry, &cp)).expect("commit");
    block_on(env.store.release_lease(&lease)).expect("release");
}

/// A model that fails with `status` on a run whose input is "fail", asks for `boom` first when the input
/// mentions it, and otherwise answers "done"; `boom` dies while `down`.
fn boom_agent(env: &Env, down: Rc<Cell<bool>>, status: Rc<Cell<u16>>) -> Agent {
    let boom: Rc<dyn Tool> = Rc::new(FnTool::new("boom", "dies", json!({"type": "object"}), move |_a, _c| {
        let down = down.get();
        async move {
            if down {
                Err(ToolError::propagate("worker died"))
            } else {
                Ok(ToolOutput::text("ok"))
            }
        }
    }));
    let turn = move |req: &steadfast::runtime::ModelRequest<'_>| {
        let status = status.clone();
        let asked = req.messages.iter().any(|m| matches!(m, Message::User { content } if content.contains("boom")));
        let answered = req.messages.iter().any(|m| matches!(m, Message::Tool(_)));
        if req.messages.iter().any(|m| matches!(m, Message::User { content } if content == "fail")) {
            MockTurn::error(status.get())
        } else if asked && !answered {
            MockTurn::tools([("boom", json!({}))])
        } else {
            MockTurn::text("done")
        }
    };
    let turn = Rc::new(turn);
    let turns = (0..6)
        .map(|_| {
            let t = turn.clone();
            MockTurn::func(move |req| t(req))
        })
        .collect();
    env.agent_with(MockModel::by_turn(turns), vec![boom], one_try(), "")
}

#[test]
fn a_user_run_named_x_heal_that_fails_ten_times_does_not_touch_run_x() {
    let env = Env::journal_sim();
    let down = Rc::new(Cell::new(true));
    let status = Rc::new(Cell::new(503));
    let agent = boom_agent(&env, down.clone(), status.clone());
    // Run `x` failed 10 times in a row, the last time with an error that is not retryable (a 400): the sweep
    // leaves it alone (and never quarantines it).
    block_on(agent.send("x", "fail", opts())).unwrap_err();
    for _ in 0..8 {
        block_on(agent.resume("x", opts())).unwrap_err();
    }
    status.set(400);
    block_on(agent.resume("x", opts())).unwrap_err();
    let x_before = block_on(agent.load("x")).unwrap().unwrap();
    assert_eq!((x_before.attempts, x_before.last_error.as_ref().map(|e| e.retryable)), (10, Some(false)));
    // A user run named `x.heal` (created before the suffix was reserved) fails 10 times through the sweep.
    block_on(agent.send("x-src", "call boom", opts())).unwrap_err();
    legacy_copy(&env, "x-src", "x.heal");
    block_on(agent.delete("x-src")).unwrap();
    let so = SweepOptions { interval_ms: 1_000, max_backoff_ms: 4_000, ..SweepOptions::default() };
    let l = Recorder::default();
    for _ in 0..40 {
        env.clock.advance(5_000);
        block_on(agent.sweep(&so, &l)).unwrap();
    }
    let heal = block_on(agent.load("x.heal")).unwrap().unwrap();
    assert!(heal.quarantined && heal.attempts >= 10, "the user's x.heal is quarantined on its own: {heal:?}");
    assert_eq!(*l.quarantined.borrow(), vec!["x.heal"], "onQuarantined for x.heal only");
    let x_after = block_on(agent.load("x")).unwrap().expect("x is not deleted");
    assert_eq!(x_after, x_before, "x is untouched: not quarantined, not resumed");
    assert!(l.recovered.borrow().is_empty());
}

#[test]
fn a_user_run_named_x_heal_that_the_sweep_finishes_does_not_delete_run_x() {
    let env = Env::journal_sim();
    let down = Rc::new(Cell::new(true));
    let agent = boom_agent(&env, down.clone(), Rc::new(Cell::new(503)));
    down.set(false);
    let x = block_on(agent.send("x", "hello", opts())).unwrap();
    assert_eq!(x.status, RunStatus::Finished);
    down.set(true);
    block_on(agent.send("x-src", "call boom", opts())).unwrap_err();
    legacy_copy(&env, "x-src", "x.heal");
    block_on(agent.delete("x-src")).unwrap();
    down.set(false);
    let l = Recorder::default();
    for _ in 0..3 {
        env.clock.advance(61_000);
        block_on(agent.sweep(&SweepOptions { retry_with_diagnosis: true, ..SweepOptions::default() }, &l)).unwrap();
    }
    assert_eq!(*l.recovered.borrow(), vec!["x.heal"], "reported under its own id");
    assert_eq!(block_on(agent.load("x.heal")).unwrap().unwrap().status, RunStatus::Finished);
    let kept = block_on(agent.load("x")).unwrap().expect("x is not deleted");
    assert_eq!(kept.last_text(), "done");
}

#[test]
fn a_run_whose_heal_name_is_taken_by_a_user_run_is_quarantined_without_touching_that_run() {
    let env = Env::journal_sim();
    let down = Rc::new(Cell::new(true));
    let agent = boom_agent(&env, down.clone(), Rc::new(Cell::new(503)));
    // The user's finished `job.heal`, from before the suffix was reserved.
    down.set(false);
    block_on(agent.send("src", "hello", opts())).unwrap();
    legacy_copy(&env, "src", "job.heal");
    down.set(true);
    let user_run = block_on(agent.load("job.heal")).unwrap().unwrap();
    block_on(agent.send("job", "call boom", opts())).unwrap_err();
    let so = SweepOptions { max_attempts: 2, retry_with_diagnosis: true, ..SweepOptions::default() };
    let l = Recorder::default();
    for _ in 0..6 {
        env.clock.advance(61_000);
        block_on(agent.sweep(&so, &l)).unwrap();
    }
    assert!(l.recovered.borrow().is_empty(), "a finished user run is not the job's recovery");
    assert_eq!(*l.quarantined.borrow(), vec!["job"], "quarantined as without the option");
    assert!(block_on(agent.load("job")).unwrap().unwrap().quarantined, "job is not deleted");
    assert_eq!(block_on(agent.load("job.heal")).unwrap().unwrap(), user_run, "the user's run is untouched");
}

#[test]
fn new_runs_may_not_end_with_heal_while_diagnosis_forks_stay_addressable() {
    let env = Env::journal_sim();
    let c = Counters::default();
    // A model that calls `boom` (which dies) until it reads the diagnosis note; then asks for the gated `pay`.
    let turn = |req: &steadfast::runtime::ModelRequest<'_>| {
        let noted = req
            .messages
            .iter()
            .any(|m| matches!(m, Message::User { content } if content.contains("[steadfast recovery]")));
        let paid = req.messages.iter().any(|m| matches!(m, Message::Tool(r) if r.name == "pay"));
        match (noted, paid) {
            (false, _) => MockTurn::tools([("boom", json!({}))]),
            (true, false) => MockTurn::tools([("pay", json!({}))]),
            (true, true) => MockTurn::text("healed"),
        }
    };
    let agent = env.agent_with(
        MockModel::new((0..40).map(|_| MockTurn::func(turn)).collect()),
        vec![dying(), gated_tool("pay", &c)],
        one_try(),
        "",
    );
    // Creating a run named `*.heal` is refused, and nothing is written.
    let err = block_on(agent.send("x.heal", "go", opts())).unwrap_err();
    assert_eq!(err.code, ErrorCode::SessionIdInvalid);
    assert!(block_on(agent.load("x.heal")).unwrap().is_none());
    assert!(block_on(agent.pending()).unwrap().is_empty());
    // run-once maps a delivery id that would end with `.heal` to a hashed run id.
    match block_on(agent.run_once("evt.heal", "go", opts())) {
        Err(e) => assert_eq!(e.code, ErrorCode::ToolPropagated, "it ran (and boom died): {e:?}"),
        Ok(d) => panic!("{d:?}"),
    }
    let ids: Vec<String> = block_on(agent.pending()).unwrap().into_iter().map(|p| p.run_id).collect();
    assert_eq!(ids.len(), 1);
    assert!(ids[0].starts_with("dlv-") && !ids[0].ends_with(".heal"), "{ids:?}");
    block_on(agent.delete(&ids[0])).unwrap();
    // A real diagnosis fork, end to end: created by the sweep, paused on an approval, resolved, finished.
    block_on(agent.send("job", "go", opts())).unwrap_err();
    let err = block_on(
        agent.fork("job", ForkOptions { from_step: 1, new_id: Some("job.heal".into()), ..Default::default() }),
    )
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::SessionIdInvalid, "fork's newId may not take the suffix");
    let so = SweepOptions { max_attempts: 2, retry_with_diagnosis: true, ..SweepOptions::default() };
    let l = Recorder::default();
    for _ in 0..4 {
        env.clock.advance(61_000);
        block_on(agent.sweep(&so, &l)).unwrap();
    }
    let fork = block_on(agent.load("job.heal")).unwrap().expect("the sweep created the fork");
    assert_eq!(fork.heal_of.as_deref(), Some("job"));
    assert_eq!(fork.status, RunStatus::AwaitingApproval);
    assert!(!block_on(agent.history("job.heal", 10)).unwrap().is_empty(), "history is addressable");
    let listed = block_on(agent.pending()).unwrap();
    assert!(listed.iter().any(|p| p.run_id == "job.heal" && p.heal_of.as_deref() == Some("job")));
    let approvals = block_on(agent.approvals().list()).unwrap();
    assert_eq!(approvals.len(), 1);
    assert_eq!(approvals[0].run_id, "job.heal");
    let done = block_on(agent.approvals().resolve(Resolve {
        id: approvals[0].id.clone(),
        approved: true,
        note: None,
        answer: None,
    }))
    .unwrap();
    assert_eq!((done.status, done.text.as_str()), (RunStatus::Finished, "healed"));
    assert_eq!(c.get("pay"), 1);
    // The next tick finds the finished fork of `job`: the original is deleted and reported recovered.
    env.clock.advance(61_000);
    block_on(agent.sweep(&so, &l)).unwrap();
    assert_eq!(*l.recovered.borrow(), vec!["job"]);
    assert!(block_on(agent.load("job")).unwrap().is_none());
    // The finished fork continues as a conversation, and can be deleted.
    let more = block_on(agent.send("job.heal", "thanks", opts())).unwrap();
    assert_eq!(more.status, RunStatus::Finished);
    assert_eq!(block_on(agent.load("job.heal")).unwrap().unwrap().heal_of.as_deref(), Some("job"));
    block_on(agent.delete("job.heal")).unwrap();
    assert!(block_on(agent.load("job.heal")).unwrap().is_none());
    assert!(l.quarantined.borrow().is_empty());
}

/// What one generated diagnosis case did: charges per order, and how the case ended.
struct HealCase {
    charges: BTreeMap<i64, u32>,
    orders: Vec<i64>,
    healed: bool,
    finished: bool,
}

/// One generated case of issue 26's fourth bug: a turn of charges (side-effecting, reconciled by the idempotency
/// key they ran under) and lookups, cut short by a worker that dies after a charge and/or a crash at a generated
/// effect; `reconcile` then fails `fail_reconciles` times, so the run reaches the attempt cap and the sweep
/// (`retryWithDiagnosis`) gives it a diagnosis fork. The model re-issues a charge it is told did not run.
fn heal_case(seed: u64) -> std::result::Result<HealCase, String> {
    use steadfast::runtime::Rng;
    let rng = steadfast::runtime::SplitMix64::new(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x4ea1);
    let pick = |n: u64| rng.next_u64() % n;
    let env = if seed % 2 == 0 { Env::journal_sim() } else { Env::new() };
    let n_calls = 1 + pick(4) as usize;
    // (tool, order): charges are orders 1.., lookups order 0.
    let calls: Vec<(&str, i64)> =
        (0..n_calls).map(|i| if pick(3) == 0 { ("lookup", 0) } else { ("charge", i as i64 + 1) }).collect();
    let orders: Vec<i64> = calls.iter().filter(|(t, _)| *t == "charge").map(|(_, o)| *o).collect();
    let dies_after: Vec<i64> = orders.iter().copied().filter(|_| pick(2) == 0).collect();
    let crash =
        (pick(3) != 0).then(|| CrashPoint { after_effects: 5 + pick(12) as usize, finish_in_flight: pick(2) == 0 });
    let fail_reconciles = [1u32, 2, 3, 1_000][pick(4) as usize];
    let so = SweepOptions { max_attempts: 2, retry_with_diagnosis: true, ..SweepOptions::default() };

    let charges: Rc<RefCell<BTreeMap<i64, u32>>> = Rc::default();
    let by_key: Rc<RefCell<BTreeMap<String, i64>>> = Rc::default();
    let died: Rc<RefCell<Vec<i64>>> = Rc::default();
    let reconcile_failures = Rc::new(Cell::new(0u32));
    let order_of = |args: &serde_json::Value| args["order"].as_i64().unwrap_or(-1);
    let (c, k, d) = (charges.clone(), by_key.clone(), died.clone());
    let charge = FnTool::new("charge", "charge an order", json!({"type": "object"}), move |args, ctx| {
        let order = order_of(&args);
        *c.borrow_mut().entry(order).or_default() += 1;
        k.borrow_mut().insert(ctx.idempotency_key().to_string(), order);
        let dies = dies_after.contains(&order) && !d.borrow().contains(&order);
        if dies {
            d.borrow_mut().push(order);
        }
        async move {
            match dies {
                true => Err(ToolError::propagate("the worker died after the charge")),
                false => Ok(ToolOutput::text(format!("charged order {order}"))),
            }
        }
    });
    let (k, f) = (by_key.clone(), reconcile_failures.clone());
    let charge = charge.reconcile_with(move |args, key| {
        f.set(f.get() + 1);
        let failing = f.get() <= fail_reconciles;
        let found = k.borrow().get(&key).copied();
        async move {
            if failing {
                return Err(ToolError::propagate("the payment ledger is unavailable"));
            }
            Ok(found.map(|o| ToolOutput::text(format!("charged order {o} (found by reconcile, {})", order_of(&args)))))
        }
    });
    let lookup = Rc::new(FnTool::new("lookup", "look up", json!({"type": "object"}), |_a, _c| async {
        Ok(ToolOutput::text("found"))
    }));
    let first: Vec<(String, serde_json::Value)> =
        calls.iter().map(|(t, o)| (t.to_string(), json!({ "order": o }))).collect();
    let model = MockModel::new(
        (0..40)
            .map(|_| {
                let first = first.clone();
                MockTurn::func(move |req| {
                    if !req.messages.iter().any(|m| matches!(m, Message::Assistant { .. })) {
                        return MockTurn::tools(first.clone());
                    }
                    // Re-issue every charge the model was told did not run (and that has no successful charge).
                    let mut call_order = BTreeMap::new();
                    for m in req.messages {
                        for c in m.tool_calls() {
                            call_order.insert(c.id.clone(), (c.name.clone(), order_of(&c.args)));
                        }
                    }
                    let results = req.messages.iter().filter_map(|m| match m {
                        Message::Tool(r) => call_order.get(&r.tool_call_id).map(|(n, o)| (n.clone(), *o, r)),
                        _ => None,
                    });
                    let (mut told_not_run, mut charged) = (Vec::new(), Vec::new());
                    for (_, order, r) in results.filter(|(n, ..)| n == "charge") {
                        match r.kind {
                            ResultKind::NotRun => told_not_run.push(order),
                            _ if !r.is_error => charged.push(order),
                            _ => {}
                        }
                    }
                    let again: Vec<(String, serde_json::Value)> = told_not_run
                        .into_iter()
                        .filter(|o| !charged.contains(o))
                        .map(|o| ("charge".to_string(), json!({ "order": o })))
                        .collect();
                    if again.is_empty() {
                        MockTurn::text("done")
                    } else {
                        MockTurn::tools(again)
                    }
                })
            })
            .collect(),
    );
    let agent = env.agent_with(model, vec![Rc::new(charge), lookup], one_try(), "");
    let send = SendOptions { crash, ..opts() };
    // The first attempt: cut short by the dying charge or the crash, or done.
    let _ = block_on(agent.send("job", "charge the orders", send));
    env.past_leases();
    let l = Recorder::default();
    for _ in 0..12 {
        env.clock.advance(121_000);
        block_on(agent.sweep(&so, &l)).map_err(|e| format!("sweep: {e}"))?;
    }
    let healed = block_on(agent.load("job.heal")).map_err(|e| format!("load job.heal: {e}"))?;
    let finished = match (&healed, block_on(agent.load("job")).map_err(|e| format!("load job: {e}"))?) {
        (Some(h), _) if h.status == RunStatus::Finished => true,
        (_, Some(o)) => o.status == RunStatus::Finished,
        (_, None) => false,
    };
    let charges = charges.borrow().clone();
    Ok(HealCase { charges, orders, healed: healed.is_some(), finished })
}

/// Issue 26, bug 4: a diagnosis fork never tells the model that a call which may have run "did not run". A
/// charge whose intent was recorded with no outcome reaches the `<id>.heal` fork as an open intent, which the
/// fork's resume reconciles under the original's key: over generated turns, crash positions, dying charges and
/// reconcile failures, no order is ever charged twice, and a run that finishes (original or fork) charged every
/// order exactly once. Repro: `STEADFAST_SEED=<seed> cargo test --test diagnosis_forks diagnosis_forks`.
#[test]
fn diagnosis_forks_never_charge_an_order_twice_over_generated_crashes() {
    let seeds = common::seeds::seeds(0..160);
    let (mut healed, mut finished) = (0, 0);
    for &seed in &seeds {
        let repro = format!("repro: {}", common::seeds::repro(seed, "diagnosis_forks"));
        let case = heal_case(seed).unwrap_or_else(|e| panic!("{e}; {repro}"));
        for (order, n) in &case.charges {
            assert!(*n <= 1, "order {order} charged {n} times ({:?}); {repro}", case.charges);
        }
        if case.finished {
            for order in &case.orders {
                assert_eq!(case.charges.get(order), Some(&1), "order {order} of a finished run; {repro}");
            }
        }
        healed += usize::from(case.healed);
        finished += usize::from(case.finished && case.healed);
    }
    if common::seeds::only_seed().is_none() && seeds.len() >= 160 {
        println!("diagnosis cases: {healed} healed by a fork, {finished} of them finished");
        assert!(healed >= 40 && finished >= 20, "the cases exercise forks: {healed} healed, {finished} finished");
    }
}
