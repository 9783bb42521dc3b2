// Settings: toolfunnel.json's identity, ports, counter and gate; every change applies after a restart.
import { act, clear, el, get, op } from "../api.js";

const TEXT = ["serverName", "serverVersion", "clientName", "clientVersion"];
const NUMBERS = ["httpPort", "uiPort"];
const CHOICES = { tokens: "cl100k_base", "gate.askFallback": "deny", "gate.confirmManagement": "loosening" };
let shown = {};
let refresh = async () => {};

function value(settings, key) {
  if (key.startsWith("gate.")) return (settings.gate || {})[key.slice(5)];
  return settings[key];
}

async function save(event) {
  event.preventDefault();
  const f = event.target.elements;
  const args = {};
  const put = (key, v) => {
    if (key.startsWith("gate.")) (args.gate ??= {})[key.slice(5)] = v;
    else args[key] = v;
  };
  for (const key of TEXT) if (f[key].value !== (value(shown, key) ?? "") && f[key].value !== "") put(key, f[key].value);
  for (const key of NUMBERS) if (f[key].value !== "" && Number(f[key].value) !== value(shown, key)) put(key, Number(f[key].value));
  for (const [key, fallback] of Object.entries(CHOICES)) if (f[key].value !== (value(shown, key) ?? fallback)) put(key, f[key].value);
  if (f.serveLegacy.checked !== (shown.serveLegacy !== false)) put("serveLegacy", f.serveLegacy.checked);
  const done = await act("saved; restart the gateway for it to apply", () => op("tf_settings", args), refresh);
  if (done?.changed?.length) document.getElementById("status-line").textContent =
    `changed ${done.changed.join(", ")}: restart the gateway for these to apply`;
}

export function setup() {
  document.getElementById("settings-form").addEventListener("submit", save);
}

export async function load(again) {
  refresh = again;
  const view = await get("/api/settings");
  shown = view.settings;
  document.getElementById("settings-file").textContent = view.file;
  const f = document.getElementById("settings-form").elements;
  for (const key of [...TEXT, ...NUMBERS]) f[key].value = value(shown, key) ?? "";
  for (const [key, fallback] of Object.entries(CHOICES)) f[key].value = value(shown, key) ?? fallback;
  f.serveLegacy.checked = shown.serveLegacy !== false;
  showAuth(view.auth);
}

function showAuth(auth) {
  document.getElementById("auth-file").textContent = auth.file;
  const body = clear(document.getElementById("auth-body"));
  const fact = (term, value) => body.append(el("dt", {}, term), el("dd", {}, value));
  if (auth.problems.length) {
    fact("State", "broken: the HTTP service refuses to start");
    for (const problem of auth.problems) fact("Problem", problem);
    return;
  }
  if (!auth.enabled) {
    fact("State", auth.present ? "off (enabled is false)" : "off (no file)");
    fact("Who may call", "any process on this machine (the service binds loopback only)");
    return;
  }
  fact("State", "on: every request needs a bearer token");
  fact("Issuer", auth.issuer);
  fact("Audience", auth.audience);
  fact("Keys", auth.jwksUri || "found through the issuer's metadata");
  fact("Algorithms", auth.algorithms.join(", "));
  fact("Required scopes", auth.requiredScopes.join(", ") || "none");
  fact("Clock tolerance", `${auth.clockToleranceSec} s`);
}
