// Durable waits (issue 29) through the npm package: a tool answers "pending" with its ctx's helpers
// (`ctx.waitForEvent`, `ctx.askQuestion`, `ctx.sleepUntil`, `ctx.sleepFor`) or an agent opts into the built-in
// `ask_question`/`sleep_for`/`sleep_until` (`waitTools`); the run pauses `awaiting-approval` and holds nothing.
// A question is answered through `approvals.resolve({id, answer})` by another agent over the same fileStore days
// later; an event is delivered with `agent.events.deliver(token, payload)` and resumes the run once, a duplicate
// acknowledged, a guessed or spent token refused alike (generated seeded cases: repro STEADFAST_SEED=<n>); a
// deadline records a timeout through `agent.sweep()`; a timer wakes the run at its time and not before; payloads
// over the limits and bad arguments are refused with codes and change nothing.
import test from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createAgent, fileStore, memoryStore, PropagatingToolError, SessionAwaitingApprovalError, SteadfastError, testClock } from "steadfast";
import { cases, repro, rng } from "../test-support/seeds.mjs";

const HOUR = 3_600_000;
const DAY = 24 * HOUR;
const T0 = Date.UTC(2026, 0, 5, 9, 0, 0);

/** The tool results of a run, in order. */
const toolResults = (run) => run.messages.filter((m) => m.role === "tool");

/**
 * A model that calls `calls` (`[{name, args}]`) in its first turn, then answers with the tool results it got
 * (`got: <content> | <content>`). Any run of it needs no script position: it reads the transcript.
 */
function callsThenEcho(calls) {
  return {
    id: "echo",
    async generate(request) {
      if (!request.messages.some((m) => m.role === "assistant")) {
        return { toolCalls: calls.map((c, i) => ({ id: `call_${i}`, name: c.name, args: c.args ?? {} })), stopReason: "tool_calls" };
      }
      const results = request.messages.filter((m) => m.role === "tool").map((m) => m.content);
      return { text: `got: ${results.join(" | ")}`, stopReason: "stop" };
    },
  };
}

/** A tool that waits for an event (deadline `deadlineMs` after it ran, as a Date), counting its runs and keeping its ctx. */
function eventTool(name, seen, deadlineMs) {
  return {
    name,
    description: "waits for a webhook",
    execute: (_args, ctx) => {
      seen.push({ name, token: ctx.waitToken, now: ctx.now, keys: Object.keys(ctx) });
      return deadlineMs === undefined ? ctx.waitForEvent() : ctx.waitForEvent({ deadline: new Date(ctx.now + deadlineMs) });
    },
  };
}

async function rejectsWith(promise, code, check) {
  await assert.rejects(promise, (e) => {
    assert.ok(e instanceof SteadfastError, `${e}`);
    assert.equal(e.code, code, e.message);
    check?.(e);
    return true;
  });
}

function tmp(name) {
  return mkdtempSync(join(tmpdir(), `steadfast-waits-${name}-`));
}

test("an event wait: the tool gets its token and start time, another agent over the same fileStore delivers days later, and the run resumes once", async () => {
  const dir = tmp("event");
  try {
    const clock = testClock({ start: T0 });
    const seen = [];
    const events = [];
    const open = () =>
      createAgent({
        model: callsThenEcho([{ name: "await_payment" }]),
        tools: [eventTool("await_payment", seen, DAY)],
        store: fileStore(join(dir, "runs"), { clock }),
        clock,
      });
    const a = open();
    const paused = await a.send("charge order 7", { sessionId: "pay-1", onEvent: (e) => events.push(e) });
    assert.equal(paused.status, "awaiting-approval");
    assert.equal(seen.length, 1);
    assert.deepEqual(seen[0].keys.sort(), ["approvalId", "idempotencyKey", "now", "runId", "toolCallId", "waitToken"]);
    assert.match(seen[0].token, /^[0-9a-f]{64}$/);
    assert.equal(seen[0].now, clock.now(), "ctx.now is the agent's clock");
    const [wait] = paused.waits;
    assert.deepEqual(
      { kind: wait.kind, token: wait.token, dueAt: wait.dueAt, tool: wait.toolName },
      { kind: "event", token: seen[0].token, dueAt: seen[0].now + DAY, tool: "await_payment" },
    );
    assert.deepEqual(paused.approvalIds, [wait.id]);
    const start = events.find((e) => e.type === "wait.start");
    assert.deepEqual([start?.waitId, start?.kind, start?.dueAt], [wait.id, "event", wait.dueAt]);
    const [listed] = await a.approvals.list();
    assert.deepEqual([listed.id, listed.kind, listed.dueAt], [wait.id, "event", wait.dueAt]);
    assert.equal(JSON.stringify(listed).includes(wait.token), false, "the record keeps no token");

    // Another process, three days later (a new store handle and agent on the same directory).
    await clock.advance(3 * DAY - HOUR);
    const b = open();
    const guessed = (wait.token[0] === "a" ? "b" : "a") + wait.token.slice(1);
    for (const bad of [guessed, "not-a-token", wait.token.toUpperCase()]) {
      await rejectsWith(b.events.deliver(bad, { paid: true }), "STEADFAST_WAIT_NOT_FOUND", (e) => assert.equal(e.runId, undefined));
    }
    const resumed = [];
    const delivered = await b.events.deliver(wait.token, { paid: true, amount: 42 }, { onEvent: (e) => resumed.push(e) });
    assert.equal(delivered.waitId, wait.id);
    assert.equal(delivered.duplicate, false);
    assert.equal(delivered.run.status, "finished");
    assert.deepEqual(JSON.parse(toolResults(delivered.run)[0].content), { paid: true, amount: 42 });
    assert.equal(delivered.run.text, 'got: {"amount":42,"paid":true}');
    const done = resumed.find((e) => e.type === "wait.done");
    assert.deepEqual([done?.waitId, done?.by], [wait.id, "delivery"]);
    assert.equal(seen.length, 1, "the tool did not run again");

    // Spent: the same payload or another one opens nothing, exactly like a guessed token.
    const stored = await b.load("pay-1");
    for (const again of [{ paid: true, amount: 42 }, { paid: false }]) {
      await rejectsWith(a.events.deliver(wait.token, again), "STEADFAST_WAIT_NOT_FOUND", (e) => assert.equal(e.runId, undefined));
    }
    assert.deepEqual(await a.load("pay-1"), stored);
    assert.deepEqual(await b.approvals.list(), []);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("generated deliveries to a turn's event waits: each resolves once with its first payload, a duplicate is acknowledged while the run waits, another payload is refused, and every token is spent at the end", async () => {
  for (const seed of cases(25)) {
    const r = rng(seed);
    const n = 1 + Math.floor(r() * 3);
    const names = Array.from({ length: n }, (_, i) => `hook_${i}`);
    const seen = [];
    const store = memoryStore();
    const clock = testClock({ start: T0 });
    const agents = [0, 1].map(() =>
      createAgent({
        model: callsThenEcho(names.map((name) => ({ name }))),
        tools: names.map((name) => eventTool(name, seen, r() < 0.5 ? undefined : 7 * DAY)),
        store,
        clock,
      }),
    );
    const paused = await agents[0].send("go", { sessionId: `ev-${seed}` });
    const why = repro(seed, `${n} waits`);
    assert.equal(paused.status, "awaiting-approval", why);
    assert.equal(paused.waits.length, n, why);
    const tokens = new Map(paused.waits.map((w) => [w.toolName, w.token]));
    const payloads = [() => `text ${Math.floor(r() * 100)}`, () => ({ n: Math.floor(r() * 100), ok: r() < 0.5 }), () => Math.floor(r() * 1000), () => null];
    const first = new Map();
    let finished;
    // Deliver in a generated order, with duplicates, different payloads and guessed tokens between.
    const order = names.slice().sort(() => r() - 0.5);
    for (const name of order) {
      const token = tokens.get(name);
      const payload = payloads[Math.floor(r() * payloads.length)]();
      const agent = agents[Math.floor(r() * 2)];
      const got = await agent.events.deliver(token, payload);
      assert.equal(got.duplicate, false, why);
      first.set(name, payload);
      const last = first.size === n;
      assert.equal(got.run.status, last ? "finished" : "awaiting-approval", why);
      if (last) finished = got.run;
      // Extra attempts on this token: the same payload again (acknowledged while the run still waits, spent
      // after), another payload (refused), a guessed token (not found).
      for (let k = Math.floor(r() * 3); k > 0; k--) {
        const kind = Math.floor(r() * 3);
        if (kind === 0) {
          if (last) await rejectsWith(agent.events.deliver(token, payload), "STEADFAST_WAIT_NOT_FOUND");
          else assert.equal((await agent.events.deliver(token, payload)).duplicate, true, why);
        } else if (kind === 1) {
          const other = { other: seed, k };
          await rejectsWith(agent.events.deliver(token, other), last ? "STEADFAST_WAIT_NOT_FOUND" : "STEADFAST_WAIT_ALREADY_RESOLVED");
        } else {
          const guess = Array.from({ length: 64 }, () => "0123456789abcdef"[Math.floor(r() * 16)]).join("");
          await rejectsWith(agent.events.deliver(guess, payload), "STEADFAST_WAIT_NOT_FOUND");
        }
      }
    }
    assert.equal(seen.length, n, `${why}: each tool ran once`);
    const results = new Map(toolResults(finished).map((m) => [m.name, m]));
    for (const name of names) {
      const p = first.get(name);
      const content = results.get(name).content;
      assert.equal(results.get(name).isError, false, why);
      assert.deepEqual(typeof p === "string" ? content : JSON.parse(content), p, `${why}: ${name}`);
    }
    for (const token of tokens.values()) {
      await rejectsWith(agents[1].events.deliver(token, "late"), "STEADFAST_WAIT_NOT_FOUND");
    }
    assert.deepEqual(await agents[1].approvals.list(), [], why);
  }
});

test("a question from ask_question (waitTools) or ctx.askQuestion is answered by another agent over the same fileStore days later", async () => {
  for (const via of ["waitTools", "ctx"]) {
    const dir = tmp(`question-${via}`);
    try {
      const clock = testClock({ start: T0 });
      const ask = { name: "confirm", description: "asks", execute: (args, ctx) => ctx.askQuestion(args.question, args.choices) };
      const call = { name: via === "ctx" ? "confirm" : "ask_question", args: { question: "Ship to the old address?", choices: ["yes", "no"] } };
      const open = () =>
        createAgent({
          model: callsThenEcho([call]),
          ...(via === "ctx" ? { tools: [ask] } : { waitTools: ["ask_question"] }),
          store: fileStore(join(dir, "runs"), { clock }),
          clock,
        });
      const a = open();
      const paused = await a.send("ship order 7", { sessionId: "q1" });
      assert.equal(paused.status, "awaiting-approval", via);
      const [wait] = paused.waits;
      assert.deepEqual(
        [wait.kind, wait.question, wait.choices, wait.token],
        ["question", "Ship to the old address?", ["yes", "no"], undefined],
        via,
      );
      const [listed] = await a.approvals.list();
      assert.deepEqual([listed.id, listed.kind, listed.question, listed.choices], [wait.id, "question", "Ship to the old address?", ["yes", "no"]]);
      const pending = await a.pending();
      assert.deepEqual(pending.map((p) => [p.runId, p.status]), [["q1", "awaiting-approval"]]);

      await clock.advance(4 * DAY);
      const b = open();
      const stored = await b.load("q1");
      await rejectsWith(b.approvals.resolve({ id: wait.id, answer: "maybe" }), "STEADFAST_INVALID_INPUT", (e) =>
        assert.match(e.message, /one of the question's choices: 'yes', 'no'/),
      );
      await rejectsWith(b.approvals.resolve({ id: wait.id, approved: true }), "STEADFAST_INVALID_INPUT");
      await rejectsWith(b.approvals.resolve({ id: wait.id }), "STEADFAST_INVALID_INPUT");
      await rejectsWith(b.approvals.resolve({ id: wait.id, answer: "no", approve: true }), "STEADFAST_CONFIG_INVALID");
      await rejectsWith(b.events.deliver("0".repeat(64), "no"), "STEADFAST_WAIT_NOT_FOUND");
      assert.deepEqual(await b.load("q1"), stored, "nothing changed");

      const events = [];
      const done = await b.approvals.resolve({ id: wait.id, answer: "no" }, { onEvent: (e) => events.push(e) });
      assert.equal(done.status, "finished", via);
      assert.equal(done.text, "got: no");
      assert.deepEqual(events.filter((e) => e.type === "wait.done").map((e) => e.by), ["answer"]);
      await rejectsWith(b.approvals.resolve({ id: wait.id, answer: "no" }), "STEADFAST_APPROVAL_NOT_FOUND");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }
});

test("a declined question is an error result with the note; an approval takes no answer", async () => {
  const store = memoryStore();
  const agent = createAgent({ model: callsThenEcho([{ name: "ask_question", args: { question: "Refund?" } }]), waitTools: ["ask_question"], store });
  const paused = await agent.send("go", { sessionId: "q2" });
  const done = await agent.approvals.resolve({ id: paused.waits[0].id, approved: false, note: "not mine" });
  const [result] = toolResults(done);
  assert.equal(result.isError, true);
  assert.match(result.content, /declined/);
  assert.match(result.content, /not mine/);

  const gated = { name: "refund", description: "refunds", needsApproval: true, execute: () => "refunded" };
  const b = createAgent({ model: callsThenEcho([{ name: "refund" }]), tools: [gated], store });
  const approval = await b.send("refund", { sessionId: "ap-1" });
  await rejectsWith(b.approvals.resolve({ id: approval.approvalId, approved: true, answer: "yes" }), "STEADFAST_INVALID_INPUT");
  assert.equal((await b.approvals.resolve({ id: approval.approvalId, approved: true })).text, "got: refunded");
});

test("a deadline records a timeout through the sweep, not before, and a late delivery is refused", async () => {
  const clock = testClock({ start: T0 });
  const seen = [];
  const agent = createAgent({ model: callsThenEcho([{ name: "await_payment" }]), tools: [eventTool("await_payment", seen, HOUR)], store: memoryStore(), clock });
  const paused = await agent.send("go", { sessionId: "pay-3" });
  const [wait] = paused.waits;
  await clock.advance(wait.dueAt - clock.now() - 1);
  const early = await agent.sweep();
  assert.equal(early.woken, 0, "not before the deadline");
  assert.equal((await agent.load("pay-3")).status, "awaiting-approval");
  await clock.advance(1);
  const tick = await agent.sweep();
  assert.equal(tick.woken, 1);
  const cp = await agent.load("pay-3");
  assert.equal(cp.status, "finished");
  const [timeout] = toolResults(cp);
  assert.equal(timeout.isError, true);
  assert.equal(JSON.parse(timeout.content).error, "timeout");
  await rejectsWith(agent.events.deliver(wait.token, { paid: true }), "STEADFAST_WAIT_NOT_FOUND");
  assert.equal((await agent.sweep()).woken, 0, "resolved once");
  assert.equal(seen.length, 1);
});

test("generated timers (ctx.sleepFor, ctx.sleepUntil with a Date or ms, sleep_for, sleep_until) wake the run at their time through the sweep, never before", async () => {
  for (const seed of cases(12)) {
    const r = rng(seed);
    const clock = testClock({ start: T0 });
    const ms = 1_000 * (1 + Math.floor(r() * 3 * 24 * 3600));
    const how = ["sleepFor", "sleepUntilDate", "sleepUntilMs", "sleep_for", "sleep_until"][Math.floor(r() * 5)];
    const nap = {
      name: "nap",
      description: "sleeps",
      execute: (_a, ctx) =>
        how === "sleepFor" ? ctx.sleepFor(ms) : how === "sleepUntilDate" ? ctx.sleepUntil(new Date(ctx.now + ms)) : ctx.sleepUntil(ctx.now + ms),
    };
    const call =
      how === "sleep_for"
        ? { name: "sleep_for", args: { seconds: ms / 1000 } }
        : how === "sleep_until"
          ? { name: "sleep_until", args: { at: new Date(T0 + ms).toISOString() } }
          : { name: "nap" };
    const parts = { tools: [nap], waitTools: ["sleep_for", "sleep_until"], store: memoryStore(), clock };
    const agent = createAgent({ model: callsThenEcho([call]), ...parts });
    const why = repro(seed, `${how} ${ms} ms`);
    const paused = await agent.send("wait", { sessionId: `nap-${seed}` });
    const [wait] = paused.waits;
    assert.deepEqual([paused.status, wait.kind, wait.dueAt], ["awaiting-approval", "timer", T0 + ms], why);
    // Ticks before the time, at generated moments: nothing wakes.
    for (let k = 0; k < 3; k++) {
      const step = Math.floor(r() * (wait.dueAt - clock.now() - 1));
      await clock.advance(step);
      assert.equal((await agent.sweep()).woken, 0, why);
    }
    await clock.advance(wait.dueAt - clock.now() - 1);
    assert.equal((await agent.sweep()).woken, 0, `${why}: 1 ms early`);
    assert.equal((await agent.load(`nap-${seed}`)).status, "awaiting-approval", why);
    const late = Math.floor(r() * 5 * 60_000);
    await clock.advance(1 + late);
    const tick = await agent.sweep();
    assert.equal(tick.woken, 1, why);
    const cp = await agent.load(`nap-${seed}`);
    assert.equal(cp.status, "finished", why);
    const woke = JSON.parse(toolResults(cp)[0].content);
    assert.deepEqual(woke, { woke: true, at: T0 + ms, late_ms: late }, why);
  }
});

test("a wait a tool cannot have is an InvalidWait result the model reads; reconcile cannot answer a wait", async () => {
  const cases = [
    ["bad_date", (ctx) => ctx.sleepUntil(new Date("not a date")), /^InvalidWait: 'bad_date' asked for a wait that cannot be recorded: at must be a time in ms since the epoch \(a number >= 0 or a valid Date\), not NaN$/],
    ["negative", (ctx) => ctx.sleepFor(-5), /^InvalidWait: 'negative' asked for a wait that cannot be recorded: ms must be a number >= 0, not -5$/],
    ["bad_deadline", (ctx) => ctx.waitForEvent({ deadline: "tomorrow" }), /deadline must be a time in ms since the epoch .* not a string$/],
    ["empty_question", (ctx) => ctx.askQuestion("  "), /^InvalidWait: 'empty_question' asked for a wait that cannot be recorded: a question needs a non-empty text$/],
    ["bad_choices", (ctx) => ctx.askQuestion("Which?", [1, 2]), /choices must be an array of strings/],
  ];
  for (const [name, wait, expected] of cases) {
    const tool = { name, description: "waits wrongly", execute: (_a, ctx) => wait(ctx) };
    const agent = createAgent({ model: callsThenEcho([{ name }]), tools: [tool], store: memoryStore() });
    const run = await agent.send("go", { sessionId: name });
    assert.equal(run.status, "finished", name);
    assert.equal(run.waits, undefined, name);
    const [result] = toolResults(run);
    assert.equal(result.isError, true, name);
    assert.match(result.content, expected, name);
  }
  // reconcile answers a result: a marker it returns (kept from an earlier ctx) fails the resume, coded, resumable.
  let kept;
  let throws = true;
  const charge = {
    name: "charge",
    description: "charges",
    sideEffecting: true,
    execute: (_a, ctx) => {
      kept = ctx.waitForEvent();
      if (throws) throw new PropagatingToolError("timed out after committing");
      return "charged";
    },
    reconcile: () => kept,
  };
  const payer = createAgent({ model: callsThenEcho([{ name: "charge" }]), tools: [charge], store: memoryStore() });
  await rejectsWith(payer.send("go", { sessionId: "rec" }), "STEADFAST_TOOL_PROPAGATED");
  await rejectsWith(payer.resume("rec"), "STEADFAST_TOOL_PROPAGATED", (e) => assert.match(e.message, /reconcile answered a wait/));
  assert.equal((await payer.load("rec")).status, "in-progress", "nothing was recorded for the call");
  throws = false;
  kept = undefined;
  charge.reconcile = () => null;
  assert.equal((await payer.resume("rec")).text, "got: charged", "resumable: the call ran again");
  // A plain result that looks like a marker's JSON is a result: only the helpers' symbol makes a wait.
  const lookalike = { name: "lookalike", description: "answers", execute: () => ({ kind: "event", "steadfast.wait": { kind: "event" } }) };
  const plain = await createAgent({ model: callsThenEcho([{ name: "lookalike" }]), tools: [lookalike], store: memoryStore() }).send("go", { sessionId: "look" });
  assert.equal(plain.status, "finished");
  assert.deepEqual(JSON.parse(toolResults(plain)[0].content), { kind: "event", "steadfast.wait": { kind: "event" } });
  // The helpers are not part of the ctx's JSON.
  let ctxJson;
  const show = { name: "show", description: "shows ctx", execute: (_a, ctx) => ((ctxJson = JSON.stringify(ctx)), "ok") };
  await createAgent({ model: callsThenEcho([{ name: "show" }]), tools: [show], store: memoryStore() }).send("go", { sessionId: "show" });
  assert.deepEqual(Object.keys(JSON.parse(ctxJson)).sort(), ["approvalId", "idempotencyKey", "now", "runId", "toolCallId", "waitToken"]);
});

test("payloads over the limits and bad arguments are refused with codes and change nothing", async () => {
  const seen = [];
  const agent = createAgent({ model: callsThenEcho([{ name: "await_payment" }]), tools: [eventTool("await_payment", seen)], store: memoryStore() });
  const paused = await agent.send("go", { sessionId: "pay-2" });
  const token = paused.waits[0].token;
  assert.equal(paused.waits[0].dueAt, undefined, "no deadline");
  const stored = await agent.load("pay-2");
  let deep = 0;
  for (let i = 0; i < 70; i++) deep = [deep];
  let tooDeep = 0;
  for (let i = 0; i < 200; i++) tooDeep = { a: tooDeep };
  const refusals = [
    [() => agent.events.deliver(token, "x".repeat(256 * 1024)), "STEADFAST_PAYLOAD_TOO_LARGE"],
    [() => agent.events.deliver(token, deep), "STEADFAST_INVALID_INPUT"],
    [() => agent.events.deliver(token, tooDeep), "STEADFAST_INVALID_INPUT"],
    [() => agent.events.deliver(token, 10n), "STEADFAST_INVALID_INPUT"],
    [() => agent.events.deliver(token), "STEADFAST_INVALID_INPUT"],
    [() => agent.events.deliver(42, "paid"), "STEADFAST_INVALID_INPUT"],
    [() => agent.events.deliver(token, "paid", { onEvnt: () => {} }), "STEADFAST_CONFIG_INVALID"],
  ];
  for (const [deliver, code] of refusals) {
    await rejectsWith(deliver(), code);
    assert.deepEqual(await agent.load("pay-2"), stored, code);
  }
  // Just under the limit is accepted (the JSON of a string has its two quotes).
  const ok = await agent.events.deliver(token, "x".repeat(256 * 1024 - 2));
  assert.equal(toolResults(ok.run)[0].content.length, 256 * 1024 - 2);
});

test("waitTools is an agent option read whole: the model is offered the chosen tools, and an unknown name is a config error", async () => {
  assert.throws(
    () => createAgent({ model: callsThenEcho([]), waitTools: ["ask_question", "nap"], store: memoryStore() }),
    (e) => e instanceof SteadfastError && e.code === "STEADFAST_CONFIG_INVALID" && /unknown variant `nap`/.test(e.message),
  );
  const offered = [];
  const model = { id: "look", generate: async (req) => (offered.push(req.tools.map((t) => t.name).sort()), { text: "ok", stopReason: "stop" }) };
  const own = { name: "own", description: "a tool", execute: () => "x" };
  await createAgent({ model, tools: [own], waitTools: ["sleep_until", "ask_question"], store: memoryStore() }).send("hi", { sessionId: "w1" });
  await createAgent({ model, tools: [own], store: memoryStore() }).send("hi", { sessionId: "w2" });
  assert.deepEqual(offered, [["ask_question", "own", "sleep_until"], ["own"]]);
});

test("a stream shows the wait's start; a send to the waiting run is refused naming the wait, as for an approval", async () => {
  const agent = createAgent({ model: callsThenEcho([{ name: "sleep_for", args: { seconds: 60 } }]), waitTools: ["sleep_for"], store: memoryStore() });
  const events = [];
  for await (const e of agent.stream("nap", { sessionId: "s1" })) events.push(e);
  const start = events.find((e) => e.type === "wait.start");
  assert.equal(start?.kind, "timer", events.map((e) => e.type).join(","));
  assert.equal(events.some((e) => e.type === "wait.done"), false);
  const [listed] = await agent.approvals.list();
  assert.deepEqual([listed.id, listed.kind, listed.dueAt], [start.waitId, "timer", start.dueAt]);
  await rejectsWith(agent.send("hurry", { sessionId: "s1" }), "STEADFAST_SESSION_AWAITING_APPROVAL", (e) => {
    assert.ok(e instanceof SessionAwaitingApprovalError);
    assert.equal(e.approvalId, start.waitId);
  });
  // A timer is not decided through the approvals API.
  await rejectsWith(agent.approvals.resolve({ id: start.waitId, approved: true }), "STEADFAST_INVALID_INPUT");
});
