"""The hook engine, the process-level part: an `ask` answered through elicitation by the official
SDK client over a real gateway process's stdio pipes (the client starts `tfunnel serve` itself),
and a crashing hook reported on a real `tfunnel call` process's stderr. The rest is
tests/test_gate_hooks.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from tests.hooks import decision, set_hooks
from tests.test_gate_hooks import elicitation
from tests.wire import gateway_argv

pytestmark = pytest.mark.timeout(90)


def test_a_hook_that_never_answered_is_logged(home: Path) -> None:
    """A crashing hook is reported on stderr (the call proceeds)."""
    set_hooks(home, {"command": "echo kaput >&2; exit 7"})
    done = subprocess.run(gateway_argv(home, "call", "hash", '{"text": "a"}'), capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0
    assert "hook did not answer" in done.stderr and "exited with status 7" in done.stderr


@pytest.mark.parametrize(("action", "runs"), [("accept", True), ("decline", False), ("cancel", False)])
async def test_ask_goes_to_the_user_through_elicitation(
    home: Path, tmp_path: Path, action: str, runs: bool
) -> None:
    """An `ask` decision becomes elicitation/create; only an accept runs the tool. The audit
    log's gate record is the user's answer, marked as asked (the admin UI's "asks" filter)."""
    set_hooks(home, {"command": decision("ask", "Danger ahead")})
    (home / "logs").mkdir(exist_ok=True)
    (home / "logs" / "log.config.json").write_text(json.dumps({"enabled": True}))
    danger_log = tmp_path / "danger.log"
    seen: list[str] = []
    params = StdioServerParameters(command=sys.executable, args=gateway_argv(home, "serve")[1:],
                                   env={"TOOLFUNNEL_DANGER_LOG": str(danger_log)})
    async with Client(params, mode="legacy", cache=None,
                      elicitation_callback=elicitation(action, seen)) as client:
        result = await client.call_tool("toolfunnel_run_tool", {"name": "danger", "args": {}})
        assert result.is_error is (not runs)
    assert len(seen) == 1 and seen[0].startswith("Danger ahead")
    assert danger_log.exists() is runs
    records = [json.loads(line) for line in (home / "logs" / "toolfunnel.log.jsonl").read_text().splitlines()]
    [gate] = [r for r in records if r["type"] == "gate" and r["tool"] == "danger"]
    assert gate["asked"] is True and gate["decision"] == ("allow" if runs else "deny")
