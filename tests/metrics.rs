//! The counters the seeds say to monitor (issue 31, part 5), through the runtime on every store: "retry rate,
//! fallback rate, loop stops, budget stops, duplicate reconciliations, quarantines … are monitored". Each scenario
//! below makes one of them happen under an agent of its own name, and the counters say exactly that, per agent
//! (a sub-agent under its name), in memory — no store write is made for them.

mod common;

use common::*;
use serde_json::json;
use std::cell::Cell;
use std::rc::Rc;
use steadfast::core::breaker::BreakerOptions;
use steadfast::core::retry::RetryPolicy;
use steadfast::core::sweep::SweepOptions;
use steadfast::runtime::{
    AgentOptions, Counter, CrashPoint, FnTool, Metrics, MockModel, MockTurn, NoListener, SendOptions, Tool, ToolError,
    ToolOutput,
};

const RETRY: RetryPolicy = RetryPolicy { max_attempts: 2, base_ms: 1, cap_ms: 2, deadline_ms: 60_000 };

/// Every counter of `agent`, in [`Counter`]'s order.
fn counts(m: &Metrics, agent: &str) -> [u64; 8] {
    use Counter::*;
    [ModelCalls, Retries, Fallbacks, BreakerRefusals, LoopStops, BudgetStops, Reconciliations, Quarantines]
        .map(|c| m.get(agent, c))
}

#[test]
fn each_counter_counts_what_it_names_per_agent_on_every_store() {
    for (name, make) in stores() {
        let env = make();
        let m = Rc::new(Metrics::new());
        let writes = || env.store.counters().writes;
        let opts = |o: AgentOptions| AgentOptions { retry: RETRY, ..o };
        let go = |a: &steadfast::runtime::Agent, run: &str| block_on(a.send(run, "go", SendOptions::default()));

        // A retry: the first attempt fails, the second answers.
        let a = builder(&env, MockModel::new(vec![MockTurn::error(503), MockTurn::text("ok")]), 1)
            .name("retrying")
            .options(opts(AgentOptions::default()))
            .metrics(m.clone())
            .build()
            .unwrap();
        let before = writes();
        assert_eq!(go(&a, "r1").unwrap().text, "ok", "{name}");
        let run_writes = writes() - before;
        assert_eq!(counts(&m, "retrying"), [2, 1, 0, 0, 0, 0, 0, 0], "{name}");

        // A fallback: the agent's model fails its share (1 of 2 attempts), the backup answers.
        let a = builder(&env, MockModel::new(vec![MockTurn::error(503)]).with_id("primary"), 2)
            .fallback(MockModel::new(vec![MockTurn::text("backup")]).with_id("backup"))
            .name("falling")
            .options(opts(AgentOptions::default()))
            .metrics(m.clone())
            .build()
            .unwrap();
        let before = writes();
        assert_eq!(go(&a, "r2").unwrap().text, "backup", "{name}");
        assert_eq!(writes() - before, run_writes, "{name}: counting writes nothing");
        assert_eq!(counts(&m, "falling"), [2, 0, 1, 0, 0, 0, 0, 0], "{name}");

        // A breaker refusal: two failed attempts open it (2 calls, 100 %), the next run's call is refused.
        let breaker = BreakerOptions { window_ms: 60_000, min_calls: 2, failure_percent: 100, cool_down_ms: 60_000 };
        let down = MockModel::new(vec![MockTurn::error(503), MockTurn::error(503)]).with_id("down");
        let a = builder(&env, down, 3)
            .name("broken")
            .options(opts(AgentOptions { breaker: Some(breaker), ..AgentOptions::default() }))
            .metrics(m.clone())
            .build()
            .unwrap();
        assert!(go(&a, "r3").is_err(), "{name}");
        let e = go(&a, "r4").unwrap_err();
        assert_eq!(e.code, steadfast::ErrorCode::ProviderCircuitOpen, "{name}");
        assert_eq!(counts(&m, "broken"), [2, 1, 0, 1, 0, 0, 0, 0], "{name}");

        // A loop stop: the same failing call, turn after turn.
        let same = (0..6).map(|_| MockTurn::tools([("fails", json!({"x": 1}))])).collect();
        let fails: Rc<dyn Tool> = Rc::new(FnTool::new("fails", "fails", json!({"type": "object"}), |_a, _c| async {
            Err::<ToolOutput, _>(ToolError::typed("Boom", "no"))
        }));
        let a = builder(&env, MockModel::new(same), 4)
            .tool_rc(fails)
            .name("looping")
            .options(opts(AgentOptions { max_steps: 20, ..AgentOptions::default() }))
            .metrics(m.clone())
            .build()
            .unwrap();
        let r = go(&a, "r5").unwrap();
        assert_eq!(r.finish_reason, Some(steadfast::core::checkpoint::FinishReason::LoopDetected), "{name}");
        assert_eq!(counts(&m, "looping")[4], 1, "{name}");

        // A budget stop: the first turn spends 15 tokens of 10, the next model call is not made.
        let read: Rc<dyn Tool> = Rc::new(FnTool::new("read", "reads", json!({"type": "object"}), |_a, _c| async {
            Ok(ToolOutput::text("read"))
        }));
        let script = vec![MockTurn::tools([("read", json!({}))]), MockTurn::text("never")];
        let a = builder(&env, MockModel::new(script), 5)
            .tool_rc(read)
            .name("bounded")
            .options(opts(AgentOptions { max_total_tokens: Some(10), ..AgentOptions::default() }))
            .metrics(m.clone())
            .build()
            .unwrap();
        let r = go(&a, "r6").unwrap();
        assert_eq!(r.finish_reason, Some(steadfast::core::checkpoint::FinishReason::BudgetExceeded), "{name}");
        assert_eq!(counts(&m, "bounded"), [1, 0, 0, 0, 0, 1, 0, 0], "{name}");
        // With onExceeded: throw the call fails, and the stop counts all the same.
        let read: Rc<dyn Tool> = Rc::new(FnTool::new("read", "reads", json!({"type": "object"}), |_a, _c| async {
            Ok(ToolOutput::text("read"))
        }));
        let script = vec![MockTurn::tools([("read", json!({}))]), MockTurn::text("never")];
        let throw = steadfast::core::budget::OnExceeded::Throw;
        let a = builder(&env, MockModel::new(script), 10)
            .tool_rc(read)
            .name("throwing")
            .options(opts(AgentOptions { max_total_tokens: Some(10), on_exceeded: throw, ..AgentOptions::default() }))
            .metrics(m.clone())
            .build()
            .unwrap();
        assert_eq!(go(&a, "r9").unwrap_err().code, steadfast::ErrorCode::BudgetExceeded, "{name}");
        assert_eq!(counts(&m, "throwing"), [1, 0, 0, 0, 0, 1, 0, 0], "{name}");

        // A duplicate reconciliation: the process dies after the charge ran, before its result was recorded; the
        // resume finds the charge done (by its key) and records it instead of charging again.
        let charged = Rc::new(Cell::new(0));
        let charge = |charged: Rc<Cell<u32>>| -> Rc<dyn Tool> {
            let c = charged.clone();
            let t = FnTool::new("charge", "charges", json!({"type": "object"}), move |_a, _ctx| {
                let c = c.clone();
                async move {
                    c.set(c.get() + 1);
                    Ok(ToolOutput::text("charged"))
                }
            });
            Rc::new(t.reconcile_with(move |_a, _key| {
                let done = charged.get() > 0;
                async move { Ok(done.then(|| ToolOutput::text("charged (found)"))) }
            }))
        };
        let script = || vec![MockTurn::tools([("charge", json!({}))]), MockTurn::text("done")];
        let dying = builder(&env, MockModel::by_turn(script()), 6)
            .tool_rc(charge(charged.clone()))
            .name("paying")
            .options(opts(AgentOptions::default()))
            .metrics(m.clone())
            .build()
            .unwrap();
        let crash = Some(CrashPoint { after_effects: 8, finish_in_flight: true });
        assert!(block_on(dying.send("r7", "go", SendOptions { crash, ..SendOptions::default() })).is_err());
        env.past_leases();
        let again = builder(&env, MockModel::by_turn(script()), 7)
            .tool_rc(charge(charged.clone()))
            .name("paying")
            .options(opts(AgentOptions::default()))
            .metrics(m.clone())
            .build()
            .unwrap();
        assert_eq!(block_on(again.resume("r7", SendOptions::default())).unwrap().unwrap().text, "done", "{name}");
        assert_eq!(charged.get(), 1, "{name}: charged once");
        assert_eq!(counts(&m, "paying")[6], 1, "{name}");

        // A quarantine: a run failing retryably at the attempt cap, and its sub-agent counted under its own name.
        let child = builder(&env, MockModel::new(vec![MockTurn::text("found")]), 8);
        let lead_script = vec![MockTurn::tools([("research", json!({"task": "look"}))]), MockTurn::error(500)];
        let a = builder(&env, MockModel::new(lead_script), 9)
            .subagent("research", "researches", child)
            .name("leading")
            .options(AgentOptions { retry: RetryPolicy { max_attempts: 1, ..RETRY }, ..AgentOptions::default() })
            .metrics(m.clone())
            .build()
            .unwrap();
        assert!(go(&a, "r8").is_err(), "{name}");
        assert_eq!(counts(&m, "research")[0], 1, "{name}: the child's model call, under the sub-agent's name");
        let sweep = SweepOptions { max_attempts: 1, ..SweepOptions::default() };
        let report = block_on(a.sweep(&sweep, &NoListener)).unwrap();
        // The runs the earlier scenarios left failing (r3, r4) are at the cap too: the sweeping agent counts them.
        assert_eq!(report.quarantined, ["r3", "r4", "r8"], "{name}");
        assert_eq!(counts(&m, "leading"), [2, 0, 0, 0, 0, 0, 0, 3], "{name}");
    }
}

#[test]
fn get_metrics_answers_the_prometheus_text_behind_the_token() {
    let env = Env::new();
    let a = builder(&env, MockModel::new(vec![MockTurn::error(503), MockTurn::text("ok")]), 1)
        .options(AgentOptions { retry: RETRY, ..AgentOptions::default() })
        .build()
        .unwrap();
    block_on(a.send("r", "go", SendOptions::default())).unwrap();
    let api = steadfast::front::api::Api::new(a, Some("tok-0123456789abcdef".into()));
    let get = |auth: Option<&str>| {
        let headers = auth.map(|t| vec![("authorization".to_string(), format!("Bearer {t}"))]).unwrap_or_default();
        block_on(api.handle(steadfast::front::api::ApiRequest {
            method: "GET".into(),
            path: "/metrics".into(),
            headers,
            ..Default::default()
        }))
    };
    assert_eq!(get(None).status, 401);
    assert_eq!(get(Some("wrong-token-0123456789")).status, 401);
    let r = get(Some("tok-0123456789abcdef"));
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.headers.iter().any(|(k, v)| k == "content-type" && v.starts_with("text/plain; version=0.0.4")));
    for line in [
        "# TYPE steadfast_model_calls_total counter",
        "steadfast_model_calls_total{agent=\"lead\"} 2",
        "steadfast_model_retries_total{agent=\"lead\"} 1",
        "steadfast_quarantines_total{agent=\"lead\"} 0",
    ] {
        assert!(r.body.lines().any(|l| l == line), "{line} in\n{}", r.body);
    }
}
