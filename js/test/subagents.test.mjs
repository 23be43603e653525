// Sub-agents through the npm package (issue 30): `createAgent({ subagents })` gives the lead's model a tool per
// sub-agent whose call runs it as a child run (`<run>.sub-<name>-<key>`); the child's final text is the call's
// result and its spend is added to the lead's usage; a lead whose attempt failed mid-child resumes the child where
// it stopped (its recorded model turns are not asked again); a child paused on an approval pauses the lead, and
// resolving it through the lead's agent finishes both; bad sub-agent options are refused with codes.
import test from "node:test";
import assert from "node:assert/strict";
import { createAgent, memoryStore, PropagatingToolError, SteadfastError } from "steadfast";

/** A scripted model: each call answers with the next turn (a function of the request, or a value); `calls` counts. */
function scripted(id, turns) {
  const model = {
    id,
    calls: 0,
    async generate(request) {
      const turn = turns[Math.min(model.calls, turns.length - 1)];
      model.calls += 1;
      return typeof turn === "function" ? turn(request) : turn;
    },
  };
  return model;
}

const usage = { inputTokens: 10, outputTokens: 5 };
const call = (name, args) => ({ toolCalls: [{ id: "c1", name, args }], stopReason: "tool_calls", usage });
const lastTool = (request) => request.messages.filter((m) => m.role === "tool").at(-1)?.content;

/** A lead that delegates to `research`, whose agent calls `lookup` (the given tool) and reports its result. */
function team(store, lookup, extra = {}) {
  const child = scripted("child", [call("lookup", {}), (r) => ({ text: `found ${lastTool(r)}`, stopReason: "stop", usage })]);
  const lead = scripted("lead", [
    call("research", { task: "what is the answer?" }),
    (r) => ({ text: `the team says: ${lastTool(r)}`, stopReason: "stop", usage }),
  ]);
  const agent = createAgent({
    model: lead,
    store,
    subagents: [{ name: "research", description: "Researches", instructions: "You research.", model: child, tools: [lookup], ...extra }],
  });
  return { agent, lead, child };
}

test("a sub-agent's call runs a child run whose final text is the lead's tool result and whose spend the lead counts", async () => {
  const store = memoryStore();
  let ran = 0;
  const lookup = { name: "lookup", description: "looks up", execute: async () => { ran += 1; return "42"; } };
  const { agent } = team(store, lookup);
  const r = await agent.send("plan it", { sessionId: "trip" });
  assert.equal(r.status, "finished");
  assert.equal(r.text, "the team says: found 42");
  assert.equal(ran, 1);
  const result = r.messages.find((m) => m.role === "tool");
  assert.equal(result.content, "found 42");
  assert.deepEqual(result.usage, { inputTokens: 20, outputTokens: 10 }, "the child's two turns");
  assert.deepEqual(r.usage, { inputTokens: 40, outputTokens: 20 }, "the lead's two turns and the child's");
  const children = (await agent.pending()).length;
  assert.equal(children, 0, "nothing is left unfinished");
});

test("agent.children lists a run's child runs with their status and spend so far; none for an unknown run", async () => {
  const store = memoryStore();
  const lookup = { name: "lookup", description: "looks up", needsApproval: true, execute: async () => "42" };
  const { agent } = team(store, lookup);
  await agent.send("plan it", { sessionId: "trip" });
  const [paused] = await agent.children("trip");
  assert.equal(paused.name, "research");
  assert.match(paused.runId, /^trip\.sub-research-[0-9a-f]{12}$/);
  assert.equal(paused.status, "awaiting-approval");
  assert.deepEqual(paused.usage, { inputTokens: 10, outputTokens: 5 }, "one model turn so far");
  const load = await agent.load("trip");
  assert.equal(paused.toolCallId, load.messages.find((m) => m.toolCalls?.length).toolCalls[0].id);
  const approval = (await agent.approvals.list()).find((a) => a.runId === paused.runId);
  await agent.approvals.resolve({ id: approval.id, approved: true });
  const [done] = await agent.children("trip");
  assert.deepEqual([done.runId, done.status, done.usage], [paused.runId, "finished", { inputTokens: 20, outputTokens: 10 }]);
  assert.deepEqual(await agent.children("no-such-run"), []);
  await assert.rejects(agent.children(7), (e) => e.code === "STEADFAST_INVALID_INPUT" && /the run id must be a string/.test(e.message));
});

test("a lead whose attempt failed while its child ran resumes the child where it stopped", async () => {
  const store = memoryStore();
  let ran = 0;
  const lookup = {
    name: "lookup",
    description: "looks up",
    execute: async () => {
      ran += 1;
      if (ran === 1) throw new PropagatingToolError("the lookup service is down");
      return "42";
    },
  };
  const { agent, child } = team(store, lookup);
  await assert.rejects(agent.send("plan it", { sessionId: "trip" }), (e) => e.code === "STEADFAST_TOOL_PROPAGATED");
  assert.equal(child.calls, 1, "the child's first turn was asked once");
  const r = await agent.resume("trip");
  assert.equal(r.status, "finished");
  assert.equal(r.text, "the team says: found 42");
  assert.equal(child.calls, 2, "the child's recorded turn was not asked again: it resumed, it did not start over");
  assert.equal(ran, 2);
});

test("a child paused on an approval pauses its lead; resolving it through the lead's agent finishes both", async () => {
  const store = memoryStore();
  let ran = 0;
  const lookup = { name: "lookup", description: "looks up", needsApproval: true, execute: async () => { ran += 1; return "42"; } };
  const { agent } = team(store, lookup);
  const paused = await agent.send("plan it", { sessionId: "trip" });
  assert.equal(paused.status, "awaiting-approval");
  const approvals = await agent.approvals.list();
  const childApproval = approvals.find((a) => a.runId.startsWith("trip.sub-research-") && (a.kind ?? "approval") === "approval");
  assert.ok(childApproval, JSON.stringify(approvals));
  assert.equal(ran, 0);
  const child = await agent.approvals.resolve({ id: childApproval.id, approved: true });
  assert.equal(child.status, "finished");
  const lead = await agent.load("trip");
  assert.equal(lead.status, "finished");
  assert.equal(ran, 1);
  assert.equal(lead.messages.at(-1).content, "the team says: found 42");
});

test("a child's events reach its lead's caller live, each tagged with its sub-agent, depth, parent and call", async () => {
  const store = memoryStore();
  const lookup = { name: "lookup", description: "looks up", execute: async () => "42" };
  const { agent } = team(store, lookup);
  const live = [];
  const r = await agent.send("plan it", { sessionId: "trip", events: true, onEvent: (e) => live.push(e) });
  assert.equal(r.status, "finished");
  assert.deepEqual(live, r.events, "the callback saw what the result lists, in the same order");
  const lead = r.events.filter((e) => e.runId === "trip");
  const child = r.events.filter((e) => e.runId !== "trip");
  assert.ok(lead.every((e) => !("subagent" in e)), JSON.stringify(lead));
  assert.ok(child.length >= 3, JSON.stringify(r.events));
  const callId = r.messages.find((m) => m.role === "tool").toolCallId;
  for (const e of child) {
    assert.match(e.runId, /^trip\.sub-research-[0-9a-f]{12}$/);
    assert.deepEqual(e.subagent, { name: "research", depth: 1, parent: "trip", toolCallId: callId });
  }
  assert.deepEqual(child.map((e) => e.seq), child.map((_, i) => i), "the child's seq is its own, gapless");
  const childDone = r.events.findIndex((e) => e.runId !== "trip" && e.type === "run.done");
  const leadCallDone = r.events.findIndex((e) => e.runId === "trip" && e.type === "tool.done");
  assert.ok(childDone >= 0 && childDone < leadCallDone, "the child's events come while the lead's call runs");
});

test("bad sub-agent options are refused with STEADFAST_CONFIG_INVALID naming the sub-agent", () => {
  const store = memoryStore();
  const model = scripted("m", [{ text: "-", stopReason: "stop" }]);
  const refused = (subagents, pattern) =>
    assert.throws(
      () => createAgent({ model, store, subagents }),
      (e) => e instanceof SteadfastError && e.code === "STEADFAST_CONFIG_INVALID" && pattern.test(e.message),
    );
  refused("research", /subagents must be an array/);
  refused([{ name: "research", model }], /subagents\[0\]\.description must be a string/);
  refused([{ name: "research", description: "x" }], /subagents\[0\]: an agent needs a model/);
  refused([{ name: "research", description: "x", model, store }], /^subagents\[0\]: unknown key "store"/);
  refused([{ name: "research", description: "x", model, onAgentDrift: "error" }], /^subagents\[0\]\.onAgentDrift: a sub-agent's runs are drift-checked under its lead's onAgentDrift/);
  refused([{ name: "a b", description: "x", model }], /tool name/);
  refused([{ name: "r", description: "x", model }, { name: "r", description: "y", model }], /two tools are named 'r'/);
});

test("a detached sub-agent's call answers at once; the sweep runs the child and its result continues the finished lead once", async () => {
  const store = memoryStore();
  let ran = 0;
  const lookup = { name: "lookup", description: "looks up", execute: async () => { ran += 1; return "42"; } };
  const child = scripted("child", [call("lookup", {}), (r) => ({ text: `found ${lastTool(r)}`, stopReason: "stop", usage })]);
  const lastUser = (r) => r.messages.filter((m) => m.role === "user").at(-1).content;
  const lead = scripted("lead", [
    call("research", { task: "look it up" }),
    { text: "started it", stopReason: "stop", usage },
    (r) => ({ text: `heard: ${lastUser(r)}`, stopReason: "stop", usage }),
  ]);
  const agent = createAgent({
    model: lead,
    store,
    subagents: [{ name: "research", description: "Researches", model: child, tools: [lookup], detached: true }],
  });
  const r = await agent.send("go", { sessionId: "bg" });
  assert.deepEqual([r.status, r.text, ran], ["finished", "started it", 0]);
  const [kid] = await agent.children("bg");
  assert.deepEqual(JSON.parse(r.messages.find((m) => m.role === "tool").content), { started: kid.runId, subagent: "research", detached: true });
  assert.equal(kid.status, "in-progress");
  await agent.sweep({ intervalMs: 0 });
  assert.equal((await agent.children("bg"))[0].status, "finished");
  await agent.sweep({ intervalMs: 0 });
  const done = await agent.load("bg");
  assert.equal(done.status, "finished");
  assert.equal(done.messages.at(-1).content, `heard: Sub-agent 'research' finished (run ${kid.runId}):\nfound 42`);
  await agent.sweep({ intervalMs: 0 });
  const again = await agent.load("bg");
  assert.equal(again.messages.filter((m) => m.role === "user" && m.content.startsWith("Sub-agent")).length, 1);
  assert.equal(ran, 1);
});

test("detached and abandon are checked: booleans, abandon only when detached", async () => {
  const store = memoryStore();
  const model = scripted("m", [{ text: "hi", stopReason: "stop", usage }]);
  const make = (extra) => () => createAgent({ model, store, subagents: [{ name: "r", description: "x", model, ...extra }] });
  assert.throws(make({ detached: "yes" }), (e) => e.code === "STEADFAST_CONFIG_INVALID" && /subagents\[0\]\.detached must be true or false/.test(e.message));
  assert.throws(make({ abandon: true }), (e) => e.code === "STEADFAST_CONFIG_INVALID" && /only a detached sub-agent's child may be abandoned/.test(e.message));
  const noSteering = () => createAgent({ model, store, steerPollMs: null, subagents: [{ name: "r", description: "x", model, detached: true }] });
  assert.throws(noSteering, (e) => e.code === "STEADFAST_CONFIG_INVALID" && /needs steering on/.test(e.message));
  createAgent({ model, store, subagents: [{ name: "r", description: "x", model, detached: true, abandon: true }] });
});
