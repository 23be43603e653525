// Traces of an agent's executions (`createAgent({ tracing })`): the core makes OpenTelemetry spans in the GenAI
// semantic conventions and keeps them in a bounded buffer; this module sends them, after the work that made them,
// to an OTLP/HTTP endpoint (`{ url, headers }`, as OTLP JSON with `fetch`) or to an OpenTelemetry JS
// `SpanExporter` (`@opentelemetry/sdk-trace-base`'s exporters, any object with `export(spans, done)`), as
// `ReadableSpan`s. A run never waits for its traces: a send that fails or hangs is dropped and counted
// (`steadfast_trace_spans_dropped_total` in `agent.metrics()`).
import { SteadfastError } from "./errors.js";

/** What the sender needs of the core's agent (`JsAgent`): its waiting spans, and where to count a failed send. */
interface TraceSource {
  takeTraces(): unknown;
  tracesDropped(n: number): void;
}

/** An OTLP/HTTP traces endpoint: `url` (`…/v1/traces`) and headers (an API key) sent with each export. */
export interface OtlpEndpoint {
  url: string;
  headers?: Record<string, string>;
}

/** The part of an OpenTelemetry JS `SpanExporter` the agent uses (`export`, and `shutdown` if it has one). */
export interface SpanExporterLike {
  export(spans: ReadableSpanLike[], resultCallback: (result: { code: number; error?: Error }) => void): void;
  shutdown?(): Promise<void>;
}

/** `createAgent({ tracing })`. */
export interface TracingOptions {
  /** Where spans go: an OTLP/HTTP endpoint, or an OpenTelemetry JS `SpanExporter`. */
  exporter: OtlpEndpoint | SpanExporterLike;
  /** Put message contents on the spans (tool arguments, the model's input and output); default `false`. */
  contents?: boolean;
  /** The spans' `service.name` (default `steadfast`). */
  serviceName?: string;
  /** Spans kept until sent, at most (default 2,048): past it, spans are dropped and counted. */
  maxBufferedSpans?: number;
  /** Give up on one export after this many ms (default 10,000): its spans are dropped and counted. */
  timeoutMs?: number;
}

type HrTime = [number, number];
type Attributes = Record<string, string | number | boolean | string[]>;
interface SpanContextLike {
  traceId: string;
  spanId: string;
  traceFlags: number;
}

/** A span as OpenTelemetry JS's `ReadableSpan` has it (what its exporters read). */
export interface ReadableSpanLike {
  name: string;
  kind: number;
  spanContext(): SpanContextLike;
  parentSpanContext?: SpanContextLike;
  parentSpanId?: string;
  startTime: HrTime;
  endTime: HrTime;
  duration: HrTime;
  status: { code: number; message?: string };
  attributes: Attributes;
  links: { context: SpanContextLike; attributes: Attributes }[];
  events: { name: string; time: HrTime; attributes: Attributes }[];
  ended: boolean;
  resource: { attributes: Attributes; asyncAttributesPending?: boolean; schemaUrl?: string };
  instrumentationScope: { name: string; version?: string };
  instrumentationLibrary: { name: string; version?: string };
  droppedAttributesCount: number;
  droppedEventsCount: number;
  droppedLinksCount: number;
}

const bad = (m: string) => new SteadfastError("STEADFAST_CONFIG_INVALID", `tracing: ${m}`);

/** What the core is given for `tracing`, and the sender that reads the agent once it exists. */
export function tracingParts(given: unknown): { low: object; sender: Sender } | undefined {
  if (given === undefined) return undefined;
  if (typeof given !== "object" || given === null) throw bad("must be an object { exporter, contents?, serviceName?, maxBufferedSpans? }");
  const { exporter, contents = false, serviceName = "steadfast", maxBufferedSpans = 2048, timeoutMs = 10_000, ...rest } =
    given as TracingOptions;
  const unknown = Object.keys(rest);
  if (unknown.length > 0) throw bad(`unknown option '${unknown[0]}'`);
  if (typeof contents !== "boolean") throw bad("contents must be true or false");
  if (typeof serviceName !== "string" || serviceName === "") throw bad("serviceName must be a non-empty string");
  if (typeof timeoutMs !== "number" || !(timeoutMs >= 1)) throw bad("timeoutMs must be a number of at least 1");
  const isExporter = typeof exporter === "object" && exporter !== null && typeof (exporter as SpanExporterLike).export === "function";
  const isEndpoint = typeof exporter === "object" && exporter !== null && typeof (exporter as OtlpEndpoint).url === "string";
  if (!isExporter && !isEndpoint) {
    throw bad("exporter must be an OTLP endpoint { url, headers? } or an OpenTelemetry SpanExporter (with export(spans, done))");
  }
  if (isEndpoint && !isExporter) {
    const e = exporter as OtlpEndpoint;
    let url: URL;
    try {
      url = new URL(e.url);
    } catch {
      throw bad(`exporter.url is not a URL: ${JSON.stringify(e.url)}`);
    }
    if (url.protocol !== "https:" && url.protocol !== "http:") throw bad("exporter.url must be http(s)");
    for (const [k, v] of Object.entries(e.headers ?? {})) {
      if (typeof v !== "string") throw bad(`exporter.headers.${k} must be a string`);
    }
  }
  const sender = new Sender(isExporter ? (exporter as SpanExporterLike) : (exporter as OtlpEndpoint), timeoutMs);
  return { low: { notify: () => sender.notify(), contents, serviceName, maxBufferedSpans }, sender };
}

/** Sends an agent's spans once they wait (a microtask after they ended), one export at a time at most four. */
export class Sender {
  private agent?: TraceSource;
  private scheduled = false;
  private inFlight = new Set<Promise<void>>();

  constructor(
    private readonly to: OtlpEndpoint | SpanExporterLike,
    private readonly timeoutMs: number,
  ) {}

  attach(agent: TraceSource): void {
    this.agent = agent;
  }

  notify(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    queueMicrotask(() => {
      this.scheduled = false;
      this.send();
    });
  }

  /** Sends what waits now (at most four exports in flight: past that, spans wait in the bounded buffer). */
  private send(): void {
    if (this.agent === undefined || this.inFlight.size >= 4) return;
    const taken = this.agent.takeTraces() as [string, number] | undefined;
    if (taken === undefined) return;
    const [body, count] = taken;
    const agent = this.agent;
    const p: Promise<void> = this.export(body)
      .then((ok) => {
        if (!ok) agent.tracesDropped(count);
      })
      .finally(() => {
        this.inFlight.delete(p);
        // Spans that waited for a free slot.
        this.notify();
      });
    this.inFlight.add(p);
  }

  /** Resolves once every export started so far has ended (for a Worker's `ctx.waitUntil`). */
  async flush(): Promise<void> {
    this.send();
    while (this.inFlight.size > 0) {
      await Promise.allSettled([...this.inFlight]);
      this.send();
    }
  }

  private async export(body: string): Promise<boolean> {
    const to = this.to;
    try {
      if ("export" in to && typeof to.export === "function") {
        const spans = readableSpans(body);
        // An exporter that never calls back is given up on after the timeout.
        let timer: ReturnType<typeof setTimeout> | undefined;
        const late = new Promise<boolean>((resolve) => {
          timer = setTimeout(() => resolve(false), this.timeoutMs);
          // Node: a hanging exporter does not keep the process alive.
          (timer as { unref?: () => void }).unref?.();
        });
        const done = new Promise<boolean>((resolve) => to.export(spans, (r) => resolve(r.code === 0)));
        return await Promise.race([done, late]).finally(() => clearTimeout(timer));
      }
      const e = to as OtlpEndpoint;
      const res = await fetch(e.url, {
        method: "POST",
        headers: { ...(e.headers ?? {}), "content-type": "application/json" },
        body,
        signal: AbortSignal.timeout(this.timeoutMs),
      });
      await res.body?.cancel();
      return res.ok;
    } catch {
      return false;
    }
  }
}

interface OtlpValue {
  stringValue?: string;
  intValue?: string;
  boolValue?: boolean;
  doubleValue?: number;
  arrayValue?: { values: OtlpValue[] };
}
interface OtlpKeyValue {
  key: string;
  value: OtlpValue;
}
interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  startTimeUnixNano: string;
  endTimeUnixNano: string;
  attributes: OtlpKeyValue[];
  events: { timeUnixNano: string; name: string; attributes: OtlpKeyValue[] }[];
  links: { traceId: string; spanId: string }[];
  status: { code?: number; message?: string };
}

const value = (v: OtlpValue): string | number | boolean | string[] =>
  v.stringValue ?? (v.intValue !== undefined ? Number(v.intValue) : undefined) ?? v.boolValue ?? v.doubleValue ??
  (v.arrayValue?.values ?? []).map((x) => x.stringValue ?? "");
const attributes = (kvs: OtlpKeyValue[]): Attributes => Object.fromEntries(kvs.map((kv) => [kv.key, value(kv.value)]));
const hrTime = (nanos: string): HrTime => {
  const n = BigInt(nanos);
  return [Number(n / 1_000_000_000n), Number(n % 1_000_000_000n)];
};

/** The spans of an OTLP JSON body as OpenTelemetry JS `ReadableSpan`s (OTLP's kind is JS's kind + 1). */
export function readableSpans(body: string): ReadableSpanLike[] {
  const req = JSON.parse(body) as {
    resourceSpans: { resource: { attributes: OtlpKeyValue[] }; scopeSpans: { scope: { name: string; version?: string }; spans: OtlpSpan[] }[] }[];
  };
  const out: ReadableSpanLike[] = [];
  for (const rs of req.resourceSpans) {
    const resource = { attributes: attributes(rs.resource.attributes), asyncAttributesPending: false };
    for (const ss of rs.scopeSpans) {
      for (const s of ss.spans) {
        const ctx = { traceId: s.traceId, spanId: s.spanId, traceFlags: 1 };
        const [start, end] = [BigInt(s.startTimeUnixNano), BigInt(s.endTimeUnixNano)];
        out.push({
          name: s.name,
          kind: s.kind - 1,
          spanContext: () => ctx,
          ...(s.parentSpanId ? { parentSpanContext: { traceId: s.traceId, spanId: s.parentSpanId, traceFlags: 1 }, parentSpanId: s.parentSpanId } : {}),
          startTime: hrTime(s.startTimeUnixNano),
          endTime: hrTime(s.endTimeUnixNano),
          duration: hrTime(String(end - start)),
          status: { code: s.status.code ?? 0, ...(s.status.message ? { message: s.status.message } : {}) },
          attributes: attributes(s.attributes),
          links: s.links.map((l) => ({ context: { traceId: l.traceId, spanId: l.spanId, traceFlags: 1 }, attributes: {} })),
          events: s.events.map((e) => ({ name: e.name, time: hrTime(e.timeUnixNano), attributes: attributes(e.attributes) })),
          ended: true,
          resource,
          instrumentationScope: ss.scope,
          instrumentationLibrary: ss.scope,
          droppedAttributesCount: 0,
          droppedEventsCount: 0,
          droppedLinksCount: 0,
        });
      }
    }
  }
  return out;
}
