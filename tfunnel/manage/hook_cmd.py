"""`tfunnel hook list|enable|disable|remove`: change hooks without a running gateway.

Enable/disable write the `hooks.state.json` overlay (which wins) and mirror the value into the
manifest row, so both files agree; remove drops the row and its overlay key (the script stays).
Every write is atomic; a running gateway picks the change up live.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from tfunnel.config.atomic import write_json_atomic
from tfunnel.config.validate import read_json
from tfunnel.errors import ConfigError
from tfunnel.gate.manifest import (
    HOOK_STATE_FILE,
    MANIFEST_FILE,
    NEVER_FIRING,
    describe,
    load_hook_state,
    load_manifest,
)
from tfunnel.observe.audit import AuditLog


def hook_command(home: Path, action: str, hook_id: str | None) -> int:
    try:
        manifest = load_manifest(home)  # also refuses a malformed overlay: it must be fixed first
        overlay = load_hook_state(home)
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"tfunnel hook: {problem}", file=sys.stderr)
        if action != "list":
            print("tfunnel hook: nothing changed; fix the file first", file=sys.stderr)
        return 1
    if action == "list":
        for spec in manifest.hooks:
            row = describe(spec)
            note = "  (never fires in a gateway)" if spec.event in NEVER_FIRING else ""
            print(json.dumps(row) + note)
        if not manifest.hooks:
            print(f"no hooks in {home / MANIFEST_FILE}")
        return 0
    known = {spec.id for spec in manifest.hooks}
    if hook_id not in known:
        print(f"tfunnel hook: no hook with id {hook_id!r} (known: {', '.join(sorted(known)) or 'none'})",
              file=sys.stderr)
        return 1
    raw = read_json(home / MANIFEST_FILE, MANIFEST_FILE)
    rows: list[Any] = raw.get("hooks", [])
    index = next(i for i, spec in enumerate(manifest.hooks) if spec.id == hook_id)
    if action == "remove":
        del rows[index]
        overlay.pop(hook_id, None)
    else:
        overlay[hook_id] = action == "enable"
        rows[index]["enabled"] = action == "enable"
    write_json_atomic(home / HOOK_STATE_FILE, overlay)
    write_json_atomic(home / MANIFEST_FILE, raw)
    AuditLog(home).record("config", file=MANIFEST_FILE, via="cli", change=f"{action} {hook_id}")
    print(f"{hook_id}: {action}d" if action != "remove" else f"{hook_id}: removed")
    return 0
