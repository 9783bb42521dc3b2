"""Raw-wire tests of `tfunnel serve` over real pipes: framing, errors, concurrency, cancels."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from tests.conftest import add_tools
from tests.wire import wait_for_file, wait_gone
from tfunnel.testing.gateway import stdio_gateway as gateway

pytestmark = pytest.mark.timeout(60)

SLEEPER = {
    "id": "sleeper", "name": "Sleeper", "summary": "Sleeps (test fixture).",
    "invoke": {"type": "script", "path": "tools/scripts/sleeper.py"},
}


def run_tool(request_id: object, name: str, args: dict[str, object]) -> dict[str, object]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
            "params": {"name": "toolfunnel_run_tool", "arguments": {"name": name, "args": args}}}


@pytest.mark.parametrize(("offered", "answered"), [
    ("2024-11-05", "2024-11-05"),
    ("2025-03-26", "2025-03-26"),
    ("2025-06-18", "2025-06-18"),
    ("2025-11-25", "2025-11-25"),
    ("2099-01-01", "2025-11-25"),
    ("1.0", "2025-11-25"),
])
async def test_initialize_version_negotiation(home: Path, offered: str, answered: str) -> None:
    """Each legacy version is echoed; anything else is answered with 2025-11-25."""
    async with gateway(home) as wire:
        reply = await wire.initialize(offered)
        assert reply["result"]["protocolVersion"] == answered
        assert reply["result"]["capabilities"]["tools"] == {"listChanged": True}


async def test_notifications_never_get_a_reply(home: Path) -> None:
    """Known and unknown notifications, even malformed ones, are never answered."""
    async with gateway(home) as wire:
        await wire.initialize()
        for note in (
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "method": "tools/list"},
            {"jsonrpc": "2.0", "method": "no/such/thing", "params": {}},
            {"jsonrpc": "2.0", "method": "ping", "params": [1, 2]},
            {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 424242}},
        ):
            await wire.send(note)
        await wire.expect_silence(0.5)
        assert (await wire.request(1, "ping"))["result"] == {}


async def test_malformed_json_is_answered_and_serving_continues(home: Path) -> None:
    """A line that is not JSON gets -32700 with a null id; the next request is served."""
    async with gateway(home) as wire:
        await wire.send(b'{"jsonrpc": "2.0", "id": 1, "method": \n')
        reply = await wire.recv()
        assert reply["id"] is None and reply["error"]["code"] == -32700
        assert (await wire.request(2, "ping"))["result"] == {}


@pytest.mark.parametrize(("message", "code", "reply_id"), [
    ({"jsonrpc": "2.0", "id": 5, "method": "nope/nope"}, -32601, 5),
    ({"jsonrpc": "1.0", "id": 6, "method": "ping"}, -32600, 6),
    ({"jsonrpc": "2.0", "id": "s-7", "method": "tools/call", "params": {"arguments": {}}}, -32602, "s-7"),
    ({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": "not_a_tool"}}, -32602, 8),
    ({"jsonrpc": "2.0", "id": 9, "method": "tools/list", "params": {"cursor": "bogus"}}, -32602, 9),
    ([{"jsonrpc": "2.0", "id": 10, "method": "ping"}], -32600, None),
])
async def test_error_codes_preserve_ids(home: Path, message: object, code: int, reply_id: object) -> None:
    """Each JSON-RPC error carries its code and the request's id, and serving continues."""
    async with gateway(home) as wire:
        await wire.initialize()
        await wire.send(json.dumps(message).encode() + b"\n")
        reply = await wire.recv()
        assert reply["error"]["code"] == code
        assert reply["id"] == reply_id
        assert (await wire.request(99, "ping"))["result"] == {}


async def test_over_cap_line_is_refused_and_serving_continues(home: Path) -> None:
    """A line over limits.maxMessageBytes gets -32600 naming the cap (with its id); the next works."""
    settings = json.loads((home / "toolfunnel.json").read_text())
    settings["limits"]["maxMessageBytes"] = 4096
    (home / "toolfunnel.json").write_text(json.dumps(settings))
    async with gateway(home) as wire:
        await wire.initialize()
        big = run_tool(77, "echo", {"blob": "x" * 20000})
        await wire.send(json.dumps(big).encode() + b"\n")
        reply = await wire.recv()
        assert reply["id"] == 77
        assert reply["error"]["code"] == -32600
        assert "4096" in reply["error"]["message"]
        small = await wire.request(78, "tools/call", run_tool(0, "echo", {"a": 1})["params"])  # type: ignore[arg-type]
        assert small["result"]["structuredContent"]["args"] == {"a": 1}


async def test_fast_call_after_slow_call_returns_first(home: Path) -> None:
    """A slow tool call never blocks a later fast one on the same pipe."""
    add_tools(home, SLEEPER, scripts=("sleeper.py",))
    async with gateway(home) as wire:
        await wire.initialize()
        await wire.send(run_tool("slow", "sleeper", {"seconds": 3}))
        await wire.send(run_tool("fast", "hash", {"text": "abc"}))
        first = await wire.recv()
        assert first["id"] == "fast"
        assert first["result"]["structuredContent"]["hexdigest"].startswith("ba7816bf")
        second = await wire.recv()
        assert second["id"] == "slow" and "isError" not in second["result"]


async def test_cancel_kills_the_tool_process_group_and_sends_nothing(home: Path, tmp_path: Path) -> None:
    """notifications/cancelled kills the running tool and its grandchild; no response is sent."""
    add_tools(home, SLEEPER, scripts=("sleeper.py",))
    pidfile = tmp_path / "pids"
    async with gateway(home) as wire:
        await wire.initialize()
        await wire.send(run_tool(41, "sleeper", {"seconds": 60, "grandchild": True, "pidfile": str(pidfile)}))
        pids = [int(p) for p in (await wait_for_file(pidfile)).split()]
        assert len(pids) == 2
        await wire.send({"jsonrpc": "2.0", "method": "notifications/cancelled",
                         "params": {"requestId": 41, "reason": "test"}})
        assert await wait_gone(pids) == []
        assert (await wire.request(42, "ping"))["result"] == {}
        await wire.expect_silence(1.0)


async def test_stdin_eof_exits_zero(home: Path) -> None:
    """Closing stdin is a graceful shutdown: exit status 0."""
    async with gateway(home) as wire:
        await wire.initialize()
        await wire.close_stdin()
        assert await wire.wait_exit() == 0


async def test_stdin_eof_lets_an_in_flight_call_finish(home: Path) -> None:
    """A call running when stdin closes still gets its answer within the grace period."""
    add_tools(home, SLEEPER, scripts=("sleeper.py",))
    async with gateway(home) as wire:
        await wire.initialize()
        await wire.send(run_tool(3, "sleeper", {"seconds": 1}))
        await trio.sleep(0.2)
        await wire.close_stdin()
        reply = await wire.reply_to(3)
        assert reply["result"]["structuredContent"] == {"ok": True, "slept": 1}
        assert await wire.wait_exit() == 0


async def test_hostile_input_never_kills_the_server(home: Path) -> None:
    """Deeply nested JSON, invalid UTF-8 and lone surrogates (in an id, in tool arguments) get
    -32700, as over HTTP; nothing of them reaches a tool; serving continues."""
    async with gateway(home) as wire:
        await wire.initialize()
        await wire.send(b"[" * 100_000 + b"\n")
        reply = await wire.recv()
        assert reply["error"]["code"] == -32700 and reply["id"] is None
        await wire.send(b'{"jsonrpc": "2.0", "id": "\\ud800", "method": "ping"}\n')
        refused = await wire.recv()
        assert refused["error"]["code"] == -32700 and refused["id"] is None
        await wire.send(b'{"jsonrpc": "2.0", "id": 4, "method": "ping", "params": {"x": "\xff"}}\n')
        refused = await wire.recv()
        assert refused["error"]["code"] == -32700 and refused["id"] is None
        await wire.send(run_tool(5, "echo", {"t": "\ud800"}))
        refused = await wire.recv()
        assert refused["error"]["code"] == -32700 and refused["id"] is None
        ran = await wire.request(6, "tools/call", run_tool(6, "echo", {"t": "\ud83d\ude00"})["params"])  # type: ignore[arg-type]
        assert ran["result"]["structuredContent"]["args"] == {"t": "\U0001f600"}  # a pair is fine
