"""The stdio upstream transport: a child process in its own session, NDJSON on its pipes.

Spawning (with the isolation guard first, the reaper's run scope around the whole incarnation
and the children's open-files limit), line framing with the message cap, stderr always drained
(its tail kept for logs), watching the child's exit as well as its output, and the stop
sequence of `tfunnel.proc.children` with the upstream graces: close stdin → wait → SIGTERM the
group → wait → SIGKILL the group. The leader is reaped and the group swept before `connect()`
returns, so a new incarnation never starts while anything of the old one is alive.
"""

from __future__ import annotations

import collections
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import structlog
import trio

from tfunnel.config.expose import UpstreamSpec
from tfunnel.errors import UpstreamError
from tfunnel.proc.children import UPSTREAM_GRACES, start_child, stop_child
from tfunnel.proc.linewriter import LineWriter
from tfunnel.proc.reaper import REAPER, RunScope
from tfunnel.protocol.framing import LineReader
from tfunnel.upstream.isolation import isolation_problems
from tfunnel.upstream.states import Context
from tfunnel.upstream.transport import MessageStream, Received, SpawnFailed

log = structlog.get_logger("tfunnel.upstream")

_READ_CHUNK = 65536
# How much of an upstream's stderr we keep for /health and logs (never for clients).
STDERR_TAIL_BYTES = 4096
# After an upstream exits, how long its output is still read (answers it wrote just before).
EXIT_READ_GRACE_S = 0.2
# After its output ends, how long we wait to learn the exit status: a child that closes its
# stdout is usually exiting (the same span as the stdin grace of the stop sequence).
EXIT_AFTER_EOF_S = UPSTREAM_GRACES.stdin_s


class StderrTail:
    """The last `STDERR_TAIL_BYTES` of a child's stderr, read continuously so the child never
    blocks on a full pipe."""

    def __init__(self) -> None:
        self._chunks: collections.deque[bytes] = collections.deque()
        self._size = 0
        self.total = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        self._chunks.append(data)
        self._size += len(data)
        while self._size - len(self._chunks[0]) >= STDERR_TAIL_BYTES:
            self._size -= len(self._chunks.popleft())

    def text(self) -> str:
        return b"".join(self._chunks)[-STDERR_TAIL_BYTES:].decode("utf-8", "replace")


class NdjsonStream:
    """`Messages` as newline-delimited JSON over a byte-stream pair, lines capped at
    `max_line_bytes`. Writes go through a `LineWriter` (a cancelled sender never leaves half a
    line; on a pipe, no writer task in between)."""

    def __init__(self, send: trio.abc.SendStream, receive: trio.abc.ReceiveStream, *,
                 max_line_bytes: int, upstream_id: str) -> None:
        self._upstream_id = upstream_id
        self._receive = receive
        self._writer = LineWriter(send)
        self._lines = LineReader(max_line_bytes)
        self._ready: collections.deque[Received] = collections.deque()
        self._eof = False

    async def send(self, message: bytes) -> None:
        try:
            await self._writer.write(message)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise UpstreamError(f"upstream {self._upstream_id!r} is not reading its input") from exc

    async def receive(self) -> Received | None:
        while not self._ready:
            if self._eof:
                return None
            try:
                data = await self._receive.receive_some(_READ_CHUNK)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""
            if data:
                self._ready.extend(self._lines.feed(data))
            else:
                self._eof = True
                self._ready.extend(self._lines.eof())
        return self._ready.popleft()

    async def close_input(self) -> None:
        """Close the sending side (the first step of the stdio shutdown), through the writer that
        owns it."""
        await self._writer.aclose()


class StdioStream:
    """One child's `MessageStream`. Its end is the child's exit or the end of its output,
    whichever comes first: a helper the child spawned may hold its stdout open long after the
    child itself died, so the exit is watched too (`watch_exit`)."""

    def __init__(self, proc: trio.Process, framed: NdjsonStream, tail: StderrTail) -> None:
        self._proc = proc
        self._framed = framed
        self._tail = tail
        self._ended = False
        self._gone = trio.Event()
        self._reading: trio.CancelScope | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid

    @property
    def peer(self) -> str:
        return f"pid {self._proc.pid}"

    async def send(self, message: bytes) -> None:
        await self._framed.send(message)

    async def receive(self) -> Received | None:
        if self._ended:
            return None
        with trio.CancelScope() as self._reading:
            return await self._framed.receive()
        return None  # `watch_exit` ended reading: the child is gone, and its grace ran out

    async def watch_exit(self) -> None:
        await self._proc.wait()
        # What it wrote before dying is still in the pipe: read on to its end, unless a helper
        # holds the pipe open (then that end never comes).
        await trio.sleep(EXIT_READ_GRACE_S)
        self._ended = True
        self._gone.set()
        if self._reading is not None:
            self._reading.cancel()

    async def wait_ended(self) -> None:
        await self._gone.wait()

    async def wait_closed(self) -> str:
        if self._proc.returncode is None:
            with trio.move_on_after(EXIT_AFTER_EOF_S):
                await self._proc.wait()
        status = self._proc.returncode
        return f"exited with status {status}" if status is not None else "closed its output"

    def stderr_tail(self) -> str:
        return self._tail.text() if self._tail.total else ""


class StdioTransport:
    """Each `connect()` spawns `spec`'s command as a new child."""

    def __init__(self, spec: UpstreamSpec, ctx: Context) -> None:
        self._spec = spec
        self._ctx = ctx

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[MessageStream]:
        spec, ctx = self._spec, self._ctx
        guard(spec, ctx)
        # Whatever the child daemonizes beyond its process group is stopped with this incarnation.
        with REAPER.run({**ctx.env, **spec.env}) as run:
            proc = await spawn(spec.id, [spec.command, *spec.args], spec.resolved_cwd(ctx.home), run)
            assert proc.stdin is not None and proc.stdout is not None
            tail = StderrTail()
            framed = NdjsonStream(proc.stdin, proc.stdout, max_line_bytes=ctx.limits.max_message_bytes,
                                  upstream_id=spec.id)
            stream = StdioStream(proc, framed, tail)
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(drain_stderr, proc, tail)
                    nursery.start_soon(stream.watch_exit)
                    yield stream
                    nursery.cancel_scope.cancel()
            finally:
                with trio.CancelScope(shield=True):
                    # stdin through the framing's writer, which owns it
                    await stop_child(proc, UPSTREAM_GRACES, close_input=framed.close_input, urgent=ctx.urgent)
                    for pipe in (proc.stdout, proc.stderr):
                        if pipe is not None:
                            await pipe.aclose()


def guard(spec: UpstreamSpec, ctx: Context) -> None:
    """The isolation guard before a start: raise a final `SpawnFailed` naming what lies outside
    the home (suspended, with a warning, for the wrapped upstream)."""
    problems = isolation_problems(spec, ctx.home)
    if problems and ctx.wrapped() == spec.id:
        log.warning("isolation guard suspended: the upstream is wrapped", upstream=spec.id,
                    outside="; ".join(problems))
    elif problems:
        raise SpawnFailed(f"upstream {spec.id!r} refused by the isolation guard: "
                          + "; ".join(problems), permanent=True, final=True)


async def spawn(upstream_id: str, argv: Sequence[str], cwd: Path, run: RunScope) -> trio.Process:
    """Start the child (`tfunnel.proc.children.start_child`); raise `SpawnFailed`, never OSError."""
    try:
        is_dir = await trio.Path(cwd).is_dir()
    except (OSError, ValueError):
        is_dir = False
    if not is_dir:
        raise SpawnFailed(f"upstream {upstream_id!r}: working directory {cwd} does not exist", permanent=True)
    try:
        return await start_child(argv, cwd=str(cwd), run=run)
    except (FileNotFoundError, NotADirectoryError) as exc:
        raise SpawnFailed(f"upstream {upstream_id!r}: command {argv[0]!r} not found", permanent=True) from exc
    except PermissionError as exc:
        raise SpawnFailed(f"upstream {upstream_id!r}: command {argv[0]!r} is not executable",
                          permanent=True) from exc
    except OSError as exc:
        raise SpawnFailed(f"upstream {upstream_id!r}: cannot start {argv[0]!r}: {exc.strerror or exc}",
                          permanent=False) from exc
    except ValueError as exc:  # a NUL byte in the command line, cwd or env: only an edit fixes it
        raise SpawnFailed(f"upstream {upstream_id!r}: cannot start {argv[0]!r}: {exc}", permanent=True,
                          final=True) from exc


async def drain_stderr(proc: trio.Process, tail: StderrTail) -> None:
    assert proc.stderr is not None
    try:
        while data := await proc.stderr.receive_some(65536):
            tail.add(bytes(data))
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
