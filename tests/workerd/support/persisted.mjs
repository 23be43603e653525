// One Worker ("a process") in its own workerd over state persisted in `dir`: local KV, and in strict mode
// (`mode === "strict"`) the run objects' SQLite storage, so that a NEW one started later over the same `dir` plays
// "another process, later". `config` is the agent configuration (strict mode adds `"store": "durable-object"`).
// `persistedWorkers(token)` gives a test file its factory `worker(mode, config, dir)`, whose instances are
// disposed after the file's tests (or by `stop()`). Shared by waits.test.mjs and subagents.test.mjs.
import { after } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { Miniflare } from "miniflare";
import { builtWorker } from "./built.mjs";

export function persistedWorkers(token) {
  const instances = [];
  after(async () => {
    for (const mf of instances) await mf.dispose();
  });
  return (mode, config, dir) =>
    persistedWorker({
      mode,
      config,
      dir,
      token,
      register: (mf) => instances.push(mf),
      unregister: (mf) => instances.splice(instances.indexOf(mf), 1),
    });
}

function persistedWorker({ mode, config, dir, token, register, unregister }) {
  assert.ok(fs.existsSync("build/index.js"), "build/index.js is missing: run ./scripts/build-worker");
  const strict = mode === "strict";
  const cfg = { recovery: { intervalMs: 1 }, ...config, ...(strict ? { store: "durable-object" } : {}) };
  const mf = new Miniflare({
    kvPersist: path.join(dir, "kv"),
    ...(strict ? { durableObjectsPersist: path.join(dir, "do") } : {}),
    workers: [
      {
        ...builtWorker(),
        name: "worker",
        kvNamespaces: { RUNS: "runs" },
        ...(strict ? { durableObjects: { RUN_OBJECTS: { className: "RunObject", useSQLite: true } } } : {}),
        bindings: { STEADFAST_TOKEN: token, STEADFAST_CONFIG: JSON.stringify(cfg) },
      },
    ],
    unsafeTriggerHandlers: true,
    cf: false,
  });
  register(mf);
  return {
    mf,
    dispatchFetch: async (url, init) => (await mf.getWorker("worker")).fetch(url, init),
    tick: async () => (await mf.getWorker("worker")).scheduled({ cron: "* * * * *", scheduledTime: new Date() }),
    stop: async () => {
      await mf.dispose();
      unregister(mf);
    },
  };
}
