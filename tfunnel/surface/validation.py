"""Argument validation against a tool's `inputSchema`, with errors that name the field.

Valid arguments to a plain schema are proven so by its compiled checker (`config.schema`), the
common case of every call; anything else goes to jsonschema, which decides and names the error.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import structlog

from tfunnel.config.schema import Check, compile_plain
from tfunnel.errors import ToolFailure

if TYPE_CHECKING:
    import jsonschema
    from jsonschema.exceptions import ValidationError

log = structlog.get_logger("tfunnel.surface")


class _Entry:
    """What one schema object compiled to: its checker (None when not plain), and the jsonschema
    validator once one was needed."""

    __slots__ = ("check", "schema", "validator")

    def __init__(self, schema: Mapping[str, Any], check: Check | None) -> None:
        self.schema = schema  # holding the schema keeps its id unique
        self.check = check
        self.validator: jsonschema.protocols.Validator | None = None


# Schemas are immutable values held by the current catalog; checkers and validators are built
# once per schema object (keyed by identity while it is alive) instead of once per call.
_by_identity: dict[int, _Entry] = {}
_IDENTITY_CACHE = 1024


def validate_args(tool: str, schema: Mapping[str, Any] | None, args: Mapping[str, Any], *,
                  trusted: bool = True) -> None:
    """Raise `ToolFailure` naming the offending argument when `args` fail `schema`.

    An untrusted schema (an upstream's) that is itself broken is skipped: the upstream still
    validates its own input, and a bad schema must not make its tool uncallable."""
    if not schema:
        return
    entry = _entry_for(schema)
    if entry.check is not None and entry.check(args):
        return
    import jsonschema
    from jsonschema.exceptions import best_match

    try:
        if entry.validator is None:
            entry.validator = _validator(json.dumps(schema, sort_keys=True, default=str))
        validator = entry.validator
        instance = dict(args)
        if validator.is_valid(instance):
            return
        error = best_match(validator.iter_errors(instance))
    except (jsonschema.SchemaError, jsonschema.exceptions.UnknownType, TypeError, ValueError,
            LookupError, RecursionError):
        if trusted:
            raise
        log.debug("upstream inputSchema unusable; not validated here", tool=tool)
        return
    if error is not None:
        raise ToolFailure(f"invalid arguments for {tool!r}: {describe(error, schema)}")


def _entry_for(schema: Mapping[str, Any]) -> _Entry:
    entry = _by_identity.get(id(schema))
    if entry is not None and entry.schema is schema:
        return entry
    entry = _Entry(schema, compile_plain(schema))
    if len(_by_identity) >= _IDENTITY_CACHE:
        _by_identity.clear()
    _by_identity[id(schema)] = entry
    return entry


@lru_cache(maxsize=512)
def _validator(schema_json: str) -> jsonschema.protocols.Validator:
    import jsonschema

    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema)


def describe(error: ValidationError, schema: Mapping[str, Any]) -> str:
    """One sentence: which argument, what is wrong, what is allowed."""
    path = ".".join(str(p) for p in error.absolute_path)
    where = f"argument {path!r}" if path else "arguments"
    if (error.validator == "required" and isinstance(error.instance, dict)
            and isinstance(error.validator_value, list)):
        prefix = f"{path}." if path else ""
        missing = [f"{prefix}{name}" for name in error.validator_value if name not in error.instance]
        return f"missing required argument {', '.join(repr(m) for m in missing)}"
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        props = error.schema.get("properties", {}) if isinstance(error.schema, dict) else {}
        extra = sorted(k for k in error.instance if k not in props)
        allowed = ", ".join(sorted(props)) or "none"
        return f"unexpected argument {', '.join(repr(k) for k in extra)} (allowed: {allowed})"
    if error.validator == "enum" and isinstance(error.validator_value, list):
        allowed = ", ".join(repr(v) for v in error.validator_value)
        return f"{where} must be one of {allowed}; got {error.instance!r}"
    return f"{where}: {error.message}"
