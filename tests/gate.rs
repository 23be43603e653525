//! The recovery gate (`AgentBuilder::recovery_gate`, `SweepOptions::ceiling`): runs' own recovery steps
//! (strict mode's alarms, `Agent::wake`) racing on simulated time never put more than the ceiling of resumes on
//! the provider at once, and every run still finishes, each tool call once per idempotency key. Over generated
//! backlogs (seeded, `STEADFAST_CASES` of them, `STEADFAST_SEED=<n>` for one): run objects (strict mode) or
//! the journal store on the hostile KV simulator, every alarm due at once or spread, a provider whose calls
//! take seeded time, alarms crashing after any effect and coming back at the lease's takeover time (as a run
//! object's alarm does), alarms repeated (at-least-once). Targeted: the ramp after an outage, a 429's
//! `Retry-After` holding the gate back (and a 429 never counting toward quarantine).

mod common;

use async_trait::async_trait;
use common::healing::Crashing;
use common::seeds::for_seeds;
use serde_json::json;
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;
use steadfast::core::classify::provider_http_error;
use steadfast::core::gate::{GateState, Grant};
use steadfast::core::machine::ModelResponse;
use steadfast::core::sweep::{gate_cap, plan, Candidate, Plan, SweepOptions, SweepState};
use steadfast::core::transcript::{Message, ToolCall, Usage};
use steadfast::runtime::{
    Agent, AgentOptions, Clock, CrashBudget, FnTool, LocalGate, Model, ModelRequest, Rng, SendOptions, SimExecutor,
    SimTime, SplitMix64, Tool, ToolOutput,
};
use steadfast::store::object::{LocalObjects, ObjectStore};
use steadfast::store::sim::{SimKv, SimOptions};
use steadfast::store::{JournalOptions, JournalStore};
use steadfast::{ErrorCode, Result, RunStatus};

const T0: u64 = 1_700_000_000_000;

/// The provider: down (503) or up; each call takes `call_ms` of simulated time; counts calls in flight.
struct ProviderState {
    time: SimTime,
    down: Cell<bool>,
    call_ms: u64,
    in_flight: Cell<usize>,
    peak: Cell<usize>,
}

#[derive(Clone)]
struct Provider(Rc<ProviderState>);

struct InFlight(Rc<ProviderState>);
impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.set(self.0.in_flight.get() - 1);
    }
}

#[async_trait(?Send)]
impl Model for Provider {
    fn id(&self) -> &str {
        "provider"
    }
    async fn generate(&self, req: ModelRequest<'_>) -> Result<ModelResponse> {
        let p = &self.0;
        if p.down.get() {
            return Err(provider_http_error(503, None, "down").with_run(req.run_id));
        }
        p.in_flight.set(p.in_flight.get() + 1);
        p.peak.set(p.peak.get().max(p.in_flight.get()));
        let _in_flight = InFlight(p.clone());
        p.time.sleep_ms(p.call_ms).await;
        let paid = req.messages.iter().any(|m| matches!(m, Message::Tool(_)));
        let mut answer = ModelResponse { usage: Usage::tokens(10, 5), ..ModelResponse::default() };
        if paid {
            answer.text = "ok".into();
        } else {
            answer.tool_calls =
                vec![ToolCall { id: "c1".into(), name: "pay".into(), args: json!({}), ..ToolCall::default() }];
        }
        Ok(answer)
    }
}

/// Each run's `pay` executions, by the idempotency key each was given.
type Paid = Rc<RefCell<BTreeMap<String, Vec<String>>>>;

struct World {
    time: SimTime,
    kv: SimKv,
    objects: Option<LocalObjects>,
    gate: Rc<LocalGate>,
    provider: Provider,
    paid: Paid,
    seeds: Cell<u64>,
}

impl World {
    /// A fresh agent over a fresh store handle (a new isolate), sharing the gate.
    fn agent(&self) -> Agent {
        let clock = Rc::new(self.time.clone());
        self.seeds.set(self.seeds.get() + 1);
        let paid = self.paid.clone();
        let pay: Rc<dyn Tool> = Rc::new(FnTool::new("pay", "pays", json!({"type": "object"}), move |_a, ctx| {
            paid.borrow_mut().entry(ctx.run_id.to_string()).or_default().push(ctx.idempotency_key().to_string());
            async move { Ok(ToolOutput::text("paid")) }
        }));
        let builder = Agent::builder(self.provider.clone()).tool_rc(pay).recovery_gate(self.gate.clone());
        let builder = match &self.objects {
            Some(objects) => {
                builder.store(ObjectStore::new(objects.clone(), self.kv.at(0), "", clock.clone(), clock.clone()))
            }
            None => {
                builder.store(JournalStore::new(self.kv.at(0), clock.clone(), clock.clone(), JournalOptions::default()))
            }
        };
        let mut options = AgentOptions::default();
        options.retry.max_attempts = 1;
        builder
            .clock(clock.clone())
            .sleep(clock)
            .rng(Rc::new(SplitMix64::new(self.seeds.get().wrapping_mul(0x9E37_79B9_7F4A_7C15))))
            .options(options)
            .build()
            .expect("the agent builds")
    }
}

fn cases() -> u64 {
    std::env::var("STEADFAST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(40)
}

#[test]
fn alarms_under_a_gate_never_exceed_the_ceiling_and_every_run_finishes_generated() {
    for_seeds("alarms_under_a_gate_never_exceed_the_ceiling_and_every_run_finishes_generated", 0..cases(), |seed| {
        let rng = Rc::new(SplitMix64::new(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x6A7E));
        let pick = {
            let rng = rng.clone();
            move |n: u64| rng.next_u64() % n
        };
        let exec = SimExecutor::new(T0, seed);
        let time = exec.time();
        let kv = SimKv::new(Rc::new(time.clone()), SimOptions::default());
        let provider = Provider(Rc::new(ProviderState {
            time: time.clone(),
            down: Cell::new(true),
            call_ms: 50 + pick(900),
            in_flight: Cell::new(0),
            peak: Cell::new(0),
        }));
        let world = Rc::new(World {
            time: time.clone(),
            kv,
            objects: (seed % 2 == 0).then(LocalObjects::default),
            gate: Rc::new(LocalGate::new(Rc::new(time.clone()))),
            provider: provider.clone(),
            paid: Rc::default(),
            seeds: Cell::new(seed << 20),
        });
        let n = 5 + pick(40) as usize;
        let ceiling = 1 + pick(6) as u32;
        let so = Rc::new(SweepOptions { ceiling: Some(ceiling), max_attempts: 50, ..SweepOptions::default() });
        // The backlog: every run fails on its first model call while the provider is down.
        for i in 0..n {
            let a = world.agent();
            exec.spawn(async move { a.send(&format!("run-{i:03}"), "go", SendOptions::default()).await.unwrap_err() });
        }
        exec.run();
        exec.advance(60_000);
        provider.0.down.set(false);
        let spread = [0, 1_000, 60_000][pick(3) as usize];
        let alarms = Rc::new(Cell::new(0u32));
        for i in 0..n {
            let (w, so, alarms) = (world.clone(), so.clone(), alarms.clone());
            let first = pick(spread + 1);
            let crashes: Vec<Option<usize>> = (0..8).map(|_| (pick(3) == 0).then(|| 1 + pick(6) as usize)).collect();
            let repeat = pick(4) == 0;
            exec.spawn(async move {
                let id = format!("run-{i:03}");
                w.time.sleep_ms(first).await;
                for k in 0.. {
                    assert!(k < 500, "{id}: the alarms end");
                    alarms.set(alarms.get() + 1);
                    let a = w.agent();
                    let budget = crashes.get(k).copied().flatten().map(|e| CrashBudget::new(e, k % 2 == 0));
                    let next = a.wake(&id, &so, &Crashing(budget.clone())).await;
                    if repeat {
                        // At-least-once: the same alarm again at once.
                        let again = w.agent().wake(&id, &so, &Crashing(None)).await;
                        assert!(again.is_ok(), "{id}: {again:?}");
                    }
                    let at = match next {
                        // A crashed execution: its object's alarm (set for the lease's takeover) fires then.
                        _ if budget.is_some_and(|b| b.crashed()) => a.takeover_at(),
                        Ok(Some(at)) => at,
                        Ok(None) => return,
                        Err(e) => panic!("{id}: alarm failed: {e}"),
                    };
                    let now = w.time.now_ms();
                    w.time.sleep_ms(at.saturating_sub(now).max(1)).await;
                }
            });
        }
        exec.run();
        let a = world.agent();
        let paid = world.paid.clone();
        exec.block_on(async move {
            for i in 0..n {
                let id = format!("run-{i:03}");
                let cp = a.store().load(&id).await.unwrap().expect("the run is there");
                assert_eq!(cp.status, RunStatus::Finished, "{id}: {:?} {:?}", cp.status, cp.last_error);
                let keys = paid.borrow().get(&id).cloned().unwrap_or_default();
                assert!(!keys.is_empty() && keys.iter().all(|k| *k == keys[0]), "{id}: pay ran with keys {keys:?}");
            }
        });
        let peak = provider.0.peak.get();
        assert!(peak <= ceiling as usize, "seed {seed}: {peak} calls at once, ceiling {ceiling}");
        assert_eq!(world.gate.held(), 0, "every slot was given back or taken back");
        if std::env::var("STEADFAST_TRACE").is_ok() {
            println!("seed {seed}: {n} runs, ceiling {ceiling}, peak {peak}, {} alarms", alarms.get());
        }
    });
}

/// The gate's cap ramps after an outage as the fan-out's sends do: `max_runs` in the first minute, ×4 a minute,
/// never above the ceiling; no ceiling, no cap.
#[test]
fn the_gates_cap_ramps_after_an_outage_up_to_the_ceiling() {
    let so = SweepOptions { ceiling: Some(500), max_runs: 25, ..SweepOptions::default() };
    let end = T0;
    let state = SweepState { last_outage_end: Some(end), ..SweepState::default() };
    let caps: Vec<Option<u32>> = (0..4).map(|m| gate_cap(&so, &state, end + m * 60_000 + 1)).collect();
    assert_eq!(caps, vec![Some(25), Some(100), Some(400), Some(500)]);
    assert_eq!(gate_cap(&so, &SweepState::default(), end), Some(500), "no outage: the ceiling");
    assert_eq!(gate_cap(&SweepOptions::default(), &state, end), None, "no ceiling: no gate");
    assert_eq!(gate_cap(&SweepOptions { ceiling: Some(10), ..so }, &state, end), Some(10));
}

/// A 429 holds the gate back for its `Retry-After` (every caller is told to come back after it), and a run
/// whose last failure was a 429 is never quarantined for it: it waits its backoff.
#[test]
fn a_429_holds_the_gate_back_and_never_counts_toward_quarantine() {
    let mut g = GateState::default();
    assert_eq!(g.acquire("a", 3, 0), Grant::Granted);
    g.release("a", 10, Some(5_000));
    assert!(matches!(g.acquire("b", 3, 20), Grant::Later(at) if at >= 5_010));
    let so = SweepOptions { max_attempts: 2, ..SweepOptions::default() };
    let run = |code: ErrorCode| Candidate {
        run_id: "r",
        status: RunStatus::InProgress,
        attempts: 9,
        last_error: Some(code),
        retryable: true,
        quarantined: false,
        outage_error: code.is_outage(),
        saved_at: 0,
        heal_of: None,
    };
    let state = SweepState::default();
    assert!(matches!(plan(&so, &state, 1, &run(ErrorCode::ProviderRateLimited)), Plan::Backoff { .. }));
    assert_eq!(plan(&so, &state, u64::MAX / 2, &run(ErrorCode::ProviderRateLimited)), Plan::Resume);
    assert_eq!(plan(&so, &state, 1, &run(ErrorCode::ProviderUnavailable)), Plan::Quarantine);
}
