"""Cancellation reaching the gate, and the audit log of a running gateway (in-process,
`tfunnel.testing`; hooks and tools are real processes). A `tfunnel log on` process reaching a
running gateway process, which then exits 0 at the end of its stdin, is in
tests/e2e/test_gate_cancel_audit.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.hooks import EXIT2_DENY, set_hooks
from tests.test_stdio_wire import run_tool
from tests.wire import wait_for_file, wait_gone
from tfunnel.testing.gateway import stdio_gateway
from tfunnel.testing.sdk import sdk_client

pytestmark = pytest.mark.timeout(90)


async def test_cancelling_a_call_blocked_in_a_hook_kills_the_hook(home: Path, tmp_path: Path) -> None:
    """notifications/cancelled while PreToolUse runs kills the hook's group; no response, no tool run."""
    pidfile, danger_log = tmp_path / "hook.pids", tmp_path / "danger.log"
    set_hooks(home, {"command": f"sleep 300 & echo $$ $! > {pidfile}; wait", "timeout": 120})
    async with stdio_gateway(home, {"TOOLFUNNEL_DANGER_LOG": str(danger_log)}) as wire:
        await wire.initialize()
        await wire.send(run_tool(9, "danger", {}))
        pids = [int(p) for p in (await wait_for_file(pidfile)).split()]
        await wire.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 9}})
        assert await wait_gone(pids) == []
        assert (await wire.request(10, "ping"))["result"] == {}
        await wire.expect_silence(1.0)
    assert not danger_log.exists()


def audit_records(home: Path) -> list[dict[str, Any]]:
    path = home / "logs" / "toolfunnel.log.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def enable_audit(home: Path, **extra: Any) -> None:
    (home / "logs").mkdir(exist_ok=True)
    (home / "logs" / "log.config.json").write_text(json.dumps({"enabled": True, **extra}))


async def test_audit_holds_one_record_per_decision_and_run(home: Path) -> None:
    """Each call gives one gate record and (when allowed) one tool record; args are redacted."""
    enable_audit(home)
    set_hooks(home, {"matcher": "danger", "command": EXIT2_DENY})
    async with sdk_client(home) as client:
        await client.call_tool("toolfunnel_run_tool", {"name": "hash", "args": {"text": "secret"}})
        await client.call_tool("toolfunnel_run_tool", {"name": "danger", "args": {"x": 1}})
    # (The demo upstream's first sight and its connect are recorded too, by the tool approvals
    # and the supervisor: not this test's.)
    records = [r for r in audit_records(home) if r["type"] not in ("approval", "mcp")]
    kinds = [(r["type"], r.get("tool") or r.get("name") or r.get("event")) for r in records]
    assert kinds == [("client", "connect"), ("gate", "hash"), ("tool", "hash"), ("gate", "danger"),
                     ("client", "end")]
    gate_hash, tool_hash, gate_danger = records[1], records[2], records[3]
    assert gate_hash["decision"] == "allow" and gate_hash["hook"] is None
    assert gate_danger == {**gate_danger, "decision": "deny", "reason": "exit-2 says no", "hook": "h0"}
    assert tool_hash["mode"] == "gateway" and tool_hash["ok"] is True and tool_hash["durationMs"] > 0
    assert "secret" not in json.dumps(records)
    assert all(r["ts"].endswith("Z") for r in records)


async def test_audit_logs_arguments_only_with_log_args(home: Path) -> None:
    """With logArgs the arguments and the result are recorded."""
    enable_audit(home, logArgs=True)
    async with sdk_client(home) as client:
        await client.call_tool("toolfunnel_run_tool", {"name": "hash", "args": {"text": "visible"}})
    tool = next(r for r in audit_records(home) if r["type"] == "tool")
    assert tool["args"] == {"text": "visible"}
    assert tool["result"]["structuredContent"]["algo"] == "sha256"


async def test_audit_rotates_at_the_size_limit(home: Path) -> None:
    """Past maxBytes the file is rotated, keeping `backups` older files."""
    enable_audit(home, maxBytes=400, backups=2)
    async with sdk_client(home) as client:
        for _ in range(8):
            await client.call_tool("toolfunnel_run_tool", {"name": "uuid", "args": {}})
    logs = home / "logs"
    assert sorted(p.name for p in logs.glob("toolfunnel.log.jsonl*")) == [
        "toolfunnel.log.jsonl", "toolfunnel.log.jsonl.1", "toolfunnel.log.jsonl.2"]
    assert all(p.stat().st_size < 400 + 400 for p in logs.glob("toolfunnel.log.jsonl*"))


async def test_audit_off_writes_nothing(home: Path) -> None:
    """With the log off (the default) no log file or folder appears."""
    async with sdk_client(home) as client:
        await client.call_tool("toolfunnel_run_tool", {"name": "hash", "args": {"text": "a"}})
    assert not (home / "logs").exists()
