"""The example hooks shipped in conf/hooks, enabled with `tfunnel hook enable` on a seeded home and
driven through a stdio gateway in-process (`tfunnel.testing`) with the official SDK client (the
hooks and the example hook server are real processes). protect-paths' ask answered through
elicitation by the SDK over a real gateway process's stdio is in tests/e2e/test_hook_examples.py."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tfunnel.testing.cli import run
from tfunnel.testing.sdk import sdk_client, text

pytestmark = pytest.mark.timeout(90)


def enable(home: Path, hook_id: str) -> None:
    done = run(home, "hook", "enable", hook_id)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(("args", "blocked"), [
    ({"cmd": "rm -rf /"}, True),
    ({"cmd": "ls"}, False),
], ids=["rm-rf-root", "ls"])
async def test_deny_dangerous_blocks_destructive_input(
    home: Path, args: dict[str, Any], blocked: bool
) -> None:
    """deny-dangerous (exit-2 protocol) blocks `rm -rf /` with its reason and lets `ls` through."""
    enable(home, "pre-tool-use/deny-dangerous")
    async with sdk_client(home) as client:
        result = await client.call_tool("toolfunnel_run_tool", {"name": "echo", "args": args})
        assert result.is_error is blocked, text(result)
        if blocked:
            assert "deny-dangerous" in text(result)
        else:
            assert result.structured_content == {"ok": True, "args": args, "argv": []}


@pytest.mark.parametrize(("name", "args", "runs"), [
    ("danger", {}, False),
    ("danger", {"confirm": "yes"}, False),
    ("Danger Demo", {}, False),
    ("danger", {"confirm": True}, True),
    ("Danger Demo", {"confirm": True}, True),
], ids=["no-confirm", "confirm-not-true", "display-name-no-confirm", "confirm", "display-name-confirm"])
async def test_guard_danger_demo_needs_confirm(
    home: Path, tmp_path: Path, name: str, args: dict[str, Any], runs: bool
) -> None:
    """guard-danger-demo (JSON protocol) runs the Danger Demo only with "confirm": true, by any name."""
    enable(home, "pre-tool-use/guard-danger-demo")
    danger_log = tmp_path / "danger.log"
    async with sdk_client(home, env={"TOOLFUNNEL_DANGER_LOG": str(danger_log)}) as client:
        result = await client.call_tool("toolfunnel_run_tool", {"name": name, "args": args})
        assert result.is_error is (not runs), text(result)
        if not runs:
            assert text(result) == 'the Danger Demo needs "confirm": true in its arguments'
    assert danger_log.exists() is runs


async def test_audit_hook_appends_one_line_per_call_without_arguments(home: Path) -> None:
    """post-tool-use/audit appends {tool, session, isError} to logs/hook-audit.jsonl, never the args."""
    enable(home, "post-tool-use/audit")
    audit = home / "logs" / "hook-audit.jsonl"
    async with sdk_client(home) as client:
        first = await client.call_tool("toolfunnel_run_tool",
                                       {"name": "echo", "args": {"secret": "hunter2-in-args"}})
        assert not first.is_error
        lines = audit.read_text().splitlines()
        assert len(lines) == 1
        second = await client.call_tool("toolfunnel_run_tool", {"name": "hash", "args": {"text": "abc"}})
        assert not second.is_error
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    assert [r["tool"] for r in records] == ["echo", "hash"]
    assert all(set(r) == {"ts", "tool", "session", "isError"} and r["isError"] is False for r in records)
    assert "hunter2" not in audit.read_text() and "abc" not in audit.read_text()


async def test_protect_paths_without_elicitation_falls_back_to_deny(home: Path) -> None:
    """With no elicitation capability and the default gate.askFallback, protect-paths' ask is a deny."""
    enable(home, "pre-tool-use/protect-paths")
    async with sdk_client(home) as client:
        result = await client.call_tool("toolfunnel_run_tool",
                                        {"name": "echo", "args": {"path": "/etc/passwd"}})
        assert result.is_error
        assert text(result).startswith("This call touches a system path") and "askFallback" in text(result)
        other = await client.call_tool("toolfunnel_run_tool", {"name": "echo", "args": {"path": "/tmp/x"}})
        assert not other.is_error, text(other)


@pytest.fixture
def hook_server(home: Path) -> Iterator[str]:
    """hooks/scripts/hook_server.py started from the seeded home on a free port; its URL."""
    argv = [sys.executable, str(home / "hooks" / "scripts" / "hook_server.py"), "--port", "0"]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) as server:
        try:
            assert server.stdout is not None
            yield server.stdout.readline().split()[-1]
        finally:
            server.terminate()
            server.wait(timeout=10)


@pytest.mark.parametrize(("args", "blocked"), [
    ({"cmd": "rm -rf /"}, True),
    ({"cmd": "mkfs.ext4 /dev/sda1"}, True),
    ({"cmd": "ls"}, False),
], ids=["rm-rf-root", "mkfs", "ls"])
async def test_the_hook_server_applies_deny_dangerous_over_http(
    home: Path, hook_server: str, args: dict[str, Any], blocked: bool
) -> None:
    """The example hook server answers the shipped http row (pointed at its port) with
    deny-dangerous's decisions."""
    manifest = home / "hooks" / "hooks.manifest.json"
    doc = json.loads(manifest.read_text())
    row = next(r for r in doc["hooks"] if r["id"] == "pre-tool-use/deny-dangerous-http")
    row["url"] = hook_server + "pre-tool-use"
    manifest.write_text(json.dumps(doc))
    enable(home, "pre-tool-use/deny-dangerous-http")
    async with sdk_client(home) as client:
        result = await client.call_tool("toolfunnel_run_tool", {"name": "echo", "args": args})
        assert result.is_error is blocked, text(result)
        if blocked:
            assert text(result).startswith("blocked by deny-dangerous: the input looks like")


def test_the_hook_server_binds_loopback_only() -> None:
    """The example server refuses a non-loopback --host."""
    script = Path(__file__).resolve().parents[1] / "conf" / "hooks" / "scripts" / "hook_server.py"
    done = subprocess.run([sys.executable, str(script), "--host", "0.0.0.0", "--port", "0"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "loopback" in done.stderr
