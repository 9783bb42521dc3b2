"""Interoperability with the official `mcp` SDK client over stdio (legacy era)."""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import IO, Any

import pytest
import trio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.wire import SETTLED
from tfunnel.config.model import BUILTIN_TOOL_NAMES
from tfunnel.surface.changes import DEBOUNCE_S
from tfunnel.testing.sdk import META_TOOLS, Notifications, payload, text

pytestmark = pytest.mark.timeout(90)



@asynccontextmanager
async def sdk_client(home: Path, notes: Notifications | None = None,
                     env: dict[str, str] | None = None, *, settle: bool = True,
                     mode: str = "legacy", **options: Any) -> AsyncIterator[Client]:
    """The SDK's stdio client on a gateway it spawns; with `settle` (the default) the test starts
    once the gateway's upstreams had their start (its stderr says so), as `tests.wire.gateway`."""
    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "tfunnel", "--home", str(home), "serve"], env=env)
    with tempfile.TemporaryFile("w+b") as errlog:
        try:
            async with Client(stdio_client(params, errlog=errlog), mode=mode, cache=None,  # type: ignore[arg-type]
                              message_handler=notes, **options) as client:
                if settle:
                    with trio.fail_after(30):
                        while SETTLED not in _read_all(errlog):
                            await trio.sleep(0.02)
                    # The upstreams' arrival changed the surface before the log said so; it is
                    # announced once its debounce window passed, and a round trip after that lets
                    # the announcement through before the test begins listening.
                    await trio.sleep(2 * DEBOUNCE_S)
                    await client.list_tools()
                    if notes is not None:
                        notes.reset()
                yield client
        finally:
            sys.stderr.write(_read_all(errlog).decode("utf-8", "replace"))  # into pytest's report


def _read_all(file: IO[bytes]) -> bytes:
    file.seek(0)
    return file.read()


async def test_tools_list_is_exactly_the_four_meta_tools(home: Path) -> None:
    """A fresh home's top-level surface is the four meta-tools, nothing else."""
    async with sdk_client(home) as client:
        assert client.protocol_version == "2025-11-25"
        tools = (await client.list_tools()).tools
        assert [t.name for t in tools] == META_TOOLS
        for tool in tools:
            assert tool.input_schema["additionalProperties"] is False


async def test_every_meta_tool_works(home: Path) -> None:
    """list (filter/category/query), instructions, run and howto all answer through the SDK."""
    async with sdk_client(home) as client:
        listed = await client.call_tool("toolfunnel_list_tools", {})
        ids = [brief["id"] for brief in payload(listed)]
        assert ids == ["echo", "base64", "hash", "uuid", "json", "text-stats", "danger",  # local first
                       *BUILTIN_TOOL_NAMES,  # the management tools, after the demo tools
                       "demo_ping", "demo_add", "demo_echo", "demo_slow", "demo_progress"]
        assert listed.structured_content == {"tools": payload(listed)}
        crypto = payload(await client.call_tool("toolfunnel_list_tools", {"category": "crypto"}))
        assert [b["id"] for b in crypto] == ["hash"]
        found = payload(await client.call_tool("toolfunnel_list_tools", {"query": "count words lines"}))
        assert found[0]["id"] == "text-stats"
        filtered = payload(await client.call_tool("toolfunnel_list_tools", {"filter": "UUID"}))
        assert [b["id"] for b in filtered] == ["uuid"]
        instructions = await client.call_tool("toolfunnel_tool_instructions", {"name": "hash"})
        assert not instructions.is_error and "sha256" in text(instructions)
        by_display = await client.call_tool("toolfunnel_tool_instructions", {"name": "Hash"})
        assert text(by_display) == text(instructions)
        howto = await client.call_tool("toolfunnel_howto", {"topic": "create-tool"})
        assert not howto.is_error and "tools.register.json" in text(howto)
        ran = await client.call_tool("toolfunnel_run_tool", {"name": "hash", "args": {"text": "abc"}})
        assert ran.structured_content == {
            "ok": True, "algo": "sha256",
            "hexdigest": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"}


DEMO_CALLS: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("echo", {"x": 1, "y": "two"}, {"ok": True, "args": {"x": 1, "y": "two"}, "argv": []}),
    ("base64", {"op": "encode", "text": "hi"}, {"ok": True, "op": "encode", "result": "aGk="}),
    ("base64", {"op": "decode", "text": "aGk="}, {"ok": True, "op": "decode", "result": "hi"}),
    ("hash", {"algo": "md5", "text": "abc"},
     {"ok": True, "algo": "md5", "hexdigest": "900150983cd24fb0d6963f7d28e17f72"}),
    ("json", {"text": "[1,{\"a\":2}]", "minify": True}, {"ok": True, "minified": "[1,{\"a\":2}]"}),
    ("text-stats", {"text": "a b\r\nc\n"}, {"ok": True, "chars": 7, "words": 3, "lines": 2, "bytes": 7}),
]


async def test_every_demo_tool_runs_through_run_tool(home: Path, tmp_path: Path) -> None:
    """Each demo tool gives its documented output via toolfunnel_run_tool."""
    danger_log = tmp_path / "danger.log"
    async with sdk_client(home, env={"TOOLFUNNEL_DANGER_LOG": str(danger_log)}) as client:
        for name, args, expected in DEMO_CALLS:
            result = await client.call_tool("toolfunnel_run_tool", {"name": name, "args": args})
            assert result.structured_content == expected, name
        uuids = await client.call_tool("toolfunnel_run_tool", {"name": "uuid", "args": {"count": 3}})
        assert uuids.structured_content is not None
        assert len(set(uuids.structured_content["uuids"])) == 3
        danger = await client.call_tool("toolfunnel_run_tool", {"name": "Danger Demo", "args": {"n": 1}})
        assert danger.structured_content is not None
        assert danger.structured_content["fired"] is True
        assert "danger-tool fired" in danger_log.read_text()


async def test_bad_arguments_and_unknown_tools_are_tool_errors(home: Path) -> None:
    """Schema failures and unknown names come back as isError naming what is wrong."""
    async with sdk_client(home) as client:
        missing = await client.call_tool("toolfunnel_run_tool", {"name": "hash", "args": {}})
        assert missing.is_error and "'text'" in text(missing)
        bad_enum = await client.call_tool("toolfunnel_run_tool",
                                          {"name": "hash", "args": {"text": "a", "algo": "crc"}})
        assert bad_enum.is_error and "sha256" in text(bad_enum)
        unknown = await client.call_tool("toolfunnel_run_tool", {"name": "nope"})
        assert unknown.is_error and "nope" in text(unknown)
        extra = await client.call_tool("toolfunnel_list_tools", {"bogus": 1})
        assert extra.is_error and "bogus" in text(extra)


async def test_disabled_tool_cannot_be_listed_described_or_run(home: Path, tmp_path: Path) -> None:
    """enabled:false hides a tool from listing and refuses instructions and runs (it never runs)."""
    (home / "tools" / "tools.state.json").write_text(json.dumps({"danger": {"enabled": False}}))
    danger_log = tmp_path / "danger.log"
    async with sdk_client(home, env={"TOOLFUNNEL_DANGER_LOG": str(danger_log)}) as client:
        ids = [b["id"] for b in payload(await client.call_tool("toolfunnel_list_tools", {}))]
        assert "danger" not in ids
        described = await client.call_tool("toolfunnel_tool_instructions", {"name": "danger"})
        assert described.is_error and "disabled" in text(described)
        for name in ("danger", "Danger Demo"):
            ran = await client.call_tool("toolfunnel_run_tool", {"name": name, "args": {}})
            assert ran.is_error and "disabled" in text(ran)
    assert not danger_log.exists()


async def test_live_state_edit_promotes_a_tool(home: Path) -> None:
    """Editing tools.state.json while serving sends list_changed; the hot tool is then listed and callable."""
    notes = Notifications()
    async with sdk_client(home, notes) as client:
        assert [t.name for t in (await client.list_tools()).tools] == META_TOOLS
        (home / "tools" / "tools.state.json").write_text(json.dumps({"hash": {"hot": True}}))
        with trio.fail_after(15):
            await notes.list_changed.wait()
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert list(tools) == [*META_TOOLS, "hash"]
        assert tools["hash"].input_schema["required"] == ["text"]
        direct = await client.call_tool("hash", {"text": "abc", "algo": "sha1"})
        assert direct.structured_content is not None
        assert direct.structured_content["hexdigest"] == "a9993e364706816aba3e25717850c26c9cd0d89d"


async def test_an_existing_toolfunnel_home_runs_unchanged(tmp_path: Path) -> None:
    """A ToolFunnel 0.6 home (node script, shell and reference tools, its state) serves as it did."""
    import shutil

    from tests.conftest import FIXTURES

    home = tmp_path / "tf-home"
    shutil.copytree(FIXTURES / "toolfunnel-home", home)
    before = {p: p.read_bytes() for p in home.rglob("*") if p.is_file()}
    async with sdk_client(home) as client:
        assert client.server_info is not None and client.server_info.name == "my-tools"
        names = [t.name for t in (await client.list_tools()).tools]
        assert names == [*META_TOOLS[:3], "slugify"]
        slug = await client.call_tool("slugify", {"text": "Hello, World Again"})
        assert text(slug) == '"hello-world-again"'
        cleanup = await client.call_tool("toolfunnel_run_tool", {"name": "Cleanup"})
        assert text(cleanup) == "would-delete-artifacts\n"
        runbook = await client.call_tool("toolfunnel_run_tool", {"name": "runbook"})
        assert text(runbook) == "1. Bump the version. 2. Tag. 3. Publish."
    after = {p: p.read_bytes() for p in home.rglob("*") if p.is_file()}
    assert after == before  # nothing in the home was rewritten
