// The admin UI: tabs, the live socket, and which view reloads when.
import { get, liveUrl, renewToken, toast } from "./api.js";
import * as surface from "./views/surface.js";
import * as tools from "./views/tools.js";
import * as upstreams from "./views/upstreams.js";
import * as hooks from "./views/hooks.js";
import * as activity from "./views/activity.js";
import * as approvals from "./views/approvals.js";
import * as settings from "./views/settings.js";

const VIEWS = { surface, tools, upstreams, hooks, activity, approvals, settings };
const NAMES = Object.keys(VIEWS);
const stale = new Set(NAMES); // views to reload when next shown
let current = NAMES.includes(location.hash.slice(1)) ? location.hash.slice(1) : "surface";

async function load(name) {
  stale.delete(name);
  try {
    await VIEWS[name].load(refresher(name));
  } catch (error) {
    toast(error.message);
  }
}

// What a view calls after it changed something: itself, the header, and the views it touches.
function refresher(name) {
  return async () => {
    await Promise.all([load(name), loadStatus()]);
  };
}

async function loadStatus() {
  try {
    const status = await get("/api/status");
    document.getElementById("server-name").textContent = status.server.name;
    document.getElementById("server-version").textContent = status.server.version;
    const c = status.counts;
    document.getElementById("counts").textContent =
      `${c.tools} tools · ${c.upstreams} upstreams · ${c.hooks} hooks · ${c.held} held` +
      (status.mode === "standalone" ? " · no gateway in this process" : "");
  } catch (error) {
    toast(error.message);
  }
}

function show(name, focus = false) {
  current = name;
  for (const other of NAMES) {
    const tab = document.getElementById(`tab-${other}`);
    const selected = other === name;
    tab.setAttribute("aria-selected", String(selected));
    tab.tabIndex = selected ? 0 : -1;
    document.getElementById(`panel-${other}`).hidden = !selected;
  }
  if (focus) document.getElementById(`tab-${name}`).focus();
  if (location.hash !== `#${name}`) history.replaceState(null, "", `#${name}`);
  if (stale.has(name)) load(name);
}

function changed(views) {
  if (views.includes("upstreams") || views.includes("tools")) upstreams.refreshBanner().catch(() => {});
  for (const name of views) {
    if (!VIEWS[name]) continue;
    if (name === current) load(name);
    else stale.add(name);
  }
  loadStatus();
}

function everything() {
  for (const name of NAMES) stale.add(name);
  load(current);
  loadStatus();
}

// The live socket: reconnects with backoff, and reloads everything on each (re)open.
let backoff = 500;
function connect() {
  const status = document.getElementById("live-status");
  const socket = new WebSocket(liveUrl());
  socket.addEventListener("message", (event) => {
    let message;
    try { message = JSON.parse(event.data); } catch { return; }
    if (message.type === "hello") {
      status.textContent = "live";
      status.classList.add("on");
      backoff = 500;
      everything();
    } else if (message.type === "changed" && Array.isArray(message.what)) {
      changed(message.what);
    } else if (message.type === "audit" && message.record) {
      activity.live(message.record);
      if (message.record.type === "gate") changed(["hooks"]);
    } else if (message.type === "resync") {
      everything();
    }
  });
  socket.addEventListener("close", () => {
    status.textContent = "reconnecting…";
    status.classList.remove("on");
    setTimeout(() => renewToken().catch(() => {}).finally(connect), backoff);
    backoff = Math.min(backoff * 2, 5000);
  });
}

function keyboard(event) {
  const at = NAMES.indexOf(event.target.id.replace("tab-", ""));
  if (at < 0) return;
  let next = null;
  if (event.key === "ArrowRight") next = NAMES[(at + 1) % NAMES.length];
  else if (event.key === "ArrowLeft") next = NAMES[(at - 1 + NAMES.length) % NAMES.length];
  else if (event.key === "Home") next = NAMES[0];
  else if (event.key === "End") next = NAMES[NAMES.length - 1];
  if (next !== null) {
    event.preventDefault();
    show(next, true);
  }
}

for (const name of NAMES) {
  const tab = document.getElementById(`tab-${name}`);
  tab.addEventListener("click", () => show(name));
  tab.addEventListener("keydown", keyboard);
}
window.addEventListener("hashchange", () => {
  const name = location.hash.slice(1);
  if (NAMES.includes(name) && name !== current) show(name);
});
for (const view of Object.values(VIEWS)) view.setup?.(() => load(current));
show(current);
loadStatus();
connect();
