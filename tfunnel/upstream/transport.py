"""The upstream transport seam: how the supervisor reaches an upstream without knowing what it is.

Shaped like httpcore's network backends: an `UpstreamTransport` makes one connection per
incarnation (`connect()`), which yields a `MessageStream` of whole JSON-RPC messages. The session
(`upstream/session.py`) uses only `Messages` (send, receive); the supervisor also reads what it
needs to report and restart: the peer, why the stream ended, the stderr tail.

Error contract: a transport raises `SpawnFailed` from `connect()` when the upstream cannot be
reached at all, and `UpstreamError` from `send()` when the upstream stops taking input; nothing
of trio, the OS or a client library leaks through. Closing the `connect()` context ends the
connection however it is done (for a child: the stop sequence), shielded, before it returns.

A new transport (Streamable HTTP, WebSocket) is one module implementing `UpstreamTransport`
plus one line in `upstream/factory.py`; the supervisor and the session do not change.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from tfunnel.config.expose import UpstreamSpec
from tfunnel.errors import UpstreamError
from tfunnel.protocol.framing import Oversize
from tfunnel.upstream.states import Context

Received = bytes | Oversize
"""One message as received: its bytes (one JSON-RPC message, no framing), or the framing's marker
for one over the size cap (its first bytes name the request it answered, so that one fails)."""


class SpawnFailed(UpstreamError):
    """The upstream could not be started or reached; `permanent` when retrying soon cannot help
    (no such command, missing cwd, not executable: things that may heal outside our config);
    `final` when only a config change can help (an isolation refusal, a transport this version
    lacks): then it is not retried at all."""

    def __init__(self, message: str, *, permanent: bool, final: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent or final
        self.final = final


class Messages(Protocol):
    """Whole messages both ways: what a session needs of a connection."""

    async def send(self, message: bytes) -> None:
        """Send one encoded message (as `jsonrpc.encode` makes it; a transport without line
        framing drops the trailing newline). A cancelled sender never leaves part of a message
        behind. Raises `UpstreamError` once the upstream takes no more input."""
        ...

    async def receive(self) -> Received | None:
        """The next message, or None once the stream has ended (never raises for the upstream's
        misbehaviour: bad bytes are a message the session's decoder rejects)."""
        ...


class MessageStream(Messages, Protocol):
    """One incarnation's connection, with what the supervisor reports about it."""

    @property
    def pid(self) -> int | None:
        """The child's pid (None for a network peer): `/health`'s `pid`."""
        ...

    @property
    def peer(self) -> str:
        """Who is at the other end, for logs: `pid 1234`, a URL."""
        ...

    async def wait_ended(self) -> None:
        """Return once the upstream is gone for good (a child: its exit, plus a short grace to
        read what it wrote before), even while its output stays open. The supervisor then stops
        the session's reader wherever it is (it may be stuck writing to a dead upstream's input),
        so a crash always fails the calls in flight at once."""
        ...

    async def wait_closed(self) -> str:
        """Once `receive` returned None: why, as the end of "upstream 'x' ...": `exited with
        status 1`, `closed its output`. Bounded in time."""
        ...

    def stderr_tail(self) -> str:
        """The last of what the upstream wrote to its stderr (for logs and /health, never for
        clients); empty when it wrote nothing or has no stderr."""
        ...


class UpstreamTransport(Protocol):
    def connect(self) -> AbstractAsyncContextManager[MessageStream]:
        """Start (or reach) the upstream; the stream lives as long as the context, and leaving
        the context closes it (shielded; for a child, the stop sequence) before it returns.

        Raises `SpawnFailed` on entry when it cannot, before starting any task of its own (so it
        is never wrapped in an exception group). The caller's own exceptions should be raised
        after the context, not through it: a transport may run tasks in a nursery around the body."""
        ...


TransportFactory = Callable[[UpstreamSpec, Context], UpstreamTransport]
"""Makes the transport of one incarnation (`upstream.factory.transport_for`, or a test's)."""
