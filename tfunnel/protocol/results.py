"""`CallToolResult` as a value, and the one conversion from a failure to an `isError` result."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tfunnel.protocol.meta import own_keys

# The fields of a `CallToolResult` we pass on; a result with any other is rebuilt without it.
_RESULT_KEYS = frozenset({"content", "structuredContent", "isError", "_meta"})


@dataclass(frozen=True)
class ToolResult:
    """What a tool call produced: content blocks, optional structured content, error flag."""

    content: Sequence[Mapping[str, Any]] = ()
    structured: Mapping[str, Any] | None = None
    is_error: bool = False
    # An upstream's own `_meta` on its result, passed on to the client.
    meta: Mapping[str, Any] | None = None
    # Why the gate refused the call, when it did (never sent to the client as a field).
    denied: bool = field(default=False, compare=False)

    @classmethod
    def text(cls, text: str, *, is_error: bool = False) -> ToolResult:
        return cls(content=({"type": "text", "text": text},), is_error=is_error)

    @classmethod
    def from_wire(cls, wire: Mapping[str, Any]) -> ToolResult:
        """An upstream `CallToolResult`, passed through: content blocks, structuredContent, isError
        and `_meta`. The upstream's protocol keys (`protocol.meta.reserved`) describe its own hop
        to us, not ours to the client, so they are dropped; its other keys are kept."""
        content = wire.get("content")
        blocks = tuple(b for b in content if isinstance(b, dict)) if isinstance(content, list) else ()
        structured = wire.get("structuredContent")
        kept = own_keys(wire.get("_meta"))
        result = cls(content=blocks, structured=structured if isinstance(structured, dict) else None,
                     is_error=wire.get("isError") is True, meta=kept or None)
        if _verbatim(wire, blocks, kept):
            # Sent on as it came (`to_wire`): the forwarded hot path rebuilds nothing. Not a field:
            # `dataclasses.replace` (the gate adding context) makes a result without it.
            object.__setattr__(result, "_wire", wire)
        return result

    @classmethod
    def failure(cls, message: str, *, denied: bool = False) -> ToolResult:
        return cls(content=({"type": "text", "text": message},), is_error=True, denied=denied)

    def to_wire(self) -> dict[str, Any]:
        """The result on the wire. For an upstream's result that needed no change, the very dict
        it arrived as: callers read it, never change it."""
        verbatim: dict[str, Any] | None = self.__dict__.get("_wire")
        if verbatim is not None:
            return verbatim
        wire: dict[str, Any] = {"content": [dict(block) for block in self.content]}
        if self.structured is not None:
            wire["structuredContent"] = dict(self.structured)
        if self.is_error:
            wire["isError"] = True
        if self.meta:
            wire["_meta"] = dict(self.meta)
        return wire

    def first_text(self) -> str:
        for block in self.content:
            if block.get("type") == "text":
                return str(block.get("text", ""))
        return ""


def _verbatim(wire: Mapping[str, Any], blocks: Sequence[Mapping[str, Any]], meta: Mapping[str, Any]) -> bool:
    """Whether `wire` is already exactly what `to_wire` would build from what `from_wire` read:
    only the known fields, every content block an object, structuredContent an object (or
    absent), isError a boolean (or absent), `_meta` without protocol keys (or absent)."""
    if not isinstance(wire, dict) or not wire.keys() <= _RESULT_KEYS:
        return False
    content, structured = wire.get("content"), wire.get("structuredContent")
    if not isinstance(content, list) or len(content) != len(blocks):
        return False
    if "structuredContent" in wire and not isinstance(structured, dict):
        return False
    if "isError" in wire and not isinstance(wire["isError"], bool):
        return False
    return "_meta" not in wire or (isinstance(wire["_meta"], dict) and len(wire["_meta"]) == len(meta) > 0)
