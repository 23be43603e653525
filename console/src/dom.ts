// Building the page without ever parsing markup: every string given to `h` becomes a text node, so model and
// tool text (untrusted input) is shown as text, whatever it contains. Nothing in the console uses innerHTML.

export type Child = Node | string | number | boolean | null | undefined | Child[];
type Attr = string | number | boolean | null | undefined | ((e: Event) => void);

/** An element with attributes (`on…` keys are event listeners) and children (strings become text nodes). */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Record<string, Attr> | null = null,
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs ?? {})) {
    if (v === null || v === undefined || v === false) continue;
    if (typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (k === "href" && !String(v).startsWith("#")) throw new Error(`only in-page links are built: ${v}`);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  append(el, children);
  return el;
}

function append(el: Node, children: Child[]): void {
  for (const c of children) {
    if (c === null || c === undefined || c === false || c === true) continue;
    if (Array.isArray(c)) append(el, c);
    else el.appendChild(typeof c === "string" || typeof c === "number" ? document.createTextNode(String(c)) : c);
  }
}

/** JSON, pretty-printed, in a <pre> (as text). */
export function json(v: unknown): HTMLPreElement {
  return h("pre", { class: "json" }, JSON.stringify(v, null, 2));
}

export function time(ms: number | null | undefined): string {
  return typeof ms === "number" ? new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC") : "—";
}

/** The in-page link to a run. */
export function runLink(id: string): HTMLAnchorElement {
  return h("a", { href: `#/runs/${encodeURIComponent(id)}`, class: "run-link" }, id);
}

/**
 * A button that asks again before acting: the first click shows "Really …?" with confirm and cancel buttons.
 */
export function confirmButton(label: string, question: string, act: () => void | Promise<void>, cls = ""): HTMLElement {
  const box = h("span", { class: "confirm" });
  const idle = (): void => {
    box.replaceChildren(h("button", { type: "button", class: cls, onclick: ask }, label));
  };
  const ask = (): void => {
    box.replaceChildren(
      h("span", { class: "question" }, question, " "),
      h("button", { type: "button", class: `${cls} confirm-yes`, onclick: () => void act() }, `Yes, ${label.toLowerCase()}`),
      " ",
      h("button", { type: "button", onclick: idle }, "Cancel"),
    );
  };
  idle();
  return box;
}

/** Replaces `el`'s children (strings become text nodes). */
export function fill(el: Element, ...children: Child[]): void {
  el.replaceChildren();
  append(el, children);
}
