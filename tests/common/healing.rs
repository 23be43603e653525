//! Fixtures shared by the self-healing tests (`sweep.rs`, `diagnosis_forks.rs`, `tool_guards.rs`, `forks.rs`):
//! a sweep listener that records every callback, one-attempt agent options, default send options.

use std::cell::RefCell;
use steadfast::core::retry::RetryPolicy;
use steadfast::runtime::{AgentOptions, RunResult, SendOptions, SweepListener};
use steadfast::store::PendingRun;
use steadfast::{Error, ErrorCode, Result};

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
