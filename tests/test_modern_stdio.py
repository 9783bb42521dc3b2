"""The modern era on stdio (raw wire), MRTR asks through the SDK on both faces, serveLegacy false;
the gateway in-process (stdio on memory streams, HTTP on a loopback port). The SDK's MRTR loop
over a real gateway process's stdio is tests/e2e/test_modern_stdio.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio
from mcp import Client

from tests.conftest import add_tools
from tests.hooks import decision, set_hooks
from tests.test_gate_hooks import elicitation
from tests.test_reload import AnyWire
from tests.test_stdio_wire import SLEEPER
from tests.wire import wait_for_file, wait_gone
from tfunnel.route.modern import MAX_LISTEN_STREAMS
from tfunnel.testing.gateway import http_gateway
from tfunnel.testing.gateway import stdio_gateway as gateway
from tfunnel.testing.sdk import sdk_client

pytestmark = pytest.mark.timeout(90)

V = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": V, "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "wire", "version": "1"}}
ASKING = {**META, "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}
SUB = "io.modelcontextprotocol/subscriptionId"


def modern(params: dict[str, Any] | None = None, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    return {**(params or {}), "_meta": META if meta is None else meta}


async def test_both_eras_on_one_pipe_and_the_modern_errors(home: Path) -> None:
    async with gateway(home) as wire:
        assert (await wire.initialize())["result"]["protocolVersion"] == "2025-11-25"
        discover = (await wire.request(1, "server/discover", modern()))["result"]
        assert discover["supportedVersions"] == [V] and discover["resultType"] == "complete"
        assert discover["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "tfunnel"
        legacy_list = (await wire.request(2, "tools/list"))["result"]
        modern_list = (await wire.request(3, "tools/list", modern()))["result"]
        assert legacy_list["tools"] == modern_list["tools"] and "resultType" not in legacy_list
        assert modern_list["resultType"] == "complete" and modern_list["ttlMs"] >= 0
        no_caps = {k: v for k, v in META.items() if not k.endswith("clientCapabilities")}
        assert (await wire.request(4, "tools/list", modern(meta=no_caps)))["error"]["code"] == -32602
        future = {**META, "io.modelcontextprotocol/protocolVersion": "2099-01-01"}
        error = (await wire.request(5, "tools/list", modern(meta=future)))["error"]
        assert error["code"] == -32022 and error["data"] == {"supported": [V], "requested": "2099-01-01"}
        assert (await wire.request(6, "ping", modern()))["error"]["code"] == -32601
        assert (await wire.request(7, "ping"))["result"] == {}  # the legacy ping still works


async def _listen_events(wire: AnyWire, listen_id: str, count: int) -> list[dict[str, Any]]:
    """The next `count` messages of one listen stream (others are kept for later reads)."""
    events: list[dict[str, Any]] = []
    held: list[dict[str, Any]] = []
    try:
        while len(events) < count:
            message = await wire.recv()
            tag = message.get("params", {}).get("_meta", {}).get(SUB)
            (events if tag == listen_id or message.get("id") == listen_id else held).append(message)
    finally:
        wire.stash.extend(held)
    return events


async def test_listen_acknowledges_tags_changes_and_ends(home: Path) -> None:
    """Ack first; a tool surface change arrives tagged; a cancel ends one stream silently; stdin
    EOF ends the other with its final result."""
    async with gateway(home) as wire:
        await wire.send({"jsonrpc": "2.0", "id": "L1", "method": "subscriptions/listen",
                         "params": modern({"notifications": {"toolsListChanged": True}})})
        await wire.send({"jsonrpc": "2.0", "id": "L2", "method": "subscriptions/listen",
                         "params": modern({"notifications": {"resourcesListChanged": True}})})
        (ack1,) = await _listen_events(wire, "L1", 1)
        (ack2,) = await _listen_events(wire, "L2", 1)
        assert ack1["method"] == "notifications/subscriptions/acknowledged"
        assert ack1["params"]["notifications"] == {"toolsListChanged": True}
        assert ack2["params"]["notifications"] == {"resourcesListChanged": True}
        state = home / "tools" / "tools.state.json"
        state.write_text(json.dumps({"echo": {"hot": True}}))
        (changed,) = await _listen_events(wire, "L1", 1)
        assert changed["method"] == "notifications/tools/list_changed"
        assert changed["params"]["_meta"][SUB] == "L1"
        await wire.send({"jsonrpc": "2.0", "method": "notifications/cancelled",
                         "params": {"requestId": "L1"}})
        await wire.expect_no_reply(0.5)
        state.write_text(json.dumps({}))
        await trio.sleep(1.0)  # a change after the cancel reaches nobody
        assert not any(m.get("params", {}).get("_meta", {}).get(SUB) == "L1" for m in wire.stash)
        await wire.close_stdin()
        final = await wire.reply_to("L2")
        assert final["result"]["resultType"] == "complete" and final["result"]["_meta"][SUB] == "L2"
        assert await wire.wait_exit() == 0


async def test_an_ask_becomes_input_required_and_its_state_is_protected(home: Path, tmp_path: Path) -> None:
    set_hooks(home, {"command": decision("ask", "Danger ahead")})
    danger_log = tmp_path / "danger.log"
    async with gateway(home, {"TOOLFUNNEL_DANGER_LOG": str(danger_log)}) as wire:
        call = {"name": "toolfunnel_run_tool", "arguments": {"name": "danger", "args": {}}}
        first = (await wire.request(1, "tools/call", modern(call, ASKING)))["result"]
        assert first["resultType"] == "input_required" and "ttlMs" not in first
        (key, question), = first["inputRequests"].items()
        assert question["method"] == "elicitation/create"
        assert question["params"]["message"].startswith("Danger ahead")
        state = first["requestState"]
        accept = {key: {"action": "accept", "content": {}}}
        tampered = state[:-2] + ("AA" if not state.endswith("AA") else "BB")
        refused = await wire.request(2, "tools/call", modern({**call, "inputResponses": accept,
                                                               "requestState": tampered}, ASKING))
        assert refused["error"]["code"] == -32602 and "requestState" in refused["error"]["message"]
        other = {"name": "toolfunnel_run_tool", "arguments": {"name": "danger", "args": {"x": 1}}}
        rebound = await wire.request(3, "tools/call", modern({**other, "inputResponses": accept,
                                                               "requestState": state}, ASKING))
        assert rebound["error"]["code"] == -32602  # a state belongs to its own request
        assert not danger_log.exists()
        done = (await wire.request(4, "tools/call", modern({**call, "inputResponses": accept,
                                                             "requestState": state}, ASKING)))["result"]
        assert done["resultType"] == "complete" and not done.get("isError"), done
    assert danger_log.exists()


async def test_an_answer_to_a_question_never_asked_is_ignored(home: Path, tmp_path: Path) -> None:
    """A modern client that answers the gate's question before it was asked (no requestState) is
    asked again; the tool never runs on that answer, only on the answer to the asking round."""
    set_hooks(home, {"command": decision("ask", "Danger ahead")})
    danger_log = tmp_path / "danger.log"
    async with gateway(home, {"TOOLFUNNEL_DANGER_LOG": str(danger_log)}) as wire:
        call = {"name": "toolfunnel_run_tool", "arguments": {"name": "danger", "args": {}}}
        first = (await wire.request(1, "tools/call", modern(call, ASKING)))["result"]
        (key, _), = first["inputRequests"].items()
        accept = {key: {"action": "accept", "content": {}}}  # the key is predictable: a digest
        unasked = (await wire.request(2, "tools/call", modern({**call, "inputResponses": accept},
                                                               ASKING)))["result"]
        assert unasked["resultType"] == "input_required" and key in unasked["inputRequests"]
        assert not danger_log.exists()
        done = (await wire.request(3, "tools/call", modern({**call, "inputResponses": accept,
                                                             "requestState": unasked["requestState"]},
                                                            ASKING)))["result"]
        assert done["resultType"] == "complete" and not done.get("isError"), done
    assert danger_log.exists()


async def test_a_modern_client_without_elicitation_gets_the_fallback(home: Path, tmp_path: Path) -> None:
    set_hooks(home, {"command": decision("ask", "Danger ahead")})
    async with gateway(home) as wire:
        call = {"name": "toolfunnel_run_tool", "arguments": {"name": "danger", "args": {}}}
        result = (await wire.request(1, "tools/call", modern(call)))["result"]
        assert result["resultType"] == "complete" and result["isError"] is True
        assert "askFallback" in result["content"][0]["text"]


@pytest.mark.parametrize("face", ["stdio", "http"])
@pytest.mark.parametrize(("action", "runs"), [("accept", True), ("decline", False)])
async def test_sdk_modern_client_answers_the_gate_through_mrtr(
    home: Path, tmp_path: Path, face: str, action: str, runs: bool
) -> None:
    """The SDK's auto-mode client runs the MRTR loop with its elicitation callback."""
    set_hooks(home, {"command": decision("ask", "Danger ahead")})
    danger_log = tmp_path / "danger.log"
    env = {"TOOLFUNNEL_DANGER_LOG": str(danger_log)}
    seen: list[str] = []

    async def drive(client: Client) -> None:
        assert client.protocol_version == V
        result = await client.call_tool("toolfunnel_run_tool", {"name": "danger", "args": {}})
        assert result.is_error is (not runs)

    if face == "stdio":
        async with sdk_client(home, env=env, mode="auto",
                              elicitation_callback=elicitation(action, seen)) as client:
            await drive(client)
    else:
        async with http_gateway(home, env) as gw, \
                Client(f"{gw.url}/mcp", mode="auto", cache=None,
                       elicitation_callback=elicitation(action, seen)) as client:
            await drive(client)
    assert len(seen) == 1 and seen[0].startswith("Danger ahead")
    assert danger_log.exists() is runs


async def test_a_modern_only_gateway_refuses_the_legacy_era(home: Path) -> None:
    settings = json.loads((home / "toolfunnel.json").read_text())
    (home / "toolfunnel.json").write_text(json.dumps({**settings, "serveLegacy": False}))
    async with gateway(home) as wire:
        error = (await wire.initialize())["error"]
        assert error["code"] == -32022 and error["data"]["supported"] == [V]
        assert (await wire.request(2, "tools/list"))["error"]["code"] == -32602
        assert (await wire.request(3, "tools/list", modern()))["result"]["resultType"] == "complete"
    async with http_gateway(home) as gw, httpx2.AsyncClient(timeout=10) as http:
        accept = {"accept": "application/json, text/event-stream"}
        assert (await http.get(f"{gw.url}/mcp", headers={"accept": "text/event-stream"})).status_code == 405
        assert (await http.delete(f"{gw.url}/mcp")).status_code == 405
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "x"}}}
        reply = await http.post(f"{gw.url}/mcp", json=init, headers=accept)
        assert reply.status_code == 400 and reply.json()["error"]["data"]["supported"] == [V]
        assert "mcp-session-id" not in reply.headers
        health = (await http.get(f"{gw.url}/health")).json()
        assert health["protocolVersions"] == [V]
        async with Client(f"{gw.url}/mcp", mode="auto", cache=None) as client:
            assert client.protocol_version == V


async def test_a_modern_cancel_kills_the_call_on_stdio(home: Path, tmp_path: Path) -> None:
    add_tools(home, SLEEPER, scripts=("sleeper.py",))
    pidfile = tmp_path / "pids"
    async with gateway(home) as wire:
        args = {"seconds": 60, "grandchild": True, "pidfile": str(pidfile)}
        await wire.send({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": modern(
            {"name": "toolfunnel_run_tool", "arguments": {"name": "sleeper", "args": args}})})
        pids = [int(p) for p in (await wait_for_file(pidfile)).split()]
        await wire.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 9}})
        assert await wait_gone(pids) == []
        await wire.expect_silence(1.0)


async def test_a_modern_cancel_is_closing_the_http_stream(home: Path, tmp_path: Path) -> None:
    add_tools(home, SLEEPER, scripts=("sleeper.py",))
    pidfile = tmp_path / "pids"
    args = {"seconds": 60, "grandchild": True, "pidfile": str(pidfile)}
    body = {"jsonrpc": "2.0", "id": 9, "method": "tools/call",
            "params": modern({"name": "toolfunnel_run_tool", "arguments": {"name": "sleeper", "args": args}})}
    headers = {"accept": "application/json, text/event-stream", "mcp-protocol-version": V,
               "mcp-method": "tools/call", "mcp-name": "toolfunnel_run_tool"}
    async with http_gateway(home) as gw, httpx2.AsyncClient(timeout=30) as http:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: http.post(f"{gw.url}/mcp", json=body, headers=headers))
            pids = [int(p) for p in (await wait_for_file(pidfile)).split()]
            nursery.cancel_scope.cancel()  # the client goes away: the connection closes
        assert await wait_gone(pids) == []


async def test_listen_streams_are_capped(home: Path) -> None:
    async with gateway(home) as wire:
        for n in range(MAX_LISTEN_STREAMS):
            await wire.send({"jsonrpc": "2.0", "id": f"L{n}", "method": "subscriptions/listen",
                             "params": modern({"notifications": {"toolsListChanged": True}})})
        for n in range(MAX_LISTEN_STREAMS):  # every stream is open (acknowledged) before one more
            await _listen_events(wire, f"L{n}", 1)
        over = await wire.request("over", "subscriptions/listen",
                                  modern({"notifications": {"toolsListChanged": True}}))
        assert over["error"]["code"] == -32603 and "too many listen streams" in over["error"]["message"]


async def test_a_legacy_http_session_answers_the_gate(home: Path, tmp_path: Path) -> None:
    set_hooks(home, {"command": decision("ask", "Danger ahead")})
    danger_log = tmp_path / "danger.log"
    seen: list[str] = []
    async with http_gateway(home, {"TOOLFUNNEL_DANGER_LOG": str(danger_log)}) as gw, \
            Client(f"{gw.url}/mcp", mode="legacy", cache=None,
                   elicitation_callback=elicitation("accept", seen)) as client:
        result = await client.call_tool("toolfunnel_run_tool", {"name": "danger", "args": {}})
        assert not result.is_error, result.content
    assert len(seen) == 1 and seen[0].startswith("Danger ahead")
    assert danger_log.exists()


async def test_the_2024_sse_transport_answers_the_gate_too(home: Path, tmp_path: Path) -> None:
    """HTTP+SSE (GET /sse, POST /messages): the question goes out on the session's stream."""
    from mcp import ClientSession
    from mcp.client.sse import sse_client

    set_hooks(home, {"command": decision("ask", "Danger ahead")})
    danger_log = tmp_path / "danger.log"
    seen: list[str] = []
    async with http_gateway(home, {"TOOLFUNNEL_DANGER_LOG": str(danger_log)}) as gw, \
            sse_client(f"{gw.url}/sse") as (read, write), \
            ClientSession(read, write, elicitation_callback=elicitation("accept", seen)) as session:
        await session.initialize()
        result = await session.call_tool("toolfunnel_run_tool", {"name": "danger", "args": {}})
        assert not result.is_error, result.content
    assert len(seen) == 1 and seen[0].startswith("Danger ahead")
    assert danger_log.exists()
