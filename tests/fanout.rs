//! Recovery fanned out through a queue (`Agent::sweep_fanning_out`, `Agent::consume_recovery`): a tick sends one
//! message per due run and resumes only its canary; consumers resume the rest. Over generated backlogs (seeded,
//! `STEADFAST_CASES` of them, `STEADFAST_SEED=<n>` for one) with messages duplicated, reordered and redelivered,
//! sends failing, and consumers crashing after any effect: every run finishes, each tool call runs once, a
//! message never starts a run that is not due (paused, in its backoff, at the cap), and a tick stays within its
//! operation budget. Targeted: the breaker opens on the consumers' outage failures (counted from the listing),
//! the enqueue cap ramps after an outage, a failed send falls back to the tick's own resumes, a bad message is
//! `invalid`. With a fake clock, the scripted model and the journal store on SimKv.

mod common;

use common::healing::{clone_run, journal_env, one_try, opts, Crashing, Recorder};
use common::*;
use serde_json::json;
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;
use steadfast::core::checkpoint::RunStatus;
use steadfast::core::sweep::{plan, Plan, SweepOptions, SweepState};
use steadfast::runtime::{
    sweep_candidate, Agent, Clock, Consumed, CrashBudget, FnTool, MockModel, MockTurn, RecoveryMessage, Rng, SimQueue,
    SplitMix64, Tool, ToolOutput,
};
use steadfast::store::PendingRun;
use steadfast::{ErrorCode, Result};

/// A model that asks for `pay` (one call), then answers "ok"; it fails with a 503 while `down` (its second turn
/// also while `down_later`). `calls` counts model calls per run, `paid` the runs' `pay` executions.
fn paying_agent(env: &Env, down: Rc<Cell<bool>>, calls: Rc<RefCell<BTreeMap<String, u32>>>, paid: Paid) -> Agent {
    paying_agent_with(env, down, Rc::default(), calls, paid)
}

fn paying_agent_with(
    env: &Env,
    down: Rc<Cell<bool>>,
    down_later: Rc<Cell<bool>>,
    calls: Rc<RefCell<BTreeMap<String, u32>>>,
    paid: Paid,
) -> Agent {
    let count = move |req: &steadfast::runtime::ModelRequest<'_>| {
        *calls.borrow_mut().entry(req.run_id.to_string()).or_default() += 1;
    };
    let (d1, c2) = (down.clone(), count.clone());
    let d2 = move || down.get() || down_later.get();
    let pay: Rc<dyn Tool> = Rc::new(FnTool::new("pay", "pays", json!({"type": "object"}), move |_a, ctx| {
        paid.borrow_mut().entry(ctx.run_id.to_string()).or_default().push(ctx.idempotency_key().to_string());
        async move { Ok(ToolOutput::text("paid")) }
    }));
    let model = MockModel::by_turn(vec![
        MockTurn::func(move |req| {
            count(req);
            if d1.get() {
                MockTurn::error(503)
            } else {
                MockTurn::tools([("pay", json!({}))])
            }
        }),
        MockTurn::func(move |req| {
            c2(req);
            if d2() {
                MockTurn::error(503)
            } else {
                MockTurn::text("ok")
            }
        }),
    ]);
    env.agent_with(model, vec![pay], one_try(), "")
}

/// Each run's `pay` executions, by the idempotency key each was given.
type Paid = Rc<RefCell<BTreeMap<String, Vec<String>>>>;

/// How many of `run-000`… `run-<n-1>` are finished.
fn finished(agent: &Agent, n: usize) -> usize {
    (0..n)
        .filter(|i| {
            let id = if n < 100 { format!("run-{i:03}") } else { format!("run-{i:03}") };
            block_on(agent.store().load(&id)).unwrap().is_some_and(|cp| cp.status == RunStatus::Finished)
        })
        .count()
}

fn cases() -> u64 {
    std::env::var("STEADFAST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(120)
}

/// One generated backlog, drained through the queue; `Err` says what broke.
fn drain_scenario(seed: u64) -> std::result::Result<String, String> {
    let rng = SplitMix64::new(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xFA);
    let pick = |n: u64| rng.next_u64() % n;
    let env = Env::journal_sim();
    let down = Rc::new(Cell::new(true));
    let calls: Rc<RefCell<BTreeMap<String, u32>>> = Rc::default();
    let paid: Paid = Rc::default();
    let later = Rc::new(Cell::new(true));
    let agent = paying_agent_with(&env, down.clone(), later.clone(), calls.clone(), paid.clone());
    let n = 3 + pick(40) as usize;
    // Half the runs fail on their first turn, half on their second (after `pay` ran and was recorded).
    for i in 0..n {
        down.set(pick(2) == 0);
        block_on(agent.send(&format!("run-{i:03}"), "go", opts())).unwrap_err();
    }
    down.set(false);
    later.set(false);
    let so = SweepOptions {
        max_enqueue: [3, 10, 5_000][pick(3) as usize],
        page_size: [4, 1_000][pick(2) as usize],
        ..SweepOptions::default()
    };
    let queue = SimQueue::new();
    let mut consumed: BTreeMap<String, u32> = BTreeMap::new();
    // Runs a consumer crashed in (a crash between `pay`'s effect and its record runs it again, with its key).
    let mut crashed = std::collections::BTreeSet::new();
    for tick in 0..40 {
        env.clock.advance(60_000);
        if pick(5) == 0 {
            queue.fail_sends(1);
        }
        let report = block_on(agent.sweep_fanning_out(&so, &Recorder::default(), &queue))
            .map_err(|e| format!("tick {tick} failed: {e}"))?;
        if std::env::var("STEADFAST_TRACE").is_ok() {
            println!("tick {tick}: {report:?}");
        }
        if report.operations + report.queue_sends > 1_000 {
            return Err(format!("tick {tick} used {} operations", report.operations + report.queue_sends));
        }
        // Consumers take the queue in batches, duplicating and reordering some; some crash mid-resume.
        while !queue.is_empty() {
            let batch = queue.take(1 + pick(10) as usize);
            for body in batch {
                if pick(4) == 0 {
                    queue.push(body.clone());
                }
                let crash = (pick(4) == 0).then(|| CrashBudget::new(1 + pick(6) as usize, pick(2) == 0));
                let before = calls.borrow().clone();
                let id = RecoveryMessage::parse(&body).map_err(|e| format!("the sweep sent {body}: {e}"))?.run_id;
                let due = plan_now(&agent, &id, &so, env.clock.now_ms());
                // Now and then the provider fails this consumer (the run records the attempt and backs off).
                down.set(pick(8) == 0);
                let r = block_on(agent.consume_recovery(&body, &so, &Crashing(crash.clone())))
                    .map_err(|e| format!("tick {tick}: consume failed: {e}"));
                down.set(false);
                let r = r?;
                if crash.is_some_and(|c| c.crashed()) {
                    crashed.insert(r.run_id.clone());
                }
                let started = calls.borrow().get(&r.run_id) != before.get(&r.run_id);
                let kind = match (&due, started) {
                    (None, false) => "finished or gone",
                    (Some(Plan::Resume), true) => "resumed",
                    (Some(Plan::Resume), false) => "busy",
                    (Some(_), false) => "not due",
                    (_, true) => return Err(format!("a message for {id} ({due:?}) called the model")),
                };
                if std::env::var("STEADFAST_TRACE").is_ok() {
                    println!("  {id}: {kind} (next {:?})", r.next);
                }
                *consumed.entry(kind.to_string()).or_default() += 1;
                if pick(3) == 0 {
                    env.clock.advance(pick(20_000));
                }
            }
        }
        if finished(&agent, n) == n {
            break;
        }
    }
    for i in 0..n {
        let id = format!("run-{i:03}");
        let cp = block_on(agent.store().load(&id)).map_err(|e| e.to_string())?.ok_or(format!("{id} gone"))?;
        if cp.status != RunStatus::Finished {
            return Err(format!("{id} not finished after 40 ticks: {:?} ({} attempts)", cp.status, cp.attempts));
        }
        let keys = paid.borrow().get(&id).cloned().unwrap_or_default();
        let again = keys.len() > 1 && !crashed.contains(&id);
        if keys.is_empty() || keys.iter().any(|k| *k != keys[0]) || again {
            return Err(format!(
                "{id}: pay ran with keys {keys:?} (a consumer crashed in it: {})",
                crashed.contains(&id)
            ));
        }
    }
    Ok(format!("{n} runs; consumed {consumed:?}"))
}

#[test]
fn generated_backlogs_drain_through_a_queue_with_duplicates_and_crashes_each_tool_once() {
    if let Some(seed) = std::env::var("STEADFAST_SEED").ok().and_then(|v| v.parse().ok()) {
        println!("{}", drain_scenario(seed).unwrap());
        return;
    }
    let mut outcomes: BTreeMap<String, u32> = BTreeMap::new();
    for seed in 0..cases() {
        match drain_scenario(seed) {
            Ok(line) => {
                for o in ["resumed", "not due", "finished or gone", "busy"] {
                    if line.contains(&format!("\"{o}\"")) {
                        *outcomes.entry(o.into()).or_default() += 1;
                    }
                }
            }
            Err(e) => panic!(
                "seed {seed}: {e}\nrepro: STEADFAST_SEED={seed} cargo test --test fanout generated_backlogs -- --nocapture"
            ),
        }
    }
    println!("fan-out scenarios: {}, with each outcome: {outcomes:?}", cases());
    // Every kind of delivery happened somewhere: a resume, a duplicate of a finished run, a run a crashed consumer
    // left (busy until its lease ends) and one backing off after a failure.
    for o in ["resumed", "finished or gone", "not due", "busy"] {
        assert!(outcomes.get(o).is_some_and(|&c| c > 0), "no scenario had a `{o}` delivery: {outcomes:?}");
    }
}

/// The sweep's plan for run `id` now (`None`: finished or gone), from what is stored.
fn plan_now(agent: &Agent, id: &str, so: &SweepOptions, now: u64) -> Option<Plan> {
    let state: SweepState = block_on(agent.store().get_state("sweep"))
        .unwrap()
        .map(|s| serde_json::from_str(&s).unwrap_or_default())
        .unwrap_or_default();
    let cp = block_on(agent.store().load(id)).unwrap().filter(|cp| cp.status != RunStatus::Finished)?;
    Some(plan(so, &state, now, &sweep_candidate(&PendingRun::of(&cp))))
}

/// `n` runs that each failed once on a 503; the provider is back unless `down` is set again.
fn failed_backlog(n: usize) -> (Env, Agent, Rc<Cell<bool>>, Rc<RefCell<BTreeMap<String, u32>>>, Paid) {
    let env = Env::journal_sim();
    let down = Rc::new(Cell::new(true));
    let calls: Rc<RefCell<BTreeMap<String, u32>>> = Rc::default();
    let paid: Paid = Rc::default();
    let agent = paying_agent(&env, down.clone(), calls.clone(), paid.clone());
    for i in 0..n {
        block_on(agent.send(&format!("run-{i:03}"), "go", opts())).unwrap_err();
    }
    down.set(false);
    (env, agent, down, calls, paid)
}

/// Consumes every waiting message: how many runs were left with a next look (`next`), and how many without.
fn drain(agent: &Agent, queue: &SimQueue, so: &SweepOptions) -> (usize, usize) {
    let (mut next, mut settled) = (0, 0);
    for body in queue.take(usize::MAX) {
        let r = block_on(agent.consume_recovery(&body, so, &Recorder::default())).unwrap();
        assert!(r.error.is_none(), "{body}");
        match r.next {
            Some(_) => next += 1,
            None => settled += 1,
        }
    }
    (next, settled)
}

/// The run's failed attempts in a row, and whether it finished.
fn attempts(agent: &Agent, id: &str) -> (u32, bool) {
    let cp = block_on(agent.store().load(id)).unwrap().unwrap();
    (cp.attempts, cp.status == RunStatus::Finished)
}

#[test]
fn a_tick_sends_every_due_run_but_its_canary_and_consumers_finish_them() {
    let (env, agent, _down, calls, paid) = failed_backlog(250);
    env.clock.advance(60_000);
    let queue = SimQueue::new();
    let so = SweepOptions::default();
    let r = block_on(agent.sweep_fanning_out(&so, &Recorder::default(), &queue)).unwrap();
    // 249 messages in 3 batches (100, 100, 49); the canary resumed by the tick itself.
    assert_eq!((r.enqueued, r.queue_sends, r.resumed, r.recovered.len()), (249, 3, 1, 1));
    assert_eq!(queue.counts(), (3, 249));
    // Listing (one page) + freshness checks (100 keys a bulk read) + the canary's own + state: few operations.
    assert!(r.operations + r.queue_sends < 40, "{r:?}");
    // Each finished: nothing to look at again.
    assert_eq!(drain(&agent, &queue, &so), (0, 249));
    assert!(paid.borrow().values().all(|keys| keys.len() == 1) && paid.borrow().len() == 250);
    assert_eq!(finished(&agent, 250), 250);
    // Each run: its failed first turn, then the two turns of its resume.
    assert!(calls.borrow().values().all(|&c| c == 3));
}

#[test]
fn a_message_for_a_run_that_is_not_due_starts_nothing() {
    let (env, agent, down, calls, _paid) = failed_backlog(2);
    let queue = SimQueue::new();
    let so = SweepOptions::default();
    let consume = |body: &str| block_on(agent.consume_recovery(body, &so, &Recorder::default())).unwrap();
    // run-000 is in its backoff (30 s after its failure): a message that comes early starts nothing and says when.
    let saved = block_on(agent.store().load("run-000")).unwrap().unwrap().saved_at;
    let msg = RecoveryMessage { run_id: "run-000".into(), heal_of: None }.to_json();
    let before = calls.borrow().clone();
    assert_eq!(consume(&msg).next, Some(saved + 30_000));
    assert_eq!(*calls.borrow(), before);
    // An unknown run: nothing to do. A message that is not one is invalid (acknowledged: delivering it again
    // won't help).
    assert_eq!(
        consume(&json!({"runId": "nobody"}).to_string()),
        Consumed { run_id: "nobody".into(), next: None, error: None }
    );
    for bad in ["", "{}", "[1]", r#"{"runId": 7}"#, r#"{"runId": ""}"#, r#"{"runId": "a", "healOf": 1}"#] {
        let r = consume(bad);
        assert_eq!((r.run_id.as_str(), r.error.map(|e| e.code)), ("", Some(ErrorCode::InvalidInput)), "{bad}");
    }
    // Once due it is resumed and finishes; a duplicate afterwards starts nothing.
    env.clock.advance(60_000);
    assert_eq!(consume(&msg).next, None);
    assert_eq!(attempts(&agent, "run-000"), (0, true));
    let before = calls.borrow().clone();
    assert_eq!(consume(&msg).next, None);
    assert_eq!(*calls.borrow(), before);
    // A consumer that fails on the provider records the attempt: the next message is early again.
    down.set(true);
    let other = json!({"runId": "run-001"}).to_string();
    assert!(consume(&other).next.is_some());
    assert_eq!(attempts(&agent, "run-001"), (2, false));
    let before = calls.borrow().clone();
    assert!(consume(&other).next.is_some());
    assert_eq!(*calls.borrow(), before);
    assert!(queue.is_empty());
}

#[test]
fn consumers_failing_on_the_provider_open_the_breaker_and_a_closed_one_ramps_the_sends() {
    let (env, agent, down, _calls, _paid) = failed_backlog(300);
    let queue = SimQueue::new();
    let so = SweepOptions::default();
    let rec = Recorder::default();
    // The provider is down again: the first tick's canary and every consumer fail.
    down.set(true);
    env.clock.advance(60_000);
    let r = block_on(agent.sweep_fanning_out(&so, &rec, &queue)).unwrap();
    assert_eq!(r.enqueued, 299);
    // Each resumed and failed again: its attempt recorded, its next look after its backoff.
    assert_eq!(drain(&agent, &queue, &so), (299, 0));
    assert_eq!(attempts(&agent, "run-150"), (2, false));
    // The next tick reads their failures from the listing: the breaker opens, nothing is sent.
    env.clock.advance(120_000);
    let r = block_on(agent.sweep_fanning_out(&so, &rec, &queue)).unwrap();
    assert!(r.outage && r.enqueued == 0, "{r:?}");
    assert_eq!(*rec.outage.borrow(), vec![true]);
    // While it is open a message that was already in the queue waits on it.
    let msg = json!({"runId": "run-005"}).to_string();
    let before = attempts(&agent, "run-005");
    let next = block_on(agent.consume_recovery(&msg, &so, &rec)).unwrap().next;
    assert!(next.is_some_and(|at| at > env.clock.now_ms()), "looked at again after the next probe: {next:?}");
    assert_eq!(attempts(&agent, "run-005"), before);
    // The provider is back; the probe closes the breaker, and the sends ramp: 25 in the first minute, 100 in the
    // next, 400 (here: the rest) after.
    down.set(false);
    let mut sent = Vec::new();
    for _ in 0..6 {
        env.clock.advance(60_000);
        let r = block_on(agent.sweep_fanning_out(&so, &rec, &queue)).unwrap();
        sent.push(r.enqueued);
        drain(&agent, &queue, &so);
    }
    assert_eq!(*rec.outage.borrow(), vec![true, false]);
    let state: SweepState =
        serde_json::from_str(&block_on(agent.store().get_state("sweep")).unwrap().unwrap()).unwrap();
    assert!(state.last_outage_end.is_some());
    let first = sent.iter().position(|&s| s > 0).unwrap();
    assert_eq!(&sent[first..first + 2], &[25, 100], "{sent:?}");
    assert_eq!(finished(&agent, 300), 300, "{sent:?}");
}

#[test]
fn when_a_send_fails_the_tick_resumes_the_runs_it_lists_after_and_the_rest_come_round() {
    let (env, agent, _down, _calls, paid) = failed_backlog(250);
    let queue = SimQueue::new();
    let so = SweepOptions::default();
    queue.fail_sends(1);
    env.clock.advance(60_000);
    let rec = Recorder::default();
    let r = block_on(agent.sweep_fanning_out(&so, &rec, &queue)).unwrap();
    // The first batch (runs 1 to 100) failed: the tick went on without the queue, up to its own 25 resumes, and
    // resumed its canary (run 0).
    assert_eq!((r.enqueued, r.queue_sends, r.resumed), (0, 1, 26), "{r:?}");
    assert_eq!(attempts(&agent, "run-101"), (0, true));
    assert_eq!(attempts(&agent, "run-050"), (1, false));
    assert!(rec.errors.borrow().iter().any(|(c, _)| *c == ErrorCode::StoreUnavailable));
    for _ in 0..4 {
        env.clock.advance(60_000);
        block_on(agent.sweep_fanning_out(&so, &rec, &queue)).unwrap();
        drain(&agent, &queue, &so);
    }
    assert!(paid.borrow().values().all(|keys| keys.len() == 1) && paid.borrow().len() == 250);
    assert_eq!(finished(&agent, 250), 250);
}

#[test]
fn a_tick_over_a_large_backlog_sends_at_most_its_cap_within_its_operation_budget() -> Result<()> {
    let (env, kv) = journal_env();
    let down = Rc::new(Cell::new(true));
    let agent = paying_agent(&env, down, Rc::default(), Rc::default());
    block_on(agent.send("a-template", "go", opts())).unwrap_err();
    // 8,000 more runs like it, cloned in the KV (sending each would take long).
    clone_run(&kv, "a-template", "run-", 8_000, 8_000);
    env.clock.advance(120_000);
    let queue = SimQueue::new();
    let so = SweepOptions::default();
    let r = block_on(agent.sweep_fanning_out(&so, &Recorder::default(), &queue))?;
    // The cap (5,000 a tick), sent 100 a batch; the canary is the first due run, resumed by the tick.
    assert_eq!((r.enqueued, r.queue_sends, r.resumed), (5_000, 50, 1), "{r:?}");
    assert!(r.operations + r.queue_sends <= so.op_budget, "{r:?}");
    // The README's figure (SimKv's counts are deterministic): listing pages, freshness checks of 100 keys a bulk
    // read, the canary's own operations and the state.
    assert!(r.operations <= 119, "{r:?}");
    println!(
        "a tick over 8,001 due runs: {} sent in {} batches, {} store operations",
        r.enqueued, r.queue_sends, r.operations
    );
    // The next tick continues where this one stopped and sends the rest.
    env.clock.advance(60_000);
    let r = block_on(agent.sweep_fanning_out(&so, &Recorder::default(), &queue))?;
    assert_eq!((r.enqueued, r.resumed), (2_999, 1), "{r:?}");
    assert_eq!(queue.len(), 7_999);
    Ok(())
}
