"""LSP-style `Content-Length` framing, and telling it from NDJSON by a stream's first bytes, sans-IO.

ToolFunnel's stdio reads both newline-delimited JSON and `Content-Length: N\\r\\n\\r\\n<body>`
messages, and its clients and tests send the latter, so a stdio stream we read is one or the
other (what we write is NDJSON either way, as ToolFunnel writes: `serve/stdio.py`).
`StreamReader` decides from the first non-blank bytes (a header line, `Name:`, vs anything else)
and then hands every byte to one reader for good.

The rules match the line reader's (`framing.LineReader`): a declared length over the cap is
refused as an over-long line is (`Oversize`, with the body's first bytes to name the request) and
its body is skipped, never buffered; a header block that cannot be read (`Malformed`: a line that
is no header, no or a bad `Content-Length`, a block past `MAX_HEADER_BYTES`) is reported once and
the reader resynchronises at the next `Content-Length:` header. A body that is not JSON is the
caller's to refuse, as a bad line is; the stream goes on either way.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from tfunnel.protocol.framing import OVERSIZE_HEAD, LineReader, Oversize

# A header block longer than this is not a header block (LSP's are a line or two).
MAX_HEADER_BYTES = 8192
_HEADER = re.compile(rb"[A-Za-z][A-Za-z0-9_-]*[ \t]*:")
_LENGTH_NAME = b"content-length"
_RESYNC = re.compile(rb"content-length[ \t]*:", re.IGNORECASE)
_BLANK = b" \t\r\n"
_LEADING = re.compile(rb"[ \t\r\n]*")  # matched in place: a chunk of many messages is not copied per message


class Framing(enum.Enum):
    NDJSON = "ndjson"
    CONTENT_LENGTH = "content-length"


@dataclass(frozen=True)
class Malformed:
    """A header block that could not be read, and why (for the log; the client gets -32700)."""

    reason: str


Event = bytes | Oversize | Malformed


def detect(prefix: bytes) -> Framing | None:
    """The framing a stream that starts with `prefix` (leading blanks removed) speaks, or None
    while it cannot tell yet. A header name and a colon is `Content-Length` framing (the first
    header may be another, `Content-Type` say); anything else, a JSON value first, is NDJSON."""
    if _HEADER.match(prefix):
        return Framing.CONTENT_LENGTH
    name = re.match(rb"[A-Za-z][A-Za-z0-9_-]*[ \t]*", prefix)
    if name is not None and name.end() == len(prefix) and len(prefix) < MAX_HEADER_BYTES:
        return None  # a header's name so far, its colon not yet arrived
    return Framing.NDJSON if prefix else None


# The largest declared length that is skipped (an over-cap body is skipped, not buffered); beyond
# it a length is no message at all and the reader resynchronises at the next header instead.
MAX_DECLARED_BYTES = 1 << 30
_MAX_LENGTH_DIGITS = len(str(MAX_DECLARED_BYTES))


def parse_length(name: bytes, value: bytes) -> int | str | None:
    """A header line's declared length: the count, a reason it is unusable, or None when the
    header is another one."""
    if name.strip().lower() != _LENGTH_NAME:
        return None
    text = value.strip()
    if not text.isdigit():  # ASCII digits only: no sign, no space inside
        return f"Content-Length is not a non-negative integer: {text[:40]!r}"
    if len(text.lstrip(b"0")) > _MAX_LENGTH_DIGITS:  # before int(): thousands of digits raise there
        return f"Content-Length of {len(text)} digits is beyond any message"
    length = int(text)
    if length > MAX_DECLARED_BYTES:
        # Skipping that many bytes would swallow the rest of the stream: not a message, a resync.
        return f"Content-Length {length} is beyond any message (at most {MAX_DECLARED_BYTES} is skipped)"
    return length


class ContentLengthReader:
    """Feed bytes in, get message bodies, `Oversize` and `Malformed` events out."""

    def __init__(self, max_message_bytes: int) -> None:
        self.max_message_bytes = max_message_bytes
        self._buffer = bytearray()
        self._length: int | None = None  # the block's Content-Length, once read
        self._block = 0  # bytes of the header block read so far (0: none begun)
        self._body: int | None = None  # bytes of body still expected (headers done)
        self._skip = 0  # bytes of an over-cap body still to discard
        self._oversize: int | None = None  # an over-cap body's declared length, head not yet out
        self._resync = False  # after a bad block: discard up to the next Content-Length header

    def feed(self, data: bytes | bytearray) -> list[Event]:
        events: list[Event] = []
        self._buffer += data
        while self._step(events):
            pass
        return events

    def eof(self) -> list[Event]:
        """A stream that ends mid-message has sent nothing more to answer."""
        return [Malformed("the stream ended inside a message")] if self._partial() else []

    def _partial(self) -> bool:
        pending = self._body is not None or self._block > 0 or self._oversize is not None
        return not self._resync and (pending or bool(bytes(self._buffer).strip(_BLANK)))

    def _step(self, events: list[Event]) -> bool:
        """Take what the buffer holds for the current state; False when it needs more bytes."""
        if self._oversize is not None:
            return self._oversize_head(events)
        if self._skip:
            taken = min(self._skip, len(self._buffer))
            del self._buffer[:taken]
            self._skip -= taken
            return bool(self._buffer)
        if self._body is not None:
            if len(self._buffer) < self._body:
                return False
            events.append(bytes(self._buffer[:self._body]))
            del self._buffer[:self._body]
            self._body = None
            return True
        if self._resync:
            return self._seek_header()
        return self._header_line(events)

    def _header_line(self, events: list[Event]) -> bool:
        if not self._block:  # blanks between messages (a client's trailing newline)
            leading = _LEADING.match(self._buffer)
            if leading is not None and leading.end():
                del self._buffer[:leading.end()]
        nl = self._buffer.find(b"\n")
        if self._block + (len(self._buffer) if nl < 0 else nl) > MAX_HEADER_BYTES:
            self._bad(events, f"a header block longer than {MAX_HEADER_BYTES} bytes")
            del self._buffer[:len(self._buffer) if nl < 0 else nl + 1]  # the resync looks past it
            return True
        if nl < 0:
            return False
        line = bytes(self._buffer[:nl]).rstrip(b"\r")
        del self._buffer[:nl + 1]
        self._block += nl + 1
        if not line:  # the blank line: the block is complete
            if self._length is None:
                self._bad(events, "a header block without Content-Length")
                return True
            return self._start_body(events)
        if not _HEADER.match(line):
            self._bad(events, f"not a header line: {line[:40]!r}")
            # The resync looks inside it too: junk glued to the next header (`!!Content-Length:`).
            self._buffer[:0] = line[1:] + b"\n"
            return True
        name, _, value = line.partition(b":")
        length = parse_length(name, value)
        if isinstance(length, str):
            self._bad(events, length)
        elif isinstance(length, int):
            if self._length is not None and self._length != length:
                self._bad(events, "two Content-Length headers that disagree")  # which would a proxy use?
            else:
                self._length = length
        return True

    def _start_body(self, events: list[Event]) -> bool:
        assert self._length is not None
        length, self._length, self._block = self._length, None, 0
        if length > self.max_message_bytes:
            self._oversize = length
        else:
            self._body = length
        return True

    def _oversize_head(self, events: list[Event]) -> bool:
        """An over-cap body: wait for its first bytes (they name the request), report, skip."""
        assert self._oversize is not None
        want = min(self._oversize, OVERSIZE_HEAD)
        if len(self._buffer) < want:
            return False
        events.append(Oversize(bytes(self._buffer[:want]), self._oversize))
        self._skip, self._oversize = self._oversize, None
        return True

    def _seek_header(self) -> bool:
        found = _RESYNC.search(self._buffer)
        if found is None:  # keep what could be the start of a header split across chunks
            del self._buffer[:max(0, len(self._buffer) - len(_LENGTH_NAME))]
            return False
        del self._buffer[:found.start()]
        self._resync = False
        return True

    def _bad(self, events: list[Event], reason: str) -> None:
        events.append(Malformed(reason))
        self._length, self._block = None, 0
        self._resync = True


class StreamReader:
    """A stdio stream's reader: NDJSON or `Content-Length`, decided by its first bytes."""

    def __init__(self, max_message_bytes: int) -> None:
        self.max_message_bytes = max_message_bytes
        self.framing: Framing | None = None
        self._reader: LineReader | ContentLengthReader | None = None
        self._prefix = bytearray()

    def feed(self, data: bytes | bytearray) -> list[Event]:
        if self._reader is not None:
            return list(self._reader.feed(data))
        self._prefix += data
        start = bytes(self._prefix).lstrip(_BLANK)
        framing = detect(start)
        if framing is None:
            self._prefix = bytearray(start)
            return []
        self.framing = framing
        self._reader = (LineReader(self.max_message_bytes) if framing is Framing.NDJSON
                        else ContentLengthReader(self.max_message_bytes))
        return list(self._reader.feed(start))

    def eof(self) -> list[Event]:
        """What the end of the stream completes (a last line without its newline, say)."""
        events = self.feed(b"\n") if self._reader is None and self._prefix else []
        return events + (list(self._reader.eof()) if self._reader is not None else [])
