"""The HTTP service under faults and load. Every load here is bounded in count and time, on
loopback only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

from tests.httpgw import http_gateway
from tests.test_http import ACCEPT, open_session
from tests.test_stdio_wire import run_tool

pytestmark = pytest.mark.timeout(120)


async def test_made_up_tool_names_share_one_metrics_label(home: Path) -> None:
    """600 calls of distinct unknown names count under one tool="unknown" label; a known tool
    keeps its own."""
    async with http_gateway(home) as gw, httpx2.AsyncClient(timeout=30) as http:
        headers = {**ACCEPT, "mcp-session-id": await open_session(http, gw.url)}
        limiter = trio.CapacityLimiter(8)

        async def call(name: str, args: dict[str, Any]) -> None:
            async with limiter:
                reply = await http.post(f"{gw.url}/mcp", json=run_tool(name, name, args), headers=headers)
                assert reply.status_code == 200

        with trio.fail_after(90):
            async with trio.open_nursery() as nursery:
                for i in range(600):
                    nursery.start_soon(call, f"made_up_{i}", {})
                nursery.start_soon(call, "hash", {"text": "abc"})
        text = (await http.get(f"{gw.url}/metrics")).text
    tools = {s.labels["tool"]: s.value for family in text_string_to_metric_families(text)
             for s in family.samples if s.name == "tfunnel_tool_calls_total"}
    assert tools == {"unknown": 600, "hash": 1}

