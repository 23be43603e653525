//! The approvals API ([`Approvals`]): list pending approvals, resolve one. What a decision means for the
//! pause is planned in core ([`crate::core::approval`]); this module reads the records, writes the decided
//! one, and resumes the run under its lease when the pause is fully decided.

use super::deps::Deps;
use super::options::SendOptions;
use super::result::{Driven, RunResult, RunStats};
use crate::core::approval::{awaits, awaits_any, decide, plan_resolution, ApprovalRecord, ApprovalStatus, Resolution};
use crate::core::checkpoint::{Checkpoint, FinishReason, RunStatus};
use crate::core::error::{Error, ErrorCode, Result};
use crate::core::machine::{Outcome, RunMachine, Start};
use serde::{Deserialize, Serialize};

/// A decision on an approval.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resolve {
    /// Approval id.
    pub id: String,
    /// Approve (run the call) or reject (the model gets the note).
    pub approved: bool,
    /// Reviewer's note.
    #[serde(default)]
    pub note: Option<String>,
}

/// The approvals API of an agent.
pub struct Approvals<'a> {
    deps: &'a Deps,
}

impl<'a> Approvals<'a> {
    pub(crate) fn new(deps: &'a Deps) -> Approvals<'a> {
        Approvals { deps }
    }
}

impl Approvals<'_> {
    /// Pending approval records, oldest first.
    pub async fn list(&self) -> Result<Vec<ApprovalRecord>> {
        let all = self.deps.store.list_approvals().await?;
        Ok(all.into_iter().filter(|a| a.status == ApprovalStatus::Pending).collect())
    }

    /// Resolves an approval (see [`Approvals::resolve_with`]).
    pub async fn resolve(&self, decision: Resolve) -> Result<RunResult> {
        self.resolve_with(decision, SendOptions::default()).await
    }

    /// Records a decision. When it was the last pending approval of the pause, the run resumes: each paused
    /// call gets its result (the tool's, if approved — it runs at most once — or a rejection with the note),
    /// the turn's remaining calls run (and may pause again), then the model is called. A stale approval (its
    /// run deleted or replaced) fails with `STEADFAST_APPROVAL_ORPHANED` and is withdrawn.
    pub async fn resolve_with(&self, decision: Resolve, opts: SendOptions) -> Result<RunResult> {
        let deps = self.deps;
        let store = &deps.store;
        let before = store.counters();
        let Some(stored) = store.get_approval(&decision.id).await? else {
            return Err(Error::new(ErrorCode::ApprovalNotFound, format!("no approval '{}'", decision.id))
                .with_approval(&decision.id));
        };
        let mut rec = decide(stored, decision.approved, decision.note.clone())?;
        let run_id = rec.run_id.clone();
        let orphaned = |cp: &Option<Checkpoint>| !awaits(cp.as_ref(), &decision.id);
        let pre = match store.load(&run_id).await? {
            Some(cp) if awaits(Some(&cp), &decision.id) => cp,
            _ => {
                store.delete_approval(&decision.id).await?;
                return Err(orphan_error(&run_id, &decision.id));
            }
        };
        rec.decided_at = Some(deps.now());
        let mut siblings = Vec::new();
        for aid in pre.approval_ids.iter().filter(|a| **a != rec.id) {
            if let Some(r) = store.get_approval(aid).await? {
                siblings.push(r);
            }
        }
        let decisions = match plan_resolution(&pre.approval_ids, &rec, &siblings) {
            Resolution::Resume { decisions } => decisions,
            Resolution::Wait { still_pending } => {
                store.put_approval(&rec).await?;
                let outcome = Outcome {
                    status: RunStatus::AwaitingApproval,
                    finish_reason: Some(FinishReason::AwaitingApproval),
                    note: None,
                    error: None,
                };
                let mut res = RunResult::of(&pre, &outcome, RunStats::default());
                res.approval_ids = still_pending;
                res.approval_id = res.approval_ids.first().cloned();
                return Ok(res);
            }
        };
        // The pause the run was driven past (set once the decision is written and the run is about to resume).
        let mut driven_past: Option<Vec<String>> = None;
        let leased = deps
            .with_lease(&run_id, true, async |lease, cp| {
                if orphaned(&cp) {
                    return Ok(Leased::Orphaned);
                }
                // Not orphaned: `cp` is the run (the empty default is never used).
                let batch = cp.as_ref().map(|c| c.approval_ids.clone()).unwrap_or_default();
                // A refused start writes nothing decided: the approval stays pending for the right agent.
                let machine = RunMachine::start(
                    deps.machine_config(&run_id, &opts),
                    cp,
                    Start::Approvals(decisions),
                    deps.now(),
                )?;
                // The decision is recorded only once the lease is confirmed (`RunStore::confirm_lease`): a resolver
                // that lost the lease to a racing acquirer leaves the approval as it was, for the winner's view.
                store.confirm_lease(lease).await?;
                store.put_approval(&rec).await?;
                driven_past = Some(batch);
                deps.drive(lease, machine, &opts).await.map(Leased::Driven)
            })
            .await;
        let res = match leased {
            Ok(Leased::Orphaned) => {
                store.delete_approval(&decision.id).await?;
                return Err(orphan_error(&run_id, &decision.id));
            }
            Ok(Leased::Driven(driven)) => driven.report(store.counters().since(&before)),
            Err(e) => Err(e),
        };
        let Some(batch) = driven_past else { return res };
        // The pause's records are withdrawn once the run has moved past it; after a crash, a lost lease or a
        // failure before the decisions were committed, the run still waits on them and they stay.
        let consumed = match &res {
            Ok(_) => true,
            Err(e) if e.code == ErrorCode::Crashed => false,
            Err(_) => match store.load(&run_id).await {
                Ok(cp) => !awaits_any(cp.as_ref(), &batch),
                // Ignored: a run that cannot be read may still wait on them, so they stay.
                Err(_) => false,
            },
        };
        if consumed {
            for aid in batch {
                // Deliberately ignored: a record left behind is decided (so no longer listed as pending) and its
                // run no longer waits on it; a later decision on it is refused.
                let _ = store.delete_approval(&aid).await;
            }
        }
        res
    }
}

/// What the leased part of a resolution found.
enum Leased {
    /// The run no longer waits on this approval (deleted, replaced, or moved on meanwhile).
    Orphaned,
    /// The run was resumed and driven to its verdict.
    Driven(Box<Driven>),
}

fn orphan_error(run_id: &str, approval_id: &str) -> Error {
    Error::new(
        ErrorCode::ApprovalOrphaned,
        format!("approval '{approval_id}' belongs to run '{run_id}', which was deleted or replaced; it was withdrawn"),
    )
    .with_run(run_id)
    .with_approval(approval_id)
}
