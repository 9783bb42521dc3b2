"""`tfunnel check` reports what serve would hit (tfunnel.home.preflight), and serve logs the same."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.upstreams import mock_upstream, set_upstreams
from tfunnel.config.expose import ExposeConfig, ExposeEntry, UpstreamSpec
from tfunnel.config.model import Invoke, Register, ToolEntry
from tfunnel.errors import ConfigProblem
from tfunnel.gate.manifest import HookManifest, HookSpec
from tfunnel.home import preflight
from tfunnel.testing.cli import run
from tfunnel.testing.gateway import stdio_gateway

pytestmark = pytest.mark.timeout(60)

PATH = os.defpath


def messages(problems: list[ConfigProblem]) -> list[str]:
    return [str(p) for p in problems]


@pytest.mark.parametrize(("program", "expected"), [
    pytest.param("sh", None, id="on-path"),
    pytest.param("no-such-program-xyz", "'no-such-program-xyz' is not found on PATH", id="not-on-path"),
    pytest.param("/bin/sh", None, id="absolute"),
    pytest.param("/no/such/server", "'/no/such/server' does not exist", id="absolute-missing"),
    pytest.param("bin/server", "'bin/server' does not exist", id="relative-missing"),
    pytest.param("data.txt", "'data.txt' is not found on PATH", id="bare-name-is-looked-up-on-path"),
    pytest.param("./data.txt", "'./data.txt' is not executable", id="not-executable"),
    pytest.param("./run.sh", None, id="relative-to-cwd"),
])
def test_program_problem(tmp_path: Path, program: str, expected: str | None) -> None:
    """A program is looked up as exec would: a name on PATH, a path (relative to the cwd) that
    must be an executable file."""
    (tmp_path / "data.txt").write_text("x")
    (tmp_path / "run.sh").write_text("#!/bin/sh\n")
    (tmp_path / "run.sh").chmod(0o755)
    problem = preflight.program_problem(program, tmp_path, PATH)
    if expected is None:
        assert problem is None
    else:
        assert problem is not None and problem.startswith(expected), problem


def upstream(uid: str, **fields: Any) -> UpstreamSpec:
    return UpstreamSpec(id=uid, **{"command": "sh", **fields})


@pytest.mark.parametrize(("spec", "expected"), [
    pytest.param(upstream("ok"), [], id="fine"),
    pytest.param(upstream("off", command="no-such-program-xyz", enabled=False), [],
                 id="disabled-is-not-checked"),
    pytest.param(upstream("gone", command="no-such-program-xyz"),
                 ["mcp/expose.json: upstreams[0] (id 'gone'): field 'command': 'no-such-program-xyz' is not "
                  "found on PATH"], id="command-not-found"),
    pytest.param(upstream("own-path", command="only-here", env={"PATH": "{home}/bin"}), [],
                 id="its-own-PATH"),
    pytest.param(upstream("web", transport="http", command="", url="https://example.test/mcp"), [],
                 id="http-has-no-command-to-check"),
    pytest.param(upstream("ws", transport="websocket", command="", url="ws://example.test/mcp"), [],
                 id="websocket-has-no-command-to-check"),
    pytest.param(upstream("gh", transport="http", command="", url="https://example.test/mcp",
                          headers={"Authorization": "Bearer ${NO_SUCH_TOKEN_XYZ}", "X-P": "${PATH}"}),
                 ["mcp/expose.json: upstreams[0] (id 'gh'): field 'headers': header 'Authorization' "
                  "refers to ${{NO_SUCH_TOKEN_XYZ}}, which is not set in the gateway's environment"],
                 id="remote-header-variable-missing"),
    pytest.param(upstream("nowhere", cwd="missing-dir"),
                 ["mcp/expose.json: upstreams[0] (id 'nowhere'): field 'cwd': {home}/missing-dir does not "
                  "exist"], id="cwd-missing"),
    pytest.param(upstream("long", cwd="x" * 5000),
                 ["mcp/expose.json: upstreams[0] (id 'long'): field 'cwd': {home}/" + "x" * 5000
                  + " cannot be looked at: File name too long"], id="cwd-too-long"),
    pytest.param(upstream("longcmd", command="/" + "y" * 5000),
                 ["mcp/expose.json: upstreams[0] (id 'longcmd'): field 'command': '/" + "y" * 5000
                  + "' cannot be looked at: File name too long"], id="command-too-long"),
    pytest.param(upstream("escapes", args=("/etc/passwd",)),
                 ["mcp/expose.json: upstreams[0] (id 'escapes'): isolation guard: args[0] '/etc/passwd'"],
                 id="isolation"),
])
def test_upstream_findings(tmp_path: Path, spec: UpstreamSpec, expected: list[str]) -> None:
    """Enabled upstreams that would not start are errors naming the entry and the field."""
    home = tmp_path
    (home / "bin").mkdir()
    (home / "bin" / "only-here").write_text("#!/bin/sh\n")
    (home / "bin" / "only-here").chmod(0o755)
    if "PATH" in spec.env:
        spec = UpstreamSpec(**{**spec.__dict__, "env": {"PATH": str(home / "bin")}})
    found = preflight.upstream_findings(ExposeConfig(upstreams=(spec,)), home, {"PATH": PATH})
    assert found.warnings == []
    got = messages(found.errors)
    assert len(got) == len(expected)
    for line, want in zip(got, expected, strict=True):
        assert line.startswith(want.format(home=home)), line


def hook(hid: str, command: str, *, enabled: bool = True) -> HookSpec:
    return HookSpec(id=hid, event="PreToolUse", command=command, enabled=enabled)


@pytest.mark.parametrize(("spec", "errors", "warnings"), [
    pytest.param(hook("ok", "python3 {hooks}/scripts/real.py"), [], [], id="fine"),
    pytest.param(hook("gone", "python3 {hooks}/scripts/gone.py"),
                 ["hooks[0] (id 'gone'): field 'command': names {hooks}/scripts/gone.py, which does not "
                  "exist"],
                 [], id="missing-script"),
    pytest.param(hook("off", "python3 {hooks}/scripts/gone.py", enabled=False), [],
                 ["hooks[0] (id 'off'): field 'command': names {hooks}/scripts/gone.py, which does not exist "
                  "(the hook is disabled; it would fail once enabled)"], id="disabled-is-a-warning"),
    pytest.param(hook("prog", "no-such-program-xyz --x"),
                 ["hooks[0] (id 'prog'): field 'command': runs 'no-such-program-xyz' is not found on PATH"],
                 [], id="missing-program"),
    pytest.param(hook("cc", '"$CLAUDE_PROJECT_DIR"/hooks/scripts/gone.sh'),
                 ["hooks[0] (id 'cc'): field 'command': runs '{home}/hooks/scripts/gone.sh' does not exist"],
                 [], id="claude-project-dir"),
    pytest.param(hook("rel", "python3 hooks/scripts/gone.py"),
                 ["hooks[0] (id 'rel'): field 'command': names hooks/scripts/gone.py, which does not exist"],
                 [], id="relative-to-the-home"),
    pytest.param(hook("rel-ok", "python3 hooks/scripts/real.py --strict"), [], [], id="relative-exists"),
    pytest.param(hook("long", "python3 {hooks}/" + "x" * 5000),
                 ["hooks[0] (id 'long'): field 'command': names {hooks}/" + "x" * 5000 + ", which cannot be "
                  "looked at: File name too long"], [], id="name-too-long-is-a-finding-not-a-crash"),
    pytest.param(hook("pipe", "cat | no-such-program-xyz"), [], [], id="shell-syntax-is-left-to-the-shell"),
    pytest.param(hook("touch", "touch {hooks}/created-by-the-hook"), [], [], id="a-file-the-hook-creates"),
    pytest.param(hook("inline", "bash -c 'python3 hooks/scripts/gone.py'"), [], [],
                 id="code-on-the-command-line"),
    pytest.param(hook("module", "python3 -m hooks.scripts.x"), [], [], id="a-module"),
    pytest.param(hook("elsewhere", "python3 /opt/elsewhere/x.py"), [], [], id="outside-the-home-not-guessed"),
])
def test_hook_findings(tmp_path: Path, spec: HookSpec, errors: list[str], warnings: list[str]) -> None:
    """A hook whose program or script in the home does not exist: an error when enabled, a warning
    when disabled; command lines beyond a simple one are not second-guessed."""
    home, hooks_dir = tmp_path, tmp_path / "hooks"
    (hooks_dir / "scripts").mkdir(parents=True)
    (hooks_dir / "scripts" / "real.py").write_text("")
    command = spec.command.replace("{hooks}", str(hooks_dir))
    manifest = HookManifest(hooks_dir, (HookSpec(id=spec.id, event=spec.event, command=command,
                                                 enabled=spec.enabled),))
    found = preflight.hook_findings(manifest, home, {"PATH": PATH})
    fill = {"home": home, "hooks": hooks_dir}
    assert messages(found.errors) == [f"hooks/hooks.manifest.json: {e.format(**fill)}" for e in errors]
    assert messages(found.warnings) == [f"hooks/hooks.manifest.json: {w.format(**fill)}" for w in warnings]


def tool(tid: str, name: str) -> ToolEntry:
    return ToolEntry(id=tid, name=name, invoke=Invoke("shell", "true"))


@pytest.mark.parametrize(("tools", "expose", "expected"), [
    pytest.param([tool("a", "A")], [ExposeEntry("up", "t", "up_t")], [], id="no-collision"),
    pytest.param([tool("a", "A"), tool("b", "a")], [],
                 ["tools/tools.register.json: tools[1] (id 'b'): field 'name': display name 'a' is the id of "
                  "tool 'a', which wins (ids are looked up first): reach this tool by its id"],
                 id="display-name-is-an-earlier-id"),
    pytest.param([tool("b", "a"), tool("a", "A")], [],
                 ["tools/tools.register.json: tools[0] (id 'b'): field 'name': display name 'a' is the id of "
                  "tool 'a', which wins"], id="display-name-is-a-later-id"),
    pytest.param([tool("a", "Same"), tool("b", "Same")], [],
                 ["tools/tools.register.json: tools[1] (id 'b'): field 'name': display name 'Same' is also "
                  "the display name of tool 'a', listed earlier, which wins"], id="two-display-names"),
    pytest.param([tool("a", "toolfunnel_howto")], [],
                 ["tools/tools.register.json: tools[0] (id 'a'): field 'name': display name "
                  "'toolfunnel_howto' is a meta-tool's name"], id="display-name-is-a-meta-tool"),
    pytest.param([tool("a", "Shown")], [ExposeEntry("up", "t", "Shown")],
                 ["mcp/expose.json: expose[0] (up/t): field 'as': surfaced name 'Shown' is taken by tool 'a' "
                  "(its display name), which wins"], id="as-is-a-local-display-name"),
    pytest.param([tool("a", "A")], [ExposeEntry("up", "t", "a")],
                 ["mcp/expose.json: expose[0] (up/t): field 'as': surfaced name 'a' is taken by tool 'a', "
                  "which wins"], id="as-is-a-local-id"),
    pytest.param([], [ExposeEntry("up", "t", "toolfunnel_run_tool")],
                 ["mcp/expose.json: expose[0] (up/t): field 'as': surfaced name 'toolfunnel_run_tool' is "
                  "taken by a meta-tool"], id="as-is-a-meta-tool"),
    pytest.param([], [ExposeEntry("u1", "t", "same"), ExposeEntry("u2", "t", "same")],
                 ["mcp/expose.json: expose[1] (u2/t): field 'as': surfaced name 'same' is taken by expose "
                  "entry u1/t, which wins"], id="two-entries-one-name"),
    pytest.param([], [ExposeEntry("u1", "t", "same", enabled=False), ExposeEntry("u2", "t", "same")], [],
                 id="disabled-entries-take-no-name"),
    pytest.param([tool("git_status", "S")], [ExposeEntry("git", "git_status", "git_status", named=False)], [],
                 id="no-as-falls-back-to-the-long-form"),
])
def test_name_findings(tools: list[ToolEntry], expose: list[ExposeEntry], expected: list[str]) -> None:
    """Colliding names are warnings that say which one wins (local first, then config order)."""
    found = preflight.name_findings(Register(tools=tuple(tools)), ExposeConfig(expose=tuple(expose)))
    assert found.errors == []
    got = messages(found.warnings)
    assert len(got) == len(expected)
    for line, want in zip(got, expected, strict=True):
        assert line.startswith(want), line


@pytest.mark.parametrize(("state", "overlay", "expected"), [
    pytest.param({"danger": {"enabled": False}}, {"pre-tool-use/deny-dangerous": True}, [], id="all-known"),
    pytest.param({"dangr": {"enabled": False}}, {},
                 ["tools/tools.state.json: 'dangr': names no tool (did you mean 'danger'?); the switch has "
                  "no effect"], id="tool-typo"),
    pytest.param({"demo_anything": {"hot": True}, "toolfunnel_howto": {"hot": False}}, {}, [],
                 id="upstream-prefix-and-meta"),
    pytest.param({"prompt:demo_greet": {"enabled": False}, "resource:demo://x": {"enabled": False}},
                 {}, [], id="prompt-and-resource"),
    pytest.param({"prompt:dmo_greet": {"enabled": False}}, {},
                 ["tools/tools.state.json: 'prompt:dmo_greet': names no tool; the switch has no effect"],
                 id="prompt-of-no-upstream"),
    pytest.param({}, {"pre-tool-use/deny-dangerus": True},
                 ["hooks/hooks.state.json: 'pre-tool-use/deny-dangerus': names no hook (did you mean "
                  "'pre-tool-use/deny-dangerous'?); the switch has no effect"], id="hook-typo"),
])
def test_overlay_switches_that_name_nothing_are_warnings(
        home: Path, state: dict[str, Any], overlay: dict[str, bool], expected: list[str]) -> None:
    """A typo in an overlay key leaves the tool or hook as it was (maybe looser than meant): check
    warns, naming the nearest real name."""
    from tfunnel.home.check import runtime
    from tfunnel.home.files import read_home

    (home / "tools" / "tools.state.json").write_text(json.dumps(state))
    (home / "hooks" / "hooks.state.json").write_text(json.dumps(overlay))
    found = [p for p in runtime(read_home(home)) if "names no" in p.message]
    assert [str(p) for p in found] == expected
    assert all(p.severity == "warning" for p in found)


def test_a_switch_beside_the_wrapped_hook_state_is_refused(home: Path) -> None:
    """In the wrapped form {"enabled": {...}} a switch beside "enabled" would be lost: the file
    is refused (a start names it), never read without it."""
    (home / "hooks" / "hooks.state.json").write_text(json.dumps(
        {"enabled": {}, "_note": "comments are fine", "pre-tool-use/guard-danger-demo": True}))
    done = run(home, "check")
    assert done.returncode == 1
    assert ("hooks/hooks.state.json: 'pre-tool-use/guard-danger-demo': is beside \"enabled\"" in done.stdout)
    assert "_note" not in done.stdout


def broken_home(home: Path) -> None:
    """A home whose files are valid, but whose upstream, hook and names cannot all work."""
    set_upstreams(home, {"id": "gone", "command": "no-such-mcp-server-xyz"}, mock_upstream("fine"),
                  expose=[{"upstream": "fine", "tool": "echo", "as": "hash"}])
    manifest = json.loads((home / "hooks" / "hooks.manifest.json").read_text())
    manifest["hooks"].append({"id": "ghost", "event": "PreToolUse", "type": "command", "enabled": True,
                              "command": "python3 ${HOOKS_DIR}/scripts/ghost.py"})
    (home / "hooks" / "hooks.manifest.json").write_text(json.dumps(manifest))


EXPECTED = ["mcp/expose.json: upstreams[0] (id 'gone'): field 'command': 'no-such-mcp-server-xyz' is not "
            "found on PATH",
            "hooks/hooks.manifest.json: hooks[5] (id 'ghost'): field 'command': names ",
            "warning: mcp/expose.json: expose[0] (fine/echo): field 'as': surfaced name 'hash' is taken by "
            "tool 'hash', which wins"]


def test_check_reports_what_serve_would_hit(home: Path) -> None:
    """`tfunnel check` names the command not found, the missing hook script and the collision
    (as a warning, with the winner), and exits 1; no traceback."""
    broken_home(home)
    done = run(home, "check")
    assert done.returncode == 1, done.stdout
    lines = done.stdout.splitlines()
    for want in EXPECTED:
        assert any(line.startswith(want) for line in lines), (want, lines)
    assert lines[-1].endswith(f"2 problem(s) and 1 warning(s) in {home}")
    assert "Traceback" not in done.stderr


async def test_serve_logs_what_check_reports(home: Path) -> None:
    """serve logs each of check's findings once at start, errors as errors, warnings as warnings."""
    broken_home(home)
    async with stdio_gateway(home) as wire:
        await wire.initialize()
        await wire.close_stdin()
        await wire.wait_exit()
    logged = [json.loads(line) for line in wire.stderr.decode().splitlines()
              if line.startswith("{") and '"config check"' in line]
    assert [(entry["level"], entry["problem"].split(": field")[0]) for entry in logged] == [
        ("error", "mcp/expose.json: upstreams[0] (id 'gone')"),
        ("error", "hooks/hooks.manifest.json: hooks[5] (id 'ghost')"),
        ("warning", "mcp/expose.json: expose[0] (fine/echo)")]


def test_check_on_the_default_home_is_ok(tmp_path: Path) -> None:
    """A freshly seeded home has nothing to report."""
    done = run(tmp_path / "new", "check")
    assert done.returncode == 0 and done.stdout.strip() == f"ok: {tmp_path / 'new'}", done.stdout


@pytest.mark.parametrize(("document", "expected"), [
    pytest.param({"tools": [{"id": "x", "invoke": {"path": "a\0b"}}]}, [("tools[0] (id 'x')", "invoke.path")],
                 id="register-path"),
    pytest.param({"tools": [{"name": "n", "invoke": {"command": "echo \0"}}]},
                 [("tools[0]", "invoke.command")], id="no-id"),
    pytest.param({"upstreams": [{"id": "u", "args": ["ok", "b\0d"], "env": {"K": "\0"}}]},
                 [("upstreams[0] (id 'u')", "args[1]"), ("upstreams[0] (id 'u')", "env.K")], id="upstream"),
    pytest.param({"upstreams": [{"id": "u", "env": {"K\0": "v"}}]},
                 [("upstreams[0] (id 'u')", "env.'K\\x00'")], id="key"),
    pytest.param({"gate": {"askFallback": "deny\0"}}, [(None, "gate.askFallback")], id="nested-object"),
    pytest.param({"x\0": 1}, [(None, "'x\\x00'")], id="top-level-key"),
    pytest.param({"tools": [{"id": "fine", "summary": "no NUL here: \\0 is two characters"}]}, [],
                 id="clean"),
])
def test_nul_characters_are_found_wherever_they_are(document: dict[str, Any],
                                                    expected: list[tuple[str | None, str]]) -> None:
    """Every NUL in a config document is found, named by its entry and field."""
    from tfunnel.config.files import nul_characters

    assert nul_characters(document) == expected


def test_a_nul_byte_in_a_register_entry_is_a_config_error(home: Path) -> None:
    """A NUL in a script path is a config error naming the entry and field: `check` says so (no
    traceback) and a start is refused (exit 1), never a -32603 at call time."""
    path = home / "tools" / "tools.register.json"
    register = json.loads(path.read_text())
    register["tools"].append({"id": "nul", "name": "Nul", "invoke": {"type": "script", "path": "echo\0.py"}})
    path.write_text(json.dumps(register))
    index = len(register["tools"]) - 1
    want = (f"tools/tools.register.json: tools[{index}] (id 'nul'): field 'invoke.path': contains a NUL "
            "character (U+0000)")
    done = run(home, "check")
    assert done.returncode == 1 and any(line.startswith(want) for line in done.stdout.splitlines()), done
    assert "Traceback" not in done.stderr
    start = run(home, "call", "hash", '{"text": "x"}')
    assert start.returncode == 1 and want in start.stderr and "Traceback" not in start.stderr
