// An example Worker using the `steadfast` package the way an application would: a scripted model charges an
// order, then ships it; `ship` dies (a propagated error) the first time it runs for a session, and the cron
// trigger's `agent.sweep()` finishes the run without charging again. Bundle it with wrangler (or esbuild with
// `--conditions=workerd`) and bind a KV namespace as `RUNS`.
import { createAgent, defineTool, kvStore, mockModel, PropagatedToolError, type Json, type KVNamespaceLike } from "steadfast";

// Local declarations of the Workers types used here (no @cloudflare/workers-types dependency).
interface Env {
  RUNS: KVNamespaceLike;
}
interface ScheduledController {
  readonly scheduledTime: number;
  readonly cron: string;
}
interface ExecutionContext {
  waitUntil(promise: Promise<unknown>): void;
}

const orderSchema: Json = { type: "object", properties: { order: { type: "number" } }, required: ["order"] };

function agentFor(env: Env) {
  const charge = defineTool<{ order: number }>({
    name: "charge",
    description: "Charge an order",
    inputSchema: orderSchema,
    execute: async ({ order }, ctx) => {
      // A real tool would send ctx.idempotencyKey to the payment provider; the demo counts charges in KV.
      const n = Number((await env.RUNS.get("demo/charges")) ?? "0") + 1;
      await env.RUNS.put("demo/charges", String(n));
      return `charged order ${order} (key ${ctx.idempotencyKey})`;
    },
  });
  const ship = defineTool<{ order: number }>({
    name: "ship",
    description: "Ship an order",
    inputSchema: orderSchema,
    execute: async ({ order }, ctx) => {
      const key = `demo/shipped-once/${ctx.runId}`;
      if ((await env.RUNS.get(key)) === null) {
        await env.RUNS.put(key, "1");
        // Rejects the run (it stays resumable) instead of handing the model an error result.
        throw new PropagatedToolError(`the shipping service died while shipping order ${order}`);
      }
      return `shipped order ${order}`;
    },
  });
  return createAgent({
    // by-turn: the turn follows the transcript, so a fresh model object per request resumes where the run is.
    model: mockModel(
      [
        { toolCalls: [{ name: "charge", args: { order: 7 } }] },
        { toolCalls: [{ name: "ship", args: { order: 7 } }] },
        "Charged and shipped order 7.",
      ],
      { mode: "by-turn" },
    ),
    tools: [charge, ship],
    instructions: "You run a shop.",
    store: kvStore(env.RUNS),
  });
}

const json = (value: unknown, status = 200): Response =>
  new Response(JSON.stringify(value), { status, headers: { "content-type": "application/json" } });

function errorBody(e: unknown): { error: string; code?: string } {
  const err = e as { message?: string; code?: string };
  return { error: err?.message ?? String(e), ...(typeof err?.code === "string" ? { code: err.code } : {}) };
}

export default {
  async fetch(request: Request, env: Env): Promise<Response> {
    const url = new URL(request.url);
    const route = `${request.method} ${url.pathname}`;
    const agent = agentFor(env);
    try {
      switch (route) {
        case "POST /send": {
          const { sessionId, input } = (await request.json()) as { sessionId: string; input: string };
          const result = await agent.send(input, { sessionId });
          return json({ status: result.status, text: result.text, approvalId: result.approvalId });
        }
        case "POST /approve": {
          const { id, approved, note } = (await request.json()) as { id: string; approved: boolean; note?: string };
          const result = await agent.approvals.resolve({ id, approved, note });
          return json({ status: result.status, text: result.text });
        }
        case "GET /pending":
          return json(await agent.pending());
        case "GET /charges":
          return json({ charges: Number((await env.RUNS.get("demo/charges")) ?? "0") });
        default:
          return json({ error: "not found" }, 404);
      }
    } catch (e) {
      return json(errorBody(e), 500);
    }
  },

  async scheduled(_controller: ScheduledController, env: Env, _ctx: ExecutionContext): Promise<void> {
    try {
      // intervalMs: the sweep's backoff base; a short one lets the demo recover on the next tick.
      const report = await agentFor(env).sweep({ intervalMs: 1 });
      console.log("sweep", JSON.stringify(report));
    } catch (e) {
      console.error("sweep failed", e);
    }
  },
};
