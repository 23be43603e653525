// A process of test/local-stores.test.mjs: opens the store named by argv ("file" or "sqlite") in the cwd and
// sends or resumes run `race` with a tool whose effect appends a line to effects.log (keyed by the call's
// idempotency key). argv[3]: "send" | "resume" | "send-crash" (dies by process.exit right after the effect).
import { appendFileSync } from "node:fs";
import { createAgent, defineTool, fileStore } from "steadfast";
import { SqliteStore } from "steadfast/sqlite";
import { mockModel } from "steadfast/testing";

const [kind, mode, delayMs] = process.argv.slice(2);
const store = kind === "sqlite" ? new SqliteStore("./runs.db") : fileStore("./runs");
const effect = defineTool({
  name: "effect",
  description: "Does the effect",
  execute: (_args, ctx) => {
    appendFileSync("effects.log", `${ctx.idempotencyKey}\n`);
    if (mode === "send-crash") process.exit(137);
    return "done";
  },
});
const agent = createAgent({
  provider: mockModel([{ toolCalls: [{ name: "effect" }] }, "All done."], { mode: "by-turn" }),
  tools: [effect],
  store,
  // Takes a dead process's lease over once expired (no grace: one machine, one clock).
  lease: { ttlMs: 1_000, renewEveryMs: 300, graceMs: 0 },
});
await new Promise((r) => setTimeout(r, Number(delayMs ?? 0)));
try {
  const r = mode === "resume" ? await agent.resume("race") : await agent.send("Do it", { sessionId: "race" });
  console.log("resumed" in r ? "nothing" : r.status);
} catch (e) {
  console.log(e.code ?? String(e));
}
