// Bundles the Agents SDK Worker (cf-agent/worker.js) for workerd with esbuild, the way wrangler does for a
// `nodejs_compat` Worker: Node built-ins (bare or `node:`) stay imports of `node:*`.
import esbuild from "esbuild";
import { builtinModules } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const builtins = new Set(builtinModules);

export async function buildCfAgent(outfile = path.join(here, ".build", "cf-agent.mjs")) {
  await esbuild.build({
    entryPoints: [path.join(here, "cf-agent", "worker.js")],
    bundle: true,
    format: "esm",
    platform: "neutral",
    target: "es2022",
    conditions: ["workerd", "worker", "browser", "import"],
    mainFields: ["module", "main"],
    outfile,
    logLevel: "warning",
    plugins: [
      {
        name: "node-builtins",
        setup(b) {
          b.onResolve({ filter: /^[a-z_:/]+$/ }, (args) => {
            const bare = args.path.replace(/^node:/, "");
            if (args.path.startsWith("cloudflare:")) return { path: args.path, external: true };
            if (builtins.has(bare)) return { path: `node:${bare}`, external: true };
            return undefined;
          });
        },
      },
    ],
  });
  return outfile;
}

if (import.meta.url === `file://${process.argv[1]}`) console.log(await buildCfAgent());
