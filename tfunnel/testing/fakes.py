"""In-memory doubles for the seams between components."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tfunnel.errors import UpstreamUnavailable
from tfunnel.upstream.call import CallChannel, UpstreamCall


class NoUpstreams:
    """An `Upstreams` with nothing attached: every call is refused as unavailable."""

    def unready_owner(self, name: str) -> str | None:
        return None

    async def wait_ready(self, upstream_id: str) -> str | None:
        return f"upstream {upstream_id!r} is not configured"

    async def call_tool(self, call: UpstreamCall, channel: CallChannel | None = None) -> dict[str, Any]:
        raise UpstreamUnavailable(f"upstream {call.upstream!r} is not configured")

    async def request(self, upstream_id: str, method: str, params: dict[str, Any], *,
                      log_level: str | None = None,
                      on_progress: Callable[[dict[str, Any]], None] | None = None,
                      legacy_client: bool = False) -> dict[str, Any]:
        raise UpstreamUnavailable(f"upstream {upstream_id!r} is not configured")
