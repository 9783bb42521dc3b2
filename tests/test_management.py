"""The management tools (`tf_*`) in-band, from the official SDK client, in both eras; the human
confirmation of what loosens the gate; and the shipped register entries.

The in-band flow runs on one HTTP gateway with a second client connected that only watches: every
step is visible to it (its tools/list changes) without a restart.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
from mcp import Client
from mcp.types import CallToolResult, ElicitResult

from tests.hooks import decision
from tfunnel.config.model import BUILTIN_TOOL_NAMES
from tfunnel.config.schema import compile_plain
from tfunnel.config.watch import DEBOUNCE_S, POLL_INTERVAL_S
from tfunnel.manage.builtins import BUILTINS, register_entry
from tfunnel.manage.edit import Change
from tfunnel.manage.plans import Plan, question
from tfunnel.observe.audit import load_log_config
from tfunnel.testing.gateway import http_gateway

pytestmark = pytest.mark.timeout(120)

SEED_REGISTER = Path(__file__).resolve().parents[1] / "conf" / "tools" / "tools.register.json"
SHOUT = '''import json, os, sys
args = json.loads(os.environ.get("TOOLFUNNEL_TOOL_ARGS") or sys.stdin.read() or "{}")
print(json.dumps({"ok": True, "shouted": str(args.get("text", "")).upper()}))
'''


def test_the_shipped_register_entries_are_the_builtins() -> None:
    """conf/ ships one register entry per management tool, exactly as the code defines it."""
    tools = json.loads(SEED_REGISTER.read_text())["tools"]
    shipped = {t["id"]: t for t in tools if t.get("category") == "management"}
    assert tuple(shipped) == BUILTIN_TOOL_NAMES == tuple(BUILTINS)
    for name, builtin in BUILTINS.items():
        assert shipped[name] == register_entry(builtin), name
        # A schema the plain checker proves: a start that loads them never imports jsonschema
        # for them (it costs a gateway about 2.4 MiB of RSS).
        assert compile_plain(builtin.input_schema) is not None, name


CHANGE = Change("disable hook 'h'")
# (policy, the plan, a question is asked?)
QUESTIONS = [("loosening", Plan(change=CHANGE, loosens="it stops checking"), True),
             ("loosening", Plan(change=CHANGE), False),
             ("all", Plan(change=CHANGE), True),
             ("none", Plan(change=CHANGE, loosens="it stops checking"), False),
             ("all", Plan(), False)]  # a read is never confirmed


@pytest.mark.parametrize(("policy", "plan", "asked"), QUESTIONS)
def test_which_changes_are_confirmed(policy: Any, plan: Plan, asked: bool) -> None:
    text = question(policy, "tf_hook_set", plan)
    assert (text is not None) is asked
    if text is not None:
        assert "disable hook 'h'" in text and "tf_hook_set" in text
        assert ("loosens the gate: it stops checking" in text) is (plan.loosens is not None)


def body(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result
    assert isinstance(result.structured_content, dict)
    return result.structured_content


def error_text(result: CallToolResult) -> str:
    assert result.is_error, result
    return " ".join(getattr(block, "text", "") for block in result.content)


async def tf(client: Client, name: str, args: dict[str, Any]) -> CallToolResult:
    return await client.call_tool("toolfunnel_run_tool", {"name": name, "args": args})


async def until_listed(client: Client, name: str) -> None:
    with trio.fail_after(15):
        while name not in [t.name for t in (await client.list_tools()).tools]:
            await trio.sleep(0.05)


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_a_client_manages_the_gateway_in_band(home: Path, mode: str) -> None:
    """Add a script tool, run it, promote it hot, attach an upstream and expose one of its tools,
    add a deny hook that then blocks a call, try to disable that hook (asked: declined → still
    enforced; accepted → disabled); each step seen by a second client, with no restart."""
    asked: list[str] = []
    (home / "logs").mkdir(exist_ok=True)
    (home / "logs" / "log.config.json").write_text(json.dumps({"enabled": True}))

    async def confirm(context: Any, params: Any) -> ElicitResult:
        """The user: accepts every change, except the first attempt to disable the hook."""
        asked.append(params.message)
        declined = "disable hook" in params.message and sum("disable hook" in m for m in asked) == 1
        action = "decline" if declined else "accept"
        return ElicitResult(action=action, content={} if action == "accept" else None)  # type: ignore[arg-type]

    async with http_gateway(home) as gw, \
            Client(f"{gw.url}/mcp", mode="legacy", cache=None) as watcher, \
            Client(f"{gw.url}/mcp", mode=mode, cache=None, elicitation_callback=confirm) as actor:
        added = body(await tf(actor, "tf_tool_add", {
            "id": "shout", "name": "Shout", "summary": "Upper-cases text.",
            "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
            "invoke": {"type": "script", "path": "tools/scripts/shout.py"}, "scriptText": SHOUT}))
        assert added["ok"] and added["scriptPath"] == "tools/scripts/shout.py"
        assert body(await tf(actor, "shout", {"text": "hi"}))["shouted"] == "HI"
        body(await tf(actor, "tf_tool_set", {"id": "shout", "action": "hot"}))
        await until_listed(watcher, "shout")

        mock = {"id": "mock", "command": sys.executable, "args": ["-m", "tfunnel.testing.mock_upstream"],
                "expose": [{"tool": "echo", "as": "mock_echo_top"}]}
        assert body(await tf(actor, "tf_mcp_add", mock))["exposed"][0]["as"] == "mock_echo_top"
        await until_listed(watcher, "mock_echo_top")
        listed = body(await tf(actor, "tf_list", {"kind": "mcps"}))["mcps"]
        assert [(m["id"], m["state"]) for m in listed if m["id"] == "mock"] == [("mock", "ready")]

        body(await tf(actor, "tf_hook_add", {"id": "no-shout", "event": "PreToolUse", "matcher": "shout",
                                             "command": decision("deny", "no shouting here")}))
        assert "no shouting here" in error_text(await tf(actor, "shout", {"text": "hi"}))
        # Disabling the hook loosens the gate: the user is asked; a decline changes nothing.
        assert "did not confirm" in error_text(await tf(actor, "tf_hook_set", {"id": "no-shout",
                                                                                "action": "disable"}))
        assert "no shouting here" in error_text(await watcher.call_tool("shout", {"text": "hi"}))
        disabled = body(await tf(actor, "tf_hook_set", {"id": "no-shout", "action": "disable"}))
        assert disabled["enabled"] is False
        assert body(await watcher.call_tool("shout", {"text": "hi"}))["shouted"] == "HI"
        packed = body(await tf(actor, "tf_pack", {"out": "after-flow"}))
        assert (Path(packed["out"]) / "tools" / "scripts" / "shout.py").is_file()
        await trio.sleep(2 * (POLL_INTERVAL_S + DEBOUNCE_S))  # the watcher had its chance
    # Each change that runs code the hooks do not check (the script, the upstream's command, the
    # hook's command) was put to the user, and so was the hook's disabling, twice.
    assert [text.split("(")[1].split(")")[0] for text in asked] == [
        "tf_tool_add", "tf_mcp_add", "tf_hook_add", "tf_hook_set", "tf_hook_set"]
    assert all("loosens the gate" in text for text in asked)
    assert "shout.py" in asked[0] and "mock_upstream" in asked[1] and "no shouting here" in asked[2]
    # Every change is audited as made in-band ("tf"), file by file; a legacy session is named.
    config, _, _ = load_log_config(home)
    records = [json.loads(line) for line in config.path.read_text().splitlines()]
    changes = [(r["file"], r["change"].split(" ")[0]) for r in records
               if r.get("type") == "config" and r.get("via") == "tf"]
    assert changes == [("tools/scripts/shout.py", "add"), ("tools/tools.register.json", "add"),
                       ("tools/tools.state.json", "hot"), ("mcp/expose.json", "add"),
                       ("hooks/hooks.manifest.json", "add"), ("hooks/hooks.manifest.json", "disable"),
                       ("hooks/hooks.state.json", "disable")]
    by = {r.get("by") for r in records if r.get("via") == "tf"}
    assert (by != {None}) is (mode == "legacy")
    # The gateway applied its own changes at once: its file watcher did not read them again.
    assert not [r for r in records if r.get("via") == "file"], records


async def test_a_client_that_cannot_be_asked_is_refused_a_loosening_change(home: Path) -> None:
    """Without elicitation the user cannot confirm: the change is refused, pointing to the CLI, and
    the hook stays on."""
    manifest = home / "hooks" / "hooks.manifest.json"
    rows = json.loads(manifest.read_text())
    rows["hooks"].append({"id": "h", "event": "PreToolUse", "matcher": "nothing", "type": "command",
                          "command": decision("deny", "x"), "enabled": True})
    manifest.write_text(json.dumps(rows))
    before = manifest.read_bytes()
    async with http_gateway(home) as gw, Client(f"{gw.url}/mcp", mode="legacy", cache=None) as client:
        refused = error_text(await tf(client, "tf_hook_set", {"id": "h", "action": "remove"}))
        assert "cannot ask" in refused and "command line" in refused
        # Adding a hook runs a command outside the gate: refused the same way.
        added = error_text(await tf(client, "tf_hook_add", {"id": "h2", "event": "PreToolUse",
                                                            "command": "true"}))
        assert "cannot ask" in added
    assert manifest.read_bytes() == before


async def test_a_deny_on_tf_tool_add_leaves_the_register_byte_identical(home: Path) -> None:
    register = home / "tools" / "tools.register.json"
    manifest = home / "hooks" / "hooks.manifest.json"
    rows = json.loads(manifest.read_text())
    rows["hooks"].append({"id": "no-add", "event": "PreToolUse", "matcher": "tf_tool_add", "type": "command",
                          "command": decision("deny", "not today"), "enabled": True})
    manifest.write_text(json.dumps(rows))
    before = register.read_bytes()
    async with http_gateway(home) as gw, Client(f"{gw.url}/mcp", mode="legacy", cache=None) as client:
        refused = await tf(client, "tf_tool_add", {"id": "x", "name": "X", "invoke": {
            "type": "script", "path": "tools/scripts/x.py"}, "scriptText": "print(1)"})
        assert "not today" in error_text(refused)
    assert register.read_bytes() == before
    assert not (home / "tools" / "scripts" / "x.py").exists()


async def test_discover_connects_an_upstream_once_without_exposing_it(home: Path) -> None:
    """tf_mcp_discover on a disabled upstream: its tools are listed, it stays disabled and none of
    its tools reach the surface; an upstream that cannot start says why."""
    mock = {"id": "quiet", "command": sys.executable, "args": ["-m", "tfunnel.testing.mock_upstream"],
            "enabled": False}
    broken = {"id": "broken", "command": "/no/such/server", "enabled": False}
    async def accept(context: Any, params: Any) -> ElicitResult:
        return ElicitResult(action="accept", content={})

    async with http_gateway(home) as gw, Client(f"{gw.url}/mcp", mode="legacy", cache=None,
                                                elicitation_callback=accept) as client:
        for upstream in (mock, broken):
            body(await tf(client, "tf_mcp_add", upstream))
        found = body(await tf(client, "tf_mcp_discover", {"id": "quiet"}))
        assert found["connected"] and "echo" in [t["name"] for t in found["tools"]]
        failed = body(await tf(client, "tf_mcp_discover", {"id": "broken"}))
        assert not failed["connected"] and "not found" in failed["error"]
        listed = body(await tf(client, "tf_list", {"kind": "mcps"}))["mcps"]
        assert {m["id"]: m["state"] for m in listed}["quiet"] == "disabled"
        briefs = body(await client.call_tool("toolfunnel_list_tools", {"category": "mcp:quiet"}))
        assert briefs["tools"] == []


async def test_tf_pack_writes_a_portable_home_under_dist_only(home: Path) -> None:
    async with http_gateway(home) as gw, Client(f"{gw.url}/mcp", mode="legacy", cache=None) as client:
        packed = body(await tf(client, "tf_pack", {"out": "copy"}))
        assert Path(packed["out"]) == (home / "dist" / "copy").resolve() and packed["files"] > 0
        assert (home / "dist" / "copy" / "tools" / "tools.register.json").is_file()
        assert not (home / "dist" / "copy" / "logs").exists()
        for out in ("../elsewhere", "/tmp/x", ".hidden"):
            assert "must be a folder name" in error_text(await tf(client, "tf_pack", {"out": out}))
