"""UUID tool: generates 1 to 100 random (version 4) UUIDs.

Contract (kept by _tool_io.py, which must sit next to this file): args arrive as
JSON in env TOOLFUNNEL_TOOL_ARGS (or on stdin when the env var is empty); one JSON
line goes to stdout; exit 0 on success, 1 on failure.
"""

import sys
import uuid
from typing import Any

from _tool_io import ToolError, as_integer, main, reject_unknown

ALLOWED_ARGS = ("count",)
MIN_COUNT = 1
MAX_COUNT = 100


def require_count(args: dict[str, Any]) -> int:
    count = as_integer(args.get("count", MIN_COUNT))
    if count is None or not MIN_COUNT <= count <= MAX_COUNT:
        raise ToolError(f'"count" must be an integer from {MIN_COUNT} to {MAX_COUNT}')
    return count


def run(args: dict[str, Any]) -> dict[str, Any]:
    reject_unknown(args, ALLOWED_ARGS)
    count = require_count(args)
    return {"ok": True, "uuids": [str(uuid.uuid4()) for _ in range(count)]}


if __name__ == "__main__":
    sys.exit(main(run))
