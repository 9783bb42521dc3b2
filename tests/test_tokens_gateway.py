"""Token telemetry through a gateway (in-process, `tfunnel.testing.gateway`, on a real loopback
port): the SDK client lists, searches and runs over HTTP, and /metrics and /health show what it was
given, against the full surface, and how it found tools."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio
from mcp import Client

from tfunnel.testing.gateway import http_gateway

pytestmark = pytest.mark.timeout(90)


def _gauges(text: str) -> dict[str, float]:
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^(tfunnel_\S+) (\S+)$", text, re.M)}


async def _settled(http: httpx2.AsyncClient, url: str) -> tuple[dict[str, float], dict[str, Any]]:
    """/metrics and /health once the calls' texts are counted (the worker counts them a moment
    after the answers went out)."""
    with trio.fail_after(30):
        while True:
            gauges = _gauges((await http.get(f"{url}/metrics")).text)
            if gauges.get('tfunnel_tokens_given{part="meta_results",profile="default"}', 0) > 0 \
                    and gauges.get('tfunnel_tokens_given{part="instructions",profile="default"}', 0) > 0:
                return gauges, (await http.get(f"{url}/health")).json()
            await trio.sleep(0.05)


async def test_metrics_and_health_show_token_figures_and_how_tools_were_found(home: Path) -> None:
    """After list_tools, a toolfunnel_list_tools search for `base64` and running it, plus a run of a
    tool no search listed: /metrics has the lean and full tools/list sizes (full larger), the
    tokens given by part, one found and one direct call, one search; /health the same per profile
    and the counter in use."""
    (home / "toolfunnel.json").write_text(json.dumps({**json.loads((home / "toolfunnel.json").read_text()),
                                                      "tokens": "cl100k_base"}))
    async with http_gateway(home) as gw, httpx2.AsyncClient(timeout=10) as http, \
            Client(f"{gw.url}/mcp", mode="legacy", cache=None) as client:
        await client.list_tools()
        found = await client.call_tool("toolfunnel_list_tools", {"query": "base64 decode", "limit": 1})
        assert not found.is_error
        assert found.structured_content is not None
        assert [t["id"] for t in found.structured_content["tools"]] == ["base64"]
        ran = await client.call_tool("toolfunnel_run_tool",
                                     {"name": "base64", "args": {"op": "encode", "text": "hi"}})
        assert not ran.is_error
        direct = await client.call_tool("toolfunnel_run_tool", {"name": "hash", "args": {"text": "a"}})
        assert not direct.is_error
        gauges, health = await _settled(http, gw.url)
    lean = gauges['tfunnel_tokens_tools_list{profile="default",surface="lean"}']
    full = gauges['tfunnel_tokens_tools_list{profile="default",surface="full"}']
    assert 0 < lean < full
    assert gauges['tfunnel_tokens_given{part="tools_list",profile="default"}'] == lean
    assert gauges['tfunnel_tokens_full_equivalent{profile="default"}'] == \
        full + gauges['tfunnel_tokens_given{part="instructions",profile="default"}']
    assert gauges['tfunnel_tool_calls_discovery{how="found",profile="default"}'] == 1
    assert gauges['tfunnel_tool_calls_discovery{how="direct",profile="default"}'] == 1
    assert gauges['tfunnel_searches{outcome="all",profile="default"}'] == 1
    assert gauges['tfunnel_searches{outcome="without_call",profile="default"}'] == 0
    assert gauges['tfunnel_token_counter{counter="cl100k_base"}'] == 1
    tokens = health["tokens"]
    assert tokens["counter"] == "cl100k_base" and tokens["fallback"] is None
    default = tokens["profiles"]["default"]
    assert default["toolsList"] == {"lean": lean, "full": full}
    assert default["calls"] == {"found": 1, "direct": 1}
    assert default["given"]["total"] == sum(default["given"][p] for p in
                                            ("tools_list", "instructions", "meta_results"))
