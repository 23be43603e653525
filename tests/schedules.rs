//! Schedules (M23): each fire claimed in the store and run once, by one process ticking again and again, by
//! a process killed mid-fire, and by racing replicas on the hostile Workers-KV simulator (generated seeds).

mod common;

use common::{block_on, counting_tool, Counters, Env};
use serde_json::json;
use std::cell::RefCell;
use std::rc::Rc;
use steadfast::core::checkpoint::RunStatus;
use steadfast::core::schedule::{compile_all, CompiledSchedule, MissedFires, Schedule, ScheduleInput};
use steadfast::core::sweep::SweepOptions;
use steadfast::runtime::{
    AbortSignal, CrashPoint, MockModel, MockTurn, NoListener, ScheduleOutcome, SendOptions, SimExecutor, SplitMix64,
};
use steadfast::store::sim::{SimKv, SimOptions};
use steadfast::store::{JournalOptions, JournalStore, RunKind, RunStore};
use steadfast::{Agent, ErrorCode};

const MIN: u64 = 60_000;
/// The hour after T0 starts at 23:00.
const NEXT_HOUR: u64 = 1_700_002_800_000;

fn schedule(id: &str, cron: &str, missed: MissedFires) -> CompiledSchedule {
    CompiledSchedule::compile(Schedule {
        id: id.into(),
        cron: cron.into(),
        input: ScheduleInput::Text("Write the hourly report".into()),
        missed: Some(missed),
        grace_ms: Some(2 * MIN),
    })
    .unwrap()
}

fn script() -> Vec<MockTurn> {
    vec![MockTurn::tools([("report", json!({"part": 1})), ("report", json!({"part": 2}))]), MockTurn::text("Filed.")]
}

fn kinds(outcomes: &[ScheduleOutcome]) -> Vec<&'static str> {
    outcomes
        .iter()
        .map(|o| match o {
            ScheduleOutcome::Fired { .. } => "fired",
            ScheduleOutcome::AlreadyFired { .. } => "already-fired",
            ScheduleOutcome::Claimed { .. } => "claimed",
            ScheduleOutcome::Skipped { .. } => "skipped",
            ScheduleOutcome::Idle { .. } => "idle",
            ScheduleOutcome::Failed { .. } => "failed",
        })
        .collect()
}

#[test]
fn a_schedule_fires_once_per_fire_time_however_often_it_ticks() {
    for (label, env) in [("memory", Env::new()), ("journal on the KV simulator", Env::journal_sim())] {
        let c = Counters::default();
        let model = MockModel::by_turn(script());
        let agent = env.agent(model.clone(), vec![counting_tool("report", &c)]);
        let hourly = [schedule("hourly", "0 * * * *", MissedFires::RunOnce)];
        // First seen at 22:13: the 22:00 fire was before the schedule existed.
        let first = block_on(agent.fire_schedules(&hourly, &SendOptions::default()));
        assert_eq!(first, vec![ScheduleOutcome::Idle { schedule_id: "hourly".into(), next_fire_at: Some(NEXT_HOUR) }]);
        // Every minute from 23:00 to 23:10: one fire.
        env.clock.set(NEXT_HOUR);
        let mut seen = Vec::new();
        for _ in 0..10 {
            seen.extend(kinds(&block_on(agent.fire_schedules(&hourly, &SendOptions::default()))));
            env.clock.advance(MIN);
        }
        assert_eq!(seen[0], "fired", "{label}");
        assert!(seen[1..].iter().all(|k| *k == "already-fired"), "{label}: {seen:?}");
        assert_eq!(model.call_count(), 2, "{label}");
        assert_eq!(c.get("report"), 2, "{label}");
        let run = block_on(agent.load("hourly.1700002800.fire")).unwrap().expect("the fire is a run");
        assert_eq!(run.status, RunStatus::Finished);
        // Down from 23:10 to 02:30: the ticks after find the 02:00 fire, once (not 00:00 and 01:00 as well).
        env.clock.set(NEXT_HOUR + 3 * 60 * MIN + 30 * MIN);
        let outcomes = block_on(agent.fire_schedules(&hourly, &SendOptions::default()));
        match &outcomes[0] {
            ScheduleOutcome::Fired { run_id, fire_at, status, .. } => {
                assert_eq!((run_id.as_str(), *fire_at), ("hourly.1700013600.fire", NEXT_HOUR + 3 * 60 * MIN));
                assert_eq!(*status, RunStatus::Finished);
            }
            other => panic!("{label}: {other:?}"),
        }
        assert!(block_on(agent.load("hourly.1700006400.fire")).unwrap().is_none(), "{label}: missed fires collapse");
    }
}

#[test]
fn a_skipping_schedule_skips_a_fire_found_late_and_runs_the_next_on_time() {
    let env = Env::new();
    let c = Counters::default();
    let agent = env.agent(MockModel::by_turn(script()), vec![counting_tool("report", &c)]);
    let s = [schedule("hourly", "0 * * * *", MissedFires::Skip)];
    block_on(agent.fire_schedules(&s, &SendOptions::default()));
    env.clock.set(NEXT_HOUR + 5 * MIN);
    assert_eq!(kinds(&block_on(agent.fire_schedules(&s, &SendOptions::default()))), ["skipped"]);
    env.clock.set(NEXT_HOUR + 60 * MIN + MIN);
    assert_eq!(kinds(&block_on(agent.fire_schedules(&s, &SendOptions::default()))), ["fired"]);
    assert_eq!(c.get("report"), 2);
}

#[test]
fn a_fire_killed_after_any_effect_is_never_fired_again_and_the_sweep_finishes_it() {
    let hourly = [schedule("hourly", "0 * * * *", MissedFires::RunOnce)];
    let mut exercised = 0;
    for k in 1..100 {
        for finish_in_flight in [false, true] {
            let ctx = format!("crash after effect {k}, finish_in_flight={finish_in_flight}");
            let env = Env::journal_sim();
            let c = Counters::default();
            let agent = env.agent(MockModel::by_turn(script()), vec![counting_tool("report", &c)]);
            block_on(agent.fire_schedules(&hourly, &SendOptions::default()));
            env.clock.set(NEXT_HOUR + 10_000);
            let crash =
                SendOptions { crash: Some(CrashPoint { after_effects: k, finish_in_flight }), ..Default::default() };
            let outcome = block_on(agent.fire_schedules(&hourly, &crash)).remove(0);
            let crashed = matches!(&outcome, ScheduleOutcome::Failed { error, .. } if error.code == ErrorCode::Crashed);
            if !crashed {
                assert_eq!(kinds(&[outcome]), ["fired"], "{ctx}");
                continue;
            }
            exercised += 1;
            let recorded = block_on(agent.load("hourly.1700002800.fire")).unwrap();
            env.past_leases();
            let c2 = Counters::default();
            let fresh = env.agent(MockModel::by_turn(script()), vec![counting_tool("report", &c2)]);
            let again = block_on(fresh.fire_schedules(&hourly, &SendOptions::default()));
            match recorded {
                // Killed before the fire's input was recorded: nothing was claimed; the next tick fires it.
                None => assert_eq!(kinds(&again), ["fired"], "{ctx}"),
                Some(cp) => {
                    assert_eq!(kinds(&again), ["already-fired"], "{ctx}");
                    let pending = block_on(fresh.pending()).unwrap();
                    if cp.status != RunStatus::Finished {
                        assert_eq!(pending.len(), 1, "{ctx}");
                        assert_eq!(pending[0].kind, RunKind::Schedule, "{ctx}");
                        assert_eq!(pending[0].owner_id.as_deref(), Some("hourly"), "{ctx}");
                    }
                    block_on(fresh.sweep(&SweepOptions::default(), &NoListener)).unwrap();
                }
            }
            let done = block_on(fresh.load("hourly.1700002800.fire")).unwrap().expect("fired");
            assert_eq!(done.status, RunStatus::Finished, "{ctx}");
            assert!(c.get("report") + c2.get("report") <= 4, "{ctx}: at most a crashed call runs again");
            for id in ["call_0_0", "call_0_1"] {
                let runs = c.get(&format!("call:{id}")) + c2.get(&format!("call:{id}"));
                assert!((1..=2).contains(&runs), "{ctx}: {id} ran {runs} times");
            }
        }
        if exercised > 0 && k > 40 {
            break;
        }
    }
    println!("fire crash points exercised: {exercised}");
    assert!(exercised >= 6, "crash points exercised: {exercised}");
}

#[test]
fn bad_schedules_are_refused_before_anything_runs() {
    let bad = |json: &str| -> ErrorCode {
        let specs: Vec<Schedule> = serde_json::from_str(json).unwrap();
        compile_all(specs).unwrap_err().code
    };
    assert_eq!(bad(r#"[{"id":"a","cron":"* * *","input":"x"}]"#), ErrorCode::ConfigInvalid);
    assert_eq!(bad(r#"[{"id":"a.b","cron":"@daily","input":"x"}]"#), ErrorCode::SessionIdInvalid);
    assert_eq!(
        bad(r#"[{"id":"a","cron":"@daily","input":"x"},{"id":"a","cron":"@hourly","input":"y"}]"#),
        ErrorCode::ConfigInvalid
    );
    let env = Env::new();
    let agent = env.agent(MockModel::by_turn(script()), vec![]);
    let err = block_on(agent.send("hourly.1700002800.fire", "x", SendOptions::default())).unwrap_err();
    assert_eq!(err.code, ErrorCode::SessionIdInvalid);
}

/// One trial: `n` replicas (agents over their own journal store on one shared hostile KV simulator, one
/// location) tick the same schedule at seeded moments around the fire time, some twice (overlapping cron
/// invocations). Returns the tool executions per call id and every outcome.
fn racing_trial(seed: u64) -> (Counters, Vec<&'static str>, Option<RunStatus>) {
    let exec = SimExecutor::new(NEXT_HOUR - 5_000, seed);
    let time = exec.time();
    let kv = SimKv::with_timer(Rc::new(time.clone()), Rc::new(time.clone()), SimOptions::hostile(seed));
    let rng = SplitMix64::new(seed ^ 0x5c4e);
    let pick = |n: u64| steadfast::runtime::Rng::next_u64(&rng) % n;
    let c = Counters::default();
    let outcomes = Rc::new(RefCell::new(Vec::new()));
    let hourly = Rc::new(vec![schedule("hourly", "0 * * * *", MissedFires::RunOnce)]);
    let replicas = 2 + pick(2);
    // The schedule exists since before the fire.
    let setup = JournalStore::new(kv.at(0), Rc::new(time.clone()), Rc::new(time.clone()), JournalOptions::default());
    kv.start_invocation();
    exec.block_on(async move { setup.put_state("schedule/hourly", "0").await.unwrap() });
    for r in 0..replicas {
        let kv = kv.at(0);
        let store =
            JournalStore::new(kv.clone(), Rc::new(time.clone()), Rc::new(time.clone()), JournalOptions::default());
        let model = MockModel::by_turn(script()).with_sleep(Rc::new(time.clone()));
        let agent = Agent::builder(model)
            .tool_rc(counting_tool("report", &c))
            .store(store)
            .clock(Rc::new(time.clone()))
            .sleep(Rc::new(time.clone()))
            .rng(Rc::new(SplitMix64::new(seed * 7 + r)))
            .build()
            .unwrap();
        let ticks: Vec<u64> = (0..1 + pick(2)).map(|_| 5_000 + pick(1_500)).collect();
        for at in ticks {
            let (agent, time, kv, outcomes, hourly) =
                (agent.clone(), time.clone(), kv.clone(), outcomes.clone(), hourly.clone());
            exec.spawn(async move {
                steadfast::runtime::Sleep::sleep(&time, at).await;
                kv.start_invocation();
                let out = agent.fire_schedules(&hourly, &SendOptions::default()).await;
                outcomes.borrow_mut().extend(kinds(&out));
            });
        }
    }
    exec.run();
    let oracle = JournalStore::new(kv.at(0), Rc::new(time.clone()), Rc::new(time.clone()), JournalOptions::default());
    kv.start_invocation();
    let status = exec.block_on(async move { oracle.load("hourly.1700002800.fire").await.unwrap().map(|cp| cp.status) });
    let got = outcomes.borrow().clone();
    (c, got, status)
}

#[test]
fn replicas_ticking_the_same_fire_at_once_run_it_once_generated() {
    let only = common::seeds::only_seed();
    let seeds = common::seeds::seeds(0..300);
    let trials = seeds.len();
    let mut claimed = 0;
    for seed in seeds {
        let repro = format!("repro: {}", common::seeds::repro(seed, "replicas_ticking"));
        let (c, outcomes, status) = racing_trial(seed);
        assert_eq!(status, Some(RunStatus::Finished), "seed {seed}: {outcomes:?}; {repro}");
        assert_eq!(outcomes.iter().filter(|o| **o == "fired").count(), 1, "seed {seed}: {outcomes:?}; {repro}");
        assert!(!outcomes.contains(&"failed"), "seed {seed}: {outcomes:?}; {repro}");
        for id in ["call_0_0", "call_0_1"] {
            assert_eq!(c.get(&format!("call:{id}")), 1, "seed {seed}: {id} ran twice; {outcomes:?}; {repro}");
        }
        claimed += outcomes.iter().filter(|o| **o == "claimed").count();
    }
    if only.is_none() {
        println!("schedule racing trials: {trials}, ticks turned away while another replica held the fire: {claimed}");
        assert!(claimed > 0, "the trials make replicas meet on a fire");
    }
}

#[test]
fn run_schedules_ticks_on_the_agents_clock_and_fires_each_fire_time_once_until_stopped() {
    let env = Env::new();
    let c = Counters::default();
    let model = MockModel::by_turn(script());
    let agent = env.agent(model.clone(), vec![counting_tool("report", &c)]);
    let every5 = [schedule("every5", "*/5 * * * *", MissedFires::RunOnce)];
    let stop = AbortSignal::new();
    let ticks_seen: RefCell<Vec<Vec<&'static str>>> = RefCell::new(Vec::new());
    let fired: RefCell<Vec<u64>> = RefCell::new(Vec::new());
    let on_tick = |outcomes: &[ScheduleOutcome]| {
        ticks_seen.borrow_mut().push(kinds(outcomes));
        for o in outcomes {
            if let ScheduleOutcome::Fired { fire_at, .. } = o {
                fired.borrow_mut().push(*fire_at);
            }
        }
        if fired.borrow().len() == 3 {
            stop.abort();
        }
    };
    let ticks = block_on(agent.run_schedules(&every5, MIN, &SendOptions::default(), &on_tick, &stop));
    let fired = fired.into_inner();
    // T0 is 22:13:20: ticks every minute fire 22:15, 22:20 and 22:25, each once.
    assert_eq!(fired, vec![NEXT_HOUR - 45 * MIN, NEXT_HOUR - 40 * MIN, NEXT_HOUR - 35 * MIN]);
    assert_eq!(ticks as usize, ticks_seen.borrow().len());
    assert_eq!(ticks_seen.borrow()[0], ["idle"], "the first tick is at once");
    assert_eq!(ticks, 13, "one tick a minute from 22:13:20 to 22:25:20");
    assert_eq!(c.get("report"), 6, "two report calls per fire, three fires");
    assert!(env.sleep.slept().iter().filter(|ms| **ms == MIN).count() >= 12, "it slept on the agent's sleep");
    // Stopped before it starts: no tick.
    assert_eq!(block_on(agent.run_schedules(&every5, MIN, &SendOptions::default(), &|_| {}, &stop)), 0);
}

/// Strict mode's split of a tick: the due fire found here, run elsewhere (the fire's run's object) by
/// `run_fire`, which runs only a past fire time of the schedule; every other outcome passes through.
#[test]
fn a_due_fire_is_handed_to_whoever_runs_it_and_run_fire_runs_only_past_fire_times_of_its_schedule() {
    let env = Env::new();
    let c = Counters::default();
    let model = MockModel::by_turn(script());
    let agent = env.agent(model.clone(), vec![counting_tool("report", &c)]);
    let hourly = [schedule("hourly", "0 * * * *", MissedFires::RunOnce)];
    let handed = RefCell::new(Vec::new());
    let tick = || {
        block_on(agent.fire_schedules_with(
            &hourly,
            async |s, due| {
                handed.borrow_mut().push((s.spec.id.clone(), due.clone()));
                agent.run_fire(s, due.fire_at, &SendOptions::default()).await
            },
            |o| o,
        ))
    };
    // First seen at 22:13: nothing due, nothing handed over.
    assert_eq!(kinds(&tick()), ["idle"]);
    assert!(handed.borrow().is_empty());
    env.clock.set(NEXT_HOUR + 5 * MIN);
    assert_eq!(kinds(&tick()), ["fired"]);
    let due = steadfast::runtime::DueFire { run_id: "hourly.1700002800.fire".into(), fire_at: NEXT_HOUR };
    assert_eq!(*handed.borrow(), vec![("hourly".to_string(), due)]);
    // Found by the next tick: not handed over again.
    assert_eq!(kinds(&tick()), ["already-fired"]);
    assert_eq!(handed.borrow().len(), 1);
    // run_fire: the same fire again is already fired; a time that is no fire time of the schedule, or a fire
    // time still to come, is refused and runs nothing.
    let again = block_on(agent.run_fire(&hourly[0], NEXT_HOUR, &SendOptions::default()));
    assert_eq!(kinds(&[again]), ["already-fired"]);
    let calls = model.call_count();
    for at in [NEXT_HOUR + 1_000, NEXT_HOUR + 60 * MIN] {
        match block_on(agent.run_fire(&hourly[0], at, &SendOptions::default())) {
            ScheduleOutcome::Failed { error, run_id, .. } => {
                assert_eq!(error.code, ErrorCode::InvalidInput, "{at}");
                assert!(block_on(agent.load(run_id.as_deref().unwrap())).unwrap().is_none(), "{at}: no run");
            }
            other => panic!("{at}: {other:?}"),
        }
    }
    assert_eq!(model.call_count(), calls, "nothing ran");
    assert_eq!(c.get("report"), 2);
}
