"""Era bridges through a real `tfunnel serve` process: the process-level part of
tests/test_modern_bridges.py (PROTOCOL.md §9).

- Third-party upstreams: a modern upstream (mcp-server-time 2026.10.19) and a legacy-only one
  (mcp-server-time 2025.9.25 on mcp 1.30.0) behind one HTTP gateway process, each reached by a
  modern and by a legacy client: same results.
- An upstream's elicitation reaching the official SDK client over the gateway process's real
  stdio, in either era (the whole matrix runs in-process in tests/test_modern_bridges.py).
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client, StdioServerParameters

from tests.httpgw import http_gateway
from tests.interop import legacy_time_command, modern_time_command
from tests.test_modern_bridges import V, answering, elicit_upstreams, text
from tests.upstreams import undated, write_expose
from tests.wire import gateway_argv

pytestmark = pytest.mark.timeout(120)

CONVERT = {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}


def time_upstreams() -> list[dict[str, Any]]:
    modern, legacy = modern_time_command(), legacy_time_command()
    return [{"id": "newtime", "command": modern[0], "args": modern[1:], "allowOutsidePaths": True},
            {"id": "oldtime", "command": legacy[0], "args": legacy[1:], "allowOutsidePaths": True}]


@asynccontextmanager
async def client(home: Path, mode: str, **kwargs: Any) -> AsyncIterator[Client]:
    params = StdioServerParameters(command=sys.executable, args=gateway_argv(home, "serve")[1:])
    async with Client(params, mode=mode, cache=None, **kwargs) as c:
        assert c.protocol_version == (V if mode == "auto" else "2025-11-25")
        yield c


async def test_four_era_combinations_give_the_same_results(home: Path) -> None:
    write_expose(home, time_upstreams())
    results: dict[tuple[str, str], Any] = {}
    async with http_gateway(home) as gw:
        for mode in ("auto", "legacy"):
            async with Client(f"{gw.url}/mcp", mode=mode, cache=None) as c:
                for upstream in ("newtime", "oldtime"):
                    result = await c.call_tool("toolfunnel_run_tool",
                                               {"name": f"{upstream}_convert_time", "args": CONVERT})
                    assert not result.is_error, result.content
                    results[(mode, upstream)] = undated(json.loads(text(result)))
        async with httpx2.AsyncClient(timeout=10) as http:
            health = (await http.get(f"{gw.url}/health")).json()
    assert len({json.dumps(r, sort_keys=True) for r in results.values()}) == 1, results
    assert results[("auto", "newtime")]["target"]["timezone"] == "Asia/Tokyo"
    upstreams = health["upstreams"]
    assert (upstreams["newtime"]["era"], upstreams["newtime"]["protocolVersion"]) == ("modern", V)
    assert (upstreams["oldtime"]["era"], upstreams["oldtime"]["protocolVersion"]) == ("legacy", "2025-11-25")
    assert health["protocolVersions"][0] == V


@pytest.mark.parametrize(("upstream", "mode"), [("ask", "legacy"), ("askold", "auto")])
async def test_an_upstream_elicitation_reaches_the_client_over_real_stdio(
    home: Path, upstream: str, mode: str
) -> None:
    """A modern upstream's question answered by a legacy client's real elicitation, and a pinned
    legacy upstream's `elicitation/create` parked for a modern client's MRTR retry, over the
    gateway process's stdio."""
    write_expose(home, elicit_upstreams())
    seen: list[str] = []
    async with client(home, mode, elicitation_callback=answering(True, seen)) as c:
        result = await c.call_tool("toolfunnel_run_tool",
                                   {"name": f"{upstream}_confirm", "args": {"item": "x"}})
        assert not result.is_error, result.content
        assert text(result) == "confirmed x"
    assert seen == ["Confirm x?"]
