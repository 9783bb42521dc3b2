"""The gateway in the test's own Trio run: built from a home as `tfunnel serve` builds it, served
on memory streams (stdio framing) or on an HTTP listener on loopback port 0.

The API is the process-level helpers' (`tests/wire.py`, `tests/httpgw.py`): send and receive raw
messages, the log as the process would write it on stderr (JSON lines), a signal, an exit code,
stop. What runs is the production path: `app.build`, then `app.serve_stdio` or
`app_http.serve_http`, the same functions the command runs once it has its file descriptors and
its signal handlers; only the process around them is missing (no fds, no subreaper, no signal
handlers: `signal()` hands the signal to the handler's own logic, `Signals.deliver`).

Upstreams are what the home says: the mock upstream runs in-process wherever it can
(`upstreams="in-process"`, the default: `tfunnel.testing.inproc`), every other upstream (and
every upstream with `upstreams="real"`) as a real child; hook and tool scripts are real children.
A test whose subject is the process (exit codes on a real signal, descriptors, reaping, real
pipes) uses the process helpers instead (`tests/wire.py`, `tests/httpgw.py`).
"""

from __future__ import annotations

import contextvars
import json
import os
import signal as signals_module
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import trio
import trio.testing

from tfunnel import log as logsetup
from tfunnel.app import Gateway, Signals, build, serve_stdio
from tfunnel.cli import seeding_lines
from tfunnel.config.atomic import sweep_temp_files
from tfunnel.config.home import seed_dir, seed_home
from tfunnel.observe.observer import Observer
from tfunnel.testing import inproc
from tfunnel.testing.lines import LineClient
from tfunnel.upstream.factory import transport_for

STOP_TIMEOUT_S = 20.0
# A client that closed the gateway's stdin gives it this long to end on its own before SIGTERM
# (the SDK's stdio client: 2 s).
CLIENT_CLOSE_GRACE_S = 2.0

# --- the log, as the process writes it ------------------------------------------------------------

# Whose log a line belongs to: each harness sets it around its build and its tasks (trio tasks
# and threads inherit it), so two gateways in one test, or a gateway and an in-process command
# (`tfunnel.testing.cli`), keep their logs apart.
Sink = Callable[[str], object]
_SINK: contextvars.ContextVar[Sink | None] = contextvars.ContextVar("tfunnel_test_log", default=None)


class _Router:
    """structlog's output file: each line to the log of whoever wrote it (stderr for a line
    written outside every harness)."""

    def write(self, text: str) -> int:
        sink = _SINK.get()
        if sink is None:
            return sys.stderr.write(text)
        sink(text)
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


ROUTER = _Router()
_CONFIGURE = logsetup.configure  # the real one, also while the in-process command patches it


def configure_log(fmt: logsetup.LogFormat | None = None, level: str = "info") -> None:
    """structlog as the command configures it (JSON lines, level info unless told), writing
    through `ROUTER`."""
    _CONFIGURE(fmt or "json", level, stream=ROUTER)  # type: ignore[arg-type]


def _bytes_sink(buffer: bytearray) -> Sink:
    def write(text: str) -> None:
        buffer.extend(text.encode("utf-8", "surrogateescape"))
    return write


@contextmanager
def logging_to(sink: bytearray | Sink) -> Iterator[None]:
    """Send the log lines written in this context (and the tasks and threads started in it) to
    `sink` (a bytearray, or a function taking each line's text), as `tfunnel serve` writes them
    to stderr."""
    configure_log()
    token = _SINK.set(_bytes_sink(sink) if isinstance(sink, bytearray) else sink)
    try:
        yield
    finally:
        _SINK.reset(token)


def log_events(sink: bytes | bytearray) -> list[dict[str, Any]]:
    """The log's lines, parsed."""
    return [json.loads(line) for line in bytes(sink).splitlines() if line.startswith(b"{")]


# --- building ---------------------------------------------------------------------------------------


Upstreams = Literal["in-process", "real"]


def prepare(home: Path, env: Mapping[str, str] | None, upstreams: Upstreams, *, profile: str | None = None,
            observer: Observer | None = None) -> Gateway:
    """What `tfunnel --home HOME serve` does before it serves: complete the home from the bundled
    defaults, sweep an interrupted write's temp files, build. Raises `ConfigError` as the command
    refuses a start. `upstreams`: "in-process" runs the mock upstream in-process wherever it can
    (`tfunnel.testing.inproc`), "real" runs every upstream as the command would."""
    for line in seeding_lines(home, "--home", seed_home(home, seed_dir())):  # as the command says it
        ROUTER.write(line + "\n")
    sweep_temp_files(home)
    factory = inproc.transports() if upstreams == "in-process" else transport_for
    return build(home, {**os.environ, **(env or {})}, observer, profile=profile, transports=factory)


# --- stdio ----------------------------------------------------------------------------------------


class StdioGateway(LineClient):
    """A stdio gateway on memory streams: the client's end of its stdin and stdout (`LineClient`:
    `framed` sends in `Content-Length` frames; what the gateway writes is read as JSON lines)."""

    def __init__(self, gateway: Gateway, *, framed: bool = False, stderr: bytearray | None = None) -> None:
        super().__init__(framed=framed)
        self.gateway = gateway
        self.stderr = bytearray() if stderr is None else stderr
        self.exit_code: int | None = None
        self.stdin_closed = False
        self._stdin: trio.testing.MemorySendStream | None = None
        self._stdout: trio.testing.MemoryReceiveStream | None = None
        self._signals: Signals | None = None
        self._done = trio.Event()

    @property
    def stdin(self) -> trio.testing.MemorySendStream:
        """The client's end of the gateway's stdin (raw bytes; `send` frames a message)."""
        assert self._stdin is not None
        return self._stdin

    @property
    def stdout(self) -> trio.testing.MemoryReceiveStream:
        """The client's end of the gateway's stdout (raw bytes; don't mix with `recv`)."""
        assert self._stdout is not None
        return self._stdout

    async def _write(self, data: bytes) -> None:
        await self.stdin.send_all(data)

    async def _read(self) -> bytes:
        return bytes(await self.stdout.receive_some(65536))

    def _gone(self) -> str:
        return f"log:\n{self.stderr.decode(errors='replace')}"

    async def close_stdin(self) -> None:
        assert self._stdin is not None
        self.stdin_closed = True
        await self._stdin.aclose()

    def signal(self, signum: int) -> None:
        """What the process does at `signum` (SIGHUP reloads; SIGINT/SIGTERM stop it)."""
        assert self._signals is not None
        self._signals.deliver(signum)

    async def wait_exit(self, timeout: float = STOP_TIMEOUT_S) -> int:
        """The exit status the command would return once the gateway stopped."""
        with trio.fail_after(timeout):
            await self._done.wait()
        assert self.exit_code is not None
        return self.exit_code


@asynccontextmanager
async def stdio_gateway(home: Path, env: Mapping[str, str] | None = None, *, settle: bool = True,
                        framed: bool = False, profile: str | None = None,
                        upstreams: Upstreams = "in-process") -> AsyncIterator[StdioGateway]:
    """A running stdio gateway on `home` (`env` added to the environment its hooks, tools and
    upstreams get; `upstreams` as for `prepare`); stopped as at SIGTERM if the test leaves it running.

    With `settle` (the default) the test starts once the upstreams had their start, so what it
    sees does not depend on how fast they came up."""
    sink = bytearray()
    with logging_to(sink):
        gateway = prepare(home, env, upstreams, profile=profile)
        wire = StdioGateway(gateway, framed=framed, stderr=sink)
        stdin_send, stdin_receive = trio.testing.memory_stream_one_way_pair()
        stdout_send, stdout_receive = trio.testing.memory_stream_one_way_pair()
        wire._stdin, wire._stdout = stdin_send, stdout_receive
        wire._signals = signals = Signals(gateway)

        async def serve() -> None:
            try:
                await serve_stdio(gateway, stdin_receive, stdout_send, signals, listen=False)
            finally:
                wire.exit_code = signals.exit_code
                wire._done.set()
                with trio.CancelScope(shield=True):
                    await stdout_send.aclose()  # the client reads the end of its stdout

        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve)
            try:
                if settle:
                    await _settled(gateway, wire._done)
                yield wire
            finally:
                # A client that closed stdin waits first, as the SDK's client does.
                await _stop(signals, wire._done, nursery, STOP_TIMEOUT_S,
                            first_wait_s=CLIENT_CLOSE_GRACE_S if wire.stdin_closed else 0.0)


async def _stop(signals: Signals, done: trio.Event, nursery: trio.Nursery, wait_s: float, *,
                first_wait_s: float = 0.0) -> None:
    """End a gateway the test left running, as its process would be ended: after `first_wait_s`
    (for it to end on its own), SIGTERM, then `wait_s` for it to stop; past that, cancelled."""
    with trio.CancelScope(shield=True):
        with trio.move_on_after(first_wait_s):
            await done.wait()
        if not done.is_set():
            signals.deliver(signals_module.SIGTERM)
        with trio.move_on_after(wait_s):
            await done.wait()
        if not done.is_set():
            nursery.cancel_scope.cancel()


async def _settled(gateway: Gateway, done: trio.Event, timeout: float = 30.0) -> None:
    """Until the upstreams had their start (what the process logs as `upstreams started`), or the
    gateway stopped."""
    with trio.fail_after(timeout):
        async with trio.open_nursery() as nursery:
            async def first(event: trio.Event) -> None:
                await event.wait()
                nursery.cancel_scope.cancel()
            nursery.start_soon(first, gateway.live.started)
            nursery.start_soon(first, done)


# --- HTTP -----------------------------------------------------------------------------------------


@dataclass
class HttpGateway:
    """An HTTP service on a loopback port: its URL and its log."""

    gateway: Gateway
    url: str = ""
    stderr: bytearray = field(default_factory=bytearray)
    exit_code: int | None = None
    ui_url: str | None = None
    _signals: Signals | None = None
    _done: trio.Event = field(default_factory=trio.Event)

    def signal(self, signum: int) -> None:
        """What the process does at `signum` (SIGHUP reloads; SIGINT/SIGTERM drain, then stop)."""
        assert self._signals is not None
        self._signals.deliver(signum)

    async def wait_exit(self, timeout: float = STOP_TIMEOUT_S + 10) -> int:
        with trio.fail_after(timeout):
            await self._done.wait()
        assert self.exit_code is not None
        return self.exit_code


@asynccontextmanager
async def http_gateway(home: Path, env: Mapping[str, str] | None = None, *, settle: bool = True,
                       grace_s: float = 10.0, instance: str | None = None, ui: bool = False,
                       host: str = "127.0.0.1", upstreams: Upstreams = "in-process",
                       ) -> AsyncIterator[HttpGateway]:
    """A running `serve --http --port 0` on `home` and its URL; with `settle` (the default) once
    its upstreams had their start; drained and stopped as at SIGTERM if the test leaves it running.
    With `ui`, the admin UI beside it on another port 0 (`ui_url`)."""
    from tfunnel.app_http import serve_http
    from tfunnel.serve.metrics import Metrics
    from tfunnel.serve.sdnotify import Notifier

    sink = bytearray()
    with logging_to(sink):
        metrics = Metrics()
        gateway = prepare(home, env, upstreams, observer=metrics)
        gw = HttpGateway(gateway, stderr=sink)
        gw._signals = signals = Signals(gateway)

        async def serve(*, task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
            try:
                await serve_http(gateway, metrics, host, 0, grace_s, signals, Notifier(None),
                                 ui=(host, 0) if ui else None, instance=instance, listen=False,
                                 task_status=task_status)
            finally:
                gw.exit_code = signals.exit_code
                gw._done.set()

        async with trio.open_nursery() as nursery:
            urls: list[str] = await nursery.start(serve)
            gw.url = urls[0]
            if ui:
                gw.ui_url = _ui_url(sink)
            try:
                if settle:
                    await _settled(gateway, gw._done)
                yield gw
            finally:
                await _stop(signals, gw._done, nursery, grace_s + STOP_TIMEOUT_S)


def _ui_url(sink: bytearray) -> str | None:
    """The admin UI's URL, from its `listening` log line."""
    for event in log_events(sink):
        if event.get("event") == "admin ui listening":
            return str(event["url"])
    return None
