//! Fixtures shared by the self-healing tests (`sweep.rs`, `diagnosis_forks.rs`, `tool_guards.rs`, `forks.rs`):
//! a sweep listener that records every callback, one-attempt agent options, default send options.

use super::{block_on, Env};
use std::cell::RefCell;
use std::rc::Rc;
use steadfast::core::retry::RetryPolicy;
use steadfast::runtime::{AgentOptions, CrashBudget, RunResult, SendOptions, SweepListener};
use steadfast::runtime::{ManualClock, ManualSleep};
use steadfast::store::kv::{KvBackend, PutOptions};
use steadfast::store::sim::{SimKv, SimOptions};
use steadfast::store::PendingRun;
use steadfast::store::{JournalOptions, JournalStore};
use steadfast::{Error, ErrorCode, Result};

/// A listener that crashes the executions a recovery step (a consumer's, an alarm's) starts after the budget's
/// `k`-th effect, and ignores everything else.
pub struct Crashing(pub Option<Rc<CrashBudget>>);

impl SweepListener for Crashing {
    fn crash_budget(&self) -> Option<Rc<CrashBudget>> {
        self.0.clone()
    }
}

/// A sweep listener that records every callback it is given, in order; a [`Recorder::throwing`] one also fails
/// each of them.
#[derive(Default)]
pub struct Recorder {
    /// The run ids `on_recovered` was given.
    pub recovered: RefCell<Vec<String>>,
    /// The run ids `on_quarantined` was given.
    pub quarantined: RefCell<Vec<String>>,
    /// Each `on_outage` (true: the breaker opened, false: it closed).
    pub outage: RefCell<Vec<bool>>,
    /// Each `on_error`: the error's code and the run it was about.
    pub errors: RefCell<Vec<(ErrorCode, Option<String>)>>,
    throw: bool,
}

impl SweepListener for Recorder {
    fn on_recovered(&self, run_id: &str, _r: &RunResult) -> Result<()> {
        self.recovered.borrow_mut().push(run_id.into());
        self.fail()
    }
    fn on_quarantined(&self, run: &PendingRun) -> Result<()> {
        self.quarantined.borrow_mut().push(run.run_id.clone());
        self.fail()
    }
    fn on_outage(&self, active: bool) -> Result<()> {
        self.outage.borrow_mut().push(active);
        self.fail()
    }
    fn on_error(&self, e: &Error, run_id: Option<&str>) -> Result<()> {
        self.errors.borrow_mut().push((e.code, run_id.map(String::from)));
        self.fail()
    }
}

impl Recorder {
    /// A recorder whose every callback fails (after recording).
    pub fn throwing() -> Recorder {
        Recorder { throw: true, ..Default::default() }
    }
    fn fail(&self) -> Result<()> {
        if self.throw {
            return Err(Error::internal("callback threw"));
        }
        Ok(())
    }

    /// Every callback this listener answered (`on_error` included).
    pub fn calls(&self) -> usize {
        self.recovered.borrow().len()
            + self.quarantined.borrow().len()
            + self.outage.borrow().len()
            + self.errors.borrow().len()
    }
}

/// Agent options with one attempt per model call (no retry in the loop): each failure is the sweep's to handle.
pub fn one_try() -> AgentOptions {
    AgentOptions { retry: RetryPolicy { max_attempts: 1, ..RetryPolicy::default() }, ..AgentOptions::default() }
}

/// Default send options.
pub fn opts() -> SendOptions {
    SendOptions::default()
}

/// The journal store on SimKv with a short settle window, and the KV (for [`clone_run`]).
pub fn journal_env() -> (Env, SimKv) {
    let clock = ManualClock::new(1_700_000_000_000);
    let kv = SimKv::new(Rc::new(clock.clone()), SimOptions::default());
    // A short settle window: a run that finishes within a second of its first index write must be possible.
    let opts = JournalOptions { settle_ms: 50, ..JournalOptions::default() };
    let store = JournalStore::new(kv.clone(), Rc::new(clock.clone()), Rc::new(ManualSleep::new(clock.clone())), opts);
    (Env::with_store(Rc::new(store), clock), kv)
}

/// Writes copies of run `template` (ids `<prefix><i:06>`, `i` in `0..n`) straight into the KV, as if `n`
/// runs had been left in the same state: the first `whole` copies get every key of the run (lease, journal
/// entries, end markers) and all `n` get its pending-index entry with the same metadata. Creating 100,000
/// runs through the agent would take minutes in debug. Origin writes show up in location 0's listing after
/// the list lag: the caller moves the clock past it.
pub fn clone_run(kv: &SimKv, template: &str, prefix: &str, n: usize, whole: usize) {
    let origin = kv.origin();
    let run_prefix = format!("run/{template}/");
    let idx = format!("idx/pending/{template}");
    let run_keys: Vec<(String, String)> = kv
        .keys()
        .into_iter()
        .filter(|k| k.starts_with(&run_prefix))
        .map(|k| {
            let v = kv.raw(&k).unwrap();
            (k, v)
        })
        .collect();
    let idx_value = kv.raw(&idx).expect("the template is pending");
    let idx_meta = block_on(origin.list(&idx, None, 1)).unwrap().keys[0].metadata.clone();
    let from = format!("\"runId\":\"{template}\"");
    for i in 0..n {
        let id = format!("{prefix}{i:06}");
        if i < whole {
            let to = format!("\"runId\":\"{id}\"");
            for (k, v) in &run_keys {
                let key = format!("run/{id}/{}", &k[run_prefix.len()..]);
                block_on(origin.put(&key, &v.replace(&from, &to), PutOptions::default())).unwrap();
            }
        }
        let meta = PutOptions { metadata: idx_meta.clone(), ..PutOptions::default() };
        block_on(origin.put(&format!("idx/pending/{id}"), &idx_value, meta)).unwrap();
    }
}
