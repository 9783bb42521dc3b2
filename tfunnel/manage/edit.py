"""One change to a config home: the new documents, checked the way loading checks them, then
written atomically and audited. The management tools and the CLI both end here.

A `Change` holds whole new documents (never patches): every one is validated by its file's own
parser (`ConfigFile.parse`, the rules and messages of a start) before anything is written, so a
change that would make a file invalid writes nothing. Scripts a change brings are written before
the documents that name them; each file is replaced atomically (`config.atomic`), so a crash
leaves every file old or new, never torn, and never a register naming a script that is missing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from tfunnel.config.atomic import TEMP_SUFFIX, write_atomic, write_json_atomic
from tfunnel.config.files import ConfigFile, nul_characters
from tfunnel.config.validate import Fields, Missing, read_json
from tfunnel.errors import ConfigError, ConfigProblem, ToolFailure
from tfunnel.observe.audit import AuditLog

__all__ = ["TEMP_SUFFIX", "Change", "Script", "commit", "current", "encodable", "safe_path", "validate"]

# The most a script a management tool writes may hold.
MAX_SCRIPT_BYTES = 1024 * 1024


@dataclass(frozen=True)
class Script:
    """A script file a change writes: `folder` (relative to the home) and a bare file name."""

    folder: str
    name: str
    text: str

    @property
    def relative(self) -> str:
        return f"{self.folder}/{self.name}"


@dataclass(frozen=True)
class Change:
    """What one operation changes: whole documents by file, scripts, and what it says it did."""

    summary: str
    documents: Mapping[ConfigFile[Any], dict[str, Any]] = field(default_factory=dict)
    scripts: tuple[Script, ...] = ()


def current(home: Path, spec: ConfigFile[Any], empty: Mapping[str, Any]) -> dict[str, Any]:
    """The document `spec` holds now (a fresh copy of `empty` when the file is missing); a file
    that is not valid JSON raises `ToolFailure` naming it: it must be fixed first."""
    try:
        document = read_json(home / spec.name, spec.name)
    except Missing:
        copied: dict[str, Any] = _copy(empty)
        return copied
    except ConfigError as exc:
        raise ToolFailure(f"{spec.name} cannot be read ({_first(exc.problems)}); fix the file first, "
                          "nothing was changed") from None
    if not isinstance(document, dict):
        raise ToolFailure(f"{spec.name} is not a JSON object; fix the file first, nothing was changed")
    return document


def validate(home: Path, change: Change) -> None:
    """Raise `ToolFailure` naming every problem when a new document would not load."""
    problems: list[str] = []
    for spec, document in change.documents.items():
        found: list[ConfigProblem] = []
        spec.parse(home, document, Fields(spec.name, found, []))
        problems += [str(p) for p in found]
        # What a start would refuse too (a read checks these before parsing).
        problems += [f"{spec.name}: {entry + ' ' if entry else ''}{field} contains a NUL character"
                     for entry, field in nul_characters(document)]
        if not encodable(document):
            problems.append(f"{spec.name}: a string is not valid Unicode (a lone surrogate)")
    for script in change.scripts:
        if not encodable(script.text) or "\0" in script.text:
            problems.append(f"the script {script.relative} is not valid text")
    if problems:
        raise ToolFailure("nothing was changed: " + "; ".join(problems))


def commit(home: Path, change: Change, audit: AuditLog, *, via: str, by: str = "") -> list[str]:
    """Validate, then write the scripts and the documents (each atomically) and audit each file;
    return the files written (relative to the home). A write the system refuses (a full disk, a
    name too long) raises `ToolFailure`; what was written before it stays whole."""
    validate(home, change)
    try:
        return _write(home, change, audit, via=via, by=by)
    except OSError as exc:
        raise ToolFailure(f"the change could not be written ({exc.strerror or exc}); files already "
                          "written are whole, the rest unchanged") from None


def _write(home: Path, change: Change, audit: AuditLog, *, via: str, by: str) -> list[str]:
    written: list[str] = []
    for script in change.scripts:
        data = script.text.encode("utf-8")
        if len(data) > MAX_SCRIPT_BYTES:
            raise ToolFailure(f"scriptText is {len(data)} bytes; at most {MAX_SCRIPT_BYTES} are allowed")
        path = safe_path(home, script.folder, script.name)
        write_atomic(path, data)
        os.chmod(path, 0o755)
        written.append(script.relative)
    for spec, document in change.documents.items():
        write_json_atomic(home / spec.name, document)
        written.append(spec.name)
    for name in written:
        audit.record("config", file=name, via=via, change=change.summary, **({"by": by} if by else {}))
    return written


def safe_path(home: Path, folder: str, name: str) -> Path:
    """`home/folder/name` for a bare file name (no folders, no dot files), or `ToolFailure`."""
    pure = PurePosixPath(name)
    if not name or name != pure.name or name.startswith(".") or "\\" in name or "\0" in name \
            or not encodable(name) or len(name.encode("utf-8")) > 200 \
            or any(ord(c) < 32 for c in name):
        raise ToolFailure(f"script file name {name!r} must be a bare file name inside {folder}/ "
                          "(no folders, not starting with a dot)")
    return home / folder / name


def encodable(value: Any) -> bool:
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except (UnicodeError, ValueError, TypeError):
        return False
    return True


def _copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_copy(v) for v in value]
    return value


def _first(problems: Iterable[ConfigProblem]) -> str:
    return next((str(p) for p in problems), "unreadable")
