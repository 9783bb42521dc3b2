"""The surface rebuilt after upstream changes, once per burst rather than once per change.

Each upstream that comes up, goes down or re-lists its tools changes the surface, and a rebuild
(names decided with the whole set, the tool approvals, the listing for the command line) costs
time in proportion to everything listed. Fifty upstreams coming up together would rebuild fifty
times over a growing catalog: quadratic, and the gateway busy for seconds while clients wait for
`initialize`. So a change asks for a rebuild (`request`, from whichever task saw it) and one task
(`run`) does it: at once when it has been idle, and while changes keep coming, after a pause of
twice the last rebuild's time (at most `MAX_PAUSE_S`), taking in every change asked for meanwhile.
A small home rebuilds within a millisecond or two of each change, as before.

The pause is cut short once for the change that ends a start (the last rebuild was taken
while something was on its way, `settled()` was false, and now nothing is): the last of fifty
upstreams is in the surface at once, not after the pause meant for the burst. Other changes (an
upstream re-listing its tools over and over, one restarting in a loop) keep the pause.

A rebuild's time is the gateway's own CPU time for it (`time.thread_time`), not the wall time:
while fifty upstreams start on two cores, most of a rebuild's wall time is theirs, and pausing
for it would only make the surface complete later. So rebuilding takes at most a third of the
gateway's CPU while changes keep coming.

What must see a change in the surface waits for it: `caught_up` returns once every change asked
for before it is in (the supervisor's `wait_ready` and the end of the start window wait so, so a
call that waited for its upstream finds its tool). Without the task running (a gateway that is
not serving, a test), a request rebuilds at once, in the caller.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import structlog
import trio

log = structlog.get_logger("tfunnel.home")

MAX_PAUSE_S = 0.5  # the longest a change waits behind the rebuild before it


class Rebuilds:
    def __init__(self, rebuild: Callable[[], None], settled: Callable[[], bool] = lambda: False) -> None:
        """`settled()`: whether no further change is on its way now (then a change ends the pause)."""
        self._rebuild = rebuild
        self._settled = settled
        self._asked = 0  # requests so far
        self._done = 0  # requests the last rebuild took in
        self._wake = trio.Event()
        self._hurry = trio.Event()  # the change that ended a start came since the last rebuild began
        self._during_start = False  # whether the last rebuild was taken while something was due
        self._progress = trio.Event()
        self._running = False
        self.count = 0  # rebuilds done by the task (for tests and the bench)

    def request(self) -> None:
        """A change the surface must take in (never blocks)."""
        if not self._running:
            self._rebuild()
            return
        self._asked += 1
        self._wake.set()
        if self._during_start and self._settled():
            self._hurry.set()

    async def caught_up(self) -> None:
        """Return once every change requested before this call is in the surface."""
        target = self._asked
        while self._running and self._done < target:
            await self._progress.wait()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Rebuild for the requests, until cancelled; a request left when it ends is done then."""
        self._running = True
        task_status.started()
        try:
            while True:
                await self._wake.wait()
                self._wake = trio.Event()
                took = self._once()
                with trio.move_on_after(min(MAX_PAUSE_S, 2 * took)):
                    await self._hurry.wait()
        finally:
            self._running = False
            if self._done < self._asked:
                self._once()  # nothing asked for is lost, even on the way out
            self._progress.set()

    def _once(self) -> float:
        target = self._asked
        self._hurry = trio.Event()  # what came before is taken in now
        self._during_start = not self._settled()
        started = time.thread_time()
        try:
            self._rebuild()
        except Exception:  # the surface in force stays; the next change tries again
            log.exception("surface rebuild failed; the current surface stays in force")
        self._done = target
        self.count += 1
        self._progress.set()
        self._progress = trio.Event()
        return time.thread_time() - started
