"""Run one hook command the way Claude Code does: `/bin/sh -c`, payload JSON on stdin.

The child runs in its own process group with cwd = the home; a timeout or a cancelled call
kills the whole group (`tfunnel.proc.children`). Never raises for a hook that misbehaves: everything
it did is reported in the `HookRun` for `decision.interpret`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import trio

from tfunnel.errors import ToolFailure
from tfunnel.gate.decision import HookRun
from tfunnel.gate.manifest import HookSpec
from tfunnel.proc.children import ProcessSpec, run_child

# A decision is a few hundred bytes; a hook printing more than this is misbehaving, and an
# unreadable decision is a deny.
HOOK_OUTPUT_CAP = 256 * 1024


def hook_variables(home: Path, hooks_dir: Path) -> dict[str, str]:
    """The variables a hook command gets besides the gateway's environment (Claude Code's own
    `CLAUDE_PROJECT_DIR`, and where its scripts live)."""
    return {"CLAUDE_PROJECT_DIR": str(home), "HOOKS_DIR": str(hooks_dir), "TFUNNEL_HOME": str(home)}


async def run_hook(spec: HookSpec, payload: Mapping[str, Any], *, home: Path, hooks_dir: Path,
                   env: Mapping[str, str], slots: trio.CapacityLimiter | None = None) -> HookRun:
    child_env = {**env, **hook_variables(home, hooks_dir)}
    process = ProcessSpec(
        argv=["/bin/sh", "-c", spec.command],
        cwd=str(home),
        env=child_env,
        # As Claude Code writes it (tests/field/claude-code): one line of compact JSON and a newline,
        # so a hook that reads a line (`read -r`, `readline`) gets the whole payload.
        stdin=json.dumps(payload, ensure_ascii=True, separators=(",", ":")).encode() + b"\n",
        timeout_s=spec.timeout_s,
        output_cap=HOOK_OUTPUT_CAP,
    )
    try:
        outcome = await run_child(process, slots)
    except ToolFailure as exc:
        return HookRun(spec.id, None, "", "", start_error=str(exc), fail_closed=spec.fail_closed)
    return HookRun(
        hook_id=spec.id,
        exit_code=outcome.returncode,
        stdout=outcome.stdout.decode("utf-8", "replace"),
        stderr=outcome.stderr.decode("utf-8", "replace"),
        over_cap=outcome.stdout_total > HOOK_OUTPUT_CAP or outcome.stderr_total > HOOK_OUTPUT_CAP,
        timed_out=outcome.timed_out,
        fail_closed=spec.fail_closed,
    )
