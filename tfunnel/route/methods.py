"""The one method table: what each method means, the same in both eras.

The era adapters (`route.legacy`, `route.modern`) handle what only their era has (`initialize`,
`server/discover`, `subscriptions/listen`), then hand every other request here with their
`CallSite`: the per-request piece of a `tools/call` that differs by era (its call context, and
how the outcome goes on the wire).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from tfunnel.errors import ProtocolError
from tfunnel.gate.gated import NeedsInput, Outcome
from tfunnel.protocol.eras import Era
from tfunnel.protocol.jsonrpc import INVALID_PARAMS, METHOD_NOT_FOUND
from tfunnel.protocol.results import ToolResult
from tfunnel.route.channel import BRIDGED, WRAPPED
from tfunnel.surface.context import CallContext
from tfunnel.surface.profiles import Chosen
from tfunnel.surface.reads import Reader, Reads

INSTRUCTIONS = (
    "This gateway keeps its tools behind four meta-tools. Call toolfunnel_list_tools (use "
    "`query` to search) to find a tool, toolfunnel_tool_instructions to learn its arguments, "
    "and toolfunnel_run_tool to run it. toolfunnel_howto explains how to extend the gateway."
)

BOTH = frozenset(Era)
# Methods an era adapter owns (or that one era has no more): never the wrapped upstream's to answer.
OWNED = frozenset({"initialize", "ping", "server/discover", "subscriptions/listen", "logging/setLevel",
                   "resources/subscribe", "resources/unsubscribe"})
# What is never forwarded, however it is spelled: notifications sent as requests, anything in the
# tools namespace (every tool call passes the gate), a server's own requests to a client, and
# tasks (which tfunnel does not carry).
_NEVER_FORWARDED = ("notifications/", "tools/", "tasks/", "sampling/", "elicitation/", "roots/")


def forwardable(method: str) -> bool:
    """Whether a method tfunnel has no meaning for may go to the wrapped upstream (pure): not
    one of ours in another spelling, nor in a namespace that must pass the gate or is not a
    client's to send."""
    folded = method.lower()
    return not folded.startswith(_NEVER_FORWARDED) and folded not in _KNOWN_FOLDED
# The modern era has no `ping` (PROTOCOL.md §3): it is stateless, there is nothing to keep alive.
LEGACY_ONLY = frozenset({Era.LEGACY})


class Tools(Protocol):
    """What the table needs of the surface (`surface.service.Surface`)."""

    def list_tools(self, ctx: CallContext | None = None) -> list[dict[str, Any]]: ...

    def instructed(self, ctx: CallContext, instructions: str) -> None: ...

    def end_session(self, session_id: str) -> None: ...

    async def call(self, name: str, args: Any, ctx: CallContext) -> Outcome: ...


class CallSite(Protocol):
    """An era adapter's part of one `tools/call`."""

    @property
    def profile(self) -> Chosen | None:
        """The caller's profile (`surface.profiles.choose`), for its lists."""

    def context(self) -> CallContext:
        """The call's context (raises `ProtocolError` for params only this era has, malformed)."""

    def finish(self, name: str, outcome: ToolResult | NeedsInput) -> dict[str, Any]:
        """The call's result object on the wire."""

    def reader(self) -> Reader:
        """Who reads, for a prompts/get, resources/read or completion/complete."""

    def view(self, name: str, outcome: dict[str, Any] | NeedsInput) -> dict[str, Any]:
        """A read's outcome as this era's client gets it: an upstream's result (of any era), or
        the gate's question (a modern client answers it on its retry)."""


Handler = Callable[[Mapping[str, Any], CallSite], Awaitable[dict[str, Any]]]


# Every method the table or an adapter answers, case-folded.
_KNOWN_FOLDED = frozenset(m.lower() for m in (
    *OWNED, "tools/list", "tools/call", "prompts/list", "prompts/get", "resources/list", "resources/read",
    "resources/templates/list", "completion/complete"))


class Methods:
    """method → era-neutral handler."""

    def __init__(self, surface: Tools, reads: Reads) -> None:
        self._surface = surface
        self._reads = reads
        self.table: Mapping[str, tuple[frozenset[Era], Handler]] = {
            "ping": (LEGACY_ONLY, self._ping),
            "tools/list": (BOTH, self._list),
            "tools/call": (BOTH, self._call),
            "prompts/list": (BOTH, lambda params, site: self._lists(reads.list_prompts, params, site)),
            "resources/list": (BOTH, lambda params, site: self._lists(reads.list_resources, params, site)),
            "resources/templates/list": (BOTH, lambda params, site: self._lists(reads.list_templates,
                                                                                 params, site)),
            "prompts/get": (BOTH, self._read(reads.get_prompt)),
            "resources/read": (BOTH, self._read(reads.read_resource)),
            "completion/complete": (BOTH, self._read(reads.complete)),
        }

    def instructed(self, ctx: CallContext, instructions: str) -> None:
        """A client was given `instructions` (token telemetry)."""
        self._surface.instructed(ctx, instructions)

    def ended(self, session_id: str) -> None:
        """A client session ended (token telemetry settles its last search)."""
        self._surface.end_session(session_id)

    def bridged(self) -> tuple[str, ...]:
        """The client capabilities an upstream call declares for its caller (`route.channel`)."""
        return WRAPPED if self._reads.wrapped() is not None else BRIDGED

    async def handle(self, era: Era, method: str, params: Mapping[str, Any],
                     site: CallSite) -> dict[str, Any]:
        """The result of `method` in `era`; raises `ProtocolError` (-32601 for a method `era`
        does not serve, -32602 for bad params)."""
        entry = self.table.get(method)
        if entry is not None and era in entry[0]:
            return await entry[1](params, site)
        if entry is None and forwardable(method) and self._reads.wrapped() is not None:
            # A method tfunnel has no meaning for: the wrapped upstream's own.
            return site.view(method, await self._reads.forward(method, params, site.reader()))
        raise ProtocolError(METHOD_NOT_FOUND, f"Method not found: {method}")

    @staticmethod
    async def _lists(lister: Callable[[Any, Chosen | None], dict[str, Any]], params: Mapping[str, Any],
                     site: CallSite) -> dict[str, Any]:
        return lister(params.get("cursor"), site.profile)

    @staticmethod
    def _read(reader: Callable[[Mapping[str, Any], Reader], Awaitable[dict[str, Any] | NeedsInput]],
              ) -> Handler:
        async def handle(params: Mapping[str, Any], site: CallSite) -> dict[str, Any]:
            name = params.get("name", params.get("uri"))
            return site.view(name if isinstance(name, str) else "", await reader(params, site.reader()))
        return handle

    async def _ping(self, params: Mapping[str, Any], site: CallSite) -> dict[str, Any]:
        return {}

    async def _list(self, params: Mapping[str, Any], site: CallSite) -> dict[str, Any]:
        if params.get("cursor") is not None:  # one page: no cursor was ever handed out
            raise ProtocolError(INVALID_PARAMS, "Invalid params: unknown cursor")
        return {"tools": self._surface.list_tools(site.context())}

    async def _call(self, params: Mapping[str, Any], site: CallSite) -> dict[str, Any]:
        name = params.get("name")
        if not isinstance(name, str) or not name:
            raise ProtocolError(INVALID_PARAMS, 'Invalid params: "name" must be a non-empty string')
        ctx = site.context()
        outcome = await self._surface.call(name, params.get("arguments") or {}, ctx)
        return site.finish(name, outcome)
