//! Durable waits (issue 29): a tool call parked on the outside world — a person's answer to a question, an event
//! delivered by another system, or a time — recorded like an approval and resolved exactly once.
//!
//! A tool asks for a wait by answering "pending" ([`WaitRequest`]) instead of a result. The run records the wait
//! as an approval record of another kind ([`WaitKind`]: the record is written before the run's
//! `awaiting-approval` checkpoint, like an approval's) and its execution ends: no lease is held, no process waits.
//! The wait is resolved once, by one of:
//!
//! * **an answer** (`question`): a person answers through the approvals API; the answer is the call's result;
//! * **a delivery** (`event`): whoever holds the wait's token delivers a payload; the payload is the result;
//! * **its deadline** (`event` with a deadline): a `timeout` error result;
//! * **its time** (`timer`): a result saying when the run woke.
//!
//! The first resolution recorded wins; a second one that says the same thing (a retried delivery of the same
//! payload, the same answer again) is acknowledged and changes nothing; one that says otherwise is refused with
//! `STEADFAST_WAIT_ALREADY_RESOLVED`.
//!
//! # Tokens
//!
//! An event wait's token is a capability: whoever holds it may deliver, without the API token. It is 64 hex
//! digits of SHA-256 over the run's key scope (its id and a random nonce drawn when the run was created,
//! [`crate::core::idempotency`]) and the call id — so a tool that runs again after a crash hands out the same
//! token, and nobody can compute it without the run's nonce. The wait's id (its record's id) is derived from
//! the token ([`wait_id`]), and the record keeps only the token's hash ([`token_hash`]), compared in constant
//! time ([`token_matches`]): a guessed token finds no record, and the answer does not say whether its run
//! exists.

use super::error::{Error, ErrorCode, Result};
use super::fingerprint::sha256_hex;
use super::limits::{json_depth, MAX_JSON_DEPTH};
use crate::core::wire::json_text;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Largest event payload or answer accepted (bytes of its JSON).
pub const MAX_PAYLOAD_BYTES: usize = 256 * 1024;

/// Longest question (characters).
pub const MAX_QUESTION_CHARS: usize = 4_000;

/// Most choices a question may offer, and the longest choice (characters).
pub const MAX_CHOICES: usize = 50;
/// See [`MAX_CHOICES`].
pub const MAX_CHOICE_CHARS: usize = 200;

/// Prefix of a tool-made wait's id (an approval's id has none).
pub const WAIT_ID_PREFIX: &str = "wait_";

/// What a paused call waits for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "lowercase")]
pub enum WaitKind {
    /// A reviewer's approval before the call runs.
    #[default]
    Approval,
    /// A person's answer, which becomes the call's result.
    Question,
    /// An event delivered with the wait's token, which becomes the call's result (or its deadline passes).
    Event,
    /// A time: the run wakes then.
    Timer,
}

crate::core::wire::unit_enum_de!(WaitKind {
    "approval" => Approval,
    "question" => Question,
    "event" => Event,
    "timer" => Timer,
});

impl WaitKind {
    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            WaitKind::Approval => "approval",
            WaitKind::Question => "question",
            WaitKind::Event => "event",
            WaitKind::Timer => "timer",
        }
    }

    /// Whether `self` is the default (for `skip_serializing_if`).
    pub fn is_approval(&self) -> bool {
        *self == WaitKind::Approval
    }
}

/// What a tool asks to wait for instead of answering.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(tag = "kind", rename_all = "lowercase", rename_all_fields = "camelCase")]
pub enum WaitRequest {
    /// Ask a person; `choices`, when given, are the only answers accepted.
    Question {
        /// The question.
        question: String,
        /// The answers offered (empty: any answer).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        choices: Vec<String>,
    },
    /// Wait for an event delivered with the call's wait token; after `deadline` (ms since the epoch), a
    /// `timeout` result.
    Event {
        /// When to stop waiting (none: wait for ever).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "ts", ts(type = "number", optional))]
        deadline: Option<u64>,
    },
    /// Wake at `at` (ms since the epoch).
    Timer {
        /// When.
        #[cfg_attr(feature = "ts", ts(type = "number"))]
        at: u64,
    },
}

impl WaitRequest {
    /// The kind of wait.
    pub fn kind(&self) -> WaitKind {
        match self {
            WaitRequest::Question { .. } => WaitKind::Question,
            WaitRequest::Event { .. } => WaitKind::Event,
            WaitRequest::Timer { .. } => WaitKind::Timer,
        }
    }

    /// When it resolves by itself (an event's deadline, a timer's time).
    pub fn due_at(&self) -> Option<u64> {
        match self {
            WaitRequest::Question { .. } => None,
            WaitRequest::Event { deadline } => *deadline,
            WaitRequest::Timer { at } => Some(*at),
        }
    }

    /// Why a tool's request cannot be recorded (the call gets this as an error result instead), or `Ok`.
    pub fn check(&self) -> std::result::Result<(), String> {
        match self {
            WaitRequest::Question { question, choices } => {
                if question.trim().is_empty() {
                    return Err("a question needs a non-empty text".into());
                }
                if question.chars().count() > MAX_QUESTION_CHARS {
                    return Err(format!("a question is at most {MAX_QUESTION_CHARS} characters"));
                }
                if choices.len() > MAX_CHOICES {
                    return Err(format!("a question offers at most {MAX_CHOICES} choices, not {}", choices.len()));
                }
                if let Some(c) = choices.iter().find(|c| c.is_empty() || c.chars().count() > MAX_CHOICE_CHARS) {
                    return Err(format!("a choice is 1 to {MAX_CHOICE_CHARS} characters, not {}", c.chars().count()));
                }
                Ok(())
            }
            WaitRequest::Event { .. } | WaitRequest::Timer { .. } => Ok(()),
        }
    }
}

/// How a wait was resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "lowercase")]
pub enum ResolvedBy {
    /// A person answered the question.
    Answer,
    /// A person declined to answer (`approved: false`).
    Declined,
    /// The event was delivered.
    Delivery,
    /// The event's deadline passed first.
    Deadline,
    /// The timer's time came.
    Timer,
}

crate::core::wire::unit_enum_de!(ResolvedBy {
    "answer" => Answer,
    "declined" => Declined,
    "delivery" => Delivery,
    "deadline" => Deadline,
    "timer" => Timer,
});

/// A wait's resolution: the call's result, and how it came.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase")]
pub struct WaitOutcome {
    /// How.
    pub by: ResolvedBy,
    /// The text the model reads as the call's result.
    pub content: String,
    /// Whether the result reports a failure (a deadline, a declined question).
    #[serde(default)]
    pub is_error: bool,
    /// SHA-256 of what resolved it (the payload's or the answer's canonical JSON), to tell a retried delivery
    /// from a different one.
    pub digest: String,
    /// What a sub-agent's child run spent (a child's result delivered to its lead's wait), added to the run's
    /// usage with the result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub usage: Option<crate::core::transcript::Usage>,
}

/// An event wait's token for call `call_id` of a run with key scope `scope` (64 hex digits; see the module docs).
pub fn token(scope: &str, call_id: &str) -> String {
    let mut bytes = Vec::with_capacity(40 + scope.len() + call_id.len());
    bytes.extend_from_slice(b"steadfast wait token\n");
    bytes.extend_from_slice(scope.len().to_string().as_bytes());
    bytes.push(b':');
    bytes.extend_from_slice(scope.as_bytes());
    bytes.extend_from_slice(call_id.as_bytes());
    sha256_hex(&bytes)
}

/// The hash of a token that a record keeps (never the token itself).
pub fn token_hash(token: &str) -> String {
    sha256_hex(format!("steadfast wait token hash\n{token}").as_bytes())
}

/// The id of the wait a token belongs to: [`WAIT_ID_PREFIX`] and 32 hex digits of a hash of the token (not the
/// hash the record keeps). `None` for a string that is not a token's shape (64 lowercase hex digits).
pub fn wait_id(token: &str) -> Option<String> {
    if token.len() != 64 || !token.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return None;
    }
    let mut id = sha256_hex(format!("steadfast wait id\n{token}").as_bytes());
    id.truncate(32);
    Some(format!("{WAIT_ID_PREFIX}{id}"))
}

/// Whether `token` hashes to `stored` (a record's [`token_hash`]), comparing every byte whatever the first
/// difference (constant time in the hash).
pub fn token_matches(stored: &str, token: &str) -> bool {
    let computed = token_hash(token);
    let (a, b) = (stored.as_bytes(), computed.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut diff = 0u8;
    for (x, y) in a.iter().zip(b) {
        diff |= x ^ y;
    }
    diff == 0
}

/// Checks an event payload or an answer from outside: at most [`MAX_PAYLOAD_BYTES`] of JSON
/// (`STEADFAST_PAYLOAD_TOO_LARGE`) and [`MAX_JSON_DEPTH`] levels (`STEADFAST_INVALID_INPUT`). Returns its JSON.
pub fn check_payload(what: &str, v: &Value) -> Result<String> {
    let depth = json_depth(v);
    if depth > MAX_JSON_DEPTH {
        return Err(Error::invalid_input(format!(
            "{what} is nested {depth} levels deep; at most {MAX_JSON_DEPTH} levels are accepted"
        )));
    }
    let text = json_text(v);
    if text.len() > MAX_PAYLOAD_BYTES {
        return Err(Error::new(
            ErrorCode::PayloadTooLarge,
            format!("{what} is {} bytes of JSON; at most {MAX_PAYLOAD_BYTES} are accepted", text.len()),
        ));
    }
    Ok(text)
}

/// The result text of a delivered payload or an answer: a string as it is, any other value as JSON.
fn content_of(v: &Value, json: String) -> String {
    match v {
        Value::String(s) => s.clone(),
        _ => json,
    }
}

/// The resolution of an event wait by a delivered `payload` (checked with [`check_payload`]).
pub fn delivered(payload: &Value) -> Result<WaitOutcome> {
    let text = check_payload("the event's payload", payload)?;
    let digest = sha256_hex(text.as_bytes());
    Ok(WaitOutcome {
        by: ResolvedBy::Delivery,
        content: content_of(payload, text),
        is_error: false,
        digest,
        usage: None,
    })
}

/// The resolution of a question by a person: `Some(answer)` (one of `choices` when it offers any), or `None`
/// for a person who declined (`note` is theirs).
pub fn answered(choices: &[String], answer: Option<&Value>, note: Option<&str>) -> Result<WaitOutcome> {
    let Some(answer) = answer else {
        let note = serde_json::to_string(&note).unwrap_or_else(|_| "null".into());
        let content = format!(r#"{{"error":"declined","message":"The person declined to answer.","note":{note}}}"#);
        return Ok(WaitOutcome {
            usage: None,
            by: ResolvedBy::Declined,
            digest: sha256_hex(content.as_bytes()),
            content,
            is_error: true,
        });
    };
    let text = check_payload("the answer", answer)?;
    if !choices.is_empty() && !answer.as_str().is_some_and(|a| choices.iter().any(|c| c == a)) {
        return Err(Error::invalid_input(format!(
            "the answer must be one of the question's choices: {}",
            choices.iter().map(|c| format!("'{c}'")).collect::<Vec<_>>().join(", ")
        )));
    }
    let digest = sha256_hex(text.as_bytes());
    Ok(WaitOutcome { by: ResolvedBy::Answer, content: content_of(answer, text), is_error: false, digest, usage: None })
}

/// The resolution of a wait that came due at `due_at` and was resolved at `now`: an event's `timeout`, a
/// timer's wake-up. `None` for a question (it has no time).
pub fn came_due(kind: WaitKind, due_at: u64, now: u64) -> Option<WaitOutcome> {
    let (by, content, is_error) = match kind {
        WaitKind::Event => (
            ResolvedBy::Deadline,
            format!(
                r#"{{"error":"timeout","message":"No event was delivered before the deadline.","deadline":{due_at}}}"#
            ),
            true,
        ),
        WaitKind::Timer => (
            ResolvedBy::Timer,
            format!(r#"{{"woke":true,"at":{due_at},"late_ms":{}}}"#, now.saturating_sub(due_at)),
            false,
        ),
        WaitKind::Question | WaitKind::Approval => return None,
    };
    // The digest names the due time, not when it was noticed: two processes that both find it due agree.
    let digest = sha256_hex(format!("due {} {due_at}", kind.as_str()).as_bytes());
    Some(WaitOutcome { by, content, is_error, digest, usage: None })
}

/// Days from 1970-01-01 to a civil date (proleptic Gregorian; Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// An RFC 3339 time (`2026-12-24T09:00:00Z`, `…T09:00:00.250+01:00`; `t` and a space accepted for `T`) as ms
/// since the epoch; `None` for anything else, a time before 1970, or a field out of range.
pub fn parse_rfc3339_ms(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    let num = |from: usize, len: usize| -> Option<u32> {
        let part = b.get(from..from + len)?;
        part.iter().all(u8::is_ascii_digit).then(|| part.iter().fold(0u32, |n, d| n * 10 + (d - b'0') as u32))
    };
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let (y, mo, d, h, mi, sec) = (num(0, 4)?, num(5, 2)?, num(8, 2)?, num(11, 2)?, num(14, 2)?, num(17, 2)?);
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let month_days = [31, if leap { 29 } else { 28 }, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    if !(1..=12).contains(&mo) || d == 0 || d > month_days[mo as usize - 1] || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut i = 19;
    let mut ms = 0u64;
    if b.get(i) == Some(&b'.') {
        let start = i + 1;
        i = start;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start {
            return None;
        }
        let digits = &s[start..i.min(start + 3)];
        ms = digits.parse::<u64>().ok()? * 10u64.pow(3 - digits.len() as u32);
    }
    let offset_min: i64 = match b.get(i)? {
        b'Z' | b'z' if i + 1 == b.len() => 0,
        sign @ (b'+' | b'-') if i + 6 == b.len() && b[i + 3] == b':' => {
            let (oh, om) = (num(i + 1, 2)?, num(i + 4, 2)?);
            if oh > 23 || om > 59 {
                return None;
            }
            let m = (oh * 60 + om) as i64;
            if *sign == b'+' {
                m
            } else {
                -m
            }
        }
        _ => return None,
    };
    let secs = days_from_civil(y as i64, mo, d) * 86_400 + (h * 3_600 + mi * 60 + sec.min(59)) as i64 - offset_min * 60;
    u64::try_from(secs).ok().map(|s| s * 1_000 + ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn a_token_is_stable_per_call_and_differs_across_scopes_and_calls() {
        let t = token("run:00ff", "call_1_0");
        assert_eq!(t, token("run:00ff", "call_1_0"));
        assert_ne!(t, token("run:00fe", "call_1_0"));
        assert_ne!(t, token("run:00ff", "call_1_1"));
        assert_eq!(t.len(), 64);
        let id = wait_id(&t).unwrap();
        assert!(id.starts_with(WAIT_ID_PREFIX) && id.len() == WAIT_ID_PREFIX.len() + 32);
        assert!(!t.contains(&id[WAIT_ID_PREFIX.len()..]), "the id does not reveal the token");
        assert!(!token_hash(&t).contains(&id[WAIT_ID_PREFIX.len()..]), "the id is not the stored hash");
    }

    #[test]
    fn only_the_token_matches_its_hash_and_malformed_tokens_have_no_wait() {
        let t = token("s", "c");
        let h = token_hash(&t);
        assert!(token_matches(&h, &t));
        let mut other = t.clone();
        other.replace_range(63..64, if t.ends_with('0') { "1" } else { "0" });
        assert!(!token_matches(&h, &other));
        assert!(!token_matches("", &t));
        for bad in ["", "abc", &t.to_uppercase(), &format!("{t}0"), &t.replace(|_: char| true, "g")] {
            assert_eq!(wait_id(bad), None, "{bad}");
        }
    }

    #[test]
    fn an_answer_must_be_a_choice_when_the_question_offers_them() {
        let choices = vec!["yes".to_string(), "no".to_string()];
        assert_eq!(answered(&choices, Some(&json!("yes")), None).unwrap().content, "yes");
        let err = answered(&choices, Some(&json!("maybe")), None).unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidInput);
        assert_eq!(err.message, "the answer must be one of the question's choices: 'yes', 'no'");
        assert_eq!(answered(&[], Some(&json!({"n": 1})), None).unwrap().content, r#"{"n":1}"#);
        let declined = answered(&choices, None, Some("busy")).unwrap();
        assert!(declined.is_error && declined.content.contains("busy") && declined.by == ResolvedBy::Declined);
    }

    #[test]
    fn payloads_are_bounded_in_size_and_depth() {
        let big = Value::String("x".repeat(MAX_PAYLOAD_BYTES));
        assert_eq!(delivered(&big).unwrap_err().code, ErrorCode::PayloadTooLarge);
        let mut deep = json!(1);
        for _ in 0..=MAX_JSON_DEPTH {
            deep = json!([deep]);
        }
        assert_eq!(delivered(&deep).unwrap_err().code, ErrorCode::InvalidInput);
        let ok = delivered(&json!({"paid": true})).unwrap();
        assert_eq!((ok.content.as_str(), ok.is_error, ok.by), (r#"{"paid":true}"#, false, ResolvedBy::Delivery));
        assert_eq!(ok.digest, delivered(&json!({"paid": true})).unwrap().digest);
        assert_ne!(ok.digest, delivered(&json!({"paid": false})).unwrap().digest);
    }

    #[test]
    fn a_due_wait_resolves_the_same_wherever_it_is_noticed() {
        let a = came_due(WaitKind::Event, 1_000, 1_500).unwrap();
        let b = came_due(WaitKind::Event, 1_000, 9_000).unwrap();
        assert!(a.is_error && a.by == ResolvedBy::Deadline && a.digest == b.digest);
        let t = came_due(WaitKind::Timer, 1_000, 1_200).unwrap();
        assert!(!t.is_error && t.content.contains("\"late_ms\":200"));
        assert_eq!(came_due(WaitKind::Question, 1, 2), None);
    }

    #[test]
    fn a_question_is_checked_before_it_is_recorded() {
        let q = |question: &str, choices: &[&str]| WaitRequest::Question {
            question: question.into(),
            choices: choices.iter().map(|c| c.to_string()).collect(),
        };
        assert!(q("Ship it?", &["yes", "no"]).check().is_ok());
        assert!(q("  ", &[]).check().is_err());
        assert!(q("?", &[""]).check().is_err());
        assert!(q(&"x".repeat(MAX_QUESTION_CHARS + 1), &[]).check().is_err());
        assert_eq!(WaitRequest::Timer { at: 5 }.due_at(), Some(5));
        let wire: WaitRequest = serde_json::from_value(json!({"kind": "event", "deadline": 9})).unwrap();
        assert_eq!(wire, WaitRequest::Event { deadline: Some(9) });
    }

    #[test]
    fn rfc3339_times_parse_to_epoch_ms() {
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_rfc3339_ms("2026-12-24T09:00:00.25+01:00"), Some(1_798_099_200_250));
        for bad in [
            "",
            "2026-13-01T00:00:00Z",
            "2026-02-29T00:00:00Z",
            "2026-01-01T00:00:00",
            "1969-12-31T23:59:59Z",
            "2026-01-01T00:00:00.Z",
            "2026-01-01T24:00:00Z",
            "2026-01-01T00:00:00+1:00",
        ] {
            assert_eq!(parse_rfc3339_ms(bad), None, "{bad}");
        }
    }

    proptest! {
        /// Over generated instants and offsets: the parse agrees with chrono's (the oracle).
        #[test]
        fn rfc3339_parse_agrees_with_chrono(secs in 0i64..8_000_000_000, ms in 0u32..1000, off in -1439i32..1440) {
            use chrono::{DateTime, FixedOffset, SecondsFormat};
            let offset = FixedOffset::east_opt(off * 60).unwrap();
            let t = DateTime::from_timestamp(secs, ms * 1_000_000).unwrap().with_timezone(&offset);
            let text = t.to_rfc3339_opts(SecondsFormat::Millis, true);
            prop_assert_eq!(parse_rfc3339_ms(&text), Some(secs as u64 * 1_000 + ms as u64), "{}", text);
        }

        /// Over generated scopes and call ids: the token always has a wait id, and only that token matches the
        /// hash its record keeps.
        #[test]
        fn every_token_finds_its_wait_and_no_other_token_matches(scope in "[a-z0-9:]{1,40}", call in "[a-z0-9_]{1,20}", other in "[a-z0-9_]{1,20}") {
            let t = token(&scope, &call);
            prop_assert!(wait_id(&t).is_some());
            prop_assert!(token_matches(&token_hash(&t), &t));
            if other != call {
                let u = token(&scope, &other);
                prop_assert!(!token_matches(&token_hash(&t), &u));
                prop_assert_ne!(wait_id(&t), wait_id(&u));
            }
        }
    }
}
