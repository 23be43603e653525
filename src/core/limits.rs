//! Limits on what enters a checkpoint, so that everything recorded can be read back.
//!
//! * **JSON depth.** serde_json refuses to read JSON nested deeper than 128 levels. A value accepted into a
//!   checkpoint sits a few levels deep inside a journal entry (entry → body → state → messages → call → args), so
//!   every value that enters from outside — tool arguments from the model, business state from a caller or a
//!   tool, hook state, fork patches, input messages (their calls' arguments and reasoning blocks), a model's
//!   reasoning blocks — may be at most [`MAX_JSON_DEPTH`] levels deep. Deeper values are refused at the door
//!   with a clear error, never stored and then found unreadable. Behind the doors, the one journal-entry
//!   encoder ([`crate::core::checkpoint::JournalEntry::encode`]) refuses any entry that could not be read back,
//!   so a field added later without a door cannot make a run unreadable either.
//! * **Tool results.** A tool result longer than the agent's `maxToolResultBytes` (default
//!   [`DEFAULT_MAX_TOOL_RESULT_BYTES`]) is cut at a character boundary and ends with a marker the model can read,
//!   saying how long the full result was. One boundary may carry several results (eight of 4 MiB make a 32 MiB
//!   journal entry) and a snapshot the whole transcript: every store records entries of any size, splitting
//!   what its platform cannot hold in one value (the store contract's "Limits").

use super::error::{Error, Result};
use super::transcript::Message;
use serde_json::Value;

/// Deepest nesting of a JSON value accepted into a checkpoint (an object or array is one level).
pub const MAX_JSON_DEPTH: usize = 64;

/// Default cap of one tool result's text (bytes).
pub const DEFAULT_MAX_TOOL_RESULT_BYTES: usize = 256 * 1024;

/// Largest `maxToolResultBytes` a configuration may set (a turn may carry several results: eight make a 32 MiB
/// entry, which the stores split as their platform needs).
pub const MAX_TOOL_RESULT_BYTES: usize = 4 * 1024 * 1024;

/// The nesting depth of a value: 0 for a scalar, 1 for `[]` or `{}` of scalars, and so on. Iterative, so a
/// very deep value cannot overflow the stack.
pub fn json_depth(v: &Value) -> usize {
    let mut deepest = 0;
    let mut stack: Vec<(&Value, usize)> = vec![(v, 0)];
    while let Some((v, d)) = stack.pop() {
        match v {
            Value::Array(a) => {
                deepest = deepest.max(d + 1);
                stack.extend(a.iter().map(|x| (x, d + 1)));
            }
            Value::Object(o) => {
                deepest = deepest.max(d + 1);
                stack.extend(o.values().map(|x| (x, d + 1)));
            }
            _ => deepest = deepest.max(d),
        }
    }
    deepest
}

/// Fails with `STEADFAST_INVALID_INPUT` when `v` is nested deeper than [`MAX_JSON_DEPTH`].
pub fn check_depth(what: &str, v: &Value) -> Result<()> {
    let depth = json_depth(v);
    if depth > MAX_JSON_DEPTH {
        return Err(Error::invalid_input(format!(
            "{what} is nested {depth} levels deep; at most {MAX_JSON_DEPTH} levels are accepted"
        )));
    }
    Ok(())
}

/// Fails with `STEADFAST_INVALID_INPUT` when a value `message` would carry into the checkpoint — a tool call's
/// arguments, a reasoning block — is nested deeper than [`MAX_JSON_DEPTH`]. `whose` names where the message
/// comes from (`"the input"`, `"patch.messages"`).
pub fn check_message_depth(whose: &str, message: &Message) -> Result<()> {
    for call in message.tool_calls() {
        check_depth(&format!("the arguments of tool call '{}' in {whose}", call.id), &call.args)?;
    }
    if let Message::Assistant { reasoning, .. } = message {
        for block in reasoning {
            check_depth(&format!("a reasoning block of an assistant message in {whose}"), block)?;
        }
    }
    Ok(())
}

/// The longest prefix of `s` of at most `max` bytes that ends at a character boundary.
pub fn prefix_bytes(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Caps a tool result at `max` bytes (marker included), with a marker the model can read.
pub fn cap_tool_result(content: String, max: usize) -> String {
    if content.len() <= max {
        return content;
    }
    let marker = format!(
        "\n[steadfast: this tool result was truncated: it was {} bytes, only the first part is shown]",
        content.len()
    );
    let keep = prefix_bytes(&content, max.saturating_sub(marker.len()));
    format!("{keep}{marker}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nested(depth: usize) -> Value {
        let mut v = json!(1);
        for i in 0..depth {
            v = if i % 2 == 0 { json!([v]) } else { json!({ "k": v }) };
        }
        v
    }

    #[test]
    fn depth_counts_containers() {
        assert_eq!(json_depth(&json!(3)), 0);
        assert_eq!(json_depth(&json!({})), 1);
        assert_eq!(json_depth(&json!({"a": [1, {"b": 2}]})), 3);
        for d in [0, 1, 5, 64, 65, 200, 1_000] {
            assert_eq!(json_depth(&nested(d)), d);
        }
    }

    #[test]
    fn values_deeper_than_the_limit_are_refused_with_a_code() {
        assert!(check_depth("x", &nested(MAX_JSON_DEPTH)).is_ok());
        let e = check_depth("businessState", &nested(MAX_JSON_DEPTH + 1)).unwrap_err();
        assert_eq!(e.code, crate::core::error::ErrorCode::InvalidInput);
        assert!(e.message.contains("businessState") && e.message.contains("65 levels"), "{}", e.message);
    }

    #[test]
    fn a_value_at_the_limit_inside_a_journal_entry_reads_back() {
        // The deepest accepted args, stored inside a snapshot entry, still parse (serde_json's limit is 128).
        let mut cp = crate::core::checkpoint::Checkpoint::new("r");
        cp.messages.push(crate::core::transcript::Message::assistant(
            "",
            vec![crate::core::transcript::ToolCall {
                id: "c".into(),
                name: "t".into(),
                args: nested(MAX_JSON_DEPTH),
                invalid: None,
            }],
        ));
        cp.business_state = Some(nested(MAX_JSON_DEPTH));
        let entry = crate::core::checkpoint::JournalEntry {
            seq: 1,
            at: 0,
            body: crate::core::checkpoint::EntryBody::Snapshot { state: Box::new(cp.clone()) },
        };
        let raw = serde_json::to_string(&entry).unwrap();
        let back: crate::core::checkpoint::JournalEntry = serde_json::from_str(&raw).unwrap();
        assert_eq!(back, entry);
    }

    #[test]
    fn tool_results_are_capped_at_a_char_boundary_with_a_marker() {
        let small = "ok".to_string();
        assert_eq!(cap_tool_result(small.clone(), 100), small);
        for s in ["a".repeat(10_000), "é".repeat(10_000), "😀".repeat(10_000)] {
            let capped = cap_tool_result(s.clone(), 1_000);
            assert!(capped.len() <= 1_000, "{}", capped.len());
            assert!(capped.contains(&format!("it was {} bytes", s.len())));
            assert!(s.starts_with(capped.split("\n[steadfast:").next().unwrap()));
        }
    }
}
