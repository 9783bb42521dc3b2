"""Era bridges through the gateway in-process, driven by the official SDK client (PROTOCOL.md §9).

- Elicitation both ways with an SDK fixture upstream that elicits in both eras: as a modern
  upstream (its `input_required` handed to a modern client, or answered by a legacy client's real
  elicitation) and pinned legacy (its `elicitation/create` forwarded to a legacy client, or parked
  for a modern client's MRTR retry).
- An upstream's tool list change reaches a modern listener, tagged with its subscription id.

The upstreams are real children. Third-party upstreams (mcp-server-time, modern and legacy, behind
one gateway process) and elicitation over a real gateway process's stdio are in
tests/e2e/test_modern_bridges.py.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio
from mcp import Client
from mcp.types import ElicitResult, TextContent

from tests.upstreams import write_expose
from tfunnel.testing.gateway import http_gateway
from tfunnel.testing.gateway import stdio_gateway as gateway
from tfunnel.testing.sdk import sdk_client

pytestmark = pytest.mark.timeout(120)

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "elicit_server.py"
V = "2026-07-28"


def elicit_upstreams() -> list[dict[str, Any]]:
    row = {"command": sys.executable, "args": [str(FIXTURE)], "allowOutsidePaths": True}
    return [{"id": "ask", **row}, {"id": "askold", **row, "legacyPin": True}]


def text(result: Any) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


@asynccontextmanager
async def client(home: Path, mode: str, **kwargs: Any) -> AsyncIterator[Client]:
    """The SDK client on the gateway's stdio, from its first byte (not waiting for the upstreams)."""
    async with sdk_client(home, settle=False, mode=mode, **kwargs) as c:
        assert c.protocol_version == (V if mode == "auto" else "2025-11-25")
        yield c


def answering(ok: bool, seen: list[str]) -> Any:
    async def callback(context: Any, params: Any) -> ElicitResult:
        seen.append(params.message)
        return ElicitResult(action="accept", content={"ok": ok})
    return callback


@pytest.mark.parametrize("upstream", ["ask", "askold"])
@pytest.mark.parametrize("mode", ["auto", "legacy"])
@pytest.mark.parametrize("ok", [True, False])
async def test_an_upstream_elicitation_reaches_the_client_in_either_era(
    home: Path, upstream: str, mode: str, ok: bool
) -> None:
    write_expose(home, elicit_upstreams())
    seen: list[str] = []
    async with client(home, mode, elicitation_callback=answering(ok, seen)) as c:
        result = await c.call_tool("toolfunnel_run_tool",
                                   {"name": f"{upstream}_confirm", "args": {"item": "x"}})
        assert not result.is_error, result.content
        assert text(result) == ("confirmed x" if ok else "declined x")
    assert seen == ["Confirm x?"]


async def test_a_client_that_cannot_be_asked(home: Path) -> None:
    """No elicitation declared: a legacy upstream's question is declined for a client of either
    era; a modern upstream's -32021 reaches a modern client as that protocol error and a legacy
    client as an isError result naming what was missing."""
    write_expose(home, elicit_upstreams())
    meta = {"io.modelcontextprotocol/protocolVersion": V, "io.modelcontextprotocol/clientCapabilities": {}}

    def call(upstream: str, modern: bool) -> dict[str, Any]:
        params: dict[str, Any] = {"name": "toolfunnel_run_tool",
                                  "arguments": {"name": f"{upstream}_confirm", "args": {"item": "q"}}}
        return {**params, "_meta": meta} if modern else params

    async with gateway(home) as wire:
        await wire.initialize()
        refused = await wire.request(1, "tools/call", call("ask", modern=True))
        assert refused["error"]["code"] == -32021
        assert refused["error"]["data"]["requiredCapabilities"]["elicitation"] is not None
        declined = (await wire.request(2, "tools/call", call("askold", modern=True)))["result"]
        assert declined["content"][0]["text"] == "declined q"
        failed = (await wire.request(3, "tools/call", call("ask", modern=False)))["result"]
        assert failed["isError"] is True and "elicitation capability" in failed["content"][0]["text"]
        declined = (await wire.request(4, "tools/call", call("askold", modern=False)))["result"]
        assert declined["content"][0]["text"] == "declined q"


async def test_a_parked_call_survives_between_rounds_on_the_raw_wire(home: Path) -> None:
    """Legacy upstream + modern client: the first round ends with input_required while the
    upstream call waits; the retry's answer completes the same upstream call."""
    write_expose(home, elicit_upstreams())
    meta = {"io.modelcontextprotocol/protocolVersion": V,
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}
    call = {"name": "toolfunnel_run_tool", "arguments": {"name": "askold_confirm", "args": {"item": "z"}},
            "_meta": meta}
    async with gateway(home) as wire:
        first = (await wire.request(1, "tools/call", call))["result"]
        assert first["resultType"] == "input_required", first
        (key, question), = first["inputRequests"].items()
        assert question["method"] == "elicitation/create" and question["params"]["message"] == "Confirm z?"
        retry = {**call, "requestState": first["requestState"],
                 "inputResponses": {key: {"action": "accept", "content": {"ok": True}}}}
        done = (await wire.request(2, "tools/call", retry))["result"]
        assert done["resultType"] == "complete" and done["content"][0]["text"] == "confirmed z"
        again = await wire.request(3, "tools/call", retry)  # the parked call is finished and gone
        assert again["result"]["isError"] is True


async def test_an_upstream_tool_change_reaches_a_modern_listener(home: Path) -> None:
    write_expose(home, elicit_upstreams()[:1])
    meta = {"io.modelcontextprotocol/protocolVersion": V, "io.modelcontextprotocol/clientCapabilities": {}}
    sub = "io.modelcontextprotocol/subscriptionId"
    async with gateway(home) as wire:
        await wire.request(0, "tools/list", {"_meta": meta})  # the upstream is up: no startup change
        await wire.send({"jsonrpc": "2.0", "id": "L", "method": "subscriptions/listen",
                         "params": {"notifications": {"toolsListChanged": True}, "_meta": meta}})
        ack = await wire.recv()
        assert ack["method"] == "notifications/subscriptions/acknowledged"
        grown = await wire.request(1, "tools/call", {"name": "toolfunnel_run_tool",
                                                     "arguments": {"name": "ask_grow"}, "_meta": meta})
        assert grown["result"]["content"][0]["text"] == "grown"
        with trio.fail_after(20):
            while True:
                message = await wire.recv()
                if message.get("method") == "notifications/tools/list_changed":
                    break
        assert message["params"]["_meta"][sub] == "L"
        listed = await wire.request(2, "tools/call", {"name": "toolfunnel_list_tools",
                                                      "arguments": {"query": "extra"}, "_meta": meta})
        assert "ask_extra" in listed["result"]["content"][0]["text"]


async def test_missing_capability_is_http_400_with_minus_32021(home: Path) -> None:
    write_expose(home, elicit_upstreams()[:1])
    meta = {"io.modelcontextprotocol/protocolVersion": V, "io.modelcontextprotocol/clientCapabilities": {}}
    body = {"jsonrpc": "2.0", "id": 5, "method": "tools/call",
            "params": {"name": "toolfunnel_run_tool",
                       "arguments": {"name": "ask_confirm", "args": {"item": "q"}}, "_meta": meta}}
    headers = {"accept": "application/json, text/event-stream", "mcp-protocol-version": V,
               "mcp-method": "tools/call", "mcp-name": "toolfunnel_run_tool"}
    async with http_gateway(home) as gw, httpx2.AsyncClient(timeout=30) as http:
        reply = await http.post(f"{gw.url}/mcp", json=body, headers=headers)
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["code"] == -32021 and "elicitation" in error["data"]["requiredCapabilities"]
    assert reply.json()["id"] == 5


@pytest.mark.parametrize("upstream", ["ask", "askold"])
async def test_a_legacy_http_session_is_asked_on_the_call_stream(home: Path, upstream: str) -> None:
    """Over Streamable HTTP a legacy session that declared elicitation gets the question as a
    request on its call's SSE stream and answers with a POST (2025-11-25 transport)."""
    write_expose(home, elicit_upstreams())
    seen: list[str] = []
    async with http_gateway(home) as gw, Client(f"{gw.url}/mcp", mode="legacy", cache=None,
                                                elicitation_callback=answering(True, seen)) as c:
        result = await c.call_tool("toolfunnel_run_tool",
                                   {"name": f"{upstream}_confirm", "args": {"item": "h"}})
        assert not result.is_error, result.content
        assert text(result) == "confirmed h"
    assert seen == ["Confirm h?"]
