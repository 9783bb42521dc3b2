"""Map a finished tool process to a `CallToolResult` (pure)."""

from __future__ import annotations

import json
import signal

from tfunnel.proc.children import ProcessOutcome
from tfunnel.protocol.results import ToolResult

# How much of stderr (or stdout) a failed run shows the client: enough to see the error,
# small enough not to flood the model's context.
ERROR_TAIL_CHARS = 4000


def truncation_marker(total: int, cap: int) -> str:
    return f"\n[output truncated: {total} bytes, cap {cap} bytes]"


def map_outcome(tool: str, outcome: ProcessOutcome, timeout_s: float, cap: int) -> ToolResult:
    """Exit 0 + one JSON value → that JSON (+ `structuredContent` for an object); exit 0
    otherwise → stdout as text; non-zero exit, signal or timeout → `isError` naming why."""
    if outcome.timed_out:
        return ToolResult.failure(
            f"tool {tool!r} timed out after {timeout_s:g} s and was killed "
            "(raise timeoutS on its register entry or limits.toolTimeoutS in toolfunnel.json)"
        )
    stdout = outcome.stdout.decode("utf-8", "replace")
    if outcome.returncode == 0:
        if outcome.stdout_total > cap:
            return ToolResult.text(stdout + truncation_marker(outcome.stdout_total, cap))
        stripped = stdout.strip()
        try:
            value = json.loads(stripped)
        except ValueError:
            return ToolResult.text(stdout)
        structured = value if isinstance(value, dict) else None
        return ToolResult(content=({"type": "text", "text": stripped},), structured=structured)
    stderr = outcome.stderr.decode("utf-8", "replace").strip()
    detail = _tail(stderr or stdout.strip())
    return ToolResult.failure(f"tool {tool!r} {_exit_text(outcome.returncode)}" +
                              (f":\n{detail}" if detail else ""))


def _exit_text(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


def _tail(text: str) -> str:
    return text if len(text) <= ERROR_TAIL_CHARS else "…" + text[-ERROR_TAIL_CHARS:]
