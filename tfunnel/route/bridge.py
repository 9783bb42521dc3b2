"""One upstream tool call across the era line (PROTOCOL.md §9, "Bridges").

A modern upstream that answers `input_required` is handed to a modern client as it is
(`modern_call` returns `NeedsInput`, which the modern adapter seals into our own
`requestState`) or, for a legacy client, answered here (`legacy_call`): each input request goes
to the client as a real request when it can take one, else gets the declined default, and the
upstream is retried with the answers and its `requestState` echoed. A legacy upstream's own
server→client requests take the same path inside the upstream session (through the call's
`CallChannel`); for a modern client that can answer, its call is parked (`route.parking`) so
the question can wait for the client's retry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from tfunnel.errors import ProtocolError, ToolFailure, UpstreamRemoteError
from tfunnel.gate.gated import NeedsInput
from tfunnel.protocol.jsonrpc import METHOD_NOT_FOUND
from tfunnel.protocol.modern import MISSING_CLIENT_CAPABILITY
from tfunnel.protocol.session import DECLINED
from tfunnel.route.parking import Parking
from tfunnel.route.peer import Progress, ServerRequests
from tfunnel.surface.context import Upstreams
from tfunnel.upstream.call import UpstreamCall

# Rounds of questions one call may need before we stop retrying the upstream.
MAX_INPUT_ROUNDS = 10


@dataclass(frozen=True)
class Resume:
    """A modern client's retry of a call (MRTR): its answers, and where the call stood."""

    answers: Mapping[str, Any]
    # A modern upstream's own requestState to echo back ("" when it asked without one; None when
    # no upstream asked).
    upstream_state: str | None = None
    parked: str | None = None  # the id of a parked upstream call (`route.parking`)


async def legacy_call(upstreams: Upstreams, call: UpstreamCall, requests: ServerRequests | None,
                      progress: Progress | None) -> dict[str, Any]:
    """The upstream's complete `CallToolResult` for a legacy client, which answers the upstream's
    questions through `requests` (None: it cannot be asked, every question gets the declined
    default)."""
    for _ in range(MAX_INPUT_ROUNDS):
        wire = await upstreams.call_tool(call, relay(progress, requests))
        if wire.get("resultType") != "input_required":
            return wire
        questions, state = _questions(call, wire)
        answers = {key: await answer(requests, question) for key, question in questions.items()}
        call = replace(call, continuation={"inputResponses": answers,
                                           **({"requestState": state} if state else {})})
    raise ToolFailure(f"upstream {call.upstream!r} asked for input more than {MAX_INPUT_ROUNDS} times "
                      f"while running {call.tool!r}; the call was abandoned")


async def modern_call(upstreams: Upstreams, call: UpstreamCall, resume: Resume | None,
                      parking: Parking | None, progress: Progress | None) -> dict[str, Any] | NeedsInput:
    """The upstream's complete `CallToolResult` for a modern client, or its questions
    (`NeedsInput`) for the client to answer on its retry (`resume`)."""
    if resume is not None and resume.upstream_state is not None:
        # The upstream asked last round: its answers go back, with its state if it gave one.
        call = replace(call, continuation={
            "inputResponses": dict(resume.answers),
            **({"requestState": resume.upstream_state} if resume.upstream_state else {})})
    try:
        wire = await _modern_once(upstreams, call, resume, parking, progress)
    except UpstreamRemoteError as exc:
        if exc.code == MISSING_CLIENT_CAPABILITY:
            # The upstream needs something the client did not declare: the client must learn
            # it as the protocol error it is (-32021 with data.requiredCapabilities, HTTP 400).
            raise ProtocolError(exc.code, exc.remote_message, exc.data) from exc
        raise
    if isinstance(wire, NeedsInput) or wire.get("resultType") != "input_required":
        return wire
    questions, state = _questions(call, wire)
    # "" marks "the upstream asked, without a state of its own": the retry's answers must
    # still reach it.
    return NeedsInput(questions, upstream_state=state or "")


async def _modern_once(upstreams: Upstreams, call: UpstreamCall, resume: Resume | None,
                       parking: Parking | None, progress: Progress | None) -> dict[str, Any] | NeedsInput:
    """One upstream round. A modern client that can answer questions gets its call parked, so a
    legacy upstream's mid-call `elicitation/create` can wait for the client's retry."""
    if parking is not None:
        if resume is not None and resume.parked is not None:
            return await parking.resume(resume.parked, resume.answers, progress)
        if declared("elicitation/create", call.capabilities):
            async def parked(on_request: ServerRequests, on_progress: Progress) -> dict[str, Any]:
                async def asked(method: str, params: dict[str, Any]) -> dict[str, Any]:
                    if declared(method, call.capabilities):
                        return await on_request(method, params)
                    return declined(method)
                return await upstreams.call_tool(call, relay(on_progress, asked))

            return await parking.call(parked, progress)
    return await upstreams.call_tool(call, relay(progress, None))


def _questions(call: UpstreamCall, wire: Mapping[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The input requests of an `input_required` answer, and the upstream's state."""
    requests = wire.get("inputRequests") or {}
    state = wire.get("requestState")
    if not isinstance(requests, dict) or not (state is None or isinstance(state, str)):
        raise ToolFailure(f"upstream {call.upstream!r} answered {call.tool!r} with a malformed "
                          "input_required result")
    return requests, state


async def answer(requests: ServerRequests | None, request: Any) -> dict[str, Any]:
    """A legacy client's answer to one of an upstream's input requests."""
    method = request.get("method") if isinstance(request, dict) else None
    params = request.get("params") if isinstance(request, dict) else None
    if not isinstance(method, str):
        raise ToolFailure("an upstream sent an input request without a method")
    if requests is None:
        return declined(method)
    try:
        return await requests(method, params if isinstance(params, dict) else {})
    except ProtocolError as exc:
        raise ToolFailure(f"the client could not answer the upstream's {method}: {exc.message}") from exc


def declined(method: str) -> dict[str, Any]:
    """The answer when the client cannot be asked: an elicitation is declined, roots are none."""
    if method in DECLINED:
        return dict(DECLINED[method])
    raise ToolFailure(f"the upstream asked the client for {method!r}, which this client cannot answer")


CAPABILITY_OF = {"elicitation/create": "elicitation", "sampling/createMessage": "sampling",
                 "roots/list": "roots"}


def declared(method: str, capabilities: Mapping[str, Any]) -> bool:
    """Whether the client declared what `method` asks of it."""
    capability = CAPABILITY_OF.get(method)
    return capability is not None and isinstance(capabilities.get(capability), Mapping)


def relay(progress: Progress | None, requests: ServerRequests | None) -> _Relay | None:
    """The `CallChannel` of one upstream call (None when there is nothing to relay or answer)."""
    return _Relay(progress, requests) if progress or requests else None


class _Relay:
    """The caller's side of one upstream call (`upstream.call.CallChannel`): progress relayed,
    questions answered (or declined)."""

    def __init__(self, on_progress: Progress | None, on_request: ServerRequests | None) -> None:
        self._on_progress = on_progress
        self._on_request = on_request
        self.answers = on_request is not None

    def progress(self, params: dict[str, Any]) -> None:
        if self._on_progress is not None:
            self._on_progress(params)

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if self._on_request is None:
            if method in DECLINED:
                return dict(DECLINED[method])
            raise ProtocolError(METHOD_NOT_FOUND, f"Method not found: {method}")
        return await self._on_request(method, params)
