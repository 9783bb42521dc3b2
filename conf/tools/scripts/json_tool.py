"""JSON tool: pretty-prints (or minifies) a JSON document given as text.

Contract: args arrive as JSON in env TOOLFUNNEL_TOOL_ARGS (or on stdin when the
env var is empty); one JSON line goes to stdout; exit 0 on success, 1 on failure.
"""

import json
import os
import sys
from typing import Any, NoReturn

ALLOWED_ARGS = ("text", "indent", "minify")
DEFAULT_INDENT = 2
MAX_INDENT = 10


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


def require_text(args: dict[str, Any]) -> str:
    text = args.get("text")
    if not isinstance(text, str):
        raise ToolError('"text" is required and must be a string')
    return text


def require_indent(args: dict[str, Any]) -> int:
    indent = as_integer(args.get("indent", DEFAULT_INDENT))
    if indent is None or not 0 <= indent <= MAX_INDENT:
        raise ToolError(f'"indent" must be an integer from 0 to {MAX_INDENT}')
    return indent


def require_minify(args: dict[str, Any]) -> bool:
    minify = args.get("minify", False)
    if not isinstance(minify, bool):
        raise ToolError('"minify" must be true or false')
    return minify


def reject_constant(name: str) -> NoReturn:
    # Python accepts NaN/Infinity by default; standard JSON (and JSON.parse) does not.
    raise ValueError(f"{name} is not a valid JSON value")


def parse(text: str) -> Any:
    try:
        return json.loads(text, parse_constant=reject_constant)
    except RecursionError as exc:
        raise ToolError('"text" is not valid JSON: nested too deeply') from exc
    except ValueError as exc:
        raise ToolError(f'"text" is not valid JSON: {exc}') from exc


def format_json(value: Any, indent: int) -> str:
    # Like JSON.stringify(v, null, 0): indent 0 means no whitespace at all,
    # whereas Python's indent=0 would still put every item on its own line.
    if indent == 0:
        return minify_json(value)
    return json.dumps(value, ensure_ascii=False, indent=indent)


def minify_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def run(args: dict[str, Any]) -> dict[str, Any]:
    reject_unknown(args)
    text = require_text(args)
    indent = require_indent(args)
    minify = require_minify(args)
    value = parse(text)
    if minify:
        return {"ok": True, "minified": minify_json(value)}
    return {"ok": True, "pretty": format_json(value, indent)}


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
