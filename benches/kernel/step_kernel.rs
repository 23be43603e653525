//! The CPU kernel of one agent step, without a runtime or I/O: the run state machine ([`RunMachine`]) plus
//! what the journal store does with every boundary (the entry serialised to JSON, folded into a mirror
//! [`Checkpoint`] with [`Checkpoint::apply`]).
//!
//! One step: the model answers with text and two tool calls (~500-byte messages) → gate → commit → both
//! tools run → one commit per result → the next model call. Each step appends 3 messages to the transcript.
//!
//! Shared by the native bench (`benches/bench.rs`) and the wasm kernel (`benches/wasm-kernel/`), so both
//! targets run exactly the same code. Synchronous and deterministic: no clock, no randomness.
#![allow(dead_code)]

use serde_json::json;
use steadfast::core::checkpoint::Checkpoint;
use steadfast::core::fingerprint::Fingerprint;
use steadfast::core::machine::{
    DriftPolicy, Effect, Gate, MachineConfig, ModelResponse, RunMachine, Start, ToolOutcome,
};
use steadfast::core::transcript::{Message, ToolCall, Usage};

/// Timed steps per measurement (fewer when the run reaches its size sooner).
pub const TIMED_STEPS: usize = 10;

/// Messages the run has before its first step (system instructions + the user's message).
pub const START_MESSAGES: usize = 2;

/// Messages one step appends (the assistant turn and two tool results).
pub const MESSAGES_PER_STEP: usize = 3;

const RUN: &str = "bench-run";
const TOOLS: [&str; 2] = ["search", "read"];

/// A run in progress, waiting for its next model answer.
pub struct StepKernel {
    m: RunMachine,
    mirror: Checkpoint,
    step: usize,
    /// Bytes of journal entries serialised so far (what the store would write).
    pub entry_bytes: usize,
    /// Journal entries (durable boundaries) so far.
    pub commits: usize,
    payload: String,
    text: String,
    launched: Vec<ToolCall>,
}

fn config() -> MachineConfig {
    let schema = json!({"type": "object"});
    MachineConfig {
        run_id: RUN.into(),
        max_steps: u32::MAX,
        budget: Default::default(),
        budget_cap: None,
        on_agent_drift: DriftPolicy::Warn,
        fingerprint: Fingerprint::compute("mock", TOOLS.iter().map(|t| (*t, &schema)), "Be thorough."),
        tool_names: TOOLS.iter().map(|t| t.to_string()).collect(),
        instructions: "Be thorough.".into(),
        loop_window: 0,
        business_state: None,
        max_tool_result_bytes: 256 * 1024,
        key_scope: None,
        steer_poll_ms: None,
        team: Default::default(),
        trace: None,
    }
}

impl StepKernel {
    /// A new run, started and waiting for its first model answer.
    pub fn new() -> StepKernel {
        let m = RunMachine::start(config(), None, Start::Send(vec![Message::user("research it")]), 1_000)
            .expect("the run starts");
        let mut k = StepKernel {
            m,
            mirror: Checkpoint::new(RUN),
            step: 0,
            entry_bytes: 0,
            commits: 0,
            payload: "x".repeat(480),
            text: "t".repeat(180),
            launched: Vec::new(),
        };
        k.drive();
        k
    }

    /// Messages in the transcript.
    pub fn messages(&self) -> usize {
        self.m.checkpoint().messages.len()
    }

    /// Messages in the mirror folded from the serialised entries (equals [`StepKernel::messages`]).
    pub fn mirror_messages(&self) -> usize {
        self.mirror.messages.len()
    }

    /// One step: the model's answer with two tool calls, through to the next model call.
    pub fn step(&mut self) {
        let i = self.step;
        self.step += 1;
        let calls = TOOLS
            .iter()
            .enumerate()
            .map(|(n, name)| ToolCall {
                id: format!("call_{i}_{n}"),
                name: (*name).into(),
                args: json!({"i": i}),
                invalid: None,
            })
            .collect();
        self.m.set_now(1_000 + 20 * i as u64);
        self.m
            .notify_model_response(ModelResponse {
                text: format!("step {i}: {}", self.text),
                tool_calls: calls,
                usage: Usage::tokens(100, 50),
                stop_reason: Some("tool_calls".into()),
                reasoning: Vec::new(),
            })
            .expect("the machine waits for the model");
        self.drive();
    }

    /// Performs effects until the machine asks for the model again.
    fn drive(&mut self) {
        loop {
            match self.m.poll_effect() {
                Some(Effect::Emit(_)) => {}
                Some(Effect::Commit(entry)) => {
                    let json = serde_json::to_string(&entry).expect("an entry serialises");
                    self.entry_bytes += json.len();
                    self.commits += 1;
                    self.mirror.apply(&entry).expect("the entry folds");
                    self.m.notify_committed().expect("the machine waits for the commit");
                }
                Some(Effect::CallModel { .. }) => return,
                Some(Effect::Gate { calls }) => {
                    self.m
                        .notify_gated(calls.into_iter().map(|c| (c.id, Gate::Run)).collect())
                        .expect("the machine waits for the gate");
                }
                Some(Effect::RunTool { call, .. }) => self.launched.push(call),
                Some(other) => panic!("unexpected effect in the step kernel: {other:?}"),
                None => {
                    assert!(!self.launched.is_empty(), "the run stalled");
                    for call in std::mem::take(&mut self.launched) {
                        let content = format!("{} {} {}", call.name, call.args["i"], self.payload);
                        self.m
                            .notify_tool_settled(
                                &call.id,
                                ToolOutcome::Ok { content, business_state: None, usage: None },
                            )
                            .expect("the machine waits for the tool");
                    }
                }
            }
        }
    }
}

impl Default for StepKernel {
    fn default() -> Self {
        StepKernel::new()
    }
}

/// Steps a run needs to reach at least `messages` messages.
pub fn steps_to_reach(messages: usize) -> usize {
    messages.saturating_sub(START_MESSAGES).div_ceil(MESSAGES_PER_STEP)
}

/// A run prepared so that `timed` more steps bring it to (at least) `messages` messages; returns the kernel
/// and `timed` (the last [`TIMED_STEPS`] steps, or every step when the run is shorter).
pub fn prepare(messages: usize) -> (StepKernel, usize) {
    let total = steps_to_reach(messages).max(1);
    let timed = total.min(TIMED_STEPS);
    let mut k = StepKernel::new();
    for _ in 0..total - timed {
        k.step();
    }
    (k, timed)
}

/// Runs `n` steps; returns the number of messages after them (checking the folded mirror agrees).
pub fn run_steps(k: &mut StepKernel, n: usize) -> usize {
    for _ in 0..n {
        k.step();
    }
    assert_eq!(k.mirror_messages(), k.messages(), "the folded mirror follows the machine");
    k.messages()
}

/// The median of `v` (sorted in place); 0 for an empty slice.
pub fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}
