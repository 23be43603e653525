// `durableObjectStore(ctx)` under workerd (Miniflare, SQLite-backed Durable Objects persisted to a temporary
// directory): an application's own Durable Object keeps its agent runs in its SQLite storage. The store
// conformance suite on the same Rust types runs inside a real object in test/worker.test.mjs (/__conformance).
import test, { after } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { Miniflare } from "miniflare";

const root = fileURLToPath(new URL("..", import.meta.url));
const persist = mkdtempSync(join(tmpdir(), "steadfast-do-"));

/** A workerd over the objects persisted in `persist` (a new one is a restarted process). */
function workerd() {
  return new Miniflare({
    modules: true,
    modulesRoot: root,
    scriptPath: `${root}test-support/workerd/durable.mjs`,
    modulesRules: [
      { type: "ESModule", include: ["**/*.js", "**/*.mjs"] },
      { type: "CompiledWasm", include: ["**/*.wasm"] },
    ],
    compatibilityDate: "2026-04-01",
    durableObjects: { RUNS_OBJECT: { className: "Runs", useSQLite: true } },
    durableObjectsPersist: persist,
    cf: false,
  });
}
let mf = workerd();
after(async () => {
  await mf.dispose();
  rmSync(persist, { recursive: true, force: true });
});

async function get(path) {
  const res = await mf.dispatchFetch(`http://localhost${path}`);
  const body = await res.json();
  assert.equal(res.status, 200, JSON.stringify(body));
  return body;
}

test("two sends to one session in the object at once: one runs it, the other gets STEADFAST_SESSION_BUSY; the tool ran once", async () => {
  const r = await get("/race");
  const codes = r.outcomes.map((o) => o.code ?? o.status).sort();
  assert.deepEqual(codes, ["STEADFAST_SESSION_BUSY", "finished"], JSON.stringify(r.outcomes));
  assert.equal(r.outcomes.find((o) => o.status)?.text, "Slow done.");
  assert.equal(r.status, "finished");
  assert.equal(r.slow, 1);
});

test("an approval waits in the object's storage across a workerd restart and is resolved there by a new agent", async () => {
  const paused = await get("/refund");
  assert.equal(paused.status, "awaiting-approval");
  assert.match(paused.approvalId, /./);
  assert.deepEqual(paused.pending, ["refund-7"]);
  await mf.dispose();
  mf = workerd(); // a new process over the persisted SQLite storage
  const done = await get("/resolve");
  assert.deepEqual(done, { status: "finished", text: "Refunded.", refunds: 1, pending: 0 });
});

test("stores with other prefixes in one object do not see each other's runs", async () => {
  assert.deepEqual(await get("/prefixes"), { a: "From a.", seenByA: "finished", seenByB: null });
});

test("a storage without SQL is refused with STEADFAST_CONFIG_INVALID", async () => {
  const r = await get("/bad-storage");
  assert.equal(r.code, "STEADFAST_CONFIG_INVALID", JSON.stringify(r));
  assert.match(r.message, /SQLite-backed/);
});

test("tools' waits in the object's storage: after a workerd restart an event is delivered once, and the sweep an alarm runs times out a deadline and wakes a timer at their time, not before", async () => {
  const parked = await get("/wait");
  assert.deepEqual([parked.pay.kind, parked.late.kind, parked.nap.kind], ["event", "event", "timer"]);
  assert.match(parked.pay.token, /^[0-9a-f]{64}$/);
  await mf.dispose();
  mf = workerd(); // a new process over the persisted SQLite storage
  const guessed = (parked.pay.token[0] === "a" ? "b" : "a") + parked.pay.token.slice(1);
  assert.deepEqual(await get(`/deliver?token=${guessed}`), {
    code: "STEADFAST_WAIT_NOT_FOUND",
    runId: null,
    message: "no event wait has this token (it is unknown, was spent, or its run is gone)",
  });
  const delivered = await get(`/deliver?token=${parked.pay.token}`);
  assert.deepEqual(delivered, { duplicate: false, status: "finished", result: '{"paid":true}' });
  assert.equal((await get(`/deliver?token=${parked.pay.token}`)).code, "STEADFAST_WAIT_NOT_FOUND", "spent");

  const early = await get(`/alarm?skewMs=${30 * 60_000}`);
  assert.equal(early.woken, 0);
  assert.deepEqual([early.late.status, early.nap.status], ["awaiting-approval", "awaiting-approval"]);
  const due = await get(`/alarm?skewMs=${2 * 3_600_000}`);
  assert.equal(due.woken, 2, JSON.stringify(due));
  assert.equal(due.late.status, "finished");
  assert.equal(JSON.parse(due.late.result).error, "timeout");
  assert.equal(due.nap.status, "finished");
  assert.equal(JSON.parse(due.nap.result).woke, true);
  assert.equal((await get(`/alarm?skewMs=${3 * 3_600_000}`)).woken, 0, "resolved once");
});
