#!/usr/bin/env bash
# A hook written for Claude Code, used here unchanged: before any tool touches a system path
# (/etc, /usr, /boot), ask the user. It reads the hook payload on stdin and answers with
# Claude Code's JSON protocol; tfunnel asks through the client (elicitation) or applies
# gate.askFallback when the client cannot be asked.
input="$(cat)"
if printf '%s' "$input" | grep -Eq '"(/etc|/usr|/boot)(/|")'; then
  cat <<'JSON'
{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "ask",
 "permissionDecisionReason": "This call touches a system path (/etc, /usr or /boot)."}}
JSON
fi
exit 0
