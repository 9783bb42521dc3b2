"""`mcp/expose.json`: every validation rule, defaults, ToolFunnel compatibility, restart semantics."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tfunnel.config.expose import (
    EXPOSE_FILE,
    ExposeConfig,
    ExposeEntry,
    RestartPolicy,
    UpstreamSpec,
    load_expose,
    parse_expose,
)
from tfunnel.errors import ConfigError, ConfigProblem

FIXTURE_HOME = Path(__file__).resolve().parent / "fixtures" / "toolfunnel-home"
TIME = {"id": "time", "command": "mcp-server-time"}


def put(home: Path, value: Any) -> Path:
    """Write `value` (JSON, or raw text when a str) as the home's expose.json."""
    path = home / EXPOSE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(value if isinstance(value, str) else json.dumps(value), encoding="utf-8")
    return path


def problems_for(home: Path, value: Any) -> list[ConfigProblem]:
    put(home, value)
    with pytest.raises(ConfigError) as exc:
        load_expose(home)
    assert exc.value.problems, "ConfigError without problems"
    return exc.value.problems


def doc(*upstreams: dict[str, Any], expose: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
    return {"version": 1, "upstreams": list(upstreams), "expose": list(expose)}


# --------------------------------------------------------------------------- defaults


def test_missing_file_is_an_empty_config(tmp_path: Path) -> None:
    """No expose.json means no upstreams and no expose entries."""
    assert load_expose(tmp_path) == ExposeConfig()


def test_minimal_rows_take_every_default(tmp_path: Path) -> None:
    """A stdio upstream with only id and command, and an expose row with upstream and tool."""
    put(tmp_path, doc(TIME, expose=({"upstream": "time", "tool": "now"},)))
    config = load_expose(tmp_path)
    assert config.upstreams == (UpstreamSpec(id="time", command="mcp-server-time"),)
    spec = config.upstreams[0]
    assert (spec.transport, spec.args, spec.env, spec.cwd, spec.enabled) == ("stdio", (), {}, None, True)
    assert (spec.timeout_ms, spec.request_timeout_ms) == (120000, 10000)
    assert spec.restart == RestartPolicy(5, 60.0, 300.0, 1.0, 30.0)
    assert config.expose == (ExposeEntry("time", "now", "time_now", "", True, named=False),)


def test_every_field_is_read(tmp_path: Path) -> None:
    """Each documented field lands in its dataclass attribute."""
    row = {
        "id": "git", "transport": "stdio", "command": "uvx", "args": ["mcp-server-git", "--repository", "."],
        "env": {"GIT_PAGER": "cat"}, "cwd": "repos", "enabled": False, "description": "git tools",
        "timeoutMs": 5000, "requestTimeoutMs": 700, "legacyPin": True, "allowOutsidePaths": True,
        "allowCodeLoadingEnv": True, "strictApproval": True, "reconnectAt": "2026-01-01T00:00:00Z",
        "restart": {"maxRestarts": 0, "windowS": 10, "permanentFailureS": 20.5, "initialBackoffS": 0.5,
                    "maxBackoffS": 4},
    }
    put(tmp_path, doc(row, expose=({"upstream": "git", "tool": "git_log", "as": "log", "category": "vcs",
                                    "enabled": False},)))
    config = load_expose(tmp_path)
    assert config.upstream("git") == UpstreamSpec(
        id="git", command="uvx", args=("mcp-server-git", "--repository", "."), env={"GIT_PAGER": "cat"},
        cwd="repos", enabled=False, description="git tools", timeout_ms=5000, request_timeout_ms=700,
        legacy_pin=True, allow_outside_paths=True, allow_code_loading_env=True, strict_approval=True,
        reconnect_at="2026-01-01T00:00:00Z", restart=RestartPolicy(0, 10.0, 20.5, 0.5, 4.0),
    )
    assert config.expose == (ExposeEntry("git", "git_log", "log", "vcs", False),)
    assert config.upstream("nope") is None


@pytest.mark.parametrize(
    ("row", "transport", "url"),
    [
        pytest.param({"id": "r", "transport": "http", "url": "https://mcp.example/mcp",
                      "headers": {"Authorization": "Bearer x"}}, "http", "https://mcp.example/mcp",
                     id="http"),
        pytest.param({"id": "r", "transport": "http", "url": "http://127.0.0.1:8000/mcp"}, "http",
                     "http://127.0.0.1:8000/mcp", id="http-loopback"),
        pytest.param({"id": "r", "transport": "websocket", "url": "wss://mcp.example/ws"}, "websocket",
                     "wss://mcp.example/ws", id="wss"),
        pytest.param({"id": "r", "transport": "websocket", "url": "ws://localhost:9/"}, "websocket",
                     "ws://localhost:9/", id="ws"),
    ],
)
def test_remote_upstreams_need_no_command(tmp_path: Path, row: dict[str, Any], transport: str,
                                          url: str) -> None:
    """http/websocket upstreams are valid with a URL of their scheme and no command."""
    put(tmp_path, doc(row))
    spec = load_expose(tmp_path).upstreams[0]
    assert (spec.transport, spec.url, spec.command) == (transport, url, "")
    assert spec.headers == row.get("headers", {})


# --------------------------------------------------------------------------- validation

U0 = "upstreams[0] (id 'time')"
E0 = "expose[0] ('time', 'now')"


def up(**fields: Any) -> dict[str, Any]:
    """The `time` upstream with some fields replaced or added."""
    return {**TIME, **fields}


def one(**fields: Any) -> dict[str, Any]:
    """A document with the `time` upstream plus `fields` on it."""
    return doc(up(**fields))


def exp(**fields: Any) -> dict[str, Any]:
    """A document with the `time` upstream and one expose row (`time`, `now`) plus `fields`."""
    return doc(TIME, expose=({"upstream": "time", "tool": "now", **fields},))


INVALID = [
    # top level
    pytest.param("[]", None, None, id="top-array"),
    pytest.param("{not json", None, None, id="bad-json"),
    pytest.param({"version": "1"}, None, "version", id="version-string"),
    pytest.param({"version": True}, None, "version", id="version-bool"),
    pytest.param({"upstreams": {}}, None, "upstreams", id="upstreams-object"),
    pytest.param({"expose": "x"}, None, "expose", id="expose-string"),
    pytest.param(doc("time"), "upstreams[0]", None, id="upstream-not-object"),  # type: ignore[arg-type]
    # id
    pytest.param(doc({"command": "x"}), "upstreams[0]", "id", id="id-missing"),
    pytest.param(doc({"id": "", "command": "x"}), "upstreams[0]", "id", id="id-empty"),
    pytest.param(doc({"id": 7, "command": "x"}), "upstreams[0]", "id", id="id-number"),
    pytest.param(doc({"id": "a b", "command": "x"}), "upstreams[0] (id 'a b')", "id", id="id-space"),
    pytest.param(doc({"id": "-x", "command": "x"}), "upstreams[0] (id '-x')", "id", id="id-leading-dash"),
    pytest.param(doc({"id": "a/b", "command": "x"}), "upstreams[0] (id 'a/b')", "id", id="id-slash"),
    pytest.param(doc({"id": "ü", "command": "x"}), "upstreams[0] (id 'ü')", "id", id="id-non-ascii"),
    pytest.param(doc(TIME, TIME), "upstreams[1] (id 'time')", "id", id="id-duplicate"),
    # transport, command, url
    pytest.param(one(transport="grpc"), U0, "transport", id="transport-unknown"),
    pytest.param(one(transport=None), U0, "transport", id="transport-null"),
    pytest.param(doc({"id": "time"}), U0, "command", id="stdio-command-missing"),
    pytest.param(one(command=""), U0, "command", id="stdio-command-empty"),
    pytest.param(one(command=["node"]), U0, "command", id="command-array"),
    pytest.param(one(transport="http"), U0, "url", id="http-url-missing"),
    pytest.param(one(transport="http", url="ws://h/"), U0, "url", id="http-url-ws"),
    pytest.param(one(transport="http", url="http://"), U0, "url", id="http-url-no-host"),
    pytest.param(one(transport="http", url="mcp.example"), U0, "url", id="http-url-no-scheme"),
    pytest.param(one(transport="websocket", url="https://h/"), U0, "url", id="ws-url-http"),
    pytest.param(one(transport="websocket"), U0, "url", id="ws-url-missing"),
    pytest.param(one(url=5), U0, "url", id="url-number"),
    # args, env, headers, cwd
    pytest.param(one(args="--x"), U0, "args", id="args-string"),
    pytest.param(one(args=["ok", 5]), U0, "args[1]", id="args-element-number"),
    pytest.param(one(args=[None]), U0, "args[0]", id="args-element-null"),
    pytest.param(one(env=["A=B"]), U0, "env", id="env-array"),
    pytest.param(one(env={"PORT": 8080}), U0, "env.PORT", id="env-value-number"),
    pytest.param(one(env={"A=B": "x"}), U0, "env.A=B", id="env-name-equals"),
    pytest.param(one(env={"": "x"}), U0, "env.", id="env-name-empty"),
    pytest.param(one(env={"A": "x\u0000y"}), U0, "env.A", id="env-value-nul"),
    pytest.param(one(headers="x"), U0, "headers", id="headers-string"),
    pytest.param(one(headers={"X-Key": True}), U0, "headers.X-Key", id="headers-value-bool"),
    pytest.param(one(cwd=5), U0, "cwd", id="cwd-number"),
    pytest.param(one(cwd=["a"]), U0, "cwd", id="cwd-array"),
    # booleans
    pytest.param(one(enabled="yes"), U0, "enabled", id="enabled-string"),
    pytest.param(one(legacyPin=1), U0, "legacyPin", id="legacyPin-number"),
    pytest.param(one(modernOnly="true"), U0, "modernOnly", id="modernOnly-string"),
    pytest.param(one(allowOutsidePaths=None), U0, "allowOutsidePaths", id="allowOutsidePaths-null"),
    pytest.param(one(allowCodeLoadingEnv=0), U0, "allowCodeLoadingEnv", id="allowCodeLoadingEnv-zero"),
    pytest.param(one(strictApproval="no"), U0, "strictApproval", id="strictApproval-string"),
    pytest.param(one(legacyPin=True, modernOnly=True), U0, "modernOnly", id="legacyPin-and-modernOnly"),
    # strings, numbers
    pytest.param(one(description=3), U0, "description", id="description-number"),
    pytest.param(one(reconnectAt=3), U0, "reconnectAt", id="reconnectAt-number"),
    pytest.param(one(timeoutMs=0), U0, "timeoutMs", id="timeoutMs-zero"),
    pytest.param(one(timeoutMs=-5), U0, "timeoutMs", id="timeoutMs-negative"),
    pytest.param(one(timeoutMs=1.5), U0, "timeoutMs", id="timeoutMs-float"),
    pytest.param(one(timeoutMs="100"), U0, "timeoutMs", id="timeoutMs-string"),
    pytest.param(one(timeoutMs=True), U0, "timeoutMs", id="timeoutMs-bool"),
    pytest.param(one(requestTimeoutMs=0), U0, "requestTimeoutMs", id="requestTimeoutMs-zero"),
    pytest.param(one(requestTimeoutMs=None), U0, "requestTimeoutMs", id="requestTimeoutMs-null"),
    # restart
    pytest.param(one(restart=5), U0, "restart", id="restart-number"),
    pytest.param(one(restart={"maxRestarts": -1}), U0, "restart.maxRestarts", id="maxRestarts-negative"),
    pytest.param(one(restart={"maxRestarts": 1.5}), U0, "restart.maxRestarts", id="maxRestarts-float"),
    pytest.param(one(restart={"maxRestarts": True}), U0, "restart.maxRestarts", id="maxRestarts-bool"),
    pytest.param(one(restart={"windowS": 0}), U0, "restart.windowS", id="windowS-zero"),
    pytest.param(one(restart={"windowS": "60"}), U0, "restart.windowS", id="windowS-string"),
    pytest.param(one(restart={"permanentFailureS": -1}), U0, "restart.permanentFailureS",
                 id="permanentFailureS-negative"),
    pytest.param(one(restart={"initialBackoffS": 0}), U0, "restart.initialBackoffS",
                 id="initialBackoffS-zero"),
    pytest.param(one(restart={"maxBackoffS": False}), U0, "restart.maxBackoffS", id="maxBackoffS-bool"),
    pytest.param(one(restart={"initialBackoffS": 10, "maxBackoffS": 5}), U0, "restart.initialBackoffS",
                 id="initialBackoff-over-max"),
    # expose entries
    pytest.param(doc(TIME, expose=(["time", "now"],)), "expose[0]", None,  # type: ignore[arg-type]
                 id="expose-not-object"),
    pytest.param(doc(TIME, expose=({"tool": "now"},)), "expose[0]", "upstream", id="expose-upstream-missing"),
    pytest.param(doc(TIME, expose=({"upstream": "nope", "tool": "now"},)), "expose[0] ('nope', 'now')",
                 "upstream", id="expose-upstream-unknown"),
    pytest.param(doc(TIME, expose=({"upstream": "time"},)), "expose[0]", "tool", id="expose-tool-missing"),
    pytest.param(doc(TIME, expose=({"upstream": "time", "tool": ""},)), "expose[0] ('time', '')", "tool",
                 id="expose-tool-empty"),
    pytest.param(doc(TIME, expose=({"upstream": "time", "tool": 3},)), "expose[0]", "tool",
                 id="expose-tool-number"),
    pytest.param(exp(**{"as": "a b"}), E0, "as", id="as-space"),
    pytest.param(exp(**{"as": "x" * 129}), E0, "as", id="as-too-long"),
    pytest.param(exp(**{"as": "a/b"}), E0, "as", id="as-slash"),
    pytest.param(exp(**{"as": 5}), E0, "as", id="as-number"),
    pytest.param(exp(category=1), E0, "category", id="category-number"),
    pytest.param(exp(enabled="no"), E0, "enabled", id="expose-enabled-string"),
    pytest.param(doc(TIME, expose=({"upstream": "time", "tool": "now"}, {"upstream": "time", "tool": "now"})),
                 "expose[1] ('time', 'now')", "tool", id="expose-duplicate-key"),
    pytest.param(doc(TIME, expose=({"upstream": "time", "tool": "now", "as": "x"},
                                   {"upstream": "time", "tool": "then", "as": "x"})),
                 "expose[1] ('time', 'then')", "as", id="expose-duplicate-as"),
    pytest.param(doc({"id": "a", "command": "x"}, {"id": "a_b", "command": "x"},
                     expose=({"upstream": "a", "tool": "b_c"}, {"upstream": "a_b", "tool": "c"})),
                 "expose[1] ('a_b', 'c')", "as", id="expose-duplicate-default-as"),
]


@pytest.mark.parametrize(("value", "entry", "field"), INVALID)
def test_invalid_values_are_named(tmp_path: Path, value: Any, entry: str | None, field: str | None) -> None:
    """Each rule's problem names the file, the entry and the field."""
    problems = problems_for(tmp_path, value)
    assert all(p.file == EXPOSE_FILE for p in problems)
    assert (entry, field) in {(p.entry, p.field) for p in problems}, [str(p) for p in problems]


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    """Problems in several rows and fields come back together, not one at a time."""
    value = doc({"id": "a b", "command": 5}, {"id": "ok", "command": "x", "timeoutMs": 0},
                expose=({"upstream": "nope", "tool": "t"},))
    problems = problems_for(tmp_path, value)
    assert {(p.entry, p.field) for p in problems} == {
        ("upstreams[0] (id 'a b')", "id"), ("upstreams[0] (id 'a b')", "command"),
        ("upstreams[1] (id 'ok')", "timeoutMs"), ("expose[0] ('nope', 't')", "upstream"),
    }


def test_problem_text_names_file_entry_and_field(tmp_path: Path) -> None:
    """The rendered problem reads file: entry: field: message."""
    [problem] = problems_for(tmp_path, doc({"id": "git", "command": "x", "args": [1]}))
    assert str(problem) == ("mcp/expose.json: upstreams[0] (id 'git'): field 'args[0]': "
                            "must be a string, got 1")


def test_expose_row_of_a_broken_upstream_is_not_also_an_error(tmp_path: Path) -> None:
    """An upstream with a bad field still counts as configured for its expose rows."""
    problems = problems_for(tmp_path, doc(up(timeoutMs=0), expose=({"upstream": "time", "tool": "now"},)))
    assert [(p.entry, p.field) for p in problems] == [(U0, "timeoutMs")]


def test_unknown_transport_skips_transport_rules(tmp_path: Path) -> None:
    """A misspelt transport is one problem, not also a missing command or URL."""
    problems = problems_for(tmp_path, doc({"id": "r", "transport": "htp", "url": "http://h/"}))
    assert [p.field for p in problems] == ["transport"]


def test_parse_expose_validates_a_document_in_memory() -> None:
    """parse_expose applies the same rules to an already-parsed document."""
    assert parse_expose(doc(TIME)).upstreams[0].id == "time"
    with pytest.raises(ConfigError):
        parse_expose(doc(TIME, TIME))


# --------------------------------------------------------------------------- ToolFunnel


def test_toolfunnel_fixture_loads_unchanged(tmp_path: Path) -> None:
    """The fixture ToolFunnel home's expose.json (with its _README) loads, and is not rewritten."""
    home = tmp_path / "home"
    shutil.copytree(FIXTURE_HOME, home)
    before = (home / EXPOSE_FILE).read_bytes()
    config = load_expose(home)
    assert [(u.id, u.command, u.args, u.enabled) for u in config.upstreams] == [
        ("mock", "node", ("mcp/servers/mock-upstream/server.js",), False)]
    assert (home / EXPOSE_FILE).read_bytes() == before


def test_toolfunnel_written_rows_load(tmp_path: Path) -> None:
    """Rows as ToolFunnel's store and UI wrote them: null optionals, empty `as`, notes, explicit stdio."""
    put(tmp_path, {
        "version": 1, "_README": "notes",
        "upstreams": [{"id": "everything", "transport": "stdio", "command": "npx",
                       "args": ["-y", "@modelcontextprotocol/server-everything"], "env": {}, "enabled": True,
                       "description": "", "cwd": None, "timeoutMs": 60000, "legacyPin": True,
                       "_note": "kept"}],
        "expose": [{"upstream": "everything", "tool": "echo", "as": "", "category": "", "enabled": True},
                   {"upstream": "everything", "tool": "add", "as": None}],
    })
    config = load_expose(tmp_path)
    assert config.upstreams[0].cwd is None and config.upstreams[0].legacy_pin
    assert [e.as_name for e in config.expose] == ["everything_echo", "everything_add"]


# --------------------------------------------------------------------------- semantics


BASE = UpstreamSpec(id="u", command="node", args=("s.js",))
CHANGES: dict[str, Any] = {
    "id": "v", "transport": "http", "command": "python", "args": ("t.js",), "env": {"A": "1"},
    "cwd": "sub", "url": "http://h/", "headers": {"X": "1"}, "timeout_ms": 1,
    "request_timeout_ms": 1, "legacy_pin": True, "modern_only": True, "allow_outside_paths": True,
    "allow_code_loading_env": True, "strict_approval": True, "restart": RestartPolicy(max_restarts=1),
    "reconnect_at": "2026-01-01T00:00:00Z",
}


@pytest.mark.parametrize("field", ["enabled", "description"])
def test_switch_and_note_are_not_the_definition(field: str) -> None:
    """Toggling `enabled` or editing `description` is no change of definition (no restart for it)."""
    value: Any = False if field == "enabled" else "a new note"
    edited = dataclasses.replace(BASE, **{field: value})
    assert edited != BASE
    assert edited.definition() == BASE.definition()
    assert edited.definition().enabled is True and edited.definition().description == ""


def test_change_table_covers_every_field() -> None:
    """Every UpstreamSpec field but `enabled` and `description` has a row in the change table."""
    assert {f.name for f in dataclasses.fields(UpstreamSpec)} - {"enabled", "description"} == set(CHANGES)


@pytest.mark.parametrize("name", sorted(CHANGES))
def test_any_other_change_changes_the_definition(name: str) -> None:
    """Any other field is part of the definition (so a change restarts the upstream)."""
    changed = dataclasses.replace(BASE, **{name: CHANGES[name]})
    assert changed.definition() != BASE.definition()


def test_env_is_compared_by_value() -> None:
    """Two specs with equal env dicts are equal."""
    assert dataclasses.replace(BASE, env={"A": "1"}) == dataclasses.replace(BASE, env=dict(A="1"))


@pytest.mark.parametrize(
    ("cwd", "expected"),
    [
        pytest.param(None, "{home}", id="default-home"),
        pytest.param("", "{home}", id="empty-home"),
        pytest.param("sub/dir", "{home}/sub/dir", id="relative"),
        pytest.param("../x", "{home}/../x", id="relative-parent"),
        pytest.param("/srv/x", "/srv/x", id="absolute"),
        pytest.param("~/work", "{user}/work", id="tilde"),
    ],
)
def test_resolved_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cwd: str | None,
                      expected: str) -> None:
    """cwd defaults to the home; relative is against the home; `~` is the user's home."""
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    home = tmp_path / "home"
    spec = UpstreamSpec(id="u", command="x", cwd=cwd)
    assert spec.resolved_cwd(home) == Path(expected.format(home=home, user=tmp_path / "user"))
