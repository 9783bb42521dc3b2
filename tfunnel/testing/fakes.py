"""In-memory doubles for the seams between components."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from tfunnel.errors import UpstreamUnavailable


class NoUpstreams:
    """An `Upstreams` with nothing attached: every call is refused as unavailable."""

    def unready_owner(self, name: str) -> str | None:
        return None

    async def wait_ready(self, upstream_id: str) -> str | None:
        return f"upstream {upstream_id!r} is not configured"

    async def call_tool(self, upstream_id: str, tool: str, arguments: Mapping[str, Any], *,
                        meta: Mapping[str, Any] | None = None,
                        on_progress: Callable[[dict[str, Any]], None] | None = None,
                        client_capabilities: Mapping[str, Any] | None = None,
                        log_level: str | None = None, extra: Mapping[str, Any] | None = None,
                        on_request: Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]] | None = None,
                        ) -> dict[str, Any]:
        raise UpstreamUnavailable(f"upstream {upstream_id!r} is not configured")
