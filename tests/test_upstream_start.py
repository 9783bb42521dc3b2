"""Starting upstreams never hold clients up (stdio, `tfunnel call`; the gateway and the command
in-process, the hung upstreams real children): SPEC §6.2. Over HTTP, with a real SIGTERM to a real
gateway process: tests/e2e/test_upstream_start.py."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.test_reload import AnyWire, next_notification
from tests.upstreams import mock_upstream, set_upstreams
from tests.wire import wait_for_file, wait_gone
from tfunnel.testing.cli import run
from tfunnel.testing.gateway import stdio_gateway as gateway

pytestmark = pytest.mark.timeout(90)

# Each answer must come well before a hung upstream's start window ends: waiting for the
# upstreams anywhere on these paths would show up as a read timeout, not as a slow pass.
PROMPT_S = 10.0
WINDOW_S = 40  # the start window of the gateways below, unless a test sets its own
META = ["toolfunnel_list_tools", "toolfunnel_tool_instructions", "toolfunnel_run_tool", "toolfunnel_howto"]


def set_start_window(home: Path, seconds: float) -> None:
    path = home / "toolfunnel.json"
    settings = json.loads(path.read_text())
    settings["limits"]["upstreamStartS"] = seconds
    path.write_text(json.dumps(settings))


def hung(home: Path, upstream_id: str = "slow", delay: float = 60) -> dict[str, Any]:
    """A mock upstream that sleeps `delay` s before it serves (as `sleep N; exec server` would)."""
    return mock_upstream(upstream_id, "--delay-start", str(delay), "--pid-file",
                         str(home / f"{upstream_id}.pid"), "--tools", "echo")


async def stop_and_reap(wire: AnyWire, home: Path, *upstream_ids: str) -> None:
    """End the gateway (stdin EOF): it exits 0 and the still-starting upstreams are gone with it."""
    pids = [int(await wait_for_file(home / f"{u}.pid")) for u in upstream_ids]
    await wire.close_stdin()
    assert await wire.wait_exit() == 0
    assert await wait_gone(pids) == []


def run_tool(name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"name": "toolfunnel_run_tool", "arguments": {"name": name, "args": args}}


async def test_stdio_answers_at_once_while_an_upstream_hangs(home: Path) -> None:
    """initialize, tools/list and a local tool answer while an upstream is stuck starting; its
    tools are not listed yet (the four meta-tools are)."""
    set_start_window(home, WINDOW_S)
    set_upstreams(home, hung(home))
    async with gateway(home, settle=False) as wire:
        with trio.fail_after(PROMPT_S):
            await wire.initialize()
            listed = await wire.request(1, "tools/list", {})
            hashed = await wire.request(2, "tools/call", run_tool("hash", {"text": "abc"}))
            briefs = await wire.request(3, "tools/call", {"name": "toolfunnel_list_tools", "arguments": {}})
        assert [t["name"] for t in listed["result"]["tools"]] == META
        assert hashed["result"]["structuredContent"]["hexdigest"].startswith("ba7816bf")
        assert not any(b["id"].startswith("slow_") for b in briefs["result"]["structuredContent"]["tools"])
        await stop_and_reap(wire, home, "slow")


async def test_a_call_to_a_starting_upstream_waits_for_it_only(home: Path) -> None:
    """A call to a tool of an upstream that is still starting waits for that upstream and then
    runs; list_changed tells the client its tools appeared; a hung upstream beside it holds
    nothing up."""
    set_start_window(home, WINDOW_S)
    set_upstreams(home, hung(home, "late", delay=2), hung(home, "slow"))
    async with gateway(home, settle=False) as wire:
        await wire.initialize()
        with trio.fail_after(PROMPT_S):
            echoed = await wire.request(1, "tools/call", run_tool("late_echo", {"text": "hi"}))
        assert echoed["result"]["content"][0]["text"] == "hi", echoed
        await next_notification(wire, "notifications/tools/list_changed")
        briefs = await wire.request(2, "tools/call", {"name": "toolfunnel_list_tools", "arguments": {}})
        ids = [b["id"] for b in briefs["result"]["structuredContent"]["tools"]]
        assert "late_echo" in ids and "slow_echo" not in ids
        await stop_and_reap(wire, home, "late", "slow")


@pytest.mark.parametrize("how", ["run_tool", "hot", "curated"])
async def test_a_call_to_a_hung_upstream_fails_as_still_starting(home: Path, how: str) -> None:
    """After the start window a call to a hung upstream's tool fails "upstream 'slow' is still
    starting", never "no tool named" or "Unknown tool": through run_tool, a hot name, a curated name."""
    set_start_window(home, 1.5)
    expose = [{"upstream": "slow", "tool": "echo", "as": "shout"}] if how == "curated" else []
    set_upstreams(home, hung(home), expose=expose)
    if how == "hot":
        (home / "tools" / "tools.state.json").write_text(json.dumps({"slow_echo": {"hot": True}}))
    async with gateway(home, settle=False) as wire:
        await wire.initialize()
        with trio.fail_after(PROMPT_S):
            if how == "run_tool":
                reply = await wire.request(1, "tools/call", run_tool("slow_echo", {"text": "x"}))
            else:
                name = "shout" if how == "curated" else "slow_echo"
                reply = await wire.request(1, "tools/call", {"name": name, "arguments": {"text": "x"}})
        result = reply["result"]
        assert result["isError"] is True
        assert result["content"][0]["text"] == "upstream 'slow' is still starting"
        await stop_and_reap(wire, home, "slow")


def started(stderr: str) -> list[str]:
    """The upstreams a `tfunnel call` spawned, from its log."""
    return [entry["upstream"] for entry in map(json.loads, filter(None, stderr.splitlines()[1:]))
            if entry.get("event") == "upstream starting"]


def test_cli_call_starts_only_the_upstream_it_needs(home: Path) -> None:
    """`tfunnel call` of a local tool starts no upstream (a hung one included); of an upstream
    tool, only that upstream; a listing of every tool waits for every upstream's start."""
    set_start_window(home, 5)
    set_upstreams(home, hung(home), mock_upstream("fine", "--tools", "echo"))
    begun = time.monotonic()
    local = run(home, "--log-format", "json", "call", "hash", '{"text": "abc"}')
    assert time.monotonic() - begun < PROMPT_S
    assert local.returncode == 0 and "ba7816bf" in local.stdout
    assert started(local.stderr) == []
    begun = time.monotonic()
    upstream = run(home, "--log-format", "json", "call", "fine_echo", '{"text": "up"}')
    assert time.monotonic() - begun < PROMPT_S * 2
    assert upstream.returncode == 0 and "up" in upstream.stdout, upstream.stderr
    assert started(upstream.stderr) == ["fine"]
    begun = time.monotonic()
    listing = run(home, "--log-format", "json", "call", "toolfunnel_list_tools", '{"category": "mcp:fine"}')
    assert time.monotonic() - begun < PROMPT_S * 3
    assert listing.returncode == 0 and "fine_echo" in listing.stdout, listing.stderr
    assert sorted(started(listing.stderr)) == ["fine", "slow"]
