"""Text stats tool: counts characters, words, lines and UTF-8 bytes of a text.

Contract: args arrive as JSON in env TOOLFUNNEL_TOOL_ARGS (or on stdin when the
env var is empty); one JSON line goes to stdout; exit 0 on success, 1 on failure.
"""

import json
import os
import sys
from typing import Any

ALLOWED_ARGS = ("text",)


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


def count_lines(text: str) -> int:
    normalised = text.replace("\r\n", "\n")
    if not normalised:
        return 0
    # "a\nb\n" is two lines, not three: a final newline terminates, it does not start.
    trailing = 1 if normalised.endswith("\n") else 0
    return normalised.count("\n") + 1 - trailing


def utf8_length(text: str) -> int:
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise ToolError('"text" contains a lone surrogate and cannot be encoded as UTF-8') from exc


def run(args: dict[str, Any]) -> dict[str, Any]:
    reject_unknown(args)
    text = require_text(args)
    return {
        "ok": True,
        "chars": len(text),
        "words": len(text.split()),
        "lines": count_lines(text),
        "bytes": utf8_length(text),
    }


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
