//! The sweep (`Agent::sweep`, `Agent::recover`) brings back the runs a failure left pending: backoff per failure
//! and quarantine at exactly ten attempts, once across processes (progress restarts the count); runs that are busy,
//! not retryable or waiting on a person are left alone; two overlapping sweeps resume a run once; the outage
//! breaker opens on provider failures (not on a refused key), probes one run at a time (over generated scenarios,
//! every due tick probes while a run waits on it) and closes; a failing listener callback stops nothing and is
//! counted; a corrupt sweep state is reported and replaced; a tick stays within its operation budget at any
//! backlog, continues where the last one stopped and visits every run; stale index entries are dropped without a
//! resume; `recover` loops ticks until stopped; an idle sweep records its tick at most every ten minutes.
//! With a fake clock, the scripted model and (where it matters) the journal store on SimKv.

mod common;

use common::healing::{clone_run, journal_env, one_try, opts, Recorder};
use common::*;
use serde_json::json;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use steadfast::core::checkpoint::RunStatus;
use steadfast::core::sweep::SweepOptions;
use steadfast::core::transcript::Message;
use steadfast::runtime::ManualClock;
use steadfast::runtime::{
    AbortSignal, Agent, Clock, CrashPoint, FnTool, MockModel, MockTurn, RunResult, SendOptions, SweepListener, Tool,
    ToolError, ToolOutput,
};
use steadfast::store::kv::KvBackend;
use steadfast::store::PendingRun;
use steadfast::{ErrorCode, Result};

/// `n` runs (`run-0`…) on the journal store that each failed once with a 503 (the provider is down); the
/// model answers again once `down` is cleared; `calls` counts model calls.
fn runs_failing_in_an_outage(n: usize) -> (Env, Agent, Rc<Cell<bool>>, Rc<Cell<u32>>) {
    let env = Env::journal_sim();
    let down = Rc::new(Cell::new(true));
    let calls = Rc::new(Cell::new(0));
    let agent = env.agent_with(flaky_model(503, down.clone(), calls.clone()), vec![], one_try(), "");
    for i in 0..n {
        block_on(agent.send(&format!("run-{i}"), "go", opts())).unwrap_err();
    }
    (env, agent, down, calls)
}

/// A model that fails with `status` while `down` is set, else answers "ok".
fn flaky_model(status: u16, down: Rc<Cell<bool>>, calls: Rc<Cell<u32>>) -> MockModel {
    MockModel::by_turn(vec![MockTurn::func(move |_| {
        calls.set(calls.get() + 1);
        if down.get() {
            MockTurn::error(status)
        } else {
            MockTurn::text("ok")
        }
    })])
}

/// A model that asks for `boom` once, then answers; `boom` dies (a propagating, retryable error) while `down`.
fn dying_tool_agent(env: &Env, down: Rc<Cell<bool>>, calls: Rc<Cell<u32>>) -> Agent {
    let boom: Rc<dyn Tool> = Rc::new(FnTool::new("boom", "dies", json!({"type": "object"}), move |_a, _c| {
        calls.set(calls.get() + 1);
        let down = down.get();
        async move {
            if down {
                Err(ToolError::propagate("worker died"))
            } else {
                Ok(ToolOutput::text("ok"))
            }
        }
    }));
    env.agent_with(
        MockModel::by_turn(vec![MockTurn::tools([("boom", json!({}))]), MockTurn::text("done")]),
        vec![boom],
        one_try(),
        "",
    )
}

#[test]
fn backoff_grows_per_failure_then_quarantine_at_exactly_ten_once_across_processes() {
    let env = Env::journal_sim();
    let down = Rc::new(Cell::new(true));
    let calls = Rc::new(Cell::new(0));
    let a = dying_tool_agent(&env, down.clone(), calls.clone());
    let b = dying_tool_agent(&env, down.clone(), calls.clone());
    let t0 = env.clock.now_ms();
    block_on(a.send("job", "go", opts())).unwrap_err();
    let so = SweepOptions::default();
    let (la, lb) = (Recorder::default(), Recorder::default());
    let mut resume_times = Vec::new();
    let mut last_calls = calls.get();
    // Ticks every 5 s for 90 simulated minutes, alternating two "processes".
    for tick in 0..(90 * 12) {
        env.clock.advance(5_000);
        let (agent, listener) = if tick % 2 == 0 { (&a, &la) } else { (&b, &lb) };
        block_on(agent.sweep(&so, listener)).unwrap();
        if calls.get() != last_calls {
            last_calls = calls.get();
            resume_times.push(env.clock.now_ms() - t0);
        }
    }
    let gaps: Vec<u64> = std::iter::once(resume_times[0]).chain(resume_times.windows(2).map(|w| w[1] - w[0])).collect();
    let expected = [30_000, 60_000, 120_000, 240_000, 480_000, 900_000, 900_000, 900_000, 900_000];
    assert_eq!(gaps.len(), expected.len(), "9 resumes after the first failure: {gaps:?}");
    for (g, e) in gaps.iter().zip(expected) {
        assert!(*g >= e && *g < e + 5_000, "gap {g} for backoff {e}: {gaps:?}");
    }
    assert_eq!(calls.get(), 10, "10 failed attempts in a row");
    let quarantined: Vec<String> =
        la.quarantined.borrow().iter().chain(lb.quarantined.borrow().iter()).cloned().collect();
    assert_eq!(quarantined, vec!["job".to_string()], "onQuarantined exactly once across both processes");
    let pending = block_on(a.pending()).unwrap();
    assert!(pending[0].quarantined && pending[0].attempts == 10, "still listed: {pending:?}");
    // Still resumable by hand; progress resets the count and the quarantine.
    down.set(false);
    let done = block_on(a.resume("job", opts())).unwrap().unwrap();
    assert_eq!(done.status, RunStatus::Finished);
    assert!(block_on(a.pending()).unwrap().is_empty());
}

#[test]
fn progress_resets_attempts() {
    let env = Env::new();
    let n = Rc::new(Cell::new(0));
    let n2 = n.clone();
    // Fails twice, then asks for a tool (progress), then fails once, then finishes.
    let model = MockModel::by_turn(vec![
        MockTurn::func(move |_| {
            n2.set(n2.get() + 1);
            if n2.get() <= 2 {
                MockTurn::error(500)
            } else {
                MockTurn::tools([("noop", json!({}))])
            }
        }),
        MockTurn::func({
            let n = n.clone();
            move |_| {
                n.set(n.get() + 1);
                if n.get() == 4 {
                    MockTurn::error(500)
                } else {
                    MockTurn::text("done")
                }
            }
        }),
    ]);
    let c = Counters::default();
    let agent = env.agent_with(model, vec![counting_tool("noop", &c)], one_try(), "");
    block_on(agent.send("r", "go", opts())).unwrap_err();
    block_on(agent.resume("r", opts())).unwrap_err();
    assert_eq!(block_on(agent.pending()).unwrap()[0].attempts, 2);
    block_on(agent.resume("r", opts())).unwrap_err();
    assert_eq!(block_on(agent.pending()).unwrap()[0].attempts, 1, "the tool turn was progress: the count restarted");
    let done = block_on(agent.resume("r", opts())).unwrap().unwrap();
    assert_eq!(done.text, "done");
}

#[test]
fn sweep_leaves_non_retryable_runs_and_approvals_alone() {
    let env = Env::journal_sim();
    let calls = Rc::new(Cell::new(0));
    let down = Rc::new(Cell::new(true));
    let bad_key = env.agent_with(flaky_model(401, down.clone(), calls.clone()), vec![], one_try(), "");
    block_on(bad_key.send("bad-key", "go", opts())).unwrap_err();
    let c = Counters::default();
    let gated = env.agent(
        MockModel::by_turn(vec![MockTurn::tools([("pay", json!({}))]), MockTurn::text("paid")]),
        vec![gated_tool("pay", &c)],
    );
    let paused = block_on(gated.send("needs-ok", "pay", opts())).unwrap();
    assert_eq!(paused.status, RunStatus::AwaitingApproval);
    let l = Recorder::default();
    for _ in 0..20 {
        env.clock.advance(60_000);
        let r = block_on(bad_key.sweep(&SweepOptions::default(), &l)).unwrap();
        assert_eq!(r.resumed, 0);
    }
    assert_eq!(calls.get(), 1, "a 401 is not retried by the sweep");
    assert_eq!(c.get("pay"), 0);
    assert_eq!(block_on(gated.load("needs-ok")).unwrap().unwrap().status, RunStatus::AwaitingApproval);
    assert!(l.outage.borrow().is_empty() && l.quarantined.borrow().is_empty());
}

#[test]
fn busy_runs_are_skipped_silently_and_recovered_next_tick() {
    let env = Env::journal_sim();
    let c = Counters::default();
    let script = || vec![MockTurn::tools([("charge", json!({}))]), MockTurn::text("charged")];
    let a = env.agent(MockModel::by_turn(script()), vec![counting_tool("charge", &c)]);
    let crash = SendOptions { crash: Some(CrashPoint { after_effects: 6, finish_in_flight: false }), ..opts() };
    block_on(a.send("r", "charge", crash)).unwrap_err();
    let sweeper = env.agent(MockModel::by_turn(script()), vec![counting_tool("charge", &c)]);
    let l = Recorder::default();
    let first = block_on(sweeper.sweep(&SweepOptions::default(), &l)).unwrap();
    assert_eq!((first.busy, first.errors), (1, 0));
    assert!(l.errors.borrow().is_empty(), "turned away silently");
    env.past_leases();
    let second = block_on(sweeper.sweep(&SweepOptions::default(), &l)).unwrap();
    assert_eq!(second.recovered, vec!["r"]);
    assert_eq!(*l.recovered.borrow(), vec!["r"]);
    assert_eq!(c.get("charge"), 1);
}

/// A tool that yields once, so two sweeps on one thread interleave.
fn yielding_tool(name: &str, c: &Counters) -> Rc<dyn Tool> {
    let c = c.clone();
    let n = name.to_string();
    Rc::new(FnTool::new(name, "yields once", json!({"type": "object"}), move |_a, ctx| {
        let c = c.clone();
        let n = n.clone();
        async move {
            yield_now().await;
            c.hit(&format!("call:{}", ctx.tool_call_id));
            c.hit(&n);
            Ok(ToolOutput::text("done"))
        }
    }))
}

#[test]
fn two_overlapping_sweeps_resume_a_run_once() {
    let env = Env::journal_sim();
    let c = Counters::default();
    let script = || vec![MockTurn::tools([("slow", json!({}))]), MockTurn::text("finished")];
    let a = env.agent(MockModel::by_turn(script()), vec![yielding_tool("slow", &c)]);
    let crash = SendOptions { crash: Some(CrashPoint { after_effects: 6, finish_in_flight: false }), ..opts() };
    block_on(a.send("r", "go", crash)).unwrap_err();
    env.past_leases();
    let m1 = MockModel::by_turn(script());
    let m2 = MockModel::by_turn(script());
    let s1 = env.agent(m1.clone(), vec![yielding_tool("slow", &c)]);
    let s2 = env.agent(m2.clone(), vec![yielding_tool("slow", &c)]);
    let (l1, l2) = (Recorder::default(), Recorder::default());
    let so = SweepOptions::default();
    let (r1, r2) = block_on(async { futures::join!(s1.sweep(&so, &l1), s2.sweep(&so, &l2)) });
    let (r1, r2) = (r1.unwrap(), r2.unwrap());
    assert_eq!(c.get("slow"), 1, "the pending call ran once");
    assert_eq!(m1.call_count() + m2.call_count(), 1, "one resume called the model");
    assert_eq!(r1.recovered.len() + r2.recovered.len(), 1);
    assert_eq!(r1.busy + r2.busy, 1, "the other sweep was turned away by the lease: {r1:?} {r2:?}");
}

#[test]
fn outage_pauses_the_sweep_probes_one_run_and_recovers() {
    let (env, agent, down, calls) = runs_failing_in_an_outage(5);
    let so = SweepOptions { max_attempts: 3, ..SweepOptions::default() };
    let l = Recorder::default();
    env.clock.advance(31_000);
    let before = calls.get();
    let t1 = block_on(agent.sweep(&so, &l)).unwrap();
    assert_eq!(calls.get() - before, 3, "the third provider failure in a row opens the breaker");
    assert_eq!(*l.outage.borrow(), vec![true]);
    assert!(t1.outage);
    // While open: at most one probe per tick, at growing intervals; nobody is quarantined.
    let mut probe_times = Vec::new();
    for _ in 0..60 {
        env.clock.advance(10_000);
        let before = calls.get();
        let r = block_on(agent.sweep(&so, &l)).unwrap();
        assert!(calls.get() - before <= 1, "one probe at a time");
        assert!(r.quarantined.is_empty(), "no quarantine during an outage");
        if calls.get() > before {
            probe_times.push(env.clock.now_ms());
        }
    }
    assert!(probe_times.len() >= 3, "{probe_times:?}");
    let gaps: Vec<u64> = probe_times.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(gaps.windows(2).all(|g| g[1] > g[0]), "probes grow apart: {gaps:?}");
    assert!(l.quarantined.borrow().is_empty());
    // The provider is back: the next probe gets through and closes the breaker.
    down.set(false);
    let mut closed = false;
    for _ in 0..100 {
        env.clock.advance(10_000);
        block_on(agent.sweep(&so, &l)).unwrap();
        if l.outage.borrow().last() == Some(&false) {
            closed = true;
            break;
        }
    }
    assert!(closed, "onOutage(false) once a probe got through");
    for _ in 0..10 {
        env.clock.advance(60_000);
        block_on(agent.sweep(&so, &l)).unwrap();
    }
    assert_eq!(l.recovered.borrow().len(), 5, "every run finished: {:?}", l.recovered.borrow());
}

#[test]
fn auth_failures_are_not_an_outage() {
    // Four runs fail with 503 (retryable), then the provider starts refusing the key (401) while the sweep
    // resumes them: four provider failures in a row, none of which is an outage.
    let env = Env::journal_sim();
    let status = Rc::new(Cell::new(503u16));
    let calls = Rc::new(Cell::new(0));
    let (st, c) = (status.clone(), calls.clone());
    let model = MockModel::by_turn(vec![MockTurn::func(move |_| {
        c.set(c.get() + 1);
        MockTurn::error(st.get())
    })]);
    let agent = env.agent_with(model, vec![], one_try(), "");
    for i in 0..4 {
        block_on(agent.send(&format!("run-{i}"), "go", opts())).unwrap_err();
    }
    status.set(401);
    let l = Recorder::default();
    env.clock.advance(60_000);
    let before = calls.get();
    let report = block_on(agent.sweep(&SweepOptions::default(), &l)).unwrap();
    assert_eq!(calls.get() - before, 4, "all four were resumed and refused");
    assert_eq!(report.errors, 4);
    assert!(l.outage.borrow().is_empty(), "a bad key does not open the breaker");
    assert!(!report.outage);
    // The same four failures as 503s do open it.
    let env = Env::journal_sim();
    let status = Rc::new(Cell::new(503u16));
    let st = status.clone();
    let model = MockModel::by_turn(vec![MockTurn::func(move |_| MockTurn::error(st.get()))]);
    let agent = env.agent_with(model, vec![], one_try(), "");
    for i in 0..4 {
        block_on(agent.send(&format!("run-{i}"), "go", opts())).unwrap_err();
    }
    env.clock.advance(60_000);
    let l = Recorder::default();
    assert!(block_on(agent.sweep(&SweepOptions::default(), &l)).unwrap().outage);
    assert_eq!(*l.outage.borrow(), vec![true]);
}

#[test]
fn a_throwing_callback_does_not_stop_the_sweep() {
    let env = Env::new();
    let down = Rc::new(Cell::new(true));
    let calls = Rc::new(Cell::new(0));
    let agent = env.agent_with(flaky_model(500, down.clone(), calls), vec![], one_try(), "");
    for i in 0..3 {
        block_on(agent.send(&format!("r{i}"), "go", opts())).unwrap_err();
    }
    down.set(false);
    env.clock.advance(31_000);
    let l = Recorder::throwing();
    let report = block_on(agent.sweep(&SweepOptions::default(), &l)).unwrap();
    assert_eq!(report.recovered.len(), 3, "all three recovered although onRecovered threw");
    assert_eq!(l.recovered.borrow().len(), 3);
}

#[test]
fn every_failing_listener_callback_is_counted_in_the_sweep_report() {
    // Recoveries (n runs), then an outage opening the breaker (4 runs failing at 503).
    for n in 1..=4 {
        let env = Env::new();
        let down = Rc::new(Cell::new(true));
        let agent = env.agent_with(flaky_model(500, down.clone(), Rc::new(Cell::new(0))), vec![], one_try(), "");
        for i in 0..n {
            block_on(agent.send(&format!("r{i}"), "go", opts())).unwrap_err();
        }
        down.set(false);
        env.clock.advance(31_000);
        let l = Recorder::throwing();
        let report = block_on(agent.sweep(&SweepOptions::default(), &l)).unwrap();
        assert_eq!(report.recovered.len(), n);
        // Each onRecovered threw, and so did the onError it was passed to.
        assert_eq!(l.errors.borrow().len(), n);
        assert_eq!(report.listener_errors, 2 * n, "n = {n}");
        assert_eq!(report.listener_errors, l.calls());
    }
    let (env, agent, _down, _calls) = runs_failing_in_an_outage(4);
    env.clock.advance(60_000);
    let l = Recorder::throwing();
    let report = block_on(agent.sweep(&SweepOptions::default(), &l)).unwrap();
    assert!(report.outage && *l.outage.borrow() == vec![true]);
    assert_eq!(report.listener_errors, l.calls(), "every callback threw and each is counted");
    let quiet = Recorder::default();
    env.clock.advance(1_000);
    assert_eq!(block_on(agent.sweep(&SweepOptions::default(), &quiet)).unwrap().listener_errors, 0);
}

/// `good` damaged by `seed`: cut short, one byte replaced, or something that is not a state at all.
fn damaged(good: &str, seed: u64) -> String {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut pick = |n: usize| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % n as u64) as usize
    };
    let at = pick(good.len());
    match seed % 3 {
        0 => good[..at].to_string(),
        1 => {
            let junk = ["x", "{", "]", ",", ":", "\"", "-"][pick(7)];
            format!("{}{junk}{}", &good[..at], &good[at + 1..])
        }
        _ => ["", "null", "[]", "42", "not json", "{\"providerFailures\": \"many\"}"][pick(6)].to_string(),
    }
}

#[test]
fn a_corrupt_sweep_state_is_reported_replaced_and_the_sweep_goes_on() {
    use steadfast::core::sweep::SweepState;
    let good = serde_json::to_string(&SweepState { provider_failures: 1, ..SweepState::default() }).unwrap();
    let mut tried = 0;
    for seed in 0..60 {
        let bad = damaged(&good, seed);
        if serde_json::from_str::<SweepState>(&bad).is_ok() {
            continue;
        }
        tried += 1;
        let repro = format!("seed {seed}: sweep state {bad:?}");
        let env = Env::new();
        let down = Rc::new(Cell::new(true));
        let agent = env.agent_with(flaky_model(500, down.clone(), Rc::new(Cell::new(0))), vec![], one_try(), "");
        for i in 0..2 {
            block_on(agent.send(&format!("r{i}"), "go", opts())).unwrap_err();
        }
        down.set(false);
        block_on(env.store.put_state("sweep", &bad)).unwrap();
        env.clock.advance(31_000);
        let l = Recorder::default();
        let report = block_on(agent.sweep(&SweepOptions::default(), &l)).expect(&repro);
        assert_eq!(report.recovered, vec!["r0", "r1"], "{repro}");
        assert_eq!(*l.errors.borrow(), vec![(ErrorCode::CheckpointCorrupt, None)], "{repro}");
        let stored = block_on(env.store.get_state("sweep")).unwrap().expect(&repro);
        serde_json::from_str::<SweepState>(&stored).unwrap_or_else(|e| panic!("{repro}: not repaired: {e}"));
        let next = Recorder::default();
        block_on(agent.sweep(&SweepOptions::default(), &next)).expect(&repro);
        assert!(next.errors.borrow().is_empty(), "{repro}: reported once");
    }
    assert!(tried >= 40, "{tried} damaged states tried");
}

#[test]
fn recover_loops_ticks_until_stopped() {
    let env = Env::new();
    let down = Rc::new(Cell::new(true));
    let calls = Rc::new(Cell::new(0));
    let agent = env.agent_with(flaky_model(503, down.clone(), calls), vec![], one_try(), "");
    block_on(agent.send("r", "go", opts())).unwrap_err();
    down.set(false);
    struct StopOnRecovered(AbortSignal, RefCell<Vec<String>>);
    impl SweepListener for StopOnRecovered {
        fn on_recovered(&self, run_id: &str, _r: &RunResult) -> Result<()> {
            self.1.borrow_mut().push(run_id.into());
            self.0.abort();
            Ok(())
        }
    }
    let stop = AbortSignal::new();
    let l = StopOnRecovered(stop.clone(), RefCell::new(Vec::new()));
    let ticks = block_on(agent.recover(&SweepOptions::default(), 1_000, &l, &stop));
    assert_eq!(*l.1.borrow(), vec!["r"]);
    assert!(ticks >= 2, "the run waited for its backoff over several ticks: {ticks}");
}

#[test]
fn a_tick_over_1000_pending_runs_stays_within_its_operation_budget() {
    let env = Env::journal_sim();
    let down = Rc::new(Cell::new(true));
    let calls = Rc::new(Cell::new(0));
    let agent = env.agent_with(flaky_model(503, down.clone(), calls), vec![], one_try(), "");
    for i in 0..1_000 {
        block_on(agent.send(&format!("run-{i:04}"), "go", opts())).unwrap_err();
    }
    down.set(false);
    env.clock.advance(60_000);
    let so = SweepOptions::default();
    let l = Recorder::default();
    let tick = block_on(agent.sweep(&so, &l)).unwrap();
    println!(
        "sweep tick over {} pending runs: {} store operations, {} runs examined, {} resumed",
        tick.listed, tick.operations, tick.examined, tick.resumed
    );
    assert_eq!(tick.listed, 1_000);
    assert!(tick.operations < 1_000, "{tick:?}");
    assert!(!tick.complete);
    assert_eq!(tick.recovered.len(), tick.resumed);
    // The next tick continues after the cursor.
    let next = block_on(agent.sweep(&so, &l)).unwrap();
    assert!(next.operations < 1_000);
    let mut all = l.recovered.borrow().clone();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), tick.resumed + next.resumed, "no run resumed twice");
    assert!(l.recovered.borrow().iter().any(|r| r > &tick.recovered.last().unwrap().clone()));
}

/// The journal store over a one-location SimKv, with the KV handle (to count operations and write backlogs).
#[test]
fn a_sweep_tick_stays_under_1000_kv_operations_at_any_backlog() {
    // Every pending run is due and the provider is back: each tick resumes as many runs as it may.
    for n in [1_000usize, 10_000, 100_000] {
        let (env, kv) = journal_env();
        let down = Rc::new(Cell::new(true));
        let agent = env.agent_with(flaky_model(503, down.clone(), Rc::new(Cell::new(0))), vec![], one_try(), "");
        block_on(agent.send("a-template", "go", opts())).unwrap_err();
        // Whole runs where ticks can reach them (the first 3,000 listed); index entries alone beyond.
        clone_run(&kv, "a-template", "run-", n - 1, 3_000);
        down.set(false);
        env.clock.advance(61_000);
        let so = SweepOptions::default();
        let l = Recorder::default();
        let mut worst = 0;
        let mut last: Option<String> = None;
        for tick in 0..2 {
            let before = kv.counts().operations();
            let r = block_on(agent.sweep(&so, &l)).unwrap();
            let ops = kv.counts().operations() - before;
            worst = worst.max(ops);
            assert_eq!((r.resumed, r.recovered.len(), r.stale), (so.max_runs, so.max_runs, 0), "tick {tick}: {r:?}");
            assert!(r.operations < 1_000, "{r:?}");
            // The next tick starts after the last run this one examined.
            if let Some(prev) = &last {
                assert!(r.recovered.iter().all(|id| id > prev), "tick {tick} went back: {r:?}");
            }
            last = r.recovered.last().cloned();
            env.clock.advance(60_000);
        }
        println!("sweep ops at {n} pending: {worst}");
        assert!(worst < 1_000, "sweep ops at {n} pending: {worst}");
    }
}

/// Runs in many states, sent through `agent`s over `env`: ids `r-000..`, kind by `i % 4`: 0 and 2 failed on
/// a 503 (resumable once the provider is back), 1 paused on an approval, 3 refused a key (not retryable).
fn mixed_backlog(env: &Env, n: usize, down: Rc<Cell<bool>>) -> (Agent, Vec<String>) {
    let resumable = env.agent_with(flaky_model(503, down.clone(), Rc::new(Cell::new(0))), vec![], one_try(), "");
    let c = Counters::default();
    let gated = env.agent(
        MockModel::by_turn(vec![MockTurn::tools([("pay", json!({}))]), MockTurn::text("paid")]),
        vec![gated_tool("pay", &c)],
    );
    let bad = env.agent_with(flaky_model(401, Rc::new(Cell::new(true)), Rc::new(Cell::new(0))), vec![], one_try(), "");
    let mut due = Vec::new();
    for i in 0..n {
        let id = format!("r-{i:03}");
        match i % 4 {
            1 => assert_eq!(block_on(gated.send(&id, "pay", opts())).unwrap().status, RunStatus::AwaitingApproval),
            3 => assert!(block_on(bad.send(&id, "go", opts())).is_err()),
            _ => {
                assert!(block_on(resumable.send(&id, "go", opts())).is_err());
                due.push(id);
            }
        }
    }
    (resumable, due)
}

#[test]
fn ticks_continue_where_the_last_stopped_and_every_run_is_visited() {
    for journal in [false, true] {
        let (env, kv) = if journal {
            let (e, kv) = journal_env();
            (e, Some(kv))
        } else {
            (Env::new(), None)
        };
        let n = 61;
        let down = Rc::new(Cell::new(true));
        let (agent, due) = mixed_backlog(&env, n, down.clone());
        down.set(false);
        env.clock.advance(31_000);
        // Small pages and few resumes per tick, so ticks stop mid-page and at page ends.
        let so = SweepOptions { page_size: 7, max_pages: 2, max_runs: 3, ..SweepOptions::default() };
        let l = Recorder::default();
        let mut examined = 0;
        let mut ticks = 0;
        let mut last_seen: Option<String> = None;
        loop {
            env.clock.advance(2_000);
            let before = kv.as_ref().map(|k| k.counts().operations()).unwrap_or(0);
            let r = block_on(agent.sweep(&so, &l)).unwrap();
            if let Some(k) = &kv {
                assert!(k.counts().operations() - before < 100, "a small tick stays small: {r:?}");
            }
            assert!(r.resumed <= so.max_runs && r.listed <= so.page_size * so.max_pages, "{r:?}");
            if let (Some(prev), Some(first)) = (&last_seen, r.recovered.first()) {
                assert!(first > prev, "tick {ticks} continued after {prev}, not from the start: {r:?}");
            }
            if let Some(lr) = r.recovered.last() {
                last_seen = Some(lr.clone());
            }
            examined += r.examined;
            ticks += 1;
            if r.complete {
                break;
            }
            assert!(ticks < 100, "the pass ends");
        }
        assert_eq!(examined, n, "one pass examines every listed run once (journal store: {journal})");
        assert!(ticks >= due.len() / so.max_runs, "{ticks} ticks");
        let mut recovered = l.recovered.borrow().clone();
        assert_eq!(recovered, due, "every due run resumed once, in listing order (journal store: {journal})");
        recovered.dedup();
        assert_eq!(recovered.len(), due.len());
        // The next pass starts from the beginning and finds only the runs that wait on a person or are refused.
        let r = block_on(agent.sweep(&so, &l)).unwrap();
        assert_eq!(r.resumed, 0);
        assert_eq!(block_on(agent.pending()).unwrap().len(), n - due.len());
    }
}

#[test]
fn a_stale_index_entry_is_dropped_without_a_resume() {
    let (env, kv) = journal_env();
    let calls = Rc::new(Cell::new(0));
    let down = Rc::new(Cell::new(false));
    let agent = env.agent_with(flaky_model(503, down.clone(), calls.clone()), vec![], one_try(), "");
    // A run that finishes within a second of its first index write leaves its index entry behind (deleting it
    // at once would be a second write to the key within a second: a 429).
    block_on(agent.send("quick", "go", opts())).unwrap();
    assert!(kv.raw("idx/pending/quick").is_some(), "the index entry outlived the run");
    assert!(block_on(agent.pending()).unwrap().is_empty(), "the full listing checks and hides it");
    env.clock.advance(5_000);
    let l = Recorder::default();
    let calls_before = calls.get();
    let r = block_on(agent.sweep(&SweepOptions::default(), &l)).unwrap();
    assert_eq!((r.stale, r.resumed, r.listed), (1, 0, 1), "{r:?}");
    assert_eq!(calls.get(), calls_before, "no model call for a finished run");
    assert!(kv.raw("idx/pending/quick").is_none(), "the stale entry is dropped");
    assert!(l.recovered.borrow().is_empty() && l.errors.borrow().is_empty());
    // A deleted run whose index entry survived (its delete failed at the last step) is not resumed; the entry
    // is dropped once it is an hour old (sooner, a missing lease may be this location's stale view of a new
    // run).
    down.set(true);
    block_on(agent.send("gone", "go", opts())).unwrap_err();
    env.clock.advance(2_000);
    block_on(kv.origin().delete("run/gone/lease")).unwrap();
    env.clock.advance(61_000);
    let r = block_on(agent.sweep(&SweepOptions::default(), &l)).unwrap();
    assert_eq!((r.stale, r.resumed), (1, 0), "{r:?}");
    assert!(kv.raw("idx/pending/gone").is_some(), "kept while young");
    env.clock.advance(3_600_000);
    let r = block_on(agent.sweep(&SweepOptions::default(), &l)).unwrap();
    assert_eq!((r.stale, r.resumed), (1, 0), "{r:?}");
    assert!(kv.raw("idx/pending/gone").is_none(), "dropped once an hour old");
    assert!(block_on(agent.pending()).unwrap().is_empty());
}

#[test]
fn when_every_run_reaches_the_attempt_cap_during_an_outage_the_breaker_still_probes_and_all_recover() {
    let (env, agent, down, calls) = runs_failing_in_an_outage(5);
    let so = SweepOptions { max_attempts: 3, ..SweepOptions::default() };
    let l = Recorder::default();
    // The outage opens the breaker; meanwhile people retry the runs by hand until every one is at the cap.
    env.clock.advance(31_000);
    assert!(block_on(agent.sweep(&so, &l)).unwrap().outage);
    for i in 0..5 {
        while block_on(agent.load(&format!("run-{i}"))).unwrap().unwrap().attempts < so.max_attempts {
            block_on(agent.resume(&format!("run-{i}"), opts())).unwrap_err();
        }
    }
    let pending = block_on(agent.pending()).unwrap();
    assert!(pending.len() == 5 && pending.iter().all(|p| p.attempts >= so.max_attempts), "{pending:?}");
    // Still down for a while: the breaker keeps probing (one run at a time) although every run is at the cap.
    let before = calls.get();
    for _ in 0..40 {
        env.clock.advance(30_000);
        let r = block_on(agent.sweep(&so, &l)).unwrap();
        assert!(r.outage && r.quarantined.is_empty());
    }
    assert!(calls.get() > before, "probes went on while every run was at the cap");
    // The provider is back: the next probe gets through, the breaker closes and every run finishes.
    down.set(false);
    for _ in 0..60 {
        env.clock.advance(30_000);
        block_on(agent.sweep(&so, &l)).unwrap();
    }
    assert_eq!(l.outage.borrow().last(), Some(&false), "the breaker closed");
    let mut recovered = l.recovered.borrow().clone();
    recovered.sort();
    assert_eq!(recovered, (0..5).map(|i| format!("run-{i}")).collect::<Vec<_>>(), "every run finished");
    assert!(block_on(agent.pending()).unwrap().is_empty());
    assert!(l.quarantined.borrow().is_empty(), "none quarantined for the outage");
}

/// One generated sweep scenario (see the test below); `Err` describes the first violation.
fn probe_scenario(seed: u64) -> std::result::Result<String, String> {
    use steadfast::core::sweep::{probe_due, SweepState};
    use steadfast::runtime::Rng;
    let rng = steadfast::runtime::SplitMix64::new(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5eed);
    let pick = |n: u64| rng.next_u64() % n;
    let journal = seed % 4 == 0;
    let env = if journal {
        journal_env().0
    } else {
        let store = steadfast::store::MemoryStore::with_history_limit(4);
        Env::with_store(Rc::new(store), ManualClock::new(1_700_000_000_000))
    };
    let so = SweepOptions {
        interval_ms: 10_000,
        max_backoff_ms: 120_000,
        max_attempts: 2 + pick(3) as u32,
        max_runs: 1 + pick(3) as usize,
        outage_threshold: 2 + pick(2) as u32,
        page_size: 1 + pick(4) as usize,
        max_pages: 1 + pick(2) as usize,
        ..SweepOptions::default()
    };
    let down = Rc::new(Cell::new(false));
    let tool_down = Rc::new(Cell::new(true));
    let calls = Rc::new(Cell::new(0u32));
    let (d, n) = (down.clone(), calls.clone());
    // Runs named `bad-*` meet a refused key; `tool-*` and `gate-*` call a tool first; others only the model.
    let turn = Rc::new(move |req: &steadfast::runtime::ModelRequest<'_>| {
        n.set(n.get() + 1);
        let answered = req.messages.iter().any(|m| matches!(m, Message::Tool(_)));
        if req.run_id.starts_with("bad") {
            MockTurn::error(401)
        } else if d.get() {
            MockTurn::error(503)
        } else if req.run_id.starts_with("tool") && !answered {
            MockTurn::tools([("boom", json!({}))])
        } else if req.run_id.starts_with("gate") && !answered {
            MockTurn::tools([("pay", json!({}))])
        } else {
            MockTurn::text("done")
        }
    });
    let turns = (0..8)
        .map(|_| {
            let t = turn.clone();
            MockTurn::func(move |req| t(req))
        })
        .collect();
    let td = tool_down.clone();
    let boom: Rc<dyn Tool> = Rc::new(FnTool::new("boom", "dies", json!({"type": "object"}), move |_a, _c| {
        let down = td.get();
        async move {
            if down {
                Err(ToolError::propagate("worker died"))
            } else {
                Ok(ToolOutput::text("ok"))
            }
        }
    }));
    let agent =
        env.agent_with(MockModel::by_turn(turns), vec![boom, gated_tool("pay", &Counters::default())], one_try(), "");
    // Runs in every state: failing on a tool (provider up), paused on an approval, refused a key, then failing
    // on the provider; some pushed further (to the cap and past it) by hand.
    let n_runs = 2 + pick(7) as usize;
    let mut ids = Vec::new();
    for i in 0..n_runs {
        let kind = ["plain", "tool", "gate", "bad", "plain", "plain", "tool"][pick(7) as usize];
        let id = format!("{kind}-{i}");
        if kind != "plain" {
            let _ = block_on(agent.send(&id, "go", opts()));
        }
        ids.push(id);
    }
    down.set(true);
    for id in &ids {
        if id.starts_with("plain") {
            let _ = block_on(agent.send(id, "go", opts()));
        }
        for _ in 0..pick(so.max_attempts as u64 - 1) {
            if id.starts_with("plain") || id.starts_with("tool") {
                let _ = block_on(agent.resume(id, opts()));
            }
        }
    }
    let tick_ms = 5_000 + pick(35_000);
    let down_ticks = 8 + pick(32);
    let tool_up_at = pick(down_ticks + 10);
    let per_tick_scan = (so.page_size * so.max_pages) as u64;
    let l = Recorder::default();
    let mut missed = 0u64;
    let mut probes = 0;
    let mut deletions = 0;
    let mut opened = false;
    for t in 0..down_ticks + 60 {
        if t == down_ticks {
            down.set(false);
        }
        if t == tool_up_at {
            tool_down.set(false);
        }
        env.clock.advance(tick_ms);
        let state: SweepState = block_on(env.store.get_state("sweep"))
            .unwrap()
            .map(|s| serde_json::from_str(&s).unwrap())
            .unwrap_or_default();
        let waits = |p: &PendingRun| {
            p.status == RunStatus::InProgress && !p.quarantined && p.last_error.as_ref().is_none_or(|e| e.retryable)
        };
        // Now and then a person deletes the run the breaker remembers: the listing must supply another probe.
        let mut forgot = false;
        if let (Some(_), Some(hint)) = (&state.outage, &state.probe) {
            if deletions < 2 && pick(8) == 0 {
                block_on(agent.delete(hint)).unwrap();
                deletions += 1;
                forgot = true;
            }
        }
        // Now and then a person retries a run by hand (during an outage this pushes it toward, and past, the
        // attempt cap).
        if pick(3) == 0 {
            let id = &ids[pick(ids.len() as u64) as usize];
            if id.starts_with("plain") || id.starts_with("tool") {
                let _ = block_on(agent.resume(id, opts()));
            }
        }
        let pending = block_on(env.store.pending()).unwrap();
        let waiting = pending.iter().filter(|p| waits(p)).count() as u64;
        let hint_waits = state.probe.as_ref().is_some_and(|h| pending.iter().any(|p| &p.run_id == h && waits(p)));
        let calls_before = calls.get();
        // A resume by hand takes time (the lease's settle window): the probe is due by the sweep's own clock.
        let now = env.clock.now_ms();
        let r = block_on(agent.sweep(&so, &l)).map_err(|e| format!("tick {t}: {e}"))?;
        let open_before = state.outage.is_some();
        opened |= open_before;
        let due = probe_due(&state, now);
        if open_before && r.outage {
            if calls.get() - calls_before > 1 {
                return Err(format!("tick {t}: {} model calls while the breaker was open", calls.get() - calls_before));
            }
            // Only a run failing elsewhere (its last failure not the provider's: a tool) at the attempt cap is
            // quarantined during an outage: it does not wait on the provider (left waiting, it would be probed
            // again and again and never end the outage).
            let failing_elsewhere = |id: &String| {
                pending.iter().any(|p| {
                    &p.run_id == id
                        && p.attempts >= so.max_attempts
                        && p.last_error.as_ref().is_some_and(|e| !e.code.is_outage())
                })
            };
            if let Some(id) = r.quarantined.iter().find(|id| !failing_elsewhere(id)) {
                return Err(format!("tick {t}: quarantined {id}, which waits on the provider, during an outage"));
            }
        }
        if open_before && !due && r.probe.is_some() {
            return Err(format!("tick {t}: probed {:?} before the probe was due", r.probe));
        }
        if open_before && due && waiting > 0 {
            if r.probe.is_some() {
                probes += 1;
                missed = 0;
            } else {
                missed += 1;
                // With a remembered probe that still waits, every due tick probes; without one, the listing
                // finds a waiting run within one pass.
                let bound = if hint_waits && !forgot { 0 } else { (pending.len() as u64).div_ceil(per_tick_scan) + 1 };
                if missed > bound {
                    return Err(format!(
                        "tick {t}: the breaker is open, its probe due and {waiting} run(s) wait on it, but no tick \
                         probed for {missed} due tick(s) (bound {bound}); state {state:?}; pending {pending:?}"
                    ));
                }
            }
        }
    }
    // Liveness: the provider and the tool are back; no run waits any more (the breaker may stay open only
    // when nothing waits on it: nothing to probe).
    let left: Vec<PendingRun> = block_on(env.store.pending())
        .unwrap()
        .into_iter()
        .filter(|p| {
            p.status == RunStatus::InProgress && !p.quarantined && p.last_error.as_ref().is_none_or(|e| e.retryable)
        })
        .collect();
    if !left.is_empty() {
        return Err(format!("runs still wait at the end: {left:?}"));
    }
    Ok(format!("{probes} probes{}", if opened { ", opened" } else { "" }))
}

#[test]
fn while_the_breaker_is_open_and_a_run_waits_on_it_a_due_tick_probes() {
    let seeds = common::seeds::seeds(0..120);
    let (mut probed, mut opened) = (0, 0);
    for &seed in &seeds {
        match probe_scenario(seed) {
            Ok(what) => {
                probed += what.split(' ').next().unwrap().parse::<u32>().unwrap();
                opened += what.ends_with("opened") as usize;
            }
            Err(why) => {
                panic!("seed {seed}: {why}\nreproduce: {}", common::seeds::repro(seed, "while_the_breaker_is_open"))
            }
        }
    }
    println!(
        "generated sweep scenarios: {}, with the breaker open: {opened}, probes: {probed}, violations: 0",
        seeds.len()
    );
    assert!(opened * 2 > seeds.len(), "most scenarios open the breaker: {opened} of {}", seeds.len());
}

#[test]
fn stopping_recover_aborts_the_resume_in_flight_starts_nothing_more_and_keeps_the_checkpoints() {
    let env = Env::new();
    let stop = AbortSignal::new();
    let hang = Rc::new(Cell::new(true));
    let started = Rc::new(Cell::new(0));
    let (h, s, st) = (hang.clone(), started.clone(), stop.clone());
    // While `hang`, the tool stops the loop when it starts (stop() arriving mid-resume) and never answers.
    let slow: Rc<dyn Tool> = Rc::new(FnTool::new("slow", "slow", json!({"type": "object"}), move |_a, _c| {
        s.set(s.get() + 1);
        let hanging = h.get();
        if hanging {
            st.abort();
        }
        async move {
            if hanging {
                futures::future::pending::<()>().await;
            }
            Ok(ToolOutput::text("done"))
        }
    }));
    let fail = Rc::new(Cell::new(true));
    let f = fail.clone();
    let gate: Rc<dyn Tool> = Rc::new(FnTool::new("gate", "fails once", json!({"type": "object"}), move |_a, _c| {
        let failing = f.replace(false);
        async move {
            if failing {
                Err(ToolError::propagate("died"))
            } else {
                Ok(ToolOutput::text("open"))
            }
        }
    }));
    let model = || {
        MockModel::by_turn(vec![
            MockTurn::tools([("gate", json!({}))]),
            MockTurn::tools([("slow", json!({}))]),
            MockTurn::text("finished"),
        ])
    };
    let agent = env.agent(model(), vec![gate.clone(), slow.clone()]);
    for id in ["a", "b"] {
        fail.set(true);
        block_on(agent.send(id, "go", opts())).unwrap_err();
    }
    env.clock.advance(3_600_000);
    let l = Recorder::default();
    let ticks = block_on(agent.recover(&SweepOptions::default(), 1_000, &l, &stop));
    assert_eq!(ticks, 1, "the loop stopped in its first tick");
    assert_eq!(started.get(), 1, "the first resume was aborted mid-tool and the tick started no second one");
    assert!(l.recovered.borrow().is_empty());
    assert!(l.errors.borrow().is_empty(), "an aborted resume is not an error: {:?}", l.errors.borrow());
    let pending = block_on(agent.pending()).unwrap();
    assert_eq!(pending.len(), 2, "both runs stay pending: {pending:?}");
    assert!(pending.iter().all(|p| p.status == RunStatus::InProgress));
    // The next start finishes both.
    hang.set(false);
    env.past_leases();
    let again = AbortSignal::new();
    struct StopWhenBoth(AbortSignal, RefCell<Vec<String>>);
    impl SweepListener for StopWhenBoth {
        fn on_recovered(&self, run_id: &str, _r: &RunResult) -> Result<()> {
            self.1.borrow_mut().push(run_id.into());
            if self.1.borrow().len() == 2 {
                self.0.abort();
            }
            Ok(())
        }
    }
    let l2 = StopWhenBoth(again.clone(), RefCell::new(Vec::new()));
    block_on(agent.recover(&SweepOptions::default(), 1_000, &l2, &again));
    let mut recovered = l2.1.borrow().clone();
    recovered.sort();
    assert_eq!(recovered, vec!["a", "b"]);
    assert!(block_on(agent.pending()).unwrap().is_empty());
}

/// An idle deployment's sweep records its tick once, then at most every ten minutes (a few KV writes an hour,
/// not one a minute), so the console can show the cron is alive.
#[test]
fn an_idle_sweep_records_its_tick_at_most_every_ten_minutes() {
    let env = Env::journal_sim();
    let agent = env.agent(steadfast::runtime::MockModel::new(vec![]), vec![]);
    let store = agent.store().clone();
    let tick = |label: &str| -> (u64, Option<u64>) {
        let before = store.counters();
        block_on(agent.sweep(&SweepOptions::default(), &steadfast::runtime::NoListener)).unwrap();
        let writes = store.counters().since(&before).writes;
        let state: steadfast::core::sweep::SweepState =
            serde_json::from_str(&block_on(store.get_state("sweep")).unwrap().expect(label)).unwrap();
        (writes, state.last_tick_at)
    };
    let t0 = env.clock.now_ms();
    assert_eq!(tick("first"), (1, Some(t0)), "the first tick records itself");
    let mut writes = 0;
    for _ in 0..9 {
        env.clock.advance(60_000);
        let (w, at) = tick("idle");
        writes += w;
        assert_eq!(at, Some(t0), "an idle tick within ten minutes leaves the record");
    }
    assert_eq!(writes, 0, "nine idle minutes, no write");
    env.clock.advance(60_000);
    assert_eq!(tick("heartbeat"), (1, Some(t0 + 600_000)), "ten minutes on, the tick records itself again");
}
