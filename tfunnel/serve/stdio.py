"""The stdio transport: NDJSON on a pair of byte streams, every request its own task.

Each request runs in the request nursery under its own cancel scope, registered by id, so a
slow call never blocks the pipe and `notifications/cancelled` cancels exactly that call (no
response is sent for it). Replies are written by the request's own task through a `LineWriter`
(never half a line); fire-and-forget messages (progress) go through a small spill queue.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Callable
from typing import Any, Protocol

import structlog
import trio

from tfunnel.proc.linewriter import LineWriter
from tfunnel.protocol import jsonrpc
from tfunnel.protocol.framing import LineReader, Oversize
from tfunnel.protocol.jsonrpc import MessageError, Notification, Request, Response
from tfunnel.protocol.session import ClientSession
from tfunnel.route.router import Router
from tfunnel.serve.outbound import OutboundRequests

log = structlog.get_logger("tfunnel.stdio")

_READ_CHUNK = 65536
# Fire-and-forget messages (progress) waiting to be written; beyond this they are dropped.
_OUTBOX = 64
# Requests one client may have in flight; beyond this a request is refused at once (like HTTP's
# 503), so a client that sends without reading cannot make us hold answers without bound. The
# reader never stops reading: the client's answers to our own questions must still get through.
MAX_INFLIGHT = 256


class ChangeSignal(Protocol):
    """The surface's change signal (`tfunnel.surface.changes.Changes`), as a transport sees it."""

    version: int

    async def next_burst(self, seen: int, *, relevant: Callable[[], bool] = ...) -> int: ...


class StdioServer:
    can_request = True  # server→client requests travel on the same pipe

    def __init__(self, router: Router, tools_changed: ChangeSignal, *, max_message_bytes: int,
                 grace_s: float, max_inflight: int = MAX_INFLIGHT) -> None:
        self.router = router
        self.tools_changed = tools_changed
        self.max_message_bytes = max_message_bytes
        self.grace_s = grace_s
        self.max_inflight = max_inflight
        self.session = ClientSession(id=secrets.token_hex(8))
        self._inflight: dict[jsonrpc.RequestId, trio.CancelScope] = {}
        self._out: trio.MemorySendChannel[dict[str, Any]] | None = None
        self._writer: LineWriter | None = None
        self._queued = 0  # messages in the spill queue, not yet written
        self._outbound = OutboundRequests()
        self.ending = trio.Event()  # stdin closed: listen streams end with their final result

    async def serve(self, receive: trio.abc.ReceiveStream, send: trio.lowlevel.FdStream) -> None:
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
                             inflight=len(self._inflight), grace_s=self.grace_s)
                    requests.cancel_scope.deadline = trio.current_time() + self.grace_s
                notifier.cancel()
                await self.router.end_session(self.session)

    async def _reader(self, receive: trio.abc.ReceiveStream, requests: trio.Nursery) -> None:
        lines = LineReader(self.max_message_bytes)
        while True:
            data = await receive.receive_some(_READ_CHUNK)
            events = lines.feed(data) if data else lines.eof()
            for event in events:
                await self._dispatch(event, requests)
            if not data:
                return

    async def _dispatch(self, event: bytes | Oversize, requests: trio.Nursery) -> None:
        if isinstance(event, Oversize):
            log.warning("message over the size cap refused", cap=self.max_message_bytes)
            await self._send(jsonrpc.error_message(
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
                await self._send(jsonrpc.error_message(exc.id, exc.code, exc.message))
            return
        if isinstance(message, Request):
            if message.id in self._inflight:
                await self._send(jsonrpc.error_message(
                    message.id, jsonrpc.INVALID_REQUEST, "Invalid Request: id is already in flight"))
                return
            if len(self._inflight) >= self.max_inflight:
                await self._send(jsonrpc.error_message(
                    message.id, jsonrpc.INTERNAL_ERROR,
                    f"Server busy: {self.max_inflight} requests are already in flight; retry later"))
                return
            scope = trio.CancelScope()
            self._inflight[message.id] = scope
            requests.start_soon(self._handle, message, scope)
        elif isinstance(message, Notification):
            self._notification(message)
        elif isinstance(message, Response):
            self._outbound.resolve(message)

    def _notification(self, note: Notification) -> None:
        if note.method == "notifications/cancelled":
            request_id = note.params.get("requestId")
            scope = self._inflight.get(request_id) if isinstance(request_id, str | int) else None
            if scope is not None:
                log.info("request cancelled by client", id=request_id, reason=note.params.get("reason"))
                scope.cancel()
            return
        self.router.notify(self.session, note)

    async def _handle(self, request: Request, scope: trio.CancelScope) -> None:
        # This task runs in its own copy of the context, so the binding ends with it (cheaper
        # than `bound_contextvars`, which scans the whole context to restore it afterwards).
        structlog.contextvars.bind_contextvars(request_id=request.id, method=request.method)
        with scope:
            try:
                reply = await self.router.respond(self.session, request, self)
            finally:
                del self._inflight[request.id]
            if scope.cancel_called:  # a cancelled call sends nothing, even if its answer is ready
                return
            await self._send(reply)

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Send a server→client request and wait for its response (`Peer` for the router)."""
        return await self._outbound.request(method, params, self._send, self._send_nowait)

    def notify_nowait(self, method: str, params: dict[str, Any]) -> None:
        self._send_nowait(jsonrpc.notification_message(method, params))

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        await self._send(jsonrpc.notification_message(method, params))

    def _send_nowait(self, message: dict[str, Any]) -> None:
        assert self._out is not None
        try:
            self._out.send_nowait(message)
            self._queued += 1
        except (trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
            log.debug("outbound message dropped", method=message.get("method"))

    async def _send(self, message: dict[str, Any]) -> None:
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
            seen = self.tools_changed.version
            while True:
                seen = await self.tools_changed.next_burst(seen, relevant=lambda: self.session.initialized)
                await self._send(jsonrpc.notification_message("notifications/tools/list_changed"))

    async def _spill(self, outbox: trio.MemoryReceiveChannel[dict[str, Any]]) -> None:
        """Write the messages queued by `_send_nowait`."""
        async with outbox:
            async for message in outbox:
                try:
                    await self._write(message)
                finally:
                    self._queued -= 1
