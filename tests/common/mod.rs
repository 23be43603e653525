//! Shared test fixtures: a simulated-time environment, counting tools, agent construction.
#![allow(dead_code)]

use serde_json::{json, Value};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use steadfast::runtime::{
    Agent, AgentOptions, FnTool, ManualClock, ManualSleep, Model, SplitMix64, Tool, ToolContext, ToolError, ToolOutput,
};
use steadfast::store::{MemoryStore, RunStore};

/// Simulated time + a shared store: each `agent()` call is a new "process" over the same store.
#[derive(Clone)]
pub struct Env {
    pub clock: ManualClock,
    pub sleep: ManualSleep,
    pub store: Rc<dyn RunStore>,
    pub memory: Option<MemoryStore>,
    pub seed: Rc<RefCell<u64>>,
}

impl Env {
    pub fn new() -> Env {
        let clock = ManualClock::new(1_700_000_000_000);
        let memory = MemoryStore::new();
        Env {
            sleep: ManualSleep::new(clock.clone()),
            clock,
            store: Rc::new(memory.clone()),
            memory: Some(memory),
            seed: Rc::new(RefCell::new(1)),
        }
    }

    /// The journal store over a one-location Workers-KV simulator.
    pub fn journal_sim() -> Env {
        let clock = ManualClock::new(1_700_000_000_000);
        let kv = steadfast::store::sim::SimKv::new(Rc::new(clock.clone()), Default::default());
        Env::journal_over(kv, clock)
    }

    /// The journal store (default options) over `kv`, on `clock`: for tests that reach into the KV themselves.
    pub fn journal_over<K: steadfast::store::kv::KvBackend + Clone + 'static>(kv: K, clock: ManualClock) -> Env {
        let store = steadfast::store::JournalStore::new(
            kv,
            Rc::new(clock.clone()),
            Rc::new(ManualSleep::new(clock.clone())),
            steadfast::store::JournalOptions::default(),
        );
        Env::with_store(Rc::new(store), clock)
    }

    /// Strict mode's store: run objects in this process (`LocalObjects`), the index in a `MemoryKv`.
    pub fn objects() -> Env {
        let clock = ManualClock::new(1_700_000_000_000);
        let store = steadfast::store::object::ObjectStore::new(
            steadfast::store::object::LocalObjects::default(),
            steadfast::store::MemoryKv::new(),
            "",
            Rc::new(clock.clone()),
            Rc::new(ManualSleep::new(clock.clone())),
        );
        Env::with_store(Rc::new(store), clock)
    }

    pub fn with_store(store: Rc<dyn RunStore>, clock: ManualClock) -> Env {
        Env { sleep: ManualSleep::new(clock.clone()), clock, store, memory: None, seed: Rc::new(RefCell::new(1)) }
    }

    /// A new agent ("process") with default options.
    pub fn agent(&self, model: impl Model + 'static, tools: Vec<Rc<dyn Tool>>) -> Agent {
        self.agent_with(model, tools, AgentOptions::default(), "")
    }

    pub fn agent_with(
        &self,
        model: impl Model + 'static,
        tools: Vec<Rc<dyn Tool>>,
        options: AgentOptions,
        instructions: &str,
    ) -> Agent {
        let seed = {
            let mut s = self.seed.borrow_mut();
            *s += 1;
            *s
        };
        let mut b = Agent::builder(model)
            .store_rc(self.store.clone())
            .clock(Rc::new(self.clock.clone()))
            .sleep(Rc::new(self.sleep.clone()))
            .rng(Rc::new(SplitMix64::new(seed)))
            .options(options)
            .instructions(instructions);
        for t in tools {
            b = b.tool_rc(t);
        }
        b.build().expect("agent builds")
    }

    /// Moves time past any lease a dead process left behind.
    pub fn past_leases(&self) {
        self.clock.advance(61_000);
    }
}

/// Counts executions per tool and call id, and the idempotency keys tools saw.
#[derive(Clone, Default)]
pub struct Counters(pub Rc<RefCell<BTreeMap<String, u32>>>, pub Rc<RefCell<Vec<(String, String, Option<String>)>>>);

impl Counters {
    pub fn hit(&self, key: &str) -> u32 {
        let mut m = self.0.borrow_mut();
        let n = m.entry(key.to_string()).or_insert(0);
        *n += 1;
        *n
    }
    pub fn get(&self, key: &str) -> u32 {
        self.0.borrow().get(key).copied().unwrap_or(0)
    }
    pub fn seen(&self, tool: &str, ctx: &ToolContext) {
        self.1.borrow_mut().push((tool.to_string(), ctx.tool_call_id.clone(), ctx.approval_id.clone()));
    }
    pub fn keys(&self) -> Vec<(String, String, Option<String>)> {
        self.1.borrow().clone()
    }
}

pub fn object_schema() -> Value {
    json!({"type": "object"})
}

/// A tool that counts its executions (by name and by call id) and returns `"<name> done <n>"`.
pub fn counting_tool(name: &str, counters: &Counters) -> Rc<dyn Tool> {
    let c = counters.clone();
    let n = name.to_string();
    Rc::new(FnTool::new(name, format!("{name} something"), object_schema(), move |_args, ctx| {
        let c = c.clone();
        let n = n.clone();
        async move {
            c.seen(&n, &ctx);
            c.hit(&format!("call:{}", ctx.tool_call_id));
            let k = c.hit(&n);
            Ok(ToolOutput::text(format!("{n} done {k}")))
        }
    }))
}

/// Like `counting_tool`, gated: every call needs approval.
pub fn gated_tool(name: &str, counters: &Counters) -> Rc<dyn Tool> {
    let c = counters.clone();
    let n = name.to_string();
    Rc::new(
        FnTool::new(name, format!("{name} (needs approval)"), object_schema(), move |_args, ctx| {
            let c = c.clone();
            let n = n.clone();
            async move {
                c.seen(&n, &ctx);
                c.hit(&format!("call:{}", ctx.tool_call_id));
                let k = c.hit(&n);
                Ok(ToolOutput::text(format!("{n} done {k}")))
            }
        })
        .needs_approval(true),
    )
}

/// A tool that always fails (recoverably).
pub fn failing_tool(name: &str, counters: &Counters) -> Rc<dyn Tool> {
    let c = counters.clone();
    let n = name.to_string();
    Rc::new(FnTool::new(name, "always fails", object_schema(), move |_args, _ctx| {
        let c = c.clone();
        let n = n.clone();
        async move {
            c.hit(&n);
            Err::<ToolOutput, _>(ToolError::typed("FileNotFoundError", "no such file: sonfig.py"))
        }
    }))
}

/// The three stores the runtime's guarantee tests run on: memory, the journal store on the KV simulator,
/// strict mode's run objects.
pub fn stores() -> Vec<(&'static str, fn() -> Env)> {
    vec![("memory", Env::new), ("journal", Env::journal_sim), ("objects", Env::objects)]
}

/// A builder of an agent around `model` over the environment's store, clock and timer, with a seeded `Rng`.
pub fn builder(env: &Env, model: steadfast::runtime::MockModel, seed: u64) -> steadfast::runtime::AgentBuilder {
    steadfast::runtime::Agent::builder(model)
        .store_rc(env.store.clone())
        .clock(Rc::new(env.clock.clone()))
        .sleep(Rc::new(env.sleep.clone()))
        .rng(Rc::new(steadfast::runtime::SplitMix64::new(seed)))
}

pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    futures::executor::block_on(f)
}

pub mod healing;
pub mod seed_layout;
pub mod seeds;

/// Send options whose events go to a [`VecSink`], and that sink.
pub fn listening() -> (steadfast::runtime::SendOptions, steadfast::runtime::VecSink) {
    let sink = steadfast::runtime::VecSink::new();
    (steadfast::runtime::SendOptions { events: Some(Rc::new(sink.clone())), ..Default::default() }, sink)
}

/// The `text.delta` events a sink received, as `(attempt, text)`, in order.
pub fn text_deltas(sink: &steadfast::runtime::VecSink) -> Vec<(u32, String)> {
    sink.events()
        .iter()
        .filter_map(|e| match &e.event {
            steadfast::core::events::Event::TextDelta { attempt, text, .. } => Some((*attempt, text.clone())),
            _ => None,
        })
        .collect()
}

/// A model turn as the mock model's answer records it: its text, no calls, the mock's usage (10 in, 5 out, at the
/// mock model's price: 0).
pub fn answered(text: &str) -> steadfast::core::transcript::Message {
    steadfast::core::transcript::Message::Assistant {
        content: text.into(),
        tool_calls: Vec::new(),
        reasoning: Vec::new(),
        usage: Some(steadfast::core::transcript::Usage {
            cost: Some(0),
            ..steadfast::core::transcript::Usage::tokens(10, 5)
        }),
        model: None,
    }
}

/// The messages without the usage their model turns recorded (as a client may keep a transcript).
pub fn without_usage(messages: &[steadfast::core::transcript::Message]) -> Vec<steadfast::core::transcript::Message> {
    use steadfast::core::transcript::Message;
    messages
        .iter()
        .map(|m| match m {
            Message::Assistant { content, tool_calls, reasoning, model, .. } => Message::Assistant {
                content: content.clone(),
                tool_calls: tool_calls.clone(),
                reasoning: reasoning.clone(),
                usage: None,
                model: model.clone(),
            },
            m => m.clone(),
        })
        .collect()
}

#[allow(unused_imports)]
pub use steadfast::runtime::yield_now;

/// One way of damaging a stored value: `unparseable` ones (cut, emptied, not the JSON written there) must
/// never read as a state; the others (a field of another JSON type, a number at u64's edge) may read as one
/// the store cannot tell from the truth, but must not panic anything either.
pub fn damage(raw: &str, rng: &steadfast::runtime::SplitMix64) -> (String, bool) {
    use steadfast::runtime::Rng;
    let pick = |n: u64| rng.next_u64() % n;
    match pick(7) {
        0 => (String::new(), true),
        1 => (
            raw[..raw.char_indices().map(|(i, _)| i).nth(pick(raw.len().max(1) as u64) as usize).unwrap_or(0)]
                .to_string(),
            true,
        ),
        2 => (["null", "[]", "42", "\"x\"", "true", "{\"", "\u{0}"][pick(7) as usize].to_string(), true),
        3 => ((0..1 + pick(40)).map(|_| (b'!' + pick(90) as u8) as char).collect(), true),
        _ => {
            let Ok(mut v) = serde_json::from_str::<serde_json::Value>(raw) else { return (String::new(), true) };
            // Every field's path, then one of them changed.
            fn paths(v: &serde_json::Value, at: Vec<String>, out: &mut Vec<Vec<String>>) {
                if let serde_json::Value::Object(m) = v {
                    for (k, x) in m {
                        let mut p = at.clone();
                        p.push(k.clone());
                        out.push(p.clone());
                        paths(x, p, out);
                    }
                }
            }
            let mut all = Vec::new();
            paths(&v, Vec::new(), &mut all);
            if all.is_empty() {
                return ("{}".into(), true);
            }
            let path = &all[pick(all.len() as u64) as usize];
            let mut x = &mut v;
            for k in path {
                x = x.get_mut(k).unwrap();
            }
            *x = match (&*x, pick(4)) {
                (serde_json::Value::Number(_), 0) => json!(u64::MAX),
                (serde_json::Value::Number(_), 1) => json!(-1),
                (serde_json::Value::Number(_), _) => json!("7"),
                (serde_json::Value::String(_), 0) => json!(7),
                (serde_json::Value::String(_), _) => json!(["x"]),
                (serde_json::Value::Bool(_), _) => json!("true"),
                (serde_json::Value::Array(_), _) => json!({"x": 1}),
                (serde_json::Value::Object(_), _) => json!([1]),
                (serde_json::Value::Null, _) => json!({"x": [1]}),
            };
            (v.to_string(), false)
        }
    }
}

/// After one stored value was damaged ([`damage`]): every read and write path a process takes on the runs of
/// `before` (each with the state it had before the damage) — load, history, the approvals and the resolution of
/// `approval`, a resume of `"mid"`, a continuation of `"fin"`. None may fail with `STEADFAST_INTERNAL`, and a
/// load after damage to a value that no longer parses (`broken`) gives the state from `before` or none.
pub fn every_path_after_damage(
    a: &Agent,
    before: &[(&str, Option<steadfast::Checkpoint>)],
    broken: bool,
    approval: Option<&str>,
    case: &str,
) {
    // A failure is an `Error`, so it carries a code by construction; it must not be an internal one.
    let coded =
        |op: &str, e: &steadfast::Error| assert_ne!(e.code, steadfast::ErrorCode::Internal, "{case}: {op}: {e}");
    for (id, was) in before {
        match block_on(a.load(id)) {
            Ok(now) if broken && now.is_some() => assert_eq!(&now, was, "{case}: {id} read as another state"),
            Ok(_) => {}
            Err(e) => coded("load", &e),
        }
        if let Err(e) = block_on(a.history(id, 10)) {
            coded("history", &e);
        }
    }
    if let Err(e) = block_on(a.approvals().list()) {
        coded("approvals", &e);
    }
    if let Some(id) = approval {
        let decision = steadfast::runtime::Resolve { id: id.to_string(), approved: true, note: None, answer: None };
        if let Err(e) = block_on(a.approvals().resolve(decision)) {
            coded("resolve", &e);
        }
    }
    if let Err(e) = block_on(a.resume("mid", steadfast::SendOptions::default())) {
        coded("resume", &e);
    }
    if let Err(e) = block_on(a.send("fin", "and order 8", steadfast::SendOptions::default())) {
        coded("send", &e);
    }
}

/// Each of `runs` deleted and started again under its id by a new process (`agent`): it finishes, with a valid
/// transcript, whatever damage it had.
pub fn each_run_starts_again(agent: impl Fn() -> Agent, runs: &[&str], case: &str) {
    for id in runs {
        block_on(agent().delete(id)).unwrap_or_else(|e| panic!("{case}: delete {id}: {e}"));
        let again = block_on(agent().send(id, "charge order 9", steadfast::SendOptions::default()))
            .unwrap_or_else(|e| panic!("{case}: {id} started again: {e}"));
        assert_eq!(again.status, steadfast::RunStatus::Finished, "{case}: {id}");
        let valid = steadfast::core::transcript::validate_transcript(&again.messages);
        assert!(valid.is_ok(), "{case}: {id}: {valid:?}");
    }
}

/// A store that forwards every call to `inner` and lets a test see two moments of it: right after a load
/// answered (`after_load(run id)` may return a step to run there, another process's say, before the caller goes
/// on), and after a lease acquisition was confirmed (`on_confirm`).
pub struct Spy {
    pub inner: Rc<dyn RunStore>,
    pub after_load: Option<Box<dyn Fn(&str) -> Option<steadfast::runtime::LocalFuture<'static, ()>>>>,
    pub on_confirm: Option<Box<dyn Fn(&steadfast::store::Lease)>>,
    /// Hears each lease acquired.
    pub on_acquire: Option<Box<dyn Fn(&steadfast::store::Lease)>>,
    /// A delete of a run for which this says `true` fails (`STEADFAST_CRASHED`) without deleting anything: the
    /// process died there.
    pub fail_delete: Option<Box<dyn Fn(&str) -> bool>>,
}

impl Spy {
    pub fn new(inner: Rc<dyn RunStore>) -> Spy {
        Spy { inner, after_load: None, on_confirm: None, on_acquire: None, fail_delete: None }
    }
}

#[async_trait::async_trait(?Send)]
impl RunStore for Spy {
    async fn load(&self, run_id: &str) -> steadfast::Result<Option<steadfast::Checkpoint>> {
        let r = self.inner.load(run_id).await;
        if let Some(step) = self.after_load.as_ref().and_then(|f| f(run_id)) {
            step.await;
        }
        r
    }
    async fn acquire_lease(
        &self,
        run_id: &str,
        owner: &str,
        now_ms: u64,
        opts: &steadfast::store::LeaseOptions,
    ) -> steadfast::Result<steadfast::store::Lease> {
        let r = self.inner.acquire_lease(run_id, owner, now_ms, opts).await;
        if let (Ok(lease), Some(f)) = (&r, &self.on_acquire) {
            f(lease);
        }
        r
    }
    async fn confirm_lease(&self, lease: &steadfast::store::Lease) -> steadfast::Result<()> {
        let r = self.inner.confirm_lease(lease).await;
        if let (Ok(()), Some(f)) = (&r, &self.on_confirm) {
            f(lease);
        }
        r
    }
    async fn renew_lease(
        &self,
        lease: &steadfast::store::Lease,
        now_ms: u64,
        opts: &steadfast::store::LeaseOptions,
    ) -> steadfast::Result<steadfast::store::Lease> {
        self.inner.renew_lease(lease, now_ms, opts).await
    }
    async fn release_lease(&self, lease: &steadfast::store::Lease) -> steadfast::Result<()> {
        self.inner.release_lease(lease).await
    }
    async fn commit(
        &self,
        lease: &steadfast::store::Lease,
        entry: &steadfast::core::checkpoint::JournalEntry,
        state: &steadfast::Checkpoint,
    ) -> steadfast::Result<()> {
        self.inner.commit(lease, entry, state).await
    }
    async fn delete(&self, run_id: &str) -> steadfast::Result<()> {
        if self.fail_delete.as_ref().is_some_and(|f| f(run_id)) {
            return Err(steadfast::Error::new(steadfast::ErrorCode::Crashed, format!("died deleting {run_id}")));
        }
        self.inner.delete(run_id).await
    }
    async fn history(&self, run_id: &str, limit: usize) -> steadfast::Result<Vec<steadfast::store::HistoryEntry>> {
        self.inner.history(run_id, limit).await
    }
    async fn pending(&self) -> steadfast::Result<Vec<steadfast::store::PendingRun>> {
        self.inner.pending().await
    }
    async fn pending_page(
        &self,
        cursor: Option<&str>,
        limit: usize,
    ) -> steadfast::Result<steadfast::store::PendingPage> {
        self.inner.pending_page(cursor, limit).await
    }
    async fn check_pending(&self, runs: &[steadfast::store::PendingRun]) -> steadfast::Result<Vec<bool>> {
        self.inner.check_pending(runs).await
    }
    async fn put_approval(&self, record: &steadfast::core::approval::ApprovalRecord) -> steadfast::Result<()> {
        self.inner.put_approval(record).await
    }
    async fn get_approval(&self, id: &str) -> steadfast::Result<Option<steadfast::core::approval::ApprovalRecord>> {
        self.inner.get_approval(id).await
    }
    async fn list_approvals(&self) -> steadfast::Result<Vec<steadfast::core::approval::ApprovalRecord>> {
        self.inner.list_approvals().await
    }
    async fn delete_approval(&self, id: &str) -> steadfast::Result<()> {
        self.inner.delete_approval(id).await
    }
    async fn put_due(&self, due: &steadfast::store::DueWait) -> steadfast::Result<()> {
        self.inner.put_due(due).await
    }
    async fn list_due(&self, until: u64, limit: usize) -> steadfast::Result<Vec<steadfast::store::DueWait>> {
        self.inner.list_due(until, limit).await
    }
    async fn delete_due(&self, due: &steadfast::store::DueWait) -> steadfast::Result<()> {
        self.inner.delete_due(due).await
    }
    async fn put_queued(&self, msg: &steadfast::store::QueuedMessage) -> steadfast::Result<()> {
        self.inner.put_queued(msg).await
    }
    async fn list_queued(&self, run_id: &str) -> steadfast::Result<Vec<steadfast::store::QueuedMessage>> {
        self.inner.list_queued(run_id).await
    }
    async fn delete_queued(&self, msg: &steadfast::store::QueuedMessage) -> steadfast::Result<()> {
        self.inner.delete_queued(msg).await
    }
    async fn get_state(&self, name: &str) -> steadfast::Result<Option<String>> {
        self.inner.get_state(name).await
    }
    async fn put_state(&self, name: &str, value: &str) -> steadfast::Result<()> {
        self.inner.put_state(name, value).await
    }
    fn counters(&self) -> steadfast::store::StoreCounters {
        self.inner.counters()
    }
    fn reads_current(&self) -> bool {
        self.inner.reads_current()
    }
}

/// `GET /runs/{id}` through the HTTP API over `agent` (token `t`): the status and the JSON body.
pub fn get_run(agent: &steadfast::runtime::Agent, run_id: &str) -> (u16, serde_json::Value) {
    let api = steadfast::front::api::Api::new(agent.clone(), Some("t".into()));
    let req = steadfast::front::api::ApiRequest {
        method: "GET".into(),
        path: format!("/runs/{run_id}"),
        headers: vec![("authorization".into(), "Bearer t".into())],
        ..Default::default()
    };
    let res = block_on(api.handle(req));
    (res.status, serde_json::from_str(&res.body).unwrap_or_default())
}

/// One case of a crash-after-every-effect test: `team(env, 1)` sends `input` to `run` and the process dies right
/// after its effect number `after` (`finish_in_flight`: tools in flight finish, their results lost); then a new
/// process, `team(env, 2)`, runs `ticks` recovery sweeps, each past the dead one's leases. `false` when effect
/// `after` was past the last one (the send ended with a finish reason: the caller stops counting), `true` when it
/// crashed and recovery ran.
pub fn crash_then_sweep(
    env: &Env,
    team: impl Fn(&Env, u64) -> steadfast::runtime::AgentBuilder,
    (run, input): (&str, &str),
    after: usize,
    finish_in_flight: bool,
    ticks: usize,
) -> bool {
    use steadfast::runtime::{CrashPoint, NoListener, SendOptions};
    let a = team(env, 1).build().unwrap();
    let crash = Some(CrashPoint { after_effects: after, finish_in_flight });
    let first = block_on(a.send(run, input, SendOptions { crash, ..SendOptions::default() }));
    if matches!(&first, Ok(r) if r.finish_reason.is_some()) {
        return false;
    }
    env.past_leases();
    let b = team(env, 2).build().unwrap();
    for _ in 0..ticks {
        // Ignored: a tick's report; what it recovered is read from the store.
        let _ = block_on(b.sweep(&Default::default(), &NoListener));
        env.past_leases();
    }
    true
}

/// The child run of `lead`'s first call of the sub-agent `tool` (the lead's run id is `lead.run_id`).
pub fn child_of(
    env: &Env,
    lead: &steadfast::core::checkpoint::Checkpoint,
    tool: &str,
) -> steadfast::core::checkpoint::Checkpoint {
    let call = lead.messages.iter().flat_map(|m| m.tool_calls().to_vec()).find(|c| c.name == tool).expect("the call");
    let key = lead.call_key(&call.id).expect("its key");
    let id = steadfast::core::ids::subagent_run_id(&lead.run_id, tool, &key).expect("a child id");
    block_on(env.store.load(&id)).unwrap().expect("the child run")
}
