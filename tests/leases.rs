//! Leases on the journal store (Workers KV), pinned by regression tests named after what once went wrong. The
//! racing tests (tests/racing.rs) measure the same over thousands of generated trials; these show each rule in
//! one exact interleaving.

mod common;

use async_trait::async_trait;
use common::*;
use serde_json::json;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use steadfast::core::checkpoint::RunStatus;
use steadfast::runtime::LocalFuture;
use steadfast::runtime::{
    AgentOptions, Clock, FnTool, ManualClock, ManualSleep, MockModel, MockTurn, SendOptions, SimExecutor, SimTime,
    Sleep, StallPoint, Tool, ToolOutput,
};
use steadfast::store::kv::{KvBackend, ListPage, PutOptions};
use steadfast::store::{JournalOptions, JournalStore, LeaseOptions, MemoryKv, RunStore};
use steadfast::{Error, ErrorCode, Result};

const T0: u64 = 1_700_000_000_000;
const LEASE: LeaseOptions = LeaseOptions { ttl_ms: 30_000, renew_every_ms: 10_000, grace_ms: 30_000 };

fn owner_of(kv: &MemoryKv, run: &str) -> String {
    let raw = kv.raw(&format!("run/{run}/lease")).expect("a lease record");
    serde_json::from_str::<serde_json::Value>(&raw).unwrap()["owner"].as_str().unwrap().to_string()
}

type Hook = Box<dyn FnOnce() -> LocalFuture<'static, ()>>;

/// A KV over `inner` with faults on the lease key only (each off by default): the next lease write first runs
/// `hook` (another process acting at that instant), then is refused with a 429, as KV refuses a second write to
/// a key within a second; lease reads observe the value at once but answer `read_delay` later; lease writes fail
/// while `writes_fail` is set.
#[derive(Clone, Default)]
struct LeaseFaults {
    inner: MemoryKv,
    hook: Rc<RefCell<Option<Hook>>>,
    read_delay: Option<(SimTime, u64)>,
    writes_fail: Rc<Cell<bool>>,
}

#[async_trait(?Send)]
impl KvBackend for LeaseFaults {
    async fn get(&self, key: &str) -> Result<Option<String>> {
        let v = self.inner.get(key).await;
        if let (true, Some((time, delay))) = (key.ends_with("/lease"), &self.read_delay) {
            time.sleep(*delay).await;
        }
        v
    }
    async fn get_many(&self, keys: &[String]) -> Result<Vec<Option<String>>> {
        self.inner.get_many(keys).await
    }
    async fn put(&self, key: &str, value: &str, opts: PutOptions) -> Result<()> {
        if key.ends_with("/lease") {
            if self.writes_fail.get() {
                return Err(Error::new(ErrorCode::StoreUnavailable, "KV PUT failed: 503 Service Unavailable"));
            }
            let hook = self.hook.borrow_mut().take();
            if let Some(hook) = hook {
                hook().await;
                return Err(
                    Error::new(ErrorCode::StoreRateLimited, "KV PUT failed: 429 Too Many Requests").with_status(429)
                );
            }
        }
        self.inner.put(key, value, opts).await
    }
    async fn delete(&self, key: &str) -> Result<()> {
        self.inner.delete(key).await
    }
    async fn list(&self, prefix: &str, cursor: Option<&str>, limit: usize) -> Result<ListPage> {
        self.inner.list(prefix, cursor, limit).await
    }
}

/// A renewal whose write meets a 429 because another process took the lease over in that second (its clock
/// runs ahead: it saw the lease expired) re-reads the lease before writing again, finds the new owner, and
/// stops: it never overwrites the new owner's record. (It used to retry the same write blindly.)
#[test]
fn a_renewal_that_meets_a_429_rereads_and_never_overwrites_a_new_owner() {
    let clock = ManualClock::new(T0);
    let kv = MemoryKv::new();
    let hook = Rc::new(RefCell::new(None));
    let a = JournalStore::new(
        LeaseFaults { inner: kv.clone(), hook: hook.clone(), ..LeaseFaults::default() },
        Rc::new(clock.clone()),
        Rc::new(ManualSleep::new(clock.clone())),
        JournalOptions::default(),
    );
    let lease = block_on(steadfast::store::conformance::acquired(&a, "r", "a", clock.now_ms(), &LEASE, "a"));
    clock.advance(2_000);
    // Process b's clock is 70 s ahead: by it, a's lease expired (plus grace) long ago.
    let b_clock = ManualClock::new(clock.now_ms() + 70_000);
    let b = Rc::new(JournalStore::new(
        kv.clone(),
        Rc::new(b_clock.clone()),
        Rc::new(ManualSleep::new(b_clock.clone())),
        JournalOptions::default(),
    ));
    let taken = Rc::new(Cell::new(false));
    let (b2, t2) = (b.clone(), taken.clone());
    *hook.borrow_mut() = Some(Box::new(move || {
        Box::pin(async move {
            let now = b_clock.now_ms();
            steadfast::store::conformance::acquired(&*b2, "r", "b", now, &LEASE, "b takes over").await;
            t2.set(true);
        }) as LocalFuture<'static, ()>
    }));
    let err = block_on(a.renew_lease(&lease, clock.now_ms(), &LEASE)).unwrap_err();
    assert!(taken.get(), "b took over while a's renewal was being written");
    assert_eq!(err.code, ErrorCode::SessionBusy, "{err:?}");
    assert_eq!(owner_of(&kv, "r"), "b", "the new owner's record stands");
    // And a stays out.
    assert_eq!(block_on(a.renew_lease(&lease, clock.now_ms(), &LEASE)).unwrap_err().code, ErrorCode::SessionBusy);
}

/// Two acquirers race for a new run; one's lease read observes "no lease" early but answers late. Whatever the
/// delay and whoever starts first, at most one of them is confirmed. (With a fixed 50 ms read-back and no bound
/// on the read→write time, the late one wrote after the other had read its own record back, and both owned
/// the run.)
#[test]
fn an_acquirer_whose_lease_read_answers_late_does_not_also_own_the_run() {
    let mut both = Vec::new();
    let mut one = 0;
    for delay in (0..=3_000).step_by(50) {
        for b_starts_after in [0, 5, 20, 100, 400, 900] {
            let exec = SimExecutor::new(T0, delay ^ b_starts_after);
            let time = exec.time();
            let kv = MemoryKv::new();
            let slow =
                LeaseFaults { inner: kv.clone(), read_delay: Some((time.clone(), delay)), ..LeaseFaults::default() };
            let a = Rc::new(JournalStore::new(
                slow,
                Rc::new(time.clone()),
                Rc::new(time.clone()),
                JournalOptions::default(),
            ));
            let b = Rc::new(JournalStore::new(
                kv.clone(),
                Rc::new(time.clone()),
                Rc::new(time.clone()),
                JournalOptions::default(),
            ));
            let race = |store: Rc<dyn RunStore>, owner: &'static str, wait: u64| {
                let time = time.clone();
                exec.spawn(async move {
                    time.sleep(wait).await;
                    let lease = store.acquire_lease("r", owner, time.now_ms(), &LEASE).await?;
                    store.confirm_lease(&lease).await
                })
            };
            let ta = race(a, "a", 0);
            let tb = race(b, "b", b_starts_after);
            exec.run();
            let (ra, rb) = (ta.try_take().unwrap(), tb.try_take().unwrap());
            match (ra.is_ok(), rb.is_ok()) {
                (true, true) => both.push((delay, b_starts_after)),
                (true, false) | (false, true) => one += 1,
                (false, false) => {}
            }
            for r in [ra, rb] {
                if let Err(e) = r {
                    assert_eq!(e.code, ErrorCode::SessionBusy, "delay {delay}: {e:?}");
                }
            }
        }
    }
    assert!(both.is_empty(), "both acquirers owned the run at (read delay, b's start): {both:?}");
    assert!(one > 200, "most races have a winner: {one}");
}

fn slow_step_tool(sleep: Rc<dyn Sleep>, ran: Rc<RefCell<Vec<String>>>) -> Rc<dyn Tool> {
    Rc::new(FnTool::new("step", "a slow step", object_schema(), move |_args, ctx| {
        let (sleep, ran) = (sleep.clone(), ran.clone());
        async move {
            ran.borrow_mut().push(ctx.tool_call_id.clone());
            sleep.sleep(5_000).await;
            Ok(ToolOutput::text("stepped"))
        }
    }))
}

/// A process that froze past its lease's expiry (another process took the run over meanwhile) wakes up with a
/// queued tool call: it checks its lease before starting it, finds it lost, and stops. The call runs once, by
/// the new owner. (Queued calls used to start without a look at the lease.)
#[test]
fn a_frozen_process_does_not_start_queued_tools_after_its_lease_expired() {
    let env = Env::journal_sim();
    let ran = Rc::new(RefCell::new(Vec::new()));
    let sleep: Rc<dyn Sleep> = Rc::new(env.sleep.clone());
    let script =
        || vec![MockTurn::tools([("step", json!({"n": 1})), ("step", json!({"n": 2}))]), MockTurn::text("done")];
    let serial = AgentOptions { tool_concurrency: 1, ..AgentOptions::default() };
    let a = env.agent_with(
        MockModel::by_turn(script()),
        vec![slow_step_tool(sleep.clone(), ran.clone())],
        serial.clone(),
        "",
    );
    let b = env.agent_with(MockModel::by_turn(script()), vec![slow_step_tool(sleep, ran.clone())], serial, "");
    // Effects of a: run.start, commit, model, step, gate, commit, tool.start(call 1), run(call 1), tool.start
    // (call 2), run(call 2: queued behind call 1). It freezes right after queueing call 2, for 100 s.
    let (env2, b2) = (env.clone(), b.clone());
    let wait = Rc::new(move || -> LocalFuture<'static, ()> {
        let (env, b) = (env2.clone(), b2.clone());
        Box::pin(async move {
            env.clock.advance(100_000);
            // Meanwhile another process finishes the run.
            let done = b.resume("frozen", SendOptions::default()).await.unwrap().unwrap();
            assert_eq!(done.status, RunStatus::Finished);
        })
    });
    let opts = SendOptions { stall: Some(StallPoint { after_effects: 10, wait }), ..SendOptions::default() };
    let err = block_on(a.send("frozen", "go", opts)).unwrap_err();
    assert_eq!(err.code, ErrorCode::SessionBusy, "{err:?}");
    let ran = ran.borrow().clone();
    let second = ran.iter().filter(|id| id.as_str() == "call_0_1").count();
    assert_eq!(second, 1, "the queued call ran once, by the new owner: {ran:?}");
    let cp = block_on(b.load("frozen")).unwrap().unwrap();
    assert_eq!(cp.status, RunStatus::Finished);
}

/// Renewals that keep failing (the store refuses them) stop the execution before its lease runs out — fail
/// closed — instead of being ignored while tools keep starting under an expired lease.
#[test]
fn renewals_that_keep_failing_stop_the_run_before_its_lease_expires() {
    let clock = ManualClock::new(T0);
    let kv = LeaseFaults::default();
    let failing = kv.writes_fail.clone();
    let store = JournalStore::new(
        kv,
        Rc::new(clock.clone()),
        Rc::new(ManualSleep::new(clock.clone())),
        JournalOptions::default(),
    );
    let env = Env::with_store(Rc::new(store), clock.clone());
    let ran = Rc::new(RefCell::new(Vec::new()));
    let started_at = Rc::new(RefCell::new(Vec::new()));
    let (f2, c2, s2, r2) = (failing.clone(), clock.clone(), env.sleep.clone(), ran.clone());
    let at2 = started_at.clone();
    let tool = Rc::new(FnTool::new("work", "long work", object_schema(), move |_a, ctx| {
        let (f, c, s, r, at) = (f2.clone(), c2.clone(), s2.clone(), r2.clone(), at2.clone());
        async move {
            r.borrow_mut().push(ctx.tool_call_id.clone());
            at.borrow_mut().push(c.now_ms());
            // From now on the store refuses lease writes.
            f.set(true);
            s.sleep(20_000).await;
            Ok(ToolOutput::text("worked"))
        }
    })) as Rc<dyn Tool>;
    let script = vec![
        MockTurn::tools([("work", json!({"n": 1})), ("work", json!({"n": 2})), ("work", json!({"n": 3}))]),
        MockTurn::text("done"),
    ];
    let serial = AgentOptions { tool_concurrency: 1, ..AgentOptions::default() };
    let a = env.agent_with(MockModel::by_turn(script), vec![tool], serial, "");
    let err = block_on(a.send("renewals", "go", SendOptions::default())).unwrap_err();
    assert_eq!(err.code, ErrorCode::SessionBusy, "{err:?}");
    assert!(err.message.contains("renewed"), "{}", err.message);
    // Every tool started with at least the start margin of lease left; none after the lease could have expired.
    let lease_end = T0 + 1_000 + LEASE.ttl_ms; // acquired, then confirmed a settle window later
    for t in started_at.borrow().iter() {
        assert!(*t + 1_000 <= lease_end + 1_000, "a tool started at +{} ms", t - T0);
    }
    assert!(ran.borrow().len() < 3, "the run stopped before starting every call: {:?}", ran.borrow());
}

/// A [`MemoryStore`] whose `fail_at`-th operation (lease operations aside: acquiring, confirming, renewing and
/// releasing are never failed) is refused for good with `STEADFAST_STORE_FAILED`, once.
#[derive(Clone, Default)]
struct FailOnce {
    inner: steadfast::store::MemoryStore,
    ops: Rc<Cell<u64>>,
    fail_at: Rc<Cell<Option<u64>>>,
    fired: Rc<Cell<bool>>,
}

impl FailOnce {
    fn op(&self, what: &str) -> Result<()> {
        let n = self.ops.get();
        self.ops.set(n + 1);
        if self.fail_at.get() == Some(n) {
            self.fired.set(true);
            return Err(Error::new(ErrorCode::StoreFailed, format!("injected: {what} #{n} refused")));
        }
        Ok(())
    }
}

#[async_trait(?Send)]
impl RunStore for FailOnce {
    async fn load(&self, run_id: &str) -> Result<Option<steadfast::core::checkpoint::Checkpoint>> {
        self.op("load")?;
        self.inner.load(run_id).await
    }
    async fn acquire_lease(
        &self,
        run_id: &str,
        owner: &str,
        now_ms: u64,
        opts: &LeaseOptions,
    ) -> Result<steadfast::store::Lease> {
        self.inner.acquire_lease(run_id, owner, now_ms, opts).await
    }
    async fn confirm_lease(&self, lease: &steadfast::store::Lease) -> Result<()> {
        self.inner.confirm_lease(lease).await
    }
    async fn renew_lease(
        &self,
        lease: &steadfast::store::Lease,
        now_ms: u64,
        opts: &LeaseOptions,
    ) -> Result<steadfast::store::Lease> {
        self.inner.renew_lease(lease, now_ms, opts).await
    }
    async fn release_lease(&self, lease: &steadfast::store::Lease) -> Result<()> {
        self.inner.release_lease(lease).await
    }
    async fn commit(
        &self,
        lease: &steadfast::store::Lease,
        entry: &steadfast::core::checkpoint::JournalEntry,
        state: &steadfast::core::checkpoint::Checkpoint,
    ) -> Result<()> {
        self.op("commit")?;
        self.inner.commit(lease, entry, state).await
    }
    async fn delete(&self, run_id: &str) -> Result<()> {
        self.op("delete")?;
        self.inner.delete(run_id).await
    }
    async fn history(&self, run_id: &str, limit: usize) -> Result<Vec<steadfast::store::HistoryEntry>> {
        self.op("history")?;
        self.inner.history(run_id, limit).await
    }
    async fn pending(&self) -> Result<Vec<steadfast::store::PendingRun>> {
        self.op("pending")?;
        self.inner.pending().await
    }
    async fn pending_page(&self, cursor: Option<&str>, limit: usize) -> Result<steadfast::store::PendingPage> {
        self.op("pending_page")?;
        self.inner.pending_page(cursor, limit).await
    }
    async fn check_pending(&self, runs: &[steadfast::store::PendingRun]) -> Result<Vec<bool>> {
        self.op("check_pending")?;
        self.inner.check_pending(runs).await
    }
    async fn put_approval(&self, record: &steadfast::core::approval::ApprovalRecord) -> Result<()> {
        self.op("put_approval")?;
        self.inner.put_approval(record).await
    }
    async fn get_approval(&self, id: &str) -> Result<Option<steadfast::core::approval::ApprovalRecord>> {
        self.op("get_approval")?;
        self.inner.get_approval(id).await
    }
    async fn list_approvals(&self) -> Result<Vec<steadfast::core::approval::ApprovalRecord>> {
        self.op("list_approvals")?;
        self.inner.list_approvals().await
    }
    async fn delete_approval(&self, id: &str) -> Result<()> {
        self.op("delete_approval")?;
        self.inner.delete_approval(id).await
    }
    async fn put_due(&self, due: &steadfast::store::DueWait) -> Result<()> {
        self.op("put_due")?;
        self.inner.put_due(due).await
    }
    async fn list_due(&self, until: u64, limit: usize) -> Result<Vec<steadfast::store::DueWait>> {
        self.op("list_due")?;
        self.inner.list_due(until, limit).await
    }
    async fn delete_due(&self, due: &steadfast::store::DueWait) -> Result<()> {
        self.op("delete_due")?;
        self.inner.delete_due(due).await
    }
    async fn put_queued(&self, msg: &steadfast::store::QueuedMessage) -> Result<()> {
        self.op("put_queued")?;
        self.inner.put_queued(msg).await
    }
    async fn list_queued(&self, run_id: &str) -> Result<Vec<steadfast::store::QueuedMessage>> {
        self.op("list_queued")?;
        self.inner.list_queued(run_id).await
    }
    async fn delete_queued(&self, msg: &steadfast::store::QueuedMessage) -> Result<()> {
        self.op("delete_queued")?;
        self.inner.delete_queued(msg).await
    }
    async fn get_state(&self, name: &str) -> Result<Option<String>> {
        self.op("get_state")?;
        self.inner.get_state(name).await
    }
    async fn put_state(&self, name: &str, value: &str) -> Result<()> {
        self.op("put_state")?;
        self.inner.put_state(name, value).await
    }
}

/// Whatever store operation of a run's life fails for good — a load, a commit, an approval record written
/// when the last decision of a pause resumes the run, a fork's first entry — the operation that met it leaves
/// the run's lease free: another process can take the run at that very instant, and the run still finishes
/// by retrying. Generated over every operation index of the story (send → pause on two approvals → two
/// decisions → the paid calls run → finish → fork). (A failed approval write on the resuming decision used to
/// return with the lease still held, so the run was busy for its whole ttl.)
#[test]
fn a_store_failure_anywhere_in_a_leased_operation_leaves_the_lease_free() {
    let mut fired = 0;
    for fail_at in 0..200u64 {
        let clock = ManualClock::new(T0);
        let store = FailOnce::default();
        store.fail_at.set(Some(fail_at));
        let env = Env::with_store(Rc::new(store.clone()), clock.clone());
        let pay = Rc::new(
            FnTool::new("pay", "pays", object_schema(), |_a, _ctx| async { Ok(ToolOutput::text("paid")) })
                .needs_approval(true),
        ) as Rc<dyn Tool>;
        let script =
            vec![MockTurn::tools([("pay", json!({"n": 1})), ("pay", json!({"n": 2}))]), MockTurn::text("done")];
        let a = env.agent(MockModel::by_turn(script), vec![pay]);
        let repro = format!("fail_at = {fail_at}");
        // Each failed operation must leave `run`'s lease free (no lease at all is free too).
        let lease_free = |run: &str, what: &str, e: &Error| {
            let probe = block_on(store.inner.acquire_lease(run, "probe", clock.now_ms(), &LeaseOptions::default()))
                .unwrap_or_else(|busy| panic!("{repro}: after {what} failed ({e:?}) the lease stayed held: {busy:?}"));
            block_on(store.inner.release_lease(&probe)).unwrap();
        };
        let mut finished = false;
        for _ in 0..30 {
            let cp = block_on(store.inner.load("r")).unwrap();
            let (what, res) = match cp.as_ref().map(|c| c.status) {
                None => ("send", block_on(a.send("r", "go", SendOptions::default())).map(|_| ())),
                Some(RunStatus::AwaitingApproval) => {
                    let pending = block_on(store.inner.list_approvals()).unwrap();
                    let next = pending.iter().find(|p| p.status == steadfast::core::approval::ApprovalStatus::Pending);
                    let id = next.map(|p| p.id.clone()).unwrap_or_else(|| cp.as_ref().unwrap().approval_ids[0].clone());
                    let decision = steadfast::runtime::Resolve { id, approved: true, note: None, answer: None };
                    ("resolve", block_on(a.approvals().resolve(decision)).map(|_| ()))
                }
                Some(RunStatus::InProgress) => ("resume", block_on(a.resume("r", SendOptions::default())).map(|_| ())),
                Some(RunStatus::Finished) => {
                    finished = true;
                    break;
                }
            };
            if let Err(e) = res {
                lease_free("r", what, &e);
            }
        }
        assert!(finished, "{repro}: the run never finished");
        let fork =
            steadfast::runtime::ForkOptions { from_step: 1, new_id: Some("r-fork".into()), ..Default::default() };
        for _ in 0..3 {
            match block_on(a.fork("r", fork.clone())) {
                Ok(_) => break,
                Err(e) if e.code == ErrorCode::SessionExists => break,
                Err(e) => lease_free("r-fork", "fork", &e),
            }
        }
        assert!(block_on(store.inner.load("r-fork")).unwrap().is_some(), "{repro}: the fork was never written");
        if !store.fired.get() {
            assert!(fired > 20, "the story has more than 20 operations to fail ({fired} did)");
            return;
        }
        fired += 1;
    }
    panic!("the story should end within 200 operations");
}

/// A [`MemoryStore`] whose lease confirmations are refused with `STEADFAST_SESSION_BUSY` while `refuse` is set,
/// as the journal store refuses one when a racing acquirer's record won; it logs the confirmations and the
/// approval records written (with their status).
#[derive(Clone, Default)]
struct ConfirmRefused {
    inner: steadfast::store::MemoryStore,
    refuse: Rc<Cell<bool>>,
    log: Rc<RefCell<Vec<String>>>,
}

#[async_trait(?Send)]
impl RunStore for ConfirmRefused {
    async fn load(&self, run_id: &str) -> Result<Option<steadfast::core::checkpoint::Checkpoint>> {
        self.inner.load(run_id).await
    }
    async fn acquire_lease(
        &self,
        run_id: &str,
        owner: &str,
        now_ms: u64,
        opts: &LeaseOptions,
    ) -> Result<steadfast::store::Lease> {
        self.inner.acquire_lease(run_id, owner, now_ms, opts).await
    }
    async fn confirm_lease(&self, lease: &steadfast::store::Lease) -> Result<()> {
        if self.refuse.get() {
            self.log.borrow_mut().push("confirm refused".into());
            return Err(Error::busy(&lease.run_id, "another process took its lease at the same time (injected)"));
        }
        self.log.borrow_mut().push("confirmed".into());
        self.inner.confirm_lease(lease).await
    }
    async fn renew_lease(
        &self,
        lease: &steadfast::store::Lease,
        now_ms: u64,
        opts: &LeaseOptions,
    ) -> Result<steadfast::store::Lease> {
        self.inner.renew_lease(lease, now_ms, opts).await
    }
    async fn release_lease(&self, lease: &steadfast::store::Lease) -> Result<()> {
        self.inner.release_lease(lease).await
    }
    async fn commit(
        &self,
        lease: &steadfast::store::Lease,
        entry: &steadfast::core::checkpoint::JournalEntry,
        state: &steadfast::core::checkpoint::Checkpoint,
    ) -> Result<()> {
        self.inner.commit(lease, entry, state).await
    }
    async fn delete(&self, run_id: &str) -> Result<()> {
        self.inner.delete(run_id).await
    }
    async fn history(&self, run_id: &str, limit: usize) -> Result<Vec<steadfast::store::HistoryEntry>> {
        self.inner.history(run_id, limit).await
    }
    async fn pending(&self) -> Result<Vec<steadfast::store::PendingRun>> {
        self.inner.pending().await
    }
    async fn put_approval(&self, record: &steadfast::core::approval::ApprovalRecord) -> Result<()> {
        self.log.borrow_mut().push(format!("approval {} {:?}", record.id, record.status));
        self.inner.put_approval(record).await
    }
    async fn get_approval(&self, id: &str) -> Result<Option<steadfast::core::approval::ApprovalRecord>> {
        self.inner.get_approval(id).await
    }
    async fn list_approvals(&self) -> Result<Vec<steadfast::core::approval::ApprovalRecord>> {
        self.inner.list_approvals().await
    }
    async fn delete_approval(&self, id: &str) -> Result<()> {
        self.inner.delete_approval(id).await
    }
    async fn put_due(&self, due: &steadfast::store::DueWait) -> Result<()> {
        self.inner.put_due(due).await
    }
    async fn list_due(&self, until: u64, limit: usize) -> Result<Vec<steadfast::store::DueWait>> {
        self.inner.list_due(until, limit).await
    }
    async fn delete_due(&self, due: &steadfast::store::DueWait) -> Result<()> {
        self.inner.delete_due(due).await
    }
    async fn put_queued(&self, msg: &steadfast::store::QueuedMessage) -> Result<()> {
        self.inner.put_queued(msg).await
    }
    async fn list_queued(&self, run_id: &str) -> Result<Vec<steadfast::store::QueuedMessage>> {
        self.inner.list_queued(run_id).await
    }
    async fn delete_queued(&self, msg: &steadfast::store::QueuedMessage) -> Result<()> {
        self.inner.delete_queued(msg).await
    }
    async fn get_state(&self, name: &str) -> Result<Option<String>> {
        self.inner.get_state(name).await
    }
    async fn put_state(&self, name: &str, value: &str) -> Result<()> {
        self.inner.put_state(name, value).await
    }
}

/// The decision that resumes a paused run is recorded only after the resolver's lease is confirmed. A resolver
/// whose confirmation is refused (a racing acquirer won the lease) gets `STEADFAST_SESSION_BUSY` and leaves the
/// approval pending: no tool ran, and the reviewer who decides next — the other way — is not refused with
/// `STEADFAST_APPROVAL_ALREADY_DECIDED`. (The decision used to be written before the confirmation, so the
/// loser's approval stuck.) Pauses of one to three approvals, each decided in turn, the last one raced.
#[test]
fn an_approval_is_not_decided_by_a_resolver_whose_lease_is_not_confirmed() {
    use steadfast::core::approval::ApprovalStatus;
    for calls in 1..=3usize {
        let clock = ManualClock::new(T0);
        let store = ConfirmRefused::default();
        let env = Env::with_store(Rc::new(store.clone()), clock.clone());
        let counters = Counters::default();
        let turn = MockTurn::tools((0..calls).map(|i| ("refund", json!({"order": i}))).collect::<Vec<_>>());
        let agent =
            env.agent(MockModel::by_turn(vec![turn, MockTurn::text("done")]), vec![gated_tool("refund", &counters)]);
        let paused = block_on(agent.send("r", "refund them", SendOptions::default())).unwrap();
        assert_eq!(paused.status, RunStatus::AwaitingApproval);
        let ids = paused.approval_ids.clone();
        assert_eq!(ids.len(), calls);
        let decide = |id: &str, approved: bool| {
            block_on(agent.approvals().resolve(steadfast::runtime::Resolve {
                id: id.into(),
                approved,
                note: None,
                answer: None,
            }))
        };
        // Every decision but the last leaves the run waiting (no lease is taken).
        for id in &ids[..calls - 1] {
            assert_eq!(decide(id, true).unwrap().status, RunStatus::AwaitingApproval);
        }
        let last = &ids[calls - 1];
        store.refuse.set(true);
        store.log.borrow_mut().clear();
        let err = decide(last, true).unwrap_err();
        assert_eq!(err.code, ErrorCode::SessionBusy, "calls {calls}: {err:?}");
        let log = store.log.borrow().clone();
        assert_eq!(log, ["confirm refused"], "calls {calls}: nothing recorded before the confirmation: {log:?}");
        let stored = block_on(store.inner.get_approval(last)).unwrap().expect("the record stays");
        assert_eq!(stored.status, ApprovalStatus::Pending, "calls {calls}");
        assert_eq!(counters.get("refund"), 0, "calls {calls}");
        // The lease the loser took lapses; the next reviewer decides the other way.
        store.refuse.set(false);
        env.past_leases();
        let done = decide(last, false).unwrap_or_else(|e| panic!("calls {calls}: {e:?}"));
        assert_eq!(done.status, RunStatus::Finished, "calls {calls}");
        assert_eq!(counters.get("refund"), (calls - 1) as u32, "calls {calls}: the approved ones ran, once");
        let log = store.log.borrow().clone();
        let confirmed = log.iter().position(|l| l == "confirmed").unwrap_or(usize::MAX);
        let recorded = log.iter().position(|l| l.starts_with("approval ")).unwrap_or(usize::MAX);
        assert!(confirmed < recorded, "calls {calls}: confirmed, then recorded: {log:?}");
    }
}
