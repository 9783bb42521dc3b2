"""Route one inbound JSON-RPC request to the era adapter that answers it.

The era is decided per request by `route.eras.select_era`, called by the connection core
(`serve.connection`) with what only the transport sees (an HTTP version header), so a transport
may carry both eras. `handle` returns a result object or raises `ProtocolError`; the connection
core turns that (and any unexpected exception) into a response and counts the request.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from tfunnel.config.model import Settings
from tfunnel.observe.audit import AuditLog
from tfunnel.protocol.eras import Era
from tfunnel.protocol.jsonrpc import Notification, Request
from tfunnel.protocol.mrtr import Sealer
from tfunnel.protocol.session import ClientSession
from tfunnel.route.legacy import Choose, LegacyAdapter, Meet, Resources, SessionHooks
from tfunnel.route.methods import INSTRUCTIONS, Methods
from tfunnel.route.modern import ModernAdapter
from tfunnel.route.parking import Parking
from tfunnel.route.peer import Peer
from tfunnel.surface.changes import Changes
from tfunnel.surface.face import NEEDS, Face, funnel_face
from tfunnel.surface.notices import Notices
from tfunnel.surface.reads import Reads
from tfunnel.surface.service import Surface

__all__ = ["INSTRUCTIONS", "Peer", "Router", "SessionHooks"]

class Router:
    def __init__(self, settings: Callable[[], Settings], surface: Surface, hooks: SessionHooks,
                 audit: AuditLog, *, reads: Reads, tools_changed: Changes | None = None,
                 parking: Parking | None = None, notices: Notices | None = None,
                 resources: Callable[[], Resources] | None = None,
                 face: Callable[[], Face] | None = None,
                 settle: Callable[[], Awaitable[None]] | None = None, meet: Meet | None = None,
                 waiting: Callable[[], str | None] = lambda: None, choose: Choose | None = None,
                 sealer: Sealer | None = None) -> None:
        # Nothing here waits for upstreams: starting ones never hold a client up; their tools
        # appear with list_changed once they are ready. `face` is read for each request: who the
        # server is now (tfunnel with the sections of the upstreams ready now, or the wrapped
        # upstream).
        self._settings = settings
        self._surface = surface
        self._face = face or (lambda: funnel_face(settings(), lambda: INSTRUCTIONS))
        # Under a wrap, waits while the wrapped upstream makes its first connection (its face);
        # `waiting` says, without a task switch, whether there is anything to wait for.
        self._settle = settle
        self._waiting = waiting
        methods = Methods(surface, reads)
        notices = notices or Notices()
        self.legacy = LegacyAdapter(methods, settings, hooks, audit, notices, resources, face=self._face,
                                    meet=meet, choose=choose)
        self.modern = ModernAdapter(methods, settings, tools_changed or Changes(), sealer=sealer,
                                    parking=parking, notices=notices, resources=resources, face=self._face,
                                    choose=choose)

    async def handle(self, session: ClientSession, request: Request, peer: Peer | None = None, *,
                     era: Era) -> dict[str, Any]:
        """Answer `request` in `era`, which the connection decided (`route.eras.select_era`, the
        one rule). Raises `ProtocolError` for an error answer; anything else it raises is a bug,
        which the connection core answers -32603."""
        if era is Era.MODERN and self._settle is not None and self._waiting():  # legacy: at initialize
            await self._settle()
        if request.method in NEEDS:
            self._face().refuse_undeclared(request.method)
        if era is Era.MODERN:
            return await self.modern.handle(request, peer, session)
        return await self.legacy.handle(session, request, peer)

    def tool_schema(self, name: Any, client_info: Mapping[str, Any],
                    session: ClientSession) -> Mapping[str, Any] | None:
        """The inputSchema of a top-level tool (for `Mcp-Param-*` header checks), if listed to a
        modern client with `client_info` whose request is `session` (what its bearer token said:
        the profile's view)."""
        if not isinstance(name, str):
            return None
        return self._surface.tool_schema(name, self.modern.profile_for(client_info, session))

    def notify(self, session: ClientSession, note: Notification) -> None:
        """Client notifications other than cancellation (which the transport owns)."""
        self.legacy.notify(session, note)

    async def end_session(self, session: ClientSession) -> None:
        """The client went away: fire Stop hooks and record the end."""
        await self.legacy.end_session(session)
