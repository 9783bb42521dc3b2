"""PreToolUse example: block calls whose input looks destructive (exit 2 + reason on stderr).

Claude Code's exit-code protocol: exit 0 = no objection, exit 2 = block, stderr = the reason.
An unreadable payload is blocked too: a gate that cannot read its input must not say yes.
"""

import json
import re
import sys

DANGEROUS = [
    (re.compile(r"\brm\s+-[a-zA-Z]*[rf][a-zA-Z]*\s+(/|~|\*|\$HOME)"), "recursive delete of a root or home"),
    (re.compile(r"\bmkfs(\.\w+)?\b"), "formatting a filesystem"),
    (re.compile(r"\bformat\s+[a-zA-Z]:"), "formatting a drive"),
    (re.compile(r":\(\)\s*\{\s*:\|:&\s*\};:"), "a fork bomb"),
    (re.compile(r"\bdd\s+[^\n]*of=/dev/(sd|nvme|hd)"), "overwriting a disk device"),
]


def main() -> int:
    try:
        payload = json.load(sys.stdin)
        text = json.dumps(payload.get("tool_input", {}))
    except (ValueError, AttributeError):
        print("deny-dangerous: unreadable hook payload", file=sys.stderr)
        return 2
    for pattern, what in DANGEROUS:
        if pattern.search(text):
            print(f"blocked by deny-dangerous: the input looks like {what}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
