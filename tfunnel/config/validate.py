"""A small field reader that collects every problem instead of stopping at the first."""

from __future__ import annotations

import difflib
import json
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from tfunnel.errors import ConfigProblem

_MISSING = object()


class DocumentError(ValueError):
    """A file that cannot be used as a JSON document; the message names why (and where)."""


class Missing(DocumentError):
    """The file does not exist."""


class Unreadable(DocumentError):
    """The file exists but cannot be read as text: permissions, a directory, not UTF-8."""


class Malformed(DocumentError):
    """The text is not one JSON document: empty, cut off, or a syntax error (line and column)."""


def read_json(path: Path, label: str = "") -> Any:
    """Parse a JSON file; raise `Missing`, `Unreadable` or `Malformed` (all `ValueError`s) with a
    message naming the problem and, for a syntax error, its line and column."""
    try:
        data = path.read_bytes()
    except FileNotFoundError as exc:
        raise Missing("is missing") from exc
    except OSError as exc:
        raise Unreadable(f"cannot read: {exc.strerror or exc}") from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Unreadable(f"not UTF-8: {exc}") from exc
    if not text.strip():
        # What a truncated file or a write caught half-way looks like.
        raise Malformed("is empty (not a JSON document; to clear the file, write {})")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise Malformed(f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from exc
    except RecursionError as exc:
        raise Malformed("invalid JSON: nested too deeply") from exc


class Fields:
    """Typed getters over one JSON object that record problems under (file, entry), and
    warnings (unknown fields) into a separate list."""

    def __init__(self, file: str, problems: list[ConfigProblem],
                 warnings: list[ConfigProblem] | None = None) -> None:
        self.file = file
        self.problems = problems
        self.warnings: list[ConfigProblem] = [] if warnings is None else warnings

    def problem(self, message: str, entry: str | None = None, field: str | None = None) -> None:
        self.problems.append(ConfigProblem(self.file, message, entry, field))

    def warning(self, message: str, entry: str | None = None, field: str | None = None) -> None:
        self.warnings.append(ConfigProblem(self.file, message, entry, field, "warning"))

    def note(self, message: str, entry: str | None = None, field: str | None = None) -> None:
        """A rule applied on purpose, kept with the warnings (it travels with the file's version)."""
        self.warnings.append(ConfigProblem(self.file, message, entry, field, "note"))

    def known(self, obj: Mapping[str, Any], entry: str | None, allowed: Collection[str], *,
              prefix: str = "", strict: bool = False) -> None:
        """Warn about every key of `obj` that is not in `allowed`, naming the nearest known one;
        with `strict` each is a problem instead (a file where a typo would weaken security).

        Keys starting with `_` are comments (ToolFunnel's `_README`), never unknown. `prefix`
        names a nested block in the field (`restart.` gives `restart.windowS`)."""
        for key in obj:
            if key in allowed or key.startswith("_"):
                continue
            nearest = difflib.get_close_matches(key, list(allowed), n=1)
            hint = f"; did you mean {nearest[0]!r}?" if nearest else ""
            if strict:
                self.problem(f"is not a known field{hint}", entry, prefix + key)
            else:
                self.warning(f"is not a known field and has no effect{hint}", entry, prefix + key)

    def string(
        self,
        obj: Mapping[str, Any],
        key: str,
        entry: str | None = None,
        *,
        required: bool = False,
        non_empty: bool = False,
        default: str = "",
        field: str | None = None,
    ) -> str:
        """`field` names the value in messages when it differs from `key` (e.g. `invoke.path`)."""
        field = field or key
        value = obj.get(key, _MISSING)
        if value is _MISSING:
            if required:
                self.problem("is required", entry, field)
            return default
        if not isinstance(value, str) or (non_empty and not value.strip()):
            kind = "a non-empty string" if non_empty else "a string"
            self.problem(f"must be {kind}, got {_show(value)}", entry, field)
            return default
        return value

    def boolean(self, obj: Mapping[str, Any], key: str, entry: str | None = None) -> bool | None:
        value = obj.get(key, _MISSING)
        if value is _MISSING:
            return None
        if not isinstance(value, bool):
            self.problem(f"must be true or false, got {_show(value)}", entry, key)
            return None
        return value

    def integer(
        self, obj: Mapping[str, Any], key: str, entry: str | None, lo: int, hi: int, default: int
    ) -> int:
        value = obj.get(key, _MISSING)
        if value is _MISSING:
            return default
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            self.problem(f"must be an integer from {lo} to {hi}, got {_show(value)}", entry, key)
            return default
        return value

    def positive(
        self, obj: Mapping[str, Any], key: str, entry: str | None, default: float | None
    ) -> float | None:
        value = obj.get(key, _MISSING)
        if value is _MISSING:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            self.problem(f"must be a positive number, got {_show(value)}", entry, key)
            return default
        return float(value)

    def choice(
        self, obj: Mapping[str, Any], key: str, entry: str | None, allowed: tuple[str, ...], default: str,
        field: str | None = None,
    ) -> str:
        value = obj.get(key, _MISSING)
        if value is _MISSING:
            return default
        if value not in allowed:
            self.problem(f"must be one of {', '.join(allowed)}; got {_show(value)}", entry, field or key)
            return default
        assert isinstance(value, str)
        return value

    def array(self, obj: Mapping[str, Any], key: str, what: str, entry: str | None = None) -> list[Any]:
        """`obj[key]` as a list (missing → []); anything else is a problem naming `what` it holds."""
        value = obj.get(key, _MISSING)
        if value is _MISSING:
            return []
        if not isinstance(value, list):
            self.problem(f"must be an array of {what}, got {_show(value)}", entry, key)
            return []
        return value

    def mapping(self, obj: Mapping[str, Any], key: str, entry: str | None = None) -> dict[str, Any]:
        value = obj.get(key, _MISSING)
        if value is _MISSING:
            return {}
        if not isinstance(value, dict):
            self.problem(f"must be an object, got {_show(value)}", entry, key)
            return {}
        return value


def _show(value: Any) -> str:
    """A short rendering of a bad value for an error message."""
    if value is _MISSING:
        return "nothing"
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."
