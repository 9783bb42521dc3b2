"""Upstream.run and Supervisor.reconfigure under MockClock with a fake child (SPEC §6.2, STYLE 8).

Each incarnation connects over the scripted in-memory transport (`tfunnel.testing.scripted`),
which records the virtual time of each attempt and then fails to spawn, fails the handshake, or
connects and exits after a virtual lifetime; no real process is started, so every time asserted
below is exact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import trio
import trio.testing

from tfunnel.config.expose import ExposeConfig, RestartPolicy, UpstreamSpec
from tfunnel.config.model import Limits
from tfunnel.testing.scripted import Script, ScriptedTransport
from tfunnel.upstream import factory
from tfunnel.upstream.supervisor import Context, Identity, State, Supervisor, Upstream, UpstreamStatistics
from tfunnel.upstream.transport import SpawnFailed, UpstreamTransport

pytestmark = [pytest.mark.trio_clock, pytest.mark.timeout(30)]

NOT_FOUND = "upstream 'u': command 'x' not found"
CRASH_LOOP_TIMES = [0.0, 1.0, 3.0, 7.0, 15.0, 31.0]
# 1, 2, 4, 8, 16, then the 30 s cap until the first failure at or after 300 s.
PERMANENT_TIMES = [0.0, 1.0, 3.0, 7.0, 15.0, 31.0, 61.0, 91.0, 121.0, 151.0, 181.0, 211.0, 241.0,
                   271.0, 301.0]


@dataclass
class FakeChild:
    """A transport factory playing `mode` on every incarnation, over the scripted transport (one
    `ScriptedTransport` per upstream id), so the real connect → handshake → session path runs."""

    mode: str  # "transient" | "permanent" | "handshake" | "up"
    lifetime: float = 0.0  # for "up": virtual seconds it stays connected before it exits
    transports: dict[str, ScriptedTransport] = field(default_factory=dict)
    seen: list[UpstreamStatistics] = field(default_factory=list)  # statistics() at each attempt
    watched: Upstream | None = None  # whose statistics `seen` records
    _tick: trio.Event = field(default_factory=trio.Event)

    def script(self, uid: str) -> Script:
        if self.mode == "transient":
            return Script(refuse=SpawnFailed(f"upstream {uid!r}: fork failed", permanent=False))
        if self.mode == "permanent":
            return Script(refuse=SpawnFailed(f"upstream {uid!r}: command 'x' not found", permanent=True))
        if self.mode == "handshake":
            return Script(protocol_version="1999-01-01")  # a version no legacy client accepts
        return Script(exit_after_s=self.lifetime, status=1)

    def __call__(self, spec: UpstreamSpec, ctx: Context) -> UpstreamTransport:
        if self.watched is not None:
            self.seen.append(self.watched.statistics())
        self._tick.set()
        self._tick = trio.Event()
        return self.transports.setdefault(spec.id, ScriptedTransport(self.script(spec.id)))

    def times(self, upstream_id: str = "u") -> list[float]:
        """When each connection of `upstream_id` was made."""
        transport = self.transports.get(upstream_id)
        return transport.connects if transport is not None else []

    @property
    def calls(self) -> dict[str, list[float]]:
        return {uid: t.connects for uid, t in self.transports.items()}

    @property
    def cancelled(self) -> dict[str, list[float]]:
        """When each connection was closed (with an endless lifetime: only by a cancel)."""
        return {uid: t.closes for uid, t in self.transports.items()}

    async def attempts(self, n: int, upstream_id: str = "u") -> None:
        """Wait until `upstream_id` has made its n-th attempt."""
        while len(self.times(upstream_id)) < n:
            await self._tick.wait()
        await trio.testing.wait_all_tasks_blocked()


def make_upstream(tmp_path: Path, fake: FakeChild, spec: UpstreamSpec | None = None) -> Upstream:
    ctx = Context(tmp_path, {}, Limits(), Identity("t", "0"), lambda: None, jitter=lambda: 0.5)
    fake.watched = Upstream(spec or UpstreamSpec(id="u", command="x"), ctx, fake)
    return fake.watched


async def sample_states(upstream: Upstream, at: list[float], out: list[tuple[float, str]]) -> None:
    """Record statistics().state at each virtual time in `at`."""
    for when in at:
        await trio.sleep_until(when)
        out.append((trio.current_time(), upstream.statistics().state))


@pytest.mark.parametrize("mode", ["transient", "handshake", "up"])
async def test_crash_loop_attempt_times(tmp_path: Path, mode: str) -> None:
    """A crash loop is attempted at 0, 1, 3, 7, 15, 31 s, then stopped: run() returns, reason named."""
    fake = FakeChild(mode)
    upstream = make_upstream(tmp_path, fake)
    with trio.fail_after(1000):
        await upstream.run()
        assert trio.current_time() == 31.0
    assert fake.times() == CRASH_LOOP_TIMES
    stats = upstream.statistics()
    assert stats.state == "stopped"
    assert upstream.state is State.STOPPED
    assert stats.restarts == 5
    assert stats.stopped_reason is not None
    assert "crash loop" in stats.stopped_reason
    assert stats.last_error is not None and stats.last_error in stats.stopped_reason
    assert upstream.first_attempt.is_set()


async def test_crash_loop_state_transitions(tmp_path: Path) -> None:
    """statistics(): starting at each attempt, backoff in between, stopped at the end; restarts count up."""
    fake = FakeChild("transient")
    upstream = make_upstream(tmp_path, fake)
    assert upstream.statistics().state == "starting"
    assert upstream.statistics().restarts == 0
    samples: list[tuple[float, str]] = []
    with trio.fail_after(1000):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sample_states, upstream, [0.5, 2.0, 5.0, 11.0, 23.0, 40.0], samples)
            await upstream.run()
    assert [(s.state, s.restarts) for s in fake.seen] == [
        ("starting", 0), ("starting", 1), ("starting", 2), ("starting", 3), ("starting", 4), ("starting", 5)]
    assert samples == [(0.5, "backoff"), (2.0, "backoff"), (5.0, "backoff"), (11.0, "backoff"),
                       (23.0, "backoff"), (40.0, "stopped")]
    assert upstream.statistics().restarts == 5


async def test_first_failure_sets_first_attempt(tmp_path: Path) -> None:
    """The first failed attempt releases the startup wait at once (t = 0), during backoff."""
    upstream = make_upstream(tmp_path, FakeChild("transient"))
    with trio.fail_after(1000):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(upstream.run)
            await upstream.first_attempt.wait()
            assert trio.current_time() == 0.0
            assert upstream.statistics().last_error == "upstream 'u': fork failed"
            nursery.cancel_scope.cancel()


async def test_missing_command_stops_after_300s(tmp_path: Path) -> None:
    """A command that does not exist is retried with 1..30 s backoff; the first failure ≥ 300 s stops it."""
    fake = FakeChild("permanent")
    upstream = make_upstream(tmp_path, fake)
    with trio.fail_after(10_000):
        await upstream.run()
        assert trio.current_time() == 301.0
    assert fake.times() == PERMANENT_TIMES
    stats = upstream.statistics()
    assert stats.state == "stopped"
    assert stats.restarts == len(PERMANENT_TIMES) - 1
    assert stats.stopped_reason is not None
    assert "300 s" in stats.stopped_reason
    assert NOT_FOUND in stats.stopped_reason
    assert stats.last_error == NOT_FOUND


async def test_missing_command_ceiling_without_window_effects( tmp_path: Path) -> None:
    """With a window longer than the run, permanent backoff is 1, 2, 4, 8, 16, 30, 30, … → stop at 301."""
    fake = FakeChild("permanent")
    spec = UpstreamSpec(id="u", command="x", restart=RestartPolicy(window_s=1000.0))
    upstream = make_upstream(tmp_path, fake, spec)
    with trio.fail_after(10_000):
        await upstream.run()
    assert fake.times() == PERMANENT_TIMES
    assert upstream.statistics().state == "stopped"
    reason = upstream.statistics().stopped_reason
    assert reason is not None and "300 s" in reason and NOT_FOUND in reason


async def test_custom_permanent_ceiling(tmp_path: Path) -> None:
    """permanentFailureS 10: attempts at 0, 1, 3, 7, 15 → stopped at 15 s, reason naming 10 s."""
    fake = FakeChild("permanent")
    spec = UpstreamSpec(id="u", command="x", restart=RestartPolicy(permanent_failure_s=10.0))
    upstream = make_upstream(tmp_path, fake, spec)
    with trio.fail_after(10_000):
        await upstream.run()
    assert fake.times() == [0.0, 1.0, 3.0, 7.0, 15.0]
    reason = upstream.statistics().stopped_reason
    assert reason is not None and "10 s" in reason and NOT_FOUND in reason


async def test_child_that_stays_up_never_stops(tmp_path: Path) -> None:
    """Up 120 s between crashes: every restart comes 1 s after the crash, ten crashes later still running."""
    fake = FakeChild("up", lifetime=120.0)
    upstream = make_upstream(tmp_path, fake)
    with trio.fail_after(100_000):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(upstream.run)
            await fake.attempts(11)  # ten crashes, the eleventh incarnation is up
            await trio.testing.wait_all_tasks_blocked()
            assert upstream.statistics().state == "ready"
            assert upstream.statistics().restarts == 10
            nursery.cancel_scope.cancel()
    assert fake.times() == [i * 121.0 for i in range(11)]
    assert upstream.statistics().stopped_reason is None
    assert upstream.statistics().last_error == "upstream 'u' exited with status 1"


async def test_child_up_states(tmp_path: Path) -> None:
    """A child that stays up: ready while up, then backoff for exactly 1 s after each crash."""
    fake = FakeChild("up", lifetime=120.0)
    upstream = make_upstream(tmp_path, fake)
    samples: list[tuple[float, str]] = []
    with trio.fail_after(100_000):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(upstream.run)
            await sample_states(upstream, [60.0, 120.5, 180.0, 241.5], samples)
            nursery.cancel_scope.cancel()
    assert samples == [(60.0, "ready"), (120.5, "backoff"), (180.0, "ready"), (241.5, "backoff")]
    assert fake.times() == [0.0, 121.0]
    assert [s.state for s in fake.seen] == ["starting", "starting"]


def spec(upstream_id: str, *, enabled: bool = True, args: tuple[str, ...] = ()) -> UpstreamSpec:
    return UpstreamSpec(id=upstream_id, command="x", args=args, enabled=enabled)


async def test_supervisor_reconfigure(tmp_path: Path) -> None:
    """Unchanged keeps Upstream and task; changed is replaced; removed goes; disabled never runs."""
    fake = FakeChild("up", lifetime=math.inf)
    changes: list[float] = []
    starting: list[bool] = []  # at each change: is another upstream still on its way up?

    def on_change() -> None:
        changes.append(trio.current_time())
        starting.append(supervisor.starting())

    supervisor = Supervisor(Context(tmp_path, {}, Limits(), Identity("t", "0"), on_change,
                                    jitter=lambda: 0.5), transports=fake)
    first = ExposeConfig(upstreams=(spec("same"), spec("changed"), spec("removed"),
                                    spec("off", enabled=False), spec("turned-off")))
    second = ExposeConfig(upstreams=(spec("added"), spec("same"), spec("changed", args=("--v2",)),
                                     spec("off", enabled=False), spec("turned-off", enabled=False),
                                     spec("new-off", enabled=False)))
    with trio.fail_after(10_000):
        async with trio.open_nursery() as nursery:
            await nursery.start(supervisor.run, first)
            assert trio.current_time() == 0.0
            assert [(s.id, s.state) for s in supervisor.statistics()] == [
                ("same", "ready"), ("changed", "ready"), ("removed", "ready"), ("off", "disabled"),
                ("turned-off", "ready")]
            same, changed, off = (supervisor.upstreams[k] for k in ("same", "changed", "off"))
            same_scope = supervisor._scopes["same"]

            await trio.sleep(10)
            supervisor.reconfigure(second)
            await trio.testing.wait_all_tasks_blocked()
            assert trio.current_time() == 10.0

            assert list(supervisor.upstreams) == ["added", "same", "changed", "off", "turned-off", "new-off"]
            assert supervisor.upstreams["same"] is same
            assert supervisor._scopes["same"] is same_scope
            assert supervisor.upstreams["changed"] is not changed
            assert supervisor.upstreams["changed"].spec.args == ("--v2",)
            assert supervisor.upstreams["off"] is off
            assert [(s.id, s.state) for s in supervisor.statistics()] == [
                ("added", "ready"), ("same", "ready"), ("changed", "ready"), ("off", "disabled"),
                ("turned-off", "disabled"), ("new-off", "disabled")]
            # Each connection that became ready, or closed once ready, is a change; and the
            # reconfiguration itself: four up at 0 s; at 10 s three closed, two up, one reload.
            assert changes == [0.0] * 4 + [10.0] * 6
            assert starting[:4] == [True, True, True, False]  # the last one up ends the start
            assert not supervisor.starting()
            await trio.sleep(5)
            nursery.cancel_scope.cancel()
    assert fake.calls == {"same": [0.0], "changed": [0.0, 10.0], "removed": [0.0], "turned-off": [0.0],
                          "added": [10.0]}
    # The old incarnations of changed, removed and turned-off were cancelled at 10 s; the rest at shutdown.
    assert fake.cancelled == {"changed": [10.0, 15.0], "removed": [10.0], "turned-off": [10.0],
                              "same": [15.0], "added": [15.0]}


@pytest.mark.parametrize("spec", [
    UpstreamSpec(id="u", command="x", args=("--root", "/etc/outside-the-home")),
    UpstreamSpec(id="u", command="x", env={"NODE_OPTIONS": "--require /tmp/x.js"}),
    UpstreamSpec(id="u", command="x", transport="http", url="http://localhost:1/mcp"),
], ids=["outside-path", "code-loading-env", "transport"])
async def test_refusal_that_only_config_heals_is_final(tmp_path: Path, spec: UpstreamSpec,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """An isolation refusal (or a transport this version lacks: every configurable one starts
    today, so the list is narrowed here) stops the upstream at t = 0: one attempt, no backoff,
    `restarts: 0`, the reason naming the value and the opt-out."""
    monkeypatch.setattr(factory, "AVAILABLE_TRANSPORTS", ("stdio",))
    upstream = Upstream(spec, Context(tmp_path, {}, Limits(), Identity("t", "0"), lambda: None,
                                      jitter=lambda: 0.5))  # the real transport factory
    with trio.fail_after(1000):
        await upstream.run()
        assert trio.current_time() == 0.0
    stats = upstream.statistics()
    assert (stats.state, stats.restarts) == ("stopped", 0)
    assert upstream.first_attempt.is_set()
    assert stats.stopped_reason is not None and stats.stopped_reason == stats.last_error
    if spec.transport == "stdio":
        assert "isolation guard" in stats.stopped_reason
        assert ("allowOutsidePaths" in stats.stopped_reason or "allowCodeLoadingEnv" in stats.stopped_reason)
        assert (spec.args[-1] if spec.args else "env NODE_OPTIONS") in stats.stopped_reason
        assert "/tmp/x.js" not in stats.stopped_reason  # an env value (maybe a secret) is never repeated
    else:
        assert "http" in stats.stopped_reason


async def test_a_waiting_call_wakes_when_its_upstream_is_removed(tmp_path: Path) -> None:
    """A call waiting for a restarting upstream learns at once that a reload removed it, instead
    of sleeping out the start window; one waiting across a change waits for the new incarnation."""
    supervisor = Supervisor(Context(tmp_path, {}, Limits(), Identity("t", "0"), lambda: None,
                                    jitter=lambda: 0.5), startup_deadline_s=100,
                            transports=FakeChild("transient"))
    answers: list[tuple[float, str | None]] = []

    async def wait() -> None:
        answer = await supervisor.wait_ready("u")
        answers.append((trio.current_time(), answer))

    with trio.fail_after(1000):
        async with trio.open_nursery() as nursery:
            await nursery.start(supervisor.run, ExposeConfig(upstreams=(spec("u"),)))
            assert supervisor.unready_owner("u_tool") == "u"
            nursery.start_soon(wait)
            await trio.sleep(0.5)
            supervisor.reconfigure(ExposeConfig())
            await trio.testing.wait_all_tasks_blocked()
            nursery.cancel_scope.cancel()
    assert answers == [(0.5, "upstream 'u' is not configured")]
