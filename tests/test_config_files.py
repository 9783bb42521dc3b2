"""The one reading rule (`config.files`) and unknown-field warnings, as pure tables over files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import structlog

from tfunnel.config.expose import EXPOSE
from tfunnel.config.files import ConfigFile, LiveFiles, read_config
from tfunnel.config.load import REGISTER, SETTINGS, STATE
from tfunnel.gate.manifest import HOOK_STATE, MANIFEST
from tfunnel.home.files import read_home
from tfunnel.observe.audit import LOG_CONFIG

SHELL = {"type": "shell", "command": "true"}
HOOK = {"id": "h", "event": "PreToolUse", "matcher": "*", "command": "true", "enabled": True}
UPSTREAM = {"id": "a", "command": "mcp-a"}


def put(home: Path, spec: ConfigFile[Any], value: Any) -> Path:
    """Write `value` (JSON, or raw text/bytes as given) to the file `spec` describes."""
    path = home / spec.name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(value, bytes):
        path.write_bytes(value)
    else:
        path.write_text(value if isinstance(value, str) else json.dumps(value), encoding="utf-8")
    return path


# --------------------------------------------------------------------------- unknown fields

UNKNOWN: list[tuple[str, ConfigFile[Any], Any, str | None, str, str | None]] = [
    # id, file, document, entry, field, nearest known field (None: nothing is close)
    ("settings-top", SETTINGS, {"serverNmae": "gw"}, None, "serverNmae", "serverName"),
    ("settings-gate", SETTINGS, {"gate": {"askFalback": "deny"}}, "gate", "askFalback", "askFallback"),
    ("settings-limits", SETTINGS, {"limits": {"toolTimeout": 5}}, "limits", "toolTimeout", "toolTimeoutS"),
    ("settings-requires", SETTINGS, {"requires": [{"command": "git", "wyh": "vcs"}]}, "requires[0]", "wyh",
     "why"),
    ("register-top", REGISTER, {"version": 1, "tool": []}, None, "tool", "tools"),
    ("register-entry", REGISTER, {"tools": [{"id": "x", "name": "X", "summry": "s", "invoke": SHELL}]},
     "tools[0] (id 'x')", "summry", "summary"),
    ("register-invoke", REGISTER, {"tools": [{"id": "x", "name": "X", "invoke": {**SHELL, "comand": "t"}}]},
     "tools[0] (id 'x')", "invoke.comand", "command"),
    ("register-no-near", REGISTER, {"tools": [{"id": "x", "name": "X", "invoke": SHELL, "zzz": 1}]},
     "tools[0] (id 'x')", "zzz", None),
    ("state-entry", STATE, {"hash": {"hidden": True, "hto": True}}, "'hash'", "hto", "hot"),
    ("manifest-top", MANIFEST, {"version": 1, "hooks": [], "hookDir": "/x"}, None, "hookDir", "hooksDir"),
    ("manifest-row", MANIFEST, {"hooks": [{**HOOK, "failClosd": True}]}, "hooks[0] (id 'h')", "failClosd",
     "failClosed"),
    ("expose-top", EXPOSE, {"version": 1, "upstreams": [], "exposed": []}, None, "exposed", "expose"),
    ("expose-upstream", EXPOSE, {"upstreams": [{**UPSTREAM, "timeoutMS": 5}]}, "upstreams[0] (id 'a')",
     "timeoutMS", "timeoutMs"),
    ("expose-restart", EXPOSE, {"upstreams": [{**UPSTREAM, "restart": {"windowSecs": 5}}]},
     "upstreams[0] (id 'a')", "restart.windowSecs", "windowS"),
    ("expose-entry", EXPOSE, {"upstreams": [UPSTREAM], "expose": [{"upstream": "a", "tool": "t",
                                                                    "categroy": "x"}]},
     "expose[0] ('a', 't')", "categroy", "category"),
    ("log-config", LOG_CONFIG, {"enabled": False, "maxByte": 5}, None, "maxByte", "maxBytes"),
]


@pytest.mark.parametrize(("spec", "document", "entry", "field", "nearest"), [u[1:] for u in UNKNOWN],
                         ids=[u[0] for u in UNKNOWN])
def test_an_unknown_field_is_a_warning_naming_the_nearest_known_one(
    tmp_path: Path, spec: ConfigFile[Any], document: Any, entry: str | None, field: str, nearest: str | None
) -> None:
    """Every file kind: an unknown field still loads, with one warning naming file, entry, field
    and (when one is close) the nearest known field."""
    put(tmp_path, spec, document)
    reading = read_config(tmp_path, spec)
    assert reading.kind == "valid", reading.problems
    [warning] = reading.warnings
    assert (warning.file, warning.entry, warning.field) == (spec.name, entry, field)
    assert warning.severity == "warning"
    hint = f"did you mean {nearest!r}?"
    assert (hint in str(warning)) is (nearest is not None), str(warning)
    assert ("did you mean" in str(warning)) is (nearest is not None)


KNOWN_IGNORED: list[tuple[str, ConfigFile[Any], Any]] = [
    ("expose-readme", EXPOSE, {"version": 1, "_README": "ToolFunnel's note", "upstreams": [
        {**UPSTREAM, "_note": "x", "restart": {"_why": "y"}}], "expose": []}),
    ("register-drift-fields", REGISTER, {"tools": [{"id": "x", "name": "X", "invoke": SHELL,
                                                    "path": "x.js", "covers": ["x.js"]}]}),
    ("manifest-ui-row", MANIFEST, {"hooks": [{"event": "PreToolUse", "matcher": "x", "command": "true",
                                              "enabled": True, "script": "scripts/x.js"}]}),
    ("state-passthrough", STATE, {"passthrough": "a", "hash": {"enabled": False}}),
    ("hook-state-wrapped", HOOK_STATE, {"enabled": {"h": True}}),
    ("settings-all", SETTINGS, {"serverName": "s", "serverVersion": "1", "clientName": "c",
                                "clientVersion": "1", "httpPort": 1, "uiPort": 2, "serveLegacy": True,
                                "upstreamInstructionsMaxChars": 500,
                                "requires": [{"command": "git", "versionArg": "--version", "min": "2",
                                              "why": "vcs"}], "gate": {"askFallback": "deny"},
                                "limits": {"shutdownGraceS": 1}}),
]


@pytest.mark.parametrize(("spec", "document"), [k[1:] for k in KNOWN_IGNORED],
                         ids=[k[0] for k in KNOWN_IGNORED])
def test_toolfunnel_fields_and_comments_are_known(tmp_path: Path, spec: ConfigFile[Any],
                                                  document: Any) -> None:
    """Fields ToolFunnel writes (`_README`-style comments, drift-check `path`/`covers`, UI rows) load
    without a warning."""
    put(tmp_path, spec, document)
    reading = read_config(tmp_path, spec)
    assert (reading.kind, reading.warnings) == ("valid", ())


def test_read_home_collects_every_files_warnings_and_problems(tmp_path: Path) -> None:
    """`read_home` is the one call for a home's warnings (and problems), file by file."""
    put(tmp_path, SETTINGS, {"gate": {"askFalback": "deny"}})
    put(tmp_path, REGISTER, {"tools": [], "descripton": "x"})
    put(tmp_path, STATE, "{")
    home = read_home(tmp_path)
    assert [(w.file, w.field) for w in home.warnings] == [(SETTINGS.name, "askFalback"),
                                                           (REGISTER.name, "descripton")]
    assert [p.file for p in home.problems] == [STATE.name]


# --------------------------------------------------------------------------- classification

GOOD: dict[str, Any] = {
    STATE.name: {"danger": {"enabled": False}},
    HOOK_STATE.name: {"h": True},
    MANIFEST.name: {"version": 1, "hooks": [HOOK]},
    REGISTER.name: {"version": 1, "tools": [{"id": "x", "name": "X", "invoke": SHELL}]},
}
BAD_ENTRY: dict[str, Any] = {
    STATE.name: {"danger": {"enabled": "no"}, "hash": {"hot": True}},
    HOOK_STATE.name: {"h": "yes"},
    MANIFEST.name: {"version": 1, "hooks": [HOOK, {**HOOK, "id": "h2", "timeout": "soon"}]},
    REGISTER.name: {"version": 1, "tools": [{"id": "x", "name": 5, "invoke": SHELL}]},
}


def _directory(path: Path, spec: ConfigFile[Any]) -> None:
    path.mkdir(parents=True)


# (A file without read permission is "unreadable" too, but the tests run as root, who reads it
# anyway; a directory and bytes that are not UTF-8 make the same outcome for every user.)
CASES = [  # content (or a maker), kind, text in the problem
    pytest.param(None, "missing", "", id="missing"),
    pytest.param(_directory, "unreadable", "cannot read", id="directory"),
    pytest.param(b'{"h": tr\xff\xfeue}', "unreadable", "not UTF-8", id="not-utf8"),
    pytest.param("", "malformed", "is empty", id="empty"),
    pytest.param("  \n", "malformed", "is empty", id="whitespace"),
    pytest.param("half", "malformed", "invalid JSON at line", id="half"),
    pytest.param("[true]", "malformed", "JSON object at the top level", id="not-an-object"),
    pytest.param("bad-entry", "malformed", "", id="bad-entry"),
    pytest.param("good", "valid", "", id="valid"),
    pytest.param("{}", "valid", "", id="empty-document"),
]


@pytest.mark.parametrize("spec", [STATE, HOOK_STATE, MANIFEST, REGISTER], ids=lambda s: s.name)
@pytest.mark.parametrize(("content", "kind", "text"), CASES)
def test_read_config_classifies_every_outcome(
    tmp_path: Path, spec: ConfigFile[Any], content: Any, kind: str, text: str
) -> None:
    """missing / unreadable (a directory, not UTF-8, no permission) / malformed (empty, cut
    mid-document, wrong top level, one bad entry) / valid; problems name the file (and line and
    column for a syntax error)."""
    path = tmp_path / spec.name
    if callable(content):
        content(path, spec)
    elif content == "half":
        good = json.dumps(GOOD[spec.name], indent=2)
        put(tmp_path, spec, good[: len(good) // 2])
    elif content in ("good", "bad-entry"):
        put(tmp_path, spec, GOOD[spec.name] if content == "good" else BAD_ENTRY[spec.name])
    elif content is not None:
        put(tmp_path, spec, content)
    reading = read_config(tmp_path, spec)
    assert reading.kind == kind, reading.problems
    if kind == "valid" or (kind == "missing" and spec.absent is not None):
        assert reading.problems == () and reading.value is not None
    else:
        assert reading.problems and all(p.file == spec.name for p in reading.problems)
        assert text in str(reading.problems[0]) and spec.name in str(reading.problems[0])
        assert reading.value is None  # never a silent default: a start refuses it


def test_a_bad_entry_names_the_entry_and_field(tmp_path: Path) -> None:
    """One malformed overlay entry makes the whole file malformed, naming the entry and field."""
    put(tmp_path, STATE, BAD_ENTRY[STATE.name])
    [problem] = read_config(tmp_path, STATE).problems
    assert (problem.entry, problem.field) == ("'danger'", "enabled")


# --------------------------------------------------------------------------- the reload rule


@pytest.mark.parametrize(("breaks", "says"), [
    ("remove", "is missing (deleted while running)"),
    ("directory", "cannot read"),
    ("truncate", "is empty"),
    ("half", "invalid JSON at line 1 column"),
    ("bad-entry", "field 'enabled': must be true or false"),
])
def test_reread_keeps_the_last_good_version(tmp_path: Path, breaks: str, says: str) -> None:
    """A live file that goes missing, unreadable or malformed is refused (None: the last good stays)
    with an error keyed by the file; valid again, it applies and the error clears."""
    path = put(tmp_path, STATE, GOOD[STATE.name])
    files = LiveFiles(tmp_path, [read_config(tmp_path, STATE)])
    if breaks == "remove":
        path.unlink()
    elif breaks == "directory":
        path.unlink()
        path.mkdir()
    elif breaks == "truncate":
        path.write_text("")
    elif breaks == "half":
        path.write_text('{"danger": {"enab')
    else:
        put(tmp_path, STATE, BAD_ENTRY[STATE.name])
    assert files.reread(STATE) is None
    assert says in files.errors[STATE.name] and STATE.name in files.errors[STATE.name]
    assert "the last good version stays in force" in files.errors[STATE.name]
    if path.is_dir():
        path.rmdir()
    put(tmp_path, STATE, {})
    state = files.reread(STATE)
    assert state is not None and state.entries == {} and files.errors == {}


def test_a_file_that_never_existed_stays_cleared(tmp_path: Path) -> None:
    """SIGHUP on a home without a state file changes nothing: still absent is no error. Once the
    file was read, deleting it is one."""
    files = LiveFiles(tmp_path, [read_config(tmp_path, STATE)])
    assert files.reread(STATE) is not None and files.errors == {}
    put(tmp_path, STATE, {})
    assert files.reread(STATE) is not None
    (tmp_path / STATE.name).unlink()
    assert files.reread(STATE) is None and STATE.name in files.errors


def test_a_start_fallback_file_recovers_by_deletion(tmp_path: Path) -> None:
    """A log config broken at start is in `errors` (the log is off); deleting it clears the error,
    since off is also what a missing file means."""
    put(tmp_path, LOG_CONFIG, "{")
    files = LiveFiles(tmp_path, [read_config(tmp_path, LOG_CONFIG)])
    assert "the audit log is off" in files.errors[LOG_CONFIG.name]
    (tmp_path / LOG_CONFIG.name).unlink()
    config = files.reread(LOG_CONFIG)
    assert config is not None and not config.enabled and files.errors == {}


def test_warnings_are_logged_once_each(tmp_path: Path) -> None:
    """A warning is logged when it first appears (start or reload), not again for an unchanged file;
    `warnings()` lists those of the versions in force."""
    put(tmp_path, STATE, {"hash": {"hto": True}})
    with structlog.testing.capture_logs() as logs:
        files = LiveFiles(tmp_path, [read_config(tmp_path, STATE)])
        files.reread(STATE)
        files.reread(STATE)
        put(tmp_path, STATE, {"hash": {"hto": True}, "echo": {"hiden": True}})
        files.reread(STATE)
    warned = [e["warning"] for e in logs if e["event"] == "config warning"]
    assert len(warned) == 2 and "'hto'" in warned[0] and "'hiden'" in warned[1]
    assert [w.field for w in files.warnings()] == ["hto", "hiden"]
