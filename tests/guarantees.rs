//! Regression tests for guarantees that once broke (each named after the behaviour it pins down).

mod common;

use common::*;
use serde_json::json;
use std::rc::Rc;
use steadfast::core::checkpoint::RunStatus;
use steadfast::core::transcript::{validate_transcript, Message, ResultKind};
use steadfast::runtime::{CrashPoint, FnTool, MockModel, MockTurn, Resolve, SendOptions, Tool, ToolOutput};

/// A side-effecting tool without `reconcile` that counts executions per call id.
fn side_effecting_tool(name: &str, c: &Counters) -> Rc<dyn Tool> {
    let (c, n) = (c.clone(), name.to_string());
    Rc::new(
        FnTool::new(name, "has side effects", object_schema(), move |_args, ctx| {
            let (c, n) = (c.clone(), n.clone());
            async move {
                c.seen(&n, &ctx);
                c.hit(&format!("call:{}", ctx.tool_call_id));
                Ok(ToolOutput::text(format!("{n} done")))
            }
        })
        .side_effecting(),
    )
}

fn results_by_name(messages: &[Message]) -> Vec<(String, ResultKind, String)> {
    messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(r) => Some((r.name.clone(), r.kind, r.content.clone())),
            _ => None,
        })
        .collect()
}

/// A turn mixes a side-effecting call (its intent recorded, no outcome yet) with a plain call and an
/// approval-gated call. After a crash at any point, the resume reconciles the side effect and then gates the
/// other calls exactly once: the plain call runs and gets its real result, the gated call pauses on an
/// approval. No valid call ever gets a fabricated `validation` result.
#[test]
fn resume_after_crash_runs_the_plain_call_beside_an_unreconciled_side_effect() {
    for env_kind in ["memory", "journal"] {
        for gated in [false, true] {
            let mut k = 1;
            loop {
                let env = if env_kind == "memory" { Env::new() } else { Env::journal_sim() };
                let c = Counters::default();
                let mut calls = vec![("charge", json!({"order": 7})), ("lookup", json!({"order": 7}))];
                if gated {
                    calls.push(("refund", json!({"order": 7})));
                }
                let script = || vec![MockTurn::tools(calls.clone()), MockTurn::text("done")];
                let tools = || {
                    let mut t = vec![side_effecting_tool("charge", &c), counting_tool("lookup", &c)];
                    if gated {
                        t.push(gated_tool("refund", &c));
                    }
                    t
                };
                let a = env.agent(MockModel::by_turn(script()), tools());
                let crash = SendOptions {
                    crash: Some(CrashPoint { after_effects: k, finish_in_flight: false }),
                    ..Default::default()
                };
                let first = block_on(a.send("mixed", "charge and look up order 7", crash));
                let Err(e) = first else { break };
                assert_eq!(e.code, steadfast::ErrorCode::Crashed);
                env.past_leases();
                let b = env.agent(MockModel::by_turn(script()), tools());
                let mut res = match block_on(b.load("mixed")).unwrap() {
                    None => block_on(b.send("mixed", "charge and look up order 7", SendOptions::default())).unwrap(),
                    Some(cp) if cp.status == RunStatus::AwaitingApproval => block_on(b.approvals().resolve(Resolve {
                        id: cp.approval_ids[0].clone(),
                        approved: true,
                        note: None,
                    }))
                    .unwrap(),
                    Some(cp) if cp.status == RunStatus::Finished => steadfast::runtime::recovery::stored_result(&cp),
                    Some(_) => block_on(b.resume("mixed", SendOptions::default())).unwrap().unwrap(),
                };
                if gated && res.status == RunStatus::AwaitingApproval {
                    let id = res.approval_id.clone().unwrap();
                    res = block_on(b.approvals().resolve(Resolve { id, approved: true, note: None })).unwrap();
                }
                let ctx = format!("{env_kind} gated={gated} crash after effect {k}");
                assert_eq!(res.status, RunStatus::Finished, "{ctx}");
                assert!(validate_transcript(&res.messages).is_ok(), "{ctx}");
                for (name, kind, content) in results_by_name(&res.messages) {
                    assert_eq!(kind, ResultKind::Execution, "{ctx}: {name} got {kind:?}: {content}");
                    assert!(content.starts_with(&format!("{name} done")), "{ctx}: {name} got {content}");
                }
                for (key, n) in c.0.borrow().iter().filter(|(k, _)| k.starts_with("call:")) {
                    assert!(*n <= 2, "{ctx}: {key} ran {n} times");
                }
                k += 1;
            }
            assert!(k > 8, "the scenario has several crash points ({k})");
        }
    }
}
