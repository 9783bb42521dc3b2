"""Child processes in their own process group: the one stop sequence, and `run_child` for tools
and hooks (bounded in time and output). The stdio upstream transport stops its child with the
same sequence (`stop_child`), with its own graces.

The contract: whatever happens to the caller (timeout, cancellation, gateway shutdown), the
whole process group is gone and reaped before `run_child` (or `stop_child`) returns or re-raises.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

import trio

from tfunnel.errors import ToolFailure
from tfunnel.proc.reaper import REAPER, RunScope


@dataclass(frozen=True)
class Graces:
    """How long each step of the stop sequence waits for the child to exit on its own."""

    stdin_s: float  # after its stdin closed (a well-behaved server exits then)
    term_s: float  # after SIGTERM to its group, before SIGKILL
    urgent_term_s: float  # the SIGTERM grace once the gateway itself was told to stop by a signal


# A tool or hook: its stdin is already closed once its arguments are written, so no stdin wait;
# a SIGTERM grace long enough for a script to clean up, short enough that a cancelled call frees
# its slot promptly.
TOOL_GRACES = Graces(stdin_s=0.0, term_s=1.0, urgent_term_s=1.0)
# An upstream (MCP's stdio shutdown): after stdin closes, a well-behaved server exits on its own;
# give it this long, then SIGTERM the group and give it as long again before SIGKILL. When the
# gateway stops by a signal, whoever sent it may follow with SIGKILL soon: the stdin grace ends at
# once and the SIGTERM grace is short.
UPSTREAM_GRACES = Graces(stdin_s=2.0, term_s=2.0, urgent_term_s=0.5)
# After the leader exits, how long grandchildren outside our process group (e.g. a daemon that
# called setsid) may hold our pipes open before we stop reading and return anyway.
DRAIN_AFTER_EXIT_S = 2.0
_READ_CHUNK = 65536


# The open-files limit our children run with, when the gateway raised its own (the HTTP service
# raises its soft limit for its sockets): a child that uses select() must not be handed
# descriptors beyond what it was written for.
_child_nofile: tuple[int, int] | None = None


def keep_child_nofile(limits: tuple[int, int]) -> None:
    """Children get `limits` (soft, hard) for RLIMIT_NOFILE from now on, whatever ours are."""
    global _child_nofile
    _child_nofile = limits


def limit_child(pid: int) -> None:
    """Give a child we just started the open-files limit children run with (if one was kept).
    Set from outside, so a program that reads its limit at once may see ours first; a child run
    through `/bin/sh -c` (hooks, shell tools) sets it itself before its command (`_limited`)."""
    if _child_nofile is not None:
        with contextlib.suppress(OSError, ValueError):
            resource.prlimit(pid, resource.RLIMIT_NOFILE, _child_nofile)


def _limited(argv: Sequence[str]) -> list[str]:
    """`argv`, with a `/bin/sh -c` command line made to take the children's soft open-files limit
    before anything else runs (no window at all, no extra process). Setting it inside the child
    before `exec` for every program would need a `preexec_fn`, which costs a full fork of the
    gateway (about 9 ms a spawn here, against 1.3 ms) and runs Python in a forked thread."""
    argv = list(argv)
    wanted = _child_nofile
    if wanted is None or argv[:2] != ["/bin/sh", "-c"] or len(argv) < 3 \
            or resource.getrlimit(resource.RLIMIT_NOFILE)[0] == wanted[0]:
        return argv
    return [*argv[:2], f"ulimit -S -n {int(wanted[0])} 2>/dev/null; {argv[2]}", *argv[3:]]


@dataclass(frozen=True)
class ProcessSpec:
    argv: Sequence[str]
    cwd: str
    env: Mapping[str, str]
    stdin: bytes
    timeout_s: float
    output_cap: int


@dataclass(frozen=True)
class ProcessOutcome:
    returncode: int | None
    stdout: bytes
    stderr: bytes
    stdout_total: int
    stderr_total: int
    timed_out: bool
    duration_s: float


class _Capped:
    """Keeps the first `cap` bytes of a stream and counts the rest (so the child never blocks)."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.chunks: list[bytes] = []
        self.kept = 0
        self.total = 0

    def add(self, data: bytes | bytearray) -> None:
        self.total += len(data)
        room = self.cap - self.kept
        if room > 0:
            piece = bytes(data[:room])
            self.chunks.append(piece)
            self.kept += len(piece)

    def value(self) -> bytes:
        return b"".join(self.chunks)


async def start_child(argv: Sequence[str], *, cwd: str, run: RunScope) -> trio.Process:
    """Start a child with piped stdio in a new session (its own process group, which the stop
    sequence signals), with `run`'s environment, registered with the reaper, with the children's
    open-files limit. Raises what `trio.lowlevel.open_process` raises (the caller words it)."""
    with REAPER.spawning():
        proc = await trio.lowlevel.open_process(
            _limited(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            cwd=cwd, env=run.env, start_new_session=True)
        run.started(proc.pid)
    limit_child(proc.pid)
    return proc


def killpg(pgid: int, sig: signal.Signals) -> None:
    """Signal a process group; a group that is already gone is not an error."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


async def stop_child(proc: trio.Process, graces: Graces, *,
                     close_input: Callable[[], Awaitable[None]] | None = None,
                     urgent: trio.Event | None = None) -> int | None:
    """The one stop sequence: close stdin (`close_input`, for a stream someone else owns) → wait
    `graces.stdin_s` → SIGTERM the group → wait `graces.term_s` → SIGKILL the group; the leader is
    reaped and stragglers left in the group are killed. Returns the exit status. Call it shielded
    from cancellation; it may be called again (a child already gone is not signalled)."""
    if close_input is not None:
        await close_input()
    if graces.stdin_s > 0:
        await _wait(proc, graces.stdin_s, urgent, 0.0)
    pgid = proc.pid  # start_new_session=True makes the child its group's leader
    if proc.returncode is None:
        killpg(pgid, signal.SIGTERM)
        await _wait(proc, graces.term_s, urgent, graces.urgent_term_s)
        if proc.returncode is None:
            killpg(pgid, signal.SIGKILL)
            await proc.wait()
    # Members left behind by a leader that exited (background jobs, helpers) die with it.
    killpg(pgid, signal.SIGKILL)
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


async def run_child(spec: ProcessSpec, slots: trio.CapacityLimiter | None = None) -> ProcessOutcome:
    """Run `spec` to completion or timeout; raise `ToolFailure` if it cannot be started. What the
    child daemonized beyond its process group is stopped when the run ends (`tfunnel.proc.reaper`).

    `slots` bounds the processes of the whole gateway (tools and hooks): a run waits for a slot,
    in arrival order (trio's limiter is fair), before its process starts."""
    async with slots if slots is not None else contextlib.nullcontext():
        with REAPER.run(spec.env) as run:
            return await _run_child(spec, run)


async def _run_child(spec: ProcessSpec, run: RunScope) -> ProcessOutcome:
    started = time.monotonic()
    try:
        proc = await start_child(spec.argv, cwd=spec.cwd, run=run)
    except OSError as exc:
        raise ToolFailure(f"cannot start {spec.argv[0]!r}: {exc.strerror or exc}") from exc
    except ValueError as exc:  # a NUL byte in the command line, cwd or environment
        raise ToolFailure(f"cannot start {spec.argv[0]!r}: {exc}") from exc
    out, err = _Capped(spec.output_cap), _Capped(spec.output_cap)
    timed_out = False
    try:
        async with trio.open_nursery() as nursery:
            drained = _Countdown(2)
            nursery.start_soon(_feed, proc, spec.stdin)
            nursery.start_soon(_drain, proc.stdout, out, drained)
            nursery.start_soon(_drain, proc.stderr, err, drained)
            with trio.move_on_after(spec.timeout_s) as deadline:
                await proc.wait()
            timed_out = deadline.cancelled_caught
            await stop_child(proc, TOOL_GRACES)
            with trio.move_on_after(DRAIN_AFTER_EXIT_S):
                await drained.done.wait()
            nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            await stop_child(proc, TOOL_GRACES)
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    await stream.aclose()
    return ProcessOutcome(
        returncode=None if timed_out else proc.returncode,
        stdout=out.value(),
        stderr=err.value(),
        stdout_total=out.total,
        stderr_total=err.total,
        timed_out=timed_out,
        duration_s=time.monotonic() - started,
    )


class _Countdown:
    def __init__(self, n: int) -> None:
        self.left = n
        self.done = trio.Event()

    def tick(self) -> None:
        self.left -= 1
        if self.left <= 0:
            self.done.set()


async def _feed(proc: trio.Process, data: bytes) -> None:
    assert proc.stdin is not None
    try:
        if data:
            await proc.stdin.send_all(data)
        await proc.stdin.aclose()
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass  # the tool exited or closed stdin without reading its arguments: allowed


async def _drain(stream: trio.abc.ReceiveStream | None, sink: _Capped, drained: _Countdown) -> None:
    try:
        if stream is None:
            return
        while data := await stream.receive_some(_READ_CHUNK):
            sink.add(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        drained.tick()
