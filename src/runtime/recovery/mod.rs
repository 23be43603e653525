//! Self-healing operations of an [`Agent`](super::Agent), one concern per module:
//! * `sweep` — the recovery sweep (`sweep` for one cron tick, `recover` for a loop): listing, backoff,
//!   the outage breaker and its probe, resumes;
//! * `quarantine` — marking a run at the attempt cap;
//! * `diagnosis` — diagnosis forks (`<id>.heal`) of runs at the cap;
//! * `fork` — `fork` and `compare`;
//! * `delivery` — `run_once` for delivered jobs;
//! * `fanout` — the sweep's fan-out through a recovery queue and its consumer (`consume_recovery`);
//! * `alarm` — `wake`: one run's own recovery step (strict mode: its object's alarm).

mod alarm;
mod delivery;
mod diagnosis;
mod fanout;
mod fork;
mod quarantine;
mod sweep;

pub use delivery::{delivery_run_id, Delivery};
pub use diagnosis::diagnosis_note;
#[cfg(feature = "testing")]
pub use fanout::SimQueue;
pub use fanout::{Consumed, RecoveryMessage, RecoveryQueue, MAX_QUEUE_BATCH};
pub use fork::{ForkOptions, ForkResult};
pub use sweep::{NextAttempt, NoListener, SweepListener, SweepReport};
