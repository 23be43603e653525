#!/usr/bin/env bash
# Packaging test of the built package (run scripts/build.sh first): npm pack → npm install of the tarball into a
# temporary project → tsc --noEmit and an esbuild bundle of js/examples/worker.ts against the installed package
# → that Worker in workerd (Miniflare, from the repository root's node_modules) with a cron-triggered sweep.
set -euo pipefail
JS="$(cd "$(dirname "$0")/.." && pwd)"
cd "$JS"
for f in dist/index.d.ts dist/entrypoints/workerd.js wasm/steadfast_bg.wasm; do
  [ -f "$f" ] || { echo "pack-test: $f is missing: run scripts/build.sh first" >&2; exit 1; }
done
echo "==> node --test js/test-support/pack/ (npm pack, install, tsc, esbuild, workerd)"
node --test test-support/pack/
