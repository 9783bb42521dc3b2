"""Argument validation against a tool's `inputSchema`, with errors that name the field."""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import jsonschema
import structlog
from jsonschema.exceptions import ValidationError, best_match

from tfunnel.errors import ToolFailure

log = structlog.get_logger("tfunnel.surface")


# Schemas are immutable values held by the current catalog; a validator is built once per schema
# object (keyed by identity while it is alive) instead of once per call.
_by_identity: dict[int, tuple[Mapping[str, Any], jsonschema.protocols.Validator]] = {}
_IDENTITY_CACHE = 1024


def _validator_for(schema: Mapping[str, Any]) -> jsonschema.protocols.Validator:
    hit = _by_identity.get(id(schema))
    if hit is not None and hit[0] is schema:
        return hit[1]
    validator = _validator(json.dumps(schema, sort_keys=True, default=str))
    if len(_by_identity) >= _IDENTITY_CACHE:
        _by_identity.clear()
    _by_identity[id(schema)] = (schema, validator)  # holding the schema keeps its id unique
    return validator


@lru_cache(maxsize=512)
def _validator(schema_json: str) -> jsonschema.protocols.Validator:
    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema)


def validate_args(tool: str, schema: Mapping[str, Any] | None, args: Mapping[str, Any], *,
                  trusted: bool = True) -> None:
    """Raise `ToolFailure` naming the offending argument when `args` fail `schema`.

    An untrusted schema (an upstream's) that is itself broken is skipped: the upstream still
    validates its own input, and a bad schema must not make its tool uncallable."""
    if not schema:
        return
    try:
        validator = _validator_for(schema)
        instance = dict(args)
        if validator.is_valid(instance):  # the common case, far cheaper than collecting errors
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
