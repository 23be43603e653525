// Times the step kernel in wasm under node: for each transcript size, 15 runs (after warm-up runs) of the
// last steps that bring a run to that many messages, timed with performance.now(); prints the median µs per
// step. The last line is `RESULT {"20":<µs>,"200":<µs>,"1000":<µs>}` for benches/bench.rs.
//
// usage: node benches/wasm-kernel/run.mjs [pkg-dir]   (default: benches/wasm-kernel/pkg, built by ./scripts/bench)
import { createRequire } from "node:module";
import { existsSync } from "node:fs";
import { resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { performance } from "node:perf_hooks";

const here = dirname(fileURLToPath(import.meta.url));
const pkgDir = resolve(process.argv[2] ?? `${here}/pkg`);
const entry = `${pkgDir}/steadfast_wasm_kernel.js`;
if (!existsSync(entry)) {
  console.error(`wasm kernel not built: ${entry} is missing (./scripts/bench builds it)`);
  process.exit(2);
}
const kernel = createRequire(import.meta.url)(entry);

const SIZES = [20, 200, 1000];
const REPS = 15;
const WARMUP = 2;

function median(v) {
  const s = [...v].sort((a, b) => a - b);
  const n = s.length;
  return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

// Warm-up: one untimed 1,000-message run (V8 tiers the hot wasm functions up), as the native bench does.
kernel.prepare(1000);

const result = {};
for (const size of SIZES) {
  const samples = [];
  let timedSteps = 0;
  for (let r = 0; r < WARMUP + REPS; r++) {
    const timed = kernel.prepare(size);
    const t0 = performance.now();
    const messages = kernel.run_steps(timed);
    const us = ((performance.now() - t0) * 1000) / timed;
    if (messages < size) throw new Error(`the run reached ${messages} messages, not ${size}`);
    timedSteps = timed;
    if (r >= WARMUP) samples.push(us);
  }
  result[size] = median(samples);
  console.log(`wasm (node ${process.version}) ${size} messages: ${result[size].toFixed(2)} µs/step (median of ${REPS}, ${timedSteps} steps each)`);
}
console.log(`RESULT ${JSON.stringify(result)}`);
