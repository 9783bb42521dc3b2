// Approvals: what the tool approvals hold, with the diff; accept one or all.
import { act, clear, el, get, op, when } from "../api.js";

function diff(lines) {
  return el("pre", {}, lines.map((line) => el("span", {
    className: line.startsWith("+") && !line.startsWith("+++") ? "add" : line.startsWith("-") && !line.startsWith("---") ? "del" : "",
  }, `${line}\n`)));
}

export async function load(again) {
  const view = await get("/api/approvals");
  const body = clear(document.getElementById("approvals-body"));
  if (view.upstreams.length === 0) {
    body.append(el("p", { className: "muted" }, "Nothing is held: every upstream shows what was approved."));
    return;
  }
  for (const upstream of view.upstreams) {
    // What is accepted is what this page shows: the digests go along, and a change since is refused.
    const digests = Object.fromEntries(upstream.held.map((held) => [held.key, held.digest]));
    const all = el("button", { type: "button", dataset: { action: "accept-all" }, on: { click: () =>
      act(`${upstream.id}: accepted`, () => op("tf_accept_change", { upstream: upstream.id, digests }), again) } },
    `Accept all of ${upstream.id}`);
    body.append(el("section", { className: "card", dataset: { heldUpstream: upstream.id } },
      el("h3", {}, upstream.id, " ", all),
      upstream.held.map((held) => el("div", { dataset: { held: `${upstream.id}/${held.key}` } },
        el("h4", {}, el("code", {}, held.key), ` — ${held.why}`),
        el("p", {}, held.reason, held.since ? el("span", { className: "muted" }, ` (since ${when(held.since)})`) : ""),
        diff(held.diff),
        el("button", { type: "button", dataset: { action: "accept" }, "aria-label": `Accept ${held.key}`,
          on: { click: () => act(`${upstream.id}/${held.key}: accepted`,
            () => op("tf_accept_change", { upstream: upstream.id, tool: held.key,
              digests: { [held.key]: held.digest } }), again) } }, "Accept")))));
  }
}
