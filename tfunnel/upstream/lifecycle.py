"""What the audit log records of an upstream's life, pure (SPEC §11).

The records have ToolFunnel's shapes (`{type: "mcp", event, upstream, ...}`), so whatever parses
a ToolFunnel audit log parses ours: `connect`, `connect_failed`, `disconnect`, `reconnect`,
`reconnect_failed`, `stopped`, `reload`, `name_collision`. `records` is the one place that decides
what a state transition records; the supervisor hands each record to its `Context.on_event` and the
composition root writes it (upstream/ never writes into the home).

What a record never carries: environment or header values, a URL's userinfo or query (where
credentials hide), an upstream's stderr (it may hold anything). Errors are our messages (the
upstream's id, an exit status, a refusal), which may quote what the upstream answered (a handshake
refusal names its error message), bounded to `MAX_ERROR_CHARS`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tfunnel.config.expose import UpstreamSpec
from tfunnel.upstream.remote import display_url
from tfunnel.upstream.states import State, UpstreamStatistics

MAX_ERROR_CHARS = 500

Record = dict[str, Any]  # the fields after `type: "mcp"`, `event` first


@dataclass(frozen=True)
class Facts:
    """What a transition's records need besides the two states."""

    stats: UpstreamStatistics  # after the transition
    target: Record  # `where(spec)`: the command, or the URL as logs show it
    attempt: int  # restart attempts since the upstream was last ready (0: its very first)
    died: bool = False  # the upstream ended its ready connection (exit, closed stream)
    halting: bool = False  # a config change is replacing or removing it (not a failure)


def where(spec: UpstreamSpec) -> Record:
    """The `connect` record's target: `command` for a child (never its args or env, where
    secrets may be passed), else `url` without userinfo, query or fragment."""
    if spec.transport == "stdio":
        return {"command": spec.command}
    return {"url": display_url(spec.url or "")}


def bounded(text: str | None) -> str:
    """An error as a record carries it: at most `MAX_ERROR_CHARS` characters."""
    text = text or "unknown error"
    return text if len(text) <= MAX_ERROR_CHARS else text[:MAX_ERROR_CHARS - 1] + "…"


def records(old: State, new: State, facts: Facts) -> tuple[Record, ...]:
    """The records of one state change (often none; a failed last attempt gives two: the failure,
    then `stopped`). A connection we close (shutdown) records nothing, as ToolFunnel's deliberate
    close does; one a config change replaces records `disconnect` with reason `reload`."""
    s = facts.stats
    if old is new:
        return ()
    if new is State.READY:
        connect: Record = {"event": "connect", "upstream": s.id, **facts.target, "tools": s.tools,
                           "era": s.era, "protocolVersion": s.protocol_version}
        return (connect if s.pid is None else {**connect, "pid": s.pid},)
    if old is State.READY:
        reason = "died" if facts.died else "reload" if facts.halting else None
        if reason is None:
            return ()
        gone: Record = {"event": "disconnect", "upstream": s.id, "reason": reason}
        return (gone if reason == "reload" else {**gone, "error": bounded(s.last_error)},)
    if facts.halting or old is State.DISABLED:
        return ()
    out: list[Record] = []
    if old is State.STARTING and new in (State.BACKOFF, State.STOPPED):
        error = bounded(s.last_error)
        out.append({"event": "connect_failed", "upstream": s.id, "error": error} if facts.attempt == 0
                   else {"event": "reconnect_failed", "upstream": s.id, "attempt": facts.attempt,
                         "error": error})
    elif old is State.BACKOFF and new is State.STARTING:
        out.append({"event": "reconnect", "upstream": s.id, "attempt": facts.attempt})
    if new is State.STOPPED:  # the supervisor gave up: a ceiling, or a failure only a config change heals
        out.append({"event": "stopped", "upstream": s.id, "reason": bounded(s.stopped_reason)})
    return tuple(out)


def reload(stats: Iterable[UpstreamStatistics]) -> Record:
    """The record after an expose.json reload was applied and its upstreams had their first
    attempt: every enabled upstream, ready or not."""
    enabled = [s for s in stats if s.state != State.DISABLED.value]
    return {"event": "reload", "connected": [s.id for s in enabled if s.state == State.READY.value],
            "failed": [s.id for s in enabled if s.state != State.READY.value]}


def name_collision(upstream: str, tool: str, surfaced: str) -> Record:
    """An upstream tool whose surfaced name an earlier tool took (recorded once per process)."""
    return {"event": "name_collision", "upstream": upstream, "tool": tool, "surfaced": surfaced}
