"""The HTTP face: an ASGI app (served by hypercorn's trio worker) for Streamable HTTP and operations.

Routes: `POST/GET/DELETE /mcp` (Streamable HTTP, legacy sessions), `GET /health`, `/livez`,
`/readyz`. Every request first passes the DNS-rebinding guard (`Host` must be a loopback name,
421 otherwise) and the `Origin` check (present and not loopback → 403); `serve.loopback` says
which names those are. Bodies are capped (413) and must arrive in time (408). The operations
endpoints (`/health`, `/livez`, `/readyz`, `/metrics`) are outside the concurrency cap and are
served through the whole drain at shutdown, while new MCP requests get 503.
With authentication on (`auth/auth.config.json`), `tfunnel.auth.gate` screens each request after
those checks (the `Host` may then also be the configured audience's authority, an `Origin` its
origin): it serves the metadata documents and refuses requests without a good token, before
anything here counts them or mints a session. A session minted with a token belongs to its
principal (another principal's token finds no such session: 404), and a stream opened with one ends
at its expiry (`auth.gate.principal_of`, `stream_deadline`).
Every error body is a JSON-RPC error object (the OAuth refusals' are RFC 6750's); only `/livez`
and `/readyz` answer text. A client that disconnects while its call runs cancels that call through
the tree (hooks, tool process groups, upstream requests).
"""

from __future__ import annotations

import contextlib
import math
import time
from typing import Any

import structlog
import trio

from tfunnel.auth.gate import AuthGate, principal_of, stream_deadline, token_facts
from tfunnel.errors import ProtocolError
from tfunnel.home.live import Live
from tfunnel.observe.observer import CallTally
from tfunnel.observe.telemetry import Telemetry
from tfunnel.observe.tokens import Counter
from tfunnel.protocol import jsonrpc, modern
from tfunnel.protocol.eras import LEGACY_VERSIONS, MODERN_VERSIONS, Era
from tfunnel.protocol.headers import check_modern_headers, check_param_headers
from tfunnel.protocol.jsonrpc import Notification, Request
from tfunnel.protocol.modern import HEADER_MISMATCH
from tfunnel.protocol.session import NO_TOKEN, ClientSession, TokenFacts
from tfunnel.route import Router
from tfunnel.route.eras import Refusal
from tfunnel.serve import health
from tfunnel.serve.asgi import (
    SSE_HEADERS,
    ChannelPeer,
    EventStream,
    Receive,
    Scope,
    Send,
    end_on,
    end_on_disconnect,
    json_response,
    lifespan,
    plain,
    read_message,
    rpc_error,
    sse,
)
from tfunnel.serve.connection import Connection, Service
from tfunnel.serve.loopback import is_loopback_authority, is_loopback_origin
from tfunnel.serve.metrics import Metrics
from tfunnel.serve.sessions import HttpSession, SessionStore
from tfunnel.serve.sse_legacy import LegacySse
from tfunnel.upstream.supervisor import Supervisor

log = structlog.get_logger("tfunnel.http")

BODY_CAP = 4 * 1024 * 1024
REAP_EVERY_S = 60.0
# The operations endpoints: cheap, bounded answers that must come while MCP traffic saturates the
# cap (an orchestrator would otherwise restart a gateway that is merely busy) and while it drains.
OPS_PATHS = frozenset({"/health", "/livez", "/readyz", "/metrics"})
_CLOSE = [(b"connection", b"close")]
# SSE comment lines keep proxies and clients from timing out an idle notification stream.
KEEPALIVE_S = 15.0


def _single(name: str) -> bool:
    """Headers that must appear at most once: the ones we check against the body or the host."""
    return name in ("host", "origin", "mcp-protocol-version", "mcp-method", "mcp-name",
                    "mcp-session-id") or name.startswith("mcp-param-")


class HttpApp:
    def __init__(self, router: Router, live: Live, supervisor: Supervisor, tally: CallTally,
                 sessions: SessionStore, metrics: Metrics, auth: AuthGate | None = None, *,
                 telemetry: Telemetry | None = None) -> None:
        self.metrics = metrics
        self.telemetry = telemetry or Telemetry(Counter("estimate"))
        self.auth = auth  # None: authentication is off
        self.router = router
        self.live = live
        self.supervisor = supervisor
        self.tally = tally
        self.sessions = sessions
        self.stopping = trio.Event()  # set at SIGTERM: streams end, /readyz and /health say so
        self.stopped = trio.Event()  # set once the server has stopped
        limits = live.settings.limits  # toolfunnel.json is read at start only
        # HTTP requests handled at once (streams included), operations endpoints aside; beyond
        # this new ones get 503 rather than piling up (`limits.maxHttpRequests`).
        self.max_requests = limits.max_http_requests
        self.body_timeout_s = limits.body_read_timeout_s
        self.write_timeout_s = limits.write_timeout_s
        # One connection core for every session and request; the metrics observe each request.
        self.service = Service(router, live.tools_changed, lambda: live.settings.serve_legacy, metrics)
        self.legacy_sse = LegacySse(self.service, router.end_session, sessions, self.stopping, BODY_CAP,
                                    self.body_timeout_s)
        self._active = 0
        self._drained = trio.Event()  # set once stopping and no MCP request is left
        self._started_at = time.monotonic()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        send = self._closing_once_stopping(send)
        headers: dict[str, str] = {}
        for raw_name, raw_value in scope["headers"]:
            name = raw_name.decode("latin-1").lower()
            if name in headers and _single(name):
                # Two values where one is checked: a proxy might act on the other one.
                await rpc_error(send, 400, None, HEADER_MISMATCH, f"Header mismatch: {name} is repeated")
                return
            headers[name] = raw_value.decode("latin-1")
        public = self.auth.config if self.auth is not None else None
        host = headers.get("host", "")
        if not is_loopback_authority(host) and not (public and public.is_public_authority(host)):
            await rpc_error(send, 421, None, jsonrpc.INVALID_REQUEST,
                            "Misdirected Request: the Host header must name a loopback address "
                            "(127.0.0.0/8, [::1]) or localhost, with an optional port")
            return
        origin = headers.get("origin")
        if origin is not None and not is_loopback_origin(origin) and \
                not (public and public.is_public_origin(origin)):
            await rpc_error(send, 403, None, jsonrpc.INVALID_REQUEST,
                            "Forbidden: Origin not allowed; only http(s) origins on a loopback address "
                            "(127.0.0.0/8, [::1]) or localhost may call this gateway")
            return
        if self.auth is not None and await self.auth.screen(scope, send):
            return
        if scope["path"] in OPS_PATHS:
            await self._route(scope, headers, receive, send)
            return
        if self.stopping.is_set() and not self._answers_a_session(scope, headers):
            await _stopping(send)
            return
        if self._active >= self.max_requests:
            await rpc_error(send, 503, None, jsonrpc.INTERNAL_ERROR,
                            "Service Unavailable: too many concurrent requests")
            return
        self._active += 1
        try:
            await self._route(scope, headers, receive, send)
        finally:
            self._active -= 1
            if self._active == 0 and self.stopping.is_set():
                self._drained.set()

    def _closing_once_stopping(self, send: Send) -> Send:
        """`send`, except that a response started once the gateway is stopping ends its
        connection (`Connection: close`). A proxy then keeps no idle connection to this instance
        that the exit would close under a request it is sending: a POST that met such a close
        could not be retried elsewhere (it may have run)."""
        async def closing(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start" and self.stopping.is_set():
                headers = list(message.get("headers", ()))
                if not any(name.lower() == b"connection" for name, _ in headers):
                    message = {**message, "headers": [*headers, *_CLOSE]}
            await send(message)
        return closing

    def _answers_a_session(self, scope: Scope, headers: dict[str, str]) -> bool:
        """A POST in an open session: during the drain it may still carry what a call in flight
        needs (a cancel, an answer to our question); a new request in it is refused in `_post`."""
        session_id = headers.get("mcp-session-id")
        return (scope["path"] == "/mcp" and scope["method"] == "POST" and session_id is not None
                and self.sessions.get(session_id, principal_of(scope)) is not None)

    async def drain(self, grace_s: float) -> None:
        """After `stopping` is set: return once no MCP request is left, or after `grace_s`.
        Meanwhile the operations endpoints keep answering (503 `stopping` from /health)."""
        if self._active == 0:
            return
        with trio.move_on_after(grace_s):
            await self._drained.wait()

    async def _route(self, scope: Scope, headers: dict[str, str], receive: Receive, send: Send) -> None:
        path, method = scope["path"], scope["method"]
        if path == "/mcp":
            handler = {"POST": self._post, "GET": self._get, "DELETE": self._delete}.get(method)
            if handler is None:
                await rpc_error(send, 405, None, jsonrpc.INVALID_REQUEST,
                                f"Method Not Allowed: /mcp takes POST, GET or DELETE, not {method}")
                return
            await handler(scope, headers, receive, send)
        elif path in ("/sse", "/messages", "/messages/") and not self.live.settings.serve_legacy:
            await rpc_error(send, 405, None, jsonrpc.INVALID_REQUEST,
                            "Method Not Allowed: this gateway serves modern MCP only")
        elif path == "/sse" and method == "GET":
            await self.legacy_sse.stream(receive, send, principal_of(scope), stream_deadline(scope),
                                         token_facts(scope))
        elif path in ("/messages", "/messages/") and method == "POST":
            await self.legacy_sse.post(scope.get("query_string", b"").decode("latin-1"), receive, send,
                                       principal_of(scope))
        elif path == "/health" and method == "GET":
            await self._health(send)
        elif path == "/metrics" and method == "GET":
            body, content_type = self.metrics.render(upstreams=self.supervisor.statistics(),
                                                     sessions=len(self.sessions),
                                                     tokens=self.telemetry.statistics())
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", content_type.encode())]})
            await send({"type": "http.response.body", "body": body})
        elif path == "/livez" and method == "GET":
            await plain(send, 200, b"ok")
        elif path == "/readyz" and method == "GET":
            ready = self.live.started.is_set() and not self.stopping.is_set()
            await plain(send, 200 if ready else 503, b"ready" if ready else b"not ready")
        else:
            await rpc_error(send, 404, None, jsonrpc.INVALID_REQUEST, f"Not Found: {method} {path}")

    # --- /mcp -----------------------------------------------------------------------------------

    async def _post(self, scope: Scope, headers: dict[str, str], receive: Receive, send: Send) -> None:
        accept = headers.get("accept", "")
        if "application/json" not in accept or "text/event-stream" not in accept:
            await rpc_error(send, 406, None, jsonrpc.INVALID_REQUEST,
                             "Not Acceptable: Accept must list application/json and text/event-stream")
            return
        message = await read_message(receive, send, BODY_CAP, self.body_timeout_s)
        if message is None:
            return
        # Per request (PROTOCOL.md §9): the body's `_meta` version, or a non-legacy header.
        era = self.service.era(message, headers.get("mcp-protocol-version"))
        if isinstance(message, Request) and self.stopping.is_set():
            # No new work while draining, whatever its era or session (notifications and answers
            # still pass: calls in flight may need them).
            await _stopping(send)
            return
        if not isinstance(message, Request):
            if era is not Era.LEGACY:  # modern: HTTP cancels by closing the stream; answers are stray
                await plain(send, 202, b"")
                return
        elif isinstance(era, Refusal):  # a legacy initialize at a modern-only gateway
            await self._exchange(self._stateless(), message, receive, send, era=era)
            return
        elif era is Era.MODERN:
            await self._modern(headers, message, receive, send, stream_deadline(scope), token_facts(scope))
            return
        elif message.method == "initialize":
            await self._initialize(message, send, principal_of(scope), token_facts(scope))
            return
        session = await self._session(scope, headers, send)
        if session is None:
            return
        if not isinstance(message, Request):
            if isinstance(message, Notification):
                session.connection.notification(message)  # a cancel targets this session's call
            else:
                session.connection.response(message)  # the client's answer to one of our requests
            await plain(send, 202, b"")
            return
        refused = session.connection.admit(message)
        if refused is not None:
            await json_response(send, 400, refused)
            return
        await self._exchange(session.connection, message, receive, send, session, era=Era.LEGACY,
                             deadline=stream_deadline(scope))

    def _stateless(self, token: TokenFacts = NO_TOKEN) -> Connection:
        """The connection of one modern request: no session is minted or consulted (`token`:
        its bearer token's subject and scopes)."""
        client = ClientSession(id="modern", token_subject=token[0], token_scopes=token[1])
        return Connection(self.service, client, ending=self.stopping, bind_session=False)

    async def _modern(self, headers: dict[str, str], request: Request, receive: Receive, send: Send,
                      deadline: float, token: TokenFacts) -> None:
        """A stateless request: no session is minted or consulted (`Mcp-Session-Id` is ignored)."""
        connection = self._stateless(token)
        try:
            envelope = modern.envelope(request.params, supported=None)
            check_modern_headers(headers, request.method, request.params, envelope.protocol_version)
            if request.method == "tools/call":
                schema = self.router.tool_schema(request.params.get("name"), envelope.client_info,
                                                 connection.session)
                arguments = request.params.get("arguments")
                if schema is not None and isinstance(arguments, dict):
                    check_param_headers(headers, schema, arguments)
        except ProtocolError as exc:
            await json_response(send, modern.http_status(exc.code),
                                jsonrpc.error_message(request.id, exc.code, exc.message, exc.data))
            return
        await self._exchange(connection, request, receive, send, era=Era.MODERN, deadline=deadline)

    async def _initialize(self, request: Request, send: Send, principal: str | None,
                          token: TokenFacts) -> None:
        session = await self.sessions.create(self._connect, principal, token)
        if session is None:
            await rpc_error(send, 503, request.id, jsonrpc.INTERNAL_ERROR,
                            "Too many sessions: every session has a call or stream open")
            return
        # In flight while it initializes, so busy (SessionStart hooks may take a while): another
        # initialize at the cap must not evict a session before its client has even heard its id.
        reply = await session.connection.answer(request, None, era=Era.LEGACY)
        if reply is None or "error" in reply:
            self.sessions.remove(session.client.id)
        if reply is None:  # the session was closed under it (the gateway is stopping)
            await _stopping(send)
            return
        if "error" in reply:
            await json_response(send, 200, reply)
            return
        await json_response(send, 200, reply, [(b"mcp-session-id", session.client.id.encode())])

    def _connect(self, client: ClientSession) -> Connection:
        # A Streamable HTTP session answers each request on that request's own response.
        return Connection(self.service, client, ending=self.stopping)

    async def _session(self, scope: Scope, headers: dict[str, str], send: Send) -> HttpSession | None:
        session_id = headers.get("mcp-session-id")
        if not session_id:
            await rpc_error(send, 400, None, jsonrpc.INVALID_REQUEST, "Bad Request: Missing session ID")
            return None
        # Another principal's session does not exist for this token (404, never revealed).
        session = self.sessions.get(session_id, principal_of(scope))
        if session is None:
            await rpc_error(send, 404, None, jsonrpc.INVALID_REQUEST, "Session not found")
            return None
        version = headers.get("mcp-protocol-version")
        if version is not None and version not in LEGACY_VERSIONS:
            await rpc_error(send, 400, None, jsonrpc.INVALID_REQUEST,
                             f"Bad Request: unsupported MCP-Protocol-Version {version!r}; supported: "
                             + ", ".join(LEGACY_VERSIONS))
            return None
        return session

    async def _exchange(self, connection: Connection, request: Request, receive: Receive, send: Send,
                        session: HttpSession | None = None, *, era: Era | Refusal,
                        deadline: float = math.inf) -> None:
        """Answer one request: JSON, or SSE when it streams (progress, listen, or a legacy
        session's call that may ask the client something); a stream ends at `deadline` (its
        token's expiry). A client that disconnects cancels the call through the tree and gets
        nothing."""
        client = connection.session
        meta = request.params.get("_meta")
        asks = session is not None and request.method == "tools/call" and any(
            isinstance(client.capabilities.get(c), dict) for c in ("elicitation", "sampling", "roots"))
        streamed = asks or (isinstance(meta, dict) and "progressToken" in meta) or \
            request.method == "subscriptions/listen"
        out, queued = trio.open_memory_channel[dict[str, Any]](64) if streamed else (None, None)
        peer = ChannelPeer(out, self.stopping, connection.outbound if session is not None else None)
        scope = trio.CancelScope(deadline=deadline if streamed else math.inf)
        reply: dict[str, Any] | None = None
        stream = EventStream(send)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(end_on_disconnect, receive, scope,
                                   "client disconnected; cancelling its call")
                if queued is not None:
                    nursery.start_soon(stream.pump, queued)
                reply = await connection.answer(request, peer, era=era, scope=scope)
                if out is not None:
                    await out.aclose()  # the stream task writes what is queued, then ends
                    await stream.done.wait()
                if scope.cancel_called:
                    reply = None  # cancelled: nothing is sent for it
                nursery.cancel_scope.cancel()
        finally:
            if session is not None:
                self.sessions.touch(session.client.id)  # used until now, not since it began
        if stream.started:
            if reply is not None:
                await send({"type": "http.response.body", "body": sse(reply), "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        elif reply is not None:
            error = reply.get("error")
            # Errors of the modern era (and refusals of a modern-only gateway) carry an HTTP status.
            status = modern.http_status(error["code"]) if error and era is not Era.LEGACY else 200
            await json_response(send, status, reply)
        else:
            # Cancelled (by notifications/cancelled, or the client left): no JSON-RPC response is
            # sent, but HTTP still needs an answer; if the client is gone this goes nowhere.
            with contextlib.suppress(OSError, trio.BrokenResourceError, trio.ClosedResourceError):
                await plain(send, 204, b"")

    async def _legacy_only(self, headers: dict[str, str], send: Send) -> bool:
        """GET and DELETE exist only for legacy sessions: a modern client or a modern-only
        gateway gets 405 (PROTOCOL.md §3.6)."""
        if self.service.era(None, headers.get("mcp-protocol-version")) is Era.MODERN:
            await rpc_error(send, 405, None, jsonrpc.INVALID_REQUEST,
                            "Method Not Allowed: modern MCP is POST only", [(b"allow", b"POST")])
            return True
        return False

    async def _get(self, scope: Scope, headers: dict[str, str], receive: Receive, send: Send) -> None:
        if await self._legacy_only(headers, send):
            return
        if "text/event-stream" not in headers.get("accept", ""):
            await rpc_error(send, 405, None, jsonrpc.INVALID_REQUEST,
                            "Method Not Allowed: GET needs Accept: text/event-stream")
            return
        session = await self._session(scope, headers, send)
        if session is None:
            return
        session.streams += 1
        try:
            await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
            async with trio.open_nursery() as nursery:
                nursery.cancel_scope.deadline = stream_deadline(scope)  # the token's expiry
                nursery.start_soon(end_on_disconnect, receive, nursery.cancel_scope)
                nursery.start_soon(end_on, self.stopping, nursery.cancel_scope)
                nursery.start_soon(end_on, session.closed, nursery.cancel_scope)
                await self._notifications(session.connection, send)
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                await send({"type": "http.response.body", "body": b""})
        finally:
            session.streams -= 1
            self.sessions.touch(session.client.id)

    @staticmethod
    async def _notifications(connection: Connection, send: Send) -> None:
        async def deliver(note: dict[str, Any]) -> None:
            await send({"type": "http.response.body", "body": sse(note), "more_body": True})

        async def keep_alive() -> None:
            await send({"type": "http.response.body", "body": b": keep-alive\n\n", "more_body": True})

        # A GET stream is opened by a client that holds its session id, so its `initialize` was
        # answered: initialized or not, it hears of every change (`Connection.list_changed`).
        await connection.list_changed(deliver, idle_s=KEEPALIVE_S, on_idle=keep_alive)

    async def _delete(self, scope: Scope, headers: dict[str, str], receive: Receive, send: Send) -> None:
        if await self._legacy_only(headers, send):
            return
        session = await self._session(scope, headers, send)
        if session is None:
            return
        self.sessions.remove(session.client.id)
        await self.router.end_session(session.client)
        await plain(send, 200, b"")

    async def reap_idle_sessions(self) -> None:
        """Forget idle sessions every minute; end each session the store forgets (expired, or
        evicted at the cap) as DELETE does (Stop hooks, audit record). Runs until cancelled."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.sessions.run_ends, self.router.end_session)
            while True:
                await trio.sleep(REAP_EVERY_S)
                await self.sessions.expire()

    # --- operations -----------------------------------------------------------------------------

    def protocol_versions(self) -> list[str]:
        legacy = list(reversed(LEGACY_VERSIONS)) if self.live.settings.serve_legacy else []
        return [*reversed(MODERN_VERSIONS), *legacy]

    async def _health(self, send: Send) -> None:
        statistics = self.supervisor.statistics()
        wrap = self.live.catalog.wrap
        status = health.overall_status(started=self.live.started.is_set(), stopping=self.stopping.is_set(),
                                       upstreams=statistics, config_errors=self.live.errors,
                                       wrapped=wrap.upstream if wrap is not None else None)
        document = health.health_document(
            status=status, server_name=self.live.settings.server_name,
            server_version=self.live.settings.server_version,
            uptime_s=time.monotonic() - self._started_at, protocol_versions=self.protocol_versions(),
            upstreams=statistics, config_errors=self.live.errors, config_warnings=self.live.warnings,
            calls=health.CallCounts(self.tally.total, self.tally.errors, self.tally.denied),
            sessions=len(self.sessions),
            listen_streams=self.sessions.streams() + self.router.modern.listening,
            held={upstream: list(keys) for upstream, keys in self.live.holds().items()},
            wrap=(wrap.upstream, wrap.server) if wrap is not None else None,
            tokens=self.telemetry.statistics(), instance=self.sessions.instance)
        await json_response(send, health.http_status(status), document)


async def _stopping(send: Send) -> None:
    await rpc_error(send, 503, None, jsonrpc.INTERNAL_ERROR, "Service Unavailable: the gateway is stopping",
                    _CLOSE)
