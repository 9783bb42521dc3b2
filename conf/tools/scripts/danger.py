"""Danger demo tool: the PreToolUse gate's demo target.

Its only side effect is appending one line,
`<ISO-8601 UTC timestamp> danger-tool fired {"args":...,"argv":[...]}`,
to the file named by env TOOLFUNNEL_DANGER_LOG (created if missing). A test
that denies this tool at the gate can then prove it never ran by checking that
file. With TOOLFUNNEL_DANGER_LOG unset it still "fires" but writes nothing.

Contract: args arrive as JSON in env TOOLFUNNEL_TOOL_ARGS (or on stdin when the
env var is empty); one JSON line goes to stdout; exit 0 on success, 1 on failure.
"""

import json
import os
import sys
from datetime import UTC, datetime
from typing import Any

LOG_ENV = "TOOLFUNNEL_DANGER_LOG"


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


def utc_timestamp() -> str:
    """The current time in the same shape as JavaScript's Date.toISOString()."""
    now = datetime.now(UTC)
    return now.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def log_line(args: dict[str, Any], argv: list[str]) -> str:
    # ensure_ascii keeps any newline or odd character escaped, so this stays one line.
    payload = json.dumps({"args": args, "argv": argv}, separators=(",", ":"))
    return f"{utc_timestamp()} danger-tool fired {payload}\n"


def append_log(path: str, line: str) -> None:
    try:
        # newline="" so the line ends in a bare "\n" on every platform.
        with open(path, "a", encoding="utf-8", newline="") as log:
            log.write(line)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise ToolError(f"cannot append to {LOG_ENV} file {json.dumps(path)}: {reason}") from exc


def run(args: dict[str, Any]) -> dict[str, Any]:
    argv = sys.argv[1:]
    log_path = os.environ.get(LOG_ENV) or None
    if log_path is not None:
        append_log(log_path, log_line(args, argv))
    return {"ok": True, "fired": True, "wrote": log_path is not None, "logPath": log_path}


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
