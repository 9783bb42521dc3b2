"""The mock upstream in-process: the same server (`tfunnel.testing.mock_upstream.Server`, its
reader on the gateway's Trio thread, a worker thread per request as in the process) behind an
`UpstreamTransport` on memory streams, for tests whose subject is the gateway, not the child.

`transports(fallback)` is a `TransportFactory` that serves the mock this way whenever an expose
entry runs it (`python -m tfunnel.testing.mock_upstream ...`, or the seeded
`mcp/servers/mock_upstream.py` while it is the module's own bytes) with no option that needs a
process (`--ignore-sigterm`, `--pid-file`); anything else gets `fallback` (the real transports).

What differs from the process, on purpose and visibly: no pid (`pid` None, `peer` "in-process
mock"); `spawn` answers an error result; `crash` and `--exit-at-start` end the server with their
status (its reader stops, its output ends, its workers are woken), as the process's exit does.
The isolation guard runs first, as for a child.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio
import trio.testing

import tfunnel.testing.mock_upstream as mock
from tfunnel.config.expose import UpstreamSpec
from tfunnel.errors import UpstreamError
from tfunnel.upstream.factory import transport_for
from tfunnel.upstream.states import Context
from tfunnel.upstream.stdio import EXIT_READ_GRACE_S, NdjsonStream, StderrTail, guard
from tfunnel.upstream.transport import MessageStream, Received, TransportFactory, UpstreamTransport

MODULE = "tfunnel.testing.mock_upstream"
SEEDED = "mcp/servers/mock_upstream.py"
# Options whose subject is the process: with one of these the mock runs as a child.
PROCESS_OPTIONS = frozenset({"--ignore-sigterm", "--pid-file"})
_READ_CHUNK = 65536


def mock_arguments(spec: UpstreamSpec, home: Path) -> list[str] | None:
    """The mock's own arguments when `spec` runs the mock and it can run in-process; else None."""
    if spec.transport != "stdio" or not os.path.basename(spec.command).startswith("python"):
        return None
    args = list(spec.args)
    if args[:2] == ["-m", MODULE]:
        rest = args[2:]
    elif args and args[0].endswith("mock_upstream.py") and _is_module_copy(spec.resolved_cwd(home) / args[0]):
        rest = args[1:]
    else:
        return None
    if any(arg.split("=", 1)[0] in PROCESS_OPTIONS for arg in rest):
        return None
    return rest


def _is_module_copy(path: Path) -> bool:
    try:
        return path.read_bytes() == Path(mock.__file__).read_bytes()
    except OSError:
        return False


def transports(fallback: TransportFactory = transport_for) -> TransportFactory:
    """A `TransportFactory`: the mock in-process where it can be, `fallback` for the rest."""

    def make(spec: UpstreamSpec, ctx: Context) -> UpstreamTransport:
        args = mock_arguments(spec, ctx.home)
        if args is None:
            return fallback(spec, ctx)
        return InProcessMock(spec, ctx, args)

    return make


class _ThreadIO(mock.ProcessIO):
    """Where the server's bytes go in-process: everything is handed to the Trio thread (in the
    order written, from any thread), which owns the streams."""

    in_process = True

    def __init__(self, token: trio.lowlevel.TrioToken, out: trio.testing.MemoryReceiveStream,
                 tail: StderrTail, on_exit: Callable[[int], None]) -> None:
        self._token = token
        self._out = out
        self._tail = tail
        self._on_exit = on_exit
        self.ended = False

    def _soon(self, fn: Callable[..., Any], *args: Any) -> None:
        with contextlib.suppress(trio.RunFinishedError):  # a worker that outlived the test's run
            self._token.run_sync_soon(fn, *args)

    def _put(self, data: bytes) -> None:
        if not self.ended:
            self._out.put_data(data)

    def write_out(self, data: bytes) -> None:
        self._soon(self._put, data)

    def write_err(self, data: bytes) -> None:
        self._soon(self._tail.add, data)

    def exit(self, code: int) -> None:
        self._soon(self._on_exit, code)
        raise mock.Exited(code)  # ends this worker thread, as the process's exit would


class InProcessStream:
    """One in-process incarnation's `MessageStream`."""

    def __init__(self, framed: NdjsonStream, tail: StderrTail, upstream_id: str) -> None:
        self._framed = framed
        self._tail = tail
        self._upstream_id = upstream_id
        self.status: int | None = None
        self.exited = trio.Event()
        self._gone = trio.Event()
        self._reading: trio.CancelScope | None = None

    @property
    def pid(self) -> int | None:
        return None

    @property
    def peer(self) -> str:
        return "in-process mock"

    async def send(self, message: bytes) -> None:
        if self.exited.is_set():
            raise UpstreamError(f"upstream {self._upstream_id!r} is not reading its input")
        await self._framed.send(message)

    async def receive(self) -> Received | None:
        if self._gone.is_set():
            return None
        with trio.CancelScope() as self._reading:
            return await self._framed.receive()
        return None

    async def watch_exit(self) -> None:
        await self.exited.wait()
        await trio.sleep(EXIT_READ_GRACE_S)  # as for a child: what it wrote is read first
        self._gone.set()
        if self._reading is not None:
            self._reading.cancel()

    async def wait_ended(self) -> None:
        await self._gone.wait()

    async def wait_closed(self) -> str:
        with trio.move_on_after(EXIT_READ_GRACE_S):
            await self.exited.wait()
        return f"exited with status {self.status}" if self.status is not None else "closed its output"

    def stderr_tail(self) -> str:
        return self._tail.text() if self._tail.total else ""


class InProcessMock:
    """Each `connect()` starts a new in-process mock server."""

    def __init__(self, spec: UpstreamSpec, ctx: Context, args: Sequence[str]) -> None:
        self._spec = spec
        self._ctx = ctx
        self._args = list(args)

    def _options(self) -> argparse.Namespace:
        opts = mock.parse_args(self._args)
        cwd = self._spec.resolved_cwd(self._ctx.home)
        for name in ("method_log", "cancel_log"):  # relative to the child's cwd, as in the process
            value = getattr(opts, name)
            if value is not None:
                setattr(opts, name, str(cwd / value))
        return opts

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[MessageStream]:
        spec = self._spec
        guard(spec, self._ctx)
        opts = self._options()
        to_server, server_input = trio.testing.memory_stream_one_way_pair()
        from_server = trio.testing.MemoryReceiveStream()
        tail = StderrTail()
        framed = NdjsonStream(to_server, from_server, max_line_bytes=self._ctx.limits.max_message_bytes,
                              upstream_id=spec.id)
        stream = InProcessStream(framed, tail, spec.id)

        def on_exit(code: int) -> None:
            if stream.exited.is_set():
                return
            io.ended = True
            stream.status = code
            from_server.put_eof()
            server.abandon()
            stream.exited.set()

        io = _ThreadIO(trio.lowlevel.current_trio_token(), from_server, tail, on_exit)
        server = mock.Server(opts, io)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(stream.watch_exit)
            nursery.start_soon(_serve, server, opts, server_input, on_exit)
            try:
                yield stream
            finally:
                with trio.CancelScope(shield=True):
                    await framed.close_input()
                on_exit(0)  # the end of its input: the mock exits 0 (its reader may be cancelled by now)
                nursery.cancel_scope.cancel()


async def _serve(server: mock.Server, opts: argparse.Namespace, receive: trio.abc.ReceiveStream,
                 on_exit: Callable[[int], None]) -> None:
    """What the mock's `main` and `Server.serve` do, on the Trio thread: the start options, then
    each line to `Server.receive` (which hands requests to worker threads), until the input ends."""
    if opts.exit_at_start is not None:
        server.log("exiting at start")
        on_exit(int(opts.exit_at_start))
        return
    if opts.stderr_at_start > 0:
        mock.flood_stderr(opts.stderr_at_start, server.io.write_err)
    if opts.delay_start > 0:
        await trio.sleep(opts.delay_start)
    pending = b""
    while True:
        data = await receive.receive_some(_READ_CHUNK)
        if not data:
            break
        *lines, pending = (pending + data).split(b"\n")
        for raw in lines:
            if raw.strip() and not getattr(server.io, "ended", False):
                server.receive(raw + b"\n")
    if pending.strip():
        server.receive(pending)
    server.log("stdin closed; exiting")
    on_exit(0)

