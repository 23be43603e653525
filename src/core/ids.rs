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

/// Whether `name` may name a tool (and so a sub-agent): 1-64 characters of letters, digits, `_` and `-` (what the
/// providers accept).
pub fn is_tool_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 64 && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Between a run id and a sub-agent's name in a child run's id: `<parent>.sub-<name>-<12 hex digits>`.
pub const SUB_INFIX: &str = ".sub-";

/// Hex digits of the parent call's key in a child run's id (48 bits: unique among one run's calls).
const SUB_KEY_LEN: usize = 12;

/// The run id of the child run sub-agent `name` runs for the call whose key is `call_key` in run `parent`
/// (`<parent>.sub-<name>-<first 12 hex digits of the key>`): the same for the same call on every resume, so a
/// resumed parent finds its child. Fails with `STEADFAST_SESSION_ID_INVALID` when it would be longer than
/// [`MAX_RUN_ID_LEN`].
pub fn subagent_run_id(parent: &str, name: &str, call_key: &str) -> Result<String> {
    let key = call_key.get(..SUB_KEY_LEN).unwrap_or(call_key);
    let id = format!("{parent}{SUB_INFIX}{name}-{key}");
    validate_run_id(&id)?;
    Ok(id)
}

/// A child run's parent run id and sub-agent name; `None` for a run that is no sub-agent's.
pub fn subagent_parent(run_id: &str) -> Option<(&str, &str)> {
    let pos = run_id.rfind(SUB_INFIX)?;
    let tail = &run_id[pos + SUB_INFIX.len()..];
    let dash = tail.len().checked_sub(SUB_KEY_LEN + 1)?;
    let (name, key) = (&tail[..dash], &tail[dash + 1..]);
    if name.is_empty() || !tail[dash..].starts_with('-') || !key.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    Some((&run_id[..pos], name))
}

/// The sub-agent names from the top run down to `run_id` (empty for a run that is no sub-agent's): `["a", "b"]`
/// for `lead.sub-a-<key>.sub-b-<key>`. Its length is the run's depth.
pub fn subagent_path(run_id: &str) -> Vec<&str> {
    let mut path = Vec::new();
    let mut id = run_id;
    while let Some((parent, name)) = subagent_parent(id) {
        path.push(name);
        id = parent;
    }
    path.reverse();
    path
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
/// (`.turn-<n>`, `.fire`, `.paused`) and for sub-agents' child runs (`.sub-`): a plain send may neither create nor continue one (a session's turns
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
    if id.contains(SUB_INFIX) {
        return reserved("'.sub-' is reserved for the child runs of sub-agents (a lead's tool call starts them)");
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
    fn a_child_run_id_names_its_parent_and_sub_agent_and_is_reserved() {
        let key = "0123456789abcdef0123456789abcdef";
        let child = subagent_run_id("lead", "research", key).unwrap();
        assert_eq!(child, "lead.sub-research-0123456789ab");
        assert_eq!(subagent_parent(&child), Some(("lead", "research")));
        let grandchild = subagent_run_id(&child, "fetch-web", key).unwrap();
        assert_eq!(subagent_parent(&grandchild), Some((child.as_str(), "fetch-web")));
        assert_eq!(subagent_path(&grandchild), ["research", "fetch-web"]);
        assert!(subagent_path("lead").is_empty());
        for id in ["lead.sub-x", "lead.sub--0123456789ab", "lead.sub-x-0123456789zz", "a.turn-1"] {
            assert_eq!(subagent_parent(id), None, "{id}");
        }
        assert_eq!(check_reserved_suffix(&child).unwrap_err().code, ErrorCode::SessionIdInvalid);
        assert_eq!(check_reserved_suffix("lead.sub-whatever").unwrap_err().code, ErrorCode::SessionIdInvalid);
        let long = "a".repeat(180);
        assert_eq!(subagent_run_id(&long, "research", key).unwrap_err().code, ErrorCode::SessionIdInvalid);
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
