"""The WebSocket upstream transport against a real WebSocket server on loopback
(`tests/fixtures/ws_upstream.py`): supervised like a child (listed, called, killed, reconnected),
its refusals, its keep-alive, and secrets kept out of logs; behind the gateway in-process (the
fixture server stays a real process throughout)."""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import structlog
import trio
from trio_websocket import WebSocketRequest, serve_websocket

from tests.conftest import FIXTURES
from tests.upstreams import call_tool, set_upstreams
from tfunnel.config.expose import ExposeConfig, RestartPolicy, UpstreamSpec
from tfunnel.config.model import Limits
from tfunnel.errors import UpstreamError
from tfunnel.protocol import jsonrpc
from tfunnel.protocol.framing import Oversize
from tfunnel.testing.gateway import stdio_gateway as gateway
from tfunnel.upstream.factory import transport_for
from tfunnel.upstream.remote import display_url
from tfunnel.upstream.states import Context, Identity
from tfunnel.upstream.supervisor import Supervisor
from tfunnel.upstream.transport import MessageStream, SpawnFailed, UpstreamTransport
from tfunnel.upstream.websocket import Keepalive, WebSocketTransport

pytestmark = pytest.mark.timeout(60)

FIXTURE = FIXTURES / "ws_upstream.py"
FAST = RestartPolicy(initial_backoff_s=0.2, max_backoff_s=0.5)
SECRET = "s3cr3t-token-value"


@asynccontextmanager
async def ws_server(*args: str, port: int = 0) -> AsyncIterator[tuple[trio.Process, int]]:
    """The fixture server as a real process; its port once it listens. Killed on leaving."""
    proc = await trio.lowlevel.open_process([sys.executable, "-u", str(FIXTURE), "--port", str(port), *args],
                                            stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        line = b""
        with trio.fail_after(10):
            while not line.endswith(b"\n"):
                chunk = await proc.stdout.receive_some(100)
                assert chunk, "the fixture ended before listening"
                line += chunk
        yield proc, int(line.split()[1])
    finally:
        with trio.CancelScope(shield=True):
            if proc.returncode is None:
                proc.kill()
            await proc.wait()
            if proc.stdout is not None:
                await proc.stdout.aclose()


def context(tmp_path: Path, env: Mapping[str, str] | None = None) -> Context:
    return Context(tmp_path, dict(env or {}), Limits(), Identity("t", "0"), lambda: None)


def ws_spec(port: int, **fields: Any) -> UpstreamSpec:
    return UpstreamSpec(**{"id": "ws", "transport": "websocket", "command": "",
                           "url": f"ws://127.0.0.1:{port}/mcp", "restart": FAST, **fields})


async def receive_json(stream: MessageStream) -> Any:
    """The next message, decoded (it must be one, not the end or an over-cap marker)."""
    message = await stream.receive()
    assert isinstance(message, bytes), message
    return json.loads(message)


async def wait_state(supervisor: Supervisor, state: str, timeout: float = 10) -> None:
    with trio.fail_after(timeout):
        while supervisor.upstreams["ws"].statistics().state != state:
            await trio.sleep(0.01)


def test_the_peer_never_shows_userinfo_or_query() -> None:
    """What is logged of a URL keeps scheme, host, port and path, never a credential."""
    assert display_url("wss://user:pw@mcp.example:8443/ws?token=abc#x") == "wss://mcp.example:8443/ws"
    assert display_url("ws://[::1]/mcp") == "ws://[::1]/mcp"


async def test_listed_called_killed_and_reconnected(tmp_path: Path) -> None:
    """The supervisor lists the server's tools and a call is answered; when the server dies the
    call in flight fails at once and the upstream backs off; a server back on the same port is
    reconnected to and answers again."""
    supervisor = Supervisor(context(tmp_path))
    with trio.fail_after(30):
        async with ws_server() as (proc, port), trio.open_nursery() as nursery:
            await nursery.start(supervisor.run, ExposeConfig(upstreams=(ws_spec(port),)))
            stats = supervisor.upstreams["ws"].statistics()
            assert (stats.state, stats.transport, stats.pid, stats.era) == (
                "ready", "websocket", None, "legacy")
            assert [t["name"] for t in supervisor.ready_tools()["ws"]] == ["echo", "hang", "big"]
            answer = await call_tool(supervisor, "ws", "echo", {"text": "hi"})
            assert answer["content"] == [{"type": "text", "text": "hi"}]

            failures: list[tuple[float, UpstreamError]] = []

            async def hang() -> None:
                try:
                    await call_tool(supervisor, "ws", "hang", {})
                except UpstreamError as exc:
                    failures.append((trio.current_time(), exc))

            nursery.start_soon(hang)
            await trio.sleep(0.3)
            killed_at = trio.current_time()
            proc.kill()
            await wait_state(supervisor, "backoff")
            with trio.fail_after(5):
                while not failures:
                    await trio.sleep(0.01)
            assert failures[0][0] - killed_at < 2.0
            assert "'ws'" in str(failures[0][1]) and "closed the connection" in str(failures[0][1])

            async with ws_server(port=port):
                await wait_state(supervisor, "ready")
                again = await call_tool(supervisor, "ws", "echo", {"text": "again"})
                assert again["content"] == [{"type": "text", "text": "again"}]
                assert supervisor.upstreams["ws"].statistics().restarts >= 1
                nursery.cancel_scope.cancel()


async def test_headers_reach_the_server_and_never_the_logs(tmp_path: Path) -> None:
    """`${TOKEN}` in a header is sent expanded, and its value is in no log event."""
    record = tmp_path / "headers.jsonl"
    spec = ws_spec(0, headers={"Authorization": "Bearer ${TOKEN}", "X-Plain": "yes"})
    supervisor = Supervisor(context(tmp_path, {"TOKEN": SECRET}))
    with trio.fail_after(30), structlog.testing.capture_logs() as logs:
        async with ws_server("--record", str(record)) as (_, port), trio.open_nursery() as nursery:
            spec = ws_spec(port, headers=spec.headers)
            await nursery.start(supervisor.run, ExposeConfig(upstreams=(spec,)))
            await call_tool(supervisor, "ws", "echo", {"text": "x"})
            nursery.cancel_scope.cancel()
    seen = json.loads(record.read_text().splitlines()[0])
    assert seen["authorization"] == f"Bearer {SECRET}" and seen["x-plain"] == "yes"
    assert any(entry.get("event") == "upstream ready" for entry in logs)
    assert SECRET not in repr(logs)


async def test_leaving_closes_with_a_close_frame_even_when_cancelled(tmp_path: Path) -> None:
    """Leaving `connect()`, also by a cancellation, sends the close frame (code 1000): the server
    sees a clean close, not a dropped socket."""
    record = tmp_path / "record.jsonl"
    with trio.fail_after(20):
        async with ws_server("--record", str(record)) as (_, port):
            with trio.CancelScope() as scope:
                async with transport_for(ws_spec(port), context(tmp_path)).connect():
                    scope.cancel()
                    await trio.sleep_forever()
            while len(record.read_text().splitlines()) < 2:
                await trio.sleep(0.01)
    assert json.loads(record.read_text().splitlines()[1]) == {"closed": "1000"}


async def test_a_missing_header_variable_is_a_refusal_naming_it(tmp_path: Path) -> None:
    """A header naming an unset variable refuses the connection (permanent), naming the variable."""
    with trio.fail_after(10), pytest.raises(SpawnFailed) as refused:
        async with transport_for(ws_spec(1, headers={"Authorization": "Bearer ${NO_SUCH_TOKEN}"}),
                                 context(tmp_path)).connect():
            pass
    assert "${NO_SUCH_TOKEN}" in str(refused.value) and refused.value.permanent


async def test_a_server_without_the_mcp_subprotocol_is_refused(tmp_path: Path) -> None:
    """A server that accepts the connection without selecting `mcp` is a permanent refusal."""
    with trio.fail_after(10):
        async with ws_server("--no-subprotocol") as (_, port):
            with pytest.raises(SpawnFailed) as refused:
                async with transport_for(ws_spec(port), context(tmp_path)).connect():
                    pass
    assert "did not accept the 'mcp' WebSocket subprotocol" in str(refused.value)
    assert refused.value.permanent and not refused.value.final


async def test_a_rejected_upgrade_is_a_refusal_naming_the_status(tmp_path: Path) -> None:
    """A server that answers the upgrade with an HTTP error (say 401: bad credentials) is a
    permanent refusal naming the status, never raised as an exception group."""
    with trio.fail_after(10):
        async with ws_server("--reject", "401") as (_, port):
            with pytest.raises(SpawnFailed) as refused:
                async with transport_for(ws_spec(port), context(tmp_path)).connect():
                    pass
    assert f"ws://127.0.0.1:{port}/mcp refused the WebSocket connection (HTTP 401)" in str(refused.value)
    assert refused.value.permanent and not refused.value.final


async def test_a_refused_connect_retries_and_shows_no_credentials(tmp_path: Path) -> None:
    """Nothing listening is a transient `SpawnFailed` naming the upstream and the URL without its
    userinfo or query."""
    with trio.socket.socket() as sock:  # a port that was free a moment ago, now closed
        await sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    spec = ws_spec(port, url=f"ws://user:pw@127.0.0.1:{port}/mcp?key=k3y")
    with trio.fail_after(10), pytest.raises(SpawnFailed) as refused:
        async with transport_for(spec, context(tmp_path)).connect():
            pass
    text = str(refused.value)
    assert f"upstream 'ws': cannot connect to ws://127.0.0.1:{port}/mcp" in text
    assert "pw" not in text and "k3y" not in text and not refused.value.permanent


async def test_a_hanging_handshake_is_a_failed_attempt(tmp_path: Path) -> None:
    """A server that takes the TCP connection but never answers the handshake fails the attempt
    within the upstream's request timeout."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    try:
        with trio.fail_after(10), pytest.raises(SpawnFailed) as refused:
            async with transport_for(ws_spec(port, request_timeout_ms=300), context(tmp_path)).connect():
                pass
        assert "did not complete the WebSocket handshake within 0.3 s" in str(refused.value)
        assert not refused.value.permanent
    finally:
        for listener in listeners:
            await listener.aclose()


async def test_messages_are_text_frames_and_the_stream_ends_with_the_close(tmp_path: Path) -> None:
    """A sent message is one text frame (answered by the server), the peer is the URL, and a
    server that goes away ends the stream with why."""
    with trio.fail_after(20):
        async with ws_server() as (proc, port):
            transport: UpstreamTransport = WebSocketTransport(ws_spec(port), context(tmp_path))
            async with transport.connect() as stream:
                assert (stream.pid, stream.peer, stream.stderr_tail()) == (
                    None, f"ws://127.0.0.1:{port}/mcp", "")
                await stream.send(jsonrpc.encode({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
                assert await receive_json(stream) == {"jsonrpc": "2.0", "id": 1, "result": {}}
                proc.kill()
                assert await stream.receive() is None
                await stream.wait_ended()
                assert (await stream.wait_closed()).startswith("closed the connection (code 1006")
                with pytest.raises(UpstreamError):
                    for _ in range(3):  # the writer learns of the close on its next frame at the latest
                        await stream.send(jsonrpc.encode({"jsonrpc": "2.0", "method": "x"}))
                        await trio.sleep(0.05)


async def test_a_silent_peer_is_noticed_by_the_keepalive(tmp_path: Path) -> None:
    """A server that stops answering (frozen: the socket stays open) ends the stream once a ping
    goes unanswered, within the keep-alive's interval plus timeout."""
    keepalive = Keepalive(interval_s=0.2, timeout_s=0.3)
    with trio.fail_after(20):
        async with ws_server() as (proc, port), \
                WebSocketTransport(ws_spec(port), context(tmp_path), keepalive=keepalive).connect() as stream:
            await trio.sleep(0.7)  # several pings, answered: still up
            await stream.send(jsonrpc.encode({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
            assert await receive_json(stream) == {"jsonrpc": "2.0", "id": 1, "result": {}}
            os.kill(proc.pid, signal.SIGSTOP)
            try:
                stopped = trio.current_time()
                assert await stream.receive() is None
                assert trio.current_time() - stopped < 0.2 + 0.3 + 0.5
                await stream.wait_ended()
                assert await stream.wait_closed() == "did not answer a ping within 0.3 s"
            finally:
                os.kill(proc.pid, signal.SIGCONT)


async def test_a_binary_frame_is_skipped_and_a_big_text_frame_is_the_marker(tmp_path: Path) -> None:
    """A binary frame is not a message (skipped); a text frame over the message cap is the
    framing's marker naming its request, and the connection stays up for the next one."""
    ctx = Context(tmp_path, {}, Limits(max_message_bytes=1000), Identity("t", "0"), lambda: None)
    with trio.fail_after(20):
        async with ws_server() as (_, port), WebSocketTransport(ws_spec(port), ctx).connect() as stream:
            await stream.send(jsonrpc.encode({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                                              "params": {"name": "big", "arguments": {"size": 2000}}}))
            first = await stream.receive()
            assert isinstance(first, Oversize) and first.sniff_id() == 7 and first.size_at_least > 2000
            await stream.send(jsonrpc.encode({"jsonrpc": "2.0", "id": 8, "method": "tools/call",
                                              "params": {"name": "big", "arguments": {"size": 10}}}))
            second = await receive_json(stream)
            assert second["id"] == 8 and second["result"]["content"][0]["text"] == "x" * 10


async def test_gateway_lists_and_calls_a_websocket_upstream(home: Path) -> None:
    """A gateway with a websocket upstream in expose.json lists `ws_echo` and calls it; the
    header's secret is in none of its log lines."""
    with trio.fail_after(60):
        async with ws_server() as (_, port):
            set_upstreams(home, {"id": "ws", "transport": "websocket", "url": f"ws://127.0.0.1:{port}/mcp",
                                 "headers": {"Authorization": "Bearer ${WS_TOKEN}"}})
            async with gateway(home, {"WS_TOKEN": SECRET}) as wire:
                await wire.initialize()
                listed = await wire.request(2, "tools/call", {"name": "toolfunnel_list_tools",
                                                              "arguments": {"category": "mcp:ws"}})
                briefs = json.loads(listed["result"]["content"][0]["text"])
                assert [b["id"] for b in briefs] == ["ws_echo", "ws_hang", "ws_big"]
                ran = await wire.request(3, "tools/call", {
                    "name": "toolfunnel_run_tool", "arguments": {"name": "ws_echo", "args": {"text": "hey"}}})
                assert ran["result"]["content"] == [{"type": "text", "text": "hey"}]
                assert SECRET.encode() not in wire.stderr


async def test_wss_verifies_the_server_certificate(tmp_path: Path) -> None:
    """TLS verification is on by default: a wss:// server with a certificate no trusted
    authority signed is refused (permanent: retrying soon cannot make it trusted)."""
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    await trio.run_process(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                            "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
                            "-addext", "subjectAltName=IP:127.0.0.1"],
                           capture_stdout=True, capture_stderr=True)
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert, key)

    async def accept(request: WebSocketRequest) -> None:
        await request.accept(subprotocol="mcp")

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            port = (await nursery.start(serve_websocket, accept, "127.0.0.1", 0, tls)).port
            spec = ws_spec(port, url=f"wss://127.0.0.1:{port}/mcp")
            with pytest.raises(SpawnFailed) as refused:
                async with transport_for(spec, context(tmp_path)).connect():
                    pass
            nursery.cancel_scope.cancel()
    assert f"wss://127.0.0.1:{port}/mcp: TLS certificate not trusted" in str(refused.value)
    assert refused.value.permanent
