//! The model-based checker (M41): generated programs of every operation on a run, issued by racing replicas,
//! crashed after any effect, on every store; the guarantees checked as invariants over what was recorded and
//! what executed.
//!
//! **A program** is a seeded list of steps, each an operation started by one of two or three replicas at a
//! moment of simulated time: send, resume, approve or reject, fork (onto a fresh id, onto an existing run, onto
//! an id another step is creating), a session's send, a schedule's fire, a delivery and its redelivery, delete,
//! an abort (a send or resume aborted after a while), a recovery sweep tick (diagnosis forks on or off) and strict
//! mode's alarm (which resumes, quarantines and forks for diagnosis too, on or off), and the durable waits: a question answered (yes, no, declined), an event delivered with a token
//! handed out so far (the newest mostly; redelivered soon after half the time, with the same or another payload;
//! spent tokens too), deadlines and timers taken up by sweep ticks and alarms, and messages to a run with
//! `queue: true` (steering; interrupting or not; the agents read queues at every boundary or at most once a
//! second). The agents delegate: the model may call `team`, a sub-agent (whose agent has a `team` of its own: two
//! levels), so sends, resumes, decisions, deliveries, ticks and alarms all reach child runs too (a child's
//! approval, question, event or timer pauses its lead). A step may crash its execution right after its k-th effect (tools in flight finishing or not);
//! every step is a new process (a fresh agent and store handle). Steps overlap: every store operation, model
//! call and tool takes seeded simulated time, so executions interleave at their awaits. Tool results come in
//! every allowed size (a program in fifty allows results up to 4 MiB, eight at once). The tools: a plain one, a
//! reconciled payment, a side-effecting one, one that needs approval, a flaky one that propagates, a big one, and
//! one with an argument check of its own that takes seeded time and refuses a call in three (the gate step of
//! the npm package's zod / Standard Schema validators).
//!
//! **Stores**: the memory store; the journal store on the hostile Workers-KV simulator (one location: latency,
//! 429s at one write a second per key, short list pages, 1,000 operations per invocation); strict mode's run
//! objects with their KV index on the same simulator.
//!
//! **Invariants**, checked while the program runs (at every tool start and after every step, against an oracle
//! reading the store as it is) and after it:
//! * no recorded tool result or model turn is ever lost or replaced (each observation of a run extends the one
//!   before, unless the run was deleted in between or healed by its diagnosis fork);
//! * every tool call has exactly one result, in call order (every observed transcript is valid; a finished run
//!   holds no pending call, held result, intent or start mark);
//! * a call executes again only when no outcome was recorded (never once its result is readable), and a call
//!   whose intent was recorded only after its tool's `reconcile` said it did not happen; a call its tool's own
//!   argument check refused never executes;
//! * no two different calls share an idempotency key, and one call keeps its key across resumes;
//! * every stored run loads (never `STEADFAST_CHECKPOINT_CORRUPT`), and no operation fails with an error that
//!   means a bug (`STEADFAST_INTERNAL`, a write the store refused for good);
//! * a schedule's fire time runs once; a delivery runs its job once (one input, however often delivered);
//! * liveness: after the program, within a bounded number of sweep ticks, every run is finished, waits on a
//!   person, is quarantined or failed with an error that is not retryable;
//! * a sweep tick stays within the platform's 1,000 operations per invocation;
//! * waits: a token is delivered first at most once (a repeat is a duplicate or refused), and a first delivery
//!   that resumed its run reads as the call's result; a timer never wakes and a deadline never times out before
//!   its time; a question's result is an offered answer or a refusal; after the program every deadline and timer
//!   was taken up (a pause settles only while a person or an event without a deadline still has to answer).
//!   The counts of each way a wait resolved are printed (`waits: …`) and must all be above zero;
//! * steering: a queued message is applied at most once (in every observed transcript), and after the program a
//!   finished run holds each message acknowledged for it exactly once, in the order they were sent (unless the
//!   run was deleted or healed since); the counts (`steering: …`) must be above zero.
//!
//! * handoffs: the lead may hand its conversation to `desk` and back (`transfer_to_desk`, `transfer_to_lead`,
//!   several in a turn now and then, `maxHandoffs` 2): of a turn's transfers only the first is taken; a run is
//!   with the agent its last taken transfer named, under that agent's instructions, and only that agent's model
//!   is called for it; the counts (`handoffs: …`) must be above zero.
//! * sub-agents: a `team` call's result (not an error) is its finished child's final text, with the child's whole
//!   spend; a lead never waits on a child that finished without the result reaching its wait (a lost delivery);
//!   every run's usage is its model turns' plus its children's; once a lead's delete returned, none of the child
//!   runs it had (at any depth) is left; one delete in three dies after the lead, before its children, and the
//!   children it left are never executed again (no model call by an execution that took its lease after that
//!   delete: not by a sweep, a decision, a timer or a deadline taken up). Child runs are observed like any run (so every invariant above holds for
//!   them; one may vanish once a run above it was deleted or healed); the counts (`sub-agents: …`) must be above
//!   zero.
//!
//! * budgets: one program in three gives its agents `maxTotalTokens` and a `sessionBudget` (`onExceeded` finish or
//!   throw; replica 2 runs a raised budget, a deployment racing the old one): no model call is made from a recorded
//!   state whose run usage, conversation usage or — for a child run — cap from its lead (what the lead had left
//!   when it created the child) reached its limit; the counts (`budgets: …`) must be above zero. Half of them
//!   (even seeds) limit cost too (`maxCostUsd`, reached a little before the token limit): the same holds of the
//!   recorded cost.
//!
//! * fallbacks: in one program in four every agent has a fallback model and its own fails a third of its calls,
//!   so calls step down the chain: the checks at every model call hold for both models (a recorded turn is never
//!   generated again by either), and the count of turns a fallback answered (`fallbacks: …`) must be above zero.
//!
//! * breakers: one program in four (and half the fallback ones) puts a breaker on every dependency, one set per
//!   replica (an isolate's; the sweep carries open ones to the others), the agent's model failing 13 calls in
//!   40 and `flaky` a tool on a host of its own: no model and no `flaky` call is ever made while its breaker is
//!   open (only a probe once the cool-down ended); the counts of probes and of `flaky` calls an open breaker
//!   answered (`breakers: …`) must be above zero.
//! * storage: a run's recorded storage usage (its own store operations) costs exactly its counts at the prices,
//!   and no later recorded state of the run has fewer of any (unless it was deleted or healed in between); the
//!   count of recorded usages checked (`storage: …`) must be above zero.
//!
//! * metrics: every replica (an isolate) keeps its counters; after the program each replica's count of model
//!   calls equals the calls its processes made, retries and fallbacks a part of them (`metrics: …`).
//!
//! * fan-out: one program in three (`seed % 3 == 2`) sends its sweep ticks' due runs to a recovery queue, and a
//!   resume in three of them is a queue consumer instead (`Consume`: the oldest message; half the time the queue
//!   delivers it again later); the liveness ticks' messages are consumed after each tick. Every invariant above
//!   holds for the runs consumers resume, a tick's operations include its queue sends, and no message the sweep
//!   sent is unreadable; the counts (`fan-out: …`) must be above zero.
//!
//! * gate: in even programs every agent has the program's recovery gate and the sweep options a ceiling of 1, so
//!   alarms and consumers take a slot before they resume a run (turned away: they come back at their turn, or a
//!   tick resumes the run); every invariant above holds for them; the counts (`gate: …`) must be above zero.
//!
//! * cost: the model is priced ($1 and $3 per million tokens: a turn costs 25,000 nano-dollars), so every
//!   recorded usage — a run's, its conversation's, each turn's and each child's rolled up into its lead — has a
//!   cost, and it is exactly its tokens' (1,000 nano-dollars a prompt token, 3,000 a completion token): a turn
//!   counted twice or lost in a crash, a fork, a handoff or a child's roll-up would show as a difference.
//!
//! `cargo test --test checker -- --nocapture` prints
//! `model-checked programs: N, operations: M, crash points: C, stores: 3, violations: 0`. More programs:
//! `STEADFAST_CASES=20000` (or `STEADFAST_LARGE=1`); one program: `STEADFAST_SEED=<seed>` (with
//! `STEADFAST_STORE=memory|journal|objects` for one store, `STEADFAST_TRACE=1` for its story). A failing program prints its one-line reproduction and a shrunk program (steps removed while the
//! violation stays).

mod common;

use async_trait::async_trait;
use futures::FutureExt;
use serde_json::{json, Value};
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
use std::rc::Rc;
use steadfast::core::checkpoint::{Checkpoint, FinishReason, RunStatus};
use steadfast::core::gate::Grant;
use steadfast::core::ids::{subagent_parent, subagent_path, subagent_run_id};
use steadfast::core::machine::ModelResponse;
use steadfast::core::schedule::{CompiledSchedule, Schedule, ScheduleInput};
use steadfast::core::sweep::SweepOptions;
use steadfast::core::transcript::{validate_transcript, Message, ToolCall, Usage};
use steadfast::core::wait::{WaitKind, WaitRequest};
use steadfast::runtime::{
    AbortSignal, Agent, AgentOptions, Clock, CrashBudget, CrashPoint, FnTool, ForkOptions, LocalGate, Model,
    ModelRequest, RecoveryGate, Resolve, Rng, ScheduleOutcome, SendOptions, SimExecutor, SimTime, Sleep, SplitMix64,
    SubagentOptions, Tool, ToolError, ToolOutput,
};
use steadfast::store::kv::KvBackend;
use steadfast::store::object::{LocalObjects, ObjectStore};
use steadfast::store::sim::{SimKv, SimOptions};
use steadfast::store::{JournalOptions, JournalStore, LeaseOptions, MemoryStore, RunStore};
use steadfast::{ErrorCode, Result};

const T0: u64 = 1_700_000_000_000;
/// Runs the steps may name (forks go to any of them: fresh ids, existing runs, ids being created).
const RUNS: [&str; 5] = ["r0", "r1", "r2", "f0", "f1"];
const SESSIONS: [&str; 2] = ["s0", "s1"];
const DELIVERIES: [&str; 2] = ["d0", "d1"];
const SCHEDULE: &str = "sch";
/// Levels of sub-agents below a lead (`team`, and its own `team`).
const TEAM_DEPTH: usize = 2;
/// Handoffs a run may take (low, so the limit is met).
const MAX_HANDOFFS: u32 = 2;
/// Sweep ticks after the program (time moving on between them) within which every run must settle.
const LIVENESS_TICKS: usize = 14;
const LEASE: LeaseOptions = LeaseOptions { ttl_ms: 30_000, renew_every_ms: 10_000, grace_ms: 30_000 };

// --- Programs ----------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StoreKind {
    Memory,
    Journal,
    Objects,
}

impl StoreKind {
    fn name(self) -> &'static str {
        match self {
            StoreKind::Memory => "memory",
            StoreKind::Journal => "journal",
            StoreKind::Objects => "objects",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Op {
    Send {
        run: usize,
        task: u32,
    },
    Resume {
        run: usize,
    },
    /// Resume an unfinished child of a detached sub-agent call, picked by `run` (as the sweep or a user would).
    ResumeChild {
        run: usize,
    },
    /// Decide the `pick`-th pending approval (modulo how many there are).
    Decide {
        pick: u32,
        approve: bool,
    },
    Fork {
        source: usize,
        target: usize,
        latest: bool,
    },
    SessionSend {
        session: usize,
        task: u32,
    },
    Fire,
    Deliver {
        delivery: usize,
        task: u32,
    },
    Delete {
        run: usize,
    },
    Sweep {
        diagnosis: bool,
    },
    /// Answer the `pick`-th pending question: yes (0), no (1), or decline (2).
    Answer {
        pick: u32,
        choice: u8,
    },
    /// Deliver payload `{"v": payload}` with the `pick`-th event token handed out so far (spent ones
    /// included: a redelivery, a conflicting one, a spent token).
    Event {
        pick: u32,
        payload: u8,
    },
    /// The run's own recovery step (strict mode's alarm), diagnosis forks on or off.
    Alarm {
        run: usize,
        diagnosis: bool,
    },
    /// A message to the run with `queue: true` (steering), stopping the calls that have not started or not.
    Steer {
        run: usize,
        interrupt: bool,
    },
    /// A recovery-queue consumer (programs that fan out): takes the oldest message the sweep sent and resumes
    /// its run; with `redeliver` the queue delivers it again later (at-least-once).
    Consume {
        redeliver: bool,
    },
}

#[derive(Clone, Debug, PartialEq)]
struct Step {
    /// Start, from the program's start (simulated ms).
    at_ms: u64,
    replica: u8,
    op: Op,
    /// Crash right after this many effects (and whether tools in flight finish).
    crash: Option<(usize, bool)>,
    /// Abort the execution this long after it started.
    abort_after_ms: Option<u64>,
}

#[derive(Clone, Debug)]
struct Program {
    seed: u64,
    steps: Vec<Step>,
    concurrency: usize,
    /// Tool results up to 4 MiB, several at once.
    big: bool,
    /// Every run is a "stuck" one sometimes (a tool that keeps failing): quarantine and diagnosis forks.
    stuck_every: u64,
    /// The agents' `steer_poll_ms`.
    steer_poll_ms: u64,
    /// Budgets (one program in three): every agent's, raised on replica 2 (a deployment that raised them,
    /// racing the old one).
    budget: Option<CheckBudget>,
    /// Every agent has a fallback model (`checker-b`) and its own model fails a third of its calls (one program in
    /// four: `seed % 4 == 3`, no draw of its own).
    fallback: bool,
    /// Breakers on every model (one program in four: `seed % 4 == 1`, the agent's model failing a third of its
    /// calls and no fallback; and every other fallback program, `seed % 8 == 7`), one set per replica.
    breakers: bool,
    /// Sweep ticks fan out through a recovery queue and consumers resume the runs (one program in three:
    /// `seed % 3 == 2`).
    fan_out: bool,
}

/// A program's budgets: `maxTotalTokens` of a run and of the conversation (`sessionBudget`), and `onExceeded`;
/// `maxCostUsd` (nano-dollars) in even programs.
#[derive(Clone, Copy, Debug, PartialEq)]
struct CheckBudget {
    run: u64,
    session: u64,
    throw: bool,
    cost: Option<u64>,
}

impl CheckBudget {
    /// The budget a process on `replica` has: replica 2 runs the raised one.
    fn on(self, replica: u8) -> CheckBudget {
        if replica == 2 {
            CheckBudget { run: self.run * 3, session: self.session * 3, cost: self.cost.map(|c| c * 3), ..self }
        } else {
            self
        }
    }
}

impl Program {
    /// Whether its alarms and consumers take a slot of the recovery gate (a ceiling of 1) before they resume.
    fn gated(&self) -> bool {
        self.seed % 2 == 0
    }

    /// Whether its sub-agent calls execute their children through a [`ChildHost`] (as strict mode's Worker does, each
    /// child in its own object): one program in five.
    fn hosted(&self) -> bool {
        self.seed % 5 == 1
    }

    fn generate(seed: u64) -> Program {
        let rng = SplitMix64::new(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(0x51));
        let pick = |n: u64| rng.next_u64() % n;
        let fan_out = seed % 3 == 2;
        let big = pick(50) == 0;
        let len = if big { 4 + pick(3) } else { 5 + pick(8) };
        let mut at = 0;
        let mut steps = Vec::new();
        for _ in 0..len {
            // Steps start together (racing) or a while apart (lease expiries, backoffs).
            at += match pick(6) {
                0 | 1 => 0,
                2 => pick(400),
                3 => pick(5_000),
                4 => 5_000 + pick(40_000),
                _ => 60_000 + pick(60_000),
            };
            let run = pick(RUNS.len() as u64) as usize;
            let task = pick(1_000) as u32;
            let op = match pick(100) {
                0..=21 => Op::Send { run, task },
                // One resume in four goes to a detached child of the run (chosen from the task's number).
                // In programs that fan out, a resume in three is a queue consumer instead (from the task's number).
                22..=31 if fan_out && task % 3 == 0 => Op::Consume { redeliver: task % 2 == 0 },
                22..=31 if task % 2 == 1 => Op::ResumeChild { run },
                22..=31 => Op::Resume { run },
                32..=41 if pick(2) == 0 => Op::Answer { pick: pick(8) as u32, choice: pick(3) as u8 },
                32..=41 => Op::Decide { pick: pick(8) as u32, approve: pick(3) != 0 },
                42..=51 => Op::Fork { source: pick(3) as usize, target: run, latest: pick(2) == 0 },
                52..=60 => Op::SessionSend { session: pick(SESSIONS.len() as u64) as usize, task },
                61..=65 => Op::Fire,
                66..=73 if pick(3) != 0 => Op::Event { pick: pick(8) as u32, payload: pick(2) as u8 },
                66..=73 => Op::Deliver { delivery: pick(DELIVERIES.len() as u64) as usize, task },
                74..=78 => Op::Delete { run },
                // A sweep tick in three is a message to a run with `queue: true` instead (chosen from the task's
                // number: the programs are otherwise the ones the generator made before steering).
                79..=90 if task % 3 == 2 => Op::Steer { run, interrupt: task % 6 == 5 },
                79..=90 => Op::Sweep { diagnosis: pick(2) == 0 },
                _ => Op::Alarm { run, diagnosis: task % 2 == 0 },
            };
            let executes = !matches!(op, Op::Delete { .. } | Op::Fork { .. });
            let crash = (executes && pick(3) == 0).then(|| (1 + pick(14) as usize, pick(2) == 0));
            let abort_after_ms = (executes && crash.is_none() && pick(12) == 0).then(|| pick(6_000));
            steps.push(Step { at_ms: at, replica: pick(3) as u8, op: op.clone(), crash, abort_after_ms });
            if let (Op::Event { .. }, 0) = (&op, pick(2)) {
                // The sender retries (a webhook whose reply it did not see): the same delivery again, soon.
                let again = at + pick(3_000);
                steps.push(Step { at_ms: again, replica: pick(3) as u8, op, crash: None, abort_after_ms: None });
            }
        }
        let concurrency = [1, 2, 8][pick(3) as usize];
        let stuck_every = 3 + pick(5);
        // Queues read at every boundary, or at most once a second (the default).
        let steer_poll_ms = [0, 1_000][pick(2) as usize];
        // Budgets: a model turn spends 15 tokens (sub-agents' children add theirs), a task takes up to 4 turns.
        // Even programs limit cost too: 1,700 nano-dollars a token of the run's limit, reached a little before the
        // tokens (a turn costs 25,000 for its 15 tokens). No draw of its own: every seed's program stays as it was.
        let budget = (pick(3) == 0).then(|| {
            let run = 20 + pick(60);
            let cost = (seed % 2 == 0).then_some(run * 1_700);
            CheckBudget { run, session: 60 + pick(240), throw: pick(2) == 0, cost }
        });
        let (fallback, breakers) = (seed % 4 == 3, seed % 4 == 1 || seed % 8 == 7);
        Program { seed, steps, concurrency, big, stuck_every, steer_poll_ms, budget, fallback, breakers, fan_out }
    }
}

// --- The world: what executed and what was observed ------------------------------------------------------

/// One state of a run as the oracle read it: each message's fingerprint, and held results by call id.
#[derive(Clone, Debug)]
struct Seen {
    at: u64,
    /// Per message: (kind, fingerprint); kind `t` for a tool result (with its call id), `a` for a model turn.
    messages: Vec<(String, u64)>,
    held: BTreeMap<String, u64>,
    /// The recorded storage usage's counts (`Checkpoint::storage`, in its wire order).
    storage: [u64; 8],
}

#[derive(Default)]
struct Log {
    violations: Vec<String>,
    /// Tool starts per call identity: (run, call id, time).
    starts: BTreeMap<String, Vec<(String, String, u64)>>,
    /// Reconciles per call identity: (time, said it happened).
    reconciles: BTreeMap<String, Vec<(u64, bool)>>,
    /// Idempotency key → call identities that used it; call identity → keys.
    key_users: BTreeMap<String, BTreeSet<String>>,
    identity_keys: BTreeMap<String, BTreeSet<String>>,
    /// Effects of `pay` per idempotency key (what its `reconcile` reads).
    paid: BTreeMap<String, u32>,
    /// Observations per run id.
    seen: BTreeMap<String, Vec<Option<Seen>>>,
    /// Deletes of a run: (start, end).
    deletes: BTreeMap<String, Vec<(u64, u64)>>,
    /// Child runs a delete cut short left behind (their lead deleted, they not), with when that delete ended:
    /// none of them may be executed again (no lease is acquired on one).
    orphans: BTreeMap<String, u64>,
    /// When each execution (run, owner) acquired its lease.
    acquired: BTreeMap<(String, String), u64>,
    /// Fire times run (by a `Fired` outcome).
    fired: BTreeMap<u64, u32>,
    known: BTreeSet<String>,
    /// Lease owners (run, owner) whose acquisition was confirmed (journal store: only what such an owner wrote
    /// is recorded; an unconfirmed acquirer's entries are tentative, read only if it wins).
    confirmed: BTreeSet<(String, String)>,
    operations: u64,
    crashes: u64,
    tokens: u64,
    /// Event tokens handed to `hook` calls, in order: (run, call id, token).
    event_tokens: Vec<(String, String, String)>,
    /// Deliveries acknowledged as first (not duplicates) per token: the payload.
    delivered: BTreeMap<String, Vec<u8>>,
    /// How often each way of resolving a wait happened: see [`WaitCounts`].
    waits: WaitCounts,
    /// Messages sent with `queue: true` that were acknowledged.
    steers: Vec<SteerSent>,
}

/// A message sent to a run with `queue: true` and acknowledged.
#[derive(Clone, Debug)]
struct SteerSent {
    run: String,
    /// Its text (unique in the program).
    text: String,
    started: u64,
    ended: u64,
    /// Whether its own send applied it.
    applied: bool,
}

/// The waits a program exercised (printed, so a generator that stops making them shows).
#[derive(Clone, Copy, Debug, Default)]
struct WaitCounts {
    answered: u64,
    delivered: u64,
    duplicates: u64,
    refused: u64,
    timeouts: u64,
    woken: u64,
    /// Steering: messages queued for an execution that held the run, applied by their own send, and calls an
    /// interrupting message stopped.
    steers_queued: u64,
    steers_applied: u64,
    calls_stopped: u64,
    /// Sub-agents: calls of `team`, their results read from a finished child, and leads found paused on a
    /// paused child after the program.
    team_calls: u64,
    team_results: u64,
    team_pauses: u64,
    /// Child runs deleted with their lead (each checked gone once the lead's delete returned).
    children_deleted: u64,
    /// Child runs a delete cut short left behind (each checked never executed again).
    children_left: u64,
    /// Detached sub-agent `bg`: calls answered "started", children whose result the lead applied, children
    /// abandoned by a lead's delete (still there once it returned).
    bg_calls: u64,
    bg_delivered: u64,
    bg_abandoned: u64,
    /// Handoffs: transfers taken, transfers not taken (not the first of their turn), refused at the limit.
    handoffs: u64,
    transfers_not_taken: u64,
    handoff_limits: u64,
    /// Budgets: model calls checked against the budget in force, runs seen stopped on their budget, resumes that
    /// went on with a raised one, calls refused or failed with `STEADFAST_BUDGET_EXCEEDED`.
    budget_checked: u64,
    /// Of those, calls of child runs with a cap from their lead.
    budget_capped: u64,
    budget_stops: u64,
    budget_resumes: u64,
    budget_errors: u64,
    /// Cost: model calls checked against a `maxCostUsd`, recorded usages whose cost was checked against their tokens.
    cost_checked: u64,
    costs_checked: u64,
    /// Fallbacks: recorded turns a fallback model answered.
    fallback_turns: u64,
    /// Breakers: model and tool calls that were a half-open breaker's probe.
    breaker_probes: u64,
    /// Breakers: recorded results of `flaky` calls its host's open breaker refused.
    tool_refusals: u64,
    /// Metrics: model calls counted by the replicas' counters (each checked against the calls made).
    metrics_checked: u64,
    /// Storage: recorded states with a storage usage (checked: its cost is its counts' at the prices, and no
    /// later state of the run has less).
    storage_checked: u64,
    /// Fan-out: runs sweep ticks sent to the recovery queue, messages consumers took (redeliveries included), and
    /// of those the ones that left their run with a next look (in its backoff, busy, failed again) and the ones
    /// that left it settled (finished, gone, paused, at the cap, waiting on the breaker).
    enqueued: u64,
    consumed: u64,
    consumer_resumes: u64,
    consumer_skips: u64,
    /// Gate: slots the recovery gate granted to runs' own recovery steps (alarms, consumers), and the times it
    /// turned one away (told it when to come back).
    gate_granted: u64,
    gate_later: u64,
    /// Traces (every third program traces): spans exported, checked for their nesting and links.
    traced_spans: u64,
    /// Child runs executed through a host (every fifth program: each as in its own object, served through the
    /// API's child protocol), and their relayed events (each checked tagged with its run's sub-agent).
    hosted_children: u64,
    hosted_events: u64,
    /// Children a delete cut short left, removed since (their lead's absence proof: memory and objects only).
    orphans_removed: u64,
    /// `team` calls recorded cancelled (an abort mid-child), and their children removed since.
    children_cancelled: u64,
    cancelled_removed: u64,
}

impl WaitCounts {
    fn add(&mut self, o: &WaitCounts) {
        self.answered += o.answered;
        self.delivered += o.delivered;
        self.duplicates += o.duplicates;
        self.refused += o.refused;
        self.timeouts += o.timeouts;
        self.woken += o.woken;
        self.steers_queued += o.steers_queued;
        self.steers_applied += o.steers_applied;
        self.calls_stopped += o.calls_stopped;
        self.team_calls += o.team_calls;
        self.team_results += o.team_results;
        self.team_pauses += o.team_pauses;
        self.children_deleted += o.children_deleted;
        self.handoffs += o.handoffs;
        self.transfers_not_taken += o.transfers_not_taken;
        self.handoff_limits += o.handoff_limits;
        self.bg_calls += o.bg_calls;
        self.children_left += o.children_left;
        self.bg_delivered += o.bg_delivered;
        self.bg_abandoned += o.bg_abandoned;
        self.budget_checked += o.budget_checked;
        self.budget_capped += o.budget_capped;
        self.budget_stops += o.budget_stops;
        self.budget_resumes += o.budget_resumes;
        self.budget_errors += o.budget_errors;
        self.cost_checked += o.cost_checked;
        self.costs_checked += o.costs_checked;
        self.fallback_turns += o.fallback_turns;
        self.hosted_children += o.hosted_children;
        self.hosted_events += o.hosted_events;
        self.orphans_removed += o.orphans_removed;
        self.children_cancelled += o.children_cancelled;
        self.cancelled_removed += o.cancelled_removed;
        self.breaker_probes += o.breaker_probes;
        self.tool_refusals += o.tool_refusals;
        self.metrics_checked += o.metrics_checked;
        self.storage_checked += o.storage_checked;
        self.enqueued += o.enqueued;
        self.consumed += o.consumed;
        self.consumer_resumes += o.consumer_resumes;
        self.consumer_skips += o.consumer_skips;
        self.gate_granted += o.gate_granted;
        self.gate_later += o.gate_later;
        self.traced_spans += o.traced_spans;
    }
}

enum Backend {
    Memory(MemoryStore),
    Journal(SimKv),
    Objects(LocalObjects, SimKv),
}

struct World {
    program: Program,
    kind: StoreKind,
    exec: SimExecutor,
    time: SimTime,
    backend: Backend,
    oracle: Rc<dyn RunStore>,
    rng: SplitMix64,
    log: RefCell<Log>,
    processes: Cell<u64>,
    schedule: CompiledSchedule,
    /// Leads whose delete in progress dies after the lead (deletes of their children fail).
    cutting: RefCell<BTreeSet<String>>,
    /// Each replica's model breakers (an isolate's, shared by its processes), in programs with breakers.
    breakers: [Rc<steadfast::runtime::Breakers>; 3],
    /// Each replica's counters (an isolate's), and the model calls each replica's processes made.
    metrics: [Rc<steadfast::runtime::Metrics>; 3],
    model_calls: [Cell<u64>; 3],
    /// The recovery queue (programs that fan out): what ticks sent and consumers have not taken.
    queue: steadfast::runtime::SimQueue,
    /// The recovery gate (even programs: a ceiling of 1 on the resumes of alarms and consumers), shared by every
    /// replica as the Worker's gate object is.
    gate: Rc<CountingGate>,
    /// Every traced execution's spans (every third program's agents trace, with contents in the even ones).
    spans: steadfast::runtime::VecExporter,
}

fn hash_of(s: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    s.hash(&mut h);
    h.finish()
}

fn message_print(m: &Message) -> (String, u64) {
    match m {
        Message::Tool(r) => {
            (format!("t:{}", r.tool_call_id), hash_of(&format!("{}|{}|{:?}", r.content, r.is_error, r.kind)))
        }
        Message::Assistant { content, tool_calls, .. } => {
            let calls: Vec<String> = tool_calls.iter().map(|c| format!("{}:{}:{}", c.id, c.name, c.args)).collect();
            ("a".into(), hash_of(&format!("{content}|{}", calls.join(","))))
        }
        Message::User { content } => ("u".into(), hash_of(content)),
        other => ("o".into(), hash_of(&format!("{other:?}"))),
    }
}

fn seen_of(cp: &Checkpoint, at: u64) -> Seen {
    Seen {
        at,
        messages: cp.messages.iter().map(message_print).collect(),
        held: cp
            .held_results
            .iter()
            .map(|r| (r.tool_call_id.clone(), hash_of(&format!("{}|{}|{:?}", r.content, r.is_error, r.kind))))
            .collect(),
        storage: cp.storage.wire(),
    }
}

/// A call's identity: the model generation that made it (a token in its arguments) and its index. A fork's
/// copy of a call is the same call.
fn identity(args: &Value) -> String {
    format!("{}.{}", args["t"].as_u64().unwrap_or(0), args["i"].as_u64().unwrap_or(0))
}

fn has_result(cp: &Checkpoint, call_id: &str) -> bool {
    cp.messages.iter().any(|m| matches!(m, Message::Tool(r) if r.tool_call_id == call_id))
        || cp.held_results.iter().any(|r| r.tool_call_id == call_id)
}

impl World {
    fn new(program: &Program, kind: StoreKind) -> Rc<World> {
        let exec = SimExecutor::new(T0, program.seed);
        let time = exec.time();
        let kv = || {
            let opts = SimOptions { locations: 1, ..SimOptions::hostile(program.seed ^ 0x6b76) };
            SimKv::with_timer(Rc::new(time.clone()), Rc::new(time.clone()), opts)
        };
        let (backend, oracle): (Backend, Rc<dyn RunStore>) = match kind {
            StoreKind::Memory => {
                let m = MemoryStore::new();
                (Backend::Memory(m.clone()), Rc::new(m))
            }
            StoreKind::Journal => {
                let kv = kv();
                let oracle = JournalStore::new(
                    kv.origin(),
                    Rc::new(time.clone()),
                    Rc::new(time.clone()),
                    JournalOptions::default(),
                );
                (Backend::Journal(kv), Rc::new(oracle))
            }
            StoreKind::Objects => {
                let (objects, kv) = (LocalObjects::default(), kv());
                let oracle =
                    ObjectStore::new(objects.clone(), kv.origin(), "", Rc::new(time.clone()), Rc::new(time.clone()));
                (Backend::Objects(objects, kv), Rc::new(oracle))
            }
        };
        let schedule = CompiledSchedule::compile(Schedule {
            id: SCHEDULE.into(),
            cron: "* * * * *".into(),
            input: ScheduleInput::Text("task 7 (scheduled)".into()),
            missed: None,
            grace_ms: None,
        })
        .expect("the schedule compiles");
        let gate = Rc::new(CountingGate(LocalGate::new(Rc::new(time.clone())), Cell::new(0), Cell::new(0)));
        Rc::new(World {
            program: program.clone(),
            kind,
            exec,
            time,
            backend,
            oracle,
            rng: SplitMix64::new(program.seed ^ 0xC0FFEE),
            log: RefCell::default(),
            processes: Cell::new(0),
            cutting: RefCell::default(),
            schedule,
            breakers: Default::default(),
            metrics: Default::default(),
            model_calls: Default::default(),
            queue: steadfast::runtime::SimQueue::new(),
            gate,
            spans: steadfast::runtime::VecExporter::new(),
        })
    }

    fn pick(&self, n: u64) -> u64 {
        self.rng.next_u64() % n.max(1)
    }

    /// With `STEADFAST_TRACE` set: a line of the program's story.
    fn trace(&self, line: impl FnOnce() -> String) {
        if std::env::var_os("STEADFAST_TRACE").is_some() {
            println!("{:>10.3} s  {}", (self.now() - T0) as f64 / 1_000.0, line());
        }
    }

    fn violation(&self, v: String) {
        self.log.borrow_mut().violations.push(v);
    }

    fn now(&self) -> u64 {
        self.time.now_ms()
    }

    /// The run as the oracle reads it now; a read that fails is reported (every stored run must load).
    fn read(&self, run_id: &str) -> Option<Checkpoint> {
        match self.oracle.load(run_id).now_or_never() {
            Some(Ok(cp)) => cp,
            Some(Err(e)) => {
                self.violation(format!("{run_id} does not load at {}: {} {}", self.now() - T0, e.code, e.message));
                None
            }
            None => panic!("the oracle never waits"),
        }
    }

    /// Whether what the oracle reads of `run_id` now is recorded: on the journal store, written under a lease
    /// whose acquisition was confirmed (an unconfirmed acquirer's entries are read only if it wins; it runs
    /// no tool and reports nothing before); on the other stores acquisitions are atomic.
    fn recorded(&self, run_id: &str) -> bool {
        let Backend::Journal(kv) = &self.backend else { return true };
        let Some(Ok(Some(raw))) = kv.origin().get(&format!("run/{run_id}/lease")).now_or_never() else { return true };
        let Ok(rec) = serde_json::from_str::<Value>(&raw) else { return true };
        if rec["deleted"].as_bool() == Some(true) {
            return true;
        }
        let owner = rec["owner"].as_str().unwrap_or_default().to_string();
        self.log.borrow().confirmed.contains(&(run_id.to_string(), owner))
    }

    /// Records an observation of `run_id` and checks it against the previous one.
    fn observe(&self, run_id: &str) {
        let cp = self.read(run_id);
        let now = self.now();
        if let Some(cp) = &cp {
            if let Err(why) = validate_transcript(&cp.messages) {
                self.violation(format!("{run_id} at {}: invalid transcript: {why}", now - T0));
            }
            if cp.status == RunStatus::Finished
                && (!cp.held_results.is_empty() || !cp.intents.is_empty() || !cp.started_tool_call_ids.is_empty())
            {
                self.violation(format!("{run_id}: finished with held results, intents or start marks"));
            }
            if let Some(why) = handoff_violation(cp) {
                self.violation(format!("{run_id} at {}: {why}", now - T0));
            }
            // Storage usage: its cost is its counts at the (default) prices, however many entries recorded it.
            if !cp.storage.is_empty() {
                let priced = cp.storage.priced(&steadfast::core::cost::StoragePrices::default());
                if priced != cp.storage {
                    self.violation(format!("{run_id} at {}: storage {:?} costs {}", now - T0, cp.storage, priced.cost));
                }
                self.log.borrow_mut().waits.storage_checked += 1;
            }
            // A queued message is applied at most once; so is a detached child's result.
            let mut steers = BTreeSet::new();
            for m in cp.messages.iter().chain(&cp.queued_input) {
                if let Message::User { content } = m {
                    let once = content.starts_with("steer ") || content.starts_with("Sub-agent 'bg' finished");
                    if once && !steers.insert(content.clone()) {
                        self.violation(format!("{run_id} at {}: '{content}' was applied twice", now - T0));
                    }
                }
            }
        }
        if !self.recorded(run_id) {
            // Tentative: not a state the store has recorded (see `recorded`), so not one to keep.
            return;
        }
        let seen = cp.as_ref().map(|cp| seen_of(cp, now));
        let mut log = self.log.borrow_mut();
        log.known.insert(run_id.to_string());
        let prev = log.seen.get(run_id).and_then(|v| v.iter().rev().find_map(|s| s.clone()));
        if let Some(prev) = prev {
            let deleted = log
                .deletes
                .get(run_id)
                .is_some_and(|ds| ds.iter().any(|(start, end)| *end >= prev.at && *start <= now));
            // A child run goes with its lead: deleted with it (`Agent::delete`, also when the sweep replaces a lead
            // by its diagnosis fork), at any time after that lead's delete started.
            let leads: Vec<&str> = std::iter::successors(subagent_parent(run_id).map(|(p, _)| p), |id| {
                subagent_parent(id).map(|(p, _)| p)
            })
            .collect();
            let lead_gone = leads.iter().any(|lead| {
                log.deletes.get(*lead).is_some_and(|ds| ds.iter().any(|(start, _)| *start <= now))
                    || log.seen.contains_key(&format!("{lead}.heal"))
            });
            let deleted = deleted || lead_gone;
            let healed = run_id.ends_with(".heal") || log.seen.contains_key(&format!("{run_id}.heal"));
            match &seen {
                None if !deleted && !healed => log.violations.push(format!(
                    "{run_id}: vanished between {} and {} (no delete)",
                    prev.at - T0,
                    now - T0
                )),
                Some(cur) if !deleted => {
                    if let Some(why) = lost(&prev, cur) {
                        log.violations.push(format!("{run_id} between {} and {}: {why}", prev.at - T0, now - T0));
                    }
                }
                _ => {}
            }
        }
        log.seen.entry(run_id.to_string()).or_default().push(seen);
    }
}

/// What of `prev` (a recorded state) `cur` (a later one) lost or replaced, if anything.
fn lost(prev: &Seen, cur: &Seen) -> Option<String> {
    if prev.storage.iter().zip(&cur.storage).any(|(p, c)| c < p) {
        return Some(format!("its recorded storage went from {:?} to {:?}", prev.storage, cur.storage));
    }
    for (i, (kind, print)) in prev.messages.iter().enumerate() {
        match cur.messages.get(i) {
            Some((k, p)) if k == kind && p == print => {}
            Some((k, _)) if k == kind => return Some(format!("message {i} ({kind}) was replaced")),
            Some((k, _)) => return Some(format!("message {i} ({kind}) became a {k}")),
            None if kind.starts_with("t:") && cur.held.contains_key(&kind[2..]) => {
                return Some(format!("result {kind} went back to held"))
            }
            None => return Some(format!("message {i} ({kind}) was lost")),
        }
    }
    for (id, print) in &prev.held {
        let placed = cur.messages.iter().find(|(k, _)| k.strip_prefix("t:") == Some(id.as_str()));
        match (placed, cur.held.get(id)) {
            (Some((_, p)), _) | (None, Some(p)) if p == print => {}
            (None, None) => return Some(format!("held result {id} was lost")),
            _ => return Some(format!("held result {id} was replaced")),
        }
    }
    None
}

// --- The model and the tools -------------------------------------------------------------------------------

/// The breakers of programs with breakers: 3 calls in 10 s, half of them failed, open a model's for 5 s.
const CHECK_BREAKER: steadfast::core::breaker::BreakerOptions = steadfast::core::breaker::BreakerOptions {
    window_ms: 10_000,
    min_calls: 3,
    failure_percent: 50,
    cool_down_ms: 5_000,
};

/// The checker model's price: $1 a million prompt tokens, $3 a million completion tokens.
fn checker_prices() -> steadfast::core::cost::PriceTable {
    let mut t = steadfast::core::cost::PriceTable::default();
    t.insert("checker", steadfast::core::cost::Price::new(1_000_000, 3_000_000));
    // The fallback model of the programs that have one: the same price (every usage costs its tokens').
    t.insert("checker-b", steadfast::core::cost::Price::new(1_000_000, 3_000_000));
    t
}

/// What `u`'s tokens cost at the checker model's price, in nano-dollars.
fn checker_cost(u: &Usage) -> u64 {
    u.input_tokens * 1_000 + u.output_tokens * 3_000
}

/// Answers from the transcript: the task in the last user message and the number of turns since it decide the
/// calls (a pure function, so every process plans the same); each generation carries a fresh token in its
/// calls' arguments (the calls' identity). Call ids are left to the runtime half the time (as providers that
/// give none), `call_<turn>_<i>` otherwise: they collide across runs, as real ones do.
struct CheckerModel {
    world: Rc<World>,
    /// The agent it answers for: `lead` or `desk` (the top agent's handoff team), `team` (a sub-agent).
    agent: &'static str,
    /// The budget of its process (every agent of a process has the same).
    budget: Option<CheckBudget>,
    /// `checker`, or `checker-b` for the fallback model of programs with one.
    id: &'static str,
    /// In one in every 40 calls (`checker`, the agent's model, of a program with a fallback or breakers: 13 in
    /// 40) the provider answers 503.
    fails_in: u64,
    /// Its process's breakers, in programs with breakers.
    breakers: Option<Rc<steadfast::runtime::Breakers>>,
    /// Its process's replica.
    replica: usize,
}

fn task_of(messages: &[Message]) -> Option<(u64, usize)> {
    let u = messages.iter().rposition(|m| matches!(m, Message::User { .. }))?;
    let Message::User { content } = &messages[u] else { return None };
    let task: u64 = content.strip_prefix("task ")?.split(' ').next()?.parse().ok()?;
    let turns = messages[u..].iter().filter(|m| matches!(m, Message::Assistant { .. })).count();
    Some((task, turns))
}

#[async_trait(?Send)]
impl Model for CheckerModel {
    fn id(&self) -> &str {
        self.id
    }

    async fn generate(&self, request: ModelRequest<'_>) -> Result<ModelResponse> {
        let w = &self.world;
        let calls = &w.model_calls[self.replica];
        calls.set(calls.get() + 1);
        // A recorded model turn is never generated again: the run as recorded must not already hold a model
        // turn right after the transcript this call was given.
        // On the journal store an acquirer calls the model before its lease is confirmed (the read-back overlaps
        // the first model call); a call of one that loses is wasted, never recorded: only confirmed executions
        // are held to it.
        let confirmed = !matches!(w.backend, Backend::Journal(_))
            || w.log.borrow().confirmed.contains(&(request.run_id.to_string(), request.execution.to_string()));
        if let Some(cp) = w.read(request.run_id).filter(|_| confirmed && w.recorded(request.run_id)) {
            let n = request.messages.len();
            let same_prefix = cp.messages.len() > n
                && cp.messages[..n].iter().map(message_print).eq(request.messages.iter().map(message_print));
            if same_prefix && matches!(cp.messages[n], Message::Assistant { .. }) {
                w.violation(format!(
                    "{}: the model turn after message {n} was recorded and is generated again at {}",
                    request.run_id,
                    w.now() - T0
                ));
            }
        }
        // A child whose lead's call is recorded cancelled (the lead's execution aborted before its result) never
        // calls its model again: the lead went on without it.
        // On Workers KV once the cancel is visible where the child is read (the lead's state older than KV's minute
        // and the simulator's lag). A detached child (`bg`) is its own from its call's start.
        if let Some((lead, name)) = subagent_parent(request.run_id).filter(|(_, name)| *name == "team") {
            let settled = |l: &Checkpoint| {
                !matches!(w.backend, Backend::Journal(_)) || w.now() > l.saved_at.saturating_add(120_000)
            };
            if w.read(lead).is_some_and(|l| settled(&l) && call_cancelled(&l, name, request.run_id)) {
                w.violation(format!(
                    "{}: its model called after its lead's call was recorded cancelled",
                    request.run_id
                ));
            }
        }
        // A model call happens only under the budget: the recorded state this call was made from (the same
        // transcript) has used less than the run's and the conversation's limit (a run goes over by at most the
        // call that crossed it; a crash between a usage update and the check changes nothing).
        if let Some(b) = self.budget {
            let n = request.messages.len();
            let from = w.read(request.run_id).filter(|cp| {
                confirmed
                    && w.recorded(request.run_id)
                    && cp.messages.len() == n
                    && cp.messages.iter().map(message_print).eq(request.messages.iter().map(message_print))
            });
            if let Some(cp) = from {
                w.log.borrow_mut().waits.budget_checked += 1;
                // A child run is bounded by what its lead had left when it was created (its recorded cap).
                let cap = cp.budget_cap.and_then(|c| c.max_total_tokens);
                if cap.is_some() {
                    w.log.borrow_mut().waits.budget_capped += 1;
                }
                let cost_cap = cp.budget_cap.and_then(|c| c.max_cost_usd);
                let cost = cp.usage.cost.unwrap_or(u64::MAX);
                if b.cost.is_some() {
                    w.log.borrow_mut().waits.cost_checked += 1;
                }
                if cp.usage.total() >= b.run
                    || cp.total_usage.total() >= b.session
                    || cap.is_some_and(|cap| cp.usage.total() >= cap)
                    || b.cost.is_some_and(|max| cost >= max)
                    || cost_cap.is_some_and(|max| cost >= max)
                {
                    w.violation(format!(
                        "{}: the model was called at {} although the run had used {} of {} tokens (its conversation \
                         {} of {}, its lead's cap {cap:?}; cost {:?} of {:?}, cap {cost_cap:?}; {:?} {:?} step {}, \
                         last {:?})",
                        request.run_id,
                        w.now() - T0,
                        cp.usage.total(),
                        b.run,
                        cp.total_usage.total(),
                        b.session,
                        cp.usage.cost,
                        b.cost,
                        cp.status,
                        cp.finish_reason,
                        cp.step_index,
                        cp.messages.last().map(message_print)
                    ));
                }
            }
        }
        // A model is never called while its breaker (its process's replica's) is open: only a probe once the
        // cool-down ended, or a call while it is closed.
        if let Some(state) = self.breakers.as_ref().and_then(|b| b.state(self.id)) {
            match state {
                steadfast::core::breaker::BreakerState::Open { until_ms } => w.violation(format!(
                    "{}: {} was called at {} while its breaker was open until {}",
                    request.run_id,
                    self.id,
                    w.now() - T0,
                    until_ms - T0
                )),
                steadfast::core::breaker::BreakerState::HalfOpen { .. } => w.log.borrow_mut().waits.breaker_probes += 1,
                steadfast::core::breaker::BreakerState::Closed => {}
            }
        }
        check_wait_results(w, request.run_id, request.messages);
        check_not_orphaned(w, request.run_id, request.execution);
        // The conversation is with the agent whose model is called: its instructions are the last system message.
        if self.agent != "team" {
            let system = request.messages.iter().rev().find_map(|m| match m {
                Message::System { content } => Some(content.as_str()),
                _ => None,
            });
            if system != Some(&format!("You are {}.", self.agent)) {
                w.violation(format!(
                    "{}: {}'s model was called under instructions {system:?}",
                    request.run_id, self.agent
                ));
            }
        }
        let transfers: Vec<String> =
            request.tools.iter().filter(|t| t.name.starts_with("transfer_to_")).map(|t| t.name.clone()).collect();
        let latency = 100 + w.pick(2_500);
        w.time.sleep(latency).await;
        if w.pick(40) < 40 / self.fails_in {
            return Err(steadfast::Error::new(ErrorCode::ProviderUnavailable, "scripted 503").with_run(request.run_id));
        }
        let usage = Usage::tokens(10, 5);
        let text = |t: String| ModelResponse {
            text: t,
            tool_calls: Vec::new(),
            usage,
            stop_reason: Some("stop".into()),
            reasoning: Vec::new(),
        };
        let Some((task, turn)) = task_of(request.messages) else { return Ok(text("Understood.".into())) };
        let plan = SplitMix64::new(task.wrapping_mul(1_000_003).wrapping_add(turn as u64));
        let p = |n: u64| plan.next_u64() % n;
        if turn >= 3 || p(5) == 0 {
            return Ok(text(format!("task {task} done")));
        }
        let token = {
            let mut log = w.log.borrow_mut();
            log.tokens += 1;
            log.tokens
        };
        let n = if w.program.big && p(2) == 0 { 8 } else { 1 + p(3) as usize };
        let assistants = request.messages.iter().filter(|m| matches!(m, Message::Assistant { .. })).count();
        let calls = (0..n)
            .map(|i| {
                let mut name = match p(100) {
                    0..=18 => "read",
                    19..=36 => "pay",
                    37..=50 => "mail",
                    51..=63 => "gate",
                    64..=74 => "flaky",
                    75..=81 => "checked",
                    82..=85 => "ask",
                    86..=90 => "hook",
                    // A detached sub-agent of the lead (its result comes as a queued message).
                    91..=94 | 99 if self.agent == "lead" => "bg",
                    91..=94 => "nap",
                    // A sub-agent (two levels: the lead's team has a team of its own).
                    95..=98 if subagent_path(request.run_id).len() < TEAM_DEPTH => "team",
                    _ => "big",
                };
                // A handoff (two or more in a turn now and then: only the first is taken).
                if !transfers.is_empty() && p(8) == 0 {
                    name = &transfers[p(transfers.len() as u64) as usize];
                }
                let size = match (w.program.big, p(4)) {
                    (true, 0) => 4 * 1024 * 1024,
                    (true, _) => 1 + p(4 * 1024 * 1024),
                    (false, 0) => 256 * 1024,
                    (false, _) => p(3_000),
                };
                let id = if token % 2 == 0 { String::new() } else { format!("call_{assistants}_{i}") };
                let mut args = json!({"t": token, "i": i, "size": size});
                if name == "team" || name == "bg" {
                    args["task"] = json!(format!("task {} (delegated)", (token * 7 + i as u64) % 1_000));
                }
                ToolCall { id, name: name.into(), args, invalid: None }
            })
            .collect();
        Ok(ModelResponse {
            text: String::new(),
            tool_calls: calls,
            usage,
            stop_reason: Some("tool_calls".into()),
            reasoning: Vec::new(),
        })
    }
}

/// A child run a delete cut short left behind (its lead gone) is never executed by an execution that took its lease
/// after that delete ended. (A run made again under the lead's id whose transcript has the child's call — a fork
/// copies its source's call keys — takes the child back: it is no longer left.)
fn check_not_orphaned(w: &World, run_id: &str, execution: &str) {
    let Some(cut) = w.log.borrow().orphans.get(run_id).copied() else { return };
    let lead = subagent_parent(run_id).map(|(p, _)| p).unwrap_or_default();
    if w.read(lead).is_some_and(|cp| with_children(w, &cp.run_id, true).iter().any(|c| c == run_id)) {
        w.log.borrow_mut().orphans.remove(run_id);
        return;
    }
    let acquired = w.log.borrow().acquired.get(&(run_id.to_string(), execution.to_string())).copied();
    if acquired.is_some_and(|at| at > cut) {
        w.violation(format!(
            "{run_id}: left by its lead's delete (cut short at {}), executed again at {}",
            cut - T0,
            w.now() - T0
        ));
    }
}

/// Handoffs in a recorded state: of a turn's transfer calls, only the first may be taken (a result that is not
/// an error), and it moved the conversation (the run is with the agent of the last taken transfer, whose
/// instructions are the last system message); a run takes at most `MAX_HANDOFFS` per run segment.
fn handoff_violation(cp: &Checkpoint) -> Option<String> {
    if !subagent_path(cp.run_id.trim_end_matches(".heal")).is_empty() {
        return None;
    }
    let mut last_taken: Option<(String, bool)> = None;
    for (i, m) in cp.messages.iter().enumerate() {
        let transfers: Vec<&ToolCall> = m.tool_calls().iter().filter(|c| c.name.starts_with("transfer_to_")).collect();
        if transfers.is_empty() {
            continue;
        }
        let taken: Vec<&str> = cp.messages[i + 1..]
            .iter()
            .take_while(|m| matches!(m, Message::Tool(_)))
            .filter_map(|m| match m {
                Message::Tool(r) if r.name.starts_with("transfer_to_") && !r.is_error => Some(r.tool_call_id.as_str()),
                _ => None,
            })
            .collect();
        match taken.as_slice() {
            [] => {}
            [id] if *id == transfers[0].id => {
                let to = transfers[0].name.trim_start_matches("transfer_to_").to_string();
                // Moved once the turn had every result: a system message follows its results.
                let complete = cp.messages[i + 1..].iter().filter(|m| matches!(m, Message::Tool(_))).count()
                    >= m.tool_calls().len();
                last_taken = Some((to, complete));
            }
            _ => return Some(format!("a turn's transfers taken: {taken:?}, not only its first")),
        }
    }
    if cp.handoffs > MAX_HANDOFFS {
        return Some(format!("{} handoffs, more than maxHandoffs {MAX_HANDOFFS}", cp.handoffs));
    }
    let system = cp.messages.iter().rev().find_map(|m| match m {
        Message::System { content } => Some(content.clone()),
        _ => None,
    });
    let agent = cp.agent.clone().unwrap_or_else(|| "lead".into());
    if system.as_deref() != Some(&format!("You are {agent}.")) {
        return Some(format!("the run is with '{agent}' under instructions {system:?}"));
    }
    if let Some((to, true)) = last_taken {
        if cp.status == RunStatus::Finished && to != agent {
            return Some(format!("its last taken transfer went to '{to}', the run is with '{agent}'"));
        }
    }
    None
}

/// A wait's result in a transcript the model is handed: a timer woke and a deadline passed no earlier than their
/// time; a question's answer is one of its choices or a refusal.
fn check_wait_results(w: &World, run_id: &str, messages: &[Message]) {
    let now = w.now();
    for m in messages {
        let Message::Tool(r) = m else { continue };
        let v: Value = serde_json::from_str(&r.content).unwrap_or(Value::Null);
        let early = |at: &Value| at.as_u64().is_some_and(|at| at > now);
        match r.name.as_str() {
            "nap" if early(&v["at"]) => {
                w.violation(format!("{run_id}: {} woke at {} before its time {}", r.tool_call_id, now - T0, v["at"]))
            }
            "hook" if v["error"] == "timeout" && early(&v["deadline"]) => w.violation(format!(
                "{run_id}: {} timed out at {} before its deadline {}",
                r.tool_call_id,
                now - T0,
                v["deadline"]
            )),
            "ask" if !(r.content == "yes" || r.content == "no" || v["error"] == "declined" || r.is_error) => {
                w.violation(format!("{run_id}: {} has an answer that was not offered: {}", r.tool_call_id, r.content))
            }
            _ => {}
        }
    }
}

/// Judges a tool start against what the oracle reads at that instant, and logs it.
fn tool_started(w: &World, ctx: &steadfast::runtime::ToolContext, args: &Value, reconciled: bool) {
    let (run_id, call_id, key) = (ctx.run_id.as_str(), ctx.tool_call_id.as_str(), ctx.idempotency_key());
    let who = identity(args);
    let now = w.now();
    if let Some(cp) = w.read(run_id) {
        if has_result(&cp, call_id) {
            w.violation(format!(
                "{run_id}: {call_id} ({who}) started at {} although its result was recorded",
                now - T0
            ));
        }
        if reconciled && cp.intents.iter().any(|i| i == call_id) {
            let log = w.log.borrow();
            let last_start = log.starts.get(&who).and_then(|s| s.iter().map(|x| x.2).max());
            let asked = log
                .reconciles
                .get(&who)
                .is_some_and(|r| r.iter().any(|(t, happened)| !happened && last_start.is_none_or(|ls| *t >= ls)));
            if last_start.is_some() && !asked {
                drop(log);
                w.violation(format!(
                    "{run_id}: {call_id} ({who}) ran again at {} over a recorded intent without reconcile",
                    now - T0
                ));
            }
        }
    }
    let mut log = w.log.borrow_mut();
    log.starts.entry(who.clone()).or_default().push((run_id.to_string(), call_id.to_string(), now));
    log.key_users.entry(key.to_string()).or_default().insert(who.clone());
    log.identity_keys.entry(who).or_default().insert(ctx.call_key.clone());
}

fn tools(world: &Rc<World>, breakers: Option<Rc<steadfast::runtime::Breakers>>) -> Vec<Rc<dyn Tool>> {
    let schema = json!({"type": "object"});
    let mk = |name: &'static str| {
        let w = world.clone();
        FnTool::new(name, name, schema.clone(), move |args, ctx| {
            let w = w.clone();
            async move {
                let key = ctx.idempotency_key().to_string();
                tool_started(&w, &ctx, &args, name == "pay");
                let work = w.pick(1_500);
                w.time.sleep(work).await;
                let who = identity(&args);
                match name {
                    "pay" => {
                        *w.log.borrow_mut().paid.entry(key).or_default() += 1;
                        Ok(ToolOutput::text(format!("paid {who}")))
                    }
                    "flaky" => {
                        let t = args["t"].as_u64().unwrap_or(0);
                        let stuck = t % w.program.stuck_every == 0;
                        let first = {
                            let log = w.log.borrow();
                            log.starts.get(&who).map_or(0, |s| s.len()) <= 1
                        };
                        if stuck || first {
                            Err(ToolError::propagate(format!("flaky {who}")))
                        } else {
                            Ok(ToolOutput::text(format!("flaky ok {who}")))
                        }
                    }
                    "big" => Ok(ToolOutput::text("b".repeat(args["size"].as_u64().unwrap_or(0) as usize))),
                    // The waits: a question, an event (a deadline in two of three), a timer.
                    "ask" => Ok(ToolOutput::wait(WaitRequest::Question {
                        question: format!("ok {who}?"),
                        choices: vec!["yes".into(), "no".into()],
                    })),
                    "hook" => {
                        let t = args["t"].as_u64().unwrap_or(0);
                        w.log.borrow_mut().event_tokens.push((
                            ctx.run_id.clone(),
                            ctx.tool_call_id.clone(),
                            ctx.wait_token.clone(),
                        ));
                        let deadline = (t % 3 != 0).then(|| ctx.now + 5_000 + (t % 7) * 15_000);
                        Ok(ToolOutput::wait(WaitRequest::Event { deadline }))
                    }
                    "nap" => Ok(ToolOutput::wait(WaitRequest::Timer {
                        at: ctx.now + args["size"].as_u64().unwrap_or(0) % 90_000,
                    })),
                    other => Ok(ToolOutput::text(format!("{other} {who}"))),
                }
            }
        })
    };
    let w = world.clone();
    let pay = mk("pay").reconcile_with(move |args, key| {
        let happened = w.log.borrow().paid.contains_key(&key);
        w.log.borrow_mut().reconciles.entry(identity(&args)).or_default().push((w.now(), happened));
        async move { Ok(happened.then(|| ToolOutput::text(format!("paid {}", identity(&args))))) }
    });
    vec![
        Rc::new(mk("read")),
        Rc::new(Checked { inner: mk("checked"), world: world.clone() }),
        Rc::new(pay),
        Rc::new(mk("mail").side_effecting()),
        Rc::new(mk("gate").needs_approval(true)),
        match breakers {
            Some(breakers) => Rc::new(Hosted { inner: mk("flaky"), world: world.clone(), breakers }),
            None => Rc::new(mk("flaky")),
        },
        Rc::new(mk("big")),
        Rc::new(mk("ask")),
        Rc::new(mk("hook")),
        Rc::new(mk("nap")),
    ]
}

/// `flaky` in programs with breakers: a tool on host `flaky.example` (a webhook's), each of whose failures counts
/// toward that host's breaker (its process's replica's). It never runs while that breaker is open (only as the
/// probe once the cool-down ended, or while it is closed); a call the open breaker refused gets a
/// `CircuitOpenError` result (counted after the program: `tool calls refused`).
struct Hosted {
    inner: FnTool,
    world: Rc<World>,
    breakers: Rc<steadfast::runtime::Breakers>,
}

#[async_trait::async_trait(?Send)]
impl Tool for Hosted {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn description(&self) -> &str {
        self.inner.description()
    }
    fn input_schema(&self) -> &Value {
        self.inner.input_schema()
    }
    fn dependency(&self) -> Option<String> {
        Some("flaky.example".into())
    }
    fn dependency_down(&self, _err: &ToolError) -> bool {
        true
    }
    async fn execute(&self, args: Value, ctx: steadfast::runtime::ToolContext) -> Result<ToolOutput, ToolError> {
        match self.breakers.state("flaky.example") {
            Some(steadfast::core::breaker::BreakerState::Open { until_ms }) => self.world.violation(format!(
                "{}: {} ran at {} while the breaker of flaky.example was open until {}",
                ctx.run_id,
                ctx.tool_call_id,
                self.world.now() - T0,
                until_ms - T0
            )),
            Some(steadfast::core::breaker::BreakerState::HalfOpen { .. }) => {
                self.world.log.borrow_mut().waits.breaker_probes += 1
            }
            _ => {}
        }
        self.inner.execute(args, ctx).await
    }
}

/// A tool with an argument check of its own (as the npm package's zod and Standard Schema validators): the check
/// takes seeded time (an async validator), so executions and crashes interleave at it, and refuses one call in
/// three (by the call's token and index). A refused call must never start; it gets its one `validation` result
/// like any call (the invariants on results hold for it as for every call).
struct Checked {
    inner: FnTool,
    world: Rc<World>,
}

/// Whether `checked` refuses these arguments.
fn refused(args: &Value) -> bool {
    (args["t"].as_u64().unwrap_or(0) + args["i"].as_u64().unwrap_or(0)) % 3 == 0
}

#[async_trait::async_trait(?Send)]
impl Tool for Checked {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn description(&self) -> &str {
        self.inner.description()
    }
    fn input_schema(&self) -> &Value {
        self.inner.input_schema()
    }
    async fn check_args(&self, args: &Value) -> std::result::Result<(), String> {
        let work = self.world.pick(400);
        self.world.time.sleep(work).await;
        if refused(args) {
            Err(format!("{} is refused by its validator", identity(args)))
        } else {
            Ok(())
        }
    }
    async fn execute(&self, args: Value, ctx: steadfast::runtime::ToolContext) -> Result<ToolOutput, ToolError> {
        if refused(&args) {
            self.world.violation(format!(
                "{}: {} ({}) ran although its validator refused it",
                ctx.run_id,
                ctx.tool_call_id,
                identity(&args)
            ));
        }
        self.inner.execute(args, ctx).await
    }
}

/// A child's own object, as strict mode's Worker has one: each call a fresh process of the world (same replica)
/// that serves it through the API's child protocol (`Api::serve_child`, its body read by `read_child_answer`), the
/// call's body written and read as the Worker sends it. Counts what it served, and checks every relayed event is a
/// child run's (the call's or one below it), tagged with that run's sub-agent.
struct LoopbackHost {
    world: Rc<World>,
    replica: u8,
}

/// The lead's sinks behind a [`LoopbackHost`]: checks and counts each relayed event, then passes it on.
struct RelayCheck {
    world: Rc<World>,
    child: String,
    next: Option<Rc<dyn steadfast::runtime::EventSink>>,
}

impl steadfast::runtime::EventSink for RelayCheck {
    fn emit(&self, e: &steadfast::core::events::EventEnvelope) {
        self.world.violation(format!("{}: an event of its own came to its lead's host untagged: {e:?}", self.child));
    }
    fn relay(&self, run_id: &str, json: &str) {
        self.world.log.borrow_mut().waits.hosted_events += 1;
        let e: steadfast::core::events::EventEnvelope = match serde_json::from_str(json) {
            Ok(e) => e,
            Err(err) => {
                return self.world.violation(format!("{}: a relayed event does not read: {err}: {json}", self.child))
            }
        };
        let below = run_id == self.child || run_id.starts_with(&format!("{}.", self.child));
        let tag = e.subagent.as_ref();
        let tagged = subagent_parent(run_id).is_some_and(|(parent, name)| {
            tag.is_some_and(|t| t.parent == parent && t.name == name && t.depth as usize == subagent_path(run_id).len())
        });
        if e.run_id != run_id || !below || !tagged {
            self.world.violation(format!("{}: relayed {run_id} as {e:?}", self.child));
        }
        if let Some(next) = &self.next {
            next.relay(run_id, json);
        }
    }
}

#[async_trait(?Send)]
impl steadfast::runtime::ChildHost for LoopbackHost {
    async fn execute(
        &self,
        call: &steadfast::runtime::ChildExecution,
        relay: Option<Rc<dyn steadfast::runtime::EventSink>>,
    ) -> Result<Option<RunStatus>> {
        use futures::StreamExt;
        use steadfast::front::api::{child_call_body, parse_child_call, read_child_answer, Api};
        self.world.log.borrow_mut().waits.hosted_children += 1;
        let call = parse_child_call(&child_call_body(call)).expect("a call reads back as it was written");
        let check = RelayCheck { world: self.world.clone(), child: call.run_id.clone(), next: relay };
        let answer = Api::new(self.world.process_on(self.replica), None).serve_child(call);
        let parts = answer.live.and_then(|l| l.take()).expect("a child's answer is a live body");
        let (chunks, task) = parts.into_stream();
        let task = task.expect("without a spawner the execution comes with its answer");
        let read = read_child_answer(chunks.map(|c| Ok(c.into_bytes())), Some(Rc::new(check)));
        futures::join!(task, read).1
    }
}

impl World {
    /// A new process: a fresh agent over a fresh store handle (a new invocation on the simulator).
    fn process(self: &Rc<World>) -> Agent {
        self.process_on(0)
    }

    /// A new process on `replica` (replica 2 has the raised budget, when the program has budgets).
    fn process_on(self: &Rc<World>, replica: u8) -> Agent {
        let budget = self.program.budget.map(|b| b.on(replica));
        let n = self.processes.get() + 1;
        self.processes.set(n);
        let clock = Rc::new(self.time.clone());
        let store: Rc<dyn RunStore> = match &self.backend {
            Backend::Memory(m) => Rc::new(m.clone()),
            Backend::Journal(kv) => {
                Rc::new(JournalStore::new(kv.at(0), clock.clone(), clock.clone(), JournalOptions::default()))
            }
            Backend::Objects(objects, kv) => {
                Rc::new(ObjectStore::new(objects.clone(), kv.at(0), "", clock.clone(), clock.clone()))
            }
        };
        // The world hears which lease acquisitions were confirmed (see `World::recorded`).
        let mut spy = common::Spy::new(store);
        let w = self.clone();
        spy.on_confirm = Some(Box::new(move |lease: &steadfast::store::Lease| {
            w.log.borrow_mut().confirmed.insert((lease.run_id.clone(), lease.owner.clone()));
        }));
        let w = self.clone();
        spy.on_acquire = Some(Box::new(move |lease: &steadfast::store::Lease| {
            let now = w.now();
            w.log.borrow_mut().acquired.insert((lease.run_id.clone(), lease.owner.clone()), now);
        }));
        let w = self.clone();
        spy.fail_delete = Some(Box::new(move |run_id: &str| {
            let cutting = w.cutting.borrow();
            std::iter::successors(subagent_parent(run_id).map(|(p, _)| p), |id| subagent_parent(id).map(|(p, _)| p))
                .any(|lead| cutting.contains(lead))
        }));
        let store: Rc<dyn RunStore> = Rc::new(spy);
        let max_tool_result_bytes = if self.program.big { 4 * 1024 * 1024 } else { 256 * 1024 };
        let options = AgentOptions {
            max_steps: 6,
            tool_concurrency: self.program.concurrency,
            lease: LEASE,
            max_tool_result_bytes,
            steer_poll_ms: Some(self.program.steer_poll_ms),
            max_handoffs: MAX_HANDOFFS,
            max_total_tokens: budget.map(|b| b.run),
            max_cost_usd: budget.and_then(|b| b.cost),
            prices: checker_prices(),
            breaker: self.program.breakers.then_some(CHECK_BREAKER),
            session_budget: steadfast::core::budget::TokenLimits {
                max_total_tokens: budget.map(|b| b.session),
                ..Default::default()
            },
            on_exceeded: match budget {
                Some(CheckBudget { throw: true, .. }) => steadfast::core::budget::OnExceeded::Throw,
                _ => steadfast::core::budget::OnExceeded::Finish,
            },
            ..AgentOptions::default()
        };
        // The lead, its sub-agent `team` and that one's own `team`: the same model and tools at every level (the
        // model asks for `team` only above the bottom level).
        let level = |agent: &'static str, team: Option<steadfast::runtime::AgentBuilder>| {
            let breakers = self.program.breakers.then(|| self.breakers[replica as usize].clone());
            let model = |id, fails_in| CheckerModel {
                world: self.clone(),
                agent,
                budget,
                id,
                fails_in,
                breakers: breakers.clone(),
                replica: replica as usize,
            };
            let primary = model("checker", if self.program.fallback || self.program.breakers { 3 } else { 40 });
            let mut b =
                Agent::builder(primary).options(options.clone()).metrics(self.metrics[replica as usize].clone());
            if let Some(breakers) = &breakers {
                b = b.breakers(breakers.clone());
            }
            if self.program.fallback {
                b = b.fallback(model("checker-b", 40));
            }
            for t in tools(self, breakers.clone()) {
                b = b.tool_rc(t);
            }
            match team {
                Some(t) => b.subagent("team", "delegates a task", t),
                None => b,
            }
        };
        let mut team = None;
        for _ in 0..TEAM_DEPTH {
            team = Some(level("team", team));
        }
        // The lead hands its conversation to `desk` and back (handoffs; `desk` has the same tools, no sub-agent).
        let desk = level("desk", None).instructions("You are desk.");
        // A detached sub-agent: abandoned on its lead's delete in odd programs, deleted with it in even ones.
        let bg = level("bg", None).instructions("You are bg.");
        let detached = SubagentOptions { detached: true, abandon: self.program.seed % 2 == 1 };
        let lead = match self.program.seed % 3 {
            0 => level("lead", team).tracing(
                Rc::new(self.spans.clone()),
                steadfast::core::trace::TraceOptions { contents: self.program.seed % 2 == 0 },
            ),
            _ => level("lead", team),
        };
        let lead = match self.program.hosted() {
            true => lead.child_host(Rc::new(LoopbackHost { world: self.clone(), replica })),
            false => lead,
        };
        lead.subagent_with("bg", "works in the background", bg, detached)
            .instructions("You are lead.")
            .handoff("desk", "takes the conversation over", desk)
            .store_rc(store)
            .recovery_gate(self.gate.clone())
            .clock(clock.clone())
            .sleep(clock)
            .rng(Rc::new(SplitMix64::new(self.program.seed.wrapping_mul(7_919).wrapping_add(n))))
            .build()
            .expect("the agent builds")
    }

    fn sweep_options(&self, diagnosis: bool) -> SweepOptions {
        SweepOptions {
            interval_ms: 5_000,
            max_backoff_ms: 60_000,
            max_attempts: 3,
            retry_with_diagnosis: diagnosis,
            ceiling: self.program.gated().then_some(1),
            ..SweepOptions::default()
        }
    }
}

// --- Running a program ---------------------------------------------------------------------------------------

/// Errors an operation may end with in a correct system (refusals, failed attempts, our own crash).
fn expected(code: ErrorCode) -> bool {
    !matches!(code, ErrorCode::Internal | ErrorCode::CheckpointCorrupt | ErrorCode::StoreFailed)
}

async fn run_step(w: Rc<World>, index: usize, step: Step) {
    let agent = w.process_on(step.replica);
    let abort = AbortSignal::new();
    if let Some(ms) = step.abort_after_ms {
        let (a, t) = (abort.clone(), w.time.clone());
        w.exec.spawn(async move {
            t.sleep(ms).await;
            a.abort();
        });
    }
    let opts = || SendOptions {
        abort: Some(abort.clone()),
        crash: step.crash.map(|(after_effects, finish_in_flight)| CrashPoint { after_effects, finish_in_flight }),
        ..SendOptions::default()
    };
    let started = w.now();
    w.trace(|| {
        format!(
            "step {index} starts on replica {}: {:?} crash {:?} abort {:?}",
            step.replica, step.op, step.crash, step.abort_after_ms
        )
    });
    let mut touched: Vec<String> = Vec::new();
    let outcome: Result<()> = match &step.op {
        Op::Send { run, task } => {
            touched.push(RUNS[*run].into());
            agent.send(RUNS[*run], format!("task {task}"), opts()).await.map(|_| ())
        }
        Op::Resume { run } => {
            touched.push(RUNS[*run].into());
            let stopped = w.read(RUNS[*run]).is_some_and(|cp| cp.finish_reason == Some(FinishReason::BudgetExceeded));
            let res = agent.resume(RUNS[*run], opts()).await;
            if stopped && matches!(res, Ok(Some(_))) {
                w.log.borrow_mut().waits.budget_resumes += 1;
            }
            res.map(|_| ())
        }
        Op::ResumeChild { run } => {
            // Any unfinished detached child (of any run the program made), picked by `run`.
            let children: Vec<String> = all_ids(&w)
                .into_iter()
                .filter(|id| subagent_parent(id).is_some_and(|(_, name)| name == "bg"))
                .filter(|id| w.read(id).is_some_and(|cp| cp.status != RunStatus::Finished))
                .collect();
            match children.get(*run % children.len().max(1)) {
                None => Ok(()),
                Some(child) => {
                    touched.push(child.clone());
                    touched.extend(subagent_parent(child).map(|(lead, _)| lead.to_string()));
                    agent.resume(child, opts()).await.map(|_| ())
                }
            }
        }
        Op::Decide { pick, approve } => match agent.approvals().list().await {
            Ok(list) if !list.iter().any(|r| r.kind == WaitKind::Approval) => Ok(()),
            Ok(list) => {
                let list: Vec<_> = list.into_iter().filter(|r| r.kind == WaitKind::Approval).collect();
                let rec = &list[*pick as usize % list.len()];
                touched.push(rec.run_id.clone());
                let decision = Resolve { id: rec.id.clone(), approved: *approve, note: None, answer: None };
                agent.approvals().resolve_with(decision, opts()).await.map(|_| ())
            }
            Err(e) => Err(e),
        },
        Op::Fork { source, target, latest } => {
            let (source, target) = (RUNS[*source], RUNS[*target]);
            touched.extend([source.to_string(), target.to_string()]);
            match agent.history(source, usize::MAX).await {
                Ok(h) if h.is_empty() => Ok(()),
                Ok(h) => {
                    let step = if *latest { h[0].step } else { h[h.len() - 1].step };
                    let fork = ForkOptions { from_step: step, new_id: Some(target.into()), ..ForkOptions::default() };
                    agent.fork(source, fork).await.map(|_| ())
                }
                Err(e) => Err(e),
            }
        }
        Op::SessionSend { session, task } => match agent.session(SESSIONS[*session]) {
            Ok(s) => {
                let r = s.send(format!("task {task}"), opts()).await.map(|_| ());
                for n in 1..=8 {
                    touched.push(format!("{}.turn-{n}", SESSIONS[*session]));
                }
                r
            }
            Err(e) => Err(e),
        },
        Op::Fire => match agent.fire_schedule(&w.schedule, &opts()).await {
            ScheduleOutcome::Fired { run_id, fire_at, .. } => {
                touched.push(run_id);
                *w.log.borrow_mut().fired.entry(fire_at).or_default() += 1;
                Ok(())
            }
            ScheduleOutcome::Failed { run_id, error, .. } => {
                touched.extend(run_id);
                Err(steadfast::Error::new(error.code, error.message))
            }
            ScheduleOutcome::AlreadyFired { run_id, .. } | ScheduleOutcome::Claimed { run_id, .. } => {
                touched.push(run_id);
                Ok(())
            }
            _ => Ok(()),
        },
        Op::Deliver { delivery, task } => {
            touched.push(steadfast::runtime::delivery_run_id(DELIVERIES[*delivery]));
            agent.run_once(DELIVERIES[*delivery], format!("task {task}"), opts()).await.map(|_| ())
        }
        Op::Delete { run } => {
            // The lead's child runs, and theirs, that exist before the delete.
            let tree: Vec<String> =
                with_children(&w, RUNS[*run], false).into_iter().filter(|id| w.read(id).is_some()).collect();
            // Detached children its sub-agent abandons run on (odd programs).
            let abandoned: Vec<String> = match (w.program.seed % 2, w.read(RUNS[*run])) {
                (1, Some(cp)) => {
                    calls_of(&cp, "bg").into_iter().map(|(_, c)| c).filter(|c| w.read(c).is_some()).collect()
                }
                _ => Vec::new(),
            };
            // One delete in three dies after the lead, before its children (chosen from the program and the
            // step: the generated programs stay as they were).
            let cut = (w.program.seed + index as u64) % 3 == 0 && tree.len() > 1;
            if cut {
                w.cutting.borrow_mut().insert(RUNS[*run].into());
            }
            let r = agent.delete(RUNS[*run]).await;
            w.cutting.borrow_mut().remove(RUNS[*run]);
            w.log.borrow_mut().deletes.entry(RUNS[*run].into()).or_default().push((started, w.now()));
            touched.push(RUNS[*run].into());
            if cut && r.as_ref().is_err_and(|e| e.code == ErrorCode::Crashed) && w.read(RUNS[*run]).is_none() {
                let now = w.now();
                for child in tree.iter().filter(|id| id.as_str() != RUNS[*run] && w.read(id).is_some()) {
                    let mut log = w.log.borrow_mut();
                    log.orphans.insert(child.clone(), now);
                    log.waits.children_left += 1;
                }
            }
            if r.is_ok() {
                // Gone with their lead: none of them is left once its delete returned.
                for child in tree.iter().filter(|id| id.as_str() != RUNS[*run]) {
                    if w.read(child).is_some() {
                        w.violation(format!("{child}: left behind by the delete of its lead {}", RUNS[*run]));
                    }
                    w.log.borrow_mut().waits.children_deleted += 1;
                }
                for child in &abandoned {
                    if w.read(child).is_none() {
                        w.violation(format!("{child}: abandoned by its sub-agent, but deleted with its lead"));
                    }
                    w.log.borrow_mut().waits.bg_abandoned += 1;
                }
            }
            r
        }
        Op::Sweep { diagnosis } => sweep_crashing(&w, &agent, *diagnosis, opts().crash).await,
        Op::Consume { redeliver } => match consume(&w, &agent, *redeliver, opts().crash).await {
            Ok(run) => {
                touched.extend(run.filter(|r| !r.is_empty()));
                Ok(())
            }
            Err(e) => Err(e),
        },
        Op::Answer { pick, choice } => match agent.approvals().list().await {
            Ok(list) => {
                let asked: Vec<_> = list.into_iter().filter(|r| r.kind == WaitKind::Question).collect();
                match asked.get(*pick as usize % asked.len().max(1)) {
                    None => Ok(()),
                    Some(rec) => {
                        touched.push(rec.run_id.clone());
                        let answer = ["yes", "no"].get(*choice as usize).map(|a| json!(a));
                        let decision = Resolve { id: rec.id.clone(), approved: answer.is_some(), note: None, answer };
                        let r = agent.approvals().resolve_with(decision, opts()).await.map(|_| ());
                        if r.is_ok() {
                            w.log.borrow_mut().waits.answered += 1;
                        }
                        r
                    }
                }
            }
            Err(e) => Err(e),
        },
        Op::Event { pick, payload } => {
            let handed = w.log.borrow().event_tokens.clone();
            // The newest tokens mostly (their waits are likely still open), any of them sometimes.
            let i = match *pick as usize {
                p if p < 6 => handed.len().saturating_sub(1 + p % handed.len().clamp(1, 2)),
                p => p % handed.len().max(1),
            };
            match handed.get(i) {
                None => Ok(()),
                Some((run, call, token)) => {
                    touched.push(run.clone());
                    match agent.events().deliver_with(token, json!({"v": payload}), opts()).await {
                        Ok(d) => {
                            let first = !d.duplicate;
                            match first {
                                true => w.log.borrow_mut().waits.delivered += 1,
                                false => w.log.borrow_mut().waits.duplicates += 1,
                            }
                            if first {
                                let prior = {
                                    let mut log = w.log.borrow_mut();
                                    let prior = log.delivered.entry(token.clone()).or_default();
                                    prior.push(*payload);
                                    prior.clone()
                                };
                                if prior.len() > 1 {
                                    w.violation(format!("{run}: {call}'s token was delivered first twice ({prior:?})"));
                                }
                            }
                            // What was acknowledged is the call's result, in what the delivery answered.
                            let want = json!({"v": payload}).to_string();
                            let got = d.run.messages.iter().find_map(|m| match m {
                                Message::Tool(r) if r.tool_call_id == *call => Some(r.content.clone()),
                                _ => None,
                            });
                            // (Unless the pause still waits on others: the payload is in the wait's record until then.)
                            let waits_on_others = got.is_none()
                                && d.run.status == RunStatus::AwaitingApproval
                                && !d.run.approval_ids.is_empty();
                            if d.run.run_id == *run
                                && first
                                && !waits_on_others
                                && got.as_deref() != Some(want.as_str())
                            {
                                w.violation(format!("{run}: {call} delivered {want} but its result reads {got:?}"));
                            }
                            Ok(())
                        }
                        Err(e) if matches!(e.code, ErrorCode::WaitNotFound | ErrorCode::WaitAlreadyResolved) => {
                            w.log.borrow_mut().waits.refused += 1;
                            Ok(())
                        }
                        Err(e) => Err(e),
                    }
                }
            }
        }
        Op::Alarm { run, diagnosis } => {
            touched.push(RUNS[*run].into());
            alarm(&w, &agent, RUNS[*run], *diagnosis, opts().crash).await
        }
        Op::Steer { run, interrupt } => {
            let text = format!("steer {index}");
            touched.push(RUNS[*run].into());
            let queued = SendOptions { queue: true, interrupt: *interrupt, ..opts() };
            match agent.send(RUNS[*run], text.as_str(), queued).await {
                Ok(r) => {
                    let mut log = w.log.borrow_mut();
                    if let Some(q) = r.queued {
                        match q.applied {
                            true => log.waits.steers_applied += 1,
                            false => log.waits.steers_queued += 1,
                        }
                        let sent =
                            SteerSent { run: RUNS[*run].into(), text, started, ended: w.now(), applied: q.applied };
                        log.steers.push(sent);
                    }
                    Ok(())
                }
                Err(e) => Err(e),
            }
        }
    };
    {
        let mut log = w.log.borrow_mut();
        log.operations += 1;
    }
    w.trace(|| format!("step {index} ends: {:?}", outcome.as_ref().map_err(|e| format!("{} {}", e.code, e.message))));
    match outcome {
        Ok(()) => {}
        Err(e) if e.code == ErrorCode::Crashed => w.log.borrow_mut().crashes += 1,
        Err(e) if e.code == ErrorCode::BudgetExceeded => w.log.borrow_mut().waits.budget_errors += 1,
        Err(e) if expected(e.code) => {}
        Err(e) => w.violation(format!("step {index} {:?} failed: {} {}", step.op, e.code, e.message)),
    }
    for id in touched {
        for id in with_children(&w, &id, true) {
            w.observe(&id);
            w.observe(&format!("{id}.heal"));
        }
    }
}

/// `run_id` and the child runs of its `team` calls and its `bg` calls (those abandoned on a delete only with
/// `abandoned`), and theirs (as far as they exist).
fn with_children(w: &World, run_id: &str, abandoned: bool) -> Vec<String> {
    let mut ids = vec![run_id.to_string()];
    let mut i = 0;
    let bg = abandoned || w.program.seed % 2 == 0;
    while i < ids.len() {
        if let Some(cp) = w.read(&ids[i]) {
            ids.extend(team_calls(&cp).into_iter().map(|(_, child)| child));
            if bg {
                ids.extend(calls_of(&cp, "bg").into_iter().map(|(_, child)| child));
            }
        }
        i += 1;
    }
    ids
}

/// The `team` calls of a run: (call id, its child run's id).
fn team_calls(cp: &Checkpoint) -> Vec<(String, String)> {
    calls_of(cp, "team")
}

/// The calls of sub-agent `name` in a run: (call id, its child run's id).
fn calls_of(cp: &Checkpoint, name: &str) -> Vec<(String, String)> {
    cp.messages
        .iter()
        .flat_map(|m| m.tool_calls().iter().filter(|c| c.name == name))
        .filter_map(|c| {
            let key = cp.call_key(&c.id)?;
            Some((c.id.clone(), subagent_run_id(&cp.run_id, name, &key).ok()?))
        })
        .collect()
}

/// Whether `lead`'s call of sub-agent `name` that runs `child` has a result recorded cancelled.
fn call_cancelled(lead: &Checkpoint, name: &str, child: &str) -> bool {
    calls_of(lead, name).into_iter().filter(|(_, c)| c == child).any(|(call, _)| {
        lead.messages.iter().any(|m| {
            matches!(m, Message::Tool(r) if r.tool_call_id == call
                && r.kind == steadfast::core::transcript::ResultKind::Cancelled)
        })
    })
}

/// One sweep tick, its operations checked against the platform's limit.
async fn sweep(w: &World, agent: &Agent, diagnosis: bool) -> Result<()> {
    sweep_crashing(w, agent, diagnosis, None).await
}

/// [`sweep`], the executions it starts crashing right after their `crash`-th effect (counted across them).
async fn sweep_crashing(w: &World, agent: &Agent, diagnosis: bool, crash: Option<CrashPoint>) -> Result<()> {
    let budget = crash.map(|c| CrashBudget::new(c.after_effects, c.finish_in_flight));
    let (opts, listener) = (w.sweep_options(diagnosis), Traced(w, budget.clone()));
    let report = match w.program.fan_out {
        true => agent.sweep_fanning_out(&opts, &listener, &w.queue).await,
        false => agent.sweep(&opts, &listener).await,
    };
    if budget.is_some_and(|b| b.crashed()) {
        w.log.borrow_mut().crashes += 1;
    }
    let report = report?;
    w.trace(|| format!("sweep: {report:?}"));
    w.log.borrow_mut().waits.enqueued += report.enqueued as u64;
    let ops = report.operations + report.queue_sends;
    if ops > 1_000 {
        w.violation(format!("a sweep tick used {ops} operations (over 1,000)"));
    }
    Ok(())
}

/// The recovery gate of a program (a [`LocalGate`]), counting what it answered: slots granted, turns given.
struct CountingGate(LocalGate, Cell<u64>, Cell<u64>);

#[async_trait(?Send)]
impl RecoveryGate for CountingGate {
    async fn acquire(&self, run_id: &str, cap: u32) -> Result<Grant> {
        let grant = self.0.acquire(run_id, cap).await?;
        let counter = if grant == Grant::Granted { &self.1 } else { &self.2 };
        counter.set(counter.get() + 1);
        Ok(grant)
    }
    async fn release(&self, run_id: &str, retry_after_ms: Option<u64>) -> Result<()> {
        self.0.release(run_id, retry_after_ms).await
    }
}

/// A run's alarm (strict mode's recovery step: resume, quarantine, diagnosis fork), its executions crashing right
/// after their `crash`-th effect.
async fn alarm(w: &World, agent: &Agent, run: &str, diagnosis: bool, crash: Option<CrashPoint>) -> Result<()> {
    let budget = crash.map(|c| CrashBudget::new(c.after_effects, c.finish_in_flight));
    let listener = Traced(w, budget.clone());
    let next = agent.wake(run, &w.sweep_options(diagnosis), &listener).await;
    if budget.is_some_and(|b| b.crashed()) {
        w.log.borrow_mut().crashes += 1;
    }
    w.trace(|| format!("alarm of {run}: {next:?}"));
    next.map(|_| ())
}

/// Tells the trace what failed in a tick or an alarm; crashes its executions.
struct Traced<'a>(&'a World, Option<Rc<CrashBudget>>);

impl steadfast::runtime::SweepListener for Traced<'_> {
    fn on_error(&self, e: &steadfast::Error, run_id: Option<&str>) -> Result<()> {
        self.0.trace(|| format!("sweep error on {run_id:?}: {} {}", e.code, e.message));
        Ok(())
    }
    fn crash_budget(&self) -> Option<Rc<CrashBudget>> {
        self.1.clone()
    }
}

/// A recovery-queue consumer: the oldest message, again later if `redeliver`; its executions crash right after
/// their `crash`-th effect. A message whose run could not be read goes back to the queue (the queue's retry).
async fn consume(w: &World, agent: &Agent, redeliver: bool, crash: Option<CrashPoint>) -> Result<Option<String>> {
    struct Crashing(Option<Rc<CrashBudget>>);
    impl steadfast::runtime::SweepListener for Crashing {
        fn crash_budget(&self) -> Option<Rc<CrashBudget>> {
            self.0.clone()
        }
    }
    let Some(body) = w.queue.take(1).pop() else { return Ok(None) };
    if redeliver {
        w.queue.push(body.clone());
    }
    let budget = crash.map(|c| CrashBudget::new(c.after_effects, c.finish_in_flight));
    let r = agent.consume_recovery(&body, &w.sweep_options(false), &Crashing(budget.clone())).await;
    if budget.is_some_and(|b| b.crashed()) {
        w.log.borrow_mut().crashes += 1;
    }
    let done = match r {
        Ok(done) => done,
        Err(e) => {
            w.queue.push(body);
            return Err(e);
        }
    };
    w.trace(|| format!("consumed: {done:?}"));
    if done.error.is_some() {
        w.violation(format!("the sweep sent a message a consumer cannot read: {body}"));
    }
    let mut log = w.log.borrow_mut();
    log.waits.consumed += 1;
    match done.next {
        Some(_) => log.waits.consumer_resumes += 1,
        None => log.waits.consumer_skips += 1,
    }
    Ok(Some(done.run_id))
}

/// Every run id the program may have made.
fn all_ids(w: &World) -> BTreeSet<String> {
    let mut ids: BTreeSet<String> = w.log.borrow().known.clone();
    for r in RUNS {
        ids.insert(r.into());
        ids.insert(format!("{r}.heal"));
    }
    for s in SESSIONS {
        for n in 1..=8 {
            ids.insert(format!("{s}.turn-{n}"));
        }
    }
    for d in DELIVERIES {
        ids.insert(steadfast::runtime::delivery_run_id(d));
    }
    let tops: Vec<String> = ids.iter().cloned().collect();
    for id in tops {
        ids.extend(with_children(w, &id, true));
    }
    ids
}

struct Outcome {
    violations: Vec<String>,
    operations: u64,
    crashes: u64,
    waits: WaitCounts,
}

fn run_program(program: &Program, kind: StoreKind) -> Outcome {
    let w = World::new(program, kind);
    w.trace(|| format!("program {} on {}: {program:?}", program.seed, kind.name()));
    for (i, step) in program.steps.iter().enumerate() {
        let (w2, step) = (w.clone(), step.clone());
        let t = w.time.clone();
        w.exec.spawn(async move {
            t.sleep(step.at_ms).await;
            run_step(w2, i, step).await;
        });
    }
    w.exec.run();
    // Liveness: time moves past every lease, then sweep ticks, spaced past the longest backoff.
    for tick in 0..LIVENESS_TICKS {
        w.exec.advance(if tick == 0 { LEASE.ttl_ms + LEASE.grace_ms + 5_000 } else { 65_000 });
        let w2 = w.clone();
        let ids = all_ids(&w);
        w.exec.block_on(async move {
            let agent = w2.process();
            if let Err(e) = sweep(&w2, &agent, tick % 2 == 0).await {
                if !expected(e.code) {
                    w2.violation(format!("liveness tick {tick} failed: {} {}", e.code, e.message));
                }
            }
            // Consumers take what the tick sent (each message once; one that fails goes back for the next tick).
            for _ in 0..w2.queue.len() {
                if let Err(e) = consume(&w2, &w2.process(), false, None).await {
                    if !expected(e.code) {
                        w2.violation(format!("liveness consumer failed: {} {}", e.code, e.message));
                    }
                }
            }
            if w2.kind == StoreKind::Objects {
                // Strict mode: each run's object alarm (at least once, whenever it is due; early is harmless).
                for id in ids {
                    if let Err(e) = alarm(&w2, &w2.process(), &id, tick % 2 == 0, None).await {
                        if !expected(e.code) {
                            w2.violation(format!("alarm of {id} failed: {} {}", e.code, e.message));
                        }
                    }
                }
            }
        });
        w.exec.run();
    }
    w.trace(|| format!("listed after the program: {:?}", w.oracle.pending().now_or_never()));
    // The counters (an isolate's, per replica) say what happened: each replica's model calls are the calls its
    // processes made, and of them the retries and fallbacks are a part.
    for r in 0..3 {
        let total =
            |name: &str| -> u64 { w.metrics[r].samples().iter().filter(|s| s.name == name).map(|s| s.value).sum() };
        let (calls, made) = (total("steadfast_model_calls_total"), w.model_calls[r].get());
        let (retries, fallbacks) = (total("steadfast_model_retries_total"), total("steadfast_fallbacks_total"));
        if calls != made || retries > calls || fallbacks > calls {
            w.violation(format!(
                "replica {r}: counted {calls} model calls ({retries} retries, {fallbacks} fallbacks), made {made}"
            ));
        }
        w.log.borrow_mut().waits.metrics_checked += calls;
    }
    {
        let mut log = w.log.borrow_mut();
        log.waits.gate_granted = w.gate.1.get();
        log.waits.gate_later = w.gate.2.get();
    }
    // Traces: an execution's span ids are its own, a span hangs from a span of its own trace, a link names an
    // execution's span (whatever crashed, raced or was forked).
    let spans = w.spans.spans();
    let by_id: BTreeMap<[u8; 8], &steadfast::core::trace::Span> =
        spans.iter().map(|s| (s.context.span_id, s)).collect();
    if by_id.len() != spans.len() {
        w.violation(format!("traces: {} spans share {} span ids", spans.len(), by_id.len()));
    }
    for s in &spans {
        if let Some(parent) = s.parent.and_then(|p| by_id.get(&p)) {
            if parent.context.trace_id != s.context.trace_id {
                w.violation(format!("traces: {} hangs from {} of another trace", s.name, parent.name));
            }
        }
        for l in &s.links {
            if by_id.get(&l.span_id).is_some_and(|t| !t.name.starts_with("invoke_agent")) {
                w.violation(format!("traces: {} links to a span that is not an execution's", s.name));
            }
        }
    }
    w.log.borrow_mut().waits.traced_spans += spans.len() as u64;
    for id in all_ids(&w) {
        w.observe(&id);
        if let Some(cp) = w.read(&id) {
            // A pause counts as settled only while a person (or the outside world: an event without a deadline)
            // still has a decision to make; a deadline or a timer must have been taken up by the ticks.
            let waits_on_a_person = cp.status == RunStatus::AwaitingApproval
                && cp.approval_ids.iter().any(|id| {
                    matches!(w.oracle.get_approval(id).now_or_never(), Some(Ok(Some(r)))
                        if r.status == steadfast::core::approval::ApprovalStatus::Pending && r.due_at.is_none())
                });
            // A child a delete cut short left behind never runs again (checked as it would): it stays as it was.
            let left = w.log.borrow().orphans.contains_key(&id);
            let settled = cp.status == RunStatus::Finished
                || left
                || waits_on_a_person
                || cp.quarantined
                || cp.last_error.as_ref().is_some_and(|e| !e.retryable);
            if !settled {
                w.violation(format!(
                    "{id} is still {:?} after {LIVENESS_TICKS} sweep ticks (attempts {}, last error {:?})",
                    cp.status,
                    cp.attempts,
                    cp.last_error.as_ref().map(|e| e.code)
                ));
            }
            for m in &cp.messages {
                if let Message::Tool(r) = m {
                    match r.name.as_str() {
                        "hook" if r.content.contains("\"timeout\"") => w.log.borrow_mut().waits.timeouts += 1,
                        "nap" if r.content.contains("\"woke\"") => w.log.borrow_mut().waits.woken += 1,
                        _ if r.content.contains("\"steeredBy\"") => w.log.borrow_mut().waits.calls_stopped += 1,
                        "flaky" if r.content.starts_with("CircuitOpenError") => {
                            w.log.borrow_mut().waits.tool_refusals += 1
                        }
                        _ => {}
                    }
                }
            }
            if cp.finish_reason == Some(FinishReason::BudgetExceeded) {
                w.log.borrow_mut().waits.budget_stops += 1;
            }
            if let Some(e) = cp.last_error.as_ref().filter(|e| !expected(e.code)) {
                w.violation(format!("{id} failed with {} {}", e.code, e.message));
            }
            if id.starts_with("dlv-") && !id.ends_with(".heal") {
                let inputs = cp
                    .messages
                    .iter()
                    .filter(|m| matches!(m, Message::User { content } if content.starts_with("task ")))
                    .count();
                if inputs > 1 {
                    w.violation(format!("delivery run {id} ran its job {inputs} times"));
                }
            }
        }
    }
    check_steers(&w);
    check_subagents(&w);
    check_detached(&w);
    let mut log = w.log.borrow_mut();
    let mut found = std::mem::take(&mut log.violations);
    for (key, users) in &log.key_users {
        if users.len() > 1 {
            found.push(format!("idempotency key {key:?} was used by {} different calls: {users:?}", users.len()));
        }
    }
    for (who, keys) in &log.identity_keys {
        if keys.len() > 1 {
            found.push(format!("call {who} ran under {} different call keys: {keys:?}", keys.len()));
        }
    }
    for (fire_at, n) in &log.fired {
        if *n > 1 {
            found.push(format!("the schedule's fire at {} ran {n} times", fire_at - T0));
        }
    }
    Outcome { violations: found, operations: log.operations, crashes: log.crashes, waits: log.waits }
}

/// Every acknowledged queued message reached its run once, in the order it was sent: after the program, a run
/// that finished (not deleted since the message was sent, not healed by a diagnosis fork) holds each message
/// sent to it exactly once, and one sent after another one was acknowledged comes after it. (A run that still
/// waits on a person, or was quarantined, may hold it in its queue: its resumption applies it.)
fn check_steers(w: &World) {
    let steers = w.log.borrow().steers.clone();
    let mut order: BTreeMap<String, Vec<(SteerSent, usize)>> = BTreeMap::new();
    for s in &steers {
        let deleted = w.log.borrow().deletes.get(&s.run).is_some_and(|ds| ds.iter().any(|(_, end)| *end >= s.started));
        let healed = w.log.borrow().seen.contains_key(&format!("{}.heal", s.run));
        let Some(cp) = w.read(&s.run) else { continue };
        if deleted || healed || cp.status != RunStatus::Finished {
            continue;
        }
        let at: Vec<usize> = cp
            .messages
            .iter()
            .enumerate()
            .filter(|(_, m)| matches!(m, Message::User { content } if *content == s.text))
            .map(|(i, _)| i)
            .collect();
        match at.as_slice() {
            [i] => order.entry(s.run.clone()).or_default().push((s.clone(), *i)),
            _ => w.violation(format!(
                "{}: '{}' (sent at {}, applied by its send: {}) is in the finished run {} times",
                s.run,
                s.text,
                s.started - T0,
                s.applied,
                at.len()
            )),
        }
    }
    for (run, sent) in order {
        for (a, ia) in &sent {
            for (b, ib) in &sent {
                if a.ended < b.started && ia > ib {
                    w.violation(format!("{run}: '{}' was sent after '{}' but applied before it", b.text, a.text));
                }
            }
        }
    }
}

/// Every child's result reached its lead once, as the child ended: after the program, a `team` call's result
/// (not an error) is its finished child's final text; a lead never waits on a child that finished (a delivery
/// lost). (A lead's copy in a fork has no child of its own id: its result was recorded in the source.)
fn check_subagents(w: &World) {
    // Sub-agent calls recorded cancelled (their lead's execution aborted mid-child), and of their children the
    // ones removed since (at their next execution).
    for id in all_ids(w) {
        let Some(cp) = w.read(&id) else { continue };
        for (_, child) in calls_of(&cp, "team") {
            if call_cancelled(&cp, "team", &child) {
                let gone = w.read(&child).is_none();
                let mut log = w.log.borrow_mut();
                log.waits.children_cancelled += 1;
                log.waits.cancelled_removed += u64::from(gone);
            }
        }
    }
    // A child a delete cut short left behind is removed once its lead's absence is proof: where reads are current
    // (memory, objects) when the sweep, an alarm or a decision comes to it; on Workers KV only a day after its last
    // change (a program lasts minutes: never here).
    let left: Vec<String> = w.log.borrow().orphans.keys().cloned().collect();
    for id in left {
        if w.read(&id).is_none() {
            if matches!(w.backend, Backend::Journal(_)) {
                w.violation(format!("{id}: left by a delete cut short, removed on Workers KV within a day"));
            }
            w.log.borrow_mut().waits.orphans_removed += 1;
        }
    }
    for id in all_ids(w) {
        let Some(cp) = w.read(&id) else { continue };
        {
            let mut log = w.log.borrow_mut();
            for m in &cp.messages {
                let Message::Tool(r) = m else { continue };
                if !r.name.starts_with("transfer_to_") {
                    continue;
                }
                match (r.is_error, r.content.starts_with("STEADFAST_HANDOFF_LIMIT")) {
                    (false, _) => log.waits.handoffs += 1,
                    (true, true) => log.waits.handoff_limits += 1,
                    (true, false) => log.waits.transfers_not_taken += 1,
                }
            }
        }
        // What the run spent is what its model turns and its sub-agents' children spent.
        let mut spent = Usage::default();
        for m in &cp.messages {
            match m {
                Message::Assistant { usage: Some(u), .. } => spent.add(*u),
                Message::Tool(r) => spent.add(r.usage.unwrap_or_default()),
                _ => {}
            }
        }
        for r in &cp.held_results {
            spent.add(r.usage.unwrap_or_default());
        }
        if spent != cp.total_usage {
            w.violation(format!("{id}: its usage is {:?} but its turns and children spent {spent:?}", cp.total_usage));
        }
        // Turns a fallback answered; an agent without fallbacks records no model on its turns.
        for m in &cp.messages {
            if let Message::Assistant { model: Some(model), .. } = m {
                w.log.borrow_mut().waits.fallback_turns += 1;
                if !w.program.fallback || model != "checker-b" {
                    w.violation(format!(
                        "{id}: a turn records the model {model:?} (fallbacks: {})",
                        w.program.fallback
                    ));
                }
            }
        }
        // Every recorded usage is priced, and costs exactly its tokens.
        for (what, u) in [("run", cp.usage), ("conversation", cp.total_usage)] {
            w.log.borrow_mut().waits.costs_checked += 1;
            if u.cost != Some(checker_cost(&u)) {
                w.violation(format!("{id}: its {what} usage {u:?} does not cost its tokens' {}", checker_cost(&u)));
            }
        }
        for (call_id, child_id) in team_calls(&cp) {
            w.log.borrow_mut().waits.team_calls += 1;
            let Some(child) = w.read(&child_id) else { continue };
            // Placed in the transcript, or held until the calls before it have theirs.
            let result = cp
                .messages
                .iter()
                .find_map(|m| match m {
                    Message::Tool(r) if r.tool_call_id == call_id => Some(r),
                    _ => None,
                })
                .or_else(|| cp.held_results.iter().find(|r| r.tool_call_id == call_id));
            match result {
                Some(r) if !r.is_error => {
                    if child.status == RunStatus::Finished && r.usage != Some(child.total_usage) {
                        w.violation(format!(
                            "{id}: {call_id} counts {:?} of its child's spend, which was {:?}",
                            r.usage, child.total_usage
                        ));
                    }
                    if child.status != RunStatus::Finished {
                        w.violation(format!(
                            "{id}: {call_id} has a result but its child {child_id} is {:?}",
                            child.status
                        ));
                    } else if r.content != child.answer() {
                        w.violation(format!(
                            "{id}: {call_id} reads {:?}, its child {child_id} ended with {:?}",
                            r.content,
                            child.answer()
                        ));
                    } else {
                        w.log.borrow_mut().waits.team_results += 1;
                    }
                }
                Some(_) => {}
                None if cp.status == RunStatus::AwaitingApproval => match child.status {
                    // Delivered when the call's wait record holds the result (the pause may still wait on others).
                    RunStatus::Finished if !wait_resolved(w, &cp, &call_id) => w.violation(format!(
                        "{id} still waits on {call_id} although its child {child_id} finished (a delivery was lost; \
                         its pause: {:?})",
                        cp.approval_ids
                            .iter()
                            .map(|a| match w.oracle.get_approval(a).now_or_never() {
                                Some(Ok(Some(r))) => format!("{a}: {} {:?} {:?}", r.tool_call.id, r.kind, r.status),
                                other => format!("{a}: {other:?}"),
                            })
                            .collect::<Vec<_>>()
                    )),
                    RunStatus::AwaitingApproval => w.log.borrow_mut().waits.team_pauses += 1,
                    _ => {}
                },
                None => {}
            }
        }
    }
}

/// Every detached child's result reached its lead once: after the program, a `bg` call's result (not an
/// error) names its child; a finished child's final text is in its lead's transcript exactly once when the lead
/// has finished since (unless the lead was deleted or healed after the call), at most once otherwise (a lead
/// that still waits on a person, or was quarantined, applies it when it resumes).
fn check_detached(w: &World) {
    for id in all_ids(w) {
        let Some(cp) = w.read(&id) else { continue };
        for (call_id, child_id) in calls_of(&cp, "bg") {
            let placed = cp.messages.iter().find_map(|m| match m {
                Message::Tool(r) if r.tool_call_id == call_id => Some(r.clone()),
                _ => None,
            });
            let result = placed.or_else(|| cp.held_results.iter().find(|r| r.tool_call_id == call_id).cloned());
            let Some(r) = result.filter(|r| !r.is_error) else { continue };
            let started: Option<Value> = serde_json::from_str(&r.content).ok();
            let named = started.as_ref().and_then(|v| v["started"].as_str()).unwrap_or_default();
            if named != child_id {
                // A fork's (or a session's next turn's) copy of another run's call names that run's child: its
                // result belongs there.
                if !subagent_parent(named).is_some_and(|(lead, name)| name == "bg" && lead != id) {
                    w.violation(format!("{id}: {call_id} answered {:?}, not its child {child_id}", r.content));
                }
                continue;
            }
            w.log.borrow_mut().waits.bg_calls += 1;
            let Some(child) = w.read(&child_id).filter(|c| c.status == RunStatus::Finished) else { continue };
            let head = format!("Sub-agent 'bg' finished (run {child_id}):\n");
            let got: Vec<&str> = cp
                .messages
                .iter()
                .filter_map(|m| match m {
                    Message::User { content } => content.strip_prefix(&head),
                    _ => None,
                })
                .collect();
            let moved_on =
                w.log.borrow().seen.contains_key(&format!("{id}.heal")) || w.log.borrow().deletes.contains_key(&id);
            match got.as_slice() {
                [text] if *text == child.answer() => w.log.borrow_mut().waits.bg_delivered += 1,
                [text] => {
                    w.violation(format!("{id}: {child_id}'s result reads {text:?}, it ended with {:?}", child.answer()))
                }
                [] if cp.status != RunStatus::Finished || cp.quarantined || moved_on => {}
                [] => w.violation(format!("{id} finished without the result of its detached child {child_id}")),
                _ => w.violation(format!("{id}: {child_id}'s result was applied {} times", got.len())),
            }
        }
    }
}

/// Whether `cp`'s pause holds a resolution for call `call_id` (its wait record has an outcome).
fn wait_resolved(w: &World, cp: &Checkpoint, call_id: &str) -> bool {
    cp.approval_ids.iter().any(|id| {
        matches!(w.oracle.get_approval(id).now_or_never(), Some(Ok(Some(r)))
            if r.tool_call.id == call_id && r.outcome.is_some())
    })
}

// --- The test -------------------------------------------------------------------------------------------------

fn stores() -> Vec<StoreKind> {
    match std::env::var("STEADFAST_STORE").as_deref() {
        Ok("memory") => vec![StoreKind::Memory],
        Ok("journal") => vec![StoreKind::Journal],
        Ok("objects") => vec![StoreKind::Objects],
        _ => vec![StoreKind::Memory, StoreKind::Journal, StoreKind::Objects],
    }
}

/// Removes steps (and crash points) while the program still shows a violation on `kind`.
fn shrink(program: &Program, kind: StoreKind) -> Program {
    let mut best = program.clone();
    let fails = |p: &Program| {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| !run_program(p, kind).violations.is_empty()))
            .unwrap_or(true)
    };
    let mut changed = true;
    while changed {
        changed = false;
        for i in (0..best.steps.len()).rev() {
            let mut p = best.clone();
            p.steps.remove(i);
            if !p.steps.is_empty() && fails(&p) {
                best = p;
                changed = true;
            }
        }
        for i in 0..best.steps.len() {
            if best.steps[i].crash.is_some() || best.steps[i].abort_after_ms.is_some() {
                let mut p = best.clone();
                p.steps[i].crash = None;
                p.steps[i].abort_after_ms = None;
                if fails(&p) {
                    best = p;
                    changed = true;
                }
            }
        }
    }
    best
}

/// Programs (seeds) beyond the default range that once found a bug: they stay in every run. 3767, 8770, 8771,
/// 10440: a delete racing a lease renewal resurrected a half-deleted KV journal; 5286: a stale index entry's drop
/// removed the entry a new execution had just written; 1103, 1115: a resolution that died after recording its
/// decision left a paused run no one would resume (within the default range, kept here if it moves); 4679, 5591: a
/// detached child missing from the sweep's listing never ran.
const FOUND_BUGS: [u64; 9] = [1103, 1115, 3767, 4679, 5286, 5591, 8770, 8771, 10440];

#[test]
fn model_checked_programs_keep_every_guarantee_on_every_store() {
    let n = common::seeds::cases(2_000);
    let seeds: Vec<u64> = match common::seeds::only_seed() {
        Some(s) => vec![s],
        None => {
            let mut seeds: Vec<u64> = (1..=n).collect();
            seeds.extend(FOUND_BUGS.iter().filter(|s| **s > n));
            seeds
        }
    };
    let kinds = stores();
    let threads = std::thread::available_parallelism().map(|p| p.get()).unwrap_or(1).clamp(1, 8);
    let chunks: Vec<Vec<u64>> =
        (0..threads).map(|t| seeds.iter().copied().skip(t).step_by(threads).collect()).collect();
    let handles: Vec<_> = chunks
        .into_iter()
        .map(|chunk| {
            let kinds = kinds.clone();
            std::thread::spawn(move || {
                let (mut ops, mut crashes, mut failing, mut waits) = (0u64, 0u64, Vec::new(), WaitCounts::default());
                for seed in chunk {
                    let program = Program::generate(seed);
                    for &kind in &kinds {
                        let out =
                            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_program(&program, kind)));
                        match out {
                            Ok(o) => {
                                ops += o.operations;
                                crashes += o.crashes;
                                waits.add(&o.waits);
                                if !o.violations.is_empty() {
                                    failing.push((seed, kind, o.violations));
                                }
                            }
                            Err(_) => failing.push((seed, kind, vec!["the program panicked".into()])),
                        }
                    }
                }
                (ops, crashes, failing, waits)
            })
        })
        .collect();
    let (mut ops, mut crashes, mut failing, mut waits) = (0, 0, Vec::new(), WaitCounts::default());
    for h in handles {
        let (o, c, f, wc) = h.join().expect("checker thread");
        ops += o;
        crashes += c;
        failing.extend(f);
        waits.add(&wc);
    }
    failing.sort_by_key(|f| f.0);
    let violations: usize = failing.iter().map(|f| f.2.len()).sum();
    println!(
        "model-checked programs: {}, operations: {ops}, crash points: {crashes}, stores: {}, violations: {violations}",
        seeds.len(),
        kinds.len()
    );
    let WaitCounts {
        answered,
        delivered,
        duplicates,
        refused,
        timeouts,
        woken,
        steers_queued,
        steers_applied,
        calls_stopped,
        team_calls,
        team_results,
        team_pauses,
        children_deleted,
        handoffs,
        transfers_not_taken,
        handoff_limits,
        bg_calls,
        bg_delivered,
        bg_abandoned,
        children_left,
        budget_checked,
        budget_capped,
        budget_stops,
        budget_resumes,
        budget_errors,
        cost_checked,
        costs_checked,
        fallback_turns,
        breaker_probes,
        tool_refusals,
        metrics_checked,
        storage_checked,
        enqueued,
        consumed,
        consumer_resumes,
        consumer_skips,
        gate_granted,
        gate_later,
        traced_spans,
        hosted_children,
        hosted_events,
        orphans_removed,
        children_cancelled,
        cancelled_removed,
    } = waits;
    println!(
        "waits: questions answered {answered}, events delivered {delivered} (duplicates {duplicates}, tokens \
         refused {refused}), deadlines {timeouts}, timers woken {woken}"
    );
    println!(
        "steering: messages queued for a running execution {steers_queued}, applied by their own send \
         {steers_applied}, calls stopped by an interrupting message {calls_stopped}"
    );
    println!(
        "sub-agents: calls {team_calls}, results read from a finished child {team_results}, leads paused on a \
         paused child {team_pauses}, children deleted with their lead {children_deleted}, children a delete cut \
         short left (never executed again) {children_left}, of those removed since (their lead's absence proof) \
         {orphans_removed}; calls cancelled by an abort {children_cancelled} (their child's model never called \
         after, the child removed since {cancelled_removed})"
    );
    println!(
        "detached sub-agent: calls answered started {bg_calls}, results applied by their lead {bg_delivered}, \
         children abandoned by a lead's delete {bg_abandoned}"
    );
    println!(
        "handoffs: transfers taken {handoffs}, not taken (not the first of their turn) {transfers_not_taken}, \
         refused at maxHandoffs {handoff_limits}"
    );
    println!(
        "budgets: model calls checked against the budget in force {budget_checked} (of children capped by their \
         lead {budget_capped}), runs stopped on their budget \
         {budget_stops}, resumed in place with a raised budget {budget_resumes}, calls failed with \
         STEADFAST_BUDGET_EXCEEDED {budget_errors}"
    );
    println!(
        "cost: model calls checked against maxCostUsd {cost_checked}, recorded usages whose cost was its tokens' \
         {costs_checked}"
    );
    println!("fallbacks: recorded turns a fallback model answered {fallback_turns}");
    println!(
        "breakers: model and tool calls that were a half-open breaker's probe {breaker_probes}, tool calls refused by \
         an open breaker {tool_refusals}"
    );
    println!("metrics: model calls counted, each replica's equal to the calls it made {metrics_checked}");
    println!("storage: recorded storage usages checked (priced, never less later) {storage_checked}");
    println!(
        "fan-out: runs sent to the recovery queue {enqueued}, messages consumed {consumed} (left their run with \
         a next look {consumer_resumes}, settled {consumer_skips})"
    );
    println!("gate: slots granted to alarms and consumers {gate_granted}, turned away until their turn {gate_later}");
    println!("traces: spans exported by the traced programs, nesting and links checked {traced_spans}");
    println!(
        "child hosts: child executions served as in their own object {hosted_children}, their events relayed \
         (each tagged with its run's sub-agent) {hosted_events}"
    );
    // Violations by kind (numbers and names taken out), with an example of each.
    let mut kinds_seen: BTreeMap<String, (usize, String)> = BTreeMap::new();
    for (seed, kind, vs) in &failing {
        for v in vs {
            let shape: String = v
                .split_whitespace()
                .filter(|w| !w.chars().any(|c| c.is_ascii_digit()) && !w.contains('"'))
                .take(8)
                .collect::<Vec<_>>()
                .join(" ");
            let e = kinds_seen.entry(shape).or_insert((0, format!("seed {seed}, {}: {v}", kind.name())));
            e.0 += 1;
        }
    }
    let mut by_count: Vec<_> = kinds_seen.into_iter().collect();
    by_count.sort_by(|a, b| b.1 .0.cmp(&a.1 .0));
    for (_, (count, example)) in by_count.iter().take(12) {
        println!("  {count} × {example}");
    }
    for (seed, kind, vs) in failing.iter().take(6) {
        for v in vs.iter().take(4) {
            println!("  violation (seed {seed}, {}): {v}", kind.name());
        }
        println!("  reproduce: STEADFAST_STORE={} {}", kind.name(), common::seeds::repro(*seed, ""));
    }
    if let Some((seed, kind, _)) = failing.first() {
        let shrunk = shrink(&Program::generate(*seed), *kind);
        println!("  shrunk program (seed {seed}, {}): {:#?}", kind.name(), shrunk.steps);
    }
    assert_eq!(violations, 0, "violations (see above)");
    if seeds.len() > 100 {
        // The generator exercises every way a wait resolves (a change that stops it fails here).
        for (what, n) in [
            ("answers", answered),
            ("deliveries", delivered),
            ("duplicates", duplicates),
            ("refusals", refused),
            ("deadlines", timeouts),
            ("timers", woken),
            ("queued messages", steers_queued),
            ("messages applied by their send", steers_applied),
            ("stopped calls", calls_stopped),
            ("sub-agent calls", team_calls),
            ("sub-agent results", team_results),
            ("leads paused on a child", team_pauses),
            ("children deleted with their lead", children_deleted),
            ("children left by a delete cut short", children_left),
            ("handoffs", handoffs),
            ("transfers not taken", transfers_not_taken),
            ("handoffs refused at the limit", handoff_limits),
            ("detached calls", bg_calls),
            ("detached results applied", bg_delivered),
            ("detached children abandoned", bg_abandoned),
            ("model calls checked against a budget", budget_checked),
            ("child model calls checked against their lead's cap", budget_capped),
            ("budget stops", budget_stops),
            ("resumes with a raised budget", budget_resumes),
            ("budget errors", budget_errors),
            ("model calls checked against a cost limit", cost_checked),
            ("recorded costs checked", costs_checked),
            ("turns a fallback answered", fallback_turns),
            ("breaker probes", breaker_probes),
            ("tool calls refused by an open breaker", tool_refusals),
            ("model calls counted", metrics_checked),
            ("recorded storage usages", storage_checked),
            ("runs sent to the recovery queue", enqueued),
            ("consumed messages that left a next look", consumer_resumes),
            ("consumed messages that left their run settled", consumer_skips),
            ("gate slots granted", gate_granted),
            ("gate turns given", gate_later),
            ("child executions through a host", hosted_children),
            ("sub-agent calls cancelled by an abort", children_cancelled),
            ("relayed child events", hosted_events),
        ] {
            assert!(n > 0, "no {what} in {} programs", seeds.len());
        }
    }
    assert!(seeds.len() as u64 >= n.min(2_000) || common::seeds::only_seed().is_some(), "at least 2,000 programs");
    assert!(ops > seeds.len() as u64 * 4 && (crashes > 0 || seeds.len() < 50), "programs do something: {ops} ops");
}
