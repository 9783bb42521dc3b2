"""Hash tool: hex digest (sha256, sha1 or md5) of the UTF-8 bytes of a text.

Contract (kept by _tool_io.py, which must sit next to this file): args arrive as
JSON in env TOOLFUNNEL_TOOL_ARGS (or on stdin when the env var is empty); one JSON
line goes to stdout; exit 0 on success, 1 on failure.
"""

import hashlib
import sys
from typing import Any

from _tool_io import ToolError, main, reject_unknown, require_text, text_utf8

ALLOWED_ARGS = ("algo", "text")
ALGORITHMS = ("sha256", "sha1", "md5")
DEFAULT_ALGO = "sha256"


def require_algo(args: dict[str, Any]) -> str:
    algo = args.get("algo", DEFAULT_ALGO)
    if algo not in ALGORITHMS:
        raise ToolError('"algo" must be "sha256", "sha1" or "md5"')
    return str(algo)


def hexdigest(algo: str, text: str) -> str:
    data = text_utf8(text)
    # Checksums, not security: this keeps md5/sha1 usable on FIPS-mode Pythons.
    return hashlib.new(algo, data, usedforsecurity=False).hexdigest()


def run(args: dict[str, Any]) -> dict[str, Any]:
    reject_unknown(args, ALLOWED_ARGS)
    algo = require_algo(args)
    text = require_text(args)
    return {"ok": True, "algo": algo, "hexdigest": hexdigest(algo, text)}


if __name__ == "__main__":
    sys.exit(main(run))
