"""The Streamable HTTP upstream transport (`upstream/http.py`): its SSE decoder, and a small h11
server in the test for the edge cases (a lost session, an error status, headers, a dropped GET
stream, DELETE on stop). The real servers we did not write (server-everything, legacy sessions;
the SDK's dual-era mcp-server-time, modern), each a process, are in tests/e2e/test_upstream_http.py."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import h11
import pytest
import trio
from structlog.testing import capture_logs

from tests.h11wire import next_message
from tests.upstreams import call_tool
from tfunnel.config.expose import ExposeConfig, RestartPolicy, UpstreamSpec
from tfunnel.config.model import Limits
from tfunnel.errors import UpstreamError
from tfunnel.upstream.http import HttpTransport
from tfunnel.upstream.http_sse import SseDecoder, SseEvent
from tfunnel.upstream.remote import display_url
from tfunnel.upstream.states import Context, Identity, State
from tfunnel.upstream.supervisor import Supervisor

pytestmark = pytest.mark.timeout(120)

FAST = RestartPolicy(initial_backoff_s=0.2, max_backoff_s=0.5)
NOTE = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "x"}}


# --- the SSE decoder (pure) -------------------------------------------------------------------

@pytest.mark.parametrize(("chunks", "events"), [
    ([b"data: {}\n\n"], [SseEvent("{}")]),
    ([b"data: a\r\ndata: b\r\n\r\n"], [SseEvent("a\nb")]),
    ([b"data: a\r", b"\n\r", b"\n"], [SseEvent("a")]),
    ([b"event: ping\ndata:x\n\n"], [SseEvent("x", event="ping")]),
    ([b": keep-alive\n\n", b"id: 7\ndata: m\n\n"], [SseEvent("m", id="7")]),
    ([b"id: 1\ndata:\n\n"], [SseEvent("", id="1")]),
    ([b"id: 1\n\n", b"data: m\n\n"], [SseEvent("m", id="1")]),
    ([b"retry: 300\n\n"], [SseEvent("", retry_ms=300)]),
    ([b"data: " + b"x" * 40 + b"\n\n", b"data: ok\n\n"], [SseEvent("", oversize=True), SseEvent("ok")]),
    ([b"da", b"ta: spl", b"it\n", b"\n"], [SseEvent("split")]),
], ids=["lf", "crlf-two-lines", "cr-split-across-chunks", "named", "comment-and-id", "primed",
        "id-only-moves-last-id", "retry", "oversize", "split"])
def test_sse_decoder(chunks: list[bytes], events: list[SseEvent]) -> None:
    """Line endings, fields, comments, ids, retry and the size cap, as the event-stream rules say."""
    decoder = SseDecoder(32)
    got = [event for chunk in chunks for event in decoder.feed(chunk)]
    assert got == events


def test_public_url_drops_userinfo_and_query() -> None:
    """What logs and /health show of a URL has no credentials and no query."""
    assert display_url("https://user:pw@example.test:8443/mcp?key=s3cr3t#x") == "https://example.test:8443/mcp"


# --- shared helpers ---------------------------------------------------------------------------

def context(tmp_path: Path, env: dict[str, str] | None = None) -> Context:
    return Context(tmp_path, env or {}, Limits(max_message_bytes=1 << 20), Identity("t", "0"), lambda: None)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def wait_state(supervisor: Supervisor, upstream_id: str, state: State, timeout: float = 20) -> None:
    with trio.fail_after(timeout):
        while supervisor.upstreams[upstream_id].state is not state:
            await trio.sleep(0.02)


# --- a small HTTP server for the edge cases ---------------------------------------------------

@dataclass
class Seen:
    method: str
    headers: dict[str, str]
    body: dict[str, Any] | None


@dataclass
class Reply:
    status: int = 200
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    # An event stream: these chunks, then (if `drop`) the connection is cut, else held open.
    events: list[bytes] | None = None
    drop: bool = False
    closed: trio.Event | None = None  # set once the client closes a held-open event stream
    finish: bool = False  # end the event stream cleanly after the chunks


Handler = Callable[[Seen], Awaitable[Reply]]


def json_reply(message: dict[str, Any], *headers: tuple[str, str]) -> Reply:
    return Reply(200, [("content-type", "application/json"), *headers], json.dumps(message).encode())


async def _serve_connection(stream: trio.SocketStream, handler: Handler, seen: list[Seen]) -> None:
    conn = h11.Connection(h11.SERVER)
    try:
        while True:
            message = await next_message(conn, stream)
            if message is None:
                return
            request, body = message
            assert isinstance(request, h11.Request)
            headers = {k.decode().lower(): v.decode() for k, v in request.headers}
            hit = Seen(request.method.decode(), headers, json.loads(body) if body else None)
            seen.append(hit)
            reply = await handler(hit)
            if reply.events is not None:
                sse = [("content-type", "text/event-stream"), *reply.headers]
                await stream.send_all(conn.send(h11.Response(status_code=reply.status, headers=sse)))
                for chunk in reply.events:
                    await stream.send_all(conn.send(h11.Data(data=chunk)))
                if reply.drop:
                    return
                if reply.finish:
                    await stream.send_all(conn.send(h11.EndOfMessage()))
                    conn.start_next_cycle()
                    continue
                while await stream.receive_some(65536):
                    pass  # held open until the client closes it
                if reply.closed is not None:
                    reply.closed.set()
                return
            headers_out = [*reply.headers, ("content-length", str(len(reply.body)))]
            await stream.send_all(conn.send(h11.Response(status_code=reply.status, headers=headers_out)))
            await stream.send_all(conn.send(h11.Data(data=reply.body)) + conn.send(h11.EndOfMessage()))
            conn.start_next_cycle()
    except (trio.BrokenResourceError, h11.RemoteProtocolError):
        return
    finally:
        await stream.aclose()


@asynccontextmanager
async def fake_server(handler: Handler) -> AsyncIterator[tuple[str, list[Seen]]]:
    """An HTTP/1.1 server on a loopback port: (its URL, every request it saw)."""
    seen: list[Seen] = []
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, host="127.0.0.1"),
                                        lambda s: _serve_connection(s, handler, seen), 0)
        port = listeners[0].socket.getsockname()[1]
        yield f"http://127.0.0.1:{port}/mcp", seen
        nursery.cancel_scope.cancel()


class LegacyServer:
    """A legacy-only server with sessions: initialize mints `s<n>`; tools/call answers per `on_call`."""

    def __init__(self) -> None:
        self.sessions = 0
        self.lost: set[str] = set()
        self.call_status = 200
        self.gets = 0
        self.polled: Any = None
        self.poll = False  # answer tools/call only on the resumed stream (2025-11-25 polling)
        self.poll_retry_ms = 10  # the `retry:` that stream asks before it is resumed

    async def __call__(self, hit: Seen) -> Reply:
        body = hit.body or {}
        method = body.get("method")
        if hit.method == "DELETE":
            return Reply(200)
        if hit.method == "GET" and hit.headers.get("last-event-id") == "p1":
            late = {"content": [{"type": "text", "text": "late"}]}
            answer = {"jsonrpc": "2.0", "id": self.polled, "result": late}
            return Reply(events=[b"id: p2\ndata: " + json.dumps(answer).encode() + b"\n\n"], finish=True)
        if hit.method == "GET":
            self.gets += 1
            if self.gets == 1:  # one event, then the stream drops
                return Reply(events=[b"id: e1\ndata: " + json.dumps(NOTE).encode() + b"\n\n"], drop=True)
            return Reply(events=[b": open\n\n"])
        if method == "server/discover":
            return Reply(400, [("content-type", "application/json")],
                         b'{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"No session"}}')
        if method == "initialize":
            self.sessions += 1
            result = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                      "serverInfo": {"name": "fake", "version": "1"}}
            return json_reply({"jsonrpc": "2.0", "id": body["id"], "result": result},
                              ("mcp-session-id", f"s{self.sessions}"))
        if hit.headers.get("mcp-session-id") in self.lost:
            return Reply(404)
        if "id" not in body:
            return Reply(202)
        if method == "tools/list":
            tool = {"name": "echo", "inputSchema": {"type": "object"}}
            return json_reply({"jsonrpc": "2.0", "id": body["id"], "result": {"tools": [tool]}})
        if method == "tools/call" and self.poll:
            self.polled = body["id"]
            return Reply(events=[b"id: p1\ndata:\n\nretry: %d\n\n" % self.poll_retry_ms], finish=True)
        if method == "tools/call" and self.call_status != 200:
            return Reply(self.call_status, [("content-type", "text/plain")], b"boom")
        return json_reply({"jsonrpc": "2.0", "id": body["id"],
                           "result": {"content": [{"type": "text", "text": "ok"}]}})


@asynccontextmanager
async def supervised(tmp_path: Path, url: str, **fields: Any) -> AsyncIterator[Supervisor]:
    env = fields.pop("env", {})
    spec = UpstreamSpec(id="f", transport="http", url=url, restart=FAST, **fields)
    supervisor = Supervisor(context(tmp_path, env))
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.run, ExposeConfig(upstreams=(spec,)))
        yield supervisor
        nursery.cancel_scope.cancel()


async def test_a_lost_session_restarts_and_reinitializes(tmp_path: Path) -> None:
    """A 404 on a request carrying the session fails that call naming the lost session; the
    upstream restarts and initializes a new session, which later requests carry."""
    server = LegacyServer()
    with trio.fail_after(20):
        async with fake_server(server) as (url, seen), supervised(tmp_path, url) as supervisor:
            assert supervisor.upstreams["f"].state is State.READY
            server.lost.add("s1")
            with pytest.raises(UpstreamError, match=r"lost its session \(404\)"):
                await call_tool(supervisor, "f", "echo", {})
            with trio.fail_after(5):
                while server.sessions < 2:
                    await trio.sleep(0.02)
            await wait_state(supervisor, "f", State.READY)
            assert (await call_tool(supervisor, "f", "echo", {}))["content"][0]["text"] == "ok"
            calls = [h for h in seen if h.body and h.body.get("method") == "tools/call"]
            assert calls[-1].headers["mcp-session-id"] == "s2"
            assert calls[-1].headers["mcp-protocol-version"] == "2025-11-25"


async def test_an_error_status_fails_the_call_at_once(tmp_path: Path) -> None:
    """A 500 on a tools/call fails that call at once with a message naming the status; the
    upstream stays ready."""
    server = LegacyServer()
    server.call_status = 500
    with trio.fail_after(20):
        async with fake_server(server) as (url, _), supervised(tmp_path, url) as supervisor:
            started = trio.current_time()
            with pytest.raises(UpstreamError, match="HTTP 500 Internal Server Error"):
                await call_tool(supervisor, "f", "echo", {})
            assert trio.current_time() - started < 2
            assert supervisor.upstreams["f"].state is State.READY


async def test_headers_get_stream_resume_and_delete(tmp_path: Path) -> None:
    """`${TOKEN}` headers arrive expanded on every request and never in logs; a GET stream that
    drops is reopened with `Last-Event-ID`; stopping DELETEs the session."""
    server = LegacyServer()
    secret = "s3cr3t-token-value"
    with trio.fail_after(20), capture_logs() as logs:
        async with fake_server(server) as (url, seen):
            async with supervised(tmp_path, url + "?key=query-secret",
                                  headers={"Authorization": "Bearer ${TOKEN}"}, env={"TOKEN": secret}):
                with trio.fail_after(5):
                    while server.gets < 2:
                        await trio.sleep(0.02)
            with trio.fail_after(5):
                while not any(h.method == "DELETE" for h in seen):
                    await trio.sleep(0.02)
    assert all(h.headers.get("authorization") == f"Bearer {secret}" for h in seen)
    gets = [h for h in seen if h.method == "GET"]
    assert "last-event-id" not in gets[0].headers and gets[1].headers["last-event-id"] == "e1"
    assert gets[0].headers["accept"] == "text/event-stream" and gets[0].headers["mcp-session-id"] == "s1"
    delete = next(h for h in seen if h.method == "DELETE")
    assert delete.headers["mcp-session-id"] == "s1"
    assert secret not in repr(logs) and "query-secret" not in repr(logs)


def modern_request(request_id: int, method: str, params: dict[str, Any]) -> bytes:
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method,
                       "params": {**params, "_meta": meta}}).encode() + b"\n"


async def test_a_modern_request_carries_its_headers_and_is_cancelled_by_closing_its_stream(
        tmp_path: Path) -> None:
    """A modern tools/call carries MCP-Protocol-Version, Mcp-Method and Mcp-Name (base64 when not
    plain ASCII) and no session; its `notifications/cancelled` closes the POST's response stream
    and is not sent."""
    closed = trio.Event()

    async def handler(hit: Seen) -> Reply:
        if hit.body and hit.body.get("method") == "tools/call":
            return Reply(events=[b": working\n\n"], closed=closed)
        return Reply(202)

    with trio.fail_after(10):
        async with fake_server(handler) as (url, seen):
            spec = UpstreamSpec(id="m", transport="http", url=url)
            async with HttpTransport(spec, context(tmp_path)).connect() as stream:
                await stream.send(modern_request(5, "tools/call", {"name": "grüße", "arguments": {}}))
                while not seen:
                    await trio.sleep(0.01)
                await trio.sleep(0.1)
                assert not closed.is_set()
                await stream.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/cancelled",
                                              "params": {"requestId": 5}}).encode() + b"\n")
                await closed.wait()
    headers = seen[0].headers
    assert headers["mcp-protocol-version"] == "2026-07-28" and headers["mcp-method"] == "tools/call"
    assert headers["mcp-name"] == "=?base64?Z3LDvMOfZQ==?=" and "mcp-session-id" not in headers
    assert headers["accept"] == "application/json, text/event-stream"
    assert len(seen) == 1  # the cancel was the closed stream, not a POST


async def test_an_answer_over_the_cap_fails_only_its_request(tmp_path: Path) -> None:
    """A JSON answer bigger than maxMessageBytes becomes an error answer for that request id."""
    async def handler(hit: Seen) -> Reply:
        assert hit.body is not None
        return json_reply({"jsonrpc": "2.0", "id": hit.body["id"], "result": {"x": "y" * 5000}})

    ctx = Context(tmp_path, {}, Limits(max_message_bytes=1000), Identity("t", "0"), lambda: None)
    with trio.fail_after(10):
        async with fake_server(handler) as (url, _):
            spec = UpstreamSpec(id="m", transport="http", url=url)
            async with HttpTransport(spec, ctx).connect() as stream:
                await stream.send(b'{"jsonrpc":"2.0","id":9,"method":"tools/list","params":{}}\n')
                answer = await stream.receive()
    assert isinstance(answer, bytes)
    error = json.loads(answer)
    assert error["id"] == 9 and "over 1000 bytes" in error["error"]["message"]


async def test_an_error_status_keeps_the_json_rpc_error_data(tmp_path: Path) -> None:
    """A modern server refuses a version with HTTP 400 and -32022 whose `data.supported` the
    retry needs: the error answer keeps the code, the data and the server's message."""
    refusal = {"code": -32022, "message": "Unsupported protocol version",
               "data": {"supported": ["2026-07-28"], "requested": "2026-07-28"}}

    async def handler(hit: Seen) -> Reply:
        assert hit.body is not None
        body = json.dumps({"jsonrpc": "2.0", "id": hit.body["id"], "error": refusal}).encode()
        return Reply(400, [("content-type", "application/json")], body)

    with trio.fail_after(10):
        async with fake_server(handler) as (url, _):
            spec = UpstreamSpec(id="m", transport="http", url=url)
            async with HttpTransport(spec, context(tmp_path, {})).connect() as stream:
                await stream.send(modern_request(4, "server/discover", {}))
                answer = await stream.receive()
    assert isinstance(answer, bytes)
    error = json.loads(answer)["error"]
    assert error["code"] == -32022 and error["data"] == refusal["data"]
    assert error["message"] == "upstream 'm' answered HTTP 400 Bad Request: Unsupported protocol version"


async def test_a_modern_tools_call_mirrors_its_annotated_arguments(tmp_path: Path) -> None:
    """After a modern tools/list, a tools/call of a tool whose inputSchema has `x-mcp-header`
    annotations carries one Mcp-Param header per present, non-null argument (base64 when unsafe);
    a tool the list did not describe gets none."""
    schema = {"type": "object", "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"},
        "priority": {"type": "integer", "x-mcp-header": "Priority"},
        "verbose": {"type": "boolean", "x-mcp-header": "Verbose"},
        "query": {"type": "string"}}}

    async def handler(hit: Seen) -> Reply:
        assert hit.body is not None
        if hit.body["method"] == "tools/list":
            result: dict[str, Any] = {"tools": [{"name": "t", "inputSchema": schema}]}
        else:
            result = {"content": []}
        return json_reply({"jsonrpc": "2.0", "id": hit.body["id"], "result": result})

    arguments = {"region": "Hello, 世界", "priority": 42, "verbose": None, "query": "q"}
    with trio.fail_after(10):
        async with fake_server(handler) as (url, seen):
            spec = UpstreamSpec(id="m", transport="http", url=url)
            async with HttpTransport(spec, context(tmp_path, {})).connect() as stream:
                await stream.send(modern_request(1, "tools/list", {}))
                await stream.receive()
                await stream.send(modern_request(2, "tools/call", {"name": "t", "arguments": arguments}))
                await stream.receive()
                await stream.send(modern_request(3, "tools/call", {"name": "other", "arguments": arguments}))
                await stream.receive()
    mirrored = [{k: v for k, v in hit.headers.items() if k.startswith("mcp-param-")} for hit in seen]
    region = "=?base64?SGVsbG8sIOS4lueVjA==?="
    assert mirrored == [{}, {"mcp-param-region": region, "mcp-param-priority": "42"}, {}]


async def test_a_request_stream_closed_early_is_resumed_for_its_answer(tmp_path: Path) -> None:
    """A legacy server that closes a request's stream after priming it answers on the stream
    resumed with GET and `Last-Event-ID`; the call gets that answer."""
    server = LegacyServer()
    server.poll = True
    with trio.fail_after(20):
        async with fake_server(server) as (url, seen), supervised(tmp_path, url) as supervisor:
            result = await call_tool(supervisor, "f", "echo", {})
    assert result["content"][0]["text"] == "late"
    resumed = [h for h in seen if h.method == "GET" and h.headers.get("last-event-id") == "p1"]
    assert len(resumed) == 1 and resumed[0].headers["mcp-session-id"] == "s1"


async def test_a_request_stream_is_resumed_after_its_retry_field(tmp_path: Path) -> None:
    """The resume waits the `retry:` the closed request stream asked (2025-11-25: a MUST), not
    the default pause."""
    server = LegacyServer()
    server.poll, server.poll_retry_ms = True, 700
    with trio.fail_after(20):
        async with fake_server(server) as (url, _), supervised(tmp_path, url) as supervisor:
            started = trio.current_time()
            result = await call_tool(supervisor, "f", "echo", {})
            waited = trio.current_time() - started
    assert result["content"][0]["text"] == "late"
    assert waited >= 0.7


async def test_an_unreachable_server_is_a_clear_restartable_failure(tmp_path: Path) -> None:
    """Nothing listens on the port: the first POST ends the stream naming the failure, and the
    upstream goes to backoff (retried, not stopped)."""
    url = f"http://127.0.0.1:{free_port()}/mcp"
    with trio.fail_after(20):
        async with supervised(tmp_path, url) as supervisor:
            upstream = supervisor.upstreams["f"]
            assert upstream.state is State.BACKOFF
            assert upstream.last_error == "upstream 'f' could not be reached (connection failed)"
