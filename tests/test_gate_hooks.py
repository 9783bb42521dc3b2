"""The hook engine behind the gate, driven through a stdio gateway in-process (`tfunnel.testing`):
raw messages and the official SDK client. An ask answered through elicitation by the SDK over a
real gateway process's stdio, and a `tfunnel call` process's stderr, are in
tests/e2e/test_gate_hooks.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio
from mcp import Client
from mcp.types import ElicitResult

from tests.hooks import EXIT2_DENY, JSON_DENY, decision, set_hooks
from tests.upstreams import mock_upstream, set_upstreams
from tests.wire import wait_gone
from tfunnel.testing.gateway import StdioGateway, stdio_gateway
from tfunnel.testing.sdk import sdk_client, text

pytestmark = pytest.mark.timeout(90)

REFERENCE = {"id": "deploy-notes", "name": "Deploy Notes", "mode": "reference",
             "instructions": "SECRET-STEPS: run make deploy"}


def add_reference_tool(home: Path) -> None:
    path = home / "tools" / "tools.register.json"
    register = json.loads(path.read_text())
    register["tools"].append(REFERENCE)
    path.write_text(json.dumps(register))


async def call_path(client: Client, path: str) -> Any:
    if path == "run_tool":
        return await client.call_tool("toolfunnel_run_tool", {"name": "danger", "args": {"x": 1}})
    if path == "hot":
        return await client.call_tool("danger", {"x": 1})
    return await client.call_tool("toolfunnel_run_tool", {"name": "deploy-notes"})


@pytest.mark.parametrize("path", ["run_tool", "hot", "reference"])
@pytest.mark.parametrize(("command", "reason"), [(EXIT2_DENY, "exit-2 says no"), (JSON_DENY, "json says no")],
                         ids=["exit2", "json"])
async def test_deny_on_every_path_means_the_tool_never_ran(
    home: Path, tmp_path: Path, path: str, command: str, reason: str
) -> None:
    """A deny (exit 2 or JSON) leaves the side-effect file absent and returns isError with the reason."""
    add_reference_tool(home)
    (home / "tools" / "tools.state.json").write_text(json.dumps({"danger": {"hot": True}}))
    set_hooks(home, {"command": command})
    danger_log = tmp_path / "danger.log"
    async with sdk_client(home, env={"TOOLFUNNEL_DANGER_LOG": str(danger_log)}) as client:
        result = await call_path(client, path)
        assert result.is_error and text(result) == reason
        assert "SECRET-STEPS" not in text(result)
    assert not danger_log.exists()


async def call_tool(wire: StdioGateway, request_id: int, name: str, arguments: dict[str, Any],
                    ) -> dict[str, Any]:
    """A raw `tools/call` over the wire; its `result`."""
    reply = await wire.request(request_id, "tools/call", {"name": name, "arguments": arguments})
    result = reply["result"]
    assert isinstance(result, dict), reply
    return result


HAND_OVERS = [("toolfunnel_tool_instructions", {"name": "deploy-notes"}),
              ("toolfunnel_run_tool", {"name": "deploy-notes"}),
              ("toolfunnel_tool_instructions", {"name": "Deploy Notes"})]


@pytest.mark.parametrize(("command", "reason"), [
    (None, None),
    (EXIT2_DENY, "exit-2 says no"),
    (JSON_DENY, "json says no"),
    (decision("ask", "Hand over?"), "Hand over? (the client cannot be asked; gate.askFallback is deny)"),
], ids=["no-hook", "exit2", "json", "ask-falls-back-to-deny"])
async def test_reference_instructions_are_a_gated_hand_over(
    home: Path, command: str | None, reason: str | None
) -> None:
    """A deny withholds a reference tool's instructions from tool_instructions and run_tool alike."""
    add_reference_tool(home)
    if command is not None:
        set_hooks(home, {"matcher": "deploy-notes", "command": command})
    with trio.fail_after(60):
        async with stdio_gateway(home) as wire:
            await wire.initialize()
            for request_id, (tool, arguments) in enumerate(HAND_OVERS):
                result = await call_tool(wire, request_id, tool, arguments)
                if reason is None:
                    assert result == {"content": [{"type": "text", "text": REFERENCE["instructions"]}]}
                else:
                    assert result == {"content": [{"type": "text", "text": reason}], "isError": True}


async def test_instructions_of_other_tools_are_not_gated(home: Path) -> None:
    """Gateway-mode and upstream tools' instructions are descriptions, shown even under a deny-all hook."""
    add_reference_tool(home)
    set_upstreams(home, mock_upstream("mock", "--tools", "add"))
    set_hooks(home, {"command": EXIT2_DENY})
    with trio.fail_after(60):
        async with stdio_gateway(home) as wire:
            await wire.initialize()
            local = await call_tool(wire, 1, "toolfunnel_tool_instructions", {"name": "hash"})
            assert "isError" not in local and local["content"][0]["text"].startswith("Hashes the UTF-8 bytes")
            upstream = await call_tool(wire, 2, "toolfunnel_tool_instructions", {"name": "mock_add"})
            assert "isError" not in upstream
            assert "upstream MCP server 'mock'" in upstream["content"][0]["text"]
            reference = await call_tool(wire, 3, "toolfunnel_tool_instructions", {"name": "deploy-notes"})
            assert reference == {"content": [{"type": "text", "text": "exit-2 says no"}], "isError": True}


@pytest.mark.parametrize(("hook", "runs"), [
    ({"command": "echo 'checking...'; " + JSON_DENY}, False),
    ({"command": decision("allow") + "; " + JSON_DENY}, False),
    ({"command": "head -c 400000 /dev/zero | tr '\\0' x; " + decision("allow")}, False),
    ({"command": "echo '{\"hookSpecificOutput\": {\"permissionDecision\": \"deny\"'"}, False),
    ({"command": "echo '{\"decision\": \"block\", \"decision\": \"approve\"}'"}, False),
    ({"command": "echo plain text, no opinion"}, True),
    ({"command": "echo crashed >&2; exit 1"}, True),
    ({"command": "exec /no/such/hook-script.sh"}, True),
    ({"command": "sleep 5", "timeout": 0.5}, True),
    ({"command": "echo crashed >&2; exit 1", "failClosed": True}, False),
    ({"command": "exec /no/such/hook-script.sh", "failClosed": True}, False),
    ({"command": "sleep 5", "timeout": 0.5, "failClosed": True}, False),
], ids=["text-before-json", "second-different-decision", "over-cap", "unparseable", "repeated-key",
        "plain-text", "crash", "missing", "timeout", "crash-failclosed", "missing-failclosed",
        "timeout-failclosed"])
async def test_unreadable_is_deny_and_silence_is_not(
    home: Path, tmp_path: Path, hook: dict[str, Any], runs: bool
) -> None:
    """Unreadable decisions deny; a hook that never answered lets the call run unless failClosed."""
    set_hooks(home, hook)
    danger_log = tmp_path / "danger.log"
    async with sdk_client(home, env={"TOOLFUNNEL_DANGER_LOG": str(danger_log)}) as client:
        result = await client.call_tool("toolfunnel_run_tool", {"name": "danger", "args": {}})
        assert result.is_error is (not runs)
    assert danger_log.exists() is runs


async def test_timed_out_hook_leaves_no_process_behind(home: Path, tmp_path: Path) -> None:
    """A hook that starts a long-lived grandchild and times out: its whole group is killed."""
    pidfile = tmp_path / "hook.pids"
    set_hooks(home, {"command": f"sleep 300 & echo $! $$ > {pidfile}; wait", "timeout": 1})
    async with sdk_client(home) as client:
        result = await client.call_tool("toolfunnel_run_tool", {"name": "hash", "args": {"text": "a"}})
        assert not result.is_error
    pids = [int(p) for p in pidfile.read_text().split()]
    assert await wait_gone(pids, timeout=5) == []


async def test_updated_input_changes_what_the_tool_receives(home: Path) -> None:
    """updatedInput replaces the arguments the tool runs with."""
    set_hooks(home, {"command": decision("allow", updatedInput={"rewritten": True})})
    async with sdk_client(home) as client:
        result = await client.call_tool("toolfunnel_run_tool", {"name": "echo", "args": {"original": 1}})
        assert result.structured_content == {"ok": True, "args": {"rewritten": True}, "argv": []}


async def test_updated_input_must_still_fit_the_schema(home: Path, tmp_path: Path) -> None:
    """A rewrite that breaks the tool's inputSchema is refused, not run."""
    set_hooks(home, {"command": decision("allow", updatedInput={"text": 5})})
    async with sdk_client(home) as client:
        result = await client.call_tool("toolfunnel_run_tool", {"name": "hash", "args": {"text": "a"}})
        assert result.is_error and "'text'" in text(result)


async def test_session_start_context_is_appended_to_instructions(home: Path) -> None:
    """SessionStart's additionalContext lands in the instructions returned by initialize."""
    ctx = {"hookSpecificOutput": {"hookEventName": "SessionStart",
                                  "additionalContext": "Team rule: be kind."}}
    set_hooks(home, {"event": "SessionStart", "command": f"echo '{json.dumps(ctx)}'"})
    async with sdk_client(home) as client:
        assert client.instructions is not None
        assert client.instructions.startswith("This gateway keeps its tools behind four meta-tools.")
        assert client.instructions.endswith("\n\nTeam rule: be kind.")


def elicitation(action: str, seen: list[str]) -> Any:
    async def callback(context: Any, params: Any) -> ElicitResult:
        seen.append(params.message)
        content: dict[str, Any] | None = {} if action == "accept" else None
        return ElicitResult(action=action, content=content)  # type: ignore[arg-type]
    return callback


@pytest.mark.parametrize(("fallback", "runs"), [(None, False), ("deny", False), ("allow", True)])
async def test_ask_without_elicitation_uses_the_fallback(
    home: Path, tmp_path: Path, fallback: str | None, runs: bool
) -> None:
    """A client that cannot be asked gets gate.askFallback (deny by default)."""
    settings = json.loads((home / "toolfunnel.json").read_text())
    settings["gate"] = {} if fallback is None else {"askFallback": fallback}
    (home / "toolfunnel.json").write_text(json.dumps(settings))
    set_hooks(home, {"command": decision("ask", "Danger ahead")})
    danger_log = tmp_path / "danger.log"
    async with sdk_client(home, env={"TOOLFUNNEL_DANGER_LOG": str(danger_log)}) as client:
        result = await client.call_tool("toolfunnel_run_tool", {"name": "danger", "args": {}})
        assert result.is_error is (not runs)
        if not runs:
            assert "askFallback" in text(result)
    assert danger_log.exists() is runs


async def test_matching_hooks_run_concurrently(home: Path, tmp_path: Path) -> None:
    """Two hooks of one event run at the same time: each waits to see the other start, else denies."""
    a, b = tmp_path / "a", tmp_path / "b"

    def rendezvous(mine: Path, theirs: Path) -> str:
        return (f"touch {mine}; i=0; while [ ! -e {theirs} ]; do i=$((i+1)); "
                f"[ $i -gt 100 ] && {{ echo 'ran alone' >&2; exit 2; }}; sleep 0.05; done")

    set_hooks(home, {"command": rendezvous(a, b)}, {"command": rendezvous(b, a)})
    async with sdk_client(home) as client:
        result = await client.call_tool("toolfunnel_run_tool", {"name": "hash", "args": {"text": "a"}})
        assert not result.is_error, text(result)


@pytest.mark.parametrize("matcher", ["danger", "Danger Demo", "Danger.*", "hash|danger", "*", ""])
async def test_matchers_see_every_name_of_a_tool(home: Path, tmp_path: Path, matcher: str) -> None:
    """A matcher on the surfaced name, the id or the display name fires (anchored full match)."""
    set_hooks(home, {"matcher": matcher, "command": EXIT2_DENY})
    async with sdk_client(home) as client:
        result = await client.call_tool("toolfunnel_run_tool", {"name": "danger", "args": {}})
        assert result.is_error
        other = await client.call_tool("toolfunnel_run_tool", {"name": "uuid", "args": {}})
        assert other.is_error is (matcher in ("*", ""))


async def test_matcher_is_anchored(home: Path) -> None:
    """`dang` does not match `danger`: matchers are full matches, not searches."""
    set_hooks(home, {"matcher": "dang", "command": EXIT2_DENY})
    async with sdk_client(home) as client:
        result = await client.call_tool("toolfunnel_run_tool", {"name": "danger", "args": {}})
        assert not result.is_error


async def test_hook_payload_and_environment_follow_claude_code(home: Path, tmp_path: Path) -> None:
    """Pre and Post hooks get the Claude Code payload on stdin and the documented env vars."""
    pre, post, env = tmp_path / "pre.json", tmp_path / "post.json", tmp_path / "env"
    set_hooks(home,
              {"command": f"cat > {pre}; "
                          f"echo \"$CLAUDE_PROJECT_DIR|$HOOKS_DIR|$TFUNNEL_HOME|$PWD\" > {env}"},
              {"event": "PostToolUse", "command": f"cat > {post}"})
    async with sdk_client(home) as client:
        await client.call_tool("toolfunnel_run_tool", {"name": "hash", "args": {"text": "abc"}})
    before, after = json.loads(pre.read_text()), json.loads(post.read_text())
    common = {"transcript_path": "", "cwd": str(home), "tool_name": "hash", "tool_input": {"text": "abc"},
              "tool_annotations": {},
              "tfunnel": {"surfacedName": "hash", "displayName": "Hash", "upstream": None, "tool": None}}
    assert before == {**common, "session_id": before["session_id"], "hook_event_name": "PreToolUse",
                      "tool_use_id": before["tool_use_id"]}
    assert after["hook_event_name"] == "PostToolUse" and after["tool_use_id"] == before["tool_use_id"]
    assert {key: after[key] for key in common} == common
    assert after["tool_response"]["structuredContent"]["algo"] == "sha256"
    assert before["session_id"] and before["tool_use_id"]
    assert env.read_text().strip() == f"{home}|{home / 'hooks'}|{home}|{home}"


async def test_stop_fires_when_the_session_ends(home: Path, tmp_path: Path) -> None:
    """Stop hooks run when the client closes the session."""
    marker = tmp_path / "stopped.json"
    set_hooks(home, {"event": "Stop", "command": f"cat > {marker}"})
    async with sdk_client(home) as client:
        await client.list_tools()
    with trio.fail_after(10):
        while not marker.exists() or not marker.read_text():
            await trio.sleep(0.05)
    assert json.loads(marker.read_text())["hook_event_name"] == "Stop"
