"""JSON tool: pretty-prints (or minifies) a JSON document given as text.

Contract (kept by _tool_io.py, which must sit next to this file): args arrive as
JSON in env TOOLFUNNEL_TOOL_ARGS (or on stdin when the env var is empty); one JSON
line goes to stdout; exit 0 on success, 1 on failure.
"""

import json
import sys
from typing import Any, NoReturn

from _tool_io import ToolError, as_integer, main, reject_unknown, require_text

ALLOWED_ARGS = ("text", "indent", "minify")
DEFAULT_INDENT = 2
MAX_INDENT = 10


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
    reject_unknown(args, ALLOWED_ARGS)
    text = require_text(args)
    indent = require_indent(args)
    minify = require_minify(args)
    value = parse(text)
    if minify:
        return {"ok": True, "minified": minify_json(value)}
    return {"ok": True, "pretty": format_json(value, indent)}


if __name__ == "__main__":
    sys.exit(main(run))
