"""Server→client requests on one client connection (stdio, or a legacy HTTP session).

Ids are ours (`tfunnel-N`), so they never collide with the client's. A caller waits for the
matching response; if the caller is cancelled first, the client is told with
`notifications/cancelled`. An error answer raises `ProtocolError` with the client's code.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import structlog
import trio

from tfunnel.errors import ProtocolError
from tfunnel.protocol import jsonrpc
from tfunnel.protocol.jsonrpc import Response

log = structlog.get_logger("tfunnel.serve")

Send = Callable[[dict[str, Any]], Awaitable[None]]
SendNowait = Callable[[dict[str, Any]], None]


class _Pending:
    def __init__(self) -> None:
        self.done = trio.Event()
        self.response: Response | None = None


class OutboundRequests:
    def __init__(self) -> None:
        self._pending: dict[jsonrpc.RequestId, _Pending] = {}
        self._next = 0

    async def request(self, method: str, params: dict[str, Any], send: Send, send_nowait: SendNowait,
                      ) -> dict[str, Any]:
        """Send a request with `send` and wait for the client's answer to it."""
        self._next += 1
        request_id = f"tfunnel-{self._next}"
        pending = _Pending()
        self._pending[request_id] = pending
        try:
            await send(jsonrpc.request_message(request_id, method, params))
            await pending.done.wait()
        except trio.Cancelled:
            send_nowait(jsonrpc.notification_message(
                "notifications/cancelled", {"requestId": request_id, "reason": "the call was cancelled"}))
            raise
        finally:
            del self._pending[request_id]
        response = pending.response
        assert response is not None
        if response.error is not None:
            code = response.error.get("code")
            if not isinstance(code, int) or isinstance(code, bool):
                code = jsonrpc.INTERNAL_ERROR
            raise ProtocolError(code,
                                str(response.error.get("message", "error"))[:500])
        return response.result or {}

    def resolve(self, response: Response) -> None:
        """A response from the client: wake the request it answers (others are ignored)."""
        pending = self._pending.get(response.id)
        if pending is None:
            log.debug("response to an unknown request ignored", id=response.id)
            return
        pending.response = response
        pending.done.set()
