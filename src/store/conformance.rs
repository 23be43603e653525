//! The store conformance suite: plain async functions over any [`RunStore`], one per behaviour of the
//! contract. Every backend (and every fault-injecting wrapper) runs them from its own tests, with
//! [`Capabilities`] set honestly.
//!
//! The functions panic (assert) on a violation, like test code.

use super::{LeaseOptions, RunStore};
use crate::core::approval::{ApprovalRecord, ApprovalStatus};
use crate::core::checkpoint::{Checkpoint, EntryBody, JournalEntry, RunStatus};
use crate::core::error::ErrorCode;
use crate::core::transcript::{Message, ToolCall};
use crate::time::{Clock, ManualClock};
use serde_json::json;

/// What a backend can promise.
#[derive(Clone, Copy, Debug)]
pub struct Capabilities {
    /// A stale lease holder's commit is refused atomically (no window).
    pub strict_fencing: bool,
}

/// Runs every function of the suite, each on a fresh pair of stores from `make`: two handles on the same
/// data, as two processes (possibly in two locations) see it. Stores judge time by the given clock; the
/// suite moves it.
pub async fn run_all<S: RunStore>(make: &dyn Fn(&ManualClock) -> (S, S), caps: &Capabilities) {
    let fresh = || {
        let clock = ManualClock::new(1_700_000_000_000);
        let (a, b) = make(&clock);
        (a, b, clock)
    };
    let (s, _, c) = fresh();
    commit_and_fold(&s, &c).await;
    let (s, _, _) = fresh();
    missing_run_loads_none(&s).await;
    let (s, o, c) = fresh();
    lease_busy_then_takeover_after_expiry(&s, &o, &c).await;
    let (s, o, c) = fresh();
    renew_never_takes_back(&s, &o, &c).await;
    let (s, o, c) = fresh();
    stale_writer_is_fenced(&s, &o, &c, caps).await;
    let (s, _, _) = fresh();
    approvals_round_trip(&s).await;
    let (s, _, _) = fresh();
    wait_records_round_trip(&s).await;
    let (s, _, _) = fresh();
    due_index_lists_due_waits_earliest_first(&s).await;
    let (s, _, _) = fresh();
    queued_messages_list_in_queue_order_per_run(&s).await;
    let (s, _, c) = fresh();
    pending_lists_unfinished(&s, &c).await;
    let (s, _, c) = fresh();
    pending_pages_list_each_unfinished_run_once(&s, &c).await;
    let (s, o, c) = fresh();
    delete_forgets_run(&s, &o, &c, caps).await;
    let (s, _, c) = fresh();
    history_newest_first(&s, &c).await;
    let (s, _, c) = fresh();
    many_commits_stay_foldable(&s, &c, 30).await;
    let (s, o, c) = fresh();
    new_run_is_created_only_if_absent(&s, &o, &c).await;
}

fn opts() -> LeaseOptions {
    LeaseOptions { ttl_ms: 30_000, renew_every_ms: 10_000, grace_ms: 30_000 }
}

/// Acquires a lease and confirms it, as the runtime does before anything irreversible (a tool run, an approval
/// record, a reported result).
pub async fn acquired<S: RunStore + ?Sized>(
    store: &S,
    run_id: &str,
    owner: &str,
    now_ms: u64,
    opts: &LeaseOptions,
    what: &str,
) -> super::Lease {
    // A retryable refusal (an injected 429 reads as another writer's) is retried, as a caller would.
    let mut tries = 0;
    loop {
        tries += 1;
        match store.acquire_lease(run_id, owner, now_ms, opts).await {
            Ok(lease) => {
                store.confirm_lease(&lease).await.expect(what);
                return lease;
            }
            Err(e) if e.retryable && tries < 5 => {}
            Err(e) => panic!("{what}: {e:?}"),
        }
    }
}

/// A snapshot entry for a fresh run.
pub fn snapshot_entry(run_id: &str, text: &str, at: u64) -> (JournalEntry, Checkpoint) {
    let mut cp = Checkpoint::new(run_id);
    cp.messages.push(Message::user(text));
    cp.seq = 1;
    cp.saved_at = at;
    (JournalEntry { seq: 1, at, body: EntryBody::Snapshot { state: Box::new(cp.clone()) } }, cp)
}

/// A delta entry appending one message (and optionally changing status) to `prev`.
pub fn delta_entry(prev: &Checkpoint, msg: Message, status: RunStatus, at: u64) -> (JournalEntry, Checkpoint) {
    let mut next = prev.clone();
    next.messages.push(msg.clone());
    next.status = status;
    next.step_index += 1;
    let entry = JournalEntry {
        seq: prev.seq + 1,
        at,
        body: EntryBody::Delta {
            from: prev.messages.len(),
            messages: vec![msg],
            head: next.header().diff(&prev.header()),
            business_state: None,
            fingerprint: None,
            ext: None,
        },
    };
    let mut folded = prev.clone();
    folded.apply(&entry).expect("delta continues");
    (entry, folded)
}

/// Commit a snapshot and deltas; load folds them exactly.
pub async fn commit_and_fold(store: &impl RunStore, clock: &ManualClock) {
    let t = clock.now_ms();
    let lease = acquired(store, "r1", "o1", t, &opts(), "acquire").await;
    let (e1, cp1) = snapshot_entry("r1", "hello", t);
    store.commit(&lease, &e1, &cp1).await.expect("commit snapshot");
    let (e2, cp2) = delta_entry(&cp1, Message::assistant("hi", vec![]), RunStatus::Finished, t + 1);
    store.commit(&lease, &e2, &cp2).await.expect("commit delta");
    let loaded = store.load("r1").await.expect("load").expect("exists");
    assert_eq!(loaded, cp2);
    assert_eq!(loaded.seq, 2);
}

/// An unknown run loads as `None`.
pub async fn missing_run_loads_none(store: &impl RunStore) {
    assert!(store.load("nope").await.expect("load").is_none());
    assert!(store.history("nope", 10).await.expect("history").is_empty());
}

/// A live lease refuses another owner with BUSY; after expiry + grace it is taken over with a new epoch.
pub async fn lease_busy_then_takeover_after_expiry<S: RunStore>(store: &S, other: &S, clock: &ManualClock) {
    let o = opts();
    let a = acquired(store, "r", "a", clock.now_ms(), &o, "a acquires").await;
    clock.advance(10_000);
    let err = other.acquire_lease("r", "b", clock.now_ms(), &o).await.expect_err("b is refused");
    assert_eq!(err.code, ErrorCode::SessionBusy);
    clock.set(a.expires_at + o.grace_ms - 1);
    let err = other.acquire_lease("r", "b", clock.now_ms(), &o).await.expect_err("still in grace");
    assert_eq!(err.code, ErrorCode::SessionBusy);
    clock.set(a.expires_at + o.grace_ms);
    let b = acquired(other, "r", "b", clock.now_ms(), &o, "b takes over").await;
    assert!(b.epoch > a.epoch);
    clock.advance(2_000);
    other.release_lease(&b).await.expect("release");
    clock.advance(2_000);
    let c = acquired(store, "r", "c", clock.now_ms(), &o, "released lease is free").await;
    assert!(c.epoch > b.epoch);
}

/// Renewal extends the holder's lease and never takes a lease back from another owner.
pub async fn renew_never_takes_back<S: RunStore>(store: &S, other: &S, clock: &ManualClock) {
    let o = opts();
    let a = acquired(store, "r", "a", clock.now_ms(), &o, "acquire").await;
    clock.advance(5_000);
    let a2 = store.renew_lease(&a, clock.now_ms(), &o).await.expect("renew");
    assert_eq!(a2.expires_at, clock.now_ms() + o.ttl_ms);
    clock.set(a2.expires_at + o.grace_ms);
    let b = acquired(other, "r", "b", clock.now_ms(), &o, "takeover").await;
    clock.advance(2_000);
    let err = store.renew_lease(&a2, clock.now_ms(), &o).await.expect_err("a cannot renew");
    assert_eq!(err.code, ErrorCode::SessionBusy);
    // b still holds it.
    clock.advance(2_000);
    let err = store.acquire_lease("r", "a", clock.now_ms(), &o).await.expect_err("b's lease stands");
    assert_eq!(err.code, ErrorCode::SessionBusy);
    other.release_lease(&b).await.expect("release");
}

/// A writer whose lease was taken over cannot make readers see its writes; it gets BUSY (strict backends)
/// or its write lands where no reader looks.
pub async fn stale_writer_is_fenced<S: RunStore>(store: &S, other: &S, clock: &ManualClock, caps: &Capabilities) {
    let o = opts();
    let a = acquired(store, "f", "a", clock.now_ms(), &o, "a").await;
    let (e1, cp1) = snapshot_entry("f", "start", clock.now_ms());
    store.commit(&a, &e1, &cp1).await.expect("a commits");
    clock.set(a.expires_at + o.grace_ms);
    let b = acquired(other, "f", "b", clock.now_ms(), &o, "b takes over").await;
    let (e2b, cp2b) = delta_entry(&cp1, Message::assistant("from b", vec![]), RunStatus::InProgress, clock.now_ms());
    other.commit(&b, &e2b, &cp2b).await.expect("b commits");
    let (e2a, cp2a) = delta_entry(&cp1, Message::assistant("zombie a", vec![]), RunStatus::Finished, clock.now_ms());
    let res = store.commit(&a, &e2a, &cp2a).await;
    if caps.strict_fencing {
        assert_eq!(res.expect_err("zombie refused").code, ErrorCode::SessionBusy);
    }
    for reader in [store, other] {
        let loaded = reader.load("f").await.expect("load").expect("exists");
        assert_eq!(loaded, cp2b, "readers see the new owner's state only");
    }
}

/// Approval records round-trip, list and delete.
pub async fn approvals_round_trip(store: &impl RunStore) {
    let rec = ApprovalRecord {
        id: "apr_1".into(),
        run_id: "r".into(),
        tool_call: ToolCall { id: "c1".into(), name: "pay".into(), args: json!({"amount": 5}), invalid: None },
        batch: vec!["apr_1".into()],
        status: ApprovalStatus::Pending,
        note: None,
        step: 1,
        created_at: 10,
        decided_at: None,
        fingerprint: None,
        ..Default::default()
    };
    store.put_approval(&rec).await.expect("put");
    assert_eq!(store.get_approval("apr_1").await.expect("get"), Some(rec.clone()));
    let decided =
        ApprovalRecord { status: ApprovalStatus::Approved, note: Some("ok".into()), decided_at: Some(20), ..rec };
    store.put_approval(&decided).await.expect("update");
    assert_eq!(store.list_approvals().await.expect("list"), vec![decided]);
    store.delete_approval("apr_1").await.expect("delete");
    assert_eq!(store.get_approval("apr_1").await.expect("get"), None);
}

/// A wait record (a question with its choices, an event with its deadline and token hash, its outcome once
/// resolved) round-trips whole.
pub async fn wait_records_round_trip(store: &impl RunStore) {
    use crate::core::wait::{delivered, token, token_hash, wait_id, WaitKind};
    let tok = token("r:00", "c2");
    let id = wait_id(&tok).expect("a token's id");
    let rec = ApprovalRecord {
        id: id.clone(),
        run_id: "r".into(),
        tool_call: ToolCall { id: "c2".into(), name: "wait_for_payment".into(), args: json!({}), invalid: None },
        batch: vec![id.clone()],
        step: 2,
        created_at: 10,
        kind: WaitKind::Event,
        due_at: Some(5_000),
        token_hash: Some(token_hash(&tok)),
        ..Default::default()
    };
    store.put_approval(&rec).await.expect("put");
    assert_eq!(store.get_approval(&id).await.expect("get"), Some(rec.clone()));
    let resolved = ApprovalRecord {
        status: ApprovalStatus::Approved,
        outcome: Some(delivered(&json!({"paid": true})).expect("a payload")),
        ..rec
    };
    store.put_approval(&resolved).await.expect("resolve");
    assert_eq!(store.list_approvals().await.expect("list"), vec![resolved]);
}

/// The due index lists the waits due by a time, earliest first (ties in wait-id order), at most `limit` of
/// them, and forgets a deleted entry; writing an entry twice lists it once.
pub async fn due_index_lists_due_waits_earliest_first(store: &impl RunStore) {
    use crate::store::DueWait;
    let due = |at: u64, wait: &str, run: &str| DueWait { at, wait_id: wait.into(), run_id: run.into() };
    let entries = [
        due(3_000, "wait_b", "run-2"),
        due(1_000, "wait_c", "run.1"),
        due(3_000, "wait_a", "run-3"),
        due(20_000, "wait_d", "run-4"),
        due(999_999_999_999_999, "wait_e", "run-5"),
    ];
    for e in &entries {
        store.put_due(e).await.expect("put due");
    }
    store.put_due(&entries[0]).await.expect("put due again");
    assert_eq!(store.list_due(0, 10).await.expect("list"), vec![]);
    assert_eq!(
        store.list_due(3_000, 10).await.expect("list"),
        vec![entries[1].clone(), entries[2].clone(), entries[0].clone()]
    );
    assert_eq!(store.list_due(u64::MAX, 2).await.expect("list"), vec![entries[1].clone(), entries[2].clone()]);
    store.delete_due(&entries[2]).await.expect("delete");
    store.delete_due(&entries[2]).await.expect("delete again");
    assert_eq!(
        store.list_due(u64::MAX, 10).await.expect("list"),
        vec![entries[1].clone(), entries[0].clone(), entries[3].clone(), entries[4].clone()]
    );
}

/// A run's queued messages list in queue order (time, then id), apart from other runs' (one run's id a prefix
/// of another's); writing one twice lists it once; a deleted one is gone.
pub async fn queued_messages_list_in_queue_order_per_run(store: &impl RunStore) {
    use crate::core::steer::QueuedMessage;
    use crate::core::transcript::Message;
    let q = |run: &str, id: &str, at: u64, interrupt: bool| QueuedMessage {
        id: id.into(),
        run_id: run.into(),
        at,
        tag: "0123456789abcdef".into(),
        messages: vec![Message::user(format!("{id} for {run}"))],
        interrupt,
    };
    let mine = [q("run-1", "msg_b", 2_000, false), q("run-1", "msg_a", 2_000, true), q("run-1", "msg_c", 1_000, false)];
    for m in mine.iter().chain([&q("run-10", "msg_d", 500, false), &q("run-2", "msg_e", 1, false)]) {
        store.put_queued(m).await.expect("put queued");
    }
    store.put_queued(&mine[0]).await.expect("put queued again");
    let want = vec![mine[2].clone(), mine[1].clone(), mine[0].clone()];
    assert_eq!(store.list_queued("run-1").await.expect("list"), want);
    assert_eq!(store.list_queued("run-3").await.expect("list"), vec![]);
    store.delete_queued(&mine[1]).await.expect("delete");
    store.delete_queued(&mine[1]).await.expect("delete again");
    assert_eq!(store.list_queued("run-1").await.expect("list"), vec![mine[2].clone(), mine[0].clone()]);
    assert_eq!(store.list_queued("run-10").await.expect("list").len(), 1);
}

/// Unfinished runs are listed with their status and errors; finished ones are not.
pub async fn pending_lists_unfinished(store: &impl RunStore, clock: &ManualClock) {
    let o = opts();
    for (id, status) in
        [("p1", RunStatus::InProgress), ("p2", RunStatus::AwaitingApproval), ("p3", RunStatus::Finished)]
    {
        let l = acquired(store, id, "o", clock.now_ms(), &o, "lease").await;
        let (e1, mut cp1) = snapshot_entry(id, "x", clock.now_ms());
        cp1.status = status;
        if status == RunStatus::AwaitingApproval {
            cp1.approval_ids = vec!["apr_x".into()];
        }
        let e1 = JournalEntry { body: EntryBody::Snapshot { state: Box::new(cp1.clone()) }, ..e1 };
        store.commit(&l, &e1, &cp1).await.expect("commit");
    }
    let mut pending = store.pending().await.expect("pending");
    pending.sort_by(|a, b| a.run_id.cmp(&b.run_id));
    let ids: Vec<&str> = pending.iter().map(|p| p.run_id.as_str()).collect();
    assert_eq!(ids, vec!["p1", "p2"]);
    assert_eq!(pending[1].status, RunStatus::AwaitingApproval);
    assert_eq!(pending[1].approval_id.as_deref(), Some("apr_x"));
}

/// Pages of the pending listing, followed by their cursors, list each unfinished run once, in run-id order,
/// with what the sweep needs (status, the diagnosis marker); `check_pending` tells a run that finished or
/// was deleted since it was listed.
pub async fn pending_pages_list_each_unfinished_run_once(store: &impl RunStore, clock: &ManualClock) {
    let o = opts();
    let mut leases = Vec::new();
    for (id, status) in [
        ("q0", RunStatus::InProgress),
        ("q1", RunStatus::InProgress),
        ("q2", RunStatus::Finished),
        ("q3", RunStatus::AwaitingApproval),
        ("q4", RunStatus::InProgress),
        ("q5", RunStatus::InProgress),
    ] {
        let l = acquired(store, id, "o", clock.now_ms(), &o, "lease").await;
        let (e1, mut cp1) = snapshot_entry(id, "x", clock.now_ms());
        cp1.status = status;
        if status == RunStatus::AwaitingApproval {
            cp1.approval_ids = vec!["apr_q".into()];
        }
        if id == "q4" {
            cp1.heal_of = Some("q0".into());
        }
        let e1 = JournalEntry { body: EntryBody::Snapshot { state: Box::new(cp1.clone()) }, ..e1 };
        store.commit(&l, &e1, &cp1).await.expect("commit");
        leases.push((l, cp1));
    }
    let mut listed = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..50 {
        let page = store.pending_page(cursor.as_deref(), 2).await.expect("page");
        assert!(page.runs.len() <= 2, "a page holds at most its limit: {:?}", page.runs);
        listed.extend(page.runs);
        match page.cursor {
            Some(c) => cursor = Some(c),
            None => {
                cursor = None;
                break;
            }
        }
    }
    assert!(cursor.is_none(), "the listing ends");
    let ids: Vec<&str> = listed.iter().map(|r| r.run_id.as_str()).collect();
    assert_eq!(ids, vec!["q0", "q1", "q3", "q4", "q5"], "each unfinished run once, in order");
    assert_eq!(listed[2].status, RunStatus::AwaitingApproval);
    assert_eq!(listed[3].heal_of.as_deref(), Some("q0"), "the diagnosis marker is listed");
    assert_eq!(listed[0].heal_of, None);
    assert_eq!(store.check_pending(&listed).await.expect("check"), vec![true; 5]);
    // q1 finishes (its owner releases), q5 is deleted: a check of the earlier listing tells both.
    clock.advance(2_000);
    let (l1, cp1) = &leases[1];
    let (e2, _) = delta_entry(cp1, Message::assistant("done", vec![]), RunStatus::Finished, clock.now_ms());
    store
        .commit(l1, &e2, &{
            let mut f = cp1.clone();
            f.apply(&e2).expect("delta");
            f
        })
        .await
        .expect("finish");
    store.release_lease(l1).await.expect("release");
    store.release_lease(&leases[5].0).await.expect("release");
    store.delete("q5").await.expect("delete");
    clock.advance(2_000);
    assert_eq!(store.check_pending(&listed).await.expect("check"), vec![true, false, true, true, false]);
}

/// Delete removes the journal and the lease. While an execution holds the lease, a backend with strict fencing
/// deletes the run and refuses the execution's next commit; one without (Workers KV) refuses the delete with
/// `STEADFAST_SESSION_BUSY`, and the run stays whole.
pub async fn delete_forgets_run<S: RunStore>(store: &S, other: &S, clock: &ManualClock, caps: &Capabilities) {
    let o = opts();
    let l = acquired(store, "d", "o", clock.now_ms(), &o, "lease").await;
    let (e1, cp1) = snapshot_entry("d", "x", clock.now_ms());
    store.commit(&l, &e1, &cp1).await.expect("commit");
    clock.advance(1_000);
    if caps.strict_fencing {
        store.delete("d").await.expect("delete");
        let (e2, cp2) = delta_entry(&cp1, Message::user("late"), RunStatus::InProgress, clock.now_ms());
        let err = store.commit(&l, &e2, &cp2).await.expect_err("the deleted run's execution is fenced");
        assert_eq!(err.code, ErrorCode::SessionBusy, "{err:?}");
    } else {
        let err = other.delete("d").await.expect_err("held: not deleted");
        assert_eq!(err.code, ErrorCode::SessionBusy, "{err:?}");
        assert_eq!(store.load("d").await.expect("load").expect("still there").messages, cp1.messages);
        store.release_lease(&l).await.expect("release");
        clock.advance(1_000);
        store.delete("d").await.expect("delete");
    }
    assert!(store.load("d").await.expect("load").is_none());
    clock.advance(1_000);
    let l2 = acquired(other, "d", "other", clock.now_ms(), &o, "free after delete").await;
    let (e1, cp1) = snapshot_entry("d", "again", clock.now_ms());
    other.commit(&l2, &e1, &cp1).await.expect("restart");
    assert_eq!(other.load("d").await.expect("load").expect("exists").messages, cp1.messages);
}

/// Entry 1 creates a run only if it has no journal: a later owner of its lease (this process or another one,
/// the previous lease released or expired) that writes a first entry is refused with
/// `STEADFAST_SESSION_EXISTS`, and the run keeps every entry; once deleted, the id can be created again.
pub async fn new_run_is_created_only_if_absent<S: RunStore>(store: &S, other: &S, clock: &ManualClock) {
    let o = opts();
    let l = acquired(store, "n", "first", clock.now_ms(), &o, "lease").await;
    let (e1, cp1) = snapshot_entry("n", "the first run", clock.now_ms());
    store.commit(&l, &e1, &cp1).await.expect("create");
    clock.advance(1_000);
    let (e2, cp2) = delta_entry(&cp1, Message::user("recorded"), RunStatus::InProgress, clock.now_ms());
    store.commit(&l, &e2, &cp2).await.expect("continue");
    // The same owner cannot start the run over either.
    let (again, again_cp) = snapshot_entry("n", "a replacement", clock.now_ms());
    let err = store.commit(&l, &again, &again_cp).await.expect_err("a second first entry is refused");
    assert_eq!((err.code, err.retryable), (ErrorCode::SessionExists, false), "{err:?}");
    store.release_lease(&l).await.expect("release");
    for (i, s) in [store, other].into_iter().enumerate() {
        clock.advance(2_000);
        let owner = format!("creator-{i}");
        let l2 = acquired(s, "n", &owner, clock.now_ms(), &o, "a later owner").await;
        let err = s.commit(&l2, &again, &again_cp).await.expect_err("refused over an existing journal");
        assert_eq!(err.code, ErrorCode::SessionExists, "{err:?}");
        s.release_lease(&l2).await.expect("release");
    }
    for s in [store, other] {
        let now = s.load("n").await.expect("load").expect("the run is still there");
        assert_eq!(now.messages, cp2.messages, "every recorded entry kept");
        assert_eq!(now.seq, 2);
    }
    clock.advance(2_000);
    store.delete("n").await.expect("delete");
    clock.advance(2_000);
    let l3 = acquired(other, "n", "recreator", clock.now_ms(), &o, "after delete").await;
    other.commit(&l3, &again, &again_cp).await.expect("a deleted run's id is created again");
    assert_eq!(other.load("n").await.expect("load").expect("exists").messages, again_cp.messages);
}

/// History returns past states newest first.
pub async fn history_newest_first(store: &impl RunStore, clock: &ManualClock) {
    let o = opts();
    let l = acquired(store, "h", "o", clock.now_ms(), &o, "lease").await;
    let (e1, mut cp) = snapshot_entry("h", "x", clock.now_ms());
    store.commit(&l, &e1, &cp).await.expect("commit");
    for i in 0..3 {
        let (e, next) = delta_entry(&cp, Message::user(format!("m{i}")), RunStatus::InProgress, 10 + i);
        store.commit(&l, &e, &next).await.expect("commit");
        cp = next;
    }
    let h = store.history("h", 2).await.expect("history");
    assert_eq!(h.len(), 2);
    assert_eq!(h[0].seq, 4);
    assert_eq!(h[0].checkpoint, cp);
    assert_eq!(h[1].seq, 3);
}

/// Many commits (past any compaction point) keep loading exactly.
pub async fn many_commits_stay_foldable(store: &impl RunStore, clock: &ManualClock, n: u64) {
    let o = opts();
    let l = acquired(store, "many", "o", clock.now_ms(), &o, "lease").await;
    let (e1, mut cp) = snapshot_entry("many", "x", clock.now_ms());
    store.commit(&l, &e1, &cp).await.expect("commit");
    for i in 0..n {
        let (e, next) = delta_entry(&cp, Message::user(format!("m{i}")), RunStatus::InProgress, i);
        store.commit(&l, &e, &next).await.expect("commit");
        cp = next;
    }
    let loaded = store.load("many").await.expect("load").expect("exists");
    assert_eq!(loaded, cp);
    assert_eq!(loaded.messages.len() as u64, n + 1);
}

/// A journal entry over Workers KV's value limit (25 MiB) — what eight 4 MiB tool results settling together, or
/// a fork's first snapshot of a large run, make — is stored and loads back exactly, in history too (each backend
/// splits it as its platform needs: KV values, object rows), and the run goes on after it; so does a new run
/// whose first entry is a snapshot of that whole state (a fork). Not part of [`run_all`] (it allocates a few
/// hundred MB, too much inside a Worker): every backend's native tests call it.
pub async fn large_entry_commits_and_loads_back<S: RunStore>(store: &S, other: &S, clock: &ManualClock) {
    let o = opts();
    let l = acquired(store, "big", "o", clock.now_ms(), &o, "lease").await;
    let (e1, cp1) = snapshot_entry("big", "x", clock.now_ms());
    store.commit(&l, &e1, &cp1).await.expect("commit");
    clock.advance(1_000);
    let (e2, cp2) = delta_entry(&cp1, Message::user("r".repeat(30 * 1024 * 1024)), RunStatus::InProgress, 2);
    store.commit(&l, &e2, &cp2).await.expect("an entry of 30 MiB is stored");
    drop(e2);
    for reader in [store, other] {
        assert!(reader.load("big").await.expect("load") == Some(cp2.clone()), "the entry loads back exactly");
    }
    let h = other.history("big", 2).await.expect("history");
    assert_eq!(h.iter().map(|h| h.seq).collect::<Vec<_>>(), vec![2, 1]);
    assert!(h[0].checkpoint == cp2 && h[1].checkpoint == cp1, "history holds the state of the large entry");
    drop(h);
    clock.advance(1_000);
    let (e3, cp3) = delta_entry(&cp2, Message::assistant("read it", vec![]), RunStatus::Finished, 3);
    drop(cp2);
    store.commit(&l, &e3, &cp3).await.expect("the run goes on");
    store.release_lease(&l).await.expect("release");
    clock.advance(1_000);
    assert!(other.load("big").await.expect("load after release") == Some(cp3.clone()));
    // A new run whose first entry is the whole large state.
    let lf = acquired(other, "big-fork", "f", clock.now_ms(), &o, "fork lease").await;
    let mut fork = cp3;
    fork.run_id = "big-fork".into();
    fork.seq = 1;
    fork.saved_at = clock.now_ms();
    let first = JournalEntry { seq: 1, at: fork.saved_at, body: EntryBody::Snapshot { state: Box::new(fork.clone()) } };
    other.commit(&lf, &first, &fork).await.expect("a snapshot of 30 MiB is stored");
    drop(first);
    other.release_lease(&lf).await.expect("release");
    clock.advance(1_000);
    assert!(store.load("big-fork").await.expect("load the fork") == Some(fork), "the snapshot loads back exactly");
}

/// A run whose entries total over one Workers KV bulk read (25 MB; here twelve entries of 2.5 MiB, each well
/// within a value) is written, then read by another process: it loads, has history, is listed while unfinished,
/// and continues — the next owner takes it over and finishes it. Not part of [`run_all`] (memory, as above).
pub async fn journal_over_a_bulk_read_loads_and_continues<S: RunStore>(store: &S, other: &S, clock: &ManualClock) {
    let o = opts();
    let l = acquired(store, "wide", "o", clock.now_ms(), &o, "lease").await;
    let (e1, mut cp) = snapshot_entry("wide", "x", clock.now_ms());
    store.commit(&l, &e1, &cp).await.expect("commit");
    for i in 0..12u64 {
        clock.advance(100);
        let big = Message::user(format!("{i}:{}", "w".repeat(5 * 1024 * 1024 / 2)));
        let (e, next) = delta_entry(&cp, big, RunStatus::InProgress, 10 + i);
        store.commit(&l, &e, &next).await.expect("commit");
        cp = next;
    }
    let bytes: usize = cp.messages.iter().map(|m| serde_json::to_string(m).map(|s| s.len()).unwrap_or(0)).sum();
    assert!(bytes > 31_000_000, "the journal holds {bytes} bytes");
    store.release_lease(&l).await.expect("release");
    clock.advance(1_000);
    for reader in [other, store] {
        assert!(reader.load("wide").await.expect("load") == Some(cp.clone()), "loads exactly");
    }
    let h = other.history("wide", 2).await.expect("history");
    assert_eq!(h.iter().map(|h| h.seq).collect::<Vec<_>>(), vec![13, 12]);
    assert!(h[0].checkpoint == cp, "the newest state first");
    drop(h);
    let pending = other.pending().await.expect("pending");
    assert_eq!(pending.iter().map(|p| p.run_id.as_str()).collect::<Vec<_>>(), vec!["wide"]);
    assert_eq!(other.check_pending(&pending).await.expect("check"), vec![true]);
    let l2 = acquired(other, "wide", "o2", clock.now_ms(), &o, "the next owner").await;
    let resumed = other.load("wide").await.expect("load under the lease").expect("exists");
    assert!(resumed == cp, "the next owner reads the whole journal");
    let (e, done) = delta_entry(&cp, Message::assistant("done", vec![]), RunStatus::Finished, 99);
    other.commit(&l2, &e, &done).await.expect("it continues");
    other.release_lease(&l2).await.expect("release");
    clock.advance(1_000);
    assert!(store.load("wide").await.expect("load") == Some(done), "and ends");
    assert!(store.pending().await.expect("pending").is_empty());
}

/// Approval records and state documents are single values: over Workers KV's value limit (25 MiB) they are
/// refused with `STEADFAST_STORE_FAILED` (not retryable), writing nothing. Not part of [`run_all`] (memory).
pub async fn records_over_the_value_limit_are_refused_and_write_nothing(store: &impl RunStore) {
    let huge = "n".repeat(crate::store::kv::MAX_VALUE_BYTES);
    let rec = ApprovalRecord {
        id: "apr_big".into(),
        run_id: "r".into(),
        tool_call: ToolCall { id: "c1".into(), name: "pay".into(), args: json!({}), invalid: None },
        batch: vec!["apr_big".into()],
        status: ApprovalStatus::Pending,
        note: Some(huge.clone()),
        step: 1,
        created_at: 10,
        decided_at: None,
        fingerprint: None,
        ..Default::default()
    };
    let err = store.put_approval(&rec).await.expect_err("an approval record over 25 MiB");
    assert_eq!((err.code, err.retryable), (ErrorCode::StoreFailed, false), "{err}");
    assert_eq!(store.get_approval("apr_big").await.expect("get"), None, "nothing written");
    let err = store.put_state("big", &format!("{huge}x")).await.expect_err("a document over 25 MiB");
    assert_eq!((err.code, err.retryable), (ErrorCode::StoreFailed, false), "{err}");
    assert_eq!(store.get_state("big").await.expect("get"), None, "nothing written");
}
