//! Quarantine: a run at the attempt cap is marked under its lease and reported once, and the sweep leaves it
//! alone from then on.

use super::sweep::{SweepListener, SweepReport};
use crate::core::checkpoint::RunStatus;
use crate::core::error::{ErrorCode, Result};
use crate::core::machine::{RunMachine, Start};
use crate::core::sweep::SweepOptions;
use crate::runtime::{Agent, SendOptions};
use crate::store::PendingRun;

impl Agent {
    pub(super) async fn quarantine(
        &self,
        run: &PendingRun,
        opts: &SweepOptions,
        report: &mut SweepReport,
        listener: &dyn SweepListener,
    ) {
        match self.mark_quarantined(&run.run_id, opts.max_attempts).await {
            Ok(true) => {
                self.deps.for_run(&run.run_id).unwrap_or(&self.deps).count(crate::runtime::Counter::Quarantines, 1);
                report.quarantined.push(run.run_id.clone());
                let marked = PendingRun { quarantined: true, ..run.clone() };
                report.heard(listener, listener.on_quarantined(&marked), Some(&run.run_id));
            }
            Ok(false) => {}
            Err(e) if e.code == ErrorCode::SessionBusy => report.busy += 1,
            Err(e) => {
                report.errors += 1;
                report.error(listener, &e, Some(&run.run_id));
            }
        }
    }

    /// Quarantines a run that is not in the page at hand (the original of a failed diagnosis fork).
    pub(super) async fn quarantine_by_id(
        &self,
        run_id: &str,
        opts: &SweepOptions,
        report: &mut SweepReport,
        listener: &dyn SweepListener,
    ) {
        match self.store().load(run_id).await {
            Ok(Some(cp)) if cp.status != RunStatus::Finished => {
                self.quarantine(&PendingRun::of(&cp), opts, report, listener).await
            }
            Ok(_) => {}
            Err(e) => {
                report.errors += 1;
                report.error(listener, &e, Some(run_id));
            }
        }
    }

    /// Marks a run quarantined under its lease; `false` when someone else did (or it progressed) already.
    async fn mark_quarantined(&self, run_id: &str, max_attempts: u32) -> Result<bool> {
        let deps = self.deps.for_run_or_err(run_id)?;
        let before = deps.store.counters();
        let opts = SendOptions::default();
        let driven = deps
            .with_lease(run_id, true, async |lease, cp| {
                let cp = match cp {
                    Some(cp)
                        if !cp.quarantined && cp.attempts >= max_attempts && cp.status == RunStatus::InProgress =>
                    {
                        cp
                    }
                    _ => return Ok(None),
                };
                let machine =
                    RunMachine::start(deps.machine_config(run_id, &opts), Some(cp), Start::Quarantine, deps.now())?;
                deps.drive(lease, machine, &opts).await.map(Some)
            })
            .await?;
        match driven {
            Some(d) => d.report(deps.store.counters().since(&before)).map(|_| true),
            None => Ok(false),
        }
    }
}
