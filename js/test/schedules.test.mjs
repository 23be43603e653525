// Schedules: agent.fireSchedule(schedules) fires each due fire once (claimed in the store as run
// `<id>.<secs>.fire`), however often it is called and however many agents share the store; startSchedules()
// ticks it on the agent's clock until stop(); bad schedules are refused with codes. Time is a testClock.
import test from "node:test";
import assert from "node:assert/strict";
import { createAgent, defineTool, memoryStore, mockModel, SteadfastError, testClock } from "steadfast";

const MIN = 60_000;
const HOUR = 60 * MIN;
const T0 = Date.UTC(2026, 11, 1, 10, 10); // 2026-12-01T10:10:00Z
const T1 = Date.UTC(2026, 11, 1, 10, 12); // 10:12, not a fire time of */5 (10:10 is: a fire at `now` is due)

/** An agent whose every run calls `report` once, then says "Reported." (by-turn: each run follows its own transcript). */
function reporter({ store = memoryStore(), clock, counts = { reports: 0 } } = {}) {
  const report = defineTool({
    name: "report",
    description: "Send the report",
    execute: async (_args, ctx) => {
      counts.reports += 1;
      await new Promise((resolve) => setTimeout(resolve, 1)); // let a racing tick interleave
      return `sent for ${ctx.runId}`;
    },
  });
  const model = mockModel([{ toolCalls: [{ name: "report" }] }, "Reported."], { mode: "by-turn" });
  return { agent: createAgent({ model, tools: [report], store, clock }), counts, model };
}

const hourly = { id: "hourly", cron: "0 * * * *", input: "Send the hourly report" };

test("fireSchedule fires each fire time once over repeated calls (test clock)", async () => {
  const clock = testClock({ start: T0, auto: false });
  const { agent, counts, model } = reporter({ clock });

  // A new schedule does not fire for times before the store first saw it.
  const [first] = await agent.fireSchedule([hourly]);
  assert.deepEqual(first, { outcome: "idle", scheduleId: "hourly", nextFireAt: Date.UTC(2026, 11, 1, 11) });
  assert.equal(counts.reports, 0);

  await clock.advance(50 * MIN + 30_000); // 11:00:30
  const [fired] = await agent.fireSchedule([hourly]);
  const at11 = Date.UTC(2026, 11, 1, 11);
  assert.deepEqual(fired, { outcome: "fired", scheduleId: "hourly", runId: `hourly.${at11 / 1000}.fire`, fireAt: at11, status: "finished" });
  assert.equal(counts.reports, 1);
  const cp = await agent.load(fired.runId);
  assert.equal(cp.status, "finished");
  assert.deepEqual(model.calls[0].messages.filter((m) => m.role === "user").map((m) => m.content), ["Send the hourly report"]);

  for (let i = 0; i < 5; i++) {
    const [again] = await agent.fireSchedule([hourly]);
    assert.equal(again.outcome, "already-fired");
    assert.equal(again.fireAt, at11);
    await clock.advance(10 * MIN);
  }
  assert.equal(counts.reports, 1, "one run for the 11:00 fire");

  await clock.advance(12 * HOUR - 50 * MIN + 5_000 - 30_000); // to 23:00:05; the fires of 12:00..22:00 were missed
  const [late] = await agent.fireSchedule([hourly]);
  assert.equal(late.outcome, "fired");
  assert.equal(late.fireAt, Date.UTC(2026, 11, 1, 23), "missed fires collapse into the latest one (missed: run-once)");
  assert.equal(counts.reports, 2);
  assert.deepEqual((await agent.pending()), []);
});

test("missed: 'skip' skips a fire found after graceMs; several schedules get one outcome each", async () => {
  const clock = testClock({ start: T1, auto: false });
  const { agent, counts } = reporter({ clock });
  const skipping = { id: "nightly", cron: "0 11 * * *", input: [{ role: "user", content: "Nightly" }], missed: "skip", graceMs: 60_000 };
  const every5 = { id: "every5", cron: "*/5 * * * *", input: "tick" };
  assert.deepEqual((await agent.fireSchedule([skipping, every5])).map((o) => o.outcome), ["idle", "idle"]);
  await clock.advance(48 * MIN + 90_000); // 11:01:30: 90 s after 11:00, past the 60 s grace
  const outcomes = await agent.fireSchedule([skipping, every5]);
  assert.deepEqual(outcomes.map((o) => [o.scheduleId, o.outcome]), [["nightly", "skipped"], ["every5", "fired"]]);
  assert.equal(outcomes[0].fireAt, Date.UTC(2026, 11, 1, 11));
  assert.equal(counts.reports, 1, "only every5 ran");
});

test("two agents over one store firing the same tick run it once", async () => {
  const store = memoryStore();
  const clock = testClock({ start: T0, auto: false });
  const counts = { reports: 0 };
  const a = reporter({ store, clock, counts }).agent;
  const b = reporter({ store, clock, counts }).agent;
  await a.fireSchedule([hourly]); // the store sees the schedule at 10:10
  await clock.advance(50 * MIN + 1_000);
  const [oa, ob] = await Promise.all([a.fireSchedule([hourly]), b.fireSchedule([hourly])]);
  const kinds = [oa[0].outcome, ob[0].outcome].sort();
  assert.equal(kinds.filter((k) => k === "fired").length, 1, JSON.stringify([oa, ob]));
  assert.ok(["already-fired", "claimed"].includes(kinds.find((k) => k !== "fired")), JSON.stringify(kinds));
  assert.equal(counts.reports, 1, "the tool ran once");
  // Later ticks of both agents agree the fire happened.
  assert.deepEqual([(await a.fireSchedule([hourly]))[0].outcome, (await b.fireSchedule([hourly]))[0].outcome], ["already-fired", "already-fired"]);
  assert.equal(counts.reports, 1);
});

test("a fire whose run fails is reported as 'failed' with the coded error; the other schedules still fire", async () => {
  const clock = testClock({ start: T0, auto: false });
  const model = mockModel([{ error: { status: 400, message: "bad request" } }, "ok"]);
  const agent = createAgent({ model, store: memoryStore(), clock });
  const a = { id: "a", cron: "0 * * * *", input: "first" };
  const b = { id: "b", cron: "0 * * * *", input: "second" };
  await agent.fireSchedule([a, b]);
  await clock.advance(HOUR);
  const [fa, fb] = await agent.fireSchedule([a, b]);
  assert.equal(fa.outcome, "failed");
  assert.equal(fa.error.code, "STEADFAST_PROVIDER_BAD_REQUEST");
  assert.match(fa.runId, /^a\.\d+\.fire$/);
  assert.equal(fb.outcome, "fired");
});

test("bad schedules are refused with coded errors before anything runs", async () => {
  const { agent, counts } = reporter({ clock: testClock({ start: T0 }) });
  const cases = [
    [[{ id: "a.b", cron: "* * * * *", input: "x" }], "STEADFAST_SESSION_ID_INVALID"],
    [[{ id: "", cron: "* * * * *", input: "x" }], "STEADFAST_SESSION_ID_INVALID"],
    [[{ id: "a", cron: "61 * * * *", input: "x" }], "STEADFAST_CONFIG_INVALID"],
    [[{ id: "a", cron: "0 0 30 2 *", input: "x" }], "STEADFAST_CONFIG_INVALID"],
    [[{ id: "a", cron: "nonsense", input: "x" }], "STEADFAST_CONFIG_INVALID"],
    [[{ id: "a", cron: "@daily", input: [] }], "STEADFAST_CONFIG_INVALID"],
    [[{ id: "a", cron: "@daily", input: "x", every: 1 }], "STEADFAST_CONFIG_INVALID"],
    [[{ id: "a", cron: "@daily", input: "x", missed: "sometimes" }], "STEADFAST_CONFIG_INVALID"],
    [[{ id: "a", cron: "@daily", input: "x" }, { id: "a", cron: "@hourly", input: "y" }], "STEADFAST_CONFIG_INVALID"],
    [undefined, "STEADFAST_CONFIG_INVALID"],
    [{ id: "a", cron: "@daily", input: "x" }, "STEADFAST_CONFIG_INVALID"],
  ];
  for (const [schedules, code] of cases) {
    await assert.rejects(agent.fireSchedule(schedules), (e) => e instanceof SteadfastError && e.code === code, JSON.stringify(schedules));
    assert.throws(() => agent.startSchedules(schedules), (e) => e instanceof SteadfastError && e.code === code, JSON.stringify(schedules));
  }
  const err = await agent.fireSchedule([{ id: "a", cron: "61 * * * *", input: "x" }]).catch((e) => e);
  assert.match(err.message, /schedule 'a'/);
  for (const intervalMs of [0, -5, Number.NaN, Infinity]) {
    assert.throws(() => agent.startSchedules([hourly], { intervalMs }), { code: "STEADFAST_INVALID_INPUT" }, String(intervalMs));
  }
  assert.equal(counts.reports, 0);
});

test("startSchedules ticks on the agent's clock; a throwing onFire is reported and stop() still resolves", async () => {
  const clock = testClock({ start: T1 }); // auto: every sleep the loop waits on jumps at once in virtual time
  const { agent, counts } = reporter({ clock });
  const fires = [];
  const errors = [];
  const ticks = [];
  let third;
  const gotThree = new Promise((resolve) => (third = resolve));
  const loop = agent.startSchedules([{ id: "five", cron: "*/5 * * * *", input: "tick" }], {
    onTick: (outcomes) => ticks.push(outcomes.map((o) => o.outcome)),
    onFire: (outcome) => {
      fires.push(outcome);
      if (fires.length === 3) third();
      throw new Error("listener bug");
    },
    onError: (error) => errors.push(error),
  });
  await gotThree;
  await loop.stop();
  await loop.done;

  assert.deepEqual(ticks[0], ["idle"], "the first tick is at once, at 10:12 (nothing due yet)");
  assert.ok(fires.length >= 3);
  assert.equal(fires[0].fireAt, Date.UTC(2026, 11, 1, 10, 15));
  for (let i = 1; i < fires.length; i++) assert.equal(fires[i].fireAt - fires[i - 1].fireAt, 5 * MIN, "one fire per fire time");
  assert.ok(ticks.length >= 5 * 2, "the loop ticked every minute (60000 ms default) in virtual time");
  assert.equal(counts.reports, fires.length);
  assert.ok(errors.length >= 3);
  for (const e of errors) {
    assert.ok(e instanceof SteadfastError);
    assert.equal(e.code, "STEADFAST_HOOK_FAILED");
    assert.match(e.message, /onFire threw: listener bug/);
  }
  // Stopped: virtual time moves on, nothing more fires.
  const seen = fires.length;
  await clock.advance(HOUR);
  assert.equal(fires.length, seen);
  assert.equal(counts.reports, seen);
  assert.ok(clock.now() - T1 < 2 * HOUR, "virtual time, not real time");
});

test("startSchedules stops on its signal, and reports failed fires to onError", async () => {
  const clock = testClock({ start: T0 });
  const model = mockModel(Array.from({ length: 50 }, () => ({ error: { status: 400 } })));
  const agent = createAgent({ model, store: memoryStore(), clock });
  const controller = new AbortController();
  const errors = [];
  const loop = agent.startSchedules([{ id: "five", cron: "*/5 * * * *", input: "tick" }], {
    intervalMs: 30_000,
    onError: (error, outcome) => {
      errors.push([error, outcome]);
      controller.abort();
    },
    signal: controller.signal,
  });
  await loop.done;
  assert.equal(errors.length, 1);
  const [error, outcome] = errors[0];
  assert.equal(error.code, "STEADFAST_PROVIDER_BAD_REQUEST");
  assert.equal(outcome.outcome, "failed");
  assert.equal(error.runId, outcome.runId);
});
