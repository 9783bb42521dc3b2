// Surface: exactly what a client sees now, with token counts.
import { clear, el, get } from "../api.js";

function section(title, rows, columns, key) {
  if (rows.length === 0) return el("p", { className: "muted" }, `${title}: none`);
  return el("div", {},
    el("h3", {}, `${title} (${rows.length})`),
    el("div", { className: "scroll" }, el("table", {},
      el("thead", {}, el("tr", {}, columns.map(([label]) => el("th", { scope: "col" }, label)))),
      el("tbody", {}, rows.map((row) => el("tr", { dataset: { surfaceItem: row[key] } },
        columns.map(([, field, num]) => el("td", num ? { className: "num" } : {}, row[field] ?? "")))))),
    ));
}

export async function load() {
  const view = await get("/api/surface");
  const t = view.totals;
  document.getElementById("surface-totals").textContent =
    `tools/list: ${t.top} tokens (${view.top.length} tools) · every tool on the top level would be ${t.full} tokens · ` +
    `lean tools ${t.lean} · prompts ${t.prompts} · resources ${t.resources} · counter ${view.counter}` +
    (view.note ? ` · ${view.note}` : "");
  const tool = [["Name", "name"], ["Title", "title"], ["Kind", "kind"], ["Tokens", "tokens", true]];
  clear(document.getElementById("surface-body")).append(
    section("Top level (tools/list)", view.top, tool, "name"),
    section("Lean (through toolfunnel_list_tools)", view.lean, tool, "name"),
    section("Prompts", view.prompts, [["Name", "name"], ["Upstream", "upstream"], ["Tokens", "tokens", true]], "name"),
    section("Resources", view.resources,
      [["URI", "uri"], ["Name", "name"], ["Upstream", "upstream"], ["Tokens", "tokens", true]], "uri"),
  );
}
