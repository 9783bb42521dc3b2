"""A small field reader that collects every problem instead of stopping at the first."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tfunnel.errors import ConfigProblem

_MISSING = object()


def read_json(path: Path, label: str) -> Any:
    """Parse a JSON file; raise `ValueError` with a message naming the file and position."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8: {exc}") from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from exc
    except RecursionError as exc:
        raise ValueError("invalid JSON: nested too deeply") from exc


class Fields:
    """Typed getters over one JSON object that record problems under (file, entry)."""

    def __init__(self, file: str, problems: list[ConfigProblem]) -> None:
        self.file = file
        self.problems = problems

    def problem(self, message: str, entry: str | None = None, field: str | None = None) -> None:
        self.problems.append(ConfigProblem(self.file, message, entry, field))

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
