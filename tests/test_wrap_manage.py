"""Wrap mode's management side: `tfunnel wrap` (status, set with the security notice and the era
probe, --off), `tf_wrap` (confirm: true, always put to the user), clearing a wrap when its
upstream is disabled or removed, and `tfunnel check` on a wrap of nothing. The command and the
gateway run in-process; the probe of the real mcp-server-time: tests/e2e/test_wrap_manage.py."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.types import ElicitResult

from tests.test_cli import tfunnel
from tests.test_management import body, error_text, tf
from tests.upstreams import mock_upstream, set_upstreams
from tfunnel.config.expose import UpstreamSpec
from tfunnel.config.load import STATE_FILE
from tfunnel.config.model import Invoke, ToolEntry
from tfunnel.errors import ToolFailure
from tfunnel.gate.gated import NeedsInput
from tfunnel.home.check import check_home
from tfunnel.manage import edit, ops_mcp, ops_wrap
from tfunnel.manage.builtins import Management
from tfunnel.manage.plans import Env, Plan, question
from tfunnel.manage.wrap_cmd import UNFINISHED, Attempt, verdict
from tfunnel.observe.audit import AuditLog
from tfunnel.protocol.eras import Era
from tfunnel.testing.gateway import http_gateway
from tfunnel.upstream.handshake import Connection
from tfunnel.upstream.isolation import suspended_by_wrap

pytestmark = pytest.mark.timeout(120)

OTHER_KEYS = {"echo": {"enabled": False}, "hash": {"hot": True, "note": "kept"}}


def state(home: Path) -> Any:
    path = home / STATE_FILE
    return json.loads(path.read_text()) if path.exists() else {}


def put_state(home: Path, value: dict[str, Any]) -> None:
    (home / STATE_FILE).write_text(json.dumps(value))


def upstreams(home: Path) -> None:
    """Three upstreams: `mock` (enabled), `off` (disabled), `far` (its cwd outside the home)."""
    set_upstreams(home, mock_upstream("mock"), mock_upstream("off", enabled=False),
                  mock_upstream("far", cwd=str(home.parent)))


def run(home: Path, op: Any, args: dict[str, Any]) -> Plan:
    plan: Plan = op(Env(home), args)
    if plan.change is not None:
        edit.commit(home, plan.change, AuditLog(home), via="test")
    return plan


# -- pure parts --------------------------------------------------------------------------------

LEGACY = Connection(Era.LEGACY, "2025-11-25")
MODERN = Connection(Era.MODERN, "2026-07-28")


@pytest.mark.parametrize(("first", "legacy", "expected"), [
    pytest.param(Attempt(LEGACY), None, "speaks MCP 2025-11-25: legacy-era", id="legacy"),
    pytest.param(Attempt(MODERN), Attempt(LEGACY), "speaks MCP 2026-07-28: dual-era", id="dual"),
    pytest.param(Attempt(MODERN), Attempt(None, "upstream 'x' answered initialize with an error"),
                 "speaks MCP 2026-07-28: modern-only", id="modern-only"),
    pytest.param(Attempt(MODERN), UNFINISHED, "not learned within 15 s", id="window-ended-in-legacy-step"),
    pytest.param(Attempt(None, "upstream 'x' exited with status 2"), None,
                 "could not connect (upstream 'x' exited with status 2); the wrap is set anyway",
                 id="failed"),
    pytest.param(None, None, "could not connect (no answer within 15 s); the wrap is set anyway",
                 id="window-ended"),
])
def test_the_probe_verdict(first: Attempt | None, legacy: Attempt | None, expected: str) -> None:
    """Each probe outcome is one line naming the version and the eras, or why it did not connect."""
    assert expected in verdict(first, legacy, 15.0)


@pytest.mark.parametrize(("fields", "expected"), [
    pytest.param({"args": ("-m", "srv")}, [], id="nothing-outside"),
    pytest.param({"args": ("/opt/elsewhere/server.js",)}, ["args[0] '/opt/elsewhere/server.js'"], id="arg"),
    pytest.param({"args": ("--root=/srv/data",)}, ["args[0] '--root=/srv/data' (its value '/srv/data')"],
                 id="flag-value"),
    pytest.param({"cwd": "/"}, ["cwd '/' resolves to /"], id="cwd"),
    pytest.param({"env": {"PYTHONPATH": "/opt/lib"}}, ["env PYTHONPATH element '/opt/lib'"], id="env-path"),
    pytest.param({"env": {"NODE_OPTIONS": "--require x"}}, ["env NODE_OPTIONS is set"],
                 id="code-loading-env"),
    pytest.param({"args": ("/opt/x",), "allow_outside_paths": True}, [], id="already-allowed"),
])
def test_what_a_wrap_suspends(tmp_path: Path, fields: dict[str, Any], expected: list[str]) -> None:
    """`suspended_by_wrap` lists what the guard would refuse, without the opt-out advice."""
    spec = UpstreamSpec(id="u", command="node", **fields)
    found = suspended_by_wrap(spec, tmp_path)
    assert len(found) == len(expected)
    for item, fragment in zip(found, expected, strict=True):
        assert item.startswith(fragment)
        assert "allowOutsidePaths" not in item and "allowCodeLoadingEnv" not in item


REFUSALS = [
    ({"upstream": "mock"}, "needs confirm: true"),
    ({"upstream": "mock", "confirm": False}, "needs confirm: true"),
    ({"upstream": "nope", "confirm": True}, "no upstream 'nope' in mcp/expose.json (configured: mock, off "
                                            "(disabled), far)"),
    ({"upstream": "off", "confirm": True}, "upstream 'off' is disabled in mcp/expose.json"),
    ({"upstream": "mock", "as": "two words", "confirm": True}, "is not a server id"),
    ({"upstream": "mock", "off": True}, "takes no upstream"),
    ({"as": "git"}, "give the upstream too"),
]


@pytest.mark.parametrize(("args", "fragment"), REFUSALS)
def test_tf_wrap_refusals(home: Path, args: dict[str, Any], fragment: str) -> None:
    """A set without confirm, of an unknown or disabled upstream, or a bad `as`, is refused; nothing
    is written."""
    upstreams(home)
    put_state(home, OTHER_KEYS)
    with pytest.raises(ToolFailure) as caught:
        run(home, ops_wrap.tf_wrap, args)
    assert fragment in str(caught.value)
    assert state(home) == OTHER_KEYS


def test_without_confirm_the_refusal_explains_the_lockout(home: Path) -> None:
    """The refusal says why: the wrap hides tf_wrap itself; recovery is the CLI."""
    upstreams(home)
    with pytest.raises(ToolFailure) as caught:
        ops_wrap.tf_wrap(Env(home), {"upstream": "mock"})
    assert "tf_wrap" in str(caught.value) and "`tfunnel wrap --off`" in str(caught.value)


def test_tf_wrap_set_status_clear_keep_the_other_keys(home: Path) -> None:
    """Set writes passthrough (and passthroughAs) beside the other keys; status reports it; a
    set without `as` drops an old one; clear removes both keys and nothing else."""
    upstreams(home)
    put_state(home, OTHER_KEYS)
    done = run(home, ops_wrap.tf_wrap, {"upstream": "mock", "as": "git", "confirm": True})
    assert done.result["wrapping"] == "mock" and "WRAP SECURITY NOTICE" in done.result["warning"]
    assert state(home) == {**OTHER_KEYS, "passthrough": "mock", "passthroughAs": "git"}
    shown = run(home, ops_wrap.tf_wrap, {}).result
    assert (shown["wrapping"], shown["as"]) == ("mock", "git")
    assert shown["upstreams"] == [{"id": "mock", "transport": "stdio", "enabled": True},
                                  {"id": "off", "transport": "stdio", "enabled": False},
                                  {"id": "far", "transport": "stdio", "enabled": True}]
    run(home, ops_wrap.tf_wrap, {"upstream": "far", "confirm": True})
    assert state(home) == {**OTHER_KEYS, "passthrough": "far"}
    assert run(home, ops_wrap.tf_wrap, {"off": True}).result == {"cleared": True, "was": "far"}
    assert state(home) == OTHER_KEYS
    again = run(home, ops_wrap.tf_wrap, {"off": True})
    assert again.result == {"cleared": False, "was": None} and again.change is None


@pytest.mark.parametrize("policy", ["loosening", "all", "none"])
def test_setting_a_wrap_is_always_put_to_the_user(home: Path, policy: Any) -> None:
    """Whatever gate.confirmManagement says, a set asks, naming the upstream, the lockout and what
    of it lies outside the home; clearing asks only under `all`."""
    upstreams(home)
    plan = ops_wrap.tf_wrap(Env(home), {"upstream": "far", "confirm": True})
    asked = question(policy, "tf_wrap", plan)
    assert asked is not None and plan.always_confirmed
    assert "wrap upstream 'far'" in asked and "tfunnel wrap --off" in asked and "cwd" in asked
    run(home, ops_wrap.tf_wrap, {"upstream": "far", "confirm": True})
    cleared = ops_wrap.tf_wrap(Env(home), {"off": True})
    assert (question(policy, "tf_wrap", cleared) is not None) is (policy == "all")


def test_the_notice_lists_what_lies_outside(home: Path) -> None:
    """The notice names the lockout, the gate, the Claude Code name, and each outside value."""
    upstreams(home)
    text = ops_wrap.wrap_set(Env(home), "far", "git").result["warning"]
    assert text.startswith("WRAP SECURITY NOTICE")
    assert "tfunnel wrap --off" in text and "mcp__git__<tool>" in text and "far_<tool>" in text
    assert f"cwd {str(home.parent)!r} resolves to {os.path.realpath(home.parent)}" in text
    inside = ops_wrap.wrap_set(Env(home), "mock", None).result["warning"]
    assert "nothing of its args, cwd or env lies outside" in inside


# -- clearing ----------------------------------------------------------------------------------

@pytest.mark.parametrize("action", ["disable", "remove"])
def test_tf_mcp_set_clears_the_wrap_of_its_upstream(home: Path, action: str) -> None:
    """Disabling or removing the wrapped upstream clears the wrap in the same change (both files,
    `wrapCleared`); the other state keys stay."""
    upstreams(home)
    put_state(home, {**OTHER_KEYS, "passthrough": "mock", "passthroughAs": "git"})
    plan = run(home, ops_mcp.mcp_set, {"id": "mock", "action": action})
    assert plan.result["wrapCleared"] is True
    assert plan.change is not None
    assert {f.name for f in plan.change.documents} == {"mcp/expose.json", STATE_FILE}
    assert state(home) == OTHER_KEYS


@pytest.mark.parametrize(("upstream", "action"), [("far", "disable"), ("far", "remove"), ("mock", "pin")])
def test_tf_mcp_set_leaves_another_wrap_alone(home: Path, upstream: str, action: str) -> None:
    """Another upstream's change, or an action that keeps the upstream, leaves the wrap as it is."""
    upstreams(home)
    put_state(home, {"passthrough": "mock"})
    plan = run(home, ops_mcp.mcp_set, {"id": upstream, "action": action})
    assert "wrapCleared" not in plan.result and state(home) == {"passthrough": "mock"}


@pytest.mark.parametrize("action", ["disable", "remove"])
def test_cli_mcp_disable_remove_clears_the_wrap(home: Path, action: str) -> None:
    """`tfunnel mcp disable|remove` of the wrapped upstream clears the wrap too, and says so."""
    upstreams(home)
    put_state(home, {**OTHER_KEYS, "passthrough": "mock"})
    done = tfunnel(home, "mcp", action, "mock")
    assert done.returncode == 0, done.stderr
    assert 'wrap cleared (was "mock")' in done.stdout
    assert state(home) == OTHER_KEYS


@pytest.mark.parametrize(("state_doc", "fragment"), [
    ({"passthrough": "gone"}, "mcp/expose.json has no upstream 'gone'"),
    ({"passthrough": "off"}, "upstream 'off' is disabled"),
])
def test_check_reports_a_wrap_of_nothing(home: Path, state_doc: dict[str, Any], fragment: str) -> None:
    """A wrap naming a missing or disabled upstream is an error of `tfunnel check`."""
    upstreams(home)
    put_state(home, state_doc)
    [found] = [p for p in check_home(home) if p.file == STATE_FILE]
    assert found.severity == "error" and fragment in str(found) and "empty surface" in str(found)
    put_state(home, {"passthrough": "mock"})
    assert [p for p in check_home(home) if p.file == STATE_FILE] == []


# -- tf_wrap through the management runner -----------------------------------------------------

ENTRY = ToolEntry("tf_wrap", "tf_wrap", invoke=Invoke("builtin", "tf_wrap"))


async def test_tf_wrap_in_band_asks_and_writes_only_when_confirmed(home: Path) -> None:
    """Without confirm: refused, nobody asked; with confirm: the user is asked the notice's
    substance; a decline writes nothing, an accept writes the wrap and returns the warning."""
    upstreams(home)
    put_state(home, OTHER_KEYS)
    applied: list[list[str]] = []
    management = Management(Env(home), AuditLog(home), lambda files: applied.append(list(files)))
    asked: list[str] = []
    answers = [False, True]

    async def ask(message: str) -> bool | NeedsInput:
        asked.append(message)
        return answers.pop(0)

    with pytest.raises(ToolFailure, match="needs confirm: true"):
        await management.run(ENTRY, {"upstream": "mock"}, "s1", ask)
    assert asked == []
    with pytest.raises(ToolFailure, match="did not confirm"):
        await management.run(ENTRY, {"upstream": "mock", "confirm": True}, "s1", ask)
    assert state(home) == OTHER_KEYS
    result = await management.run(ENTRY, {"upstream": "mock", "confirm": True}, "s1", ask)
    assert not isinstance(result, NeedsInput) and result.structured is not None
    assert result.structured["ok"] is True and result.structured["wrapping"] == "mock"
    assert "WRAP SECURITY NOTICE" in result.structured["warning"]
    assert len(asked) == 2 and all("wrap upstream 'mock'" in text for text in asked)
    assert state(home) == {**OTHER_KEYS, "passthrough": "mock"} and applied == [[STATE_FILE]]
    with pytest.raises(ToolFailure, match="cannot ask"):
        await management.run(ENTRY, {"upstream": "far", "confirm": True}, "s1", None)


# -- the command line --------------------------------------------------------------------------

def test_cli_status_set_off(home: Path) -> None:
    """Status (not active, usage, each upstream enabled or disabled), set (notice listing the
    outside cwd, state written beside the other keys, audited via cli, probe, undo hint), status
    again, --off, --off again: all exit 0."""
    upstreams(home)
    put_state(home, OTHER_KEYS)
    (home / "logs").mkdir(exist_ok=True)
    (home / "logs" / "log.config.json").write_text('{"enabled": true}')
    shown = tfunnel(home, "wrap")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == "wrap: not active" and lines[1].startswith("usage: tfunnel wrap ID [--as NAME]")
    assert "  off  disabled  stdio" in lines and "  mock  enabled  stdio" in lines
    done = tfunnel(home, "wrap", "far", "--as", "git")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.startswith("WRAP SECURITY NOTICE: wrapping upstream 'far'")
    assert f"cwd {str(home.parent)!r}" in out and 'wrap: wrapping "far" as "git"' in out
    assert "probe: speaks MCP 2025-11-25: legacy-era" in out  # connected although its cwd is outside
    assert out.rstrip().endswith("undo: tfunnel wrap --off")
    assert state(home) == {**OTHER_KEYS, "passthrough": "far", "passthroughAs": "git"}
    log = (home / "logs" / "toolfunnel.log.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in log]
    written = [(r.get("file"), r.get("via")) for r in records if r.get("type") == "config"]
    assert written == [(STATE_FILE, "cli")]
    assert tfunnel(home, "wrap").stdout.startswith('wrap: wrapping "far" as "git"\n')
    off = tfunnel(home, "wrap", "--off")
    assert off.returncode == 0 and off.stdout.strip() == 'wrap cleared (was "far")'
    assert state(home) == OTHER_KEYS
    again = tfunnel(home, "wrap", "--off")
    assert again.returncode == 0 and "not active" in again.stdout


@pytest.mark.parametrize(("args", "code", "fragment"), [
    (["nope"], 1, "no upstream 'nope' in mcp/expose.json (configured: mock, off (disabled), far)"),
    (["off"], 1, "upstream 'off' is disabled in mcp/expose.json"),
    (["mock", "--as", "no/slashes"], 2, "argument --as: must start with a letter or digit"),
    (["mock", "--off"], 2, "--off takes no ID"),
    (["--as", "git"], 2, "--as goes with an ID"),
])
def test_cli_refusals(home: Path, args: list[str], code: int, fragment: str) -> None:
    """Unknown or disabled id: exit 1 naming the file and the ids; a bad --as or a mix: usage (2);
    nothing is written."""
    upstreams(home)
    put_state(home, OTHER_KEYS)
    done = tfunnel(home, "wrap", *args)
    assert done.returncode == code and fragment in done.stderr, done.stderr
    assert state(home) == OTHER_KEYS


def test_cli_probe_that_cannot_connect_still_sets(home: Path) -> None:
    """An upstream that exits at once: the probe says why, the wrap is set anyway, exit 0."""
    set_upstreams(home, {"id": "dies", "command": sys.executable, "args": ["-c", "raise SystemExit(3)"]})
    done = tfunnel(home, "wrap", "dies")
    assert done.returncode == 0, done.stderr
    assert "probe: could not connect (" in done.stdout and "the wrap is set anyway" in done.stdout
    assert state(home) == {"passthrough": "dies"}


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_tf_wrap_from_a_real_client(home: Path, mode: str) -> None:
    """Over the HTTP service, from the SDK client in either era: the status, a set without
    confirm refused with nobody asked, then a set the user is asked about (elicitation or
    input_required) and accepts: the wrap is written with the notice as its warning."""
    set_upstreams(home, mock_upstream("mock"))
    asked: list[str] = []

    async def confirm(context: Any, params: Any) -> ElicitResult:
        asked.append(params.message)
        return ElicitResult(action="accept", content={})

    async with http_gateway(home) as gw, \
            Client(f"{gw.url}/mcp", mode=mode, cache=None, elicitation_callback=confirm) as actor:
        shown = body(await tf(actor, "tf_wrap", {}))
        assert shown["wrapping"] is None and [u["id"] for u in shown["upstreams"]] == ["mock"]
        assert "needs confirm: true" in error_text(await tf(actor, "tf_wrap", {"upstream": "mock"}))
        assert asked == []
        done = body(await tf(actor, "tf_wrap", {"upstream": "mock", "confirm": True}))
        assert done["wrapping"] == "mock" and done["warning"].startswith("WRAP SECURITY NOTICE")
    assert len(asked) == 1 and "wrap upstream 'mock'" in asked[0] and "tfunnel wrap --off" in asked[0]
    assert state(home) == {"passthrough": "mock"}
