"""The `tfunnel` command in the test's own process: `tfunnel.cli.main` with its standard streams
and environment swapped for the call, its exit status as a process would report it.

For commands that read and write the home (`check`, `tools`, `call`, `mcp ...`, `hook ...`),
whose subject is what they print and change, not the process. A `serve` here may refuse to start
(a usage error, a broken home: what it prints and its status), but never serves: serving takes
over file descriptors 0 and 1 (`WouldServe` is raised instead). A serving gateway in-process is
`tfunnel.testing.gateway`.
Call it from synchronous code, or from a Trio task through `trio.to_thread.run_sync`: the command
runs its own `trio.run`.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from unittest import mock

import structlog

from tfunnel import cli
from tfunnel import log as logsetup
from tfunnel.log import LogFormat
from tfunnel.testing.gateway import configure_log, logging_to

# sys.stdout, sys.stderr, sys.stdin and os.environ are the process's: one command at a time.
_ONE_AT_A_TIME = threading.Lock()


class WouldServe(AssertionError):
    """The in-process command got as far as serving: that is for `tfunnel.testing.gateway`."""


async def _would_serve(*args: object, **kwargs: object) -> int:
    raise WouldServe("the in-process `tfunnel serve` would serve here; use tfunnel.testing.gateway")


def _configure(fmt: LogFormat | None = None, level: str = "info", stream: object = None) -> None:
    configure_log(fmt, level)


class _Text(io.StringIO):
    def isatty(self) -> bool:
        return False


@contextlib.contextmanager
def _environment(env: Mapping[str, str] | None) -> Iterator[None]:
    if env is None:
        yield
        return
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def run(home: Path | None, *args: str, stdin: str = "", env: Mapping[str, str] | None = None,
        ) -> subprocess.CompletedProcess[str]:
    """`tfunnel [--home HOME] ARGS...` with `stdin` as its input, as `subprocess.run(...,
    capture_output=True, text=True)` reports it; `env` (when given) is its whole environment."""
    argv = [*(("--home", str(home)) if home is not None else ()), *args]
    out, err = _Text(), _Text()
    with _ONE_AT_A_TIME, _environment(env), logging_to(err.write):
        logging = structlog.get_config()
        saved = sys.stdin, sys.stdout, sys.stderr
        sys.stdin, sys.stdout, sys.stderr = io.StringIO(stdin), out, err
        try:
            # The command's log goes where its stderr goes; a gateway running beside it in the
            # test keeps its own (the log is the process's: it is routed, not reconfigured).
            with mock.patch.object(cli, "run_stdio", _would_serve), \
                    mock.patch.object(cli, "run_http", _would_serve), \
                    mock.patch.object(logsetup, "configure", _configure):
                code = cli.main(argv)
        except SystemExit as exc:  # argparse's usage errors, a refused home
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if isinstance(exc.code, str):
                err.write(exc.code + "\n")
        finally:
            sys.stdin, sys.stdout, sys.stderr = saved
            structlog.configure(**logging)  # as it was before the command set its level
    return subprocess.CompletedProcess(["tfunnel", *argv], code, out.getvalue(), err.getvalue())
