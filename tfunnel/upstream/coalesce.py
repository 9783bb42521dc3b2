"""Run a piece of work on demand, coalesced: at most one run in flight plus one pending.

An upstream may send `notifications/tools/list_changed` thousands of times in a burst; each asks
for a re-list, but a re-list that starts after the last request already sees everything those
requests announced. So requests made while a run is in flight fold into one more run after it,
and requests made while nothing runs start one. The worker task exists only while there is work,
in the nursery the first request names (the upstream's incarnation), and ends with it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio


class Coalescer:
    """`request()` asks for `work` to run; however many requests arrive, at most one run is in
    flight and at most one more is pending behind it."""

    def __init__(self, work: Callable[[], Awaitable[None]]) -> None:
        self._work = work
        self._running = False
        self._pending = False
        self.runs = 0  # runs started (statistics, tests)

    @property
    def busy(self) -> bool:
        """Whether a run is in flight or about to start."""
        return self._running

    def request(self, nursery: trio.Nursery) -> None:
        """Ask for a run (sync, never blocks): start the worker in `nursery` if none is running,
        else mark one more run pending behind the current one."""
        if self._running:
            self._pending = True
            return
        nursery.start_soon(self._drain)
        self._running = True

    async def _drain(self) -> None:
        try:
            while True:
                self._pending = False
                self.runs += 1
                await self._work()
                if not self._pending:
                    return
        finally:
            # Also on cancellation (the incarnation ended): the next request starts afresh.
            self._running = False
            self._pending = False
