"""Both protocol eras through the official `mcp` SDK client, on stdio and on Streamable HTTP, the
gateway in-process (`tfunnel.testing.sdk`, `tfunnel.testing.gateway`).

`mode="auto"` probes `server/discover` and must reach the modern era (2026-07-28);
`mode="legacy"` must reach 2025-11-25 — on the same running gateway, at the same time. The auto
mode over the SDK's real stdio transport to a `tfunnel serve` process is in
tests/e2e/test_modern_sdk.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio
from mcp import Client
from mcp.types import TextContent

from tfunnel.testing.gateway import http_gateway
from tfunnel.testing.sdk import META_TOOLS, sdk_client

pytestmark = pytest.mark.timeout(90)


async def list_and_call(client: Client) -> None:
    assert [t.name for t in (await client.list_tools()).tools] == META_TOOLS
    result = await client.call_tool("toolfunnel_run_tool", {"name": "echo", "args": {"x": 1}})
    assert not result.is_error, result.content
    block = result.content[0]
    assert isinstance(block, TextContent)
    assert json.loads(block.text)["args"] == {"x": 1}


async def test_legacy_mode_still_reaches_2025_11_25_over_stdio(home: Path) -> None:
    async with sdk_client(home, mode="legacy") as client:
        assert client.protocol_version == "2025-11-25"
        await list_and_call(client)


async def test_both_eras_at_once_on_one_http_endpoint(home: Path) -> None:
    async with http_gateway(home) as gw:
        url = f"{gw.url}/mcp"
        async with Client(url, mode="auto", cache=None) as modern_client, \
                Client(url, mode="legacy", cache=None) as legacy_client:
            assert modern_client.protocol_version == "2026-07-28"
            assert legacy_client.protocol_version == "2025-11-25"
            async with trio.open_nursery() as nursery:
                nursery.start_soon(list_and_call, modern_client)
                nursery.start_soon(list_and_call, legacy_client)
