//! Checkpoints (M1) and the journal entries they are folded from.
//!
//! A run's durable state is a sequence of journal entries, each written once at a durable boundary: a
//! [`EntryBody::Snapshot`] holds a whole [`Checkpoint`], a [`EntryBody::Delta`] holds only what changed since
//! the previous entry (appended messages plus the small header fields). [`Checkpoint::apply`] folds an entry;
//! a gap (an entry that does not continue the state it is applied to) is reported, never papered over.

use super::cost::StorageUsage;
use super::error::{ErrorInfo, Result};
use super::fingerprint::Fingerprint;
use super::transcript::{Message, ToolResult, Usage};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Which key scope covers the first `messages` messages of a fork's transcript (those it copied from a run).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase")]
pub struct CopiedScope {
    /// The messages before this position (and after the previous entry's) were copied from a run with `scope`.
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    pub messages: usize,
    /// That run's key scope.
    pub scope: String,
}

/// Where a run stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
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

crate::core::wire::unit_enum_de!(RunStatus {
    "in-progress" => InProgress,
    "awaiting-approval" => AwaitingApproval,
    "finished" => Finished,
});

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
    /// A budget of the agent ran out (tokens, time; see [`crate::core::budget`]): the run stays resumable once
    /// the limit is raised.
    BudgetExceeded,
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
    /// Time the current run has spent executing (ms): from each execution's start to its last commit, summed
    /// over every execution of the run (resumes after a crash or an approval go on counting; the gaps between
    /// them do not count). What `maxDurationMs` limits.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    pub active_ms: u64,
    /// Token usage of the whole conversation (every run of this id; not reset when a finished run continues).
    /// Checkpoints written before it was kept count from their current run's usage.
    #[serde(default)]
    pub total_usage: Usage,
    /// The store operations of every execution under this id so far, and their cost: an execution's last entry
    /// records those it made before it, and so does every 16th entry of the journal
    /// ([`crate::core::machine::STORAGE_EVERY`]; the others do not carry it, to stay small), so a crash loses at
    /// most the operations since the last of those. What an execution does after its last entry (that entry's own
    /// write, a last read of the message queue, the lease's release: on KV two writes, a delete and a list for a
    /// run that finishes) is not recorded: nothing is written after it. See [`crate::core::cost::StorageUsage`].
    #[serde(default, skip_serializing_if = "StorageUsage::is_empty")]
    #[cfg_attr(feature = "ts", ts(as = "Option<StorageUsage>", optional))]
    pub storage: StorageUsage,
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
    /// The scope of the idempotency keys of this run's own tool calls (`<run id>:<random nonce>`; see
    /// [`crate::core::idempotency`]). Set when the run is created, written by its first snapshot and never
    /// changed (deltas do not carry it), so a call keeps its key across resumes. `None` for runs created before
    /// scopes existed: their scope is the run id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub key_scope: Option<String>,
    /// A child run's budget cap: its part of what its lead had left of its budget when the child was created
    /// (shared by the turn's sub-agent calls without a result, [`crate::core::budget::BudgetCap::shared`]).
    /// Written by the run's first snapshot and never changed (deltas do not carry it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub budget_cap: Option<crate::core::budget::BudgetCap>,
    /// For a fork: which key scopes cover the messages it copied from its source (a fork of a fork: nested), so
    /// the calls it copied keep their keys. Written with [`Checkpoint::key_scope`], never changed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub copied_scopes: Vec<CopiedScope>,
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
    /// Ids of the queued messages ([`crate::core::steer`]) this run applied, in the order applied: a listed
    /// message whose id is here is never applied again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steered: Vec<String>,
    /// Extension state (progress-guard counters and the like), kept across crashes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub ext: Option<Value>,
    /// The agent of the run's handoff team the conversation is with, by its team name: `None` until the first
    /// handoff (the run's own agent). See [`crate::core::machine::Team`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub agent: Option<String>,
    /// Handoffs the current run took (a finished run that continues counts from zero again).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub handoffs: u32,
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
    /// See [`Checkpoint::active_ms`].
    #[serde(default)]
    pub active_ms: u64,
    /// The conversation's usage before the current run ([`Checkpoint::total_usage`] less
    /// [`Checkpoint::usage`]): it changes only when a finished run continues, so an entry carries it only then,
    /// not at every model turn.
    #[serde(default)]
    pub usage_before: Usage,
    /// See [`Checkpoint::storage`].
    #[serde(default)]
    pub storage: StorageUsage,
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
    /// See [`Checkpoint::steered`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steered: Vec<String>,
    /// See [`Checkpoint::agent`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// See [`Checkpoint::handoffs`].
    #[serde(default, skip_serializing_if = "is_zero")]
    pub handoffs: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

macro_rules! header_patch {
    (
        plain { $($field:ident: $ty:ty = $short:literal | $old:literal $(with $with:literal)?),* $(,)? }
        optional { $($ofield:ident: $oty:ty = $oshort:literal | $oold:literal),* $(,)? }
    ) => {
        /// The header fields that changed since the previous entry (absent = unchanged; for optional fields
        /// `null` = cleared). Stored under short names (the long camelCase names of earlier entries still read).
        #[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
        pub struct HeaderPatch {
            $(
                #[doc = concat!("New `", stringify!($field), "`, when it changed.")]
                #[serde(default, skip_serializing_if = "Option::is_none", rename = $short, alias = $old $(, with = $with)?)]
                pub $field: Option<$ty>,
            )*
            $(
                #[doc = concat!("New `", stringify!($ofield), "`, when it changed (`Some(None)` clears it).")]
                #[serde(default, skip_serializing_if = "Option::is_none", with = "double_option", rename = $oshort, alias = $oold)]
                pub $ofield: Option<Option<$oty>>,
            )*
        }

        impl HeaderPatch {
            /// Whether no field changed (such a patch is left out of an entry).
            pub fn is_empty(&self) -> bool {
                $(self.$field.is_none() &&)* $(self.$ofield.is_none() &&)* true
            }
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
        input_start: usize = "is" | "inputStart",
        input_len: usize = "il" | "inputLen",
        step_index: u32 = "n" | "stepIndex",
        active_ms: u64 = "ms" | "activeMs",
        usage: Usage = "u" | "usage" with "usage_pair",
        usage_before: Usage = "ub" | "usageBefore" with "usage_pair",
        storage: StorageUsage = "so" | "storage" with "crate::core::cost::storage_wire",
        status: RunStatus = "st" | "status",
        approval_ids: Vec<String> = "ap" | "approvalIds",
        started_tool_call_ids: Vec<String> = "sc" | "startedToolCallIds",
        intents: Vec<String> = "in" | "intents",
        quarantined: bool = "q" | "quarantined",
        attempts: u32 = "at" | "attempts",
        held_results: Vec<ToolResult> = "hr" | "heldResults",
        queued_input: Vec<Message> = "qi" | "queuedInput",
        steered: Vec<String> = "sq" | "steered",
        handoffs: u32 = "ho" | "handoffs",
    }
    optional {
        last_error: ErrorInfo = "le" | "lastError",
        finish_reason: FinishReason = "fr" | "finishReason",
        agent: String = "ag" | "agent",
    }
}

/// A patch's usage on the wire: `[inputTokens, outputTokens]` when no cost is known, `[inputTokens, outputTokens,
/// costNanos]`, or with the cache and reasoning counts `[inputTokens, outputTokens, costNanos or null,
/// cachedInputTokens, cacheWriteTokens, reasoningTokens]` (the cost as an exact integer of nano-dollars); the object
/// form of earlier entries still reads.
///
/// Read by hand with what serde's untagged derive of `Pair(u64, u64)` or `Object(Usage)` accepted for the forms
/// entries had before costs (an array of at most two counts, the missing ones 0, as [`Usage`]'s own sequence form;
/// an object's token counts as [`Usage`] reads them, no cost), without buffering the value into serde's `Content`
/// first.
mod usage_pair {
    use crate::core::transcript::Usage;
    use serde::de::{self, IgnoredAny, MapAccess, SeqAccess, Visitor};
    use serde::{Deserializer, Serialize, Serializer};
    use serde_json::Value;
    use std::fmt;

    pub fn serialize<S: Serializer>(v: &Option<Usage>, s: S) -> Result<S::Ok, S::Error> {
        let Some(u) = v else { return s.serialize_none() };
        let (i, o, c) = (u.input_tokens, u.output_tokens, u.cost);
        match [u.cached_input_tokens, u.cache_write_tokens, u.reasoning_tokens] {
            [0, 0, 0] => match c {
                None => (i, o).serialize(s),
                Some(c) => (i, o, c).serialize(s),
            },
            [cached, written, reasoning] => (i, o, c, cached, written, reasoning).serialize(s),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Usage>, D::Error> {
        d.deserialize_any(WireVisitor).map(Some)
    }

    /// The derive's message when neither form matched.
    fn unmatched<E: de::Error>() -> E {
        E::custom("data did not match any variant of untagged enum Wire")
    }

    struct WireVisitor;

    impl<'de> Visitor<'de> for WireVisitor {
        type Value = Usage;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("untagged enum Wire")
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Usage, A::Error> {
            // `[input, output]` (no cost known), `[input, output, cost]` or
            // `[input, output, cost or null, cached, written, reasoning]`; shorter arrays read their missing
            // counts as 0, as the two-count form always did.
            let mut u = Usage::tokens(0, 0);
            let Some(input) = seq.next_element::<u64>().map_err(|_| unmatched::<A::Error>())? else { return Ok(u) };
            u.input_tokens = input;
            let Some(output) = seq.next_element::<u64>().map_err(|_| unmatched::<A::Error>())? else { return Ok(u) };
            u.output_tokens = output;
            let Some(cost) = seq.next_element::<Option<u64>>().map_err(|_| unmatched::<A::Error>())? else {
                return Ok(u);
            };
            u.cost = cost;
            let mut counts = [0u64; 3];
            for slot in &mut counts {
                match seq.next_element::<u64>().map_err(|_| unmatched::<A::Error>())? {
                    Some(n) => *slot = n,
                    None => break,
                }
            }
            [u.cached_input_tokens, u.cache_write_tokens, u.reasoning_tokens] = counts;
            if seq.next_element::<IgnoredAny>().map_err(|_| unmatched::<A::Error>())?.is_some() {
                return Err(unmatched());
            }
            Ok(u)
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Usage, A::Error> {
            // As [`Usage`] reads an object, with any other field read as a JSON value (the derive's buffer
            // refused a number beyond `f64` there).
            let (mut input, mut output) = (None, None);
            while let Some(key) = map.next_key::<String>().map_err(|_| unmatched::<A::Error>())? {
                let slot = match key.as_str() {
                    "inputTokens" => &mut input,
                    "outputTokens" => &mut output,
                    _ => {
                        map.next_value::<Value>().map_err(|_| unmatched::<A::Error>())?;
                        continue;
                    }
                };
                if slot.is_some() {
                    return Err(unmatched());
                }
                *slot = Some(map.next_value::<u64>().map_err(|_| unmatched::<A::Error>())?);
            }
            Ok(Usage::tokens(input.unwrap_or(0), output.unwrap_or(0)))
        }

        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Usage, E> {
            Err(unmatched())
        }

        fn visit_i64<E: de::Error>(self, _: i64) -> Result<Usage, E> {
            Err(unmatched())
        }

        fn visit_u64<E: de::Error>(self, _: u64) -> Result<Usage, E> {
            Err(unmatched())
        }

        fn visit_f64<E: de::Error>(self, _: f64) -> Result<Usage, E> {
            Err(unmatched())
        }

        fn visit_str<E: de::Error>(self, _: &str) -> Result<Usage, E> {
            Err(unmatched())
        }

        fn visit_unit<E: de::Error>(self) -> Result<Usage, E> {
            Err(unmatched())
        }
    }
}

/// A journal entry: one durable boundary.
///
/// # Wire format
/// One entry is written per boundary, so its envelope is kept short: one- or two-letter field names, and
/// fields at their default (no change) left out:
/// `{"s":seq,"a":at,"b":{"t":"d","f":from,"m":[messages],"h":{changed header fields}}}` for a delta,
/// `{"s":seq,"a":at,"b":{"t":"s","c":{checkpoint}}}` for a snapshot (the checkpoint keeps its own, public, field
/// names). Entries written before this format (`{"seq":…,"at":…,"body":{"t":"delta","from":…,"messages":…,
/// "head":{"stepIndex":…,"usage":{…}}}}`) still read: every short name has the old one as an alias.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JournalEntry {
    /// Position in the run's journal, 1-based and gapless.
    #[serde(rename = "s", alias = "seq")]
    pub seq: u64,
    /// Save time (ms since the epoch, writer's clock).
    #[serde(rename = "a", alias = "at")]
    pub at: u64,
    /// Content.
    #[serde(rename = "b", alias = "body")]
    pub body: EntryBody,
}

/// What an entry holds.
///
/// Read by a hand-written reader (see `entry_body_de` below) with the same forms as serde's internally tagged
/// derive; written by the derive.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "t")]
pub enum EntryBody {
    /// The whole state.
    #[serde(rename = "s", alias = "snapshot")]
    Snapshot {
        /// The checkpoint.
        #[serde(rename = "c", alias = "state")]
        state: Box<Checkpoint>,
    },
    /// What changed since the previous entry.
    #[serde(rename = "d", alias = "delta")]
    Delta {
        /// Number of messages before this delta (a fold checks it: a gap is corruption).
        #[serde(rename = "f", alias = "from")]
        from: usize,
        /// Messages appended.
        #[serde(default, skip_serializing_if = "Vec::is_empty", rename = "m", alias = "messages")]
        messages: Vec<Message>,
        /// The small fields that changed.
        #[serde(default, skip_serializing_if = "HeaderPatch::is_empty", rename = "h", alias = "head")]
        head: HeaderPatch,
        /// New business state, when it changed (`Some(None)` clears it).
        #[serde(
            default,
            skip_serializing_if = "Option::is_none",
            with = "double_option",
            rename = "bs",
            alias = "business_state"
        )]
        business_state: Option<Option<Value>>,
        /// New fingerprint, when it changed.
        #[serde(default, skip_serializing_if = "Option::is_none", rename = "fp", alias = "fingerprint")]
        fingerprint: Option<Fingerprint>,
        /// New extension state, when it changed (`Some(None)` clears it).
        #[serde(default, skip_serializing_if = "Option::is_none", with = "double_option", rename = "x", alias = "ext")]
        ext: Option<Option<Value>>,
    },
}

/// The reader of [`EntryBody`]: what serde's derive for the internally tagged enum accepts (the tag `t`, `s` |
/// `snapshot` or `d` | `delta`, anywhere in the object, or first in an array followed by the variant's fields in
/// order; every short name and its long alias; defaults; duplicates and missing fields refused), without
/// buffering the whole body into serde's `Content` first (which instantiated every type of an entry a second
/// time). Fields before the tag (never written so: the tag comes first) are kept as JSON values and read once the
/// tag is known; unknown fields are read as JSON values and dropped, as the buffering did.
mod entry_body_de {
    use super::{Checkpoint, EntryBody, HeaderPatch, Message};
    use crate::core::fingerprint::Fingerprint;
    use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
    use serde::Deserialize;
    use serde_json::Value;
    use std::fmt;

    /// Field names (the serialized ones, as the derive's errors name them), by slot: `c`, then the delta's.
    const NAMES: [&str; 7] = ["c", "f", "m", "h", "bs", "fp", "x"];

    #[derive(Default)]
    struct Slots {
        state: Option<Box<Checkpoint>>,
        from: Option<usize>,
        messages: Option<Vec<Message>>,
        head: Option<HeaderPatch>,
        business_state: Option<Option<Value>>,
        fingerprint: Option<Option<Fingerprint>>,
        ext: Option<Option<Value>>,
    }

    impl Slots {
        fn is_set(&self, slot: usize) -> bool {
            match slot {
                0 => self.state.is_some(),
                1 => self.from.is_some(),
                2 => self.messages.is_some(),
                3 => self.head.is_some(),
                4 => self.business_state.is_some(),
                5 => self.fingerprint.is_some(),
                _ => self.ext.is_some(),
            }
        }

        fn body<E: de::Error>(self, delta: bool) -> Result<EntryBody, E> {
            Ok(if delta {
                EntryBody::Delta {
                    from: self.from.ok_or_else(|| E::missing_field("f"))?,
                    messages: self.messages.unwrap_or_default(),
                    head: self.head.unwrap_or_default(),
                    business_state: self.business_state,
                    fingerprint: self.fingerprint.flatten(),
                    ext: self.ext,
                }
            } else {
                EntryBody::Snapshot { state: self.state.ok_or_else(|| E::missing_field("c"))? }
            })
        }
    }

    /// The slot of a field of the variant (`None`: not one of its fields, ignored).
    fn slot(delta: bool, key: &str) -> Option<usize> {
        let slot = match key {
            "c" | "state" => 0,
            "f" | "from" => 1,
            "m" | "messages" => 2,
            "h" | "head" => 3,
            "bs" | "business_state" => 4,
            "fp" | "fingerprint" => 5,
            "x" | "ext" => 6,
            _ => return None,
        };
        ((slot != 0) == delta).then_some(slot)
    }

    /// The variant a tag names (`true`: a delta).
    fn variant<E: de::Error>(tag: &str) -> Result<bool, E> {
        match tag {
            "s" | "snapshot" => Ok(false),
            "d" | "delta" => Ok(true),
            _ => Err(E::unknown_variant(tag, &["s", "d"])),
        }
    }

    /// Reads one field's value into its slot (`None`: an ignored field, read as a JSON value and dropped).
    struct Field<'a>(&'a mut Slots, Option<usize>);

    impl<'de> DeserializeSeed<'de> for Field<'_> {
        type Value = ();

        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            let s = self.0;
            match self.1 {
                Some(0) => s.state = Some(Deserialize::deserialize(d)?),
                Some(1) => s.from = Some(Deserialize::deserialize(d)?),
                Some(2) => s.messages = Some(Deserialize::deserialize(d)?),
                Some(3) => s.head = Some(Deserialize::deserialize(d)?),
                Some(4) => s.business_state = Some(Deserialize::deserialize(d)?),
                Some(5) => s.fingerprint = Some(Deserialize::deserialize(d)?),
                Some(_) => s.ext = Some(Deserialize::deserialize(d)?),
                None => drop(Value::deserialize(d)?),
            }
            Ok(())
        }
    }

    struct BodyVisitor;

    impl<'de> Visitor<'de> for BodyVisitor {
        type Value = EntryBody;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("internally tagged enum EntryBody")
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<EntryBody, A::Error> {
            let tag: String = seq.next_element()?.ok_or_else(|| de::Error::missing_field("t"))?;
            let delta = variant(&tag)?;
            let mut s = Slots::default();
            let fields = if delta { 1..7 } else { 0..1 };
            let mut read = 0;
            for slot in fields {
                if seq.next_element_seed(Field(&mut s, Some(slot)))?.is_none() {
                    break;
                }
                read += 1;
            }
            // The derive's sequence form: a required field missing is too short, an element more too long.
            let expected = if delta {
                "struct variant EntryBody::Delta with 6 elements"
            } else {
                "struct variant EntryBody::Snapshot with 1 element"
            };
            if (delta && s.from.is_none()) || (!delta && s.state.is_none()) {
                return Err(de::Error::invalid_length(0, &expected));
            }
            let mut extra = 0;
            while seq.next_element::<Value>()?.is_some() {
                extra += 1;
            }
            if extra > 0 {
                return Err(de::Error::invalid_length(read + extra, &expected));
            }
            s.body(delta)
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<EntryBody, A::Error> {
            let mut delta = None;
            let mut before = Vec::<(String, Value)>::new();
            let mut s = Slots::default();
            while let Some(key) = map.next_key::<String>()? {
                if key == "t" {
                    if delta.is_some() {
                        return Err(de::Error::duplicate_field("t"));
                    }
                    let is_delta = variant(&map.next_value::<String>()?)?;
                    delta = Some(is_delta);
                    // The fields before the tag, now that their types are known.
                    for (key, value) in before.drain(..) {
                        let Some(i) = slot(is_delta, &key) else { continue };
                        if s.is_set(i) {
                            return Err(de::Error::duplicate_field(NAMES[i]));
                        }
                        let text = crate::core::wire::json_text(&value);
                        let mut d = serde_json::Deserializer::from_str(&text);
                        Field(&mut s, Some(i)).deserialize(&mut d).map_err(de::Error::custom)?;
                    }
                    continue;
                }
                match delta {
                    None => before.push((key, map.next_value()?)),
                    Some(is_delta) => {
                        let slot = slot(is_delta, &key);
                        if let Some(i) = slot.filter(|&i| s.is_set(i)) {
                            return Err(de::Error::duplicate_field(NAMES[i]));
                        }
                        map.next_value_seed(Field(&mut s, slot))?;
                    }
                }
            }
            s.body(delta.ok_or_else(|| de::Error::missing_field("t"))?)
        }
    }

    impl<'de> Deserialize<'de> for EntryBody {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<EntryBody, D::Error> {
            d.deserialize_any(BodyVisitor)
        }
    }
}

/// Deepest nesting (objects and arrays) of an encoded snapshot entry a store accepts; a delta may be nested
/// one level less (see [`JournalEntry::encode`]).
///
/// serde_json reads at most 127 levels. A store may answer its entries inside one JSON array (the Durable
/// Object store does), one level more: 126. And a store may write the state a delta leads to as a snapshot of
/// its own (the journal store's periodic snapshots, the memory store's compaction), in which every part a delta
/// carries (messages, business state, extension state) sits one level deeper than in the delta: so a delta gets
/// one level less, and a snapshot a store makes of accepted entries is never refused.
pub const MAX_ENTRY_DEPTH: usize = 126;

/// The nesting depth of JSON text (objects and arrays; brackets inside strings do not count). One pass over
/// the bytes, nothing allocated. The text is assumed to be well-formed JSON (as serde_json writes it).
pub fn json_text_depth(text: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for &b in text.as_bytes() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

impl JournalEntry {
    /// The entry as every store writes it: its JSON text, which reads back.
    ///
    /// The one encoder of journal entries, so that what is committed can always be read back, whatever field
    /// carries the value: an entry nested deeper than [`MAX_ENTRY_DEPTH`] (a snapshot) or one level less (a
    /// delta) is refused with `STEADFAST_STORE_FAILED` (not retryable: it would never fit), and the store writes
    /// nothing. The values that enter a run from outside are held to 64 levels long before this (the doors of
    /// `core::limits`); this is the last line, checked on the encoded text (one pass, no allocation).
    pub fn encode(&self) -> Result<String> {
        let text = serde_json::to_string(self)
            .map_err(|e| super::error::Error::internal(format!("journal entry {} cannot be encoded: {e}", self.seq)))?;
        let limit = match self.body {
            EntryBody::Snapshot { .. } => MAX_ENTRY_DEPTH,
            EntryBody::Delta { .. } => MAX_ENTRY_DEPTH - 1,
        };
        let depth = json_text_depth(&text);
        if depth > limit {
            return Err(super::error::Error::new(
                super::error::ErrorCode::StoreFailed,
                format!(
                    "journal entry {} is nested {depth} levels deep; at most {limit} levels can be read back, so it was \
                     not written",
                    self.seq
                ),
            ));
        }
        Ok(text)
    }
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

    /// Whether `resume` has something to do: the run is unfinished, or it finished on its budget (it goes on
    /// once the limit is raised, see [`crate::core::budget`]).
    pub fn resumable(&self) -> bool {
        self.status != RunStatus::Finished || self.finish_reason == Some(FinishReason::BudgetExceeded)
    }

    /// The run's usage as its state and results show it: [`Checkpoint::usage`] with the storage usage
    /// ([`Checkpoint::storage`]) as its `storage` when any was counted.
    pub fn usage_view(&self) -> Usage {
        Usage { storage: (!self.storage.is_empty()).then_some(self.storage), ..self.usage }
    }

    /// The header fields.
    pub fn header(&self) -> Header {
        Header {
            input_start: self.input_start,
            input_len: self.input_len,
            step_index: self.step_index,
            usage: self.usage,
            active_ms: self.active_ms,
            usage_before: self.total_usage.since(self.usage),
            storage: self.storage,
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
            steered: self.steered.clone(),
            agent: self.agent.clone(),
            handoffs: self.handoffs,
        }
    }

    fn set_header(&mut self, h: Header) {
        self.input_start = h.input_start;
        self.input_len = h.input_len;
        self.step_index = h.step_index;
        self.usage = h.usage;
        self.active_ms = h.active_ms;
        self.total_usage = h.usage_before;
        self.total_usage.add(h.usage);
        self.storage = h.storage;
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
        self.steered = h.steered;
        self.agent = h.agent;
        self.handoffs = h.handoffs;
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

    /// What a finished run answers the run that called it (a sub-agent's lead): its last text, and for a run
    /// that stopped on its budget ([`FinishReason::BudgetExceeded`]) a line saying so, so the caller's model does not
    /// read a cut-short answer (often empty: the last turn asked for tools) as the sub-agent's result.
    pub fn answer(&self) -> String {
        let text = self.last_text();
        if self.finish_reason != Some(FinishReason::BudgetExceeded) {
            return text;
        }
        let stop = "(The sub-agent stopped on its budget before a final answer.)";
        if text.is_empty() {
            stop.into()
        } else {
            format!("{text}\n\n{stop}")
        }
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

    /// A model turn changes the run's usage and the conversation's by the same amount: its entry carries the
    /// run's usage only (the usage before the run is unchanged), and folding it gives the conversation's total.
    /// A continued conversation (the run's usage reset) carries the usage before it once.
    #[test]
    fn a_run_stopped_on_its_budget_answers_its_caller_that_it_did() {
        let mut cp = Checkpoint::new("r");
        cp.messages = vec![Message::user("go"), Message::assistant("half of it", vec![])];
        cp.finish_reason = Some(FinishReason::Stop);
        assert_eq!(cp.answer(), "half of it");
        cp.finish_reason = Some(FinishReason::BudgetExceeded);
        assert_eq!(cp.answer(), "half of it\n\n(The sub-agent stopped on its budget before a final answer.)");
        cp.messages.truncate(1);
        assert_eq!(cp.answer(), "(The sub-agent stopped on its budget before a final answer.)");
    }

    #[test]
    fn an_entry_carries_the_conversation_usage_only_when_the_usage_before_the_run_changes() {
        let u = |i, o| Usage::tokens(i, o);
        let mut prev = Checkpoint::new("u");
        (prev.usage, prev.total_usage) = (u(8, 1), u(28, 4));
        let mut next = prev.clone();
        (next.usage, next.total_usage) = (u(10, 2), u(30, 5));
        let patch = next.header().diff(&prev.header());
        assert_eq!((patch.usage, patch.usage_before), (Some(u(10, 2)), None));
        assert!(!serde_json::to_string(&patch).unwrap().contains("\"ub\""));
        let mut folded = prev.clone();
        let mut h = folded.header();
        h.apply(&patch);
        folded.set_header(h);
        assert_eq!((folded.usage, folded.total_usage), (u(10, 2), u(30, 5)));
        // The conversation continues: the run's usage starts again from zero, the total stays.
        let mut cont = next.clone();
        cont.usage = Usage::default();
        let patch = cont.header().diff(&next.header());
        assert_eq!(patch.usage_before, Some(u(30, 5)));
        let mut h = next.header();
        h.apply(&patch);
        let mut folded = next.clone();
        folded.set_header(h);
        assert_eq!((folded.usage, folded.total_usage), (Usage::default(), u(30, 5)));
    }

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

    /// Entries written before the short wire format (long field names, usage as an object, an empty `head`)
    /// still read, and read as the same entry the short format encodes.
    #[test]
    fn entries_in_the_long_format_of_earlier_versions_still_read() {
        let old_delta = r#"{"seq":7,"at":1700000000123,"body":{"t":"delta","from":4,"messages":[{"role":"assistant","content":"hi"}],"head":{"inputLen":1,"stepIndex":3,"usage":{"inputTokens":20,"outputTokens":10},"status":"awaiting-approval","approvalIds":["apr_1"],"startedToolCallIds":["c1"],"intents":["c2"],"attempts":2,"heldResults":[{"toolCallId":"c3","name":"t","content":"x","isError":false,"kind":"execution"}],"queuedInput":[{"role":"user","content":"later"}],"lastError":{"code":"STEADFAST_INTERNAL","message":"boom","retryable":false},"finishReason":"awaiting-approval"},"business_state":{"n":1},"fingerprint":{"model":"m","tools":{},"instructions":"de7d1b721a1e0632","hash":"2bb5bdd1e8e4e377"},"ext":null}}"#;
        let old_result = r#"{"seq":3,"at":1700000001000,"body":{"t":"delta","from":2,"messages":[{"role":"tool","toolCallId":"call_0_0","name":"lookup","content":"lookup 0","isError":false,"kind":"execution"}],"head":{}}}"#;
        let old_snapshot = r#"{"seq":1,"at":1700000000000,"body":{"t":"snapshot","state":{"runId":"p","messages":[{"role":"user","content":"go"}],"inputStart":0,"inputLen":1,"stepIndex":0,"usage":{"inputTokens":0,"outputTokens":0},"status":"in-progress","fingerprint":{"model":"mock","tools":{"lookup":"a2c799262a3ce3c1"},"instructions":"e3b0c44298fc1c14","hash":"af4e3511b7f55eb6"},"attempts":0,"seq":1,"savedAt":1700000000000}}}"#;
        let d: JournalEntry = serde_json::from_str(old_delta).unwrap();
        assert_eq!((d.seq, d.at), (7, 1_700_000_000_123));
        let EntryBody::Delta { from, messages, head, business_state, fingerprint, ext } = &d.body else {
            panic!("a delta: {d:?}")
        };
        assert_eq!((*from, messages.len()), (4, 1));
        assert_eq!(head.step_index, Some(3));
        assert_eq!(head.input_len, Some(1));
        assert_eq!(head.usage, Some(Usage::tokens(20, 10)));
        assert_eq!(head.status, Some(RunStatus::AwaitingApproval));
        assert_eq!(head.approval_ids.as_deref(), Some(&["apr_1".to_string()][..]));
        assert_eq!(head.started_tool_call_ids.as_deref(), Some(&["c1".to_string()][..]));
        assert_eq!(head.intents.as_deref(), Some(&["c2".to_string()][..]));
        assert_eq!(head.attempts, Some(2));
        assert_eq!(head.held_results.as_ref().map(Vec::len), Some(1));
        assert_eq!(head.queued_input.as_ref().map(Vec::len), Some(1));
        assert_eq!(head.last_error.as_ref().and_then(|e| e.as_ref()).map(|e| e.message.as_str()), Some("boom"));
        assert_eq!(head.finish_reason, Some(Some(FinishReason::AwaitingApproval)));
        assert_eq!(business_state, &Some(Some(serde_json::json!({"n": 1}))));
        assert_eq!(fingerprint.as_ref().map(|f| f.model.as_str()), Some("m"));
        assert_eq!(ext, &Some(None), "a null ext still means cleared");
        // Written again, it takes the short format and reads back the same.
        let short = serde_json::to_string(&d).unwrap();
        assert!(short.len() < old_delta.len(), "{short}");
        assert!(short.starts_with(r#"{"s":7,"a":1700000000123,"b":{"t":"d","f":4,"m":"#), "{short}");
        assert_eq!(serde_json::from_str::<JournalEntry>(&short).unwrap(), d);

        let r: JournalEntry = serde_json::from_str(old_result).unwrap();
        let s: JournalEntry = serde_json::from_str(old_snapshot).unwrap();
        assert!(matches!(&r.body, EntryBody::Delta { head, .. } if head.is_empty()));
        let cp = Checkpoint::fold("p", [&s]).unwrap().unwrap();
        assert_eq!((cp.seq, cp.messages.len(), cp.input_len), (1, 1, 1));
        let mut cp2 = cp.clone();
        let r2 = JournalEntry { seq: 2, ..r.clone() };
        let r2 = JournalEntry {
            body: match r2.body {
                EntryBody::Delta { messages, head, business_state, fingerprint, ext, .. } => {
                    EntryBody::Delta { from: 1, messages, head, business_state, fingerprint, ext }
                }
                other => other,
            },
            ..r2
        };
        cp2.apply(&r2).unwrap();
        assert_eq!(cp2.messages.len(), 2);
        // A result entry in the short format: no empty head, short envelope.
        let short = serde_json::to_string(&r).unwrap();
        assert_eq!(
            short,
            r#"{"s":3,"a":1700000001000,"b":{"t":"d","f":2,"m":[{"role":"tool","toolCallId":"call_0_0","name":"lookup","content":"lookup 0","isError":false,"kind":"execution"}]}}"#
        );
        let s_short = serde_json::to_string(&s).unwrap();
        assert!(s_short.starts_with(r#"{"s":1,"a":1700000000000,"b":{"t":"s","c":{"runId":"p""#), "{s_short}");
        assert_eq!(serde_json::from_str::<JournalEntry>(&s_short).unwrap(), s);
    }

    /// The derive the hand-written usage reader replaced, kept to compare with.
    #[derive(Debug, Deserialize)]
    #[serde(untagged)]
    enum Wire {
        Pair(u64, u64),
        Object(Usage),
    }

    /// The usage reader accepts what the derive accepted, as the same usage, and refuses what it refused, with
    /// its message: from JSON text and from JSON values, on generated arrays and objects.
    #[test]
    fn the_usage_reader_reads_what_the_derive_read() {
        #[derive(Deserialize)]
        struct Patch {
            #[serde(default, with = "usage_pair")]
            u: Option<Usage>,
        }
        let items = ["1", "2", "0", "-1", "1.5", "18446744073709551615", "1e400", r#""x""#, "null", "[]", "{}"];
        let mut texts: Vec<String> = [
            "null",
            "true",
            "7",
            "-7",
            "7.5",
            r#""x""#,
            "{}",
            r#"{"inputTokens":1}"#,
            r#"{"inputTokens":1,"outputTokens":2}"#,
            r#"{"outputTokens":2,"zz":[1]}"#,
            r#"{"inputTokens":1,"inputTokens":2}"#,
            r#"{"inputTokens":-1}"#,
            r#"{"inputTokens":1.0}"#,
            r#"{"inputTokens":null}"#,
            r#"{"zz":1e400}"#,
        ]
        .map(String::from)
        .to_vec();
        let unmatched = "data did not match any variant of untagged enum Wire";
        for a in items {
            texts.push(format!("[{a}]"));
            for b in items {
                texts.push(format!("[{a},{b}]"));
                // Three and more are the forms with a cost (the derive refused them): read by their own rule.
                for c in ["3", "null", "1e400"] {
                    let text = format!("[{a},{b},{c}]");
                    let read = serde_json::from_str::<Patch>(&format!(r#"{{"u":{text}}}"#)).map(|p| p.u.unwrap());
                    match (a.parse::<u64>(), b.parse::<u64>(), c) {
                        (Ok(i), Ok(o), "3" | "null") => {
                            // Ignored: `null` is no cost.
                            let cost = c.parse().ok();
                            assert_eq!(read.unwrap(), Usage { cost, ..Usage::tokens(i, o) }, "{text}")
                        }
                        _ => assert!(read.unwrap_err().to_string().starts_with(unmatched), "{text}"),
                    }
                }
            }
        }
        for text in &texts {
            let new = serde_json::from_str::<Patch>(&format!(r#"{{"u":{text}}}"#)).map(|p| p.u.unwrap());
            let old = serde_json::from_str::<Wire>(text);
            let old = old.map(|w| match w {
                Wire::Pair(input_tokens, output_tokens) => Usage::tokens(input_tokens, output_tokens),
                Wire::Object(u) => u,
            });
            assert_eq!(new.is_ok(), old.is_ok(), "{text}: {new:?} / {old:?}");
            if let (Ok(new), Ok(old)) = (&new, &old) {
                assert_eq!(new, old, "{text}");
            }
            let Ok(value) = serde_json::from_str::<Value>(text) else { continue };
            let new = serde_json::from_value::<Patch>(serde_json::json!({ "u": value.clone() })).map(|p| p.u.unwrap());
            let old = serde_json::from_value::<Wire>(value);
            match (new, old) {
                (Ok(new), Ok(Wire::Pair(i, o))) => {
                    assert_eq!(new, Usage::tokens(i, o), "{text}")
                }
                (Ok(new), Ok(Wire::Object(u))) => assert_eq!(new, u, "{text}"),
                (Err(new), Err(old)) => {
                    assert_eq!((new.to_string(), old.to_string()), (unmatched.into(), unmatched.into()))
                }
                other => panic!("{text}: {other:?}"),
            }
        }
    }

    /// Every usage a patch carries reads back the same, cost and cache and reasoning counts included, in the
    /// shortest of its forms.
    #[test]
    fn a_patch_usage_round_trips_in_its_shortest_form() {
        #[derive(Serialize, Deserialize)]
        struct Patch {
            #[serde(default, with = "usage_pair")]
            u: Option<Usage>,
        }
        use crate::rng::Rng;
        let rng = crate::rng::SplitMix64::new(7);
        for case in 0..2_000 {
            let n = |m: u64| if rng.next_u64() % 3 == 0 { 0 } else { rng.next_u64() % m };
            let u = Usage {
                cached_input_tokens: n(50),
                cache_write_tokens: n(50),
                reasoning_tokens: n(50),
                cost: (n(4) > 0).then(|| n(u64::MAX)),
                ..Usage::tokens(n(u64::MAX), n(1_000))
            };
            let text = serde_json::to_string(&Patch { u: Some(u) }).unwrap();
            let len = text.matches(',').count() + 1;
            let details = u.cached_input_tokens + u.cache_write_tokens + u.reasoning_tokens > 0;
            assert_eq!(
                len,
                if details {
                    6
                } else if u.cost.is_some() {
                    3
                } else {
                    2
                },
                "case {case}: {text}"
            );
            assert_eq!(serde_json::from_str::<Patch>(&text).unwrap().u, Some(u), "case {case}: {text}");
        }
        let seven = r#"{"u":[1,2,3,4,5,6,7]}"#;
        assert!(serde_json::from_str::<Patch>(seven).is_err());
    }

    /// The derive the hand-written reader of [`EntryBody`] replaced, kept to compare with.
    #[derive(Deserialize)]
    #[serde(tag = "t")]
    enum DerivedBody {
        #[serde(rename = "s", alias = "snapshot")]
        Snapshot {
            #[serde(rename = "c", alias = "state")]
            state: Box<Checkpoint>,
        },
        #[serde(rename = "d", alias = "delta")]
        Delta {
            #[serde(rename = "f", alias = "from")]
            from: usize,
            #[serde(default, rename = "m", alias = "messages")]
            messages: Vec<Message>,
            #[serde(default, rename = "h", alias = "head")]
            head: HeaderPatch,
            #[serde(default, with = "double_option", rename = "bs", alias = "business_state")]
            business_state: Option<Option<Value>>,
            #[serde(default, rename = "fp", alias = "fingerprint")]
            fingerprint: Option<Fingerprint>,
            #[serde(default, with = "double_option", rename = "x", alias = "ext")]
            ext: Option<Option<Value>>,
        },
    }

    impl From<DerivedBody> for EntryBody {
        fn from(b: DerivedBody) -> EntryBody {
            match b {
                DerivedBody::Snapshot { state } => EntryBody::Snapshot { state },
                DerivedBody::Delta { from, messages, head, business_state, fingerprint, ext } => {
                    EntryBody::Delta { from, messages, head, business_state, fingerprint, ext }
                }
            }
        }
    }

    /// The hand-written reader accepts what the derive accepted, as the same body, and refuses what it refused.
    #[test]
    fn the_entry_body_reader_reads_what_the_derive_read() {
        let cp = r#"{"runId":"p","messages":[{"role":"user","content":"go"}],"stepIndex":2}"#;
        let fp = r#"{"model":"m","tools":{},"instructions":"de7d1b721a1e0632","hash":"2bb5bdd1e8e4e377"}"#;
        let msgs = r#"[{"role":"assistant","content":"hi","toolCalls":[{"id":"c","name":"t","args":{"a":[1]}}]}]"#;
        let head = r#"{"n":3,"u":[1,2],"ub":{"inputTokens":5},"le":null,"fr":"stop","st":"finished"}"#;
        let bodies = [
            format!(r#"{{"t":"s","c":{cp}}}"#),
            format!(r#"{{"t":"snapshot","state":{cp}}}"#),
            format!(r#"{{"c":{cp},"t":"s"}}"#),
            format!(r#"{{"c":{cp},"zz":1e400,"t":"s"}}"#),
            format!(r#"{{"c":{cp},"t":"s","f":"not a number"}}"#),
            format!(r#"{{"t":"s","c":{cp},"state":{cp}}}"#),
            format!(r#"{{"c":{cp},"state":{cp},"t":"s"}}"#),
            format!(r#"{{"t":"s","t":"s","c":{cp}}}"#),
            format!(r#"{{"t":"x","c":{cp}}}"#),
            format!(r#"{{"t":1,"c":{cp}}}"#),
            format!(r#"{{"c":{cp}}}"#),
            r#"{"t":"s"}"#.to_string(),
            r#"{"t":"s","c":null}"#.to_string(),
            r#"{"t":"d"}"#.to_string(),
            r#"{"t":"d","f":0}"#.to_string(),
            r#"{"t":"d","f":-1}"#.to_string(),
            r#"{"t":"d","f":1.5}"#.to_string(),
            r#"{"t":"d","f":"1"}"#.to_string(),
            r#"{"t":"d","f":0,"from":1}"#.to_string(),
            r#"{"from":0,"t":"delta"}"#.to_string(),
            r#"{"f":0,"bs":null,"x":{"k":1},"t":"d"}"#.to_string(),
            format!(r#"{{"t":"d","f":4,"m":{msgs},"h":{head},"bs":{{"n":1}},"fp":{fp},"x":null}}"#),
            format!(r#"{{"t":"delta","from":4,"messages":{msgs},"head":{head},"business_state":null,"fingerprint":{fp},"ext":[1]}}"#),
            format!(r#"{{"h":{head},"m":{msgs},"t":"d","f":4,"fp":null,"c":7}}"#),
            format!(r#"{{"t":"d","f":4,"fp":{fp},"fingerprint":{fp}}}"#),
            format!(r#"{{"fp":{fp},"t":"d","f":4,"fingerprint":null}}"#),
            r#"{"t":"d","f":4,"h":{"u":{"inputTokens":1,"outputTokens":2,"inputTokens":3}}}"#.to_string(),
            r#"{"t":"d","f":4,"h":{"u":[1,2,3]}}"#.to_string(),
            r#"{"t":"d","f":4,"h":{"u":[1]}}"#.to_string(),
            r#"{"t":"d","f":4,"h":{"u":[]}}"#.to_string(),
            r#"{"t":"d","f":4,"h":{"u":[-1,2]}}"#.to_string(),
            r#"{"t":"d","f":4,"h":{"u":null}}"#.to_string(),
            r#"{"t":"d","f":4,"h":{"u":"x"}}"#.to_string(),
            r#"{"t":"d","f":4,"h":{"u":{"inputTokens":1.5}}}"#.to_string(),
            r#"{"t":"d","f":4,"h":{"usage":{"inputTokens":7,"other":1}, "le":{"code":"STEADFAST_INTERNAL","message":"m","retryable":false}}}"#.to_string(),
            r#"{"t":"d","f":4,"m":[{"role":"nobody"}]}"#.to_string(),
            r#"{"t":"d","f":4,"m":{}}"#.to_string(),
            r#"{"t":"d","f":4,"h":null}"#.to_string(),
            r#"{"t":"d","f":4,"h":[]}"#.to_string(),
            r#"{"t":"d","f":4,"x":1,"ext":2}"#.to_string(),
            r#"{}"#.to_string(),
            r#"[]"#.to_string(),
            r#"["d"]"#.to_string(),
            r#"["d",3]"#.to_string(),
            r#"["d",3,[],{"n":1},null,null,{"k":1}]"#.to_string(),
            r#"["d",3,[],{"n":1},null,null,{"k":1},8]"#.to_string(),
            format!(r#"["s",{cp}]"#),
            format!(r#"["s",{cp},1]"#),
            r#"["s"]"#.to_string(),
            r#"["q",1]"#.to_string(),
            r#"[1,1]"#.to_string(),
            r#""d""#.to_string(),
            r#"null"#.to_string(),
            r#"7"#.to_string(),
        ];
        for body in &bodies {
            for text in [body.clone(), format!("[{body}]")] {
                let new = serde_json::from_str::<Vec<EntryBody>>(&text)
                    .or_else(|_| serde_json::from_str(&text).map(|b| vec![b]))
                    .map_err(|e| e.to_string());
                let old = serde_json::from_str::<Vec<DerivedBody>>(&text)
                    .or_else(|_| serde_json::from_str(&text).map(|b| vec![b]))
                    .map(|v| v.into_iter().map(EntryBody::from).collect::<Vec<_>>())
                    .map_err(|e| e.to_string());
                assert_eq!(new.is_ok(), old.is_ok(), "{text}: {new:?} / {old:?}");
                if let (Ok(new), Ok(old)) = (&new, &old) {
                    assert_eq!(new, old, "{text}");
                }
            }
        }
    }

    fn nested(depth: usize) -> Value {
        let mut v = serde_json::json!("a [string] with {brackets} and \"quotes\\");
        for i in 0..depth {
            v = if i % 2 == 0 { serde_json::json!([v, "]"]) } else { serde_json::json!({ "k}": v }) };
        }
        v
    }

    fn delta_with_state(depth: usize) -> JournalEntry {
        JournalEntry {
            seq: 2,
            at: 1,
            body: EntryBody::Delta {
                from: 0,
                messages: vec![],
                head: HeaderPatch::default(),
                business_state: Some(Some(nested(depth))),
                fingerprint: None,
                ext: None,
            },
        }
    }

    /// The text depth is the value depth, whatever brackets and escapes the strings hold.
    #[test]
    fn the_depth_of_encoded_text_counts_containers_not_brackets_in_strings() {
        for d in [0, 1, 2, 7, 64, 125, 126, 127, 300] {
            let v = nested(d);
            assert_eq!(json_text_depth(&serde_json::to_string(&v).unwrap()), crate::core::limits::json_depth(&v));
        }
        assert_eq!(json_text_depth(r#""[[[""#), 0);
        assert_eq!(json_text_depth(r#"{"a":"\\","b":[{}],"c":"\"]"}"#), 3);
    }

    /// The encoder's limit is serde_json's, less what the stores add: every entry it accepts reads back, alone
    /// and inside a store's answer array, and so does the snapshot a store makes of the state it leads to; the
    /// first depth it refuses would not read back inside the array (the limit is not lower than it must be).
    #[test]
    fn every_entry_the_encoder_accepts_reads_back_and_the_first_it_refuses_would_not() {
        let mut accepted = 0;
        for depth in 100..140 {
            let delta = delta_with_state(depth);
            let mut state = Checkpoint::new("r");
            state.seq = 1;
            state.apply(&delta).unwrap();
            let snapshot = JournalEntry { seq: 2, at: 1, body: EntryBody::Snapshot { state: Box::new(state) } };
            for (kind, entry) in [("delta", &delta), ("snapshot", &snapshot)] {
                let limit = if kind == "delta" { MAX_ENTRY_DEPTH - 1 } else { MAX_ENTRY_DEPTH };
                let text_depth = json_text_depth(&serde_json::to_string(entry).unwrap());
                match entry.encode() {
                    Ok(text) => {
                        accepted += 1;
                        assert!(text_depth <= limit, "{kind} at {text_depth}");
                        assert_eq!(&serde_json::from_str::<JournalEntry>(&text).unwrap(), entry, "{kind}");
                        let listed: Vec<JournalEntry> = serde_json::from_str(&format!("[{text}]")).unwrap();
                        assert_eq!(&listed[0], entry, "{kind} {text_depth} inside an array");
                    }
                    Err(e) => {
                        assert_eq!(e.code, super::super::error::ErrorCode::StoreFailed);
                        assert!(!e.retryable);
                        assert!(e.message.contains(&format!("nested {text_depth} levels")), "{}", e.message);
                        assert!(text_depth > limit, "{kind} at {text_depth} refused");
                        if text_depth == MAX_ENTRY_DEPTH + 1 {
                            let text = serde_json::to_string(entry).unwrap();
                            assert!(serde_json::from_str::<Vec<JournalEntry>>(&format!("[{text}]")).is_err());
                        }
                    }
                }
            }
            // A store's own snapshot of what an accepted delta leads to is accepted too.
            if delta.encode().is_ok() {
                assert!(snapshot.encode().is_ok(), "the snapshot after a delta {depth} deep");
            }
        }
        assert!(accepted > 20, "{accepted}");
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
