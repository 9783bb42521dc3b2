"""Pages of a list for clients (pure): an opaque cursor per list kind, refused when forged.

A cursor names the list it belongs to and the offset of the next page; it does not pin a
snapshot (a list that changed between pages is announced with `list_changed`, and a client
re-lists from the start).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from typing import Any, TypeVar

from tfunnel.errors import ProtocolError
from tfunnel.protocol.jsonrpc import INVALID_PARAMS

PAGE_SIZE = 100
T = TypeVar("T")


def cursor_for(kind: str, offset: int) -> str:
    return base64.urlsafe_b64encode(f"{kind}:{offset}".encode()).decode()


def offset_of(kind: str, cursor: Any) -> int:
    """The offset a cursor of list `kind` names (0 without one); -32602 for any other cursor."""
    if cursor is None:
        return 0
    if isinstance(cursor, str) and len(cursor) <= 64:
        try:
            name, _, offset = base64.urlsafe_b64decode(cursor.encode()).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            name, offset = "", ""
        if name == kind and offset.isdigit():
            return int(offset)
    raise ProtocolError(INVALID_PARAMS, "Invalid params: unknown cursor")


def page(kind: str, items: Sequence[T], cursor: Any, size: int = PAGE_SIZE) -> tuple[list[T], str | None]:
    """The page of `items` that `cursor` names, and the cursor of the next page (None at the end)."""
    start = offset_of(kind, cursor)
    end = start + size
    return list(items[start:end]), cursor_for(kind, end) if end < len(items) else None
