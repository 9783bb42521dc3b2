"""The tool executor against real child processes: timeouts, caps, cancels, process groups."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest
import trio

from tests.conftest import FIXTURES
from tests.wire import alive, wait_for_file, wait_gone
from tfunnel.errors import ToolFailure
from tfunnel.proc import children as executor
from tfunnel.proc.children import ProcessSpec, run_child
from tfunnel.tools.result import map_outcome

pytestmark = pytest.mark.timeout(60)


def spec(argv: list[str], *, timeout: float = 10.0, cap: int = 1 << 20, stdin: bytes = b"",
         env: dict[str, str] | None = None) -> ProcessSpec:
    return ProcessSpec(argv=argv, cwd="/", env={**os.environ, **(env or {})}, stdin=stdin,
                       timeout_s=timeout, output_cap=cap)


def sleeper(pidfile: Path, seconds: float = 60, grandchild: bool = True) -> ProcessSpec:
    args = {"seconds": seconds, "grandchild": grandchild, "pidfile": str(pidfile)}
    return spec([sys.executable, str(FIXTURES / "sleeper.py")], timeout=60,
                env={"TOOLFUNNEL_TOOL_ARGS": json.dumps(args)})


async def test_arguments_arrive_on_stdin() -> None:
    """The payload is written to the child's stdin and stdin is then closed."""
    outcome = await run_child(spec(["cat"], stdin=b'{"a": 1}'))
    assert outcome.returncode == 0 and outcome.stdout == b'{"a": 1}'


async def test_timeout_kills_the_whole_group(tmp_path: Path) -> None:
    """On timeout the tool and its grandchild are killed and the outcome says timed out."""
    pidfile = tmp_path / "pids"
    base = sleeper(pidfile)
    outcome = await run_child(ProcessSpec(base.argv, base.cwd, base.env, b"", 1.5, base.output_cap))
    assert outcome.timed_out and outcome.returncode is None
    pids = [int(p) for p in pidfile.read_text().split()]
    assert await wait_gone(pids, timeout=3) == []
    result = map_outcome("sleeper", outcome, 1.5, 1 << 20)
    assert result.is_error and "timed out after 1.5 s" in result.first_text()


async def test_cancellation_kills_the_whole_group(tmp_path: Path) -> None:
    """Cancelling the caller kills the tool's process group before run_child unwinds."""
    pidfile = tmp_path / "pids"
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run_child, sleeper(pidfile))
            text = await wait_for_file(pidfile)
            scope.cancel()
    pids = [int(p) for p in text.split()]
    assert not alive(pids[0])  # the leader is reaped before run_child unwinds
    assert await wait_gone(pids, timeout=3) == []  # SIGKILL reaches the grandchild asynchronously


async def test_sigterm_ignoring_tool_is_sigkilled_after_the_grace(tmp_path: Path) -> None:
    """A tool that ignores SIGTERM is SIGKILLed after the tool SIGTERM grace."""
    code = "import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); " \
           "time.sleep(60)"
    started = trio.current_time()
    outcome = await run_child(spec([sys.executable, "-c", code], timeout=0.5))
    assert outcome.timed_out
    assert trio.current_time() - started >= 0.5 + executor.TOOL_GRACES.term_s * 0.9


async def test_background_jobs_are_swept_after_a_normal_exit() -> None:
    """A job the tool left running in its process group dies when the tool exits."""
    outcome = await run_child(spec(["/bin/sh", "-c", "sleep 300 >/dev/null 2>&1 & echo $!"]))
    assert outcome.returncode == 0
    assert await wait_gone([int(outcome.stdout)], timeout=3) == []


async def test_an_escaped_daemon_holding_the_pipe_does_not_hang_the_call() -> None:
    """A grandchild in its own session keeping stdout open delays the result at most DRAIN_AFTER_EXIT_S."""
    outcome = await run_child(spec(["/bin/sh", "-c", "setsid sleep 30 & echo $!"]))
    daemon = int(outcome.stdout)
    try:
        assert outcome.returncode == 0
        assert outcome.duration_s < executor.DRAIN_AFTER_EXIT_S + 5
    finally:
        os.kill(daemon, signal.SIGKILL)


async def test_output_over_the_cap_is_truncated_with_a_marker() -> None:
    """stdout beyond the cap is read and dropped; the result says how much there was."""
    code = "import sys; sys.stdout.write('x' * 3_000_000)"
    outcome = await run_child(spec([sys.executable, "-c", code], cap=10_000))
    assert outcome.returncode == 0
    assert len(outcome.stdout) == 10_000 and outcome.stdout_total == 3_000_000
    text = map_outcome("big", outcome, 10, 10_000).first_text()
    assert text.endswith("[output truncated: 3000000 bytes, cap 10000 bytes]")


async def test_non_zero_exit_reports_the_stderr_tail() -> None:
    """A failing tool is an isError result carrying its exit status and stderr."""
    outcome = await run_child(spec(["/bin/sh", "-c", "echo partial; echo boom >&2; exit 3"]))
    result = map_outcome("failing", outcome, 10, 1 << 20)
    assert result.is_error
    assert result.first_text() == "tool 'failing' exited with status 3:\nboom"


async def test_a_missing_program_is_a_tool_failure() -> None:
    """A command that cannot be started raises ToolFailure naming it."""
    with pytest.raises(ToolFailure, match="no-such-program-here"):
        await run_child(spec(["no-such-program-here"]))
