"""The stdio stream decoder (`protocol.framed`): telling NDJSON from `Content-Length` framing by
the first bytes, and the `Content-Length` reader's cap and resync rules, in tables."""

from __future__ import annotations

import pytest

from tfunnel.protocol.framed import (
    MAX_HEADER_BYTES,
    ContentLengthReader,
    Event,
    Framing,
    Malformed,
    StreamReader,
    detect,
    parse_length,
)
from tfunnel.protocol.framing import Oversize

CAP = 100
PING = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'


def framed(body: bytes, *headers: bytes) -> bytes:
    return b"".join(h + b"\r\n" for h in headers) + b"Content-Length: %d\r\n\r\n" % len(body) + body


def kinds(events: list[Event]) -> list[object]:
    """Events as comparable values: bodies as bytes, the rest by type (and an oversize's size)."""
    out: list[object] = []
    for event in events:
        if isinstance(event, Oversize):
            out.append(("oversize", event.size_at_least, event.sniff_id()))
        elif isinstance(event, Malformed):
            out.append("malformed")
        else:
            out.append(event)
    return out


def read_all(data: bytes, cuts: tuple[int, ...] = ()) -> tuple[list[object], Framing | None]:
    """Feed `data` to a fresh StreamReader in pieces cut at `cuts`, then end the stream."""
    reader = StreamReader(CAP)
    events: list[Event] = []
    start = 0
    for cut in (*cuts, len(data)):
        events += reader.feed(data[start:cut])
        start = cut
    events += reader.eof()
    return kinds(events), reader.framing


@pytest.mark.parametrize(("prefix", "framing"), [
    (b"Content-Length: 5", Framing.CONTENT_LENGTH),
    (b"content-length:5", Framing.CONTENT_LENGTH),
    (b"CONTENT-LENGTH :", Framing.CONTENT_LENGTH),
    (b"Content-Type: application/json", Framing.CONTENT_LENGTH),  # another header first
    (b"Content-Len", None),  # a header's name so far: wait for more
    (b"", None),
    (b"{", Framing.NDJSON),
    (b"[1]", Framing.NDJSON),
    (b'"text"', Framing.NDJSON),
    (b"hello world\n", Framing.NDJSON),
    (b"true\n", Framing.NDJSON),
    (b"x" * MAX_HEADER_BYTES, Framing.NDJSON),  # no colon in sight: not a header
])
def test_detect(prefix: bytes, framing: Framing | None) -> None:
    assert detect(prefix) is framing


@pytest.mark.parametrize(("name", "value", "length"), [
    (b"Content-Length", b" 12", 12),
    (b"content-length ", b"0", 0),
    (b"Content-Length", b" 12 \t", 12),
    (b"Content-Type", b" application/json", None),
    (b"Content-Length", b" -1", "not"),
    (b"Content-Length", b" 1.5", "not"),
    (b"Content-Length", b" abc", "not"),
    (b"Content-Length", b"", "not"),
    (b"Content-Length", b" +3", "not"),
    (b"Content-Length", " ٣".encode(), "not"),  # a digit, but not an ASCII one
    (b"Content-Length", b" " + b"9" * 5000, "beyond"),  # int() itself refuses > 4300 digits
    (b"Content-Length", b" 99999999999999", "beyond"),  # skipping it would swallow the stream
    (b"Content-Length", b" 0000000012", 12),  # leading zeros are still a small number
])
def test_parse_length(name: bytes, value: bytes, length: int | str | None) -> None:
    found = parse_length(name, value)
    if length in ("not", "beyond"):
        assert isinstance(found, str) and (
            "not a non-negative integer" if length == "not" else "beyond any message") in found
    else:
        assert found == length


@pytest.mark.parametrize("header", [b"Content-Length: " + b"9" * 5000, b"Content-Length: 99999999999999"])
def test_a_length_beyond_any_message_resyncs_and_the_stream_goes_on(header: bytes) -> None:
    assert read_all(header + b"\r\n\r\n{}" + framed(PING)) == (["malformed", PING], Framing.CONTENT_LENGTH)


def test_two_content_lengths_that_disagree_are_refused() -> None:
    data = b"Content-Length: 2\r\nContent-Length: 13\r\n\r\n{\"a\":1234567}" + framed(PING)
    found, _ = read_all(data)
    assert found[0] == "malformed" and found[-1] == PING and b'{"a":1234567}' not in found


TWO = framed(PING) + framed(b'{"id":2}', b"Content-Type: application/vscode-jsonrpc; charset=utf-8")


@pytest.mark.parametrize("cut", range(1, len(TWO)))
def test_split_at_every_byte_boundary(cut: int) -> None:
    """However the stream is cut, the same two messages come out, in order."""
    assert read_all(TWO, (cut,)) == ([PING, b'{"id":2}'], Framing.CONTENT_LENGTH)


def test_one_byte_at_a_time() -> None:
    assert read_all(TWO, tuple(range(1, len(TWO)))) == ([PING, b'{"id":2}'], Framing.CONTENT_LENGTH)


NDJSON = PING + b"\n" + b'{"id":2}\r\n'


@pytest.mark.parametrize("cut", range(1, len(NDJSON)))
def test_ndjson_split_at_every_byte_boundary(cut: int) -> None:
    assert read_all(NDJSON, (cut,)) == ([PING, b'{"id":2}'], Framing.NDJSON)


OVER = b'{"jsonrpc":"2.0","id":"big","method":"tools/call","params":{"x":"' + b"y" * 200 + b'"}}'


@pytest.mark.parametrize(("data", "events"), [
    # several messages in one chunk; blanks before and between them
    (framed(PING) * 3, [PING] * 3),
    (b"\r\n\n  \t" + framed(PING) + b"\r\n" + framed(PING), [PING, PING]),
    # header variants: case, spacing, other headers before and after, a bare LF
    (b"content-length:2\r\n\r\n{}", [b"{}"]),
    (b"CONTENT-LENGTH   :  2  \r\n\r\n{}", [b"{}"]),
    (b"Content-Type: x\r\nContent-Length: 2\r\nX-Other: y\r\n\r\n{}", [b"{}"]),
    (b"Content-Length: 2\n\n{}", [b"{}"]),
    # a body need not be JSON to be a message (the caller refuses it, -32700); an empty one too
    (framed(b"not json") + framed(PING), [b"not json", PING]),
    (b"Content-Length: 0\r\n\r\n" + framed(PING), [b"", PING]),
    # a declared length over the cap: refused with the request's id, the body skipped
    (framed(OVER) + framed(PING), [("oversize", len(OVER), "big"), PING]),
    # ... unless no message could be that long: then it is no length at all, and the reader resyncs
    (b"Content-Length: 99999999999999999999\r\n\r\n" + b"{" * 2000 + framed(PING), ["malformed", PING]),
    # a malformed header block: reported, then resync at the next Content-Length header
    (b"Content-Length: abc\r\n\r\n" + PING + framed(PING), ["malformed", PING]),
    (b"Content-Length: -5\r\n\r\nxxxxx" + framed(PING), ["malformed", PING]),
    (b"Content-Type: x\r\n\r\n{}" + framed(PING), ["malformed", PING]),
    (b"Content-Length: 2\r\nhello\r\n\r\n{}" + framed(PING), ["malformed", PING]),
    (b"Content-Length: 2\r\n" + b"A" * (MAX_HEADER_BYTES + 10) + b"\r\n\r\n{}" + framed(PING),
     ["malformed", PING]),
    # garbage between messages, then recovery
    (framed(PING) + b"garbage: yes\r\nmore garbage\r\n" + framed(PING), [PING, "malformed", PING]),
    (framed(PING) + b"!!" + framed(PING), [PING, "malformed", PING]),
    # the stream ends inside a message: said once, nothing half-read is a message
    (framed(PING) + b"Content-Length: 10\r\n\r\n{", [PING, "malformed"]),
    (framed(PING) + b"Content-Len", [PING, "malformed"]),
    (framed(PING) + b"\r\n", [PING]),
])
def test_content_length_table(data: bytes, events: list[object]) -> None:
    assert read_all(data) == (events, Framing.CONTENT_LENGTH)
    # and the same cut at every byte boundary but for the longest inputs
    if len(data) < 400:
        for cut in range(1, len(data)):
            assert read_all(data, (cut,)) == (events, Framing.CONTENT_LENGTH), cut


def test_an_over_cap_body_is_never_buffered() -> None:
    """A declared length far over the cap holds at most a chunk at a time, however long."""
    reader = ContentLengthReader(CAP)
    assert kinds(reader.feed(b"Content-Length: 10000000\r\n\r\n" + b'{"id":9,' + b" " * 2000)) == [
        ("oversize", 10_000_000, 9)]
    for _ in range(100):
        assert reader.feed(b" " * 65536) == []
        assert len(reader._buffer) == 0
    assert kinds(reader.feed(b" " * (10_000_000 - 2008 - 100 * 65536) + framed(PING))) == [PING]


@pytest.mark.parametrize(("data", "events"), [
    (b"\n\n" + NDJSON, [PING, b'{"id":2}']),
    (b"not json\n" + PING + b"\n", [b"not json", PING]),
    (b'{"x": "' + b"y" * 200 + b'"}\n' + PING + b"\n", [("oversize", 209, None), PING]),
    (PING, [PING]),  # the last line without its newline, at the end of the stream
    (b"null", [b"null"]),
    # a Content-Length header later in an NDJSON stream is one more bad line, not a switch
    (PING + b"\nContent-Length: 2\r\n\r\n{}\n", [PING, b"Content-Length: 2", b"{}"]),
])
def test_ndjson_table(data: bytes, events: list[object]) -> None:
    assert read_all(data) == (events, Framing.NDJSON)
