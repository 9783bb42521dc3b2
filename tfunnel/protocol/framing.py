"""Newline-delimited JSON framing with a line cap, sans-IO.

Feed bytes in, get complete lines out. A line longer than the cap is not buffered: the reader
reports it once (`Oversize`, with its first bytes so the caller can name the request) and
discards input until the next newline, then resynchronises.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

# How much of an over-cap line is kept to find its request id.
OVERSIZE_HEAD = 1024
_ID_SNIFF = re.compile(rb'"id"\s*:\s*("(?:[^"\\]|\\.){0,200}"|-?\d{1,18})')


@dataclass(frozen=True)
class Oversize:
    head: bytes
    size_at_least: int

    def sniff_id(self) -> str | int | None:
        """The request id if it appears near the start of the line (best effort)."""
        match = _ID_SNIFF.search(self.head)
        if match is None:
            return None
        token = match.group(1)
        if token.startswith(b'"'):
            return token[1:-1].decode("utf-8", "replace")
        return int(token)


# Pieces of JSON text, for walking an object's top level without building it. A string is
# matched whole (escapes included), so brackets inside it are not counted.
_STRING = rb'"[^"\\]*(?:\\.[^"\\]*)*"'
_NESTING = re.compile(_STRING + rb"|[{}\[\]]")
_MEMBER = re.compile(rb"\s*(" + _STRING + rb")\s*:\s*")
_SCALAR = re.compile(_STRING + rb"|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null")
_NEXT = re.compile(rb"\s*([,}])")


@dataclass(frozen=True)
class TopLevel:
    """What could be read of a line's top-level JSON object: its `id` (when it is a string or
    an integer) and whether it has a `method` member."""

    id: str | int | None = None
    has_method: bool = False


def sniff_top_level(line: bytes) -> TopLevel:
    """Read the top-level members of a JSON object line as far as they are well formed, without
    decoding nested values (so depth costs no recursion): for naming the request a line that
    fails to decode was meant to answer. Best effort; never raises."""
    pos = len(line) - len(line.lstrip())
    if line[pos:pos + 1] != b"{":
        return TopLevel()
    pos += 1
    found: str | int | None = None
    has_method = False
    while (member := _MEMBER.match(line, pos)) is not None:
        key, pos = _json_or_none(member.group(1)), member.end()
        value: object = None
        if line[pos:pos + 1] in (b"{", b"["):
            end = _skip_nested(line, pos)
        else:
            scalar = _SCALAR.match(line, pos)
            end = scalar.end() if scalar is not None else None
            if scalar is not None:
                value = _json_or_none(scalar.group())
        if key == "method":
            has_method = True
        elif key == "id":
            found = value if isinstance(value, str | int) and not isinstance(value, bool) else None
        if end is None:
            break
        after = _NEXT.match(line, end)
        if after is None or after.group(1) == b"}":
            break
        pos = after.end()
    return TopLevel(found, has_method)


def _skip_nested(line: bytes, pos: int) -> int | None:
    """The end of the object or array starting at `pos`, by counting brackets; None if it never
    closes."""
    depth = 0
    for token in _NESTING.finditer(line, pos):
        bracket = token.group()
        if bracket[:1] == b'"':
            continue
        depth += 1 if bracket in (b"{", b"[") else -1
        if depth == 0:
            return token.end()
    return None


def _json_or_none(text: bytes) -> object:
    try:
        return json.loads(text)
    except ValueError:
        return None


class LineReader:
    def __init__(self, max_line_bytes: int) -> None:
        self.max_line_bytes = max_line_bytes
        self._buffer = bytearray()
        self._skipping: Oversize | None = None
        self._skipped = 0

    def feed(self, data: bytes | bytearray) -> list[bytes | Oversize]:
        """Consume `data`; return complete non-blank lines (without the newline) and over-cap events."""
        events: list[bytes | Oversize] = []
        start = 0
        while start < len(data):
            nl = data.find(b"\n", start)
            end = len(data) if nl < 0 else nl
            chunk = data[start:end]
            if self._skipping is not None:
                self._skipped += len(chunk)
            elif len(self._buffer) + len(chunk) > self.max_line_bytes:
                room = max(0, OVERSIZE_HEAD - len(self._buffer))
                head = bytes(self._buffer[:OVERSIZE_HEAD]) + chunk[:room]
                self._skipping = Oversize(head, len(self._buffer) + len(chunk))
                self._skipped = 0
                self._buffer.clear()
                events.append(self._skipping)
            else:
                self._buffer += chunk
            if nl < 0:
                break
            if self._skipping is not None:
                self._skipping = None
            else:
                line = bytes(self._buffer).rstrip(b"\r")
                self._buffer.clear()
                if line.strip():
                    events.append(line)
            start = nl + 1
        return events

    def eof(self) -> list[bytes | Oversize]:
        """The last line when the stream ended without a newline."""
        if self._skipping is not None or not bytes(self._buffer).strip():
            return []
        line = bytes(self._buffer).rstrip(b"\r")
        self._buffer.clear()
        return [line]
