"""`tools/list` and `tools/call` in funnel mode: the four meta-tools and hot local tools.

Every execution goes through `gated_run`. `call` is the one place where a `ToolFailure` becomes
an `isError` result.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from tfunnel.audit import AuditLog
from tfunnel.config.model import META_TOOL_NAMES, ToolEntry
from tfunnel.errors import GateDenied, ProtocolError, ToolFailure
from tfunnel.gate.gated import AskUser, Gate, ToolCall, gated_run
from tfunnel.protocol.jsonrpc import INVALID_PARAMS
from tfunnel.protocol.results import ToolResult
from tfunnel.surface import meta
from tfunnel.surface.catalog import Catalog
from tfunnel.surface.validation import validate_args

log = structlog.get_logger("tfunnel.surface")


@dataclass(frozen=True)
class CallContext:
    """Who is calling: the client session, the request, and how to ask its user (if possible)."""

    session_id: str = ""
    call_id: str = ""
    ask_user: AskUser | None = None


class LocalTools(Protocol):
    async def run(self, entry: ToolEntry, args: Mapping[str, Any]) -> ToolResult: ...


class Surface:
    def __init__(self, catalog: Callable[[], Catalog], gate: Callable[[], Gate], local: LocalTools,
                 audit: AuditLog) -> None:
        self._catalog = catalog
        self._gate = gate
        self._local = local
        self._audit = audit

    def list_tools(self) -> list[dict[str, Any]]:
        return self._catalog().top_level(meta.DEFINITIONS)

    async def call(self, name: str, args: Any, ctx: CallContext) -> ToolResult:
        """`tools/call`. An unknown or unpromoted top-level name is a protocol error (-32602)."""
        catalog = self._catalog()
        if not isinstance(args, dict):
            raise ProtocolError(INVALID_PARAMS, 'Invalid params: "arguments" must be an object')
        if catalog.meta_callable(name):
            return await self._guarded(self._meta(catalog, name, args, ctx))
        entry = catalog.hot_local(name)
        if entry is not None:
            return await self._guarded(self._run_local(entry, args, ctx))
        raise ProtocolError(INVALID_PARAMS, f"Unknown tool: {name}")

    async def run_named(self, name: str, args: dict[str, Any], ctx: CallContext) -> ToolResult:
        """Run any meta-tool or enabled tool by name, promoted or not (`tfunnel call`)."""
        catalog = self._catalog()
        if name in META_TOOL_NAMES:
            if not catalog.visibility(name, "meta").enabled:
                return ToolResult.failure(f"meta-tool {name!r} is disabled")
            return await self._guarded(self._meta(catalog, name, args, ctx))

        async def local() -> ToolResult:
            return await self._run_local(self._runnable(catalog, name), args, ctx)

        return await self._guarded(local())

    @staticmethod
    async def _guarded(work: Awaitable[ToolResult]) -> ToolResult:
        """The one place a `ToolFailure` becomes an `isError` result."""
        try:
            return await work
        except GateDenied as exc:
            log.info("call denied", reason=exc.reason, internal=exc.internal)
            return ToolResult.failure(str(exc), denied=True)
        except ToolFailure as exc:
            return ToolResult.failure(str(exc))

    async def _meta(self, catalog: Catalog, name: str, args: dict[str, Any], ctx: CallContext) -> ToolResult:
        validate_args(name, meta.DEFINITIONS[name]["inputSchema"], args)
        if name == meta.LIST_TOOLS:
            briefs = catalog.briefs(filter=args.get("filter", ""), category=args.get("category", ""),
                                    query=args.get("query", ""), limit=args.get("limit"))
            return ToolResult(content=({"type": "text", "text": json.dumps(briefs, ensure_ascii=False)},),
                              structured={"tools": briefs})
        if name == meta.TOOL_INSTRUCTIONS:
            return ToolResult.text(self._instructions(catalog, args["name"]))
        if name == meta.HOWTO:
            return ToolResult.text(meta.howto_text(args["topic"]))
        entry = self._runnable(catalog, args["name"])
        return await self._run_local(entry, args.get("args") or {}, ctx)

    def _runnable(self, catalog: Catalog, name: str) -> ToolEntry:
        entry = catalog.find_local(name)
        if entry is None:
            raise ToolFailure(f"no tool named {name!r}; toolfunnel_list_tools lists the tools you can use")
        if catalog.enabled_local(name) is None:
            raise ToolFailure(f"tool {name!r} is disabled; an operator can enable it with "
                              f"`tfunnel tool enable {entry.id}`")
        return entry

    def _instructions(self, catalog: Catalog, name: str) -> str:
        entry = self._runnable(catalog, name)
        if entry.instructions.strip():
            return entry.instructions
        return meta.synthesized_instructions(entry.id, entry.name, entry.summary, entry.input_schema)

    async def _run_local(self, entry: ToolEntry, args: dict[str, Any], ctx: CallContext) -> ToolResult:
        validate_args(entry.id, entry.input_schema, args)
        call = ToolCall(surfaced=entry.id, tool_id=entry.id, display=entry.name, args=args,
                        mode=entry.mode, session_id=ctx.session_id, call_id=ctx.call_id,
                        ask_user=ctx.ask_user)
        if entry.mode == "reference":
            # Nothing runs here: the client performs the action. The hand-over itself is gated.
            async def hand_over(_: Mapping[str, Any]) -> ToolResult:
                self._audit.record("tool", name=entry.id, mode="reference", ok=True, durationMs=0)
                return ToolResult.text(entry.instructions or entry.summary or entry.name)

            return await gated_run(self._gate(), call, hand_over, post=False)

        async def execute(final_args: Mapping[str, Any]) -> ToolResult:
            if final_args is not args:  # a hook rewrote the input: it must still fit the schema
                validate_args(entry.id, entry.input_schema, final_args)
            started = time.monotonic()
            result = await self._local.run(entry, final_args)
            self._audit.record("tool", name=entry.id, mode="gateway", ok=not result.is_error,
                               durationMs=round((time.monotonic() - started) * 1000, 1),
                               session=ctx.session_id, args=self._audit.redact(dict(final_args)),
                               result=self._audit.redact(result.to_wire()))
            return result

        return await gated_run(self._gate(), call, execute)
