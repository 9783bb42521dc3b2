"""The stdio transport: NDJSON or `Content-Length` framing in, NDJSON out, on a pair of byte
streams, every request its own task.

What a request is (its id, cancel scope, era, answer) is the connection's (`serve.connection`);
this module owns the bytes: reading messages (the framing is told from the stream's first bytes,
`protocol.framed`), writing every message as one NDJSON line, whatever the client sent: so does
ToolFunnel, whose clients send `Content-Length` frames and split what they read on newlines
(tests/field/toolfunnel-0.6), through a `LineWriter` (never half a message; on a pipe, eagerly
from the caller's task), the small spill queue for fire-and-forget messages (progress), and the
lifetime: stdin closed → in-flight requests finish within the grace
period; stdout stalled or closed → the client is gone. Any pair of trio byte streams will do, so
tests run it on memory streams.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Callable
from typing import Any

import structlog
import trio

from tfunnel.observe.observer import NullObserver, Observer
from tfunnel.proc.linewriter import LineWriter
from tfunnel.protocol import jsonrpc
from tfunnel.protocol.framed import Framing, Malformed, StreamReader
from tfunnel.protocol.framing import Oversize
from tfunnel.protocol.jsonrpc import MessageError
from tfunnel.protocol.session import ClientSession
from tfunnel.serve.connection import MAX_INFLIGHT, ChangeSignal, Connection, Handler, Service

log = structlog.get_logger("tfunnel.stdio")

_READ_CHUNK = 65536
# Fire-and-forget messages (progress) waiting to be written; beyond this they are dropped.
_OUTBOX = 64


class StdioServer:
    def __init__(self, router: Handler, tools_changed: ChangeSignal, *, max_message_bytes: int,
                 grace_s: float, serve_legacy: Callable[[], bool], observer: Observer | None = None,
                 max_inflight: int = MAX_INFLIGHT) -> None:
        self.router = router
        self.max_message_bytes = max_message_bytes
        self.grace_s = grace_s
        self.ending = trio.Event()  # stdin closed: listen streams end with their final result
        service = Service(router, tools_changed, serve_legacy, observer or NullObserver())
        self.connection = Connection(service, ClientSession(id=secrets.token_hex(8)), ending=self.ending,
                                     reply=self, max_inflight=max_inflight)
        self._out: trio.MemorySendChannel[dict[str, Any]] | None = None
        self._writer: LineWriter | None = None
        self._queued = 0  # messages in the spill queue, not yet written
        self._reading = StreamReader(max_message_bytes)

    @property
    def session(self) -> ClientSession:
        return self.connection.session

    @property
    def framing(self) -> Framing:
        """The framing the client writes in (read side only: replies are NDJSON whatever it is);
        NDJSON until its first bytes tell."""
        return self._reading.framing or Framing.NDJSON

    async def serve(self, receive: trio.abc.ReceiveStream, send: trio.abc.SendStream) -> None:
        """Serve until `receive` ends, then finish in-flight requests within the grace period."""
        out, outbox = trio.open_memory_channel[dict[str, Any]](_OUTBOX)
        async with trio.open_nursery() as nursery:

            def client_gone() -> None:
                log.info("stdout closed by the client; stopping")
                nursery.cancel_scope.cancel()

            self._writer = LineWriter(send, client_gone, stall_before_first_byte=True)
            nursery.start_soon(self._spill, outbox)
            async with out:
                self._out = out
                notifier: trio.CancelScope = await nursery.start(self._notifier)
                async with trio.open_nursery() as requests:
                    await self._reader(receive, requests)
                    self.ending.set()
                    log.info("stdin closed; finishing in-flight requests",
                             inflight=len(self.connection.inflight), grace_s=self.grace_s)
                    requests.cancel_scope.deadline = trio.current_time() + self.grace_s
                notifier.cancel()
                await self.router.end_session(self.session)

    async def _reader(self, receive: trio.abc.ReceiveStream, requests: trio.Nursery) -> None:
        while True:
            data = await receive.receive_some(_READ_CHUNK)
            events = self._reading.feed(data) if data else self._reading.eof()
            for event in events:
                await self._dispatch(event, requests)
            if not data:
                return

    async def _dispatch(self, event: bytes | Oversize | Malformed, requests: trio.Nursery) -> None:
        if isinstance(event, Malformed):  # the reader resynchronises at the next header block
            log.warning("bad message framing", error=event.reason)
            await self.send(jsonrpc.error_message(
                None, jsonrpc.PARSE_ERROR, f"Parse error: bad Content-Length header block ({event.reason})"))
            return
        if isinstance(event, Oversize):
            log.warning("message over the size cap refused", cap=self.max_message_bytes)
            await self.send(jsonrpc.error_message(
                event.sniff_id(), jsonrpc.INVALID_REQUEST,
                f"Invalid Request: message exceeds the {self.max_message_bytes}-byte cap"))
            return
        try:
            # The same rule as HTTP bodies: text that is not Unicode (a lone surrogate included)
            # is a parse error, never passed on to a hook or a tool.
            message = jsonrpc.decode(event, strict_unicode=True)
        except MessageError as exc:
            log.warning("bad message", code=exc.code, error=exc.message)
            if exc.reply:
                await self.send(jsonrpc.error_message(exc.id, exc.code, exc.message))
            return
        await self.connection.receive(message, requests)

    # --- the reply channel -----------------------------------------------------------------------

    def send_nowait(self, message: dict[str, Any]) -> None:
        assert self._out is not None
        try:
            self._out.send_nowait(message)
            self._queued += 1
        except (trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
            log.debug("outbound message dropped", method=message.get("method"))

    async def send(self, message: dict[str, Any]) -> None:
        """Write `message` now, unless queued messages are waiting: then queue it behind them, so
        that (for example) a call's last progress notification never arrives after its result."""
        if self._queued:
            assert self._out is not None
            self._queued += 1
            try:
                await self._out.send(message)
            except BaseException:  # not queued after all (cancelled, or the queue closed)
                self._queued -= 1
                raise
            return
        await self._write(message)

    async def _write(self, message: dict[str, Any]) -> None:
        assert self._writer is not None
        # A client that is gone has already stopped the server (the writer's on_broken).
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await self._writer.write(jsonrpc.encode(message))

    async def _notifier(self, *, task_status: trio.TaskStatus[trio.CancelScope]) -> None:
        """Tell an initialized client whenever the tool surface changed (coalesced)."""
        with trio.CancelScope() as scope:
            task_status.started(scope)
            await self.connection.list_changed(self.send)

    async def _spill(self, outbox: trio.MemoryReceiveChannel[dict[str, Any]]) -> None:
        """Write the messages queued by `send_nowait`."""
        async with outbox:
            async for message in outbox:
                try:
                    await self._write(message)
                finally:
                    self._queued -= 1
