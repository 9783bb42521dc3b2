"""One live MCP client session with an upstream over a byte-stream pair (the child's pipes).

Callers write their own request lines through a `LineWriter` (a cancelled caller never leaves
half a line); a reader task feeds `ClientCore` and resolves pending requests out of order.
Requests time out by kind:
control calls after `request_timeout`, payload calls after `timeout` re-armed by each matching
progress notification, never past an absolute maximum. A timed-out or cancelled request is
cancelled upstream with `notifications/cancelled` carrying the upstream's own request id.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog
import trio

from tfunnel.errors import UpstreamError, UpstreamTimeout
from tfunnel.linewriter import LineWriter
from tfunnel.protocol import jsonrpc
from tfunnel.protocol.jsonrpc import Notification, Request, Response
from tfunnel.upstream.client import (
    ClientCore,
    Garbage,
    OversizeResponse,
    encode_error,
    encode_notification,
    encode_request,
    encode_response,
)

log = structlog.get_logger("tfunnel.upstream")

_READ_CHUNK = 65536
# How long forwarding a cancel may hold up the cancelled caller.
CANCEL_WRITE_S = 1.0
# A payload call re-armed by progress still ends after this many payload windows.
ABSOLUTE_MAX_WINDOWS = 10

Progress = Callable[[dict[str, Any]], None]


@dataclass
class _Pending:
    method: str
    deadline: float
    hard_deadline: float
    window: float
    rearms: bool = False
    on_progress: Progress | None = None
    done: trio.Event = field(default_factory=trio.Event)
    response: Response | None = None
    failure: UpstreamError | None = None


class UpstreamSession:
    def __init__(self, upstream_id: str, send: trio.abc.SendStream, receive: trio.abc.ReceiveStream, *,
                 max_line_bytes: int, on_notification: Callable[[Notification], None]) -> None:
        self.upstream_id = upstream_id
        self._send_stream = send
        self._receive = receive
        self._core = ClientCore(max_line_bytes)
        self._on_notification = on_notification
        self._pending: dict[jsonrpc.RequestId, _Pending] = {}
        self._by_token: dict[str, jsonrpc.RequestId] = {}
        self._writer = LineWriter(send) if isinstance(send, trio.lowlevel.FdStream) else None
        self._send_stream = send
        self._closed: UpstreamError | None = None

    async def run(self) -> None:
        """Read until the upstream closes its output. In-flight requests stay pending until the
        owner calls `fail_all` with the reason (e.g. the exit status)."""
        await self._reader()

    async def close_input(self) -> None:
        """Close the upstream's stdin (the first step of the stdio shutdown)."""
        if self._writer is not None:
            await self._writer.aclose()
        else:
            await self._send_stream.aclose()

    async def _write(self, line: bytes) -> None:
        try:
            if self._writer is not None:
                await self._writer.write(line)
            else:
                await self._send_stream.send_all(line)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise UpstreamError(f"upstream {self.upstream_id!r} is not reading its input") from exc

    def fail_all(self, error: UpstreamError) -> None:
        """Fail every in-flight request at once (the child is gone); later requests fail too."""
        self._closed = error
        for pending in self._pending.values():
            if not pending.done.is_set():
                pending.failure = error
                pending.done.set()

    async def request(self, method: str, params: dict[str, Any], *, timeout_s: float,
                      payload: bool = False, on_progress: Progress | None = None) -> dict[str, Any]:
        """Send a request and wait for its result; raise `UpstreamError` (incl. for an error answer)."""
        if self._closed is not None:
            raise self._closed
        now = trio.current_time()
        hard = now + timeout_s * (ABSOLUTE_MAX_WINDOWS if payload else 1)
        pending = _Pending(method, now + timeout_s, hard, timeout_s, payload, on_progress)
        request_id = self._core.new_id()
        if payload:
            # Always ask for progress on payload calls: it re-arms the window even when no client
            # listens. Our own token, as the client's may collide with another client's.
            params = {**params, "_meta": {**(params.get("_meta") or {}), "progressToken": _token(request_id)}}
            self._by_token[_token(request_id)] = request_id
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
        if pending.failure is not None:
            raise pending.failure
        response = pending.response
        assert response is not None
        if response.error is not None:
            message = str(response.error.get("message", "error"))
            raise UpstreamError(f"upstream {self.upstream_id!r} answered {method} with an error: {message}")
        return response.result or {}

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        await self._write(encode_notification(method, params))

    async def _wait(self, pending: _Pending) -> None:
        while not pending.done.is_set():
            with trio.move_on_at(min(pending.deadline, pending.hard_deadline)):
                await pending.done.wait()
            now = trio.current_time()
            if not pending.done.is_set() and now >= min(pending.deadline, pending.hard_deadline):
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

    async def _reader(self) -> None:
        while True:
            try:
                data = await self._receive.receive_some(_READ_CHUNK)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""
            for event in self._core.feed(data) if data else self._core.eof():
                await self._handle(event)
            if not data:
                return  # the owner learns why (exit status) and calls fail_all

    async def _handle(self, event: Response | Request | Notification | Garbage | OversizeResponse) -> None:
        if isinstance(event, Response):
            pending = self._pending.get(event.id)
            if pending is not None and not pending.done.is_set():
                pending.response = event
                pending.done.set()
        elif isinstance(event, Notification):
            if event.method == "notifications/progress":
                self._progress(event.params)
            else:
                self._on_notification(event)
        elif isinstance(event, Request):
            # Server→client requests: ping is answered; the rest are not offered by this client.
            answer = (encode_response(event.id, {}) if event.method == "ping" else
                      encode_error(event.id, jsonrpc.METHOD_NOT_FOUND, f"Method not found: {event.method}"))
            with contextlib.suppress(UpstreamError):  # the child is going away; the supervisor sees it
                await self._write(answer)
        elif isinstance(event, OversizeResponse):
            log.warning("upstream line over the cap dropped", upstream=self.upstream_id,
                        size_at_least=event.size_at_least, request=event.request_id)
            pending = self._pending.get(event.request_id) if event.request_id is not None else None
            if pending is not None and not pending.done.is_set():
                pending.failure = UpstreamError(
                    f"upstream {self.upstream_id!r} sent a response over the message cap")
                pending.done.set()
        else:
            log.warning("upstream wrote a non-JSON-RPC line; skipped", upstream=self.upstream_id,
                        error=event.error)

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
