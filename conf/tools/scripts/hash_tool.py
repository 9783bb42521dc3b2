"""Hash tool: hex digest (sha256, sha1 or md5) of the UTF-8 bytes of a text.

Contract: args arrive as JSON in env TOOLFUNNEL_TOOL_ARGS (or on stdin when the
env var is empty); one JSON line goes to stdout; exit 0 on success, 1 on failure.
"""

import hashlib
import json
import os
import sys
from typing import Any

ALLOWED_ARGS = ("algo", "text")
ALGORITHMS = ("sha256", "sha1", "md5")
DEFAULT_ALGO = "sha256"


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


def require_algo(args: dict[str, Any]) -> str:
    algo = args.get("algo", DEFAULT_ALGO)
    if algo not in ALGORITHMS:
        raise ToolError('"algo" must be "sha256", "sha1" or "md5"')
    return str(algo)


def require_text(args: dict[str, Any]) -> str:
    text = args.get("text")
    if not isinstance(text, str):
        raise ToolError('"text" is required and must be a string')
    return text


def hexdigest(algo: str, text: str) -> str:
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ToolError('"text" contains a lone surrogate and cannot be encoded as UTF-8') from exc
    # Checksums, not security: this keeps md5/sha1 usable on FIPS-mode Pythons.
    return hashlib.new(algo, data, usedforsecurity=False).hexdigest()


def run(args: dict[str, Any]) -> dict[str, Any]:
    reject_unknown(args)
    algo = require_algo(args)
    text = require_text(args)
    return {"ok": True, "algo": algo, "hexdigest": hexdigest(algo, text)}


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
