// Shared by tests/seed_examples.rs: included once per store backend.

/// Effects of a new run that asks for one tool, in order: 1 run.start, 2 commit (snapshot), 3 call model,
/// 4 step event, 5 gate, 6 commit (the tool-call turn), 7 tool.start event, 8 run tool.
const AFTER_TURN_COMMIT: usize = 6;
const AFTER_RUN_TOOL: usize = 8;

fn opts() -> SendOptions {
    SendOptions::default()
}

fn tool_results(messages: &[Message]) -> Vec<(String, ResultKind, String)> {
    messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(r) => Some((r.name.clone(), r.kind, r.content.clone())),
            _ => None,
        })
        .collect()
}

/// "Recovering automatically": charge then ship; ship dies the first time (a propagating error stands in for
/// the process dying); the run is listed as pending with lastError, a resume finishes it, the charge ran once.
#[test]
fn charge_and_ship_interrupted_then_resumed_charges_once() {
    let env = new_env();
    let counters = Counters::default();
    let ship_attempts = Rc::new(Cell::new(0));
    let a = ship_attempts.clone();
    let ship: Rc<dyn Tool> = Rc::new(FnTool::new("ship", "Ship the order", object_schema(), move |_args, _ctx| {
        let a = a.clone();
        async move {
            a.set(a.get() + 1);
            if a.get() == 1 {
                return Err(ToolError::propagate("process died"));
            }
            Ok(ToolOutput::text("shipped"))
        }
    }));
    let script = || {
        vec![
            MockTurn::tools([("charge", json!({}))]),
            MockTurn::tools([("ship", json!({}))]),
            MockTurn::text("Order charged and shipped."),
        ]
    };
    let model = MockModel::new(script());
    let agent = env.agent(model.clone(), vec![counting_tool("charge", &counters), ship.clone()]);
    let err = block_on(agent.send("order-7", "Charge and ship order 7", opts())).unwrap_err();
    assert_eq!(err.code, ErrorCode::ToolPropagated);
    assert!(err.retryable);

    let pending = block_on(agent.pending()).unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].run_id, "order-7");
    assert_eq!(pending[0].status, RunStatus::InProgress);
    assert_eq!(pending[0].attempts, 1);
    assert_eq!(pending[0].last_error.as_ref().unwrap().code, ErrorCode::ToolPropagated);

    // The "restarted process": a new agent and a model that continues from the third turn.
    let model2 = MockModel::by_turn(script());
    let agent2 = env.agent(model2.clone(), vec![counting_tool("charge", &counters), ship]);
    let done = block_on(agent2.resume("order-7", opts())).unwrap().expect("something to resume");
    assert_eq!(done.text, "Order charged and shipped.");
    assert_eq!(done.status, RunStatus::Finished);
    assert_eq!(counters.get("charge"), 1, "the completed charge step did not run again");
    assert_eq!(ship_attempts.get(), 2);
    assert_eq!(model2.call_count(), 1, "the recorded turns were not generated again");
    let cp = block_on(agent2.load("order-7")).unwrap().unwrap();
    assert_eq!(cp.last_error, None, "progress cleared lastError");
    assert_eq!(cp.attempts, 0);
    assert!(block_on(agent2.pending()).unwrap().is_empty());
    assert!(block_on(agent2.resume("order-7", opts())).unwrap().is_none(), "nothing left to resume");
}

/// "Approvals in the middle of a tool batch": two gated calls and a free one in one turn. The free call runs,
/// the run pauses once with one approval each; resolving the first leaves it paused; a second process resolves
/// the last one; the approved call runs once, the rejected one gets the note, then the model answers.
#[test]
fn approval_batch_resolved_from_a_second_process() {
    let env = new_env();
    let counters = Counters::default();
    let script = || {
        vec![
            MockTurn::tools([
                ("email", json!({"to": "alice"})),
                ("lookup", json!({"q": "team"})),
                ("email", json!({"to": "bob"})),
            ]),
            MockTurn::text("Emailed the team."),
        ]
    };
    let tools = |c: &Counters| vec![gated_tool("email", c), counting_tool("lookup", c)];
    let agent = env.agent(MockModel::by_turn(script()), tools(&counters));
    let paused = block_on(agent.send("chat-42", "Email the whole team", opts())).unwrap();
    assert_eq!(paused.status, RunStatus::AwaitingApproval);
    assert_eq!(paused.finish_reason, Some(FinishReason::AwaitingApproval));
    assert_eq!(paused.approval_ids.len(), 2);
    assert_eq!(counters.get("lookup"), 1, "the free call ran before the pause");
    assert_eq!(counters.get("email"), 0);

    let listed = block_on(agent.approvals().list()).unwrap();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0].tool_call.args, json!({"to": "alice"}));

    // First decision: still paused on the other one.
    let first = block_on(agent.approvals().resolve(Resolve {
        id: paused.approval_ids[0].clone(),
        approved: true,
        note: None, answer: None,
    }))
    .unwrap();
    assert_eq!(first.status, RunStatus::AwaitingApproval);
    assert_eq!(first.approval_ids, vec![paused.approval_ids[1].clone()]);
    assert_eq!(counters.get("email"), 0, "nothing runs before the last decision");

    // "Days later, in another process": a new agent over the same store.
    env.clock.advance(3 * 24 * 3600 * 1000);
    let model2 = MockModel::by_turn(script());
    let agent2 = env.agent(model2.clone(), tools(&counters));
    let done = block_on(agent2.approvals().resolve(Resolve {
        id: paused.approval_ids[1].clone(),
        approved: false,
        note: Some("not bob".into()), answer: None,
    }))
    .unwrap();
    assert_eq!(done.status, RunStatus::Finished);
    assert_eq!(done.text, "Emailed the team.");
    assert_eq!(counters.get("email"), 1, "the approved call ran exactly once");
    let results = tool_results(&done.messages);
    assert_eq!(results.len(), 3);
    assert_eq!((results[0].0.as_str(), results[0].1), ("email", ResultKind::Execution));
    assert_eq!((results[1].0.as_str(), results[1].1), ("lookup", ResultKind::Execution));
    assert_eq!((results[2].0.as_str(), results[2].1), ("email", ResultKind::Rejected));
    assert!(results[2].2.contains("not bob"), "the reviewer's note reaches the model: {}", results[2].2);
    assert!(validate_transcript(&done.messages).is_ok());
    assert_eq!(model2.call_count(), 1);
    assert!(block_on(agent2.approvals().list()).unwrap().is_empty(), "decided approvals are cleared");
    // The approved call got its approval id as an idempotency key.
    let keys = counters.keys();
    let email = keys.iter().find(|(t, _, _)| t == "email").unwrap();
    assert_eq!(email.2.as_deref(), Some(paused.approval_ids[0].as_str()));
}

/// Sending while awaiting approval is refused before any model or tool call, with both ids.
#[test]
fn sending_while_awaiting_approval_is_refused() {
    let env = new_env();
    let counters = Counters::default();
    let model = MockModel::new(vec![MockTurn::tools([("pay", json!({}))]), MockTurn::text("never")]);
    let agent = env.agent(model.clone(), vec![gated_tool("pay", &counters)]);
    let paused = block_on(agent.send("chat-42", "Pay the bill", opts())).unwrap();
    let before = block_on(agent.load("chat-42")).unwrap();
    let err = block_on(agent.send("chat-42", "Are you done?", opts())).unwrap_err();
    assert_eq!(err.code, ErrorCode::SessionAwaitingApproval);
    assert_eq!(err.run_id.as_deref(), Some("chat-42"));
    assert_eq!(err.approval_id, paused.approval_id);
    let err = block_on(agent.resume("chat-42", opts())).unwrap_err();
    assert_eq!(err.code, ErrorCode::SessionAwaitingApproval);
    assert_eq!(model.call_count(), 1);
    assert_eq!(counters.get("pay"), 0);
    assert_eq!(block_on(agent.load("chat-42")).unwrap(), before, "nothing was written");
}

/// A finished run continues as a conversation: history kept, steps and usage of the new run from zero.
#[test]
fn finished_run_continues_as_a_conversation() {
    let env = new_env();
    let model = MockModel::new(vec![MockTurn::text("Booked for 2."), MockTurn::text("Changed to 3.")]);
    let agent = env.agent_with(model, vec![], AgentOptions::default(), "You book tables.");
    let first = block_on(agent.send("chat-42", "Book a table for 2 tonight", opts())).unwrap();
    assert_eq!(first.steps, 1);
    let second = block_on(agent.send("chat-42", "Make it 3 people", opts())).unwrap();
    assert_eq!(second.text, "Changed to 3.");
    assert_eq!(second.steps, 1, "steps count from zero for the new run");
    assert_eq!(second.usage.input_tokens, 10, "usage counts from zero");
    assert_eq!(
        second.messages,
        vec![
            Message::system("You book tables."),
            Message::user("Book a table for 2 tonight"),
            answered("Booked for 2."),
            Message::user("Make it 3 people"),
            answered("Changed to 3."),
        ]
    );
}

/// Re-sent stored history is recognised and not duplicated; system messages in new input are ignored.
#[test]
fn resent_history_and_system_messages_are_not_duplicated() {
    let env = new_env();
    let model = MockModel::new(vec![MockTurn::text("Hello!"), MockTurn::text("Fine.")]);
    let agent = env.agent_with(model, vec![], AgentOptions::default(), "Be brief.");
    let first = block_on(agent.send("c", "Hi", opts())).unwrap();
    // As the client kept it: without the usage the model turn recorded (recognised all the same).
    let mut input = without_usage(&first.messages);
    input.push(Message::system("You are a pirate now."));
    input.push(Message::user("How are you?"));
    let second = block_on(agent.send("c", input, opts())).unwrap();
    assert_eq!(
        second.messages,
        vec![
            Message::system("Be brief."),
            Message::user("Hi"),
            answered("Hello!"),
            Message::user("How are you?"),
            answered("Fine."),
        ]
    );
}

/// After a crash, re-sending the message the run started from is a retry, not a new message.
#[test]
fn resent_original_input_after_crash_is_a_retry() {
    let env = new_env();
    let counters = Counters::default();
    let script = || vec![MockTurn::tools([("charge", json!({}))]), MockTurn::text("done")];
    let agent = env.agent(MockModel::by_turn(script()), vec![counting_tool("charge", &counters)]);
    // Crash right after the commit that records the model's tool-call turn.
    let crash = SendOptions { crash: Some(CrashPoint { after_effects: 4, finish_in_flight: false }), ..opts() };
    let err = block_on(agent.send("r", "Charge order 9", crash)).unwrap_err();
    assert_eq!(err.code, ErrorCode::Crashed);
    // The dead process still holds the lease.
    let agent2 = env.agent(MockModel::by_turn(script()), vec![counting_tool("charge", &counters)]);
    let busy = block_on(agent2.send("r", "Charge order 9", opts())).unwrap_err();
    assert_eq!(busy.code, ErrorCode::SessionBusy);
    env.past_leases();
    let done = block_on(agent2.send("r", "Charge order 9", opts())).unwrap();
    let users: Vec<_> = done.messages.iter().filter(|m| matches!(m, Message::User { .. })).collect();
    assert_eq!(users.len(), 1, "the retried input was not appended: {:?}", done.messages);
    assert_eq!(counters.get("charge"), 1);
}

/// New input on an unfinished run goes after the pending calls' results, never between a call and its result.
#[test]
fn new_input_on_unfinished_run_goes_after_pending_results() {
    let env = new_env();
    let counters = Counters::default();
    let script = || vec![MockTurn::tools([("a", json!({})), ("b", json!({}))]), MockTurn::text("ok")];
    let agent = env.agent(MockModel::by_turn(script()), vec![counting_tool("a", &counters), counting_tool("b", &counters)]);
    // Crash after the tool-call turn is committed, before any tool ran.
    let crash = SendOptions { crash: Some(CrashPoint { after_effects: AFTER_TURN_COMMIT, finish_in_flight: false }), ..opts() };
    block_on(agent.send("r", "go", crash)).unwrap_err();
    env.past_leases();
    let agent2 = env.agent(MockModel::by_turn(script()), vec![counting_tool("a", &counters), counting_tool("b", &counters)]);
    let done = block_on(agent2.send("r", "also: hurry", opts())).unwrap();
    assert!(validate_transcript(&done.messages).is_ok());
    let roles: Vec<&str> = done
        .messages
        .iter()
        .map(|m| match m {
            Message::System { .. } => "system",
            Message::User { .. } => "user",
            Message::Assistant { .. } => "assistant",
            Message::Tool(_) => "tool",
        })
        .collect();
    assert_eq!(roles, vec!["user", "assistant", "tool", "tool", "user", "assistant"]);
    assert_eq!(done.messages[4], Message::user("also: hurry"));
}

/// Tool errors are data: the model reads `Type: message` as an is_error result and the run goes on.
#[test]
fn tool_errors_become_results_the_model_reads() {
    let env = new_env();
    let counters = Counters::default();
    let model = MockModel::new(vec![MockTurn::tools([("read", json!({"path": "sonfig.py"}))]), MockTurn::text("fixed it")]);
    let agent = env.agent(model.clone(), vec![failing_tool("read", &counters)]);
    let done = block_on(agent.send("r", "read the config", opts())).unwrap();
    assert_eq!(done.status, RunStatus::Finished);
    let Message::Tool(r) = &done.messages[2] else { panic!("expected a tool result") };
    assert!(r.is_error);
    assert_eq!(r.kind, ResultKind::Execution);
    assert_eq!(r.content, "FileNotFoundError: no such file: sonfig.py");
    assert_eq!(model.calls()[1].last_message, Some(done.messages[2].clone()), "the model saw the error");
}

/// Arguments are validated against the tool's JSON Schema; an unknown tool name is reported with the tools
/// the agent has. Neither runs a tool.
#[test]
fn invalid_arguments_and_unknown_tools_are_validation_results() {
    let env = new_env();
    let counters = Counters::default();
    let c = counters.clone();
    let weather: Rc<dyn Tool> = Rc::new(FnTool::new(
        "weather",
        "Forecast",
        json!({"type":"object","properties":{"city":{"type":"string"}},"required":["city"],"additionalProperties":false}),
        move |_a, _ctx| {
            let c = c.clone();
            async move {
                c.hit("weather");
                Ok(ToolOutput::text("sunny"))
            }
        },
    ));
    let model = MockModel::new(vec![
        MockTurn::tools([("weather", json!({"town": "Oslo"})), ("wether", json!({}))]),
        MockTurn::tools([("weather", json!({"city": "Oslo"}))]),
        MockTurn::text("Sunny in Oslo."),
    ]);
    let agent = env.agent(model, vec![weather]);
    let done = block_on(agent.send("r", "weather?", opts())).unwrap();
    let results = tool_results(&done.messages);
    assert_eq!(results[0].1, ResultKind::Validation);
    assert!(results[0].2.contains("missing required property \"city\""), "{}", results[0].2);
    assert_eq!(results[1].1, ResultKind::Validation);
    assert!(results[1].2.contains("unknown tool 'wether'") && results[1].2.contains("weather"), "{}", results[1].2);
    assert_eq!(results[2], ("weather".into(), ResultKind::Execution, "sunny".into()));
    assert_eq!(counters.get("weather"), 1);
}

/// Results are recorded in call order even when a later call finishes first (M1).
#[test]
fn results_recorded_in_call_order_when_later_call_finishes_first() {
    let env = new_env();
    let (tx, rx) = futures::channel::oneshot::channel::<()>();
    let rx = Rc::new(std::cell::RefCell::new(Some(rx)));
    let tx = Rc::new(std::cell::RefCell::new(Some(tx)));
    let order = Rc::new(std::cell::RefCell::new(Vec::new()));
    let (o1, o2) = (order.clone(), order.clone());
    let slow: Rc<dyn Tool> = Rc::new(FnTool::new("slow", "waits for fast", object_schema(), move |_a, _c| {
        let rx = rx.borrow_mut().take();
        let o1 = o1.clone();
        async move {
            if let Some(rx) = rx {
                let _ = rx.await;
            }
            o1.borrow_mut().push("slow");
            Ok(ToolOutput::text("slow result"))
        }
    }));
    let fast: Rc<dyn Tool> = Rc::new(FnTool::new("fast", "finishes first", object_schema(), move |_a, _c| {
        let tx = tx.borrow_mut().take();
        let o2 = o2.clone();
        async move {
            o2.borrow_mut().push("fast");
            if let Some(tx) = tx {
                let _ = tx.send(());
            }
            Ok(ToolOutput::text("fast result"))
        }
    }));
    let model = MockModel::new(vec![MockTurn::tools([("slow", json!({})), ("fast", json!({}))]), MockTurn::text("both")]);
    let agent = env.agent(model, vec![slow, fast]);
    let sink = VecSink::new();
    let done = block_on(agent.send("r", "go", SendOptions { events: Some(Rc::new(sink.clone())), ..opts() })).unwrap();
    assert_eq!(*order.borrow(), vec!["fast", "slow"], "fast finished first");
    let results = tool_results(&done.messages);
    assert_eq!(results[0].0, "slow");
    assert_eq!(results[1].0, "fast");
    // Events: gapless seq from 0, schema version 1, start and done.
    let events = sink.events();
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e.seq, i as u64);
        assert_eq!(e.v, 1);
    }
    assert!(matches!(events.first().unwrap().event, Event::RunStart { resumed: false, .. }));
    assert!(matches!(events.last().unwrap().event, Event::RunDone { status: RunStatus::Finished, .. }));
}

/// The model-call retry layer: transient errors are retried with backoff (Retry-After honoured), exactly
/// once per attempt at one layer; a 401 is not retried and is recorded as a non-retryable lastError.
#[test]
fn model_calls_are_retried_at_one_layer() {
    let env = new_env();
    let model = MockModel::new(vec![MockTurn::error_retry_after(429, 3_000), MockTurn::error(503), MockTurn::text("ok")]);
    let agent = env.agent(model.clone(), vec![]);
    let done = block_on(agent.send("r", "hi", opts())).unwrap();
    assert_eq!(done.text, "ok");
    assert_eq!(model.call_count(), 3, "each attempt is exactly one model call");
    assert_eq!(done.stats.model_calls, 3);
    let slept = env.sleep.slept();
    assert!(slept.contains(&3_000), "Retry-After was honoured: {slept:?}");

    let env = new_env();
    let model = MockModel::new(vec![MockTurn::error(401), MockTurn::text("never")]);
    let agent = env.agent(model.clone(), vec![]);
    let err = block_on(agent.send("r", "hi", opts())).unwrap_err();
    assert_eq!(err.code, ErrorCode::ProviderAuth);
    assert_eq!(model.call_count(), 1, "a bad key is not retried");
    let pending = block_on(agent.pending()).unwrap();
    assert_eq!(pending[0].attempts, 1);
    let last = pending[0].last_error.clone().unwrap();
    assert_eq!(last.code, ErrorCode::ProviderAuth);
    assert!(!last.retryable);

    // Attempts count failures in a row across executions.
    let env = new_env();
    let model = MockModel::new(vec![MockTurn::error(400), MockTurn::error(400), MockTurn::text("ok")]);
    let agent = env.agent(model, vec![]);
    block_on(agent.send("r", "hi", opts())).unwrap_err();
    block_on(agent.resume("r", opts())).unwrap_err();
    assert_eq!(block_on(agent.pending()).unwrap()[0].attempts, 2);
    block_on(agent.resume("r", opts())).unwrap().unwrap();
    assert!(block_on(agent.pending()).unwrap().is_empty());
}

/// maxSteps ends a run that keeps calling tools, gracefully, with the transcript intact.
#[test]
fn max_steps_ends_the_run_gracefully() {
    let env = new_env();
    let counters = Counters::default();
    let model = MockModel::new((0..5).map(|i| MockTurn::tools([("lookup", json!({"i": i}))])).collect());
    let options = AgentOptions { max_steps: 3, ..AgentOptions::default() };
    let agent = env.agent_with(model.clone(), vec![counting_tool("lookup", &counters)], options, "");
    let done = block_on(agent.send("r", "loop", opts())).unwrap();
    assert_eq!(done.status, RunStatus::Finished);
    assert_eq!(done.finish_reason, Some(FinishReason::MaxSteps));
    assert_eq!(done.steps, 3);
    assert_eq!(model.call_count(), 3);
    assert_eq!(counters.get("lookup"), 3, "the last turn's calls ran and were recorded");
    assert!(done.note.unwrap().contains("maxSteps"));
    assert!(validate_transcript(&done.messages).is_ok());
}

/// Loop detection stops a model that repeats the same failing call.
#[test]
fn loop_detection_stops_a_stuck_model() {
    let env = new_env();
    let counters = Counters::default();
    let model = MockModel::new((0..10).map(|_| MockTurn::tools([("read", json!({"path": "x"}))])).collect());
    let agent = env.agent(model.clone(), vec![failing_tool("read", &counters)]);
    let done = block_on(agent.send("r", "read x", opts())).unwrap();
    assert_eq!(done.finish_reason, Some(FinishReason::LoopDetected));
    assert_eq!(model.call_count(), 4);
    assert_eq!(counters.get("read"), 4);
}

/// Abort: unfinished calls get `cancelled` results, the checkpoint stays in-progress, and a new message
/// redirects the run.
#[test]
fn abort_records_cancelled_results_and_stays_resumable() {
    let env = new_env();
    let signal = AbortSignal::new();
    let s = signal.clone();
    let hang: Rc<dyn Tool> = Rc::new(FnTool::new("deploy", "long job", object_schema(), move |_a, ctx| {
        let s = s.clone();
        async move {
            s.abort();
            ctx.abort.aborted().await;
            Ok(ToolOutput::text("never recorded"))
        }
    }));
    let script = || vec![MockTurn::tools([("deploy", json!({}))]), MockTurn::text("Redirected.")];
    let agent = env.agent(MockModel::by_turn(script()), vec![hang.clone()]);
    let aborted = block_on(agent.send("r", "deploy", SendOptions { abort: Some(signal), ..opts() })).unwrap();
    assert_eq!(aborted.status, RunStatus::InProgress);
    assert_eq!(aborted.finish_reason, Some(FinishReason::Aborted));
    let results = tool_results(&aborted.messages);
    assert_eq!(results[0].1, ResultKind::Cancelled);
    let pending = block_on(agent.pending()).unwrap();
    assert_eq!(pending[0].status, RunStatus::InProgress);
    let done = block_on(agent.send("r", "stop, do something else", opts())).unwrap();
    assert_eq!(done.text, "Redirected.");
    assert!(validate_transcript(&done.messages).is_ok());
}

/// Drift on resume: warn emits agent.drift and continues; error refuses and leaves the checkpoint alone;
/// a pending call whose tool is gone always fails with RESUME_TOOL_MISSING.
#[test]
fn agent_drift_is_checked_before_anything_runs() {
    let env = new_env();
    let counters = Counters::default();
    let script = || vec![MockTurn::tools([("charge", json!({}))]), MockTurn::text("done")];
    let agent = env.agent(MockModel::by_turn(script()), vec![counting_tool("charge", &counters)]);
    let crash = SendOptions { crash: Some(CrashPoint { after_effects: AFTER_TURN_COMMIT, finish_in_flight: false }), ..opts() };
    block_on(agent.send("r", "charge", crash)).unwrap_err();
    env.past_leases();
    let before = block_on(agent.load("r")).unwrap();

    // A changed schema under `error`: refused, untouched.
    let changed: Rc<dyn Tool> = Rc::new(FnTool::new(
        "charge",
        "charge",
        json!({"type": "object", "properties": {"amount": {"type": "number"}}}),
        |_a, _c| async { Ok(ToolOutput::text("charged")) },
    ));
    let strict = AgentOptions { on_agent_drift: DriftPolicy::Error, ..AgentOptions::default() };
    let model = MockModel::by_turn(script());
    let a_err = env.agent_with(model.clone(), vec![changed.clone()], strict, "");
    let err = block_on(a_err.resume("r", opts())).unwrap_err();
    assert_eq!(err.code, ErrorCode::AgentDrift);
    assert_eq!(err.details.as_ref().unwrap()["toolsChanged"], json!(["charge"]));
    assert_eq!(model.call_count(), 0);
    let mut after = block_on(agent.load("r")).unwrap();
    assert_eq!(after, before, "checkpoint untouched");

    // The tool is gone: always RESUME_TOOL_MISSING.
    let ignore = AgentOptions { on_agent_drift: DriftPolicy::Ignore, ..AgentOptions::default() };
    let a_missing = env.agent_with(MockModel::by_turn(script()), vec![counting_tool("other", &counters)], ignore, "");
    let err = block_on(a_missing.resume("r", opts())).unwrap_err();
    assert_eq!(err.code, ErrorCode::ResumeToolMissing);

    // `warn` (default): event, then the run continues with the new agent.
    let sink = VecSink::new();
    let a_warn = env.agent(MockModel::by_turn(script()), vec![changed]);
    let done = block_on(a_warn.resume("r", SendOptions { events: Some(Rc::new(sink.clone())), ..opts() })).unwrap().unwrap();
    assert_eq!(done.status, RunStatus::Finished);
    let drift = sink.events().into_iter().find_map(|e| match e.event {
        Event::AgentDrift(d) => Some(d),
        _ => None,
    });
    assert_eq!(drift.expect("agent.drift emitted").tools_changed, vec!["charge"]);
    after = block_on(agent.load("r")).unwrap();
    assert_eq!(after.unwrap().fingerprint.as_ref(), Some(a_warn.fingerprint()), "new checkpoints carry the new fingerprint");
}

/// Drift `error` on an approval puts the approval back; the right agent can still resolve it.
#[test]
fn drift_error_on_resolve_puts_the_approval_back() {
    let env = new_env();
    let counters = Counters::default();
    let script = || vec![MockTurn::tools([("pay", json!({}))]), MockTurn::text("paid")];
    let agent = env.agent(MockModel::by_turn(script()), vec![gated_tool("pay", &counters)]);
    let paused = block_on(agent.send("r", "pay", opts())).unwrap();
    let strict = AgentOptions { on_agent_drift: DriftPolicy::Error, ..AgentOptions::default() };
    let other = env.agent_with(MockModel::by_turn(script()).with_id("other-model"), vec![gated_tool("pay", &counters)], strict, "");
    let id = paused.approval_id.clone().unwrap();
    let err = block_on(other.approvals().resolve(Resolve { id: id.clone(), approved: true, note: None, answer: None })).unwrap_err();
    assert_eq!(err.code, ErrorCode::AgentDrift);
    assert_eq!(counters.get("pay"), 0);
    let listed = block_on(agent.approvals().list()).unwrap();
    assert_eq!(listed.len(), 1, "the approval is still pending");
    let done = block_on(agent.approvals().resolve(Resolve { id, approved: true, note: None, answer: None })).unwrap();
    assert_eq!(done.text, "paid");
    assert_eq!(counters.get("pay"), 1);
}

/// A stale approval never comes back: its run was deleted (or replaced) → ORPHANED, withdrawn, nothing runs.
#[test]
fn stale_approvals_are_orphaned_and_withdrawn() {
    let env = new_env();
    let counters = Counters::default();
    let script = || vec![MockTurn::tools([("pay", json!({}))]), MockTurn::text("paid")];
    let agent = env.agent(MockModel::by_turn(script()), vec![gated_tool("pay", &counters)]);
    let old = block_on(agent.send("r", "pay", opts())).unwrap().approval_id.unwrap();
    block_on(agent.delete("r")).unwrap();
    let new = block_on(agent.send("r", "pay again", opts())).unwrap().approval_id.unwrap();
    assert_ne!(old, new);
    let err = block_on(agent.approvals().resolve(Resolve { id: old.clone(), approved: true, note: None, answer: None })).unwrap_err();
    assert_eq!(err.code, ErrorCode::ApprovalOrphaned);
    assert_eq!(counters.get("pay"), 0);
    let err = block_on(agent.approvals().resolve(Resolve { id: old, approved: true, note: None, answer: None })).unwrap_err();
    assert_eq!(err.code, ErrorCode::ApprovalNotFound, "withdrawn");
    let done = block_on(agent.approvals().resolve(Resolve { id: new, approved: true, note: None, answer: None })).unwrap();
    assert_eq!(done.status, RunStatus::Finished);
    assert_eq!(counters.get("pay"), 1);
}

/// An approved call runs at most once: a crash while it runs gives it an `interrupted` result on resume.
#[test]
fn approved_call_interrupted_by_a_crash_is_not_run_again() {
    let env = new_env();
    let counters = Counters::default();
    let script = || vec![MockTurn::tools([("wire", json!({"amount": 100}))]), MockTurn::text("Checked the wire.")];
    // The crash point counts effects: no queue reads (steering) among them.
    let no_steering = steadfast::runtime::AgentOptions { steer_poll_ms: None, ..Default::default() };
    let agent = env.agent_with(MockModel::by_turn(script()), vec![gated_tool("wire", &counters)], no_steering, "");
    let paused = block_on(agent.send("r", "wire 100", opts())).unwrap();
    // Resolve, and "die" while the approved call runs (it does take effect).
    let crash = SendOptions { crash: Some(CrashPoint { after_effects: 4, finish_in_flight: true }), ..opts() };
    let err = block_on(agent.approvals().resolve_with(
        Resolve { id: paused.approval_id.unwrap(), approved: true, note: None, answer: None },
        crash,
    ))
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::Crashed);
    assert_eq!(counters.get("wire"), 1);
    env.past_leases();
    let agent2 = env.agent(MockModel::by_turn(script()), vec![gated_tool("wire", &counters)]);
    let done = block_on(agent2.resume("r", opts())).unwrap().unwrap();
    assert_eq!(counters.get("wire"), 1, "not run again");
    let results = tool_results(&done.messages);
    assert_eq!(results[0].1, ResultKind::Interrupted);
    assert!(results[0].2.contains("may or may not have taken effect"));
    assert_eq!(done.text, "Checked the wire.");
}

/// A second execution on a run whose lease is live is BUSY before anything runs; bad ids are refused.
#[test]
fn busy_lease_and_invalid_ids_are_refused() {
    let env = new_env();
    let counters = Counters::default();
    let script = || vec![MockTurn::tools([("a", json!({}))]), MockTurn::text("done")];
    let agent = env.agent(MockModel::by_turn(script()), vec![counting_tool("a", &counters)]);
    let crash = SendOptions { crash: Some(CrashPoint { after_effects: 2, finish_in_flight: false }), ..opts() };
    block_on(agent.send("r", "go", crash)).unwrap_err();
    let model = MockModel::by_turn(script());
    let other = env.agent(model.clone(), vec![counting_tool("a", &counters)]);
    let err = block_on(other.resume("r", opts())).unwrap_err();
    assert_eq!(err.code, ErrorCode::SessionBusy);
    assert!(err.retryable);
    assert_eq!(model.call_count(), 0);
    assert_eq!(counters.get("a"), 0);
    for bad in ["", ".x", "a/b", "x.turn-2"] {
        let err = block_on(agent.send(bad, "hi", opts())).unwrap_err();
        assert_eq!(err.code, ErrorCode::SessionIdInvalid, "{bad:?}");
    }
}

/// Tools get the call id as an idempotency key, unchanged when the call runs again on resume (M18).
#[test]
fn tool_call_id_is_a_stable_idempotency_key_across_resume() {
    let env = new_env();
    let counters = Counters::default();
    let script = || vec![MockTurn::tools([("charge", json!({}))]), MockTurn::text("done")];
    let agent = env.agent(MockModel::by_turn(script()), vec![counting_tool("charge", &counters)]);
    // Die while the charge runs (it takes effect, the result is lost).
    let crash = SendOptions { crash: Some(CrashPoint { after_effects: AFTER_RUN_TOOL, finish_in_flight: true }), ..opts() };
    block_on(agent.send("r", "charge", crash)).unwrap_err();
    env.past_leases();
    let agent2 = env.agent(MockModel::by_turn(script()), vec![counting_tool("charge", &counters)]);
    block_on(agent2.resume("r", opts())).unwrap().unwrap();
    let keys = counters.keys();
    assert_eq!(keys.len(), 2, "an unrecorded call runs again on resume");
    assert_eq!(keys[0].1, keys[1].1, "with the same tool_call_id");
}

/// Business state: set at start, replaced by tools, kept across resumes.
#[test]
fn business_state_is_checkpointed() {
    let env = new_env();
    let stage: Rc<dyn Tool> = Rc::new(FnTool::new("stage", "advance", object_schema(), |_a, _c| async {
        Ok(ToolOutput::text("advanced").with_business_state(json!({"stage": 2})))
    }));
    let model = MockModel::new(vec![MockTurn::tools([("stage", json!({}))]), MockTurn::text("done")]);
    let agent = env.agent(model, vec![stage]);
    let start = SendOptions { business_state: Some(json!({"stage": 1})), ..opts() };
    let done = block_on(agent.send("r", "go", start)).unwrap();
    assert_eq!(done.business_state, Some(json!({"stage": 2})));
    let hist = block_on(agent.history("r", 50)).unwrap();
    assert_eq!(hist.last().unwrap().checkpoint.business_state, Some(json!({"stage": 1})));
}
