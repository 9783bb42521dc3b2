"""Table-driven tests for the sans-IO wire layer: jsonrpc, framing, eras, session, results."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest

from tfunnel.errors import ProtocolError
from tfunnel.protocol import jsonrpc
from tfunnel.protocol.eras import LATEST_LEGACY, LEGACY_VERSIONS, Era, classify, negotiate_legacy
from tfunnel.protocol.framing import LineReader, Oversize
from tfunnel.protocol.jsonrpc import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    PARSE_ERROR,
    MessageError,
    Notification,
    Request,
    Response,
)
from tfunnel.protocol.results import ToolResult
from tfunnel.protocol.session import ClientSession, initialize

PV = "io.modelcontextprotocol/protocolVersion"

# --------------------------------------------------------------------------- jsonrpc


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param('{"jsonrpc":"2.0","id":1,"method":"ping"}', Request(1, "ping", {}), id="request-int-id"),
        pytest.param('{"jsonrpc":"2.0","id":"a-1","method":"tools/list","params":{"cursor":"c"}}',
                     Request("a-1", "tools/list", {"cursor": "c"}), id="request-str-id-params"),
        pytest.param('{"jsonrpc":"2.0","id":0,"method":"x","params":null}', Request(0, "x", {}),
                     id="request-null-params"),
        pytest.param('{"jsonrpc":"2.0","method":"notifications/initialized"}',
                     Notification("notifications/initialized", {}), id="notification"),
        pytest.param('{"jsonrpc":"2.0","method":"n","params":{"a":[1]}}', Notification("n", {"a": [1]}),
                     id="notification-params"),
        pytest.param('{"jsonrpc":"2.0","id":7,"result":{"ok":true}}', Response(7, {"ok": True}, None),
                     id="response-result"),
        pytest.param('{"jsonrpc":"2.0","id":"r","error":{"code":-1,"message":"m"}}',
                     Response("r", None, {"code": -1, "message": "m"}), id="response-error"),
    ],
)
def test_decode_valid(raw: str, expected: jsonrpc.Message) -> None:
    """Valid requests, notifications and responses decode to their message values (bytes or str)."""
    assert jsonrpc.decode(raw) == expected
    assert jsonrpc.decode(raw.encode()) == expected


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(b"{", id="truncated"),
        pytest.param(b"not json", id="garbage"),
        pytest.param(b"", id="empty"),
        pytest.param(b'{"jsonrpc":"2.0","id":1,}', id="trailing-comma"),
        pytest.param(b"\xff\xfe\xfa", id="bad-utf8"),
        pytest.param(b"[" * 100_000, id="deeply-nested"),
    ],
)
def test_decode_parse_error(raw: bytes) -> None:
    """Unparseable input is -32700 with no id (and decode raises nothing but MessageError)."""
    with pytest.raises(MessageError) as info:
        jsonrpc.decode(raw)
    assert info.value.code == PARSE_ERROR
    assert info.value.id is None
    assert info.value.reply is True


@pytest.mark.parametrize(
    ("raw", "strict_ok"),
    [
        pytest.param('{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"\\ud800"}}', False,
                     id="lone-surrogate-escape"),
        pytest.param('{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"\ud800"}}', False,
                     id="raw-surrogate-in-str"),
        pytest.param('{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"\\ud83d\\ude00"}}', True,
                     id="escaped-pair"),
        pytest.param(b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"\xed\xa0\x80"}}', False,
                     id="raw-cesu-bytes"),
        pytest.param(b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"\xe2\x82\xac"}}', True,
                     id="utf8-bytes"),
    ],
)
def test_decode_strict_unicode(raw: bytes | str, strict_ok: bool) -> None:
    """strict_unicode refuses lone surrogates (escaped, raw, CESU bytes) with -32700; the default does not."""
    assert isinstance(jsonrpc.decode(raw), Request)
    if strict_ok:
        assert isinstance(jsonrpc.decode(raw, strict_unicode=True), Request)
        return
    with pytest.raises(MessageError) as info:
        jsonrpc.decode(raw, strict_unicode=True)
    assert info.value.code == PARSE_ERROR and info.value.id is None


@pytest.mark.parametrize(
    ("obj", "code", "msg_id", "reply"),
    [
        pytest.param(5, INVALID_REQUEST, None, True, id="number"),
        pytest.param("x", INVALID_REQUEST, None, True, id="string"),
        pytest.param(None, INVALID_REQUEST, None, True, id="null"),
        pytest.param([{"jsonrpc": "2.0", "id": 1, "method": "ping"}], INVALID_REQUEST, None, True,
                     id="batch"),
        pytest.param([], INVALID_REQUEST, None, True, id="empty-batch"),
        pytest.param({"id": 1, "method": "ping"}, INVALID_REQUEST, 1, True, id="missing-jsonrpc"),
        pytest.param({"jsonrpc": "1.0", "id": "a", "method": "ping"}, INVALID_REQUEST, "a", True,
                     id="wrong-jsonrpc"),
        pytest.param({"jsonrpc": 2.0, "id": 1, "method": "ping"}, INVALID_REQUEST, 1, True,
                     id="jsonrpc-number"),
        pytest.param({"jsonrpc": "2.0", "id": None, "method": "ping"}, INVALID_REQUEST, None, True,
                     id="id-null"),
        pytest.param({"jsonrpc": "2.0", "id": True, "method": "ping"}, INVALID_REQUEST, None, True,
                     id="id-bool"),
        pytest.param({"jsonrpc": "2.0", "id": 1.5, "method": "ping"}, INVALID_REQUEST, None, True,
                     id="id-float"),
        pytest.param({"jsonrpc": "2.0", "id": {"a": 1}, "method": "ping"}, INVALID_REQUEST, None, True,
                     id="id-object"),
        pytest.param({"jsonrpc": "2.0", "id": 3}, INVALID_REQUEST, 3, True, id="missing-method-with-id"),
        pytest.param({"jsonrpc": "2.0", "id": 3, "method": ""}, INVALID_REQUEST, 3, True,
                     id="empty-method"),
        pytest.param({"jsonrpc": "2.0", "id": 3, "method": 4}, INVALID_REQUEST, 3, True,
                     id="method-not-string"),
        pytest.param({"jsonrpc": "2.0", "id": 9, "method": "x", "params": [1]}, INVALID_PARAMS, 9, True,
                     id="params-array-int-id"),
        pytest.param({"jsonrpc": "2.0", "id": "s", "method": "x", "params": "p"}, INVALID_PARAMS, "s", True,
                     id="params-string-str-id"),
        pytest.param({"jsonrpc": "1.0", "method": "n"}, INVALID_REQUEST, None, False,
                     id="notification-wrong-jsonrpc"),
        pytest.param({"jsonrpc": "2.0", "method": "n", "params": 3}, INVALID_PARAMS, None, False,
                     id="notification-bad-params"),
        pytest.param({"jsonrpc": "2.0", "method": 5}, INVALID_REQUEST, None, False,
                     id="notification-bad-method"),
    ],
)
def test_parse_invalid(obj: Any, code: int, msg_id: str | int | None, reply: bool) -> None:
    """Invalid messages get the right code, keep a valid id, and notifications never get a reply."""
    with pytest.raises(MessageError) as info:
        jsonrpc.parse(obj)
    assert (info.value.code, info.value.id, info.value.reply) == (code, msg_id, reply)
    # The same through decode, from the serialized form.
    with pytest.raises(MessageError) as again:
        jsonrpc.decode(json.dumps(obj))
    assert (again.value.code, again.value.id, again.value.reply) == (code, msg_id, reply)


@pytest.mark.parametrize(
    "msg_id",
    [
        pytest.param(0, id="zero"),
        pytest.param(-1, id="negative"),
        pytest.param(2**62, id="big-int"),
        pytest.param("", id="empty-string"),
        pytest.param("1", id="digit-string"),
        pytest.param("ünï\ncode", id="unicode-newline-string"),
    ],
)
def test_ids_preserved_exactly(msg_id: str | int) -> None:
    """String and integer ids come back with their exact value and type (no coercion)."""
    message = jsonrpc.decode(json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": "ping"}))
    assert isinstance(message, Request)
    assert message.id == msg_id
    assert type(message.id) is type(msg_id)


@pytest.mark.parametrize(
    "message",
    [
        pytest.param(jsonrpc.result_message(1, {"text": "a\nb\r\nc"}), id="result-newlines"),
        pytest.param(jsonrpc.error_message(None, PARSE_ERROR, "bad\nline"), id="error-null-id"),
        pytest.param(jsonrpc.error_message("x", INVALID_PARAMS, "m", {"d": "\n"}), id="error-data"),
        pytest.param(jsonrpc.notification_message("notifications/tools/list_changed"), id="notification"),
        pytest.param(jsonrpc.request_message("q\n", "elicitation/create", {"m": "ü\u2028"}), id="request"),
    ],
)
def test_encode_one_line_round_trip(message: dict[str, Any]) -> None:
    """encode() is exactly one UTF-8 line ending in \\n (newlines in strings escaped) and round-trips."""
    line = jsonrpc.encode(message)
    assert line.endswith(b"\n")
    assert line.count(b"\n") == 1
    assert json.loads(line) == message


def test_encode_round_trips_through_decode() -> None:
    """A request built with request_message decodes back to the same Request."""
    line = jsonrpc.encode(jsonrpc.request_message("id\n1", "tools/call", {"name": "a\nb"}))
    assert jsonrpc.decode(line) == Request("id\n1", "tools/call", {"name": "a\nb"})


def test_any_decoded_id_can_be_echoed() -> None:
    """An id that decode accepts (here a lone-surrogate escape) can be encoded in the reply."""
    raw = b'{"jsonrpc":"2.0","id":"\\ud800","method":"ping"}'
    try:
        message = jsonrpc.decode(raw)
    except MessageError:
        return  # rejecting the id up front is also acceptable
    assert isinstance(message, Request)
    line = jsonrpc.encode(jsonrpc.result_message(message.id, {}))
    assert line.count(b"\n") == 1


# --------------------------------------------------------------------------- framing


@pytest.mark.parametrize(
    ("chunks", "expected"),
    [
        pytest.param([b'{"a":', b"1}\n"], [b'{"a":1}'], id="split-across-feeds"),
        pytest.param([b"a\nb\nc\n"], [b"a", b"b", b"c"], id="several-in-one-feed"),
        pytest.param([b"a\r\nb\r\n"], [b"a", b"b"], id="crlf"),
        pytest.param([b"a\r", b"\nb\n"], [b"a", b"b"], id="crlf-split"),
        pytest.param([b"\n\n  \n\r\na\n\n"], [b"a"], id="blank-lines-skipped"),
        pytest.param([b"x" * 16 + b"\n"], [b"x" * 16], id="exactly-cap"),
        pytest.param([b"a", b"b", b"c", b"\n"], [b"abc"], id="byte-by-byte"),
    ],
)
def test_line_reader_lines(chunks: list[bytes], expected: list[bytes]) -> None:
    """Complete non-blank lines come out without their newline or trailing CR."""
    reader = LineReader(16)
    out: list[bytes | Oversize] = []
    for chunk in chunks:
        out += reader.feed(chunk)
    assert out == expected
    assert reader.eof() == []


@pytest.mark.parametrize(
    ("chunks", "expected"),
    [
        pytest.param([b"a\nlast"], [b"last"], id="unterminated"),
        pytest.param([b"a\nla", b"st\r"], [b"last"], id="unterminated-cr"),
        pytest.param([b"a\n   "], [], id="blank-tail"),
        pytest.param([b"a\n"], [], id="terminated"),
    ],
)
def test_line_reader_eof(chunks: list[bytes], expected: list[bytes]) -> None:
    """eof() returns the final unterminated line, if any."""
    reader = LineReader(64)
    for chunk in chunks:
        reader.feed(chunk)
    assert reader.eof() == expected


@pytest.mark.parametrize("chunk_size", [1, 3, 7, 1000, 10_000], ids=lambda n: f"chunks-of-{n}")
def test_line_reader_oversize_resynchronises(chunk_size: int) -> None:
    """An over-cap line gives exactly one Oversize, then the reader resynchronises on the next line."""
    cap = 100
    long_line = b'{"jsonrpc":"2.0","id":42,"method":"x","params":{"p":"' + b"z" * 500 + b'"}}'
    stream = b"before\n" + long_line + b"\nafter\n" + b"tail"
    reader = LineReader(cap)
    events: list[bytes | Oversize] = []
    for start in range(0, len(stream), chunk_size):
        events += reader.feed(stream[start:start + chunk_size])
    events += reader.eof()
    oversize = [e for e in events if isinstance(e, Oversize)]
    assert len(oversize) == 1
    assert [e for e in events if isinstance(e, bytes)] == [b"before", b"after", b"tail"]
    assert events.index(oversize[0]) == 1
    assert oversize[0].size_at_least > cap
    assert oversize[0].sniff_id() == 42


def test_line_reader_oversize_unterminated_at_eof() -> None:
    """An over-cap line cut off by end of stream is reported once and not returned by eof()."""
    reader = LineReader(10)
    events = reader.feed(b"y" * 50)
    assert len(events) == 1 and isinstance(events[0], Oversize)
    assert reader.eof() == []


@pytest.mark.parametrize(
    ("head", "expected"),
    [
        pytest.param(b'{"jsonrpc":"2.0","id":"abc-1","method":"x"', "abc-1", id="string"),
        pytest.param(b'{"id": 17, "jsonrpc":"2.0"', 17, id="int-spaces"),
        pytest.param(b'{"jsonrpc":"2.0","id":-3,"method"', -3, id="negative-int"),
        pytest.param(b'{"jsonrpc":"2.0","method":"x","params":{"a":"', None, id="absent"),
        pytest.param(b'{"jsonrpc":"2.0","tool_id":5,', None, id="other-key-ending-in-id"),
        pytest.param(b'{"jsonrpc":"2.0","id":null,', None, id="null"),
    ],
)
def test_oversize_sniff_id(head: bytes, expected: str | int | None) -> None:
    """sniff_id finds string and integer ids near the start of the line; None when absent."""
    assert Oversize(head, len(head)).sniff_id() == expected


# --------------------------------------------------------------------------- eras


@pytest.mark.parametrize(
    ("method", "params", "era"),
    [
        pytest.param("tools/list", {"_meta": {PV: "2026-07-28"}}, Era.MODERN, id="modern"),
        pytest.param("tools/list", {"_meta": {PV: "1999-01-01"}}, Era.MODERN, id="modern-any-version"),
        pytest.param("initialize", {"_meta": {PV: "2026-07-28"}}, Era.LEGACY, id="initialize-always-legacy"),
        pytest.param("tools/list", {}, Era.LEGACY, id="no-meta"),
        pytest.param("tools/list", {"_meta": {}}, Era.LEGACY, id="empty-meta"),
        pytest.param("tools/list", {"_meta": {"progressToken": 1}}, Era.LEGACY, id="meta-other-keys"),
        pytest.param("tools/list", {"_meta": "x"}, Era.LEGACY, id="meta-not-object"),
        pytest.param("tools/list", {PV: "2026-07-28"}, Era.LEGACY, id="key-outside-meta"),
    ],
)
def test_classify(method: str, params: Mapping[str, Any], era: Era) -> None:
    """Modern iff params._meta carries the protocol-version key and the method is not initialize."""
    assert classify(method, params) is era


@pytest.mark.parametrize(
    ("requested", "answered"),
    [pytest.param(v, v, id=f"echo-{v}") for v in LEGACY_VERSIONS]
    + [
        pytest.param("2099-01-01", LATEST_LEGACY, id="unknown"),
        pytest.param("2026-07-28", LATEST_LEGACY, id="future-modern"),
        pytest.param(None, LATEST_LEGACY, id="none"),
        pytest.param(20241105, LATEST_LEGACY, id="int"),
        pytest.param("", LATEST_LEGACY, id="empty"),
    ],
)
def test_negotiate_legacy(requested: Any, answered: str) -> None:
    """Legacy versions are echoed; anything else is answered with 2025-11-25."""
    assert LATEST_LEGACY == "2025-11-25"
    assert negotiate_legacy(requested) == answered


# --------------------------------------------------------------------------- session


def test_initialize_records_and_answers() -> None:
    """initialize records version, capabilities and clientInfo and builds the InitializeResult."""
    session = ClientSession("s1")
    params = {"protocolVersion": "2025-03-26", "capabilities": {"elicitation": {}},
              "clientInfo": {"name": "cli", "version": "1.2"}}
    result = initialize(session, params, {"name": "tfunnel", "version": "0.1"}, "Use the meta-tools.")
    assert session.protocol_version == "2025-03-26"
    assert session.capabilities == {"elicitation": {}}
    assert session.client_info == {"name": "cli", "version": "1.2"}
    assert session.label == "cli/1.2"
    assert result == {
        "protocolVersion": "2025-03-26",
        "capabilities": {"tools": {"listChanged": True}, "prompts": {"listChanged": True},
                         "resources": {"subscribe": True, "listChanged": True}, "completions": {},
                         "logging": {}},
        "serverInfo": {"name": "tfunnel", "version": "0.1"},
        "instructions": "Use the meta-tools.",
    }


def test_initialize_unknown_version_and_defaults() -> None:
    """An unknown version is answered with the latest legacy one; missing fields default to {}."""
    session = ClientSession("s2")
    result = initialize(session, {"protocolVersion": "2030-01-01"}, {"name": "t"}, "i")
    assert result["protocolVersion"] == LATEST_LEGACY
    assert (session.capabilities, session.client_info) == ({}, {})


@pytest.mark.parametrize(
    "params",
    [
        pytest.param({"capabilities": [], "clientInfo": {}}, id="capabilities-array"),
        pytest.param({"capabilities": "x"}, id="capabilities-string"),
        pytest.param({"clientInfo": 5}, id="clientInfo-number"),
        pytest.param({"capabilities": {}, "clientInfo": None}, id="clientInfo-null"),
    ],
)
def test_initialize_rejects_non_objects(params: dict[str, Any]) -> None:
    """Non-object capabilities or clientInfo is a -32602 ProtocolError."""
    with pytest.raises(ProtocolError) as info:
        initialize(ClientSession("s"), params, {"name": "t"}, "i")
    assert info.value.code == INVALID_PARAMS


# --------------------------------------------------------------------------- results


@pytest.mark.parametrize(
    ("result", "wire"),
    [
        pytest.param(ToolResult.text("hi"), {"content": [{"type": "text", "text": "hi"}]}, id="text"),
        pytest.param(ToolResult.text("no", is_error=True),
                     {"content": [{"type": "text", "text": "no"}], "isError": True}, id="error"),
        pytest.param(ToolResult(content=({"type": "text", "text": '{"a":1}'},), structured={"a": 1}),
                     {"content": [{"type": "text", "text": '{"a":1}'}], "structuredContent": {"a": 1}},
                     id="structured"),
        pytest.param(ToolResult.failure("denied", denied=True),
                     {"content": [{"type": "text", "text": "denied"}], "isError": True}, id="failure"),
        pytest.param(ToolResult(), {"content": []}, id="empty"),
        pytest.param(ToolResult(structured={}), {"content": [], "structuredContent": {}},
                     id="empty-structured-kept"),
    ],
)
def test_tool_result_to_wire(result: ToolResult, wire: dict[str, Any]) -> None:
    """to_wire emits isError only when true and structuredContent only when set."""
    assert result.to_wire() == wire
