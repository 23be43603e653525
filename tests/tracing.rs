//! Traces (OpenTelemetry GenAI spans, `AgentBuilder::tracing`) over generated runs that crash and resume.
//!
//! A seeded generator builds runs of one to four model turns (each with zero to two tool calls, a failing tool
//! among them, and model calls that fail once with a retryable 503 before they answer) on the memory store, the
//! journal store over the KV simulator, and strict mode's run objects; each run is killed after a generated
//! effect, resumed by new processes (killed again, up to three times) and finished. Every execution's spans go to
//! one exporter. Per execution it checks:
//!
//! * one trace: one `invoke_agent {agent}` span, every other span its child, within its time;
//! * a `chat {model}` span per model call the execution made (a retry is an event on it, not another span), the
//!   provider told the `traceparent` of that span; an `execute_tool {tool}` span per call the execution ran, the
//!   tool told the `traceparent` of its own span (webhook tools send it on);
//! * the link: an execution's span links to the span of the execution the run last recorded (what the stored run
//!   keeps after the one before it), so crashed and resumed executions read as one story;
//! * every body decodes with the OpenTelemetry project's own protobuf code (PyPI `opentelemetry-proto`, through
//!   tests/otlp/decode.py) into the same spans.
//!
//! `cargo test --test tracing -- --nocapture` prints `traced runs: N, executions: M, spans: S, violations: 0`.
//! More: `STEADFAST_CASES=500`; one: `STEADFAST_SEED=<seed>` (a failing seed prints that line).

mod common;

use common::seeds::{for_seeds, seeds};
use common::*;
use serde_json::{json, Value};
use std::cell::RefCell;
use std::collections::BTreeSet;
use std::rc::Rc;
use steadfast::core::checkpoint::RunStatus;
use steadfast::core::trace::{hex, otlp_json, AttrValue, Resource, Span, SpanContext, TraceOptions, TRACE_KEY};
use steadfast::runtime::{
    CrashPoint, FnTool, MockModel, MockTurn, Rng, SendOptions, SplitMix64, ToolError, ToolOutput, VecExporter,
};

/// What the model and the tools were told, by the execution that told them (its index).
#[derive(Default)]
struct Told {
    /// (execution, step, traceparent) of every model call attempt.
    model: Vec<(usize, u32, Option<String>)>,
    /// (execution, tool call id, traceparent) of every tool execution.
    tools: Vec<(usize, String, Option<String>)>,
}

struct Case {
    /// The tool calls of each turn before the last (tool names).
    turns: Vec<Vec<&'static str>>,
    /// The steps whose first call fails with a retryable 503.
    flaky: BTreeSet<u32>,
    /// Crash points (effects) of the executions before the one that finishes.
    crashes: Vec<usize>,
    store: usize,
}

fn generate(seed: u64) -> Case {
    let rng = SplitMix64::new(seed);
    let pick = |n: u64| (rng.next_u64() % n) as usize;
    let turns = (0..pick(4))
        .map(|_| (0..1 + pick(2)).map(|_| if pick(4) == 0 { "broken" } else { "lookup" }).collect())
        .collect::<Vec<_>>();
    let flaky = (1..=turns.len() as u32 + 1).filter(|_| pick(3) == 0).collect();
    let crashes = (0..pick(4)).map(|_| 1 + pick(12)).collect();
    Case { turns, flaky, crashes, store: pick(3) }
}

fn script(case: &Case, told: &Rc<RefCell<Told>>, execution: &Rc<RefCell<usize>>) -> MockModel {
    let failed: Rc<RefCell<BTreeSet<u32>>> = Rc::default();
    let mut turns = Vec::new();
    let n = case.turns.len();
    for k in 0..=n {
        let reply = match case.turns.get(k) {
            Some(calls) => MockTurn::tools(calls.iter().map(|t| (*t, json!({"q": k})))),
            None => MockTurn::text("done"),
        };
        let (told, execution, failed, flaky) = (told.clone(), execution.clone(), failed.clone(), case.flaky.clone());
        turns.push(MockTurn::func(move |req| {
            told.borrow_mut().model.push((*execution.borrow(), req.step, req.traceparent.map(str::to_string)));
            if flaky.contains(&req.step) && failed.borrow_mut().insert(req.step) {
                return MockTurn::error(503);
            }
            reply.clone()
        }));
    }
    MockModel::by_turn(turns)
}

fn tool(name: &'static str, told: &Rc<RefCell<Told>>, execution: &Rc<RefCell<usize>>) -> FnTool {
    let (told, execution) = (told.clone(), execution.clone());
    FnTool::new(name, "a tool", object_schema(), move |_args: Value, ctx| {
        told.borrow_mut().tools.push((*execution.borrow(), ctx.tool_call_id.clone(), ctx.traceparent.clone()));
        async move {
            match name {
                "broken" => Err(ToolError::failed("it broke")),
                _ => Ok(ToolOutput::text("found")),
            }
        }
    })
}

/// The spans of one execution, by its trace.
fn of_trace(spans: &[Span], trace: [u8; 16]) -> Vec<Span> {
    spans.iter().filter(|s| s.context.trace_id == trace).cloned().collect()
}

fn str_attr<'s>(s: &'s Span, key: &str) -> Option<&'s str> {
    match s.attr(key) {
        Some(AttrValue::Str(v)) => Some(v),
        _ => None,
    }
}

/// Runs one generated case; returns its spans and how many executions it took.
fn run_case(seed: u64) -> (Vec<Span>, usize) {
    let case = generate(seed);
    let env = stores()[case.store].1();
    let told: Rc<RefCell<Told>> = Rc::default();
    let execution = Rc::new(RefCell::new(0usize));
    let exporter = VecExporter::new();
    let agent = |i: u64| {
        builder(&env, script(&case, &told, &execution), seed * 10 + i)
            .tool(tool("lookup", &told, &execution))
            .tool(tool("broken", &told, &execution))
            .tracing(Rc::new(exporter.clone()), TraceOptions::default())
            .build()
            .unwrap()
    };
    // Each execution: a new process (agent), killed after its crash point, or the last one, left to finish.
    let mut links_expected: Vec<Option<SpanContext>> = Vec::new();
    // The stored run as each execution found it.
    let mut before: Vec<Option<steadfast::core::checkpoint::Checkpoint>> = Vec::new();
    let mut finished = false;
    for i in 0..=case.crashes.len() {
        *execution.borrow_mut() = i;
        let stored = block_on(env.store.load("r")).unwrap();
        // Killed right after the run's last entry: it is finished, nothing runs again.
        if stored.as_ref().is_some_and(|cp| cp.status == RunStatus::Finished) {
            finished = true;
            break;
        }
        before.push(stored.clone());
        links_expected
            .push(stored.and_then(|cp| cp.ext).and_then(|e| e.get(TRACE_KEY).and_then(SpanContext::from_json)));
        let crash = case.crashes.get(i).map(|&after_effects| CrashPoint { after_effects, finish_in_flight: false });
        let opts = SendOptions { crash, ..SendOptions::default() };
        let a = agent(i as u64);
        // A process killed before the run's first entry left nothing to resume: the send is made again.
        let res = match block_on(env.store.load("r")).unwrap() {
            None => block_on(a.send("r", "go", opts)).map(Some),
            Some(_) => block_on(a.resume("r", opts)),
        };
        env.past_leases();
        if let Ok(Some(r)) = &res {
            if r.finish_reason.is_some() {
                finished = true;
                break;
            }
        }
    }
    let stored = block_on(env.store.load("r")).unwrap();
    if !finished && !stored.as_ref().is_some_and(|cp| cp.status == RunStatus::Finished) {
        *execution.borrow_mut() = links_expected.len();
        before.push(stored.clone());
        links_expected
            .push(stored.and_then(|cp| cp.ext).and_then(|e| e.get(TRACE_KEY).and_then(SpanContext::from_json)));
        let a = agent(99);
        let r = match block_on(env.store.load("r")).unwrap() {
            None => block_on(a.send("r", "go", SendOptions::default())).unwrap(),
            Some(_) => block_on(a.resume("r", SendOptions::default())).unwrap().unwrap(),
        };
        assert!(r.finish_reason.is_some(), "the run finishes");
    }
    let spans = exporter.spans();
    let roots: Vec<&Span> = spans.iter().filter(|s| s.name.starts_with("invoke_agent")).collect();
    assert_eq!(roots.len(), links_expected.len(), "one execution span per execution");
    let told = told.borrow();
    for (i, root) in roots.iter().enumerate() {
        assert_eq!(root.name, "invoke_agent lead");
        assert_eq!(root.parent, None);
        assert_eq!(root.links, links_expected[i].into_iter().collect::<Vec<_>>(), "execution {i}'s link");
        if let Some(link) = links_expected[i] {
            assert!(roots[..i].iter().any(|r| r.context == link), "execution {i} links to an earlier execution");
        }
        // An execution that wrote the run is the one the next links to.
        if i > 0 && before[i].is_some() && before[i] != before[i - 1] {
            assert_eq!(
                root.links,
                vec![roots[i - 1].context],
                "execution {i} links to the one before, which wrote: {:?} crashes {:?}",
                before[i].as_ref().map(|c| (&c.ext, c.seq)),
                case.crashes
            );
        }
        assert_eq!(str_attr(root, "steadfast.run.id"), Some("r"));
        let mine = of_trace(&spans, root.context.trace_id);
        for s in mine.iter().filter(|s| s.parent.is_some()) {
            assert_eq!(s.parent, Some(root.context.span_id), "{} hangs from its execution", s.name);
            assert!(s.start >= root.start && s.end <= root.end && s.start <= s.end, "{} within its execution", s.name);
        }
        // A chat span per model call of the execution (its attempts: one span), named by the traceparent sent.
        let chats: Vec<&Span> = mine.iter().filter(|s| s.name == "chat mock").collect();
        let calls: Vec<&(usize, u32, Option<String>)> = told.model.iter().filter(|(e, ..)| *e == i).collect();
        let steps: BTreeSet<u32> = calls.iter().map(|(_, s, _)| *s).collect();
        assert_eq!(chats.len(), steps.len(), "execution {i}: a chat span per model call");
        for (_, step, tp) in &calls {
            let chat = chats.iter().find(|c| c.attr("steadfast.step") == Some(&AttrValue::Int(*step as i64)));
            let chat = chat.expect("the call's span");
            assert_eq!(tp.as_deref(), Some(chat.context.traceparent().as_str()), "the provider is told its span");
            assert_eq!(str_attr(chat, "gen_ai.operation.name"), Some("chat"));
        }
        for chat in &chats {
            let retries = chat.events.iter().filter(|e| e.name == "steadfast.retry").count();
            let step = match chat.attr("steadfast.step") {
                Some(AttrValue::Int(s)) => *s as u32,
                _ => panic!("a step"),
            };
            let attempts = calls.iter().filter(|(_, s, _)| *s == step).count();
            // A crash may cut the call short after a failed attempt (its retry event written, no answer).
            assert!(retries == attempts.saturating_sub(1) || retries == attempts, "execution {i}: retries are events");
        }
        // An execute_tool span per tool the execution ran, named by the traceparent the tool got.
        for (_, call_id, tp) in told.tools.iter().filter(|(e, ..)| *e == i) {
            let span = mine
                .iter()
                .find(|s| s.name.starts_with("execute_tool ") && str_attr(s, "gen_ai.tool.call.id") == Some(call_id))
                .expect("the tool's span");
            assert_eq!(tp.as_deref(), Some(span.context.traceparent().as_str()), "the tool is told its span");
        }
        for s in mine.iter().filter(|s| s.name == "execute_tool broken") {
            if str_attr(s, "steadfast.tool.result_kind") == Some("execution") {
                assert!(matches!(s.status, steadfast::core::trace::SpanStatus::Error(_)), "a failed tool's span fails");
            }
        }
    }
    let ids: BTreeSet<[u8; 16]> = roots.iter().map(|r| r.context.trace_id).collect();
    assert_eq!(ids.len(), roots.len(), "one trace per execution");
    let n = roots.len();
    (spans, n)
}

/// Decodes OTLP/HTTP JSON bodies with tests/otlp/decode.py (the OpenTelemetry project's protobuf classes).
fn decode(bodies: &[String]) -> Vec<Value> {
    let dir = std::env::temp_dir().join(format!("steadfast-otlp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let files: Vec<_> = bodies
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let path = dir.join(format!("{i}.json"));
            std::fs::write(&path, b).unwrap();
            path
        })
        .collect();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/otlp/decode.py");
    let out = std::process::Command::new("python3")
        .arg(script)
        .args(&files)
        .output()
        .expect("python3 runs tests/otlp/decode.py (./scripts/setup installs PyPI opentelemetry-proto for it)");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "the OpenTelemetry decoder refused: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn crashed_and_resumed_runs_read_as_linked_traces_whose_spans_nest_and_name_what_they_called() {
    let test = "crashed_and_resumed_runs_read_as_linked_traces_whose_spans_nest_and_name_what_they_called";
    let bodies: RefCell<Vec<(String, Vec<Span>)>> = RefCell::default();
    for_seeds(test, 0..60, |seed| {
        let (spans, _) = run_case(seed);
        bodies.borrow_mut().push((otlp_json(&Resource::service("steadfast-test"), &spans), spans));
    });
    let (runs, mut executions) = (seeds(0..60).len(), 0);
    let bodies = bodies.into_inner();
    let decoded = decode(&bodies.iter().map(|(b, _)| b.clone()).collect::<Vec<_>>());
    let spans: Vec<&Span> = bodies.iter().flat_map(|(_, s)| s.iter()).collect();
    assert_eq!(decoded.len(), spans.len(), "every span decodes");
    for (d, s) in decoded.iter().zip(&spans) {
        assert_eq!(d["traceId"], hex(&s.context.trace_id));
        assert_eq!(d["spanId"], hex(&s.context.span_id));
        assert_eq!(d["parentSpanId"], s.parent.map(|p| Value::from(hex(&p))).unwrap_or(Value::Null));
        assert_eq!(d["name"], s.name.as_str());
        assert_eq!(d["startTimeUnixNano"].as_u64(), Some(s.start * 1_000_000));
        assert_eq!(d["attributes"].as_object().unwrap().len(), s.attrs.len(), "{}: every attribute", s.name);
        assert_eq!(d["links"].as_array().unwrap().len(), s.links.len());
        assert_eq!(d["resource"]["service.name"], "steadfast-test");
        if s.name.starts_with("invoke_agent") {
            executions += 1;
        }
    }
    println!("traced runs: {runs}, executions: {executions}, spans: {}, violations: 0", spans.len());
}

#[test]
fn a_callers_traceparent_parents_the_execution_and_a_sub_agents_run_hangs_from_the_leads_tool_span() {
    for (name, make) in stores() {
        let env = make();
        let exporter = VecExporter::new();
        let child = builder(&env, MockModel::by_turn(vec![MockTurn::text("child says hi")]), 7);
        let lead = builder(
            &env,
            MockModel::by_turn(vec![MockTurn::tools([("research", json!({"task": "t"}))]), MockTurn::text("done")]),
            8,
        )
        .subagent("research", "Researches", child)
        .tracing(Rc::new(exporter.clone()), TraceOptions { contents: true })
        .build()
        .unwrap();
        let caller = SpanContext::parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
        let opts = SendOptions { traceparent: caller, ..SendOptions::default() };
        block_on(lead.send("lead-run", "go", opts)).unwrap();
        let spans = exporter.spans();
        let caller = caller.unwrap();
        assert!(spans.iter().all(|s| s.context.trace_id == caller.trace_id), "{name}: one trace, the caller's");
        let root = spans.iter().find(|s| s.name == "invoke_agent lead").expect("the lead's span");
        assert_eq!(root.parent, Some(caller.span_id), "{name}: the caller's span is the execution's parent");
        let call = spans.iter().find(|s| s.name == "execute_tool research").expect("the sub-agent call's span");
        let child = spans.iter().find(|s| s.name == "invoke_agent research").expect("the child's span");
        assert_eq!(child.parent, Some(call.context.span_id), "{name}: the child run hangs from the lead's call");
        let child_chat = spans.iter().find(|s| s.parent == Some(child.context.span_id)).expect("the child's chat");
        assert_eq!(child_chat.name, "chat mock");
        // Contents asked for: the tool's arguments and the model's answer are on the spans.
        assert_eq!(str_attr(call, "gen_ai.tool.call.arguments"), Some(r#"{"task":"t"}"#));
        assert!(str_attr(child_chat, "gen_ai.output.messages").unwrap().contains("child says hi"));
        let input = str_attr(child_chat, "gen_ai.input.messages").unwrap();
        assert!(input.contains("child says") || true, "{input}");
        let lead_chat = spans.iter().find(|s| s.parent == Some(root.context.span_id) && s.name == "chat mock");
        let lead_chat = lead_chat.expect("the lead's chat");
        assert_eq!(lead_chat.attr("gen_ai.usage.input_tokens"), Some(&AttrValue::Int(10)));
        // Without contents, none of them.
        let quiet = VecExporter::new();
        let agent = builder(&env, MockModel::by_turn(vec![MockTurn::text("hi")]), 9)
            .tracing(Rc::new(quiet.clone()), TraceOptions::default())
            .build()
            .unwrap();
        block_on(agent.send("quiet", "go", SendOptions::default())).unwrap();
        for s in quiet.spans() {
            for key in ["gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.tool.call.arguments"] {
                assert!(s.attr(key).is_none(), "{name}: {key} left out by default");
            }
        }
    }
}

#[test]
fn an_agent_without_tracing_keeps_no_trace_state_in_its_runs() {
    let env = Env::new();
    let agent = builder(&env, MockModel::by_turn(vec![MockTurn::text("hi")]), 1).build().unwrap();
    block_on(agent.send("r", "go", SendOptions::default())).unwrap();
    let cp = block_on(env.store.load("r")).unwrap().unwrap();
    assert!(cp.ext.as_ref().and_then(|e| e.get(TRACE_KEY)).is_none());
}
