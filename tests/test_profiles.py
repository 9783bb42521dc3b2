"""Per-client profiles: the format, the choice (pure), and what a profile's view of the catalog
lists and refuses (every path reads visibility through `Catalog.view`)."""

from __future__ import annotations

from typing import Any

import pytest

from tfunnel.config.model import Invoke, Profile, ProfileMatch, Register, ToolEntry, ToolState, Visibility
from tfunnel.config.profiles import parse_profiles
from tfunnel.config.validate import Fields
from tfunnel.errors import ConfigProblem
from tfunnel.surface import meta, profiles
from tfunnel.surface.catalog import Catalog
from tfunnel.surface.profiles import Chosen, Who
from tfunnel.surface.upstream_items import Extras
from tfunnel.surface.upstream_tools import assemble

META = list(meta.DEFINITIONS)
SHELL = Invoke("shell", "true")
REGISTER = Register(tools=(
    ToolEntry("echo", "Echo", "Returns its arguments.", "demo", invoke=SHELL),
    ToolEntry("hash", "Hash", "Digests a text.", "crypto", invoke=SHELL),
    ToolEntry("tf_add_tool", "Add a tool", "Adds a register tool.", "manage", invoke=Invoke("builtin", "x")),
))
READY = {"time": [{"name": "get_current_time", "inputSchema": {"type": "object"}}],
         "git": [{"name": "git_status", "inputSchema": {"type": "object"}},
                 {"name": "git_log", "inputSchema": {"type": "object"}}]}
EXTRAS = Extras.assemble({"time": [{"name": "zones"}], "git": [{"name": "review"}]},
                         {"time": [{"uri": "time://zones", "name": "zones"}],
                          "git": [{"uri": "git://head", "name": "head"}]},
                         {}, ["time", "git"])


def catalog(**entries: Visibility) -> Catalog:
    tools = assemble(READY, (), {t.id for t in REGISTER.tools} | {t.name for t in REGISTER.tools})
    return Catalog(REGISTER, ToolState(entries=entries), tools, EXTRAS)


def parsed(raw: Any) -> tuple[tuple[Profile, ...], list[ConfigProblem]]:
    problems: list[ConfigProblem] = []
    return parse_profiles({"profiles": raw}, Fields("toolfunnel.json", problems)), problems


# --------------------------------------------------------------------------- the format


def test_a_full_profile_parses() -> None:
    found, problems = parsed([{"name": "ops", "match": {"clientName": "ops-*", "tokenScope": "mcp:ops"},
                               "mode": "auto", "tools": ["time_*"], "upstreams": ["time"],
                               "prompts": [], "alwaysLoad": ["time_get_current_time"]}])
    assert problems == []
    assert found == (Profile("ops", ProfileMatch("ops-*", None, "mcp:ops"), "auto", ("time_*",), ("time",),
                             (), ("time_get_current_time",)),)


@pytest.mark.parametrize(("raw", "field", "words"), [
    pytest.param({"profiles": 1}, "profiles", "array of profile objects", id="not-a-list"),
    pytest.param([3], None, "must be an object", id="entry-not-object"),
    pytest.param([{"match": {"clientName": "x"}}], "name", "is required", id="no-name"),
    pytest.param([{"name": "a b"}], "name", "letters, digits", id="bad-name"),
    pytest.param([{"name": "a", "tool": ["x"]}], "tool", "not a known field; did you mean 'tools'",
                 id="typo"),
    pytest.param([{"name": "a", "mode": "slim"}], "mode", "lean, full, auto", id="bad-mode"),
    pytest.param([{"name": "a", "tools": "time_*"}], "tools", "array of non-empty strings",
                 id="tools-string"),
    pytest.param([{"name": "a", "upstreams": [""]}], "upstreams", "only non-empty strings", id="empty-glob"),
    pytest.param([{"name": "a", "match": {}}], "match", "at least one of", id="empty-match"),
    pytest.param([{"name": "a", "match": {"client": "x"}}], "match.client", "not a known field",
                 id="match-typo"),
    pytest.param([{"name": "a", "match": {"clientName": 3}}], "match.clientName", "non-empty string",
                 id="match-not-string"),
    pytest.param([{"name": "a"}, {"name": "a"}], "name", "already defined", id="duplicate"),
])
def test_a_bad_profile_is_a_problem_naming_its_field(raw: Any, field: str | None, words: str) -> None:
    """A profile narrows what a client may do: a typo is refused, never ignored (which would
    widen the surface)."""
    if isinstance(raw, dict):
        problems: list[ConfigProblem] = []
        parse_profiles(raw, Fields("toolfunnel.json", problems))
    else:
        _, problems = parsed(raw)
    assert problems, "expected a problem"
    assert any(p.field == field and words in p.message for p in problems), [str(p) for p in problems]
    assert all(p.severity == "error" for p in problems)


# --------------------------------------------------------------------------- choosing

NARROW = Profile("narrow", ProfileMatch(client_name="Narrow-*"), tools=("time_*",))
SCOPED = Profile("scoped", ProfileMatch(client_name="*", token_scope="mcp:ops"), upstreams=("git",))
AUTO = Profile("auto", ProfileMatch(client_name="*"), mode="auto")
FALLBACK = Profile("default", mode="full")


@pytest.mark.parametrize(("defined", "who", "forced", "name", "full", "why"), [
    pytest.param((), Who("anyone"), None, "default", False, "default", id="nothing-defined"),
    pytest.param((NARROW,), Who("narrow-cli"), None, "narrow", False, "clientName", id="glob-any-case"),
    pytest.param((NARROW,), Who("wide"), None, "default", False, "default", id="no-match-builtin"),
    pytest.param((NARROW, FALLBACK), Who("wide"), None, "default", True, "default", id="named-default"),
    pytest.param((SCOPED, NARROW), Who("narrow-x", scopes=frozenset({"mcp:ops"})), None, "scoped", False,
                 "clientName", id="first-match-wins"),
    pytest.param((SCOPED, NARROW), Who("narrow-x"), None, "narrow", False, "clientName",
                 id="every-test-must-hold"),
    pytest.param((AUTO,), Who("claude-code"), None, "auto", True, "clientName", id="auto-native-search"),
    pytest.param((AUTO,), Who("Visual Studio Code"), None, "auto", True, "clientName", id="auto-vscode"),
    pytest.param((AUTO,), Who("some-chat-app"), None, "auto", False, "clientName", id="auto-lean"),
    pytest.param((NARROW,), Who("wide"), "narrow", "narrow", False, "--profile", id="forced"),
])
def test_choose(defined: tuple[Profile, ...], who: Who, forced: str | None, name: str, full: bool,
                why: str) -> None:
    chosen = profiles.choose(defined, who, forced)
    assert (chosen.name, chosen.full, chosen.why) == (name, full, why)


def test_a_forced_profile_that_is_gone_allows_nothing() -> None:
    """`--profile ops` after `ops` was edited out: the meta-tools only, never the whole surface."""
    view = catalog().view(profiles.choose((NARROW,), Who("narrow-x"), "ops"))
    assert [t["name"] for t in view.top_level(meta.DEFINITIONS)] == META
    assert view.briefs() == []
    assert view.prompts() == [] and view.resources() == []


def test_a_token_profile_comes_before_a_client_name_profile() -> None:
    """A client's name is its own claim; its token is proven: a profile the token matches wins
    over one the client's chosen name matches, whatever their order in the file."""
    editor = Profile("editor", ProfileMatch(client_name="vscode*"), mode="full")
    ops = Profile("ops", ProfileMatch(token_scope="mcp:ops"), upstreams=("time",))
    who = Who("vscode", scopes=frozenset({"mcp:ops"}))
    assert profiles.choose((editor, ops), who).name == "ops"
    assert profiles.choose((editor, ops), Who("vscode")).name == "editor"


def test_a_token_subject_glob() -> None:
    ops = Profile("ops", ProfileMatch(token_subject="svc-*"))
    assert profiles.choose((ops,), Who("x", subject="svc-deploy")).name == "ops"
    assert profiles.choose((ops,), Who("x", subject=None)).name == "default"


# --------------------------------------------------------------------------- the view


def chosen(**fields: Any) -> Chosen:
    mode = fields.pop("mode", "lean")
    profile = Profile("p", **fields, mode=mode)
    return Chosen(profile, full=mode == "full")


def listed(view: Catalog) -> list[str]:
    return [t["name"] for t in view.top_level(meta.DEFINITIONS)]


def briefed(view: Catalog) -> list[str]:
    return [b["id"] for b in view.briefs()]


ALL = ["echo", "hash", "tf_add_tool", "time_get_current_time", "git_status", "git_log"]


@pytest.mark.parametrize(("profile", "top", "briefs"), [
    pytest.param(chosen(), META, ALL, id="neutral"),
    pytest.param(chosen(tools=("time_*", "echo")), META, ["echo", "time_get_current_time"], id="tools"),
    pytest.param(chosen(tools=("Hash",)), META, ["hash"], id="local-by-display-name"),
    pytest.param(chosen(upstreams=("git",)), META, ["echo", "hash", "git_status", "git_log"],
                 id="upstreams-leave-management-out"),
    pytest.param(chosen(upstreams=("git",), tools=("tf_*", "echo")), META, ["echo", "tf_add_tool"],
                 id="management-named-by-tools"),
    pytest.param(chosen(prompts=()), META, ["echo", "hash", "time_get_current_time", "git_status", "git_log"],
                 id="any-restriction-leaves-management-out"),
    pytest.param(chosen(upstreams=("git",), tools=("time_*",)), META, [], id="both-must-allow"),
    pytest.param(chosen(mode="full"), META + ALL, ALL, id="full"),
    pytest.param(chosen(mode="full", tools=("git_*",)), [*META, "git_status", "git_log"],
                 ["git_status", "git_log"], id="full-restricted"),
    pytest.param(chosen(always_load=("git_log", "echo")), [*META, "echo", "git_log"], ALL,
                 id="always-load"),
    pytest.param(chosen(tools=("hash",), always_load=("echo",)), META, ["hash"],
                 id="always-load-within-allowed"),
])
def test_a_view_lists(profile: Chosen, top: list[str], briefs: list[str]) -> None:
    view = catalog().view(profile)
    assert listed(view) == top
    assert briefed(view) == briefs


def test_a_view_refuses_what_it_leaves_out_on_every_lookup() -> None:
    view = catalog(**{"git_log": Visibility(hot=True), "hash": Visibility(hot=True)}).view(
        chosen(tools=("time_*",)))
    for name in ("git_log", "hash", "Hash"):
        assert view.find_local(name) is None and view.find_upstream(name) is None
        assert view.enabled_local(name) is None and view.enabled_upstream(name) is None
        assert view.hot_local(name) is None and view.direct_upstream(name) is None
        assert view.outside_profile(name)
    assert view.find_upstream("time_get_current_time") is not None
    assert not view.outside_profile("time_get_current_time")
    assert not view.outside_profile("no_such_tool")


def test_full_mode_keeps_what_the_state_disabled() -> None:
    view = catalog(hash=Visibility(enabled=False)).view(chosen(mode="full"))
    assert "hash" not in listed(view) and view.enabled_local("hash") is None
    assert not view.outside_profile("hash")  # disabled by the state, not by the profile


def test_prompts_and_resources_follow_the_profile() -> None:
    view = catalog().view(chosen(upstreams=("time",)))
    assert [p.surfaced for p in view.prompts()] == ["time_zones"]
    assert [r.surfaced for r in view.resources()] == ["time://zones"]
    assert view.prompt("git_review") == "no prompt 'git_review'"
    assert view.resource("git://head") == "no resource 'git://head'"
    only = catalog().view(chosen(prompts=("git_*",)))
    assert [p.surfaced for p in only.prompts()] == ["git_review"]
    assert len(only.resources()) == 2  # `prompts` narrows prompts alone


def test_views_are_built_once_per_profile_and_neutral_is_the_catalog() -> None:
    whole = catalog()
    assert whole.view(None) is whole and whole.view(profiles.UNRESTRICTED) is whole
    narrow = chosen(tools=("echo",))
    assert whole.view(narrow) is whole.view(narrow)
    assert whole.view(narrow).view(chosen(mode="full")) is whole.view(narrow)  # a view is final


def test_check_warns_of_a_profile_upstream_that_matches_nothing(home: Any) -> None:
    import json

    from tests.upstreams import mock_upstream, set_upstreams
    from tfunnel.home.check import check_home

    set_upstreams(home, mock_upstream("time"))
    settings = json.loads((home / "toolfunnel.json").read_text())
    (home / "toolfunnel.json").write_text(json.dumps({**settings, "profiles": [
        {"name": "p", "upstreams": ["time", "tiem", "t*"]}]}))
    found = [p for p in check_home(home) if p.field == "upstreams"]
    assert [(p.severity, p.entry) for p in found] == [("warning", "profiles[0] ('p')")]
    assert "'tiem' matches no upstream" in found[0].message and "configured: time" in found[0].message


def test_a_view_routes_resources_over_its_own_upstreams_only() -> None:
    """A URI two upstreams list is not ambiguous to a profile that sees one of them, and the
    answer never names the other's resources."""
    both = Extras.assemble({}, {"time": [{"uri": "file:///a", "name": "a"}],
                                "git": [{"uri": "file:///a", "name": "a"}]}, {}, ["time", "git"])
    whole = Catalog(REGISTER, ToolState(), (), both)
    assert "several upstreams" in str(whole.resource("file:///a"))
    found = whole.view(chosen(upstreams=("time",))).resource("file:///a")
    assert not isinstance(found, str) and found.upstream == "time"
    hidden = whole.view(chosen(upstreams=("other",))).resource("file:///a")
    assert hidden == "no resource 'file:///a'"


def test_a_session_hears_log_messages_of_its_profiles_upstreams_only() -> None:
    from tfunnel.protocol.jsonrpc import Notification
    from tfunnel.surface.notices import Notices

    heard: list[dict[str, Any]] = []
    notices = Notices()
    notices.set_level("s", heard.append, "debug", lambda upstream: upstream == "time")
    for upstream in ("time", "git"):
        notices.upstream_notice(upstream, Notification("notifications/message",
                                                       {"level": "info", "logger": "x", "data": upstream}))
    assert [m["params"]["data"] for m in heard] == ["time"]


async def test_a_hidden_tool_of_an_unready_upstream_is_unknown_at_once(tmp_path: Any) -> None:
    """A client is neither kept waiting for nor told of an upstream its profile leaves out."""
    from tfunnel.errors import ProtocolError
    from tfunnel.observe.audit import AuditLog
    from tfunnel.surface.context import CallContext
    from tfunnel.surface.service import Surface
    from tfunnel.testing.fakes import NoUpstreams

    class Starting(NoUpstreams):
        waited: list[str] = []

        def unready_owner(self, name: str) -> str | None:
            return "secret" if name.startswith("secret_") else None

        async def wait_ready(self, upstream_id: str) -> str | None:
            self.waited.append(upstream_id)
            return f"upstream {upstream_id!r} is restarting"

    upstreams = Starting()
    surface = Surface(lambda: catalog(), lambda: None, None, upstreams, AuditLog(tmp_path))  # type: ignore[arg-type,return-value]
    narrow = CallContext(profile=chosen(upstreams=("time",)))
    with pytest.raises(ProtocolError, match="Unknown tool: secret_x"):
        await surface.call("secret_x", {}, narrow)
    refused = await surface.call("toolfunnel_run_tool", {"name": "secret_x"}, narrow)
    assert "no tool named 'secret_x'" in str(refused.to_wire())  # type: ignore[union-attr]
    assert upstreams.waited == []
    told = await surface.call("toolfunnel_run_tool", {"name": "secret_x"}, CallContext())
    assert "restarting" in str(told.to_wire())  # type: ignore[union-attr]
    assert upstreams.waited == ["secret"]
