"""`_meta` keys the protocol reserves (pure): each hop sets its own, so they never cross one.

MCP reserves every key prefix with a label `modelcontextprotocol` or `mcp` in it, in either
order of DNS labels: `io.modelcontextprotocol/protocolVersion` (the modern envelope),
`modelcontextprotocol.io/...`, `mcp.dev/...`, `tools.mcp.com/...`. A key without a prefix (no `/`)
is free, and so is every other prefix (`example.com/trace`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_RESERVED_LABELS = frozenset({"modelcontextprotocol", "mcp"})


def reserved(key: Any) -> bool:
    """Whether `key` belongs to the protocol (a non-string key is treated as reserved)."""
    if not isinstance(key, str):
        return True
    prefix, slash, _ = key.partition("/")
    return bool(slash) and any(label in _RESERVED_LABELS for label in prefix.lower().split("."))


def own_keys(meta: Any) -> dict[str, Any]:
    """The keys of a `_meta` object that are not the protocol's ({} for anything not an object)."""
    if not isinstance(meta, Mapping):
        return {}
    return {k: v for k, v in meta.items() if not reserved(k)}
