"""Helpers for upstream tests: attach the mock upstream (or any command) through expose.json."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

MOCK = [sys.executable, "-m", "tfunnel.testing.mock_upstream"]


def mock_upstream(upstream_id: str = "mock", *args: str, **fields: Any) -> dict[str, Any]:
    """An expose.json upstream entry running the mock with `args`."""
    return {"id": upstream_id, "command": MOCK[0], "args": [*MOCK[1:], *args], **fields}


def set_upstreams(home: Path, *upstreams: dict[str, Any], expose: list[dict[str, Any]] | None = None) -> None:
    (home / "mcp" / "expose.json").write_text(json.dumps(
        {"version": 1, "upstreams": list(upstreams), "expose": expose or []}, indent=2))


# Restart quickly in tests that watch a restart happen.
FAST_RESTART = {"restart": {"initialBackoffS": 0.2, "maxBackoffS": 0.5}}
