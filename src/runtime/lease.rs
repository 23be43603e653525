//! The lease helper: every operation that writes a run under its lease — an execution (`send`, `resume`, a
//! resolved approval), a quarantine mark, a fork's first entry, a recorded failure — goes through
//! [`Deps::with_lease`], so "acquire → load → run →
//! release" is written once, and every way out of the body is decided in one place:
//!
//! | the body ends with | the lease is |
//! | --- | --- |
//! | `Ok(_)`, or any error but the two below | released |
//! | `STEADFAST_CRASHED` (a simulated crash, tests) | kept: the process "died" holding it; it expires |
//! | `STEADFAST_SESSION_BUSY` (the lease was lost) | left alone: it is not this process's to release |
//!
//! A body that renews the lease (the driver) updates the `&mut Lease` it was given, so the release names the
//! lease as it is last held. What a released execution reports is built after the release
//! ([`super::result::Driven::report`]), so its store counters include it.

use super::deps::Deps;
use super::driver::Driver;
use super::options::SendOptions;
use super::result::Driven;
use crate::core::checkpoint::Checkpoint;
use crate::core::error::{Error, ErrorCode, Result};
use crate::core::machine::{RunMachine, Start};
use crate::store::Lease;

impl Deps {
    /// Takes `run_id`'s lease for a new owner.
    async fn acquire(&self, run_id: &str) -> Result<Lease> {
        let owner = self.new_id("own");
        self.store.acquire_lease(run_id, &owner, self.now(), &self.options.lease).await
    }

    /// Acquires `run_id`'s lease, loads the run when `load` is set (`None`: no such run, or not loaded), runs
    /// `body` under the lease, and releases it on every way out except a simulated crash and a lost lease (see
    /// the module docs). An acquisition that fails runs nothing; a load that fails releases the lease.
    pub(crate) async fn with_lease<T>(
        &self,
        run_id: &str,
        load: bool,
        body: impl AsyncFnOnce(&mut Lease, Option<Checkpoint>) -> Result<T>,
    ) -> Result<T> {
        // Every store operation of the execution is the run's ([`crate::store::meter`]).
        crate::store::meter::scope(run_id, self.leased(run_id, load, body)).await
    }

    async fn leased<T>(
        &self,
        run_id: &str,
        load: bool,
        body: impl AsyncFnOnce(&mut Lease, Option<Checkpoint>) -> Result<T>,
    ) -> Result<T> {
        let mut lease = self.acquire(run_id).await?;
        // Tells the model the execution ended on every way out (even a dropped future).
        let _ended = ExecutionEnd { deps: self, run_id, execution: lease.owner.clone() };
        let res = match if load { self.store.load(run_id).await } else { Ok(None) } {
            Ok(cp) => body(&mut lease, cp).await,
            Err(e) => Err(e),
        };
        match &res {
            Err(e) if e.code == ErrorCode::Crashed || e.code == ErrorCode::SessionBusy => {}
            _ => {
                // Deliberately ignored: a release that fails leaves the lease to expire (a later execution waits
                // at most its ttl); what the body did stands either way, and its result is what the caller needs.
                let _ = self.store.release_lease(&lease).await;
            }
        }
        res
    }

    /// Drives a started machine to its verdict under the held `lease` (renewed as it goes). A failure the
    /// store refused for good is recorded on the run first (see [`Deps::record_failure`]); a crash or a lost
    /// lease records nothing.
    pub(crate) async fn drive(
        &self,
        lease: &mut Lease,
        machine: RunMachine,
        opts: &SendOptions,
    ) -> Result<Box<Driven>> {
        let mut driver = Driver::new(self, lease.clone(), opts);
        let res = driver.drive(machine).await;
        driver.end_trace(res.as_ref().ok().map(|(m, _)| m), res.as_ref().err());
        *lease = driver.lease.clone();
        match res {
            Ok((machine, outcome)) => {
                Ok(Box::new(Driven { machine, outcome, stats: driver.stats, paused: driver.paused }))
            }
            Err(e) => {
                // A new run's first entry refused because the run exists (created meanwhile) is not this
                // execution's run to mark.
                let not_ours = e.code == ErrorCode::SessionExists;
                if e.code != ErrorCode::Crashed && e.code != ErrorCode::SessionBusy && !e.retryable && !not_ours {
                    // The store refused a write for good (`STEADFAST_STORE_FAILED`), so nothing of it
                    // was written: record the failed attempt on what is stored, so that `attempts` grows and the
                    // sweep sees a run that cannot progress instead of resuming it for ever.
                    self.record_failure(lease, &e).await;
                }
                Err(e)
            }
        }
    }

    /// Records a failed attempt (`lastError`, `attempts + 1`) on the stored run under the held `lease`. Best
    /// effort: when this commit fails too, the original error is what the caller sees either way.
    async fn record_failure(&self, lease: &Lease, err: &Error) {
        // Ignored (both `else { return }`): best effort, as above; the caller reports `err` either way.
        let Ok(Some(cp)) = self.store.load(&lease.run_id).await else { return };
        let opts = SendOptions::default();
        let cfg = self.machine_config(&lease.run_id, &opts);
        let Ok(machine) = RunMachine::start(cfg, Some(cp), Start::Failed(err.clone()), self.now()) else {
            return;
        };
        // Deliberately ignored: the outcome carries `err` again; only whether the commit was written matters
        // here, and either way the caller reports the original error.
        let _ = Driver::new(self, lease.clone(), &opts).drive(machine).await;
    }
}

/// Calls [`crate::runtime::Model::execution_ended`] when dropped: the end of an execution under a lease.
struct ExecutionEnd<'d> {
    deps: &'d Deps,
    run_id: &'d str,
    execution: String,
}

impl Drop for ExecutionEnd<'_> {
    fn drop(&mut self) {
        self.deps.model.execution_ended(self.run_id, &self.execution);
    }
}
