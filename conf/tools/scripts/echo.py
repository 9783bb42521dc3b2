"""Echo tool: returns the arguments it was given, plus its command-line argv.

Contract (kept by _tool_io.py, which must sit next to this file): args arrive as
JSON in env TOOLFUNNEL_TOOL_ARGS (or on stdin when the env var is empty); one JSON
line goes to stdout; exit 0 on success, 1 on failure.
"""

import sys
from typing import Any

from _tool_io import main


def run(args: dict[str, Any]) -> dict[str, Any]:
    """Echo accepts any object, so there is nothing to validate."""
    return {"ok": True, "args": args, "argv": sys.argv[1:]}


if __name__ == "__main__":
    sys.exit(main(run))
