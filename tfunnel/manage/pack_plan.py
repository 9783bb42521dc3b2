"""`tfunnel pack`'s pure decisions: the package name, the version, the destination, and which
entries of a home go into the copy. No I/O here; `manage/pack.py` walks the home and writes.

What a copy holds (SPEC §12): `toolfunnel.json`, `tools/`, `mcp/` and `hooks/`. Inside them,
machine-local and generated entries are left out (`SKIPPED_NAMES`, dot-entries, editor and
atomic-write temp files, bytecode); `mcp/tool-approvals.json` only with `approvals`. `auth/`,
`logs/`, `dist/` and anything else at the top never go. A symlink is followed only while it stays
inside the home; one that leaves it, a broken one, a special file and a file over
`MAX_FILE_BYTES` are left out with a warning, and so is a symlink to a part of the home that a
copy leaves out (`tools/x -> ../logs`): what is left out stays out by every path.
"""

from __future__ import annotations

import keyword
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tfunnel.config.atomic import TEMP_SUFFIX
from tfunnel.errors import BadArgument

FORMATS = ("home", "python")
ROOTS = ("toolfunnel.json", "tools", "mcp", "hooks")
COPIED_FOLDERS = ("tools", "mcp", "hooks")
SKIPPED_NAMES = frozenset({"dist", "logs", "auth", "packages", "node_modules", ".git", ".idea", ".vscode",
                           "__pycache__"})
TEMP_ENDINGS = ("~", ".swp", ".tmp", ".pyc", TEMP_SUFFIX)
APPROVALS_FILE = ("mcp", "tool-approvals.json")
MAX_FILE_BYTES = 64 * 1024 * 1024
DEFAULT_NAME = "my-mcp"
DEFAULT_VERSION = "0.1.0"
MAX_DESCRIPTION_CHARS = 512

# Kinds of entry the walker reports: a symlink inside the home is reported as what it points to.
Kind = Literal["file", "dir", "outside-link", "excluded-link", "broken-link", "special"]

# PEP 440 Appendix B, the canonical public version pattern (what `packaging.version` accepts);
# used when `packaging` is not installed.
PEP440 = re.compile(r"""
    v?(?:(?:[0-9]+)!)?[0-9]+(?:\.[0-9]+)*
    (?:[-_.]?(?:a|b|c|rc|alpha|beta|pre|preview)[-_.]?[0-9]*)?
    (?:(?:-[0-9]+)|(?:[-_.]?(?:post|rev|r)[-_.]?[0-9]*))?
    (?:[-_.]?dev[-_.]?[0-9]*)?
    (?:\+[a-z0-9]+(?:[-_.][a-z0-9]+)*)?
""", re.VERBOSE | re.IGNORECASE)


@dataclass(frozen=True)
class Verdict:
    """What happens to one entry: `take` it (copy a file, descend into a folder), `skip` it
    silently (not home content), or `warn` (left out, and the result says why)."""

    action: Literal["take", "skip", "warn"]
    reason: str = ""


TAKE = Verdict("take")


def sanitize_name(raw: str | None) -> str:
    """Lower-case; runs of characters outside `[a-z0-9._-]` become `-`; leading and trailing
    `-._` go; nothing left means `my-mcp`."""
    name = re.sub(r"[^a-z0-9._-]+", "-", (raw or "").lower()).strip("-._")
    return name or DEFAULT_NAME


def package_name(name: str) -> str:
    """The Python package of a sanitized project name: `-` and `.` become `_`; a leading digit or
    a keyword gets a prefix or suffix so the result is an importable identifier."""
    pkg = re.sub(r"[-.]+", "_", name)
    if pkg[0].isdigit():
        pkg = f"mcp_{pkg}"
    if keyword.iskeyword(pkg):
        pkg += "_"
    return pkg


def normalized(name: str) -> str:
    """PEP 503 normalization: how pip compares project names."""
    return re.sub(r"[-_.]+", "-", name).lower()


def is_pep440(version: str) -> bool:
    """Whether `version` is a valid PEP 440 version: `packaging.version` when installed, else the
    canonical pattern `PEP440`. Surrounding whitespace (which packaging forgives) is refused."""
    if version != version.strip():
        return False
    try:
        from packaging.version import InvalidVersion, Version
    except ImportError:  # pragma: no cover - packaging is present wherever pip is
        return PEP440.fullmatch(version) is not None
    try:
        Version(version)
    except InvalidVersion:
        return False
    return True


def check_format(fmt: str) -> str:
    if fmt not in FORMATS:
        raise BadArgument("format", f"must be one of {', '.join(FORMATS)}, got {fmt!r}")
    return fmt


def check_version(version: str, fmt: str) -> str:
    """A non-empty single-line version; for `python`, a PEP 440 version."""
    if not version.strip() or version != version.strip() or any(ord(c) < 32 for c in version):
        raise BadArgument("version", f"must be a non-empty single-line string without surrounding "
                          f"spaces, got {version!r}")
    if fmt == "python" and not is_pep440(version):
        raise BadArgument("version", f"must be a PEP 440 version such as 1.2.0, 1.2.0rc1 or 1.2.0.post1 "
                          f"for the python format, got {version!r}")
    return version


def check_name(name: str, fmt: str) -> str:
    """A python project may not be called `tfunnel`: it depends on tfunnel and would replace it."""
    if fmt == "python" and normalized(name) == "tfunnel":
        raise BadArgument("name", "is tfunnel's own project name (the home's serverName is 'tfunnel'?); "
                          "give another one, e.g. --name my-tools")
    return name


def check_package(package: str, fmt: str) -> str:
    """A python project's package may not shadow a standard-library module (it would never import)."""
    if fmt == "python" and package in sys.stdlib_module_names:
        raise BadArgument("name", f"gives the package {package!r}, which is a standard-library module "
                          "and would never be imported; give another name")
    return package


def check_description(text: str) -> str:
    if any(ord(c) < 32 or ord(c) == 127 for c in text) or len(text) > MAX_DESCRIPTION_CHARS:
        raise BadArgument("description", f"must be one line of at most {MAX_DESCRIPTION_CHARS} characters "
                          "without control characters")
    return text


def destination_problem(home: Path, out: Path, copy_root: Path) -> str | None:
    """Why writing to `out` (the copy of the home at `copy_root`) is refused, or None. Paths are
    resolved. The home itself and anything inside a copied folder are refused: the copy would
    overwrite the home or copy itself."""
    for target in (out, copy_root):
        if target == home:
            return f"{target} is the home itself"
        for folder in COPIED_FOLDERS:
            if target.is_relative_to(home / folder):
                return f"{target} is inside {home / folder}, which is copied (the copy would copy itself)"
        if target.is_relative_to(home / "toolfunnel.json"):
            return f"{target} is inside {home / 'toolfunnel.json'}"
    return None


def decide(parts: Sequence[str], kind: Kind, size: int = 0, *, approvals: bool = False) -> Verdict:
    """The verdict for the entry at home-relative `parts` (pure; see the module docstring)."""
    if not parts or parts[0] not in ROOTS:
        return Verdict("skip", "not home content")
    if parts[0] == "toolfunnel.json" and (len(parts) > 1 or kind == "dir"):
        return Verdict("skip", "not home content")
    name = parts[-1]
    if name in SKIPPED_NAMES:
        return Verdict("skip", "machine-local or generated")
    if name.startswith("."):
        return Verdict("skip", "a dot-entry")
    if name.endswith(TEMP_ENDINGS):
        return Verdict("skip", "an editor, temp or bytecode file")
    if tuple(parts) == APPROVALS_FILE and not approvals:
        return Verdict("skip", "approvals state (pass approvals to include it)")
    if kind == "outside-link":
        return Verdict("warn", "a symlink that leads outside the home; not copied")
    if kind == "excluded-link":
        return Verdict("warn", "a symlink to a part of the home a copy leaves out; not copied")
    if kind == "broken-link":
        return Verdict("warn", "a broken symlink; not copied")
    if kind == "special":
        return Verdict("warn", "not a regular file or folder; not copied")
    if kind == "file" and size > MAX_FILE_BYTES:
        return Verdict("warn", f"{size} bytes, over the {MAX_FILE_BYTES}-byte cap; not copied")
    return TAKE


def copied_target(parts: Sequence[str], *, approvals: bool = False) -> bool:
    """Whether a symlink's target at home-relative `parts` lies in what a copy takes: each folder
    on its way taken, and the target itself (seen as a folder: only its place counts here)."""
    return bool(parts) and all(
        decide(parts[:depth], "dir", approvals=approvals).action == "take" for depth in range(1, len(parts))
    ) and decide(parts, "file", approvals=approvals).action == "take"
