"""Route one inbound JSON-RPC request to the part of the gateway that answers it.

The era is decided per request (`protocol.eras.classify`), so a transport may carry both
eras. `handle` returns a result object or raises `ProtocolError`; the transport owns turning
that into a response (and suppressing it when the request was cancelled).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import structlog

from tfunnel.config.model import Settings
from tfunnel.errors import ProtocolError
from tfunnel.gate.gated import AskUser
from tfunnel.observe.audit import AuditLog
from tfunnel.observe.observer import NullObserver, Observer
from tfunnel.protocol import jsonrpc, modern
from tfunnel.protocol import session as legacy
from tfunnel.protocol.eras import MODERN_VERSIONS, Era, classify
from tfunnel.protocol.jsonrpc import INVALID_PARAMS, METHOD_NOT_FOUND, Notification, Request
from tfunnel.protocol.session import ClientSession, empty_capability
from tfunnel.route.modern import CONFIRM_SCHEMA, ModernPeer, ModernRouter
from tfunnel.surface import bridge
from tfunnel.surface.changes import Changes
from tfunnel.surface.context import CallContext, Progress, Resume, ServerRequests
from tfunnel.surface.service import Surface

log = structlog.get_logger("tfunnel.router")

INSTRUCTIONS = (
    "This gateway keeps its tools behind four meta-tools. Call toolfunnel_list_tools (use "
    "`query` to search) to find a tool, toolfunnel_tool_instructions to learn its arguments, "
    "and toolfunnel_run_tool to run it. toolfunnel_howto explains how to extend the gateway."
)


class Peer(ModernPeer, Protocol):
    """What a transport offers for server→client messages on one connection."""

    # False when the transport cannot carry server→client requests (then `ask` falls back).
    can_request: bool

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]: ...

    def notify_nowait(self, method: str, params: dict[str, Any]) -> None:
        """Best effort: dropped when the client is not keeping up (progress is lossy)."""


class SessionHooks(Protocol):
    async def session_start(self, session_id: str) -> str: ...

    async def session_end(self, session_id: str) -> None: ...


class Router:
    def __init__(self, settings: Callable[[], Settings], surface: Surface, hooks: SessionHooks,
                 audit: AuditLog, observer: Observer | None = None, *,
                 tools_changed: Changes | None = None) -> None:
        # Nothing here waits for upstreams: starting ones never hold a client up; their tools
        # appear with list_changed once they are ready.
        self._observer: Observer = observer or NullObserver()
        self._settings = settings
        self._surface = surface
        self._hooks = hooks
        self._audit = audit
        self.modern = ModernRouter(settings, surface, tools_changed or Changes(), INSTRUCTIONS,
                                   self._modern_context)

    async def handle(self, session: ClientSession, request: Request, peer: Peer | None = None, *,
                     era: Era | None = None) -> dict[str, Any]:
        """Answer `request` in its era: `era` when the transport decided it (an HTTP version
        header), else from the request itself."""
        if (era or classify(request.method, request.params)) is Era.MODERN:
            return await self.modern.handle(request, peer)
        method, params = request.method, request.params
        if not self._settings().serve_legacy:
            # A modern-only gateway: `initialize` learns the versions served; anything else
            # lacks the modern envelope.
            if method == "initialize":
                raise modern.unsupported_version(params.get("protocolVersion"), MODERN_VERSIONS)
            return await self.modern.handle(request, peer)
        if method == "initialize":
            return await self._initialize(session, params)
        if method == "ping":
            return {}
        if method == "tools/list":
            if params.get("cursor") is not None:
                raise ProtocolError(INVALID_PARAMS, "Invalid params: unknown cursor")
            return {"tools": self._surface.list_tools()}
        empty = empty_capability(method)
        if empty is not None:
            return empty
        if method == "tools/call":
            name = params.get("name")
            if not isinstance(name, str) or not name:
                raise ProtocolError(INVALID_PARAMS, 'Invalid params: "name" must be a non-empty string')
            outcome = await self._surface.call(name, params.get("arguments") or {},
                                               self._call_context(session, request, peer))
            return outcome.to_wire()
        raise ProtocolError(METHOD_NOT_FOUND, f"Method not found: {method}")

    def tool_schema(self, name: Any) -> Mapping[str, Any] | None:
        """The inputSchema of a top-level tool (for `Mcp-Param-*` header checks), if listed."""
        return self._surface.tool_schema(name) if isinstance(name, str) else None

    async def respond(self, session: ClientSession, request: Request, peer: Peer | None = None, *,
                      era: Era | None = None) -> dict[str, Any]:
        """The JSON-RPC response to `request`: the one place a failure becomes a JSON-RPC error
        (an unexpected exception is logged and answered -32603 without its text)."""
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

    def _call_context(self, session: ClientSession, request: Request, peer: Peer | None) -> CallContext:
        """A legacy client's call: it is asked (and upstreams' questions reach it) through real
        requests, when it declared the capability and the transport carries requests."""
        progress, forward = _progress_and_meta(request, peer)
        elicitation = session.capabilities.get("elicitation")
        bridged = {"elicitation": elicitation} \
            if isinstance(elicitation, dict) and peer is not None and peer.can_request else {}
        return CallContext(session.id, str(request.id), self._asker(session, peer), progress, forward,
                           bridged_capabilities=bridged,
                           server_requests=self._server_requests(session.capabilities, peer))

    @staticmethod
    def _modern_context(request: Request, peer: Peer | None, *, env: modern.Envelope,
                        resume: Resume | None, ask_user: AskUser | None) -> CallContext:
        """A modern client's call: it answers questions on its retry (MRTR), never by request."""
        progress, forward = _progress_and_meta(request, peer)
        bridged = {"elicitation": dict(env.client_capabilities["elicitation"])} \
            if env.declared("elicitation") else {}
        return CallContext("", str(request.id), ask_user, progress, forward, modern=True,
                           bridged_capabilities=bridged, log_level=env.log_level, resume=resume)

    @staticmethod
    def _server_requests(capabilities: dict[str, Any], peer: Peer | None) -> ServerRequests | None:
        """An upstream's questions to a legacy client: real requests to it when it declared the
        capability and the transport carries requests; otherwise the declined defaults."""
        if peer is None or not peer.can_request:
            return None

        async def forward(method: str, params: dict[str, Any]) -> dict[str, Any]:
            if not bridge.declared(method, capabilities):
                return bridge.declined(method)
            return await peer.request(method, params)

        return forward

    @staticmethod
    def _asker(session: ClientSession, peer: Peer | None) -> AskUser | None:
        """Ask through `elicitation/create` when the client declared the capability."""
        declared = isinstance(session.capabilities.get("elicitation"), dict)
        if peer is None or not peer.can_request or not declared:
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


def _progress_and_meta(request: Request, peer: Peer | None) -> tuple[Progress | None, dict[str, Any] | None]:
    """How to relay upstream progress to the caller (when it gave a token and can be told), and
    the caller's `_meta` to forward upstream (minus protocol-owned keys and its own token)."""
    meta = request.params.get("_meta")
    meta = meta if isinstance(meta, dict) else {}
    token = meta.get("progressToken")
    progress = None
    if peer is not None and isinstance(token, str | int) and not isinstance(token, bool):
        def progress(params: dict[str, Any]) -> None:
            relayed: dict[str, Any] = {k: params[k] for k in ("progress", "total", "message") if k in params}
            peer.notify_nowait("notifications/progress", {**relayed, "progressToken": token})
    forward = {k: v for k, v in meta.items()
               if k != "progressToken" and not k.startswith("io.modelcontextprotocol/")}
    return progress, forward or None
