"""The modern-era upstream client: era negotiation against real processes (mcp-server-time, the
mock, an SDK elicitation fixture), the remembered era, MRTR passthrough, legacy server→client
requests routed to a call's handler (SPEC §6.1, §6.2; PROTOCOL.md §3)."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from tests.upstreams import MOCK, call_tool
from tfunnel.config.expose import ExposeConfig, RestartPolicy, UpstreamSpec
from tfunnel.config.model import Limits
from tfunnel.errors import ProtocolError, UpstreamError
from tfunnel.protocol.eras import Era
from tfunnel.protocol.jsonrpc import Notification
from tfunnel.protocol.modern import CLIENT_CAPABILITIES_META, LOG_LEVEL_META, request_meta
from tfunnel.upstream.client import initialize_params
from tfunnel.upstream.session import UpstreamSession
from tfunnel.upstream.stdio import NdjsonStream
from tfunnel.upstream.supervisor import Context, Identity, State, Supervisor, Upstream

pytestmark = pytest.mark.timeout(60)

BIN = Path(sys.prefix) / "bin"
TIME_SERVER = BIN / "mcp-server-time"
ELICIT_SERVER = Path(__file__).resolve().parent / "fixtures" / "elicit_server.py"
FAST = RestartPolicy(initial_backoff_s=0.2, max_backoff_s=0.5)
IDENTITY = {"name": "tfunnel-test", "version": "0"}
ACCEPT = {"action": "accept", "content": {"ok": True}}


def time_spec(**fields: Any) -> UpstreamSpec:
    return UpstreamSpec(id="time", command=str(TIME_SERVER), args=("--local-timezone", "UTC"), **fields)


def mock_spec(*args: str, **fields: Any) -> UpstreamSpec:
    return UpstreamSpec(id="mock", command=MOCK[0], args=(*MOCK[1:], *args), restart=FAST, **fields)


def elicit_spec(*args: str, **fields: Any) -> UpstreamSpec:
    # The fixture script lives outside the home: the isolation guard must be told.
    return UpstreamSpec(id="elicit", command=sys.executable, args=(str(ELICIT_SERVER), *args),
                        allow_outside_paths=True, **fields)


@asynccontextmanager
async def supervised(home: Path, *specs: UpstreamSpec, on_change: Callable[[], None] = lambda: None,
                     ) -> AsyncIterator[Supervisor]:
    """A real supervisor over `specs`, started (each upstream connected or failed once)."""
    ctx = Context(home, dict(os.environ), Limits(), Identity(IDENTITY["name"], IDENTITY["version"]),
                  on_change)
    supervisor = Supervisor(ctx, startup_deadline_s=30)
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.run, ExposeConfig(upstreams=specs))
        yield supervisor
        nursery.cancel_scope.cancel()


def methods(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def tool_names(upstream: Upstream) -> list[str]:
    return [t["name"] for t in upstream.tools]


def text(result: dict[str, Any]) -> str:
    return str(result["content"][0]["text"])


async def wait_until(check: Callable[[], bool], timeout: float = 20.0) -> None:
    with trio.fail_after(timeout):
        while not check():
            await trio.sleep(0.05)


# -- era negotiation against real processes ------------------------------------------------------


async def test_time_server_negotiates_modern(home: Path) -> None:
    """mcp-server-time (dual-era) answers the probe: modern 2026-07-28, tools listed, calls complete."""
    with trio.fail_after(40):
        async with supervised(home, time_spec()) as supervisor:
            upstream = supervisor.upstreams["time"]
            assert upstream.state is State.READY
            assert upstream.era is Era.MODERN
            stats = upstream.statistics()
            assert (stats.era, stats.protocol_version) == ("modern", "2026-07-28")
            assert tool_names(upstream) == ["get_current_time", "convert_time"]
            assert upstream.connection is not None
            assert upstream.connection.server_info.get("name") == "mcp-time"
            result = await call_tool(supervisor, "time", "get_current_time", {"timezone": "UTC"},
                                                log_level="error", meta={"trace": "t-1"})
            assert result["resultType"] == "complete"
            assert json.loads(text(result))["timezone"] == "UTC"


async def test_time_server_legacy_pin(home: Path) -> None:
    """legacyPin skips the probe: the same server speaks 2025-11-25 through initialize."""
    with trio.fail_after(40):
        async with supervised(home, time_spec(legacy_pin=True)) as supervisor:
            upstream = supervisor.upstreams["time"]
            assert upstream.state is State.READY
            stats = upstream.statistics()
            assert (upstream.era, stats.era, stats.protocol_version) == (Era.LEGACY, "legacy", "2025-11-25")
            result = await call_tool(supervisor, "time", "get_current_time", {"timezone": "UTC"},
                                                extra={"requestState": "ignored on legacy"})
            assert "resultType" not in result and json.loads(text(result))["timezone"] == "UTC"


async def test_time_server_remembers_modern_after_a_crash(home: Path) -> None:
    """Killed, the modern upstream comes back modern (its remembered era, no probe window)."""
    with trio.fail_after(50):
        async with supervised(home, time_spec(restart=FAST)) as supervisor:
            upstream = supervisor.upstreams["time"]
            first = upstream.pid
            assert first is not None and upstream.era is Era.MODERN
            os.kill(first, signal.SIGKILL)
            await wait_until(lambda: upstream.state is State.READY and upstream.pid not in (None, first))
            assert upstream.statistics().restarts == 1
            assert upstream.era is Era.MODERN and upstream.protocol_version == "2026-07-28"
            result = await call_tool(supervisor, "time", "get_current_time", {"timezone": "UTC"})
            assert result["resultType"] == "complete"


async def test_legacy_only_mock_falls_back(home: Path) -> None:
    """The mock answers server/discover with -32601: legacy initialize follows, with elicitation."""
    log = home / "methods.log"
    with trio.fail_after(40):
        async with supervised(home, mock_spec("--method-log", str(log))) as supervisor:
            upstream = supervisor.upstreams["mock"]
            assert upstream.state is State.READY
            assert (upstream.statistics().era, upstream.protocol_version) == ("legacy", "2025-11-25")
            assert methods(log)[:4] == ["server/discover", "initialize", "notifications/initialized",
                                        "tools/list"]
            result = await call_tool(supervisor, "mock", "add", {"a": 2, "b": 3})
            assert result["structuredContent"] == {"result": 5}
    assert initialize_params("n", "v")["capabilities"] == {"elicitation": {}}


async def test_modern_only_refuses_a_legacy_upstream(home: Path) -> None:
    """modernOnly against the legacy-only mock: never ready; the error names what it answered;
    an ordinary failure (retried), not a permanent stop."""
    with trio.fail_after(40):
        async with supervised(home, mock_spec(modern_only=True)) as supervisor:
            upstream = supervisor.upstreams["mock"]
            assert upstream.state is not State.READY
            assert upstream.last_error == (
                "upstream 'mock' is modernOnly, but it answered server/discover with error -32601 "
                "'Method not found: server/discover': it is not a modern (2026-07-28) server")
            assert upstream.era is None
            await wait_until(lambda: upstream.statistics().restarts >= 2)
            assert upstream.state is not State.STOPPED and upstream.stopped_reason is None
            with pytest.raises(UpstreamError, match=r"'mock' is still starting"):
                await call_tool(supervisor, "mock", "ping", {})


async def test_probe_timeout_falls_back_after_the_window(home: Path) -> None:
    """A mock silent before initialize: after the probe window (requestTimeoutMs when shorter
    than 5 s) the gateway falls back to initialize and the upstream is legacy."""
    log = home / "methods.log"
    spec = mock_spec("--silent-before-initialize", "--method-log", str(log), request_timeout_ms=1500)
    started = trio.current_time()
    with trio.fail_after(40):
        async with supervised(home, spec) as supervisor:
            elapsed = trio.current_time() - started
            upstream = supervisor.upstreams["mock"]
            assert upstream.state is State.READY and upstream.era is Era.LEGACY
            assert 1.5 <= elapsed < 10
            logged = methods(log)
            assert logged[0] == "server/discover"
            assert logged.index("initialize") > 0
            assert "notifications/cancelled" in logged[:logged.index("initialize")]  # the probe, given up


async def test_a_slow_dual_era_server_is_still_modern(home: Path) -> None:
    """A dual-era server that reads the probe only after its window: it takes the probe as a modern
    opening and refuses initialize with -32022, so the gateway discovers again and goes modern."""
    # The probe window is 5 s; the server reads only after its imports and 6 s more; initialize
    # then has the whole request timeout.
    spec = elicit_spec("--delay-start", "6", request_timeout_ms=20000)
    with trio.fail_after(40):
        async with supervised(home, spec) as supervisor:
            upstream = supervisor.upstreams["elicit"]
            assert upstream.state is State.READY and upstream.era is Era.MODERN, upstream.last_error
            assert upstream.statistics().restarts == 0
            added = await call_tool(supervisor, "elicit", "add", {"a": 1, "b": 2})
            assert added["resultType"] == "complete" and added["structuredContent"] == {"result": 3}


async def test_era_is_remembered_after_a_crash_restart(home: Path) -> None:
    """After a crash, the next incarnation uses the remembered era: no second server/discover."""
    log = home / "methods.log"
    with trio.fail_after(40):
        async with supervised(home, mock_spec("--method-log", str(log))) as supervisor:
            upstream = supervisor.upstreams["mock"]
            first = upstream.pid
            with pytest.raises(UpstreamError, match="exited with status 3"):
                await call_tool(supervisor, "mock", "crash", {})
            await wait_until(lambda: upstream.state is State.READY and upstream.pid not in (None, first))
            assert upstream.era is Era.LEGACY
            logged = methods(log)
            assert logged.count("server/discover") == 1
            assert logged.count("initialize") == 2
            assert logged[logged.index("tools/call"):] == [
                "tools/call", "initialize", "notifications/initialized", "tools/list"]


# -- MRTR (modern) and server→client requests (legacy) with the SDK fixture ----------------------


async def test_modern_elicitation_is_input_required_then_completes(home: Path) -> None:
    """Modern: `confirm` answers input_required (raw, unchanged); the retry with inputResponses and
    the echoed requestState completes."""
    with trio.fail_after(40):
        async with supervised(home, elicit_spec()) as supervisor:
            upstream = supervisor.upstreams["elicit"]
            assert upstream.era is Era.MODERN and tool_names(upstream) == ["add", "grow", "confirm"]
            added = await call_tool(supervisor, "elicit", "add", {"a": 2, "b": 3})
            assert added["structuredContent"] == {"result": 5} and added["resultType"] == "complete"
            caps: dict[str, Any] = {"elicitation": {"form": {}}}
            asked = await call_tool(supervisor, "elicit", "confirm", {"item": "x"}, client_capabilities=caps)
            assert asked["resultType"] == "input_required"
            [(key, question)] = asked["inputRequests"].items()
            assert question["method"] == "elicitation/create"
            assert question["params"]["message"] == "Confirm x?"
            state = asked["requestState"]
            done = await call_tool(supervisor,
                "elicit", "confirm", {"item": "x"}, client_capabilities=caps,
                extra={"inputResponses": {key: ACCEPT}, "requestState": state})
            assert done["resultType"] == "complete" and text(done) == "confirmed x"
            # Without the capability declared, the modern server refuses (-32021): raw error, named.
            with pytest.raises(UpstreamError, match="elicitation capability"):
                await call_tool(supervisor, "elicit", "confirm", {"item": "y"})


async def test_modern_list_changed_arrives_on_the_listen_stream(home: Path) -> None:
    """A modern upstream advertising tools.listChanged gets a subscriptions/listen; its tagged
    tools/list_changed re-lists the tools and reports the change."""
    changes: list[float] = []
    with trio.fail_after(40):
        async with supervised(home, elicit_spec(), on_change=lambda: changes.append(0)) as supervisor:
            upstream = supervisor.upstreams["elicit"]
            assert upstream.connection is not None and upstream.connection.lists_changes()
            before = len(changes)
            assert text(await call_tool(supervisor, "elicit", "grow", {})) == "grown"
            await wait_until(lambda: "extra" in tool_names(upstream))
            assert len(changes) > before
            assert text(await call_tool(supervisor, "elicit", "extra", {})) == "extra"


async def test_legacy_elicitation_goes_to_the_calls_handler(home: Path) -> None:
    """legacyPin: the server's elicitation/create reaches the call's on_request; without a
    handler the gateway declines."""
    asked: list[tuple[str, dict[str, Any]]] = []

    async def accept(method: str, params: dict[str, Any]) -> dict[str, Any]:
        asked.append((method, params))
        return ACCEPT

    with trio.fail_after(40):
        async with supervised(home, elicit_spec(legacy_pin=True)) as supervisor:
            assert supervisor.upstreams["elicit"].era is Era.LEGACY
            done = await call_tool(supervisor, "elicit", "confirm", {"item": "x"}, on_request=accept)
            assert text(done) == "confirmed x"
            [(method, params)] = asked
            assert method == "elicitation/create" and params["message"] == "Confirm x?"
            declined = await call_tool(supervisor, "elicit", "confirm", {"item": "y"})
            assert text(declined) == "declined y"


async def test_mock_elicit_tool_and_handler_errors(home: Path) -> None:
    """The mock's elicit tool sees the handler's answer, the default decline, a ProtocolError as
    that error, and any other exception as -32603."""
    async def accept(method: str, params: dict[str, Any]) -> dict[str, Any]:
        assert method == "elicitation/create" and params["message"] == "Go?"
        return ACCEPT

    async def refuse(method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise ProtocolError(-32042, "needs a URL", {"why": "test"})

    async def broken(method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError("handler bug")

    with trio.fail_after(40):
        async with supervised(home, mock_spec()) as supervisor:
            def call(handler: Any) -> Any:
                return call_tool(supervisor, "mock", "elicit", {"message": "Go?"}, on_request=handler)

            assert json.loads(text(await call(accept))) == ACCEPT
            assert json.loads(text(await call(None))) == {"action": "decline", "content": None}
            refused = await call(refuse)
            assert refused["isError"] and json.loads(text(refused).split(": ", 1)[1]) == {
                "code": -32042, "message": "needs a URL", "data": {"why": "test"}}
            failed = await call(broken)
            assert failed["isError"] and json.loads(text(failed).split(": ", 1)[1]) == {
                "code": -32603, "message": "Internal error"}


async def test_the_most_recent_call_with_a_handler_answers(home: Path) -> None:
    """stdio carries no association: with two calls in flight, the newer one's handler answers."""
    seen: list[str] = []

    def handler(name: str) -> Any:
        async def answer(method: str, params: dict[str, Any]) -> dict[str, Any]:
            seen.append(name)
            return ACCEPT
        return answer

    with trio.fail_after(40):
        async with supervised(home, mock_spec()) as supervisor:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(lambda: call_tool(supervisor, "mock", "slow", {"seconds": 0.5},
                                                                on_request=handler("older")))
                await trio.sleep(0.1)
                result = await call_tool(supervisor, "mock", "elicit", {}, on_request=handler("newer"))
            assert seen == ["newer"] and json.loads(text(result)) == ACCEPT


# -- the session over memory streams: meta, defaults, abandoned handlers -------------------------


class FakeUpstream:
    """The far end of an `UpstreamSession` on memory streams: one JSON line at a time."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.buffer = b""

    async def recv(self) -> dict[str, Any]:
        while b"\n" not in self.buffer:
            self.buffer += await self.stream.receive_some(65536)
        line, self.buffer = self.buffer.split(b"\n", 1)
        message: dict[str, Any] = json.loads(line)
        return message

    async def send(self, message: dict[str, Any]) -> None:
        await self.stream.send_all(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")


@asynccontextmanager
async def session_pair(notes: list[Notification] | None = None,
                       ) -> AsyncIterator[tuple[UpstreamSession, FakeUpstream]]:
    ours, theirs = trio.testing.memory_stream_pair()
    session = UpstreamSession("u", NdjsonStream(ours, ours, max_line_bytes=1 << 20, upstream_id="u"),
                              on_notification=(notes if notes is not None else []).append)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(session.run)
        yield session, FakeUpstream(theirs)
        nursery.cancel_scope.cancel()


async def test_modern_requests_carry_our_meta_over_the_callers() -> None:
    """Every modern request carries the envelope; caller keys stay, protocol keys are ours."""
    with trio.fail_after(10):
        async with session_pair() as (session, upstream), trio.open_nursery() as nursery:
            session.modern_version, session.client_info = "2026-07-28", dict(IDENTITY)
            results: list[dict[str, Any]] = []

            async def call() -> None:
                results.append(await session.request(
                    "tools/call", {"name": "t", "_meta": {"trace": "x", CLIENT_CAPABILITIES_META: {"a": {}}}},
                    timeout_s=5, payload=True, capabilities={"elicitation": {}}, log_level="info"))

            nursery.start_soon(call)
            sent = await upstream.recv()
            meta = sent["params"]["_meta"]
            assert meta == {"trace": "x", "progressToken": f"tf-progress-{sent['id']}",
                            **request_meta("2026-07-28", IDENTITY, {"elicitation": {}}, log_level="info")}
            assert meta[LOG_LEVEL_META] == "info"
            await upstream.send({"id": sent["id"], "result": {"resultType": "input_required",
                                                              "requestState": "s"}})
        assert results == [{"resultType": "input_required", "requestState": "s"}]


async def test_server_requests_without_a_handler_get_defaults() -> None:
    """No call with a handler: ping {}, elicitation declined, roots empty, sampling -32601."""
    with trio.fail_after(10):
        async with session_pair() as (_session, upstream):
            answers = {}
            for n, method in enumerate(["ping", "elicitation/create", "roots/list", "sampling/createMessage",
                                        "something/else"]):
                await upstream.send({"id": f"s{n}", "method": method, "params": {}})
                answers[method] = await upstream.recv()
            assert answers["ping"]["result"] == {}
            assert answers["elicitation/create"]["result"] == {"action": "decline"}
            assert answers["roots/list"]["result"] == {"roots": []}
            assert answers["sampling/createMessage"]["error"]["code"] == -32601
            assert answers["something/else"]["error"]["code"] == -32601


async def test_a_handler_outlived_by_its_call_is_cancelled_and_answered() -> None:
    """The call ends first (cancelled): its handler is cancelled and the upstream gets an error."""
    cancelled = trio.Event()

    async def forever(method: str, params: dict[str, Any]) -> dict[str, Any]:
        try:
            await trio.sleep_forever()
        finally:
            cancelled.set()
        raise AssertionError("unreachable")

    with trio.fail_after(10):
        async with session_pair() as (session, upstream), trio.open_nursery() as nursery:
            scope = trio.CancelScope()

            async def call() -> None:
                with scope:
                    await session.request("tools/call", {"name": "t"}, timeout_s=5, payload=True,
                                          on_request=forever)

            nursery.start_soon(call)
            sent = await upstream.recv()
            await upstream.send({"id": "q1", "method": "sampling/createMessage", "params": {}})
            await trio.testing.wait_all_tasks_blocked()
            scope.cancel()
            first, second = await upstream.recv(), await upstream.recv()
            by_kind = {("error" in m and "id" in m and m["id"] == "q1"): m for m in (first, second)}
            assert by_kind[False]["method"] == "notifications/cancelled"
            assert by_kind[False]["params"]["requestId"] == sent["id"]
            assert by_kind[True]["error"]["code"] == -32603
            assert "the call it belonged to has ended" in by_kind[True]["error"]["message"]
            assert cancelled.is_set()


async def test_a_slow_answer_from_the_client_does_not_time_the_call_out(home: Path) -> None:
    """While the client is being asked (a person answering), the payload window waits on; the
    upstream gets a fresh window after the answer."""
    async def slow_accept(method: str, params: dict[str, Any]) -> dict[str, Any]:
        await trio.sleep(2.0)  # four payload windows
        return ACCEPT

    with trio.fail_after(40):
        async with supervised(home, mock_spec(timeout_ms=500)) as supervisor:
            result = await call_tool(supervisor, "mock", "elicit", {"message": "Go?"}, on_request=slow_accept)
            assert not result.get("isError"), result
            assert json.loads(text(result)) == ACCEPT
