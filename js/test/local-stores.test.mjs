// The stores for one machine — fileStore(dir), SqliteStore(path) (steadfast/sqlite), LocalStorageCheckpointStore
// (steadfast/utils) — are the journal store over a synchronous backend. This file checks the backend adapter
// keeps the KV semantics the journal relies on (values with metadata, bulk reads, prefix listing in pages with
// a cursor), and, across real processes, that runs survive a process that dies after a tool's effect and that
// processes racing to resume one run execute its pending call once (seeded delays; repro STEADFAST_SEED=<n>).
import test from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { createAgent, fileStore, LocalStorageCheckpointStore, mockModel } from "steadfast";
import { SqliteStore } from "steadfast/sqlite";
import { kvOverBackend } from "../dist/local_stores.js";
import { cases, repro, rng } from "../test-support/seeds.mjs";

const racer = fileURLToPath(new URL("../test-support/local/racer.mjs", import.meta.url));

class MemoryStorage {
  #items = new Map();
  get length() {
    return this.#items.size;
  }
  key(i) {
    return [...this.#items.keys()][i] ?? null;
  }
  getItem(k) {
    return this.#items.get(k) ?? null;
  }
  setItem(k, v) {
    this.#items.set(k, String(v));
  }
  removeItem(k) {
    this.#items.delete(k);
  }
}

const kinds = {
  file: (dir) => fileStore(join(dir, "runs")),
  sqlite: (dir) => new SqliteStore(join(dir, "runs.db")),
  "local-storage": () => new LocalStorageCheckpointStore(new MemoryStorage()),
};

/** The synchronous backends under the adapter (what each store writes to). */
const backends = {
  map: () => {
    const m = new Map();
    return { get: (k) => m.get(k) ?? null, set: (k, v) => m.set(k, v), delete: (k) => m.delete(k), keys: () => [...m.keys()] };
  },
};

for (const [kind, open] of Object.entries(kinds)) {
  test(`${kind}: runs, history, pending and delete through an agent, and a second handle on the same data sees them`, async () => {
    const dir = mkdtempSync(join(tmpdir(), `steadfast-${kind}-`));
    try {
      const store = open(dir);
      const model = mockModel([{ toolCalls: [{ name: "lookup", args: { q: "x" } }] }, "Found it."], { mode: "by-turn" });
      const lookup = { name: "lookup", description: "Look up", execute: () => "x is 1" };
      const agent = createAgent({ model, tools: [lookup], store });
      const r = await agent.send("Find x", { sessionId: "run-1" });
      assert.equal(r.text, "Found it.");
      const cps = store.checkpoints ?? store;
      assert.equal((await cps.load("run-1")).status, "finished");
      const history = await cps.history("run-1");
      assert.ok(history.length >= 3, `history of ${history.length}`);
      assert.deepEqual(history.map((h) => h.step), [...history.map((h) => h.step)].sort((a, b) => b - a), "newest first");
      assert.deepEqual(await cps.pending(), []);
      if (kind !== "local-storage") {
        // Another handle over the same file(s): the same run.
        const again = open(dir);
        assert.equal((await (again.checkpoints ?? again).load("run-1")).messages.length, r.messages.length);
      }
      await cps.delete("run-1");
      assert.equal(await cps.load("run-1"), null);
      await assert.rejects(cps.delete("run-1", { keepHistory: true }), { code: "STEADFAST_CONFIG_INVALID" });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

}

for (const kind of ["file", "sqlite", "local-storage"]) {
  test(`${kind}: results of every allowed size — eight 4 MiB results in one turn, 32 MiB — are recorded and read back whole`, async () => {
    const dir = mkdtempSync(join(tmpdir(), `steadfast-big-${kind}-`));
    try {
      const store = kinds[kind](dir);
      const size = 4 * 1024 * 1024;
      const calls = Array.from({ length: 8 }, (_, i) => ({ name: "big", args: { i } }));
      const model = mockModel([{ toolCalls: calls }, "Read them all."], { mode: "by-turn" });
      const big = { name: "big", description: "A big answer", execute: ({ i }) => String(i).repeat(size) };
      const agent = createAgent({ model, tools: [big], store, maxToolResultBytes: size });
      const r = await agent.send("go", { sessionId: "big" });
      assert.equal(r.text, "Read them all.");
      const again = kind === "local-storage" ? store : kinds[kind](dir);
      const cp = await (again.checkpoints ?? again).load("big");
      const results = cp.messages.filter((m) => m.role === "tool");
      assert.equal(results.length, 8);
      results.forEach((m, i) => assert.equal(m.content, String(i).repeat(size), `result ${i} whole`));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
}

test("the backend adapter keeps KV's semantics: values with metadata, bulk reads, prefix listing in pages of at most 1,000 with a cursor (a range backend and a keys backend alike)", async () => {
  const dir = mkdtempSync(join(tmpdir(), "steadfast-kv-"));
  try {
    const sqliteBackend = () => {
      // The SQLite backend through the store's own statements is not exported; a range-backend over a sorted
      // array stands for it (the store's SQL range is checked end to end by the tests above and below).
      const m = new Map();
      return {
        get: (k) => m.get(k) ?? null,
        set: (k, v) => m.set(k, v),
        delete: (k) => m.delete(k),
        keys: () => [...m.keys()],
        range: (prefix, after, limit) => {
          const ks = [...m.keys()].filter((k) => k.startsWith(prefix) && k > after).sort();
          return { keys: ks.slice(0, limit), more: ks.length > limit };
        },
      };
    };
    for (const make of [backends.map, sqliteBackend]) {
      const kv = kvOverBackend(make());
      for (let i = 0; i < 2_345; i++) {
        await kv.put(`run/${String(i).padStart(5, "0")}`, `v${i}`, i % 2 ? { metadata: { i } } : undefined);
      }
      await kv.put("other/x", "y");
      assert.equal(await kv.get("run/00007"), "v7");
      assert.equal(await kv.get("nope"), null);
      const bulk = await kv.get(["run/00001", "nope"]);
      assert.ok(bulk instanceof Map);
      assert.deepEqual([...bulk], [["run/00001", "v1"], ["nope", null]]);
      const seen = [];
      let cursor;
      let pages = 0;
      for (;;) {
        const page = await kv.list({ prefix: "run/", cursor });
        pages++;
        assert.ok(page.keys.length <= 1_000);
        seen.push(...page.keys);
        if (page.list_complete) break;
        cursor = page.cursor;
      }
      assert.equal(pages, 3);
      assert.equal(seen.length, 2_345);
      assert.deepEqual(seen[3], { name: "run/00003", metadata: { i: 3 } });
      assert.deepEqual(seen[4], { name: "run/00004" });
      assert.equal((await kv.list({ prefix: "run/", limit: 10 })).keys.length, 10);
      await kv.delete("run/00003");
      assert.equal(await kv.get("run/00003"), null);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("LocalStorageCheckpointStore keeps its keys under its prefix and reads values it did not write as corrupt", async () => {
  const storage = new MemoryStorage();
  storage.setItem("unrelated", "x");
  const store = new LocalStorageCheckpointStore(storage, { prefix: "app:" });
  const agent = createAgent({ model: mockModel(["Hi."]), store });
  await agent.send("Hello", { sessionId: "s" });
  const keys = Array.from({ length: storage.length }, (_, i) => storage.key(i));
  assert.ok(keys.filter((k) => k !== "unrelated").every((k) => k.startsWith("app:")), keys.join(", "));
  assert.equal(storage.getItem("unrelated"), "x");
  for (const k of keys.filter((k) => k !== "unrelated")) storage.setItem(k, "not a record");
  await assert.rejects(store.load("s"), (e) => typeof e.code === "string" && e.code.startsWith("STEADFAST_"));
  assert.throws(() => new LocalStorageCheckpointStore(null), { code: "STEADFAST_CONFIG_INVALID" });
  assert.throws(() => new LocalStorageCheckpointStore(new MemoryStorage(), { histroyLimit: 3 }), { code: "STEADFAST_CONFIG_INVALID" });
  assert.throws(() => fileStore(""), { code: "STEADFAST_CONFIG_INVALID" });
  assert.throws(() => new SqliteStore(""), { code: "STEADFAST_CONFIG_INVALID" });
});

/** Runs the racer in `cwd`; resolves its exit code and output. */
function runRacer(cwd, kind, mode, delayMs) {
  return new Promise((resolve) => {
    const p = spawn(process.execPath, [racer, kind, mode, String(delayMs)], { cwd });
    let out = "";
    p.stdout.on("data", (d) => (out += d));
    p.stderr.on("data", (d) => (out += d));
    p.on("exit", (code) => resolve({ code, out: out.trim() }));
  });
}

for (const kind of ["file", "sqlite"]) {
  test(`${kind}: a process dies after a tool's effect; racing processes resume the run: the pending call runs once more, under the same key, and the run finishes once (generated)`, async () => {
    for (const seed of cases(4)) {
      const dir = mkdtempSync(join(tmpdir(), `steadfast-race-${kind}-`));
      try {
        const crashed = await runRacer(dir, kind, "send-crash", 0);
        assert.equal(crashed.code, 137, repro(seed, crashed.out));
        // Past the dead process's 1 s lease; then 3 processes resume at seeded moments within 60 ms.
        await new Promise((r) => setTimeout(r, 1_100));
        const rnd = rng(seed);
        const racers = await Promise.all([0, 1, 2].map(() => runRacer(dir, kind, "resume", Math.floor(rnd() * 60))));
        const outs = racers.map((r) => r.out);
        const finished = outs.filter((o) => o === "finished").length;
        const busy = outs.filter((o) => o === "STEADFAST_SESSION_BUSY" || o === "nothing").length;
        assert.equal(finished + busy, 3, repro(seed, outs.join(" | ")));
        // At most one process finished the run: a second would have run its pending call again.
        assert.ok(finished <= 1, repro(seed, outs.join(" | ")));
        // The effect ran twice at most: once in the dead process, once in the resume; both under one key.
        const effects = readFileSync(join(dir, "effects.log"), "utf8").trim().split("\n");
        assert.equal(new Set(effects).size, 1, repro(seed, effects.join(",")));
        assert.ok(effects.length <= 1 + finished && effects.length >= 1, repro(seed, `${effects.length} effects, ${outs.join(" | ")}`));
        // Whoever lost, the run is finished now (a last resume finds nothing to do).
        const last = await runRacer(dir, kind, "resume", 0);
        assert.equal(last.out, finished === 1 ? "nothing" : "finished", repro(seed, `${outs.join(" | ")} then ${last.out}`));
        assert.ok(existsSync(join(dir, "effects.log")));
        assert.equal(readFileSync(join(dir, "effects.log"), "utf8").trim().split("\n").length, 2, repro(seed, "effects after the last resume"));
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    }
  });
}
