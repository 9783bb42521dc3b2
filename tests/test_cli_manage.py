"""The management operations from the command line (`tfunnel tool add|update|remove`, `expose`,
`hook add`, `settings`, `completion`), run in-process (`tfunnel.testing.cli`): the same operation
and checks as the tf_* tools (so the same messages), `--json` for scripts, via "cli" in the audit
log, and a change picked up by a running gateway (in-process, `tfunnel.testing.gateway`) without a
restart. `tfunnel tools` beside a gateway process: tests/e2e/test_cli_manage.py."""

from __future__ import annotations

import itertools
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.test_cli import tfunnel
from tfunnel.errors import ToolFailure
from tfunnel.manage import ops_hooks, ops_tools
from tfunnel.manage.builtins import BUILTINS
from tfunnel.manage.plans import Env
from tfunnel.observe.audit import load_log_config
from tfunnel.surface.validation import validate_args
from tfunnel.testing.cli import run
from tfunnel.testing.gateway import stdio_gateway

pytestmark = pytest.mark.timeout(90)

SHOUT = '''import json, os, sys
args = json.loads(os.environ.get("TOOLFUNNEL_TOOL_ARGS") or sys.stdin.read() or "{}")
print(json.dumps({"shouted": str(args.get("text", "")).upper()}))
'''


def ok_json(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, done.stderr
    body: dict[str, Any] = json.loads(done.stdout)
    assert body["ok"] is True
    return body


def refusal(done: subprocess.CompletedProcess[str], prefix: str) -> str:
    """The one-line message of a refused command (exit 1, nothing on stdout without --json)."""
    assert done.returncode == 1, (done.stdout, done.stderr)
    [line] = [line for line in done.stderr.splitlines() if line.startswith(prefix)]
    return line.removeprefix(prefix).strip()


def schema_message(tool: str, args: dict[str, Any]) -> str:
    """What the tf_* tool says of `args` that fail its schema."""
    with pytest.raises(ToolFailure) as caught:
        validate_args(tool, BUILTINS[tool].input_schema, args)
    return str(caught.value)


def op_message(home: Path, tool: str, args: dict[str, Any]) -> str:
    """What the tf_* tool's operation says when it refuses `args` (after its schema passed)."""
    planner = BUILTINS[tool].plan
    assert planner is not None
    with pytest.raises(ToolFailure) as caught:
        planner(Env(home), args)
    return str(caught.value)


def audit(home: Path) -> list[dict[str, Any]]:
    config, _, _ = load_log_config(home)
    return [json.loads(line) for line in config.path.read_text().splitlines()]


def log_on(home: Path) -> None:
    (home / "logs").mkdir(exist_ok=True)
    (home / "logs" / "log.config.json").write_text(json.dumps({"enabled": True}))


def test_tool_add_update_remove(home: Path, tmp_path: Path) -> None:
    """A script tool added with its script from a local file runs at once; update patches a field
    and removes another; remove drops it and its state; each change is audited via "cli"."""
    log_on(home)
    script = tmp_path / "shout.py"
    script.write_text(SHOUT)
    added = ok_json(tfunnel(home, "tool", "add", "shout", "--name", "Shout", "--category", "text",
                            "--summary", "Upper-cases text.", "--script-file", str(script), "--json",
                            "--input-schema", json.dumps({"type": "object",
                                                          "properties": {"text": {"type": "string"}}})))
    assert added["scriptPath"] == "tools/scripts/shout.py"
    assert added["entry"]["invoke"] == {"type": "script", "path": "tools/scripts/shout.py"}
    assert (home / "tools" / "scripts" / "shout.py").read_text() == SHOUT
    called = tfunnel(home, "call", "shout", '{"text": "hi"}')
    assert json.loads(called.stdout) == {"shouted": "HI"}, called.stderr

    updated = tfunnel(home, "tool", "update", "shout", "--set", "summary=Shouts.", "--set", "timeoutS=5",
                      "--unset", "category")
    assert updated.returncode == 0, updated.stderr
    assert updated.stdout.splitlines()[0] == "shout: updated"
    assert any(line.split() == ["entry.timeoutS", "5"] for line in updated.stdout.splitlines())
    row = next(t for t in json.loads((home / "tools" / "tools.register.json").read_text())["tools"]
               if t["id"] == "shout")
    assert row["summary"] == "Shouts." and row["timeoutS"] == 5 and "category" not in row

    assert tfunnel(home, "tool", "hot", "shout").returncode == 0
    assert ok_json(tfunnel(home, "tool", "remove", "shout", "--json"))["removed"] is True
    assert "shout" not in (home / "tools" / "tools.register.json").read_text()
    assert "shout" not in json.loads((home / "tools" / "tools.state.json").read_text())
    changes = [(r["file"], r["change"].split(" ")[0]) for r in audit(home) if r.get("type") == "config"]
    assert changes == [("tools/scripts/shout.py", "add"), ("tools/tools.register.json", "add"),
                       ("tools/tools.register.json", "update"), ("tools/tools.state.json", "hot"),
                       ("tools/tools.register.json", "remove"), ("tools/tools.state.json", "remove")]
    assert {r["via"] for r in audit(home) if r.get("type") == "config"} == {"cli"}


def test_tool_commands_refuse_with_the_tools_messages(home: Path) -> None:
    """A bad argument or a refused change: exit 1, the tf_* tool's own message, nothing written;
    with --json the refusal is also on stdout with ok false."""
    register = (home / "tools" / "tools.register.json").read_bytes()
    bad_name = tfunnel(home, "tool", "add", "t", "--name", "")
    assert refusal(bad_name, "tfunnel tool:") == schema_message("tf_tool_add", {"id": "t", "name": ""})
    bad_id = tfunnel(home, "tool", "add", "no spaces", "--name", "N")
    assert refusal(bad_id, "tfunnel tool:") == op_message(home, "tf_tool_add",
                                                          {"id": "no spaces", "name": "N"})
    field = tfunnel(home, "tool", "update", "echo", "--set", "colour=red")
    assert refusal(field, "tfunnel tool:") == schema_message(
        "tf_tool_update", {"id": "echo", "patch": {"colour": "red"}})
    with pytest.raises(ToolFailure) as taken:
        ops_tools.tool_add(Env(home), {"id": "echo", "name": "E"})
    dup = tfunnel(home, "tool", "add", "echo", "--name", "E", "--json")
    assert refusal(dup, "tfunnel tool:") == str(taken.value)
    assert json.loads(dup.stdout) == {"ok": False, "error": str(taken.value)}
    elsewhere = tfunnel(home, "tool", "add", "t", "--name", "T", "--script", "elsewhere/t.py",
                        "--script-file", str(home / "toolfunnel.json"))
    assert "goes in tools/scripts/" in refusal(elsewhere, "tfunnel tool:")
    gone = tfunnel(home, "tool", "remove", "nope")
    assert "no register tool with id 'nope'" in refusal(gone, "tfunnel tool:")
    assert (home / "tools" / "tools.register.json").read_bytes() == register
    assert not (home / "tools" / "scripts" / "t.py").exists()
    # Usage errors stay argparse's (exit 2): a missing --name, JSON that is not an object.
    assert tfunnel(home, "tool", "add", "t").returncode == 2
    assert tfunnel(home, "tool", "add", "t", "--name", "T", "--input-schema", "[1]").returncode == 2
    assert tfunnel(home, "tool", "update", "echo", "--set", "novalue").returncode == 2


def test_expose_add_and_remove_follow_renames(home: Path) -> None:
    """expose add surfaces an upstream tool as another name; a hook matching that name follows it
    back to `<upstream>_<tool>` when the entry is removed; an unknown entry is refused."""
    exposed = ok_json(tfunnel(home, "expose", "add", "demo", "ping", "--as", "pingo", "--category", "fun",
                              "--json"))
    assert exposed["entry"] == {"upstream": "demo", "tool": "ping", "as": "pingo", "category": "fun",
                                "enabled": True}
    hook = tfunnel(home, "hook", "add", "no-pingo", "--event", "PreToolUse", "--matcher", "pingo",
                   "--command", "true")
    assert hook.returncode == 0, hook.stderr
    removed = tfunnel(home, "expose", "remove", "demo", "ping")
    assert removed.returncode == 0, removed.stderr
    assert removed.stdout.startswith("demo/ping: stops being exposed")
    document = json.loads((home / "mcp" / "expose.json").read_text())
    assert not [e for e in document["expose"] if e.get("tool") == "ping"]
    rows = json.loads((home / "hooks" / "hooks.manifest.json").read_text())["hooks"]
    assert next(r for r in rows if r["id"] == "no-pingo")["matcher"] == "demo_ping"
    again = tfunnel(home, "expose", "remove", "demo", "ping")
    assert "no expose entry for tool 'ping' of upstream 'demo'" in refusal(again, "tfunnel expose:")
    unknown = tfunnel(home, "expose", "add", "nope", "ping")
    assert refusal(unknown, "tfunnel expose:") == "no upstream with id 'nope'; add it with tf_mcp_add first"


def test_hook_add(home: Path, tmp_path: Path) -> None:
    """A hook from a local script (written to hooks/scripts/, run by its interpreter), disabled and
    fail-closed as asked; a bad event or matcher is refused with the tf_hook_add message."""
    script = tmp_path / "check.py"
    script.write_text("import sys\nsys.exit(0)\n")
    added = ok_json(tfunnel(home, "hook", "add", "check", "--event", "PreToolUse", "--matcher", "hash",
                            "--script-file", str(script), "--disabled", "--fail-closed", "--timeout", "5",
                            "--description", "checks hash", "--json"))
    assert added["scriptWritten"] is True
    assert added["hook"] == {"id": "check", "type": "command", "enabled": False, "event": "PreToolUse",
                             "matcher": "hash", "timeout": 5.0, "description": "checks hash",
                             "script": "hooks/scripts/check.py", "failClosed": True,
                             "command": 'python3 "${HOOKS_DIR}/scripts/check.py"'}
    assert (home / "hooks" / "scripts" / "check.py").read_text() == script.read_text()
    assert tfunnel(home, "check").returncode == 0
    listed = tfunnel(home, "hook", "list").stdout
    assert '"id": "check"' in listed
    bad_event = tfunnel(home, "hook", "add", "h", "--event", "Nope", "--command", "true")
    assert refusal(bad_event, "tfunnel hook:") == schema_message(
        "tf_hook_add", {"id": "h", "event": "Nope", "command": "true"})
    with pytest.raises(ToolFailure) as caught:
        ops_hooks.hook_add(Env(home), {"id": "check", "event": "PreToolUse", "command": "true"})
    assert refusal(tfunnel(home, "hook", "add", "check", "--event", "PreToolUse", "--command", "true"),
                   "tfunnel hook:") == str(caught.value)
    regex = tfunnel(home, "hook", "add", "h", "--event", "PreToolUse", "--command", "true", "--matcher", "(")
    assert "not a valid regular expression" in refusal(regex, "tfunnel hook:")
    assert tfunnel(home, "hook", "add", "h", "--event", "PreToolUse").returncode == 2  # no command


def test_settings_show_and_set(home: Path) -> None:
    """settings shows toolfunnel.json; set writes keys and gate.* keys (values as JSON, else
    strings) and says they need a restart; an unknown key or a bad value is refused."""
    shown = tfunnel(home, "settings")
    assert shown.returncode == 0 and shown.stdout.startswith("settings")
    done = tfunnel(home, "settings", "set", "httpPort=9100", "gate.askFallback=allow", "serverName=gw one")
    assert done.returncode == 0, done.stderr
    assert "restart the gateway for these to apply: httpPort, serverName, gate.askFallback" in done.stdout
    document = json.loads((home / "toolfunnel.json").read_text())
    assert document["httpPort"] == 9100 and document["serverName"] == "gw one"
    assert document["gate"]["askFallback"] == "allow"
    body = ok_json(tfunnel(home, "settings", "--json"))
    assert body["settings"]["gate"] == {**body["settings"]["gate"], "askFallback": "allow"}
    assert body["changed"] == []
    same = ok_json(tfunnel(home, "settings", "set", "httpPort=9100", "--json"))
    assert same["changed"] == [] and same["restartRequired"] == []
    before = (home / "toolfunnel.json").read_bytes()
    unknown = tfunnel(home, "settings", "set", "gate.colour=red")
    assert refusal(unknown, "tfunnel settings:") == schema_message("tf_settings", {"gate": {"colour": "red"}})
    port = tfunnel(home, "settings", "set", "httpPort=x")
    assert refusal(port, "tfunnel settings:") == schema_message("tf_settings", {"httpPort": "x"})
    assert (home / "toolfunnel.json").read_bytes() == before
    assert tfunnel(home, "settings", "set").returncode == 2
    assert tfunnel(home, "settings", "set", "novalue").returncode == 2


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_completion_script(tmp_path: Path, shell: str) -> None:
    """`tfunnel completion bash|zsh` prints a script (without touching any home) that bash parses
    and that completes the subcommands at each level and an option's choices."""
    home = tmp_path / "untouched"
    done = tfunnel(home, "completion", shell)
    assert done.returncode == 0 and not home.exists()
    path = tmp_path / "tfunnel.bash"
    path.write_text(done.stdout)
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0
    if shell == "zsh":
        assert "bashcompinit" in done.stdout
        return

    def complete(*words: str) -> list[str]:
        line = " ".join(f"'{w}'" for w in words)
        probe = f'source {path}; COMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; _tfunnel; ' \
                'printf "%s\\n" "${COMPREPLY[@]}"'
        return subprocess.run(["bash", "-c", probe], capture_output=True, text=True).stdout.split()

    top = complete("tfunnel", "")
    assert {"serve", "check", "call", "tools", "tool", "expose", "hook", "log", "mcp", "settings",
            "wrap", "completion"} <= set(top)
    assert complete("tfunnel", "wrap", "--o") == ["--off"]
    assert complete("tfunnel", "se") == ["serve", "settings"]
    assert complete("tfunnel", "--home", "/x", "tool", "u") == ["unhot", "unhide", "update"]
    assert complete("tfunnel", "hook", "a") == ["add"]
    assert "--fail-closed" in complete("tfunnel", "hook", "add", "h", "--f")
    assert complete("tfunnel", "tool", "add", "x", "--mode", "") == ["gateway", "reference"]


async def test_a_change_from_the_cli_reaches_a_connected_client(home: Path, tmp_path: Path) -> None:
    """With a gateway running, `tfunnel tool add` + `tool hot` and `tfunnel expose add` are picked
    up live: the client gets list_changed and sees the new top-level tools, with no restart."""
    log_on(home)
    script = tmp_path / "shout.py"
    script.write_text(SHOUT)

    async def cli(*args: str) -> None:
        with trio.fail_after(60):
            done = await trio.to_thread.run_sync(lambda: run(home, *args))
        assert done.returncode == 0, done.stderr

    ids = itertools.count(1)

    async def top_level() -> list[str]:
        listed = await wire.request(next(ids), "tools/list")
        return [t["name"] for t in listed["result"]["tools"]]

    async def until_listed(name: str) -> None:
        """Poll tools/list until `name` is there; a tools/list_changed must have come meanwhile."""
        with trio.fail_after(20):
            while name not in await top_level():
                await trio.sleep(0.1)
        # The announcement follows the change by its debounce window: it may come just after.
        # (Read past the stash: `recv` hands out stashed messages first, without waiting.)
        seen, wire.stash[:] = list(wire.stash), []
        with trio.fail_after(10):
            while not any(m.get("method") == "notifications/tools/list_changed" for m in seen):
                seen.append(await wire.recv())

    async with stdio_gateway(home) as wire:
        await wire.initialize()
        assert "shout" not in await top_level()
        wire.stash.clear()
        await cli("tool", "add", "shout", "--name", "Shout", "--script-file", str(script))
        await cli("tool", "hot", "shout")
        await until_listed("shout")
        called = await wire.request(next(ids), "tools/call", {"name": "shout", "arguments": {"text": "hi"}})
        assert called["result"]["structuredContent"] == {"shouted": "HI"}
        wire.stash.clear()
        await cli("expose", "add", "demo", "ping", "--as", "pingo")
        await until_listed("pingo")
    config = [r for r in audit(home) if r.get("type") == "config"]
    assert [(r["file"], r["via"]) for r in config if r.get("via") == "cli"] == [
        ("tools/scripts/shout.py", "cli"), ("tools/tools.register.json", "cli"),
        ("tools/tools.state.json", "cli"), ("mcp/expose.json", "cli")]


LISTINGS = [(("tools",), {"tools", "upstream"}), (("hook", "list"), {"hooks"}), (("mcp", "list"), {"mcps"}),
            (("log", "status"), {"enabled", "path"})]


@pytest.mark.parametrize(("argv", "keys"), LISTINGS)
def test_listing_commands_print_json_for_scripts(home: Path, argv: tuple[str, ...],
                                                 keys: set[str]) -> None:
    """Every listing has --json: the same result the in-band tf_list / tf_log gives, with ok."""
    done = tfunnel(home, *argv, "--json")
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    assert body["ok"] is True and keys <= set(body)


def test_log_json_goes_with_status_only(home: Path) -> None:
    done = tfunnel(home, "log", "on", "--json")
    assert done.returncode == 2 and "--json goes with" in done.stderr
    assert not (home / "logs" / "log.config.json").exists()


def test_a_home_from_before_gets_the_management_tools(home: Path) -> None:
    """A register without the tf_* entries (seeded before they shipped) gets exactly the missing
    ones; a second run adds nothing; the in-band path refuses builtin invokes."""
    path = home / "tools" / "tools.register.json"
    register = json.loads(path.read_text())
    register["tools"] = [t for t in register["tools"] if t["id"] not in ("tf_list", "tf_pack")]
    path.write_text(json.dumps(register))
    done = tfunnel(home, "tool", "add-management", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["added"] == ["tf_list", "tf_pack"]
    ids = [t["id"] for t in json.loads(path.read_text())["tools"]]
    assert "tf_list" in ids and "tf_pack" in ids
    again = tfunnel(home, "tool", "add-management", "--json")
    assert json.loads(again.stdout)["added"] == []
