"""The stdio gateway (in-process, on memory streams) read in `Content-Length` framing, as
ToolFunnel's clients send it: answered in NDJSON lines, replies and notifications alike, as
ToolFunnel answers them (tests/test_field_toolfunnel.py replays its recorded exchange), with the
cap and resync rules of NDJSON; and NDJSON unchanged beside it. The harness reads what the gateway
writes as lines: a framed reply is not JSON there, and fails."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_reload import next_notification
from tests.test_stdio_wire import run_tool
from tfunnel.testing.gateway import stdio_gateway as gateway
from tfunnel.testing.lines import content_length

pytestmark = pytest.mark.timeout(60)


async def test_a_framed_client_is_answered_in_lines(home: Path) -> None:
    """initialize, tools/list and a tools/call in Content-Length framing are each answered at once
    (stdin still open), each in one NDJSON line; a register edit's list_changed arrives as a line too."""
    path = home / "tools" / "tools.register.json"
    register = json.loads(path.read_text())
    async with gateway(home, framed=True) as wire:
        reply = await wire.initialize()
        assert reply["result"]["serverInfo"]["name"]
        tools = (await wire.request(1, "tools/list"))["result"]["tools"]
        assert "toolfunnel_run_tool" in [t["name"] for t in tools]
        called = await wire.request(2, "tools/call", run_tool(2, "hash", {"text": "abc"})["params"])  # type: ignore[arg-type]
        assert called["result"]["structuredContent"]["algo"] == "sha256"
        register["tools"] = [t for t in register["tools"] if t["id"] != "uuid"]
        path.write_text(json.dumps(register))
        await next_notification(wire, "notifications/tools/list_changed")


async def test_framed_headers_in_any_case_with_others_and_several_in_one_write(home: Path) -> None:
    """Leading blank lines, a Content-Type header first, a lower-case name and two messages in
    one write are all read; each is answered in a line."""
    async with gateway(home, framed=True) as wire:
        first = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode()
        second = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "ping"}).encode()
        await wire.send(b"\r\n\r\nContent-Type: application/vscode-jsonrpc; charset=utf-8\r\n"
                        + b"content-length: %d\r\n\r\n" % len(first) + first + content_length(second))
        assert {(await wire.recv())["id"], (await wire.recv())["id"]} == {1, 2}


async def test_framed_errors_resync_and_serving_continues(home: Path) -> None:
    """A body that is not JSON, a non-numeric and a negative length, junk where a header belongs,
    a block without Content-Length: each gets -32700 with a null id, in a line, and the next
    message (resync at its header) is served."""
    async with gateway(home, framed=True) as wire:
        for number, bad in enumerate((
                content_length(b'{"jsonrpc": "2.0", "id": 1, "method": '),
                b"Content-Length: twelve\r\n\r\n{}", b"Content-Length: -3\r\n\r\n{}",
                b"this is no header\r\n", b"Content-Type: text/plain\r\n\r\n{}")):
            await wire.send(bad)
            reply = await wire.recv()
            assert reply["id"] is None and reply["error"]["code"] == -32700, (bad, reply)
            assert (await wire.request(number, "ping"))["result"] == {}


async def test_framed_over_cap_length_is_refused_and_skipped(home: Path) -> None:
    """A declared length over limits.maxMessageBytes gets the over-long line's -32600 (with its
    id); its body is skipped and the next message is served."""
    settings = json.loads((home / "toolfunnel.json").read_text())
    settings["limits"]["maxMessageBytes"] = 4096
    (home / "toolfunnel.json").write_text(json.dumps(settings))
    async with gateway(home, framed=True) as wire:
        await wire.initialize()
        big = json.dumps(run_tool(77, "echo", {"blob": "x" * 20000})).encode()
        await wire.send(content_length(big))
        reply = await wire.recv()
        assert reply["id"] == 77 and reply["error"]["code"] == -32600
        assert "4096" in reply["error"]["message"]
        small = await wire.request(78, "tools/call", run_tool(0, "echo", {"a": 1})["params"])  # type: ignore[arg-type]
        assert small["result"]["structuredContent"]["args"] == {"a": 1}


async def test_ndjson_is_answered_in_lines(home: Path) -> None:
    """An NDJSON client is answered in NDJSON, a list_changed included (the wire reads lines and
    refuses anything else)."""
    state = home / "tools" / "tools.state.json"
    async with gateway(home) as wire:
        await wire.initialize()
        assert (await wire.request(1, "tools/list"))["result"]["tools"]
        state.write_text(json.dumps({"hash": {"hot": True}}))
        await next_notification(wire, "notifications/tools/list_changed")
        assert (await wire.request(2, "ping"))["result"] == {}
