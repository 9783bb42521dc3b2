"""Upstreams behind the stdio gateway, in-process: surfaces, forwarding, failures, cancels, live
expose edits. What only a real gateway process shows (no process of the tree survives its
shutdown; the SDK over its real stdio) is in tests/e2e/test_upstream_gateway.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.hooks import set_hooks
from tests.test_reload import AnyWire, next_notification, wait_for_log
from tests.upstreams import FAST_RESTART, mock_upstream, set_upstreams
from tests.wire import wait_for_file, wait_gone
from tfunnel.testing.gateway import stdio_gateway as gateway
from tfunnel.testing.sdk import META_TOOLS, Notifications, sdk_client, text

pytestmark = pytest.mark.timeout(90)


def run_tool(request_id: Any, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
            "params": {"name": "toolfunnel_run_tool", "arguments": {"name": name, "args": args}}}


async def call(wire: AnyWire, request_id: Any, name: str, args: dict[str, Any]) -> dict[str, Any]:
    await wire.send(run_tool(request_id, name, args))
    return await wire.reply_to(request_id)


async def test_lean_listing_instructions_and_passthrough(home: Path) -> None:
    """Upstream tools are listed lean (mcp:<id>), described, and their CallToolResult passes through."""
    set_upstreams(home, mock_upstream("mock", "--tools", "ping,add,echo"))
    async with sdk_client(home) as client:
        assert [t.name for t in (await client.list_tools()).tools] == META_TOOLS
        listed = await client.call_tool("toolfunnel_list_tools", {"category": "mcp:mock"})
        briefs = json.loads(text(listed))
        assert [b["id"] for b in briefs] == ["mock_ping", "mock_add", "mock_echo"]
        assert briefs[1] == {"id": "mock_add", "name": "Add Numbers", "summary": "Add two numbers.",
                             "category": "mcp:mock"}
        about = text(await client.call_tool("toolfunnel_tool_instructions", {"name": "mock_add"}))
        assert "upstream MCP server 'mock'" in about and '"name": "mock_add"' in about
        added = await client.call_tool("toolfunnel_run_tool", {"name": "mock_add", "args": {"a": 2, "b": 3}})
        assert text(added) == "5" and added.structured_content == {"result": 5}
        bad = await client.call_tool("toolfunnel_run_tool", {"name": "mock_add", "args": {"a": "x", "b": 1}})
        assert bad.is_error and "'a'" in text(bad)


async def test_curated_direct_and_hot_upstream_tools(home: Path) -> None:
    """Curated-direct entries keep title/annotations/outputSchema on the top level; hot tools join them."""
    set_upstreams(home, mock_upstream("mock"),
                  expose=[{"upstream": "mock", "tool": "add", "as": "add_numbers", "category": "math"}])
    (home / "tools" / "tools.state.json").write_text(json.dumps({"mock_echo": {"hot": True}}))
    async with sdk_client(home) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert list(tools) == [*META_TOOLS, "add_numbers", "mock_echo"]
        add = tools["add_numbers"]
        assert add.title == "Add Numbers" and add.output_schema is not None
        assert add.annotations is not None and add.annotations.read_only_hint is True
        direct = await client.call_tool("add_numbers", {"a": 1.5, "b": 1})
        assert direct.structured_content == {"result": 2.5}
        echoed = await client.call_tool("mock_echo", {"text": "hi"})
        assert text(echoed) == "hi"
        lean = json.loads(text(await client.call_tool("toolfunnel_list_tools", {"category": "math"})))
        assert [b["id"] for b in lean] == ["add_numbers"]


async def test_hooks_see_the_claude_code_name_of_upstream_tools(home: Path, tmp_path: Path) -> None:
    """A matcher written for Claude Code (mcp__<upstream>__<tool>) gates the forwarded call."""
    set_upstreams(home, mock_upstream("mock", "--cancel-log", str(home / "c.log")))
    set_hooks(home, {"matcher": "mcp__mock__add", "command": "echo 'no adding' >&2; exit 2"})
    async with sdk_client(home) as client:
        denied = await client.call_tool("toolfunnel_run_tool", {"name": "mock_add", "args": {"a": 1, "b": 2}})
        assert denied.is_error and text(denied) == "no adding"
        allowed = await client.call_tool("toolfunnel_run_tool", {"name": "mock_echo", "args": {"text": "x"}})
        assert text(allowed) == "x"


async def test_crash_fails_in_flight_calls_then_recovers(home: Path) -> None:
    """A crash fails the in-flight call at once (naming the upstream and status, no stderr);
    the upstream restarts, list_changed is sent, and the tool works again."""
    set_upstreams(home, mock_upstream("mock", **FAST_RESTART))
    notes = Notifications()
    # The upstream child's exit is the subject: a real child (its exit status, as watched).
    async with sdk_client(home, notes, upstreams="real") as client:
        async with trio.open_nursery() as nursery:
            results: list[Any] = []

            async def slow() -> None:
                results.append(await client.call_tool("toolfunnel_run_tool",
                                                      {"name": "mock_slow", "args": {"seconds": 30}}))

            nursery.start_soon(slow)
            await trio.sleep(0.3)
            crashed = await client.call_tool("toolfunnel_run_tool", {"name": "mock_crash", "args": {}})
        [in_flight] = results
        for result in (crashed, in_flight):
            assert result.is_error
            assert text(result) == "upstream 'mock' exited with status 3"
        with trio.fail_after(20):
            while True:
                ok = await client.call_tool("toolfunnel_run_tool",
                                            {"name": "mock_echo", "args": {"text": "back"}})
                if not ok.is_error:
                    break
                await trio.sleep(0.1)
        assert text(ok) == "back"
        with trio.fail_after(5):  # "back" is announced once its debounce window passed
            while notes.methods.count("notifications/tools/list_changed") < 2:  # gone, then back
                await trio.sleep(0.02)


async def test_a_cancelled_forwarded_call_is_cancelled_upstream(home: Path, tmp_path: Path) -> None:
    """notifications/cancelled reaches the upstream with the upstream's own request id; no reply."""
    cancel_log = home / "cancels"  # inside the home: the isolation guard allows it
    set_upstreams(home, mock_upstream("mock", "--cancel-log", str(cancel_log)))
    async with gateway(home) as wire:
        await wire.initialize()
        await wire.send(run_tool("client-7", "mock_slow", {"seconds": 30}))
        await trio.sleep(0.5)
        await wire.send({"jsonrpc": "2.0", "method": "notifications/cancelled",
                         "params": {"requestId": "client-7"}})
        logged = json.loads(await wait_for_file(cancel_log))
        assert isinstance(logged, int)  # the gateway's id for the upstream leg, not "client-7"
        assert (await call(wire, 8, "mock_echo", {"text": "still fine"}))["result"]["content"][0]["text"] \
            == "still fine"
        await wire.expect_no_reply(0.5)


async def test_garbage_over_cap_lines_and_stderr_floods_are_survived(home: Path) -> None:
    """Non-JSON stdout is skipped, an over-cap line fails only its call, stderr floods never stall."""
    settings = json.loads((home / "toolfunnel.json").read_text())
    settings["limits"]["maxMessageBytes"] = 65536
    (home / "toolfunnel.json").write_text(json.dumps(settings))
    set_upstreams(home, mock_upstream("mock", "--stderr-at-start", "1000000"))
    # The upstream child's pipes are the subject (a flooded stderr pipe must not stall it).
    async with gateway(home, upstreams="real") as wire:
        await wire.initialize()
        assert (await call(wire, 1, "mock_garbage", {}))["result"]["content"][0]["text"] == "after garbage"
        big = (await call(wire, 2, "mock_big", {"bytes": 200000}))["result"]
        assert big["isError"] is True and "over the message cap" in big["content"][0]["text"]
        flood = (await call(wire, 3, "mock_flood", {"bytes": 5_000_000}))["result"]
        assert flood["content"][0]["text"] == "flooded 5000000"
        assert (await call(wire, 4, "mock_echo", {"text": "ok"}))["result"]["content"][0]["text"] == "ok"
        assert "eeeeeeeeeeeeeeeeeeee" not in json.dumps(wire.stash)


async def test_expose_edits_apply_live_and_restart_only_what_changed(home: Path, tmp_path: Path) -> None:
    """A new upstream appears with list_changed; changing one restarts only it; a bad edit changes nothing."""
    a_pid, b_pid = home / "a.pid", home / "b.pid"
    a = mock_upstream("a", "--pid-file", str(a_pid), "--tools", "echo")
    set_upstreams(home, a)
    async with gateway(home) as wire:
        await wire.initialize()
        first_a = int(await wait_for_file(a_pid))
        b = mock_upstream("b", "--pid-file", str(b_pid), "--tools", "echo")
        set_upstreams(home, a, b)
        await wait_for_file(b_pid)
        await next_notification(wire, "notifications/tools/list_changed")
        with trio.fail_after(10):  # b's handshake follows its pid file by a moment
            while (reply := await call(wire, 1, "b_echo", {"text": "new"}))["result"].get("isError"):
                await trio.sleep(0.05)
        assert reply["result"]["content"][0]["text"] == "new"
        assert int(a_pid.read_text()) == first_a
        b_pid.unlink()
        set_upstreams(home, a, {**b, "args": [*b["args"], "--name", "b2"]})
        second_b = int(await wait_for_file(b_pid))
        assert int(a_pid.read_text()) == first_a  # untouched upstream keeps its child
        wire.stderr.clear()
        b2 = {**b, "args": [*b["args"], "--name", "b2"]}
        set_upstreams(home, {**a, "description": "only a note changed"}, b2)
        await wait_for_log(wire, "expose.json reloaded")
        await trio.sleep(0.5)
        assert "upstream definition changed" not in wire.stderr.decode()  # a note restarts nothing
        assert int(a_pid.read_text()) == first_a
        (home / "mcp" / "expose.json").write_text('{"version": 1, "upstreams": [{"id": ""}]}')
        await wait_for_log(wire, "expose.json reload refused")
        assert int(a_pid.read_text()) == first_a and int(b_pid.read_text()) == second_b
        assert (await call(wire, 2, "a_echo", {"text": "a"}))["result"]["content"][0]["text"] == "a"


@pytest.mark.parametrize(("upstream", "reason"), [
    (mock_upstream("guarded", "--cancel-log", "/tmp/outside-the-home.log",
                   restart={"permanentFailureS": 0.5, "initialBackoffS": 0.1}), "isolation guard"),
    ({"id": "missing", "command": "/no/such/mcp-server",
      "restart": {"permanentFailureS": 0.5, "initialBackoffS": 0.1}}, "not found"),
    (mock_upstream("dies", "--exit-at-start", "4",
                   restart={"maxRestarts": 2, "initialBackoffS": 0.05, "maxBackoffS": 0.1}), "crash loop"),
], ids=["isolation", "no-such-command", "crash-loop"])
async def test_failing_upstreams_end_stopped_and_never_block_others(
    home: Path, upstream: dict[str, Any], reason: str
) -> None:
    """Permanent failures and crash loops end `stopped` with a logged reason; other upstreams serve."""
    set_upstreams(home, upstream, mock_upstream("fine", "--tools", "echo"))
    async with gateway(home) as wire:
        await wire.initialize()
        await wait_for_log(wire, "upstream stopped", timeout=20)
        assert reason in wire.stderr.decode()
        assert (await call(wire, 1, "fine_echo", {"text": "up"}))["result"]["content"][0]["text"] == "up"
        gone = (await call(wire, 2, f"{upstream['id']}_echo", {"text": "x"}))["result"]
        # Its tool is not "unknown": the answer says why its upstream cannot take the call.
        assert gone["isError"] is True
        assert gone["content"][0]["text"].startswith(f"upstream {upstream['id']!r} is stopped ("), gone


async def test_payload_timeout_is_rearmed_by_progress_and_cancels_upstream(home: Path) -> None:
    """Progress keeps a long call alive past timeoutMs; a silent one times out and is cancelled upstream."""
    cancel_log = home / "cancels"
    set_upstreams(home, mock_upstream("mock", "--cancel-log", str(cancel_log), timeoutMs=1000))
    async with gateway(home) as wire:
        await wire.initialize()
        steady = (await call(wire, 1, "mock_progress", {"steps": 6, "delay": 0.4}))["result"]
        assert steady["content"][0]["text"] == "progress done (token seen)"  # 2.4 s, beats a 1 s window
        silent = (await call(wire, 2, "mock_slow", {"seconds": 5}))["result"]
        assert silent["isError"] is True
        assert silent["content"][0]["text"] == "upstream 'mock' did not answer tools/call within 1 s"
        assert isinstance(json.loads(await wait_for_file(cancel_log)), int)


async def test_modern_only_upstream_is_refused_with_a_reason(home: Path) -> None:
    """modernOnly cannot be honoured yet: the upstream ends stopped, naming why."""
    set_upstreams(home, mock_upstream("modern", modernOnly=True, restart={"permanentFailureS": 0.2,
                                                                          "initialBackoffS": 0.05}))
    async with gateway(home) as wire:
        await wire.initialize()
        await wait_for_log(wire, "upstream stopped", timeout=20)
        assert "modernOnly" in wire.stderr.decode()


STUBBORN = r'''
import json, signal, sys, time
def term(*_):
    open(sys.argv[1], "w").write("terminated")
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    result = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
              "serverInfo": {"name": "stubborn", "version": "1"}} if msg["method"] == "initialize" else \
        {"tools": []} if msg["method"] == "tools/list" else None
    reply = {"jsonrpc": "2.0", "id": msg["id"]}
    reply.update({"result": result} if result is not None else
                 {"error": {"code": -32601, "message": "Method not found"}})
    print(json.dumps(reply), flush=True)
while True:  # stdin ended: a server that does not take the hint
    time.sleep(1)
'''


async def test_an_upstream_that_ignores_stdins_end_is_stopped_within_a_clients_grace(home: Path) -> None:
    """When the client closes the gateway's stdin it will SIGTERM and SIGKILL it within its own
    short grace (the SDK: 2 s, then 2 s), and a SIGKILLed gateway leaves its upstreams running. So
    the gateway stops its upstreams as at a signal: one that ignores the end of its stdin gets
    SIGTERM at once rather than after the 2 s stdin grace of a normal stop."""
    (home / "mcp" / "servers").mkdir(parents=True, exist_ok=True)
    (home / "mcp" / "servers" / "stubborn.py").write_text(STUBBORN)
    marker = home / "terminated.txt"
    set_upstreams(home, {"id": "stubborn", "command": sys.executable,
                         "args": ["mcp/servers/stubborn.py", "terminated.txt"]})
    async with gateway(home) as wire:
        await wire.initialize()
        pid = next(u["pid"] for u in [json.loads(x) for x in wire.stderr.decode().splitlines()
                                      if x.startswith("{") and '"upstream ready"' in x])
        started = trio.current_time()
        await wire.close_stdin()
        assert await wire.wait_exit() == 0
        took = trio.current_time() - started
    assert marker.read_text() == "terminated"  # SIGTERM, not the SIGKILL after its grace
    assert await wait_gone([pid]) == []
    # Inside the stdin grace a normal stop gives it (2 s): well before a client's SIGTERM.
    assert took < 2.0, took
