//! Strict mode's child runs, each executing in its own object: a lead's sub-agent call asks the child's object to
//! execute it ([`crate::runtime::ChildHost`], the Worker's over the object's stub), and the object answers while
//! the child executes, one line each (`\n`-ended):
//!
//! - `e <run id> <event JSON>`: an event of the child (or of a run below it), tagged where it executed;
//! - `r <status>` (`r -`: it executed nothing): the end, the status its execution ended on;
//! - `x <code> <retryable 0|1> <message>`: the end, the execution failed;
//!
//! and the live body's `: heartbeat` comments between them, skipped. [`Api::serve_child`] writes it,
//! [`read_child_answer`] reads it into the lead's event sinks ([`EventSink::relay`]). The call and what to execute
//! are decided by the lead's call; here they are only carried.

use super::sse::{frame_queue, FrameSender, LiveBody, LiveParts};
use super::{Api, ApiResponse};
use crate::core::checkpoint::RunStatus;
use crate::core::error::{Error, ErrorCode, Result};
use crate::core::events::EventEnvelope;
use crate::runtime::{ChildExecution, EventSink};
use futures::{Stream, StreamExt};
use std::rc::Rc;

/// The call's body, as [`parse_child_call`] reads it: a line each for the run, the lead's call, the traceparent
/// (`-`: none) and the cap (`-`, or its five limits, each a number or `-`), then `r` (resume) or `t` and the task.
/// Written and read by hand (the Worker's size: serde's reader of the cap is kilobytes of wasm).
pub fn child_call_body(call: &ChildExecution) -> String {
    let num = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
    let cap = call.budget_cap.map_or("-".to_string(), |c| {
        let limits = [c.max_input_tokens, c.max_output_tokens, c.max_total_tokens, c.max_duration_ms, c.max_cost_usd];
        limits.map(num).join(" ")
    });
    let start = call.task.as_deref().map_or("r".to_string(), |t| format!("t{t}"));
    let trace = call.traceparent.as_deref().unwrap_or("-");
    format!("{}\n{}\n{trace}\n{cap}\n{start}", call.run_id, call.tool_call_id)
}

/// The call a lead's host sent ([`child_call_body`]), or why it is none (`STEADFAST_INVALID_INPUT`).
pub fn parse_child_call(body: &str) -> Result<ChildExecution> {
    let bad = || Error::invalid_input("not a child run's execution");
    let mut lines = body.splitn(5, '\n');
    let mut line = || lines.next().ok_or_else(bad);
    let (run_id, tool_call_id, trace, cap, start) = (line()?, line()?, line()?, line()?, line()?);
    let num = |v: &str| if v == "-" { Ok(None) } else { v.parse().map(Some).map_err(|_| bad()) };
    let budget_cap = match cap {
        "-" => None,
        cap => {
            let v: Vec<Option<u64>> = cap.split(' ').map(num).collect::<Result<_>>()?;
            let [i, o, t, d, c] = v[..] else { return Err(bad()) };
            Some(crate::core::budget::BudgetCap {
                max_input_tokens: i,
                max_output_tokens: o,
                max_total_tokens: t,
                max_duration_ms: d,
                max_cost_usd: c,
            })
        }
    };
    let task = match (start.get(..1), start.get(1..)) {
        (Some("r"), Some("")) => None,
        (Some("t"), Some(task)) => Some(task.to_string()),
        _ => return Err(bad()),
    };
    Ok(ChildExecution {
        run_id: run_id.into(),
        tool_call_id: tool_call_id.into(),
        task,
        budget_cap,
        traceparent: (trace != "-").then(|| trace.to_string()),
    })
}

/// The end line of an execution that failed with `e`.
fn failed_line(e: &Error) -> String {
    let message = e.message.replace(['\n', '\r'], " ");
    format!("x {} {} {message}\n", e.code.as_str(), u8::from(e.retryable))
}

/// The child's events on their way to its lead, as lines.
struct ChildLines(FrameSender);

impl EventSink for ChildLines {
    fn emit(&self, event: &EventEnvelope) {
        // Ignored: an EventEnvelope (strings, numbers, JSON values) always serialises.
        let json = serde_json::to_string(event).unwrap_or_default();
        self.relay(&event.run_id, &json);
    }

    fn relay(&self, run_id: &str, json: &str) {
        self.0.send(format!("e {run_id} {json}\n"));
    }
}

impl Api {
    /// Executes child run `call` here (inside its object), answering with its lines as it goes; the execution
    /// is a task of the object (the spawner's), which goes on to its end if the lead stops reading.
    pub fn serve_child(&self, call: ChildExecution) -> ApiResponse {
        let (sender, frames) = frame_queue();
        let lines = Rc::new(ChildLines(sender));
        let agent = self.agent.clone();
        let task: crate::runtime::LocalFuture<'static, ()> = Box::pin(async move {
            let sink: Rc<dyn EventSink> = lines.clone();
            let end = match agent.execute_child(&call, Some(sink)).await {
                Ok(Some(status)) => format!("r {}\n", status.as_str()),
                Ok(None) => "r -\n".to_string(),
                Err(e) => failed_line(&e),
            };
            lines.0.send(end);
            lines.0.close();
        });
        let task = match &self.spawner {
            Some(spawn) => {
                spawn(task);
                None
            }
            None => Some(task),
        };
        ApiResponse {
            status: 200,
            headers: vec![("content-type".into(), "text/plain; charset=utf-8".into())],
            body: String::new(),
            live: Some(LiveBody::new(LiveParts { frames, timer: self.agent.deps.sleep.clone(), task })),
        }
    }
}

/// The answer to a call the host could not make (`e`): its end line alone.
pub fn child_refusal(e: &Error) -> String {
    failed_line(e)
}

/// Reads a child object's answer from its body's `chunks`: its events to `relay` as they come, then the status
/// its execution ended on, or its error. An answer that ends without its end line (the object or the connection
/// went away) is `STEADFAST_STORE_UNAVAILABLE` (retryable: the lead's attempt is retried and reads the child).
pub async fn read_child_answer(
    chunks: impl Stream<Item = Result<Vec<u8>>>,
    relay: Option<Rc<dyn EventSink>>,
) -> Result<Option<RunStatus>> {
    futures::pin_mut!(chunks);
    let mut buf: Vec<u8> = Vec::new();
    while let Some(chunk) = chunks.next().await {
        buf.extend_from_slice(&chunk?);
        while let Some(end) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=end).collect();
            let line = std::str::from_utf8(&line[..end]).map_err(|_| garbled("a line that is not UTF-8"))?;
            if let Some(done) = read_line(line, relay.as_deref())? {
                return done;
            }
        }
    }
    Err(Error::new(
        ErrorCode::StoreUnavailable,
        "the child run's object answered without saying how its execution ended (it goes on there; the lead's \
         attempt is retried)",
    ))
}

fn garbled(what: &str) -> Error {
    Error::new(ErrorCode::StoreUnavailable, format!("a child run's object answered with {what}"))
}

/// One line of the answer: `Some` at its end line.
#[allow(clippy::type_complexity)]
fn read_line(line: &str, relay: Option<&dyn EventSink>) -> Result<Option<Result<Option<RunStatus>>>> {
    let (kind, rest) = line.split_once(' ').unwrap_or((line, ""));
    match kind {
        // The live body's heartbeat and the blank line after it.
        "" | ":" => Ok(None),
        "e" => {
            let (run_id, json) = rest.split_once(' ').ok_or_else(|| garbled("a line without its run"))?;
            if let Some(relay) = relay {
                relay.relay(run_id, json);
            }
            Ok(None)
        }
        "r" if rest == "-" => Ok(Some(Ok(None))),
        "r" => {
            let status = [RunStatus::InProgress, RunStatus::AwaitingApproval, RunStatus::Finished]
                .into_iter()
                .find(|s| s.as_str() == rest)
                .ok_or_else(|| garbled("an unknown status"))?;
            Ok(Some(Ok(Some(status))))
        }
        "x" => {
            let mut parts = rest.splitn(3, ' ');
            let code = parts.next().and_then(ErrorCode::parse).unwrap_or(ErrorCode::Internal);
            let retryable = parts.next() == Some("1");
            let mut e = Error::new(code, parts.next().unwrap_or_default());
            e.retryable = retryable;
            Ok(Some(Err(e)))
        }
        _ => Err(garbled("a line it does not know")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;
    use std::cell::RefCell;

    #[derive(Default)]
    struct Seen(RefCell<Vec<String>>);

    impl EventSink for Seen {
        fn emit(&self, e: &EventEnvelope) {
            self.0.borrow_mut().push(format!("emit {}", e.run_id));
        }
        fn durable(&self, run_id: &str, position: u64) {
            self.0.borrow_mut().push(format!("durable {run_id} {position}"));
        }
        fn relay(&self, run_id: &str, json: &str) {
            self.0.borrow_mut().push(format!("relay {run_id} {json}"));
        }
    }

    fn read(chunks: &[&str]) -> (Result<Option<RunStatus>>, Vec<String>) {
        let seen = Rc::new(Seen::default());
        let chunks: Vec<Result<Vec<u8>>> = chunks.iter().map(|c| Ok(c.as_bytes().to_vec())).collect();
        let relay: Rc<dyn EventSink> = seen.clone();
        let out = read_child_answer(futures::stream::iter(chunks), Some(relay)).now_or_never().expect("no waiting");
        let seen = seen.0.borrow().clone();
        (out, seen)
    }

    #[test]
    fn an_answer_split_anywhere_relays_each_line_once_and_ends_on_its_status() {
        let whole = "e r.sub-a-k {\"type\":\"step\",\"x\":\"a b\"}\n: heartbeat\n\ne r.sub-a-k.sub-b-j {}\nr awaiting-approval\n";
        for cut in 0..whole.len() {
            let (out, seen) = read(&[&whole[..cut], &whole[cut..]]);
            assert_eq!(out.unwrap(), Some(RunStatus::AwaitingApproval), "cut at {cut}");
            assert_eq!(
                seen,
                vec![
                    "relay r.sub-a-k {\"type\":\"step\",\"x\":\"a b\"}".to_string(),
                    "relay r.sub-a-k.sub-b-j {}".into()
                ],
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn a_call_reads_back_as_it_was_written_and_a_malformed_one_is_refused() {
        let cap = crate::core::budget::BudgetCap {
            max_input_tokens: Some(3),
            max_total_tokens: Some(u64::MAX),
            max_cost_usd: Some(0),
            ..Default::default()
        };
        for (task, budget_cap, traceparent) in [
            (
                Some("line one\nline two\n\nr"),
                Some(cap),
                Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
            ),
            (Some(""), None, None),
            (None, Some(Default::default()), None),
        ] {
            let call = ChildExecution {
                run_id: "lead.sub-research-k1".into(),
                tool_call_id: "call_1".into(),
                task: task.map(Into::into),
                budget_cap,
                traceparent: traceparent.map(Into::into),
            };
            assert_eq!(parse_child_call(&child_call_body(&call)).unwrap(), call);
        }
        for bad in ["", "a\nb\n-\n-", "a\nb\n-\n-\nx", "a\nb\n-\n1 2\nr", "a\nb\n-\n1 2 3 4 z\nr", "a\nb\n-\n-\nrr"] {
            assert_eq!(parse_child_call(bad).unwrap_err().code, ErrorCode::InvalidInput, "{bad:?}");
        }
    }

    #[test]
    fn a_failure_keeps_its_code_and_retryability_and_a_cut_answer_is_retryable() {
        let e = Error::new(ErrorCode::SessionExists, "two\nlines");
        let (out, _) = read(&[&failed_line(&e)]);
        let got = out.unwrap_err();
        assert_eq!(
            (got.code, got.retryable, got.message.as_str()),
            (ErrorCode::SessionExists, e.retryable, "two lines")
        );
        let (out, _) = read(&["r -\n"]);
        assert_eq!(out.unwrap(), None);
        let (out, seen) = read(&["e r.sub-a-k {}\n", "r fini"]);
        let got = out.unwrap_err();
        assert!(got.retryable && got.code == ErrorCode::StoreUnavailable, "{got:?}");
        assert_eq!(seen.len(), 1);
        for bad in ["q what\n", "e nospace\n", "d r 7\n", "r no-such-status\n"] {
            assert_eq!(read(&[bad]).0.unwrap_err().code, ErrorCode::StoreUnavailable, "{bad}");
        }
    }
}
