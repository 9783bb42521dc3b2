"""Example calls in tool instructions: built from the schema, or the register entry's own `examples`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tfunnel.config.load import REGISTER_FILE, load_register
from tfunnel.config.model import ToolEntry
from tfunnel.errors import ConfigError
from tfunnel.surface import meta
from tfunnel.surface.examples import example_args, example_value
from tfunnel.surface.service import _instructions
from tfunnel.surface.upstream_tools import UpstreamTool


@pytest.mark.parametrize(("field", "value"), [
    ({"type": "string"}, "<path>"),
    ({"type": "integer"}, 0),
    ({"type": "number"}, 0),
    ({"type": "boolean"}, False),
    ({"type": "array", "items": {"type": "string"}}, []),
    ({"type": "object"}, {}),
    ({"type": "null"}, None),
    ({"type": ["string", "null"]}, "<path>"),
    ({"type": ["null", "integer"]}, 0),
    ({"enum": ["short", "long"]}, "short"),
    ({"type": "string", "enum": ["short", "long"], "default": "long"}, "long"),
    ({"type": "integer", "default": 5, "examples": [7, 8]}, 7),
    ({"const": "fixed"}, "fixed"),
    ({"description": "no type"}, "<path>"),
    (None, "<path>"),
], ids=lambda v: json.dumps(v))
def test_a_fields_example_value(field: Any, value: Any) -> None:
    """examples[0], then default, const, enum[0], then a placeholder of the field's type."""
    assert example_value("path", field) == value


def test_example_args_are_the_required_fields_or_the_schemas_own_example() -> None:
    schema = {"type": "object", "required": ["repo", "count", "all"],
              "properties": {"repo": {"type": "string"}, "count": {"type": "integer"},
                             "all": {"type": "boolean"}, "optional": {"type": "string"}}}
    assert example_args(schema) == {"repo": "<repo>", "count": 0, "all": False}
    given = {**schema, "examples": [{"repo": "/src/app", "count": 3, "all": True}]}
    assert example_args(given) == {"repo": "/src/app", "count": 3, "all": True}
    assert example_args({"type": "object"}) == {} and example_args(None) == {}


def call_line(text: str) -> Any:
    """The JSON of the first fenced block: the call the instructions show."""
    return json.loads(text.split("```json\n", 1)[1].split("\n", 1)[0])


def test_upstream_tool_instructions_show_a_typed_example_call() -> None:
    definition = {"name": "git_log", "description": "Shows the log.", "inputSchema": {
        "type": "object", "required": ["repo_path", "max_count", "reverse", "paths", "options", "order"],
        "properties": {"repo_path": {"type": "string"}, "max_count": {"type": "integer"},
                       "reverse": {"type": "boolean"}, "paths": {"type": "array"},
                       "options": {"type": "object"}, "order": {"enum": ["date", "topo"]}}}}
    text = UpstreamTool("git_log", "git", "git_log", definition).instructions()
    assert call_line(text) == {"name": "git_log", "args": {
        "repo_path": "<repo_path>", "max_count": 0, "reverse": False, "paths": [], "options": {},
        "order": "date"}}


def write_register(home: Path, *tools: dict[str, Any]) -> None:
    path = home / REGISTER_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"version": 1, "tools": list(tools)}))


HASH = {"id": "hash", "name": "Hash", "summary": "Digests.", "mode": "reference",
        "inputSchema": {"type": "object", "required": ["text"], "properties": {"text": {"type": "string"}}}}


def test_register_examples_are_read_and_shown(tmp_path: Path) -> None:
    """The first of an entry's `examples` is the call shown; the others follow."""
    write_register(tmp_path, {**HASH, "examples": [{"text": "abc"}, {"text": "hello", "algo": "md5"}]})
    [entry] = load_register(tmp_path).tools
    assert entry.examples == ({"text": "abc"}, {"text": "hello", "algo": "md5"})
    text = _instructions(entry)
    assert call_line(text) == {"name": "hash", "args": {"text": "abc"}}
    assert 'More examples:\n```json\n{"name": "hash", "args": {"text": "hello", "algo": "md5"}}\n```' in text
    without = meta.synthesized_instructions("hash", "Hash", "Digests.", HASH["inputSchema"])  # type: ignore[arg-type]
    assert call_line(without) == {"name": "hash", "args": {"text": "<text>"}} and "examples" not in without


def test_register_examples_follow_written_instructions() -> None:
    entry = ToolEntry("hash", "Hash", instructions="Hash a text.\n", examples=({"text": "abc"},))
    assert _instructions(entry) == ('Hash a text.\n\nExamples:\n```json\n'
                                    '{"name": "hash", "args": {"text": "abc"}}\n```')
    assert _instructions(ToolEntry("hash", "Hash", instructions="Hash a text.")) == "Hash a text."


@pytest.mark.parametrize(("examples", "field", "problem"), [
    ({"text": "abc"}, "examples", "must be an array of argument objects"),
    ([{"text": "abc"}, "text=abc"], "examples[1]", "must be an object"),
], ids=["not-a-list", "not-an-object"])
def test_register_examples_are_validated(tmp_path: Path, examples: Any, field: str, problem: str) -> None:
    write_register(tmp_path, {**HASH, "examples": examples})
    with pytest.raises(ConfigError) as caught:
        load_register(tmp_path)
    message = str(caught.value)
    assert REGISTER_FILE in message and "'hash'" in message and f"'{field}'" in message and problem in message
