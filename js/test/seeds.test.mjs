// The seeds' TypeScript examples, as written: every example in test/seeds/durable-execution.txt (a copy of the
// seed document) has a fixture in test/seeds/ holding it verbatim (only the import path renamed from
// '@lousho/build-ai-agent' to 'steadfast'), with what the seed elides (a model, tools, the services a tool
// calls) supplied beside it in marked blocks. This file checks that each fixture still holds its example line
// for line, that every example has a fixture, that the fixtures type-check (strict, no skipLibCheck) against
// the built package, and runs each in a process of its own (in a fresh working directory) to the outcome the seed
// states for it.
import test from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const dir = fileURLToPath(new URL("./seeds/", import.meta.url));
const js = fileURLToPath(new URL("..", import.meta.url));
// Compiled outside test/ (node --test would take any .js file under test/ for a test file), inside the package
// (so `import ... from 'steadfast'` resolves to it).
const out = join(js, ".seeds-out");
const seed = readFileSync(join(dir, "durable-execution.txt"), "utf8").split("\n");
const rename = (line) => line.replaceAll("'@lousho/build-ai-agent", "'steadfast");
const fixtures = readdirSync(dir)
  .filter((f) => /^e\d\d-.*\.ts$/.test(f) && !f.endsWith("-before.ts"))
  .sort();

/** The seed lines a fixture claims (`durable-execution.txt:A-B` in its header). */
function rangeOf(text, file) {
  const m = /durable-execution\.txt:(\d+)-(\d+)/.exec(text);
  assert.ok(m, `${file} names no range of durable-execution.txt`);
  return [Number(m[1]), Number(m[2])];
}

/** The example a fixture holds: its lines without the header, the supplied blocks and what follows the example. */
function exampleOf(text) {
  const lines = text.split("\n");
  const out = [];
  let mode = "head";
  for (const line of lines) {
    if (mode === "head") {
      if (line.startsWith("//")) continue;
      mode = "imports";
    }
    if (line === "// ---- supplied ----") mode = "supplied";
    else if (line === "// ---- example ----") mode = "example";
    else if (line.startsWith("// ---- supplied for the elided line: ")) {
      out.push(line.slice("// ---- supplied for the elided line: ".length));
      mode = "elided";
    } else if (line === "// ---- end of supplied ----") mode = "example";
    else if (line === "// ---- end of example ----") break;
    else if (mode === "imports" || mode === "example") out.push(line);
  }
  return out;
}

const trimEnd = (lines) => {
  const l = lines.slice();
  while (l.length > 0 && l[l.length - 1].trim() === "") l.pop();
  return l;
};

test("every fixture holds its seed example verbatim (bar the import path)", () => {
  assert.ok(fixtures.length >= 15, `only ${fixtures.length} fixtures`);
  for (const file of fixtures) {
    const text = readFileSync(join(dir, file), "utf8");
    const [a, b] = rangeOf(text, file);
    const want = trimEnd(seed.slice(a - 1, b).map(rename));
    // An elision line of the seed (`// ...`) is named by the marker where the fixture supplies its code.
    const got = trimEnd(exampleOf(text));
    assert.deepEqual(got, want, `${file} differs from durable-execution.txt:${a}-${b}`);
  }
});

test("every TypeScript example of the seed has a fixture", () => {
  const starts = new Set(fixtures.map((f) => rangeOf(readFileSync(join(dir, f), "utf8"), f)[0]));
  const examples = [];
  seed.forEach((line, i) => {
    const prev = i > 0 ? seed[i - 1] : "";
    if (/^import .* from '@lousho\/build-ai-agent/.test(line) && !prev.startsWith("import ")) examples.push(i + 1);
  });
  assert.ok(examples.length >= 15, `found ${examples.length} examples`);
  assert.deepEqual(examples.filter((n) => !starts.has(n)), [], "examples without a fixture (their first lines)");
});

test("the fixtures type-check with --strict and no skipLibCheck against the built package", () => {
  rmSync(out, { recursive: true, force: true });
  const r = spawnSync(join(js, "node_modules/.bin/tsc"), ["-p", dir], { encoding: "utf8" });
  assert.equal(r.status, 0, `tsc failed:\n${r.stdout}${r.stderr}`);
});

/** What each fixture prints (stdout), as the seed states it; a fixture runs after its `-before` process. */
const outcomes = {
  "e01-sqlite-store": "finished 4 false\n",
  "e02-awaiting-approval-error": "finished\n",
  "e03-approval-resolve": "stop\n",
  "e04-pending-file-store": /^session email-run waits on approval apr_[0-9a-f]+\nfinished\n$/,
  "e05-recover": "order-7: Order charged and shipped.\n1\n",
  "e06-run-once": "1\n",
  "e07-idempotent-charge": "Charged 42. 2 1\n",
  "e08-claim-key": "Claim C-7 filed. 1 claim:C-7\n",
  // The history prints as the seed says; its last line, `delete(id, { keepHistory: true })`, is refused
  // (a run's history is its journal and goes with it): the one stated outcome we do not give, checked below.
  "e09-history": /^2 finished \d+ 4\n1 in-progress \d+ 3\n1 in-progress \d+ 2\n0 in-progress \d+ 1\n$/,
  "e10-fork-compare": /^2 1 2 \{[^]*stepCount: \{ a: 1, b: 2 \}[^]*\ntrip\.fork-1 Day 1: the museums\. Day 2: the aquarium\.\n$/,
  "e11-drift-error": '{"reason":"nothing to resume","resumed":false,"runId":"job-1"}\n',
  "e12-executor-execute": "finished 5 true\n",
  "e13-executor-awaiting": "finished\n",
  "e14-executor-resume-after-approval": "stop\nteam@example.com\n",
  "e15-executor-fork": /^1 2 2 \{[^]*\}\ntrip\.fork-1 Museums and cafes\.\n$/,
};

for (const file of fixtures) {
  const name = file.replace(/\.ts$/, "");
  test(`seed example ${name} runs to the stated outcome`, async () => {
    const expected = outcomes[name];
    assert.ok(expected !== undefined, `no stated outcome for ${name}`);
    const cwd = mkdtempSync(join(tmpdir(), "steadfast-seed-"));
    try {
      const node = (f) => spawnSync(process.execPath, [join(out, f)], { cwd, encoding: "utf8", timeout: 60_000 });
      if (readdirSync(dir).includes(`${name}-before.ts`)) {
        const before = node(`${name}-before.js`);
        assert.notEqual(before.status, 0, `${name}-before should die mid-run:\n${before.stderr}`);
        // The dead process's lease (1 s) is taken over once expired plus the grace for clock skew (30 s by
        // default): the documented wait after a crash, before a resume may run.
        await new Promise((r) => setTimeout(r, 31_500));
      }
      const r = node(`${name}.js`);
      if (name === "e09-history") {
        assert.equal(r.status, 1, `${name} exited ${r.status}:\n${r.stderr}`);
        assert.match(r.stderr, /STEADFAST_CONFIG_INVALID[^]*keepHistory|keepHistory[^]*STEADFAST_CONFIG_INVALID/);
      } else {
        assert.equal(r.status, 0, `${name} exited ${r.status}:\n${r.stderr}`);
      }
      if (typeof expected === "string") assert.equal(r.stdout, expected);
      else assert.match(r.stdout, expected);
    } finally {
      rmSync(cwd, { recursive: true, force: true });
    }
  });
}
