//! Generated scenarios, crashed after every effect.
//!
//! A seeded generator builds agent scenarios: conversations of one to three sends, each with tool turns that mix
//! plain, side-effecting (with and without `reconcile`), approval-gated (granted or rejected), failing, slow,
//! propagating (the run attempt fails once) and aborting calls, unknown tools and invalid arguments, run with
//! different tool concurrency. Each scenario runs once uninterrupted (the reference), then once per effect k of
//! the reference — twice: tools in flight at the crash finishing or not — on the memory store and on the journal
//! store over the Workers-KV simulator: "killed" right after effect k, then finished from the store by a new
//! process. Per call it checks:
//!
//! * exactly one result, in call order (a valid transcript; no held result, intent or start mark left over);
//! * no fabricated result: a valid call's result is its tool's real output (or a rejection it was decided, a
//!   `cancelled` result in an aborted turn, an `interrupted` result for an approved call in flight at the crash);
//!   only unknown tools and invalid arguments get `validation` results;
//! * a result recorded before the crash is never executed again; a model turn recorded before the crash is never
//!   generated again;
//! * a side-effecting call with `reconcile` takes effect at most once; one without runs a second time only when
//!   its intent was recorded without an outcome; an approved call runs at most once;
//! * the final transcript equals the reference's (ids included) where nothing made them differ legitimately;
//! * the journal replays what was streamed: for every kept entry, the events [`recorded_events`] derives from
//!   it are the recorded events the executions sent between the positions they reported (`durable`), and a
//!   run's end or pause the journal derives is one an execution sent (what `GET /runs/{id}/events` and a
//!   `Last-Event-ID` rely on).
//!
//! `cargo test --test generated_crashes -- --nocapture` prints
//! `generated scenarios: N, crash runs: M, violations: 0`. More scenarios: `STEADFAST_CASES=5000` (or
//! `STEADFAST_LARGE=1`); one scenario: `STEADFAST_SEED=<seed>` (a failing seed prints that line), and one crash
//! point of it `STEADFAST_CRASH_AT=<k>`.

mod common;

use common::*;
use serde_json::{json, Value};
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use steadfast::core::checkpoint::{Checkpoint, RunStatus};
use steadfast::core::events::{Event, EventEnvelope};
use steadfast::core::replay::{is_recorded, recorded_events};
use steadfast::core::transcript::{validate_transcript, Message, ResultKind, ToolCall};
use steadfast::runtime::EventSink;
use steadfast::runtime::{
    Agent, AgentOptions, CrashBudget, FnTool, MockModel, MockTurn, Resolve, Rng, SendOptions, Sleep, SplitMix64, Tool,
    ToolError, ToolOutput,
};
use steadfast::ErrorCode;

/// What executions told their sink: events, and the journal positions they reached.
#[derive(Default)]
struct Recorder(RefCell<Vec<Heard>>);

enum Heard {
    Event(Event),
    Durable(u64),
}

impl EventSink for Recorder {
    fn emit(&self, e: &EventEnvelope) {
        self.0.borrow_mut().push(Heard::Event(e.event.clone()));
    }
    fn durable(&self, _run_id: &str, position: u64) {
        self.0.borrow_mut().push(Heard::Durable(position));
    }
}

/// A recorded event as the journal can say it (`replacedBy` is not recorded), as text to compare.
fn said(e: &Event) -> String {
    let mut e = e.clone();
    if let Event::ToolDone { replaced_by, .. } = &mut e {
        *replaced_by = None;
    }
    serde_json::to_string(&e).unwrap()
}

/// Checks that the journal replays what the executions streamed (see the module docs). With `ends`, also that
/// every end or pause the journal records was sent (not after a crash: a process killed right after committing
/// the end never sent it; a watcher gets it from the journal).
fn replay_matches(env: &Env, heard: &Recorder, ends_sent: bool) -> Vec<String> {
    let mut found = Vec::new();
    // The recorded events sent before each position was reached (those of a crashed execution after its last
    // commit were never recorded: a new execution's first position drops them).
    let mut segments: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    let (mut last, mut pending, mut ends) = (0u64, Vec::new(), BTreeSet::new());
    for h in heard.0.borrow().iter() {
        match h {
            Heard::Event(e @ Event::RunDone { .. }) => {
                ends.insert(said(e));
            }
            Heard::Event(e) if is_recorded(e) => pending.push(said(e)),
            Heard::Event(_) => {}
            Heard::Durable(q) => {
                let taken = std::mem::take(&mut pending);
                if *q > last {
                    segments.entry(*q).or_default().extend(taken);
                    last = *q;
                }
            }
        }
    }
    let mut states = match block_on(env.store.history(RUN, usize::MAX)) {
        Ok(s) => s,
        Err(e) => return vec![format!("history: {e}")],
    };
    states.reverse();
    for pair in states.windows(2) {
        let (before, after) = (&pair[0], &pair[1]);
        if before.seq <= 1 {
            continue;
        }
        let mut derived = Vec::new();
        for e in recorded_events(&before.checkpoint, &after.checkpoint) {
            match e {
                Event::RunDone { .. } if ends_sent && !ends.contains(&said(&e)) => {
                    found.push(format!("entry {}: the journal says {} that no execution sent", after.seq, said(&e)))
                }
                Event::RunDone { .. } => {}
                e => derived.push(said(&e)),
            }
        }
        let mut live = segments.get(&after.seq).cloned().unwrap_or_default();
        derived.sort();
        live.sort();
        if derived != live {
            found.push(format!("entry {}: the journal replays {derived:?}, the executions sent {live:?}", after.seq));
        }
    }
    found
}

const RUN: &str = "gen";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Read,
    WriteSe,
    MailSe,
    Pay,
    Fail,
    Slow,
    Boom,
    Cancel,
    Unknown,
    BadArgs,
}

impl Kind {
    fn tool(self) -> &'static str {
        match self {
            Kind::Read | Kind::BadArgs => "read",
            Kind::WriteSe => "write",
            Kind::MailSe => "mail",
            Kind::Pay => "pay",
            Kind::Fail => "fail",
            Kind::Slow => "slow",
            Kind::Boom => "boom",
            Kind::Cancel => "cancel",
            Kind::Unknown => "nope",
        }
    }
}

#[derive(Clone, Debug)]
struct Scenario {
    seed: u64,
    /// Per send: its turns, each a list of calls (kind, k).
    conversations: Vec<Vec<Vec<(Kind, i64)>>>,
    concurrency: usize,
    has_cancel: bool,
}

impl Scenario {
    fn generate(seed: u64) -> Scenario {
        let rng = SplitMix64::new(seed.wrapping_mul(0x9E37_79B9).wrapping_add(17));
        let pick = |n: u64| rng.next_u64() % n;
        let sends = match pick(10) {
            0..=5 => 1,
            6..=8 => 2,
            _ => 3,
        };
        let mut k = 0;
        let mut has_cancel = false;
        let mut conversations = Vec::new();
        for _ in 0..sends {
            let turns = 1 + pick(3) as usize;
            let mut conv = Vec::new();
            for _ in 0..turns {
                let calls = 1 + pick(4) as usize;
                let mut turn = Vec::new();
                for _ in 0..calls {
                    k += 1;
                    let kind = match pick(100) {
                        0..=21 => Kind::Read,
                        22..=36 => Kind::WriteSe,
                        37..=49 => Kind::MailSe,
                        50..=62 => Kind::Pay,
                        63..=70 => Kind::Fail,
                        71..=80 => Kind::Slow,
                        81..=85 => Kind::Boom,
                        86..=88 if !has_cancel => {
                            has_cancel = true;
                            Kind::Cancel
                        }
                        86..=92 => Kind::Unknown,
                        _ => Kind::BadArgs,
                    };
                    turn.push((kind, k));
                }
                conv.push(turn);
            }
            conversations.push(conv);
        }
        let concurrency = [1, 2, 8][pick(3) as usize];
        Scenario { seed, conversations, concurrency, has_cancel }
    }

    fn input(i: usize) -> String {
        format!("task {i}")
    }

    fn script(&self) -> Vec<MockTurn> {
        let mut out = Vec::new();
        for (i, conv) in self.conversations.iter().enumerate() {
            for turn in conv {
                let calls: Vec<(&str, Value)> = turn
                    .iter()
                    .map(|(kind, k)| match kind {
                        Kind::BadArgs => (kind.tool(), json!({"k": format!("k{k}")})),
                        _ => (kind.tool(), json!({"k": k})),
                    })
                    .collect();
                out.push(MockTurn::tools(calls));
            }
            out.push(MockTurn::text(format!("conversation {i} done")));
        }
        out
    }

    /// Whether a reviewer approves the call (decided by the call, the same in every process).
    fn approves(&self, call_id: &str) -> bool {
        let h = steadfast::core::fingerprint::sha256_hex(format!("{}:{call_id}", self.seed).as_bytes());
        !h.starts_with(['0', '1', '2', '3', '4'])
    }
}

/// What the tools did, shared by every "process" of one world.
#[derive(Default)]
struct World {
    /// Executions per call id (the tool body started).
    executions: RefCell<BTreeMap<String, u32>>,
    /// Executions per call id after the crash.
    executions_after: RefCell<BTreeMap<String, u32>>,
    /// Effects of `write` per idempotency key (what `reconcile` reads).
    ledger: RefCell<BTreeMap<String, u32>>,
    /// `boom` calls that already failed once.
    boomed: RefCell<BTreeSet<String>>,
    after_crash: Cell<bool>,
}

impl World {
    fn executed(&self, call_id: &str) {
        *self.executions.borrow_mut().entry(call_id.to_string()).or_default() += 1;
        if self.after_crash.get() {
            *self.executions_after.borrow_mut().entry(call_id.to_string()).or_default() += 1;
        }
    }
}

fn k_of(args: &Value) -> i64 {
    args["k"].as_i64().unwrap_or(-1)
}

fn tools(world: &Rc<World>, sleep: &Rc<dyn Sleep>) -> Vec<Rc<dyn Tool>> {
    let schema = json!({"type": "object", "properties": {"k": {"type": "integer"}}, "required": ["k"]});
    let mk = |name: &'static str| {
        let w = world.clone();
        let s = sleep.clone();
        FnTool::new(name, name, schema.clone(), move |args, ctx| {
            let (w, s) = (w.clone(), s.clone());
            async move {
                w.executed(&ctx.tool_call_id);
                let k = k_of(&args);
                match name {
                    "read" => Ok(ToolOutput::text(format!("read {k}"))),
                    "write" => {
                        *w.ledger.borrow_mut().entry(ctx.idempotency_key().to_string()).or_default() += 1;
                        Ok(ToolOutput::text(format!("wrote {k}")))
                    }
                    "mail" => Ok(ToolOutput::text(format!("mailed {k}"))),
                    "pay" => Ok(ToolOutput::text(format!("paid {k}"))),
                    "fail" => Err(ToolError::typed("IOError", format!("disk {k} unavailable"))),
                    "slow" => {
                        s.sleep(20 + (k as u64 % 3) * 15).await;
                        Ok(ToolOutput::text(format!("slow {k}")))
                    }
                    "boom" => {
                        if w.boomed.borrow_mut().insert(ctx.tool_call_id.clone()) {
                            Err(ToolError::propagate(format!("boom {k}")))
                        } else {
                            Ok(ToolOutput::text(format!("boom ok {k}")))
                        }
                    }
                    "cancel" => {
                        ctx.abort.abort();
                        Ok(ToolOutput::text("cancel requested"))
                    }
                    other => panic!("no tool {other}"),
                }
            }
        })
    };
    let w = world.clone();
    let write = mk("write").reconcile_with(move |args, key| {
        let done = w.ledger.borrow().contains_key(&key);
        async move { Ok(done.then(|| ToolOutput::text(format!("wrote {}", k_of(&args))))) }
    });
    vec![
        Rc::new(mk("read")),
        Rc::new(write),
        Rc::new(mk("mail").side_effecting()),
        Rc::new(mk("pay").needs_approval(true)),
        Rc::new(mk("fail")),
        Rc::new(mk("slow")),
        Rc::new(mk("boom")),
        Rc::new(mk("cancel")),
    ]
}

fn agent(env: &Env, sc: &Scenario, world: &Rc<World>, models: &mut Vec<MockModel>) -> Agent {
    let model = MockModel::by_turn(sc.script());
    models.push(model.clone());
    let sleep: Rc<dyn Sleep> = Rc::new(env.sleep.clone());
    let options = AgentOptions { max_steps: 20, tool_concurrency: sc.concurrency, ..AgentOptions::default() };
    env.agent_with(model, tools(world, &sleep), options, "You run generated scenarios.")
}

enum Driven {
    Done(Checkpoint),
    Crashed,
}

/// Drives the scenario from whatever the store holds until it is complete: send the next input, decide pending
/// approvals, resume unfinished runs (a propagated tool failure is retried by resuming). Stops at a crash.
fn drive(
    env: &Env,
    sc: &Scenario,
    world: &Rc<World>,
    budget: Option<Rc<CrashBudget>>,
    models: &mut Vec<MockModel>,
    heard: &Rc<Recorder>,
) -> Result<Driven, String> {
    let a = agent(env, sc, world, models);
    let events: Rc<dyn EventSink> = heard.clone();
    let opts = || SendOptions { crash_budget: budget.clone(), events: Some(events.clone()), ..SendOptions::default() };
    for _ in 0..60 {
        let cp = block_on(a.load(RUN)).map_err(|e| format!("load: {e}"))?;
        let step: Result<(), steadfast::Error> = match &cp {
            None => block_on(a.send(RUN, Scenario::input(0), opts())).map(|_| ()),
            Some(cp) if cp.status == RunStatus::AwaitingApproval => {
                // One decision per round (the last one resumes the run and withdraws the records): the first
                // approval still pending, or the first one again when all were decided before a crash.
                let mut pick = None;
                for id in &cp.approval_ids {
                    let rec = block_on(a.store().get_approval(id)).map_err(|e| format!("approval: {e}"))?;
                    let rec = rec.ok_or_else(|| format!("approval {id} of the paused run is missing"))?;
                    let pending = rec.status == steadfast::core::approval::ApprovalStatus::Pending;
                    if pick.is_none() || pending {
                        pick = Some((id.clone(), sc.approves(&rec.tool_call.id)));
                    }
                    if pending {
                        break;
                    }
                }
                let (id, approved) = pick.ok_or("a paused run without approval ids")?;
                block_on(a.approvals().resolve_with(Resolve { id, approved, note: None, answer: None }, opts()))
                    .map(|_| ())
            }
            Some(cp) if cp.status == RunStatus::Finished => {
                let sent = cp.messages.iter().filter(|m| matches!(m, Message::User { .. })).count();
                if sent >= sc.conversations.len() {
                    return Ok(Driven::Done(cp.clone()));
                }
                block_on(a.send(RUN, Scenario::input(sent), opts())).map(|_| ())
            }
            Some(_) => block_on(a.resume(RUN, opts())).map(|_| ()),
        };
        match step {
            Ok(()) => {}
            Err(e) if e.code == ErrorCode::Crashed => return Ok(Driven::Crashed),
            Err(e) if e.code == ErrorCode::ToolPropagated => {}
            Err(e) => return Err(format!("unexpected error: {} {}", e.code, e.message)),
        }
    }
    Err("the scenario did not complete in 60 operations".into())
}

/// What the store held at the crash.
struct AtCrash {
    recorded: BTreeSet<String>,
    intents: BTreeSet<String>,
    started: BTreeSet<String>,
    assistant_turns: usize,
}

fn at_crash(cp: &Option<Checkpoint>) -> AtCrash {
    let mut out =
        AtCrash { recorded: BTreeSet::new(), intents: BTreeSet::new(), started: BTreeSet::new(), assistant_turns: 0 };
    if let Some(cp) = cp {
        for m in &cp.messages {
            match m {
                Message::Tool(r) => {
                    out.recorded.insert(r.tool_call_id.clone());
                }
                Message::Assistant { .. } => out.assistant_turns += 1,
                _ => {}
            }
        }
        out.recorded.extend(cp.held_results.iter().map(|r| r.tool_call_id.clone()));
        out.intents.extend(cp.intents.iter().cloned());
        out.started.extend(cp.started_tool_call_ids.iter().cloned());
    }
    out
}

/// Every call of the transcript with the kind it was generated as.
fn calls_with_kinds(sc: &Scenario, cp: &Checkpoint) -> Vec<(ToolCall, Kind, usize)> {
    let kinds: BTreeMap<i64, Kind> = sc.conversations.iter().flatten().flatten().map(|(kind, k)| (*k, *kind)).collect();
    let mut out = Vec::new();
    for (turn, m) in cp.messages.iter().filter(|m| matches!(m, Message::Assistant { .. })).enumerate() {
        for c in m.tool_calls() {
            let k = match &c.args["k"] {
                Value::String(s) => s.trim_start_matches('k').parse().unwrap_or(-1),
                v => v.as_i64().unwrap_or(-1),
            };
            out.push((c.clone(), kinds.get(&k).copied().unwrap_or(Kind::Unknown), turn));
        }
    }
    out
}

/// Checks the invariants of a finished world. `crash` is what the store held at the crash (None: reference).
fn check(sc: &Scenario, cp: &Checkpoint, world: &World, crash: Option<&AtCrash>, later_turns: &[usize]) -> Vec<String> {
    let mut v = Vec::new();
    if cp.status != RunStatus::Finished {
        v.push(format!("final status {:?}", cp.status));
    }
    if let Err(e) = validate_transcript(&cp.messages) {
        v.push(format!("invalid transcript: {e}"));
    }
    if !cp.held_results.is_empty() || !cp.intents.is_empty() || !cp.started_tool_call_ids.is_empty() {
        v.push("held results, intents or start marks left over".into());
    }
    let last = sc.conversations.len() - 1;
    if cp.last_text() != format!("conversation {last} done") {
        v.push(format!("last text {:?}", cp.last_text()));
    }
    let results: BTreeMap<&str, &steadfast::core::transcript::ToolResult> = cp
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(r) => Some((r.tool_call_id.as_str(), r)),
            _ => None,
        })
        .collect();
    let calls = calls_with_kinds(sc, cp);
    let boom_turns: BTreeSet<usize> = calls.iter().filter(|(_, k, _)| *k == Kind::Boom).map(|(_, _, t)| *t).collect();
    let cancel_turns: BTreeSet<usize> =
        calls.iter().filter(|(_, k, _)| *k == Kind::Cancel).map(|(_, _, t)| *t).collect();
    let executions = world.executions.borrow();
    let after = world.executions_after.borrow();
    for (call, kind, turn) in &calls {
        let id = call.id.as_str();
        let Some(r) = results.get(id) else {
            v.push(format!("{id} ({kind:?}) has no result"));
            continue;
        };
        let k = k_of(&call.args);
        let n = executions.get(id).copied().unwrap_or(0);
        let n_after = after.get(id).copied().unwrap_or(0);
        let recorded_before = crash.is_some_and(|c| c.recorded.contains(id));
        if recorded_before && n_after > 0 {
            v.push(format!("{id} ({kind:?}) was recorded before the crash and executed {n_after} more times"));
        }
        // A `boom` call fails its first execution (propagated, nothing recorded), then succeeds; calls in flight
        // beside it when the attempt failed lose their results and run again on the next attempt (the seed's
        // contract: a rejected attempt keeps the last checkpoint).
        let beside_boom = boom_turns.contains(turn);
        let max_after = if *kind == Kind::Boom || beside_boom { 2 } else { 1 };
        if n_after > max_after {
            v.push(format!("{id} ({kind:?}) executed {n_after} times after the crash"));
        }
        let cancelled_ok = sc.has_cancel && cancel_turns.contains(turn) && r.kind == ResultKind::Cancelled;
        let expect = |content: String, is_error: bool| -> Option<String> {
            if cancelled_ok {
                return None;
            }
            (r.kind != ResultKind::Execution || r.content != content || r.is_error != is_error).then(|| {
                format!("{id} ({kind:?}) got {:?} {:?} (error {}), expected {content:?}", r.kind, r.content, r.is_error)
            })
        };
        let bad = match kind {
            Kind::Unknown | Kind::BadArgs => {
                (r.kind != ResultKind::Validation).then(|| format!("{id} ({kind:?}) got {:?}", r.kind))
            }
            Kind::Read => expect(format!("read {k}"), false),
            Kind::Slow => expect(format!("slow {k}"), false),
            Kind::Fail => expect(format!("IOError: disk {k} unavailable"), true),
            Kind::Boom => expect(format!("boom ok {k}"), false),
            Kind::Cancel => expect("cancel requested".into(), false),
            Kind::MailSe => {
                if n > 1 && !beside_boom && !crash.is_some_and(|c| c.intents.contains(id)) {
                    v.push(format!("{id} (mail, no reconcile) ran {n} times without an open intent at the crash"));
                }
                expect(format!("mailed {k}"), false)
            }
            Kind::WriteSe => {
                let effects = world.ledger.borrow().get(id).copied().unwrap_or(0);
                if effects > 1 {
                    v.push(format!("{id} (write, with reconcile) took effect {effects} times"));
                }
                expect(format!("wrote {k}"), false)
            }
            Kind::Pay => {
                if n > 1 {
                    v.push(format!("{id} (approved call) ran {n} times"));
                }
                if !sc.approves(id) {
                    (r.kind != ResultKind::Rejected && !cancelled_ok)
                        .then(|| format!("{id} (rejected pay) got {:?} {:?}", r.kind, r.content))
                } else if r.kind == ResultKind::Interrupted {
                    (!crash.is_some_and(|c| c.started.contains(id) && !c.recorded.contains(id)))
                        .then(|| format!("{id} (approved pay) interrupted although it was not in flight at the crash"))
                } else {
                    expect(format!("paid {k}"), false)
                }
            }
        };
        v.extend(bad);
        if crash.is_none() {
            let want = match kind {
                Kind::Unknown | Kind::BadArgs => 0,
                Kind::Pay if !sc.approves(id) => 0,
                Kind::Boom => 2,
                _ => 1,
            };
            let extra_ok = beside_boom && n == want + 1 && *kind != Kind::Pay;
            if n != want && !extra_ok && !(sc.has_cancel && cancel_turns.contains(turn)) {
                v.push(format!("reference: {id} ({kind:?}) ran {n} times, expected {want}"));
            }
        }
    }
    if let Some(c) = crash {
        if let Some(t) = later_turns.iter().find(|t| **t < c.assistant_turns) {
            v.push(format!("model turn {t} was generated again although {} turns were recorded", c.assistant_turns));
        }
    }
    v
}

fn fresh_env(store: &str) -> Env {
    match store {
        "memory" => Env::new(),
        _ => Env::journal_sim(),
    }
}

struct Totals {
    crash_runs: u64,
    violations: Vec<String>,
}

fn run_scenario(sc: &Scenario, store: &str, only_k: Option<usize>, totals: &mut Totals) {
    // The reference: no crash.
    let env = fresh_env(store);
    let world = Rc::new(World::default());
    let mut models = Vec::new();
    let budget = CrashBudget::new(usize::MAX, false);
    let heard = Rc::new(Recorder::default());
    let reference = match drive(&env, sc, &world, Some(budget.clone()), &mut models, &heard) {
        Ok(Driven::Done(cp)) => cp,
        Ok(Driven::Crashed) => unreachable!("no crash in the reference"),
        Err(e) => {
            totals.violations.push(format!("seed {} {store} reference: {e}", sc.seed));
            return;
        }
    };
    let effects = usize::MAX - budget.left.get().unwrap_or(0);
    for v in check(sc, &reference, &world, None, &[]).into_iter().chain(replay_matches(&env, &heard, true)) {
        totals.violations.push(format!("seed {} {store} reference: {v}", sc.seed));
    }
    let interrupted = |cp: &Checkpoint| {
        cp.messages.iter().any(|m| matches!(m, Message::Tool(r) if r.kind == ResultKind::Interrupted))
    };
    for k in 1..=effects {
        if only_k.is_some_and(|o| o != k) {
            continue;
        }
        for finish_in_flight in [false, true] {
            let env = fresh_env(store);
            let world = Rc::new(World::default());
            let mut models = Vec::new();
            let ctx = format!("seed {} {store} k={k} finish_in_flight={finish_in_flight}", sc.seed);
            totals.crash_runs += 1;
            let heard = Rc::new(Recorder::default());
            match drive(&env, sc, &world, Some(CrashBudget::new(k, finish_in_flight)), &mut models, &heard) {
                Ok(Driven::Crashed) => {}
                Ok(Driven::Done(_)) => {
                    totals.violations.push(format!("{ctx}: completed without reaching effect {k}"));
                    continue;
                }
                Err(e) => {
                    totals.violations.push(format!("{ctx}: before the crash: {e}"));
                    continue;
                }
            }
            let stored = block_on(env.store.load(RUN)).ok().flatten();
            let crash = at_crash(&stored);
            let calls_before: usize = models.iter().map(|m| m.call_count()).sum();
            world.after_crash.set(true);
            env.past_leases();
            let done = match drive(&env, sc, &world, None, &mut models, &heard) {
                Ok(Driven::Done(cp)) => cp,
                Ok(Driven::Crashed) => unreachable!("no crash after the crash"),
                Err(e) => {
                    totals.violations.push(format!("{ctx}: after the crash: {e}"));
                    continue;
                }
            };
            let later: Vec<usize> = models.iter().flat_map(|m| m.calls()).skip(calls_before).map(|c| c.turn).collect();
            let mut found = check(sc, &done, &world, Some(&crash), &later);
            found.extend(replay_matches(&env, &heard, false));
            if !sc.has_cancel && !interrupted(&done) && !interrupted(&reference) && done.messages != reference.messages
            {
                found.push("the final transcript differs from the uninterrupted run's".into());
            }
            totals.violations.extend(found.into_iter().map(|v| format!("{ctx}: {v}")));
        }
    }
}

#[test]
fn generated_scenarios_crashed_after_every_effect_keep_every_call_guarantee() {
    let n = common::seeds::cases(500);
    let only = common::seeds::only_seed();
    let only_k = common::seeds::env_u64("STEADFAST_CRASH_AT").map(|k| k as usize);
    let seeds = common::seeds::seeds(1..501);
    // Scenarios are independent: spread them over the cores (each thread builds its own worlds).
    let threads = std::thread::available_parallelism().map(|p| p.get()).unwrap_or(1).clamp(1, 8);
    let chunks: Vec<Vec<u64>> =
        (0..threads).map(|t| seeds.iter().copied().skip(t).step_by(threads).collect()).collect();
    let handles: Vec<_> = chunks
        .into_iter()
        .map(|chunk| {
            std::thread::spawn(move || {
                let mut totals = Totals { crash_runs: 0, violations: Vec::new() };
                let mut failing = BTreeSet::new();
                for seed in chunk {
                    let sc = Scenario::generate(seed);
                    let before = totals.violations.len();
                    for store in ["memory", "journal"] {
                        run_scenario(&sc, store, only_k, &mut totals);
                    }
                    if totals.violations.len() > before {
                        failing.insert(seed);
                    }
                }
                (totals.crash_runs, totals.violations, failing)
            })
        })
        .collect();
    let (mut crash_runs, mut violations, mut failing_seeds) = (0, Vec::new(), BTreeSet::new());
    for h in handles {
        let (c, v, f) = h.join().expect("scenario thread");
        crash_runs += c;
        violations.extend(v);
        failing_seeds.extend(f);
    }
    println!("generated scenarios: {}, crash runs: {crash_runs}, violations: {}", seeds.len(), violations.len());
    for v in violations.iter().take(20) {
        println!("  violation: {v}");
    }
    for seed in failing_seeds.iter().take(5) {
        println!("  reproduce: {}   # {:?}", common::seeds::repro(*seed, ""), Scenario::generate(*seed));
    }
    assert!(violations.is_empty(), "{} violations (see above)", violations.len());
    assert!(only.is_some() || seeds.len() >= 500 || n < 500, "at least 500 scenarios by default");
    assert!(only.is_some() || crash_runs >= 100 * n, "every scenario is crashed at many points: {crash_runs}");
}
