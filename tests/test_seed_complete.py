"""Completing a config home from the bundled `conf/`: which files, never over anything, never
through a folder that leads elsewhere (SPEC §2)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tfunnel.config.home import UNITS, HomeNotUsable, seed_dir, seed_home, units_to_seed
from tfunnel.testing.cli import run

REGISTER, EXPOSE, MANIFEST, SETTINGS = ("tools/tools.register.json", "mcp/expose.json",
                                        "hooks/hooks.manifest.json", "toolfunnel.json")


def files_under(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() or p.is_symlink()}


def put(home: Path, rel: str, text: str = "{}") -> Path:
    path = home / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.mark.parametrize(("fresh", "present", "expected"), [
    pytest.param(True, set(), [SETTINGS, REGISTER, EXPOSE, MANIFEST], id="fresh-home-gets-all"),
    pytest.param(False, {SETTINGS}, [REGISTER, EXPOSE, MANIFEST], id="only-toolfunnel-json"),
    pytest.param(False, set(), [REGISTER, EXPOSE, MANIFEST], id="non-empty-never-gets-toolfunnel-json"),
    # An established home (one config file of its own): only what a start cannot do without; a
    # deleted expose.json or manifest means none, not the demo again.
    pytest.param(False, {REGISTER}, [], id="own-register"),
    pytest.param(False, {EXPOSE}, [REGISTER], id="own-expose"),
    pytest.param(False, {REGISTER, EXPOSE, MANIFEST}, [], id="complete-home"),
    pytest.param(False, {EXPOSE, MANIFEST}, [REGISTER], id="register-missing"),
])
def test_units_to_seed(fresh: bool, present: set[str], expected: list[str]) -> None:
    """A fresh home gets every unit; a begun one (no config file but toolfunnel.json) every file
    it lacks; an established one only the register, without which no start is possible."""
    assert [u.file for u in units_to_seed(fresh, present.__contains__)] == expected


def test_units_cover_the_bundled_home() -> None:
    """Every file of conf/ that is home content belongs to one unit (a new one cannot be forgotten),
    and a fresh seed is exactly the bundled home plus the package's demo upstream."""
    seed = seed_dir()
    bundled = {p.relative_to(seed).as_posix() for p in seed.rglob("*")
               if p.is_file() and p.relative_to(seed).parts[0] not in {"systemd", "clients", "nginx"}
               and "__pycache__" not in p.parts}
    covered = {rel for rel in bundled for u in UNITS
               if rel == u.file or any(rel.startswith(d + "/") for d in u.dirs)}
    assert covered == bundled


@pytest.fixture
def seed(tmp_path: Path) -> Path:
    root = tmp_path / "seed"
    for rel in (SETTINGS, REGISTER, "tools/scripts/echo.py", "tools/scripts/_io.py", EXPOSE, MANIFEST,
                "hooks/scripts/deny.py", "tools/tools.state.json", "hooks/hooks.state.json",
                "mcp/tool-approvals.json", "systemd/x.service", "tools/scripts/__pycache__/a.pyc"):
        put(root, rel, f"seed {rel}")
    return root


MOCK = "mcp/servers/mock_upstream.py"


def test_a_home_with_only_toolfunnel_json_is_completed(tmp_path: Path, seed: Path) -> None:
    """Register with its scripts, expose.json with its demo upstream, manifest with its scripts;
    the operator's file untouched; no state file, no auth/."""
    home = tmp_path / "home"
    put(home, SETTINGS, '{"serverName": "mine"}')
    seeding = seed_home(home, seed)
    assert not seeding.fresh and seeding.refused == ()
    assert seeding.files == (REGISTER, "tools/scripts/_io.py", "tools/scripts/echo.py", EXPOSE, MOCK,
                             MANIFEST, "hooks/scripts/deny.py")
    assert files_under(home) == {SETTINGS, *seeding.files}
    assert (home / SETTINGS).read_text() == '{"serverName": "mine"}'


def test_an_own_register_gets_none_of_our_scripts(tmp_path: Path, seed: Path) -> None:
    """A home whose register is its own (its scripts folder lacking our demo scripts) is given no
    script: they would be files the operator never asked for."""
    home = tmp_path / "home"
    put(home, REGISTER, '{"version": 1, "tools": []}')
    put(home, "tools/scripts/mine.js", "mine")
    seeding = seed_home(home, seed)
    assert seeding.files == ()  # established: its expose.json and hooks, absent, mean none
    assert not (home / "tools/scripts/echo.py").exists()
    assert (home / REGISTER).read_text() == '{"version": 1, "tools": []}'


def test_a_seeded_register_gets_its_scripts_but_overwrites_none(tmp_path: Path, seed: Path) -> None:
    """The scripts a freshly seeded register names come with it. One already there that is not
    ours refuses the register (its entry would run the operator's file); one that is ours is fine."""
    home = tmp_path / "home"
    put(home, EXPOSE)
    put(home, MANIFEST)
    put(home, "tools/scripts/echo.py", "the operator's")
    seeding = seed_home(home, seed)
    assert seeding.files == () and "tools/scripts/echo.py exists" in seeding.refused[0]
    assert (home / "tools/scripts/echo.py").read_text() == "the operator's"
    (home / "tools/scripts/echo.py").write_bytes((seed / "tools/scripts/echo.py").read_bytes())
    assert seed_home(home, seed).files == (REGISTER, "tools/scripts/_io.py")


def test_a_unit_that_cannot_be_written_whole_is_not_begun(tmp_path: Path, seed: Path) -> None:
    """A file where a folder must be, or a link loop: the unit is refused, naming why, and none of
    it is written (no register naming scripts that are not there); no traceback."""
    home = tmp_path / "home"
    put(home, EXPOSE)
    put(home, MANIFEST)
    put(home, "tools/scripts", "a file, not a folder")
    seeding = seed_home(home, seed)
    assert seeding.files == () and "tools/scripts is not a folder" in seeding.refused[0]
    assert not (home / REGISTER).exists()
    looped = tmp_path / "looped"
    put(looped, EXPOSE)
    (looped / "tools").symlink_to(looped / "tools")
    seeding = seed_home(looped, seed)
    assert seeding.files == () and seeding.refused


def test_a_dangling_link_counts_as_present(tmp_path: Path, seed: Path) -> None:
    """A link where a file would go is never written through, even when it leads nowhere."""
    home = tmp_path / "home"
    put(home, EXPOSE)
    put(home, MANIFEST)
    (home / "tools").mkdir()
    target = tmp_path / "elsewhere.json"
    (home / REGISTER).symlink_to(target)
    assert seed_home(home, seed).files == ()
    assert not target.exists()


def test_a_folder_leading_outside_the_home_is_not_seeded_into(tmp_path: Path, seed: Path) -> None:
    """`tools/` a link to another folder: neither the register nor its scripts are written there,
    and the refusal says why; the other files are seeded."""
    home, outside = tmp_path / "home", tmp_path / "outside"
    outside.mkdir()
    home.mkdir()
    put(home, SETTINGS)
    (home / "tools").symlink_to(outside, target_is_directory=True)
    seeding = seed_home(home, seed)
    assert list(outside.iterdir()) == []
    assert seeding.refused == (f"not seeding {REGISTER}: tools leads outside the config home",)
    assert seeding.files == (EXPOSE, MOCK, MANIFEST, "hooks/scripts/deny.py")


def test_a_folder_linked_inside_the_home_is_fine(tmp_path: Path, seed: Path) -> None:
    """A link that stays inside the home is the operator's layout, not an escape."""
    home = tmp_path / "home"
    put(home, SETTINGS)
    (home / "real-tools").mkdir()
    (home / "tools").symlink_to(home / "real-tools", target_is_directory=True)
    seeding = seed_home(home, seed)
    assert REGISTER in seeding.files and (home / "real-tools/tools.register.json").is_file()


@pytest.mark.parametrize("layout", ["home-is-a-file", "home-under-a-file"])
def test_a_home_that_is_no_folder_is_refused(tmp_path: Path, seed: Path, layout: str) -> None:
    """A file where the home (or a folder above it) should be: a clear refusal, nothing written."""
    blocker = put(tmp_path, "blocker", "a file")
    home = blocker if layout == "home-is-a-file" else blocker / "home"
    with pytest.raises(HomeNotUsable, match="config home"):
        seed_home(home, seed)
    assert blocker.read_text() == "a file"


def _tfunnel(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run(home, *args)


def test_the_command_line_names_each_seeded_file(tmp_path: Path) -> None:
    """A completed home's start prints one line per seeded file; `check` then passes."""
    home = tmp_path / "home"
    put(home, SETTINGS, '{"serverName": "mine"}')
    done = _tfunnel(home, "check")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stderr.splitlines()
    assert f"tfunnel: config home {home.resolve()} (existing; from --home)" in lines
    for rel in (REGISTER, "tools/scripts/echo.py", EXPOSE, MOCK, MANIFEST, "hooks/scripts/deny_dangerous.py"):
        assert f"tfunnel: seeded {rel} from the bundled defaults" in lines
    assert not any("tools.state.json" in line or "auth/" in line for line in lines)
    again = _tfunnel(home, "check")
    assert "tfunnel: seeded" not in again.stderr


def test_the_command_line_refuses_a_home_that_is_a_file(tmp_path: Path) -> None:
    home = put(tmp_path, "home", "not a folder")
    done = _tfunnel(home, "check")
    assert done.returncode == 1
    assert f"tfunnel: refusing to start: config home {home} is not a directory" in done.stderr
    assert "Traceback" not in done.stderr
