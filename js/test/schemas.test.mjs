// Tool input schemas from the libraries people use: a zod v4 schema, a zod v3 one (`zod/v3`), a Standard Schema
// validator without JSON Schema (valibot, with `inputSchema`) and plain JSON Schema each validate a call's
// arguments before it runs (bad ones are the `validation` result the model reads, and the tool does not run;
// good ones reach `execute` as the validator's output), give the model a JSON Schema (zod 4's own, our
// conversion of zod v3's, or `inputSchema`) that the fingerprint hashes. The zod v3 conversion agrees with
// zod-to-json-schema over generated schemas, and refuses what it cannot express. Unknown keys of every options
// object are refused with STEADFAST_CONFIG_INVALID naming the key.
import test from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { createAgent, defineTool, durableObjectStore, kvStore, memoryStore, mockModel, progressGuard, defineHook, testClock, SteadfastError } from "steadfast";
import { z } from "zod";
import { z as z3 } from "zod/v3";
import * as v from "valibot";
import { zodToJsonSchema } from "zod-to-json-schema";
import Ajv2020 from "ajv/dist/2020.js";
import { FakeKv } from "../test-support/fake_kv.mjs";
import { rng } from "../test-support/seeds.mjs";

/** Runs `calls` (each `args` of one call of tool `name`, one turn each) then a final answer; the tool results. */
async function run(tool, calls) {
  const model = mockModel([...calls.map((args) => ({ toolCalls: [{ name: tool.name, args }] })), "done"]);
  const agent = createAgent({ model, tools: [tool], store: memoryStore() });
  const result = await agent.send("go", { sessionId: "s" });
  assert.equal(result.status, "finished");
  const cp = await agent.load("s");
  return { results: cp.messages.filter((m) => m.role === "tool"), model, agent };
}

/** A tool over `input` recording what `execute` got. */
function recording(name, fields) {
  const seen = [];
  const tool = defineTool({ name, description: `the ${name} tool`, ...fields, execute: (args) => (seen.push(args), "ok") });
  return { tool, seen };
}

const CASES = [
  {
    name: "zod v4",
    tool: () =>
      recording("pay4", {
        input: z.object({
          to: z.string().email(),
          amount: z.number().int().positive(),
          note: z.string().default("none"),
          cents: z.string().transform((s) => Number(s) * 100),
        }),
      }),
  },
  {
    name: "zod v3",
    tool: () =>
      recording("pay3", {
        input: z3.object({
          to: z3.string().email(),
          amount: z3.number().int().positive(),
          note: z3.string().default("none"),
          cents: z3.string().transform((s) => Number(s) * 100),
        }),
      }),
  },
  {
    name: "valibot with inputSchema",
    tool: () =>
      recording("payv", {
        input: v.object({
          to: v.pipe(v.string(), v.email()),
          amount: v.pipe(v.number(), v.integer(), v.minValue(1)),
          note: v.optional(v.string(), "none"),
          cents: v.pipe(v.string(), v.transform((s) => Number(s) * 100)),
        }),
        inputSchema: {
          type: "object",
          properties: { to: { type: "string" }, amount: { type: "integer" }, note: { type: "string" }, cents: { type: "string" } },
          required: ["to", "amount", "cents"],
        },
      }),
  },
];

for (const c of CASES) {
  test(`a ${c.name} tool: bad arguments are a validation result and never run; good ones reach execute parsed`, async () => {
    const { tool, seen } = c.tool();
    // The email is refused by the validator (the core checks no formats); `amount` by both.
    const { results } = await run(tool, [
      { to: "not-an-email", amount: 3, cents: "2" },
      { to: "a@b.co", amount: 3 },
      { to: "a@b.co", amount: 3, cents: "2" },
    ]);
    assert.deepEqual(seen, [{ to: "a@b.co", amount: 3, note: "none", cents: 200 }], "execute got the validator's output, once");
    assert.deepEqual(
      results.map((r) => [r.kind, r.isError]),
      [
        ["validation", true],
        ["validation", true],
        ["execution", false],
      ],
    );
    assert.match(results[0].content, new RegExp(`^invalid arguments for '${tool.name}': /to: `));
    assert.match(results[1].content, new RegExp(`^invalid arguments for '${tool.name}': .*cents`));
  });
}

test("a plain JSON Schema tool, as input or as inputSchema, validates in the core and the model reads it", async () => {
  const schema = { type: "object", properties: { n: { type: "integer" } }, required: ["n"], additionalProperties: false };
  for (const key of ["input", "inputSchema"]) {
    const { tool, seen } = recording("count", { [key]: schema });
    const { results, model } = await run(tool, [{ n: "x" }, { n: 2 }]);
    assert.deepEqual(seen, [{ n: 2 }], key);
    assert.deepEqual(results.map((r) => r.kind), ["validation", "execution"], key);
    assert.deepEqual(model.calls[0].tools, [{ name: "count", description: "the count tool", inputSchema: schema }], key);
  }
  const e = catching(() => defineTool({ name: "both", description: "", input: {}, inputSchema: {}, execute: () => 1 }));
  assert.equal(e.code, "STEADFAST_CONFIG_INVALID");
  assert.match(e.message, /^tool 'both': give its JSON Schema once/);
});

test("the model reads the converted JSON Schema: zod 4's own and our zod v3 conversion (without $schema)", async () => {
  const v4 = recording("a", { input: z.object({ q: z.string().min(2).describe("what to look up"), k: z.number().int().optional() }) });
  const v3 = recording("b", { input: z3.object({ q: z3.string().min(2).describe("what to look up"), k: z3.number().int().optional() }) });
  const model = mockModel(["done"]);
  const agent = createAgent({ model, tools: [v4.tool, v3.tool], store: memoryStore() });
  await agent.send("go", { sessionId: "s" });
  const [a, b] = model.calls[0].tools;
  assert.deepEqual(a.inputSchema, {
    type: "object",
    properties: {
      q: { type: "string", minLength: 2, description: "what to look up" },
      k: { type: "integer", minimum: -9007199254740991, maximum: 9007199254740991 },
    },
    required: ["q"],
  });
  assert.deepEqual(b.inputSchema, {
    type: "object",
    properties: { q: { type: "string", minLength: 2, description: "what to look up" }, k: { type: "integer" } },
    required: ["q"],
  });
});

/** The fingerprint of an agent with one tool over `input`, as computed by a new node process. */
function fingerprintInChild(source) {
  const script = `
    import { createAgent, defineTool, mockModel } from "steadfast";
    import { z } from "zod";
    import { z as z3 } from "zod/v3";
    const input = ${source};
    const agent = createAgent({ model: mockModel([]), store: "memory", tools: [defineTool({ name: "t", description: "", input, execute: () => 1 })] });
    process.stdout.write(JSON.stringify(agent.fingerprint));`;
  const cwd = fileURLToPath(new URL("..", import.meta.url));
  return JSON.parse(execFileSync(process.execPath, ["--input-type=module", "-e", script], { cwd, encoding: "utf8" }));
}

test("the fingerprint hashes the converted schema: stable across processes, changed with the zod schema", () => {
  for (const [same, changed] of [
    ["z.object({ a: z.string(), b: z.number().optional() })", "z.object({ a: z.string(), b: z.number() })"],
    ["z3.object({ a: z3.string(), b: z3.number().optional() })", "z3.object({ a: z3.string().max(3), b: z3.number().optional() })"],
  ]) {
    const first = fingerprintInChild(same);
    const second = fingerprintInChild(same);
    assert.deepEqual(first, second, `${same}: the same in two processes`);
    const other = fingerprintInChild(changed);
    assert.notEqual(other.tools.t, first.tools.t, `${changed} changes the tool's hash`);
    assert.notEqual(other.hash, first.hash);
  }
  // The same schema written with zod 4 or as its JSON Schema is the same tool to the fingerprint.
  const zod = fingerprintInChild("z.object({ a: z.string() })");
  const json = fingerprintInChild(`({ type: "object", properties: { a: { type: "string" } }, required: ["a"] })`);
  assert.equal(zod.tools.t, json.tools.t);
});

function catching(f) {
  try {
    f();
  } catch (e) {
    return e;
  }
  assert.fail("expected a throw");
}

test("a validator without a JSON Schema, or a zod type JSON Schema cannot express, needs inputSchema (coded, naming the tool)", () => {
  const refused = [
    [{ input: v.object({ a: v.string() }) }, /^tool 't': its input schema \(valibot\) validates but gives no JSON Schema: pass `inputSchema`/],
    [{ input: z3.object({ when: z3.date() }) }, /^tool 't': its zod input schema has a ZodDate at \/when, which JSON Schema cannot express: pass `inputSchema`/],
    [{ input: z3.object({ id: z3.string().cuid() }) }, /^tool 't': its zod input schema has a ZodString check 'cuid' at \/id/],
    [{ input: z3.object({ n: z3.bigint() }) }, /ZodBigInt at \/n/],
    [{ input: z3.object({ m: z3.map(z3.string(), z3.string()) }) }, /ZodMap at \/m/],
    [{ input: z3.lazy(() => z3.string()) }, /ZodLazy at \(root\)/],
    [{ input: z.object({ when: z.date() }) }, /^tool 't': its input schema has no JSON Schema \(.*\): pass `inputSchema`/],
    [{ input: "a string" }, /^tool 't': input must be a zod schema, a Standard Schema validator or a JSON Schema object, not string/],
    [{ input: [] }, /not an array/],
  ];
  for (const [fields, message] of refused) {
    const e = catching(() => defineTool({ name: "t", description: "", ...fields, execute: () => 1 }));
    assert.ok(e instanceof SteadfastError, String(e));
    assert.equal(e.code, "STEADFAST_CONFIG_INVALID");
    assert.match(e.message, message);
    // With an explicit inputSchema, each is accepted (the model reads that schema).
    if (typeof fields.input === "object" && !Array.isArray(fields.input)) {
      defineTool({ name: "t", description: "", ...fields, inputSchema: { type: "object" }, execute: () => 1 });
    }
  }
  // createAgent refuses a tool that did not go through defineTool alike.
  const e = catching(() =>
    createAgent({ model: mockModel([]), store: "memory", tools: [{ name: "raw", description: "", input: v.string(), execute: () => 1 }] }),
  );
  assert.equal(e.code, "STEADFAST_CONFIG_INVALID");
  assert.match(e.message, /^tool 'raw': its input schema \(valibot\)/);
});

test("an async validator (zod refine) is awaited at the gate; needsApproval gets the parsed value when it can", async () => {
  const approvals = [];
  const seen = [];
  const tool = defineTool({
    name: "book",
    description: "",
    input: z.object({ day: z.string().refine(async (d) => d !== "sunday", "closed on sunday") }),
    execute: (args) => (seen.push(args), "booked"),
  });
  const { results } = await run(tool, [{ day: "sunday" }, { day: "monday" }]);
  assert.deepEqual(results.map((r) => r.kind), ["validation", "execution"]);
  assert.equal(results[0].content, "invalid arguments for 'book': /day: closed on sunday");
  assert.deepEqual(seen, [{ day: "monday" }]);

  const gated = defineTool({
    name: "refund",
    description: "",
    input: z.object({ amount: z.string().transform(Number) }),
    needsApproval: (args) => (approvals.push(args), args.amount > 100),
    execute: () => "refunded",
  });
  const model = mockModel([{ toolCalls: [{ name: "refund", args: { amount: "500" } }] }, "done"]);
  const agent = createAgent({ model, tools: [gated], store: memoryStore() });
  const r = await agent.send("go", { sessionId: "r" });
  assert.equal(r.status, "awaiting-approval");
  assert.deepEqual(approvals, [{ amount: 500 }], "needsApproval got the validator's output");
});

test("a hook that rewrites arguments past the validator gets an error result, and execute does not run", async () => {
  const seen = [];
  const tool = defineTool({ name: "t", description: "", input: z.object({ n: z.number().max(5) }), execute: (a) => (seen.push(a), "ok") });
  const rewrite = defineHook({ name: "bump", beforeTool: () => ({ args: { n: 50 } }) });
  const model = mockModel([{ toolCalls: [{ name: "t", args: { n: 1 } }] }, "done"]);
  const agent = createAgent({ model, tools: [tool], hooks: [rewrite], store: memoryStore() });
  await agent.send("go", { sessionId: "h" });
  const [result] = (await agent.load("h")).messages.filter((m) => m.role === "tool");
  assert.deepEqual(seen, []);
  assert.equal(result.isError, true);
  assert.match(result.content, /^ValidationError: invalid arguments for 't': \/n: /);
});

test("execute's argument is typed from the schema (zod v4, zod v3, valibot): tsc, strict, skipLibCheck false", () => {
  // test-support/types-zod/tools.ts holds `@ts-expect-error`s on wrongly typed uses: an unused one fails the compile.
  const js = fileURLToPath(new URL("..", import.meta.url));
  try {
    execFileSync(process.execPath, ["node_modules/typescript/bin/tsc", "-p", "test-support/types-zod"], { cwd: js, encoding: "utf8", stdio: "pipe" });
  } catch (e) {
    assert.fail(`tsc failed:\n${e.stdout}${e.stderr}`);
  }
});

// --- The zod v3 conversion against zod-to-json-schema, over generated schemas -------------------------------


/** Set when a generated schema refines past its input side (a pipeline, a refinement): zod may refuse more. */
let refined = false;

/** A random zod schema (`zz`: zod 4's `z` or zod/v3's) of depth <= `depth`, over the types the v3 conversion expresses. */
function genSchema(r, depth, zz = z3) {
  const pick = (xs) => xs[Math.floor(r() * xs.length)];
  const int = (lo, hi) => lo + Math.floor(r() * (hi - lo + 1));
  const leaves = [
    () => zz.string(),
    () => zz.string().min(int(0, 3)),
    () => zz.string().max(int(3, 8)),
    () => zz.string().min(1).max(int(2, 6)),
    () => zz.string().length(int(1, 4)),
    () => zz.string().regex(/^[a-c]+$/),
    () => zz.string().email(),
    () => zz.string().uuid(),
    () => zz.string().url(),
    () => zz.number(),
    () => zz.number().int(),
    () => zz.number().min(int(-5, 0)).max(int(1, 9)),
    () => zz.number().gt(0).lt(10),
    () => zz.number().int().nonnegative(),
    () => zz.number().multipleOf(int(2, 5)),
    () => zz.boolean(),
    () => zz.null(),
    () => zz.literal(pick(["a", "b", 3, true])),
    () => zz.enum(["x", "y", "z"]),
    () => zz.any(),
    () => zz.unknown(),
  ];
  if (depth <= 0) return pick(leaves)();
  const sub = () => genSchema(r, depth - 1, zz);
  const nodes = [
    ...leaves,
    () => {
      const shape = {};
      for (let i = 0; i < int(1, 4); i++) shape[`k${i}`] = sub();
      return pick([(s) => zz.object(s), (s) => zz.object(s).strict(), (s) => zz.object(s).passthrough()])(shape);
    },
    () => zz.array(sub()),
    () => zz.array(sub()).min(1).max(int(1, 4)),
    () => zz.tuple([sub(), sub()]),
    () => zz.union([sub(), sub()]),
    () => sub().optional(),
    () => zz.object({ inner: sub().optional(), other: zz.string() }),
    () => sub().nullable(),
    () => zz.string().nullable(),
    () => zz.object({ d: zz.number().default(int(0, 9)) }),
    () => (zz === z3 ? z3.record(sub()) : z.record(z.string(), sub())),
    () => sub().describe("a described field"),
    () => sub().refine(() => true),
    () => zz.string().transform((s) => s.length),
    () => ((refined = true), zz.string().pipe(zz.string().min(1))),
    () => ((refined = true), zz.number().refine((n) => n !== 3)),
    () => zz.discriminatedUnion("kind", [zz.object({ kind: zz.literal("a"), a: sub() }), zz.object({ kind: zz.literal("b") })]),
    () => zz.intersection(zz.object({ a: zz.string() }), zz.object({ b: zz.number() })),
  ];
  return pick(nodes)();
}

/** A random JSON value to try both schemas on. */
function genValue(r, depth) {
  const pick = (xs) => xs[Math.floor(r() * xs.length)];
  const leaf = () =>
    pick([null, true, false, 0, 3, -2, 1.5, 7, 12, "", "a", "abc", "ab", "a@b.co", "x", "y", "b", "kind", "123e4567-e89b-12d3-a456-426614174000", "https://x.org"]);
  if (depth <= 0) return leaf();
  return pick([
    leaf,
    () => Array.from({ length: Math.floor(r() * 4) }, () => genValue(r, depth - 1)),
    () => {
      const o = {};
      for (const k of ["k0", "k1", "k2", "k3", "inner", "other", "d", "kind", "a", "b"]) if (r() < 0.45) o[k] = genValue(r, depth - 1);
      return o;
    },
  ])();
}

/** What the model is told about the conversion cannot be compared as text (zod-to-json-schema writes draft 7): both
 * are compiled by ajv (2020-12 for ours, the draft-07 forms rewritten) and must accept and refuse alike. */
function draft7To2020(s) {
  if (Array.isArray(s)) return s.map(draft7To2020);
  if (s === null || typeof s !== "object") return s;
  const out = {};
  for (const [k, val] of Object.entries(s)) {
    if (k === "$schema") continue;
    if (k === "items" && Array.isArray(val)) out.prefixItems = val.map(draft7To2020);
    else if (k === "additionalItems") out.items = draft7To2020(val);
    // zod-to-json-schema writes `z.null().nullable()` as `type: ["null", "null"]`, which ajv refuses.
    else if (k === "type" && Array.isArray(val)) out.type = [...new Set(val)];
    else out[k] = draft7To2020(val);
  }
  return out;
}

test("the zod v3 conversion accepts and refuses what zod-to-json-schema's does, over generated schemas", async () => {
  const { zod3ToJsonSchema } = await import("../dist/zod3.js");
  const ajv = new Ajv2020({ strict: false, validateFormats: false, allErrors: false });
  // SCHEMA_SEED=<n> runs one seed; SCHEMA_SEEDS=<n> runs seeds 1..n (default 300).
  const only = process.env.SCHEMA_SEED === undefined ? undefined : Number(process.env.SCHEMA_SEED);
  const seeds = only ?? Number(process.env.SCHEMA_SEEDS ?? 300);
  for (let seed = only ?? 1; seed <= seeds; seed++) {
    const r = rng(seed);
    refined = false;
    const schema = genSchema(r, 3);
    const repro = `seed ${seed} (repro: SCHEMA_SEED=${seed} node --test --test-name-pattern=zod-to-json-schema test/schemas.test.mjs)`;
    const ours = zod3ToJsonSchema(schema);
    const theirs = draft7To2020(
      zodToJsonSchema(schema, { $refStrategy: "none", removeAdditionalStrategy: "strict", allowedAdditionalProperties: undefined, effectStrategy: "input", pipeStrategy: "input" }),
    );
    const a = ajv.compile(ours);
    const b = ajv.compile(theirs);
    // The model-relevant words agree where both write them.
    for (let i = 0; i < 40; i++) {
      const value = genValue(r, 3);
      assert.equal(a(value), b(value), `${repro}: ${JSON.stringify(value)} against ${JSON.stringify(ours)} vs ${JSON.stringify(theirs)}`);
      // And what our schema accepts, zod accepts (formats and patterns aside: ajv here checks no formats).
      if (a(value) && !refined && !JSON.stringify(ours).match(/"format"|"pattern"/)) {
        assert.equal(schema.safeParse(value).success, true, `${repro}: zod refuses ${JSON.stringify(value)} our schema accepts: ${JSON.stringify(ours)}`);
      }
      // What zod accepts, our schema accepts (the model is never told less than zod allows).
      if (schema.safeParse(value).success) {
        assert.equal(a(value), true, `${repro}: our schema refuses ${JSON.stringify(value)} zod accepts: ${JSON.stringify(ours)}`);
      }
    }
    // The core compiles every converted schema (an agent with the tool builds).
    if (seed % 25 === 0) {
      createAgent({ model: mockModel([]), store: "memory", tools: [defineTool({ name: "t", description: "", input: schema, execute: () => 1 })] });
    }
  }
});

test("zod 4's JSON Schema (as the model reads it) accepts what zod accepts, over generated schemas; the core compiles it", async () => {
  const ajv = new Ajv2020({ strict: false, validateFormats: false });
  const only = process.env.SCHEMA_SEED === undefined ? undefined : Number(process.env.SCHEMA_SEED);
  const seeds = only ?? Number(process.env.SCHEMA_SEEDS ?? 200);
  for (let seed = only ?? 1; seed <= seeds; seed++) {
    const r = rng(seed);
    refined = false;
    const schema = genSchema(r, 3, z);
    const repro = `seed ${seed} (repro: SCHEMA_SEED=${seed} node --test --test-name-pattern="zod 4's" test/schemas.test.mjs)`;
    const model = mockModel(["ok"]);
    const agent = createAgent({ model, store: "memory", tools: [defineTool({ name: "t", description: "", input: schema, execute: () => 1 })] });
    await agent.send("hi", { sessionId: "s" });
    const ours = model.calls[0].tools[0].inputSchema;
    assert.equal(ours.$schema, undefined, repro);
    const a = ajv.compile(ours);
    for (let i = 0; i < 40; i++) {
      const value = genValue(r, 3);
      if (schema.safeParse(value).success) {
        assert.equal(a(value), true, `${repro}: the schema refuses ${JSON.stringify(value)} zod accepts: ${JSON.stringify(ours)}`);
      } else if (a(value) && !refined && !JSON.stringify(ours).match(/"format"|"pattern"/)) {
        assert.fail(`${repro}: zod refuses ${JSON.stringify(value)} the schema accepts: ${JSON.stringify(ours)}`);
      }
    }
  }
});

// --- Unknown keys --------------------------------------------------------------------------------------------

const agentOf = (extra = {}) => createAgent({ model: mockModel(["ok", "ok", "ok"]), store: memoryStore(), ...extra });

/** [what, a call with an unknown key (may throw, or reject), the message it must have]. */
const UNKNOWN_KEYS = [
  ["createAgent", () => agentOf({ maxStep: 3 }), /^createAgent options: unknown key "maxStep" \(it takes model, provider, fallbacks, tools, hooks, store, instructions, clock, /],
  ["createAgent retry", () => agentOf({ retry: { maxAttemps: 2 } }), /^invalid agent options: retry: unknown key "maxAttemps" \(it takes baseMs, capMs, deadlineMs, maxAttempts\)/],
  ["createAgent lease", () => agentOf({ lease: { ttl: 2 } }), /^invalid agent options: lease: unknown key "ttl"/],
  [
    "defineTool",
    () => agentOf({ tools: [defineTool({ name: "t", description: "", exectue: () => 1, execute: () => 1 })] }),
    /^tool 't': unknown key "exectue" \(it takes name, description, input, inputSchema, execute, needsApproval, sideEffecting, reconcile\)$/,
  ],
  [
    "defineTool (at once, before createAgent)",
    () => defineTool({ name: "t", description: "", inputSchem: {}, execute: () => 1 }),
    /^tool 't': unknown key "inputSchem" \(it takes name, description, input, inputSchema, execute, needsApproval, sideEffecting, reconcile\)$/,
  ],
  ["memoryStore", () => memoryStore({ historyLimt: 3 }), /^memoryStore options: unknown key "historyLimt" \(it takes historyLimit\)$/],
  ["checkpoints.delete", () => memoryStore().checkpoints.delete("s", { keephistory: true }), /^checkpoints\.delete options: unknown key "keephistory"/],
  ["checkpoints.history", () => memoryStore().checkpoints.history("s", { limt: 1 }), /^checkpoints\.history options: unknown key "limt"/],
  ["a tool's needsAproval", () => agentOf({ tools: [{ name: "t", description: "", needsAproval: true, execute: () => 1 }] }), /^tool 't': unknown key "needsAproval"/],
  ["progressGuard", () => agentOf({ hooks: [progressGuard({ hintAftr: 2 })] }), /^hooks\[0\] \(progressGuard\): unknown key "hintAftr"/],
  ["defineHook", () => agentOf({ hooks: [defineHook({ name: "h", beforeTool: () => undefined, afterTools: () => undefined })] }), /^hooks\[0\] \(custom\): unknown key "afterTools"/],
  ["send", () => agentOf().send("hi", { sessionId: "s", event: true }), /^send options: unknown key "event" \(it takes sessionId, businessState, queue, interrupt, events, onEvent, signal\)$/],
  ["stream", async () => { for await (const _ of agentOf().stream("hi", { sessionId: "s", onEvent: () => 1 })); }, /^stream options: unknown key "onEvent"/],
  ["runOnce", () => agentOf().runOnce("d1", "hi", { bussinessState: {} }), /^runOnce options: unknown key "bussinessState"/],
  ["resume", () => agentOf().resume("s", { event: true }), /^resume options: unknown key "event"/],
  ["session", () => agentOf().session({ id: "s", ttl: 3 }), /^session options: unknown key "ttl"/],
  ["session.send", () => agentOf().session({ id: "s" }).send("hi", { sessionId: "s" }), /^session send options: unknown key "sessionId"/],
  ["session.resume", () => agentOf().session({ id: "s" }).resume({ signl: null }), /^session resume options: unknown key "signl"/],
  ["session.history", () => agentOf().session({ id: "s" }).history({ limt: 2 }), /^session history options: unknown key "limt"/],
  ["session.fork", () => agentOf().session({ id: "s" }).fork({ fromStep: 1, newID: "x" }), /^session fork options: unknown key "newID"/],
  ["fork", () => agentOf().fork("s", { fromStep: 1, newID: "x" }), /^fork options: unknown key "newID"/],
  ["sweep", () => agentOf().sweep({ maxRun: 3 }), /^sweep options: unknown key "maxRun"/],
  ["approvals.resolve decision", () => agentOf().approvals.resolve({ id: "a", approved: true, reason: "x" }), /^approvals.resolve decision: unknown key "reason" \(it takes id, approved, note, answer\)$/],
  ["approvals.resolve options", () => agentOf().approvals.resolve({ id: "a", approved: true }, { events: true }), /^approvals.resolve options: unknown key "events"/],
  ["events.deliver options", () => agentOf().events.deliver("0".repeat(64), {}, { events: true }), /^events.deliver options: unknown key "events" \(it takes onEvent\)$/],
  ["fireSchedule", () => agentOf().fireSchedule([], { onEvents: () => 1 }), /^fireSchedule options: unknown key "onEvents"/],
  ["startSchedules", () => agentOf().startSchedules([], { interval: 5 }), /^startSchedules options: unknown key "interval"/],
  ["kvStore", () => kvStore(new FakeKv(), { historyLimt: 3 }), /^KV store options: unknown key "historyLimt"/],
  ["durableObjectStore", () => durableObjectStore({ sql: { exec: () => [] }, transactionSync: (f) => f() }, { prefx: "a" }), /^durableObjectStore options: unknown key "prefx"/],
  ["mockModel", () => mockModel([], { modes: "by-turn" }), /^mockModel options: unknown key "modes"/],
  ["testClock", () => testClock({ begin: 0 }), /^testClock options: unknown key "begin"/],
];

for (const [what, f, message] of UNKNOWN_KEYS) {
  test(`an unknown key in ${what} is refused with STEADFAST_CONFIG_INVALID naming it`, async () => {
    let error;
    try {
      await f();
    } catch (e) {
      error = e;
    }
    assert.ok(error instanceof SteadfastError, `${what}: ${error}`);
    assert.equal(error.code, "STEADFAST_CONFIG_INVALID", `${what}: ${error.message}`);
    assert.match(error.message, message);
  });
}

// A timeout: before unknown keys were refused, this loop ran on and never ended.
test("recover reports an unknown sweep key to onError (as it reports every option the runtime refuses)", { timeout: 20_000 }, async () => {
  const errors = [];
  const loop = agentOf().recover({ maxRun: 3, onError: (e) => errors.push(e) });
  await loop.done;
  assert.equal(errors.length, 1);
  assert.equal(errors[0].code, "STEADFAST_CONFIG_INVALID");
  assert.match(errors[0].message, /^recover options: unknown key "maxRun"/);
});

test("the options objects with only known keys are accepted (the tables name every key the package reads)", async () => {
  const clock = testClock({ start: 0, auto: true });
  const agent = createAgent({
    model: mockModel(["a", "b", "c"], { id: "m", mode: "sequential" }),
    provider: undefined,
    tools: [],
    hooks: [progressGuard({ hintAfter: 2, denyAfter: 3, maxDenials: 1 })],
    store: kvStore(new FakeKv(), { historyLimit: 5, clock }),
    instructions: "be brief",
    clock,
    maxSteps: 3,
    retry: { maxAttempts: 2, baseMs: 1, capMs: 2, deadlineMs: 100 },
    lease: { ttlMs: 60_000, renewEveryMs: 10_000, graceMs: 1_000 },
  });
  await agent.send("hi", { sessionId: "s", businessState: {}, events: true, onEvent: () => undefined, signal: undefined });
  await agent.resume("s", { events: false, onEvent: undefined, signal: undefined });
  await agent.runOnce("d", "hi", { businessState: null, events: false });
  await agent.sweep({ maxRuns: 1, intervalMs: 1 });
  const session = agent.session({ id: "chat" });
  await session.send("hi", { businessState: {}, events: false });
  await session.history({ limit: 1 });
});
