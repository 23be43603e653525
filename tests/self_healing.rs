//! Self-healing (issue: sweep, outage breaker, diagnosis forks, progress guard, fork and replay, idempotency),
//! with a fake clock, the scripted model and (where it matters) the journal store on SimKv.

mod common;

use common::*;
use serde_json::json;
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;
use steadfast::core::checkpoint::{EntryBody, JournalEntry, RunStatus};
use steadfast::core::events::Event;
use steadfast::core::fork::{ForkPatch, ToolResultPatch};
use steadfast::core::machine::ModelResponse;
use steadfast::core::retry::RetryPolicy;
use steadfast::core::sweep::SweepOptions;
use steadfast::core::transcript::{validate_transcript, Message, ResultKind, ToolCall};
use steadfast::runtime::{
    AbortSignal, Agent, AgentOptions, Clock, CrashPoint, Delivery, FnTool, ForkOptions, Hook, HookContext, MockModel,
    MockTurn, OutputCheck, ProgressGuard, ProgressGuardOptions, Resolve, RunResult, SendOptions, SweepListener, Tool,
    ToolError, ToolOutput, ToolResultDraft, VecSink, Verdict,
};
use steadfast::runtime::{ManualClock, ManualSleep};
use steadfast::store::kv::{KvBackend, PutOptions};
use steadfast::store::sim::{SimKv, SimOptions};
use steadfast::store::{JournalOptions, JournalStore, LeaseOptions, PendingRun};
use steadfast::{Error, ErrorCode, Result};

#[derive(Default)]
struct Recorder {
    recovered: RefCell<Vec<String>>,
    quarantined: RefCell<Vec<String>>,
    outage: RefCell<Vec<bool>>,
    errors: RefCell<Vec<(ErrorCode, Option<String>)>>,
    throw: bool,
}

impl SweepListener for Recorder {
    fn on_recovered(&self, run_id: &str, _r: &RunResult) -> Result<()> {
        self.recovered.borrow_mut().push(run_id.into());
        self.fail()
    }
    fn on_quarantined(&self, run: &PendingRun) -> Result<()> {
        self.quarantined.borrow_mut().push(run.run_id.clone());
        self.fail()
    }
    fn on_outage(&self, active: bool) -> Result<()> {
        self.outage.borrow_mut().push(active);
        self.fail()
    }
    fn on_error(&self, e: &Error, run_id: Option<&str>) -> Result<()> {
        self.errors.borrow_mut().push((e.code, run_id.map(String::from)));
        self.fail()
    }
}

impl Recorder {
    fn throwing() -> Recorder {
        Recorder { throw: true, ..Default::default() }
    }
    fn fail(&self) -> Result<()> {
        if self.throw {
            return Err(Error::internal("callback threw"));
        }
        Ok(())
    }
}

fn one_try() -> AgentOptions {
    AgentOptions { retry: RetryPolicy { max_attempts: 1, ..RetryPolicy::default() }, ..AgentOptions::default() }
}

/// A model that fails with `status` while `down` is set, else answers "ok".
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

fn opts() -> SendOptions {
    SendOptions::default()
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

impl Recorder {
    /// Every callback this listener answered (`on_error` included).
    fn calls(&self) -> usize {
        self.recovered.borrow().len()
            + self.quarantined.borrow().len()
            + self.outage.borrow().len()
            + self.errors.borrow().len()
    }
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
    let done = block_on(agent.approvals().resolve(Resolve { id: approvals[0].id.clone(), approved: true, note: None }))
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

fn trip_model() -> MockModel {
    MockModel::by_turn(vec![
        MockTurn::tools([("weather", json!({"city": "Oslo"}))]),
        MockTurn::func(|req| {
            let rain = req.messages.iter().any(|m| match m {
                Message::User { content } => content.contains("rain"),
                Message::Tool(r) => r.content.contains("rain"),
                _ => false,
            });
            MockTurn::text(if rain { "Plan: museum day." } else { "Plan: picnic by the fjord." })
        }),
    ])
}

fn weather() -> Rc<dyn Tool> {
    Rc::new(FnTool::new("weather", "forecast", json!({"type": "object"}), |_a, _c| async {
        Ok(ToolOutput::text("sunny"))
    }))
}

#[test]
fn fork_with_each_patch_kind_and_compare_trajectories_on_the_trip_example() {
    let env = Env::journal_sim();
    let agent = env.agent(trip_model(), vec![weather()]);
    let trip = block_on(agent.send("trip", "Plan my trip", opts())).unwrap();
    assert_eq!(trip.text, "Plan: picnic by the fjord.");

    // appendInput: queued after pending calls, sent on resume; diverges at step 2.
    let fork = block_on(agent.fork(
        "trip",
        ForkOptions {
            from_step: 1,
            patch: ForkPatch { append_input: Some("It will rain, plan for that.".into()), ..Default::default() },
            new_id: None,
        },
    ))
    .unwrap();
    assert_eq!(fork.run_id, "trip.fork-1");
    assert_eq!(fork.checkpoint.step_index, 1, "the fork keeps the source's step count");
    assert_eq!(
        fork.checkpoint.usage,
        block_on(agent.history("trip", 50)).unwrap().iter().find(|h| h.step == 1).unwrap().checkpoint.usage
    );
    let replayed = block_on(agent.resume(&fork.run_id, opts())).unwrap().unwrap();
    assert_eq!(replayed.text, "Plan: museum day.");
    let cmp = block_on(agent.compare("trip", &fork.run_id)).unwrap();
    assert_eq!(cmp.diverged_at, Some(2));
    assert_eq!((cmp.a.len(), cmp.b.len()), (2, 2));
    assert_eq!(block_on(agent.load("trip")).unwrap().unwrap().messages, trip.messages, "the source is unchanged");

    // toolResult: replaced in place; diverges at step 1.
    let call_id = trip.messages[1].tool_calls()[0].id.clone();
    let fork2 = block_on(agent.fork(
        "trip",
        ForkOptions {
            from_step: 1,
            patch: ForkPatch {
                tool_result: Some(ToolResultPatch { tool_call_id: call_id, result: json!({"forecast": "rain"}) }),
                ..Default::default()
            },
            new_id: None,
        },
    ))
    .unwrap();
    assert_eq!(fork2.run_id, "trip.fork-2", "first free n");
    let replayed2 = block_on(agent.resume(&fork2.run_id, opts())).unwrap().unwrap();
    assert!(validate_transcript(&replayed2.messages).is_ok());
    assert_eq!(replayed2.text, "Plan: museum day.");
    let cmp2 = block_on(agent.compare("trip", &fork2.run_id)).unwrap();
    assert_eq!(cmp2.diverged_at, Some(1));

    // messages + businessState, with an explicit id.
    let fork3 = block_on(agent.fork(
        "trip",
        ForkOptions {
            from_step: 0,
            patch: ForkPatch {
                messages: Some(vec![Message::user("Plan a trip to Bergen")]),
                business_state: Some(json!({"budget": 100})),
                ..Default::default()
            },
            new_id: Some("bergen".into()),
        },
    ))
    .unwrap();
    assert_eq!(fork3.checkpoint.messages, vec![Message::user("Plan a trip to Bergen")]);
    assert_eq!(fork3.checkpoint.business_state, Some(json!({"budget": 100})));

    // Refusals.
    let err =
        block_on(agent.fork("trip", ForkOptions { from_step: 1, new_id: Some("bergen".into()), ..Default::default() }))
            .unwrap_err();
    assert_eq!(err.code, ErrorCode::SessionExists);
    let err = block_on(agent.fork("trip", ForkOptions { from_step: 7, ..Default::default() })).unwrap_err();
    assert_eq!(err.code, ErrorCode::CheckpointNotFound);
    assert!(err.message.contains("kept steps: 0, 1, 2"), "{}", err.message);
}

#[test]
fn progress_guard_stops_a_model_calling_the_same_failing_tool_forever() {
    let env = Env::journal_sim();
    let c = Counters::default();
    let model =
        || MockModel::by_turn((0..30).map(|_| MockTurn::tools([("read", json!({"path": "sonfig.py"}))])).collect());
    let options = AgentOptions { max_steps: 30, loop_window: 0, ..AgentOptions::default() };
    let build = |m| {
        let mut a = Agent::builder(m);
        a = a.tool_rc(failing_tool("read", &c)).hook(ProgressGuard::new(ProgressGuardOptions::default()));
        a.store_rc(env.store.clone())
            .clock(Rc::new(env.clock.clone()))
            .sleep(Rc::new(env.sleep.clone()))
            .options(options.clone())
            .build()
            .unwrap()
    };
    let agent = build(model());
    let sink = VecSink::new();
    let err =
        block_on(agent.send("stuck", "read the config", SendOptions { events: Some(Rc::new(sink.clone())), ..opts() }))
            .unwrap_err();
    assert_eq!(err.code, ErrorCode::RunNoProgress);
    assert!(!err.retryable);
    let actions: Vec<String> = sink
        .events()
        .iter()
        .filter_map(|e| match &e.event {
            Event::HealAction { action, .. } => Some(action.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(actions, vec!["hint", "hint", "deny", "deny", "deny", "stop"], "{actions:?}");
    assert_eq!(c.get("read"), 3, "the tool ran 3 times, then was denied");
    let pending = block_on(agent.pending()).unwrap();
    let last = pending[0].last_error.clone().unwrap();
    assert_eq!((last.code, last.retryable), (ErrorCode::RunNoProgress, false), "recorded as not retryable");
    // The sweep leaves it.
    env.clock.advance(3_600_000);
    let r = block_on(agent.sweep(&SweepOptions::default(), &Recorder::default())).unwrap();
    assert_eq!(r.resumed, 0);
    let cp = block_on(agent.load("stuck")).unwrap().unwrap();
    let denied = cp.messages.iter().filter(|m| matches!(m, Message::Tool(r) if r.kind == ResultKind::Denied)).count();
    assert_eq!(denied, 3, "maxDenials denials, then the stop");
    let hinted =
        cp.messages.iter().filter(|m| matches!(m, Message::Tool(r) if r.content.contains("[steadfast]"))).count();
    assert_eq!(hinted, 2);
    // The run keeps what self-healing did (RunView.healActions), as the events said it, with its step.
    let said: Vec<(String, String, String, u32)> = sink
        .events()
        .iter()
        .filter_map(|e| match &e.event {
            Event::HealAction { tool_call_id, action, reason, count, .. } => {
                Some((tool_call_id.clone(), action.clone(), reason.clone(), *count))
            }
            _ => None,
        })
        .collect();
    let view = steadfast::front::contract::RunView::from(cp);
    let kept: Vec<(String, String, String, u32)> = view
        .heal_actions
        .iter()
        .map(|r| (r.tool_call_id.clone(), r.action.clone(), r.reason.clone(), r.count))
        .collect();
    assert_eq!(kept, said);
    assert!(view.heal_actions.iter().all(|r| r.tool == "read"));
    let steps: Vec<u32> = view.heal_actions.iter().map(|r| r.step).collect();
    assert!(steps.windows(2).all(|w| w[0] <= w[1]) && steps[0] >= 1, "{steps:?}");
    let json = serde_json::to_value(&view).unwrap();
    assert_eq!(json["healActions"][5]["action"], "stop", "{}", json["healActions"]);
}

#[test]
fn progress_guard_counters_survive_a_crash() {
    // Find the crash point right after the second denial was committed, then resume in a new process:
    // the guard stops the run after one more denial (its counters were not reset).
    let mut found = false;
    for k in 1..200 {
        let env = Env::journal_sim();
        let c = Counters::default();
        let model = || MockModel::by_turn((0..30).map(|_| MockTurn::tools([("read", json!({"path": "x"}))])).collect());
        let options = AgentOptions { max_steps: 30, loop_window: 0, ..AgentOptions::default() };
        let build = |m| {
            Agent::builder(m)
                .tool_rc(failing_tool("read", &c))
                .hook(ProgressGuard::default())
                .store_rc(env.store.clone())
                .clock(Rc::new(env.clock.clone()))
                .sleep(Rc::new(env.sleep.clone()))
                .options(options.clone())
                .build()
                .unwrap()
        };
        let crash = SendOptions { crash: Some(CrashPoint { after_effects: k, finish_in_flight: false }), ..opts() };
        if block_on(build(model()).send("stuck", "read", crash)).is_ok() {
            break;
        }
        let Some(cp) = block_on(build(model()).load("stuck")).unwrap() else { continue };
        let denials = cp.ext.as_ref().and_then(|e| e["progressGuard"]["denials"].as_u64()).unwrap_or(0);
        let denied =
            cp.messages.iter().filter(|m| matches!(m, Message::Tool(r) if r.kind == ResultKind::Denied)).count();
        if denials != 2 || denied != 2 {
            continue;
        }
        env.past_leases();
        let sink = VecSink::new();
        let err =
            block_on(build(model()).resume("stuck", SendOptions { events: Some(Rc::new(sink.clone())), ..opts() }))
                .unwrap_err();
        assert_eq!(err.code, ErrorCode::RunNoProgress);
        let actions: Vec<String> = sink
            .events()
            .iter()
            .filter_map(|e| match &e.event {
                Event::HealAction { action, .. } => Some(action.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(actions, vec!["deny", "stop"], "k={k}: one more denial, then the stop");
        assert_eq!(c.get("read"), 3);
        found = true;
        break;
    }
    assert!(found, "a crash point after the second denial exists");
}

#[test]
fn output_check_turns_a_bad_output_into_an_error_result() {
    let env = Env::new();
    let tool: Rc<dyn Tool> = Rc::new(FnTool::new("search", "search", json!({"type": "object"}), |_a, _c| async {
        Ok(ToolOutput::text(""))
    }));
    let agent =
        Agent::builder(MockModel::new(vec![MockTurn::tools([("search", json!({}))]), MockTurn::text("nothing found")]))
            .tool_rc(tool)
            .hook(OutputCheck::new(
                "nonEmpty",
                |_call, out| if out.trim().is_empty() { Err("empty output".into()) } else { Ok(()) },
            ))
            .store_rc(env.store.clone())
            .clock(Rc::new(env.clock.clone()))
            .sleep(Rc::new(env.sleep.clone()))
            .build()
            .unwrap();
    let sink = VecSink::new();
    let done =
        block_on(agent.send("r", "search", SendOptions { events: Some(Rc::new(sink.clone())), ..opts() })).unwrap();
    let Message::Tool(r) = &done.messages[2] else { panic!() };
    assert!(r.is_error && r.content.starts_with("output check failed: empty output"), "{}", r.content);
    let replaced = sink.events().iter().find_map(|e| match &e.event {
        Event::ToolDone { replaced_by, .. } => replaced_by.clone(),
        _ => None,
    });
    assert_eq!(replaced.as_deref(), Some("nonEmpty"), "the replaced result is marked");
}

struct Policy {
    seen_resumed: Rc<RefCell<Vec<bool>>>,
}

#[async_trait::async_trait(?Send)]
impl Hook for Policy {
    fn name(&self) -> &str {
        "policy"
    }
    async fn before_tool(&self, ctx: &mut HookContext<'_>, call: &mut ToolCall) -> Result<Verdict> {
        self.seen_resumed.borrow_mut().push(ctx.resumed_after_approval);
        if call.name == "rm" {
            return Ok(Verdict::Deny("deleting files is not allowed".into()));
        }
        if call.args.get("limit").is_none() {
            call.args["limit"] = json!(10);
        }
        Ok(Verdict::Continue)
    }
    async fn after_tool(
        &self,
        _ctx: &mut HookContext<'_>,
        call: &ToolCall,
        result: &mut ToolResultDraft,
    ) -> Result<()> {
        if call.name == "secret" {
            result.content = "[redacted]".into();
        }
        Ok(())
    }
    async fn after_model(&self, _ctx: &mut HookContext<'_>, response: &mut ModelResponse) -> Result<()> {
        response.text = response.text.replace("damn", "d***");
        Ok(())
    }
    async fn before_model(&self, _ctx: &mut HookContext<'_>, messages: &[Message]) -> Result<()> {
        if messages.iter().any(|m| matches!(m, Message::User { content } if content == "explode")) {
            return Err(Error::new(ErrorCode::HookFailed, "policy refuses this input"));
        }
        Ok(())
    }
}

#[test]
fn hooks_rewrite_deny_replace_and_reject() {
    let env = Env::new();
    let seen_args = Rc::new(RefCell::new(Vec::new()));
    let sa = seen_args.clone();
    let list: Rc<dyn Tool> = Rc::new(FnTool::new("list", "list", json!({"type": "object"}), move |args, _c| {
        sa.borrow_mut().push(args.clone());
        async { Ok(ToolOutput::text("a, b")) }
    }));
    let secret: Rc<dyn Tool> = Rc::new(FnTool::new("secret", "secret", json!({"type": "object"}), |_a, _c| async {
        Ok(ToolOutput::text("hunter2"))
    }));
    let c = Counters::default();
    let resumed = Rc::new(RefCell::new(Vec::new()));
    let model = MockModel::new(vec![
        MockTurn::tools([("list", json!({})), ("rm", json!({"path": "/"})), ("secret", json!({})), ("pay", json!({}))]),
        MockTurn::text("damn, done"),
    ]);
    let agent = Agent::builder(model)
        .tool_rc(list)
        .tool_rc(counting_tool("rm", &c))
        .tool_rc(secret)
        .tool_rc(gated_tool("pay", &c))
        .hook(Policy { seen_resumed: resumed.clone() })
        .store_rc(env.store.clone())
        .clock(Rc::new(env.clock.clone()))
        .sleep(Rc::new(env.sleep.clone()))
        .build()
        .unwrap();
    let paused = block_on(agent.send("r", "tidy up", opts())).unwrap();
    let done =
        block_on(agent.approvals().resolve(Resolve { id: paused.approval_id.unwrap(), approved: true, note: None }))
            .unwrap();
    assert_eq!(*seen_args.borrow(), vec![json!({"limit": 10})], "the tool ran with the rewritten args");
    let results: BTreeMap<String, (ResultKind, String)> = done
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(r) => Some((r.name.clone(), (r.kind, r.content.clone()))),
            _ => None,
        })
        .collect();
    assert_eq!(results["rm"].0, ResultKind::Denied);
    assert_eq!(c.get("rm"), 0);
    assert_eq!(results["secret"].1, "[redacted]");
    assert_eq!(c.get("pay"), 1);
    assert_eq!(done.text, "d***, done");
    // The gated call was seen at the gate and again when it ran after approval.
    assert!(resumed.borrow().contains(&true) && resumed.borrow().contains(&false));
    // A throwing hook rejects the run, and the attempt is recorded.
    let err = block_on(agent.send("r2", "explode", opts())).unwrap_err();
    assert_eq!(err.code, ErrorCode::HookFailed);
    assert_eq!(block_on(agent.pending()).unwrap().iter().find(|p| p.run_id == "r2").unwrap().attempts, 1);
}

fn ledger_charge(charges: Rc<Cell<u32>>, ledger: Rc<RefCell<BTreeMap<String, u32>>>, reconcile: bool) -> Rc<dyn Tool> {
    let (c1, l1) = (charges.clone(), ledger.clone());
    let t = FnTool::new("charge", "charge the card", json!({"type": "object"}), move |_a, ctx| {
        let (c1, l1) = (c1.clone(), l1.clone());
        async move {
            c1.set(c1.get() + 1);
            l1.borrow_mut().insert(ctx.idempotency_key().to_string(), c1.get());
            Ok(ToolOutput::text(format!("charge #{}", c1.get())))
        }
    });
    if !reconcile {
        return Rc::new(t.side_effecting());
    }
    let l2 = ledger;
    Rc::new(t.reconcile_with(move |_args, key| {
        let found = l2.borrow().get(&key).copied();
        async move { Ok(found.map(|n| ToolOutput::text(format!("charge #{n} (found by reconcile)")))) }
    }))
}

#[test]
fn reconcile_prevents_a_second_charge_after_a_crash_between_effect_and_record() {
    // Effects: 1 run.start, 2 commit, 3 model, 4 step, 5 gate, 6 commit (turn + intent), 7 tool.start, 8 run.
    for (reconcile, finish_in_flight, expected) in [(true, true, 1), (true, false, 1), (false, true, 2)] {
        let env = Env::journal_sim();
        let charges = Rc::new(Cell::new(0));
        let ledger = Rc::new(RefCell::new(BTreeMap::new()));
        let script = || vec![MockTurn::tools([("charge", json!({"amount": 5}))]), MockTurn::text("charged")];
        let a =
            env.agent(MockModel::by_turn(script()), vec![ledger_charge(charges.clone(), ledger.clone(), reconcile)]);
        let crash = SendOptions { crash: Some(CrashPoint { after_effects: 8, finish_in_flight }), ..opts() };
        block_on(a.send("order", "charge", crash)).unwrap_err();
        let cp = block_on(a.load("order")).unwrap().unwrap();
        assert_eq!(cp.intents.len(), 1, "the intent was recorded before the call ran");
        env.past_leases();
        let b =
            env.agent(MockModel::by_turn(script()), vec![ledger_charge(charges.clone(), ledger.clone(), reconcile)]);
        let done = block_on(b.resume("order", opts())).unwrap().unwrap();
        assert_eq!(done.status, RunStatus::Finished);
        assert_eq!(charges.get(), expected, "reconcile={reconcile} in_flight_done={finish_in_flight}");
        let cp = block_on(b.load("order")).unwrap().unwrap();
        assert!(cp.intents.is_empty(), "the outcome closed the intent");
        if reconcile && finish_in_flight {
            assert!(done
                .messages
                .iter()
                .any(|m| matches!(m, Message::Tool(r) if r.content.contains("found by reconcile"))));
        }
    }
}

/// A payment endpoint that honours `Idempotency-Key` as Stripe does: the first answer for a key is kept and given
/// again to every later request with that key. Counts charges per order and records every key it was sent.
#[derive(Clone, Default)]
struct Endpoint {
    answers: Rc<RefCell<BTreeMap<String, String>>>,
    charges: Rc<RefCell<BTreeMap<i64, u32>>>,
    keys: Rc<RefCell<Vec<String>>>,
}

impl Endpoint {
    fn tool(&self) -> Rc<dyn Tool> {
        let ep = self.clone();
        Rc::new(FnTool::new("charge", "charge an order", json!({"type": "object"}), move |args, ctx| {
            let key = ctx.idempotency_key().to_string();
            ep.keys.borrow_mut().push(key.clone());
            let cached = ep.answers.borrow().get(&key).cloned();
            let answer = cached.unwrap_or_else(|| {
                let order = args["order"].as_i64().unwrap_or(-1);
                *ep.charges.borrow_mut().entry(order).or_default() += 1;
                let answer = format!("charged order {order}");
                ep.answers.borrow_mut().insert(key, answer.clone());
                answer
            });
            async move { Ok(ToolOutput::text(answer)) }
        }))
    }

    fn charges(&self, order: i64) -> u32 {
        self.charges.borrow().get(&order).copied().unwrap_or(0)
    }

    fn keys(&self) -> Vec<String> {
        self.keys.borrow().clone()
    }
}

fn charge_script(orders: &[i64]) -> Vec<MockTurn> {
    let mut turns: Vec<MockTurn> =
        orders.iter().map(|o| MockTurn::tools([("charge", json!({ "order": o }))])).collect();
    turns.push(MockTurn::text("done"));
    turns
}

/// The tool results of a transcript, in order.
fn results(messages: &[Message]) -> Vec<String> {
    messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(r) => Some(r.content.clone()),
            _ => None,
        })
        .collect()
}

/// Issue 26, bug 5: the key tools get is unique across runs and stable across resumes. The mock model, like
/// providers that omit call ids, gives every run's first call the same id; an endpoint that honours the key
/// used to answer run B's payment with run A's cached result. Now B is charged, a run deleted and started
/// again under the same id is charged again, and a call run again after a crash is answered from the cache.
#[test]
fn idempotency_keys_are_unique_across_runs_and_stable_across_resumes() {
    for (label, env) in [("memory", Env::new()), ("journal", Env::journal_sim())] {
        let ep = Endpoint::default();
        let a = env.agent(MockModel::by_turn(charge_script(&[5])), vec![ep.tool()]);
        let ra = block_on(a.send("a", "charge 5", opts())).unwrap();
        let b = env.agent(MockModel::by_turn(charge_script(&[7])), vec![ep.tool()]);
        let rb = block_on(b.send("b", "charge 7", opts())).unwrap();
        assert_eq!(ra.messages[1].tool_calls()[0].id, rb.messages[1].tool_calls()[0].id, "{label}: same call ids");
        assert_eq!(results(&rb.messages), vec!["charged order 7"], "{label}: B's own answer, not A's");
        assert_eq!((ep.charges(5), ep.charges(7)), (1, 1), "{label}");

        // Deleted and started again under the same id: a new run, new keys.
        block_on(a.delete("a")).unwrap();
        let again = env.agent(MockModel::by_turn(charge_script(&[9])), vec![ep.tool()]);
        let r = block_on(again.send("a", "charge 9", opts())).unwrap();
        assert_eq!(results(&r.messages), vec!["charged order 9"], "{label}");

        // The charge took effect, its answer was lost with the process: the resume sends the same key.
        let c = env.agent(MockModel::by_turn(charge_script(&[11])), vec![ep.tool()]);
        let crash = SendOptions { crash: Some(CrashPoint { after_effects: 8, finish_in_flight: true }), ..opts() };
        block_on(c.send("c", "charge 11", crash)).unwrap_err();
        env.past_leases();
        let c2 = env.agent(MockModel::by_turn(charge_script(&[11])), vec![ep.tool()]);
        let r = block_on(c2.resume("c", opts())).unwrap().unwrap();
        assert_eq!(results(&r.messages), vec!["charged order 11"], "{label}");
        assert_eq!(ep.charges(11), 1, "{label}: charged once");

        let keys = ep.keys();
        assert_eq!(keys.len(), 5, "{label}: {keys:?}");
        assert_eq!(keys[3], keys[4], "{label}: the resumed call kept its key");
        let distinct: std::collections::BTreeSet<&String> = keys[..4].iter().collect();
        assert_eq!(distinct.len(), 4, "{label}: every run's call has its own key: {keys:?}");
        assert!(keys.iter().all(|k| k.len() == 32 && k.chars().all(|c| c.is_ascii_hexdigit())), "{keys:?}");
    }
}

/// A fork re-sends a call it copied from its source with the source's key (the source may have run it: the
/// endpoint answers with the source's result, it does not charge twice); the fork's own model turns get keys of
/// its own, distinct from the source's calls with the same ids; a `messages` patch makes every call the fork's own.
#[test]
fn a_fork_resends_a_copied_call_under_its_source_key_and_its_own_calls_get_keys_of_its_own() {
    let env = Env::journal_sim();
    let ep = Endpoint::default();
    let agent = || env.agent(MockModel::by_turn(charge_script(&[1, 2])), vec![ep.tool()]);
    let crash = SendOptions { crash: Some(CrashPoint { after_effects: 8, finish_in_flight: true }), ..opts() };
    block_on(agent().send("src", "charge 1 then 2", crash)).unwrap_err();
    env.past_leases();
    assert_eq!(ep.charges(1), 1, "the charge happened; its answer was lost");
    let source_key = ep.keys()[0].clone();

    let fork = block_on(agent().fork("src", ForkOptions { from_step: 1, ..Default::default() })).unwrap();
    let done = block_on(agent().resume(&fork.run_id, opts())).unwrap().unwrap();
    assert_eq!(results(&done.messages), vec!["charged order 1", "charged order 2"]);
    assert_eq!(ep.keys()[1], source_key, "the copied call is sent with its source's key");
    assert_eq!(ep.charges(1), 1, "and answered from the endpoint's cache");
    let fork_own = ep.keys()[2].clone();

    // The source finishes too: its second call has the same id as the fork's, not the same key.
    let src = block_on(agent().resume("src", opts())).unwrap().unwrap();
    assert_eq!(src.messages[3].tool_calls()[0].id, done.messages[3].tool_calls()[0].id);
    assert_eq!(ep.keys()[3], source_key);
    assert_ne!(ep.keys()[4], fork_own, "the source's own call and the fork's own call have different keys");
    assert_eq!(ep.charges(2), 2, "two runs, two charges of order 2");

    // The same transcript given as a `messages` patch: its calls are the fork's own, so the endpoint acts again.
    let stored = block_on(agent().history("src", 50)).unwrap();
    let at_step_1 = stored.iter().find(|h| h.step == 1).unwrap();
    let patch = ForkPatch { messages: Some(at_step_1.checkpoint.messages[..2].to_vec()), ..Default::default() };
    let rewritten = block_on(agent().fork("src", ForkOptions { from_step: 1, patch, new_id: None })).unwrap();
    block_on(agent().resume(&rewritten.run_id, opts())).unwrap().unwrap();
    assert_ne!(ep.keys()[5], source_key);
    assert_eq!(ep.charges(1), 2, "a rewritten transcript's call is a new call");
}

/// An approved call marked started that was running when the process died may have taken effect: a fork of
/// that state (as any resume of it) records it `interrupted` and never runs it again, nor asks for its approval
/// again (a second approval would run it a second time).
#[test]
fn a_fork_of_a_started_approved_call_records_it_interrupted_and_never_runs_it_again() {
    let script = || MockModel::by_turn(vec![MockTurn::tools([("refund", json!({"order": 7}))]), MockTurn::text("ok")]);
    for make in [Env::new as fn() -> Env, Env::journal_sim] {
        // Approved; the process dies after effect k of the resolution. The first k at which the refund has run
        // (taken effect, its result lost) is the case.
        let (env, c) = (1..20)
            .find_map(|k| {
                let (env, c) = (make(), Counters::default());
                let agent = env.agent(script(), vec![gated_tool("refund", &c)]);
                let id = block_on(agent.send("pay", "refund order 7", opts())).unwrap().approval_id.unwrap();
                let crash =
                    SendOptions { crash: Some(CrashPoint { after_effects: k, finish_in_flight: true }), ..opts() };
                let resolve = Resolve { id, approved: true, note: None };
                block_on(agent.approvals().resolve_with(resolve, crash)).unwrap_err();
                (c.get("refund") == 1).then_some((env, c))
            })
            .expect("a crash point after the refund ran");
        env.past_leases();
        let agent = env.agent(script(), vec![gated_tool("refund", &c)]);
        let stored = block_on(agent.load("pay")).unwrap().unwrap();
        assert_eq!(stored.started_tool_call_ids.len(), 1, "the refund is marked started");

        let fork = block_on(agent.fork("pay", ForkOptions { from_step: 1, ..Default::default() })).unwrap();
        assert_eq!(fork.checkpoint.started_tool_call_ids, stored.started_tool_call_ids);
        let done = block_on(agent.resume(&fork.run_id, opts())).unwrap().unwrap();
        assert_eq!(done.status, RunStatus::Finished, "no second approval asked");
        let kinds: Vec<ResultKind> = done
            .messages
            .iter()
            .filter_map(|m| match m {
                Message::Tool(r) => Some(r.kind),
                _ => None,
            })
            .collect();
        assert_eq!(kinds, vec![ResultKind::Interrupted]);
        assert_eq!(c.get("refund"), 1, "the refund ran once");
    }
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
/// order exactly once. Repro: `STEADFAST_SEED=<seed> cargo test --test self_healing diagnosis_forks`.
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

#[test]
fn run_once_acknowledges_redeliveries_without_model_calls() {
    let env = Env::journal_sim();
    let c = Counters::default();
    let model = MockModel::new(vec![MockTurn::tools([("ship", json!({}))]), MockTurn::text("shipped")]);
    let agent = env.agent(model.clone(), vec![counting_tool("ship", &c)]);
    let first = block_on(agent.run_once("evt_1", "ship order 1", opts())).unwrap();
    assert!(matches!(first, Delivery::Ran { .. }));
    let calls = model.call_count();
    env.clock.advance(5_000);
    let again = block_on(agent.run_once("evt_1", "ship order 1", opts())).unwrap();
    match again {
        Delivery::Acknowledged { result, .. } => assert_eq!(result.text, "shipped"),
        other => panic!("{other:?}"),
    }
    assert_eq!(model.call_count(), calls, "zero extra model calls");
    assert_eq!(c.get("ship"), 1);
    // Awaiting approval → left; in progress → resumed.
    let gated = env.agent(
        MockModel::by_turn(vec![MockTurn::tools([("pay", json!({}))]), MockTurn::text("paid")]),
        vec![gated_tool("pay", &c)],
    );
    block_on(gated.run_once("evt_2", "pay", opts())).unwrap();
    assert!(matches!(block_on(gated.run_once("evt_2", "pay", opts())).unwrap(), Delivery::AwaitingApproval { .. }));
    let script = || vec![MockTurn::tools([("ship", json!({}))]), MockTurn::text("shipped 3")];
    let crashing = env.agent(MockModel::by_turn(script()), vec![counting_tool("ship", &c)]);
    let crash = SendOptions { crash: Some(CrashPoint { after_effects: 6, finish_in_flight: false }), ..opts() };
    block_on(crashing.run_once("evt_3", "ship 3", crash)).unwrap_err();
    env.past_leases();
    let r = block_on(env.agent(MockModel::by_turn(script()), vec![counting_tool("ship", &c)]).run_once(
        "evt_3",
        "ship 3",
        opts(),
    ))
    .unwrap();
    match r {
        Delivery::Ran { result, .. } => assert_eq!(result.text, "shipped 3"),
        other => panic!("{other:?}"),
    }
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
fn journal_env() -> (Env, SimKv) {
    let clock = ManualClock::new(1_700_000_000_000);
    let kv = SimKv::new(Rc::new(clock.clone()), SimOptions::default());
    // A short settle window: a run that finishes within a second of its first index write must be possible.
    let opts = JournalOptions { settle_ms: 50, ..JournalOptions::default() };
    let store = JournalStore::new(kv.clone(), Rc::new(clock.clone()), Rc::new(ManualSleep::new(clock.clone())), opts);
    (Env::with_store(Rc::new(store), clock), kv)
}

/// Writes copies of run `template` (ids `<prefix><i:06>`, `i` in `0..n`) straight into the KV, as if `n`
/// runs had been left in the same state: the first `whole` copies get every key of the run (lease, journal
/// entries, end markers) and all `n` get its pending-index entry with the same metadata. Creating 100,000
/// runs through the agent would take minutes in debug. Origin writes show up in location 0's listing after
/// the list lag: the caller moves the clock past it.
fn clone_run(kv: &SimKv, template: &str, prefix: &str, n: usize, whole: usize) {
    let origin = kv.origin();
    let run_prefix = format!("run/{template}/");
    let idx = format!("idx/pending/{template}");
    let run_keys: Vec<(String, String)> = kv
        .keys()
        .into_iter()
        .filter(|k| k.starts_with(&run_prefix))
        .map(|k| {
            let v = kv.raw(&k).unwrap();
            (k, v)
        })
        .collect();
    let idx_value = kv.raw(&idx).expect("the template is pending");
    let idx_meta = block_on(origin.list(&idx, None, 1)).unwrap().keys[0].metadata.clone();
    let from = format!("\"runId\":\"{template}\"");
    for i in 0..n {
        let id = format!("{prefix}{i:06}");
        if i < whole {
            let to = format!("\"runId\":\"{id}\"");
            for (k, v) in &run_keys {
                let key = format!("run/{id}/{}", &k[run_prefix.len()..]);
                block_on(origin.put(&key, &v.replace(&from, &to), PutOptions::default())).unwrap();
            }
        }
        let meta = PutOptions { metadata: idx_meta.clone(), ..PutOptions::default() };
        block_on(origin.put(&format!("idx/pending/{id}"), &idx_value, meta)).unwrap();
    }
}

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
            if !r.quarantined.is_empty() {
                return Err(format!("tick {t}: quarantined {:?} during an outage", r.quarantined));
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

/// A run interrupted by `boom` on `env` by an agent with `boom`'s schema `schema`, resumed by a sweep.
fn drift_agent(
    env: &Env,
    schema: serde_json::Value,
    down: Rc<Cell<bool>>,
    warnings: Rc<RefCell<Vec<String>>>,
) -> Agent {
    let boom: Rc<dyn Tool> = Rc::new(FnTool::new("boom", "dies", schema, move |_a, _c| {
        let down = down.get();
        async move {
            if down {
                Err(ToolError::propagate("worker died"))
            } else {
                Ok(ToolOutput::text("ok"))
            }
        }
    }));
    Agent::builder(MockModel::by_turn(vec![MockTurn::tools([("boom", json!({}))]), MockTurn::text("done")]))
        .store_rc(env.store.clone())
        .clock(Rc::new(env.clock.clone()))
        .sleep(Rc::new(env.sleep.clone()))
        .options(one_try())
        .tool_rc(boom)
        .warn(Rc::new(move |line: &str| warnings.borrow_mut().push(line.to_string())))
        .build()
        .unwrap()
}

#[test]
fn a_resume_by_a_changed_agent_under_warn_writes_one_warning_naming_the_change_sweeps_included() {
    for by_sweep in [false, true] {
        let env = Env::new();
        let down = Rc::new(Cell::new(true));
        let warnings = Rc::new(RefCell::new(Vec::new()));
        let old = drift_agent(&env, json!({"type": "object"}), down.clone(), warnings.clone());
        block_on(old.send("job", "go", opts())).unwrap_err();
        assert!(warnings.borrow().is_empty(), "no warning for a run's own agent");
        down.set(false);
        let changed = json!({"type": "object", "properties": {"fast": {"type": "boolean"}}});
        let new = drift_agent(&env, changed, down.clone(), warnings.clone());
        if by_sweep {
            env.clock.advance(3_600_000);
            let report = block_on(new.sweep(&SweepOptions::default(), &Recorder::default())).unwrap();
            assert_eq!(report.recovered, vec!["job".to_string()]);
        } else {
            let done = block_on(new.resume("job", opts())).unwrap().unwrap();
            assert_eq!(done.status, RunStatus::Finished);
        }
        let lines = warnings.borrow().clone();
        assert_eq!(lines.len(), 1, "one warning (sweep: {by_sweep}): {lines:?}");
        assert!(lines[0].contains("'job'") && lines[0].contains("tools changed: boom"), "{}", lines[0]);
    }
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

/// A hook that reports a heal action after every tool call.
struct Noting;

#[async_trait::async_trait(?Send)]
impl Hook for Noting {
    fn name(&self) -> &str {
        "noting"
    }
    async fn after_tool(
        &self,
        ctx: &mut HookContext<'_>,
        call: &ToolCall,
        _result: &mut ToolResultDraft,
    ) -> Result<()> {
        ctx.emit(Event::HealAction {
            tool: call.name.clone(),
            tool_call_id: call.id.clone(),
            action: "hint".into(),
            reason: format!("noted {}", call.id),
            count: 1,
        });
        Ok(())
    }
}

#[test]
fn a_run_keeps_its_newest_fifty_heal_actions_across_processes() {
    let env = Env::journal_sim();
    let c = Counters::default();
    let turns: Vec<MockTurn> =
        (0..60).map(|i| MockTurn::tools([("work", json!({"n": i}))])).chain([MockTurn::text("done")]).collect();
    let options = AgentOptions { max_steps: 70, loop_window: 0, ..AgentOptions::default() };
    let agent = Agent::builder(MockModel::by_turn(turns))
        .tool_rc(counting_tool("work", &c))
        .hook(Noting)
        .store_rc(env.store.clone())
        .clock(Rc::new(env.clock.clone()))
        .sleep(Rc::new(env.sleep.clone()))
        .options(options)
        .build()
        .unwrap();
    let done = block_on(agent.send("noted", "work 60 times", opts())).unwrap();
    assert_eq!(done.status, RunStatus::Finished);
    // Read back by another process: the newest 50 of the 60, in order.
    let other = env.agent(MockModel::new(vec![]), vec![]);
    let view = steadfast::front::contract::RunView::from(block_on(other.load("noted")).unwrap().unwrap());
    assert_eq!(view.heal_actions.len(), steadfast::core::events::HEAL_LOG_MAX);
    let ids: Vec<String> = view.heal_actions.iter().map(|r| r.tool_call_id.clone()).collect();
    let want: Vec<String> = (10..60).map(|i| format!("call_{i}_0")).collect();
    assert_eq!(ids, want);
    assert_eq!(view.heal_actions[0].step, 11, "taken after the 11th model turn");
}
