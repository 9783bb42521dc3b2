"""The supervisor and the session on the scripted in-memory transport, under MockClock (STYLE 8, 9).

No process is started: each incarnation is a `ScriptedTransport` connection, so the real
`Upstream.run` → connect → handshake → session path runs and every virtual time asserted below is
exact. The real-process layer (`test_upstream_*.py`, `test_real_upstreams.py`) covers the stdio
transport itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from structlog.testing import capture_logs

from tests.upstreams import call_tool
from tfunnel.config.expose import ExposeConfig, RestartPolicy, UpstreamSpec
from tfunnel.config.model import Limits
from tfunnel.errors import UpstreamCrashed, UpstreamTimeout, UpstreamUnavailable
from tfunnel.testing.scripted import ECHO, Script, ScriptedTransport
from tfunnel.upstream.states import Context
from tfunnel.upstream.stdio import EXIT_READ_GRACE_S
from tfunnel.upstream.supervisor import Identity, State, Supervisor, Upstream
from tfunnel.upstream.transport import SpawnFailed, TransportFactory, UpstreamTransport

pytestmark = [pytest.mark.trio_clock, pytest.mark.timeout(30)]

CRASH_LOOP_TIMES = [0.0, 1.0, 3.0, 7.0, 15.0, 31.0]
UP = {"name": "up", "inputSchema": {"type": "object"}}
ONE = ExposeConfig(upstreams=(UpstreamSpec(id="u", command="x"),))


def context(tmp_path: Path, changes: list[float] | None = None) -> Context:
    on_change: Callable[[], None] = (lambda: changes.append(trio.current_time())) if changes is not None \
        else (lambda: None)
    return Context(tmp_path, {}, Limits(), Identity("t", "0"), on_change, jitter=lambda: 0.5)


def factory(transports: Mapping[str, ScriptedTransport]) -> TransportFactory:
    def transport_for(spec: UpstreamSpec, ctx: Context) -> UpstreamTransport:
        return transports[spec.id]
    return transport_for


def upstream(tmp_path: Path, transport: ScriptedTransport, spec: UpstreamSpec | None = None,
             changes: list[float] | None = None) -> Upstream:
    return Upstream(spec or UpstreamSpec(id="u", command="x"), context(tmp_path, changes),
                    factory({"u": transport}))


async def wait_for(predicate: Callable[[], bool]) -> None:
    while not predicate():
        await trio.sleep(0.001)


async def test_ready_lists_tools_and_calls(tmp_path: Path) -> None:
    """A scripted upstream is ready at t = 0 with its tools; a call reaches it and is answered."""
    transport = ScriptedTransport(Script(tools=(ECHO, UP)))
    changes: list[float] = []
    supervisor = Supervisor(context(tmp_path, changes), transports=factory({"u": transport}))
    with trio.fail_after(100):
        async with trio.open_nursery() as nursery:
            await nursery.start(supervisor.run, ONE)
            assert trio.current_time() == 0.0
            [stats] = supervisor.statistics()
            assert (stats.state, stats.era, stats.protocol_version, stats.tools, stats.pid) == \
                ("ready", "legacy", "2025-11-25", 2, None)
            assert [t["name"] for t in supervisor.ready_tools()["u"]] == ["echo", "up"]
            result = await call_tool(supervisor, "u", "echo", {"text": "hi"})
            assert result["content"] == [{"type": "text", "text": '{"text": "hi"}'}]
            nursery.cancel_scope.cancel()
    assert changes == [0.0, 0.0]  # its tools appeared, then went with the shutdown
    assert [m.get("method") for m in transport.servers[0].received][:4] == [
        "server/discover", "initialize", "notifications/initialized", "tools/list"]
    assert transport.closes == [0.0]


async def test_crash_after_handshake_restarts_after_exact_backoff(tmp_path: Path) -> None:
    """An upstream that exits 120 s after each start is restarted exactly 1 s after each exit;
    the old connection is always closed before the next is made."""
    transport = ScriptedTransport(Script(exit_after_s=120.0, status=1))
    up = upstream(tmp_path, transport)
    samples: list[tuple[float, str]] = []
    with trio.fail_after(10_000):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(up.run)
            for when in (60.0, 120.5, 122.0, 241.5):
                await trio.sleep_until(when)
                samples.append((when, up.state.value))
            nursery.cancel_scope.cancel()
    assert transport.connects == [0.0, 121.0]
    assert transport.closes == [120.0, 241.0]  # each incarnation exits 120 s after its start
    assert samples == [(60.0, "ready"), (120.5, "backoff"), (122.0, "ready"), (241.5, "backoff")]
    assert up.last_error == "upstream 'u' exited with status 1"
    assert transport.most_open == 1


async def test_crash_loop_reaches_the_restart_ceiling(tmp_path: Path) -> None:
    """Exiting before the handshake completes is a crash loop: attempts at 0, 1, 3, 7, 15, 31 s,
    then stopped, the reason naming the ceiling and the exit status."""
    transport = ScriptedTransport(Script(crash_on=frozenset({"initialize"}), status=7))
    up = upstream(tmp_path, transport)
    with trio.fail_after(10_000):
        await up.run()
        assert trio.current_time() == 31.0
    assert transport.connects == CRASH_LOOP_TIMES
    stats = up.statistics()
    assert (stats.state, stats.restarts) == ("stopped", 5)
    assert stats.stopped_reason is not None and "crash loop" in stats.stopped_reason
    assert "upstream 'u' exited with status 7" in stats.stopped_reason
    assert transport.most_open == 1


async def test_crash_mid_call_fails_the_caller_at_once(tmp_path: Path) -> None:
    """An upstream dying with calls in flight fails every one of them at that instant, naming
    the exit status; calls arriving after that are refused as unavailable, not hung."""
    transport = ScriptedTransport(Script(tools=(ECHO, {"name": "boom"}), crash_on=frozenset({"boom"}),
                                         delays={"echo": 50.0}, status=3))
    supervisor = Supervisor(context(tmp_path), transports=factory({"u": transport}))
    outcomes: list[tuple[str, float, str]] = []

    async def call(tool: str, start: float) -> None:
        await trio.sleep_until(start)
        try:
            await call_tool(supervisor, "u", tool, {})
        except (UpstreamCrashed, UpstreamUnavailable) as exc:
            outcomes.append((tool, trio.current_time(), f"{type(exc).__name__}: {exc}"))

    with trio.fail_after(100):
        async with trio.open_nursery() as nursery:
            await nursery.start(supervisor.run, ONE)
            async with trio.open_nursery() as calls:
                calls.start_soon(call, "echo", 1.0)
                calls.start_soon(call, "boom", 2.0)
                calls.start_soon(call, "echo", 2.5)
            nursery.cancel_scope.cancel()
    assert sorted(outcomes) == [
        ("boom", 2.0, "UpstreamCrashed: upstream 'u' exited with status 3"),
        ("echo", 2.0, "UpstreamCrashed: upstream 'u' exited with status 3"),
        ("echo", 2.5, "UpstreamUnavailable: upstream 'u' is restarting (last error: upstream 'u' exited "
                      "with status 3)"),
    ]


async def test_a_crash_fails_the_caller_even_while_the_reader_is_stuck_writing(tmp_path: Path) -> None:
    """An upstream that stopped taking input (a helper holds its full stdin pipe), asked the
    gateway something the reader answers itself (ping), then died: its call in flight fails at
    its exit plus the read grace, not at the end of its 50 s timeout."""
    transport = ScriptedTransport(Script(delays={"echo": math.inf}, status=9))
    supervisor = Supervisor(context(tmp_path), transports=factory({"u": transport}))
    outcome: list[tuple[float, str]] = []

    async def call() -> None:
        try:
            await call_tool(supervisor, "u", "echo", {})
        except UpstreamCrashed as exc:
            outcome.append((trio.current_time(), str(exc)))

    with trio.fail_after(100):
        async with trio.open_nursery() as nursery:
            await nursery.start(supervisor.run, ONE)
            server = transport.server
            assert server is not None
            async with trio.open_nursery() as calls:
                calls.start_soon(call)
                await trio.sleep(1.0)
                server.stop_reading()
                nursery.start_soon(server.request, "ping", {})  # the reader's answer cannot go out
                await trio.sleep(1.0)
                server.exit(9)
            nursery.cancel_scope.cancel()
    assert outcome == [(2.0 + EXIT_READ_GRACE_S, "upstream 'u' exited with status 9")]


async def test_a_call_that_never_answers_times_out_and_is_cancelled_upstream(tmp_path: Path) -> None:
    """A tool that never answers fails after exactly its timeout, and the upstream is told to
    cancel that request; the upstream stays ready."""
    transport = ScriptedTransport(Script(delays={"echo": math.inf}))
    spec = UpstreamSpec(id="u", command="x", timeout_ms=5000)
    supervisor = Supervisor(context(tmp_path), transports=factory({"u": transport}))
    with trio.fail_after(100):
        async with trio.open_nursery() as nursery:
            await nursery.start(supervisor.run, ExposeConfig(upstreams=(spec,)))
            await trio.sleep(1.0)
            with pytest.raises(UpstreamTimeout, match="did not answer tools/call within 5 s"):
                await call_tool(supervisor, "u", "echo", {})
            assert trio.current_time() == 6.0
            await trio.testing.wait_all_tasks_blocked()
            assert supervisor.upstreams["u"].state is State.READY
            nursery.cancel_scope.cancel()
    received = transport.servers[0].received
    [sent] = [m for m in received if m.get("method") == "tools/call"]
    cancels = [m["params"] for m in received if m.get("method") == "notifications/cancelled"]
    assert cancels == [{"requestId": sent["id"], "reason": "timed out"}]


async def test_a_handshake_that_never_answers_times_out(tmp_path: Path) -> None:
    """An upstream silent to initialize fails its start after the control window (after the
    5 s probe window), and is retried after the backoff."""
    transport = ScriptedTransport(Script(silent=frozenset({"initialize"})))
    up = upstream(tmp_path, transport, UpstreamSpec(id="u", command="x", request_timeout_ms=8000))
    with trio.fail_after(1000):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(up.run)
            await up.first_attempt.wait()
            assert trio.current_time() == 8.0
            assert up.last_error is not None and "did not answer initialize within 8 s" in up.last_error
            await wait_for(lambda: len(transport.connects) == 2)
            nursery.cancel_scope.cancel()
    assert transport.connects == [0.0, 9.0]
    assert transport.closes[0] == 8.0


async def test_list_changed_relists_the_tools(tmp_path: Path) -> None:
    """tools/list_changed from the upstream re-lists its tools, and the change is reported once."""
    transport = ScriptedTransport(Script(tools=(ECHO,)))
    changes: list[float] = []
    supervisor = Supervisor(context(tmp_path, changes), transports=factory({"u": transport}))
    with trio.fail_after(100):
        async with trio.open_nursery() as nursery:
            await nursery.start(supervisor.run, ONE)
            await trio.sleep(3.0)
            server = transport.server
            assert server is not None
            server.tools = (ECHO, UP)
            await server.notify("notifications/tools/list_changed")
            await trio.testing.wait_all_tasks_blocked()
            assert [t["name"] for t in supervisor.ready_tools()["u"]] == ["echo", "up"]
            await trio.sleep(1.0)
            await server.notify("notifications/tools/list_changed")  # nothing changed this time
            await trio.testing.wait_all_tasks_blocked()
            await trio.sleep(1.0)
            nursery.cancel_scope.cancel()
    assert changes == [0.0, 3.0, 5.0]  # ready, the changed list, the shutdown; not the unchanged one
    assert [m.get("method") for m in transport.servers[0].received].count("tools/list") == 3


async def test_a_server_request_during_a_call_reaches_the_caller(tmp_path: Path) -> None:
    """An elicitation the upstream sends while a call is in flight is answered by that call's
    channel, and the answer goes back to the upstream."""
    transport = ScriptedTransport(Script(delays={"echo": 10.0}))
    supervisor = Supervisor(context(tmp_path), transports=factory({"u": transport}))
    asked: list[tuple[str, dict[str, Any]]] = []

    async def answer(method: str, params: dict[str, Any]) -> dict[str, Any]:
        asked.append((method, params))
        return {"action": "accept", "content": {"ok": True}}

    with trio.fail_after(100):
        async with trio.open_nursery() as nursery:
            await nursery.start(supervisor.run, ONE)
            nursery.start_soon(lambda: call_tool(supervisor, "u", "echo", {}, on_request=answer))
            await trio.sleep(1.0)
            server = transport.server
            assert server is not None
            reply = await server.request("elicitation/create", {"message": "Proceed?"})
            nursery.cancel_scope.cancel()
    assert asked == [("elicitation/create", {"message": "Proceed?"})]
    assert reply == {"result": {"action": "accept", "content": {"ok": True}}}


async def test_a_call_that_only_relays_progress_does_not_take_the_upstreams_question(
        tmp_path: Path) -> None:
    """Of two calls in flight, the newer one only relays progress: the upstream's elicitation
    goes to the older call, whose caller can answer it, instead of being declined."""
    transport = ScriptedTransport(Script(delays={"echo": 10.0}))
    supervisor = Supervisor(context(tmp_path), transports=factory({"u": transport}))

    async def answer(method: str, params: dict[str, Any]) -> dict[str, Any]:
        return {"action": "accept", "content": {}}

    with trio.fail_after(100):
        async with trio.open_nursery() as nursery:
            await nursery.start(supervisor.run, ONE)
            nursery.start_soon(lambda: call_tool(supervisor, "u", "echo", {}, on_request=answer))
            await trio.sleep(1.0)
            nursery.start_soon(lambda: call_tool(supervisor, "u", "echo", {}, on_progress=lambda p: None))
            await trio.sleep(1.0)
            server = transport.server
            assert server is not None
            reply = await server.request("elicitation/create", {"message": "Proceed?"})
            nursery.cancel_scope.cancel()
    assert reply == {"result": {"action": "accept", "content": {}}}


def spec(upstream_id: str, *, args: tuple[str, ...] = ()) -> UpstreamSpec:
    return UpstreamSpec(id=upstream_id, command="x", args=args)


async def test_reconfigure_restarts_only_the_changed_upstream(tmp_path: Path) -> None:
    """A changed definition closes that upstream's connection and makes a new one; an unchanged
    upstream keeps its connection; a removed one is closed."""
    transports = {uid: ScriptedTransport() for uid in ("same", "changed", "removed")}
    supervisor = Supervisor(context(tmp_path), transports=factory(transports))
    with trio.fail_after(100):
        async with trio.open_nursery() as nursery:
            await nursery.start(supervisor.run, ExposeConfig(upstreams=(spec("same"), spec("changed"),
                                                                        spec("removed"))))
            await trio.sleep(10)
            supervisor.reconfigure(ExposeConfig(upstreams=(spec("same"), spec("changed", args=("--v2",)))))
            await trio.testing.wait_all_tasks_blocked()
            assert [(s.id, s.state) for s in supervisor.statistics()] == [
                ("same", "ready"), ("changed", "ready")]
            await trio.sleep(5)
            nursery.cancel_scope.cancel()
    assert {uid: (t.connects, t.closes) for uid, t in transports.items()} == {
        "same": ([0.0], [15.0]), "changed": ([0.0, 10.0], [10.0, 15.0]), "removed": ([0.0], [10.0])}
    assert all(t.most_open == 1 for t in transports.values())


async def test_a_final_refusal_is_not_retried(tmp_path: Path) -> None:
    """A refusal only a config change heals stops the upstream at t = 0: one attempt, no
    backoff, no restart counted."""
    refusal = SpawnFailed("upstream 'u' refused by the isolation guard: nope", permanent=True, final=True)
    transport = ScriptedTransport(Script(refuse=refusal))
    up = upstream(tmp_path, transport)
    with trio.fail_after(1000):
        await up.run()
        assert trio.current_time() == 0.0
    assert transport.connects == [0.0]
    stats = up.statistics()
    assert (stats.state, stats.restarts) == ("stopped", 0)
    assert stats.stopped_reason == stats.last_error == "upstream 'u' refused by the isolation guard: nope"


async def test_a_transient_refusal_is_retried_until_it_starts(tmp_path: Path) -> None:
    """A spawn failure retrying can heal is retried after the backoff; the next start succeeds."""
    transport = ScriptedTransport(Script(refuse=SpawnFailed("upstream 'u': fork failed", permanent=False)),
                                  Script())
    up = upstream(tmp_path, transport)
    with trio.fail_after(1000):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(up.run)
            await wait_for(lambda: up.state is State.READY)
            nursery.cancel_scope.cancel()
    assert transport.connects == [0.0, 1.0]
    assert up.statistics().restarts == 1


async def test_the_stderr_tail_is_logged_never_kept_in_errors(tmp_path: Path) -> None:
    """What the upstream wrote to stderr is logged when its connection closes, and is never
    part of the error a caller or /health sees."""
    transport = ScriptedTransport(Script(exit_after_s=0.0, status=2, stderr="secret=hunter2\n"))
    up = upstream(tmp_path, transport,
                  UpstreamSpec(id="u", command="x", restart=RestartPolicy(max_restarts=0)))
    with capture_logs() as logs, trio.fail_after(1000):
        await up.run()
    assert [e["tail"] for e in logs if e["event"] == "upstream stderr (tail)"] == ["secret=hunter2\n"]
    assert up.last_error == "upstream 'u' exited with status 2"
    assert "hunter2" not in (up.statistics().stopped_reason or "")


async def test_a_starting_upstream_never_blocks_a_caller(tmp_path: Path) -> None:
    """While an upstream is still in its handshake, the supervisor is serving at t = 0, a call to
    it is refused at once as still starting, and a caller waiting for it learns at the end of
    the failed attempt why it is not ready."""
    transport = ScriptedTransport(Script(silent=frozenset({"initialize"})))
    spec = UpstreamSpec(id="u", command="x", request_timeout_ms=8000)
    supervisor = Supervisor(context(tmp_path), transports=factory({"u": transport}), startup_deadline_s=20)
    with trio.fail_after(100):
        async with trio.open_nursery() as nursery:
            await nursery.start(supervisor.serve, ExposeConfig(upstreams=(spec,)))
            assert trio.current_time() == 0.0
            with pytest.raises(UpstreamUnavailable, match="upstream 'u' is still starting"):
                await call_tool(supervisor, "u", "echo", {})
            assert trio.current_time() == 0.0
            problem = await supervisor.wait_ready("u")
            assert trio.current_time() == 20.0  # it keeps restarting: the start window ends the wait
            assert problem is not None and "did not answer initialize within 8 s" in problem
            nursery.cancel_scope.cancel()


async def test_the_era_is_remembered_across_restarts_until_a_handshake_fails(tmp_path: Path) -> None:
    """After a legacy handshake, the next incarnation goes straight to initialize (no probe); a
    failed handshake forgets the era, so the one after probes again."""
    transport = ScriptedTransport(Script(exit_after_s=10.0), Script(protocol_version="1999-01-01"), Script())
    up = upstream(tmp_path, transport)
    with trio.fail_after(1000):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(up.run)
            await wait_for(lambda: len(transport.connects) == 3 and up.state is State.READY)
            nursery.cancel_scope.cancel()
    firsts = [next(m["method"] for m in server.received if "method" in m) for server in transport.servers]
    assert firsts == ["server/discover", "initialize", "server/discover"]


async def test_an_upstream_that_only_closes_its_output_says_so(tmp_path: Path) -> None:
    """A connection that ends without an exit status is reported as the upstream having closed
    its output, and restarted like a crash."""
    transport = ScriptedTransport(Script(exit_after_s=5.0, status=None), Script())
    up = upstream(tmp_path, transport)
    with trio.fail_after(1000):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(up.run)
            await wait_for(lambda: len(transport.connects) == 2)
            nursery.cancel_scope.cancel()
    assert up.last_error == "upstream 'u' closed its output"
    assert transport.connects == [0.0, 6.0]
