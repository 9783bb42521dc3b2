"""The HTTP service as a real `tfunnel serve --http` process: what only the process shows. A real
SIGTERM drains in-flight calls and exits 143 with no process of the tree left; systemd's notify
socket hears the lifecycle; the command refuses a non-loopback bind and a taken port (its exit
status, its one line). The service's behaviour in-process is tests/test_http.py."""

from __future__ import annotations

import signal
import socket
import subprocess
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio

from tests.conftest import add_tools
from tests.httpgw import http_gateway
from tests.test_http import ACCEPT, open_session
from tests.test_stdio_wire import SLEEPER
from tests.wire import gateway_argv

pytestmark = pytest.mark.timeout(90)


@pytest.mark.parametrize("host", ["0.0.0.0", "127.evil.com", "127.0.0.1.nip.io", "localhost.", "[::1]"])
def test_a_non_loopback_bind_is_refused(home: Path, host: str) -> None:
    """A --host that is not a loopback literal or `localhost` exits 1 with one line naming it."""
    done = subprocess.run([*gateway_argv(home), "serve", "--http", "--host", host, "--port", "0"],
                          capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    refusals = [line for line in done.stderr.splitlines() if not line.startswith("tfunnel: config home")]
    assert refusals == [f"tfunnel: refusing to listen on {host!r} without authentication: a non-loopback "
                        "address (anything but 127.0.0.0/8, ::1 or localhost) needs auth/auth.config.json "
                        'with "enabled": true']


async def test_sigterm_drains_then_cancels(home: Path) -> None:
    """SIGTERM with 20 calls in flight: short ones finish within the grace, long ones are cancelled,
    exit 143, and no process of the tree survives."""
    add_tools(home, SLEEPER, scripts=("sleeper.py",))
    async with http_gateway(home, None, "--grace", "3") as gw, httpx2.AsyncClient(timeout=60) as http:
        session = await open_session(http, gw.url)
        headers = {**ACCEPT, "mcp-session-id": session}
        outcomes: dict[int, Any] = {}

        started = home / "started"
        started.mkdir()

        async def call(i: int) -> None:
            seconds = 1 if i % 2 else 30
            args = {"seconds": seconds, "pidfile": str(started / f"{i}.pid")}
            body = {"jsonrpc": "2.0", "id": i, "method": "tools/call",
                    "params": {"name": "toolfunnel_run_tool", "arguments": {"name": "sleeper", "args": args}}}
            try:
                reply = await http.post(f"{gw.url}/mcp", json=body, headers=headers)
                outcomes[i] = reply.json() if reply.status_code == 200 else reply.status_code
            except httpx2.HTTPError as exc:
                outcomes[i] = type(exc).__name__

        async with trio.open_nursery() as nursery:
            for i in range(20):
                nursery.start_soon(call, i)
            # Every call in flight (its tool process started: a pid file each), however slow the
            # machine, before the signal; a call that arrived after it would rightly be refused.
            with trio.fail_after(30):
                while len(list(started.glob("*.pid"))) < 20:
                    await trio.sleep(0.05)
            gw.proc.send_signal(signal.SIGTERM)
        assert await gw.wait_exit() == 143
        finished = [i for i, o in outcomes.items() if isinstance(o, dict) and "result" in o
                    and not o["result"].get("isError")]
        assert sorted(finished) == [i for i in range(20) if i % 2]  # the 1 s calls made it
    leftovers = await trio.run_process(["pgrep", "-f", str(home)], capture_stdout=True, check=False)
    assert leftovers.stdout.strip() == b""


async def test_sd_notify_lifecycle(home: Path, tmp_path: Path) -> None:
    """READY/STATUS at start, WATCHDOG pings, RELOADING then READY on SIGHUP, STOPPING on SIGTERM."""
    path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.setblocking(False)
    received: list[str] = []

    async def next_with(text: str) -> int:
        """Read datagrams until one (after those already seen) contains `text`; its index."""
        seen = len(received)
        with trio.fail_after(20):
            while True:
                for index in range(seen, len(received)):
                    if text in received[index]:
                        return index
                seen = len(received)
                try:
                    received.append(sock.recv(4096).decode())
                except BlockingIOError:
                    await trio.sleep(0.02)

    env = {"NOTIFY_SOCKET": str(path), "WATCHDOG_USEC": "400000"}
    try:
        async with http_gateway(home, env) as gw:
            ready = await next_with("READY=1")
            assert "STATUS=serving; upstreams ready 1/1" in received[ready]
            await next_with("WATCHDOG=1")
            await next_with("WATCHDOG=1")  # periodic, from the event loop
            gw.proc.send_signal(signal.SIGHUP)
            await next_with("RELOADING=1")
            assert "STATUS=" in received[await next_with("READY=1")]
            gw.proc.send_signal(signal.SIGTERM)
            await next_with("STOPPING=1")
            assert await gw.wait_exit() == 143
    finally:
        sock.close()


def test_a_port_in_use_is_a_clear_startup_failure(home: Path) -> None:
    """Binding a port that is taken exits 1 with one line naming the address (no traceback)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([*gateway_argv(home), "serve", "--http", "--port", str(port)],
                              capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert done.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in done.stderr
    assert "Traceback" not in done.stderr
