"""`tools/list` and `tools/call` in funnel mode: the meta-tools, local tools, upstream tools.

Every execution goes through `gated_run`. `_guarded` is the one place where a `ToolFailure`
(including an `UpstreamError` or a gate deny) becomes an `isError` result. A call that waits for
the client's answers ends as a `NeedsInput` value, which the caller's era adapter puts on the
wire; the surface never knows the era (the caller's `ClientChannel` does).
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

import structlog

from tfunnel.config.model import META_TOOL_NAMES, ToolEntry
from tfunnel.config.profiles import DEFAULT_PROFILE
from tfunnel.errors import GateDenied, ProtocolError, ToolFailure, UpstreamRemoteError
from tfunnel.gate.gated import Gate, NeedsInput, Outcome, ToolCall, gated_run
from tfunnel.observe.audit import AuditLog
from tfunnel.observe.observer import UNKNOWN_TOOL, CallTally, NullObserver, Observer
from tfunnel.observe.telemetry import Telemetry
from tfunnel.observe.tokens import Counter, dumps
from tfunnel.protocol.jsonrpc import INVALID_PARAMS
from tfunnel.protocol.results import ToolResult
from tfunnel.surface import meta, profiles
from tfunnel.surface.catalog import Catalog, local_input_schema
from tfunnel.surface.context import (
    Builtins,
    CallContext,
    ClientChannel,
    Direct,
    NoBuiltins,
    SupervisedUpstreams,
)
from tfunnel.surface.examples import examples_section
from tfunnel.surface.full import full_top_level
from tfunnel.surface.profiles import Chosen
from tfunnel.surface.upstream_tools import UpstreamTool
from tfunnel.surface.validation import validate_args

log = structlog.get_logger("tfunnel.surface")

class LocalTools(Protocol):
    async def run(self, entry: ToolEntry, args: Mapping[str, Any]) -> ToolResult: ...


Target = ToolEntry | UpstreamTool


class Surface:
    def __init__(self, catalog: Callable[[], Catalog], gate: Callable[[], Gate], local: LocalTools,
                 upstreams: SupervisedUpstreams, audit: AuditLog, observer: Observer | None = None, *,
                 default_channel: ClientChannel | None = None, builtins: Builtins | None = None,
                 telemetry: Telemetry | None = None) -> None:
        self._catalog = catalog
        self._gate = gate
        self._local = local
        self._upstreams = upstreams
        self._audit = audit
        self.tally = CallTally()
        self._observer: Observer = observer or NullObserver()
        # The channel of a call whose context brings none (the CLI's).
        self._default_channel: ClientChannel = default_channel or Direct()
        self._builtins: Builtins = builtins or NoBuiltins()
        # What the model is given, in tokens (counted by its worker, which the app starts).
        self.telemetry = telemetry or Telemetry(Counter("estimate"))

    def list_tools(self, ctx: CallContext | None = None) -> list[dict[str, Any]]:
        """The top-level tools the caller's profile (`ctx.profile`) is listed."""
        ctx = ctx or CallContext()
        catalog = self._catalog().view(ctx.profile)
        tools = catalog.top_level(meta.DEFINITIONS)
        self.telemetry.record_list(_named(ctx), ctx.session_id, catalog, lambda: dumps({"tools": tools}),
                                   lambda: dumps({"tools": full_top_level(catalog, meta.DEFINITIONS)}))
        return tools

    def instructed(self, ctx: CallContext, instructions: str) -> None:
        """The instructions a client was given at its start (counted as given)."""
        self.telemetry.record_text(_named(ctx), ctx.session_id, "instructions", lambda: instructions)

    def end_session(self, session_id: str) -> None:
        """A client session ended (what its last search led to is settled)."""
        self.telemetry.ended(session_id)

    def tool_schema(self, name: str, profile: Chosen | None = None) -> Mapping[str, Any] | None:
        """The inputSchema of a top-level tool, as `list_tools` shows it; None if not listed."""
        catalog = self._catalog().view(profile)
        if catalog.wrap is not None:
            wrapped = catalog.wrapped_tool(name)
            return wrapped.input_schema if wrapped is not None else None
        if catalog.meta_callable(name):
            schema: Mapping[str, Any] = meta.DEFINITIONS[name]["inputSchema"]
            return schema
        entry = catalog.hot_local(name)
        if entry is not None:
            return local_input_schema(entry)
        tool = catalog.direct_upstream(name)
        return tool.input_schema if tool is not None else None

    async def call(self, name: str, args: Any, ctx: CallContext) -> Outcome:
        """`tools/call`: its result, or `NeedsInput` when it waits for the client's answers. An
        unknown or unpromoted top-level name is a protocol error (-32602)."""
        catalog = self._catalog().view(ctx.profile)
        if not isinstance(args, dict):
            raise ProtocolError(INVALID_PARAMS, 'Invalid params: "arguments" must be an object')
        if catalog.wrap is not None:
            return await self._call_wrapped(catalog.wrap.upstream, name, args, ctx)
        if catalog.meta_callable(name):
            if name == meta.RUN_TOOL and isinstance(args.get("name"), str):
                self.telemetry.called(_named(ctx), ctx.session_id, args["name"])
            outcome = await self._guarded(_label(name, args), self._meta(catalog, name, args, ctx))
            _given(self.telemetry, ctx, name, outcome)
            return outcome
        try:
            target = await self._find(name, lambda c: c.hot_local(name) or c.direct_upstream(name), ctx)
        except ToolFailure as exc:  # its upstream is not ready: an answer, not an unknown name
            return await self._guarded(name, _fail(str(exc)))
        if target is not None:
            self.telemetry.called(_named(ctx), ctx.session_id, name)
            return await self._guarded(name, self._run(target, args, ctx))
        self._left_out(name, ctx)
        raise ProtocolError(INVALID_PARAMS, f"Unknown tool: {name}")

    async def _call_wrapped(self, upstream: str, name: str, args: dict[str, Any],
                            ctx: CallContext) -> Outcome:
        """`tools/call` under a wrap: one of the wrapped upstream's enabled tools, by its own
        name, through the gate as always. While the upstream is not ready the call waits for it
        (bounded) and then says why; a name it does not list (or that is disabled) is unknown."""
        tool = self._catalog().view(ctx.profile).wrapped_tool(name)
        if tool is None:  # at once when the upstream is ready
            problem = await self._upstreams.wait_ready(upstream)
            tool = self._catalog().view(ctx.profile).wrapped_tool(name)
            if tool is None and problem is not None:
                return await self._guarded(name, _fail(problem))
        if tool is None:
            self._left_out(name, ctx)
            raise ProtocolError(INVALID_PARAMS, f"Unknown tool: {name}")
        return await self._guarded(tool.surfaced, self._run_upstream(tool, args, ctx))

    async def run_named(self, name: str, args: dict[str, Any], ctx: CallContext) -> ToolResult:
        """Run any meta-tool or enabled tool by name, promoted or not (`tfunnel call`)."""
        catalog = self._catalog().view(ctx.profile)
        if name in META_TOOL_NAMES:
            if not catalog.visibility(name, "meta").enabled:
                return ToolResult.failure(f"meta-tool {name!r} is disabled")
            return _answered(name, await self._guarded(_label(name, args),
                                                       self._meta(catalog, name, args, ctx)))

        async def any_tool() -> Outcome:
            return await self._run(await self._resolve(name, ctx), args, ctx)

        return _answered(name, await self._guarded(name, any_tool()))

    async def _guarded(self, name: str, work: Awaitable[Outcome]) -> Outcome:
        """The one place a `ToolFailure` becomes an `isError` result (and calls are counted; a
        round that ends waiting for input has no outcome yet, so it is not measured)."""
        self.tally.total += 1
        self._observer.inflight(1)
        started = time.monotonic()
        try:
            result = await work
        except GateDenied as exc:
            log.info("call denied", reason=exc.reason, internal=exc.internal)
            self.tally.denied += 1
            result = ToolResult.failure(str(exc), denied=True)
        except ToolFailure as exc:
            result = ToolResult.failure(str(exc))
        finally:
            self._observer.inflight(-1)
        if isinstance(result, NeedsInput):
            return result
        if result.is_error:
            self.tally.errors += 1
        outcome = "denied" if result.denied else "error" if result.is_error else "ok"
        self._observer.tool_call(self._metric_label(name), time.monotonic() - started, outcome=outcome)
        return result

    def _metric_label(self, name: str) -> str:
        """`name` if it names a tool (a meta-tool, a register entry, an upstream tool), else
        `unknown`: names a client makes up must not use up the metrics' label budget."""
        catalog = self._catalog()
        known = name in META_TOOL_NAMES or catalog.find_local(name) is not None \
            or catalog.find_upstream(name) is not None
        return name if known else UNKNOWN_TOOL

    async def _meta(self, catalog: Catalog, name: str, args: dict[str, Any], ctx: CallContext) -> Outcome:
        validate_args(name, meta.DEFINITIONS[name]["inputSchema"], args)
        if name == meta.LIST_TOOLS:
            return _listing(catalog, args)
        if name == meta.HOWTO:
            return ToolResult.text(meta.howto_text(args["topic"]))
        target = await self._resolve(args["name"], ctx)
        if name != meta.TOOL_INSTRUCTIONS:
            return await self._run(target, args.get("args") or {}, ctx)
        if isinstance(target, ToolEntry) and target.mode == "reference":
            # A reference tool's instructions are its action: reading them is a hand-over, gated
            # like toolfunnel_run_tool's. Other tools' instructions only describe them.
            return await self._hand_over(target, {}, ctx, _instructions(target))
        return ToolResult.text(_instructions(target))

    async def _find(self, name: str, lookup: Callable[[Catalog], Target | None],
                    ctx: CallContext) -> Target | None:
        """`lookup` in the current catalog. When it finds nothing and an upstream that is not ready
        would surface `name`, wait for that upstream only (bounded by its start window) and look
        again; if there is still nothing, raise `ToolFailure` saying why that upstream is not ready
        (still starting, restarting, stopped, disabled) rather than calling the name unknown.
        Both looks are in the caller's profile's view (`ctx.profile`)."""
        target = lookup(self._catalog().view(ctx.profile))
        if target is not None:
            return target
        owner = self._upstreams.unready_owner(name)
        if owner is None or (ctx.profile is not None
                             and not profiles.allows_tool(ctx.profile.profile, (name,), owner)):
            return None  # a profile's client is not told of (nor kept waiting for) what it may not see
        problem = await self._upstreams.wait_ready(owner)
        target = lookup(self._catalog().view(ctx.profile))
        if target is None and problem is not None:
            raise ToolFailure(problem)
        return target

    async def _resolve(self, name: str, ctx: CallContext) -> Target:
        """A local tool (by id, then display name) or an upstream tool (by surfaced name), enabled
        and in the caller's profile. A name that an upstream still coming up may surface waits
        for that upstream (bounded)."""
        target = await self._find(name, lambda c: c.find_local(name) or c.find_upstream(name), ctx)
        catalog = self._catalog().view(ctx.profile)
        if target is None:
            self._left_out(name, ctx)
            raise ToolFailure(f"no tool named {name!r}; toolfunnel_list_tools lists the tools you can use")
        surfaced = target.surfaced if isinstance(target, UpstreamTool) else target.id
        enabled = (catalog.enabled_upstream(name) if isinstance(target, UpstreamTool)
                   else catalog.enabled_local(name))
        if enabled is None:
            raise ToolFailure(f"tool {name!r} is disabled; an operator can enable it with "
                              f"`tfunnel tool enable {surfaced}`")
        return target

    async def _run(self, target: Target, args: dict[str, Any], ctx: CallContext) -> Outcome:
        if isinstance(target, UpstreamTool):
            return await self._run_upstream(target, args, ctx)
        return await self._run_local(target, args, ctx)

    async def _run_local(self, entry: ToolEntry, args: dict[str, Any], ctx: CallContext) -> Outcome:
        validate_args(entry.id, entry.input_schema, args)
        if entry.mode == "reference":
            return await self._hand_over(entry, args, ctx, entry.instructions or entry.summary or entry.name)
        call = self._local_call(entry, args, ctx)

        async def execute(final_args: Mapping[str, Any]) -> Outcome:
            if final_args is not args:  # a hook rewrote the input: it must still fit the schema
                validate_args(entry.id, entry.input_schema, final_args)
            if entry.invoke is not None and entry.invoke.type == "builtin":
                return await self._timed(entry.id, "management", ctx, final_args, self._builtins.run(
                    entry, final_args, ctx.session_id, self._channel(ctx).ask_user))
            return await self._timed(entry.id, "gateway", ctx, final_args,
                                     self._local.run(entry, final_args))

        return await gated_run(self._gate(), call, execute)

    async def _hand_over(self, entry: ToolEntry, args: dict[str, Any], ctx: CallContext,
                         text: str) -> Outcome:
        """A reference tool: nothing runs here, the client performs the action with `text`. The
        hand-over itself passes PreToolUse (no PostToolUse); a deny withholds `text`."""
        async def hand_over(_: Mapping[str, Any]) -> ToolResult:
            self._audit.record("tool", name=entry.id, mode="reference", ok=True, durationMs=0)
            return ToolResult.text(text)

        return await gated_run(self._gate(), self._local_call(entry, args, ctx), hand_over, post=False)

    async def _run_upstream(self, tool: UpstreamTool, args: dict[str, Any], ctx: CallContext) -> Outcome:
        if tool.hold is not None:  # its descriptor waits for approval: nothing runs, no hook either
            self._audit.record("approval", event="refused", name=tool.surfaced, upstream=tool.upstream,
                               tool=tool.tool, session=ctx.session_id)
            raise ToolFailure(tool.hold)
        # A wrapped tool's arguments are the upstream's to judge: its own error is the answer.
        validating = tool.wire is None
        if validating:
            validate_args(tool.surfaced, tool.input_schema, args, trusted=False)
        channel = self._channel(ctx)
        wrap = self._catalog().wrap if tool.wire is not None else None
        call = ToolCall(surfaced=tool.surfaced, tool_id=tool.tool, display=tool.display, args=args,
                        mode="upstream", session_id=ctx.session_id, call_id=ctx.call_id,
                        upstream=tool.upstream, annotations=tool.annotations, ask_user=channel.ask_user,
                        server=wrap.server if wrap is not None else None, former=tool.former)

        async def forward(final_args: Mapping[str, Any]) -> Outcome:
            try:
                wire = await channel.call_upstream(self._upstreams, tool.upstream, tool.tool, final_args)
            except UpstreamRemoteError as exc:
                if tool.wire is None:
                    raise
                # Under a wrap the upstream's error answer is the client's, as it gave it.
                raise ProtocolError(exc.code, exc.remote_message, exc.data) from None
            return wire if isinstance(wire, NeedsInput) else ToolResult.from_wire(wire)

        async def execute(final_args: Mapping[str, Any]) -> Outcome:
            if final_args is not args and validating:
                validate_args(tool.surfaced, tool.input_schema, final_args, trusted=False)
            return await self._timed(tool.surfaced, "upstream", ctx, final_args, forward(final_args))

        return await gated_run(self._gate(), call, execute)

    async def _timed(self, name: str, mode: str, ctx: CallContext, args: Mapping[str, Any],
                     work: Awaitable[Outcome]) -> Outcome:
        """Run `work` and write its audit record (a round that waits for input, or fails, is
        recorded without a result)."""
        if not self._audit.enabled:
            return await work
        started = time.monotonic()
        result: ToolResult | None = None
        try:
            outcome = await work
            result = outcome if isinstance(outcome, ToolResult) else None
            return outcome
        finally:
            self._audit.record("tool", name=name, mode=mode, ok=result is not None and not result.is_error,
                               durationMs=round((time.monotonic() - started) * 1000, 1),
                               session=ctx.session_id, args=self._audit.redact(dict(args)),
                               result=self._audit.redact(result.to_wire() if result else None))

    def _left_out(self, name: str, ctx: CallContext) -> None:
        """Audit a call refused because the caller's profile leaves the tool out (it was told
        the name is unknown, as if the tool did not exist)."""
        view = self._catalog().view(ctx.profile)
        if ctx.profile is not None and view.outside_profile(name):
            log.info("call refused by profile", tool=name, profile=ctx.profile.name)
            self._audit.record("profile", event="refused", name=name, profile=ctx.profile.name,
                               session=ctx.session_id)

    def _channel(self, ctx: CallContext) -> ClientChannel:
        return ctx.channel if ctx.channel is not None else self._default_channel

    def _local_call(self, entry: ToolEntry, args: Mapping[str, Any], ctx: CallContext) -> ToolCall:
        return ToolCall(surfaced=entry.id, tool_id=entry.id, display=entry.name, args=args, mode=entry.mode,
                        session_id=ctx.session_id, call_id=ctx.call_id, ask_user=self._channel(ctx).ask_user)


def _listing(catalog: Catalog, args: Mapping[str, Any]) -> ToolResult:
    """toolfunnel_list_tools: the briefs of `kind` (tools, prompts, resources) as JSON text, and
    the same under `tools`, `prompts`, or `resources` and `resourceTemplates` as structured."""
    narrow = {"filter": args.get("filter", ""), "query": args.get("query", ""), "limit": args.get("limit")}
    kind = args.get("kind", "tools")
    text: Any
    if kind == "prompts":
        text = catalog.prompt_briefs(**narrow)
        structured: dict[str, Any] = {"prompts": text}
    elif kind == "resources":
        listed, templates = catalog.resource_briefs(**narrow)
        text = structured = {"resources": listed, "resourceTemplates": templates}
    else:
        text = catalog.briefs(category=args.get("category", ""), **narrow)
        structured = {"tools": text}
    return ToolResult(content=({"type": "text", "text": json.dumps(text, ensure_ascii=False)},),
                      structured=structured)


def _given(telemetry: Telemetry, ctx: CallContext, name: str, outcome: Outcome) -> None:
    """A meta-tool's result is given to the model; a tools listing is a search (what it listed,
    a later call is found by). `toolfunnel_run_tool`'s result is the tool's own, which the model
    gets however it calls the tool: it is not the lean surface's cost, and it is never held for
    counting (a tool may answer megabytes; the queue holds texts still to count)."""
    if not isinstance(outcome, ToolResult) or name == meta.RUN_TOOL:
        return
    telemetry.record_text(_named(ctx), ctx.session_id, "meta_results", lambda: dumps(outcome.to_wire()))
    listed = outcome.structured.get("tools") if name == meta.LIST_TOOLS and outcome.structured else None
    if isinstance(listed, list):
        telemetry.searched(_named(ctx), ctx.session_id, (b["id"] for b in listed))


def _answered(name: str, outcome: Outcome) -> ToolResult:
    """The result for a caller that cannot answer on a later request (`run_named`'s: its channel
    answers or declines each question itself, so a `NeedsInput` here is only a failure)."""
    if isinstance(outcome, NeedsInput):
        return ToolResult.failure(f"{name!r} needs input this caller cannot give")
    return outcome


async def _fail(message: str) -> ToolResult:
    raise ToolFailure(message)


def _named(ctx: CallContext) -> str:
    """The caller's profile's name, as telemetry labels it."""
    return ctx.profile.name if ctx.profile is not None else DEFAULT_PROFILE


def _label(name: str, args: Mapping[str, Any]) -> str:
    """The tool a call is about, for metrics: run_tool's target rather than run_tool itself."""
    target = args.get("name")
    return target if name == meta.RUN_TOOL and isinstance(target, str) else name


def _instructions(target: Target) -> str:
    if isinstance(target, UpstreamTool):
        return target.instructions()
    if target.instructions.strip():
        return "\n".join([target.instructions.rstrip(), *examples_section(target.id, target.examples)])
    return meta.synthesized_instructions(target.id, target.name, target.summary, target.input_schema,
                                         target.examples)
