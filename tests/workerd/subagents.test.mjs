// Sub-agents end to end (issue 30), in KV mode and in strict mode (`"store": "durable-object"`): the built Worker
// (build/index.js) under workerd through programmatic Miniflare, configured with a sub-agent (`subagents` in the
// configuration, its own mock script and the demo tools). The lead's call of `research` runs a child run whose
// refund needs a person's approval: the lead pauses with it; `GET /approvals` lists the child's approval; a NEW
// workerd over the persisted state (another process, later) resolves it with `POST /approvals/{id}`, which runs
// the child to its end and then the lead, in that one request; `GET /runs/{id}` lists the lead's child and names
// the child's parent; the child's id is reserved for plain sends.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { apiCaller } from "./support/api.mjs";
import { persistedWorkers } from "./support/persisted.mjs";
import { parseSse } from "./support/sse.mjs";

const TOKEN = "test-token-subagents-0123";
const BASE = "http://localhost";

const call = apiCaller(TOKEN, BASE);

const config = {
  model: {
    provider: "mock",
    script: [{ toolCalls: [{ name: "research", args: { task: "refund order 7" } }] }, { text: "the team is done" }],
  },
  demoTools: false,
  subagents: [
    {
      name: "research",
      description: "Handles refunds",
      instructions: "You handle refunds.",
      demoTools: true,
      model: { provider: "mock", script: [{ toolCalls: [{ name: "refund", args: { order: 7 } }] }, { text: "refunded order 7" }] },
    },
  ],
};

const persisted = persistedWorkers(TOKEN);
const worker = (mode, dir) => persisted(mode, config, dir);

for (const mode of ["kv", "strict"]) {
  test(`${mode}: a sub-agent's child pauses its lead; a new process approves the child's call and both finish in that request`, { timeout: 90000 }, async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), `steadfast-subagents-${mode}-`));
    after(() => fs.rmSync(dir, { recursive: true, force: true }));
    const first = worker(mode, dir);
    const paused = await call(first, "POST", "/runs/trip-1", { input: "plan the refund" });
    assert.equal(paused.status, 200, paused.text);
    assert.equal(paused.json.status, "awaiting-approval", paused.text);
    const listed = await call(first, "GET", "/approvals");
    const childApproval = listed.json.find((a) => a.runId.startsWith("trip-1.sub-research-") && a.toolCall.name === "refund");
    assert.ok(childApproval, listed.text);
    const lead = await call(first, "GET", "/runs/trip-1");
    assert.deepEqual(lead.json.children.map((c) => [c.name, c.runId, c.status]), [["research", childApproval.runId, "awaiting-approval"]], lead.text);
    const reserved = await call(first, "POST", `/runs/${childApproval.runId}`, { input: "hi" });
    assert.deepEqual([reserved.status, reserved.json.error?.code], [400, "STEADFAST_SESSION_ID_INVALID"], reserved.text);
    await first.stop();

    // Another process, later: the approval runs the child to its end, then the lead.
    const second = worker(mode, dir);
    const approved = await call(second, "POST", `/approvals/${childApproval.id}`, { approved: true });
    assert.equal(approved.status, 200, approved.text);
    assert.equal(approved.json.runId, childApproval.runId, approved.text);
    assert.equal(approved.json.status, "finished", approved.text);
    const done = await call(second, "GET", "/runs/trip-1");
    assert.equal(done.json.status, "finished", done.text);
    const result = done.json.messages.find((m) => m.role === "tool");
    assert.equal(result.content, "refunded order 7", done.text);
    assert.ok(result.usage && result.usage.inputTokens > 0, "the child's spend is on the result");
    assert.deepEqual(done.json.children.map((c) => c.status), ["finished"]);
    const child = await call(second, "GET", `/runs/${childApproval.runId}`);
    assert.deepEqual([child.json.parentRunId, child.json.status], ["trip-1", "finished"], child.text);
    assert.equal(child.json.messages.filter((m) => m.role === "tool" && m.name === "refund").length, 1, "the refund ran once");
    // The lead's watch replays its journal; in KV mode it reads its child's too: the child's recorded events
    // (its pause's run.done among them) come tagged, between the lead's call and the call's result. (Strict mode's watchers hear children live
    // from the run object, while they run.)
    const watched = parseSse((await call(second, "GET", "/runs/trip-1/events")).text).events;
    const fromChild = watched.filter((e) => e.runId === childApproval.runId);
    if (mode === "kv") {
      assert.deepEqual(fromChild.map((e) => e.type), ["step", "approval.requested", "run.done", "tool.done", "step", "run.done"], JSON.stringify(watched));
      assert.ok(fromChild.every((e) => e.subagent?.name === "research" && e.subagent.depth === 1 && e.subagent.parent === "trip-1"));
      const at = (f) => watched.findIndex(f);
      const leadResult = at((e) => e.runId === "trip-1" && e.type === "tool.done" && e.name === "research");
      assert.ok(at((e) => e.runId === "trip-1" && e.type === "step") < at((e) => e.runId === childApproval.runId), JSON.stringify(watched));
      assert.ok(watched.findLastIndex((e) => e.runId === childApproval.runId) < leadResult, JSON.stringify(watched));
    } else {
      assert.deepEqual(fromChild, [], JSON.stringify(watched));
    }
    await second.stop();
  });
}

// A detached sub-agent (`"detached": true`): the lead's call answers at once with the child's id and the lead
// finishes; the cron tick runs the child (another process, later); a next tick continues the finished lead with the
// child's result, applied once (more ticks change nothing). In both modes.
const detachedConfig = {
  model: {
    provider: "mock",
    script: [
      { toolCalls: [{ name: "scout", args: { task: "check order 7" } }] },
      { text: "scout sent" },
      { text: "the scout reported" },
    ],
  },
  demoTools: false,
  subagents: [
    {
      name: "scout",
      description: "Checks orders in the background",
      detached: true,
      model: { provider: "mock", script: [{ text: "order 7 is fine" }] },
    },
  ],
};

for (const mode of ["kv", "strict"]) {
  test(`${mode}: a detached sub-agent's call answers at once; cron ticks of a new process run the child and continue the finished lead with its result once`, { timeout: 90000 }, async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), `steadfast-detached-${mode}-`));
    after(() => fs.rmSync(dir, { recursive: true, force: true }));
    const first = persisted(mode, detachedConfig, dir);
    const sent = await call(first, "POST", "/runs/scout-1", { input: "look after order 7" });
    assert.deepEqual([sent.status, sent.json.status, sent.json.text], [200, "finished", "scout sent"], sent.text);
    const started = JSON.parse(sent.json.messages.find((m) => m.role === "tool").content);
    assert.match(started.started, /^scout-1\.sub-scout-[0-9a-f]{12}$/, sent.text);
    const lead = await call(first, "GET", "/runs/scout-1");
    assert.deepEqual(lead.json.children.map((c) => [c.runId, c.status]), [[started.started, "in-progress"]], lead.text);
    await first.stop();

    const second = persisted(mode, detachedConfig, dir);
    for (let i = 0; i < 3; i++) await second.tick();
    const child = await call(second, "GET", `/runs/${started.started}`);
    assert.deepEqual([child.json.status, child.json.parentRunId], ["finished", "scout-1"], child.text);
    const done = await call(second, "GET", "/runs/scout-1");
    assert.equal(done.json.status, "finished", done.text);
    const heard = done.json.messages.filter((m) => m.role === "user" && m.content.startsWith("Sub-agent 'scout' finished"));
    assert.deepEqual(heard.map((m) => m.content), [`Sub-agent 'scout' finished (run ${started.started}):\norder 7 is fine`], done.text);
    assert.equal(done.json.messages.at(-1).content, "the scout reported", done.text);
    await second.stop();
  });
}
