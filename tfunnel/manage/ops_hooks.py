"""Policy hooks: `tf_hook_add`, `tf_hook_set` (plans only; `manage.edit` writes).

Enable and disable write the `hooks.state.json` overlay (which wins) and mirror the value into the
manifest row, as `tfunnel hook` does; remove drops the row and its overlay key (a script stays).
Adding a hook loosens the gate (its command runs as the gateway, where no hook looks; an http
hook's URL receives every matching call's arguments), and so does disabling or removing one that
is on. An http hook's header values are never shown (a summary names the headers only).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any

from tfunnel.errors import ToolFailure
from tfunnel.gate.manifest import HOOK_STATE, MANIFEST, shown_url
from tfunnel.manage.edit import Change, Script, current, safe_path
from tfunnel.manage.plans import Env, Plan, runs, shown, without_secrets

EMPTY_MANIFEST: Mapping[str, Any] = {"version": 1, "hooks": []}
HOOK_SCRIPTS = "hooks/scripts"
ROW_FIELDS = ("event", "matcher", "command", "script", "timeout", "enabled", "description", "failClosed",
              "url", "headers", "allowedEnvVars")


def hook_add(env: Env, args: Mapping[str, Any]) -> Plan:
    manifest = current(env.home, MANIFEST, EMPTY_MANIFEST)
    rows = _rows(manifest)
    hook_id = str(args["id"])
    if any(isinstance(r, dict) and r.get("id") == hook_id for r in rows):
        raise ToolFailure(f"a hook with id {hook_id!r} exists; choose another id or use tf_hook_set")
    row: dict[str, Any] = {"id": hook_id, "type": "http" if "url" in args else "command", "enabled": True,
                           **{k: args[k] for k in ROW_FIELDS if k in args}}
    if row["type"] == "http":
        return _http_hook_add(hook_id, row, args, manifest, rows)
    scripts: tuple[Script, ...] = ()
    if "scriptText" in args:
        name = str(args.get("script") or "")
        path = PurePosixPath(name)
        if not name or str(path.parent) not in (".", HOOK_SCRIPTS):
            raise ToolFailure(f'scriptText needs "script": a file name in {HOOK_SCRIPTS}/ (e.g. "check.py")')
        scripts = (Script(HOOK_SCRIPTS, path.name, str(args["scriptText"])),)
        if safe_path(env.home, HOOK_SCRIPTS, path.name).exists():
            # Another hook's code: rewriting it could switch that hook off without a confirmation.
            raise ToolFailure(f"{scripts[0].relative} exists; give the new hook a script name of its own")
        row["script"] = f"{HOOK_SCRIPTS}/{path.name}"
        row.setdefault("command", _runner(path.name))
    if "command" not in row:
        raise ToolFailure('a hook needs "command" (or "script" with "scriptText")')
    rows.append(row)
    # A hook's command runs as the gateway, outside the gate: it could switch other hooks off.
    why = runs(f"hook {hook_id!r}", row["command"])
    if scripts:
        why += f", with the script {scripts[0].relative}: {json.dumps(scripts[0].text, ensure_ascii=False)}"
    return Plan({"id": hook_id, "hook": row, "scriptWritten": bool(scripts)},
                Change(f"add hook {hook_id!r} {shown(row)}", {MANIFEST: manifest}, scripts), why)


def _http_hook_add(hook_id: str, row: dict[str, Any], args: Mapping[str, Any], manifest: dict[str, Any],
                   rows: list[Any]) -> Plan:
    clash = [key for key in ("command", "script", "scriptText") if key in args]
    if clash:
        raise ToolFailure(f'a hook has either "url" (an http hook) or "{clash[0]}" (a command hook), '
                          'not both')
    rows.append(row)
    shown_row = without_secrets(row)
    why = (f"hook {hook_id!r} sends every matching call's arguments to {shown_url(str(row['url']))}, "
           "and its answers decide the calls")
    return Plan({"id": hook_id, "hook": shown_row, "scriptWritten": False},
                Change(f"add hook {hook_id!r} {shown(shown_row)}", {MANIFEST: manifest}), why)


def hook_set(env: Env, args: Mapping[str, Any]) -> Plan:
    hook_id, action = str(args["id"]), str(args["action"])
    manifest = current(env.home, MANIFEST, EMPTY_MANIFEST)
    overlay = current(env.home, HOOK_STATE, {})
    rows = _rows(manifest)
    index = next((i for i, r in enumerate(rows) if isinstance(r, dict) and r.get("id") == hook_id), None)
    if index is None:
        known = [str(r.get("id")) for r in rows if isinstance(r, dict)]
        raise ToolFailure(f"no hook with id {hook_id!r} (known: {', '.join(known) or 'none'})")
    row = rows[index]
    switches = switch_map(overlay)
    was_on = switches.get(hook_id, row.get("enabled") is True) is True
    described = f"hook {hook_id!r} ({row.get('event')}, matcher {row.get('matcher') or '*'!r})"
    if action == "remove":
        del rows[index]
        switches.pop(hook_id, None)
        result: dict[str, Any] = {"id": hook_id, "action": action, "removed": True}
    else:
        switches[hook_id] = row["enabled"] = action == "enable"
        result = {"id": hook_id, "action": action, "enabled": action == "enable"}
    loosens = f"{described} stops checking calls" if was_on and action != "enable" else None
    return Plan(result, Change(f"{action} {described}", {MANIFEST: manifest, HOOK_STATE: overlay}), loosens)


def switch_map(overlay: dict[str, Any]) -> dict[str, Any]:
    """The overlay's switches, in its flat or its wrapped (`{"enabled": {...}}`) form (the same
    object: writes to it are writes to the document)."""
    wrapped = overlay.get("enabled")
    return wrapped if isinstance(wrapped, dict) else overlay


def _runner(name: str) -> str:
    """The command that runs a hook script by its extension (`${HOOKS_DIR}` is the hooks folder)."""
    path = f"${{HOOKS_DIR}}/scripts/{name}"
    if name.endswith(".py"):
        return f'python3 "{path}"'
    if name.endswith(".js"):
        return f'node "{path}"'
    return f'/bin/sh "{path}"'


def _rows(manifest: dict[str, Any]) -> list[Any]:
    rows = manifest.setdefault("hooks", [])
    if not isinstance(rows, list):
        raise ToolFailure(f"{MANIFEST.name}: \"hooks\" is not a list; fix the file first")
    return rows
