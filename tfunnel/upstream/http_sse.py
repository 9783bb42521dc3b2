"""A server-sent events decoder, sans-IO: bytes in, whole events out (the WHATWG
`text/event-stream` rules the Streamable HTTP transport uses).

Lines end with CRLF, LF or CR; `field: value` (one space after the colon dropped); a line
starting with `:` is a comment (keep-alive); a blank line dispatches the event. Only `data`
lines make an event worth dispatching, but an `id` alone still moves the last event id (a
2025-11-25 server primes its stream with an id and empty data). The buffered event is capped at
`max_bytes`: a bigger one is dispatched as `oversize` with its data dropped, so one huge event
cannot grow memory without bound.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SseEvent:
    """One dispatched event: `event` defaults to "message"; `id` is the stream's last event id
    once this event was read (None if the stream never named one)."""

    data: str
    event: str = "message"
    id: str | None = None
    retry_ms: int | None = None
    oversize: bool = False


class SseDecoder:
    """Feed it chunks of the body; it returns the events completed by each."""

    def __init__(self, max_bytes: int) -> None:
        self._max = max_bytes
        self._buffer = bytearray()
        self._skip_lf = False  # the previous chunk ended in CR: a leading LF belongs to it
        self._data: list[str] = []
        self._size = 0
        self._event = ""
        self._retry: int | None = None
        self._oversize = False
        self.last_id: str | None = None
        self.retry_ms: int | None = None  # the last `retry:` seen on the stream (kept, like last_id)

    def feed(self, chunk: bytes) -> list[SseEvent]:
        if self._skip_lf and chunk.startswith(b"\n"):
            chunk = chunk[1:]
        self._skip_lf = False
        self._buffer += chunk
        events: list[SseEvent] = []
        while True:
            cr, lf = self._buffer.find(b"\r"), self._buffer.find(b"\n")
            ends = [i for i in (cr, lf) if i >= 0]
            if not ends:
                break
            end = min(ends)
            line = bytes(self._buffer[:end])
            width = 1
            if self._buffer[end:end + 1] == b"\r":
                if end + 1 < len(self._buffer):
                    width = 2 if self._buffer[end + 1:end + 2] == b"\n" else 1
                else:
                    self._skip_lf = True
            del self._buffer[:end + width]
            event = self._line(line.decode("utf-8", "replace"))
            if event is not None:
                events.append(event)
        if len(self._buffer) > self._max:  # one endless line: keep none of it
            self._buffer.clear()
            self._oversize = True
        return events

    def _line(self, line: str) -> SseEvent | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            self._size += len(value) + 1
            if self._size > self._max:
                self._oversize = True
                self._data.clear()
            elif not self._oversize:
                self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self.last_id = value
        elif name == "retry" and value.isdigit():
            self._retry = self.retry_ms = int(value)
        return None

    def _dispatch(self) -> SseEvent | None:
        data, oversize, retry = "\n".join(self._data), self._oversize, self._retry
        event = self._event or "message"
        had_data = bool(self._data) or oversize
        self._data, self._size, self._event, self._oversize, self._retry = [], 0, "", False, None
        if not had_data and retry is None:
            return None
        return SseEvent(data="" if oversize else data, event=event, id=self.last_id, retry_ms=retry,
                        oversize=oversize)
