//! Races between a delete, a reader, a run created under the same id, and the listing's index, made
//! deterministic by a KV wrapper that runs another process's step at a chosen point of the deleter's work (found
//! by the model-based checker, `tests/checker.rs`):
//!
//! * a read while a run is being deleted sees the whole run or none, never a half-deleted journal
//!   (`STEADFAST_CHECKPOINT_CORRUPT`);
//! * a run created under an id while that id is being deleted is listed by the index if it exists;
//! * a run whose index entry went stale (an index write lost, and the process that would have repaired it
//!   crashed) is still recovered by the sweep, which verifies the runs its listing says to leave alone.

mod common;

use async_trait::async_trait;
use common::*;
use serde_json::json;
use std::cell::RefCell;
use std::rc::Rc;
use steadfast::core::sweep::SweepOptions;
use steadfast::runtime::{
    Agent, CrashPoint, LocalFuture, ManualClock, ManualSleep, MockModel, MockTurn, NoListener, Resolve, SendOptions,
};
use steadfast::store::kv::{KvBackend, ListPage, PutOptions};
use steadfast::store::object::{LocalObjects, ObjectStore};
use steadfast::store::{JournalOptions, JournalStore, MemoryKv, RunStore};
use steadfast::{Result, RunStatus};

type Hook = Box<dyn FnOnce() -> LocalFuture<'static, ()>>;

/// A KV that runs `hook` once, right before (or after) the first delete of a key `when` matches; and that loses
/// (acknowledges without writing) every write to a key `lose` matches while `losing` is set.
#[derive(Clone)]
struct HookKv {
    inner: MemoryKv,
    hook: Rc<RefCell<Option<(Box<dyn Fn(&str) -> bool>, bool, Hook)>>>,
    losing: Rc<RefCell<Option<String>>>,
}

impl HookKv {
    fn new(inner: MemoryKv) -> HookKv {
        HookKv { inner, hook: Rc::default(), losing: Rc::default() }
    }

    fn on_delete(&self, when: impl Fn(&str) -> bool + 'static, after: bool, hook: Hook) {
        *self.hook.borrow_mut() = Some((Box::new(when), after, hook));
    }

    fn lose_writes_to(&self, part: Option<&str>) {
        *self.losing.borrow_mut() = part.map(str::to_string);
    }

    fn take_hook(&self, key: &str, after: bool) -> Option<Hook> {
        let mut h = self.hook.borrow_mut();
        if h.as_ref().is_some_and(|(when, a, _)| *a == after && when(key)) {
            return h.take().map(|(_, _, hook)| hook);
        }
        None
    }

    fn lost(&self, key: &str) -> bool {
        self.losing.borrow().as_deref().is_some_and(|p| key.contains(p))
    }
}

#[async_trait(?Send)]
impl KvBackend for HookKv {
    async fn get(&self, key: &str) -> Result<Option<String>> {
        self.inner.get(key).await
    }
    async fn get_many(&self, keys: &[String]) -> Result<Vec<Option<String>>> {
        self.inner.get_many(keys).await
    }
    async fn put(&self, key: &str, value: &str, opts: PutOptions) -> Result<()> {
        if self.lost(key) {
            return Ok(());
        }
        self.inner.put(key, value, opts).await
    }
    async fn delete(&self, key: &str) -> Result<()> {
        if self.lost(key) {
            return Ok(());
        }
        if let Some(h) = self.take_hook(key, false) {
            h().await;
        }
        let r = self.inner.delete(key).await;
        if let Some(h) = self.take_hook(key, true) {
            h().await;
        }
        r
    }
    async fn list(&self, prefix: &str, cursor: Option<&str>, limit: usize) -> Result<ListPage> {
        self.inner.list(prefix, cursor, limit).await
    }
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Journal,
    Objects,
}

/// A store of `kind` over `kv` (and, for run objects, `objects`): one process's handle.
fn store(kind: Kind, kv: &HookKv, objects: &LocalObjects, clock: &ManualClock) -> Rc<dyn RunStore> {
    let sleep = Rc::new(ManualSleep::new(clock.clone()));
    match kind {
        Kind::Journal => {
            Rc::new(JournalStore::new(kv.clone(), Rc::new(clock.clone()), sleep, JournalOptions::default()))
        }
        Kind::Objects => Rc::new(ObjectStore::new(objects.clone(), kv.clone(), "", Rc::new(clock.clone()), sleep)),
    }
}

fn agent(store: Rc<dyn RunStore>, clock: &ManualClock, counters: &Counters) -> Agent {
    let model = MockModel::by_turn(vec![
        MockTurn::tools([("read", json!({})), ("read", json!({}))]),
        MockTurn::tools([("pay", json!({}))]),
        MockTurn::text("done"),
    ]);
    let mut env = Env::with_store(store, clock.clone());
    env.seed = Rc::new(RefCell::new(7));
    env.agent(model, vec![counting_tool("read", counters), gated_tool("pay", counters)])
}

#[test]
fn a_read_while_a_run_is_deleted_sees_the_whole_run_or_none() {
    // The journal store deletes a run key by key (KV has no transaction); a reader in between must not see a
    // journal with entries missing. Each case runs the read after the deleter's k-th delete of a journal entry.
    for k in 1..=4 {
        let clock = ManualClock::new(1_700_000_000_000);
        let kv = HookKv::new(MemoryKv::new());
        let objects = LocalObjects::default();
        let counters = Counters::default();
        let writer = agent(store(Kind::Journal, &kv, &objects, &clock), &clock, &counters);
        let paused = block_on(writer.send("r", "go", SendOptions::default())).unwrap();
        assert_eq!(paused.status, RunStatus::AwaitingApproval);
        let reader = store(Kind::Journal, &kv, &objects, &clock);
        let seen = Rc::new(RefCell::new(None));
        let (r, s) = (reader.clone(), seen.clone());
        let count = Rc::new(std::cell::Cell::new(0));
        let c = count.clone();
        kv.on_delete(
            move |key| {
                let hit = key.contains("/j/");
                if hit {
                    c.set(c.get() + 1);
                }
                hit && c.get() == k
            },
            true,
            Box::new(move || {
                Box::pin(async move {
                    *s.borrow_mut() = Some(r.load("r").await.map(|cp| cp.map(|c| c.messages.len())));
                })
            }),
        );
        clock.advance(2_000);
        block_on(writer.delete("r")).unwrap();
        let seen = seen.borrow_mut().take();
        match seen {
            Some(Ok(None)) => {}
            Some(Ok(Some(n))) => assert_eq!(n, paused.messages.len(), "k={k}: a partial run"),
            Some(Err(e)) => panic!("k={k}: a read during the delete failed: {e:?}"),
            None if count.get() < k => {}
            None => panic!("k={k}: the read did not run"),
        }
        assert_eq!(block_on(reader.load("r")).unwrap(), None);
    }
}

#[test]
fn a_run_created_while_its_id_is_deleted_is_listed() {
    for kind in [Kind::Journal, Kind::Objects] {
        for after in [false, true] {
            let clock = ManualClock::new(1_700_000_000_000);
            let kv = HookKv::new(MemoryKv::new());
            let objects = LocalObjects::default();
            let counters = Counters::default();
            let first = agent(store(kind, &kv, &objects, &clock), &clock, &counters);
            block_on(first.send("r", "go", SendOptions::default())).unwrap();
            clock.advance(2_000);
            // Another process creates the run again (it pauses on an approval: unfinished) right around the
            // deleter's removal of the index entry.
            let creator = agent(store(kind, &kv, &objects, &clock), &clock, &counters);
            let creator = Rc::new(creator);
            let c = creator.clone();
            let cl = clock.clone();
            kv.on_delete(
                |key| key.contains("idx/"),
                after,
                Box::new(move || {
                    Box::pin(async move {
                        cl.advance(2_000);
                        // Refused (busy) or created: either is fine; what exists must be listed.
                        let _ = c.send("r", "again", SendOptions::default()).await;
                    })
                }),
            );
            let deleter = agent(store(kind, &kv, &objects, &clock), &clock, &counters);
            block_on(deleter.delete("r")).unwrap();
            clock.advance(2_000);
            let oracle = store(kind, &kv, &objects, &clock);
            let exists = block_on(oracle.load("r")).unwrap();
            let listed: Vec<String> = block_on(oracle.pending()).unwrap().into_iter().map(|r| r.run_id).collect();
            if exists.as_ref().is_some_and(|cp| cp.status != RunStatus::Finished) {
                assert_eq!(listed, vec!["r".to_string()], "{kind:?} (after: {after}): an unfinished run is unlisted");
            }
        }
    }
}

#[test]
fn the_sweep_recovers_a_run_whose_index_entry_went_stale() {
    for kind in [Kind::Journal, Kind::Objects] {
        let mut stale_cases = 0;
        // The approval's execution dies after its k-th effect with its index writes lost: for the k where the
        // run is in progress again while the index still says it waits for a person.
        for k in 1..=8 {
            let clock = ManualClock::new(1_700_000_000_000);
            let kv = HookKv::new(MemoryKv::new());
            let objects = LocalObjects::default();
            let counters = Counters::default();
            let a = agent(store(kind, &kv, &objects, &clock), &clock, &counters);
            let paused = block_on(a.send("r", "go", SendOptions::default())).unwrap();
            assert_eq!(paused.status, RunStatus::AwaitingApproval, "{kind:?}");
            clock.advance(2_000);
            kv.lose_writes_to(Some("idx/"));
            let crash = SendOptions {
                crash: Some(CrashPoint { after_effects: k, finish_in_flight: false }),
                ..Default::default()
            };
            let decision =
                Resolve { id: paused.approval_id.clone().unwrap(), approved: true, note: None, answer: None };
            let resolver = agent(store(kind, &kv, &objects, &clock), &clock, &counters);
            let crashed = block_on(resolver.approvals().resolve_with(decision, crash)).is_err();
            kv.lose_writes_to(None);
            // A minute on: a full listing verifies only the entries of the last minute with the runs' objects.
            clock.advance(61_000);
            let listed = block_on(a.pending()).unwrap();
            let now = block_on(a.load("r")).unwrap().unwrap();
            if !crashed
                || now.status != RunStatus::InProgress
                || listed.first().map(|r| r.status) != Some(RunStatus::AwaitingApproval)
            {
                continue;
            }
            stale_cases += 1;
            // Sweep ticks, time moving past the dead execution's lease: the run is found and finished.
            let opts = SweepOptions::default();
            let mut finished = false;
            for _ in 0..5 {
                clock.advance(70_000);
                let sweeper = agent(store(kind, &kv, &objects, &clock), &clock, &counters);
                block_on(sweeper.sweep(&opts, &NoListener)).unwrap();
                if block_on(a.load("r")).unwrap().unwrap().status == RunStatus::Finished {
                    finished = true;
                    break;
                }
            }
            assert!(finished, "{kind:?} k={k}: the sweep left a run with a stale listing alone");
            assert!(counters.get("pay") <= 1, "{kind:?} k={k}: the approved call ran at most once");
        }
        assert!(stale_cases > 0, "{kind:?}: no crash point left the index stale");
    }
}

/// A resolution that dies between recording its decision and resuming the run leaves a pause with every
/// approval decided and no one left to decide: the sweep finishes it with the recorded decision (it left such a
/// run paused for ever), the approved call running once.
#[test]
fn the_sweep_finishes_a_resolution_that_died_after_recording_its_decision() {
    for kind in [Kind::Journal, Kind::Objects] {
        let mut stuck_cases = 0;
        for k in 1..=8 {
            let clock = ManualClock::new(1_700_000_000_000);
            let kv = HookKv::new(MemoryKv::new());
            let objects = LocalObjects::default();
            let counters = Counters::default();
            let a = agent(store(kind, &kv, &objects, &clock), &clock, &counters);
            let paused = block_on(a.send("r", "go", SendOptions::default())).unwrap();
            clock.advance(2_000);
            let crash = SendOptions {
                crash: Some(CrashPoint { after_effects: k, finish_in_flight: false }),
                ..Default::default()
            };
            let id = paused.approval_id.clone().unwrap();
            let decision = Resolve { id: id.clone(), approved: true, note: None, answer: None };
            let resolver = agent(store(kind, &kv, &objects, &clock), &clock, &counters);
            if block_on(resolver.approvals().resolve_with(decision, crash)).is_ok() {
                continue;
            }
            let run = block_on(a.load("r")).unwrap().unwrap();
            let rec = block_on(a.store().get_approval(&id)).unwrap();
            let decided = rec.is_some_and(|r| r.status != steadfast::core::approval::ApprovalStatus::Pending);
            if run.status != RunStatus::AwaitingApproval || !decided {
                continue;
            }
            stuck_cases += 1;
            assert!(block_on(a.approvals().list()).unwrap().is_empty(), "{kind:?} k={k}: nothing left to decide");
            let mut finished = false;
            for _ in 0..3 {
                clock.advance(70_000);
                let sweeper = agent(store(kind, &kv, &objects, &clock), &clock, &counters);
                block_on(sweeper.sweep(&SweepOptions::default(), &NoListener)).unwrap();
                if block_on(a.load("r")).unwrap().unwrap().status == RunStatus::Finished {
                    finished = true;
                    break;
                }
            }
            assert!(finished, "{kind:?} k={k}: the decided pause was left as it was");
            assert_eq!(counters.get("pay"), 1, "{kind:?} k={k}: the approved call ran once");
        }
        assert!(stuck_cases > 0, "{kind:?}: no crash point left a decided pause");
    }
}
