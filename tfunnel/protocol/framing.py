"""Newline-delimited JSON framing with a line cap, sans-IO.

Feed bytes in, get complete lines out. A line longer than the cap is not buffered: the reader
reports it once (`Oversize`, with its first bytes so the caller can name the request) and
discards input until the next newline, then resynchronises.
"""

from __future__ import annotations

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
