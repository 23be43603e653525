//! The circuit breakers of an agent's dependencies ([`crate::core::breaker`]): one per dependency — a model's
//! provider ([`super::Model::dependency`]: the endpoint's host) and a tool's host ([`super::Tool::dependency`]:
//! a webhook's) — shared by every execution that holds the same [`Breakers`]: an agent's own by default, shared
//! with its sub-agents and handoff team; the Worker shares one set across the requests of an isolate. Across
//! isolates (replicas) the recovery sweep carries the open ones in the store (state `breakers`): each tick takes
//! in the breakers other replicas opened and records its own ([`Breakers::open_text`], [`Breakers::adopt_text`]).

use crate::core::breaker::{Breaker, BreakerOptions, BreakerState, Permit};
use std::cell::RefCell;

/// Breakers by dependency, in the order each was first called (a handful: a list is smaller code than a map).
#[derive(Debug, Default)]
pub struct Breakers(RefCell<Vec<(String, Breaker)>>);

/// One breaker as `GET /health` shows it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase")]
pub struct BreakerView {
    /// The dependency: a provider's host (`api.openai.com`), `workers-ai`, an AI SDK provider, a webhook's or MCP server's host.
    pub dependency: String,
    /// `closed`, `open` (calls refused until `until`) or `half-open` (one probe is out).
    pub state: String,
    /// When an open breaker lets a probe through (ms since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional, type = "number"))]
    pub until: Option<u64>,
}

impl Breakers {
    /// No breaker yet (each is made closed on its dependency's first call).
    pub fn new() -> Breakers {
        Breakers::default()
    }

    /// Whether a call to `dependency` may go out at `now_ms` ([`Breaker::allow`]).
    pub fn allow(&self, dependency: &str, opts: BreakerOptions, now_ms: u64) -> Permit {
        self.with(dependency, opts, |b| b.allow(now_ms))
    }

    /// Runs `f` on `dependency`'s breaker, made (closed, with `opts`) when there is none yet.
    fn with<T>(&self, dependency: &str, opts: BreakerOptions, f: impl FnOnce(&mut Breaker) -> T) -> T {
        let mut all = self.0.borrow_mut();
        let i = match all.iter().position(|(d, _)| d == dependency) {
            Some(i) => i,
            None => {
                all.push((dependency.to_string(), Breaker::new(opts)));
                all.len() - 1
            }
        };
        f(&mut all[i].1)
    }

    /// Reports a call's outcome ([`Breaker::record`]).
    pub fn record(&self, dependency: &str, now_ms: u64, failed: bool, probe: bool) {
        if let Some((_, b)) = self.0.borrow_mut().iter_mut().find(|(d, _)| d == dependency) {
            b.record(now_ms, failed, probe);
        }
    }

    /// The state of `dependency`'s breaker (`None`: never called).
    pub fn state(&self, dependency: &str) -> Option<BreakerState> {
        self.0.borrow().iter().find(|(d, _)| d == dependency).map(|(_, b)| b.state())
    }

    /// Every breaker as `GET /health` shows it: a JSON array of [`BreakerView`]s, in the order each was first
    /// called (written by hand: a serde derive for it costs the Worker more than this).
    pub fn json(&self) -> String {
        let mut out = String::from("[");
        for (i, (dependency, b)) in self.0.borrow().iter().enumerate() {
            let (state, until) = match b.state() {
                BreakerState::Closed => ("closed", None),
                BreakerState::Open { until_ms } => ("open", Some(until_ms)),
                BreakerState::HalfOpen { .. } => ("half-open", None),
            };
            // Ignored: a string always serialises.
            let dependency = serde_json::to_string(dependency.as_str()).unwrap_or_default();
            let until = until.map(|t| format!(",\"until\":{t}")).unwrap_or_default();
            let sep = if i == 0 { "" } else { "," };
            out.push_str(&format!("{sep}{{\"dependency\":{dependency},\"state\":\"{state}\"{until}}}"));
        }
        out.push(']');
        out
    }

    /// Every breaker, in the order each was first called.
    pub fn views(&self) -> Vec<BreakerView> {
        self.0
            .borrow()
            .iter()
            .map(|(dependency, b)| {
                let (state, until) = match b.state() {
                    BreakerState::Closed => ("closed", None),
                    BreakerState::Open { until_ms } => ("open", Some(until_ms)),
                    BreakerState::HalfOpen { .. } => ("half-open", None),
                };
                BreakerView { dependency: dependency.clone(), state: state.into(), until }
            })
            .collect()
    }

    /// The breakers open at `now_ms`, as the sweep records them for the other replicas: a line
    /// `<until ms> <dependency>` for each (a plain text, read back by [`Breakers::adopt_text`]).
    pub fn open_text(&self, now_ms: u64) -> String {
        let mut text = String::new();
        for (dependency, b) in self.0.borrow().iter() {
            if let BreakerState::Open { until_ms } = b.state() {
                if until_ms > now_ms && !dependency.contains('\n') {
                    text.push_str(&format!("{until_ms} {dependency}\n"));
                }
            }
        }
        text
    }

    /// Takes in the breakers another replica found open ([`Breakers::open_text`]; [`Breaker::adopt_open`]; one
    /// not known here is made). A line that does not read is skipped: the next tick writes the text again.
    pub fn adopt_text(&self, text: &str, opts: BreakerOptions, now_ms: u64) {
        for line in text.split_terminator('\n') {
            let Some(space) = line.bytes().position(|b| b == b' ') else { continue };
            let (until, dependency) = (&line[..space], &line[space + 1..]);
            if let (Ok(until), false) = (until.parse::<u64>(), dependency.is_empty()) {
                self.with(dependency, opts, |b| b.adopt_open(now_ms, until));
            }
        }
    }
}
