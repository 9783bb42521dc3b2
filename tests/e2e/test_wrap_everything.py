"""Wrap mode with a real upstream we did not write (`@modelcontextprotocol/server-everything`,
npm): through `tfunnel wrap`, the official SDK client meets the server itself — its identity,
tools (original names, every field), prompts, resources, templates, results and errors — in both
eras, over stdio and over Streamable HTTP."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.types import (
    CreateMessageResult,
    ElicitResult,
    Implementation,
    ListRootsResult,
    Root,
    ServerCapabilities,
    TextContent,
)
from pydantic import FileUrl

from tests.e2e.test_breadth_everything import dumped, snapshot
from tests.e2e.test_real_upstreams import (
    EVERYTHING_FIXED,
    URL_ELICITATION_ONLY,
    _decline,
    definition,
    direct,
    wire,
)
from tests.e2e.test_sdk_stdio import sdk_client
from tests.httpgw import http_gateway
from tests.test_breadth_notices import URI, Notes, health
from tests.upstreams import EVERYTHING_SERVER, everything_upstream, write_expose

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
    # tfunnel does not carry task-augmented calls, so a wrapped server's `tasks` is not shown.
    carried = {k: v for k, v in expected["face"]["capabilities"].items() if k != "tasks"}
    assert got["face"] == {**expected["face"], "capabilities": carried}
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
        # Declaring what the direct client declares: a stdio wrap presents the client upstream.
        async with sdk_client(home, mode=mode, elicitation_callback=_decline) as client:
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
            async with httpx2.AsyncClient(timeout=10) as http:
                doc = (await http.get(f"{gw.url}/health")).json()
                metrics = (await http.get(f"{gw.url}/metrics")).text
    same(got, expected)
    # The operator's view stays complete: the wrap, its upstream, the calls by their usual names.
    assert doc["wrap"] == {"upstream": "everything", "as": "everything", "state": "ready"}
    assert doc["status"] == "ok" and doc["upstreams"]["everything"]["state"] == "ready"
    assert 'tfunnel_upstream_state{state="ready",upstream="everything"} 1.0' in metrics
    assert 'tool="everything_get-tiny-image"' in metrics


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


async def notices(client: Client, notes: Notes, kill: Any = None) -> list[tuple[str, str | None]]:
    """Log messages (level, logger) and a resource update after a subscription, as one client
    sees them; `kill` (async) is called between a first and a second round of updates."""
    await client.set_logging_level("info")
    await client.subscribe_resource(URI)
    await notes.until(lambda: any("Subscribe" in str(d) for _, _, d in notes.logs))
    await client.call_tool("toggle-subscriber-updates", {})
    await notes.until(lambda: URI in notes.updated)
    if kill is not None:
        notes.updated.clear()
        await kill()
        # The new incarnation knows the subscription only by replay: it acknowledges it (logged),
        # and the updates it starts go to our URI.
        await notes.until(lambda: any("Subscribe" in str(d) for _, _, d in notes.logs))
        await client.call_tool("toggle-subscriber-updates", {})
        await notes.until(lambda: URI in notes.updated)
    return sorted({(level, logger) for level, logger, _ in notes.logs})


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
async def test_everything_wrapped_notices_are_its_own_and_survive_a_restart(home: Path) -> None:
    """Log messages with the server's own logger names, resource updates of a subscription (kept
    across a kill of the upstream: replayed), and progress, over HTTP to a legacy client."""
    seen: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)

    op_args = {"duration": 0.6, "steps": 3}
    write_expose(home, [everything_upstream()])
    wrap(home)
    notes = Notes()
    async with http_gateway(home) as gw, httpx2.AsyncClient(timeout=10) as http:
        async def kill() -> None:
            first = await health(http, gw.url)
            os.kill(first["pid"], signal.SIGKILL)
            with trio.fail_after(30):
                while (now := await health(http, gw.url))["state"] != "ready" or now["pid"] == first["pid"]:
                    await trio.sleep(0.1)

        with trio.fail_after(90):
            async with Client(f"{gw.url}/mcp", mode="legacy", cache=None, message_handler=notes) as client:
                loggers = await notices(client, notes, kill)
                done = await client.call_tool("trigger-long-running-operation", op_args,
                                              progress_callback=on_progress)
    assert not done.is_error and len(seen) >= 2 and seen == sorted(seen)
    assert loggers and not [logger for _, logger in loggers if (logger or "").startswith("everything")]


ROOTS = [Root(uri=FileUrl("file:///work/project"), name="project")]


async def _sample(context: Any, params: Any) -> CreateMessageResult:
    return CreateMessageResult(role="assistant", content=TextContent(type="text", text="sampled: yes"),
                               model="test-model")


async def _roots(context: Any) -> ListRootsResult:
    return ListRootsResult(roots=ROOTS)


async def _accept(context: Any, params: Any) -> ElicitResult:
    return ElicitResult(action="accept", content={"color": "blue"})


CLIENT: dict[str, Any] = {"sampling_callback": _sample, "list_roots_callback": _roots,
                          "elicitation_callback": _accept}


async def mirrored(client: Client) -> dict[str, Any]:
    """What a client that samples, has roots and answers elicitations gets from the server."""
    tools = [definition(t) for t in (await client.list_tools()).tools]
    names = [t["name"] for t in tools]
    sampled = await client.call_tool("trigger-sampling-request", {"prompt": "hi", "maxTokens": 10})
    roots = await client.call_tool("get-roots-list", {})
    return {"tools": tools, "sampled": wire(sampled), "roots": wire(roots), "names": names}


async def test_a_stdio_wrap_presents_the_client_upstream_as_itself(home: Path) -> None:
    """Under a stdio wrap the upstream meets the real client (its clientInfo and the
    capabilities tfunnel carries back to it: sampling, roots, elicitation of both modes): the
    tools it offers only to such a client are listed, its sampling request reaches the client's
    sampler during a call, and its roots/list (asked right after its handshake, outside any
    call) reaches the client's roots."""
    async with Client(StdioServerParameters(command=str(EVERYTHING_SERVER), args=["stdio"]), mode="legacy",
                      cache=None, **CLIENT) as upstream:
        expected = await mirrored(upstream)
    assert "trigger-sampling-request" in expected["names"] and "project" in json.dumps(expected["roots"])
    write_expose(home, [everything_upstream()])
    wrap(home)
    with trio.fail_after(120):
        async with sdk_client(home, **CLIENT) as client:
            got = await mirrored(client)
    assert got["names"] == expected["names"]
    assert got == expected


async def test_a_modern_client_answers_a_legacy_upstreams_elicitation_on_its_retry(home: Path) -> None:
    """server-everything speaks only the legacy era and asks by `elicitation/create` during a call;
    wrapped, a modern client gets `input_required` and its answer reaches the upstream's question."""
    asked: list[str] = []

    async def answer(context: Any, params: Any) -> ElicitResult:
        asked.append(params.message)
        return ElicitResult(action="accept", content={"color": "blue", "name": "Ada", "check": True})

    write_expose(home, [everything_upstream()])
    wrap(home)
    with trio.fail_after(120):
        async with sdk_client(home, mode="2026-07-28", elicitation_callback=answer) as client:
            result = await client.call_tool("trigger-elicitation-request", {})
    assert asked and not result.is_error, wire(result)
    assert "accept" in json.dumps(wire(result))
