//! Schedules (M23), the part without I/O: a schedule's definition, its cron expression ([`crate::core::cron`],
//! five fields, UTC), and which fire is due at a given time.
//!
//! # Which fire is due
//! At time `now`, the due fire of a schedule is its latest fire time `t <= now` (so a fire missed while nothing
//! ticked is found by the next tick, and several missed fires collapse into that one), provided `t` is not
//! older than the schedule itself (`since`: when the store first saw it; a new schedule does not fire for times
//! before it existed). Under [`MissedFires::Skip`] a fire found more than `graceMs` after its time is skipped
//! instead. Running it exactly once is the runtime's part: the fire's run id is derived from the schedule id and
//! `t` ([`crate::core::ids::fire_run_id`]) and created only if it does not exist (the claim).

use crate::core::cron::Cron;
use crate::core::error::{Error, ErrorCode, Result};
use crate::core::ids::validate_session_id;
use crate::core::transcript::message_de::BufferedMessage;
use crate::core::transcript::Message;
use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use std::fmt;

/// What a tick does with a fire it finds after its time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "kebab-case")]
pub enum MissedFires {
    /// Run it once, however late (missed fires collapse into the latest one). The default.
    #[default]
    RunOnce,
    /// Skip a fire found more than `graceMs` after its time; the schedule waits for its next fire.
    Skip,
}

/// A schedule's input: a user message's text, or messages.
// Read by a hand-written reader (below) with the forms of serde's untagged derive; written by the derive. (A
// plain comment: the doc comment is the generated TypeScript type's too.)
#[derive(Clone, Debug, PartialEq, Serialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(untagged)]
pub enum ScheduleInput {
    /// One user message.
    Text(String),
    /// Messages.
    Messages(Vec<Message>),
}

/// The reader of [`ScheduleInput`]: a string is the text, an array the messages (read as the untagged derive read
/// them from serde's buffer, see [`BufferedMessage`]); anything else, or an array with an item that is not a
/// message, is refused with the derive's message. Without buffering the input into serde's `Content` first.
impl<'de> Deserialize<'de> for ScheduleInput {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<ScheduleInput, D::Error> {
        d.deserialize_any(InputVisitor)
    }
}

struct InputVisitor;

fn unmatched<E: de::Error>() -> E {
    E::custom("data did not match any variant of untagged enum ScheduleInput")
}

impl<'de> Visitor<'de> for InputVisitor {
    type Value = ScheduleInput;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("untagged enum ScheduleInput")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<ScheduleInput, E> {
        Ok(ScheduleInput::Text(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> std::result::Result<ScheduleInput, E> {
        Ok(ScheduleInput::Text(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<ScheduleInput, A::Error> {
        let mut out = Vec::new();
        while let Some(m) = seq.next_element_seed(BufferedMessage).map_err(|_| unmatched::<A::Error>())? {
            out.push(m);
        }
        Ok(ScheduleInput::Messages(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, _: A) -> std::result::Result<ScheduleInput, A::Error> {
        Err(unmatched())
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> std::result::Result<ScheduleInput, E> {
        Err(unmatched())
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> std::result::Result<ScheduleInput, E> {
        Err(unmatched())
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> std::result::Result<ScheduleInput, E> {
        Err(unmatched())
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> std::result::Result<ScheduleInput, E> {
        Err(unmatched())
    }

    fn visit_unit<E: de::Error>(self) -> std::result::Result<ScheduleInput, E> {
        Err(unmatched())
    }
}

impl ScheduleInput {
    /// The input as messages.
    pub fn messages(&self) -> Vec<Message> {
        match self {
            ScheduleInput::Text(t) => vec![Message::user(t.clone())],
            ScheduleInput::Messages(m) => m.clone(),
        }
    }
}

/// Default `graceMs`: two minutes (a cron trigger that runs every minute is late by seconds, not minutes).
pub const DEFAULT_GRACE_MS: u64 = 120_000;

/// A schedule: run `input` as a new run at every fire time of `cron`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Schedule {
    /// Schedule id: 1–128 characters of `A-Za-z0-9_-` (a fire's run id is `<id>.<fire time in s>.fire`).
    pub id: String,
    /// Cron expression: five fields (minute hour day-of-month month day-of-week), UTC; `@daily`-style
    /// nicknames too.
    pub cron: String,
    /// The input of each fire's run.
    pub input: ScheduleInput,
    /// What a tick does with a fire it finds late (default `run-once`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub missed: Option<MissedFires>,
    /// How late a fire may be found and still count as on time under `missed: "skip"` (default 120000 ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional, type = "number"))]
    pub grace_ms: Option<u64>,
}

impl Schedule {
    /// `missed`, or its default.
    pub fn missed(&self) -> MissedFires {
        self.missed.unwrap_or_default()
    }

    /// `graceMs`, or its default.
    pub fn grace_ms(&self) -> u64 {
        self.grace_ms.unwrap_or(DEFAULT_GRACE_MS)
    }
}

/// What is due for a schedule at a time ([`CompiledSchedule::due`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Due {
    /// Nothing: no fire since the schedule exists.
    Nothing,
    /// Fire at this time (ms since the epoch; a whole second).
    Fire(u64),
    /// This fire was missed and the schedule skips missed fires.
    Skip(u64),
}

/// A schedule whose cron expression parsed.
#[derive(Clone, Debug)]
pub struct CompiledSchedule {
    /// The schedule.
    pub spec: Schedule,
    cron: Cron,
}

impl CompiledSchedule {
    /// Checks a schedule: its id (`STEADFAST_SESSION_ID_INVALID`), its cron expression and input
    /// (`STEADFAST_CONFIG_INVALID`, naming the schedule and what is wrong).
    pub fn compile(spec: Schedule) -> Result<CompiledSchedule> {
        validate_session_id(&spec.id)?;
        let cfg = |m: String| Error::new(ErrorCode::ConfigInvalid, format!("schedule '{}': {m}", spec.id));
        let cron = Cron::parse(&spec.cron).map_err(|e| cfg(format!("cron expression {:?}: {e}", spec.cron)))?;
        if spec.input.messages().iter().all(|m| m.is_system()) {
            return Err(cfg("its input needs at least one user message".into()));
        }
        // Every fire must be findable: an expression that never matches (say, February 30th) is refused here
        // rather than failing every tick.
        if cron.next(0).is_none() {
            return Err(cfg(format!("cron expression {:?} never fires", spec.cron)));
        }
        Ok(CompiledSchedule { spec, cron })
    }

    /// The latest fire time at or before `at_ms` (ms since the epoch), if any.
    pub fn previous_fire(&self, at_ms: u64) -> Option<u64> {
        self.cron.previous(at_ms)
    }

    /// The first fire time after `at_ms`, if any.
    pub fn next_fire(&self, at_ms: u64) -> Option<u64> {
        self.cron.next(at_ms)
    }

    /// What is due at `now_ms` for a schedule that exists since `since_ms` (see the module docs).
    pub fn due(&self, now_ms: u64, since_ms: u64) -> Due {
        match self.previous_fire(now_ms) {
            Some(t) if t >= since_ms => {
                if self.spec.missed() == MissedFires::Skip && now_ms - t > self.spec.grace_ms() {
                    Due::Skip(t)
                } else {
                    Due::Fire(t)
                }
            }
            _ => Due::Nothing,
        }
    }
}

/// Checks a list of schedules (each compiles; no two share an id).
pub fn compile_all(specs: Vec<Schedule>) -> Result<Vec<CompiledSchedule>> {
    let mut out: Vec<CompiledSchedule> = Vec::with_capacity(specs.len());
    for spec in specs {
        if out.iter().any(|s| s.spec.id == spec.id) {
            return Err(Error::new(ErrorCode::ConfigInvalid, format!("two schedules are named '{}'", spec.id)));
        }
        out.push(CompiledSchedule::compile(spec)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: u64 = 60_000;
    const HOUR: u64 = 60 * MIN;
    /// 2026-12-01T00:00:00Z.
    const DAY0: u64 = 1_796_083_200_000;

    fn sched(cron: &str, missed: MissedFires) -> CompiledSchedule {
        CompiledSchedule::compile(Schedule {
            id: "s".into(),
            cron: cron.into(),
            input: ScheduleInput::Text("go".into()),
            missed: Some(missed),
            grace_ms: None,
        })
        .unwrap()
    }

    #[test]
    fn the_due_fire_is_the_latest_at_or_before_now_and_never_before_the_schedule_existed() {
        let s = sched("0 * * * *", MissedFires::RunOnce);
        assert_eq!(s.due(DAY0 + 10 * HOUR, 0), Due::Fire(DAY0 + 10 * HOUR), "inclusive of now");
        assert_eq!(s.due(DAY0 + 10 * HOUR + 30 * MIN, 0), Due::Fire(DAY0 + 10 * HOUR));
        // Down from 10:30 to 13:20: the ticks after find the 13:00 fire, once, not 11:00 and 12:00 as well.
        assert_eq!(s.due(DAY0 + 13 * HOUR + 20 * MIN, 0), Due::Fire(DAY0 + 13 * HOUR));
        // A schedule first seen at 10:30 does not fire for 10:00.
        assert_eq!(s.due(DAY0 + 10 * HOUR + 45 * MIN, DAY0 + 10 * HOUR + 30 * MIN), Due::Nothing);
        assert_eq!(s.next_fire(DAY0 + 10 * HOUR), Some(DAY0 + 11 * HOUR));
    }

    #[test]
    fn a_skipping_schedule_skips_a_fire_found_after_its_grace() {
        let s = sched("0 9 * * *", MissedFires::Skip);
        assert_eq!(s.due(DAY0 + 9 * HOUR + MIN, 0), Due::Fire(DAY0 + 9 * HOUR));
        assert_eq!(s.due(DAY0 + 9 * HOUR + 3 * MIN, 0), Due::Skip(DAY0 + 9 * HOUR));
        let r = sched("0 9 * * *", MissedFires::RunOnce);
        assert_eq!(r.due(DAY0 + 20 * HOUR, 0), Due::Fire(DAY0 + 9 * HOUR));
    }

    #[test]
    fn bad_schedules_are_refused_with_codes() {
        let mk = |id: &str, cron: &str, input: ScheduleInput| {
            CompiledSchedule::compile(Schedule {
                id: id.into(),
                cron: cron.into(),
                input,
                missed: None,
                grace_ms: Some(1),
            })
            .unwrap_err()
        };
        let text = || ScheduleInput::Text("go".into());
        assert_eq!(mk("a.b", "* * * * *", text()).code, ErrorCode::SessionIdInvalid);
        for cron in ["", "* * * *", "61 * * * *", "0 0 30 2 *", "* * * * * *", "nonsense"] {
            let err = mk("a", cron, text());
            assert_eq!(err.code, ErrorCode::ConfigInvalid, "{cron:?}");
            assert!(err.message.contains("schedule 'a'"), "{}", err.message);
        }
        assert_eq!(mk("a", "@daily", ScheduleInput::Messages(vec![])).code, ErrorCode::ConfigInvalid);
        let dup = Schedule { id: "x".into(), cron: "@hourly".into(), input: text(), missed: None, grace_ms: Some(1) };
        assert_eq!(compile_all(vec![dup.clone(), dup]).unwrap_err().code, ErrorCode::ConfigInvalid);
    }

    #[test]
    fn a_schedule_reads_from_json_with_defaults_and_refuses_unknown_fields() {
        let s: Schedule = serde_json::from_str(r#"{"id":"daily","cron":"0 9 * * 1-5","input":"report"}"#).unwrap();
        assert_eq!(s.missed(), MissedFires::RunOnce);
        assert_eq!(s.grace_ms(), DEFAULT_GRACE_MS);
        assert!(serde_json::from_str::<Schedule>(r#"{"id":"d","cron":"@daily","input":"x","every":1}"#).is_err());
        let s: Schedule = serde_json::from_str(
            r#"{"id":"d","cron":"@daily","input":[{"role":"user","content":"x"}],"missed":"skip"}"#,
        )
        .unwrap();
        assert_eq!(s.missed(), MissedFires::Skip);
        assert_eq!(s.input.messages().len(), 1);
    }
}
