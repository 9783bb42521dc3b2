"""PostToolUse example: append one line per finished call to logs/hook-audit.jsonl in the home.

Records the tool name as Claude Code gives it (`tool_name`: a register tool's id, or
`mcp__<upstream>__<tool>` for an upstream tool), the session and whether the result was an error;
never the arguments or the result (they may hold secrets). Always exits 0: PostToolUse is advisory.
"""

import json
import os
import sys
import time
from pathlib import Path

try:
    payload = json.load(sys.stdin)
except ValueError:
    sys.exit(0)
home = Path(os.environ.get("CLAUDE_PROJECT_DIR", "."))
record = {
    "ts": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    "tool": payload.get("tool_name"),
    "session": payload.get("session_id"),
    "isError": bool((payload.get("tool_response") or {}).get("isError")),
}
(home / "logs").mkdir(exist_ok=True)
with open(home / "logs" / "hook-audit.jsonl", "a", encoding="utf-8") as fh:
    fh.write(json.dumps(record) + "\n")
