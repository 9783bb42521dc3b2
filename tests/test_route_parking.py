"""Parked upstream calls between MRTR rounds (`route.parking`), under a MockClock."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from tfunnel.errors import ToolFailure
from tfunnel.gate.gated import NeedsInput
from tfunnel.route.parking import PARK_TTL_S, Parking
from tfunnel.route.peer import Progress, ServerRequests

pytestmark = [pytest.mark.trio_clock, pytest.mark.timeout(30)]

QUESTION = {"message": "Sure?", "requestedSchema": {"type": "object", "properties": {}}}


async def test_a_question_parks_the_call_and_the_answer_completes_it() -> None:
    """The upstream's question comes back as a value naming the parked call; the answer, handed
    over on the retry, completes it (a retry without it is asked again; a finished call is gone)."""
    parking = Parking()
    async with trio.open_nursery() as nursery:
        await nursery.start(parking.run)

        async def work(ask: ServerRequests, progress: Progress) -> dict[str, Any]:
            answer = await ask("elicitation/create", QUESTION)
            return {"content": [{"type": "text", "text": answer["action"]}]}

        with trio.fail_after(5):
            first = await parking.call(work, None)
            assert isinstance(first, NeedsInput) and first.parked is not None
            (key, request), = first.requests.items()
            assert request == {"method": "elicitation/create", "params": QUESTION}
            assert len(parking) == 1
            again = await parking.resume(first.parked, {}, None)  # no answer: asked again
            assert isinstance(again, NeedsInput) and again.requests == first.requests
            done = await parking.resume(first.parked, {key: {"action": "accept"}}, None)
            assert isinstance(done, dict)
            assert done["content"][0]["text"] == "accept" and len(parking) == 0
            with pytest.raises(ToolFailure, match=r"is not here .*call the tool again"):
                await parking.resume(first.parked, {key: {"action": "accept"}}, None)
        nursery.cancel_scope.cancel()


async def test_two_questions_and_no_client_expire_without_wedging_shutdown() -> None:
    """Two questions at once, nobody comes back: the TTL cancels the call, and the parking's
    nursery still ends when cancelled (nothing blocks in a shielded hand-over)."""
    parking = Parking()
    cancelled = trio.Event()
    with trio.fail_after(PARK_TTL_S * 3):
        async with trio.open_nursery() as nursery:
            await nursery.start(parking.run)

            async def work(ask: ServerRequests, progress: Progress) -> dict[str, Any]:
                try:
                    async with trio.open_nursery() as both:
                        both.start_soon(ask, "elicitation/create", QUESTION)
                        both.start_soon(ask, "elicitation/create", QUESTION)
                finally:
                    cancelled.set()  # the asks never end by themselves: only a cancel gets here
                return {}

            assert isinstance(await parking.call(work, None), NeedsInput)
            await trio.sleep(PARK_TTL_S + 10)
            assert cancelled.is_set() and len(parking) == 0
            nursery.cancel_scope.cancel()


async def test_a_client_that_gives_up_before_a_question_cancels_the_call() -> None:
    """A client cancelling before the upstream asked anything cancels the parked call too."""
    parking = Parking()
    cancelled = trio.Event()
    async with trio.open_nursery() as nursery:
        await nursery.start(parking.run)

        async def work(ask: ServerRequests, progress: Progress) -> dict[str, Any]:
            try:
                await trio.sleep_forever()
            finally:
                cancelled.set()

        with trio.move_on_after(1):
            await parking.call(work, None)
        await cancelled.wait()
        assert len(parking) == 0  # nothing left behind
        nursery.cancel_scope.cancel()
