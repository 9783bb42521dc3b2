"""The gate: every tool execution passes `gated_run` (PreToolUse → execute → PostToolUse)."""
