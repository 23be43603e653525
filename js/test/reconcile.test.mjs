// Side-effecting JS tools: the intent of a `sideEffecting` call is recorded before it runs; a resume that finds an
// intent without an outcome asks `reconcile(args, {idempotencyKey})` first (the key `execute` got), so an effect
// that happened (a charge committed, then the call timed out) is recorded instead of done twice.
import test from "node:test";
import assert from "node:assert/strict";
import { createAgent, defineTool, memoryStore, mockModel, PropagatingToolError } from "steadfast";

/** A payment API that commits the charge, then (the first time) times out before answering. */
function payments() {
  const ledger = new Map(); // idempotency key -> charge number
  let charges = 0;
  let timeouts = 1;
  return {
    ledger,
    get charges() {
      return charges;
    },
    charge(key) {
      charges += 1;
      ledger.set(key, charges);
      if (timeouts > 0) {
        timeouts -= 1;
        throw new PropagatingToolError("the payment API timed out after committing");
      }
      return `charge #${charges}`;
    },
  };
}

function chargeTool(api, { reconcile, sideEffecting } = {}) {
  return defineTool({
    name: "charge",
    description: "Charge the card",
    inputSchema: { type: "object", properties: { amount: { type: "number" } }, required: ["amount"] },
    sideEffecting,
    execute: async (_args, ctx) => api.charge(ctx.idempotencyKey),
    reconcile,
  });
}

const script = () => mockModel([{ toolCalls: [{ name: "charge", args: { amount: 5 } }] }, "charged"], { mode: "by-turn" });

test("reconcile finds the committed charge: the resume records it and does not charge again", async () => {
  const api = payments();
  const seen = [];
  const reconcile = async (args, ctx) => {
    seen.push([args, ctx]);
    const n = api.ledger.get(ctx.idempotencyKey);
    return n === undefined ? null : `charge #${n} (found by reconcile)`;
  };
  const store = memoryStore();
  const agent = createAgent({ model: script(), tools: [chargeTool(api, { reconcile })], store });
  await assert.rejects(agent.send("charge 5", { sessionId: "order" }), { code: "STEADFAST_TOOL_PROPAGATED" });
  const cp = await agent.load("order");
  assert.equal(cp.intents.length, 1, "the intent was recorded before the call ran");
  // Another agent object (another process) resumes.
  const again = createAgent({ model: script(), tools: [chargeTool(api, { reconcile })], store });
  const r = await again.resume("order");
  assert.equal(r.status, "finished");
  assert.equal(api.charges, 1, "charged once");
  assert.equal(seen.length, 1);
  assert.deepEqual(seen[0][0], { amount: 5 });
  assert.deepEqual(Object.keys(seen[0][1]), ["idempotencyKey"]);
  assert.match(seen[0][1].idempotencyKey, /^[0-9a-f]{32}$/, "the call key");
  assert.deepEqual([...api.ledger.keys()], [seen[0][1].idempotencyKey], "the key the charge ran under");
  assert.notEqual(seen[0][1].idempotencyKey, cp.intents[0], "not the bare call id");
  assert.ok(r.messages.some((m) => m.role === "tool" && m.content === "charge #1 (found by reconcile)"));
  assert.deepEqual((await again.load("order")).intents ?? [], [], "the outcome closed the intent");
});

test("without reconcile (or when it finds nothing) the call runs again; a plain tool records no intent", async () => {
  for (const [label, opts, intents] of [
    ["sideEffecting", { sideEffecting: true }, 1],
    ["reconcile finds nothing", { reconcile: () => undefined }, 1],
    ["plain", {}, 0],
  ]) {
    const api = payments();
    const agent = createAgent({ model: script(), tools: [chargeTool(api, opts)], store: memoryStore() });
    await assert.rejects(agent.send("charge 5", { sessionId: "order" }));
    assert.equal(((await agent.load("order")).intents ?? []).length, intents, label);
    const r = await agent.resume("order");
    assert.equal(r.status, "finished", label);
    assert.equal(api.charges, 2, `${label}: the call ran again`);
  }
});

test("a reconcile that throws fails the resume (STEADFAST_TOOL_PROPAGATED) and keeps the intent for the next try", async () => {
  const api = payments();
  let broken = true;
  const reconcile = async (_args, ctx) => {
    if (broken) throw new Error("ledger unreachable");
    return api.ledger.has(ctx.idempotencyKey) ? "found" : null;
  };
  const agent = createAgent({ model: script(), tools: [chargeTool(api, { reconcile })], store: memoryStore() });
  await assert.rejects(agent.send("charge 5", { sessionId: "order" }));
  await assert.rejects(agent.resume("order"), (e) => {
    assert.equal(e.code, "STEADFAST_TOOL_PROPAGATED");
    assert.match(e.message, /reconciling 'charge'.*ledger unreachable/);
    return true;
  });
  assert.equal((await agent.load("order")).intents.length, 1);
  broken = false;
  assert.equal((await agent.resume("order")).status, "finished");
  assert.equal(api.charges, 1);
});

test("sideEffecting and reconcile are checked", () => {
  const api = payments();
  for (const opts of [{ sideEffecting: "yes" }, { reconcile: 3 }]) {
    assert.throws(() => createAgent({ model: script(), tools: [chargeTool(api, opts)], store: memoryStore() }), {
      code: "STEADFAST_CONFIG_INVALID",
    });
  }
});
