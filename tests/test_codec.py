"""The JSON-RPC codec: orjson first, the standard library for whatever orjson refuses.

Each input is decoded twice, once as the gateway does and once with orjson switched off (the
standard library alone, the behaviour before orjson); both must agree, value for value or error
for error. Encoding likewise: the bytes may differ in float spelling, the value they carry may
not (except non-finite floats, which orjson writes as `null`: the standard library's `NaN` is
not JSON).
"""

from __future__ import annotations

import json
import math
from typing import Any

import orjson
import pytest

from tfunnel.protocol import jsonrpc

DEEP = b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":' + b"[" * 2000 + b"]" * 2000 + b"}}"

INPUTS: list[tuple[str, bytes | str]] = [
    ("request", b'{"jsonrpc":"2.0","id":7,"method":"tools/call",'
                b'"params":{"name":"x","arguments":{"t":"h\xc3\xa9"}}}'),
    ("numbers", b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":-0,"b":1E2,"c":1.5e-10,"d":-0.0,'
                b'"e":9223372036854775807,"f":0.1234567890123456789}}'),
    ("string id", b'{"jsonrpc":"2.0","id":"a-1","method":"ping"}'),
    ("notification", b'{"jsonrpc":"2.0","method":"notifications/initialized"}'),
    ("response", b'{"jsonrpc":"2.0","id":3,"result":{"content":[]}}'),
    ("text input", '{"jsonrpc":"2.0","id":1,"method":"ping"}'),
    ("byte order mark", b'\xef\xbb\xbf{"jsonrpc":"2.0","id":1,"method":"ping"}'),
    ("NaN", b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"x":NaN}}'),
    ("Infinity", b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"x":-Infinity}}'),
    ("float overflow", b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"x":1e400}}'),
    ("big integer", b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"x":123456789012345678901234567890}}'),
    ("big id", b'{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"m"}'),
    ("lone surrogate escape", b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"x":"\\ud800"}}'),
    ("paired surrogate escape", b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"x":"\\ud83d\\ude00"}}'),
    ("invalid UTF-8", b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"x":"\xff"}}'),
    ("raw surrogate bytes", b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"x":"\xed\xa0\x80"}}'),
    ("duplicate keys", b'{"jsonrpc":"2.0","id":1,"id":2,"method":"m"}'),
    ("deep nesting", DEEP),
    ("trailing garbage", b'{"jsonrpc":"2.0","id":1,"method":"m"} x'),
    ("batch", b'[{"jsonrpc":"2.0","id":1,"method":"m"}]'),
    ("not an object", b'"text"'),
    ("empty", b""),
    ("UTF-16", '{"jsonrpc":"2.0","id":1,"method":"ping"}'.encode("utf-16")),
    ("bool id", b'{"jsonrpc":"2.0","id":true,"method":"m"}'),
]


def outcome(data: bytes | str, strict: bool) -> tuple[str, Any]:
    try:
        return "message", repr(jsonrpc.decode(data, strict_unicode=strict))
    except jsonrpc.MessageError as err:
        return "error", err.code


@pytest.mark.parametrize("strict", [False, True], ids=["lenient", "strict"])
@pytest.mark.parametrize(("label", "data"), INPUTS, ids=[label for label, _ in INPUTS])
def test_decoding_agrees_with_the_standard_library(label: str, data: bytes | str, strict: bool,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    ours = outcome(data, strict)

    def refuse(_: Any) -> Any:
        raise orjson.JSONDecodeError("off", "", 0)

    monkeypatch.setattr(orjson, "loads", refuse)
    assert ours == outcome(data, strict)


VALUES: list[tuple[str, Any]] = [
    ("result", jsonrpc.result_message(1, {"content": [{"type": "text", "text": "h\u00e9 \u2028 \n \x00"}]})),
    ("floats", jsonrpc.result_message(1, {"a": 1e16, "b": 0.1, "c": -0.0, "d": 5e-324,
                                          "e": 1.7976931348623157e308})),
    ("big integer", jsonrpc.result_message(1, {"x": 2**70})),
    ("integer keys", jsonrpc.result_message(1, {"x": {1: "a"}})),
    ("tuple", jsonrpc.result_message(1, {"x": (1, 2)})),
    ("lone surrogate", jsonrpc.result_message(1, {"x": "a\ud800b"})),
    ("emoji", jsonrpc.result_message("id", {"x": "\U0001f600"})),
]


@pytest.mark.parametrize(("label", "value"), VALUES, ids=[label for label, _ in VALUES])
def test_encoding_carries_the_same_value(label: str, value: dict[str, Any]) -> None:
    line = jsonrpc.encode(value)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    standard = json.dumps(value, ensure_ascii=True, separators=(",", ":"))
    assert json.loads(line) == json.loads(standard)
    assert json.loads(jsonrpc.to_json(value)) == json.loads(standard)
    assert json.loads(jsonrpc.to_bytes(value)) == json.loads(standard)
    line.decode("utf-8")  # always UTF-8, whatever the value held


def test_non_finite_floats_are_written_as_null() -> None:
    """The standard library would write NaN, which no JSON parser has to accept."""
    line = jsonrpc.encode(jsonrpc.result_message(1, {"a": math.nan, "b": math.inf}))
    written = json.loads(line, parse_constant=lambda c: pytest.fail(f"wrote {c}"))
    assert written["result"] == {"a": None, "b": None}


def test_files_are_written_the_same_way_by_either_codec(tmp_path: Any) -> None:
    """`write_json_atomic(finite=True)` (orjson) writes the same bytes as the standard library for
    a document tfunnel builds; without `finite`, an operator's Infinity stays Infinity."""
    from tfunnel.config.atomic import write_json_atomic

    document = {"version": 1, "upstreams": {"é": {"approved": {"tool:t": {"digest": "sha256:x"}}}},
                "list": [1, 2.5, None, True, [], {}], "text": "a\nb\u2028"}
    fast, plain = tmp_path / "fast.json", tmp_path / "plain.json"
    write_json_atomic(fast, document, finite=True)
    write_json_atomic(plain, document)
    assert fast.read_bytes() == plain.read_bytes()
    write_json_atomic(plain, {"timeout": math.inf})
    assert json.loads(plain.read_text())["timeout"] == math.inf
