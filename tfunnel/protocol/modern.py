"""The 2026-07-28 ("modern") era, sans-IO: the per-request envelope, result decoration, codes.

A modern request carries everything in `params._meta` (PROTOCOL.md §3.2); there is no session.
`envelope` validates that metadata (-32602 for a missing or ill-typed key, -32022 for a version
we do not serve); `complete` gives every result its `resultType`, cache hints where the method is
cacheable, and our `serverInfo`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tfunnel.errors import ProtocolError
from tfunnel.protocol.eras import MODERN_VERSIONS, PROTOCOL_VERSION_META
from tfunnel.protocol.jsonrpc import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
)

MODERN_VERSION = MODERN_VERSIONS[-1]
CLIENT_CAPABILITIES_META = "io.modelcontextprotocol/clientCapabilities"
CLIENT_INFO_META = "io.modelcontextprotocol/clientInfo"
LOG_LEVEL_META = "io.modelcontextprotocol/logLevel"
SERVER_INFO_META = "io.modelcontextprotocol/serverInfo"
SUBSCRIPTION_ID_META = "io.modelcontextprotocol/subscriptionId"

HEADER_MISMATCH = -32020
MISSING_CLIENT_CAPABILITY = -32021
UNSUPPORTED_PROTOCOL_VERSION = -32022
MODERN_ERRORS = frozenset({HEADER_MISMATCH, MISSING_CLIENT_CAPABILITY, UNSUPPORTED_PROTOCOL_VERSION})

LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
# Results that carry ttlMs/cacheScope when complete (PROTOCOL.md §3.9).
CACHEABLE_METHODS = frozenset({"server/discover", "tools/list", "prompts/list", "resources/list",
                               "resources/templates/list", "resources/read"})
# The only methods that may answer `input_required` (PROTOCOL.md §3.8).
INPUT_REQUIRED_METHODS = frozenset({"tools/call", "prompts/get", "resources/read"})
RESULT_TYPES = frozenset({"complete", "input_required"})
# Per-user authorization does not exist yet, but a gateway's answers are its operator's view
# (hooks, visibility): never shareable across users.
CACHE_SCOPE = "private"
# Our lists change on reload; clients learn it through subscriptions/listen.
LIST_TTL_MS = 0


@dataclass(frozen=True)
class Envelope:
    """The metadata of one modern request."""

    protocol_version: str
    client_capabilities: Mapping[str, Any]
    client_info: Mapping[str, Any]
    log_level: str | None = None

    def declared(self, capability: str) -> bool:
        return isinstance(self.client_capabilities.get(capability), Mapping)


def envelope(params: Mapping[str, Any], supported: tuple[str, ...] | None = MODERN_VERSIONS) -> Envelope:
    """Validate a modern request's `_meta` (SDK order: required keys, then the version;
    `supported=None` checks the keys only, for HTTP, which checks its headers in between)."""
    meta = params.get("_meta")
    if not isinstance(meta, Mapping):
        raise ProtocolError(INVALID_PARAMS, 'Invalid params: "_meta" must be an object')
    version = meta.get(PROTOCOL_VERSION_META)
    if not isinstance(version, str) or not version:
        raise ProtocolError(INVALID_PARAMS, f'Invalid params: "_meta" needs "{PROTOCOL_VERSION_META}" '
                            "(a protocol version string)")
    capabilities = meta.get(CLIENT_CAPABILITIES_META)
    if not isinstance(capabilities, Mapping):
        raise ProtocolError(INVALID_PARAMS, f'Invalid params: "_meta" needs "{CLIENT_CAPABILITIES_META}" '
                            "(an object; {} declares none)")
    info = meta.get(CLIENT_INFO_META, {})
    if not isinstance(info, Mapping):
        raise ProtocolError(INVALID_PARAMS, f'Invalid params: "{CLIENT_INFO_META}" must be an object')
    level = meta.get(LOG_LEVEL_META)
    if level is not None and level not in LOG_LEVELS:
        raise ProtocolError(INVALID_PARAMS, f'Invalid params: "{LOG_LEVEL_META}" must be one of '
                            + ", ".join(LOG_LEVELS))
    if supported is not None and version not in supported:
        raise unsupported_version(version, supported)
    return Envelope(version, capabilities, info, level)


def unsupported_version(requested: Any, supported: tuple[str, ...] | list[str]) -> ProtocolError:
    return ProtocolError(UNSUPPORTED_PROTOCOL_VERSION, "Unsupported protocol version",
                         {"supported": list(supported), "requested": requested})


def complete(result: Mapping[str, Any], method: str, server_info: Mapping[str, Any]) -> dict[str, Any]:
    """`result` as a modern client gets it: `resultType` (a legacy upstream's result is
    complete), cache hints on cacheable complete results, our `serverInfo` in `_meta`."""
    out = dict(result)
    kind = out.get("resultType")
    if kind is None:
        out["resultType"] = kind = "complete"
    if kind == "complete" and method in CACHEABLE_METHODS:
        ttl = out.get("ttlMs")
        out["ttlMs"] = ttl if isinstance(ttl, int) and not isinstance(ttl, bool) and ttl >= 0 else LIST_TTL_MS
        out["cacheScope"] = CACHE_SCOPE  # even an upstream's "public" answer is our operator's view
    meta = out.get("_meta")
    out["_meta"] = {**(meta if isinstance(meta, Mapping) else {}), SERVER_INFO_META: dict(server_info)}
    return out


def legacy_view(result: Mapping[str, Any]) -> dict[str, Any]:
    """A modern upstream's complete result as a legacy client gets it (no modern-only fields)."""
    return {k: v for k, v in result.items() if k not in ("resultType", "ttlMs", "cacheScope")}


def discover_result(capabilities: Mapping[str, Any], instructions: str | None,
                    supported: tuple[str, ...] = MODERN_VERSIONS) -> dict[str, Any]:
    """The body of a `DiscoverResult` (`complete` adds resultType, cache hints, serverInfo)."""
    result: dict[str, Any] = {"supportedVersions": list(supported), "capabilities": dict(capabilities)}
    if instructions:
        result["instructions"] = instructions
    return result


def request_meta(version: str, client_info: Mapping[str, Any], capabilities: Mapping[str, Any], *,
                 log_level: str | None = None) -> dict[str, Any]:
    """The `_meta` we put on every request to a modern upstream."""
    meta: dict[str, Any] = {PROTOCOL_VERSION_META: version, CLIENT_INFO_META: dict(client_info),
                            CLIENT_CAPABILITIES_META: dict(capabilities)}
    if log_level is not None:
        meta[LOG_LEVEL_META] = log_level
    return meta


_STATUS_400 = frozenset({PARSE_ERROR, INVALID_REQUEST, INVALID_PARAMS, *MODERN_ERRORS})


def http_status(code: int) -> int:
    """The HTTP status of a modern JSON-RPC error (PROTOCOL.md §3.6, as the SDK does it)."""
    if code == METHOD_NOT_FOUND:
        return 404
    return 400 if code in _STATUS_400 else 200
