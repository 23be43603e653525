// Traces from the npm package (issue 32): `createAgent({ tracing: { exporter } })` with an OTLP/HTTP endpoint (a
// local receiver on 127.0.0.1) and with OpenTelemetry JS's own `OTLPTraceExporter` (npm
// @opentelemetry/exporter-trace-otlp-http, given our spans as `ReadableSpan`s) and `InMemorySpanExporter`. The
// bodies the receiver gets are decoded by the OpenTelemetry project's protobuf classes (tests/otlp/decode.py) and
// their names checked against @opentelemetry/semantic-conventions. A failed execution and its resume link; a tool
// is told its span's traceparent; an exporter that never answers does not slow a run (p50, printed) and its
// spans are counted as dropped once it times out.
import test, { after } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import { createAgent, defineTool, memoryStore, ProviderHttpError } from "steadfast";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-http";
import { InMemorySpanExporter } from "@opentelemetry/sdk-trace";
import { decodeOtlp, assertSemconv } from "../../tests/otlp/support.mjs";

const bodies = [];
const receiver = http.createServer((req, res) => {
  let body = "";
  req.on("data", (c) => (body += c));
  req.on("end", () => {
    if (req.url === "/fail") {
      res.writeHead(500);
      return res.end("down");
    }
    bodies.push({ body, headers: req.headers, type: req.headers["content-type"] });
    res.writeHead(200, { "content-type": "application/json" });
    res.end("{}");
  });
});
const port = await new Promise((r) => receiver.listen(0, "127.0.0.1", () => r(receiver.address().port)));
after(() => receiver.close());
const url = `http://127.0.0.1:${port}/v1/traces`;

const usage = { inputTokens: 10, outputTokens: 5 };
function model(state = {}) {
  return {
    id: "js-model",
    async generate(req) {
      if (state.failFirst && !state.failed) {
        state.failed = true;
        throw new ProviderHttpError(400, "a bad request, once");
      }
      const charged = req.messages.some((m) => m.role === "tool");
      return charged
        ? { text: "charged", stopReason: "stop", usage }
        : { text: "", toolCalls: [{ id: "c1", name: "charge", args: { amount: 5 } }], stopReason: "tool_calls", usage };
    },
  };
}
function chargeTool(seen) {
  return defineTool({
    name: "charge",
    description: "Charge the card",
    inputSchema: { type: "object", properties: { amount: { type: "number" } } },
    execute: async (_args, ctx) => {
      seen.push(ctx.traceparent);
      return "ok";
    },
  });
}
const ctxOf = (s) => `00-${s.traceId}-${s.spanId}-01`;

test("an OTLP endpoint gets a run's spans: they decode with the OpenTelemetry protos and nest; the tool is told its span", async () => {
  const seen = [];
  const agent = createAgent({
    model: model(),
    tools: [chargeTool(seen)],
    store: memoryStore(),
    tracing: { exporter: { url, headers: { authorization: "Bearer k" } }, serviceName: "npm-test" },
  });
  const before = bodies.length;
  const r = await agent.send("charge it", { sessionId: "t-endpoint" });
  assert.equal(r.text, "charged");
  await agent.flushTraces();
  const got = bodies.slice(before);
  assert.ok(got.length >= 1 && got.every((b) => b.headers.authorization === "Bearer k" && b.type === "application/json"));
  const spans = decodeOtlp(got.map((b) => b.body));
  assertSemconv(spans);
  const root = spans.find((s) => s.name === "invoke_agent lead");
  assert.ok(root, spans.map((s) => s.name).join(", "));
  assert.equal(root.parentSpanId, null);
  assert.equal(root.resource["service.name"], "npm-test");
  assert.equal(root.resource["telemetry.sdk.name"], "steadfast");
  const chats = spans.filter((s) => s.name === "chat js-model");
  const tools = spans.filter((s) => s.name === "execute_tool charge");
  assert.equal(chats.length, 2);
  assert.equal(tools.length, 1);
  for (const s of [...chats, ...tools]) assert.equal(s.parentSpanId, root.spanId);
  assert.deepEqual(seen, [ctxOf(tools[0])], "the tool's ctx.traceparent names its span");
  assert.equal(tools[0].attributes["gen_ai.tool.call.id"], "c1");
});

test("OpenTelemetry JS's OTLPTraceExporter and InMemorySpanExporter take the spans as ReadableSpans; a resume links to the failed execution", async () => {
  const memory = new InMemorySpanExporter();
  const upstream = new OTLPTraceExporter({ url });
  const both = {
    export(spans, done) {
      memory.export(spans, () => upstream.export(spans, done));
    },
  };
  const state = { failFirst: true };
  const agent = createAgent({ model: model(state), tools: [chargeTool([])], store: memoryStore(), tracing: { exporter: both } });
  const before = bodies.length;
  await assert.rejects(agent.send("charge it", { sessionId: "t-otel" }), (e) => e.code === "STEADFAST_PROVIDER_BAD_REQUEST");
  const r = await agent.resume("t-otel");
  assert.equal(r.status, "finished");
  await agent.flushTraces();
  // The upstream exporter's own serialisation of our ReadableSpans, decoded by the protos.
  const got = bodies.slice(before);
  assert.ok(got.length >= 1, "the upstream exporter sent");
  const spans = decodeOtlp(got.map((b) => b.body));
  assertSemconv(spans);
  const roots = spans.filter((s) => s.name === "invoke_agent lead");
  assert.equal(roots.length, 2);
  const failed = roots.find((s) => s.status.code === 2);
  const later = roots.find((s) => s !== failed);
  assert.ok(failed && later);
  assert.deepEqual(later.links.map((l) => [l.traceId, l.spanId]), [[failed.traceId, failed.spanId]], "the resume links to the failed execution");
  assert.equal(failed.attributes["error.type"], "STEADFAST_PROVIDER_BAD_REQUEST");
  for (const s of spans.filter((x) => x.parentSpanId !== null)) {
    const parent = roots.find((x) => x.spanId === s.parentSpanId);
    assert.ok(parent && parent.traceId === s.traceId, `${s.name} nests in its execution`);
  }
  // The in-memory exporter holds the same spans, as the SDK's types read them.
  const finished = memory.getFinishedSpans();
  assert.equal(finished.length, spans.length);
  const chat = finished.find((s) => s.name === "chat js-model");
  assert.equal(chat.kind, 2, "SpanKind.CLIENT");
  assert.equal(chat.spanContext().traceId.length, 32);
});

test("an exporter that never answers does not slow runs (p50, printed); its spans are dropped and counted once it times out", async () => {
  const hang = { export() {} };
  const quiet = createAgent({ model: model(), tools: [chargeTool([])], store: memoryStore() });
  const hanging = createAgent({
    model: model(),
    tools: [chargeTool([])],
    store: memoryStore(),
    tracing: { exporter: hang, timeoutMs: 200, maxBufferedSpans: 100000 },
  });
  const times = { off: [], hanging: [] };
  const timed = async (agent, id) => {
    const t0 = performance.now();
    await agent.send("charge it", { sessionId: id });
    return performance.now() - t0;
  };
  for (let i = 0; i < 5; i++) await Promise.all([timed(quiet, `w-off-${i}`), timed(hanging, `w-h-${i}`)]);
  for (let i = 0; i < 40; i++) {
    times.off.push(await timed(quiet, `p-off-${i}`));
    times.hanging.push(await timed(hanging, `p-h-${i}`));
  }
  const p50 = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  const added = p50(times.hanging) - p50(times.off);
  console.log(`p50 per run: tracing off ${p50(times.off).toFixed(3)} ms, exporter hanging ${p50(times.hanging).toFixed(3)} ms, added ${added.toFixed(3)} ms`);
  assert.ok(added < 1, `a hanging exporter added ${added.toFixed(3)} ms at p50`);
  await hanging.flushTraces();
  const dropped = (await hanging.metrics()).find((m) => m.agent === "lead" && m.name === "steadfast_trace_spans_dropped_total");
  assert.equal(dropped.value, 45 * 4, "every span of the 45 runs (4 each) was given up on and counted");
});

test("an endpoint that answers 500 fails no run; its spans are counted as dropped", async () => {
  const agent = createAgent({
    model: model(),
    tools: [chargeTool([])],
    store: memoryStore(),
    tracing: { exporter: { url: `http://127.0.0.1:${port}/fail` } },
  });
  for (const id of ["f-1", "f-2"]) assert.equal((await agent.send("charge it", { sessionId: id })).text, "charged");
  await agent.flushTraces();
  const dropped = (await agent.metrics()).find((m) => m.name === "steadfast_trace_spans_dropped_total");
  assert.equal(dropped.value, 8, "both runs' 4 spans each");
});

test("a bad tracing option is a coded error naming it", () => {
  for (const [tracing, want] of [
    [{}, "exporter must be"],
    [{ exporter: { url: "ftp://x" } }, "must be http(s)"],
    [{ exporter: { url: "not a url" } }, "not a URL"],
    [{ exporter: { url }, sample: 1 }, "unknown option 'sample'"],
    [{ exporter: { url }, contents: "yes" }, "contents must be"],
    [{ exporter: { url }, maxBufferedSpans: 0 }, "maxBufferedSpans"],
    [{ exporter: { url, headers: { a: 1 } } }, "exporter.headers.a"],
  ]) {
    assert.throws(
      () => createAgent({ model: model(), store: memoryStore(), tracing }),
      (e) => e.code === "STEADFAST_CONFIG_INVALID" && e.message.includes(want),
      JSON.stringify(tracing),
    );
  }
});
