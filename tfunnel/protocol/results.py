"""`CallToolResult` as a value, and the one conversion from a failure to an `isError` result."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ToolResult:
    """What a tool call produced: content blocks, optional structured content, error flag."""

    content: Sequence[Mapping[str, Any]] = ()
    structured: Mapping[str, Any] | None = None
    is_error: bool = False
    # Why the gate refused the call, when it did (never sent to the client as a field).
    denied: bool = field(default=False, compare=False)

    @classmethod
    def text(cls, text: str, *, is_error: bool = False) -> ToolResult:
        return cls(content=({"type": "text", "text": text},), is_error=is_error)

    @classmethod
    def from_wire(cls, wire: Mapping[str, Any]) -> ToolResult:
        """An upstream `CallToolResult`, passed through: content blocks, structuredContent, isError."""
        content = wire.get("content")
        blocks = tuple(b for b in content if isinstance(b, dict)) if isinstance(content, list) else ()
        structured = wire.get("structuredContent")
        return cls(content=blocks, structured=structured if isinstance(structured, dict) else None,
                   is_error=wire.get("isError") is True)

    @classmethod
    def failure(cls, message: str, *, denied: bool = False) -> ToolResult:
        return cls(content=({"type": "text", "text": message},), is_error=True, denied=denied)

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {"content": [dict(block) for block in self.content]}
        if self.structured is not None:
            wire["structuredContent"] = dict(self.structured)
        if self.is_error:
            wire["isError"] = True
        return wire

    def first_text(self) -> str:
        for block in self.content:
            if block.get("type") == "text":
                return str(block.get("text", ""))
        return ""
