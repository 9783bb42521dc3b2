"""A ToolFunnel home served unchanged, end to end (issue 21's "Show"): the home as ToolFunnel lays
it out (`tests/toolfunnel_home.py`) with a mock-style upstream kept in the home, served by the real
gateway over stdio in both framings and over Streamable HTTP — list, run, hot, a register reload,
a crash of the upstream and its reconnect — and the audit log a ToolFunnel log reader can parse."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
from mcp import Client

import tfunnel.testing.mock_upstream as mock_module
from tests.toolfunnel_home import write_toolfunnel_home
from tests.upstreams import FAST_RESTART
from tfunnel.testing.gateway import StdioGateway as Wire
from tfunnel.testing.gateway import http_gateway
from tfunnel.testing.gateway import stdio_gateway as gateway

pytestmark = pytest.mark.timeout(120)


def toolfunnel_home(tmp_path: Path) -> Path:
    home = write_toolfunnel_home(tmp_path / "home")
    servers = home / "mcp" / "servers"
    servers.mkdir(parents=True)
    shutil.copy(mock_module.__file__, servers / "mock_upstream.py")  # kept in the home, as ToolFunnel's
    (home / "mcp" / "expose.json").write_text(json.dumps({"version": 1, "expose": [], "upstreams": [
        {"id": "mock", "command": sys.executable, "args": ["mcp/servers/mock_upstream.py"],
         **FAST_RESTART}]}))
    (home / "logs").mkdir()
    (home / "logs" / "log.config.json").write_text(json.dumps({"enabled": True}))
    return home


def audit(home: Path) -> list[dict[str, Any]]:
    path = home / "logs" / "toolfunnel.log.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def assert_toolfunnel_records(home: Path) -> None:
    """Every record has ToolFunnel's `ts` and `type`; the lifecycle of its upstream and the client
    session are there by ToolFunnel's event names."""
    records = audit(home)
    assert records and all(isinstance(r.get("ts"), str) and isinstance(r.get("type"), str) for r in records)
    seen = [(r["type"], r.get("event")) for r in records]
    assert ("client", "connect") in seen
    mcp = [r for r in records if r["type"] == "mcp" and r.get("upstream") == "mock"]
    events = [r["event"] for r in mcp]
    assert events[0] == "connect" and "disconnect" in events and "reconnect" in events, events
    assert events.count("connect") >= 2  # connected again after the crash
    died = next(r for r in mcp if r["event"] == "disconnect")
    assert died["reason"] == "died"
    assert [r for r in records if r["type"] == "tool" and r.get("name") == "echo"]


class Face:
    """One client of the gateway, whatever its transport: call a method, list top-level names."""

    async def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError


class WireFace(Face):
    def __init__(self, wire: Wire) -> None:
        self.wire = wire
        self.n = 0

    async def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.n += 1
        reply = await self.wire.request(f"r{self.n}", method, params)
        assert "result" in reply, reply
        result = reply["result"]
        assert isinstance(result, dict)
        return result


class SdkFace(Face):
    def __init__(self, client: Client) -> None:
        self.client = client

    async def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method == "tools/list":
            listed = await self.client.list_tools()
            return {"tools": [{"name": t.name} for t in listed.tools]}
        result = await self.client.call_tool(params["name"], params.get("arguments") or {})
        dumped: dict[str, Any] = result.model_dump(by_alias=True, exclude_none=True)
        return dumped


async def run(face: Face, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return await face.call("tools/call", {"name": "toolfunnel_run_tool",
                                          "arguments": {"name": name, "args": args}})


async def until_listed(face: Face, name: str, present: bool = True) -> None:
    with trio.fail_after(20):
        while (name in [t["name"] for t in (await face.call("tools/list", {}))["tools"]]) is not present:
            await trio.sleep(0.05)


async def scenario(face: Face, home: Path) -> None:
    listed = await face.call("tools/call", {"name": "toolfunnel_list_tools", "arguments": {}})
    ids = [b["id"] for b in json.loads(listed["content"][0]["text"])]
    assert "echo" in ids and "mock_echo" in ids and "tf_list" in ids
    ran = await run(face, "echo", {"text": "hi"})
    assert not ran.get("isError") and json.loads(ran["content"][0]["text"])["args"] == {"text": "hi"}
    # hot: the state file (ToolFunnel's shape) promotes it, live
    (home / "tools" / "tools.state.json").write_text(json.dumps({"echo": {"hot": True}}))
    await until_listed(face, "echo")
    # reload: a register edit adds a tool, live
    register = json.loads((home / "tools" / "tools.register.json").read_text())
    register["tools"].append({"id": "echo2", "name": "Echo 2", "invoke": {"type": "script",
                                                                          "path": "tools/scripts/echo.js"}})
    (home / "tools" / "tools.register.json").write_text(json.dumps(register))
    state = {"echo": {"hot": True}, "echo2": {"hot": True}}
    (home / "tools" / "tools.state.json").write_text(json.dumps(state))
    await until_listed(face, "echo2")
    # the upstream crashes and comes back
    assert (await run(face, "mock_echo", {"text": "a"}))["content"][0]["text"] == "a"
    crashed = await run(face, "mock_crash", {})
    assert crashed.get("isError")
    with trio.fail_after(20):
        while True:
            again = await run(face, "mock_echo", {"text": "b"})
            if not again.get("isError"):
                break
            await trio.sleep(0.1)
    assert again["content"][0]["text"] == "b"


@pytest.mark.parametrize("framed", [True, False], ids=["content-length", "ndjson"])
async def test_a_toolfunnel_home_over_stdio(tmp_path: Path, framed: bool) -> None:
    home = toolfunnel_home(tmp_path)
    async with gateway(home, framed=framed) as wire:
        init = await wire.initialize()
        assert init["result"]["serverInfo"]["name"] == "my-tools"
        await scenario(WireFace(wire), home)
    assert_toolfunnel_records(home)


async def test_a_toolfunnel_home_over_http(tmp_path: Path) -> None:
    home = toolfunnel_home(tmp_path)
    async with http_gateway(home) as gw, Client(f"{gw.url}/mcp", mode="legacy", cache=None) as client:
        await scenario(SdkFace(client), home)
    assert_toolfunnel_records(home)
