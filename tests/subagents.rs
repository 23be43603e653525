//! Sub-agents (issue 30, part 1 and the nesting of part 3) through the runtime, on every store (memory, the
//! journal store on the KV simulator, strict mode's run objects): a lead's call of a sub-agent runs a child run
//! whose final text is the call's result; after a crash at any effect of lead or child, the lead's resumption
//! resumes the child where it stopped (never starts it over, never runs a recorded child call again); a child
//! paused on an approval pauses the lead, and resolving the child's approval through the lead's agent finishes
//! both in one request; sub-agents nest up to the lead's depth limit, and child ids are reserved.

mod common;

use common::*;
use serde_json::json;
use std::cell::RefCell;
use std::rc::Rc;
use steadfast::core::checkpoint::RunStatus;
use steadfast::core::ids::{subagent_parent, subagent_path};
use steadfast::core::transcript::{validate_transcript, Message};
use steadfast::runtime::Clock;
use steadfast::runtime::{Agent, CrashBudget, FnTool, MockModel, MockTurn, Resolve, SendOptions, Tool, ToolOutput};
use steadfast::store::RunStore;
use steadfast::ErrorCode;

/// The final text of the tool results of a transcript, in order.
fn results(messages: &[Message]) -> Vec<String> {
    messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(r) => Some(r.content.clone()),
            _ => None,
        })
        .collect()
}

/// A model that answers with the last tool result it saw (prefixed), or `text` when it saw none.
fn echo_result(prefix: &'static str) -> MockTurn {
    MockTurn::func(move |req| {
        let last = results(req.messages).pop().unwrap_or_default();
        MockTurn::text(format!("{prefix}{last}"))
    })
}

/// Executions of child tools, by call key; each execution also checks, on the store, that its call has no
/// recorded result yet (a recorded call never runs again).
#[derive(Clone, Default)]
struct Runs(Rc<RefCell<Vec<String>>>, Rc<RefCell<Vec<String>>>);

impl Runs {
    fn count(&self, key: &str) -> usize {
        self.0.borrow().iter().filter(|k| *k == key).count()
    }
}

/// A child tool that records its executions and checks that its call's result is not recorded yet.
fn lookup(store: Rc<dyn RunStore>, runs: &Runs, name: &'static str, gated: bool) -> Rc<dyn Tool> {
    let runs = runs.clone();
    let tool = FnTool::new(name, "looks something up", object_schema(), move |_args, ctx| {
        let runs = runs.clone();
        let store = store.clone();
        async move {
            let cp = store.load(&ctx.run_id).await.map_err(steadfast::runtime::ToolError::Propagate)?;
            let recorded = cp.is_some_and(|cp| {
                cp.messages.iter().any(|m| matches!(m, Message::Tool(r) if r.tool_call_id == ctx.tool_call_id))
            });
            if recorded {
                runs.1.borrow_mut().push(format!("{} ran again after its result was recorded", ctx.call_key));
            }
            runs.0.borrow_mut().push(ctx.call_key.clone());
            Ok(ToolOutput::text(format!("{name}: 42")))
        }
    })
    .needs_approval(gated);
    Rc::new(tool)
}

/// A lead that delegates once to sub-agent `research`, whose agent calls `lookup` once and reports.
fn lead(env: &Env, runs: &Runs, gated: bool, seed: u64) -> Agent {
    lead_with(env, runs, gated, seed, |b| b).build().expect("the lead builds")
}

/// [`lead`]'s builder, its child's builder changed by `child`.
fn lead_with(
    env: &Env,
    runs: &Runs,
    gated: bool,
    seed: u64,
    child_of_lead: impl FnOnce(steadfast::runtime::AgentBuilder) -> steadfast::runtime::AgentBuilder,
) -> steadfast::runtime::AgentBuilder {
    let child_builder = builder(
        env,
        MockModel::by_turn(vec![MockTurn::tools([("lookup", json!({}))]), echo_result("found ")]),
        seed * 2 + 1,
    )
    .instructions("You research.")
    .tool_rc(lookup(env.store.clone(), runs, "lookup", gated));
    builder(
        env,
        MockModel::by_turn(vec![
            MockTurn::tools([("research", json!({"task": "what is the answer?"}))]),
            echo_result("the team says: "),
        ]),
        seed * 2,
    )
    .subagent("research", "Researches a question", child_of_lead(child_builder))
}

/// The lead's usage is its own model turns' plus its child's whole spend, which its call's result keeps.
fn assert_spend_rolls_up(
    lead: &[Message],
    total: steadfast::core::transcript::Usage,
    child: &steadfast::core::checkpoint::Checkpoint,
    name: &str,
) {
    let mut own = steadfast::core::transcript::Usage::default();
    for m in lead {
        if let Message::Assistant { usage: Some(u), .. } = m {
            own.add(*u);
        }
    }
    let result = lead.iter().find_map(|m| match m {
        Message::Tool(r) => Some(r),
        _ => None,
    });
    assert_eq!(result.and_then(|r| r.usage), Some(child.total_usage), "{name}: the result keeps the child's spend");
    assert!(child.total_usage.input_tokens > 0, "{name}: the child spent something");
    let mut want = own;
    want.add(child.total_usage);
    assert_eq!(total, want, "{name}: the lead's usage includes its child's");
}

/// The one child run of the store's runs under `lead_id`.
fn child_of(env: &Env, lead_id: &str) -> steadfast::core::checkpoint::Checkpoint {
    let lead = block_on(env.store.load(lead_id)).unwrap().unwrap();
    let call = lead.messages.iter().flat_map(|m| m.tool_calls().to_vec()).next().expect("the lead called");
    let key = lead.call_key(&call.id).unwrap();
    let id = steadfast::core::ids::subagent_run_id(lead_id, "research", &key).unwrap();
    block_on(env.store.load(&id)).unwrap().expect("the child run is stored")
}

#[test]
fn a_sub_agent_call_runs_a_child_run_whose_final_text_is_the_leads_tool_result() {
    for (name, make) in stores() {
        let env = make();
        let runs = Runs::default();
        let a = lead(&env, &runs, false, 1);
        let r = block_on(a.send("trip", "plan it", SendOptions::default())).unwrap();
        assert_eq!(r.status, RunStatus::Finished, "{name}");
        assert_eq!(r.text, "the team says: found lookup: 42", "{name}");
        assert_eq!(results(&r.messages), ["found lookup: 42"], "{name}: the child's final text is the result");

        let child = child_of(&env, "trip");
        assert_eq!(subagent_parent(&child.run_id), Some(("trip", "research")), "{name}");
        assert_eq!(subagent_path(&child.run_id), ["research"], "{name}");
        assert_eq!(child.status, RunStatus::Finished, "{name}");
        assert!(
            matches!(&child.messages[..2], [Message::System { content }, Message::User { content: task }]
                if content == "You research." && task == "what is the answer?"),
            "{name}: the child runs the task under its own instructions: {:?}",
            child.messages
        );
        assert_eq!(runs.0.borrow().len(), 1, "{name}: the child's tool ran once");
        assert_spend_rolls_up(&r.messages, r.total_usage, &child, name);
        // The child is a run like any other: listed, loadable, never pending once finished.
        assert!(block_on(a.pending()).unwrap().is_empty(), "{name}");
        // `GET /runs/{id}` lists the lead's children and names a child's parent.
        let (status, view) = get_run(&a, "trip");
        assert_eq!(status, 200, "{name}");
        assert_eq!(view["children"][0]["runId"], child.run_id.as_str(), "{name}: {view}");
        assert_eq!(
            (view["children"][0]["name"].as_str(), view["children"][0]["status"].as_str()),
            (Some("research"), Some("finished")),
            "{name}"
        );
        assert_eq!(view["parentRunId"], serde_json::Value::Null, "{name}");
        let (_, child_view) = get_run(&a, &child.run_id);
        assert_eq!(
            (child_view["parentRunId"].as_str(), child_view["children"].as_array().map(Vec::len)),
            (Some("trip"), Some(0)),
            "{name}"
        );
        // Its id is reserved: a plain send may not create or continue it.
        let err = block_on(a.send(&child.run_id, "hi", SendOptions::default())).unwrap_err();
        assert_eq!(err.code, ErrorCode::SessionIdInvalid, "{name}");
    }
}

/// Crash at every effect of the lead and its child (one budget counts both executions' effects), then resume
/// the lead until it finishes: the child is never started over and no recorded child call runs again.
#[test]
fn after_a_crash_at_any_effect_of_lead_or_child_the_leads_resumption_resumes_the_child_where_it_stopped() {
    for (name, make) in stores() {
        let mut crashed_in_child = 0;
        let mut k = 1;
        loop {
            let env = make();
            let runs = Runs::default();
            let a = lead(&env, &runs, false, k as u64);
            let budget = CrashBudget::new(k, k % 2 == 0);
            let opts = SendOptions { crash_budget: Some(budget.clone()), ..Default::default() };
            let first = block_on(a.send("trip", "plan it", opts));
            if !budget.crashed() {
                assert_eq!(first.unwrap().status, RunStatus::Finished, "{name} k={k}");
                break;
            }
            let before = block_on(env.store.load("trip")).unwrap();
            // Whether the crash came while the child ran: the lead had called, and had no result yet.
            let in_child = before.as_ref().is_some_and(|cp| {
                cp.messages.iter().any(|m| !m.tool_calls().is_empty())
                    && !cp.messages.iter().any(|m| matches!(m, Message::Tool(_)))
            });
            // A new process resumes the lead (or starts it again when nothing was recorded).
            env.past_leases();
            let b = lead(&env, &runs, false, 1_000 + k as u64);
            let done = match before {
                Some(cp) if cp.status == RunStatus::Finished => steadfast::runtime::RunResult::stored(&cp),
                Some(_) => block_on(b.resume("trip", SendOptions::default())).unwrap().expect("resumable"),
                None => block_on(b.send("trip", "plan it", SendOptions::default())).unwrap(),
            };
            assert_eq!(done.status, RunStatus::Finished, "{name} k={k}");
            assert_eq!(done.text, "the team says: found lookup: 42", "{name} k={k}");
            assert!(runs.1.borrow().is_empty(), "{name} k={k}: {:?}", runs.1.borrow());
            let child = child_of(&env, "trip");
            validate_transcript(&child.messages).unwrap_or_else(|e| panic!("{name} k={k}: {e:?}"));
            let tasks = child.messages.iter().filter(|m| matches!(m, Message::User { .. })).count();
            assert_eq!(tasks, 1, "{name} k={k}: the child was never started over");
            let call = child.messages.iter().flat_map(|m| m.tool_calls().to_vec()).next().unwrap();
            let key = child.call_key(&call.id).unwrap();
            assert!(runs.count(&key) <= 2, "{name} k={k}: at most once more, when the crash lost its result");
            let lead_cp = block_on(env.store.load("trip")).unwrap().unwrap();
            assert_spend_rolls_up(&lead_cp.messages, lead_cp.total_usage, &child, &format!("{name} k={k}"));
            if in_child {
                crashed_in_child += 1;
            }
            k += 1;
            assert!(k < 200, "{name}: the crash points end");
        }
        eprintln!("{name}: {k} crash points, {crashed_in_child} of them while the child ran");
        assert!(k > 8, "{name}: lead and child together perform more than 8 effects ({k})");
        assert!(crashed_in_child > 0, "{name}");
    }
}

#[test]
fn a_child_paused_on_an_approval_pauses_the_lead_and_resolving_it_finishes_both_in_one_request() {
    for (name, make) in stores() {
        let env = make();
        let runs = Runs::default();
        let a = lead(&env, &runs, true, 7);
        let paused = block_on(a.send("trip", "plan it", SendOptions::default())).unwrap();
        assert_eq!(paused.status, RunStatus::AwaitingApproval, "{name}: the lead pauses");
        let child = child_of(&env, "trip");
        assert_eq!(child.status, RunStatus::AwaitingApproval, "{name}: on its child's approval");
        let approval = child.approval_ids.first().cloned().expect("the child waits on its approval");
        assert!(runs.0.borrow().is_empty(), "{name}: nothing ran before the approval");
        // The approval is listed, for the child run.
        let listed = block_on(a.approvals().list()).unwrap();
        assert!(listed.iter().any(|r| r.id == approval && r.run_id == child.run_id), "{name}: {listed:?}");

        // Another process resolves it through the lead's agent: the child runs to its end, then the lead.
        let b = lead(&env, &runs, true, 8);
        let res =
            block_on(b.approvals().resolve(Resolve { id: approval.clone(), approved: true, ..Default::default() }))
                .unwrap();
        assert_eq!((res.run_id.as_str(), res.status), (child.run_id.as_str(), RunStatus::Finished), "{name}");
        let lead_now = block_on(b.load("trip")).unwrap().unwrap();
        assert_eq!(lead_now.status, RunStatus::Finished, "{name}: the lead finished in the same request");
        assert_eq!(lead_now.last_text(), "the team says: found lookup: 42", "{name}");
        assert_eq!(runs.0.borrow().len(), 1, "{name}: the child's call ran once");
        assert_spend_rolls_up(&lead_now.messages, lead_now.total_usage, &child_of(&env, "trip"), name);
        assert!(
            block_on(b.approvals().list())
                .unwrap()
                .iter()
                .all(|r| r.status != steadfast::core::approval::ApprovalStatus::Pending),
            "{name}"
        );

        // The same decision again is a repeat: nothing runs, nothing changes.
        let again = block_on(b.approvals().resolve(Resolve { id: approval, approved: true, ..Default::default() }));
        if let Ok(r) = again {
            assert_eq!(r.status, RunStatus::Finished, "{name}");
        }
        assert_eq!(runs.0.borrow().len(), 1, "{name}");
        assert_eq!(block_on(b.load("trip")).unwrap().unwrap().seq, lead_now.seq, "{name}");
    }
}

/// lead -> planner -> (planner's own sub-agent) deeper, which answers `bottom`; each level reports the result of
/// its call prefixed with its name.
fn three_levels(env: &Env, bottom: &'static str) -> steadfast::runtime::AgentBuilder {
    let deeper = builder(env, MockModel::by_turn(vec![MockTurn::text(bottom)]), 5);
    let planner = builder(
        env,
        MockModel::by_turn(vec![MockTurn::tools([("deeper", json!({"task": "go on"}))]), echo_result("planner: ")]),
        4,
    )
    .subagent("deeper", "Goes deeper", deeper);
    builder(
        env,
        MockModel::by_turn(vec![MockTurn::tools([("planner", json!({"task": "plan"}))]), echo_result("lead: ")]),
        3,
    )
    .subagent("planner", "Plans", planner)
}

#[test]
fn sub_agents_nest_up_to_the_leads_depth_limit_and_a_deeper_call_is_a_coded_error_the_model_reads() {
    for (name, make) in stores() {
        let env = make();
        // lead -> planner -> (planner's own sub-agent) deeper: with a depth limit of 1, the planner's call of
        // `deeper` is refused.
        let a = three_levels(&env, "too deep").max_subagent_depth(1).build().unwrap();
        let r = block_on(a.send("deep", "go", SendOptions::default())).unwrap();
        assert_eq!(r.status, RunStatus::Finished, "{name}");
        assert!(
            r.text.starts_with("lead: planner: STEADFAST_SUBAGENT_DEPTH: sub-agent 'deeper' would run at depth 2"),
            "{name}: {}",
            r.text
        );

        // With the default limit (3) the same tree runs all three levels.
        let env = make();
        let a = three_levels(&env, "bottom reached").build().unwrap();
        let r = block_on(a.send("deep", "go", SendOptions::default())).unwrap();
        assert_eq!(r.text, "lead: planner: bottom reached", "{name}");
    }
}

#[test]
fn a_sub_agent_is_declared_with_a_valid_unique_tool_name_over_its_leads_store() {
    let env = Env::new();
    let child = || builder(&env, MockModel::by_turn(vec![MockTurn::text("-")]), 2);
    let model = || MockModel::by_turn(vec![MockTurn::text("-")]);
    let twice = builder(&env, model(), 1).subagent("a", "x", child()).subagent("a", "y", child()).build();
    assert_eq!(twice.err().map(|e| e.code), Some(ErrorCode::ConfigInvalid));
    let bad = builder(&env, model(), 1).subagent("a b", "x", child()).build();
    assert_eq!(bad.err().map(|e| e.code), Some(ErrorCode::ConfigInvalid));
    let other_store = Env::new();
    let elsewhere = builder(&env, model(), 1).subagent("a", "x", builder(&other_store, model(), 3)).build();
    assert_eq!(elsewhere.err().map(|e| e.code), Some(ErrorCode::ConfigInvalid));
}

/// A lead that delegates to `research`, whose agent calls `nap` (a timer a minute on) and then says "rested".
fn resting_team(env: &Env, seed: u64) -> Agent {
    let nap: Rc<dyn Tool> = Rc::new(FnTool::new("nap", "waits a minute", object_schema(), |_args, ctx| async move {
        Ok(ToolOutput::wait(steadfast::core::wait::WaitRequest::Timer { at: ctx.now + 60_000 }))
    }));
    let child = builder(
        env,
        MockModel::by_turn(vec![MockTurn::tools([("nap", json!({}))]), MockTurn::text("rested")]),
        seed + 1,
    )
    .tool_rc(nap);
    builder(
        env,
        MockModel::by_turn(vec![
            MockTurn::tools([("research", json!({"task": "rest"}))]),
            echo_result("the team says: "),
        ]),
        seed,
    )
    .subagent("research", "Rests", child)
    .build()
    .unwrap()
}

/// A child that waits on a timer: the lead pauses with it; the sweep wakes the child when its time comes, and
/// the child's result reaches the lead in the same tick.
#[test]
fn a_child_waiting_on_a_timer_is_woken_by_the_sweep_and_its_result_resumes_the_lead() {
    for (name, make) in stores() {
        let env = make();
        let a = resting_team(&env, 10);
        let paused = block_on(a.send("nap", "go", SendOptions::default())).unwrap();
        assert_eq!(paused.status, RunStatus::AwaitingApproval, "{name}");
        env.clock.advance(61_000);
        struct Errors(RefCell<Vec<String>>);
        impl steadfast::runtime::SweepListener for Errors {
            fn on_error(&self, e: &steadfast::Error, run: Option<&str>) -> steadfast::Result<()> {
                self.0.borrow_mut().push(format!("{run:?}: {} {}", e.code, e.message));
                Ok(())
            }
        }
        let errors = Errors(RefCell::default());
        let report = block_on(a.sweep(&Default::default(), &errors)).unwrap();
        assert!(errors.0.borrow().is_empty(), "{name}: {:?}", errors.0.borrow());
        assert_eq!(report.woken, 1, "{name}");
        let lead = block_on(a.load("nap")).unwrap().unwrap();
        assert_eq!(lead.status, RunStatus::Finished, "{name}");
        assert_eq!(lead.last_text(), "the team says: rested", "{name}");
    }
}

/// The lead is busy when its child finishes (another execution holds its lease): the delivery fails, leaves a
/// due entry, and a later sweep tick delivers the child's result — the lead never waits forever on a child that
/// finished.
#[test]
fn a_delivery_that_meets_a_busy_lead_is_made_by_a_later_sweep_tick() {
    for (name, make) in stores() {
        let env = make();
        let a = resting_team(&env, 20);
        let paused = block_on(a.send("busy", "go", SendOptions::default())).unwrap();
        assert_eq!(paused.status, RunStatus::AwaitingApproval, "{name}");
        env.clock.advance(61_000);
        let lease =
            block_on(env.store.acquire_lease("busy", "someone", env.clock.now_ms(), &Default::default())).unwrap();
        let first = block_on(a.sweep(&Default::default(), &steadfast::runtime::NoListener)).unwrap();
        assert_eq!(first.busy, 1, "{name}: the delivery met the busy lead: {first:?}");
        let child_run = child_of(&env, "busy");
        assert_eq!(child_run.status, RunStatus::Finished, "{name}: the child finished");
        assert_eq!(block_on(a.load("busy")).unwrap().unwrap().status, RunStatus::AwaitingApproval, "{name}");
        block_on(env.store.release_lease(&lease)).unwrap();

        // The next tick delivers it (the child's resolution is taken up again, and the delivery's own entry
        // is dropped once it finds the lead past the wait).
        block_on(a.sweep(&Default::default(), &steadfast::runtime::NoListener)).unwrap();
        env.clock.advance(61_000);
        block_on(a.sweep(&Default::default(), &steadfast::runtime::NoListener)).unwrap();
        let lead = block_on(a.load("busy")).unwrap().unwrap();
        assert_eq!((lead.status, lead.last_text()), (RunStatus::Finished, "the team says: rested".into()), "{name}");
        assert!(block_on(env.store.list_due(u64::MAX, 100)).unwrap().is_empty(), "{name}: no entry is left");
    }
}

/// The sweep finishes an interrupted child on its own (the child is pending) while its lead's lease is held: the
/// delivery fails, and the due entry it leaves makes a tick a minute later deliver the result — nothing else
/// would (the child is finished, so no longer pending, and its approval was spent).
#[test]
fn a_child_finished_by_the_sweep_while_its_lead_is_busy_reaches_the_lead_a_minute_later() {
    for (name, make) in stores() {
        let env = make();
        let runs = Runs::default();
        let one_try = steadfast::runtime::AgentOptions {
            retry: steadfast::core::retry::RetryPolicy { max_attempts: 1, ..Default::default() },
            ..Default::default()
        };
        // The child's model fails once after the approval (its run stays pending), then answers.
        let child = builder(
            &env,
            MockModel::new(vec![
                MockTurn::tools([("lookup", json!({}))]),
                MockTurn::error(503),
                MockTurn::text("found it"),
            ]),
            31,
        )
        .options(one_try)
        .tool_rc(lookup(env.store.clone(), &runs, "lookup", true));
        let a = builder(
            &env,
            MockModel::by_turn(vec![
                MockTurn::tools([("research", json!({"task": "look"}))]),
                echo_result("the team says: "),
            ]),
            30,
        )
        .subagent("research", "Looks", child)
        .build()
        .unwrap();
        block_on(a.send("late", "go", SendOptions::default())).unwrap();
        let approval = child_of(&env, "late").approval_ids[0].clone();
        let failed = block_on(a.approvals().resolve(Resolve { id: approval, approved: true, ..Default::default() }));
        assert_eq!(failed.unwrap_err().code, ErrorCode::ProviderUnavailable, "{name}");
        assert_eq!(child_of(&env, "late").status, RunStatus::InProgress, "{name}: the child is pending");

        let lease =
            block_on(env.store.acquire_lease("late", "someone", env.clock.now_ms(), &Default::default())).unwrap();
        env.clock.advance(31_000);
        block_on(a.sweep(&Default::default(), &steadfast::runtime::NoListener)).unwrap();
        assert_eq!(child_of(&env, "late").status, RunStatus::Finished, "{name}: the sweep finished the child");
        assert_eq!(block_on(a.load("late")).unwrap().unwrap().status, RunStatus::AwaitingApproval, "{name}");
        block_on(env.store.release_lease(&lease)).unwrap();

        block_on(a.sweep(&Default::default(), &steadfast::runtime::NoListener)).unwrap();
        assert_eq!(block_on(a.load("late")).unwrap().unwrap().status, RunStatus::AwaitingApproval, "{name}: not yet");
        env.clock.advance(61_000);
        block_on(a.sweep(&Default::default(), &steadfast::runtime::NoListener)).unwrap();
        let lead = block_on(a.load("late")).unwrap().unwrap();
        assert_eq!((lead.status, lead.last_text()), (RunStatus::Finished, "the team says: found it".into()), "{name}");
        assert_eq!(runs.0.borrow().len(), 1, "{name}: the child's call ran once");
        assert!(block_on(env.store.list_due(u64::MAX, 100)).unwrap().is_empty(), "{name}: no entry is left");
    }
}

/// Run `id`'s stored state.
fn stored(env: &Env, id: &str) -> steadfast::core::checkpoint::Checkpoint {
    block_on(env.store.load(id)).unwrap().expect("the run is stored")
}

/// The one call of a run's transcript, and the child run it started (sub-agent `sub`).
fn called_child(env: &Env, run_id: &str, sub: &str) -> (String, String) {
    let cp = block_on(env.store.load(run_id)).unwrap().expect("the run is stored");
    let call = cp.messages.iter().flat_map(|m| m.tool_calls().to_vec()).next().expect("the run called");
    let key = cp.call_key(&call.id).unwrap();
    (call.id.clone(), steadfast::core::ids::subagent_run_id(run_id, sub, &key).unwrap())
}

#[test]
fn a_childs_events_reach_its_leads_caller_live_tagged_with_the_sub_agent_depth_parent_and_call() {
    use steadfast::core::events::{Event, SubagentTag};
    for (name, make) in stores() {
        let env = make();
        let a = three_levels(&env, "bottom reached").build().unwrap();
        let (opts, sink) = listening();
        let r = block_on(a.send("deep", "go", opts)).unwrap();
        assert_eq!(r.text, "lead: planner: bottom reached", "{name}");
        let (lead_call, planner_id) = called_child(&env, "deep", "planner");
        let (planner_call, deeper_id) = called_child(&env, &planner_id, "deeper");
        let events = sink.events();
        let tag = |n: &str, depth, parent: &str, call: &str| {
            Some(SubagentTag { name: n.into(), depth, parent: parent.into(), tool_call_id: Some(call.into()) })
        };
        for (run, want) in [
            ("deep", None),
            (planner_id.as_str(), tag("planner", 1, "deep", &lead_call)),
            (deeper_id.as_str(), tag("deeper", 2, &planner_id, &planner_call)),
        ] {
            let own: Vec<_> = events.iter().filter(|e| e.run_id == run).collect();
            assert!(own.len() >= 3, "{name}: {run} emitted its events: {own:?}");
            let seqs: Vec<u64> = own.iter().map(|e| e.seq).collect();
            assert_eq!(seqs, (0..own.len() as u64).collect::<Vec<_>>(), "{name}: {run}'s seq is its own, gapless");
            assert!(own.iter().all(|e| e.subagent == want), "{name}: {run}: {own:?}");
            assert!(matches!(own.last().map(|e| &e.event), Some(Event::RunDone { .. })), "{name}: {run}");
        }
        // Live: each child's events come while its caller's call runs, before that call's result.
        let at = |run: &str, done: bool| {
            events
                .iter()
                .position(|e| {
                    e.run_id == run
                        && if done {
                            matches!(e.event, Event::ToolDone { .. })
                        } else {
                            matches!(e.event, Event::RunDone { .. })
                        }
                })
                .unwrap()
        };
        assert!(at(&deeper_id, false) < at(&planner_id, true), "{name}: the grandchild ends before the child's call");
        assert!(at(&planner_id, false) < at("deep", true), "{name}: the child ends before the lead's call");
        // On the wire: `subagent` on a child's events only.
        let child_event = events.iter().find(|e| e.run_id == planner_id).unwrap();
        let wire = serde_json::to_value(child_event).unwrap();
        assert_eq!(
            wire["subagent"],
            json!({"name": "planner", "depth": 1, "parent": "deep", "toolCallId": lead_call}),
            "{name}"
        );
        let back: steadfast::core::events::EventEnvelope = serde_json::from_value(wire).unwrap();
        assert_eq!(&back, child_event, "{name}");
        let lead_event = serde_json::to_value(events.iter().find(|e| e.run_id == "deep").unwrap()).unwrap();
        assert!(lead_event.get("subagent").is_none(), "{name}: {lead_event}");
    }
}

#[test]
fn resolving_a_childs_approval_streams_the_childs_events_tagged_and_then_its_leads() {
    use steadfast::core::events::Event;
    for (name, make) in stores() {
        let env = make();
        let runs = Runs::default();
        let a = lead(&env, &runs, true, 9);
        let paused = block_on(a.send("trip", "plan it", SendOptions::default())).unwrap();
        assert_eq!(paused.status, RunStatus::AwaitingApproval, "{name}");
        let child = child_of(&env, "trip");
        let approval = child.approval_ids.first().cloned().unwrap();
        let (opts, sink) = listening();
        let res =
            block_on(a.approvals().resolve_with(Resolve { id: approval, approved: true, ..Default::default() }, opts))
                .unwrap();
        assert_eq!(res.status, RunStatus::Finished, "{name}");
        let events = sink.events();
        let child_events: Vec<_> = events.iter().filter(|e| e.run_id == child.run_id).collect();
        assert!(!child_events.is_empty(), "{name}");
        for e in &child_events {
            let tag = e.subagent.as_ref().expect("a child's event names its sub-agent");
            // Its lead's call is not what executes it here: the decision is.
            assert_eq!((tag.name.as_str(), tag.depth, tag.parent.as_str()), ("research", 1, "trip"), "{name}");
            assert_eq!(tag.tool_call_id, None, "{name}");
        }
        // The lead, resumed by the child's result in the same request, streams to the same caller, untagged.
        let lead_done = events.iter().rposition(|e| e.run_id == "trip" && matches!(e.event, Event::RunDone { .. }));
        let child_done =
            events.iter().position(|e| e.run_id == child.run_id && matches!(e.event, Event::RunDone { .. }));
        assert!(child_done < lead_done && lead_done.is_some(), "{name}: {events:?}");
        assert!(events.iter().filter(|e| e.run_id == "trip").all(|e| e.subagent.is_none()), "{name}");
    }
}

#[test]
fn a_paused_child_is_drift_checked_under_its_leads_policy_and_a_refusal_keeps_the_pause_for_the_fixed_agent() {
    use steadfast::core::machine::DriftPolicy;
    use steadfast::runtime::AgentOptions;
    let error = AgentOptions { on_agent_drift: DriftPolicy::Error, ..Default::default() };
    for (name, make) in stores() {
        let env = make();
        let runs = Runs::default();
        // The lead refuses drift; its sub-agent's own options say warn (the default) and are not what counts.
        let a = lead_with(&env, &runs, true, 11, |b| b).options(error.clone()).build().unwrap();
        let paused = block_on(a.send("trip", "plan it", SendOptions::default())).unwrap();
        assert_eq!(paused.status, RunStatus::AwaitingApproval, "{name}");
        let child = child_of(&env, "trip");
        let approval = child.approval_ids.first().cloned().unwrap();
        // Meanwhile the sub-agent changed (a tool added): the paused child level has drifted.
        let changed = lead_with(&env, &runs, true, 12, |b| b.tool_rc(counting_tool("note", &Counters::default())))
            .options(error.clone())
            .build()
            .unwrap();
        let e = block_on(changed.approvals().resolve(Resolve {
            id: approval.clone(),
            approved: true,
            ..Default::default()
        }))
        .unwrap_err();
        assert_eq!(
            (e.code, e.run_id.as_deref()),
            (ErrorCode::AgentDrift, Some(child.run_id.as_str())),
            "{name}: {e:?}"
        );
        assert!(runs.0.borrow().is_empty(), "{name}: nothing of the child ran under the changed agent");
        assert_eq!(block_on(env.store.load("trip")).unwrap().unwrap().status, RunStatus::AwaitingApproval, "{name}");
        // The seeds: "when a sub-agent's check rejects, the lead's approval and its awaiting-approval checkpoint
        // are put back, so fixing the sub-agent and resolving again works".
        let stored = block_on(env.store.get_approval(&approval)).unwrap().expect("the approval is kept");
        assert_eq!(stored.status, steadfast::core::approval::ApprovalStatus::Pending, "{name}: {stored:?}");
        assert_eq!(child_of(&env, "trip").status, RunStatus::AwaitingApproval, "{name}");
        let fixed = lead_with(&env, &runs, true, 13, |b| b).options(error.clone()).build().unwrap();
        let res =
            block_on(fixed.approvals().resolve(Resolve { id: approval.clone(), approved: true, ..Default::default() }));
        assert_eq!(res.map(|r| r.status).ok(), Some(RunStatus::Finished), "{name}: the fixed sub-agent resolves it");
        assert_eq!(block_on(env.store.load("trip")).unwrap().unwrap().status, RunStatus::Finished, "{name}");
        assert_eq!(runs.0.borrow().len(), 1, "{name}");
    }
}

#[test]
fn under_a_warning_lead_a_drifted_paused_child_resumes_and_its_agent_drift_event_names_the_sub_agent() {
    for (name, make) in stores() {
        let env = make();
        let runs = Runs::default();
        let a = lead(&env, &runs, true, 14);
        assert_eq!(
            block_on(a.send("trip", "plan it", SendOptions::default())).unwrap().status,
            RunStatus::AwaitingApproval
        );
        let child = child_of(&env, "trip");
        let approval = child.approval_ids.first().cloned().unwrap();
        let warned = Rc::new(RefCell::new(Vec::new()));
        let w = warned.clone();
        let changed = lead_with(&env, &runs, true, 15, |b| b.tool_rc(counting_tool("note", &Counters::default())))
            .warn(Rc::new(move |line: &str| w.borrow_mut().push(line.to_string())))
            .build()
            .unwrap();
        let (opts, sink) = listening();
        let res = block_on(
            changed.approvals().resolve_with(Resolve { id: approval, approved: true, ..Default::default() }, opts),
        );
        assert_eq!(res.map(|r| r.status).ok(), Some(RunStatus::Finished), "{name}");
        assert_eq!(block_on(env.store.load("trip")).unwrap().unwrap().status, RunStatus::Finished, "{name}");
        assert!(warned.borrow().iter().any(|l| l.contains(&child.run_id)), "{name}: {:?}", warned.borrow());
        // The seeds: "with 'warn' the agent.drift event carries subagent".
        let drift: Vec<_> = sink
            .events()
            .into_iter()
            .filter(|e| matches!(e.event, steadfast::core::events::Event::AgentDrift(_)))
            .collect();
        assert_eq!(drift.len(), 1, "{name}: one level drifted: {drift:?}");
        let tag = drift[0].subagent.as_ref().expect("the drift event names its sub-agent");
        assert_eq!(
            (drift[0].run_id.as_str(), tag.name.as_str(), tag.parent.as_str()),
            (child.run_id.as_str(), "research", "trip")
        );
    }
}

#[test]
fn a_leads_view_shows_what_its_unreturned_children_spent_so_far_and_none_once_their_results_are_in() {
    for (name, make) in stores() {
        let env = make();
        let runs = Runs::default();
        let a = lead(&env, &runs, true, 16);
        let paused = block_on(a.send("trip", "plan it", SendOptions::default())).unwrap();
        assert_eq!(paused.status, RunStatus::AwaitingApproval, "{name}");
        let child = child_of(&env, "trip");
        assert!(child.total_usage.input_tokens > 0, "{name}: the paused child spent a model turn");
        let (status, view) = get_run(&a, "trip");
        assert_eq!(status, 200, "{name}");
        let spent = serde_json::to_value(child.total_usage).unwrap();
        assert_eq!(view["children"][0]["usage"], spent, "{name}: {view}");
        assert_eq!(view["delegatedInFlight"], spent, "{name}: the child's spend so far, not yet in the lead's usage");
        let lead_own = serde_json::to_value(block_on(a.load("trip")).unwrap().unwrap().usage_view()).unwrap();
        assert_eq!(view["usage"], lead_own, "{name}");

        let approval = child.approval_ids[0].clone();
        block_on(a.approvals().resolve(Resolve { id: approval, approved: true, ..Default::default() })).unwrap();
        let (_, view) = get_run(&a, "trip");
        assert_eq!(view["status"], "finished", "{name}");
        assert_eq!(
            view["delegatedInFlight"],
            serde_json::Value::Null,
            "{name}: its result is recorded, with its spend"
        );
        let child = child_of(&env, "trip");
        assert_eq!(view["children"][0]["usage"], serde_json::to_value(child.total_usage).unwrap(), "{name}");
    }
}

#[test]
fn deleting_a_lead_deletes_its_child_runs_at_every_depth_and_a_new_send_starts_over() {
    for (name, make) in stores() {
        let env = make();
        let a = three_levels(&env, "bottom reached").build().unwrap();
        assert_eq!(
            block_on(a.send("deep", "go", SendOptions::default())).unwrap().text,
            "lead: planner: bottom reached"
        );
        let (_, planner_id) = called_child(&env, "deep", "planner");
        let (_, deeper_id) = called_child(&env, &planner_id, "deeper");
        block_on(a.delete("deep")).unwrap();
        for id in ["deep", planner_id.as_str(), deeper_id.as_str()] {
            assert!(block_on(env.store.load(id)).unwrap().is_none(), "{name}: {id} went with its lead");
        }
        // A new run under the same id starts over, with children of its own (another key scope: other ids).
        let r = block_on(a.send("deep", "go", SendOptions::default())).unwrap();
        assert_eq!(r.text, "lead: planner: bottom reached", "{name}");
        let (_, again) = called_child(&env, "deep", "planner");
        assert_ne!(again, planner_id, "{name}");
    }
}

#[test]
fn a_child_whose_lead_is_gone_is_refused_when_next_executed_or_decided_nothing_of_it_runs_and_it_is_removed_once_that_is_proof(
) {
    for (name, make) in stores() {
        let env = make();
        // Memory and objects read what was written: a lead not found is gone. Workers KV may serve a cached miss.
        let current = env.store.reads_current();
        assert_eq!(current, name != "journal", "{name}");
        let runs = Runs::default();
        let a = lead(&env, &runs, true, 17);
        let paused = block_on(a.send("trip", "plan it", SendOptions::default())).unwrap();
        assert_eq!(paused.status, RunStatus::AwaitingApproval, "{name}");
        let child = child_of(&env, "trip");
        let approval = child.approval_ids[0].clone();
        // A delete cut short after its first step: the lead is gone, its child is not.
        block_on(a.runs().delete("trip")).unwrap();
        assert!(block_on(env.store.load(&child.run_id)).unwrap().is_some(), "{name}");
        // A decision on the child's approval: refused with nothing recorded; its call never runs. Where reads are
        // current the child goes at once (its record with it); on KV it stays (a miss is no proof) until it has
        // not changed for a day.
        let decide = || {
            block_on(a.approvals().resolve(Resolve { id: approval.clone(), approved: true, ..Default::default() }))
                .unwrap_err()
        };
        let e = decide();
        assert_eq!(e.code, ErrorCode::CheckpointNotFound, "{name}: {e:?}");
        assert!(e.message.contains("which is not found"), "{name}: {}", e.message);
        if !current {
            let kept = block_on(env.store.get_approval(&approval)).unwrap().expect("the record stays");
            assert_eq!(kept.status, steadfast::core::approval::ApprovalStatus::Pending, "{name}");
            assert_eq!(stored(&env, &child.run_id).status, RunStatus::AwaitingApproval, "{name}: unchanged");
            env.clock.advance(23 * 3_600_000);
            assert_eq!(decide().code, ErrorCode::CheckpointNotFound, "{name}");
            assert!(block_on(env.store.load(&child.run_id)).unwrap().is_some(), "{name}: kept within a day");
            env.clock.advance(3_600_000 + 1);
            assert_eq!(decide().code, ErrorCode::CheckpointNotFound, "{name}");
        }
        assert!(block_on(env.store.load(&child.run_id)).unwrap().is_none(), "{name}: removed");
        assert!(runs.0.borrow().is_empty(), "{name}: nothing of the child ran");

        // The same through a resume (the sweep's way in): nothing to resume, nothing written; removed where reads
        // are current.
        let env = make();
        let a = lead(&env, &runs, true, 18);
        block_on(a.send("trip", "plan it", SendOptions::default())).unwrap();
        let child = child_of(&env, "trip");
        block_on(a.runs().delete("trip")).unwrap();
        let r = block_on(a.resume(&child.run_id, SendOptions::default())).unwrap();
        assert!(r.is_none(), "{name}: nothing to resume");
        match current {
            true => assert!(block_on(env.store.load(&child.run_id)).unwrap().is_none(), "{name}: removed"),
            false => assert_eq!(stored(&env, &child.run_id).seq, child.seq, "{name}: nothing written"),
        }
        assert!(runs.0.borrow().is_empty(), "{name}");
    }
}

#[test]
fn an_abort_of_the_lead_cancels_its_attached_child_and_the_child_never_runs_again() {
    for (name, make) in stores() {
        let env = make();
        let runs = Runs::default();
        let stop = steadfast::runtime::AbortSignal::new();
        // The child's tool is where the abort comes: it aborts the lead's signal, which the child's execution took on.
        let (signal, ran) = (stop.clone(), Rc::new(std::cell::Cell::new(0)));
        let count = ran.clone();
        let tripwire: Rc<dyn Tool> =
            Rc::new(FnTool::new("lookup", "looks something up", object_schema(), move |_, ctx| {
                let (signal, count) = (signal.clone(), count.clone());
                async move {
                    count.set(count.get() + 1);
                    signal.abort();
                    assert!(ctx.abort.is_aborted(), "the child's tool has its lead's signal");
                    Ok(ToolOutput::text("lookup: 42"))
                }
            }));
        let a = lead_with(&env, &runs, false, 23, |_| {
            let model = MockModel::by_turn(vec![MockTurn::tools([("lookup", json!({}))]), echo_result("found ")]);
            builder(&env, model, 47).instructions("You research.").tool_rc(tripwire.clone())
        })
        .build()
        .unwrap();
        let r = block_on(a.send("chief", "go", SendOptions { abort: Some(stop), ..Default::default() })).unwrap();
        assert_eq!(
            (r.status, r.finish_reason),
            (RunStatus::InProgress, Some(steadfast::core::checkpoint::FinishReason::Aborted)),
            "{name}"
        );
        // The lead records its call cancelled; the child was interrupted with it.
        let call = r.messages.iter().find_map(|m| match m {
            Message::Tool(t) => Some(t.clone()),
            _ => None,
        });
        assert_eq!(call.map(|c| c.kind), Some(steadfast::core::transcript::ResultKind::Cancelled), "{name}");
        let child = child_of(&env, "chief");
        assert_eq!(child.status, RunStatus::InProgress, "{name}: interrupted with its lead");
        // The child's next execution (the sweep's way in) runs nothing and removes it: its lead went on without it.
        assert!(block_on(a.resume(&child.run_id, SendOptions::default())).unwrap().is_none(), "{name}");
        assert!(block_on(env.store.load(&child.run_id)).unwrap().is_none(), "{name}: removed");
        // The lead's resume goes on from the cancelled result; the cancelled child's tool ran once, never again.
        let r = block_on(a.resume("chief", SendOptions::default())).unwrap().expect("resumed");
        assert_eq!(r.status, RunStatus::Finished, "{name}");
        assert!(r.text.starts_with("the team says: cancelled"), "{name}: {}", r.text);
        assert_eq!(ran.get(), 1, "{name}");
    }
}

#[test]
fn a_child_execution_for_a_run_that_is_no_child_is_refused_with_a_coded_error_and_nothing_written() {
    for (name, make) in stores() {
        let env = make();
        let a = lead(&env, &Runs::default(), false, 29);
        let call = steadfast::runtime::ChildExecution {
            run_id: "plain".into(),
            tool_call_id: "call_1".into(),
            task: Some("do it".into()),
            budget_cap: None,
            traceparent: None,
        };
        let e = block_on(a.execute_child(&call, None)).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidInput, "{name}: {e:?}");
        assert!(block_on(env.store.load("plain")).unwrap().is_none(), "{name}: nothing written");
        // A child run id whose lead never called it (no lead at all here):
        let child = steadfast::core::ids::subagent_run_id("chief", "research", "0123456789abcdef0123").unwrap();
        let call = steadfast::runtime::ChildExecution { run_id: child.clone(), ..call };
        let e = block_on(a.execute_child(&call, None)).unwrap_err();
        // refused, nothing of it runs.
        assert_eq!(e.code, ErrorCode::CheckpointNotFound, "{name}: {e:?}");
        assert!(block_on(env.store.load(&child)).unwrap().is_none(), "{name}: nothing written");
    }
}
