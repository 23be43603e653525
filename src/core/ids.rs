//! Run-id validation: the one function every entry point calls.

use super::error::{Error, ErrorCode, Result};
use super::sweep::HEAL_SUFFIX;

/// Longest run id, in characters.
pub const MAX_RUN_ID_LEN: usize = 200;

/// Checks the id of an existing run against the rules of SPEC "Ids": 1–200 characters of letters, digits, `_`,
/// `-`, `.`, not starting or ending with `.`. Anything else fails with `STEADFAST_SESSION_ID_INVALID`. Runs the
/// runtime creates under reserved suffixes (a session's turns `<id>.turn-<n>`, a schedule's fires
/// `<id>.<time>.fire`, diagnosis forks `.heal`) pass: they are loaded, resumed, approved and deleted like any run.
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
    Ok(())
}

/// The session a run id is a turn of, and the turn number: `("chat", 3)` for `chat.turn-3` (a valid session id
/// before the suffix, a turn number from 1).
pub fn session_turn(run_id: &str) -> Option<(&str, u32)> {
    let pos = run_id.rfind(TURN_INFIX)?;
    let tail = &run_id[pos + TURN_INFIX.len()..];
    if tail.is_empty() || tail.len() > 9 || !tail.bytes().all(|b| b.is_ascii_digit()) || tail.starts_with('0') {
        return None;
    }
    let session = &run_id[..pos];
    validate_session_id(session).ok()?;
    Some((session, tail.parse().ok()?))
}

/// The run id of turn `n` of session `session_id`.
pub fn turn_run_id(session_id: &str, n: u32) -> String {
    format!("{session_id}{TURN_INFIX}{n}")
}

/// Between a session id and its turn number in a turn's run id.
const TURN_INFIX: &str = ".turn-";

/// Ends the run id of a schedule's fire (`<schedule>.<fire time in seconds>.fire`): the fire's claim.
pub const FIRE_SUFFIX: &str = ".fire";

/// The schedule a run id is a fire of, and the fire time in seconds since the epoch.
pub fn schedule_fire(run_id: &str) -> Option<(&str, u64)> {
    let rest = run_id.strip_suffix(FIRE_SUFFIX)?;
    let dot = rest.rfind('.')?;
    let secs = &rest[dot + 1..];
    if secs.is_empty() || secs.len() > 12 || !secs.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let schedule = &rest[..dot];
    validate_session_id(schedule).ok()?;
    Some((schedule, secs.parse().ok()?))
}

/// The run id of the fire of schedule `schedule_id` at `fire_secs` (seconds since the epoch).
pub fn fire_run_id(schedule_id: &str, fire_secs: u64) -> String {
    format!("{schedule_id}.{fire_secs}{FIRE_SUFFIX}")
}

/// Longest session (and schedule) id, in characters.
pub const MAX_SESSION_ID_LEN: usize = 128;

/// Checks a session id (and a schedule id): 1–128 characters of `A-Za-z0-9_-` (no `.`, so a session's turn
/// ids and a schedule's fire ids are never ambiguous). Anything else fails with `STEADFAST_SESSION_ID_INVALID`.
pub fn validate_session_id(id: &str) -> Result<()> {
    let fail = |why: &str| {
        Err(Error::new(
            ErrorCode::SessionIdInvalid,
            format!("invalid session id {:?}: {why}", crate::core::error::cap_chars(id, 60)),
        ))
    };
    if id.is_empty() {
        return fail("it is empty");
    }
    if id.len() > MAX_SESSION_ID_LEN {
        return fail("it is longer than 128 characters");
    }
    if let Some(c) = id.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))) {
        return fail(&format!("character {c:?} is not allowed (letters, digits, '_', '-')"));
    }
    Ok(())
}

/// Checks the id of a run a user sends to (a new run by send or run-once, a fork's `newId`): the rules of
/// [`validate_run_id`], and not ending with a suffix only the runtime creates: `.turn-<n>` (a session's turns),
/// `.fire` (a schedule's fires), `.paused`, or `.heal` (the recovery sweep's diagnosis forks). Existing runs
/// with such a name stay addressable: load, resume, delete, history and approvals check ids with
/// [`validate_run_id`] only.
pub fn validate_new_run_id(id: &str) -> Result<()> {
    validate_run_id(id)?;
    check_reserved_suffix(id)?;
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

/// Refuses a run id that ends with a suffix reserved for runs the runtime creates for sessions and schedules
/// (`.turn-<n>`, `.fire`, `.paused`): a plain send may neither create nor continue one (a session's turns
/// continue through the session).
pub fn check_reserved_suffix(id: &str) -> Result<()> {
    let reserved = |why: &str| {
        Err(Error::new(
            ErrorCode::SessionIdInvalid,
            format!("invalid run id {:?}: {why}", crate::core::error::cap_chars(id, 60)),
        ))
    };
    if id.ends_with(".paused") || id.ends_with(FIRE_SUFFIX) {
        return reserved("the suffixes '.paused' and '.fire' are reserved (a schedule's fires end with '.fire')");
    }
    if let Some(pos) = id.rfind(TURN_INFIX) {
        let tail = &id[pos + TURN_INFIX.len()..];
        if !tail.is_empty() && tail.bytes().all(|b| b.is_ascii_digit()) {
            return reserved("the suffix '.turn-<n>' is reserved for session turns (use agent.session)");
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
        for id in ["", ".a", "a.", "a b", "a/b", "é", long.as_str(), "a\n"] {
            let err = validate_run_id(id).unwrap_err();
            assert_eq!(err.code, ErrorCode::SessionIdInvalid, "{id:?}");
            assert!(!err.retryable);
        }
    }

    #[test]
    fn reserved_suffixes_are_refused_for_new_runs_but_address_existing_ones() {
        for id in ["s.turn-3", "s.paused", "s.fire", "daily.1733040000.fire", "a.b.turn-12"] {
            assert!(validate_run_id(id).is_ok(), "{id} stays addressable");
            let err = validate_new_run_id(id).unwrap_err();
            assert_eq!(err.code, ErrorCode::SessionIdInvalid, "{id}");
            assert!(err.message.contains("reserved"), "{}", err.message);
        }
    }

    #[test]
    fn turn_and_fire_ids_round_trip_and_nothing_else_parses_as_one() {
        assert_eq!(session_turn(&turn_run_id("chat-42", 7)), Some(("chat-42", 7)));
        assert_eq!(schedule_fire(&fire_run_id("daily_1", 1_733_040_000)), Some(("daily_1", 1_733_040_000)));
        for id in ["chat.turn-0", "chat.turn-", "chat.turn-01", "a.b.turn-1", ".turn-1", "chat.turn-1x", "chat"] {
            assert_eq!(session_turn(id), None, "{id}");
        }
        for id in ["d.fire", "d..fire", "a.b.1.fire", "d.1x.fire", ".1.fire", "d.1.fired", "d.1234567890123.fire"] {
            assert_eq!(schedule_fire(id), None, "{id}");
        }
    }

    #[test]
    fn session_ids_follow_the_stricter_rule() {
        for id in ["a", "chat-42", "A_b-C", &"x".repeat(128)] {
            assert!(validate_session_id(id).is_ok(), "{id}");
        }
        for id in ["", "a.b", "a b", "a/b", "é", &"x".repeat(129)] {
            assert_eq!(validate_session_id(id).unwrap_err().code, ErrorCode::SessionIdInvalid, "{id:?}");
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
