// The `recover` loop as the documents show it: the seed's example as written (only the imports adapted),
// callbacks with the documented arguments, throwing callbacks, and the sweep's timing (backoff, quarantine,
// outage breaker) on a test clock, so nothing waits in real time. A loop that never stops fails its test by the
// timeout instead of hanging the suite.
import test from "node:test";
import assert from "node:assert/strict";
import { createAgent, defineTool, memoryStore, mockModel, PropagatingToolError, SteadfastError, testClock } from "steadfast";
import { rng } from "../test-support/seeds.mjs";

/** The seed's shop: `charge`, then `ship`, which fails the first time for each run (or while `down()`). */
function shop({ down } = {}) {
  const counts = { charges: 0, attempts: 0 };
  const tried = new Set();
  const tools = [
    defineTool({ name: "charge", description: "Charge the card", execute: async () => `charged ${++counts.charges}` }),
    defineTool({
      name: "ship",
      description: "Ship the order",
      execute: async (_args, ctx) => {
        counts.attempts += 1;
        const first = !tried.has(ctx.runId);
        tried.add(ctx.runId);
        if (down ? down() : first) throw new PropagatingToolError("process died");
        return "shipped";
      },
    }),
  ];
  return { counts, tools };
}

test("the seed's recover example runs as written: onRecovered(run, result) logs 'order-7: …', stop() ends the loop, charges === 1", { timeout: 60_000 }, async () => {
  // durable-execution.txt, "Recovering automatically", with `input: z.object({})` left out (a tool without an
  // inputSchema takes an object) and console.log captured.
  const logged = [];
  const log = console.log;
  console.log = (...a) => logged.push(a.join(" "));
  try {
    let charges = 0;
    let attempts = 0;
    const tools = [
      defineTool({ name: "charge", description: "Charge the card", execute: async () => `charged ${++charges}` }),
      // Stands in for the process dying mid-step: it fails the first time only.
      defineTool({
        name: "ship",
        description: "Ship the order",
        execute: async () => {
          if (++attempts === 1) throw new PropagatingToolError("process died");
          return "shipped";
        },
      }),
    ];
    const agent = createAgent({
      provider: mockModel([{ toolCalls: [{ name: "charge" }] }, { toolCalls: [{ name: "ship" }] }, "Order charged and shipped."]),
      tools,
      store: memoryStore(),
    });
    await agent.send("Charge and ship order 7", { sessionId: "order-7" }).catch(() => undefined); // interrupted after the charge

    const recovery = agent.recover({
      intervalMs: 1_000,
      onRecovered: (run, result) => {
        console.log(`${run.sessionId}: ${result.text}`); // order-7: Order charged and shipped.
        void recovery.stop(); // a server keeps it running and stops it on shutdown (or passes `signal`)
      },
      onError: (error, run) => console.error("recovery failed", run?.sessionId, error),
    });
    await recovery.done; // resolves once the loop stopped
    console.log(charges); // 1: the completed charge step did not run again
    assert.deepEqual(logged, ["order-7: Order charged and shipped.", "1"]);
    assert.deepEqual(await agent.pending(), []);
  } finally {
    console.log = log;
  }
});

test("a callback that stops the loop and then throws still stops it; the throw reaches onError as STEADFAST_HOOK_FAILED", { timeout: 60_000 }, async () => {
  const clock = testClock();
  const { tools } = shop();
  const model = mockModel([{ toolCalls: [{ name: "charge" }] }, { toolCalls: [{ name: "ship" }] }, "done"], { mode: "by-turn" });
  const agent = createAgent({ model, tools, store: memoryStore(), clock });
  await agent.send("go", { sessionId: "order-8" }).catch(() => undefined);
  const errors = [];
  const recovery = agent.recover({
    onRecovered: (run, result) => {
      assert.equal(result.status, "finished");
      void recovery.stop();
      throw new Error(`callback exploded on ${run.runId}`);
    },
    onError: (error, run) => errors.push({ error, run }),
  });
  await recovery.done;
  assert.equal(errors.length, 1);
  assert.ok(errors[0].error instanceof SteadfastError);
  assert.equal(errors[0].error.code, "STEADFAST_HOOK_FAILED");
  assert.match(errors[0].error.message, /onRecovered threw: callback exploded on order-8/);
  assert.deepEqual(errors[0].run, { runId: "order-8", sessionId: "order-8" });
  assert.deepEqual(await agent.pending(), []);
});

test("callbacks that always throw (onError too) neither stop the loop nor keep an AbortSignal or stop() from stopping it", { timeout: 60_000 }, async () => {
  for (const how of ["signal", "stop"]) {
    const clock = testClock();
    const { tools } = shop();
    const model = mockModel([{ toolCalls: [{ name: "charge" }] }, { toolCalls: [{ name: "ship" }] }, "done"], { mode: "by-turn" });
    const agent = createAgent({ model, tools, store: memoryStore(), clock });
    for (const id of ["a-1", "a-2"]) await agent.send("go", { sessionId: id }).catch(() => undefined);
    const controller = new AbortController();
    let recovered = 0;
    let errorsSeen = 0;
    let recovery;
    recovery = agent.recover({
      signal: controller.signal,
      onRecovered: () => {
        recovered += 1;
        if (recovered === 2) (how === "signal" ? controller.abort() : void recovery.stop());
        throw new Error("onRecovered always throws");
      },
      onError: () => {
        errorsSeen += 1;
        throw new Error("onError always throws");
      },
    });
    await recovery.done;
    assert.equal(recovered, 2, `${how}: both runs were recovered although every callback threw`);
    assert.equal(errorsSeen, 2, `${how}: each throw reached onError`);
    assert.deepEqual(await agent.pending(), []);
  }
});

test("recover on a test clock: backoff doubles from intervalMs, quarantine after maxAttempts calls onQuarantined(run) once", { timeout: 60_000 }, async () => {
  const clock = testClock({ start: 0 });
  let down = true;
  const resumedAt = [];
  const { tools } = shop({ down: () => down });
  const model = mockModel([{ toolCalls: [{ name: "ship" }] }, "done"], { mode: "by-turn" });
  const agent = createAgent({ model, tools, store: memoryStore(), clock });
  await agent.send("go", { sessionId: "job" }).catch(() => undefined);
  const quarantined = [];
  const errors = [];
  const recovery = agent.recover({
    intervalMs: 30_000,
    everyMs: 5_000,
    onQuarantined: (run) => {
      quarantined.push(run);
      void recovery.stop();
    },
    onError: (error, run) => {
      resumedAt.push(clock.now());
      errors.push([error.code, run?.sessionId]);
    },
  });
  const real = Date.now();
  await recovery.done;
  assert.ok(Date.now() - real < 5_000, "no real waiting");
  // The first failure was the send at t = 0; each resume failed again (reported to onError).
  const gaps = resumedAt.map((t, i) => t - (i === 0 ? 0 : resumedAt[i - 1]));
  const expected = [30_000, 60_000, 120_000, 240_000, 480_000, 900_000, 900_000, 900_000, 900_000];
  assert.equal(gaps.length, expected.length, `9 resumes after the first failure: ${gaps}`);
  gaps.forEach((g, i) => assert.ok(g >= expected[i] && g < expected[i] + 5_000, `gap ${g} for backoff ${expected[i]}: ${gaps}`));
  assert.ok(errors.every(([code, id]) => code === "STEADFAST_TOOL_PROPAGATED" && id === "job"), JSON.stringify(errors));
  assert.equal(quarantined.length, 1);
  assert.equal(quarantined[0].sessionId, "job");
  assert.equal(quarantined[0].runId, "job");
  assert.equal(quarantined[0].attempts, 10);
  assert.equal(quarantined[0].quarantined, true);
  const [listed] = await agent.pending();
  assert.equal(listed.sessionId, "job");
  assert.equal(listed.quarantined, true);
  // Still resumable by hand.
  down = false;
  assert.equal((await agent.resume("job")).status, "finished");
});

test("recover on a test clock: provider failures open the outage breaker (onOutage(true)) and a probe closes it (onOutage(false))", { timeout: 60_000 }, async () => {
  const clock = testClock({ start: 0 });
  let down = true;
  let calls = 0;
  const model = {
    id: "flaky",
    async generate() {
      calls += 1;
      if (down) throw Object.assign(new Error("overloaded"), { status: 503 });
      return { text: "ok" };
    },
  };
  const agent = createAgent({ model, store: memoryStore(), clock, retry: { maxAttempts: 1 } });
  for (const id of ["r-0", "r-1", "r-2", "r-3"]) await assert.rejects(agent.send("go", { sessionId: id }));
  const outage = [];
  const recovered = [];
  const recovery = agent.recover({
    intervalMs: 1_000,
    everyMs: 1_000,
    onOutage: (active) => {
      outage.push([active, clock.now()]);
      if (active) setTimeout(() => (down = false), 0); // the provider comes back while the breaker is open
    },
    onRecovered: (run, result) => {
      recovered.push(run.sessionId);
      assert.equal(result.text, "ok");
      if (recovered.length === 4) void recovery.stop();
    },
  });
  await recovery.done;
  assert.deepEqual(outage.map(([a]) => a), [true, false]);
  assert.ok(outage[1][1] > outage[0][1], "the breaker closed later in virtual time");
  assert.deepEqual(recovered.sort(), ["r-0", "r-1", "r-2", "r-3"]);
  assert.deepEqual(await agent.pending(), []);
  assert.ok(calls >= 8);
});

test("recover refuses bad options through onError and stops", { timeout: 60_000 }, async () => {
  const agent = createAgent({ model: mockModel([]), store: memoryStore(), clock: testClock() });
  const errors = [];
  const recovery = agent.recover({ maxAttempts: "ten", onError: (e, run) => errors.push([e, run]) });
  await recovery.done;
  assert.equal(errors.length, 1);
  assert.equal(errors[0][0].code, "STEADFAST_INVALID_INPUT");
  assert.equal(errors[0][1], undefined);
});


// Repro one case: STEADFAST_SEED=<seed> node --test --test-name-pattern="generated" test/recovery.test.mjs
test("generated: whatever the callbacks throw and whenever stop()/signal come, the loop stops, recovers every run before it, and reports each throw", { timeout: 60_000 }, async () => {
  const only = process.env.STEADFAST_SEED;
  const seeds = only === undefined ? Array.from({ length: 60 }, (_, i) => i + 1) : [Number(only)];
  for (const seed of seeds) {
    const r = rng(seed);
    const pick = (n) => Math.floor(r() * n);
    const runs = 1 + pick(4);
    const stopAfter = 1 + pick(runs); // stop once this many runs were recovered
    const how = ["stop", "signal", "stop-in-onError"][pick(3)];
    const throwIn = { onRecovered: r() < 0.6, onError: r() < 0.5 };
    const throwBeforeStop = r() < 0.5;
    const clock = testClock();
    const { tools } = shop();
    const model = mockModel([{ toolCalls: [{ name: "ship" }] }, "done"], { mode: "by-turn" });
    const agent = createAgent({ model, tools, store: memoryStore(), clock });
    for (let i = 0; i < runs; i++) await agent.send("go", { sessionId: `g-${i}` }).catch(() => undefined);
    const controller = new AbortController();
    let recovered = 0;
    let errors = 0;
    let stopped = false;
    let recovery;
    const stop = () => {
      stopped = true;
      if (how === "signal") controller.abort();
      else void recovery.stop();
    };
    recovery = agent.recover({
      signal: controller.signal,
      everyMs: 1 + pick(60_000),
      onRecovered: (run, result) => {
        assert.equal(result.status, "finished");
        assert.equal(run.sessionId, run.runId);
        recovered += 1;
        const due = recovered === stopAfter && how !== "stop-in-onError";
        if (due && !throwBeforeStop) stop();
        if (throwIn.onRecovered) {
          if (due && throwBeforeStop) queueMicrotask(stop); // the throw comes first; stop follows
          throw new Error(`seed ${seed}: onRecovered throws`);
        }
        if (due && throwBeforeStop) stop();
      },
      onError: (error) => {
        errors += 1;
        assert.equal(error.code, "STEADFAST_HOOK_FAILED", `seed ${seed}`);
        if (how === "stop-in-onError" && recovered >= stopAfter && !stopped) stop();
        if (throwIn.onError) throw new Error(`seed ${seed}: onError throws`);
      },
    });
    if (how === "stop-in-onError" && !throwIn.onRecovered) {
      // No callback throws, so nothing reaches onError: stop from outside once enough runs are recovered.
      while (recovered < stopAfter) await clock.advance(1);
      stop();
    }
    await recovery.done;
    const left = (await agent.pending()).length;
    const ctx = `seed ${seed} (${JSON.stringify({ runs, stopAfter, how, throwIn, throwBeforeStop })})`;
    assert.ok(recovered >= stopAfter, `${ctx}: recovered ${recovered}`);
    assert.equal(left, runs - recovered, `${ctx}: every recovered run is finished`);
    assert.equal(errors, throwIn.onRecovered ? recovered : 0, `${ctx}: each throw reached onError once`);
  }
});

test("stop() aborts the resume in flight (its checkpoint stays) and starts nothing more; the next start finishes the runs", { timeout: 60_000 }, async () => {
  const clock = testClock();
  let hang = true;
  let started = 0;
  let recovery;
  const slow = defineTool({
    name: "slow",
    description: "Never answers while the service hangs",
    execute: () => {
      started += 1;
      if (!hang) return "done";
      void recovery.stop(); // stop() arrives while the resume runs this tool
      return new Promise(() => {});
    },
  });
  const failOnce = new Set();
  const gate = defineTool({
    name: "gate",
    description: "Fails the first time per run",
    execute: async (_a, ctx) => {
      if (failOnce.has(ctx.runId)) return "open";
      failOnce.add(ctx.runId);
      throw new PropagatingToolError("died");
    },
  });
  const model = mockModel([{ toolCalls: [{ name: "gate" }] }, { toolCalls: [{ name: "slow" }] }, "finished"], { mode: "by-turn" });
  const agent = createAgent({ model, tools: [gate, slow], store: memoryStore(), clock });
  for (const id of ["a", "b"]) await agent.send("go", { sessionId: id }).catch(() => undefined);
  const recovered = [];
  const errors = [];
  recovery = agent.recover({ onRecovered: (run) => recovered.push(run.sessionId), onError: (e) => errors.push(e) });
  await recovery.done;
  assert.equal(started, 1, "one resume started, and it was aborted");
  assert.deepEqual(recovered, []);
  assert.deepEqual(errors, [], "an aborted resume is not an error");
  const pending = await agent.pending();
  assert.deepEqual(pending.map((p) => p.status), ["in-progress", "in-progress"]);
  hang = false;
  await clock.advance(60_000); // past the aborted run's lease
  const again = agent.recover({
    onRecovered: (run) => {
      recovered.push(run.sessionId);
      if (recovered.length === 2) void again.stop();
    },
  });
  await again.done;
  assert.deepEqual(recovered.sort(), ["a", "b"]);
  assert.deepEqual(await agent.pending(), []);
});

test("an async callback that rejects is reported to onError like a throw (no unhandled rejection)", { timeout: 60_000 }, async () => {
  const clock = testClock();
  const { tools } = shop();
  const model = mockModel([{ toolCalls: [{ name: "ship" }] }, "done"], { mode: "by-turn" });
  const agent = createAgent({ model, tools, store: memoryStore(), clock });
  await agent.send("go", { sessionId: "async-1" }).catch(() => undefined);
  const errors = [];
  let recovery;
  const reported = new Promise((resolve) => {
    recovery = agent.recover({
      onRecovered: async () => {
        await Promise.resolve();
        throw new Error("async callback failed");
      },
      onError: (e) => {
        errors.push(e);
        resolve();
      },
    });
  });
  await reported;
  await recovery.stop();
  assert.equal(errors.length, 1);
  assert.match(errors[0].message, /async callback failed/);
  assert.deepEqual(await agent.pending(), []);
});
