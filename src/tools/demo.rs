//! Offline demo tools for the README tour, and the scripted model that drives them.
//!
//! The tools' effects are counted in a [`KvBackend`], so the counts survive the Worker "process" dying and
//! show that a recorded call never runs twice:
//! * `charge {"order": 7}` increments `demo/charges` and answers `charged order 7 (charge #<n>)`.
//! * `ship {"order": 7}` fails like a dying process on its first execution in a run: it writes
//!   `demo/ship-attempted/<run_id>` and returns a propagating error, so the attempt is rejected and the run
//!   stays resumable; later executions increment `demo/shipments`. Resuming (or the recovery sweep) finishes
//!   the run without charging again.
//! * `refund {"order": 7}` always needs a person's approval; it increments `demo/refunds`.
//! * `wait_for_event {"deadlineSeconds"?: n}` waits for an event (a webhook): the run pauses on an event wait
//!   whose token `POST /events/{token}` delivers to; the payload is the call's result, or after `n` seconds a
//!   `timeout` error result.
//!
//! [`demo_script`] is the offline default model's script (for [`MockModel::by_turn`]): charge, then ship,
//! then "Order 7 charged and shipped.". A message containing the word "refund" is answered by a
//! `refund {"order": 7}` call first, which pauses the run on an approval; once approved the model says
//! "Refund issued.". A message containing the word "webhook" is answered by `wait_for_event
//! {"deadlineSeconds": 86400}`; then the model says "Webhook: <the call's result>" (the payload, or
//! the deadline's `timeout` error).
//!
//! [`MockModel::by_turn`]: crate::runtime::MockModel::by_turn

use crate::core::error::Result;
use crate::core::transcript::Message;
use crate::core::wait::WaitRequest;
use crate::core::wire::json_text;
use crate::runtime::mock::MockTurn;
use crate::runtime::tools::FnTool;
use crate::runtime::traits::{ModelRequest, Tool, ToolError, ToolOutput};
use crate::store::kv::{KvBackend, PutOptions};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::rc::Rc;

/// KV key counting charges.
pub const CHARGES_KEY: &str = "demo/charges";
/// KV key counting shipments.
pub const SHIPMENTS_KEY: &str = "demo/shipments";
/// KV key counting refunds.
pub const REFUNDS_KEY: &str = "demo/refunds";
/// Prefix of the per-run "ship was attempted" markers.
pub const SHIP_ATTEMPTED_PREFIX: &str = "demo/ship-attempted/";
/// The message of `ship`'s simulated process death.
pub const SHIP_DEATH_MESSAGE: &str = "the worker process died while shipping (demo)";

/// Names of the demo tools.
pub const DEMO_TOOL_NAMES: &[&str] = &["charge", "ship", "refund", "wait_for_event"];

fn parse_count(v: Option<&str>) -> u64 {
    v.and_then(|s| s.trim().parse::<u64>().ok()).unwrap_or(0)
}

/// Increments a counter (read-modify-write: fine for the demo, not a concurrent counter).
async fn incr<K: KvBackend>(kv: &K, key: &str) -> Result<u64> {
    let n = parse_count(kv.get(key).await?.as_deref()).saturating_add(1);
    kv.put(key, &n.to_string(), PutOptions::default()).await?;
    Ok(n)
}

fn order_of(args: &Value) -> String {
    match &args["order"] {
        Value::String(s) => s.clone(),
        Value::Null => "?".into(),
        other => json_text(other),
    }
}

fn order_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"order": {"type": ["integer", "string"], "description": "Order number"}},
        "required": ["order"],
        "additionalProperties": false
    })
}

/// The demo tools `charge`, `ship` and `refund`, counting their effects in `kv`.
pub fn demo_tools<K: KvBackend + Clone + 'static>(kv: K) -> Vec<Rc<dyn Tool>> {
    let charge_kv = kv.clone();
    let charge =
        FnTool::new("charge", "Charges the customer for an order (demo).", order_schema(), move |args, _ctx| {
            let kv = charge_kv.clone();
            async move {
                let n = incr(&kv, CHARGES_KEY).await.map_err(ToolError::Propagate)?;
                Ok(ToolOutput::text(format!("charged order {} (charge #{n})", order_of(&args))))
            }
        });
    let ship_kv = kv.clone();
    let ship = FnTool::new(
        "ship",
        "Ships an order (demo: the first attempt in each run dies like a crashed process).",
        order_schema(),
        move |args, ctx| {
            let kv = ship_kv.clone();
            async move {
                let marker = format!("{SHIP_ATTEMPTED_PREFIX}{}", ctx.run_id);
                if kv.get(&marker).await.map_err(ToolError::Propagate)?.is_none() {
                    kv.put(&marker, "1", PutOptions::default()).await.map_err(ToolError::Propagate)?;
                    return Err(ToolError::propagate(SHIP_DEATH_MESSAGE));
                }
                let n = incr(&kv, SHIPMENTS_KEY).await.map_err(ToolError::Propagate)?;
                Ok(ToolOutput::text(format!("shipped order {} (shipment #{n})", order_of(&args))))
            }
        },
    );
    let refund_kv = kv;
    let refund = FnTool::new(
        "refund",
        "Refunds an order (demo; always needs a person's approval).",
        order_schema(),
        move |args, _ctx| {
            let kv = refund_kv.clone();
            async move {
                let n = incr(&kv, REFUNDS_KEY).await.map_err(ToolError::Propagate)?;
                Ok(ToolOutput::text(format!("refunded order {} (refund #{n})", order_of(&args))))
            }
        },
    )
    .needs_approval(true);
    vec![Rc::new(charge), Rc::new(ship), Rc::new(refund), Rc::new(wait_for_event())]
}

/// `wait_for_event {"deadlineSeconds"?: n}`: an event wait, with a deadline `n` seconds after the call when
/// given.
fn wait_for_event() -> FnTool {
    FnTool::new(
        "wait_for_event",
        "Waits for a webhook (demo).",
        // Ignored (`unwrap_or_default`): a constant schema that parses (the demo tests build it).
        serde_json::from_str(r#"{"type":"object","properties":{"deadlineSeconds":{"type":"integer","minimum":1}}}"#)
            .unwrap_or_default(),
        |args, ctx| async move {
            let deadline = args["deadlineSeconds"].as_u64().map(|s| ctx.now.saturating_add(s.saturating_mul(1_000)));
            Ok(ToolOutput::wait(WaitRequest::Event { deadline }))
        },
    )
}

/// The demo counters: `charges`, `shipments` and `refunds` (0 when never written).
pub async fn demo_counts<K: KvBackend>(kv: &K) -> Result<BTreeMap<String, u64>> {
    let keys = [CHARGES_KEY, SHIPMENTS_KEY, REFUNDS_KEY].map(String::from);
    let values = kv.get_many(&keys).await?;
    let names = ["charges", "shipments", "refunds"];
    // Inserted, not collected (a collect sorts with a ~3 KB instance of the standard sort).
    let mut counts = BTreeMap::new();
    counts.extend(
        names.iter().enumerate().map(|(i, n)| (n.to_string(), parse_count(values.get(i).and_then(|v| v.as_deref())))),
    );
    Ok(counts)
}

/// The text of the last user message.
fn last_user_text<'a>(req: &ModelRequest<'a>) -> &'a str {
    req.messages
        .iter()
        .rev()
        .find_map(|m| match m {
            Message::User { content } => Some(content.as_str()),
            _ => None,
        })
        .unwrap_or("")
}

/// The last user message in lower case, as far as "refund" and "webhook" can tell: ASCII lowercasing plus the
/// one other character whose lowercase is one of their letters (U+212A KELVIN SIGN is 'k'), so it finds them
/// exactly where `str::to_lowercase` would, without pulling Unicode's case tables into the Worker.
fn lowered_user_text(req: &ModelRequest<'_>) -> String {
    last_user_text(req).to_ascii_lowercase().replace('\u{212A}', "k")
}

fn wants_refund(req: &ModelRequest<'_>) -> bool {
    lowered_user_text(req).contains("refund")
}

/// The offline default model's script for the tour (use it with `MockModel::by_turn`):
/// * turn 0 — `refund {"order": 7}` when the last user message contains "refund", else `charge {"order": 7}`;
/// * turn 1 — in the refund flow "Refund issued." (or "The refund was not issued." when the call was
///   rejected), else `ship {"order": 7}`;
/// * turn 2 — "Order 7 charged and shipped.".
///
/// A last user message containing "webhook" is answered by `wait_for_event
/// {"deadlineSeconds": 86400}` on turn 0 and, on turn 1, "Webhook: <the call's result>" (the payload, or the
/// deadline's `timeout` error).
pub fn demo_script() -> Vec<MockTurn> {
    vec![
        MockTurn::func(|req| {
            if lowered_user_text(req).contains("webhook") {
                MockTurn::tools([("wait_for_event", json!({"deadlineSeconds": 86_400}))])
            } else if wants_refund(req) {
                MockTurn::tools([("refund", json!({"order": 7}))])
            } else {
                MockTurn::tools([("charge", json!({"order": 7}))])
            }
        }),
        MockTurn::func(|req| match req.messages.last() {
            Some(Message::Tool(r)) if r.name == "wait_for_event" => MockTurn::text(format!("Webhook: {}", r.content)),
            _ if wants_refund(req) => {
                let rejected = matches!(req.messages.last(), Some(Message::Tool(r)) if r.is_error);
                MockTurn::text(if rejected { "The refund was not issued." } else { "Refund issued." })
            }
            _ => MockTurn::tools([("ship", json!({"order": 7}))]),
        }),
        MockTurn::text("Order 7 charged and shipped."),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::checkpoint::RunStatus;
    use crate::core::error::ErrorCode;
    use crate::core::machine::ModelResponse;
    use crate::core::transcript::{ResultKind, ToolCall, ToolResult};
    use crate::runtime::traits::{AbortSignal, Model, ToolContext};
    use crate::runtime::{Agent, MockModel, Resolve, SendOptions};
    use crate::store::{MemoryKv, MemoryStore};
    use futures::executor::block_on;

    fn ctx(run: &str, call: &str) -> ToolContext {
        ToolContext {
            run_id: run.into(),
            tool_call_id: call.into(),
            call_key: crate::core::idempotency::call_key(run, call),
            approval_id: None,
            abort: AbortSignal::new(),
            wait_token: String::new(),
            now: 0,
            traceparent: None,
        }
    }

    fn tool(tools: &[Rc<dyn Tool>], name: &str) -> Rc<dyn Tool> {
        tools.iter().find(|t| t.name() == name).cloned().expect("tool exists")
    }

    fn counts(kv: &MemoryKv) -> (u64, u64, u64) {
        let c = block_on(demo_counts(kv)).unwrap();
        (c["charges"], c["shipments"], c["refunds"])
    }

    #[test]
    fn charge_counts_in_kv() {
        let kv = MemoryKv::new();
        let tools = demo_tools(kv.clone());
        assert_eq!(tools.iter().map(|t| t.name()).collect::<Vec<_>>(), DEMO_TOOL_NAMES);
        let charge = tool(&tools, "charge");
        assert!(!charge.needs_approval(&json!({"order": 7})));
        let out = block_on(charge.execute(json!({"order": 7}), ctx("r1", "c1"))).unwrap();
        assert_eq!(out.content, "charged order 7 (charge #1)");
        let out = block_on(charge.execute(json!({"order": "A-9"}), ctx("r1", "c2"))).unwrap();
        assert_eq!(out.content, "charged order A-9 (charge #2)");
        assert_eq!(counts(&kv), (2, 0, 0));
        // A fresh set of tools on the same KV (a new "process") continues the count.
        let again = tool(&demo_tools(kv.clone()), "charge");
        block_on(again.execute(json!({"order": 8}), ctx("r2", "c1"))).unwrap();
        assert_eq!(counts(&kv), (3, 0, 0));
    }

    #[test]
    fn ship_dies_once_per_run_then_succeeds() {
        let kv = MemoryKv::new();
        let ship = tool(&demo_tools(kv.clone()), "ship");
        match block_on(ship.execute(json!({"order": 7}), ctx("r1", "c1"))) {
            Err(ToolError::Propagate(e)) => {
                assert_eq!(e.code, ErrorCode::ToolPropagated);
                assert!(e.retryable);
                assert_eq!(e.message, SHIP_DEATH_MESSAGE);
            }
            other => panic!("expected a propagated failure, got {other:?}"),
        }
        assert_eq!(block_on(kv.get("demo/ship-attempted/r1")).unwrap().as_deref(), Some("1"));
        assert_eq!(counts(&kv), (0, 0, 0));
        let out = block_on(ship.execute(json!({"order": 7}), ctx("r1", "c1"))).unwrap();
        assert_eq!(out.content, "shipped order 7 (shipment #1)");
        // Another run dies once too.
        assert!(block_on(ship.execute(json!({"order": 8}), ctx("r2", "c1"))).is_err());
        assert!(block_on(ship.execute(json!({"order": 8}), ctx("r2", "c1"))).is_ok());
        assert_eq!(counts(&kv), (0, 2, 0));
    }

    #[test]
    fn refund_needs_approval_and_counts() {
        let kv = MemoryKv::new();
        let refund = tool(&demo_tools(kv.clone()), "refund");
        assert!(refund.needs_approval(&json!({"order": 7})));
        let out = block_on(refund.execute(json!({"order": 7}), ctx("r1", "c1"))).unwrap();
        assert_eq!(out.content, "refunded order 7 (refund #1)");
        assert_eq!(counts(&kv), (0, 0, 1));
    }

    fn ask(model: &MockModel, messages: &[Message]) -> ModelResponse {
        block_on(model.generate(ModelRequest {
            run_id: "r1",
            messages,
            tools: &[],
            step: 1,
            execution: "e",
            traceparent: None,
        }))
        .unwrap()
    }

    fn call(name: &str) -> ToolCall {
        ToolCall { id: "call_x".into(), name: name.into(), args: json!({"order": 7}), invalid: None }
    }

    fn tool_result(name: &str, is_error: bool) -> Message {
        Message::Tool(ToolResult {
            tool_call_id: "call_x".into(),
            name: name.into(),
            content: if is_error { "rejected".into() } else { "ok".into() },
            is_error,
            kind: if is_error { ResultKind::Rejected } else { ResultKind::Execution },
            usage: None,
        })
    }

    #[test]
    fn demo_script_turns() {
        let script = demo_script();
        assert_eq!(script.len(), 3);
        let model = MockModel::by_turn(script);
        let user = Message::user("Please process order 7");
        let r = ask(&model, std::slice::from_ref(&user));
        assert_eq!(
            r.tool_calls.iter().map(|c| (c.name.as_str(), c.args.clone())).collect::<Vec<_>>(),
            [("charge", json!({"order": 7}))]
        );
        let msgs = [user.clone(), Message::assistant("", vec![call("charge")]), tool_result("charge", false)];
        let r = ask(&model, &msgs);
        assert_eq!(r.tool_calls[0].name, "ship");
        assert_eq!(r.tool_calls[0].args, json!({"order": 7}));
        let msgs = [
            user,
            Message::assistant("", vec![call("charge")]),
            tool_result("charge", false),
            Message::assistant("", vec![call("ship")]),
            tool_result("ship", false),
        ];
        let r = ask(&model, &msgs);
        assert!(r.tool_calls.is_empty());
        assert_eq!(r.text, "Order 7 charged and shipped.");

        let user = Message::user("I want a REFUND for order 7");
        let r = ask(&model, std::slice::from_ref(&user));
        assert_eq!(r.tool_calls[0].name, "refund");
        let r =
            ask(&model, &[user.clone(), Message::assistant("", vec![call("refund")]), tool_result("refund", false)]);
        assert_eq!((r.text.as_str(), r.tool_calls.len()), ("Refund issued.", 0));
        let r = ask(&model, &[user, Message::assistant("", vec![call("refund")]), tool_result("refund", true)]);
        assert_eq!(r.text, "The refund was not issued.");
    }

    fn agent(kv: &MemoryKv, store: &MemoryStore) -> Agent {
        let mut b = Agent::builder(MockModel::by_turn(demo_script())).store(store.clone());
        for t in demo_tools(kv.clone()) {
            b = b.tool_rc(t);
        }
        b.build().unwrap()
    }

    #[test]
    fn tour_ship_dies_and_resume_finishes_without_charging_twice() {
        let kv = MemoryKv::new();
        let store = MemoryStore::new();
        let err = block_on(agent(&kv, &store).send("order-7", "Process order 7", SendOptions::default())).unwrap_err();
        assert_eq!(err.code, ErrorCode::ToolPropagated);
        assert_eq!(counts(&kv), (1, 0, 0));
        // A new "process": fresh agent and tools, same store and KV.
        let res = block_on(agent(&kv, &store).resume("order-7", SendOptions::default())).unwrap().unwrap();
        assert_eq!(res.status, RunStatus::Finished);
        assert_eq!(res.text, "Order 7 charged and shipped.");
        assert_eq!(counts(&kv), (1, 1, 0));
    }

    #[test]
    fn tour_refund_waits_for_approval() {
        let kv = MemoryKv::new();
        let store = MemoryStore::new();
        let a = agent(&kv, &store);
        let res = block_on(a.send("refund-7", "Refund order 7", SendOptions::default())).unwrap();
        assert_eq!(res.status, RunStatus::AwaitingApproval);
        assert_eq!(counts(&kv), (0, 0, 0));
        let id = res.approval_id.unwrap();
        let res = block_on(a.approvals().resolve(Resolve { id, approved: true, note: None, answer: None })).unwrap();
        assert_eq!(res.status, RunStatus::Finished);
        assert_eq!(res.text, "Refund issued.");
        assert_eq!(counts(&kv), (0, 0, 1));
    }

    #[test]
    fn tour_webhook_waits_for_an_event_and_its_delivery_finishes_the_run_once() {
        let kv = MemoryKv::new();
        let store = MemoryStore::new();
        let a = agent(&kv, &store);
        let res = block_on(a.send("hook-7", "Wait for the payment webhook", SendOptions::default())).unwrap();
        assert_eq!(res.status, RunStatus::AwaitingApproval);
        let wait = &res.waits[0];
        assert_eq!((wait.kind, wait.tool_name.as_str()), (crate::core::wait::WaitKind::Event, "wait_for_event"));
        let saved = block_on(a.load("hook-7")).unwrap().unwrap().saved_at;
        let due = wait.due_at.expect("a deadline a day on");
        assert!(due >= saved + 86_400_000 - 60_000 && due <= saved + 86_400_000 + 60_000, "{due} vs {saved}");
        let token = wait.token.clone().unwrap();
        let done = block_on(a.events().deliver(&token, json!({"paid": true}))).unwrap();
        assert_eq!((done.run.status, done.run.text.as_str()), (RunStatus::Finished, r#"Webhook: {"paid":true}"#));
        let again = block_on(a.events().deliver(&token, json!({"paid": true}))).unwrap_err();
        assert_eq!(again.code, ErrorCode::WaitNotFound, "spent with the pause");
        assert_eq!(counts(&kv), (0, 0, 0), "no other demo tool ran");
    }

    #[test]
    fn wait_for_event_waits_until_its_deadline_or_for_ever() {
        let t = tool(&demo_tools(MemoryKv::new()), "wait_for_event");
        let at = |args: Value| {
            let c = ToolContext { now: 1_000_000, ..ctx("r", "c") };
            block_on(t.execute(args, c)).unwrap().wait
        };
        assert_eq!(at(json!({"deadlineSeconds": 30})), Some(WaitRequest::Event { deadline: Some(1_030_000) }));
        assert_eq!(at(json!({})), Some(WaitRequest::Event { deadline: None }));
        let schema = t.input_schema();
        assert_eq!(schema["properties"]["deadlineSeconds"]["minimum"], json!(1), "{schema}");
    }
}
