"""Gateway settings and the audit log: `tf_settings`, `tf_log` (plans only).

`toolfunnel.json` is read at start: a changed setting applies after a restart, and the result
says which. Any change to `gate.*`, and turning the audit log off, loosens the gate.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any

from tfunnel.config.load import SETTINGS
from tfunnel.errors import BadArgument, ConfigError, ToolFailure
from tfunnel.manage.edit import Change, current
from tfunnel.manage.pack import PackOptions, pack
from tfunnel.manage.plans import Env, Plan, changed_keys, shown
from tfunnel.observe.audit import LOG_CONFIG, load_log_config

SETTING_FIELDS = ("serverName", "serverVersion", "clientName", "clientVersion", "httpPort", "uiPort",
                  "serveLegacy", "upstreamInstructionsMaxChars", "tokens")
GATE_FIELDS = ("askFallback", "confirmManagement")


def settings(env: Env, args: Mapping[str, Any]) -> Plan:
    document = current(env.home, SETTINGS, {})
    before = {k: document.get(k) for k in SETTING_FIELDS}
    gate = document.get("gate")
    gate = dict(gate) if isinstance(gate, Mapping) else {}
    gate_before = dict(gate)
    for key in SETTING_FIELDS:
        if key in args:
            document[key] = args[key]
    for key, value in (args.get("gate") or {}).items():
        if key in GATE_FIELDS:
            gate[key] = value
    if gate != gate_before:
        document["gate"] = gate
    changed = changed_keys(before, {k: document.get(k) for k in SETTING_FIELDS})
    changed += [f"gate.{k}" for k in changed_keys(gate_before, gate)]
    shown_settings = {k: document.get(k) for k in SETTING_FIELDS if k in document}
    result: dict[str, Any] = {"settings": {**shown_settings, "gate": gate}, "changed": changed,
                              "restartRequired": changed}
    if not changed:
        return Plan(result)
    loosens = f"it changes {', '.join(k for k in changed if k.startswith('gate.'))}" \
        if any(k.startswith("gate.") for k in changed) else None
    values = {k: gate.get(k[5:]) if k.startswith("gate.") else document.get(k) for k in changed}
    return Plan(result, Change(f"set {shown(values)} in toolfunnel.json (applies after a restart)",
                               {SETTINGS: document}), loosens)


def log(env: Env, args: Mapping[str, Any]) -> Plan:
    action = str(args["action"])
    config, _, _ = load_log_config(env.home)
    if action == "status":
        count = _records(config.path) if config.enabled else 0
        return Plan({"enabled": config.enabled, "path": str(config.path), "records": count})
    document = current(env.home, LOG_CONFIG, {})
    document["enabled"] = action == "enable"
    if "path" in args:
        document["path"] = _log_path(str(args["path"]))
    loosens = "the audit log stops recording" if action == "disable" and config.enabled else None
    return Plan({"enabled": action == "enable", "path": document.get("path", str(config.path))},
                Change(f"{action} the audit log" + (f" at {args['path']!r}" if "path" in args else ""),
                       {LOG_CONFIG: document}), loosens)


def _log_path(path: str) -> str:
    """An audit log path a tool call may set: a file in the home's `logs/` (never a config file,
    nor anywhere else on the machine)."""
    pure = PurePosixPath(path)
    if pure.is_absolute() or ".." in pure.parts or len(pure.parts) != 2 or pure.parts[0] != "logs" \
            or pure.name.startswith(".") or pure.suffix not in (".jsonl", ".log") \
            or len(path.encode("utf-8", "surrogatepass")) > 200 or any(ord(c) < 32 for c in path) \
            or any(0xD800 <= ord(c) <= 0xDFFF for c in path):
        raise ToolFailure(f"path {path!r} must be a .jsonl or .log file in logs/ (e.g. "
                          "\"logs/audit.jsonl\"), at most 200 bytes")
    return str(pure)


def _records(path: Any) -> int:
    try:
        with open(path, "rb") as fh:
            return sum(1 for _ in fh)
    except OSError:
        return 0


async def pack_home(env: Env, args: Mapping[str, Any]) -> dict[str, Any]:
    """`tf_pack`: `tfunnel pack` in-band. Its output goes under the home's `dist/` only (`out` is a
    folder name there): a tool call never writes elsewhere on the machine."""
    out = args.get("out")
    if out is not None and (not isinstance(out, str) or out != PurePosixPath(out).name
                            or out.startswith(".") or any(ord(c) < 32 or 0xD800 <= ord(c) <= 0xDFFF
                                                          for c in out)):
        raise ToolFailure(f"out {out!r} must be a folder name; the pack is written to dist/<out> in the home")
    options = PackOptions(format=str(args.get("format", "home")), name=args.get("name"),
                          version=args.get("version"), description=args.get("description"),
                          out=str(env.home / "dist" / out) if out else None,
                          force=args.get("force") is True, approvals=args.get("approvals") is True)
    try:
        result = pack(env.home, options)
    except (BadArgument, ConfigError) as exc:
        raise ToolFailure(str(exc)) from None
    body = result.as_dict()
    body.pop("ok", None)
    return body
