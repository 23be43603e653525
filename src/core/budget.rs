//! Budgets: what a run (and a session, a conversation of many runs) may spend before it stops.
//!
//! A run's budget bounds the current run's tokens ([`Checkpoint::usage`]) and its execution time
//! ([`Checkpoint::active_ms`], summed across its executions, so a resume does not start the clock again); a
//! session's budget bounds the tokens of the whole conversation ([`Checkpoint::total_usage`]: every run of the
//! id, and every turn of a session). `maxSteps` stays where it was (its own finish reason, `max-steps`).
//!
//! The machine checks the budget before each model call (at the boundary after the last call's usage was
//! recorded, in the same place as `maxSteps`). Usage and time are in the journal, so a crash between a usage
//! update and the check changes nothing: the resumed execution checks the recorded totals before it calls the
//! model. A run therefore goes over a limit by at most the one model call that crossed it (a call's usage is
//! known only after it). Exhaustion is an ordinary end: the run is `finished` with finish reason
//! `budget-exceeded` and a note naming the limit, its transcript kept; `resume` continues it in place once the
//! limit is raised (refused with `STEADFAST_BUDGET_EXCEEDED` while it still holds), and a new message continues
//! it as a new run (whose own budget starts from zero; the session's does not).
//!
//! **Sub-agents.** A lead's remaining budget bounds the child runs its sub-agent calls start: when a child is
//! created, what its lead has left of every limit (its run's, its conversation's, and its own cap if it is a child
//! itself) is recorded in the child's first entry as its [`BudgetCap`] (never changed after), and the child stops
//! as on its own budget when it reaches it (the note names `lead.maxTotalTokens` and so on). The child's spend
//! comes back into its lead's usage with its result, so the lead stops at its next check. Children started in
//! the same turn each get what the lead had left when they started (together they may spend it more than once).

use super::checkpoint::Checkpoint;
use super::cost::usd_text;
use super::error::{Error, ErrorCode};
use super::transcript::Usage;
use serde::{Deserialize, Serialize};

/// Token and cost limits (each `null` or left out: no limit).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct TokenLimits {
    /// Prompt tokens.
    #[cfg_attr(feature = "ts", ts(type = "number | null"))]
    pub max_input_tokens: Option<u64>,
    /// Completion tokens.
    #[cfg_attr(feature = "ts", ts(type = "number | null"))]
    pub max_output_tokens: Option<u64>,
    /// Both together.
    #[cfg_attr(feature = "ts", ts(type = "number | null"))]
    pub max_total_tokens: Option<u64>,
    /// What the model calls may cost, in US dollars ([`crate::core::cost`]; kept as nano-dollars, six decimals
    /// counted). Needs a price for every model that may be called.
    #[serde(with = "crate::core::cost::usd_limit")]
    #[cfg_attr(feature = "ts", ts(type = "number | null"))]
    pub max_cost_usd: Option<u64>,
}

impl TokenLimits {
    /// Whether no limit is set.
    pub fn is_empty(&self) -> bool {
        *self == TokenLimits::default()
    }

    /// The first limit `usage` has reached, as (its name, the limit, the amount used); `prefix` goes before the
    /// names (`sessionBudget.`).
    fn reached(&self, usage: Usage, prefix: &'static str) -> Option<Exceeded> {
        let checks = [
            ("maxInputTokens", self.max_input_tokens, Some(usage.input_tokens)),
            ("maxOutputTokens", self.max_output_tokens, Some(usage.output_tokens)),
            ("maxTotalTokens", self.max_total_tokens, Some(usage.total())),
            // An unknown cost is not checked: a budget with a cost limit needs every model priced (the agent's
            // build refuses one that is not), so only a run recorded before costs were kept has none.
            (COST, self.max_cost_usd, usage.cost),
        ];
        checks.into_iter().find_map(|(name, max, used)| {
            let used = used?;
            max.filter(|&max| used >= max).map(|max| Exceeded { prefix, limit: name, max, used })
        })
    }
}

/// The cost limit's name (its amounts are nano-dollars).
const COST: &str = "maxCostUsd";

/// What a child run may spend: its lead's remaining budget when the child was created (recorded in the child's
/// first entry, [`Checkpoint::budget_cap`]); each field `None` when the lead had no such limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase", default)]
pub struct BudgetCap {
    /// Prompt tokens.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(type = "number", optional))]
    pub max_input_tokens: Option<u64>,
    /// Completion tokens.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(type = "number", optional))]
    pub max_output_tokens: Option<u64>,
    /// Both together.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(type = "number", optional))]
    pub max_total_tokens: Option<u64>,
    /// Execution time (ms).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(type = "number", optional))]
    pub max_duration_ms: Option<u64>,
    /// Cost (in dollars on the wire; nano-dollars here).
    #[serde(with = "crate::core::cost::usd_nanos", skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(type = "number", optional))]
    pub max_cost_usd: Option<u64>,
}

impl BudgetCap {
    /// This cap shared by `ways` children that may spend at once (the sub-agent calls of one turn that have no
    /// result yet): each gets an equal part of the tokens and the cost (rounded down), so together they cannot
    /// spend more than the whole; the time limit is not shared (children that run at once spend it together).
    pub fn shared(self, ways: u64) -> BudgetCap {
        let part = |v: Option<u64>| v.map(|v| v / ways.max(1));
        BudgetCap {
            max_input_tokens: part(self.max_input_tokens),
            max_output_tokens: part(self.max_output_tokens),
            max_total_tokens: part(self.max_total_tokens),
            max_duration_ms: self.max_duration_ms,
            max_cost_usd: part(self.max_cost_usd),
        }
    }
}

/// What an exhausted budget does to the execution that finds it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "lowercase")]
pub enum OnExceeded {
    /// The run finishes with finish reason `budget-exceeded`; the execution reports it as its result.
    #[default]
    Finish,
    /// The run finishes the same way, and the execution fails with `STEADFAST_BUDGET_EXCEEDED` (not retryable).
    Throw,
}

crate::core::wire::unit_enum_de!(OnExceeded {
    "finish" => Finish,
    "throw" => Throw,
});

/// A run's budget, as the machine checks it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Budget {
    /// The current run's tokens.
    pub run: TokenLimits,
    /// The current run's execution time (ms, [`Checkpoint::active_ms`]).
    pub max_duration_ms: Option<u64>,
    /// The conversation's tokens (every run of the id; a session's turns).
    pub session: TokenLimits,
    /// A child run's cap: what its lead had left when it was created ([`Checkpoint::budget_cap`]).
    pub cap: BudgetCap,
}

/// A limit a run has reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exceeded {
    prefix: &'static str,
    /// The limit's name (`maxTotalTokens`, `maxDurationMs`, ...).
    pub limit: &'static str,
    /// Its value.
    pub max: u64,
    /// What the run has used.
    pub used: u64,
}

impl Exceeded {
    /// The limit's full name: `maxTotalTokens`, or `sessionBudget.maxTotalTokens` for the session's.
    pub fn name(&self) -> String {
        format!("{}{}", self.prefix, self.limit)
    }

    /// The limit and the amount used, as people read them (`maxCostUsd $0.5, used $0.51`).
    fn amounts(&self) -> String {
        match self.limit {
            COST => format!("{} {}, used {}", self.name(), usd_text(self.max), usd_text(self.used)),
            _ => format!("{} {}, used {}", self.name(), self.max, self.used),
        }
    }

    /// The note of the run's result.
    pub fn note(&self) -> String {
        format!(
            "Stopped: the run reached its budget ({}). The transcript is kept; raise the limit and resume the run, or \
             send a message to continue.",
            self.amounts()
        )
    }

    /// `STEADFAST_BUDGET_EXCEEDED` for run `run_id`, with `{limit, max, used}` as details (a cost in dollars).
    pub fn error(&self, run_id: &str) -> Error {
        let (name, amounts) = (self.name(), self.amounts());
        let number = |n: u64| match self.limit {
            COST => usd_text(n).split_off(1),
            _ => n.to_string(),
        };
        let (max, used) = (number(self.max), number(self.used));
        // The details' text is built, not a `json!` map: the limit's name is letters and dots (smaller wasm).
        let details = format!(r#"{{"limit":"{name}","max":{max},"used":{used}}}"#);
        Error::new(
            ErrorCode::BudgetExceeded,
            format!("run '{run_id}' reached its budget ({amounts}): raise the limit to resume it"),
        )
        .with_run(run_id)
        .with_details(serde_json::from_str(&details).unwrap_or_default())
    }
}

impl Budget {
    /// The first limit `cp` has reached, `active_ms` being its execution time so far (the checkpoint's and this
    /// execution's since its last commit).
    pub fn exceeded(&self, cp: &Checkpoint, active_ms: u64) -> Option<Exceeded> {
        self.run
            .reached(cp.usage, "")
            .or_else(|| {
                self.max_duration_ms.filter(|&max| active_ms >= max).map(|max| Exceeded {
                    prefix: "",
                    limit: "maxDurationMs",
                    max,
                    used: active_ms,
                })
            })
            .or_else(|| self.session.reached(cp.total_usage, "sessionBudget."))
            .or_else(|| {
                let c = self.cap;
                let tokens = TokenLimits {
                    max_input_tokens: c.max_input_tokens,
                    max_output_tokens: c.max_output_tokens,
                    max_total_tokens: c.max_total_tokens,
                    max_cost_usd: c.max_cost_usd,
                };
                tokens.reached(cp.usage, "lead.").or_else(|| {
                    c.max_duration_ms.filter(|&max| active_ms >= max).map(|max| Exceeded {
                        prefix: "lead.",
                        limit: "maxDurationMs",
                        max,
                        used: active_ms,
                    })
                })
            })
    }

    /// This budget with `cap` (a child run's recorded cap) in force too.
    pub fn with_cap(self, cap: Option<BudgetCap>) -> Budget {
        Budget { cap: cap.unwrap_or_default(), ..self }
    }

    /// What a run whose state is `cp` (execution time `active_ms`) has left of every limit of this budget, as
    /// the cap of a child run it starts: the least of its run's, its conversation's and its own cap's remainders,
    /// per measure. `None` when it has no limit at all (the child then has none from its lead).
    pub fn remaining(&self, cp: &Checkpoint, active_ms: u64) -> Option<BudgetCap> {
        let left = |max: Option<u64>, used: u64| max.map(|m| m.saturating_sub(used));
        let least = |all: [Option<u64>; 3]| all.into_iter().flatten().min();
        let (u, t, c) = (cp.usage, cp.total_usage, self.cap);
        let cap = BudgetCap {
            max_input_tokens: least([
                left(self.run.max_input_tokens, u.input_tokens),
                left(self.session.max_input_tokens, t.input_tokens),
                left(c.max_input_tokens, u.input_tokens),
            ]),
            max_output_tokens: least([
                left(self.run.max_output_tokens, u.output_tokens),
                left(self.session.max_output_tokens, t.output_tokens),
                left(c.max_output_tokens, u.output_tokens),
            ]),
            max_total_tokens: least([
                left(self.run.max_total_tokens, u.total()),
                left(self.session.max_total_tokens, t.total()),
                left(c.max_total_tokens, u.total()),
            ]),
            max_duration_ms: least([left(self.max_duration_ms, active_ms), left(c.max_duration_ms, active_ms), None]),
            max_cost_usd: least([
                self.run.max_cost_usd.zip(u.cost).map(|(m, c)| m.saturating_sub(c)),
                self.session.max_cost_usd.zip(t.cost).map(|(m, c)| m.saturating_sub(c)),
                c.max_cost_usd.zip(u.cost).map(|(m, c)| m.saturating_sub(c)),
            ]),
        };
        (cap != BudgetCap::default()).then_some(cap)
    }

    /// Whether a limit is set to 0 (a configuration refuses it: the run could not call its model once).
    pub fn has_zero(&self) -> bool {
        let (r, s) = (self.run, self.session);
        [r.max_input_tokens, r.max_output_tokens, r.max_total_tokens, r.max_cost_usd, self.max_duration_ms]
            .into_iter()
            .chain([s.max_input_tokens, s.max_output_tokens, s.max_total_tokens, s.max_cost_usd])
            .any(|v| v == Some(0))
    }

    /// Whether a cost limit is set (every model the run may call then needs a price).
    pub fn limits_cost(&self) -> bool {
        self.run.max_cost_usd.is_some() || self.session.max_cost_usd.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cp(input: u64, output: u64, total_before: (u64, u64)) -> Checkpoint {
        let mut cp = Checkpoint::new("r");
        cp.usage = Usage::tokens(input, output);
        cp.total_usage = Usage::tokens(total_before.0 + input, total_before.1 + output);
        cp
    }

    /// Shared `ways` ways, the parts of every amount add up to no more than the whole (and lose less than one
    /// unit per way); the time limit is each child's whole.
    #[test]
    fn a_cap_shared_by_children_gives_parts_that_add_up_to_at_most_the_whole() {
        use crate::rng::Rng;
        let rng = crate::rng::SplitMix64::new(34);
        for _ in 0..500 {
            let amount = || (rng.next_u64() % 3 != 0).then(|| rng.next_u64() % 1_000_000);
            let cap = BudgetCap {
                max_input_tokens: amount(),
                max_output_tokens: amount(),
                max_total_tokens: amount(),
                max_duration_ms: amount(),
                max_cost_usd: amount(),
            };
            let ways = 1 + rng.next_u64() % 5;
            let part = cap.shared(ways);
            for (whole, p) in [
                (cap.max_input_tokens, part.max_input_tokens),
                (cap.max_output_tokens, part.max_output_tokens),
                (cap.max_total_tokens, part.max_total_tokens),
                (cap.max_cost_usd, part.max_cost_usd),
            ] {
                assert_eq!(whole.is_some(), p.is_some());
                if let (Some(w), Some(p)) = (whole, p) {
                    assert!(p * ways <= w && w - p * ways < ways, "{w} {ways} {p}");
                }
            }
            assert_eq!(part.max_duration_ms, cap.max_duration_ms);
        }
        assert_eq!(
            BudgetCap { max_total_tokens: Some(45), ..BudgetCap::default() }.shared(0).max_total_tokens,
            Some(45)
        );
    }

    #[test]
    fn no_limit_is_never_reached() {
        let b = Budget::default();
        assert_eq!(b.exceeded(&cp(u64::MAX, u64::MAX, (0, 0)), u64::MAX), None);
    }

    #[test]
    fn each_limit_is_reached_at_its_value_not_before() {
        let limits = |i, o, t| TokenLimits {
            max_input_tokens: i,
            max_output_tokens: o,
            max_total_tokens: t,
            ..Default::default()
        };
        let b = Budget { run: limits(Some(100), None, None), ..Default::default() };
        assert_eq!(b.exceeded(&cp(99, 500, (0, 0)), 0), None);
        assert_eq!(
            b.exceeded(&cp(100, 0, (0, 0)), 0).map(|x| (x.name(), x.max, x.used)),
            Some(("maxInputTokens".into(), 100, 100))
        );
        let b = Budget { run: limits(None, Some(10), None), ..Default::default() };
        assert_eq!(b.exceeded(&cp(1000, 9, (0, 0)), 0), None);
        assert_eq!(b.exceeded(&cp(0, 11, (0, 0)), 0).map(|x| x.limit), Some("maxOutputTokens"));
        let b = Budget { run: limits(None, None, Some(50)), ..Default::default() };
        assert_eq!(b.exceeded(&cp(25, 24, (0, 0)), 0), None);
        assert_eq!(b.exceeded(&cp(25, 25, (0, 0)), 0).map(|x| x.used), Some(50));
        let b = Budget { max_duration_ms: Some(1_000), ..Default::default() };
        assert_eq!(b.exceeded(&cp(0, 0, (0, 0)), 999), None);
        assert_eq!(b.exceeded(&cp(0, 0, (0, 0)), 1_000).map(|x| x.limit), Some("maxDurationMs"));
    }

    #[test]
    fn the_session_budget_counts_the_conversation_the_run_budget_only_the_run() {
        let both = TokenLimits { max_total_tokens: Some(100), ..Default::default() };
        let run_only = Budget { run: both, ..Default::default() };
        let session_only = Budget { session: both, ..Default::default() };
        // 40 tokens in this run, 80 before it.
        let c = cp(30, 10, (60, 20));
        assert_eq!(run_only.exceeded(&c, 0), None);
        let x = session_only.exceeded(&c, 0).expect("the conversation used 120 of 100");
        assert_eq!((x.name(), x.used), ("sessionBudget.maxTotalTokens".to_string(), 120));
    }

    #[test]
    fn a_child_gets_the_least_its_lead_has_left_of_each_measure_and_stops_on_it() {
        let limits = |i, o, t| TokenLimits {
            max_input_tokens: i,
            max_output_tokens: o,
            max_total_tokens: t,
            ..Default::default()
        };
        // The lead: 100 total per run, 150 input in the conversation, 60 s; it used 30+10 in this run, 100+20 in all.
        let lead = Budget {
            run: limits(None, None, Some(100)),
            max_duration_ms: Some(60_000),
            session: limits(Some(150), None, None),
            ..Default::default()
        };
        let c = cp(30, 10, (70, 10));
        let cap = lead.remaining(&c, 45_000).expect("the lead has limits");
        assert_eq!(
            cap,
            BudgetCap {
                max_input_tokens: Some(50),
                max_output_tokens: None,
                max_total_tokens: Some(60),
                max_duration_ms: Some(15_000),
                max_cost_usd: None,
            }
        );
        // A child of that child: its own cap bounds its children too.
        let child = Budget::default().with_cap(Some(cap));
        let grandchild = child.remaining(&cp(20, 20, (0, 0)), 5_000).unwrap();
        assert_eq!(
            (grandchild.max_input_tokens, grandchild.max_total_tokens, grandchild.max_duration_ms),
            (Some(30), Some(20), Some(10_000))
        );
        // The child stops on its cap, named as its lead's.
        let x = child.exceeded(&cp(40, 20, (0, 0)), 0).expect("60 of 60");
        assert_eq!((x.name(), x.max, x.used), ("lead.maxTotalTokens".to_string(), 60, 60));
        assert_eq!(child.exceeded(&cp(0, 0, (0, 0)), 15_000).map(|x| x.name()), Some("lead.maxDurationMs".into()));
        // No limit anywhere: no cap; spent limits leave 0 (the child stops before its first model call).
        assert_eq!(Budget::default().remaining(&c, 1), None);
        let spent = lead.remaining(&cp(100, 100, (0, 0)), 0).unwrap();
        assert_eq!(spent.max_total_tokens, Some(0));
    }

    #[test]
    fn the_error_names_the_limit_and_is_not_retryable() {
        let x = Exceeded { prefix: "", limit: "maxDurationMs", max: 5, used: 7 };
        let e = x.error("r1");
        assert_eq!(e.code, ErrorCode::BudgetExceeded);
        assert!(!e.retryable());
        assert!(e.message.contains("maxDurationMs 5, used 7"), "{}", e.message);
        assert_eq!(e.details.as_ref().and_then(|d| d.get("limit")).and_then(|v| v.as_str()), Some("maxDurationMs"));
        assert!(x.note().starts_with("Stopped: the run reached its budget"));
    }

    #[test]
    fn a_limit_of_zero_is_found_wherever_it_is() {
        assert!(!Budget::default().has_zero());
        let one = Some(1);
        let all =
            TokenLimits { max_input_tokens: one, max_output_tokens: one, max_total_tokens: one, max_cost_usd: one };
        let full = Budget { run: all, max_duration_ms: one, session: all, ..Default::default() };
        assert!(!full.has_zero());
        let zeroed: [fn(&mut Budget); 9] = [
            |b| b.run.max_cost_usd = Some(0),
            |b| b.session.max_cost_usd = Some(0),
            |b| b.run.max_input_tokens = Some(0),
            |b| b.run.max_output_tokens = Some(0),
            |b| b.run.max_total_tokens = Some(0),
            |b| b.max_duration_ms = Some(0),
            |b| b.session.max_input_tokens = Some(0),
            |b| b.session.max_output_tokens = Some(0),
            |b| b.session.max_total_tokens = Some(0),
        ];
        for zero in zeroed {
            let mut b = full;
            zero(&mut b);
            assert!(b.has_zero(), "{b:?}");
        }
    }

    #[test]
    fn a_cost_limit_stops_at_its_dollars_and_names_them() {
        let nanos = |usd_micros: u64| usd_micros * 1000;
        let b = Budget {
            run: TokenLimits { max_cost_usd: Some(nanos(500_000)), ..Default::default() },
            ..Default::default()
        };
        let mut c = cp(1, 1, (0, 0));
        c.usage.cost = Some(nanos(499_999));
        assert_eq!(b.exceeded(&c, 0), None);
        c.usage.cost = Some(nanos(510_000));
        let x = b.exceeded(&c, 0).expect("$0.51 of $0.5");
        assert_eq!((x.name(), x.max, x.used), ("maxCostUsd".to_string(), 500_000_000, 510_000_000));
        assert!(x.note().contains("maxCostUsd $0.5, used $0.51"), "{}", x.note());
        let e = x.error("r");
        assert_eq!(e.details, Some(serde_json::json!({"limit": "maxCostUsd", "max": 0.5, "used": 0.51})));
        // Unknown cost: not checked (an agent with a cost limit has every model priced).
        c.usage.cost = None;
        assert_eq!(b.exceeded(&c, 0), None);
        // A child gets what is left, and stops on it.
        c.usage.cost = Some(nanos(200_000));
        let cap = b.remaining(&c, 0).unwrap();
        assert_eq!(cap.max_cost_usd, Some(nanos(300_000)));
        let child = Budget::default().with_cap(Some(cap));
        let mut spent = cp(0, 0, (0, 0));
        spent.usage.cost = Some(nanos(300_000));
        assert_eq!(child.exceeded(&spent, 0).map(|x| x.name()), Some("lead.maxCostUsd".into()));
        // On the wire, in dollars.
        let limits: TokenLimits = serde_json::from_str(r#"{"maxCostUsd": 2.5}"#).unwrap();
        assert_eq!(limits.max_cost_usd, Some(2_500_000_000));
        assert!(serde_json::from_str::<TokenLimits>(r#"{"maxCostUsd": -1}"#).is_err());
        assert_eq!(serde_json::to_string(&cap).unwrap(), r#"{"maxCostUsd":0.3}"#);
    }
}
