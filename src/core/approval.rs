//! Approval records (M4): one per gated tool call, written before the run's `awaiting-approval` checkpoint.

use super::fingerprint::Fingerprint;
use super::transcript::ToolCall;
use serde::{Deserialize, Serialize};

/// Decision state of an approval.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
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

/// A stored approval.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
}
