"""The lifecycle records of upstream state changes (`upstream/lifecycle.py`), table-driven."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tfunnel.config.expose import UpstreamSpec
from tfunnel.upstream import lifecycle
from tfunnel.upstream.lifecycle import MAX_ERROR_CHARS, Facts, records, where
from tfunnel.upstream.states import State, UpstreamStatistics

STATS = UpstreamStatistics(id="up", state="ready", transport="stdio", era="legacy",
                           protocol_version="2025-11-25", pid=42, tools=3, restarts=0, since="T",
                           last_error="upstream 'up' exited with status 3",
                           stopped_reason="crash loop; last error: boom")
TARGET = {"command": "mcp-server-up"}
S, R, B, X, D = State.STARTING, State.READY, State.BACKOFF, State.STOPPED, State.DISABLED
ERROR = STATS.last_error


def facts(attempt: int = 0, **fields: Any) -> Facts:
    return Facts(STATS, TARGET, attempt, **fields)


CONNECT = {"event": "connect", "upstream": "up", "command": "mcp-server-up", "tools": 3, "era": "legacy",
           "protocolVersion": "2025-11-25", "pid": 42}
STOPPED = {"event": "stopped", "upstream": "up", "reason": "crash loop; last error: boom"}

TABLE = [
    (S, R, facts(), [CONNECT]),
    (S, R, facts(2), [CONNECT]),  # a reconnect that succeeded is a connect too
    (R, B, facts(died=True), [{"event": "disconnect", "upstream": "up", "reason": "died", "error": ERROR}]),
    (R, B, facts(died=True, halting=True),
     [{"event": "disconnect", "upstream": "up", "reason": "died", "error": ERROR}]),
    (R, B, facts(halting=True), [{"event": "disconnect", "upstream": "up", "reason": "reload"}]),
    (R, B, facts(), []),  # we closed it (shutdown): nothing, as a deliberate close in ToolFunnel
    (S, B, facts(0), [{"event": "connect_failed", "upstream": "up", "error": ERROR}]),
    (S, B, facts(2), [{"event": "reconnect_failed", "upstream": "up", "attempt": 2, "error": ERROR}]),
    (B, S, facts(1), [{"event": "reconnect", "upstream": "up", "attempt": 1}]),
    (S, X, facts(0), [{"event": "connect_failed", "upstream": "up", "error": ERROR}, STOPPED]),
    (S, X, facts(4),
     [{"event": "reconnect_failed", "upstream": "up", "attempt": 4, "error": ERROR}, STOPPED]),
    (B, X, facts(1), [STOPPED]),
    (B, X, facts(1, halting=True), []),  # replaced by a config change: not given up
    (S, X, facts(halting=True), []),
    (D, X, facts(halting=True), []),
    (D, X, facts(), []),
    (S, S, facts(), []),
    (R, R, facts(), []),
]


@pytest.mark.parametrize(("old", "new", "given", "expected"), TABLE)
def test_each_transition_records_what_toolfunnel_records(old: State, new: State, given: Facts,
                                                          expected: list[dict[str, Any]]) -> None:
    assert list(records(old, new, given)) == expected


def test_a_remote_connect_names_the_url_without_credentials_and_no_pid() -> None:
    spec = UpstreamSpec(id="web", transport="http", url="https://user:secret@example.com:8443/mcp?key=k#f",
                        headers={"Authorization": "Bearer sekrit"})
    remote = Facts(replace(STATS, id="web", pid=None, transport="http"), where(spec), 0)
    [connect] = records(S, R, remote)
    assert connect == {"event": "connect", "upstream": "web", "url": "https://example.com:8443/mcp",
                       "tools": 3, "era": "legacy", "protocolVersion": "2025-11-25"}


def test_a_child_connect_names_the_command_never_its_args_or_env() -> None:
    spec = UpstreamSpec(id="up", command="srv", args=("--token", "sekrit"), env={"API_KEY": "sekrit"})
    assert where(spec) == {"command": "srv"}


def test_errors_are_bounded() -> None:
    long = Facts(replace(STATS, last_error="x" * 5000, stopped_reason="y" * 5000), TARGET, 0)
    failed, stopped = records(S, X, long)
    assert len(failed["error"]) == MAX_ERROR_CHARS and failed["error"].endswith("…")
    assert len(stopped["reason"]) == MAX_ERROR_CHARS
    assert records(S, B, Facts(replace(STATS, last_error=None), TARGET, 0))[0]["error"] == "unknown error"


@pytest.mark.parametrize(("states", "connected", "failed"), [
    (["ready", "backoff", "disabled", "stopped", "starting"], ["u0"], ["u1", "u3", "u4"]),
    ([], [], []),
])
def test_the_reload_record_names_every_enabled_upstream(states: list[str], connected: list[str],
                                                        failed: list[str]) -> None:
    stats = [replace(STATS, id=f"u{i}", state=state) for i, state in enumerate(states)]
    assert lifecycle.reload(stats) == {"event": "reload", "connected": connected, "failed": failed}
