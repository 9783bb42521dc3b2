"""What a tool call carries through the surface: who calls, and how to reach them and upstreams."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from tfunnel.gate.gated import AskUser
from tfunnel.upstream.call import CallChannel, UpstreamCall

Progress = Callable[[dict[str, Any]], None]
ServerRequests = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class Resume:
    """A modern client's retry of a call (MRTR): its answers, and where the call stood."""

    answers: Mapping[str, Any]
    # A modern upstream's own requestState to echo back ("" when it asked without one; None when
    # no upstream asked).
    upstream_state: str | None = None
    parked: str | None = None  # the id of a parked upstream call (`surface.parking`)


@dataclass(frozen=True)
class CallContext:
    """Who is calling: the client session, the request, how to ask its user and how to report
    progress to it (each only when the client can take it), and its `_meta` to forward."""

    session_id: str = ""
    call_id: str = ""
    ask_user: AskUser | None = None
    progress: Progress | None = None
    meta: Mapping[str, Any] | None = None
    # The client's era and what an upstream may ask of it (the bridges of PROTOCOL.md §9):
    # a modern client answers an upstream's questions on its retry (`InputRequired`), a legacy
    # one through `server_requests` (real requests to it, or the declined defaults).
    modern: bool = False
    bridged_capabilities: Mapping[str, Any] = field(default_factory=dict)
    log_level: str | None = None
    resume: Resume | None = None
    server_requests: ServerRequests | None = None


class Upstreams(Protocol):
    async def call_tool(self, call: UpstreamCall, channel: CallChannel | None = None) -> dict[str, Any]: ...


class SupervisedUpstreams(Upstreams, Protocol):
    """Upstreams that come up in the background: a call may wait for the one it needs."""

    def unready_owner(self, name: str) -> str | None:
        """The upstream that would surface a tool as `name` once up, if it is not ready now."""

    async def wait_ready(self, upstream_id: str) -> str | None:
        """Wait (bounded) while `upstream_id` comes up; None once ready, else why it is not."""
