"""One surface rebuild per burst of upstream changes (`home/rebuilds.py`), on trio's MockClock."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing

from tfunnel.home.rebuilds import MAX_PAUSE_S, Rebuilds


class Work:
    """A rebuild: records what it saw (`seen` when it ran) and takes `cost` seconds of this
    thread's CPU (the pause after it is measured in CPU time, and waited for on trio's clock), and
    `waits` seconds of wall time without CPU (as when other processes have the cores)."""

    def __init__(self, cost: float = 0.0, waits: float = 0.0) -> None:
        self.runs: list[int] = []
        self.seen = 0
        self.fail = False
        self.cost = cost
        self.waits = waits

    def __call__(self) -> None:
        self.runs.append(self.seen)
        done = time.thread_time() + self.cost
        while time.thread_time() < done:
            pass
        time.sleep(self.waits)
        if self.fail:
            raise RuntimeError("boom")


def test_without_its_task_a_request_rebuilds_at_once() -> None:
    work = Work()
    rebuilds = Rebuilds(work)
    rebuilds.request()
    rebuilds.request()
    assert len(work.runs) == 2


@pytest.mark.trio_clock
async def test_a_burst_is_one_rebuild_and_caught_up_waits_for_it() -> None:
    work = Work()
    rebuilds = Rebuilds(work)
    async with trio.open_nursery() as nursery:
        await nursery.start(rebuilds.run)
        rebuilds.request()  # idle: rebuilt at the next scheduler pass
        await trio.testing.wait_all_tasks_blocked()
        assert len(work.runs) == 1
        for _ in range(10):  # a burst: taken in together
            work.seen += 1
            rebuilds.request()
        await rebuilds.caught_up()
        assert work.runs == [0, 10]
        await rebuilds.caught_up()  # nothing asked since: returns at once
        assert len(work.runs) == 2
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def after_a_first_rebuild(rebuilds: Rebuilds) -> AsyncIterator[None]:
    """`rebuilds` running, its first rebuild (taken at once: it was idle) done."""
    async with trio.open_nursery() as nursery:
        await nursery.start(rebuilds.run)
        rebuilds.request()
        await trio.testing.wait_all_tasks_blocked()
        yield
        nursery.cancel_scope.cancel()


async def catching_up(rebuilds: Rebuilds, changes: int = 1) -> float:
    """Seconds on trio's clock from `changes` requests until the surface has them."""
    started = trio.current_time()
    for _ in range(changes):
        rebuilds.request()
    await rebuilds.caught_up()
    return trio.current_time() - started


@pytest.mark.trio_clock
async def test_changes_during_the_pause_wait_for_it_and_no_longer() -> None:
    """After a rebuild of 20 ms the next waits twice that (changes coalesce meanwhile); after one
    longer than half of MAX_PAUSE_S, no more than MAX_PAUSE_S."""
    for cost, pause in ((0.02, 0.04), (0.3, MAX_PAUSE_S)):
        work = Work(cost)
        rebuilds = Rebuilds(work)
        async with after_a_first_rebuild(rebuilds):
            # A real sleep never ends early (the lower bound); the cap holds on trio's clock.
            assert pause <= await catching_up(rebuilds, 3) <= MAX_PAUSE_S
            assert len(work.runs) == 2


@pytest.mark.trio_clock
async def test_a_rebuild_slowed_by_other_processes_does_not_hold_back_the_next() -> None:
    """A rebuild that takes half a second of wall time but almost no CPU of ours (the cores were
    busy with starting upstreams) is followed by the next at once, not after a pause."""
    work = Work(cost=0.0, waits=0.5)
    rebuilds = Rebuilds(work)
    async with after_a_first_rebuild(rebuilds):
        assert await catching_up(rebuilds) < 0.1  # twice the CPU it took: next to nothing
        assert len(work.runs) == 2


@pytest.mark.parametrize(("settled_before", "settled_after", "paused"), [
    (False, True, False),  # the change that ends a start: rebuilt at once
    (False, False, True),  # more is on its way: the burst's pause
    (True, True, True),  # nothing was starting (an upstream re-listing over and over): the pause
])
@pytest.mark.trio_clock
async def test_only_the_change_that_ends_a_start_cuts_the_pause(settled_before: bool, settled_after: bool,
                                                               paused: bool) -> None:
    work = Work(cost=0.05)  # a pause of 0.1 s after each rebuild
    settled = [settled_before]
    rebuilds = Rebuilds(work, settled=lambda: settled[0])
    async with after_a_first_rebuild(rebuilds):
        settled[0] = settled_after
        waited = await catching_up(rebuilds)
        assert (waited >= 0.1) if paused else (waited < 0.01), waited
        assert len(work.runs) == 2
        # Once a rebuild was taken with nothing starting, the next change waits out the pause.
        settled[0] = True
        await catching_up(rebuilds)
        assert await catching_up(rebuilds) >= 0.1


@pytest.mark.trio_clock
async def test_a_failing_rebuild_keeps_the_task_and_the_waiters_going() -> None:
    work = Work()
    work.fail = True
    rebuilds = Rebuilds(work)
    async with trio.open_nursery() as nursery:
        await nursery.start(rebuilds.run)
        rebuilds.request()
        await rebuilds.caught_up()
        work.fail = False
        rebuilds.request()
        await rebuilds.caught_up()
        assert len(work.runs) == 2
        nursery.cancel_scope.cancel()


@pytest.mark.trio_clock
async def test_a_request_left_when_the_task_ends_is_not_lost() -> None:
    work = Work()
    rebuilds = Rebuilds(work)
    async with trio.open_nursery() as nursery:
        await nursery.start(rebuilds.run)
        rebuilds.request()
        await trio.testing.wait_all_tasks_blocked()
        rebuilds.request()  # in the pause after the first rebuild
        nursery.cancel_scope.cancel()
    assert len(work.runs) == 2
    rebuilds.request()  # the task is gone: at once again
    assert len(work.runs) == 3
