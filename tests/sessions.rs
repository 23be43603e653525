//! Sessions (M23): every turn its own checkpointed run `<id>.turn-<n>`, over the memory store and the journal
//! store on the Workers-KV simulator. Crash points are generated: every effect of a turn.

mod common;

use common::{block_on, counting_tool, gated_tool, Counters, Env};
use serde_json::json;
use steadfast::core::checkpoint::RunStatus;
use steadfast::core::sweep::SweepOptions;
use steadfast::core::transcript::{validate_transcript, Message};
use steadfast::runtime::{
    CrashPoint, MockModel, MockTurn, NextExecution, NoListener, Resolve, SendOptions, SessionForkOptions,
};
use steadfast::store::RunKind;
use steadfast::ErrorCode;

/// Three turns: a tool turn and an answer each.
fn script() -> Vec<MockTurn> {
    vec![
        MockTurn::tools([("book", json!({"people": 2}))]),
        MockTurn::text("Booked for 2."),
        MockTurn::tools([("book", json!({"people": 3})), ("book", json!({"note": "window"}))]),
        MockTurn::text("Now 3, by the window."),
        MockTurn::tools([("book", json!({"cancel": true}))]),
        MockTurn::text("Cancelled."),
    ]
}

const INPUTS: [&str; 3] = ["Book a table for 2 tonight", "Make it 3 people", "Cancel it"];

fn envs() -> Vec<(&'static str, fn() -> Env)> {
    vec![("memory", Env::new as fn() -> Env), ("journal on the KV simulator", Env::journal_sim)]
}

fn opts() -> SendOptions {
    SendOptions::default()
}

fn text(m: &Message) -> String {
    match m {
        Message::System { content } | Message::User { content } | Message::Assistant { content, .. } => content.clone(),
        Message::Tool(r) => r.content.clone(),
    }
}

fn shape(messages: &[Message]) -> Vec<String> {
    messages
        .iter()
        .map(|m| match m {
            Message::Tool(r) => format!("result of {}", r.tool_call_id),
            m => serde_json::to_string(m).unwrap(),
        })
        .collect()
}

fn result_ids(messages: &[Message]) -> Vec<String> {
    messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(r) => Some(r.tool_call_id.clone()),
            _ => None,
        })
        .collect()
}

/// [`script`] with every reply taking `ms` of (simulated) time.
fn slow_script(ms: u64) -> Vec<MockTurn> {
    script()
        .into_iter()
        .map(|t| match t {
            MockTurn::Reply { text, tool_calls, usage, .. } => {
                MockTurn::Reply { text, tool_calls, usage, delay_ms: ms }
            }
            MockTurn::Text(text) => {
                MockTurn::Reply { text, tool_calls: vec![], usage: Default::default(), delay_ms: ms }
            }
            other => other,
        })
        .collect()
}

#[test]
fn a_session_checkpoints_every_turn_as_its_own_run_and_each_turn_continues_the_conversation() {
    for (label, make) in envs() {
        let env = make();
        let c = Counters::default();
        let model = MockModel::by_turn(script());
        let agent = env.agent_with(model.clone(), vec![counting_tool("book", &c)], Default::default(), "Be brief.");
        let session = agent.session("chat-42").unwrap();
        let texts: Vec<String> =
            INPUTS.iter().map(|i| block_on(session.send(*i, opts())).unwrap()).map(|r| r.text).collect();
        assert_eq!(texts, ["Booked for 2.", "Now 3, by the window.", "Cancelled."], "{label}");
        for n in 1..=3u32 {
            let cp = block_on(agent.load(&format!("chat-42.turn-{n}"))).unwrap().expect("every turn is a run");
            assert_eq!(cp.status, RunStatus::Finished, "{label} turn {n}");
            // Each turn's transcript is the whole conversation up to it, with one system prompt.
            assert_eq!(cp.messages.iter().filter(|m| m.is_system()).count(), 1, "{label}");
            assert_eq!(cp.messages.len(), [5, 10, 14][n as usize - 1], "{label} turn {n}");
            validate_transcript(&cp.messages).unwrap();
            assert_eq!(cp.step_index, 2, "steps count per turn ({label})");
            assert_eq!(cp.total_usage.input_tokens, 20 * n as u64, "usage adds up over the turns ({label})");
        }
        assert!(block_on(agent.load("chat-42.turn-4")).unwrap().is_none());
        assert_eq!(c.get("book"), 4, "{label}");
        assert_eq!(model.call_count(), 6, "{label}");
        // The model saw the conversation so far on every call of the third turn.
        assert_eq!(model.calls()[4].message_count, 11, "{label}");
        let history = block_on(session.history(10)).unwrap();
        let turns: Vec<(u32, String, String)> =
            history.iter().map(|t| (t.turn, t.input.iter().map(text).collect::<String>(), t.text.clone())).collect();
        assert_eq!(
            turns,
            vec![
                (3, "Cancel it".into(), "Cancelled.".into()),
                (2, "Make it 3 people".into(), "Now 3, by the window.".into()),
                (1, "Book a table for 2 tonight".into(), "Booked for 2.".into()),
            ],
            "{label}"
        );
        assert_eq!(block_on(session.history(1)).unwrap().len(), 1);
        // A session with no turn.
        let empty = agent.session("nobody").unwrap();
        assert!(block_on(empty.history(10)).unwrap().is_empty());
        assert!(block_on(empty.resume(opts())).unwrap().is_none());
        assert!(block_on(empty.latest()).unwrap().is_none());
    }
}

/// The reference conversation of [`script`] over the three inputs, uninterrupted.
fn reference(make: fn() -> Env) -> (Vec<Message>, usize) {
    let env = make();
    let c = Counters::default();
    let agent = env.agent(MockModel::by_turn(script()), vec![counting_tool("book", &c)]);
    let s = agent.session("s").unwrap();
    for i in INPUTS {
        block_on(s.send(i, opts())).unwrap();
    }
    let (_, cp) = block_on(s.latest()).unwrap().unwrap();
    // Effects of the second turn (counted by crashing after ever more of them until one finishes).
    let mut effects = 0;
    for k in 1..200 {
        let env = make();
        let agent = env.agent(MockModel::by_turn(script()), vec![counting_tool("book", &Counters::default())]);
        let s = agent.session("s").unwrap();
        block_on(s.send(INPUTS[0], opts())).unwrap();
        let crash = SendOptions { crash: Some(CrashPoint { after_effects: k, finish_in_flight: false }), ..opts() };
        if block_on(s.send(INPUTS[1], crash)).is_ok() {
            effects = k - 1;
            break;
        }
    }
    assert!(effects > 4, "the second turn has effects to crash after: {effects}");
    (cp.messages, effects)
}

#[test]
fn a_turn_killed_after_any_effect_is_finished_by_the_next_send_or_by_the_sweep_and_nothing_recorded_reruns() {
    for (label, make) in envs() {
        let (reference, effects) = reference(make);
        for k in 1..=effects {
            for (finish_in_flight, recover_by) in [(false, "send"), (true, "send"), (false, "sweep"), (true, "resume")]
            {
                let ctx = format!("{label}: crash after effect {k} of turn 2, finish_in_flight={finish_in_flight}, then {recover_by}; repro: cargo test --test sessions a_turn_killed");
                let env = make();
                let c = Counters::default();
                let agent = env.agent(MockModel::by_turn(script()), vec![counting_tool("book", &c)]);
                let s = agent.session("s").unwrap();
                block_on(s.send(INPUTS[0], opts())).unwrap();
                let crash = SendOptions { crash: Some(CrashPoint { after_effects: k, finish_in_flight }), ..opts() };
                let err = block_on(s.send(INPUTS[1], crash)).unwrap_err();
                assert_eq!(err.code, ErrorCode::Crashed, "{ctx}");
                let recorded: Vec<String> =
                    block_on(agent.load("s.turn-2")).unwrap().map(|cp| result_ids(&cp.messages)).unwrap_or_default();
                let runs_before: Vec<(String, u32)> =
                    recorded.iter().map(|id| (id.clone(), c.get(&format!("call:{id}")))).collect();
                env.past_leases();
                let c2 = Counters::default();
                let model2 = MockModel::by_turn(script());
                let fresh = env.agent(model2.clone(), vec![counting_tool("book", &c2)]);
                let s2 = fresh.session("s").unwrap();
                let turn2 = block_on(fresh.load("s.turn-2")).unwrap();
                if turn2.is_none() {
                    // Killed before the turn's input was recorded: the send failed and the client sends again.
                    let next = block_on(s2.next_execution()).unwrap();
                    assert_eq!(next, NextExecution { run_id: "s.turn-2".into(), in_progress: false }, "{ctx}");
                    let r = block_on(s2.send(INPUTS[1], opts())).unwrap();
                    assert_eq!(r.run_id, "s.turn-2", "{ctx}");
                } else {
                    // An interrupted turn is what the session executes first (strict mode: in its own object,
                    // before the next turn's); one that finished before the crash is not.
                    let done = turn2.is_some_and(|cp| cp.status == RunStatus::Finished);
                    let expected = if done { ("s.turn-3", false) } else { ("s.turn-2", true) };
                    let next = block_on(s2.next_execution()).unwrap();
                    assert_eq!((next.run_id.as_str(), next.in_progress), expected, "{ctx}");
                }
                match recover_by {
                    "send" => {
                        let r = block_on(s2.send(INPUTS[2], opts())).unwrap();
                        assert_eq!(r.run_id, "s.turn-3", "{ctx}");
                    }
                    "sweep" => {
                        // Turn 2 exists by now (recorded at the crash, or sent again above): the sweep finishes it.
                        let report = block_on(fresh.sweep(&SweepOptions::default(), &NoListener)).unwrap();
                        let turn2 = block_on(fresh.load("s.turn-2")).unwrap().expect("turn 2 exists");
                        assert_eq!(turn2.status, RunStatus::Finished, "{ctx}: {report:?}");
                        block_on(s2.send(INPUTS[2], opts())).unwrap();
                    }
                    _ => {
                        // What strict mode does for a send: the session's resume, then the send.
                        block_on(s2.resume(opts())).unwrap();
                        let next = block_on(s2.next_execution()).unwrap();
                        assert_eq!(next, NextExecution { run_id: "s.turn-3".into(), in_progress: false }, "{ctx}");
                        block_on(s2.send(INPUTS[2], opts())).unwrap();
                    }
                }
                let (n, cp) = block_on(s2.latest()).unwrap().unwrap();
                assert_eq!(n, 3, "{ctx}");
                // The same conversation (a tool's text counts its process's calls, so results compare by id).
                assert_eq!(shape(&cp.messages), shape(&reference), "{ctx}");
                validate_transcript(&cp.messages).unwrap();
                for (id, before) in runs_before {
                    assert_eq!(
                        c2.get(&format!("call:{id}")),
                        0,
                        "{ctx}: recorded call {id} ran again (before: {before})"
                    );
                }
            }
        }
    }
}

#[test]
fn a_turn_waiting_on_an_approval_holds_the_session_until_it_is_resolved() {
    for (label, make) in envs() {
        let env = make();
        let c = Counters::default();
        let model = MockModel::by_turn(script());
        let agent = env.agent(model.clone(), vec![gated_tool("book", &c)]);
        let s = agent.session("s").unwrap();
        let paused = block_on(s.send(INPUTS[0], opts())).unwrap();
        assert_eq!(paused.status, RunStatus::AwaitingApproval, "{label}");
        // Unfinished but not in progress: a send is refused in that turn's object, no turn is finished first.
        let next = block_on(s.next_execution()).unwrap();
        assert_eq!(next, NextExecution { run_id: "s.turn-1".into(), in_progress: false }, "{label}");
        let calls = model.call_count();
        let err = block_on(s.send(INPUTS[1], opts())).unwrap_err();
        assert_eq!(err.code, ErrorCode::SessionAwaitingApproval, "{label}");
        assert_eq!(err.approval_id.as_deref(), paused.approval_id.as_deref(), "{label}");
        assert_eq!(model.call_count(), calls, "no model call ({label})");
        assert!(block_on(agent.load("s.turn-2")).unwrap().is_none(), "{label}");
        let pending = block_on(agent.pending()).unwrap();
        assert_eq!(pending.len(), 1);
        assert_eq!((pending[0].kind, pending[0].owner_id.as_deref()), (RunKind::Session, Some("s")), "{label}");
        let id = paused.approval_id.unwrap();
        let done =
            block_on(agent.approvals().resolve(Resolve { id, approved: true, note: None, answer: None })).unwrap();
        assert_eq!(done.text, "Booked for 2.", "{label}");
        let r = block_on(s.send(INPUTS[1], opts())).unwrap();
        assert_eq!((r.run_id.as_str(), r.status), ("s.turn-2", RunStatus::AwaitingApproval), "{label}");
    }
}

#[test]
fn the_newest_turn_is_found_whatever_the_hint_says() {
    for (label, make) in envs() {
        let env = make();
        let agent = env.agent(MockModel::by_turn(script()), vec![counting_tool("book", &Counters::default())]);
        let s = agent.session("s").unwrap();
        block_on(s.send(INPUTS[0], opts())).unwrap();
        block_on(s.send(INPUTS[1], opts())).unwrap();
        for hint in ["", "0", "1", "2", "7", "junk"] {
            block_on(agent.store().put_state("session/s", hint)).unwrap();
            let (n, cp) = block_on(s.latest()).unwrap().unwrap();
            assert_eq!((n, cp.run_id.as_str()), (2, "s.turn-2"), "{label}, hint {hint:?}");
        }
        block_on(agent.store().put_state("session/s", "1")).unwrap();
        let r = block_on(s.send(INPUTS[2], opts())).unwrap();
        assert_eq!(r.run_id, "s.turn-3", "{label}");
    }
}

#[test]
fn a_session_forks_after_any_turn_and_the_original_is_unchanged() {
    for (label, make) in envs() {
        let env = make();
        let mut turns = script();
        turns.push(MockTurn::text("Anything else?"));
        let agent = env.agent(MockModel::by_turn(turns), vec![counting_tool("book", &Counters::default())]);
        let s = agent.session("trip").unwrap();
        for i in INPUTS {
            block_on(s.send(i, opts())).unwrap();
        }
        let before = block_on(s.latest()).unwrap().unwrap().1;
        for from in 1..=3u32 {
            let fork = block_on(s.fork(SessionForkOptions { from_step: from, new_id: None })).unwrap();
            assert_eq!(fork.session_id, format!("trip-fork-{from}"), "{label}");
            let source = block_on(agent.load(&format!("trip.turn-{from}"))).unwrap().unwrap();
            assert_eq!(fork.checkpoint.messages, source.messages, "{label}");
            let f = agent.session(&fork.session_id).unwrap();
            let (n, _) = block_on(f.latest()).unwrap().unwrap();
            assert_eq!(n, 1, "{label}");
            let r = block_on(f.send("And one more thing", opts())).unwrap();
            assert_eq!(r.run_id, format!("trip-fork-{from}.turn-2"), "{label}");
            assert_eq!(&r.messages[..source.messages.len()], &source.messages[..], "{label}");
        }
        assert_eq!(block_on(s.latest()).unwrap().unwrap().1, before, "{label}");
        let err = block_on(s.fork(SessionForkOptions { from_step: 9, new_id: None })).unwrap_err();
        assert_eq!(err.code, ErrorCode::CheckpointNotFound, "{label}");
        assert!(err.message.contains("1..=3"), "{}", err.message);
        let err =
            block_on(s.fork(SessionForkOptions { from_step: 1, new_id: Some("trip-fork-1".into()) })).unwrap_err();
        assert_eq!(err.code, ErrorCode::SessionExists, "{label}");
        let err = block_on(s.fork(SessionForkOptions { from_step: 1, new_id: Some("a.b".into()) })).unwrap_err();
        assert_eq!(err.code, ErrorCode::SessionIdInvalid, "{label}");
    }
}

#[test]
fn a_failing_turn_can_be_discarded_and_the_session_goes_on_from_the_turn_before() {
    for (label, make) in envs() {
        let env = make();
        let c = Counters::default();
        let failing = MockModel::new(vec![MockTurn::text("Hello."), MockTurn::error(400)]);
        let agent = env.agent(failing, vec![counting_tool("book", &c)]);
        let s = agent.session("s").unwrap();
        block_on(s.send("Hi", opts())).unwrap();
        let err = block_on(s.send("Do the impossible", opts())).unwrap_err();
        assert!(!err.retryable, "{label}: {err:?}");
        let pending = block_on(agent.pending()).unwrap();
        assert_eq!(pending.iter().map(|p| p.run_id.as_str()).collect::<Vec<_>>(), ["s.turn-2"], "{label}");
        assert_eq!(block_on(s.discard_pending()).unwrap().as_deref(), Some("s.turn-2"), "{label}");
        assert_eq!(block_on(s.discard_pending()).unwrap(), None, "{label}");
        let ok = env.agent(MockModel::new(vec![MockTurn::text("Sure.")]), vec![counting_tool("book", &c)]);
        let r = block_on(ok.session("s").unwrap().send("Something easy", opts())).unwrap();
        assert_eq!(r.run_id, "s.turn-2", "{label}");
        let texts: Vec<String> = r.messages.iter().filter(|m| !m.is_system()).map(text).collect();
        assert_eq!(texts, ["Hi", "Hello.", "Something easy", "Sure."], "{label}");
        assert_eq!(block_on(ok.session("s").unwrap().delete()).unwrap(), 2, "{label}");
        assert!(block_on(ok.session("s").unwrap().latest()).unwrap().is_none(), "{label}");
    }
}

#[test]
fn session_ids_are_strict_and_turn_runs_are_reached_only_through_their_session_for_sending() {
    let env = Env::new();
    let agent = env.agent(MockModel::by_turn(script()), vec![counting_tool("book", &Counters::default())]);
    for bad in ["", "a.b", "a b", "a/b", &"x".repeat(129)] {
        assert_eq!(agent.session(bad).err().unwrap().code, ErrorCode::SessionIdInvalid, "{bad:?}");
    }
    block_on(agent.session("s").unwrap().send(INPUTS[0], opts())).unwrap();
    for id in ["s.turn-1", "s.turn-2", "x.1796083200.fire"] {
        let err = block_on(agent.send(id, "hi", opts())).unwrap_err();
        assert_eq!(err.code, ErrorCode::SessionIdInvalid, "{id}");
    }
    // The turn stays a run for everything but sending.
    assert!(block_on(agent.load("s.turn-1")).unwrap().is_some());
    assert!(block_on(agent.resume("s.turn-1", opts())).unwrap().is_none());
    assert_eq!(block_on(agent.history("s.turn-1", 10)).unwrap().first().unwrap().status, RunStatus::Finished);
}

#[test]
fn two_sends_of_one_session_at_once_make_one_turn_and_the_other_is_told_busy() {
    use std::rc::Rc;
    use steadfast::runtime::{SimExecutor, SplitMix64};
    for seed in 0..50u64 {
        let exec = SimExecutor::new(1_700_000_000_000, seed);
        let time = exec.time();
        let store: Rc<dyn steadfast::RunStore> = Rc::new(steadfast::MemoryStore::new());
        let agent = |i: u64| {
            let model = MockModel::by_turn(slow_script(500)).with_sleep(Rc::new(time.clone()));
            steadfast::Agent::builder(model)
                .tool_rc(counting_tool("book", &Counters::default()))
                .store_rc(store.clone())
                .clock(Rc::new(time.clone()))
                .sleep(Rc::new(time.clone()))
                .rng(Rc::new(SplitMix64::new(seed * 10 + i)))
                .build()
                .unwrap()
        };
        let (a, b) = (agent(1), agent(2));
        let first = a.clone();
        exec.block_on(async move { first.session("s").unwrap().send(INPUTS[0], opts()).await.unwrap() });
        let results = Rc::new(std::cell::RefCell::new(Vec::new()));
        for (i, ag) in [a, b].into_iter().enumerate() {
            let (results, time) = (results.clone(), time.clone());
            exec.spawn(async move {
                steadfast::runtime::Sleep::sleep(&time, seed % 3 * i as u64).await;
                let r = ag.session("s").unwrap().send(INPUTS[1], opts()).await;
                results.borrow_mut().push(r.map(|r| r.run_id).map_err(|e| e.code.as_str().to_string()));
            });
        }
        exec.run();
        let mut got = results.borrow().clone();
        got.sort();
        assert_eq!(got, vec![Ok("s.turn-2".to_string()), Err("STEADFAST_SESSION_BUSY".to_string())], "seed {seed}");
    }
}

#[test]
fn resume_by_session_id_finishes_its_turn_and_a_discarded_turn_takes_its_approvals_with_it() {
    for (label, make) in envs() {
        let env = make();
        let c = Counters::default();
        let agent = env.agent(MockModel::by_turn(script()), vec![counting_tool("book", &c)]);
        let s = agent.session("s").unwrap();
        let crash = SendOptions { crash: Some(CrashPoint { after_effects: 4, finish_in_flight: false }), ..opts() };
        assert_eq!(block_on(s.send(INPUTS[0], crash)).unwrap_err().code, ErrorCode::Crashed, "{label}");
        env.past_leases();
        let r = block_on(agent.resume("s", opts())).unwrap().expect("the session's turn is resumed");
        assert_eq!((r.run_id.as_str(), r.status), ("s.turn-1", RunStatus::Finished), "{label}");
        assert!(block_on(agent.resume("s", opts())).unwrap().is_none(), "{label}: nothing left");
        assert!(block_on(agent.resume("nobody", opts())).unwrap().is_none(), "{label}");

        let gated = env.agent(MockModel::by_turn(script()), vec![gated_tool("book", &c)]);
        let g = gated.session("g").unwrap();
        let paused = block_on(g.send(INPUTS[0], opts())).unwrap();
        assert_eq!(block_on(gated.approvals().list()).unwrap().len(), 1, "{label}");
        assert_eq!(block_on(g.discard_pending()).unwrap().as_deref(), Some("g.turn-1"), "{label}");
        assert!(block_on(gated.approvals().list()).unwrap().is_empty(), "{label}: withdrawn with its turn");
        let err = block_on(gated.approvals().resolve(Resolve {
            id: paused.approval_id.unwrap(),
            approved: true,
            note: None,
            answer: None,
        }))
        .unwrap_err();
        assert_eq!(err.code, ErrorCode::ApprovalNotFound, "{label}");
    }
}

/// The newest-turn hint costs one write per few turns, not one per send: sends a second apart never write the
/// hint's KV key twice within a second (Workers KV's per-key limit), and lookups stay short.
#[test]
fn rapid_sends_write_the_turn_hint_once_per_few_turns() {
    let env = Env::journal_sim();
    let turns: Vec<MockTurn> = (0..24).map(|i| MockTurn::text(format!("answer {i}"))).collect();
    let agent = env.agent(MockModel::by_turn(turns), vec![]);
    let s = agent.session("fast").unwrap();
    let store = agent.store().clone();
    let mut outside = 0;
    for i in 0..24u32 {
        let before = store.counters();
        let r = block_on(s.send(format!("message {i}"), opts())).unwrap();
        assert_eq!(r.run_id, format!("fast.turn-{}", i + 1));
        // Writes of the send that are not its execution's own: the hint's.
        outside += store.counters().since(&before).writes - r.stats.store_writes;
        env.clock.advance(200);
    }
    assert!((1..=24 / steadfast::runtime::SESSION_HINT_LAG as u64).contains(&outside), "hint writes: {outside}");
    let hint: u32 = block_on(store.get_state("session/fast")).unwrap().unwrap().parse().unwrap();
    assert!(hint <= 24 && 24 - hint <= steadfast::runtime::SESSION_HINT_LAG, "hint {hint}");
}

/// A session fork copies a turn whose call may have run (the process died while it ran): the fork's turn sends
/// it again under the key it ran under (issue 26, bug 5), and its own later calls get keys of their own.
#[test]
fn a_session_fork_resends_a_copied_pending_call_under_the_key_it_ran_under() {
    use std::cell::RefCell;
    use std::rc::Rc;
    use steadfast::runtime::{FnTool, Tool, ToolOutput};
    for (label, make) in envs() {
        let env = make();
        let keys: Rc<RefCell<Vec<String>>> = Rc::default();
        let k = keys.clone();
        let book: Rc<dyn Tool> =
            Rc::new(FnTool::new("book", "book a table", json!({"type": "object"}), move |_a, ctx| {
                k.borrow_mut().push(ctx.idempotency_key().to_string());
                async { Ok(ToolOutput::text("booked")) }
            }));
        let model = || MockModel::by_turn(script());
        let crash = SendOptions { crash: Some(CrashPoint { after_effects: 8, finish_in_flight: true }), ..opts() };
        let agent = env.agent(model(), vec![book.clone()]);
        block_on(agent.session("pay").unwrap().send(INPUTS[0], crash)).unwrap_err();
        env.past_leases();
        let fork =
            block_on(agent.session("pay").unwrap().fork(SessionForkOptions { from_step: 1, new_id: None })).unwrap();
        let agent = env.agent(model(), vec![book.clone()]);
        let f = agent.session(&fork.session_id).unwrap();
        block_on(f.resume(opts())).unwrap();
        block_on(f.send(INPUTS[1], opts())).unwrap();
        let keys = keys.borrow().clone();
        assert_eq!(keys.len(), 4, "{label}: {keys:?}");
        assert_eq!(keys[0], keys[1], "{label}: the copied call keeps its key");
        assert!(keys[2] != keys[0] && keys[3] != keys[0] && keys[2] != keys[3], "{label}: {keys:?}");
    }
}
