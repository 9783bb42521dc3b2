"""Helpers for hook tests: write a manifest, and hook commands as one-line shell scripts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def set_hooks(home: Path, *hooks: dict[str, Any]) -> None:
    """Replace the home's manifest with `hooks` (enabled, PreToolUse, matching all by default)."""
    rows = [{"id": f"h{i}", "event": "PreToolUse", "matcher": "*", "type": "command", "enabled": True,
             "timeout": 10, **hook} for i, hook in enumerate(hooks)]
    (home / "hooks" / "hooks.manifest.json").write_text(json.dumps({"version": 1, "hooks": rows}))


def decision(kind: str, reason: str = "", **extra: Any) -> str:
    """A shell command printing a Claude Code PreToolUse JSON decision."""
    out: dict[str, Any] = {"hookEventName": "PreToolUse", "permissionDecision": kind, **extra}
    if reason:
        out["permissionDecisionReason"] = reason
    return f"echo '{json.dumps({'hookSpecificOutput': out})}'"


EXIT2_DENY = "echo 'exit-2 says no' >&2; exit 2"
JSON_DENY = decision("deny", "json says no")
