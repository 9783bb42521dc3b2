"""Where the config home is, and seeding it once from the bundled `conf/`."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import tfunnel

# Parts of conf/ that ship with the package but are not home content.
_NOT_HOME_CONTENT = frozenset({"systemd", "clients"})
# State files record what an operator did; a fresh home starts without them.
_STATE_FILES = frozenset({"tools.state.json", "hooks.state.json", "tool-approvals.json"})
# Package files a fresh home also gets: the demo upstream the seeded expose.json attaches.
_PACKAGE_FILES = {"mcp/servers/mock_upstream.py": ("testing", "mock_upstream.py")}


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


def seed_home(home: Path, seed: Path) -> bool:
    """Seed a missing or empty `home` from `seed`; never overwrite. Return whether it seeded."""
    if home.is_dir() and any(home.iterdir()):
        return False
    home.mkdir(parents=True, exist_ok=True)
    for src in sorted(seed.rglob("*")):
        rel = src.relative_to(seed)
        if rel.parts[0] in _NOT_HOME_CONTENT or src.name in _STATE_FILES or "__pycache__" in rel.parts:
            continue
        dest = home / rel
        if src.is_dir():
            dest.mkdir(parents=True, exist_ok=True)
        elif not dest.exists():
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest)
    package = Path(tfunnel.__file__).resolve().parent
    for name, parts in _PACKAGE_FILES.items():
        target = home / name
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(package.joinpath(*parts), target)
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
