"""Prometheus metrics (`tfunnel/serve/metrics.py`): traffic in, exposition text out, parsed back."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.parser import text_string_to_metric_families

from tfunnel.serve.metrics import MAX_METHOD_LABELS, MAX_TOOL_LABELS, Metrics
from tfunnel.upstream.supervisor import UpstreamStatistics

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def stats(id: str, state: str, *, tools: int = 0, restarts: int = 0) -> UpstreamStatistics:
    """An upstream statistics record with the fields metrics read."""
    return UpstreamStatistics(id=id, state=state, transport="stdio", era=None, protocol_version=None,
                              pid=None, tools=tools, restarts=restarts, since="2026-01-01T00:00:00Z",
                              last_error=None, stopped_reason=None)


def scrape(metrics: Metrics, upstreams: Sequence[UpstreamStatistics] = (), sessions: int = 0) -> Samples:
    """Render and parse the exposition into {(sample name, labels): value}."""
    body, content_type = metrics.render(upstreams=upstreams, sessions=sessions)
    assert content_type == CONTENT_TYPE_LATEST
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(body.decode("utf-8")) for s in family.samples}


def value(samples: Samples, name: str, **labels: Any) -> float | None:
    """One sample's value, or None when the exposition lacks it."""
    return samples.get((name, frozenset((k, str(v)) for k, v in labels.items())))


def test_requests_count_by_method_and_outcome_with_latency() -> None:
    """Requests count per method and outcome; the histogram counts and sums per method."""
    m = Metrics()
    m.request("tools/call", 0.02, error=False)
    m.request("tools/call", 0.3, error=True)
    m.request("tools/call", 0.01, error=False)
    m.request("initialize", 0.001, error=False)
    s = scrape(m)
    assert value(s, "tfunnel_requests_total", method="tools/call", outcome="ok") == 2
    assert value(s, "tfunnel_requests_total", method="tools/call", outcome="error") == 1
    assert value(s, "tfunnel_requests_total", method="initialize", outcome="ok") == 1
    assert value(s, "tfunnel_requests_total", method="initialize", outcome="error") is None
    assert value(s, "tfunnel_request_duration_seconds_count", method="tools/call") == 3
    assert value(s, "tfunnel_request_duration_seconds_sum", method="tools/call") == pytest.approx(0.33)
    assert value(s, "tfunnel_request_duration_seconds_bucket", method="tools/call", le="0.025") == 2
    assert value(s, "tfunnel_request_duration_seconds_bucket", method="tools/call", le="+Inf") == 3
    assert value(s, "tfunnel_request_duration_seconds_count", method="initialize") == 1


def test_tool_calls_count_by_outcome_with_latency() -> None:
    """Tool calls count per tool and outcome (ok, error, denied); durations histogram per tool."""
    m = Metrics()
    m.tool_call("time__now", 0.05, outcome="ok")
    m.tool_call("time__now", 0.07, outcome="ok")
    m.tool_call("git__status", 1.5, outcome="error")
    m.tool_call("git__status", 0.0, outcome="denied")
    s = scrape(m)
    assert value(s, "tfunnel_tool_calls_total", tool="time__now", outcome="ok") == 2
    assert value(s, "tfunnel_tool_calls_total", tool="git__status", outcome="error") == 1
    assert value(s, "tfunnel_tool_calls_total", tool="git__status", outcome="denied") == 1
    assert value(s, "tfunnel_tool_call_duration_seconds_count", tool="time__now") == 2
    assert value(s, "tfunnel_tool_call_duration_seconds_count", tool="git__status") == 2
    assert value(s, "tfunnel_tool_call_duration_seconds_bucket", tool="git__status", le="1.0") == 1
    assert value(s, "tfunnel_tool_call_duration_seconds_bucket", tool="git__status", le="2.5") == 2


def test_tool_labels_are_capped() -> None:
    """Past the cap of distinct tool names, new names fold into tool="other"; known ones keep theirs."""
    m = Metrics()
    for i in range(MAX_TOOL_LABELS):
        m.tool_call(f"t{i}", 0.01, outcome="ok")
    m.tool_call("late_a", 0.01, outcome="ok")
    m.tool_call("late_b", 0.01, outcome="error")
    m.tool_call("t0", 0.01, outcome="ok")
    s = scrape(m)
    tools = {dict(labels)["tool"] for name, labels in s if name == "tfunnel_tool_calls_total"}
    assert len(tools) == MAX_TOOL_LABELS + 1
    assert "late_a" not in tools and "late_b" not in tools
    assert value(s, "tfunnel_tool_calls_total", tool="other", outcome="ok") == 1
    assert value(s, "tfunnel_tool_calls_total", tool="other", outcome="error") == 1
    assert value(s, "tfunnel_tool_call_duration_seconds_count", tool="other") == 2
    assert value(s, "tfunnel_tool_calls_total", tool="t0", outcome="ok") == 2


def test_method_labels_are_capped() -> None:
    """Client-chosen method names past the cap fold into method="other", so a client can't grow the scrape."""
    m = Metrics()
    for i in range(MAX_METHOD_LABELS + 10):
        m.request(f"junk/{i}", 0.001, error=True)
    s = scrape(m)
    methods = {dict(labels)["method"] for name, labels in s if name == "tfunnel_requests_total"}
    assert len(methods) == MAX_METHOD_LABELS + 1
    assert value(s, "tfunnel_requests_total", method="other", outcome="error") == 10
    assert value(s, "tfunnel_request_duration_seconds_count", method="other") == 10


def test_gate_hooks_and_inflight() -> None:
    """Gate decisions count per decision, hook durations per event, in-flight moves both ways."""
    m = Metrics()
    for decision in ("allow", "allow", "deny"):
        m.gate(decision)
    m.hook("PreToolUse", 0.2)
    m.hook("PreToolUse", 0.4)
    m.hook("PostToolUse", 0.1)
    m.inflight(+1)
    m.inflight(+1)
    m.inflight(+1)
    m.inflight(-1)
    s = scrape(m)
    assert value(s, "tfunnel_gate_decisions_total", decision="allow") == 2
    assert value(s, "tfunnel_gate_decisions_total", decision="deny") == 1
    assert value(s, "tfunnel_hook_duration_seconds_count", event="PreToolUse") == 2
    assert value(s, "tfunnel_hook_duration_seconds_sum", event="PreToolUse") == pytest.approx(0.6)
    assert value(s, "tfunnel_hook_duration_seconds_count", event="PostToolUse") == 1
    assert value(s, "tfunnel_inflight_calls") == 2


def test_upstream_gauges_and_sessions() -> None:
    """Each upstream gets 1 for its state and 0 for the other four, plus restarts, tools and sessions."""
    m = Metrics()
    s = scrape(m, [stats("time", "ready", tools=2, restarts=1), stats("git", "backoff", restarts=3),
                   stats("fs", "disabled")], sessions=4)
    states = ("starting", "ready", "backoff", "stopped", "disabled")
    for upstream, current in (("time", "ready"), ("git", "backoff"), ("fs", "disabled")):
        assert {st: value(s, "tfunnel_upstream_state", upstream=upstream, state=st) for st in states} == {
            st: (1.0 if st == current else 0.0) for st in states}
    assert value(s, "tfunnel_upstream_restarts", upstream="time") == 1
    assert value(s, "tfunnel_upstream_restarts", upstream="git") == 3
    assert value(s, "tfunnel_upstream_tools", upstream="time") == 2
    assert value(s, "tfunnel_upstream_tools", upstream="fs") == 0
    assert value(s, "tfunnel_sessions") == 4


def test_upstream_gauges_follow_each_render() -> None:
    """A later render reflects new states and counts and drops upstreams no longer reported."""
    m = Metrics()
    scrape(m, [stats("time", "starting"), stats("git", "ready", tools=5)], sessions=2)
    s = scrape(m, [stats("time", "stopped", restarts=5)], sessions=0)
    assert value(s, "tfunnel_upstream_state", upstream="time", state="stopped") == 1
    assert value(s, "tfunnel_upstream_state", upstream="time", state="starting") == 0
    assert value(s, "tfunnel_upstream_restarts", upstream="time") == 5
    assert not [key for key in s if ("upstream", "git") in key[1]]
    assert value(s, "tfunnel_sessions") == 0


def test_instances_do_not_share_state() -> None:
    """Two Metrics have separate registries: traffic on one never shows on the other."""
    a, b = Metrics(), Metrics()
    a.request("ping", 0.001, error=False)
    a.tool_call("x", 0.1, outcome="ok")
    a.gate("allow")
    a.inflight(1)
    sa = scrape(a, [stats("time", "ready")], sessions=1)
    sb = scrape(b)
    assert value(sa, "tfunnel_requests_total", method="ping", outcome="ok") == 1
    assert value(sb, "tfunnel_requests_total", method="ping", outcome="ok") is None
    assert value(sb, "tfunnel_tool_calls_total", tool="x", outcome="ok") is None
    assert value(sb, "tfunnel_gate_decisions_total", decision="allow") is None
    assert value(sb, "tfunnel_inflight_calls") == 0
    assert value(sb, "tfunnel_sessions") == 0
    assert not [key for key in sb if key[0] == "tfunnel_upstream_state"]
