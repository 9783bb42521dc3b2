"""The WebSocket upstream transport: one JSON-RPC message per text frame, subprotocol `mcp`.

Each `connect()` opens `spec.url` with `trio-websocket` (TLS verified against the system trust
store for wss://), sends the expanded headers (`upstream/remote.py`), and refuses a server that
does not speak the `mcp` subprotocol. A ping every `KEEPALIVE.interval_s` whose pong does not come
back within `KEEPALIVE.timeout_s` ends the stream, so a half-open connection (a peer that vanished
without closing, a frozen process) is noticed like a crashed child.

Frames: a text frame is one message (its UTF-8 bytes); one over `limits.max_message_bytes` is the
framing's `Oversize` marker (its head names the request, so that call fails and the connection
stays up); a binary frame is not a JSON-RPC message under `mcp` and is skipped with a warning.

Only `display_url(url)` (no userinfo, no query: either may hold a credential) is ever logged or raised;
header values never are. trio-websocket and OS errors are mapped here to `SpawnFailed` (from
`connect()`) and `UpstreamError` (from `send()`).
"""

from __future__ import annotations

import math
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from urllib.parse import urlsplit

import structlog
import trio
from trio_websocket import (
    ConnectionClosed,
    ConnectionRejected,
    ConnectionTimeout,
    HandshakeError,
    WebSocketConnection,
    wrap_client_stream,
)

from tfunnel.config.expose import UpstreamSpec
from tfunnel.errors import UpstreamError
from tfunnel.protocol.framing import OVERSIZE_HEAD, Oversize
from tfunnel.upstream.remote import display_url, expand_headers
from tfunnel.upstream.states import Context
from tfunnel.upstream.transport import MessageStream, Received, SpawnFailed

log = structlog.get_logger("tfunnel.upstream")

SUBPROTOCOL = "mcp"
# Leaving `connect()` sends a close frame and waits this long for the server's, then drops the
# socket: a peer that never answers the close cannot hold up the next incarnation.
CLOSE_TIMEOUT_S = 2.0
# trio-websocket buffers a whole message before handing it over; a frame up to this many times
# the message cap is still read (and failed by its request id), one beyond it makes the library
# close the connection (code 1009) rather than buffer without bound.
FRAME_LIMIT_FACTOR = 4
# Frames buffered between the library's reader and ours (its default of 1 would stall its
# reader, and with it the pongs, behind one slow message).
MESSAGE_QUEUE = 16


@dataclass(frozen=True)
class Keepalive:
    """How a silent peer is noticed: a ping every `interval_s`; no pong within `timeout_s` ends
    the stream."""

    interval_s: float = 20.0
    timeout_s: float = 10.0


# Well under the 60 s idle timeouts common in proxies and load balancers, so the pings also keep
# an idle connection through them.
KEEPALIVE = Keepalive()


class WebSocketStream:
    """One connection's `MessageStream`. It ends when the server closes (or the socket breaks:
    once what came before is read), or at once when a ping goes unanswered (nothing more will
    come); either way `wait_ended` returns."""

    def __init__(self, ws: WebSocketConnection, *, upstream_id: str, peer: str, max_message_bytes: int,
                 keepalive: Keepalive) -> None:
        self._ws = ws
        self._id = upstream_id
        self._peer = peer
        self._cap = max_message_bytes
        self._keepalive = keepalive
        # Frames go out through one writer task: a sender cancelled while the socket is slow
        # hands over a whole frame or nothing, never half a frame on the wire.
        self._outbox, self._queued = trio.open_memory_channel[str](0)
        self._ended = False
        self._why: str | None = None
        self._gone = trio.Event()
        self._reading: trio.CancelScope | None = None

    @property
    def pid(self) -> int | None:
        return None

    @property
    def peer(self) -> str:
        return self._peer

    async def send(self, message: bytes) -> None:
        text = message.rstrip(b"\n").decode("utf-8", "replace")
        try:
            await self._outbox.send(text)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise UpstreamError(f"upstream {self._id!r} closed the connection") from exc

    async def receive(self) -> Received | None:
        if self._ended:
            return None
        with trio.CancelScope() as self._reading:
            while True:
                try:
                    frame = await self._ws.get_message()
                except ConnectionClosed:
                    self._end(None)
                    return None
                if isinstance(frame, bytes):
                    log.warning("upstream sent a binary frame; skipped", upstream=self._id, size=len(frame))
                    continue
                data = frame.encode("utf-8", "replace")
                if len(data) > self._cap:
                    return Oversize(data[:OVERSIZE_HEAD], len(data))
                return data
        return None  # the keep-alive ended the stream while we were reading

    async def wait_ended(self) -> None:
        await self._gone.wait()

    async def wait_closed(self) -> str:
        if self._why is not None:
            return self._why
        reason = self._ws.closed
        if reason is None:
            return "closed the connection"
        text = f": {reason.reason[:100]}" if reason.reason else ""
        return f"closed the connection (code {reason.code}{text})"

    def stderr_tail(self) -> str:
        return ""

    def _end(self, why: str | None) -> None:
        if self._ended:
            return
        self._ended = True
        self._why = why
        self._gone.set()
        if self._reading is not None:
            self._reading.cancel()

    async def write(self) -> None:
        """Send each queued message as one text frame until the connection closes; then every
        sender learns it (`send` raises)."""
        async with self._queued:
            async for text in self._queued:
                try:
                    await self._ws.send_message(text)
                except ConnectionClosed:
                    # Not the end of the stream: what the server sent before closing is still
                    # read, and the reader then learns of the close itself.
                    return

    async def keep_alive(self) -> None:
        """Ping every interval; end the stream when a pong does not come back in time."""
        while True:
            await trio.sleep(self._keepalive.interval_s)
            with trio.move_on_after(self._keepalive.timeout_s) as waiting:
                try:
                    await self._ws.ping()
                except ConnectionClosed:
                    return  # the reader learns of the close (after what was sent before it)
            if waiting.cancelled_caught:
                self._end(f"did not answer a ping within {self._keepalive.timeout_s:g} s")
                return


class WebSocketTransport:
    """Each `connect()` opens a new WebSocket connection to `spec.url`."""

    def __init__(self, spec: UpstreamSpec, ctx: Context, *, keepalive: Keepalive = KEEPALIVE) -> None:
        self._spec = spec
        self._ctx = ctx
        self._keepalive = keepalive

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[MessageStream]:
        spec, ctx = self._spec, self._ctx
        if not spec.url:
            raise SpawnFailed(f"upstream {spec.id!r}: a websocket upstream needs a url", permanent=True,
                              final=True)
        peer = display_url(spec.url)
        headers = expand_headers(spec.id, spec.headers, ctx.env)
        timeout_s = spec.request_timeout_ms / 1000
        # The whole opening (TCP, TLS, the upgrade) is bounded: a server that takes the connection
        # and never answers is a failed attempt, not a hang.
        with trio.CancelScope(deadline=trio.current_time() + timeout_s) as connecting:
            tcp = await _open_tcp(spec.id, spec.url, peer)
        if connecting.cancelled_caught:
            raise _refusal(ConnectionTimeout(), spec.id, peer, timeout_s)
        opened = False
        try:
            # We own the socket (not the library): it is closed below however the connection
            # ends, also when the handshake is cut short.
            with trio.CancelScope(deadline=connecting.deadline) as connecting:
                async with trio.open_nursery() as nursery:
                    ws = await wrap_client_stream(
                        nursery, tcp, _host_header(spec.url), _resource(spec.url), subprotocols=[SUBPROTOCOL],
                        extra_headers=[(k.encode("utf-8"), v.encode("utf-8")) for k, v in headers.items()],
                        message_queue_size=MESSAGE_QUEUE,
                        max_message_size=ctx.limits.max_message_bytes * FRAME_LIMIT_FACTOR)
                    opened = True
                    connecting.deadline = math.inf
                    if ws.subprotocol != SUBPROTOCOL:
                        raise _Unfit()
                    stream = WebSocketStream(ws, upstream_id=spec.id, peer=peer,
                                             max_message_bytes=ctx.limits.max_message_bytes,
                                             keepalive=self._keepalive)
                    nursery.start_soon(stream.write)
                    nursery.start_soon(stream.keep_alive)
                    try:
                        yield stream
                    finally:
                        await _close(ws)
                    nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            unfit, _ = group.split(_Unfit)
            if unfit is not None:
                raise SpawnFailed(f"upstream {spec.id!r}: {peer} did not accept the {SUBPROTOCOL!r} "
                                  "WebSocket subprotocol", permanent=True) from None
            failure, rest = group.split(_OPENING_ERRORS)
            if opened or failure is None or rest is not None:
                raise
            raise _refusal(_first(failure), spec.id, peer, timeout_s) from None
        finally:
            with trio.CancelScope(shield=True):
                await tcp.aclose()
        if not opened:
            raise _refusal(ConnectionTimeout(), spec.id, peer, timeout_s)


class _Unfit(Exception):
    """The server accepted the connection without the `mcp` subprotocol (raised inside the
    nursery, turned into a `SpawnFailed` outside it)."""


TcpStream = trio.SocketStream | trio.SSLStream[trio.SocketStream]

# What trio-websocket and the OS raise while a connection is being opened.
_OPENING_ERRORS = (HandshakeError, OSError, trio.BrokenResourceError, ConnectionClosed)


def _first(group: BaseExceptionGroup[BaseException]) -> BaseException:
    leaf: BaseException = group
    while isinstance(leaf, BaseExceptionGroup):
        leaf = leaf.exceptions[0]
    return leaf


async def _open_tcp(upstream_id: str, url: str, peer: str) -> TcpStream:
    """The TCP (and for wss://, TLS) connection to `url`'s host; failures as `SpawnFailed`."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        port = parts.port or (443 if parts.scheme == "wss" else 80)
        if parts.scheme != "wss":
            return await trio.open_tcp_stream(host, port)
        # Verified against the system trust store, hostname checked.
        tls = await trio.open_ssl_over_tcp_stream(host, port, ssl_context=ssl.create_default_context(),
                                                  https_compatible=True)
        try:
            await tls.do_handshake()
        except BaseException:
            with trio.CancelScope(shield=True):
                await tls.aclose()
            raise
        return tls
    except (OSError, trio.BrokenResourceError, ValueError) as exc:
        raise _refusal(exc, upstream_id, peer, 0) from exc


def _host_header(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    return host if parts.port in (None, 80, 443) else f"{host}:{parts.port}"


def _resource(url: str) -> str:
    """The request target: the path (at least "/") and the query, as the URL has them."""
    parts = urlsplit(url)
    return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


async def _close(ws: WebSocketConnection) -> None:
    """Send the close frame and wait for the server's, shielded and bounded: leaving `connect()`
    closes the connection even when cancelled, and a silent peer cannot hold it up."""
    with trio.CancelScope(shield=True) as closing:
        closing.deadline = trio.current_time() + CLOSE_TIMEOUT_S
        with suppress(ConnectionClosed, OSError, trio.BrokenResourceError):
            await ws.aclose()


def _refusal(exc: BaseException, upstream_id: str, peer: str, timeout_s: float) -> SpawnFailed:
    """What a failed opening (trio-websocket's or the OS's error) means for the supervisor."""
    if isinstance(exc, ConnectionTimeout):
        return SpawnFailed(f"upstream {upstream_id!r}: {peer} did not complete the WebSocket handshake "
                           f"within {timeout_s:g} s", permanent=False)
    if isinstance(exc, ConnectionRejected):
        return SpawnFailed(f"upstream {upstream_id!r}: {peer} refused the WebSocket connection "
                           f"(HTTP {exc.status_code})", permanent=True)
    # trio reports a failed TLS handshake as a broken stream, caused by the ssl error.
    cause = exc.__cause__ if isinstance(exc, (HandshakeError, trio.BrokenResourceError)) and exc.__cause__ \
        else exc
    if isinstance(cause, ssl.SSLCertVerificationError):
        return SpawnFailed(f"upstream {upstream_id!r}: {peer}: TLS certificate not trusted "
                           f"({cause.verify_message})", permanent=True)
    if isinstance(exc, ValueError):  # a URL the library cannot use: only an edit fixes it
        return SpawnFailed(f"upstream {upstream_id!r}: cannot connect to {peer}: {exc}", permanent=True,
                           final=True)
    what = cause.strerror if isinstance(cause, OSError) and cause.strerror else type(cause).__name__
    return SpawnFailed(f"upstream {upstream_id!r}: cannot connect to {peer}: {what}", permanent=False)
