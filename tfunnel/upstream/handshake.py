"""Connecting to an upstream over a live session: the era probe, the legacy `initialize`
handshake, the modern `server/discover`, and the modern listen stream (SPEC §6.1).

`connect` raises `UpstreamError` when no era works; what the probe's answer means is decided by
the pure `era.decide`. A stdout line that is not JSON-RPC is skipped by the session's reader, so a
probe answered with garbage ends as silence (the probe window).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from tfunnel.config.expose import UpstreamSpec
from tfunnel.errors import UpstreamError, UpstreamRemoteError, UpstreamTimeout
from tfunnel.protocol.eras import LEGACY_VERSIONS, Era
from tfunnel.protocol.modern import MODERN_ERRORS, MODERN_VERSION, SERVER_INFO_META, request_meta
from tfunnel.upstream import era
from tfunnel.upstream.client import initialize_params
from tfunnel.upstream.session import UpstreamSession

log = structlog.get_logger("tfunnel.upstream")

# The probe is a question to a process that may never have heard of it (legacy servers may stay
# silent): bound how long a legacy upstream's start waits for it.
PROBE_WINDOW_S = 5.0
# The listen flag for each capability whose `listChanged` a modern upstream may declare.
LISTEN_FLAGS = {"tools": "toolsListChanged", "prompts": "promptsListChanged",
                "resources": "resourcesListChanged"}


@dataclass(frozen=True)
class Connection:
    """What the handshake learned: kept by the supervisor to skip the probe next time."""

    era: Era
    protocol_version: str
    server_info: Mapping[str, Any] = field(default_factory=dict)
    capabilities: Mapping[str, Any] = field(default_factory=dict)
    instructions: str = ""  # the server's own, as it sent them (the surface trims them)

    def lists_changes(self) -> bool:
        """Whether a modern upstream advertises any list_changed (sent only on a listen stream)."""
        return self.era is Era.MODERN and bool(self.listen_flags())

    def listen_flags(self) -> dict[str, bool]:
        """The `subscriptions/listen` notifications to ask for: each declared `listChanged`."""
        flags: dict[str, bool] = {}
        for capability, flag in LISTEN_FLAGS.items():
            declared = self.capabilities.get(capability)
            if isinstance(declared, Mapping) and declared.get("listChanged") is True:
                flags[flag] = True
        return flags


async def connect(session: UpstreamSession, spec: UpstreamSpec, client_info: Mapping[str, Any],
                  remembered: Connection | None, capabilities: Mapping[str, Any] | None = None) -> Connection:
    """Negotiate the era (or reuse the `remembered` one) and complete that era's handshake.
    `capabilities`: what a legacy handshake declares (None: ours)."""
    control = spec.request_timeout_ms / 1000
    if spec.legacy_pin or (remembered is not None and remembered.era is Era.LEGACY):
        return await initialize(session, spec.id, client_info, control, capabilities)
    if remembered is not None:
        # The era is known: server/discover is the modern handshake now, not a probe.
        return await modern(session, spec, client_info, control, "it negotiated the modern era before",
                            first=remembered.protocol_version)
    # modernOnly never falls back, so a slow start gets the whole control window.
    window = control if spec.modern_only else min(control, PROBE_WINDOW_S)
    connection = await negotiate(session, spec, client_info, window)
    if connection is not None:
        return connection
    try:
        return await initialize(session, spec.id, client_info, control, capabilities)
    except UpstreamRemoteError as exc:
        if exc.code not in MODERN_ERRORS:
            raise
        # The probe was only slow (a server still starting): a dual-era server took it as a modern
        # opening and now refuses initialize. It is modern; discover again, without the short window.
        log.info("upstream refused initialize with a modern error; it is modern", upstream=spec.id,
                 code=exc.code)
        return await modern(session, spec, client_info, control,
                            f"it refused initialize with modern error {exc.code}")


async def modern(session: UpstreamSession, spec: UpstreamSpec, client_info: Mapping[str, Any],
                 timeout_s: float, known: str, *, first: str = MODERN_VERSION) -> Connection:
    """The modern handshake with an upstream known to be modern (`known` says how we know)."""
    connection = await negotiate(session, spec, client_info, timeout_s, first=first, known=known)
    assert connection is not None  # without a fallback, negotiate connects or raises
    return connection


async def negotiate(session: UpstreamSession, spec: UpstreamSpec, client_info: Mapping[str, Any],
                    window_s: float, *, first: str = MODERN_VERSION, known: str | None = None,
                    ) -> Connection | None:
    """Probe with `server/discover` until the era is decided: a modern `Connection`, or None for
    "fall back to initialize" — unless the upstream is `known` to be modern, which makes that an
    error."""
    tried: list[str] = []
    version = first
    while True:
        tried.append(version)
        outcome = await _probe(session, version, client_info, window_s)
        decision = era.decide(spec.id, outcome, tried=tried, modern_only=spec.modern_only)
        if isinstance(decision, era.Retry):
            log.info("upstream refused our protocol version; retrying", upstream=spec.id,
                     version=decision.version)
            version = decision.version
        elif isinstance(decision, era.Fail):
            raise UpstreamError(decision.message)
        elif isinstance(decision, era.Legacy):
            if known is not None:
                raise UpstreamError(f"upstream {spec.id!r} should be modern ({known}), but "
                                    f"{decision.answered}")
            log.info("upstream is not modern; using initialize", upstream=spec.id,
                     answered=decision.answered)
            return None
        else:
            return _connected(session, decision, client_info)


async def _probe(session: UpstreamSession, version: str, client_info: Mapping[str, Any],
                 window_s: float) -> era.Outcome:
    params = {"_meta": request_meta(version, client_info, {})}
    try:
        return era.Answered(await session.request("server/discover", params, timeout_s=window_s))
    except UpstreamTimeout:
        return era.Silent(window_s)
    except UpstreamRemoteError as exc:
        return era.Refused(exc.code, exc.remote_message, exc.data)


def _connected(session: UpstreamSession, decision: era.Modern, client_info: Mapping[str, Any]) -> Connection:
    session.modern_version = decision.version
    session.client_info = dict(client_info)
    discover = decision.discover or {}
    meta = discover.get("_meta")
    info = meta.get(SERVER_INFO_META) if isinstance(meta, Mapping) else None
    capabilities = discover.get("capabilities")
    return Connection(Era.MODERN, decision.version, info if isinstance(info, Mapping) else {},
                      capabilities if isinstance(capabilities, Mapping) else {},
                      _text(discover.get("instructions")))


async def initialize(session: UpstreamSession, upstream_id: str, client_info: Mapping[str, Any],
                     timeout_s: float, capabilities: Mapping[str, Any] | None = None) -> Connection:
    """The legacy handshake: offer the newest legacy version, accept any legacy answer."""
    params = initialize_params(str(client_info.get("name", "")), str(client_info.get("version", "")),
                               capabilities)
    result = await session.request("initialize", params, timeout_s=timeout_s)
    version = result.get("protocolVersion")
    if version not in LEGACY_VERSIONS:
        raise UpstreamError(f"upstream {upstream_id!r} answered initialize with protocol version "
                            f"{version!r}; supported: {', '.join(LEGACY_VERSIONS)}")
    await session.notify("notifications/initialized")
    info = result.get("serverInfo")
    capabilities = result.get("capabilities")
    return Connection(Era.LEGACY, str(version), info if isinstance(info, Mapping) else {},
                      capabilities if isinstance(capabilities, Mapping) else {},
                      _text(result.get("instructions")))


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


async def listen(session: UpstreamSession, upstream_id: str, notifications: Mapping[str, Any]) -> None:
    """Hold a `subscriptions/listen` open for `notifications` until the incarnation ends (or the
    caller cancels it: its cancellation sends `notifications/cancelled`, which is how a stdio
    subscription ends)."""
    try:
        await session.request("subscriptions/listen", {"notifications": dict(notifications)},
                              timeout_s=math.inf)
    except UpstreamError as exc:
        log.debug("upstream listen stream refused or lost", upstream=upstream_id, error=str(exc))
        return
    log.debug("upstream ended its listen stream", upstream=upstream_id)
