"""The Streamable HTTP upstream transport against real servers we did not write, each run as its
own process: server-everything (a legacy session; killed and restarted under a call), the SDK's
dual-era mcp-server-time (reached modern, statelessly), and a real gateway process whose
expose.json names server-everything over HTTP. The transport's own rules, against a small server
in the test, are in tests/test_upstream_http.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from tests.interop import modern_time_http_command
from tests.test_upstream_gateway import call
from tests.test_upstream_http import FAST, context, free_port, wait_state
from tests.upstreams import EVERYTHING_SERVER, call_tool, set_upstreams
from tests.wire import gateway
from tfunnel.config.expose import ExposeConfig, UpstreamSpec
from tfunnel.errors import UpstreamError
from tfunnel.upstream.states import State
from tfunnel.upstream.supervisor import Supervisor

pytestmark = pytest.mark.timeout(120)


async def wait_port(port: int) -> None:
    with trio.fail_after(30):
        while True:
            try:
                stream = await trio.open_tcp_stream("127.0.0.1", port)
            except OSError:
                await trio.sleep(0.1)
            else:
                await stream.aclose()
                return


@asynccontextmanager
async def server_process(argv: list[str], port: int, env: dict[str, str] | None = None,
                         ) -> AsyncIterator[trio.Process]:
    """A server in its own process group on `port`, killed when the context ends."""
    proc = await trio.lowlevel.open_process(argv, env={**os.environ, **(env or {})}, start_new_session=True,
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        await wait_port(port)
        yield proc
    finally:
        if proc.returncode is None:
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()


def everything(port: int) -> tuple[list[str], dict[str, str]]:
    return [str(EVERYTHING_SERVER), "streamableHttp"], {"PORT": str(port)}


# --- real servers -----------------------------------------------------------------------------

async def test_server_everything_over_a_legacy_session(tmp_path: Path) -> None:
    """The supervisor connects to server-everything (legacy session), lists its tools and calls
    echo; when the server is killed the call in flight fails at once and the upstream goes to
    backoff; once the server is back on the same port it reconnects."""
    port = free_port()
    spec = UpstreamSpec(id="ev", transport="http", url=f"http://127.0.0.1:{port}/mcp", restart=FAST)
    supervisor = Supervisor(context(tmp_path))
    argv, env = everything(port)
    with trio.fail_after(90):
        async with trio.open_nursery() as nursery:
            async with server_process(argv, port, env) as proc:
                await nursery.start(supervisor.run, ExposeConfig(upstreams=(spec,)))
                upstream = supervisor.upstreams["ev"]
                assert upstream.state is State.READY, upstream.last_error
                assert upstream.statistics().era == "legacy"
                assert "echo" in [t["name"] for t in upstream.tools]
                echoed = await call_tool(supervisor, "ev", "echo", {"message": "hi"})
                assert "hi" in json.dumps(echoed["content"])

                failure: list[str] = []

                async def long_call() -> None:
                    try:
                        await call_tool(supervisor, "ev", "trigger-long-running-operation",
                                        {"duration": 30, "steps": 30})
                    except UpstreamError as exc:
                        failure.append(str(exc))

                nursery.start_soon(long_call)
                await trio.sleep(1.0)
                killed_at = trio.current_time()
                os.killpg(proc.pid, signal.SIGKILL)
                with trio.fail_after(5):
                    while not failure:
                        await trio.sleep(0.02)
                assert trio.current_time() - killed_at < 3
                assert "'ev'" in failure[0]
            await wait_state(supervisor, "ev", State.BACKOFF)
            async with server_process(argv, port, env):
                await wait_state(supervisor, "ev", State.READY)
                again = await call_tool(supervisor, "ev", "echo", {"message": "back"})
                assert "back" in json.dumps(again["content"])
            nursery.cancel_scope.cancel()


async def test_a_modern_sdk_server_is_reached_statelessly(tmp_path: Path) -> None:
    """The era probe finds the SDK's dual-era server modern over HTTP; a call goes through."""
    port = free_port()
    spec = UpstreamSpec(id="time", transport="http", url=f"http://127.0.0.1:{port}/mcp", restart=FAST)
    supervisor = Supervisor(context(tmp_path))
    with trio.fail_after(60):
        async with server_process(modern_time_http_command(port), port), trio.open_nursery() as nursery:
            await nursery.start(supervisor.run, ExposeConfig(upstreams=(spec,)))
            upstream = supervisor.upstreams["time"]
            assert upstream.state is State.READY, upstream.last_error
            assert upstream.statistics().era == "modern"
            result = await call_tool(supervisor, "time", "get_current_time", {"timezone": "UTC"})
            assert "UTC" in json.dumps(result["content"])
            nursery.cancel_scope.cancel()


async def test_a_gateway_lists_and_calls_an_http_upstream(home: Path) -> None:
    """End to end: a gateway whose expose.json names server-everything over HTTP lists
    `<id>_echo` and calls it."""
    port = free_port()
    argv, env = everything(port)
    set_upstreams(home, {"id": "ev", "transport": "http", "url": f"http://127.0.0.1:{port}/mcp"})
    with trio.fail_after(90):
        async with server_process(argv, port, env), gateway(home) as wire:
            await wire.initialize()
            listed = await wire.request(1, "tools/call", {"name": "toolfunnel_list_tools",
                                                          "arguments": {"category": "mcp:ev"}})
            briefs = json.loads(listed["result"]["content"][0]["text"])
            assert "ev_echo" in [b["id"] for b in briefs]
            reply = await call(wire, 2, "ev_echo", {"message": "via gw"})
            assert "via gw" in json.dumps(reply["result"]["content"])
