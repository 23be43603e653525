// Packaging test: the built package's workerd entry, loaded by workerd (Miniflare) over a local KV namespace.
// Miniflare comes from the repository root's node_modules (`npm ci` there; pinned 4.20260426.0 for node 20).
import test, { after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { Miniflare } from "miniflare";

const root = fileURLToPath(new URL("..", import.meta.url));

test("the `workerd` export condition picks the workerd entry", () => {
  const resolved = execFileSync(
    process.execPath,
    ["--conditions=workerd", "--input-type=module", "-e", "console.log(import.meta.resolve('steadfast'))"],
    { cwd: root, encoding: "utf8" },
  ).trim();
  assert.match(resolved, /\/dist\/entrypoints\/workerd\.js$/);
});

const mf = new Miniflare({
  modules: true,
  modulesRoot: root,
  scriptPath: `${root}test-support/workerd/worker.mjs`,
  modulesRules: [
    { type: "ESModule", include: ["**/*.js", "**/*.mjs"] },
    { type: "CompiledWasm", include: ["**/*.wasm"] },
  ],
  compatibilityDate: "2026-04-01",
  kvNamespaces: ["RUNS"],
  cf: false,
});
after(() => mf.dispose());

async function get(path) {
  const res = await mf.dispatchFetch(`http://localhost${path}`);
  const body = await res.json();
  assert.equal(res.status, 200, JSON.stringify(body));
  return body;
}

test("under workerd: a propagated tool error, then resume over KV; the charge ran once", async () => {
  const r = await get("/order");
  assert.equal(r.code, "STEADFAST_TOOL_PROPAGATED");
  assert.equal(r.status, "finished");
  assert.equal(r.text, "Shipped.");
  assert.equal(r.counts.charges, 1);
  assert.equal(r.counts.shipments, 1);
});

test("under workerd: an approval resolved in a later request by another agent object", async () => {
  const paused = await get("/refund");
  assert.equal(paused.status, "awaiting-approval");
  assert.deepEqual(paused.refused, { awaiting: true, sessionId: "refund-7", approvalId: paused.approvalId });
  const done = await get("/resolve");
  assert.equal(done.status, "finished");
  assert.equal(done.text, "Refund issued.");
  assert.equal(done.counts.refunds, 1);
});

test("under workerd: the seed's recover example runs as written (memoryStore, real time)", async () => {
  const r = await get("/seed-recover");
  assert.deepEqual(r.logged, ["order-7: Order charged and shipped.", "1"]);
  assert.deepEqual(r.pending, []);
});

test("under workerd: the seed's recover example on KV with a test clock (agent and store) waits in virtual time only", async () => {
  const r = await get("/seed-recover-kv");
  assert.deepEqual(r.logged, ["order-7: Order charged and shipped.", "1"]);
  assert.deepEqual(r.pending, []);
  assert.ok(r.virtualMs >= 1_000, `the backoff passed in virtual time: ${r.virtualMs}`);
});

test("under workerd: a session's turns over KV, each request with new agent objects", async () => {
  const r = await get("/session");
  assert.deepEqual(r.runIds, ["chat-1.turn-1", "chat-1.turn-2"]);
  assert.deepEqual(r.texts, ["First answer.", "Second answer."]);
  assert.deepEqual(r.secondSaw, ["Hello", "First answer.", "And then?", "Second answer."]);
  assert.deepEqual(r.history, [[2, "chat-1.turn-2", "finished"], [1, "chat-1.turn-1", "finished"]]);
});

test("under workerd: the cron trigger's fireSchedule fires a fire time once over KV", async () => {
  const worker = await mf.getWorker();
  const tick = async (iso) => {
    const res = await worker.scheduled({ cron: "*/5 * * * *", scheduledTime: new Date(iso) });
    assert.equal(res.outcome, "ok");
    return get("/last-fire");
  };
  const first = await tick("2026-12-01T10:12:00Z");
  assert.deepEqual(first.outcomes.map((o) => o.outcome), ["idle"], "the store first sees the schedule at 10:12");
  const fired = await tick("2026-12-01T10:15:10Z");
  assert.equal(fired.outcomes[0].outcome, "fired");
  assert.equal(fired.outcomes[0].runId, `every5.${Date.parse("2026-12-01T10:15:00Z") / 1000}.fire`);
  assert.equal(fired.reports, 1);
  const again = await tick("2026-12-01T10:16:00Z");
  assert.equal(again.outcomes[0].outcome, "already-fired");
  assert.equal(again.reports, 1, "the report ran once");
});
