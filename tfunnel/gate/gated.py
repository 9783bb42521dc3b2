"""`gated_run`, the single seam every execution path goes through.

Invariant: when PreToolUse denies (or the gate itself fails), or its `ask` waits for an answer,
`execute` is never called.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import structlog

from tfunnel.errors import GateDenied
from tfunnel.protocol.results import ToolResult

log = structlog.get_logger("tfunnel.gate")


@dataclass(frozen=True)
class NeedsInput:
    """The call cannot go on until the client answers `requests` (a modern client answers on its
    retry, MRTR, PROTOCOL.md §3.8). Neither a failure nor a deny: nothing ran (or, for an
    upstream's question, the upstream waits for the answers).

    `requests` are the `inputRequests` to send; `upstream_state` is an upstream's own
    `requestState` ("" when it asked without one), to be sealed inside ours and echoed back to it
    on the retry; `parked` is the id of a parked upstream call the answers go to."""

    requests: Mapping[str, Any]
    upstream_state: str | None = None
    parked: str | None = None


class AskUser(Protocol):
    """Ask the human behind the client to confirm: True only when they accepted, or `NeedsInput`
    when the answer can only come with the client's next request."""

    async def __call__(self, message: str) -> bool | NeedsInput: ...


@dataclass(frozen=True)
class ToolCall:
    """One attempted tool call as the gate sees it, with every name a hook may match on.

    `tool_id` is a local tool's id, or an upstream tool's own name on `upstream` (the upstream's
    id; None for a local tool). `annotations` are the upstream tool's as it declared them (empty
    for a local tool). `ask_user` is present only when the client can be asked (it declared
    elicitation)."""

    surfaced: str
    tool_id: str
    display: str
    args: Mapping[str, Any]
    mode: str = "gateway"
    session_id: str = ""
    call_id: str = ""
    upstream: str | None = None
    annotations: Mapping[str, Any] = field(default_factory=dict)
    ask_user: AskUser | None = field(default=None, compare=False, repr=False)
    # Under a wrap: the server id clients know the wrapped upstream by (`tfunnel wrap --as`).
    server: str | None = None
    # An upstream tool under a short name: its `<upstream>_<tool>` name, still matched (fail closed).
    former: str | None = None

    def claude_code_name(self) -> str:
        """The name Claude Code gives the tool, and so the `tool_name` its hooks check: the id of a
        local tool; `mcp__<upstream>__<tool>` for an upstream tool, as if Claude Code had the
        upstream attached directly (under a wrap `--as NAME`, `mcp__NAME__<tool>`)."""
        if self.upstream is None:
            return self.tool_id
        return f"mcp__{self.server or self.upstream}__{self.tool_id}"

    def names(self) -> tuple[str, ...]:
        """Every name a matcher is tried on: surfaced, id (or upstream tool name), display, Claude Code,
        and the former `<upstream>_<tool>` name of a tool under a short name."""
        seen = dict.fromkeys((self.surfaced, self.tool_id, self.display, self.claude_code_name(),
                              self.former or ""))
        return tuple(name for name in seen if name)


@dataclass(frozen=True)
class PreDecision:
    allow: bool
    reason: str = ""
    updated_input: Mapping[str, Any] | None = None
    additional_context: str = ""
    internal: bool = False
    hook: str | None = None
    # An `ask` still waiting for the client's answer (then `allow` is False: nothing runs).
    needs_input: NeedsInput | None = None
    # A hook asked: the verdict is the user's answer (or gate.askFallback when none could be had).
    asked: bool = False


ALLOW = PreDecision(allow=True)


class Gate(Protocol):
    async def pre_tool_use(self, call: ToolCall) -> PreDecision: ...

    async def post_tool_use(self, call: ToolCall, result: ToolResult) -> None: ...


Outcome = ToolResult | NeedsInput
Execute = Callable[[Mapping[str, Any]], Awaitable[Outcome]]


async def admit(gate: Gate, call: ToolCall) -> PreDecision | NeedsInput:
    """PreToolUse alone: the allowing decision (its `updated_input` may rewrite the call), or an
    `ask` still waiting for the client's answer; a deny raises `GateDenied`, and so does a
    failing gate (flagged internal)."""
    try:
        decision = await gate.pre_tool_use(call)
    except Exception as exc:  # the gate's own failure must never let a call through
        log.error("gate failed; denying", tool=call.surfaced, error=repr(exc))
        raise GateDenied(f"the gate failed while checking {call.surfaced!r}; denied", internal=True) \
            from exc
    if decision.needs_input is not None:
        return decision.needs_input
    if not decision.allow:
        raise GateDenied(decision.reason or f"{call.surfaced!r} was blocked by a PreToolUse hook",
                         internal=decision.internal)
    return decision


async def gated_run(gate: Gate, call: ToolCall, execute: Execute, *, post: bool = True) -> Outcome:
    """Ask PreToolUse; on allow run `execute` with the (possibly updated) arguments, then
    tell PostToolUse. A deny raises `GateDenied`; a failing gate denies (flagged internal). An
    `ask` waiting for the client's answer, or an execution waiting for one (an upstream's
    question), is returned as `NeedsInput` (without PostToolUse: the call has not finished)."""
    decision = await admit(gate, call)
    if isinstance(decision, NeedsInput):
        return decision
    args = decision.updated_input if decision.updated_input is not None else call.args
    result = await execute(args)
    if isinstance(result, NeedsInput):
        return result
    if decision.additional_context:
        # Claude Code hands PreToolUse context to the model; here it travels with the result.
        result = replace(result, content=(*result.content,
                                          {"type": "text", "text": decision.additional_context}))
    if post:
        try:
            ran = call if args is call.args else replace(call, args=args)  # what actually ran
            await gate.post_tool_use(ran, result)
        except Exception as exc:  # PostToolUse is advisory: its failure never changes the result
            log.warning("PostToolUse failed", tool=call.surfaced, error=repr(exc))
    return result
