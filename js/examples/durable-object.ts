// Strict mode from TypeScript: each order's agent runs live in the application's own Durable Object
// (`Orders`, one object per session id), kept by `durableObjectStore(ctx)` in the object's SQLite storage. The
// object is single-threaded and its storage strongly consistent: a lease excludes a second owner (a second send
// to a busy session gets STEADFAST_SESSION_BUSY), a stale owner's commit is refused, and there is no settle
// window. `ship` dies (a propagated error) the first time it runs for a session; the object's alarm finishes the
// run with `agent.sweep()`, without charging again and without a cron trigger. Bind the class as `ORDERS`,
// declared with `new_sqlite_classes = ["Orders"]` in its wrangler migration.
import {
  createAgent,
  defineTool,
  durableObjectStore,
  mockModel,
  PropagatedToolError,
  type DurableObjectStorageLike,
  type Json,
} from "steadfast";

// Local declarations of the Workers types used here (no @cloudflare/workers-types dependency).
interface DurableObjectStorage extends DurableObjectStorageLike {
  get<T>(key: string): Promise<T | undefined>;
  put<T>(key: string, value: T): Promise<void>;
  setAlarm(scheduledTime: number): Promise<void>;
}
interface DurableObjectState {
  readonly storage: DurableObjectStorage;
}
interface DurableObjectStub {
  fetch(request: Request): Promise<Response>;
}
interface DurableObjectNamespace {
  idFromName(name: string): unknown;
  get(id: unknown): DurableObjectStub;
}
interface Env {
  ORDERS: DurableObjectNamespace;
}

const orderSchema: Json = { type: "object", properties: { order: { type: "number" } }, required: ["order"] };

const json = (value: unknown, status = 200): Response =>
  new Response(JSON.stringify(value), { status, headers: { "content-type": "application/json" } });

function errorBody(e: unknown): { error: string; code?: string } {
  const err = e as { message?: string; code?: string };
  return { error: err?.message ?? String(e), ...(typeof err?.code === "string" ? { code: err.code } : {}) };
}

/** One session's object: its runs, their tools' counters and its alarm. */
export class Orders {
  constructor(
    private readonly ctx: DurableObjectState,
    _env: Env,
  ) {}

  private agent() {
    const storage = this.ctx.storage;
    const charge = defineTool<{ order: number }>({
      name: "charge",
      description: "Charge an order",
      inputSchema: orderSchema,
      execute: async ({ order }, ctx) => {
        // A real tool would send ctx.idempotencyKey to the payment provider; the demo counts charges.
        await storage.put("charges", ((await storage.get<number>("charges")) ?? 0) + 1);
        return `charged order ${order} (key ${ctx.idempotencyKey})`;
      },
    });
    const ship = defineTool<{ order: number }>({
      name: "ship",
      description: "Ship an order",
      inputSchema: orderSchema,
      execute: async ({ order }) => {
        if (!(await storage.get<boolean>("shipped-once"))) {
          await storage.put("shipped-once", true);
          throw new PropagatedToolError(`the shipping service died while shipping order ${order}`);
        }
        return `shipped order ${order}`;
      },
    });
    return createAgent({
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
      store: durableObjectStore(this.ctx),
    });
  }

  async fetch(request: Request): Promise<Response> {
    const url = new URL(request.url);
    const agent = this.agent();
    try {
      switch (`${request.method} ${url.pathname}`) {
        case "POST /send": {
          const { sessionId, input } = (await request.json()) as { sessionId: string; input: string };
          try {
            const result = await agent.send(input, { sessionId });
            return json({ status: result.status, text: result.text });
          } catch (e) {
            // The run stays recorded and resumable: the alarm finishes it.
            await this.ctx.storage.setAlarm(Date.now() + 100);
            return json(errorBody(e), 500);
          }
        }
        case "GET /state": {
          const run = await agent.load(url.searchParams.get("session") ?? "");
          return json({
            status: run?.status ?? null,
            pending: (await agent.pending()).length,
            charges: (await this.ctx.storage.get<number>("charges")) ?? 0,
          });
        }
        default:
          return json({ error: "not found" }, 404);
      }
    } catch (e) {
      return json(errorBody(e), 500);
    }
  }

  /** Finishes what was interrupted in this object; tries again in a second while something is left. */
  async alarm(): Promise<void> {
    // intervalMs: the sweep's backoff base; a short one lets the demo recover at once.
    const report = await this.agent().sweep({ intervalMs: 1 });
    if (report.busy > 0 || report.backingOff > 0 || report.errors > 0) {
      await this.ctx.storage.setAlarm(Date.now() + 1_000);
    }
  }
}

export default {
  async fetch(request: Request, env: Env): Promise<Response> {
    const url = new URL(request.url);
    // One object per session: `/send` names it in the body, `/state` in `?session=`.
    const session =
      request.method === "POST"
        ? ((await request.clone().json()) as { sessionId?: string }).sessionId
        : url.searchParams.get("session");
    if (!session) return json({ error: "name the session (sessionId, or ?session=)" }, 400);
    return env.ORDERS.get(env.ORDERS.idFromName(session)).fetch(request);
  },
};
