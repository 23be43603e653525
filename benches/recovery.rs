//! Recovery after a provider outage, on simulated time (`cargo bench --bench recovery`; P15).
//!
//! What it simulates: N runs are pending because the provider was down (each failed on its first model call
//! with a 503; one run is made through the agent, the others are copies of its KV keys). At t0 the provider
//! comes back. It takes at most C calls at once, each for 500 ms of simulated time; a call arriving while C
//! are in flight is answered 429 at once. Each run needs one more model call (answer "ok") to finish.
//! * KV fan-out: a cron fires every 60 s from t0 (each tick its own task, so slow ticks may overlap, as cron
//!   invocations do) and calls `Agent::sweep_fanning_out` into a `SimQueue`; K = C - 1 consumers (the tick's
//!   canary is the C-th caller: a queue consumer's `max_concurrency` is set one below the provider's) each loop: take one
//!   message, `consume_recovery` it (an `Err` puts it back, as a redelivery), sleep 1 s when the queue is empty.
//! * Strict mode: the runs live in run objects (`LocalObjects`, the KV index on the same `SimKv`); every run's
//!   alarm is due at t0 (the hostile case: the whole backlog at once) and each alarm is its own task calling
//!   `Agent::wake` (a fresh agent each time) and sleeping until the time it answers. Every agent shares one
//!   `LocalGate` (the Worker's gate object) and `SweepOptions { ceiling: C - 1 }` (the cron's inline resume is the
//!   C-th caller); the cron ticks the inline `Agent::sweep` every 60 s as strict mode's cron does.
//! * Baseline: the inline `Agent::sweep` (at most `max_runs` resumes a tick, one after the other), every 60 s.
//!
//! Every tick and every consumed message is a fresh `Agent` over a fresh `JournalStore` (default options) on
//! the same one-location `SimKv` (default options: 60 s list lag and cache, 1 write/s per key), like separate
//! isolates. Agents use `AgentOptions::default()` (the runtime retries a 429 in the same execution) and
//! `SweepOptions::default()`; no sweep ran during the outage, so the breaker is closed and the sends do not ramp.
//! Recovery time is from t0 until the last run finished (as a tick's `on_recovered` hears it, or a consumer reads
//! it after `consume_recovery`), checked by
//! loading every run at the end. Peak concurrency is the provider's peak demand (calls in flight plus the one
//! arriving, refused or not).
//!
//! What it does not simulate: KV latency (KV operations take no simulated time; the lease's settle wait does),
//! KV or queue failures, CPU time, Workers' limits on an invocation (ticks' operations are counted and reported
//! instead), queue batching and visibility delays (a consumer takes one message the moment it is sent), and
//! the minute phase of the cron against t0 (the first tick fires at t0 exactly).
//!
//! Env: `STEADFAST_LARGE=1` adds N = 100,000 (fan-out only); `STEADFAST_CEILING=<C>` (default 50);
//! `STEADFAST_ONLY=kv|strict|inline` runs one mode's scenarios (and prints no summary);
//! `STEADFAST_TRACE=1` prints every tick's report.

use async_trait::async_trait;
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Instant;
use steadfast::core::classify::provider_http_error;
use steadfast::core::machine::ModelResponse;
use steadfast::core::sweep::SweepOptions;
use steadfast::core::transcript::Usage;
use steadfast::runtime::{
    Agent, AgentOptions, Clock, LocalGate, Model, ModelRequest, NoListener, RunResult, SendOptions, SimExecutor,
    SimQueue, SimTime, SplitMix64, SweepListener,
};
use steadfast::store::kv::{KvBackend, PutOptions};
use steadfast::store::object::{LocalObjects, ObjectStore};
use steadfast::store::sim::{SimKv, SimOptions};
use steadfast::store::{JournalOptions, JournalStore};
use steadfast::{Result, RunStatus};

const T0: u64 = 1_700_000_000_000;
/// Simulated duration of one accepted model call.
const CALL_MS: u64 = 500;
/// Cron interval.
const TICK_MS: u64 = 60_000;
/// A consumer's nap when the queue is empty.
const NAP_MS: u64 = 1_000;
/// Simulated time after which a scenario gives up (its runs are reported unfinished).
const GIVE_UP_MS: u64 = 24 * 3_600_000;

/// The provider: `down` answers 503; otherwise at most `ceiling` calls at once, each `CALL_MS` long, 429 above.
struct ProviderState {
    time: SimTime,
    ceiling: usize,
    down: Cell<bool>,
    in_flight: Cell<usize>,
    /// Peak demand: calls in flight plus the one arriving (refused or not).
    peak: Cell<usize>,
    refused: Cell<u64>,
    answered: Cell<u64>,
}

#[derive(Clone)]
struct Provider(Rc<ProviderState>);

/// Frees a slot of the provider when the call ends (or is dropped).
struct Slot(Rc<ProviderState>);
impl Drop for Slot {
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
        let demand = p.in_flight.get() + 1;
        p.peak.set(p.peak.get().max(demand));
        if demand > p.ceiling {
            p.refused.set(p.refused.get() + 1);
            return Err(provider_http_error(429, None, "too many requests").with_run(req.run_id));
        }
        p.in_flight.set(demand);
        let _slot = Slot(p.clone());
        p.time.sleep_ms(CALL_MS).await;
        p.answered.set(p.answered.get() + 1);
        Ok(ModelResponse {
            text: "ok".into(),
            usage: Usage::tokens(10, 5),
            stop_reason: Some("stop".into()),
            ..ModelResponse::default()
        })
    }
}

/// What the simulated processes share: the clock, the KV, the provider, seeds for agents' random sources; in
/// strict mode the run objects and the recovery gate.
struct World {
    time: SimTime,
    kv: SimKv,
    provider: Provider,
    seeds: Cell<u64>,
    strict: Option<(LocalObjects, Rc<LocalGate>)>,
}

impl World {
    /// A fresh agent over a fresh store handle (a new isolate).
    fn agent(&self) -> Agent {
        let clock = Rc::new(self.time.clone());
        self.seeds.set(self.seeds.get() + 1);
        let builder = match &self.strict {
            None => Agent::builder(self.provider.clone()).store(JournalStore::new(
                self.kv.at(0),
                clock.clone(),
                clock.clone(),
                JournalOptions::default(),
            )),
            Some((objects, gate)) => Agent::builder(self.provider.clone())
                .store(ObjectStore::new(objects.clone(), self.kv.at(0), "", clock.clone(), clock.clone()))
                .recovery_gate(gate.clone()),
        };
        builder
            .clock(clock.clone())
            .sleep(clock)
            .rng(Rc::new(SplitMix64::new(self.seeds.get().wrapping_mul(0x9E37_79B9_7F4A_7C15))))
            .options(AgentOptions::default())
            .build()
            .expect("the agent builds")
    }
}

/// Counts finished runs; notes the time the `target`-th finished.
struct Finishes {
    time: SimTime,
    target: usize,
    finished: RefCell<std::collections::HashSet<String>>,
    done_at: Cell<Option<u64>>,
}
impl Finishes {
    /// Run `id` finished (told by a tick, or seen by a consumer; each run counted once).
    fn note(&self, id: &str) {
        if self.finished.borrow_mut().insert(id.to_string())
            && self.finished.borrow().len() >= self.target
            && self.done_at.get().is_none()
        {
            self.done_at.set(Some(self.time.now_ms()));
        }
    }
}
impl SweepListener for Finishes {
    fn on_recovered(&self, run_id: &str, _r: &RunResult) -> Result<()> {
        self.note(run_id);
        Ok(())
    }
}

/// `STEADFAST_TRACE=1`: print every tick's report.
fn trace() -> bool {
    std::env::var("STEADFAST_TRACE").is_ok_and(|v| v == "1")
}

fn run_id(i: usize) -> String {
    format!("r-{i:06}")
}

/// Copies run `r-000000`'s keys to `r-000001`… `r-<n-1>` and its pending-index entry with the same metadata
/// (as tests/common/healing.rs `clone_run`), through the KV's origin.
fn clone_runs(kv: &SimKv, n: usize) {
    let origin = kv.origin();
    let template = run_id(0);
    use futures::executor::block_on as on;
    let run_prefix = format!("run/{template}/");
    let idx = format!("idx/pending/{template}");
    let keys: Vec<(String, String)> = kv
        .keys()
        .into_iter()
        .filter(|k| k.starts_with(&run_prefix))
        .map(|k| (k.clone(), kv.raw(&k).unwrap()))
        .collect();
    let idx_value = kv.raw(&idx).expect("the template is pending");
    let meta = on(origin.list(&idx, None, 1)).unwrap().keys[0].metadata.clone();
    let from = format!("\"runId\":\"{template}\"");
    for i in 1..n {
        let id = run_id(i);
        let to = format!("\"runId\":\"{id}\"");
        for (k, v) in &keys {
            let key = format!("run/{id}/{}", &k[run_prefix.len()..]);
            on(origin.put(&key, &v.replace(&from, &to), PutOptions::default())).unwrap();
        }
        let opts = PutOptions { metadata: meta.clone(), ..PutOptions::default() };
        on(origin.put(&format!("idx/pending/{id}"), &idx_value, opts)).unwrap();
    }
}

/// How a scenario recovers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// KV mode, the tick fanning out through a queue to consumers.
    Kv,
    /// KV mode, the inline sweep.
    Inline,
    /// Strict mode: each run's alarm, under the recovery gate.
    Strict,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Kv => "kv",
            Mode::Inline => "inline",
            Mode::Strict => "strict",
        }
    }
}

/// What one scenario measured.
pub(crate) struct Figures {
    pub(crate) n: usize,
    pub(crate) mode: Mode,
    /// Simulated minutes from t0 to the last finish (`None`: not all finished by `GIVE_UP_MS`).
    pub(crate) minutes: Option<f64>,
    pub(crate) finished: usize,
    pub(crate) peak: usize,
    pub(crate) refused: u64,
    pub(crate) answered: u64,
    pub(crate) ticks: u64,
    pub(crate) max_tick_ops: u64,
    pub(crate) tick_errors: u64,
    pub(crate) outcomes: BTreeMap<String, u64>,
    /// Strict mode: the most slots the gate held at once (seen after each alarm).
    pub(crate) gate_peak: usize,
    pub(crate) real_s: f64,
}

pub(crate) fn scenario(n: usize, ceiling: usize, mode: Mode) -> Figures {
    let fan_out = mode == Mode::Kv;
    let started = Instant::now();
    let exec = SimExecutor::new(T0, n as u64);
    let time = exec.time();
    let kv = SimKv::new(Rc::new(time.clone()), SimOptions::default());
    let provider = Provider(Rc::new(ProviderState {
        time: time.clone(),
        ceiling,
        down: Cell::new(true),
        in_flight: Cell::new(0),
        peak: Cell::new(0),
        refused: Cell::new(0),
        answered: Cell::new(0),
    }));
    let strict =
        (mode == Mode::Strict).then(|| (LocalObjects::default(), Rc::new(LocalGate::new(Rc::new(time.clone())))));
    let world = Rc::new(World {
        time: time.clone(),
        kv: kv.clone(),
        provider: provider.clone(),
        seeds: Cell::new(0),
        strict: strict.clone(),
    });
    if strict.is_some() {
        // The backlog: n runs fail on the 503 (after the runtime's own retries), each in its object.
        let failed = Rc::new(Cell::new(0));
        for i in 0..n {
            let (a, failed) = (world.agent(), failed.clone());
            exec.spawn(async move {
                if a.send(&run_id(i), "go", SendOptions::default()).await.is_err() {
                    failed.set(failed.get() + 1);
                }
            });
        }
        exec.run();
        assert_eq!(failed.get(), n, "every run fails while the provider is down");
    } else {
        // The backlog: one run fails on the 503 (after the runtime's own retries), n - 1 copies of it.
        let a = world.agent();
        let failed = exec.block_on(async move { a.send(&run_id(0), "go", SendOptions::default()).await.is_err() });
        assert!(failed, "the first run fails while the provider is down");
        clone_runs(&kv, n);
    }
    // Past the listing's lag and the runs' first backoff (30 s): the provider comes back.
    exec.advance(2 * TICK_MS);
    let t0 = exec.now_ms();
    provider.0.down.set(false);

    let so = Rc::new(match mode {
        // The cron's inline resume is the C-th caller.
        Mode::Strict => SweepOptions { ceiling: Some(ceiling as u32 - 1), ..SweepOptions::default() },
        _ => SweepOptions::default(),
    });
    let queue = SimQueue::new();
    let stop = Rc::new(Cell::new(false));
    let fin =
        Rc::new(Finishes { time: time.clone(), target: n, finished: RefCell::default(), done_at: Cell::new(None) });
    let ticks = Rc::new(RefCell::new((0u64, 0u64, 0u64))); // (ticks, max operations + queue sends, errors)
    let outcomes: Rc<RefCell<BTreeMap<String, u64>>> = Rc::default();
    // The cron: one tick task a minute.
    {
        let (w, so, q, stop, fin, ticks, spawner) =
            (world.clone(), so.clone(), queue.clone(), stop.clone(), fin.clone(), ticks.clone(), exec.spawner());
        exec.spawn(async move {
            while !stop.get() {
                let (w2, so, q, fin, ticks) = (w.clone(), so.clone(), q.clone(), fin.clone(), ticks.clone());
                spawner.spawn(async move {
                    let a = w2.agent();
                    let r = match fan_out {
                        true => a.sweep_fanning_out(&so, &*fin, &q).await,
                        false => a.sweep(&so, &*fin).await,
                    };
                    let mut t = ticks.borrow_mut();
                    t.0 += 1;
                    if trace() {
                        let at = (w2.time.now_ms() - t0) as f64 / 1e3;
                        println!("  t0+{at:.0}s tick: {r:?}; queue {}", q.len());
                    }
                    match r {
                        Ok(r) => t.1 = t.1.max(r.operations + r.queue_sends),
                        Err(_) => t.2 += 1,
                    }
                });
                w.time.sleep_ms(TICK_MS).await;
            }
        });
    }
    // The queue's consumers: K = C - 1 (the tick's canary is the C-th caller).
    for _ in 0..if fan_out { ceiling - 1 } else { 0 } {
        let (w, so, q, stop, fin, outcomes) =
            (world.clone(), so.clone(), queue.clone(), stop.clone(), fin.clone(), outcomes.clone());
        exec.spawn(async move {
            while !stop.get() {
                let Some(body) = q.take(1).pop() else {
                    w.time.sleep_ms(NAP_MS).await;
                    continue;
                };
                let a = w.agent();
                match a.consume_recovery(&body, &so, &*fin).await {
                    Ok(c) => {
                        // A run left with nothing to look at again may have finished: one read tells.
                        let finished = c.next.is_none()
                            && a.store()
                                .load(&c.run_id)
                                .await
                                .ok()
                                .flatten()
                                .is_some_and(|cp| cp.status == RunStatus::Finished);
                        if finished {
                            fin.note(&c.run_id);
                        }
                        let kind = match (c.next, finished) {
                            (Some(_), _) => "next look",
                            (None, true) => "finished (or found finished)",
                            (None, false) => "settled, not finished",
                        };
                        *outcomes.borrow_mut().entry(kind.into()).or_default() += 1
                    }
                    Err(_) => {
                        *outcomes.borrow_mut().entry("err (redelivered)".into()).or_default() += 1;
                        q.push(body);
                    }
                }
            }
        });
    }
    // Strict mode: every run's alarm, due at t0.
    let gate_peak = Rc::new(Cell::new(0usize));
    for i in 0..if mode == Mode::Strict { n } else { 0 } {
        let (w, so, stop, fin, outcomes, gate_peak) =
            (world.clone(), so.clone(), stop.clone(), fin.clone(), outcomes.clone(), gate_peak.clone());
        exec.spawn(async move {
            let id = run_id(i);
            let mut at = t0;
            while !stop.get() {
                let now = w.time.now_ms();
                if at > now {
                    w.time.sleep_ms(at - now).await;
                }
                let a = w.agent();
                let next = a.wake(&id, &so, &NoListener).await;
                if let Some((_, gate)) = &w.strict {
                    gate_peak.set(gate_peak.get().max(gate.held()));
                }
                let kind = match next {
                    Ok(Some(t)) => {
                        at = t;
                        "next alarm"
                    }
                    Ok(None) => {
                        let cp = a.store().load(&id).await.ok().flatten();
                        if cp.is_some_and(|cp| cp.status == RunStatus::Finished) {
                            fin.note(&id);
                        }
                        *outcomes.borrow_mut().entry("no alarm".into()).or_default() += 1;
                        return;
                    }
                    Err(_) => {
                        at = a.takeover_at();
                        "err (alarm again)"
                    }
                };
                *outcomes.borrow_mut().entry(kind.into()).or_default() += 1;
            }
        });
    }
    while fin.done_at.get().is_none() && exec.now_ms() < t0 + GIVE_UP_MS {
        exec.advance(TICK_MS);
    }
    stop.set(true);
    exec.run();
    // Every run, loaded.
    let a = world.agent();
    let finished = exec.block_on(async move {
        let mut k = 0;
        for i in 0..n {
            let cp = a.store().load(&run_id(i)).await.expect("the run loads");
            k += usize::from(cp.is_some_and(|cp| cp.status == RunStatus::Finished));
        }
        k
    });
    let (ticks, max_tick_ops, tick_errors) = *ticks.borrow();
    let p = &provider.0;
    let outcomes = outcomes.borrow().clone();
    Figures {
        n,
        mode,
        minutes: fin.done_at.get().filter(|_| finished == n).map(|at| (at - t0) as f64 / 60_000.0),
        finished,
        peak: p.peak.get(),
        refused: p.refused.get(),
        answered: p.answered.get(),
        ticks,
        max_tick_ops,
        tick_errors,
        outcomes,
        gate_peak: gate_peak.get(),
        real_s: started.elapsed().as_secs_f64(),
    }
}

fn minutes(f: &Figures) -> String {
    f.minutes.map_or("unfinished".into(), |m| format!("{m:.1}"))
}

fn main() {
    // `cargo bench` passes `--bench`; nothing to parse.
    let ceiling: usize = std::env::var("STEADFAST_CEILING").ok().and_then(|v| v.parse().ok()).unwrap_or(50);
    let large = std::env::var("STEADFAST_LARGE").is_ok_and(|v| v == "1");
    let mut plan = vec![(1_000, Mode::Kv), (10_000, Mode::Kv), (10_000, Mode::Strict), (10_000, Mode::Inline)];
    if large {
        plan.insert(2, (100_000, Mode::Kv));
    }
    println!(
        "P15: recovery after a provider outage, simulated time. Provider ceiling C = {ceiling} concurrent calls of \
         {CALL_MS} ms (429 above); K = {} queue consumers (kv); a recovery gate of C - 1 slots (strict: every run's \
         alarm due at once); cron every {} s from t0; SweepOptions::default() otherwise; AgentOptions::default(); \
         a fresh Agent and store per tick, per message and per alarm.",
        ceiling - 1,
        TICK_MS / 1_000
    );
    let only = std::env::var("STEADFAST_ONLY").ok();
    if let Some(only) = &only {
        plan.retain(|(_, m)| m.name() == only);
    }
    let mut all = Vec::new();
    for (n, mode) in plan {
        let f = scenario(n, ceiling, mode);
        println!(
            "{:>7} runs {:<7}: {} min, {}/{} finished, {} ticks (max {} ops, {} failed), provider peak {} of {}, \
             {} 429s, {} answers, gate peak {}, outcomes {:?}; {:.1} s real",
            f.n,
            f.mode.name(),
            minutes(&f),
            f.finished,
            f.n,
            f.ticks,
            f.max_tick_ops,
            f.tick_errors,
            f.peak,
            ceiling,
            f.refused,
            f.answered,
            f.gate_peak,
            f.outcomes,
            f.real_s
        );
        all.push(f);
    }
    if only.is_some() {
        return;
    }
    let find = |n: usize, mode: Mode| all.iter().find(|f| f.n == n && f.mode == mode).expect("measured");
    let gated: Vec<&Figures> = all.iter().filter(|f| f.mode != Mode::Inline).collect();
    let peak = gated.iter().map(|f| f.peak).max().unwrap_or(0);
    let refused: u64 = gated.iter().map(|f| f.refused).sum();
    let max_ops = gated.iter().map(|f| f.max_tick_ops).max().unwrap_or(0);
    let met = |ok: bool| if ok { "met" } else { "NOT met" };
    for mode in [Mode::Kv, Mode::Strict] {
        let m = find(10_000, mode).minutes;
        println!(
            "goal: 10,000 runs in <= 10 simulated minutes ({}): {} ({})",
            mode.name(),
            met(m.is_some_and(|m| m <= 10.0)),
            minutes(find(10_000, mode))
        );
    }
    println!(
        "goal: provider never above its ceiling (kv and strict runs): {} (peak demand {peak}, ceiling {ceiling}, \
         {refused} 429s)",
        met(peak <= ceiling)
    );
    println!(
        "goal: every tick < 1,000 operations (kv and strict runs, operations + queue sends): {} (max {max_ops})",
        met(max_ops < 1_000)
    );
    let large_part =
        if large { format!(" recovery_minutes_100000_kv={}", minutes(find(100_000, Mode::Kv))) } else { String::new() };
    println!(
        "P15 recovery_minutes_1000_kv={} recovery_minutes_10000_kv={}{large_part} recovery_minutes_10000_strict={} \
         recovery_minutes_10000_inline={} peak_concurrency={peak} ceiling={ceiling} provider_429s={refused} \
         max_tick_ops={max_ops}",
        minutes(find(1_000, Mode::Kv)),
        minutes(find(10_000, Mode::Kv)),
        minutes(find(10_000, Mode::Strict)),
        minutes(find(10_000, Mode::Inline)),
    );
    for f in &all {
        assert_eq!(f.finished, f.n, "{} runs ({}): not all finished", f.n, f.mode.name());
    }
}
