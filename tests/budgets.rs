//! Budgets (issue 31, part 1) through the runtime, on every store (memory, the journal store on the KV
//! simulator, strict mode's run objects): "Bound everything. Maximum steps, tokens, wall-clock time and spend per
//! run. Budget exhaustion is a normal outcome with a handler, not a crash." A run that reaches a token or time
//! limit finishes with finish reason `budget-exceeded` before its next model call (so it goes over by at most the
//! call that crossed it), its transcript whole; `onExceeded: "throw"` fails the call with
//! `STEADFAST_BUDGET_EXCEEDED` instead; the run resumes in place once the limit is raised; a session's budget
//! counts the whole conversation; a crash after any effect never lets a run call the model past its budget.

mod common;

use common::*;
use serde_json::json;
use std::cell::RefCell;
use std::rc::Rc;
use steadfast::core::checkpoint::{FinishReason, RunStatus};
use steadfast::core::transcript::{validate_transcript, Message};
use steadfast::runtime::{
    Agent, AgentOptions, CrashPoint, FnTool, MockModel, MockTurn, NoListener, SendOptions, Tool, ToolOutput,
};
use steadfast::ErrorCode;

/// Tokens each scripted turn reports (10 in, 5 out).
const TURN: u64 = 15;

/// Model turns recorded before a request (each assistant message is one turn).
fn turns_in(messages: &[Message]) -> u64 {
    messages.iter().filter(|m| matches!(m, Message::Assistant { .. })).count() as u64
}

/// A model that asks for `lookup` until it has taken `tool_turns` turns, then answers "done"; every call is
/// counted, and `seen` records how many turns the run had recorded at each call.
fn looping(tool_turns: u64, seen: &Rc<RefCell<Vec<u64>>>) -> MockModel {
    let seen = seen.clone();
    forever(MockTurn::func(move |req| {
        let before = turns_in(req.messages);
        seen.borrow_mut().push(before);
        if before < tool_turns {
            MockTurn::tools([("lookup", json!({"n": before}))])
        } else {
            MockTurn::text("done")
        }
    }))
}

/// A model answering every call with `turn`.
fn forever(turn: MockTurn) -> MockModel {
    MockModel::new((0..1_000).map(|_| turn.clone()).collect())
}

/// A tool that takes `ms` of (manual) clock time.
fn slow_lookup(env: &Env, ms: u64) -> Rc<dyn Tool> {
    let clock = env.clock.clone();
    Rc::new(FnTool::new("lookup", "looks something up", object_schema(), move |_args, _ctx| {
        clock.advance(ms);
        async move { Ok(ToolOutput::text("42")) }
    }))
}

fn agent(env: &Env, model: MockModel, options: AgentOptions, tool_ms: u64) -> Agent {
    env.agent_with(model, vec![slow_lookup(env, tool_ms)], options, "")
}

fn total(limit: u64) -> AgentOptions {
    AgentOptions { max_steps: 100, max_total_tokens: Some(limit), ..AgentOptions::default() }
}

#[test]
fn a_run_stops_at_its_token_budget_before_the_next_model_call_with_its_transcript_whole() {
    for (name, make) in stores() {
        let env = make();
        let seen = Rc::new(RefCell::new(Vec::new()));
        // 40 tokens: the third turn crosses it (45); its call runs, the fourth model call does not happen.
        let a = agent(&env, looping(10, &seen), total(40), 0);
        let res = block_on(a.send("r", "go", SendOptions::default())).unwrap();
        assert_eq!(
            (res.status, res.finish_reason),
            (RunStatus::Finished, Some(FinishReason::BudgetExceeded)),
            "{name}"
        );
        assert_eq!(*seen.borrow(), [0, 1, 2], "{name}: three model calls, none after the budget was reached");
        assert_eq!((res.steps, res.usage.total()), (3, 3 * TURN), "{name}");
        let note = res.note.clone().unwrap_or_default();
        assert!(note.contains("maxTotalTokens 40, used 45"), "{name}: {note}");
        let cp = block_on(env.store.load("r")).unwrap().unwrap();
        assert_eq!((cp.status, cp.finish_reason), (RunStatus::Finished, Some(FinishReason::BudgetExceeded)), "{name}");
        assert_eq!(cp.usage.total(), 45, "{name}");
        // The third turn's call has its result: the transcript is valid for every provider.
        assert!(matches!(cp.messages.last(), Some(Message::Tool(_))), "{name}");
        validate_transcript(&cp.messages).unwrap_or_else(|e| panic!("{name}: {e}"));
        // Nothing is left for the sweep: the run is finished.
        assert!(block_on(a.pending()).unwrap().is_empty(), "{name}");
    }
}

#[test]
fn each_token_limit_and_the_time_limit_stop_a_run_where_they_are_reached() {
    type Case = (&'static str, AgentOptions, u64, usize);
    let cases: Vec<Case> = vec![
        // (limit, options, tool ms, model calls)
        ("maxInputTokens", AgentOptions { max_input_tokens: Some(20), ..total(1_000) }, 0, 2),
        ("maxOutputTokens", AgentOptions { max_output_tokens: Some(11), ..total(1_000) }, 0, 3),
        ("maxTotalTokens", total(15), 0, 1),
        // 10 s a turn's call (the stores' own waits take a little more): 25 s are reached after the third turn.
        ("maxDurationMs", AgentOptions { max_duration_ms: Some(25_000), ..total(1_000) }, 10_000, 3),
    ];
    for (name, make) in stores() {
        for (limit, options, tool_ms, calls) in &cases {
            let env = make();
            let seen = Rc::new(RefCell::new(Vec::new()));
            let a = agent(&env, looping(10, &seen), options.clone(), *tool_ms);
            let res = block_on(a.send("r", "go", SendOptions::default())).unwrap();
            assert_eq!(res.finish_reason, Some(FinishReason::BudgetExceeded), "{name} {limit}");
            assert_eq!(seen.borrow().len(), *calls, "{name} {limit}: model calls");
            assert!(res.note.as_deref().unwrap_or_default().contains(limit), "{name} {limit}: {:?}", res.note);
        }
    }
}

#[test]
fn execution_time_counts_across_resumes_and_not_while_nothing_runs() {
    for (name, make) in stores() {
        let options = AgentOptions { max_duration_ms: Some(25_000), ..total(1_000) };
        // A crash at the third model call: two turns of 10 s recorded.
        let mut found = None;
        for n in 1..80 {
            let env = make();
            let seen = Rc::new(RefCell::new(Vec::new()));
            let a = agent(&env, looping(10, &seen), options.clone(), 10_000);
            let opts = SendOptions {
                crash: Some(CrashPoint { after_effects: n, finish_in_flight: false }),
                ..SendOptions::default()
            };
            let _ = block_on(a.send("r", "go", opts));
            if seen.borrow().len() == 3 {
                found = Some((env, seen));
                break;
            }
        }
        let (env, seen) = found.unwrap_or_else(|| panic!("{name}: no crash point at the third model call"));
        let cp = block_on(env.store.load("r")).unwrap().unwrap();
        assert!((20_000..22_500).contains(&cp.active_ms), "{name}: two turns of 10 s recorded: {}", cp.active_ms);
        // Ten minutes pass with no execution: they do not count.
        env.clock.advance(600_000);
        let b = agent(&env, looping(10, &seen), options, 10_000);
        let res = block_on(b.resume("r", SendOptions::default())).unwrap().unwrap();
        assert_eq!(res.finish_reason, Some(FinishReason::BudgetExceeded), "{name}");
        let cp = block_on(env.store.load("r")).unwrap().unwrap();
        assert_eq!(cp.step_index, 3, "{name}: stopped after the third turn");
        assert!((30_000..33_750).contains(&cp.active_ms), "{name}: three turns of 10 s, not the gap: {}", cp.active_ms);
    }
}

#[test]
fn a_raised_limit_resumes_the_run_in_place_and_the_same_limit_refuses_without_writing() {
    for (name, make) in stores() {
        let env = make();
        let seen = Rc::new(RefCell::new(Vec::new()));
        let a = agent(&env, looping(4, &seen), total(30), 0);
        let res = block_on(a.send("r", "go", SendOptions::default())).unwrap();
        assert_eq!((res.finish_reason, res.steps), (Some(FinishReason::BudgetExceeded), 2), "{name}");
        let before = block_on(env.store.load("r")).unwrap().unwrap();
        // The same budget: refused, nothing written, nothing called.
        let err = block_on(a.resume("r", SendOptions::default())).unwrap_err();
        assert_eq!(err.code, ErrorCode::BudgetExceeded, "{name}: {err}");
        assert!(!err.retryable(), "{name}");
        assert_eq!(block_on(env.store.load("r")).unwrap().unwrap().seq, before.seq, "{name}");
        assert_eq!(seen.borrow().len(), 2, "{name}");
        // A raised limit (another process with the new configuration): the same run goes on where it stopped.
        let b = agent(&env, looping(4, &seen), total(1_000), 0);
        let res = block_on(b.resume("r", SendOptions::default())).unwrap().expect("resumed");
        assert_eq!(
            (res.status, res.finish_reason, res.text.as_str()),
            (RunStatus::Finished, Some(FinishReason::Stop), "done"),
            "{name}"
        );
        assert_eq!((res.steps, res.usage.total()), (5, 5 * TURN), "{name}: steps and usage go on from the stop");
        assert_eq!(*seen.borrow(), [0, 1, 2, 3, 4], "{name}: every turn called once");
        let cp = block_on(env.store.load("r")).unwrap().unwrap();
        assert_eq!(&cp.messages[..before.messages.len()], &before.messages[..], "{name}: the stop's transcript kept");
        validate_transcript(&cp.messages).unwrap_or_else(|e| panic!("{name}: {e}"));
        // A finished run that stopped normally is not resumed.
        assert!(block_on(b.resume("r", SendOptions::default())).unwrap().is_none(), "{name}");
    }
}

#[test]
fn on_exceeded_throw_fails_the_call_with_the_limit_and_keeps_the_run_finished() {
    for (name, make) in stores() {
        let env = make();
        let seen = Rc::new(RefCell::new(Vec::new()));
        let options = AgentOptions { on_exceeded: steadfast::core::budget::OnExceeded::Throw, ..total(30) };
        let a = agent(&env, looping(10, &seen), options, 0);
        let err = block_on(a.send("r", "go", SendOptions::default())).unwrap_err();
        assert_eq!(err.code, ErrorCode::BudgetExceeded, "{name}: {err}");
        assert!(!err.retryable(), "{name}");
        let details = err.details.clone().unwrap_or_default();
        assert_eq!(
            (details["limit"].as_str(), details["max"].as_u64(), details["used"].as_u64()),
            (Some("maxTotalTokens"), Some(30), Some(30)),
            "{name}"
        );
        let cp = block_on(env.store.load("r")).unwrap().unwrap();
        assert_eq!((cp.status, cp.finish_reason), (RunStatus::Finished, Some(FinishReason::BudgetExceeded)), "{name}");
        // The sweep has nothing to do with it and reports no error.
        let report = block_on(a.sweep(&Default::default(), &NoListener)).unwrap();
        assert_eq!((report.errors, report.recovered.len()), (0, 0), "{name}");
        // A new message continues the conversation as a new run, with a budget of its own.
        let err = block_on(a.send("r", "and again", SendOptions::default())).unwrap_err();
        assert_eq!(err.code, ErrorCode::BudgetExceeded, "{name}");
        assert_eq!(seen.borrow().len(), 4, "{name}: two calls in each run");
    }
}

#[test]
fn a_session_budget_counts_every_run_of_the_conversation() {
    for (name, make) in stores() {
        let env = make();
        // Each run takes 2 turns (30 tokens): the conversation's 70 are reached in the third run.
        let options = AgentOptions {
            max_steps: 100,
            session_budget: steadfast::core::budget::TokenLimits { max_total_tokens: Some(70), ..Default::default() },
            ..AgentOptions::default()
        };
        let per_run = forever(MockTurn::func(|req| {
            // A tool turn, then the answer, in every run (a run starts at the last user message).
            match req.messages.last() {
                Some(Message::User { .. }) => MockTurn::tools([("lookup", json!({}))]),
                _ => MockTurn::text("ok"),
            }
        }));
        let a = agent(&env, per_run, options.clone(), 0);
        for (i, input) in ["one", "two"].iter().enumerate() {
            let res = block_on(a.send("r", *input, SendOptions::default())).unwrap();
            assert_eq!(
                (res.finish_reason, res.total_usage.total()),
                (Some(FinishReason::Stop), 30 * (i as u64 + 1)),
                "{name}"
            );
        }
        let res = block_on(a.send("r", "three", SendOptions::default())).unwrap();
        assert_eq!(res.finish_reason, Some(FinishReason::BudgetExceeded), "{name}");
        assert_eq!((res.usage.total(), res.total_usage.total()), (15, 75), "{name}");
        assert!(res.note.unwrap_or_default().contains("sessionBudget.maxTotalTokens 70"), "{name}");
        // A session's turns are runs of one conversation: the budget holds across them too.
        let s = a.session("chat").unwrap();
        let mut reasons = Vec::new();
        for input in ["one", "two", "three"] {
            reasons.push(block_on(s.send(input, SendOptions::default())).unwrap().finish_reason);
        }
        let stop = Some(FinishReason::Stop);
        assert_eq!(reasons, [stop, stop, Some(FinishReason::BudgetExceeded)], "{name}");
    }
}

/// "A crash between a usage update and the next check never lets a run exceed its budget by more than one model
/// call": a crash after every effect of a budget-limited run, then the sweep finishes it; no model call happens
/// once the recorded usage reached the limit, and the run ends `budget-exceeded` with the same usage as without
/// the crash.
#[test]
fn a_crash_after_any_effect_never_lets_a_run_call_the_model_past_its_budget() {
    for (name, make) in stores() {
        let mut crash_points = 0;
        for n in 1.. {
            let env = make();
            let seen = Rc::new(RefCell::new(Vec::new()));
            let a = agent(&env, looping(10, &seen), total(40), 0);
            let opts = SendOptions {
                crash: Some(CrashPoint { after_effects: n, finish_in_flight: false }),
                ..SendOptions::default()
            };
            let first = block_on(a.send("r", "go", opts));
            if let Ok(res) = &first {
                if res.finish_reason == Some(FinishReason::BudgetExceeded) {
                    break; // past the last effect
                }
            }
            crash_points += 1;
            env.past_leases();
            let b = agent(&env, looping(10, &seen), total(40), 0);
            for _ in 0..3 {
                let _ = block_on(b.sweep(&Default::default(), &NoListener));
                env.past_leases();
            }
            let Some(cp) = block_on(env.store.load("r")).unwrap() else {
                // Crashed before its first commit: nothing was recorded (the caller sends again).
                assert!(seen.borrow().len() <= 1, "{name} crash {n}");
                continue;
            };
            assert_eq!(
                (cp.status, cp.finish_reason),
                (RunStatus::Finished, Some(FinishReason::BudgetExceeded)),
                "{name} crash {n}"
            );
            assert_eq!(cp.usage.total(), 45, "{name} crash {n}");
            // Every model call saw at most two recorded turns (30 tokens, under 40); a call repeated after a crash
            // before its turn was recorded is the one call the budget allows past.
            assert!(seen.borrow().iter().all(|&t| t < 3), "{name} crash {n}: {:?}", seen.borrow());
            validate_transcript(&cp.messages).unwrap_or_else(|e| panic!("{name} crash {n}: {e}"));
        }
        assert!(crash_points >= 8, "{name}: {crash_points} crash points");
    }
}

#[test]
fn zero_limits_are_refused_when_the_agent_is_built() {
    let env = Env::new();
    for options in [
        AgentOptions { max_total_tokens: Some(0), ..AgentOptions::default() },
        AgentOptions { max_duration_ms: Some(0), ..AgentOptions::default() },
        AgentOptions {
            session_budget: steadfast::core::budget::TokenLimits { max_input_tokens: Some(0), ..Default::default() },
            ..AgentOptions::default()
        },
    ] {
        let err = Agent::builder(MockModel::new(vec![]))
            .store_rc(env.store.clone())
            .clock(Rc::new(env.clock.clone()))
            .sleep(Rc::new(env.sleep.clone()))
            .options(options)
            .build()
            .err()
            .expect("refused");
        assert_eq!(err.code, ErrorCode::ConfigInvalid, "{err}");
        assert!(err.message.contains("must be at least 1"), "{err}");
    }
}

/// A message queued for a run that stopped on its budget or on `maxSteps` (its transcript ends with tool
/// results, not a final answer) continues it with the message; the model is never called for the stopped run
/// without it (found by the checker: a drain of such a run called the model while it was finished when its queue
/// read was not yet due).
#[test]
fn a_message_queued_for_a_run_stopped_on_its_budget_or_its_steps_continues_it_with_the_message() {
    let max_steps = AgentOptions { max_steps: 2, ..AgentOptions::default() };
    for (name, make) in stores() {
        for (limit, options, reason) in
            [("budget", total(30), FinishReason::BudgetExceeded), ("steps", max_steps.clone(), FinishReason::MaxSteps)]
        {
            let env = make();
            let calls: Rc<RefCell<Vec<Option<String>>>> = Rc::new(RefCell::new(Vec::new()));
            let seen = calls.clone();
            // Tool turns until a user message other than the first comes; then the answer.
            let model = forever(MockTurn::func(move |req| {
                let last_user = req.messages.iter().rev().find_map(|m| match m {
                    Message::User { content } => Some(content.clone()),
                    _ => None,
                });
                seen.borrow_mut().push(last_user.clone());
                match last_user.as_deref() {
                    Some("go") => MockTurn::tools([("lookup", json!({}))]),
                    _ => MockTurn::text("heard"),
                }
            }));
            let a = agent(&env, model, options, 0);
            let res = block_on(a.send("r", "go", SendOptions::default())).unwrap();
            assert_eq!(res.finish_reason, Some(reason), "{name} {limit}");
            assert_eq!(calls.borrow().len(), 2, "{name} {limit}");
            let opts = SendOptions { queue: true, ..SendOptions::default() };
            let res = block_on(a.send("r", "one more thing", opts)).unwrap();
            assert_eq!((res.status, res.text.as_str()), (RunStatus::Finished, "heard"), "{name} {limit}");
            assert_eq!(
                calls.borrow()[2..],
                [Some("one more thing".to_string())],
                "{name} {limit}: one call, with the message"
            );
        }
    }
}

/// "The lead's remaining budgets bound the child" (issue 30): a sub-agent's child run gets what its lead had left
/// when it was created, recorded in the child's first entry (`budgetCap`), and stops on it like on its own budget
/// (the note names `lead.maxTotalTokens`); its spend comes back into the lead's usage, so the lead stops before its
/// next model call. A crash after any effect of lead or child changes neither the cap nor what was spent: no model
/// call of the child is made once its recorded usage reached its cap.
#[test]
fn a_sub_agents_child_is_bounded_by_what_its_lead_had_left_across_crashes() {
    for (name, make) in stores() {
        let mut crash_points = 0;
        for n in 0.. {
            let env = make();
            let lead_calls = Rc::new(RefCell::new(0));
            let child_seen = Rc::new(RefCell::new(Vec::new()));
            let team = |env: &Env, seed: u64| {
                let calls = lead_calls.clone();
                let lead_model = forever(MockTurn::func(move |req| {
                    *calls.borrow_mut() += 1;
                    match turns_in(req.messages) {
                        0 => MockTurn::tools([("research", json!({"task": "look it all up"}))]),
                        _ => MockTurn::text("reported"),
                    }
                }));
                let child = builder(env, looping(10, &child_seen), seed * 2 + 1)
                    .options(AgentOptions { max_steps: 100, ..AgentOptions::default() })
                    .tool_rc(slow_lookup(env, 0));
                builder(env, lead_model, seed * 2).options(total(60)).subagent("research", "Researches", child)
            };
            let first = if n > 0 {
                if !crash_then_sweep(&env, team, ("lead", "go"), n, n % 2 == 0, 4) {
                    break; // past the last effect
                }
                crash_points += 1;
                None
            } else {
                Some(block_on(team(&env, 1).build().unwrap().send("lead", "go", SendOptions::default())))
            };
            let case = format!("{name} crash {n}");
            let Some(lead) = block_on(env.store.load("lead")).unwrap() else {
                assert!(*lead_calls.borrow() <= 1, "{case}");
                continue;
            };
            assert_eq!(
                (lead.status, lead.finish_reason),
                (RunStatus::Finished, Some(FinishReason::BudgetExceeded)),
                "{case}"
            );
            // 15 (its turn) + 45 (the child's three turns, rolled up): stopped before its second call.
            assert_eq!(lead.usage.total(), 60, "{case}");
            let child = child_of(&env, &lead, "research");
            let call =
                lead.messages.iter().flat_map(|m| m.tool_calls().to_vec()).find(|c| c.name == "research").unwrap();
            assert_eq!(child.budget_cap.and_then(|c| c.max_total_tokens), Some(45), "{case}: what the lead had left");
            assert_eq!((child.finish_reason, child.usage.total()), (Some(FinishReason::BudgetExceeded), 45), "{case}");
            // No child model call from a recorded state that had used its cap (three turns: 0, 1, 2 recorded).
            assert!(child_seen.borrow().iter().all(|&t| t < 3), "{case}: {:?}", child_seen.borrow());
            // The lead's model reads that its sub-agent stopped on its budget (its last turn asked for tools).
            let answered = lead.messages.iter().find_map(|m| match m {
                Message::Tool(r) if r.tool_call_id == call.id => Some(r.content.clone()),
                _ => None,
            });
            assert_eq!(
                answered.as_deref(),
                Some("(The sub-agent stopped on its budget before a final answer.)"),
                "{case}"
            );
            if n == 0 {
                assert_eq!((*lead_calls.borrow(), child_seen.borrow().len()), (1, 3), "{case}: calls without a crash");
                let done = first.unwrap().unwrap();
                assert_eq!(done.finish_reason, Some(FinishReason::BudgetExceeded), "{case}");
            }
        }
        assert!(crash_points >= 10, "{name}: {crash_points} crash points");
    }
}

#[test]
fn a_child_of_a_lead_without_a_budget_has_no_cap() {
    for (name, make) in stores() {
        let env = make();
        let seen = Rc::new(RefCell::new(Vec::new()));
        let lead_model = forever(MockTurn::func(|req| match turns_in(req.messages) {
            0 => MockTurn::tools([("research", json!({"task": "t"}))]),
            _ => MockTurn::text("reported"),
        }));
        let child = builder(&env, looping(2, &seen), 3).tool_rc(slow_lookup(&env, 0));
        let a = builder(&env, lead_model, 2).subagent("research", "Researches", child).build().unwrap();
        let res = block_on(a.send("lead", "go", SendOptions::default())).unwrap();
        assert_eq!(res.finish_reason, Some(FinishReason::Stop), "{name}");
        let lead = block_on(env.store.load("lead")).unwrap().unwrap();
        let call = lead.messages.iter().flat_map(|m| m.tool_calls().to_vec()).find(|c| c.name == "research").unwrap();
        let child_id =
            steadfast::core::ids::subagent_run_id("lead", "research", &lead.call_key(&call.id).unwrap()).unwrap();
        assert_eq!(block_on(env.store.load(&child_id)).unwrap().unwrap().budget_cap, None, "{name}");
    }
}

/// The sub-agent calls of one turn share what their lead had left: each child's cap is an equal part of it
/// (they may run at once, and a child's spend reaches its lead only with its result), so together they cannot
/// spend the lead's remainder more than once. One at a time, a later child gets what is left after the earlier
/// ones' results, shared by the calls still without one.
#[test]
fn the_sub_agent_calls_of_one_turn_share_what_their_lead_had_left() {
    for (name, make) in stores() {
        for concurrency in [4, 1] {
            let env = make();
            let lead_model = forever(MockTurn::func(|req| match turns_in(req.messages) {
                0 => MockTurn::tools([("research", json!({"task": "a"})), ("research", json!({"task": "b"}))]),
                _ => MockTurn::text("reported"),
            }));
            let seen = Rc::new(RefCell::new(Vec::new()));
            let child = builder(&env, looping(10, &seen), 3)
                .options(AgentOptions { max_steps: 100, ..AgentOptions::default() })
                .tool_rc(slow_lookup(&env, 0));
            let options = AgentOptions { tool_concurrency: concurrency, ..total(60) };
            let a = builder(&env, lead_model, 2)
                .options(options)
                .subagent("research", "Researches", child)
                .build()
                .unwrap();
            let res = block_on(a.send("lead", "go", SendOptions::default())).unwrap();
            let case = format!("{name}, {concurrency} at a time");
            assert_eq!(res.finish_reason, Some(FinishReason::BudgetExceeded), "{case}");
            let lead = block_on(env.store.load("lead")).unwrap().unwrap();
            let children = block_on(a.children(&lead)).unwrap();
            let caps: Vec<Option<u64>> = children
                .iter()
                .map(|c| {
                    block_on(env.store.load(&c.run_id)).unwrap().unwrap().budget_cap.and_then(|c| c.max_total_tokens)
                })
                .collect();
            let spent: Vec<u64> = children.iter().map(|c| c.usage.unwrap().total()).collect();
            // 60 - 15 (the lead's turn) = 45 left, in two parts of 22; each child stops on its cap after its
            // second turn (30). One at a time, the second gets what the first left: 45 - 30 = 15, one turn.
            let (want_caps, want_spent) =
                if concurrency == 1 { ([Some(22), Some(15)], [30, 15]) } else { ([Some(22), Some(22)], [30, 30]) };
            assert_eq!((caps.as_slice(), spent.as_slice()), (&want_caps[..], &want_spent[..]), "{case}");
            assert_eq!(lead.usage.total(), TURN + spent.iter().sum::<u64>(), "{case}");
        }
    }
}
