"""Base64 tool: encodes UTF-8 text to base64, or strictly decodes base64 to text.

Contract: args arrive as JSON in env TOOLFUNNEL_TOOL_ARGS (or on stdin when the
env var is empty); one JSON line goes to stdout; exit 0 on success, 1 on failure.
"""

import base64
import binascii
import json
import os
import re
import sys
from typing import Any

ALLOWED_ARGS = ("op", "text")
_ALPHABET = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=")
_SHAPE = re.compile(r"[A-Za-z0-9+/]*={0,2}")
_INVALID = '"text" is not valid base64'

# Line-wrapped base64 (MIME, PEM) is common, so ASCII whitespace is ignored.
_WHITESPACE = re.compile(r"[ \t\r\n\f\v]")


class ToolError(Exception):
    """A bad input, reported to the caller as {"ok": false, "error": ...}."""


def read_args() -> dict[str, Any]:
    """Parse the tool arguments from the env var, falling back to stdin."""
    raw = os.environ.get("TOOLFUNNEL_TOOL_ARGS", "")
    if not raw.strip():
        try:
            raw = sys.stdin.buffer.read().decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise ToolError("arguments on stdin are not valid UTF-8") from exc
    if not raw.strip():
        return {}
    try:
        parsed = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise ToolError(f"arguments are not valid JSON: {exc}") from exc
    if parsed is None:
        return {}
    if not isinstance(parsed, dict):
        raise ToolError("arguments must be a JSON object")
    return parsed


def emit(payload: dict[str, Any]) -> None:
    """Write the single JSON result line."""
    sys.stdout.write(json.dumps(payload, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def reject_unknown(args: dict[str, Any]) -> None:
    for key in args:
        if key not in ALLOWED_ARGS:
            allowed = ", ".join(json.dumps(name) for name in ALLOWED_ARGS)
            raise ToolError(f"unknown argument {json.dumps(key)}; allowed: {allowed}")


def require_text(args: dict[str, Any]) -> str:
    text = args.get("text")
    if not isinstance(text, str):
        raise ToolError('"text" is required and must be a string')
    return text


def encode(text: str) -> str:
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ToolError('"text" contains a lone surrogate and cannot be encoded as UTF-8') from exc
    return base64.b64encode(data).decode("ascii")


def check_base64(cleaned: str) -> None:
    """Raise a ToolError naming the first reason `cleaned` is not strict base64."""
    bad = next((ch for ch in cleaned if ch not in _ALPHABET), None)
    if bad is not None:
        raise ToolError(
            f"{_INVALID}: character {json.dumps(bad)} is not allowed "
            '(only A-Z, a-z, 0-9, "+", "/" and trailing "=" padding)'
        )
    if not _SHAPE.fullmatch(cleaned):
        raise ToolError(f'{_INVALID}: "=" padding may only appear at the end, at most twice')
    if len(cleaned) % 4:
        raise ToolError(f"{_INVALID}: length {len(cleaned)} (ignoring whitespace) is not a multiple of 4")


def decode(text: str) -> str:
    cleaned = _WHITESPACE.sub("", text)
    check_base64(cleaned)
    try:
        data = base64.b64decode(cleaned, validate=True)
    except binascii.Error as exc:
        raise ToolError(f"{_INVALID}: {exc}") from exc
    # A non-zero remainder in the last quantum decodes silently; re-encoding exposes it.
    if base64.b64encode(data).decode("ascii") != cleaned:
        raise ToolError(f"{_INVALID}: not canonical (the unused bits of the last character must be zero)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ToolError(
            '"text" decodes to bytes that are not valid UTF-8 (this tool only returns text)'
        ) from exc


def run(args: dict[str, Any]) -> dict[str, Any]:
    reject_unknown(args)
    op = args.get("op")
    if op not in ("encode", "decode"):
        raise ToolError('"op" must be "encode" or "decode"')
    text = require_text(args)
    result = encode(text) if op == "encode" else decode(text)
    return {"ok": True, "op": op, "result": result}


def main() -> int:
    try:
        result = run(read_args())
    except ToolError as exc:
        emit({"ok": False, "error": str(exc)})
        sys.stderr.write(f"{exc}\n")
        return 1
    emit(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
