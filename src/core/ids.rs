//! Run-id validation: the one function every entry point calls.

use super::error::{Error, ErrorCode, Result};

/// Longest run id, in characters.
pub const MAX_RUN_ID_LEN: usize = 200;

/// Checks a run id against the rules of SPEC "Ids": 1–200 characters of letters, digits, `_`, `-`, `.`, not
/// starting or ending with `.`, and not ending with `.turn-<n>`, `.paused` or `.fire` (keys reserved for
/// sessions and schedules). Anything else fails with `STEADFAST_SESSION_ID_INVALID`.
pub fn validate_run_id(id: &str) -> Result<()> {
    let fail = |why: &str| {
        Err(Error::new(
            ErrorCode::SessionIdInvalid,
            format!("invalid run id {:?}: {why}", crate::core::error::cap_chars(id, 60)),
        ))
    };
    if id.is_empty() {
        return fail("it is empty");
    }
    if id.len() > MAX_RUN_ID_LEN {
        return fail("it is longer than 200 characters");
    }
    if let Some(c) = id.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))) {
        return fail(&format!("character {c:?} is not allowed (letters, digits, '_', '-', '.')"));
    }
    if id.starts_with('.') || id.ends_with('.') {
        return fail("it may not start or end with '.'");
    }
    if id.ends_with(".paused") || id.ends_with(".fire") {
        return fail("the suffixes '.paused' and '.fire' are reserved");
    }
    if let Some(pos) = id.rfind(".turn-") {
        let tail = &id[pos + ".turn-".len()..];
        if !tail.is_empty() && tail.bytes().all(|b| b.is_ascii_digit()) {
            return fail("the suffix '.turn-<n>' is reserved for session turns");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_good_ids() {
        for id in ["a", "chat-42", "order_7", "trip.fork-1", "x.heal", "A.b.C", &"a".repeat(200), "a.turn-x"] {
            assert!(validate_run_id(id).is_ok(), "{id}");
        }
    }

    #[test]
    fn refuses_bad_ids_with_code() {
        let long = "a".repeat(201);
        for id in ["", ".a", "a.", "a b", "a/b", "é", "s.turn-3", "s.paused", "s.fire", long.as_str(), "a\n"] {
            let err = validate_run_id(id).unwrap_err();
            assert_eq!(err.code, ErrorCode::SessionIdInvalid, "{id:?}");
            assert!(!err.retryable);
        }
    }
}
