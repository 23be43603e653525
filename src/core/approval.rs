//! Approval records (M4): one per gated tool call, written before the run's `awaiting-approval` checkpoint;
//! and the planning of a decision ([`decide`], [`plan_resolution`]): pure functions of the stored records, so
//! the runtime only reads, writes and resumes.

use super::checkpoint::{Checkpoint, RunStatus};
use super::error::{Error, ErrorCode, Result};
use super::fingerprint::Fingerprint;
use super::transcript::ToolCall;
use super::wait::{WaitKind, WaitOutcome};
use serde::{Deserialize, Serialize};

/// Decision state of an approval.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "lowercase")]
pub enum ApprovalStatus {
    /// Waiting for a person.
    #[default]
    Pending,
    /// Approved: the call runs (at most once).
    Approved,
    /// Rejected: the call gets a rejection result with the reviewer's note.
    Rejected,
}

crate::core::wire::unit_enum_de!(ApprovalStatus {
    "pending" => Pending,
    "approved" => Approved,
    "rejected" => Rejected,
});

/// A stored approval.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase")]
pub struct ApprovalRecord {
    /// Approval id (random; never reused).
    pub id: String,
    /// The paused run.
    pub run_id: String,
    /// The gated call.
    pub tool_call: ToolCall,
    /// Every approval id of the same pause (this one included), in call order.
    pub batch: Vec<String>,
    /// Decision state.
    #[serde(default)]
    pub status: ApprovalStatus,
    /// The reviewer's note.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub note: Option<String>,
    /// Step of the run when it paused.
    pub step: u32,
    /// When it was requested (ms since the epoch).
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    pub created_at: u64,
    /// When it was decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub decided_at: Option<u64>,
    /// Fingerprint of the agent that paused (the approval snapshot's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub fingerprint: Option<Fingerprint>,
    /// What the call waits for: a reviewer's approval (the default), or a tool's wait ([`crate::core::wait`]).
    #[serde(default, skip_serializing_if = "WaitKind::is_approval")]
    #[cfg_attr(feature = "ts", ts(as = "Option<WaitKind>", optional))]
    pub kind: WaitKind,
    /// A question's text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub question: Option<String>,
    /// A question's choices (empty: any answer).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "ts", ts(as = "Option<Vec<String>>", optional))]
    pub choices: Vec<String>,
    /// When the wait resolves by itself: an event's deadline, a timer's time (ms since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(type = "number", optional))]
    pub due_at: Option<u64>,
    /// An event wait's token hash ([`crate::core::wait::token_hash`]; never the token).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub token_hash: Option<String>,
    /// A resolved wait's outcome (its call's result).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub outcome: Option<WaitOutcome>,
}

/// A decision handed to the run state machine when the last approval of a pause is resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Approval id.
    pub approval_id: String,
    /// The call it gates.
    pub tool_call_id: String,
    /// Approved or not.
    pub approved: bool,
    /// Reviewer's note.
    pub note: Option<String>,
    /// For a tool's wait: the call's result (the call does not run again).
    pub result: Option<WaitOutcome>,
}

impl Decision {
    /// The decision a decided record carries (`None` while it is pending).
    pub fn of(record: &ApprovalRecord) -> Option<Decision> {
        let approved = match record.status {
            ApprovalStatus::Pending => return None,
            ApprovalStatus::Approved => true,
            ApprovalStatus::Rejected => false,
        };
        if !record.kind.is_approval() && record.outcome.is_none() {
            return None;
        }
        Some(Decision {
            approval_id: record.id.clone(),
            tool_call_id: record.tool_call.id.clone(),
            approved,
            note: record.note.clone(),
            result: record.outcome.clone(),
        })
    }
}

/// Whether a stored resolution is taken again by a second one: the same outcome again (a retried delivery of
/// the same payload, the same answer) is acknowledged and changes nothing.
#[derive(Clone, Debug, PartialEq)]
pub enum Resolved {
    /// The record now carries the outcome (write it and resume).
    Fresh(ApprovalRecord),
    /// It carried the same outcome already: nothing to do.
    Again(ApprovalRecord),
}

/// Resolves a tool's wait with `outcome` (an answer, a delivery, a deadline or a timer: see
/// [`crate::core::wait`]). A wait resolved already with the same outcome is [`Resolved::Again`]; with another
/// one, `STEADFAST_WAIT_ALREADY_RESOLVED`; an approval record is not a wait (`STEADFAST_INVALID_INPUT`).
pub fn resolve_wait(mut record: ApprovalRecord, outcome: WaitOutcome) -> Result<Resolved> {
    if record.kind.is_approval() {
        return Err(Error::invalid_input(format!(
            "'{}' is an approval, not a wait: decide it with approved/note",
            record.id
        ))
        .with_approval(&record.id)
        .with_run(&record.run_id));
    }
    if let Some(done) = &record.outcome {
        if done.digest == outcome.digest && done.by == outcome.by {
            return Ok(Resolved::Again(record));
        }
        let by = format!("{:?}", done.by).to_ascii_lowercase();
        return Err(Error::new(
            ErrorCode::WaitAlreadyResolved,
            format!("the {} wait '{}' was resolved already (by {by})", record.kind.as_str(), record.id),
        )
        .with_approval(&record.id)
        .with_run(&record.run_id));
    }
    record.status = if outcome.is_error && outcome.by == super::wait::ResolvedBy::Declined {
        ApprovalStatus::Rejected
    } else {
        ApprovalStatus::Approved
    };
    record.outcome = Some(outcome);
    Ok(Resolved::Fresh(record))
}

/// Applies a person's decision to a stored record (status and note; the caller stamps `decided_at` when it
/// writes the record). Deciding it again the same way is allowed (a retried request: the record is decided
/// anew); the other way fails with `STEADFAST_APPROVAL_ALREADY_DECIDED`.
pub fn decide(mut record: ApprovalRecord, approved: bool, note: Option<String>) -> Result<ApprovalRecord> {
    if !record.kind.is_approval() {
        return Err(Error::invalid_input(format!("'{}' is a {}, not an approval", record.id, record.kind.as_str()))
            .with_approval(&record.id)
            .with_run(&record.run_id));
    }
    let wanted = if approved { ApprovalStatus::Approved } else { ApprovalStatus::Rejected };
    if record.status != ApprovalStatus::Pending && record.status != wanted {
        return Err(Error::new(
            ErrorCode::ApprovalAlreadyDecided,
            // Ids are ASCII (`new_id`), so ASCII lowercasing is all `to_lowercase` did here.
            format!("approval '{}' was already {:?}", record.id, record.status).to_ascii_lowercase(),
        )
        .with_approval(&record.id)
        .with_run(&record.run_id));
    }
    record.status = wanted;
    record.note = note;
    Ok(record)
}

/// Whether `run` is paused on approval `approval_id` (else a decision on it is orphaned: its run was deleted,
/// replaced, or moved past that pause).
pub fn awaits(run: Option<&Checkpoint>, approval_id: &str) -> bool {
    run.is_some_and(|c| c.status == RunStatus::AwaitingApproval && c.approval_ids.iter().any(|a| a == approval_id))
}

/// Whether `run` still waits on any approval of `batch` (so their records must stay).
pub fn awaits_any(run: Option<&Checkpoint>, batch: &[String]) -> bool {
    run.is_some_and(|c| c.status == RunStatus::AwaitingApproval && c.approval_ids.iter().any(|a| batch.contains(a)))
}

/// What resolving one approval of a pause leads to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resolution {
    /// Other approvals of the pause are still pending (their ids, in pause order): the decided record is
    /// stored and the run keeps waiting.
    Wait {
        /// The approvals still pending.
        still_pending: Vec<String>,
    },
    /// Every approval of the pause is decided: the run resumes with these decisions (in pause order).
    Resume {
        /// One per decided approval of the pause.
        decisions: Vec<Decision>,
    },
}

/// Plans the resolution of `decided` (a record carrying its new decision, see [`decide`]) within its run's
/// pause `batch` (the run's pending approval ids, in call order). `siblings` are the stored records of the
/// other approvals of the batch that exist. A sibling whose record is gone gets no decision: nobody approved
/// its call, so the machine refuses the resume (`STEADFAST_APPROVAL_NOT_FOUND`) rather than guess one.
pub fn plan_resolution(batch: &[String], decided: &ApprovalRecord, siblings: &[ApprovalRecord]) -> Resolution {
    let mut decisions = Vec::new();
    let mut still_pending = Vec::new();
    for id in batch {
        let record = if *id == decided.id { Some(decided) } else { siblings.iter().find(|r| r.id == *id) };
        if let Some(r) = record {
            match Decision::of(r) {
                Some(d) => decisions.push(d),
                None => still_pending.push(id.clone()),
            }
        }
    }
    if still_pending.is_empty() {
        Resolution::Resume { decisions }
    } else {
        Resolution::Wait { still_pending }
    }
}

/// A tool's wait a run is paused on (see [`crate::core::wait`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase")]
pub struct PendingWait {
    /// The wait's id (its record's, as `GET /approvals` lists it).
    pub id: String,
    /// What it waits for.
    pub kind: WaitKind,
    /// The call.
    pub tool_call_id: String,
    /// The tool.
    pub tool_name: String,
    /// A question's text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub question: Option<String>,
    /// A question's choices.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "ts", ts(as = "Option<Vec<String>>", optional))]
    pub choices: Vec<String>,
    /// An event's deadline or a timer's time (ms since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional, type = "number"))]
    pub due_at: Option<u64>,
    /// An event wait's token: deliver with `POST /events/{token}` (a capability: keep it secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub token: Option<String>,
}

impl PendingWait {
    /// The view of a tool's wait record (`None` for an approval), its token derived from the run's key scope.
    pub fn of(record: &ApprovalRecord, scope: &str) -> Option<PendingWait> {
        if record.kind == WaitKind::Approval {
            return None;
        }
        let token = (record.kind == WaitKind::Event).then(|| super::wait::token(scope, &record.tool_call.id));
        Some(PendingWait {
            id: record.id.clone(),
            kind: record.kind,
            tool_call_id: record.tool_call.id.clone(),
            tool_name: record.tool_call.name.clone(),
            question: record.question.clone(),
            choices: record.choices.clone(),
            due_at: record.due_at,
            token,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn record(id: &str, status: ApprovalStatus) -> ApprovalRecord {
        ApprovalRecord {
            id: id.into(),
            run_id: "run".into(),
            tool_call: ToolCall { id: format!("call-{id}"), name: "pay".into(), args: json!({}), invalid: None },
            batch: vec![],
            status,
            note: (status == ApprovalStatus::Rejected).then(|| format!("no {id}")),
            step: 1,
            created_at: 0,
            decided_at: None,
            fingerprint: None,
            ..Default::default()
        }
    }

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn deciding_sets_status_and_note_and_refuses_the_opposite_decision() {
        let pending = record("a", ApprovalStatus::Pending);
        let yes = decide(pending, true, Some("ok".into())).unwrap();
        assert_eq!((yes.status, yes.note.as_deref()), (ApprovalStatus::Approved, Some("ok")));
        assert_eq!(decide(yes.clone(), true, None).unwrap().note, None, "the same decision again is allowed");
        let no = decide(yes, false, None).unwrap_err();
        assert_eq!(no.code, ErrorCode::ApprovalAlreadyDecided);
        assert_eq!(no.message, "approval 'a' was already approved");
        assert_eq!((no.run_id.as_deref(), no.approval_id.as_deref()), (Some("run"), Some("a")));
    }

    #[test]
    fn the_last_decision_of_a_pause_resumes_with_every_decision_in_pause_order() {
        let decided = decide(record("b", ApprovalStatus::Pending), false, Some("too much".into())).unwrap();
        let siblings = [record("c", ApprovalStatus::Approved), record("a", ApprovalStatus::Rejected)];
        let Resolution::Resume { decisions } = plan_resolution(&ids(&["a", "b", "c"]), &decided, &siblings) else {
            panic!("every approval is decided")
        };
        let got: Vec<(&str, &str, bool, Option<&str>)> = decisions
            .iter()
            .map(|d| (d.approval_id.as_str(), d.tool_call_id.as_str(), d.approved, d.note.as_deref()))
            .collect();
        assert_eq!(
            got,
            [
                ("a", "call-a", false, Some("no a")),
                ("b", "call-b", false, Some("too much")),
                ("c", "call-c", true, None)
            ]
        );
    }

    #[test]
    fn a_pending_sibling_keeps_the_run_waiting_and_a_missing_one_gets_no_decision() {
        let decided = decide(record("a", ApprovalStatus::Pending), true, None).unwrap();
        let siblings = [record("b", ApprovalStatus::Pending), record("c", ApprovalStatus::Approved)];
        assert_eq!(
            plan_resolution(&ids(&["a", "b", "c"]), &decided, &siblings),
            Resolution::Wait { still_pending: ids(&["b"]) }
        );
        let Resolution::Resume { decisions } = plan_resolution(&ids(&["a", "gone"]), &decided, &[]) else {
            panic!("nothing pending")
        };
        assert_eq!(decisions.iter().map(|d| d.approval_id.as_str()).collect::<Vec<_>>(), ["a"]);
    }

    #[test]
    fn a_run_awaits_only_the_approvals_of_its_current_pause() {
        let mut cp =
            Checkpoint { status: RunStatus::AwaitingApproval, approval_ids: ids(&["a", "b"]), ..Default::default() };
        assert!(awaits(Some(&cp), "a") && !awaits(Some(&cp), "z") && !awaits(None, "a"));
        assert!(awaits_any(Some(&cp), &ids(&["z", "b"])) && !awaits_any(Some(&cp), &ids(&["z"])));
        cp.status = RunStatus::InProgress;
        assert!(!awaits(Some(&cp), "a") && !awaits_any(Some(&cp), &ids(&["a"])));
    }

    proptest! {
        /// Over generated pauses (each sibling pending, approved, rejected or gone): the run resumes exactly when
        /// no sibling is pending; then every existing record gives one decision, in pause order, matching its
        /// status; else the pending ones are listed in pause order.
        #[test]
        fn a_pause_resumes_exactly_when_nothing_is_pending(states in proptest::collection::vec(0u8..4, 1..8), pick in 0usize..8, approve: bool) {
            let batch: Vec<String> = (0..states.len()).map(|i| format!("apr{i}")).collect();
            let me = pick % batch.len();
            let status = |s: u8| [ApprovalStatus::Pending, ApprovalStatus::Approved, ApprovalStatus::Rejected][s as usize % 3];
            let siblings: Vec<ApprovalRecord> = states
                .iter()
                .enumerate()
                .filter(|&(i, &s)| i != me && s != 3)
                .map(|(i, &s)| record(&batch[i], status(s)))
                .collect();
            let decided = decide(record(&batch[me], ApprovalStatus::Pending), approve, None).unwrap();
            let pending: Vec<String> =
                siblings.iter().filter(|r| r.status == ApprovalStatus::Pending).map(|r| r.id.clone()).collect();
            match plan_resolution(&batch, &decided, &siblings) {
                Resolution::Wait { still_pending } => {
                    prop_assert!(!pending.is_empty());
                    prop_assert_eq!(still_pending, pending);
                }
                Resolution::Resume { decisions } => {
                    prop_assert!(pending.is_empty());
                    let expected: Vec<Decision> = batch
                        .iter()
                        .filter_map(|id| if *id == decided.id { Some(&decided) } else { siblings.iter().find(|r| r.id == *id) })
                        .filter_map(Decision::of)
                        .collect();
                    prop_assert_eq!(decisions.len(), siblings.len() + 1);
                    prop_assert_eq!(decisions, expected);
                }
            }
        }
    }
}
