"""Which era a request is served in: one pure rule for every transport (PROTOCOL.md §9).

Per request, never per connection: a stdio pipe or an HTTP endpoint may carry both eras. The
inputs are what any transport has: the method, its params, and (HTTP only) the value of the
`MCP-Protocol-Version` header.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tfunnel.protocol.eras import LEGACY_VERSIONS, MODERN_VERSIONS, Era, classify
from tfunnel.protocol.modern import UNSUPPORTED_PROTOCOL_VERSION


@dataclass(frozen=True)
class Refusal:
    """The request belongs to no era this gateway serves: answer it with this error."""

    code: int
    message: str
    data: Mapping[str, Any] = field(default_factory=dict)


def select_era(method: str, params: Mapping[str, Any], *, serve_legacy: bool,
               version_header: str | None = None) -> Era | Refusal:
    """The era of one request.

    Modern when its `_meta` carries a protocol version (`protocol.eras.classify`) or, over HTTP,
    the version header names no legacy version (so a modern `initialize` reaches the modern
    handler, which does not know it). A gateway that does not serve legacy serves everything else
    as modern (whose envelope check then refuses what lacks one), except a legacy `initialize`:
    that is refused with the versions served, so the client learns what to speak."""
    header_modern = version_header is not None and version_header.strip() not in LEGACY_VERSIONS
    if header_modern or classify(method, params) is Era.MODERN:
        return Era.MODERN
    if serve_legacy:
        return Era.LEGACY
    if method == "initialize":
        return Refusal(UNSUPPORTED_PROTOCOL_VERSION, "Unsupported protocol version",
                       {"supported": list(MODERN_VERSIONS), "requested": params.get("protocolVersion")})
    return Era.MODERN
