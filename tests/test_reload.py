"""Live reload of the register and the state file in a running gateway (in-process)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from tests.test_stdio_wire import run_tool
from tests.wire import Wire
from tfunnel.testing.gateway import StdioGateway
from tfunnel.testing.gateway import stdio_gateway as gateway

pytestmark = pytest.mark.timeout(60)

# A gateway's stdio, in-process or a real process's (other files' tests share these helpers).
AnyWire = Wire | StdioGateway


async def next_notification(wire: AnyWire, method: str, timeout: float = 10.0) -> dict[str, object]:
    with trio.fail_after(timeout):
        while True:
            message = await wire.recv(timeout)
            if message.get("method") == method:
                return message
            wire.stash.append(message)


async def wait_for_log(wire: AnyWire, text: str, timeout: float = 10.0) -> None:
    with trio.fail_after(timeout):
        while text not in wire.stderr.decode(errors="replace"):
            await trio.sleep(0.05)


async def test_bad_register_edit_keeps_the_last_good_register(home: Path) -> None:
    """An invalid register edit is refused (logged with the reason); the old tools keep working."""
    path = home / "tools" / "tools.register.json"
    async with gateway(home) as wire:
        await wire.initialize()
        path.write_text('{"version": 1, "tools": [ {"id": "hash", "name": 7} ]}')
        await wait_for_log(wire, "register reload refused")
        assert "field 'name': must be a non-empty string" in wire.stderr.decode()
        reply = await wire.request(1, "tools/call", run_tool(1, "hash", {"text": "abc"})["params"])  # type: ignore[arg-type]
        assert reply["result"]["structuredContent"]["algo"] == "sha256"
        await wire.expect_silence(0.5)  # a refused reload changes nothing: no list_changed


async def test_valid_register_edit_applies_and_notifies(home: Path) -> None:
    """A valid register edit is applied live and the client gets tools/list_changed."""
    path = home / "tools" / "tools.register.json"
    register = json.loads(path.read_text())
    async with gateway(home) as wire:
        await wire.initialize()
        # tools/list waits for startup to end: an edit before it needs no list_changed (no client
        # has seen a list yet), so without this wait the test races the demo upstream's start.
        await wire.request(0, "tools/list")
        register["tools"] = [t for t in register["tools"] if t["id"] != "uuid"]
        register["tools"].append({"id": "greet", "name": "Greet", "summary": "Says hello.",
                                  "invoke": {"type": "shell", "command": "echo hello from $TFUNNEL_HOME"}})
        path.write_text(json.dumps(register))
        await next_notification(wire, "notifications/tools/list_changed")
        listed = await wire.request(2, "tools/call", {"name": "toolfunnel_list_tools", "arguments": {}})
        ids = [b["id"] for b in listed["result"]["structuredContent"]["tools"]
               if not b["category"].startswith("mcp:")]
        assert "uuid" not in ids and ids[-1] == "greet"
        greet = await wire.request(3, "tools/call", run_tool(3, "greet", {})["params"])  # type: ignore[arg-type]
        assert greet["result"]["content"][0]["text"] == f"hello from {home}\n"


async def test_list_changed_waits_for_initialize_not_for_initialized(home: Path) -> None:
    """A client whose `initialize` was not answered gets no list_changed; once it was, the client
    hears of the next change even before it sends `notifications/initialized`. (This test once
    held list_changed back until `initialized`: the spec restricts a server's requests before
    that point, not its notifications, and ToolFunnel sends them.)"""
    state = home / "tools" / "tools.state.json"
    async with gateway(home) as wire:
        await wire.request(1, "ping")
        state.write_text(json.dumps({"hash": {"hot": True}}))
        await wait_for_log(wire, "tool state reloaded")
        await wire.expect_silence(0.5)
        await wire.request(2, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                             "clientInfo": {"name": "wire", "version": "1"}})
        await wire.request(3, "tools/list")
        state.write_text(json.dumps({"hash": {"hot": False}}))
        await next_notification(wire, "notifications/tools/list_changed")


async def test_malformed_state_edit_keeps_the_last_good_state(home: Path) -> None:
    """A broken tools.state.json edit is refused and logged; the last good visibility stays (no
    list_changed), and a valid edit afterwards applies again."""
    (home / "tools" / "tools.state.json").write_text('{"hash": {"hot": true}}')
    async with gateway(home) as wire:
        await wire.initialize()
        tools = (await wire.request(1, "tools/list"))["result"]["tools"]
        assert [t["name"] for t in tools][-1] == "hash"
        (home / "tools" / "tools.state.json").write_text("{not json")
        await wait_for_log(wire, "tool state reload refused")
        assert "tools/tools.state.json: invalid JSON at line 1 column 2" in wire.stderr.decode()
        tools = (await wire.request(2, "tools/list"))["result"]["tools"]
        assert [t["name"] for t in tools][-1] == "hash"
        await wire.expect_no_reply(0.5)  # a refused reload changes nothing: no list_changed
        assert not any(m.get("method") == "notifications/tools/list_changed" for m in wire.stash)
        (home / "tools" / "tools.state.json").write_text("{}")
        await next_notification(wire, "notifications/tools/list_changed")
        assert len((await wire.request(3, "tools/list"))["result"]["tools"]) == 4
