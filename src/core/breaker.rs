//! A circuit breaker per dependency (issue 31, part 4): "a circuit breaker per dependency". The runtime keeps one
//! per model id ([`crate::runtime::Breakers`], with `AgentOptions::breaker`). It watches the outcomes of calls to one dependency (a provider, a
//! webhook host) over a sliding window; once at least `minCalls` calls in the window failed at least
//! `failurePercent` of the time it **opens**: calls are refused at once (the caller fails fast with a retryable
//! error, or goes to a fallback) for `coolDownMs`. Then it is **half-open**: one call, the probe, is let through
//! (the others are still refused); the probe's success closes it (the window starts empty), its failure opens it
//! for another cool-down. Only failures that say the dependency is unwell count (the caller decides: a refused
//! request is the caller's fault, not the dependency's). Time is the caller's clock (ms), so the machine is pure
//! and every transition is tested over generated histories.

use serde::{de, Deserialize, Deserializer, Serialize};
use serde_json::Value;

/// When a breaker opens and how long it stays open.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase")]
pub struct BreakerOptions {
    /// The sliding window outcomes are counted over (ms).
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    pub window_ms: u64,
    /// Calls the window needs before it can open (fewer say nothing).
    pub min_calls: u32,
    /// The share of failed calls in the window that opens it (percent, 1 to 100).
    pub failure_percent: u32,
    /// How long it stays open before a probe is let through (ms).
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    pub cool_down_ms: u64,
}

/// Read by hand from a JSON value (every field optional, unknown fields refused): a serde derive of its own costs
/// the Worker about a kilobyte more.
impl<'de> Deserialize<'de> for BreakerOptions {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<BreakerOptions, D::Error> {
        const FIELDS: [&str; 4] = ["windowMs", "minCalls", "failurePercent", "coolDownMs"];
        let Value::Object(fields) = Value::deserialize(d)? else {
            return Err(de::Error::custom(
                "an object {windowMs?, minCalls?, failurePercent?, coolDownMs?} was expected",
            ));
        };
        let mut o = BreakerOptions::default();
        for (name, value) in fields {
            let Some(i) = FIELDS.iter().position(|f| *f == name) else {
                return Err(de::Error::custom(format!(
                    "unknown field `{name}`, expected one of {}",
                    FIELDS.join(", ")
                )));
            };
            let max = if i == 1 || i == 2 { u64::from(u32::MAX) } else { u64::MAX };
            let n = value
                .as_u64()
                .filter(|n| *n <= max)
                .ok_or_else(|| de::Error::custom(format!("`{name}` must be a whole number from 0")))?;
            match i {
                0 => o.window_ms = n,
                1 => o.min_calls = n as u32,
                2 => o.failure_percent = n as u32,
                _ => o.cool_down_ms = n,
            }
        }
        Ok(o)
    }
}

impl Default for BreakerOptions {
    fn default() -> Self {
        BreakerOptions { window_ms: 30_000, min_calls: 5, failure_percent: 50, cool_down_ms: 30_000 }
    }
}

/// A breaker's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BreakerState {
    /// Calls go through; outcomes are counted.
    Closed,
    /// Calls are refused until `until_ms`.
    Open {
        /// When a probe may go through.
        until_ms: u64,
    },
    /// One probe is out (since `since_ms`); other calls are refused until it reports, or until a cool-down went
    /// by without a report (its caller died): then another probe goes.
    HalfOpen {
        /// When the probe went out.
        since_ms: u64,
    },
}

/// What a caller may do now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Permit {
    /// Call; report the outcome with [`Breaker::record`].
    Call,
    /// Call as the probe of a half-open breaker; report its outcome with [`Breaker::record`].
    Probe,
    /// Do not call: fail fast (retryable after `retry_after_ms`) or use a fallback.
    Refuse {
        /// When the breaker lets a probe through, at the earliest.
        retry_after_ms: u64,
    },
}

/// One dependency's breaker.
#[derive(Clone, Debug)]
pub struct Breaker {
    opts: BreakerOptions,
    state: BreakerState,
    /// Outcomes in the window, oldest first: (when, failed).
    window: Vec<(u64, bool)>,
}

impl Breaker {
    /// A closed breaker.
    pub fn new(opts: BreakerOptions) -> Breaker {
        Breaker { opts, state: BreakerState::Closed, window: Vec::new() }
    }

    /// Its state (an open breaker whose cool-down ended reads as open until a caller asks).
    pub fn state(&self) -> BreakerState {
        self.state
    }

    /// Whether a call may go out at `now_ms`: an open breaker past its cool-down lets one probe through.
    pub fn allow(&mut self, now_ms: u64) -> Permit {
        match self.state {
            BreakerState::Closed => Permit::Call,
            BreakerState::Open { until_ms } if now_ms < until_ms => {
                Permit::Refuse { retry_after_ms: until_ms - now_ms }
            }
            BreakerState::HalfOpen { since_ms } if now_ms < since_ms.saturating_add(self.opts.cool_down_ms) => {
                Permit::Refuse { retry_after_ms: since_ms.saturating_add(self.opts.cool_down_ms) - now_ms }
            }
            BreakerState::Open { .. } | BreakerState::HalfOpen { .. } => {
                self.state = BreakerState::HalfOpen { since_ms: now_ms };
                Permit::Probe
            }
        }
    }

    /// Takes in another replica's word that the dependency's breaker is open until `until_ms` (the sweep's
    /// stored state): a closed breaker opens until then (its window starts over); an open or half-open one
    /// keeps its own course. A time already past changes nothing.
    pub fn adopt_open(&mut self, now_ms: u64, until_ms: u64) {
        if self.state == BreakerState::Closed && until_ms > now_ms {
            self.window.clear();
            self.state = BreakerState::Open { until_ms };
        }
    }

    /// Reports the outcome of a call `allow` permitted (`probe`: it was the probe). A probe's success closes the
    /// breaker, its failure opens it again; a call's outcome is counted, and a window that failed enough opens it.
    /// A late report of a call made while it was closed, arriving when it is open or half-open, changes nothing.
    pub fn record(&mut self, now_ms: u64, failed: bool, probe: bool) {
        match (self.state, probe) {
            (BreakerState::HalfOpen { .. }, true) => {
                self.window.clear();
                self.state = match failed {
                    true => BreakerState::Open { until_ms: now_ms.saturating_add(self.opts.cool_down_ms) },
                    false => BreakerState::Closed,
                };
            }
            (BreakerState::Closed, false) => {
                let from = now_ms.saturating_sub(self.opts.window_ms);
                self.window.retain(|(at, _)| *at >= from);
                self.window.push((now_ms, failed));
                let calls = self.window.len() as u64;
                let failures = self.window.iter().filter(|(_, f)| *f).count() as u64;
                if calls >= u64::from(self.opts.min_calls.max(1))
                    && failures * 100 >= calls * u64::from(self.opts.failure_percent.clamp(1, 100))
                {
                    self.window.clear();
                    self.state = BreakerState::Open { until_ms: now_ms.saturating_add(self.opts.cool_down_ms) };
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn opts() -> BreakerOptions {
        BreakerOptions { window_ms: 1_000, min_calls: 4, failure_percent: 50, cool_down_ms: 5_000 }
    }

    #[test]
    fn options_read_by_hand_as_a_derive_would() {
        let read = |text: &str| serde_json::from_str::<BreakerOptions>(text);
        assert_eq!(read("{}").unwrap(), BreakerOptions::default());
        let all = r#"{"windowMs": 1, "minCalls": 2, "failurePercent": 3, "coolDownMs": 4}"#;
        let o = BreakerOptions { window_ms: 1, min_calls: 2, failure_percent: 3, cool_down_ms: 4 };
        assert_eq!(read(all).unwrap(), o);
        assert_eq!(read(&serde_json::to_string(&o).unwrap()).unwrap(), o, "what it writes reads back");
        for bad in [
            r#"{"coolDown": 1}"#,
            r#"{"minCalls": "5"}"#,
            r#"{"minCalls": -1}"#,
            r#"{"minCalls": 4294967296}"#,
            "7",
            "null",
        ] {
            assert!(read(bad).is_err(), "{bad}");
        }
        assert!(read(r#"{"coolDown": 1}"#).unwrap_err().to_string().contains("unknown field `coolDown`"));
    }

    #[test]
    fn it_opens_on_a_failing_window_refuses_through_the_cool_down_and_a_probe_decides() {
        let mut b = Breaker::new(opts());
        for (t, failed) in [(0, true), (10, false), (20, true)] {
            assert_eq!(b.allow(t), Permit::Call);
            b.record(t, failed, false);
        }
        assert_eq!(b.state(), BreakerState::Closed, "three calls are fewer than minCalls");
        b.record(30, true, false);
        assert_eq!(b.state(), BreakerState::Open { until_ms: 5_030 }, "3 of 4 failed");
        assert_eq!(b.allow(5_029), Permit::Refuse { retry_after_ms: 1 });
        assert_eq!(b.allow(5_030), Permit::Probe);
        assert_eq!(b.allow(5_031), Permit::Refuse { retry_after_ms: 4_999 }, "one probe at a time");
        b.record(5_040, true, true);
        assert_eq!(b.state(), BreakerState::Open { until_ms: 10_040 }, "a failed probe opens it again");
        assert_eq!(b.allow(10_040), Permit::Probe);
        b.record(10_050, false, true);
        assert_eq!((b.state(), b.allow(10_051)), (BreakerState::Closed, Permit::Call), "a good probe closes it");
        // Another replica's open breaker, adopted by a closed one only, and only while it is still open.
        let mut closed = Breaker::new(opts());
        closed.adopt_open(100, 100);
        assert_eq!(closed.state(), BreakerState::Closed, "a time past changes nothing");
        closed.adopt_open(100, 3_000);
        assert_eq!(
            (closed.state(), closed.allow(2_999)),
            (BreakerState::Open { until_ms: 3_000 }, Permit::Refuse { retry_after_ms: 1 })
        );
        assert_eq!(closed.allow(3_000), Permit::Probe);
        closed.adopt_open(3_001, 9_000);
        assert_eq!(closed.state(), BreakerState::HalfOpen { since_ms: 3_000 }, "its own probe goes on");
        // A probe that never reports (its caller died) is replaced after a cool-down.
        let mut lost = Breaker::new(opts());
        for t in 0..4 {
            lost.record(t, true, false);
        }
        assert_eq!(lost.allow(5_003), Permit::Probe);
        assert_eq!(lost.allow(10_002), Permit::Refuse { retry_after_ms: 1 });
        assert_eq!(lost.allow(10_003), Permit::Probe);
        // Old outcomes leave the window: three failures spread over more than a second never open it.
        for t in [20_000, 21_100, 22_200, 23_300] {
            b.record(t, true, false);
        }
        assert_eq!(b.state(), BreakerState::Closed);
    }

    proptest! {
        /// Over any history of calls, outcomes and times, checked against a reference window kept here: a call is
        /// permitted only while closed, a probe only once the cool-down ended and one at a time, a refusal says
        /// when the cool-down ends, and the breaker opens exactly when the window (or the probe) failed.
        #[test]
        fn a_breaker_never_lets_a_call_through_an_open_cool_down(
            steps in proptest::collection::vec((0u64..400, any::<bool>()), 1..200),
        ) {
            let o = opts();
            let mut b = Breaker::new(o);
            let mut now = 0;
            let mut window: Vec<(u64, bool)> = Vec::new();
            for (dt, failed) in steps {
                now += dt;
                let before = b.state();
                match b.allow(now) {
                    Permit::Call => {
                        prop_assert_eq!(before, BreakerState::Closed);
                        b.record(now, failed, false);
                        window.push((now, failed));
                        window.retain(|(at, _)| *at >= now.saturating_sub(o.window_ms));
                        let failures = window.iter().filter(|(_, f)| *f).count();
                        let opens = window.len() >= 4 && failures * 2 >= window.len();
                        prop_assert_eq!(b.state() == (BreakerState::Open { until_ms: now + o.cool_down_ms }), opens);
                        prop_assert_eq!(b.state() == BreakerState::Closed, !opens);
                        if opens {
                            window.clear();
                        }
                    }
                    Permit::Probe => {
                        let due = matches!(before, BreakerState::Open { until_ms } if now >= until_ms);
                        prop_assert!(due, "a probe before the cool-down ended: {:?} at {}", before, now);
                        prop_assert_eq!(b.allow(now), Permit::Refuse { retry_after_ms: o.cool_down_ms }, "one probe at a time");
                        b.record(now, failed, true);
                        let expected =
                            if failed { BreakerState::Open { until_ms: now + o.cool_down_ms } } else { BreakerState::Closed };
                        prop_assert_eq!(b.state(), expected);
                    }
                    Permit::Refuse { retry_after_ms } => match before {
                        BreakerState::Open { until_ms } => prop_assert_eq!(now + retry_after_ms, until_ms),
                        other => prop_assert!(false, "refused while {:?}", other),
                    },
                }
            }
        }
    }
}
