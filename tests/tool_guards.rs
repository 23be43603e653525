//! What guards a run's tool calls, and what it records: the progress guard stops a model calling the same failing
//! tool forever (its counters survive a crash, the sweep leaves the stopped run); an output check turns a bad
//! output into an error result; hooks rewrite, deny, replace and reject; a run keeps its newest fifty heal actions;
//! a resume by an agent whose tools changed writes one warning naming the change (under `warn`), sweeps included.
//! With a fake clock, the scripted model and (where it matters) the journal store on SimKv.

mod common;

use common::healing::{one_try, opts, Recorder};
use common::*;
use serde_json::json;
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;
use steadfast::core::checkpoint::RunStatus;
use steadfast::core::events::Event;
use steadfast::core::machine::ModelResponse;
use steadfast::core::sweep::SweepOptions;
use steadfast::core::transcript::{Message, ResultKind, ToolCall};
use steadfast::runtime::{
    Agent, AgentOptions, CrashPoint, FnTool, Hook, HookContext, MockModel, MockTurn, OutputCheck, ProgressGuard,
    ProgressGuardOptions, Resolve, SendOptions, Tool, ToolError, ToolOutput, ToolResultDraft, VecSink, Verdict,
};
use steadfast::{Error, ErrorCode, Result};

#[test]
fn progress_guard_stops_a_model_calling_the_same_failing_tool_forever() {
    let env = Env::journal_sim();
    let c = Counters::default();
    let model =
        || MockModel::by_turn((0..30).map(|_| MockTurn::tools([("read", json!({"path": "sonfig.py"}))])).collect());
    let options = AgentOptions { max_steps: 30, loop_window: 0, ..AgentOptions::default() };
    let build = |m| {
        let mut a = Agent::builder(m);
        a = a.tool_rc(failing_tool("read", &c)).hook(ProgressGuard::new(ProgressGuardOptions::default()));
        a.store_rc(env.store.clone())
            .clock(Rc::new(env.clock.clone()))
            .sleep(Rc::new(env.sleep.clone()))
            .options(options.clone())
            .build()
            .unwrap()
    };
    let agent = build(model());
    let sink = VecSink::new();
    let err =
        block_on(agent.send("stuck", "read the config", SendOptions { events: Some(Rc::new(sink.clone())), ..opts() }))
            .unwrap_err();
    assert_eq!(err.code, ErrorCode::RunNoProgress);
    assert!(!err.retryable);
    let actions: Vec<String> = sink
        .events()
        .iter()
        .filter_map(|e| match &e.event {
            Event::HealAction { action, .. } => Some(action.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(actions, vec!["hint", "hint", "deny", "deny", "deny", "stop"], "{actions:?}");
    assert_eq!(c.get("read"), 3, "the tool ran 3 times, then was denied");
    let pending = block_on(agent.pending()).unwrap();
    let last = pending[0].last_error.clone().unwrap();
    assert_eq!((last.code, last.retryable), (ErrorCode::RunNoProgress, false), "recorded as not retryable");
    // The sweep leaves it.
    env.clock.advance(3_600_000);
    let r = block_on(agent.sweep(&SweepOptions::default(), &Recorder::default())).unwrap();
    assert_eq!(r.resumed, 0);
    let cp = block_on(agent.load("stuck")).unwrap().unwrap();
    let denied = cp.messages.iter().filter(|m| matches!(m, Message::Tool(r) if r.kind == ResultKind::Denied)).count();
    assert_eq!(denied, 3, "maxDenials denials, then the stop");
    let hinted =
        cp.messages.iter().filter(|m| matches!(m, Message::Tool(r) if r.content.contains("[steadfast]"))).count();
    assert_eq!(hinted, 2);
    // The run keeps what self-healing did (RunView.healActions), as the events said it, with its step.
    let said: Vec<(String, String, String, u32)> = sink
        .events()
        .iter()
        .filter_map(|e| match &e.event {
            Event::HealAction { tool_call_id, action, reason, count, .. } => {
                Some((tool_call_id.clone(), action.clone(), reason.clone(), *count))
            }
            _ => None,
        })
        .collect();
    let view = steadfast::front::contract::RunView::from(cp);
    let kept: Vec<(String, String, String, u32)> = view
        .heal_actions
        .iter()
        .map(|r| (r.tool_call_id.clone(), r.action.clone(), r.reason.clone(), r.count))
        .collect();
    assert_eq!(kept, said);
    assert!(view.heal_actions.iter().all(|r| r.tool == "read"));
    let steps: Vec<u32> = view.heal_actions.iter().map(|r| r.step).collect();
    assert!(steps.windows(2).all(|w| w[0] <= w[1]) && steps[0] >= 1, "{steps:?}");
    let json = serde_json::to_value(&view).unwrap();
    assert_eq!(json["healActions"][5]["action"], "stop", "{}", json["healActions"]);
}

#[test]
fn progress_guard_counters_survive_a_crash() {
    // Find the crash point right after the second denial was committed, then resume in a new process:
    // the guard stops the run after one more denial (its counters were not reset).
    let mut found = false;
    for k in 1..200 {
        let env = Env::journal_sim();
        let c = Counters::default();
        let model = || MockModel::by_turn((0..30).map(|_| MockTurn::tools([("read", json!({"path": "x"}))])).collect());
        let options = AgentOptions { max_steps: 30, loop_window: 0, ..AgentOptions::default() };
        let build = |m| {
            Agent::builder(m)
                .tool_rc(failing_tool("read", &c))
                .hook(ProgressGuard::default())
                .store_rc(env.store.clone())
                .clock(Rc::new(env.clock.clone()))
                .sleep(Rc::new(env.sleep.clone()))
                .options(options.clone())
                .build()
                .unwrap()
        };
        let crash = SendOptions { crash: Some(CrashPoint { after_effects: k, finish_in_flight: false }), ..opts() };
        if block_on(build(model()).send("stuck", "read", crash)).is_ok() {
            break;
        }
        let Some(cp) = block_on(build(model()).load("stuck")).unwrap() else { continue };
        let denials = cp.ext.as_ref().and_then(|e| e["progressGuard"]["denials"].as_u64()).unwrap_or(0);
        let denied =
            cp.messages.iter().filter(|m| matches!(m, Message::Tool(r) if r.kind == ResultKind::Denied)).count();
        if denials != 2 || denied != 2 {
            continue;
        }
        env.past_leases();
        let sink = VecSink::new();
        let err =
            block_on(build(model()).resume("stuck", SendOptions { events: Some(Rc::new(sink.clone())), ..opts() }))
                .unwrap_err();
        assert_eq!(err.code, ErrorCode::RunNoProgress);
        let actions: Vec<String> = sink
            .events()
            .iter()
            .filter_map(|e| match &e.event {
                Event::HealAction { action, .. } => Some(action.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(actions, vec!["deny", "stop"], "k={k}: one more denial, then the stop");
        assert_eq!(c.get("read"), 3);
        found = true;
        break;
    }
    assert!(found, "a crash point after the second denial exists");
}

#[test]
fn output_check_turns_a_bad_output_into_an_error_result() {
    let env = Env::new();
    let tool: Rc<dyn Tool> = Rc::new(FnTool::new("search", "search", json!({"type": "object"}), |_a, _c| async {
        Ok(ToolOutput::text(""))
    }));
    let agent =
        Agent::builder(MockModel::new(vec![MockTurn::tools([("search", json!({}))]), MockTurn::text("nothing found")]))
            .tool_rc(tool)
            .hook(OutputCheck::new(
                "nonEmpty",
                |_call, out| if out.trim().is_empty() { Err("empty output".into()) } else { Ok(()) },
            ))
            .store_rc(env.store.clone())
            .clock(Rc::new(env.clock.clone()))
            .sleep(Rc::new(env.sleep.clone()))
            .build()
            .unwrap();
    let sink = VecSink::new();
    let done =
        block_on(agent.send("r", "search", SendOptions { events: Some(Rc::new(sink.clone())), ..opts() })).unwrap();
    let Message::Tool(r) = &done.messages[2] else { panic!() };
    assert!(r.is_error && r.content.starts_with("output check failed: empty output"), "{}", r.content);
    let replaced = sink.events().iter().find_map(|e| match &e.event {
        Event::ToolDone { replaced_by, .. } => replaced_by.clone(),
        _ => None,
    });
    assert_eq!(replaced.as_deref(), Some("nonEmpty"), "the replaced result is marked");
}

struct Policy {
    seen_resumed: Rc<RefCell<Vec<bool>>>,
}

#[async_trait::async_trait(?Send)]
impl Hook for Policy {
    fn name(&self) -> &str {
        "policy"
    }
    async fn before_tool(&self, ctx: &mut HookContext<'_>, call: &mut ToolCall) -> Result<Verdict> {
        self.seen_resumed.borrow_mut().push(ctx.resumed_after_approval);
        if call.name == "rm" {
            return Ok(Verdict::Deny("deleting files is not allowed".into()));
        }
        if call.args.get("limit").is_none() {
            call.args["limit"] = json!(10);
        }
        Ok(Verdict::Continue)
    }
    async fn after_tool(
        &self,
        _ctx: &mut HookContext<'_>,
        call: &ToolCall,
        result: &mut ToolResultDraft,
    ) -> Result<()> {
        if call.name == "secret" {
            result.content = "[redacted]".into();
        }
        Ok(())
    }
    async fn after_model(&self, _ctx: &mut HookContext<'_>, response: &mut ModelResponse) -> Result<()> {
        response.text = response.text.replace("damn", "d***");
        Ok(())
    }
    async fn before_model(&self, _ctx: &mut HookContext<'_>, messages: &[Message]) -> Result<()> {
        if messages.iter().any(|m| matches!(m, Message::User { content } if content == "explode")) {
            return Err(Error::new(ErrorCode::HookFailed, "policy refuses this input"));
        }
        Ok(())
    }
}

#[test]
fn hooks_rewrite_deny_replace_and_reject() {
    let env = Env::new();
    let seen_args = Rc::new(RefCell::new(Vec::new()));
    let sa = seen_args.clone();
    let list: Rc<dyn Tool> = Rc::new(FnTool::new("list", "list", json!({"type": "object"}), move |args, _c| {
        sa.borrow_mut().push(args.clone());
        async { Ok(ToolOutput::text("a, b")) }
    }));
    let secret: Rc<dyn Tool> = Rc::new(FnTool::new("secret", "secret", json!({"type": "object"}), |_a, _c| async {
        Ok(ToolOutput::text("hunter2"))
    }));
    let c = Counters::default();
    let resumed = Rc::new(RefCell::new(Vec::new()));
    let model = MockModel::new(vec![
        MockTurn::tools([("list", json!({})), ("rm", json!({"path": "/"})), ("secret", json!({})), ("pay", json!({}))]),
        MockTurn::text("damn, done"),
    ]);
    let agent = Agent::builder(model)
        .tool_rc(list)
        .tool_rc(counting_tool("rm", &c))
        .tool_rc(secret)
        .tool_rc(gated_tool("pay", &c))
        .hook(Policy { seen_resumed: resumed.clone() })
        .store_rc(env.store.clone())
        .clock(Rc::new(env.clock.clone()))
        .sleep(Rc::new(env.sleep.clone()))
        .build()
        .unwrap();
    let paused = block_on(agent.send("r", "tidy up", opts())).unwrap();
    let done = block_on(agent.approvals().resolve(Resolve {
        id: paused.approval_id.unwrap(),
        approved: true,
        note: None,
        answer: None,
    }))
    .unwrap();
    assert_eq!(*seen_args.borrow(), vec![json!({"limit": 10})], "the tool ran with the rewritten args");
    let results: BTreeMap<String, (ResultKind, String)> = done
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(r) => Some((r.name.clone(), (r.kind, r.content.clone()))),
            _ => None,
        })
        .collect();
    assert_eq!(results["rm"].0, ResultKind::Denied);
    assert_eq!(c.get("rm"), 0);
    assert_eq!(results["secret"].1, "[redacted]");
    assert_eq!(c.get("pay"), 1);
    assert_eq!(done.text, "d***, done");
    // The gated call was seen at the gate and again when it ran after approval.
    assert!(resumed.borrow().contains(&true) && resumed.borrow().contains(&false));
    // A throwing hook rejects the run, and the attempt is recorded.
    let err = block_on(agent.send("r2", "explode", opts())).unwrap_err();
    assert_eq!(err.code, ErrorCode::HookFailed);
    assert_eq!(block_on(agent.pending()).unwrap().iter().find(|p| p.run_id == "r2").unwrap().attempts, 1);
}

/// A tool with its own argument check (`n` at most 5, as the npm package's zod validators are): counts its runs
/// and the approval questions it was asked.
struct Checked {
    runs: Rc<Cell<u32>>,
    asked: Rc<Cell<u32>>,
}

#[async_trait::async_trait(?Send)]
impl Tool for Checked {
    fn name(&self) -> &str {
        "checked"
    }
    fn description(&self) -> &str {
        "checked"
    }
    fn input_schema(&self) -> &serde_json::Value {
        static SCHEMA: std::sync::OnceLock<serde_json::Value> = std::sync::OnceLock::new();
        SCHEMA.get_or_init(|| json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}))
    }
    async fn check_args(&self, args: &serde_json::Value) -> std::result::Result<(), String> {
        match args["n"].as_i64() {
            Some(n) if n > 5 => Err(format!("/n: {n} is more than 5")),
            _ => Ok(()),
        }
    }
    fn needs_approval(&self, _args: &serde_json::Value) -> bool {
        self.asked.set(self.asked.get() + 1);
        false
    }
    async fn execute(
        &self,
        _args: serde_json::Value,
        _ctx: steadfast::runtime::ToolContext,
    ) -> std::result::Result<ToolOutput, ToolError> {
        self.runs.set(self.runs.get() + 1);
        Ok(ToolOutput::text("ran"))
    }
}

#[test]
fn a_tools_own_argument_check_runs_after_the_schema_and_its_refusal_is_a_validation_result_before_approval() {
    let env = Env::new();
    let (runs, asked) = (Rc::new(Cell::new(0)), Rc::new(Cell::new(0)));
    let model = MockModel::new(vec![
        MockTurn::tools([("checked", json!({"n": "x"})), ("checked", json!({"n": 9})), ("checked", json!({"n": 2}))]),
        MockTurn::text("done"),
    ]);
    let agent = Agent::builder(model)
        .tool(Checked { runs: runs.clone(), asked: asked.clone() })
        .store_rc(env.store.clone())
        .clock(Rc::new(env.clock.clone()))
        .sleep(Rc::new(env.sleep.clone()))
        .build()
        .unwrap();
    let done = block_on(agent.send("c", "go", opts())).unwrap();
    let results: Vec<(ResultKind, String)> = done
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(r) => Some((r.kind, r.content.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(results[0].0, ResultKind::Validation);
    assert!(results[0].1.starts_with("invalid arguments for 'checked': /n: expected integer"), "{results:?}");
    assert_eq!(
        results[1],
        (ResultKind::Validation, "invalid arguments for 'checked': /n: 9 is more than 5".to_string()),
        "the tool's own check words the result as a schema failure is worded"
    );
    assert_eq!(results[2], (ResultKind::Execution, "ran".to_string()));
    assert_eq!((runs.get(), asked.get()), (1, 1), "only the valid call was asked about and ran");
}

/// A run interrupted by `boom` on `env` by an agent with `boom`'s schema `schema`, resumed by a sweep.
fn drift_agent(
    env: &Env,
    schema: serde_json::Value,
    down: Rc<Cell<bool>>,
    warnings: Rc<RefCell<Vec<String>>>,
) -> Agent {
    let boom: Rc<dyn Tool> = Rc::new(FnTool::new("boom", "dies", schema, move |_a, _c| {
        let down = down.get();
        async move {
            if down {
                Err(ToolError::propagate("worker died"))
            } else {
                Ok(ToolOutput::text("ok"))
            }
        }
    }));
    Agent::builder(MockModel::by_turn(vec![MockTurn::tools([("boom", json!({}))]), MockTurn::text("done")]))
        .store_rc(env.store.clone())
        .clock(Rc::new(env.clock.clone()))
        .sleep(Rc::new(env.sleep.clone()))
        .options(one_try())
        .tool_rc(boom)
        .warn(Rc::new(move |line: &str| warnings.borrow_mut().push(line.to_string())))
        .build()
        .unwrap()
}

#[test]
fn a_resume_by_a_changed_agent_under_warn_writes_one_warning_naming_the_change_sweeps_included() {
    for by_sweep in [false, true] {
        let env = Env::new();
        let down = Rc::new(Cell::new(true));
        let warnings = Rc::new(RefCell::new(Vec::new()));
        let old = drift_agent(&env, json!({"type": "object"}), down.clone(), warnings.clone());
        block_on(old.send("job", "go", opts())).unwrap_err();
        assert!(warnings.borrow().is_empty(), "no warning for a run's own agent");
        down.set(false);
        let changed = json!({"type": "object", "properties": {"fast": {"type": "boolean"}}});
        let new = drift_agent(&env, changed, down.clone(), warnings.clone());
        if by_sweep {
            env.clock.advance(3_600_000);
            let report = block_on(new.sweep(&SweepOptions::default(), &Recorder::default())).unwrap();
            assert_eq!(report.recovered, vec!["job".to_string()]);
        } else {
            let done = block_on(new.resume("job", opts())).unwrap().unwrap();
            assert_eq!(done.status, RunStatus::Finished);
        }
        let lines = warnings.borrow().clone();
        assert_eq!(lines.len(), 1, "one warning (sweep: {by_sweep}): {lines:?}");
        assert!(lines[0].contains("'job'") && lines[0].contains("tools changed: boom"), "{}", lines[0]);
    }
}

/// A hook that reports a heal action after every tool call.
struct Noting;

#[async_trait::async_trait(?Send)]
impl Hook for Noting {
    fn name(&self) -> &str {
        "noting"
    }
    async fn after_tool(
        &self,
        ctx: &mut HookContext<'_>,
        call: &ToolCall,
        _result: &mut ToolResultDraft,
    ) -> Result<()> {
        ctx.emit(Event::HealAction {
            tool: call.name.clone(),
            tool_call_id: call.id.clone(),
            action: "hint".into(),
            reason: format!("noted {}", call.id),
            count: 1,
        });
        Ok(())
    }
}

#[test]
fn a_run_keeps_its_newest_fifty_heal_actions_across_processes() {
    let env = Env::journal_sim();
    let c = Counters::default();
    let turns: Vec<MockTurn> =
        (0..60).map(|i| MockTurn::tools([("work", json!({"n": i}))])).chain([MockTurn::text("done")]).collect();
    let options = AgentOptions { max_steps: 70, loop_window: 0, ..AgentOptions::default() };
    let agent = Agent::builder(MockModel::by_turn(turns))
        .tool_rc(counting_tool("work", &c))
        .hook(Noting)
        .store_rc(env.store.clone())
        .clock(Rc::new(env.clock.clone()))
        .sleep(Rc::new(env.sleep.clone()))
        .options(options)
        .build()
        .unwrap();
    let done = block_on(agent.send("noted", "work 60 times", opts())).unwrap();
    assert_eq!(done.status, RunStatus::Finished);
    // Read back by another process: the newest 50 of the 60, in order.
    let other = env.agent(MockModel::new(vec![]), vec![]);
    let view = steadfast::front::contract::RunView::from(block_on(other.load("noted")).unwrap().unwrap());
    assert_eq!(view.heal_actions.len(), steadfast::core::events::HEAL_LOG_MAX);
    let ids: Vec<String> = view.heal_actions.iter().map(|r| r.tool_call_id.clone()).collect();
    let want: Vec<String> = (10..60).map(|i| format!("call_{i}_0")).collect();
    assert_eq!(ids, want);
    assert_eq!(view.heal_actions[0].step, 11, "taken after the 11th model turn");
}
