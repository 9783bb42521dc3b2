"""Write whole NDJSON lines to a stream from many tasks, without a writer task in between.

A line is written straight from the calling task: in the common case one `os.write` takes it
whole and the call costs no trip through the scheduler. A cancelled caller never tears a line:
cancellation is honoured only before the first byte; once part of a line is out, the rest is
written shielded. A peer that leaves a half-written line for `STALL_S`, or (with
`stall_before_first_byte`, for a client) takes nothing for that long while a line waits, or has
gone away, makes the writer broken (`on_broken` runs once: for the
stdio gateway, the client is gone) and later writes raise `trio.BrokenResourceError`; what we
hold for a client never grows without bound behind a peer that does not read.

On any other `trio.abc.SendStream` (memory streams in tests, a socket) a line goes out with one
`send_all` under the lock. Such a stream does not say how much of a line is out, so the whole
line counts as started: it is written shielded, and a peer that takes nothing of it for `STALL_S`
breaks the writer, as a half-written line on a pipe does.

The writer owns the stream from then on: close it with `aclose()` (never the stream directly),
so a raw fd number is never written after it was released.
"""

from __future__ import annotations

import errno
import math
import os
from collections.abc import Callable

import trio

# How long a peer may leave a half-written line unread before we give up on it.
STALL_S = 10.0


class LineWriter:
    def __init__(self, stream: trio.abc.SendStream, on_broken: Callable[[], None] = lambda: None, *,
                 stall_before_first_byte: bool = False) -> None:
        self._stream = stream
        # A client that takes nothing for STALL_S counts as gone; an upstream busy with a long
        # call may legitimately read nothing for longer (its callers' own timeouts bound that).
        self._stall_before_first_byte = stall_before_first_byte
        # The eager path needs a raw descriptor; any other stream takes whole lines by send_all.
        self._fd = stream.fileno() if isinstance(stream, trio.lowlevel.FdStream) else None
        self._lock = trio.StrictFIFOLock()
        self._on_broken = on_broken
        self.broken = False
        self.closed = False

    async def write(self, line: bytes) -> None:
        """Write `line` whole; raise `trio.BrokenResourceError` once the peer is gone or stalled."""
        if self._fd is None:
            await self._send_all(line)
            return
        await trio.lowlevel.checkpoint_if_cancelled()
        sent = -1  # nothing attempted yet
        if self._lock.locked():
            await self._lock.acquire()
        elif self.closed or self.broken:
            raise trio.BrokenResourceError("the stream is closed")
        else:
            # Nobody is mid-line, and nothing from here to the write awaits: a line that goes
            # out whole in one write (the common case) needs no lock; a partial one takes it now.
            sent = self._write_some(line)
            if sent == len(line):
                return
            self._lock.acquire_nowait()
        try:
            if sent < 0:
                if self.closed or self.broken:
                    raise trio.BrokenResourceError("the stream is closed")
                sent = self._write_some(line)
            view = memoryview(line)
            while sent == 0:  # nothing out yet: waiting is still cancellable
                bound = STALL_S if self._stall_before_first_byte else math.inf
                with trio.move_on_after(bound) as stall:
                    await trio.lowlevel.wait_writable(self._fileno())
                if stall.cancelled_caught:
                    self._break()
                    raise trio.BrokenResourceError("the peer stopped reading")
                if self.closed:
                    raise trio.BrokenResourceError("the stream is closed")
                sent = self._write_some(view)
            if sent < len(view):
                await self._finish(view, sent)
        finally:
            self._lock.release()

    async def _finish(self, view: memoryview, sent: int) -> None:
        with trio.CancelScope(shield=True), trio.move_on_after(STALL_S):
            while sent < len(view):
                await trio.lowlevel.wait_writable(self._fileno())
                if self.closed:
                    break
                sent += self._write_some(view[sent:])
            else:
                return
        self._break()
        raise trio.BrokenResourceError("the peer stopped reading")

    async def _send_all(self, line: bytes) -> None:
        async with self._lock:  # waiting for the lock is still cancellable: nothing is out yet
            if self.closed or self.broken:
                raise trio.BrokenResourceError("the stream is closed")
            try:
                with trio.CancelScope(shield=True), trio.move_on_after(STALL_S) as stall:
                    await self._stream.send_all(line)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self._break()  # the peer is gone: as on a pipe, later writes raise at once
                raise
            if stall.cancelled_caught:
                self._break()
                raise trio.BrokenResourceError("the peer stopped reading")

    def _fileno(self) -> int:
        assert self._fd is not None  # only the eager path waits on the descriptor
        return self._fd

    def _write_some(self, view: bytes | memoryview) -> int:
        try:
            return os.write(self._fileno(), view)
        except BlockingIOError:
            return 0
        except OSError as exc:
            self._break()
            if exc.errno == errno.EBADF:
                raise trio.ClosedResourceError("the stream was closed") from None
            raise trio.BrokenResourceError(str(exc)) from exc

    def _break(self) -> None:
        if not self.broken:
            self.broken = True
            self._on_broken()

    async def aclose(self) -> None:
        self.closed = True
        await self._stream.aclose()
