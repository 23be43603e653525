//! The HTTP API, natively: every route's happy path, a table of bad requests (no 5xx, KV unchanged),
//! auth, SSE.

mod common;

use common::*;
use serde_json::{json, Value};
use std::rc::Rc;
use steadfast::api::{Api, ApiRequest, ApiResponse, MAX_BODY_BYTES};
use steadfast::runtime::{MockModel, MockTurn};
use steadfast::store::{JournalOptions, JournalStore, MemoryKv};

const TOKEN: &str = "s3cret-token";

struct Fixture {
    api: Api,
    kv: MemoryKv,
    counters: Counters,
}

fn fixture() -> Fixture {
    let clock = steadfast::runtime::ManualClock::new(1_700_000_000_000);
    let kv = MemoryKv::new();
    let store = JournalStore::new(
        kv.clone(),
        Rc::new(clock.clone()),
        Rc::new(steadfast::runtime::ManualSleep::new(clock.clone())),
        JournalOptions::default(),
    );
    let env = Env::with_store(Rc::new(store), clock);
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

    // Deliveries run once.
    let (s, v) = call(&f, req("POST", "/deliveries/evt-1", r#"{"input": "Charge order 8"}"#));
    assert_eq!((s, v["outcome"].clone()), (200, json!("ran")), "{v}");
    let (s, v) = call(&f, req("POST", "/deliveries/evt-1", r#"{"input": "Charge order 8"}"#));
    assert_eq!((s, v["outcome"].clone()), (200, json!("acknowledged")));

    let (s, _) = call(&f, req("DELETE", "/runs/order-7", ""));
    assert_eq!(s, 200);
    let (s, v) = call(&f, req("GET", "/runs/order-7", ""));
    assert_eq!((s, v["error"]["code"].clone()), (404, json!("STEADFAST_CHECKPOINT_NOT_FOUND")));
    let (s, v) = call(&f, req("GET", "/runs", ""));
    assert_eq!((s, v["runs"].as_array().unwrap().len()), (200, 0));
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
    let cases: Vec<(&str, ApiRequest, u16, &str)> = vec![
        ("malformed JSON", req("POST", "/runs/a", "{input:"), 400, "STEADFAST_INVALID_INPUT"),
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

#[test]
fn sse_streams_events_in_order_ending_with_run_done() {
    let f = fixture();
    let mut r = req("POST", "/runs/sse-1", r#"{"input": "Charge order 7"}"#);
    r.headers.push(("accept".into(), "text/event-stream".into()));
    let resp = block_on(f.api.handle(r));
    assert_eq!(resp.status, 200);
    assert!(resp.headers.iter().any(|(k, v)| k == "content-type" && v == "text/event-stream"));
    let events: Vec<Value> = resp
        .body
        .split("\n\n")
        .filter(|b| !b.trim().is_empty())
        .map(|b| {
            let data = b.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
            serde_json::from_str(data).unwrap()
        })
        .collect();
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["seq"], i as u64, "gapless seq");
        assert_eq!(e["v"], 1);
    }
    assert_eq!(events.first().unwrap()["type"], "run.start");
    assert_eq!(events.last().unwrap()["type"], "run.done");
    assert!(events.iter().any(|e| e["type"] == "tool.done"));
}
