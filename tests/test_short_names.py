"""Surfaced names that do not repeat the upstream id (`git`'s `git_status` stays `git_status`), and
the fail-closed rule for state entries and hook matchers written for the former long names."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.hooks import set_hooks
from tests.upstreams import mock_upstream, set_upstreams
from tfunnel.config.expose import EXPOSE_FILE, ExposeEntry, parse_expose
from tfunnel.config.model import Register, ToolState, Visibility
from tfunnel.errors import ConfigError
from tfunnel.gate.gated import ToolCall
from tfunnel.gate.manifest import HookManifest, HookSpec
from tfunnel.home.preflight import former_name_findings
from tfunnel.manage.rename import Rename, RenamePlan, expose_renames, plan_renames
from tfunnel.surface.catalog import Catalog
from tfunnel.surface.upstream_tools import assemble, assemble_wrapped
from tfunnel.testing.sdk import sdk_client, text

pytestmark = pytest.mark.timeout(90)


def tools(*names: str) -> list[dict[str, Any]]:
    return [{"name": name, "inputSchema": {"type": "object"}} for name in names]


def named(ready: dict[str, list[dict[str, Any]]], expose: tuple[ExposeEntry, ...] = (),
          taken: set[str] | None = None, name_prefix: str = "auto") -> dict[tuple[str, str], str]:
    return {(t.upstream, t.tool): t.surfaced
            for t in assemble(ready, expose, taken or set(), name_prefix=name_prefix)}  # type: ignore[arg-type]


@pytest.mark.parametrize(("upstream", "tool", "name_prefix", "surfaced"), [
    ("git", "git_status", "auto", "git_status"),
    ("git", "git-status", "auto", "git-status"),
    ("git", "git.status", "auto", "git.status"),
    ("git", "status", "auto", "git_status"),
    ("git", "github_x", "auto", "git_github_x"),  # the id is a prefix of a longer word: no separator
    ("git", "gitstatus", "auto", "git_gitstatus"),
    ("git", "Git_status", "auto", "git_Git_status"),  # case-sensitive
    ("git", "git_", "auto", "git_git_"),  # nothing after the separator
    ("my.srv", "my.srv_read", "auto", "my.srv_read"),
    ("git", "git_status", "always", "git_git_status"),
    ("git", "git-status", "always", "git_git-status"),
    ("git", "status", "always", "git_status"),
], ids=lambda v: str(v))
def test_the_naming_rule(upstream: str, tool: str, name_prefix: str, surfaced: str) -> None:
    """A tool named with its upstream's id and a separator keeps its own name (unless "always")."""
    assert named({upstream: tools(tool)}, name_prefix=name_prefix) == {(upstream, tool): surfaced}


UNNAMED = ExposeEntry("git", "git_status", "git_status", named=False)  # an entry without "as"


@pytest.mark.parametrize(("ready", "expose", "taken", "expected"), [
    # A local tool (or its display name) already answers to the short name.
    ({"git": tools("git_status", "git_log")}, (), {"git_status"},
     {("git", "git_status"): "git_git_status", ("git", "git_log"): "git_log"}),
    # A meta-tool's name.
    ({"toolfunnel": tools("toolfunnel_run_tool")}, (), set(),
     {("toolfunnel", "toolfunnel_run_tool"): "toolfunnel_toolfunnel_run_tool"}),
    # Another tool's expose `as`.
    ({"git": tools("git_status"), "time": tools("now")}, (ExposeEntry("time", "now", "git_status"),), set(),
     {("git", "git_status"): "git_git_status", ("time", "now"): "git_status"}),
    # The same upstream's `status` is `git_status` by the long rule: it keeps it, in either order.
    ({"git": tools("git_status", "status")}, (), set(),
     {("git", "git_status"): "git_git_status", ("git", "status"): "git_status"}),
    ({"git": tools("status", "git_status")}, (), set(),
     {("git", "git_status"): "git_git_status", ("git", "status"): "git_status"}),
    # Two upstreams (`a` and `a_b`) both list `a_b_c`: both fall back, whichever comes first.
    ({"a": tools("a_b_c"), "a_b": tools("a_b_c")}, (), set(),
     {("a", "a_b_c"): "a_a_b_c", ("a_b", "a_b_c"): "a_b_a_b_c"}),
    ({"a_b": tools("a_b_c"), "a": tools("a_b_c")}, (), set(),
     {("a", "a_b_c"): "a_a_b_c", ("a_b", "a_b_c"): "a_b_a_b_c"}),
    # `a`'s `b_c` is `a_b_c` by the long rule; `a_b`'s `a_b_c` would be the same short name.
    ({"a": tools("b_c"), "a_b": tools("a_b_c")}, (), set(),
     {("a", "b_c"): "a_b_c", ("a_b", "a_b_c"): "a_b_a_b_c"}),
    # A curated entry without "as" gets the short default name.
    ({"git": tools("git_status")}, (UNNAMED,), set(), {("git", "git_status"): "git_status"}),
    # ... and, when something else claims that short name, the long form like any other tool.
    ({"git": tools("git_status")}, (UNNAMED,), {"git_status"}, {("git", "git_status"): "git_git_status"}),
    ({"git": tools("git_status"), "time": tools("now")},
     (UNNAMED, ExposeEntry("time", "now", "git_status")), set(),
     {("git", "git_status"): "git_git_status", ("time", "now"): "git_status"}),
    # An `as` that is written is the operator's word: a local tool of that name keeps it, the entry drops.
    ({"git": tools("git_status")}, (ExposeEntry("git", "git_status", "git_status"),), {"git_status"}, {}),
], ids=["local", "meta-tool", "expose-as", "long-name", "long-name-reversed", "two-shorts",
        "two-shorts-reversed", "short-vs-long", "curated-default", "curated-default-contested-local",
        "curated-default-contested-as", "curated-as-taken"])
def test_a_contested_short_name_falls_back_to_the_long_form(
        ready: dict[str, list[dict[str, Any]]], expose: tuple[ExposeEntry, ...], taken: set[str],
        expected: dict[tuple[str, str], str]) -> None:
    """Whatever else claims a short name, the tool keeps `<upstream>_<tool>`; config order never decides."""
    assert named(ready, expose, taken) == expected


def test_adding_an_unrelated_tool_changes_no_name() -> None:
    """A new tool that claims none of the short names leaves every other name as it was."""
    before = named({"git": tools("git_status", "git_log")})
    after = named({"git": tools("git_status", "git_log"), "time": tools("get_time", "time_now")})
    assert {k: v for k, v in after.items() if k[0] == "git"} == before == {
        ("git", "git_status"): "git_status", ("git", "git_log"): "git_log"}
    assert after[("time", "time_now")] == "time_now"


def test_a_short_named_tool_remembers_its_long_name() -> None:
    """`former` is the other form of a tool's default name, when it has one no other tool is under."""
    got = {t.tool: t.former for t in assemble({"git": tools("git_status", "status", "git_log")}, (), set())}
    assert got == {"git_status": None, "status": None, "git_log": "git_git_log"}
    # Under "always" the other way round; never a name another tool is surfaced under.
    always = assemble({"git": tools("git_log", "git_status", "status")}, (), set(), name_prefix="always")
    assert [(t.surfaced, t.former) for t in always] == [
        ("git_git_log", "git_log"), ("git_git_status", None), ("git_status", None)]
    wrapped = assemble_wrapped("git", tools("git_log"), ())
    assert [(t.surfaced, t.wire, t.former) for t in wrapped] == [("git_log", "git_log", "git_git_log")]


def test_name_prefix_is_validated_and_read() -> None:
    """namePrefix: "auto" by default, "always" kept; anything else names file, field and choices."""
    base = {"version": 1, "upstreams": [{"id": "git", "command": "x"}],
            "expose": [{"upstream": "git", "tool": "git_log"}]}
    assert parse_expose(base).name_prefix == "auto"
    assert parse_expose(base).expose[0].as_name == "git_log"
    assert not parse_expose(base).expose[0].named
    for written, named in (("", False), (None, False), ("log", True)):
        entry = {"upstream": "git", "tool": "git_log", "as": written}
        assert parse_expose({**base, "expose": [entry]}).expose[0].named is named
    always = parse_expose({**base, "namePrefix": "always"})
    assert always.name_prefix == "always" and always.expose[0].as_name == "git_git_log"
    with pytest.raises(ConfigError) as caught:
        parse_expose({**base, "namePrefix": "never"})
    message = str(caught.value)
    assert EXPOSE_FILE in message and "namePrefix" in message
    assert '"auto"' in message and '"always"' in message and '"never"' in message


def test_an_expose_writer_keeps_name_prefix(tmp_path: Path) -> None:
    """`tfunnel mcp add` rewrites expose.json with namePrefix as it was."""
    from tests.test_mcp_cmd import read, run

    (tmp_path / "mcp").mkdir()
    (tmp_path / EXPOSE_FILE).write_text(json.dumps({"version": 1, "namePrefix": "always", "upstreams": [],
                                                    "expose": []}))
    assert run(tmp_path, "add", "git", ["uvx", "mcp-server-git"]) == 0
    document = read(tmp_path)
    assert document["namePrefix"] == "always" and [u["id"] for u in document["upstreams"]] == ["git"]


# Fail closed: what was written for `git_git_log` still holds for `git_log`.

def catalog(state: dict[str, Visibility]) -> Catalog:
    upstream = assemble({"git": tools("git_log", "git_status")}, (), set())
    return Catalog(Register(), ToolState(entries=state), upstream)


@pytest.mark.parametrize(("state", "enabled", "hidden", "hot"), [
    ({"git_git_log": Visibility(enabled=False)}, False, False, False),
    ({"git_git_log": Visibility(enabled=False), "git_log": Visibility(enabled=True)}, False, False, False),
    ({"git_git_log": Visibility(hidden=True)}, True, True, False),
    ({"git_git_log": Visibility(hot=True)}, True, False, True),
    ({"git_git_log": Visibility(hot=True), "git_log": Visibility(hot=False)}, True, False, False),
    ({"git_log": Visibility(enabled=False)}, False, False, False),
    ({}, True, False, False),
], ids=["old-disabled", "old-disabled-new-enabled", "old-hidden", "old-hot", "new-hot-wins", "new-disabled",
        "none"])
def test_a_state_entry_under_the_former_name_still_applies(state: dict[str, Visibility], enabled: bool,
                                                           hidden: bool, hot: bool) -> None:
    """Disabled or hidden by either name is disabled or hidden; the new name's own `hot` wins."""
    vis = catalog(state).visibility("git_log", "upstream")
    assert (vis.enabled, vis.hidden, vis.hot) == (enabled, hidden, hot)
    assert (catalog(state).enabled_upstream("git_log") is not None) is enabled
    # The other tool is untouched by git_log's entries.
    assert catalog(state).visibility("git_status", "upstream").enabled


def test_under_always_a_state_entry_for_the_short_name_still_applies() -> None:
    """Switching to namePrefix "always" does not re-enable a tool disabled under its short name."""
    upstream = assemble({"git": tools("git_log")}, (), set(), name_prefix="always")
    state = ToolState(entries={"git_log": Visibility(enabled=False)})
    assert Catalog(Register(), state, upstream).enabled_upstream("git_git_log") is None
    assert Catalog(Register(), ToolState(), upstream).enabled_upstream("git_git_log") is not None


def test_a_hook_matcher_on_the_former_name_still_matches() -> None:
    """The gate tries a short-named tool's former long name too (and a long-named tool has none)."""
    call = ToolCall("git_log", "git_log", "git_log", {}, upstream="git", former="git_git_log")
    assert call.names() == ("git_log", "mcp__git__git_log", "git_git_log")
    assert ToolCall("git_status", "status", "status", {}, upstream="git").names() == (
        "git_status", "status", "mcp__git__status")


async def test_old_state_and_old_hook_still_hold_end_to_end(home: Path, tmp_path: Path) -> None:
    """Upstream `ping`'s `ping_client` is surfaced as `ping_client`; a disable written for
    `ping_ping_client` keeps it disabled, and a deny hook matching `ping_ping_client` denies it."""
    set_upstreams(home, mock_upstream("ping"))
    state = home / "tools" / "tools.state.json"
    state.write_text(json.dumps({"ping_ping_client": {"enabled": False}}))
    with trio.fail_after(60):
        async with sdk_client(home) as client:
            listed = await client.call_tool("toolfunnel_list_tools", {"limit": 100})
            body = text(listed)
            assert "ping_ping" in body and "ping_client" not in body
            refused = await client.call_tool("toolfunnel_run_tool", {"name": "ping_client", "args": {}})
            assert refused.is_error
    state.write_text("{}")
    marker = tmp_path / "denied"
    script = tmp_path / "deny.py"
    script.write_text(f"import sys, pathlib; pathlib.Path({str(marker)!r}).touch(); "
                      "print('old name still denied', file=sys.stderr); sys.exit(2)\n")
    set_hooks(home, {"matcher": "ping_ping_client", "command": f"{sys.executable} {script}"})
    with trio.fail_after(60):
        async with sdk_client(home) as client:
            denied = await client.call_tool("toolfunnel_run_tool", {"name": "ping_client", "args": {}})
            assert denied.is_error and text(denied) == "old name still denied"
            pong = await client.call_tool("toolfunnel_run_tool", {"name": "ping_ping", "args": {}})
            assert not pong.is_error and text(pong) == "pong"
    assert marker.exists()


def test_check_warns_about_former_names() -> None:
    """State keys and tool-hook matchers under a former long name are warned about, with the fix;
    none under namePrefix "always", and none for names that were never shortened."""
    expose = parse_expose({"upstreams": [{"id": "git", "command": "x"}]})
    state = ToolState(entries={"git_git_log": Visibility(enabled=False),
                               "git_status": Visibility(hidden=True)})
    manifest = HookManifest(Path(), hooks=(HookSpec("deny-log", "PreToolUse", "x", "git_git_log"),
                                           HookSpec("deny-dot", "PreToolUse", "x", r"git_git\.diff"),
                                           HookSpec("other", "PreToolUse", "x", "git_status"),
                                           HookSpec("session", "SessionStart", "x", "git_git_log")))
    warnings = [str(w) for w in former_name_findings(expose, state, manifest).warnings]
    assert len(warnings) == 3
    assert "'git_git_log', the former name of 'git_log'" in warnings[0]
    assert "rename it to 'git_log' (`tfunnel expose name-prefix auto`" in warnings[0]
    assert "`tfunnel expose name-prefix always`" in warnings[0]
    assert "'deny-log'" in warnings[1] and "'git_log'" in warnings[1]
    assert "'deny-dot'" in warnings[2] and "'git.diff'" in warnings[2]
    always = parse_expose({"namePrefix": "always", "upstreams": [{"id": "git", "command": "x"}]})
    assert former_name_findings(always, state, manifest).warnings == []


def test_switching_name_prefix_through_an_expose_edit_moves_state_and_matchers() -> None:
    """expose_renames sees the listed tools a namePrefix switch renames; plan_renames rewrites for them."""
    old = {"version": 1, "upstreams": [{"id": "git", "command": "x"}], "expose": []}
    new = {**old, "namePrefix": "always"}
    displays = {("git", "git_log"): "git_log", ("git", "status"): "status"}
    renames = expose_renames(old, new, set(), displays)
    assert isinstance(renames, list)
    assert [(r.old.surfaced, r.new.surfaced) for r in renames] == [("git_log", "git_git_log")]
    plan = plan_renames(renames, [{"id": "h", "event": "PreToolUse", "matcher": "git_log", "command": "x"}],
                        {"git_log": {"enabled": False}})
    assert isinstance(plan, RenamePlan)
    assert plan.state_doc == {"git_git_log": {"enabled": False}}
    # The matcher still matches the tool's own upstream name `git_log`: untouched, it keeps firing.
    assert plan.manifest_rows[0]["matcher"] == "git_log"
    back = expose_renames(new, old, set(), displays)
    assert isinstance(back, list) and [(r.old.surfaced, r.new.surfaced) for r in back] == [
        ("git_git_log", "git_log")]
    assert all(isinstance(r, Rename) for r in back)



def test_tfunnel_check_reports_former_names(home: Path) -> None:
    """`tfunnel check` carries the warnings: a state key and a deny matcher on `ping_ping_client`."""
    from tfunnel.home.check import check_home

    set_upstreams(home, mock_upstream("ping"))
    (home / "tools" / "tools.state.json").write_text(json.dumps({"ping_ping_client": {"enabled": False}}))
    set_hooks(home, {"id": "deny-ping", "matcher": "ping_ping_client", "command": "true"})
    found = [str(p) for p in check_home(home) if "former name of 'ping_client'" in str(p)]
    assert len(found) == 2 and "ping_ping_client" in found[0] and "deny-ping" in found[1]


async def test_expose_name_prefix_rewrites_state_and_matchers_both_ways(home: Path) -> None:
    """`tfunnel expose name-prefix auto` on a home written with long names moves `ping_ping_client`'s
    state and exact matcher to `ping_client` (the tools it knows: those tool-approvals.json saw);
    `always` moves them back; setting the same is no change; `ping_ping` (tool `ping`) stays."""
    from tests.test_cli import tfunnel

    set_upstreams(home, mock_upstream("ping"))
    with trio.fail_after(60):
        async with sdk_client(home) as client:  # a gateway records the upstream's tools on first sight
            await client.list_tools()
    state_path, manifest_path = home / "tools" / "tools.state.json", home / "hooks" / "hooks.manifest.json"
    state_path.write_text(json.dumps({"ping_ping_client": {"enabled": False}, "ping_ping": {"hot": True}}))
    set_hooks(home, {"id": "deny-ping", "matcher": "ping_ping_client", "command": "true"})

    def read() -> tuple[Any, Any, Any]:
        expose = json.loads((home / EXPOSE_FILE).read_text())
        matchers = [h["matcher"] for h in json.loads(manifest_path.read_text())["hooks"]]
        return expose.get("namePrefix"), json.loads(state_path.read_text()), matchers

    done = tfunnel(home, "expose", "name-prefix", "auto")
    assert done.returncode == 0, done.stderr
    assert "namePrefix: auto" in done.stdout
    assert read() == ("auto", {"ping_client": {"enabled": False}, "ping_ping": {"hot": True}},
                      ["ping_client"])
    again = tfunnel(home, "expose", "name-prefix", "auto")
    assert again.returncode == 0 and "(unchanged)" in again.stdout
    back = tfunnel(home, "expose", "name-prefix", "always")
    assert back.returncode == 0, back.stderr
    # The matcher `ping_client` still fires through the tool's own upstream name: it is left as it is.
    assert read() == ("always", {"ping_ping_client": {"enabled": False}, "ping_ping": {"hot": True}},
                      ["ping_client"])
    assert tfunnel(home, "expose", "name-prefix", "sometimes").returncode == 2
