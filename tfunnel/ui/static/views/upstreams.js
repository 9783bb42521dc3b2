// Upstreams: the supervisor's state per upstream; add, switch, remove, reconnect, discover,
// expose; wrap and unwrap after the security notice.
import { act, clear, confirmInPage, el, get, op, table, toast } from "../api.js";

let refresh = async () => {};
let wrapTarget = null;

function button(label, action, upstream, fn, danger = false) {
  return el("button", { type: "button", className: danger ? "danger" : "", dataset: { action },
    "aria-label": `${label} ${upstream.id}`, on: { click: fn } }, label);
}

function set(upstream, action) {
  return async () => {
    if (action === "remove" && !(await confirmInPage(`Remove the upstream ${upstream.id} and its expose entries?`))) return;
    await act(`${upstream.id}: ${action}`, () => op("tf_mcp_set", { id: upstream.id, action }), refresh);
  };
}

function row(upstream) {
  const actions = [
    upstream.enabled ? button("Disable", "disable", upstream, set(upstream, "disable"))
      : button("Enable", "enable", upstream, set(upstream, "enable")),
    button("Reconnect", "reconnect", upstream, set(upstream, "reconnect")),
    button("Discover", "discover", upstream, () => discover(upstream)),
    button("Wrap", "wrap", upstream, () => wrap(upstream)),
    button("Remove", "remove", upstream, set(upstream, "remove"), true),
  ];
  const exposed = (upstream.exposed || []).map((e) => el("div", { dataset: { exposed: e.tool } },
    el("code", {}, e.tool), e.as ? ` as ${e.as}` : "", e.enabled === false ? " (disabled)" : "", " ",
    el("button", { type: "button", className: "small", dataset: { action: "unexpose" },
      "aria-label": `Stop exposing ${e.tool} of ${upstream.id}`, on: { click: () => act(
        `${e.tool}: no longer on the top level`,
        () => op("tf_expose", { upstream: upstream.id, tool: e.tool, remove: true }), refresh) } }, "Remove")));
  return el("tr", { dataset: { upstream: upstream.id } },
    el("td", {}, el("code", {}, upstream.id), el("div", { className: "muted" }, upstream.transport,
      upstream.enabled ? "" : " · disabled"), upstream.description ? el("div", { className: "muted" }, upstream.description) : null),
    el("td", {}, el("span", { className: "upstream-state" }, upstream.state),
      upstream.stoppedReason ? el("div", { className: "muted stopped-reason" }, upstream.stoppedReason) : null),
    el("td", { className: "num" }, upstream.pid ?? ""), el("td", {}, upstream.era ?? ""),
    el("td", { className: "num" }, upstream.tools ?? ""), el("td", { className: "num" }, upstream.restarts ?? ""),
    el("td", {}, upstream.lastError ?? ""), el("td", {}, exposed),
    el("td", {}, el("div", { className: "actions" }, actions)));
}

let latest = [];
async function discover(upstream) {
  const panel = document.getElementById("discovered");
  const body = clear(document.getElementById("discovered-body"));
  panel.hidden = false;
  document.getElementById("discovered-title").textContent = `Discovering ${upstream.id}…`;
  const found = await act(`${upstream.id}: discovered`, () => op("tf_mcp_discover", { id: upstream.id }));
  if (!found) {
    panel.hidden = true;
    return;
  }
  document.getElementById("discovered-title").textContent = `What ${upstream.id} lists`;
  if (!found.connected) {
    body.append(el("p", {}, `It did not come up: ${found.error}`));
    return;
  }
  const exposed = new Set((latest.find((u) => u.id === upstream.id)?.exposed || []).map((e) => e.tool));
  const rows = found.tools.map((tool) => {
    const box = el("input", { type: "checkbox", checked: exposed.has(tool.name), "aria-label": `Expose ${tool.name}` });
    box.addEventListener("change", () => act(`${tool.name}: ${box.checked ? "exposed" : "no longer exposed"}`,
      () => op("tf_expose", box.checked ? { upstream: upstream.id, tool: tool.name }
        : { upstream: upstream.id, tool: tool.name, remove: true }), refresh));
    return el("tr", { dataset: { discovered: tool.name } }, el("td", {}, el("code", {}, tool.name)),
      el("td", {}, tool.description || ""), el("td", {}, el("label", { className: "check" }, box, "Expose")));
  });
  body.append(el("p", { className: "muted" }, `${found.tools.length} tools, ${found.prompts.length} prompts, ` +
    `${found.resources} resources, ${found.templates} templates`),
  el("div", { className: "scroll" }, el("table", {}, el("thead", {}, el("tr", {},
    el("th", { scope: "col" }, "Tool"), el("th", { scope: "col" }, "Description"), el("th", { scope: "col" }, "Top level"))),
  el("tbody", {}, rows))));
}

async function wrap(upstream) {
  // The operation answers without confirm: true with what a wrap means; the person reads it here.
  wrapTarget = upstream.id;
  let notice = "";
  try {
    await op("tf_wrap", { upstream: upstream.id });
  } catch (error) {
    notice = error.message;
  }
  document.getElementById("wrap-target").textContent = upstream.id;
  document.getElementById("wrap-notice").textContent = notice;
  document.getElementById("wrap-dialog").showModal();
  document.getElementById("wrap-cancel").focus();
}

function renderBanner(wrapState) {
  const banner = document.getElementById("wrap-banner");
  banner.hidden = !wrapState?.wrapping;
  if (wrapState?.wrapping) {
    document.getElementById("wrap-banner-text").textContent =
      `Wrapping ${wrapState.wrapping}: it is the whole surface clients see. `;
  }
}

export async function refreshBanner() {
  renderBanner((await get("/api/upstreams")).wrap);
}

async function addUpstream(event) {
  event.preventDefault();
  const f = event.target.elements;
  const args = { id: f.id.value, transport: f.transport.value };
  if (f.command.value) args.command = f.command.value;
  const lines = f.args.value.split("\n").map((s) => s.trim()).filter(Boolean);
  if (lines.length) args.args = lines;
  if (f.url.value) args.url = f.url.value;
  if (f.description.value) args.description = f.description.value;
  const done = await act(`${args.id}: added`, () => op("tf_mcp_add", args), refresh);
  if (done) event.target.reset();
}

export function setup() {
  document.getElementById("mcp-add-form").addEventListener("submit", addUpstream);
  const dialog = document.getElementById("wrap-dialog");
  document.getElementById("wrap-cancel").addEventListener("click", () => dialog.close());
  document.getElementById("wrap-confirm").addEventListener("click", async () => {
    dialog.close();
    const done = await act(`wrapping ${wrapTarget}`, () => op("tf_wrap", { upstream: wrapTarget, confirm: true }), refresh);
    if (done?.warning) document.getElementById("status-line").textContent = done.warning;
  });
  document.getElementById("wrap-off").addEventListener("click", () =>
    act("the wrap is cleared", () => op("tf_wrap", { off: true }), refresh));
  refreshBanner().catch((error) => toast(error.message));
}

export async function load(again) {
  refresh = again;
  const view = await get("/api/upstreams");
  latest = view.upstreams;
  table(document.querySelector("#upstreams-table tbody"), view.upstreams.map(row));
  renderBanner(view.wrap);
}
