#!/usr/bin/env bash
# Builds the npm package `steadfast` into js/: the Rust core for wasm32 (release, feature `js`), its bindings
# (wasm-bindgen --target web → js/wasm/), wasm-opt -Oz when binaryen's wasm-opt is installed (npm `binaryen`
# in js/ or in the repository root; STEADFAST_NO_WASM_OPT=1 skips it), and the TypeScript facade (tsc → js/dist/).
set -euo pipefail
JS="$(cd "$(dirname "$0")/.." && pwd)"
ROOT="$(dirname "$JS")"
export PATH="$HOME/.cargo/bin:$PATH"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"

rustup target list --installed 2>/dev/null | grep -q wasm32-unknown-unknown || rustup target add wasm32-unknown-unknown
# wasm-bindgen-cli must equal the wasm-bindgen crate version in Cargo.lock.
WBG=$(awk '/^name = "wasm-bindgen"$/{getline; gsub(/[^0-9.]/,""); print; exit}' "$ROOT/Cargo.lock")
if ! wasm-bindgen --version 2>/dev/null | grep -q " $WBG\$"; then
  cargo install wasm-bindgen-cli --version "$WBG"
fi

echo "==> cargo build (release, feature js, wasm32)"
(cd "$ROOT" && CARGO_TARGET_DIR="$TARGET_DIR" cargo build --locked --release --lib --features js --target wasm32-unknown-unknown)

echo "==> wasm-bindgen --target web"
rm -rf "$JS/wasm"
wasm-bindgen --target web --out-dir "$JS/wasm" "$TARGET_DIR/wasm32-unknown-unknown/release/steadfast.wasm"

WASM="$JS/wasm/steadfast_bg.wasm"
OPT=""
for c in "$JS/node_modules/.bin/wasm-opt" "$ROOT/node_modules/.bin/wasm-opt"; do
  [ -x "$c" ] && { OPT="$c"; break; }
done
if [ "${STEADFAST_NO_WASM_OPT:-0}" = "1" ]; then
  echo "==> wasm-opt skipped (STEADFAST_NO_WASM_OPT=1)"
elif [ -n "$OPT" ]; then
  echo "==> wasm-opt -Oz ($OPT)"
  # As scripts/build-worker: Rust relies on no implicit wasm trap (bounds and zero divisors are checked in code),
  # a fresh instance's memory is zeroed, and the producers section is not needed.
  # Two -Oz passes with --gufa between them, as scripts/build-worker does (~25 s more).
  "$OPT" --strip-producers --zero-filled-memory --ignore-implicit-traps -Oz --gufa -Oz "$WASM" -o "$WASM.opt" && mv "$WASM.opt" "$WASM"
else
  echo "==> wasm-opt not found (npm i binaryen@132.0.0 in js/ or the repository root): skipped"
fi

echo "==> tsc"
cd "$JS"
[ -x node_modules/.bin/tsc ] || npm ci --no-audit --no-fund
rm -rf dist
node_modules/.bin/tsc -p .

raw=$(stat -c %s "$WASM")
gz=$(gzip -9 -c "$WASM" | wc -c)
echo "package wasm: ${raw} bytes raw, ${gz} bytes gzip -9"
