"""Which `_meta` keys the protocol reserves (`protocol.meta`): they never cross a hop."""

from __future__ import annotations

from typing import Any

import pytest

from tfunnel.protocol.meta import own_keys, reserved
from tfunnel.protocol.results import ToolResult

CASES: list[tuple[Any, bool]] = [
    ("io.modelcontextprotocol/protocolVersion", True),
    ("io.modelcontextprotocol/serverInfo", True),
    ("modelcontextprotocol.io/anything", True),
    ("api.modelcontextprotocol.org/x", True),
    ("mcp.dev/x", True),
    ("tools.mcp.com/x", True),
    ("IO.ModelContextProtocol/x", True),
    ("example.com/trace", False),
    ("mcpx.dev/x", False),
    ("my-mcp.dev/x", False),
    ("progressToken", False),
    ("mcp", False),  # no prefix: a plain name
    ("trace/mcp", False),  # "mcp" in the name, not the prefix
    (7, True),  # not a string: never passed on
]


@pytest.mark.parametrize(("key", "expected"), CASES)
def test_reserved(key: Any, expected: bool) -> None:
    """A prefix with a `modelcontextprotocol` or `mcp` label, in either DNS order, is the protocol's."""
    assert reserved(key) is expected


def test_own_keys_keeps_only_what_is_not_reserved() -> None:
    """Only the free keys survive; anything that is not an object has none."""
    meta = {key: i for i, (key, _) in enumerate(CASES)}
    assert own_keys(meta) == {key: i for i, (key, is_reserved) in enumerate(CASES) if not is_reserved}
    assert own_keys("junk") == {} and own_keys(None) == {}


def test_an_upstream_result_loses_every_reserved_key() -> None:
    """An upstream's result keeps its own `_meta` keys; no reserved one reaches the client."""
    wire = {"content": [], "_meta": {"mcp.dev/x": 1, "tools.mcp.com/y": 2, "example.com/t": 3}}
    assert ToolResult.from_wire(wire).to_wire() == {"content": [], "_meta": {"example.com/t": 3}}
