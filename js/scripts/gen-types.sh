#!/usr/bin/env bash
# Generates TypeScript declarations of the crate's public JSON types into js/src/generated/ with ts-rs (cargo
# feature `ts`: `#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]` on each type; ts-rs writes one file
# per type from its `export_bindings_*` tests). `--check` generates into a temporary directory instead and fails
# when that differs from js/src/generated/ (run by scripts/test.sh).
set -euo pipefail
JS="$(cd "$(dirname "$0")/.." && pwd)"
ROOT="$(dirname "$JS")"
export PATH="$HOME/.cargo/bin:$PATH"
DEST="$JS/src/generated"

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
# Relative imports end in `.js` (module NodeNext). Rust's 64-bit integers are `number`: the core sends them as
# JSON numbers (counts, milliseconds, journal positions; all far below 2^53), never as strings.
(cd "$ROOT" && TS_RS_EXPORT_DIR="$TMP/out" TS_RS_IMPORT_EXTENSION=js TS_RS_LARGE_INT=number \
  cargo test --locked --quiet --lib --features ts export_bindings >"$TMP/cargo.log" 2>&1) || {
  cat "$TMP/cargo.log" >&2
  exit 1
}

if [ "${1:-}" = "--check" ]; then
  if ! diff -ru "$DEST" "$TMP/out"; then
    echo "js/src/generated/ is stale: run js/scripts/gen-types.sh" >&2
    exit 1
  fi
  echo "js/src/generated/ is up to date"
else
  rm -rf "$DEST"
  cp -r "$TMP/out" "$DEST"
  echo "generated $(find "$DEST" -name '*.ts' | wc -l) files into js/src/generated/"
fi
