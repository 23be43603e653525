//! A run's own recovery step (`Agent::wake`: strict mode's alarm) under the sweep's rules, natively, over
//! generated histories: a run that failed `k` times waits its backoff (the sweep's formula), is resumed once
//! it passed, and is left to the sweep at the attempt cap; finished, deleted, paused and not-retryable runs
//! set no alarm; a run whose lease is held is not touched (no tool runs) and is looked at again when the lease
//! could be taken over; a repeated alarm (alarms are at-least-once) changes nothing. A failing seed prints a
//! one-line reproduction (`STEADFAST_SEED=<n>`).

mod common;

use common::seeds::for_seeds;
use common::*;
use serde_json::json;
use std::cell::Cell;
use std::rc::Rc;
use steadfast::core::sweep::{backoff_ms, SweepOptions};
use steadfast::runtime::{
    Clock, FnTool, MockModel, MockTurn, NoListener, Rng, SendOptions, SplitMix64, Tool, ToolError, ToolOutput,
};
use steadfast::store::LeaseOptions;
use steadfast::RunStatus;

/// A tool whose first `fail` executions reject the attempt (a propagating error); it counts executions.
fn flaky(fail: u32, runs: &Rc<Cell<u32>>) -> Rc<dyn Tool> {
    let runs = runs.clone();
    Rc::new(FnTool::new("ship", "ships", object_schema(), move |_args, _ctx| {
        let runs = runs.clone();
        async move {
            runs.set(runs.get() + 1);
            if runs.get() <= fail {
                return Err(ToolError::propagate("the shipping backend died"));
            }
            Ok(ToolOutput::text("shipped"))
        }
    }))
}

fn model() -> MockModel {
    MockModel::by_turn(vec![MockTurn::tools([("ship", json!({}))]), MockTurn::text("shipped it")])
}

#[test]
fn an_alarm_follows_the_sweeps_rules_for_its_run_generated() {
    for_seeds("an_alarm_follows_the_sweeps_rules_for_its_run_generated", 0..60, |seed| {
        let rng = SplitMix64::new(seed);
        let pick = |n: u64| rng.next_u64() % n;
        let env = Env::new();
        let opts = SweepOptions {
            interval_ms: 1_000 + pick(60_000),
            max_attempts: 1 + pick(5) as u32,
            ..SweepOptions::default()
        };
        let fail = pick(7) as u32;
        let runs = Rc::new(Cell::new(0));
        let agent = || env.agent(model(), vec![flaky(fail, &runs)]);
        let sent = block_on(agent().send("r", "ship it", SendOptions::default()));
        assert_eq!(sent.is_err(), fail > 0);
        let load = || block_on(env.store.load("r")).unwrap().unwrap();
        for alarm in 0.. {
            assert!(alarm < 50, "the alarms end");
            let cp = load();
            let executions = runs.get();
            let next = block_on(agent().wake("r", &opts, &NoListener)).unwrap();
            let after = load();
            if cp.status == RunStatus::Finished || cp.quarantined {
                assert_eq!((next, runs.get(), after), (None, executions, cp), "untouched, no alarm");
                break;
            }
            if cp.attempts >= opts.max_attempts {
                // At the cap: the alarm quarantines it itself (no tool runs), and sets no alarm.
                assert_eq!((next, runs.get()), (None, executions), "quarantined, no alarm");
                assert!(after.quarantined && after.attempts == cp.attempts && after.messages == cp.messages);
                break;
            }
            let until = cp.saved_at + backoff_ms(&opts, cp.attempts);
            if cp.attempts > 0 && env.clock.now_ms() < until {
                // Early (an alarm for another reason, or repeated): it waits the backoff, touching nothing.
                assert_eq!((next, runs.get(), after), (Some(until), executions, cp), "waits its backoff");
                env.clock.set(until);
                continue;
            }
            assert_eq!(runs.get(), executions + 1, "due: resumed once");
            match after.status {
                RunStatus::Finished => assert_eq!(next, None),
                _ if after.attempts >= opts.max_attempts => {
                    // Failed at the cap: the same step quarantined it.
                    assert_eq!(next, None);
                    assert!(load().quarantined, "quarantined by the step that reached the cap");
                    break;
                }
                _ => {
                    assert_eq!(after.attempts, cp.attempts + 1, "the failure is recorded");
                    let t = next.expect("an alarm for the next attempt");
                    assert!(t >= after.saved_at + backoff_ms(&opts, after.attempts).min(opts.interval_ms), "{t}");
                    env.clock.set(t.max(env.clock.now_ms()));
                }
            }
        }
        // Repeated (at-least-once) alarms change nothing.
        let before = (runs.get(), block_on(env.store.load("r")).unwrap());
        for _ in 0..2 {
            block_on(agent().wake("r", &opts, &NoListener)).unwrap();
        }
        assert_eq!((runs.get(), block_on(env.store.load("r")).unwrap()), before);
        let succeeded = fail < opts.max_attempts;
        assert_eq!(before.1.unwrap().status == RunStatus::Finished, succeeded);
        assert_eq!(runs.get(), fail.min(opts.max_attempts) + u32::from(succeeded), "one execution per attempt");
    });
}

#[test]
fn an_alarm_leaves_a_held_run_untouched_and_looks_again_at_takeover_time() {
    let env = Env::new();
    let runs = Rc::new(Cell::new(0));
    let agent = env.agent(model(), vec![flaky(1, &runs)]);
    assert!(block_on(agent.send("held", "ship it", SendOptions::default())).is_err());
    // Another execution holds the lease (alive).
    let lease = LeaseOptions::default();
    block_on(env.store.acquire_lease("held", "someone", env.clock.now_ms(), &lease)).unwrap();
    let opts = SweepOptions { interval_ms: 1, ..SweepOptions::default() };
    env.clock.advance(10);
    let next = block_on(agent.wake("held", &opts, &NoListener)).unwrap();
    assert_eq!(next, Some(env.clock.now_ms() + lease.ttl_ms + lease.grace_ms));
    assert_eq!(runs.get(), 1, "no tool ran");
    // Past the lease: the alarm takes it over and finishes the run.
    env.clock.advance(lease.ttl_ms + lease.grace_ms);
    assert_eq!(block_on(agent.wake("held", &opts, &NoListener)).unwrap(), None);
    assert_eq!(block_on(env.store.load("held")).unwrap().unwrap().status, RunStatus::Finished);
    assert_eq!(runs.get(), 2);
}

#[test]
fn no_alarm_for_a_deleted_a_paused_or_a_not_retryable_run() {
    let env = Env::new();
    let opts = SweepOptions::default();
    let counters = Counters::default();
    let agent = env.agent(
        MockModel::by_turn(vec![MockTurn::tools([("refund", json!({}))]), MockTurn::text("done")]),
        vec![gated_tool("refund", &counters)],
    );
    assert_eq!(block_on(agent.wake("never", &opts, &NoListener)).unwrap(), None);
    let paused = block_on(agent.send("p", "refund it", SendOptions::default())).unwrap();
    assert_eq!(paused.status, RunStatus::AwaitingApproval);
    assert_eq!(block_on(agent.wake("p", &opts, &NoListener)).unwrap(), None, "a person decides");
    block_on(agent.delete("p")).unwrap();
    assert_eq!(block_on(agent.wake("p", &opts, &NoListener)).unwrap(), None);
    // A model that refuses the key: not retryable.
    let bad = env.agent(MockModel::by_turn(vec![MockTurn::error(401)]), vec![]);
    assert!(block_on(bad.send("k", "hi", SendOptions::default())).is_err());
    let cp = block_on(env.store.load("k")).unwrap().unwrap();
    assert!(cp.last_error.as_ref().is_some_and(|e| !e.retryable), "{:?}", cp.last_error);
    assert_eq!(block_on(bad.wake("k", &opts, &NoListener)).unwrap(), None);
    assert_eq!(counters.get("refund"), 0);
}

/// Asks for `ship` (which keeps failing) until the transcript carries the diagnosis note; then answers, if
/// `heals`, or asks for `ship` again.
fn heal_model(heals: bool) -> MockModel {
    use steadfast::core::transcript::Message;
    let turn = move |req: &steadfast::runtime::ModelRequest<'_>| {
        let noted = req
            .messages
            .iter()
            .any(|m| matches!(m, Message::User { content } if content.contains("[steadfast recovery]")));
        match noted && heals {
            true => MockTurn::text("healed"),
            false => MockTurn::tools([("ship", json!({}))]),
        }
    };
    let turn = Rc::new(turn);
    MockModel::new(
        (0..60)
            .map(|_| {
                let t = turn.clone();
                MockTurn::func(move |req| t(req))
            })
            .collect(),
    )
}

#[test]
fn alarms_alone_quarantine_or_heal_a_run_at_the_cap_generated() {
    use common::healing::Recorder;
    for_seeds("alarms_alone_quarantine_or_heal_a_run_at_the_cap_generated", 0..40, |seed| {
        let rng = SplitMix64::new(seed);
        let pick = |n: u64| rng.next_u64() % n;
        let env = if seed % 2 == 0 { Env::new() } else { Env::journal_sim() };
        let (heals, diagnosis) = (pick(2) == 0, pick(3) != 0);
        let opts = SweepOptions {
            interval_ms: 1_000 + pick(30_000),
            max_attempts: 1 + pick(4) as u32,
            retry_with_diagnosis: diagnosis,
            ..SweepOptions::default()
        };
        let runs = Rc::new(Cell::new(0));
        let agent = || env.agent(heal_model(heals), vec![flaky(u32::MAX, &runs)]);
        assert!(block_on(agent().send("r", "ship it", SendOptions::default())).is_err());
        let l = Recorder::default();
        let mut alarms = 0;
        // Only the run's alarm (no sweep tick): each fires when the one before asked.
        while let Some(at) = block_on(agent().wake("r", &opts, &l)).unwrap() {
            alarms += 1;
            assert!(alarms < 60, "the alarms end");
            assert!(at >= env.clock.now_ms(), "an alarm is never set in the past");
            env.clock.set(at);
        }
        let (original, fork) = (block_on(env.store.load("r")).unwrap(), block_on(env.store.load("r.heal")).unwrap());
        let quarantined = l.quarantined.borrow().clone();
        match (diagnosis, heals) {
            (false, _) => {
                assert!(original.is_some_and(|o| o.quarantined) && fork.is_none());
                assert_eq!(quarantined, vec!["r"], "onQuarantined once");
                assert_eq!(runs.get(), opts.max_attempts, "one execution per attempt");
            }
            (true, true) => {
                assert!(original.is_none(), "the original is deleted once its fork finished");
                assert_eq!(fork.map(|f| f.status), Some(RunStatus::Finished));
                assert_eq!(*l.recovered.borrow(), vec!["r"], "onRecovered once, with the original's id");
                assert!(quarantined.is_empty());
            }
            (true, false) => {
                assert!(original.is_some_and(|o| o.quarantined) && fork.as_ref().is_some_and(|f| f.quarantined));
                let mut q = quarantined;
                q.sort();
                assert_eq!(q, vec!["r", "r.heal"], "both quarantined, once each");
                assert_eq!(runs.get(), 2 * opts.max_attempts, "the fork tried as often as the original");
            }
        }
        // A repeated alarm (at-least-once) changes nothing.
        let before = (runs.get(), block_on(env.store.load("r")).unwrap(), block_on(env.store.load("r.heal")).unwrap());
        assert_eq!(block_on(agent().wake("r", &opts, &l)).unwrap(), None);
        let after = (runs.get(), block_on(env.store.load("r")).unwrap(), block_on(env.store.load("r.heal")).unwrap());
        assert_eq!(before, after);
        assert_eq!(
            l.quarantined.borrow().len() + l.recovered.borrow().len(),
            if diagnosis { 2 - heals as usize } else { 1 }
        );
    });
}

#[test]
fn an_alarm_waiting_on_the_outage_breaker_comes_back_after_the_next_probe_untouched() {
    use steadfast::core::sweep::{Outage, SweepState};
    for_seeds("an_alarm_waiting_on_the_outage_breaker_comes_back_after_the_next_probe_untouched", 0..20, |seed| {
        let env = Env::new();
        let runs = Rc::new(Cell::new(0));
        let agent = env.agent(model(), vec![flaky(1, &runs)]);
        assert!(block_on(agent.send("r", "ship it", SendOptions::default())).is_err());
        let opts = SweepOptions { interval_ms: 1_000 + seed * 997, ..SweepOptions::default() };
        let now = env.clock.now_ms();
        let next_probe_at = now + seed * 10_000;
        let outage = Outage { since: now, probes: 1, next_probe_at };
        let state = SweepState { outage: Some(outage), ..SweepState::default() };
        block_on(env.store.put_state("sweep", &serde_json::to_string(&state).unwrap())).unwrap();
        let before = block_on(env.store.load("r")).unwrap();
        env.clock.advance(opts.interval_ms * 100);
        let now = env.clock.now_ms();
        let at = block_on(agent.wake("r", &opts, &NoListener)).unwrap().expect("an alarm after the probe");
        let probe = next_probe_at.max(now);
        assert!((probe + opts.interval_ms..probe + 2 * opts.interval_ms).contains(&at), "{at} vs probe {probe}");
        assert_eq!((runs.get(), block_on(env.store.load("r")).unwrap()), (1, before), "untouched");
        // The breaker closed (the sweep's probe went through): the alarm resumes it.
        let closed = SweepState { last_outage_end: Some(now), ..SweepState::default() };
        block_on(env.store.put_state("sweep", &serde_json::to_string(&closed).unwrap())).unwrap();
        env.clock.set(at);
        assert_eq!(block_on(agent.wake("r", &opts, &NoListener)).unwrap(), None);
        assert_eq!(block_on(env.store.load("r")).unwrap().unwrap().status, RunStatus::Finished);
    });
}
