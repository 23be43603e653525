// The README's five-minute tour, replayed: every `$ ` command of the "## A five-minute tour" section's
// ```console blocks runs in bash (real curl) against the built Worker (build/) in workerd, served on 127.0.0.1
// with the bundled configuration (steadfast.config.json, the offline demo), a fresh local KV and the cron
// trigger reachable over HTTP as `wrangler dev --test-scheduled` offers it; each answer is compared with the
// text the README shows under the command, so the tour cannot drift from what the Worker answers.
//
// How an answer is compared (the README's text is the expectation, nothing is hard-coded here):
// - JSON, not marked abridged: parsed and equal, except the fields in TIMESTAMPS (compared by type: a time).
// - a command ending in `# abridged…`: a JSON answer is compared by its fields: every field the README shows is
//   there with that value; `…` marks what was left out (`,…}` fields of an object, `[…]` a whole array's
//   elements, `,…]` the rest of an array); an object without `,…` has exactly the fields shown. Any other
//   answer (the events stream) line by line as a subsequence: each README line that is not `…` appears, in
//   order, in the answer; `data:` lines compared as abridged JSON.
// - anything else (`ok`, `204`, grep's output): the exact text.
// - an approval id `apr_<24 hex>`, a wait id `wait_<32 hex>` and a wait's token (64 hex digits) in the README are
//   placeholders: bound to the value the Worker answers where the README first shows it, and replaced by that
//   value in later commands and texts.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { Miniflare } from "miniflare";
import { builtWorker } from "./support/built.mjs";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const TOKEN = "readme-tour-token-0123456789";
const SECTION = "## A five-minute tour";
// Fields whose value is a time (milliseconds since the epoch), different in every run: compared by type, a
// non-negative integer. `savedAt`: a run's last checkpoint; `at`: when the sweep next takes a run up (the
// listing's `next`), when an event was recorded (the events stream).
const TIMESTAMPS = new Set(["savedAt", "at", "dueAt"]);
// Placeholders: an approval id, a wait id, a wait's token (64 hex digits).
const APPROVAL_ID = /apr_[0-9a-f]{24}|wait_[0-9a-f]{32}|\b[0-9a-f]{64}\b/g;
const PLACEHOLDER = /^(?:apr_[0-9a-f]{24}|wait_[0-9a-f]{32}|[0-9a-f]{64})$/;
// One command's limit: the longest, `sleep 5; curl …`, takes about five seconds.
const COMMAND_TIMEOUT_MS = 30_000;

// ---------- the README's tour ----------

// The tour: its shell setup (the section's ```bash blocks, without the line that sets TOKEN to the token
// `./scripts/dev` printed) and its steps, in order: [{ command, abridged, expected }] from every ```console
// block of the section.
function tour(readme) {
  const start = readme.indexOf(`\n${SECTION}\n`);
  assert.ok(start >= 0, `README.md has no "${SECTION}" section`);
  const rest = readme.slice(start + SECTION.length + 2);
  const end = rest.search(/^## /m);
  const section = end >= 0 ? rest.slice(0, end) : rest;
  const setup = [];
  for (const m of section.matchAll(/^```bash\n([\s\S]*?)^```$/gm)) {
    setup.push(...m[1].split("\n").filter((line) => line.trim() && !/^export TOKEN=/.test(line)));
  }
  const steps = [];
  for (const m of section.matchAll(/^```console\n([\s\S]*?)^```$/gm)) {
    let step = null;
    for (const line of m[1].split("\n")) {
      if (line.startsWith("$ ")) {
        const { command, comment } = splitComment(line.slice(2));
        step = { command, abridged: /^abridged\b/.test(comment ?? ""), lines: [] };
        steps.push(step);
      } else {
        assert.ok(step, `a console block of the tour starts with output, not a command: ${JSON.stringify(line)}`);
        step.lines.push(line);
      }
    }
  }
  for (const s of steps) {
    while (s.lines.length && s.lines[s.lines.length - 1] === "") s.lines.pop();
    s.expected = s.lines.join("\n");
    delete s.lines;
  }
  return { setup: setup.join("\n"), steps };
}

// A shell line's command and its trailing `# comment` (a `#` after whitespace, outside quotes).
function splitComment(line) {
  let quote = null;
  for (let i = 0; i < line.length; i++) {
    const c = line[i];
    if (quote) {
      if (c === quote) quote = null;
      else if (c === "\\" && quote === '"') i++;
    } else if (c === "'" || c === '"') quote = c;
    else if (c === "\\") i++;
    else if (c === "#" && (i === 0 || /\s/.test(line[i - 1]))) {
      return { command: line.slice(0, i).trimEnd(), comment: line.slice(i + 1).trim() };
    }
  }
  return { command: line.trimEnd(), comment: null };
}

// ---------- abridged JSON: JSON in which `…` marks what was left out ----------

const OPEN = Symbol("the README left out more fields");
const ELIDED = Symbol("the README left out this array's elements");
const MORE = Symbol("the README left out the array's further elements");

// Parses the README's JSON with `…`: `,…}` (or `{…}`) makes the object open, `[…]` an elided array, `,…]` an
// array whose further elements are left out. Plain JSON parses to plain values.
function parseAbridged(text) {
  let i = 0;
  const fail = (what) => {
    throw new Error(`abridged JSON: ${what} at offset ${i} of ${JSON.stringify(text)}`);
  };
  const ws = () => {
    while (i < text.length && /\s/.test(text[i])) i++;
  };
  const ellipsis = () => {
    ws();
    if (text[i] === "…") return (i++, true);
    if (text.startsWith("...", i)) return ((i += 3), true);
    return false;
  };
  const scalar = () => {
    const m = /^(?:"(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null)/.exec(text.slice(i));
    if (!m) fail("a value expected");
    i += m[0].length;
    return JSON.parse(m[0]);
  };
  const value = () => {
    ws();
    if (text[i] === "{") {
      i++;
      const obj = {};
      ws();
      if (text[i] === "}") return (i++, obj);
      for (;;) {
        if (ellipsis()) {
          obj[OPEN] = true;
          ws();
          if (text[i++] !== "}") fail("`}` expected after `…`");
          return obj;
        }
        ws();
        const key = scalar();
        if (typeof key !== "string") fail("a key expected");
        ws();
        if (text[i++] !== ":") fail("`:` expected");
        obj[key] = value();
        ws();
        const c = text[i++];
        if (c === "}") return obj;
        if (c !== ",") fail("`,` or `}` expected");
      }
    }
    if (text[i] === "[") {
      i++;
      const arr = [];
      ws();
      if (text[i] === "]") return (i++, arr);
      if (ellipsis()) {
        ws();
        if (text[i++] !== "]") fail("`]` expected after `[…`");
        arr[ELIDED] = true;
        return arr;
      }
      for (;;) {
        if (arr.length && ellipsis()) {
          arr[MORE] = true;
          ws();
          if (text[i++] !== "]") fail("`]` expected after `…`");
          return arr;
        }
        arr.push(value());
        ws();
        const c = text[i++];
        if (c === "]") return arr;
        if (c !== ",") fail("`,` or `]` expected");
      }
    }
    return scalar();
  };
  const v = value();
  ws();
  if (i !== text.length) fail("trailing text");
  return v;
}

// ---------- comparing ----------

// The differences between the README's value and the Worker's, as "path: what" lines (none: they agree).
// `bind(placeholder, actual)` is asked when the README shows an unbound approval id where the Worker has a value.
function differences(expected, actual, bind, at = "$", key = null) {
  if (key !== null && TIMESTAMPS.has(key) && typeof expected === "number") {
    const ok = Number.isSafeInteger(actual) && actual >= 0;
    return ok ? [] : [`${at}: a timestamp (milliseconds, an integer) expected, the Worker has ${JSON.stringify(actual)}`];
  }
  const shape = (s) => s.replace(/[0-9a-f]/g, "x");
  if (typeof expected === "string" && PLACEHOLDER.test(expected) && typeof actual === "string" && shape(expected) === shape(actual)) {
    const bound = bind(expected, actual);
    if (bound !== actual) return [`${at}: ${JSON.stringify(bound)} expected, the Worker has ${JSON.stringify(actual)}`];
    return [];
  }
  if (Array.isArray(expected)) {
    if (!Array.isArray(actual)) return [`${at}: an array expected, the Worker has ${JSON.stringify(actual)}`];
    if (expected[ELIDED]) return [];
    const out = [];
    if (expected[MORE] ? actual.length < expected.length : actual.length !== expected.length) {
      out.push(`${at}: ${expected[MORE] ? "at least " : ""}${expected.length} element(s) expected, the Worker has ${actual.length}`);
    }
    expected.forEach((e, k) => {
      if (k < actual.length) out.push(...differences(e, actual[k], bind, `${at}[${k}]`));
    });
    return out;
  }
  if (expected !== null && typeof expected === "object") {
    if (actual === null || typeof actual !== "object" || Array.isArray(actual)) {
      return [`${at}: an object expected, the Worker has ${JSON.stringify(actual)}`];
    }
    const out = [];
    for (const k of Object.keys(expected)) {
      if (!(k in actual)) out.push(`${at}.${k}: missing (the README shows ${JSON.stringify(expected[k])})`);
      else out.push(...differences(expected[k], actual[k], bind, `${at}.${k}`, k));
    }
    if (!expected[OPEN]) {
      for (const k of Object.keys(actual)) {
        if (!(k in expected)) out.push(`${at}.${k}: not in the README (the Worker has ${JSON.stringify(actual[k])})`);
      }
    }
    return out;
  }
  return Object.is(expected, actual) ? [] : [`${at}: ${JSON.stringify(expected)} expected, the Worker has ${JSON.stringify(actual)}`];
}

function parseJson(text) {
  try {
    return { ok: true, value: JSON.parse(text) };
  } catch {
    return { ok: false };
  }
}

// The differences between the README's expected text and the Worker's answer `out`, by the step's kind.
function compare(step, expected, out, bind) {
  const json = parseJson(expected);
  if (!step.abridged) {
    if (json.ok) {
      const actual = parseJson(out);
      if (!actual.ok) return ["the README shows JSON, the Worker's answer is not JSON"];
      return differences(json.value, actual.value, bind);
    }
    return expected === out ? [] : ["the text differs"];
  }
  if (/^[[{]/.test(expected)) {
    const actual = parseJson(out);
    if (!actual.ok) return ["the README shows JSON, the Worker's answer is not JSON"];
    return differences(parseAbridged(expected), actual.value, bind);
  }
  // A stream: the README's lines, `…` skipped, in order among the answer's lines.
  const lines = out.split("\n");
  let k = 0;
  for (const want of expected.split("\n")) {
    if (want.trim() === "…") continue;
    let found = false;
    // For a `data:` line: the differences from the closest candidate (fewest differences), for the message.
    let closest = null;
    while (k < lines.length && !found) {
      const got = lines[k++];
      if (want.startsWith("data: ") && got.startsWith("data: ")) {
        const actual = parseJson(got.slice(6));
        if (!actual.ok) continue;
        // A candidate line binds no approval id: an unbound one there matches any value.
        const diffs = differences(parseAbridged(want.slice(6)), actual.value, (p, a) => bind.peek(p) ?? a);
        found = diffs.length === 0;
        if (!closest || diffs.length < closest.diffs.length) closest = { got, diffs };
      } else {
        found = want === got;
      }
    }
    if (!found) {
      const why = [`the line ${JSON.stringify(want)} does not follow in the answer (after the lines matched before it)`];
      if (closest) why.push(`the closest data line after them: ${closest.got}`, ...closest.diffs.map((d) => `  ${d}`));
      return why;
    }
  }
  return [];
}

// ---------- the Worker ----------

let mf;
let url;

before(async () => {
  assert.ok(fs.existsSync(path.join(ROOT, "build/index.js")), "build/index.js is missing: run ./scripts/build-worker");
  // No STEADFAST_CONFIG: the bundled steadfast.config.json, as `./scripts/dev` runs it.
  mf = new Miniflare({
    ...builtWorker(path.join(ROOT, "build")),
    kvNamespaces: ["RUNS"],
    durableObjects: { RUN_OBJECTS: { className: "RunObject", useSQLite: true } },
    bindings: { STEADFAST_TOKEN: TOKEN },
    // /cdn-cgi/handler/scheduled fires the cron trigger, as `wrangler dev --test-scheduled`.
    unsafeTriggerHandlers: true,
    host: "127.0.0.1",
    port: 0,
    cf: false,
  });
  url = (await mf.ready).href.replace(/\/$/, "");
});

after(async () => {
  if (mf) await mf.dispose();
});

// Runs one tour command in bash after the tour's setup (it sets A and U from TOKEN), U then pointed at this
// test's Worker instead of ./scripts/dev's port; resolves to the command's standard output.
function run(setup, command) {
  const env = { PATH: process.env.PATH, HOME: process.env.HOME, TOKEN };
  const script = `${setup}\nU=${url}\n${command}`;
  return new Promise((resolve, reject) => {
    execFile("bash", ["-c", script], { env, timeout: COMMAND_TIMEOUT_MS, maxBuffer: 16 << 20 }, (err, stdout, stderr) => {
      if (err) reject(new Error(`\`${command}\` failed (${err.code ?? err.signal}): ${stderr}`));
      else resolve(stdout);
    });
  });
}

test("every command of the README's five-minute tour answers what the README shows", async (t) => {
  const { setup, steps } = tour(fs.readFileSync(path.join(ROOT, "README.md"), "utf8"));
  assert.match(setup, /^A=/m, "the tour's setup (its ```bash block) sets A");
  assert.ok(steps.length > 0, "the tour has no commands");
  // README approval id (a placeholder) → the id the Worker answered.
  const ids = new Map();
  const bind = (placeholder, actual) => {
    if (!ids.has(placeholder)) ids.set(placeholder, actual);
    return ids.get(placeholder);
  };
  bind.peek = (placeholder) => ids.get(placeholder);
  const substitute = (text) => text.replace(APPROVAL_ID, (id) => ids.get(id) ?? id);
  for (const step of steps) {
    await t.test(step.command, async () => {
      const command = substitute(step.command);
      const unbound = step.command.match(APPROVAL_ID)?.find((id) => !ids.has(id));
      assert.ok(!unbound, `the command uses the approval id ${unbound} before any answer of the tour showed it`);
      const expected = substitute(step.expected);
      const out = (await run(setup, command)).replace(/\n+$/, "");
      const diffs = compare(step, expected, out, bind);
      assert.ok(
        diffs.length === 0,
        `the Worker's answer differs from the README's tour${step.abridged ? " (abridged)" : ""}:\n` +
          `  $ ${command}\n` +
          `--- the README shows:\n${expected}\n` +
          `--- the Worker answered:\n${out}\n` +
          `--- differences:\n  ${diffs.join("\n  ")}`,
      );
    });
  }
});
