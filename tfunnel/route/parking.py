"""Upstream calls parked between a modern client's MRTR rounds.

A legacy upstream asks its questions (`elicitation/create`) with real requests in the middle of
a call, but a modern client answers only on its retry, with a new request. So the upstream call
runs here, in the parking nursery, not in the client request's task: when the upstream asks,
the client's request ends with `input_required` (the parked call's id sealed in its
`requestState`) while the upstream call waits; the retry hands the answer over and waits for the
next question or the result. A call nobody comes back for is cancelled after `PARK_TTL_S` (the
upstream gets `notifications/cancelled`), and a client that cancels before the first question
cancels the call.
"""

from __future__ import annotations

import itertools
import math
import secrets
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog
import trio

from tfunnel.errors import ToolFailure
from tfunnel.gate.gated import NeedsInput
from tfunnel.route.peer import Progress, ServerRequests

log = structlog.get_logger("tfunnel.route")

# How long a parked call waits for the client's retry.
PARK_TTL_S = 300.0
REAP_EVERY_S = 5.0
QUESTION_PREFIX = "tfunnel/upstream-"

Work = Callable[[ServerRequests, Progress], Awaitable[dict[str, Any]]]


@dataclass
class _Question:
    key: str
    method: str
    params: dict[str, Any]
    answered: trio.Event = field(default_factory=trio.Event)
    answer: dict[str, Any] | None = None


@dataclass
class _Parked:
    id: str
    events: trio.MemorySendChannel[_Question | None]
    inbox: trio.MemoryReceiveChannel[_Question | None]
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    progress: Progress | None = None
    pending: _Question | None = None
    deadline: float = float("inf")
    result: dict[str, Any] | None = None
    error: BaseException | None = None


class Parking:
    def __init__(self, ttl_s: float = PARK_TTL_S) -> None:
        self._ttl_s = ttl_s
        self._calls: dict[str, _Parked] = {}
        self._nursery: trio.Nursery | None = None
        self._keys = itertools.count(1)

    def __len__(self) -> int:
        return len(self._calls)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._reaper)
            task_status.started()

    async def call(self, work: Work, progress: Progress | None) -> dict[str, Any] | NeedsInput:
        """Run `work` parked; its result, or `NeedsInput` (the question) when the upstream asks."""
        assert self._nursery is not None, "Parking.run is not running"
        # Unbounded: the call's task never blocks handing over a question or its end (several
        # questions may be asked at once; they are put to the client one per round).
        events, inbox = trio.open_memory_channel[_Question | None](math.inf)
        parked = _Parked(secrets.token_urlsafe(12), events, inbox, progress=progress)
        self._calls[parked.id] = parked
        self._nursery.start_soon(self._run, parked, work)
        return await self._next(parked)

    async def resume(self, parked_id: str, answers: Mapping[str, Any], progress: Progress | None,
                     ) -> dict[str, Any] | NeedsInput:
        """Hand the retry's answer to the parked call; its result, or its next question. A call
        that is gone is a `ToolFailure`."""
        parked = self._calls.get(parked_id)
        if parked is None or parked.pending is None:
            raise ToolFailure("the upstream call these answers belong to is not here (it finished, nobody "
                              f"answered within {self._ttl_s:g} s, or it waits in another instance behind "
                              "the same proxy); call the tool again")
        question = parked.pending
        answer = answers.get(question.key)
        if not isinstance(answer, dict):  # not answered: ask again (PROTOCOL.md §3.8)
            return NeedsInput(_requests(question), parked=parked.id)
        parked.progress = progress
        parked.pending = None
        parked.deadline = float("inf")
        question.answer = answer
        question.answered.set()
        return await self._next(parked)

    async def _next(self, parked: _Parked) -> dict[str, Any] | NeedsInput:
        try:
            question = await parked.inbox.receive()
        except trio.Cancelled:
            # The client gave up while the upstream worked: so does the upstream call.
            self._calls.pop(parked.id, None)
            parked.scope.cancel()
            raise
        if question is not None:
            parked.pending = question
            parked.progress = None  # this round's request is over; the retry brings its own
            parked.deadline = trio.current_time() + self._ttl_s
            return NeedsInput(_requests(question), parked=parked.id)
        self._calls.pop(parked.id, None)
        if parked.error is not None:
            raise parked.error
        assert parked.result is not None
        return parked.result

    async def _run(self, parked: _Parked, work: Work) -> None:
        async def ask(method: str, params: dict[str, Any]) -> dict[str, Any]:
            question = _Question(f"{QUESTION_PREFIX}{next(self._keys)}", method, params)
            await parked.events.send(question)
            await question.answered.wait()
            assert question.answer is not None
            return question.answer

        def progress(params: dict[str, Any]) -> None:
            if parked.progress is not None:
                parked.progress(params)

        with parked.scope:
            try:
                parked.result = await work(ask, progress)
            except ToolFailure as exc:
                parked.error = exc
        if parked.scope.cancelled_caught:
            parked.error = ToolFailure("the upstream call was cancelled")
        parked.events.send_nowait(None)  # unbounded: never blocks, even at shutdown

    async def _reaper(self) -> None:
        while True:
            await trio.sleep(REAP_EVERY_S)
            now = trio.current_time()
            for parked in list(self._calls.values()):
                if parked.pending is not None and parked.deadline <= now:
                    log.info("parked upstream call expired; cancelling it", ttl_s=self._ttl_s)
                    del self._calls[parked.id]
                    parked.scope.cancel()


def _requests(question: _Question) -> dict[str, Any]:
    return {question.key: {"method": question.method, "params": question.params}}
