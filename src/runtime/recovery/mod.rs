//! Self-healing operations of an [`Agent`](super::Agent), one concern per module:
//! * `sweep` — the recovery sweep (`sweep` for one cron tick, `recover` for a loop): listing, backoff,
//!   the outage breaker and its probe, resumes;
//! * `quarantine` — marking a run at the attempt cap;
//! * `diagnosis` — diagnosis forks (`<id>.heal`) of runs at the cap;
//! * `fork` — `fork` and `compare`;
//! * `delivery` — `run_once` for delivered jobs;
//! * `fanout` — the recovery queue the sweep fans out to: its message, its trait, a queue for tests;
//! * `gate` — the recovery gate a run's own recovery step takes a slot of before it resumes the run;
//! * `alarm` — `wake`: one run's own recovery step (strict mode: its object's alarm; a recovery queue's
//!   consumer: `consume_recovery`).

mod alarm;
mod delivery;
mod diagnosis;
mod fanout;
mod fork;
mod gate;
mod quarantine;
mod sweep;

pub use alarm::Consumed;
pub use delivery::{delivery_run_id, Delivery};
pub use diagnosis::diagnosis_note;
#[cfg(feature = "testing")]
pub use fanout::SimQueue;
pub use fanout::{RecoveryMessage, RecoveryQueue, MAX_QUEUE_BATCH};
pub use fork::{ForkOptions, ForkResult};
pub use gate::{LocalGate, RecoveryGate};
pub use sweep::{candidate as sweep_candidate, NextAttempt, NoListener, SweepListener, SweepReport};
