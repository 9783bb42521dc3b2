"""Run `tfunnel serve --http --port 0` as a real process and find the URL it bound."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import trio

from tests.wire import gateway_argv, kill_group, settled

_URL = re.compile(rb'"urls": \["(http://[^"]+)"')


@dataclass
class HttpGateway:
    proc: trio.Process
    url: str = ""
    stderr: bytearray = field(default_factory=bytearray)

    async def wait_exit(self, timeout: float = 30.0) -> int:
        with trio.fail_after(timeout):
            return await self.proc.wait()


@asynccontextmanager
async def http_gateway(home: Path, env: Mapping[str, str] | None = None, *args: str,
                       settle: bool = True, wrapper: Sequence[str] = ()) -> AsyncIterator[HttpGateway]:
    """A running `tfunnel serve --http --port 0` and its URL; with `settle` (the default) once
    its upstreams had their start. `wrapper` is a command that execs the gateway (e.g. prlimit)."""
    proc = await trio.lowlevel.open_process(
        [*wrapper, *gateway_argv(home), "serve", "--http", "--port", "0", *args],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        env={**os.environ, **(env or {})}, start_new_session=True)
    gw = HttpGateway(proc)
    bound = trio.Event()

    async def drain() -> None:
        assert proc.stderr is not None
        while chunk := await proc.stderr.receive_some(65536):
            gw.stderr += chunk
            match = _URL.search(gw.stderr)
            if match and not bound.is_set():
                gw.url = match.group(1).decode()
                bound.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(drain)
        try:
            with trio.fail_after(30):
                await bound.wait()
            if settle:
                await settled(proc, gw.stderr)
            yield gw
        finally:
            with trio.CancelScope(shield=True):
                await kill_group(proc)
