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
