// A Worker that uses the built package's workerd entry (the `workerd` export condition) over a KV binding.
import {
  createAgent,
  defineTool,
  kvStore,
  memoryStore,
  mockModel,
  PropagatedToolError,
  PropagatingToolError,
  SessionAwaitingApprovalError,
  testClock,
} from "../../dist/entrypoints/workerd.js";

/** durable-execution.txt, "Recovering automatically", as written (imports adapted, `input: z.object({})` left
 * out); what it logs is returned. `store` and `clock` are the seed's memoryStore() unless given. */
async function seedRecoverExample({ store = memoryStore(), clock } = {}) {
  const logged = [];
  const console = { log: (...a) => logged.push(a.join(" ")), error: (...a) => logged.push(["error", ...a].join(" ")) };
  let charges = 0;
  let attempts = 0;
  const tools = [
    defineTool({ name: 'charge', description: 'Charge the card', execute: async () => `charged ${++charges}` }),
    // Stands in for the process dying mid-step: it fails the first time only.
    defineTool({
      name: 'ship',
      description: 'Ship the order',
      execute: async () => {
        if (++attempts === 1) throw new PropagatingToolError('process died');
        return 'shipped';
      },
    }),
  ];
  const agent = createAgent({
    provider: mockModel([{ toolCalls: [{ name: 'charge' }] }, { toolCalls: [{ name: 'ship' }] }, 'Order charged and shipped.']),
    tools,
    store,
    ...(clock ? { clock } : {}),
  });
  await agent.send('Charge and ship order 7', { sessionId: 'order-7' }).catch(() => undefined); // interrupted after the charge

  const recovery = agent.recover({
    intervalMs: 1_000,
    onRecovered: (run, result) => {
      console.log(`${run.sessionId}: ${result.text}`); // order-7: Order charged and shipped.
      void recovery.stop(); // a server keeps it running and stops it on shutdown (or passes `signal`)
    },
    onError: (error, run) => console.error('recovery failed', run?.sessionId, error),
  });
  await recovery.done; // resolves once the loop stopped
  console.log(charges); // 1: the completed charge step did not run again
  return { logged, pending: await agent.pending() };
}

const counts = { charges: 0, shipments: 0, shipAttempts: 0, refunds: 0 };
const schema = { type: "object", properties: { order: { type: "number" } }, required: ["order"] };
const tools = [
  defineTool({ name: "charge", description: "Charge", inputSchema: schema, execute: async () => (counts.charges += 1, "charged") }),
  defineTool({
    name: "ship",
    description: "Ship",
    inputSchema: schema,
    execute: async () => {
      counts.shipAttempts += 1;
      if (counts.shipAttempts === 1) throw new PropagatedToolError("died while shipping");
      counts.shipments += 1;
      return "shipped";
    },
  }),
  defineTool({ name: "refund", description: "Refund", inputSchema: schema, needsApproval: true, execute: async () => (counts.refunds += 1, "refunded") }),
];
// by-turn: every request builds a new model object; the turn follows the transcript.
const script = (name) =>
  name === "order"
    ? [{ toolCalls: [{ name: "charge", args: { order: 7 } }] }, { toolCalls: [{ name: "ship", args: { order: 7 } }] }, "Shipped."]
    : [{ toolCalls: [{ name: "refund", args: { order: 7 } }] }, "Refund issued."];
const agentFor = (env, name) =>
  createAgent({ model: mockModel(script(name), { mode: "by-turn" }), tools, store: kvStore(env.RUNS, { settleMs: 50 }) });

// Sessions and schedules over KV (each request builds new agent objects, as separate Worker invocations do).
const chatAgent = (env) =>
  createAgent({ model: mockModel(["First answer.", "Second answer."], { mode: "by-turn" }), store: kvStore(env.RUNS, { prefix: "chat/", settleMs: 50 }) });
const scheduleCounts = { reports: 0 };
const report = defineTool({ name: "report", description: "Send the report", execute: async () => `report ${++scheduleCounts.reports}` });
const schedules = [{ id: "every5", cron: "*/5 * * * *", input: "Send the report" }];
/** The agent a cron invocation builds: its clock reads the invocation's `scheduledTime` (real timers). */
function cronAgent(env, scheduledTime) {
  const clock = { now: () => scheduledTime, sleep: (ms) => new Promise((resolve) => setTimeout(resolve, ms)) };
  return createAgent({
    model: mockModel([{ toolCalls: [{ name: "report" }] }, "Reported."], { mode: "by-turn" }),
    tools: [report],
    store: kvStore(env.RUNS, { prefix: "cron/", settleMs: 50, clock }),
    clock,
  });
}

const json = (v, status = 200) => new Response(JSON.stringify(v), { status, headers: { "content-type": "application/json" } });

export default {
  async fetch(request, env) {
    const url = new URL(request.url);
    try {
      switch (url.pathname) {
        case "/order": {
          let code = null;
          try {
            await agentFor(env, "order").send("Charge and ship order 7", { sessionId: "order-7" });
          } catch (e) {
            code = e.code;
          }
          const resumed = await agentFor(env, "order").resume("order-7");
          return json({ code, status: resumed.status, text: resumed.text, counts });
        }
        case "/refund": {
          const r = await agentFor(env, "refund").send("Refund order 7", { sessionId: "refund-7" });
          let refused = null;
          try {
            await agentFor(env, "refund").send("hurry", { sessionId: "refund-7" });
          } catch (e) {
            refused = { awaiting: e instanceof SessionAwaitingApprovalError, sessionId: e.sessionId, approvalId: e.approvalId };
          }
          return json({ status: r.status, approvalId: r.approvalId, refused });
        }
        case "/seed-recover":
          return json(await seedRecoverExample());
        case "/seed-recover-kv": {
          // The same on the KV binding, with a test clock for the agent and the store: no real waiting.
          const clock = testClock();
          const started = Date.now();
          const out = await seedRecoverExample({ store: kvStore(env.RUNS, { prefix: "seed/", clock }), clock });
          return json({ ...out, virtualMs: clock.now() - Date.UTC(2026, 0, 1), realMs: Date.now() - started });
        }
        case "/session": {
          const first = await chatAgent(env).session({ id: "chat-1" }).send("Hello");
          const second = await chatAgent(env).session({ id: "chat-1" }).send("And then?");
          const history = await chatAgent(env).session({ id: "chat-1" }).history();
          return json({
            runIds: [first.runId, second.runId],
            texts: [first.text, second.text],
            secondSaw: second.messages.filter((m) => m.role !== "system").map((m) => m.content),
            history: history.map((t) => [t.turn, t.runId, t.status]),
          });
        }
        case "/last-fire":
          return json(JSON.parse((await env.RUNS.get("test/last-fire")) ?? "null"));
        case "/resolve": {
          const agent = agentFor(env, "refund");
          const [first] = await agent.approvals.list();
          const r = await agent.approvals.resolve({ id: first.id, approved: true, note: "ok" });
          return json({ status: r.status, text: r.text, counts });
        }
        default:
          return json({ error: "not found" }, 404);
      }
    } catch (e) {
      return json({ error: String(e), code: e.code, stack: e.stack }, 500);
    }
  },
  // A Worker's cron trigger: fire the due schedules once (the outcomes are kept for the test to read).
  async scheduled(controller, env) {
    const outcomes = await cronAgent(env, controller.scheduledTime).fireSchedule(schedules);
    await env.RUNS.put("test/last-fire", JSON.stringify({ outcomes, reports: scheduleCounts.reports }));
  },
};
