//! Regression tests for guarantees that once broke (each named after the behaviour it pins down).

mod common;

use common::*;
use serde_json::json;
use std::rc::Rc;
use steadfast::core::approval::ApprovalRecord;
use steadfast::core::checkpoint::JournalEntry;
use steadfast::core::checkpoint::RunStatus;
use steadfast::core::transcript::{validate_transcript, Message, ResultKind};
use steadfast::runtime::{CrashPoint, FnTool, MockModel, MockTurn, Resolve, SendOptions, Tool, ToolOutput};
use steadfast::store::{HistoryEntry, Lease, LeaseOptions, PendingPage, PendingRun, RunStore, StoreCounters};

/// A side-effecting tool without `reconcile` that counts executions per call id.
fn side_effecting_tool(name: &str, c: &Counters) -> Rc<dyn Tool> {
    let (c, n) = (c.clone(), name.to_string());
    Rc::new(
        FnTool::new(name, "has side effects", object_schema(), move |_args, ctx| {
            let (c, n) = (c.clone(), n.clone());
            async move {
                c.seen(&n, &ctx);
                c.hit(&format!("call:{}", ctx.tool_call_id));
                Ok(ToolOutput::text(format!("{n} done")))
            }
        })
        .side_effecting(),
    )
}

fn results_by_name(messages: &[Message]) -> Vec<(String, ResultKind, String)> {
    messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(r) => Some((r.name.clone(), r.kind, r.content.clone())),
            _ => None,
        })
        .collect()
}

/// A turn mixes a side-effecting call (its intent recorded, no outcome yet) with a plain call and an
/// approval-gated call. After a crash at any point, the resume reconciles the side effect and then gates the
/// other calls exactly once: the plain call runs and gets its real result, the gated call pauses on an
/// approval. No valid call ever gets a fabricated `validation` result.
#[test]
fn resume_after_crash_runs_the_plain_call_beside_an_unreconciled_side_effect() {
    for env_kind in ["memory", "journal"] {
        for gated in [false, true] {
            let mut k = 1;
            loop {
                let env = if env_kind == "memory" { Env::new() } else { Env::journal_sim() };
                let c = Counters::default();
                let mut calls = vec![("charge", json!({"order": 7})), ("lookup", json!({"order": 7}))];
                if gated {
                    calls.push(("refund", json!({"order": 7})));
                }
                let script = || vec![MockTurn::tools(calls.clone()), MockTurn::text("done")];
                let tools = || {
                    let mut t = vec![side_effecting_tool("charge", &c), counting_tool("lookup", &c)];
                    if gated {
                        t.push(gated_tool("refund", &c));
                    }
                    t
                };
                let a = env.agent(MockModel::by_turn(script()), tools());
                let crash = SendOptions {
                    crash: Some(CrashPoint { after_effects: k, finish_in_flight: false }),
                    ..Default::default()
                };
                let first = block_on(a.send("mixed", "charge and look up order 7", crash));
                let Err(e) = first else { break };
                assert_eq!(e.code, steadfast::ErrorCode::Crashed);
                env.past_leases();
                let b = env.agent(MockModel::by_turn(script()), tools());
                let mut res = match block_on(b.load("mixed")).unwrap() {
                    None => block_on(b.send("mixed", "charge and look up order 7", SendOptions::default())).unwrap(),
                    Some(cp) if cp.status == RunStatus::AwaitingApproval => block_on(b.approvals().resolve(Resolve {
                        id: cp.approval_ids[0].clone(),
                        approved: true,
                        note: None,
                        answer: None,
                    }))
                    .unwrap(),
                    Some(cp) if cp.status == RunStatus::Finished => steadfast::runtime::RunResult::stored(&cp),
                    Some(_) => block_on(b.resume("mixed", SendOptions::default())).unwrap().unwrap(),
                };
                if gated && res.status == RunStatus::AwaitingApproval {
                    let id = res.approval_id.clone().unwrap();
                    res = block_on(b.approvals().resolve(Resolve { id, approved: true, note: None, answer: None }))
                        .unwrap();
                }
                let ctx = format!("{env_kind} gated={gated} crash after effect {k}");
                assert_eq!(res.status, RunStatus::Finished, "{ctx}");
                assert!(validate_transcript(&res.messages).is_ok(), "{ctx}");
                for (name, kind, content) in results_by_name(&res.messages) {
                    assert_eq!(kind, ResultKind::Execution, "{ctx}: {name} got {kind:?}: {content}");
                    assert!(content.starts_with(&format!("{name} done")), "{ctx}: {name} got {content}");
                }
                for (key, n) in c.0.borrow().iter().filter(|(k, _)| k.starts_with("call:")) {
                    assert!(*n <= 2, "{ctx}: {key} ran {n} times");
                }
                k += 1;
            }
            assert!(k > 8, "the scenario has several crash points ({k})");
        }
    }
}

fn nested(depth: usize) -> serde_json::Value {
    let mut v = json!(1);
    for i in 0..depth {
        v = if i % 2 == 0 { json!([v]) } else { json!({ "k": v }) };
    }
    v
}

fn envs() -> Vec<(&'static str, Env)> {
    vec![("memory", Env::new()), ("journal", Env::journal_sim())]
}

/// A `businessState` nested ~126 levels deep used to be stored and then fail every later load with
/// CHECKPOINT_CORRUPT. It is refused with a coded error before anything is written; the limit is 64 levels.
#[test]
fn deep_business_state_is_refused_before_anything_is_stored() {
    for (label, env) in envs() {
        let c = Counters::default();
        let a = env.agent(MockModel::by_turn(vec![MockTurn::text("ok")]), vec![counting_tool("t", &c)]);
        for depth in [65, 100, 126, 127] {
            let opts = SendOptions { business_state: Some(nested(depth)), ..Default::default() };
            let e = block_on(a.send("deep", "go", opts)).unwrap_err();
            assert_eq!(e.code, steadfast::ErrorCode::InvalidInput, "{label} depth {depth}");
            assert!(e.message.contains("businessState"), "{}", e.message);
            assert!(block_on(a.load("deep")).unwrap().is_none(), "{label}: nothing stored");
        }
        let opts = SendOptions { business_state: Some(nested(64)), ..Default::default() };
        let done = block_on(a.send("deep", "go", opts)).unwrap();
        assert_eq!(done.status, RunStatus::Finished);
        assert_eq!(block_on(a.load("deep")).unwrap().unwrap().business_state, Some(nested(64)), "{label}");
    }
}

/// Tool arguments from the model nested deeper than the limit are not stored as they are: the call gets a
/// `validation` result saying why, never runs, and the run stays readable.
#[test]
fn deeply_nested_tool_arguments_get_a_validation_result_and_the_run_stays_readable() {
    for (label, env) in envs() {
        let c = Counters::default();
        let script = vec![MockTurn::tools([("t", nested(126)), ("t", json!({"ok": 1}))]), MockTurn::text("handled")];
        let a = env.agent(MockModel::by_turn(script), vec![counting_tool("t", &c)]);
        let done = block_on(a.send("args", "go", SendOptions::default())).unwrap();
        assert_eq!(done.status, RunStatus::Finished, "{label}");
        let results = results_by_name(&done.messages);
        assert_eq!(results[0].1, ResultKind::Validation, "{label}: {results:?}");
        assert!(results[0].2.contains("nested 126 levels"), "{}", results[0].2);
        assert_eq!(results[1].1, ResultKind::Execution);
        assert_eq!(c.get("t"), 1, "{label}: only the valid call ran");
        let stored = block_on(a.load("args")).unwrap().unwrap();
        assert_eq!(stored.messages, done.messages, "{label}: the run reads back");
        assert!(validate_transcript(&stored.messages).is_ok());
    }
}

/// A tool whose output carries a business state nested too deep: the model reads an error result that keeps the
/// tool's output, the state is not stored, and the run stays readable.
#[test]
fn a_tool_returning_deep_business_state_gets_an_error_result_and_nothing_unreadable_is_stored() {
    for (label, env) in envs() {
        let deep = Rc::new(FnTool::new("deep", "returns deep state", object_schema(), |_a, _c| async {
            Ok(ToolOutput::text("computed").with_business_state(nested(120)))
        })) as Rc<dyn Tool>;
        let script = vec![MockTurn::tools([("deep", json!({}))]), MockTurn::text("done")];
        let a = env.agent(MockModel::by_turn(script), vec![deep]);
        let done = block_on(a.send("bs", "go", SendOptions::default())).unwrap();
        let r = &results_by_name(&done.messages)[0];
        assert!(r.2.starts_with("InvalidBusinessState") && r.2.contains("computed"), "{label}: {r:?}");
        let stored = block_on(a.load("bs")).unwrap().unwrap();
        assert_eq!(stored.business_state, None, "{label}");
    }
}

/// Forks check what their patch brings in.
#[test]
fn a_fork_patch_with_deep_business_state_is_refused() {
    let env = Env::journal_sim();
    let c = Counters::default();
    let a = env.agent(
        MockModel::by_turn(vec![MockTurn::tools([("t", json!({}))]), MockTurn::text("done")]),
        vec![counting_tool("t", &c)],
    );
    block_on(a.send("src", "go", SendOptions::default())).unwrap();
    let patch = steadfast::core::fork::ForkPatch { business_state: Some(nested(80)), ..Default::default() };
    let e = block_on(a.fork("src", steadfast::runtime::ForkOptions { from_step: 1, patch, new_id: None })).unwrap_err();
    assert_eq!(e.code, steadfast::ErrorCode::InvalidInput);
    assert!(block_on(a.load("src.fork-1")).unwrap().is_none());
}

/// A tool result larger than `maxToolResultBytes` (default 256 KiB) is cut at a character boundary and ends with
/// a marker the model can read; a 30 MiB result no longer makes an entry KV cannot store.
#[test]
fn tool_results_over_the_cap_are_truncated_with_a_marker() {
    for (label, env) in envs() {
        let huge = Rc::new(FnTool::new("dump", "returns a lot", object_schema(), |_a, _c| async {
            Ok(ToolOutput::text("é".repeat(15 * 1024 * 1024)))
        })) as Rc<dyn Tool>;
        let script = vec![MockTurn::tools([("dump", json!({}))]), MockTurn::text("read it")];
        let a = env.agent(MockModel::by_turn(script), vec![huge]);
        let done = block_on(a.send("big", "go", SendOptions::default())).unwrap();
        assert_eq!(done.status, RunStatus::Finished, "{label}");
        let r = &results_by_name(&done.messages)[0];
        assert!(r.2.len() <= 256 * 1024, "{label}: {}", r.2.len());
        assert!(r.2.ends_with("only the first part is shown]"), "{label}");
        assert!(r.2.contains(&format!("it was {} bytes", 30 * 1024 * 1024)), "{label}");
        assert_eq!(block_on(a.load("big")).unwrap().unwrap().messages, done.messages);
    }
}

/// A store refusing for good (`STEADFAST_STORE_FAILED`) every journal entry over `max` bytes, as a backend with
/// a small value limit would; everything else goes to `inner`.
struct Refusing {
    inner: Rc<dyn RunStore>,
    max: usize,
}

#[async_trait::async_trait(?Send)]
impl RunStore for Refusing {
    async fn load(&self, run_id: &str) -> steadfast::Result<Option<steadfast::Checkpoint>> {
        self.inner.load(run_id).await
    }
    async fn acquire_lease(&self, run_id: &str, owner: &str, now: u64, o: &LeaseOptions) -> steadfast::Result<Lease> {
        self.inner.acquire_lease(run_id, owner, now, o).await
    }
    async fn confirm_lease(&self, lease: &Lease) -> steadfast::Result<()> {
        self.inner.confirm_lease(lease).await
    }
    async fn renew_lease(&self, lease: &Lease, now: u64, o: &LeaseOptions) -> steadfast::Result<Lease> {
        self.inner.renew_lease(lease, now, o).await
    }
    async fn release_lease(&self, lease: &Lease) -> steadfast::Result<()> {
        self.inner.release_lease(lease).await
    }
    async fn commit(
        &self,
        lease: &Lease,
        entry: &JournalEntry,
        state: &steadfast::Checkpoint,
    ) -> steadfast::Result<()> {
        let n = serde_json::to_string(entry).unwrap().len();
        if n > self.max {
            let msg = format!("journal entry {} cannot be stored: {n} bytes (max {})", entry.seq, self.max);
            return Err(steadfast::Error::new(steadfast::ErrorCode::StoreFailed, msg));
        }
        self.inner.commit(lease, entry, state).await
    }
    async fn delete(&self, run_id: &str) -> steadfast::Result<()> {
        self.inner.delete(run_id).await
    }
    async fn history(&self, run_id: &str, limit: usize) -> steadfast::Result<Vec<HistoryEntry>> {
        self.inner.history(run_id, limit).await
    }
    async fn pending(&self) -> steadfast::Result<Vec<PendingRun>> {
        self.inner.pending().await
    }
    async fn pending_page(&self, cursor: Option<&str>, limit: usize) -> steadfast::Result<PendingPage> {
        self.inner.pending_page(cursor, limit).await
    }
    async fn check_pending(&self, runs: &[PendingRun]) -> steadfast::Result<Vec<bool>> {
        self.inner.check_pending(runs).await
    }
    async fn put_approval(&self, record: &ApprovalRecord) -> steadfast::Result<()> {
        self.inner.put_approval(record).await
    }
    async fn get_approval(&self, id: &str) -> steadfast::Result<Option<ApprovalRecord>> {
        self.inner.get_approval(id).await
    }
    async fn list_approvals(&self) -> steadfast::Result<Vec<ApprovalRecord>> {
        self.inner.list_approvals().await
    }
    async fn delete_approval(&self, id: &str) -> steadfast::Result<()> {
        self.inner.delete_approval(id).await
    }
    async fn put_due(&self, due: &steadfast::store::DueWait) -> steadfast::Result<()> {
        self.inner.put_due(due).await
    }
    async fn list_due(&self, until: u64, limit: usize) -> steadfast::Result<Vec<steadfast::store::DueWait>> {
        self.inner.list_due(until, limit).await
    }
    async fn delete_due(&self, due: &steadfast::store::DueWait) -> steadfast::Result<()> {
        self.inner.delete_due(due).await
    }
    async fn put_queued(&self, msg: &steadfast::store::QueuedMessage) -> steadfast::Result<()> {
        self.inner.put_queued(msg).await
    }
    async fn list_queued(&self, run_id: &str) -> steadfast::Result<Vec<steadfast::store::QueuedMessage>> {
        self.inner.list_queued(run_id).await
    }
    async fn delete_queued(&self, msg: &steadfast::store::QueuedMessage) -> steadfast::Result<()> {
        self.inner.delete_queued(msg).await
    }
    async fn get_state(&self, name: &str) -> steadfast::Result<Option<String>> {
        self.inner.get_state(name).await
    }
    async fn put_state(&self, name: &str, value: &str) -> steadfast::Result<()> {
        self.inner.put_state(name, value).await
    }
    fn counters(&self) -> StoreCounters {
        self.inner.counters()
    }
}

/// An entry the store refuses for good (here a store whose entries hold at most 1 MiB) is a failed attempt: it
/// is recorded (`lastError`, `attempts`) on the stored run, not retried by the sweep for ever.
#[test]
fn a_commit_refused_for_good_is_recorded_as_a_failed_attempt() {
    for (label, env) in envs() {
        let env = Env::with_store(Rc::new(Refusing { inner: env.store.clone(), max: 1024 * 1024 }), env.clock);
        let c = Counters::default();
        let script = vec![MockTurn::tools([("t", json!({}))]), MockTurn::text("x".repeat(2 * 1024 * 1024))];
        let a = env.agent(MockModel::by_turn(script), vec![counting_tool("t", &c)]);
        let e = block_on(a.send("huge", "go", SendOptions::default())).unwrap_err();
        assert_eq!(e.code, steadfast::ErrorCode::StoreFailed, "{label}: {e:?}");
        let stored = block_on(a.load("huge")).unwrap().unwrap();
        assert_eq!(stored.status, RunStatus::InProgress, "{label}");
        assert_eq!(stored.attempts, 1, "{label}");
        assert_eq!(stored.last_error.as_ref().map(|e| e.code), Some(steadfast::ErrorCode::StoreFailed));
        let listed = block_on(a.pending()).unwrap();
        let p = listed.iter().find(|p| p.run_id == "huge").expect("listed");
        assert_eq!((p.attempts, p.last_error.as_ref().map(|e| e.retryable)), (1, Some(false)), "{label}");
        assert_eq!(c.get("t"), 1);
    }
}

/// A model (a JS model, a hook, a provider without its own check) whose turns carry one reasoning block nested
/// `depth` levels deep; each turn the same.
struct DeepThinker {
    depth: usize,
}

#[async_trait::async_trait(?Send)]
impl steadfast::runtime::Model for DeepThinker {
    fn id(&self) -> &str {
        "deep-thinker"
    }
    async fn generate(
        &self,
        _request: steadfast::runtime::ModelRequest<'_>,
    ) -> steadfast::Result<steadfast::core::machine::ModelResponse> {
        Ok(steadfast::core::machine::ModelResponse {
            text: "thought about it".into(),
            reasoning: vec![nested(self.depth)],
            ..Default::default()
        })
    }
}

/// Issue 26, bug 6: a reasoning block nested deep enough to parse as a reply but not as a journal entry used to
/// be committed, and every later load was `STEADFAST_CHECKPOINT_CORRUPT`. Over a generated set of depths around
/// the limit (every depth near it, and seeded ones beyond), on the memory store and the journal store: each run
/// either commits and reads back what the model said, or is refused with a coded, non-retryable error and stays
/// loadable, listable and resumable (never corrupt). Repro of one depth (the case's seed is its depth):
/// `STEADFAST_SEED=<d> cargo test --test guarantees deep_reasoning`.
#[test]
fn deep_reasoning_is_committed_and_read_back_or_refused_with_a_code_never_stored_unreadable() {
    use steadfast::core::checkpoint::MAX_ENTRY_DEPTH;
    use steadfast::runtime::Rng;
    let depths: Vec<usize> = match common::seeds::only_seed() {
        Some(d) => vec![d as usize],
        None => {
            let rng = steadfast::runtime::SplitMix64::new(26);
            let mut d: Vec<usize> = (MAX_ENTRY_DEPTH - 14..=MAX_ENTRY_DEPTH + 4).collect();
            d.extend((0..8).map(|_| 60 + (rng.next_u64() % 140) as usize));
            d
        }
    };
    for (label, env) in envs() {
        let (mut kept, mut refused) = (0, 0);
        for &depth in &depths {
            let ctx = format!(
                "{label}, reasoning {depth} levels deep ({})",
                common::seeds::repro(depth as u64, "deep_reasoning")
            );
            let id = format!("think-{depth}");
            let a = env.agent(DeepThinker { depth }, vec![]);
            match block_on(a.send(&id, "think", SendOptions::default())) {
                Ok(done) => {
                    kept += 1;
                    assert_eq!(done.status, RunStatus::Finished, "{ctx}");
                    let stored = block_on(a.load(&id)).unwrap_or_else(|e| panic!("{ctx}: {e}")).unwrap();
                    let reasoning = stored.messages.iter().find_map(|m| match m {
                        Message::Assistant { reasoning, .. } if !reasoning.is_empty() => Some(reasoning.clone()),
                        _ => None,
                    });
                    assert_eq!(reasoning, Some(vec![nested(depth)]), "{ctx}: read back as the model said it");
                }
                Err(e) => {
                    refused += 1;
                    assert_eq!(e.code, steadfast::ErrorCode::StoreFailed, "{ctx}: {e}");
                    assert!(!e.retryable, "{ctx}");
                    let stored = block_on(a.load(&id)).unwrap_or_else(|e| panic!("{ctx}: load after refusal: {e}"));
                    let stored = stored.expect("the run's first entry was written");
                    assert_eq!(stored.attempts, 1, "{ctx}: the refused attempt is recorded");
                    block_on(a.pending()).unwrap_or_else(|e| panic!("{ctx}: pending: {e}"));
                    block_on(a.history(&id, 10)).unwrap_or_else(|e| panic!("{ctx}: history: {e}"));
                    env.past_leases();
                    let e = block_on(a.resume(&id, SendOptions::default())).unwrap_err();
                    assert_eq!(e.code, steadfast::ErrorCode::StoreFailed, "{ctx}: resumed, refused again");
                    // A model that thinks less finishes the run, which reads back.
                    env.past_leases();
                    let b = env.agent(DeepThinker { depth: 3 }, vec![]);
                    let done = block_on(b.resume(&id, SendOptions::default())).unwrap().unwrap();
                    assert_eq!(done.status, RunStatus::Finished, "{ctx}");
                    assert!(block_on(b.load(&id)).unwrap().is_some(), "{ctx}");
                }
            }
        }
        if common::seeds::only_seed().is_none() {
            assert!(kept > 5 && refused > 5, "{label}: the depths straddle the limit ({kept} kept, {refused} refused)");
        }
    }
}

/// The doors: an input assistant message (over HTTP, JS or Rust) and a fork's `patch.messages` carrying a
/// reasoning block deeper than the 64-level limit are refused with `STEADFAST_INVALID_INPUT` before anything is
/// written, as their tool arguments are.
#[test]
fn deep_reasoning_in_input_messages_and_fork_patches_is_refused_before_anything_is_written() {
    for (label, env) in envs() {
        let a = env.agent(MockModel::by_turn(vec![MockTurn::text("ok"), MockTurn::text("ok")]), vec![]);
        let thought = |depth: usize| Message::Assistant {
            content: "earlier answer".into(),
            tool_calls: vec![],
            reasoning: vec![nested(depth)],
            usage: None,
            model: None,
        };
        let input = |depth: usize| vec![Message::user("earlier"), thought(depth), Message::user("go on")];
        let e = block_on(a.send("in", input(65), SendOptions::default())).unwrap_err();
        assert_eq!(e.code, steadfast::ErrorCode::InvalidInput, "{label}: {e}");
        assert!(e.message.contains("reasoning"), "{}", e.message);
        assert!(block_on(a.load("in")).unwrap().is_none(), "{label}: nothing stored");
        let done = block_on(a.send("in", input(64), SendOptions::default())).unwrap();
        assert_eq!(done.status, RunStatus::Finished, "{label}");

        let patch = steadfast::core::fork::ForkPatch { messages: Some(input(65)), ..Default::default() };
        let e =
            block_on(a.fork("in", steadfast::runtime::ForkOptions { from_step: 1, patch, new_id: None })).unwrap_err();
        assert_eq!(e.code, steadfast::ErrorCode::InvalidInput, "{label}: {e}");
        assert!(block_on(a.load("in.fork-1")).unwrap().is_none(), "{label}");
    }
}

/// A final answer over Workers KV's 25 MiB value limit is recorded like any other (the store splits what its
/// platform needs split) and reads back.
#[test]
fn a_final_answer_over_25_mib_is_recorded_and_reads_back() {
    for (label, env) in envs() {
        let answer = "x".repeat(26 * 1024 * 1024);
        let a = env.agent(MockModel::by_turn(vec![MockTurn::text(answer.clone())]), vec![]);
        let done = block_on(a.send("huge", "go", SendOptions::default())).unwrap();
        assert_eq!((done.status, done.text == answer), (RunStatus::Finished, true), "{label}");
        assert!(block_on(a.load("huge")).unwrap().unwrap().messages == done.messages, "{label}");
    }
}
