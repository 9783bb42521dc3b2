"""Helpers for upstream tests: attach the mock upstream (or any command) through expose.json."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from tfunnel.route.bridge import relay
from tfunnel.upstream.call import UpstreamCall
from tfunnel.upstream.supervisor import Supervisor

MOCK = [sys.executable, "-m", "tfunnel.testing.mock_upstream"]
ROOT = Path(__file__).resolve().parents[1]
# server-everything as `scripts/test` installs it (npm, pinned).
EVERYTHING_SERVER = ROOT / ".npm-fixtures" / "node_modules" / ".bin" / "mcp-server-everything"


def mock_upstream(upstream_id: str = "mock", *args: str, **fields: Any) -> dict[str, Any]:
    """An expose.json upstream entry running the mock with `args`."""
    return {"id": upstream_id, "command": MOCK[0], "args": [*MOCK[1:], *args], **fields}


def set_upstreams(home: Path, *upstreams: dict[str, Any], expose: list[dict[str, Any]] | None = None) -> None:
    (home / "mcp" / "expose.json").write_text(json.dumps(
        {"version": 1, "upstreams": list(upstreams), "expose": expose or []}, indent=2))


# Restart quickly in tests that watch a restart happen.
FAST_RESTART = {"restart": {"initialBackoffS": 0.2, "maxBackoffS": 0.5}}


async def call_tool(supervisor: Supervisor, upstream: str, tool: str, arguments: Mapping[str, Any], *,
                    meta: Mapping[str, Any] | None = None,
                    client_capabilities: Mapping[str, Any] | None = None, log_level: str | None = None,
                    extra: Mapping[str, Any] | None = None,
                    on_progress: Callable[[dict[str, Any]], None] | None = None,
                    on_request: Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]] | None = None,
                    ) -> dict[str, Any]:
    """`Supervisor.call_tool` with the call's parts as keywords."""
    call = UpstreamCall(upstream, tool, arguments, meta, client_capabilities or {}, log_level, extra)
    return await supervisor.call_tool(call, relay(on_progress, on_request))


def write_expose(home: Path, upstreams: list[dict[str, Any]], expose: list[dict[str, Any]] | None = None,
                 ) -> None:
    """Write `<home>/mcp/expose.json` with these upstream rows and expose entries."""
    path = home / "mcp" / "expose.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"version": 1, "upstreams": upstreams, "expose": expose or []}, indent=2))


def everything_upstream() -> dict[str, Any]:
    return {"id": "everything", "command": str(EVERYTHING_SERVER), "args": ["stdio"]}


_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_WEEKDAY = re.compile(r"\b(Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday)\b")


def undated(value: Any) -> Any:
    """`value` with calendar dates and weekday names masked (convert_time uses today's date)."""
    if isinstance(value, str):
        return _WEEKDAY.sub("<weekday>", _DATE.sub("<date>", value))
    if isinstance(value, dict):
        return {k: undated(v) for k, v in value.items()}
    if isinstance(value, list):
        return [undated(v) for v in value]
    return value
