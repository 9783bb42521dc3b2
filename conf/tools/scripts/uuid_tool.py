"""UUID tool: generates 1 to 100 random (version 4) UUIDs.

Contract: args arrive as JSON in env TOOLFUNNEL_TOOL_ARGS (or on stdin when the
env var is empty); one JSON line goes to stdout; exit 0 on success, 1 on failure.
"""

import json
import os
import sys
import uuid
from typing import Any

ALLOWED_ARGS = ("count",)
MIN_COUNT = 1
MAX_COUNT = 100


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


def require_count(args: dict[str, Any]) -> int:
    count = as_integer(args.get("count", MIN_COUNT))
    if count is None or not MIN_COUNT <= count <= MAX_COUNT:
        raise ToolError(f'"count" must be an integer from {MIN_COUNT} to {MAX_COUNT}')
    return count


def run(args: dict[str, Any]) -> dict[str, Any]:
    reject_unknown(args)
    count = require_count(args)
    return {"ok": True, "uuids": [str(uuid.uuid4()) for _ in range(count)]}


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
