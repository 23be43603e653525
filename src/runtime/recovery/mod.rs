//! Self-healing operations of an [`Agent`](super::Agent), one concern per module:
//! * [`sweep`] — the recovery sweep (`sweep` for one cron tick, `recover` for a loop): listing, backoff,
//!   the outage breaker and its probe, resumes;
//! * [`quarantine`] — marking a run at the attempt cap;
//! * [`diagnosis`] — diagnosis forks (`<id>.heal`) of runs at the cap;
//! * [`fork`] — `fork` and `compare`;
//! * [`delivery`] — `run_once` for delivered jobs.

pub mod delivery;
pub mod diagnosis;
pub mod fork;
pub mod quarantine;
pub mod sweep;

pub use delivery::{delivery_run_id, Delivery};
pub use diagnosis::diagnosis_note;
pub use fork::{ForkOptions, ForkResult};
pub use sweep::{NoListener, SweepListener, SweepReport};

use super::result::{RunResult, RunStats};
use crate::core::checkpoint::Checkpoint;
use crate::core::machine::Outcome;

/// A result built from a stored checkpoint (nothing ran).
pub fn stored_result(cp: &Checkpoint) -> RunResult {
    let outcome = Outcome { status: cp.status, finish_reason: cp.finish_reason, note: None, error: None };
    RunResult::of(cp, &outcome, RunStats::default())
}
