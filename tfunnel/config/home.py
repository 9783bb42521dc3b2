"""Where the config home is, and completing it from the bundled `conf/`."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import tfunnel
from tfunnel.errors import TfunnelError

# State files record what an operator did; a home never starts with them.
_STATE_FILES = frozenset({"tools.state.json", "hooks.state.json", "tool-approvals.json"})


@dataclass(frozen=True)
class Unit:
    """One config file of the seed, and what seeding it brings along: the seed folders whose
    files it names (`dirs`), and package files it names (`package`: home path -> package path).
    What a unit brings comes only with its file: a home whose own register names its own scripts
    is never given ours."""

    file: str
    dirs: tuple[str, ...] = ()
    package: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


# Every file of the seed belongs to one unit (a test keeps conf/ and this table equal).
UNITS: tuple[Unit, ...] = (
    Unit("toolfunnel.json"),
    Unit("tools/tools.register.json", ("tools/scripts",)),
    Unit("mcp/expose.json", package={"mcp/servers/mock_upstream.py": ("testing", "mock_upstream.py")}),
    Unit("hooks/hooks.manifest.json", ("hooks/scripts",)),
)
# Its absence means every default, and a home that lacks it is one someone started without it.
_OPTIONAL = frozenset({"toolfunnel.json"})
# The one file whose absence refuses a start: an established home that lacks it gets it. (A missing
# expose.json or hook manifest there means none, as an operator who deleted one meant: seeding
# the demo upstream back would start a process nobody asked for.)
_REQUIRED = frozenset({"tools/tools.register.json"})


def units_to_seed(fresh: bool, present: Callable[[str], bool]) -> tuple[Unit, ...]:
    """Which units a home gets (`present(file)`: whether anything, even a dangling link, is there):
    a fresh (missing or empty) home every unit; a begun one — holding none of the seed's config
    files but `toolfunnel.json`, as a packed or hand-started home begins — every file it lacks; an
    established one only the files a start cannot do without."""
    if fresh:
        return UNITS
    begun = not any(present(u.file) for u in UNITS if u.file not in _OPTIONAL)
    return tuple(u for u in UNITS if u.file not in _OPTIONAL and not present(u.file)
                 and (begun or u.file in _REQUIRED))


@dataclass(frozen=True)
class Seeding:
    """What `seed_home` did: `fresh` (a missing or empty home, seeded whole), the files it wrote
    (relative, in order), and why it left a file out (a folder that leads outside the home)."""

    fresh: bool
    files: tuple[str, ...] = ()
    refused: tuple[str, ...] = ()


class HomeNotUsable(TfunnelError):
    """The config home path is not a folder (a file, or under one): nothing can be seeded or read."""


@dataclass(frozen=True)
class ResolvedHome:
    path: Path
    source: str  # "--home", "TFUNNEL_HOME", "TOOLFUNNEL_HOME" or "default"


def resolve_home(cli_home: str | None, environ: Mapping[str, str]) -> ResolvedHome:
    """Apply `--home` > `TFUNNEL_HOME` > `TOOLFUNNEL_HOME` > `${XDG_CONFIG_HOME:-~/.config}/tfunnel`."""
    candidates = (
        ("--home", cli_home),
        ("TFUNNEL_HOME", environ.get("TFUNNEL_HOME")),
        ("TOOLFUNNEL_HOME", environ.get("TOOLFUNNEL_HOME")),
    )
    for source, value in candidates:
        if value is not None and value.strip():
            return ResolvedHome(Path(value.strip()).expanduser().resolve(), source)
    xdg = environ.get("XDG_CONFIG_HOME", "").strip()
    base = Path(xdg) if xdg else Path(environ.get("HOME", str(Path.home()))) / ".config"
    return ResolvedHome((base / "tfunnel").expanduser().resolve(), "default")


def seed_dir() -> Path:
    """The bundled seed home: `tfunnel/_seed` in a wheel, the repository's `conf/` in a checkout."""
    package = Path(tfunnel.__file__).resolve().parent
    bundled = package / "_seed"
    return bundled if bundled.is_dir() else package.parent / "conf"


def seed_home(home: Path, seed: Path) -> Seeding:
    """Complete `home` from `seed`, file by file, never overwriting (not even a dangling link):
    a missing or empty home gets everything; another home the start-needed files it lacks
    (`units_to_seed`). State files and `auth/` are never seeded, and nothing is written through a
    folder that leads outside the home."""
    if os.path.lexists(home) and not home.is_dir():
        raise HomeNotUsable(f"config home {home} is not a directory")
    try:
        fresh = not home.exists() or not any(home.iterdir())
        home.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise HomeNotUsable(f"config home {home} cannot be used: {exc.strerror or exc}") from exc
    real = home.resolve()
    package = Path(tfunnel.__file__).resolve().parent
    files: list[str] = []
    refused: list[str] = []
    for unit in units_to_seed(fresh, lambda rel: os.path.lexists(home / rel)):
        sources = [(unit.file, seed / unit.file)]
        sources += [(src.relative_to(seed).as_posix(), src) for folder in unit.dirs
                    for src in sorted((seed / folder).rglob("*"))
                    if src.is_file() and src.name not in _STATE_FILES and "__pycache__" not in src.parts]
        sources += [(rel, package.joinpath(*parts)) for rel, parts in unit.package.items()]
        if not sources[0][1].is_file():
            continue
        # Judged whole before anything is written: a unit is seeded with everything it names, or
        # not at all (a register whose scripts cannot be written, or would be someone else's, is
        # worse than none: the start then says the register is missing).
        problem = next((p for rel, src in sources if (p := _unwritable(real, home, rel, src)) is not None),
                       None)
        if problem is not None:
            refused.append(f"not seeding {unit.file}: {problem}")
            continue
        for rel, src in sources:
            if _copy_new(src, home / rel):
                files.append(rel)
    return Seeding(fresh, tuple(files), tuple(refused))


def _unwritable(real_home: Path, home: Path, rel: str, src: Path) -> str | None:
    """Why `rel` cannot be seeded from `src`, or None: a folder on the way is a file, or leads
    outside the home (or nowhere); a file already there that is not the same as ours (a seeded
    entry would run it)."""
    dest = home / rel
    for parent in reversed(dest.relative_to(home).parents[:-1]):
        folder = home / parent
        if os.path.lexists(folder) and not folder.is_dir():
            return f"{parent.as_posix()} is not a folder"
    outside = _leads_outside(real_home, dest)
    if outside is not None:
        return f"{outside} leads outside the config home"
    if os.path.lexists(dest):  # (never the unit's own file: that one is missing, or it is not seeded)
        try:
            same = dest.is_file() and dest.read_bytes() == src.read_bytes()
        except OSError:
            same = False
        if not same:
            return f"{rel} exists and is not the bundled file (a seeded entry would run it)"
    return None


def _leads_outside(real_home: Path, dest: Path) -> str | None:
    """The deepest existing folder on the way to `dest` (relative to the home), when it resolves
    outside the home (a link to elsewhere); None when writing there stays inside."""
    folder = dest.parent
    while not os.path.lexists(folder) and folder != folder.parent:
        folder = folder.parent
    try:
        inside = folder.resolve().is_relative_to(real_home)
    except (OSError, RuntimeError):  # a link loop resolves nowhere (RuntimeError on 3.11)
        inside = False
    if inside:
        return None
    try:
        return folder.relative_to(real_home).as_posix()
    except ValueError:
        return str(folder)


def _copy_new(src: Path, dest: Path) -> bool:
    """Copy `src` to `dest` only if nothing is there (exclusive create: no overwrite, no write
    through a link); False when something was, or the folder cannot hold it."""
    if os.path.lexists(dest):
        return False
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        with open(src, "rb") as source, open(dest, "xb") as target:
            shutil.copyfileobj(source, target)
        shutil.copymode(src, dest)
    except FileExistsError:
        return False
    except OSError as exc:
        raise HomeNotUsable(f"cannot seed {dest}: {exc.strerror or exc}") from exc
    return True


# systemd's service protocol is between systemd and the gateway: a child that inherited these
# could report READY/WATCHDOG in our name.
_NOT_INHERITED = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID",
                  "LISTEN_FDNAMES")


def child_environment(home: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment tfunnel hands its children: ours (minus systemd's notification
    variables) plus both home variables."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if k not in _NOT_INHERITED}
    env["TFUNNEL_HOME"] = str(home)
    env["TOOLFUNNEL_HOME"] = str(home)
    return env
