"""The HTTP service (`tfunnel serve --http`) in-process (`tfunnel.testing.gateway`) on a real
loopback port: the protocol's rules, sessions, probes, metrics, cancellation. What needs the
process (a real SIGTERM and its exit status, systemd's notify socket, the command's own refusals
to start) is in tests/e2e/test_http.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio
from mcp import Client

from tests.conftest import add_tools
from tests.test_stdio_wire import SLEEPER
from tests.upstreams import mock_upstream, set_upstreams
from tests.wire import wait_for_file, wait_gone
from tfunnel.testing.gateway import http_gateway

pytestmark = pytest.mark.timeout(90)

ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "raw", "version": "1"}}}


async def open_session(client: httpx2.AsyncClient, url: str) -> str:
    reply = await client.post(f"{url}/mcp", json=INIT, headers=ACCEPT)
    assert reply.status_code == 200
    return reply.headers["mcp-session-id"]


async def test_sdk_client_lists_and_calls_over_streamable_http(home: Path) -> None:
    """The SDK's Streamable HTTP client (legacy) lists, calls local and upstream tools, and gets progress."""
    async with http_gateway(home) as gw, Client(f"{gw.url}/mcp", mode="legacy", cache=None) as client:
        assert client.protocol_version == "2025-11-25"
        names = [t.name for t in (await client.list_tools()).tools]
        assert names == ["toolfunnel_list_tools", "toolfunnel_tool_instructions", "toolfunnel_run_tool",
                         "toolfunnel_howto"]
        hashed = await client.call_tool("toolfunnel_run_tool", {"name": "hash", "args": {"text": "abc"}})
        assert hashed.structured_content is not None
        assert hashed.structured_content["hexdigest"].startswith("ba7816bf")
        added = await client.call_tool("toolfunnel_run_tool",
                                       {"name": "demo_add", "args": {"a": 2, "b": 3}})
        assert added.structured_content == {"result": 5}
        seen: list[float] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append(progress)

        done = await client.call_tool("toolfunnel_run_tool",
                                      {"name": "demo_progress", "args": {"steps": 3, "delay": 0.05}},
                                      progress_callback=on_progress)
        assert not done.is_error and seen == [1, 2, 3]


async def test_protection_and_session_rules(home: Path) -> None:
    """Origin → 403, Host → 421, over-cap body → 413, Accept → 406, sessions: 400/404/202/DELETE."""
    async with http_gateway(home) as gw, httpx2.AsyncClient(timeout=10) as http:
        url = gw.url
        assert (await http.get(f"{url}/livez", headers={"origin": "http://evil.example"})).status_code == 403
        assert (await http.get(f"{url}/livez", headers={"host": "evil.example"})).status_code == 421
        for rebinding in ("127.0.0.1.nip.io", "127.evil.com"):
            assert (await http.get(f"{url}/livez", headers={"host": rebinding})).status_code == 421
            foreign = await http.get(f"{url}/livez", headers={"origin": f"http://{rebinding}"})
            assert foreign.status_code == 403
        local = await http.get(f"{url}/livez", headers={"origin": "http://localhost:3000"})
        assert local.status_code == 200
        big = b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": "' + b"x" * (5 << 20) + b'"}}'
        over = await http.post(f"{url}/mcp", content=big, headers=ACCEPT)
        assert over.status_code == 413 and over.json()["error"]["code"] == -32600
        wrong_accept = await http.post(f"{url}/mcp", json=INIT, headers={"accept": "application/json"})
        assert wrong_accept.status_code == 406
        ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
        assert (await http.post(f"{url}/mcp", json=ping, headers=ACCEPT)).status_code == 400
        unknown = await http.post(f"{url}/mcp", json=ping, headers={**ACCEPT, "mcp-session-id": "nope"})
        assert unknown.status_code == 404
        session = await open_session(http, url)
        headers = {**ACCEPT, "mcp-session-id": session, "mcp-protocol-version": "2025-11-25"}
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert (await http.post(f"{url}/mcp", json=note, headers=headers)).status_code == 202
        pong = await http.post(f"{url}/mcp", json=ping, headers=headers)
        assert pong.status_code == 200 and pong.json() == {"jsonrpc": "2.0", "id": 2, "result": {}}
        bad_version = await http.post(f"{url}/mcp", json=ping,
                                      headers={**headers, "mcp-protocol-version": "1.0"})
        assert bad_version.status_code == 400
        assert (await http.delete(f"{url}/mcp", headers=headers)).status_code == 200
        assert (await http.post(f"{url}/mcp", json=ping, headers=headers)).status_code == 404


async def test_health_readyz_and_counters(home: Path) -> None:
    """/health follows the SPEC shape (a stopped upstream listed), and its call counters move."""
    set_upstreams(home, mock_upstream("fine", "--tools", "echo"),
                  {"id": "broken", "command": "/no/such/server",
                   "restart": {"permanentFailureS": 0.2, "initialBackoffS": 0.05}})
    async with http_gateway(home) as gw, httpx2.AsyncClient(timeout=10) as http:
        with trio.fail_after(20):
            while (doc := (await http.get(f"{gw.url}/health")).json())["upstreams"]["broken"][
                    "state"] != "stopped":
                await trio.sleep(0.1)
        reply = await http.get(f"{gw.url}/health")
        assert reply.status_code == 200 and doc["status"] == "degraded"
        assert set(doc) == {"status", "server", "uptimeS", "protocolVersions", "upstreams", "stopped",
                            "config", "calls", "clients", "approvals", "wrap", "tokens"}
        assert set(doc["upstreams"]["fine"]) == {"state", "transport", "era", "protocolVersion", "pid",
                                                 "tools", "restarts", "since", "lastError"}
        assert doc["upstreams"]["fine"]["state"] == "ready" and doc["upstreams"]["fine"]["tools"] == 1
        assert [s["id"] for s in doc["stopped"]] == ["broken"] and "not found" in doc["stopped"][0]["reason"]
        assert (await http.get(f"{gw.url}/readyz")).status_code == 200
        session = await open_session(http, gw.url)
        call = {"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                "params": {"name": "toolfunnel_run_tool", "arguments": {"name": "nope"}}}
        await http.post(f"{gw.url}/mcp", json=call, headers={**ACCEPT, "mcp-session-id": session})
        after = (await http.get(f"{gw.url}/health")).json()
        assert after["calls"] == {"total": 1, "errors": 1, "denied": 0}
        assert after["clients"]["sessions"] == 1


async def test_a_dropped_connection_cancels_the_call_through_the_tree(home: Path, tmp_path: Path) -> None:
    """A client that disconnects mid-call: the tool's process group dies; the upstream logs the cancel."""
    add_tools(home, SLEEPER, scripts=("sleeper.py",))
    cancel_log = home / "cancels"
    set_upstreams(home, mock_upstream("mock", "--cancel-log", str(cancel_log)))
    pidfile = tmp_path / "pids"
    async with http_gateway(home) as gw, httpx2.AsyncClient(timeout=10) as http:
        session = await open_session(http, gw.url)
        headers = {**ACCEPT, "mcp-session-id": session}

        async def call_and_drop(name: str, args: dict[str, Any], drop_after: float) -> None:
            body = {"jsonrpc": "2.0", "id": name, "method": "tools/call",
                    "params": {"name": "toolfunnel_run_tool", "arguments": {"name": name, "args": args}}}
            with trio.move_on_after(drop_after):
                await http.post(f"{gw.url}/mcp", json=body, headers=headers, timeout=60)

        await call_and_drop("sleeper", {"seconds": 60, "grandchild": True, "pidfile": str(pidfile)}, 1.5)
        pids = [int(p) for p in (await wait_for_file(pidfile)).split()]
        assert await wait_gone(pids) == []
        await call_and_drop("mock_slow", {"seconds": 60}, 1.0)
        assert isinstance(json.loads(await wait_for_file(cancel_log)), int)


# (Host header, Origin header or None, status): what the DNS-rebinding guard answers over the wire.
GUARD: list[tuple[str, str | None, int]] = [
    ("127.0.0.1.nip.io", None, 421),
    ("127.0.0.1.nip.io:9998", None, 421),
    ("127.evil.com", None, 421),
    ("127.evil.com:9998", None, 421),
    ("localhost.", None, 421),
    ("127.0.0.1.", None, 421),
    ("127.1:9998", None, 421),
    ("0x7f000001", None, 421),
    ("[::ffff:127.0.0.1]:9998", None, 421),
    ("127.0.0.1:abc", None, 421),
    ("127.0.0.1@evil.com", None, 421),
    ("127.0.0.1:9998", "http://127.evil.com", 403),
    ("127.0.0.1:9998", "http://127.0.0.1.nip.io:9998", 403),
    ("127.0.0.1:9998", "null", 403),
    ("127.0.0.1:9998", "http://user@127.0.0.1", 403),
    ("127.0.0.1:9998", "ws://127.0.0.1", 403),
    ("127.0.0.1:9998", "http://127.0.0.1:9998", 200),
    ("LOCALHOST:9998", "https://localhost", 200),
    ("[::1]:9998", "http://[::1]", 200),
    ("127.0.0.2", None, 200),
]


async def test_dns_rebinding_guard_over_http(home: Path) -> None:
    """Rebinding Hosts get 421 and foreign Origins 403, each a JSON-RPC error (id null); loopback passes."""
    async with http_gateway(home) as gw, httpx2.AsyncClient(timeout=10) as http:
        for host, origin, status in GUARD:
            headers = {"host": host} if origin is None else {"host": host, "origin": origin}
            reply = await http.post(f"{gw.url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                                    headers={**ACCEPT, **headers})
            if status == 200:  # past the guard: the session check answers
                assert reply.status_code == 400, (host, origin)
                continue
            assert reply.status_code == status, (host, origin)
            assert reply.headers["content-type"] == "application/json"
            error = reply.json()
            assert error["id"] is None and error["error"]["code"] == -32600
            assert ("Host" if status == 421 else "Origin") in error["error"]["message"]


async def test_http_errors_are_json_but_probes_stay_text(home: Path) -> None:
    """404 and every 405 carry a JSON-RPC error body; /livez and /readyz keep their text bodies."""
    async with http_gateway(home) as gw, httpx2.AsyncClient(timeout=10) as http:
        errors = [
            await http.get(f"{gw.url}/nowhere"),
            await http.put(f"{gw.url}/mcp", content=b"{}"),
            await http.get(f"{gw.url}/mcp", headers={"accept": "application/json"}),
            await http.get(f"{gw.url}/mcp", headers={"mcp-protocol-version": "2026-07-28"}),
        ]
        assert [e.status_code for e in errors] == [404, 405, 405, 405]
        for error in errors:
            assert error.headers["content-type"] == "application/json"
            assert error.json()["id"] is None and error.json()["error"]["code"] == -32600
        assert errors[3].headers["allow"] == "POST"
        for probe, text in (("/livez", "ok"), ("/readyz", "ready")):
            reply = await http.get(f"{gw.url}{probe}")
            assert reply.headers["content-type"].startswith("text/plain") and reply.text == text


# Bodies that are not Unicode text: each must get -32700 (HTTP 400), on every transport.
UNDECODABLE = [
    b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"\\ud800"}}',
    b'{"jsonrpc":"2.0","id":"\\ud800","method":"ping"}',
    b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"\xed\xa0\x80"}}',
    b"\xff\xfe",
]
MODERN_META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
               "io.modelcontextprotocol/clientCapabilities": {},
               "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"}}
MODERN_LIST = json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/list",
                          "params": {"_meta": MODERN_META, "cursor": "\ud800"}}).encode()


def assert_parse_error(reply: httpx2.Response) -> None:
    assert reply.status_code == 400, reply.content
    assert reply.headers["content-type"] == "application/json"
    assert reply.json()["id"] is None and reply.json()["error"]["code"] == -32700


async def test_undecodable_bodies_get_a_parse_error(home: Path) -> None:
    """Lone surrogates and non-UTF-8 bytes get 400/-32700 on /mcp (session and modern) and /messages."""
    async with http_gateway(home) as gw, httpx2.AsyncClient(timeout=10) as http:
        session = {**ACCEPT, "mcp-session-id": await open_session(http, gw.url)}
        for body in UNDECODABLE:
            assert_parse_error(await http.post(f"{gw.url}/mcp", content=body, headers=session))
        modern = {**ACCEPT, "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/list"}
        assert_parse_error(await http.post(f"{gw.url}/mcp", content=MODERN_LIST, headers=modern))
        for body in UNDECODABLE:
            assert_parse_error(await http.post(f"{gw.url}/mcp", content=body, headers=modern))
        pong = await http.post(f"{gw.url}/mcp", json={"jsonrpc": "2.0", "id": 9, "method": "ping"},
                               headers=session)
        assert pong.json() == {"jsonrpc": "2.0", "id": 9, "result": {}}
        with trio.fail_after(20):
            async with http.stream("GET", f"{gw.url}/sse") as stream:
                lines = stream.aiter_lines()
                endpoint = ""
                while not endpoint.startswith("data: "):
                    endpoint = await anext(lines)
                messages = f"{gw.url}{endpoint.removeprefix('data: ')}"
                for body in UNDECODABLE:
                    assert_parse_error(await http.post(messages, content=body, headers=ACCEPT))
                init = {**INIT, "id": "sse-init"}
                assert (await http.post(messages, json=init, headers=ACCEPT)).status_code == 202
                data = ""
                while not data.startswith("data: "):  # the session still answers on its stream
                    data = await anext(lines)
                assert json.loads(data.removeprefix("data: "))["id"] == "sse-init"


async def test_metrics_parse_and_move_with_traffic(home: Path) -> None:
    """/metrics is Prometheus text; request, tool-call and gate counters move with traffic."""
    from prometheus_client.parser import text_string_to_metric_families

    def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(text) for s in family.samples}

    async with http_gateway(home) as gw, httpx2.AsyncClient(timeout=10) as http:
        before = samples((await http.get(f"{gw.url}/metrics")).text)
        async with Client(f"{gw.url}/mcp", mode="legacy", cache=None) as client:
            await client.call_tool("toolfunnel_run_tool", {"name": "hash", "args": {"text": "abc"}})
            await client.call_tool("toolfunnel_run_tool", {"name": "hash", "args": {}})
        after = samples((await http.get(f"{gw.url}/metrics")).text)
    ok = ("tfunnel_tool_calls_total", (("outcome", "ok"), ("tool", "hash")))
    error = ("tfunnel_tool_calls_total", (("outcome", "error"), ("tool", "hash")))
    assert after[ok] - before.get(ok, 0) == 1 and after[error] - before.get(error, 0) == 1
    calls = ("tfunnel_requests_total", (("method", "tools/call"), ("outcome", "ok")))
    assert after[calls] - before.get(calls, 0) == 2
    assert after[("tfunnel_gate_decisions_total", (("decision", "allow"),))] >= 1
    assert after[("tfunnel_upstream_state", (("state", "ready"), ("upstream", "demo")))] == 1


async def test_sdk_sse_client_on_the_2024_transport(home: Path) -> None:
    """The SDK's HTTP+SSE client (2024-11-05 transport: GET /sse, POST /messages) lists and calls."""
    from mcp import ClientSession
    from mcp.client.sse import sse_client

    async with http_gateway(home) as gw, sse_client(f"{gw.url}/sse") as (read, write), \
            ClientSession(read, write) as session:
        await session.initialize()
        names = [t.name for t in (await session.list_tools()).tools]
        assert "toolfunnel_run_tool" in names
        ran = await session.call_tool("toolfunnel_run_tool", {"name": "demo_add", "args": {"a": 1, "b": 2}})
        assert ran.structured_content == {"result": 3}
        local = await session.call_tool("toolfunnel_run_tool", {"name": "hash", "args": {"text": "abc"}})
        assert local.structured_content is not None and local.structured_content["algo"] == "sha256"


async def test_notifications_cancelled_cancels_the_named_call(home: Path, tmp_path: Path) -> None:
    """In a session, notifications/cancelled kills the named call's tool and sends no result for it."""
    add_tools(home, SLEEPER, scripts=("sleeper.py",))
    pidfile = tmp_path / "pids"
    async with http_gateway(home) as gw, httpx2.AsyncClient(timeout=30) as http:
        session = await open_session(http, gw.url)
        headers = {**ACCEPT, "mcp-session-id": session}
        replies: list[httpx2.Response] = []

        async def slow_call() -> None:
            body = {"jsonrpc": "2.0", "id": "slow-1", "method": "tools/call",
                    "params": {"name": "toolfunnel_run_tool", "arguments": {
                        "name": "sleeper", "args": {"seconds": 60, "pidfile": str(pidfile)}}}}
            replies.append(await http.post(f"{gw.url}/mcp", json=body, headers=headers))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(slow_call)
            pids = [int(p) for p in (await wait_for_file(pidfile)).split()]
            cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled",
                      "params": {"requestId": "slow-1"}}
            assert (await http.post(f"{gw.url}/mcp", json=cancel, headers=headers)).status_code == 202
        assert await wait_gone(pids) == []
        assert replies[0].status_code == 204 and replies[0].content == b""


async def test_health_says_stopping_with_503(home: Path) -> None:
    """While draining, /health answers 503 with status "stopping" (the in-process ASGI app)."""
    from tfunnel.app import build
    from tfunnel.observe.observer import CallTally
    from tfunnel.serve.http import HttpApp
    from tfunnel.serve.metrics import Metrics
    from tfunnel.serve.sessions import SessionStore

    gateway = build(home)
    gateway.live.started.set()
    app = HttpApp(gateway.router, gateway.live, gateway.supervisor, CallTally(), SessionStore(), Metrics())
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "path": "/health", "method": "GET", "headers": [(b"host", b"127.0.0.1:1")]}
    await app(scope, receive, send)
    assert sent[0]["status"] == 200
    app.stopping.set()
    sent.clear()
    await app(scope, receive, send)
    assert sent[0]["status"] == 503 and json.loads(sent[1]["body"])["status"] == "stopping"


@pytest.mark.parametrize("kind", ["legacy", "modern", "initialize"])
async def test_no_new_request_is_served_while_draining(home: Path, kind: str) -> None:
    """Once stopping, a request of any era gets 503, even one carrying a live session's id (a
    modern request ignores the session, an initialize would mint one); a notification for the
    session still passes (202)."""
    from tfunnel.app import build
    from tfunnel.observe.observer import CallTally
    from tfunnel.serve.http import HttpApp
    from tfunnel.serve.metrics import Metrics
    from tfunnel.serve.sessions import SessionStore

    gateway = build(home)
    gateway.live.started.set()
    app = HttpApp(gateway.router, gateway.live, gateway.supervisor, CallTally(), SessionStore(), Metrics())

    async def post(message: dict[str, Any], session: str | None = None,
                   version: str | None = None) -> tuple[int, dict[str, str]]:
        sent: list[dict[str, Any]] = []
        body = json.dumps(message).encode()

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(event: dict[str, Any]) -> None:
            sent.append(event)

        headers = [(b"host", b"127.0.0.1:1"), (b"content-type", b"application/json"),
                   (b"accept", b"application/json, text/event-stream")]
        if session is not None:
            headers.append((b"mcp-session-id", session.encode()))
        if version is not None:
            headers.append((b"mcp-protocol-version", version.encode()))
        await app({"type": "http", "path": "/mcp", "method": "POST", "headers": headers}, receive, send)
        return sent[0]["status"], {k.decode(): v.decode() for k, v in sent[0]["headers"]}

    with trio.fail_after(30):
        hello = {"protocolVersion": "2025-06-18", "capabilities": {},
                 "clientInfo": {"name": "t", "version": "1"}}
        status, got = await post({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello})
        assert status == 200
        session = got["mcp-session-id"]
        app.stopping.set()
        request = {
            "legacy": ({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}, "2025-06-18"),
            "modern": ({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {}}}}, "2026-07-28"),
            "initialize": ({"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": hello}, None),
        }[kind]
        assert (await post(request[0], session, request[1]))[0] == 503
        note = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 9}}
        assert (await post(note, session, "2025-06-18"))[0] == 202
