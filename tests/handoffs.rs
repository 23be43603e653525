//! Handoffs (issue 30, part 5) through the runtime, on every store (memory, the journal store on the KV
//! simulator, strict mode's run objects): a `transfer_to_<name>` call hands the conversation to that agent of
//! the lead's team in the same run (its model, tools and instructions from the next model call on; the
//! checkpoint names it and carries its fingerprint); only the first transfer of a turn is taken (the others get
//! `not-run`); `maxHandoffs` bounds them (`STEADFAST_HANDOFF_LIMIT`); a crash after any effect resumes under the
//! right agent with each transfer taken once; a resume checks drift against the agent the run is with.

mod common;

use common::*;
use serde_json::json;
use std::cell::RefCell;
use std::rc::Rc;
use steadfast::core::checkpoint::RunStatus;
use steadfast::core::events::Event;
use steadfast::core::machine::DriftPolicy;
use steadfast::core::transcript::{validate_transcript, Message, ResultKind};
use steadfast::runtime::{
    Agent, AgentBuilder, AgentOptions, CrashPoint, MockModel, MockTurn, ModelRequest, SendOptions,
};
use steadfast::ErrorCode;

/// Which agent answered each model call, and anything wrong it saw in its request.
#[derive(Clone, Default)]
struct Calls(Rc<RefCell<Vec<String>>>, Rc<RefCell<Vec<String>>>);

/// Checks a request made to agent `me`: its last system message is its instructions, and it sees a
/// `transfer_to_` tool for each other agent of the team and none for itself.
fn check(calls: &Calls, me: &str, req: &ModelRequest<'_>) {
    calls.0.borrow_mut().push(me.to_string());
    let system = req.messages.iter().rev().find_map(|m| match m {
        Message::System { content } => Some(content.clone()),
        _ => None,
    });
    if system.as_deref() != Some(&format!("You are {me}.")) {
        calls.1.borrow_mut().push(format!("{me} was called under instructions {system:?}"));
    }
    let mut transfers: Vec<&str> = req.tools.iter().filter_map(|t| t.name.strip_prefix("transfer_to_")).collect();
    transfers.sort();
    let want: Vec<&str> = ["billing", "lead", "support"].into_iter().filter(|n| *n != me).collect();
    if transfers != want {
        calls.1.borrow_mut().push(format!("{me} saw transfer tools {transfers:?}"));
    }
}

/// The number of tool results since the last user message.
fn results_since_user(messages: &[Message]) -> usize {
    let u = messages.iter().rposition(|m| matches!(m, Message::User { .. })).unwrap_or(0);
    messages[u..].iter().filter(|m| matches!(m, Message::Tool(_))).count()
}

/// A model that answers every call with `f`.
fn always(f: impl Fn(&ModelRequest<'_>) -> MockTurn + Clone + 'static) -> MockModel {
    MockModel::new((0..40).map(|_| MockTurn::func(f.clone())).collect())
}

/// The lead hands to `billing` (a second transfer in the same turn, to `support`, is not taken, a `note` call
/// beside them runs); billing looks the invoice up and hands back; the lead answers.
fn team(env: &Env, calls: &Calls, counters: &Counters, seed: u64, options: AgentOptions) -> Agent {
    let c = calls.clone();
    let lead_model = always(move |req| {
        check(&c, "lead", req);
        match results_since_user(req.messages) {
            0 => MockTurn::tools([
                ("transfer_to_billing", json!({})),
                ("note", json!({})),
                ("transfer_to_support", json!({})),
            ]),
            _ => MockTurn::text("lead: all settled"),
        }
    });
    let c = calls.clone();
    let billing_model = always(move |req| {
        check(&c, "billing", req);
        match results_since_user(req.messages) {
            3 => MockTurn::tools([("invoice", json!({}))]),
            _ => MockTurn::tools([("transfer_to_lead", json!({}))]),
        }
    });
    let c = calls.clone();
    let support_model = always(move |req| {
        check(&c, "support", req);
        MockTurn::text("support should never be asked")
    });
    let billing = builder(env, billing_model, seed * 3 + 1)
        .instructions("You are billing.")
        .tool_rc(counting_tool("invoice", counters));
    let support = builder(env, support_model, seed * 3 + 2).instructions("You are support.");
    builder(env, lead_model, seed * 3)
        .instructions("You are lead.")
        .options(options)
        .tool_rc(counting_tool("note", counters))
        .handoff("billing", "Handles invoices", billing)
        .handoff("support", "Handles everything else", support)
        .build()
        .expect("the team builds")
}

fn kinds(messages: &[Message]) -> Vec<(String, bool, ResultKind)> {
    messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(r) => Some((r.name.clone(), r.is_error, r.kind)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_transfer_hands_the_conversation_to_its_agent_and_only_the_first_of_a_turn_is_taken() {
    for (name, make) in stores() {
        let env = make();
        let (calls, counters) = (Calls::default(), Counters::default());
        let a = team(&env, &calls, &counters, 1, AgentOptions::default());
        let (opts, sink) = listening();
        let r = block_on(a.send("chat", "my invoice is wrong", opts)).unwrap();
        assert_eq!((r.status, r.text.as_str()), (RunStatus::Finished, "lead: all settled"), "{name}");
        assert!(calls.1.borrow().is_empty(), "{name}: {:?}", calls.1.borrow());
        assert_eq!(*calls.0.borrow(), ["lead", "billing", "billing", "lead"], "{name}");
        let cp = block_on(env.store.load("chat")).unwrap().unwrap();
        validate_transcript(&cp.messages).unwrap();
        assert_eq!(
            kinds(&cp.messages),
            [
                ("transfer_to_billing".into(), false, ResultKind::Execution),
                ("note".into(), false, ResultKind::Execution),
                ("transfer_to_support".into(), true, ResultKind::NotRun),
                ("invoice".into(), false, ResultKind::Execution),
                ("transfer_to_lead".into(), false, ResultKind::Execution),
            ],
            "{name}"
        );
        let first = cp.messages.iter().find_map(|m| match m {
            Message::Tool(r) => Some(r.content.clone()),
            _ => None,
        });
        assert_eq!(first.as_deref(), Some(r#"{"transferredTo":"billing"}"#), "{name}");
        assert_eq!((cp.agent.as_deref(), cp.handoffs), (Some("lead"), 2), "{name}");
        assert_eq!(cp.fingerprint.as_ref(), Some(a.fingerprint()), "{name}: back with the lead");
        assert_eq!((counters.get("note"), counters.get("invoice")), (1, 1), "{name}");
        let handoffs: Vec<String> = sink
            .events()
            .into_iter()
            .filter_map(|e| match e.event {
                Event::Handoff { to, .. } => Some(to),
                _ => None,
            })
            .collect();
        assert_eq!(handoffs, ["billing", "lead"], "{name}");
        // The journal tells a late watcher the same.
        let mut history = block_on(a.history("chat", 100)).unwrap();
        history.sort_by_key(|h| h.seq);
        let replayed: Vec<String> = history
            .windows(2)
            .flat_map(|w| steadfast::core::replay::recorded_events(&w[0].checkpoint, &w[1].checkpoint))
            .filter_map(|e| match e {
                Event::Handoff { to, .. } => Some(to),
                _ => None,
            })
            .collect();
        assert_eq!(replayed, ["billing", "lead"], "{name}");
    }
}

#[test]
fn a_handoff_survives_a_crash_after_every_effect_and_is_taken_once() {
    for (name, make) in stores() {
        let mut k = 1;
        loop {
            let env = make();
            let (calls, counters) = (Calls::default(), Counters::default());
            let a = team(&env, &calls, &counters, k as u64, AgentOptions::default());
            let crash = Some(CrashPoint { after_effects: k, finish_in_flight: k % 2 == 0 });
            let first = block_on(a.send("chat", "my invoice is wrong", SendOptions { crash, ..Default::default() }));
            let crashed = matches!(&first, Err(e) if e.code == ErrorCode::Crashed);
            if !crashed {
                assert_eq!(first.unwrap().status, RunStatus::Finished, "{name} k={k}");
                break;
            }
            env.past_leases();
            let b = team(&env, &calls, &counters, 1_000 + k as u64, AgentOptions::default());
            let done = match block_on(env.store.load("chat")).unwrap() {
                Some(cp) if cp.status == RunStatus::Finished => steadfast::runtime::RunResult::stored(&cp),
                Some(_) => block_on(b.resume("chat", SendOptions::default())).unwrap().expect("resumable"),
                None => block_on(b.send("chat", "my invoice is wrong", SendOptions::default())).unwrap(),
            };
            assert_eq!((done.status, done.text.as_str()), (RunStatus::Finished, "lead: all settled"), "{name} k={k}");
            assert!(calls.1.borrow().is_empty(), "{name} k={k}: {:?}", calls.1.borrow());
            let cp = block_on(env.store.load("chat")).unwrap().unwrap();
            validate_transcript(&cp.messages).unwrap_or_else(|e| panic!("{name} k={k}: {e:?}"));
            assert_eq!((cp.agent.as_deref(), cp.handoffs), (Some("lead"), 2), "{name} k={k}");
            let system: Vec<&Message> = cp.messages.iter().filter(|m| matches!(m, Message::System { .. })).collect();
            assert_eq!(system.len(), 3, "{name} k={k}: lead, billing, lead: each move once");
            let transfers = kinds(&cp.messages).into_iter().filter(|(n, _, _)| n.starts_with("transfer_to_")).count();
            assert_eq!(transfers, 3, "{name} k={k}");
            assert!(counters.get("invoice") <= 2 && counters.get("note") <= 2, "{name} k={k}");
            k += 1;
            assert!(k < 100, "{name}: the crash points end");
        }
        assert!(k > 8, "{name}: a handoff run performs more than 8 effects ({k})");
    }
}

#[test]
fn max_handoffs_bounds_the_transfers_of_a_run() {
    for (name, make) in stores() {
        let env = make();
        let (calls, counters) = (Calls::default(), Counters::default());
        let a = team(&env, &calls, &counters, 5, AgentOptions { max_handoffs: 1, ..Default::default() });
        let r = block_on(a.send("chat", "my invoice is wrong", SendOptions::default())).unwrap();
        assert_eq!(r.status, RunStatus::Finished, "{name}");
        let cp = block_on(env.store.load("chat")).unwrap().unwrap();
        // Billing's transfer back is refused: billing keeps the conversation and asks again until its steps end.
        assert_eq!((cp.agent.as_deref(), cp.handoffs), (Some("billing"), 1), "{name}");
        let refused = cp.messages.iter().find_map(|m| match m {
            Message::Tool(r) if r.name == "transfer_to_lead" => Some(r.clone()),
            _ => None,
        });
        let refused = refused.expect("billing tried to hand back");
        assert!(refused.is_error, "{name}");
        assert!(refused.content.starts_with("STEADFAST_HANDOFF_LIMIT: this run handed the conversation off 1 times"));
        assert!(calls.0.borrow().iter().skip(1).all(|a| a == "billing"), "{name}: {:?}", calls.0.borrow());
    }
}

#[test]
fn a_resume_checks_drift_against_the_agent_the_run_is_with() {
    for (name, make) in stores() {
        let (calls, counters) = (Calls::default(), Counters::default());
        let error = AgentOptions { on_agent_drift: DriftPolicy::Error, ..Default::default() };
        // A crash that leaves the run with billing, unfinished.
        let mut k = 1;
        let env = loop {
            let env = make();
            let a = team(&env, &calls, &counters, 7, error.clone());
            let crash = Some(CrashPoint { after_effects: k, finish_in_flight: false });
            let _ = block_on(a.send("chat", "my invoice is wrong", SendOptions { crash, ..Default::default() }));
            let cp = block_on(env.store.load("chat")).unwrap();
            if cp.is_some_and(|cp| cp.agent.as_deref() == Some("billing") && cp.status != RunStatus::Finished) {
                break env;
            }
            k += 1;
            assert!(k < 60, "{name}: some crash leaves the run with billing");
        };
        env.past_leases();
        // A team whose billing changed refuses it (nothing touched), …
        let billing = builder(&env, MockModel::new(vec![MockTurn::text("x")]), 9)
            .instructions("You are billing v2.")
            .tool_rc(counting_tool("invoice", &counters));
        let changed = builder(&env, MockModel::new(vec![MockTurn::text("x")]), 8)
            .instructions("You are lead.")
            .options(error.clone())
            .tool_rc(counting_tool("note", &counters))
            .handoff("billing", "Handles invoices", billing)
            .handoff("support", "Handles everything else", builder(&env, MockModel::new(vec![]), 10))
            .build()
            .unwrap();
        let e = block_on(changed.resume("chat", SendOptions::default())).unwrap_err();
        assert_eq!(e.code, ErrorCode::AgentDrift, "{name}: {e:?}");
        // … a team without billing cannot go on, …
        let gone = builder(&env, MockModel::new(vec![MockTurn::text("x")]), 11)
            .handoff("support", "Handles everything else", builder(&env, MockModel::new(vec![]), 12))
            .build()
            .unwrap();
        let e = block_on(gone.resume("chat", SendOptions::default())).unwrap_err();
        assert_eq!(e.code, ErrorCode::AgentDrift, "{name}: {e:?}");
        assert!(e.message.contains("handed to agent 'billing'"), "{name}: {}", e.message);
        // … and the same team finishes it (billing unchanged: no drift).
        let a = team(&env, &calls, &counters, 13, error.clone());
        let r = block_on(a.resume("chat", SendOptions::default())).unwrap().unwrap();
        assert_eq!((r.status, r.text.as_str()), (RunStatus::Finished, "lead: all settled"), "{name}");
    }
}

#[test]
fn a_team_is_checked_when_it_is_built() {
    let env = Env::new();
    let member = || builder(&env, MockModel::new(vec![]), 2);
    let refused = |b: AgentBuilder| match b.build() {
        Ok(_) => panic!("built"),
        Err(e) => {
            assert_eq!(e.code, ErrorCode::ConfigInvalid);
            e.message
        }
    };
    let lead = || builder(&env, MockModel::new(vec![]), 1);
    let m = refused(lead().handoff("a", "x", member()).handoff("a", "y", member()));
    assert!(m.contains("two agents of the handoff team are named 'a'"), "{m}");
    let m = refused(lead().handoff("lead", "x", member()));
    assert!(m.contains("named 'lead'"), "{m}");
    let m = refused(lead().handoff("a", "x", member().handoff("b", "y", member())));
    assert!(m.contains("declares handoffs of its own"), "{m}");
    let m = refused(lead().tool_rc(counting_tool("transfer_to_a", &Counters::default())).handoff("a", "x", member()));
    assert!(m.contains("two tools are named 'transfer_to_a'"), "{m}");
}
