//! Checkpoints (M1) and the journal entries they are folded from.
//!
//! A run's durable state is a sequence of journal entries, each written once at a durable boundary: a
//! [`EntryBody::Snapshot`] holds a whole [`Checkpoint`], a [`EntryBody::Delta`] holds only what changed since
//! the previous entry (appended messages plus the small header fields). [`Checkpoint::apply`] folds an entry;
//! a gap (an entry that does not continue the state it is applied to) is reported, never papered over.

use super::error::{ErrorInfo, Result};
use super::fingerprint::Fingerprint;
use super::transcript::{Message, ToolResult, Usage};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Where a run stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "kebab-case")]
pub enum RunStatus {
    /// Unfinished: crashed, aborted, failed, or still running somewhere.
    #[default]
    InProgress,
    /// Paused on one or more approvals.
    AwaitingApproval,
    /// Done (the model stopped calling tools, or a budget ended it).
    Finished,
}

impl RunStatus {
    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::InProgress => "in-progress",
            RunStatus::AwaitingApproval => "awaiting-approval",
            RunStatus::Finished => "finished",
        }
    }
}

/// Why a run ended (or paused).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "kebab-case")]
pub enum FinishReason {
    /// The model answered without asking for tools.
    Stop,
    /// `maxSteps` ran out.
    MaxSteps,
    /// The same failing tool calls repeated (loop detection).
    LoopDetected,
    /// Paused on approvals.
    AwaitingApproval,
    /// Aborted through the cancellation handle (the run stays resumable).
    Aborted,
    /// The model's answer was cut off at its output token limit (OpenAI `length`, Anthropic `max_tokens`).
    Length,
    /// The model refused (OpenAI `message.refusal`, Anthropic `stop_reason: "refusal"`); the refusal is the
    /// run's text.
    Refusal,
    /// The provider's content filter withheld (part of) the answer (OpenAI `content_filter`).
    ContentFilter,
}

impl FinishReason {
    /// What a provider's stop reason means for a model turn without tool calls, when it is not a plain stop:
    /// `length`, `max_tokens` and `model_context_window_exceeded` → [`FinishReason::Length`]; `refusal` →
    /// [`FinishReason::Refusal`]; `content_filter` → [`FinishReason::ContentFilter`]; anything else → `None`
    /// (the turn ends the run with [`FinishReason::Stop`]).
    pub fn from_stop_reason(stop_reason: &str) -> Option<FinishReason> {
        match stop_reason {
            "length" | "max_tokens" | "model_context_window_exceeded" => Some(FinishReason::Length),
            "refusal" => Some(FinishReason::Refusal),
            "content_filter" => Some(FinishReason::ContentFilter),
            _ => None,
        }
    }
}

/// A run's state at a durable boundary.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase")]
pub struct Checkpoint {
    /// Run id.
    pub run_id: String,
    /// The whole transcript (a finished run continued as a conversation keeps its history).
    pub messages: Vec<Message>,
    /// Index of the first message the current run (send) added as input.
    #[serde(default)]
    pub input_start: usize,
    /// Number of input messages the current run started with (to recognise a retried send).
    #[serde(default)]
    pub input_len: usize,
    /// Model turns taken by the current run (counts toward `maxSteps`).
    #[serde(default)]
    pub step_index: u32,
    /// Token usage of the current run.
    #[serde(default)]
    pub usage: Usage,
    /// Token usage of the whole conversation (every run of this id; not reset when a finished run continues).
    /// Checkpoints written before it was kept count from their current run's usage.
    #[serde(default)]
    pub total_usage: Usage,
    /// Opaque application state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub business_state: Option<Value>,
    /// Status.
    #[serde(default)]
    pub status: RunStatus,
    /// Pending approvals (status `awaiting-approval`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approval_ids: Vec<String>,
    /// The agent that wrote this checkpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub fingerprint: Option<Fingerprint>,
    /// Approved calls that were marked started before they ran (at most once).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub started_tool_call_ids: Vec<String>,
    /// Side-effecting calls whose intent was recorded before they ran (effect ledger; the outcome is their
    /// result). A resume that finds an intent without a result reconciles before running again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub intents: Vec<String>,
    /// Set by the recovery sweep when the run failed `maxAttempts` times in a row; cleared by progress.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub quarantined: bool,
    /// Set only on a diagnosis fork the recovery sweep created (M14): the id of the run it tries to heal. The
    /// sweep decides "this run is a diagnosis fork of x" from this marker, never from a run's name. Written by
    /// the fork's first snapshot and never changed (deltas do not carry it); a `fork` of any run clears it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub heal_of: Option<String>,
    /// The last failed attempt, cleared by the next saved progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub last_error: Option<ErrorInfo>,
    /// Failed attempts in a row.
    #[serde(default)]
    pub attempts: u32,
    /// Why the run finished (for `finished` runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub finish_reason: Option<FinishReason>,
    /// Results recorded while an earlier call of the same turn had none yet (placed in call order later).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held_results: Vec<ToolResult>,
    /// User input queued behind pending tool calls (placed after their results).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queued_input: Vec<Message>,
    /// Extension state (progress-guard counters and the like), kept across crashes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub ext: Option<Value>,
    /// Number of journal entries folded into this state (the next entry has `seq = self.seq + 1`).
    #[serde(default)]
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    pub seq: u64,
    /// When the last entry was saved (ms since the epoch, by the writer's clock).
    #[serde(default)]
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    pub saved_at: u64,
}

/// The small fields of a checkpoint, carried whole by every delta.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Header {
    /// See [`Checkpoint::input_start`].
    pub input_start: usize,
    /// See [`Checkpoint::input_len`].
    pub input_len: usize,
    /// See [`Checkpoint::step_index`].
    pub step_index: u32,
    /// See [`Checkpoint::usage`].
    pub usage: Usage,
    /// See [`Checkpoint::total_usage`].
    #[serde(default)]
    pub total_usage: Usage,
    /// See [`Checkpoint::status`].
    pub status: RunStatus,
    /// See [`Checkpoint::approval_ids`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approval_ids: Vec<String>,
    /// See [`Checkpoint::started_tool_call_ids`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub started_tool_call_ids: Vec<String>,
    /// See [`Checkpoint::intents`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub intents: Vec<String>,
    /// See [`Checkpoint::quarantined`].
    #[serde(default)]
    pub quarantined: bool,
    /// See [`Checkpoint::last_error`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<ErrorInfo>,
    /// See [`Checkpoint::attempts`].
    #[serde(default)]
    pub attempts: u32,
    /// See [`Checkpoint::finish_reason`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<FinishReason>,
    /// See [`Checkpoint::held_results`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held_results: Vec<ToolResult>,
    /// See [`Checkpoint::queued_input`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queued_input: Vec<Message>,
}

macro_rules! header_patch {
    (plain { $($field:ident: $ty:ty),* $(,)? } optional { $($ofield:ident: $oty:ty),* $(,)? }) => {
        /// The header fields that changed since the previous entry (absent = unchanged; for optional fields
        /// `null` = cleared).
        #[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
        #[serde(rename_all = "camelCase")]
        pub struct HeaderPatch {
            $(
                #[doc = concat!("New `", stringify!($field), "`, when it changed.")]
                #[serde(default, skip_serializing_if = "Option::is_none")]
                pub $field: Option<$ty>,
            )*
            $(
                #[doc = concat!("New `", stringify!($ofield), "`, when it changed (`Some(None)` clears it).")]
                #[serde(default, skip_serializing_if = "Option::is_none", with = "double_option")]
                pub $ofield: Option<Option<$oty>>,
            )*
        }

        impl Header {
            /// The fields of `self` that differ from `prev`.
            pub fn diff(&self, prev: &Header) -> HeaderPatch {
                HeaderPatch {
                    $($field: (self.$field != prev.$field).then(|| self.$field.clone()),)*
                    $($ofield: (self.$ofield != prev.$ofield).then(|| self.$ofield.clone()),)*
                }
            }

            /// Applies a patch.
            pub fn apply(&mut self, p: &HeaderPatch) {
                $(if let Some(v) = &p.$field { self.$field = v.clone(); })*
                $(if let Some(v) = &p.$ofield { self.$ofield = v.clone(); })*
            }
        }

        impl From<Header> for HeaderPatch {
            fn from(h: Header) -> HeaderPatch {
                HeaderPatch { $($field: Some(h.$field),)* $($ofield: Some(h.$ofield),)* }
            }
        }
    };
}

header_patch! {
    plain {
        input_start: usize,
        input_len: usize,
        step_index: u32,
        usage: Usage,
        total_usage: Usage,
        status: RunStatus,
        approval_ids: Vec<String>,
        started_tool_call_ids: Vec<String>,
        intents: Vec<String>,
        quarantined: bool,
        attempts: u32,
        held_results: Vec<ToolResult>,
        queued_input: Vec<Message>,
    }
    optional {
        last_error: ErrorInfo,
        finish_reason: FinishReason,
    }
}

/// A journal entry: one durable boundary.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JournalEntry {
    /// Position in the run's journal, 1-based and gapless.
    pub seq: u64,
    /// Save time (ms since the epoch, writer's clock).
    pub at: u64,
    /// Content.
    pub body: EntryBody,
}

/// What an entry holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "lowercase")]
pub enum EntryBody {
    /// The whole state.
    Snapshot {
        /// The checkpoint.
        state: Box<Checkpoint>,
    },
    /// What changed since the previous entry.
    Delta {
        /// Number of messages before this delta (a fold checks it: a gap is corruption).
        from: usize,
        /// Messages appended.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        messages: Vec<Message>,
        /// The small fields that changed.
        #[serde(default)]
        head: HeaderPatch,
        /// New business state, when it changed (`Some(None)` clears it).
        #[serde(default, skip_serializing_if = "Option::is_none", with = "double_option")]
        business_state: Option<Option<Value>>,
        /// New fingerprint, when it changed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fingerprint: Option<Fingerprint>,
        /// New extension state, when it changed (`Some(None)` clears it).
        #[serde(default, skip_serializing_if = "Option::is_none", with = "double_option")]
        ext: Option<Option<Value>>,
    },
}

/// `Option<Option<T>>` on the wire: absent = `None` (unchanged), `null` = `Some(None)` (cleared).
mod double_option {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer, T: Serialize>(v: &Option<Option<T>>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(Some(v)) => v.serialize(s),
            _ => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<Option<T>>, D::Error> {
        Ok(Some(Option::<T>::deserialize(d)?))
    }
}

impl Checkpoint {
    /// A fresh, empty checkpoint for `run_id`.
    pub fn new(run_id: &str) -> Checkpoint {
        Checkpoint { run_id: run_id.to_string(), ..Default::default() }
    }

    /// The header fields.
    pub fn header(&self) -> Header {
        Header {
            input_start: self.input_start,
            input_len: self.input_len,
            step_index: self.step_index,
            usage: self.usage,
            total_usage: self.total_usage,
            status: self.status,
            approval_ids: self.approval_ids.clone(),
            started_tool_call_ids: self.started_tool_call_ids.clone(),
            intents: self.intents.clone(),
            quarantined: self.quarantined,
            last_error: self.last_error.clone(),
            attempts: self.attempts,
            finish_reason: self.finish_reason,
            held_results: self.held_results.clone(),
            queued_input: self.queued_input.clone(),
        }
    }

    fn set_header(&mut self, h: Header) {
        self.input_start = h.input_start;
        self.input_len = h.input_len;
        self.step_index = h.step_index;
        self.usage = h.usage;
        self.total_usage = h.total_usage;
        self.status = h.status;
        self.approval_ids = h.approval_ids;
        self.started_tool_call_ids = h.started_tool_call_ids;
        self.intents = h.intents;
        self.quarantined = h.quarantined;
        self.last_error = h.last_error;
        self.attempts = h.attempts;
        self.finish_reason = h.finish_reason;
        self.held_results = h.held_results;
        self.queued_input = h.queued_input;
    }

    /// Folds one entry into this state. Fails with `STEADFAST_CHECKPOINT_CORRUPT` when the entry does not
    /// continue this state (wrong seq, a message gap).
    pub fn apply(&mut self, entry: &JournalEntry) -> Result<()> {
        let corrupt = |why: String| {
            Err(super::error::Error::new(super::error::ErrorCode::CheckpointCorrupt, why).with_run(self.run_id.clone()))
        };
        match &entry.body {
            EntryBody::Snapshot { state } => {
                let run_id = std::mem::take(&mut self.run_id);
                *self = (**state).clone();
                if self.run_id.is_empty() {
                    self.run_id = run_id;
                }
            }
            EntryBody::Delta { from, messages, head, business_state, fingerprint, ext } => {
                if entry.seq != self.seq + 1 {
                    return corrupt(format!("journal entry {} does not follow entry {}", entry.seq, self.seq));
                }
                if *from != self.messages.len() {
                    return corrupt(format!(
                        "journal entry {} continues from message {} but the state has {}",
                        entry.seq,
                        from,
                        self.messages.len()
                    ));
                }
                self.messages.extend(messages.iter().cloned());
                let mut h = self.header();
                h.apply(head);
                self.set_header(h);
                if let Some(bs) = business_state {
                    self.business_state = bs.clone();
                }
                if let Some(fp) = fingerprint {
                    self.fingerprint = Some(fp.clone());
                }
                if let Some(x) = ext {
                    self.ext = x.clone();
                }
            }
        }
        self.seq = entry.seq;
        self.saved_at = entry.at;
        Ok(())
    }

    /// Folds a sequence of entries (the first usually a snapshot) into a checkpoint.
    pub fn fold<'a>(run_id: &str, entries: impl IntoIterator<Item = &'a JournalEntry>) -> Result<Option<Checkpoint>> {
        let mut cp = Checkpoint::new(run_id);
        let mut any = false;
        for e in entries {
            if !any && !matches!(e.body, EntryBody::Snapshot { .. }) && e.seq != 1 {
                return Err(super::error::Error::new(
                    super::error::ErrorCode::CheckpointCorrupt,
                    format!("journal of run '{run_id}' starts at entry {} without a snapshot", e.seq),
                )
                .with_run(run_id));
            }
            cp.apply(e)?;
            any = true;
        }
        Ok(any.then_some(cp))
    }

    /// The text of the last assistant message.
    pub fn last_text(&self) -> String {
        self.messages
            .iter()
            .rev()
            .find_map(|m| match m {
                Message::Assistant { content, .. } => Some(content.clone()),
                _ => None,
            })
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(cp: &Checkpoint, seq: u64) -> JournalEntry {
        let mut s = cp.clone();
        s.seq = seq;
        JournalEntry { seq, at: 10, body: EntryBody::Snapshot { state: Box::new(s) } }
    }

    #[test]
    fn fold_snapshot_then_deltas() {
        let mut base = Checkpoint::new("r");
        base.messages.push(Message::user("hi"));
        let e1 = snapshot(&base, 1);
        let mut head = base.header();
        head.step_index = 1;
        let e2 = JournalEntry {
            seq: 2,
            at: 20,
            body: EntryBody::Delta {
                from: 1,
                messages: vec![Message::assistant("hello", vec![])],
                head: head.clone().into(),
                business_state: Some(Some(serde_json::json!({"n": 1}))),
                fingerprint: None,
                ext: None,
            },
        };
        let cp = Checkpoint::fold("r", [&e1, &e2]).unwrap().unwrap();
        assert_eq!(cp.messages.len(), 2);
        assert_eq!(cp.step_index, 1);
        assert_eq!(cp.seq, 2);
        assert_eq!(cp.saved_at, 20);
        assert_eq!(cp.business_state, Some(serde_json::json!({"n": 1})));

        // JSON round trip keeps "business state cleared" distinct from "unchanged".
        let e3 = JournalEntry {
            seq: 3,
            at: 30,
            body: EntryBody::Delta {
                from: 2,
                messages: vec![],
                head: head.into(),
                business_state: Some(None),
                fingerprint: None,
                ext: None,
            },
        };
        let e3: JournalEntry = serde_json::from_str(&serde_json::to_string(&e3).unwrap()).unwrap();
        let cp = Checkpoint::fold("r", [&e1, &e2, &e3]).unwrap().unwrap();
        assert_eq!(cp.business_state, None);
    }

    #[test]
    fn cleared_optional_header_fields_survive_json() {
        let mut a = Header::default();
        a.last_error = Some(crate::core::error::Error::internal("x").info());
        a.finish_reason = Some(FinishReason::Stop);
        let b = Header::default();
        let patch = b.diff(&a);
        let json = serde_json::to_string(&patch).unwrap();
        let back: HeaderPatch = serde_json::from_str(&json).unwrap();
        assert_eq!(back, patch);
        let mut applied = a.clone();
        applied.apply(&back);
        assert_eq!(applied, b, "{json}");
        let unchanged: HeaderPatch = serde_json::from_str("{}").unwrap();
        let mut same = a.clone();
        same.apply(&unchanged);
        assert_eq!(same, a);
    }

    #[test]
    fn gaps_are_corruption() {
        let base = Checkpoint::new("r");
        let e1 = snapshot(&base, 1);
        let gap = JournalEntry {
            seq: 3,
            at: 0,
            body: EntryBody::Delta {
                from: 0,
                messages: vec![],
                head: base.header().into(),
                business_state: None,
                fingerprint: None,
                ext: None,
            },
        };
        let err = Checkpoint::fold("r", [&e1, &gap]).unwrap_err();
        assert_eq!(err.code, crate::core::error::ErrorCode::CheckpointCorrupt);
        let wrong_from = JournalEntry {
            seq: 2,
            at: 0,
            body: EntryBody::Delta {
                from: 5,
                messages: vec![],
                head: base.header().into(),
                business_state: None,
                fingerprint: None,
                ext: None,
            },
        };
        assert!(Checkpoint::fold("r", [&e1, &wrong_from]).is_err());
        assert_eq!(Checkpoint::fold("r", []).unwrap(), None);
    }
}
