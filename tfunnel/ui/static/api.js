// The admin UI's API client (docs/ui.md) and the few DOM helpers every view uses.
// Every value from the API is text: it goes into the page as text nodes, never as HTML.

// This process's CSRF token, given in the page. A restarted gateway has a new one: the page reads
// it again from its own origin (`renewToken`) before it reconnects.
let token = document.querySelector('meta[name="tfunnel-csrf"]').content;

export async function renewToken() {
  const answer = await fetch("/", { cache: "no-store" });
  if (!answer.ok) return;
  const page = new DOMParser().parseFromString(await answer.text(), "text/html");
  const fresh = page.querySelector('meta[name="tfunnel-csrf"]')?.content;
  if (fresh) token = fresh;
}

export class OperationError extends Error {}

export async function get(path) {
  let answer;
  try {
    answer = await fetch(path, { headers: { accept: "application/json" }, cache: "no-store" });
  } catch (error) {
    throw new OperationError(`the gateway cannot be reached (${error.message})`);
  }
  const body = await answer.json().catch(() => ({ ok: false, error: `HTTP ${answer.status}` }));
  if (!answer.ok) throw new OperationError(body.error || `HTTP ${answer.status}`);
  return body;
}

// Run a management operation; its result, or an OperationError with the operation's own message.
export async function op(name, args) {
  let answer;
  try {
    answer = await fetch(`/api/op/${name}`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-tfunnel-csrf": token },
      body: JSON.stringify(args),
      cache: "no-store",
    });
  } catch (error) {
    throw new OperationError(`the gateway cannot be reached (${error.message})`);
  }
  const body = await answer.json().catch(() => ({ ok: false, error: `HTTP ${answer.status}` }));
  if (!answer.ok || body.ok === false) throw new OperationError(body.error || `HTTP ${answer.status}`);
  return body;
}

export function liveUrl() {
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  return `${scheme}://${location.host}/api/live?csrf=${encodeURIComponent(token)}`;
}

const PROPERTIES = new Set(["className", "textContent", "title", "type", "value", "checked", "disabled",
  "hidden", "name", "open"]);

// el("td", {className: "num", dataset: {tool: "x"}}, "text", child, ...)
export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null) continue;
    if (key === "dataset") Object.assign(node.dataset, value);
    else if (key === "on") for (const [event, fn] of Object.entries(value)) node.addEventListener(event, fn);
    else if (PROPERTIES.has(key)) node[key] = value;
    else node.setAttribute(key, String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function clear(node) {
  while (node.firstChild) node.firstChild.remove();
  return node;
}

export function toast(message) {
  document.getElementById("toast").textContent = message;
}

export function said(message) {
  document.getElementById("toast").textContent = "";
  document.getElementById("status-line").textContent = message;
}

// Run an action from a button or form: its error goes to the toast, its success to the status line.
export async function act(what, fn, refresh) {
  try {
    const result = await fn();
    said(what);
    if (refresh) await refresh();
    return result;
  } catch (error) {
    toast(error.message);
    if (refresh) await refresh().catch(() => {});
    return undefined;
  }
}

// A confirmation inside the page (a <dialog>): resolves true when the person confirms.
export function confirmInPage(question) {
  return new Promise((resolve) => {
    const yes = el("button", { type: "button", className: "danger" }, "Yes");
    const no = el("button", { type: "button" }, "Cancel");
    const dialog = el("dialog", { "aria-label": "Confirm" }, el("p", {}, question), el("p", {}, yes, " ", no));
    const done = (answer) => { dialog.close(); dialog.remove(); resolve(answer); };
    yes.addEventListener("click", () => done(true));
    no.addEventListener("click", () => done(false));
    dialog.addEventListener("cancel", () => done(false));
    document.body.append(dialog);
    dialog.showModal();
    no.focus();
  });
}

export function table(tbody, rows) {
  clear(tbody).append(...rows);
}

export function when(ts) {
  return typeof ts === "string" ? ts.replace("T", " ").replace(/\.\d+Z$|Z$/, "") : "";
}
