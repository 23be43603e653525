//! Transcript types: messages, tool calls, tool results, usage.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One tool call asked for by the model.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
pub struct ToolCall {
    /// Call id, unique within the run (the idempotency key handed to the tool).
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Arguments (JSON).
    #[serde(default)]
    pub args: Value,
    /// Why the arguments cannot be used, when the runtime found them unusable (nested deeper than the checkpoint
    /// accepts, …): the call is answered with a `validation` result and never runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub invalid: Option<String>,
}

/// How a tool result came to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "kebab-case")]
pub enum ResultKind {
    /// The tool ran (successfully or not).
    Execution,
    /// The arguments failed validation, or the tool is unknown; the tool did not run.
    Validation,
    /// A hook or guard denied the call; the tool did not run.
    Denied,
    /// A reviewer rejected the call; the tool did not run.
    Rejected,
    /// The call was never run (e.g. a legacy snapshot without the remaining calls).
    NotRun,
    /// The run was aborted before the call finished.
    Cancelled,
    /// The process died while the (approved) call ran; it may or may not have taken effect.
    Interrupted,
}

crate::core::wire::unit_enum_de!(ResultKind {
    "execution" => Execution,
    "validation" => Validation,
    "denied" => Denied,
    "rejected" => Rejected,
    "not-run" => NotRun,
    "cancelled" => Cancelled,
    "interrupted" => Interrupted,
});

/// A tool result as recorded in the transcript.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase")]
pub struct ToolResult {
    /// The call this answers.
    pub tool_call_id: String,
    /// The tool's name (providers need it).
    pub name: String,
    /// Text the model reads.
    pub content: String,
    /// Whether the result reports a failure.
    #[serde(default)]
    pub is_error: bool,
    /// How the result came to be.
    pub kind: ResultKind,
    /// What a sub-agent spent for this call (its child run's usage), counted in this run's usage when the result
    /// was recorded. Absent for every other tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub usage: Option<Usage>,
}

/// A transcript message.
// Read by a hand-written reader (see `message_de` below) with the same forms as serde's internally tagged derive;
// written by the derive. (A plain comment: the doc comment is the generated TypeScript type's too.)
#[derive(Clone, Debug, PartialEq, Serialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum Message {
    /// System prompt.
    System {
        /// Text.
        content: String,
    },
    /// User turn.
    User {
        /// Text.
        content: String,
    },
    /// Model turn, possibly asking for tools.
    Assistant {
        /// Text.
        #[serde(default)]
        content: String,
        /// Tool calls, in the order the model gave them.
        #[serde(default, rename = "toolCalls", skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
        /// Reasoning blocks the model produced before its text and calls, exactly as the provider sent them
        /// (Anthropic `{"type": "thinking", thinking, signature}` and `{"type": "redacted_thinking", data}`):
        /// sent back unchanged to that provider, which checks the signature and refuses a tool-use turn whose
        /// thinking was dropped or changed. Absent in transcripts written before they were kept.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        reasoning: Vec<Value>,
        /// The tokens this turn used, as its provider reported them (absent when it reported none, in
        /// transcripts written before they were kept, and in turns not made by a model call).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "ts", ts(optional))]
        usage: Option<Usage>,
        /// The model that answered, when it was not the agent's own: a fallback model took the call after the
        /// agent's model failed (absent otherwise).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "ts", ts(optional))]
        model: Option<String>,
    },
    /// A tool result.
    Tool(ToolResult),
}

/// The reader of [`Message`]: what serde's derive for the internally tagged enum accepts (the tag `role`,
/// `system` | `user` | `assistant` | `tool`, anywhere in the object, or first in an array followed by the
/// variant's fields in order; defaults; duplicates and missing fields refused; unknown fields read as JSON values
/// and dropped), without buffering the whole message into serde's `Content` first (which instantiated every
/// type of a message a second time). `content` (a string in every variant) is read where it stands; the other
/// fields before the tag (never written so: the tag comes first) are kept as JSON values and read once the tag
/// is known.
///
/// Unlike the derive, which checked the whole message as JSON values first, from JSON text it accepts a repeated
/// key inside a tool call or usage given before the tag (a JSON value keeps the last), and a number beyond `f64`
/// or a lone surrogate escape in an unknown field of a tool call or usage (serde skips those unread), as the
/// [`crate::core::checkpoint::EntryBody`] reader does for its nested types.
pub(crate) mod message_de {
    use super::{Message, ResultKind, ToolCall, ToolResult, Usage};
    use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Unexpected, Visitor};
    use serde::Deserialize;
    use serde_json::Value;
    use std::fmt;

    const VARIANTS: &[&str] = &["system", "user", "assistant", "tool"];

    /// Field names, by slot.
    const NAMES: [&str; 9] =
        ["content", "toolCalls", "reasoning", "usage", "toolCallId", "name", "isError", "kind", "model"];

    #[derive(Default)]
    struct Slots {
        content: Option<String>,
        tool_calls: Option<Vec<ToolCall>>,
        reasoning: Option<Vec<Value>>,
        usage: Option<Option<Usage>>,
        tool_call_id: Option<String>,
        name: Option<String>,
        is_error: Option<bool>,
        kind: Option<ResultKind>,
        model: Option<Option<String>>,
    }

    impl Slots {
        fn is_set(&self, slot: usize) -> bool {
            match slot {
                0 => self.content.is_some(),
                1 => self.tool_calls.is_some(),
                2 => self.reasoning.is_some(),
                3 => self.usage.is_some(),
                4 => self.tool_call_id.is_some(),
                5 => self.name.is_some(),
                6 => self.is_error.is_some(),
                7 => self.kind.is_some(),
                _ => self.model.is_some(),
            }
        }

        /// The message of variant `v` (an index into `VARIANTS`), its required fields checked in the derive's
        /// order.
        fn message<E: de::Error>(self, v: u8) -> Result<Message, E> {
            fn req<T, E: de::Error>(slot: Option<T>, name: &'static str) -> Result<T, E> {
                slot.ok_or_else(|| E::missing_field(name))
            }
            Ok(match v {
                0 => Message::System { content: req(self.content, "content")? },
                1 => Message::User { content: req(self.content, "content")? },
                2 => Message::Assistant {
                    content: self.content.unwrap_or_default(),
                    tool_calls: self.tool_calls.unwrap_or_default(),
                    reasoning: self.reasoning.unwrap_or_default(),
                    usage: self.usage.flatten(),
                    model: self.model.flatten(),
                },
                _ => Message::Tool(ToolResult {
                    tool_call_id: req(self.tool_call_id, "toolCallId")?,
                    name: req(self.name, "name")?,
                    content: req(self.content, "content")?,
                    is_error: self.is_error.unwrap_or_default(),
                    kind: req(self.kind, "kind")?,
                    usage: self.usage.flatten(),
                }),
            })
        }
    }

    /// The slots of variant `v`'s fields in their declared order (a tool result's are [`ToolResult`]'s), and
    /// what the derive's sequence form expects.
    fn fields(v: u8) -> (&'static [usize], &'static str) {
        match v {
            0 => (&[0], "struct variant Message::System with 1 element"),
            1 => (&[0], "struct variant Message::User with 1 element"),
            2 => (&[0, 1, 2, 3, 8], "struct variant Message::Assistant with 5 elements"),
            _ => (&[4, 5, 0, 6, 7, 3], "struct ToolResult with 6 elements"),
        }
    }

    /// The slot of a field of variant `v` (`None`: not one of its fields, ignored).
    fn slot(v: u8, key: &str) -> Option<usize> {
        let slot = NAMES.iter().position(|n| *n == key)?;
        fields(v).0.contains(&slot).then_some(slot)
    }

    /// Whether the field in `slot` has no default in variant `v`.
    fn required(v: u8, slot: usize) -> bool {
        match v {
            0 | 1 => true,
            2 => false,
            _ => !matches!(slot, 3 | 6),
        }
    }

    /// The tag's value: a variant name (or, from a deserializer that offers integers as identifiers, its index),
    /// as the derive's variant identifier reads it.
    ///
    /// `RoleSeed(true)`: a role as read from serde's buffer (a message in an untagged enum's variant), which offers
    /// a non-negative integer to an identifier, where JSON text and values offer only strings.
    struct Role(u8);

    struct RoleSeed(bool);

    impl<'de> DeserializeSeed<'de> for RoleSeed {
        type Value = Role;

        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Role, D::Error> {
            if self.0 {
                d.deserialize_any(RoleVisitor)
            } else {
                d.deserialize_identifier(RoleVisitor)
            }
        }
    }

    struct RoleVisitor;

    impl<'de> Visitor<'de> for RoleVisitor {
        type Value = Role;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("variant identifier")
        }

        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Role, E> {
            match v {
                0..=3 => Ok(Role(v as u8)),
                _ => Err(E::invalid_value(Unexpected::Unsigned(v), &"variant index 0 <= i < 4")),
            }
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<Role, E> {
            match VARIANTS.iter().position(|n| *n == v) {
                Some(i) => Ok(Role(i as u8)),
                None => Err(E::unknown_variant(v, VARIANTS)),
            }
        }

        fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Role, E> {
            match VARIANTS.iter().position(|n| n.as_bytes() == v) {
                Some(i) => Ok(Role(i as u8)),
                None => Err(E::unknown_variant(&String::from_utf8_lossy(v), VARIANTS)),
            }
        }
    }

    /// Reads one field's value into its slot (`None`: an ignored field, read as a JSON value and dropped).
    struct Field<'a>(&'a mut Slots, Option<usize>);

    impl<'de> DeserializeSeed<'de> for Field<'_> {
        type Value = ();

        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            let s = self.0;
            match self.1 {
                Some(0) => s.content = Some(Deserialize::deserialize(d)?),
                Some(1) => s.tool_calls = Some(Deserialize::deserialize(d)?),
                Some(2) => s.reasoning = Some(Deserialize::deserialize(d)?),
                Some(3) => s.usage = Some(Deserialize::deserialize(d)?),
                Some(4) => s.tool_call_id = Some(Deserialize::deserialize(d)?),
                Some(5) => s.name = Some(Deserialize::deserialize(d)?),
                Some(6) => s.is_error = Some(Deserialize::deserialize(d)?),
                Some(7) => s.kind = Some(Deserialize::deserialize(d)?),
                Some(_) => s.model = Some(Deserialize::deserialize(d)?),
                None => drop(Value::deserialize(d)?),
            }
            Ok(())
        }
    }

    /// Reads a field buffered before the tag from its JSON text, through the reader of JSON text (one instance of
    /// the field readers in the wasm, not a second one for JSON values: ~4 KB gzip of the Worker). A refusal is
    /// worded as the JSON value's reader worded it, without a position in that text (the message's reader adds
    /// the position in the message), but for an array with elements past a struct's fields (a tool call): `trailing
    /// characters`, as for the same field after the tag, where the value's reader said `invalid length <n>,
    /// expected fewer elements in array`.
    fn read_buffered(field: Field<'_>, value: &Value) -> Result<(), String> {
        let text = crate::core::wire::json_text(value);
        let mut d = serde_json::Deserializer::from_str(&text);
        field.deserialize(&mut d).map_err(|e| {
            let msg = e.to_string();
            let at = format!(" at line {} column {}", e.line(), e.column());
            msg.strip_suffix(&at).map(str::to_string).unwrap_or(msg)
        })
    }

    /// `MessageVisitor(true)`: a message read as from serde's buffer (see [`RoleSeed`]).
    struct MessageVisitor(bool);

    impl<'de> Visitor<'de> for MessageVisitor {
        type Value = Message;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("internally tagged enum Message")
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Message, A::Error> {
            let v = seq.next_element_seed(RoleSeed(self.0))?.ok_or_else(|| de::Error::missing_field("role"))?.0;
            let (order, expected) = fields(v);
            let mut s = Slots::default();
            let mut read = 0;
            for (i, &slot) in order.iter().enumerate() {
                if seq.next_element_seed(Field(&mut s, Some(slot)))?.is_some() {
                    read += 1;
                } else if required(v, slot) {
                    return Err(de::Error::invalid_length(i, &expected));
                }
            }
            // The derive read the rest of the array first: an element more is refused after the fields.
            let mut extra = 0;
            while seq.next_element::<Value>()?.is_some() {
                extra += 1;
            }
            if extra > 0 {
                let expected = match read {
                    1 => "1 element in sequence".to_string(),
                    n => format!("{n} elements in sequence"),
                };
                return Err(de::Error::invalid_length(read + extra, &expected.as_str()));
            }
            s.message(v)
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Message, A::Error> {
            let mut variant = None;
            let mut before = Vec::<(String, Value)>::new();
            let mut s = Slots::default();
            while let Some(key) = map.next_key::<String>()? {
                if key == "role" {
                    if variant.is_some() {
                        return Err(de::Error::duplicate_field("role"));
                    }
                    let v = map.next_value_seed(RoleSeed(self.0))?.0;
                    variant = Some(v);
                    // The fields before the tag, now that the variant is known.
                    for (key, value) in before.drain(..) {
                        let Some(i) = slot(v, &key) else { continue };
                        if s.is_set(i) {
                            return Err(de::Error::duplicate_field(NAMES[i]));
                        }
                        read_buffered(Field(&mut s, Some(i)), &value).map_err(de::Error::custom)?;
                    }
                    continue;
                }
                let field = match variant {
                    Some(v) => slot(v, &key),
                    // `content` is a string in every variant.
                    None if key == "content" => Some(0),
                    None => {
                        before.push((key, map.next_value()?));
                        continue;
                    }
                };
                if let Some(i) = field.filter(|&i| s.is_set(i)) {
                    return Err(de::Error::duplicate_field(NAMES[i]));
                }
                map.next_value_seed(Field(&mut s, field))?;
            }
            s.message(variant.ok_or_else(|| de::Error::missing_field("role"))?)
        }
    }

    impl<'de> Deserialize<'de> for Message {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Message, D::Error> {
            d.deserialize_any(MessageVisitor(false))
        }
    }

    /// A message as the derive of an untagged enum read it from serde's buffer: a schedule's input (a role may
    /// be a variant's index there).
    pub(crate) struct BufferedMessage;

    impl<'de> DeserializeSeed<'de> for BufferedMessage {
        type Value = Message;

        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Message, D::Error> {
            d.deserialize_any(MessageVisitor(true))
        }
    }
}

impl Message {
    /// A user message.
    pub fn user(text: impl Into<String>) -> Message {
        Message::User { content: text.into() }
    }

    /// A system message.
    pub fn system(text: impl Into<String>) -> Message {
        Message::System { content: text.into() }
    }

    /// An assistant message.
    pub fn assistant(text: impl Into<String>, tool_calls: Vec<ToolCall>) -> Message {
        Message::Assistant { content: text.into(), tool_calls, reasoning: Vec::new(), usage: None, model: None }
    }

    /// Whether this is a system message.
    pub fn is_system(&self) -> bool {
        matches!(self, Message::System { .. })
    }

    /// Whether `other` is the same message, its recorded usage aside (a client re-sending a transcript may not
    /// echo the usage a model turn recorded).
    pub fn same_as(&self, other: &Message) -> bool {
        match (self, other) {
            (
                Message::Assistant { content, tool_calls, reasoning, .. },
                Message::Assistant { content: c, tool_calls: t, reasoning: r, .. },
            ) => content == c && tool_calls == t && reasoning == r,
            _ => self == other,
        }
    }

    /// The tool calls of an assistant message (empty otherwise).
    pub fn tool_calls(&self) -> &[ToolCall] {
        match self {
            Message::Assistant { tool_calls, .. } => tool_calls,
            _ => &[],
        }
    }
}

/// Token usage totals, and what they cost (see the cost module: prices per model id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    /// Prompt tokens.
    #[serde(default)]
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    pub input_tokens: u64,
    /// Completion tokens.
    #[serde(default)]
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    pub output_tokens: u64,
    /// Of the prompt tokens, those read from the provider's prompt cache.
    #[serde(default, skip_serializing_if = "is_zero")]
    #[cfg_attr(feature = "ts", ts(type = "number", optional))]
    pub cached_input_tokens: u64,
    /// Of the prompt tokens, those written to the provider's prompt cache (Anthropic).
    #[serde(default, skip_serializing_if = "is_zero")]
    #[cfg_attr(feature = "ts", ts(type = "number", optional))]
    pub cache_write_tokens: u64,
    /// Of the completion tokens, those spent reasoning.
    #[serde(default, skip_serializing_if = "is_zero")]
    #[cfg_attr(feature = "ts", ts(type = "number", optional))]
    pub reasoning_tokens: u64,
    /// What these tokens cost, in US dollars (`costUsd`; kept as whole nano-dollars); left out when a price is
    /// unknown: a total with one turn of a model without a price in it has none.
    #[serde(
        default,
        rename = "costUsd",
        with = "crate::core::cost::usd_nanos",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "ts", ts(type = "number", optional))]
    pub cost: Option<u64>,
    /// In a run's state and result (`GET /runs/{id}`, the result of `send`/`resume`/`approve`): the store
    /// operations of every execution under the run's id, and their cost (the checkpoint's `storage`, see
    /// [`crate::core::cost::StorageUsage`]); left out elsewhere (a turn's usage), and when the store does not
    /// count (the memory store). Not added by [`Usage::add`], not part of `costUsd` or of any budget; not read
    /// back (a view's, written only).
    #[serde(skip_deserializing, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub storage: Option<crate::core::cost::StorageUsage>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Nothing used, nothing spent (a cost of 0, known).
impl Default for Usage {
    fn default() -> Self {
        Usage { cost: Some(0), ..Usage::tokens(0, 0) }
    }
}

impl Usage {
    /// `input` prompt and `output` completion tokens, no cost known yet.
    pub const fn tokens(input: u64, output: u64) -> Usage {
        Usage {
            input_tokens: input,
            output_tokens: output,
            cached_input_tokens: 0,
            cache_write_tokens: 0,
            reasoning_tokens: 0,
            cost: None,
            storage: None,
        }
    }

    /// Adds another usage (the cost stays known only if both are).
    pub fn add(&mut self, other: Usage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cached_input_tokens = self.cached_input_tokens.saturating_add(other.cached_input_tokens);
        self.cache_write_tokens = self.cache_write_tokens.saturating_add(other.cache_write_tokens);
        self.reasoning_tokens = self.reasoning_tokens.saturating_add(other.reasoning_tokens);
        self.cost = self.cost.zip(other.cost).map(|(a, b)| a.saturating_add(b));
    }

    /// What `self` has more than `earlier` (a later total less an earlier one).
    pub fn since(&self, earlier: Usage) -> Usage {
        Usage {
            input_tokens: self.input_tokens.saturating_sub(earlier.input_tokens),
            output_tokens: self.output_tokens.saturating_sub(earlier.output_tokens),
            cached_input_tokens: self.cached_input_tokens.saturating_sub(earlier.cached_input_tokens),
            cache_write_tokens: self.cache_write_tokens.saturating_sub(earlier.cache_write_tokens),
            reasoning_tokens: self.reasoning_tokens.saturating_sub(earlier.reasoning_tokens),
            cost: self.cost.zip(earlier.cost).map(|(a, b)| a.saturating_sub(b)),
            storage: None,
        }
    }

    /// Raises each count to at least `other`'s.
    pub fn at_least(&mut self, other: Usage) {
        self.input_tokens = self.input_tokens.max(other.input_tokens);
        self.output_tokens = self.output_tokens.max(other.output_tokens);
        self.cached_input_tokens = self.cached_input_tokens.max(other.cached_input_tokens);
        self.cache_write_tokens = self.cache_write_tokens.max(other.cache_write_tokens);
        self.reasoning_tokens = self.reasoning_tokens.max(other.reasoning_tokens);
        self.cost = self.cost.zip(other.cost).map(|(a, b)| a.max(b));
    }

    /// Sum of both.
    pub fn total(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }
}

/// Checks that a transcript is valid for every provider: each assistant turn with tool calls is followed
/// directly by exactly one result per call, in call order, before any other message; no result without a
/// call; call ids are unique. Returns a description of the first violation.
pub fn validate_transcript(messages: &[Message]) -> Result<(), String> {
    let mut seen_ids = std::collections::HashSet::new();
    let mut i = 0;
    while i < messages.len() {
        match &messages[i] {
            Message::Assistant { tool_calls, .. } if !tool_calls.is_empty() => {
                for (k, call) in tool_calls.iter().enumerate() {
                    if !seen_ids.insert(call.id.as_str()) {
                        return Err(format!("duplicate tool call id {:?} at message {i}", call.id));
                    }
                    match messages.get(i + 1 + k) {
                        Some(Message::Tool(r)) if r.tool_call_id == call.id => {}
                        // The last turn may still be waiting for results (an unfinished run).
                        None => return Ok(()),
                        other => {
                            return Err(format!(
                                "call {:?} at message {i} is not answered in order (found {:?})",
                                call.id,
                                other.map(role_of)
                            ))
                        }
                    }
                }
                i += 1 + tool_calls.len();
            }
            Message::Tool(r) => return Err(format!("result for {:?} at message {i} has no call", r.tool_call_id)),
            _ => i += 1,
        }
    }
    Ok(())
}

fn role_of(m: &Message) -> &'static str {
    match m {
        Message::System { .. } => "system",
        Message::User { .. } => "user",
        Message::Assistant { .. } => "assistant",
        Message::Tool(_) => "tool",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(id: &str) -> ToolCall {
        ToolCall { id: id.into(), name: "t".into(), args: json!({}), invalid: None }
    }
    fn res(id: &str) -> Message {
        Message::Tool(ToolResult {
            tool_call_id: id.into(),
            name: "t".into(),
            content: "ok".into(),
            is_error: false,
            kind: ResultKind::Execution,
            usage: None,
        })
    }

    #[test]
    fn message_json_shape() {
        let m = Message::assistant("hi", vec![call("c1")]);
        let v = serde_json::to_value(&m).unwrap();
        assert_eq!(v, json!({"role":"assistant","content":"hi","toolCalls":[{"id":"c1","name":"t","args":{}}]}));
        let r = serde_json::to_value(res("c1")).unwrap();
        assert_eq!(r["role"], "tool");
        assert_eq!(r["toolCallId"], "c1");
        assert_eq!(r["kind"], "execution");
        let back: Message = serde_json::from_value(v).unwrap();
        assert_eq!(back, m);
    }

    /// The derive the hand-written reader of [`Message`] replaced, kept to compare with.
    #[derive(Debug, Deserialize)]
    #[serde(tag = "role", rename_all = "lowercase")]
    enum DerivedMessage {
        System {
            content: String,
        },
        User {
            content: String,
        },
        Assistant {
            #[serde(default)]
            content: String,
            #[serde(default, rename = "toolCalls")]
            tool_calls: Vec<ToolCall>,
            #[serde(default)]
            reasoning: Vec<Value>,
            #[serde(default)]
            usage: Option<Usage>,
            #[serde(default)]
            model: Option<String>,
        },
        Tool(ToolResult),
    }

    impl From<DerivedMessage> for Message {
        fn from(m: DerivedMessage) -> Message {
            match m {
                DerivedMessage::System { content } => Message::System { content },
                DerivedMessage::User { content } => Message::User { content },
                DerivedMessage::Assistant { content, tool_calls, reasoning, usage, model } => {
                    Message::Assistant { content, tool_calls, reasoning, usage, model }
                }
                DerivedMessage::Tool(r) => Message::Tool(r),
            }
        }
    }

    /// A schedule's input with the derived message (the untagged enum reads its messages from serde's buffer).
    #[derive(Deserialize)]
    #[serde(untagged)]
    #[derive(Debug)]
    enum DerivedInput {
        Text(String),
        Messages(Vec<DerivedMessage>),
    }

    /// The hand-written reader accepts what the derive accepted, as the same message, and refuses what it
    /// refused: from JSON text, from a JSON value and from serde's buffer (a schedule's input), on generated
    /// objects (fields of every variant, in any order, repeated, with good and bad values) and arrays.
    #[test]
    fn the_message_reader_reads_what_the_derive_read() {
        use crate::core::schedule::ScheduleInput;
        let pool: &[(&str, &[&str])] = &[
            ("role", &[r#""system""#, r#""user""#, r#""assistant""#, r#""tool""#, r#""bot""#, "1", "null"]),
            ("content", &[r#""hi""#, r#""""#, "5", "null"]),
            (
                "toolCalls",
                &[
                    r#"[{"id":"c","name":"t","args":{"a":[1]}}]"#,
                    r#"[{"id":"c\"\u00e9","name":"t","args":[1.5,-2,1e20,true,null,{"k":[]}]},{"id":"d","name":"u"}]"#,
                    r#"[{"id":"c","name":"t","args":{"a":1,"a":2}}]"#,
                    "[]",
                    "5",
                    r#"[{"id":"c"}]"#,
                ],
            ),
            ("reasoning", &[r#"[{"type":"thinking","thinking":"x"}]"#, r#"[{"a":1,"a":[2]}]"#, "{}", "[]"]),
            (
                "usage",
                &[
                    r#"{"inputTokens":5,"outputTokens":2}"#,
                    "null",
                    r#""x""#,
                    r#"{"inputTokens":-1}"#,
                    r#"{"inputTokens":1.0}"#,
                ],
            ),
            ("toolCallId", &[r#""c""#, r#""\ud83d\ude00\n""#, "7"]),
            ("name", &[r#""t""#, "null"]),
            ("isError", &["true", "1"]),
            ("kind", &[r#""execution""#, r#""not-run""#, r#""bogus""#]),
            ("model", &[r#""gpt-4o""#, "null", "7"]),
            ("zz", &["1e400", r#"{"a":1,"a":2}"#, r#"[1,"x"]"#]),
        ];
        let mut texts = vec![
            "{}".to_string(),
            "[]".to_string(),
            "null".to_string(),
            r#""user""#.to_string(),
            "7".to_string(),
            r#"{"role":"user","content":"a","content":"b"}"#.to_string(),
            r#"{"content":"a","role":"user","content":"b"}"#.to_string(),
            r#"{"role":"user","role":"user","content":"a"}"#.to_string(),
            r#"{"role":"tool","toolCallId":"c","name":"t","content":"ok","kind":"execution","usage":{"inputTokens":1}}"#
                .to_string(),
            r#"{"kind":"denied","isError":true,"role":"tool","toolCallId":"c","name":"t","content":"no"}"#.to_string(),
            r#"{"role":"assistant","toolCalls":[{"id":"c","name":"t","args":{"a":1},"invalid":"deep"}]}"#.to_string(),
            r#"{"role":"assistant","toolCalls":[{"id":"c","id":"d","name":"t"}]}"#.to_string(),
            r#"{"role":"assistant","usage":{"inputTokens":1,"inputTokens":2}}"#.to_string(),
            r#"{"toolCalls":[{"id":"c","id":"d","name":"t"}],"role":"user","content":"x"}"#.to_string(),
            r#"{"usage":{"inputTokens":1},"kind":"rejected","role":"tool","toolCallId":"c","name":"t","content":"x"}"#
                .to_string(),
        ];
        for elems in [
            r#""user""#,
            r#""user","hi""#,
            r#""user","hi",1"#,
            r#""user",5"#,
            r#""system","hi""#,
            r#""bot","hi""#,
            r#"3,"hi""#,
            r#""assistant""#,
            r#""assistant","hi",[],[{"a":1}],{"inputTokens":3}"#,
            r#""assistant","hi",[],[],null,7"#,
            r#""assistant","hi",5"#,
            r#""tool","c","t","ok",false,"execution""#,
            r#""tool","c","t","ok",false,"execution",null"#,
            r#""tool","c","t","ok",false,"execution",null,1,2"#,
            r#""tool","c","t","ok",false"#,
            r#""tool","c","t","ok""#,
            r#""tool","c""#,
            r#""tool""#,
        ] {
            texts.push(format!("[{elems}]"));
        }
        // Generated objects: a small deterministic generator picks fields (a field may come twice), their order
        // and their values.
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        for _ in 0..6000 {
            let count = next(7);
            let mut fields = Vec::new();
            if next(8) != 0 {
                let roles = pool[0].1;
                fields.push(format!(r#""role":{}"#, roles[next(roles.len())]));
            }
            for _ in 0..count {
                let (name, values) = pool[1 + next(pool.len() - 1)];
                fields.push(format!(r#""{name}":{}"#, values[next(values.len())]));
            }
            let at = next(fields.len().max(1));
            if !fields.is_empty() {
                let first = fields.remove(0);
                fields.insert(at, first);
            }
            texts.push(format!("{{{}}}", fields.join(",")));
        }
        let mut accepted = 0;
        let mut inputs: Vec<String> = [
            r#""hi""#,
            r#""""#,
            "5",
            "-1",
            "1.5",
            "true",
            "null",
            "{}",
            r#"{"role":"user","content":"a"}"#,
            "[]",
            r#"["x"]"#,
            "[[]]",
            "[null]",
            r#"[{"role":0,"content":"s"},{"role":3,"toolCallId":"c","name":"t","content":"r","kind":"denied"}]"#,
            r#"[{"role":4,"content":"s"}]"#,
            r#"[{"role":-1,"content":"s"}]"#,
            r#"[{"role":1.0,"content":"s"}]"#,
            r#"[[1,"hi"]]"#,
            r#"[{"content":"a","role":1}]"#,
            "[",
            r#"["x""#,
        ]
        .map(String::from)
        .to_vec();
        for text in &texts {
            let new = serde_json::from_str::<Message>(text).map_err(|e| e.to_string());
            let old = serde_json::from_str::<DerivedMessage>(text).map(Message::from).map_err(|e| e.to_string());
            assert_eq!(new.is_ok(), old.is_ok(), "{text}: {new:?} / {old:?}");
            if let (Ok(new), Ok(old)) = (&new, &old) {
                assert_eq!(new, old, "{text}");
                accepted += 1;
            }
            let Ok(value) = serde_json::from_str::<Value>(text) else { continue };
            let new = serde_json::from_value::<Message>(value.clone()).map_err(|e| e.to_string());
            let old = serde_json::from_value::<DerivedMessage>(value).map(Message::from).map_err(|e| e.to_string());
            assert_eq!(new.is_ok(), old.is_ok(), "value {text}: {new:?} / {old:?}");
            if let (Ok(new), Ok(old)) = (&new, &old) {
                assert_eq!(new, old, "value {text}");
            }
            inputs.push(format!("[{text}]"));
            inputs.push(format!(r#"[{{"role":"user","content":"a"}},{text},"x"]"#));
        }
        // A schedule's input (read from serde's buffer by the derive): from JSON text and from a JSON value (the
        // Worker's configuration), with the derive's message when nothing matched.
        let unmatched = "data did not match any variant of untagged enum ScheduleInput";
        for list in &inputs {
            // Ignored: a list that is not JSON has no value form; the text readers above still check it.
            let value = serde_json::from_str::<Value>(list).ok();
            let new = serde_json::from_str::<ScheduleInput>(list).map_err(|e| e.to_string());
            let old = serde_json::from_str::<DerivedInput>(list).map_err(|e| e.to_string());
            let new_v = value.clone().map(|v| serde_json::from_value::<ScheduleInput>(v).map_err(|e| e.to_string()));
            let old_v = value.map(|v| serde_json::from_value::<DerivedInput>(v).map_err(|e| e.to_string()));
            assert_eq!(new.is_ok(), old.is_ok(), "input {list}: {new:?} / {old:?}");
            if let (Some(new), Some(old)) = (&new_v, &old_v) {
                assert_eq!(new.is_ok(), old.is_ok(), "input value {list}: {new:?} / {old:?}");
                if let (Err(new), Err(old)) = (new, old) {
                    assert_eq!(new, unmatched, "input value {list}");
                    assert_eq!(old, &unmatched.replace("ScheduleInput", "DerivedInput"), "input value {list}");
                }
            }
            for (new, old) in [(new, old)].into_iter().chain(new_v.zip(old_v)) {
                match (new, old) {
                    (Ok(ScheduleInput::Messages(new)), Ok(DerivedInput::Messages(old))) => {
                        assert_eq!(new, old.into_iter().map(Message::from).collect::<Vec<_>>(), "input {list}")
                    }
                    (Ok(ScheduleInput::Text(new)), Ok(DerivedInput::Text(old))) => assert_eq!(new, old, "input {list}"),
                    (Err(_), Err(_)) => {}
                    other => panic!("input {list}: {other:?}"),
                }
            }
        }
        assert!(accepted > 300, "only {accepted} of {} accepted", texts.len());
        // What the reader accepts from JSON text that the derive refused (see `message_de`).
        for text in [
            r#"{"usage":{"inputTokens":1,"inputTokens":2},"role":"assistant"}"#,
            r#"{"toolCalls":[{"id":"c","id":"d","name":"t"}],"role":"assistant"}"#,
            r#"{"role":"assistant","usage":{"zz":1e400}}"#,
            r#"{"role":"assistant","toolCalls":[{"id":"c","name":"t","zz":"\ud800"}]}"#,
        ] {
            assert!(serde_json::from_str::<Message>(text).is_ok(), "{text}");
            assert!(serde_json::from_str::<DerivedMessage>(text).is_err(), "{text}");
        }
    }

    /// A field before the tag is refused as the JSON value's reader refuses its value (the message's reader reads
    /// it from its text), with a position in the message.
    #[test]
    fn a_field_before_the_tag_is_refused_in_the_value_readers_words() {
        fn refusal<T: serde::de::DeserializeOwned + std::fmt::Debug>(v: &str) -> String {
            serde_json::from_value::<T>(serde_json::from_str(v).unwrap()).unwrap_err().to_string()
        }
        let cases = [
            (r#"{"content":5,"role":"user"}"#, refusal::<String>("5")),
            (r#"{"content":[1.5],"role":"system"}"#, refusal::<String>("[1.5]")),
            (r#"{"toolCalls":[{"id":"c"}],"role":"assistant"}"#, refusal::<Vec<ToolCall>>(r#"[{"id":"c"}]"#)),
            (r#"{"toolCalls":[["c"]],"role":"assistant"}"#, refusal::<Vec<ToolCall>>(r#"[["c"]]"#)),
            (r#"{"usage":{"inputTokens":-1},"role":"assistant"}"#, refusal::<Option<Usage>>(r#"{"inputTokens":-1}"#)),
            (r#"{"isError":1,"role":"tool"}"#, refusal::<bool>("1")),
            (r#"{"kind":"bogus","role":"tool"}"#, refusal::<ResultKind>(r#""bogus""#)),
            (r#"{"toolCallId":{"a":"b"},"role":"tool"}"#, refusal::<String>(r#"{"a":"b"}"#)),
        ];
        for (text, words) in cases {
            let e = serde_json::from_str::<Message>(text).unwrap_err();
            assert!(e.to_string().starts_with(&format!("{words} at line 1 column ")), "{text}: {e} / {words}");
        }
    }

    #[test]
    fn transcript_validation() {
        let ok = vec![Message::user("q"), Message::assistant("", vec![call("a"), call("b")]), res("a"), res("b")];
        assert!(validate_transcript(&ok).is_ok());
        let pending = vec![Message::user("q"), Message::assistant("", vec![call("a"), call("b")]), res("a")];
        assert!(validate_transcript(&pending).is_ok());
        let swapped = vec![Message::assistant("", vec![call("a"), call("b")]), res("b"), res("a")];
        assert!(validate_transcript(&swapped).is_err());
        let interleaved = vec![Message::assistant("", vec![call("a")]), Message::user("x"), res("a")];
        assert!(validate_transcript(&interleaved).is_err());
        let orphan = vec![Message::user("x"), res("a")];
        assert!(validate_transcript(&orphan).is_err());
        let dup =
            vec![Message::assistant("", vec![call("a")]), res("a"), Message::assistant("", vec![call("a")]), res("a")];
        assert!(validate_transcript(&dup).is_err());
    }
}
