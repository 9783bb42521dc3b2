"""One upstream call across the era line (`route.bridge`), against a scripted upstream."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from tfunnel.errors import ProtocolError, ToolFailure, UpstreamRemoteError
from tfunnel.gate.gated import NeedsInput
from tfunnel.protocol.jsonrpc import METHOD_NOT_FOUND
from tfunnel.route import bridge
from tfunnel.route.bridge import Resume
from tfunnel.route.channel import server_requests
from tfunnel.upstream.call import CallChannel, UpstreamCall

pytestmark = pytest.mark.timeout(30)

CALL = UpstreamCall("up", "ask", {})
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
    """A modern upstream's question reaches a modern client as a value; the retry's answers (and
    the upstream's state, when it gave one) go back to the upstream."""
    asked = {"resultType": "input_required", "inputRequests": QUESTION,
             **({"requestState": state} if state else {})}
    upstream = Scripted(asked, DONE)
    first = await bridge.modern_call(upstream, CALL, None, None, None)
    assert isinstance(first, NeedsInput) and first.requests == QUESTION
    assert first.upstream_state == (state or "")  # "" still means "the upstream asked"
    retry = Resume({"q": {"action": "accept"}}, first.upstream_state)
    assert await bridge.modern_call(upstream, CALL, retry, None, None) == DONE
    expected: dict[str, Any] = {"inputResponses": {"q": {"action": "accept"}}}
    if state:
        expected["requestState"] = state
    assert upstream.extras == [None, expected]


async def test_a_legacy_client_answers_through_server_requests_and_the_upstream_is_retried() -> None:
    """A legacy client answers the upstream's question with a real request; the upstream is
    retried with the answer and its state."""
    asked = {"resultType": "input_required", "inputRequests": QUESTION, "requestState": "s1"}
    upstream = Scripted(asked, DONE)
    seen: list[tuple[str, dict[str, Any]]] = []

    async def answer(method: str, params: dict[str, Any]) -> dict[str, Any]:
        seen.append((method, params))
        return {"action": "accept", "content": {}}

    assert await bridge.legacy_call(upstream, CALL, answer, None) == DONE
    assert seen == [("elicitation/create", {"message": "Sure?"})]
    assert upstream.extras[1] == {"inputResponses": {"q": {"action": "accept", "content": {}}},
                                  "requestState": "s1"}


async def test_a_legacy_client_that_cannot_be_asked_declines() -> None:
    """A legacy client that cannot be asked declines the upstream's elicitation."""
    upstream = Scripted({"resultType": "input_required", "inputRequests": QUESTION}, DONE)
    assert await bridge.legacy_call(upstream, CALL, None, None) == DONE
    assert upstream.extras[1] == {"inputResponses": {"q": {"action": "decline"}}}


async def test_an_upstream_that_never_stops_asking_is_abandoned() -> None:
    """An upstream still asking after MAX_INPUT_ROUNDS rounds fails the call."""
    asked = {"resultType": "input_required", "inputRequests": QUESTION}
    upstream = Scripted(*[asked] * bridge.MAX_INPUT_ROUNDS)
    with pytest.raises(ToolFailure, match="more than"):
        await bridge.legacy_call(upstream, CALL, None, None)


@pytest.mark.parametrize(("modern", "raised"), [(True, ProtocolError), (False, UpstreamRemoteError)])
async def test_missing_capability_is_a_protocol_error_only_for_a_modern_client(
    modern: bool, raised: type[Exception]
) -> None:
    """An upstream's -32021 reaches a modern client as that protocol error, a legacy one as a
    tool failure."""
    refusal = UpstreamRemoteError("upstream 'up' answered tools/call with an error: needs sampling",
                                  code=-32021, remote_message="needs sampling",
                                  data={"requiredCapabilities": {"sampling": {}}})
    with pytest.raises(raised) as caught:
        if modern:
            await bridge.modern_call(Scripted(refusal), CALL, None, None, None)
        else:
            await bridge.legacy_call(Scripted(refusal), CALL, None, None)
    if modern:
        assert isinstance(caught.value, ProtocolError) and caught.value.code == -32021
        assert caught.value.data == {"requiredCapabilities": {"sampling": {}}}


@pytest.mark.parametrize(("method", "answer"), [
    ("elicitation/create", {"action": "decline"}),
    ("roots/list", {"roots": []}),
    ("sampling/createMessage", METHOD_NOT_FOUND),
])
async def test_a_legacy_client_that_did_not_declare_a_capability_is_not_asked(method: str,
                                                                             answer: Any) -> None:
    """What it did not declare gets the declined default, or -32601 where there is none (what a
    client without the capability answers), and the client is never asked."""
    class Unasked:
        can_request = True

        async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
            raise AssertionError("the client was asked")

    forward = server_requests({}, Unasked())  # type: ignore[arg-type]
    if isinstance(answer, int):
        with pytest.raises(ProtocolError) as raised:
            await forward(method, {})
        assert raised.value.code == answer
    else:
        assert await forward(method, {}) == answer
