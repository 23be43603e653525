//! Messages to a running run (steering, issue 29 part 4) through the runtime, on every store (memory, the
//! journal store on the KV simulator, strict mode's run objects): a send with `queue: true` while another
//! execution holds the run is recorded and applied by that execution at its next step boundary, once; an
//! `interrupt` message stops the calls that have not started (`not-run` results naming it); a message for a run
//! paused on an approval is applied by the resumption; a message nobody read is taken up by the sweep; a message
//! queued for a deleted run never reaches a new run of the same id; a drain refused for good leaves the due index
//! (the message waits for the run's next execution); steering off refuses `queue`.

mod common;

use async_trait::async_trait;
use common::*;
use serde_json::json;
use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use steadfast::core::checkpoint::RunStatus;
use steadfast::core::machine::ModelResponse;
use steadfast::core::steer::DUE_AFTER_MS;
use steadfast::core::sweep::SweepOptions;
use steadfast::core::transcript::{Message, ResultKind};
use steadfast::runtime::{
    Agent, AgentOptions, Clock, FnTool, MockModel, MockTurn, Model, ModelRequest, NoListener, Resolve, RunResult,
    SendOptions, Tool, ToolOutput,
};
use steadfast::{ErrorCode, Event};

type Hook = Box<dyn FnOnce() -> Pin<Box<dyn Future<Output = ()>>>>;

/// A scripted model that runs `hook` (once) before answering its `at`-th call (from 0): "someone sends a
/// message while the model thinks".
struct Interrupted {
    inner: MockModel,
    calls: RefCell<usize>,
    at: usize,
    hook: RefCell<Option<Hook>>,
}

#[async_trait(?Send)]
impl Model for Interrupted {
    fn id(&self) -> &str {
        "interrupted"
    }
    async fn generate(&self, request: ModelRequest<'_>) -> steadfast::Result<ModelResponse> {
        let n = {
            let mut c = self.calls.borrow_mut();
            *c += 1;
            *c - 1
        };
        if n == self.at {
            let hook = self.hook.borrow_mut().take();
            if let Some(h) = hook {
                h().await;
            }
        }
        self.inner.generate(request).await
    }
}

/// Reads the queue at every boundary (the default reads at most once a second; the clock here stands still).
fn every_boundary() -> AgentOptions {
    AgentOptions { steer_poll_ms: Some(0), ..Default::default() }
}

fn queued(interrupt: bool) -> SendOptions {
    SendOptions { queue: true, interrupt, ..Default::default() }
}

/// The user messages of a transcript, in order.
fn user_texts(messages: &[Message]) -> Vec<String> {
    messages
        .iter()
        .filter_map(|m| match m {
            Message::User { content } => Some(content.clone()),
            _ => None,
        })
        .collect()
}

/// A model that calls `tool` once, then answers with the last user message it saw.
fn call_then_echo(tool: &str) -> MockModel {
    MockModel::by_turn(vec![MockTurn::tools([(tool, json!({}))]), echo(), echo(), echo()])
}

fn echo() -> MockTurn {
    MockTurn::func(|req| {
        let last = user_texts(req.messages).pop().unwrap_or_default();
        MockTurn::text(format!("heard: {last}"))
    })
}

/// Another process's agent over the same store (it has no tools: it never runs this run).
fn other(env: &Env) -> Rc<Agent> {
    Rc::new(env.agent_with(MockModel::by_turn(vec![MockTurn::text("-")]), vec![], every_boundary(), ""))
}

/// The run's queue and due index are empty.
fn assert_clean(env: &Env, run_id: &str, name: &str) {
    assert!(block_on(env.store.list_queued(run_id)).unwrap().is_empty(), "{name}: the queue is empty");
    assert!(block_on(env.store.list_due(u64::MAX, 100)).unwrap().is_empty(), "{name}: no due entry is left");
}

#[test]
fn a_message_sent_while_a_tool_runs_is_applied_once_at_the_next_boundary_by_the_execution_that_holds_the_run() {
    for (name, make) in stores() {
        let env = make();
        // Another process with the same agent (every replica has the same tools).
        let other: Rc<RefCell<Option<Rc<Agent>>>> = Rc::default();
        let replies: Rc<RefCell<Vec<RunResult>>> = Rc::default();
        let (other2, replies2) = (other.clone(), replies.clone());
        let tool: Rc<dyn Tool> =
            Rc::new(FnTool::new("lookup", "looks something up", json!({"type": "object"}), move |_a, _ctx| {
                let (b, replies) = (other2.borrow().clone(), replies2.clone());
                async move {
                    // While this tool runs, another process sends a message to the run.
                    if let Some(b) = b {
                        let r = b.send("r1", "use the EU warehouse", queued(false)).await.expect("queued");
                        replies.borrow_mut().push(r);
                    }
                    Ok(ToolOutput::text("found 3"))
                }
            }));
        let a = env.agent_with(call_then_echo("lookup"), vec![tool.clone()], every_boundary(), "");
        *other.borrow_mut() = Some(Rc::new(env.agent_with(call_then_echo("lookup"), vec![tool], every_boundary(), "")));
        let (opts, sink) = listening();
        let done = block_on(a.send("r1", "ship order 9", opts)).unwrap();

        let reply = replies.borrow()[0].clone();
        let q = reply.queued.clone().expect("the reply names the queued message");
        assert!(!q.applied, "{name}: nothing ran in the sender");
        assert_eq!(reply.status, RunStatus::InProgress, "{name}: the stored run, as it was");
        assert_eq!(done.status, RunStatus::Finished, "{name}");
        assert_eq!(done.text, "heard: use the EU warehouse", "{name}: the model saw the message");
        assert_eq!(user_texts(&done.messages), ["ship order 9", "use the EU warehouse"], "{name}: once, in order");
        // The message follows the tool's result.
        let pos_result = done.messages.iter().position(|m| matches!(m, Message::Tool(_))).unwrap();
        let pos_msg = done
            .messages
            .iter()
            .position(|m| matches!(m, Message::User { content } if content == "use the EU warehouse"))
            .unwrap();
        assert!(pos_result < pos_msg, "{name}: after the result");
        let applied = sink.events().iter().filter(|e| matches!(e.event, Event::MessageApplied { .. })).count();
        assert_eq!(applied, 1, "{name}: one message.applied event");
        assert_eq!(block_on(a.load("r1")).unwrap().unwrap().steered, vec![q.message_id.clone()], "{name}");
        assert_clean(&env, "r1", name);
    }
}

#[test]
fn an_interrupting_message_stops_the_calls_that_have_not_started_and_the_model_sees_why() {
    for (name, make) in stores() {
        let env = make();
        let b = other(&env);
        let counters = Counters::default();
        let inner = MockModel::by_turn(vec![
            MockTurn::tools([("charge", json!({"n": 1})), ("charge", json!({"n": 2}))]),
            echo(),
            echo(),
        ]);
        let b2 = b.clone();
        let model = Interrupted {
            inner,
            calls: RefCell::new(0),
            at: 0,
            hook: RefCell::new(Some(Box::new(move || {
                Box::pin(async move {
                    let r = b2.send("r2", "stop, the customer cancelled", queued(true)).await.expect("queued");
                    assert!(!r.queued.unwrap().applied);
                })
            }))),
        };
        let a = env.agent_with(model, vec![counting_tool("charge", &counters)], every_boundary(), "");
        let done = block_on(a.send("r2", "charge twice", SendOptions::default())).unwrap();
        assert_eq!(counters.get("charge"), 0, "{name}: neither call ran");
        let results: Vec<_> = done
            .messages
            .iter()
            .filter_map(|m| match m {
                Message::Tool(r) => Some(r.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(results.len(), 2, "{name}");
        for r in &results {
            assert_eq!((r.kind, r.is_error), (ResultKind::NotRun, true), "{name}");
            assert!(
                r.content.contains("not-run") && r.content.contains("msg_"),
                "{name}: names the steer: {}",
                r.content
            );
        }
        assert_eq!(done.text, "heard: stop, the customer cancelled", "{name}");
        assert_clean(&env, "r2", name);
    }
}

#[test]
fn a_message_to_a_run_paused_on_an_approval_is_applied_by_the_resumption() {
    for (name, make) in stores() {
        let env = make();
        let counters = Counters::default();
        let a = env.agent_with(call_then_echo("deploy"), vec![gated_tool("deploy", &counters)], every_boundary(), "");
        let paused = block_on(a.send("r3", "deploy it", SendOptions::default())).unwrap();
        assert_eq!(paused.status, RunStatus::AwaitingApproval, "{name}");
        let b = other(&env);
        let r = block_on(b.send("r3", "and tell me when it is done", queued(false))).unwrap();
        assert_eq!(
            (r.status, r.queued.as_ref().map(|q| q.applied)),
            (RunStatus::AwaitingApproval, Some(false)),
            "{name}"
        );

        let done = block_on(a.approvals().resolve(Resolve {
            id: paused.approval_id.clone().unwrap(),
            approved: true,
            ..Default::default()
        }))
        .unwrap();
        assert_eq!(counters.get("deploy"), 1, "{name}");
        assert_eq!(done.text, "heard: and tell me when it is done", "{name}");
        assert_eq!(user_texts(&done.messages), ["deploy it", "and tell me when it is done"], "{name}");
        assert_clean(&env, "r3", name);
    }
}

#[test]
fn a_message_to_a_run_nobody_executes_is_applied_by_the_send_itself() {
    for (name, make) in stores() {
        let env = make();
        let a = env.agent_with(MockModel::by_turn(vec![echo(), echo()]), vec![], every_boundary(), "");
        block_on(a.send("r4", "hello", SendOptions::default())).unwrap();
        let done = block_on(a.send("r4", "one more thing", queued(false))).unwrap();
        assert_eq!(done.queued.as_ref().map(|q| q.applied), Some(true), "{name}");
        assert_eq!((done.status, done.text.as_str()), (RunStatus::Finished, "heard: one more thing"), "{name}");
        assert_clean(&env, "r4", name);
        // A queued send to a run that does not exist creates it.
        let created = block_on(a.send("r4-new", "start here", queued(false))).unwrap();
        assert_eq!((created.status, created.queued.is_none()), (RunStatus::Finished, true), "{name}");
    }
}

#[test]
fn a_message_no_execution_read_is_taken_up_by_the_sweep_when_it_comes_due() {
    for (name, make) in stores() {
        let env = make();
        let a = env.agent_with(MockModel::by_turn(vec![echo(), echo()]), vec![], every_boundary(), "");
        block_on(a.send("r5", "hello", SendOptions::default())).unwrap();
        // Another owner holds the run (an execution that then ends without reading its queue).
        let lease =
            block_on(env.store.acquire_lease("r5", "someone", env.clock.now_ms(), &Default::default())).unwrap();
        let r = block_on(a.send("r5", "are you there?", queued(false))).unwrap();
        assert_eq!(r.queued.as_ref().map(|q| q.applied), Some(false), "{name}: the run was held");
        block_on(env.store.release_lease(&lease)).unwrap();

        // Not due yet: the sweep leaves it.
        let sweep = SweepOptions::default();
        block_on(a.sweep(&sweep, &NoListener)).unwrap();
        assert_eq!(user_texts(&block_on(a.load("r5")).unwrap().unwrap().messages).len(), 1, "{name}");
        env.clock.advance(DUE_AFTER_MS + 1_000);
        block_on(a.sweep(&sweep, &NoListener)).unwrap();
        let cp = block_on(a.load("r5")).unwrap().unwrap();
        assert_eq!(user_texts(&cp.messages), ["hello", "are you there?"], "{name}: applied once");
        assert_eq!(cp.last_text(), "heard: are you there?", "{name}");
        assert_clean(&env, "r5", name);
        // Another tick changes nothing.
        block_on(a.sweep(&sweep, &NoListener)).unwrap();
        assert_eq!(block_on(a.load("r5")).unwrap().unwrap().seq, cp.seq, "{name}");
    }
}

#[test]
fn a_message_queued_for_a_deleted_run_never_reaches_a_new_run_of_the_same_id() {
    for (name, make) in stores() {
        let env = make();
        let a = env.agent_with(MockModel::by_turn(vec![echo(), echo(), echo()]), vec![], every_boundary(), "");
        block_on(a.send("r6", "first life", SendOptions::default())).unwrap();
        let lease =
            block_on(env.store.acquire_lease("r6", "someone", env.clock.now_ms(), &Default::default())).unwrap();
        block_on(a.send("r6", "for the first life only", queued(false))).unwrap();
        block_on(env.store.release_lease(&lease)).unwrap();
        block_on(a.delete("r6")).unwrap();
        let second = block_on(a.send("r6", "second life", SendOptions::default())).unwrap();
        assert_eq!(user_texts(&second.messages), ["second life"], "{name}");
        assert!(block_on(env.store.list_queued("r6")).unwrap().is_empty(), "{name}: the stale entry was dropped");
        env.clock.advance(DUE_AFTER_MS + 1_000);
        block_on(a.sweep(&SweepOptions::default(), &NoListener)).unwrap();
        assert_eq!(user_texts(&block_on(a.load("r6")).unwrap().unwrap().messages), ["second life"], "{name}");
        assert_clean(&env, "r6", name);
    }
}

#[test]
fn queue_is_refused_with_a_code_when_steering_is_off_or_the_message_is_too_large() {
    for (name, make) in stores() {
        let env = make();
        let off = AgentOptions { steer_poll_ms: None, ..Default::default() };
        let a = env.agent_with(MockModel::by_turn(vec![echo(), echo()]), vec![], off, "");
        block_on(a.send("r7", "hello", SendOptions::default())).unwrap();
        let err = block_on(a.send("r7", "again", queued(false))).unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidInput, "{name}: {err}");
        let on = env.agent_with(MockModel::by_turn(vec![echo(), echo()]), vec![], every_boundary(), "");
        let big = "x".repeat(steadfast::core::wait::MAX_PAYLOAD_BYTES);
        let err = block_on(on.send("r7", big.as_str(), queued(false))).unwrap_err();
        assert_eq!(err.code, ErrorCode::PayloadTooLarge, "{name}");
        assert_clean(&env, "r7", name);
        assert_eq!(user_texts(&block_on(a.load("r7")).unwrap().unwrap().messages), ["hello"], "{name}");
    }
}

#[test]
fn a_message_whose_drain_is_refused_for_good_leaves_the_due_index_and_waits_for_the_runs_next_execution() {
    for (name, make) in stores() {
        let env = make();
        let a = env.agent_with(MockModel::by_turn(vec![echo(), echo(), echo()]), vec![], every_boundary(), "");
        block_on(a.send("r7", "hello", SendOptions::default())).unwrap();
        let lease =
            block_on(env.store.acquire_lease("r7", "someone", env.clock.now_ms(), &Default::default())).unwrap();
        block_on(a.send("r7", "still there?", queued(false))).unwrap();
        block_on(env.store.release_lease(&lease)).unwrap();

        // The sweep's agent has steering off (an operator turned it off while messages were queued): it
        // refuses to drain.
        let off = AgentOptions { steer_poll_ms: None, ..Default::default() };
        let drifted = env.agent_with(MockModel::by_turn(vec![echo(), echo()]), vec![], off, "");
        env.clock.advance(DUE_AFTER_MS + 1_000);
        let sweep = SweepOptions::default();
        let first = block_on(drifted.sweep(&sweep, &NoListener)).unwrap();
        assert_eq!(first.errors, 1, "{name}: the refusal is reported");
        assert!(block_on(env.store.list_due(u64::MAX, 100)).unwrap().is_empty(), "{name}: its due entry went");
        assert_eq!(block_on(env.store.list_queued("r7")).unwrap().len(), 1, "{name}: the message stays queued");
        // The next tick does not try again.
        let second = block_on(drifted.sweep(&sweep, &NoListener)).unwrap();
        assert_eq!(second.errors, 0, "{name}: not retried every tick");

        // The run's next execution applies it at its first boundary (after the new input, before the model).
        let r = block_on(a.send("r7", "and now?", SendOptions::default())).unwrap();
        assert_eq!(user_texts(&r.messages), ["hello", "and now?", "still there?"], "{name}: applied once");
        assert_eq!(block_on(a.load("r7")).unwrap().unwrap().last_text(), "heard: still there?", "{name}");
        assert_clean(&env, "r7", name);
    }
}
