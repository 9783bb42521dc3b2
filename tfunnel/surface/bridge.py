"""One upstream tool call across the era line (PROTOCOL.md §9, "Bridges").

A modern upstream that answers `input_required` is either handed to a modern client as it is
(`InputRequired`, which the router seals into our own `requestState`) or, for a legacy client,
answered here: each input request goes to the client as a real request when it declared the
capability (`CallContext.server_requests`), else gets the declined default, and the upstream is
retried with the answers and its `requestState` echoed. A legacy upstream's own server→client
requests take the same `server_requests` path inside the upstream session.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tfunnel.errors import InputRequired, ProtocolError, ToolFailure, UpstreamRemoteError
from tfunnel.protocol.jsonrpc import METHOD_NOT_FOUND
from tfunnel.protocol.modern import MISSING_CLIENT_CAPABILITY
from tfunnel.protocol.session import DECLINED
from tfunnel.surface.context import CallContext, Progress, ServerRequests, Upstreams
from tfunnel.surface.parking import Parking
from tfunnel.surface.upstream_tools import UpstreamTool
from tfunnel.upstream.call import UpstreamCall

# Rounds of questions one call may need before we stop retrying the upstream.
MAX_INPUT_ROUNDS = 10


async def call(upstreams: Upstreams, tool: UpstreamTool, args: Mapping[str, Any], ctx: CallContext,
               parking: Parking | None = None) -> dict[str, Any]:
    """The upstream's complete `CallToolResult` (raises `InputRequired` for a modern client)."""
    resume = ctx.resume
    extra: dict[str, Any] | None = None
    if resume is not None and resume.upstream_state is not None:
        # The upstream asked last round: its answers go back, with its state if it gave one.
        extra = {"inputResponses": dict(resume.answers),
                 **({"requestState": resume.upstream_state} if resume.upstream_state else {})}
    for _ in range(MAX_INPUT_ROUNDS):
        try:
            wire = await _once(upstreams, tool, args, ctx, extra, parking)
        except UpstreamRemoteError as exc:
            if ctx.modern and exc.code == MISSING_CLIENT_CAPABILITY:
                # The upstream needs something the client did not declare: the client must learn
                # it as the protocol error it is (-32021 with data.requiredCapabilities, HTTP 400).
                raise ProtocolError(exc.code, exc.remote_message, exc.data) from exc
            raise
        if wire.get("resultType") != "input_required":
            return wire
        requests = wire.get("inputRequests") or {}
        state = wire.get("requestState")
        if not isinstance(requests, dict) or not (state is None or isinstance(state, str)):
            raise ToolFailure(f"upstream {tool.upstream!r} answered {tool.tool!r} with a malformed "
                              "input_required result")
        if ctx.modern:
            # "" marks "the upstream asked, without a state of its own": the retry's answers
            # must still reach it.
            raise InputRequired(requests, upstream_state=state or "")
        answers = {key: await answer(ctx, request) for key, request in requests.items()}
        extra = {"inputResponses": answers, **({"requestState": state} if state else {})}
    raise ToolFailure(f"upstream {tool.upstream!r} asked for input more than {MAX_INPUT_ROUNDS} times "
                      f"while running {tool.tool!r}; the call was abandoned")


async def _once(upstreams: Upstreams, tool: UpstreamTool, args: Mapping[str, Any], ctx: CallContext,
                extra: Mapping[str, Any] | None, parking: Parking | None) -> dict[str, Any]:
    """One upstream round. A modern client that can answer questions gets its call parked, so a
    legacy upstream's mid-call `elicitation/create` can wait for the client's retry."""
    call = UpstreamCall(tool.upstream, tool.tool, args, ctx.meta, ctx.bridged_capabilities, ctx.log_level,
                        extra)

    async def run(on_request: ServerRequests | None, on_progress: Progress | None) -> dict[str, Any]:
        channel = _Channel(on_progress, on_request) if on_request or on_progress else None
        return await upstreams.call_tool(call, channel)

    if ctx.modern and parking is not None:
        if ctx.resume is not None and ctx.resume.parked is not None:
            return await parking.resume(ctx.resume.parked, ctx.resume.answers, ctx.progress)
        if declared("elicitation/create", ctx.bridged_capabilities):
            async def parked(on_request: ServerRequests, on_progress: Progress) -> dict[str, Any]:
                async def asked(method: str, params: dict[str, Any]) -> dict[str, Any]:
                    if declared(method, ctx.bridged_capabilities):
                        return await on_request(method, params)
                    return declined(method)
                return await run(asked, on_progress)

            return await parking.call(parked, ctx.progress)
    return await run(ctx.server_requests, ctx.progress)


async def answer(ctx: CallContext, request: Any) -> dict[str, Any]:
    """A legacy client's answer to one of an upstream's input requests."""
    method = request.get("method") if isinstance(request, dict) else None
    params = request.get("params") if isinstance(request, dict) else None
    if not isinstance(method, str):
        raise ToolFailure("an upstream sent an input request without a method")
    if ctx.server_requests is None:
        return declined(method)
    try:
        return await ctx.server_requests(method, params if isinstance(params, dict) else {})
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


class _Channel:
    """The caller's side of one upstream call: progress relayed, questions answered (or declined)."""

    def __init__(self, on_progress: Progress | None, on_request: ServerRequests | None) -> None:
        self._on_progress = on_progress
        self._on_request = on_request

    def progress(self, params: dict[str, Any]) -> None:
        if self._on_progress is not None:
            self._on_progress(params)

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if self._on_request is None:
            if method in DECLINED:
                return dict(DECLINED[method])
            raise ProtocolError(METHOD_NOT_FOUND, f"Method not found: {method}")
        return await self._on_request(method, params)
