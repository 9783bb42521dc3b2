"""What hooks see of a tool's names: Claude Code's `tool_name`, our `tfunnel` names, annotations."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
from mcp import Client

from tests.hooks import set_hooks
from tests.test_gate_hooks import REFERENCE, add_reference_tool
from tests.upstreams import mock_upstream, set_upstreams
from tfunnel.gate.gated import ToolCall
from tfunnel.testing.gateway import http_gateway
from tfunnel.testing.sdk import sdk_client, text

pytestmark = pytest.mark.timeout(90)

# A hook written for Claude Code, used unchanged: it checks tool_name and nothing else.
CLAUDE_CODE_HOOK = '''\
import json, sys
payload = json.load(sys.stdin)
if payload.get("tool_name") == "mcp__mock__add":
    print("no adding: " + payload["tool_name"], file=sys.stderr)
    sys.exit(2)
'''
CURATED = [{"upstream": "mock", "tool": "add", "as": "add_numbers"}]


@pytest.mark.parametrize(("call", "expected_name", "names"), [
    (ToolCall("hash", "hash", "Hash", {}), "hash", ("hash", "Hash")),
    (ToolCall("mock_add", "add", "Add Numbers", {}, upstream="mock"), "mcp__mock__add",
     ("mock_add", "add", "Add Numbers", "mcp__mock__add")),
    (ToolCall("add_numbers", "add", "add", {}, upstream="mock"), "mcp__mock__add",
     ("add_numbers", "add", "mcp__mock__add")),
], ids=["local", "upstream", "curated-untitled"])
def test_claude_code_name_and_matcher_names(call: ToolCall, expected_name: str,
                                            names: tuple[str, ...]) -> None:
    """A local tool's Claude Code name is its id, an upstream's mcp__<upstream>__<tool>; matchers see all."""
    assert call.claude_code_name() == expected_name
    assert call.names() == names


async def call_path(client: Client, path: str, tool: str, args: dict[str, Any]) -> Any:
    if path == "run_tool":
        return await client.call_tool("toolfunnel_run_tool", {"name": tool, "args": args})
    return await client.call_tool(tool, args)


@pytest.mark.parametrize(("path", "name", "state", "expose"), [
    ("run_tool", "mock_add", {}, []),
    ("hot", "mock_add", {"mock_add": {"hot": True}}, []),
    ("curated-direct", "add_numbers", {}, CURATED),
], ids=["run_tool", "hot", "curated-direct"])
async def test_a_claude_code_hook_on_tool_name_denies_an_upstream_call_on_every_path(
    home: Path, tmp_path: Path, path: str, name: str, state: dict[str, Any], expose: list[dict[str, Any]]
) -> None:
    """A hook checking only tool_name == mcp__mock__add denies it however it is called; it never runs."""
    methods = home / "methods.log"  # inside the home, where the isolation guard lets the mock write
    set_upstreams(home, mock_upstream("mock", "--method-log", str(methods)), expose=expose)
    (home / "tools" / "tools.state.json").write_text(json.dumps(state))
    script = tmp_path / "claude_code_hook.py"
    script.write_text(CLAUDE_CODE_HOOK)
    set_hooks(home, {"command": f"{sys.executable} {script}"})
    with trio.fail_after(60):
        async with sdk_client(home) as client:
            listed = [t.name for t in (await client.list_tools()).tools]
            assert (name in listed) is (path != "run_tool")
            denied = await call_path(client, path, name, {"a": 1, "b": 2})
            assert denied.is_error and text(denied) == "no adding: mcp__mock__add"
            echoed = await client.call_tool("toolfunnel_run_tool",
                                            {"name": "mock_echo", "args": {"text": "x"}})
            assert not echoed.is_error and text(echoed) == "x"
    calls = [line for line in methods.read_text().splitlines() if line == "tools/call"]
    assert calls == ["tools/call"]  # the echo reached the upstream; the add never did


@pytest.mark.parametrize(("path", "name", "expose", "fields"), [
    ("run_tool", "mock_add", [], {
        "tool_name": "mcp__mock__add", "tool_annotations": {"readOnlyHint": True},
        "tfunnel": {"surfacedName": "mock_add", "displayName": "Add Numbers", "upstream": "mock",
                    "tool": "add"}}),
    ("curated-direct", "add_numbers", CURATED, {
        "tool_name": "mcp__mock__add", "tool_annotations": {"readOnlyHint": True},
        "tfunnel": {"surfacedName": "add_numbers", "displayName": "Add Numbers", "upstream": "mock",
                    "tool": "add"}}),
    ("run_tool", "Hash", [], {
        "tool_name": "hash", "tool_annotations": {},
        "tfunnel": {"surfacedName": "hash", "displayName": "Hash", "upstream": None, "tool": None}}),
], ids=["upstream", "upstream-curated", "local-by-display-name"])
async def test_tool_payload_names_and_annotations(
    home: Path, tmp_path: Path, path: str, name: str, expose: list[dict[str, Any]], fields: dict[str, Any]
) -> None:
    """Pre and Post payloads carry tool_name (Claude Code's), tool_annotations and tfunnel's names."""
    pre, post = tmp_path / "pre.json", tmp_path / "post.json"
    set_upstreams(home, mock_upstream("mock"), expose=expose)
    set_hooks(home, {"command": f"cat > {pre}"}, {"event": "PostToolUse", "command": f"cat > {post}"})
    args = {"a": 1, "b": 2} if fields["tfunnel"]["upstream"] else {"text": "abc"}
    with trio.fail_after(60):
        async with sdk_client(home) as client:
            await client.list_tools()
            result = await call_path(client, path, name, args)
            assert not result.is_error, text(result)
    for payload in (json.loads(pre.read_text()), json.loads(post.read_text())):
        assert {key: payload[key] for key in fields} == fields
        assert payload["tool_input"] == args
    assert json.loads(post.read_text())["hook_event_name"] == "PostToolUse"


async def test_matchers_try_every_name_of_an_upstream_tool(home: Path, tmp_path: Path) -> None:
    """A curated tool fires matchers on its surfaced name, upstream name, title and Claude Code form."""
    set_upstreams(home, mock_upstream("mock"), expose=CURATED)
    matchers = ["add_numbers", "add", "Add Numbers", "mcp__mock__add", "mcp__mock__.*", "mock_add", "echo"]
    set_hooks(home, *({"matcher": m, "command": f"touch '{tmp_path / f'fired-{i}'}'"}
                      for i, m in enumerate(matchers)))
    with trio.fail_after(60):
        async with sdk_client(home) as client:
            await client.list_tools()
            assert not (await client.call_tool("add_numbers", {"a": 1, "b": 2})).is_error
    fired = [m for i, m in enumerate(matchers) if (tmp_path / f"fired-{i}").exists()]
    assert fired == ["add_numbers", "add", "Add Numbers", "mcp__mock__add", "mcp__mock__.*"]


async def test_claude_code_names_and_reference_hand_overs_over_http(home: Path, tmp_path: Path) -> None:
    """Over Streamable HTTP too: a hook checking only tool_name denies the upstream tool by its
    Claude Code name, and withholds a reference tool's instructions on both meta-tool paths."""
    methods = home / "methods.log"
    set_upstreams(home, mock_upstream("mock", "--method-log", str(methods)))
    add_reference_tool(home)
    script = tmp_path / "claude_code_hook.py"
    script.write_text(CLAUDE_CODE_HOOK + '''\
if payload.get("tool_name") == "deploy-notes":
    print("not yet", file=sys.stderr)
    sys.exit(2)
''')
    set_hooks(home, {"command": f"{sys.executable} {script}"})
    with trio.fail_after(60):
        async with http_gateway(home) as gw, Client(f"{gw.url}/mcp", mode="legacy", cache=None) as client:
            denied = await client.call_tool("toolfunnel_run_tool",
                                            {"name": "mock_add", "args": {"a": 1, "b": 2}})
            assert denied.is_error and text(denied) == "no adding: mcp__mock__add"
            for tool in ("toolfunnel_tool_instructions", "toolfunnel_run_tool"):
                withheld = await client.call_tool(tool, {"name": "deploy-notes"})
                assert withheld.is_error and text(withheld) == "not yet"
                assert REFERENCE["instructions"] not in text(withheld)
    assert not methods.exists() or "tools/call" not in methods.read_text().splitlines()
