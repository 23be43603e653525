// The built Worker (build/index.js) behind wrangler's local development server, as `./scripts/dev` runs it:
// wrangler's proxy Worker in front of workerd, which Miniflare alone does not have. Started through wrangler's
// own API (`unstable_startWorker`) from a configuration written for the test (the built Worker as it is: no
// build command, no bundling of our own), on 127.0.0.1, KV and run objects in memory. Requests go over fresh
// connections (no pool), each checked on its own: no retries.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import { unstable_startWorker } from "wrangler";

const TOKEN = "dev-token-0123456789";
const MiB = 1024 * 1024;
let dir;
const workers = [];

before(() => {
  assert.ok(fs.existsSync("build/index.js"), "build/index.js is missing: run ./scripts/build-worker");
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "steadfast-dev-test-"));
});

after(async () => {
  for (const w of workers) await w.dispose();
  fs.rmSync(dir, { recursive: true, force: true });
});

// The dev server over the built Worker with `config` as STEADFAST_CONFIG (the bundled one when absent).
async function devServer(name, config) {
  const toml = [
    `name = "${name}"`,
    `main = ${JSON.stringify(path.resolve("build/index.js"))}`,
    `compatibility_date = "2026-04-01"`,
    `[vars]`,
    `STEADFAST_TOKEN = "${TOKEN}"`,
    ...(config ? [`STEADFAST_CONFIG = ${JSON.stringify(JSON.stringify(config))}`] : []),
    `[[kv_namespaces]]`,
    `binding = "RUNS"`,
    `id = "00000000000000000000000000000000"`,
    `[[durable_objects.bindings]]`,
    `name = "RUN_OBJECTS"`,
    `class_name = "RunObject"`,
    `[[migrations]]`,
    `tag = "v1"`,
    `new_sqlite_classes = ["RunObject"]`,
  ].join("\n");
  const file = path.join(dir, `${name}.toml`);
  fs.writeFileSync(file, toml);
  const w = await unstable_startWorker({
    config: file,
    sendMetrics: false,
    dev: { server: { hostname: "127.0.0.1", port: 0 }, inspector: false, persist: false, watch: false, liveReload: false, logLevel: "none" },
  });
  workers.push(w);
  await w.ready;
  return await w.url;
}

// One POST of `size` bytes on a fresh connection, with its Content-Length or chunked (written in 64 KiB pieces as
// fast as the connection takes them). Resolves with the answer, or with the connection error that came first.
function post(url, p, size, chunked) {
  return new Promise((resolve) => {
    const headers = { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" };
    if (!chunked) headers["content-length"] = size;
    const req = http.request(new URL(p, url), { method: "POST", headers, agent: false }, (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (c) => (text += c));
      res.on("end", () => resolve({ status: res.statusCode, text }));
    });
    req.on("error", (e) => resolve({ status: 0, text: `connection error: ${e.message}` }));
    const body = Buffer.alloc(size, "x");
    let off = 0;
    const pump = () => {
      while (off < size) {
        const piece = body.subarray(off, off + 64 * 1024);
        off += piece.length;
        if (!req.write(piece)) return req.once("drain", pump);
      }
      req.end();
    };
    pump();
  });
}

// (A body the Worker answered before reading it all used to break the dev server's proxy: `503 Your worker
// restarted mid-request` for a streamed one it had read half of, a 503 or a reset upload for a declared one it
// refused at once, and the next request on the proxy's connection sometimes failed the same way.)
for (const [mode, config] of [["KV mode", undefined], ["strict mode", { model: { provider: "mock" }, demoTools: true, store: "durable-object" }]]) {
  test(`under wrangler dev (${mode}), a body over 1 MiB, declared or streamed, gets the coded 413 every time, and the Worker serves on`, { timeout: 120_000 }, async () => {
    const url = await devServer(mode === "KV mode" ? "steadfast-dev-kv" : "steadfast-dev-strict", config);
    const seen = [];
    for (const size of [2 * MiB, MiB + 1, 5 * MiB]) {
      for (const p of ["/runs/big-1", "/runs/big-1/resume", "/sessions/s-1", "/deliveries/d-1"]) {
        for (const chunked of [true, false]) {
          const r = await post(url, p, size, chunked);
          let code;
          try {
            code = JSON.parse(r.text).error?.code;
          } catch {}
          seen.push(`${p} ${size} ${chunked ? "chunked" : "declared"}: ${r.status} ${code ?? r.text.slice(0, 80)}`);
        }
      }
    }
    const wrong = seen.filter((s) => !s.endsWith(": 413 STEADFAST_PAYLOAD_TOO_LARGE"));
    assert.deepEqual(wrong, [], `of ${seen.length} oversized requests`);
    const run = await fetch(new URL("/runs/after-big", url), {
      method: "POST",
      headers: { authorization: `Bearer ${TOKEN}` },
      body: JSON.stringify({ input: "please refund order 7" }),
    });
    assert.equal(run.status, 200, await run.clone().text());
    assert.equal((await run.json()).status, "awaiting-approval");
  });
}
