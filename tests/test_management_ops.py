"""The management operations on a real home (`tfunnel.manage.ops_*`, `manage.edit`): what each
plans, what it refuses (naming the argument), which changes loosen the gate, and that a change
is whole or not at all."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tfunnel.errors import ToolFailure
from tfunnel.manage import edit, ops_hooks, ops_mcp, ops_settings, ops_tools
from tfunnel.manage.plans import Env, Plan
from tfunnel.observe.audit import AuditLog

SCRIPT = {"type": "script", "path": "tools/scripts/t.py"}


def run(home: Path, op: Any, args: dict[str, Any]) -> Plan:
    plan: Plan = op(Env(home), args)
    if plan.change is not None:
        edit.commit(home, plan.change, AuditLog(home), via="test")
    return plan


def refused(home: Path, op: Any, args: dict[str, Any]) -> str:
    with pytest.raises(ToolFailure) as caught:
        run(home, op, args)
    return str(caught.value)


# (op, args, a fragment of the refusal)
REFUSALS: list[tuple[Any, dict[str, Any], str]] = [
    (ops_tools.tool_add, {"id": "echo", "name": "E"}, "already in the register"),
    (ops_tools.tool_add, {"id": "two words", "name": "E"}, "letters, digits"),
    (ops_tools.tool_add, {"id": "x" * 129, "name": "E"}, "letters, digits"),
    (ops_tools.tool_add, {"id": "toolfunnel_run_tool", "name": "E"}, "built-in tool"),
    (ops_tools.tool_add, {"id": "tf_list", "name": "E"}, "built-in tool"),
    (ops_tools.tool_add, {"id": "t", "name": "T", "scriptText": "x"}, "scriptText needs invoke"),
    (ops_tools.tool_add, {"id": "t", "name": "T", "invoke": {"type": "script", "path": "elsewhere/t.py"},
                          "scriptText": "x"}, "goes in tools/scripts/"),
    (ops_tools.tool_add, {"id": "t", "name": "T", "scriptText": "x",
                          "invoke": {"type": "script", "path": "tools/scripts/../t.py"}},
     "goes in tools/scripts/"),
    (ops_tools.tool_add, {"id": "t", "name": "T", "invoke": {"type": "builtin", "name": "tf_hook_set"}},
     "reserved for the management tools"),
    (ops_tools.tool_add, {"id": "t", "name": "T", "mode": "gateway"}, "invoke"),  # the register's own rule
    (ops_tools.tool_update, {"id": "nope", "patch": {"summary": "s"}}, "no register tool with id 'nope'"),
    (ops_tools.tool_update, {"id": "echo", "patch": {"id": "other"}}, 'may not change "id"'),
    (ops_tools.tool_update, {"id": "echo", "patch": {"colour": "red"}}, "unknown field(s) colour"),
    (ops_tools.tool_update, {"id": "echo", "patch": {}}, "nothing to change"),
    (ops_tools.tool_update, {"id": "tf_list", "patch": {"summary": "s"}}, "is a management tool"),
    (ops_tools.tool_update, {"id": "echo", "patch": {"invoke": {"type": "script",
                                                                 "path": "tools/scripts/b64.py"}},
                             "scriptText": "x"}, "another tool's script"),
    (ops_tools.tool_set, {"id": "nope", "action": "hot"}, "no tool named 'nope'"),
    (ops_tools.tool_set, {"id": "nope", "action": "remove"}, "no register tool"),
    (ops_hooks.hook_add, {"id": "h", "event": "PreToolUse"}, 'needs "command"'),
    (ops_hooks.hook_add, {"id": "h", "event": "PreToolUse", "scriptText": "x"}, 'needs "script"'),
    (ops_hooks.hook_add, {"id": "h", "event": "PreToolUse", "command": "true", "matcher": "("},
     "not a valid regular expression"),
    (ops_hooks.hook_set, {"id": "nope", "action": "disable"}, "no hook with id 'nope'"),
    (ops_mcp.mcp_add, {"id": "demo", "command": "x"}, "exists"),
    (ops_mcp.mcp_add, {"id": "x", "transport": "http"}, "url"),
    (ops_mcp.mcp_set, {"id": "nope", "action": "enable"}, "no upstream with id 'nope'"),
    (ops_mcp.expose, {"upstream": "nope", "tool": "t"}, "no upstream with id 'nope'"),
    (ops_settings.settings, {"httpPort": 0}, "httpPort"),
    # Never another tool's or hook's code (a hook's script rewritten would switch it off unasked).
    (ops_tools.tool_add, {"id": "t", "name": "T", "scriptText": "x",
                          "invoke": {"type": "script", "path": "tools/scripts/echo.py"}}, "exists"),
    (ops_hooks.hook_add, {"id": "h", "event": "PreToolUse", "script": "deny_dangerous.py",
                          "scriptText": "x"}, "exists"),
    # The audit log goes to logs/ only: never over a config file, nor elsewhere on the machine.
    (ops_settings.log, {"action": "enable", "path": "tools/tools.register.json"},
     "file in logs/"),
    (ops_settings.log, {"action": "enable", "path": "/etc/passwd"}, "file in logs/"),
    (ops_settings.log, {"action": "enable", "path": "logs/../toolfunnel.json"}, "file in logs/"),
    (ops_settings.log, {"action": "enable", "path": "logs/log.config.json"}, "file in logs/"),
    (ops_settings.log, {"action": "enable", "path": "logs/" + "a" * 300 + ".jsonl"}, "at most 200 bytes"),
    (ops_settings.log, {"action": "enable", "path": "logs/a\u0000b.jsonl"}, "file in logs/"),
    (ops_hooks.hook_add, {"id": "h", "event": "Stop", "command": "true", "description": "a\u0000b"},
     "NUL character"),
    (ops_tools.tool_add, {"id": "t", "name": "T",
                          "invoke": {"type": "script", "path": "tools/scripts/" + "a" * 300},
                          "scriptText": "x"}, "bare file name"),
]


@pytest.mark.parametrize(("op", "args", "fragment"), REFUSALS, ids=[f"{op.__name__}-{i}" for i, (op, _, _)
                                                                   in enumerate(REFUSALS)])
def test_a_refused_change_names_why_and_writes_nothing(home: Path, op: Any, args: dict[str, Any],
                                                       fragment: str) -> None:
    before = {p: p.read_bytes() for p in home.rglob("*") if p.is_file()}
    assert fragment in refused(home, op, args)
    assert {p: p.read_bytes() for p in home.rglob("*") if p.is_file()} == before


def hook(home: Path, hook_id: str, enabled: bool) -> None:
    run(home, ops_hooks.hook_add, {"id": hook_id, "event": "PreToolUse", "command": "true",
                                   "enabled": enabled})


def test_what_loosens_the_gate(home: Path) -> None:
    """Disabling or removing a hook that is on, opting an upstream out of the isolation guard,
    attaching an upstream, changing gate.*, turning the audit log off, re-enabling a tool an
    operator disabled. Not: the same on something already off, tightening."""
    hook(home, "on", True)
    hook(home, "off", False)
    env = Env(home)
    assert ops_hooks.hook_set(env, {"id": "on", "action": "disable"}).loosens
    assert ops_hooks.hook_set(env, {"id": "on", "action": "remove"}).loosens
    assert ops_hooks.hook_set(env, {"id": "off", "action": "remove"}).loosens is None
    assert ops_hooks.hook_set(env, {"id": "off", "action": "enable"}).loosens is None
    opted = ops_mcp.mcp_add(env, {"id": "x", "url": "https://example.com/mcp", "allowOutsidePaths": True})
    assert opted.loosens is not None and "allowOutsidePaths" in opted.loosens
    # A remote upstream: what it lists is trusted on first sight, so attaching one is confirmed too.
    remote = ops_mcp.mcp_add(env, {"id": "x", "url": "https://example.com/mcp"}).loosens
    assert remote is not None and "https://example.com/mcp" in remote and "first sight" in remote
    # Code the hooks do not check: an upstream's command, a hook's command, a tool's shell or script.
    started = ops_mcp.mcp_add(env, {"id": "x", "command": "evil", "args": ["A" * 400, "--x"]}).loosens
    assert started is not None and "evil" in started and "--x" in started  # whole, not cut short
    assert ops_hooks.hook_add(env, {"id": "new", "event": "PreToolUse", "command": "true"}).loosens
    shell = {"type": "shell", "command": "ls"}
    assert ops_tools.tool_add(env, {"id": "t", "name": "T", "invoke": shell}).loosens
    assert ops_tools.tool_add(env, {"id": "t", "name": "T", "invoke": SCRIPT, "scriptText": "x"}).loosens
    assert ops_tools.tool_add(env, {"id": "t", "name": "T", "mode": "reference"}).loosens is None
    assert ops_tools.tool_update(env, {"id": "echo", "patch": {"summary": "s"}}).loosens is None
    assert ops_settings.settings(env, {"gate": {"askFallback": "allow"}}).loosens
    assert ops_settings.settings(env, {"serverName": "n"}).loosens is None
    assert ops_settings.settings(env, {}).change is None  # nothing to change, nothing written
    run(home, ops_settings.log, {"action": "enable"})
    assert ops_settings.log(env, {"action": "disable"}).loosens
    run(home, ops_tools.tool_set, {"id": "echo", "action": "disable"})
    assert ops_tools.tool_set(env, {"id": "echo", "action": "enable"}).loosens
    assert ops_tools.tool_set(env, {"id": "base64", "action": "enable"}).loosens is None
    assert ops_tools.tool_set(env, {"id": "base64", "action": "disable"}).loosens is None


def test_a_tool_with_its_script_is_added_updated_and_removed(home: Path) -> None:
    register = home / "tools" / "tools.register.json"
    plan = run(home, ops_tools.tool_add, {"id": "t", "name": "T", "invoke": SCRIPT,
                                          "scriptText": "print(1)\n"})
    script = home / "tools" / "scripts" / "t.py"
    assert plan.result["scriptPath"] == "tools/scripts/t.py" and script.read_text() == "print(1)\n"
    assert os.access(script, os.X_OK)
    run(home, ops_tools.tool_update, {"id": "t", "patch": {"summary": "new", "category": None},
                                      "scriptText": "print(2)\n"})
    row = next(r for r in json.loads(register.read_text())["tools"] if r["id"] == "t")
    assert row["summary"] == "new" and "category" not in row and script.read_text() == "print(2)\n"
    run(home, ops_tools.tool_set, {"id": "t", "action": "hot"})
    run(home, ops_tools.tool_set, {"id": "t", "action": "remove"})
    assert "t" not in [r["id"] for r in json.loads(register.read_text())["tools"]]
    state = json.loads((home / "tools" / "tools.state.json").read_text())
    assert "t" not in state  # its visibility goes with it
    assert script.exists()  # a script is never deleted by a register change


def test_an_expose_rename_carries_exact_matchers_and_state_or_refuses(home: Path) -> None:
    run(home, ops_hooks.hook_add, {"id": "exact", "event": "PreToolUse", "matcher": "demo_echo",
                                   "command": "true"})
    run(home, ops_tools.tool_set, {"id": "demo_echo", "action": "hide"})
    plan = run(home, ops_mcp.expose, {"upstream": "demo", "tool": "echo", "as": "say"})
    assert plan.result["renamed"]
    rows = json.loads((home / "hooks" / "hooks.manifest.json").read_text())["hooks"]
    assert next(r for r in rows if r["id"] == "exact")["matcher"] == "say"
    state = json.loads((home / "tools" / "tools.state.json").read_text())
    assert state.get("say") == {"hidden": True} and "demo_echo" not in state
    # Taken off again: the name goes back, and so do the matcher and the state entry.
    run(home, ops_mcp.expose, {"upstream": "demo", "tool": "echo", "remove": True})
    rows = json.loads((home / "hooks" / "hooks.manifest.json").read_text())["hooks"]
    assert next(r for r in rows if r["id"] == "exact")["matcher"] == "demo_echo"
    assert json.loads((home / "tools" / "tools.state.json").read_text()).get("demo_echo") == {"hidden": True}
    run(home, ops_mcp.expose, {"upstream": "demo", "tool": "echo", "as": "say"})
    run(home, ops_hooks.hook_add, {"id": "loose", "event": "PreToolUse", "matcher": "s.y",
                                   "command": "true"})
    before = (home / "mcp" / "expose.json").read_bytes()
    why = refused(home, ops_mcp.expose, {"upstream": "demo", "tool": "echo", "as": "talk"})
    assert "loose" in why and "stop firing" in why
    assert (home / "mcp" / "expose.json").read_bytes() == before


def test_a_crash_while_writing_leaves_each_file_old_or_new(home: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The script is written, then the register: a failure writing the register leaves it as it
    was (byte for byte), and no temp file behind."""
    register = home / "tools" / "tools.register.json"
    before = register.read_bytes()
    real_replace = os.replace

    def crash(src: Any, dst: Any) -> None:
        if str(dst).endswith("tools.register.json"):
            raise OSError("disk gone")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(ToolFailure, match="could not be written"):
        run(home, ops_tools.tool_add, {"id": "t", "name": "T", "invoke": SCRIPT, "scriptText": "print(1)"})
    assert register.read_bytes() == before
    assert not [p for p in home.rglob("*") if p.name.endswith(edit.TEMP_SUFFIX)]


def test_a_display_name_change_carries_exact_matchers_or_refuses(home: Path) -> None:
    """Hooks match a local tool's display name too: an exact one follows the new name; a pattern
    that would stop firing refuses the change, naming the hook."""
    run(home, ops_hooks.hook_add, {"id": "by-title", "event": "PreToolUse", "matcher": "Echo",
                                   "command": "true"})
    run(home, ops_tools.tool_update, {"id": "echo", "patch": {"name": "Echo back"}})
    rows = json.loads((home / "hooks" / "hooks.manifest.json").read_text())["hooks"]
    assert next(r for r in rows if r["id"] == "by-title")["matcher"] == "Echo back"
    run(home, ops_hooks.hook_add, {"id": "loose", "event": "PreToolUse", "matcher": "Echo b.*",
                                   "command": "true"})
    why = refused(home, ops_tools.tool_update, {"id": "echo", "patch": {"name": "Repeat"}})
    assert "loose" in why


@pytest.mark.parametrize("args", [
    {"id": "remote", "transport": "http", "url": "https://example.com/mcp?key=QUERY-SECRET",
     "headers": {"Authorization": "Bearer HEADER-SECRET"}},
    {"id": "local", "command": "python3", "args": ["server.py"], "env": {"API_TOKEN": "ENV-SECRET"}},
])
def test_an_added_upstreams_secrets_stay_out_of_the_audit_log(home: Path, args: dict[str, Any]) -> None:
    """The audit record of tf_mcp_add (which the admin UI's Activity view shows) names the
    upstream's header and environment variables, never their values, and its URL without the
    query; the file itself keeps them, as written."""
    configure_log = home / "logs" / "log.config.json"
    configure_log.parent.mkdir(parents=True, exist_ok=True)
    configure_log.write_text(json.dumps({"enabled": True}))
    run(home, ops_mcp.mcp_add, args)
    log = (home / "logs" / "toolfunnel.log.jsonl").read_text()
    assert "add upstream" in log
    for secret in ("QUERY-SECRET", "HEADER-SECRET", "ENV-SECRET"):
        assert secret not in log
    assert ("Authorization" in log) is ("headers" in args) and ("API_TOKEN" in log) is ("env" in args)
    written = (home / "mcp" / "expose.json").read_text()
    assert any(secret in written for secret in ("QUERY-SECRET", "HEADER-SECRET", "ENV-SECRET"))
