"""JSON Schema, the plain part: a checker compiled from a schema that uses only common keywords.

jsonschema decides every outcome, but most tool schemas use a handful of keywords (`type`,
`properties`, `required`, `additionalProperties`, `items`, `enum`, `const`, length and numeric
bounds, annotations). `compile_plain` turns such a schema into a small checker that can *prove* an
instance valid, at a fraction of jsonschema's cost; it returns None for any other schema. A
checker answers True only when jsonschema would find no error, and False, "not proven", wherever
jsonschema's view could differ, so callers ask jsonschema then. A schema that compiles is also
well-formed by the draft 2020-12 meta-schema, which is what jsonschema uses when `$schema` is
absent (`schema_problem`). jsonschema is imported on first need only: a gateway whose schemas
are all plain starts without it (about 40 ms of a cold start).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Any

# True: the instance is valid. False: not proven (jsonschema decides).
Check = Callable[[Any], bool]


def schema_problem(schema: dict[str, Any]) -> tuple[str, str] | None:
    """Where and why `schema` is not a valid JSON Schema for its draft: (path, message), or None."""
    if compile_plain(schema) is not None:  # plain, and well-formed by the 2020-12 meta-schema
        return None
    import jsonschema

    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        return "/".join(str(p) for p in exc.absolute_path) or "(root)", exc.message
    return None


# The compiler accepts a schema only when it is well-formed by the draft 2020-12 meta-schema and
# every keyword is one whose meaning it reproduces. Checkers test exact JSON types (never bool for
# a number) and answer False wherever jsonschema's view could differ (a subclass, another number
# type, a value they cannot compare).

_TYPE_TESTS: dict[str, Check] = {
    "object": lambda v: type(v) is dict,
    "array": lambda v: type(v) is list,
    "string": lambda v: type(v) is str,
    "integer": lambda v: type(v) is int,
    "number": lambda v: type(v) is int or type(v) is float,
    "boolean": lambda v: type(v) is bool,
    "null": lambda v: v is None,
}
# Keywords that never fail an instance (annotations; `format` asserts nothing without a format
# checker, and jsonschema's validators are built without one), with the meta-schema's rule for
# each value.
_ANNOTATIONS: dict[str, Check] = {
    "title": _TYPE_TESTS["string"],
    "description": _TYPE_TESTS["string"],
    "$comment": _TYPE_TESTS["string"],
    "format": _TYPE_TESTS["string"],
    "default": lambda v: True,
    "examples": _TYPE_TESTS["array"],
    "deprecated": _TYPE_TESTS["boolean"],
    "readOnly": _TYPE_TESTS["boolean"],
    "writeOnly": _TYPE_TESTS["boolean"],
}
_OBJECT_KEYWORDS = frozenset({"properties", "required", "additionalProperties"})
# The exact types of parsed JSON. A keyword for one JSON type does not apply to the others; an
# instance of any other type (a subclass) is never proven valid.
_JSON = frozenset({dict, list, str, int, float, bool, type(None)})
_NOT_OBJECT = _JSON - {dict}
_NOT_ARRAY = _JSON - {list}
_NOT_STRING = _JSON - {str}
_NOT_NUMBER = _JSON - {int, float}


def _is_number(value: Any) -> bool:
    return type(value) is int or type(value) is float


def _is_count(value: Any) -> bool:
    return type(value) is int and value >= 0


def _valid(_: Any) -> bool:
    return True


def _not_proven(_: Any) -> bool:
    return False


def compile_plain(schema: Mapping[str, Any]) -> Check | None:
    """The checker of a plain schema (its root without `$schema`); None for any other."""
    if not isinstance(schema, dict) or "$schema" in schema:
        return None
    try:
        return _compile(schema)
    except RecursionError:
        return None


def _compile(schema: Any) -> Check | None:
    if schema is True:
        return _valid
    if schema is False:
        return _not_proven
    if type(schema) is not dict:
        return None
    checks: list[Check] = []
    object_keywords = not _OBJECT_KEYWORDS.isdisjoint(schema)
    # `"type": "object"` next to object keywords is checked by the object check itself.
    only_objects = object_keywords and schema.get("type") == "object"
    for key, value in schema.items():
        if key in _ANNOTATIONS:
            if not _ANNOTATIONS[key](value):
                return None
        elif key in _OBJECT_KEYWORDS or (key == "type" and only_objects):
            continue  # compiled together below
        else:
            check = _keyword(key, value)
            if check is None:
                return None
            checks.append(check)
    if object_keywords:
        check = _object(schema.get("properties", {}), schema.get("required", []),
                        schema.get("additionalProperties", True), only_objects)
        if check is None:
            return None
        checks.append(check)
    if not checks:
        return _valid
    if len(checks) == 1:
        return checks[0]
    frozen = tuple(checks)

    def all_of(value: Any) -> bool:
        for check in frozen:  # noqa: SIM110 (a plain loop: no generator per call)
            if not check(value):
                return False
        return True

    return all_of


def _keyword(key: str, value: Any) -> Check | None:
    if key == "type":
        names = value if type(value) is list else [value]
        if not names or not all(type(n) is str and n in _TYPE_TESTS for n in names) \
                or len(set(names)) != len(names):
            return None
        if len(names) == 1:
            return _TYPE_TESTS[names[0]]
        tests = tuple(_TYPE_TESTS[n] for n in names)
        return lambda v: any(test(v) for test in tests)
    if key == "items":
        item = _compile(value)
        if item is None:
            return None
        # Not an array: `items` does not apply (jsonschema's test is isinstance list).
        return lambda v: all(item(x) for x in v) if type(v) is list else type(v) in _NOT_ARRAY
    if key in ("enum", "const"):
        allowed = value if key == "enum" else [value]
        if type(allowed) is not list:
            return None
        # Proven only for a string or integer equal to an allowed value of the same exact type.
        exact = frozenset((type(a), a) for a in allowed if type(a) is str or type(a) is int)
        return lambda v: (type(v) is str or type(v) is int) and (type(v), v) in exact
    if key in ("minLength", "maxLength"):
        if not _is_count(value):
            return None
        bound = value
        if key == "minLength":
            return lambda v: len(v) >= bound if type(v) is str else type(v) in _NOT_STRING
        return lambda v: len(v) <= bound if type(v) is str else type(v) in _NOT_STRING
    if key in _BOUNDS:
        if not _is_number(value):
            return None
        return _bound(key, value)
    return None


_BOUNDS: dict[str, Callable[[Any, Any], Any]] = {"minimum": operator.ge, "maximum": operator.le,
                                                "exclusiveMinimum": operator.gt,
                                                "exclusiveMaximum": operator.lt}


def _bound(key: str, limit: float) -> Check:
    within = _BOUNDS[key]

    def check(v: Any) -> bool:
        if not _is_number(v):
            return type(v) in _NOT_NUMBER  # not a number: the keyword does not apply
        return bool(within(v, limit))

    return check


def _object(properties: Any, required: Any, additional: Any, only_objects: bool) -> Check | None:
    if type(properties) is not dict or type(required) is not list:
        return None
    if not all(type(r) is str for r in required) or len(set(required)) != len(required):
        return None
    props: dict[str, Check] = {}
    for name, subschema in properties.items():
        sub = _compile(subschema)
        if type(name) is not str or sub is None:
            return None
        props[name] = sub
    extra = _compile(additional)
    if extra is None:
        return None
    names = tuple(required)
    open_extra = extra is _valid

    def check(v: Any) -> bool:
        if type(v) is not dict:  # invalid, or else these keywords do not apply
            return not only_objects and type(v) in _NOT_OBJECT
        for name in names:
            if name not in v:
                return False
        for name, item in v.items():
            sub = props.get(name)
            if sub is None:
                if not open_extra and not extra(item):
                    return False
            elif not sub(item):
                return False
        return True

    return check
