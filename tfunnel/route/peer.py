"""What a transport offers the route layer for server→client messages on one connection, and the
two callables the era adapters build from it (progress relayed, requests answered)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import trio

Progress = Callable[[dict[str, Any]], None]
ServerRequests = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]


class Peer(Protocol):
    """The client end of one connection, as far as the route layer writes to it."""

    # False when the transport cannot carry server→client requests (then `ask` falls back).
    can_request: bool
    # Set when the transport ends gracefully: open listen streams end with their final result.
    ending: trio.Event

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]: ...

    def notify_nowait(self, method: str, params: dict[str, Any]) -> None:
        """Best effort: dropped when the client is not keeping up (progress is lossy)."""

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        """Ordered and reliable (listen streams): waits while the client is slow."""
