"""The shipped mock upstream is a real MCP peer: the official SDK client and raw pipes both drive it
as a real process (its exit codes, signals, pipes and grandchildren are the subject)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from mcp import Client, MCPError, StdioServerParameters
from mcp.types import CallToolResult, TextContent

import tfunnel.testing.mock_upstream as mock_upstream

pytestmark = pytest.mark.timeout(60)

SCRIPT = Path(mock_upstream.__file__)
MODULE_ARGS = ["-m", "tfunnel.testing.mock_upstream"]


def text(result: CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


class Notifications:
    """Collects the methods of server notifications the SDK client receives."""

    def __init__(self) -> None:
        self.methods: list[str] = []
        self.list_changed = trio.Event()

    async def __call__(self, message: Any) -> None:
        method = getattr(message, "method", None) or getattr(getattr(message, "root", None), "method", None)
        if isinstance(method, str):
            self.methods.append(method)
            if method == "notifications/tools/list_changed":
                self.list_changed.set()


@asynccontextmanager
async def sdk(*options: str, notes: Notifications | None = None) -> AsyncIterator[Client]:
    params = StdioServerParameters(command=sys.executable, args=[*MODULE_ARGS, *options])
    async with Client(params, mode="legacy", cache=None, message_handler=notes) as client:
        yield client


class Raw:
    """One JSON line at a time over the mock's pipes; raw lines are kept so garbage can be seen."""

    def __init__(self, proc: trio.Process) -> None:
        self.proc = proc
        self._buffer = bytearray()

    async def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        await self.proc.stdin.send_all(json.dumps(message).encode() + b"\n")

    async def call(self, request_id: Any, name: str, arguments: dict[str, Any] | None = None) -> None:
        params = {"name": name, "arguments": arguments or {}}
        await self.send({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params})

    async def line(self, timeout: float = 15.0) -> bytes:
        assert self.proc.stdout is not None
        with trio.fail_after(timeout):
            while b"\n" not in self._buffer:
                chunk = await self.proc.stdout.receive_some()
                assert chunk, "mock upstream closed stdout"
                self._buffer.extend(chunk)
        line, _, rest = bytes(self._buffer).partition(b"\n")
        self._buffer = bytearray(rest)
        return line

    async def message(self, timeout: float = 15.0) -> dict[str, Any]:
        parsed = json.loads(await self.line(timeout))
        assert isinstance(parsed, dict)
        return parsed


@asynccontextmanager
async def raw(*options: str, stderr: Any = subprocess.DEVNULL) -> AsyncIterator[Raw]:
    # Run as a plain script path too, so both documented launch forms stay working.
    proc = await trio.lowlevel.open_process([sys.executable, str(SCRIPT), *options], stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, stderr=stderr)
    try:
        yield Raw(proc)
    finally:
        with suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            assert proc.stdin is not None
            await proc.stdin.aclose()
        with trio.move_on_after(5):
            await proc.wait()
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        assert proc.stdout is not None
        await proc.stdout.aclose()


async def test_initialize_echoes_known_versions_and_counter_offers_unknown() -> None:
    """initialize echoes each handshake version, answers 2025-11-25 otherwise, and names itself."""
    requested = [*mock_upstream.VERSIONS, "2099-01-01", "2026-07-28"]
    async with raw("--name", "upstream-a") as peer:
        for index, version in enumerate(requested):
            await peer.send({"jsonrpc": "2.0", "id": index, "method": "initialize",
                             "params": {"protocolVersion": version, "capabilities": {},
                                        "clientInfo": {"name": "t", "version": "0"}}})
        answers = {m["id"]: m["result"] for m in [await peer.message() for _ in requested]}
    assert [answers[i]["protocolVersion"] for i in range(len(requested))] == [
        *mock_upstream.VERSIONS, "2025-11-25", "2025-11-25"]
    assert answers[0]["serverInfo"] == {"name": "upstream-a", "version": "1.0.0"}
    assert answers[0]["capabilities"] == {"tools": {"listChanged": True}}


async def test_legacy_only_methods_and_unknown_tool_errors() -> None:
    """server/discover and unknown methods give -32601, an unknown tool -32602, a notification nothing."""
    async with raw() as peer:
        await peer.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        await peer.send({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {}})
        assert (await peer.message())["error"]["code"] == -32601
        await peer.send({"jsonrpc": "2.0", "id": 2, "method": "resources/list"})
        assert (await peer.message())["error"]["code"] == -32601
        await peer.call(3, "nope")
        assert (await peer.message())["error"] == {"code": -32602, "message": "Unknown tool: nope"}
        await peer.send({"jsonrpc": "2.0", "id": 4, "method": "ping"})
        assert await peer.message() == {"jsonrpc": "2.0", "id": 4, "result": {}}


async def test_sdk_lists_tools_with_schemas() -> None:
    """tools/list has every tool with an object inputSchema; add carries title, outputSchema, annotations."""
    async with sdk() as client:
        assert client.protocol_version == "2025-11-25"
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert list(tools) == list(mock_upstream.TOOL_SPECS)
    assert all(tool.input_schema["type"] == "object" for tool in tools.values())
    add = tools["add"]
    assert add.title == "Add Numbers"
    assert add.output_schema == {"type": "object", "properties": {"result": {"type": "number"}}}
    assert add.input_schema["required"] == ["a", "b"]
    assert add.annotations is not None and add.annotations.read_only_hint is True


async def test_sdk_calls_add_echo_ping_and_big() -> None:
    """add (structured and error), echo, ping and big answer through the SDK client."""
    async with sdk() as client:
        added = await client.call_tool("add", {"a": 2, "b": 3})
        assert (text(added), added.structured_content, added.is_error) == ("5", {"result": 5}, False)
        bad = await client.call_tool("add", {"a": "two", "b": 3})
        assert bad.is_error and text(bad) == "add requires numeric a and b"
        assert text(await client.call_tool("echo", {"text": "héllo"})) == "héllo"
        assert text(await client.call_tool("ping", {})) == "pong"
        assert text(await client.call_tool("big", {"bytes": 100_000})) == "x" * 100_000
        with pytest.raises(MCPError):
            await client.call_tool("nope", {})


async def test_tools_option_limits_the_advertised_set() -> None:
    """--tools advertises and serves only the named tools."""
    async with sdk("--tools", "echo,add") as client:
        assert [tool.name for tool in (await client.list_tools()).tools] == ["echo", "add"]
        with pytest.raises(MCPError):
            await client.call_tool("ping", {})


async def test_progress_notifications_reach_the_callback() -> None:
    """progress with a token sends one notification per step, then says it saw the token."""
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async with sdk() as client:
        result = await client.call_tool("progress", {"steps": 3, "delay": 0.01},
                                        progress_callback=on_progress)
    assert text(result) == "progress done (token seen)"
    assert seen == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]


async def test_a_slow_call_does_not_block_others() -> None:
    """While `slow 30` is in flight, `echo` is answered: requests run concurrently."""
    order: list[str] = []
    async with sdk() as client, trio.open_nursery() as nursery:

        async def slow() -> None:
            await client.call_tool("slow", {"seconds": 30})
            order.append("slow")

        nursery.start_soon(slow)
        # Every task blocked means slow's request is written to the pipe, so echo really goes second.
        await trio.testing.wait_all_tasks_blocked()
        assert text(await client.call_tool("echo", {"text": "first"})) == "first"
        order.append("echo")
        nursery.cancel_scope.cancel()
    assert order == ["echo"]


async def test_responses_come_out_of_order_on_the_wire() -> None:
    """Requests written hang, slow, echo (pipe order is certain): echo's answer is the first line out."""
    async with raw() as peer:
        await peer.call(1, "hang")
        await peer.call(2, "slow", {"seconds": 30})
        await peer.call(3, "echo", {"text": "overtakes"})
        answer = await peer.message()
    assert answer["id"] == 3 and answer["result"]["content"][0]["text"] == "overtakes"


async def test_garbage_line_then_a_normal_answer() -> None:
    """garbage writes a non-JSON stdout line, then answers normally."""
    async with raw() as peer:
        await peer.call(1, "garbage")
        assert await peer.line() == b"this is not json"
        answer = await peer.message()
    assert answer["id"] == 1 and answer["result"]["content"][0]["text"] == "after garbage"


async def test_cancelled_slow_call_is_logged_and_never_answered(tmp_path: Path) -> None:
    """notifications/cancelled appends the id to --cancel-log and the slow call stays silent."""
    log = tmp_path / "cancel.log"
    async with raw("--cancel-log", str(log)) as peer:
        await peer.call("req-7", "slow", {"seconds": 0.3})
        await peer.send({"jsonrpc": "2.0", "method": "notifications/cancelled",
                         "params": {"requestId": "req-7", "reason": "test"}})
        with trio.fail_after(10):
            while not log.exists() or not log.read_text():
                await trio.sleep(0.01)
        assert log.read_text() == '"req-7"\n'
        with pytest.raises(trio.TooSlowError):
            await peer.line(timeout=0.5)  # longer than the 0.3 s sleep: it would have answered by now
        await peer.call(8, "echo", {"text": "still serving"})
        assert (await peer.message())["id"] == 8


async def test_exit_at_start_exits_with_the_code() -> None:
    """--exit-at-start CODE exits with CODE and says so on stderr."""
    done = await trio.run_process([sys.executable, *MODULE_ARGS, "--exit-at-start", "7"],
                                  capture_stdout=True, capture_stderr=True, check=False)
    assert done.returncode == 7
    assert done.stdout == b""
    assert b"mock-upstream: exiting at start" in done.stderr


async def test_crash_exits_3_without_answering() -> None:
    """crash ends the process with code 3 and writes no response."""
    async with raw() as peer:
        await peer.call(1, "crash")
        with trio.fail_after(10):
            assert await peer.proc.wait() == 3
        assert peer.proc.stdout is not None
        assert await peer.proc.stdout.receive_some() == b""


async def test_ignore_sigterm_survives_sigterm(tmp_path: Path) -> None:
    """With --ignore-sigterm, SIGTERM leaves the process serving; SIGKILL still ends it."""
    pid_file = tmp_path / "mock.pid"
    async with raw("--ignore-sigterm", "--pid-file", str(pid_file)) as peer:
        with trio.fail_after(10):
            while not pid_file.exists() or not pid_file.read_text().strip():
                await trio.sleep(0.01)
        assert int(pid_file.read_text()) == peer.proc.pid  # written after SIG_IGN was installed
        peer.proc.send_signal(signal.SIGTERM)
        await peer.send({"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert (await peer.message())["id"] == 1
        assert peer.proc.returncode is None
        peer.proc.kill()
        assert await peer.proc.wait() == -signal.SIGKILL


async def test_stderr_floods_do_not_touch_stdout(tmp_path: Path) -> None:
    """--stderr-at-start and flood write the asked bytes to stderr while stdout stays clean JSON."""
    err_path = tmp_path / "stderr"
    with err_path.open("wb") as err:
        async with raw("--stderr-at-start", "100000", stderr=err) as peer:
            await peer.call(1, "flood", {"bytes": 200_000})
            assert (await peer.message())["result"]["content"][0]["text"] == "flooded 200000"
    assert err_path.read_bytes().count(b"e") >= 300_000


async def test_spawn_returns_a_live_grandchild_pid() -> None:
    """spawn starts `sleep 300` and answers its pid, which is alive."""
    async with sdk() as client:
        result = await client.call_tool("spawn", {})
    assert result.structured_content is not None
    pid = result.structured_content["pid"]
    try:
        assert text(result) == str(pid)
        os.kill(pid, 0)  # raises if the grandchild is gone
        assert Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:2] == [b"sleep", b"300"]
    finally:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


async def test_change_tools_sends_list_changed_and_adds_extra() -> None:
    """change_tools notifies list_changed; tools/list then has `extra`, and a second toggle removes it."""
    notes = Notifications()
    async with sdk(notes=notes) as client:
        assert text(await client.call_tool("change_tools", {})) == "tools changed"
        with trio.fail_after(10):
            await notes.list_changed.wait()
        names = [tool.name for tool in (await client.list_tools()).tools]
        assert names[-1] == "extra"
        assert text(await client.call_tool("extra", {})) == "extra"
        await client.call_tool("change_tools", {})
        assert "extra" not in [tool.name for tool in (await client.list_tools()).tools]


async def test_ping_client_gets_the_sdk_answer() -> None:
    """ping_client sends a server->client ping that the SDK client answers."""
    async with sdk() as client:
        result = await client.call_tool("ping_client", {})
    assert not result.is_error and text(result) == "client answered ping"
