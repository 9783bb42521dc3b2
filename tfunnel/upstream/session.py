"""One live MCP client session with an upstream over a message stream (`upstream/transport.py`).

Callers send their own requests straight to the stream (whole messages, no writer task in
between); a reader task feeds each message to `ClientCore` and resolves pending requests out of
order. The session knows nothing of processes or framing: that is the transport's.
Requests time out by kind:
control calls after `request_timeout`, payload calls after `timeout` re-armed by each matching
progress notification, never past an absolute maximum. A timed-out or cancelled request is
cancelled upstream with `notifications/cancelled` carrying the upstream's own request id.

Once the handshake picked the modern era (`modern_version` set), every request carries the
per-request `_meta` envelope (PROTOCOL.md §3.2). Legacy upstreams may send requests of their own
during a call: `ping` is answered here; `elicitation/create`, `sampling/createMessage` and
`roots/list` go to the `on_request` handler of an in-flight call (see `_owner`), each in its own
task so the reader never waits on a person answering a question.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog
import trio

from tfunnel._fastpath import deadlines
from tfunnel.errors import (
    ProtocolError,
    UpstreamBadAnswer,
    UpstreamError,
    UpstreamRemoteError,
    UpstreamTimeout,
)
from tfunnel.protocol import jsonrpc
from tfunnel.protocol.jsonrpc import Notification, Request, Response
from tfunnel.protocol.meta import own_keys
from tfunnel.protocol.modern import request_meta
from tfunnel.protocol.session import DECLINED
from tfunnel.upstream.client import (
    BrokenAnswer,
    ClientCore,
    Event,
    OversizeResponse,
    encode_error,
    encode_notification,
    encode_request,
    encode_response,
)
from tfunnel.upstream.transport import Messages

log = structlog.get_logger("tfunnel.upstream")

# How long forwarding a cancel may hold up the cancelled caller.
CANCEL_WRITE_S = 1.0
# A payload call re-armed by progress still ends after this many payload windows.
ABSOLUTE_MAX_WINDOWS = 10

# How long an upstream's request that no call owns may wait for the fallback's answer.
FALLBACK_WINDOW_S = 60.0
# Server→client requests a caller may answer (legacy era); without one, `DECLINED` answers.
BRIDGED_REQUESTS = frozenset({"elicitation/create", "sampling/createMessage", "roots/list"})
# The n-th bad message of a kind is logged when n is one of these: a broken upstream writing
# millions of them costs a handful of log lines, and the count says how bad it is.
_REPORTED_AT = frozenset(10 ** k for k in range(16))

Progress = Callable[[dict[str, Any]], None]
ServerRequests = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]
"""Answers a server→client request (method, params) with its result; raise `ProtocolError` to
answer with that error instead."""


@dataclass
class _Pending:
    method: str
    deadline: float
    hard_deadline: float
    window: float
    rearms: bool = False
    on_progress: Progress | None = None
    on_request: ServerRequests | None = None
    handlers: set[trio.CancelScope] = field(default_factory=set)  # requests answered for this call
    done: trio.Event = field(default_factory=trio.Event)
    response: Response | None = None
    failure: UpstreamError | None = None
    waiting: bool = False  # the caller waits in `_wait`; `due` runs only then
    timed_out: bool = False

    def due(self, now: float) -> float | None:
        """The timer (`tfunnel._fastpath.deadlines`), at or after the deadline: time out, or wait longer
        when progress re-armed the window."""
        if self.done.is_set():
            return None
        deadline = min(self.deadline, self.hard_deadline)
        if now < deadline:
            return deadline
        if self.handlers and now < self.hard_deadline:
            # The client is being asked on the upstream's behalf, and a person may take longer
            # than one window: wait on, up to the absolute maximum.
            self.deadline = min(now + self.window, self.hard_deadline)
            return self.deadline
        self.timed_out = True
        self.done.set()
        return None


class UpstreamSession:
    def __init__(self, upstream_id: str, stream: Messages, *,
                 on_notification: Callable[[Notification], None],
                 fallback: ServerRequests | None = None) -> None:
        """`fallback` answers the upstream's requests that no call in flight answers (a stdio
        wrap's client); without one they get the declined defaults."""
        self.upstream_id = upstream_id
        self._fallback = fallback
        self._stream = stream
        self._core = ClientCore()
        self._on_notification = on_notification
        self._pending: dict[jsonrpc.RequestId, _Pending] = {}
        self._by_token: dict[str, jsonrpc.RequestId] = {}
        self._closed: UpstreamError | None = None
        self._tasks: trio.Nursery | None = None
        self._complaints: dict[str, int] = {}  # bad lines seen, by kind (see `_complain`)
        # Set by the handshake when the upstream speaks the modern era.
        self.modern_version: str | None = None
        self.client_info: dict[str, Any] = {}

    async def run(self) -> None:
        """Read until the stream ends. In-flight requests stay pending until the owner calls
        `fail_all` with the reason (e.g. the exit status); requests the upstream was still
        waiting on are abandoned (nobody is left to answer)."""
        async with trio.open_nursery() as tasks:
            self._tasks = tasks
            while (message := await self._stream.receive()) is not None:
                await self._handle(self._core.feed(message))
            tasks.cancel_scope.cancel()

    async def _write(self, message: bytes) -> None:
        """Send one message; `UpstreamError` once the upstream takes no more input."""
        await self._stream.send(message)

    def fail_all(self, error: UpstreamError) -> None:
        """Fail every in-flight request at once (the child is gone); later requests fail too."""
        self._closed = error
        for pending in self._pending.values():
            if not pending.done.is_set():
                pending.failure = error
                pending.done.set()

    async def request(self, method: str, params: dict[str, Any], *, timeout_s: float,
                      payload: bool = False, on_progress: Progress | None = None,
                      on_request: ServerRequests | None = None,
                      capabilities: Mapping[str, Any] | None = None,
                      log_level: str | None = None) -> dict[str, Any]:
        """Send a request and wait for its result; raise `UpstreamError` (`UpstreamRemoteError`
        for an error answer). `capabilities` and `log_level` go into a modern request's `_meta`;
        `on_request` answers the upstream's own requests while this one is in flight."""
        if self._closed is not None:
            raise self._closed
        now = trio.current_time()
        hard = now + timeout_s * (ABSOLUTE_MAX_WINDOWS if payload else 1)
        pending = _Pending(method, now + timeout_s, hard, timeout_s, payload, on_progress, on_request)
        request_id = self._core.new_id()
        if payload:
            self._by_token[_token(request_id)] = request_id
        meta = self._request_meta(params.get("_meta"), _token(request_id) if payload else None,
                                  capabilities, log_level)
        if meta is not None:  # one copy of the params, whatever goes into their `_meta`
            params = {**params, "_meta": meta}
        self._pending[request_id] = pending
        try:
            await self._write(encode_request(request_id, method, params))
            await self._wait(pending)
        except trio.Cancelled:
            await self._cancel_upstream(request_id, "the call was cancelled")
            raise
        except UpstreamTimeout:
            await self._cancel_upstream(request_id, "timed out")
            raise
        finally:
            del self._pending[request_id]
            self._by_token.pop(_token(request_id), None)
            for scope in pending.handlers:  # the upstream's questions outlived the call
                scope.cancel()
        if pending.failure is not None:
            raise pending.failure
        response = pending.response
        assert response is not None
        if response.error is not None:
            message = str(response.error.get("message", "error"))
            code = response.error.get("code")
            raise UpstreamRemoteError(
                f"upstream {self.upstream_id!r} answered {method} with an error: {message}",
                code=code if isinstance(code, int) and not isinstance(code, bool) else jsonrpc.INTERNAL_ERROR,
                remote_message=message, data=response.error.get("data"))
        return response.result or {}

    def _request_meta(self, caller: Any, token: str | None, capabilities: Mapping[str, Any] | None,
                      log_level: str | None) -> dict[str, Any] | None:
        """The request's `_meta`, built once: the caller's (trace context...), our progress token
        on a payload call (always asked for: progress re-arms the window even when no client
        listens; ours, as the client's may collide with another client's), and on a modern
        request our protocol keys (never a caller's). None when the caller's stands as it is."""
        if self.modern_version is None and token is None:
            return None
        meta = own_keys(caller)
        if token is not None:
            meta["progressToken"] = token
        if self.modern_version is not None:
            meta.update(request_meta(self.modern_version, self.client_info, capabilities or {},
                                     log_level=log_level))
        return meta

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        await self._write(encode_notification(method, params))

    async def _wait(self, pending: _Pending) -> None:
        if pending.done.is_set():
            return
        # One timer for every request (cheaper than a `move_on_at` scope per request).
        pending.waiting = True
        try:
            deadlines().add(min(pending.deadline, pending.hard_deadline), pending)
            await pending.done.wait()
        finally:
            pending.waiting = False
        if pending.timed_out:
            raise UpstreamTimeout(
                f"upstream {self.upstream_id!r} did not answer {pending.method} within "
                f"{pending.window:g} s")

    async def _cancel_upstream(self, request_id: int, reason: str) -> None:
        """Tell the upstream to stop (shielded: the caller itself is being cancelled)."""
        note = encode_notification("notifications/cancelled", {"requestId": request_id, "reason": reason})
        with trio.CancelScope(shield=True), trio.move_on_after(CANCEL_WRITE_S):
            try:
                await self._write(note)
            except UpstreamError:
                log.debug("could not forward a cancel", upstream=self.upstream_id, id=request_id)

    async def _handle(self, event: Event) -> None:
        if isinstance(event, Response):
            pending = self._pending.get(event.id)
            if pending is not None and not pending.done.is_set():
                pending.response = event
                pending.done.set()
            elif self._core.issued(event.id):  # a cancelled or timed-out request's late answer
                log.debug("late upstream answer dropped", upstream=self.upstream_id, request=event.id)
            else:
                self._complain("upstream answered no request we sent; dropped", request=event.id)
        elif isinstance(event, Notification):
            if event.method == "notifications/progress":
                self._progress(event.params)
            else:
                self._on_notification(event)
        elif isinstance(event, Request):
            await self._server_request(event)
        elif isinstance(event, BrokenAnswer):
            self._complain("upstream answer could not be read", request=event.request_id, error=event.error)
            self._fail(event.request_id, UpstreamBadAnswer(
                f"upstream {self.upstream_id!r} sent an answer to this request that could not be read"))
        elif isinstance(event, OversizeResponse):
            log.warning("upstream line over the cap dropped", upstream=self.upstream_id,
                        size_at_least=event.size_at_least, request=event.request_id)
            if event.request_id is not None:
                self._fail(event.request_id, UpstreamError(
                    f"upstream {self.upstream_id!r} sent a response over the message cap"))
        else:
            self._complain("upstream wrote a non-JSON-RPC line; skipped", error=event.error)

    def _fail(self, request_id: jsonrpc.RequestId, error: UpstreamError) -> None:
        """Fail one pending request now (if it is still waiting)."""
        pending = self._pending.get(request_id)
        if pending is not None and not pending.done.is_set():
            pending.failure = error
            pending.done.set()

    def _complain(self, kind: str, **fields: Any) -> None:
        """Log a bad upstream line (`kind` is the log event), rate-limited per kind: the 1st,
        10th, 100th... (with the count). Never the line itself: it may hold anything."""
        count = self._complaints[kind] = self._complaints.get(kind, 0) + 1
        if count in _REPORTED_AT:
            log.warning(kind, upstream=self.upstream_id, count=count, **fields)

    async def _server_request(self, request: Request) -> None:
        """Answer `ping` and anything no call can answer at once; hand the rest to a task."""
        owner = self._owner() if request.method in BRIDGED_REQUESTS else None
        if owner is not None and owner.on_request is not None and self._tasks is not None:
            scope = trio.CancelScope()
            owner.handlers.add(scope)  # now, so a call ending before the task starts still cancels it
            self._tasks.start_soon(self._answer_for_caller, request, owner, owner.on_request, scope)
            return
        if owner is None and self._fallback is not None and request.method in BRIDGED_REQUESTS \
                and self._tasks is not None:
            self._tasks.start_soon(self._answer_by_fallback, request, self._fallback)
            return
        if request.method == "ping":
            answer = encode_response(request.id, {})
        elif request.method in DECLINED:
            answer = encode_response(request.id, dict(DECLINED[request.method]))
        else:
            answer = encode_error(request.id, jsonrpc.METHOD_NOT_FOUND, f"Method not found: {request.method}")
        with contextlib.suppress(UpstreamError):  # the child is going away; the supervisor sees it
            await self._write(answer)

    def _owner(self) -> _Pending | None:
        """The call a server→client request belongs to. stdio carries no association between the
        upstream's request and the call that caused it, so the most recently started in-flight
        call with a handler answers: with one call at a time (the common case) that is exact."""
        for pending in reversed(self._pending.values()):  # ids increase: newest first
            if pending.on_request is not None and not pending.done.is_set():
                return pending
        return None

    async def _answer_for_caller(self, request: Request, owner: _Pending, handler: ServerRequests,
                                 scope: trio.CancelScope) -> None:
        answer: bytes | None = None
        try:
            with scope:
                try:
                    result = await handler(request.method, request.params)
                except ProtocolError as exc:
                    error = jsonrpc.error_message(request.id, exc.code, exc.message, exc.data)
                    answer = jsonrpc.encode(error)
                except Exception:
                    log.exception("answering an upstream request failed", upstream=self.upstream_id,
                                  method=request.method)
                    answer = encode_error(request.id, jsonrpc.INTERNAL_ERROR, "Internal error")
                else:
                    answer = (encode_response(request.id, result) if isinstance(result, dict) else
                              encode_error(request.id, jsonrpc.INTERNAL_ERROR, "Internal error"))
        finally:
            owner.handlers.discard(scope)
            # The upstream gets a whole window for its work after the answer.
            owner.deadline = min(trio.current_time() + owner.window, owner.hard_deadline)
        if answer is None:  # the call that owned the handler ended first
            answer = encode_error(request.id, jsonrpc.INTERNAL_ERROR,
                                  f"{request.method} abandoned: the call it belonged to has ended")
        with contextlib.suppress(UpstreamError):
            await self._write(answer)

    async def _answer_by_fallback(self, request: Request, handler: ServerRequests) -> None:
        """A request no call owns, answered by the fallback (bounded: a client that never answers
        must not hold the upstream's question forever)."""
        answer = encode_error(request.id, jsonrpc.INTERNAL_ERROR, f"{request.method}: no answer in time")
        with trio.move_on_after(FALLBACK_WINDOW_S):
            try:
                result = await handler(request.method, request.params)
            except ProtocolError as exc:
                answer = jsonrpc.encode(jsonrpc.error_message(request.id, exc.code, exc.message, exc.data))
            except Exception:
                log.exception("answering an upstream request failed", upstream=self.upstream_id,
                              method=request.method)
                answer = encode_error(request.id, jsonrpc.INTERNAL_ERROR, "Internal error")
            else:
                answer = encode_response(request.id, result)
        with contextlib.suppress(UpstreamError):
            await self._write(answer)

    def _progress(self, params: dict[str, Any]) -> None:
        token = params.get("progressToken")
        request_id = self._by_token.get(token) if isinstance(token, str) else None
        pending = self._pending.get(request_id) if request_id is not None else None
        if pending is None or not pending.rearms:
            return
        pending.deadline = min(trio.current_time() + pending.window, pending.hard_deadline)
        if pending.on_progress is not None:
            pending.on_progress(params)


def _token(request_id: jsonrpc.RequestId) -> str:
    return f"tf-progress-{request_id}"
