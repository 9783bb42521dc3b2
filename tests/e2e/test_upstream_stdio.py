"""The stdio upstream transport against real child processes: whole messages, the size cap,
the end of a child (its exit, or its output), refusals, and the stop sequence's urgent graces.

The thin integration layer under the scripted supervisor tests (`test_supervisor_scripted.py`):
here only the transport itself runs, with no session or supervisor above it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import trio

from tests.wire import alive, wait_gone
from tfunnel.config.expose import UpstreamSpec
from tfunnel.config.model import Limits
from tfunnel.protocol import jsonrpc
from tfunnel.protocol.framing import Oversize
from tfunnel.upstream.factory import transport_for
from tfunnel.upstream.states import Context, Identity
from tfunnel.upstream.stdio import EXIT_READ_GRACE_S
from tfunnel.upstream.transport import SpawnFailed

pytestmark = pytest.mark.timeout(60)


def context(home: Path, *, max_message_bytes: int = 1 << 20) -> Context:
    return Context(home, {}, Limits(max_message_bytes=max_message_bytes), Identity("t", "0"), lambda: None)


def python(code: str) -> UpstreamSpec:
    """An upstream running `code` (python -c), isolation opt-outs set: the code is ours."""
    return UpstreamSpec(id="u", command=sys.executable, args=("-c", code), allow_outside_paths=True,
                        allow_code_loading_env=True)


async def test_whole_messages_both_ways(tmp_path: Path) -> None:
    """A message sent reaches the child as one line; each line it writes is received as one
    message, without its newline; the stream names the child's pid."""
    code = "import sys\nfor line in sys.stdin:\n    sys.stdout.write(line.upper()); sys.stdout.flush()"
    with trio.fail_after(20):
        async with transport_for(python(code), context(tmp_path)).connect() as stream:
            assert isinstance(stream.pid, int) and stream.peer == f"pid {stream.pid}"
            await stream.send(jsonrpc.encode({"jsonrpc": "2.0", "method": "a"}))
            await stream.send(jsonrpc.encode({"jsonrpc": "2.0", "method": "b"}))
            assert [await stream.receive(), await stream.receive()] == [
                b'{"JSONRPC":"2.0","METHOD":"A"}', b'{"JSONRPC":"2.0","METHOD":"B"}']
            pid = stream.pid
    assert not alive(pid)


async def test_a_line_over_the_cap_is_a_marker_naming_its_request(tmp_path: Path) -> None:
    """A line over the message cap is received as the framing's marker (its head keeps the id),
    and the next line is received normally."""
    big = json.dumps({"jsonrpc": "2.0", "id": 7, "result": {"text": "x" * 5000}})
    code = f"print({big!r}, flush=True); print('{{}}', flush=True); import time; time.sleep(30)"
    with trio.fail_after(20):
        async with transport_for(python(code), context(tmp_path, max_message_bytes=1000)).connect() as stream:
            first = await stream.receive()
            assert isinstance(first, Oversize) and first.sniff_id() == 7
            assert await stream.receive() == b"{}"


async def test_the_end_is_the_exit_even_while_a_helper_holds_the_output(tmp_path: Path) -> None:
    """A child that exits while a helper it started keeps its stdout open ends the stream just
    after the exit (its last line still read), with its exit status."""
    code = ("import subprocess, sys\n"
            "subprocess.Popen(['sleep', '30'], stdout=sys.stdout)\n"
            "print('last', flush=True)\n"
            "sys.exit(3)")
    with trio.fail_after(20):
        async with transport_for(python(code), context(tmp_path)).connect() as stream:
            assert await stream.receive() == b"last"
            started = trio.current_time()
            assert await stream.receive() is None
            assert trio.current_time() - started < EXIT_READ_GRACE_S + 2.0
            assert await stream.wait_closed() == "exited with status 3"


async def test_a_child_closing_its_output_ends_the_stream(tmp_path: Path) -> None:
    """A child that closes its stdout but lives on ends the stream; why says it closed its
    output (no exit status to tell)."""
    code = "import os, time; os.close(1); time.sleep(30)"
    with trio.fail_after(20):
        async with transport_for(python(code), context(tmp_path)).connect() as stream:
            assert await stream.receive() is None
            assert await stream.wait_closed() == "closed its output"


async def test_stderr_is_drained_and_only_its_tail_kept(tmp_path: Path) -> None:
    """stderr never blocks the child; only its last 4 KiB are kept."""
    code = ("import sys; sys.stderr.write('a' * 200000 + 'the end'); sys.stderr.flush(); "
            "print('{}', flush=True); import time; time.sleep(30)")
    with trio.fail_after(20):
        async with transport_for(python(code), context(tmp_path)).connect() as stream:
            assert await stream.receive() == b"{}"
            await trio.sleep(0.2)
            tail = stream.stderr_tail()
    assert tail.endswith("the end") and len(tail) == 4096


@pytest.mark.parametrize(("spec", "permanent", "final", "says"), [
    (UpstreamSpec(id="u", command="/no/such/command"), True, False, "command '/no/such/command' not found"),
    (UpstreamSpec(id="u", command=sys.executable, cwd="missing"), True, False, "does not exist"),
    (UpstreamSpec(id="u", command=sys.executable, args=("a\0b",)), True, True, "cannot start"),
    (UpstreamSpec(id="u", command=sys.executable, env={"NODE_OPTIONS": "--require x"}), True, True,
     "isolation guard"),
    (UpstreamSpec(id="u", transport="http", url="http://localhost:1/mcp", headers={"A": "${MISSING_VAR}"}),
     True, False, "header 'A' refers to ${MISSING_VAR}"),
], ids=["no-command", "no-cwd", "nul-byte", "isolation", "http-header"])
async def test_refusals_are_spawn_failures(tmp_path: Path, spec: UpstreamSpec, permanent: bool, final: bool,
                                           says: str) -> None:
    """What cannot start is a `SpawnFailed` (never an OSError), permanent or final as retrying can
    or cannot help, naming the upstream."""
    with trio.fail_after(20), pytest.raises(SpawnFailed) as caught:
        async with transport_for(spec, context(tmp_path)).connect():
            pass
    assert (caught.value.permanent, caught.value.final) == (permanent, final)
    assert says in str(caught.value) and "'u'" in str(caught.value)


async def test_an_urgent_stop_skips_the_stdin_grace_and_shortens_the_term_grace(tmp_path: Path) -> None:
    """Once the gateway was signalled, a child that ignores stdin's end and SIGTERM is killed
    after the short SIGTERM grace (0.5 s), not after the 2 s + 2 s of a normal stop."""
    code = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('{}', flush=True); time.sleep(60)")
    ctx = context(tmp_path)
    with trio.fail_after(20):
        async with transport_for(python(code), ctx).connect() as stream:
            assert await stream.receive() == b"{}"
            pid = stream.pid
            ctx.urgent.set()
            started = trio.current_time()
        stopped = trio.current_time() - started
    assert pid is not None and not alive(pid)
    assert 0.4 <= stopped < 2.0
    assert await wait_gone([pid]) == []
