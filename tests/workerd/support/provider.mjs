// Shared by the recovery tests (recovery-queue, strict-gate): an OpenAI-compatible model provider and a charge
// endpoint on 127.0.0.1. While `state.down` every model call answers 503; each call takes `callMs`; `inflight` and
// `peak` count the model calls in progress; `charges` counts charges (`/tools/charge`) per Idempotency-Key. The
// model asks for `charge` once, then answers "charged".
import http from "node:http";

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export function startProvider(callMs) {
  const state = { down: true, inflight: 0, peak: 0, calls: 0, charges: new Map() };
  const server = http.createServer((req, res) => {
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", async () => {
      const reply = (status, obj) => {
        res.writeHead(status, { "content-type": "application/json" });
        res.end(JSON.stringify(obj));
      };
      if (req.url === "/tools/charge") {
        const key = req.headers["idempotency-key"];
        state.charges.set(key, (state.charges.get(key) ?? 0) + 1);
        return reply(200, { charged: true });
      }
      state.calls++;
      state.inflight++;
      state.peak = Math.max(state.peak, state.inflight);
      await sleep(callMs);
      state.inflight--;
      if (state.down) return reply(503, { error: "provider down" });
      const messages = JSON.parse(body).messages;
      const charged = messages.some((m) => m.role === "tool");
      const message = charged
        ? { content: "charged" }
        : { content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "charge", arguments: "{}" } }] };
      reply(200, {
        choices: [{ message, finish_reason: charged ? "stop" : "tool_calls" }],
        usage: { prompt_tokens: 10, completion_tokens: 5 },
      });
    });
  });
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve({ server, state, port: server.address().port })));
}
