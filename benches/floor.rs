//! The floor, natively (issue 34; run by benches/floor/run.mjs at opt-level 3, as a crate depending on steadfast
//! builds it — `CARGO_PROFILE_BENCH_OPT_LEVEL=3 cargo bench --bench floor`): the scripted
//! workload of benches/peers/workload.mjs (N model turns of two tool calls, each tool answering the same
//! ~450-byte text, then a final text) as a bare Rust loop with no durability, and through the Rust library
//! (`Agent` with a `MemoryStore`, the default clock and sleep), over the same `MockModel` and the same tools.
//!
//! The bare loop asks the model with the transcript and the tool specs, runs the two tools concurrently, and
//! appends the assistant message and the two tool results, until the model answers text. Interleaved
//! repetitions (the order alternates), after warm-up runs; the median time of a whole run. Prints one line per
//! size: `floor_rust steps=N bare_us_per_step=… append_us_per_step=… library_us_per_step=… ratio=…
//! append_ratio=… library_over_append=…` (ratios: medians of the per-repetition ratios library / bare, bare with
//! appends / bare, library / bare with appends). Measured, never asserted.

use futures::executor::block_on;
use serde_json::json;
use std::rc::Rc;
use std::time::Instant;
use steadfast::core::checkpoint::RunStatus;
use steadfast::core::transcript::{Message, ResultKind, ToolResult};
use steadfast::runtime::{
    AbortSignal, Agent, AgentOptions, FnTool, MockModel, MockTurn, Model, ModelRequest, SendOptions, Tool, ToolContext,
    ToolOutput, ToolSpec,
};
use steadfast::store::MemoryStore;

const SIZES: [usize; 2] = [100, 500];
const REPS: usize = 15;
const WARMUP: usize = 3;

const PROMPT: &str = "Reconcile the open orders: look each one up, quote it, and report when all are done.";
const FINAL_TEXT: &str = "All orders reconciled.";
const INSTRUCTIONS: &str = "You reconcile orders with the lookup and quote tools.";
const TOOL_RESULT: &str =
    "order status: open; warehouse: north-2; items: 3 (widget-a x1, widget-b x2); customer tier: \
     gold; last event: payment authorised; carrier: pending; notes: customer asked for a single shipment, no partial \
     deliveries; hold reason: none; fraud score: 0.02 (low); currency: EUR; subtotal: 184.20; tax: 34.99; shipping: \
     0.00 (free over 150); total: 219.19; sla: ship within 48 hours of authorisation; priority: standard";

fn script(steps: usize) -> Vec<MockTurn> {
    let mut s: Vec<MockTurn> = (0..steps)
        .map(|i| {
            MockTurn::tools([
                ("lookup", json!({"order": 1000 + i})),
                ("quote", json!({"order": 1000 + i, "currency": "EUR"})),
            ])
        })
        .collect();
    s.push(MockTurn::text(FINAL_TEXT));
    s
}

fn tools() -> Vec<Rc<dyn Tool>> {
    let lookup = json!({"type": "object", "properties": {"order": {"type": "integer"}}, "required": ["order"]});
    let quote = json!({"type": "object", "properties": {"order": {"type": "integer"}, "currency": {"type": "string"}},
        "required": ["order"]});
    [("lookup", "Looks an order up", lookup), ("quote", "Quotes an order", quote)]
        .into_iter()
        .map(|(name, description, schema)| -> Rc<dyn Tool> {
            Rc::new(FnTool::new(name, description, schema, |_args, _ctx| async { Ok(ToolOutput::text(TOOL_RESULT)) }))
        })
        .collect()
}

/// One appended journal entry of the bare loop with appends.
#[derive(serde::Serialize)]
struct Appended<'a> {
    seq: usize,
    at: usize,
    messages: &'a [Message],
}

/// The floor: the same turn with no durability. Returns the microseconds the run took.
///
/// With `append`, the least any durable loop does on top: each boundary's new messages encoded as JSON
/// (serde_json, the library's own encoding of messages) and appended to an in-memory journal — the model's
/// answer before its tools run, the tools' results before the next model call: two appends a step.
fn bare(steps: usize, append: bool) -> f64 {
    let model = MockModel::new(script(steps));
    let tools = tools();
    let specs: Vec<ToolSpec> = tools
        .iter()
        .map(|t| ToolSpec {
            name: t.name().to_string(),
            description: t.description().to_string(),
            input_schema: t.input_schema().clone(),
        })
        .collect();
    let t0 = Instant::now();
    let mut journal: Vec<String> = Vec::new();
    let mut record = |added: &[Message], at: usize| {
        if append {
            let entry = Appended { seq: journal.len() + 1, at, messages: added };
            journal.push(serde_json::to_string(&entry).expect("messages encode"));
        }
    };
    let messages = block_on(async {
        let mut messages = vec![Message::System { content: INSTRUCTIONS.into() }, Message::user(PROMPT)];
        record(&messages, 0);
        for step in 1.. {
            let request = ModelRequest::new("bench", &messages, &specs, step, "bare");
            let r = model.generate(request).await.expect("the script answers");
            let calls = r.tool_calls.clone();
            messages.push(Message::Assistant {
                content: r.text,
                tool_calls: r.tool_calls,
                reasoning: Vec::new(),
                usage: Some(r.usage),
                model: None,
            });
            record(&messages[messages.len() - 1..], step as usize);
            if calls.is_empty() {
                break;
            }
            let runs = calls.iter().map(|c| {
                let tool = tools.iter().find(|t| t.name() == c.name).expect("a known tool");
                let ctx = ToolContext {
                    run_id: "bench".into(),
                    tool_call_id: c.id.clone(),
                    call_key: String::new(),
                    approval_id: None,
                    abort: AbortSignal::default(),
                    wait_token: String::new(),
                    now: 0,
                    traceparent: None,
                };
                tool.execute(c.args.clone(), ctx)
            });
            let outputs = futures::future::join_all(runs).await;
            for (c, out) in calls.into_iter().zip(outputs) {
                let out = out.unwrap_or_else(|_| panic!("the tool answers"));
                messages.push(Message::Tool(ToolResult {
                    tool_call_id: c.id,
                    name: c.name,
                    content: out.content,
                    is_error: false,
                    kind: ResultKind::Execution,
                    usage: None,
                }));
            }
            record(&messages[messages.len() - 2..], step as usize);
        }
        messages
    });
    let us = t0.elapsed().as_secs_f64() * 1e6;
    assert_eq!(messages.len(), 3 * steps + 3, "bare loop");
    assert_eq!(journal.len(), if append { 2 * steps + 2 } else { 0 }, "bare loop's appends");
    us
}

/// The same run through the library (`Agent`, `MemoryStore`). Returns the microseconds the run took.
fn library(steps: usize) -> f64 {
    let mut b = Agent::builder(MockModel::new(script(steps)))
        .store(MemoryStore::new())
        .options(AgentOptions { max_steps: steps as u32 + 1, ..AgentOptions::default() })
        .instructions(INSTRUCTIONS);
    for t in tools() {
        b = b.tool_rc(t);
    }
    let agent = b.build().expect("the agent builds");
    let t0 = Instant::now();
    let done = block_on(agent.send("bench", PROMPT, SendOptions::default())).expect("the run finishes");
    let us = t0.elapsed().as_secs_f64() * 1e6;
    assert_eq!(done.status, RunStatus::Finished);
    assert_eq!(done.messages.len(), 3 * steps + 3, "library run");
    us
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    let m = xs.len() / 2;
    if xs.len() % 2 == 1 {
        xs[m]
    } else {
        (xs[m - 1] + xs[m]) / 2.0
    }
}

fn main() {
    for steps in SIZES {
        for _ in 0..WARMUP {
            bare(steps, false);
            bare(steps, true);
            library(steps);
        }
        let (mut b, mut a, mut l) = (Vec::new(), Vec::new(), Vec::new());
        let (mut r, mut ra, mut rl) = (Vec::new(), Vec::new(), Vec::new());
        for rep in 0..REPS {
            let (x, w, y) = if rep % 2 == 0 {
                let x = bare(steps, false);
                let w = bare(steps, true);
                (x, w, library(steps))
            } else {
                let y = library(steps);
                let w = bare(steps, true);
                (bare(steps, false), w, y)
            };
            b.push(x);
            a.push(w);
            l.push(y);
            r.push(y / x);
            ra.push(w / x);
            rl.push(y / w);
        }
        println!(
            "floor_rust steps={steps} bare_us_per_step={:.2} append_us_per_step={:.2} library_us_per_step={:.2} \
             ratio={:.2} append_ratio={:.2} library_over_append={:.2}",
            median(b) / steps as f64,
            median(a) / steps as f64,
            median(l) / steps as f64,
            median(r),
            median(ra),
            median(rl)
        );
    }
}
