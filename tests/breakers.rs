//! A circuit breaker per dependency (issue 31, part 4) through the runtime, on every store: "a circuit breaker
//! per dependency". Once a provider's recent calls failed enough, its calls are not made for the cool-down: a
//! call fails at once with `STEADFAST_PROVIDER_CIRCUIT_OPEN` (retryable), or goes straight to a fallback model;
//! then one probe decides. A webhook host's breaker answers its tool's calls with a `CircuitOpenError` result the
//! model reads. Agents holding the same `Breakers` (the Worker: an isolate's requests) share what they learned;
//! other replicas learn it from the sweep's stored state.

mod common;

use common::*;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use steadfast::core::breaker::{BreakerOptions, BreakerState};
use steadfast::core::events::Event;
use steadfast::core::retry::RetryPolicy;
use steadfast::runtime::{
    AgentOptions, Breakers, MockModel, MockTurn, NoListener, SendOptions, Tool, ToolContext, ToolError, ToolOutput,
    VecSink,
};
use steadfast::ErrorCode;

/// A model `id` that answers 503 while `down` is set and "ok" otherwise, counting its calls.
fn flaky(id: &str, down: &Rc<Cell<bool>>, calls: &Rc<RefCell<u32>>) -> MockModel {
    let (down, calls) = (down.clone(), calls.clone());
    let turn = MockTurn::func(move |_| {
        *calls.borrow_mut() += 1;
        if down.get() {
            MockTurn::error(503)
        } else {
            MockTurn::text("ok")
        }
    });
    MockModel::new((0..1_000).map(|_| turn.clone()).collect()).with_id(id)
}

fn options() -> AgentOptions {
    AgentOptions {
        retry: RetryPolicy { max_attempts: 2, base_ms: 10, cap_ms: 20, deadline_ms: 60_000 },
        breaker: Some(BreakerOptions { window_ms: 60_000, min_calls: 4, failure_percent: 50, cool_down_ms: 10_000 }),
        ..AgentOptions::default()
    }
}

#[test]
fn an_open_breaker_fails_calls_fast_until_a_probe_after_the_cool_down_closes_it() {
    for (name, make) in stores() {
        let env = make();
        let (down, calls) = (Rc::new(Cell::new(true)), Rc::new(RefCell::new(0)));
        let breakers = Rc::new(Breakers::new());
        let a =
            builder(&env, flaky("m", &down, &calls), 1).options(options()).breakers(breakers.clone()).build().unwrap();
        for run in ["r1", "r2"] {
            let e = block_on(a.send(run, "go", SendOptions::default())).unwrap_err();
            assert_eq!(e.code, ErrorCode::ProviderUnavailable, "{name}");
        }
        assert_eq!(*calls.borrow(), 4, "{name}: two attempts each");
        assert!(matches!(breakers.state("m"), Some(BreakerState::Open { .. })), "{name}: 4 of 4 failed");
        // Open: no call is made, the error says so and when to try again.
        let e = block_on(a.send("r3", "go", SendOptions::default())).unwrap_err();
        assert_eq!((e.code, e.retryable), (ErrorCode::ProviderCircuitOpen, true), "{name}: {e}");
        assert!(e.retry_after_ms.is_some_and(|ms| ms <= 10_000), "{name}: {e:?}");
        assert_eq!(*calls.borrow(), 4, "{name}: no call while open");
        // The provider is back; after the cool-down a probe goes through and closes it.
        down.set(false);
        env.clock.advance(10_001);
        let r = block_on(a.resume("r3", SendOptions::default())).unwrap().expect("unfinished");
        assert_eq!(r.text, "ok", "{name}");
        assert_eq!(breakers.state("m"), Some(BreakerState::Closed), "{name}");
        assert_eq!(*calls.borrow(), 5, "{name}: the probe");
    }
}

#[test]
fn with_a_fallback_an_open_breaker_sends_calls_straight_to_it() {
    for (name, make) in stores() {
        let env = make();
        let (down, calls) = (Rc::new(Cell::new(true)), Rc::new(RefCell::new(0)));
        let (up, backup_calls) = (Rc::new(Cell::new(false)), Rc::new(RefCell::new(0)));
        let a = builder(&env, flaky("primary", &down, &calls), 1)
            .fallback(flaky("backup", &up, &backup_calls))
            .options(options())
            .build()
            .unwrap();
        // Each run: the primary's share (1 of 2 attempts), then the backup answers. Four runs open the breaker.
        for i in 0..4 {
            let r = block_on(a.send(&format!("r{i}"), "go", SendOptions::default())).unwrap();
            assert_eq!(r.text, "ok", "{name}");
        }
        assert_eq!(*calls.borrow(), 4, "{name}");
        let sink = VecSink::new();
        let opts = SendOptions { events: Some(Rc::new(sink.clone())), ..SendOptions::default() };
        let r = block_on(a.send("r4", "go", opts)).unwrap();
        assert_eq!(r.text, "ok", "{name}");
        assert_eq!(*calls.borrow(), 4, "{name}: the open breaker skipped the primary");
        let codes: Vec<ErrorCode> = sink
            .events()
            .iter()
            .filter_map(|e| match &e.event {
                Event::ProviderFallback { code, .. } => Some(*code),
                _ => None,
            })
            .collect();
        assert_eq!(codes, [ErrorCode::ProviderCircuitOpen], "{name}");
    }
}

#[test]
fn agents_holding_the_same_breakers_share_what_they_learned_and_others_do_not() {
    let env = Env::new();
    let (down, calls) = (Rc::new(Cell::new(true)), Rc::new(RefCell::new(0)));
    let shared = Rc::new(Breakers::new());
    let first =
        builder(&env, flaky("m", &down, &calls), 1).options(options()).breakers(shared.clone()).build().unwrap();
    for run in ["a", "b"] {
        assert!(block_on(first.send(run, "go", SendOptions::default())).is_err());
    }
    let second = builder(&env, flaky("m", &down, &calls), 2).options(options()).breakers(shared).build().unwrap();
    let e = block_on(second.send("c", "go", SendOptions::default())).unwrap_err();
    assert_eq!(e.code, ErrorCode::ProviderCircuitOpen);
    let own = builder(&env, flaky("m", &down, &calls), 3).options(options()).build().unwrap();
    let e = block_on(own.send("d", "go", SendOptions::default())).unwrap_err();
    assert_eq!(e.code, ErrorCode::ProviderUnavailable, "its own breakers saw no failure yet");
    // Off unless configured: without `breaker`, failures never stop calls.
    let off = builder(&env, flaky("m", &down, &calls), 4)
        .options(AgentOptions { breaker: None, ..options() })
        .build()
        .unwrap();
    for run in ["e", "f", "g", "h"] {
        assert_eq!(
            block_on(off.send(run, "go", SendOptions::default())).unwrap_err().code,
            ErrorCode::ProviderUnavailable
        );
    }
}

#[test]
fn a_sweep_tick_carries_an_open_breaker_to_the_other_replicas_and_it_closes_there_by_its_own_probe() {
    for (name, make) in stores() {
        let env = make();
        let (down, calls) = (Rc::new(Cell::new(true)), Rc::new(RefCell::new(0)));
        // Two replicas (isolates) on one store, each with its own breakers.
        let (mine, theirs) = (Rc::new(Breakers::new()), Rc::new(Breakers::new()));
        let here =
            builder(&env, flaky("m", &down, &calls), 1).options(options()).breakers(mine.clone()).build().unwrap();
        let there =
            builder(&env, flaky("m", &down, &calls), 2).options(options()).breakers(theirs.clone()).build().unwrap();
        for run in ["r1", "r2"] {
            assert!(block_on(here.send(run, "go", SendOptions::default())).is_err(), "{name}");
        }
        let Some(BreakerState::Open { until_ms }) = mine.state("m") else { panic!("{name}: open here") };
        assert_eq!(theirs.state("m"), None, "{name}: the other replica knows nothing yet");
        // This replica's tick records it (its resumes fail fast: no call is made) …
        block_on(here.sweep(&Default::default(), &NoListener)).unwrap();
        assert_eq!(*calls.borrow(), 4, "{name}: the tick made no call while open");
        let stored = block_on(env.store.get_state("breakers")).unwrap();
        assert_eq!(stored, Some(format!("{until_ms} m\n")), "{name}");
        // … and the other replica's tick takes it in: its calls are refused too, none is made.
        block_on(there.sweep(&Default::default(), &NoListener)).unwrap();
        assert_eq!(theirs.state("m"), Some(BreakerState::Open { until_ms }), "{name}");
        let e = block_on(there.send("r3", "go", SendOptions::default())).unwrap_err();
        assert_eq!(e.code, ErrorCode::ProviderCircuitOpen, "{name}");
        assert_eq!(*calls.borrow(), 4, "{name}");
        // After the cool-down the other replica probes by itself; the provider is back, so it closes, and its next
        // tick records no open breaker.
        down.set(false);
        env.clock.advance(10_001);
        let r = block_on(there.send("r4", "go", SendOptions::default())).unwrap();
        assert_eq!((r.text.as_str(), theirs.state("m")), ("ok", Some(BreakerState::Closed)), "{name}");
        env.clock.advance(600_001);
        block_on(there.sweep(&Default::default(), &NoListener)).unwrap();
        let stored = block_on(env.store.get_state("breakers")).unwrap();
        assert_eq!(stored.as_deref(), Some(""), "{name}: nothing open is recorded");
        // A stored text that does not read (lines without a time, or a time that is not a number) opens nothing.
        block_on(env.store.put_state("breakers", "soon m\n\n12\n")).unwrap();
        block_on(there.sweep(&Default::default(), &NoListener)).unwrap();
        assert_eq!(theirs.state("m"), Some(BreakerState::Closed), "{name}");
    }
}

/// A webhook-like tool on host `hooks.example` that fails (a 503 its host is to blame for) while `down` is set.
struct Hook {
    down: Rc<Cell<bool>>,
    runs: Rc<Cell<u32>>,
}

#[async_trait::async_trait(?Send)]
impl Tool for Hook {
    fn name(&self) -> &str {
        "hook"
    }
    fn description(&self) -> &str {
        "calls hooks.example"
    }
    fn input_schema(&self) -> &serde_json::Value {
        static SCHEMA: std::sync::OnceLock<serde_json::Value> = std::sync::OnceLock::new();
        SCHEMA.get_or_init(|| serde_json::json!({"type": "object"}))
    }
    async fn execute(&self, _args: serde_json::Value, _ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        self.runs.set(self.runs.get() + 1);
        match self.down.get() {
            true => Err(ToolError::typed("HttpError", "HTTP 503")),
            false => Ok(ToolOutput::text("hooked")),
        }
    }
    fn dependency(&self) -> Option<String> {
        Some("hooks.example".into())
    }
    fn dependency_down(&self, err: &ToolError) -> bool {
        matches!(err, ToolError::Failed { message, .. } if message.starts_with("HTTP 5"))
    }
}

#[test]
fn a_webhook_hosts_breaker_answers_its_calls_with_a_result_the_model_reads_until_a_probe_closes_it() {
    for (name, make) in stores() {
        let env = make();
        let (down, runs) = (Rc::new(Cell::new(true)), Rc::new(Cell::new(0)));
        let breakers = Rc::new(Breakers::new());
        // Six calls of the tool (each with its own arguments: not a loop), one a turn, then an answer.
        let mut script: Vec<MockTurn> =
            (0..6).map(|i| MockTurn::tools([("hook", serde_json::json!({ "n": i }))])).collect();
        script.push(MockTurn::text("done"));
        let a = builder(&env, MockModel::new(script), 1)
            .tool(Hook { down: down.clone(), runs: runs.clone() })
            .options(AgentOptions { max_steps: 20, ..options() })
            .breakers(breakers.clone())
            .build()
            .unwrap();
        let r = block_on(a.send("r", "go", SendOptions::default())).unwrap();
        assert_eq!(r.text, "done", "{name}: {r:?}");
        // 4 of 4 failed open it: the last two calls are not made, and the model reads why.
        assert_eq!(runs.get(), 4, "{name}");
        assert!(matches!(breakers.state("hooks.example"), Some(BreakerState::Open { .. })), "{name}");
        let cp = block_on(env.store.load("r")).unwrap().unwrap();
        let results: Vec<String> = cp
            .messages
            .iter()
            .filter_map(|m| match m {
                steadfast::core::transcript::Message::Tool(t) => Some(t.content.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(results.len(), 6, "{name}");
        assert!(results[..4].iter().all(|c| c.contains("HTTP 503")), "{name}: {results:?}");
        assert!(
            results[4..].iter().all(|c| c.contains("CircuitOpenError") && c.contains("hooks.example")),
            "{name}: {results:?}"
        );
        // The host is back: after the cool-down one probe goes through and closes it.
        down.set(false);
        env.clock.advance(10_001);
        let a = builder(
            &env,
            MockModel::new(vec![MockTurn::tools([("hook", serde_json::json!({}))]), MockTurn::text("ok")]),
            2,
        )
        .tool(Hook { down: down.clone(), runs: runs.clone() })
        .options(options())
        .breakers(breakers.clone())
        .build()
        .unwrap();
        assert_eq!(block_on(a.send("r2", "go", SendOptions::default())).unwrap().text, "ok", "{name}");
        assert_eq!((runs.get(), breakers.state("hooks.example")), (5, Some(BreakerState::Closed)), "{name}");
    }
}
