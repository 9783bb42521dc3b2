"""The official `mcp` SDK client on an in-process gateway: the SDK's own session over the
gateway's stdio framing (one JSON line each way, as the SDK's stdio transport writes and parses
them), without the process around it. Needs the test extra (`mcp`).

`sdk_client(home)` is what `tests/e2e/test_sdk_stdio.py`'s process-level `sdk_client` is, with
the gateway in the test's own Trio run; `Notifications`, `text` and `payload` are the helpers the
SDK tests share.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types
import trio
from mcp import Client
from mcp.client._transport import TransportStreams
from mcp.shared.message import SessionMessage
from mcp.types import CallToolResult, TextContent

from tfunnel.surface.changes import DEBOUNCE_S
from tfunnel.testing.gateway import StdioGateway, Upstreams, stdio_gateway

META_TOOLS = ["toolfunnel_list_tools", "toolfunnel_tool_instructions", "toolfunnel_run_tool",
              "toolfunnel_howto"]


class Notifications:
    """Collects server notifications the SDK client receives."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.methods: list[str] = []
        self.list_changed = trio.Event()

    async def __call__(self, message: Any) -> None:
        method = getattr(message, "method", None)
        if method is None:
            method = getattr(getattr(message, "root", None), "method", None)
        if isinstance(method, str):
            self.methods.append(method)
            if method == "notifications/tools/list_changed":
                self.list_changed.set()


def text(result: CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


def payload(result: CallToolResult) -> Any:
    assert not result.is_error, result.content
    return json.loads(text(result))


def _parse(line: bytes) -> SessionMessage | Exception:
    try:
        return SessionMessage(mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:
        return exc


@asynccontextmanager
async def sdk_streams(wire: StdioGateway) -> AsyncIterator[TransportStreams]:
    """The SDK's transport streams on an in-process stdio gateway: each message the SDK writes
    as one JSON line to the gateway's stdin, each line of its stdout parsed as the SDK's stdio
    transport parses it. The gateway's stdin is closed when the block ends (as the SDK closes a
    server's)."""
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)

    async def reader() -> None:
        async with read_writer:
            pending = b""
            while chunk := await wire.stdout.receive_some(65536):
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    try:
                        await read_writer.send(_parse(line))
                    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                        return

    async def writer() -> None:
        async with write_reader:
            async for message in write_reader:
                data = message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                try:
                    await wire.stdin.send_all(data.encode())
                except (trio.ClosedResourceError, trio.BrokenResourceError):
                    return

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        nursery.start_soon(writer)
        try:
            yield read_stream, write_stream
        finally:
            with trio.CancelScope(shield=True):
                await wire.close_stdin()
            nursery.cancel_scope.cancel()


@asynccontextmanager
async def sdk_client(home: Path, notes: Notifications | None = None, env: Mapping[str, str] | None = None,
                     *, settle: bool = True, mode: str = "legacy", upstreams: Upstreams = "in-process",
                     **options: Any) -> AsyncIterator[Client]:
    """The SDK client on an in-process stdio gateway on `home`; with `settle` (the default) the
    test starts once the gateway's upstreams had their start and the surface they brought was
    announced (a round trip after the announcement's debounce window), `notes` reset."""
    async with stdio_gateway(home, env, settle=settle, upstreams=upstreams) as wire, \
            Client(sdk_streams(wire), mode=mode, cache=None, message_handler=notes, **options) as client:
        if settle:
            await trio.sleep(2 * DEBOUNCE_S)
            await client.list_tools()
            if notes is not None:
                notes.reset()
        yield client
