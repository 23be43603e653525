//! Fallback models (issue 31, part 3) through the runtime, on every store: "when retries run out, step down a
//! ladder of fallbacks … call a second provider or model". The chain spends one retry policy (the agent's model
//! its share, then each fallback), only a retryable failure moves down it, the turn records the model that
//! answered and is priced by it, a `provider.fallback` event marks each step down, and a crash after any effect
//! never re-sends a recorded turn to any model of the chain.

mod common;

use common::*;
use serde_json::json;
use std::cell::RefCell;
use std::rc::Rc;
use steadfast::core::checkpoint::{FinishReason, RunStatus};
use steadfast::core::cost::{Price, PriceTable};
use steadfast::core::events::Event;
use steadfast::core::retry::RetryPolicy;
use steadfast::core::transcript::{validate_transcript, Message};
use steadfast::runtime::{AgentOptions, FnTool, MockModel, MockTurn, SendOptions, Tool, ToolOutput, VecSink};
use steadfast::ErrorCode;

/// A model `id` answering every call with `turn`, counting its calls.
fn model(id: &str, calls: &Rc<RefCell<u32>>, turn: MockTurn) -> MockModel {
    let calls = calls.clone();
    let counted = MockTurn::func(move |_| {
        *calls.borrow_mut() += 1;
        turn.clone()
    });
    MockModel::new((0..1_000).map(|_| counted.clone()).collect()).with_id(id)
}

/// Two tool turns, then the answer.
fn working(id: &str, calls: &Rc<RefCell<u32>>) -> MockModel {
    let calls = calls.clone();
    let turn = MockTurn::func(move |req| {
        *calls.borrow_mut() += 1;
        match req.messages.iter().filter(|m| matches!(m, Message::Assistant { .. })).count() {
            0 | 1 => MockTurn::tools([("lookup", json!({}))]),
            _ => MockTurn::text("done"),
        }
    });
    MockModel::new((0..1_000).map(|_| turn.clone()).collect()).with_id(id)
}

fn lookup() -> Rc<dyn Tool> {
    Rc::new(FnTool::new("lookup", "looks something up", object_schema(), |_args, _ctx| async {
        Ok(ToolOutput::text("42"))
    }))
}

fn options() -> AgentOptions {
    let mut prices = PriceTable::default();
    prices.insert("backup", Price::new(1_000_000, 1_000_000));
    AgentOptions { retry: RetryPolicy { base_ms: 10, ..RetryPolicy::default() }, prices, ..AgentOptions::default() }
}

#[test]
fn a_provider_that_fails_every_call_falls_back_and_the_turns_record_the_model_that_answered() {
    for (name, make) in stores() {
        let env = make();
        let (down, up) = (Rc::new(RefCell::new(0)), Rc::new(RefCell::new(0)));
        let a = builder(&env, model("primary", &down, MockTurn::error(503)), 1)
            .fallback(working("backup", &up))
            .options(options())
            .tool_rc(lookup())
            .build()
            .unwrap();
        let sink = VecSink::new();
        let res =
            block_on(a.send("r", "go", SendOptions { events: Some(Rc::new(sink.clone())), ..Default::default() }))
                .unwrap();
        assert_eq!(
            (res.status, res.finish_reason, res.text.as_str()),
            (RunStatus::Finished, Some(FinishReason::Stop), "done")
        );
        // Each turn: the agent's model its share of the 4 attempts (2), then the fallback, which answers.
        assert_eq!((*down.borrow(), *up.borrow()), (6, 3), "{name}");
        let models: Vec<Option<String>> = res
            .messages
            .iter()
            .filter_map(|m| match m {
                Message::Assistant { model, .. } => Some(model.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(models, vec![Some("backup".to_string()); 3], "{name}");
        let events = sink.events();
        let fallbacks: Vec<(u32, String, String, ErrorCode)> = events
            .iter()
            .filter_map(|e| match &e.event {
                Event::ProviderFallback { step, from, to, code } => Some((*step, from.clone(), to.clone(), *code)),
                _ => None,
            })
            .collect();
        let one = |s| (s, "primary".to_string(), "backup".to_string(), ErrorCode::ProviderUnavailable);
        assert_eq!(fallbacks, vec![one(1), one(2), one(3)], "{name}");
        assert!(events.iter().any(|e| matches!(&e.event, Event::Step { model: Some(m), .. } if m == "backup")));
        // Priced by the model that answered: 15 tokens at $1 a million.
        assert_eq!(res.usage.cost, Some(3 * 15_000), "{name}");
        // Recorded: a reload reads the same transcript.
        let cp = block_on(env.store.load("r")).unwrap().unwrap();
        assert_eq!(cp.messages, res.messages, "{name}");
    }
}

#[test]
fn a_failure_that_is_not_retryable_does_not_fall_back() {
    for (name, make) in stores() {
        let env = make();
        let (bad, up) = (Rc::new(RefCell::new(0)), Rc::new(RefCell::new(0)));
        let a = builder(&env, model("primary", &bad, MockTurn::error(401)), 1)
            .fallback(working("backup", &up))
            .options(options())
            .tool_rc(lookup())
            .build()
            .unwrap();
        let err = block_on(a.send("r", "go", SendOptions::default())).unwrap_err();
        assert_eq!(err.code, ErrorCode::ProviderAuth, "{name}");
        assert_eq!((*bad.borrow(), *up.borrow()), (1, 0), "{name}");
    }
}

#[test]
fn a_chain_that_fails_everywhere_makes_the_policys_attempts_in_all_not_a_policy_per_model() {
    for (name, make) in stores() {
        for (max, models) in [(4u32, 2usize), (4, 3), (1, 2), (6, 4)] {
            let env = make();
            let calls: Vec<Rc<RefCell<u32>>> = (0..models).map(|_| Rc::new(RefCell::new(0))).collect();
            let mut b = builder(&env, model("m0", &calls[0], MockTurn::error(503)), 1);
            for (i, c) in calls.iter().enumerate().skip(1) {
                b = b.fallback(model(&format!("m{i}"), c, MockTurn::error(429)));
            }
            let retry = RetryPolicy { max_attempts: max, base_ms: 10, ..RetryPolicy::default() };
            let a = b.options(AgentOptions { retry, ..AgentOptions::default() }).build().unwrap();
            let err = block_on(a.send("r", "go", SendOptions::default())).unwrap_err();
            assert!(err.retryable, "{name}: the last model's failure");
            let made: Vec<u32> = calls.iter().map(|c| *c.borrow()).collect();
            assert_eq!(made.iter().sum::<u32>(), max.max(models as u32), "{name} max {max}: {made:?}");
            assert!(made.iter().all(|&n| n >= 1), "{name} max {max}: every model tried once at least: {made:?}");
            let cp = block_on(env.store.load("r")).unwrap().unwrap();
            assert_eq!(
                cp.last_error.map(|e| e.code),
                Some(ErrorCode::ProviderRateLimited),
                "{name}: the last failure kept"
            );
        }
    }
}

#[test]
fn the_fallback_chain_is_part_of_the_agents_fingerprint() {
    let env = Env::new();
    let n = Rc::new(RefCell::new(0));
    let plain = builder(&env, working("primary", &n), 1).build().unwrap();
    let chained = builder(&env, working("primary", &n), 2).fallback(working("backup", &n)).build().unwrap();
    assert_ne!(plain.fingerprint(), chained.fingerprint());
    // Without fallbacks, the fingerprint is the model's as it always was.
    let again = builder(&env, working("primary", &n), 3).build().unwrap();
    assert_eq!(plain.fingerprint(), again.fingerprint());
}

/// A crash after every effect of a run whose model always fails, then the sweep finishes it: the transcript is
/// the uninterrupted one (three turns, each answered by the fallback and recorded once, each call's result once).
/// (That no model of a chain is asked again for a recorded turn is checked at every model call by the
/// model-based checker, whose programs have fallbacks.)
#[test]
fn a_crash_after_any_effect_ends_in_the_uninterrupted_transcript_answered_by_the_fallback() {
    for (name, make) in stores() {
        let mut crash_points = 0;
        for n in 1.. {
            let env = make();
            let counters = Counters::default();
            let team = |env: &Env, seed: u64| {
                let down = MockTurn::func(move |_| MockTurn::error(503));
                let up = MockTurn::func(move |req| {
                    match req.messages.iter().filter(|m| matches!(m, Message::Assistant { .. })).count() {
                        0 | 1 => MockTurn::tools([("lookup", json!({}))]),
                        _ => MockTurn::text("done"),
                    }
                });
                builder(env, MockModel::new((0..1_000).map(|_| down.clone()).collect()).with_id("primary"), seed)
                    .fallback(MockModel::new((0..1_000).map(|_| up.clone()).collect()).with_id("backup"))
                    .options(options())
                    .tool_rc(counting_tool("lookup", &counters))
            };
            if !crash_then_sweep(&env, team, ("r", "go"), n, false, 3) {
                break; // past the last effect
            }
            crash_points += 1;
            let case = format!("{name} crash {n}");
            let Some(cp) = block_on(env.store.load("r")).unwrap() else { continue };
            assert_eq!((cp.status, cp.last_text().as_str()), (RunStatus::Finished, "done"), "{case}");
            validate_transcript(&cp.messages).unwrap_or_else(|e| panic!("{case}: {e}"));
            let turns: Vec<usize> = cp
                .messages
                .iter()
                .enumerate()
                .filter(|(_, m)| matches!(m, Message::Assistant { .. }))
                .map(|(i, _)| i)
                .collect();
            assert_eq!(turns.len(), 3, "{case}");
            assert!(cp
                .messages
                .iter()
                .all(|m| !matches!(m, Message::Assistant { model, .. } if model.as_deref() != Some("backup"))));
            let results = cp.messages.iter().filter(|m| matches!(m, Message::Tool(_))).count();
            assert_eq!(results, 2, "{case}: each call's result once");
        }
        assert!(crash_points >= 6, "{name}: {crash_points} crash points");
    }
}
