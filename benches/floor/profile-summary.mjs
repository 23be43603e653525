#!/usr/bin/env node
// Reads a V8 CPU profile (`node --cpu-prof`) and prints the functions with the most time: inclusive (the
// function or anything it called was on the stack; a function counted once per sample even when recursive) and
// self (the function itself was running). Wasm functions show with their Rust names when the wasm has a name
// section (js/scripts/build.sh with STEADFAST_NO_WASM_OPT=1 keeps it).
//
// Usage: node benches/floor/profile-summary.mjs FILE.cpuprofile [--top 40] [--match REGEX]
import fs from "node:fs";

const file = process.argv[2];
if (!file) throw new Error("usage: profile-summary.mjs FILE.cpuprofile [--top N] [--match REGEX]");
const arg = (name, dflt) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : dflt;
};
const TOP = Number(arg("top", "40"));
const MATCH = arg("match", "") ? new RegExp(arg("match", "")) : null;
const prof = JSON.parse(fs.readFileSync(file, "utf8"));
const byId = new Map(prof.nodes.map((n) => [n.id, n]));
const parent = new Map();
for (const n of prof.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
// Rust symbols: drop the hash suffix.
const nameOf = (n) => (n.callFrame.functionName || `(anonymous ${n.callFrame.url.split("/").pop()}:${n.callFrame.lineNumber})`).replace(/::h[0-9a-f]{16}/g, "");
const self = new Map();
const incl = new Map();
let total = 0;
let idle = 0;
const samples = prof.samples ?? [];
for (const id of samples) {
  total += 1;
  const n = byId.get(id);
  const name = nameOf(n);
  if (name === "(idle)") idle += 1;
  self.set(name, (self.get(name) ?? 0) + 1);
  const seen = new Set();
  for (let cur = id; cur !== undefined; cur = parent.get(cur)) {
    const nm = nameOf(byId.get(cur));
    if (!seen.has(nm)) {
      seen.add(nm);
      incl.set(nm, (incl.get(nm) ?? 0) + 1);
    }
  }
}
const busy = total - idle;
const pct = (x) => ((100 * x) / busy).toFixed(1).padStart(5);
const show = (title, m) => {
  console.log(`\n${title} (% of ${busy} non-idle samples)`);
  [...m.entries()]
    .filter(([k]) => k !== "(root)" && k !== "(idle)" && (!MATCH || MATCH.test(k)))
    .sort((a, b) => b[1] - a[1])
    .slice(0, TOP)
    .forEach(([k, v]) => console.log(`${pct(v)} %  ${k}`));
};
show("inclusive", incl);
show("self", self);
