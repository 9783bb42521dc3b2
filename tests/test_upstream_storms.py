"""Notification storms are coalesced: re-lists (`Coalescer`), surface changes (`Live._swap`),
client notifications (`Changes` debounce), and all of it end to end with the mock upstream behind
the gateway in-process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from tests.test_reload import next_notification
from tests.test_upstream_gateway import call
from tests.upstreams import mock_upstream, set_upstreams
from tfunnel.home.files import read_home
from tfunnel.home.live import Live
from tfunnel.surface.changes import DEBOUNCE_S, Changes
from tfunnel.testing.gateway import stdio_gateway as gateway
from tfunnel.upstream.coalesce import Coalescer

pytestmark = pytest.mark.timeout(60)

WORK_S = 1.0  # how long one coalesced run takes in the clock tests

LIST_CHANGED = "notifications/tools/list_changed"


@pytest.mark.trio_clock
@pytest.mark.parametrize(("requests", "runs"), [
    pytest.param([(0.0, 20_000)], [0.0], id="one-burst-one-run"),
    pytest.param([(0.0, 1), (0.5, 20_000)], [0.0, 1.0], id="burst-during-a-run-one-more"),
    pytest.param([(0.0, 1), (0.5, 3), (1.5, 5)], [0.0, 1.0, 2.0], id="pending-during-pending-run"),
    pytest.param([(0.0, 1), (2.0, 1)], [0.0, 2.0], id="idle-then-fresh-run"),
    pytest.param([(0.0, 5), (0.2, 5), (0.9, 5), (3.0, 2)], [0.0, 1.0, 3.0], id="mixed"),
])
async def test_coalescer_runs(requests: list[tuple[float, int]], runs: list[float]) -> None:
    """However many requests arrive, at most one run is in flight and one pending behind it; the
    runs start at exactly these virtual times."""
    started: list[float] = []

    async def work() -> None:
        started.append(trio.current_time())
        await trio.sleep(WORK_S)

    coalescer = Coalescer(work)
    async with trio.open_nursery() as nursery:
        for at, count in requests:
            await trio.sleep_until(at)
            for _ in range(count):
                coalescer.request(nursery)
    assert started == runs
    assert coalescer.runs == len(runs) and not coalescer.busy


@pytest.mark.trio_clock
async def test_coalescer_cancelled_run_starts_afresh() -> None:
    """A run cancelled with its nursery (the incarnation ended) leaves nothing pending or busy: the
    next request, in the next nursery, runs again."""
    started: list[float] = []

    async def work() -> None:
        started.append(trio.current_time())
        await trio.sleep(WORK_S)

    coalescer = Coalescer(work)
    async with trio.open_nursery() as nursery:
        coalescer.request(nursery)
        await trio.sleep(0.5)
        coalescer.request(nursery)  # pending, then lost with the nursery
        nursery.cancel_scope.cancel()
    assert not coalescer.busy
    async with trio.open_nursery() as nursery:
        coalescer.request(nursery)
    assert started == [0.0, 0.5]


async def _collect(changes: Changes, woke: list[tuple[float, int]]) -> None:
    seen = changes.version
    while True:
        seen = await changes.next_burst(seen)
        woke.append((trio.current_time(), seen))


@pytest.mark.trio_clock
@pytest.mark.parametrize(("bumps", "wakes"), [
    pytest.param([(0.0, 20_000)], [(DEBOUNCE_S, 20_000)], id="burst-once"),
    pytest.param([(0.0, 3), (DEBOUNCE_S / 2, 3)], [(DEBOUNCE_S, 6)], id="burst-within-the-window"),
    pytest.param([(0.0, 1), (1.0, 1)], [(DEBOUNCE_S, 1), (1.0 + DEBOUNCE_S, 2)], id="apart-twice"),
])
async def test_changes_debounce(bumps: list[tuple[float, int]], wakes: list[tuple[float, int]]) -> None:
    """A waiter wakes once per burst, `DEBOUNCE_S` after its first change, with every change of
    the burst folded in."""
    changes = Changes()
    woke: list[tuple[float, int]] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_collect, changes, woke)
        await trio.testing.wait_all_tasks_blocked()
        for at, count in bumps:
            await trio.sleep_until(at)
            for _ in range(count):
                changes.bump()
        await trio.sleep(10)
        nursery.cancel_scope.cancel()
    assert [(round(t, 9), v) for t, v in woke] == [(round(t, 9), v) for t, v in wakes]


@pytest.mark.trio_clock
async def test_changes_skip_what_was_not_relevant_when_it_happened() -> None:
    """A change while the waiter's `relevant` is false (a client not yet initialized) is not
    reported, even if it turns true within the debounce window; the next change is."""
    changes = Changes()
    ready = False
    woke: list[tuple[float, int]] = []

    async def waiter() -> None:
        seen = changes.version
        while True:
            seen = await changes.next_burst(seen, relevant=lambda: ready)
            woke.append((trio.current_time(), seen))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        changes.bump()
        await trio.sleep(DEBOUNCE_S / 2)
        ready = True
        await trio.sleep_until(1.0)
        changes.bump()
        await trio.sleep(1)
        nursery.cancel_scope.cancel()
    assert [(round(t, 9), v) for t, v in woke] == [(round(1.0 + DEBOUNCE_S, 9), 2)]


@pytest.mark.trio_clock
async def test_changes_debounce_bounds_a_steady_stream() -> None:
    """Changes that never stop still wake a waiter at most once per debounce window."""
    changes = Changes()
    woke: list[tuple[float, int]] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_collect, changes, woke)
        for _ in range(1000):  # one change every millisecond for a second
            changes.bump()
            await trio.sleep(0.001)
        await trio.sleep(1)
        nursery.cancel_scope.cancel()
    assert woke[-1][1] == 1000
    assert len(woke) <= 1 / DEBOUNCE_S + 1


def test_swap_bumps_only_when_the_surface_changed(home: Path) -> None:
    """Re-listing the same tools (or an upstream without tools coming up) changes nothing; a tool
    that changes its definition, appears or goes away is a change."""
    live = Live(home, read_home(home))
    tools: dict[str, tuple[dict[str, Any], ...]] = {}
    live.ready_tools = lambda: tools
    version = live.tools_changed.version
    steps: list[tuple[dict[str, tuple[dict[str, Any], ...]], bool]] = [
        ({"u": ()}, False),  # up, without tools
        ({"u": ({"name": "t", "description": "one"},)}, True),
        ({"u": ({"name": "t", "description": "one"},)}, False),  # the same tools, re-listed
        ({"u": ({"name": "t", "description": "two"},)}, True),
        ({}, True),  # down
    ]
    for ready, changed in steps:
        tools = ready
        live.upstreams_changed()
        assert (live.tools_changed.version > version) is changed, ready
        version = live.tools_changed.version
        assert [t.tool for t in live.catalog.upstream] == [t["name"] for t in ready.get("u", ())]


def test_swap_tells_which_lists_changed(home: Path) -> None:
    """Prompts and resources are lists of their own: a change of one is announced for that list
    only; the same lists re-listed are no news."""
    live = Live(home, read_home(home))
    lists: dict[str, dict[str, tuple[dict[str, Any], ...]]] = {}
    live.ready_lists = lambda: lists
    steps: list[tuple[dict[str, dict[str, tuple[dict[str, Any], ...]]], tuple[str, ...]]] = [
        ({"u": {"prompts": ({"name": "p"},)}}, ("prompts",)),
        ({"u": {"prompts": ({"name": "p"},)}}, ()),
        ({"u": {"prompts": ({"name": "p"},), "resources": ({"uri": "file:///r"},)}}, ("resources",)),
        ({"u": {"prompts": ({"name": "p"},), "resources": ({"uri": "file:///r"},),
                "templates": ({"uriTemplate": "t://{x}"},)}}, ("resources",)),
        ({}, ("prompts", "resources")),
    ]
    for ready, changed in steps:
        version = live.tools_changed.version
        lists = ready
        live.upstreams_changed()
        assert live.tools_changed.changed_since(version) == changed, ready
    assert live.catalog.extras.prompts == ()


async def test_a_list_changed_storm_is_coalesced(home: Path) -> None:
    """20 000 list_changed in a burst from an upstream: a bounded number of re-lists, no flood
    of client list_changed, and a local tool still answers meanwhile; a real change afterwards
    still reaches the client."""
    methods = home / "methods.log"
    set_upstreams(home, mock_upstream("mock", "--tools", "echo,change_tools,list_changed_storm",
                                      "--method-log", str(methods)))
    async with gateway(home) as wire:
        await wire.initialize()
        await wire.request(0, "tools/list")
        with trio.fail_after(20):
            storm = await call(wire, 1, "mock_list_changed_storm", {"count": 20_000})
            assert storm["result"]["content"][0]["text"] == "stormed 20000"
            local = await call(wire, 2, "hash", {"text": "abc"})
            assert local["result"]["structuredContent"]["algo"] == "sha256"
            await wire.expect_no_reply(1.0)  # let the re-lists finish; notifications are stashed
        relists = methods.read_text().splitlines().count("tools/list") - 1  # the first is the handshake's
        assert 1 <= relists <= 3
        assert sum(m.get("method") == LIST_CHANGED for m in wire.stash) <= 1  # the same tools: none
        wire.stash.clear()
        with trio.fail_after(20):
            changed = await call(wire, 3, "mock_change_tools", {})
            assert changed["result"]["content"][0]["text"] == "tools changed"
            await next_notification(wire, LIST_CHANGED)
            extra = await call(wire, 4, "mock_extra", {})
            assert extra["result"]["content"][0]["text"] == "extra"
