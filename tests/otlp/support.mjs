// The OTLP trace export's test helpers: decoding exported bodies with the OpenTelemetry project's own protobuf classes
// (tests/otlp/decode.py, which ./scripts/setup's opentelemetry-proto serves) and checking attribute names against
// @opentelemetry/semantic-conventions (pinned in package.json), so neither is our own reading of the specs.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import * as semconv from "@opentelemetry/semantic-conventions/incubating";

const DECODE_PY = fileURLToPath(new URL("./decode.py", import.meta.url));
const REPO_ROOT = fileURLToPath(new URL("../..", import.meta.url));

/**
 * Decodes OTLP/HTTP JSON trace export request bodies (strings) and returns their spans, concatenated in order, as
 * tests/otlp/decode.py prints them: {traceId, spanId, parentSpanId (hex or null), name, kind, startTimeUnixNano,
 * endTimeUnixNano, attributes, events: [{name, timeUnixNano, attributes}], links: [{traceId, spanId, attributes}],
 * status: {code, message}, resource, scope}. The *UnixNano times are BigInts (they are above 2^53, where a Number
 * would round them): compare them with BigInts (1n) or each other. Throws with decode.py's stderr when any body is
 * not a valid OTLP JSON ExportTraceServiceRequest.
 */
export function decodeOtlp(bodies) {
  assert.ok(Array.isArray(bodies), "decodeOtlp takes an array of request bodies");
  const dir = mkdtempSync(join(tmpdir(), "otlp-"));
  try {
    const files = bodies.map((body, i) => {
      assert.equal(typeof body, "string", `decodeOtlp: body ${i} is a ${typeof body}, not a string`);
      const file = join(dir, `body-${i}.json`);
      writeFileSync(file, body);
      return file;
    });
    if (files.length === 0) return [];
    const run = spawnSync("python3", [DECODE_PY, "--js", ...files], {
      cwd: REPO_ROOT,
      encoding: "utf8",
      maxBuffer: 256 * 1024 * 1024,
    });
    if (run.error) throw new Error(`decodeOtlp: could not run python3 ${DECODE_PY}: ${run.error.message}`);
    if (run.status !== 0) {
      throw new Error(`decodeOtlp: the OTLP decoder refused the export (exit ${run.status ?? run.signal}):\n${run.stderr}`);
    }
    const spans = JSON.parse(run.stdout);
    for (const span of spans) {
      span.startTimeUnixNano = BigInt(span.startTimeUnixNano);
      span.endTimeUnixNano = BigInt(span.endTimeUnixNano);
      for (const event of span.events) event.timeUnixNano = BigInt(event.timeUnixNano);
    }
    return spans;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

// The attribute names the pinned semantic conventions define (the string values of the ATTR_* exports; a few are
// functions, templates such as http.request.header.<key>, and are left out) and gen_ai.operation.name's values.
const ATTRIBUTE_NAMES = new Set(
  Object.entries(semconv)
    .filter(([name, value]) => name.startsWith("ATTR_") && typeof value === "string")
    .map(([, value]) => value),
);
const OPERATION_NAMES = new Set(
  Object.entries(semconv)
    .filter(([name]) => name.startsWith("GEN_AI_OPERATION_NAME_VALUE_"))
    .map(([, value]) => value),
);

/**
 * Asserts that every attribute key of the spans (and of their events and links) that starts with "gen_ai." or is
 * "error.type" is an attribute name of @opentelemetry/semantic-conventions/incubating, and that every
 * gen_ai.operation.name is one of its GEN_AI_OPERATION_NAME_VALUE_* values. Throws an AssertionError naming the key.
 */
export function assertSemconv(spans) {
  assert.ok(Array.isArray(spans), "assertSemconv takes the span list decodeOtlp returns");
  for (const span of spans) {
    const owners = [
      [`span ${JSON.stringify(span.name)}`, span.attributes],
      ...(span.events ?? []).map((e) => [`event ${JSON.stringify(e.name)} of span ${JSON.stringify(span.name)}`, e.attributes]),
      ...(span.links ?? []).map((l, i) => [`link ${i} of span ${JSON.stringify(span.name)}`, l.attributes]),
    ];
    for (const [owner, attributes] of owners) {
      for (const [key, value] of Object.entries(attributes ?? {})) {
        if (!(key.startsWith("gen_ai.") || key === "error.type")) continue;
        assert.ok(
          ATTRIBUTE_NAMES.has(key),
          `${owner}: attribute ${JSON.stringify(key)} is not an attribute name of @opentelemetry/semantic-conventions`,
        );
        if (key === "gen_ai.operation.name") {
          assert.ok(
            OPERATION_NAMES.has(value),
            `${owner}: gen_ai.operation.name ${JSON.stringify(value)} is not one of ${[...OPERATION_NAMES].join(", ")}`,
          );
        }
      }
    }
  }
}
