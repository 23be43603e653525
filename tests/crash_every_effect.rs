//! Crash after every effect: run a scripted agent once without interruption, then once per effect index k
//! (twice: with the tool calls in flight at the crash completing or not), dropping the runtime right after
//! effect k and finishing the run from the store with a fresh runtime. Every interrupted run must end with
//! the uninterrupted transcript (ids included), no recorded tool call executed twice, no recorded model turn
//! generated again, and the approved call run at most once (`interrupted` when it was in flight).
//!
//! `cargo test --test crash_every_effect -- --nocapture` prints `crash points exercised: K`.

mod common;

use common::*;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::rc::Rc;
use steadfast::core::checkpoint::{Checkpoint, RunStatus};
use steadfast::core::transcript::{validate_transcript, Message, ResultKind, Usage};
use steadfast::runtime::{
    Agent, CrashPoint, FnTool, MockModel, MockTurn, Resolve, RunResult, SendOptions, Tool, ToolError, ToolOutput,
};
use steadfast::ErrorCode;

const RUN: &str = "crash-run";
const INPUT: &str = "Process order 42";

fn script() -> Vec<MockTurn> {
    let u = |i: u64| Usage::tokens(100 * i, 7 * i);
    vec![
        MockTurn::tools([("lookup", json!({"q": 1})), ("fetch", json!({"url": "a"})), ("lookup", json!({"q": 2}))])
            .with_usage(u(1)),
        MockTurn::tools([("broken", json!({})), ("lookup", json!({"q": 3}))]).with_usage(u(2)).with_text("checking"),
        MockTurn::tools([("pay", json!({"amount": 10})), ("stage", json!({"n": 1})), ("fetch", json!({"url": "b"}))])
            .with_usage(u(3)),
        MockTurn::tools([("lookup", json!({"q": 4})), ("stage", json!({"n": 2}))]).with_usage(u(4)),
        MockTurn::tools([("fetch", json!({"url": "c"}))]).with_usage(u(5)),
        MockTurn::text("All done.").with_usage(u(6)),
    ]
}

/// Tools whose output depends only on their arguments (so a re-run yields the same transcript); every
/// execution is counted per call id.
fn tools(c: &Counters) -> Vec<Rc<dyn Tool>> {
    let mk = |name: &'static str, f: fn(&Value) -> Result<ToolOutput, ToolError>, gated: bool| -> Rc<dyn Tool> {
        let c = c.clone();
        let t = FnTool::new(name, name, json!({"type": "object"}), move |args, ctx| {
            let c = c.clone();
            async move {
                c.hit(&format!("call:{}", ctx.tool_call_id));
                c.seen(name, &ctx);
                f(&args)
            }
        });
        Rc::new(t.needs_approval(gated))
    };
    vec![
        mk("lookup", |a| Ok(ToolOutput::text(format!("lookup {} -> found", a["q"]))), false),
        mk("fetch", |a| Ok(ToolOutput::json(json!({"url": a["url"], "body": "ok"}))), false),
        mk("broken", |_| Err(ToolError::typed("TimeoutError", "upstream did not answer")), false),
        mk(
            "stage",
            |a| Ok(ToolOutput::text(format!("stage {}", a["n"])).with_business_state(json!({"stage": a["n"]}))),
            false,
        ),
        mk("pay", |a| Ok(ToolOutput::text(format!("paid {}", a["amount"]))), true),
    ]
}

fn agent(env: &Env, c: &Counters) -> (Agent, MockModel) {
    let model = MockModel::by_turn(script());
    (env.agent(model.clone(), tools(c)), model)
}

/// Finishes the run from whatever the store holds: send when nothing was recorded, resolve pending
/// approvals (approving), resume otherwise.
fn finish_from_store(env: &Env, c: &Counters, models: &mut Vec<MockModel>) -> Checkpoint {
    for _ in 0..10 {
        let (agent, model) = agent(env, c);
        models.push(model);
        let cp = block_on(agent.load(RUN)).unwrap();
        let res: RunResult = match &cp {
            None => block_on(agent.send(RUN, INPUT, SendOptions::default())).unwrap(),
            Some(cp) if cp.status == RunStatus::AwaitingApproval => {
                let mut last = None;
                for id in &cp.approval_ids {
                    last = Some(
                        block_on(agent.approvals().resolve(Resolve {
                            id: id.clone(),
                            approved: true,
                            note: None,
                            answer: None,
                        }))
                        .unwrap(),
                    );
                }
                last.unwrap()
            }
            // The crash hit after the final commit: the stored run is complete.
            Some(cp) if cp.status == RunStatus::Finished => return cp.clone(),
            Some(_) => block_on(agent.resume(RUN, SendOptions::default())).unwrap().expect("pending run"),
        };
        if res.status == RunStatus::Finished {
            let cp = block_on(agent.load(RUN)).unwrap().unwrap();
            assert_eq!(cp.messages, res.messages);
            return cp;
        }
    }
    panic!("the run did not finish");
}

struct Reference {
    messages: Vec<Message>,
    effects_send: usize,
    effects_total: usize,
    model_calls: usize,
    business_state: Option<Value>,
}

fn reference(make_env: fn() -> Env) -> Reference {
    let env = make_env();
    let c = Counters::default();
    let (a, model) = agent(&env, &c);
    let paused = block_on(a.send(RUN, INPUT, SendOptions::default())).unwrap();
    assert_eq!(paused.status, RunStatus::AwaitingApproval);
    let done = block_on(a.approvals().resolve(Resolve {
        id: paused.approval_id.unwrap(),
        approved: true,
        note: None,
        answer: None,
    }))
    .unwrap();
    assert_eq!(done.status, RunStatus::Finished);
    assert_eq!(done.text, "All done.");
    assert!(validate_transcript(&done.messages).is_ok());
    assert_eq!(done.steps, 6);
    // The mock model's price is 0.
    assert_eq!(Usage { storage: None, ..done.usage }, Usage { cost: Some(0), ..Usage::tokens(2100, 147) });
    // One failing tool, recorded as an error the model read.
    assert!(done.messages.iter().any(|m| matches!(m, Message::Tool(r) if r.is_error && r.name == "broken")));
    for (k, v) in c.0.borrow().iter() {
        assert_eq!(*v, 1, "{k} ran once in the uninterrupted run");
    }
    Reference {
        messages: done.messages,
        effects_send: paused.stats.effects,
        effects_total: paused.stats.effects + done.stats.effects,
        model_calls: model.call_count(),
        business_state: done.business_state,
    }
}

/// Calls of the newest turn that have no recorded result (placed or held) at crash time.
fn unrecorded_calls(cp: &Option<Checkpoint>) -> Vec<String> {
    let Some(cp) = cp else { return vec![] };
    let mut out = Vec::new();
    for (i, m) in cp.messages.iter().enumerate() {
        for call in m.tool_calls() {
            let placed =
                cp.messages[i + 1..].iter().any(|r| matches!(r, Message::Tool(t) if t.tool_call_id == call.id));
            let held = cp.held_results.iter().any(|r| r.tool_call_id == call.id);
            if !placed && !held {
                out.push(call.id.clone());
            }
        }
    }
    out
}

fn assistant_turns(cp: &Option<Checkpoint>) -> usize {
    cp.as_ref().map(|c| c.messages.iter().filter(|m| matches!(m, Message::Assistant { .. })).count()).unwrap_or(0)
}

#[test]
fn crash_after_every_effect_then_resume_matches_uninterrupted_run() {
    crash_matrix(Env::new, "memory store");
}

#[test]
fn crash_after_every_effect_on_the_journal_store_over_simulated_kv() {
    crash_matrix(Env::journal_sim, "journal store on SimKv");
}

fn crash_matrix(make_env: fn() -> Env, label: &str) {
    let reference = reference(make_env);
    let k_total = reference.effects_total;
    assert!(k_total > 40, "a rich scenario: {k_total} effects");
    let pay_id = reference
        .messages
        .iter()
        .flat_map(|m| m.tool_calls().iter())
        .find(|c| c.name == "pay")
        .map(|c| c.id.clone())
        .unwrap();
    let mut exercised = 0;
    let mut interrupted_pay = 0;
    for k in 1..=k_total {
        for finish_in_flight in [false, true] {
            let env = make_env();
            let c = Counters::default();
            let mut models = Vec::new();
            // Phase 1: the run as usual, "killed" right after effect k.
            let (a, m1) = agent(&env, &c);
            models.push(m1);
            let crash = |after| SendOptions {
                crash: Some(CrashPoint { after_effects: after, finish_in_flight }),
                ..Default::default()
            };
            let res = if k <= reference.effects_send {
                block_on(a.send(RUN, INPUT, crash(k)))
            } else {
                let paused = block_on(a.send(RUN, INPUT, SendOptions::default())).unwrap();
                let id = paused.approval_id.unwrap();
                block_on(a.approvals().resolve_with(
                    Resolve { id, approved: true, note: None, answer: None },
                    crash(k - reference.effects_send),
                ))
            };
            assert_eq!(res.unwrap_err().code, ErrorCode::Crashed, "k={k}");
            let at_crash = block_on(a.load(RUN)).unwrap();
            let unrecorded = unrecorded_calls(&at_crash);
            let recorded_turns = assistant_turns(&at_crash);
            let calls_before: usize = models.iter().map(|m| m.call_count()).sum();

            // Phase 2: a fresh runtime after the dead process's lease expired.
            env.past_leases();
            let done = finish_from_store(&env, &c, &mut models);
            let ctx = format!("k={k} finish_in_flight={finish_in_flight}");

            // Same transcript, ids included; only the approved call may differ (interrupted when in flight).
            assert_eq!(done.messages.len(), reference.messages.len(), "{ctx}");
            for (got, want) in done.messages.iter().zip(&reference.messages) {
                match (got, want) {
                    (Message::Tool(g), Message::Tool(w))
                        if g.tool_call_id == pay_id && g.kind == ResultKind::Interrupted =>
                    {
                        assert_eq!(w.tool_call_id, g.tool_call_id, "{ctx}");
                        assert!(unrecorded.contains(&pay_id), "{ctx}: interrupted only when it was in flight");
                        interrupted_pay += 1;
                    }
                    _ => assert_eq!(got, want, "{ctx}"),
                }
            }
            assert!(validate_transcript(&done.messages).is_ok(), "{ctx}");
            assert_eq!(done.business_state, reference.business_state, "{ctx}");

            // Executions: recorded calls exactly once, calls in flight at the crash at most twice, the
            // approved call at most once.
            let counts: BTreeMap<String, u32> = c.0.borrow().clone();
            for m in &done.messages {
                let Message::Tool(r) = m else { continue };
                let n = counts.get(&format!("call:{}", r.tool_call_id)).copied().unwrap_or(0);
                if r.tool_call_id == pay_id {
                    assert!(n <= 1, "{ctx}: approved call ran {n} times");
                } else if r.kind == ResultKind::Execution {
                    let max = if unrecorded.contains(&r.tool_call_id) { 2 } else { 1 };
                    assert!((1..=max).contains(&n), "{ctx}: {} ran {n} times (max {max})", r.tool_call_id);
                }
            }

            // The model was never asked again for a turn that was recorded at the crash.
            let later: Vec<usize> = models.iter().flat_map(|m| m.calls()).skip(calls_before).map(|c| c.turn).collect();
            assert!(
                later.iter().all(|t| *t >= recorded_turns),
                "{ctx}: asked for {later:?}, {recorded_turns} recorded"
            );
            let total: usize = models.iter().map(|m| m.call_count()).sum();
            assert!(total <= reference.model_calls + 1, "{ctx}: {total} model calls");
            exercised += 1;
        }
    }
    println!("crash points exercised: {k_total} ({label}: {exercised} crash runs, approved call interrupted in {interrupted_pay})");
    assert_eq!(exercised, 2 * k_total);
    assert!(interrupted_pay > 0, "some crash hit the approved call in flight");
}
