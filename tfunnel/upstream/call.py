"""One upstream tool call as a value, and the caller's side of it as a channel.

The route layer builds both (one legacy and one modern channel, `tfunnel.route`); the surface
passes them through unchanged; the supervisor and the session only read them. Nothing here knows
which era the client speaks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class UpstreamCall:
    """`tools/call` of `tool` on the upstream `upstream`.

    `meta` is the caller's `_meta` to forward (protocol-owned keys already removed). For a modern
    upstream, `capabilities` (what the caller can answer; default none) and `log_level` go into
    the request's `_meta`, and `continuation` (`inputResponses`, `requestState`) into its params;
    a legacy upstream ignores all three."""

    upstream: str
    tool: str
    arguments: Mapping[str, Any]
    meta: Mapping[str, Any] | None = None
    capabilities: Mapping[str, Any] = field(default_factory=dict)
    log_level: str | None = None
    continuation: Mapping[str, Any] | None = None
    # Whether the caller is a legacy client (a wrapped dual-era upstream answers it on its
    # legacy-era twin, `upstream.twins`).
    legacy_client: bool = False

    def params(self, *, modern: bool) -> dict[str, Any]:
        """The `tools/call` params for an upstream of that era. They hold the call's arguments and
        `_meta` as they are (nothing is copied: the session builds the request's own `_meta`)."""
        params: dict[str, Any] = {k: v for k, v in self.continuation.items()
                                  if k not in ("name", "arguments", "_meta")} \
            if modern and self.continuation else {}
        params["name"] = self.tool
        params["arguments"] = self.arguments if isinstance(self.arguments, dict) else dict(self.arguments)
        if self.meta:
            params["_meta"] = self.meta
        return params


class CallChannel(Protocol):
    """The caller's side of an upstream call while it runs."""

    # Whether the caller answers the upstream's own requests. A channel that only relays progress
    # says False: the upstream's questions then go to another call in flight that can answer
    # them (the stdio wire does not say which call a question belongs to), else get the declined
    # defaults.
    answers: bool

    def progress(self, params: dict[str, Any]) -> None:
        """Relay an upstream progress notification's params (best effort, never blocks)."""

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Answer one of the upstream's own requests (`elicitation/create`, `sampling/...`,
        `roots/list`) with its result; raise `ProtocolError` to answer with that error."""
