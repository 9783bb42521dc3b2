// Hooks: the live state, add with a script, toggle, remove, the last decisions.
import { act, confirmInPage, el, get, op, table, when } from "../api.js";

let refresh = async () => {};

function row(hook) {
  const box = el("input", { type: "checkbox", checked: Boolean(hook.enabled), dataset: { action: "toggle" },
    "aria-label": `Enabled: ${hook.id}` });
  box.addEventListener("change", () => act(`${hook.id}: ${box.checked ? "enabled" : "disabled"}`,
    () => op("tf_hook_set", { id: hook.id, action: box.checked ? "enable" : "disable" }), refresh));
  const remove = el("button", { type: "button", className: "danger", dataset: { action: "remove" },
    "aria-label": `Remove ${hook.id}`, on: { click: async () => {
      if (!(await confirmInPage(`Remove the hook ${hook.id}? Its script file stays.`))) return;
      await act(`${hook.id}: removed`, () => op("tf_hook_set", { id: hook.id, action: "remove" }), refresh);
    } } }, "Remove");
  const last = (hook.last || []).map((d) => el("div", {}, el("span", { className: "muted" }, when(d.ts)), " ",
    d.decision, " ", el("code", {}, d.tool ?? ""), d.reason ? ` — ${d.reason}` : ""));
  return el("tr", { dataset: { hook: hook.id } },
    el("td", {}, el("code", {}, hook.id), hook.description ? el("div", { className: "muted" }, hook.description) : null),
    el("td", {}, hook.event), el("td", {}, el("code", {}, hook.matcher || "(every tool)")),
    el("td", {}, el("code", {}, hook.url || hook.command || "")), el("td", {}, box), el("td", {}, last),
    el("td", {}, remove));
}

async function add(event) {
  event.preventDefault();
  const f = event.target.elements;
  const args = { id: f.id.value, event: f.event.value };
  for (const field of ["matcher", "script", "scriptText", "command", "url", "description"]) {
    if (f[field].value !== "") args[field] = f[field].value;
  }
  if (f.timeout.value !== "") args.timeout = Number(f.timeout.value);
  if (f.failClosed.checked) args.failClosed = true;
  const done = await act(`${args.id}: added`, () => op("tf_hook_add", args), refresh);
  if (done) event.target.reset();
}

export function setup() {
  document.getElementById("hook-add-form").addEventListener("submit", add);
}

export async function load(again) {
  refresh = again;
  table(document.querySelector("#hooks-table tbody"), (await get("/api/hooks")).hooks.map(row));
}
