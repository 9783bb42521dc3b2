"""What a tool call carries through the surface: who calls, and the caller's channel.

The channel is built by the caller's era adapter (`tfunnel.route.channel`, one legacy and one
modern implementation); the surface calls it without knowing the era.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from tfunnel.config.model import ToolEntry
from tfunnel.errors import ToolFailure
from tfunnel.gate.gated import AskUser, NeedsInput
from tfunnel.protocol.results import ToolResult
from tfunnel.upstream.call import CallChannel, UpstreamCall


class Upstreams(Protocol):
    async def call_tool(self, call: UpstreamCall, channel: CallChannel | None = None) -> dict[str, Any]: ...


class SupervisedUpstreams(Upstreams, Protocol):
    """Upstreams that come up in the background: a call may wait for the one it needs."""

    def unready_owner(self, name: str) -> str | None:
        """The upstream that would surface a tool as `name` once up, if it is not ready now."""

    async def wait_ready(self, upstream_id: str) -> str | None:
        """Wait (bounded) while `upstream_id` comes up; None once ready, else why it is not."""


class Builtins(Protocol):
    """The management tools (`invoke: {"type": "builtin"}`), run in-process (`tfunnel.manage`)."""

    async def run(self, entry: ToolEntry, args: Mapping[str, Any], session_id: str,
                  ask: AskUser | None) -> ToolResult | NeedsInput:
        """Run `entry`'s operation; `ask` puts a confirmation to the caller's user (None: it cannot
        be asked). A confirmation still to be answered (a modern client's round) is `NeedsInput`."""


class NoBuiltins:
    """Where no management operations are wired in (tests of other parts)."""

    async def run(self, entry: ToolEntry, args: Mapping[str, Any], session_id: str,
                  ask: AskUser | None) -> ToolResult | NeedsInput:
        raise ToolFailure(f"{entry.id!r} is a management tool, which this gateway does not run")


class ClientChannel(Protocol):
    """The caller's side of one tool call: how the gate asks its user, and how one upstream call
    crosses the era line (the caller's `_meta`, capabilities and log level go with it; its
    progress is relayed and an upstream's questions answered, or handed back as `NeedsInput`)."""

    @property
    def ask_user(self) -> AskUser | None:
        """The gate's `ask`, when the client can be asked (else the gate uses gate.askFallback)."""

    async def call_upstream(self, upstreams: Upstreams, upstream: str, tool: str,
                            arguments: Mapping[str, Any]) -> dict[str, Any] | NeedsInput:
        """The upstream's complete `CallToolResult`, or the questions the client must answer."""


class Direct:
    """The channel of a caller that can be neither asked nor told anything (the CLI): upstream
    calls go out plain, and an upstream's own requests get the session's declined defaults."""

    ask_user: AskUser | None = None

    async def call_upstream(self, upstreams: Upstreams, upstream: str, tool: str,
                            arguments: Mapping[str, Any]) -> dict[str, Any] | NeedsInput:
        return await upstreams.call_tool(UpstreamCall(upstream, tool, arguments))


@dataclass(frozen=True)
class CallContext:
    """Who is calling (the client session, the request) and the caller's channel (None: the
    surface's default channel)."""

    session_id: str = ""
    call_id: str = ""
    channel: ClientChannel | None = None
    profile: str = "default"
