"""Text stats tool: counts characters, words, lines and UTF-8 bytes of a text.

Contract (kept by _tool_io.py, which must sit next to this file): args arrive as
JSON in env TOOLFUNNEL_TOOL_ARGS (or on stdin when the env var is empty); one JSON
line goes to stdout; exit 0 on success, 1 on failure.
"""

import sys
from typing import Any

from _tool_io import main, reject_unknown, require_text, text_utf8

ALLOWED_ARGS = ("text",)


def count_lines(text: str) -> int:
    normalised = text.replace("\r\n", "\n")
    if not normalised:
        return 0
    # "a\nb\n" is two lines, not three: a final newline terminates, it does not start.
    trailing = 1 if normalised.endswith("\n") else 0
    return normalised.count("\n") + 1 - trailing


def run(args: dict[str, Any]) -> dict[str, Any]:
    reject_unknown(args, ALLOWED_ARGS)
    text = require_text(args)
    return {
        "ok": True,
        "chars": len(text),
        "words": len(text.split()),
        "lines": count_lines(text),
        "bytes": len(text_utf8(text)),
    }


if __name__ == "__main__":
    sys.exit(main(run))
