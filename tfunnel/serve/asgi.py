"""Small ASGI helpers shared by the HTTP transports: responses, bodies, SSE framing, watchers."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import structlog
import trio

from tfunnel.protocol import jsonrpc
from tfunnel.protocol.jsonrpc import Message, MessageError
from tfunnel.serve.outbound import OutboundRequests

log = structlog.get_logger("tfunnel.http")

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache"),
               (b"x-accel-buffering", b"no")]
_JSON = [(b"content-type", b"application/json")]


class ChannelPeer:
    """The router's peer for one HTTP request: its messages go into a channel that a task streams
    to the client as SSE. Progress is lossy by design (a full queue drops it); `notify` (listen
    streams) waits. With `outbound` (a legacy session's) the stream also carries server→client
    requests, answered by the client's POSTs; without it `ask` falls back."""

    def __init__(self, channel: trio.MemorySendChannel[dict[str, Any]] | None, ending: trio.Event,
                 outbound: OutboundRequests | None = None) -> None:
        self._channel = channel
        self.ending = ending
        self._outbound = outbound
        self.can_request = channel is not None and outbound is not None

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if self._channel is None or self._outbound is None:
            raise NotImplementedError("this HTTP request has no stream for server-to-client requests")
        return await self._outbound.request(method, params, self._channel.send, self._put)

    def notify_nowait(self, method: str, params: dict[str, Any]) -> None:
        self._put(jsonrpc.notification_message(method, params))

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        if self._channel is not None:
            await self._channel.send(jsonrpc.notification_message(method, params))

    def _put(self, message: dict[str, Any]) -> None:
        if self._channel is None:
            return
        try:
            self._channel.send_nowait(message)
        except (trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
            log.debug("message dropped", method=message.get("method"))


class Stream:
    """A session's outbound queue and the task that writes it to the client: whether that task is
    stuck in a write (the client stopped reading) or merely behind (a burst it is draining). It is
    the reply channel of a 2024 SSE session's connection (`send`, `send_nowait`).

    Messages are queued as the bytes that go out, and what one client makes us hold is bounded in
    bytes as well as in messages: the queue takes at most `MAX_QUEUED_BYTES` (a message larger
    than that only into an empty queue), and the answers waiting for room at most
    `MAX_WAITING_BYTES` while a write is in progress; beyond that, or when a write has been stuck
    for `STUCK_S`, the client counts as not reading and is disconnected."""

    # A write that has not completed for this long while the queue is full means the client is
    # not reading: waiting longer would only hold more answers in memory for it.
    STUCK_S = 1.0
    MAX_QUEUED_BYTES = 16 * 1024 * 1024
    MAX_WAITING_BYTES = 16 * 1024 * 1024

    def __init__(self, channel: trio.MemorySendChannel[bytes], on_stuck: Callable[[], None]) -> None:
        self.channel = channel
        self._on_stuck = on_stuck
        self.writing_since: float | None = None
        self.queued_bytes = 0  # queued, not yet written
        self.waiting_bytes = 0  # in deliveries waiting for room

    async def write(self, send: Send, event: dict[str, Any]) -> None:
        """The pump's write to the client, timed."""
        self.writing_since = trio.current_time()
        try:
            await send(event)
        finally:
            self.writing_since = None

    def written(self, data: bytes) -> None:
        """The pump took `data` off the queue and wrote it."""
        self.queued_bytes -= len(data)

    def _put(self, data: bytes) -> bool:
        if self.queued_bytes and self.queued_bytes + len(data) > self.MAX_QUEUED_BYTES:
            return False
        try:
            self.channel.send_nowait(data)
        except trio.WouldBlock:
            return False
        self.queued_bytes += len(data)
        return True

    async def deliver(self, message: dict[str, Any]) -> None:
        """Queue `message`; while there is no room, wait as long as the pump makes progress, and
        disconnect the client (`on_stuck`) once a write of its has been stuck for `STUCK_S`, or
        more than `MAX_WAITING_BYTES` wait behind a write in progress."""
        data = sse(message)
        try:
            if self._put(data):
                return
            self.waiting_bytes += len(data)
            try:
                while not self._put(data):
                    since = self.writing_since
                    if since is not None and (trio.current_time() - since >= self.STUCK_S
                                              or self.waiting_bytes > self.MAX_WAITING_BYTES):
                        log.warning("client is not reading its stream; disconnecting it",
                                    method=message.get("method"), waiting_bytes=self.waiting_bytes)
                        self._on_stuck()
                        return
                    await trio.sleep(0.05)
            finally:
                self.waiting_bytes -= len(data)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            return  # the stream has ended already

    async def send(self, message: dict[str, Any]) -> None:
        await self.deliver(message)

    def send_nowait(self, message: dict[str, Any]) -> None:
        """Queue `message` if there is room; dropped otherwise (progress is lossy)."""
        try:
            if not self._put(sse(message)):
                log.debug("message dropped", method=message.get("method"))
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            log.debug("message dropped", method=message.get("method"))


async def lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


# An over-cap body is read on (and dropped) up to this many times the cap before the 413 goes
# out, so that a client still sending gets its answer instead of a reset connection.
_DRAIN_FACTOR = 8


class Disconnected(Exception):
    """The client went away before its request body was whole: nothing may act on a part."""


async def read_body(receive: Receive, cap: int) -> bytes | None:
    """The whole request body, or None once it passes `cap` (the rest is read and dropped, up to
    a bound). Raises `Disconnected` when the client leaves before the body is whole."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise Disconnected
        chunk = message.get("body", b"")
        size += len(chunk)
        more = message.get("more_body", False)
        if size > cap:
            while more and size <= cap * _DRAIN_FACTOR:
                message = await receive()
                size += len(message.get("body", b""))
                more = message["type"] != "http.disconnect" and message.get("more_body", False)
            return None
        chunks.append(chunk)
        if not more:
            return b"".join(chunks)


async def end_on_disconnect(receive: Receive, scope: trio.CancelScope, why: str = "") -> None:
    """Cancel `scope` when the client goes away (logging `why`, if given)."""
    while (await receive())["type"] != "http.disconnect":
        pass
    if why:
        log.info(why)
    scope.cancel()


async def end_on(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


class EventStream:
    """One HTTP request's messages (progress, listen notifications, requests to the client) as
    SSE. The response starts with the first message, so a request that ends without any still
    gets a plain JSON answer with its own status (e.g. 400 for a modern error)."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self.started = False
        self.done = trio.Event()

    async def pump(self, queued: trio.MemoryReceiveChannel[dict[str, Any]]) -> None:
        async with queued:
            async for message in queued:
                if not self.started:
                    await self._send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
                    self.started = True
                await self._send({"type": "http.response.body", "body": sse(message), "more_body": True})
        self.done.set()


def sse(message: dict[str, Any]) -> bytes:
    return b"event: message\ndata: " + jsonrpc.to_bytes(message) + b"\n\n"


async def plain(send: Send, status: int, body: bytes) -> None:
    """A text response: only the deliberate text bodies (`/livez`, `/readyz`) and empty
    acknowledgements (202, 204); errors go out as `rpc_error`."""
    headers = [(b"content-type", b"text/plain; charset=utf-8")]
    if status != 204:  # a 204 has no body and may not say a length (RFC 9110 §8.6)
        headers.append((b"content-length", b"%d" % len(body)))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def json_response(send: Send, status: int, value: Any,
                        extra: list[tuple[bytes, bytes]] | None = None) -> None:
    # Encoded before the response starts, and always encodable: a lone surrogate (say, in an
    # upstream's result) is escaped rather than failing after a 200 went out with no body.
    # With its length the response goes out as one body, not chunked: fewer bytes and writes.
    body = jsonrpc.to_bytes(value)
    headers = [*_JSON, (b"content-length", b"%d" % len(body)), *(extra or ())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def rpc_error(send: Send, status: int, request_id: jsonrpc.RequestId | None, code: int,
                     message: str, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    await json_response(send, status, jsonrpc.error_message(request_id, code, message), extra)


async def read_message(receive: Receive, send: Send, cap: int, timeout_s: float) -> Message | None:
    """One JSON-RPC message from the request body; on a body that has not fully arrived within
    `timeout_s` (408: a slow client must not hold a request slot), one over `cap` (413) or one
    that is not a valid message (400 with its JSON-RPC error; -32700 for text that is not UTF-8 or
    holds a lone surrogate) the error is sent and None returned. A client gone before its body
    was whole is answered nothing (None)."""
    with trio.move_on_after(timeout_s) as reading:
        try:
            body = await read_body(receive, cap)
        except Disconnected:
            return None
    if reading.cancelled_caught:
        # The client may never read this; the connection closes after it (the body is unfinished).
        await rpc_error(send, 408, None, jsonrpc.INVALID_REQUEST,
                        f"Request Timeout: the request body did not arrive within {timeout_s:g} s")
        return None
    if body is None:
        await rpc_error(send, 413, None, jsonrpc.INVALID_REQUEST, f"Request body exceeds the {cap}-byte cap")
        return None
    try:
        # Strict: JSON over HTTP is UTF-8 (RFC 8259 §8.1), and a string that is not Unicode text
        # could not be handed on to hooks, tools or upstreams as it came.
        return jsonrpc.decode(body, strict_unicode=True)
    except MessageError as exc:
        await rpc_error(send, 400, exc.id, exc.code, exc.message)
        return None
