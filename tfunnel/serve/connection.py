"""One client connection's MCP state, the same for every inbound transport.

A `Connection` is a stdio pipe, a legacy Streamable HTTP session, a 2024 HTTP+SSE session, or a
single modern stateless HTTP request. It owns what a request *is* on that connection: its id in
the in-flight table (duplicate ids refused, at most `max_inflight` at once), its cancel scope
(`notifications/cancelled` cancels exactly that call, and a cancelled call sends nothing), the
era it is served in (`route.eras.select_era`), its log context, and the one place an exception
becomes a JSON-RPC error. It also carries server→client requests and their answers, and the
`list_changed` notifications. The transports keep only bytes, framing, reply channels and
lifetimes.

The error contract of `answer`: it returns the JSON-RPC response, or None when the call was
cancelled; a `ProtocolError` becomes its code, message and data, any other exception is logged
and answered -32603 "Internal error" without its text. Only cancellation propagates.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog
import trio

from tfunnel.errors import ProtocolError
from tfunnel.observe.observer import NullObserver, Observer
from tfunnel.protocol import jsonrpc
from tfunnel.protocol.eras import Era
from tfunnel.protocol.jsonrpc import Message, Notification, Request, Response
from tfunnel.protocol.session import ClientSession
from tfunnel.route import Peer
from tfunnel.route.eras import Refusal, select_era
from tfunnel.serve.outbound import OutboundRequests

log = structlog.get_logger("tfunnel.serve")

# Requests one client connection may have in flight; beyond this a request is refused at once
# (like HTTP's 503), so a client that sends without reading cannot make us hold answers without
# bound. The reader never stops reading: the client's answers to our own questions must still
# get through.
MAX_INFLIGHT = 256

DUPLICATE_ID = "Invalid Request: id is already in flight"
# Notifications waiting for a client's stream (see `Connection.push_notice`).
MAX_NOTICES = 256


class Handler(Protocol):
    """The router, as a connection sees it (`tfunnel.route.Router`)."""

    async def handle(self, session: ClientSession, request: Request, peer: Peer | None = None, *,
                     era: Era) -> dict[str, Any]: ...

    def notify(self, session: ClientSession, note: Notification) -> None: ...

    async def end_session(self, session: ClientSession) -> None: ...


class ChangeSignal(Protocol):
    """The surface's change signal (`tfunnel.surface.changes.Changes`), as a connection sees it."""

    version: int

    async def next_burst(self, seen: int, *, relevant: Callable[[], bool] = ...) -> int: ...

    def changed_since(self, seen: int) -> tuple[str, ...]: ...


class ReplyChannel(Protocol):
    """Where a transport takes messages toward the client."""

    async def send(self, message: dict[str, Any]) -> None:
        """Deliver `message` (waits while the client is behind, as the transport's rule allows)."""

    def send_nowait(self, message: dict[str, Any]) -> None:
        """Best effort: dropped when the client is not keeping up (progress is lossy)."""


@dataclass(frozen=True)
class Service:
    """What every connection of one transport shares: who answers, what changes, who counts."""

    router: Handler
    changes: ChangeSignal
    serve_legacy: Callable[[], bool]
    observer: Observer = field(default_factory=NullObserver)

    def era(self, message: Message | None, version_header: str | None = None) -> Era | Refusal:
        """The era of a message (one without a method, such as a response, by the header alone)."""
        if isinstance(message, Request | Notification):
            method, params = message.method, message.params
        else:
            method, params = "", {}
        return select_era(method, params, serve_legacy=self.serve_legacy(), version_header=version_header)


Note = dict[str, Any]  # a notification message


class Connection:
    """One client connection. With a `reply` channel (stdio, 2024 SSE) it is itself the `Peer`
    the router talks back through; a transport that answers each request on its own channel
    (Streamable HTTP) hands `answer` a peer per request instead."""

    def __init__(self, service: Service, session: ClientSession, *, ending: trio.Event,
                 reply: ReplyChannel | None = None, max_inflight: int | None = None,
                 bind_session: bool = True) -> None:
        self.service = service
        self.session = session
        self.ending = ending  # set when the transport is ending (listen streams then finish)
        self.reply = reply
        self.can_request = reply is not None  # server→client requests need a channel to travel on
        self.max_inflight = max_inflight
        self.inflight: dict[jsonrpc.RequestId, trio.CancelScope] = {}
        self.outbound = OutboundRequests()
        self._dropped = 0
        # Set once our `initialize` result is out: from then on the client hears of changes.
        self.initialize_answered = False
        session.push = self.push_notice
        # The log context of each request; a modern stateless request has no session to name.
        self._context: dict[str, Any] = {"session": session.id} if bind_session else {}

    # --- the peer: server→client messages on the connection's own reply channel ----------------

    def attach(self, reply: ReplyChannel) -> None:
        """The connection's reply channel, once the transport has opened it (a 2024 SSE stream)."""
        self.reply = reply
        self.can_request = True

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Ask the client and wait for its answer (a caller that gives up tells the client)."""
        assert self.reply is not None
        return await self.outbound.request(method, params, self.reply.send, self.reply.send_nowait)

    def notify_nowait(self, method: str, params: dict[str, Any]) -> None:
        if self.reply is not None:
            self.reply.send_nowait(jsonrpc.notification_message(method, params))

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        if self.reply is not None:
            await self.reply.send(jsonrpc.notification_message(method, params))

    # --- messages from the client ----------------------------------------------------------------

    async def receive(self, message: Message, requests: trio.Nursery) -> None:
        """Dispatch one decoded message on a connection with a reply channel: a request runs as
        its own task in `requests` and answers on the channel (a refusal is answered at once)."""
        if isinstance(message, Request):
            refused = self.start(message, requests)
            if refused is not None and self.reply is not None:
                await self.reply.send(refused)
        elif isinstance(message, Notification):
            self.notification(message)
        else:
            self.response(message)

    def admit(self, request: Request) -> dict[str, Any] | None:
        """The refusal of a request this connection cannot take now (its id is in flight, or the
        in-flight cap is reached), else None."""
        if request.id in self.inflight:
            return jsonrpc.error_message(request.id, jsonrpc.INVALID_REQUEST, DUPLICATE_ID)
        if self.max_inflight is not None and len(self.inflight) >= self.max_inflight:
            return jsonrpc.error_message(
                request.id, jsonrpc.INTERNAL_ERROR,
                f"Server busy: {self.max_inflight} requests are already in flight; retry later")
        return None

    def start(self, request: Request, requests: trio.Nursery) -> dict[str, Any] | None:
        """Run `request` as a task in `requests` that answers on the reply channel; or return its
        refusal (sent by the transport as it frames refusals)."""
        refused = self.admit(request)
        if refused is None:
            scope = trio.CancelScope()
            requests.start_soon(self._run, request, scope)  # raises if the nursery has closed
            self.inflight[request.id] = scope  # before the task runs, and before the next message
        return refused

    def notification(self, note: Notification) -> None:
        """A cancel targets this connection's call (an unknown id is ignored); the rest go to the
        router."""
        if note.method == "notifications/cancelled":
            request_id = note.params.get("requestId")
            scope = self.inflight.get(request_id) if isinstance(request_id, str | int) else None
            if scope is not None:
                log.info("request cancelled by client", id=request_id, reason=note.params.get("reason"))
                scope.cancel()
            return
        self.service.router.notify(self.session, note)

    def response(self, response: Response) -> None:
        """The client's answer to one of our requests."""
        self.outbound.resolve(response)

    def cancel_all(self) -> None:
        for scope in self.inflight.values():
            scope.cancel()

    # --- answering -------------------------------------------------------------------------------

    async def _run(self, request: Request, scope: trio.CancelScope) -> None:
        # This task runs in its own copy of the context, so the binding ends with it (cheaper
        # than `bound_contextvars`, which scans the whole context to restore it afterwards).
        structlog.contextvars.bind_contextvars(request_id=request.id, method=request.method,
                                               **self._context)
        with scope:
            try:
                reply = await self._respond(request, self, self.service.era(request))
            finally:
                del self.inflight[request.id]
            if scope.cancel_called:  # a cancelled call sends nothing, even if its answer is ready
                return
            assert self.reply is not None
            await self.reply.send(reply)
            self._answered(request, reply)

    async def answer(self, request: Request, peer: Peer | None, *, era: Era | Refusal | None = None,
                     scope: trio.CancelScope | None = None) -> dict[str, Any] | None:
        """Answer `request` in the calling task (the transport frames the reply): registered in
        flight while it runs, under `scope` (which the transport may cancel, as a disconnect
        does). The caller has `admit`ted it. None when the call was cancelled."""
        scope = scope or trio.CancelScope()
        self.inflight[request.id] = scope
        # Reset by token afterwards: `bound_contextvars` would scan the whole context to restore it.
        bound = structlog.contextvars.bind_contextvars(request_id=request.id, method=request.method,
                                                       **self._context)
        try:
            with scope:
                reply = await self._respond(request, peer, self.service.era(request) if era is None else era)
        finally:
            del self.inflight[request.id]
            structlog.contextvars.reset_contextvars(**bound)
        if scope.cancel_called:
            return None
        self._answered(request, reply)  # the transport writes it next; nothing can be ahead of it
        return reply

    def _answered(self, request: Request, reply: dict[str, Any]) -> None:
        if is_initialize_result(request, reply):
            self.initialize_answered = True

    async def _respond(self, request: Request, peer: Peer | None, era: Era | Refusal) -> dict[str, Any]:
        """The one place a failure becomes a JSON-RPC error; each request is counted once."""
        started = time.monotonic()
        try:
            if isinstance(era, Refusal):
                raise ProtocolError(era.code, era.message, dict(era.data))
            result = await self.service.router.handle(self.session, request, peer, era=era)
        except ProtocolError as exc:
            reply = jsonrpc.error_message(request.id, exc.code, exc.message, exc.data)
        except Exception:
            log.exception("request failed")
            reply = jsonrpc.error_message(request.id, jsonrpc.INTERNAL_ERROR, "Internal error")
        else:
            reply = jsonrpc.result_message(request.id, result)
        self.service.observer.request(request.method, time.monotonic() - started, error="error" in reply)
        return reply

    # --- notifications to the client -------------------------------------------------------------

    @functools.cached_property
    def _notes(self) -> tuple[trio.MemorySendChannel[Note], trio.MemoryReceiveChannel[Note]]:
        """Notifications not tied to a request (list_changed, log messages, resource updates), in
        order, for `list_changed` to deliver; bounded: a client that reads none loses notices.
        Made on first use: a modern request's connection lives for one request and has none."""
        return trio.open_memory_channel(MAX_NOTICES)

    def push_notice(self, message: dict[str, Any]) -> None:
        """Queue a notification for the client's stream (`list_changed` delivers it); dropped,
        and counted, when the queue is full."""
        try:
            self._notes[0].send_nowait(message)
        except trio.WouldBlock:
            self._dropped += 1
            if self._dropped in (1, 10, 100, 1000, 10000):
                log.warning("client is not reading its notifications; dropped", dropped=self._dropped)

    async def list_changed(self, deliver: Callable[[dict[str, Any]], Awaitable[None]], *,
                           idle_s: float = math.inf,
                           on_idle: Callable[[], Awaitable[None]] | None = None) -> None:
        """Deliver the notifications not tied to a request, in order: whenever a list of the
        surface changed (coalesced per burst, one `notifications/<kind>/list_changed` for each
        list that changed; only once our `initialize` result is out, whether or not the client
        has sent `notifications/initialized`: the spec holds back a server's requests until then,
        not its notifications, and ToolFunnel's clients rely on hearing them), and what was
        pushed (`push_notice`). Every transport follows this one rule. `on_idle` runs after each
        `idle_s` without one (keep-alives). Runs until cancelled."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._changes)
            while True:
                message: dict[str, Any] | None = None
                with trio.move_on_after(idle_s):  # only the wait: a delivery is never cut short
                    message = await self._notes[1].receive()
                if message is not None:
                    await deliver(message)
                elif on_idle is not None:
                    await on_idle()

    async def _changes(self) -> None:
        changes = self.service.changes
        seen = changes.version
        while True:
            before = seen
            # A change before then needs no word: the client lists after its `initialize`.
            seen = await changes.next_burst(seen, relevant=lambda: self.initialize_answered)
            for kind in changes.changed_since(before):
                await self._notes[0].send(jsonrpc.notification_message(f"notifications/{kind}/list_changed"))


def is_initialize_result(request: Request, reply: dict[str, Any]) -> bool:
    """Whether `reply` is a successful answer to `initialize` (after which notifications flow)."""
    return request.method == "initialize" and "result" in reply
