"""The connection core (`serve.connection`) in memory, under MockClock: duplicate ids, cancels,
server→client requests, list_changed fan-out, the log context, the error boundary and the
in-flight cap; each over a scripted router, so every outcome is the connection's own."""

from __future__ import annotations

import json
from typing import Any

import pytest
import structlog
import trio
import trio.testing

from tfunnel.errors import ProtocolError
from tfunnel.observe.observer import NullObserver
from tfunnel.protocol import jsonrpc
from tfunnel.protocol.eras import Era
from tfunnel.protocol.jsonrpc import Notification, Request, Response
from tfunnel.protocol.modern import UNSUPPORTED_PROTOCOL_VERSION
from tfunnel.protocol.session import ClientSession
from tfunnel.route import Peer
from tfunnel.route.eras import Refusal
from tfunnel.serve.connection import DUPLICATE_ID, MAX_NOTICES, Connection, Service
from tfunnel.surface.changes import DEBOUNCE_S, Changes

# Every test runs under MockClock (virtual time, exact), but the one through the gateway's own
# router: that one may start hook processes, whose waits a jumping clock would time out.
pytestmark = pytest.mark.timeout(30)

log = structlog.get_logger("tests.connection")
LIST_CHANGED = jsonrpc.notification_message("notifications/tools/list_changed")


class Replies:
    """A reply channel that keeps what the connection sends toward the client."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    def send_nowait(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    def answers(self) -> list[dict[str, Any]]:
        """The messages that answer a request (results and errors)."""
        return [m for m in self.sent if "result" in m or "error" in m]


class ScriptedRouter:
    """Answers by method name, so a test picks the handler's behaviour with the request."""

    def __init__(self) -> None:
        self.notes: list[str] = []
        self.handled: list[tuple[str, Era]] = []
        self.ended: list[str] = []

    async def handle(self, session: ClientSession, request: Request, peer: Peer | None = None, *,
                     era: Era) -> dict[str, Any]:
        log.info("handling")  # carries the connection's log context
        self.handled.append((request.method, era))
        params = request.params
        if request.method == "sleep":
            await trio.sleep(params["s"])
            return {"slept": params["s"]}
        if request.method == "finish":  # an answer that completes even when cancelled meanwhile
            with trio.CancelScope(shield=True):
                await trio.sleep(1)
            return {"finished": True}
        if request.method == "boom":
            raise RuntimeError("secret internal detail")
        if request.method == "refuse":
            raise ProtocolError(jsonrpc.INVALID_PARAMS, "Invalid params: no", {"field": "x"})
        if request.method in ("ask", "ask-briefly"):
            assert peer is not None
            with trio.move_on_after(5 if request.method == "ask-briefly" else float("inf")):
                return await peer.request("elicitation/create", {"message": "go?"})
            return {"gaveUp": True}
        return {"echo": params}

    def notify(self, session: ClientSession, note: Notification) -> None:
        self.notes.append(note.method)
        if note.method == "notifications/initialized":
            session.initialized = True

    async def end_session(self, session: ClientSession) -> None:
        self.ended.append(session.id)


class Counted(NullObserver):
    """An observer that keeps each request it is told of."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, bool]] = []

    def request(self, method: str, seconds: float, *, error: bool) -> None:
        self.requests.append((method, error))


def connect(router: ScriptedRouter | None = None, *, max_inflight: int | None = None,
            serve_legacy: bool = True, changes: Changes | None = None, observer: Counted | None = None,
            ) -> tuple[Connection, Replies, ScriptedRouter]:
    router = router or ScriptedRouter()
    replies = Replies()
    service = Service(router, changes or Changes(), lambda: serve_legacy, observer or Counted())
    connection = Connection(service, ClientSession(id="s1"), ending=trio.Event(), reply=replies,
                            max_inflight=max_inflight)
    return connection, replies, router


def cancel(request_id: Any) -> Notification:
    return Notification("notifications/cancelled", {"requestId": request_id, "reason": "test"})


@pytest.mark.trio_clock
async def test_a_duplicate_id_is_refused_while_the_first_runs() -> None:
    """A request whose id is in flight is refused at once (-32600); the first still answers, and
    once it has, the id is free again."""
    connection, replies, _ = connect()
    with trio.fail_after(60):
        async with trio.open_nursery() as requests:
            await connection.receive(Request(1, "sleep", {"s": 10}), requests)
            await connection.receive(Request(1, "echo", {}), requests)
            assert replies.sent == [jsonrpc.error_message(1, jsonrpc.INVALID_REQUEST, DUPLICATE_ID)]
        assert replies.sent[1] == jsonrpc.result_message(1, {"slept": 10})
        assert trio.current_time() == 10
        async with trio.open_nursery() as requests:
            await connection.receive(Request(1, "echo", {"again": True}), requests)
        assert replies.sent[2] == jsonrpc.result_message(1, {"echo": {"again": True}})


@pytest.mark.trio_clock
async def test_a_cancel_of_an_unknown_id_is_ignored() -> None:
    """`notifications/cancelled` for an id not in flight (never sent, or of another type) changes
    nothing: no reply, no router notification, and the running call still answers."""
    connection, replies, router = connect()
    with trio.fail_after(60):
        async with trio.open_nursery() as requests:
            await connection.receive(Request(1, "sleep", {"s": 10}), requests)
            for unknown in (2, "1", None, 1.5):
                await connection.receive(cancel(unknown), requests)
            await trio.testing.wait_all_tasks_blocked()
            assert replies.sent == [] and router.notes == []
        assert replies.sent == [jsonrpc.result_message(1, {"slept": 10})]


@pytest.mark.trio_clock
async def test_a_cancel_racing_the_answer_sends_nothing_for_the_call() -> None:
    """A call cancelled while its answer is being made (the handler finishes anyway) sends no
    reply; a plain cancelled call sends none either, and both leave the in-flight table."""
    connection, replies, _ = connect()
    with trio.fail_after(60):
        async with trio.open_nursery() as requests:
            await connection.receive(Request(1, "finish", {}), requests)
            await connection.receive(Request(2, "sleep", {"s": 10}), requests)
            await connection.receive(Request(3, "echo", {}), requests)
            await trio.sleep(0.5)
            await connection.receive(cancel(1), requests)
            await connection.receive(cancel(2), requests)
        assert replies.sent == [jsonrpc.result_message(3, {"echo": {}})]
        assert connection.inflight == {} and trio.current_time() == 1


@pytest.mark.trio_clock
async def test_an_outbound_request_is_answered() -> None:
    """A handler's question goes to the client with our own id; the client's answer (a response
    message) resolves it, and the handler's result is the answer."""
    connection, replies, _ = connect()
    with trio.fail_after(60):
        async with trio.open_nursery() as requests:
            await connection.receive(Request(1, "ask", {}), requests)
            await trio.testing.wait_all_tasks_blocked()
            assert replies.sent == [jsonrpc.request_message("tfunnel-1", "elicitation/create",
                                                            {"message": "go?"})]
            await connection.receive(Response("tfunnel-9", {"action": "decline"}), requests)  # not ours
            await connection.receive(Response("tfunnel-1", {"action": "accept"}), requests)
        assert replies.sent[1:] == [jsonrpc.result_message(1, {"action": "accept"})]


@pytest.mark.trio_clock
async def test_an_outbound_request_the_caller_gives_up_on_tells_the_client() -> None:
    """A question whose caller times out, or whose call the client cancels, is withdrawn with
    `notifications/cancelled` naming our request id; a late answer to it is ignored."""
    connection, replies, _ = connect()
    withdrawn = [jsonrpc.notification_message(
        "notifications/cancelled", {"requestId": rid, "reason": "the call was cancelled"})
        for rid in ("tfunnel-1", "tfunnel-2")]
    with trio.fail_after(60):
        async with trio.open_nursery() as requests:
            await connection.receive(Request(1, "ask-briefly", {}), requests)
            await trio.sleep(6)
            assert replies.sent[1:] == [withdrawn[0], jsonrpc.result_message(1, {"gaveUp": True})]
            await connection.receive(Request(2, "ask", {}), requests)
            await trio.testing.wait_all_tasks_blocked()
            await connection.receive(cancel(2), requests)
            await trio.testing.wait_all_tasks_blocked()
            await connection.receive(Response("tfunnel-2", {"action": "accept"}), requests)
        assert replies.sent[3:] == [jsonrpc.request_message("tfunnel-2", "elicitation/create",
                                                            {"message": "go?"}), withdrawn[1]]
        assert trio.current_time() == 6


@pytest.mark.trio_clock
async def test_list_changed_reaches_a_connection_once_initialize_is_answered() -> None:
    """A burst of surface changes reaches a connection whose `initialize` we answered as one
    list_changed, whether or not it sent `notifications/initialized` (the spec holds back only a
    server's requests until then; this once waited for it), a connection that sent
    `initialized` without an answered `initialize` not at all, nor one whose `initialize` was
    refused; the next burst is told again."""
    changes = Changes()
    ready, ready_replies, _ = connect(changes=changes)
    answered, answered_replies, _ = connect(changes=changes)
    fresh, fresh_replies, _ = connect(changes=changes)
    refused, refused_replies, _ = connect(changes=changes, serve_legacy=False)
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            for connection, replies in ((ready, ready_replies), (answered, answered_replies),
                                        (fresh, fresh_replies), (refused, refused_replies)):
                nursery.start_soon(connection.list_changed, replies.send)
            await ready.receive(Request(1, "initialize", {}), nursery)
            await answered.receive(Request(1, "initialize", {}), nursery)
            await refused.receive(Request(1, "initialize", {}), nursery)
            await ready.receive(Notification("notifications/initialized"), nursery)
            await fresh.receive(Notification("notifications/initialized"), nursery)
            await trio.testing.wait_all_tasks_blocked()
            assert "error" in refused_replies.sent[0]
            for _ in range(3):
                changes.bump()
                await trio.sleep(0.01)
            await trio.sleep(1)
            assert ready_replies.sent[1:] == [LIST_CHANGED] == answered_replies.sent[1:]
            assert fresh_replies.sent == [] and refused_replies.sent[1:] == []
            changes.bump()
            await trio.sleep(1)
            assert ready_replies.sent[1:] == [LIST_CHANGED] * 2 == answered_replies.sent[1:]
            assert fresh_replies.sent == [] and refused_replies.sent[1:] == []
            nursery.cancel_scope.cancel()


@pytest.mark.trio_clock
async def test_a_notification_stream_hears_of_changes_and_keeps_alive() -> None:
    """A GET stream's loop (its initialize answered, initialized or not) tells every burst and,
    between them, a keep-alive after each idle interval."""
    changes = Changes()
    connection, replies, _ = connect(changes=changes)
    idle: list[float] = []

    async def keep_alive() -> None:
        idle.append(trio.current_time())

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            connection.initialize_answered = True  # as on a GET stream, which needs a session
            nursery.start_soon(lambda: connection.list_changed(
                replies.send, idle_s=15, on_idle=keep_alive))
            await trio.sleep(20)
            changes.bump()
            await trio.sleep(1)
            assert replies.sent == [LIST_CHANGED] and idle == [15]
            await trio.sleep(15)
            assert idle == [15, pytest.approx(20 + DEBOUNCE_S + 15)]  # counted from the last message
            nursery.cancel_scope.cancel()


@pytest.mark.trio_clock
async def test_pushed_notices_go_out_in_order_with_the_lists_that_changed_and_overflow_drops() -> None:
    """Notices pushed for the client (log messages, resource updates) reach its stream in order,
    a change of several lists is one notification per list, and a client that reads nothing loses
    what is beyond the queue (never blocking the pusher)."""
    changes = Changes()
    connection, replies, _ = connect(changes=changes)
    note = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info"}}
    with trio.fail_after(60):
        for _ in range(MAX_NOTICES + 5):  # nobody delivers yet: the queue fills, the rest drop
            connection.push_notice(note)
        async with trio.open_nursery() as nursery:
            connection.initialize_answered = True
            nursery.start_soon(lambda: connection.list_changed(replies.send))
            await trio.sleep(1)
            assert replies.sent == [note] * MAX_NOTICES
            changes.bump("prompts", "resources")
            connection.push_notice(note)
            await trio.sleep(1)
            assert [m["method"] for m in replies.sent[MAX_NOTICES:]] == [
                "notifications/message", "notifications/prompts/list_changed",
                "notifications/resources/list_changed"]
            nursery.cancel_scope.cancel()


@pytest.mark.trio_clock
async def test_a_failure_becomes_a_json_rpc_error_at_one_boundary() -> None:
    """An unexpected exception is answered -32603 "Internal error" without its text (and logged);
    a ProtocolError keeps its code, message and data; each request is counted once."""
    observer = Counted()
    connection, replies, _ = connect(observer=observer)
    with trio.fail_after(60), structlog.testing.capture_logs() as logs:
        async with trio.open_nursery() as requests:
            for request_id, method in enumerate(("boom", "refuse", "echo")):
                await connection.receive(Request(request_id, method, {}), requests)
    by_id = {m["id"]: m for m in replies.sent}
    assert by_id[0] == jsonrpc.error_message(0, jsonrpc.INTERNAL_ERROR, "Internal error")
    assert "secret" not in json.dumps(replies.sent)
    assert by_id[1] == jsonrpc.error_message(1, jsonrpc.INVALID_PARAMS, "Invalid params: no", {"field": "x"})
    assert by_id[2] == jsonrpc.result_message(2, {"echo": {}})
    assert [e["event"] for e in logs if e["log_level"] == "error"] == ["request failed"]
    assert sorted(observer.requests) == [("boom", True), ("echo", False), ("refuse", True)]


@pytest.mark.trio_clock
async def test_the_inflight_cap_refuses_one_more_until_one_finishes() -> None:
    """At `max_inflight` calls in flight one more is refused at once (-32603, server busy); once
    a call has finished, a new one is taken."""
    connection, replies, _ = connect(max_inflight=2)
    with trio.fail_after(60):
        async with trio.open_nursery() as requests:
            await connection.receive(Request(1, "sleep", {"s": 5}), requests)
            await connection.receive(Request(2, "sleep", {"s": 10}), requests)
            await connection.receive(Request(3, "echo", {}), requests)
            assert replies.sent == [jsonrpc.error_message(
                3, jsonrpc.INTERNAL_ERROR, "Server busy: 2 requests are already in flight; retry later")]
            await trio.sleep(6)
            await connection.receive(Request(4, "echo", {}), requests)
        assert replies.answers()[1:] == [jsonrpc.result_message(1, {"slept": 5}),
                                         jsonrpc.result_message(4, {"echo": {}}),
                                         jsonrpc.result_message(2, {"slept": 10})]


@pytest.mark.trio_clock
async def test_the_era_is_chosen_per_request_and_a_refusal_is_answered_as_its_error() -> None:
    """The connection picks each request's era (a modern `_meta` is modern, the rest legacy); at a
    modern-only gateway a legacy initialize is refused with the versions served, never routed."""
    modern = {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}
    connection, replies, router = connect()
    legacy_only, refused, refused_router = connect(serve_legacy=False)
    with trio.fail_after(60):
        async with trio.open_nursery() as requests:
            await connection.receive(Request(1, "echo", {}), requests)
            await connection.receive(Request(2, "echo", modern), requests)
            await legacy_only.receive(Request(3, "initialize", {"protocolVersion": "2025-06-18"}), requests)
            await legacy_only.receive(Request(4, "echo", {}), requests)
    assert sorted(router.handled, key=str) == [("echo", Era.LEGACY), ("echo", Era.MODERN)]
    assert {m["id"] for m in replies.sent} == {1, 2}
    assert refused_router.handled == [("echo", Era.MODERN)]
    error = next(m for m in refused.sent if m["id"] == 3)["error"]
    assert error["code"] == UNSUPPORTED_PROTOCOL_VERSION
    assert error["data"] == {"supported": ["2026-07-28"], "requested": "2025-06-18"}


@pytest.mark.parametrize("message", [Response(1, {}), None])
def test_a_message_without_a_method_takes_its_era_from_the_header(message: Response | None) -> None:
    """A response, or a GET or DELETE (no message at all), is modern by a non-legacy version
    header or at a modern-only gateway, and legacy otherwise."""
    for header, serve_legacy, era in [(None, True, Era.LEGACY), ("2025-06-18", True, Era.LEGACY),
                                      ("2026-07-28", True, Era.MODERN), (None, False, Era.MODERN)]:
        service = Service(ScriptedRouter(), Changes(), lambda s=serve_legacy: s)  # type: ignore[misc]
        assert service.era(message, header) is era


@pytest.mark.trio_clock
async def test_an_http_answer_is_registered_in_flight_and_cancelled_by_its_scope() -> None:
    """`answer` (the Streamable HTTP path) holds the id in flight while it runs, returns the
    response, and returns None when its scope is cancelled (a disconnect) or a cancel names it."""
    connection, _, _ = connect()
    scope = trio.CancelScope()
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            async def disconnect_later() -> None:
                await trio.sleep(1)
                assert set(connection.inflight) == {1, 2}
                scope.cancel()
                connection.notification(cancel(2))

            nursery.start_soon(disconnect_later)
            results: dict[int, dict[str, Any] | None] = {}

            async def answer(request_id: int, cancel_scope: trio.CancelScope | None) -> None:
                results[request_id] = await connection.answer(Request(request_id, "sleep", {"s": 10}),
                                                               None, era=Era.LEGACY, scope=cancel_scope)
            nursery.start_soon(answer, 1, scope)
            nursery.start_soon(answer, 2, None)
        assert results == {1: None, 2: None} and connection.inflight == {}
        answered = await connection.answer(Request(3, "echo", {}), None)
        assert answered == jsonrpc.result_message(3, {"echo": {}})
        refusal = Refusal(-32000, "no", {})
        assert await connection.answer(Request(4, "echo", {}), None, era=refusal) == \
            jsonrpc.error_message(4, -32000, "no", {})


# --- the transports on memory: stdio on memory streams, the ASGI app in process ----------------

MODERN_ENVELOPE = {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                             "io.modelcontextprotocol/clientCapabilities": {}}}
MODERN_HEADERS = [(b"mcp-protocol-version", b"2026-07-28"), (b"mcp-method", b"echo")]


class Pipe:
    """The client's ends of a `StdioServer` on memory streams."""

    def __init__(self) -> None:
        self.to_server, self.server_in = trio.testing.memory_stream_one_way_pair()
        self.server_out, self.from_server = trio.testing.memory_stream_one_way_pair()
        self._buffer = b""

    async def send(self, message: dict[str, Any]) -> None:
        await self.to_server.send_all(json.dumps(message).encode() + b"\n")

    async def receive(self) -> dict[str, Any]:
        while b"\n" not in self._buffer:
            data = await self.from_server.receive_some(65536)
            assert data, "the server closed stdout"
            self._buffer += data
        line, self._buffer = self._buffer.split(b"\n", 1)
        result: dict[str, Any] = json.loads(line)
        return result


def stdio_server(router: Any, *, serve_legacy: bool = True) -> Any:
    from tfunnel.serve.stdio import StdioServer

    return StdioServer(router, Changes(), max_message_bytes=1 << 20, grace_s=5,
                       serve_legacy=lambda: serve_legacy)


def request(request_id: Any, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    return jsonrpc.request_message(request_id, method, params or {})


@pytest.mark.trio_clock
async def test_stdio_runs_on_memory_streams_with_duplicate_ids_cancels_and_eof() -> None:
    """StdioServer on memory streams: a duplicate id is refused on the pipe, a cancelled call
    sends nothing, a question reaches the client and its answer comes back, and end of input
    finishes in-flight calls within the grace, then ends the session."""
    router = ScriptedRouter()
    server = stdio_server(router)
    pipe = Pipe()
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server.serve, pipe.server_in, pipe.server_out)
            await pipe.send(request(1, "sleep", {"s": 3}))
            await pipe.send(request(1, "echo"))
            assert await pipe.receive() == jsonrpc.error_message(1, jsonrpc.INVALID_REQUEST, DUPLICATE_ID)
            await pipe.send(request(2, "sleep", {"s": 100}))
            await pipe.send(jsonrpc.notification_message("notifications/cancelled", {"requestId": 2}))
            await pipe.send(request(3, "ask"))
            asked = await pipe.receive()
            assert asked["method"] == "elicitation/create"
            await pipe.send({"jsonrpc": "2.0", "id": asked["id"], "result": {"action": "accept"}})
            assert await pipe.receive() == jsonrpc.result_message(3, {"action": "accept"})
            await pipe.to_server.aclose()
            assert await pipe.receive() == jsonrpc.result_message(1, {"slept": 3})
        assert trio.current_time() == 3 and router.ended == [server.session.id]


async def test_stdio_serves_a_real_router_on_memory_streams(home: Any) -> None:
    """The gateway's own router behind StdioServer on memory streams: initialize, initialized,
    the tool list, and an unknown method answered -32601; end of input ends the session."""
    from tfunnel.app import build

    gateway = build(home)
    server = stdio_server(gateway.router)
    pipe = Pipe()
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server.serve, pipe.server_in, pipe.server_out)
            await pipe.send(request(1, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                                      "clientInfo": {"name": "memory", "version": "1"}}))
            initialized = await pipe.receive()
            assert initialized["result"]["protocolVersion"] == "2025-06-18"
            await pipe.send(jsonrpc.notification_message("notifications/initialized"))
            await pipe.send(request(2, "tools/list"))
            tools = await pipe.receive()
            assert "toolfunnel_list_tools" in {t["name"] for t in tools["result"]["tools"]}
            await pipe.send(request(3, "no/such"))
            assert (await pipe.receive())["error"]["code"] == jsonrpc.METHOD_NOT_FOUND
            await pipe.to_server.aclose()
        assert server.session.initialized


class Asgi:
    """Drive the HTTP app in process: each call is one HTTP request with a JSON body."""

    def __init__(self, home: Any, router: ScriptedRouter) -> None:
        from tfunnel.app import build
        from tfunnel.observe.observer import CallTally
        from tfunnel.serve.http import HttpApp
        from tfunnel.serve.metrics import Metrics
        from tfunnel.serve.sessions import SessionStore

        gateway = build(home)
        self.app = HttpApp(router, gateway.live, gateway.supervisor, CallTally(),  # type: ignore[arg-type]
                           SessionStore(), Metrics())

    @staticmethod
    def scope(method: str, path: str, headers: list[tuple[bytes, bytes]],
              query: bytes = b"") -> dict[str, Any]:
        base = [(b"host", b"127.0.0.1:1"), (b"accept", b"application/json, text/event-stream"),
                (b"content-type", b"application/json")]
        return {"type": "http", "method": method, "path": path, "query_string": query,
                "headers": base + headers}

    @staticmethod
    def body_then_wait(body: bytes) -> Any:
        delivered = False

        async def receive() -> dict[str, Any]:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            await trio.sleep_forever()
            raise AssertionError("unreachable")
        return receive

    async def post(self, message: dict[str, Any], headers: list[tuple[bytes, bytes]] | None = None,
                   path: str = "/mcp", query: bytes = b"") -> tuple[int, dict[bytes, bytes], bytes]:
        sent: list[dict[str, Any]] = []

        async def send(event: dict[str, Any]) -> None:
            sent.append(event)

        await self.app(self.scope("POST", path, headers or [], query),
                       self.body_then_wait(json.dumps(message).encode()), send)
        return sent[0]["status"], dict(sent[0]["headers"]), b"".join(e.get("body", b"") for e in sent[1:])

    async def initialize(self) -> bytes:
        status, headers, _ = await self.post(request(0, "initialize", {"protocolVersion": "2025-06-18"}))
        assert status == 200
        return headers[b"mcp-session-id"]


async def sse_session(asgi: Asgi, nursery: trio.Nursery) -> tuple[bytes, trio.MemoryReceiveChannel[Any]]:
    """Open a 2024 SSE stream; return its session id and the stream's events."""
    events, stream = trio.open_memory_channel[dict[str, Any]](100)
    nursery.start_soon(asgi.app, asgi.scope("GET", "/sse", []), asgi.body_then_wait(b""), events.send)
    assert (await stream.receive())["status"] == 200
    endpoint = (await stream.receive())["body"]
    return endpoint.split(b"session_id=")[1].split(b"\n")[0], stream


async def sse_message(stream: trio.MemoryReceiveChannel[dict[str, Any]]) -> dict[str, Any]:
    while True:
        body = (await stream.receive())["body"]
        if body.startswith(b"event: message"):
            result: dict[str, Any] = json.loads(body.split(b"data: ", 1)[1])
            return result


@pytest.mark.trio_clock
@pytest.mark.parametrize("transport", ["stdio", "http-session", "http-modern", "sse"])
async def test_the_log_context_is_bound_for_a_request_on_every_transport(home: Any, transport: str) -> None:
    """What the router logs while it answers names the request (id, method) on every transport,
    and the session where there is one (not for a modern stateless request)."""
    router = ScriptedRouter()
    session: str | None = None
    with trio.fail_after(60), structlog.testing.capture_logs(
            processors=[structlog.contextvars.merge_contextvars]) as logs:
        if transport == "stdio":
            server, pipe = stdio_server(router), Pipe()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(server.serve, pipe.server_in, pipe.server_out)
                await pipe.send(request(7, "echo"))
                assert await pipe.receive() == jsonrpc.result_message(7, {"echo": {}})
                await pipe.to_server.aclose()
            session = server.session.id
        elif transport == "http-session":
            asgi = Asgi(home, router)
            sid = await asgi.initialize()
            status, _, body = await asgi.post(request(7, "echo"), [(b"mcp-session-id", sid)])
            assert status == 200 and json.loads(body) == jsonrpc.result_message(7, {"echo": {}})
            session = sid.decode()
        elif transport == "http-modern":
            asgi = Asgi(home, router)
            status, _, body = await asgi.post(request(7, "echo", MODERN_ENVELOPE), MODERN_HEADERS)
            assert status == 200 and json.loads(body) == jsonrpc.result_message(7, {"echo": MODERN_ENVELOPE})
        else:
            asgi = Asgi(home, router)
            async with trio.open_nursery() as nursery:
                sid, stream = await sse_session(asgi, nursery)
                status, _, _ = await asgi.post(request(7, "echo"), path="/messages",
                                               query=b"session_id=" + sid)
                assert status == 202
                assert await sse_message(stream) == jsonrpc.result_message(7, {"echo": {}})
                session = sid.decode()
                nursery.cancel_scope.cancel()
    [handling] = [e for e in logs if e["event"] == "handling" and e.get("request_id") == 7]
    assert handling["method"] == "echo" and handling.get("session") == session


@pytest.mark.trio_clock
async def test_http_refuses_a_duplicate_id_in_a_session_and_a_cancel_ends_the_call(home: Any) -> None:
    """Over Streamable HTTP the session's connection refuses an id in flight (400), and a POSTed
    cancel ends that call with no JSON-RPC response (204)."""
    router = ScriptedRouter()
    asgi = Asgi(home, router)
    sid = await asgi.initialize()
    session = [(b"mcp-session-id", sid)]
    answers: list[tuple[int, bytes]] = []

    async def slow() -> None:
        status, _, body = await asgi.post(request(1, "sleep", {"s": 100}), session)
        answers.append((status, body))

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(slow)
            await trio.testing.wait_all_tasks_blocked()
            status, _, body = await asgi.post(request(1, "echo"), session)
            assert status == 400 and json.loads(body)["error"]["message"] == DUPLICATE_ID
            status, _, _ = await asgi.post(jsonrpc.notification_message(
                "notifications/cancelled", {"requestId": 1}), session)
            assert status == 202
    assert answers == [(204, b"")] and trio.current_time() < 100


@pytest.mark.trio_clock
async def test_a_stdio_client_that_stops_reading_is_gone_after_the_stall_window() -> None:
    """On any send stream, a client that takes nothing of a waiting answer for STALL_S counts as
    gone: the server stops (its calls cancelled) instead of holding answers for it."""
    from tfunnel.proc.linewriter import STALL_S

    router = ScriptedRouter()
    server = stdio_server(router)
    to_server, server_in = trio.testing.memory_stream_one_way_pair()
    server_out, _never_read = trio.testing.lockstep_stream_pair()
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server.serve, server_in, server_out)
            await to_server.send_all(jsonrpc.encode(request(1, "echo")))
            await to_server.send_all(jsonrpc.encode(request(2, "sleep", {"s": 100})))
    assert trio.current_time() == STALL_S and server.connection.inflight == {}


async def test_every_transport_caps_the_requests_in_flight_alike() -> None:
    """The 2024 SSE transport's connections refuse requests beyond the same cap as stdio's (its
    requests run after the 202, where no HTTP request cap counts them)."""
    from tfunnel.serve.connection import MAX_INFLIGHT
    from tfunnel.serve.sessions import SessionStore
    from tfunnel.serve.sse_legacy import LegacySse

    async def end(session: ClientSession) -> None:
        return None

    service = Service(ScriptedRouter(), Changes(), lambda: True)
    sse = LegacySse(service, end, SessionStore(), trio.Event(), 1024, 1.0)
    assert sse._connect(ClientSession("s")).max_inflight == MAX_INFLIGHT
