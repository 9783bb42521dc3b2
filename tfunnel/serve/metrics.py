"""`/metrics`: Prometheus text exposition of requests, tool calls, gate decisions, hooks and upstreams.

Each `Metrics` owns its own `CollectorRegistry` (never prometheus_client's global one), so two
gateways in one process, or two tests, never share counters. Event methods are plain synchronous
calls (no I/O); `render` snapshots the upstream and session gauges and serialises the registry.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic, TypeVar

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from tfunnel.observe.telemetry import Statistics as TokenStatistics
from tfunnel.upstream.states import State, UpstreamStatistics

# Tool names come from config (and upstreams' tools/list), so they are bounded in practice; the cap
# is a backstop against a misbehaving upstream advertising endless names. Every distinct label value
# is a time series kept in memory forever and scraped every time, so past the cap we lump into one.
MAX_TOOL_LABELS = 500
# Method names arrive from clients, who can send any string; real MCP has a few dozen methods.
MAX_METHOD_LABELS = 64
OTHER = "other"

# Tool calls and hooks can legitimately take minutes (tool timeouts), so the buckets reach past
# prometheus_client's 10 s default top; the low end still resolves fast local round trips.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)

UPSTREAM_STATES = tuple(state.value for state in State)

_M = TypeVar("_M", Counter, Gauge, Histogram)


class _LabelCap:
    """Pass the first `limit` distinct values through; map every later new one to `other`."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._seen: set[str] = set()

    def __call__(self, value: str) -> str:
        if value in self._seen:
            return value
        if len(self._seen) >= self._limit:
            return OTHER
        self._seen.add(value)
        return value


class _Children(Generic[_M]):
    """A metric's labelled children, each looked up once (`labels()` checks the names, takes a
    lock and builds its key on every call). Bounded as the label values are: capped names and
    fixed outcomes. These metrics are never cleared (a cleared metric would orphan its cached
    children); the gauges that are, are set through `labels()`."""

    def __init__(self, metric: _M) -> None:
        self._metric: _M = metric
        self._children: dict[tuple[str, ...], _M] = {}

    def __call__(self, *values: str) -> _M:
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = self._metric.labels(*values)
        return child


class Metrics:
    """The gateway's Prometheus metrics, in a registry of their own."""

    def __init__(self) -> None:
        self._registry = CollectorRegistry()
        r = self._registry
        self._tool = _LabelCap(MAX_TOOL_LABELS)
        self._method = _LabelCap(MAX_METHOD_LABELS)
        self._requests = _Children(Counter(
            "tfunnel_requests_total", "JSON-RPC requests, by method and outcome.", ["method", "outcome"],
            registry=r))
        self._request_seconds = _Children(Histogram(
            "tfunnel_request_duration_seconds", "JSON-RPC request latency, by method.", ["method"],
            buckets=DURATION_BUCKETS, registry=r))
        self._tool_calls = _Children(Counter(
            "tfunnel_tool_calls_total", "Tool calls, by tool and outcome (ok|error|denied).",
            ["tool", "outcome"], registry=r))
        self._tool_seconds = _Children(Histogram(
            "tfunnel_tool_call_duration_seconds", "Tool call latency, by tool.", ["tool"],
            buckets=DURATION_BUCKETS, registry=r))
        self._gate = _Children(Counter(
            "tfunnel_gate_decisions_total", "Gate decisions, by decision.", ["decision"], registry=r))
        self._hook_seconds = _Children(Histogram(
            "tfunnel_hook_duration_seconds", "Hook run time, by event.", ["event"],
            buckets=DURATION_BUCKETS, registry=r))
        self._inflight = Gauge("tfunnel_inflight_calls", "Tool calls in flight.", registry=r)
        self._upstream_state = Gauge("tfunnel_upstream_state", "1 for each upstream's current state, else 0.",
                                     ["upstream", "state"], registry=r)
        # A gauge, not a counter: it mirrors the supervisor's own count, which we set, not increment.
        self._upstream_restarts = Gauge("tfunnel_upstream_restarts", "Restarts of each upstream so far.",
                                        ["upstream"], registry=r)
        self._upstream_tools = Gauge("tfunnel_upstream_tools", "Tools each upstream currently offers.",
                                     ["upstream"], registry=r)
        self._sessions = Gauge("tfunnel_sessions", "Open client sessions.", registry=r)
        # The label is one of the few RFC 6750 error codes (or `no_token`), never client text.
        self._auth_denials = Counter("tfunnel_auth_denials_total",
                                     "Requests refused by authentication, by error.", ["error"], registry=r)

        # Token telemetry (`observe.telemetry`): mirrored from its own totals at each scrape, so
        # gauges; the only label is the profile (bounded there), plus a fixed part or kind.
        self._tokens_given = Gauge("tfunnel_tokens_given", "Tokens given to the model so far, by profile and "
                                   "part (tools_list|instructions|meta_results).", ["profile", "part"],
                                   registry=r)
        self._tokens_full = Gauge("tfunnel_tokens_full_equivalent", "Tokens the same tools/list answers and "
                                  "instructions would have been with every enabled tool top-level.",
                                  ["profile"], registry=r)
        self._tokens_surface = Gauge("tfunnel_tokens_tools_list", "Tokens of the current tools/list, lean "
                                     "(as served) and full (every enabled tool top-level).",
                                     ["profile", "surface"], registry=r)
        self._discovered = Gauge("tfunnel_tool_calls_discovery", "Tool calls by how the tool was found: "
                                 "found (listed by a search first) or direct.", ["profile", "how"],
                                 registry=r)
        self._searches = Gauge("tfunnel_searches", "toolfunnel_list_tools searches: all, and those that led "
                               "to no call.", ["profile", "outcome"], registry=r)
        self._tokens_dropped = Gauge("tfunnel_token_texts_dropped", "Texts not counted (the queue was full).",
                                     registry=r)
        self._token_counter = Gauge("tfunnel_token_counter", "1 for the token counter in use.", ["counter"],
                                    registry=r)

    def request(self, method: str, seconds: float, *, error: bool) -> None:
        """Count one JSON-RPC request and observe its latency."""
        method = self._method(method)
        self._requests(method, "error" if error else "ok").inc()
        self._request_seconds(method).observe(seconds)

    def tool_call(self, tool: str, seconds: float, *, outcome: str) -> None:
        """Count one tool call (`outcome` is ok, error or denied) and observe its latency."""
        tool = self._tool(tool)
        self._tool_calls(tool, outcome).inc()
        self._tool_seconds(tool).observe(seconds)

    def gate(self, decision: str) -> None:
        """Count one gate decision."""
        self._gate(decision).inc()

    def hook(self, event: str, seconds: float) -> None:
        """Observe how long one hook run for `event` took."""
        self._hook_seconds(event).observe(seconds)

    def inflight(self, delta: int) -> None:
        """Move the in-flight tool call gauge by `delta` (+1 on start, -1 on finish)."""
        self._inflight.inc(delta)

    def auth_denied(self, error: str) -> None:
        """Count one request refused by authentication."""
        self._auth_denials.labels(error=error).inc()

    def render(self, *, upstreams: Sequence[UpstreamStatistics], sessions: int,
               tokens: TokenStatistics | None = None) -> tuple[bytes, str]:
        """Snapshot upstreams and sessions into their gauges; return the exposition and its content type."""
        # Cleared first so an upstream removed by a config reload stops being reported.
        for gauge in (self._upstream_state, self._upstream_restarts, self._upstream_tools):
            gauge.clear()
        for u in upstreams:
            for state in UPSTREAM_STATES:
                self._upstream_state.labels(upstream=u.id, state=state).set(1 if u.state == state else 0)
            self._upstream_restarts.labels(upstream=u.id).set(u.restarts)
            self._upstream_tools.labels(upstream=u.id).set(u.tools)
        self._sessions.set(sessions)
        if tokens is not None:
            self._tokens(tokens)
        return generate_latest(self._registry), CONTENT_TYPE_LATEST

    def _tokens(self, tokens: TokenStatistics) -> None:
        self._token_counter.clear()
        self._token_counter.labels(counter=tokens.counter).set(1)
        self._tokens_dropped.set(tokens.dropped)
        for profile, figures in tokens.profiles.items():
            for part, given in figures.given.items():
                self._tokens_given.labels(profile=profile, part=part).set(given)
            self._tokens_full.labels(profile=profile).set(figures.full)
            self._discovered.labels(profile=profile, how="found").set(figures.found)
            self._discovered.labels(profile=profile, how="direct").set(figures.direct)
            self._searches.labels(profile=profile, outcome="all").set(figures.searches)
            self._searches.labels(profile=profile, outcome="without_call").set(figures.searches_without_call)
        for profile, (lean, full) in tokens.surfaces.items():
            self._tokens_surface.labels(profile=profile, surface="lean").set(lean)
            self._tokens_surface.labels(profile=profile, surface="full").set(full)
