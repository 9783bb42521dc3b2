"""Helpers for upstream tests: attach the mock upstream (or any command) through expose.json."""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from tfunnel.errors import ProtocolError
from tfunnel.protocol.jsonrpc import METHOD_NOT_FOUND
from tfunnel.upstream.call import UpstreamCall
from tfunnel.upstream.supervisor import Supervisor

MOCK = [sys.executable, "-m", "tfunnel.testing.mock_upstream"]


def mock_upstream(upstream_id: str = "mock", *args: str, **fields: Any) -> dict[str, Any]:
    """An expose.json upstream entry running the mock with `args`."""
    return {"id": upstream_id, "command": MOCK[0], "args": [*MOCK[1:], *args], **fields}


def set_upstreams(home: Path, *upstreams: dict[str, Any], expose: list[dict[str, Any]] | None = None) -> None:
    (home / "mcp" / "expose.json").write_text(json.dumps(
        {"version": 1, "upstreams": list(upstreams), "expose": expose or []}, indent=2))


# Restart quickly in tests that watch a restart happen.
FAST_RESTART = {"restart": {"initialBackoffS": 0.2, "maxBackoffS": 0.5}}


class _Channel:
    """A caller's side of an upstream call for tests: relays progress, answers questions."""

    def __init__(self, on_progress: Callable[[dict[str, Any]], None] | None,
                 on_request: Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]] | None) -> None:
        self._on_progress = on_progress
        self._on_request = on_request
        self.answers = on_request is not None

    def progress(self, params: dict[str, Any]) -> None:
        if self._on_progress is not None:
            self._on_progress(params)

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if self._on_request is None:
            raise ProtocolError(METHOD_NOT_FOUND, f"Method not found: {method}")
        return await self._on_request(method, params)


async def call_tool(supervisor: Supervisor, upstream: str, tool: str, arguments: Mapping[str, Any], *,
                    meta: Mapping[str, Any] | None = None,
                    client_capabilities: Mapping[str, Any] | None = None, log_level: str | None = None,
                    extra: Mapping[str, Any] | None = None,
                    on_progress: Callable[[dict[str, Any]], None] | None = None,
                    on_request: Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]] | None = None,
                    ) -> dict[str, Any]:
    """`Supervisor.call_tool` with the call's parts as keywords."""
    call = UpstreamCall(upstream, tool, arguments, meta, client_capabilities or {}, log_level, extra)
    channel = _Channel(on_progress, on_request) if on_progress or on_request else None
    return await supervisor.call_tool(call, channel)
