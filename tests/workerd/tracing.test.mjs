// Traces end to end (issue 32): the built Worker under workerd, in KV mode and in strict mode, with `tracing` set to
// a local OTLP/HTTP receiver on 127.0.0.1 and an OpenAI-compatible model provider and a webhook tool on another
// local server. The exported bodies are decoded by the OpenTelemetry project's own protobuf classes (PyPI
// opentelemetry-proto, tests/otlp/decode.py) and their attribute names checked against
// @opentelemetry/semantic-conventions. Checked: a request's W3C `traceparent` parents the run's execution span;
// each model call is a `chat` span and each tool call an `execute_tool` span under it; the provider and the
// webhook are sent the `traceparent` of their own span; a failed execution and the resume after it are two traces,
// the second linked to the first. And an exporter that hangs never slows a run (p50 of the request with the
// receiver hanging against with tracing off), one that cannot be reached is counted in
// `steadfast_trace_spans_dropped_total`.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import { Miniflare } from "miniflare";
import { apiCaller } from "./support/api.mjs";
import { builtWorker } from "./support/built.mjs";
import { decodeOtlp, assertSemconv } from "../otlp/support.mjs";

const TOKEN = "tracing-test-token-0123456789";
const call = apiCaller(TOKEN);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// The model provider and the charge webhook: each records the `traceparent` it was sent. A run whose input says
// "fail once" gets a 400 on its first model call.
const seen = { model: [], charge: [], failed: new Set() };
const provider = http.createServer((req, res) => {
  let body = "";
  req.on("data", (c) => (body += c));
  req.on("end", () => {
    const reply = (status, obj) => {
      res.writeHead(status, { "content-type": "application/json" });
      res.end(JSON.stringify(obj));
    };
    if (req.url === "/tools/charge") {
      seen.charge.push(req.headers.traceparent);
      return reply(200, { charged: true });
    }
    seen.model.push(req.headers.traceparent);
    const messages = JSON.parse(body).messages;
    const input = messages.find((m) => m.role === "user")?.content ?? "";
    if (input.includes("fail once") && !seen.failed.has(input)) {
      seen.failed.add(input);
      return reply(400, { error: { message: "a bad request, once" } });
    }
    const charged = messages.some((m) => m.role === "tool");
    const message = charged
      ? { content: "charged" }
      : { content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "charge", arguments: "{}" } }] };
    reply(200, { choices: [{ message, finish_reason: charged ? "stop" : "tool_calls" }], usage: { prompt_tokens: 10, completion_tokens: 5 } });
  });
});
// The OTLP receiver: keeps each export's body; `hang` leaves the exporter without an answer.
const receiver = { bodies: [], hang: false, headers: [] };
const otlp = http.createServer((req, res) => {
  let body = "";
  req.on("data", (c) => (body += c));
  req.on("end", () => {
    if (receiver.hang) return; // never answers
    receiver.bodies.push(body);
    receiver.headers.push(req.headers);
    res.writeHead(200, { "content-type": "application/json" });
    res.end("{}");
  });
});
const listen = (s) => new Promise((r) => s.listen(0, "127.0.0.1", () => r(s.address().port)));
const [pPort, oPort] = [await listen(provider), await listen(otlp)];
// A port nothing listens on: an unreachable collector.
const closed = http.createServer();
const closedPort = await listen(closed);
await new Promise((r) => closed.close(r));

const base = {
  model: { provider: "openai", model: "gpt-test", baseUrl: `http://127.0.0.1:${pPort}/v1` },
  tools: [{ name: "charge", description: "Charges the order", inputSchema: { type: "object" }, url: `http://127.0.0.1:${pPort}/tools/charge` }],
  allowedHosts: ["127.0.0.1"],
  retry: { maxAttempts: 1 },
};
const tracing = (port) => ({
  endpoint: `http://127.0.0.1:${port}/v1/traces`,
  headers: { authorization: { secret: "OTLP_TOKEN", prefix: "Bearer " } },
  serviceName: "steadfast-e2e",
  timeoutMs: 3000,
});
const workers = [];
function worker(config, strict) {
  const mf = new Miniflare({
    ...builtWorker("build"),
    kvNamespaces: ["RUNS"],
    ...(strict ? { durableObjects: { RUN_OBJECTS: { className: "RunObject", useSQLite: true } } } : {}),
    bindings: {
      STEADFAST_TOKEN: TOKEN,
      STEADFAST_CONFIG: JSON.stringify({ ...config, ...(strict ? { store: "durable-object" } : {}) }),
      OPENAI_API_KEY: "sk-test",
      OTLP_TOKEN: "otlp-secret",
    },
    cf: false,
  });
  workers.push(mf);
  return mf;
}
after(async () => {
  for (const mf of workers) await mf.dispose();
  provider.close();
  otlp.close();
});

/// The decoded spans of run `runId`'s executions (their traces), once `roots` execution spans have arrived.
async function spansOf(runId, roots) {
  const started = Date.now();
  for (;;) {
    const spans = decodeOtlp(receiver.bodies);
    const mine = spans.filter((s) => s.name.startsWith("invoke_agent") && s.attributes["steadfast.run.id"] === runId);
    if (mine.length >= roots) {
      const traces = new Set(mine.map((s) => s.traceId));
      return { all: spans.filter((s) => traces.has(s.traceId)), roots: mine };
    }
    assert.ok(Date.now() - started < 15000, `the spans of ${runId} arrive (${mine.length} of ${roots} executions)`);
    await sleep(100);
  }
}

// The caller's trace, one per mode (the receiver keeps every test's spans).
const CALLER = { kv: "4bf92f3577b34da6a3ce929d0e0e4736", strict: "5cf92f3577b34da6a3ce929d0e0e4737" };
const CALLER_SPAN = "00f067aa0ba902b7";
const ctxOf = (s) => `00-${s.traceId}-${s.spanId}-01`;

for (const mode of ["kv", "strict"]) {
  test(`${mode}: a run's spans reach the OTLP receiver, decode with the OpenTelemetry protos, nest under the caller's traceparent and name what they called`, { timeout: 90000 }, async () => {
    const mf = worker({ ...base, tracing: tracing(oPort) }, mode === "strict");
    const runId = `traced-${mode}`;
    const CALLER_TRACE = CALLER[mode];
    const before = { model: seen.model.length, charge: seen.charge.length };
    const res = await mf.dispatchFetch(`http://localhost/runs/${runId}`, {
      method: "POST",
      headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json", traceparent: `00-${CALLER_TRACE}-${CALLER_SPAN}-01` },
      body: JSON.stringify({ input: "charge it" }),
    });
    const answer = await res.json();
    assert.equal(answer.status, "finished", JSON.stringify(answer));
    const { all, roots } = await spansOf(runId, 1);
    assertSemconv(all);
    const [root] = roots;
    assert.equal(root.traceId, CALLER_TRACE, "the caller's trace");
    assert.equal(root.parentSpanId, CALLER_SPAN, "the caller's span is the execution's parent");
    assert.equal(root.name, "invoke_agent lead");
    assert.equal(root.attributes["gen_ai.operation.name"], "invoke_agent");
    assert.equal(root.resource["service.name"], "steadfast-e2e");
    assert.equal(root.kind, 1);
    const chats = all.filter((s) => s.name === "chat gpt-test");
    const tools = all.filter((s) => s.name === "execute_tool charge");
    assert.equal(chats.length, 2, all.map((s) => s.name).join(", "));
    assert.equal(tools.length, 1);
    for (const s of [...chats, ...tools]) {
      assert.equal(s.parentSpanId, root.spanId, `${s.name} hangs from the execution`);
      assert.ok(s.startTimeUnixNano >= root.startTimeUnixNano && s.endTimeUnixNano <= root.endTimeUnixNano, `${s.name} within it`);
    }
    for (const c of chats) {
      assert.equal(c.kind, 3, "a client span");
      assert.equal(c.attributes["gen_ai.provider.name"], "openai");
      assert.equal(c.attributes["gen_ai.request.model"], "gpt-test");
      assert.equal(c.attributes["gen_ai.usage.input_tokens"], 10);
      assert.equal(c.attributes["gen_ai.usage.output_tokens"], 5);
    }
    assert.deepEqual(chats.map((c) => c.attributes["gen_ai.response.finish_reasons"]).sort(), [["stop"], ["tool_calls"]]);
    assert.equal(tools[0].attributes["gen_ai.tool.call.id"], "call_1");
    // Contents are off: no messages or arguments on the spans.
    assert.ok(all.every((s) => !("gen_ai.input.messages" in s.attributes) && !("gen_ai.tool.call.arguments" in s.attributes)));
    // The provider and the webhook were told their own span.
    assert.deepEqual(seen.model.slice(before.model).sort(), chats.map(ctxOf).sort(), "the provider got each chat span's traceparent");
    assert.deepEqual(seen.charge.slice(before.charge), tools.map(ctxOf), "the webhook got its tool span's traceparent");
    assert.ok(receiver.headers.every((h) => h.authorization === "Bearer otlp-secret" && h["content-type"] === "application/json"));
  });

  test(`${mode}: a failed execution and the resume that finishes the run are two traces, the second linked to the first`, { timeout: 90000 }, async () => {
    const mf = worker({ ...base, tracing: tracing(oPort) }, mode === "strict");
    const runId = `linked-${mode}`;
    const first = await call(mf, "POST", `/runs/${runId}`, { input: `fail once ${mode}` });
    assert.equal(first.json.error?.code, "STEADFAST_PROVIDER_BAD_REQUEST", first.text);
    const resumed = await call(mf, "POST", `/runs/${runId}/resume`, {});
    assert.equal(resumed.json.status, "finished", resumed.text);
    const { all, roots } = await spansOf(runId, 2);
    assertSemconv(all);
    const failed = roots.find((r) => r.status.code === 2);
    const later = roots.find((r) => r !== failed);
    assert.ok(failed && later, "one failed execution, one that finished");
    assert.notEqual(failed.traceId, later.traceId, "one trace per execution");
    assert.deepEqual(later.links.map((l) => [l.traceId, l.spanId]), [[failed.traceId, failed.spanId]], "the resume links to the failed execution");
    assert.equal(failed.attributes["error.type"], "STEADFAST_PROVIDER_BAD_REQUEST");
    assert.equal(later.attributes["steadfast.resumed"], true);
  });
}

test("kv: an exporter that hangs does not slow a run (p50), one that cannot be reached is counted as dropped", { timeout: 120000 }, async () => {
  // A short settle window: a run's request takes tens of ms, not the default second, so the p50s compare.
  const fast = { ...base, settleMs: 150, lease: { ttlMs: 2000, renewEveryMs: 500, graceMs: 500 } };
  const quiet = worker(fast, false);
  const hanging = worker({ ...fast, tracing: tracing(oPort) }, false);
  const unreachable = worker({ ...fast, tracing: tracing(closedPort) }, false);
  receiver.hang = true;
  const times = { off: [], hanging: [] };
  const send = async (mf, id) => {
    const t0 = performance.now();
    const r = await call(mf, "POST", `/runs/${id}`, { input: "charge it" });
    const ms = performance.now() - t0;
    assert.equal(r.json.status, "finished", r.text);
    return ms;
  };
  // Warm both isolates, then alternate.
  await send(quiet, "warm-off");
  await send(hanging, "warm-hang");
  for (let i = 0; i < 15; i++) {
    times.off.push(await send(quiet, `p-off-${i}`));
    times.hanging.push(await send(hanging, `p-hang-${i}`));
  }
  receiver.hang = false;
  const p50 = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  const added = p50(times.hanging) - p50(times.off);
  console.log(`p50 per run: tracing off ${p50(times.off).toFixed(2)} ms, exporter hanging ${p50(times.hanging).toFixed(2)} ms, added ${added.toFixed(2)} ms`);
  assert.ok(added < 10, `a hanging exporter added ${added.toFixed(2)} ms at p50`);
  // Unreachable: the export fails after the reply; its spans are counted as dropped.
  await send(unreachable, "unreachable-1");
  const started = Date.now();
  let dropped = 0;
  while (Date.now() - started < 15000) {
    const m = await unreachable.dispatchFetch("http://localhost/metrics", { headers: { authorization: `Bearer ${TOKEN}` } });
    const line = (await m.text()).split("\n").find((l) => l.startsWith('steadfast_trace_spans_dropped_total{agent="lead"}'));
    dropped = Number(line?.split(" ")[1] ?? 0);
    if (dropped > 0) break;
    await sleep(100);
  }
  assert.equal(dropped, 4, "the run's 4 spans (execution, 2 chats, 1 tool) were dropped and counted");
});
