"""Hand-offs between tasks without a scheduler round trip when nothing has to wait.

`MemorySendChannel.send` and `CapacityLimiter.acquire` always checkpoint, i.e. yield to the
scheduler even when there is room; on the per-call hot path each yield is a full pass of the run
loop. These helpers try the non-blocking form first and only block when they must. They do not
check for cancellation on the fast path: callers that must not act after a cancel check first.
"""

from __future__ import annotations

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
