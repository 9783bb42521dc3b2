// Activity: the audit log, newest first, live, filtered.
import { clear, el, get, op, act, when } from "../api.js";

const MAX = 500;
let filter = "all";

// The same rule as the server's `views.passes`.
export function passes(record, kind) {
  if (kind === "deny") return record.decision === "deny" || record.denied === true;
  if (kind === "ask") return record.asked === true || record.decision === "ask";
  if (kind === "error") return record.ok === false || "error" in record;
  return true;
}

function item(record) {
  const what = record.tool ?? record.name ?? record.file ?? record.upstream ?? record.event ?? "";
  const dataset = { record: "", type: String(record.type ?? "") };
  if (record.decision) dataset.decision = String(record.decision);
  const detail = ["decision", "reason", "via", "event", "durationMs", "hook", "error"]
    .filter((k) => record[k] !== undefined && record[k] !== null)
    .map((k) => `${k}: ${typeof record[k] === "object" ? JSON.stringify(record[k]) : record[k]}`).join(" · ");
  return el("li", { dataset, className: record.ok === false ? "error" : "" },
    el("span", { className: "when" }, when(record.ts)), el("span", { className: "kind" }, dataset.type),
    el("code", {}, String(what)), detail ? ` ${detail}` : "");
}

export function live(record) {
  if (!passes(record, filter)) return;
  const list = document.getElementById("activity-list");
  list.prepend(item(record));
  while (list.children.length > MAX) list.lastElementChild.remove();
}

export function setup(reload) {
  document.getElementById("activity-filter").addEventListener("change", (event) => {
    filter = event.target.value;
    reload();
  });
}

export async function load(again) {
  const view = await get(`/api/activity?type=${encodeURIComponent(filter)}`);
  const note = clear(document.getElementById("activity-note"));
  if (!view.enabled) {
    note.append(`The audit log is off (${view.path}). `, el("button", { type: "button", on: { click: () =>
      act("the audit log is on", () => op("tf_log", { action: "enable" }), again) } }, "Turn it on"));
  } else {
    note.append(view.path);
  }
  clear(document.getElementById("activity-list")).append(...view.entries.map(item));
}
