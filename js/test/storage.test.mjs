// Storage cost through the npm package (issue 31, part 2): `usage.storage` counts a run's own store operations
// (KV reads per key, writes, deletes, lists, bytes written), priced at Cloudflare's published prices or
// `storagePrices`, recorded with the run's journal entries; two runs sharing one agent and store each count their
// own; a store that does not count (memory) shows none.
import test from "node:test";
import assert from "node:assert/strict";
import { createAgent, kvStore, memoryStore, testClock } from "steadfast";
import { FakeKv } from "../test-support/fake_kv.mjs";

function looping(toolTurns) {
  return {
    id: "mock",
    async generate(request) {
      const turns = request.messages.filter((m) => m.role === "assistant").length;
      if (turns < toolTurns) return { toolCalls: [{ id: `c${turns}`, name: "lookup", args: {} }], stopReason: "tool_calls" };
      return { text: "done", stopReason: "stop" };
    },
  };
}

const lookup = { name: "lookup", description: "Looks up", execute: async () => "42" };

/** A KV namespace that counts what it is asked, as KV bills it. */
class CountingKv extends FakeKv {
  n = { reads: 0, writes: 0, deletes: 0, lists: 0 };
  async get(key) {
    this.n.reads += Array.isArray(key) ? key.length : 1;
    return super.get(key);
  }
  async put(key, value, options) {
    this.n.writes += 1;
    return super.put(key, value, options);
  }
  async delete(key) {
    this.n.deletes += 1;
    return super.delete(key);
  }
  async list(options) {
    this.n.lists += 1;
    return super.list(options);
  }
}

function agentOn(kv, turns, extra = {}) {
  const clock = testClock();
  return createAgent({ model: looping(turns), tools: [lookup], store: kvStore(kv, { clock }), clock, ...extra });
}

test("usage.storage is the run's own KV operations at KV's prices, and the journal keeps it", async () => {
  const kv = new CountingKv();
  const agent = agentOn(kv, 2);
  const r = await agent.send("go", { sessionId: "r" });
  const s = r.usage.storage;
  assert.equal(s.reads, kv.n.reads);
  // What the execution did after its last entry is not recorded (nothing is written after it): that entry's
  // write, the queue's last read, the lease's release.
  assert.deepEqual([kv.n.writes - s.writes, kv.n.deletes - s.deletes, kv.n.lists - s.lists], [2, 1, 1]);
  assert.ok(s.bytesWritten > 0);
  // $0.50 per million reads, $5 per million writes, deletes and lists.
  const nanos = s.reads * 500 + (s.writes + s.deletes + s.lists) * 5000;
  assert.equal(Math.round(s.costUsd * 1e9), nanos);
  assert.deepEqual((await agent.load("r")).storage, s, "recorded on the run");
});

test("two runs of one agent and store, interleaved, each count only their own operations", async () => {
  const alone = async (id, turns) => (await agentOn(new CountingKv(), turns).send("go", { sessionId: id })).usage.storage;
  const [a1, b1] = [await alone("a", 3), await alone("b", 1)];
  assert.notDeepEqual(a1, b1);
  const kv = new CountingKv();
  const clock = testClock();
  const store = kvStore(kv, { clock });
  const a = createAgent({ model: looping(3), tools: [lookup], store, clock });
  const b = createAgent({ model: looping(1), tools: [lookup], store, clock });
  const [ra, rb] = await Promise.all([a.send("go", { sessionId: "a" }), b.send("go", { sessionId: "b" })]);
  assert.deepEqual(ra.usage.storage, a1);
  assert.deepEqual(rb.usage.storage, b1);
});

test("storagePrices prices the operations; a bad one is refused by name", async () => {
  const agent = agentOn(new CountingKv(), 1, { storagePrices: { read: 1, write: 2, list: 0 } });
  const s = (await agent.send("go", { sessionId: "p" })).usage.storage;
  assert.equal(Math.round(s.costUsd * 1e9), s.reads * 1000 + s.writes * 2000 + s.deletes * 5000);
  assert.throws(() => agentOn(new CountingKv(), 1, { storagePrices: { writes: 2 } }), (e) => e.code === "STEADFAST_CONFIG_INVALID" && /storagePrices/.test(e.message));
});

test("the memory store counts nothing: no storage is shown", async () => {
  const agent = createAgent({ model: looping(1), tools: [lookup], store: memoryStore() });
  const r = await agent.send("go", { sessionId: "m" });
  assert.equal(r.usage.storage, undefined);
});
