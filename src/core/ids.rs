//! Run-id validation: the one function every entry point calls.

use super::error::{Error, ErrorCode, Result};
use super::sweep::HEAL_SUFFIX;

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

/// Checks the id of a run a user is about to create (a new run by send or run-once, a fork's `newId`): the
/// rules of [`validate_run_id`], and not ending with `.heal`, which only the recovery sweep creates (its
/// diagnosis forks). Existing runs with such a name stay addressable: load, resume, delete, history and
/// approvals check ids with [`validate_run_id`] only.
pub fn validate_new_run_id(id: &str) -> Result<()> {
    validate_run_id(id)?;
    if id.ends_with(HEAL_SUFFIX) {
        return Err(Error::new(
            ErrorCode::SessionIdInvalid,
            format!(
                "invalid run id {:?}: the suffix '{HEAL_SUFFIX}' is reserved for the recovery sweep's diagnosis forks",
                crate::core::error::cap_chars(id, 60)
            ),
        ));
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

    #[test]
    fn new_runs_may_not_take_the_heal_suffix_but_existing_ones_stay_addressable() {
        for id in ["x.heal", "a.b.heal", "dlv-job.heal"] {
            assert!(validate_run_id(id).is_ok(), "{id} stays addressable");
            let err = validate_new_run_id(id).unwrap_err();
            assert_eq!(err.code, ErrorCode::SessionIdInvalid, "{id}");
            assert!(err.message.contains("reserved"), "{}", err.message);
        }
        for id in ["x.healed", "heal", "x.heal.fork-1", "x-heal", "x.heal2"] {
            assert!(validate_new_run_id(id).is_ok(), "{id}");
        }
        assert_eq!(validate_new_run_id("a b").unwrap_err().code, ErrorCode::SessionIdInvalid);
    }
}
