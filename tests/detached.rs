//! Detached sub-agents (issue 30, part 4) through the runtime, on every store (memory, the journal store on the
//! KV simulator, strict mode's run objects): a detached sub-agent's call answers at once with its child's id and
//! the lead goes on; the recovery sweep runs the child; its final text comes to the lead as a queued message,
//! applied exactly once — to a lead that finished (it continues), one paused on an approval (after the
//! decision), however often it is delivered, and also when the process died between the child's end and the
//! message (the outbox entry written before the child). A crash at any effect of the lead's call starts the
//! child once. On the lead's delete a detached child goes with it, or runs on when its sub-agent abandons it.

mod common;

use common::*;
use serde_json::json;
use std::cell::RefCell;
use std::rc::Rc;
use steadfast::core::checkpoint::{Checkpoint, RunStatus};
use steadfast::core::ids::subagent_run_id;
use steadfast::core::transcript::{validate_transcript, Message};
use steadfast::runtime::{
    Agent, AgentBuilder, CrashBudget, FnTool, MockModel, MockTurn, NoListener, Resolve, SendOptions, SubagentOptions,
    Tool, ToolOutput,
};
use steadfast::ErrorCode;

/// The text of the last user message a model request holds.
fn last_user(messages: &[Message]) -> String {
    messages
        .iter()
        .rev()
        .find_map(|m| match m {
            Message::User { content } => Some(content.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

/// How many of a transcript's user messages bring sub-agent `name`'s result.
fn deliveries(cp: &Checkpoint, name: &str) -> usize {
    let head = format!("Sub-agent '{name}' finished");
    cp.messages.iter().filter(|m| matches!(m, Message::User { content } if content.starts_with(&head))).count()
}

/// A tool that counts its executions.
fn counted(name: &'static str, runs: &Rc<RefCell<usize>>, gated: bool) -> Rc<dyn Tool> {
    let runs = runs.clone();
    Rc::new(
        FnTool::new(name, "looks something up", object_schema(), move |_args, _ctx| {
            *runs.borrow_mut() += 1;
            async move { Ok(ToolOutput::text(format!("{name}: 42"))) }
        })
        .needs_approval(gated),
    )
}

/// A lead whose first turn calls detached sub-agent `bg` (then `extra` turns, e.g. a gated call), which answers
/// "started" and, when the child's message comes, "heard: <message>". `bg` calls `lookup` and reports.
fn team(env: &Env, runs: &Rc<RefCell<usize>>, opts: SubagentOptions, extra: Vec<MockTurn>, seed: u64) -> AgentBuilder {
    let child = builder(
        env,
        MockModel::by_turn(vec![
            MockTurn::tools([("lookup", json!({}))]),
            MockTurn::func(|req| MockTurn::text(format!("found {}", last_tool(req.messages)))),
        ]),
        seed * 2 + 1,
    )
    .tool_rc(counted("lookup", runs, false));
    let mut turns = vec![MockTurn::tools([("bg", json!({"task": "look it up"}))])];
    turns.extend(extra);
    for _ in 0..3 {
        turns.push(MockTurn::func(|req| {
            let last = last_user(req.messages);
            MockTurn::text(if last.starts_with("Sub-agent") { format!("heard: {last}") } else { "started".into() })
        }));
    }
    let lead_runs = Rc::new(RefCell::new(0));
    builder(env, MockModel::by_turn(turns), seed * 2).tool_rc(counted("gate", &lead_runs, true)).subagent_with(
        "bg",
        "Looks things up in the background",
        child,
        opts,
    )
}

/// The content of the last tool result of a transcript.
fn last_tool(messages: &[Message]) -> String {
    messages
        .iter()
        .rev()
        .find_map(|m| match m {
            Message::Tool(r) => Some(r.content.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

const DETACHED: SubagentOptions = SubagentOptions { detached: true, abandon: false };

/// The child run of the lead's first call of `bg`.
fn bg_child_id(env: &Env, lead_id: &str) -> String {
    let lead = block_on(env.store.load(lead_id)).unwrap().unwrap();
    let call = lead.messages.iter().flat_map(|m| m.tool_calls().to_vec()).find(|c| c.name == "bg").unwrap();
    subagent_run_id(lead_id, "bg", &lead.call_key(&call.id).unwrap()).unwrap()
}

fn tick(a: &Agent) -> steadfast::runtime::SweepReport {
    block_on(a.sweep(&Default::default(), &NoListener)).unwrap()
}

fn load(env: &Env, id: &str) -> Option<Checkpoint> {
    block_on(env.store.load(id)).unwrap()
}

#[test]
fn a_detached_call_answers_at_once_and_the_childs_result_continues_the_finished_lead_once() {
    for (name, make) in stores() {
        let env = make();
        let runs = Rc::new(RefCell::new(0));
        let a = team(&env, &runs, DETACHED, vec![], 1).build().unwrap();
        let done = block_on(a.send("lead", "go", SendOptions::default())).unwrap();
        assert_eq!((done.status, done.text.as_str()), (RunStatus::Finished, "started"), "{name}");
        let child_id = bg_child_id(&env, "lead");
        let lead = load(&env, "lead").unwrap();
        let started: serde_json::Value = serde_json::from_str(&last_tool(&lead.messages)).unwrap();
        assert_eq!(started, json!({"started": child_id, "subagent": "bg", "detached": true}), "{name}");
        assert_eq!(lead.total_usage.output_tokens, lead.usage.output_tokens, "{name}: no child spend rolled in");
        let child = load(&env, &child_id).expect("the child is written");
        let turns = child.messages.iter().filter(|m| matches!(m, Message::Assistant { .. })).count();
        assert_eq!((child.status, turns, *runs.borrow()), (RunStatus::InProgress, 0, 0), "{name}: not run yet");

        // One tick runs the child (a pending run); the next continues the finished lead with its result.
        tick(&a);
        assert_eq!(load(&env, &child_id).unwrap().status, RunStatus::Finished, "{name}");
        tick(&a);
        let lead = load(&env, "lead").unwrap();
        assert_eq!(lead.status, RunStatus::Finished, "{name}");
        assert_eq!(deliveries(&lead, "bg"), 1, "{name}");
        assert_eq!(
            lead.last_text(),
            format!("heard: Sub-agent 'bg' finished (run {child_id}):\nfound lookup: 42"),
            "{name}"
        );
        validate_transcript(&lead.messages).unwrap();

        // The outbox comes due later and delivers again: the lead applied it, so nothing changes; then the
        // index is empty.
        for _ in 0..4 {
            env.clock.advance(3 * 60_000);
            tick(&a);
        }
        let after = load(&env, "lead").unwrap();
        assert_eq!((after.seq, deliveries(&after, "bg")), (lead.seq, 1), "{name}: applied once");
        assert_eq!(*runs.borrow(), 1, "{name}: the child's tool ran once");
        assert!(block_on(env.store.list_due(u64::MAX, 100)).unwrap().is_empty(), "{name}: no entry is left");
        assert!(block_on(env.store.list_queued("lead")).unwrap().is_empty(), "{name}: no message is left");
    }
}

/// The process dies after the child's final commit and before its message is written: the outbox entry the
/// call wrote before the child makes the sweep deliver it.
#[test]
fn a_result_lost_between_the_childs_end_and_its_message_is_delivered_from_the_outbox() {
    for (name, make) in stores() {
        let env = make();
        let runs = Rc::new(RefCell::new(0));
        let a = team(&env, &runs, DETACHED, vec![], 2).build().unwrap();
        block_on(a.send("lost", "go", SendOptions::default())).unwrap();
        let child_id = bg_child_id(&env, "lost");
        tick(&a);
        assert_eq!(load(&env, &child_id).unwrap().status, RunStatus::Finished, "{name}");
        // What a crash right after the child's last commit leaves: no message, no message entry.
        for q in block_on(env.store.list_queued("lost")).unwrap() {
            block_on(env.store.delete_queued(&q)).unwrap();
        }
        for d in block_on(env.store.list_due(u64::MAX, 100)).unwrap() {
            if d.run_id == "lost" {
                block_on(env.store.delete_due(&d)).unwrap();
            }
        }
        tick(&a);
        assert_eq!(deliveries(&load(&env, "lost").unwrap(), "bg"), 0, "{name}: lost for now");
        env.clock.advance(2 * 60_000 + 1);
        tick(&a);
        tick(&a);
        let lead = load(&env, "lost").unwrap();
        assert_eq!((lead.status, deliveries(&lead, "bg")), (RunStatus::Finished, 1), "{name}");
        env.clock.advance(60 * 60_000);
        tick(&a);
        assert!(block_on(env.store.list_due(u64::MAX, 100)).unwrap().is_empty(), "{name}: no entry is left");
    }
}

/// The lead pauses on an approval after the call; the child finishes meanwhile: its result is applied when the
/// decision resumes the lead, once.
#[test]
fn a_lead_paused_on_an_approval_gets_the_childs_result_when_its_decision_resumes_it() {
    for (name, make) in stores() {
        let env = make();
        let runs = Rc::new(RefCell::new(0));
        let a = team(&env, &runs, DETACHED, vec![MockTurn::tools([("gate", json!({}))])], 3).build().unwrap();
        let paused = block_on(a.send("gated", "go", SendOptions::default())).unwrap();
        assert_eq!(paused.status, RunStatus::AwaitingApproval, "{name}");
        tick(&a);
        tick(&a);
        let lead = load(&env, "gated").unwrap();
        assert_eq!((lead.status, deliveries(&lead, "bg")), (RunStatus::AwaitingApproval, 0), "{name}");
        let id = lead.approval_ids[0].clone();
        let done = block_on(a.approvals().resolve(Resolve { id, approved: true, ..Default::default() })).unwrap();
        assert_eq!(done.status, RunStatus::Finished, "{name}");
        let lead = load(&env, "gated").unwrap();
        assert_eq!(deliveries(&lead, "bg"), 1, "{name}");
        assert!(lead.last_text().starts_with("heard: Sub-agent 'bg' finished"), "{name}: {}", lead.last_text());
        validate_transcript(&lead.messages).unwrap();
        for _ in 0..3 {
            env.clock.advance(3 * 60_000);
            tick(&a);
        }
        assert_eq!(deliveries(&load(&env, "gated").unwrap(), "bg"), 1, "{name}");
    }
}

/// A crash at any effect of the lead's execution (the call writes the outbox entry, then the child): the lead's
/// resumption answers the call with the same child, written once; the sweep then finishes both.
#[test]
fn after_a_crash_at_any_effect_of_the_detached_call_the_child_is_started_once_and_delivered_once() {
    for (name, make) in stores() {
        let mut k = 1;
        loop {
            let env = make();
            let runs = Rc::new(RefCell::new(0));
            let a = team(&env, &runs, DETACHED, vec![], 10 + k as u64).build().unwrap();
            let budget = CrashBudget::new(k, k % 2 == 0);
            let opts = SendOptions { crash_budget: Some(budget.clone()), ..Default::default() };
            let first = block_on(a.send("c", "go", opts));
            if !budget.crashed() {
                assert_eq!(first.unwrap().status, RunStatus::Finished, "{name} k={k}");
                break;
            }
            env.past_leases();
            let b = team(&env, &runs, DETACHED, vec![], 500 + k as u64).build().unwrap();
            match load(&env, "c") {
                Some(cp) if cp.status == RunStatus::Finished => {}
                Some(_) => assert!(block_on(b.resume("c", SendOptions::default())).unwrap().is_some()),
                None => drop(block_on(b.send("c", "go", SendOptions::default())).unwrap()),
            }
            for _ in 0..3 {
                tick(&b);
            }
            let lead = load(&env, "c").unwrap();
            let calls: Vec<_> = lead.messages.iter().flat_map(|m| m.tool_calls().to_vec()).collect();
            assert_eq!(calls.len(), 1, "{name} k={k}");
            let child = load(&env, &bg_child_id(&env, "c")).expect("the child is written");
            let tasks = child.messages.iter().filter(|m| matches!(m, Message::User { .. })).count();
            assert_eq!((child.status, tasks), (RunStatus::Finished, 1), "{name} k={k}: started once");
            assert_eq!((lead.status, deliveries(&lead, "bg")), (RunStatus::Finished, 1), "{name} k={k}");
            assert_eq!(*runs.borrow(), 1, "{name} k={k}");
            k += 1;
            assert!(k < 100, "{name}: the crash points end");
        }
        assert!(k > 3, "{name}: the call's effects were crashed after ({k})");
    }
}

/// On the lead's delete a detached child is deleted with it (its outbox entry then finds nothing); an
/// abandoned one runs on to its end, and its result has no lead to go to (none is created).
#[test]
fn deleting_a_lead_deletes_its_detached_child_unless_its_sub_agent_abandons_it() {
    for (name, make) in stores() {
        for abandon in [false, true] {
            let env = make();
            let runs = Rc::new(RefCell::new(0));
            let opts = SubagentOptions { detached: true, abandon };
            let a = team(&env, &runs, opts, vec![], 4).build().unwrap();
            block_on(a.send("gone", "go", SendOptions::default())).unwrap();
            let child_id = bg_child_id(&env, "gone");
            block_on(a.delete("gone")).unwrap();
            assert!(load(&env, "gone").is_none(), "{name}");
            assert_eq!(load(&env, &child_id).is_some(), abandon, "{name} abandon={abandon}");
            for _ in 0..3 {
                env.clock.advance(3 * 60_000);
                tick(&a);
            }
            assert!(load(&env, "gone").is_none(), "{name} abandon={abandon}: no lead is made");
            let child = load(&env, &child_id);
            assert_eq!(child.map(|c| c.status), abandon.then_some(RunStatus::Finished), "{name} abandon={abandon}");
            assert_eq!(*runs.borrow(), usize::from(abandon), "{name} abandon={abandon}");
            env.clock.advance(60 * 60_000);
            tick(&a);
            assert!(block_on(env.store.list_due(u64::MAX, 100)).unwrap().is_empty(), "{name}: no entry is left");
        }
    }
}

#[test]
fn only_a_detached_sub_agent_may_abandon_and_a_detached_one_needs_its_leads_steering() {
    let env = Env::new();
    let runs = Rc::new(RefCell::new(0));
    let abandon_attached = team(&env, &runs, SubagentOptions { detached: false, abandon: true }, vec![], 5).build();
    assert_eq!(abandon_attached.err().map(|e| e.code), Some(ErrorCode::ConfigInvalid));
    let no_steering = steadfast::runtime::AgentOptions { steer_poll_ms: None, ..Default::default() };
    let refused = team(&env, &runs, DETACHED, vec![], 6).options(no_steering).build();
    let e = refused.err().expect("refused");
    assert_eq!(e.code, ErrorCode::ConfigInvalid);
    assert!(e.message.contains("'bg'"), "{}", e.message);
}

/// A crash at any effect of the child's execution (the sweep's, or a resume's): a later tick finishes the child
/// where it stopped, and its result reaches the lead once — also after a crash right after its last commit,
/// before its message was written (the outbox delivers it).
#[test]
fn after_a_crash_at_any_effect_of_the_detached_childs_execution_its_result_reaches_the_lead_once() {
    for (name, make) in stores() {
        let mut after_finish = 0;
        let mut k = 1;
        loop {
            let env = make();
            let runs = Rc::new(RefCell::new(0));
            let a = team(&env, &runs, DETACHED, vec![], 20 + k as u64).build().unwrap();
            block_on(a.send("lead", "go", SendOptions::default())).unwrap();
            let child_id = bg_child_id(&env, "lead");
            let crash = steadfast::runtime::CrashPoint { after_effects: k, finish_in_flight: k % 2 == 0 };
            let first = block_on(a.resume(&child_id, SendOptions { crash: Some(crash), ..Default::default() }));
            if first.is_ok() {
                break;
            }
            assert_eq!(first.unwrap_err().code, ErrorCode::Crashed, "{name} k={k}");
            if load(&env, &child_id).unwrap().status == RunStatus::Finished {
                after_finish += 1;
            }
            env.past_leases();
            let b = team(&env, &runs, DETACHED, vec![], 700 + k as u64).build().unwrap();
            for _ in 0..4 {
                env.clock.advance(61_000);
                tick(&b);
            }
            let child = load(&env, &child_id).unwrap();
            let lead = load(&env, "lead").unwrap();
            assert_eq!(child.status, RunStatus::Finished, "{name} k={k}");
            assert_eq!((lead.status, deliveries(&lead, "bg")), (RunStatus::Finished, 1), "{name} k={k}");
            assert!(*runs.borrow() <= 2, "{name} k={k}: at most once more, when the crash lost its result");
            validate_transcript(&lead.messages).unwrap();
            k += 1;
            assert!(k < 100, "{name}: the crash points end");
        }
        assert!(after_finish > 0, "{name}: a crash came after the child's last commit ({k} points)");
    }
}

/// A child whose final text is larger than a queued message may be: its message carries the first 32,000
/// characters, marked as cut (the whole text stays in the child run), and the lead still gets it once.
#[test]
fn a_detached_childs_long_result_is_cut_to_fit_its_message_and_still_delivered_once() {
    for (name, make) in stores() {
        let env = make();
        let long = "é".repeat(300_000);
        let child = builder(&env, MockModel::by_turn(vec![MockTurn::text(long.clone())]), 91);
        let lead = builder(
            &env,
            MockModel::by_turn(vec![
                MockTurn::tools([("bg", json!({"task": "write a lot"}))]),
                MockTurn::text("started"),
                MockTurn::text("read it"),
            ]),
            90,
        )
        .subagent_with("bg", "Writes", child, DETACHED)
        .build()
        .unwrap();
        block_on(lead.send("long", "go", SendOptions::default())).unwrap();
        let child_id = bg_child_id(&env, "long");
        for _ in 0..3 {
            tick(&lead);
        }
        assert!(load(&env, &child_id).unwrap().last_text() == long, "{name}: the child keeps it whole");
        let cp = load(&env, "long").unwrap();
        assert_eq!(
            (cp.status, deliveries(&cp, "bg"), cp.last_text()),
            (RunStatus::Finished, 1, "read it".into()),
            "{name}"
        );
        let head = format!("Sub-agent 'bg' finished (run {child_id}):\n");
        let delivered = cp
            .messages
            .iter()
            .find_map(|m| match m {
                Message::User { content } => content.strip_prefix(&head).map(str::to_string),
                _ => None,
            })
            .unwrap();
        let want = format!("{}… [truncated]", "é".repeat(32_000));
        assert!(delivered == want, "{name}: {} characters delivered", delivered.chars().count());
    }
}

/// A detached child whose entry in the sweep's listing was lost (on Workers KV an index write that failed is
/// repaired at the run's next boundary, and a child that has not run has none): its outbox entry runs it, and its
/// result reaches the lead once. Found by the checker (seed 4679 on the journal store, with 8,000 programs).
#[test]
fn a_detached_child_missing_from_the_sweeps_listing_is_run_by_its_outbox() {
    use steadfast::store::kv::KvBackend;
    let clock = steadfast::runtime::ManualClock::new(1_700_000_000_000);
    let kv = steadfast::store::sim::SimKv::new(Rc::new(clock.clone()), Default::default());
    let env = Env::journal_over(kv.clone(), clock);
    let runs = Rc::new(RefCell::new(0));
    let a = team(&env, &runs, DETACHED, vec![], 1).build().unwrap();
    block_on(a.send("lead", "go", SendOptions::default())).unwrap();
    let child_id = bg_child_id(&env, "lead");
    let listed: Vec<String> =
        kv.keys().into_iter().filter(|k| k.contains("idx/pending/") && k.contains(&child_id)).collect();
    assert!(!listed.is_empty(), "the child is listed: {:?}", kv.keys());
    for k in &listed {
        block_on(kv.delete(k)).unwrap();
    }
    assert!(block_on(a.pending()).unwrap().iter().all(|p| p.run_id != child_id), "no longer listed");
    // Ticks a minute apart: the outbox entry comes due two minutes after the call and runs the child; a later
    // one continues the lead with its result.
    for _ in 0..6 {
        env.clock.advance(61_000);
        tick(&a);
    }
    assert_eq!(load(&env, &child_id).unwrap().status, RunStatus::Finished, "the outbox ran the child");
    let lead = load(&env, "lead").unwrap();
    assert_eq!((lead.status, deliveries(&lead, "bg")), (RunStatus::Finished, 1));
    assert_eq!(*runs.borrow(), 1, "the child's tool ran once");
}
