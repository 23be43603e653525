#!/usr/bin/env bash
# Checks that the generated types are up to date (scripts/gen-types.sh --check), builds the npm package
# (scripts/build.sh), type-checks a consumer of its published types, and runs its tests
# against the built package (node --test; test/workerd.test.mjs loads it in workerd through Miniflare from the
# repository root's node_modules).
set -euo pipefail
JS="$(cd "$(dirname "$0")/.." && pwd)"
echo "==> generated types: regenerating js/src/generated/ must give no diff (scripts/gen-types.sh --check)"
"$JS/scripts/gen-types.sh" --check
"$JS/scripts/build.sh"
cd "$JS"
echo "==> tsc: a consumer of the published types"
node_modules/.bin/tsc -p test-support/types
echo "==> tsc: aiSdkModel takes the AI SDK's real V2/V3 models (test-support/types-ai)"
node_modules/.bin/tsc -p test-support/types-ai
echo "==> node --test js/test/ (three files at a time: many wait on processes and timers)"
node --test --test-concurrency=3 test/
"$JS/scripts/pack-test.sh"
