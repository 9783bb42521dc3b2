"""Shared plumbing of the demo tool scripts in this folder; not a tool itself.

It reads and checks the arguments and writes the one-line JSON result, so that
each script holds only its own logic and ends with `sys.exit(main(run))`.

Contract: args arrive as JSON in env TOOLFUNNEL_TOOL_ARGS (or on stdin when the
env var is empty); one JSON line goes to stdout; exit 0 on success, 1 on failure.

A script imports this with `from _tool_io import ...`: Python puts the running
script's own folder first on sys.path, so this file must sit next to it. Copy
both files when you copy a script as a starting point for your own tool.
"""

import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

__all__ = [
    "ToolError",
    "as_integer",
    "emit",
    "main",
    "read_args",
    "reject_unknown",
    "require_text",
    "text_utf8",
]


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


def reject_unknown(args: dict[str, Any], allowed: Sequence[str]) -> None:
    """Raise a ToolError naming the first key of `args` that is not in `allowed`."""
    for key in args:
        if key not in allowed:
            names = ", ".join(json.dumps(name) for name in allowed)
            raise ToolError(f"unknown argument {json.dumps(key)}; allowed: {names}")


def require_text(args: dict[str, Any]) -> str:
    """The required string argument "text"."""
    text = args.get("text")
    if not isinstance(text, str):
        raise ToolError('"text" is required and must be a string')
    return text


def text_utf8(text: str) -> bytes:
    """The UTF-8 bytes of the "text" argument; a lone surrogate is a ToolError."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ToolError('"text" contains a lone surrogate and cannot be encoded as UTF-8') from exc


def as_integer(value: object) -> int | None:
    """Return value as an int if JSON Schema would call it an integer, else None."""
    # bool is an int subclass in Python, but true/false are not JSON integers.
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    # JSON Schema counts 3.0 as an integer, so the script must as well.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def main(run: Callable[[dict[str, Any]], dict[str, Any]]) -> int:
    """Read the args, call `run` and emit its result; return the process exit code.

    A ToolError from reading or from `run` becomes {"ok": false, "error": ...} on
    stdout plus the message on stderr, and exit code 1.
    """
    try:
        result = run(read_args())
    except ToolError as exc:
        emit({"ok": False, "error": str(exc)})
        sys.stderr.write(f"{exc}\n")
        return 1
    emit(result)
    return 0
