//! Conversations with the sans-IO run state machine, told as short stories.
//!
//! Each test drives [`RunMachine`] directly, without a runtime: it pulls effects one at a time with
//! `poll_effect()`, answers them the way a runtime would (`notify_*`), and states what it expects next. The
//! harness ([`Story`]) skips `Effect::Emit` unless asked (the events are kept for inspection), and checks at
//! every `Commit` that the journal written so far (entries round-tripped through JSON, folded with
//! [`Checkpoint::fold`]) is exactly the machine's `checkpoint()` — so every story also tests the journal.
//! Inspired by restate's `sdk-shared-core` `VMTestCase`.

mod common;

use serde_json::{json, Value};
use steadfast::core::approval::{ApprovalRecord, ApprovalStatus, Decision};
use steadfast::core::checkpoint::{Checkpoint, EntryBody, FinishReason, JournalEntry, RunStatus};
use steadfast::core::error::{Error, ErrorCode};
use steadfast::core::events::Event;
use steadfast::core::fingerprint::Fingerprint;
use steadfast::core::machine::{
    DriftPolicy, Effect, Gate, KeyedCall, MachineConfig, ModelResponse, Outcome, RunMachine, Start, ToolOutcome,
};
use steadfast::core::steer::QueuedMessage;
use steadfast::core::transcript::{validate_transcript, Message, ResultKind, ToolCall, ToolResult, Usage};

const RUN: &str = "run-1";
const NOW: u64 = 1_000;
const TOOLS: &[&str] = &["deploy", "search", "write"];
const INSTRUCTIONS: &str = "be brief";

// ----- fixtures -----

fn fingerprint(model: &str, tools: &[&str]) -> Fingerprint {
    let schema = json!({"type": "object"});
    Fingerprint::compute(model, tools.iter().map(|t| (*t, &schema)), INSTRUCTIONS)
}

fn config_with(model: &str, tools: &[&str]) -> MachineConfig {
    MachineConfig {
        run_id: RUN.into(),
        max_steps: 10,
        budget: Default::default(),
        budget_cap: None,
        on_agent_drift: DriftPolicy::Warn,
        fingerprint: fingerprint(model, tools),
        tool_names: tools.iter().map(|t| t.to_string()).collect(),
        instructions: INSTRUCTIONS.into(),
        loop_window: 4,
        business_state: None,
        max_tool_result_bytes: 256 * 1024,
        key_scope: Some(SCOPE.into()),
        steer_poll_ms: None,
        team: Default::default(),
        trace: None,
    }
}

/// The idempotency-key scope the runtime gives a new run in these stories.
const SCOPE: &str = "run-1:0123456789abcdef0123456789abcdef";

fn config() -> MachineConfig {
    config_with("mock", TOOLS)
}

fn call(id: &str, name: &str, args: Value) -> ToolCall {
    ToolCall { id: id.into(), name: name.into(), args, invalid: None }
}

/// A model turn asking for `(id, tool)` calls with empty arguments.
fn turn(calls: &[(&str, &str)]) -> ModelResponse {
    ModelResponse {
        text: String::new(),
        tool_calls: calls.iter().map(|(id, name)| call(id, name, json!({}))).collect(),
        usage: Usage::tokens(10, 5),
        stop_reason: Some("tool_calls".into()),
        reasoning: vec![],
    }
}

fn turn_with(calls: Vec<ToolCall>) -> ModelResponse {
    ModelResponse {
        text: String::new(),
        tool_calls: calls,
        usage: Usage::tokens(10, 5),
        stop_reason: None,
        reasoning: vec![],
    }
}

fn answer(text: &str) -> ModelResponse {
    ModelResponse {
        text: text.into(),
        tool_calls: vec![],
        usage: Usage::tokens(7, 3),
        stop_reason: None,
        reasoning: vec![],
    }
}

fn ok(content: &str) -> ToolOutcome {
    ToolOutcome::Ok { content: content.into(), business_state: None, usage: None }
}

fn failed(message: &str) -> ToolOutcome {
    ToolOutcome::Failed { message: message.into() }
}

fn approve(approval_id: &str, tool_call_id: &str) -> Decision {
    Decision {
        approval_id: approval_id.into(),
        tool_call_id: tool_call_id.into(),
        approved: true,
        note: None,
        result: None,
    }
}

fn reject(approval_id: &str, tool_call_id: &str, note: &str) -> Decision {
    Decision {
        approval_id: approval_id.into(),
        tool_call_id: tool_call_id.into(),
        approved: false,
        note: Some(note.into()),
        result: None,
    }
}

fn needs_approval(id: &str) -> Gate {
    Gate::NeedsApproval { approval_id: id.into() }
}

/// The tool results of a transcript, in order.
fn results(messages: &[Message]) -> Vec<&ToolResult> {
    messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(r) => Some(r),
            _ => None,
        })
        .collect()
}

fn result_for<'a>(messages: &'a [Message], id: &str) -> &'a ToolResult {
    let found: Vec<&ToolResult> = results(messages).into_iter().filter(|r| r.tool_call_id == id).collect();
    assert_eq!(found.len(), 1, "expected exactly one result for {id}, transcript: {messages:#?}");
    found[0]
}

fn result_ids(messages: &[Message]) -> Vec<String> {
    results(messages).iter().map(|r| r.tool_call_id.clone()).collect()
}

// ----- the harness -----

/// The machine accepted an answer (every answer of a story is one it waits for, or a tolerated late one).
fn accepted(notify: &str, answer: Result<(), Error>) {
    if let Err(err) = answer {
        panic!("{notify} was refused: {err}");
    }
}

/// One execution of a run, told effect by effect.
struct Story {
    m: RunMachine,
    /// The run's journal so far (a synthetic snapshot first when the story starts from a stored checkpoint).
    journal: Vec<JournalEntry>,
    /// Every committed state, as folded from the journal.
    commits: Vec<Checkpoint>,
    /// Every event emitted so far.
    events: Vec<Event>,
    /// Every non-event effect pulled so far, in order.
    log: Vec<Effect>,
}

impl Story {
    /// A new run started with `send("hi")`.
    fn new(cfg: MachineConfig) -> Story {
        Story::start(cfg, None, Start::Send(vec![Message::user("hi")])).expect("a new run starts")
    }

    /// Starts an execution over `stored` (a checkpoint as a store would load it).
    fn start(cfg: MachineConfig, stored: Option<Checkpoint>, start: Start) -> Result<Story, Error> {
        let journal = match &stored {
            Some(cp) => vec![JournalEntry {
                seq: cp.seq,
                at: cp.saved_at,
                body: EntryBody::Snapshot { state: Box::new(cp.clone()) },
            }],
            None => Vec::new(),
        };
        let m = RunMachine::start(cfg, stored, start, NOW)?;
        Ok(Story { m, journal, commits: Vec::new(), events: Vec::new(), log: Vec::new() })
    }

    /// A new execution ("another process") over what `prev` committed, continuing its journal.
    fn resume(prev: &Story, cfg: MachineConfig, start: Start) -> Result<Story, Error> {
        let stored = prev.stored();
        let m = RunMachine::start(cfg, Some(stored), start, NOW + 1)?;
        Ok(Story { m, journal: prev.journal.clone(), commits: Vec::new(), events: Vec::new(), log: Vec::new() })
    }

    /// What a store would load now.
    fn stored(&self) -> Checkpoint {
        Checkpoint::fold(RUN, self.journal.iter()).expect("the journal folds").expect("the journal is not empty")
    }

    fn cp(&self) -> &Checkpoint {
        self.m.checkpoint()
    }

    /// The state of the last commit.
    fn last_commit(&self) -> &Checkpoint {
        self.commits.last().expect("nothing was committed yet")
    }

    /// The next effect that is not an event, or `None` when the machine waits.
    fn try_next(&mut self) -> Option<Effect> {
        loop {
            match self.m.poll_effect()? {
                Effect::Emit(e) => self.events.push(e),
                other => {
                    self.log.push(other.clone());
                    return Some(other);
                }
            }
        }
    }

    fn next(&mut self, wanted: &str) -> Effect {
        match self.try_next() {
            Some(e) => e,
            None => panic!("expected {wanted}, but the machine has nothing to do; effects so far: {:#?}", self.log),
        }
    }

    /// Nothing to do until the runtime reports something.
    fn expect_idle(&mut self) -> &mut Self {
        if let Some(e) = self.try_next() {
            panic!("expected the machine to wait, got {e:#?}");
        }
        self
    }

    /// The next effect is a `Commit`: check that the journal folds to the machine's state, but do not answer.
    fn expect_commit_pending(&mut self) -> &mut Self {
        let entry = match self.next("a Commit") {
            Effect::Commit(entry) => entry,
            other => panic!("expected a Commit, got {other:#?}"),
        };
        self.journal_append(entry)
    }

    /// Appends a commit's entry to the journal (as a store would) and checks that the journal folds to exactly the
    /// machine's state.
    fn journal_append(&mut self, entry: JournalEntry) -> &mut Self {
        let prev_seq = self.journal.last().map(|e| e.seq).unwrap_or(0);
        assert_eq!(entry.seq, prev_seq + 1, "journal entries are gapless");
        assert_eq!(entry.seq, self.cp().seq, "the entry carries the state's seq");
        match &entry.body {
            EntryBody::Snapshot { .. } => {
                assert!(self.journal.is_empty(), "only the first entry of a new run is a snapshot")
            }
            EntryBody::Delta { from, .. } => {
                assert!(!self.journal.is_empty(), "a new run starts with a snapshot");
                assert_eq!(*from, self.stored().messages.len(), "a delta continues the stored transcript");
            }
        }
        // Round trip through JSON, as a store does.
        let json = serde_json::to_string(&entry).expect("entries serialise");
        let entry: JournalEntry = serde_json::from_str(&json).expect("entries deserialise");
        self.journal.push(entry);
        let folded = self.stored();
        assert_eq!(
            &folded,
            self.m.checkpoint(),
            "the journal does not fold to the machine's state after entry {prev_seq}+1"
        );
        self.commits.push(folded);
        self
    }

    /// The runtime wrote the last commit.
    fn ack(&mut self) -> &mut Self {
        accepted("notify_committed", self.m.notify_committed());
        self
    }

    /// The next effect is a `Commit`; it is written.
    fn expect_commit(&mut self) -> &mut Self {
        self.expect_commit_pending().ack()
    }

    fn expect_call_model(&mut self) -> &mut Self {
        match self.next("CallModel") {
            Effect::CallModel { step } => {
                assert_eq!(step, self.cp().step_index + 1, "CallModel asks for the next step")
            }
            other => panic!("expected CallModel, got {other:#?}"),
        }
        self
    }

    fn expect_call_model_step(&mut self, step: u32) -> &mut Self {
        match self.next("CallModel") {
            Effect::CallModel { step: s } => assert_eq!(s, step),
            other => panic!("expected CallModel {{ step: {step} }}, got {other:#?}"),
        }
        self
    }

    fn answer_model(&mut self, resp: ModelResponse) -> &mut Self {
        accepted("notify_model_response", self.m.notify_model_response(resp));
        self
    }

    /// The next effect is a `Gate` for exactly these calls, in this order.
    fn expect_gate(&mut self, ids: &[&str]) -> &mut Self {
        match self.next("Gate") {
            Effect::Gate { calls } => {
                let got: Vec<&str> = calls.iter().map(|c| c.id.as_str()).collect();
                assert_eq!(got, ids, "Gate asks about these calls");
            }
            other => panic!("expected Gate {ids:?}, got {other:#?}"),
        }
        self
    }

    fn gate(&mut self, decisions: Vec<(&str, Gate)>) -> &mut Self {
        accepted(
            "notify_gated",
            self.m.notify_gated(decisions.into_iter().map(|(id, g)| (id.to_string(), g)).collect()),
        );
        self
    }

    /// Gate these calls with `Gate::Run`.
    fn gate_run(&mut self, ids: &[&str]) -> &mut Self {
        self.expect_gate(ids).gate(ids.iter().map(|id| (*id, Gate::Run)).collect())
    }

    /// The next effect is a `Reconcile` for exactly these calls, in this order.
    fn expect_reconcile(&mut self, ids: &[&str]) -> &mut Self {
        match self.next("Reconcile") {
            Effect::Reconcile { calls } => {
                let got: Vec<&str> = calls.iter().map(|c| c.call.id.as_str()).collect();
                assert_eq!(got, ids, "Reconcile asks about these calls");
                for c in &calls {
                    assert_eq!(Some(&c.key), self.cp().call_key(&c.call.id).as_ref(), "reconciled under its call key");
                }
            }
            other => panic!("expected Reconcile {ids:?}, got {other:#?}"),
        }
        self
    }

    fn reconcile(&mut self, answers: Vec<(&str, Option<ToolOutcome>)>) -> &mut Self {
        let answers = answers.into_iter().map(|(id, a)| (id.to_string(), a)).collect();
        accepted("notify_reconciled", self.m.notify_reconciled(answers));
        self
    }

    fn expect_run_tool(&mut self, id: &str) -> &mut Self {
        match self.next("RunTool") {
            Effect::RunTool { call, approval_id, key, .. } => {
                assert_eq!(call.id, id, "RunTool for the wrong call");
                assert_eq!(approval_id, None, "a call that needed no approval runs without an approval id");
                assert_eq!(Some(key), self.cp().call_key(id), "a call runs with its call key");
            }
            other => panic!("expected RunTool {id}, got {other:#?}"),
        }
        self
    }

    fn expect_run_approved(&mut self, id: &str, approval: &str) -> &mut Self {
        match self.next("RunTool") {
            Effect::RunTool { call, approval_id, key, .. } => {
                assert_eq!(call.id, id, "RunTool for the wrong call");
                assert_eq!(approval_id.as_deref(), Some(approval), "an approved call carries its approval id");
                assert_eq!(Some(key), self.cp().call_key(id), "and its call key");
            }
            other => panic!("expected RunTool {id} (approved), got {other:#?}"),
        }
        self
    }

    fn settle(&mut self, id: &str, outcome: ToolOutcome) -> &mut Self {
        accepted("notify_tool_settled", self.m.notify_tool_settled(id, outcome));
        self
    }

    fn settle_together(&mut self, results: Vec<(&str, ToolOutcome)>) -> &mut Self {
        let results = results.into_iter().map(|(id, o)| (id.to_string(), o)).collect();
        accepted("notify_tools_settled", self.m.notify_tools_settled(results));
        self
    }

    fn expect_pause(&mut self) -> Vec<ApprovalRecord> {
        match self.next("Pause") {
            Effect::Pause { approvals } => approvals,
            other => panic!("expected Pause, got {other:#?}"),
        }
    }

    fn approvals_recorded(&mut self) -> &mut Self {
        accepted("notify_approvals_recorded", self.m.notify_approvals_recorded());
        self
    }

    fn abort(&mut self) -> &mut Self {
        self.m.notify_abort();
        self
    }

    fn expect_finish(&mut self) -> Outcome {
        let outcome = match self.next("Finish") {
            Effect::Finish(outcome) => outcome,
            other => panic!("expected Finish, got {other:#?}"),
        };
        assert!(self.m.is_done(), "after Finish the machine is done");
        assert!(self.try_next().is_none(), "nothing follows Finish");
        outcome
    }

    /// One model turn whose calls all run and succeed, in call order, through to the next model call.
    fn tool_round(&mut self, calls: &[(&str, &str)]) -> &mut Self {
        let ids: Vec<&str> = calls.iter().map(|(id, _)| *id).collect();
        self.expect_call_model().answer_model(turn(calls)).gate_run(&ids).expect_commit();
        for id in &ids {
            self.expect_run_tool(id);
        }
        for id in &ids {
            self.settle(id, ok(&format!("{id} done"))).expect_commit();
        }
        self
    }

    fn ran_tool(&self, id: &str) -> bool {
        self.log.iter().any(|e| matches!(e, Effect::RunTool { call, .. } if call.id == id))
    }

    fn emitted(&self, pred: impl Fn(&Event) -> bool) -> bool {
        self.events.iter().any(pred)
    }
}

// ----- shared openings -----

/// A new run whose first model turn asks for c1 (search) and c2 (write), committed and both running.
fn two_calls_running() -> Story {
    let mut s = Story::new(config());
    s.expect_commit()
        .expect_call_model_step(1)
        .answer_model(turn(&[("c1", "search"), ("c2", "write")]))
        .gate_run(&["c1", "c2"])
        .expect_commit()
        .expect_run_tool("c1")
        .expect_run_tool("c2")
        .expect_idle();
    s
}

/// A run paused on c2 (deploy, approval apr_a) and c3 (write, approval apr_b); c1 (search) ran first.
fn paused() -> Story {
    let mut s = Story::new(config());
    s.expect_commit()
        .expect_call_model()
        .answer_model(turn(&[("c1", "search"), ("c2", "deploy"), ("c3", "write")]))
        .expect_gate(&["c1", "c2", "c3"])
        .gate(vec![("c1", Gate::Run), ("c2", needs_approval("apr_a")), ("c3", needs_approval("apr_b"))])
        .expect_commit()
        .expect_run_tool("c1")
        .expect_idle()
        .settle("c1", ok("found it"))
        .expect_commit();
    let approvals = s.expect_pause();
    assert_eq!(approvals.len(), 2);
    s.expect_idle().approvals_recorded().expect_commit();
    let outcome = s.expect_finish();
    assert_eq!(outcome.status, RunStatus::AwaitingApproval);
    s
}

// ----- stories -----

#[test]
fn a_new_run_commits_a_snapshot_before_calling_the_model() {
    let mut s = Story::new(config());
    s.expect_commit_pending();
    let entry = s.journal.last().unwrap().clone();
    let EntryBody::Snapshot { state } = &entry.body else {
        panic!("the first entry of a new run is a snapshot: {entry:#?}")
    };
    assert_eq!(entry.seq, 1);
    assert_eq!(state.messages, vec![Message::system(INSTRUCTIONS), Message::user("hi")]);
    assert_eq!(state.status, RunStatus::InProgress);
    assert_eq!(state.step_index, 0);
    assert_eq!(state.fingerprint.as_ref(), Some(&fingerprint("mock", TOOLS)));
    assert_eq!((state.input_start, state.input_len), (1, 1));
    // The model is not called before the commit is written.
    s.expect_idle().ack().expect_call_model_step(1).expect_idle();
    assert!(s.emitted(|e| matches!(e, Event::RunStart { resumed: false, step: 0 })));
}

#[test]
fn a_new_run_without_user_input_is_refused() {
    let err = Story::start(config(), None, Start::Send(vec![Message::system("only a system prompt")])).err().unwrap();
    assert_eq!(err.code, ErrorCode::InvalidInput);
    let err = Story::start(config(), None, Start::Resume).err().unwrap();
    assert_eq!(err.code, ErrorCode::CheckpointNotFound);
}

#[test]
fn a_turn_with_two_tool_calls_is_committed_before_any_tool_runs() {
    let mut s = Story::new(config());
    s.expect_commit()
        .expect_call_model()
        .answer_model(turn(&[("c1", "search"), ("c2", "write")]))
        .gate_run(&["c1", "c2"])
        .expect_commit_pending();
    let committed = s.last_commit().clone();
    assert_eq!(committed.step_index, 1);
    assert_eq!(committed.usage, Usage::tokens(10, 5));
    let last = committed.messages.last().unwrap();
    assert_eq!(last.tool_calls().iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), ["c1", "c2"]);
    assert!(results(&committed.messages).is_empty());
    // No tool starts while the turn's commit is being written.
    s.expect_idle().ack().expect_run_tool("c1").expect_run_tool("c2").expect_idle();
    assert!(s.emitted(|e| matches!(e, Event::Step { step: 1, tool_calls, .. } if tool_calls.len() == 2)));
}

#[test]
fn results_are_recorded_in_call_order_when_the_second_call_settles_first() {
    let mut s = two_calls_running();
    s.settle("c2", ok("wrote it")).expect_commit();
    let early = s.last_commit().clone();
    assert_eq!(early.held_results.len(), 1, "the early result is held durably");
    assert_eq!(early.held_results[0].tool_call_id, "c2");
    assert_eq!(early.held_results[0].content, "wrote it");
    assert!(result_ids(&early.messages).is_empty(), "c2 is not placed before c1 has a result");
    assert!(validate_transcript(&early.messages).is_ok());
    s.expect_idle().settle("c1", ok("found it")).expect_commit();
    let both = s.last_commit().clone();
    assert!(both.held_results.is_empty());
    assert_eq!(result_ids(&both.messages), ["c1", "c2"]);
    let n = both.messages.len();
    assert!(matches!(&both.messages[n - 3], Message::Assistant { .. }), "results follow their turn directly");
    assert_eq!(result_for(&both.messages, "c1").kind, ResultKind::Execution);
    assert!(!result_for(&both.messages, "c2").is_error);
    validate_transcript(&both.messages).unwrap();
    s.expect_call_model_step(2);
}

#[test]
fn a_result_that_settles_while_a_commit_is_written_is_committed_next() {
    let mut s = two_calls_running();
    s.settle("c2", ok("wrote it")).expect_commit_pending();
    // c1 settles while the commit holding c2 is still being written: nothing happens until it is.
    s.settle("c1", ok("found it")).expect_idle().ack().expect_commit();
    assert_eq!(result_ids(&s.last_commit().messages), ["c1", "c2"]);
    s.expect_call_model_step(2);
}

#[test]
fn gated_calls_pause_with_one_approval_record_each() {
    let mut s = Story::new(config());
    s.expect_commit()
        .expect_call_model()
        .answer_model(turn(&[("c1", "search"), ("c2", "deploy"), ("c3", "write")]))
        .expect_gate(&["c1", "c2", "c3"])
        .gate(vec![("c1", Gate::Run), ("c2", needs_approval("apr_a")), ("c3", needs_approval("apr_b"))])
        .expect_commit()
        // Only the call that needs no approval runs; the pause waits for it.
        .expect_run_tool("c1")
        .expect_idle()
        .settle("c1", ok("found it"))
        .expect_commit();
    assert_eq!(result_ids(&s.last_commit().messages), ["c1"]);
    let approvals = s.expect_pause();
    assert_eq!(approvals.iter().map(|a| a.id.as_str()).collect::<Vec<_>>(), ["apr_a", "apr_b"]);
    assert_eq!(approvals.iter().map(|a| a.tool_call.id.as_str()).collect::<Vec<_>>(), ["c2", "c3"]);
    for a in &approvals {
        assert_eq!(a.run_id, RUN);
        assert_eq!(a.batch, vec!["apr_a".to_string(), "apr_b".to_string()]);
        assert_eq!(a.status, ApprovalStatus::Pending);
        assert_eq!(a.step, 1);
        assert_eq!(a.created_at, NOW);
        assert_eq!(a.fingerprint.as_ref(), Some(&fingerprint("mock", TOOLS)));
    }
    // The awaiting-approval checkpoint is written only after the records.
    s.expect_idle();
    assert_eq!(s.stored().status, RunStatus::InProgress);
    s.approvals_recorded().expect_commit();
    let cp = s.last_commit().clone();
    assert_eq!(cp.status, RunStatus::AwaitingApproval);
    assert_eq!(cp.status.as_str(), "awaiting-approval");
    assert_eq!(cp.approval_ids, vec!["apr_a".to_string(), "apr_b".to_string()]);
    let outcome = s.expect_finish();
    assert_eq!(outcome.status, RunStatus::AwaitingApproval);
    assert_eq!(outcome.finish_reason, Some(FinishReason::AwaitingApproval));
    assert_eq!(outcome.error, None);
    let requested: Vec<&str> = s
        .events
        .iter()
        .filter_map(|e| match e {
            Event::ApprovalRequested { approval_id, .. } => Some(approval_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(requested, ["apr_a", "apr_b"]);
}

#[test]
fn resolving_a_pause_records_the_rejection_and_marks_the_approved_call_started_before_it_runs() {
    let p = paused();
    let mut s =
        Story::resume(&p, config(), Start::Approvals(vec![reject("apr_a", "c2", "too risky"), approve("apr_b", "c3")]))
            .expect("the approvals match the pause");
    // First durable boundary: the rejection is recorded and c3 is marked started — before it runs.
    s.expect_commit_pending().expect_idle().ack();
    let marked = s.last_commit().clone();
    assert_eq!(marked.status, RunStatus::InProgress);
    assert!(marked.approval_ids.is_empty());
    assert_eq!(marked.started_tool_call_ids, vec!["c3".to_string()]);
    let rejection = result_for(&marked.messages, "c2");
    assert_eq!(rejection.kind, ResultKind::Rejected);
    assert!(rejection.is_error);
    assert!(rejection.content.contains("too risky"), "the reviewer's note reaches the model: {}", rejection.content);
    assert!(rejection.content.contains("rejected"));
    assert_eq!(result_ids(&marked.messages), ["c1", "c2"]);
    s.expect_run_approved("c3", "apr_b").expect_idle().settle("c3", ok("written")).expect_commit();
    let done = s.last_commit().clone();
    assert_eq!(result_ids(&done.messages), ["c1", "c2", "c3"]);
    assert_eq!(result_for(&done.messages, "c3").kind, ResultKind::Execution);
    validate_transcript(&done.messages).unwrap();
    s.expect_call_model_step(2).answer_model(answer("done")).expect_commit();
    assert_eq!(s.expect_finish().finish_reason, Some(FinishReason::Stop));
    assert!(!s.ran_tool("c2"), "a rejected call never runs");
}

#[test]
fn an_approved_call_that_comes_first_is_held_behind_nothing_and_a_later_rejection_waits_for_it() {
    let p = paused();
    let mut s =
        Story::resume(&p, config(), Start::Approvals(vec![approve("apr_a", "c2"), reject("apr_b", "c3", "no")]))
            .unwrap();
    s.expect_commit();
    let marked = s.last_commit().clone();
    assert_eq!(marked.started_tool_call_ids, vec!["c2".to_string()]);
    // c3's rejection cannot be placed before c2's result: it is held, durably.
    assert_eq!(marked.held_results.iter().map(|r| r.tool_call_id.as_str()).collect::<Vec<_>>(), ["c3"]);
    assert_eq!(marked.held_results[0].kind, ResultKind::Rejected);
    s.expect_run_approved("c2", "apr_a").settle("c2", ok("deployed")).expect_commit();
    assert_eq!(result_ids(&s.last_commit().messages), ["c1", "c2", "c3"]);
    assert!(s.last_commit().held_results.is_empty());
    s.expect_call_model_step(2);
}

#[test]
fn decisions_must_cover_the_whole_pause() {
    let p = paused();
    let err = Story::resume(&p, config(), Start::Approvals(vec![approve("apr_a", "c2")])).err().unwrap();
    assert_eq!(err.code, ErrorCode::ApprovalNotFound);
    assert_eq!(err.approval_id.as_deref(), Some("apr_b"));
    // Decisions for a run that is not paused are orphans.
    let mut running = two_calls_running();
    running.settle("c1", ok("a")).expect_commit();
    let err = Story::resume(&running, config(), Start::Approvals(vec![approve("apr_a", "c2")])).err().unwrap();
    assert_eq!(err.code, ErrorCode::ApprovalOrphaned);
}

#[test]
fn a_started_approved_call_without_a_result_gets_an_interrupted_result_and_never_runs_again() {
    let p = paused();
    let mut s =
        Story::resume(&p, config(), Start::Approvals(vec![reject("apr_a", "c2", "no"), approve("apr_b", "c3")]))
            .unwrap();
    s.expect_commit();
    assert_eq!(s.last_commit().started_tool_call_ids, vec!["c3".to_string()]);
    // The process dies here: RunTool c3 may or may not have been performed.
    let mut r = Story::resume(&s, config(), Start::Resume).expect("resumable");
    r.expect_commit_pending();
    let cp = r.last_commit().clone();
    let interrupted = result_for(&cp.messages, "c3");
    assert_eq!(interrupted.kind, ResultKind::Interrupted);
    assert!(interrupted.is_error);
    assert!(interrupted.content.contains("may or may not have taken effect"), "{}", interrupted.content);
    assert_eq!(result_ids(&cp.messages), ["c1", "c2", "c3"]);
    r.ack().expect_call_model_step(2);
    assert!(!r.log.iter().any(|e| matches!(e, Effect::RunTool { .. } | Effect::Gate { .. })), "{:#?}", r.log);
    assert!(r.emitted(|e| matches!(e, Event::ToolResume { tool_call_ids } if tool_call_ids == &["c3".to_string()])));
}

#[test]
fn a_started_call_whose_tool_is_gone_is_still_interrupted() {
    let p = paused();
    let mut s =
        Story::resume(&p, config(), Start::Approvals(vec![reject("apr_a", "c2", "no"), approve("apr_b", "c3")]))
            .unwrap();
    s.expect_commit();
    // "write" was removed; the started call needs no tool to be answered.
    let cfg = config_with("mock", &["deploy", "search"]);
    let mut r = Story::resume(&s, cfg, Start::Resume).expect("a started call does not need its tool");
    r.expect_commit();
    assert_eq!(result_for(&r.last_commit().messages, "c3").kind, ResultKind::Interrupted);
    r.expect_call_model();
}

#[test]
fn sending_to_a_run_awaiting_approval_is_refused_with_run_and_approval_ids() {
    let p = paused();
    for start in [Start::Send(vec![Message::user("any news?")]), Start::Resume] {
        let err = Story::resume(&p, config(), start).err().expect("refused");
        assert_eq!(err.code, ErrorCode::SessionAwaitingApproval);
        assert_eq!(err.code(), "STEADFAST_SESSION_AWAITING_APPROVAL");
        assert_eq!(err.run_id.as_deref(), Some(RUN));
        assert_eq!(err.approval_id.as_deref(), Some("apr_a"));
        assert!(!err.retryable);
    }
}

#[test]
fn drift_under_error_policy_fails_before_any_effect() {
    let mut s = two_calls_running();
    s.settle("c1", ok("a")).expect_commit();
    let mut cfg = config_with("mock-2", &["deploy", "extra", "search", "write"]);
    cfg.on_agent_drift = DriftPolicy::Error;
    for start in [Start::Resume, Start::Send(vec![Message::user("more")])] {
        let err = Story::resume(&s, cfg.clone(), start).err().expect("drift is an error");
        assert_eq!(err.code, ErrorCode::AgentDrift);
        assert_eq!(err.run_id.as_deref(), Some(RUN));
        let details = err.details.clone().expect("the drift is attached");
        assert_eq!(details["model"]["from"], "mock");
        assert_eq!(details["model"]["to"], "mock-2");
        assert_eq!(details["toolsAdded"], json!(["extra"]));
    }
    // Decisions on a pause are refused too, before anything is touched.
    let p = paused();
    let err =
        Story::resume(&p, cfg, Start::Approvals(vec![approve("apr_a", "c2"), approve("apr_b", "c3")])).err().unwrap();
    assert_eq!(err.code, ErrorCode::AgentDrift);
}

#[test]
fn drift_under_warn_policy_emits_agent_drift_and_continues() {
    let mut s = two_calls_running();
    s.settle("c1", ok("a")).expect_commit();
    let cfg = config_with("mock-2", &["deploy", "extra", "search", "write"]);
    let mut r = Story::resume(&s, cfg.clone(), Start::Resume).expect("warn continues");
    r.gate_run(&["c2"]).expect_run_tool("c2").settle("c2", ok("b")).expect_commit();
    let drift = r
        .events
        .iter()
        .find_map(|e| match e {
            Event::AgentDrift(d) => Some(d.clone()),
            _ => None,
        })
        .expect("an agent.drift event");
    assert_eq!(drift.model.as_ref().map(|m| (m.from.as_str(), m.to.as_str())), Some(("mock", "mock-2")));
    assert_eq!(drift.tools_added, vec!["extra".to_string()]);
    assert!(drift.tools_removed.is_empty() && drift.tools_changed.is_empty() && !drift.instructions);
    // The next commit records the new agent's fingerprint.
    assert_eq!(r.last_commit().fingerprint.as_ref(), Some(&cfg.fingerprint));
    r.expect_call_model_step(2);
    // `ignore` stays silent.
    let mut quiet = cfg;
    quiet.on_agent_drift = DriftPolicy::Ignore;
    let q = Story::resume(&s, quiet, Start::Resume).unwrap();
    let mut q = q;
    q.expect_gate(&["c2"]);
    assert!(!q.emitted(|e| matches!(e, Event::AgentDrift(_))));
}

#[test]
fn a_pending_call_whose_tool_is_gone_refuses_to_resume() {
    let s = two_calls_running();
    let mut cfg = config_with("mock", &["deploy", "search"]);
    cfg.on_agent_drift = DriftPolicy::Ignore;
    for start in [Start::Resume, Start::Send(vec![Message::user("go on")])] {
        let err = Story::resume(&s, cfg.clone(), start).err().expect("refused");
        assert_eq!(err.code, ErrorCode::ResumeToolMissing);
        assert_eq!(err.run_id.as_deref(), Some(RUN));
        assert!(err.message.contains("'write'") && err.message.contains("'c2'"), "{}", err.message);
    }
    // An approved call needs its tool; a rejected one does not.
    let p = paused();
    let err =
        Story::resume(&p, cfg.clone(), Start::Approvals(vec![reject("apr_a", "c2", "no"), approve("apr_b", "c3")]))
            .err()
            .unwrap();
    assert_eq!(err.code, ErrorCode::ResumeToolMissing);
    let mut r =
        Story::resume(&p, cfg, Start::Approvals(vec![approve("apr_a", "c2"), reject("apr_b", "c3", "no")])).unwrap();
    r.expect_commit().expect_run_approved("c2", "apr_a");
}

#[test]
fn abort_while_tools_run_cancels_every_unfinished_call() {
    let mut s = Story::new(config());
    s.expect_commit()
        .expect_call_model()
        .answer_model(turn(&[("c1", "search"), ("c2", "write"), ("c3", "deploy")]))
        .gate_run(&["c1", "c2", "c3"])
        .expect_commit()
        .expect_run_tool("c1")
        .expect_run_tool("c2")
        .expect_run_tool("c3")
        .settle("c2", ok("wrote it"))
        .expect_commit();
    s.abort().expect_commit();
    let cp = s.last_commit().clone();
    assert_eq!(result_ids(&cp.messages), ["c1", "c2", "c3"]);
    assert!(cp.held_results.is_empty());
    for id in ["c1", "c3"] {
        let r = result_for(&cp.messages, id);
        assert_eq!(r.kind, ResultKind::Cancelled, "{id}");
        assert!(r.is_error);
        assert!(r.content.contains("cancelled"));
    }
    assert_eq!(result_for(&cp.messages, "c2").kind, ResultKind::Execution, "a recorded result is kept");
    assert_eq!(cp.status, RunStatus::InProgress);
    assert_eq!(cp.finish_reason, None);
    validate_transcript(&cp.messages).unwrap();
    let outcome = s.expect_finish();
    assert_eq!(outcome.status, RunStatus::InProgress);
    assert_eq!(outcome.finish_reason, Some(FinishReason::Aborted));
    assert_eq!(outcome.error, None);
    // A tool that finishes after the abort changes nothing.
    s.settle("c1", ok("late"));
    assert!(s.try_next().is_none());
    assert_eq!(s.cp(), &cp);
    // The aborted run resumes with a model call, running nothing again.
    let mut r = Story::resume(&s, config(), Start::Resume).unwrap();
    r.expect_call_model_step(2);
    assert!(!r.ran_tool("c1") && !r.ran_tool("c3"));
}

#[test]
fn abort_while_waiting_for_the_model_commits_and_ignores_the_late_answer() {
    let mut s = two_calls_running();
    s.settle("c1", ok("a")).expect_commit().settle("c2", ok("b")).expect_commit().expect_call_model_step(2);
    s.abort().expect_commit();
    assert_eq!(s.last_commit().step_index, 1);
    let outcome = s.expect_finish();
    assert_eq!(outcome.finish_reason, Some(FinishReason::Aborted));
    s.answer_model(answer("too late"));
    assert!(s.try_next().is_none());
    assert_eq!(s.cp().step_index, 1, "a late model answer is not recorded");
}

#[test]
fn a_propagating_tool_error_records_last_error_and_the_next_progress_clears_it() {
    let mut s = two_calls_running();
    let err = Error::new(ErrorCode::ToolPropagated, "disk on fire");
    s.settle("c1", ToolOutcome::Propagate(err.clone())).expect_commit();
    let cp = s.last_commit().clone();
    let last = cp.last_error.clone().expect("lastError is recorded");
    assert_eq!(last.code, ErrorCode::ToolPropagated);
    assert!(last.message.contains("disk on fire"));
    assert!(last.retryable);
    assert_eq!(cp.attempts, 1);
    assert_eq!(cp.status, RunStatus::InProgress);
    assert!(result_ids(&cp.messages).is_empty(), "no result is recorded for the failed attempt");
    let outcome = s.expect_finish();
    assert_eq!(outcome.error.as_ref().map(|e| e.code), Some(ErrorCode::ToolPropagated));
    assert_eq!(outcome.status, RunStatus::InProgress);
    assert!(s.emitted(|e| matches!(e, Event::Error { error } if error.code == ErrorCode::ToolPropagated)));
    // The sibling still in flight is forgotten.
    s.settle("c2", ok("late"));
    assert!(s.try_next().is_none());

    // Second attempt fails the same way: attempts count up.
    let mut r = Story::resume(&s, config(), Start::Resume).unwrap();
    r.gate_run(&["c1", "c2"]).expect_run_tool("c1").expect_run_tool("c2");
    r.settle("c1", ToolOutcome::Propagate(err)).expect_commit();
    assert_eq!(r.last_commit().attempts, 2);
    r.expect_finish();

    // Third attempt makes progress: its first commit clears lastError and attempts.
    let mut t = Story::resume(&r, config(), Start::Resume).unwrap();
    t.gate_run(&["c1", "c2"]).expect_run_tool("c1").expect_run_tool("c2");
    t.settle("c2", ok("b")).expect_commit();
    assert_eq!(t.last_commit().last_error, None);
    assert_eq!(t.last_commit().attempts, 0);
    t.settle("c1", ok("a")).expect_commit().expect_call_model_step(2);
}

#[test]
fn a_failed_model_call_records_last_error_and_keeps_the_run_resumable() {
    let mut s = Story::new(config());
    s.expect_commit().expect_call_model();
    accepted("notify_model_failed", s.m.notify_model_failed(Error::new(ErrorCode::ProviderUnavailable, "HTTP 503")));
    s.expect_commit();
    assert_eq!(s.last_commit().last_error.as_ref().map(|e| e.code), Some(ErrorCode::ProviderUnavailable));
    assert_eq!(s.last_commit().attempts, 1);
    assert_eq!(s.expect_finish().error.map(|e| e.code), Some(ErrorCode::ProviderUnavailable));
    let mut r = Story::resume(&s, config(), Start::Resume).unwrap();
    r.expect_call_model_step(1).answer_model(answer("hello")).expect_commit();
    assert_eq!(r.last_commit().last_error, None);
    assert_eq!(r.last_commit().attempts, 0);
    assert_eq!(r.expect_finish().finish_reason, Some(FinishReason::Stop));
}

#[test]
fn reaching_max_steps_finishes_with_max_steps() {
    let mut cfg = config();
    cfg.max_steps = 2;
    let mut s = Story::new(cfg);
    s.expect_commit().tool_round(&[("c1", "search")]).tool_round(&[("c2", "search")]);
    let cp = s.last_commit().clone();
    assert_eq!(cp.status, RunStatus::Finished);
    assert_eq!(cp.finish_reason, Some(FinishReason::MaxSteps));
    assert_eq!(cp.step_index, 2);
    assert_eq!(result_ids(&cp.messages), ["c1", "c2"], "the transcript is intact");
    let outcome = s.expect_finish();
    assert_eq!(outcome.status, RunStatus::Finished);
    assert_eq!(outcome.finish_reason, Some(FinishReason::MaxSteps));
    assert!(outcome.note.as_deref().unwrap_or("").contains("maxSteps"), "{:?}", outcome.note);
    assert_eq!(s.log.iter().filter(|e| matches!(e, Effect::CallModel { .. })).count(), 2);
}

/// Runs `n` turns of one `search {"q": "x"}` call that fails with `message(i)`.
fn failing_turns(s: &mut Story, first: usize, n: usize, message: impl Fn(usize) -> String) {
    for i in first..first + n {
        let id = format!("f{i}");
        s.expect_call_model()
            .answer_model(turn_with(vec![call(&id, "search", json!({"q": "x"}))]))
            .gate_run(&[&id])
            .expect_commit()
            .expect_run_tool(&id)
            .settle(&id, failed(&message(i)))
            .expect_commit();
    }
}

#[test]
fn the_same_failing_call_four_turns_in_a_row_is_a_loop() {
    let mut s = Story::new(config());
    s.expect_commit();
    failing_turns(&mut s, 1, 3, |_| "Error: boom".into());
    assert_eq!(s.last_commit().status, RunStatus::InProgress, "three turns are not a loop yet");
    failing_turns(&mut s, 4, 1, |_| "Error: boom".into());
    let cp = s.last_commit().clone();
    assert_eq!(cp.status, RunStatus::Finished);
    assert_eq!(cp.finish_reason, Some(FinishReason::LoopDetected));
    assert_eq!(result_ids(&cp.messages), ["f1", "f2", "f3", "f4"]);
    let outcome = s.expect_finish();
    assert_eq!(outcome.finish_reason, Some(FinishReason::LoopDetected));
    assert!(outcome.note.as_deref().unwrap_or("").contains("4 times"), "{:?}", outcome.note);
}

#[test]
fn different_failures_are_not_a_loop() {
    let mut s = Story::new(config());
    s.expect_commit();
    failing_turns(&mut s, 1, 5, |i| format!("Error: boom #{i}"));
    assert_eq!(s.last_commit().status, RunStatus::InProgress);
    s.expect_call_model_step(6);
    // A success in between breaks the streak too.
    let mut t = Story::new(config());
    t.expect_commit();
    failing_turns(&mut t, 1, 3, |_| "Error: boom".into());
    t.tool_round(&[("ok1", "search")]);
    failing_turns(&mut t, 5, 3, |_| "Error: boom".into());
    t.expect_call_model_step(8);
}

#[test]
fn invalid_arguments_unknown_tools_and_denials_are_answered_without_running() {
    let mut s = Story::new(config());
    s.expect_commit()
        .expect_call_model()
        .answer_model(turn(&[("c1", "search"), ("c2", "nope"), ("c3", "write"), ("c4", "deploy")]))
        .expect_gate(&["c1", "c2", "c3", "c4"])
        .gate(vec![
            ("c1", Gate::Invalid { message: "missing required property 'q'".into() }),
            ("c2", Gate::UnknownTool),
            ("c3", Gate::Run),
            ("c4", Gate::Denied { reason: "not on fridays".into() }),
        ])
        .expect_commit();
    let cp = s.last_commit().clone();
    assert_eq!(result_ids(&cp.messages), ["c1", "c2"], "answered calls before the running one are placed");
    let invalid = result_for(&cp.messages, "c1");
    assert_eq!(invalid.kind, ResultKind::Validation);
    assert!(invalid.is_error);
    assert_eq!(invalid.content, "invalid arguments for 'search': missing required property 'q'");
    let unknown = result_for(&cp.messages, "c2");
    assert_eq!(unknown.kind, ResultKind::Validation);
    assert!(unknown.is_error);
    assert_eq!(unknown.content, "unknown tool 'nope'. Available tools: deploy, search, write");
    assert_eq!(cp.held_results.iter().map(|r| r.tool_call_id.as_str()).collect::<Vec<_>>(), ["c4"]);
    assert_eq!(cp.held_results[0].kind, ResultKind::Denied);
    assert!(cp.held_results[0].content.contains("not on fridays"));
    s.expect_run_tool("c3").expect_idle().settle("c3", ok("w")).expect_commit();
    assert_eq!(result_ids(&s.last_commit().messages), ["c1", "c2", "c3", "c4"]);
    s.expect_call_model_step(2);
    assert!(!s.ran_tool("c1") && !s.ran_tool("c2") && !s.ran_tool("c4"));
}

#[test]
fn a_missing_gate_decision_is_a_validation_result() {
    let mut s = Story::new(config());
    s.expect_commit()
        .expect_call_model()
        .answer_model(turn(&[("c1", "search"), ("c2", "write")]))
        .expect_gate(&["c1", "c2"])
        .gate(vec![("c2", Gate::Run)])
        .expect_commit();
    assert_eq!(result_for(&s.last_commit().messages, "c1").kind, ResultKind::Validation);
    s.expect_run_tool("c2");
    assert!(!s.ran_tool("c1"));
}

#[test]
fn input_sent_while_calls_are_pending_is_placed_after_their_results() {
    let s = two_calls_running();
    let mut r = Story::resume(&s, config(), Start::Send(vec![Message::user("also check the logs")])).unwrap();
    r.gate_run(&["c1", "c2"]).expect_commit();
    let queued = r.last_commit().clone();
    assert_eq!(queued.queued_input, vec![Message::user("also check the logs")], "the input is kept durably");
    assert_eq!(queued.messages, s.stored().messages, "but not placed between a turn and its results");
    r.expect_run_tool("c1").expect_run_tool("c2").settle("c1", ok("a")).expect_commit();
    assert!(validate_transcript(&r.last_commit().messages).is_ok());
    assert!(!r.last_commit().messages.contains(&Message::user("also check the logs")));
    r.settle("c2", ok("b")).expect_commit();
    let placed = r.last_commit().clone();
    assert!(placed.queued_input.is_empty());
    let n = placed.messages.len();
    assert_eq!(placed.messages[n - 1], Message::user("also check the logs"));
    assert_eq!(result_ids(&placed.messages[..n - 1]), ["c1", "c2"]);
    assert!(matches!(placed.messages[n - 2], Message::Tool(_)));
    validate_transcript(&placed.messages).unwrap();
    r.expect_call_model_step(2);
}

#[test]
fn resending_the_original_input_is_a_retry_not_new_input() {
    let s = two_calls_running();
    let mut r =
        Story::resume(&s, config(), Start::Send(vec![Message::system("ignored"), Message::user("hi")])).unwrap();
    // Nothing to commit before the pending calls run again.
    r.gate_run(&["c1", "c2"]).expect_run_tool("c1").expect_run_tool("c2");
    assert!(r.commits.is_empty());
    r.settle("c1", ok("a")).expect_commit().settle("c2", ok("b")).expect_commit();
    assert!(r.last_commit().queued_input.is_empty());
    assert_eq!(r.last_commit().messages.iter().filter(|m| **m == Message::user("hi")).count(), 1);
    assert!(!r.last_commit().messages.iter().any(|m| *m == Message::system("ignored")));
}

#[test]
fn a_finished_run_continues_as_a_conversation() {
    let mut s = Story::new(config());
    s.expect_commit()
        .tool_round(&[("c1", "search")])
        .expect_call_model()
        .answer_model(answer("first answer"))
        .expect_commit();
    assert_eq!(s.expect_finish().finish_reason, Some(FinishReason::Stop));
    let history: Vec<Message> = s.stored().messages.into_iter().filter(|m| !m.is_system()).collect();
    // The client re-sends the stored history plus one new message: only the new message is added.
    let mut input = history.clone();
    input.push(Message::user("and then?"));
    let mut r = Story::resume(&s, config(), Start::Send(input)).unwrap();
    r.expect_commit();
    let cp = r.last_commit().clone();
    assert_eq!(cp.messages.len(), history.len() + 2, "system + history + the new message");
    assert_eq!(cp.messages.last(), Some(&Message::user("and then?")));
    assert_eq!(
        (cp.step_index, cp.usage, cp.status, cp.finish_reason),
        (0, Usage::default(), RunStatus::InProgress, None)
    );
    r.expect_call_model_step(1);
    // Sending nothing new to a finished run is refused.
    let err = Story::resume(&s, config(), Start::Send(vec![])).err().unwrap();
    assert_eq!(err.code, ErrorCode::InvalidInput);
    let err = Story::resume(&s, config(), Start::Resume).err().unwrap();
    assert_eq!(err.code, ErrorCode::CheckpointNotFound);
}

#[test]
fn resending_exactly_the_stored_history_does_not_duplicate_it() {
    let mut s = Story::new(config());
    s.expect_commit()
        .tool_round(&[("c1", "search")])
        .expect_call_model()
        .answer_model(answer("first answer"))
        .expect_commit();
    s.expect_finish();
    let history: Vec<Message> = s.stored().messages.into_iter().filter(|m| !m.is_system()).collect();
    match Story::resume(&s, config(), Start::Send(history)) {
        // Refusing it ("send a new message") is fine …
        Err(err) => assert_eq!(err.code, ErrorCode::InvalidInput),
        // … but if it is accepted, the transcript must stay valid (no duplicated tool-call ids).
        Ok(mut r) => {
            r.expect_commit();
            validate_transcript(&r.last_commit().messages).expect("history is not duplicated");
        }
    }
}

#[test]
fn duplicate_call_ids_from_the_model_are_renamed() {
    let mut s = two_calls_running();
    s.settle("c1", ok("a")).expect_commit().settle("c2", ok("b")).expect_commit();
    s.expect_call_model()
        .answer_model(turn(&[("c1", "search"), ("", "write"), ("x", "write"), ("x", "search")]))
        .expect_gate(&["call_2_0", "call_2_1", "x", "call_2_3"]);
}

/// An id with any control character (every one of them, at the start, inside, at the end) is renamed like a
/// missing one: a line break in it would split the lines a call's id travels in (a child run's execution in
/// its own object, SSE). Other characters are kept as the model gave them.
#[test]
fn call_ids_with_control_characters_from_the_model_are_renamed() {
    let controls: Vec<char> = (0u32..0x20).chain(0x7f..0xa0).filter_map(char::from_u32).collect();
    assert!(controls.iter().all(|c| c.is_control()) && controls.len() == 65);
    for ch in controls {
        let ids = [format!("{ch}a"), format!("a{ch}b"), format!("b{ch}")];
        let mut s = two_calls_running();
        s.settle("c1", ok("a")).expect_commit().settle("c2", ok("b")).expect_commit();
        let calls: Vec<(&str, &str)> =
            vec![(&ids[0], "search"), (&ids[1], "write"), (&ids[2], "search"), ("id é ✓", "write")];
        s.expect_call_model().answer_model(turn(&calls)).expect_gate(&["call_2_0", "call_2_1", "call_2_2", "id é ✓"]);
    }
}

#[test]
fn business_state_from_a_tool_is_committed_with_its_result() {
    let mut cfg = config();
    cfg.business_state = Some(json!({"cart": []}));
    let mut s = Story::new(cfg);
    s.expect_commit();
    assert_eq!(s.last_commit().business_state, Some(json!({"cart": []})));
    s.expect_call_model()
        .answer_model(turn(&[("c1", "write")]))
        .gate_run(&["c1"])
        .expect_commit()
        .expect_run_tool("c1");
    s.settle(
        "c1",
        ToolOutcome::Ok { content: "added".into(), business_state: Some(json!({"cart": ["apple"]})), usage: None },
    );
    s.expect_commit();
    assert_eq!(s.last_commit().business_state, Some(json!({"cart": ["apple"]})));
    assert_eq!(s.stored().business_state, Some(json!({"cart": ["apple"]})));
}

/// A long story across several executions: every commit's journal (snapshot + deltas, through JSON) folds to
/// exactly the machine's state. `expect_commit` checks it each time; this test makes sure the story is long
/// and varied, and that the journal really is deltas after the first snapshot.
#[test]
fn journal_deltas_fold_to_the_machine_state_after_every_commit() {
    let mut cfg = config();
    cfg.business_state = Some(json!({"n": 0}));
    let mut a = Story::new(cfg.clone());
    a.expect_commit();
    // Turn 1: two calls, the second settles first and changes the business state.
    a.expect_call_model()
        .answer_model(turn(&[("c1", "search"), ("c2", "write")]))
        .gate_run(&["c1", "c2"])
        .expect_commit()
        .expect_run_tool("c1")
        .expect_run_tool("c2")
        .settle("c2", ToolOutcome::Ok { content: "w".into(), business_state: Some(json!({"n": 1})), usage: None })
        .expect_commit()
        .settle("c1", failed("Error: not found"))
        .expect_commit();
    // Turn 2: one call pauses, an invalid one is answered at once.
    a.expect_call_model()
        .answer_model(turn(&[("c3", "deploy"), ("c4", "search")]))
        .expect_gate(&["c3", "c4"])
        .gate(vec![("c3", needs_approval("apr_1")), ("c4", Gate::Invalid { message: "bad".into() })])
        .expect_commit();
    a.expect_pause();
    a.approvals_recorded().expect_commit();
    a.expect_finish();
    // Execution 2: approved; the tool fails with a propagating error.
    let mut b = Story::resume(&a, cfg.clone(), Start::Approvals(vec![approve("apr_1", "c3")])).unwrap();
    b.expect_commit().expect_run_approved("c3", "apr_1");
    b.settle("c3", ToolOutcome::Propagate(Error::new(ErrorCode::ToolPropagated, "oops"))).expect_commit();
    b.expect_finish();
    // Execution 3: a send with new input; c3 is interrupted, the input is placed after the results.
    let mut c = Story::resume(&b, cfg.clone(), Start::Send(vec![Message::user("status?")])).unwrap();
    c.expect_commit();
    assert_eq!(result_for(&c.last_commit().messages, "c3").kind, ResultKind::Interrupted);
    assert_eq!(c.last_commit().messages.last(), Some(&Message::user("status?")));
    c.tool_round(&[("c5", "search"), ("c6", "write"), ("c7", "search")]);
    c.expect_call_model()
        .answer_model(turn(&[("c8", "search")]))
        .gate_run(&["c8"])
        .expect_commit()
        .expect_run_tool("c8");
    c.abort().expect_commit();
    c.expect_finish();
    // Execution 4: resume after the abort, finish.
    let mut d = Story::resume(&c, cfg.clone(), Start::Resume).unwrap();
    d.expect_call_model().answer_model(answer("all done")).expect_commit();
    d.expect_finish();
    // Execution 5: continue the finished run as a conversation (with a new agent: fingerprint changes).
    let mut e = Story::resume(&d, config_with("mock-2", TOOLS), Start::Send(vec![Message::user("one more")])).unwrap();
    e.expect_commit();
    e.tool_round(&[("c9", "write")]);
    e.expect_call_model().answer_model(answer("bye")).expect_commit();
    e.expect_finish();

    let journal = &e.journal;
    assert!(journal.len() >= 20, "a long story: {} entries", journal.len());
    assert!(matches!(journal[0].body, EntryBody::Snapshot { .. }));
    assert!(journal[1..].iter().all(|j| matches!(j.body, EntryBody::Delta { .. })), "only deltas after the snapshot");
    let total_commits = [&a, &b, &c, &d, &e].iter().map(|s| s.commits.len()).sum::<usize>();
    assert_eq!(total_commits, journal.len());
    let fin = e.stored();
    assert_eq!(&fin, e.cp());
    assert_eq!(fin.fingerprint.as_ref(), Some(&fingerprint("mock-2", TOOLS)));
    assert_eq!(fin.business_state, Some(json!({"n": 1})));
    validate_transcript(&fin.messages).unwrap();
    assert_eq!(result_ids(&fin.messages), ["c1", "c2", "c3", "c4", "c5", "c6", "c7", "c8", "c9"]);
    // Every committed state along the way was a valid transcript.
    for s in [&a, &b, &c, &d, &e] {
        for cp in &s.commits {
            validate_transcript(&cp.messages).unwrap();
        }
    }
}

// ----- answers in the wrong state -----

/// `answer` is refused with `STEADFAST_INTERNAL` (its message contains `says`) and changes nothing: same state, no
/// effect, still done or not. Call it only while the machine waits (every effect pulled).
fn refused(s: &mut Story, what: &str, says: &str, answer: impl FnOnce(&mut RunMachine) -> Result<(), Error>) {
    let before = s.cp().clone();
    let done = s.m.is_done();
    let err = match answer(&mut s.m) {
        Ok(()) => panic!("{what} was accepted"),
        Err(err) => err,
    };
    assert_eq!(err.code, ErrorCode::Internal, "{what}: {err}");
    assert_eq!(err.code(), "STEADFAST_INTERNAL");
    assert!(!err.retryable, "{what}: a refused answer is a bug, not worth retrying");
    assert_eq!(err.run_id.as_deref(), Some(RUN), "{what}");
    assert!(err.message.contains(says), "{what}: the message should say {says:?}: {}", err.message);
    assert_eq!(s.cp(), &before, "{what} changed the state");
    assert_eq!(s.m.is_done(), done, "{what}");
    assert!(s.m.poll_effect().is_none(), "{what} produced an effect");
}

/// `answer` is accepted and ignored: same state, no effect.
fn ignored(s: &mut Story, what: &str, answer: impl FnOnce(&mut RunMachine) -> Result<(), Error>) {
    let before = s.cp().clone();
    if let Err(err) = answer(&mut s.m) {
        panic!("{what} was refused: {err}");
    }
    assert_eq!(s.cp(), &before, "{what} changed the state");
    assert!(s.m.poll_effect().is_none(), "{what} produced an effect");
}

fn stray_error() -> Error {
    Error::new(ErrorCode::ProviderUnavailable, "HTTP 503")
}

#[test]
fn an_answer_the_machine_does_not_wait_for_is_refused_with_an_internal_error_and_changes_nothing() {
    let mut s = Story::new(config());
    s.expect_commit_pending();
    let commit = "the machine waits for a commit";
    refused(&mut s, "a model answer before the first commit", commit, |m| m.notify_model_response(answer("early")));
    refused(&mut s, "a model failure before the first commit", commit, |m| m.notify_model_failed(stray_error()));
    refused(&mut s, "gate verdicts nobody asked for", commit, |m| m.notify_gated(vec![]));
    refused(&mut s, "reconcile answers nobody asked for", commit, |m| m.notify_reconciled(vec![]));
    refused(&mut s, "approval records without a pause", commit, |m| m.notify_approvals_recorded());
    s.ack().expect_call_model_step(1);
    refused(&mut s, "a commit nobody handed out", "waits for the model", |m| m.notify_committed());
    s.answer_model(turn(&[("c1", "search"), ("c2", "write")])).expect_gate(&["c1", "c2"]);
    refused(&mut s, "a commit while gating", "waits for gate verdicts", |m| m.notify_committed());
    refused(
        &mut s,
        "a verdict for a call not asked about",
        "call 'c3' is unknown to this turn, not awaiting its gate verdict",
        |m| m.notify_gated(vec![("c1".into(), Gate::Run), ("c3".into(), Gate::Run)]),
    );
    s.gate(vec![("c1", Gate::Run), ("c2", Gate::Run)]).expect_commit_pending();
    refused(&mut s, "a result before the call started", "call 'c1' is ready but not started, not running", |m| {
        m.notify_tool_settled("c1", ok("too early"))
    });
    s.ack().expect_run_tool("c1").expect_run_tool("c2").expect_idle();
    refused(&mut s, "a commit while tools run", "waits for running tools only", |m| m.notify_committed());
    refused(&mut s, "a model answer while tools run", "notify_model_response refused", |m| {
        m.notify_model_response(answer("stray"))
    });
    refused(&mut s, "a result for a call of no turn", "call 'c9' is unknown to this turn, not running", |m| {
        m.notify_tool_settled("c9", ok("?"))
    });
    s.settle("c1", ok("a")).expect_commit();
    refused(&mut s, "a second result for c1", "call 'c1' is recorded, not running", |m| {
        m.notify_tool_settled("c1", ok("again"))
    });
    s.settle("c2", ok("b")).expect_commit().expect_call_model_step(2).answer_model(answer("done")).expect_commit();
    assert_eq!(s.expect_finish().finish_reason, Some(FinishReason::Stop));
    // After a run finished normally nothing is outstanding: every answer is refused.
    refused(&mut s, "a model answer after the finish", "is done", |m| m.notify_model_response(answer("late")));
    refused(&mut s, "a result after the finish", "unknown to this turn", |m| m.notify_tool_settled("c2", ok("late")));
    refused(&mut s, "a commit after the finish", "is done", |m| m.notify_committed());
    let cp = s.stored();
    assert_eq!(result_ids(&cp.messages), ["c1", "c2"], "one result per call");
    assert_eq!(result_for(&cp.messages, "c1").content, "a");
}

#[test]
fn late_answers_to_effects_handed_out_before_an_abort_are_accepted_and_change_nothing() {
    let mut s = Story::new(config());
    s.expect_commit().expect_call_model().answer_model(turn(&[("c1", "search")])).expect_gate(&["c1"]);
    // Aborted while the runtime runs the gate: the gate's verdict comes after the abort.
    s.abort().expect_commit_pending();
    assert_eq!(result_for(&s.last_commit().messages, "c1").kind, ResultKind::Cancelled);
    ignored(&mut s, "the gate's late verdict", |m| m.notify_gated(vec![("c1".into(), Gate::Run)]));
    ignored(&mut s, "a late model failure", |m| m.notify_model_failed(stray_error()));
    ignored(&mut s, "a late result", |m| m.notify_tool_settled("c1", ok("late")));
    // The commit that records the abort is still awaited, and nothing else stands in for it.
    refused(&mut s, "approval records out of turn", "waits for a commit", |m| m.notify_approvals_recorded());
    s.ack();
    assert_eq!(s.expect_finish().finish_reason, Some(FinishReason::Aborted));
    ignored(&mut s, "a model answer after the finish", |m| m.notify_model_response(answer("late")));
    refused(&mut s, "a commit after the finish", "is done", |m| m.notify_committed());
    assert!(!s.ran_tool("c1"));

    // The same while a reconcile round is outstanding.
    let crashed = intent_recorded_and_both_calls_running();
    let mut r = Story::resume(&crashed, config(), Start::Resume).unwrap();
    r.expect_reconcile(&["c1"]).abort().expect_commit_pending();
    ignored(&mut r, "the reconcile round's late answer", |m| m.notify_reconciled(vec![("c1".into(), None)]));
    r.ack();
    assert_eq!(r.expect_finish().finish_reason, Some(FinishReason::Aborted));
    assert_eq!(result_ids(&r.stored().messages), ["c1", "c2"]);
    assert!(r.stored().intents.is_empty(), "a cancelled call needs no intent any more");
}

/// A run whose first turn asks for c1 (write, side-effecting: its intent is recorded) and c2 (search); both are
/// running when the process dies, so c1's intent has no outcome.
fn intent_recorded_and_both_calls_running() -> Story {
    let mut s = Story::new(config());
    s.expect_commit()
        .expect_call_model()
        .answer_model(turn(&[("c1", "write"), ("c2", "search")]))
        .expect_gate(&["c1", "c2"])
        .gate(vec![("c1", Gate::RunWithIntent), ("c2", Gate::Run)])
        .expect_commit();
    assert_eq!(s.last_commit().intents, vec!["c1".to_string()], "the intent is committed before c1 runs");
    s.expect_run_tool("c1").expect_run_tool("c2").expect_idle();
    s
}

#[test]
fn a_call_beside_an_unreconciled_side_effect_is_gated_once_after_the_reconcile_round() {
    let crashed = intent_recorded_and_both_calls_running();
    // The tool says the effect did not happen: c1 runs again (its intent still stands), c2 is gated once.
    let mut r = Story::resume(&crashed, config(), Start::Resume).unwrap();
    r.expect_reconcile(&["c1"]).reconcile(vec![("c1", None)]).expect_gate(&["c2"]).gate(vec![("c2", Gate::Run)]);
    r.expect_run_tool("c1").expect_run_tool("c2").expect_idle();
    r.settle("c2", ok("found")).expect_commit().settle("c1", ok("written")).expect_commit();
    let cp = r.last_commit().clone();
    assert_eq!(result_ids(&cp.messages), ["c1", "c2"]);
    assert_eq!(result_for(&cp.messages, "c2").kind, ResultKind::Execution, "no fabricated validation result");
    assert!(cp.intents.is_empty());
    let gates = r.log.iter().filter(|e| matches!(e, Effect::Gate { .. })).count();
    assert_eq!(gates, 1, "one Gate effect: {:#?}", r.log);
    r.expect_call_model_step(2);

    // The tool says it happened: its answer is c1's result and c1 does not run again.
    let mut h = Story::resume(&crashed, config(), Start::Resume).unwrap();
    h.expect_reconcile(&["c1"]).reconcile(vec![("c1", Some(ok("written earlier")))]).expect_gate(&["c2"]);
    h.gate(vec![("c2", Gate::Run)]).expect_commit().expect_run_tool("c2").expect_idle();
    assert_eq!(result_for(&h.last_commit().messages, "c1").content, "written earlier");
    h.settle("c2", ok("found")).expect_commit().expect_call_model_step(2);
    assert!(!h.ran_tool("c1"));
}

/// Issue 26, bug 5: the machine hands every tool run and reconcile round the call's key, derived from the scope
/// the new run was given (written by its first snapshot, never by a delta): another process resuming the stored
/// run runs and reconciles the same call under the same key, whatever scope its configuration would give a new
/// run; a run written before scopes keys its calls by its id alone.
#[test]
fn calls_run_and_reconcile_under_keys_of_the_scope_the_run_was_created_with() {
    use steadfast::core::idempotency::call_key;
    let crashed = intent_recorded_and_both_calls_running();
    let key = |s: &Story, id: &str| {
        s.log.iter().find_map(|e| match e {
            Effect::RunTool { call, key, .. } if call.id == id => Some(key.clone()),
            Effect::Reconcile { calls } => calls.iter().find(|c| c.call.id == id).map(|c| c.key.clone()),
            _ => None,
        })
    };
    let first = key(&crashed, "c1").unwrap();
    assert_eq!(first, call_key(SCOPE, "c1"));
    assert_ne!(first, key(&crashed, "c2").unwrap());
    assert_eq!(crashed.stored().key_scope.as_deref(), Some(SCOPE));
    assert!(
        crashed.journal[1..].iter().all(|e| !serde_json::to_string(e).unwrap().contains(SCOPE)),
        "deltas never carry the scope"
    );
    let other = MachineConfig { key_scope: Some("r:another".into()), ..config() };
    let mut r = Story::resume(&crashed, other, Start::Resume).unwrap();
    r.expect_reconcile(&["c1"]);
    assert_eq!(key(&r, "c1"), Some(first.clone()), "reconciled under the key it ran under");
    r.reconcile(vec![("c1", None)]).expect_gate(&["c2"]).gate(vec![("c2", Gate::Run)]);
    r.expect_run_tool("c1").expect_run_tool("c2");
    assert_eq!(key(&r, "c1"), Some(first), "and run again under it");

    // A run stored before scopes existed.
    let mut old = crashed.stored();
    old.key_scope = None;
    let mut o = Story::start(config(), Some(old), Start::Resume).unwrap();
    o.expect_reconcile(&["c1"]);
    assert_eq!(key(&o, "c1"), Some(call_key(RUN, "c1")));
}

#[test]
fn reconcile_answers_are_taken_only_for_the_calls_asked_about() {
    let crashed = intent_recorded_and_both_calls_running();
    let mut r = Story::resume(&crashed, config(), Start::Resume).unwrap();
    r.expect_reconcile(&["c1"]);
    refused(
        &mut r,
        "a reconcile answer for c2",
        "call 'c2' is awaiting its gate verdict, not awaiting its reconcile answer",
        |m| m.notify_reconciled(vec![("c1".into(), None), ("c2".into(), None)]),
    );
    refused(&mut r, "gate verdicts during the reconcile round", "waits for reconcile answers", |m| {
        m.notify_gated(vec![("c2".into(), Gate::Run)])
    });
    r.reconcile(vec![("c1", None)]).expect_gate(&["c2"]);
    refused(&mut r, "a reconcile answer after the round", "waits for gate verdicts", |m| {
        m.notify_reconciled(vec![("c1".into(), None)])
    });
}

// ----- generated stories -----

/// SplitMix64: a small seeded generator, so a failing seed reproduces.
struct Seeded(u64);

impl Seeded {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// True with `percent` % probability.
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// The one answer a story's runtime owes the machine (besides the results of running calls).
#[derive(Clone, Debug, PartialEq)]
enum Owed {
    Commit,
    Model,
    Gate(Vec<ToolCall>),
    Reconcile(Vec<KeyedCall>),
    Pause,
    Queue,
}

/// Every answer the machine does not wait for, tried while it waits: refused and changing nothing — or, once an
/// abort or a failure decided the outcome (`cut`), accepted and ignored for the model, gate, reconcile and tool
/// answers (commits and approval records are never tolerated out of turn).
fn probe(s: &mut Story, owed: Option<&Owed>, cut: bool, seed: u64) {
    type Answer = Box<dyn FnOnce(&mut RunMachine) -> Result<(), Error>>;
    let mut tolerable: Vec<(&str, Answer)> = Vec::new();
    let mut strict: Vec<(&str, Answer)> = Vec::new();
    if owed != Some(&Owed::Commit) {
        strict.push(("notify_committed", Box::new(|m| m.notify_committed())));
    }
    if owed != Some(&Owed::Pause) {
        strict.push(("notify_approvals_recorded", Box::new(|m| m.notify_approvals_recorded())));
    }
    if owed != Some(&Owed::Model) {
        tolerable.push(("notify_model_response", Box::new(|m| m.notify_model_response(answer("stray")))));
        tolerable.push(("notify_model_failed", Box::new(|m| m.notify_model_failed(stray_error()))));
    }
    if owed != Some(&Owed::Queue) {
        tolerable.push(("notify_queue", Box::new(|m| m.notify_queue(vec![]))));
    }
    match owed {
        Some(Owed::Gate(_)) => tolerable.push((
            "notify_gated for a call not asked about",
            Box::new(|m| m.notify_gated(vec![("stray".into(), Gate::Run)])),
        )),
        _ => tolerable.push(("notify_gated", Box::new(|m| m.notify_gated(vec![])))),
    }
    match owed {
        Some(Owed::Reconcile(_)) => tolerable.push((
            "notify_reconciled for a call not asked about",
            Box::new(|m| m.notify_reconciled(vec![("stray".into(), None)])),
        )),
        _ => tolerable.push(("notify_reconciled", Box::new(|m| m.notify_reconciled(vec![])))),
    }
    tolerable.push(("notify_tool_settled for an unknown call", Box::new(|m| m.notify_tool_settled("stray", ok("?")))));
    if let Some(id) = result_ids(&s.cp().messages).last().cloned() {
        tolerable
            .push(("notify_tool_settled for a recorded call", Box::new(move |m| m.notify_tool_settled(&id, ok("?")))));
    }
    for (what, answer) in strict {
        refused(s, &format!("seed {seed}: {what}"), "refused", answer);
    }
    for (what, answer) in tolerable {
        let what = format!("seed {seed}: {what}");
        if cut {
            ignored(s, &what, answer);
        } else {
            refused(s, &what, "refused", answer);
        }
    }
}

/// Plays one generated story: executions of one run (new, resumed after a crash, an abort or a failure, resolved
/// after a pause), driven effect by effect with seeded choices. With `probing`, every answer the machine does not
/// wait for is tried at every point where it waits. Returns every effect and event, and the final state.
fn play(seed: u64, probing: bool) -> (Vec<String>, Checkpoint) {
    let mut rng = Seeded(seed);
    let mut cfg = config();
    cfg.max_steps = 6;
    // Even seeds read the message queue at every boundary (steering); the messages sent so far, each re-listed
    // now and then (applied already, or lost with a crashed execution).
    cfg.steer_poll_ms = (seed % 2 == 0).then_some(0);
    let mut sent: Vec<QueuedMessage> = Vec::new();
    let mut s = Story::new(cfg.clone());
    let mut trace: Vec<String> = Vec::new();
    let mut owed: Option<Owed> = None;
    let mut running: Vec<String> = Vec::new();
    let mut cut = false;
    let mut executions = 1;
    let mut next_id = 0;
    let mut approvals: Vec<ApprovalRecord> = Vec::new();
    for _ in 0..5_000 {
        match s.try_next() {
            Some(Effect::Commit(entry)) => {
                s.journal_append(entry);
                owed = Some(Owed::Commit);
            }
            Some(Effect::CallModel { .. }) => owed = Some(Owed::Model),
            Some(Effect::Gate { calls }) => owed = Some(Owed::Gate(calls)),
            Some(Effect::Reconcile { calls }) => owed = Some(Owed::Reconcile(calls)),
            Some(Effect::RunTool { call, .. }) => running.push(call.id),
            Some(Effect::Pause { approvals: records }) => {
                approvals.extend(records);
                owed = Some(Owed::Pause);
            }
            Some(Effect::ReadQueue) => owed = Some(Owed::Queue),
            Some(Effect::Emit(_)) => unreachable!("the harness keeps events"),
            Some(Effect::Finish(outcome)) => {
                if probing {
                    probe(&mut s, None, cut, seed);
                }
                trace.extend(s.log.iter().map(|e| format!("{e:?}")));
                trace.extend(s.events.iter().map(|e| format!("{e:?}")));
                let stored = s.stored();
                if stored.status == RunStatus::Finished || executions >= 12 {
                    return (trace, stored);
                }
                let start = match stored.status {
                    RunStatus::AwaitingApproval => Start::Approvals(decide(&mut rng, &stored, &approvals)),
                    _ => Start::Resume,
                };
                assert!(outcome.status == stored.status, "seed {seed}: the outcome reports the stored status");
                s = Story::resume(&s, cfg.clone(), start).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
                executions += 1;
                (owed, cut) = (None, false);
                running.clear();
            }
            None => {
                if probing {
                    probe(&mut s, owed.as_ref(), cut, seed);
                }
                // The process dies (the next execution starts from what was committed), or the run is aborted.
                if executions < 12 && rng.chance(3) {
                    trace.extend(s.log.iter().map(|e| format!("{e:?}")));
                    trace.extend(s.events.iter().map(|e| format!("{e:?}")));
                    let stored = s.stored();
                    let start = match stored.status {
                        RunStatus::AwaitingApproval => Start::Approvals(decide(&mut rng, &stored, &approvals)),
                        RunStatus::Finished => return (trace, stored),
                        RunStatus::InProgress => Start::Resume,
                    };
                    s = Story::resume(&s, cfg.clone(), start).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
                    executions += 1;
                    (owed, cut) = (None, false);
                    running.clear();
                    continue;
                }
                // (An abort changes nothing once the run is finishing or pausing: its status tells.)
                if !cut && s.cp().status == RunStatus::InProgress && rng.chance(2) {
                    s.abort();
                    cut = true;
                    running.clear();
                    if matches!(owed, Some(Owed::Model | Owed::Gate(_) | Owed::Reconcile(_) | Owed::Queue)) {
                        owed = None;
                    }
                    continue;
                }
                if !running.is_empty() && (owed.is_none() || rng.chance(40)) {
                    let id = running.remove(rng.below(running.len()));
                    let outcome = match rng.below(100) {
                        0..=2 => ToolOutcome::Propagate(Error::new(ErrorCode::ToolPropagated, "disk on fire")),
                        3..=27 => failed("Error: boom"),
                        _ => ok(&format!("{id} done")),
                    };
                    if matches!(outcome, ToolOutcome::Propagate(_)) {
                        cut = true;
                        running.clear();
                    }
                    s.settle(&id, outcome);
                    continue;
                }
                match owed.take() {
                    Some(Owed::Commit) => {
                        s.ack();
                    }
                    Some(Owed::Model) => {
                        if rng.chance(3) {
                            accepted("notify_model_failed", s.m.notify_model_failed(stray_error()));
                            cut = true;
                        } else if rng.chance(70) {
                            let n = 1 + rng.below(3);
                            let calls: Vec<ToolCall> = (0..n)
                                .map(|_| {
                                    next_id += 1;
                                    let name = ["search", "write", "deploy", "nope"][rng.below(4)];
                                    call(&format!("t{next_id}"), name, json!({}))
                                })
                                .collect();
                            s.answer_model(turn_with(calls));
                        } else {
                            s.answer_model(answer("done"));
                        }
                    }
                    Some(Owed::Gate(calls)) => {
                        let mut verdicts = Vec::new();
                        for c in &calls {
                            let verdict = match rng.below(100) {
                                _ if c.name == "nope" => Gate::UnknownTool,
                                0..=34 => Gate::Run,
                                35..=54 => Gate::RunWithIntent,
                                55..=69 => {
                                    next_id += 1;
                                    needs_approval(&format!("apr{next_id}"))
                                }
                                70..=79 => Gate::Invalid { message: "bad".into() },
                                80..=89 => Gate::Denied { reason: "no".into() },
                                // No verdict at all: a validation result.
                                _ => continue,
                            };
                            verdicts.push((c.id.as_str(), verdict));
                        }
                        s.gate(verdicts);
                    }
                    Some(Owed::Reconcile(calls)) => {
                        let answers = calls
                            .iter()
                            .map(|c| (c.call.id.as_str(), rng.chance(50).then(|| ok("it happened"))))
                            .collect();
                        s.reconcile(answers);
                    }
                    Some(Owed::Pause) => {
                        s.approvals_recorded();
                    }
                    Some(Owed::Queue) => {
                        let mut listed: Vec<QueuedMessage> = sent.iter().filter(|_| rng.chance(50)).cloned().collect();
                        if rng.chance(30) {
                            let id = format!("msg_{}", sent.len());
                            let text = format!("steer {}", sent.len());
                            let q = QueuedMessage::new(
                                s.cp(),
                                id,
                                sent.len() as u64,
                                vec![Message::user(text)],
                                rng.chance(35),
                            )
                            .expect("a queued message");
                            sent.push(q.clone());
                            listed.push(q);
                        }
                        accepted("notify_queue", s.m.notify_queue(listed));
                    }
                    None => panic!("seed {seed}: the machine waits for nothing, with nothing running: {:#?}", s.log),
                }
            }
        }
    }
    panic!("seed {seed}: the story did not end");
}

/// A decision for every approval of the stored pause.
fn decide(rng: &mut Seeded, stored: &Checkpoint, records: &[ApprovalRecord]) -> Vec<Decision> {
    stored
        .approval_ids
        .iter()
        .map(|id| {
            let record = records.iter().find(|r| &r.id == id).expect("the pause's approval records were written");
            if rng.chance(60) {
                approve(id, &record.tool_call.id)
            } else {
                reject(id, &record.tool_call.id, "no")
            }
        })
        .collect()
}

/// Over generated stories (crashes, aborts, failures, pauses, reconcile rounds, parallel calls), every answer the
/// machine does not wait for is refused with `STEADFAST_INTERNAL` at every point where it waits, and changes
/// nothing: the story plays out exactly as without them. `STEADFAST_CASES=<n>` plays more;
/// `STEADFAST_SEED=<seed>` plays one.
#[test]
fn answers_out_of_turn_are_refused_at_every_step_of_generated_stories_and_change_nothing() {
    let seeds = common::seeds::seeds(1..501);
    let mut ended = [0usize; 3];
    // How varied the stories were: executions, reconcile rounds, pauses, aborts, failed attempts.
    let mut seen = [0usize; 7];
    for seed in seeds {
        let repro = common::seeds::repro(seed, "answers_out_of_turn_are_refused");
        let plain = std::panic::catch_unwind(|| play(seed, false));
        let probed = std::panic::catch_unwind(|| play(seed, true));
        let (Ok((plain_trace, plain_cp)), Ok((probed_trace, probed_cp))) = (plain, probed) else {
            panic!("seed {seed} failed; reproduce with: {repro}");
        };
        assert_eq!(plain_trace, probed_trace, "seed {seed}: the probes changed the story; reproduce with: {repro}");
        assert_eq!(plain_cp, probed_cp, "seed {seed}: the probes changed the state; reproduce with: {repro}");
        validate_transcript(&plain_cp.messages).unwrap_or_else(|e| panic!("seed {seed}: {e}; {repro}"));
        // A queued message is applied at most once, and the ids recorded are its.
        let steers: Vec<&String> = plain_cp
            .messages
            .iter()
            .filter_map(|m| match m {
                Message::User { content } if content.starts_with("steer ") => Some(content),
                _ => None,
            })
            .collect();
        let unique: std::collections::BTreeSet<&String> = steers.iter().copied().collect();
        assert_eq!(unique.len(), steers.len(), "seed {seed}: a queued message applied twice; {repro}");
        assert!(plain_cp.steered.len() >= steers.len(), "seed {seed}: applied messages are recorded; {repro}");
        seen[5] += plain_cp.steered.len();
        seen[6] += count_not_run(&plain_cp.messages);
        let count = |pred: &dyn Fn(&str) -> bool| plain_trace.iter().filter(|t| pred(t)).count();
        seen[0] += count(&|t| t.starts_with("RunStart"));
        seen[1] += count(&|t| t.starts_with("Reconcile {"));
        seen[2] += count(&|t| t.starts_with("Pause {"));
        seen[3] += count(&|t| t.starts_with("Finish(") && t.contains("Some(Aborted)"));
        seen[4] += count(&|t| t.starts_with("Finish(") && t.contains("error: Some"));
        ended[match plain_cp.status {
            RunStatus::Finished => 0,
            RunStatus::InProgress => 1,
            RunStatus::AwaitingApproval => 2,
        }] += 1;
    }
    eprintln!("generated stories ended finished / in progress / awaiting approval: {ended:?}");
    eprintln!(
        "executions / reconcile rounds / pauses / aborts / failed attempts / queued messages applied / calls they \
         stopped: {seen:?}"
    );
    assert!(seen[5] > 0 && seen[6] > 0, "the stories steer: {seen:?}");
}

/// Results of calls a queued message stopped.
fn count_not_run(messages: &[Message]) -> usize {
    messages.iter().filter(|m| matches!(m, Message::Tool(r) if r.kind == ResultKind::NotRun)).count()
}

/// Group commit: results that settle together are committed as one journal entry, still placed in call order
/// (the later call first in the batch is not held), and the model is called only after that one commit.
#[test]
fn results_that_settle_together_are_committed_as_one_entry_in_call_order() {
    let mut s = two_calls_running();
    let before = s.journal.len();
    s.settle_together(vec![("c2", ok("b")), ("c1", ok("a"))]).expect_commit().expect_call_model_step(2);
    assert_eq!(s.journal.len(), before + 1, "one entry for both results");
    let cp = s.stored();
    assert_eq!(result_ids(&cp.messages), ["c1", "c2"], "placed in call order");
    assert!(cp.held_results.is_empty(), "nothing held once both are placed");
    match &s.journal.last().unwrap().body {
        EntryBody::Delta { messages, head, .. } => {
            assert_eq!(messages.len(), 2, "both results in the one entry");
            assert!(head.held_results.is_none(), "the entry carries no held result");
        }
        other => panic!("expected a delta, got {other:#?}"),
    }
    s.answer_model(answer("done")).expect_commit();
    assert_eq!(s.expect_finish().finish_reason, Some(FinishReason::Stop));
}

/// A batch that names a call that is not running, or a call twice, is refused whole: no result of it is
/// recorded. A batch that leaves a call running commits what it has (the later result stays held).
#[test]
fn a_batch_of_results_is_refused_whole_when_one_is_not_awaited() {
    let mut s = two_calls_running();
    refused(&mut s, "a batch naming an unknown call", "call 'c9' is unknown to this turn, not running", |m| {
        m.notify_tools_settled(vec![("c1".into(), ok("a")), ("c9".into(), ok("?"))])
    });
    refused(&mut s, "a batch naming a call twice", "call 'c1' is named twice in one batch", |m| {
        m.notify_tools_settled(vec![("c1".into(), ok("a")), ("c1".into(), ok("again"))])
    });
    ignored(&mut s, "an empty batch", |m| m.notify_tools_settled(Vec::new()));
    s.settle_together(vec![("c2", ok("b"))]).expect_commit();
    assert_eq!(s.stored().held_results.len(), 1, "c2 waits (durably) for c1");
    s.settle_together(vec![("c1", ok("a"))]).expect_commit().expect_call_model_step(2);
    assert_eq!(result_ids(&s.stored().messages), ["c1", "c2"]);
}
