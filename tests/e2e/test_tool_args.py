"""How a register tool receives its arguments, the process-level part: a real gateway process
whose own environment (the bytes the kernel hands the process) holds a variable that is not UTF-8.
The rest is tests/test_tool_args.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.wire import gateway

pytestmark = pytest.mark.timeout(60)


async def test_a_gateway_environment_that_is_not_utf_8_still_runs_tools(home: Path) -> None:
    """A variable of the gateway's own environment that is not UTF-8 (Linux allows any bytes)
    reaches the tool unchanged and breaks nothing."""
    async with gateway(home, {"ODD": os.fsdecode(b"caf\xe9")}) as wire:
        await wire.initialize()
        reply = await wire.request(1, "tools/call", {"name": "toolfunnel_run_tool",
                                                     "arguments": {"name": "echo", "args": {"t": "hi"}}})
    assert reply["result"]["structuredContent"]["args"] == {"t": "hi"}, reply
