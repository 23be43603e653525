//! Racing replicas on the Workers-KV simulator: two runtimes ("replicas") send and resume the same run with
//! random stalls (some longer than the lease), random crashes and random cache priming, in one location and
//! in two locations with a 60 s propagation delay.
//!
//! * A **double execution** is a tool call that starts although a result for it was already durably written
//!   (an oracle reads every journal entry at the origin before each execution).
//! * A **lost boundary** is a trial whose final stored run is not the complete, valid, finished transcript of
//!   the uninterrupted run.
//!
//! Same location: both must be zero. Two locations: lost boundaries must be zero; the double-execution rate
//! is measured and printed (leases on KV are best effort across locations).

mod common;

use common::*;
use futures::executor::LocalPool;
use futures::task::LocalSpawnExt;
use serde_json::json;
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;
use steadfast::core::checkpoint::{JournalEntry, RunStatus};
use steadfast::core::transcript::{validate_transcript, Message};
use steadfast::runtime::AgentOptions;
use steadfast::runtime::{
    Agent, CrashPoint, FnTool, ManualClock, ManualSleep, MockModel, MockTurn, Rng, SendOptions, SplitMix64, StallPoint,
    Tool, ToolOutput,
};
use steadfast::store::sim::{SimKv, SimOptions};
use steadfast::store::{JournalOptions, JournalStore, LeaseOptions, RunStore};

const RUN: &str = "race";
const INPUT: &str = "Reconcile the ledger";

fn script() -> Vec<MockTurn> {
    vec![
        MockTurn::tools([("step", json!({"n": 1})), ("step", json!({"n": 2}))]),
        MockTurn::tools([("step", json!({"n": 3}))]),
        MockTurn::tools([("step", json!({"n": 4})), ("step", json!({"n": 5}))]),
        MockTurn::tools([("step", json!({"n": 6}))]),
        MockTurn::text("Ledger reconciled."),
    ]
}

/// Has a result for `call_id` been written durably by anyone (any segment, any owner)?
fn recorded_anywhere(kv: &SimKv, call_id: &str) -> bool {
    kv.keys().iter().filter(|k| k.starts_with(&format!("run/{RUN}/j/"))).any(|k| {
        let Some(raw) = kv.raw(k) else { return false };
        let Ok(entry) = serde_json::from_str::<JournalEntry>(&raw) else { return false };
        let json = serde_json::to_value(&entry).unwrap_or_default();
        let text = json.to_string();
        text.contains(&format!("\"toolCallId\":\"{call_id}\""))
    })
}

struct Trial {
    double_executions: u32,
    lost_boundary: bool,
    takeovers: u32,
}

struct World {
    lease: LeaseOptions,
    clock: ManualClock,
    kv: SimKv,
    executions: Rc<RefCell<BTreeMap<String, u32>>>,
    doubles: Rc<Cell<u32>>,
}

impl World {
    fn step_tool(&self) -> Rc<dyn Tool> {
        let origin = self.kv.origin();
        let executions = self.executions.clone();
        let doubles = self.doubles.clone();
        Rc::new(FnTool::new("step", "one ledger step", json!({"type": "object"}), move |args, ctx| {
            if recorded_anywhere(&origin, &ctx.tool_call_id) {
                doubles.set(doubles.get() + 1);
            }
            *executions.borrow_mut().entry(ctx.tool_call_id.clone()).or_insert(0) += 1;
            async move { Ok(ToolOutput::text(format!("step {} done", args["n"]))) }
        }))
    }

    fn replica(&self, location: usize, seed: u64) -> Agent {
        let store = JournalStore::new(
            self.kv.at(location),
            Rc::new(self.clock.clone()),
            Rc::new(ManualSleep::new(self.clock.clone())),
            JournalOptions::default(),
        );
        Agent::builder(MockModel::by_turn(script()))
            .tool_rc(self.step_tool())
            .store(store)
            .clock(Rc::new(self.clock.clone()))
            .sleep(Rc::new(ManualSleep::new(self.clock.clone())))
            .rng(Rc::new(SplitMix64::new(seed)))
            .options(AgentOptions { lease: self.lease, ..AgentOptions::default() })
            .build()
            .unwrap()
    }

    fn oracle(&self) -> JournalStore<SimKv> {
        JournalStore::new(
            self.kv.origin(),
            Rc::new(self.clock.clone()),
            Rc::new(ManualSleep::new(self.clock.clone())),
            JournalOptions::default(),
        )
    }
}

fn reference_messages() -> Vec<Message> {
    let clock = ManualClock::new(1_700_000_000_000);
    let kv = SimKv::new(Rc::new(clock.clone()), SimOptions::default());
    let world = World {
        lease: LeaseOptions::default(),
        clock,
        kv,
        executions: Default::default(),
        doubles: Default::default(),
    };
    let done = block_on(world.replica(0, 1).send(RUN, INPUT, SendOptions::default())).unwrap();
    assert_eq!(done.status, RunStatus::Finished);
    done.messages
}

fn trial(seed: u64, locations: usize, lease: LeaseOptions, reference: &[Message]) -> Trial {
    let rng = SplitMix64::new(seed);
    let pick = |n: u64| rng.next_u64() % n;
    let clock = ManualClock::new(1_700_000_000_000);
    let kv = SimKv::new(Rc::new(clock.clone()), SimOptions { locations, ..SimOptions::default() });
    let world = World { lease, clock: clock.clone(), kv, executions: Default::default(), doubles: Default::default() };
    let loc_b = if locations > 1 { 1 } else { 0 };
    let a = world.replica(0, seed * 2 + 1);
    let b = world.replica(loc_b, seed * 2 + 2);

    // B may have looked at the run (priming its location's cache) before A starts or while A runs.
    if pick(2) == 0 {
        let _ = block_on(b.load(RUN));
    }
    let stall_at = 1 + pick(30) as usize;
    let stall_ms = [3_000, 20_000, 45_000, 70_000, 150_000][pick(5) as usize];
    let a_crashes = pick(4) == 0;
    let (tx, rx) = futures::channel::oneshot::channel::<()>();
    let rx = Rc::new(RefCell::new(Some(rx)));
    let opts_a = if a_crashes {
        SendOptions {
            crash: Some(CrashPoint { after_effects: stall_at, finish_in_flight: pick(2) == 0 }),
            ..SendOptions::default()
        }
    } else {
        let wait = Rc::new(move || -> steadfast::runtime::traits::LocalFuture<'static, ()> {
            let rx = rx.borrow_mut().take();
            Box::pin(async move {
                if let Some(rx) = rx {
                    let _ = rx.await;
                }
            })
        });
        SendOptions { stall: Some(StallPoint { after_effects: stall_at, wait }), ..SendOptions::default() }
    };
    let mut pool = LocalPool::new();
    let a_result = Rc::new(RefCell::new(None));
    {
        let a = a.clone();
        let a_result = a_result.clone();
        pool.spawner()
            .spawn_local(async move {
                let r = a.send(RUN, INPUT, opts_a).await;
                *a_result.borrow_mut() = Some(r);
            })
            .unwrap();
    }
    pool.run_until_stalled();
    // While A is frozen (or dead), time passes and B tries the same run.
    clock.advance(stall_ms);
    if pick(3) == 0 {
        let _ = block_on(b.load(RUN));
        clock.advance(pick(20_000));
    }
    let b_crash =
        (pick(3) == 0).then(|| CrashPoint { after_effects: 1 + pick(25) as usize, finish_in_flight: pick(2) == 0 });
    let opts_b = SendOptions { crash: b_crash, ..SendOptions::default() };
    let b_ran = if pick(2) == 0 {
        block_on(b.send(RUN, INPUT, opts_b)).is_ok()
    } else {
        block_on(b.resume(RUN, opts_b)).is_ok_and(|r| r.is_some())
    };
    let takeovers = u32::from(b_ran);
    // A wakes up.
    let _ = tx.send(());
    pool.run();

    // Finish the run from whatever is stored, alternating replicas, after every lease expired.
    let oracle = world.oracle();
    for i in 0..12 {
        let cp = block_on(oracle.load(RUN)).ok().flatten();
        if cp.as_ref().is_some_and(|c| c.status == RunStatus::Finished) {
            break;
        }
        clock.advance(125_000);
        let r = if i % 2 == 0 { &a } else { &b };
        let _ = match cp {
            None => block_on(r.send(RUN, INPUT, SendOptions::default())).map(|_| ()),
            Some(_) => block_on(r.resume(RUN, SendOptions::default())).map(|_| ()),
        };
    }
    let final_cp = block_on(oracle.load(RUN)).ok().flatten();
    let lost_boundary = match &final_cp {
        Some(cp) => {
            cp.status != RunStatus::Finished || validate_transcript(&cp.messages).is_err() || cp.messages != reference
        }
        None => true,
    };
    Trial { double_executions: world.doubles.get(), lost_boundary, takeovers }
}

fn run(locations: usize, lease: LeaseOptions, trials: u64) -> (u64, u64, u64, u64) {
    let reference = reference_messages();
    let (mut doubles, mut trials_with_double, mut lost, mut takeovers) = (0, 0, 0, 0);
    for seed in 0..trials {
        let t = trial(seed + 1_000 * locations as u64, locations, lease, &reference);
        doubles += t.double_executions as u64;
        trials_with_double += u64::from(t.double_executions > 0);
        lost += u64::from(t.lost_boundary);
        takeovers += t.takeovers as u64;
    }
    (doubles, trials_with_double, lost, takeovers)
}

#[test]
fn racing_replicas_in_one_location() {
    let n = 1_000;
    let (doubles, _, lost, takeovers) = run(1, LeaseOptions::default(), n);
    println!("one location: racing trials: {n}, double executions: {doubles}, lost boundaries: {lost} (B ran the run in {takeovers} trials)");
    assert_eq!(lost, 0, "lost boundaries");
    assert_eq!(doubles, 0, "double executions of a recorded step");
    assert!(takeovers > 0, "the scenarios exercise takeovers");
}

#[test]
fn racing_replicas_in_two_locations() {
    let n = 1_000;
    for (label, lease) in [
        ("default lease 30 s + 30 s grace", LeaseOptions::default()),
        ("lease 120 s + 90 s grace", LeaseOptions { ttl_ms: 120_000, renew_every_ms: 10_000, grace_ms: 90_000 }),
    ] {
        let (doubles, with_double, lost, takeovers) = run(2, lease, n);
        println!(
            "two locations (60 s propagation), {label}: racing trials: {n}, double executions: {doubles} ({with_double} trials, {:.1}%), lost boundaries: {lost} (B ran the run in {takeovers} trials)",
            100.0 * with_double as f64 / n as f64
        );
        assert_eq!(lost, 0, "lost boundaries");
    }
}
