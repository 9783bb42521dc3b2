"""Base64 tool: encodes UTF-8 text to base64, or strictly decodes base64 to text.

Contract (kept by _tool_io.py, which must sit next to this file): args arrive as
JSON in env TOOLFUNNEL_TOOL_ARGS (or on stdin when the env var is empty); one JSON
line goes to stdout; exit 0 on success, 1 on failure.
"""

import base64
import binascii
import json
import re
import sys
from typing import Any

from _tool_io import ToolError, main, reject_unknown, require_text, text_utf8

ALLOWED_ARGS = ("op", "text")
_ALPHABET = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=")
_SHAPE = re.compile(r"[A-Za-z0-9+/]*={0,2}")
_INVALID = '"text" is not valid base64'

# Line-wrapped base64 (MIME, PEM) is common, so ASCII whitespace is ignored.
_WHITESPACE = re.compile(r"[ \t\r\n\f\v]")


def encode(text: str) -> str:
    return base64.b64encode(text_utf8(text)).decode("ascii")


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
    reject_unknown(args, ALLOWED_ARGS)
    op = args.get("op")
    if op not in ("encode", "decode"):
        raise ToolError('"op" must be "encode" or "decode"')
    text = require_text(args)
    result = encode(text) if op == "encode" else decode(text)
    return {"ok": True, "op": op, "result": result}


if __name__ == "__main__":
    sys.exit(main(run))
