"""The HTTP service under load as a real `tfunnel serve --http` process: what is measured on the
process itself. Its side of connections the client closed is gone promptly (its socket count);
under a low open-files limit (`prlimit`) accept failing is one log line; the tools it runs keep the
open-files limit it was started with. The rest of the load tests run in-process:
tests/test_http_load.py."""

from __future__ import annotations

import os
import shutil
from contextlib import suppress
from pathlib import Path

import httpx2
import pytest
import trio

from tests.conftest import add_tools
from tests.httpgw import http_gateway
from tests.test_http import ACCEPT, open_session
from tests.test_http_load import PROMPT_S, address
from tests.test_stdio_wire import run_tool
from tests.upstreams import set_upstreams

pytestmark = pytest.mark.timeout(120)

FD_LIMIT = 64  # for the EMFILE test: room to start, and few enough to exhaust quickly


def sockets_of(pid: int) -> int:
    """How many sockets process `pid` holds open (its /proc fd links)."""
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with suppress(FileNotFoundError):  # closed while we looked
            count += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
    return count


async def test_connections_the_client_closed_are_closed_promptly(home: Path) -> None:
    """50 keep-alive connections closed by the client: the gateway's side of each is gone within
    a few seconds (not when the 30 s keep-alive timer would end: no pile of CLOSE-WAIT)."""
    with trio.fail_after(30):
        async with http_gateway(home) as gw:
            host, port = address(gw)
            baseline = sockets_of(gw.proc.pid)
            streams = []
            for _ in range(50):
                stream = await trio.open_tcp_stream(host, port)
                await stream.send_all(b"GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                with trio.fail_after(PROMPT_S):
                    assert (await stream.receive_some(65536)).startswith(b"HTTP/1.1 200")
                streams.append(stream)
            assert sockets_of(gw.proc.pid) >= baseline + 50  # idle, kept alive
            for stream in streams:
                await stream.aclose()
            with trio.fail_after(5):
                while sockets_of(gw.proc.pid) > baseline:
                    await trio.sleep(0.1)


@pytest.mark.skipif(shutil.which("prlimit") is None, reason="needs prlimit (util-linux)")
async def test_accept_failing_for_open_files_is_one_log_line(home: Path) -> None:
    """Under a low open-files limit, connections beyond it make accept fail with EMFILE: stderr
    gets one rate-limited line (no tracebacks), and the gateway serves again once they close."""
    set_upstreams(home)
    with trio.fail_after(40):
        low_limit = ("prlimit", f"--nofile={FD_LIMIT}:{FD_LIMIT}", "--")  # soft = hard: nothing to raise
        async with http_gateway(home, None, wrapper=low_limit) as gw:
            host, port = address(gw)
            assert sockets_of(gw.proc.pid) < FD_LIMIT - 10
            # More connections than the limit: the accept backlog holds those the gateway cannot take.
            streams = [await trio.open_tcp_stream(host, port) for _ in range(FD_LIMIT)]
            with trio.fail_after(10):
                while b"accept failing" not in gw.stderr:
                    await trio.sleep(0.1)
            await trio.sleep(1.5)  # some 15 more failed accepts
            for stream in streams:
                await stream.aclose()
            async with httpx2.AsyncClient(timeout=10) as http:
                with trio.fail_after(10):
                    assert (await http.get(f"{gw.url}/livez")).status_code == 200
            text = gw.stderr.decode()
            assert text.count("accept failing") == 1 and "accept returned" not in text
            assert "Traceback" not in text, text


@pytest.mark.skipif(shutil.which("prlimit") is None, reason="needs prlimit (util-linux)")
async def test_children_keep_the_open_files_limit_the_gateway_started_with(home: Path) -> None:
    """The HTTP service raises its own soft open-files limit for its sockets; the tools it runs
    (and hooks, and upstreams) keep the limit it was started with."""
    add_tools(home, {"id": "nofile", "name": "Nofile", "invoke": {"type": "shell", "command": "ulimit -n"}})
    set_upstreams(home)
    with trio.fail_after(40):
        wrapper = ("prlimit", "--nofile=1024:4096", "--")
        async with http_gateway(home, None, wrapper=wrapper) as gw, httpx2.AsyncClient(timeout=10) as http:
            limits = Path(f"/proc/{gw.proc.pid}/limits").read_text()
            assert any(line.startswith("Max open files") and line.split()[3:5] == ["4096", "4096"]
                       for line in limits.splitlines()), limits
            session = await open_session(http, gw.url)
            reply = await http.post(f"{gw.url}/mcp", headers={**ACCEPT, "mcp-session-id": session},
                                    json=run_tool(1, "nofile", {}))
    assert reply.json()["result"]["content"][0]["text"].strip() == "1024", reply.text


