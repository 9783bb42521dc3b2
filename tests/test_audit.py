"""The audit log (`tfunnel/observe/audit.py`) and the `tfunnel log` command (`tfunnel/manage/log_cmd.py`);
several writer processes on one log: tests/e2e/test_audit.py."""

from __future__ import annotations

import errno
import json
import re
from pathlib import Path
from typing import Any

import pytest
import structlog

from tfunnel.app import build, watched_files
from tfunnel.manage.log_cmd import log_command
from tfunnel.observe.audit import CONFIG_FILE, DEFAULT_PATH, DEFAULTS, AuditLog, load_log_config

TS = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")


def configure(home: Path, value: Any) -> Path:
    """Write `logs/log.config.json` (JSON, or raw text when a str) and return its path."""
    path = home / CONFIG_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(value if isinstance(value, str) else json.dumps(value), encoding="utf-8")
    return path


def records(path: Path) -> list[dict[str, Any]]:
    """Every line of a log file parsed as one JSON object."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize("config", [None, {}, {"enabled": False}, {"path": "x.jsonl"}])
def test_off_by_default_writes_nothing(tmp_path: Path, config: dict[str, Any] | None) -> None:
    """Without `enabled: true` a record creates no file and no folder."""
    if config is not None:
        configure(tmp_path, config)
    audit = AuditLog(tmp_path)
    audit.record("gate", tool="echo", decision="allow", reason="", hook=None)
    assert not audit.enabled
    assert audit.problems == []
    assert sorted(p.name for p in tmp_path.rglob("*")) == (["log.config.json", "logs"] if config is not None
                                                           else [])


def test_on_writes_one_json_line_per_record(tmp_path: Path) -> None:
    """Each record is one line `{"ts", "type", ...fields}` with a millisecond UTC `Z` timestamp."""
    configure(tmp_path, {"enabled": True})
    audit = AuditLog(tmp_path)
    assert audit.enabled
    assert audit.path == tmp_path / DEFAULT_PATH
    audit.record("gate", tool="echo", decision="deny", reason="no", hook="h1")
    audit.record("tool", name="echo", mode="gateway", ok=True, durationMs=12)
    audit.record("client", event="connect", session="s1", client="claude")
    audit.record("config", file="tools/tools.register.json", via="reload")
    got = records(audit.path)
    assert [list(r)[:2] for r in got] == [["ts", "type"]] * 4
    assert all(TS.match(r.pop("ts")) for r in got)
    assert got == [
        {"type": "gate", "tool": "echo", "decision": "deny", "reason": "no", "hook": "h1"},
        {"type": "tool", "name": "echo", "mode": "gateway", "ok": True, "durationMs": 12},
        {"type": "client", "event": "connect", "session": "s1", "client": "claude"},
        {"type": "config", "file": "tools/tools.register.json", "via": "reload"},
    ]


def test_record_is_always_one_line(tmp_path: Path) -> None:
    """Newlines, line separators and non-JSON values stay inside one line; `ts`/`type` cannot be forged."""
    configure(tmp_path, {"enabled": True})
    audit = AuditLog(tmp_path)
    audit.record("tool", text="a\nb\r\nc\u2028d", obj=object(), ts="forged", type="forged")
    lines = audit.path.read_bytes().split(b"\n")
    assert len(lines) == 2 and lines[1] == b""
    (rec,) = records(audit.path)
    assert rec["text"] == "a\nb\r\nc\u2028d"
    assert rec["type"] == "tool" and TS.match(rec["ts"])
    assert rec["obj"].startswith("<object object")


@pytest.mark.parametrize(("log_args", "expected"), [
    (None, "[redacted]"),
    (False, "[redacted]"),
    (True, {"text": "secret"}),
])
def test_redact_hides_args_unless_log_args(tmp_path: Path, log_args: bool | None, expected: Any) -> None:
    """`redact` returns the value only when `logArgs` is true."""
    configure(tmp_path, {"enabled": True} | ({} if log_args is None else {"logArgs": log_args}))
    audit = AuditLog(tmp_path)
    assert audit.log_args is bool(log_args)
    audit.record("tool", name="echo", args=audit.redact({"text": "secret"}))
    assert records(audit.path)[0]["args"] == expected


@pytest.mark.parametrize("backups", [0, 1, 3])
def test_rotation_keeps_backups_and_newest_records(tmp_path: Path, backups: int) -> None:
    """At maxBytes the file rotates to .1…; exactly `backups` old files stay; the live file is newest."""
    configure(tmp_path, {"enabled": True, "maxBytes": 200, "backups": backups})
    audit = AuditLog(tmp_path)
    for seq in range(60):
        audit.record("tool", name="echo", seq=seq)
    live = audit.path
    files = sorted(p.name for p in live.parent.iterdir() if p.name.startswith(live.name))
    assert files == [live.name] + [f"{live.name}.{i}" for i in range(1, backups + 1)]
    # Oldest backup first, then the live file: one unbroken run of sequence numbers ending at the last.
    chain = [live.with_name(f"{live.name}.{i}") for i in range(backups, 0, -1)] + [live]
    seqs = [r["seq"] for path in chain for r in records(path)]
    assert seqs == list(range(60 - len(seqs), 60))
    one = len(live.read_bytes().splitlines()[0]) + 1
    assert all(path.stat().st_size < 200 + one for path in chain)


@pytest.mark.parametrize(("text", "field", "message"), [
    ('{"enabled": "yes"}', "enabled", "must be true or false"),
    ('{"enabled": true, "maxBytes": -1}', "maxBytes", "must be an integer"),
    ('{"enabled": true, "backups": "x"}', "backups", "must be an integer"),
    ('{"enabled": true, "path": 5}', "path", "must be a non-empty string"),
    ('{"enabled": true, "logArgs": 1}', "logArgs", "must be true or false"),
    ('{"enabled": true,', None, "invalid JSON"),
    ('[{"enabled": true}]', None, "JSON object"),
])
def test_malformed_config_disables_and_names_file_and_field(
    tmp_path: Path, text: str, field: str | None, message: str
) -> None:
    """A bad JSON file or a wrong-typed field turns the log off and reports file and field."""
    configure(tmp_path, text)
    audit = AuditLog(tmp_path)
    assert not audit.enabled
    (problem,) = audit.problems
    assert (problem.file, problem.field) == (CONFIG_FILE, field)
    assert message in problem.message and CONFIG_FILE in str(problem)
    audit.record("tool", name="echo")
    assert not (tmp_path / DEFAULT_PATH).exists()


def test_relative_path_is_against_home_and_absolute_as_is(tmp_path: Path) -> None:
    """A relative `path` resolves under the home; an absolute one is used unchanged."""
    home = tmp_path / "home"
    elsewhere = tmp_path / "var" / "audit.jsonl"
    for value, expected in [("custom/a.jsonl", home / "custom" / "a.jsonl"), (str(elsewhere), elsewhere)]:
        configure(home, {"enabled": True, "path": value})
        audit = AuditLog(home)
        assert audit.path == expected
        audit.record("config", file=CONFIG_FILE, via="cli")
        assert [r["type"] for r in records(expected)] == ["config"]


def test_live_reload_never_switches_a_good_log_config_off(home: Path) -> None:
    """In a gateway: off → on applies; malformed or deleted keeps the last good (on) with an error
    naming the file; a valid file again applies and clears the error."""
    gateway = build(home)
    reload = watched_files(gateway)[home / CONFIG_FILE]
    assert not gateway.audit.enabled
    configure(home, {"enabled": True})
    reload()
    assert gateway.audit.enabled and gateway.live.errors == {}
    for broken in ('{"enabled": true, "backups": -2}', '{"enabled": fa', ""):
        configure(home, broken)
        reload()
        assert gateway.audit.enabled, broken
        assert CONFIG_FILE in gateway.live.errors[CONFIG_FILE]
    (home / CONFIG_FILE).unlink()
    reload()
    assert gateway.audit.enabled and "is missing" in gateway.live.errors[CONFIG_FILE]
    configure(home, {"enabled": False})
    reload()
    assert not gateway.audit.enabled and gateway.live.errors == {}


def test_a_broken_log_config_at_start_means_off_loudly(home: Path) -> None:
    """At start a malformed log config does not refuse the gateway: the audit log is off and the
    error (file, line, column) is kept for /health."""
    configure(home, '{"enabled": true,\n "path": }')
    gateway = build(home)
    assert not gateway.audit.enabled
    assert "logs/log.config.json: invalid JSON at line 2 column 10" in gateway.live.errors[CONFIG_FILE]
    assert "the audit log is off" in gateway.live.errors[CONFIG_FILE]


def _dir_path(tmp_path: Path) -> str:
    (tmp_path / "adir").mkdir()
    return "adir"


def _under_a_file(tmp_path: Path) -> str:
    (tmp_path / "afile").write_text("x")
    return "afile/log.jsonl"


@pytest.mark.parametrize("make", [_dir_path, _under_a_file])
def test_write_failure_warns_once_and_does_not_raise(tmp_path: Path, make: Any) -> None:
    """An unwritable path never raises from `record`; one warning until a write succeeds again."""
    configure(tmp_path, {"enabled": True, "path": make(tmp_path), "maxBytes": 1})
    audit = AuditLog(tmp_path)
    with structlog.testing.capture_logs() as logs:
        audit.record("tool", name="a")
        audit.record("tool", name="b")
    assert [entry["log_level"] for entry in logs] == ["warning"]
    assert logs[0]["path"] == str(audit.path)
    if make is _dir_path:  # a directory at the log path is never rotated away
        assert (tmp_path / "adir").is_dir() and not (tmp_path / "adir.1").exists()
    configure(tmp_path, {"enabled": True, "path": "ok.jsonl"})
    audit.apply(load_log_config(tmp_path)[0])
    audit.record("tool", name="c")
    assert [r["name"] for r in records(audit.path)] == ["c"]


def test_disk_full_drops_the_record_without_raising(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ENOSPC from the append is one warning, not an exception; the next good write lands."""
    configure(tmp_path, {"enabled": True})
    audit = AuditLog(tmp_path)

    def full(fd: int, data: Any) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    with structlog.testing.capture_logs() as logs, monkeypatch.context() as m:
        m.setattr("tfunnel.observe.audit.os.write", full)
        audit.record("tool", name="a")
        audit.record("tool", name="b")
    assert [(e["log_level"], e["error"]) for e in logs] == [("warning", "[Errno 28] No space left on device")]
    audit.record("tool", name="c")
    assert [r["name"] for r in records(audit.path)] == ["c"]


def test_log_command_round_trip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """on/status/tail/off through `log_command`, keeping other fields and unknown keys verbatim."""
    cfg = configure(tmp_path, {"maxBytes": 5000, "custom": {"keep": [1, 2]}})
    log_path = (tmp_path / DEFAULT_PATH).absolute()

    assert log_command(tmp_path, "on") == 0
    assert capsys.readouterr().out == f"audit log: on ({log_path})\n"
    assert json.loads(cfg.read_text()) == {"maxBytes": 5000, "custom": {"keep": [1, 2]}, "enabled": True}
    audit = AuditLog(tmp_path)
    for seq in range(3):
        audit.record("tool", name="echo", seq=seq)

    assert log_command(tmp_path, "status") == 0
    out = capsys.readouterr().out
    for expected in ("audit log: on", f"path: {log_path}", "maxBytes: 5000", "backups: 3",
                     "logArgs: false", f"size: {log_path.stat().st_size} bytes", "records: 4"):
        assert expected in out

    assert log_command(tmp_path, "tail", lines=2) == 0
    assert [json.loads(line)["seq"] for line in capsys.readouterr().out.splitlines()] == [1, 2]

    assert log_command(tmp_path, "off") == 0
    assert capsys.readouterr().out == f"audit log: off ({log_path})\n"
    assert json.loads(cfg.read_text()) == {"maxBytes": 5000, "custom": {"keep": [1, 2]}, "enabled": False}
    audit.apply(load_log_config(tmp_path)[0])
    audit.record("tool", name="after-off")
    got = records(log_path)
    assert [(r["type"], r.get("change"), r.get("via")) for r in (got[0], got[-1])] == [
        ("config", "on", "cli"), ("config", "off", "cli")]
    assert got[0]["file"] == CONFIG_FILE and len(got) == 5


def test_log_on_creates_missing_config_with_defaults(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`log on` without a config file writes every default with `enabled: true`."""
    assert log_command(tmp_path, "on") == 0
    assert json.loads((tmp_path / CONFIG_FILE).read_text()) == DEFAULTS | {"enabled": True}
    assert [r["change"] for r in records(tmp_path / DEFAULT_PATH)] == ["on"]


@pytest.mark.parametrize("action", ["status", "tail"])
def test_status_and_tail_without_a_log_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], action: str
) -> None:
    """With no config and no log file, status says off and tail prints nothing; both exit 0."""
    assert log_command(tmp_path, action) == 0
    out = capsys.readouterr().out
    if action == "tail":
        assert out == ""
    else:
        assert "audit log: off" in out and "records: 0" in out
    assert not (tmp_path / "logs").exists()


@pytest.mark.parametrize("action", ["on", "off", "status", "tail"])
def test_log_command_refuses_a_malformed_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], action: str
) -> None:
    """A malformed config: exit 1, problems on stderr naming file and field, the file untouched."""
    cfg = configure(tmp_path, '{"enabled": "yes", "other": 1}')
    before = cfg.read_bytes()
    assert log_command(tmp_path, action) == 1
    assert f"{CONFIG_FILE}: field 'enabled'" in capsys.readouterr().err
    assert cfg.read_bytes() == before
    assert not (tmp_path / DEFAULT_PATH).exists()


def test_log_command_rejects_an_unknown_action(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown action is a usage error (exit 2) and touches nothing."""
    assert log_command(tmp_path, "rotate") == 2
    assert "unknown action 'rotate'" in capsys.readouterr().err
    assert load_log_config(tmp_path)[2] == {} and not (tmp_path / "logs").exists()


def test_a_lock_that_cannot_be_had_still_rotates(tmp_path: Path) -> None:
    """Something in the lock file's place (a folder) does not stop the log: it rotates unlocked."""
    configure(tmp_path, {"enabled": True, "maxBytes": 200, "backups": 2})
    audit = AuditLog(tmp_path)
    audit.path.parent.mkdir(parents=True, exist_ok=True)
    (audit.path.parent / f".{audit.path.name}.lock").mkdir()
    for seq in range(30):
        audit.record("tool", name="echo", seq=seq)
    assert records(audit.path)[-1]["seq"] == 29
    assert audit.path.with_name(audit.path.name + ".1").exists()
