// `steadfast/mcp` under workerd: test-support/workerd/mcp-worker.mjs bundled with esbuild as wrangler does
// (platform browser, conditions workerd and worker) and run in Miniflare, against the MCP test server
// (test-support/mcp_server.mjs, a child process on 127.0.0.1). esbuild and Miniflare come from the repository
// root's node_modules (`npm ci` there), as for test/workerd.test.mjs.
import test from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";
import { Miniflare } from "miniflare";

const js = fileURLToPath(new URL("..", import.meta.url));
const esbuild = join(js, "../node_modules/.bin/esbuild");

test("under workerd, a bundled Worker lists an MCP server's tools and calls them in a run (a tool with an outputSchema too: no code generation there), with its headers and idempotency keys", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "steadfast-mcp-workerd-"));
  const outdir = join(dir, "out");
  execFileSync(
    esbuild,
    ["test-support/workerd/mcp-worker.mjs", "--bundle", "--format=esm", "--platform=browser", "--conditions=workerd,worker", "--loader:.wasm=copy", `--outdir=${outdir}`, "--log-level=warning"],
    { cwd: js, stdio: ["ignore", "pipe", "pipe"] },
  );
  const bundle = readFileSync(join(outdir, "mcp-worker.js"));
  t.diagnostic(`bundle: ${bundle.length} bytes, ${gzipSync(bundle).length} gzip`);

  const child = spawn(process.execPath, [join(js, "test-support/mcp_server.mjs"), JSON.stringify({ dir })], { stdio: ["ignore", "pipe", "inherit"] });
  const exited = new Promise((resolve) => child.once("exit", resolve));
  const mf = new Miniflare({
    modules: true,
    modulesRoot: outdir,
    scriptPath: join(outdir, "mcp-worker.js"),
    modulesRules: [
      { type: "ESModule", include: ["**/*.js"] },
      { type: "CompiledWasm", include: ["**/*.wasm"] },
    ],
    compatibilityDate: "2026-04-01",
    cf: false,
  });
  try {
    const port = await new Promise((resolve, reject) => {
      child.stdout.on("data", (d) => {
        const m = /listening (\d+)/.exec(String(d));
        if (m) resolve(m[1]);
      });
      child.once("exit", (code) => reject(new Error(`the MCP test server exited (${code})`)));
    });
    assert.equal(readdirSync(outdir).filter((f) => f.endsWith(".wasm")).length, 1);
    const res = await mf.dispatchFetch(`http://localhost/?mcp=${encodeURIComponent(`http://127.0.0.1:${port}/mcp`)}`);
    const body = await res.json();
    assert.equal(res.status, 200, JSON.stringify(body));
    assert.deepEqual(body, { status: "finished", seen: ["7", JSON.stringify({ available: 3, sku: "W" })] });
    const calls = readFileSync(join(dir, "calls.jsonl"), "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l));
    assert.deepEqual(calls.map((c) => c.tool).sort(), ["add", "stock"]);
    for (const c of calls) {
      assert.equal(c.authorization, "Bearer from-a-worker");
      assert.match(c.meta.idempotencyKey, /^[0-9a-f]{32}$/);
    }
  } finally {
    await mf.dispose();
    if (child.exitCode === null && child.signalCode === null) process.kill(child.pid, "SIGKILL");
    await exited;
    rmSync(dir, { recursive: true, force: true });
  }
});
