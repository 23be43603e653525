//! A call that may have taken effect is not run blindly again, across forks, resumes and redeliveries: a fork with
//! each patch kind, replayed and compared with its source; idempotency keys unique across runs and stable across
//! resumes, and a fork's copied call re-sent under its source's key; a fork of a started approved call records it
//! interrupted; `reconcile` prevents a second charge after a crash between the effect and its record; `run_once`
//! acknowledges redeliveries without model calls.
//! With a fake clock, the scripted model and (where it matters) the journal store on SimKv.

mod common;

use common::healing::opts;
use common::*;
use serde_json::json;
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;
use steadfast::core::checkpoint::RunStatus;
use steadfast::core::fork::{ForkPatch, ToolResultPatch};
use steadfast::core::transcript::{validate_transcript, Message, ResultKind};
use steadfast::runtime::{
    CrashPoint, Delivery, FnTool, ForkOptions, MockModel, MockTurn, Resolve, SendOptions, Tool, ToolOutput,
};
use steadfast::ErrorCode;

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
                let resolve = Resolve { id, approved: true, note: None, answer: None };
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
fn delete_keeping_history_is_refused_and_deletes_nothing_on_every_store() {
    for (name, env) in [("memory", Env::new()), ("journal", Env::journal_sim()), ("objects", Env::objects())] {
        let agent = env.agent(trip_model(), vec![weather()]);
        block_on(agent.send("trip", "Plan my trip", opts())).unwrap();
        let before = block_on(agent.history("trip", 50)).unwrap();
        assert!(!before.is_empty(), "{name}");
        let runs = agent.runs();
        let e =
            block_on(runs.delete_with("trip", steadfast::runtime::DeleteOptions { keep_history: true })).unwrap_err();
        assert_eq!(e.code, ErrorCode::ConfigInvalid, "{name}: {e}");
        assert!(e.message.contains("fork the run first"), "{name}: {e}");
        assert!(block_on(runs.load("trip")).unwrap().is_some(), "{name}: the run is still there");
        assert_eq!(block_on(runs.history("trip", 50)).unwrap().len(), before.len(), "{name}: and its history");
        block_on(runs.delete_with("trip", Default::default())).unwrap();
        assert!(block_on(runs.load("trip")).unwrap().is_none(), "{name}: a plain delete deletes");
        assert!(block_on(runs.history("trip", 50)).unwrap().is_empty(), "{name}: history and all");
    }
}
