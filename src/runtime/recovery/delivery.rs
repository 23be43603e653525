//! Delivered jobs (M18): [`Agent::run_once`] runs a job delivered at least once (a queue message, a webhook)
//! exactly once per delivery id.

use crate::core::checkpoint::RunStatus;
use crate::core::error::{Error, Result};
use crate::core::ids::{validate_new_run_id, validate_run_id};
use crate::runtime::{Agent, Input, RunResult, SendOptions};
use serde::{Deserialize, Serialize};

/// What `run_once` did with a delivery: one JSON shape for both shells (the HTTP API's
/// `POST /deliveries/{id}` and the npm package's `runOnce`), `{"outcome", "runId", …}` with the run id derived
/// from the delivery id in every outcome.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(tag = "outcome", rename_all = "kebab-case", rename_all_fields = "camelCase")]
pub enum Delivery {
    /// The run was already finished: acknowledge the delivery, nothing ran.
    Acknowledged {
        /// Run id.
        run_id: String,
        /// The stored result.
        result: Box<RunResult>,
    },
    /// The run waits on a person: leave the delivery, nothing ran.
    AwaitingApproval {
        /// Run id.
        run_id: String,
        /// The pending approval.
        approval_id: Option<String>,
    },
    /// The run was started or resumed.
    Ran {
        /// Run id.
        run_id: String,
        /// Its result.
        result: Box<RunResult>,
    },
}

impl Agent {
    /// Runs a delivered job once (M18): the run id is derived from the delivery id; a finished run is
    /// acknowledged, a run waiting on a person is left, an unfinished run is resumed, and only a new delivery
    /// is sent. A redelivery of a finished job makes no model call.
    pub async fn run_once(&self, delivery_id: &str, input: impl Into<Input>, opts: SendOptions) -> Result<Delivery> {
        if opts.queue || opts.interrupt {
            return Err(Error::invalid_input("a delivery runs its job once: it takes no queue or interrupt"));
        }
        let mut run_id = delivery_run_id(delivery_id);
        let direct = format!("dlv-{delivery_id}");
        if run_id != direct && validate_run_id(&direct).is_ok() {
            // `dlv-<id>.heal` is reserved for diagnosis forks; a run an earlier version created there for this
            // delivery (it has no diagnosis marker) keeps serving its redeliveries.
            if self.load(&direct).await?.is_some_and(|cp| cp.heal_of.is_none()) {
                run_id = direct;
            }
        }
        match self.load(&run_id).await? {
            Some(cp) if cp.status == RunStatus::Finished => {
                Ok(Delivery::Acknowledged { run_id, result: Box::new(RunResult::stored(&cp)) })
            }
            Some(cp) if cp.status == RunStatus::AwaitingApproval => {
                Ok(Delivery::AwaitingApproval { run_id, approval_id: cp.approval_ids.first().cloned() })
            }
            Some(_) => match self.resume_run(&run_id, opts).await? {
                Some(result) => Ok(Delivery::Ran { run_id, result: Box::new(result) }),
                None => {
                    let cp = self.load(&run_id).await?.ok_or_else(|| Error::internal("delivery run vanished"))?;
                    Ok(Delivery::Acknowledged { run_id, result: Box::new(RunResult::stored(&cp)) })
                }
            },
            None => {
                let result = self.send(&run_id, input, opts).await?;
                Ok(Delivery::Ran { run_id, result: Box::new(result) })
            }
        }
    }
}

/// The run id of a delivery: `dlv-<id>` when that is a valid id for a new run, else `dlv-` and a SHA-256 of
/// the id (also when `dlv-<id>` would end with the reserved `.heal`).
pub fn delivery_run_id(delivery_id: &str) -> String {
    let direct = format!("dlv-{delivery_id}");
    if validate_new_run_id(&direct).is_ok() {
        return direct;
    }
    format!("dlv-{}", &crate::core::fingerprint::sha256_hex(delivery_id.as_bytes())[..32])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delivery_ids_map_to_valid_run_ids() {
        assert_eq!(delivery_run_id("evt_123"), "dlv-evt_123");
        let hashed = delivery_run_id("msg/with spaces?");
        assert!(hashed.starts_with("dlv-") && validate_run_id(&hashed).is_ok());
        assert_eq!(hashed, delivery_run_id("msg/with spaces?"));
        let reserved = delivery_run_id("job.heal");
        assert!(reserved.starts_with("dlv-") && !reserved.ends_with(".heal"), "{reserved}");
        assert!(validate_new_run_id(&reserved).is_ok());
    }
}
