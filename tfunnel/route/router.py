"""Route one inbound JSON-RPC request to the era adapter that answers it.

The era is decided per request by `route.eras.select_era` (the transport passes `era=` when it
decided it from what only it sees, an HTTP version header), so a transport may carry both eras.
`handle` returns a result object or raises `ProtocolError`; the transport's connection core
turns that (and any unexpected exception) into a response.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from tfunnel.config.model import Settings
from tfunnel.errors import ProtocolError
from tfunnel.observe.audit import AuditLog
from tfunnel.observe.observer import NullObserver, Observer
from tfunnel.protocol import jsonrpc
from tfunnel.protocol.eras import Era
from tfunnel.protocol.jsonrpc import Notification, Request
from tfunnel.protocol.session import ClientSession
from tfunnel.route.eras import Refusal, select_era
from tfunnel.route.legacy import LegacyAdapter, SessionHooks
from tfunnel.route.methods import INSTRUCTIONS, Methods
from tfunnel.route.modern import ModernAdapter
from tfunnel.route.parking import Parking
from tfunnel.route.peer import Peer
from tfunnel.surface.changes import Changes
from tfunnel.surface.service import Surface

__all__ = ["INSTRUCTIONS", "Peer", "Router", "SessionHooks"]

log = structlog.get_logger("tfunnel.router")


class Router:
    def __init__(self, settings: Callable[[], Settings], surface: Surface, hooks: SessionHooks,
                 audit: AuditLog, observer: Observer | None = None, *,
                 tools_changed: Changes | None = None, parking: Parking | None = None) -> None:
        # Nothing here waits for upstreams: starting ones never hold a client up; their tools
        # appear with list_changed once they are ready.
        self._observer: Observer = observer or NullObserver()
        self._settings = settings
        self._surface = surface
        methods = Methods(surface)
        self.legacy = LegacyAdapter(methods, settings, hooks, audit)
        self.modern = ModernAdapter(methods, settings, tools_changed or Changes(), parking=parking)

    async def handle(self, session: ClientSession, request: Request, peer: Peer | None = None, *,
                     era: Era | None = None) -> dict[str, Any]:
        """Answer `request` in its era: `era` when the transport decided it, else by the same
        rule from the request itself. Raises `ProtocolError` for an error answer."""
        chosen = era if era is not None else select_era(
            request.method, request.params, serve_legacy=self._settings().serve_legacy)
        if isinstance(chosen, Refusal):
            raise ProtocolError(chosen.code, chosen.message, dict(chosen.data))
        if chosen is Era.MODERN:
            return await self.modern.handle(request, peer)
        return await self.legacy.handle(session, request, peer)

    def tool_schema(self, name: Any) -> Mapping[str, Any] | None:
        """The inputSchema of a top-level tool (for `Mcp-Param-*` header checks), if listed."""
        return self._surface.tool_schema(name) if isinstance(name, str) else None

    async def respond(self, session: ClientSession, request: Request, peer: Peer | None = None, *,
                      era: Era | None = None) -> dict[str, Any]:
        """The JSON-RPC response to `request` (an unexpected exception is logged and answered
        -32603 without its text). Kept for the transports until their connection core owns
        this boundary and the per-request metric."""
        started = time.monotonic()
        try:
            result = await self.handle(session, request, peer, era=era)
        except ProtocolError as exc:
            reply = jsonrpc.error_message(request.id, exc.code, exc.message, exc.data)
        except Exception:
            log.exception("request failed")
            reply = jsonrpc.error_message(request.id, jsonrpc.INTERNAL_ERROR, "Internal error")
        else:
            reply = jsonrpc.result_message(request.id, result)
        self._observer.request(request.method, time.monotonic() - started, error="error" in reply)
        return reply

    def notify(self, session: ClientSession, note: Notification) -> None:
        """Client notifications other than cancellation (which the transport owns)."""
        self.legacy.notify(session, note)

    async def end_session(self, session: ClientSession) -> None:
        """The client went away: fire Stop hooks and record the end."""
        await self.legacy.end_session(session)
