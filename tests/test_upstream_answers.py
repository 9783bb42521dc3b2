"""A broken upstream answer fails its request at once; an answer to no request is logged and
dropped. Pure tables for the decode-or-sniff step, then the mock upstream behind the gateway
(in-process)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from tests.test_upstream_gateway import call
from tests.upstreams import mock_upstream, set_upstreams
from tfunnel.protocol.framing import LineReader, TopLevel, sniff_top_level
from tfunnel.protocol.jsonrpc import Notification, Request, Response
from tfunnel.testing.gateway import stdio_gateway as gateway
from tfunnel.testing.mock_upstream import BAD_DEPTH
from tfunnel.upstream.client import BrokenAnswer, ClientCore, Garbage, OversizeResponse, decode_line

pytestmark = pytest.mark.timeout(60)

DEEP = b'{"a":' * BAD_DEPTH + b"1" + b"}" * BAD_DEPTH


@pytest.mark.parametrize(("line", "expected"), [
    pytest.param(b'{"jsonrpc":"2.0","id":5,"result":{}}', TopLevel(5), id="plain"),
    pytest.param(b'{"jsonrpc":"2.0","id":5,"result":' + DEEP + b"}", TopLevel(5), id="deep-id-first"),
    pytest.param(b'{"jsonrpc":"2.0","result":' + DEEP + b',"id":"x"}', TopLevel("x"), id="deep-id-last"),
    pytest.param(b'{"result":{"id":3,"s":"}]{\\"id\\":4"},"id":9}', TopLevel(9), id="nested-id-ignored"),
    pytest.param(b'{"result":{"id":3},"x":1', TopLevel(), id="only-a-nested-id"),
    pytest.param(b'{"jsonrpc":"2.0","id":7,"result":{"content":[', TopLevel(7), id="cut-off"),
    pytest.param(b'  {"id" : -3 , "error":"oops"}', TopLevel(-3), id="spaces-negative"),
    pytest.param(b'{"id":"a\\u0041","result":1}', TopLevel("aA"), id="escaped-string-id"),
    pytest.param(b'{"id":7,"method":"ping"}', TopLevel(7, has_method=True), id="request"),
    pytest.param(b'{"\\u006dethod":"x","id":1}', TopLevel(1, has_method=True), id="escaped-key"),
    pytest.param(b'{"id":true,"result":{}}', TopLevel(), id="bool-id"),
    pytest.param(b'{"id":1.5,"result":{}}', TopLevel(), id="float-id"),
    pytest.param(b'{"id":null,"error":{}}', TopLevel(), id="null-id"),
    pytest.param(b'[{"id":1}]', TopLevel(), id="batch"),
    pytest.param(b"this is not json", TopLevel(), id="not-json"),
    pytest.param(b"", TopLevel(), id="empty"),
])
def test_sniff_top_level(line: bytes, expected: TopLevel) -> None:
    """Only the line's own top-level id counts (never one nested in its result), however deep
    the nesting, and a line cut off after the id still names it."""
    assert sniff_top_level(line) == expected


@pytest.mark.parametrize(("line", "expected"), [
    pytest.param(b'{"jsonrpc":"2.0","id":1,"result":{"ok":true}}', Response(1, {"ok": True}), id="answer"),
    pytest.param(b'{"jsonrpc":"2.0","id":"s","method":"ping"}', Request("s", "ping"), id="request"),
    pytest.param(b'{"jsonrpc":"2.0","method":"n"}', Notification("n"), id="notification"),
    pytest.param(b'{"jsonrpc":"2.0","id":1,"result":' + DEEP + b"}", BrokenAnswer(1, ""), id="deep"),
    pytest.param(b'{"jsonrpc":"2.0","id":2,"result":"oops"}', BrokenAnswer(2, ""), id="result-string"),
    pytest.param(b'{"jsonrpc":"2.0","id":3,"result":{},"error":{"code":1,"message":"m"}}',
                 BrokenAnswer(3, ""), id="both"),
    pytest.param(b'{"jsonrpc":"2.0","id":4}', BrokenAnswer(4, ""), id="neither"),
    pytest.param(b'{"jsonrpc":"2.0","id":5,"error":"oops"}', BrokenAnswer(5, ""), id="error-string"),
    pytest.param(b'{"jsonrpc":"2.0","id":6,"result":{"content":[', BrokenAnswer(6, ""), id="invalid-json"),
    pytest.param(b'{"jsonrpc":"1.0","id":7,"result":{}}', BrokenAnswer(7, ""), id="wrong-version"),
    pytest.param(b'{"jsonrpc":"2.0","id":8,"method":7}', Garbage(b"", ""), id="bad-request"),
    pytest.param(b'{"jsonrpc":"2.0","id":null,"error":{}}', Garbage(b"", ""), id="null-id"),
    pytest.param(b"this is not json", Garbage(b"", ""), id="not-json"),
])
def test_decode_line(line: bytes, expected: object) -> None:
    """A line decodes to a message; one that does not is a `BrokenAnswer` naming the request it
    answers when its id can be read (and it is no request), else `Garbage`."""
    event = decode_line(line)
    assert type(event) is type(expected)
    if isinstance(expected, BrokenAnswer):
        assert isinstance(event, BrokenAnswer) and event.request_id == expected.request_id
        assert event.error and b"oops" not in event.error.encode()  # our reason, not their text
    elif not isinstance(expected, Garbage):
        assert event == expected


BROKEN_KINDS = ["deep", "result_string", "both", "error_string", "invalid_json", "neither"]
CALL_TIMEOUT_MS = 60_000
AT_ONCE_S = 10.0  # far below the call's own timeout


async def test_broken_answers_fail_their_call_at_once(home: Path) -> None:
    """Each kind of broken answer fails its call at once (long before its 60 s timeout) with an
    error naming the upstream and never the line; an answer to an unknown id fails nothing, is
    logged once, and the session keeps working."""
    set_upstreams(home, mock_upstream("mock", "--tools", "echo,bad_answer", timeoutMs=CALL_TIMEOUT_MS))
    async with gateway(home) as wire:
        await wire.initialize()
        for index, kind in enumerate(BROKEN_KINDS):
            with trio.fail_after(AT_ONCE_S):
                result = (await call(wire, index, "mock_bad_answer", {"kind": kind}))["result"]
            assert result["isError"] is True, kind
            assert result["content"][0]["text"] == \
                "upstream 'mock' sent an answer to this request that could not be read", kind
        with trio.fail_after(AT_ONCE_S):
            for request_id in ("u1", "u2"):
                unknown = (await call(wire, request_id, "mock_bad_answer", {"kind": "unknown_id"}))["result"]
                assert unknown["content"][0]["text"] == "after unknown id"
            echo = (await call(wire, "e", "mock_echo", {"text": "still fine"}))["result"]
            assert echo["content"][0]["text"] == "still fine"
    logged = [json.loads(line) for line in wire.stderr.decode().splitlines() if line.startswith("{")]
    unreadable = [e for e in logged if e.get("event") == "upstream answer could not be read"]
    assert [e["count"] for e in unreadable] == [1]  # rate-limited: the 1st, then the 10th...
    unmatched = [e for e in logged if e.get("event") == "upstream answered no request we sent; dropped"]
    assert [(e["count"], e["request"]) for e in unmatched] == [(1, 987654321)]
    assert "oops" not in wire.stderr.decode()


@pytest.mark.parametrize(("line", "request_id"), [
    pytest.param(b'{"jsonrpc":"2.0","id":4,"result":{"content":[{"text":"' + b"x" * 5000 + b'"}]}}', 4,
                 id="answer"),
    pytest.param(b'{"jsonrpc":"2.0","result":{"id":3,"text":"' + b"x" * 5000 + b'"},"id":4}', None,
                 id="id-beyond-the-head"),
    pytest.param(b'{"jsonrpc":"2.0","id":4,"method":"x","params":{"t":"' + b"x" * 5000 + b'"}}', None,
                 id="request"),
])
def test_oversize_line_names_only_a_top_level_answer_id(line: bytes, request_id: int | None) -> None:
    """An over-cap upstream line fails the call its top-level id names, read from its first
    bytes; an id nested in the result or a request's id names none."""
    [item] = LineReader(1000).feed(line + b"\n")  # the stdio transport's framing, then the core
    event = ClientCore().feed(item)
    assert isinstance(event, OversizeResponse) and event.request_id == request_id
