"""The HTTP service under faults and load, in-process (`tfunnel.testing.gateway`) on a real
loopback port: slow clients, a saturated /mcp, the session cap, made-up tool names, the drain.
Every load here is bounded in count and time, on loopback only. What is measured on the process
(its sockets, its open-files limit) is in tests/e2e/test_http_load.py."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

import httpx2
import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import add_tools
from tests.hooks import set_hooks
from tests.test_http import ACCEPT, INIT, open_session
from tests.test_stdio_wire import SLEEPER, run_tool
from tests.upstreams import set_upstreams
from tfunnel.testing.gateway import http_gateway

pytestmark = pytest.mark.timeout(120)

PROMPT_S = 3.0  # what "answers promptly" means here, on a loaded 2-core machine


def set_limits(home: Path, **limits: Any) -> None:
    """Merge `limits` into the home's toolfunnel.json."""
    path = home / "toolfunnel.json"
    settings = json.loads(path.read_text())
    settings.setdefault("limits", {}).update(limits)
    path.write_text(json.dumps(settings))


class Served(Protocol):
    """A gateway serving HTTP, in-process or a process: its URL."""

    url: str


def address(gw: Served) -> tuple[str, int]:
    parts = urlsplit(gw.url)
    assert parts.hostname is not None and parts.port is not None
    return parts.hostname, parts.port


async def probe(http: httpx2.AsyncClient, url: str, path: str) -> httpx2.Response:
    """One GET that must be answered within PROMPT_S."""
    with trio.fail_after(PROMPT_S):
        return await http.get(f"{url}{path}")


async def read_response(stream: trio.SocketStream) -> bytes:
    """Everything the server sends until it closes the connection."""
    data = b""
    while chunk := await stream.receive_some(65536):
        data += chunk
    return data


@asynccontextmanager
async def slow_calls(http: httpx2.AsyncClient, url: str, session: str, count: int,
                     seconds: float = 30) -> AsyncIterator[None]:
    """`count` sleeper calls in flight in `session` for the block (cancelled at its end)."""
    headers = {**ACCEPT, "mcp-session-id": session}

    async def call(i: int) -> None:
        body = run_tool(f"slow-{i}", "sleeper", {"seconds": seconds})
        await http.post(f"{url}/mcp", json=body, headers=headers, timeout=60)

    async with trio.open_nursery() as nursery:
        for i in range(count):
            nursery.start_soon(call, i)
        await trio.sleep(1.0)  # every call is in the gateway (they take no capacity to start)
        yield
        nursery.cancel_scope.cancel()


async def test_slow_bodies_time_out_with_408_while_probes_answer(home: Path) -> None:
    """100 connections that send a head with Content-Length and then stall: /livez and /health
    answer promptly meanwhile, and each stalled body gets 408 (a JSON-RPC error) after the
    configured `limits.bodyReadTimeoutS`."""
    set_limits(home, bodyReadTimeoutS=2)
    async with http_gateway(home) as gw, httpx2.AsyncClient(timeout=10) as http:
        host, port = address(gw)
        head = (b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: application/json, text/event-stream\r\n"
                b"Content-Type: application/json\r\nContent-Length: 200\r\n\r\n{\"jsonrpc\": ")
        answers: list[bytes] = []

        async def stall() -> None:
            stream = await trio.open_tcp_stream(host, port)
            async with stream:
                await stream.send_all(head)
                answers.append(await read_response(stream))

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                for _ in range(100):
                    nursery.start_soon(stall)
                await trio.sleep(0.5)
                started = trio.current_time()
                assert (await probe(http, gw.url, "/livez")).text == "ok"
                assert (await probe(http, gw.url, "/health")).json()["status"] == "ok"
                assert not answers and trio.current_time() - started < 1.5  # before the timeout
        assert len(answers) == 100
        for answer in answers:
            status_line, _, rest = answer.partition(b"\r\n")
            assert status_line == b"HTTP/1.1 408 ", status_line
            body = rest.split(b"\r\n\r\n", 1)[1]
            error = json.loads(body[body.index(b"{"):body.rindex(b"}") + 1])
            assert error["id"] is None and error["error"]["code"] == -32600
            assert "2 s" in error["error"]["message"]


async def test_a_slow_request_head_is_cut_off(home: Path) -> None:
    """A client that trickles its request head never completes it: the connection is closed once
    `limits.idleTimeoutS` has passed, though bytes keep arriving."""
    set_limits(home, idleTimeoutS=1.5)
    async with http_gateway(home) as gw:
        host, port = address(gw)
        stream = await trio.open_tcp_stream(host, port)
        started = trio.current_time()
        closed = False
        with trio.fail_after(10):
            async with stream:
                try:
                    for byte in b"GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 100:
                        await stream.send_all(bytes([byte]))
                        with trio.move_on_after(0.2):
                            if await stream.receive_some(1024) == b"":
                                closed = True
                                break
                except trio.BrokenResourceError:
                    closed = True
        assert closed and 1.4 < trio.current_time() - started < 5


async def test_probes_answer_while_mcp_is_at_its_cap(home: Path) -> None:
    """With `limits.maxHttpRequests` calls in flight, another /mcp request gets 503 while /livez,
    /readyz, /health and /metrics still answer."""
    add_tools(home, SLEEPER, scripts=("sleeper.py",))
    set_limits(home, maxHttpRequests=4)
    with trio.fail_after(30):
        async with http_gateway(home) as gw, httpx2.AsyncClient(timeout=10) as http:
            session = await open_session(http, gw.url)
            async with slow_calls(http, gw.url, session, 4):
                ping = {"jsonrpc": "2.0", "id": 9, "method": "ping"}
                headers = {**ACCEPT, "mcp-session-id": session}
                refused = await http.post(f"{gw.url}/mcp", json=ping, headers=headers)
                assert refused.status_code == 503
                assert "too many concurrent requests" in refused.json()["error"]["message"]
                assert (await probe(http, gw.url, "/livez")).status_code == 200
                assert (await probe(http, gw.url, "/readyz")).status_code == 200
                health = await probe(http, gw.url, "/health")
                assert health.status_code == 200 and health.json()["calls"]["total"] == 4
                metrics = await probe(http, gw.url, "/metrics")
                assert metrics.status_code == 200 and "tfunnel_inflight_calls 4.0" in metrics.text


async def test_the_least_recently_used_idle_session_is_evicted_at_the_cap(home: Path, tmp_path: Path) -> None:
    """At `limits.maxSessions`, a new initialize evicts the least recently used idle session (it
    gets 404, its Stop hook runs), never a busy one; with every session busy it gets 503."""
    add_tools(home, SLEEPER, scripts=("sleeper.py",))
    set_limits(home, maxSessions=3)
    stops = tmp_path / "stops"
    stops.mkdir()
    set_hooks(home, {"event": "Stop", "command": f"cat > {stops}/$$.json"})

    def stopped() -> set[str]:
        return {json.loads(p.read_text())["session_id"] for p in stops.iterdir() if p.read_text()}

    with trio.fail_after(60):
        async with http_gateway(home) as gw, httpx2.AsyncClient(timeout=10) as http:
            busy, older, newer = [await open_session(http, gw.url) for _ in range(3)]

            async def ping(session: str) -> int:
                reply = await http.post(f"{gw.url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                                        headers={**ACCEPT, "mcp-session-id": session})
                return reply.status_code

            async with slow_calls(http, gw.url, busy, 1):  # `busy` is the least recently used, but busy
                assert await ping(older) == 200  # now `newer` is the least recently used idle one
                fresh = await open_session(http, gw.url)
                assert await ping(newer) == 404
                with trio.fail_after(10):
                    while newer not in stopped():
                        await trio.sleep(0.05)
                assert stopped() == {newer}
                assert await ping(older) == 200 and await ping(fresh) == 200
                async with slow_calls(http, gw.url, older, 1), slow_calls(http, gw.url, fresh, 1):
                    refused = await http.post(f"{gw.url}/mcp", json=INIT, headers=ACCEPT)
                    assert refused.status_code == 503
                    assert "Too many sessions" in refused.json()["error"]["message"]
            health = (await http.get(f"{gw.url}/health")).json()
            assert health["clients"]["sessions"] == 3


async def test_made_up_tool_names_share_one_metrics_label(home: Path) -> None:
    """600 calls of distinct unknown names count under one tool="unknown" label; a known tool
    keeps its own."""
    async with http_gateway(home) as gw, httpx2.AsyncClient(timeout=30) as http:
        headers = {**ACCEPT, "mcp-session-id": await open_session(http, gw.url)}
        limiter = trio.CapacityLimiter(8)

        async def call(name: str, args: dict[str, Any]) -> None:
            async with limiter:
                reply = await http.post(f"{gw.url}/mcp", json=run_tool(name, name, args), headers=headers)
                assert reply.status_code == 200

        with trio.fail_after(90):
            async with trio.open_nursery() as nursery:
                for i in range(600):
                    nursery.start_soon(call, f"made_up_{i}", {})
                nursery.start_soon(call, "hash", {"text": "abc"})
        text = (await http.get(f"{gw.url}/metrics")).text
    tools = {s.labels["tool"]: s.value for family in text_string_to_metric_families(text)
             for s in family.samples if s.name == "tfunnel_tool_calls_total"}
    assert tools == {"unknown": 600, "hash": 1}


async def test_health_says_stopping_through_the_drain(home: Path) -> None:
    """After SIGTERM, while a long call runs out its grace, a new connection still gets /health
    503 `stopping` (and /livez 200, /readyz 503); a new MCP request gets 503."""
    add_tools(home, SLEEPER, scripts=("sleeper.py",))
    set_upstreams(home)
    with trio.fail_after(40):
        async with http_gateway(home, grace_s=8) as gw, httpx2.AsyncClient(timeout=10) as http:
            session = await open_session(http, gw.url)
            async with slow_calls(http, gw.url, session, 1):
                gw.signal(signal.SIGTERM)
                for _ in range(2):  # at the start of the drain and well into it
                    await trio.sleep(1.5)
                    async with httpx2.AsyncClient(timeout=PROMPT_S) as fresh:  # a new connection
                        health = await fresh.get(f"{gw.url}/health")
                        assert health.status_code == 503 and health.json()["status"] == "stopping"
                        assert (await fresh.get(f"{gw.url}/livez")).status_code == 200
                        assert (await fresh.get(f"{gw.url}/readyz")).status_code == 503
                        refused = await fresh.post(f"{gw.url}/mcp", json=INIT, headers=ACCEPT)
                        assert refused.status_code == 503 and "stopping" in refused.json()["error"]["message"]
                    await refused_and_closed(gw)
            assert await gw.wait_exit() == 143


async def test_an_answer_given_during_the_drain_ends_its_connection(home: Path) -> None:
    """A call under way at SIGTERM gets its answer whole, with `Connection: close`, and the
    connection ends: a proxy keeps no idle connection to a stopping instance that its exit would
    close under the next request."""
    add_tools(home, SLEEPER, scripts=("sleeper.py",))
    set_upstreams(home)
    with trio.fail_after(40):
        async with http_gateway(home, grace_s=10) as gw, httpx2.AsyncClient(timeout=10) as http:
            session = await open_session(http, gw.url)
            host, port = address(gw)
            body = json.dumps(run_tool("slow", "sleeper", {"seconds": 1.5})).encode()
            stream = await trio.open_tcp_stream(host, port)
            async with stream:
                await stream.send_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: application/json, "
                                      b"text/event-stream\r\nContent-Type: application/json\r\n"
                                      b"Mcp-Session-Id: %s\r\nContent-Length: %d\r\n\r\n%s"
                                      % (session.encode(), len(body), body))
                await trio.sleep(0.5)  # the call is under way
                gw.signal(signal.SIGTERM)
                answer = await read_response(stream)  # returns once the gateway closes the connection
            assert await gw.wait_exit() == 143
    head, _, payload = answer.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    fields = dict(line.lower().split(b": ", 1) for line in lines[1:])
    assert lines[0].startswith(b"HTTP/1.1 200"), lines[0]
    assert fields[b"connection"] == b"close"
    reply = json.loads(payload)
    assert reply["id"] == "slow" and not reply["result"].get("isError"), reply


async def refused_and_closed(gw: Served) -> None:
    """On a keep-alive connection, a request during the drain gets its 503 whole (its length
    given) and then the connection closes: the client does not send its next request there."""
    host, port = address(gw)
    body = json.dumps(INIT).encode()
    stream = await trio.open_tcp_stream(host, port)
    async with stream:
        await stream.send_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: application/json, "
                              b"text/event-stream\r\nContent-Type: application/json\r\n"
                              b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        with trio.fail_after(PROMPT_S):
            answer = await read_response(stream)  # returns once the gateway closes the connection
    head, _, payload = answer.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    fields = dict(line.lower().split(b": ", 1) for line in lines[1:])
    assert lines[0].startswith(b"HTTP/1.1 503"), lines[0]
    assert fields[b"connection"] == b"close" and b"transfer-encoding" not in fields
    assert int(fields[b"content-length"]) == len(payload)
    assert "stopping" in json.loads(payload)["error"]["message"]


async def test_a_session_can_still_cancel_its_call_during_the_drain(home: Path) -> None:
    """During the drain a session's notifications still pass (a cancel ends its call, and with
    it the drain), while a new request in that session is refused 503."""
    add_tools(home, SLEEPER, scripts=("sleeper.py",))
    set_upstreams(home)
    with trio.fail_after(40):
        async with http_gateway(home, grace_s=30) as gw, httpx2.AsyncClient(timeout=10) as http:
            session = await open_session(http, gw.url)
            headers = {**ACCEPT, "mcp-session-id": session}
            async with slow_calls(http, gw.url, session, 1):
                gw.signal(signal.SIGTERM)
                await trio.sleep(0.5)
                refused = await http.post(f"{gw.url}/mcp", headers=headers,
                                          json=run_tool("new", "hash", {"text": "x"}))
                assert refused.status_code == 503
                cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled",
                          "params": {"requestId": "slow-0"}}
                assert (await http.post(f"{gw.url}/mcp", headers=headers, json=cancel)).status_code == 202
                # The only call ended: the drain is over long before its 30 s grace.
                assert await gw.wait_exit(timeout=10) == 143


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


async def test_a_client_that_stops_reading_its_sse_stream_is_disconnected(home: Path) -> None:
    """A 2024 HTTP+SSE client that stops reading while 300 answers of 1 MB each come due is
    disconnected once its bounded queue is full (its POSTs get 404 at once, its calls are cancelled,
    and its Stop hook fires once its connection is closed: the write it never took times out),
    instead of having every answer held for it; memory stays bounded and the gateway serves on."""
    from tests.upstreams import mock_upstream

    stopped = home / "stopped"
    set_limits(home, writeTimeoutS=2)
    # The token counter's vocabulary (about 95 MiB, loaded at the first count) is not what this
    # measures: the estimate keeps the growth to what the connection holds.
    path = home / "toolfunnel.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "tokens": "estimate"}))
    set_upstreams(home, mock_upstream("mock", "--tools", "big"))
    set_hooks(home, {"event": "Stop", "command": f"touch {stopped}"})
    with trio.fail_after(80):
        async with http_gateway(home) as gw, httpx2.AsyncClient(timeout=30) as http:
            host, port = address(gw)
            # The gateway (and the mock upstream) run in this process: its growth bounds theirs.
            before = rss_mib(os.getpid())
            stream = await trio.open_tcp_stream(host, port)
            await stream.send_all(b"GET /sse HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                  b"Accept: text/event-stream\r\n\r\n")
            head = b""
            while b"session_id=" not in head:
                head += await stream.receive_some(4096)
            session_id = head.split(b"session_id=", 1)[1].split(b"\n", 1)[0].strip().decode()
            post = f"{gw.url}/messages?session_id={session_id}"
            init = {**INIT, "id": "init"}
            assert (await http.post(post, json=init)).status_code == 202
            # From here on the client reads nothing more from its stream.
            for i in range(300):
                call = run_tool(i, "mock_big", {"bytes": 1_000_000})
                reply = await http.post(post, json=call)
                if reply.status_code == 404:  # already disconnected: the session is gone
                    break
                assert reply.status_code == 202
            late = run_tool("late", "hash", {"text": "x"})
            with trio.fail_after(30):
                while (await http.post(post, json=late)).status_code != 404:
                    await trio.sleep(0.2)
                while not stopped.exists():
                    await trio.sleep(0.1)
            grown = rss_mib(os.getpid()) - before
            assert (await http.get(f"{gw.url}/livez")).status_code == 200
            await stream.aclose()
    # Holding all 300 answers would take 300 MB and more; a bounded queue holds a fraction of that.
    assert grown < 150, grown


async def test_a_reading_sse_client_survives_a_burst_of_progress(home: Path) -> None:
    """A 2024 HTTP+SSE client that reads its stream is never taken for one that does not: a
    burst of progress notifications (more than its queue holds, faster than the stream drains)
    is thinned out, not a reason to disconnect, and the call's answer arrives."""
    from tests.upstreams import mock_upstream

    set_upstreams(home, mock_upstream("mock", "--tools", "progress"))
    with trio.fail_after(60):
        async with http_gateway(home) as gw, httpx2.AsyncClient(timeout=30) as http:
            host, port = address(gw)
            stream = await trio.open_tcp_stream(host, port)
            await stream.send_all(b"GET /sse HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                  b"Accept: text/event-stream\r\n\r\n")
            got = bytearray()
            while b"session_id=" not in got:
                got += await stream.receive_some(65536)
            session_id = got.split(b"session_id=", 1)[1].split(b"\n", 1)[0].strip().decode()
            post = f"{gw.url}/messages?session_id={session_id}"

            async def read() -> None:
                while chunk := await stream.receive_some(65536):
                    got.extend(chunk)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(read)
                assert (await http.post(post, json={**INIT, "id": "init"})).status_code == 202
                await http.post(post, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
                call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
                    "name": "toolfunnel_run_tool", "_meta": {"progressToken": "p"},
                    "arguments": {"name": "mock_progress", "args": {"steps": 2000, "delay": 0}}}}
                assert (await http.post(post, json=call)).status_code == 202
                while b"progress done" not in got:
                    await trio.sleep(0.05)
                nursery.cancel_scope.cancel()
            assert b"not reading its stream" not in gw.stderr
            after = run_tool("after", "hash", {"text": "x"})
            assert (await http.post(post, json=after)).status_code == 202
            await stream.aclose()
