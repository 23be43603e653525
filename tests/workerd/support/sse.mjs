// Shared by the live-SSE test (tests/workerd/sse-live.test.mjs) and the first-delta benchmark (bench/first-delta.mjs): a
// local streaming OpenAI-compatible provider on 127.0.0.1, the Worker's Miniflare options over it, and a reader
// of server-sent events as they arrive.
import { builtWorker } from "./built.mjs";
import http from "node:http";

// How long the provider holds its later tokens when nobody releases them: past it the stream completes anyway,
// so a Worker that buffers fails on the ordering below instead of hanging.
const HOLD_MS = 4000;

// A streaming chat-completions server: the first token at once, the rest when `release()` is called (or after
// HOLD_MS). `log` records, in order, what the provider sent and what the client saw.
export function startStreamingProvider(log) {
  const chunk = (delta, finish = null) => ({ id: "c1", object: "chat.completion.chunk", created: 1, model: "gpt-test", choices: [{ index: 0, delta, finish_reason: finish }] });
  const data = (c) => `data: ${JSON.stringify(c)}\n\n`;
  const state = { release: () => {} };
  const server = http.createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write(data(chunk({ role: "assistant", content: "Hello" })));
      log.push("provider: first token");
      let done = false;
      const rest = () => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        res.write(data(chunk({ content: " world" })));
        res.write(data(chunk({}, "stop")));
        log.push("provider: last token");
        res.end("data: [DONE]\n\n");
      };
      const timer = setTimeout(rest, HOLD_MS);
      state.release = rest;
    });
  });
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve({ server, state, port: server.address().port })));
}

// Miniflare options for the built Worker (build/) in KV mode, its model the streaming provider on `port`.
export function workerOptions(token, port) {
  return {
    ...builtWorker(),
    kvNamespaces: ["RUNS"],
    durableObjects: { RUN_OBJECTS: { className: "RunObject", useSQLite: true } },
    bindings: {
      STEADFAST_TOKEN: token,
      OPENAI_API_KEY: "sk-test",
      STEADFAST_CONFIG: JSON.stringify({ model: { provider: "openai", model: "gpt-test", stream: true, maxTokens: 64, baseUrl: `http://127.0.0.1:${port}/v1` } }),
    },
    cf: false,
  };
}

// Reads SSE blocks from a streamed body as they arrive: `next()` gives the next event (comments and id-only
// blocks skipped), or null at the end; `lastId` is the last `id:` read (a journal cursor, for Last-Event-ID).
export function sseReader(body) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  return {
    reader,
    lastId: null,
    async next() {
      for (;;) {
        const end = buf.indexOf("\n\n");
        if (end >= 0) {
          const block = buf.slice(0, end);
          buf = buf.slice(end + 2);
          if (block.startsWith(":")) continue;
          const id = block.split("\n").find((l) => l.startsWith("id: "));
          if (id) this.lastId = id.slice(4);
          const line = block.split("\n").find((l) => l.startsWith("data: "));
          // An id-only block (a journal position) is not an event.
          if (!line) continue;
          return JSON.parse(line.slice(6));
        }
        const { value, done } = await reader.read();
        if (done) return null;
        buf += decoder.decode(value, { stream: true });
      }
    },
  };
}


// The events and the ids (journal cursors) of a whole SSE body, in order.
export function parseSse(text) {
  const events = [];
  const ids = [];
  for (const block of text.split("\n\n")) {
    if (!block.trim() || block.startsWith(":")) continue;
    const lines = block.split("\n");
    const id = lines.find((l) => l.startsWith("id: "));
    if (id) ids.push(id.slice(4));
    const data = lines.find((l) => l.startsWith("data: "));
    if (data) events.push(JSON.parse(data.slice(6)));
  }
  return { events, ids };
}
