"""Route one inbound JSON-RPC request to the part of the gateway that answers it.

The era is decided per request (`protocol.eras.classify`), so a transport may carry both
eras. `handle` returns a result object or raises `ProtocolError`; the transport owns turning
that into a response (and suppressing it when the request was cancelled).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import structlog

from tfunnel.audit import AuditLog
from tfunnel.config.model import Settings
from tfunnel.errors import ProtocolError
from tfunnel.gate.gated import AskUser
from tfunnel.protocol import session as legacy
from tfunnel.protocol.eras import LEGACY_VERSIONS, PROTOCOL_VERSION_META, Era, classify
from tfunnel.protocol.jsonrpc import INVALID_PARAMS, METHOD_NOT_FOUND, Notification, Request
from tfunnel.protocol.session import ClientSession
from tfunnel.surface.service import CallContext, Surface

log = structlog.get_logger("tfunnel.router")

UNSUPPORTED_PROTOCOL_VERSION = -32022

INSTRUCTIONS = (
    "This gateway keeps its tools behind four meta-tools. Call toolfunnel_list_tools (use "
    "`query` to search) to find a tool, toolfunnel_tool_instructions to learn its arguments, "
    "and toolfunnel_run_tool to run it. toolfunnel_howto explains how to extend the gateway."
)
# A yes/no confirmation: accepting the (empty) form is "yes".
CONFIRM_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


class Peer(Protocol):
    """What a transport offers for server→client requests on one connection."""

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]: ...


class SessionHooks(Protocol):
    async def session_start(self, session_id: str) -> str: ...

    async def session_end(self, session_id: str) -> None: ...


class Router:
    def __init__(self, settings: Callable[[], Settings], surface: Surface, hooks: SessionHooks,
                 audit: AuditLog) -> None:
        self._settings = settings
        self._surface = surface
        self._hooks = hooks
        self._audit = audit

    async def handle(self, session: ClientSession, request: Request, peer: Peer | None = None,
                     ) -> dict[str, Any]:
        if classify(request.method, request.params) is Era.MODERN:
            return self._modern(request)
        method, params = request.method, request.params
        if method == "initialize":
            return await self._initialize(session, params)
        if method == "ping":
            return {}
        if method == "tools/list":
            if params.get("cursor") is not None:
                raise ProtocolError(INVALID_PARAMS, "Invalid params: unknown cursor")
            return {"tools": self._surface.list_tools()}
        if method == "tools/call":
            name = params.get("name")
            if not isinstance(name, str) or not name:
                raise ProtocolError(INVALID_PARAMS, 'Invalid params: "name" must be a non-empty string')
            ctx = CallContext(session.id, str(request.id), self._asker(session, peer))
            outcome = await self._surface.call(name, params.get("arguments") or {}, ctx)
            return outcome.to_wire()
        raise ProtocolError(METHOD_NOT_FOUND, f"Method not found: {method}")

    def notify(self, session: ClientSession, note: Notification) -> None:
        """Client notifications other than cancellation (which the transport owns)."""
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
            INSTRUCTIONS)
        context = await self._hooks.session_start(session.id)
        if context:
            result["instructions"] = f"{result['instructions']}\n\n{context}"
        log.info("client session", client=session.label, protocol=session.protocol_version)
        self._audit.record("client", event="start", session=session.id, client=session.label,
                           protocolVersion=session.protocol_version)
        return result

    @staticmethod
    def _asker(session: ClientSession, peer: Peer | None) -> AskUser | None:
        """Ask through `elicitation/create` when the client declared the capability."""
        if peer is None or not isinstance(session.capabilities.get("elicitation"), dict):
            return None

        async def ask(message: str) -> bool:
            try:
                answer = await peer.request("elicitation/create",
                                            {"message": message, "requestedSchema": CONFIRM_SCHEMA})
            except ProtocolError as exc:
                log.warning("elicitation failed; treated as declined", error=exc.message)
                return False
            return answer.get("action") == "accept"

        return ask

    def _modern(self, request: Request) -> dict[str, Any]:
        # The 2026-07-28 era is not served yet. `server/discover` gets -32601, which modern
        # clients treat as "legacy server" and fall back to `initialize`; any other request
        # that claims the modern era is told which versions are served.
        if request.method == "server/discover":
            raise ProtocolError(METHOD_NOT_FOUND, "Method not found: server/discover")
        requested = request.params["_meta"][PROTOCOL_VERSION_META]
        raise ProtocolError(UNSUPPORTED_PROTOCOL_VERSION, "Unsupported protocol version",
                            {"supported": list(LEGACY_VERSIONS), "requested": requested})
