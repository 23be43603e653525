//! A new run never replaces an existing one (issue 26, item 1): a fork whose "the target does not exist" check
//! raced a send that created the target must be refused, on every store, and leave the send's recorded results
//! as they were. Also session forks and two sweep ticks creating the same diagnosis fork, which take the same
//! path (`Agent::write_new_run`).
//!
//! The race is made deterministic with a store wrapper that, the first time the forking process reads the
//! target (its existence check), lets another process create and finish the target run first.

mod common;

use async_trait::async_trait;
use common::*;
use serde_json::json;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use steadfast::core::approval::ApprovalRecord;
use steadfast::core::checkpoint::{Checkpoint, JournalEntry, RunStatus};
use steadfast::core::transcript::Message;
use steadfast::runtime::{Agent, ForkOptions, LocalFuture, ManualClock, ManualSleep, MockModel, MockTurn, SendOptions};
use steadfast::store::object::{LocalObjects, ObjectStore};
use steadfast::store::{HistoryEntry, Lease, LeaseOptions, MemoryKv, PendingRun, RunStore};
use steadfast::{ErrorCode, Result};

type Hook = Box<dyn FnOnce() -> LocalFuture<'static, ()>>;

/// A store that runs `hook` (once) right after the first load of `target` answered: whatever the hook does
/// happens between the caller's existence check and its next step.
struct RaceAfterCheck {
    inner: Rc<dyn RunStore>,
    target: String,
    hook: RefCell<Option<Hook>>,
    fired: Cell<bool>,
}

#[async_trait(?Send)]
impl RunStore for RaceAfterCheck {
    async fn load(&self, run_id: &str) -> Result<Option<Checkpoint>> {
        let r = self.inner.load(run_id).await;
        if run_id == self.target && !self.fired.get() {
            self.fired.set(true);
            let hook = self.hook.borrow_mut().take();
            if let Some(h) = hook {
                h().await;
            }
        }
        r
    }
    async fn acquire_lease(&self, run_id: &str, owner: &str, now_ms: u64, opts: &LeaseOptions) -> Result<Lease> {
        self.inner.acquire_lease(run_id, owner, now_ms, opts).await
    }
    async fn confirm_lease(&self, lease: &Lease) -> Result<()> {
        self.inner.confirm_lease(lease).await
    }
    async fn renew_lease(&self, lease: &Lease, now_ms: u64, opts: &LeaseOptions) -> Result<Lease> {
        self.inner.renew_lease(lease, now_ms, opts).await
    }
    async fn release_lease(&self, lease: &Lease) -> Result<()> {
        self.inner.release_lease(lease).await
    }
    async fn commit(&self, lease: &Lease, entry: &JournalEntry, state: &Checkpoint) -> Result<()> {
        self.inner.commit(lease, entry, state).await
    }
    async fn delete(&self, run_id: &str) -> Result<()> {
        self.inner.delete(run_id).await
    }
    async fn history(&self, run_id: &str, limit: usize) -> Result<Vec<HistoryEntry>> {
        self.inner.history(run_id, limit).await
    }
    async fn pending(&self) -> Result<Vec<PendingRun>> {
        self.inner.pending().await
    }
    async fn put_approval(&self, record: &ApprovalRecord) -> Result<()> {
        self.inner.put_approval(record).await
    }
    async fn get_approval(&self, id: &str) -> Result<Option<ApprovalRecord>> {
        self.inner.get_approval(id).await
    }
    async fn list_approvals(&self) -> Result<Vec<ApprovalRecord>> {
        self.inner.list_approvals().await
    }
    async fn delete_approval(&self, id: &str) -> Result<()> {
        self.inner.delete_approval(id).await
    }
    async fn get_state(&self, name: &str) -> Result<Option<String>> {
        self.inner.get_state(name).await
    }
    async fn put_state(&self, name: &str, value: &str) -> Result<()> {
        self.inner.put_state(name, value).await
    }
}

/// The stores every test here runs on: the memory store, the journal store on the Workers-KV simulator, and
/// strict mode's run objects with their KV index.
fn envs() -> Vec<(&'static str, Env)> {
    let strict = {
        let clock = ManualClock::new(1_700_000_000_000);
        let store = ObjectStore::new(
            LocalObjects::default(),
            MemoryKv::new(),
            "",
            Rc::new(clock.clone()),
            Rc::new(ManualSleep::new(clock.clone())),
        );
        Env::with_store(Rc::new(store), clock)
    };
    vec![("memory", Env::new()), ("journal", Env::journal_sim()), ("objects", strict)]
}

fn script() -> Vec<MockTurn> {
    vec![MockTurn::tools([("charge", json!({"cents": 500}))]), MockTurn::text("charged")]
}

fn agent_on(env: &Env, store: Rc<dyn RunStore>, counters: &Counters) -> Agent {
    let mut env = env.clone();
    env.store = store;
    env.agent(MockModel::by_turn(script()), vec![counting_tool("charge", counters)])
}

/// The charge recorded in a run's transcript.
fn charges(cp: &Checkpoint) -> Vec<String> {
    cp.messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(r) if r.name == "charge" => Some(r.content.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_fork_racing_a_send_to_its_target_id_is_refused_and_the_send_keeps_its_charge() {
    for (name, env) in envs() {
        let counters = Counters::default();
        let plain = agent_on(&env, env.store.clone(), &counters);
        block_on(plain.send("source", "charge order 1", SendOptions::default())).unwrap();
        let racer = Rc::new(agent_on(&env, env.store.clone(), &counters));
        let hook: Hook = Box::new(move || {
            Box::pin(async move {
                let done = racer.send("target", "charge order 2", SendOptions::default()).await.unwrap();
                assert_eq!(done.status, RunStatus::Finished);
            })
        });
        let store = Rc::new(RaceAfterCheck {
            inner: env.store.clone(),
            target: "target".into(),
            hook: RefCell::new(Some(hook)),
            fired: Cell::new(false),
        });
        let forker = agent_on(&env, store.clone(), &counters);
        env.clock.advance(2_000);
        let fork = ForkOptions { from_step: 1, new_id: Some("target".into()), ..ForkOptions::default() };
        let err = block_on(forker.fork("source", fork)).expect_err(name);
        assert!(store.fired.get(), "{name}: the race happened");
        assert_eq!(err.code, ErrorCode::SessionExists, "{name}: {err:?}");
        let target = block_on(plain.load("target")).unwrap().expect("the send's run is there");
        assert_eq!(target.status, RunStatus::Finished, "{name}");
        assert_eq!(charges(&target), vec!["charge done 2".to_string()], "{name}: the recorded charge is kept");
        assert_eq!(counters.get("charge"), 2, "{name}: one charge per run");
    }
}

#[test]
fn a_session_fork_racing_a_send_to_the_new_session_is_refused() {
    for (name, env) in envs() {
        let counters = Counters::default();
        let plain = agent_on(&env, env.store.clone(), &counters);
        block_on(plain.session("chat").unwrap().send("charge order 1", SendOptions::default())).unwrap();
        let racer = Rc::new(agent_on(&env, env.store.clone(), &counters));
        let hook: Hook = Box::new(move || {
            Box::pin(async move {
                racer.session("copy").unwrap().send("charge order 2", SendOptions::default()).await.unwrap();
            })
        });
        let store = Rc::new(RaceAfterCheck {
            inner: env.store.clone(),
            target: "copy.turn-1".into(),
            hook: RefCell::new(Some(hook)),
            fired: Cell::new(false),
        });
        let forker = agent_on(&env, store.clone(), &counters);
        env.clock.advance(2_000);
        let opts = steadfast::runtime::SessionForkOptions { from_step: 1, new_id: Some("copy".into()) };
        let err = block_on(forker.session("chat").unwrap().fork(opts)).expect_err(name);
        assert!(store.fired.get(), "{name}: the race happened");
        assert_eq!(err.code, ErrorCode::SessionExists, "{name}: {err:?}");
        let turn = block_on(plain.load("copy.turn-1")).unwrap().expect("the send's turn is there");
        assert_eq!(charges(&turn), vec!["charge done 2".to_string()], "{name}");
    }
}
