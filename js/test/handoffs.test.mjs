// Handoffs through the npm package (issue 30): `createAgent({ handoffs, name })` gives every agent of the team a
// `transfer_to_<name>` tool for each other one; the first such call of a turn moves the conversation, in the same
// run, to that agent's model, tools and instructions (recorded on the checkpoint and as a `handoff` event); a later
// call of the same turn is answered not-run; `maxHandoffs` bounds them; a run that failed after a handoff resumes
// with the agent it was with; bad handoff options are refused with codes naming them.
import test from "node:test";
import assert from "node:assert/strict";
import { createAgent, memoryStore, progressGuard, PropagatingToolError, SteadfastError } from "steadfast";

/** A scripted model: each call answers with the next turn (a function of the request, or a value); `calls` counts. */
function scripted(id, turns) {
  const model = {
    id,
    calls: 0,
    requests: [],
    async generate(request) {
      const turn = turns[Math.min(model.calls, turns.length - 1)];
      model.calls += 1;
      model.requests.push(request);
      return typeof turn === "function" ? turn(request) : turn;
    },
  };
  return model;
}

const usage = { inputTokens: 10, outputTokens: 5 };
const calls = (...list) => ({
  toolCalls: list.map(([name, args], i) => ({ id: `c${i}`, name, args })),
  stopReason: "tool_calls",
  usage,
});
const text = (t) => ({ text: t, stopReason: "stop", usage });
const toolNames = (request) => request.tools.map((t) => t.name).sort();

test("the first transfer of a turn moves the run to that agent; a second one in the same turn is not run", async () => {
  const store = memoryStore();
  let lookedUp = 0;
  const invoice = { name: "invoice", description: "finds an invoice", execute: async () => { lookedUp += 1; return "#7: paid"; } };
  const lead = scripted("lead", [calls(["transfer_to_billing", {}], ["transfer_to_support", {}])]);
  const billing = scripted("billing", [calls(["invoice", {}]), text("invoice #7 is paid")]);
  const support = scripted("support", [text("support here")]);
  const agent = createAgent({
    model: lead,
    store,
    name: "triage",
    instructions: "You triage.",
    handoffs: [
      { name: "billing", description: "Handles invoices", instructions: "You handle billing.", model: billing, tools: [invoice] },
      { name: "support", description: "Handles everything else", model: support },
    ],
  });
  const r = await agent.send("is my invoice paid?", { sessionId: "desk", events: true });
  assert.equal(r.status, "finished");
  assert.equal(r.text, "invoice #7 is paid");
  assert.deepEqual([lead.calls, billing.calls, support.calls], [1, 2, 0], "support never answered");
  assert.equal(lookedUp, 1);
  const results = r.messages.filter((m) => m.role === "tool");
  assert.equal(results[0].toolCallId, "c0");
  assert.equal(results[1].toolCallId, "c1");
  assert.match(results[1].content, /only the first handoff of a turn is taken \('transfer_to_billing' was\)/);
  assert.equal(r.messages.filter((m) => m.role === "system" && m.content.includes("You handle billing.")).length, 1);
  // Every agent sees a transfer tool for each other one, its own tools beside them.
  assert.deepEqual(toolNames(lead.requests[0]), ["transfer_to_billing", "transfer_to_support"]);
  assert.deepEqual(toolNames(billing.requests[0]), ["invoice", "transfer_to_support", "transfer_to_triage"]);
  const handoffs = r.events.filter((e) => e.type === "handoff");
  assert.deepEqual(handoffs.map((e) => [e.toolCallId, e.to]), [["c0", "billing"]]);
  const cp = await agent.load("desk");
  assert.equal(cp.agent, "billing");
  assert.equal(cp.handoffs, 1);
});

test("a run that failed after a handoff resumes with the agent it was with, and the handoff is not taken again", async () => {
  const store = memoryStore();
  let ran = 0;
  const invoice = {
    name: "invoice",
    description: "finds an invoice",
    execute: async () => {
      ran += 1;
      if (ran === 1) throw new PropagatingToolError("the invoice service is down");
      return "#7: paid";
    },
  };
  const lead = scripted("lead", [calls(["transfer_to_billing", {}])]);
  const billing = scripted("billing", [calls(["invoice", {}]), text("invoice #7 is paid")]);
  const agent = createAgent({
    model: lead,
    store,
    handoffs: [{ name: "billing", description: "Handles invoices", model: billing, tools: [invoice] }],
  });
  await assert.rejects(agent.send("is my invoice paid?", { sessionId: "desk" }), (e) => e.code === "STEADFAST_TOOL_PROPAGATED");
  assert.equal((await agent.load("desk")).agent, "billing");
  const r = await agent.resume("desk");
  assert.equal(r.status, "finished");
  assert.equal(r.text, "invoice #7 is paid");
  assert.equal(lead.calls, 1, "the lead's recorded turn was not asked again");
  assert.equal(billing.calls, 2, "billing's recorded turn was not asked again");
  const cp = await agent.load("desk");
  assert.deepEqual([cp.agent, cp.handoffs], ["billing", 1]);
});

test("maxHandoffs bounds the transfers of a run: the one past it is refused and the conversation stays", async () => {
  const store = memoryStore();
  const lead = scripted("lead", [calls(["transfer_to_billing", {}]), text("the lead answers")]);
  const billing = scripted("billing", [calls(["transfer_to_lead", {}]), text("billing answers")]);
  const agent = createAgent({
    model: lead,
    store,
    maxHandoffs: 1,
    handoffs: [{ name: "billing", description: "Handles invoices", model: billing }],
  });
  const r = await agent.send("hi", { sessionId: "desk" });
  assert.equal(r.status, "finished");
  assert.equal(r.text, "billing answers", "the second transfer was refused, billing kept the conversation");
  const refused = r.messages.filter((m) => m.role === "tool").at(-1);
  assert.match(refused.content, /STEADFAST_HANDOFF_LIMIT/);
  const cp = await agent.load("desk");
  assert.deepEqual([cp.agent, cp.handoffs], ["billing", 1]);
});

test("bad handoff options are refused with STEADFAST_CONFIG_INVALID naming the handoff", () => {
  const store = memoryStore();
  const model = scripted("m", [text("-")]);
  const refused = (options, pattern) =>
    assert.throws(
      () => createAgent({ model, store, ...options }),
      (e) => e instanceof SteadfastError && e.code === "STEADFAST_CONFIG_INVALID" && pattern.test(e.message),
      String(pattern),
    );
  refused({ handoffs: "billing" }, /handoffs must be an array/);
  refused({ handoffs: [7] }, /handoffs\[0\] must be an object/);
  refused({ handoffs: [{ name: "billing", model }] }, /handoffs\[0\]\.description must be a string/);
  refused({ handoffs: [{ name: "billing", description: "x" }] }, /handoffs\[0\]: an agent needs a model/);
  refused({ handoffs: [{ name: "billing", description: "x", model, maxSteps: 3 }] }, /^handoffs\[0\]: unknown key "maxSteps"/);
  refused({ handoffs: [{ name: "billing", description: "x", model, hooks: [progressGuard()] }] }, /handoffs\[0\]\.hooks: a handoff agent runs under its lead's hooks/);
  refused(
    { handoffs: [{ name: "billing", description: "x", model, handoffs: [{ name: "b", description: "y", model }] }] },
    /^handoffs\[0\]: unknown key "handoffs"/,
  );
  refused({ handoffs: [{ name: "a", description: "x", model }, { name: "a", description: "y", model }] }, /two agents of the handoff team are named 'a'/);
  refused({ handoffs: [{ name: "lead", description: "x", model }] }, /two agents of the handoff team are named 'lead'/);
  refused({ name: 7 }, /^name must be a string/);
  refused({ name: "a b", handoffs: [{ name: "x", description: "x", model }] }, /tool name/);
});
