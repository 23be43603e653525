//! [`ModelFeed`]: what a model request must carry across a boundary to a holder that keeps the transcript on
//! the other side (the npm package's facade keeps each run's message array), so that a step sends only what is
//! new instead of the whole transcript again.
//!
//! The feed decides; the holder only obeys. A [`ModelFrame`] either starts a run's transcript over (`reset`:
//! the whole transcript) or appends to it (`base`: the length the holder must have, then the new messages).
//! The feed appends only when it can prove the holder's prefix is the request's: the same execution asks
//! (within one execution the run state machine only appends to the transcript), the transcript is at least as
//! long as what was sent, and the last message sent is still in its place. Anything else — a new execution
//! (send, resume, a resolved approval, a sweep), another execution of the same run interleaved, a fork, a
//! repaired or shortened transcript — is a reset. The tools travel in the first frame and again only when they
//! change.
//!
//! A holder that cannot apply a frame (it lost its array: a new facade object, a length that is not `base`, no
//! tools held) answers so, and the caller calls [`ModelFeed::lost`] and sends the frame [`ModelFeed::frame`]
//! then makes: a reset with the tools. What the holder keeps of a run is dropped when its execution ends
//! ([`ModelFeed::end`]).
//!
//! The holder's contract, for a frame `f` (the facade in `js/src/agent.ts` implements it):
//! 1. `f.tools` present: keep them as the tools of every request; absent and none kept: answer "lost".
//! 2. `f.reset`: the run's messages become `f.messages`. Otherwise: when the run's messages are not exactly
//!    `f.base` long (or unknown), answer "lost"; else append `f.messages`.
//! 3. The request is `{runId, messages: <the run's messages>, tools, step}`.

use super::traits::{ModelRequest, ToolSpec};
use crate::core::transcript::Message;
use serde::Serialize;
use std::collections::HashMap;

/// A model request as it crosses to a transcript holder: the whole transcript (`reset`) or what is new.
#[derive(Clone, Copy, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelFrame<'a> {
    /// Run id.
    pub run_id: &'a str,
    /// The step this answer will be (1-based).
    pub step: u32,
    /// The run's messages start over with `messages` (else `messages` are appended).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub reset: bool,
    /// How many messages the holder has of this run before appending (0 for a reset).
    pub base: usize,
    /// The whole transcript (a reset) or the messages after the first `base`.
    pub messages: &'a [Message],
    /// The tools, when they were not sent before or changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools: Option<&'a [ToolSpec]>,
}

/// What was sent of one run.
#[derive(Debug)]
struct Sent {
    execution: String,
    count: usize,
    last: Option<Message>,
}

/// What a holder on the other side of a boundary has of each run (see the module docs).
#[derive(Debug, Default)]
pub struct ModelFeed {
    runs: HashMap<String, Sent>,
    tools: Option<Vec<ToolSpec>>,
}

impl ModelFeed {
    /// A feed that has sent nothing.
    pub fn new() -> ModelFeed {
        ModelFeed::default()
    }

    /// The frame that brings the holder to `request`, recorded as sent. Per step this compares one message
    /// and the tools, whatever the transcript's length.
    pub fn frame<'r>(&mut self, request: &ModelRequest<'r>) -> ModelFrame<'r> {
        let tools = if self.tools.as_deref() == Some(request.tools) {
            None
        } else {
            self.tools = Some(request.tools.to_vec());
            Some(request.tools)
        };
        let messages = request.messages;
        let base = match self.runs.get(request.run_id) {
            Some(s)
                if s.execution == request.execution
                    && s.count <= messages.len()
                    && s.count.checked_sub(1).map(|i| &messages[i]) == s.last.as_ref() =>
            {
                Some(s.count)
            }
            _ => None,
        };
        let last = messages.last().cloned();
        match self.runs.get_mut(request.run_id) {
            Some(s) => {
                if s.execution != request.execution {
                    s.execution = request.execution.to_string();
                }
                s.count = messages.len();
                s.last = last;
            }
            None => {
                let sent = Sent { execution: request.execution.to_string(), count: messages.len(), last };
                self.runs.insert(request.run_id.to_string(), sent);
            }
        }
        match base {
            Some(base) => ModelFrame {
                run_id: request.run_id,
                step: request.step,
                reset: false,
                base,
                messages: &messages[base..],
                tools,
            },
            None => ModelFrame { run_id: request.run_id, step: request.step, reset: true, base: 0, messages, tools },
        }
    }

    /// The holder could not apply a frame of `run_id`: the next frame of it is a reset, with the tools.
    pub fn lost(&mut self, run_id: &str) {
        self.runs.remove(run_id);
        self.tools = None;
    }

    /// Execution `execution` of `run_id` ended: forgets the run when that execution was the last to send it.
    /// Returns whether it did (then the holder may drop the run's messages too).
    pub fn end(&mut self, run_id: &str, execution: &str) -> bool {
        if self.runs.get(run_id).is_some_and(|s| s.execution == execution) {
            self.runs.remove(run_id);
            return true;
        }
        false
    }

    /// How many runs the feed remembers (tests: nothing is kept after the executions end).
    pub fn runs(&self) -> usize {
        self.runs.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::transcript::{ToolCall, ToolResult};
    use crate::rng::{Rng, SplitMix64};
    use serde_json::{json, Value};

    /// The holder's contract (module docs), as the facade implements it, over the frame's JSON.
    #[derive(Default)]
    struct Holder {
        runs: HashMap<String, Vec<Value>>,
        tools: Option<Value>,
    }

    impl Holder {
        /// The request the user's model sees, or `None` for "lost".
        fn apply(&mut self, frame_json: &str) -> Option<Value> {
            let f: Value = serde_json::from_str(frame_json).unwrap();
            if let Some(t) = f.get("tools") {
                self.tools = Some(t.clone());
            }
            let tools = self.tools.clone()?;
            let run = f["runId"].as_str().unwrap().to_string();
            let new = f["messages"].as_array().unwrap().clone();
            if f.get("reset") == Some(&Value::Bool(true)) {
                self.runs.insert(run.clone(), new);
            } else {
                let held = self.runs.get_mut(&run)?;
                if held.len() as u64 != f["base"].as_u64().unwrap() {
                    return None;
                }
                held.extend(new);
            }
            Some(json!({"runId": run, "messages": self.runs[&run], "tools": tools, "step": f["step"]}))
        }
    }

    /// What the JS model does per request: a frame, and a reset when the holder lost the run.
    fn deliver(feed: &mut ModelFeed, holder: &mut Holder, req: &ModelRequest<'_>) -> (Value, usize) {
        let json = serde_json::to_string(&feed.frame(req)).unwrap();
        let mut bytes = json.len();
        let seen = match holder.apply(&json) {
            Some(v) => v,
            None => {
                feed.lost(req.run_id);
                let again = serde_json::to_string(&feed.frame(req)).unwrap();
                bytes += again.len();
                holder.apply(&again).expect("a reset always applies")
            }
        };
        (seen, bytes)
    }

    fn spec(name: &str) -> ToolSpec {
        ToolSpec { name: name.into(), description: format!("{name} tool"), input_schema: json!({"type": "object"}) }
    }

    fn below(rng: &SplitMix64, n: u64) -> u64 {
        rng.next_u64() % n.max(1)
    }

    fn result(id: String, content: String) -> Message {
        Message::Tool(ToolResult {
            tool_call_id: id,
            name: "t".into(),
            content,
            is_error: false,
            kind: crate::core::transcript::ResultKind::Execution,
            usage: None,
        })
    }

    fn message(rng: &SplitMix64, i: usize) -> Message {
        // Few distinct texts: equal messages at different places are common (as in a scripted run).
        let text = format!("m{}", below(rng, 3));
        match below(rng, 3) {
            0 => Message::user(text),
            1 => Message::assistant(
                text,
                vec![ToolCall { id: format!("c{}", below(rng, 2)), name: "t".into(), args: json!({}), invalid: None }],
            ),
            _ => result(format!("c{}", below(rng, 2)), format!("{text}{}", i % 2)),
        }
    }

    struct Run {
        id: String,
        execution: String,
        messages: Vec<Message>,
    }

    /// One generated scenario: runs on one agent, interleaved; each operation grows a transcript, retries,
    /// starts a new execution (possibly rewriting the transcript: a repair, a fork into the same id, a
    /// delete-and-start-over), ends an execution, or makes the holder lose its state.
    fn scenario(seed: u64) {
        let rng = SplitMix64::new(seed);
        let mut feed = ModelFeed::new();
        let mut holder = Holder::default();
        let mut tools = vec![spec("a"), spec("b")];
        let mut next_exec = 0;
        let mut exec = || {
            next_exec += 1;
            format!("own-{next_exec}")
        };
        let mut runs: Vec<Run> = (0..3)
            .map(|i| Run { id: format!("r{i}"), execution: exec(), messages: vec![Message::system("s")] })
            .collect();
        for op in 0..200u32 {
            let r = below(&rng, runs.len() as u64) as usize;
            match below(&rng, 10) {
                0..=4 => {
                    for _ in 0..=below(&rng, 3) {
                        let m = message(&rng, op as usize);
                        runs[r].messages.push(m);
                    }
                }
                5 => {} // a retry: the same request again
                6 => {
                    runs[r].execution = exec();
                    let run = &mut runs[r];
                    match below(&rng, 3) {
                        0 => {} // a resume: the same transcript
                        1 if !run.messages.is_empty() => {
                            // A repair or a fork into the same id: a message in the middle changes.
                            let i = below(&rng, run.messages.len() as u64) as usize;
                            run.messages[i] = message(&rng, op as usize + 1);
                        }
                        _ => {
                            // Deleted and started over: a shorter transcript.
                            let keep = below(&rng, run.messages.len() as u64 + 1) as usize;
                            run.messages.truncate(keep);
                        }
                    }
                }
                7 => {
                    if feed.end(&runs[r].id, &runs[r].execution) {
                        holder.runs.remove(&runs[r].id);
                    }
                    runs[r].execution = exec();
                }
                8 => match below(&rng, 3) {
                    0 => holder = Holder::default(),
                    1 => {
                        holder.runs.remove(&runs[r].id);
                    }
                    _ => tools.push(spec(&format!("t{op}"))),
                },
                _ => {
                    // Another execution of the same run interleaved (a zombie): same transcript so far.
                    runs[r].execution = exec();
                }
            }
            let run = &runs[r];
            let req = ModelRequest::new(&run.id, &run.messages, &tools, op, &run.execution);
            let (seen, _) = deliver(&mut feed, &mut holder, &req);
            let want = json!({"runId": run.id, "messages": run.messages, "tools": tools, "step": op});
            assert_eq!(seen, want, "seed {seed}, operation {op}: the model saw another request");
            let sent: Value = serde_json::from_str(&serde_json::to_string(&req).unwrap()).unwrap();
            assert_eq!(seen, sent, "seed {seed}: not the request's JSON");
        }
    }

    #[test]
    fn the_holder_always_sees_the_whole_request_over_generated_scenarios() {
        crate::seeds::for_seeds_in_lib("the_holder_always_sees_the_whole_request", 0..100, scenario);
    }

    #[test]
    fn a_growing_run_sends_only_its_new_messages() {
        let mut feed = ModelFeed::new();
        let mut holder = Holder::default();
        let tools = vec![spec("a")];
        let mut messages = vec![Message::system("s"), Message::user("u")];
        let mut total_new = 0;
        for step in 1..=50u32 {
            let req = ModelRequest::new("r", &messages, &tools, step, "e");
            let (_, bytes) = deliver(&mut feed, &mut holder, &req);
            if step > 1 {
                assert!(bytes <= 4 * total_new + 100, "step {step}: {bytes} bytes for {total_new} new");
            }
            let added = vec![
                Message::assistant(
                    "",
                    vec![ToolCall { id: format!("c{step}"), name: "a".into(), args: json!({}), invalid: None }],
                ),
                result(format!("c{step}"), "x".repeat(400)),
            ];
            total_new = serde_json::to_string(&added).unwrap().len();
            messages.extend(added);
        }
        assert!(feed.end("r", "e"));
        assert_eq!(feed.runs(), 0);
    }

    #[test]
    fn a_new_execution_of_the_same_run_is_a_reset() {
        let mut feed = ModelFeed::new();
        let tools = vec![spec("a")];
        let messages = vec![Message::system("s"), Message::user("u")];
        let req = |execution| ModelRequest::new("r", &messages, &tools, 1, execution);
        assert!(feed.frame(&req("e1")).reset);
        let again = feed.frame(&req("e1"));
        assert!(!again.reset && again.base == 2 && again.messages.is_empty() && again.tools.is_none());
        let other = feed.frame(&req("e2"));
        assert!(other.reset && other.messages.len() == 2 && other.tools.is_none());
        // The older execution ending does not forget the newer one's run.
        assert!(!feed.end("r", "e1"));
        assert!(feed.end("r", "e2"));
    }

    #[test]
    fn a_shortened_or_changed_tail_in_the_same_execution_is_a_reset() {
        let mut feed = ModelFeed::new();
        let tools = vec![spec("a")];
        let req = |messages| ModelRequest::new("r", messages, &tools, 1, "e");
        let three = vec![Message::system("s"), Message::user("u"), Message::user("v")];
        assert!(feed.frame(&req(&three)).reset);
        assert!(!feed.frame(&req(&three)).reset);
        // Shorter than what was sent.
        let two = &three[..2];
        assert!(feed.frame(&req(two)).reset);
        assert!(!feed.frame(&req(&three)).reset);
        // As long, but the last message sent is not in its place any more.
        let changed = vec![Message::system("s"), Message::user("w"), Message::user("v")];
        // (A change before the last message sent is not seen: within an execution the machine only appends.)
        assert!(!feed.frame(&req(&changed)).reset);
        let other = vec![Message::system("s"), Message::user("w"), Message::user("x"), Message::user("y")];
        let f = feed.frame(&req(&other));
        assert!(f.reset && f.messages.len() == 4);
    }
}
