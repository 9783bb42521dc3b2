"""The `/health` document and status (`tfunnel/serve/health.py`), against SPEC §8.2."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest

from tfunnel.protocol.eras import LEGACY_VERSIONS, MODERN_VERSIONS
from tfunnel.serve.health import CallCounts, Status, health_document, http_status, overall_status
from tfunnel.upstream.supervisor import UpstreamStatistics

SINCE = "2026-01-02T03:04:05Z"


def stats(id: str, state: str, **overrides: Any) -> UpstreamStatistics:
    """An upstream statistics record in `state`, with plain defaults for the rest."""
    fields: dict[str, Any] = {
        "id": id, "state": state, "transport": "stdio", "era": None, "protocol_version": None,
        "pid": None, "tools": 0, "restarts": 0, "since": SINCE, "last_error": None, "stopped_reason": None,
    }
    fields.update(overrides)
    return UpstreamStatistics(**fields)


NO_ERRORS: Mapping[str, str] = {}
BAD_RELOAD = {"expose.json": "expose.json: upstreams.git.command: required"}


@pytest.mark.parametrize(("started", "stopping", "states", "config_errors", "expected"), [
    (True, False, [], NO_ERRORS, "ok"),
    (True, False, ["ready", "ready"], NO_ERRORS, "ok"),
    (True, False, ["ready", "disabled"], NO_ERRORS, "ok"),
    (True, False, ["disabled"], NO_ERRORS, "ok"),
    (True, False, ["ready", "starting"], NO_ERRORS, "degraded"),
    (True, False, ["ready", "backoff"], NO_ERRORS, "degraded"),
    (True, False, ["ready", "stopped"], NO_ERRORS, "degraded"),
    (True, False, ["ready"], BAD_RELOAD, "degraded"),
    (True, False, [], BAD_RELOAD, "degraded"),
    (False, False, ["ready"], NO_ERRORS, "starting"),
    (False, False, ["stopped"], BAD_RELOAD, "starting"),
    (True, True, ["ready"], NO_ERRORS, "stopping"),
    (False, True, ["backoff"], BAD_RELOAD, "stopping"),
])
def test_overall_status(started: bool, stopping: bool, states: list[str], config_errors: Mapping[str, str],
                        expected: Status) -> None:
    """Stopping wins, then starting; an enabled upstream not ready or a config error degrades."""
    upstreams = [stats(f"u{i}", state) for i, state in enumerate(states)]
    status = overall_status(started=started, stopping=stopping, upstreams=upstreams,
                            config_errors=config_errors)
    assert status == expected


@pytest.mark.parametrize(("states", "wrapped", "expected"), [
    (["ready", "ready"], "u0", "ok"),
    (["disabled", "ready"], "u0", "degraded"),  # the whole surface is empty: not a user's quiet choice
    (["ready"], "gone", "degraded"),
    (["ready", "disabled"], "u0", "ok"),
])
def test_a_wrap_is_ok_only_while_its_upstream_is_ready(states: list[str], wrapped: str,
                                                       expected: Status) -> None:
    upstreams = [stats(f"u{i}", state) for i, state in enumerate(states)]
    assert overall_status(started=True, stopping=False, upstreams=upstreams, config_errors=NO_ERRORS,
                          wrapped=wrapped) == expected
    document = health_document(status=expected, server_name="t", server_version="0", uptime_s=0,
                               protocol_versions=[], upstreams=upstreams, config_errors={},
                               calls=CallCounts(), sessions=0, listen_streams=0, wrap=(wrapped, "calc"))
    state = states[0] if wrapped == "u0" else "not configured"
    assert document["wrap"] == {"upstream": wrapped, "as": "calc", "state": state}


@pytest.mark.parametrize(("status", "code"), [
    ("ok", 200), ("degraded", 200), ("starting", 503), ("stopping", 503),
])
def test_http_status(status: Status, code: int) -> None:
    """200 while serving (ok, degraded), 503 while starting or stopping."""
    assert http_status(status) == code


def test_health_document_field_for_field() -> None:
    """A ready, a stopped and a disabled upstream plus config errors and warnings render exactly
    SPEC §8.2's shape (with `config.warnings`)."""
    upstreams = [
        stats("time", "ready", era="legacy", protocol_version="2025-06-18", pid=4242, tools=2, restarts=1),
        stats("git", "stopped", restarts=5, last_error="exit status 1",
              stopped_reason="5 restarts in 60s; last error: exit status 1"),
        stats("fs", "disabled"),
    ]
    config_errors = {"hooks.json": "hooks.json: PreToolUse[0].command: required",
                     "expose.json": "expose.json: upstreams.git.command: required"}
    versions = [*MODERN_VERSIONS, *reversed(LEGACY_VERSIONS)]
    document = health_document(
        status="degraded", server_name="tfunnel", server_version="0.1.0", uptime_s=12.345,
        protocol_versions=versions, upstreams=upstreams, config_errors=config_errors,
        calls=CallCounts(total=7, errors=2, denied=1), sessions=3, listen_streams=1,
        config_warnings=["toolfunnel.json: gate: field 'askFalback': is not a known field"],
        held={"time": ["tool:b", "tool:a"]})
    assert document == {
        "status": "degraded",
        "server": {"name": "tfunnel", "version": "0.1.0"},
        "uptimeS": 12.3,
        "protocolVersions": ["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"],
        "upstreams": {
            "time": {"state": "ready", "transport": "stdio", "era": "legacy", "protocolVersion": "2025-06-18",
                     "pid": 4242, "tools": 2, "restarts": 1, "since": SINCE, "lastError": None},
            "git": {"state": "stopped", "transport": "stdio", "era": None, "protocolVersion": None,
                    "pid": None, "tools": 0, "restarts": 5, "since": SINCE, "lastError": "exit status 1"},
            "fs": {"state": "disabled", "transport": "stdio", "era": None, "protocolVersion": None,
                   "pid": None, "tools": 0, "restarts": 0, "since": SINCE, "lastError": None},
        },
        "stopped": [{"id": "git", "reason": "5 restarts in 60s; last error: exit status 1"}],
        "config": {"errors": ["expose.json: upstreams.git.command: required",
                              "hooks.json: PreToolUse[0].command: required"],
                   "warnings": ["toolfunnel.json: gate: field 'askFalback': is not a known field"]},
        "calls": {"total": 7, "errors": 2, "denied": 1},
        "clients": {"sessions": 3, "listenStreams": 1},
        "approvals": {"held": {"time": ["tool:a", "tool:b"]}},
        "wrap": None,
    }
    assert list(document["upstreams"]) == ["time", "git", "fs"]
    assert json.loads(json.dumps(document)) == document


def test_stopped_reason_falls_back_to_last_error() -> None:
    """A stopped upstream without a stopped reason reports its last error as the reason."""
    document = health_document(
        status="degraded", server_name="tfunnel", server_version="0", uptime_s=0.0, protocol_versions=[],
        upstreams=[stats("a", "stopped", last_error="spawn failed: ENOENT"), stats("b", "backoff",
                                                                                last_error="crashed")],
        config_errors={}, calls=CallCounts(), sessions=0, listen_streams=0)
    assert document["stopped"] == [{"id": "a", "reason": "spawn failed: ENOENT"}]


def test_empty_gateway_document() -> None:
    """No upstreams, no errors, no calls: empty collections and zero counters, not missing keys."""
    document = health_document(
        status="ok", server_name="tfunnel", server_version="0", uptime_s=0.04, protocol_versions=[],
        upstreams=[], config_errors={}, calls=CallCounts(), sessions=0, listen_streams=0)
    assert document["uptimeS"] == 0.0
    assert document["upstreams"] == {}
    assert document["stopped"] == []
    assert document["config"] == {"errors": [], "warnings": []}
    assert document["calls"] == {"total": 0, "errors": 0, "denied": 0}
    assert document["clients"] == {"sessions": 0, "listenStreams": 0}
