//! A new run never replaces an existing one (issue 26, item 1): a fork whose "the target does not exist" check
//! raced a send that created the target must be refused, on every store, and leave the send's recorded results
//! as they were. Also session forks and two sweep ticks creating the same diagnosis fork, which take the same
//! path (`Agent::write_new_run`).
//!
//! The race is made deterministic with a store wrapper that, the first time the forking process reads the
//! target (its existence check), lets another process create and finish the target run first.

mod common;

use common::*;
use serde_json::json;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use steadfast::core::checkpoint::{Checkpoint, RunStatus};
use steadfast::core::transcript::Message;
use steadfast::runtime::{Agent, ForkOptions, LocalFuture, MockModel, MockTurn, SendOptions};

use steadfast::store::RunStore;
use steadfast::ErrorCode;

type Hook = Box<dyn FnOnce() -> LocalFuture<'static, ()>>;

/// A store that runs `hook` (once) right after the first load of `target` answered: whatever the hook does
/// happens between the caller's existence check and its next step. Also says whether it ran.
fn race_after_check(inner: Rc<dyn RunStore>, target: &str, hook: Hook) -> (Rc<dyn RunStore>, Rc<Cell<bool>>) {
    let fired = Rc::new(Cell::new(false));
    let (f, target, hook) = (fired.clone(), target.to_string(), RefCell::new(Some(hook)));
    let mut spy = Spy::new(inner);
    spy.after_load = Some(Box::new(move |run_id: &str| {
        if run_id != target || f.get() {
            return None;
        }
        f.set(true);
        hook.borrow_mut().take().map(|h| h())
    }));
    (Rc::new(spy), fired)
}

/// The stores every test here runs on: the memory store, the journal store on the Workers-KV simulator, and
/// strict mode's run objects with their KV index.
fn envs() -> Vec<(&'static str, Env)> {
    vec![("memory", Env::new()), ("journal", Env::journal_sim()), ("objects", Env::objects())]
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
        let (store, fired) = race_after_check(env.store.clone(), "target", hook);
        let forker = agent_on(&env, store, &counters);
        env.clock.advance(2_000);
        let fork = ForkOptions { from_step: 1, new_id: Some("target".into()), ..ForkOptions::default() };
        let err = block_on(forker.fork("source", fork)).expect_err(name);
        assert!(fired.get(), "{name}: the race happened");
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
        let (store, fired) = race_after_check(env.store.clone(), "copy.turn-1", hook);
        let forker = agent_on(&env, store, &counters);
        env.clock.advance(2_000);
        let opts = steadfast::runtime::SessionForkOptions { from_step: 1, new_id: Some("copy".into()) };
        let err = block_on(forker.session("chat").unwrap().fork(opts)).expect_err(name);
        assert!(fired.get(), "{name}: the race happened");
        assert_eq!(err.code, ErrorCode::SessionExists, "{name}: {err:?}");
        let turn = block_on(plain.load("copy.turn-1")).unwrap().expect("the send's turn is there");
        assert_eq!(charges(&turn), vec!["charge done 2".to_string()], "{name}");
    }
}
