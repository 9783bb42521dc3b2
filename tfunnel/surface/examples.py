"""Example calls built from a tool's input schema, for its instructions (pure).

The arguments of the example are the schema's required fields. A field's value is, first found:
its `examples[0]`, its `default`, its `const`, its `enum[0]`, else a placeholder of its type
(string `"<name>"`, integer or number `0`, boolean `false`, array `[]`, object `{}`, null `null`;
a field of no known type gets `"<name>"`). A schema whose top level carries `examples` (argument
objects) gives its first one whole instead.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

_PLACEHOLDERS: Mapping[str, Any] = {"integer": 0, "number": 0, "boolean": False, "array": [],
                                    "object": {}, "null": None}


def example_args(schema: Mapping[str, Any] | None) -> dict[str, Any]:
    """The arguments of an example call for a tool with this input schema."""
    if not isinstance(schema, Mapping):
        return {}
    given = schema.get("examples")
    if isinstance(given, list) and given and isinstance(given[0], Mapping):
        return dict(given[0])
    required = schema.get("required", [])
    properties = schema.get("properties", {})
    if not isinstance(required, list):
        return {}
    if not isinstance(properties, Mapping):
        properties = {}
    return {name: example_value(name, properties.get(name)) for name in required if isinstance(name, str)}


def example_value(name: str, field: Any) -> Any:
    """One field's example value (see the module docstring for the order)."""
    if not isinstance(field, Mapping):
        return f"<{name}>"
    examples = field.get("examples")
    if isinstance(examples, list) and examples:
        return examples[0]
    for key in ("default", "const"):
        if key in field:
            return field[key]
    enum = field.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    kind = field.get("type")
    if isinstance(kind, list):  # ["string", "null"]: the first that is not null
        kind = next((k for k in kind if k != "null"), kind[0] if kind else None)
    if isinstance(kind, str) and kind in _PLACEHOLDERS:
        value = _PLACEHOLDERS[kind]
        return list(value) if isinstance(value, list) else dict(value) if isinstance(value, dict) else value
    return f"<{name}>"


def examples_section(tool: str, examples: Sequence[Mapping[str, Any]], title: str = "Examples:") -> list[str]:
    """Markdown lines showing a register entry's own `examples` (argument objects) as calls."""
    if not examples:
        return []
    lines = ["", title, "```json"]
    lines += [json.dumps({"name": tool, "args": args}, ensure_ascii=False) for args in examples]
    return [*lines, "```"]
