"""`tfunnel mcp list|add|enable|disable|remove|reconnect` on the files, without a gateway."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tfunnel.config.expose import EXPOSE_FILE, load_expose
from tfunnel.manage.mcp_cmd import AddOptions, add_mcp_arguments, mcp_command, split_argv

TIME_CMD = ["mcp-server-time", "--local-timezone", "UTC"]


def run(home: Path, action: str, upstream_id: str | None = None, command: list[str] | None = None, *,
        env: list[str] | None = None, **options: Any) -> int:
    return mcp_command(home, action, upstream_id, command or [], AddOptions(env=env or [], **options))


def read(home: Path) -> Any:
    return json.loads((home / EXPOSE_FILE).read_text())


def put(home: Path, value: Any) -> Path:
    path = home / EXPOSE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(value if isinstance(value, str) else json.dumps(value, indent=2))
    return path


def audit_on(home: Path) -> Path:
    """Switch the home's audit log on; return the log file."""
    (home / "logs").mkdir(parents=True, exist_ok=True)
    (home / "logs" / "log.config.json").write_text('{"enabled": true}')
    return home / "logs" / "toolfunnel.log.jsonl"


TWO: dict[str, Any] = {
    "version": 1,
    "_README": "ToolFunnel keeps notes in unknown keys.",
    "upstreams": [
        {"id": "time", "command": "mcp-server-time", "_note": "row note", "enabled": True},
        {"id": "git", "command": "uvx", "args": ["mcp-server-git"], "description": "git tools"},
    ],
    "expose": [
        {"upstream": "time", "tool": "now", "as": "clock", "_why": "kept"},
        {"upstream": "git", "tool": "git_log", "category": "vcs"},
        {"upstream": "time", "tool": "convert_time", "enabled": False},
    ],
    "zzz": {"trailing": True},
}


# --------------------------------------------------------------------------- add


def test_add_creates_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Adding to a home without expose.json creates it with the new stdio upstream."""
    assert run(tmp_path, "add", "time", TIME_CMD) == 0
    assert capsys.readouterr().out == "time: added (enabled)\n"
    assert read(tmp_path) == {"version": 1, "expose": [], "upstreams": [
        {"id": "time", "transport": "stdio", "command": "mcp-server-time",
         "args": ["--local-timezone", "UTC"], "enabled": True}]}
    spec = load_expose(tmp_path).upstreams[0]
    assert (spec.command, spec.args) == ("mcp-server-time", ("--local-timezone", "UTC"))


def test_add_with_every_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """env (repeated KEY=VALUE, values may hold '='), cwd, description and disabled are written."""
    assert run(tmp_path, "add", "py", ["python", "-m", "srv"], env=["A=1", "B=x=y", "EMPTY="], cwd="sub",
               description="a note", disabled=True) == 0
    assert capsys.readouterr().out == "py: added (disabled)\n"
    [row] = read(tmp_path)["upstreams"]
    assert row == {"id": "py", "transport": "stdio", "command": "python", "args": ["-m", "srv"],
                   "env": {"A": "1", "B": "x=y", "EMPTY": ""}, "cwd": "sub", "description": "a note",
                   "enabled": False}


def test_add_appends_and_keeps_the_rest(tmp_path: Path) -> None:
    """A new upstream goes last; every other row, key and unknown field stays as it was."""
    put(tmp_path, TWO)
    assert run(tmp_path, "add", "fetch", ["uvx", "mcp-server-fetch"]) == 0
    after = read(tmp_path)
    assert after["upstreams"][:2] == TWO["upstreams"] and after["upstreams"][2]["id"] == "fetch"
    assert {k: v for k, v in after.items() if k != "upstreams"} == {
        k: v for k, v in TWO.items() if k != "upstreams"}
    assert list(after) == list(TWO)


def test_add_duplicate_id_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A second upstream with an existing id is refused with load_expose's message; nothing is written."""
    path = put(tmp_path, TWO)
    before = path.read_bytes()
    assert run(tmp_path, "add", "git", ["x"]) == 1
    err = capsys.readouterr().err
    assert "mcp/expose.json: upstreams[2] (id 'git'): field 'id': duplicates an earlier upstream's id" in err
    assert path.read_bytes() == before


@pytest.mark.parametrize(
    ("upstream_id", "command", "env", "field"),
    [
        pytest.param("a b", ["x"], [], "'id'", id="id-with-space"),
        pytest.param("-x", ["x"], [], "'id'", id="id-leading-dash"),
        pytest.param("ok", [""], [], "'command'", id="empty-command"),
        pytest.param("ok", ["x"], ["A\u0000=1"], repr("env.A\u0000"), id="env-name-nul"),
    ],
)
def test_add_invalid_spec_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         upstream_id: str, command: list[str], env: list[str],
                                         field: str) -> None:
    """An upstream that would not load is refused with the loader's problem; no file appears."""
    assert run(tmp_path, "add", upstream_id, command, env=env) == 1
    err = capsys.readouterr().err
    assert f"mcp/expose.json: upstreams[0] (id {upstream_id!r}): field {field}" in err
    assert "not added" in err
    assert not (tmp_path / EXPOSE_FILE).exists()


@pytest.mark.parametrize("pair", ["NOVALUE", "=x"], ids=["no-equals", "no-name"])
def test_add_bad_env_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str], pair: str) -> None:
    """--env must be KEY=VALUE."""
    assert run(tmp_path, "add", "x", ["x"], env=[pair]) == 2
    assert "KEY=VALUE" in capsys.readouterr().err
    assert not (tmp_path / EXPOSE_FILE).exists()


def test_add_warns_about_a_missing_cwd(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A cwd that does not exist yet is a warning, not a refusal."""
    assert run(tmp_path, "add", "u", ["x"], cwd="later") == 0
    err = capsys.readouterr().err
    assert f"upstream 'u': cwd: {tmp_path / 'later'} does not exist" in err
    assert read(tmp_path)["upstreams"][0]["cwd"] == "later"


def test_add_warns_about_isolation_but_adds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A path outside the home is a warning at add time; the gateway refuses it later."""
    assert run(tmp_path, "add", "fs", ["npx", "server-filesystem", "/etc"], env=["NODE_OPTIONS=-r x"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "fs: added (enabled)\n"
    warnings = [line for line in captured.err.splitlines() if "warning" in line]
    assert len(warnings) == 3
    assert "upstream 'fs': isolation guard: args[1] '/etc'" in warnings[0]
    assert "allowOutsidePaths" in warnings[0]
    assert "env NODE_OPTIONS" in warnings[1]
    assert "stops it at once, without retrying" in warnings[2] and "tfunnel mcp remove fs" in warnings[2]
    assert "--allow-outside-paths" in warnings[2] and "--allow-code-loading-env" in warnings[2]
    assert read(tmp_path)["upstreams"][0]["id"] == "fs"


def test_add_warns_about_a_command_not_on_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A command that is not on PATH is a warning at add time, as `tfunnel check` would report it."""
    assert run(tmp_path, "add", "u", ["no-such-mcp-server-xyz"]) == 0
    err = capsys.readouterr().err
    assert "upstream 'u': command: 'no-such-mcp-server-xyz' is not found on PATH" in err
    assert read(tmp_path)["upstreams"][0]["command"] == "no-such-mcp-server-xyz"


def test_add_flags_write_every_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The opt-outs and timeouts given as flags land in the row, and the guard then has nothing to say."""
    assert run(tmp_path, "add", "fs", ["npx", "server-filesystem", "/etc"], env=["NODE_OPTIONS=-r x"],
               allow_outside_paths=True, allow_code_loading_env=True, timeout_ms=5000,
               request_timeout_ms=700, description="files", cwd=".") == 0
    assert "warning" not in capsys.readouterr().err
    [row] = read(tmp_path)["upstreams"]
    assert row == {"id": "fs", "transport": "stdio", "command": "npx", "args": ["server-filesystem", "/etc"],
                   "env": {"NODE_OPTIONS": "-r x"}, "cwd": ".", "description": "files", "timeoutMs": 5000,
                   "requestTimeoutMs": 700, "allowOutsidePaths": True, "allowCodeLoadingEnv": True,
                   "enabled": True}
    spec = load_expose(tmp_path).upstreams[0]
    assert (spec.timeout_ms, spec.request_timeout_ms, spec.allow_outside_paths,
            spec.allow_code_loading_env) == (5000, 700, True, True)


# --------------------------------------------------------------------------- list


def test_list_without_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Listing a home without expose.json says so and creates nothing."""
    assert run(tmp_path, "list") == 0
    out = capsys.readouterr().out
    assert out == f"no upstreams in {tmp_path / EXPOSE_FILE} (the file does not exist yet)\n"
    assert not (tmp_path / EXPOSE_FILE).exists()


def test_list_an_empty_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An existing file with no upstreams gets the plain final line."""
    put(tmp_path, {"version": 1, "upstreams": [], "expose": []})
    assert run(tmp_path, "list") == 0
    assert capsys.readouterr().out == f"no upstreams in {tmp_path / EXPOSE_FILE}\n"


def test_list_shows_upstreams_and_their_expose_entries(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """Each upstream: id, transport, state, command line, cwd, description, then its expose rows."""
    put(tmp_path, {**TWO, "upstreams": [*TWO["upstreams"],
                                        {"id": "far", "transport": "http", "url": "https://h/mcp",
                                         "enabled": False}]})
    assert run(tmp_path, "list") == 0
    assert capsys.readouterr().out.splitlines() == [
        "time  stdio  enabled  mcp-server-time",
        f"  cwd: {tmp_path}",
        "  expose: now as clock",
        "  expose: convert_time as time_convert_time  (disabled)",
        "git  stdio  enabled  uvx mcp-server-git",
        f"  cwd: {tmp_path}",
        "  description: git tools",
        "  expose: git_log as git_log  [vcs]",  # already prefixed: the default name does not repeat it
        "far  http  disabled  https://h/mcp",
    ]


def test_list_quotes_the_command_line_and_shows_isolation(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """Args with spaces are shell-quoted; isolation problems are listed under the upstream."""
    put(tmp_path, {"upstreams": [{"id": "x", "command": "sh", "args": ["-c", "echo hi", "/etc"]}]})
    assert run(tmp_path, "list") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "x  stdio  enabled  sh -c 'echo hi' /etc"
    assert out[2].startswith("  isolation: args[2] '/etc'")


# --------------------------------------------------------------------------- enable / disable


def test_disable_and_enable_round_trip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """disable writes enabled=false, enable writes it back; nothing else changes."""
    put(tmp_path, TWO)
    assert run(tmp_path, "disable", "git") == 0
    assert capsys.readouterr().out == "git: disabled\n"
    after = read(tmp_path)
    assert after["upstreams"][1] == {**TWO["upstreams"][1], "enabled": False}
    assert {**after, "upstreams": TWO["upstreams"]} == TWO
    git = load_expose(tmp_path).upstream("git")
    assert git is not None and git.enabled is False
    assert run(tmp_path, "enable", "git") == 0
    assert capsys.readouterr().out == "git: enabled\n"
    assert read(tmp_path)["upstreams"][1] == {**TWO["upstreams"][1], "enabled": True}


@pytest.mark.parametrize("action", ["enable", "disable"])
def test_no_op_toggle_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str], action: str) -> None:
    """Enabling an enabled (or disabling a disabled) upstream leaves the file and the audit log alone."""
    log = audit_on(tmp_path)
    row = {"id": "u", "command": "x", **({} if action == "enable" else {"enabled": False})}
    path = put(tmp_path, {"upstreams": [row]})
    before = path.read_bytes()
    assert run(tmp_path, action, "u") == 0
    assert capsys.readouterr().out == f"u: already {action}d\n"
    assert path.read_bytes() == before
    assert not log.exists()


# --------------------------------------------------------------------------- remove


def test_remove_cascades_its_expose_entries(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Removing an upstream drops its expose rows too, keeping the others in order."""
    put(tmp_path, TWO)
    assert run(tmp_path, "remove", "time") == 0
    assert capsys.readouterr().out == "time: removed (and 2 expose entries)\n"
    after = read(tmp_path)
    assert after == {**TWO, "upstreams": [TWO["upstreams"][1]],
                     "expose": [TWO["expose"][1]]}
    assert [u.id for u in load_expose(tmp_path).upstreams] == ["git"]


def test_remove_with_one_expose_entry(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The count is spelled for one entry."""
    put(tmp_path, TWO)
    assert run(tmp_path, "remove", "git") == 0
    assert capsys.readouterr().out == "git: removed (and 1 expose entry)\n"


def test_remove_without_expose_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A file without an expose array stays without one."""
    put(tmp_path, {"upstreams": [{"id": "u", "command": "x"}]})
    assert run(tmp_path, "remove", "u") == 0
    assert capsys.readouterr().out == "u: removed (and 0 expose entries)\n"
    assert read(tmp_path) == {"upstreams": []}


# --------------------------------------------------------------------------- reconnect


def test_reconnect_stamps_the_time(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """reconnect writes reconnectAt (UTC ISO), changing the definition; a second one changes it again."""
    put(tmp_path, TWO)
    before_spec = load_expose(tmp_path).upstream("time")
    start = datetime.now(UTC)
    assert run(tmp_path, "reconnect", "time") == 0
    assert capsys.readouterr().out.startswith("time: reconnect requested")
    stamp = read(tmp_path)["upstreams"][0]["reconnectAt"]
    assert stamp.endswith("Z")
    assert start <= datetime.fromisoformat(stamp.replace("Z", "+00:00")) <= datetime.now(UTC)
    after_spec = load_expose(tmp_path).upstream("time")
    assert before_spec is not None and after_spec is not None
    assert after_spec.reconnect_at == stamp and after_spec.definition() != before_spec.definition()
    assert run(tmp_path, "reconnect", "time") == 0
    assert read(tmp_path)["upstreams"][0]["reconnectAt"] != stamp
    assert read(tmp_path)["upstreams"][0]["_note"] == "row note"


def test_reconnect_a_disabled_upstream_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Reconnecting a disabled upstream is recorded, with a note that it starts once enabled."""
    put(tmp_path, {"upstreams": [{"id": "u", "command": "x", "enabled": False}]})
    assert run(tmp_path, "reconnect", "u") == 0
    assert "starts only once enabled" in capsys.readouterr().out
    assert "reconnectAt" in read(tmp_path)["upstreams"][0]


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize("action", ["enable", "disable", "remove", "reconnect"])
def test_unknown_id_names_the_known_ones(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         action: str) -> None:
    """An unknown id is exit 1, naming the ids that exist; nothing is written."""
    path = put(tmp_path, TWO)
    before = path.read_bytes()
    assert run(tmp_path, action, "nope") == 1
    assert "no upstream with id 'nope' (known: git, time)" in capsys.readouterr().err
    assert path.read_bytes() == before


def test_unknown_id_without_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """With no file there are no known ids, and no file is created."""
    assert run(tmp_path, "enable", "x") == 1
    assert "(known: none)" in capsys.readouterr().err
    assert not (tmp_path / EXPOSE_FILE).exists()


MALFORMED = [
    pytest.param("{not json", "invalid JSON", id="bad-json"),
    pytest.param("[]", "top level", id="top-array"),
    pytest.param(json.dumps({"upstreams": [{"id": "u", "command": "x", "timeoutMs": 0}]}),
                 "upstreams[0] (id 'u'): field 'timeoutMs'", id="bad-field"),
    pytest.param(json.dumps({"upstreams": [{"id": "u", "command": "x"}, {"id": "u", "command": "y"}]}),
                 "field 'id': duplicates", id="duplicate-id"),
]


@pytest.mark.parametrize(("text", "problem"), MALFORMED)
@pytest.mark.parametrize(("action", "upstream_id", "command"), [
    ("list", None, []), ("add", "new", ["x"]), ("enable", "u", []), ("disable", "u", []),
    ("remove", "u", []), ("reconnect", "u", []),
])
def test_malformed_file_is_never_rewritten(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str,
                                           problem: str, action: str, upstream_id: str | None,
                                           command: list[str]) -> None:
    """A malformed expose.json is exit 1 with its problems printed, and is left byte for byte."""
    path = put(tmp_path, text)
    assert run(tmp_path, action, upstream_id, command) == 1
    err = capsys.readouterr().err
    assert "mcp/expose.json" in err and problem in err
    assert path.read_text() == text


@pytest.mark.parametrize(
    ("action", "upstream_id", "command", "message"),
    [
        pytest.param("start", "x", [], "unknown action 'start'", id="unknown-action"),
        pytest.param("enable", None, [], "mcp enable needs an upstream id", id="missing-id"),
        pytest.param("add", "x", [], "mcp add needs a command", id="add-without-command"),
        pytest.param("remove", "x", ["rm"], "mcp remove takes no command", id="command-on-remove"),
    ],
)
def test_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str], action: str,
                      upstream_id: str | None, command: list[str], message: str) -> None:
    """Wrong arguments are exit 2 with a message, and touch nothing."""
    assert run(tmp_path, action, upstream_id, command) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / EXPOSE_FILE).exists()


# --------------------------------------------------------------------------- audit


def test_every_change_is_audited(tmp_path: Path) -> None:
    """add, disable, enable, reconnect and remove each record a `config` record via cli."""
    log = audit_on(tmp_path)
    steps = [("add", ["x"]), ("disable", []), ("enable", []), ("reconnect", []), ("remove", [])]
    for action, command in steps:
        assert run(tmp_path, action, "u", command) == 0
    run(tmp_path, "list")
    records = [json.loads(line) for line in log.read_text().splitlines()]
    # add is the command's own; the others are tf_mcp_set's operation, which says it its way.
    assert [(r["type"], r["file"], r["via"], r["change"]) for r in records] == [
        ("config", "mcp/expose.json", "cli", "add u" if action == "add" else f"{action} upstream 'u'")
        for action, _ in steps]


# --------------------------------------------------------------------------- CLI wiring


def cli_parser() -> argparse.ArgumentParser:
    """A parser wired the way cli.py wires `tfunnel mcp` (global --home on both levels)."""
    top = argparse.ArgumentParser(prog="tfunnel")
    top.add_argument("--home", default=None)
    sub = top.add_subparsers(dest="command")
    mcp = sub.add_parser("mcp")
    mcp.add_argument("--home", default=argparse.SUPPRESS)
    add_mcp_arguments(mcp, lambda p: p.add_argument("--home", default=argparse.SUPPRESS))
    sub.add_parser("call").add_argument("rest", nargs="*")
    return top


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        pytest.param("mcp add time -- mcp-server-time --local-timezone UTC",
                     ("add", "time", TIME_CMD, [], None), id="spec-example"),
        pytest.param("mcp add --env A=B --cwd sub time -- srv --home /x --env C=D",
                     ("add", "time", ["srv", "--home", "/x", "--env", "C=D"], ["A=B"], "sub"),
                     id="options-before-id-and-upstream-options-after"),
        pytest.param("--home /h mcp add time --env A=B --env C=D -- srv -- x",
                     ("add", "time", ["srv", "--", "x"], ["A=B", "C=D"], None), id="second-dashdash-kept"),
        pytest.param("mcp list --home /h", ("list", None, [], [], None), id="list"),
        pytest.param("mcp reconnect time", ("reconnect", "time", [], [], None), id="reconnect"),
        pytest.param("mcp add time --description note --disabled -- srv",
                     ("add", "time", ["srv"], [], None), id="flags-after-id"),
        pytest.param("mcp disable --home /h git", ("disable", "git", [], [], None), id="home-before-id"),
    ],
)
def test_cli_wiring(argv: str, expected: tuple[str, str | None, list[str], list[str], str | None]) -> None:
    """split_argv + add_mcp_arguments parse every documented form of `tfunnel mcp`."""
    head, command = split_argv(argv.split())
    args = cli_parser().parse_args(head)
    assert (args.action, args.id, command, args.env, args.cwd) == expected
    assert args.home == ("/h" if "/h" in argv else None)
    AddOptions.from_args(args)  # every action's namespace carries what add needs


def test_cli_wiring_add_flags() -> None:
    """Every `mcp add` flag reaches AddOptions."""
    argv = ("mcp add fs --allow-outside-paths --allow-code-loading-env --timeout-ms 9 "
            "--request-timeout-ms 8 --cwd d --description n --disabled -- srv /x")
    head, command = split_argv(argv.split())
    options = AddOptions.from_args(cli_parser().parse_args(head))
    assert command == ["srv", "/x"]
    assert options == AddOptions(env=[], cwd="d", description="n", disabled=True, allow_outside_paths=True,
                                 allow_code_loading_env=True, timeout_ms=9, request_timeout_ms=8)


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param("mcp", id="no-action"),
        pytest.param("mcp start x", id="unknown-action"),
        pytest.param("mcp enable", id="enable-without-id"),
        pytest.param("mcp enable x --env A=B", id="env-on-enable"),
        pytest.param("mcp add time mcp-server-time", id="command-without-dashdash"),
        pytest.param("mcp add time --timeout-ms 0 -- srv", id="zero-timeout"),
        pytest.param("mcp add time --timeout-ms -5 -- srv", id="negative-timeout"),
        pytest.param("mcp add time --request-timeout-ms soon -- srv", id="word-timeout"),
    ],
)
def test_cli_wiring_usage_errors(argv: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Malformed `tfunnel mcp` command lines are argparse usage errors (exit 2)."""
    head, _command = split_argv(argv.split())
    with pytest.raises(SystemExit) as exc:
        cli_parser().parse_args(head)
    assert exc.value.code == 2
    capsys.readouterr()


def test_split_argv_leaves_other_commands_alone() -> None:
    """A `--` in any other command line is argparse's business."""
    assert split_argv(["call", "--", "-x"]) == (["call", "--", "-x"], [])
    assert split_argv(["mcp", "list"]) == (["mcp", "list"], [])


# --------------------------------------------------------------------------- remote upstreams


@pytest.mark.parametrize(("url", "transport", "expected"), [
    ("https://mcp.example.com/mcp", None, "http"),
    ("http://127.0.0.1:8000/mcp", None, "http"),
    ("wss://mcp.example.com/ws", None, "websocket"),
    ("ws://127.0.0.1:9000", "websocket", "websocket"),
])
def test_add_a_remote_upstream(tmp_path: Path, capsys: pytest.CaptureFixture[str], url: str,
                               transport: str | None, expected: str) -> None:
    """`--url` adds a remote upstream: its transport from the flag or the URL's scheme, its
    headers as given (an `${NAME}` reference is written as it is, never expanded into the file)."""
    assert run(tmp_path, "add", "remote", url=url, transport=transport,
               headers=["Authorization=Bearer ${TOKEN}", "X-Team=core"]) == 0
    row = read(tmp_path)["upstreams"][0]
    assert row == {"id": "remote", "transport": expected, "url": url, "enabled": True,
                   "headers": {"Authorization": "Bearer ${TOKEN}", "X-Team": "core"}}
    assert "remote: added (enabled)" in capsys.readouterr().out


def test_add_a_remote_upstream_validates_its_url(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A URL the transport cannot use is refused with the config's own message; nothing is written."""
    assert run(tmp_path, "add", "remote", url="ftp://example.com/x", transport="http") == 1
    err = capsys.readouterr().err
    assert "url" in err and "http://" in err and "not added" in err
    assert not (tmp_path / EXPOSE_FILE).exists()


@pytest.mark.parametrize(("command", "options", "message"), [
    (["srv"], {"url": "https://x.example/mcp"}, "a command or --url, not both"),
    ([], {"url": "https://x.example/mcp", "cwd": "d"}, "--cwd apply to a stdio upstream only"),
    ([], {"url": "https://x.example/mcp", "env": ["A=B"]}, "--env apply to a stdio upstream only"),
    (["srv"], {"headers": ["A=B"]}, "--header and --transport apply to a remote upstream only"),
    (["srv"], {"transport": "http"}, "--header and --transport apply to a remote upstream only"),
    ([], {}, "mcp add needs a command or a URL"),
])
def test_remote_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str],
                             options: dict[str, Any], message: str) -> None:
    """Flags that do not fit the kind of upstream are usage errors (exit 2), and touch nothing."""
    assert run(tmp_path, "add", "x", command, **options) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / EXPOSE_FILE).exists()


def test_a_bad_header_is_a_usage_error_that_does_not_echo_its_value(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--header` wants KEY=VALUE; a malformed one is named, never printed whole (it may be a secret)."""
    assert run(tmp_path, "add", "x", url="https://x.example/mcp", headers=["Bearer-s3cr3t"]) == 2
    err = capsys.readouterr().err
    assert "--header wants KEY=VALUE" in err and "s3cr3t" not in err
    assert not (tmp_path / EXPOSE_FILE).exists()


def test_list_shows_a_remote_url_without_credentials(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """`mcp list` shows a remote upstream's URL without its userinfo or query."""
    put(tmp_path, {"version": 1, "upstreams": [
        {"id": "r", "transport": "http", "url": "https://user:pw@mcp.example.com:8443/mcp?key=abc"}]})
    assert run(tmp_path, "list") == 0
    out = capsys.readouterr().out
    assert "r  http  enabled  https://mcp.example.com:8443/mcp" in out
    assert "pw" not in out and "abc" not in out


def test_cli_wiring_remote_flags() -> None:
    """`--url`, `--transport` and repeated `--header` reach AddOptions."""
    argv = "mcp add r --url wss://h/ws --transport websocket --header A=1 --header B=2"
    head, command = split_argv(argv.split())
    options = AddOptions.from_args(cli_parser().parse_args(head))
    assert command == []
    assert (options.url, options.transport, options.headers) == ("wss://h/ws", "websocket", ["A=1", "B=2"])
