"""PreToolUse example (JSON protocol): the Danger Demo runs only with `"confirm": true`.

Prints one JSON decision in Claude Code's `hookSpecificOutput` form. Registered with
`failClosed: true`, so if this script cannot run at all, the call is denied.
"""

import json
import sys


def decide(payload: dict) -> dict:
    confirmed = payload.get("tool_input", {}).get("confirm") is True
    return {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "allow" if confirmed else "deny",
            "permissionDecisionReason": (
                "confirmed by the caller" if confirmed
                else 'the Danger Demo needs "confirm": true in its arguments'
            ),
        }
    }


if __name__ == "__main__":
    try:
        payload = json.load(sys.stdin)
    except ValueError:
        print("guard-danger-demo: unreadable hook payload", file=sys.stderr)
        sys.exit(2)
    print(json.dumps(decide(payload)))
