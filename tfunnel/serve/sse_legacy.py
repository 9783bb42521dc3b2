"""The 2024-11-05 HTTP+SSE transport: `GET /sse` opens the stream (its first event names the
POST endpoint), `POST /messages?session_id=...` carries client messages (202), and every answer
travels back on the stream. Kept for old clients; Streamable HTTP is the current transport.

The stream's task hosts the session's requests, which its connection (`serve.connection`) runs
and answers on the stream: when the client goes away, its calls are cancelled through the tree
and the session is forgotten.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable

import structlog
import trio

from tfunnel.protocol import jsonrpc
from tfunnel.protocol.jsonrpc import Request
from tfunnel.protocol.session import NO_TOKEN, ClientSession, TokenFacts
from tfunnel.serve.asgi import (
    SSE_HEADERS,
    Receive,
    Send,
    Stream,
    end_on,
    end_on_disconnect,
    json_response,
    plain,
    read_message,
    rpc_error,
)
from tfunnel.serve.connection import MAX_INFLIGHT, Connection, Service
from tfunnel.serve.sessions import SessionStore

log = structlog.get_logger("tfunnel.http")

KEEPALIVE_S = 15.0
# Answers and notifications waiting for the stream. A client that lets this many pile up is not
# reading: it is disconnected (its calls cancelled, Stop hooks fired) rather than buffered for.
QUEUE = 64


class LegacySse:
    def __init__(self, service: Service, end_session: Callable[[ClientSession], Awaitable[None]],
                 sessions: SessionStore, stopping: trio.Event, body_cap: int, body_timeout_s: float) -> None:
        self.service = service
        self.end_session = end_session
        self.sessions = sessions
        self.stopping = stopping
        self.body_cap = body_cap
        self.body_timeout_s = body_timeout_s
        # session id → (its stream toward the client, the nursery hosting its requests)
        self._streams: dict[str, tuple[Stream, trio.Nursery]] = {}

    async def stream(self, receive: Receive, send: Send, principal: str | None = None,
                     deadline: float = math.inf,
                     token: TokenFacts = NO_TOKEN) -> None:
        """`GET /sse`: a new session of `principal` (its token's subject and scopes: `token`)
        whose answers and notifications all flow here, until `deadline` (the token's expiry) at
        the latest."""
        session = await self.sessions.create(self._connect, principal, token)
        if session is None:
            await rpc_error(send, 503, None, jsonrpc.INTERNAL_ERROR, "Too many sessions")
            return
        session_id = session.client.id
        queue, queued = trio.open_memory_channel[bytes](QUEUE)
        session.streams += 1
        try:
            async with trio.open_nursery() as nursery:
                nursery.cancel_scope.deadline = deadline
                stream = Stream(queue, self._hang_up(session_id, nursery))
                session.connection.attach(stream)
                # Registered before the client hears the endpoint, so its first POST finds it.
                self._streams[session_id] = (stream, nursery)
                await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
                endpoint = f"/messages?session_id={session_id}".encode()
                await send({"type": "http.response.body",
                            "body": b"event: endpoint\ndata: " + endpoint + b"\n\n", "more_body": True})
                nursery.start_soon(end_on_disconnect, receive, nursery.cancel_scope)
                nursery.start_soon(end_on, self.stopping, nursery.cancel_scope)
                nursery.start_soon(session.connection.list_changed, stream.deliver)
                await self._pump(queued, stream, send)
            if nursery.cancel_scope.cancelled_caught and trio.current_time() >= deadline:
                # The token expired: the stream ends cleanly (the client may reconnect with a new one).
                with trio.CancelScope(shield=True), trio.move_on_after(1):
                    await send({"type": "http.response.body", "body": b""})
        finally:
            self._streams.pop(session_id, None)
            session.streams -= 1
            self.sessions.remove(session_id)
            with trio.CancelScope(shield=True):
                await self.end_session(session.client)
            log.info("HTTP+SSE session ended", session=session_id)

    async def post(self, query: str, receive: Receive, send: Send, principal: str | None = None) -> None:
        """`POST /messages?session_id=...`: accept (202) and answer on the stream; a session of
        another principal is not found."""
        params = dict(part.split("=", 1) for part in query.split("&") if "=" in part)
        session = self.sessions.get(params.get("session_id", ""), principal)
        stream = self._streams.get(params.get("session_id", ""))
        if session is None or stream is None:
            await rpc_error(send, 404, None, jsonrpc.INVALID_REQUEST, "Session not found")
            return
        message = await read_message(receive, send, self.body_cap, self.body_timeout_s)
        if message is None:
            return
        stream = self._streams.get(params.get("session_id", ""))
        if stream is None:  # the stream ended while the body was read
            await rpc_error(send, 404, None, jsonrpc.INVALID_REQUEST, "Session not found")
            return
        _, nursery = stream
        if isinstance(message, Request):
            refused = session.connection.start(message, nursery)  # answered on the stream
            if refused is not None:
                await json_response(send, 400, refused)
                return
        else:
            await session.connection.receive(message, nursery)
        await plain(send, 202, b"Accepted")

    def _connect(self, client: ClientSession) -> Connection:
        # The reply channel is attached when the stream opens, just after the session exists.
        return Connection(self.service, client, ending=self.stopping, max_inflight=MAX_INFLIGHT)

    def _hang_up(self, session_id: str, nursery: trio.Nursery) -> Callable[[], None]:
        """What ends a session whose client stopped reading: gone at once for its POSTs (404),
        its calls cancelled; the stream's own end (Stop hooks) follows when its connection closes,
        at the latest after the write timeout."""
        def hang_up() -> None:
            self._streams.pop(session_id, None)
            self.sessions.remove(session_id)
            nursery.cancel_scope.cancel()
        return hang_up

    @staticmethod
    async def _pump(queued: trio.MemoryReceiveChannel[bytes], stream: Stream, send: Send) -> None:
        while True:
            data: bytes | None = None
            with trio.move_on_after(KEEPALIVE_S):
                data = await queued.receive()
            body = b": keep-alive\n\n" if data is None else data
            await stream.write(send, {"type": "http.response.body", "body": body, "more_body": True})
            if data is not None:
                stream.written(data)
