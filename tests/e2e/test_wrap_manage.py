"""`tfunnel wrap`'s era probe of a third-party server (the real, dual-era mcp-server-time), the
command run as a process: the process-level part of tests/test_wrap_manage.py."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.interop import modern_time_command
from tests.test_wrap_manage import state
from tests.upstreams import set_upstreams
from tests.wire import gateway_argv

pytestmark = pytest.mark.timeout(120)


def test_cli_probe_of_a_dual_era_server(home: Path) -> None:
    """The probe of the real mcp-server-time (dual-era) says so."""
    command = modern_time_command()
    set_upstreams(home, {"id": "time", "command": command[0], "args": command[1:]})
    done = subprocess.run(gateway_argv(home, "wrap", "time"), capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    assert "probe: speaks MCP 2026-07-28: dual-era" in done.stdout
    assert state(home) == {"passthrough": "time"}
