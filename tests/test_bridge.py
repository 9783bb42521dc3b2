"""One upstream call across the era line (`surface.bridge`), against a scripted upstream."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from tfunnel.errors import InputRequired, ProtocolError, ToolFailure, UpstreamRemoteError
from tfunnel.surface import bridge
from tfunnel.surface.context import CallContext, Resume
from tfunnel.surface.upstream_tools import UpstreamTool
from tfunnel.upstream.call import CallChannel, UpstreamCall

TOOL = UpstreamTool(surfaced="up_ask", upstream="up", tool="ask", definition={"name": "ask"})
QUESTION = {"q": {"method": "elicitation/create", "params": {"message": "Sure?"}}}


class Scripted:
    """An `Upstreams` answering each call with the next scripted result (or raising it)."""

    def __init__(self, *answers: dict[str, Any] | Exception) -> None:
        self.answers = list(answers)
        self.extras: list[Mapping[str, Any] | None] = []

    async def call_tool(self, call: UpstreamCall, channel: CallChannel | None = None) -> dict[str, Any]:
        self.extras.append(call.continuation)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


DONE = {"content": [{"type": "text", "text": "done"}]}


@pytest.mark.parametrize("state", ["s1", None], ids=["with-state", "stateless"])
async def test_a_modern_client_gets_the_question_and_its_retry_reaches_the_upstream(
    state: str | None,
) -> None:
    asked = {"resultType": "input_required", "inputRequests": QUESTION,
             **({"requestState": state} if state else {})}
    upstream = Scripted(asked, DONE)
    with pytest.raises(InputRequired) as raised:
        await bridge.call(upstream, TOOL, {}, CallContext(modern=True))
    assert raised.value.requests == QUESTION
    assert raised.value.upstream_state == (state or "")  # "" still means "the upstream asked"
    retry = CallContext(modern=True, resume=Resume({"q": {"action": "accept"}}, raised.value.upstream_state))
    assert await bridge.call(upstream, TOOL, {}, retry) == DONE
    expected: dict[str, Any] = {"inputResponses": {"q": {"action": "accept"}}}
    if state:
        expected["requestState"] = state
    assert upstream.extras == [None, expected]


async def test_a_legacy_client_answers_through_server_requests_and_the_upstream_is_retried() -> None:
    asked = {"resultType": "input_required", "inputRequests": QUESTION, "requestState": "s1"}
    upstream = Scripted(asked, DONE)
    seen: list[tuple[str, dict[str, Any]]] = []

    async def answer(method: str, params: dict[str, Any]) -> dict[str, Any]:
        seen.append((method, params))
        return {"action": "accept", "content": {}}

    assert await bridge.call(upstream, TOOL, {}, CallContext(server_requests=answer)) == DONE
    assert seen == [("elicitation/create", {"message": "Sure?"})]
    assert upstream.extras[1] == {"inputResponses": {"q": {"action": "accept", "content": {}}},
                                  "requestState": "s1"}


async def test_a_legacy_client_that_cannot_be_asked_declines() -> None:
    upstream = Scripted({"resultType": "input_required", "inputRequests": QUESTION}, DONE)
    assert await bridge.call(upstream, TOOL, {}, CallContext()) == DONE
    assert upstream.extras[1] == {"inputResponses": {"q": {"action": "decline"}}}


async def test_an_upstream_that_never_stops_asking_is_abandoned() -> None:
    asked = {"resultType": "input_required", "inputRequests": QUESTION}
    upstream = Scripted(*[asked] * bridge.MAX_INPUT_ROUNDS)
    with pytest.raises(ToolFailure, match="more than"):
        await bridge.call(upstream, TOOL, {}, CallContext())


@pytest.mark.parametrize(("modern", "raised"), [(True, ProtocolError), (False, UpstreamRemoteError)])
async def test_missing_capability_is_a_protocol_error_only_for_a_modern_client(
    modern: bool, raised: type[Exception]
) -> None:
    refusal = UpstreamRemoteError("upstream 'up' answered tools/call with an error: needs sampling",
                                  code=-32021, remote_message="needs sampling",
                                  data={"requiredCapabilities": {"sampling": {}}})
    with pytest.raises(raised) as caught:
        await bridge.call(Scripted(refusal), TOOL, {}, CallContext(modern=modern))
    if modern:
        assert isinstance(caught.value, ProtocolError) and caught.value.code == -32021
        assert caught.value.data == {"requiredCapabilities": {"sampling": {}}}
