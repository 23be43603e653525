//! The HTTP API, natively: every route's happy path, a table of bad requests (no 5xx, KV unchanged),
//! auth, SSE, empty id segments, and the order in which [`serve`] checks a request (token, then body, then
//! configuration and agent) over generated requests.

mod common;

use async_trait::async_trait;
use common::*;
use futures::{FutureExt, StreamExt};
use serde_json::{json, Value};
use std::rc::Rc;
use steadfast::core::error::{Error, ErrorCode, Result};
use steadfast::core::machine::ModelResponse;
use steadfast::front::api::{serve, Api, ApiRequest, ApiResponse, Host, MAX_BODY_BYTES};
use steadfast::runtime::{Agent, MockModel, MockTurn, Model, ModelRequest, Rng, SplitMix64};
use steadfast::store::{JournalOptions, JournalStore, MemoryKv};

const TOKEN: &str = "s3cret-token";

struct Fixture {
    api: Api,
    kv: MemoryKv,
    counters: Counters,
}

/// A simulated-time environment over the journal store on `kv`.
fn journal_env(kv: MemoryKv) -> (Env, MemoryKv) {
    let clock = steadfast::runtime::ManualClock::new(1_700_000_000_000);
    let store = JournalStore::new(
        kv.clone(),
        Rc::new(clock.clone()),
        Rc::new(steadfast::runtime::ManualSleep::new(clock.clone())),
        JournalOptions::default(),
    );
    (Env::with_store(Rc::new(store), clock), kv)
}

fn fixture() -> Fixture {
    let (env, kv) = journal_env(MemoryKv::new());
    let counters = Counters::default();
    let model = MockModel::by_turn(vec![
        MockTurn::func(|req| {
            let refund = req.messages.iter().any(
                |m| matches!(m, steadfast::core::transcript::Message::User { content } if content.contains("refund")),
            );
            if refund {
                MockTurn::tools([("refund", json!({"order": 7}))])
            } else {
                MockTurn::tools([("charge", json!({"order": 7}))])
            }
        }),
        MockTurn::text("Done."),
    ]);
    let agent = env.agent(model, vec![counting_tool("charge", &counters), gated_tool("refund", &counters)]);
    Fixture { api: Api::new(agent, Some(TOKEN.into())), kv, counters }
}

/// Like [`fixture`], with a model for conversations of any length: after a tool result it answers "Done.";
/// to a user message about a refund it calls `refund`, about an order `charge`, else it answers "Noted.".
fn session_fixture() -> Fixture {
    use steadfast::core::transcript::Message;
    let f = fixture();
    let turn = MockTurn::func(|req| match req.messages.last() {
        Some(Message::User { content }) if content.contains("refund") => {
            MockTurn::tools([("refund", json!({"order": 7}))])
        }
        Some(Message::User { content }) if content.contains("order") => {
            MockTurn::tools([("charge", json!({"order": 7}))])
        }
        Some(Message::User { .. }) => MockTurn::text("Noted."),
        _ => MockTurn::text("Done."),
    });
    let (env, _) = journal_env(f.kv.clone());
    let model = MockModel::by_turn(vec![turn; 40]);
    let agent = env.agent(model, vec![counting_tool("charge", &f.counters), gated_tool("refund", &f.counters)]);
    Fixture { api: Api::new(agent, Some(TOKEN.into())), ..f }
}

fn req(method: &str, path: &str, body: &str) -> ApiRequest {
    let (path, query) = match path.split_once('?') {
        Some((p, q)) => {
            (p, q.split('&').filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect())
        }
        None => (path, vec![]),
    };
    ApiRequest {
        method: method.into(),
        path: path.into(),
        query,
        headers: vec![("authorization".into(), format!("Bearer {TOKEN}"))],
        body: body.as_bytes().to_vec(),
    }
}

fn call(f: &Fixture, r: ApiRequest) -> (u16, Value) {
    let ApiResponse { status, body, .. } = block_on(f.api.handle(r));
    (status, serde_json::from_str(&body).unwrap_or(Value::String(body)))
}

fn snapshot(kv: &MemoryKv) -> Vec<(String, Option<String>)> {
    kv.keys().into_iter().map(|k| (k.clone(), kv.raw(&k))).collect()
}

#[test]
fn every_route_happy_path() {
    let f = fixture();
    let (s, v) = call(&f, ApiRequest { method: "GET".into(), path: "/health".into(), ..Default::default() });
    assert_eq!((s, v["ok"].clone()), (200, json!(true)), "health needs no token");

    let (s, v) = call(&f, req("POST", "/runs/order-7", r#"{"input": "Charge order 7"}"#));
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["status"], "finished");
    assert_eq!(v["text"], "Done.");
    assert_eq!(f.counters.get("charge"), 1);

    let (s, v) = call(&f, req("GET", "/runs/order-7", ""));
    assert_eq!(s, 200);
    assert_eq!(v["status"], "finished");
    assert!(v["fingerprint"]["hash"].is_string());
    assert_eq!(v["messages"].as_array().unwrap().len(), 4);

    let (s, v) = call(&f, req("GET", "/runs/order-7/history?limit=2", ""));
    assert_eq!(s, 200);
    assert_eq!(v.as_array().unwrap().len(), 2);

    let (s, v) =
        call(&f, req("POST", "/runs/order-7/fork", r#"{"fromStep": 1, "patch": {"appendInput": "and again"}}"#));
    assert_eq!(s, 201, "{v}");
    assert_eq!(v["runId"], "order-7.fork-1");
    let (s, v) = call(&f, req("POST", "/runs/order-7.fork-1/resume", ""));
    assert_eq!(s, 200, "{v}");
    let (s, v) = call(&f, req("GET", "/compare/order-7/order-7.fork-1", ""));
    assert_eq!(s, 200);
    assert!(v.get("divergedAt").is_some(), "{v}");

    // Approval flow.
    let (s, v) = call(&f, req("POST", "/runs/refund-1", r#"{"input": "refund order 7"}"#));
    assert_eq!((s, v["status"].clone()), (200, json!("awaiting-approval")));
    let approval = v["approvalId"].as_str().unwrap().to_string();
    let (s, v) = call(&f, req("GET", "/approvals", ""));
    assert_eq!((s, v.as_array().unwrap().len()), (200, 1));
    let (s, v) = call(&f, req("GET", "/runs?status=awaiting-approval", ""));
    assert_eq!((s, v["runs"][0]["runId"].clone()), (200, json!("refund-1")));
    let (s, v) = call(&f, req("POST", &format!("/approvals/{approval}"), r#"{"approved": true, "note": "ok"}"#));
    assert_eq!((s, v["status"].clone()), (200, json!("finished")), "{v}");
    assert_eq!(f.counters.get("refund"), 1);

    // Deliveries run once; every outcome names the run (the npm package's runOnce answers the same shape).
    let keys = |v: &Value| {
        v.as_object().map(|o| o.keys().map(String::as_str).collect::<Vec<_>>().join(",")).unwrap_or_default()
    };
    let (s, v) = call(&f, req("POST", "/deliveries/evt-1", r#"{"input": "Charge order 8"}"#));
    assert_eq!((s, v["outcome"].clone(), v["runId"].clone()), (200, json!("ran"), json!("dlv-evt-1")), "{v}");
    assert_eq!((keys(&v), v["result"]["runId"].clone()), ("outcome,result,runId".to_string(), json!("dlv-evt-1")));
    let (s, v) = call(&f, req("POST", "/deliveries/evt-1", r#"{"input": "Charge order 8"}"#));
    assert_eq!((s, v["outcome"].clone(), v["runId"].clone()), (200, json!("acknowledged"), json!("dlv-evt-1")));
    assert_eq!((keys(&v), v["result"]["text"].clone()), ("outcome,result,runId".to_string(), json!("Done.")));
    let (s, v) = call(&f, req("POST", "/deliveries/evt-2", r#"{"input": "refund order 7"}"#));
    assert_eq!((s, v["outcome"].clone()), (200, json!("ran")), "{v}");
    let (s, v) = call(&f, req("POST", "/deliveries/evt-2", r#"{"input": "refund order 7"}"#));
    assert_eq!((s, v["outcome"].clone(), v["runId"].clone()), (200, json!("awaiting-approval"), json!("dlv-evt-2")));
    assert_eq!(keys(&v), "approvalId,outcome,runId", "{v}");
    assert!(v["approvalId"].as_str().is_some_and(|a| a.starts_with("ap")), "{v}");

    let (s, _) = call(&f, req("DELETE", "/runs/order-7", ""));
    assert_eq!(s, 200);
    let (s, v) = call(&f, req("GET", "/runs/order-7", ""));
    assert_eq!((s, v["error"]["code"].clone()), (404, json!("STEADFAST_CHECKPOINT_NOT_FOUND")));
    let (s, v) = call(&f, req("GET", "/runs", ""));
    let unfinished: Vec<&str> = v["runs"].as_array().unwrap().iter().filter_map(|r| r["runId"].as_str()).collect();
    assert_eq!((s, unfinished), (200, vec!["dlv-evt-2"]), "only the delivery waiting on a person is unfinished");
}

#[test]
fn bad_requests_get_coded_4xx_and_change_nothing() {
    let f = fixture();
    // Something stored first, so "unchanged" means something.
    assert_eq!(call(&f, req("POST", "/runs/keep", r#"{"input": "refund order 7"}"#)).0, 200);
    let huge = format!(r#"{{"input": "{}"}}"#, "x".repeat(MAX_BODY_BYTES));
    let no_token = ApiRequest { method: "GET".into(), path: "/runs".into(), ..Default::default() };
    let wrong_token =
        ApiRequest { headers: vec![("authorization".into(), "Bearer nope".into())], ..req("GET", "/runs", "") };
    // An assistant message whose reasoning is nested 100 levels deep: readable as a body, not as a journal entry.
    let mut deep = json!("thought");
    for _ in 0..100 {
        deep = json!([deep]);
    }
    let deep_reasoning = json!({"input": [
        {"role": "user", "content": "earlier"},
        {"role": "assistant", "content": "answer", "reasoning": [deep]},
        {"role": "user", "content": "go on"},
    ]})
    .to_string();
    let cases: Vec<(&str, ApiRequest, u16, &str)> = vec![
        ("malformed JSON", req("POST", "/runs/a", "{input:"), 400, "STEADFAST_INVALID_INPUT"),
        ("deep reasoning in the input", req("POST", "/runs/a", &deep_reasoning), 400, "STEADFAST_INVALID_INPUT"),
        ("wrong type", req("POST", "/runs/a", r#"{"input": 42}"#), 400, "STEADFAST_INVALID_INPUT"),
        ("unknown field", req("POST", "/runs/a", r#"{"inputs": "x"}"#), 400, "STEADFAST_INVALID_INPUT"),
        (
            "tool message as input",
            req(
                "POST",
                "/runs/a",
                r#"{"input": [{"role":"tool","toolCallId":"x","name":"t","content":"c","kind":"execution"}]}"#,
            ),
            400,
            "STEADFAST_INVALID_INPUT",
        ),
        ("empty input for a new run", req("POST", "/runs/a", r#"{"input": ""}"#), 400, "STEADFAST_INVALID_INPUT"),
        ("huge body", req("POST", "/runs/a", &huge), 413, "STEADFAST_PAYLOAD_TOO_LARGE"),
        ("bad id", req("POST", "/runs/.bad", r#"{"input": "x"}"#), 400, "STEADFAST_SESSION_ID_INVALID"),
        ("reserved id", req("POST", "/runs/x.turn-1", r#"{"input": "x"}"#), 400, "STEADFAST_SESSION_ID_INVALID"),
        (
            "unknown approval",
            req("POST", "/approvals/apr_nope", r#"{"approved": true}"#),
            404,
            "STEADFAST_APPROVAL_NOT_FOUND",
        ),
        ("approval without decision", req("POST", "/approvals/apr_nope", r#"{}"#), 400, "STEADFAST_INVALID_INPUT"),
        (
            "awaiting approval",
            req("POST", "/runs/keep", r#"{"input": "more"}"#),
            409,
            "STEADFAST_SESSION_AWAITING_APPROVAL",
        ),
        (
            "fork of unknown step",
            req("POST", "/runs/keep/fork", r#"{"fromStep": 9}"#),
            404,
            "STEADFAST_CHECKPOINT_NOT_FOUND",
        ),
        (
            "fork onto existing id",
            req("POST", "/runs/keep/fork", r#"{"fromStep": 1, "newId": "keep"}"#),
            409,
            "STEADFAST_SESSION_EXISTS",
        ),
        ("bad status filter", req("GET", "/runs?status=done", ""), 400, "STEADFAST_INVALID_INPUT"),
        ("bad history limit", req("GET", "/runs/keep/history?limit=lots", ""), 400, "STEADFAST_INVALID_INPUT"),
        ("unknown route", req("GET", "/nope", ""), 404, "STEADFAST_ROUTE_NOT_FOUND"),
        ("wrong method", req("PUT", "/runs/keep", ""), 405, "STEADFAST_METHOD_NOT_ALLOWED"),
        ("no token", no_token, 401, "STEADFAST_UNAUTHORIZED"),
        ("wrong token", wrong_token, 401, "STEADFAST_UNAUTHORIZED"),
    ];
    for (label, r, status, code) in cases {
        let before = snapshot(&f.kv);
        let (s, v) = call(&f, r);
        assert_eq!(s, status, "{label}: {v}");
        assert_eq!(v["error"]["code"], code, "{label}: {v}");
        assert!(s < 500, "{label}");
        assert_eq!(snapshot(&f.kv), before, "{label}: KV changed");
    }
    let (_, v) = call(&f, req("POST", "/runs/keep", r#"{"input": "more"}"#));
    assert!(v["error"]["approvalId"].is_string(), "the 409 names the approval: {v}");
}

/// serde reads a struct from a JSON array too (fields by position): `["Charge order 7"]` would start a run and
/// `[true]` approve a call. A body is a JSON object or it is refused, on every route that takes one.
#[test]
fn a_body_that_is_not_a_json_object_is_refused_and_changes_nothing() {
    let f = fixture();
    let (_, v) = call(&f, req("POST", "/runs/keep", r#"{"input": "refund order 7"}"#));
    let approval = v["approvalId"].as_str().unwrap().to_string();
    let cases = [
        ("POST", "/runs/a".to_string(), r#"["Charge order 7"]"#),
        ("POST", "/runs/a".to_string(), "[]"),
        ("POST", "/runs/a".to_string(), r#""Charge order 7""#),
        ("POST", format!("/approvals/{approval}"), "[true]"),
        ("POST", format!("/approvals/{approval}"), "[true, \"ok\"]"),
        ("POST", "/runs/keep/fork".to_string(), "[1]"),
        ("POST", "/deliveries/d-1".to_string(), r#"["Charge order 7"]"#),
        ("POST", "/runs/keep/resume".to_string(), "[]"),
    ];
    for (method, path, body) in cases {
        let before = snapshot(&f.kv);
        let (s, v) = call(&f, req(method, &path, body));
        assert_eq!((s, v["error"]["code"].clone()), (400, json!("STEADFAST_INVALID_INPUT")), "{path} {body}: {v}");
        assert!(v["error"]["message"].as_str().unwrap().contains("JSON object"), "{path} {body}: {v}");
        assert_eq!(snapshot(&f.kv), before, "{path} {body}: KV changed");
    }
    assert_eq!((f.counters.get("charge"), f.counters.get("refund")), (0, 0));
}

#[test]
fn no_token_configured_fails_closed_with_instructions() {
    let f = fixture();
    let api = Api::new(f.api.agent().clone(), None);
    let r = block_on(api.handle(req("GET", "/runs", "")));
    assert_eq!(r.status, 503);
    assert!(
        r.body.contains("STEADFAST_AUTH_NOT_CONFIGURED") && r.body.contains("wrangler secret put STEADFAST_TOKEN"),
        "{}",
        r.body
    );
    let health =
        block_on(api.handle(ApiRequest { method: "GET".into(), path: "/health".into(), ..Default::default() }));
    assert_eq!(health.status, 200);
}

/// A model held before its first answer until the test opens its gate (a model still thinking).
struct GatedModel {
    inner: MockModel,
    gate: std::cell::RefCell<Option<futures::channel::oneshot::Receiver<()>>>,
}

#[async_trait(?Send)]
impl Model for GatedModel {
    fn id(&self) -> &str {
        "gated"
    }

    async fn generate(&self, request: ModelRequest<'_>) -> Result<ModelResponse> {
        let gate = self.gate.borrow_mut().take();
        if let Some(gate) = gate {
            // Ignored: a gate dropped open is an open gate.
            let _ = gate.await;
        }
        self.inner.generate(request).await
    }
}

fn sse_req(id: &str) -> ApiRequest {
    let mut r = req("POST", &format!("/runs/{id}"), r#"{"input": "Charge order 7"}"#);
    r.headers.push(("accept".into(), "text/event-stream".into()));
    r
}

/// The events of SSE text (heartbeat comments and the id-only blocks of journal positions skipped; an event
/// block carries no `id:`).
fn sse_events(text: &str) -> Vec<Value> {
    text.split("\n\n")
        .filter(|b| !b.trim().is_empty() && !b.starts_with(':') && !b.starts_with("id: "))
        .map(|b| {
            assert!(!b.lines().any(|l| l.starts_with("id:")), "an event block has no id: {b}");
            let data = b.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
            serde_json::from_str(data).unwrap()
        })
        .collect()
}

#[test]
fn sse_answers_each_event_while_the_run_executes_with_heartbeats_when_idle() {
    let clock = steadfast::runtime::ManualClock::new(1_700_000_000_000);
    let env = Env::with_store(Rc::new(steadfast::store::MemoryStore::new()), clock);
    let counters = Counters::default();
    let (open, gate) = futures::channel::oneshot::channel();
    let model = GatedModel {
        inner: MockModel::by_turn(vec![MockTurn::tools([("charge", json!({"order": 7}))]), MockTurn::text("Done.")]),
        gate: std::cell::RefCell::new(Some(gate)),
    };
    let api = Api::new(env.agent(model, vec![counting_tool("charge", &counters)]), Some(TOKEN.into()));
    // The answer comes while the model is still held: the run has started, not ended.
    let resp = block_on(api.handle(sse_req("live-1")));
    assert_eq!(resp.status, 200);
    assert!(resp.headers.iter().any(|(k, v)| k == "content-type" && v == "text/event-stream"));
    let (mut chunks, task) = resp.live.clone().expect("a live body").take().expect("taken once").into_stream();
    assert!(resp.live.as_ref().unwrap().take().is_none(), "a live body is taken once");
    let mut task = task.expect("the rest of the run, for the shell to run detached");
    let mut seen = String::new();
    while let Some(Some(chunk)) = chunks.next().now_or_never() {
        seen.push_str(&chunk);
    }
    let early = sse_events(&seen);
    assert_eq!(early.first().unwrap()["type"], "run.start");
    assert!(early.iter().all(|e| e["type"] != "run.done" && e["type"] != "tool.done"), "{seen}");
    assert!(task.as_mut().now_or_never().is_none(), "the run waits on its model");
    // Idle: a heartbeat comment after SSE_HEARTBEAT_MS, and nothing else.
    assert_eq!(block_on(chunks.next()).unwrap(), ": heartbeat\n\n");
    assert!(env.sleep.slept().contains(&steadfast::front::api::SSE_HEARTBEAT_MS), "{:?}", env.sleep.slept());
    assert_eq!(counters.get("charge"), 0);
    open.send(()).unwrap();
    let ((), rest) = block_on(futures::future::join(task, chunks.collect::<Vec<String>>()));
    seen.push_str(&rest.concat());
    let events = sse_events(&seen);
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["seq"], i as u64, "gapless seq");
        assert_eq!(e["v"], 1);
    }
    assert_eq!(events.last().unwrap()["type"], "run.done");
    assert!(events.iter().any(|e| e["type"] == "tool.done"));
    assert_eq!(counters.get("charge"), 1);
}

/// Wherever the client leaves a live answer, what it read is a gapless prefix of the run's events, and the
/// run goes on to its end without it (each drop point of a complete run's events).
#[test]
fn sse_client_leaving_at_any_event_leaves_the_run_to_finish() {
    let whole = block_on(block_on(fixture().api.handle(sse_req("leave"))).collected());
    let all = sse_events(&whole.body);
    assert_eq!(all.last().unwrap()["type"], "run.done", "{}", whole.body);
    for drop_at in 0..=all.len() {
        let f = fixture();
        let resp = block_on(f.api.handle(sse_req("leave")));
        let (mut chunks, task) = resp.live.expect("live").take().unwrap().into_stream();
        let mut task = task.map(|t| t.fuse());
        let mut read = Vec::new();
        while read.len() < drop_at {
            match chunks.next().now_or_never() {
                // Heartbeats and the id-only blocks of journal positions are not events.
                Some(Some(c)) if c.starts_with(':') || c.starts_with("id: ") => {}
                Some(Some(c)) => read.push(c),
                Some(None) => break,
                // Nothing yet: the run moves on (the shell's detached task).
                None => {
                    if let Some(t) = task.as_mut() {
                        if t.now_or_never().is_some() {
                            task = None;
                        }
                    }
                }
            }
        }
        drop(chunks);
        if let Some(t) = task {
            block_on(t);
        }
        let got = sse_events(&read.concat());
        assert_eq!(got, all[..drop_at].to_vec(), "drop at {drop_at}: a gapless prefix");
        let (status, run) = call(&f, req("GET", "/runs/leave", ""));
        assert_eq!(status, 200, "drop at {drop_at}: {run}");
        assert_eq!(run["status"], "finished", "drop at {drop_at}: the run ended without its client: {run}");
        assert_eq!(f.counters.get("charge"), 1, "drop at {drop_at}");
    }
}

/// A platform shell for [`serve`] that records what it was asked to do: body chunks read, APIs built (a
/// broken configuration when it has no agent), conformance runs.
struct FakeHost {
    /// The body, handed out in chunks of `chunk` bytes; `endless` repeats it for ever.
    body: Vec<u8>,
    chunk: usize,
    endless: bool,
    offset: usize,
    chunks_read: usize,
    bytes_read: usize,
    discarded: bool,
    builds: usize,
    agent: Option<Agent>,
    conformance_route: bool,
    conformance_runs: usize,
    /// The process's breakers, as `GET /health` shows them.
    breakers: Option<Rc<steadfast::runtime::Breakers>>,
}

impl FakeHost {
    fn new(agent: Option<Agent>, body: &[u8]) -> FakeHost {
        FakeHost {
            body: body.to_vec(),
            chunk: 4096,
            endless: false,
            offset: 0,
            chunks_read: 0,
            bytes_read: 0,
            discarded: false,
            builds: 0,
            agent,
            conformance_route: false,
            conformance_runs: 0,
            breakers: None,
        }
    }
}

#[async_trait(?Send)]
impl Host for FakeHost {
    async fn body_chunk(&mut self) -> Result<Option<Vec<u8>>> {
        if self.endless && self.offset >= self.body.len() {
            self.offset = 0;
        }
        if self.offset >= self.body.len() {
            return Ok(None);
        }
        let end = (self.offset + self.chunk).min(self.body.len());
        let c = self.body[self.offset..end].to_vec();
        self.offset = end;
        self.chunks_read += 1;
        self.bytes_read += c.len();
        Ok(Some(c))
    }

    fn discard_body(&mut self) {
        assert_eq!(self.chunks_read, 0, "a body is discarded only before any of it is read");
        self.discarded = true;
    }

    async fn api(&mut self, token: Option<String>) -> Result<Api> {
        self.builds += 1;
        match &self.agent {
            Some(a) => Ok(Api::new(a.clone(), token)),
            None => Err(Error::new(ErrorCode::ConfigInvalid, "STEADFAST_CONFIG is not valid JSON (broken on purpose)")),
        }
    }

    fn conformance_route(&self) -> bool {
        self.conformance_route
    }

    fn breakers(&self) -> String {
        self.breakers.as_ref().map(|b| b.json()).unwrap_or_default()
    }

    async fn conformance(&mut self) -> Result<String> {
        self.conformance_runs += 1;
        Ok("store conformance: ok".into())
    }
}

fn head(method: &str, path: &str, headers: Vec<(String, String)>) -> ApiRequest {
    ApiRequest { method: method.into(), path: path.into(), headers, ..ApiRequest::default() }
}

fn code_of(r: &ApiResponse) -> String {
    serde_json::from_str::<Value>(&r.body)
        .ok()
        .and_then(|v| v["error"]["code"].as_str().map(String::from))
        .unwrap_or_default()
}

fn pick<'a, T>(rng: &SplitMix64, items: &'a [T]) -> &'a T {
    &items[(rng.next_u64() % items.len() as u64) as usize]
}

/// Generated requests that do not carry the right token (none, another scheme, a wrong or nearly-right token,
/// the token in another case), with invalid JSON or oversized bodies, on every route, against a host whose
/// configuration is broken: every one is 401 (503 when no token is configured), and not one body chunk is
/// read and no agent is built.
#[test]
fn unauthenticated_requests_never_read_the_body_or_build_the_agent() {
    let rng = SplitMix64::new(0x05ee_da11);
    let paths = [
        "/runs",
        "/runs/a",
        "/runs//resume",
        "/runs/a/resume",
        "/runs/a/history",
        "/runs/a/fork",
        "/compare/a/b",
        "/approvals",
        "/sweep",
        "/approvals/apr_1",
        "/deliveries/d1",
        "/demo/counts",
        "/__conformance",
        "/nope",
        "/",
    ];
    let methods = ["POST", "GET", "PUT", "DELETE", "PATCH"];
    let near = format!("{}x", &TOKEN[..TOKEN.len() - 1]);
    let auths: Vec<Option<String>> = vec![
        None,
        Some(String::new()),
        Some(format!("Basic {TOKEN}")),
        Some(format!("Bearer{TOKEN}")),
        Some("Bearer nope".into()),
        Some(format!("bearer {near}")),
        Some(format!("BEARER {}", TOKEN.to_ascii_uppercase())),
        Some(format!("Bearer {TOKEN}{TOKEN}")),
        Some(TOKEN.to_string()),
    ];
    let bodies: [&[u8]; 4] = [b"{not json", b"{\"input\": 42}", b"\xff\xfe", b""];
    let n = 600;
    for i in 0..n {
        let method = *pick(&rng, &methods);
        let path = *pick(&rng, &paths);
        let mut headers = Vec::new();
        if let Some(a) = pick(&rng, &auths) {
            headers.push(("authorization".to_string(), a.clone()));
        }
        let oversized = rng.next_u64().is_multiple_of(3);
        let body: Vec<u8> = if oversized { vec![b'x'; MAX_BODY_BYTES + 10] } else { pick(&rng, &bodies).to_vec() };
        if rng.next_u64().is_multiple_of(2) {
            headers.push(("content-length".into(), body.len().to_string()));
        }
        let no_token_configured = rng.next_u64().is_multiple_of(4);
        let mut host = FakeHost::new(None, &body);
        host.endless = oversized;
        host.conformance_route = rng.next_u64().is_multiple_of(2);
        let token = if no_token_configured { None } else { Some(TOKEN.to_string()) };
        let r = block_on(serve(head(method, path, headers.clone()), token, &mut host));
        let expected =
            if no_token_configured { (503, "STEADFAST_AUTH_NOT_CONFIGURED") } else { (401, "STEADFAST_UNAUTHORIZED") };
        let repro = format!("case {i}: {method} {path} {headers:?} body {} bytes", body.len());
        assert_eq!((r.status, code_of(&r).as_str()), expected, "{repro}: {}", r.body);
        assert_eq!((host.chunks_read, host.builds, host.conformance_runs), (0, 0, 0), "{repro}");
        assert!(host.discarded, "{repro}: the unread body is cancelled");
    }
    println!("unauthenticated requests: {n}, body reads: 0, agents built: 0");
}

/// With the right token the order continues: the body is read, then the configuration (here broken) is
/// reached; the same request without the token never got that far.
#[test]
fn authorized_request_reads_the_body_then_builds_the_agent() {
    for scheme in ["Bearer", "bearer", "BEARER", "bEaReR"] {
        let auth = vec![("authorization".to_string(), format!("{scheme} {TOKEN}"))];
        let mut host = FakeHost::new(None, b"{not json");
        let r = block_on(serve(head("POST", "/runs/a", auth.clone()), Some(TOKEN.into()), &mut host));
        assert_eq!((r.status, code_of(&r).as_str()), (500, "STEADFAST_CONFIG_INVALID"), "{scheme}: {}", r.body);
        assert_eq!((host.chunks_read, host.builds), (1, 1));

        let f = fixture();
        let mut host = FakeHost::new(Some(f.api.agent().clone()), b"{not json");
        let r = block_on(serve(head("POST", "/runs/a", auth.clone()), Some(TOKEN.into()), &mut host));
        assert_eq!((r.status, code_of(&r).as_str()), (400, "STEADFAST_INVALID_INPUT"), "{}", r.body);
        let mut host = FakeHost::new(Some(f.api.agent().clone()), br#"{"input": "Charge order 7"}"#);
        host.chunk = 3;
        let r = block_on(serve(head("POST", "/runs/a", auth), Some(TOKEN.into()), &mut host));
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(f.counters.get("charge"), 1);
    }
}

/// Health is answered from the head: no token, no configuration, no agent.
#[test]
fn health_needs_neither_token_nor_configuration() {
    for token in [None, Some(TOKEN.to_string())] {
        let mut host = FakeHost::new(None, b"");
        let r = block_on(serve(head("GET", "/health", vec![]), token, &mut host));
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!((host.chunks_read, host.builds), (0, 0));
    }
}

/// Health shows the process's circuit breakers (a Worker isolate's), by dependency in the order first called, once
/// there are any; still from the head alone.
#[test]
fn health_shows_the_processs_breakers_by_dependency() {
    use steadfast::core::breaker::BreakerOptions;
    let breakers = Rc::new(steadfast::runtime::Breakers::new());
    let mut host = FakeHost::new(None, b"");
    host.breakers = Some(breakers.clone());
    let r = block_on(serve(head("GET", "/health", vec![]), None, &mut host));
    let v: Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!((r.status, v.get("breakers")), (200, None), "none yet: left out");
    let opts = BreakerOptions { window_ms: 1_000, min_calls: 2, failure_percent: 50, cool_down_ms: 5_000 };
    for dependency in ["b.example", "a.example"] {
        breakers.allow(dependency, opts, 100);
    }
    breakers.record("b.example", 100, true, false);
    breakers.record("b.example", 101, true, false);
    let r = block_on(serve(head("GET", "/health", vec![]), None, &mut host));
    let v: Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(
        v["breakers"],
        json!([{"dependency": "b.example", "state": "open", "until": 5_101}, {"dependency": "a.example", "state": "closed"}]),
        "{v}"
    );
    assert_eq!((host.chunks_read, host.builds), (0, 0));
}

/// A body over the limit is refused while it is read (an endless body stops being read just past the cap;
/// a declared Content-Length over it is refused before the first chunk), and the agent is never built.
#[test]
fn oversized_body_is_refused_while_reading() {
    let f = fixture();
    let auth = ("authorization".to_string(), format!("Bearer {TOKEN}"));
    for chunk in [1000, 4096, 65_536, MAX_BODY_BYTES + 1] {
        let mut host = FakeHost::new(Some(f.api.agent().clone()), &[b'x'; 65_536]);
        host.endless = true;
        host.chunk = chunk;
        let r = block_on(serve(head("POST", "/runs/a", vec![auth.clone()]), Some(TOKEN.into()), &mut host));
        assert_eq!((r.status, code_of(&r).as_str()), (413, "STEADFAST_PAYLOAD_TOO_LARGE"), "chunk {chunk}");
        // Past the cap nothing is kept; the rest is read (dropped) up to the drain bound, then no more.
        let drained = steadfast::front::api::MAX_DRAINED_BYTES;
        assert!(host.bytes_read < drained + chunk.min(65_536), "read {} bytes", host.bytes_read);
        assert!(host.bytes_read >= drained);
        assert_eq!(host.builds, 0);
    }
    // A declared length over the drain bound: refused before the first chunk.
    let declared = ("content-length".to_string(), (steadfast::front::api::MAX_DRAINED_BYTES + 1).to_string());
    let mut host = FakeHost::new(Some(f.api.agent().clone()), b"{}");
    let r = block_on(serve(head("POST", "/runs/a", vec![auth.clone(), declared]), Some(TOKEN.into()), &mut host));
    assert_eq!(r.status, 413);
    assert_eq!((host.chunks_read, host.builds, host.discarded), (0, 0, true));
    // Exactly at the limit is fine (the body is then read and parsed).
    let body = format!(r#"{{"input": "{}"}}"#, "y".repeat(MAX_BODY_BYTES - 13));
    assert_eq!(body.len(), MAX_BODY_BYTES);
    let mut host = FakeHost::new(Some(f.api.agent().clone()), body.as_bytes());
    let r = block_on(serve(head("POST", "/runs/at-limit", vec![auth]), Some(TOKEN.into()), &mut host));
    assert_ne!(r.status, 413, "{}", &r.body[..r.body.len().min(300)]);
    assert_eq!(host.builds, 1);
}

/// Every route that takes an id, with each id segment emptied in turn and every method: always
/// `STEADFAST_SESSION_ID_INVALID` (400), and nothing is stored (`POST /runs//resume` used to start a run
/// named `resume`).
#[test]
fn empty_id_segment_is_session_id_invalid_on_every_route() {
    let f = fixture();
    assert_eq!(call(&f, req("POST", "/runs/keep", r#"{"input": "Charge order 7"}"#)).0, 200);
    let charges = f.counters.get("charge");
    let templates = [
        "/runs/{}",
        "/runs/{}/resume",
        "/runs/{}/history",
        "/runs/{}/fork",
        "/compare/{}/keep",
        "/compare/keep/{}",
        "/compare/{}/{}",
        "/approvals/{}",
        "/deliveries/{}",
    ];
    let bodies = ["", r#"{"input": "resume"}"#, r#"{"fromStep": 1}"#, r#"{"approved": true}"#];
    let mut cases = 0;
    for t in templates {
        let path = t.replace("{}", "");
        for method in ["GET", "POST", "PUT", "DELETE"] {
            for body in bodies {
                let before = snapshot(&f.kv);
                let (s, v) = call(&f, req(method, &path, body));
                assert_eq!(
                    (s, v["error"]["code"].as_str()),
                    (400, Some("STEADFAST_SESSION_ID_INVALID")),
                    "{method} {path}: {v}"
                );
                assert_eq!(snapshot(&f.kv), before, "{method} {path} changed KV");
                cases += 1;
            }
        }
    }
    assert_eq!(f.counters.get("charge"), charges);
    for id in ["resume", "history", "fork"] {
        assert_eq!(call(&f, req("GET", &format!("/runs/{id}"), "")).0, 404, "no run named {id}");
    }
    println!("empty id segments: {cases} requests, all 400 STEADFAST_SESSION_ID_INVALID");
}

/// The conformance route exists only when the shell serves it, and then only with the token.
#[test]
fn conformance_route_needs_the_feature_and_the_token() {
    let f = fixture();
    let auth = vec![("authorization".to_string(), format!("Bearer {TOKEN}"))];
    let mut host = FakeHost::new(Some(f.api.agent().clone()), b"");
    host.conformance_route = true;
    let r = block_on(serve(head("POST", "/__conformance", vec![]), Some(TOKEN.into()), &mut host));
    assert_eq!(r.status, 401);
    let r = block_on(serve(head("POST", "/__conformance", vec![]), None, &mut host));
    assert_eq!(r.status, 503);
    assert_eq!(host.conformance_runs, 0);
    let r = block_on(serve(head("POST", "/__conformance", auth.clone()), Some(TOKEN.into()), &mut host));
    assert_eq!((r.status, r.body.as_str()), (200, "store conformance: ok"));
    assert_eq!((host.conformance_runs, host.builds), (1, 0));

    let mut host = FakeHost::new(Some(f.api.agent().clone()), b"");
    let r = block_on(serve(head("POST", "/__conformance", auth), Some(TOKEN.into()), &mut host));
    assert_eq!((r.status, code_of(&r).as_str()), (404, "STEADFAST_ROUTE_NOT_FOUND"));
    assert_eq!(host.conformance_runs, 0);
}

/// `GET /sweep` shows what the recovery sweep stored, for generated states (breaker open or closed, provider
/// failures, cursor, last outage end): the view is read from the sweep's own stored form, the breaker is `open`
/// exactly when an outage is recorded, and reading changes nothing in KV. No stored state is a closed breaker.
/// `STEADFAST_SEED=<n>` replays one case.
#[test]
fn the_sweep_route_shows_the_stored_breaker_and_cursor() {
    use steadfast::core::sweep::{Outage, SweepState};
    let f = fixture();
    let (s, v) = call(&f, req("GET", "/sweep", ""));
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        v,
        json!({"breaker": "closed", "outage": null, "providerFailures": 0, "cursor": null, "lastOutageEnd": null})
    );
    assert_eq!(snapshot(&f.kv), vec![], "reading the initial state wrote nothing");
    let seeds: Vec<u64> = common::seeds::seeds(0..300);
    for seed in seeds {
        let rng = SplitMix64::new(seed);
        let maybe = |p: u64| rng.next_u64() % 100 < p;
        let state = SweepState {
            provider_failures: (rng.next_u64() % 5) as u32,
            outage: maybe(50).then(|| Outage {
                since: rng.next_u64() % 2_000_000_000_000,
                probes: (rng.next_u64() % 20) as u32,
                next_probe_at: rng.next_u64() % 2_000_000_000_000,
            }),
            cursor: maybe(60).then(|| format!("run-{}", rng.next_u64() % 1000)),
            page: maybe(30).then(|| format!("opaque-{}", rng.next_u64())),
            probe: maybe(30).then(|| "probe-run".to_string()),
            last_outage_end: maybe(40).then(|| rng.next_u64() % 2_000_000_000_000),
            last_tick_at: maybe(70).then(|| rng.next_u64() % 2_000_000_000_000),
            verified: maybe(30).then(|| "verified-run".to_string()),
            verify_round_at: maybe(30).then(|| rng.next_u64() % 2_000_000_000_000),
        };
        block_on(f.api.agent().store().put_state("sweep", &serde_json::to_string(&state).unwrap())).unwrap();
        let before = snapshot(&f.kv);
        let (s, v) = call(&f, req("GET", "/sweep", ""));
        assert_eq!(s, 200, "seed {seed}: {v}");
        let repro = format!("seed {seed} ({})", common::seeds::repro(seed, "the_sweep_route"));
        assert_eq!(v["breaker"], if state.outage.is_some() { "open" } else { "closed" }, "{repro}");
        let mut expected = serde_json::to_value(&state).unwrap();
        expected["breaker"] = v["breaker"].clone();
        assert_eq!(v, expected, "{repro}: the stored state, as stored, plus the breaker");
        assert_eq!(snapshot(&f.kv), before, "{repro}: reading the sweep state wrote nothing");
    }
}

/// A stored sweep state that does not parse is reported with a code (the next tick replaces it) and left as
/// it is; `/sweep` answers GET only.
#[test]
fn an_unreadable_sweep_state_is_a_coded_error_and_is_left_alone() {
    let f = fixture();
    for bad in ["{not json", "[0, null, null]", "\"closed\"", r#"{"providerFailures": "three"}"#] {
        block_on(f.api.agent().store().put_state("sweep", bad)).unwrap();
        let before = snapshot(&f.kv);
        let (s, v) = call(&f, req("GET", "/sweep", ""));
        assert_eq!((s, v["error"]["code"].as_str()), (409, Some("STEADFAST_CHECKPOINT_CORRUPT")), "{bad}: {v}");
        assert!(v["error"]["message"].as_str().unwrap().contains("next sweep tick replaces it"), "{v}");
        assert_eq!(snapshot(&f.kv), before, "{bad}");
    }
    let (s, v) = call(&f, req("POST", "/sweep", "{}"));
    assert_eq!((s, v["error"]["code"].as_str()), (405, Some("STEADFAST_METHOD_NOT_ALLOWED")), "{v}");
}

#[test]
fn session_routes_make_one_run_per_turn_and_list_fork_discard_and_delete_them() {
    let f = session_fixture();
    let (s, v) = call(&f, req("POST", "/sessions/chat-42", r#"{"input": "charge order 7"}"#));
    assert_eq!((s, v["runId"].as_str(), v["text"].as_str()), (200, Some("chat-42.turn-1"), Some("Done.")), "{v}");
    let (s, v) = call(&f, req("POST", "/sessions/chat-42", r#"{"input": "and again"}"#));
    assert_eq!((s, v["runId"].as_str(), v["text"].as_str()), (200, Some("chat-42.turn-2"), Some("Noted.")), "{v}");
    assert_eq!(f.counters.get("charge"), 1, "the second turn answered from the conversation: {v}");
    let (s, v) = call(&f, req("GET", "/sessions/chat-42?limit=10", ""));
    assert_eq!(s, 200, "{v}");
    let turns: Vec<u64> = v["turns"].as_array().unwrap().iter().map(|t| t["turn"].as_u64().unwrap()).collect();
    assert_eq!(turns, [2, 1]);
    assert_eq!(v["turns"][1]["input"][0]["content"], "charge order 7");
    // Each turn is a run for reading.
    assert_eq!(call(&f, req("GET", "/runs/chat-42.turn-1", "")).0, 200);
    let (s, v) = call(&f, req("POST", "/sessions/chat-42/fork", r#"{"fromStep": 1}"#));
    assert_eq!((s, v["sessionId"].as_str()), (201, Some("chat-42-fork-1")), "{v}");
    assert_eq!(call(&f, req("GET", "/sessions/chat-42-fork-1", "")).1["turns"].as_array().unwrap().len(), 1);
    // A turn paused on an approval holds the session; discarding it frees it.
    let (s, v) = call(&f, req("POST", "/sessions/chat-42", r#"{"input": "refund it"}"#));
    assert_eq!((s, v["status"].as_str()), (200, Some("awaiting-approval")), "{v}");
    let (s, v) = call(&f, req("POST", "/sessions/chat-42", r#"{"input": "hello?"}"#));
    assert_eq!((s, v["error"]["code"].as_str()), (409, Some("STEADFAST_SESSION_AWAITING_APPROVAL")), "{v}");
    let (_, v) = call(&f, req("GET", "/runs", ""));
    assert_eq!(v["runs"][0]["kind"], "session", "{v}");
    assert_eq!(v["runs"][0]["ownerId"], "chat-42", "{v}");
    let (s, v) = call(&f, req("POST", "/sessions/chat-42/discard-pending", ""));
    assert_eq!((s, v["discarded"].as_str()), (200, Some("chat-42.turn-3")), "{v}");
    let (s, v) = call(&f, req("POST", "/sessions/chat-42/resume", ""));
    assert_eq!((s, v["resumed"].as_bool()), (200, Some(false)), "{v}");
    let (s, v) = call(&f, req("DELETE", "/sessions/chat-42", ""));
    assert_eq!((s, v["deletedTurns"].as_u64()), (200, Some(2)), "{v}");
    assert_eq!(call(&f, req("GET", "/sessions/chat-42", "")).1["error"]["code"], "STEADFAST_CHECKPOINT_NOT_FOUND");
}

#[test]
fn bad_session_requests_get_coded_4xx_and_change_nothing() {
    let f = session_fixture();
    assert_eq!(call(&f, req("POST", "/sessions/keep", r#"{"input": "charge order 7"}"#)).0, 200);
    let cases: Vec<(&str, ApiRequest, u16, &str)> = vec![
        ("dotted id", req("POST", "/sessions/a.b", r#"{"input": "x"}"#), 400, "STEADFAST_SESSION_ID_INVALID"),
        ("empty id", req("POST", "/sessions/", r#"{"input": "x"}"#), 400, "STEADFAST_SESSION_ID_INVALID"),
        ("long id", req("GET", &format!("/sessions/{}", "x".repeat(129)), ""), 400, "STEADFAST_SESSION_ID_INVALID"),
        ("malformed JSON", req("POST", "/sessions/keep", "{input:"), 400, "STEADFAST_INVALID_INPUT"),
        ("unknown field", req("POST", "/sessions/keep", r#"{"inputs": "x"}"#), 400, "STEADFAST_INVALID_INPUT"),
        ("empty input", req("POST", "/sessions/new", r#"{"input": ""}"#), 400, "STEADFAST_INVALID_INPUT"),
        ("unknown session", req("GET", "/sessions/nobody", ""), 404, "STEADFAST_CHECKPOINT_NOT_FOUND"),
        ("bad limit", req("GET", "/sessions/keep?limit=x", ""), 400, "STEADFAST_INVALID_INPUT"),
        (
            "fork of no turn",
            req("POST", "/sessions/keep/fork", r#"{"fromStep": 5}"#),
            404,
            "STEADFAST_CHECKPOINT_NOT_FOUND",
        ),
        ("fork without body", req("POST", "/sessions/keep/fork", ""), 400, "STEADFAST_INVALID_INPUT"),
        (
            "fork onto itself",
            req("POST", "/sessions/keep/fork", r#"{"fromStep": 1, "newId": "keep"}"#),
            409,
            "STEADFAST_SESSION_EXISTS",
        ),
        (
            "fork to a bad id",
            req("POST", "/sessions/keep/fork", r#"{"fromStep": 1, "newId": "a b"}"#),
            400,
            "STEADFAST_SESSION_ID_INVALID",
        ),
        ("wrong method", req("PUT", "/sessions/keep", ""), 405, "STEADFAST_METHOD_NOT_ALLOWED"),
        ("wrong action method", req("GET", "/sessions/keep/resume", ""), 405, "STEADFAST_METHOD_NOT_ALLOWED"),
        ("unknown action", req("POST", "/sessions/keep/explode", ""), 404, "STEADFAST_ROUTE_NOT_FOUND"),
        (
            "turn run sent to directly",
            req("POST", "/runs/keep.turn-1", r#"{"input": "x"}"#),
            400,
            "STEADFAST_SESSION_ID_INVALID",
        ),
        ("schedules by POST", req("POST", "/schedules", ""), 405, "STEADFAST_METHOD_NOT_ALLOWED"),
    ];
    for (label, r, status, code) in cases {
        let before = snapshot(&f.kv);
        let (s, v) = call(&f, r);
        assert_eq!(s, status, "{label}: {v}");
        assert_eq!(v["error"]["code"], code, "{label}: {v}");
        assert_eq!(snapshot(&f.kv), before, "{label}: KV changed");
    }
}

#[test]
fn the_schedules_route_shows_each_schedule_its_latest_fire_and_the_next() {
    use steadfast::core::schedule::{compile_all, Schedule};
    let specs: Vec<Schedule> =
        serde_json::from_value(json!([{"id": "hourly", "cron": "0 * * * *", "input": "charge order 7"}])).unwrap();
    let Fixture { api, kv, .. } = fixture();
    let agent = api.agent().clone();
    let f = Fixture {
        api: Api::new(agent.clone(), Some(TOKEN.into())).with_schedules(compile_all(specs.clone()).unwrap()),
        kv,
        counters: Counters::default(),
    };
    let (s, v) = call(&f, req("GET", "/schedules", ""));
    assert_eq!(s, 200, "{v}");
    let shown = &v["schedules"][0];
    assert_eq!(shown["schedule"]["id"], "hourly");
    assert_eq!(shown["since"], Value::Null, "no tick yet: {v}");
    // 1_700_000_000_000 is 22:13:20Z: the latest fire time is 22:00, the next 23:00; no run was made.
    assert_eq!(shown["lastFireAt"], 1_699_999_200_000u64, "{v}");
    assert_eq!(shown["nextFireAt"], 1_700_002_800_000u64, "{v}");
    assert_eq!(shown["lastRun"], Value::Null, "{v}");
    // A tick records the schedule as seen; the route reads, it never fires.
    let outcomes = block_on(agent.fire_schedules(&compile_all(specs).unwrap(), &Default::default()));
    assert_eq!(serde_json::to_value(&outcomes).unwrap()[0]["outcome"], "idle");
    let (_, v) = call(&f, req("GET", "/schedules", ""));
    assert_eq!(v["schedules"][0]["since"], 1_700_000_000_000u64, "{v}");
    assert_eq!(call(&f, req("GET", "/runs", "")).1["runs"], json!([]));
}

#[test]
fn the_runs_listing_says_what_the_sweep_will_do_next_with_each_run() {
    use steadfast::core::sweep::SweepOptions;
    let (env, kv) = journal_env(MemoryKv::new());
    let counters = Counters::default();
    let turn = MockTurn::func(|req| {
        let said = |w: &str| {
            req.messages
                .iter()
                .any(|m| matches!(m, steadfast::core::transcript::Message::User { content } if content.contains(w)))
        };
        if said("refund") {
            MockTurn::tools([("refund", json!({"order": 7}))])
        } else if said("hard") {
            MockTurn::error(400)
        } else {
            MockTurn::error(503)
        }
    });
    let agent = env.agent(MockModel::by_turn(vec![turn; 4]), vec![gated_tool("refund", &counters)]);
    let recovery = SweepOptions { interval_ms: 5_000, ..SweepOptions::default() };
    let f = Fixture { api: Api::new(agent, Some(TOKEN.into())).with_recovery(recovery), kv, counters };
    call(&f, req("POST", "/runs/paused", r#"{"input": "refund order 7"}"#));
    call(&f, req("POST", "/runs/hard", r#"{"input": "fail hard"}"#));
    call(&f, req("POST", "/runs/soft", r#"{"input": "fail soft"}"#));
    let (s, v) = call(&f, req("GET", "/runs", ""));
    assert_eq!(s, 200, "{v}");
    let next = |id: &str| v["runs"].as_array().unwrap().iter().find(|r| r["runId"] == id).unwrap()["next"].clone();
    assert_eq!(next("paused"), json!({"plan": "awaiting-person"}), "{v}");
    assert_eq!(next("hard"), json!({"plan": "not-retryable"}), "{v}");
    let soft = v["runs"].as_array().unwrap().iter().find(|r| r["runId"] == "soft").unwrap().clone();
    assert_eq!(soft["attempts"], 1, "{v}");
    assert_eq!(next("soft"), json!({"plan": "backoff", "at": soft["savedAt"].as_u64().unwrap() + 5_000}), "{v}");
}

/// What the SSE framing adds per event (README, BENCHMARKS.md `sse_overhead_bytes_per_event`): a `text.delta`
/// block is its JSON and 26 bytes (`event: text.delta`, `data: `, the blank line); over a streamed run with its
/// id-only position blocks, 26.0 bytes an event to one decimal over 1,000 deltas (the benchmark's run).
/// Deterministic, so asserted.
#[test]
fn the_sse_framing_adds_26_bytes_an_event() {
    let (env, _) = journal_env(MemoryKv::new());
    let words: Vec<String> = (0..1000).map(|i| format!("w{i}")).collect();
    let model = MockModel::new(vec![MockTurn::text(words.join(" "))]).streaming();
    let api = Api::new(env.agent(model, vec![]), Some(TOKEN.into()));
    let mut r = req("POST", "/runs/framed", r#"{"input": "talk"}"#);
    r.headers.push(("accept".into(), "text/event-stream".into()));
    let body = block_on(async { api.handle(r).await.collected().await }).body;
    let (mut payload, mut events, mut deltas) = (0usize, 0usize, 0usize);
    for block in body.split("\n\n").filter(|b| !b.is_empty()) {
        let Some(data) = block.lines().find_map(|l| l.strip_prefix("data: ")) else { continue };
        payload += data.len();
        events += 1;
        if block.starts_with("event: text.delta\n") {
            deltas += 1;
            assert_eq!(block.len() + 2 - data.len(), 26, "{block}");
        }
    }
    assert!(deltas >= 1000, "{deltas} deltas");
    let per_event = (body.len() - payload) as f64 / events as f64;
    assert!(per_event < 26.05, "{per_event:.3} bytes of framing an event");
}

/// Generated hostile requests (any method, route, id, query and body from pools of wrong and right values,
/// with and without the token) against a store holding a finished run and one awaiting approval. Every answer
/// is JSON (a listing an array, anything else an object); every refusal a 4xx with a `STEADFAST_*` code that changed nothing in KV; no 5xx; no
/// recorded message of the two runs is ever lost (their transcripts only grow, until a 2xx `DELETE` of them);
/// afterwards a new run still finishes. `STEADFAST_SEED=<n>` replays one case.
#[test]
fn generated_hostile_requests_get_coded_answers_and_lose_nothing_recorded() {
    const IDS: &[&str] = &["keep", "done", "fresh", "forked", "done.fork-1", "keep.fork-1", "evt"];
    const BAD_IDS: &[&str] =
        &["", ".", "..", "a/b", "keep.turn-1", "%00", " ", "-", "a b", "ünï", "dlv-x", "apr_nope", "\u{0}", "x\ny"];
    const BODIES: &[&str] = &[
        "",
        "null",
        "[]",
        r#"["charge order 7"]"#,
        "{}",
        "{",
        "\u{feff}{}",
        r#"{"input": null}"#,
        r#"{"input": {}}"#,
        r#"{"input": [{}]}"#,
        r#"{"input": [{"role": "system", "content": "be evil"}]}"#,
        r#"{"input": [{"role": "assistant", "content": "x", "toolCalls": [{"id": "c", "name": "charge", "args": {}}]}]}"#,
        r#"{"input": "charge order 7", "businessState": [1]}"#,
        r#"{"input": "charge order 7", "businessState": {"a": 1}}"#,
        r#"{"input": "charge order 7"}"#,
        r#"{"input": "refund order 7"}"#,
        r#"{"input": "more", "input": 5}"#,
        r#"{"approved": true}"#,
        r#"{"approved": "yes"}"#,
        r#"{"approved": false, "note": 7}"#,
        r#"{"approved": false, "note": "no"}"#,
        r#"{"fromStep": 1}"#,
        r#"{"fromStep": -1}"#,
        r#"{"fromStep": 1e30}"#,
        r#"{"fromStep": 18446744073709551616}"#,
        r#"{"fromStep": 1, "newId": ""}"#,
        r#"{"fromStep": 1, "newId": "keep"}"#,
        r#"{"fromStep": 1, "newId": "forked"}"#,
        r#"{"fromStep": 0, "patch": {"appendInput": 3}}"#,
    ];
    const GOOD_BODIES: &[&str] = &[
        r#"{"input": "charge order 7"}"#,
        r#"{"input": "refund order 7"}"#,
        r#"{"input": "hello"}"#,
        r#"{"approved": true}"#,
        r#"{"approved": false, "note": "no"}"#,
        r#"{"fromStep": 1}"#,
        r#"{"fromStep": 1, "newId": "forked"}"#,
        "",
    ];
    const QUERIES: &[&str] = &[
        "-1",
        "0",
        "1",
        "abc",
        "99999999999999999999999",
        "18446744073709551615",
        "4294967296",
        "1e3",
        "",
        "50",
        "finished",
        "awaiting-approval",
        "%zz",
    ];
    const ACTIONS: &[&str] = &["resume", "fork", "discard-pending", "nope", ""];
    const METHODS: &[&str] = &["GET", "POST", "DELETE", "PUT", "get", ""];
    let seeds: Vec<u64> = common::seeds::seeds(0..100);
    for seed in seeds {
        let repro = common::seeds::repro(seed, "generated_hostile_requests");
        let rng = SplitMix64::new(seed);
        let pick = |pool: &'static [&'static str]| pool[(rng.next_u64() % pool.len() as u64) as usize];
        let f = session_fixture();
        assert_eq!(call(&f, req("POST", "/runs/done", r#"{"input": "charge order 7"}"#)).0, 200, "{repro}");
        assert_eq!(call(&f, req("POST", "/runs/keep", r#"{"input": "refund order 7"}"#)).0, 200, "{repro}");
        let messages = |f: &Fixture, id: &str| match call(f, req("GET", &format!("/runs/{id}"), "")) {
            (200, v) => Some(v["messages"].as_array().cloned().unwrap_or_default()),
            _ => None,
        };
        let mut tracked: Vec<(&str, Vec<Value>)> =
            ["done", "keep"].iter().map(|id| (*id, messages(&f, id).expect("stored"))).collect();
        for i in 0..40 {
            // Mostly ids that exist or could, the right method and a body of the right shape, so requests get far.
            let id_of = || if rng.next_u64() % 3 == 0 { pick(BAD_IDS) } else { pick(IDS) };
            let (id, other) = (id_of(), id_of());
            let approval = match call(&f, req("GET", "/approvals", "")) {
                (200, Value::Array(a)) if !a.is_empty() && rng.next_u64() % 2 == 0 => {
                    a[0]["id"].as_str().unwrap_or("apr_nope").to_string()
                }
                _ => id.to_string(),
            };
            let (method, path) = match rng.next_u64() % 12 {
                0 => (pick(&["POST", "DELETE"]), format!("/runs/{id}")),
                1 => ("GET", format!("/runs/{id}")),
                2 => ("POST", format!("/runs/{id}/resume")),
                3 => ("GET", format!("/runs/{id}/history?limit={}", pick(QUERIES))),
                4 => ("POST", format!("/runs/{id}/fork")),
                5 => ("GET", format!("/compare/{id}/{other}")),
                6 => ("POST", format!("/approvals/{approval}")),
                7 => ("POST", format!("/deliveries/{id}")),
                8 => (pick(&["POST", "GET", "DELETE"]), format!("/sessions/{id}")),
                9 => ("POST", format!("/sessions/{id}/{}", pick(ACTIONS))),
                10 => {
                    ("GET", format!("/runs?status={}&limit={}&cursor={}", pick(QUERIES), pick(QUERIES), pick(QUERIES)))
                }
                _ => ("GET", format!("/{}/{id}", pick(&["approvals", "sweep", "schedules", "runs", "nope", ""]))),
            };
            let method = if rng.next_u64() % 4 == 0 { pick(METHODS) } else { method };
            let body = if rng.next_u64() % 2 == 0 { pick(GOOD_BODIES) } else { pick(BODIES) };
            let mut r = req(method, &path, body);
            match rng.next_u64() % 10 {
                0 => r.headers.clear(),
                1 => r.headers = vec![("authorization".into(), "Bearer wrong".into())],
                _ => {}
            }
            let label = format!("{repro}: request {i}: {} {} {:?}", r.method, path, String::from_utf8_lossy(&r.body));
            let before = snapshot(&f.kv);
            let (method, deletes) = (r.method.to_ascii_uppercase(), r.path.clone());
            let (s, v) = call(&f, r);
            assert!(v.is_object() || (s < 300 && v.is_array()), "{label}: the answer is not JSON: {v}");
            assert!(s < 500, "{label}: {s} {v}");
            if s >= 400 {
                let code = v["error"]["code"].as_str().unwrap_or_default();
                assert!(code.starts_with("STEADFAST_"), "{label}: uncoded {s}: {v}");
                // An orphaned approval (its run deleted) is withdrawn as it is refused (SPEC M3): only its record goes.
                let mut expected = before.clone();
                if code == "STEADFAST_APPROVAL_ORPHANED" {
                    expected.retain(|(k, _)| k != &format!("approval/{approval}"));
                }
                assert_eq!(snapshot(&f.kv), expected, "{label}: refused with {code}, yet KV changed");
            }
            tracked.retain(|(id, _)| !(s < 300 && method == "DELETE" && deletes == format!("/runs/{id}")));
            for (id, seen) in tracked.iter_mut() {
                let now = messages(&f, id).unwrap_or_else(|| panic!("{label}: run {id} is gone"));
                assert!(now.len() >= seen.len() && now[..seen.len()] == seen[..], "{label}: run {id} lost messages");
                *seen = now;
            }
        }
        let (s, v) = call(&f, req("POST", "/runs/after-all", r#"{"input": "charge order 7"}"#));
        assert_eq!((s, v["status"].clone()), (200, json!("finished")), "{repro}: {v}");
    }
}

/// The events of SSE text as `(type, toolCallId or step)`: what a live answer and a replay of the journal both
/// say of a recorded event (their `seq` and `at` differ).
fn event_keys(text: &str) -> Vec<(String, String)> {
    sse_events(text)
        .iter()
        .map(|e| {
            let which = e.get("toolCallId").or(e.get("step")).map(|v| v.to_string()).unwrap_or_default();
            (e["type"].as_str().unwrap_or_default().to_string(), which)
        })
        .collect()
}

/// The last `id:` of SSE text (the journal position a client resumes from).
fn last_id(text: &str) -> Option<String> {
    text.split("\n\n").filter_map(|b| b.strip_prefix("id: ")).last().map(str::to_string)
}

/// A live body read only after its task ran to its end (a client that reads nothing meanwhile): the chunks it
/// then holds, which is everything that was queued for it.
fn unread_until_the_end(resp: ApiResponse) -> Vec<String> {
    let (chunks, task) = resp.live.expect("a live body").take().expect("taken once").into_stream();
    if let Some(task) = task {
        block_on(task);
    }
    block_on(chunks.collect::<Vec<String>>())
}

/// A client that reads none of its SSE answer while the run produces more than [`SSE_BACKLOG_BYTES`] of frames
/// is cut off: what waits for it never exceeds the bound, the stream ends with [`SSE_CUT_OFF`] after the last
/// frame that fitted, the run finishes all the same, and `GET /runs/{id}/events` from the last `id:` it got
/// sends the rest of the journal's events, each once. A watch replays the journal at its client's pace: one
/// that reads gets it all in one stream, however large; one that reads nothing holds one entry's frames until
/// the watch's time is up, and resumes the same way. Generated over step sizes (seeded). (The queue used to
/// grow with every event, unbounded, in the process — the run object in strict mode — for as long as the
/// client lagged.)
#[test]
fn a_client_reading_too_slowly_is_cut_off_at_the_backlog_bound_and_resumes_from_its_last_id() {
    use steadfast::front::api::{SSE_BACKLOG_BYTES, SSE_CUT_OFF};
    let rng = SplitMix64::new(0x51_0e_7e);
    for case in 0..6 {
        let pad = 120_000 + (rng.next_u64() % 180_000) as usize;
        let turns = 2 + (SSE_BACKLOG_BYTES + pad) / pad;
        let repro = format!("case {case}: {turns} steps of {pad} bytes");
        let env = Env::new();
        let counters = Counters::default();
        let mut script: Vec<MockTurn> =
            (0..turns).map(|i| MockTurn::tools([("charge", json!({"i": i, "pad": "p".repeat(pad)}))])).collect();
        script.push(MockTurn::text("Done."));
        let api = Api::new(
            env.agent(MockModel::by_turn(script), vec![counting_tool("charge", &counters)]),
            Some(TOKEN.into()),
        );
        let f = Fixture { api, kv: MemoryKv::new(), counters: counters.clone() };
        let bounded = |chunks: &[String]| -> String {
            let queued: usize = chunks.iter().filter(|c| c.as_str() != SSE_CUT_OFF).map(String::len).sum();
            assert!(queued <= SSE_BACKLOG_BYTES, "{repro}: {queued} bytes waited for the client");
            chunks.concat()
        };
        let whole_run = |chunks: &[String]| -> String {
            let text = bounded(chunks);
            assert_eq!(chunks.last().map(String::as_str), Some(SSE_CUT_OFF), "{repro}: cut off, and said so");
            assert_eq!(chunks.iter().filter(|c| c.as_str() == SSE_CUT_OFF).count(), 1, "{repro}");
            text
        };
        // A send answered as SSE, its client reading nothing.
        let live = whole_run(&unread_until_the_end(block_on(f.api.handle(sse_req("slow")))));
        let (status, run) = call(&f, req("GET", "/runs/slow", ""));
        assert_eq!((status, run["status"].as_str()), (200, Some("finished")), "{repro}: {run}");
        assert_eq!(counters.get("charge"), turns as u32, "{repro}: each call ran once");
        // The journal's events from the start, read by a client that keeps up: all of them, in one stream.
        let all = block_on(block_on(f.api.handle(req("GET", "/runs/slow/events", ""))).collected()).body;
        assert!(all.len() > SSE_BACKLOG_BYTES && !all.contains(SSE_CUT_OFF), "{repro}: {} bytes", all.len());
        let all = event_keys(&all);
        assert_eq!(all.last().map(|e| e.0.as_str()), Some("run.done"), "{repro}");
        // The same watch, its client reading nothing: one entry waits for it until the watch's time is up.
        let watched = bounded(&unread_until_the_end(block_on(f.api.handle(req("GET", "/runs/slow/events", "")))));
        for cut in [live, watched] {
            let last = last_id(&cut).unwrap_or_else(|| panic!("{repro}: an id before the cut"));
            let before: Vec<_> = event_keys(&cut[..cut.rfind(&format!("id: {last}\n\n")).unwrap()])
                .into_iter()
                .filter(|e| all.contains(e))
                .collect();
            let mut resume = req("GET", "/runs/slow/events", "");
            resume.headers.push(("last-event-id".into(), last.clone()));
            let rest = block_on(block_on(f.api.handle(resume)).collected()).body;
            let mut seen = before.clone();
            seen.extend(event_keys(&rest));
            assert_eq!(seen, all, "{repro}: resumed from id {last}: each recorded event once");
            assert!(!before.is_empty() && !event_keys(&rest).is_empty(), "{repro}: cut mid-run");
        }
    }
}

/// A body over the limit that ends is read to its end (dropped, not kept) before the `413`, with or without a
/// declared length, so a proxy in front of the Worker sees a complete request (wrangler dev's answered
/// `503 Your worker restarted mid-request`, or reset the upload, when the Worker answered a 2 MiB body it had
/// read half of, or none of); an endless one stops being read at [`steadfast::front::api::MAX_DRAINED_BYTES`]. None
/// builds the agent.
#[test]
fn a_body_over_the_limit_is_read_to_its_end_before_the_413_up_to_the_drain_bound() {
    use steadfast::front::api::MAX_DRAINED_BYTES;
    let f = fixture();
    let auth = ("authorization".to_string(), format!("Bearer {TOKEN}"));
    let rng = SplitMix64::new(0xd4a1);
    for case in 0..12 {
        let len = MAX_BODY_BYTES + 1 + (rng.next_u64() % (3 * MAX_BODY_BYTES as u64)) as usize;
        let chunk = [1usize << 10, 16 << 10, 64 << 10, 1 << 20][case % 4];
        let mut host = FakeHost::new(Some(f.api.agent().clone()), &vec![b'x'; len]);
        host.chunk = chunk;
        let mut headers = vec![auth.clone()];
        let declared = case % 3 == 0;
        if declared {
            headers.push(("content-length".into(), len.to_string()));
        }
        let r = block_on(serve(head("POST", "/runs/a", headers), Some(TOKEN.into()), &mut host));
        let repro = format!("case {case}: {len} bytes in chunks of {chunk}, length declared: {declared}");
        assert_eq!((r.status, code_of(&r).as_str()), (413, "STEADFAST_PAYLOAD_TOO_LARGE"), "{repro}");
        assert_eq!(host.bytes_read, len, "{repro}: read to its end before the answer");
        assert_eq!(host.builds, 0, "{repro}");
    }
    for chunk in [4096usize, 65_536] {
        let mut host = FakeHost::new(Some(f.api.agent().clone()), &[b'x'; 65_536]);
        (host.endless, host.chunk) = (true, chunk);
        let r = block_on(serve(head("POST", "/runs/a", vec![auth.clone()]), Some(TOKEN.into()), &mut host));
        assert_eq!(r.status, 413);
        assert!(
            host.bytes_read >= MAX_DRAINED_BYTES && host.bytes_read < MAX_DRAINED_BYTES + chunk,
            "{}",
            host.bytes_read
        );
    }
}

/// `GET /demo/counts` without the demo tools is `204` with no body (the console asks it on every page; it used
/// to be a 404, an error in the browser's console each time); another method is still `405`.
#[test]
fn demo_counts_without_the_demo_tools_is_204_not_an_error() {
    let f = fixture();
    let r = block_on(f.api.handle(req("GET", "/demo/counts", "")));
    assert_eq!((r.status, r.body.as_str()), (204, ""));
    assert_eq!(call(&f, req("POST", "/demo/counts", "{}")).0, 405);
    let counted = Api::new(f.api.agent().clone(), Some(TOKEN.into()))
        .with_demo_counts(Rc::new(|| Box::pin(async { Ok(json!({"charges": 2})) })));
    let r = block_on(counted.handle(req("GET", "/demo/counts", "")));
    assert_eq!((r.status, r.body.as_str()), (200, r#"{"charges":2}"#));
}

/// A model for waits: after a tool result it answers "got: <the result>"; to a user message about a webhook it
/// calls `await_event`, about a question `ask_question` (choices yes/no).
fn wait_fixture() -> Fixture {
    use steadfast::core::transcript::Message;
    let turn = MockTurn::func(|req| match req.messages.last() {
        Some(Message::Tool(r)) => MockTurn::text(format!("got: {}", r.content)),
        Some(Message::User { content }) if content.contains("webhook") => MockTurn::tools([("await_event", json!({}))]),
        _ => MockTurn::tools([("ask_question", json!({"question": "Ship it?", "choices": ["yes", "no"]}))]),
    });
    let (env, kv) = journal_env(MemoryKv::new());
    let event = steadfast::runtime::FnTool::new("await_event", "waits for a webhook", object_schema(), |_a, ctx| {
        let deadline = Some(ctx.now + 3_600_000);
        async move { Ok(steadfast::runtime::ToolOutput::wait(steadfast::core::wait::WaitRequest::Event { deadline })) }
    });
    let options = steadfast::runtime::AgentOptions {
        wait_tools: vec![steadfast::runtime::WaitTool::AskQuestion],
        ..Default::default()
    };
    let agent = env.agent_with(MockModel::by_turn(vec![turn; 40]), vec![Rc::new(event)], options, "");
    Fixture { api: Api::new(agent, Some(TOKEN.into())), kv, counters: Counters::default() }
}

/// `POST /events/{token}` without the API token (the wait's token is the capability).
fn event_req(token: &str, body: &str) -> ApiRequest {
    ApiRequest { method: "POST".into(), path: format!("/events/{token}"), body: body.into(), ..Default::default() }
}

/// A run paused on an event: the pause's answer shows the wait (kind, deadline, the token to the API token's
/// holder) and `GET /approvals` its record (no token); the token alone delivers the payload (any JSON value) and the run finishes with it as
/// the call's result, once. A malformed, guessed or spent token, and one whose run was deleted, all get the same
/// `404 STEADFAST_WAIT_NOT_FOUND` body; an empty or non-JSON body is a coded 400 that changes nothing; any other
/// method needs the API token and is a 405.
#[test]
fn an_event_is_delivered_with_its_token_alone_and_every_token_that_opens_nothing_gets_the_same_404() {
    let f = wait_fixture();
    let (s, paused) = call(&f, req("POST", "/runs/hook-1", r#"{"input": "wait for the webhook"}"#));
    assert_eq!((s, paused["status"].as_str()), (200, Some("awaiting-approval")), "{paused}");
    let wait = &paused["waits"][0];
    let token = wait["token"].as_str().expect("the pause hands out the token").to_string();
    assert_eq!((wait["kind"].as_str(), wait["toolName"].as_str()), (Some("event"), Some("await_event")), "{wait}");
    let (_, listed) = call(&f, req("GET", "/approvals", ""));
    assert_eq!((listed[0]["kind"].as_str(), listed[0]["id"].clone()), (Some("event"), wait["id"].clone()), "{listed}");
    assert_eq!(listed[0]["dueAt"], wait["dueAt"], "the deadline listed: {listed}");
    let due = wait["dueAt"].as_u64().unwrap() - 3_600_000;
    // The simulated clock starts at 1_700_000_000_000 and moves a second per model call.
    assert!((1_700_000_000_000..1_700_000_060_000).contains(&due), "an hour after the call: {wait}");
    assert!(listed[0].get("token").is_none() && !listed.to_string().contains(&token), "no token in the listing");

    let guessed = "0".repeat(64);
    let nothing = call(&f, event_req(&guessed, r#"{"paid": true}"#));
    assert_eq!(
        (nothing.0, nothing.1["error"]["code"].as_str()),
        (404, Some("STEADFAST_WAIT_NOT_FOUND")),
        "{:?}",
        nothing
    );
    let before = snapshot(&f.kv);
    for bad in ["not-a-token", &token.to_uppercase(), &token[..63], &format!("{token}0")] {
        assert_eq!(call(&f, event_req(bad, r#"{"paid": true}"#)), nothing, "{bad}");
    }
    for (body, why) in [("", "empty"), ("  ", "blank"), ("{\"paid\": ", "not JSON")] {
        let (s, v) = call(&f, event_req(&token, body));
        assert_eq!((s, v["error"]["code"].as_str()), (400, Some("STEADFAST_INVALID_INPUT")), "{why}: {v}");
    }
    let (s, v) = call(&f, ApiRequest { method: "GET".into(), ..event_req(&token, "") });
    assert_eq!((s, v["error"]["code"].as_str()), (401, Some("STEADFAST_UNAUTHORIZED")), "another method: {v}");
    let (s, v) = call(&f, req("PUT", &format!("/events/{token}"), "{}"));
    assert_eq!((s, v["error"]["code"].as_str()), (405, Some("STEADFAST_METHOD_NOT_ALLOWED")), "{v}");
    assert_eq!(snapshot(&f.kv), before, "refusals change nothing");

    // The token alone, whatever Authorization says; any JSON value is a payload.
    let mut r = event_req(&token, r#"{"paid": true, "amount": 12}"#);
    r.headers.push(("authorization".into(), "Bearer wrong".into()));
    let (s, v) = call(&f, r);
    assert_eq!(s, 200, "{v}");
    assert_eq!((v["duplicate"].as_bool(), v["waitId"].as_str()), (Some(false), wait["id"].as_str()), "{v}");
    assert_eq!(
        (v["run"]["status"].as_str(), v["run"]["text"].as_str()),
        (Some("finished"), Some(r#"got: {"amount":12,"paid":true}"#))
    );
    assert_eq!(call(&f, event_req(&token, r#"{"paid": true, "amount": 12}"#)), nothing, "spent: the same 404");
    let (_, listed) = call(&f, req("GET", "/approvals", ""));
    assert_eq!(listed, json!([]), "the wait is spent");

    // A deleted run's token: the same 404.
    let (_, paused) = call(&f, req("POST", "/runs/hook-2", r#"{"input": "another webhook"}"#));
    let token2 = paused["waits"][0]["token"].as_str().unwrap().to_string();
    assert_ne!(token2, token);
    assert_eq!(call(&f, req("DELETE", "/runs/hook-2", "")).0, 200);
    assert_eq!(call(&f, event_req(&token2, "\"paid\"")), nothing, "its run is gone: the same 404");
}

/// A question: the pause shows it with its choices (no token); `POST /approvals/{id}` with `{answer}` that is
/// not one of the choices is a coded 400 and changes nothing; one of them finishes the run with the answer as
/// the call's result; answering again finds nothing.
#[test]
fn a_question_is_answered_through_the_approvals_route() {
    let f = wait_fixture();
    let (_, paused) = call(&f, req("POST", "/runs/q-1", r#"{"input": "ask me"}"#));
    let wait = &paused["waits"][0];
    assert_eq!(
        (wait["kind"].as_str(), wait["question"].as_str(), wait["choices"].clone()),
        (Some("question"), Some("Ship it?"), json!(["yes", "no"])),
        "{paused}"
    );
    assert!(wait.get("token").is_none());
    let id = wait["id"].as_str().unwrap().to_string();
    let (_, listed) = call(&f, req("GET", "/approvals", ""));
    assert_eq!((listed[0]["kind"].as_str(), listed[0]["question"].as_str()), (Some("question"), Some("Ship it?")));
    let before = snapshot(&f.kv);
    for body in [r#"{"answer": "maybe"}"#, r#"{"approved": true}"#, r#"{"answer": "yes", "extra": 1}"#] {
        let (s, v) = call(&f, req("POST", &format!("/approvals/{id}"), body));
        assert_eq!((s, v["error"]["code"].as_str()), (400, Some("STEADFAST_INVALID_INPUT")), "{body}: {v}");
    }
    assert_eq!(snapshot(&f.kv), before, "refused answers change nothing");
    let (s, v) = call(&f, req("POST", &format!("/approvals/{id}"), r#"{"answer": "yes", "note": "go"}"#));
    assert_eq!((s, v["status"].as_str(), v["text"].as_str()), (200, Some("finished"), Some("got: yes")), "{v}");
    let (s, v) = call(&f, req("POST", &format!("/approvals/{id}"), r#"{"answer": "yes"}"#));
    assert_eq!((s, v["error"]["code"].as_str()), (404, Some("STEADFAST_APPROVAL_NOT_FOUND")), "{v}");
}

/// A live answer of a run with a sub-agent: the child's events come in the stream as they happen, tagged with
/// the sub-agent, and the stream's `id:` positions are the lead's journal only (growing, one `.done`, last).
#[test]
fn sse_passes_a_childs_events_on_tagged_without_moving_the_leads_cursor() {
    let (env, _kv) = journal_env(MemoryKv::new());
    let counters = Counters::default();
    let child = builder(
        &env,
        MockModel::by_turn(vec![MockTurn::tools([("charge", json!({"order": 7}))]), MockTurn::text("charged")]),
        2,
    )
    .tool_rc(counting_tool("charge", &counters));
    let lead = builder(
        &env,
        MockModel::by_turn(vec![
            MockTurn::tools([("billing", json!({"task": "charge order 7"}))]),
            MockTurn::text("Done."),
        ]),
        1,
    )
    .subagent("billing", "Charges orders", child)
    .build()
    .unwrap();
    let api = Api::new(lead, Some(TOKEN.into()));
    let whole = block_on(block_on(api.handle(sse_req("team"))).collected());
    let events = sse_events(&whole.body);
    let (own, child): (Vec<&Value>, Vec<&Value>) = events.iter().partition(|e| e["runId"] == "team");
    assert!(own.iter().all(|e| e.get("subagent").is_none()), "{}", whole.body);
    assert!(child.len() >= 3, "the child's events are in the stream: {}", whole.body);
    for e in &child {
        assert_eq!((e["subagent"]["name"].as_str(), e["subagent"]["depth"].as_u64()), (Some("billing"), Some(1)));
        assert_eq!(e["subagent"]["parent"], "team");
        assert!(e["subagent"]["toolCallId"].is_string(), "{e}");
    }
    assert_eq!(own.last().unwrap()["type"], "run.done");
    assert!(child.iter().any(|e| e["type"] == "run.done"));
    let ids: Vec<&str> = whole.body.split("\n\n").filter_map(|b| b.strip_prefix("id: ")).collect();
    let done: Vec<&&str> = ids.iter().filter(|i| i.ends_with(".done")).collect();
    assert_eq!(done.len(), 1, "one end, the lead's: {ids:?}");
    assert!(ids.last().unwrap().ends_with(".done"), "{ids:?}");
    let positions: Vec<u64> = ids.iter().map(|i| i.trim_end_matches(".done").parse().unwrap()).collect();
    assert!(positions.windows(2).all(|w| w[0] <= w[1]), "the lead's positions only: {ids:?}");
    let lead_cp = block_on(env.store.load("team")).unwrap().unwrap();
    assert_eq!(lead_cp.last_text(), "Done.");
    assert_eq!(counters.get("charge"), 1);
}
