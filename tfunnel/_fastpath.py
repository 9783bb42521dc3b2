"""Performance shortcuts on the per-call hot path, kept in one place on purpose.

Each piece here trades a little generality for a measured saving on every forwarded call
(bench/README.md, "Where the time goes"); without them tfunnel works the same, only slower.
Read them as optimisations, not as architecture:

- **Eager hand-offs** (`send_eager`, `acquire_eager`): `MemorySendChannel.send` and
  `CapacityLimiter.acquire` always checkpoint, i.e. yield to the scheduler even when there is
  room; each yield is a full pass of the run loop. These try the non-blocking form first and only
  block when they must. They do not check for cancellation on the fast path: callers that must
  not act after a cancel check first.
- **One timer for many waits** (`Expiry`, `deadlines`): a `trio.move_on_at` scope around each wait
  registers a deadline with trio's run loop and removes it again; on the upstream request path
  that cost about 20 µs per forwarded call. Here a wait only pushes (deadline, entry) on a heap.
  One system task sleeps until the earliest deadline and asks each entry that is due what to do
  (`Due.due`): the entry expires itself, or names a later deadline (a timeout re-armed by
  progress) and is asked again then.
"""

from __future__ import annotations

import heapq
import itertools
import math
from typing import Protocol, TypeVar

import trio

T = TypeVar("T")


class Acquirable(Protocol):
    def acquire_nowait(self) -> None: ...

    async def acquire(self) -> None: ...


async def send_eager(channel: trio.MemorySendChannel[T], item: T) -> None:
    try:
        channel.send_nowait(item)
    except trio.WouldBlock:
        await channel.send(item)


async def acquire_eager(limiter: Acquirable) -> None:
    try:
        limiter.acquire_nowait()
    except trio.WouldBlock:
        await limiter.acquire()


# --- one timer for many waits ---------------------------------------------------------------

# Entries that stopped waiting stay on the heap until they are due or the heap is compacted,
# which happens when it has grown to twice its size after the last compaction (at least this).
_MIN_COMPACT = 64


class Due(Protocol):
    @property
    def waiting(self) -> bool:
        """False once nothing waits on the entry any more (it may then be dropped)."""

    def due(self, now: float) -> float | None:
        """Called at or after the entry's deadline: expire it and return None, or return the
        later deadline at which to call again. Must not raise."""


class Expiry:
    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Due]] = []
        self._order = itertools.count()  # ties in deadline never compare entries
        self._sleep = trio.CancelScope()
        self._compact_at = _MIN_COMPACT

    def add(self, deadline: float, entry: Due) -> None:
        """Call `entry.due` once `deadline` has passed (while it is waiting)."""
        heapq.heappush(self._heap, (deadline, next(self._order), entry))
        if deadline < self._sleep.deadline:
            self._sleep.deadline = deadline
        if len(self._heap) >= self._compact_at:
            self._heap = [item for item in self._heap if item[2].waiting]
            heapq.heapify(self._heap)
            self._compact_at = max(_MIN_COMPACT, 2 * len(self._heap))

    async def run(self) -> None:
        while True:
            now = trio.current_time()
            while self._heap and self._heap[0][0] <= now:
                _, _, entry = heapq.heappop(self._heap)
                if entry.waiting:
                    later = entry.due(now)
                    if later is not None:
                        heapq.heappush(self._heap, (later, next(self._order), entry))
            self._sleep = trio.CancelScope(deadline=self._heap[0][0] if self._heap else math.inf)
            with self._sleep:
                await trio.sleep_forever()


_CURRENT: trio.lowlevel.RunVar[Expiry] = trio.lowlevel.RunVar("tfunnel.expiry")


def deadlines() -> Expiry:
    """This trio run's expiry (its timer task starts on first use)."""
    try:
        return _CURRENT.get()
    except LookupError:
        expiry = Expiry()
        trio.lowlevel.spawn_system_task(expiry.run, name="tfunnel.expiry")
        _CURRENT.set(expiry)
        return expiry
