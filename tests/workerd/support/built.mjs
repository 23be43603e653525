// The built Worker (build/ from ./scripts/build-worker, or build-conformance/) as Miniflare loads it: its
// module, the rules for its JS and wasm modules, and the compatibility date wrangler.toml pins. Shared by the
// workerd tests and the Worker benchmarks; each adds its bindings, KV, objects and persistence.
export function builtWorker(dir = "build") {
  return {
    modules: true,
    scriptPath: `${dir}/index.js`,
    modulesRoot: dir,
    modulesRules: [
      { type: "ESModule", include: ["**/*.js", "**/*.mjs"] },
      { type: "CompiledWasm", include: ["**/*.wasm"] },
    ],
    compatibilityDate: "2026-04-01",
  };
}
