"""Table-driven tests for the modern era's sans-IO pieces: modern.py, headers.py, mrtr.py."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Mapping
from typing import Any

import pytest

from tfunnel.errors import ProtocolError
from tfunnel.protocol.headers import (
    ParamHeader,
    check_modern_headers,
    check_param_headers,
    decode_value,
    mirrored_params,
    param_headers,
)
from tfunnel.protocol.modern import (
    CLIENT_CAPABILITIES_META,
    CLIENT_INFO_META,
    HEADER_MISMATCH,
    LOG_LEVEL_META,
    SERVER_INFO_META,
    UNSUPPORTED_PROTOCOL_VERSION,
    Envelope,
    complete,
    discover_result,
    envelope,
    http_status,
    legacy_view,
    request_meta,
)
from tfunnel.protocol.mrtr import (
    MAX_TOKEN_CHARS,
    RequestState,
    RequestStateError,
    Sealer,
    binding,
    question_digest,
)
from tfunnel.upstream.http import header_value

PV = "io.modelcontextprotocol/protocolVersion"
V = "2026-07-28"
INVALID_PARAMS = -32602
CAPS: dict[str, Any] = {"elicitation": {}}
INFO = {"name": "c", "version": "1"}
SERVER = {"name": "tfunnel", "version": "9"}


def b64(text: str) -> str:
    return "=?base64?" + base64.b64encode(text.encode("utf-8")).decode("ascii") + "?="


def meta(**overrides: Any) -> dict[str, Any]:
    """A valid `_meta`; an override of None removes the key."""
    out: dict[str, Any] = {PV: V, CLIENT_CAPABILITIES_META: CAPS, CLIENT_INFO_META: INFO}
    for key, value in overrides.items():
        name = {"pv": PV, "caps": CLIENT_CAPABILITIES_META, "info": CLIENT_INFO_META,
                "level": LOG_LEVEL_META}[key]
        if value is None:
            out.pop(name, None)
        else:
            out[name] = value
    return out


# =========================================================================== modern.py: envelope


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        pytest.param({}, '"_meta" must be an object', id="no-meta"),
        pytest.param({"_meta": [1]}, '"_meta" must be an object', id="meta-list"),
        pytest.param({"_meta": meta(pv=None)}, PV, id="no-version"),
        pytest.param({"_meta": meta(pv=20260728)}, PV, id="version-int"),
        pytest.param({"_meta": meta(pv="")}, PV, id="version-empty"),
        pytest.param({"_meta": meta(caps=None)}, CLIENT_CAPABILITIES_META, id="no-capabilities"),
        pytest.param({"_meta": meta(caps=["sampling"])}, CLIENT_CAPABILITIES_META, id="capabilities-list"),
        pytest.param({"_meta": meta(info="c/1")}, CLIENT_INFO_META, id="client-info-string"),
        pytest.param({"_meta": meta(level="verbose")}, LOG_LEVEL_META, id="bad-log-level"),
        pytest.param({"_meta": meta(level=3)}, LOG_LEVEL_META, id="log-level-int"),
        # Shape is checked before the version: a malformed request never gets -32022.
        pytest.param({"_meta": meta(pv="1999-01-01", caps=None)}, CLIENT_CAPABILITIES_META,
                     id="shape-before-version"),
    ],
)
def test_envelope_rejects_malformed_meta(params: dict[str, Any], needle: str) -> None:
    """A missing or ill-typed `_meta` key is -32602, naming the key, with no data."""
    with pytest.raises(ProtocolError) as info:
        envelope(params)
    assert info.value.code == INVALID_PARAMS
    assert info.value.message.startswith("Invalid params: ")
    assert needle in info.value.message
    assert info.value.data is None


@pytest.mark.parametrize(
    ("version", "supported"),
    [
        pytest.param("2025-11-25", ("2026-07-28",), id="legacy-version"),
        pytest.param("2099-01-01", ("2026-07-28",), id="future-version"),
        pytest.param("2026-07-28", ("2027-01-01",), id="known-but-not-served"),
    ],
)
def test_envelope_unsupported_version(version: str, supported: tuple[str, ...]) -> None:
    """A version we do not serve is -32022 with data naming what we support and what was asked."""
    with pytest.raises(ProtocolError) as info:
        envelope({"_meta": meta(pv=version)}, supported)
    assert info.value.code == UNSUPPORTED_PROTOCOL_VERSION
    assert info.value.message == "Unsupported protocol version"
    assert info.value.data == {"supported": list(supported), "requested": version}


@pytest.mark.parametrize(
    ("m", "expected"),
    [
        pytest.param(meta(), Envelope(V, CAPS, INFO, None), id="full"),
        pytest.param(meta(info=None, caps={}), Envelope(V, {}, {}, None), id="minimal"),
        pytest.param(meta(level="warning"), Envelope(V, CAPS, INFO, "warning"), id="log-level"),
    ],
)
def test_envelope_ok(m: dict[str, Any], expected: Envelope) -> None:
    """A valid envelope yields its version, capabilities, client info and log level."""
    assert envelope({"_meta": m, "name": "x"}) == expected


@pytest.mark.parametrize(
    ("capabilities", "capability", "declared"),
    [
        pytest.param({"elicitation": {}}, "elicitation", True, id="declared"),
        pytest.param({}, "elicitation", False, id="absent"),
        pytest.param({"elicitation": True}, "elicitation", False, id="not-an-object"),
    ],
)
def test_envelope_declared(capabilities: dict[str, Any], capability: str, declared: bool) -> None:
    """A capability counts as declared only when its value is an object."""
    assert envelope({"_meta": meta(caps=capabilities)}).declared(capability) is declared


# =========================================================================== modern.py: complete


@pytest.mark.parametrize(
    ("result", "method", "expected"),
    [
        pytest.param({"tools": []}, "tools/list",
                     {"tools": [], "resultType": "complete", "ttlMs": 0, "cacheScope": "private"},
                     id="legacy-list-gets-type-and-hints"),
        pytest.param({"content": []}, "tools/call", {"content": [], "resultType": "complete"},
                     id="call-no-cache-hints"),
        pytest.param({"resultType": "input_required", "requestState": "s"}, "tools/call",
                     {"resultType": "input_required", "requestState": "s"}, id="input-required-kept"),
        pytest.param({"resultType": "input_required", "requestState": "s"}, "resources/read",
                     {"resultType": "input_required", "requestState": "s"}, id="input-required-not-cached"),
        pytest.param({"contents": [], "ttlMs": 5000, "cacheScope": "public"}, "resources/read",
                     {"contents": [], "resultType": "complete", "ttlMs": 5000, "cacheScope": "private"},
                     id="valid-ttl-kept-scope-always-private"),
        pytest.param({"ttlMs": -1}, "server/discover",
                     {"ttlMs": 0, "resultType": "complete", "cacheScope": "private"}, id="negative-ttl"),
        pytest.param({"ttlMs": "5"}, "prompts/list",
                     {"ttlMs": 0, "resultType": "complete", "cacheScope": "private"}, id="string-ttl"),
        pytest.param({"ttlMs": True}, "resources/list",
                     {"ttlMs": 0, "resultType": "complete", "cacheScope": "private"}, id="bool-ttl"),
        pytest.param({"ttlMs": 1.5, "cacheScope": "everyone"}, "resources/templates/list",
                     {"ttlMs": 0, "resultType": "complete", "cacheScope": "private"},
                     id="float-ttl-bad-scope"),
        pytest.param({"resultType": "complete"}, "tools/list",
                     {"resultType": "complete", "ttlMs": 0, "cacheScope": "private"}, id="complete-kept"),
    ],
)
def test_complete(result: dict[str, Any], method: str, expected: dict[str, Any]) -> None:
    """resultType is added (legacy = complete), cache hints only on cacheable complete results,
    an invalid ttlMs/cacheScope is replaced, and our serverInfo is in `_meta`."""
    before = json.dumps(result)
    out = complete(result, method, SERVER)
    assert out == {**expected, "_meta": {SERVER_INFO_META: SERVER}}
    assert json.dumps(result) == before


@pytest.mark.parametrize(
    ("upstream_meta", "expected"),
    [
        pytest.param({"k": 1}, {"k": 1, SERVER_INFO_META: SERVER}, id="merged"),
        pytest.param({SERVER_INFO_META: {"name": "up"}}, {SERVER_INFO_META: SERVER}, id="ours-wins"),
        pytest.param("junk", {SERVER_INFO_META: SERVER}, id="non-object-replaced"),
    ],
)
def test_complete_merges_server_info(upstream_meta: Any, expected: dict[str, Any]) -> None:
    """An upstream's `_meta` keys survive; serverInfo is always ours."""
    assert complete({"_meta": upstream_meta}, "tools/call", SERVER)["_meta"] == expected


@pytest.mark.parametrize(
    ("code", "status"),
    [(-32700, 400), (-32600, 400), (-32602, 400), (-32020, 400), (-32021, 400), (-32022, 400),
     (-32601, 404), (-32603, 200), (-32000, 200), (-32002, 200), (1, 200)],
)
def test_http_status(code: int, status: int) -> None:
    """Modern JSON-RPC errors map to HTTP statuses as the SDK does (§3.6)."""
    assert http_status(code) == status


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        pytest.param({"resultType": "complete", "ttlMs": 0, "cacheScope": "public", "tools": [],
                      "_meta": {"k": 1}}, {"tools": [], "_meta": {"k": 1}}, id="modern-fields-dropped"),
        pytest.param({"content": [], "isError": True}, {"content": [], "isError": True}, id="untouched"),
    ],
)
def test_legacy_view(result: dict[str, Any], expected: dict[str, Any]) -> None:
    """A legacy client never sees resultType, ttlMs or cacheScope."""
    assert legacy_view(result) == expected


@pytest.mark.parametrize(
    ("level", "expected"),
    [
        pytest.param(None, {PV: V, CLIENT_INFO_META: INFO, CLIENT_CAPABILITIES_META: CAPS}, id="no-level"),
        pytest.param("debug", {PV: V, CLIENT_INFO_META: INFO, CLIENT_CAPABILITIES_META: CAPS,
                               LOG_LEVEL_META: "debug"}, id="level"),
    ],
)
def test_request_meta(level: str | None, expected: dict[str, Any]) -> None:
    """The `_meta` we send upstream carries the required keys, and a log level only when asked,
    and passes our own envelope check."""
    out = request_meta(V, INFO, CAPS, log_level=level)
    assert out == expected
    assert envelope({"_meta": out}) == Envelope(V, CAPS, INFO, level)


def test_discover_result() -> None:
    """server/discover names our versions and capabilities, and instructions only when set."""
    assert discover_result({"tools": {"listChanged": True}}, None) == {
        "supportedVersions": [V], "capabilities": {"tools": {"listChanged": True}}}
    assert discover_result({}, "hi")["instructions"] == "hi"


# =========================================================================== headers.py: decode_value


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param("echo", "echo", id="plain"),
        pytest.param(" \techo \t", "echo", id="ows-stripped"),
        pytest.param("two words", "two words", id="inner-space"),
        pytest.param("", "", id="empty"),
        pytest.param("=?base64?SGVsbG8sIOS4lueVjA==?=", "Hello, 世界", id="non-ascii"),
        pytest.param("=?base64?IHBhZGRlZCA=?=", " padded ", id="edge-spaces-kept"),
        pytest.param("=?base64?bGluZTEKbGluZTI=?=", "line1\nline2", id="newline"),
        pytest.param("=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?=", "=?base64?literal?=", id="sentinel-literal"),
        pytest.param(" =?base64?YWRk?= ", "add", id="ows-around-sentinel"),
        pytest.param("=?base64??=", "", id="empty-payload"),
        pytest.param("=?BASE64?YWRk?=", "=?BASE64?YWRk?=", id="markers-case-sensitive"),
        pytest.param("=?base64?=", "=?base64?=", id="too-short-for-sentinel"),
        pytest.param(b64("日本語ツール"), "日本語ツール", id="cjk-name"),
    ],
)
def test_decode_value(raw: str, expected: str) -> None:
    """Plain values pass with OWS stripped; the base64 sentinel decodes as UTF-8."""
    assert decode_value(raw) == expected


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        pytest.param("a\x00b", "control characters or non-ASCII", id="nul"),
        pytest.param("a\tb", "control characters or non-ASCII", id="inner-tab"),
        pytest.param("a\x7f", "control characters or non-ASCII", id="del"),
        pytest.param("caf\xe9", "control characters or non-ASCII", id="latin-1-byte"),
        pytest.param("=?base64?YWRk\x01?=", "control characters or non-ASCII", id="control-in-sentinel"),
        pytest.param("=?base64?%%%?=", "base64 alphabet", id="bad-alphabet"),
        pytest.param("=?base64?YW Rk?=", "base64 alphabet", id="space-in-payload"),
        pytest.param("=?base64?YWRk-_?=", "base64 alphabet", id="urlsafe-alphabet"),
        pytest.param("=?base64?Y?=", "not valid base64", id="impossible-length"),
        pytest.param("=?base64?YWJ?=", "canonical", id="trailing-bits"),
        pytest.param("=?base64?YWRk=?=", "canonical", id="excess-padding"),
        pytest.param("=?base64?SGVsbG8?=", "canonical", id="missing-padding"),
        pytest.param("=?base64?SGVs!!!bG8=?=", "base64 alphabet", id="not-the-alphabet"),
        pytest.param("=?base64?//79?=", "UTF-8", id="not-utf8"),
    ],
)
def test_decode_value_rejects(raw: str, needle: str) -> None:
    """Bad base64, non-UTF-8 payloads and unsafe plain values raise ValueError saying why."""
    with pytest.raises(ValueError, match=needle):
        decode_value(raw)


# =========================================================================== headers.py: standard headers


def std(method: str = "tools/call", name: str | None = "echo", **extra: str | None) -> dict[str, str]:
    """Headers as our ASGI app builds them; an extra of None removes that header."""
    out = {"mcp-protocol-version": V, "mcp-method": method, "content-type": "application/json"}
    if name is not None:
        out["mcp-name"] = name
    for key, value in extra.items():
        key = key.replace("_", "-")
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


@pytest.mark.parametrize(
    ("headers", "method", "params"),
    [
        pytest.param(std(), "tools/call", {"name": "echo"}, id="tools-call"),
        pytest.param(std("tools/list", None), "tools/list", {}, id="no-name-needed"),
        pytest.param(std("tools/list", "ignored"), "tools/list", {}, id="name-ignored-elsewhere"),
        pytest.param(std("prompts/get", "greet"), "prompts/get", {"name": "greet"}, id="prompts-get"),
        pytest.param(std("resources/read", "file:///a b.txt"), "resources/read", {"uri": "file:///a b.txt"},
                     id="resources-read"),
        pytest.param(std(name=b64("héllo")), "tools/call", {"name": "héllo"}, id="base64-non-ascii-name"),
        pytest.param(std(name=b64("echo")), "tools/call", {"name": "echo"}, id="base64-ascii-name"),
        pytest.param(std(name="  echo\t"), "tools/call", {"name": "echo"}, id="ows-around-name"),
        pytest.param(std(mcp_method=" tools/call "), "tools/call", {"name": "echo"}, id="ows-around-method"),
        pytest.param(std(name="x"), "tools/call", {"name": 42}, id="non-string-name-left-to-params"),
    ],
)
def test_check_modern_headers_ok(headers: dict[str, str], method: str, params: dict[str, Any]) -> None:
    """Headers that agree with the body pass."""
    check_modern_headers(headers, method, params, V)


@pytest.mark.parametrize(
    ("headers", "method", "params", "message"),
    [
        pytest.param(std(mcp_protocol_version=None), "tools/call", {"name": "echo"},
                     "MCP-Protocol-Version is missing (the body's _meta says '2026-07-28')",
                     id="version-missing"),
        pytest.param(std(mcp_protocol_version="2025-11-25"), "tools/call", {"name": "echo"},
                     "MCP-Protocol-Version is '2025-11-25' but the body's _meta says '2026-07-28'",
                     id="version-differs"),
        pytest.param(std(mcp_protocol_version="2026-07-28\x00"), "tools/call", {"name": "echo"},
                     "MCP-Protocol-Version is not a valid header value", id="version-control-char"),
        pytest.param(std(mcp_method=None), "tools/call", {"name": "echo"},
                     "Mcp-Method is missing (the body's method is 'tools/call')", id="method-missing"),
        pytest.param(std("tools/list"), "tools/call", {"name": "echo"},
                     "Mcp-Method is 'tools/list' but the body's method is 'tools/call'", id="method-differs"),
        pytest.param(std("Tools/Call"), "tools/call", {"name": "echo"},
                     "Mcp-Method is 'Tools/Call' but the body's method", id="method-case-sensitive"),
        pytest.param(std(b64("tools/call")), "tools/call", {"name": "echo"},
                     "Mcp-Method is '=?base64?dG9vbHMvY2FsbA==?=' but", id="method-never-base64"),
        pytest.param(std(name=None), "tools/call", {"name": "echo"},
                     "Mcp-Name is missing (the body names 'echo')", id="name-missing-call"),
        pytest.param(std("prompts/get", None), "prompts/get", {"name": "p"},
                     "Mcp-Name is missing (the body names 'p')", id="name-missing-prompt"),
        pytest.param(std("resources/read", None), "resources/read", {"uri": "file:///x"},
                     "Mcp-Name is missing (the body names 'file:///x')", id="name-missing-read"),
        pytest.param(std(name=None), "tools/call", {}, "Mcp-Name is missing", id="name-missing-both"),
        pytest.param(std(name="other"), "tools/call", {"name": "echo"},
                     "Mcp-Name is 'other' but the body names 'echo'", id="name-differs"),
        pytest.param(std(name="Echo"), "tools/call", {"name": "echo"},
                     "Mcp-Name is 'Echo' but the body names 'echo'", id="name-case-sensitive"),
        pytest.param(std("resources/read", "file:///y"), "resources/read", {"uri": "file:///x", "name": "file:///y"},
                     "Mcp-Name is 'file:///y' but the body names 'file:///x'", id="read-compares-uri"),
        pytest.param(std(name=b64("hello")), "tools/call", {"name": "héllo"},
                     "Mcp-Name is 'hello' but the body names 'héllo'", id="decoded-name-differs"),
        pytest.param(std(name="h\xe9llo"), "tools/call", {"name": "héllo"},
                     "Mcp-Name is not a valid header value: the value holds control characters",
                     id="raw-non-ascii-name"),
        pytest.param(std(name="=?base64?%%?="), "tools/call", {"name": "echo"},
                     "Mcp-Name is not a valid header value: the base64 value", id="name-bad-base64"),
        pytest.param(std(name=b64("x") + "junk"), "tools/call", {"name": "x"},
                     "Mcp-Name is '=?base64?eA==?=junk' but", id="not-a-sentinel"),
    ],
)
def test_check_modern_headers_mismatch(headers: dict[str, str], method: str, params: dict[str, Any],
                                       message: str) -> None:
    """Every missing, differing or undecodable standard header is -32020 naming header and body."""
    with pytest.raises(ProtocolError) as info:
        check_modern_headers(headers, method, params, V)
    assert info.value.code == HEADER_MISMATCH
    assert info.value.message.startswith("Header mismatch: " + message)


def test_check_modern_headers_message_is_exact() -> None:
    """The message format is the one clients and logs see."""
    with pytest.raises(ProtocolError) as info:
        check_modern_headers(std(name="a"), "tools/call", {"name": "b"}, V)
    assert info.value.message == "Header mismatch: Mcp-Name is 'a' but the body names 'b'"


def test_check_modern_headers_truncates_long_values() -> None:
    """Header and body values are shown truncated, never in full."""
    with pytest.raises(ProtocolError) as info:
        check_modern_headers(std(name="h" * 5000), "tools/call", {"name": "b" * 5000}, V)
    assert "h" * 101 not in info.value.message and "b" * 101 not in info.value.message
    assert "h" * 100 + "..." in info.value.message
    assert len(info.value.message) < 400


# =========================================================================== headers.py: x-mcp-header


def prop(kind: Any, name: Any = None, **rest: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"type": kind, **rest} if kind is not None else dict(rest)
    if name is not None:
        out["x-mcp-header"] = name
    return out


def obj(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


SCHEMA = obj(region=prop("string", "Region"), query=prop("string"),
             options=obj(limit=prop("integer", "Limit")), confirm=prop("boolean", "Confirm"))


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        pytest.param({"type": "object"}, {}, id="no-properties"),
        pytest.param(obj(q=prop("string")), {}, id="no-annotations"),
        pytest.param(obj(region=prop("string", "Region")),
                     {"region": ParamHeader("Region", ("region",), "string")}, id="one"),
        pytest.param(SCHEMA, {"region": ParamHeader("Region", ("region",), "string"),
                              "limit": ParamHeader("Limit", ("options", "limit"), "integer"),
                              "confirm": ParamHeader("Confirm", ("confirm",), "boolean")},
                     id="nested-and-kinds"),
        pytest.param(obj(a=prop("string", "X-Tenant.Id_2~")),
                     {"x-tenant.id_2~": ParamHeader("X-Tenant.Id_2~", ("a",), "string")}, id="token-chars"),
        pytest.param(obj(a=prop("object", default={"x-mcp-header": "X"}, examples=[{"x-mcp-header": "Y"}],
                                const={"x-mcp-header": "Z"})), {}, id="instance-data-not-annotations"),
    ],
)
def test_param_headers_valid(schema: dict[str, Any], expected: dict[str, ParamHeader]) -> None:
    """Annotations reachable through `properties` map lower-cased names to name, path and type."""
    assert param_headers(schema) == expected


@pytest.mark.parametrize(
    "schema",
    [
        pytest.param(obj(a=prop("number", "A")), id="number"),
        pytest.param(obj(a=prop("object", "A")), id="object"),
        pytest.param(obj(a=prop("array", "A")), id="array"),
        pytest.param(obj(a=prop("null", "A")), id="null"),
        pytest.param(obj(a=prop(None, "A")), id="no-type"),
        pytest.param(obj(a=prop(["string", "null"], "A")), id="type-list"),
        pytest.param(obj(a=prop("string", "Region"), b=prop("string", "region")), id="duplicate-case"),
        pytest.param(obj(a=prop("string", "R"), o=obj(b=prop("integer", "R"))), id="duplicate-nested"),
        pytest.param(obj(a=prop("string", "")), id="empty-name"),
        pytest.param(obj(a=prop("string", "Re gion")), id="space-in-name"),
        pytest.param(obj(a=prop("string", "a:b")), id="colon-in-name"),
        pytest.param(obj(a=prop("string", "a\r\nX-Evil")), id="crlf-in-name"),
        pytest.param(obj(a=prop("string", "régión")), id="non-ascii-name"),
        pytest.param(obj(a=prop("string", 42)), id="name-not-string"),
        pytest.param({"type": "object", "x-mcp-header": "Root"}, id="on-root"),
        pytest.param(obj(a={"type": "array", "items": prop("string", "A")}), id="under-items"),
        pytest.param(obj(a={"type": "array", "items": obj(b=prop("string", "B"))}),
                     id="properties-under-items"),
        pytest.param(obj(a={"anyOf": [prop("string", "A"), prop("integer")]}), id="under-anyOf"),
        pytest.param({"type": "object", "oneOf": [obj(a=prop("string", "A"))]}, id="under-oneOf"),
        pytest.param({"type": "object", "allOf": [obj(a=prop("string", "A"))]}, id="under-allOf"),
        pytest.param({**obj(a={"$ref": "#/$defs/A"}), "$defs": {"A": prop("string", "A")}}, id="under-defs"),
        pytest.param({"type": "object", "additionalProperties": prop("string", "A")},
                     id="additionalProperties"),
        pytest.param({"type": "object", "patternProperties": {"^a": prop("string", "A")}},
                     id="patternProperties"),
        pytest.param({"type": "object", "if": obj(a=prop("string", "A"))}, id="under-if"),
        pytest.param({"type": "object", "not": obj(a=prop("string", "A"))}, id="under-not"),
        pytest.param(obj(a=prop("string", "A"), b=prop("number", "B")), id="one-bad-spoils-all"),
    ],
)
def test_param_headers_invalid(schema: dict[str, Any]) -> None:
    """Any invalid annotation makes the whole schema's annotations invalid (None)."""
    assert param_headers(schema) is None


@pytest.mark.parametrize(
    ("headers", "arguments"),
    [
        pytest.param({"mcp-param-region": "us-west1", "mcp-param-limit": "42", "mcp-param-confirm": "true"},
                     {"region": "us-west1", "options": {"limit": 42}, "confirm": True}, id="all"),
        pytest.param({}, {"query": "select 1"}, id="all-absent"),
        pytest.param({}, {"region": None, "options": {"limit": None}, "confirm": None}, id="all-null"),
        pytest.param({}, {"options": "not-an-object"}, id="path-through-non-object"),
        pytest.param({"mcp-param-confirm": "false"}, {"confirm": False}, id="false"),
        pytest.param({"mcp-param-limit": "-7"}, {"options": {"limit": -7}}, id="negative-int"),
        pytest.param({"mcp-param-limit": "042"}, {"options": {"limit": 42}}, id="int-leading-zero-numeric"),
        pytest.param({"mcp-param-limit": "42.0"}, {"options": {"limit": 42}}, id="int-point-zero-numeric"),
        pytest.param({"mcp-param-limit": "-0"}, {"options": {"limit": 0}}, id="minus-zero"),
        pytest.param({"mcp-param-limit": "42"}, {"options": {"limit": 42.0}}, id="integral-float-body"),
        pytest.param({"mcp-param-limit": " 42\t"}, {"options": {"limit": 42}}, id="int-ows"),
        pytest.param({"mcp-param-limit": b64("42")}, {"options": {"limit": 42}}, id="int-base64"),
        pytest.param({"mcp-param-limit": "9007199254740993"}, {"options": {"limit": 9007199254740993}},
                     id="int-past-float-precision"),
        pytest.param({"mcp-param-region": b64("Hello, 世界")}, {"region": "Hello, 世界"}, id="string-base64"),
        pytest.param({"mcp-param-region": b64(" padded ")}, {"region": " padded "}, id="string-edge-spaces"),
        pytest.param({"mcp-param-region": b64("=?base64?x?=")}, {"region": "=?base64?x?="},
                     id="string-sentinel"),
        pytest.param({"mcp-param-region": "us-west1", "mcp-param-other": "x"}, {"region": "us-west1"},
                     id="undeclared-header-ignored"),
        pytest.param({}, {"region": {"nested": 1}}, id="unrenderable-without-header"),
    ],
)
def test_check_param_headers_ok(headers: dict[str, str], arguments: dict[str, Any]) -> None:
    """Mirrored headers that agree with present arguments, and none for absent or null ones, pass."""
    check_param_headers(headers, SCHEMA, arguments)


@pytest.mark.parametrize(
    ("headers", "arguments", "message"),
    [
        pytest.param({}, {"region": "us-west1"},
                     "Mcp-Param-Region is missing but the body's argument 'region' is present", id="missing"),
        pytest.param({}, {"options": {"limit": 0}},
                     "Mcp-Param-Limit is missing but the body's argument 'options.limit' is present",
                     id="missing-nested-zero"),
        pytest.param({}, {"confirm": False}, "Mcp-Param-Confirm is missing", id="missing-false"),
        pytest.param({}, {"region": ""}, "Mcp-Param-Region is missing", id="missing-empty-string"),
        pytest.param({"mcp-param-region": "us-west1"}, {},
                     "Mcp-Param-Region is present but the body's argument 'region' is absent",
                     id="arg-absent"),
        pytest.param({"mcp-param-region": "us-west1"}, {"region": None},
                     "Mcp-Param-Region is present but the body's argument 'region' is absent", id="arg-null"),
        pytest.param({"mcp-param-limit": "1"}, {"options": None},
                     "Mcp-Param-Limit is present but the body's argument 'options.limit' is absent",
                     id="nested-parent-null"),
        pytest.param({"mcp-param-region": "us-east1"}, {"region": "us-west1"},
                     "Mcp-Param-Region is 'us-east1' but the body's argument 'region' is 'us-west1'",
                     id="string-differs"),
        pytest.param({"mcp-param-region": "US-WEST1"}, {"region": "us-west1"},
                     "Mcp-Param-Region is 'US-WEST1' but", id="string-case-sensitive"),
        pytest.param({"mcp-param-region": b64("Hello, world")}, {"region": "Hello, 世界"},
                     "Mcp-Param-Region is 'Hello, world' but the body's argument 'region' is 'Hello, 世界'",
                     id="decoded-differs"),
        pytest.param({"mcp-param-region": "Hello, \xe4\xb8\x96\xe7\x95\x8c"}, {"region": "Hello, 世界"},
                     "Mcp-Param-Region is not a valid header value: the value holds control characters",
                     id="raw-utf8-bytes"),
        pytest.param({"mcp-param-region": "=?base64?!!?="}, {"region": "x"},
                     "Mcp-Param-Region is not a valid header value: the base64 value", id="bad-base64"),
        pytest.param({"mcp-param-limit": "43"}, {"options": {"limit": 42}},
                     "Mcp-Param-Limit is '43' but the body's argument 'options.limit' is '42'",
                     id="int-differs"),
        pytest.param({"mcp-param-limit": "42.5"}, {"options": {"limit": 42}}, "Mcp-Param-Limit is '42.5'",
                     id="int-fraction"),
        pytest.param({"mcp-param-limit": "4.2e1"}, {"options": {"limit": 42}}, "Mcp-Param-Limit is '4.2e1'",
                     id="int-exponent"),
        pytest.param({"mcp-param-limit": "+42"}, {"options": {"limit": 42}}, "Mcp-Param-Limit is '+42'",
                     id="int-plus-sign"),
        pytest.param({"mcp-param-limit": "4_2"}, {"options": {"limit": 42}}, "Mcp-Param-Limit is '4_2'",
                     id="int-underscore"),
        pytest.param({"mcp-param-limit": "0x2a"}, {"options": {"limit": 42}}, "Mcp-Param-Limit is '0x2a'",
                     id="int-hex"),
        pytest.param({"mcp-param-limit": ""}, {"options": {"limit": 42}}, "Mcp-Param-Limit is ''",
                     id="int-empty"),
        pytest.param({"mcp-param-confirm": "True"}, {"confirm": True},
                     "Mcp-Param-Confirm is 'True' but the body's argument 'confirm' is 'true'",
                     id="bool-case"),
        pytest.param({"mcp-param-confirm": "1"}, {"confirm": True}, "Mcp-Param-Confirm is '1'",
                     id="bool-one"),
        pytest.param({"mcp-param-confirm": "false"}, {"confirm": True}, "Mcp-Param-Confirm is 'false'",
                     id="bool-differs"),
        pytest.param({"mcp-param-region": "x"}, {"region": {"nested": 1}},
                     "Mcp-Param-Region is 'x' but the body's argument 'region' is 'dict'", id="unrenderable"),
    ],
)
def test_check_param_headers_mismatch(headers: dict[str, str], arguments: dict[str, Any],
                                      message: str) -> None:
    """A missing, unexpected, undecodable or differing Mcp-Param header is -32020 naming it."""
    with pytest.raises(ProtocolError) as info:
        check_param_headers(headers, SCHEMA, arguments)
    assert info.value.code == HEADER_MISMATCH
    assert info.value.message.startswith("Header mismatch: " + message)


@pytest.mark.parametrize(
    "schema",
    [
        pytest.param({"type": "object"}, id="no-properties"),
        pytest.param(obj(region=prop("string")), id="no-annotations"),
        pytest.param(obj(region=prop("number", "Region")), id="invalid-annotations"),
    ],
)
def test_check_param_headers_needs_valid_annotations(schema: dict[str, Any]) -> None:
    """Without (valid) annotations there is nothing to check, whatever headers come."""
    check_param_headers({"mcp-param-region": "x"}, schema, {"region": "y"})


def test_check_param_headers_truncates_long_values() -> None:
    """A long mirrored value is shown truncated in the message."""
    with pytest.raises(ProtocolError) as info:
        check_param_headers({"mcp-param-region": "a" * 9000}, SCHEMA, {"region": "b" * 9000})
    assert len(info.value.message) < 400
    assert "a" * 100 + "..." in info.value.message and "b" * 100 + "..." in info.value.message


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        pytest.param({"region": "us-west1", "options": {"limit": 42}, "confirm": False, "query": "q"},
                     {"Region": "us-west1", "Limit": "42", "Confirm": "false"}, id="all-kinds"),
        pytest.param({"region": None, "options": {"limit": None}}, {}, id="null-omitted"),
        pytest.param({"query": "q"}, {}, id="absent-omitted"),
        pytest.param({"region": ""}, {"Region": ""}, id="empty-string-mirrored"),
        pytest.param({"region": {"nested": 1}}, {}, id="unrenderable-omitted"),
    ],
)
def test_mirrored_params(arguments: dict[str, Any], expected: dict[str, str]) -> None:
    """A client mirrors each annotated, present, non-null argument as text; what it mirrors
    (base64-wrapped by the transport when unsafe) passes the server-side check."""
    assert mirrored_params(SCHEMA, arguments) == expected
    headers = {f"mcp-param-{name.lower()}": header_value(text) for name, text in expected.items()}
    check_param_headers(headers, SCHEMA, arguments)


def test_mirrored_params_unsafe_values_round_trip() -> None:
    """Non-ASCII, edge whitespace and control characters travel base64-wrapped and decode back."""
    for value in ("Hello, 世界", " padded ", "line1\r\nline2", "\tindented", "us west 1"):
        text = mirrored_params(SCHEMA, {"region": value})["Region"]
        check_param_headers({"mcp-param-region": header_value(text)}, SCHEMA, {"region": value})


def test_mirrored_params_needs_valid_annotations() -> None:
    """A schema with an invalid annotation mirrors nothing (its tool is excluded anyway)."""
    assert mirrored_params(obj(region=prop("number", "Region")), {"region": 1}) == {}


# =========================================================================== mrtr.py


KEY = b"k" * 32
BIND = binding("tools/call", {"name": "deploy", "arguments": {"env": "prod"}})


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def sealer(clock: Clock | None = None, key: bytes = KEY) -> Sealer:
    return Sealer(key, ttl_s=60.0, clock=clock or Clock())


def forge(payload: Any, key: bytes = KEY) -> str:
    """A token in the documented format, MACed independently of the module."""
    body = base64.urlsafe_b64encode(json.dumps(payload).encode()).decode().rstrip("=")
    mac = hmac.new(key, f"v1.{body}".encode(), hashlib.sha256).digest()
    return f"v1.{body}.{base64.urlsafe_b64encode(mac).decode().rstrip('=')}"


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        pytest.param({}, RequestState(BIND, 1060.0), id="defaults"),
        pytest.param({"approved": ["q1", "q2"], "upstream_state": "up-ßtate", "parked": "p"},
                     RequestState(BIND, 1060.0, ("q1", "q2"), "up-ßtate", "p"), id="everything"),
        pytest.param({"approved": iter(["q"])}, RequestState(BIND, 1060.0, ("q",)), id="any-iterable"),
        pytest.param({"asked": ["d1"]}, RequestState(BIND, 1060.0, asked=("d1",)), id="asked"),
    ],
)
def test_seal_open_round_trip(kwargs: dict[str, Any], expected: RequestState) -> None:
    """A sealed state opens to what was sealed, expiring ttl_s after sealing."""
    s = sealer()
    token = s.seal(BIND, **kwargs)
    assert token.startswith("v1.") and token.count(".") == 2 and "=" not in token
    assert s.open(token, BIND) == expected


def test_token_format_is_documented_hmac() -> None:
    """The token is v1.b64url(JSON).b64url(HMAC-SHA256(key, "v1." + payload)), no padding."""
    token = sealer().seal(BIND)
    _, body, mac = token.split(".")
    expected = hmac.new(KEY, f"v1.{body}".encode(), hashlib.sha256).digest()
    assert base64.urlsafe_b64decode(mac + "=" * (-len(mac) % 4)) == expected
    payload = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    assert BIND in payload.values()
    # ... so a token we forge the same way opens.
    good = forge({"b": BIND, "e": 2000.0, "a": ["q"], "u": None, "p": None})
    assert sealer().open(good, BIND) == RequestState(BIND, 2000.0, ("q",))


def flip(text: str, index: int) -> str:
    return text[:index] + ("A" if text[index] != "A" else "B") + text[index + 1:]


def tamper_payload(token: str) -> str:
    _, body, mac = token.split(".")
    return f"v1.{flip(body, 5)}.{mac}"


def tamper_mac(token: str) -> str:
    _, body, mac = token.split(".")
    return f"v1.{body}.{flip(mac, 3)}"


def reforge_payload(token: str) -> str:
    """The same layout with an approval added and the old MAC kept."""
    _, body, mac = token.split(".")
    raw = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    raw["a"] = ["everything"]
    new = base64.urlsafe_b64encode(json.dumps(raw).encode()).decode().rstrip("=")
    return f"v1.{new}.{mac}"


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        pytest.param(lambda t: 42, "not a string", id="int"),
        pytest.param(lambda t: None, "not a string", id="none"),
        pytest.param(lambda t: t.encode(), "not a string", id="bytes"),
        pytest.param(lambda t: {"t": t}, "not a string", id="object"),
        pytest.param(lambda t: "v1." + "A" * MAX_TOKEN_CHARS, "too long", id="oversize"),
        pytest.param(lambda t: "", "malformed", id="empty"),
        pytest.param(lambda t: "v1", "malformed", id="no-parts"),
        pytest.param(lambda t: "v1..", "malformed", id="empty-parts"),
        pytest.param(lambda t: "v1." + t.split(".")[2], "malformed", id="one-part"),
        pytest.param(lambda t: "v2" + t[2:], "malformed", id="other-version"),
        pytest.param(lambda t: t + ".x", "malformed", id="extra-part"),
        pytest.param(lambda t: t.replace("v1.", "v1.é", 1), "malformed", id="non-ascii"),
        pytest.param(lambda t: t.replace("v1.", "v1.+/", 1), "malformed", id="std-alphabet"),
        pytest.param(lambda t: t + "=", "malformed", id="padding"),
        pytest.param(tamper_payload, "bad signature", id="payload-tampered"),
        pytest.param(reforge_payload, "bad signature", id="payload-reforged"),
        pytest.param(tamper_mac, "bad signature", id="mac-tampered"),
        pytest.param(lambda t: t.rsplit(".", 1)[0] + ".", "malformed", id="mac-empty"),
        pytest.param(lambda t: Sealer(b"x" * 32, clock=Clock()).seal(BIND), "bad signature", id="other-key"),
        pytest.param(lambda t: sealer().seal(binding("tools/call", {"name": "deploy"})),
                     "issued for another request", id="other-binding"),
        pytest.param(lambda t: forge([BIND]), "malformed", id="payload-not-object"),
        pytest.param(lambda t: forge({"b": BIND, "e": 2000.0}), "malformed", id="payload-missing-fields"),
        pytest.param(lambda t: forge({"b": BIND, "e": True, "a": [], "u": None, "p": None}), "malformed",
                     id="payload-bool-expiry"),
        pytest.param(lambda t: forge({"b": BIND, "e": 2000, "a": [1], "u": None, "p": None}), "malformed",
                     id="payload-bad-approvals"),
        pytest.param(lambda t: forge({"b": BIND, "e": float("nan"), "a": [], "u": None, "p": None}),
                     "malformed", id="payload-nan-expiry"),
        pytest.param(lambda t: forge({"b": BIND, "e": 999.0, "a": [], "u": None, "p": None}), "expired",
                     id="forged-expired"),
    ],
)
def test_open_rejects(make: Any, reason: str) -> None:
    """Anything not issued by us, for this request, in time, is -32602 naming the check, never the token."""
    token = make(sealer().seal(BIND, upstream_state="secret-upstream-state"))
    with pytest.raises(RequestStateError) as info:
        sealer().open(token, BIND)
    assert isinstance(info.value, ProtocolError)
    assert info.value.code == INVALID_PARAMS
    assert info.value.message == f"Invalid params: invalid or expired requestState ({reason})"
    if isinstance(token, str) and token:
        assert token not in info.value.message
    assert "secret-upstream-state" not in info.value.message


@pytest.mark.parametrize(
    ("advance", "ok"),
    [(0.0, True), (59.999, True), (60.0, False), (3600.0, False)],
)
def test_open_expiry_uses_injected_clock(advance: float, ok: bool) -> None:
    """A state opens until ttl_s has passed on the injected clock, and not at or after it."""
    clock = Clock()
    s = sealer(clock)
    token = s.seal(BIND)
    clock.now += advance
    if ok:
        assert s.open(token, BIND).expires_at == 1060.0
    else:
        with pytest.raises(RequestStateError, match=r"\(expired\)$"):
            s.open(token, BIND)


def test_request_state_error_default_message() -> None:
    """Without a reason the message is the bare contract text."""
    error = RequestStateError()
    assert (error.code, error.message) == (INVALID_PARAMS, "Invalid params: invalid or expired requestState")


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        pytest.param({"key": b"short"}, "16 bytes", id="short-key"),
        pytest.param({"ttl_s": 0.0}, "positive", id="zero-ttl"),
        pytest.param({"ttl_s": -1.0}, "positive", id="negative-ttl"),
        pytest.param({"ttl_s": float("inf")}, "positive", id="infinite-ttl"),
    ],
)
def test_sealer_rejects_bad_settings(kwargs: dict[str, Any], needle: str) -> None:
    """A key too short to be a secret or a ttl that never expires is refused up front."""
    with pytest.raises(ValueError, match=needle):
        Sealer(**kwargs)


def test_sealer_default_key_is_random() -> None:
    """Without a key each Sealer has its own: one process's tokens do not open in another."""
    a, b = Sealer(), Sealer()
    assert a.open(a.seal(BIND), BIND).binding == BIND
    with pytest.raises(RequestStateError, match="bad signature"):
        b.open(a.seal(BIND), BIND)


def test_seal_refuses_what_open_would_refuse() -> None:
    """seal never hands out a token longer than open accepts."""
    with pytest.raises(ValueError, match="exceed"):
        sealer().seal(BIND, parked="x" * MAX_TOKEN_CHARS)


def canonical_sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@pytest.mark.parametrize(
    ("method", "params", "canonical"),
    [
        pytest.param("tools/call", {"name": "x", "arguments": {"b": 2, "a": 1}},
                     '{"method":"tools/call","params":{"arguments":{"a":1,"b":2},"name":"x"}}', id="sorted"),
        pytest.param("tools/call", {"name": "é", "_meta": {PV: V}, "inputResponses": {"k": {}},
                                    "requestState": "s"},
                     '{"method":"tools/call","params":{"name":"é"}}', id="retry-fields-dropped-utf8"),
        pytest.param("resources/read", {"uri": "file:///x"},
                     '{"method":"resources/read","params":{"uri":"file:///x"}}', id="read"),
    ],
)
def test_binding_is_sha256_of_canonical_json(method: str, params: dict[str, Any], canonical: str) -> None:
    """The binding hashes sorted, compact, non-ASCII-preserving JSON of method and params."""
    assert binding(method, params) == canonical_sha(canonical)


BASE = {"name": "deploy", "arguments": {"env": "prod"}}


@pytest.mark.parametrize(
    ("method", "params", "same"),
    [
        pytest.param("tools/call", {**BASE, "_meta": {PV: V, "progressToken": 7}}, True, id="meta-ignored"),
        pytest.param("tools/call", {**BASE, "inputResponses": {"q": {"action": "accept"}}}, True,
                     id="input-responses-ignored"),
        pytest.param("tools/call", {**BASE, "requestState": "v1.x.y"}, True, id="request-state-ignored"),
        pytest.param("tools/call", {"arguments": {"env": "prod"}, "name": "deploy"}, True, id="key-order"),
        pytest.param("tools/call", {"name": "deploy", "arguments": {"env": "staging"}}, False,
                     id="arguments-differ"),
        pytest.param("tools/call", {"name": "deploy", "arguments": {"env": "prod", "force": True}}, False,
                     id="argument-added"),
        pytest.param("tools/call", {"name": "undeploy", "arguments": {"env": "prod"}}, False,
                     id="name-differs"),
        pytest.param("prompts/get", BASE, False, id="method-differs"),
        pytest.param("tools/call", {**BASE, "task": {"ttl": 1}}, False, id="other-fields-count"),
    ],
)
def test_binding_ignores_only_retry_fields(method: str, params: Mapping[str, Any], same: bool) -> None:
    """A retry's added fields leave the binding unchanged; anything else changes it."""
    assert (binding(method, params) == binding("tools/call", BASE)) is same


def test_question_digest() -> None:
    """A gate question's digest is short, stable, and differs between questions."""
    digest = question_digest("Deploy to prod?")
    assert digest == canonical_sha("Deploy to prod?")[:16]
    assert len(digest) == 16 and digest == question_digest("Deploy to prod?")
    assert digest != question_digest("Deploy to staging?")
