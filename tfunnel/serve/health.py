"""The `/health` document (SPEC §8.2) and its HTTP status, built from statistics records (pure).

Nothing here does I/O or reads a clock: the HTTP layer gathers the supervisor's `statistics()`,
the config errors, the call counters and the session counts, and hands them in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from tfunnel.observe.telemetry import Statistics as TokenStatistics
from tfunnel.upstream.states import UpstreamStatistics

Status = Literal["ok", "degraded", "starting", "stopping"]

# States in which an upstream counts as healthy: a disabled upstream is off by the user's choice,
# so it never makes the gateway degraded.
_HEALTHY_STATES = frozenset({"ready", "disabled"})


@dataclass(frozen=True)
class CallCounts:
    """Tool calls since start: all of them, those that failed, and those a hook denied."""

    total: int = 0
    errors: int = 0
    denied: int = 0


def overall_status(*, started: bool, stopping: bool, upstreams: Sequence[UpstreamStatistics],
                   config_errors: Mapping[str, str], wrapped: str | None = None) -> Status:
    """`stopping` wins, then `starting` until serving; `degraded` if an enabled upstream is not ready,
    a config file is not in force as written (a refused reload, a broken log config), or the
    wrapped upstream is not ready (disabled or not configured either: the whole surface is empty);
    otherwise `ok`. Config warnings (unknown fields) never degrade: the file is in force, and they
    are listed."""
    if stopping:
        return "stopping"
    if not started:
        return "starting"
    if config_errors or any(u.state not in _HEALTHY_STATES for u in upstreams):
        return "degraded"
    if wrapped is not None and wrap_state(wrapped, upstreams) != "ready":
        return "degraded"
    return "ok"


def wrap_state(wrapped: str, upstreams: Sequence[UpstreamStatistics]) -> str:
    """The wrapped upstream's state, or `not configured`."""
    return next((u.state for u in upstreams if u.id == wrapped), "not configured")


def http_status(status: Status) -> int:
    """200 while the gateway serves (`ok`, `degraded`), 503 while it starts or stops."""
    return 200 if status in ("ok", "degraded") else 503


def _upstream(u: UpstreamStatistics) -> dict[str, Any]:
    return {"state": u.state, "transport": u.transport, "era": u.era, "protocolVersion": u.protocol_version,
            "pid": u.pid, "tools": u.tools, "restarts": u.restarts, "since": u.since,
            "lastError": u.last_error}


def health_document(*, status: Status, server_name: str, server_version: str, uptime_s: float,
                    protocol_versions: Sequence[str], upstreams: Sequence[UpstreamStatistics],
                    config_errors: Mapping[str, str], calls: CallCounts, sessions: int,
                    listen_streams: int, config_warnings: Sequence[str] = (),
                    held: Mapping[str, Sequence[str]] | None = None,
                    wrap: tuple[str, str] | None = None,
                    tokens: TokenStatistics | None = None, instance: str | None = None) -> dict[str, Any]:
    """The JSON body of `/health`, field for field as SPEC §8.2 shows it, plus `config.warnings`.

    Upstreams keep the order given; `stopped` lists every upstream the supervisor gave up on, with
    why; config errors (keyed by file) are listed sorted by file; config warnings as given (the
    caller sorts them by file). `approvals.held` names, by upstream, the items the tool approvals
    hold (their calls are refused until an operator accepts them). `wrap` is the active wrap
    (the wrapped upstream's id and the id its tools carry in hooks' names), or None. `tokens`:
    the token telemetry (the counter in use, and each profile's figures), when given.
    `instance`: this instance's name among several behind a proxy (`serve --http --instance`).
    """
    document: dict[str, Any] = {
        "status": status,
        "server": {"name": server_name, "version": server_version},
        "uptimeS": round(uptime_s, 1),
        "protocolVersions": list(protocol_versions),
        "upstreams": {u.id: _upstream(u) for u in upstreams},
        # A stopped upstream always carries a reason from the supervisor; the fallbacks keep
        # `reason` a string should a record ever arrive without one.
        "stopped": [{"id": u.id, "reason": u.stopped_reason or u.last_error or "stopped"}
                    for u in upstreams if u.state == "stopped"],
        "config": {"errors": [message for _, message in sorted(config_errors.items())],
                   "warnings": list(config_warnings)},
        "calls": {"total": calls.total, "errors": calls.errors, "denied": calls.denied},
        "clients": {"sessions": sessions, "listenStreams": listen_streams},
        "approvals": {"held": {u: sorted(keys) for u, keys in sorted((held or {}).items())}},
        "wrap": None if wrap is None else {"upstream": wrap[0], "as": wrap[1],
                                           "state": wrap_state(wrap[0], upstreams)},
    }
    if tokens is not None:
        document["tokens"] = tokens_document(tokens)
    if instance is not None:
        document["instance"] = instance
    return document


def tokens_document(tokens: TokenStatistics) -> dict[str, Any]:
    """`/health` `tokens`: the counter in use (and why it fell back to the estimate, if it did),
    texts dropped uncounted, and per profile what was given, its full-surface equivalent, the
    current tools/list lean and full, and how tools were found."""
    profiles: dict[str, Any] = {}
    for profile, figures in sorted(tokens.profiles.items()):
        surface = tokens.surfaces.get(profile)
        profiles[profile] = {**figures.to_json(), "toolsList": None if surface is None
                             else {"lean": surface[0], "full": surface[1]}}
    return {"counter": tokens.counter, "fallback": tokens.fallback, "dropped": tokens.dropped,
            "sessions": tokens.sessions, "profiles": profiles}
