"""Table-driven tests for the config home: load, validate, home, atomic, model, and `tfunnel check`."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from tfunnel.config import atomic
from tfunnel.config.home import resolve_home, seed_dir, seed_home
from tfunnel.config.load import (
    REGISTER_FILE,
    SETTINGS_FILE,
    STATE_FILE,
    load_register,
    load_settings,
    load_state,
)
from tfunnel.config.model import Invoke, Register, Settings, ToolEntry, ToolState, Visibility
from tfunnel.errors import ConfigError, ConfigProblem
from tfunnel.home.check import check_home

SHELL = {"type": "shell", "command": "true"}


def put(home: Path, rel: str, value: Any) -> Path:
    """Write `value` (JSON, or raw text when a str) to `home/rel`."""
    path = home / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(value if isinstance(value, str) else json.dumps(value), encoding="utf-8")
    return path


def problems_of(exc: pytest.ExceptionInfo[ConfigError]) -> list[ConfigProblem]:
    assert exc.value.problems, "ConfigError without problems"
    return exc.value.problems


# --------------------------------------------------------------------------- settings


def test_settings_defaults_when_missing(tmp_path: Path) -> None:
    """A missing toolfunnel.json means every default."""
    assert load_settings(tmp_path) == Settings()


def test_settings_values_read(tmp_path: Path) -> None:
    """Valid fields are read; unknown fields are kept in raw."""
    put(tmp_path, SETTINGS_FILE, {"serverName": "gw", "httpPort": 8000, "serveLegacy": False, "future": 1,
                                  "gate": {"askFallback": "allow"}, "limits": {"toolTimeoutS": 2.5}})
    s = load_settings(tmp_path)
    assert (s.server_name, s.http_port, s.serve_legacy, s.raw["future"]) == ("gw", 8000, False, 1)
    assert (s.gate.ask_fallback, s.limits.tool_timeout_s) == ("allow", 2.5)
    assert s.upstream_instructions_max_chars == 1000
    assert s.gate.confirm_management == "loosening"
    for policy in ("all", "none", "loosening"):
        put(tmp_path, SETTINGS_FILE, {"gate": {"confirmManagement": policy}})
        assert load_settings(tmp_path).gate.confirm_management == policy
    put(tmp_path, SETTINGS_FILE, {"upstreamInstructionsMaxChars": 0})
    assert load_settings(tmp_path).upstream_instructions_max_chars == 0


@pytest.mark.parametrize(
    ("raw", "entry", "field"),
    [
        pytest.param({"serverName": 5}, None, "serverName", id="serverName-number"),
        pytest.param({"serverName": "  "}, None, "serverName", id="serverName-blank"),
        pytest.param({"serverVersion": []}, None, "serverVersion", id="serverVersion-array"),
        pytest.param({"clientName": None}, None, "clientName", id="clientName-null"),
        pytest.param({"httpPort": "x"}, None, "httpPort", id="httpPort-string"),
        pytest.param({"httpPort": 70000}, None, "httpPort", id="httpPort-too-big"),
        pytest.param({"httpPort": 0}, None, "httpPort", id="httpPort-zero"),
        pytest.param({"httpPort": 80.5}, None, "httpPort", id="httpPort-float"),
        pytest.param({"uiPort": True}, None, "uiPort", id="uiPort-bool"),
        pytest.param({"serveLegacy": "no"}, None, "serveLegacy", id="serveLegacy-string"),
        pytest.param({"upstreamInstructionsMaxChars": -1}, None, "upstreamInstructionsMaxChars",
                     id="instructionsMax-negative"),
        pytest.param({"upstreamInstructionsMaxChars": "1000"}, None, "upstreamInstructionsMaxChars",
                     id="instructionsMax-string"),
        pytest.param({"upstreamInstructionsMaxChars": 10**9}, None, "upstreamInstructionsMaxChars",
                     id="instructionsMax-too-big"),
        pytest.param({"upstreamInstructionsMaxChars": False}, None, "upstreamInstructionsMaxChars",
                     id="instructionsMax-bool"),
        pytest.param({"requires": {}}, None, "requires", id="requires-object"),
        pytest.param({"limits": {"toolTimeoutS": -1}}, "limits", "toolTimeoutS", id="toolTimeoutS-negative"),
        pytest.param({"limits": {"toolTimeoutS": "5"}}, "limits", "toolTimeoutS", id="toolTimeoutS-string"),
        pytest.param({"limits": {"shutdownGraceS": 0}}, "limits", "shutdownGraceS", id="shutdownGraceS-zero"),
        pytest.param({"limits": {"maxMessageBytes": 10}}, "limits", "maxMessageBytes", id="maxMessage-small"),
        pytest.param({"limits": {"toolOutputBytes": "1M"}}, "limits", "toolOutputBytes", id="output-string"),
        pytest.param({"limits": {"bodyReadTimeoutS": 0}}, "limits", "bodyReadTimeoutS", id="bodyRead-zero"),
        pytest.param({"limits": {"idleTimeoutS": "30"}}, "limits", "idleTimeoutS", id="idle-string"),
        pytest.param({"limits": {"maxHttpRequests": 0}}, "limits", "maxHttpRequests", id="maxHttp-zero"),
        pytest.param({"limits": {"maxSessions": 2.5}}, "limits", "maxSessions", id="maxSessions-float"),
        pytest.param({"limits": []}, None, "limits", id="limits-array"),
        pytest.param({"gate": {"askFallback": "maybe"}}, "gate", "askFallback", id="askFallback-unknown"),
        pytest.param({"gate": {"confirmManagement": "some"}}, "gate", "confirmManagement",
                     id="confirmManagement-unknown"),
        pytest.param({"gate": "deny"}, None, "gate", id="gate-string"),
        pytest.param("{", None, None, id="invalid-json"),
        pytest.param("[]", None, None, id="top-level-array"),
    ],
)
def test_settings_wrong_field(tmp_path: Path, raw: Any, entry: str | None, field: str | None) -> None:
    """A wrong-typed settings field raises ConfigError naming toolfunnel.json, the entry and the field."""
    put(tmp_path, SETTINGS_FILE, raw)
    with pytest.raises(ConfigError) as exc:
        load_settings(tmp_path)
    [problem] = problems_of(exc)
    assert (problem.file, problem.entry, problem.field) == (SETTINGS_FILE, entry, field)
    text = str(problem)
    assert SETTINGS_FILE in text
    assert entry is None or entry in text
    assert field is None or repr(field) in text


def test_settings_all_problems_at_once(tmp_path: Path) -> None:
    """Every bad field is reported in one ConfigError, not just the first."""
    put(tmp_path, SETTINGS_FILE, {"serverName": 5, "httpPort": "x", "gate": {"askFallback": "maybe"}})
    with pytest.raises(ConfigError) as exc:
        load_settings(tmp_path)
    assert sorted(str(p.field) for p in problems_of(exc)) == ["askFallback", "httpPort", "serverName"]


# --------------------------------------------------------------------------- register


def register(*tools: Any, **top: Any) -> dict[str, Any]:
    return {"version": 1, "tools": list(tools), **top}


def test_register_missing(tmp_path: Path) -> None:
    """A missing register is a ConfigError naming the file."""
    with pytest.raises(ConfigError) as exc:
        load_register(tmp_path)
    [problem] = problems_of(exc)
    assert REGISTER_FILE in str(problem) and "missing" in str(problem)


def test_register_invalid_json_names_position(tmp_path: Path) -> None:
    """Invalid JSON is reported with its line and column."""
    put(tmp_path, REGISTER_FILE, '{\n  "tools": [\n    {"id": "a",}\n  ]\n}')
    with pytest.raises(ConfigError) as exc:
        load_register(tmp_path)
    [problem] = problems_of(exc)
    assert REGISTER_FILE in str(problem)
    assert "line 3" in problem.message and "column" in problem.message


A = "tools[0] (id 'a')"


def one(**fields: Any) -> dict[str, Any]:
    """A register with one valid entry `a`, changed by `fields` (a None value removes the field)."""
    item = {"id": "a", "name": "A", "invoke": SHELL, **fields}
    return register({k: v for k, v in item.items() if v is not None})


@pytest.mark.parametrize(
    ("raw", "entry", "fields"),
    [
        pytest.param([], None, (None,), id="top-level-array"),
        pytest.param({"tools": {}}, None, ("tools",), id="tools-not-array"),
        pytest.param({"version": "1", "tools": []}, None, ("version",), id="version-string"),
        pytest.param(register(5), "tools[0]", (None,), id="entry-not-object"),
        pytest.param(one(id=None), "tools[0]", ("id",), id="missing-id"),
        pytest.param(one(id=5), "tools[0]", ("id",), id="id-number"),
        pytest.param(one(name=None), A, ("name",), id="missing-name"),
        pytest.param(register(one()["tools"][0], {"id": "a", "name": "B", "invoke": SHELL}),
                     "tools[1] (id 'a')", ("id",), id="duplicate-id"),
        pytest.param(one(id="toolfunnel_run_tool"), "tools[0] (id 'toolfunnel_run_tool')", ("id",),
                     id="reserved-meta-id"),
        pytest.param(one(id="passthrough"), "tools[0] (id 'passthrough')", ("id",), id="reserved-state-key"),
        pytest.param(one(mode="server"), A, ("mode",), id="bad-mode"),
        pytest.param(one(summary=5), A, ("summary",), id="summary-number"),
        pytest.param(one(invoke="run.sh"), A, ("invoke",), id="invoke-string"),
        pytest.param(one(invoke={"type": "python", "path": "x.py"}), A, ("invoke.type",),
                     id="invoke-unknown-type"),
        pytest.param(one(invoke={"path": "x.py"}), A, ("invoke.type",), id="invoke-missing-type"),
        pytest.param(one(invoke={"type": "script"}), A, ("invoke.path",), id="script-without-path"),
        pytest.param(one(invoke={"type": "shell", "command": ""}), A, ("invoke.command",),
                     id="shell-empty-command"),
        pytest.param(one(mode="gateway", invoke=None), A, ("invoke",), id="gateway-without-invoke"),
        pytest.param(one(inputSchema=[]), A, ("inputSchema",), id="schema-not-object"),
        pytest.param(one(inputSchema={"type": "array"}), A, ("inputSchema",), id="schema-type-not-object"),
        pytest.param(one(inputSchema={"type": "object", "properties": {"x": {"type": "nope"}}}), A,
                     ("inputSchema",), id="schema-invalid"),
        pytest.param(one(timeoutS=0), A, ("timeoutS",), id="timeout-zero"),
        pytest.param(one(timeoutS="10"), A, ("timeoutS",), id="timeout-string"),
    ],
)
def test_register_problem(
    tmp_path: Path, raw: Any, entry: str | None, fields: tuple[str | None, ...]
) -> None:
    """Each register problem names tools/tools.register.json, the entry (index and id) and the field."""
    put(tmp_path, REGISTER_FILE, raw)
    with pytest.raises(ConfigError) as exc:
        load_register(tmp_path)
    [problem] = problems_of(exc)
    assert problem.file == REGISTER_FILE
    assert problem.entry == entry
    assert problem.field in fields
    text = str(problem)
    assert REGISTER_FILE in text
    assert entry is None or entry in text
    assert problem.field is None or repr(problem.field) in text


def test_register_all_problems_at_once(tmp_path: Path) -> None:
    """Problems in several entries are reported together."""
    put(tmp_path, REGISTER_FILE, register({"id": "a", "invoke": SHELL},
                                          {"id": "b", "name": "B", "timeoutS": -1, "invoke": SHELL}))
    with pytest.raises(ConfigError) as exc:
        load_register(tmp_path)
    assert [(p.entry, p.field) for p in problems_of(exc)] == [
        ("tools[0] (id 'a')", "name"), ("tools[1] (id 'b')", "timeoutS")]


@pytest.mark.parametrize(
    ("item", "mode"),
    [
        pytest.param({"id": "a", "name": "A", "invoke": SHELL}, "gateway", id="invoke-gateway"),
        pytest.param({"id": "a", "name": "A"}, "reference", id="no-invoke-reference"),
        pytest.param({"id": "a", "name": "A", "mode": "reference", "invoke": SHELL}, "reference",
                     id="explicit-reference"),
        pytest.param({"id": "a", "name": "A", "mode": "gateway", "invoke": SHELL}, "gateway",
                     id="explicit-gateway"),
    ],
)
def test_register_mode_inference(tmp_path: Path, item: dict[str, Any], mode: str) -> None:
    """An invoke makes an entry gateway; without one it is reference (an explicit mode wins)."""
    put(tmp_path, REGISTER_FILE, register(item))
    assert load_register(tmp_path).tools[0].mode == mode


def test_register_toolfunnel_style_loads_unchanged(tmp_path: Path) -> None:
    """A ToolFunnel register (script invokes under tools/scripts, unknown fields) loads as written."""
    raw = {
        "version": 2, "description": "old", "generatedBy": "toolfunnel 0.6",
        "tools": [
            {"id": "x", "name": "X Tool", "summary": "does x", "category": "misc",
             "invoke": {"type": "script", "path": "tools/scripts/x.js", "nodeFlags": ["--x"]},
             "tags": ["a"], "author": {"name": "me"}},
            {"id": "y", "name": "Y", "summary": "", "category": "misc",
             "invoke": {"type": "shell", "command": "echo y"}, "legacyField": True},
        ],
    }
    put(tmp_path, REGISTER_FILE, raw)
    assert load_register(tmp_path) == Register(version=2, description="old", tools=(
        ToolEntry(id="x", name="X Tool", summary="does x", category="misc", mode="gateway",
                  invoke=Invoke("script", "tools/scripts/x.js")),
        ToolEntry(id="y", name="Y", category="misc", mode="gateway", invoke=Invoke("shell", "echo y")),
    ))


# --------------------------------------------------------------------------- state


@pytest.mark.parametrize(
    ("text", "entries", "passthrough", "warned"),
    [
        pytest.param('{"passthrough": "up1", "passthroughAs": "git"}', {}, ("up1", "git"), [],
                     id="passthrough-as-kept"),
        pytest.param('{"passthroughAs": "git"}', {}, (None, "git"), [(None, "passthroughAs")],
                     id="passthrough-as-alone-warned"),
        pytest.param(None, {}, None, [], id="missing"),
        pytest.param("{}", {}, None, [], id="empty-document"),
        pytest.param('{"hash": {"hot": true, "note": "kept"}}', {"hash": Visibility(hot=True)}, None,
                     [("'hash'", "note")], id="unknown-field-warned"),
        pytest.param('{"passthrough": "up1"}', {}, "up1", [], id="passthrough-kept"),
        pytest.param('{"passthrough": null}', {}, None, [], id="passthrough-null"),
    ],
)
def test_load_state(tmp_path: Path, text: str | None, entries: dict[str, Visibility],
                    passthrough: str | tuple[str | None, str] | None, warned: list[tuple[str, str]]) -> None:
    """A valid (or missing) state file loads; an unknown entry field is a warning, not a problem."""
    if text is not None:
        put(tmp_path, STATE_FILE, text)
    state, warnings = load_state(tmp_path)
    wrapped, as_name = passthrough if isinstance(passthrough, tuple) else (passthrough, None)
    assert state == ToolState(entries=entries, passthrough=wrapped, passthrough_as=as_name)
    assert [(w.entry, w.field) for w in warnings] == warned
    assert all(w.severity == "warning" for w in warnings)


@pytest.mark.parametrize(
    ("text", "problem_entries"),
    [
        pytest.param("{oops", [None], id="invalid-json"),
        pytest.param("", [None], id="empty-file"),
        pytest.param("[]", [None], id="not-object"),
        pytest.param('{"echo": {"hot": "yes"}, "hash": {"enabled": false}}', ["'echo'"], id="non-bool-hot"),
        pytest.param('{"echo": 5, "hash": {"hidden": true}}', ["'echo'"], id="entry-not-object"),
        pytest.param('{"passthrough": 5}', [None], id="passthrough-number"),
        pytest.param('{"passthrough": ""}', [None], id="passthrough-empty"),
        pytest.param('{"passthrough": "a b"}', [None], id="passthrough-not-an-id"),
        pytest.param('{"passthrough": "a", "passthroughAs": "../x"}', [None], id="passthrough-as-not-an-id"),
    ],
)
def test_malformed_state_is_refused(tmp_path: Path, text: str, problem_entries: list[str | None]) -> None:
    """A malformed state file or entry is a ConfigError naming file and entry, never a silent default
    (a dropped `"enabled": false` would re-enable a tool)."""
    put(tmp_path, STATE_FILE, text)
    with pytest.raises(ConfigError) as exc:
        load_state(tmp_path)
    problems = problems_of(exc)
    assert [p.entry for p in problems] == problem_entries
    assert all(p.file == STATE_FILE and (p.entry is None or p.entry in str(p)) for p in problems)


# --------------------------------------------------------------------------- home


@pytest.mark.parametrize(
    ("cli", "env", "expected", "source"),
    [
        pytest.param("{t}/cli", {"TFUNNEL_HOME": "{t}/tf", "TOOLFUNNEL_HOME": "{t}/tl", "HOME": "{t}/h"},
                     "{t}/cli", "--home", id="cli-wins"),
        pytest.param("  ", {"TFUNNEL_HOME": "{t}/tf", "TOOLFUNNEL_HOME": "{t}/tl"}, "{t}/tf", "TFUNNEL_HOME",
                     id="blank-cli-skipped"),
        pytest.param(None, {"TFUNNEL_HOME": "{t}/tf", "TOOLFUNNEL_HOME": "{t}/tl"}, "{t}/tf", "TFUNNEL_HOME",
                     id="tfunnel-home-over-toolfunnel"),
        pytest.param(None, {"TFUNNEL_HOME": "", "TOOLFUNNEL_HOME": "{t}/tl", "XDG_CONFIG_HOME": "{t}/x"},
                     "{t}/tl", "TOOLFUNNEL_HOME", id="blank-tfunnel-home-skipped"),
        pytest.param(None, {"TOOLFUNNEL_HOME": " ", "XDG_CONFIG_HOME": "{t}/x", "HOME": "{t}/h"},
                     "{t}/x/tfunnel", "default", id="xdg"),
        pytest.param(None, {"XDG_CONFIG_HOME": "  ", "HOME": "{t}/h"}, "{t}/h/.config/tfunnel", "default",
                     id="blank-xdg-home-config"),
        pytest.param(None, {"HOME": "{t}/h"}, "{t}/h/.config/tfunnel", "default", id="home-config"),
    ],
)
def test_resolve_home(
    tmp_path: Path, cli: str | None, env: dict[str, str], expected: str, source: str
) -> None:
    """--home > TFUNNEL_HOME > TOOLFUNNEL_HOME > XDG_CONFIG_HOME/tfunnel > HOME/.config/tfunnel."""
    t = str(tmp_path)
    environ = {k: v.replace("{t}", t) for k, v in env.items()}
    resolved = resolve_home(cli.replace("{t}", t) if cli else cli, environ)
    assert resolved.path == Path(expected.replace("{t}", t)).resolve()
    assert resolved.source == source


SEEDED = {"toolfunnel.json", "tools/tools.register.json", "tools/scripts/a.py", "hooks/hooks.manifest.json",
          "mcp/expose.json"}
# Not in conf/ but in the package: the demo upstream the seeded expose.json attaches.
FROM_PACKAGE = {"mcp/servers/mock_upstream.py"}
NOT_SEEDED = {"tools/tools.state.json", "hooks/hooks.state.json", "tools/scripts/__pycache__/a.pyc",
              "systemd/tfunnel.service", "clients/claude.json"}


@pytest.fixture
def seed(tmp_path: Path) -> Path:
    root = tmp_path / "seed"
    for rel in SEEDED | NOT_SEEDED:
        put(root, rel, f"seed {rel}")
    return root


def files_under(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("precreate", [False, True], ids=["missing-home", "empty-home"])
def test_seed_home_seeds(tmp_path: Path, seed: Path, precreate: bool) -> None:
    """A missing or empty home is seeded, without state files, systemd/, clients/ or caches."""
    home = tmp_path / "home"
    if precreate:
        home.mkdir()
    seeding = seed_home(home, seed)
    assert seeding.fresh and set(seeding.files) == SEEDED | FROM_PACKAGE
    assert files_under(home) == SEEDED | FROM_PACKAGE
    assert (home / "tools/scripts/a.py").read_text() == "seed tools/scripts/a.py"


def test_seed_home_completes_a_home_without_overwriting(tmp_path: Path, seed: Path) -> None:
    """A home holding only `toolfunnel.json` gets the files a start needs, its own file untouched
    (the cases: tests/test_seed_complete.py)."""
    home = tmp_path / "home"
    put(home, "toolfunnel.json", '{"serverName": "mine"}')
    seeding = seed_home(home, seed)
    assert not seeding.fresh
    assert files_under(home) == SEEDED | FROM_PACKAGE
    assert (home / "toolfunnel.json").read_text() == '{"serverName": "mine"}'


# --------------------------------------------------------------------------- atomic


@pytest.mark.parametrize(
    ("old", "new"),
    [
        pytest.param(None, b"fresh", id="create"),
        pytest.param(b"old content, longer than the new", b"new", id="replace-shorter"),
        pytest.param(b"", b"x" * 100_000, id="replace-longer"),
        pytest.param(b"same", b"", id="empty"),
    ],
)
def test_write_atomic_replaces(tmp_path: Path, old: bytes | None, new: bytes) -> None:
    """write_atomic leaves exactly the new content and no temp file."""
    path = tmp_path / "sub" / "f.json"
    if old is not None:
        path.parent.mkdir()
        path.write_bytes(old)
    atomic.write_atomic(path, new)
    assert path.read_bytes() == new
    assert files_under(path.parent) == {"f.json"}


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o755], ids=oct)
def test_write_atomic_keeps_mode(tmp_path: Path, mode: int) -> None:
    """The replaced file keeps its permission bits."""
    path = tmp_path / "f"
    path.write_bytes(b"old")
    path.chmod(mode)
    atomic.write_atomic(path, b"new")
    assert stat.S_IMODE(path.stat().st_mode) == mode


@pytest.mark.parametrize("failing", ["replace", "fsync"])
def test_write_atomic_failure_keeps_old(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    """A failure mid-write leaves the old file intact and no temp file behind."""
    path = tmp_path / "f.json"
    path.write_bytes(b"old")

    def boom(*args: Any, **kwargs: Any) -> None:
        raise OSError("disk on fire")

    monkeypatch.setattr(os, failing, boom)
    with pytest.raises(OSError, match="disk on fire"):
        atomic.write_atomic(path, b"new")
    monkeypatch.undo()
    assert path.read_bytes() == b"old"
    assert files_under(tmp_path) == {"f.json"}


def test_sweep_temp_files(tmp_path: Path) -> None:
    """sweep_temp_files removes only files with the temp suffix, in every subfolder."""
    suffix = atomic.TEMP_SUFFIX
    removed = {f".a.json.1.ab{suffix}", f"tools/.r.json.2.cd{suffix}"}
    kept = {"a.json", f"tools/x{suffix}.bak", "tools/tfunnel-tmp", "tools/scripts/s.py"}
    for rel in removed | kept:
        put(tmp_path, rel, "x")
    (tmp_path / f"dir{suffix}").mkdir()
    swept = atomic.sweep_temp_files(tmp_path)
    assert {p.relative_to(tmp_path).as_posix() for p in swept} == removed
    assert files_under(tmp_path) == kept
    assert (tmp_path / f"dir{suffix}").is_dir()
    assert atomic.sweep_temp_files(tmp_path / "missing") == []


# --------------------------------------------------------------------------- check


@pytest.fixture
def seeded(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    seed_home(home, seed_dir())
    return home


def test_check_good_home(seeded: Path) -> None:
    """A freshly seeded home has no problems."""
    assert check_home(seeded) == []


def test_check_missing_script(seeded: Path) -> None:
    """A script invoke whose file is missing is one problem naming the entry and invoke.path."""
    path = seeded / REGISTER_FILE
    raw = json.loads(path.read_text())
    raw["tools"].append({"id": "ghost", "name": "Ghost",
                         "invoke": {"type": "script", "path": "tools/scripts/no.py"}})
    path.write_text(json.dumps(raw))
    [problem] = check_home(seeded)
    assert problem.file == REGISTER_FILE
    assert problem.field == "invoke.path"
    assert problem.entry == f"tools[{len(raw['tools']) - 1}] (id 'ghost')"


def test_check_reports_every_file(seeded: Path) -> None:
    """check reports settings, state and register problems together."""
    put(seeded, SETTINGS_FILE, {"httpPort": "x"})
    put(seeded, STATE_FILE, {"echo": {"hot": 1}})
    put(seeded, REGISTER_FILE, register({"id": "a"}))
    assert [(p.file, p.field) for p in check_home(seeded)] == [
        (SETTINGS_FILE, "httpPort"), (REGISTER_FILE, "name"), (STATE_FILE, "hot")]
