"""Danger demo tool: the PreToolUse gate's demo target.

Its only side effect is appending one line,
`<ISO-8601 UTC timestamp> danger-tool fired {"args":...,"argv":[...]}`,
to the file named by env TOOLFUNNEL_DANGER_LOG (created if missing). A test
that denies this tool at the gate can then prove it never ran by checking that
file. With TOOLFUNNEL_DANGER_LOG unset it still "fires" but writes nothing.

Contract (kept by _tool_io.py, which must sit next to this file): args arrive as
JSON in env TOOLFUNNEL_TOOL_ARGS (or on stdin when the env var is empty); one JSON
line goes to stdout; exit 0 on success, 1 on failure.
"""

import json
import os
import sys
from datetime import UTC, datetime
from typing import Any

from _tool_io import ToolError, main

LOG_ENV = "TOOLFUNNEL_DANGER_LOG"


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


if __name__ == "__main__":
    sys.exit(main(run))
