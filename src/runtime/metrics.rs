//! The counters the seeds say to monitor (issue 31, part 5): "retry rate, fallback rate, loop stops, budget stops,
//! duplicate reconciliations, quarantines … are monitored". Each is counted per agent (the lead by its name,
//! `lead` by default; a sub-agent or handoff agent by its name in the lead's declaration) in memory, where it
//! happens — no store write for them — in a [`Metrics`] shared like the breakers: an agent's own by default,
//! shared with its sub-agents and handoff team; the Worker keeps one per isolate (`GET /metrics`, counts since the
//! isolate started: a scrape reaches one isolate, and a new isolate starts from zero, which Prometheus's `rate`
//! and `increase` read as a counter reset).

use std::cell::RefCell;

/// A counter (see [`COUNTERS`] for its metric name and meaning).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    /// Model call attempts made (retries and fallbacks included).
    ModelCalls,
    /// Model call attempts made after a failed one on the same model (the retry rate: this over model calls).
    Retries,
    /// Model calls handed down the fallback chain (the fallback rate: this over model calls).
    Fallbacks,
    /// Calls an open circuit breaker refused (models and webhook tools).
    BreakerRefusals,
    /// Runs that loop detection stopped (finish reason `loop-detected`).
    LoopStops,
    /// Runs that a budget stopped (finish reason `budget-exceeded`, whether it finished or threw).
    BudgetStops,
    /// Side-effecting calls whose effect a resume found done by `reconcile` (recorded, not run twice).
    Reconciliations,
    /// Runs the recovery sweep quarantined.
    Quarantines,
    /// Spans dropped before they were sent (the trace buffer was full, or an export failed).
    TraceSpansDropped,
}

/// Each counter's metric name and help text, in [`Counter`]'s order.
pub const COUNTERS: [(&str, &str); 9] = [
    ("steadfast_model_calls_total", "Model call attempts made (retries and fallbacks included)."),
    ("steadfast_model_retries_total", "Model call attempts made after a failed one on the same model."),
    ("steadfast_fallbacks_total", "Model calls handed to the next model of the fallback chain."),
    ("steadfast_breaker_refusals_total", "Calls an open circuit breaker refused (models and webhook tools)."),
    ("steadfast_loop_stops_total", "Runs stopped by loop detection."),
    ("steadfast_budget_stops_total", "Runs stopped by a budget."),
    ("steadfast_reconciliations_total", "Side-effecting calls found done by reconcile on resume (not run twice)."),
    ("steadfast_quarantines_total", "Runs the recovery sweep quarantined."),
    ("steadfast_trace_spans_dropped_total", "Spans dropped before they were sent (buffer full, or export failed)."),
];

/// The counters by agent, in the order each agent first counted something.
#[derive(Debug, Default)]
pub struct Metrics(RefCell<Vec<(String, [u64; 9])>>);

/// One counter of one agent, as the npm package's `metrics()` returns it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
pub struct MetricSample {
    /// The agent's name.
    pub agent: String,
    /// The metric's name (`steadfast_model_calls_total`, …).
    pub name: String,
    /// Its count.
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    pub value: u64,
}

impl Metrics {
    /// Nothing counted yet.
    pub fn new() -> Metrics {
        Metrics::default()
    }

    /// Adds `n` to `agent`'s `counter`.
    pub fn add(&self, agent: &str, counter: Counter, n: u64) {
        let mut all = self.0.borrow_mut();
        let i = match all.iter().position(|(a, _)| a == agent) {
            Some(i) => i,
            None => {
                all.push((agent.to_string(), [0; 9]));
                all.len() - 1
            }
        };
        let c = &mut all[i].1[counter as usize];
        *c = c.saturating_add(n);
    }

    /// `agent`'s `counter` (0 when it never counted).
    pub fn get(&self, agent: &str, counter: Counter) -> u64 {
        self.0.borrow().iter().find(|(a, _)| a == agent).map_or(0, |(_, c)| c[counter as usize])
    }

    /// Every counter of every agent that counted something.
    pub fn samples(&self) -> Vec<MetricSample> {
        let mut out = Vec::new();
        for (i, (name, _)) in COUNTERS.iter().enumerate() {
            for (agent, counts) in self.0.borrow().iter() {
                out.push(MetricSample { agent: agent.clone(), name: name.to_string(), value: counts[i] });
            }
        }
        out
    }

    /// The counters in the Prometheus text exposition format (version 0.0.4): a `# HELP` and `# TYPE … counter`
    /// line for each metric, then a sample per agent (`{agent="…"}`, the label value escaped).
    pub fn prometheus(&self) -> String {
        let all = self.0.borrow();
        let mut text = String::new();
        for (i, (name, help)) in COUNTERS.iter().enumerate() {
            text.push_str(&format!("# HELP {name} {help}\n# TYPE {name} counter\n"));
            for (agent, counts) in all.iter() {
                text.push_str(name);
                text.push_str("{agent=\"");
                for c in agent.chars() {
                    match c {
                        '\\' | '"' => text.extend(['\\', c]),
                        '\n' => text.push_str("\\n"),
                        c => text.push(c),
                    }
                }
                text.push_str(&format!("\"}} {}\n", counts[i]));
            }
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_per_agent_and_writes_the_prometheus_text_format() {
        let m = Metrics::new();
        assert_eq!(m.prometheus().lines().filter(|l| !l.starts_with('#')).count(), 0, "no sample before a count");
        m.add("lead", Counter::ModelCalls, 3);
        m.add("re\"search", Counter::Retries, 1);
        m.add("lead", Counter::ModelCalls, 2);
        m.add("lead", Counter::Quarantines, u64::MAX);
        m.add("lead", Counter::Quarantines, 1);
        assert_eq!((m.get("lead", Counter::ModelCalls), m.get("nobody", Counter::Retries)), (5, 0));
        assert_eq!(m.get("lead", Counter::Quarantines), u64::MAX, "saturates, never wraps");
        let text = m.prometheus();
        assert!(
            text.starts_with(
                "# HELP steadfast_model_calls_total Model call attempts made (retries and fallbacks included).\n\
             # TYPE steadfast_model_calls_total counter\n\
             steadfast_model_calls_total{agent=\"lead\"} 5\n\
             steadfast_model_calls_total{agent=\"re\\\"search\"} 0\n"
            ),
            "{text}"
        );
        assert!(text.contains("steadfast_model_retries_total{agent=\"re\\\"search\"} 1\n"), "{text}");
        assert_eq!(text.lines().filter(|l| l.starts_with("# TYPE")).count(), COUNTERS.len());
        assert_eq!(m.samples().len(), 2 * COUNTERS.len());
        assert!(m.samples().contains(&MetricSample { agent: "lead".into(), name: COUNTERS[0].0.into(), value: 5 }));
    }
}
