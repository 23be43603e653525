//! Tools' waits from the outside ([`crate::core::wait`]): an event delivered with its token ([`Events`]), and
//! waits that come due — an event's deadline, a timer — resolved by the recovery sweep from the due index
//! ([`Agent::wake_due`]) or by a run's own alarm in strict mode ([`Agent::wake`]). Each resolution goes through
//! the one path approvals take ([`Approvals::settle`]): the record is written once the run is known to wait on
//! it, the run resumes under its lease, and the pause's records are withdrawn once it moved past them.

use super::approvals::{Approvals, Settled};
use super::deps::Deps;
use super::options::SendOptions;
use super::result::RunResult;
use super::Agent;
use crate::core::approval::{resolve_wait, ApprovalRecord, ApprovalStatus, Resolved};
use crate::core::error::{Error, ErrorCode, Result};
use crate::core::steer::is_message_id;
use crate::core::wait::{came_due, delivered, token_matches, wait_id, WaitKind};
use serde::Serialize;
use serde_json::Value;

/// What a delivery did.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase")]
pub struct EventDelivery {
    /// The wait's id.
    pub wait_id: String,
    /// Whether the same payload had been delivered already (nothing changed).
    pub duplicate: bool,
    /// The run after the delivery (resumed to its next pause or its end), or as stored for a duplicate.
    pub run: RunResult,
}

/// The events API of an agent: deliveries to event waits.
pub struct Events<'a> {
    deps: &'a Deps,
}

impl<'a> Events<'a> {
    pub(crate) fn new(deps: &'a Deps) -> Events<'a> {
        Events { deps }
    }
}

/// The one answer for a token that opens nothing: malformed, guessed, spent, or its run deleted.
fn not_found() -> Error {
    Error::new(ErrorCode::WaitNotFound, "no event wait has this token (it is unknown, was spent, or its run is gone)")
}

impl Events<'_> {
    /// Delivers `payload` to the event wait of `token` (see [`Events::deliver_with`]).
    pub async fn deliver(&self, token: &str, payload: Value) -> Result<EventDelivery> {
        self.deliver_with(token, payload, SendOptions::default()).await
    }

    /// Delivers `payload` (at most [`crate::core::wait::MAX_PAYLOAD_BYTES`] of JSON,
    /// [`crate::core::limits`]' depth) to the event wait whose token is `token`: it becomes the call's result
    /// and the run resumes (when it was the last wait of its pause), here, whatever process paused it. The same
    /// payload again is acknowledged (`duplicate`) and changes nothing; another payload after the first, or
    /// after the deadline resolved the wait, is refused with `STEADFAST_WAIT_ALREADY_RESOLVED`. A token that
    /// opens no wait — malformed, guessed, spent once the run moved on, or its run deleted — gets
    /// `STEADFAST_WAIT_NOT_FOUND`, the same answer in every case.
    pub async fn deliver_with(&self, token: &str, payload: Value, opts: SendOptions) -> Result<EventDelivery> {
        self.deliver_outcome(token, delivered(&payload)?, opts).await
    }

    /// [`Events::deliver_with`] of a checked resolution (a sub-agent's child result carries its usage).
    pub(crate) async fn deliver_outcome(
        &self,
        token: &str,
        outcome: crate::core::wait::WaitOutcome,
        opts: SendOptions,
    ) -> Result<EventDelivery> {
        let Some(id) = wait_id(token) else { return Err(not_found()) };
        let stored = match self.deps.store.get_approval(&id).await? {
            Some(r)
                if r.kind == WaitKind::Event && r.token_hash.as_deref().is_some_and(|h| token_matches(h, token)) =>
            {
                r
            }
            _ => return Err(not_found()),
        };
        let (rec, again) = match resolve_wait(stored, outcome)? {
            Resolved::Fresh(r) => (r, false),
            Resolved::Again(r) => (r, true),
        };
        match Approvals::new(self.deps).settle(rec, opts).await? {
            Settled::Run(run) | Settled::Waiting(run) => Ok(EventDelivery { wait_id: id, duplicate: again, run: *run }),
            Settled::Moved(cp) if again => {
                Ok(EventDelivery { wait_id: id, duplicate: true, run: RunResult::stored(&cp) })
            }
            Settled::Moved(_) | Settled::Orphaned => Err(not_found()),
        }
    }
}

/// What [`Agent::wake_due`] did (the sweep's report counts it as `woken`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WakeReport {
    /// Due entries listed.
    pub listed: usize,
    /// Waits resolved by their deadline or time (their runs resumed, or still waiting on the rest of their
    /// pause).
    pub resolved: Vec<String>,
    /// Entries dropped: their wait was resolved otherwise, withdrawn, or never recorded.
    pub dropped: usize,
    /// Runs turned away by a live lease (tried again next time).
    pub busy: usize,
    /// Failures, each with its run.
    pub failed: Vec<(String, Error)>,
}

impl Agent {
    /// The events API.
    pub fn events(&self) -> Events<'_> {
        Events::new(&self.deps)
    }

    /// Takes up the due index (one listing, whatever the number of waiting runs), earliest first, up to
    /// `limit` entries due by now: a wait whose time came is resolved (an event's deadline: a `timeout` result;
    /// a timer: its wake-up) and its run resumed; a decision whose resume was lost (its resolver died, or two
    /// deciders each saw the other pending) is taken up again, as a reviewer's retry would. An entry whose
    /// record is gone or spent is dropped. A run whose lease is held is left for the next time (its entry
    /// stays).
    pub async fn wake_due(&self, limit: usize, opts: &SendOptions) -> Result<WakeReport> {
        self.wake_due_while(limit, opts, &|| true).await
    }

    /// [`Agent::wake_due`], taking up the next entry only while `go_on()` says so (the sweep's operation
    /// budget).
    pub async fn wake_due_while(
        &self,
        limit: usize,
        opts: &SendOptions,
        go_on: &dyn Fn() -> bool,
    ) -> Result<WakeReport> {
        let now = self.deps.now();
        let due = self.store().list_due(now, limit).await?;
        let mut report = WakeReport { listed: due.len(), ..WakeReport::default() };
        for entry in due {
            if opts.abort.as_ref().is_some_and(|a| a.is_aborted()) || !go_on() {
                break;
            }
            if is_message_id(&entry.wait_id) {
                match self.drain_due(&entry, opts).await {
                    Ok(true) => {
                        // Ignored: an entry that stays is met again next time.
                        let _ = self.store().delete_due(&entry).await;
                        report.dropped += 1;
                    }
                    Ok(false) => report.busy += 1,
                    Err(e) => {
                        if !e.retryable() {
                            // Refused for good (the agent drifted from the run, a tool it needs is gone): trying
                            // every tick changes nothing. The message stays queued; the run's next execution
                            // (a send, a resume) applies it.
                            // Ignored: an entry that stays is met again next time.
                            let _ = self.store().delete_due(&entry).await;
                        }
                        report.failed.push((entry.run_id.clone(), e));
                    }
                }
                continue;
            }
            if entry.wait_id == super::deps::Deps::DETACHED_DUE {
                // A detached child's outbox: its result delivered, or looked at later. A child still unfinished a
                // minute after its last write is run here first: the sweep's listing may never show it (a crash
                // right after the child was written, before its index entry; found by the checker, seed 4679).
                // Busy (another execution holds it) or refused, it is looked at again later.
                if let Ok(Some(child)) = self.store().load(&entry.run_id).await {
                    if child.status == crate::core::checkpoint::RunStatus::InProgress
                        && now.saturating_sub(child.saved_at) >= 60_000
                    {
                        // Ignored: whatever this attempt did is in the child's journal; the entry stays until the
                        // child finished and its result reached its lead.
                        let _ = self.resume_run(&entry.run_id, opts.clone()).await;
                    }
                }
                match self.deps.detached_due(&entry).await {
                    Ok(()) => {
                        // Ignored: an entry that stays is met again next time.
                        let _ = self.store().delete_due(&entry).await;
                        report.dropped += 1;
                    }
                    Err(e) => report.failed.push((entry.run_id.clone(), e)),
                }
                continue;
            }
            let rec = match self.store().get_approval(&entry.wait_id).await {
                Ok(r) => r.filter(|r| r.run_id == entry.run_id),
                Err(e) => {
                    report.failed.push((entry.run_id.clone(), e));
                    continue;
                }
            };
            let taken = match rec {
                // Decided: its resume is taken up again (a repeat of it is accepted).
                Some(r) if r.status != ApprovalStatus::Pending && r.decided_at == Some(entry.at) => {
                    // Still waiting on others: the last of them takes it up (its entry goes).
                    self.approvals().settle(r, opts.clone()).await.map(|s| match s {
                        Settled::Run(run) => Some(*run),
                        Settled::Waiting(_) | Settled::Moved(_) | Settled::Orphaned => None,
                    })
                }
                Some(r) if r.status == ApprovalStatus::Pending && r.due_at == Some(entry.at) => {
                    self.resolve_due(r, now, opts.clone()).await
                }
                // A lead's wait on a sub-agent's child whose delivery failed: delivered now (the entry goes once
                // it is, or once there is nothing to deliver).
                Some(r) if r.status == ApprovalStatus::Pending && r.kind == WaitKind::Event => {
                    self.deps.redeliver(&r, opts).await.map(|()| None)
                }
                _ => Ok(None),
            };
            match taken {
                Ok(Some(_)) => report.resolved.push(entry.wait_id.clone()),
                Ok(None) => {
                    // Ignored: an entry that stays is met again next time.
                    let _ = self.store().delete_due(&entry).await;
                    report.dropped += 1;
                }
                Err(e) if e.code == ErrorCode::SessionBusy => report.busy += 1,
                Err(e) => report.failed.push((entry.run_id.clone(), e)),
            }
        }
        Ok(report)
    }

    /// Resolves one pending wait record whose time came (at `now`) and resumes its run: `Ok(None)` when there
    /// was nothing to do (not due, or its run moved on or is gone).
    pub(crate) async fn resolve_due(
        &self,
        rec: ApprovalRecord,
        now: u64,
        opts: SendOptions,
    ) -> Result<Option<RunResult>> {
        let outcome = match rec.due_at.filter(|at| *at <= now).and_then(|at| came_due(rec.kind, at, now)) {
            Some(o) => o,
            None => return Ok(None),
        };
        let rec = match resolve_wait(rec, outcome)? {
            Resolved::Fresh(r) | Resolved::Again(r) => r,
        };
        match self.approvals().settle(rec, opts).await? {
            Settled::Run(run) | Settled::Waiting(run) => Ok(Some(*run)),
            Settled::Moved(_) | Settled::Orphaned => Ok(None),
        }
    }

    /// A paused run's waits that resolve by themselves (strict mode's alarm): resolves the first one already
    /// due at `now` (the run resumes) and answers [`DueLook::Resolved`], else the earliest time one comes due.
    pub(crate) async fn wake_waits(&self, run_id: &str, ids: &[String], opts: &SendOptions) -> Result<DueLook> {
        let now = self.deps.now();
        let mut next: Option<u64> = None;
        for id in ids {
            let Some(rec) = self.store().get_approval(id).await? else { continue };
            let Some(at) = rec.due_at.filter(|_| rec.run_id == run_id && rec.outcome.is_none()) else { continue };
            if at <= now {
                self.resolve_due(rec, now, opts.clone()).await?;
                return Ok(DueLook::Resolved);
            }
            next = Some(next.map_or(at, |n| n.min(at)));
        }
        Ok(DueLook::Next(next))
    }
}

/// What [`Agent::wake_waits`] found.
pub(crate) enum DueLook {
    /// A due wait was resolved: the run moved (resumed, paused again or finished).
    Resolved,
    /// None is due: the earliest time one will be (`None`: the run waits on none that resolve by themselves).
    Next(Option<u64>),
}
