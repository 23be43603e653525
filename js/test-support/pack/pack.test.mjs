// Packaging test: the tarball `npm pack` makes, installed into a fresh project, with js/examples/worker.ts and
// js/examples/durable-object.ts type-checked and bundled against the INSTALLED package (esbuild, `workerd` condition) and run in workerd
// through Miniflare (both from the repository root's node_modules). Run by scripts/pack-test.sh after build.sh.
import test, { after, before } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync, copyFileSync, mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { gzipSync } from "node:zlib";
import { fileURLToPath, pathToFileURL } from "node:url";
import { Miniflare } from "miniflare";
import ts from "typescript";

const js = fileURLToPath(new URL("../..", import.meta.url));
const root = join(js, "..");
const esbuild = join(root, "node_modules/.bin/esbuild");
const tsc = join(js, "node_modules/.bin/tsc");
const run = (cmd, args, cwd) => execFileSync(cmd, args, { cwd, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });

const packDir = mkdtempSync(join(tmpdir(), "steadfast-pack-"));
const project = mkdtempSync(join(tmpdir(), "steadfast-consumer-"));
let mf;
after(async () => {
  await mf?.dispose();
  rmSync(packDir, { recursive: true, force: true });
  rmSync(project, { recursive: true, force: true });
});

let tarball;
before(() => {
  const out = JSON.parse(run("npm", ["pack", "--json", "--pack-destination", packDir], js));
  tarball = join(packDir, out[0].filename);
  writeFileSync(join(project, "package.json"), JSON.stringify({ name: "consumer", private: true, type: "module" }));
  run("npm", ["install", "--offline", "--no-audit", "--no-fund", "--no-package-lock", tarball], project);
  mkdirSync(join(project, "src"));
  copyFileSync(join(js, "examples/worker.ts"), join(project, "src/worker.ts"));
  copyFileSync(join(js, "examples/durable-object.ts"), join(project, "src/durable-object.ts"));
});

test("the tarball has the built package and no runtime dependencies (peer dependencies only optional ones, not installed)", () => {
  const files = JSON.parse(run("npm", ["pack", "--dry-run", "--json"], js))[0].files.map((f) => f.path);
  for (const f of ["package.json", "README.md", "dist/index.d.ts", "dist/entrypoints/workerd.js", "dist/entrypoints/node.js", "dist/mcp.js", "dist/mcp.d.ts", "wasm/steadfast.js", "wasm/steadfast_bg.wasm"]) {
    assert.ok(files.includes(f), `${f} is in the tarball`);
  }
  const pkg = JSON.parse(readFileSync(join(project, "node_modules/steadfast/package.json"), "utf8"));
  assert.equal(pkg.dependencies, undefined);
  // Optional peers, never installed with the package: `ai` (aiSdkModel's models; never imported),
  // `better-sqlite3` (steadfast/sqlite) and `@modelcontextprotocol/sdk` (steadfast/mcp), each loaded on first use.
  assert.deepEqual(Object.keys(pkg.peerDependencies ?? {}).sort(), ["@modelcontextprotocol/sdk", "ai", "better-sqlite3"]);
  for (const peer of Object.keys(pkg.peerDependencies ?? {})) {
    assert.equal(pkg.peerDependenciesMeta?.[peer]?.optional, true, `the peer dependency ${peer} is optional`);
  }
  assert.deepEqual(readdirSync(join(project, "node_modules")).filter((d) => !d.startsWith(".")), ["steadfast"]);
});

test("without the optional MCP SDK installed, steadfast/mcp loads and mcpTools rejects with a coded error saying what to install", async () => {
  const { mcpTools } = await import(pathToFileURL(join(project, "node_modules/steadfast/dist/mcp.js")).href);
  await assert.rejects(mcpTools({ url: "http://127.0.0.1:9/mcp" }), (e) => {
    assert.equal(e.code, "STEADFAST_CONFIG_INVALID");
    assert.match(e.message, /mcpTools needs the MCP SDK, an optional peer dependency: npm install @modelcontextprotocol\/sdk/);
    return true;
  });
});

test("the package's wasm stays under its 512 KiB gzip budget (the README's figure; built with wasm-opt, as build.sh does when binaryen is installed)", () => {
  const wasm = readFileSync(join(project, "node_modules/steadfast/wasm/steadfast_bg.wasm"));
  const gz = gzipSync(wasm, { level: 9 }).length;
  assert.ok(gz <= 512 * 1024, `the package's wasm is ${gz} bytes gzip -9, over 524,288 (STEADFAST_NO_WASM_OPT=1 builds are bigger)`);
});

// The package's public surface: every name `import ... from "steadfast"` offers, and whether it is a value (a
// function or class) or a type only. A change here is a change for every user: update the list deliberately.
const PUBLIC_EXPORTS = {
  values: [
    "PropagatedToolError", "PropagatingToolError", "ProviderHttpError", "SessionAwaitingApprovalError", "SteadfastError",
    "LocalStorageCheckpointStore", "fileStore", "getCheckpointHistory",
    "aiSdkModel",
    "compareTrajectories", "createAgent", "defineHook", "defineTool", "durableObjectStore", "kvStore", "memoryStore", "mockModel", "outputCheck",
    "progressGuard", "testClock",
  ],
  types: [
    "AbortSignalLike", "AfterToolAnswer", "DurableObjectStorageLike", "DurableObjectStoreOptions", "Agent", "AgentDrift", "AgentOptions", "BeforeToolAnswer", "CustomHook",
    "HookContext", "ApprovalRecord", "ApprovalStatus", "BreakerOptions", "BudgetCap", "Checkpoint", "ChildRun", "Clock",
    "Comparison", "Delivery",
    "ErrorCode", "ErrorInfo", "Event", "EventEnvelope", "Fingerprint", "FinishReason", "ForkOptions", "ForkResult",
    "HandoffOptions", "HistoryEntry", "Hook", "Input", "Json", "KVNamespaceLike", "KvStoreOptions", "Message", "MetricSample", "MockModel",
    "MockModelOptions", "MockTurn", "Model", "ModelChange", "ModelRequest", "ModelResponse", "ModelStream", "NothingToResume", "OnExceeded", "OutputCheckFn", "Price",
    "OutputCheckHook", "PendingRun", "ProgressGuardHook", "ProgressGuardOptions", "RecoverOptions", "Recovery",
    "RecoveryRun", "ResultKind", "ResumeOptions", "RunEvent", "RunOnceOptions", "RunResult", "RunStats", "RunStatus",
    "SendOptions", "StoragePrices", "StorageUsage", "Store", "SubagentOptions", "SubagentTag", "SweepOptions", "SweepReport", "TestClock", "TestClockOptions", "Tool", "ToolCall",
    "TokenLimits", "ToolContext", "ToolResult", "ToolSpec", "TrajectoryStep", "Usage",
    "RunKind", "Session", "SessionFork", "SessionForkOptions", "SessionResumeOptions", "SessionSendOptions", "SessionTurn",
    "FireScheduleOptions", "MissedFires", "Schedule", "ScheduleInput", "ScheduleOutcome", "Schedules",
    "StartSchedulesOptions",
    "Checkpoints", "LLMProvider", "LocalStoreOptions", "MemoryStoreOptions", "StorageLike",
    "AiSdkCallOptions", "AiSdkCallSettings", "AiSdkLanguageModel", "AiSdkModelOptions",
    "Decision", "DeliverOptions", "EventDelivery", "Events", "PendingWait", "ResolvedBy", "ToolWait", "WaitForEventOptions",
    "WaitHelpers", "WaitKind", "WaitOutcome", "WaitRequest", "WaitTime", "WaitTool",
    "OtlpEndpoint", "ReadableSpanLike", "SpanExporterLike", "TracingOptions",
  ],
};

test("the subpaths the documents import resolve in the installed package: steadfast/testing, /executor, /utils, /sqlite", () => {
  const script = [
    "const t = await import('steadfast/testing');",
    "const e = await import('steadfast/executor');",
    "const u = await import('steadfast/utils');",
    "const q = await import('steadfast/sqlite');",
    "try { new q.SqliteStore('x.db'); } catch (e) { console.log(e.code); }",
    "const m = await import('steadfast');",
    "const store = m.memoryStore();",
    "const r = await e.AgentExecutor.execute({ agent: {}, input: 'hi', provider: t.mockModel(['hello']), sessionId: 's', checkpointStore: store.checkpoints });",
    "console.log(r.text, typeof u.LocalStorageCheckpointStore, typeof e.resumeAfterApproval, (await store.checkpoints.load('s')).status);",
  ].join("\n");
  const out = run(process.execPath, ["--input-type=module", "-e", script], project);
  // SqliteStore without better-sqlite3 installed: a coded refusal, not a crash at import.
  assert.equal(out, "STEADFAST_CONFIG_INVALID\nhello function function finished\n");
});

test("the installed package exports exactly the public names (values at run time, types in index.d.ts)", async () => {
  const installed = join(project, "node_modules/steadfast");
  const mod = await import(pathToFileURL(join(installed, "dist/entrypoints/node.js")).href);
  assert.deepEqual(Object.keys(mod).sort(), [...PUBLIC_EXPORTS.values].sort(), "run-time exports");

  const dts = join(installed, "dist/index.d.ts");
  const program = ts.createProgram([dts], { module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext, noEmit: true });
  const checker = program.getTypeChecker();
  const exported = checker.getExportsOfModule(checker.getSymbolAtLocation(program.getSourceFile(dts)));
  const isValue = (s) => ((s.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(s) : s).flags & ts.SymbolFlags.Value) !== 0;
  assert.deepEqual(exported.filter(isValue).map((s) => s.name).sort(), [...PUBLIC_EXPORTS.values].sort(), "value exports of index.d.ts");
  assert.deepEqual(exported.filter((s) => !isValue(s)).map((s) => s.name).sort(), [...PUBLIC_EXPORTS.types].sort(), "type-only exports of index.d.ts");
});

test("examples/worker.ts and examples/durable-object.ts type-check against the installed package", () => {
  writeFileSync(
    join(project, "tsconfig.json"),
    JSON.stringify({
      compilerOptions: {
        target: "ES2022",
        lib: ["ES2022", "dom"],
        module: "ESNext",
        moduleResolution: "Bundler",
        customConditions: ["workerd"],
        strict: true,
        noEmit: true,
        skipLibCheck: false,
        types: [],
      },
      files: ["src/worker.ts", "src/durable-object.ts"],
    }),
  );
  try {
    run(tsc, ["-p", "."], project);
  } catch (e) {
    assert.fail(`tsc failed:\n${e.stdout}${e.stderr}`);
  }
});

test("a consumer type-checks against the installed package with skipLibCheck false and only lib ES2022 (no DOM, Node or esnext.disposable)", () => {
  const dir = join(project, "strict");
  mkdirSync(dir, { recursive: true });
  copyFileSync(join(js, "test-support/types/consumer.ts"), join(dir, "consumer.ts"));
  const config = JSON.parse(readFileSync(join(js, "test-support/types/tsconfig.json"), "utf8"));
  assert.deepEqual(config.compilerOptions.lib, ["ES2022"]);
  assert.equal(config.compilerOptions.skipLibCheck, false);
  assert.deepEqual(config.compilerOptions.types, []);
  writeFileSync(join(dir, "tsconfig.json"), JSON.stringify(config));
  try {
    run(tsc, ["-p", "."], dir);
  } catch (e) {
    assert.fail(`tsc failed:\n${e.stdout}${e.stderr}`);
  }
});

test("examples/worker.ts, bundled against the installed package, recovers a propagated failure by a cron sweep under workerd", async () => {
  const outdir = join(project, "out");
  run(
    esbuild,
    ["src/worker.ts", "--bundle", "--format=esm", "--platform=neutral", "--conditions=workerd", "--loader:.wasm=copy", `--outdir=${outdir}`, "--log-level=warning"],
    project,
  );
  const wasm = readdirSync(outdir).filter((f) => f.endsWith(".wasm"));
  assert.equal(wasm.length, 1, `one .wasm next to the bundle: ${readdirSync(outdir)}`);

  mf = new Miniflare({
    modules: true,
    modulesRoot: outdir,
    scriptPath: join(outdir, "worker.js"),
    modulesRules: [
      { type: "ESModule", include: ["**/*.js", "**/*.mjs"] },
      { type: "CompiledWasm", include: ["**/*.wasm"] },
    ],
    compatibilityDate: "2026-04-01",
    kvNamespaces: ["RUNS"],
    unsafeTriggerHandlers: true,
    cf: false,
  });
  const call = async (method, path, body) => {
    const res = await mf.dispatchFetch(`http://localhost${path}`, {
      method,
      ...(body === undefined ? {} : { body: JSON.stringify(body), headers: { "content-type": "application/json" } }),
    });
    return { status: res.status, body: await res.json() };
  };

  const sent = await call("POST", "/send", { sessionId: "order-7", input: "Charge and ship order 7" });
  assert.ok(sent.status >= 500, `send fails: ${JSON.stringify(sent)}`);
  assert.equal(sent.body.code, "STEADFAST_TOOL_PROPAGATED", JSON.stringify(sent.body));

  const pending = await call("GET", "/pending");
  assert.equal(pending.status, 200);
  assert.deepEqual(pending.body.map((r) => r.runId), ["order-7"]);
  assert.equal((await call("GET", "/charges")).body.charges, 1);

  const worker = await mf.getWorker();
  const tick = await worker.scheduled({ cron: "*/5 * * * *", scheduledTime: new Date() });
  assert.equal(tick.outcome, "ok");

  const after = await call("GET", "/pending");
  assert.equal(after.status, 200);
  assert.deepEqual(after.body, []);
  const charges = await call("GET", "/charges");
  assert.deepEqual(charges, { status: 200, body: { charges: 1 } });
});

test("examples/durable-object.ts, bundled against the installed package, keeps its runs in its own SQLite Durable Object and finishes a propagated failure from the object's alarm under workerd", async () => {
  const outdir = join(project, "out-do");
  run(
    esbuild,
    ["src/durable-object.ts", "--bundle", "--format=esm", "--platform=neutral", "--conditions=workerd", "--loader:.wasm=copy", `--outdir=${outdir}`, "--log-level=warning"],
    project,
  );
  const objects = new Miniflare({
    modules: true,
    modulesRoot: outdir,
    scriptPath: join(outdir, "durable-object.js"),
    modulesRules: [
      { type: "ESModule", include: ["**/*.js", "**/*.mjs"] },
      { type: "CompiledWasm", include: ["**/*.wasm"] },
    ],
    compatibilityDate: "2026-04-01",
    durableObjects: { ORDERS: { className: "Orders", useSQLite: true } },
    cf: false,
  });
  try {
    const call = async (method, path, body) => {
      const res = await objects.dispatchFetch(`http://localhost${path}`, {
        method,
        ...(body === undefined ? {} : { body: JSON.stringify(body), headers: { "content-type": "application/json" } }),
      });
      return { status: res.status, body: await res.json() };
    };
    const sent = await call("POST", "/send", { sessionId: "order-7", input: "Charge and ship order 7" });
    assert.equal(sent.status, 500, JSON.stringify(sent));
    assert.equal(sent.body.code, "STEADFAST_TOOL_PROPAGATED", JSON.stringify(sent.body));
    // No KV namespace and no cron trigger: the object's alarm (set 100 ms after the failure) finishes the run.
    let state;
    for (let i = 0; i < 100; i++) {
      state = await call("GET", "/state?session=order-7");
      if (state.body.status === "finished") break;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    assert.deepEqual(state, { status: 200, body: { status: "finished", pending: 0, charges: 1 } });
    // Another session is another object, with its own runs.
    assert.deepEqual((await call("GET", "/state?session=order-8")).body, { status: null, pending: 0, charges: 0 });
  } finally {
    await objects.dispose();
  }
});
