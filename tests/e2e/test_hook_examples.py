"""The example hooks, the process-level part: protect-paths' ask answered through elicitation by
the official SDK client over a real gateway process's stdio pipes (the client starts `tfunnel
serve` itself). The rest is tests/test_hook_examples.py."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.types import ElicitResult

from tests.test_hook_examples import enable
from tests.wire import gateway_argv
from tfunnel.testing.sdk import text

pytestmark = pytest.mark.timeout(90)


def elicitation(seen: list[str]) -> Any:
    async def accept(context: Any, params: Any) -> ElicitResult:
        seen.append(params.message)
        return ElicitResult(action="accept", content={})
    return accept


@pytest.mark.parametrize(("args", "asked"), [
    ({"path": "/etc/passwd"}, True),
    ({"path": "/tmp/notes.txt"}, False),
], ids=["touches-etc", "elsewhere"])
async def test_protect_paths_asks_through_elicitation(
    home: Path, args: dict[str, Any], asked: bool
) -> None:
    """protect-paths (a Claude Code bash hook, unchanged) asks only for /etc; an accept runs the call."""
    enable(home, "pre-tool-use/protect-paths")
    seen: list[str] = []
    params = StdioServerParameters(command=sys.executable, args=gateway_argv(home, "serve")[1:])
    async with Client(params, mode="legacy", cache=None, elicitation_callback=elicitation(seen)) as client:
        result = await client.call_tool("toolfunnel_run_tool", {"name": "echo", "args": args})
        assert not result.is_error, text(result)
        assert result.structured_content == {"ok": True, "args": args, "argv": []}
    assert len(seen) == int(asked)
    if asked:
        assert seen[0].startswith("This call touches a system path (/etc, /usr or /boot).")
