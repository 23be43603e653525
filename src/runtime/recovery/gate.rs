//! The recovery gate as the runtime sees it ([`RecoveryGate`]): where a run's own recovery step
//! ([`Agent::wake`](crate::runtime::Agent::wake): strict mode's alarm, a recovery queue's consumer) takes a slot
//! before it resumes the run, so at most a ceiling of resumes reach the provider at once across isolates (the
//! decisions are [`crate::core::gate`]'s). The Worker's gate is an object per provider; [`LocalGate`] keeps one
//! in this process's memory.

use crate::core::error::Result;
use crate::core::gate::{GateState, Grant};
use crate::time::Clock;
use async_trait::async_trait;
use std::cell::RefCell;
use std::rc::Rc;

/// A coordinator of recovery resumes on one provider (see [`crate::core::gate`]).
#[async_trait(?Send)]
pub trait RecoveryGate {
    /// A slot for `run_id` while fewer than `cap` are held, or when to ask again. An error (the gate could not be
    /// reached) lets the resume go ahead: the gate protects the provider and never stops recovery.
    async fn acquire(&self, run_id: &str, cap: u32) -> Result<Grant>;
    /// Gives `run_id`'s slot back; `retry_after_ms`: the provider answered 429 (holds every slot back that long).
    /// An error is ignored: the slot is taken back after [`crate::core::gate::SLOT_MS`].
    async fn release(&self, run_id: &str, retry_after_ms: Option<u64>) -> Result<()>;
}

/// A gate in this process's memory: one isolate's (or a simulator's) resumes share it.
pub struct LocalGate {
    state: RefCell<GateState>,
    clock: Rc<dyn Clock>,
}

impl LocalGate {
    /// An empty gate on `clock`.
    pub fn new(clock: Rc<dyn Clock>) -> LocalGate {
        LocalGate { state: RefCell::default(), clock }
    }

    /// The slots held now.
    pub fn held(&self) -> usize {
        self.state.borrow().held.len()
    }
}

#[async_trait(?Send)]
impl RecoveryGate for LocalGate {
    async fn acquire(&self, run_id: &str, cap: u32) -> Result<Grant> {
        Ok(self.state.borrow_mut().acquire(run_id, cap, self.clock.now_ms()))
    }
    async fn release(&self, run_id: &str, retry_after_ms: Option<u64>) -> Result<()> {
        self.state.borrow_mut().release(run_id, self.clock.now_ms(), retry_after_ms);
        Ok(())
    }
}
