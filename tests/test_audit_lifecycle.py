"""The audit log records upstream lifecycle in ToolFunnel's shapes, behind the stdio gateway
in-process (where the record carries the upstream's pid and exit status, the mock upstream runs as
a real child; its `crash` tool makes it exit)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.test_gate_cancel_audit import audit_records, enable_audit
from tests.test_upstream_gateway import call
from tests.upstreams import FAST_RESTART, MOCK, mock_upstream, set_upstreams
from tfunnel.testing.gateway import stdio_gateway as gateway

pytestmark = pytest.mark.timeout(90)


def mcp(home: Path, upstream: str | None = None) -> list[dict[str, Any]]:
    """The `mcp` records (of `upstream`), without `ts` and `type`."""
    return [{k: v for k, v in r.items() if k not in ("ts", "type")} for r in audit_records(home)
            if r["type"] == "mcp" and (upstream is None or r.get("upstream") == upstream)]


async def until(check: Callable[[], bool], timeout: float = 20.0) -> None:
    with trio.fail_after(timeout):
        while not check():
            await trio.sleep(0.05)


async def test_crash_records_disconnect_reconnect_and_connect_again(home: Path) -> None:
    """connect (the command, its tools, no args or env) → disconnect died → reconnect 1 → connect;
    the client's session is recorded as ToolFunnel's `connect`."""
    set_upstreams(home, mock_upstream("mock", "--tools", "echo,crash", env={"SECRET_TOKEN": "s3cret-value"},
                                      **FAST_RESTART))
    enable_audit(home)
    async with gateway(home, upstreams="real") as wire:  # a child: its pid, its exit status
        await wire.initialize()
        await until(lambda: len(mcp(home, "mock")) >= 1)
        crashed = (await call(wire, 1, "mock_crash", {}))["result"]
        assert crashed["isError"] is True
        await until(lambda: [r["event"] for r in mcp(home, "mock")].count("connect") == 2)
        await wire.close_stdin()
        assert await wire.wait_exit() == 0
    first, gone, again, second = mcp(home, "mock")
    assert isinstance(first.pop("pid"), int) and isinstance(second.pop("pid"), int)
    assert first == second == {"event": "connect", "upstream": "mock", "command": MOCK[0], "tools": 2,
                               "era": "legacy", "protocolVersion": first["protocolVersion"]}
    assert gone == {"event": "disconnect", "upstream": "mock", "reason": "died",
                    "error": "upstream 'mock' exited with status 3"}
    assert again == {"event": "reconnect", "upstream": "mock", "attempt": 1}
    log = (home / "logs" / "toolfunnel.log.jsonl").read_text()
    assert "s3cret-value" not in log and "crashing on request" not in log  # no env, no stderr
    [client] = [r for r in audit_records(home) if r["type"] == "client" and r["event"] == "connect"]
    assert client["protocolVersion"] == "2025-11-25" and "client" in client


async def test_a_failing_upstream_records_its_failures_then_stopped(home: Path) -> None:
    """A child that exits at start: connect_failed, reconnect 1, reconnect_failed 1, ... stopped
    (the crash-loop ceiling); its stderr never reaches the record."""
    loop = {"maxRestarts": 1, "initialBackoffS": 0.05, "maxBackoffS": 0.1}
    set_upstreams(home, mock_upstream("dies", "--exit-at-start", "4", restart=loop))
    enable_audit(home)
    async with gateway(home) as wire:
        await wire.initialize()
        await until(lambda: any(r["event"] == "stopped" for r in mcp(home, "dies")))
        await wire.close_stdin()
        assert await wire.wait_exit() == 0
    records = mcp(home, "dies")
    assert [r["event"] for r in records] == ["connect_failed", "reconnect", "reconnect_failed", "stopped"]
    failed, again, refailed, stopped = records
    assert failed == {"event": "connect_failed", "upstream": "dies", "error": failed["error"]}
    assert "dies" in failed["error"] and "exiting at start" not in json.dumps(records)
    assert again == {"event": "reconnect", "upstream": "dies", "attempt": 1}
    assert refailed == {"event": "reconnect_failed", "upstream": "dies", "attempt": 1,
                        "error": refailed["error"]}
    assert stopped["reason"].startswith("crash loop") and len(stopped["reason"]) <= 500


async def test_an_expose_edit_records_reload_and_a_collision_is_recorded_once(home: Path) -> None:
    """A curated `as` taking another tool's name: one name_collision record (not one per surface
    rebuild); an expose.json edit that adds an upstream records its new connect, then `reload`
    naming what is connected and what failed (the replaced upstream's disconnect says `reload`)."""
    collide = [{"upstream": "mock", "tool": "add", "as": "mock_echo"}]
    set_upstreams(home, mock_upstream("mock", "--tools", "add,echo"), expose=collide)
    enable_audit(home)
    async with gateway(home) as wire:
        await wire.initialize()
        await until(lambda: any(r["event"] == "name_collision" for r in mcp(home)))
        missing = {"id": "missing", "command": "/no/such/mcp-server", "restart": {"permanentFailureS": 0.1}}
        set_upstreams(home, mock_upstream("mock", "--tools", "add,echo,ping"), missing, expose=collide)
        await until(lambda: any(r["event"] == "reload" for r in mcp(home)))
        await wire.close_stdin()
        assert await wire.wait_exit() == 0
    records = mcp(home)
    collisions = [r for r in records if r["event"] == "name_collision"]
    assert collisions == [{"event": "name_collision", "upstream": "mock", "tool": "echo",
                           "surfaced": "mock_echo"}]
    mock = [r["event"] for r in records if r.get("upstream") == "mock"]
    assert mock == ["connect", "name_collision", "disconnect", "connect"]
    assert next(r for r in records if r["event"] == "disconnect") == {
        "event": "disconnect", "upstream": "mock", "reason": "reload"}
    assert next(r["event"] for r in records if r.get("upstream") == "missing") == "connect_failed"
    [reload] = [r for r in records if r["event"] == "reload"]
    assert reload == {"event": "reload", "connected": ["mock"], "failed": ["missing"]}
