"""The modern era through the official `mcp` SDK client over its real stdio transport: a
`tfunnel serve` process, `mode="auto"` probing `server/discover` and reaching 2026-07-28. The eras
with the gateway in-process are tests/test_modern_sdk.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from tests.test_modern_sdk import list_and_call

pytestmark = pytest.mark.timeout(90)


def stdio_params(home: Path) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=["-m", "tfunnel", "--home", str(home), "serve"])


async def test_auto_mode_reaches_the_modern_era_over_stdio(home: Path) -> None:
    async with Client(stdio_params(home), mode="auto", cache=None) as client:
        assert client.protocol_version == "2026-07-28"
        assert client.server_info is not None and client.server_info.name == "tfunnel"
        await list_and_call(client)
