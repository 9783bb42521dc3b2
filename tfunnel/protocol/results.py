"""`CallToolResult` as a value, and the one conversion from a failure to an `isError` result."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# The `_meta` keys the protocol owns; each hop sets its own.
PROTOCOL_META_PREFIX = "io.modelcontextprotocol/"


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
        and `_meta`. The upstream's protocol keys (`io.modelcontextprotocol/*`) describe its own
        hop to us, not ours to the client, so they are dropped; its other keys are kept."""
        content = wire.get("content")
        blocks = tuple(b for b in content if isinstance(b, dict)) if isinstance(content, list) else ()
        structured = wire.get("structuredContent")
        meta = wire.get("_meta")
        kept = {k: v for k, v in meta.items() if not str(k).startswith(PROTOCOL_META_PREFIX)} \
            if isinstance(meta, dict) else {}
        return cls(content=blocks, structured=structured if isinstance(structured, dict) else None,
                   is_error=wire.get("isError") is True, meta=kept or None)

    @classmethod
    def failure(cls, message: str, *, denied: bool = False) -> ToolResult:
        return cls(content=({"type": "text", "text": message},), is_error=True, denied=denied)

    def to_wire(self) -> dict[str, Any]:
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
