"""Real upstream MCP servers we did not write (mcp-server-time, mcp-server-git, server-everything)
behind tfunnel, driven by the official SDK client: what the gateway relays must equal a direct call."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from mcp import Client, MCPError, StdioServerParameters
from mcp.types import CallToolResult, ElicitResult, Tool

from tests.e2e.test_sdk_stdio import sdk_client
from tests.upstreams import EVERYTHING_SERVER, everything_upstream, undated, write_expose
from tfunnel.testing.sdk import payload, text

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.prefix) / "bin"
TIME_SERVER = BIN / "mcp-server-time"
GIT_SERVER = BIN / "mcp-server-git"
META_TOOLS = ["toolfunnel_list_tools", "toolfunnel_tool_instructions", "toolfunnel_run_tool",
              "toolfunnel_howto"]
TIME_ARGS = ["--local-timezone", "UTC"]
CONVERT = {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}
# server-everything tools whose answers are fixed: structured content, image, annotations, resource links.
EVERYTHING_FIXED: list[tuple[str, dict[str, Any]]] = [
    ("get-structured-content", {"location": "Chicago"}),
    ("get-tiny-image", {}),
    ("get-annotated-message", {"messageType": "success", "includeImage": True}),
    ("get-annotated-message", {"messageType": "error"}),
    ("get-resource-links", {"count": 2}),
]
# Far less than a hung upstream's start window (15 s): an answer that waited for it would time out.
PROMPT_S = 10.0


def time_upstream() -> dict[str, Any]:
    return {"id": "time", "command": str(TIME_SERVER), "args": TIME_ARGS}


def git_upstream(repo: Path) -> dict[str, Any]:
    return {"id": "git", "command": str(GIT_SERVER), "args": ["--repository", str(repo)]}


@asynccontextmanager
async def gateway(home: Path, *, settle: bool = True) -> AsyncIterator[Client]:
    """The SDK client on `python -m tfunnel --home HOME serve` (after its upstreams' start)."""
    async with sdk_client(home, settle=settle) as client:
        yield client


async def _decline(context: Any, params: Any) -> ElicitResult:
    return ElicitResult(action="decline")


@asynccontextmanager
async def direct(command: Path, *args: str) -> AsyncIterator[Client]:
    """The SDK client on the upstream itself, spawned by the SDK (no tfunnel in between). Like
    tfunnel it declares elicitation, so the upstream offers the same tools to both."""
    async with Client(StdioServerParameters(command=str(command), args=list(args)),
                      mode="legacy", cache=None, elicitation_callback=_decline) as client:
        yield client


# Tools an upstream offers only to clients that declare URL-mode elicitation, which the SDK client
# declares and tfunnel (form mode only) does not.
URL_ELICITATION_ONLY = frozenset({"trigger-url-elicitation"})


async def tools_of(upstream: Client) -> list[Tool]:
    """What the upstream lists to tfunnel: its tools for a form-elicitation client."""
    return [t for t in (await upstream.list_tools()).tools if t.name not in URL_ELICITATION_ONLY]



def wire(result: CallToolResult) -> dict[str, Any]:
    """A result as compared between tfunnel and a direct call: everything but `_meta`."""
    dumped = result.model_dump(by_alias=True, exclude_none=True, mode="json")
    dumped.pop("_meta", None)
    return dumped


def definition(tool: Tool) -> dict[str, Any]:
    return tool.model_dump(by_alias=True, exclude_none=True, mode="json")


async def briefs(client: Client, **args: Any) -> list[dict[str, str]]:
    listed = await client.call_tool("toolfunnel_list_tools", {"limit": 200, **args})
    result: list[dict[str, str]] = payload(listed)
    return result


def instructions_call(body: str) -> Any:
    """The JSON run_tool call in a tool's instructions (the first ```json block)."""
    match = re.search(r"```json\n(.*?)\n```", body, re.S)
    assert match is not None, body
    return json.loads(match.group(1))


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false",
                    "-c", "init.defaultBranch=main", *args], cwd=repo, check=True, capture_output=True)


def make_repo(repo: Path) -> None:
    """A fresh repo with one commit, one modified tracked file and one untracked file."""
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "a.txt").write_text("one\n")
    git(repo, "add", "a.txt")
    git(repo, "commit", "-q", "-m", "first commit")
    (repo / "a.txt").write_text("one\ntwo\n")
    (repo / "untracked.txt").write_text("new\n")


async def test_time_server_curated_lean_and_relayed_like_a_direct_call(home: Path) -> None:
    """mcp-server-time: curated time_now on top, lean time_convert_time, results equal a direct call."""
    async with direct(TIME_SERVER, *TIME_ARGS) as upstream:
        own = {t.name: t for t in (await upstream.list_tools()).tools}
        want_convert = await upstream.call_tool("convert_time", CONVERT)
        want_now = await upstream.call_tool("get_current_time", {"timezone": "Asia/Tokyo"})
    assert set(own) == {"get_current_time", "convert_time"}
    assert not want_convert.is_error
    write_expose(home, [time_upstream()],
                 [{"upstream": "time", "tool": "get_current_time", "as": "time_now", "category": "time"}])
    async with gateway(home) as client:
        top = {t.name: t for t in (await client.list_tools()).tools}
        assert list(top) == [*META_TOOLS, "time_now"]
        upstream_def = definition(own["get_current_time"])
        assert definition(top["time_now"]) == {**upstream_def, "name": "time_now"}
        assert top["time_now"].input_schema == own["get_current_time"].input_schema
        assert top["time_now"].annotations == own["get_current_time"].annotations
        assert top["time_now"].output_schema == own["get_current_time"].output_schema
        assert top["time_now"].title == own["get_current_time"].title

        lean = await briefs(client, category="mcp:time")
        assert [b["id"] for b in lean] == ["time_convert_time"]
        assert lean[0]["summary"] == own["convert_time"].description
        everything = {b["id"]: b for b in await briefs(client)}
        assert everything["time_now"]["category"] == "time"
        assert everything["time_convert_time"]["category"] == "mcp:time"
        assert [b["id"] for b in await briefs(client, category="time")] == ["time_now"]

        described = await client.call_tool("toolfunnel_tool_instructions", {"name": "time_convert_time"})
        assert not described.is_error
        body = text(described)
        assert "'time'" in body and "upstream tool: convert_time" in body
        assert instructions_call(body) == {"name": "time_convert_time",
                                           "args": {k: f"<{k}>" for k in CONVERT}}

        got = await client.call_tool("toolfunnel_run_tool", {"name": "time_convert_time", "args": CONVERT})
        assert undated(wire(got)) == undated(wire(want_convert))
        assert got.structured_content is not None
        assert got.structured_content["target"]["datetime"].endswith("T21:00:00+09:00")

        now = await client.call_tool("time_now", {"timezone": "Asia/Tokyo"})
        assert not now.is_error and now.structured_content is not None
        assert want_now.structured_content is not None
        assert set(now.structured_content) == set(want_now.structured_content)
        assert now.structured_content["timezone"] == "Asia/Tokyo"

        unknown = await client.call_tool("toolfunnel_run_tool", {"name": "time_no_such_tool", "args": {}})
        assert unknown.is_error and "time_no_such_tool" in text(unknown)
        # A lean (not curated) upstream tool is not on the top level: calling it there is a protocol error.
        with pytest.raises(MCPError, match="time_convert_time"):
            await client.call_tool("time_convert_time", CONVERT)


async def test_git_server_status_and_log_equal_direct_calls(home: Path) -> None:
    """mcp-server-git on a repo in the home: git_status and git_log through tfunnel equal direct calls."""
    repo = home / "repo"
    make_repo(repo)
    status_args = {"repo_path": str(repo)}
    log_args = {"repo_path": str(repo), "max_count": 5}
    async with direct(GIT_SERVER, "--repository", str(repo)) as upstream:
        names = [t.name for t in (await upstream.list_tools()).tools]
        want_status = await upstream.call_tool("git_status", status_args)
        want_log = await upstream.call_tool("git_log", log_args)
    assert not want_status.is_error and "untracked.txt" in text(want_status)
    assert not want_log.is_error and "first commit" in text(want_log)
    write_expose(home, [git_upstream(repo)], [{"upstream": "git", "tool": "git_log", "as": "repo_log"}])
    async with gateway(home) as client:
        top = [t.name for t in (await client.list_tools()).tools]
        assert top == [*META_TOOLS, "repo_log"]
        lean = [b["id"] for b in await briefs(client, category="mcp:git")]
        # Its tools already begin with `git_`: they keep their own names (`git_status`, not `git_git_status`).
        assert all(n.startswith("git_") for n in names)
        assert lean == ["repo_log" if n == "git_log" else n for n in names]
        status = await client.call_tool("toolfunnel_run_tool",
                                        {"name": "git_status", "args": status_args})
        assert wire(status) == wire(want_status)
        log_via_run = await client.call_tool("toolfunnel_run_tool", {"name": "repo_log", "args": log_args})
        assert wire(log_via_run) == wire(want_log)
        log_direct = await client.call_tool("repo_log", log_args)
        assert wire(log_direct) == wire(want_log)


async def test_everything_server_echo_sum_and_progress(home: Path) -> None:
    """server-everything: echo and get-sum equal direct calls; a curated progress tool relays progress."""
    echo_args = {"message": "hello through tfunnel"}
    sum_args = {"a": 2, "b": 3.5}
    op_args = {"duration": 0.6, "steps": 3}
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async with direct(EVERYTHING_SERVER, "stdio") as upstream:
        own = {t.name: t for t in await tools_of(upstream)}
        names = list(own)
        arithmetic = next(n for n in ("get-sum", "add") if n in names)
        long_op = next(n for n in ("trigger-long-running-operation", "longRunningOperation") if n in names)
        want_echo = await upstream.call_tool("echo", echo_args)
        want_sum = await upstream.call_tool(arithmetic, sum_args)
        want_others = [await upstream.call_tool(name, args) for name, args in EVERYTHING_FIXED]
        want_long = await upstream.call_tool(long_op, op_args, progress_callback=on_progress)
    assert not want_echo.is_error and not want_sum.is_error
    assert "5.5" in text(want_sum)
    assert not want_long.is_error and seen, "the upstream itself reports progress"
    seen.clear()
    write_expose(home, [everything_upstream()],
                 [{"upstream": "everything", "tool": long_op, "as": "long_operation"}])
    async with gateway(home) as client:
        top = {t.name: t for t in (await client.list_tools()).tools}
        assert list(top) == [*META_TOOLS, "long_operation"]
        # Curated-direct keeps the upstream's definition (title, annotations, execution) under our name.
        assert definition(top["long_operation"]) == {**definition(own[long_op]), "name": "long_operation"}
        assert own[long_op].title and top["long_operation"].title == own[long_op].title
        listed = {b["id"]: b for b in await briefs(client, category="mcp:everything")}
        assert set(listed) == {f"everything_{n}" for n in names if n != long_op} | {"long_operation"}
        assert listed["everything_echo"]["name"] == own["echo"].title
        echo = await client.call_tool("toolfunnel_run_tool", {"name": "everything_echo", "args": echo_args})
        assert wire(echo) == wire(want_echo)
        total = await client.call_tool("toolfunnel_run_tool",
                                       {"name": f"everything_{arithmetic}", "args": sum_args})
        assert wire(total) == wire(want_sum)
        assert total.structured_content == want_sum.structured_content
        for (name, args), want in zip(EVERYTHING_FIXED, want_others, strict=True):
            got = await client.call_tool("toolfunnel_run_tool", {"name": f"everything_{name}", "args": args})
            assert wire(got) == wire(want), name

        done = await client.call_tool("long_operation", op_args, progress_callback=on_progress)
        assert wire(done) == wire(want_long)
        assert seen, "no progress notification reached the client"
        assert all(of == 3 for _, of, _ in seen)
        assert [value for value, _, _ in seen] == sorted(value for value, _, _ in seen)
        seen.clear()
        via_run = await client.call_tool("toolfunnel_run_tool", {"name": "long_operation", "args": op_args},
                                         progress_callback=on_progress)
        assert wire(via_run) == wire(want_long)
        assert seen, "no progress notification reached the client through toolfunnel_run_tool"


async def test_three_upstreams_at_once_despite_a_hung_one(home: Path) -> None:
    """time, git and everything together (plus a hung upstream listed first): all lean-listed and callable."""
    repo = home / "repo"
    make_repo(repo)
    sleeper = shutil.which("sleep")
    assert sleeper is not None
    # Never answers initialize; listed first, so a start that waited on it would starve the rest.
    hung = {"id": "hung", "command": sleeper, "args": ["300"], "requestTimeoutMs": 60000}
    write_expose(home, [hung, time_upstream(), git_upstream(repo), everything_upstream()])
    own: dict[str, list[str]] = {}
    for upstream_id, command, args in (("time", TIME_SERVER, TIME_ARGS),
                                       ("git", GIT_SERVER, ["--repository", str(repo)]),
                                       ("everything", EVERYTHING_SERVER, ["stdio"])):
        async with direct(command, *args) as upstream:
            own[upstream_id] = [t.name for t in await tools_of(upstream)]
    async with gateway(home, settle=False) as client:
        # Nothing waits for the upstreams, the hung one included: the first answers come at once
        # (a wait would show up here as a timeout, well before the hung one's start window ends).
        with trio.fail_after(PROMPT_S):
            top = [t.name for t in (await client.list_tools()).tools]
        assert top == META_TOOLS

        async with trio.open_nursery() as nursery:
            results: dict[str, CallToolResult] = {}

            async def call(name: str, args: dict[str, Any]) -> None:
                results[name] = await client.call_tool("toolfunnel_run_tool", {"name": name, "args": args})

            nursery.start_soon(call, "time_convert_time", CONVERT)
            nursery.start_soon(call, "git_status", {"repo_path": str(repo)})
            nursery.start_soon(call, "everything_echo", {"message": "all three"})
        for name, result in results.items():
            assert not result.is_error, (name, result.content)
        # Each call waited for its own upstream only; now all three are listed, the hung one not.
        listed = await briefs(client)
        for upstream_id, names in own.items():
            mine = [b for b in listed if b["category"] == f"mcp:{upstream_id}"]
            # git's tools already begin with `git_` and keep their own names; the others get the prefix.
            assert [b["id"] for b in mine] == [n if n.startswith(f"{upstream_id}_") else f"{upstream_id}_{n}"
                                               for n in names], upstream_id
        assert not [b for b in listed if b["category"] == "mcp:hung"]
        assert results["time_convert_time"].structured_content is not None
        assert results["time_convert_time"].structured_content["time_difference"] == "+9.0h"
        assert "untracked.txt" in text(results["git_status"])
        assert text(results["everything_echo"]) == "Echo: all three"
        hung_call = await client.call_tool("toolfunnel_run_tool", {"name": "hung_anything", "args": {}})
        # Its start window over, the hung one's tools fail as what they are, not as unknown names.
        assert hung_call.is_error and text(hung_call) == "upstream 'hung' is still starting"
