"""The hook engine: fires the manifest's hooks for each event and turns them into a decision.

Matching hooks of one event run concurrently (bounded); their verdicts are combined in
manifest order by the pure `decision` module. Every PreToolUse ends in one audit record.
Command hooks run as processes (`runner`), http hooks as POSTs on the engine's one HTTP client
(`http_hook`), which its owner closes with `aclose` when the gateway stops.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import structlog
import trio

from tfunnel.gate.decision import Combined, HookEvent, HookVerdict, combine, interpret
from tfunnel.gate.gated import ALLOW, NeedsInput, PreDecision, ToolCall
from tfunnel.gate.http_hook import HttpHooks
from tfunnel.gate.manifest import HookManifest, HookSpec
from tfunnel.gate.runner import hook_variables, run_hook
from tfunnel.observe.audit import AuditLog
from tfunnel.observe.observer import NullObserver, Observer
from tfunnel.protocol.results import ToolResult

log = structlog.get_logger("tfunnel.gate")

# Hooks of one event of one call that may run at once: enough for any sane manifest, bounded so
# a manifest with hundreds of entries cannot fork-bomb the host. Per call, so one call takes at
# most this many of the gateway-wide process `slots` (which every call shares, first come first
# served: calls with slow hooks can still fill them all).
MAX_CONCURRENT_HOOKS = 8

AskFallback = Literal["deny", "allow"]

# What an event with no matching hooks decides (shared: built once, not per call).
_NO_HOOKS = Combined(decision="allow")


class HookEngine:
    def __init__(self, home: Path, manifest: Callable[[], HookManifest],
                 ask_fallback: Callable[[], AskFallback], audit: AuditLog,
                 env: Mapping[str, str], observer: Observer | None = None,
                 slots: trio.CapacityLimiter | None = None, http: HttpHooks | None = None) -> None:
        self.home = home
        self._manifest = manifest
        self._ask_fallback = ask_fallback
        self._audit = audit
        self._env = env
        self._observer: Observer = observer or NullObserver()
        self._slots = slots
        self._http = http or HttpHooks()

    async def aclose(self) -> None:
        """Close the http hooks' connections (the gateway's shutdown; idempotent)."""
        await self._http.aclose()

    async def pre_tool_use(self, call: ToolCall) -> PreDecision:
        combined = await self._fire_for_tool("PreToolUse", call, {})
        decision = await self._decide(call, combined)
        if decision.needs_input is not None:
            return decision  # no verdict yet: the retry that brings the answer is recorded
        self._observer.gate("allow" if decision.allow else "deny")
        if self._audit.enabled:
            self._audit.record("gate", tool=call.surfaced, decision="allow" if decision.allow else "deny",
                               reason=decision.reason or None, hook=decision.hook, session=call.session_id,
                               args=self._audit.redact(dict(call.args)),
                               **({"asked": True} if decision.asked else {}))
        return decision

    async def post_tool_use(self, call: ToolCall, result: ToolResult) -> None:
        if not self._manifest().active("PostToolUse"):  # no hooks: no payload to build
            return
        await self._fire_for_tool("PostToolUse", call, {"tool_response": result.to_wire()})

    async def session_start(self, session_id: str) -> str:
        """Fire SessionStart; return the hooks' additionalContext for the server instructions."""
        combined = await self._fire("SessionStart", self._manifest().active("SessionStart"),
                                    self._payload("SessionStart", session_id, source="startup"))
        return combined.additional_context

    async def session_end(self, session_id: str) -> None:
        await self._fire("Stop", self._manifest().active("Stop"),
                         self._payload("Stop", session_id, stop_hook_active=False))

    async def _fire_for_tool(self, event: HookEvent, call: ToolCall, extra: Mapping[str, Any]) -> Combined:
        active = self._manifest().active(event)
        if not active:  # the common case: no hooks, no work
            return _NO_HOOKS
        names = call.names()
        hooks = [h for h in active if h.matches(names)]
        payload = self._payload(event, call.session_id, **_tool_fields(call), **extra)
        return await self._fire(event, hooks, payload)

    async def _decide(self, call: ToolCall, combined: Combined) -> PreDecision:
        if combined.decision == "deny":
            return PreDecision(allow=False, reason=combined.reason, hook=combined.hook_id)
        if combined.decision == "ask":
            if call.ask_user is not None:
                accepted = await call.ask_user(f"{combined.reason}\n\nAllow the call to {call.surfaced!r}?")
                if isinstance(accepted, NeedsInput):
                    return PreDecision(allow=False, hook=combined.hook_id, needs_input=accepted, asked=True,
                                       reason=f"{combined.reason} (waiting for the user's answer)")
                if not accepted:
                    return PreDecision(allow=False, hook=combined.hook_id, asked=True,
                                       reason=f"{combined.reason} (the user did not allow it)")
            elif self._ask_fallback() != "allow":
                return PreDecision(allow=False, hook=combined.hook_id, asked=True, reason=(
                    f"{combined.reason} (the client cannot be asked; gate.askFallback is deny)"))
        if combined is _NO_HOOKS or combined == _NO_HOOKS:
            return ALLOW
        return PreDecision(allow=True, hook=combined.hook_id, updated_input=combined.updated_input,
                           additional_context=combined.additional_context, asked=combined.decision == "ask")

    async def _fire(self, event: HookEvent, hooks: Sequence[HookSpec],
                    payload: Mapping[str, Any]) -> Combined:
        if not hooks:
            return Combined(decision="allow")
        verdicts: list[HookVerdict | None] = [None] * len(hooks)
        manifest = self._manifest()
        limiter = trio.CapacityLimiter(MAX_CONCURRENT_HOOKS)

        async def one(index: int, spec: HookSpec) -> None:
            async with limiter:
                started = time.monotonic()
                if spec.kind == "http":
                    # Only the variables its allowedEnvVars names can reach its headers.
                    env = {**self._env, **hook_variables(self.home, manifest.hooks_dir)} \
                        if spec.allowed_env_vars else {}
                    run = await self._http.run(spec, payload, env)
                else:
                    run = await run_hook(spec, payload, home=self.home, hooks_dir=manifest.hooks_dir,
                                         env=self._env, slots=self._slots)
                self._observer.hook(event, time.monotonic() - started)
            verdicts[index] = interpret(event, run)

        if len(hooks) == 1:  # the common case: one hook, run in the call's own task (no spawn)
            await one(0, hooks[0])
        else:
            async with trio.open_nursery() as nursery:
                for index, spec in enumerate(hooks):
                    nursery.start_soon(one, index, spec)
        combined = combine([v for v in verdicts if v is not None])
        for error in combined.errors:
            log.warning("hook did not answer; treated as no decision", hook_event=event, error=error)
        return combined

    def _payload(self, event: HookEvent, session_id: str, **fields: Any) -> dict[str, Any]:
        # The Claude Code hook input: the common fields, then the event's own.
        return {"session_id": session_id, "transcript_path": "", "cwd": str(self.home),
                "hook_event_name": event, **fields}


def _tool_fields(call: ToolCall) -> dict[str, Any]:
    """A tool event's payload fields: Claude Code's (`tool_name` as Claude Code would send it, so
    hooks written for it work unchanged), then ours: the annotations and every other name."""
    return {"tool_name": call.claude_code_name(), "tool_input": dict(call.args), "tool_use_id": call.call_id,
            "tool_annotations": dict(call.annotations),
            "tfunnel": {"surfacedName": call.surfaced, "displayName": call.display, "upstream": call.upstream,
                        "tool": None if call.upstream is None else call.tool_id}}
