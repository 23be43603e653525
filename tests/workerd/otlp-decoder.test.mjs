// The OTLP decoder the trace export's tests rely on (tests/otlp/decode.py through tests/otlp/support.mjs): it
// decodes a well-formed OTLP/HTTP JSON trace request with the OpenTelemetry project's protobuf classes into the
// normalized spans (hex ids, int64 strings read as integers, attribute values unwrapped), and it refuses what a
// plain JSON.parse would take: an unknown field, a base64 trace id, a short span id, an unknown attribute value type,
// an end before the start. assertSemconv refuses a gen_ai.* name the pinned semantic conventions do not define.
import { test } from "node:test";
import assert from "node:assert/strict";
import { assertSemconv, decodeOtlp } from "../otlp/support.mjs";

const TRACE = "5b8efff798038103d269b633813fc60c";
const PARENT = "eee19b7ec3c1b174";
const CHILD = "0af7651916cd43dd";
const LINKED_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736";
const LINKED_SPAN = "00f067aa0ba902b7";
const T0 = 1733300000123456789n; // above 2^53: a Number would round it

const str = (s) => ({ stringValue: s });
const int = (n) => ({ intValue: String(n) }); // OTLP JSON writes int64 as a decimal string

// A hand-written request as an OTLP/HTTP JSON exporter sends it: an invoke_agent span and its chat child (an event,
// a link to another trace, status error), kind as an integer.
function request() {
  return {
    resourceSpans: [
      {
        resource: { attributes: [{ key: "service.name", value: str("steadfast") }] },
        scopeSpans: [
          {
            scope: { name: "steadfast", version: "0.1.0" },
            spans: [
              {
                traceId: TRACE,
                spanId: PARENT,
                name: "invoke_agent support",
                kind: 1,
                startTimeUnixNano: String(T0),
                endTimeUnixNano: String(T0 + 5_000_000n),
                attributes: [
                  { key: "gen_ai.operation.name", value: str("invoke_agent") },
                  { key: "gen_ai.agent.name", value: str("support") },
                ],
                status: {},
              },
              {
                traceId: TRACE,
                spanId: CHILD,
                parentSpanId: PARENT,
                name: "chat gpt-4o",
                kind: 3,
                startTimeUnixNano: String(T0 + 1_000_000n),
                endTimeUnixNano: String(T0 + 4_000_000n),
                attributes: [
                  { key: "gen_ai.operation.name", value: str("chat") },
                  { key: "gen_ai.request.model", value: str("gpt-4o") },
                  { key: "gen_ai.usage.input_tokens", value: int(1234) },
                  { key: "gen_ai.usage.output_tokens", value: int(56) },
                  { key: "gen_ai.response.finish_reasons", value: { arrayValue: { values: [str("stop")] } } },
                  { key: "gen_ai.request.temperature", value: { doubleValue: 0.5 } },
                  { key: "gen_ai.request.stream", value: { boolValue: false } },
                  { key: "error.type", value: str("timeout") },
                ],
                events: [
                  {
                    name: "exception",
                    timeUnixNano: String(T0 + 3_000_000n),
                    attributes: [
                      { key: "exception.type", value: str("TimeoutError") },
                      { key: "attempt", value: int(2) },
                    ],
                  },
                ],
                links: [{ traceId: LINKED_TRACE, spanId: LINKED_SPAN, attributes: [{ key: "why", value: str("resumed") }] }],
                status: { code: 2, message: "the provider timed out" },
              },
            ],
          },
        ],
      },
    ],
  };
}

const body = (mutate = () => {}) => {
  const r = request();
  mutate(r.resourceSpans[0].scopeSpans[0].spans);
  return JSON.stringify(r);
};

test("a well-formed OTLP JSON trace request decodes into the normalized spans", () => {
  const spans = decodeOtlp([body()]);
  const resource = { "service.name": "steadfast" };
  assert.deepEqual(spans, [
    {
      traceId: TRACE,
      spanId: PARENT,
      parentSpanId: null,
      name: "invoke_agent support",
      kind: 1,
      startTimeUnixNano: T0,
      endTimeUnixNano: T0 + 5_000_000n,
      attributes: { "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support" },
      events: [],
      links: [],
      status: { code: 0, message: "" },
      resource,
      scope: "steadfast",
    },
    {
      traceId: TRACE,
      spanId: CHILD,
      parentSpanId: PARENT,
      name: "chat gpt-4o",
      kind: 3,
      startTimeUnixNano: T0 + 1_000_000n,
      endTimeUnixNano: T0 + 4_000_000n,
      attributes: {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "gpt-4o",
        "gen_ai.usage.input_tokens": 1234,
        "gen_ai.usage.output_tokens": 56,
        "gen_ai.response.finish_reasons": ["stop"],
        "gen_ai.request.temperature": 0.5,
        "gen_ai.request.stream": false,
        "error.type": "timeout",
      },
      events: [
        { name: "exception", timeUnixNano: T0 + 3_000_000n, attributes: { "exception.type": "TimeoutError", attempt: 2 } },
      ],
      links: [{ traceId: LINKED_TRACE, spanId: LINKED_SPAN, attributes: { why: "resumed" } }],
      status: { code: 2, message: "the provider timed out" },
      resource,
      scope: "steadfast",
    },
  ]);
  // Several bodies: their spans, concatenated in order.
  assert.deepEqual(decodeOtlp([body(), body()]).map((s) => s.spanId), [PARENT, CHILD, PARENT, CHILD]);
  assert.deepEqual(decodeOtlp([]), []);
});

const refusals = [
  ["an unknown field name on a span", /has no field named "durationNanos"/, (spans) => {
    spans[1].durationNanos = "3000000";
  }],
  ["a traceId in base64 instead of hex", /traceId: 'W47\/95gDgQPSabYzgT\/GDA==' is not 32 lowercase hex digits/, (spans) => {
    spans[0].traceId = Buffer.from(TRACE, "hex").toString("base64");
  }],
  ["a spanId of the wrong length", /spanId: '0af7651916cd43' is not 16 lowercase hex digits/, (spans) => {
    spans[1].spanId = CHILD.slice(0, 14);
  }],
  ["an attribute value with an unknown value-type key", /AnyValue" has no field named "integerValue"/, (spans) => {
    spans[1].attributes[2].value = { integerValue: "1234" };
  }],
  ["an end before the start", /endTimeUnixNano 1733300000123456788 is before startTimeUnixNano 1733300000123456789/, (spans) => {
    spans[0].endTimeUnixNano = String(T0 - 1n);
  }],
];

for (const [what, message, mutate] of refusals) {
  test(`the decoder refuses ${what}, naming the body's file`, () => {
    const bad = body(mutate);
    // Plain JSON would take it: only the OTLP decoding refuses it.
    assert.equal(JSON.parse(bad).resourceSpans[0].scopeSpans[0].spans.length, 2);
    assert.throws(() => decodeOtlp([body(), bad]), (e) => {
      assert.match(e.message, message);
      assert.match(e.message, /decode\.py: \S*body-1\.json: /);
      return true;
    });
  });
}

test("assertSemconv refuses a gen_ai.* name or operation the semantic conventions do not define and takes real ones", () => {
  const spans = decodeOtlp([body()]);
  assert.doesNotThrow(() => assertSemconv(spans));
  const withAttribute = (key, value) => spans.map((s, i) => (i === 1 ? { ...s, attributes: { ...s.attributes, [key]: value } } : s));
  assert.doesNotThrow(() => assertSemconv(withAttribute("gen_ai.provider.name", "openai")));
  assert.doesNotThrow(() => assertSemconv(withAttribute("gen_ai.tool.call.id", "call_1")));
  assert.doesNotThrow(() => assertSemconv(withAttribute("app.custom", 1))); // outside gen_ai.*: not checked
  assert.throws(() => assertSemconv(withAttribute("gen_ai.made_up_name", "x")), {
    name: "AssertionError",
    message: /attribute "gen_ai\.made_up_name" is not an attribute name/,
  });
  assert.throws(() => assertSemconv(withAttribute("gen_ai.operation.name", "think")), {
    name: "AssertionError",
    message: /gen_ai\.operation\.name "think" is not one of .*invoke_agent/,
  });
  const eventWith = (key) => spans.map((s, i) => (i === 1 ? { ...s, events: [{ ...s.events[0], attributes: { [key]: "x" } }] } : s));
  assert.throws(() => assertSemconv(eventWith("gen_ai.made_up_name")), {
    name: "AssertionError",
    message: /event "exception" of span "chat gpt-4o": attribute "gen_ai\.made_up_name"/,
  });
});
