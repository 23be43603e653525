// The operator console: runs, a run's timeline and history, the approvals inbox, fork and compare, sessions and
// schedules. A single page routed by the URL's fragment (#/runs, #/runs/<id>, #/approvals, #/compare/<a>/<b>,
// #/sessions/<id>, #/schedules); every view reads the HTTP API afresh when shown (and on its Refresh button).

import type { ApprovalRecord } from "../../js/src/generated/ApprovalRecord.js";
import type { BreakerView } from "../../js/src/generated/BreakerView.js";
import type { Health } from "../../js/src/generated/Health.js";
import type { Comparison } from "../../js/src/generated/Comparison.js";
import type { Fingerprint } from "../../js/src/generated/Fingerprint.js";
import type { ForkResult } from "../../js/src/generated/ForkResult.js";
import type { ForkPatch } from "../../js/src/generated/ForkPatch.js";
import type { HealRecord } from "../../js/src/generated/HealRecord.js";
import type { HistoryEntry } from "../../js/src/generated/HistoryEntry.js";
import type { Message } from "../../js/src/generated/Message.js";
import type { StorageUsage } from "../../js/src/generated/StorageUsage.js";
import type { NextAttempt } from "../../js/src/generated/NextAttempt.js";
import type { PendingRun } from "../../js/src/generated/PendingRun.js";
import type { Usage } from "../../js/src/generated/Usage.js";
import type { ScheduleStatus } from "../../js/src/generated/ScheduleStatus.js";
import type { SessionTurn } from "../../js/src/generated/SessionTurn.js";
import type { RunResult } from "../../js/src/generated/RunResult.js";
import type { RunView } from "../../js/src/generated/RunView.js";
import type { ChildRun } from "../../js/src/generated/ChildRun.js";
import type { TrajectoryStep } from "../../js/src/generated/TrajectoryStep.js";
import { api, ApiError, seg, token, watch } from "./api.js";
import { confirmButton, fill, h, json, runLink, time, type Child } from "./dom.js";

const main = document.getElementById("main") as HTMLElement;
const notice = document.getElementById("notice") as HTMLElement;
const nav = document.getElementById("nav") as HTMLElement;
const counts = document.getElementById("counts") as HTMLElement;
const signOut = document.getElementById("sign-out") as HTMLButtonElement;

/** The watch of the run on screen (stopped when the page changes). */
let watching: AbortController | null = null;

function stopWatching(): void {
  watching?.abort();
  watching = null;
}

// ---------- errors ----------

function describe(e: unknown): string {
  if (e instanceof ApiError) return `${e.code}: ${e.message}`;
  return e instanceof Error ? e.message : String(e);
}

function showNotice(text: string | null): void {
  notice.hidden = text === null;
  notice.textContent = text ?? "";
}

/** Runs a view's work; a refused token sends the operator back to sign in, any other error is shown. */
async function guarded(work: () => Promise<void>): Promise<void> {
  try {
    await work();
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) {
      token.clear();
      renderSignIn("The Worker refused the stored token (STEADFAST_UNAUTHORIZED). Sign in again.");
      return;
    }
    showNotice(describe(e));
  }
}

// ---------- sign in ----------

function renderSignIn(message: string | null = null): void {
  nav.hidden = true;
  counts.hidden = true;
  signOut.hidden = true;
  const input = h("input", { type: "password", id: "token", autocomplete: "off", placeholder: "STEADFAST_TOKEN" });
  const status = h("p", { id: "signin-message", class: message ? "error" : "muted", role: "status" }, message);
  const form = h(
    "form",
    { class: "signin", id: "signin" },
    h("h2", null, "Sign in"),
    h(
      "p",
      { class: "muted" },
      "The API token (STEADFAST_TOKEN; locally in .dev.vars, printed by ./scripts/dev). It is kept in this tab's " +
        "session storage only and sent in the Authorization header.",
    ),
    h("label", null, "Token ", input),
    h("button", { type: "submit" }, "Sign in"),
    status,
  );
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const t = input.value.trim();
    if (!t) {
      status.className = "error";
      status.textContent = "Enter the token.";
      return;
    }
    status.className = "muted";
    status.textContent = "Checking…";
    api<unknown>("GET", "/runs", undefined, t).then(
      () => {
        token.set(t);
        showNotice(null);
        if (!location.hash || location.hash === "#/") location.hash = "#/runs";
        route();
      },
      (e: unknown) => {
        status.className = "error";
        if (e instanceof ApiError && e.status === 401) {
          status.textContent = "Wrong token: the Worker refused it (STEADFAST_UNAUTHORIZED). Check STEADFAST_TOKEN.";
        } else if (e instanceof ApiError && e.code === "STEADFAST_AUTH_NOT_CONFIGURED") {
          status.textContent = `The Worker has no token configured: ${e.message}`;
        } else {
          status.textContent = `Sign-in failed: ${describe(e)}`;
        }
      },
    );
  });
  fill(main, form);
  input.focus();
}

signOut.addEventListener("click", () => {
  token.clear();
  showNotice(null);
  renderSignIn();
});

// ---------- runs seen in this tab (so finished ones stay visible after they leave the pending list) ----------

const SEEN_KEY = "steadfast.seen";

function seen(): string[] {
  try {
    const v: unknown = JSON.parse(sessionStorage.getItem(SEEN_KEY) ?? "[]");
    return Array.isArray(v) ? v.filter((x): x is string => typeof x === "string") : [];
  } catch {
    return [];
  }
}

function remember(ids: string[]): void {
  const all = [...ids, ...seen().filter((x) => !ids.includes(x))].slice(0, 30);
  sessionStorage.setItem(SEEN_KEY, JSON.stringify(all));
}

// ---------- header: the demo tools' effect counters, when the Worker has them ----------

async function refreshCounts(): Promise<void> {
  // `204` (null): no demo tools in this configuration, no counters to show.
  const c = await api<Record<string, number> | null>("GET", "/demo/counts");
  counts.hidden = c === null;
  if (c) counts.textContent = `demo effects: charges ${c.charges ?? 0} · shipments ${c.shipments ?? 0} · refunds ${c.refunds ?? 0}`;
}

// ---------- small renderers ----------

function statusBadge(status: string): HTMLElement {
  const cls = status === "finished" ? "badge good status" : "badge status";
  return h("span", { class: cls }, status);
}

function errorText(e: { code: string; message: string } | null | undefined): Child {
  return e ? h("span", { class: "error last-error" }, h("code", null, e.code), " ", e.message) : h("span", { class: "muted" }, "—");
}

/** Reads the counters and the view again. */
function refreshButton(again: () => Promise<void>): HTMLButtonElement {
  const onclick = (): void =>
    void guarded(async () => {
      await refreshCounts();
      await again();
    });
  return h("button", { type: "button", class: "refresh", onclick }, "Refresh");
}

// ---------- runs ----------

/** `GET /sweep`: the recovery sweep's stored state. */
type SweepView = {
  breaker: "open" | "closed";
  providerFailures: number;
  outage: { since: number; probes: number; nextProbeAt: number } | null;
  cursor: string | null;
  lastOutageEnd: number | null;
  lastTickAt?: number;
};

/** The circuit breakers per dependency the answering isolate holds (`GET /health`; the sweep brings it those
 * other isolates found open). */
function breakersPanel(mine: BreakerView[]): HTMLElement {
  const rows = mine.map((b): [string, string] => [b.dependency, b.until !== undefined ? `${b.state} until ${time(b.until)}` : b.state]);
  if (rows.length === 0) return h("p", { id: "breakers", class: "muted" }, "Circuit breakers: none has opened (or none is configured).");
  return h(
    "p",
    { id: "breakers", class: rows.some(([, s]) => !s.startsWith("closed")) ? "error" : "muted" },
    "Circuit breakers: ",
    ...rows.flatMap(([dependency, state], i) => [i > 0 ? " · " : null, h("strong", { "data-dependency": dependency }, dependency), ` ${state}`]),
  );
}

function sweepPanel(s: SweepView): HTMLElement {
  return h(
    "p",
    { id: "sweep", class: s.breaker === "open" ? "error" : "muted" },
    "Recovery sweep: outage breaker ",
    h("strong", { id: "sweep-breaker" }, s.breaker),
    s.outage ? ` since ${time(s.outage.since)}, ${s.outage.probes} failed probes, next probe ${time(s.outage.nextProbeAt)}` : null,
    ` · provider failures in a row: ${s.providerFailures} · last run examined: ${s.cursor ?? "none"}`,
    s.lastOutageEnd !== null ? ` · last outage ended ${time(s.lastOutageEnd)}` : null,
    " · ",
    h(
      "span",
      { id: "sweep-tick" },
      s.lastTickAt === undefined ? "no tick recorded yet" : `last tick recorded ${time(s.lastTickAt)} (an idle tick is recorded at most every 10 minutes)`,
    ),
  );
}

/** What a listed run belongs to: a session (linked to its turns) or a schedule (linked to the schedules). */
function kindBadge(r: PendingRun): Child {
  if (r.kind === "session" && r.ownerId) {
    return h("a", { class: "badge kind", href: `#/sessions/${encodeURIComponent(r.ownerId)}` }, `turn of session ${r.ownerId}`);
  }
  if (r.kind === "schedule" && r.ownerId) {
    return h("a", { class: "badge kind", href: "#/schedules" }, `fire of schedule ${r.ownerId}`);
  }
  return null;
}

/** The sweep's plan for a run (`next` in `GET /runs`), in words. */
function nextText(n: NextAttempt | undefined): Child {
  if (!n) return "—";
  const words: Record<string, string> = {
    "next-tick": "next sweep tick",
    backoff: "backing off until",
    outage: "waits on the outage breaker; next probe",
    quarantine: "attempt cap: quarantined by the next tick",
    "diagnosis-fork": "attempt cap: a diagnosis fork next tick",
    quarantined: "not retried (resume by hand)",
    "awaiting-person": "waits for a person",
    "not-retryable": "not retried: fix the cause, then resume",
  };
  return h("span", { "data-plan": n.plan }, words[n.plan] ?? n.plan, n.at !== undefined ? ` ${time(n.at)}` : null);
}

async function renderRuns(filter: string): Promise<void> {
  const q = filter ? `?status=${encodeURIComponent(filter)}` : "";
  const [{ runs }, sweep, health] = await Promise.all([
    api<{ runs: (PendingRun & { next: NextAttempt })[] }>("GET", `/runs${q}`),
    api<SweepView>("GET", "/sweep"),
    api<Health>("GET", "/health"),
  ]);
  remember(runs.map((r) => r.runId));
  const select = h(
    "select",
    { id: "status-filter", onchange: (e: Event) => void guarded(() => renderRuns((e.target as HTMLSelectElement).value)) },
    ...[
      ["", "all unfinished"],
      ["in-progress", "in progress"],
      ["awaiting-approval", "awaiting approval"],
    ].map(([v, label]) => h("option", { value: v, selected: v === filter }, label)),
  );
  const open = h("input", { id: "open-run", placeholder: "run id" });
  const openForm = h("form", { class: "row" }, open, h("button", { type: "submit" }, "Open run"));
  openForm.addEventListener("submit", (ev) => {
    ev.preventDefault();
    if (open.value.trim()) location.hash = `#/runs/${encodeURIComponent(open.value.trim())}`;
  });
  const pendingIds = new Set(runs.map((r) => r.runId));
  const others = seen().filter((id) => !pendingIds.has(id));
  const views = await Promise.all(
    others.map((id) =>
      api<RunView>("GET", `/runs/${seg(id)}`).then(
        (v): [string, RunView | null, string | null] => [id, v, null],
        (e: unknown): [string, RunView | null, string | null] => {
          if (e instanceof ApiError && e.status === 401) throw e;
          return [id, null, e instanceof ApiError && e.status === 404 ? "deleted" : describe(e)];
        },
      ),
    ),
  );
  fill(
    main,
    h("h2", null, "Runs"),
    h("div", { class: "row" }, h("label", null, "Show ", select), refreshButton(() => renderRuns(filter)), openForm),
    sweepPanel(sweep),
    breakersPanel(health.breakers ?? []),
    h("h3", null, "Unfinished"),
    runs.length === 0
      ? h("p", { class: "muted", id: "no-runs" }, "No unfinished runs.")
      : h(
          "table",
          { id: "runs" },
          h("thead", null, h("tr", null, ...["run", "status", "step", "last error", "attempts", "next attempt", "saved"].map((t) => h("th", null, t)))),
          h(
            "tbody",
            null,
            ...runs.map((r) =>
              h(
                "tr",
                { "data-run": r.runId },
                h("td", null, runLink(r.runId), r.healOf ? h("span", { class: "badge" }, `diagnosis fork of ${r.healOf}`) : null, kindBadge(r)),
                h("td", null, statusBadge(r.status), r.approvalId ? h("span", { class: "muted" }, ` ${r.approvalId}`) : null),
                h("td", null, r.step),
                h("td", null, errorText(r.lastError)),
                h("td", null, r.attempts),
                h("td", { class: "next" }, nextText(r.next), r.quarantined ? h("span", { class: "badge bad" }, "quarantined") : null),
                h("td", null, time(r.savedAt)),
              ),
            ),
          ),
        ),
    views.length === 0
      ? null
      : [
          h("h3", null, "Seen in this tab, no longer unfinished"),
          h(
            "table",
            { id: "seen-runs" },
            h("thead", null, h("tr", null, ...["run", "status", "finish reason", "step", "last error", "saved"].map((t) => h("th", null, t)))),
            h(
              "tbody",
              null,
              ...views.map(([id, v, why]) =>
                h(
                  "tr",
                  { "data-run": id },
                  h("td", null, v ? runLink(id) : id),
                  v
                    ? [
                        h("td", null, statusBadge(v.status)),
                        h("td", null, v.finishReason ?? "—"),
                        h("td", null, v.step),
                        h("td", null, errorText(v.lastError)),
                        h("td", null, time(v.savedAt)),
                      ]
                    : h("td", { colspan: "5", class: "muted" }, why),
                ),
              ),
            ),
          ),
        ],
  );
}

// ---------- one run: summary, actions, timeline, history, fork ----------

/** What self-healing did about one call, as the run recorded it. */
function healNotes(records: HealRecord[]): HTMLElement[] {
  return records.map((r) =>
    h(
      "div",
      { class: "heal", "data-action": r.action },
      h("span", { class: "badge bad" }, `self-healing: ${r.action}`),
      h("span", null, ` ${r.reason} (${r.count}×, step ${r.step})`),
    ),
  );
}

function timeline(messages: Message[], heal: HealRecord[] = []): HTMLElement {
  let turn = 0;
  const answered = new Set(messages.flatMap((m) => (m.role === "tool" ? [m.toolCallId] : [])));
  // Actions on a call without a result (a stop) come after the transcript.
  const unplaced = heal.filter((r) => !answered.has(r.toolCallId));
  return h(
    "ol",
    { class: "timeline", id: "timeline" },
    ...messages.map((m) => {
      switch (m.role) {
        case "system":
          return h("li", { class: "system" }, h("span", { class: "who" }, "instructions"), h("pre", null, m.content));
        case "user":
          return h("li", { class: "user" }, h("span", { class: "who" }, "input"), h("pre", null, m.content));
        case "assistant":
          turn += 1;
          return h(
            "li",
            { class: "assistant" },
            h("span", { class: "who" }, `model turn ${turn}`),
            // A fallback model answered this turn (the agent's own failed past its retries).
            m.model ? h("span", { class: "fallback" }, ` answered by the fallback ${m.model}`) : null,
            m.usage ? h("span", { class: "muted usage" }, ` ${usageText(m.usage)}`) : null,
            m.content ? h("pre", { class: "text" }, m.content) : null,
            ...(m.toolCalls ?? []).map((c) =>
              h(
                "div",
                { class: "call" },
                h("span", { class: "badge" }, "tool call"),
                h("strong", null, c.name),
                h("span", { class: "muted" }, ` ${c.id}`),
                c.invalid ? h("span", { class: "error" }, ` unusable arguments: ${c.invalid}`) : null,
                json(c.args),
              ),
            ),
          );
        case "tool":
          return h(
            "li",
            { class: m.isError ? "tool failed" : "tool", "data-call": m.toolCallId },
            h("span", { class: "who" }, `result of ${m.name}`),
            h("span", { class: "muted" }, `${m.toolCallId} `),
            h("span", { class: m.kind === "execution" ? "badge" : "badge bad" }, m.kind),
            m.isError ? h("span", { class: "badge bad" }, "error") : null,
            h("pre", { class: "tool-result" }, m.content),
            ...healNotes(heal.filter((r) => r.toolCallId === m.toolCallId)),
          );
        default:
          return h("li", null, json(m));
      }
    }),
    unplaced.length ? h("li", { class: "tool failed" }, h("span", { class: "who" }, "self-healing"), ...healNotes(unplaced)) : null,
  );
}

function forkForm(runId: string, entry: HistoryEntry, out: HTMLElement): HTMLElement {
  const calls = entry.checkpoint.messages.flatMap((m) => (m.role === "assistant" ? (m.toolCalls ?? []) : []));
  const kind = h(
    "select",
    { id: "fork-patch" },
    h("option", { value: "none" }, "no change"),
    h("option", { value: "append" }, "append input"),
    calls.length ? h("option", { value: "tool" }, "replace a tool result") : null,
  );
  const callSel = h("select", { id: "fork-call" }, ...calls.map((c) => h("option", { value: c.id }, `${c.name} (${c.id})`)));
  const text = h("textarea", { id: "fork-text", placeholder: "the input to append, or the new tool result" });
  const newId = h("input", { id: "fork-new-id", placeholder: `default: ${runId}.fork-<n>` });
  const form = h(
    "form",
    { class: "card", id: "fork-form" },
    h("strong", null, `Fork ${runId} from step ${entry.step}`),
    h("label", null, "Change ", kind),
    h("label", null, "Tool call ", callSel),
    h("label", null, "Text ", text),
    h("label", null, "New run id ", newId),
    h("button", { type: "submit" }, "Create fork"),
  );
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const patch: ForkPatch = {};
    if (kind.value === "append") patch.appendInput = text.value;
    if (kind.value === "tool") patch.toolResult = { toolCallId: callSel.value, result: text.value };
    const body: { fromStep: number; patch: ForkPatch; newId?: string } = { fromStep: entry.step, patch };
    if (newId.value.trim()) body.newId = newId.value.trim();
    void guarded(async () => {
      try {
        const f = await api<ForkResult>("POST", `/runs/${seg(runId)}/fork`, body);
        remember([f.runId]);
        out.replaceChildren(
          h(
            "div",
            { class: "result", id: "fork-result" },
            `Forked as `,
            runLink(f.runId),
            ` from step ${f.step} (in progress: resume it to run it). `,
            h("a", { href: `#/compare/${seg(runId)}/${seg(f.runId)}`, id: "compare-fork" }, `Compare with ${runId}`),
          ),
        );
      } catch (e) {
        if (e instanceof ApiError && e.status === 401) throw e;
        out.replaceChildren(h("div", { class: "result error", id: "fork-result" }, `Fork refused: ${describe(e)}`));
      }
    });
  });
  return form;
}

/**
 * What changed in the agent between two recorded states (a resume by a changed agent records its fingerprint:
 * the drift the `agent.drift` event reported live), or nothing.
 */
function drift(before: Fingerprint | null | undefined, after: Fingerprint | null | undefined): string | null {
  if (!before || !after || before.hash === after.hash) return null;
  const parts: string[] = [];
  if (before.model !== after.model) parts.push(`model ${before.model} → ${after.model}`);
  const added = Object.keys(after.tools).filter((t) => !(t in before.tools));
  const removed = Object.keys(before.tools).filter((t) => !(t in after.tools));
  const changed = Object.keys(after.tools).filter((t) => t in before.tools && before.tools[t] !== after.tools[t]);
  if (added.length) parts.push(`tools added: ${added.join(", ")}`);
  if (removed.length) parts.push(`tools removed: ${removed.join(", ")}`);
  if (changed.length) parts.push(`schemas changed: ${changed.join(", ")}`);
  if (before.instructions !== after.instructions) parts.push("instructions changed");
  return `agent changed: ${parts.join("; ") || "fingerprint"}`;
}

/**
 * Live updates of an unfinished run on screen: watches it from the newest position shown; each new journal
 * entry redraws the page (which watches again from there), live-only events (a call starting, the model's
 * text as it streams) show on the line above the timeline.
 */
function watchRun(id: string, after: number): void {
  stopWatching();
  const ctl = new AbortController();
  watching = ctl;
  const here = location.hash;
  let redrawn = false;
  const redraw = (): void => {
    if (redrawn || ctl.signal.aborted || location.hash !== here) return;
    redrawn = true;
    void guarded(() => renderRun(id));
  };
  const live = (text: string): void => {
    const line = document.getElementById("live");
    if (line) line.textContent = text;
  };
  watch(`/runs/${seg(id)}/events`, String(after), ctl.signal, (e) => {
    if (e.type === "tool.start") live(`Running ${String(e.name)}…`);
    else if (e.type === "text.delta") live(`The model is writing…`);
    else if (e.type === "heal.action") live(`Self-healing: ${String(e.action)} on ${String(e.tool)} (${String(e.reason)})`);
    else if (e.type === "agent.drift") live("The agent resuming this run differs from the one that started it.");
    else if (e.type === "wait.start") live(`Waiting for ${waitWhat(String(e.kind), e.question as string | undefined, e.dueAt as number | undefined)}`);
    else if (e.type === "wait.done") live(`The wait is over (${String(e.by)}).`);
  }, (position) => {
    if (Number.parseInt(position, 10) > after || position.endsWith(".done")) redraw();
  })
    .then(redraw)
    .catch((e: unknown) => {
      if (!ctl.signal.aborted) live(`Live updates stopped: ${describe(e)}`);
    });
}

/**
 * The tree of a run's sub-agent calls: each child run (its sub-agent, status and the lead's call), with its own
 * children below it, read from each child's `GET /runs/{id}` (at most `depth` levels; the API nests at most three).
 */
async function childTree(children: ChildRun[], depth: number): Promise<HTMLElement> {
  const items = await Promise.all(
    children.map(async (c) => {
      const below =
        c.status !== null && depth > 1
          ? await api<RunView>("GET", `/runs/${seg(c.runId)}`).then(
              (v) => (v.children.length ? childTree(v.children, depth - 1) : null),
              // A child gone (deleted) or unreadable: shown without its subtree.
              () => null,
            )
          : null;
      return h(
        "li",
        { "data-run": c.runId },
        h("span", { class: "sub-name" }, c.name),
        " ",
        c.status === null ? h("span", { class: "badge status" }, "not started") : statusBadge(c.status),
        " ",
        runLink(c.runId),
        h("span", { class: "muted" }, ` (call ${c.toolCallId}${c.usage ? `; ${usageText(c.usage)}` : ""})`),
        below,
      );
    }),
  );
  return h("ul", { class: "children" }, ...items);
}

async function renderRun(id: string, said: HTMLElement | null = null): Promise<void> {
  const [run, history] = await Promise.all([
    api<RunView>("GET", `/runs/${seg(id)}`),
    api<HistoryEntry[]>("GET", `/runs/${seg(id)}/history?limit=50`),
  ]);
  remember([id]);
  const children = run.children.length ? await childTree(run.children, 3) : null;
  const actionOut = h("div", { id: "action-result" }, said);
  const forkOut = h("div", { id: "fork-out" });
  const resume = (): Promise<void> =>
    guarded(async () => {
      let out: HTMLElement;
      try {
        const r = await api<RunResult | { resumed: false; reason: string }>("POST", `/runs/${seg(id)}/resume`);
        out = h(
          "div",
          { class: "result ok" },
          "resumed" in r
            ? `Nothing to resume: ${r.reason}.`
            : `Resumed: ${r.status}${r.finishReason ? ` (${r.finishReason})` : ""}. ${r.text}`,
        );
      } catch (e) {
        if (e instanceof ApiError && e.status === 401) throw e;
        out = h("div", { class: "result error" }, `Resume failed: ${describe(e)}`);
      }
      // The run changed either way (a failed attempt is recorded on it): show its new state with the outcome.
      await refreshCounts();
      await renderRun(id, out);
    });
  const del = (): Promise<void> =>
    guarded(async () => {
      try {
        await api<unknown>("DELETE", `/runs/${seg(id)}`);
      } catch (e) {
        if (e instanceof ApiError && e.status === 401) throw e;
        actionOut.replaceChildren(h("div", { class: "result error" }, `Delete failed: ${describe(e)}`));
        return;
      }
      fill(main, h("h2", null, id), h("p", { class: "ok", id: "deleted" }, `Run ${id} was deleted.`), h("a", { href: "#/runs" }, "Back to runs"));
    });
  const turn = /^([A-Za-z0-9_-]{1,128})\.turn-([1-9][0-9]*)$/.exec(id);
  fill(
    main,
    h("h2", null, "Run ", h("span", { id: "run-id" }, id), " ", statusBadge(run.status)),
    turn ? h("p", null, `Turn ${turn[2]} of session `, h("a", { href: `#/sessions/${encodeURIComponent(turn[1])}`, id: "run-session" }, turn[1])) : null,
    run.parentRunId
      ? h("p", null, "Sub-agent run of ", h("a", { href: `#/runs/${encodeURIComponent(run.parentRunId)}`, id: "run-parent" }, run.parentRunId))
      : null,
    h(
      "div",
      { class: "row" },
      refreshButton(() => renderRun(id)),
      run.status !== "finished" ? confirmButton("Resume", `Resume ${id} now?`, resume) : null,
      confirmButton("Delete", `Delete ${id} and its history?`, del, "danger"),
    ),
    actionOut,
    h(
      "dl",
      { class: "summary", id: "run-summary" },
      h("dt", null, "status"),
      h("dd", { id: "run-status" }, run.status),
      h("dt", null, "finish reason"),
      h("dd", null, run.finishReason ?? "—"),
      h("dt", null, "step"),
      h("dd", null, run.step),
      h("dt", null, "usage"),
      h("dd", null, usageText(run.usage)),
      run.usage.storage ? h("dt", null, "storage") : null,
      run.usage.storage ? h("dd", { id: "run-storage" }, storageText(run.usage.storage)) : null,
      run.delegatedInFlight ? h("dt", null, "children so far") : null,
      run.delegatedInFlight
        ? h("dd", { id: "run-delegated" }, `${usageText(run.delegatedInFlight)} (not yet in usage)`)
        : null,
      h("dt", null, "last error"),
      h("dd", { id: "run-error" }, errorText(run.lastError)),
      h("dt", null, "attempts"),
      h("dd", null, run.attempts),
      h("dt", null, "quarantined"),
      h("dd", null, run.quarantined ? "yes (the sweep gave up; resume by hand)" : "no"),
      h("dt", null, "approvals"),
      h("dd", null, run.approvalIds.length ? [run.approvalIds.join(", "), " — ", h("a", { href: "#/approvals" }, "inbox")] : "—"),
      h("dt", null, "agent"),
      h("dd", null, run.fingerprint ? `${run.fingerprint.model} · ${Object.keys(run.fingerprint.tools).join(", ") || "no tools"} · ${run.fingerprint.hash.slice(0, 12)}` : "—"),
      h("dt", null, "saved"),
      h("dd", null, time(run.savedAt)),
    ),
    run.businessState !== null ? [h("h3", null, "Business state"), json(run.businessState)] : null,
    children ? [h("h3", null, "Sub-agents"), h("div", { id: "children" }, children)] : null,
    h("h3", null, "Timeline"),
    run.status === "in-progress" ? h("p", { id: "live", class: "live" }, "Watching for new steps…") : null,
    timeline(run.messages, run.healActions),
    h("h3", null, "History"),
    h(
      "table",
      { id: "history" },
      h("thead", null, h("tr", null, ...["seq", "step", "status", "saved", "agent", ""].map((t) => h("th", null, t)))),
      h(
        "tbody",
        null,
        // A fork starts from the newest kept entry of its step (the API's rule): the button is on that one.
        ...history.map((e, i) =>
          h(
            "tr",
            { "data-step": e.step },
            h("td", null, e.seq),
            h("td", null, e.step),
            h("td", null, e.status),
            h("td", null, time(e.savedAt)),
            h("td", { class: "drift" }, drift(history[i + 1]?.checkpoint.fingerprint, e.checkpoint.fingerprint)),
            h(
              "td",
              null,
              history.findIndex((x) => x.step === e.step) === i
                ? h(
                    "button",
                    { type: "button", class: "fork", "data-step": e.step, onclick: () => forkOut.replaceChildren(forkForm(id, e, forkOut)) },
                    `Fork from step ${e.step}`,
                  )
                : null,
            ),
          ),
        ),
      ),
    ),
    forkOut,
  );
  if (run.status === "in-progress") watchRun(id, history[0]?.seq ?? 0);
}

// ---------- approvals inbox ----------

/** An approval record as `GET /approvals` lists it, with a tool's wait's fields (kind, question, choices, dueAt;
 * src/core/approval.rs). */
type WaitRecord = ApprovalRecord & {
  kind?: "approval" | "question" | "event" | "timer";
  question?: string;
  choices?: string[];
  dueAt?: number;
};

/** What a tool's wait waits for, in words: a question, an event (until its deadline), a time. */
function waitWhat(kind: string, question: string | undefined, dueAt: number | undefined): string {
  if (kind === "question") return `an answer: ${question ?? ""}`;
  if (kind === "event") return dueAt ? `an event until ${time(dueAt)}` : "an event (no deadline)";
  return `a timer: ${time(dueAt)}`;
}

/** A tool's wait in the inbox: a question gets an answer form (its choices as buttons, else a text field); an
 * event or a timer shows when it resolves by itself. */
function waitCard(a: WaitRecord, answer: (a: WaitRecord, value: string, note: string) => () => void): HTMLElement {
  const kind = a.kind ?? "approval";
  const note = h("input", { class: "note", placeholder: "note (optional)" });
  const head = h(
    "div",
    null,
    h("strong", { class: "wait-kind" }, kind),
    ` ${a.toolCall.name} in run `,
    runLink(a.runId),
    h("span", { class: "muted" }, ` · step ${a.step} · ${a.id} · since ${time(a.createdAt)}`),
  );
  let body: HTMLElement;
  if (kind === "question") {
    const choices = a.choices ?? [];
    const free = h("input", { class: "answer", placeholder: "your answer" });
    body = h(
      "div",
      null,
      h("p", { class: "question" }, a.question ?? ""),
      h(
        "div",
        { class: "row" },
        ...(choices.length
          ? choices.map((c) => h("button", { type: "button", class: "choice", "data-choice": c, onclick: () => answer(a, c, note.value.trim())() }, c))
          : [free, h("button", { type: "button", class: "send-answer", onclick: () => answer(a, free.value, note.value.trim())() }, "Answer")]),
        note,
      ),
    );
  } else {
    body = h("p", { class: "wait-due" }, `Waits for ${waitWhat(kind, undefined, a.dueAt)}.`);
  }
  return h("div", { class: "card approval wait", "data-approval": a.id, "data-run": a.runId, "data-kind": kind }, head, body);
}

async function renderApprovals(lastResult: HTMLElement | null = null): Promise<void> {
  const list = await api<WaitRecord[]>("GET", "/approvals");
  const resolve = (a: ApprovalRecord, approved: boolean, note: string, answer?: string) => (): void =>
    void guarded(async () => {
      let out: HTMLElement;
      try {
        const body = answer !== undefined ? { answer } : { approved };
        const r = await api<RunResult>("POST", `/approvals/${seg(a.id)}`, note ? { ...body, note } : body);
        remember([r.runId]);
        out = h(
          "div",
          { class: "result ok", id: "resolve-result" },
          `${answer !== undefined ? `Answered "${answer}" to` : approved ? "Approved" : "Rejected"} ${a.toolCall.name} for `,
          runLink(r.runId),
          `: the run is ${r.status}${r.finishReason ? ` (${r.finishReason})` : ""}. `,
          r.text ? h("q", null, r.text) : null,
        );
      } catch (e) {
        if (e instanceof ApiError && e.status === 401) throw e;
        out = h("div", { class: "result error", id: "resolve-result" }, `Resolving ${a.id} failed: ${describe(e)}`);
      }
      await refreshCounts();
      await renderApprovals(out);
    });
  fill(
    main,
    h("h2", null, "Approvals"),
    h("div", { class: "row" }, refreshButton(() => renderApprovals())),
    lastResult,
    list.length === 0
      ? h("p", { class: "muted", id: "no-approvals" }, "No pending approvals or waits.")
      : h(
          "div",
          { id: "approvals" },
          ...list.map((a) => {
            if (a.kind && a.kind !== "approval") return waitCard(a, (w, value, note) => resolve(w, true, note, value));
            const note = h("input", { class: "note", placeholder: "note (optional)" });
            return h(
              "div",
              { class: "card approval", "data-approval": a.id, "data-run": a.runId },
              h("div", null, h("strong", null, a.toolCall.name), " in run ", runLink(a.runId), h("span", { class: "muted" }, ` · step ${a.step} · ${a.id} · asked ${time(a.createdAt)}`)),
              json(a.toolCall.args),
              h(
                "div",
                { class: "row" },
                note,
                h("button", { type: "button", class: "approve", onclick: () => resolve(a, true, note.value.trim())() }, "Approve"),
                h("button", { type: "button", class: "reject danger", onclick: () => resolve(a, false, note.value.trim())() }, "Reject"),
              ),
            );
          }),
        ),
  );
}

// ---------- compare ----------

function stepCell(s: TrajectoryStep | undefined): HTMLElement {
  if (!s) return h("td", { class: "muted" }, "—");
  return h(
    "td",
    null,
    s.text ? h("pre", { class: "text" }, s.text) : null,
    ...s.toolCalls.map((c) =>
      h(
        "div",
        { class: "call" },
        h("strong", null, c.name),
        json(c.args),
        c.result === null
          ? h("span", { class: "muted" }, "no result")
          : h("pre", { class: c.isError ? "tool-result error" : "tool-result" }, c.result),
      ),
    ),
  );
}

async function renderCompare(a: string, b: string): Promise<void> {
  const ia = h("input", { id: "compare-a", placeholder: "run a", value: a });
  const ib = h("input", { id: "compare-b", placeholder: "run b", value: b });
  const form = h("form", { class: "row" }, ia, ib, h("button", { type: "submit" }, "Compare"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    location.hash = `#/compare/${seg(ia.value.trim())}/${seg(ib.value.trim())}`;
  });
  if (!a || !b) {
    fill(main, h("h2", null, "Compare two runs"), form);
    return;
  }
  const c = await api<Comparison>("GET", `/compare/${seg(a)}/${seg(b)}`);
  const n = Math.max(c.a.length, c.b.length);
  const d = c.drift;
  const drift: Child[] = [
    ...d.toolOrder.map((t) => h("li", null, `step ${t.step}: tools ${t.a.join(", ") || "none"} → ${t.b.join(", ") || "none"}`)),
    ...d.arguments.map((x) => h("li", null, `step ${x.step}: ${x.tool} #${x.index} arguments ${JSON.stringify(x.a)} → ${JSON.stringify(x.b)}`)),
    d.stepCount ? h("li", null, `steps: ${d.stepCount.a} → ${d.stepCount.b}`) : null,
    d.finishReason ? h("li", null, `finish reason: ${d.finishReason.a ?? "none"} → ${d.finishReason.b ?? "none"}`) : null,
  ].filter(Boolean);
  fill(
    main,
    h("h2", null, "Compare two runs"),
    form,
    h(
      "p",
      { id: "diverged" },
      c.divergedAt === null ? "The two runs took the same steps." : `First divergent step: ${c.divergedAt}`,
    ),
    h("h3", null, "Drift"),
    drift.length ? h("ul", { id: "drift" }, ...drift) : h("p", { class: "muted", id: "drift" }, "No drift in tool order, arguments, step count or finish reason."),
    h(
      "table",
      { id: "comparison" },
      h("thead", null, h("tr", null, h("th", null, "step"), h("th", null, runLink(a)), h("th", null, runLink(b)))),
      h(
        "tbody",
        null,
        ...Array.from({ length: n }, (_, i) =>
          h(
            "tr",
            { class: c.divergedAt === i + 1 ? "diverged" : null, "data-step": i + 1 },
            h("td", null, i + 1, c.divergedAt === i + 1 ? h("span", { class: "badge bad" }, "diverges") : null),
            stepCell(c.a[i]),
            stepCell(c.b[i]),
          ),
        ),
      ),
    ),
  );
}

// ---------- a session's turns ----------

async function renderSession(id: string): Promise<void> {
  const { turns } = await api<{ sessionId: string; turns: SessionTurn[] }>("GET", `/sessions/${seg(id)}?limit=100`);
  remember(turns.map((t) => t.runId));
  const text = (m: Message): string => ("content" in m ? m.content : "");
  fill(
    main,
    h("h2", null, "Session ", h("span", { id: "session-id" }, id)),
    h("div", { class: "row" }, refreshButton(() => renderSession(id))),
    h(
      "table",
      { id: "turns" },
      h("thead", null, h("tr", null, ...["turn", "run", "status", "input", "answer", "steps", "usage", "saved"].map((t) => h("th", null, t)))),
      h(
        "tbody",
        null,
        ...turns.map((t) =>
          h(
            "tr",
            { "data-turn": t.turn },
            h("td", null, t.turn),
            h("td", null, runLink(t.runId)),
            h("td", null, statusBadge(t.status), t.approvalIds?.length ? h("a", { href: "#/approvals", class: "muted" }, " approval pending") : null),
            h("td", null, t.input.map(text).join("\n")),
            h("td", null, t.text || h("span", { class: "muted" }, "—")),
            h("td", null, t.steps),
            h("td", null, `${t.usage.inputTokens} / ${t.usage.outputTokens}${t.usage.costUsd === undefined ? "" : ` · $${t.usage.costUsd}`}`),
            h("td", null, time(t.savedAt)),
          ),
        ),
      ),
    ),
  );
}

// ---------- schedules ----------

async function renderSchedules(): Promise<void> {
  const { schedules } = await api<{ schedules: ScheduleStatus[] }>("GET", "/schedules");
  fill(
    main,
    h("h2", null, "Schedules"),
    h("div", { class: "row" }, refreshButton(renderSchedules)),
    schedules.length === 0
      ? h("p", { class: "muted", id: "no-schedules" }, "No schedules in this configuration (`schedules` in the agent configuration).")
      : h(
          "table",
          { id: "schedules" },
          h("thead", null, h("tr", null, ...["schedule", "cron", "missed fires", "first seen", "latest fire", "its run", "next fire"].map((t) => h("th", null, t)))),
          h(
            "tbody",
            null,
            ...schedules.map((s) =>
              h(
                "tr",
                { "data-schedule": s.schedule.id },
                h("td", null, s.schedule.id),
                h("td", null, h("code", null, s.schedule.cron)),
                h("td", null, s.schedule.missed ?? "run-once"),
                h("td", null, s.since === null ? h("span", { class: "muted" }, "no tick yet") : time(s.since)),
                h("td", null, time(s.lastFireAt)),
                h("td", { class: "last-run" }, s.lastRun
                    ? [runLink(s.lastRun.runId), " ", statusBadge(s.lastRun.status)]
                    : h("span", { class: "muted" }, s.since !== null && s.lastFireAt !== null && s.lastFireAt < s.since ? "not fired: before the schedule was first seen" : "not fired")),
                h("td", null, time(s.nextFireAt)),
              ),
            ),
          ),
        ),
  );
}

// ---------- routing ----------

function route(): void {
  if (!token.get()) {
    renderSignIn();
    return;
  }
  nav.hidden = false;
  signOut.hidden = false;
  showNotice(null);
  stopWatching();
  let parts: string[];
  try {
    parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  } catch {
    parts = ["runs"];
  }
  const [view = "runs"] = parts;
  for (const a of Array.from(nav.querySelectorAll("a"))) {
    a.classList.toggle("current", a.getAttribute("href") === `#/${view || "runs"}`);
  }
  void guarded(async () => {
    await refreshCounts();
    if (view === "runs" && parts[1]) await renderRun(parts[1]);
    else if (view === "approvals") await renderApprovals();
    else if (view === "compare") await renderCompare(parts[1] ?? "", parts[2] ?? "");
    else if (view === "sessions" && parts[1]) await renderSession(parts[1]);
    else if (view === "schedules") await renderSchedules();
    else await renderRuns("");
  });
}

window.addEventListener("hashchange", route);
route();

/** A run's store operations and what they cost (`usage.storage`). */
function storageText(s: StorageUsage): string {
  const kv = `${s.reads} reads, ${s.writes} writes, ${s.deletes} deletes, ${s.lists} lists`;
  const object = s.requests || s.rowsWritten ? `, ${s.requests} object requests, ${s.rowsWritten} rows written` : "";
  return `${kv}${object}, ${s.bytesWritten} bytes written · $${s.costUsd}`;
}

/** Tokens, and what they cost when every price was known (`costUsd` is left out otherwise). */
function usageText(u: Usage): string {
  const tokens = `${u.inputTokens} input / ${u.outputTokens} output tokens`;
  return u.costUsd === undefined ? tokens : `${tokens} · $${u.costUsd}`;
}
