"""The modern era through a real `tfunnel serve` process: the process-level part of
tests/test_modern_stdio.py. The SDK's auto-mode client spawns the gateway and runs the MRTR loop
with its elicitation callback over the process's real stdio."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from tests.hooks import decision, set_hooks
from tests.test_gate_hooks import elicitation
from tests.test_modern_stdio import V
from tests.wire import gateway_argv

pytestmark = pytest.mark.timeout(90)


@pytest.mark.parametrize(("action", "runs"), [("accept", True), ("decline", False)])
async def test_sdk_modern_client_answers_the_gate_through_mrtr_over_real_stdio(
    home: Path, tmp_path: Path, action: str, runs: bool
) -> None:
    """The SDK's auto-mode client runs the MRTR loop with its elicitation callback."""
    set_hooks(home, {"command": decision("ask", "Danger ahead")})
    danger_log = tmp_path / "danger.log"
    env = {"TOOLFUNNEL_DANGER_LOG": str(danger_log)}
    seen: list[str] = []
    params = StdioServerParameters(command=sys.executable, args=gateway_argv(home, "serve")[1:], env=env)
    async with Client(params, mode="auto", cache=None,
                      elicitation_callback=elicitation(action, seen)) as client:
        assert client.protocol_version == V
        result = await client.call_tool("toolfunnel_run_tool", {"name": "danger", "args": {}})
        assert result.is_error is (not runs)
    assert len(seen) == 1 and seen[0].startswith("Danger ahead")
    assert danger_log.exists() is runs
