// A Worker with its own SQLite-backed Durable Object (`Runs`) that keeps its agent runs with the built
// package's `durableObjectStore(ctx)` (the `workerd` entry). Every request goes to one object ("one").
import { createAgent, defineTool, durableObjectStore, mockModel } from "../../dist/entrypoints/workerd.js";

const json = (v, status = 200) => new Response(JSON.stringify(v), { status, headers: { "content-type": "application/json" } });
const settled = (p) => p.then((r) => ({ status: r.status, text: r.text }), (e) => ({ code: e.code, message: e.message }));

export class Runs {
  constructor(ctx) {
    this.ctx = ctx;
  }

  /** A new agent object over the object's store (each call: as a new request would build it). */
  agent(script, options = {}) {
    const storage = this.ctx.storage;
    // Effects are counted in the object's storage, so a restarted workerd still knows them.
    const bump = async (key) => storage.put(key, ((await storage.get(key)) ?? 0) + 1);
    const tools = [
      defineTool({
        name: "slow",
        description: "Takes 300 ms",
        execute: async () => {
          await new Promise((resolve) => setTimeout(resolve, 300));
          await bump("slow");
          return "done slowly";
        },
      }),
      defineTool({ name: "refund", description: "Refund", needsApproval: true, execute: async () => (await bump("refunds"), "refunded") }),
    ];
    return createAgent({ model: mockModel(script, { mode: "by-turn" }), tools, store: durableObjectStore(this.ctx, options) });
  }

  /**
   * An agent whose tools wait (an event with a deadline `deadlineMs` after the call, and the built-in
   * `sleep_for`) on a clock `skew` ms ahead of the platform's (kept in the object's storage, so a restarted
   * workerd reads the same time: "days later" without waiting).
   */
  async waiter(script) {
    const skew = (await this.ctx.storage.get("skew")) ?? 0;
    const clock = { now: () => Date.now() + skew, sleep: (ms) => new Promise((resolve) => setTimeout(resolve, ms)) };
    const awaitPayment = defineTool({
      name: "await_payment",
      description: "Waits for the payment webhook",
      inputSchema: { type: "object", properties: { deadlineMs: { type: "number" } } },
      execute: ({ deadlineMs }, ctx) => ctx.waitForEvent({ deadline: new Date(ctx.now + deadlineMs) }),
    });
    return createAgent({
      model: mockModel(script, { mode: "by-turn" }),
      tools: [awaitPayment],
      waitTools: ["sleep_for"],
      store: durableObjectStore(this.ctx, { clock }),
      clock,
    });
  }

  async fetch(request) {
    const url = new URL(request.url);
    const count = async (key) => (await this.ctx.storage.get(key)) ?? 0;
    try {
      switch (url.pathname) {
        case "/race": {
          // Two agents send to one session at once (a slow tool keeps the first one's lease).
          const script = [{ toolCalls: [{ name: "slow" }] }, "Slow done."];
          const outcomes = await Promise.all([
            settled(this.agent(script).send("go", { sessionId: "race" })),
            settled(this.agent(script).send("go", { sessionId: "race" })),
          ]);
          const run = await this.agent(script).load("race");
          return json({ outcomes, status: run.status, slow: await count("slow") });
        }
        case "/refund": {
          const r = await this.agent([{ toolCalls: [{ name: "refund" }] }, "Refunded."]).send("Refund order 7", { sessionId: "refund-7" });
          return json({ status: r.status, approvalId: r.approvalId, pending: (await this.agent([]).pending()).map((p) => p.runId) });
        }
        case "/resolve": {
          const agent = this.agent([{ toolCalls: [{ name: "refund" }] }, "Refunded."]);
          const [first] = await agent.approvals.list();
          const r = await agent.approvals.resolve({ id: first.id, approved: true });
          return json({ status: r.status, text: r.text, refunds: await count("refunds"), pending: (await agent.pending()).length });
        }
        case "/prefixes": {
          const a = await this.agent(["From a."], { prefix: "a/" }).send("hi", { sessionId: "p" });
          return json({
            a: a.text,
            seenByA: (await this.agent([], { prefix: "a/" }).load("p"))?.status ?? null,
            seenByB: (await this.agent([], { prefix: "b/" }).load("p"))?.status ?? null,
          });
        }
        case "/wait": {
          // Three runs park: an event with a day's deadline, one with an hour's, a timer in an hour.
          const send = async (id, call) => (await (await this.waiter([{ toolCalls: [call] }, "done"])).send("go", { sessionId: id })).waits[0];
          return json({
            pay: await send("pay", { name: "await_payment", args: { deadlineMs: 86_400_000 } }),
            late: await send("late", { name: "await_payment", args: { deadlineMs: 3_600_000 } }),
            nap: await send("nap", { name: "sleep_for", args: { seconds: 3_600 } }),
          });
        }
        case "/deliver": {
          const agent = await this.waiter(["(first turns were recorded)", "done"]);
          try {
            const d = await agent.events.deliver(url.searchParams.get("token"), { paid: true });
            return json({ duplicate: d.duplicate, status: d.run.status, result: d.run.messages.find((m) => m.role === "tool")?.content });
          } catch (e) {
            return json({ code: e.code, runId: e.runId ?? null, message: e.message });
          }
        }
        case "/alarm": {
          // What the object's alarm() does: a sweep tick on the agent's clock (`skewMs` moves it on).
          await this.ctx.storage.put("skew", Number(url.searchParams.get("skewMs")));
          const agent = await this.waiter(["(first turns were recorded)", "done"]);
          const report = await agent.sweep();
          const view = async (id) => {
            const cp = await agent.load(id);
            return { status: cp.status, result: cp.messages.find((m) => m.role === "tool")?.content ?? null };
          };
          return json({ woken: report.woken, pay: await view("pay"), late: await view("late"), nap: await view("nap") });
        }
        case "/bad-storage": {
          try {
            durableObjectStore({ storage: { sql: {} } });
            return json({ code: null });
          } catch (e) {
            return json({ code: e.code, message: e.message });
          }
        }
        default:
          return json({ error: "not found" }, 404);
      }
    } catch (e) {
      return json({ error: String(e), code: e.code, stack: e.stack }, 500);
    }
  }
}

export default {
  fetch(request, env) {
    return env.RUNS_OBJECT.get(env.RUNS_OBJECT.idFromName("one")).fetch(request);
  },
};
