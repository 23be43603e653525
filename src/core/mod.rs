//! The pure core: no I/O, no clock, no platform crate. Types, the run state machine, fingerprints,
//! classification, the one backoff, the retry policy and tool-argument validation.

pub mod approval;
pub(crate) mod backoff;
pub mod breaker;
pub mod budget;
pub mod checkpoint;
pub mod classify;
pub mod cost;
pub mod cron;
pub mod error;
pub mod events;
pub mod fingerprint;
pub mod fork;
pub mod gate;
pub mod idempotency;
pub mod ids;
pub(crate) mod limits;
pub mod machine;
pub mod replay;
pub mod retry;
pub mod schedule;
pub(crate) mod schema;
pub mod steer;
pub mod sweep;
pub mod trace;
pub mod trajectory;
pub mod transcript;
pub mod wait;
pub(crate) mod wire;
