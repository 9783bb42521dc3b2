"""Drive a real `tfunnel serve` child over its stdin/stdout pipes: messages sent one JSON line at
a time (or, `framed`, one `Content-Length` message at a time, as ToolFunnel's clients send them),
what it writes read as JSON lines either way."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from pathlib import Path

import trio

from tfunnel.testing.lines import LineClient


def gateway_argv(home: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "tfunnel", "--home", str(home), *extra]


def alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie (a zombie runs nothing)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


async def wait_gone(pids: Sequence[int], timeout: float = 10.0) -> list[int]:
    """Wait until none of `pids` is alive; return those still alive at the timeout."""
    with trio.move_on_after(timeout):
        while any(alive(p) for p in pids):
            await trio.sleep(0.05)
    return [p for p in pids if alive(p)]


async def wait_for_file(path: Path, timeout: float = 10.0) -> str:
    with trio.fail_after(timeout):
        while not path.exists() or not path.read_text().strip():
            await trio.sleep(0.02)
    return path.read_text()


class Wire(LineClient):
    """The client's end of a gateway child's stdin and stdout (`LineClient`)."""

    def __init__(self, proc: trio.Process, *, framed: bool = False) -> None:
        super().__init__(framed=framed)
        self.proc = proc
        self.stderr = bytearray()

    async def _write(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        await self.proc.stdin.send_all(data)

    async def _read(self) -> bytes:
        assert self.proc.stdout is not None
        return bytes(await self.proc.stdout.receive_some(65536))

    def _gone(self) -> str:
        return f"stderr:\n{self.stderr.decode()}"

    async def close_stdin(self) -> None:
        assert self.proc.stdin is not None
        await self.proc.stdin.aclose()

    async def wait_exit(self, timeout: float = 20.0) -> int:
        with trio.fail_after(timeout):
            return await self.proc.wait()


async def kill_group(proc: trio.Process, grace_s: float = 5.0) -> None:
    """End a test's process if it is still running: SIGTERM first (a gateway then stops its
    upstreams, which live in sessions of their own: a SIGKILL would leave them behind), SIGKILL to
    its whole process group after `grace_s`; reap it."""
    if proc.returncode is None:
        with suppress(ProcessLookupError):
            proc.send_signal(15)
        with trio.move_on_after(grace_s):
            await proc.wait()
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)
        await proc.wait()


# What the gateway logs once every upstream connected or failed its first attempt.
SETTLED = b'"event": "upstreams started"'


async def settled(proc: trio.Process, stderr: bytearray, timeout: float = 30.0) -> None:
    """Wait until the gateway's upstreams had their start (or the gateway ended)."""
    with trio.fail_after(timeout):
        while SETTLED not in stderr and proc.poll() is None:
            await trio.sleep(0.02)


@asynccontextmanager
async def gateway(home: Path, env: Mapping[str, str] | None = None, *extra: str,
                  settle: bool = True, framed: bool = False) -> AsyncIterator[Wire]:
    """A running `tfunnel serve` on `home`; killed (group) if the test leaves it running.

    With `settle` (the default) the test starts once the upstreams had their start, so what it
    sees does not depend on how fast they came up; starting upstreams hold no client up."""
    proc = await trio.lowlevel.open_process(
        [*gateway_argv(home, *extra), "serve"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**os.environ, **(env or {})},
        start_new_session=True,
    )
    wire = Wire(proc, framed=framed)

    async def drain_stderr() -> None:
        assert proc.stderr is not None
        while chunk := await proc.stderr.receive_some(65536):
            wire.stderr += chunk

    async with trio.open_nursery() as nursery:
        nursery.start_soon(drain_stderr)
        try:
            if settle:
                await settled(proc, wire.stderr)
            yield wire
        finally:
            with trio.CancelScope(shield=True):
                await kill_group(proc)
                for stream in (proc.stdin, proc.stdout):
                    if stream is not None:
                        await stream.aclose()


@asynccontextmanager
async def loopback_server(argv: list[str], port: int, env: Mapping[str, str] | None = None,
                          timeout: float = 20.0) -> AsyncIterator[None]:
    """Run `argv` (a server that listens on 127.0.0.1:`port`) until it accepts connections; stop
    it (its process group) when the block ends."""
    proc = await trio.lowlevel.open_process(
        argv, env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        with trio.fail_after(timeout):
            while True:
                assert proc.returncode is None, f"{argv[0]} exited {proc.returncode}"
                try:
                    stream = await trio.open_tcp_stream("127.0.0.1", port)
                except OSError:
                    await trio.sleep(0.1)
                    continue
                await stream.aclose()
                break
        yield
    finally:
        with trio.CancelScope(shield=True):
            await kill_group(proc)
