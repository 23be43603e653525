//! Hand-moved time for tests (cargo feature `testing`).

use super::{Clock, Sleep};
use async_trait::async_trait;
use std::cell::Cell;
use std::rc::Rc;

/// A clock tests move by hand. Clones share the time.
#[derive(Clone, Debug, Default)]
pub struct ManualClock(Rc<Cell<u64>>);

impl ManualClock {
    /// A clock at `ms`.
    pub fn new(ms: u64) -> ManualClock {
        ManualClock(Rc::new(Cell::new(ms)))
    }

    /// Moves time forward.
    pub fn advance(&self, ms: u64) {
        self.0.set(self.0.get().saturating_add(ms));
    }

    /// Sets the time.
    pub fn set(&self, ms: u64) {
        self.0.set(ms);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.0.get()
    }
}

/// A [`Sleep`] in simulated time: it yields once to the executor (so other tasks run, as they would while a
/// real timer waits), then advances its [`ManualClock`] by the delay and completes. A sleep dropped before it
/// completes (it lost a race) does not move the clock. Records the delays slept.
#[derive(Clone, Debug, Default)]
pub struct ManualSleep {
    clock: ManualClock,
    slept: Rc<std::cell::RefCell<Vec<u64>>>,
}

impl ManualSleep {
    /// A sleep that advances `clock`.
    pub fn new(clock: ManualClock) -> ManualSleep {
        ManualSleep { clock, slept: Default::default() }
    }

    /// Every delay slept so far.
    pub fn slept(&self) -> Vec<u64> {
        self.slept.borrow().clone()
    }
}

#[async_trait(?Send)]
impl Sleep for ManualSleep {
    async fn sleep(&self, ms: u64) {
        super::yield_now().await;
        self.slept.borrow_mut().push(ms);
        self.clock.advance(ms);
    }
}
