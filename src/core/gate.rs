//! The recovery gate (issue 33): at most a ceiling of recovery resumes on one provider at once, across every
//! isolate that resumes runs (strict mode's alarms, a recovery queue's consumers), so a provider that comes back
//! after an outage sees a ramp, not every interrupted run at once. Pure state and decisions; whoever holds the
//! state (an object per provider, or one process's memory) answers calls with [`GateState::answer`].
//!
//! A resume asks for a slot before it calls the provider and gives it back when it ends. A slot not given back
//! within [`SLOT_MS`] is taken back (its holder is presumed dead). A caller turned away is given a turn: a
//! time to ask again, spaced from the turns given before by the mean time a slot is held divided by the
//! ceiling, so the callers waiting come back about as fast as slots free up instead of all at once. A release
//! that carries a provider's `Retry-After` (a 429) holds every slot back until then.

use crate::core::wire::json_text;
use serde_json::Value;

/// How long a slot is held at most: a holder that neither releases nor asks again by then is presumed dead.
pub const SLOT_MS: u64 = 120_000;

/// The mean time a slot is held, before any release was measured.
pub const FIRST_HOLD_MS: u64 = 2_000;

/// A pause a 429 without `Retry-After` asks for.
pub const RATE_LIMIT_PAUSE_MS: u64 = 1_000;

/// One slot held.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slot {
    /// The run holding it.
    pub run: String,
    /// When it was granted.
    pub at: u64,
    /// When it is taken back if not released.
    pub until: u64,
    /// How many steps of the run hold it (an alarm delivered twice: both are granted, one finds the run busy): the
    /// slot is free once each gave it back.
    pub holders: u32,
}

/// A gate's state, in the memory of whoever holds the gate. (Calls and answers are JSON read and written by hand
/// over `serde_json::Value`: derives would cost the Worker's wasm more.)
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GateState {
    /// The slots held.
    pub held: Vec<Slot>,
    /// The last turn given to a caller turned away.
    pub last_turn_at: u64,
    /// The mean time a slot was held (a moving average over releases; 0: none measured yet).
    pub mean_hold_ms: u64,
    /// No slot is granted before this (a provider's `Retry-After`).
    pub paused_until: u64,
}

/// A gate's answer to a request for a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grant {
    /// The slot is the caller's until it releases it (or [`SLOT_MS`] passed).
    Granted,
    /// No slot now: ask again at the time given (ms since the epoch).
    Later(u64),
}

impl Grant {
    /// As JSON: `{"grant":"granted"}` or `{"grant":"later","at":…}`.
    pub fn to_json(self) -> String {
        match self {
            Grant::Granted => r#"{"grant":"granted"}"#.into(),
            Grant::Later(at) => format!(r#"{{"grant":"later","at":{at}}}"#),
        }
    }

    /// Reads a gate's answer: `None` if it is not a grant (an error the gate answered, or garbage).
    pub fn parse(answer: &str) -> Option<Grant> {
        let v: Value = serde_json::from_str(answer).ok()?;
        match v.get("grant")?.as_str()? {
            "granted" => Some(Grant::Granted),
            "later" => Some(Grant::Later(v.get("at")?.as_u64()?)),
            _ => None,
        }
    }
}

/// A call to a gate: an acquire's JSON (`{"op":"acquire","runId":…,"cap":…}`).
pub fn acquire_call(run_id: &str, cap: u32) -> String {
    format!(r#"{{"op":"acquire","runId":{},"cap":{cap}}}"#, json_text(&Value::String(run_id.into())))
}

/// A call to a gate: a release's JSON (`{"op":"release","runId":…,"retryAfterMs"?:…}`).
pub fn release_call(run_id: &str, retry_after_ms: Option<u64>) -> String {
    let id = json_text(&Value::String(run_id.into()));
    match retry_after_ms {
        Some(ms) => format!(r#"{{"op":"release","runId":{id},"retryAfterMs":{ms}}}"#),
        None => format!(r#"{{"op":"release","runId":{id}}}"#),
    }
}

impl GateState {
    /// A slot for `run` at `now` while fewer than `cap` (at least 1) are held and no `Retry-After` holds the gate
    /// back; else a turn to ask again. A run that holds a slot already keeps it (its time renewed): a repeated
    /// alarm or message takes no second slot.
    pub fn acquire(&mut self, run: &str, cap: u32, now: u64) -> Grant {
        self.held.retain(|s| s.until > now);
        if let Some(s) = self.held.iter_mut().find(|s| s.run == run) {
            s.until = now.saturating_add(SLOT_MS);
            s.holders = s.holders.saturating_add(1);
            return Grant::Granted;
        }
        let cap = cap.max(1) as usize;
        if now >= self.paused_until && self.held.len() < cap {
            self.held.push(Slot { run: run.to_string(), at: now, until: now.saturating_add(SLOT_MS), holders: 1 });
            return Grant::Granted;
        }
        let mean = if self.mean_hold_ms == 0 { FIRST_HOLD_MS } else { self.mean_hold_ms };
        let spacing = (mean / cap as u64).max(1);
        let at = self.last_turn_at.max(now).max(self.paused_until).saturating_add(spacing);
        self.last_turn_at = at;
        Grant::Later(at)
    }

    /// `run`'s slot back at `now` (nothing if it holds none); `retry_after_ms` holds every slot back that long.
    pub fn release(&mut self, run: &str, now: u64, retry_after_ms: Option<u64>) {
        if let Some(i) = self.held.iter().position(|s| s.run == run) {
            self.held[i].holders = self.held[i].holders.saturating_sub(1);
            if self.held[i].holders > 0 {
                return self.pause(now, retry_after_ms);
            }
            let held = now.saturating_sub(self.held.swap_remove(i).at);
            self.mean_hold_ms = match self.mean_hold_ms {
                0 => held.max(1),
                m => (m.saturating_mul(7).saturating_add(held) / 8).max(1),
            };
        }
        self.pause(now, retry_after_ms);
    }

    /// Holds every slot back `retry_after_ms` from `now` (a provider's 429).
    fn pause(&mut self, now: u64, retry_after_ms: Option<u64>) {
        if let Some(ms) = retry_after_ms {
            self.paused_until = self.paused_until.max(now.saturating_add(ms));
        }
    }

    /// Answers one call ([`acquire_call`], [`release_call`]) at `now`: a [`Grant`]'s JSON for an acquire, `{}`
    /// for a release, `{"error": …}` for a call that cannot be read (the state is left as it was).
    pub fn answer(&mut self, call: &str, now: u64) -> String {
        let v: Value = serde_json::from_str(call).unwrap_or(Value::Null);
        let run = v.get("runId").and_then(Value::as_str);
        match (v.get("op").and_then(Value::as_str), run) {
            (Some("acquire"), Some(run)) => match v.get("cap").and_then(Value::as_u64) {
                Some(cap) => self.acquire(run, u32::try_from(cap).unwrap_or(u32::MAX), now).to_json(),
                None => r#"{"error":"not a gate call: an acquire needs a cap"}"#.into(),
            },
            (Some("release"), Some(run)) => {
                self.release(run, now, v.get("retryAfterMs").and_then(Value::as_u64));
                "{}".into()
            }
            _ => r#"{"error":"not a gate call: {\"op\": \"acquire\"|\"release\", \"runId\": …}"}"#.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_cap_slots_and_the_turned_away_come_back_spaced() {
        let mut g = GateState::default();
        assert_eq!(g.acquire("a", 2, 0), Grant::Granted);
        assert_eq!(g.acquire("b", 2, 0), Grant::Granted);
        assert_eq!(g.acquire("a", 2, 5), Grant::Granted, "a holder asking again keeps its slot");
        assert_eq!(g.held.len(), 2);
        // Two steps of `a` hold it (a repeated alarm): the first to give it back does not free it.
        g.release("a", 6, None);
        assert_eq!((g.held.len(), g.mean_hold_ms), (2, 0));
        // Full: turns spaced by the mean hold over the cap (2,000 / 2 before any release).
        assert_eq!(g.acquire("c", 2, 10), Grant::Later(1_010));
        assert_eq!(g.acquire("d", 2, 10), Grant::Later(2_010));
        g.release("a", 400, None);
        assert_eq!(g.mean_hold_ms, 400);
        assert_eq!(g.acquire("c", 2, 1_010), Grant::Granted);
        assert_eq!(g.acquire("e", 2, 1_010), Grant::Later(2_210), "after the last turn, by 400 / 2");
        // A holder that died: its slot is taken back after SLOT_MS.
        assert_eq!(g.acquire("f", 2, SLOT_MS + 1), Grant::Granted);
        assert_eq!(g.held.iter().map(|s| s.run.as_str()).collect::<Vec<_>>(), vec!["c", "f"]);
    }

    #[test]
    fn a_retry_after_holds_every_slot_back() {
        let mut g = GateState::default();
        assert_eq!(g.acquire("a", 5, 0), Grant::Granted);
        g.release("a", 100, Some(3_000));
        assert_eq!(g.acquire("b", 5, 200), Grant::Later(3_100 + 20));
        assert_eq!(g.acquire("b", 5, 3_100), Grant::Granted);
    }

    #[test]
    fn answers_calls_as_json_and_refuses_what_it_cannot_read() {
        let mut g = GateState::default();
        assert_eq!(g.answer(&acquire_call("a", 1), 0), r#"{"grant":"granted"}"#);
        let later = g.answer(&acquire_call("b", 1), 0);
        assert_eq!(
            (later.as_str(), Grant::parse(&later)),
            (r#"{"grant":"later","at":2000}"#, Some(Grant::Later(2_000)))
        );
        assert_eq!(g.answer(&release_call("a", Some(5)), 10), "{}");
        assert_eq!((g.held.len(), g.paused_until), (0, 15));
        let before = g.clone();
        assert!(g.answer(r#"{"op":"acquire","runId":"a"}"#, 10).contains("not a gate call"));
        assert!(g.answer("[1]", 10).contains("not a gate call"));
        let error = g.answer("{", 10);
        assert!(serde_json::from_str::<serde_json::Value>(&error).is_ok() && Grant::parse(&error).is_none(), "{error}");
        assert_eq!(g, before);
    }
}
