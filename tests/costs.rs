//! Cost (issue 31, part 2) through the runtime, on every store (memory, the journal store on the KV simulator,
//! strict mode's run objects): "runs have budgets for steps, tokens, time and spend"; the run reports `costUsd`,
//! "absent when a price is unknown". A turn's cost is priced by the model that answered, recorded with the turn
//! (it survives crashes and reloads), summed exactly into the run's and the conversation's usage, rolled up from
//! sub-agents; `maxCostUsd` stops a run as the other limits do.

mod common;

use common::*;
use serde_json::json;
use std::cell::RefCell;
use std::rc::Rc;
use steadfast::core::budget::TokenLimits;
use steadfast::core::checkpoint::{FinishReason, RunStatus};
use steadfast::core::cost::{Price, PriceTable};
use steadfast::core::events::Event;
use steadfast::core::transcript::{validate_transcript, Message, Usage};
use steadfast::runtime::{AgentOptions, FnTool, MockModel, MockTurn, SendOptions, Tool, ToolOutput, VecSink};
use steadfast::ErrorCode;

/// Each scripted turn reports 10 prompt and 5 completion tokens; at $2 and $10 per million that is
/// 10 × 2,000 + 5 × 10,000 = 70,000 nano-dollars.
const TURN_NANOS: u64 = 70_000;

fn prices() -> PriceTable {
    let mut t = PriceTable::default();
    t.insert("priced", Price::new(2_000_000, 10_000_000));
    t.insert("cheap", Price::new(1_000_000, 1_000_000));
    t
}

fn options() -> AgentOptions {
    AgentOptions { max_steps: 100, prices: prices(), ..AgentOptions::default() }
}

fn turns_in(messages: &[Message]) -> usize {
    messages.iter().filter(|m| matches!(m, Message::Assistant { .. })).count()
}

/// A model `id` that asks for `lookup` until the run has `tool_turns` turns, then answers; `seen` records how
/// many turns were recorded at each call.
fn looping(id: &str, tool_turns: usize, seen: &Rc<RefCell<Vec<usize>>>) -> MockModel {
    let seen = seen.clone();
    let turn = MockTurn::func(move |req| {
        let before = turns_in(req.messages);
        seen.borrow_mut().push(before);
        if before < tool_turns {
            MockTurn::tools([("lookup", json!({"n": before}))])
        } else {
            MockTurn::text("done")
        }
    });
    MockModel::new((0..1_000).map(|_| turn.clone()).collect()).with_id(id)
}

fn lookup() -> Rc<dyn Tool> {
    Rc::new(FnTool::new("lookup", "looks something up", object_schema(), |_args, _ctx| async {
        Ok(ToolOutput::text("42"))
    }))
}

#[test]
fn a_runs_cost_is_the_exact_sum_of_its_turns_priced_by_the_model_and_survives_a_reload() {
    for (name, make) in stores() {
        let env = make();
        let seen = Rc::new(RefCell::new(Vec::new()));
        let a = env.agent_with(looping("priced", 2, &seen), vec![lookup()], options(), "");
        let sink = VecSink::new();
        let res =
            block_on(a.send("r", "go", SendOptions { events: Some(Rc::new(sink.clone())), ..Default::default() }))
                .unwrap();
        assert_eq!((res.steps, res.usage.cost, res.total_usage.cost), (3, Some(3 * TURN_NANOS), Some(3 * TURN_NANOS)));
        // Each turn's event carries that turn's cost.
        let per_turn: Vec<Option<u64>> = sink
            .events()
            .iter()
            .filter_map(|e| match &e.event {
                Event::Step { usage, .. } => Some(usage.cost),
                _ => None,
            })
            .collect();
        assert_eq!(per_turn, [Some(TURN_NANOS); 3], "{name}");
        // In JSON, dollars: 210,000 nano-dollars.
        let text = serde_json::to_value(&res).unwrap();
        assert_eq!(text["usage"]["costUsd"], json!(0.00021), "{name}");
        // Recorded: a new process reads the same cost, and a second run of the conversation adds to its total.
        let cp = block_on(env.store.load("r")).unwrap().unwrap();
        assert_eq!((cp.usage.cost, cp.total_usage.cost), (Some(3 * TURN_NANOS), Some(3 * TURN_NANOS)), "{name}");
        let b = env.agent_with(looping("priced", 0, &seen), vec![lookup()], options(), "");
        let again = block_on(b.send("r", "more", SendOptions::default())).unwrap();
        assert_eq!((again.usage.cost, again.total_usage.cost), (Some(TURN_NANOS), Some(4 * TURN_NANOS)), "{name}");
    }
}

#[test]
fn a_model_without_a_price_has_no_cost_and_leaves_the_conversations_total_unknown() {
    for (name, make) in stores() {
        let env = make();
        let seen = Rc::new(RefCell::new(Vec::new()));
        let a = env.agent_with(looping("priced", 0, &seen), vec![], options(), "");
        let first = block_on(a.send("r", "go", SendOptions::default())).unwrap();
        assert_eq!(first.usage.cost, Some(TURN_NANOS), "{name}");
        // The conversation goes on with a model the table has no price for (the agent changed: warned).
        let b = env.agent_with(looping("unpriced", 0, &seen), vec![], options(), "");
        let second = block_on(b.send("r", "more", SendOptions::default())).unwrap();
        assert_eq!((second.usage.cost, second.total_usage.cost), (None, None), "{name}");
        assert_eq!(second.usage.total(), 15, "{name}: the tokens are counted all the same");
        let text = serde_json::to_value(&second).unwrap();
        assert!(text["usage"].get("costUsd").is_none() && text["totalUsage"].get("costUsd").is_none(), "{name}");
        // Back on a priced model: the conversation's total stays unknown, the new run's own cost is known.
        let third = block_on(a.send("r", "again", SendOptions::default())).unwrap();
        assert_eq!((third.usage.cost, third.total_usage.cost), (Some(TURN_NANOS), None), "{name}");
        // The offline mock model is free.
        let mock = env.agent_with(looping("mock", 0, &seen), vec![], options(), "");
        assert_eq!(block_on(mock.send("m", "go", SendOptions::default())).unwrap().usage.cost, Some(0), "{name}");
    }
}

#[test]
fn max_cost_usd_stops_a_run_before_the_call_after_it_is_reached_and_a_raised_limit_resumes_it() {
    for (name, make) in stores() {
        let env = make();
        let seen = Rc::new(RefCell::new(Vec::new()));
        // $0.0001 = 100,000 nano-dollars: reached by the second turn (140,000); no third call.
        let limited = AgentOptions { max_cost_usd: Some(100_000), ..options() };
        let a = env.agent_with(looping("priced", 10, &seen), vec![lookup()], limited, "");
        let res = block_on(a.send("r", "go", SendOptions::default())).unwrap();
        assert_eq!(
            (res.status, res.finish_reason),
            (RunStatus::Finished, Some(FinishReason::BudgetExceeded)),
            "{name}"
        );
        assert_eq!(*seen.borrow(), [0, 1], "{name}");
        assert_eq!(res.usage.cost, Some(2 * TURN_NANOS), "{name}");
        let note = res.note.unwrap_or_default();
        assert!(note.contains("maxCostUsd $0.0001, used $0.00014"), "{name}: {note}");
        validate_transcript(&block_on(env.store.load("r")).unwrap().unwrap().messages).unwrap();
        // The same limit refuses a resume with the limit and the amounts in dollars.
        let throw = AgentOptions {
            max_cost_usd: Some(100_000),
            on_exceeded: steadfast::core::budget::OnExceeded::Throw,
            ..options()
        };
        let t = env.agent_with(looping("priced", 10, &seen), vec![lookup()], throw, "");
        let err = block_on(t.resume("r", SendOptions::default())).unwrap_err();
        assert_eq!(err.code, ErrorCode::BudgetExceeded, "{name}");
        assert_eq!(err.details, Some(json!({"limit": "maxCostUsd", "max": 0.0001, "used": 0.00014})), "{name}");
        // Raised to $0.0003: the run goes on in place and stops again at 350,000.
        let raised = AgentOptions { max_cost_usd: Some(300_000), ..options() };
        let b = env.agent_with(looping("priced", 10, &seen), vec![lookup()], raised, "");
        let more = block_on(b.resume("r", SendOptions::default())).unwrap().expect("resumed");
        assert_eq!((more.finish_reason, more.usage.cost), (Some(FinishReason::BudgetExceeded), Some(5 * TURN_NANOS)));
        assert_eq!(more.steps, 5, "{name}: the same run, in place");
    }
}

#[test]
fn a_session_cost_budget_counts_every_run_of_the_conversation() {
    for (name, make) in stores() {
        let env = make();
        let seen = Rc::new(RefCell::new(Vec::new()));
        let session = AgentOptions {
            session_budget: TokenLimits { max_cost_usd: Some(150_000), ..Default::default() },
            ..options()
        };
        let a = env.agent_with(looping("priced", 0, &seen), vec![], session, "");
        let reasons: Vec<_> = ["one", "two", "three", "four"]
            .iter()
            .map(|m| block_on(a.send("r", *m, SendOptions::default())).unwrap().finish_reason)
            .collect();
        let (stop, over) = (Some(FinishReason::Stop), Some(FinishReason::BudgetExceeded));
        // 70,000 a run: the third run's call crosses 150,000; the fourth is stopped before its call.
        assert_eq!(reasons, [stop, stop, stop, over], "{name}");
        assert_eq!(seen.borrow().len(), 3, "{name}");
    }
}

#[test]
fn a_cost_limit_needs_a_price_for_every_model_the_agent_may_call() {
    let env = Env::new();
    let seen = Rc::new(RefCell::new(Vec::new()));
    let limited = AgentOptions { max_cost_usd: Some(1_000_000), ..options() };
    let own = builder(&env, looping("unpriced", 0, &seen), 1).options(limited.clone()).build();
    let e = own.err().expect("refused");
    assert_eq!(e.code, ErrorCode::ConfigInvalid);
    assert!(e.message.contains("'unpriced'"), "{}", e.message);
    let child = builder(&env, looping("unpriced", 0, &seen), 2).options(options());
    let lead =
        builder(&env, looping("priced", 0, &seen), 3).options(limited.clone()).subagent("r", "Researches", child);
    let e = lead.build().err().expect("refused");
    assert!(e.message.contains("sub-agent 'r'") && e.message.contains("'unpriced'"), "{}", e.message);
    let session =
        AgentOptions { session_budget: TokenLimits { max_cost_usd: Some(1), ..Default::default() }, ..options() };
    assert!(builder(&env, looping("unpriced", 0, &seen), 4).options(session).build().is_err());
    // Priced everywhere: built.
    let child = builder(&env, looping("cheap", 0, &seen), 5).options(options());
    assert!(builder(&env, looping("priced", 0, &seen), 6).options(limited).subagent("r", "R", child).build().is_ok());
}

/// A sub-agent's spend comes back into its lead's usage with its own prices, the lead's remaining dollars bound
/// the child, and a crash after any effect of lead or child changes neither the total nor what was charged
/// (the lead's cost is its recorded turns' plus its child's recorded turns').
#[test]
fn a_sub_agents_cost_rolls_up_into_its_lead_and_is_bounded_by_what_the_lead_had_left_across_crashes() {
    for (name, make) in stores() {
        let mut crash_points = 0;
        for n in 0.. {
            let env = make();
            let lead_calls = Rc::new(RefCell::new(0));
            let child_seen = Rc::new(RefCell::new(Vec::new()));
            let team = |env: &Env, seed: u64| {
                let calls = lead_calls.clone();
                let lead_turn = MockTurn::func(move |req| {
                    *calls.borrow_mut() += 1;
                    match turns_in(req.messages) {
                        0 => MockTurn::tools([("research", json!({"task": "look it all up"}))]),
                        _ => MockTurn::text("reported"),
                    }
                });
                let lead_model = MockModel::new((0..100).map(|_| lead_turn.clone()).collect()).with_id("priced");
                // The child's turns cost 15 × 1,000 = 15,000 nano-dollars each.
                let child =
                    builder(env, looping("cheap", 10, &child_seen), seed * 2 + 1).options(options()).tool_rc(lookup());
                // $0.000115: after the lead's first turn (70,000) the child has 45,000 left: three turns.
                let limited = AgentOptions { max_cost_usd: Some(115_000), ..options() };
                builder(env, lead_model, seed * 2).options(limited).subagent("research", "Researches", child)
            };
            if n > 0 {
                if !crash_then_sweep(&env, team, ("lead", "go"), n, n % 2 == 0, 4) {
                    break; // past the last effect
                }
                crash_points += 1;
            } else {
                block_on(team(&env, 1).build().unwrap().send("lead", "go", SendOptions::default())).unwrap();
            }
            let case = format!("{name} crash {n}");
            let Some(lead) = block_on(env.store.load("lead")).unwrap() else {
                assert!(*lead_calls.borrow() <= 1, "{case}");
                continue;
            };
            let child = child_of(&env, &lead, "research");
            assert_eq!(child.budget_cap.and_then(|c| c.max_cost_usd), Some(45_000), "{case}: what the lead had left");
            assert_eq!((child.finish_reason, child.usage.cost), (Some(FinishReason::BudgetExceeded), Some(45_000)));
            assert!(child_seen.borrow().iter().all(|&t| t < 3), "{case}: {:?}", child_seen.borrow());
            // The lead: its own turn and its child's three, then stopped before its second call.
            assert_eq!(
                (lead.finish_reason, lead.usage.cost, lead.usage.total()),
                (Some(FinishReason::BudgetExceeded), Some(TURN_NANOS + 45_000), 60),
                "{case}"
            );
            assert_eq!(lead.usage, Usage { cost: Some(115_000), ..Usage::tokens(40, 20) }, "{case}");
        }
        assert!(crash_points >= 10, "{name}: {crash_points} crash points");
    }
}
