// The seed convention of the Rust tests (src/seeds.rs) for the npm package's generated tests:
// STEADFAST_SEED=<n> replays one case, STEADFAST_CASES=<n> sets how many, STEADFAST_LARGE=1 runs ten times the
// default. A failure names its seed: `repro(seed, detail)` in the assertion message.
import { basename } from "node:path";

/** The seeds to run: `[STEADFAST_SEED]`, else 1..n (n: STEADFAST_CASES, else `defaults` (×10 when large)). */
export function cases(defaults) {
  const only = process.env.STEADFAST_SEED;
  if (only !== undefined && only !== "") return [Number(only)];
  const n = Number(process.env.STEADFAST_CASES ?? defaults * (process.env.STEADFAST_LARGE === "1" ? 10 : 1));
  return Array.from({ length: n }, (_, i) => i + 1);
}

/** The one-line repro of a failing case of the calling test file. */
export function repro(seed, detail = "") {
  const file = basename(process.argv[1] ?? "the test file");
  return `seed ${seed}: STEADFAST_SEED=${seed} node --test js/test/${file}${detail ? ` — ${detail}` : ""}`;
}

/** A small seeded PRNG (mulberry32): a generated case repeats from its seed. Returns floats in [0, 1). */
export function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
