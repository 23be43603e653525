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
    Clock, FnTool, MockModel, MockTurn, Rng, SendOptions, SplitMix64, Tool, ToolError, ToolOutput,
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
            let next = block_on(agent().wake("r", &opts)).unwrap();
            let after = load();
            if cp.status == RunStatus::Finished || cp.attempts >= opts.max_attempts {
                // Finished: nothing to do; at the cap: the sweep quarantines it (or forks it to heal).
                assert_eq!((next, runs.get(), after), (None, executions, cp), "untouched, no alarm");
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
                _ if after.attempts >= opts.max_attempts => assert_eq!(next, None),
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
            block_on(agent().wake("r", &opts)).unwrap();
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
    let next = block_on(agent.wake("held", &opts)).unwrap();
    assert_eq!(next, Some(env.clock.now_ms() + lease.ttl_ms + lease.grace_ms));
    assert_eq!(runs.get(), 1, "no tool ran");
    // Past the lease: the alarm takes it over and finishes the run.
    env.clock.advance(lease.ttl_ms + lease.grace_ms);
    assert_eq!(block_on(agent.wake("held", &opts)).unwrap(), None);
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
    assert_eq!(block_on(agent.wake("never", &opts)).unwrap(), None);
    let paused = block_on(agent.send("p", "refund it", SendOptions::default())).unwrap();
    assert_eq!(paused.status, RunStatus::AwaitingApproval);
    assert_eq!(block_on(agent.wake("p", &opts)).unwrap(), None, "a person decides");
    block_on(agent.delete("p")).unwrap();
    assert_eq!(block_on(agent.wake("p", &opts)).unwrap(), None);
    // A model that refuses the key: not retryable.
    let bad = env.agent(MockModel::by_turn(vec![MockTurn::error(401)]), vec![]);
    assert!(block_on(bad.send("k", "hi", SendOptions::default())).is_err());
    let cp = block_on(env.store.load("k")).unwrap().unwrap();
    assert!(cp.last_error.as_ref().is_some_and(|e| !e.retryable), "{:?}", cp.last_error);
    assert_eq!(block_on(bad.wake("k", &opts)).unwrap(), None);
    assert_eq!(counters.get("refund"), 0);
}
