"""Echo tool: returns the arguments it was given, plus its command-line argv.

Contract: args arrive as JSON in env TOOLFUNNEL_TOOL_ARGS (or on stdin when the
env var is empty); one JSON line goes to stdout; exit 0 on success, 1 on failure.
"""

import json
import os
import sys
from typing import Any


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


def run(args: dict[str, Any]) -> dict[str, Any]:
    """Echo accepts any object, so there is nothing to validate."""
    return {"ok": True, "args": args, "argv": sys.argv[1:]}


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
