//! Token streaming (M29): a streaming model's increments reach the run's events as `text.delta` /
//! `reasoning.delta` while it answers; the journal records only completed turns, so an execution that stops
//! mid-stream asks the model again.

mod common;

use async_trait::async_trait;
use common::*;
use serde_json::json;
use std::cell::Cell;
use std::rc::Rc;
use steadfast::core::checkpoint::FinishReason;
use steadfast::core::events::{Event, EventEnvelope, StreamDelta};
use steadfast::core::machine::ModelResponse;
use steadfast::core::transcript::Message;
use steadfast::runtime::{
    AbortSignal, CrashPoint, EventSink, MockModel, MockTurn, Model, ModelRequest, SendOptions, VecSink,
};
use steadfast::ErrorCode;

/// Each step's `text.delta` texts in order, and whether the step's `step` event came after them.
fn deltas_of(events: &[EventEnvelope], step_no: u32) -> (String, bool) {
    let mut text = String::new();
    let mut step_after = false;
    for e in events {
        match &e.event {
            Event::TextDelta { step, text: t, .. } if *step == step_no => {
                assert!(!step_after, "a delta after its step event");
                text.push_str(t);
            }
            Event::Step { step, .. } if *step == step_no => step_after = true,
            _ => {}
        }
    }
    (text, step_after)
}

fn script() -> Vec<MockTurn> {
    vec![
        MockTurn::tools([("lookup", json!({"q": "a"}))]).with_text("Let me look that up."),
        MockTurn::text("All done, thanks."),
    ]
}

/// The increments arrive before their step's `step` event, numbered in the one gapless `seq`, and add up to
/// the step's text; the journal holds the completed turns only. Without a listener the model is not asked to
/// stream.
#[test]
fn text_deltas_arrive_before_their_step_and_add_up_to_its_text() {
    let env = Env::new();
    let counters = Counters::default();
    let agent = env.agent(MockModel::new(script()).streaming(), vec![counting_tool("lookup", &counters)]);
    let (opts, sink) = listening();
    let r = block_on(agent.send("s", "find a", opts)).unwrap();
    assert_eq!(r.text, "All done, thanks.");
    let events = sink.events();
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (0..events.len() as u64).collect::<Vec<_>>(), "one gapless seq");
    for (step, text) in [(1, "Let me look that up."), (2, "All done, thanks.")] {
        assert_eq!(deltas_of(&events, step), (text.to_string(), true), "step {step}");
    }
    let deltas = events.iter().filter(|e| matches!(e.event, Event::TextDelta { .. })).count();
    assert_eq!(deltas, 5 + 3, "word by word");
    let v = serde_json::to_value(events.iter().find(|e| matches!(e.event, Event::TextDelta { .. })).unwrap()).unwrap();
    assert_eq!((v["type"].as_str(), v["step"].as_u64(), v["attempt"].as_u64()), (Some("text.delta"), Some(1), Some(1)));
    let stored = block_on(agent.load("s")).unwrap().unwrap();
    assert_eq!(stored.messages, r.messages, "the journal has the completed turns");

    // Nobody listening: the model's plain `generate` is used, nothing streams.
    let plain = Counting::default();
    let agent = env.agent(plain.clone(), vec![]);
    block_on(agent.send("quiet", "hi", SendOptions::default())).unwrap();
    assert_eq!((plain.plain.get(), plain.streamed.get()), (1, 0));
    let (opts, _sink) = listening();
    block_on(agent.send("loud", "hi", opts)).unwrap();
    assert_eq!((plain.plain.get(), plain.streamed.get()), (1, 1));
}

/// Counts which entry point the runtime used.
#[derive(Clone, Default)]
struct Counting {
    plain: Rc<Cell<u32>>,
    streamed: Rc<Cell<u32>>,
}

#[async_trait(?Send)]
impl Model for Counting {
    fn id(&self) -> &str {
        "counting"
    }
    async fn generate(&self, _request: ModelRequest<'_>) -> steadfast::Result<ModelResponse> {
        self.plain.set(self.plain.get() + 1);
        Ok(ModelResponse { text: "ok".into(), ..ModelResponse::default() })
    }
    async fn generate_streaming(
        &self,
        _request: ModelRequest<'_>,
        on_delta: &dyn Fn(StreamDelta),
    ) -> steadfast::Result<ModelResponse> {
        self.streamed.set(self.streamed.get() + 1);
        on_delta(StreamDelta::Reasoning("hmm".into()));
        on_delta(StreamDelta::Text("ok".into()));
        Ok(ModelResponse { text: "ok".into(), ..ModelResponse::default() })
    }
}

/// A model whose first answer streams two pieces and then never completes (the connection hangs); later
/// answers are plain.
#[derive(Clone, Default)]
struct HangsMidStream {
    calls: Rc<Cell<u32>>,
}

#[async_trait(?Send)]
impl Model for HangsMidStream {
    fn id(&self) -> &str {
        "hangs"
    }
    async fn generate(&self, _request: ModelRequest<'_>) -> steadfast::Result<ModelResponse> {
        self.calls.set(self.calls.get() + 1);
        Ok(ModelResponse { text: "Hello there.".into(), ..ModelResponse::default() })
    }
    async fn generate_streaming(
        &self,
        request: ModelRequest<'_>,
        on_delta: &dyn Fn(StreamDelta),
    ) -> steadfast::Result<ModelResponse> {
        if self.calls.get() > 0 {
            return self.generate(request).await;
        }
        self.calls.set(1);
        on_delta(StreamDelta::Text("Hel".into()));
        on_delta(StreamDelta::Text("lo".into()));
        futures::future::pending().await
    }
}

/// Stops the run (aborts it) at its first `text.delta`.
struct AbortOnDelta(AbortSignal, VecSink);

impl EventSink for AbortOnDelta {
    fn emit(&self, event: &EventEnvelope) {
        self.1.emit(event);
        if matches!(event.event, Event::TextDelta { .. }) {
            self.0.abort();
        }
    }
}

/// An execution that stops mid-stream records nothing of the half answer: the run stays resumable, and the
/// resume asks the model again and records its one completed turn.
#[test]
fn stopping_mid_stream_records_no_half_turn_and_the_resume_asks_again() {
    let env = Env::new();
    let model = HangsMidStream::default();
    let agent = env.agent(model.clone(), vec![]);
    let abort = AbortSignal::new();
    let sink = VecSink::new();
    let opts = SendOptions {
        abort: Some(abort.clone()),
        events: Some(Rc::new(AbortOnDelta(abort, sink.clone()))),
        ..SendOptions::default()
    };
    let r = block_on(agent.send("m", "greet me", opts)).unwrap();
    assert_eq!(r.finish_reason, Some(FinishReason::Aborted));
    assert!(matches!(sink.events().iter().find(|e| matches!(e.event, Event::TextDelta { .. })), Some(_)));
    assert!(!sink.events().iter().any(|e| matches!(e.event, Event::Step { .. })), "no step was recorded");
    let stored = block_on(agent.load("m")).unwrap().unwrap();
    assert!(!stored.messages.iter().any(|m| matches!(m, Message::Assistant { .. })), "{:?}", stored.messages);

    let r = block_on(agent.resume("m", SendOptions::default())).unwrap().expect("an unfinished run");
    assert_eq!((r.finish_reason, r.text.as_str()), (Some(FinishReason::Stop), "Hello there."));
    assert_eq!(model.calls.get(), 2, "asked again");
    let turns = r.messages.iter().filter(|m| matches!(m, Message::Assistant { .. })).count();
    assert_eq!(turns, 1);
}

/// A tool that always answers the same (its output does not count its executions).
fn lookup() -> Rc<dyn steadfast::runtime::Tool> {
    Rc::new(steadfast::runtime::FnTool::new("lookup", "looks up", object_schema(), |_args, _ctx| async {
        Ok(steadfast::runtime::ToolOutput::text("found a"))
    }))
}

/// A crash after any effect of a streamed run (the model's answer streamed but not yet committed, among
/// them) loses no completed turn and records no partial one: resuming gives the same transcript as a run
/// that never crashed, and every step's deltas of the resumed execution add up to its text.
#[test]
fn a_crash_after_any_effect_of_a_streamed_run_resumes_to_the_same_transcript() {
    let reference = {
        let env = Env::new();
        let agent = env.agent(MockModel::by_turn(script()).streaming(), vec![lookup()]);
        block_on(agent.send("r", "find a", SendOptions::default())).unwrap().messages
    };
    let mut crashed_mid_turn = 0;
    for after in 1..=12 {
        let env = Env::new();
        let agent = env.agent(MockModel::by_turn(script()).streaming(), vec![lookup()]);
        let (mut opts, sink) = listening();
        opts.crash = Some(CrashPoint { after_effects: after, finish_in_flight: false });
        let first = block_on(agent.send("r", "find a", opts));
        let Err(e) = first else { continue };
        assert_eq!(e.code, ErrorCode::Crashed, "after {after}");
        let streamed_steps: Vec<u32> = sink
            .events()
            .iter()
            .filter_map(|e| match e.event {
                Event::TextDelta { step, .. } => Some(step),
                _ => None,
            })
            .collect();
        let stored = block_on(agent.load("r")).unwrap().map(|c| c.messages).unwrap_or_default();
        let turns = stored.iter().filter(|m| matches!(m, Message::Assistant { .. })).count() as u32;
        if let Some(&last) = streamed_steps.last() {
            if last > turns {
                crashed_mid_turn += 1;
            }
        }
        env.past_leases();
        let again = env.agent(MockModel::by_turn(script()).streaming(), vec![lookup()]);
        let (opts, sink) = listening();
        let resumed = if stored.is_empty() {
            // Nothing was committed: sending again starts the run.
            Some(block_on(again.send("r", "find a", opts)).unwrap())
        } else {
            block_on(again.resume("r", opts)).unwrap()
        };
        let Some(r) = resumed else {
            // The crash came after the last commit: the run was finished already.
            assert_eq!(stored, reference, "crash after effect {after}");
            continue;
        };
        assert_eq!(r.messages, reference, "crash after effect {after}");
        for step in turns + 1..=2 {
            let want = if step == 1 { "Let me look that up." } else { "All done, thanks." };
            assert_eq!(deltas_of(&sink.events(), step), (want.to_string(), true), "after {after}, step {step}");
        }
    }
    assert!(crashed_mid_turn > 0, "some crash fell between a streamed answer and its commit");
}

/// A model call that fails mid-stream and is retried streams again from the start under the next `attempt`;
/// the recorded turn is the retry's.
#[test]
fn a_retried_model_call_streams_again_under_the_next_attempt() {
    #[derive(Clone, Default)]
    struct FailsOnce(Rc<Cell<u32>>);
    #[async_trait(?Send)]
    impl Model for FailsOnce {
        fn id(&self) -> &str {
            "fails-once"
        }
        async fn generate(&self, _request: ModelRequest<'_>) -> steadfast::Result<ModelResponse> {
            Ok(ModelResponse { text: "Second try.".into(), ..ModelResponse::default() })
        }
        async fn generate_streaming(
            &self,
            request: ModelRequest<'_>,
            on_delta: &dyn Fn(StreamDelta),
        ) -> steadfast::Result<ModelResponse> {
            self.0.set(self.0.get() + 1);
            if self.0.get() == 1 {
                on_delta(StreamDelta::Text("First".into()));
                return Err(steadfast::Error::new(ErrorCode::ProviderUnavailable, "overloaded mid-stream"));
            }
            on_delta(StreamDelta::Text("Second ".into()));
            on_delta(StreamDelta::Text("try.".into()));
            self.generate(request).await
        }
    }
    let env = Env::new();
    let agent = env.agent(FailsOnce::default(), vec![]);
    let (opts, sink) = listening();
    let r = block_on(agent.send("f", "hi", opts)).unwrap();
    assert_eq!(r.text, "Second try.");
    let deltas = text_deltas(&sink);
    assert_eq!(deltas, vec![(1, "First".to_string()), (2, "Second ".to_string()), (2, "try.".to_string())]);
}
