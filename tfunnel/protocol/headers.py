"""Header checks for modern Streamable HTTP POSTs (PROTOCOL.md §3.6), sans-IO.

A modern POST mirrors parts of its body into headers so intermediaries can route without parsing
JSON: `MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`, and one `Mcp-Param-{Name}` per tool
argument whose inputSchema property carries `"x-mcp-header": "Name"`. A server that reads the body
must reject any disagreement with -32020 (HeaderMismatch), or a router trusting the header and an
executor trusting the body would act on different requests.

This module owns the value codec (`decode_value`), the standard header check
(`check_modern_headers`), and the `x-mcp-header` schema rules (`param_headers`,
`check_param_headers`, and `mirrored_params` for a client). Headers come as a mapping of
lower-cased names to latin-1 decoded values. Every check raises only
`ProtocolError(HEADER_MISMATCH, ...)`; anything else is a bug.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from tfunnel.errors import ProtocolError
from tfunnel.protocol.modern import HEADER_MISMATCH

PROTOCOL_VERSION_HEADER = "mcp-protocol-version"
METHOD_HEADER = "mcp-method"
NAME_HEADER = "mcp-name"
PARAM_HEADER_PREFIX = "mcp-param-"
X_MCP_HEADER = "x-mcp-header"
# The body field each name-bearing method mirrors into Mcp-Name.
NAMED_BY = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}

_SENTINEL_PREFIX = "=?base64?"
_SENTINEL_SUFFIX = "?="
_OWS = " \t"
# What may travel bare: visible ASCII and space (anything else a client must base64-wrap).
_PLAIN = re.compile(r"[\x20-\x7e]*")
_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")
# RFC 9110 field-name token: the only characters an x-mcp-header name may use.
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# Integer headers compare numerically (`42.0`, `042` equal 42) only in plain decimal notation,
# as the SDK does: no sign but `-`, no exponent, no underscores.
_DECIMAL = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")
_MIRRORABLE_TYPES = frozenset({"string", "integer", "boolean"})
# JSON Schema 2020-12 keywords holding subschemas other than `properties`. An annotation under
# any of them is not statically reachable; `$ref` is never followed.
_SUBSCHEMA = frozenset({"items", "contains", "additionalProperties", "propertyNames", "not", "if", "then",
                        "else", "unevaluatedItems", "unevaluatedProperties", "contentSchema"})
_SUBSCHEMA_LISTS = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
_SUBSCHEMA_MAPS = frozenset({"patternProperties", "dependentSchemas", "$defs", "definitions"})
# Header and body values can be as long as a client likes; messages show this much of them.
_SHOWN = 100


def decode_value(raw: str) -> str:
    """A header value as the client meant it: OWS stripped, `=?base64?...?=` decoded as UTF-8.

    Raises `ValueError` for bad base64, a payload that is not UTF-8, or a plain value holding
    control characters or non-ASCII (which a client must have wrapped)."""
    value = _plain(raw)
    if not _is_sentinel(value):
        return value
    payload = value[len(_SENTINEL_PREFIX):-len(_SENTINEL_SUFFIX)]
    if not _BASE64.fullmatch(payload):
        raise ValueError("the base64 value holds characters outside the base64 alphabet")
    stripped = payload.rstrip("=")
    try:
        data = base64.b64decode(stripped + "=" * (-len(stripped) % 4), validate=True)
    except binascii.Error as exc:
        raise ValueError("the base64 value is not valid base64") from exc
    # One spelling only: missing or wrong padding, or unused trailing bits, are refused (SEP-2243's
    # test cases), so every decoder along the way reads the same text.
    if payload != base64.b64encode(data).decode("ascii"):
        raise ValueError("the base64 value is not in canonical form (padded, no unused bits)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError("the base64 value does not decode to UTF-8 text") from exc


def check_modern_headers(headers: Mapping[str, str], method: str, params: Mapping[str, Any],
                         version: str) -> None:
    """Check the standard headers against the body; raise `ProtocolError(HEADER_MISMATCH)`.

    `version` is the body's `_meta` protocol version. Only `Mcp-Name` may be base64-wrapped.
    A body whose name or uri is not a string is left to params validation (-32602), but the
    header must still be there."""
    _expect(headers, PROTOCOL_VERSION_HEADER, "MCP-Protocol-Version", version, "the body's _meta says",
            _plain)
    _expect(headers, METHOD_HEADER, "Mcp-Method", method, "the body's method is", _plain)
    field = NAMED_BY.get(method)
    if field is not None:
        named = params.get(field)
        _expect(headers, NAME_HEADER, "Mcp-Name", named if isinstance(named, str) else None,
                "the body names", decode_value)


@dataclass(frozen=True)
class ParamHeader:
    """One `x-mcp-header` annotation: header `Mcp-Param-{name}` mirrors the argument at `path`."""

    name: str
    path: tuple[str, ...]
    type: str


def param_headers(input_schema: Mapping[str, Any]) -> dict[str, ParamHeader] | None:
    """The schema's `x-mcp-header` annotations keyed by lower-cased name, or None if any is invalid.

    Invalid: a name that is not a non-empty RFC 9110 token, one repeated case-insensitively, one
    on a property that is not string/integer/boolean, or one not reachable from the root through
    `properties` alone. Clients drop such tools from `tools/list`, so the catalog should too."""
    found: dict[str, ParamHeader] = {}
    for path, schema in _positions(input_schema):
        if X_MCP_HEADER not in schema:
            continue
        name, kind = schema[X_MCP_HEADER], schema.get("type")
        if not path or not isinstance(name, str) or not _TOKEN.fullmatch(name):
            return None
        if not isinstance(kind, str) or kind not in _MIRRORABLE_TYPES or name.lower() in found:
            return None
        found[name.lower()] = ParamHeader(name, path, kind)
    return found


def mirrored_params(input_schema: Mapping[str, Any], arguments: Mapping[str, Any]) -> dict[str, str]:
    """What a client mirrors for a tools/call: `{x-mcp-header name: value text}` for each
    annotated argument that is present and not null (the text before any base64 wrapping). A
    schema with invalid annotations mirrors nothing (a conforming client does not call it)."""
    mirrored: dict[str, str] = {}
    for spec in (param_headers(input_schema) or {}).values():
        text = _render(_at(arguments, spec.path))
        if text is not None:
            mirrored[spec.name] = text
    return mirrored


def check_param_headers(headers: Mapping[str, str], input_schema: Mapping[str, Any],
                        arguments: Mapping[str, Any]) -> None:
    """Check each `Mcp-Param-*` header against its argument; raise `ProtocolError(HEADER_MISMATCH)`.

    An argument that is present and not null needs its header, and an absent or null one must
    not have it. A schema without annotations, or with invalid ones (no conforming client
    mirrors those), checks nothing. Headers for names the schema does not declare are ignored."""
    for key, spec in (param_headers(input_schema) or {}).items():
        label = f"Mcp-Param-{spec.name}"
        raw = headers.get(PARAM_HEADER_PREFIX + key)
        value = _at(arguments, spec.path)
        where = _show(".".join(spec.path))
        if value is None:
            if raw is not None:
                raise _mismatch(f"{label} is present but the body's argument {where} is absent")
            continue
        if raw is None:
            if _render(value) is None:  # no header text exists for it, so a client sends none
                continue
            raise _mismatch(f"{label} is missing but the body's argument {where} is present")
        try:
            decoded = decode_value(raw)
        except ValueError as exc:
            raise _mismatch(f"{label} is not a valid header value: {exc}") from None
        if not _matches(spec.type, value, decoded):
            raise _mismatch(f"{label} is {_show(decoded)} but the body's argument {where} is "
                            f"{_show(_render(value) or type(value).__name__)}")


def _plain(raw: str) -> str:
    value = raw.strip(_OWS)
    if not _PLAIN.fullmatch(value):
        raise ValueError("the value holds control characters or non-ASCII (send them base64-wrapped)")
    return value


def _is_sentinel(value: str) -> bool:
    return (len(value) >= len(_SENTINEL_PREFIX) + len(_SENTINEL_SUFFIX)
            and value.startswith(_SENTINEL_PREFIX) and value.endswith(_SENTINEL_SUFFIX))


def _expect(headers: Mapping[str, str], key: str, label: str, expected: str | None, body_says: str,
            decode: Callable[[str], str]) -> None:
    raw = headers.get(key)
    if raw is None:
        shown = "" if expected is None else f" ({body_says} {_show(expected)})"
        raise _mismatch(f"{label} is missing{shown}")
    try:
        value = decode(raw)
    except ValueError as exc:
        raise _mismatch(f"{label} is not a valid header value: {exc}") from None
    if expected is not None and value != expected:
        raise _mismatch(f"{label} is {_show(value)} but {body_says} {_show(expected)}")


def _mismatch(message: str) -> ProtocolError:
    return ProtocolError(HEADER_MISMATCH, f"Header mismatch: {message}")


def _show(value: str) -> str:
    return repr(value if len(value) <= _SHOWN else value[:_SHOWN] + "...")


def _positions(root: Mapping[str, Any]) -> Iterator[tuple[tuple[str, ...] | None, Mapping[str, Any]]]:
    """Every subschema with its `properties` path from the root (None once off that chain)."""
    stack: list[tuple[tuple[str, ...] | None, Any]] = [((), root)]
    while stack:
        path, node = stack.pop()
        if not isinstance(node, Mapping):
            continue
        yield path, node
        for keyword, sub in node.items():
            if keyword == "properties" and isinstance(sub, Mapping):
                stack.extend((None if path is None else (*path, str(k)), v) for k, v in sub.items())
            elif keyword in _SUBSCHEMA:
                stack.append((None, sub))
            elif keyword in _SUBSCHEMA_LISTS and isinstance(sub, list):
                stack.extend((None, v) for v in sub)
            elif keyword in _SUBSCHEMA_MAPS and isinstance(sub, Mapping):
                stack.extend((None, v) for v in sub.values())


def _at(arguments: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = arguments
    for key in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node


def _render(value: Any) -> str | None:
    """The header text a client sends for `value`, or None when it would send none."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        try:
            return str(value)
        except ValueError:  # an int past CPython's digit limit
            return None
    return None


def _matches(kind: str, value: Any, decoded: str) -> bool:
    integral = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if kind == "integer" and integral and not isinstance(value, bool) and _DECIMAL.fullmatch(decoded):
        whole, _, fraction = decoded.partition(".")
        try:
            return fraction.strip("0") == "" and int(whole) == int(value)
        except ValueError:  # digits past CPython's limit
            return False
    rendered = _render(value)
    return rendered is not None and rendered == decoded
