"""`tfunnel hook list|enable|disable|remove`: change hooks without a running gateway.

Enable/disable/remove are `tf_hook_set`'s operation (`manage.ops_hooks.hook_set`, the one the
in-band tool and the admin UI run): enable/disable write the `hooks.state.json` overlay (which
wins) and mirror the value into the manifest row, so both files agree; remove drops the row and
its overlay key (the script stays). Every write is atomic and audited (via "cli"); a running
gateway picks the change up live.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tfunnel.errors import ConfigError
from tfunnel.gate.manifest import MANIFEST_FILE, NEVER_FIRING, describe, load_hook_state, load_manifest
from tfunnel.manage.ops_cmd import run_op


def hook_command(home: Path, action: str, hook_id: str | None) -> int:
    try:
        manifest = load_manifest(home)  # also refuses a malformed overlay: it must be fixed first
        load_hook_state(home)
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
    return run_op(home, "tf_hook_set", lambda: {"id": hook_id, "action": action},
                  lambda result: f"{hook_id}: removed" if action == "remove" else f"{hook_id}: {action}d",
                  prefix="tfunnel hook:", as_json=False)
