// Tools: search, visibility toggles, gate badges, detail and edit, add and remove.
import { act, confirmInPage, el, get, op, table, toast } from "../api.js";

const AXES = [["enabled", "Enabled", "enable", "disable"], ["hot", "Hot", "hot", "unhot"],
  ["hidden", "Hidden", "hide", "unhide"]];
let rows = [];
let refresh = async () => {};

function matches(tool, query) {
  if (!query) return true;
  const text = [tool.id, tool.name, tool.category, tool.kind, tool.mode].join(" ").toLowerCase();
  return query.toLowerCase().split(/\s+/).every((word) => text.includes(word));
}

function badges(tool) {
  const out = [];
  if (tool.pre.length) out.push(el("span", { className: "badge-pre", title: `PreToolUse: ${tool.pre.join(", ")}` }, "Pre"));
  if (tool.post.length) out.push(el("span", { className: "badge-post", title: `PostToolUse: ${tool.post.join(", ")}` }, "Post"));
  return out;
}

function toggle(tool, [axis, label, on, off]) {
  const box = el("input", { type: "checkbox", checked: Boolean(tool[axis]), dataset: { axis },
    "aria-label": `${label}: ${tool.name}` });
  box.addEventListener("change", () => act(`${tool.id}: ${box.checked ? on : off}`,
    () => op("tf_tool_set", { id: tool.id, action: box.checked ? on : off }), refresh));
  return el("td", {}, box);
}

function row(tool) {
  const actions = [];
  if (tool.kind === "local") {
    actions.push(el("button", { type: "button", dataset: { action: "detail" }, "aria-label": `Details of ${tool.name}`,
      on: { click: () => detail(tool.id) } }, "Details"));
    actions.push(el("button", { type: "button", className: "danger", dataset: { action: "remove" },
      "aria-label": `Remove ${tool.name}`, on: { click: () => remove(tool) } }, "Remove"));
  }
  return el("tr", { dataset: { tool: tool.id } },
    el("td", {}, el("code", {}, tool.id), tool.name !== tool.id ? el("div", { className: "muted" }, tool.name) : null),
    el("td", {}, tool.kind), el("td", {}, tool.category || ""), el("td", {}, tool.mode),
    AXES.map((axis) => toggle(tool, axis)),
    el("td", {}, badges(tool)), el("td", {}, el("div", { className: "actions" }, actions)));
}

function render() {
  const query = document.getElementById("tools-search").value.trim();
  table(document.querySelector("#tools-table tbody"), rows.filter((t) => matches(t, query)).map(row));
}

async function remove(tool) {
  if (!(await confirmInPage(`Remove the register tool ${tool.id}? Its script file stays.`))) return;
  await act(`${tool.id}: removed`, () => op("tf_tool_set", { id: tool.id, action: "remove" }), refresh);
}

let editing = null;
async function detail(id) {
  let found;
  try {
    found = await get(`/api/tools/detail?id=${encodeURIComponent(id)}`);
  } catch (error) {
    toast(error.message);
    return;
  }
  editing = { id, entry: found.entry, scriptText: found.scriptText };
  const form = document.getElementById("tool-detail-form");
  document.getElementById("tool-detail-title").textContent = `Tool ${id}`;
  for (const field of ["name", "summary", "category", "mode", "instructions", "timeoutS"]) {
    form.elements[field].value = found.entry[field] ?? (field === "mode" ? "gateway" : "");
  }
  const script = document.getElementById("tool-script");
  const hasScript = found.scriptText !== null;
  script.hidden = !hasScript;
  document.getElementById("tool-script-label").hidden = !hasScript;
  script.value = hasScript ? found.scriptText : "";
  const panel = document.getElementById("tool-detail");
  panel.hidden = false;
  form.elements.name.focus();
}

async function save(event) {
  event.preventDefault();
  if (!editing) return;
  const form = event.target;
  const patch = {};
  for (const field of ["name", "summary", "category", "mode", "instructions", "timeoutS"]) {
    const raw = form.elements[field].value;
    const value = field === "timeoutS" ? (raw === "" ? null : Number(raw)) : raw;
    const before = editing.entry[field] ?? (field === "timeoutS" ? null : field === "mode" ? "gateway" : "");
    if (value !== before) patch[field] = value === "" && field !== "name" ? null : value;
  }
  const args = { id: editing.id };
  if (Object.keys(patch).length) args.patch = patch;
  const script = document.getElementById("tool-script");
  if (editing.scriptText !== null && script.value !== editing.scriptText) args.scriptText = script.value;
  if (!args.patch && args.scriptText === undefined) args.patch = {};
  const done = await act(`${editing.id}: saved`, () => op("tf_tool_update", args), refresh);
  if (done) await detail(editing.id);
}

async function add(event) {
  event.preventDefault();
  const f = event.target.elements;
  const args = {};
  for (const field of ["id", "name", "summary", "category", "mode", "instructions", "scriptText"]) {
    if (f[field].value !== "") args[field] = f[field].value;
  }
  const how = f.invokeType.value;
  if (how === "script" && f.path.value) args.invoke = { type: "script", path: f.path.value };
  if (how === "shell" && f.command.value) args.invoke = { type: "shell", command: f.command.value };
  const done = await act(`${args.id}: added`, () => op("tf_tool_add", args), refresh);
  if (done) event.target.reset();
}

export function setup() {
  document.getElementById("tools-search").addEventListener("input", render);
  document.getElementById("tool-detail-form").addEventListener("submit", save);
  document.getElementById("tool-detail-close").addEventListener("click", () => {
    document.getElementById("tool-detail").hidden = true;
    editing = null;
  });
  document.getElementById("tool-add-form").addEventListener("submit", add);
}

export async function load(again) {
  refresh = again;
  rows = (await get("/api/tools")).tools;
  render();
}
