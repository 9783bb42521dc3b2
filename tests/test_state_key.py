"""The shared `requestState` key (`toolfunnel.json` `stateKeyFile`, `home/state_key.py`): what
a key file may be, its creation, rotation with the previous key accepted for one expiry window,
and two instances (two sealers on one file) opening each other's tokens."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import structlog

from tfunnel.errors import ConfigError
from tfunnel.home import state_key
from tfunnel.home.state_key import KeyFile, StateKeyError
from tfunnel.protocol.mrtr import RequestStateError, Sealer, binding
from tfunnel.testing.cli import run

BIND = binding("tools/call", {"name": "deploy", "arguments": {}})
TTL = 600.0


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def key_file(tmp_path: Path, data: bytes = b"k" * 32, mode: int = 0o600) -> Path:
    path = tmp_path / "state.key"
    path.write_bytes(data)
    path.chmod(mode)
    return path


def _fifo(tmp_path: Path) -> Path:
    path = tmp_path / "state.key"
    os.mkfifo(path, 0o600)
    return path


def _folder(tmp_path: Path) -> Path:
    path = tmp_path / "state.key"
    path.mkdir(mode=0o700)
    return path


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        pytest.param(lambda p: key_file(p, mode=0o644), "group or others may access it (mode 0644)",
                     id="world-readable"),
        pytest.param(lambda p: key_file(p, mode=0o640), "(mode 0640)", id="group-readable"),
        pytest.param(lambda p: key_file(p, mode=0o602), "(mode 0602)", id="others-writable"),
        pytest.param(lambda p: key_file(p, b"k" * 31), "holds 31 bytes; a key file holds 32 to 4096",
                     id="short"),
        pytest.param(lambda p: key_file(p, b""), "holds 0 bytes", id="empty"),
        pytest.param(lambda p: key_file(p, b"k" * 4097), "holds 4097+ bytes", id="long"),
        pytest.param(lambda p: p / "missing.key", "cannot be read", id="missing"),
        pytest.param(_folder, "is not a regular file", id="folder"),
        pytest.param(_fifo, "is not a regular file", id="fifo-never-hangs"),
    ],
)
def test_a_key_file_that_cannot_be_the_key_is_refused_naming_why(
        tmp_path: Path, make: Callable[[Path], Path], needle: str) -> None:
    path = make(tmp_path)
    with pytest.raises(StateKeyError) as info:
        state_key.read(path)
    assert needle in str(info.value)
    assert str(path) in str(info.value)


def test_a_missing_key_file_is_created_whole_with_mode_0600(tmp_path: Path) -> None:
    path = tmp_path / "keys" / "state.key"
    key = state_key.ensure(path)
    assert len(key) == 32 and path.read_bytes() == key
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert state_key.ensure(path) == key  # made once: a second start reads it
    assert [p.name for p in path.parent.iterdir()] == ["state.key"]  # no temp file left


def test_a_key_made_by_another_instance_first_is_kept(tmp_path: Path) -> None:
    """Two instances starting together: the one that links second keeps the first one's key."""
    path = tmp_path / "state.key"
    theirs = key_file(tmp_path, b"t" * 32).read_bytes()
    state_key._create(path)  # what the slower instance does when the name already exists
    assert path.read_bytes() == theirs


def sealers(path: Path, wall: Clock, mono: Clock) -> tuple[Sealer, Sealer]:
    """Two instances on one key file."""
    a = KeyFile(path, ttl_s=TTL, wall=wall, monotonic=mono)
    b = KeyFile(path, ttl_s=TTL, wall=wall, monotonic=mono)
    return Sealer(keys=a, ttl_s=TTL, clock=wall), Sealer(keys=b, ttl_s=TTL, clock=wall)


def test_instances_sharing_the_file_open_each_others_tokens(tmp_path: Path) -> None:
    path = key_file(tmp_path)
    wall, mono = Clock(os.path.getmtime(path)), Clock(0.0)
    a, b = sealers(path, wall, mono)
    assert b.open(a.seal(BIND, approved=["q1"]), BIND).approved == ("q1",)
    assert a.open(b.seal(BIND), BIND).binding == BIND
    with pytest.raises(RequestStateError, match="bad signature"):
        Sealer(ttl_s=TTL, clock=wall).open(a.seal(BIND), BIND)  # a process of its own key


def test_after_a_rotation_old_tokens_open_for_one_window_and_new_ones_everywhere(tmp_path: Path) -> None:
    path = key_file(tmp_path)
    wall, mono = Clock(os.path.getmtime(path)), Clock(0.0)
    a, b = sealers(path, wall, mono)
    before = a.seal(BIND)
    state_key.rotate(path)
    rotated_at = (path.parent / "state.key.previous").stat().st_mtime
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE((path.parent / "state.key.previous").stat().st_mode) == 0o600
    assert (path.parent / "state.key.previous").read_bytes() == b"k" * 32
    assert path.read_bytes() != b"k" * 32
    wall.now = rotated_at + 1
    mono.now += state_key.LOOK_EVERY_S  # a looks again and seals with the new key
    after = a.seal(BIND)
    # b has not looked yet: a token it cannot open makes it look at once.
    assert b.open(after, BIND).binding == BIND
    assert b.open(before, BIND).binding == BIND  # sealed before the rotation, still valid
    # The old key is accepted for the tokens' lifetime (plus slack), then no more.
    wall.now = rotated_at + TTL + state_key.SLACK_S + 1
    forged_late = Sealer(b"k" * 32, ttl_s=TTL, clock=wall).seal(BIND)  # a token of the old key
    with pytest.raises(RequestStateError, match="bad signature"):
        b.open(forged_late, BIND)
    assert a.open(b.seal(BIND), BIND).binding == BIND


def test_an_unusable_file_at_runtime_leaves_the_last_good_key_in_force(tmp_path: Path) -> None:
    path = key_file(tmp_path)
    wall, mono = Clock(0.0), Clock(0.0)
    a, b = sealers(path, wall, mono)
    token = a.seal(BIND)
    path.write_bytes(b"half")  # an editor's half-written file
    mono.now += 10
    with structlog.testing.capture_logs() as logged:
        assert b.open(token, BIND).binding == BIND
        assert a.open(b.seal(BIND), BIND).binding == BIND
        for _ in range(20):  # forged tokens make it look again at once: said once, not per token
            with pytest.raises(RequestStateError):
                b.open(Sealer(b"f" * 32, ttl_s=TTL, clock=wall).seal(BIND), BIND)
    assert sum(e["event"].startswith("state key file unusable") for e in logged) == 2  # once each
    path.chmod(0o644)
    mono.now += 10
    assert b.open(a.seal(BIND), BIND).binding == BIND


def test_rotation_refuses_an_unusable_current_key_and_writes_nothing(tmp_path: Path) -> None:
    path = key_file(tmp_path, mode=0o644)
    with pytest.raises(StateKeyError, match="mode 0644"):
        state_key.rotate(path)
    assert not (tmp_path / "state.key.previous").exists()
    assert path.read_bytes() == b"k" * 32


def test_open_at_start_names_the_setting(tmp_path: Path) -> None:
    key_file(tmp_path, mode=0o644)
    with pytest.raises(ConfigError) as info:
        KeyFile.open(tmp_path, "state.key")
    [problem] = info.value.problems
    assert (problem.file, problem.field) == ("toolfunnel.json", "stateKeyFile")
    assert "mode 0644" in problem.message


def set_key_file(home: Path, value: object) -> None:
    path = home / "toolfunnel.json"
    settings = json.loads(path.read_text())
    settings["stateKeyFile"] = value
    path.write_text(json.dumps(settings))


def tfunnel(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run(home, *args)


def test_check_and_serve_refuse_a_key_file_others_can_read(home: Path) -> None:
    set_key_file(home, "state.key")
    key_file(home, mode=0o644)
    checked = tfunnel(home, "check")
    assert checked.returncode == 1
    assert "stateKeyFile" in checked.stdout and "mode 0644" in checked.stdout
    served = tfunnel(home, "serve", "--http", "--port", "0")
    assert served.returncode == 1
    assert "stateKeyFile" in served.stderr and "chmod 600" in served.stderr


def test_check_reports_a_setting_of_the_wrong_type(home: Path) -> None:
    set_key_file(home, 7)
    checked = tfunnel(home, "check")
    assert checked.returncode == 1
    assert "stateKeyFile" in checked.stdout and "non-empty string" in checked.stdout


def test_the_rotate_command(home: Path) -> None:
    assert tfunnel(home, "state-key", "rotate").returncode == 1  # no stateKeyFile set
    set_key_file(home, "secrets/state.key")
    assert tfunnel(home, "check").returncode == 0  # missing: it is made at start
    state_key.ensure(home / "secrets" / "state.key")
    old = (home / "secrets" / "state.key").read_bytes()
    rotated = tfunnel(home, "state-key", "rotate")
    assert rotated.returncode == 0, rotated.stderr
    assert "state.key.previous" in rotated.stdout
    assert (home / "secrets" / "state.key.previous").read_bytes() == old
    assert (home / "secrets" / "state.key").read_bytes() != old
