"""`config.schema`: the plain-schema checker never disagrees with jsonschema where it answers."""

from __future__ import annotations

import random
from typing import Any

import jsonschema
import pytest

from tfunnel.config.schema import compile_plain, schema_problem
from tfunnel.surface import meta
from tfunnel.testing import mock_upstream

TYPES = ["object", "array", "string", "integer", "number", "boolean", "null"]
KEYWORDS = ["type", "type", "properties", "properties", "required", "additionalProperties", "items",
            "enum", "const", "minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum",
            "exclusiveMaximum", "title", "description", "default", "format", "examples", "deprecated",
            "pattern", "$ref", "minItems", "unknownKeyword"]


def _value(rng: random.Random, depth: int = 0) -> Any:
    choices: list[Any] = [
        None, True, False, 0, 1, -2, 3, 0.5, 2.0, float("nan"), float("inf"), "", "a", "abc", "xxxxx",
    ]
    if depth < 3:
        choices += [[_value(rng, depth + 1) for _ in range(rng.randrange(3))],
                    {rng.choice("abcd"): _value(rng, depth + 1) for _ in range(rng.randrange(4))}]
    return rng.choice(choices)


def _schema(rng: random.Random, depth: int = 0) -> Any:
    if depth and rng.random() < 0.1:
        return rng.choice([True, False])
    schema: dict[str, Any] = {}
    for _ in range(rng.randrange(5)):
        key = rng.choice(KEYWORDS)
        if key == "type":
            value: Any = rng.choice([*TYPES, [rng.choice(TYPES) for _ in range(rng.randrange(3))], "foo", 3])
        elif key == "properties":
            value = {rng.choice("abcd"): _schema(rng, depth + 1) for _ in range(rng.randrange(3))} \
                if depth < 3 else {}
        elif key == "required":
            value = [rng.choice("abcd") for _ in range(rng.randrange(3))] if rng.random() < 0.9 else "ab"
        elif key in ("additionalProperties", "items"):
            value = _schema(rng, depth + 1) if depth < 3 else rng.choice([True, False])
        elif key == "enum":
            value = [_value(rng, 2) for _ in range(rng.randrange(4))] if rng.random() < 0.9 else "x"
        elif key in ("const", "default"):
            value = _value(rng, 2)
        elif key in ("minLength", "maxLength", "minItems"):
            value = rng.choice([0, 1, 2, 3, -1, 1.0, True, "2"])
        elif key.endswith("imum"):
            value = rng.choice([0, 1, -1, 2.5, True, "1", float("nan")])
        elif key in ("title", "description", "format"):
            value = rng.choice(["x", 3, "email"])
        elif key == "examples":
            value = rng.choice([[], [1], "x"])
        else:
            value = rng.choice([True, 1, "^a", "#"])
        schema[key] = value
    return schema


def test_checker_agrees_with_jsonschema_on_random_schemas() -> None:
    """A schema the compiler accepts is well-formed, and what its checker proves valid is valid."""
    rng = random.Random(20261129)
    compiled = proved = 0
    for _ in range(4000):
        schema = _schema(rng)
        check = compile_plain(schema)
        if check is None:
            continue
        compiled += 1
        jsonschema.validators.validator_for(schema).check_schema(schema)
        validator = jsonschema.validators.validator_for(schema)(schema)
        for _ in range(8):
            instance = _value(rng)
            if check(instance):
                proved += 1
                assert validator.is_valid(instance), (schema, instance)
    assert compiled > 1000 and proved > 5000  # the generator exercises the checker


@pytest.mark.parametrize("schema", [
    *(d["inputSchema"] for d in meta.DEFINITIONS.values()),
    *(spec[1] for spec in mock_upstream.TOOL_SPECS.values()),
], ids=lambda s: str(sorted(s.get("properties", {}))))
def test_common_schemas_are_plain(schema: dict[str, Any]) -> None:
    """The meta-tools' and the mock upstream's schemas need no jsonschema for valid arguments."""
    assert compile_plain(schema) is not None
    assert schema_problem(schema) is None


@pytest.mark.parametrize(("schema", "where"), [
    ({"type": "object", "properties": {"a": {"type": "strin"}}}, "properties/a/type"),
    ({"type": "object", "required": "a"}, "required"),
    ({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "minProperties": -1},
     "minProperties"),
])
def test_schema_problem_names_where(schema: dict[str, Any], where: str) -> None:
    """A malformed schema is reported by jsonschema, with the path to the bad keyword."""
    problem = schema_problem(schema)
    assert problem is not None and problem[0] == where
