"""The ASGI helpers every HTTP transport shares: how a body becomes a message, how JSON goes out."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio

from tfunnel.protocol.jsonrpc import PARSE_ERROR, Request
from tfunnel.serve.asgi import Disconnected, Stream, json_response, read_body, read_message

pytestmark = pytest.mark.timeout(10)

CAP = 4096
PING = b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"%s"}}'


class Exchange:
    """One request body fed to an ASGI callee, and what it sent back."""

    def __init__(self, body: bytes) -> None:
        self._chunks = [body]
        self.sent: list[dict[str, Any]] = []

    async def receive(self) -> dict[str, Any]:
        if self._chunks:
            return {"type": "http.request", "body": self._chunks.pop(), "more_body": False}
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    @property
    def status(self) -> int:
        return int(self.sent[0]["status"])

    @property
    def content_type(self) -> bytes:
        headers: dict[bytes, bytes] = dict(self.sent[0]["headers"])
        return headers[b"content-type"]

    def json(self) -> Any:
        return json.loads(self.sent[1]["body"])


# Bodies that are not Unicode text: raw bytes that are not UTF-8, and escapes of lone surrogates.
UNDECODABLE = [
    pytest.param(PING % b"\\ud800", id="lone-high-surrogate-escape"),
    pytest.param(PING % b"\\uDBFF", id="uppercase-escape"),
    pytest.param(PING % b"\\udc00", id="lone-low-surrogate-escape"),
    pytest.param(PING % b"\\udc00\\ud800", id="reversed-pair"),
    pytest.param(PING % b"a\\ud83d", id="high-at-end"),
    pytest.param(b'{"jsonrpc":"2.0","id":"\\ud800","method":"ping"}', id="in-the-id"),
    pytest.param(b'{"jsonrpc":"2.0","id":1,"method":"ping\\ud800"}', id="in-the-method"),
    pytest.param(b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"\\ud800":1}}', id="in-a-key"),
    pytest.param(b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":[["\\udfff"]]}}', id="nested"),
    pytest.param(b"\xff\xfe", id="utf16-bom"),
    pytest.param(b'\xff\xfe{\x00"\x00', id="utf16-text"),
    pytest.param(PING % b"\xff", id="invalid-byte"),
    pytest.param(PING % b"\xed\xa0\x80", id="raw-cesu-surrogate"),
    pytest.param(PING % b"\xc3", id="truncated-sequence"),
    pytest.param(PING % b"\xc0\xaf", id="overlong"),
]


@pytest.mark.parametrize("body", UNDECODABLE)
async def test_undecodable_body_is_a_parse_error(body: bytes) -> None:
    """A body that is not Unicode text gets 400 with a JSON-RPC -32700 (id null), never a message."""
    exchange = Exchange(body)
    with trio.fail_after(5):
        message = await read_message(exchange.receive, exchange.send, CAP, 30.0)
    assert message is None
    assert exchange.status == 400 and exchange.content_type == b"application/json"
    reply = exchange.json()
    assert reply["id"] is None and reply["error"]["code"] == PARSE_ERROR
    assert reply["error"]["message"].startswith("Parse error")


@pytest.mark.parametrize(
    ("body", "text"),
    [
        pytest.param(PING % b"\\ud83d\\ude00", "\U0001f600", id="escaped-pair"),
        pytest.param(PING % b"\\uD83D\\uDE00", "\U0001f600", id="escaped-pair-uppercase"),
        pytest.param(PING % "\U0001f600".encode(), "\U0001f600", id="raw-utf8"),
        pytest.param(PING % b"\\\\ud800", "\\ud800", id="escaped-backslash-not-an-escape"),
        pytest.param(PING % b"\\ufffd\\ud7ff\\ue000", "\ufffd\ud7ff\ue000", id="around-the-range"),
        pytest.param(b"\xef\xbb\xbf" + PING % b"x", "x", id="utf8-bom-ignored"),
    ],
)
async def test_unicode_body_is_a_message(body: bytes, text: str) -> None:
    """Surrogate pairs, raw UTF-8, look-alike text and a UTF-8 byte order mark decode as usual."""
    exchange = Exchange(body)
    with trio.fail_after(5):
        message = await read_message(exchange.receive, exchange.send, CAP, 30.0)
    assert message == Request(1, "ping", {"x": text})
    assert exchange.sent == []


async def test_json_response_escapes_what_utf8_cannot_carry() -> None:
    """A lone surrogate in an answer (e.g. from an upstream) goes out escaped, never as an empty 200."""
    exchange = Exchange(b"")
    with trio.fail_after(5):
        await json_response(exchange.send, 200, {"jsonrpc": "2.0", "id": 1, "result": {"t": "\ud800 ü"}})
    assert exchange.status == 200
    assert exchange.json() == {"jsonrpc": "2.0", "id": 1, "result": {"t": "\ud800 ü"}}


def big(n: int, size: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": n, "result": {"blob": "x" * size}}


@pytest.mark.trio_clock
async def test_an_sse_stream_bounds_what_a_client_makes_us_hold_in_bytes() -> None:
    """The queue takes at most MAX_QUEUED_BYTES (a bigger message only into an empty queue); the
    answers waiting for room past MAX_WAITING_BYTES behind a write in progress disconnect the
    client at once, without waiting for the stuck-write timer."""
    queue, queued = trio.open_memory_channel[bytes](64)
    stuck: list[float] = []
    stream = Stream(queue, lambda: stuck.append(trio.current_time()))
    stream.MAX_QUEUED_BYTES = stream.MAX_WAITING_BYTES = 1000
    await stream.deliver(big(1, 5000))  # larger than the cap: an empty queue takes it
    assert stream.queued_bytes > 5000 and not stuck
    stream.send_nowait(big(2, 10))  # no room now: dropped (lossy), not held
    assert queued.statistics().current_buffer_used == 1
    stream.writing_since = trio.current_time()  # the pump is in a write that does not complete
    async with trio.open_nursery() as nursery:
        nursery.start_soon(stream.deliver, big(3, 600))
        await trio.sleep(0.2)
        assert not stuck and stream.waiting_bytes > 600  # waits: under the waiting cap, not stuck yet
        nursery.start_soon(stream.deliver, big(4, 600))  # now over MAX_WAITING_BYTES
        await trio.sleep(0.1)
        assert stuck and stuck[0] < 1.0  # at once, well before STUCK_S
        nursery.cancel_scope.cancel()
    data = await queued.receive()
    stream.written(data)
    assert stream.queued_bytes == 0


@pytest.mark.parametrize("parts", [[], [b'{"jsonrpc":"2.0","id":1,'], [b'{"jsonrpc":', b'"2.0"']],
                         ids=["nothing", "one-part", "two-parts"])
async def test_a_client_gone_before_its_body_is_whole_gets_nothing_done(parts: list[bytes]) -> None:
    """Disconnecting mid-body is never a body: `read_body` says so (the admin UI then runs no
    operation on a part of one) and `read_message` answers nothing."""
    events: list[dict[str, Any]] = [{"type": "http.request", "body": p, "more_body": True} for p in parts]
    events.append({"type": "http.disconnect"})
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return events.pop(0)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    with pytest.raises(Disconnected):
        await read_body(receive, CAP)
    events[:] = [{"type": "http.request", "body": p, "more_body": True} for p in parts]
    events.append({"type": "http.disconnect"})
    with trio.fail_after(5):
        assert await read_message(receive, send, CAP, 30.0) is None
    assert sent == []
