// A real process crash: the built Worker (build/index.js) runs under workerd in a child process group of its
// own, over Workers KV persisted in a directory; `kill -9` of the whole group (node + workerd) while slow
// webhook tools are in flight; a new process on the same directory; the cron trigger fired until the run
// finishes. The webhook endpoints are an idempotent local server on 127.0.0.1 that counts every request per
// Idempotency-Key. In strict mode (`"store": "durable-object"`, the run objects' SQLite storage persisted beside
// KV) the same crash is finished by the run object's alarm in the restarted workerd, with no request and no cron
// tick. Three levels of sub-agents (issue 30), in both modes: the middle child pauses its lead on an approval, the
// decision runs it into the grandchild, whose call is in flight at the kill; one cron tick (KV) or the alarms alone
// (strict) finish all three, each effect once per key.
//
// This file is also the Worker process itself: started with STEADFAST_CRASH_KV_DIR set, it serves the Worker
// instead of defining tests (a separate fixture under tests/workerd/ would be run as a test file by `node --test tests/workerd/`).
import { test, after } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { builtWorker } from "./support/built.mjs";
import { callKey } from "./support/api.mjs";

const SELF = fileURLToPath(import.meta.url);
const ROOT = path.resolve(path.dirname(SELF), "../..");
const KV_DIR_ENV = "STEADFAST_CRASH_KV_DIR";

if (process.env[KV_DIR_ENV]) {
  await serveWorker(process.env[KV_DIR_ENV]);
} else {
  defineTests();
}

// ---------- the Worker process ----------

// Serves the Worker on 127.0.0.1 (a free port) with KV persisted in `kvDir`, prints `READY <url>` and runs
// until killed (Miniflare's workerd child keeps this process alive).
async function serveWorker(kvDir) {
  const { Miniflare } = await import("miniflare");
  const mf = new Miniflare({
    ...builtWorker(path.join(ROOT, "build")),
    kvNamespaces: ["RUNS"],
    kvPersist: kvDir,
    // Strict mode's run objects (SQLite-backed), persisted beside KV; unused in KV mode.
    durableObjects: { RUN_OBJECTS: { className: "RunObject", useSQLite: true } },
    durableObjectsPersist: `${kvDir}-objects`,
    bindings: { STEADFAST_TOKEN: process.env.STEADFAST_TOKEN, STEADFAST_CONFIG: process.env.STEADFAST_CONFIG },
    host: "127.0.0.1",
    port: 0,
    unsafeTriggerHandlers: true,
    cf: false,
    // The Worker's console (sweep reports, errors) goes to this process's output, which the test keeps.
    handleRuntimeStdio(stdout, stderr) {
      stdout.pipe(process.stdout);
      stderr.pipe(process.stderr);
    },
  });
  const url = await mf.ready;
  process.stdout.write(`READY ${url.href}\n`);
}

// ---------- the test side ----------

function defineTests() {
  const TOKEN = "crash-test-token-0123456789";
  const RUN = "order-7";
  const workers = new Set();
  const kvDir = fs.mkdtempSync(path.join(os.tmpdir(), "steadfast-crash-"));
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

  // Live (not zombie) processes of a process group, from /proc: [{pid, comm}].
  function groupMembers(pgid) {
    const out = [];
    for (const d of fs.readdirSync("/proc")) {
      if (!/^\d+$/.test(d)) continue;
      let stat;
      try {
        stat = fs.readFileSync(`/proc/${d}/stat`, "utf8");
      } catch {
        continue; // exited meanwhile
      }
      const close = stat.lastIndexOf(")");
      const [state, , pgrp] = stat.slice(close + 2).split(" ");
      if (Number(pgrp) === pgid && state !== "Z") out.push({ pid: Number(d), comm: stat.slice(stat.indexOf("(") + 1, close) });
    }
    return out;
  }

  // Starts a Worker process (its own process group) over `kvDir`; resolves when it serves.
  function startWorker(config) {
    const env = { ...process.env, [KV_DIR_ENV]: kvDir, STEADFAST_TOKEN: TOKEN, STEADFAST_CONFIG: JSON.stringify(config) };
    delete env.NODE_TEST_CONTEXT; // the child is a plain node process, not a test file of this runner
    const child = spawn(process.execPath, [SELF], { cwd: ROOT, env, detached: true, stdio: ["ignore", "pipe", "pipe"] });
    const w = { child, pid: child.pid, log: "", exited: new Promise((r) => child.once("exit", (code, signal) => r({ code, signal }))) };
    workers.add(w);
    child.stdout.setEncoding("utf8");
    child.stderr.setEncoding("utf8");
    child.stderr.on("data", (s) => (w.log += s));
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`the Worker process did not start in 30 s:\n${w.log}`)), 30_000);
      child.stdout.on("data", (s) => {
        w.log += s;
        const m = /^READY (\S+)$/m.exec(w.log);
        if (m && !w.url) {
          clearTimeout(timer);
          w.url = m[1].replace(/\/$/, "");
          resolve(w);
        }
      });
      w.exited.then(({ code, signal }) => {
        clearTimeout(timer);
        reject(new Error(`the Worker process exited (${code ?? signal}) before serving:\n${w.log}`));
      });
    });
  }

  // kill -9 of the whole process group; resolves once no live process of the group is left.
  async function killGroup(w) {
    try {
      process.kill(-w.pid, "SIGKILL");
    } catch (e) {
      if (e.code !== "ESRCH") throw e;
    }
    await w.exited;
    const deadline = Date.now() + 10_000;
    while (groupMembers(w.pid).length > 0) {
      if (Date.now() > deadline) throw new Error(`processes left in group ${w.pid}: ${JSON.stringify(groupMembers(w.pid))}`);
      await sleep(20);
    }
    workers.delete(w);
  }

  // Leave nothing running, also when a test fails or the runner exits early.
  const killAll = () => {
    for (const w of workers) {
      try {
        process.kill(-w.pid, "SIGKILL");
      } catch {
        // already gone
      }
    }
  };
  process.on("exit", killAll);

  async function call(w, method, p, body) {
    const init = { method, headers: { authorization: `Bearer ${TOKEN}` } };
    if (body !== undefined) init.body = JSON.stringify(body);
    const res = await fetch(w.url + p, init);
    const text = await res.text();
    let json;
    try {
      json = JSON.parse(text);
    } catch {
      json = text;
    }
    return { status: res.status, json, text };
  }

  // The newest stored state of the run (GET /runs/{id}/history: the whole checkpoint, held results and
  // intents included).
  async function latest(w) {
    const h = await call(w, "GET", `/runs/${RUN}/history?limit=1`);
    assert.equal(h.status, 200, h.text);
    assert.equal(h.json.length, 1, h.text);
    return h.json[0].checkpoint;
  }

  async function until(what, fn, ms, w, every = 50) {
    const deadline = Date.now() + ms;
    for (;;) {
      const v = await fn();
      if (v) return v;
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}\n--- worker output ---\n${w?.log.slice(-4000) ?? ""}`);
      await sleep(every);
    }
  }

  // ----- the webhook endpoints: idempotent by Idempotency-Key, every request counted -----
  // The first request of a tool in `hold` is never answered (the process dies waiting for it); its effect is
  // stored all the same, and a retry with the same key gets the stored answer, as a payments API would do.
  const requests = []; // { tool, key, callId, runId }
  // The mock model's call ids repeat from run to run (call_<turn>_<i>), so the endpoint scopes a key to its
  // run (the X-Steadfast-Run-Id header), as an API scopes keys to an account.
  const effects = new Map(); // `<run id> <key>` -> { tool, body }
  const ek = (runId, key) => `${runId} ${key}`;
  const hold = new Set(["ship", "stock", "pack", "crate", "bin"]);
  const arrived = new Map([...hold].map((t) => [t, deferred()]));
  const held = [];
  function deferred() {
    let resolve;
    const promise = new Promise((r) => (resolve = r));
    return { promise, resolve };
  }
  const server = http.createServer((req, res) => {
    let raw = "";
    req.on("data", (c) => (raw += c));
    req.on("end", () => {
      const tool = req.url.replace(/^\/tools\//, "");
      const key = req.headers["idempotency-key"];
      requests.push({ tool, key, callId: req.headers["x-steadfast-tool-call-id"], runId: req.headers["x-steadfast-run-id"] });
      if (!key) {
        res.writeHead(400, { "content-type": "application/json" });
        return res.end(JSON.stringify({ error: "Idempotency-Key is required" }));
      }
      const runId = req.headers["x-steadfast-run-id"];
      if (!effects.has(ek(runId, key))) effects.set(ek(runId, key), { tool, body: { tool, key, effect: effects.size + 1, args: JSON.parse(raw || "null") } });
      if (hold.delete(tool)) {
        held.push(res);
        return arrived.get(tool).resolve();
      }
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify(effects.get(ek(runId, key)).body));
    });
  });
  const listening = new Promise((r) => server.listen(0, "127.0.0.1", r));

  after(async () => {
    for (const w of [...workers]) await killGroup(w);
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
    fs.rmSync(kvDir, { recursive: true, force: true });
    fs.rmSync(`${kvDir}-objects`, { recursive: true, force: true });
  });

  test("kill -9 of workerd while slow webhooks run: a new process finishes the run, each effect once per key", { timeout: 120_000 }, async () => {
    await listening;
    const base = `http://127.0.0.1:${server.address().port}/tools`;
    const webhook = (name, sideEffecting) => ({
      name,
      description: `${name} (test endpoint)`,
      inputSchema: { type: "object" },
      url: `${base}/${name}`,
      sideEffecting,
      timeoutMs: 30_000,
    });
    const LEASE = { ttlMs: 5000, renewEveryMs: 500, graceMs: 1000 };
    const config = {
      model: {
        provider: "mock",
        script: [
          // a side-effecting and a plain call in one turn, both fast: recorded before the crash
          { toolCalls: [{ name: "charge", args: { order: 7, cents: 4200 } }, { name: "lookup", args: { q: "address of order 7" } }] },
          // the crash turn: a slow side effect (intent recorded, no outcome), a fast plain call (recorded,
          // held behind the first call), a slow plain call (no result)
          { toolCalls: [{ name: "ship", args: { order: 7 } }, { name: "quote", args: { order: 7 } }, { name: "stock", args: { sku: "A-7" } }] },
          { text: "Order 7 is charged and shipped." },
        ],
      },
      demoTools: false,
      limits: { maxSteps: 5 },
      lease: LEASE,
      recovery: { intervalMs: 100 },
      tools: [webhook("charge", true), webhook("lookup", false), webhook("ship", true), webhook("quote", false), webhook("stock", false)],
      allowedHosts: ["127.0.0.1"],
    };

    // ----- process A: start the run, crash it mid-turn -----
    const a = await startWorker(config);
    const send = call(a, "POST", `/runs/${RUN}`, { input: "Charge, ship and quote order 7" }).then(
      (r) => ({ answered: r }),
      (e) => ({ failed: e }),
    );
    const waitFor = (tool) => Promise.race([arrived.get(tool).promise, send.then((r) => {
      throw new Error(`the run ended before ${tool} arrived: ${JSON.stringify(r.answered ?? String(r.failed))}\n${a.log}`);
    })]);
    await waitFor("ship");
    await waitFor("stock");
    // Everything but the two held calls settles; wait until quote's result is durable (held behind ship).
    const atCrash = await until("quote's result to be recorded", async () => {
      const cp = await latest(a);
      return cp.heldResults?.some((r) => r.name === "quote") ? cp : null;
    }, 15_000, a);

    const members = groupMembers(a.pid);
    assert.ok(members.some((m) => m.comm.startsWith("workerd")), `workerd runs in the group: ${JSON.stringify(members)}`);
    const killedAt = Date.now();
    await killGroup(a);
    const outcome = await send;
    assert.ok(outcome.failed, `the request in flight died with the process, got ${JSON.stringify(outcome.answered)}`);

    // What was recorded at the crash: turn 1 answered; in turn 2, ship's intent without an outcome, quote's
    // result held behind it, stock nothing.
    const turns = atCrash.messages.filter((m) => m.role === "assistant" && m.toolCalls);
    assert.equal(turns.length, 2, JSON.stringify(atCrash.messages));
    const [t1, t2] = turns.map((t) => Object.fromEntries(t.toolCalls.map((c) => [c.name, c.id])));
    const recordedAtCrash = new Map(
      [...atCrash.messages.filter((m) => m.role === "tool"), ...atCrash.heldResults].map((r) => [r.toolCallId, r]),
    );
    assert.deepEqual([...recordedAtCrash.keys()].sort(), [t1.charge, t1.lookup, t2.quote].sort());
    assert.deepEqual(atCrash.intents, [t2.ship], "ship's intent is recorded, its outcome is not");
    const inFlight = [t2.ship, t2.stock];

    // ----- process B: same persisted KV; nothing recorded was lost -----
    const b = await startWorker(config);
    assert.deepEqual(await latest(b), atCrash, "the state recorded before kill -9 is what the new process reads");
    const listed = await call(b, "GET", "/runs?status=in-progress");
    assert.deepEqual(listed.json.runs.map((r) => r.runId), [RUN], listed.text);

    // The dead owner renewed its lease at most renewEveryMs before the kill: until ttl + grace after that,
    // a sweep must turn the run away and touch nothing (no tool runs, no write).
    const cron = async () => {
      const t = await fetch(`${b.url}/cdn-cgi/handler/scheduled?cron=*+*+*+*+*`);
      assert.equal(t.status, 200, await t.text());
    };
    const liveUntil = killedAt + LEASE.ttlMs + LEASE.graceMs - LEASE.renewEveryMs - 500;
    const requestsAtCrash = requests.length;
    await cron();
    const early = Date.now() < liveUntil;
    if (early) {
      assert.equal(requests.length, requestsAtCrash, "no tool ran while the dead owner's lease was live");
      assert.deepEqual(await latest(b), atCrash, "a sweep turned away by a live lease writes nothing");
    }

    // Fire the cron handler until the run finishes (the dead owner's lease expires first: ttl + grace).
    let ticks = 1;
    const run = await until("the run to finish", async () => {
      await cron();
      ticks++;
      const r = await call(b, "GET", `/runs/${RUN}`);
      assert.equal(r.status, 200, r.text);
      return r.json.status === "finished" ? r.json : null;
    }, 30_000, b, 250);
    const recoveredIn = Date.now() - killedAt;

    // ----- the finished run -----
    assert.equal(run.finishReason, "stop", JSON.stringify(run));
    assert.equal(run.step, 3, "each model turn generated once");
    const msgs = run.messages;
    assert.equal(msgs.at(-1).content, "Order 7 is charged and shipped.");
    const calls = [];
    // A valid transcript: each tool turn is followed by exactly one result per call, in call order.
    for (let i = 0; i < msgs.length; i++) {
      if (msgs[i].role === "tool") assert.fail(`result without a call at ${i}: ${JSON.stringify(msgs[i])}`);
      if (msgs[i].role !== "assistant" || !msgs[i].toolCalls) continue;
      for (const c of msgs[i].toolCalls) {
        const r = msgs[++i];
        assert.equal(r?.role, "tool", `a result follows ${c.name}`);
        assert.equal(r.toolCallId, c.id, `results in call order (${c.name})`);
        calls.push({ call: c, result: r });
      }
    }
    assert.deepEqual(calls.map((c) => c.call.name), ["charge", "lookup", "ship", "quote", "stock"]);
    const final = await latest(b);
    assert.deepEqual([final.heldResults ?? [], final.intents ?? []], [[], []], "nothing left held or intended");

    const keyOf = new Map();
    for (const { call: c } of calls) keyOf.set(c.id, await callKey(final.keyScope, c.id));
    for (const { call: c, result: r } of calls) {
      const key = keyOf.get(c.id);
      const sent = requests.filter((q) => q.callId === c.id && q.runId === RUN);
      // Every request of a call (before the crash and after) carries the call's key.
      assert.ok(sent.every((q) => q.key === key), `${c.name}: keys ${JSON.stringify(sent)} (its key ${key})`);
      // Its real result: the endpoint's answer for this key (no validation, interrupted or fabricated result).
      assert.equal(r.kind, "execution", `${c.name}: ${JSON.stringify(r)}`);
      assert.equal(r.isError, false, `${c.name}: ${JSON.stringify(r)}`);
      assert.deepEqual(JSON.parse(r.content), effects.get(ek(RUN, key))?.body, `${c.name}: the endpoint's answer`);
      if (recordedAtCrash.has(c.id)) {
        assert.equal(sent.length, 1, `${c.name}'s result was recorded before the crash: it never ran again`);
        const { role: _, ...kept } = recordedAtCrash.get(c.id); // a held result has no role yet
        assert.deepEqual(r, { role: "tool", ...kept }, `${c.name}: the recorded result is kept`);
      } else {
        // In flight at the crash: its first request was never answered, so its result came from running it
        // again, once, with the same key (at most twice in all).
        assert.ok(inFlight.includes(c.id));
        assert.equal(sent.length, 2, `${c.name} was in flight: ran once before the crash and once after`);
      }
    }
    // One effect per Idempotency-Key, one key per call, no request for anything else.
    assert.deepEqual([...effects.keys()].filter((k) => k.startsWith(`${RUN} `)).sort(), calls.map((c) => ek(RUN, keyOf.get(c.call.id))).sort());
    assert.ok(requests.every((q) => effects.get(ek(q.runId, q.key))?.tool === q.tool), JSON.stringify(requests));

    await killGroup(b);
    assert.deepEqual(groupMembers(b.pid), [], "no process left");
    console.log(
      `crash test: recovered ${recoveredIn} ms after kill -9 (${ticks} cron ticks; first tick inside the dead ` +
        `owner's lease: ${early}), ${requests.length} webhook requests, ${effects.size} effects`,
    );
  });

  // Three levels of sub-agents under lead `lead`: `middle` calls `refund` (a webhook that needs approval), then the
  // grandchild `deep`, which calls the webhook `tool` (held: never answered before the crash).
  function threeLevels(lead, tool, extra) {
    const base = `http://127.0.0.1:${server.address().port}/tools`;
    const webhook = (name, more = {}) => ({ name, description: `${name} (test endpoint)`, inputSchema: { type: "object" },
      url: `${base}/${name}`, sideEffecting: true, timeoutMs: 30_000, ...more });
    const mock = (script) => ({ provider: "mock", script });
    return {
      ...extra,
      model: mock([{ toolCalls: [{ name: "middle", args: { task: `refund and restock ${lead}` } }] }, { text: "the tree is done" }]),
      demoTools: false,
      lease: { ttlMs: 2500, renewEveryMs: 800, graceMs: 100 },
      recovery: { intervalMs: 1 },
      allowedHosts: ["127.0.0.1"],
      subagents: [{
        name: "middle",
        description: "Refunds and restocks",
        model: mock([
          { toolCalls: [{ name: "refund", args: { run: lead } }] },
          { toolCalls: [{ name: "deep", args: { task: "restock" } }] },
          { text: "refunded, restocked" },
        ]),
        tools: [webhook("refund", { needsApproval: true })],
        subagents: [{
          name: "deep",
          description: "Restocks",
          model: mock([{ toolCalls: [{ name: tool, args: { run: lead } }] }, { text: "restocked" }]),
          tools: [webhook(tool)],
        }],
      }],
    };
  }

  // Process A: the lead pauses on its middle child's approval; the decision runs the middle child, which runs the
  // grandchild, whose call of `tool` never gets an answer: the process dies there. Returns the middle child's id
  // and when the process died.
  async function pauseApproveAndKill(config, lead, tool) {
    const a = await startWorker(config);
    const paused = await call(a, "POST", `/runs/${lead}`, { input: "refund and restock" });
    assert.equal(paused.json.status, "awaiting-approval", paused.text);
    const listed = await call(a, "GET", "/approvals");
    const approval = listed.json.find((r) => r.runId.startsWith(`${lead}.sub-middle-`) && r.toolCall.name === "refund");
    assert.ok(approval, listed.text);
    const decided = call(a, "POST", `/approvals/${approval.id}`, { approved: true }).then((r) => ({ answered: r }), (e) => ({ failed: e }));
    await Promise.race([arrived.get(tool).promise, decided.then((r) => {
      throw new Error(`the decision ended before the grandchild's call arrived: ${JSON.stringify(r.answered ?? String(r.failed))}\n${a.log}`);
    })]);
    const killedAt = Date.now();
    await killGroup(a);
    assert.ok((await decided).failed, "the decision's request died with the process");
    return { middleId: approval.runId, killedAt };
  }

  // The finished tree: the lead's and the middle child's results, and each effect once per key (the approved
  // refund ran once; the grandchild's call, in flight at the crash, ran again once with the same key, and its
  // endpoint answered the stored effect).
  async function assertTreeDone(w, lead, middleId, tool) {
    const view = (await call(w, "GET", `/runs/${lead}`)).json;
    assert.equal(view.messages.at(-1).content, "the tree is done");
    assert.deepEqual(view.children.map((c) => [c.runId, c.status]), [[middleId, "finished"]]);
    assert.equal(view.messages.find((m) => m.role === "tool").content, "refunded, restocked", "the middle child's result");
    const middle = (await call(w, "GET", `/runs/${middleId}`)).json;
    const deepId = middle.children.find((c) => c.name === "deep").runId;
    const deep = (await call(w, "GET", `/runs/${deepId}`)).json;
    assert.deepEqual([middle.status, deep.status], ["finished", "finished"]);
    assert.equal(middle.messages.filter((m) => m.role === "tool").at(-1).content, "restocked", "the grandchild's result");
    const of = (runId, name) => requests.filter((q) => q.runId === runId && q.tool === name);
    assert.equal(of(middleId, "refund").length, 1, JSON.stringify(requests));
    const sent = of(deepId, tool);
    assert.equal(sent.length, 2, JSON.stringify(sent));
    assert.equal(new Set(sent.map((q) => q.key)).size, 1, "the same key before and after the crash");
    const deepCall = deep.messages.find((m) => m.toolCalls).toolCalls[0];
    const deepScope = (await call(w, "GET", `/runs/${deepId}/history?limit=1`)).json[0].checkpoint.keyScope;
    assert.equal(sent[0].key, await callKey(deepScope, deepCall.id), "the grandchild's call key");
    assert.deepEqual([...effects.keys()].filter((k) => k.startsWith(`${lead}.`)).sort(),
      [ek(middleId, of(middleId, "refund")[0].key), ek(deepId, sent[0].key)].sort(), "one effect per key");
    assert.deepEqual(JSON.parse(deep.messages.find((m) => m.role === "tool").content), effects.get(ek(deepId, sent[0].key)).body);
  }

  test("three levels of sub-agents: the middle one paused for approval, kill -9 mid-grandchild after the decision; one cron tick of a new process finishes all three, each effect once per key", { timeout: 120_000 }, async () => {
    await listening;
    const LEAD = "tree-1";
    const config = threeLevels(LEAD, "crate", {});
    const { middleId, killedAt } = await pauseApproveAndKill(config, LEAD, "crate");
    // Process B: what the crash left (the middle child and the grandchild mid-run, the lead waiting on its
    // child); once the dead owner's leases are over, one cron tick.
    const b = await startWorker(config);
    const middleAtCrash = (await call(b, "GET", `/runs/${middleId}`)).json;
    assert.equal(middleAtCrash.status, "in-progress", JSON.stringify(middleAtCrash));
    const deepId = middleAtCrash.children.find((c) => c.name === "deep")?.runId;
    assert.ok(deepId, JSON.stringify(middleAtCrash.children));
    assert.equal((await call(b, "GET", `/runs/${deepId}`)).json.status, "in-progress");
    assert.equal((await call(b, "GET", `/runs/${LEAD}`)).json.status, "awaiting-approval");
    await sleep(Math.max(0, killedAt + config.lease.ttlMs + config.lease.graceMs + 200 - Date.now()));
    const tick = await fetch(`${b.url}/cdn-cgi/handler/scheduled?cron=*+*+*+*+*`);
    assert.equal(tick.status, 200, await tick.text());
    const lead = (await call(b, "GET", `/runs/${LEAD}`)).json;
    assert.equal(lead.status, "finished", `one tick finished the tree: ${JSON.stringify(lead)}\n${b.log.slice(-3000)}`);
    await assertTreeDone(b, LEAD, middleId, "crate");
    await killGroup(b);
    console.log(`three-level crash test: one cron tick finished the tree ${Date.now() - killedAt} ms after kill -9`);
  });

  test("strict mode, three levels of sub-agents: kill -9 mid-grandchild after the middle one's approval; the restarted workerd finishes all three with no request, each effect once per key", { timeout: 120_000 }, async () => {
    await listening;
    const LEAD = "tree-s";
    const config = threeLevels(LEAD, "bin", { store: "durable-object" });
    const { middleId } = await pauseApproveAndKill(config, LEAD, "bin");
    // No request, no cron tick: the run objects' alarms in the restarted workerd.
    const b = await startWorker(config);
    const restartedAt = Date.now();
    await until("the tree to finish", async () => {
      const r = await call(b, "GET", `/runs/${LEAD}`);
      return r.json.status === "finished" ? r.json : null;
    }, 30_000, b, 200);
    await assertTreeDone(b, LEAD, middleId, "bin");
    await killGroup(b);
    console.log(`strict three-level crash test: the alarms finished the tree ${Date.now() - restartedAt} ms after the restart`);
  });

  test("strict mode: kill -9 of workerd mid-tool: restarted on the persisted state, the run object's alarm finishes the run with no request and no cron tick, each effect once per key", { timeout: 120_000 }, async () => {
    await listening;
    const RUN_S = "strict-7";
    const base = `http://127.0.0.1:${server.address().port}/tools`;
    const webhook = (name, sideEffecting) => ({ name, description: `${name} (test endpoint)`, inputSchema: { type: "object" },
      url: `${base}/${name}`, sideEffecting, timeoutMs: 30_000 });
    const config = {
      store: "durable-object",
      model: {
        provider: "mock",
        script: [
          // a slow side effect (held by the endpoint: never answered before the crash) and a fast plain call
          { toolCalls: [{ name: "pack", args: { order: 8 } }, { name: "weigh", args: { order: 8 } }] },
          { text: "Order 8 is packed." },
        ],
      },
      demoTools: false,
      limits: { maxSteps: 4 },
      // Short leases: the object's alarm (set when an execution starts, for when its lease could be taken over)
      // comes soon after the dead owner's lease ends.
      lease: { ttlMs: 2500, renewEveryMs: 800, graceMs: 100 },
      recovery: { intervalMs: 1 },
      tools: [webhook("pack", true), webhook("weigh", false)],
      allowedHosts: ["127.0.0.1"],
    };
    const history = async (w) => {
      const h = await call(w, "GET", `/runs/${RUN_S}/history?limit=1`);
      assert.equal(h.status, 200, h.text);
      return h.json[0].checkpoint;
    };

    // ----- process A: the run starts in its object (202: no client holds it), then the process dies -----
    const a = await startWorker(config);
    const accepted = await fetch(`${a.url}/runs/${RUN_S}`, { method: "POST", body: JSON.stringify({ input: "Pack order 8" }),
      headers: { authorization: `Bearer ${TOKEN}`, prefer: "respond-async" } });
    assert.equal(accepted.status, 202, await accepted.text());
    await arrived.get("pack").promise;
    const atCrash = await until("weigh's result to be recorded", async () => {
      const cp = await history(a);
      return cp.heldResults?.some((r) => r.name === "weigh") ? cp : null;
    }, 15_000, a);
    const call0 = Object.fromEntries(atCrash.messages.find((m) => m.toolCalls).toolCalls.map((c) => [c.name, c.id]));
    assert.deepEqual(atCrash.intents, [call0.pack], "pack's intent is recorded, its outcome is not");
    assert.ok(groupMembers(a.pid).some((m) => m.comm.startsWith("workerd")), "workerd runs in the group");
    await killGroup(a);
    const requestsAtCrash = requests.filter((q) => q.runId === RUN_S).length;
    assert.equal(requestsAtCrash, 2, "pack (held) and weigh ran once each before the crash");

    // ----- process B: same persisted KV and object storage. No request at all, no cron tick: workerd's alarm
    // scheduler (persisted beside the objects) fires the run object's alarm, which resumes the run. -----
    const b = await startWorker(config);
    const restartedAt = Date.now();
    await until("pack to run again (the object's alarm)", async () => requests.filter((q) => q.callId === call0.pack && q.runId === RUN_S).length === 2,
      20_000, b);
    const run = await until("the run to finish", async () => {
      const r = await call(b, "GET", `/runs/${RUN_S}`);
      assert.equal(r.status, 200, r.text);
      return r.json.status === "finished" ? r.json : null;
    }, 20_000, b, 100);
    const recoveredIn = Date.now() - restartedAt;
    assert.equal(run.messages.at(-1).content, "Order 8 is packed.");
    const results = run.messages.filter((m) => m.role === "tool");
    assert.deepEqual(results.map((r) => r.toolCallId), [call0.pack, call0.weigh], "one result per call, in call order");
    const hs = await call(b, "GET", `/runs/${RUN_S}/history?limit=1`);
    const scope = hs.json[0].checkpoint.keyScope;
    const keyS = { [call0.pack]: await callKey(scope, call0.pack), [call0.weigh]: await callKey(scope, call0.weigh) };
    for (const r of results) {
      assert.equal(r.kind, "execution", JSON.stringify(r));
      assert.deepEqual(JSON.parse(r.content), effects.get(ek(RUN_S, keyS[r.toolCallId]))?.body, "the endpoint's answer for its key");
    }
    const sent = (id) => requests.filter((q) => q.key === keyS[id] && q.callId === id && q.runId === RUN_S).length;
    assert.equal(sent(call0.weigh), 1, "weigh's result was recorded before the crash: it never ran again");
    assert.equal(sent(call0.pack), 2, "pack was in flight: ran once before the crash and once after, same key");
    assert.deepEqual([...effects.keys()].filter((k) => k.startsWith(`${RUN_S} `)).sort(), [call0.pack, call0.weigh].map((k) => ek(RUN_S, keyS[k])).sort(), "one effect per key");
    assert.equal(requests.filter((q) => q.runId === RUN_S).length, 3, "no other request");
    await killGroup(b);
    console.log(`strict crash test: the object's alarm finished the run ${recoveredIn} ms after the restart`);
  });
}
