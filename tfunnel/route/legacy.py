"""The legacy-era adapter (2024-11-05 … 2025-11-25): `initialize`, session hooks and records, and
the legacy call context; every other method is the method table's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import structlog

from tfunnel.config.model import Settings
from tfunnel.gate.gated import NeedsInput
from tfunnel.observe.audit import AuditLog
from tfunnel.protocol import modern
from tfunnel.protocol import session as legacy
from tfunnel.protocol.eras import Era
from tfunnel.protocol.jsonrpc import Notification, Request
from tfunnel.protocol.results import ToolResult
from tfunnel.protocol.session import ClientSession
from tfunnel.route.channel import LegacyChannel
from tfunnel.route.methods import INSTRUCTIONS, Methods
from tfunnel.route.peer import Peer
from tfunnel.surface.context import CallContext
from tfunnel.surface.reads import Reader

log = structlog.get_logger("tfunnel.router")


class SessionHooks(Protocol):
    async def session_start(self, session_id: str) -> str: ...

    async def session_end(self, session_id: str) -> None: ...


class LegacyAdapter:
    def __init__(self, methods: Methods, settings: Callable[[], Settings], hooks: SessionHooks,
                 audit: AuditLog, *, instructions: Callable[[], str] = lambda: INSTRUCTIONS) -> None:
        self._methods = methods
        self._settings = settings
        # The server instructions as of now (the base text and the ready upstreams' sections).
        self._instructions = instructions
        self._hooks = hooks
        self._audit = audit

    async def handle(self, session: ClientSession, request: Request, peer: Peer | None) -> dict[str, Any]:
        if request.method == "initialize":
            return await self._initialize(session, request.params)
        return await self._methods.handle(Era.LEGACY, request.method, request.params,
                                          _LegacySite(session, request, peer))

    def notify(self, session: ClientSession, note: Notification) -> None:
        if note.method in ("notifications/initialized", "initialized"):
            session.initialized = True

    async def end_session(self, session: ClientSession) -> None:
        """The client went away: fire Stop hooks and record the end."""
        if session.protocol_version is None:
            return
        await self._hooks.session_end(session.id)
        self._audit.record("client", event="end", session=session.id, client=session.label)

    async def _initialize(self, session: ClientSession, params: dict[str, Any]) -> dict[str, Any]:
        settings = self._settings()
        result = legacy.initialize(
            session, params, {"name": settings.server_name, "version": settings.server_version},
            self._instructions())
        context = await self._hooks.session_start(session.id)
        if context:
            result["instructions"] = f"{result['instructions']}\n\n{context}"
        log.info("client session", client=session.label, protocol=session.protocol_version)
        self._audit.record("client", event="start", session=session.id, client=session.label,
                           protocolVersion=session.protocol_version)
        return result


class _LegacySite:
    """A legacy client's call: asked, and answering upstreams, through real requests to it."""

    def __init__(self, session: ClientSession, request: Request, peer: Peer | None) -> None:
        self._session = session
        self._request = request
        self._peer = peer

    def context(self) -> CallContext:
        channel = LegacyChannel(self._session.capabilities, self._peer, self._request.params)
        return CallContext(self._session.id, str(self._request.id), channel)

    def finish(self, name: str, outcome: ToolResult | NeedsInput) -> dict[str, Any]:
        if isinstance(outcome, NeedsInput):
            # Not reached: a legacy channel answers every question itself (or declines it).
            return ToolResult.failure(f"{name!r} needs input this client cannot give").to_wire()
        return outcome.to_wire()

    def reader(self) -> Reader:
        channel = LegacyChannel(self._session.capabilities, self._peer, self._request.params)
        return Reader(self._session.id, str(self._request.id), channel.ask_user, channel.meta)

    def view(self, result: dict[str, Any]) -> dict[str, Any]:
        return modern.legacy_view(result)
