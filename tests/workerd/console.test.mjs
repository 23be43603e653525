// The operator console in a real browser: Debian's chromium (installed by ./scripts/setup), driven by
// playwright-core (no browser download), against the built Worker and the built console (build/ and
// build-console/) in workerd, with the static-assets routing and headers taken from wrangler.toml. The offline
// demo agent supplies the runs. Screenshots of each page go to test-output/console/ (git-ignored). Any console
// error or uncaught exception on a console page fails the test that caused it.
import { test, before, after, afterEach } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { Miniflare } from "miniflare";
import { unstable_getMiniflareWorkerOptions } from "wrangler";
import { chromium } from "playwright-core";
import { builtWorker } from "./support/built.mjs";

const CHROMIUM = "/usr/bin/chromium";
const TOKEN = "console-token-0123456789";
const SHOTS = "test-output/console";
const BUNDLED = JSON.parse(fs.readFileSync("steadfast.config.json", "utf8"));
// The demo agent with a 1 ms recovery interval, so one cron tick right after the crash resumes the run.
const CONFIG = {
  ...BUNDLED,
  recovery: { ...BUNDLED.recovery, intervalMs: 1 },
  // A schedule that does not fire during the tests (03:00 UTC), for the schedules page.
  schedules: [{ id: "nightly-report", cron: "0 3 * * *", input: "Write the nightly report" }],
};
const CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; " +
  "form-action 'none'; frame-ancestors 'none'";
// Text a tool result is replaced with: markup that would run if the console parsed it as HTML.
const INJECTED = `<script>window.__injected = "script"</script><img src="x" onerror="window.__injected = 'img'">`;

let mf, base, context, page, userDataDir, options;
const problems = []; // console errors and uncaught exceptions of the console page
// HTTP statuses the current test expects an API call of the page to be answered with. Chromium logs every
// non-2xx fetch as a console error ("Failed to load resource: ... status of 401"); only those, for API paths
// (not the console's own files) and with a status the test asked for, are not counted as problems.
const refusals = new Set();
const expectRefusals = (...statuses) => statuses.forEach((s) => refusals.add(s));
const requests = []; // every URL the page requested

async function api(method, p, body) {
  const res = await fetch(new URL(p, base), {
    method,
    headers: { authorization: `Bearer ${TOKEN}` },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, json: await res.json() };
}

const shot = (name) => page.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: true });
const text = async (selector) => (await page.locator(selector).first().textContent()) ?? "";
/** Waits until the element matching `selector` contains `expected`. */
async function waitText(selector, expected) {
  try {
    await page.waitForFunction(
      ([s, t]) => [...document.querySelectorAll(s)].some((el) => el.textContent.includes(t)),
      [selector, expected],
      { timeout: 15_000 },
    );
  } catch (e) {
    const seen = await page.locator(selector).allTextContents();
    const notice = await page.locator("#notice").textContent();
    throw new Error(`${selector} never contained ${JSON.stringify(expected)}: it shows ${JSON.stringify(seen)} ` +
      `(notice: ${JSON.stringify(notice)}; ${e.message.split("\n")[0]})`);
  }
}

before(async () => {
  assert.ok(
    fs.existsSync(CHROMIUM),
    `${CHROMIUM} is missing: ./scripts/setup installs Debian's chromium (apt-get install chromium)`,
  );
  for (const f of ["build/index.js", "build-console/console/index.html", "build-console/console/app.js"]) {
    assert.ok(fs.existsSync(f), `${f} is missing: run ./scripts/build-worker (it builds the console too)`);
  }
  // The assets options (directory, run_worker_first routing) exactly as wrangler reads them from wrangler.toml.
  const { workerOptions } = unstable_getMiniflareWorkerOptions("wrangler.toml");
  assert.ok(workerOptions.assets, "wrangler.toml has an [assets] section");
  options = (config, port) => ({
    ...builtWorker(),
    kvNamespaces: ["RUNS"],
    bindings: { STEADFAST_TOKEN: TOKEN, STEADFAST_CONFIG: JSON.stringify(config) },
    assets: workerOptions.assets,
    unsafeTriggerHandlers: true,
    cf: false,
    host: "127.0.0.1",
    ...(port ? { port } : {}),
  });
  mf = new Miniflare(options(CONFIG));
  base = (await mf.ready).href;

  fs.mkdirSync(SHOTS, { recursive: true });
  userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), "steadfast-console-chromium-"));
  context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: CHROMIUM,
    headless: true,
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
    viewport: { width: 1280, height: 900 },
  });
  page = context.pages()[0] ?? (await context.newPage());
  page.on("console", (m) => {
    if (m.type() !== "error") return;
    const url = m.location()?.url ?? "";
    const status = /^Failed to load resource: the server responded with a status of (\d+)/.exec(m.text())?.[1];
    const apiPath = url.startsWith(base) && !new URL(url).pathname.startsWith("/console/");
    if (status && apiPath && refusals.has(Number(status))) return;
    problems.push(`console error: ${m.text()} (${url})`);
  });
  page.on("pageerror", (e) => problems.push(`uncaught: ${e.message}`));
  page.on("request", (r) => requests.push(r.url()));
});

/**
 * Opens the console at `hash` with a fresh page load (a hash-only navigation would keep the previous view on
 * screen until the new one renders). The tab's sessionStorage, and so the sign-in, is kept.
 */
async function visit(hash) {
  await page.goto("about:blank");
  await page.goto(new URL(`/console/${hash}`, base).href);
}

afterEach(async () => {
  // Let the browser deliver the log messages of what the test just did before judging them.
  await page.waitForTimeout(200);
  refusals.clear();
  const seen = problems.splice(0);
  assert.deepEqual(seen, [], "the console page logged errors");
});

after(async () => {
  await context?.close();
  await mf?.dispose();
  if (userDataDir) fs.rmSync(userDataDir, { recursive: true, force: true });
});

test("the console is served as static assets with a strict Content-Security-Policy; API paths still run the Worker", async () => {
  const res = await fetch(new URL("/console/", base));
  assert.equal(res.status, 200);
  assert.match(res.headers.get("content-type"), /^text\/html/);
  assert.equal(res.headers.get("content-security-policy"), CSP);
  assert.equal(res.headers.get("x-content-type-options"), "nosniff");
  assert.equal(res.headers.get("x-frame-options"), "DENY");
  const js = await fetch(new URL("/console/app.js", base));
  assert.equal(js.status, 200);
  assert.equal(js.headers.get("content-security-policy"), CSP);
  const bare = await fetch(new URL("/console", base), { redirect: "manual" });
  assert.equal(bare.status, 307);
  assert.equal(bare.headers.get("location"), "/console/");
  // API routes are the Worker's: unauthenticated → its coded 401, never a file.
  for (const p of ["/runs", "/approvals", "/", "/_headers"]) {
    const r = await fetch(new URL(p, base));
    assert.equal(r.status, 401, p);
    assert.equal((await r.json()).error.code, "STEADFAST_UNAUTHORIZED", p);
  }
  assert.equal((await fetch(new URL("/health", base))).status, 200);
});

test("the browser enforces the policy: an inline script added to the page does not run", async () => {
  const p = await context.newPage();
  const errors = [];
  p.on("console", (m) => m.type() === "error" && errors.push(m.text()));
  await p.goto(new URL("/console/", base).href);
  const outcome = await p.evaluate(
    () =>
      new Promise((resolve) => {
        document.addEventListener("securitypolicyviolation", (e) => resolve(e.violatedDirective), { once: true });
        const s = document.createElement("script");
        s.textContent = "window.__inline = 1";
        document.body.append(s);
        setTimeout(() => resolve(`no violation (ran: ${window.__inline === 1})`), 2000);
      }),
  );
  assert.match(outcome, /^script-src/);
  assert.equal(await p.evaluate(() => window.__inline), undefined);
  // The violation is a console error: the listener that guards every other test would have caught it.
  assert.ok(errors.some((e) => /Content Security Policy/.test(e)), JSON.stringify(errors));
  await p.close();
});

test("a wrong token gets a clear message and is not kept", async () => {
  expectRefusals(401);
  await visit("");
  await page.locator("#token").fill("not-the-token");
  await page.locator("#signin button[type=submit]").click();
  await waitText("#signin-message", "Wrong token");
  assert.match(await text("#signin-message"), /Wrong token: the Worker refused it \(STEADFAST_UNAUTHORIZED\)/);
  assert.equal(await page.evaluate(() => sessionStorage.getItem("steadfast.token")), null);
  assert.equal(await page.locator("#nav").isVisible(), false);
  await shot("sign-in-wrong-token");
});

test("signing in keeps the token in sessionStorage only, sent in the Authorization header, never in a URL", async () => {
  const authorized = [];
  const onRequest = (r) => r.headers().authorization && authorized.push([r.url(), r.headers().authorization]);
  page.on("request", onRequest);
  await visit("");
  await page.locator("#token").fill(TOKEN);
  await page.locator("#signin button[type=submit]").click();
  await page.locator("#no-runs, #runs").first().waitFor();
  page.off("request", onRequest);
  assert.equal(await page.evaluate(() => sessionStorage.getItem("steadfast.token")), TOKEN);
  assert.equal(await page.evaluate(() => localStorage.length), 0);
  assert.ok(authorized.some(([u, a]) => u.endsWith("/runs") && a === `Bearer ${TOKEN}`), JSON.stringify(authorized));
  assert.ok(!page.url().includes(TOKEN));
  assert.deepEqual(
    requests.filter((u) => u.includes(TOKEN)),
    [],
    "no request URL carries the token",
  );
  // A reload keeps the session (same tab).
  await page.reload();
  await page.locator("#no-runs, #runs").first().waitFor();
});

test("the demo's crashed run is listed with its error; after a cron tick it shows finished with one charge", async () => {
  const first = await api("POST", "/runs/order-7", { input: "Charge and ship order 7" });
  assert.equal(first.status, 502);
  assert.equal(first.json.error.code, "STEADFAST_TOOL_PROPAGATED");

  await visit("#/runs");
  await waitText("#runs tr[data-run='order-7']", "STEADFAST_TOOL_PROPAGATED");
  const row = await text("#runs tr[data-run='order-7']");
  assert.match(row, /in-progress/);
  assert.match(row, /the worker process died while shipping \(demo\)/);
  // What the sweep will do with it (GET /runs `next`): resume it at the next tick (its 1 ms backoff is over).
  assert.equal(await page.locator("#runs tr[data-run='order-7'] td.next [data-plan]").getAttribute("data-plan"), "next-tick");
  assert.match(row, /next sweep tick/);
  assert.match(await text("#counts"), /charges 1 · shipments 0 · refunds 0/);
  await shot("runs-crashed");

  const tick = await (await mf.getWorker()).scheduled({ cron: "* * * * *", scheduledTime: new Date() });
  assert.equal(tick.outcome, "ok");

  await page.locator("button.refresh").click();
  await waitText("#seen-runs tr[data-run='order-7']", "finished");
  assert.match(await text("#seen-runs tr[data-run='order-7']"), /finished\s*stop/);
  assert.equal(await page.locator("#runs tr[data-run='order-7']").count(), 0, "no longer unfinished");
  await waitText("#counts", "charges 1 · shipments 1");
  assert.match(await text("#counts"), /charges 1 · shipments 1 · refunds 0/);
  // The sweep's state as GET /sweep has it after the tick: breaker closed, the run it examined last.
  const sweep = (await api("GET", "/sweep")).json;
  assert.equal(sweep.breaker, "closed");
  assert.equal(await text("#sweep-breaker"), "closed");
  assert.match(await text("#sweep"), new RegExp(`provider failures in a row: 0 · last run examined: ${(sweep.cursor ?? "none").replace(/[.]/g, "\\.")}`));
  // The tick recorded itself (it changed the state); the console shows when.
  assert.equal(typeof sweep.lastTickAt, "number", JSON.stringify(sweep));
  assert.match(await text("#sweep-tick"), /last tick recorded \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC/);
  await shot("runs-recovered");

  await page.locator("#seen-runs a.run-link", { hasText: "order-7" }).click();
  await waitText("#run-status", "finished");
  // Its storage: the run's own KV operations and their cost, as GET /runs/{id} has them.
  const stored = (await api("GET", "/runs/order-7")).json.usage.storage;
  assert.ok(stored.writes > 0 && stored.reads > 0, JSON.stringify(stored));
  assert.match(await text("#run-storage"), new RegExp(`^${stored.reads} reads, ${stored.writes} writes, .* · \\$${String(stored.costUsd).replace(".", "\\.")}$`));
  const results = await page.locator("#timeline li.tool pre.tool-result").allTextContents();
  assert.deepEqual(results, ["charged order 7 (charge #1)", "shipped order 7 (shipment #1)"]);
  assert.match(await text("#timeline"), /Order 7 charged and shipped\./);
  await shot("run-timeline");
});

test("an unfinished run's page updates live: a cron tick finishes it and the page shows it without Refresh", async () => {
  const first = await api("POST", "/runs/order-9", { input: "Charge and ship order 9" });
  assert.equal(first.status, 502);
  await visit("#/runs/order-9");
  await waitText("#run-status", "in-progress");
  assert.match(await text("#live"), /Watching for new steps/);
  const tick = await (await mf.getWorker()).scheduled({ cron: "* * * * *", scheduledTime: new Date() });
  assert.equal(tick.outcome, "ok");
  // No click: the page's watch (GET /runs/order-9/events) hears of the new entries and redraws.
  await waitText("#run-status", "finished");
  assert.equal(await page.locator("#live").count(), 0, "a finished run is not watched");
  const results = await page.locator("#timeline li.tool pre.tool-result").allTextContents();
  // (The demo's scripted model always names order 7; this run's tools are the second charge and shipment.)
  assert.deepEqual(results, ["charged order 7 (charge #2)", "shipped order 7 (shipment #2)"]);
  await shot("run-live");
});

test("a refund's approval is approved from the inbox and the run finishes", async () => {
  const sent = await api("POST", "/runs/refund-7", { input: "Please refund order 7" });
  assert.equal(sent.json.status, "awaiting-approval");

  await visit("#/approvals");
  const card = page.locator(`.approval[data-approval='${sent.json.approvalId}']`);
  await card.waitFor();
  assert.match(await card.textContent(), /refund in run refund-7/);
  assert.deepEqual(JSON.parse(await card.locator("pre.json").textContent()), { order: 7 });
  await shot("approvals-inbox");

  await card.locator("input.note").fill("customer called");
  await card.locator("button.approve").click();
  await waitText("#resolve-result", "finished");
  assert.match(await text("#resolve-result"), /Approved refund for refund-7: the run is finished \(stop\)\. .*Refund issued\./);
  await page.locator("#no-approvals").waitFor();
  await waitText("#counts", "refunds 1");
  await shot("approvals-resolved");

  const run = await api("GET", "/runs/refund-7");
  assert.equal(run.json.status, "finished");
});

test("a rejection with a note from the inbox: the run finishes without the refund, its result marked rejected", async () => {
  const sent = await api("POST", "/runs/refund-8", { input: "Please refund order 8" });
  assert.equal(sent.json.status, "awaiting-approval");
  await visit("#/approvals");
  const card = page.locator(`.approval[data-approval='${sent.json.approvalId}']`);
  await card.locator("input.note").fill("no receipt");
  await card.locator("button.reject").click();
  await waitText("#resolve-result", "Rejected refund for refund-8");
  assert.match(await text("#resolve-result"), /the run is finished \(stop\)\. .*The refund was not issued\./);
  assert.match(await text("#counts"), /refunds 1$/, "no second refund");

  await page.locator("#resolve-result a.run-link").click();
  await waitText("#run-status", "finished");
  const result = page.locator("#timeline li.tool");
  assert.match(await result.locator(".badge").first().textContent(), /^rejected$/);
  assert.match(await result.locator("pre.tool-result").textContent(), /no receipt/);
  await shot("run-rejected");
});

test("a fork from step 1 with a replaced tool result: the markup stays text, and compare shows the divergent step", async () => {
  await visit("#/runs/order-7");
  // One fork button per step, on its newest history entry (the entry the API forks from).
  await page.locator("#history button.fork").first().waitFor();
  assert.equal(await page.locator("#history button.fork[data-step='1']").count(), 1);
  await page.locator("#history button.fork[data-step='1']").click();
  await page.locator("#fork-patch").selectOption("tool");
  assert.match(await page.locator("#fork-call option:checked").textContent(), /^charge \(/);
  await page.locator("#fork-text").fill(INJECTED);
  await page.locator("#fork-new-id").fill("order-7-what-if");
  await page.locator("#fork-form button[type=submit]").click();
  await waitText("#fork-result", "Forked as order-7-what-if from step 1");
  await shot("fork-created");

  await page.locator("#compare-fork").click();
  await waitText("#diverged", "First divergent step: 1");
  const diverged = page.locator("#comparison tr.diverged");
  assert.equal(await diverged.count(), 1);
  assert.equal(await diverged.getAttribute("data-step"), "1");
  const cells = await diverged.locator("pre.tool-result").allTextContents();
  assert.deepEqual(cells, ["charged order 7 (charge #1)", INJECTED]);
  const api_ = (await api("GET", "/compare/order-7/order-7-what-if")).json;
  assert.equal(api_.divergedAt, 1);
  assert.match(await text("#drift"), new RegExp(`steps: ${api_.drift.stepCount.a} → ${api_.drift.stepCount.b}`));
  await shot("compare");

  // The fork's own timeline shows the replaced result as text, too.
  await visit("#/runs/order-7-what-if");
  await waitText("#run-status", "in-progress");
  assert.equal(await text("#timeline li.tool pre.tool-result"), INJECTED);
  await shot("fork-timeline");

  // Nothing of it became markup, and nothing ran.
  assert.equal(await page.evaluate(() => window.__injected), undefined);
  assert.equal(await page.locator("main script, main img").count(), 0);
});

test("resume and delete ask for confirmation, then act and show the result", async () => {
  expectRefusals(502);
  await visit("#/runs/order-7-what-if");
  await waitText("#run-status", "in-progress");
  // Cancel leaves the run alone.
  await page.locator("button.danger", { hasText: "Delete" }).click();
  await page.locator("button", { hasText: "Cancel" }).click();
  assert.equal((await api("GET", "/runs/order-7-what-if")).status, 200);

  // The fork asks to ship, which dies the first time in this run: the resume fails with the coded error...
  await page.locator("button", { hasText: "Resume" }).click();
  await page.locator("button.confirm-yes", { hasText: "Yes, resume" }).click();
  await waitText("#action-result", "STEADFAST_TOOL_PROPAGATED");
  assert.match(await text("#action-result"), /Resume failed: STEADFAST_TOOL_PROPAGATED: the worker process died/);
  // ...and the second one finishes it.
  await page.locator("button", { hasText: "Resume" }).click();
  await page.locator("button.confirm-yes", { hasText: "Yes, resume" }).click();
  await waitText("#action-result", "Resumed: finished (stop)");
  await waitText("#run-status", "finished");
  await shot("fork-resumed");

  await page.locator("button.danger", { hasText: "Delete" }).click();
  await page.locator("button.confirm-yes", { hasText: "Yes, delete" }).click();
  await waitText("#deleted", "Run order-7-what-if was deleted.");
  assert.equal((await api("GET", "/runs/order-7-what-if")).status, 404);
});

test("a token refused mid-session sends the operator back to sign in", async () => {
  expectRefusals(401);
  await page.evaluate(() => sessionStorage.setItem("steadfast.token", "revoked"));
  await visit("#/approvals");
  await waitText("#signin-message", "refused the stored token");
  assert.equal(await page.evaluate(() => sessionStorage.getItem("steadfast.token")), null);
  await shot("sign-in-token-refused");
});

test("a session's turn is listed as such and its session page shows the turns; the schedules page shows each schedule", async () => {
  const paused = await api("POST", "/sessions/chat-9", { input: "Please refund order 9" });
  assert.equal(paused.status, 200, JSON.stringify(paused.json));
  assert.equal(paused.json.runId, "chat-9.turn-1");
  assert.equal(paused.json.status, "awaiting-approval");
  // The runs page reads the runs seen earlier in this tab, one of which an earlier test deleted (404, shown as such).
  expectRefusals(404);
  try {
    // Signed in again (the test before revoked the tab's token).
    await visit("");
    await page.locator("#token").fill(TOKEN);
    await page.locator("#signin button[type=submit]").click();
    await page.locator("#no-runs, #runs").first().waitFor();
    await visit("#/runs");
    await waitText("#runs tr[data-run='chat-9.turn-1']", "turn of session chat-9");
    assert.match(await text("#runs tr[data-run='chat-9.turn-1']"), /waits for a person/);
    await page.locator("#runs tr[data-run='chat-9.turn-1'] a.kind").click();
    await waitText("#session-id", "chat-9");
    const row = await text("#turns tr[data-turn='1']");
    assert.match(row, /chat-9\.turn-1/);
    assert.match(row, /awaiting-approval/);
    assert.match(row, /Please refund order 9/);
    await shot("session");
    await page.locator("#turns a.run-link").click();
    await waitText("#run-session", "chat-9");
  } finally {
    const dropped = await api("POST", "/sessions/chat-9/discard-pending");
    assert.equal(dropped.json.discarded, "chat-9.turn-1");
  }

  await visit("#/schedules");
  await waitText("#schedules tr[data-schedule='nightly-report']", "0 3 * * *");
  const before = await text("#schedules tr[data-schedule='nightly-report']");
  assert.match(before, /run-once/);
  assert.match(before, /not fired/);
  const tick = await (await mf.getWorker()).scheduled({ cron: "* * * * *", scheduledTime: new Date() });
  assert.equal(tick.outcome, "ok");
  await page.locator("button.refresh").click();
  await page.waitForFunction(() => !document.querySelector("#schedules tr[data-schedule='nightly-report']")?.textContent.includes("no tick yet"));
  const shown = (await api("GET", "/schedules")).json.schedules[0];
  assert.equal(typeof shown.since, "number");
  assert.match(await text("#schedules tr[data-schedule='nightly-report']"), /not fired/);
  await shot("schedules");
});

test("model turns show their usage; a run resumed by a changed agent shows the change in its history", async () => {
  const paused = await api("POST", "/runs/drift-1", { input: "please refund order 7" });
  assert.equal(paused.json.status, "awaiting-approval", JSON.stringify(paused.json));
  // The Worker restarts with other instructions (a deploy); its KV keeps the run.
  await mf.setOptions(options({ ...CONFIG, instructions: `${CONFIG.instructions} Be brief.` }, Number(new URL(base).port)));
  assert.equal((await mf.ready).href, base, "the same origin (the console's sign-in is kept)");
  const approved = await api("POST", `/approvals/${paused.json.approvalId}`, { approved: true });
  assert.equal(approved.json.status, "finished", JSON.stringify(approved.json));
  await visit("#/runs/drift-1");
  await waitText("#run-status", "finished");
  const usage = await page.locator("#timeline li.assistant .usage").allTextContents();
  assert.ok(usage.length >= 2 && usage.every((u) => /^ \d+ input \/ \d+ output tokens · \$\d+(\.\d+)?$/.test(u)), JSON.stringify(usage));
  await waitText("#history td.drift", "agent changed: instructions changed");
  assert.equal((await page.locator("#history td.drift").allTextContents()).filter((t) => t).length, 1, "one change, where it happened");
  await shot("run-drift");
});

test("with the progress guard configured, what self-healing did shows at the calls it acted on", async () => {
  // A Worker whose mock model keeps calling a tool that fails the same way (nothing listens on port 9).
  const failing = { name: "lookup", description: "Looks up an order", url: "http://127.0.0.1:9/lookup",
    inputSchema: { type: "object", properties: { order: { type: "number" } } } };
  const script = [...Array.from({ length: 8 }, () => ({ toolCalls: [{ name: "lookup", args: { order: 7 } }] })), { text: "gave up" }];
  const config = { ...CONFIG, progressGuard: {}, tools: [failing], allowedHosts: ["127.0.0.1"], model: { ...CONFIG.model, script } };
  await mf.setOptions(options(config, Number(new URL(base).port)));
  const r = await api("POST", "/runs/stuck-1", { input: "look up order 7" });
  assert.equal(r.json.error?.code, "STEADFAST_RUN_NO_PROGRESS", JSON.stringify(r.json));
  const view = (await api("GET", "/runs/stuck-1")).json;
  assert.deepEqual(view.healActions.map((a) => a.action), ["hint", "hint", "deny", "deny", "deny", "stop"], JSON.stringify(view.healActions));
  await visit("#/runs/stuck-1");
  await waitText("#run-error", "STEADFAST_RUN_NO_PROGRESS");
  const notes = await page.locator("#timeline .heal").evaluateAll((els) => els.map((e) => e.getAttribute("data-action")));
  assert.deepEqual(notes, ["hint", "hint", "deny", "deny", "deny", "stop"]);
  assert.match(await text("#timeline"), /self-healing: deny/);
  await shot("run-heal");
});

test("a lead's page shows its sub-agent calls as a tree with each child's status; a child's page links back to its lead", async () => {
  const mock = (script) => ({ ...CONFIG.model, script });
  const deeper = { name: "deeper", description: "Goes deeper", model: mock([{ text: "bottom reached" }]) };
  const planner = {
    name: "planner",
    description: "Plans",
    model: mock([{ toolCalls: [{ name: "deeper", args: { task: "go on" } }] }, { text: "planned" }]),
    subagents: [deeper],
  };
  const lead = mock([{ toolCalls: [{ name: "planner", args: { task: "plan the trip" } }] }, { text: "the trip is planned" }]);
  // Off the previous page first (its live watch would break when the Worker restarts).
  await page.goto("about:blank");
  await mf.setOptions(options({ ...CONFIG, model: lead, subagents: [planner] }, Number(new URL(base).port)));
  try {
    const r = await api("POST", "/runs/trip-1", { input: "plan my trip" });
    assert.equal(r.json.status, "finished", JSON.stringify(r.json));
    const view = (await api("GET", "/runs/trip-1")).json;
    const child = view.children[0];
    assert.equal(child.name, "planner");
    const grandchild = (await api("GET", `/runs/${encodeURIComponent(child.runId)}`)).json.children[0];
    assert.equal(grandchild.name, "deeper");
    await visit("#/runs/trip-1");
    await waitText(`#children li[data-run='${child.runId}']`, "planner");
    const row = await text(`#children li[data-run='${child.runId}']`);
    assert.match(row, /finished/);
    assert.ok(row.includes(`call ${child.toolCallId}; ${child.usage.inputTokens} input / ${child.usage.outputTokens} output tokens`), row);
    assert.equal(await page.locator("#run-delegated").count(), 0, "a finished lead has no children's spend outside its usage");
    // The grandchild is listed inside its parent's item.
    await waitText(`#children li[data-run='${child.runId}'] li[data-run='${grandchild.runId}']`, "deeper");
    await shot("run-subagents");
    await page.locator(`#children li[data-run='${child.runId}'] > a.run-link`).click();
    await waitText("#run-parent", "trip-1");
    await waitText("#run-id", child.runId);
    await waitText(`#children li[data-run='${grandchild.runId}']`, "finished");
  } finally {
    await page.goto("about:blank");
    await mf.setOptions(options(CONFIG, Number(new URL(base).port)));
  }
});

test("the inbox lists a run's waits beside approvals: an event with its deadline, a question answered with one of its choices", async () => {
  // The demo model waits for an event on a "webhook" message (a deadline a day on). Off the previous page first
  // (its live watch would break when the Worker restarts).
  await page.goto("about:blank");
  await mf.setOptions(options(CONFIG, Number(new URL(base).port)));
  const hook = await api("POST", "/runs/hook-1", { input: "wait for the payment webhook" });
  assert.equal(hook.json.status, "awaiting-approval", JSON.stringify(hook.json));
  const event = hook.json.waits[0];
  // A Worker whose agent asks a question (the built-in ask_question, opted in with waitTools).
  const ask = { toolCalls: [{ name: "ask_question", args: { question: "Ship to the old address?", choices: ["yes", "no"] } }] };
  const config = { ...CONFIG, waitTools: ["ask_question"], model: { ...CONFIG.model, script: [ask, { text: "answered" }] } };
  await page.goto("about:blank");
  await mf.setOptions(options(config, Number(new URL(base).port)));
  try {
    const asked = await api("POST", "/runs/ask-1", { input: "ship order 7" });
    assert.equal(asked.json.status, "awaiting-approval", JSON.stringify(asked.json));
    const question = asked.json.waits[0];
    await visit("#/approvals");
    const eventCard = page.locator(`.approval[data-approval='${event.id}']`);
    await eventCard.waitFor();
    assert.equal(await eventCard.getAttribute("data-kind"), "event");
    assert.match(await eventCard.textContent(), /event wait_for_event in run hook-1/);
    assert.match(await eventCard.locator(".wait-due").textContent(), /^Waits for an event until /);
    assert.ok(!(await page.content()).includes(event.token), "the inbox never shows an event's token");
    const card = page.locator(`.approval[data-approval='${question.id}']`);
    assert.equal(await card.getAttribute("data-kind"), "question");
    assert.equal(await card.locator(".question").textContent(), "Ship to the old address?");
    assert.deepEqual(await card.locator("button.choice").allTextContents(), ["yes", "no"]);
    await shot("inbox-waits");
    await card.locator("input.note").fill("kept the new one");
    await card.locator("button.choice[data-choice='no']").click();
    await waitText("#resolve-result", "finished");
    assert.match(await text("#resolve-result"), /Answered "no" to ask_question for ask-1: the run is finished \(stop\)\. .*answered/);
    const run = (await api("GET", "/runs/ask-1")).json;
    const result = run.messages.find((m) => m.role === "tool");
    assert.equal(result.content, "no", JSON.stringify(result));
    assert.equal(await page.locator(`.approval[data-approval='${question.id}']`).count(), 0, "answered: gone from the inbox");
  } finally {
    await page.goto("about:blank");
    await mf.setOptions(options(CONFIG, Number(new URL(base).port)));
  }
});

test("without the demo tools the console shows no counters and asks for none it cannot get: 204, not a 404 on every page", async () => {
  // Off the previous page first (its live watch would break when the Worker restarts).
  await page.goto("about:blank");
  await mf.setOptions(options({ ...CONFIG, demoTools: false }, Number(new URL(base).port)));
  try {
    // Runs seen earlier in the tab, some since deleted (a 404 each on the runs page), are not what this test is
    // about: forgotten from a page that does not list them.
    await visit("#/schedules");
    if (await page.locator("#token").isVisible()) {
      await page.locator("#token").fill(TOKEN);
      await page.locator("#signin button[type=submit]").click();
    }
    await page.locator("#schedules").first().waitFor();
    await page.evaluate(() => sessionStorage.removeItem("steadfast.seen"));
    for (const hash of ["#/runs", "#/approvals", "#/schedules"]) {
      const counts = page.waitForResponse((r) => new URL(r.url()).pathname === "/demo/counts");
      await visit(hash);
      assert.equal((await counts).status(), 204, hash);
      await page.waitForTimeout(100);
      assert.equal(await page.locator("#counts").isHidden(), true, `${hash}: no counters shown`);
      assert.equal(await page.locator("#notice").isHidden(), true, `${hash}: ${await page.locator("#notice").textContent()}`);
    }
  } finally {
    await mf.setOptions(options(CONFIG, Number(new URL(base).port)));
  }
});
