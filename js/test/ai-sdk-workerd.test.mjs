// aiSdkModel under workerd: test-support/workerd/ai-sdk-worker.mjs, bundled with the AI SDK's own mock models by
// esbuild (`workerd` condition) and run by Miniflare (both from the repository root's node_modules) over KV: a
// streamed run whose tool dies after its effect, resumed by a fresh agent, with each model call and effect once.
import test, { after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { Miniflare } from "miniflare";

const js = fileURLToPath(new URL("..", import.meta.url));
const outdir = mkdtempSync(join(tmpdir(), "steadfast-ai-sdk-workerd-"));
execFileSync(
  join(js, "../node_modules/.bin/esbuild"),
  [
    "test-support/workerd/ai-sdk-worker.mjs",
    "--bundle",
    "--format=esm",
    "--platform=neutral",
    "--conditions=workerd",
    "--main-fields=module,main",
    "--loader:.wasm=copy",
    `--outdir=${outdir}`,
    "--log-level=warning",
  ],
  { cwd: js, stdio: ["ignore", "pipe", "pipe"] },
);
const mf = new Miniflare({
  modules: true,
  modulesRoot: outdir,
  scriptPath: join(outdir, "ai-sdk-worker.js"),
  modulesRules: [
    { type: "ESModule", include: ["**/*.js", "**/*.mjs"] },
    { type: "CompiledWasm", include: ["**/*.wasm"] },
  ],
  compatibilityDate: "2026-04-01",
  kvNamespaces: ["RUNS"],
  cf: false,
});
after(async () => {
  await mf.dispose();
  rmSync(outdir, { recursive: true, force: true });
});

for (const v of ["v3", "v2"]) {
  test(`under workerd (${v}): a streamed run dies after its tool's effect and is resumed over KV — each model call and the effect once`, async () => {
    assert.equal(readdirSync(outdir).filter((f) => f.endsWith(".wasm")).length, 1);
    const res = await mf.dispatchFetch(`http://localhost/?v=${v}`);
    const r = await res.json();
    assert.equal(res.status, 200, JSON.stringify(r));
    assert.equal(r.code, "STEADFAST_TOOL_PROPAGATED");
    assert.equal(r.status, "finished");
    assert.equal(r.text, "Shipped order 9.");
    assert.deepEqual(r.modelCalls, [1, 2], "each model call once");
    assert.equal(r.ships, 1, "shipped once");
    assert.equal(r.reconciles, 1, "the resume reconciled the shipment instead of shipping again");
    assert.deepEqual(r.deltas, [
      ["reasoning.delta", "Ship it."],
      ["text.delta", "Shipped "],
      ["text.delta", "order 9."],
    ]);
    assert.deepEqual(r.resentAssistant, [
      { type: "reasoning", text: "Ship it.", providerOptions: { anthropic: { signature: "sig" } } },
      { type: "tool-call", toolCallId: "c-ship", toolName: "ship", input: { order: "9" } },
    ]);
  });
}
