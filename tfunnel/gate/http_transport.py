"""A lean HTTP/1.1 transport for the http hooks' `httpx2.AsyncClient`: h11 over trio streams,
kept-alive connections per origin.

Why not httpx2's default transport: an http hook is one small POST per gated call, and the
default connection pool (httpcore2) spends about 0.4 ms of CPU on each on a loaded 2-core machine
where the same exchange written with h11 on a trio stream spends about 0.14 ms (bench/README.md,
"Hooks"): the difference is the whole budget of a hook (issue 18: ≤ 1 ms added at p50). The client
in front of it (headers, URL, timeouts, exceptions) stays httpx2's.

What it does: HTTP/1.1 only; `https` with certificate verification (the system's trust store);
one request at a time per connection; a connection is reused while both sides keep it open and
idle for less than `keepalive_s`, and is tested for an EOF the server sent before each reuse; a
response not read to its end (a body over the cap, a cancelled call) closes its connection.
Errors are httpx2's: `ConnectError` when no connection could be made, `RemoteProtocolError` for
a broken answer, `ReadError`/`WriteError` for a connection that failed in between.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import AsyncIterator

import h11
import httpx2
import trio

# The most bytes read from a connection at once.
READ_CHUNK = 65536

Origin = tuple[str, str, int]


class _Stale(Exception):
    """The connection was closed before any of the answer arrived: the request was not processed."""


class _Connection:
    def __init__(self, stream: trio.abc.Stream, socket: trio.socket.SocketType) -> None:
        self.stream = stream
        self.socket = socket
        self.h11 = h11.Connection(h11.CLIENT)
        self.idle_since = time.monotonic()
        self.answered = False  # some of the current request's answer arrived

    def reusable(self, now: float, keepalive_s: float) -> bool:
        """Idle not too long, and the server has not closed it (an idle socket that is readable
        holds an EOF or garbage: either way it cannot carry a request)."""
        return now - self.idle_since < keepalive_s and not self.socket.is_readable()

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True):
            await trio.aclose_forcefully(self.stream)


class HookTransport(httpx2.AsyncBaseTransport):
    def __init__(self, *, max_idle: int, keepalive_s: float) -> None:
        self._idle: dict[Origin, list[_Connection]] = {}
        self._max_idle = max_idle
        self._keepalive_s = keepalive_s
        self._ssl: ssl.SSLContext | None = None

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        url = request.url
        # The host as it goes on the wire (IDNA-encoded; an IPv6 literal without its brackets).
        host = url.raw_host.decode("ascii").strip("[]")
        origin = (url.scheme, host, url.port or (443 if url.scheme == "https" else 80))
        body = await request.aread()
        head = [(name, value) for name, value in request.headers.raw if name.lower() != b"content-length"]
        head.append((b"Content-Length", str(len(body)).encode()))
        connection = await self._take(origin)
        if connection is not None:
            try:
                return await self._exchange(origin, connection, request, head, body)
            except _Stale:
                pass  # the server closed the kept-alive connection as we sent: once more, anew
        connection = await self._connect(origin, request)
        try:
            return await self._exchange(origin, connection, request, head, body)
        except _Stale as exc:
            raise httpx2.RemoteProtocolError(str(exc), request=request) from exc

    async def _exchange(self, origin: Origin, connection: _Connection, request: httpx2.Request,
                        head: list[tuple[bytes, bytes]], body: bytes) -> httpx2.Response:
        """Send the request and read the response head; raises `_Stale` when the connection was
        found closed before any of the answer arrived (nothing was processed)."""
        try:
            data = connection.h11.send(h11.Request(method=request.method, target=request.url.raw_path,
                                                   headers=head)) or b""
            if body:
                data += connection.h11.send(h11.Data(data=body)) or b""
            data += connection.h11.send(h11.EndOfMessage()) or b""
            try:
                await connection.stream.send_all(data)
            except (OSError, trio.BrokenResourceError) as exc:
                raise _Stale(f"the connection failed while sending ({type(exc).__name__})") from exc
            event = await _next(connection, request)
            if not isinstance(event, h11.Response):
                raise httpx2.RemoteProtocolError("no response head", request=request)
        except h11.LocalProtocolError as exc:  # a header h11 would not send
            await connection.aclose()
            raise httpx2.LocalProtocolError(f"the request cannot be sent: {exc}", request=request) from exc
        except BaseException:
            await connection.aclose()
            raise
        return httpx2.Response(event.status_code, headers=event.headers, request=request,
                               stream=_Body(self, origin, connection, request),
                               extensions={"http_version": b"HTTP/1.1", "reason_phrase": event.reason})

    async def aclose(self) -> None:
        idle, self._idle = self._idle, {}
        for connections in idle.values():
            for connection in connections:
                await connection.aclose()

    async def _take(self, origin: Origin) -> _Connection | None:
        """A kept-alive connection to `origin` that can carry a request (stale ones are closed)."""
        connections = self._idle.get(origin, [])
        now = time.monotonic()
        while connections:
            connection = connections.pop()
            if connection.reusable(now, self._keepalive_s):
                return connection
            await connection.aclose()
        return None

    def give_back(self, origin: Origin, connection: _Connection) -> bool:
        """Keep `connection` for the next request if it can carry one; False: close it."""
        ours, theirs = connection.h11.our_state, connection.h11.their_state
        if ours is not h11.DONE or theirs is not h11.DONE:
            return False
        connections = self._idle.setdefault(origin, [])
        if len(connections) >= self._max_idle:
            return False
        connection.h11.start_next_cycle()
        connection.idle_since = time.monotonic()
        connection.answered = False
        connections.append(connection)
        return True

    async def _connect(self, origin: Origin, request: httpx2.Request) -> _Connection:
        scheme, host, port = origin
        try:
            tcp = await trio.open_tcp_stream(host, port)
        except OSError as exc:
            raise httpx2.ConnectError(f"could not connect ({type(exc).__name__})", request=request) from exc
        if scheme != "https":
            return _Connection(tcp, tcp.socket)
        if self._ssl is None:
            self._ssl = ssl.create_default_context()
            self._ssl.set_alpn_protocols(["http/1.1"])
        tls = trio.SSLStream(tcp, self._ssl, server_hostname=host, https_compatible=True)
        try:
            await tls.do_handshake()
        except (OSError, trio.BrokenResourceError) as exc:
            await trio.aclose_forcefully(tls)
            raise httpx2.ConnectError(f"TLS failed ({type(exc).__name__})", request=request) from exc
        return _Connection(tls, tcp.socket)


class _Body(httpx2.AsyncByteStream):
    """A response body, read from its connection as it is iterated; the connection goes back to
    the pool after the last byte, and is closed if the body is left unread."""

    def __init__(self, transport: HookTransport, origin: Origin, connection: _Connection,
                 request: httpx2.Request) -> None:
        self._transport = transport
        self._origin = origin
        self._connection: _Connection | None = connection
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        connection = self._connection
        if connection is None:
            return
        while True:
            event = await _next(connection, self._request)
            if isinstance(event, h11.Data):
                yield bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                break
        self._connection = None
        if not self._transport.give_back(self._origin, connection):
            await connection.aclose()

    async def aclose(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            await connection.aclose()


async def _next(connection: _Connection, request: httpx2.Request) -> object:
    """The next h11 event of the response, reading from the connection as needed."""
    while True:
        try:
            event = connection.h11.next_event()
        except h11.RemoteProtocolError as exc:
            if not connection.answered:  # closed with nothing said (h11 calls that a protocol error)
                raise _Stale("the server closed the connection without an answer") from exc
            raise httpx2.RemoteProtocolError(f"a broken answer: {exc}", request=request) from exc
        if event is h11.NEED_DATA:
            try:
                chunk = await connection.stream.receive_some(READ_CHUNK)
            except (OSError, trio.BrokenResourceError) as exc:
                if not connection.answered:
                    raise _Stale(f"the connection failed while reading ({type(exc).__name__})") from exc
                raise httpx2.ReadError(f"the connection failed while reading ({type(exc).__name__})",
                                       request=request) from exc
            connection.answered = connection.answered or bool(chunk)
            connection.h11.receive_data(bytes(chunk))
            continue
        if isinstance(event, h11.ConnectionClosed):
            if connection.h11.their_state is h11.CLOSED and not connection.answered:
                raise _Stale("the server closed the connection without an answer")
            raise httpx2.RemoteProtocolError("the server closed the connection mid-answer", request=request)
        if isinstance(event, h11.InformationalResponse):
            continue  # a 1xx: the answer follows
        return event
