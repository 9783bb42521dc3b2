"""An upstream's child process: spawned in its own session, stderr always drained, reaped.

Stopping follows the MCP stdio shutdown: close stdin → wait → SIGTERM the group → wait →
SIGKILL the group; the leader is waited for (no zombie) and the group is swept, so a new
incarnation never starts while anything of the old one is alive.
"""

from __future__ import annotations

import collections
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import structlog
import trio

from tfunnel.errors import UpstreamError
from tfunnel.proc.children import killpg, limit_child

log = structlog.get_logger("tfunnel.upstream")

# MCP's stdio shutdown: after stdin closes, a well-behaved server exits on its own; give it this
# long, then SIGTERM the group and give it as long again before SIGKILL.
STDIN_GRACE_S = 2.0
TERM_GRACE_S = 2.0
# The SIGTERM grace when the gateway is stopping by a signal.
URGENT_TERM_GRACE_S = 0.5
# How much of an upstream's stderr we keep for /health and logs (never for clients).
STDERR_TAIL_BYTES = 4096


class SpawnFailed(UpstreamError):
    """The child could not be started; `permanent` when retrying soon cannot help (no such
    command, missing cwd, not executable: things that may heal outside our config); `final` when
    only a config change can help (an isolation refusal, a transport this version lacks): then it
    is not retried at all."""

    def __init__(self, message: str, *, permanent: bool, final: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent or final
        self.final = final


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


async def spawn(upstream_id: str, argv: Sequence[str], cwd: Path, env: Mapping[str, str]) -> trio.Process:
    try:
        is_dir = await trio.Path(cwd).is_dir()
    except (OSError, ValueError):
        is_dir = False
    if not is_dir:
        raise SpawnFailed(f"upstream {upstream_id!r}: working directory {cwd} does not exist", permanent=True)
    try:
        proc = await trio.lowlevel.open_process(
            list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            cwd=str(cwd), env=dict(env), start_new_session=True)
        limit_child(proc.pid)
        return proc
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


async def stop(proc: trio.Process, urgent: trio.Event | None = None) -> int | None:
    """The MCP stdio shutdown sequence; returns the exit status. Call shielded from cancellation.

    Once `urgent` is set (the gateway itself was told to stop by a signal, and whoever sent it
    may follow with SIGKILL soon) the stdin grace ends at once and the SIGTERM grace is short."""
    if proc.stdin is not None:
        await proc.stdin.aclose()
    await _wait(proc, STDIN_GRACE_S, urgent, 0.0)
    if proc.returncode is None:
        killpg(proc.pid, signal.SIGTERM)
        await _wait(proc, TERM_GRACE_S, urgent, URGENT_TERM_GRACE_S)
    if proc.returncode is None:
        killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
    killpg(proc.pid, signal.SIGKILL)  # grandchildren left in the group die with the upstream
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            await stream.aclose()
    return proc.returncode


async def _wait(proc: trio.Process, grace_s: float, urgent: trio.Event | None, urgent_grace_s: float) -> None:
    """Wait up to `grace_s` for the child to exit, or up to `urgent_grace_s` once `urgent` is set."""
    with trio.move_on_after(grace_s) as scope:
        if urgent is None:
            await proc.wait()
            return
        async with trio.open_nursery() as nursery:
            async def hurry() -> None:
                await urgent.wait()
                scope.deadline = min(scope.deadline, trio.current_time() + urgent_grace_s)
            nursery.start_soon(hurry)
            await proc.wait()
            nursery.cancel_scope.cancel()
