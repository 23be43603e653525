//! Durable waits (issue 29) through the runtime, on every store (memory, the journal store on the KV simulator,
//! strict mode's run objects): a question answered by another process becomes the call's result; an event
//! delivered with its token resumes the run once, and a duplicate, a guessed or a spent token change nothing; a
//! deadline records a timeout through the sweep (KV mode) or the run's alarm (strict mode); a timer wakes the run
//! at its time, never before; payloads over the limits are refused with a code; waiting runs cost next to
//! nothing per day (the printed `ops per waiting run per day`).

mod common;

use common::*;
use serde_json::{json, Value};
use std::cell::RefCell;
use std::rc::Rc;
use steadfast::core::checkpoint::RunStatus;
use steadfast::core::sweep::SweepOptions;
use steadfast::core::transcript::Message;
use steadfast::core::wait::{WaitKind, WaitRequest, MAX_PAYLOAD_BYTES};
use steadfast::runtime::{
    Agent, AgentOptions, Clock, FnTool, MockModel, MockTurn, NoListener, Resolve, RunResult, SendOptions, Tool,
    ToolOutput, WaitTool,
};
use steadfast::ErrorCode;

const HOUR: u64 = 3_600_000;

fn opts() -> SendOptions {
    SendOptions::default()
}

/// The last tool result of a run for call `id`.
fn result_of<'a>(res: &'a RunResult, name: &str) -> &'a steadfast::core::transcript::ToolResult {
    res.messages
        .iter()
        .find_map(|m| match m {
            Message::Tool(r) if r.name == name => Some(r),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no result of {name}: {:?}", res.messages))
}

/// A model that calls `tool` with `args` once, then answers with the text of the result it got.
fn one_call(tool: &str, args: Value) -> MockModel {
    MockModel::by_turn(vec![
        MockTurn::tools([(tool, args)]),
        MockTurn::func(|req| {
            let last = req.messages.iter().rev().find_map(|m| match m {
                Message::Tool(r) => Some(r.content.clone()),
                _ => None,
            });
            MockTurn::text(format!("got: {}", last.unwrap_or_default()))
        }),
    ])
}

/// A tool that waits for a payment event with a deadline `deadline_ms` after it runs; its runs are counted and
/// the tokens it was handed kept.
fn payment_tool(tokens: Rc<RefCell<Vec<String>>>, deadline_ms: Option<u64>) -> Rc<dyn Tool> {
    Rc::new(FnTool::new("await_payment", "waits for the payment webhook", json!({"type": "object"}), move |_a, ctx| {
        tokens.borrow_mut().push(ctx.wait_token.clone());
        let deadline = deadline_ms.map(|d| ctx.now + d);
        async move { Ok(ToolOutput::wait(WaitRequest::Event { deadline })) }
    }))
}

fn questions() -> AgentOptions {
    AgentOptions {
        wait_tools: vec![WaitTool::AskQuestion, WaitTool::SleepFor, WaitTool::SleepUntil],
        ..Default::default()
    }
}

#[test]
fn a_question_pauses_the_run_and_its_answer_from_another_process_is_the_calls_result() {
    for (name, make) in stores() {
        let env = make();
        let model =
            || one_call("ask_question", json!({"question": "Ship to the old address?", "choices": ["yes", "no"]}));
        let a = env.agent_with(model(), vec![], questions(), "");
        let paused = block_on(a.send("q1", "ship order 7", opts())).unwrap();
        assert_eq!(paused.status, RunStatus::AwaitingApproval, "{name}");
        let wait = &paused.waits[0];
        assert_eq!(
            (wait.kind, wait.question.as_deref(), wait.token.as_deref()),
            (WaitKind::Question, Some("Ship to the old address?"), None),
            "{name}"
        );
        assert_eq!(paused.approval_ids, vec![wait.id.clone()], "{name}: the question is the pause's one record");
        let listed = block_on(a.approvals().list()).unwrap();
        assert_eq!(
            (listed.len(), listed[0].kind, listed[0].choices.clone()),
            (1, WaitKind::Question, vec!["yes".to_string(), "no".to_string()]),
            "{name}"
        );

        // Another process, days later; a wrong answer first (refused, nothing changes).
        env.clock.advance(3 * 24 * HOUR);
        let b = env.agent_with(model(), vec![], questions(), "");
        let wrong = Resolve { id: wait.id.clone(), approved: true, answer: Some(json!("maybe")), ..Default::default() };
        assert_eq!(block_on(b.approvals().resolve(wrong)).unwrap_err().code, ErrorCode::InvalidInput, "{name}");
        let as_approval = Resolve { id: wait.id.clone(), approved: true, ..Default::default() };
        assert_eq!(block_on(b.approvals().resolve(as_approval)).unwrap_err().code, ErrorCode::InvalidInput, "{name}");
        assert_eq!(block_on(b.load("q1")).unwrap().unwrap().status, RunStatus::AwaitingApproval, "{name}");

        let answer = Resolve { id: wait.id.clone(), approved: true, answer: Some(json!("no")), ..Default::default() };
        let done = block_on(b.approvals().resolve(answer.clone())).unwrap();
        assert_eq!((done.status, done.text.as_str()), (RunStatus::Finished, "got: no"), "{name}");
        let r = result_of(&done, "ask_question");
        assert_eq!((r.content.as_str(), r.is_error), ("no", false), "{name}");
        // The record is spent with the pause: answering again finds nothing.
        assert_eq!(block_on(b.approvals().resolve(answer)).unwrap_err().code, ErrorCode::ApprovalNotFound, "{name}");
        assert!(block_on(b.approvals().list()).unwrap().is_empty(), "{name}");
    }
}

#[test]
fn a_declined_question_is_an_error_result_with_the_note() {
    let env = Env::new();
    let a = env.agent_with(one_call("ask_question", json!({"question": "Refund?"})), vec![], questions(), "");
    let paused = block_on(a.send("q2", "go", opts())).unwrap();
    let decline =
        Resolve { id: paused.waits[0].id.clone(), approved: false, note: Some("not mine".into()), answer: None };
    let done = block_on(a.approvals().resolve(decline)).unwrap();
    let r = result_of(&done, "ask_question");
    assert!(r.is_error && r.content.contains("declined") && r.content.contains("not mine"), "{r:?}");
}

#[test]
fn an_event_delivered_with_its_token_by_another_process_resumes_the_run_once() {
    for (name, make) in stores() {
        let env = make();
        let tokens = Rc::new(RefCell::new(Vec::new()));
        let model = || one_call("await_payment", json!({}));
        let a = env.agent(model(), vec![payment_tool(tokens.clone(), Some(24 * HOUR))]);
        let paused = block_on(a.send("pay-1", "charge order 7", opts())).unwrap();
        let wait = paused.waits[0].clone();
        let token = wait.token.clone().expect("an event wait hands out its token");
        assert_eq!(tokens.borrow().as_slice(), [token.clone()], "{name}: the tool was handed the same token");
        let due = wait.due_at.expect("a deadline");
        assert_eq!(wait.kind, WaitKind::Event, "{name}");
        assert!(
            due > env.clock.now_ms() + 24 * HOUR - 60_000 && due <= env.clock.now_ms() + 24 * HOUR,
            "{name}: 24 h from when the tool ran"
        );

        let b = env.agent(model(), vec![payment_tool(tokens.clone(), Some(24 * HOUR))]);
        // Guessed and malformed tokens: the same answer as for a token of no run.
        let mut guessed = token.clone();
        guessed.replace_range(0..1, if token.starts_with('a') { "b" } else { "a" });
        for bad in [guessed.as_str(), "not-a-token", "", &token.to_uppercase()] {
            let err = block_on(b.events().deliver(bad, json!({"paid": true}))).unwrap_err();
            assert_eq!(err.code, ErrorCode::WaitNotFound, "{name}: {bad}");
            assert_eq!(err.run_id, None, "{name}: the refusal names no run");
        }
        env.clock.advance(2 * HOUR);
        let delivered = block_on(b.events().deliver(&token, json!({"paid": true, "amount": 42}))).unwrap();
        assert!(!delivered.duplicate, "{name}");
        assert_eq!(delivered.run.status, RunStatus::Finished, "{name}");
        let r = result_of(&delivered.run, "await_payment");
        assert_eq!((r.content.as_str(), r.is_error), (r#"{"amount":42,"paid":true}"#, false), "{name}");
        assert_eq!(tokens.borrow().len(), 1, "{name}: the tool did not run again");
        // Spent: the same or another payload again opens nothing and changes nothing.
        let stored = block_on(b.load("pay-1")).unwrap().unwrap();
        for again in [json!({"paid": true, "amount": 42}), json!({"paid": false})] {
            assert_eq!(
                block_on(b.events().deliver(&token, again)).unwrap_err().code,
                ErrorCode::WaitNotFound,
                "{name}"
            );
        }
        assert_eq!(block_on(b.load("pay-1")).unwrap().unwrap(), stored, "{name}");
        assert!(block_on(b.store().list_due(u64::MAX, 10)).unwrap().is_empty(), "{name}: the due entry went with it");
    }
}

#[test]
fn payloads_over_the_limits_are_refused_with_a_code_and_change_nothing() {
    let env = Env::journal_sim();
    let tokens = Rc::new(RefCell::new(Vec::new()));
    let a = env.agent(one_call("await_payment", json!({})), vec![payment_tool(tokens, None)]);
    let paused = block_on(a.send("pay-2", "go", opts())).unwrap();
    let token = paused.waits[0].token.clone().unwrap();
    let stored = block_on(a.load("pay-2")).unwrap();
    let mut deep = json!(0);
    for _ in 0..70 {
        deep = json!([deep]);
    }
    let cases =
        [(Value::String("x".repeat(MAX_PAYLOAD_BYTES)), ErrorCode::PayloadTooLarge), (deep, ErrorCode::InvalidInput)];
    for (payload, code) in cases {
        assert_eq!(block_on(a.events().deliver(&token, payload)).unwrap_err().code, code);
        assert_eq!(block_on(a.load("pay-2")).unwrap(), stored, "nothing changed");
    }
    let ok = block_on(a.events().deliver(&token, json!("paid"))).unwrap();
    assert_eq!(result_of(&ok.run, "await_payment").content, "paid");
}

#[test]
fn a_deadline_records_a_timeout_through_the_sweep_and_a_late_delivery_is_refused() {
    for (name, make) in stores() {
        let env = make();
        let tokens = Rc::new(RefCell::new(Vec::new()));
        let a = env.agent(one_call("await_payment", json!({})), vec![payment_tool(tokens.clone(), Some(HOUR))]);
        let paused = block_on(a.send("pay-3", "go", opts())).unwrap();
        let token = paused.waits[0].token.clone().unwrap();
        let sweep = SweepOptions::default();
        let due = paused.waits[0].due_at.unwrap();
        env.clock.advance(due - env.clock.now_ms() - 1);
        let early = block_on(a.sweep(&sweep, &NoListener)).unwrap();
        assert_eq!(early.woken, 0, "{name}: not before the deadline");
        assert_eq!(block_on(a.load("pay-3")).unwrap().unwrap().status, RunStatus::AwaitingApproval, "{name}");
        env.clock.advance(1);
        let tick = block_on(a.sweep(&sweep, &NoListener)).unwrap();
        assert_eq!(tick.woken, 1, "{name}: {tick:?}");
        let cp = block_on(a.load("pay-3")).unwrap().unwrap();
        assert_eq!(cp.status, RunStatus::Finished, "{name}");
        let timeout = cp.messages.iter().find_map(|m| match m {
            Message::Tool(r) => Some(r.clone()),
            _ => None,
        });
        let timeout = timeout.unwrap();
        assert!(timeout.is_error && timeout.content.contains("\"timeout\""), "{name}: {timeout:?}");
        assert_eq!(block_on(a.events().deliver(&token, json!(1))).unwrap_err().code, ErrorCode::WaitNotFound, "{name}");
        assert_eq!(block_on(a.sweep(&sweep, &NoListener)).unwrap().woken, 0, "{name}: resolved once");
        assert_eq!(tokens.borrow().len(), 1, "{name}");
    }
}

#[test]
fn a_timer_wakes_the_run_at_its_time_by_the_sweep_or_the_runs_alarm() {
    for (name, make) in stores() {
        for by_alarm in [false, true] {
            let env = make();
            let model = || one_call("sleep_for", json!({"seconds": 90}));
            let a = env.agent_with(model(), vec![], questions(), "");
            let paused = block_on(a.send("nap", "wait a bit", opts())).unwrap();
            let at = paused.waits[0].due_at.unwrap();
            assert_eq!(paused.waits[0].kind, WaitKind::Timer, "{name}");
            let now = env.clock.now_ms();
            assert!(at > now + 90_000 - 60_000 && at <= now + 90_000, "{name}: 90 s from when the tool ran");
            let wake = |a: &Agent| -> Option<u64> {
                if by_alarm {
                    block_on(a.wake("nap", &SweepOptions::default(), &steadfast::runtime::NoListener)).unwrap()
                } else {
                    block_on(a.sweep(&SweepOptions::default(), &NoListener)).unwrap();
                    None
                }
            };
            env.clock.advance(at - env.clock.now_ms() - 1);
            let next = wake(&a);
            if by_alarm {
                assert_eq!(next, Some(at), "{name}: the alarm is set for the timer");
            }
            assert_eq!(
                block_on(a.load("nap")).unwrap().unwrap().status,
                RunStatus::AwaitingApproval,
                "{name}: not early"
            );
            env.clock.advance(at - env.clock.now_ms());
            let b = env.agent_with(model(), vec![], questions(), "");
            assert_eq!(wake(&b), None, "{name}: nothing more to wake");
            let cp = block_on(b.load("nap")).unwrap().unwrap();
            assert_eq!(cp.status, RunStatus::Finished, "{name} (alarm {by_alarm})");
            assert!(cp.last_text().starts_with("got: {\"woke\":true,\"at\":"), "{name}: {}", cp.last_text());
        }
    }
}

/// Waiting runs cost nothing per run while they wait: a simulated day of cron ticks (one a minute) over the
/// journal store on the KV simulator with 1,000 runs each parked on an event (deadline in a week) costs no more
/// operations than the same day with none, beyond the day's one verification round; the figure is printed
/// (`ops per waiting run per day: N`) and must stay at most 1.1 (the issue asks for 2 at most).
#[test]
fn waiting_runs_cost_at_most_two_kv_operations_each_per_day() {
    let day_of_ticks = |waiting: usize| -> (u64, u64) {
        let env = Env::journal_sim();
        let tokens = Rc::new(RefCell::new(Vec::new()));
        let a = env.agent(
            MockModel::by_turn(vec![MockTurn::tools([("await_payment", json!({}))]), MockTurn::text("done")]),
            vec![payment_tool(tokens, Some(7 * 24 * HOUR))],
        );
        for i in 0..waiting {
            assert_eq!(block_on(a.send(&format!("w-{i}"), "go", opts())).unwrap().status, RunStatus::AwaitingApproval);
        }
        let sweep = SweepOptions::default();
        let before = a.store().counters();
        for _ in 0..24 * 60 {
            env.clock.advance(60_000);
            block_on(a.sweep(&sweep, &NoListener)).unwrap();
        }
        let c = a.store().counters().since(&before);
        (c.reads, c.writes)
    };
    let (idle_r, idle_w) = day_of_ticks(0);
    let (busy_r, busy_w) = day_of_ticks(1_000);
    let per_run = ((busy_r + busy_w) as f64 - (idle_r + idle_w) as f64) / 1_000.0;
    println!(
        "ops per waiting run per day: {per_run:.2} (idle day {} ops, with 1000 waiting {} ops)",
        idle_r + idle_w,
        busy_r + busy_w
    );
    // The issue's bound is 2; the README quotes 1.09 and this holds it there (the count is deterministic).
    assert!(per_run <= 1.1, "ops per waiting run per day: {per_run}");
}

/// A wait that resolves by itself beside an approval still pending: the run keeps its pause (now on the
/// approval alone), later ticks cost what idle ticks cost (nothing taken up again and again), and the approval
/// resumes the run with both results.
#[test]
fn a_timer_resolved_beside_a_pending_approval_keeps_the_pause_and_costs_nothing_more() {
    for (name, make) in stores() {
        let env = make();
        let counters = Counters::default();
        let model = || {
            MockModel::by_turn(vec![
                MockTurn::tools([("sleep_for", json!({"seconds": 30})), ("gated", json!({}))]),
                MockTurn::text("both done"),
            ])
        };
        let a = env.agent_with(model(), vec![gated_tool("gated", &counters)], questions(), "");
        let paused = block_on(a.send("mixed", "go", opts())).unwrap();
        assert_eq!(paused.approval_ids.len(), 2, "{name}: the timer and the approval");
        let approval = paused.approval_ids.iter().find(|id| !id.starts_with("wait_")).unwrap().clone();
        let sweep = SweepOptions::default();
        env.clock.advance(31_000);
        let tick = block_on(a.sweep(&sweep, &NoListener)).unwrap();
        assert_eq!(tick.woken, 1, "{name}: {tick:?}");
        let cp = block_on(a.load("mixed")).unwrap().unwrap();
        assert_eq!(cp.status, RunStatus::AwaitingApproval, "{name}: still paused on the approval");
        // Two more ticks to settle the index, then ticks are as cheap as with nothing due.
        for _ in 0..2 {
            env.clock.advance(60_000);
            block_on(a.sweep(&sweep, &NoListener)).unwrap();
        }
        let costs: Vec<u64> = (0..3)
            .map(|_| {
                env.clock.advance(60_000);
                let r = block_on(a.sweep(&sweep, &NoListener)).unwrap();
                assert_eq!((r.woken, r.resumed), (0, 0), "{name}: {r:?}");
                r.operations
            })
            .collect();
        assert!(costs.windows(2).all(|w| w[0] == w[1]), "{name}: steady ticks {costs:?}");
        assert!(block_on(a.store().list_due(u64::MAX, 10)).unwrap().is_empty(), "{name}: no entry left");
        let done =
            block_on(a.approvals().resolve(Resolve { id: approval, approved: true, ..Default::default() })).unwrap();
        assert_eq!((done.status, done.text.as_str()), (RunStatus::Finished, "both done"), "{name}");
        assert!(result_of(&done, "sleep_for").content.contains("\"woke\":true"), "{name}");
    }
}

#[test]
fn pending_lists_what_a_paused_run_waits_on_without_tokens() {
    for (name, make) in stores() {
        let env = make();
        let tokens = Rc::new(RefCell::new(Vec::new()));
        let a = env.agent_with(
            one_call("await_payment", json!({})),
            vec![payment_tool(tokens.clone(), Some(HOUR))],
            questions(),
            "",
        );
        let paused = block_on(a.send("w1", "charge", opts())).unwrap();
        let q = env.agent_with(one_call("ask_question", json!({"question": "Which size?"})), vec![], questions(), "");
        block_on(q.send("w2", "ask", opts())).unwrap();
        let listed = block_on(a.pending()).unwrap();
        let of = |id: &str| listed.iter().find(|r| r.run_id == id).unwrap_or_else(|| panic!("{name}: {id} listed"));
        let event = &of("w1").waits;
        assert_eq!(event.len(), 1, "{name}");
        assert_eq!(
            (event[0].kind, event[0].due_at, event[0].token.as_deref()),
            (WaitKind::Event, paused.waits[0].due_at, None),
            "{name}"
        );
        assert_eq!(event[0].id, paused.waits[0].id, "{name}");
        let question = &of("w2").waits;
        assert_eq!(
            (question[0].kind, question[0].question.as_deref()),
            (WaitKind::Question, Some("Which size?")),
            "{name}"
        );
        let json = serde_json::to_string(&listed).unwrap();
        assert!(!json.contains(tokens.borrow()[0].as_str()), "{name}: a listing never shows a token");
    }
}
