//! The approvals API ([`Approvals`]): list pending approvals, resolve one. What a decision means for the
//! pause is planned in core ([`crate::core::approval`]); this module reads the records, writes the decided
//! one, and resumes the run under its lease when the pause is fully decided.

use super::deps::Deps;
use super::options::SendOptions;
use super::result::{Driven, RunResult, RunStats};
use crate::core::approval::{
    awaits, awaits_any, decide, plan_resolution, resolve_wait, ApprovalRecord, ApprovalStatus, Resolution, Resolved,
};
use crate::core::checkpoint::{Checkpoint, FinishReason, RunStatus};
use crate::core::error::{Error, ErrorCode, Result};
use crate::core::machine::{Outcome, RunMachine, Start};
use crate::core::transcript::Message;
use crate::core::wait::{answered, WaitKind};
use crate::store::DueWait;
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
    /// A question's answer (it becomes the call's result); refused for an approval.
    #[serde(default)]
    pub answer: Option<serde_json::Value>,
}

impl Resolve {
    /// A decision from what a caller gave: `approved` may be left out beside a question's `answer` (an answer
    /// approves); with neither, `STEADFAST_INVALID_INPUT`.
    pub fn new(
        id: String,
        approved: Option<bool>,
        note: Option<String>,
        answer: Option<serde_json::Value>,
    ) -> Result<Resolve> {
        let approved = match (approved, &answer) {
            (Some(a), _) => a,
            (None, Some(_)) => true,
            (None, None) => {
                return Err(Error::invalid_input("approved must be true or false (or give a question's `answer`)"))
            }
        };
        Ok(Resolve { id, approved, note, answer })
    }
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
    ///
    /// A question ([`crate::core::wait`]) is answered the same way: `answer` (one of its choices, when it
    /// offers any) becomes the call's result; `approved: false` declines it (an error result with the note).
    /// Events and timers are not decided here (`STEADFAST_INVALID_INPUT`): they are delivered with their
    /// token ([`crate::runtime::Events::deliver`]) or come due.
    pub async fn resolve_with(&self, decision: Resolve, opts: SendOptions) -> Result<RunResult> {
        let store = &self.deps.store;
        let Some(stored) = store.get_approval(&decision.id).await? else {
            return Err(Error::new(ErrorCode::ApprovalNotFound, format!("no approval '{}'", decision.id))
                .with_approval(&decision.id));
        };
        let (rec, again) = match stored.kind {
            WaitKind::Approval => {
                if decision.answer.is_some() {
                    return Err(Error::invalid_input(format!("'{}' is an approval: no answer", decision.id))
                        .with_approval(&decision.id));
                }
                (decide(stored, decision.approved, decision.note.clone())?, false)
            }
            WaitKind::Question => {
                if decision.approved && decision.answer.is_none() {
                    return Err(Error::invalid_input(format!("'{}' is a question: it needs an answer", decision.id))
                        .with_approval(&decision.id));
                }
                let answer = if decision.approved { decision.answer.as_ref() } else { None };
                let outcome = answered(&stored.choices, answer, decision.note.as_deref())
                    .map_err(|e| e.with_approval(&decision.id).with_run(&stored.run_id))?;
                let mut resolved = match resolve_wait(stored, outcome)? {
                    Resolved::Fresh(r) => (r, false),
                    Resolved::Again(r) => (r, true),
                };
                resolved.0.note = decision.note.clone();
                resolved
            }
            WaitKind::Event | WaitKind::Timer => {
                return Err(Error::invalid_input(format!(
                    "'{}' is a {}: it is not decided",
                    decision.id,
                    stored.kind.as_str()
                ))
                .with_approval(&decision.id));
            }
        };
        let run_id = rec.run_id.clone();
        if self.deps.orphaned(&run_id).await? {
            // Nothing recorded: the record stays pending (a lead not yet visible here is found a minute later), or
            // went with the orphan when its lead's absence was proof.
            return Err(Deps::lead_gone(&run_id).with_approval(&decision.id));
        }
        match self.settle(rec, opts).await? {
            Settled::Run(res) | Settled::Waiting(res) => self.deps.verdict(*res),
            Settled::Moved(cp) if again => Ok(RunResult::stored(&cp)),
            Settled::Moved(_) | Settled::Orphaned => Err(orphan_error(&run_id, &decision.id)),
        }
    }

    /// Writes a decided or resolved record of a pause and, when it was the pause's last, resumes the run under
    /// its lease (see [`Approvals::resolve_with`]). The record is written only once the run is known to wait
    /// on it and, for the resume, once the lease is confirmed. [`Settled::Moved`]: the run no longer waits on
    /// it (moved on after an earlier resolution: the caller decides whether that is a repeat); the record is
    /// left as it is. [`Settled::Orphaned`]: the run is gone or replaced; the record was withdrawn.
    /// Then, as after any execution, a finished child run's result goes to its lead ([`Deps::after_execution`]),
    /// also for a repeat (the run moved past the record already: a delivery lost to a crash is made now).
    pub(crate) async fn settle(&self, rec: ApprovalRecord, opts: SendOptions) -> Result<Settled> {
        let run_id = rec.run_id.clone();
        let settled = self.settle_here(rec, opts.clone()).await?;
        if matches!(settled, Settled::Run(_) | Settled::Moved(_)) {
            self.deps.after_execution(&run_id, &opts).await?;
        }
        Ok(settled)
    }

    /// [`Approvals::settle`] without the deliveries that follow it.
    async fn settle_here(&self, rec: ApprovalRecord, opts: SendOptions) -> Result<Settled> {
        let deps = self.deps.for_run_or_err(&rec.run_id)?;
        let store = &deps.store;
        let before = store.counters();
        let id = rec.id.clone();
        let run_id = rec.run_id.clone();
        let mut rec = rec;
        let orphaned = |cp: &Option<Checkpoint>| !awaits(cp.as_ref(), &id);
        let pre = match store.load(&run_id).await? {
            Some(cp) if awaits(Some(&cp), &id) => cp,
            Some(cp) if cp.run_id == run_id && rec.outcome.is_some() && moved_past(&cp, &rec) => {
                return Ok(Settled::Moved(Box::new(cp)));
            }
            _ => {
                store.delete_approval(&id).await?;
                self.drop_due(&rec).await;
                return Ok(Settled::Orphaned);
            }
        };
        // A decision taken up again (a retry, the sweep) keeps its time: its due entry is the same key.
        rec.decided_at = rec.decided_at.or(Some(deps.now()));
        let mut siblings = Vec::new();
        for aid in pre.approval_ids.iter().filter(|a| **a != rec.id) {
            if let Some(r) = store.get_approval(aid).await? {
                siblings.push(r);
            }
        }
        let decisions = match plan_resolution(&pre.approval_ids, &rec, &siblings) {
            Resolution::Resume { decisions } => decisions,
            Resolution::Wait { still_pending } => {
                // A due entry says "a decision waits to be taken up": should the last decider's resume be lost
                // (or two deciders each see the other pending), the sweep takes it up from the due index.
                store.put_due(&decided_due(&rec)).await?;
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
                return Ok(Settled::Waiting(Box::new(res)));
            }
        };
        // The pause the run was driven past (set once the decision is written and the run is about to resume).
        let mut driven_past: Option<Vec<String>> = None;
        let leased = deps
            .with_lease(&run_id, true, async |lease, cp| {
                if orphaned(&cp) {
                    return Ok(Leased::Orphaned);
                }
                // A child whose lead is not found (a delete cut short; on KV possibly a lead not visible here
                // yet) is refused: nothing of it runs, nothing is recorded, its due entry stays.
                if is_child(&run_id) && self.deps.gone_with_lead(&run_id).await? {
                    return Err(Deps::lead_gone(&run_id));
                }
                // Not orphaned: `cp` is the run (the empty default is never used).
                let batch = cp.as_ref().map(|c| c.approval_ids.clone()).unwrap_or_default();
                // A refused start writes nothing decided: the approval stays pending for the right agent.
                let machine = RunMachine::start(
                    deps.traced_config(&run_id, &opts, lease),
                    cp,
                    Start::Approvals(decisions),
                    deps.now(),
                )?;
                // The decision is recorded only once the lease is confirmed (`RunStore::confirm_lease`): a resolver
                // that lost the lease to a racing acquirer leaves the approval as it was, for the winner's view.
                store.confirm_lease(lease).await?;
                store.put_due(&decided_due(&rec)).await?;
                store.put_approval(&rec).await?;
                driven_past = Some(batch);
                deps.drive(lease, machine, &opts).await.map(Leased::Driven)
            })
            .await;
        let res = match leased {
            Ok(Leased::Orphaned) => {
                // Moved on meanwhile (another resolver, a delete): a repeat is the caller's to tell.
                return match store.load(&run_id).await? {
                    Some(cp) if rec.outcome.is_some() && moved_past(&cp, &rec) => Ok(Settled::Moved(Box::new(cp))),
                    _ => {
                        store.delete_approval(&id).await?;
                        self.drop_due(&rec).await;
                        Ok(Settled::Orphaned)
                    }
                };
            }
            Ok(Leased::Driven(driven)) => driven.report(store.counters().since(&before)),
            Err(e) => Err(e),
        };
        let Some(batch) = driven_past else { return res.map(|r| Settled::Run(Box::new(r))) };
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
            self.drop_due(&rec).await;
            for aid in batch {
                if aid == rec.id {
                    // Ignored: see below.
                    let _ = store.delete_approval(&aid).await;
                    continue;
                }
                if let Ok(Some(r)) = store.get_approval(&aid).await {
                    self.drop_due(&r).await;
                }
                // Deliberately ignored: a record left behind is decided (so no longer listed as pending) and its
                // run no longer waits on it; a later decision on it is refused.
                let _ = store.delete_approval(&aid).await;
            }
        }
        res.map(|r| Settled::Run(Box::new(r)))
    }

    /// Removes a record's due-index entries: its wait's time, and its decision's.
    async fn drop_due(&self, rec: &ApprovalRecord) {
        for at in [rec.due_at, rec.decided_at].into_iter().flatten() {
            let due = DueWait { at, wait_id: rec.id.clone(), run_id: rec.run_id.clone() };
            // Ignored: an entry left behind is dropped when the sweep meets it (its record is gone or spent).
            let _ = self.deps.store.delete_due(&due).await;
        }
    }
}

/// The due entry of a recorded decision (see [`Approvals::settle`]): due at once.
fn decided_due(rec: &ApprovalRecord) -> DueWait {
    DueWait { at: rec.decided_at.unwrap_or(0), wait_id: rec.id.clone(), run_id: rec.run_id.clone() }
}

/// Whether `cp` (the run the record belongs to) went past the pause that waited on `rec`: its call has a
/// result in the transcript.
fn moved_past(cp: &Checkpoint, rec: &ApprovalRecord) -> bool {
    cp.messages.iter().any(|m| matches!(m, Message::Tool(r) if r.tool_call_id == rec.tool_call.id))
        || cp.held_results.iter().any(|r| r.tool_call_id == rec.tool_call.id)
}

/// What [`Approvals::settle`] did.
pub(crate) enum Settled {
    /// The record was written and the run resumed: it ran to its next pause or its end.
    Run(Box<RunResult>),
    /// The record was written; the run still waits on other records of its pause (their ids in the result).
    Waiting(Box<RunResult>),
    /// The run went past the pause already (the record's call has its result).
    Moved(Box<Checkpoint>),
    /// The run is gone or replaced: the record was withdrawn.
    Orphaned,
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

/// Whether `run_id` is a sub-agent's child run.
fn is_child(run_id: &str) -> bool {
    crate::core::ids::subagent_parent(run_id).is_some()
}
