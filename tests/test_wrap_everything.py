"""Wrap mode with a real upstream we did not write (`@modelcontextprotocol/server-everything`,
npm): through `tfunnel wrap`, the official SDK client meets the server itself — its identity,
tools (original names, every field), prompts, resources, templates, results and errors — in both
eras, over stdio and over Streamable HTTP."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import Implementation, ServerCapabilities

from tests.httpgw import http_gateway
from tests.test_breadth_everything import dumped, snapshot
from tests.test_real_upstreams import (
    EVERYTHING_FIXED,
    EVERYTHING_SERVER,
    URL_ELICITATION_ONLY,
    definition,
    direct,
    everything_upstream,
    wire,
    write_expose,
)
from tests.test_sdk_stdio import sdk_client

pytestmark = pytest.mark.timeout(150)

ERAS = ["legacy", "2026-07-28"]
SERVER_INFO = "io.modelcontextprotocol/serverInfo"
# Calls the server answers with an error of its own: an unknown enum value, a missing argument.
EVERYTHING_ERRORS: list[tuple[str, dict[str, Any]]] = [
    ("get-annotated-message", {"messageType": "nonsense"}),
    ("echo", {}),
]


def wrap(home: Path, upstream: str = "everything", state: dict[str, Any] | None = None) -> None:
    """Set the wrap in `tools/tools.state.json` (what `tfunnel wrap ID` writes)."""
    path = home / "tools" / "tools.state.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"passthrough": upstream, **(state or {})}))


async def face(client: Client) -> dict[str, Any]:
    """Who the server says it is, to this client (a modern client asks `server/discover`)."""
    if client.mode != "legacy":  # the SDK client does not discover by itself: asked on the wire
        raw = await client.session.send_discover(client.mode)
        instructions = raw.get("instructions")
        capabilities = ServerCapabilities.model_validate(raw["capabilities"])
        info: Implementation | None = Implementation.model_validate(raw["_meta"][SERVER_INFO])
    else:
        instructions, capabilities, info = client.instructions, client.server_capabilities, client.server_info
    return {"serverInfo": info.model_dump(by_alias=True, exclude_none=True, mode="json") if info else None,
            "capabilities": capabilities.model_dump(by_alias=True, exclude_none=True, mode="json")
            if capabilities else None,
            "instructions": instructions}


async def surface(client: Client) -> dict[str, Any]:
    """Everything a client can tell the server by: its face, its tools (those a form-elicitation
    client is offered), fixed results and error answers, and its whole non-tool surface."""
    tools = [definition(t) for t in (await client.list_tools()).tools if t.name not in URL_ELICITATION_ONLY]
    calls = [wire(await client.call_tool(name, args)) for name, args in EVERYTHING_FIXED]
    errors: list[Any] = []
    for name, args in EVERYTHING_ERRORS:
        try:
            errors.append(wire(await client.call_tool(name, args)))
        except Exception as exc:  # a JSON-RPC error answer: compared by its text
            errors.append(repr(exc))
    return {"face": await face(client), "tools": tools, "calls": calls, "errors": errors,
            "rest": await snapshot(client, "")}


async def want() -> dict[str, Any]:
    async with direct(EVERYTHING_SERVER, "stdio") as upstream:
        return await surface(upstream)


def same(got: dict[str, Any], expected: dict[str, Any]) -> None:
    assert got["face"] == expected["face"]
    assert [t["name"] for t in got["tools"]] == [t["name"] for t in expected["tools"]]
    assert got["tools"] == expected["tools"]
    assert got["calls"] == expected["calls"]
    assert got["errors"] == expected["errors"]
    for key, value in expected["rest"].items():
        assert got["rest"][key] == value, key


@pytest.mark.parametrize("mode", ERAS)
async def test_everything_wrapped_over_stdio_is_the_server_itself(home: Path, mode: str) -> None:
    expected = await want()
    assert expected["face"]["serverInfo"]["name"] != "tfunnel" and len(expected["tools"]) >= 10
    write_expose(home, [everything_upstream()])
    wrap(home)
    with trio.fail_after(120):
        async with sdk_client(home, mode=mode) as client:
            got = await surface(client)
    same(got, expected)


@asynccontextmanager
async def http_client(url: str, mode: str) -> AsyncIterator[Client]:
    async with Client(streamable_http_client(url), mode=mode, cache=None) as client:
        yield client


@pytest.mark.parametrize("mode", ERAS)
async def test_everything_wrapped_over_http_is_the_server_itself(home: Path, mode: str) -> None:
    expected = await want()
    write_expose(home, [everything_upstream()])
    wrap(home)
    with trio.fail_after(120):
        async with http_gateway(home) as gw, http_client(f"{gw.url}/mcp", mode) as client:
            got = await surface(client)
    same(got, expected)


async def test_a_disabled_tool_is_hidden_and_refused_and_no_funnel_tool_shows(home: Path) -> None:
    """`enabled: false` (keyed on the usual surfaced name) hides a wrapped tool and refuses its
    call; the meta-tools and register tools are not on a wrapped surface."""
    write_expose(home, [everything_upstream()])
    wrap(home, state={"everything_echo": {"enabled": False}})
    with trio.fail_after(120):
        async with sdk_client(home) as client:
            names = [t.name for t in (await client.list_tools()).tools]
            assert "echo" not in names and "get-sum" in names
            assert not [n for n in names if n.startswith(("toolfunnel_", "tf_"))]
            with pytest.raises(Exception, match="Unknown tool: echo"):
                await client.call_tool("echo", {"message": "hi"})
            with pytest.raises(Exception, match="Unknown tool: toolfunnel_list_tools"):
                await client.call_tool("toolfunnel_list_tools", {})
            summed = await client.call_tool("get-sum", {"a": 2, "b": 3})
    assert dumped(summed)["content"][0]["text"] == "The sum of 2 and 3 is 5."
